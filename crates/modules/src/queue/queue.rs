//! TEMPORARY STUB written by the lead so the crate compiles; the engineer who owns this file replaces it entirely.
use bessemer_core::{Error, ModuleClass};

/// Placeholder class (not functional yet).
pub static CLASS: ModuleClass = ModuleClass {
    name: "Stub_queue",
    name_template: "stub_queue",
    help: "not implemented yet",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    mt_safe: false,
    create: |_, _| Err(Error::unsupported("not implemented yet")),
};

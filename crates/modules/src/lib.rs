//! Bessemer module classes: one file per class, grouped by kind, each kind listing its
//! classes in its `mod.rs` (`CLASSES`), all joined in [`classes`].

pub mod basic;
/// Internet checksum helpers (moved to [`bessemer_core::checksum`], re-exported here).
pub use bessemer_core::checksum;
pub mod classify;
pub mod encap;
pub mod gates;
pub mod hash;
pub mod headers;
pub mod io;
pub mod measure;
pub mod queue;
pub mod rewrite;
pub mod samples;
pub mod upf;
pub mod util;

use bessemer_core::ModuleClass;
use std::sync::OnceLock;

/// Every module class, sorted by name as `show mclass` lists them (adding a class = one file
/// + one line in its kind's `CLASSES`).
pub fn classes() -> &'static [&'static ModuleClass] {
    static ALL: OnceLock<Vec<&'static ModuleClass>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<&'static ModuleClass> = [
            basic::CLASSES,
            classify::CLASSES,
            encap::CLASSES,
            io::CLASSES,
            measure::CLASSES,
            queue::CLASSES,
            rewrite::CLASSES,
            upf::CLASSES,
        ]
        .concat();
        all.sort_by_key(|c| c.name);
        all
    })
}

/// Looks up a class by its BESS name.
pub fn find(name: &str) -> Option<&'static ModuleClass> {
    classes().iter().copied().find(|c| c.name == name)
}

//! Modules that rewrite packet bytes or metadata.
pub mod headers;
pub mod mac_swap;
pub mod random_update;
#[allow(clippy::module_inception)]
pub mod rewrite;
pub mod set_metadata;
pub mod update;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &mac_swap::CLASS,
    &random_update::CLASS,
    &rewrite::CLASS,
    &set_metadata::CLASS,
    &update::CLASS,
];

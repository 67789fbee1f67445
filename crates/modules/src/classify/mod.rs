//! Classifiers: modules that choose an output gate per packet from its headers or metadata.

use bessemer_core::ModuleClass;

pub mod exact_match;
pub mod ip_lookup;
pub mod l2_forward;
pub mod table;
pub mod wildcard_match;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &exact_match::CLASS,
    &ip_lookup::CLASS,
    &l2_forward::CLASS,
    &wildcard_match::CLASS,
];

//! Classifiers: modules that choose an output gate per packet from its headers or metadata.

pub mod acl;
pub mod bpf;
pub mod hash_lb;
pub mod url_filter;
pub mod vlan_split;
pub mod worker_split;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[&hash_lb::CLASS, &vlan_split::CLASS, &worker_split::CLASS];

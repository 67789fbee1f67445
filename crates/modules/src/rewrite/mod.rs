//! Modules that rewrite packet bytes or metadata.
pub mod arp_responder;
pub mod headers;
pub mod ip_checksum;
pub mod ip_swap;
pub mod l4_checksum;
pub mod mac_swap;
pub mod nat;
pub mod offset_fields;
pub mod random_update;
#[allow(clippy::module_inception)]
pub mod rewrite;
pub mod set_metadata;
pub mod static_nat;
pub mod update;
pub mod update_ttl;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &arp_responder::CLASS,
    &ip_checksum::CLASS,
    &ip_swap::CLASS,
    &l4_checksum::CLASS,
    &mac_swap::CLASS,
    &nat::CLASS,
    &random_update::CLASS,
    &rewrite::CLASS,
    &set_metadata::CLASS,
    &static_nat::CLASS,
    &update::CLASS,
    &update_ttl::CLASS,
];

//! The omec-project fork's classes for the 5G UPF: GTP-U parsing, decapsulation,
//! encapsulation and echo, per-session counters, QoS metering.
pub mod counter;
pub mod flow_measure;
pub mod gtpu;
pub mod gtpu_decap;
pub mod gtpu_echo;
pub mod gtpu_encap;
pub mod gtpu_parser;
pub mod gtpu_path_monitoring;
pub mod ip_defrag;
pub mod ip_frag;
pub mod qos;
pub mod sequential_update;

use bessemer_core::ModuleClass;

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &counter::CLASS,
    &flow_measure::CLASS,
    &gtpu_decap::CLASS,
    &gtpu_echo::CLASS,
    &gtpu_encap::CLASS,
    &gtpu_parser::CLASS,
    &gtpu_path_monitoring::CLASS,
    &ip_defrag::CLASS,
    &ip_frag::CLASS,
    &qos::CLASS,
    &sequential_update::CLASS,
];

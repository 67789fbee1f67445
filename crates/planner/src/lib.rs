//! Dragonet-style planner (seed 003): a dataflow model of NIC capabilities (the PRG), the
//! pipeline as a second graph (the LPG), predicates over both, NIC models with hardware
//! oracles, per-queue specialisation of the pipeline, and a policy-driven search of the
//! NIC's configuration space.

pub mod embed;
pub mod ethtool;
pub mod graph;
pub mod interrupt;
pub mod nic;
pub mod offload;
pub mod pipeline;
pub mod pred;
pub mod request;
pub mod search;
pub mod testbed;

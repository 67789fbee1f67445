//! Queueing modules.
#[allow(clippy::module_inception)]
pub mod queue;

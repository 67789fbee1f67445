//! Measurement and inspection modules.
pub mod dump;
#[allow(clippy::module_inception)]
pub mod measure;
pub mod timestamp;

//! Modules that rewrite packet bytes or metadata.
pub mod random_update;
#[allow(clippy::module_inception)]
pub mod rewrite;
pub mod set_metadata;
pub mod update;

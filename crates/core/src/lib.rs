//! Bessemer dataplane core.
pub mod metadata;
pub mod sched;
pub mod tsc;

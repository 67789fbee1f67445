//! Sources, sinks and pure forwarding/splitting modules.
pub mod bypass;
pub mod merge;
pub mod noop;
pub mod random_split;
pub mod replicate;
pub mod round_robin;
pub mod sink;
pub mod source;
pub mod split;

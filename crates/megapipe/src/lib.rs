//! MegaPipe on io_uring: per-core channels carrying batched asynchronous socket requests and
//! completion events, partitioned listeners (`SO_REUSEPORT` + `SO_INCOMING_CPU`) and
//! lightweight handles (io_uring direct descriptors). See docs/megapipe.md.

pub mod channel;
pub mod net;

pub use channel::{Channel, Command, Config, Errno, Error, Event, Handle, Result, Stats};
pub mod apps;
pub mod ffi;

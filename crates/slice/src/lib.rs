//! Slices: a queue pair between bessemerd and one external process (NetSlice's user-space
//! channel). The daemon creates a shared region with memfd_create and hands it, with an
//! eventfd for wake-ups, to the app over a SOCK_SEQPACKET Unix socket (SCM_RIGHTS). Four
//! single-producer/single-consumer descriptor rings in the region carry frame offsets and
//! lengths both ways; the frames live in the region's packet area, which the app reads and
//! writes in place, and which the daemon's port driver turns into pipeline packets in place
//! (zero copy both ways). See docs/slices.md.

pub mod app;
pub mod daemon;
pub mod ffi;
pub mod layout;
pub mod sys;

pub use app::{AppCounters, Desc, Slice};
pub use daemon::{CounterSnapshot, Server, SessionHooks, SliceCounters};

/// Attaches to the slice at `path` (see [`Slice::attach`]).
pub fn attach(path: &str) -> std::io::Result<Slice> {
    Slice::attach(path)
}

//! Bessemer dataplane core: packet memory, batches, the module graph, dynamic metadata, the
//! traffic-class scheduler and pinned worker threads (BESS's execution model).
//!
//! See `docs/ARCHITECTURE.md` for how the parts fit.

pub mod batch;
pub mod checksum;
mod counter;
mod drop;
pub mod engine;
pub mod error;
pub mod exec;
pub mod graph;
pub mod hook;
mod limits;
pub mod mac;
pub mod mem;
pub mod metadata;
pub mod module;
mod names;
pub mod netns;
pub mod packet;
pub mod pcap;
pub mod pool;
pub mod port;
pub mod sched;
pub mod sockopt;
pub mod testing;
pub mod trace;
pub mod tsc;
pub mod value;

pub use batch::{PacketBatch, MAX_BURST};
pub use engine::{Engine, EngineConfig};
pub use error::{Error, Result};
pub use exec::Context;
pub use metadata::{AccessMode, AttrOffset, AttrSpec};
pub use module::{
    CommandSpec, CoreDrop, DropReason, Handler, InitContext, Instance, Module, ModuleClass,
    SharedModule, ALL_WORKERS,
};
pub use packet::Packet;
pub use pool::{PacketPool, PoolCache, PoolKind};
pub use sched::TaskResult;
pub use value::{Args, Value};

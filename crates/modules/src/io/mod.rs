//! Port I/O: modules that move packets between ports and the graph. Each claims the queues
//! it uses (so no two modules share a queue) and counts what crosses them.

pub mod port_inc;
pub mod port_out;
pub mod queue_inc;
pub mod queue_out;

use crate::util::IDLE;
use bessemer_core::port::{QueueClaim, RxQueue, TxQueue};
use bessemer_core::sched::TaskResult;
use bessemer_core::{Args, Context, Error, ModuleClass, PacketBatch, Result};

/// The classes of this kind.
pub static CLASSES: &[&ModuleClass] = &[
    &port_inc::CLASS,
    &port_out::CLASS,
    &queue_inc::CLASS,
    &queue_out::CLASS,
];

bessemer_core::drop_reasons! {
    /// Drop reasons of the output modules (PortOut, QueueOut).
    pub enum TxDrop {
        /// The driver could not take the packet (ring full, link down, peer gone).
        TxFailed = "tx_failed",
    }
}

/// One owned receive queue.
pub(crate) struct Rx {
    pub(crate) claim: QueueClaim,
    pub(crate) queue: Box<dyn RxQueue>,
}

impl Rx {
    /// Receives a burst and sends it out of gate 0, counting it on the queue.
    pub(crate) fn poll(&mut self, ctx: &mut Context, burst: usize) -> TaskResult {
        if burst == 0 {
            return IDLE; // set_burst 0: the task is off (drivers need not handle 0)
        }
        let mut batch = PacketBatch::new();
        let n = self.queue.recv(ctx.cache(), &mut batch, burst);
        if n == 0 {
            return IDLE;
        }
        let bytes: usize = batch.pkts().iter().map(|p| p.len()).sum();
        let st = self.claim.stats();
        st.packets.add(n as u64);
        st.bytes.add(bytes as u64);
        ctx.forward(0, &mut batch);
        TaskResult {
            block: false,
            packets: n as u32,
            bits: (bytes * 8) as u64,
        }
    }
}

/// One owned transmit queue.
pub(crate) struct Tx {
    pub(crate) claim: QueueClaim,
    pub(crate) queue: Box<dyn TxQueue>,
}

impl Tx {
    /// Sends a batch; what the driver could not take is dropped and counted.
    pub(crate) fn send(&mut self, ctx: &mut Context, batch: &mut PacketBatch) {
        let total: usize = batch.pkts().iter().map(|p| p.len()).sum();
        let sent = self.queue.send(ctx.cache(), batch);
        let left: usize = batch.pkts().iter().map(|p| p.len()).sum();
        let st = self.claim.stats();
        st.packets.add(sent as u64);
        st.bytes.add((total - left) as u64);
        if !batch.is_empty() {
            st.dropped.add(batch.len() as u64);
            ctx.drop_batch(batch, TxDrop::TxFailed);
        }
    }
}

/// The `port` field every I/O argument has.
pub(crate) fn port_name<'a>(a: &mut Args<'a>, msg: &str) -> Result<&'a str> {
    a.str("port")?
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Error::invalid(format!("{msg}.port: a port name is required")))
}

/// Claims every queue of one direction of `port` (`n` of them, `dir` naming the direction in
/// errors) with `claim`. All or nothing: when a queue is taken, dropping the claims made
/// before it releases them.
pub(crate) fn claim_all<Q>(
    port: &str,
    dir: &str,
    n: usize,
    claim: impl FnMut(usize) -> Result<Q>,
) -> Result<Vec<Q>> {
    if n == 0 {
        return Err(Error::invalid(format!("port '{port}' has no {dir} queues")));
    }
    (0..n).map(claim).collect()
}

/// `desc` of a module owning all of a port's queues of one direction: the port name (from the
/// first claim) and the number of queues.
pub(crate) fn queues_desc(first: Option<&QueueClaim>, n: usize) -> String {
    let p = first.map(|c| c.port().name()).unwrap_or("");
    format!("{p}: {n} queue(s)")
}

//! Running the graph: the per-worker [`Context`] modules use to emit, forward and drop
//! packets, and the loop that carries a task's batches through the graph without recursion.
//!
//! Batches waiting for an input gate sit in a small pending list; the one whose module is
//! earliest in longest-path order runs next, so batches from several upstream gates that
//! reach the same input gate are merged (when they fit in one batch) before it runs.

use crate::batch::{PacketBatch, MAX_BURST};
use crate::drop::{CoreDrop, DropReason, CORE_BASE};
use crate::graph::{InstanceCell, Node, OGate, Pipeline};
use crate::metadata::AttrOffset;
use crate::packet::Packet;
use crate::pool::{PacketPool, PoolCache};
use crate::sched::{RunGroup, TaskId, TaskResult};

mod trace;

/// Most module runs one task invocation may cause (bounds loops in the graph).
pub const MAX_HOPS: usize = 4096;

/// Runs `f` holding the node's lock: an exclusive instance that other workers reach too
/// (BESS runs such placements unguarded). A module call is short and never re-enters the
/// graph, so a spin lock is enough and cannot deadlock. Out of line: the single-worker path,
/// the common one, pays one branch.
#[cold]
#[inline(never)]
fn locked<R>(node: &Node, f: impl FnOnce() -> R) -> R {
    use std::sync::atomic::Ordering;
    struct Unlock<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Unlock<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    while node
        .lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    let _unlock = Unlock(&node.lock);
    f()
}

/// A forward of the batch being processed, recorded for the runner to carry out: the gate
/// (its destination is read there once the module returns) and the packet count.
#[derive(Clone, Copy)]
struct Moved {
    /// Null: nothing was moved. Valid until the module returns (the graph does not change
    /// during a run).
    og: *const OGate,
    n: usize,
}

impl Moved {
    const NONE: Moved = Moved {
        og: std::ptr::null(),
        n: 0,
    };
}

struct Pending {
    prio: u32,
    dst: u32,
    igate: u16,
    batch: Box<PacketBatch>,
}

/// A worker's execution context, handed to every module call.
pub struct Context {
    /// Worker id (or `usize::MAX` for the control thread).
    pub wid: usize,
    cache: PoolCache,
    now: u64,
    graph: *const Pipeline,
    cur_node: *const Node,
    staging: Vec<Option<Box<PacketBatch>>>,
    touched: Vec<u16>,
    // Boxed so moving a batch between lists moves a pointer, not 264 bytes.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<PacketBatch>>,
    pending: Vec<Pending>,
    cur_input: *const PacketBatch,
    /// `cur_input` while `forward`'s fast path may move it: nothing pending and nothing
    /// moved yet; null otherwise. One pointer compare then stands for three checks.
    fast_input: *const PacketBatch,
    /// Where the batch being processed was forwarded whole (`og` null: it was not).
    moved: Moved,
    /// Packets dropped through this context (every reason; BESS's worker `silent_drops`).
    dropped: u64,
    /// Runtime sampling: runs left until the next timed one, and the generator of the
    /// periods between them.
    rt_task_cd: u32,
    rt_rng: u32,
    /// A timed run sent nothing on: the next run that does has its drain timed.
    rt_want_drain: bool,
    /// The trace being recorded by a traced run (`drain` with `TRACE`); None otherwise.
    tracer: Option<std::sync::Arc<crate::trace::Tracer>>,
    /// The capture points of the trace whose `points_gen` is `trace_gen` (a cache, so that
    /// a traced call checks them without the trace's lock).
    trace_points: Vec<String>,
    trace_gen: u64,
}

/// Mean number of runs between two sampled ones (runtime sampling): each period is drawn
/// from `RT_PERIOD / 2 .. RT_PERIOD * 3 / 2`, so that no periodic pattern of tasks or
/// paths is always or never sampled.
pub const RT_PERIOD: u32 = 512;

// SAFETY: the raw pointers are only dereferenced while the owning worker runs the graph, and
// the graph outlives every run (changes happen with the worker paused).
unsafe impl Send for Context {}

impl Context {
    /// A context for worker `wid` allocating from `pool`.
    pub fn new(wid: usize, pool: &PacketPool) -> Context {
        Context {
            wid,
            cache: pool.cache(),
            now: crate::tsc::rdtsc(),
            graph: std::ptr::null(),
            cur_node: std::ptr::null(),
            staging: Vec::new(),
            touched: Vec::new(),
            spare: (0..16).map(|_| Box::new(PacketBatch::new())).collect(),
            pending: Vec::with_capacity(64),
            cur_input: std::ptr::null(),
            fast_input: std::ptr::null(),
            moved: Moved::NONE,
            dropped: 0,
            // The first run is sampled (and, if it sends nothing, the drain of the first
            // that does), so that even a few packets give every module they pass a
            // measurement.
            rt_task_cd: 1,
            rt_want_drain: true,
            rt_rng: 0x9e37_79b9 ^ (wid as u32).wrapping_mul(0x85eb_ca6b),
            tracer: None,
            trace_points: Vec::new(),
            trace_gen: 0,
        }
    }

    /// The next sampling period (xorshift32).
    #[cold]
    fn rt_period(&mut self) -> u32 {
        let mut x = self.rt_rng.max(1);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rt_rng = x;
        RT_PERIOD / 2 + x % RT_PERIOD
    }

    /// Counts a call of a module several workers run, on this worker's slot.
    #[inline(always)]
    fn rt_count_multi(&self, node: &Node, packets: usize) {
        if let Some(s) = node.rt.get(self.wid) {
            s.multi_calls.add(1);
            s.multi_packets.add(packets as u64);
        }
    }

    /// Records one timed call of `node` on this worker.
    #[inline(always)]
    fn rt_sample(&self, node: &Node, packets: u64, cycles: u64) {
        if let Some(s) = node.rt.get(self.wid) {
            s.s_calls.add(1);
            s.s_packets.add(packets);
            s.s_cycles.add(cycles);
        }
    }

    /// Packets dropped through this context so far, under any reason (dead ends included):
    /// what BESS counts as its worker's `silent_drops` (its modules' `DropPacket` and sends
    /// to a dead end). Drops of packets that never existed (`count_drops`) are not in it.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    #[inline(always)]
    fn node<'g>(&self) -> &'g Node {
        debug_assert!(!self.cur_node.is_null(), "module call outside a graph run");
        // SAFETY: set by `enter` to a node of the graph being run.
        unsafe { &*self.cur_node }
    }

    #[inline(always)]
    pub(crate) fn enter(&mut self, graph: &Pipeline, id: u32) {
        self.graph = graph;
        self.cur_node = graph.node(id);
    }

    /// A recent TSC value (refreshed by `refresh_now` and by the worker every few rounds);
    /// call `refresh_now` when precision matters.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Refreshes the cached TSC value (for modules that need a fresh one).
    #[inline(always)]
    pub fn refresh_now(&mut self) -> u64 {
        self.now = crate::tsc::rdtsc();
        self.now
    }

    /// True if tasks of more than one worker reach the module being run (`Node::multi`), so
    /// that another thread may run it at the same time; false means this worker is the only
    /// one until the workers are next paused.
    ///
    /// Why a module may skip its locks on false: the engine recomputes the flag only inside
    /// `Engine::paused`, with every worker stopped at a task boundary, and a worker's pause
    /// and resume go through its pause mutex, so the write happens before the worker's next
    /// read. A module that becomes shared (a second worker attached) is therefore never run
    /// by the new worker while a call that read false is still running, and the call after
    /// the resume reads true. Read it once per call and keep it for the call. It says nothing
    /// about thread-safe commands (`mt_safe` entries of a `SharedModule`), which run on the
    /// control thread beside the workers: a module must exclude those by its own means (and
    /// in a command handler the flag has no meaning).
    #[inline(always)]
    pub fn shared(&self) -> bool {
        self.node().multi
    }

    /// Name of the module being run.
    pub fn module_name(&self) -> &str {
        &self.node().name
    }

    /// Offset of the current module's metadata attribute `id` (as declared at init).
    #[inline(always)]
    pub fn attr(&self, id: usize) -> AttrOffset {
        self.node()
            .offsets
            .get(id)
            .copied()
            .unwrap_or(AttrOffset::NoRead)
    }

    /// The worker's pool cache.
    #[inline(always)]
    pub fn cache(&mut self) -> &mut PoolCache {
        &mut self.cache
    }

    /// Allocates one packet of `len` bytes.
    #[inline(always)]
    pub fn alloc(&mut self, len: usize) -> Option<Packet> {
        self.cache.alloc(len)
    }

    /// Allocates one packet of exactly `len` bytes, from the large-frame pool when it does not
    /// fit a default buffer (see `PoolCache::alloc_any`).
    #[inline]
    pub fn alloc_any(&mut self, len: usize) -> Option<Packet> {
        self.cache.alloc_any(len)
    }

    /// Appends `n` fresh packets of `len` bytes to `batch`; returns how many (0 if exhausted).
    #[inline(always)]
    pub fn alloc_bulk(&mut self, batch: &mut PacketBatch, n: usize, len: usize) -> usize {
        self.cache.alloc_bulk(batch, n, len)
    }

    /// Frees a consumed packet (not a drop: e.g. a sink).
    #[inline(always)]
    pub fn free(&mut self, pkt: Packet) {
        self.cache.free(pkt)
    }

    /// Frees every packet of a batch (not a drop).
    #[inline(always)]
    pub fn free_batch(&mut self, batch: &mut PacketBatch) {
        self.cache.free_bulk(batch)
    }

    /// A second reference to `pkt` (shares bytes and metadata).
    #[inline(always)]
    pub fn clone_packet(&self, pkt: &Packet) -> Packet {
        self.cache.clone_packet(pkt)
    }

    #[inline(always)]
    fn count_drop(&self, reason: impl DropReason, n: u64) {
        let node = self.node();
        let k = node.class.drop_reasons.len();
        let r = reason.index();
        let idx = if r < k {
            r
        } else if r >= CORE_BASE {
            k + (r - CORE_BASE)
        } else {
            // A reason enum of another class with more reasons than this one: a class bug.
            debug_assert!(
                false,
                "module '{}' ({}) dropped under reason '{}', not one of its class's",
                node.name,
                node.class.name,
                reason.name()
            );
            k + CoreDrop::Unhandled.offset()
        };
        node.drops[idx.min(node.drops.len() - 1)].add_by(n, node.multi);
    }

    /// Counts `n` packets dropped under `reason` that never existed as buffers (e.g. a
    /// source that could not allocate).
    #[inline(always)]
    pub fn count_drops(&self, reason: impl DropReason, n: u64) {
        self.count_drop(reason, n);
    }

    /// Drops a packet, counted under the class's drop reason `reason`.
    #[inline(always)]
    pub fn drop_packet(&mut self, pkt: Packet, reason: impl DropReason) {
        self.count_drop(reason, 1);
        self.dropped += 1;
        self.cache.free(pkt);
    }

    /// Drops every packet of a batch under `reason`.
    #[inline(always)]
    pub fn drop_batch(&mut self, batch: &mut PacketBatch, reason: impl DropReason) {
        if !batch.is_empty() {
            self.count_drop(reason, batch.len() as u64);
            self.dropped += batch.len() as u64;
            self.cache.free_bulk(batch);
        }
    }

    #[inline(always)]
    fn spare(&mut self) -> Box<PacketBatch> {
        self.spare
            .pop()
            .unwrap_or_else(|| Box::new(PacketBatch::new()))
    }

    /// Sends one packet out of output gate `ogate` (buffered until the module returns).
    #[inline(always)]
    pub fn emit(&mut self, ogate: u16, pkt: Packet) {
        // The common case, kept small for the per-packet loops of classifiers: the gate
        // already has a staging batch with room.
        if let Some(Some(b)) = self.staging.get_mut(ogate as usize) {
            // SAFETY: staging batches are flushed as soon as they are full (below).
            unsafe { b.push_unchecked(pkt) };
            if b.is_full() {
                self.flush_staged(ogate);
            }
            return;
        }
        self.emit_first(ogate, pkt);
    }

    /// `emit` of a gate's first packet since its staging batch was last sent.
    #[cold]
    #[inline(never)]
    fn emit_first(&mut self, ogate: u16, pkt: Packet) {
        let g = ogate as usize;
        if g >= self.staging.len() {
            self.staging.resize_with(g + 1, || None);
        }
        let mut b = self.spare();
        // SAFETY: a spare batch is empty.
        unsafe { b.push_unchecked(pkt) };
        self.staging[g] = Some(b);
        self.touched.push(ogate);
    }

    /// Sends gate `ogate`'s full staging batch on.
    #[cold]
    #[inline(never)]
    fn flush_staged(&mut self, ogate: u16) {
        if let Some(b) = self.staging[ogate as usize].take() {
            self.touched.retain(|&t| t != ogate);
            self.enqueue(ogate, b);
        }
    }

    /// Sends all packets of `batch` out of output gate `ogate`, leaving `batch` empty.
    #[inline(always)]
    pub fn forward(&mut self, ogate: u16, batch: &mut PacketBatch) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        let node = self.node();
        let Some(Some(og)) = node.ogates.get(ogate as usize) else {
            return self.drop_at_deadend(batch);
        };
        // The common case, kept small so that modules inlining it stay lean: plain counters,
        // no hooks, nothing else pending, and the batch forwarded is the one the module was
        // given. The runner then moves that batch itself once the module returns, so nothing
        // is copied; the batch looks empty meanwhile.
        if og.plain && std::ptr::eq(batch, self.fast_input) {
            og.stats.packets.add(n as u64);
            og.stats.batches.add(1);
            self.moved = Moved { og, n };
            self.fast_input = std::ptr::null();
            // SAFETY: the packets stay in the slots; the runner restores the count.
            unsafe { batch.set_len(0) };
            return;
        }
        self.forward_general(ogate, batch);
    }

    #[cold]
    #[inline(never)]
    fn drop_at_deadend(&mut self, batch: &mut PacketBatch) {
        self.drop_batch(batch, CoreDrop::Deadend);
    }

    /// `forward` for everything but its common case.
    #[inline(never)]
    fn forward_general(&mut self, ogate: u16, batch: &mut PacketBatch) {
        let Some(og) = self.route(ogate, batch) else {
            return;
        };
        if std::ptr::eq(batch, self.cur_input) && self.moved.og.is_null() {
            self.moved = Moved { og, n: batch.len() };
            self.fast_input = std::ptr::null();
            // SAFETY: as in `forward`.
            unsafe { batch.set_len(0) };
            return;
        }
        let mut b = self.spare();
        b.append(batch);
        self.push_pending(Pending {
            prio: og.dst_prio,
            dst: og.dst,
            igate: og.igate,
            batch: b,
        });
    }

    /// An empty batch from the worker's spares, to fill and hand to [`Context::send`].
    #[inline(always)]
    pub fn new_batch(&mut self) -> Box<PacketBatch> {
        self.spare()
    }

    /// Sends all packets of an owned batch out of output gate `ogate`, as `forward` does, but
    /// moves the batch itself to the next module instead of copying its packets.
    #[inline(always)]
    pub fn send(&mut self, ogate: u16, batch: Box<PacketBatch>) {
        let n = batch.len();
        let node = self.node();
        if let Some(Some(og)) = node.ogates.get(ogate as usize) {
            // The common case, as in `forward`: plain counters, no hooks, nothing pending.
            if n != 0 && og.plain && self.pending.is_empty() {
                og.stats.packets.add(n as u64);
                og.stats.batches.add(1);
                let p = Pending {
                    prio: og.dst_prio,
                    dst: og.dst,
                    igate: og.igate,
                    batch,
                };
                // SAFETY: `pending` has room: it never holds more than its capacity here.
                return unsafe { self.push_pending_first(p) };
            }
        }
        self.send_general(ogate, batch);
    }

    /// Puts `p` in the empty pending list without a capacity check.
    ///
    /// # Safety
    /// `self.pending` is empty and has a capacity of at least 1 (made in `new`).
    #[inline(always)]
    unsafe fn push_pending_first(&mut self, p: Pending) {
        debug_assert!(self.pending.is_empty() && self.pending.capacity() > 0);
        self.pending.as_mut_ptr().write(p);
        self.pending.set_len(1);
        self.fast_input = std::ptr::null();
    }

    /// Adds a batch to the pending list (so `forward` of the input batch takes the general
    /// path, which merges).
    #[inline(always)]
    fn push_pending(&mut self, p: Pending) {
        self.pending.push(p);
        self.fast_input = std::ptr::null();
    }

    /// `send` for everything but its common case.
    #[inline(never)]
    fn send_general(&mut self, ogate: u16, mut batch: Box<PacketBatch>) {
        match self.route(ogate, &mut batch) {
            Some(og) => self.push_pending(Pending {
                prio: og.dst_prio,
                dst: og.dst,
                igate: og.igate,
                batch,
            }),
            None => self.spare.push(batch),
        }
    }

    /// Counts a batch leaving through `ogate` and runs the gate's hooks. Returns where it goes,
    /// or None when it was dealt with here: empty, dropped at an unconnected gate, or merged
    /// into a batch already waiting for the same input gate.
    #[inline(always)]
    fn route<'g>(&mut self, ogate: u16, batch: &mut PacketBatch) -> Option<&'g OGate> {
        if batch.is_empty() {
            return None;
        }
        let node = self.node();
        let Some(Some(og)) = node.ogates.get(ogate as usize) else {
            self.drop_batch(batch, CoreDrop::Deadend);
            return None;
        };
        let n = batch.len();
        og.stats.packets.add_by(n as u64, node.multi);
        og.stats.batches.add_by(1, node.multi);
        if !og.hooks.is_empty() {
            crate::hook::run_hooks(&og.hooks, batch);
        }
        if og.track_bits {
            og.stats
                .bits
                .add_by(batch.pkts().iter().map(|p| p.bits()).sum(), node.multi);
        }
        for p in self.pending.iter_mut() {
            if p.dst == og.dst && p.igate == og.igate && p.batch.len() + n <= MAX_BURST {
                p.batch.append(batch);
                // One batch fewer reaches the module than its gates counted (runtime).
                // SAFETY: `refresh_gates` points it at the live node `dst` names.
                let dst = unsafe { &*og.dst_node };
                dst.uncalled.add_by(1, dst.multi);
                return None;
            }
        }
        Some(og)
    }

    fn enqueue(&mut self, ogate: u16, b: Box<PacketBatch>) {
        self.send(ogate, b);
    }

    /// Moves packets emitted by the current module to the pending list.
    #[inline(always)]
    pub(crate) fn flush_outputs(&mut self, _graph: &Pipeline) {
        while let Some(g) = self.touched.pop() {
            if let Some(b) = self.staging[g as usize].take() {
                self.enqueue(g, b);
            }
        }
    }

    /// Drops what the current module emitted or forwarded instead of running it downstream
    /// (for commands run while workers run the graph), counted as `unhandled`.
    pub(crate) fn discard_outputs(&mut self) {
        while let Some(g) = self.touched.pop() {
            if let Some(mut b) = self.staging[g as usize].take() {
                self.drop_batch(&mut b, CoreDrop::Unhandled);
                self.spare.push(b);
            }
        }
        while let Some(mut p) = self.pending.pop() {
            self.drop_batch(&mut p.batch, CoreDrop::Unhandled);
            self.spare.push(p.batch);
        }
    }

    /// Runs pending batches until none is left. Inlined into `run_task`, its one hot caller,
    /// so that a task's run and the batches it sends share one call frame (a small burst
    /// pays the frame set-up per packet).
    ///
    /// `RT`: runtime sampling is on (modules several workers run count their calls per
    /// worker); `TIMED`: this run is sampled (each module call is timed with the TSC);
    /// `TRACE`: a packet trace is recording (`self.tracer`): each module call is wrapped by
    /// [`Context::trace_before`] and [`Context::trace_after`], here and nowhere else, so
    /// that the trace sees exactly the calls the plain runner makes, through the same code.
    #[inline(always)]
    pub(crate) fn drain<const RT: bool, const TIMED: bool, const TRACE: bool>(
        &mut self,
        graph: &Pipeline,
    ) {
        let mut hops = 0;
        let Some(mut cur) = self.pop_pending() else {
            return;
        };
        // The module `cur` goes to: looked up for a batch taken from the pending list, taken
        // from the gate for one moved on directly.
        let mut node = graph.node(cur.dst);
        loop {
            self.cur_node = node;
            hops += 1;
            if hops > MAX_HOPS {
                node.uncalled.add_shared(1);
                node.unprocessed.add_shared(cur.batch.len() as u64);
                self.drop_batch(&mut cur.batch, CoreDrop::HopLimit);
                self.spare.push(cur.batch);
                match self.pop_pending() {
                    Some(p) => cur = p,
                    None => break,
                }
                node = graph.node(cur.dst);
                continue;
            }
            let igate = cur.igate;
            let batch = &mut *cur.batch;
            self.cur_input = batch;
            self.fast_input = if self.pending.is_empty() {
                batch
            } else {
                std::ptr::null()
            };
            if !node.ihooks.is_empty() {
                if let Some(h) = node.ihooks.get(igate as usize) {
                    crate::hook::run_hooks(h, batch);
                }
            }
            let n_in = if TIMED { batch.len() as u64 } else { 0 };
            let t0 = if TIMED { crate::tsc::rdtsc() } else { 0 };
            let mut traced = if TRACE {
                self.trace_before(node, igate, batch)
            } else {
                None
            };
            if TRACE && self.trace_dry_stop(node, &mut traced, batch) {
                // A dry run reached a module that would transmit or hold the packet: it is
                // not run (see `trace_dry_stop`); the batch was freed.
            } else {
                match &node.inst {
                    // SAFETY: only this worker runs this module (`multi` false).
                    InstanceCell::Exclusive(m) if !node.multi => unsafe {
                        (*m.get()).process_batch(self, batch, igate)
                    },
                    InstanceCell::Exclusive(m) => {
                        if RT {
                            self.rt_count_multi(node, batch.len());
                        }
                        locked(node, || {
                            // SAFETY: `locked` holds the node's lock.
                            unsafe { (*m.get()).process_batch(self, batch, igate) }
                        })
                    }
                    InstanceCell::Shared(m) => {
                        if RT && node.multi {
                            self.rt_count_multi(node, batch.len());
                        }
                        m.process_batch(self, batch, igate)
                    }
                }
            }
            if !self.touched.is_empty() {
                self.flush_outputs(graph);
            }
            if TRACE {
                if let Some(t) = traced {
                    self.trace_after(node, *t, batch);
                }
            }
            if TIMED {
                let t1 = crate::tsc::rdtsc();
                self.rt_sample(node, n_in, t1.wrapping_sub(t0));
            }
            if !self.moved.og.is_null() {
                // Only `og` says whether a move is recorded; `n` is overwritten with the
                // next move.
                let moved = self.moved;
                self.moved.og = std::ptr::null();
                // SAFETY: set by `forward` during this module call, to a gate of `graph`.
                let og = unsafe { &*moved.og };
                if batch.is_empty() {
                    // SAFETY: slots 0..n still hold the forwarded packets (see `forward`).
                    unsafe { batch.set_len(moved.n) };
                    cur.dst = og.dst;
                    cur.igate = og.igate;
                    cur.prio = og.dst_prio;
                    if self.pending.is_empty() {
                        // A batch forwarded whole, with nothing else pending, runs next
                        // directly.
                        debug_assert!(std::ptr::eq(og.dst_node, graph.node(og.dst)));
                        // SAFETY: `refresh_gates` points it at the live node `dst` names.
                        node = unsafe { &*og.dst_node };
                        continue;
                    }
                    self.pending.push(cur);
                    match self.pop_pending() {
                        Some(p) => cur = p,
                        None => break,
                    }
                    node = graph.node(cur.dst);
                    continue;
                }
                // The module refilled the batch after forwarding it: the forwarded packets
                // in the overwritten slots are lost. A module bug; caught in debug builds.
                debug_assert!(
                    false,
                    "module '{}' refilled a batch after forwarding it",
                    node.name
                );
            }
            if !batch.is_empty() {
                self.drop_batch(batch, CoreDrop::Unhandled);
            }
            self.spare.push(cur.batch);
            match self.pop_pending() {
                Some(p) => cur = p,
                None => break,
            }
            node = graph.node(cur.dst);
        }
        // Set per module call above and left until here: outside a run no batch is the input.
        self.cur_input = std::ptr::null();
        self.fast_input = std::ptr::null();
    }

    #[inline(always)]
    fn pop_pending(&mut self) -> Option<Pending> {
        let len = self.pending.len();
        if len <= 1 {
            return self.pending.pop();
        }
        let mut best = len - 1;
        for i in 0..len - 1 {
            if self.pending[i].prio < self.pending[best].prio {
                best = i;
            }
        }
        Some(self.pending.swap_remove(best))
    }

    /// Runs one task and everything it sends downstream; returns the task's result.
    pub fn run_task(&mut self, graph: &Pipeline, task: TaskId) -> TaskResult {
        self.run_task_group(graph, task, 1).result
    }

    /// Runs a task and everything it sends downstream, then again while each run reports
    /// packets, up to `max_runs` runs ([`RunGroup::collect`]): the task and its module are
    /// looked up once for the group (a scheduling round's runs of a lone task, see
    /// [`crate::sched::ClassTree::schedule_round`]).
    ///
    /// One flag (`Pipeline::slow`) sends a group to the instrumented paths (runtime sampling,
    /// packet trace); with both off this is the only instruction they add.
    pub fn run_task_group(&mut self, graph: &Pipeline, task: TaskId, max_runs: u64) -> RunGroup {
        if graph.slow {
            return self.run_task_group_slow(graph, task, max_runs);
        }
        self.run_task_group_plain(graph, task, max_runs)
    }

    /// `run_task_group` without runtime sampling or trace.
    #[inline(always)]
    fn run_task_group_plain(&mut self, graph: &Pipeline, task: TaskId, max_runs: u64) -> RunGroup {
        let Some(entry) = graph.task(task) else {
            return RunGroup::blocked();
        };
        let (module, arg) = (entry.module, entry.arg);
        self.enter(graph, module);
        let node = graph.node(module);
        RunGroup::collect(
            max_runs,
            #[inline(always)]
            || {
                // `drain` left the last downstream module as the current one.
                self.cur_node = node;
                let r = match &node.inst {
                    // SAFETY: as in `drain`.
                    InstanceCell::Exclusive(m) if !node.multi => unsafe {
                        (*m.get()).run_task(self, arg)
                    },
                    InstanceCell::Exclusive(m) => locked(node, || {
                        // SAFETY: as in `drain`.
                        unsafe { (*m.get()).run_task(self, arg) }
                    }),
                    InstanceCell::Shared(m) => m.run_task(self, arg),
                };
                self.flush_outputs(graph);
                self.drain::<false, false, false>(graph);
                r
            },
        )
    }

    /// Leaves the plain path: runtime sampling, a packet trace, or both are on. Out of line
    /// (see `run_task_group`).
    #[inline(never)]
    fn run_task_group_slow(&mut self, graph: &Pipeline, task: TaskId, max_runs: u64) -> RunGroup {
        if let Some(t) = &graph.trace {
            if t.is_active() {
                return self.run_task_group_traced(graph, t.clone(), task, max_runs);
            }
        }
        if graph.runtime {
            return self.run_task_group_rt(graph, task, max_runs);
        }
        self.run_task_group_plain(graph, task, max_runs)
    }

    /// `run_task_group` with runtime sampling on: the group's runs and packets are counted
    /// on the module's slot of this worker; about one run in [`RT_PERIOD`] is timed: its
    /// task call and, if it sent packets on, every downstream module call
    /// ([`Context::drain`] with `TIMED`). When a timed run sent nothing, the next run that
    /// does (of any task) has its drain timed, so that the modules downstream of a mostly
    /// idle source are measured as soon as packets come, and idle tasks beside busy ones add
    /// no samples. Out of line: with sampling off the runner pays one flag test
    /// per group.
    #[inline(never)]
    fn run_task_group_rt(&mut self, graph: &Pipeline, task: TaskId, max_runs: u64) -> RunGroup {
        let Some(entry) = graph.task(task) else {
            return RunGroup::blocked();
        };
        let (module, arg) = (entry.module, entry.arg);
        self.enter(graph, module);
        let node = graph.node(module);
        let group = RunGroup::collect(
            max_runs,
            #[inline(always)]
            || {
                self.rt_task_cd -= 1;
                if self.rt_task_cd == 0 {
                    return self.run_timed(graph, node, arg);
                }
                self.cur_node = node;
                let r = Self::call_task(self, node, arg);
                self.flush_outputs(graph);
                if self.rt_want_drain && !self.pending.is_empty() {
                    self.rt_want_drain = false;
                    self.drain::<true, true, false>(graph);
                } else {
                    self.drain::<true, false, false>(graph);
                }
                r
            },
        );
        self.rt_count_group(node, &group);
        group
    }

    /// Counts a task group's runs and packets on the module's runtime slot of this worker.
    #[inline(always)]
    fn rt_count_group(&self, node: &Node, group: &RunGroup) {
        if let Some(s) = node.rt.get(self.wid) {
            let tail = group.idle_tail.map_or(0, |t| u64::from(t.packets));
            s.task_calls
                .add(group.runs + u64::from(group.idle_tail.is_some()));
            s.task_packets.add(u64::from(group.result.packets) + tail);
        }
    }

    /// `run_task_group` while a packet trace is capturing or following packets: the task
    /// call, then [`Context::trace_task`] on what it sent, then the traced `drain`. Runtime
    /// counts go on (exact calls and packets); no call is timed meanwhile.
    #[cold]
    #[inline(never)]
    fn run_task_group_traced(
        &mut self,
        graph: &Pipeline,
        tracer: std::sync::Arc<crate::trace::Tracer>,
        task: TaskId,
        max_runs: u64,
    ) -> RunGroup {
        let Some(entry) = graph.task(task) else {
            return RunGroup::blocked();
        };
        let (module, arg) = (entry.module, entry.arg);
        self.enter(graph, module);
        let node = graph.node(module);
        self.trace_cache_points(&tracer);
        self.tracer = Some(tracer);
        let group = RunGroup::collect(max_runs, || {
            self.cur_node = node;
            let r = Self::call_task(self, node, arg);
            self.flush_outputs(graph);
            self.trace_task(node);
            if graph.runtime {
                self.drain::<true, false, true>(graph);
            } else {
                self.drain::<false, false, true>(graph);
            }
            r
        });
        if graph.runtime {
            self.rt_count_group(node, &group);
        }
        self.tracer = None;
        group
    }

    /// Calls the task of `node`.
    #[inline(always)]
    fn call_task(&mut self, node: &Node, arg: u64) -> TaskResult {
        match &node.inst {
            // SAFETY: as in `drain`.
            InstanceCell::Exclusive(m) if !node.multi => unsafe { (*m.get()).run_task(self, arg) },
            InstanceCell::Exclusive(m) => locked(node, || {
                // SAFETY: as in `drain`.
                unsafe { (*m.get()).run_task(self, arg) }
            }),
            InstanceCell::Shared(m) => m.run_task(self, arg),
        }
    }

    /// One sampled run (see [`Context::run_task_group_rt`]).
    #[cold]
    #[inline(never)]
    fn run_timed(&mut self, graph: &Pipeline, node: &Node, arg: u64) -> TaskResult {
        self.cur_node = node;
        let t0 = crate::tsc::rdtsc();
        let r = Self::call_task(self, node, arg);
        self.flush_outputs(graph);
        let t1 = crate::tsc::rdtsc();
        self.rt_sample(node, u64::from(r.packets), t1.wrapping_sub(t0));
        self.rt_task_cd = self.rt_period();
        if self.pending.is_empty() {
            self.rt_want_drain = true;
        } else {
            self.rt_want_drain = false;
            self.drain::<true, true, false>(graph);
        }
        r
    }

    /// Returns every cached buffer to the pool (before the worker exits).
    pub fn release_cache(&mut self) {
        self.cache.flush_all();
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Staging and pending batches are empty between runs; anything left is freed.
        for b in self.staging.iter_mut().flatten() {
            self.cache.free_bulk(b);
        }
        let pend: Vec<Pending> = self.pending.drain(..).collect();
        for mut p in pend {
            self.cache.free_bulk(&mut p.batch);
        }
    }
}

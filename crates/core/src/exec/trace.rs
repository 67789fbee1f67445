//! The packet trace in the runner (see `trace.rs`): what a traced run records around each
//! module call, and the dry run of `trace packet`.

use std::sync::Arc;

use super::{Context, Pending};
use crate::batch::PacketBatch;
use crate::drop::{CoreDrop, DropReason};
use crate::graph::{InstanceCell, Node, Pipeline};
use crate::metadata::AttrOffset;
use crate::packet::Packet;
use crate::trace::{summarize, End, Hop, PacketTrace, Tracer};

/// Classes a dry run does not run: they would hand the packet to a port.
const TX_CLASSES: &[&str] = &["PortOut", "QueueOut"];
/// Classes that hold packets for later (a dry run does not run them either: the packet
/// would leave later, among real traffic).
const HOLDING_CLASSES: &[&str] = &["Queue", "DRR", "Buffer"];

/// One traced module call: the traced packets of its input batch (descriptor address, index
/// of the packet's record, whether this call's hop was kept under the cap) and the module's
/// drop counters before the call.
pub(crate) struct TraceCall {
    pkts: Vec<(usize, usize, bool)>,
    drops: Vec<u64>,
}

/// The output gate of `node` that leads to (`dst`, `igate`): the lowest if several do.
fn ogate_to(node: &Node, dst: u32, igate: u16) -> Option<u16> {
    node.ogates
        .iter()
        .position(|g| g.as_ref().is_some_and(|g| g.dst == dst && g.igate == igate))
        .map(|g| g as u16)
}

/// The metadata attributes `node` writes, with their values in `pkt` (hex).
fn written_meta(node: &Node, pkt: &Packet) -> Vec<(String, String)> {
    use crate::metadata::AccessMode;
    node.attrs
        .iter()
        .zip(&node.offsets)
        .filter(|(a, _)| a.mode != AccessMode::Read)
        .map(|(a, off)| {
            let v = match off {
                AttrOffset::At(o) => {
                    let o = *o as usize;
                    let m = pkt.metadata();
                    let b = &m[o.min(m.len())..(o + a.size).min(m.len())];
                    format!(
                        "0x{}",
                        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
                    )
                }
                _ => "(no module downstream reads it: not stored)".into(),
            };
            (a.name.clone(), v)
        })
        .collect()
}

/// The port an output module sends to (its description starts with the port's name).
fn port_of(node: &Node) -> String {
    let desc = match &node.inst {
        // SAFETY: `desc` only reads (the control thread calls it while workers run too).
        InstanceCell::Exclusive(m) => unsafe { (*m.get()).desc() },
        InstanceCell::Shared(m) => m.desc(),
    };
    desc.split(':').next().unwrap_or_default().to_string()
}

fn drop_reason_name(node: &Node, i: usize) -> &'static str {
    let k = node.class.drop_reasons.len();
    if i < k {
        node.class.drop_reasons[i]
    } else {
        CoreDrop::NAMES.get(i - k).copied().unwrap_or("unknown")
    }
}

/// Packet trace (see `trace.rs`): the hooks the traced runner calls around module calls.
/// All out of line and cold: only traced runs reach them.
impl Context {
    /// Before a module call: the batch's traced packets (and, at a capture point, those it
    /// captures now), each given a hop with its headers as the module gets it.
    #[cold]
    #[inline(never)]
    pub(super) fn trace_before(
        &mut self,
        node: &Node,
        igate: u16,
        batch: &PacketBatch,
    ) -> Option<Box<TraceCall>> {
        let t = self.tracer.as_ref()?;
        if !self.trace_may_match(t, node) {
            return None;
        }
        let mut s = t.lock();
        let point = s.remaining > 0 && s.points.contains(&node.name);
        let mut pkts = Vec::new();
        for p in batch.pkts() {
            let addr = p.as_ptr() as usize;
            let idx = match s.live.get(&addr) {
                Some(&i) => i,
                None if point => match s.capture(self.wid, addr) {
                    Some(i) => i,
                    None => continue,
                },
                None => continue,
            };
            let kept = s.push_hop(
                idx,
                Hop {
                    module: node.name.clone(),
                    mclass: node.class.name,
                    igate: Some(igate),
                    ogates: Vec::new(),
                    ns: t.ns(),
                    before: Some(summarize(p.data())),
                    after: None,
                    meta: Vec::new(),
                    end: None,
                },
            );
            pkts.push((addr, idx, kept));
        }
        t.sync(&s);
        if pkts.is_empty() {
            return None;
        }
        let drops = node.drops.iter().map(|c| c.get()).collect();
        Some(Box::new(TraceCall { pkts, drops }))
    }

    /// After a module call (its outputs flushed to the pending list or, forwarded whole,
    /// recorded in `moved`): where each traced packet went, or how it ended.
    #[cold]
    #[inline(never)]
    pub(super) fn trace_after(&mut self, node: &Node, tc: TraceCall, batch: &mut PacketBatch) {
        let Some(t) = self.tracer.clone() else {
            return;
        };
        // The outputs: (gate, packets).
        let mut outs: Vec<(Option<u16>, &[Packet])> = Vec::new();
        let moved_og = self.moved.og;
        if !moved_og.is_null() && batch.is_empty() {
            let g = node
                .ogates
                .iter()
                .position(|g| g.as_ref().is_some_and(|g| std::ptr::eq(g, moved_og)))
                .map(|g| g as u16);
            // SAFETY: slots 0..n still hold the forwarded packets (see `forward`); the
            // slice is dropped before the runner restores the count.
            let pk = unsafe { std::slice::from_raw_parts(batch.slots_mut(), self.moved.n) };
            outs.push((g, pk));
        }
        for p in &self.pending {
            outs.push((ogate_to(node, p.dst, p.igate), p.batch.pkts()));
        }
        let left: Vec<usize> = batch.pkts().iter().map(|p| p.as_ptr() as usize).collect();
        let mut s = t.lock();
        for &(addr, idx, kept) in &tc.pkts {
            let mut gates = Vec::new();
            let mut first: Option<&Packet> = None;
            for (g, pk) in &outs {
                if let Some(p) = pk.iter().find(|p| p.as_ptr() as usize == addr) {
                    if let Some(g) = g {
                        if !gates.contains(g) {
                            gates.push(*g);
                        }
                    }
                    first.get_or_insert(p);
                }
            }
            let end = if first.is_some() {
                None
            } else if left.contains(&addr) {
                Some(End::Drop(vec![CoreDrop::Unhandled.name().to_string()]))
            } else {
                let reasons: Vec<String> = node
                    .drops
                    .iter()
                    .zip(&tc.drops)
                    .enumerate()
                    .filter(|(_, (now, was))| now.get() > **was)
                    .map(|(i, _)| drop_reason_name(node, i).to_string())
                    .collect();
                Some(if !reasons.is_empty() {
                    End::Drop(reasons)
                } else if TX_CLASSES.contains(&node.class.name) {
                    End::Output(port_of(node))
                } else if HOLDING_CLASSES.contains(&node.class.name) {
                    End::Queued
                } else {
                    End::Consumed
                })
            };
            if end.is_some() && end != Some(End::Queued) {
                s.live.remove(&addr);
            }
            if kept {
                if let Some(h) = s.packets[idx].hops.last_mut() {
                    h.ogates = gates;
                    if let Some(p) = first {
                        h.after = Some(summarize(p.data()));
                        h.meta = written_meta(node, p);
                    }
                    h.end = end;
                }
            }
        }
        t.sync(&s);
    }

    /// After a task call (its outputs all in the pending list): the traced packets it sent
    /// (a queue's task dequeuing one) and, at a capture point, those it captures now.
    #[cold]
    #[inline(never)]
    pub(super) fn trace_task(&mut self, node: &Node) {
        if self.pending.is_empty()
            || !self
                .tracer
                .as_ref()
                .is_some_and(|t| self.trace_may_match(t, node))
        {
            return;
        }
        let Some(t) = self.tracer.clone() else {
            return;
        };
        let mut s = t.lock();
        let point = s.remaining > 0 && s.points.contains(&node.name);
        let mut seen: Vec<usize> = Vec::new();
        for p in &self.pending {
            let g = ogate_to(node, p.dst, p.igate);
            for pkt in p.batch.pkts() {
                let addr = pkt.as_ptr() as usize;
                let idx = match s.live.get(&addr) {
                    Some(&i) => i,
                    None if point => match s.capture(self.wid, addr) {
                        Some(i) => i,
                        None => continue,
                    },
                    None => continue,
                };
                if seen.contains(&idx) {
                    // A clone sharing the buffer, sent by another gate too.
                    if let (Some(h), Some(g)) = (s.packets[idx].hops.last_mut(), g) {
                        if !h.ogates.contains(&g) {
                            h.ogates.push(g);
                        }
                    }
                    continue;
                }
                seen.push(idx);
                s.push_hop(
                    idx,
                    Hop {
                        module: node.name.clone(),
                        mclass: node.class.name,
                        igate: None,
                        ogates: g.into_iter().collect(),
                        ns: t.ns(),
                        before: None,
                        after: Some(summarize(pkt.data())),
                        meta: written_meta(node, pkt),
                        end: None,
                    },
                );
            }
        }
        t.sync(&s);
    }

    /// Refreshes the cached capture points of `t` if they changed.
    pub(super) fn trace_cache_points(&mut self, t: &Tracer) {
        let gen = t.points_gen.load(std::sync::atomic::Ordering::Relaxed);
        if gen != self.trace_gen {
            self.trace_points = t.lock().points.clone();
            self.trace_gen = gen;
        }
    }

    /// Whether a call of `node` may concern the trace: packets are in flight, or `node` is
    /// a capture point with packets left to capture. Lock-free (the trace's mirrors and the
    /// cached points); a false positive only costs the lock.
    #[inline(always)]
    fn trace_may_match(&self, t: &Tracer, node: &Node) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        t.live_n.load(Relaxed) > 0
            || (t.left.load(Relaxed) > 0 && self.trace_points.contains(&node.name))
    }

    /// In a dry run, a module that would transmit the packet or hold it for later is not
    /// run: the traced packets' hops end there and the batch is freed. Returns true then.
    #[inline(always)]
    pub(super) fn trace_dry_stop(
        &mut self,
        node: &Node,
        traced: &mut Option<Box<TraceCall>>,
        batch: &mut PacketBatch,
    ) -> bool {
        // Checked through a borrow: a clone of the Arc per call costs two locked
        // instructions on every traced call.
        if !self.tracer.as_ref().is_some_and(|t| t.dry_run) {
            return false;
        }
        let class = node.class.name;
        if !(TX_CLASSES.contains(&class) || HOLDING_CLASSES.contains(&class)) {
            return false;
        }
        let Some(t) = self.tracer.clone() else {
            return false;
        };
        let what = if TX_CLASSES.contains(&class) {
            format!("would send to port {}", port_of(node))
        } else {
            format!("would hold it ({class})")
        };
        if let Some(tc) = traced.take() {
            let mut s = t.lock();
            for &(addr, idx, kept) in &tc.pkts {
                s.live.remove(&addr);
                if kept {
                    if let Some(h) = s.packets[idx].hops.last_mut() {
                        h.end = Some(End::DryRunStop(what.clone()));
                    }
                }
            }
            t.sync(&s);
        }
        self.cache.free_bulk(batch);
        true
    }

    /// Runs one packet (`bytes`) through the graph from module `id` with a dry-run trace
    /// (`trace packet`, OVS's `ofproto/trace`): output ports and queueing modules are not
    /// run (see `trace_dry_stop`). The caller pauses every worker. A module without input
    /// gates (PortInc, Source) is taken as having produced the packet on its output gate 0.
    pub(crate) fn trace_dry(
        &mut self,
        graph: &Pipeline,
        id: u32,
        bytes: &[u8],
    ) -> crate::Result<PacketTrace> {
        use crate::Error;
        let node = graph.node(id);
        let tracer = Arc::new(Tracer::with(vec![node.name.clone()], 1, true));
        let Some(mut pkt) = self.alloc_any(bytes.len()) else {
            return Err(Error::no_mem(format!(
                "no packet buffer of {} bytes free for the dry run",
                bytes.len()
            )));
        };
        if !pkt.set_data(bytes) {
            self.free(pkt);
            return Err(Error::invalid(format!(
                "a packet of {} bytes does not fit a buffer",
                bytes.len()
            )));
        }
        pkt.metadata_mut().fill(0);
        let (dst, igate, prio) = if node.class.igates > 0 {
            (id, 0, node.prio)
        } else {
            let Some(Some(og)) = node.ogates.first() else {
                self.free(pkt);
                return Err(Error::invalid(format!(
                    "module '{}' ({}) has no input gate and its output gate 0 is not \
                     connected: there is no path to run the packet through",
                    node.name, node.class.name
                )));
            };
            let mut s = tracer.lock();
            let i = s
                .capture(self.wid, pkt.as_ptr() as usize)
                .expect("a fresh dry-run trace captures one packet");
            s.push_hop(
                i,
                Hop {
                    module: node.name.clone(),
                    mclass: node.class.name,
                    igate: None,
                    ogates: vec![0],
                    ns: tracer.ns(),
                    before: None,
                    after: Some(summarize(pkt.data())),
                    meta: Vec::new(),
                    end: None,
                },
            );
            tracer.sync(&s);
            (og.dst, og.igate, og.dst_prio)
        };
        let mut b = self.spare();
        // SAFETY: a spare batch is empty.
        unsafe { b.push_unchecked(pkt) };
        self.enter(graph, id);
        self.trace_cache_points(&tracer);
        self.tracer = Some(tracer.clone());
        self.push_pending(Pending {
            prio,
            dst,
            igate,
            batch: b,
        });
        self.drain::<false, false, true>(graph);
        self.tracer = None;
        tracer
            .packets()
            .pop()
            .ok_or_else(|| Error::invalid("the dry run captured no packet"))
    }
}

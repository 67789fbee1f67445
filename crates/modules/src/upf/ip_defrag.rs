//! IPDefrag (omec-project fork): reassembles IPv4 fragments, holding them in a bounded
//! table for a bounded time.
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use bessemer_core::{
    Args, Context, Error, Instance, Module, ModuleClass, Packet, PacketBatch, Value,
};

use crate::headers::{ip, Ipv4Error, Ipv4Header, Ipv4View, ETHERTYPE_IPV4, ETH_LEN};

const GATE_FAIL: u16 = 0;
const GATE_FORWARD: u16 = 1;
/// Flows the table holds per `num_flows` (DPDK's bucket entries, as the fork sizes it).
const FLOWS_PER_BUCKET: usize = 16;
/// Most fragments held for one datagram: enough for any real MTU, few enough that one
/// datagram cut into 8-byte pieces cannot take every buffer.
pub const MAX_FRAGMENTS: usize = 64;
/// Emptied fragment lists kept for reuse.
const SPARE_LISTS: usize = 64;

bessemer_core::drop_reasons! {
    /// Why IPDefrag drops packets.
    pub enum IpDefragDrop {
        Ipv4(Ipv4Error),
        /// A fragment that is not a multiple of 8 bytes (and not the last), or ends past
        /// 65535 bytes or past the datagram's end.
        BadFragment = "bad_fragment",
        /// A copy of a fragment already held (the copy is dropped).
        Duplicate = "duplicate",
        /// Fragments of one datagram that overlap with different bytes: every fragment of
        /// the datagram is dropped.
        Overlap = "overlap",
        /// Held longer than the timeout (`num_flows` ms, as the fork) without completing.
        Timeout = "timeout",
        /// A first fragment of a new datagram while the table is full.
        TableFull = "table_full",
        /// A datagram of more than MAX_FRAGMENTS fragments: all of them are dropped.
        TooManyFragments = "too_many_fragments",
    }
}

/// What identifies the fragments of one datagram (RFC 791): the source and destination
/// addresses as one word (read from the packet in one load), identification and protocol
/// in the other. (As separate byte arrays, the key's bytes were stored one piece at a time
/// and read back as whole words by the hash: a store-forwarding stall, a fifth of the
/// module's time.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    addrs: u64,
    id_proto: u32,
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(self.addrs);
        h.write_u64(self.id_proto as u64);
    }
}

/// One held fragment: its payload's place in the datagram.
struct Frag {
    start: usize,
    end: usize,
    pkt: Packet,
}

struct Flow {
    since: u64,
    /// Held fragments, sorted by start, never overlapping.
    frags: Vec<Frag>,
    /// The datagram's payload length, once its last fragment came.
    total: Option<usize>,
}

/// Reassembles IPv4 datagrams from their fragments (any order; exact copies dropped,
/// overlaps drop the datagram) and recomputes the IPv4 checksum of every IPv4 packet it
/// forwards, as the fork; the whole datagram leaves by gate 1 with the Ethernet header,
/// IPv4 header (options included) and metadata of its first fragment. Other frames pass
/// by gate 1; a datagram too large for a buffer leaves as its fragments by gate 0.
pub struct IpDefrag {
    flows: HashMap<Key, Flow, crate::hash::SeededMix>,
    /// Emptied fragment lists kept for new datagrams (at most SPARE_LISTS).
    spare: Vec<Vec<Frag>>,
    /// Datagrams in arrival order of their first fragment, for expiry.
    order: VecDeque<(u64, Key)>,
    capacity: usize,
    timeout: u64,
    num_flows: u64,
    numa: i64,
}

enum Step {
    Forward(Packet),
    Held,
}

impl IpDefrag {
    fn drop_flow(ctx: &mut Context, flow: Flow, r: IpDefragDrop) {
        for f in flow.frags {
            ctx.drop_packet(f.pkt, r);
        }
    }

    fn expire(&mut self, ctx: &mut Context, now: u64) {
        // `order` keeps an entry per datagram until its timeout, also for datagrams long
        // completed: at millions of datagrams a second and a timeout of `num_flows` ms that
        // was hundreds of MB. Dropping the entries of datagrams no longer held whenever it
        // passes twice the table's size bounds it by the table (each entry is visited once
        // per compaction: constant work per datagram).
        if self.order.len() > 2 * self.capacity.max(64) {
            let flows = &self.flows;
            self.order
                .retain(|(t, k)| flows.get(k).is_some_and(|f| f.since == *t));
        }
        while let Some(&(t, key)) = self.order.front() {
            if now.saturating_sub(t) <= self.timeout {
                break;
            }
            self.order.pop_front();
            if self.flows.get(&key).is_some_and(|f| f.since == t) {
                let flow = self.flows.remove(&key).expect("present");
                Self::drop_flow(ctx, flow, IpDefragDrop::Timeout);
            }
        }
    }

    /// Builds the datagram of a complete flow's fragments `frags` (of `total` payload
    /// bytes), leaving `frags` empty; None, with `frags` as they were, when no buffer is
    /// large enough.
    fn assemble(ctx: &mut Context, frags: &mut Vec<Frag>, total: usize) -> Option<Packet> {
        let first = &frags[0].pkt;
        let d = first.data();
        let hlen = ((d[ETH_LEN] & 0x0f) as usize) * 4;
        let len = ETH_LEN + hlen + total;
        let mut out = if hlen + total <= u16::MAX as usize {
            ctx.alloc_any(len)?
        } else {
            return None;
        };
        *out.metadata_mut() = *first.metadata();
        let o = out.data_mut();
        o[..ETH_LEN + hlen].copy_from_slice(&d[..ETH_LEN + hlen]);
        let h = &mut o[ETH_LEN..ETH_LEN + hlen];
        h[ip::TOTAL_LEN..ip::TOTAL_LEN + 2].copy_from_slice(&((hlen + total) as u16).to_be_bytes());
        // Keep DF and the reserved bit; clear MF and the offset.
        h[ip::FLAGS_FRAG] &= 0xc0;
        h[ip::FLAGS_FRAG + 1] = 0;
        for f in frags.iter() {
            let fd = f.pkt.data();
            let fh = ((fd[ETH_LEN] & 0x0f) as usize) * 4;
            let src = &fd[ETH_LEN + fh..ETH_LEN + fh + (f.end - f.start)];
            o[ETH_LEN + hlen + f.start..ETH_LEN + hlen + f.end].copy_from_slice(src);
        }
        for f in frags.drain(..) {
            ctx.free(f.pkt);
        }
        Some(out)
    }

    /// Keeps an emptied fragment list for a later datagram (an allocation and a free per
    /// datagram otherwise).
    fn recycle(&mut self, mut frags: Vec<Frag>) {
        debug_assert!(frags.is_empty());
        frags.clear();
        if self.spare.len() < SPARE_LISTS {
            self.spare.push(frags);
        }
    }

    fn step(&mut self, ctx: &mut Context, p: Packet, now: u64) -> Option<Step> {
        let d = p.data();
        if d.get(12..14) != Some(&ETHERTYPE_IPV4.to_be_bytes()[..]) {
            return Some(Step::Forward(p));
        }
        let ip = match Ipv4View::new_checked(&d[ETH_LEN..]) {
            Ok(ip) => ip,
            Err(e) => {
                ctx.drop_packet(p, IpDefragDrop::Ipv4(e));
                return None;
            }
        };
        if !ip.is_fragment() {
            return Some(Step::Forward(p));
        }
        let start = ip.frag_offset() as usize * 8;
        let end = start + ip.payload_len();
        let last = !ip.more_frags();
        let ipd = &d[ETH_LEN..];
        let key = Key {
            addrs: u64::from_ne_bytes(ipd[ip::SRC..ip::SRC + 8].try_into().unwrap()),
            id_proto: (u16::from_ne_bytes([ipd[ip::IDENT], ipd[ip::IDENT + 1]]) as u32) << 8
                | ip.protocol() as u32,
        };
        if end > u16::MAX as usize - ip.header_len()
            || (!last && (!(end - start).is_multiple_of(8) || end == start))
        {
            ctx.drop_packet(p, IpDefragDrop::BadFragment);
            return None;
        }
        // One hash of the key while the datagram is incomplete (the entry), one more when
        // it completes (the removal).
        let full = self.flows.len() >= self.capacity;
        let flow = match self.flows.entry(key) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(_) if full => {
                ctx.drop_packet(p, IpDefragDrop::TableFull);
                return None;
            }
            Entry::Vacant(v) => {
                self.order.push_back((now, key));
                v.insert(Flow {
                    since: now,
                    frags: self.spare.pop().unwrap_or_default(),
                    total: None,
                })
            }
        };
        let bad_end = match (flow.total, last) {
            (Some(t), true) => t != end,
            (Some(t), false) => end > t,
            (None, true) => flow.frags.last().is_some_and(|f| f.end > end),
            (None, false) => false,
        };
        if bad_end {
            ctx.drop_packet(p, IpDefragDrop::BadFragment);
            return None;
        }
        let at = flow.frags.partition_point(|f| f.start < start);
        let payload = |q: &Packet| {
            let qd = q.data();
            let h = ((qd[ETH_LEN] & 0x0f) as usize) * 4;
            qd[ETH_LEN + h..].to_vec()
        };
        if let Some(same) = flow.frags.iter().find(|f| f.start == start && f.end == end) {
            let n = end - start;
            let dup = payload(&same.pkt)[..n] == ip.payload()[..n];
            if dup {
                ctx.drop_packet(p, IpDefragDrop::Duplicate);
                return None;
            }
        }
        let overlaps = |f: &Frag| f.start < end && start < f.end;
        if flow.frags.iter().any(overlaps) {
            let flow = self.flows.remove(&key).expect("present");
            Self::drop_flow(ctx, flow, IpDefragDrop::Overlap);
            ctx.drop_packet(p, IpDefragDrop::Overlap);
            return None;
        }
        if flow.frags.len() >= MAX_FRAGMENTS {
            let flow = self.flows.remove(&key).expect("present");
            Self::drop_flow(ctx, flow, IpDefragDrop::TooManyFragments);
            ctx.drop_packet(p, IpDefragDrop::TooManyFragments);
            return None;
        }
        if last {
            flow.total = Some(end);
        }
        let frag = Frag { start, end, pkt: p };
        if at == flow.frags.len() {
            // Fragments mostly come in order: a push, not Vec::insert's call and move.
            flow.frags.push(frag);
        } else {
            flow.frags.insert(at, frag);
        }
        let have: usize = flow.frags.iter().map(|f| f.end - f.start).sum();
        if flow.total != Some(have) {
            return Some(Step::Held);
        }
        let mut flow = self.flows.remove(&key).expect("present");
        let total = flow.total.expect("complete");
        let out = Self::assemble(ctx, &mut flow.frags, total);
        if out.is_none() {
            for f in flow.frags.drain(..) {
                ctx.emit(GATE_FAIL, f.pkt);
            }
        }
        self.recycle(flow.frags);
        out.map(Step::Forward)
    }
}

impl Module for IpDefrag {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = ctx.refresh_now();
        self.expire(ctx, now);
        for p in batch.drain() {
            if let Some(Step::Forward(mut p)) = self.step(ctx, p, now) {
                let d = p.data_mut();
                if d.get(12..14) == Some(&ETHERTYPE_IPV4.to_be_bytes()[..]) {
                    if let Ok(mut h) = Ipv4Header::new_checked(&mut d[ETH_LEN..]) {
                        h.fill_checksum();
                    }
                }
                ctx.emit(GATE_FORWARD, p);
            }
        }
    }

    fn desc(&self) -> String {
        format!("{} datagrams held (of {})", self.flows.len(), self.capacity)
    }

    fn info(&self) -> Value {
        Value::map()
            .with("num_flows", self.num_flows)
            .with("numa", self.numa)
            .with("held", self.flows.len())
    }

    fn deinit(&mut self, ctx: &mut Context) {
        for (_, flow) in self.flows.drain() {
            for f in flow.frags {
                ctx.free(f.pkt);
            }
        }
        self.order.clear();
    }
}

/// The IPDefrag class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPDefrag",
    name_template: "ip_defrag",
    help: "IP Reassembly module",
    arg_type: "IPDefragArg",
    arg_doc: &[
        "num_flows: uint32 — table size (16 datagrams each) and timeout in ms, as the fork (required, > 0)",
        "numa: int32 — accepted (memory is not placed by NUMA node)",
        "gate 1 whole datagrams and other frames, gate 0 fragments of a datagram too large to build",
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: IpDefragDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "IPDefragArg")?;
        let num_flows = a.uint("num_flows", u32::MAX as u64)?.unwrap_or(0);
        let numa = a.int("numa", i32::MIN as i64, i32::MAX as i64)?.unwrap_or(0);
        a.finish()?;
        if num_flows == 0 {
            return Err(Error::invalid("Invalid num_flows!"));
        }
        // The fork's DPDK table lives num_flows milliseconds per fragment.
        let timeout = bessemer_core::tsc::hz().div_ceil(1000) * num_flows;
        Ok(Instance::Exclusive(Box::new(IpDefrag {
            flows: HashMap::default(),
            spare: Vec::new(),
            order: VecDeque::new(),
            capacity: (num_flows as usize).saturating_mul(FLOWS_PER_BUCKET),
            timeout,
            num_flows,
            numa,
        })))
    },
};

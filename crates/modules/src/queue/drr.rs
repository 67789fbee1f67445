//! DRR: deficit round robin over flows (IPv4 5-tuples), with its own dequeuing task.
use std::collections::{HashMap, VecDeque};

use crate::headers::{EthernetView, Ipv4Error, Ipv4Fixed, PortsView, ETHERTYPE_IPV4};
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, Packet, PacketBatch,
    Result, Value,
};

/// Slots of the flow ring by default (BESS's kDefaultNumFlows, used as it is when `num_flows`
/// is 0).
pub const DEFAULT_NUM_FLOWS: u64 = 4096;
/// Bytes a flow may send per round by default (BESS's kDefaultQuantum).
pub const DEFAULT_QUANTUM: u64 = 1500;
/// Packets a flow may queue by default (BESS's kFlowQueueMax).
pub const DEFAULT_MAX_FLOW_QUEUE: u64 = 8192;
/// An idle flow is forgotten after this long (BESS's kTtl, 300 s).
pub const FLOW_TTL_NS: u64 = 300_000_000_000;
/// Per-packet overhead counted in the task's bits (BESS's kPacketOverhead: preamble, IFG, CRC).
const PACKET_OVERHEAD: u64 = 24;
/// Queue slots reserved when a flow is created (grows on demand up to the maximum).
const INITIAL_FLOW_QUEUE: usize = 64;
/// Most flows accepted as `num_flows` (bounds the memory reserved at init).
const MAX_NUM_FLOWS: u64 = 1 << 20;

bessemer_core::drop_reasons! {
    /// Why DRR drops packets.
    pub enum DrrDrop {
        TooShort = "too_short",
        Malformed = "malformed",
        FlowQueueFull = "flow_queue_full",
        TooManyFlows = "too_many_flows",
    }
}

/// The 5-tuple; non-IPv4 frames all share the zero key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
struct FlowId {
    src: [u8; 4],
    dst: [u8; 4],
    sport: [u8; 2],
    dport: [u8; 2],
    proto: u8,
}

/// The flow of a frame, or a drop reason. Ports are read whenever the first 4 bytes of the
/// IPv4 payload are present and the packet is not a non-first fragment (BESS reads them for
/// every packet, assuming an L4 header); otherwise they are 0.
fn flow_id(d: &[u8]) -> std::result::Result<FlowId, DrrDrop> {
    let Ok(eth) = EthernetView::new_checked(d) else {
        return Err(DrrDrop::TooShort);
    };
    if eth.ethertype() != ETHERTYPE_IPV4 {
        return Ok(FlowId::default());
    }
    let ip = match Ipv4Fixed::new_checked(eth.payload()) {
        Ok(ip) => ip,
        Err(Ipv4Error::BadHeader) => return Err(DrrDrop::Malformed),
        Err(_) => return Err(DrrDrop::TooShort),
    };
    let mut id = FlowId {
        proto: ip.protocol(),
        src: ip.src_bytes(),
        dst: ip.dst_bytes(),
        ..FlowId::default()
    };
    if ip.frag_offset() == 0 {
        if let Some(Ok(l4)) = ip.after_header().map(PortsView::new_checked) {
            id.sport = l4.src_port().to_be_bytes();
            id.dport = l4.dst_port().to_be_bytes();
        }
    }
    Ok(id)
}

struct Flow {
    id: FlowId,
    deficit: u64,
    /// Time (ns) of the last enqueue, for expiry.
    last: u64,
    queue: VecDeque<Packet>,
}

#[cfg(test)]
thread_local! {
    /// Test clock (ns); when set, replaces the TSC.
    static TEST_NOW: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

fn now_ns(ctx: &Context) -> u64 {
    #[cfg(test)]
    if let Some(t) = TEST_NOW.with(|c| c.get()) {
        return t;
    }
    bessemer_core::tsc::cycles_to_ns(ctx.now())
}

/// Queues packets per flow and, in its task, sends up to a batch per run, visiting
/// backlogged flows in round-robin order: each visit adds `quantum` bytes to the flow's
/// deficit and sends head packets while they fit in it (an emptied flow's deficit resets to
/// 0). A flow interrupted by a full batch resumes first in the next run.
pub struct Drr {
    quantum: u64,
    max_queue: usize,
    /// `num_flows` as configured (0: the default).
    num_flows: u64,
    /// Most flows the round-robin `ring` holds (see [`ring_capacity`]); a new flow is refused
    /// while it is full.
    ring_cap: usize,
    /// Flow slots; `None` is free.
    slots: Vec<Option<Flow>>,
    free: Vec<u32>,
    map: HashMap<FlowId, u32>,
    /// Round-robin order of flows (not including `current`).
    ring: VecDeque<u32>,
    /// The flow to resume first.
    current: Option<u32>,
    /// Queues of forgotten flows, kept for reuse so new flows do not allocate.
    spare_queues: Vec<VecDeque<Packet>>,
}

impl Drr {
    fn new(num_flows: u64, quantum: u64, max_queue: usize) -> Drr {
        let ring_cap = ring_capacity(num_flows);
        Drr {
            quantum,
            max_queue,
            num_flows,
            ring_cap,
            slots: Vec::with_capacity(ring_cap.min(4096)),
            free: Vec::new(),
            map: HashMap::with_capacity(ring_cap.min(4096)),
            ring: VecDeque::with_capacity(ring_cap.min(4096)),
            current: None,
            spare_queues: Vec::new(),
        }
    }

    fn flow(&mut self, i: u32) -> &mut Flow {
        self.slots[i as usize].as_mut().expect("live flow")
    }

    fn add_flow(&mut self, id: FlowId, now: u64) -> u32 {
        let queue = self
            .spare_queues
            .pop()
            .unwrap_or_else(|| VecDeque::with_capacity(INITIAL_FLOW_QUEUE));
        let f = Flow {
            id,
            deficit: 0,
            last: now,
            queue,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(f);
                i
            }
            None => {
                self.slots.push(Some(f));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(id, i);
        self.ring.push_back(i);
        i
    }

    fn remove_flow(&mut self, i: u32) {
        if let Some(f) = self.slots[i as usize].take() {
            self.map.remove(&f.id);
            debug_assert!(f.queue.is_empty());
            self.spare_queues.push(f.queue);
            self.free.push(i);
        }
    }

    /// The next flow to serve with its deficit topped up, or `None` when the visited flow
    /// was empty (it is forgotten if idle longer than the TTL, else goes to the back).
    fn next_flow(&mut self, now: u64) -> Option<u32> {
        if let Some(c) = self.current.take() {
            return Some(c);
        }
        let i = self.ring.pop_front()?;
        let quantum = self.quantum;
        let f = self.flow(i);
        if f.queue.is_empty() {
            if now.saturating_sub(f.last) > FLOW_TTL_NS {
                self.remove_flow(i);
            } else {
                self.ring.push_back(i);
            }
            return None;
        }
        f.deficit += quantum;
        Some(i)
    }

    fn fill(&mut self, batch: &mut PacketBatch, now: u64) -> u64 {
        let mut bytes = 0u64;
        let mut count = self.ring.len() + self.current.is_some() as usize;
        let mut at_round_start = batch.len();
        while !batch.is_full() {
            if count == 0 {
                // A whole round without progress ends the run.
                if batch.len() == at_round_start || self.ring.is_empty() {
                    break;
                }
                count = self.ring.len();
                at_round_start = batch.len();
            }
            count -= 1;
            let Some(i) = self.next_flow(now) else {
                continue;
            };
            let f = self.flow(i);
            while !batch.is_full() {
                let Some(len) = f.queue.front().map(|p| p.len() as u64) else {
                    break;
                };
                if len > f.deficit {
                    break;
                }
                f.deficit -= len;
                bytes += len;
                let p = f.queue.pop_front().expect("front");
                // SAFETY: the loop checks the batch has room.
                unsafe { batch.push_unchecked(p) };
            }
            if f.queue.is_empty() {
                f.deficit = 0;
            }
            match f.queue.front() {
                // Still has a packet it may send: the batch is full; resume here next run.
                Some(p) if p.len() as u64 <= f.deficit => self.current = Some(i),
                _ => self.ring.push_back(i),
            }
        }
        bytes
    }

    fn flows(&self) -> usize {
        self.map.len()
    }
}

impl Drr {
    /// The `set_quantum_size` command.
    fn cmd_set_quantum_size(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "DRRQuantumArg")?;
        let q = a.uint("quantum", u32::MAX as u64)?.unwrap_or(0);
        a.finish()?;
        if q == 0 {
            return Err(Error::invalid(
                "DRRQuantumArg.quantum: quantum size must be at least 1",
            ));
        }
        self.quantum = q;
        Ok(Value::Null)
    }

    /// The `set_max_flow_queue_size` command.
    fn cmd_set_max_flow_queue_size(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "DRRMaxFlowQueueSizeArg")?;
        let q = a.uint("max_queue_size", u32::MAX as u64)?.unwrap_or(0);
        a.finish()?;
        if q == 0 {
            return Err(Error::invalid(
                "DRRMaxFlowQueueSizeArg.max_queue_size: max queue size must be at least 1",
            ));
        }
        // Packets already queued beyond a lowered limit stay and drain normally.
        self.max_queue = q as usize;
        Ok(Value::Null)
    }
}

impl Module for Drr {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = now_ns(ctx);
        for p in batch.drain() {
            let id = match flow_id(p.data()) {
                Ok(id) => id,
                Err(r) => {
                    ctx.drop_packet(p, r);
                    continue;
                }
            };
            let i = match self.map.get(&id) {
                Some(&i) => i,
                // BESS refuses a new flow when its flow ring is full (`llring_full`); the
                // flow being served after a batch filled up is outside the ring, as here.
                None if self.ring.len() >= self.ring_cap => {
                    ctx.drop_packet(p, DrrDrop::TooManyFlows);
                    continue;
                }
                None => self.add_flow(id, now),
            };
            let max_queue = self.max_queue;
            let f = self.flow(i);
            if f.queue.len() >= max_queue {
                ctx.drop_packet(p, DrrDrop::FlowQueueFull);
                continue;
            }
            f.queue.push_back(p);
            f.last = now;
        }
    }

    fn run_task(&mut self, ctx: &mut Context, _arg: u64) -> TaskResult {
        let now = now_ns(ctx);
        let mut batch = PacketBatch::new();
        let bytes = self.fill(&mut batch, now);
        let n = batch.len();
        ctx.forward(0, &mut batch);
        TaskResult {
            block: n == 0,
            packets: n as u32,
            bits: (bytes + n as u64 * PACKET_OVERHEAD) * 8,
        }
    }

    fn desc(&self) -> String {
        format!("{} flows, quantum {}", self.flows(), self.quantum)
    }

    fn info(&self) -> Value {
        let queued: usize = self.slots.iter().flatten().map(|f| f.queue.len()).sum();
        Value::map()
            .with("flows", self.flows())
            .with("queued", queued)
            .with("quantum", self.quantum)
            .with("max_flow_queue_size", self.max_queue)
            .with("num_flows", self.num_flows)
            .with("max_flows", self.ring_cap)
    }

    fn deinit(&mut self, ctx: &mut Context) {
        for f in self.slots.iter_mut().flatten() {
            for p in f.queue.drain(..) {
                ctx.free(p);
            }
        }
    }
}

/// Flows the round-robin ring holds, as BESS's DRR: its ring (an llring, which holds one
/// entry fewer than its slots) has `num_flows + 1` rounded up to a power of two slots, or
/// `DEFAULT_NUM_FLOWS` slots when `num_flows` is 0 — so 4 gives 7 flows, 0 gives 4095.
fn ring_capacity(num_flows: u64) -> usize {
    let slots = match num_flows {
        0 => DEFAULT_NUM_FLOWS,
        n => (n + 1).next_power_of_two(),
    };
    (slots - 1) as usize
}

fn create(init: &mut bessemer_core::InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "DRRArg")?;
    // 0 means the default, as in BESS (proto3 cannot tell 0 from absent).
    let num_flows = a.uint("num_flows", MAX_NUM_FLOWS)?.unwrap_or(0);
    let quantum = match a.uint("quantum", u32::MAX as u64)?.unwrap_or(0) {
        0 => DEFAULT_QUANTUM,
        n => n,
    };
    let max_queue = match a.uint("max_flow_queue_size", u32::MAX as u64)?.unwrap_or(0) {
        0 => DEFAULT_MAX_FLOW_QUEUE,
        n => n,
    };
    a.finish()?;
    init.register_task(0);
    Ok(Instance::Exclusive(Box::new(Drr::new(
        num_flows,
        quantum,
        max_queue as usize,
    ))))
}

/// The DRR class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "DRR",
    name_template: "DRR",
    help: "deficit round robin scheduling over IPv4 5-tuple flows",
    arg_type: "DRRArg",
    arg_doc: &[
        "num_flows: uint32 — sizes the flow table as BESS: 2^ceil(log2(num_flows + 1)) - 1 flows at once (7 for 4; default 4095); idle flows are forgotten after 300 s",
        "quantum: uint64 — bytes added to a flow's deficit per round (default 1500)",
        "max_flow_queue_size: uint32 — packets one flow may queue (default 8192)",
        "  its own task dequeues up to a batch (64 packets) per run; non-IPv4 frames share one flow",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "set_quantum_size",
            arg_type: "DRRQuantumArg",
            help: "changes the quantum (bytes per round, at least 1)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Drr, Drr::cmd_set_quantum_size),
        },
        CommandSpec {
            name: "set_max_flow_queue_size",
            arg_type: "DRRMaxFlowQueueSizeArg",
            help: "changes the per-flow queue limit (at least 1)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Drr, Drr::cmd_set_max_flow_queue_size),
        },
    ],
    drop_reasons: DrrDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::MAX_BURST;

    /// An Ethernet/IPv4/UDP frame of `len` bytes from source port `sport`.
    fn pkt(sport: u16, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[12..14].copy_from_slice(&[0x08, 0x00]);
        p[14] = 0x45;
        p[23] = 17;
        p[26..30].copy_from_slice(&[10, 0, 0, 1]);
        p[30..34].copy_from_slice(&[10, 0, 0, 2]);
        p[34..36].copy_from_slice(&sport.to_be_bytes());
        p[36..38].copy_from_slice(&[0, 53]);
        p
    }

    fn sport(p: &[u8]) -> u16 {
        u16::from_be_bytes([p[34], p[35]])
    }

    fn drr(h: &mut Harness, arg: Value) {
        h.add(&CLASS, "drr", &arg).unwrap();
    }

    #[test]
    fn each_backlogged_flow_gets_its_quantum_share() {
        let mut h = Harness::new();
        drr(&mut h, Value::map().with("quantum", 600));
        let c = h.capture("drr", 0);
        // Flow 1: 100-byte packets, flow 2: 200, flow 3: 300; 10 000 bytes each per 32 of
        // batch capacity, so all stay backlogged for the 5 runs below.
        let k = MAX_BURST / 32;
        let mut input = Vec::new();
        for i in 0..100 * k {
            input.push(pkt(1, 100));
            if i < 50 * k {
                input.push(pkt(2, 200));
            }
            if i < 34 * k {
                input.push(pkt(3, 300));
            }
        }
        h.inject("drr", 0, &input);
        // One round: 6 x 100, 3 x 200, 2 x 300 = 600 bytes each.
        let r = h.run_task("drr", 0);
        assert_eq!(r.packets as usize, MAX_BURST);
        let got = c.take_data();
        let first: Vec<u16> = got[..11].iter().map(|p| sport(p)).collect();
        assert_eq!(first, [1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3]);
        let mut bytes = [0usize; 4];
        for p in &got {
            bytes[sport(p) as usize] += p.len();
        }
        for _ in 0..4 {
            assert_eq!(h.run_task("drr", 0).packets as usize, MAX_BURST);
            for p in c.take_data() {
                bytes[sport(&p) as usize] += p.len();
            }
            // While all are backlogged, no flow is ahead of another by more than a quantum.
            let (lo, hi) = (
                bytes[1..].iter().min().unwrap(),
                bytes[1..].iter().max().unwrap(),
            );
            assert!(hi - lo <= 600, "{bytes:?}");
        }
        // 5 runs of a batch each, 11 packets (600 bytes per flow) a round: every flow got
        // the whole rounds served, give or take the round in progress.
        let rounds = 5 * MAX_BURST / 11;
        assert!(
            bytes[1..]
                .iter()
                .all(|&b| (rounds * 600..=(rounds + 1) * 600).contains(&b)),
            "{bytes:?}"
        );
    }

    #[test]
    fn quantum_command_changes_the_interleaving() {
        let mut h = Harness::new();
        drr(&mut h, Value::map().with("quantum", 100));
        let c = h.capture("drr", 0);
        let input: Vec<Vec<u8>> = (0..6).flat_map(|_| [pkt(1, 100), pkt(2, 100)]).collect();
        h.inject("drr", 0, &input);
        h.run_task("drr", 0);
        let order: Vec<u16> = c.take_data().iter().map(|p| sport(p)).collect();
        assert_eq!(order, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
        h.command(
            "drr",
            "set_quantum_size",
            &Value::map().with("quantum", 300),
        )
        .unwrap();
        h.inject("drr", 0, &input);
        h.run_task("drr", 0);
        let order: Vec<u16> = c.take_data().iter().map(|p| sport(p)).collect();
        assert_eq!(order, [1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]);
        let e = h
            .command("drr", "set_quantum_size", &Value::map().with("quantum", 0))
            .unwrap_err();
        assert!(e.msg.contains("DRRQuantumArg.quantum"), "{}", e.msg);
        let e = h
            .command("drr", "set_max_flow_queue_size", &Value::map())
            .unwrap_err();
        assert!(e.msg.contains("max_queue_size"), "{}", e.msg);
        // An empty DRR blocks.
        assert!(h.run_task("drr", 0).block);
    }

    #[test]
    fn a_packet_larger_than_the_quantum_waits_for_enough_rounds() {
        let mut h = Harness::new();
        drr(&mut h, Value::map().with("quantum", 100));
        let c = h.capture("drr", 0);
        h.inject("drr", 0, &[pkt(1, 250), pkt(2, 60), pkt(2, 60), pkt(2, 60)]);
        h.run_task("drr", 0);
        // Round 1: flow 1 has 100 < 250, flow 2 sends one (100 >= 60, 40 left < 60);
        // round 2: 200 < 250, flow 2 sends two (140); round 3: flow 1 sends (300 >= 250).
        let got: Vec<(u16, usize)> = c.take_data().iter().map(|p| (sport(p), p.len())).collect();
        assert_eq!(got, [(2, 60), (2, 60), (2, 60), (1, 250)]);
    }

    #[test]
    fn drops_are_counted_by_reason() {
        let mut h = Harness::new();
        drr(
            &mut h,
            Value::map()
                .with("num_flows", 2)
                .with("max_flow_queue_size", 4),
        );
        let c = h.capture("drr", 0);
        let mut input: Vec<Vec<u8>> = (0..6).map(|_| pkt(1, 60)).collect();
        input.push(pkt(2, 60));
        input.push(pkt(3, 60)); // a third flow: num_flows 2 admits 3 (a ring of 4 slots)
        input.push(pkt(5, 60)); // a fourth flow
        input.push(vec![0u8; 10]); // too short for Ethernet
        input.push(pkt(1, 60)[..30].to_vec()); // IPv4 header cut off
        let mut bad = pkt(4, 60);
        bad[14] = 0x43; // IHL 3
        input.push(bad);
        h.inject("drr", 0, &input);
        assert_eq!(h.drops("drr", "flow_queue_full"), 2);
        assert_eq!(h.drops("drr", "too_many_flows"), 1);
        assert_eq!(h.drops("drr", "too_short"), 2);
        assert_eq!(h.drops("drr", "malformed"), 1);
        h.command(
            "drr",
            "set_max_flow_queue_size",
            &Value::map().with("max_queue_size", 5),
        )
        .unwrap();
        h.inject("drr", 0, &[pkt(1, 60), pkt(1, 60)]);
        assert_eq!(h.drops("drr", "flow_queue_full"), 3);
        while !h.run_task("drr", 0).block {}
        assert_eq!(c.take_data().len(), 7);
        assert_eq!(h.in_use(), 0);
    }

    /// BESS's test_drr_batch set-up: `num_flows` 4 sizes BESS's flow ring to 8 slots, so 7
    /// flows are served and the 8th is refused; 1 admits 1, 0 the default 4095.
    #[test]
    fn num_flows_admits_as_many_flows_as_bess() {
        for (num_flows, admitted) in [(4u64, 7usize), (1, 1), (7, 7), (8, 15)] {
            let mut h = Harness::new();
            drr(
                &mut h,
                Value::map()
                    .with("num_flows", num_flows)
                    .with("max_flow_queue_size", 100),
            );
            let c = h.capture("drr", 0);
            let input: Vec<Vec<u8>> = (1..=admitted as u16 + 1).map(|f| pkt(f, 60)).collect();
            for chunk in input.chunks(MAX_BURST) {
                h.inject("drr", 0, chunk);
            }
            assert_eq!(h.drops("drr", "too_many_flows"), 1, "num_flows {num_flows}");
            let mut runs = 0;
            while !h.run_task("drr", 0).block {
                runs += 1;
                assert!(runs < 1000);
            }
            let out = c.take_data();
            assert_eq!(out.len(), admitted, "num_flows {num_flows}");
            assert!(out.iter().all(|p| sport(p) as usize <= admitted));
            let info = h.graph.info_of("drr").unwrap();
            assert_eq!(
                info.get("max_flows").unwrap().as_i64(),
                Some(admitted as i64)
            );
            assert_eq!(
                info.get("num_flows").unwrap().as_i64(),
                Some(num_flows as i64)
            );
        }
        let mut h = Harness::new();
        drr(&mut h, Value::map());
        let info = h.graph.info_of("drr").unwrap();
        assert_eq!(info.get("max_flows").unwrap().as_i64(), Some(4095));
    }

    #[test]
    fn idle_flows_expire_after_the_ttl() {
        TEST_NOW.with(|t| t.set(Some(1_000)));
        let mut h = Harness::new();
        drr(&mut h, Value::map().with("num_flows", 1));
        let c = h.capture("drr", 0);
        h.inject("drr", 0, &[pkt(1, 60)]);
        h.run_task("drr", 0);
        h.inject("drr", 0, &[pkt(2, 60)]);
        assert_eq!(h.drops("drr", "too_many_flows"), 1);
        TEST_NOW.with(|t| t.set(Some(1_000 + FLOW_TTL_NS + 1)));
        assert!(h.run_task("drr", 0).block);
        h.inject("drr", 0, &[pkt(2, 60)]);
        h.run_task("drr", 0);
        let got: Vec<u16> = c.take_data().iter().map(|p| sport(p)).collect();
        assert_eq!(got, [1, 2]);
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn queued_packets_are_freed_on_destroy_and_non_ipv4_share_a_flow() {
        let mut h = Harness::new();
        drr(&mut h, Value::map().with("num_flows", 1));
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut v6 = vec![0u8; 60];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        h.inject("drr", 0, &[arp, v6]);
        assert_eq!(h.drops("drr", "too_many_flows"), 0);
        assert_eq!(h.in_use(), 2);
        let e = h
            .add(&CLASS, "bad", &Value::map().with("quantum", -1))
            .unwrap_err();
        assert!(e.msg.contains("DRRArg.quantum"), "{}", e.msg);
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Arbitrary frames (many of them IPv4-typed) are either counted as drops or come out,
        /// each flow in its arrival order.
        #[test]
        fn arbitrary_frames_keep_per_flow_order(
            frames in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..70), any::<bool>(), 0u8..4), 1..100),
            quantum in 1u64..400,
        ) {
            let mut h = Harness::new();
            drr(&mut h, Value::map().with("quantum", quantum).with("num_flows", 3));
            let c = h.capture("drr", 0);
            let input: Vec<Vec<u8>> = frames
                .into_iter()
                .enumerate()
                .map(|(i, (mut f, ipv4, port))| {
                    if ipv4 && f.len() >= 38 {
                        f[12..14].copy_from_slice(&[0x08, 0x00]);
                        f[14] = 0x45;
                        f[20] = 0;
                        f[21] = 0;
                        f[26..34].fill(1);
                        f[34] = port;
                    }
                    // Tag each frame with its index (past the headers) to check order.
                    if f.len() >= 40 {
                        f[38] = i as u8;
                    }
                    f
                })
                .collect();
            h.inject("drr", 0, &input);
            // A run can end empty while a flow saves up deficit for a large packet (as in
            // BESS), so run until nothing is queued.
            let queued = |h: &Harness| {
                h.graph.info_of("drr").unwrap().get("queued").unwrap().as_i64().unwrap()
            };
            let mut runs = 0;
            while queued(&h) > 0 {
                h.run_task("drr", 0);
                runs += 1;
                prop_assert!(runs < 10_000);
            }
            let out = c.take_data();
            let drops: u64 = h.graph.drops_of("drr").unwrap().into_iter().map(|(_, n)| n).sum();
            prop_assert_eq!(out.len() as u64 + drops, input.len() as u64);
            // Per flow, the output is a subsequence of the input in the same order.
            let mut by_flow: HashMap<FlowId, Vec<&Vec<u8>>> = HashMap::new();
            for f in &input {
                if let Ok(id) = flow_id(f) {
                    by_flow.entry(id).or_default().push(f);
                }
            }
            let mut pos: HashMap<FlowId, usize> = HashMap::new();
            for o in &out {
                let id = flow_id(o).unwrap();
                let list = &by_flow[&id];
                let p = pos.entry(id).or_default();
                while *p < list.len() && list[*p] != o {
                    *p += 1;
                }
                prop_assert!(*p < list.len(), "packet out of order in its flow");
                *p += 1;
            }
            prop_assert_eq!(h.in_use(), 0);
        }
    }
}

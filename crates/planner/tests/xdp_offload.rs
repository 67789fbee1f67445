//! The XDP offload program against the user-space pipeline it replaces, packet by packet,
//! with BPF_PROG_TEST_RUN (no interfaces needed). First an ExactMatch on the IPv4 5-tuple
//! whose gates lead to MACSwap -> PortOut(other AF_XDP port), Sink, PortOut(same port), a
//! module the program cannot do, and a drop rule; then IPLookup and WildcardMatch whose
//! gates lead to rewrite chains (Update -> VLANPush, VLANPop -> MACSwap), Sink, a module the
//! program cannot do and an unconnected gate. For random, matching and malformed packets
//! (short, non-IPv4, bad IPv4 headers, VLAN-tagged) the program's verdict, output bytes and
//! counters must be what the user-space modules do, and rules changed by module commands
//! after the offload is on must reach the maps. Last, a BPF module's pcap-filter expressions
//! run by the program's classic BPF interpreter, against the module on the same packets. Needs root (bpf) and clang at build time;
//! reported as ignored otherwise.

use std::collections::{BTreeMap, HashMap};

use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::xdp_offload::XdpOffload;
use bessemer_planner::offload::{
    BpfFilter, Cls, Field, Kind, MapOp, Module, Node, OffloadState, PortInfo, Route, Rule, View,
    WildRule, SLOT_DEFAULT, SLOT_SHORT,
};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

/// xorshift64*: the test's own deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn class(n: &str) -> &'static bessemer_core::ModuleClass {
    bessemer_modules::find(n).unwrap()
}

fn field(o: i64, n: i64) -> Value {
    Value::map().with("offset", o).with("num_bytes", n)
}

/// A UDP/IPv4 frame of flow (sip last byte, sport) to 10.1.0.1:53.
fn frame(sip: u8, sport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len.max(42) - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, sip]);
    f[30..34].copy_from_slice(&[10, 1, 0, 1]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f.truncate(len);
    f
}

fn rule_arg(sip: u8, sport: u16, gate: u64) -> Value {
    let bin = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
    Value::map().with("gate", gate).with(
        "fields",
        Value::List(vec![
            bin(&[17]),
            bin(&[10, 0, 0, sip]),
            bin(&[10, 1, 0, 1]),
            bin(&sport.to_be_bytes()),
            bin(&53u16.to_be_bytes()),
        ]),
    )
}

/// Writes what `plan` changes to the program's maps; deleted rules' counts are returned
/// per (module, ogate) of their chains.
fn apply(
    xdp: &XdpOffload,
    st: &mut OffloadState,
    plan: &bessemer_planner::offload::Plan,
) -> HashMap<(String, Option<u16>), u64> {
    let mut retired = HashMap::new();
    for op in st.sync(plan) {
        match op {
            MapOp::Config(c) => xdp.set_config(&c).unwrap(),
            MapOp::Dev { slot, ifindex, .. } => xdp.set_dev(slot, ifindex, "").unwrap(),
            MapOp::ResetCounter(s) => xdp.reset_counter(s).unwrap(),
            MapOp::Prog { slot, prog } => xdp.set_prog(slot, &prog).unwrap(),
            MapOp::Filter { slot, filter } => xdp.set_filter(slot, &filter).unwrap(),
            MapOp::Put { key, action } => xdp.put_rule(key.map(), &key.bytes(), &action).unwrap(),
            MapOp::Delete {
                key, slot, chain, ..
            } => {
                xdp.delete_rule(key.map(), &key.bytes()).unwrap();
                let (p, _) = xdp.counter(slot).unwrap();
                for hop in chain {
                    *retired.entry(hop).or_default() += p;
                }
            }
        }
    }
    retired
}

/// The user-space result of one packet.
#[derive(Debug, PartialEq, Eq)]
enum Out {
    /// Left through this ExactMatch gate (after MACSwap for gate 0), with these bytes.
    Gate(u16, Vec<u8>),
    /// Dropped by ExactMatch (rule drop).
    Dropped,
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn offloaded_pipeline_equals_user_space_on_random_and_malformed_packets() {
    // Unmasked 5-tuple: the program's constant-offset fast path.
    differential(None);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn masked_keys_take_the_generic_gather_and_agree_too() {
    // The source address's last byte masked to its high nibble: the byte-by-byte gather.
    differential(Some([0xff, 0xff, 0xff, 0xf0]));
}

/// The differential run; `sip_mask`: ExactMatch's mask on the source address, if any.
fn differential(sip_mask: Option<[u8; 4]>) {
    // User space: em -> gate 0 swap (MACSwap) -> [out1], gate 1 [sink], gate 2 [nat: user],
    // gate 3 [out0: same port]; default gate 2; drop rules at DROP_GATE.
    let mut h = Harness::new();
    let fields = Value::List(vec![
        field(23, 1),
        field(26, 4),
        field(30, 4),
        field(34, 2),
        field(36, 2),
    ]);
    h.add(
        class("ExactMatch"),
        "em",
        &match sip_mask {
            None => Value::map().with("fields", fields),
            Some(m) => {
                let bin = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
                let masks = Value::List(vec![
                    bin(&[0xff]),
                    bin(&m),
                    bin(&[0xff; 4]),
                    bin(&[0xff; 2]),
                    bin(&[0xff; 2]),
                ]);
                Value::map().with("fields", fields).with("masks", masks)
            }
        },
    )
    .unwrap();
    h.add(class("MACSwap"), "swap", &Value::map()).unwrap();
    h.connect("em", 0, "swap", 0).unwrap();
    let caps = [
        h.capture("swap", 0),
        h.capture("em", 1),
        h.capture("em", 2),
        h.capture("em", 3),
    ];
    h.command("em", "set_default_gate", &Value::map().with("gate", 2u64))
        .unwrap();
    let drop_gate = bessemer_core::module::MAX_GATES as u64;
    let mut flows = Vec::new();
    for i in 0..200u16 {
        let (sip, sport) = ((i % 250) as u8, 1000 + i);
        let gate = match i % 10 {
            0..=4 => 0,
            5 | 6 => 1,
            7 => 2,
            8 => 3,
            _ => drop_gate,
        };
        h.command("em", "add", &rule_arg(sip, sport, gate)).unwrap();
        flows.push((sip, sport));
    }

    // The planner's view of the same pipeline.
    let rt = h
        .command("em", "get_runtime_config", &Value::map())
        .unwrap();
    let rules: Vec<Rule> = rt
        .get("rules")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|r| {
            let g = r.get("gate").and_then(Value::as_i64).unwrap() as u64;
            Rule {
                fields: r
                    .get("fields")
                    .and_then(Value::as_list)
                    .unwrap()
                    .iter()
                    .map(|v| {
                        v.get("value_bin")
                            .and_then(Value::as_bytes)
                            .unwrap()
                            .to_vec()
                    })
                    .collect(),
                gate: (g != drop_gate).then_some(g as u16),
            }
        })
        .collect();
    assert_eq!(rules.len(), 200);
    let sizes = [1usize, 4, 4, 2, 2];
    let offs = [23usize, 26, 30, 34, 36];
    let mut v = View {
        port: "p0".into(),
        entries: vec!["em".into()],
        ..View::default()
    };
    let xport = |ifname: &str, ifindex: u32| PortInfo {
        driver: "AFXDPPort".into(),
        ifname: ifname.into(),
        ifindex,
        netns: String::new(),
    };
    v.ports.insert("p0".into(), xport("lo", 1));
    v.ports.insert("p1".into(), xport("lo", 1));
    let m = |class: &str, node: Node, og: &[(u16, &str)]| Module {
        class: class.into(),
        node,
        ogates: og
            .iter()
            .map(|(g, n)| (*g, n.to_string()))
            .collect::<BTreeMap<_, _>>(),
    };
    v.modules.insert(
        "em".into(),
        m(
            "ExactMatch",
            Node::ExactMatch {
                fields: offs
                    .iter()
                    .zip(sizes)
                    .map(|(&o, n)| Field {
                        offset: Some(o),
                        size: n,
                        mask: match sip_mask {
                            Some(m) if o == 26 => m.to_vec(),
                            _ => vec![0xff; n],
                        },
                    })
                    .collect(),
                has_values: false,
                rules,
                default_gate: Some(2),
            },
            &[(0, "swap"), (1, "sink"), (2, "nat"), (3, "out0")],
        ),
    );
    v.modules
        .insert("swap".into(), m("MACSwap", Node::MacSwap, &[(0, "out1")]));
    v.modules.insert(
        "out1".into(),
        m("PortOut", Node::PortOut { port: "p1".into() }, &[]),
    );
    v.modules.insert(
        "out0".into(),
        m("PortOut", Node::PortOut { port: "p0".into() }, &[]),
    );
    v.modules.insert("sink".into(), m("Sink", Node::Sink, &[]));
    v.modules.insert(
        "nat".into(),
        m(
            "NAT",
            Node::Other {
                class: "NAT".into(),
            },
            &[],
        ),
    );
    let plan = v.plan();
    assert_eq!(plan.is_5tuple(), sip_mask.is_none());
    assert_eq!(plan.gate(0).action.kind, Kind::Redirect(0));
    assert_eq!(plan.default.action.kind, Kind::User);

    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    apply(&xdp, &mut st, &plan);

    // Packets: matching flows, near misses, random bytes, truncations (the kernel runs XDP
    // on frames of at least an Ethernet header, as BPF_PROG_TEST_RUN requires).
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut user_gate_counts: HashMap<u16, u64> = HashMap::new();
    let mut dropped = 0u64;
    let mut short = 0u64;
    for n in 0..3000 {
        let (sip, sport) = flows[rng.below(flows.len() as u64) as usize];
        let mut p = match n % 6 {
            0..=2 => frame(sip, sport, 60 + rng.below(1400) as usize),
            3 => frame(sip, sport.wrapping_add(1 + rng.below(3) as u16), 64),
            4 => {
                let len = 14 + rng.below(50) as usize;
                frame(sip, sport, len)
            }
            _ => (0..14 + rng.below(100)).map(|_| rng.next() as u8).collect(),
        };
        if n % 17 == 0 {
            // A wrong protocol or IP version: still just bytes to the exact match.
            let at = 23.min(p.len() - 1);
            p[at] = 6;
        }
        if p.len() < 38 {
            short += 1;
        }
        // User space.
        h.inject("em", 0, std::slice::from_ref(&p));
        let mut got = None;
        for (g, c) in caps.iter().enumerate() {
            let d = c.take_data();
            assert!(d.len() <= 1);
            if let Some(b) = d.into_iter().next() {
                got = Some(Out::Gate(g as u16, b));
            }
        }
        let user = got.unwrap_or(Out::Dropped);
        // The program.
        let (verdict, bytes) = xdp.test_run(&p).unwrap();
        match &user {
            Out::Gate(0, b) => {
                assert_eq!(verdict, XDP_REDIRECT, "packet {n}");
                assert_eq!(&bytes, b, "packet {n}: rewritten bytes");
            }
            Out::Gate(1, b) => {
                assert_eq!(verdict, XDP_DROP, "packet {n}");
                assert_eq!(b, &p);
            }
            Out::Gate(2, b) => {
                // No AF_XDP socket in this test: "up to user space" falls back to XDP_PASS.
                assert_eq!(verdict, XDP_PASS, "packet {n}");
                assert_eq!(&bytes, b);
            }
            Out::Gate(3, b) => {
                assert_eq!(verdict, XDP_TX, "packet {n}");
                assert_eq!(&bytes, b);
            }
            Out::Gate(g, _) => panic!("gate {g}"),
            Out::Dropped => {
                assert_eq!(verdict, XDP_DROP, "packet {n}");
                dropped += 1;
            }
        }
        if let Out::Gate(g, _) = user {
            *user_gate_counts.entry(g).or_default() += 1;
        }
    }
    // Counters: per gate, the rules' slots add up to what user space saw on that gate
    // (gate 2 also gets every miss and short packet, which the program counts apart).
    let mut by_gate: HashMap<Option<u16>, u64> = HashMap::new();
    for (slot, chain) in st.slots() {
        let (p, _) = xdp.counter(slot).unwrap();
        // Empty chain: sent up to user space (gate 2 here), counted by the modules there.
        let g = if slot == SLOT_DEFAULT || chain.is_empty() {
            Some(2)
        } else {
            chain[0].1
        };
        *by_gate.entry(g).or_default() += p;
    }
    let (short_p, _) = xdp.counter(SLOT_SHORT).unwrap();
    assert_eq!(short_p, short);
    for g in [0u16, 1, 3] {
        assert_eq!(
            by_gate.get(&Some(g)).copied().unwrap_or(0),
            user_gate_counts.get(&g).copied().unwrap_or(0),
            "gate {g}"
        );
    }
    assert_eq!(
        by_gate.get(&Some(2)).copied().unwrap_or(0) + short_p,
        user_gate_counts.get(&2).copied().unwrap_or(0)
    );
    assert_eq!(by_gate.get(&None).copied().unwrap_or(0), dropped);
    assert_eq!(h.drops("em", "rule_drop"), dropped);
    assert!(dropped > 0 && user_gate_counts.len() == 4);
}

#[test]
fn without_clang_the_offload_says_which_package_is_missing() {
    // Built with clang there is nothing to check here.
    if let Some(why) = bessemer_drivers::xdp_offload::unavailable() {
        assert!(why.contains("clang"), "{why}");
    }
}

// ---- IPLookup and WildcardMatch classifiers with rewrite chains ----------------------------

/// The chains behind classifier `cls`, alike in user space and in the planner's view:
/// gate 0 -> upd (Update: destination MAC, bytes 40..42) -> push (VLANPush) -> out1 (PortOut
/// p1: XDP_REDIRECT), gate 1 -> pop (VLANPop) -> swap (MACSwap) -> out0 (PortOut p0: XDP_TX),
/// gate 2 -> sink, gate 3 -> nat (user space), gate 4 unconnected (drop).
const CHAIN0_MIN: usize = 42;
const CHAIN1_MIN: usize = 22;

/// Gates whose packets the test sees leave user space: (gate, capture at the chain's end).
type Caps = Vec<(u16, bessemer_core::testing::CaptureHandle)>;

fn add_chains(h: &mut Harness) -> Caps {
    let upd = Value::map().with(
        "fields",
        Value::List(vec![
            Value::map()
                .with("offset", 0i64)
                .with("size", 6i64)
                .with("value", Value::Int(0x0200_0000_0099)),
            Value::map()
                .with("offset", 40i64)
                .with("size", 2i64)
                .with("value", Value::Int(0xbeef)),
        ]),
    );
    h.add(class("Update"), "upd", &upd).unwrap();
    h.add(
        class("VLANPush"),
        "push",
        &Value::map().with("tci", 0x2064u64),
    )
    .unwrap();
    h.add(class("VLANPop"), "pop", &Value::map()).unwrap();
    h.add(class("MACSwap"), "swap", &Value::map()).unwrap();
    h.connect("cls", 0, "upd", 0).unwrap();
    h.connect("upd", 0, "push", 0).unwrap();
    h.connect("cls", 1, "pop", 0).unwrap();
    h.connect("pop", 0, "swap", 0).unwrap();
    vec![
        (0, h.capture("push", 0)),
        (1, h.capture("swap", 0)),
        (2, h.capture("cls", 2)),
        (3, h.capture("cls", 3)),
    ]
}

/// The planner's view of `cls` (already read through its commands) and the chains, the
/// rewrite modules read through theirs as the daemon does.
fn chain_view(h: &mut Harness, cls_class: &str, cls: Node) -> View {
    let mut v = View {
        port: "p0".into(),
        entries: vec!["cls".into()],
        ..View::default()
    };
    let xport = |ifname: &str| PortInfo {
        driver: "AFXDPPort".into(),
        ifname: ifname.into(),
        ifindex: 1,
        netns: String::new(),
    };
    v.ports.insert("p0".into(), xport("lo"));
    v.ports.insert("p1".into(), xport("lo"));
    let upd = h.command("upd", "get_initial_arg", &Value::map()).unwrap();
    let int = |f: &Value, k: &str| f.get(k).and_then(Value::as_i64).unwrap();
    let fields = upd
        .get("fields")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|f| {
            (
                int(f, "offset") as usize,
                int(f, "size") as usize,
                int(f, "value") as u64,
            )
        })
        .collect();
    let tci = h.command("push", "get_initial_arg", &Value::map()).unwrap();
    let tci = tci.get("tci").and_then(Value::as_i64).unwrap() as u16;
    let m = |class: &str, node: Node, og: &[(u16, &str)]| Module {
        class: class.into(),
        node,
        ogates: og.iter().map(|(g, n)| (*g, n.to_string())).collect(),
    };
    for (name, module) in [
        (
            "cls",
            m(
                cls_class,
                cls,
                &[(0, "upd"), (1, "pop"), (2, "sink"), (3, "nat")],
            ),
        ),
        ("upd", m("Update", Node::Update { fields }, &[(0, "push")])),
        (
            "push",
            m("VLANPush", Node::VlanPush { tci }, &[(0, "out1")]),
        ),
        ("pop", m("VLANPop", Node::VlanPop, &[(0, "swap")])),
        ("swap", m("MACSwap", Node::MacSwap, &[(0, "out0")])),
        (
            "out1",
            m("PortOut", Node::PortOut { port: "p1".into() }, &[]),
        ),
        (
            "out0",
            m("PortOut", Node::PortOut { port: "p0".into() }, &[]),
        ),
        ("sink", m("Sink", Node::Sink, &[])),
        (
            "nat",
            m(
                "NAT",
                Node::Other {
                    class: "NAT".into(),
                },
                &[],
            ),
        ),
    ] {
        v.modules.insert(name.into(), module);
    }
    v
}

/// IPLookup's routes and default gate, through its `get_runtime_config`.
fn read_ip_lookup(h: &mut Harness) -> Node {
    let rt = h
        .command("cls", "get_runtime_config", &Value::map())
        .unwrap();
    let gate = |v: &Value, k: &str| {
        let g = v.get(k).and_then(Value::as_i64).unwrap() as u64;
        (g != DROP_GATE).then_some(g as u16)
    };
    let routes = rt
        .get("rules")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|r| Route {
            prefix: u32::from(
                r.get("prefix")
                    .and_then(Value::as_str)
                    .unwrap()
                    .parse::<std::net::Ipv4Addr>()
                    .unwrap(),
            ),
            len: r.get("prefix_len").and_then(Value::as_i64).unwrap() as u8,
            gate: gate(r, "gate"),
        })
        .collect();
    Node::IpLookup {
        routes,
        default_gate: gate(&rt, "default_gate"),
    }
}

const WM_FIELDS: [(usize, usize); 4] = [(12, 2), (23, 1), (30, 4), (36, 2)];

/// WildcardMatch's rules, through its `get_initial_arg` and `get_runtime_config`.
fn read_wildcard(h: &mut Harness) -> Node {
    let init = h.command("cls", "get_initial_arg", &Value::map()).unwrap();
    let rt = h
        .command("cls", "get_runtime_config", &Value::map())
        .unwrap();
    let fields: Vec<Field> = init
        .get("fields")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|f| {
            let n = f.get("num_bytes").and_then(Value::as_i64).unwrap() as usize;
            Field {
                offset: Some(f.get("offset").and_then(Value::as_i64).unwrap() as usize),
                size: n,
                mask: vec![0xff; n],
            }
        })
        .collect();
    assert_eq!(fields.len(), WM_FIELDS.len());
    let bins = |r: &Value, k: &str| -> Vec<Vec<u8>> {
        r.get(k)
            .and_then(Value::as_list)
            .unwrap()
            .iter()
            .map(|v| {
                v.get("value_bin")
                    .and_then(Value::as_bytes)
                    .unwrap()
                    .to_vec()
            })
            .collect()
    };
    let gate = |v: &Value, k: &str| {
        let g = v.get(k).and_then(Value::as_i64).unwrap() as u64;
        (g != DROP_GATE).then_some(g as u16)
    };
    let rules = rt
        .get("rules")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|r| WildRule {
            values: bins(r, "values"),
            masks: bins(r, "masks"),
            priority: r.get("priority").and_then(Value::as_i64).unwrap() as i32,
            gate: gate(r, "gate"),
        })
        .collect();
    Node::WildcardMatch {
        fields,
        has_values: false,
        rules,
        default_gate: gate(&rt, "default_gate"),
    }
}

const DROP_GATE: u64 = bessemer_core::module::MAX_GATES as u64;

/// Destinations the random packets use: the routes' and rules' addresses and near misses.
const DSTS: [[u8; 4]; 12] = [
    [10, 0, 0, 1],
    [10, 1, 0, 1],
    [10, 1, 2, 1],
    [10, 1, 2, 130],
    [10, 1, 2, 200],
    [192, 168, 5, 5],
    [172, 16, 1, 1],
    [10, 1, 3, 7],
    [10, 1, 3, 8],
    [11, 0, 0, 1],
    [8, 8, 8, 8],
    [172, 32, 0, 1],
];
const DPORTS: [u16; 4] = [53, 80, 443, 4789];

/// A random packet: mostly Ethernet/IPv4 to one of DSTS, and VLAN-tagged, short, non-IPv4,
/// bad-header and random frames (always at least an Ethernet header: BPF_PROG_TEST_RUN
/// needs one).
fn random_packet(rng: &mut Rng) -> Vec<u8> {
    let dst = DSTS[rng.below(DSTS.len() as u64) as usize];
    let len = match rng.below(4) {
        0 => 34 + rng.below(20) as usize,
        _ => 42 + rng.below(300) as usize,
    };
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = if rng.below(4) == 0 { 6 } else { 17 };
    f[26..30].copy_from_slice(&[10, 9, 9, rng.next() as u8]);
    f[30..34].copy_from_slice(&dst);
    if len >= 38 {
        let dp = DPORTS[rng.below(DPORTS.len() as u64) as usize];
        f[34..36].copy_from_slice(&(1024 + rng.below(100) as u16).to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
    }
    match rng.below(12) {
        0 | 1 => {
            // VLAN-tagged (802.1Q or 802.1ad), sometimes twice.
            for _ in 0..1 + rng.below(2) {
                let tpid: [u8; 2] = if rng.below(2) == 0 {
                    [0x81, 0]
                } else {
                    [0x88, 0xa8]
                };
                // Half the VIDs small, for VLANSplit's connected gates.
                let tci = match rng.below(2) {
                    0 => rng.next() as u16 & 0xf000 | rng.below(6) as u16,
                    _ => rng.next() as u16,
                }
                .to_be_bytes();
                f.splice(12..12, [tpid[0], tpid[1], tci[0], tci[1]]);
            }
        }
        2 => f.truncate(14 + rng.below(30) as usize),
        3 => {
            // A bad or unusual IPv4 header: version, IHL, total length.
            match rng.below(4) {
                0 => f[14] = 0x65,
                1 => f[14] = 0x40 | (rng.below(16) as u8),
                2 => {
                    let t = (len - 14) as u16 + 1 + rng.below(20) as u16;
                    f[16..18].copy_from_slice(&t.to_be_bytes());
                }
                _ => f[16..18].copy_from_slice(&(rng.below(30) as u16).to_be_bytes()),
            }
        }
        4 => f[12..14].copy_from_slice(if rng.below(2) == 0 {
            &[0x86, 0xdd]
        } else {
            &[0x08, 0x06]
        }),
        5 => {
            let n = 14 + rng.below(120) as usize;
            f = (0..n).map(|_| rng.next() as u8).collect();
        }
        6 => {
            // A shorter total length than the frame (Ethernet padding): still routed.
            let t = 20 + rng.below((len - 34) as u64 + 1) as u16;
            f[16..18].copy_from_slice(&t.to_be_bytes());
        }
        _ => {}
    }
    f
}

/// What the user-space pipeline did with a packet.
#[derive(Debug)]
enum Fate {
    /// Left the chain of classifier gate g with these bytes.
    Gate(u16, Vec<u8>),
    /// Dropped by `module` under `reason`.
    Dropped(&'static str, &'static str),
    /// Dropped with no reason this test watches.
    Other,
}

/// The drop reasons the test watches: (module, reason, does the kernel drop it too).
const WATCHED: [(&str, &str, bool); 10] = [
    ("cls", "no_match", true),
    ("cls", "rule_drop", true),
    ("cls", "deadend", true),
    ("cls", "too_short", false),
    ("cls", "not_ipv4", false),
    ("cls", "bad_ipv4_header", false),
    ("upd", "too_short", false),
    ("push", "too_short", false),
    ("push", "no_headroom", false),
    ("pop", "too_short", false),
];

fn watched_drops(h: &Harness) -> Vec<u64> {
    WATCHED
        .iter()
        .map(|(m, r, _)| {
            h.graph
                .drops_of(m)
                .unwrap()
                .iter()
                .find(|d| d.0 == *r)
                .map_or(0, |d| d.1)
        })
        .collect()
}

fn user_fate(h: &mut Harness, caps: &Caps, p: &[u8]) -> Fate {
    let before = watched_drops(h);
    h.inject("cls", 0, &[p.to_vec()]);
    let after = watched_drops(h);
    let mut fate = Fate::Other;
    for (g, c) in caps {
        let d = c.take_data();
        assert!(d.len() <= 1);
        if let Some(b) = d.into_iter().next() {
            fate = Fate::Gate(*g, b);
        }
    }
    for (i, w) in WATCHED.iter().enumerate() {
        if after[i] != before[i] {
            assert!(matches!(fate, Fate::Other), "both {fate:?} and {w:?}");
            fate = Fate::Dropped(w.0, w.1);
        }
    }
    fate
}

/// Tallies of what the program did, to compare with its counters.
#[derive(Default, Debug)]
struct Tally {
    /// Per gate 0, 1, 2: the shortest frame its chain's program runs on (shorter: up).
    mins: [usize; 3],
    /// Packets the kernel handled per classifier gate (sent up excluded).
    kernel_gate: HashMap<u16, u64>,
    /// Packets the kernel dropped per classifier drop reason.
    kernel_drop: HashMap<&'static str, u64>,
    /// Packets sent up because the program was unsure (SLOT_SHORT).
    unsure: u64,
    /// Packets sent up by the plan (gate 3).
    planned_up: u64,
    /// Packets taking each gate in user space (whoever handled them).
    user_gate: HashMap<u16, u64>,
}

/// The bounds of the chains behind a classifier (gate 2, the Sink, has no program).
const CHAIN_MINS: [usize; 3] = [CHAIN0_MIN, CHAIN1_MIN, 0];

impl Tally {
    fn new(mins: [usize; 3]) -> Tally {
        Tally {
            mins,
            ..Tally::default()
        }
    }
}

/// Runs `p` through both and checks they agree.
fn check_packet(h: &mut Harness, caps: &Caps, xdp: &XdpOffload, p: &[u8], t: &mut Tally) {
    let fate = user_fate(h, caps, p);
    let (verdict, bytes) = xdp.test_run(p).unwrap();
    let up = verdict == XDP_PASS;
    if up {
        assert_eq!(bytes, p, "sent up changed: {fate:?}");
    }
    match &fate {
        Fate::Gate(g, b) => {
            *t.user_gate.entry(*g).or_default() += 1;
            let (want, min) = match g {
                0 => (XDP_REDIRECT, t.mins[0]),
                1 => (XDP_TX, t.mins[1]),
                2 => (XDP_DROP, t.mins[2]),
                _ => (XDP_PASS, 0),
            };
            if *g == 3 {
                assert!(up, "gate 3 (NAT) goes up: {verdict} for {p:02x?}");
                t.planned_up += 1;
            } else if up {
                assert!(
                    p.len() < min,
                    "gate {g}: sent up a frame of {} bytes the chain could do: {p:02x?}",
                    p.len()
                );
                t.unsure += 1;
            } else {
                assert_eq!(verdict, want, "gate {g}: {p:02x?}");
                if *g != 2 {
                    assert_eq!(&bytes, b, "gate {g}: rewritten bytes of {p:02x?}");
                }
                *t.kernel_gate.entry(*g).or_default() += 1;
            }
        }
        Fate::Dropped(m, r) => {
            let kernel = WATCHED.iter().any(|w| w.0 == *m && w.1 == *r && w.2);
            if kernel {
                assert_eq!(verdict, XDP_DROP, "{m} {r}: {p:02x?}");
                *t.kernel_drop.entry(r).or_default() += 1;
            } else {
                assert!(
                    up,
                    "{m} drops it ({r}) in user space: {verdict} for {p:02x?}"
                );
                t.unsure += 1;
            }
        }
        Fate::Other => panic!("user space lost {p:02x?} without a reason"),
    }
}

/// The program's counters against the tally: per classifier gate, per drop reason, sent up.
fn check_counters(xdp: &XdpOffload, st: &OffloadState, t: &Tally) {
    let mut gate: HashMap<u16, u64> = HashMap::new();
    let mut drop: HashMap<String, u64> = HashMap::new();
    let mut up = 0;
    for (slot, (chain, d)) in st.counted() {
        let (p, _) = xdp.counter(slot).unwrap();
        if chain.is_empty() {
            up += p;
            continue;
        }
        if let Some((m, r)) = d {
            assert_eq!(m, "cls");
            *drop.entry(r).or_default() += p;
            continue;
        }
        assert_eq!(chain[0].0, "cls");
        *gate
            .entry(chain[0].1.expect("the first hop's gate"))
            .or_default() += p;
    }
    for g in 0..5u16 {
        assert_eq!(
            gate.get(&g).copied().unwrap_or(0),
            t.kernel_gate.get(&g).copied().unwrap_or(0),
            "kernel counter of gate {g}: {t:?}"
        );
    }
    for r in ["no_match", "rule_drop", "deadend"] {
        assert_eq!(
            drop.get(r).copied().unwrap_or(0),
            t.kernel_drop.get(r).copied().unwrap_or(0),
            "kernel drops {r}"
        );
    }
    assert_eq!(up, t.planned_up, "sent up by plan");
    assert_eq!(
        xdp.counter(SLOT_SHORT).unwrap().0,
        t.unsure,
        "sent up unsure"
    );
}

fn sync(xdp: &XdpOffload, st: &mut OffloadState, v: &View) -> bessemer_planner::offload::Plan {
    let plan = v.plan();
    assert_eq!(plan.none_why, None, "{}", plan.text());
    apply(xdp, st, &plan);
    plan
}

fn route(prefix: &str, len: u64, gate: u64) -> Value {
    Value::map()
        .with("prefix", prefix)
        .with("prefix_len", len)
        .with("gate", gate)
}

/// Packets and time the random runs may take.
const PACKETS: usize = 4000;
const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn run_random(h: &mut Harness, caps: &Caps, xdp: &XdpOffload, seed: u64, t: &mut Tally) {
    let start = std::time::Instant::now();
    let mut rng = Rng(seed);
    for _ in 0..PACKETS {
        assert!(start.elapsed() < RUN_LIMIT, "the run takes too long");
        let p = random_packet(&mut rng);
        check_packet(h, caps, xdp, &p, t);
    }
}

fn ip_lookup_differential(default: Option<u64>) {
    let mut h = Harness::new();
    h.add(class("IPLookup"), "cls", &Value::map()).unwrap();
    let caps = add_chains(&mut h);
    for (p, l, g) in [
        ("10.0.0.0", 8, 0),
        ("10.1.0.0", 16, 1),
        ("10.1.2.0", 24, DROP_GATE),
        ("10.1.2.128", 25, 2),
        ("10.1.2.192", 26, 3),
        ("192.168.0.0", 16, 0),
        ("172.16.0.0", 12, 4),
        ("10.1.3.7", 32, 1),
    ] {
        h.command("cls", "add", &route(p, l, g)).unwrap();
    }
    if let Some(g) = default {
        h.command("cls", "add", &route("0.0.0.0", 0, g)).unwrap();
    }
    let node = read_ip_lookup(&mut h);
    let v = chain_view(&mut h, "IPLookup", node);
    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    let plan = sync(&xdp, &mut st, &v);
    assert_eq!(plan.gate(0).action.kind, Kind::Redirect(0));
    assert_eq!(plan.gate(1).action.kind, Kind::Tx);
    let mut t = Tally::new(CHAIN_MINS);
    run_random(
        &mut h,
        &caps,
        &xdp,
        0x1234_5678 ^ default.unwrap_or(99),
        &mut t,
    );
    check_counters(&xdp, &st, &t);
    // Every kind of outcome happened.
    for g in 0..4u16 {
        assert!(
            t.user_gate.get(&g).copied().unwrap_or(0) > 0,
            "gate {g}: {t:?}"
        );
    }
    assert!(t.kernel_gate.get(&0).copied().unwrap_or(0) > 0, "{t:?}");
    assert!(t.kernel_gate.get(&1).copied().unwrap_or(0) > 0, "{t:?}");
    assert!(
        t.kernel_drop.get("rule_drop").copied().unwrap_or(0) > 0,
        "{t:?}"
    );
    assert!(
        t.kernel_drop.get("deadend").copied().unwrap_or(0) > 0,
        "{t:?}"
    );
    if default.is_none() {
        assert!(
            t.kernel_drop.get("no_match").copied().unwrap_or(0) > 0,
            "{t:?}"
        );
    }
    assert!(t.unsure > 0, "{t:?}");

    // Commands after the offload is on: the maps follow. 10.1.2.200 is in 10.1.2.192/26
    // (gate 3, up); a /32 sends it to gate 0 in the kernel, and its deletion back up.
    let mut p = frame(1, 1000, 80);
    p[30..34].copy_from_slice(&[10, 1, 2, 200]);
    let mut t = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &p, &mut t);
    assert_eq!(t.planned_up, 1);
    h.command("cls", "add", &route("10.1.2.200", 32, 0))
        .unwrap();
    let node = read_ip_lookup(&mut h);
    sync(&xdp, &mut st, &chain_view(&mut h, "IPLookup", node));
    check_packet(&mut h, &caps, &xdp, &p, &mut t);
    assert_eq!(
        t.kernel_gate.get(&0),
        Some(&1),
        "the new route is in the map"
    );
    h.command(
        "cls",
        "delete",
        &Value::map()
            .with("prefix", "10.1.2.200")
            .with("prefix_len", 32u64),
    )
    .unwrap();
    let node = read_ip_lookup(&mut h);
    let retired = {
        let plan = chain_view(&mut h, "IPLookup", node).plan();
        apply(&xdp, &mut st, &plan)
    };
    assert_eq!(retired.get(&("cls".to_string(), Some(0))), Some(&1));
    check_packet(&mut h, &caps, &xdp, &p, &mut t);
    assert_eq!(t.planned_up, 2, "the deleted route is gone from the map");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn ip_lookup_with_rewrite_chains_equals_user_space() {
    ip_lookup_differential(None);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn ip_lookup_default_route_to_user_space_equals_user_space() {
    ip_lookup_differential(Some(3));
}

/// Masks the WildcardMatch rules use, over (ethertype, proto, dst, dport).
const WM_MASKS: [[&[u8]; 4]; 6] = [
    [&[0xff, 0xff], &[0xff], &[0xff; 4], &[0xff, 0xff]],
    [&[0xff, 0xff], &[0], &[0xff, 0xff, 0, 0], &[0, 0]],
    [&[0, 0], &[0], &[0xff, 0, 0, 0], &[0, 0]],
    [&[0, 0], &[0xff], &[0, 0, 0, 0], &[0xff, 0xff]],
    [&[0xff, 0xff], &[0], &[0, 0, 0, 0], &[0, 0]],
    [&[0xff, 0xff], &[0], &[0xff, 0xff, 0xff, 0], &[0, 0]],
];

fn wm_rule(values: [Vec<u8>; 4], m: usize, priority: i64, gate: u64) -> Value {
    let bin = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
    let masks = WM_MASKS[m];
    Value::map()
        .with("gate", gate)
        .with("priority", priority)
        .with(
            "values",
            Value::List(
                values
                    .iter()
                    .zip(masks)
                    .map(|(v, mk)| bin(&v.iter().zip(mk).map(|(a, b)| a & b).collect::<Vec<_>>()))
                    .collect(),
            ),
        )
        .with(
            "masks",
            Value::List(masks.iter().map(|mk| bin(mk)).collect()),
        )
}

fn wildcard_differential(seed: u64) {
    let mut h = Harness::new();
    let fields = Value::List(
        WM_FIELDS
            .iter()
            .map(|&(o, n)| field(o as i64, n as i64))
            .collect(),
    );
    h.add(
        class("WildcardMatch"),
        "cls",
        &Value::map().with("fields", fields),
    )
    .unwrap();
    let caps = add_chains(&mut h);
    // Random rules over the packets' values, every priority distinct (ties under different
    // masks would be refused: the differential is about what is offloaded).
    let mut rng = Rng(seed);
    let mut prios: Vec<i64> = (-20..60).collect();
    for i in (1..prios.len()).rev() {
        prios.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (n, prio) in prios.iter().take(60).enumerate() {
        let dst = DSTS[rng.below(DSTS.len() as u64) as usize];
        let et: [u8; 2] = match rng.below(4) {
            0 => [0x81, 0],
            1 => [0x88, 0xa8],
            _ => [8, 0],
        };
        let proto = if rng.below(3) == 0 { 6 } else { 17 };
        let dp = DPORTS[rng.below(DPORTS.len() as u64) as usize].to_be_bytes();
        let gate = match n % 7 {
            0 | 1 => 0,
            2 | 3 => 1,
            4 => 2,
            5 => 3,
            _ => DROP_GATE,
        };
        let m = rng.below(WM_MASKS.len() as u64) as usize;
        h.command(
            "cls",
            "add",
            &wm_rule(
                [et.to_vec(), vec![proto], dst.to_vec(), dp.to_vec()],
                m,
                *prio,
                gate,
            ),
        )
        .unwrap();
    }
    let node = read_wildcard(&mut h);
    let v = chain_view(&mut h, "WildcardMatch", node);
    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    let plan = sync(&xdp, &mut st, &v);
    assert_eq!(plan.wmasks.len(), WM_MASKS.len());
    let mut t = Tally::new(CHAIN_MINS);
    run_random(&mut h, &caps, &xdp, seed ^ 0xfeed, &mut t);
    check_counters(&xdp, &st, &t);
    assert!(t.kernel_gate.get(&0).copied().unwrap_or(0) > 0, "{t:?}");
    assert!(t.kernel_gate.get(&1).copied().unwrap_or(0) > 0, "{t:?}");
    assert!(
        t.kernel_drop.get("no_match").copied().unwrap_or(0) > 0,
        "{t:?}"
    );
    assert!(
        t.kernel_drop.get("rule_drop").copied().unwrap_or(0) > 0,
        "{t:?}"
    );

    // A rule added by command after the offload is on: the highest priority, exact on one
    // packet's fields, to a gate other than the one the packet takes now; then deleted,
    // and the packet is back where it was.
    let mut p = frame(3, 2000, 90);
    p[30..34].copy_from_slice(&[10, 1, 2, 130]);
    let vals = [
        vec![8, 0],
        vec![17],
        vec![10, 1, 2, 130],
        53u16.to_be_bytes().to_vec(),
    ];
    let mut before = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &p, &mut before);
    let g = if before.user_gate.contains_key(&1) {
        0
    } else {
        1
    };
    h.command("cls", "add", &wm_rule(vals.clone(), 0, 1000, g as u64))
        .unwrap();
    let node = read_wildcard(&mut h);
    sync(&xdp, &mut st, &chain_view(&mut h, "WildcardMatch", node));
    let mut t = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &p, &mut t);
    assert_eq!(
        t.kernel_gate.get(&g),
        Some(&1),
        "the new rule is in the map: {t:?}"
    );
    let masks = WM_MASKS[0];
    let bin = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
    h.command(
        "cls",
        "delete",
        &Value::map()
            .with("values", Value::List(vals.iter().map(|v| bin(v)).collect()))
            .with("masks", Value::List(masks.iter().map(|m| bin(m)).collect())),
    )
    .unwrap();
    let node = read_wildcard(&mut h);
    sync(&xdp, &mut st, &chain_view(&mut h, "WildcardMatch", node));
    let mut after = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &p, &mut after);
    assert_eq!(
        (after.kernel_gate, after.kernel_drop, after.user_gate),
        (before.kernel_gate, before.kernel_drop, before.user_gate),
        "the deleted rule is gone"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn wildcard_match_with_rewrite_chains_equals_user_space() {
    for seed in [1u64, 0xdead_beef, 0x5151_5151] {
        wildcard_differential(seed);
    }
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn rewrite_chains_without_classifier_equal_user_space() {
    // The port feeds the chain itself: every packet takes Update -> VLANPush -> out1, or
    // (second run) VLANPop -> MACSwap -> out0, through the configuration's default action.
    for (entry, cap, verdict, min) in [
        ("upd", 0usize, XDP_REDIRECT, CHAIN0_MIN),
        ("pop", 1, XDP_TX, CHAIN1_MIN),
    ] {
        let mut h = Harness::new();
        h.add(class("IPLookup"), "cls", &Value::map()).unwrap();
        let caps = add_chains(&mut h);
        let node = read_ip_lookup(&mut h);
        let mut v = chain_view(&mut h, "IPLookup", node);
        v.entries = vec![entry.into()];
        let xdp = XdpOffload::load(None).unwrap();
        let mut st = OffloadState::new();
        let plan = sync(&xdp, &mut st, &v);
        assert!(plan.classifier.is_none());
        assert!(!plan.default.action.rewrite.is_empty());
        let mut rng = Rng(0x77 + cap as u64);
        let (mut kernel, mut up) = (0u64, 0u64);
        let start = std::time::Instant::now();
        for _ in 0..PACKETS {
            assert!(start.elapsed() < RUN_LIMIT, "the run takes too long");
            let p = random_packet(&mut rng);
            h.inject(entry, 0, std::slice::from_ref(&p));
            let user = caps[cap].1.take_data().into_iter().next();
            let (got, bytes) = xdp.test_run(&p).unwrap();
            if got == XDP_PASS {
                assert_eq!(bytes, p);
                assert!(p.len() < min, "sent up a frame of {} bytes", p.len());
                up += 1;
            } else {
                assert_eq!(got, verdict, "{p:02x?}");
                assert_eq!(Some(bytes), user, "{p:02x?}");
                kernel += 1;
            }
        }
        assert_eq!(xdp.counter(SLOT_DEFAULT).unwrap().0, kernel);
        assert_eq!(xdp.counter(SLOT_SHORT).unwrap().0, up);
        assert!(kernel > 0 && up > 0, "{kernel} {up}");
    }
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn vlan_split_with_rewrite_chains_equals_user_space() {
    // VLANSplit's gates as the other classifiers': VID 0 (and untagged frames) -> Update ->
    // VLANPush, VID 1 -> VLANPop -> MACSwap, VID 2 -> Sink, VID 3 -> user, other VIDs
    // unconnected. Every chain starts with VLANSplit's pop, which moves the bounds.
    let mut h = Harness::new();
    h.add(class("VLANSplit"), "cls", &Value::map()).unwrap();
    let caps = add_chains(&mut h);
    let v = chain_view(&mut h, "VLANSplit", Node::VlanSplit);
    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    let plan = sync(&xdp, &mut st, &v);
    let mins = [46, 26, 18];
    for (g, min) in mins.iter().enumerate() {
        assert_eq!(
            bessemer_planner::offload::prog_min_len(&plan.gate(g as u16).action.rewrite),
            *min
        );
    }
    let mut t = Tally::new(mins);
    let start = std::time::Instant::now();
    let mut rng = Rng(0x005e_ed0f_71a9);
    for _ in 0..PACKETS {
        assert!(start.elapsed() < RUN_LIMIT, "the run takes too long");
        let p = random_packet(&mut rng);
        check_packet(&mut h, &caps, &xdp, &p, &mut t);
    }
    check_counters(&xdp, &st, &t);
    for g in 0..3u16 {
        assert!(
            t.kernel_gate.get(&g).copied().unwrap_or(0) > 0,
            "gate {g}: {t:?}"
        );
    }
    assert!(t.planned_up > 0, "{t:?}");
    assert!(
        t.kernel_drop.get("deadend").copied().unwrap_or(0) > 0,
        "{t:?}"
    );
}

// ---- BPF: pcap-filter expressions run by the program's classic BPF interpreter --------------

/// Expressions the BPF differential draws from: ports, networks, protocols, VLAN, header
/// bytes, the length, MAC addresses, indexed loads (the TCP flags behind a variable IP header
/// length), arithmetic (modulo, shifts).
const BPF_EXPRS: [&str; 14] = [
    "udp dst port 53",
    "tcp and src net 10.0.0.0/8",
    "ip proto 47",
    "vlan and udp",
    "ip[8] < 5",
    "len > 1000",
    "ether host 02:00:00:00:00:03",
    "tcp[tcpflags] & tcp-syn != 0",
    "udp port 4789 or tcp dst port 443",
    "ip[2:2] % 7 = 3",
    "ether src 02:00:00:00:00:01 and not ip",
    "dst net 10.1.0.0/16 and (ip[6:2] & 0x1fff) = 0",
    "arp or ip6",
    "ip[1] >> 2 = 0 and ip[0] & 0xf > 5",
];

fn bpf_filter_arg(priority: i64, expr: &str, gate: u64) -> Value {
    Value::map()
        .with("priority", priority)
        .with("filter", expr)
        .with("gate", gate)
}

fn bpf_filters_arg(f: Vec<Value>) -> Value {
    Value::map().with("filters", Value::List(f))
}

/// BPF's filters and programs, through its `get_programs`, as the daemon reads them.
fn read_bpf(h: &mut Harness) -> Node {
    let out = h.command("cls", "get_programs", &Value::map()).unwrap();
    Node::Bpf {
        filters: BpfFilter::list_from_answer(&out).unwrap(),
    }
}

/// A random packet for the filters: random_packet's (tagged, short, bad headers, random
/// bytes) with other sources, protocols (TCP with random flags, GRE), TTLs, MAC addresses
/// and lengths up to 1500.
fn bpf_packet(rng: &mut Rng) -> Vec<u8> {
    let mut f = random_packet(rng);
    let n = f.len();
    let mut set = |at: usize, v: u8| {
        if at < n {
            f[at] = v;
        }
    };
    if rng.below(4) == 0 {
        set(26, [10, 11, 192][rng.below(3) as usize]);
    }
    match rng.below(6) {
        0 => set(23, 47),
        1 | 2 => {
            set(23, 6);
            set(47, rng.next() as u8);
        }
        _ => {}
    }
    if rng.below(6) == 0 {
        set(22, rng.below(8) as u8);
    }
    if rng.below(5) == 0 {
        set(5, 3);
    }
    if rng.below(6) == 0 {
        set(20, rng.below(4) as u8 * 0x20);
        set(21, rng.below(3) as u8);
    }
    if rng.below(6) == 0 {
        let to = 990 + rng.below(511) as usize;
        f.extend((n..to).map(|i| i as u8));
    }
    f
}

fn bpf_differential(seed: u64) {
    let mut rng = Rng(seed);
    // 12 filters: random expressions, priorities (ties included: the module's order of
    // addition breaks them) and gates 0..=5 (4 and 5 unconnected: deadend drops).
    let filters: Vec<Value> = (0..12)
        .map(|_| {
            bpf_filter_arg(
                rng.below(7) as i64 - 3,
                BPF_EXPRS[rng.below(BPF_EXPRS.len() as u64) as usize],
                rng.below(6),
            )
        })
        .collect();
    let mut h = Harness::new();
    h.add(class("BPF"), "cls", &bpf_filters_arg(filters))
        .unwrap();
    let caps = add_chains(&mut h);
    let node = read_bpf(&mut h);
    let v = chain_view(&mut h, "BPF", node);
    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    let plan = sync(&xdp, &mut st, &v);
    assert_eq!(plan.cls, Cls::Bpf);
    assert_eq!(plan.filters.len(), 12);
    let mut t = Tally::new(CHAIN_MINS);
    // Per expression: packets it matched and missed (each filter must do both, or the
    // packets do not test it).
    let progs: Vec<_> = BPF_EXPRS
        .iter()
        .map(|e| bessemer_modules::classify::bpf::compile(e).unwrap())
        .collect();
    let mut hits = [[0u32; 2]; BPF_EXPRS.len()];
    let start = std::time::Instant::now();
    for _ in 0..PACKETS {
        assert!(start.elapsed() < RUN_LIMIT, "the run takes too long");
        let p = bpf_packet(&mut rng);
        for (i, prog) in progs.iter().enumerate() {
            let m = bessemer_modules::classify::bpf::run(prog, &p) != 0;
            hits[i][usize::from(m)] += 1;
        }
        check_packet(&mut h, &caps, &xdp, &p, &mut t);
    }
    for (e, [miss, hit]) in BPF_EXPRS.iter().zip(hits) {
        assert!(miss > 0 && hit > 0, "'{e}': {hit} matched, {miss} missed");
    }
    check_counters(&xdp, &st, &t);
    assert!(t.kernel_gate.get(&0).copied().unwrap_or(0) > 0, "{t:?}");
    let gates_seen = (0..4u16)
        .filter(|g| t.user_gate.get(g).copied().unwrap_or(0) > 0)
        .count();
    assert!(gates_seen >= 2, "{t:?}");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn bpf_filters_in_the_kernel_equal_the_module() {
    for seed in [3u64, 0xb9f_0001, 0x5eed_cafe, 0x1234_4321, 77] {
        bpf_differential(seed);
    }
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: bpf(2) and BPF_PROG_TEST_RUN")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang at build time: the XDP offload program is compiled with clang"
)]
fn bpf_filters_added_and_deleted_by_command_reach_the_kernel() {
    let mut h = Harness::new();
    h.add(
        class("BPF"),
        "cls",
        &bpf_filters_arg(vec![
            bpf_filter_arg(5, "udp dst port 53", 1),
            bpf_filter_arg(1, "tcp", 4),
        ]),
    )
    .unwrap();
    let caps = add_chains(&mut h);
    let xdp = XdpOffload::load(None).unwrap();
    let mut st = OffloadState::new();
    let resync = |h: &mut Harness, st: &mut OffloadState| {
        let node = read_bpf(h);
        let v = chain_view(h, "BPF", node);
        let plan = v.plan();
        assert_eq!(plan.none_why, None, "{}", plan.text());
        apply(&xdp, st, &plan)
    };
    resync(&mut h, &mut st);
    // A DNS query: gate 1 (TX after VLANPop and MACSwap) in the kernel.
    let dns = frame(7, 1000, 80);
    let mut t = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &dns, &mut t);
    assert_eq!(t.kernel_gate.get(&1), Some(&1), "{t:?}");
    // A filter of higher priority added by command: the query now takes gate 0 (redirect).
    let new = bpf_filter_arg(9, "src host 10.0.0.7", 0);
    h.command("cls", "add", &bpf_filters_arg(vec![new.clone()]))
        .unwrap();
    resync(&mut h, &mut st);
    let mut t = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &dns, &mut t);
    assert_eq!(
        t.kernel_gate.get(&0),
        Some(&1),
        "the new filter runs: {t:?}"
    );
    // Deleted again: back to gate 1.
    h.command("cls", "delete", &bpf_filters_arg(vec![new]))
        .unwrap();
    resync(&mut h, &mut st);
    check_packet(&mut h, &caps, &xdp, &dns, &mut t);
    assert_eq!(t.kernel_gate.get(&1), Some(&1), "the filter is gone: {t:?}");
    // A TCP frame goes to unconnected gate 4: dropped in the kernel as the module's deadend;
    // after `clear`, everything takes gate 0 and gate 4's key is retired with its count.
    let mut tcp = frame(7, 1000, 80);
    tcp[23] = 6;
    check_packet(&mut h, &caps, &xdp, &tcp, &mut t);
    assert_eq!(t.kernel_drop.get("deadend"), Some(&1), "{t:?}");
    h.command("cls", "clear", &Value::map()).unwrap();
    let retired = resync(&mut h, &mut st);
    assert_eq!(retired.get(&("cls".to_string(), None)), Some(&1));
    let mut t = Tally::new(CHAIN_MINS);
    check_packet(&mut h, &caps, &xdp, &dns, &mut t);
    check_packet(&mut h, &caps, &xdp, &tcp, &mut t);
    assert_eq!(t.kernel_gate.get(&0), Some(&2), "no filters: gate 0: {t:?}");
}

//! The XDP offload program against the user-space pipeline it replaces, packet by packet,
//! with BPF_PROG_TEST_RUN (no interfaces needed): an ExactMatch on the IPv4 5-tuple whose
//! gates lead to MACSwap -> PortOut(other AF_XDP port), Sink, PortOut(same port), a module
//! the program cannot do, and a drop rule. For random, matching and malformed packets the
//! program's verdict, output bytes and counters must be what the user-space modules do.
//! Needs root (bpf) and clang at build time; reported as ignored otherwise.

use std::collections::{BTreeMap, HashMap};

use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::xdp_offload::XdpOffload;
use bessemer_planner::offload::{
    Field, Kind, MapOp, Module, Node, OffloadState, PortInfo, Rule, View, SLOT_DEFAULT, SLOT_SHORT,
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
    for op in st.sync(&plan) {
        match op {
            MapOp::Config(c) => xdp.set_config(&c).unwrap(),
            MapOp::Dev { slot, ifindex, .. } => xdp.set_dev(slot, ifindex, "").unwrap(),
            MapOp::ResetCounter(s) => xdp.reset_counter(s).unwrap(),
            MapOp::Put { key, action } => xdp.put_rule(&key, &action).unwrap(),
            MapOp::Delete { .. } => unreachable!("nothing installed yet"),
        }
    }

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

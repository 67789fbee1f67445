//! Replicate gives each output gate its own packet: a module that rewrites the packets of one
//! branch leaves every other branch's bytes as they were (BESS's replicate.cc copies).

mod common;

use bessemer_core::testing::Harness;
use bessemer_core::Value;
use common::class;
use proptest::prelude::*;

fn gates(g: &[i64]) -> Value {
    Value::map().with(
        "gates",
        Value::List(g.iter().map(|&x| Value::Int(x)).collect()),
    )
}

/// 60-byte Ethernet/IPv4/UDP frame 10.0.0.1:1234 -> 10.0.0.2:5678.
fn udp_frame() -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    p[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    p[12..14].copy_from_slice(&[0x08, 0x00]);
    p[14..34].copy_from_slice(&[
        0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0x66, 0xbe, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    p[34..42].copy_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 26, 0, 0]);
    p
}

#[test]
fn decap_on_one_branch_leaves_the_other_branch_unchanged() {
    let mut h = Harness::new();
    h.add(class("Source"), "src", &Value::map().with("pkt_size", 60))
        .unwrap();
    let tmpl = udp_frame();
    h.add(
        class("Rewrite"),
        "rw",
        &Value::map().with("templates", Value::List(vec![Value::from(tmpl.clone())])),
    )
    .unwrap();
    h.add(class("Replicate"), "repl", &gates(&[0, 1])).unwrap();
    h.add(
        class("GenericDecap"),
        "decap",
        &Value::map().with("bytes", 14),
    )
    .unwrap();
    h.connect("src", 0, "rw", 0).unwrap();
    h.connect("rw", 0, "repl", 0).unwrap();
    h.connect("repl", 1, "decap", 0).unwrap();
    let reader = h.capture("repl", 0);
    let decapped = h.capture("decap", 0);
    h.run_task("src", 0);
    let a = reader.take_data();
    let b = decapped.take_data();
    assert!(!a.is_empty());
    assert_eq!(a.len(), b.len());
    for p in &a {
        assert_eq!(p, &tmpl, "gate 0 sees the frame as Rewrite wrote it");
    }
    for p in &b {
        assert_eq!(p, &tmpl[14..], "gate 1 sees its own copy, decapsulated");
    }
    assert_eq!(h.in_use(), 0);
}

#[test]
fn metadata_is_copied_to_every_branch() {
    let mut h = Harness::new();
    h.add(class("Replicate"), "repl", &gates(&[3, 0])).unwrap();
    let c3 = h.capture("repl", 3);
    let c0 = h.capture("repl", 0);
    let meta = vec![(0usize, vec![0xab, 0xcd, 0xef])];
    h.inject_with_meta("repl", 0, vec![(udp_frame(), meta)]);
    let (a, b) = (c3.take(), c0.take());
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 1);
    assert_eq!(&a[0].meta[..3], &[0xab, 0xcd, 0xef]);
    assert_eq!(a[0].meta, b[0].meta);
    assert_eq!(a[0].data, b[0].data);
    assert_eq!(h.in_use(), 0);
}

/// A module that writes packets, as (class, argument).
#[derive(Clone, Debug)]
enum Writer {
    Decap(u8),
    VlanPush(u16),
    MacSwap,
    Update(u8, u8),
    Rewrite(u8),
}

impl Writer {
    fn class_arg(&self) -> (&'static str, Value) {
        match *self {
            Writer::Decap(n) => ("GenericDecap", Value::map().with("bytes", n as i64)),
            Writer::VlanPush(t) => ("VLANPush", Value::map().with("tci", t as i64)),
            Writer::MacSwap => ("MACSwap", Value::map()),
            Writer::Update(off, v) => (
                "Update",
                Value::map().with(
                    "fields",
                    Value::List(vec![Value::map()
                        .with("offset", off as i64)
                        .with("size", 1)
                        .with("value", v as i64)]),
                ),
            ),
            Writer::Rewrite(b) => (
                "Rewrite",
                Value::map().with("templates", Value::List(vec![Value::from(vec![b; 50])])),
            ),
        }
    }
}

fn writer() -> impl Strategy<Value = Writer> {
    prop_oneof![
        (0u8..20).prop_map(Writer::Decap),
        any::<u16>().prop_map(Writer::VlanPush),
        Just(Writer::MacSwap),
        (0u8..40, any::<u8>()).prop_map(|(o, v)| Writer::Update(o, v)),
        any::<u8>().prop_map(Writer::Rewrite),
    ]
}

/// Adds the chain `ws` under names `{prefix}{i}`; returns (first module, last module).
fn chain(h: &mut Harness, prefix: &str, ws: &[Writer]) -> Option<(String, String)> {
    let mut names: Vec<String> = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let (c, arg) = w.class_arg();
        let n = format!("{prefix}{i}");
        h.add(class(c), &n, &arg).unwrap();
        if let Some(prev) = names.last() {
            h.connect(prev, 0, &n, 0).unwrap();
        }
        names.push(n);
    }
    Some((names.first()?.clone(), names.last()?.clone()))
}

/// What a chain of writers makes of `pkts` on its own.
fn alone(ws: &[Writer], pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut h = Harness::new();
    match chain(&mut h, "w", ws) {
        None => pkts.to_vec(),
        Some((first, last)) => {
            let c = h.capture(&last, 0);
            h.inject(&first, 0, pkts);
            c.take_data()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn each_branch_gets_the_bytes_it_would_get_alone(
        branches in proptest::collection::vec(proptest::collection::vec(writer(), 0..4), 1..4),
        seeds in proptest::collection::vec(any::<u8>(), 1..6),
    ) {
        let pkts: Vec<Vec<u8>> = seeds
            .iter()
            .map(|&s| {
                let mut p = udp_frame();
                p[50] = s;
                p
            })
            .collect();
        let mut h = Harness::new();
        let gs: Vec<i64> = (0..branches.len() as i64).collect();
        h.add(class("Replicate"), "repl", &gates(&gs)).unwrap();
        let mut caps = Vec::new();
        for (g, ws) in branches.iter().enumerate() {
            let cap = match chain(&mut h, &format!("b{g}_"), ws) {
                None => h.capture("repl", g as u16),
                Some((first, last)) => {
                    h.connect("repl", g as u16, &first, 0).unwrap();
                    h.capture(&last, 0)
                }
            };
            caps.push(cap);
        }
        h.inject("repl", 0, &pkts);
        for (ws, cap) in branches.iter().zip(&caps) {
            prop_assert_eq!(cap.take_data(), alone(ws, &pkts), "branch {:?}", ws);
        }
        prop_assert_eq!(h.in_use(), 0);
    }
}

#[test]
fn copies_the_pool_cannot_hold_are_counted_as_no_buffer_and_nothing_leaks() {
    let mut h = Harness::new();
    let all: Vec<i64> = (0..200).collect();
    h.add(class("Replicate"), "r", &gates(&all)).unwrap();
    let c0 = h.capture("r", 0);
    // 32 packets × 199 copies is more than the 4096-buffer pool holds at once.
    h.inject("r", 0, &vec![udp_frame(); 32]);
    assert_eq!(c0.take_data().len(), 32, "the originals go out of gate 0");
    let short = h.drops("r", "no_buffer");
    assert!(short > 0, "no copy failed");
    // Every copy that was made went to an unconnected gate (a dead end); none is lost.
    assert_eq!(h.drops("r", "deadend") + short, 32 * 199);
    assert_eq!(h.in_use(), 0);
}

//! Targets on module graphs: random graphs of several classes (`module_graph`) and classes
//! with real tables and sessions (`module_tables`: the UPF pipeline with its rules, NAT with
//! established flows, IPDefrag with many flows, ESPDecap after a successful decrypt, and
//! ExactMatch / WildcardMatch rules with `values`).

use bessemer_core::testing::{CaptureHandle, Harness};
use bessemer_core::{ModuleClass, Value};
use bessemer_modules::encap::esp::Sa;
use bessemer_modules::find;

use crate::input::{frames, tagged_frames, Input};

fn class(name: &str) -> &'static ModuleClass {
    find(name).unwrap_or_else(|| panic!("class {name} missing"))
}

fn add(h: &mut Harness, c: &str, name: &str, arg: Value) {
    h.add(class(c), name, &arg)
        .unwrap_or_else(|e| panic!("{name} ({c}): {e:?}"));
}

fn connect(h: &mut Harness, from: &str, ogate: u16, to: &str) {
    h.connect(from, ogate, to, 0)
        .unwrap_or_else(|e| panic!("{from}:{ogate} -> {to}: {e:?}"));
}

fn command(h: &mut Harness, m: &str, cmd: &str, arg: Value) {
    h.command(m, cmd, &arg)
        .unwrap_or_else(|e| panic!("{m}.{cmd}: {e:?}"));
}

/// Runs every task of every module (queues, buffers) a few times, so that packets they hold
/// move on before the harness checks for leaks.
fn drain_tasks(h: &mut Harness) {
    let names: Vec<String> = h.graph.modules().into_iter().map(|m| m.name).collect();
    for _ in 0..4 {
        for n in &names {
            if n.starts_with("inj_") {
                continue;
            }
            let tasks = h.graph.tasks_of(n).map(|t| t.len()).unwrap_or(0);
            for t in 0..tasks {
                h.run_task(n, t);
            }
        }
    }
}

/// Graphs of two to six modules of the packet classes (module_frames' list), each created
/// with its smallest argument: module i > 0 takes its input from an earlier module's
/// output gate (both picked by the input), the frames enter module 0. Nothing may panic and
/// every buffer must come back (the harness checks when dropped).
///
/// Input: the module count, then per module a class byte, a parent byte and an ogate byte,
/// then frames (2-byte length, bytes).
pub fn module_graph(data: &[u8]) {
    let classes = crate::packet_classes();
    let mut i = Input::new(data);
    let n = 2 + i.u8() as usize % 5;
    let mut h = Harness::new();
    let mut made: Vec<(String, &'static ModuleClass)> = Vec::new();
    for k in 0..n {
        let c = classes[i.u8() as usize % classes.len()];
        let parent = i.u8() as usize;
        let og = i.u8();
        let name = format!("m{k}");
        let arg = bessemer_modules::samples::minimal_arg(c.name, "p");
        if h.add(c, &name, &arg).is_err() {
            continue;
        }
        if let Some(prev) = made.len().checked_sub(1) {
            let (from, fc) = &made[parent % (prev + 1)];
            let ogate = og as u16 % fc.ogates.clamp(1, 8);
            let igate = og as u16 % c.igates.clamp(1, 4);
            let _ = h.connect(&from.clone(), ogate, &name, igate);
        }
        made.push((name, c));
    }
    if made.is_empty() {
        return;
    }
    // Whatever leaves a gate nobody took is captured (and freed) rather than lost from view.
    let mut caps = Vec::new();
    for (name, c) in &made {
        for g in 0..c.ogates.min(4) {
            let taken = h
                .graph
                .connections()
                .iter()
                .any(|e| e.from == *name && e.ogate == g);
            if !taken {
                caps.push(h.capture(name, g));
            }
        }
    }
    let first = made[0].0.clone();
    h.inject(&first, 0, &frames(i.rest()));
    drain_tasks(&mut h);
    for c in caps {
        c.take();
    }
}

/// Classes with real tables and sessions; the first byte picks the scenario:
/// 0 the UPF pipeline, 1 NAT, 2 IPDefrag, 3 ESPDecap, 4 ExactMatch / WildcardMatch.
pub fn module_tables(data: &[u8]) {
    let mut i = Input::new(data);
    match i.u8() % 5 {
        0 => upf(&mut i),
        1 => nat(&mut i),
        2 => defrag(&mut i),
        3 => esp(&mut i),
        _ => matches(&mut i),
    }
}

/// Injects tagged frames, runs of consecutive frames for the same module in one batch
/// (one graph run per run of frames rather than per frame); `to` names the module a tag
/// goes to.
fn inject_runs(h: &mut Harness, frames: Vec<(u8, Vec<u8>)>, to: impl Fn(u8) -> &'static str) {
    let mut run: Vec<Vec<u8>> = Vec::new();
    let mut dest = "";
    for (tag, f) in frames {
        let d = to(tag);
        if d != dest && !run.is_empty() {
            h.inject(dest, 0, &std::mem::take(&mut run));
        }
        dest = d;
        run.push(f);
    }
    if !run.is_empty() {
        h.inject(dest, 0, &run);
    }
}

// ---- the UPF pipeline --------------------------------------------------------------------

/// Addresses and tunnel ids of the UPF scenario (the corpus generator uses the same).
pub mod upf_consts {
    /// The UPF's N3 address, 198.18.0.1.
    pub const N3_IP: u32 = 0xc612_0001;
    /// The gNB, 198.18.0.2.
    pub const GNB_IP: u32 = 0xc612_0002;
    /// The first UE, 16.0.0.1 (session i has UE_START + i).
    pub const UE_START: u32 = 0x1000_0001;
    /// The first uplink TEID (session i has UL_TEID + i).
    pub const UL_TEID: u32 = 0x100;
    /// The first downlink TEID.
    pub const DL_TEID: u32 = 0x0800_0000;
}

fn ints(v: &[u64]) -> Value {
    Value::List(
        v.iter()
            .map(|&x| Value::map().with("value_int", x))
            .collect(),
    )
}

fn attr(name: &str, n: u64) -> Value {
    Value::map().with("attr_name", name).with("num_bytes", n)
}

fn attrs(list: &[(&str, u64)]) -> Value {
    Value::List(list.iter().map(|&(n, b)| attr(n, b)).collect())
}

/// The pipeline of `conf/upf/upf.bess` (as bench-upf builds it, without the generators) with
/// 1..8 sessions' PDRs (WildcardMatch with values), FARs (ExactMatch with values), QERs
/// (two Qos tables, metering or not) and counters, then tagged frames: odd tags enter on the
/// access side (uplink), even ones on the core side (downlink). The pipelines are built once
/// per thread and session count (building one costs ten times what its frames do), so
/// counters and meters carry over from input to input, as in a running UPF; after each
/// input every buffer must be back in the pool (the pipeline holds none).
fn upf(i: &mut Input) {
    thread_local! {
        static UPF: std::cell::RefCell<std::collections::HashMap<(u64, bool), UpfPipeline>> =
            Default::default();
    }
    let sessions = 1 + (i.u8() % 8) as u64;
    let qer = i.u8() & 1 == 1;
    UPF.with(|cell| {
        let mut map = cell.borrow_mut();
        let p = map
            .entry((sessions, qer))
            .or_insert_with(|| build_upf(sessions, qer));
        inject_runs(&mut p.h, tagged_frames(i.rest()), |tag| {
            if tag & 1 == 1 {
                "ul_meta"
            } else {
                "dl_meta"
            }
        });
        for c in &p.caps {
            c.take();
        }
        assert_eq!(p.h.in_use(), 0, "the UPF pipeline kept packet buffers");
    });
}

/// A built UPF pipeline and the captures at its ends.
struct UpfPipeline {
    h: Harness,
    caps: [CaptureHandle; 2],
}

fn build_upf(sessions: u64, qer: bool) -> UpfPipeline {
    use upf_consts::*;
    let mut h = Harness::new();
    for (name, iface) in [("ul_meta", 1u64), ("dl_meta", 2)] {
        let a = Value::List(vec![Value::map()
            .with("name", "src_iface")
            .with("size", 1u64)
            .with("value_int", iface)]);
        add(&mut h, "SetMetadata", name, Value::map().with("attrs", a));
    }
    add(&mut h, "Merge", "linkMerge", Value::Null);
    add(&mut h, "GtpuParser", "pktParse", Value::Null);
    let pdr_fields = attrs(&[
        ("src_iface", 1),
        ("tunnel_ipv4_dst", 4),
        ("teid", 4),
        ("src_ip", 4),
        ("dst_ip", 4),
        ("src_port", 2),
        ("dst_port", 2),
        ("ip_proto", 1),
    ]);
    let pdr_values = attrs(&[
        ("pdr_id", 4),
        ("fseid", 8),
        ("ctr_id", 4),
        ("qer_id", 4),
        ("far_id", 4),
    ]);
    add(
        &mut h,
        "WildcardMatch",
        "pdrLookup",
        Value::map()
            .with("fields", pdr_fields)
            .with("values", pdr_values),
    );
    let counter = || {
        Value::map()
            .with("name_id", "ctr_id")
            .with("check_exist", true)
            .with("total", sessions)
    };
    for c in ["preQoSCounter", "postDLQoSCounter", "postULQoSCounter"] {
        add(&mut h, "Counter", c, counter());
    }
    add(&mut h, "GtpuDecap", "gtpuDecap", Value::Null);
    let far_values = attrs(&[
        ("action", 1),
        ("tunnel_out_type", 1),
        ("tunnel_out_src_ip4addr", 4),
        ("tunnel_out_dst_ip4addr", 4),
        ("tunnel_out_teid", 4),
        ("tunnel_out_udp_port", 2),
    ]);
    add(
        &mut h,
        "ExactMatch",
        "farLookup",
        Value::map()
            .with("fields", attrs(&[("far_id", 4), ("fseid", 8)]))
            .with("values", far_values),
    );
    add(
        &mut h,
        "GtpuEncap",
        "gtpuEncap",
        Value::map().with("add_psc", qer),
    );
    add(&mut h, "L4Checksum", "outerUDPCsum", Value::Null);
    add(&mut h, "IPChecksum", "outerIPCsum", Value::Null);
    add(&mut h, "Merge", "farMerge", Value::Null);
    add(
        &mut h,
        "Qos",
        "appQERLookup",
        Value::map()
            .with(
                "fields",
                attrs(&[("src_iface", 1), ("qer_id", 4), ("fseid", 8)]),
            )
            .with("values", attrs(&[("qfi", 1)])),
    );
    add(
        &mut h,
        "Qos",
        "sessionQERLookup",
        Value::map().with("fields", attrs(&[("src_iface", 1), ("fseid", 8)])),
    );
    add(
        &mut h,
        "Split",
        "executeFAR",
        Value::map().with("size", 1u64).with("attribute", "action"),
    );
    add(&mut h, "Sink", "fail", Value::Null);
    for (a, og, b) in [
        ("ul_meta", 0, "linkMerge"),
        ("dl_meta", 0, "linkMerge"),
        ("linkMerge", 0, "pktParse"),
        ("pktParse", 1, "pdrLookup"),
        ("pktParse", 0, "fail"),
        ("pdrLookup", 0, "preQoSCounter"),
        ("pdrLookup", 1, "gtpuDecap"),
        ("pdrLookup", 2, "fail"),
        ("gtpuDecap", 0, "preQoSCounter"),
        ("preQoSCounter", 0, "farLookup"),
        ("farLookup", 0, "farMerge"),
        ("farLookup", 1, "gtpuEncap"),
        ("farLookup", 2, "fail"),
        ("gtpuEncap", 1, "outerUDPCsum"),
        ("gtpuEncap", 0, "fail"),
        ("outerUDPCsum", 0, "outerIPCsum"),
        ("outerIPCsum", 0, "farMerge"),
        ("farMerge", 0, "appQERLookup"),
        ("appQERLookup", 1, "sessionQERLookup"),
        ("appQERLookup", 2, "sessionQERLookup"),
        ("appQERLookup", 3, "fail"),
        ("appQERLookup", 6, "sessionQERLookup"),
        ("sessionQERLookup", 1, "executeFAR"),
        ("sessionQERLookup", 2, "executeFAR"),
        ("sessionQERLookup", 3, "fail"),
        ("sessionQERLookup", 6, "executeFAR"),
        ("executeFAR", 0, "postDLQoSCounter"),
        ("executeFAR", 1, "postULQoSCounter"),
    ] {
        connect(&mut h, a, og, b);
    }
    let caps = [
        h.capture("postDLQoSCounter", 0),
        h.capture("postULQoSCounter", 0),
    ];
    for (m, g) in [
        ("pdrLookup", 2u64),
        ("farLookup", 2),
        ("appQERLookup", 6),
        ("sessionQERLookup", 6),
    ] {
        command(&mut h, m, "set_default_gate", Value::map().with("gate", g));
    }
    let u32m = u64::from(u32::MAX);
    for s in 0..sessions {
        let fseid = s + 1;
        let ue = u64::from(UE_START) + s;
        for c in ["preQoSCounter", "postDLQoSCounter", "postULQoSCounter"] {
            command(&mut h, c, "add", Value::map().with("ctr_id", s));
        }
        let pdrs = [
            (
                [1, N3_IP.into(), u64::from(UL_TEID) + s, ue, 0, 0, 0, 0],
                [0xff, u32m, u32m, u32m, 0, 0, 0, 0],
                1u64,
                1u64,
            ),
            (
                [2, 0, 0, 0, ue, 0, 0, 0],
                [0xff, 0, 0, 0, u32m, 0, 0, 0],
                0,
                2,
            ),
        ];
        for (k, (values, masks, gate, far_id)) in pdrs.into_iter().enumerate() {
            let arg = Value::map()
                .with("gate", gate)
                .with("priority", (1i64 << 32) - 3)
                .with("values", ints(&values))
                .with("masks", ints(&masks))
                .with(
                    "valuesv",
                    ints(&[2 * s + 1 + k as u64, fseid, s, 1, far_id]),
                );
            command(&mut h, "pdrLookup", "add", arg);
        }
        let key = |far_id: u64| ints(&[far_id, fseid]);
        let fars = [
            (0u64, key(1), [1, 0, 0, 0, 0, 0]),
            (
                1,
                key(2),
                [
                    0,
                    1,
                    N3_IP.into(),
                    GNB_IP.into(),
                    u64::from(DL_TEID) + s,
                    2152,
                ],
            ),
        ];
        for (gate, fields, values) in fars {
            let arg = Value::map()
                .with("gate", gate)
                .with("fields", fields)
                .with("values", ints(&values));
            command(&mut h, "farLookup", "add", arg);
        }
        let burst = 32 * 1514u64;
        let meter = |fields: Value| {
            Value::map()
                .with("gate", if qer { 0u64 } else { 6 })
                .with("cir", 1u64)
                .with("pir", 1_250_000_000u64)
                .with("cbs", burst)
                .with("pbs", burst)
                .with("ebs", burst)
                .with("fields", fields)
        };
        for iface in [1u64, 2] {
            let arg = meter(ints(&[iface, 1, fseid])).with("values", ints(&[9]));
            command(&mut h, "appQERLookup", "add", arg);
            command(
                &mut h,
                "sessionQERLookup",
                "add",
                meter(ints(&[iface, fseid])),
            );
        }
    }
    UpfPipeline { h, caps }
}

// ---- NAT ---------------------------------------------------------------------------------

/// The reply to an IPv4 frame: MACs, addresses and TCP/UDP ports swapped, an ICMP echo
/// request turned into its reply; None for anything else.
fn reflect(f: &[u8]) -> Option<Vec<u8>> {
    if f.len() < 34 || f[12..14] != [8, 0] {
        return None;
    }
    let ihl = (f[14] & 15) as usize * 4;
    let l4 = 14 + ihl;
    if ihl < 20 || f.len() < l4 + 4 {
        return None;
    }
    let mut r = f.to_vec();
    r[..6].copy_from_slice(&f[6..12]);
    r[6..12].copy_from_slice(&f[..6]);
    r[26..30].copy_from_slice(&f[30..34]);
    r[30..34].copy_from_slice(&f[26..30]);
    match f[23] {
        6 | 17 => {
            r[l4..l4 + 2].copy_from_slice(&f[l4 + 2..l4 + 4]);
            r[l4 + 2..l4 + 4].copy_from_slice(&f[l4..l4 + 2]);
        }
        1 if f[l4] == 8 => r[l4] = 0,
        _ => {}
    }
    Some(r)
}

/// NAT with one or two external addresses (port ranges from the input), then tagged frames:
/// tag % 3 = 0 from the inside; 1 from the outside as given; 2 the reply to the k-th
/// translated packet (k = the frame's first byte), the rest of the frame overwriting it
/// from the L4 header on, so replies reach established flows. Every packet leaves by a gate
/// or is counted as a drop.
fn nat(i: &mut Input) {
    let mut addrs = vec![Value::map().with("ext_addr", "203.0.113.1")];
    if i.u8() & 1 == 1 {
        let begin = i.u16() as u64;
        let end = begin + 1 + i.u8() as u64;
        addrs.push(Value::map().with("ext_addr", "203.0.113.2").with(
            "port_ranges",
            Value::List(vec![Value::map()
                    .with("begin", begin.min(65534))
                    .with("end", end.min(65535))]),
        ));
    }
    let mut h = Harness::new();
    if h.add(
        class("NAT"),
        "nat",
        &Value::map().with("ext_addrs", Value::List(addrs)),
    )
    .is_err()
    {
        return;
    }
    let inside = h.capture("nat", 0);
    let outside = h.capture("nat", 1);
    let mut translated: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0usize;
    let mut out = 0usize;
    for (tag, f) in tagged_frames(i.rest()) {
        match tag % 3 {
            0 => h.inject("nat", 0, &[f]),
            1 => h.inject("nat", 1, &[f]),
            _ => {
                let Some((&k, tail)) = f.split_first() else {
                    continue;
                };
                let Some(orig) = translated.get(k as usize % translated.len().max(1)) else {
                    continue;
                };
                let Some(mut r) = reflect(orig) else {
                    continue;
                };
                let l4 = 14 + (r[14] & 15) as usize * 4;
                let n = tail.len().min(r.len() - l4);
                r[l4..l4 + n].copy_from_slice(&tail[..n]);
                h.inject("nat", 1, &[r]);
            }
        }
        sent += 1;
        out += inside.take().len();
        let o = outside.take_data();
        out += o.len();
        translated.extend(o);
        translated.truncate(64);
    }
    let dropped = h.graph.total_drops("nat").expect("nat") as usize;
    assert_eq!(
        out + dropped,
        sent,
        "NAT: {sent} in, {out} out, {dropped} dropped"
    );
}

// ---- IPDefrag ----------------------------------------------------------------------------

/// IPDefrag with a small table (num_flows 1..64 from the input, 16 datagrams each) so that
/// many flows fill it, behind IPFrag (MTU from the input): tag bit 0 sends a frame through
/// IPFrag first (whole datagrams cut into fragments), else straight to IPDefrag.
fn defrag(i: &mut Input) {
    let num_flows = 1 + (i.u8() % 64) as u64;
    let mtu = 68 + (i.u16() % 1500) as u64;
    let mut h = Harness::new();
    add(
        &mut h,
        "IPDefrag",
        "defrag",
        Value::map().with("num_flows", num_flows),
    );
    if h.add(class("IPFrag"), "frag", &Value::map().with("mtu", mtu))
        .is_err()
    {
        return;
    }
    connect(&mut h, "frag", 1, "defrag");
    let caps = [
        h.capture("defrag", 0),
        h.capture("defrag", 1),
        h.capture("frag", 0),
    ];
    inject_runs(&mut h, tagged_frames(i.rest()), |tag| {
        if tag & 1 == 1 {
            "frag"
        } else {
            "defrag"
        }
    });
    for c in caps {
        c.take();
    }
}

// ---- ESPDecap ----------------------------------------------------------------------------

/// The SAs of the ESP scenario: AES-GCM (SPI 0x100) and AES-CBC + HMAC-SHA1-96 (SPI 0x101),
/// fixed test keys, tunnel 192.0.2.2 -> 192.0.2.1.
fn esp_sas() -> Vec<Value> {
    vec![
        Value::map()
            .with("spi", 0x100u32)
            .with("key", (0..20u8).collect::<Vec<_>>())
            .with("peer", "192.0.2.2")
            .with("local", "192.0.2.1"),
        Value::map()
            .with("spi", 0x101u32)
            .with("cipher", "aes-cbc-128-hmac-sha1-96")
            .with("key", (0x20..0x30u8).collect::<Vec<_>>())
            .with("auth_key", (0x40..0x54u8).collect::<Vec<_>>())
            .with("peer", "192.0.2.2")
            .with("local", "192.0.2.1"),
    ]
}

/// Seals `pt` (inner packet with its trailer, as given: padding, pad length and next header
/// are the input's) under `sa` with sequence number `seq` and IV `iv`, in an Ethernet +
/// IPv4 frame from the peer to the local end.
fn esp_frame(sa: &Sa, seq: u32, iv: &[u8], pt: &[u8]) -> Vec<u8> {
    let s = sa.suite;
    let mut pt = pt.to_vec();
    // CBC takes whole blocks; the trailer's last bytes stay the input's.
    pt.resize(pt.len().div_ceil(s.align()).max(1) * s.align(), 0);
    let mut esp = Vec::with_capacity(s.head_len() + pt.len() + s.icv_len());
    esp.extend(sa.spi.to_be_bytes());
    esp.extend(seq.to_be_bytes());
    let mut ivb = iv.to_vec();
    ivb.resize(s.iv_len(), 0);
    esp.extend(ivb);
    esp.extend(&pt);
    esp.resize(esp.len() + s.icv_len(), 0);
    sa.seal(&mut esp);
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
    let total = (20 + esp.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 50, 0, 0, 192, 0, 2, 2, 192, 0, 2, 1,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = bessemer_core::checksum::ipv4_header(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(ip);
    f.extend(esp);
    f
}

/// ESPDecap with both suites' SAs (replay window from the input), then tagged frames: an
/// even tag sends the frame as given; an odd one seals it first (tag bit 1 picks the SA; a
/// 4-byte sequence number and 16 IV bytes come first in the frame, the rest is the
/// plaintext with its trailer), so that decryption succeeds and what follows it (padding,
/// next header, the inner packet) meets the input. The decapsulated packets go on through
/// GtpuParser. Every packet leaves by a gate or is counted as a drop.
fn esp(i: &mut Input) {
    let window = i.u8() % 130;
    let mut h = Harness::new();
    let arg = Value::map()
        .with("sas", Value::List(esp_sas()))
        .with("replay_window", window as u64);
    if h.add(class("ESPDecap"), "decap", &arg).is_err() {
        return;
    }
    add(&mut h, "GtpuParser", "parse", Value::Null);
    connect(&mut h, "decap", 0, "parse");
    let caps = [h.capture("parse", 0), h.capture("parse", 1)];
    let sas: Vec<Sa> = esp_sas()
        .iter()
        .map(|v| Sa::parse(v, "ESPSecurityAssociation", false).expect("a valid SA"))
        .collect();
    let frames: Vec<Vec<u8>> = tagged_frames(i.rest())
        .into_iter()
        .map(|(tag, f)| {
            if tag & 1 == 0 {
                f
            } else {
                let mut fi = Input::new(&f);
                let seq = fi.u32();
                let iv = fi.bytes(16).to_vec();
                esp_frame(&sas[(tag >> 1) as usize & 1], seq, &iv, fi.rest())
            }
        })
        .collect();
    let sent = frames.len();
    h.inject("decap", 0, &frames);
    let out: usize = caps.iter().map(|c| c.take().len()).sum();
    let dropped = h.graph.total_drops("decap").unwrap() + h.graph.total_drops("parse").unwrap();
    assert_eq!(out + dropped as usize, sent, "ESPDecap: frames lost");
}

// ---- ExactMatch / WildcardMatch ----------------------------------------------------------

/// ExactMatch and WildcardMatch on packet fields (IPv4 destination, protocol, L4
/// destination port) with `values` written to metadata attributes, rules from the input
/// (up to 16 each), then frames; a MetadataTest reads the attributes behind each gate.
fn matches(i: &mut Input) {
    let fields = || {
        Value::List(vec![
            Value::map().with("offset", 30u64).with("num_bytes", 4u64),
            Value::map().with("offset", 23u64).with("num_bytes", 1u64),
            Value::map().with("offset", 36u64).with("num_bytes", 2u64),
        ])
    };
    let values = || attrs(&[("rule_id", 4), ("action", 1)]);
    let mut h = Harness::new();
    add(
        &mut h,
        "ExactMatch",
        "em",
        Value::map()
            .with("fields", fields())
            .with("values", values()),
    );
    add(
        &mut h,
        "WildcardMatch",
        "wm",
        Value::map()
            .with("fields", fields())
            .with("values", values()),
    );
    let reader = Value::map().with(
        "read",
        Value::Map(
            [
                ("rule_id".to_string(), Value::Int(4)),
                ("action".into(), Value::Int(1)),
            ]
            .into_iter()
            .collect(),
        ),
    );
    add(&mut h, "MetadataTest", "read", reader);
    for g in 0..4u16 {
        h.connect("em", g, "wm", 0).unwrap();
        h.connect("wm", g, "read", g).unwrap();
    }
    let caps: Vec<CaptureHandle> = (0..4).map(|g| h.capture("read", g)).collect();
    let nrules = i.u8() % 17;
    for r in 0..nrules {
        let dst = i.u32() as u64;
        let proto = i.u8() as u64;
        let port = i.u16() as u64;
        let gate = (i.u8() % 4) as u64;
        let vals = ints(&[r as u64, gate]);
        let key = ints(&[dst, proto, port]);
        let _ = h.command(
            "em",
            "add",
            &Value::map()
                .with("gate", gate)
                .with("fields", key.clone())
                .with("values", vals.clone()),
        );
        let masks = ints(&[
            u64::from(u32::MAX) << (i.u8() % 33) & u64::from(u32::MAX),
            0xff * (i.u8() & 1) as u64,
            0xffff * (i.u8() & 1) as u64,
        ]);
        let _ = h.command(
            "wm",
            "add",
            &Value::map()
                .with("gate", gate)
                .with("priority", i.u8() as i64)
                .with("values", key)
                .with("masks", masks)
                .with("valuesv", vals),
        );
    }
    let _ = h.command("em", "set_default_gate", &Value::map().with("gate", 3u64));
    let _ = h.command("wm", "set_default_gate", &Value::map().with("gate", 3u64));
    let frames = frames(i.rest());
    let sent = frames.len();
    h.inject("em", 0, &frames);
    let out: usize = caps.iter().map(|c| c.take().len()).sum();
    let dropped: u64 = ["em", "wm", "read"]
        .iter()
        .map(|m| h.graph.total_drops(m).unwrap())
        .sum();
    assert_eq!(out + dropped as usize, sent, "match tables: frames lost");
}

//! The omec-project fork's UPF classes: literal frames in, literal frames and metadata out
//! per gate, command results, drops counted by reason.

use bessemer_core::metadata::AttrOffset;
use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_modules::find;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn add(h: &mut Harness, class: &str, name: &str, arg: &Value) {
    h.add(find(class).unwrap(), name, arg).unwrap();
}

const MACS: &str = "020000000002 020000000001";

/// An IPv4 header (no options, checksum 0) with `proto` from `src` to `dst` before `payload`.
fn ip(proto: u8, src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut v = hex("4500 0000 0001 0000 40");
    v[2..4].copy_from_slice(&total.to_be_bytes());
    v.push(proto);
    v.extend_from_slice(&[0, 0]);
    v.extend(hex(src));
    v.extend(hex(dst));
    v.extend_from_slice(payload);
    v
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(sport.to_be_bytes());
    v.extend(dport.to_be_bytes());
    v.extend(((8 + payload.len()) as u16).to_be_bytes());
    v.extend([0, 0]);
    v.extend_from_slice(payload);
    v
}

/// A GTP-U message: `flags` (0x30 plus E/S/PN), `msg_type`, TEID, then `opt` (optional
/// fields and extension headers) and `payload`; the length field covers both.
fn gtp(flags: u8, msg_type: u8, teid: u32, opt: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flags, msg_type];
    v.extend(((opt.len() + payload.len()) as u16).to_be_bytes());
    v.extend(teid.to_be_bytes());
    v.extend_from_slice(opt);
    v.extend_from_slice(payload);
    v
}

fn eth(payload: &[u8]) -> Vec<u8> {
    [hex(MACS), hex("0800"), payload.to_vec()].concat()
}

/// The inner packet of the tunnel tests: UDP 10.0.0.1:1234 -> 8.8.8.8:53, 4 bytes of data.
fn inner() -> Vec<u8> {
    ip(17, "0a000001", "08080808", &udp(1234, 53, &hex("cafebabe")))
}

/// A G-PDU from gNB 192.168.0.1 to the UPF 192.168.0.2, TEID 0x11223344, with `opt`.
fn gpdu_with(opt: &[u8], flags: u8) -> Vec<u8> {
    eth(&ip(
        17,
        "c0a80001",
        "c0a80002",
        &udp(2152, 2152, &gtp(flags, 0xff, 0x1122_3344, opt, &inner())),
    ))
}

fn gpdu() -> Vec<u8> {
    gpdu_with(&[], 0x30)
}

/// Sequence number field set, then a PDU Session Container (UL, QFI 9).
const PSC: &str = "0000 00 85  01 10 09 00";

/// Reads attribute `name` of `size` bytes of the MetadataTest `reader` from a capture.
fn attr(h: &Harness, reader: &str, name: &str, meta: &[u8]) -> Vec<u8> {
    let (spec, off) = h
        .graph
        .attr_offsets(reader)
        .unwrap()
        .into_iter()
        .find(|(s, _)| s.name == name)
        .unwrap();
    let AttrOffset::At(o) = off else {
        panic!("{name} has no offset")
    };
    meta[o as usize..o as usize + spec.size].to_vec()
}

fn reader(attrs: &[(&str, i64)]) -> Value {
    Value::map().with(
        "read",
        Value::Map(
            attrs
                .iter()
                .map(|(n, s)| (n.to_string(), Value::Int(*s)))
                .collect(),
        ),
    )
}

const PARSED: &[(&str, i64)] = &[
    ("src_ip", 4),
    ("dst_ip", 4),
    ("src_port", 2),
    ("dst_port", 2),
    ("teid", 4),
    ("tunnel_ipv4_dst", 4),
    ("ip_proto", 1),
];

fn parser(h: &mut Harness) {
    add(h, "GtpuParser", "p", &Value::Null);
    add(h, "MetadataTest", "r", &reader(PARSED));
    h.connect("p", 1, "r", 0).unwrap();
}

fn parsed(h: &Harness, meta: &[u8]) -> Vec<Vec<u8>> {
    PARSED.iter().map(|(n, _)| attr(h, "r", n, meta)).collect()
}

#[test]
fn parser_fills_inner_fields_of_gpdus_and_outer_fields_of_plain_packets() {
    let mut h = Harness::new();
    parser(&mut h);
    let out = h.capture("r", 0);
    let other = h.capture("p", 0);
    let tcp = eth(&ip(
        6,
        "0a000001",
        "0a000002",
        &hex("0050 1f90 00000000 00000000 5000 0000 0000 0000"),
    ));
    let icmp = eth(&ip(1, "0a000003", "0a000004", &hex("0800 0000 0000 0000")));
    let arp = [hex(MACS), hex("0806"), vec![0; 28]].concat();
    let v6 = [hex(MACS), hex("86dd"), vec![0; 40]].concat();
    let echo = eth(&ip(
        17,
        "c0a80001",
        "c0a80002",
        &udp(2152, 2152, &gtp(0x32, 1, 0, &hex("0001 0000"), &[])),
    ));
    h.inject(
        "p",
        0,
        &[
            gpdu(),
            gpdu_with(&hex(PSC), 0x34),
            tcp.clone(),
            icmp,
            arp.clone(),
            v6.clone(),
            echo.clone(),
        ],
    );
    let got = out.take();
    assert_eq!(got.len(), 5);
    let tunnelled = vec![
        hex("0a000001"),
        hex("08080808"),
        hex("04d2"),
        hex("0035"),
        hex("11223344"),
        hex("c0a80002"),
        vec![17],
    ];
    assert_eq!(got[0].data, gpdu());
    assert_eq!(parsed(&h, &got[0].meta), tunnelled);
    assert_eq!(parsed(&h, &got[1].meta), tunnelled);
    assert_eq!(
        parsed(&h, &got[2].meta),
        vec![
            hex("0a000001"),
            hex("0a000002"),
            hex("0050"),
            hex("1f90"),
            hex("ffffffff"),
            hex("ffffffff"),
            vec![6]
        ]
    );
    assert_eq!(
        parsed(&h, &got[3].meta),
        vec![
            hex("0a000003"),
            hex("0a000004"),
            hex("ffff"),
            hex("ffff"),
            hex("ffffffff"),
            hex("ffffffff"),
            vec![1]
        ]
    );
    assert_eq!(got[4].data, arp);
    assert_eq!(other.take_data(), vec![v6, echo]);
}

#[test]
fn parser_counts_malformed_gtpu() {
    let mut h = Harness::new();
    parser(&mut h);
    let out = h.capture("r", 0);
    let _other = h.capture("p", 0);
    let good = gpdu();
    let mut v0 = good.clone();
    v0[42] = 0x10; // GTP version 0
    let mut gtp_prime = good.clone();
    gtp_prime[42] = 0x20; // PT = 0
    let mut long = good.clone();
    long[45] += 1; // GTP-U length one past the datagram
    let mut unknown = good.clone();
    unknown[43] = 0x63;
    let zero_ext = gpdu_with(&hex("0000 00 85  00 10 09 00"), 0x34);
    let past_end = gpdu_with(&hex("0000 00 85  02 10 09 00"), 0x34);
    let mut inner_bad = good.clone();
    inner_bad[50] = 0x4f; // inner IHL past its total length
    h.inject(
        "p",
        0,
        &[
            good[..40].to_vec(), // too_short: no room for the UDP header
            good[..48].to_vec(), // too_short: outer IP total length past the frame
            v0,
            gtp_prime,
            long,
            unknown,
            zero_ext,
            past_end,
            inner_bad,
            good.clone(),
        ],
    );
    assert_eq!(out.take_data(), vec![good]);
    assert_eq!(h.drops("p", "too_short"), 2);
    assert_eq!(h.drops("p", "gtpu_bad_version"), 2);
    assert_eq!(h.drops("p", "gtpu_bad_length"), 1);
    assert_eq!(h.drops("p", "gtpu_unknown_type"), 1);
    assert_eq!(h.drops("p", "gtpu_bad_extension"), 2);
    assert_eq!(h.drops("p", "inner_malformed"), 1);
}

#[test]
fn decap_strips_outer_headers_and_extension_headers() {
    let mut h = Harness::new();
    add(&mut h, "GtpuDecap", "d", &Value::Null);
    let out = h.capture("d", 0);
    let mut opts = good_opts();
    opts.push(gpdu());
    h.inject("d", 0, &opts);
    let want = eth(&inner());
    assert_eq!(out.take_data(), vec![want; 4]);
}

/// G-PDUs with a sequence number, an N-PDU number, and a PSC extension header.
fn good_opts() -> Vec<Vec<u8>> {
    vec![
        gpdu_with(&hex("1234 0000"), 0x32),
        gpdu_with(&hex("0000 07 00"), 0x31),
        gpdu_with(&hex(PSC), 0x34),
    ]
}

#[test]
fn decap_counts_what_it_cannot_decapsulate() {
    let mut h = Harness::new();
    add(&mut h, "GtpuDecap", "d", &Value::Null);
    let out = h.capture("d", 0);
    let good = gpdu();
    let mut tcp = good.clone();
    tcp[23] = 6;
    let mut port = good.clone();
    port[36..38].copy_from_slice(&hex("0035"));
    let mut frag = good.clone();
    frag[20] = 0x20;
    let end_marker = eth(&ip(
        17,
        "c0a80001",
        "c0a80002",
        &udp(2152, 2152, &gtp(0x30, 254, 7, &[], &[])),
    ));
    let mut bad_udp_len = good.clone();
    bad_udp_len[39] = 4;
    h.inject(
        "d",
        0,
        &[
            tcp,
            port,
            frag,
            end_marker,
            bad_udp_len,
            good[..45].to_vec(),
        ],
    );
    assert!(out.take_data().is_empty());
    assert_eq!(h.drops("d", "not_gtpu"), 2);
    assert_eq!(h.drops("d", "fragment"), 1);
    assert_eq!(h.drops("d", "not_gpdu"), 1);
    assert_eq!(h.drops("d", "gtpu_bad_length"), 1);
    assert_eq!(h.drops("d", "too_short"), 1);
}

/// A SetMetadata argument writing `attrs` (name, bytes).
fn set_meta(attrs: &[(&str, Vec<u8>)]) -> Value {
    Value::map().with(
        "attrs",
        Value::List(
            attrs
                .iter()
                .map(|(n, b)| {
                    Value::map()
                        .with("name", *n)
                        .with("size", b.len())
                        .with("value_bin", b.clone())
                })
                .collect(),
        ),
    )
}

/// SetMetadata (the FAR lookup's tunnel fields, host order) -> GtpuEncap(add_psc).
fn encap_graph(h: &mut Harness, add_psc: bool) {
    let meta = set_meta(&[
        ("action", vec![1]),
        (
            "tunnel_out_src_ip4addr",
            0xc0a8_0002u32.to_le_bytes().to_vec(),
        ),
        (
            "tunnel_out_dst_ip4addr",
            0xc0a8_0001u32.to_le_bytes().to_vec(),
        ),
        ("tunnel_out_teid", 0x1122_3344u32.to_le_bytes().to_vec()),
        ("tunnel_out_udp_port", 2152u16.to_le_bytes().to_vec()),
        ("qfi", vec![9]),
    ]);
    add(h, "SetMetadata", "m", &meta);
    add(h, "GtpuEncap", "e", &Value::map().with("add_psc", add_psc));
    h.connect("m", 0, "e", 0).unwrap();
}

#[test]
fn encap_builds_the_outer_headers_with_and_without_psc() {
    for psc in [false, true] {
        let mut h = Harness::new();
        encap_graph(&mut h, psc);
        let out = h.capture("e", 1);
        let mut pkt = eth(&inner());
        pkt[15] = 0xb8; // TOS, copied to the outer header
        h.inject("m", 0, &[pkt.clone()]);
        let (opt, flags) = if psc {
            (hex("0000 00 85  01 10 09 00"), 0x34)
        } else {
            (vec![], 0x30)
        };
        let mut inner_tos = inner();
        inner_tos[1] = 0xb8;
        let mut want = eth(&ip(
            17,
            "c0a80002",
            "c0a80001",
            &udp(2152, 2152, &gtp(flags, 0xff, 0x1122_3344, &opt, &inner_tos)),
        ));
        want[15] = 0xb8;
        want[18..20].copy_from_slice(&hex("0513"));
        assert_eq!(out.take_data(), vec![want]);
    }
}

#[test]
fn encap_then_decap_gives_the_packet_back() {
    let mut h = Harness::new();
    encap_graph(&mut h, true);
    add(&mut h, "GtpuDecap", "d", &Value::Null);
    h.connect("e", 1, "d", 0).unwrap();
    let out = h.capture("d", 0);
    h.inject("m", 0, &[eth(&inner()), hex("0102")]);
    assert_eq!(out.take_data(), vec![eth(&inner())]);
    assert_eq!(h.drops("e", "too_short"), 1);
}

fn echo(msg_type: u8, ie: &[u8], from: (&str, u16), to: (&str, u16)) -> Vec<u8> {
    eth(&ip(
        17,
        from.0,
        to.0,
        &udp(
            from.1,
            to.1,
            &gtp(
                0x32,
                msg_type,
                0,
                &[&hex("0007 0000")[..], ie].concat(),
                &[],
            ),
        ),
    ))
}

#[test]
fn echo_answers_requests_in_padding_or_by_growing() {
    let mut h = Harness::new();
    add(
        &mut h,
        "GtpuEcho",
        "e",
        &Value::map().with("s1u_sgw_ip", 0xc0a8_0002u32),
    );
    let out = h.capture("e", 1);
    let req = echo(1, &[], ("c0a80001", 40000), ("c0a80002", 2152));
    let mut padded = req.clone();
    padded.extend_from_slice(&[0xee; 6]);
    h.inject("e", 0, &[req.clone(), padded]);
    let resp = echo(2, &hex("0e00"), ("c0a80002", 2152), ("c0a80001", 40000));
    let mut resp_padded = resp.clone();
    resp_padded.extend_from_slice(&[0xee; 4]);
    assert_eq!(out.take_data(), vec![resp, resp_padded]);
}

#[test]
fn echo_counts_what_it_does_not_answer() {
    let mut h = Harness::new();
    add(&mut h, "GtpuEcho", "e", &Value::map().with("s1u_sgw_ip", 1));
    let out = h.capture("e", 1);
    let req = echo(1, &[], ("c0a80001", 40000), ("c0a80002", 2152));
    let mut short_ip = req.clone();
    short_ip.extend_from_slice(&[0; 4]);
    short_ip[17] += 4; // IP total length past the UDP datagram
    h.inject(
        "e",
        0,
        &[
            gpdu(),
            echo(2, &[], ("c0a80001", 2152), ("c0a80002", 2152)),
            short_ip,
            req[..50].to_vec(),
        ],
    );
    assert!(out.take_data().is_empty());
    assert_eq!(h.drops("e", "not_echo_request"), 2);
    assert_eq!(h.drops("e", "gtpu_bad_length"), 1);
    assert_eq!(h.drops("e", "too_short"), 1);
    let e = h
        .add(find("GtpuEcho").unwrap(), "bad", &Value::map())
        .unwrap_err();
    assert!(e.msg.contains("S1U"), "{}", e.msg);
}

fn counter_graph(h: &mut Harness, id: u32) {
    add(
        h,
        "SetMetadata",
        &format!("m{id}"),
        &set_meta(&[("ctr_id", id.to_le_bytes().to_vec())]),
    );
    h.connect(&format!("m{id}"), 0, "c", 0).unwrap();
}

#[test]
fn counter_counts_packets_and_bytes_per_id() {
    let mut h = Harness::new();
    let arg = Value::map()
        .with("name_id", "ctr_id")
        .with("check_exist", true)
        .with("total", 4u32);
    add(&mut h, "Counter", "c", &arg);
    counter_graph(&mut h, 2);
    counter_graph(&mut h, 7);
    let out = h.capture("c", 0);
    h.command("c", "add", &Value::map().with("ctr_id", 2u32))
        .unwrap();
    h.inject("m2", 0, &[vec![0; 60], vec![0; 70]]);
    h.inject("m7", 0, &[vec![0; 60]]);
    assert_eq!(out.len(), 3);
    let want = Value::map().with("sessions", 1u64).with(
        "counters",
        vec![Value::map()
            .with("ctr_id", 2usize)
            .with("pkts", 2u64)
            .with("bytes", 130u64)],
    );
    assert_eq!(h.graph.info_of("c").unwrap(), want);
    h.command("c", "remove", &Value::map().with("ctr_id", 2u32))
        .unwrap();
    let empty = Value::map()
        .with("sessions", 0u64)
        .with("counters", Vec::<Value>::new());
    assert_eq!(h.graph.info_of("c").unwrap(), empty);
    h.inject("m2", 0, &[vec![0; 60]]);
    h.command("c", "removeAll", &Value::map()).unwrap();
    assert_eq!(h.graph.info_of("c").unwrap(), empty);
    for bad in [
        Value::map().with("total", 4u32),
        Value::map().with("name_id", "ctr_id"),
    ] {
        let e = h.add(find("Counter").unwrap(), "bad", &bad).unwrap_err();
        assert!(e.msg.contains("Invalid"), "{}", e.msg);
    }
    assert!(h.command("c", "read", &Value::map()).is_err());
}

fn bin(b: &[u8]) -> Value {
    Value::map().with("value_bin", b.to_vec())
}

fn qos_arg() -> Value {
    Value::map()
        .with(
            "fields",
            vec![Value::map().with("offset", 30).with("num_bytes", 4)],
        )
        .with(
            "values",
            vec![Value::map().with("attr_name", "qfi").with("num_bytes", 1)],
        )
        .with("entries", 3u64)
}

fn qos_add(dst: &str, gate: u64, qfi: u8) -> Value {
    Value::map()
        .with("gate", gate)
        .with("fields", vec![bin(&hex(dst))])
        .with("values", vec![Value::map().with("value_int", qfi as u64)])
}

/// A 64-byte UDP frame to `dst`.
fn to(dst: &str) -> Vec<u8> {
    eth(&ip(17, "0a000001", dst, &udp(1, 2, &[0; 22])))
}

#[test]
fn qos_sends_rule_hits_to_their_gate_writing_values() {
    let mut h = Harness::new();
    add(&mut h, "Qos", "q", &qos_arg());
    add(&mut h, "MetadataTest", "r", &reader(&[("qfi", 1)]));
    h.connect("q", 5, "r", 0).unwrap();
    let out = h.capture("r", 0);
    let dflt = h.capture("q", 6);
    h.command("q", "add", &qos_add("0a000002", 5, 7)).unwrap();
    h.command("q", "add", &qos_add("0a000003", 8192, 1))
        .unwrap();
    h.inject(
        "q",
        0,
        &[to("0a000002"), to("0a000003"), to("0a000004"), hex("0102")],
    );
    let got = out.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, to("0a000002"));
    assert_eq!(attr(&h, "r", "qfi", &got[0].meta), vec![7]);
    assert_eq!(h.drops("q", "rule_drop"), 1);
    assert_eq!(h.drops("q", "no_match"), 1);
    assert_eq!(h.drops("q", "too_short"), 1);
    h.command("q", "set_default_gate", &Value::map().with("gate", 6))
        .unwrap();
    h.command(
        "q",
        "delete",
        &Value::map().with("fields", vec![bin(&hex("0a000002"))]),
    )
    .unwrap();
    h.inject("q", 0, &[to("0a000002")]);
    assert_eq!(dflt.take_data(), vec![to("0a000002")]);
    // entries = 3: a fourth distinct key is refused, replacing one is not.
    h.command("q", "add", &qos_add("0a000005", 5, 1)).unwrap();
    h.command("q", "add", &qos_add("0a000006", 5, 1)).unwrap();
    assert!(h.command("q", "add", &qos_add("0a000007", 5, 1)).is_err());
    h.command("q", "add", &qos_add("0a000006", 7, 1)).unwrap();
    h.command("q", "clear", &Value::map()).unwrap();
    h.command("q", "add", &qos_add("0a000007", 5, 1)).unwrap();
    for (arg, msg) in [
        (qos_add("0a000002", 2, 1), "Invalid gate"),
        (qos_add("0a000002", 0, 1), "trTCM"),
        (
            Value::map()
                .with("gate", 5)
                .with("fields", Vec::<Value>::new()),
            "must specify 1 fields",
        ),
    ] {
        let e = h.command("q", "add", &arg).unwrap_err();
        assert!(e.msg.contains(msg), "{}", e.msg);
    }
}

#[test]
fn qos_meters_by_colour() {
    let mut h = Harness::new();
    add(&mut h, "Qos", "q", &qos_arg());
    let caps: Vec<_> = (1..=3).map(|g| h.capture("q", g)).collect();
    // 1 byte/s refills nothing within the test; each 64-byte frame meters 50 bytes (the
    // Ethernet header deducted by default).
    let meter = qos_add("0a000002", 0, 3)
        .with("cir", 1u64)
        .with("pir", 1u64)
        .with("cbs", 100u64)
        .with("pbs", 200u64)
        .with("ebs", 0u64);
    h.command("q", "add", &meter).unwrap();
    for _ in 0..5 {
        h.inject("q", 0, &[to("0a000002")]);
    }
    let counts: Vec<usize> = caps.iter().map(|c| c.len()).collect();
    assert_eq!(counts, vec![2, 2, 1], "green, yellow, red");
    // Replaced with deduct_len 0 (full buckets again), 64 bytes each: one green, two yellow
    // (peak 200 - 3 x 64 = 8 left), one red.
    h.command("q", "add", &meter.clone().with("deduct_len", 0i64))
        .unwrap();
    h.inject(
        "q",
        0,
        &[
            to("0a000002"),
            to("0a000002"),
            to("0a000002"),
            to("0a000002"),
        ],
    );
    let counts: Vec<usize> = caps.iter().map(|c| c.len()).collect();
    assert_eq!(counts, vec![3, 4, 2], "green, yellow, red");
}

/// Markers too large for a rule's cache line (bursts of 2^32 bytes and more, a `deduct_len`
/// beyond 32 bits) colour as the others do.
#[test]
fn qos_meters_large_markers_by_colour() {
    let mut h = Harness::new();
    add(&mut h, "Qos", "q", &qos_arg());
    let caps: Vec<_> = (1..=3).map(|g| h.capture("q", g)).collect();
    let meter = |cbs: u64, pbs: u64, deduct: i64| {
        qos_add("0a000002", 0, 3)
            .with("cir", 1u64)
            .with("pir", 1u64)
            .with("cbs", cbs)
            .with("pbs", pbs)
            .with("deduct_len", deduct)
    };
    let run = |h: &mut Harness, arg: &Value| -> Vec<usize> {
        h.command("q", "add", arg).unwrap();
        for _ in 0..3 {
            h.inject("q", 0, &[to("0a000002")]);
        }
        caps.iter().map(|c| c.take().len()).collect()
    };
    assert_eq!(run(&mut h, &meter(1 << 33, 1 << 34, 14)), vec![3, 0, 0]);
    assert_eq!(run(&mut h, &meter(100, 1 << 43, -(1 << 40))), vec![0, 3, 0]);
    assert_eq!(run(&mut h, &meter(100, 200, -(1 << 40))), vec![0, 0, 3]);
    assert_eq!(run(&mut h, &meter(100, 200, 1 << 40)), vec![3, 0, 0]);
}

/// A frame to `dst` whose payload starts with `tag` (to tell packets apart).
fn tagged(dst: &str, tag: u8) -> Vec<u8> {
    let mut payload = [0u8; 22];
    payload[0] = tag;
    eth(&ip(17, "0a000001", dst, &udp(1, 2, &payload)))
}

/// A Qos with two small metered rules (green, yellow, red within a few packets), an
/// unmetered rule of gate 5, default gate 6, every gate captured: the gate of each packet
/// by its tag.
fn qos_by_gate(h: &mut Harness, name: &str) -> impl Fn() -> std::collections::BTreeMap<u8, u16> {
    add(h, "Qos", name, &qos_arg().with("entries", 0u64));
    let caps: Vec<_> = [1u16, 2, 3, 5, 6]
        .into_iter()
        .map(|g| (g, h.capture(name, g)))
        .collect();
    for (dst, cbs, pbs) in [("0a000002", 120u64, 300u64), ("0a000003", 60, 110)] {
        let meter = qos_add(dst, 0, 3)
            .with("cir", 1u64)
            .with("pir", 1u64)
            .with("cbs", cbs)
            .with("pbs", pbs);
        h.command(name, "add", &meter).unwrap();
    }
    h.command(name, "add", &qos_add("0a000004", 5, 1)).unwrap();
    h.command(name, "set_default_gate", &Value::map().with("gate", 6))
        .unwrap();
    move || {
        let mut by_tag = std::collections::BTreeMap::new();
        for (g, c) in &caps {
            for p in c.take() {
                by_tag.insert(p.data[42], *g);
            }
        }
        by_tag
    }
}

proptest::proptest! {
    /// A batch colours and sends each packet as the same packets one batch each do: runs of
    /// one key (looked up once) and of one metered rule (its marker kept in registers) change
    /// nothing.
    #[test]
    fn qos_batches_colour_as_single_packets_do(
        keys in proptest::collection::vec(0usize..6, 1..64),
    ) {
        let dsts = ["0a000002", "0a000002", "0a000003", "0a000004", "0a000009", "short"];
        let frames = |round: u8| -> Vec<Vec<u8>> {
            keys.iter()
                .enumerate()
                .map(|(i, &k)| match dsts[k] {
                    "short" => hex("0102"),
                    d => tagged(d, round * 64 + i as u8),
                })
                .collect()
        };
        let mut h = Harness::new();
        let batched = qos_by_gate(&mut h, "a");
        let single = qos_by_gate(&mut h, "b");
        // Two rounds: what a batch leaves in the markers is what the next one starts from.
        for round in 0..2 {
            h.inject("a", 0, &frames(round));
            for f in &frames(round) {
                h.inject("b", 0, std::slice::from_ref(f));
            }
        }
        let got = batched();
        proptest::prop_assert_eq!(&got, &single());
        let sent = frames(0).iter().filter(|f| f.len() > 2).count();
        proptest::prop_assert_eq!(got.len(), 2 * sent);
        proptest::prop_assert_eq!(h.drops("a", "too_short"), 2 * (keys.len() - sent) as u64);
    }
}

#[test]
fn qos_writes_values_for_each_packet_of_a_metered_run() {
    let mut h = Harness::new();
    add(&mut h, "Qos", "q", &qos_arg());
    add(&mut h, "MetadataTest", "r", &reader(&[("qfi", 1)]));
    h.connect("q", 1, "r", 0).unwrap();
    let out = h.capture("r", 0);
    let meter = qos_add("0a000002", 0, 9)
        .with("cir", 1u64)
        .with("pir", 1u64)
        .with("cbs", 1000u64)
        .with("pbs", 1000u64);
    h.command("q", "add", &meter).unwrap();
    h.inject(
        "q",
        0,
        &(0..5).map(|i| tagged("0a000002", i)).collect::<Vec<_>>(),
    );
    let got = out.take();
    assert_eq!(got.len(), 5, "all green");
    for p in &got {
        assert_eq!(attr(&h, "r", "qfi", &p.meta), vec![9]);
    }
}

mod trtcm {
    use bessemer_modules::upf::qos::{Color, TrTcm};
    use proptest::prelude::*;

    /// RFC 2698, colour-blind, as written there: both buckets grow by their rate every
    /// tick of `1/hz` s up to their burst size; a packet is red if it exceeds the peak
    /// bucket, yellow (taking peak tokens) if it exceeds the committed one, else green
    /// (taking both). Tokens are counted in 1/hz bytes.
    struct Reference {
        tc: u128,
        tp: u128,
        params: (u128, u128, u128, u128, u128),
    }

    impl Reference {
        fn new(cir: u64, pir: u64, cbs: u64, pbs: u64, hz: u64) -> Reference {
            let hz = hz as u128;
            Reference {
                tc: cbs as u128 * hz,
                tp: pbs as u128 * hz,
                params: (
                    cir as u128,
                    pir as u128,
                    cbs as u128 * hz,
                    pbs as u128 * hz,
                    hz,
                ),
            }
        }
        fn after(&mut self, ticks: u64, len: u64) -> Color {
            let (cir, pir, bc, bp, hz) = self.params;
            for _ in 0..ticks {
                self.tc = (self.tc + cir).min(bc);
                self.tp = (self.tp + pir).min(bp);
            }
            let b = len as u128 * hz;
            if self.tp < b {
                Color::Red
            } else if self.tc < b {
                self.tp -= b;
                Color::Yellow
            } else {
                self.tc -= b;
                self.tp -= b;
                Color::Green
            }
        }
    }

    proptest! {
        #[test]
        fn colours_match_rfc_2698(
            cir in 1u64..2000,
            extra in 0u64..2000,
            cbs in 1u64..3000,
            pbs in 1u64..3000,
            hz in 1u64..50,
            pkts in proptest::collection::vec((0u64..40, 0u64..1600), 1..60),
        ) {
            let pir = cir + extra;
            let mut m = TrTcm::new(cir, pir, cbs, pbs, hz, 1000).unwrap();
            let mut r = Reference::new(cir, pir, cbs, pbs, hz);
            let mut now = 1000;
            for (dt, len) in pkts {
                now += dt;
                prop_assert_eq!(m.color(now, len), r.after(dt, len));
            }
        }
    }

    #[test]
    fn refuses_what_dpdk_refuses() {
        for (cir, pir, cbs, pbs) in [(0, 1, 1, 1), (2, 1, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0)] {
            assert!(TrTcm::new(cir, pir, cbs, pbs, 1, 0).is_err());
        }
    }
}

fn sfield(offset: i64, size: u64, min: u64, max: u64) -> Value {
    Value::map()
        .with("offset", offset)
        .with("size", size)
        .with("min", min)
        .with("max", max)
}

#[test]
fn sequential_update_counts_through_each_range() {
    let mut h = Harness::new();
    let arg = Value::map().with("fields", vec![sfield(0, 2, 1000, 1002)]);
    add(&mut h, "SequentialUpdate", "s", &arg);
    // A 1-byte field whose max is clamped to 255.
    h.command(
        "s",
        "add",
        &Value::map().with("fields", vec![sfield(2, 1, 254, 4000)]),
    )
    .unwrap();
    let out = h.capture("s", 0);
    h.inject("s", 0, &vec![vec![0u8; 4]; 5]);
    h.inject("s", 0, &[vec![0u8; 2]]);
    assert_eq!(
        out.take_data(),
        vec![
            hex("03e8 fe 00"),
            hex("03e9 ff 00"),
            hex("03ea fe 00"),
            hex("03e8 ff 00"),
            hex("03e9 fe 00"),
        ]
    );
    assert_eq!(h.drops("s", "too_short"), 1);
    h.command("s", "clear", &Value::map()).unwrap();
    h.inject("s", 0, &[vec![7u8; 2]]);
    assert_eq!(out.take_data(), vec![vec![7u8; 2]]);
    // The full 32-bit range wraps.
    let all = Value::map().with("fields", vec![sfield(0, 4, 0, u32::MAX as u64)]);
    h.command("s", "add", &all).unwrap();
    h.inject("s", 0, &[vec![0u8; 4], vec![0u8; 4]]);
    assert_eq!(out.take_data(), vec![hex("00000000"), hex("00000001")]);
    for (bad, msg) in [
        (sfield(0, 2, 5, 4), "'min' should not be greater than 'max'"),
        (sfield(0, 3, 0, 1), "'size' must be 1, 2, or 4"),
    ] {
        let e = h
            .command("s", "add", &Value::map().with("fields", vec![bad]))
            .unwrap_err();
        assert!(e.msg.contains(msg), "{}", e.msg);
    }
    let many = Value::map().with("fields", vec![sfield(0, 1, 0, 1); 16]);
    let e = h.command("s", "add", &many).unwrap_err();
    assert!(e.msg.contains("max 16 variables"), "{}", e.msg);
}

/// An IPv4 header with `opts`, `flags_off`, id 0x4242, protocol 17, its checksum filled,
/// before `payload`.
fn frag_ip(opts: &[u8], flags_off: u16, payload: &[u8]) -> Vec<u8> {
    let hlen = 20 + opts.len();
    let mut h = vec![0x40 | (hlen / 4) as u8, 0];
    h.extend(((hlen + payload.len()) as u16).to_be_bytes());
    h.extend(hex("4242"));
    h.extend(flags_off.to_be_bytes());
    h.extend(hex("4011 0000 0a000001 0a000002"));
    h.extend_from_slice(opts);
    let c = bessemer_core::checksum::ipv4_header(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    [h, payload.to_vec()].concat()
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| i as u8).collect()
}

#[test]
fn ip_frag_cuts_long_frames_into_fragments_that_fit() {
    let mut h = Harness::new();
    add(&mut h, "IPFrag", "f", &Value::map().with("mtu", 100));
    let out = h.capture("f", 1);
    let df = h.capture("f", 0);
    let data = payload(130);
    let big = eth(&frag_ip(&[], 0, &data));
    let small = eth(&frag_ip(&[], 0, &data[..60]));
    let arp = [hex(MACS), hex("0806"), vec![0; 150]].concat();
    let dont = eth(&frag_ip(&[], 0x4000, &data));
    let mut padded = eth(&frag_ip(&[], 0, &data[..50]));
    padded.extend_from_slice(&[0; 20]); // 104-byte frame, 84 of them the packet
    h.inject(
        "f",
        0,
        &[big, small.clone(), arp.clone(), dont.clone(), padded],
    );
    // At most 96 bytes a frame (MTU 100 less the CRC): 56 payload bytes a fragment.
    assert_eq!(
        out.take_data(),
        vec![
            eth(&frag_ip(&[], 0x2000, &data[..56])),
            eth(&frag_ip(&[], 0x2007, &data[56..112])),
            eth(&frag_ip(&[], 0x000e, &data[112..])),
            small,
            arp,
            eth(&frag_ip(&[], 0, &data[..50])),
        ]
    );
    assert_eq!(df.take_data(), vec![dont]);
    assert_eq!(
        h.command("f", "get_eth_mtu", &Value::map()).unwrap(),
        Value::map().with("mtu", 100i64)
    );
    assert!(h
        .add(
            find("IPFrag").unwrap(),
            "bad",
            &Value::map().with("mtu", 64)
        )
        .is_err());
}

#[test]
fn ip_frag_copies_only_copied_options_after_the_first_fragment() {
    let mut h = Harness::new();
    add(&mut h, "IPFrag", "f", &Value::map().with("mtu", 100));
    let out = h.capture("f", 1);
    // Router Alert (copied), Record Route (not copied), End of Option List.
    let opts = hex("94040000 0707040000000000");
    let data = payload(100);
    // A middle fragment already: its pieces keep MF and continue its offset (8 x 8 bytes).
    h.inject("f", 0, &[eth(&frag_ip(&opts, 0x2008, &data))]);
    assert_eq!(
        out.take_data(),
        vec![
            eth(&frag_ip(&opts, 0x2008, &data[..48])),
            eth(&frag_ip(&hex("94040000"), 0x200e, &data[48..])),
        ]
    );
}

#[test]
fn ip_frag_counts_broken_headers_it_would_have_to_cut() {
    let mut h = Harness::new();
    add(&mut h, "IPFrag", "f", &Value::map().with("mtu", 100));
    let out = h.capture("f", 1);
    let good = eth(&frag_ip(&[], 0, &payload(130)));
    let mut bad = good.clone();
    bad[14] = 0x44;
    let mut long = good.clone();
    long[16] = 0x10; // total length 4096, past the frame
    h.inject("f", 0, &[bad, long]);
    assert!(out.is_empty());
    assert_eq!(h.drops("f", "bad_ip_header"), 1);
    assert_eq!(h.drops("f", "too_short"), 1);
}

/// The fragments IPFrag makes of `frame` with `mtu`.
fn fragments(frame: &[u8], mtu: i64) -> Vec<Vec<u8>> {
    let mut h = Harness::new();
    add(&mut h, "IPFrag", "f", &Value::map().with("mtu", mtu));
    let out = h.capture("f", 1);
    h.inject("f", 0, &[frame.to_vec()]);
    out.take_data()
}

fn defrag(h: &mut Harness, num_flows: u32) {
    add(
        h,
        "IPDefrag",
        "d",
        &Value::map().with("num_flows", num_flows).with("numa", -1),
    );
}

#[test]
fn ip_defrag_reassembles_in_any_order_and_fixes_checksums() {
    let mut h = Harness::new();
    defrag(&mut h, 100);
    let out = h.capture("d", 1);
    let whole = eth(&frag_ip(&hex("94040000"), 0, &payload(300)));
    let mut frags = fragments(&whole, 150);
    assert_eq!(frags.len(), 3);
    h.inject("d", 0, &frags);
    frags.reverse();
    h.inject("d", 0, &frags);
    let mut no_csum = eth(&frag_ip(&[], 0, &payload(10)));
    no_csum[24..26].fill(0);
    let arp = [hex(MACS), hex("0806"), vec![0; 28]].concat();
    // A frame too short for an Ethernet header passes untouched too.
    h.inject("d", 0, &[no_csum, arp.clone(), hex("0102")]);
    assert_eq!(
        out.take_data(),
        vec![
            whole.clone(),
            whole,
            eth(&frag_ip(&[], 0, &payload(10))),
            arp,
            hex("0102")
        ]
    );
    assert!(h
        .add(find("IPDefrag").unwrap(), "bad", &Value::map())
        .is_err());
}

#[test]
fn ip_defrag_keeps_timing_out_held_datagrams_among_many_completed_ones() {
    // num_flows 1: 16 datagrams held at most, for 1 ms. Thousands of datagrams complete
    // around one that never does (the expiry queue is compacted many times meanwhile):
    // every completed one leaves, the held one still times out, and the table still takes
    // 16 new ones after.
    let mut h = Harness::new();
    defrag(&mut h, 1);
    let out = h.capture("d", 1);
    let data = payload(64);
    let whole = eth(&frag_ip(&[], 0, &data));
    let with_id = |f: &[u8], id: u16| {
        let mut f = f.to_vec();
        f[18..20].copy_from_slice(&id.to_be_bytes());
        f
    };
    let frags = [
        eth(&frag_ip(&[], 0x2000, &data[..32])),
        eth(&frag_ip(&[], 32 / 8, &data[32..])),
    ];
    h.inject("d", 0, &[with_id(&frags[0], 0xffff)]);
    for round in 0..100u16 {
        let batch: Vec<Vec<u8>> = (0..16u16)
            .flat_map(|i| frags.iter().map(move |f| with_id(f, round * 16 + i)))
            .collect();
        h.inject("d", 0, &batch);
    }
    let got = out.take_data();
    assert_eq!(got.len(), 1600);
    // Each is the datagram with its own identification (and so its own checksum).
    let same = |g: &Vec<u8>| {
        g[..18] == whole[..18] && g[20..24] == whole[20..24] && g[26..] == whole[26..]
    };
    assert!(got.iter().all(same));
    assert_eq!(h.drops("d", "table_full"), 0);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let firsts: Vec<Vec<u8>> = (0..16u16).map(|i| with_id(&frags[0], 0x8000 + i)).collect();
    h.inject("d", 0, &firsts);
    assert_eq!(h.drops("d", "timeout"), 1, "the held datagram timed out");
    assert_eq!(h.drops("d", "table_full"), 0, "16 new datagrams fit");
}

#[test]
fn ip_defrag_counts_what_it_cannot_reassemble() {
    let mut h = Harness::new();
    defrag(&mut h, 1);
    let out = h.capture("d", 1);
    let data = payload(64);
    let first = eth(&frag_ip(&[], 0x2000, &data[..16]));
    let odd = eth(&frag_ip(&[], 0x2000, &data[..12]));
    let mut other = first.clone();
    other[40] ^= 0xff; // same place, other bytes
    let mut bad = first.clone();
    bad[14] = 0x44;
    h.inject(
        "d",
        0,
        &[
            odd,
            first.clone(),
            first.clone(),
            other,
            first[..40].to_vec(),
            bad,
        ],
    );
    assert!(out.is_empty());
    assert_eq!(h.drops("d", "bad_fragment"), 1);
    assert_eq!(h.drops("d", "duplicate"), 1);
    assert_eq!(
        h.drops("d", "overlap"),
        2,
        "the held fragment and the new one"
    );
    assert_eq!(h.drops("d", "too_short"), 1);
    assert_eq!(h.drops("d", "bad_ip_header"), 1);
    // num_flows 1: 16 datagrams at most, held 1 ms.
    let firsts: Vec<Vec<u8>> = (0..17u16)
        .map(|id| {
            let mut f = first.clone();
            f[18..20].copy_from_slice(&id.to_be_bytes());
            f
        })
        .collect();
    h.inject("d", 0, &firsts);
    assert_eq!(h.drops("d", "table_full"), 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    h.inject("d", 0, &[eth(&frag_ip(&[], 0x2000, &data[..8]))]);
    assert_eq!(h.drops("d", "timeout"), 16);
    // Cut into 8-byte pieces: more fragments than a datagram may have.
    let pieces: Vec<Vec<u8>> = (0..65u16)
        .map(|i| {
            let mut f = eth(&frag_ip(&[], 0x2000 | i, &[0; 8]));
            f[18..20].copy_from_slice(&hex("7777"));
            f
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(5));
    h.inject("d", 0, &pieces);
    assert_eq!(h.drops("d", "too_many_fragments"), 65);
}

mod frag_roundtrip {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// IPFrag then IPDefrag gives the datagram back, whatever the MTU, the order the
        /// fragments arrive in and the copies among them.
        #[test]
        fn ipfrag_then_ipdefrag_is_the_identity(
            mtu in 90i64..1600,
            len in 1usize..3000,
            seed in any::<u64>(),
            dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let whole = eth(&frag_ip(&[], 0, &payload(len)));
            let mut frags = fragments(&whole, mtu);
            for d in &dups {
                let f = frags[d.index(frags.len())].clone();
                frags.push(f);
            }
            // A Fisher-Yates shuffle driven by the seed.
            let mut s = seed | 1;
            for i in (1..frags.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                frags.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let mut h = Harness::new();
            defrag(&mut h, 1000);
            let out = h.capture("d", 1);
            h.inject("d", 0, &frags);
            let got = out.take_data();
            prop_assert!(!got.is_empty());
            for g in got {
                prop_assert_eq!(&g, &whole);
            }
            for r in ["bad_fragment", "overlap", "timeout", "table_full", "too_many_fragments"] {
                prop_assert_eq!(h.drops("d", r), 0, "{}", r);
            }
        }
    }
}

fn fm_read(h: &mut Harness, m: &str, flag: u64, clear: bool) -> Value {
    let arg = Value::map()
        .with("clear", clear)
        .with(
            "latency_percentiles",
            vec![Value::Float(50.0), Value::Float(100.0)],
        )
        .with("jitter_percentiles", vec![Value::Float(99.0)])
        .with("flag_to_read", flag);
    h.command(m, "read", &arg).unwrap()
}

/// (fseid, pdr, packets, bytes, latency count, latency percentiles, jitter percentiles) of
/// each statistic of a read.
fn fm_stats(v: &Value) -> Vec<(i64, i64, i64, i64, i64, usize, usize)> {
    let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).unwrap();
    let n = |v: &Value, k: &str| {
        v.get(k)
            .and_then(|h| h.get("percentile_values_ns"))
            .and_then(Value::as_list)
            .unwrap()
            .len()
    };
    v.get("statistics")
        .and_then(Value::as_list)
        .unwrap()
        .iter()
        .map(|s| {
            (
                int(s, "fseid"),
                int(s, "pdr"),
                int(s, "total_packets"),
                int(s, "total_bytes"),
                int(s.get("latency").unwrap(), "count"),
                n(s, "latency"),
                n(s, "jitter"),
            )
        })
        .collect()
}

#[test]
fn flow_measure_fills_the_flagged_table_per_session() {
    let mut h = Harness::new();
    let meta = set_meta(&[
        ("fseid", 7u64.to_le_bytes().to_vec()),
        ("pdr_id", 3u32.to_le_bytes().to_vec()),
    ]);
    add(&mut h, "SetMetadata", "m", &meta);
    add(
        &mut h,
        "Timestamp",
        "t",
        &Value::map().with("attr_name", "timestamp"),
    );
    let leader = Value::map()
        .with("flag_attr_name", "flag")
        .with("leader", true)
        .with("entries", 16u64);
    add(&mut h, "FlowMeasure", "lead", &leader);
    add(
        &mut h,
        "FlowMeasure",
        "follow",
        &Value::map().with("flag_attr_name", "flag"),
    );
    h.connect("m", 0, "t", 0).unwrap();
    h.connect("t", 0, "lead", 0).unwrap();
    h.connect("lead", 0, "follow", 0).unwrap();
    let out = h.capture("follow", 0);
    // Timestamps of 0 (none) and in the future: forwarded, not measured.
    for (name, ts) in [("none", 0u64), ("future", u64::MAX / 2)] {
        let meta = set_meta(&[
            ("timestamp", ts.to_le_bytes().to_vec()),
            ("fseid", 7u64.to_le_bytes().to_vec()),
            ("pdr_id", 3u32.to_le_bytes().to_vec()),
        ]);
        add(&mut h, "SetMetadata", name, &meta);
        h.connect(name, 0, "lead", 0).unwrap();
    }
    h.inject("m", 0, &[vec![0; 60], vec![0; 60], vec![0; 70]]);
    h.inject("none", 0, &[vec![0; 60]]);
    h.inject("future", 0, &[vec![0; 60]]);
    assert_eq!(out.len(), 5);
    let want = vec![(7, 3, 3, 190, 3, 2, 1)];
    assert_eq!(fm_stats(&fm_read(&mut h, "lead", 1, false)), want);
    assert_eq!(fm_stats(&fm_read(&mut h, "follow", 1, false)), want);
    assert_eq!(
        h.command("lead", "flip", &Value::map()).unwrap(),
        Value::map().with("old_flag", 1u64)
    );
    h.inject("m", 0, &[vec![0; 60]]);
    assert_eq!(
        fm_stats(&fm_read(&mut h, "follow", 2, false)),
        vec![(7, 3, 1, 60, 1, 2, 1)]
    );
    assert_eq!(fm_stats(&fm_read(&mut h, "lead", 1, true)), want);
    assert!(fm_stats(&fm_read(&mut h, "lead", 1, false)).is_empty());
    // The module-wide histograms (Prometheus, show latency): every session's packets
    // together, from both tables, kept across a clearing read.
    let hist = h.graph.histograms();
    let (_, class, lead) = hist.iter().find(|(n, _, _)| n == "lead").unwrap();
    assert_eq!(*class, "FlowMeasure");
    let names: Vec<_> = lead.iter().map(|x| x.name).collect();
    assert_eq!(names, ["latency", "jitter"]);
    for x in lead {
        assert_eq!(x.count, 4, "{}", x.name);
        assert_eq!(x.counts.iter().sum::<u64>(), 4);
        assert_eq!(x.counts.len(), x.bounds_ns.len() + 1);
        assert_eq!((x.bounds_ns[0], x.resolution_ns), (1000, 1000));
        assert_eq!(
            *x.bounds_ns.last().unwrap(),
            16_384_000,
            "the first bound past 10 ms"
        );
    }
    let e = h.command("follow", "flip", &Value::map()).unwrap_err();
    assert!(e.msg.contains("only leaders"), "{}", e.msg);
    let e = h
        .command("lead", "read", &Value::map().with("flag_to_read", 0u64))
        .unwrap_err();
    assert!(e.msg.contains("invalid flag"), "{}", e.msg);
    assert!(h
        .add(find("FlowMeasure").unwrap(), "bad", &Value::map())
        .is_err());
}

fn pm_echo(msg_type: u8, from: &str, to: &str, seq: u16) -> Vec<u8> {
    let opt = [&seq.to_be_bytes()[..], &[0, 0]].concat();
    eth(&ip(
        17,
        from,
        to,
        &udp(2152, 2152, &gtp(0x32, msg_type, 0, &opt, &[])),
    ))
}

fn pm_gnb(h: &mut Harness, cmd: &str, ip: u32) {
    h.command("pm", cmd, &Value::map().with("gnb_ip", ip))
        .unwrap();
}

#[test]
fn path_monitoring_probes_every_gnb_and_measures_responses() {
    let mut h = Harness::new();
    add(&mut h, "GtpuPathMonitoring", "pm", &Value::Null);
    let out = h.capture("pm", 0);
    let req = pm_echo(1, "c0a80002", "00000000", 0x5555);
    h.inject("pm", 0, std::slice::from_ref(&req));
    assert_eq!(h.drops("pm", "no_gnb"), 1);
    pm_gnb(&mut h, "add", 0xc0a8_0001);
    pm_gnb(&mut h, "add", 0xc0a8_0003);
    pm_gnb(&mut h, "add", 0xc0a8_0003);
    h.inject("pm", 0, &[req.clone(), req.clone()]);
    assert_eq!(
        out.take_data(),
        vec![
            pm_echo(1, "c0a80002", "c0a80001", 0),
            pm_echo(1, "c0a80002", "c0a80003", 0),
            pm_echo(1, "c0a80002", "c0a80001", 1),
            pm_echo(1, "c0a80002", "c0a80003", 1),
        ]
    );
    std::thread::sleep(std::time::Duration::from_millis(2));
    h.inject(
        "pm",
        0,
        &[
            pm_echo(2, "c0a80001", "c0a80002", 0),
            pm_echo(2, "c0a80001", "c0a80002", 0),
            pm_echo(2, "c0a80003", "c0a80002", 1),
            pm_echo(2, "c0a80009", "c0a80002", 1),
            gpdu(),
            eth(&ip(
                17,
                "c0a80001",
                "c0a80002",
                &udp(2152, 2152, &gtp(0x30, 2, 0, &[], &[])),
            )),
            req[..44].to_vec(),
        ],
    );
    assert!(out.is_empty());
    assert_eq!(h.drops("pm", "echo_response"), 2);
    assert_eq!(h.drops("pm", "unknown_response"), 2);
    assert_eq!(h.drops("pm", "not_echo"), 1);
    assert_eq!(h.drops("pm", "no_sequence"), 1);
    assert_eq!(h.drops("pm", "too_short"), 1);
    let read = |h: &mut Harness, clear: bool| {
        let v = h
            .command("pm", "read", &Value::map().with("clear", clear))
            .unwrap();
        v.get("statistics")
            .and_then(Value::as_list)
            .unwrap()
            .iter()
            .map(|s| {
                let i = |k: &str| s.get(k).and_then(Value::as_i64).unwrap() as u64;
                (
                    i("gnb_ip"),
                    i("count"),
                    i("latency_min"),
                    i("latency_mean"),
                    i("latency_max"),
                )
            })
            .collect::<Vec<_>>()
    };
    let stats = read(&mut h, true);
    assert_eq!(stats.len(), 2);
    for (i, (gnb, count, min, mean, max)) in stats.into_iter().enumerate() {
        assert_eq!(gnb, [0xc0a8_0001, 0xc0a8_0003][i]);
        assert_eq!(count, 1);
        // Half a round trip of at least 2 ms.
        assert!(
            min >= 1_000_000 && min == mean && mean == max,
            "{min} {mean} {max}"
        );
    }
    assert_eq!(
        read(&mut h, false),
        vec![
            (0xc0a8_0001, 0, u64::MAX, 0, 0),
            (0xc0a8_0003, 0, u64::MAX, 0, 0)
        ]
    );
    pm_gnb(&mut h, "delete", 0xc0a8_0003);
    pm_gnb(&mut h, "delete", 0xc0a8_0001);
    pm_gnb(&mut h, "delete", 0xc0a8_0009);
    h.inject("pm", 0, std::slice::from_ref(&req));
    assert_eq!(out.take_data(), vec![pm_echo(1, "c0a80002", "c0a80003", 2)]);
    h.command("pm", "clear", &Value::map()).unwrap();
    h.inject("pm", 0, &[req]);
    assert_eq!(h.drops("pm", "no_gnb"), 2);
    assert!(read(&mut h, false).is_empty());
}

mod mutated {
    use super::*;
    use proptest::prelude::*;

    fn all_drops(h: &Harness, m: &str) -> u64 {
        h.graph
            .drops_of(m)
            .unwrap()
            .into_iter()
            .map(|(_, n)| n)
            .sum()
    }

    /// Sends `input` through a fresh `class` module with captures on `gates`: (packets
    /// out of those gates, packets dropped).
    fn run(class: &str, arg: &Value, gates: u16, input: &[Vec<u8>]) -> (u64, u64) {
        let mut h = Harness::new();
        add(&mut h, class, "m", arg);
        let caps: Vec<_> = (0..gates).map(|g| h.capture("m", g)).collect();
        h.inject("m", 0, input);
        let out: usize = caps.iter().map(|c| c.take().len()).sum();
        (out as u64, all_drops(&h, "m"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Mutated and truncated GTP-U frames never make the GTP-U classes read past them:
        /// each packet leaves by a gate or is counted under a drop reason.
        #[test]
        fn gtpu_classes_account_for_every_mutated_frame(
            muts in proptest::collection::vec((0usize..98, any::<u8>(), 0usize..=98), 1..32)
        ) {
            let frames: Vec<Vec<u8>> = muts
                .iter()
                .enumerate()
                .map(|(i, &(at, b, len))| {
                    let mut f = if i % 2 == 0 {
                        gpdu_with(&hex(PSC), 0x34)
                    } else {
                        echo(1, &[], ("c0a80001", 40000), ("c0a80002", 2152))
                    };
                    let at = at % f.len();
                    f[at] = b;
                    f.truncate(len.min(f.len()));
                    f
                })
                .collect();
            let n = frames.len() as u64;
            // Each packet leaves by a gate or is counted under a drop reason.
            for (class, arg, gates) in [
                ("GtpuParser", Value::Null, 2),
                ("GtpuDecap", Value::Null, 1),
                ("GtpuEcho", Value::map().with("s1u_sgw_ip", 1), 2),
            ] {
                let (out, drops) = run(class, &arg, gates, &frames);
                prop_assert_eq!(out + drops, n, "{}", class);
            }
            // One gNB: each request leaves as one copy, every other packet is dropped.
            let mut h = Harness::new();
            add(&mut h, "GtpuPathMonitoring", "m", &Value::Null);
            h.command("m", "add", &Value::map().with("gnb_ip", 0xc0a8_0001u32)).unwrap();
            let c = h.capture("m", 0);
            h.inject("m", 0, &frames);
            prop_assert_eq!(c.len() as u64 + all_drops(&h, "m"), n);
            drop(h);
            // IPFrag may make several packets of one, IPDefrag may hold some.
            let (out, drops) = run("IPFrag", &Value::map().with("mtu", 70), 2, &frames);
            prop_assert!(out + drops >= n);
            let (out, drops) = run("IPDefrag", &Value::map().with("num_flows", 4), 2, &frames);
            prop_assert!(out + drops <= n);
        }
    }
}

/// The downlink end of up4.bess: the FAR lookup (ExactMatch with the fork's values, given
/// as integers) writes the tunnel, GtpuEncap builds it: the integers reach the wire in
/// network order, as in the fork, and the UPF's own address comes out as the source.
#[test]
fn far_lookup_values_reach_the_outer_headers_in_network_order() {
    let mut h = Harness::new();
    let f = |n: &str, b: i64| Value::map().with("attr_name", n).with("num_bytes", b);
    let arg = Value::map()
        .with(
            "fields",
            vec![Value::map().with("offset", 30).with("num_bytes", 4)],
        )
        .with(
            "values",
            vec![
                f("action", 1),
                f("tunnel_out_src_ip4addr", 4),
                f("tunnel_out_dst_ip4addr", 4),
                f("tunnel_out_teid", 4),
                f("tunnel_out_udp_port", 2),
                f("qfi", 1),
            ],
        );
    add(&mut h, "ExactMatch", "far", &arg);
    add(
        &mut h,
        "GtpuEncap",
        "e",
        &Value::map().with("add_psc", true),
    );
    h.connect("far", 1, "e", 0).unwrap();
    let int = |i: u64| Value::map().with("value_int", i);
    let rule = Value::map()
        .with("gate", 1)
        .with(
            "fields",
            vec![Value::map().with("value_bin", hex("08080808"))],
        )
        .with(
            "values",
            vec![
                int(0),
                int(0xc0a8_0002),
                int(0xc0a8_0001),
                int(0x1122_3344),
                int(2152),
                int(9),
            ],
        );
    h.command("far", "add", &rule).unwrap();
    let out = h.capture("e", 1);
    h.inject("far", 0, &[eth(&inner())]);
    let pkt = ip(17, "0a000001", "08080808", &udp(1234, 53, &hex("cafebabe")));
    let mut want = eth(&ip(
        17,
        "c0a80002",
        "c0a80001",
        &udp(
            2152,
            2152,
            &gtp(
                0x34,
                0xff,
                0x1122_3344,
                &hex("0000 00 85  01 00 09 00"),
                &pkt,
            ),
        ),
    ));
    want[18..20].copy_from_slice(&hex("0513"));
    assert_eq!(out.take_data(), vec![want]);
}

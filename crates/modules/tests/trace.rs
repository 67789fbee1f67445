//! Packet trace (`trace add` / `show trace` / `trace packet`): records of real module runs on
//! a worker and of dry runs, with their gates, headers before and after, metadata written and
//! how each packet ended; the cap; and no trace, no traced path.

mod common;

use bessemer_core::trace::{render, End, PacketTrace, MAX_TRACE_PACKETS};
use bessemer_core::{Engine, Value};
use common::{add_module, add_sink, add_source, engine, eventually, packets};

/// Ethernet + IPv4 (TTL `ttl`) + UDP 1234 > 5678, 60 bytes.
fn udp(ttl: u8) -> Vec<u8> {
    let mut p = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![
        0x45, 0, 0, 46, 0, 1, 0, 0, ttl, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    let c = bessemer_core::checksum::ipv4_header(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend(ip);
    p.extend([0x04, 0xd2, 0x16, 0x2e, 0, 26, 0, 0]);
    p.resize(60, 0);
    p
}

/// Source -> Rewrite(template) -> SetMetadata(flow=7) -> UpdateTTL -> Split(flow) gate 7 ->
/// VLANPush(vid 10) -> Sink; Split's gate 0 is unconnected.
fn pipeline(e: &mut Engine, template: Vec<u8>) {
    add_source(e, "src");
    add_module(
        e,
        "Rewrite",
        "rw",
        &Value::map().with("templates", Value::List(vec![Value::Bytes(template)])),
    );
    let set = Value::map().with(
        "attrs",
        Value::List(vec![Value::map()
            .with("name", "flow")
            .with("size", 2)
            .with("value_int", 7)]),
    );
    add_module(e, "SetMetadata", "set", &set);
    add_module(e, "UpdateTTL", "ttl", &Value::map());
    add_module(
        e,
        "Split",
        "split",
        &Value::map().with("size", 2).with("attribute", "flow"),
    );
    add_module(e, "VLANPush", "vlan", &Value::map().with("tci", 10));
    add_sink(e, "sink");
    for (a, og, b) in [
        ("src", 0, "rw"),
        ("rw", 0, "set"),
        ("set", 0, "ttl"),
        ("ttl", 0, "split"),
        ("split", 7, "vlan"),
        ("vlan", 0, "sink"),
    ] {
        e.connect(a, og, b, 0).unwrap();
    }
}

fn path(p: &PacketTrace) -> Vec<(&str, Option<u16>, Vec<u16>)> {
    p.hops
        .iter()
        .map(|h| (h.module.as_str(), h.igate, h.ogates.clone()))
        .collect()
}

fn finished(e: &Engine, n: usize) -> bool {
    e.trace_packets().is_some_and(|(p, _, _)| {
        p.len() == n
            && p.iter()
                .all(|p| p.hops.last().is_some_and(|h| h.end.is_some()))
    })
}

#[test]
fn trace_add_records_path_gates_headers_metadata_and_end() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    pipeline(&mut e, udp(64));
    assert!(e.trace_packets().is_none(), "off by default");
    e.trace_add(&["rw".to_string()], 3).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| finished(&e, 3)), "{:?}", e.trace_packets());
    // Traffic goes on after the capture: nothing more is recorded.
    let before = packets(&e, "vlan", 0);
    assert!(eventually(|| packets(&e, "vlan", 0) > before + 1000));
    e.pause_all().unwrap();
    let (pk, points, left) = e.trace_packets().unwrap();
    assert_eq!((pk.len(), points, left), (3, vec!["rw".to_string()], 0));
    for (i, p) in pk.iter().enumerate() {
        assert_eq!(p.id, i as u32 + 1);
        assert_eq!(p.wid, 0);
        assert_eq!(
            path(p),
            [
                ("rw", Some(0), vec![0]),
                ("set", Some(0), vec![0]),
                ("ttl", Some(0), vec![0]),
                ("split", Some(0), vec![7]),
                ("vlan", Some(0), vec![0]),
                ("sink", Some(0), vec![]),
            ]
        );
        let h = &p.hops;
        // Rewrite replaced the source's bytes with the template.
        let after_rw = h[0].after.as_ref().unwrap();
        assert_eq!(after_rw.len, 60);
        assert_eq!(
            after_rw.headers[1],
            "IPv4 10.0.0.1 > 10.0.0.2 proto 17 ttl 64 len 46 id 1"
        );
        assert_eq!(after_rw.headers[2], "UDP 1234 > 5678 len 26");
        // SetMetadata wrote flow = 7 (Split reads it, so it is stored).
        assert_eq!(h[1].meta, [("flow".to_string(), "0x0007".to_string())]);
        // UpdateTTL: 64 before, 63 after.
        assert!(h[2].before.as_ref().unwrap().headers[1].contains("ttl 64"));
        assert!(h[2].after.as_ref().unwrap().headers[1].contains("ttl 63"));
        // VLANPush: 4 bytes more, a tag after Ethernet.
        let v = h[4].after.as_ref().unwrap();
        assert_eq!(v.len, 64);
        assert_eq!(v.headers[1], "VLAN 802.1Q vid 10 pcp 0 type 0x0800");
        assert_eq!(h[5].end, Some(End::Consumed));
        assert!(h.windows(2).all(|w| w[0].ns <= w[1].ns));
    }
    let text = render(&pk);
    assert!(text.starts_with("Packet 1 (worker 0)\n"), "{text}");
    assert!(
        text.contains(": ttl (UpdateTTL) in gate 0 -> out gate 0\n"),
        "{text}"
    );
    assert!(text.contains("  metadata flow = 0x0007\n"), "{text}");
    // Clear: records gone, the runner back on its plain path.
    e.trace_clear().unwrap();
    assert!(e.trace_packets().is_none());
}

#[test]
fn a_dropped_packet_ends_with_its_reason_and_a_port_starts_at_its_input() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    // TTL 1: UpdateTTL drops it as ttl_expired.
    pipeline(&mut e, udp(1));
    e.trace_add(&["set".to_string()], 2).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| finished(&e, 2)));
    e.pause_all().unwrap();
    let (pk, _, _) = e.trace_packets().unwrap();
    for p in &pk {
        assert_eq!(
            path(p),
            [("set", Some(0), vec![0]), ("ttl", Some(0), vec![])]
        );
        let h = &p.hops[1];
        assert_eq!(h.end, Some(End::Drop(vec!["ttl_expired".to_string()])));
        assert!(h.after.is_none());
    }
    assert!(render(&pk).contains("  dropped: ttl_expired\n"));
}

#[test]
fn a_packet_sent_to_an_unconnected_gate_ends_as_deadend() {
    let mut e = engine();
    pipeline(&mut e, udp(64));
    let p = e.trace_packet("split", &udp(64)).unwrap();
    // Split reads no flow (the dry packet starts after SetMetadata): zero, gate 0 is
    // unconnected.
    assert_eq!(path(&p), [("split", Some(0), vec![])]);
    assert_eq!(p.hops[0].end, Some(End::Drop(vec!["deadend".to_string()])));
}

#[test]
fn trace_packet_runs_a_copy_of_the_path_without_sending_or_queueing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    pipeline(&mut e, udp(64));
    // After VLANPush a Queue instead of the sink: the dry run stops there.
    e.disconnect("vlan", 0).unwrap();
    add_module(&mut e, "Queue", "q", &Value::map());
    e.connect("vlan", 0, "q", 0).unwrap();
    e.pause_all().unwrap();
    let before = packets(&e, "ttl", 0);
    let p = e.trace_packet("set", &udp(9)).unwrap();
    assert_eq!(p.wid, usize::MAX);
    assert_eq!(
        path(&p),
        [
            ("set", Some(0), vec![0]),
            ("ttl", Some(0), vec![0]),
            ("split", Some(0), vec![7]),
            ("vlan", Some(0), vec![0]),
            ("q", Some(0), vec![]),
        ]
    );
    assert!(p.hops[1].after.as_ref().unwrap().headers[1].contains("ttl 8"));
    assert_eq!(
        p.hops[4].end,
        Some(End::DryRunStop("would hold it (Queue)".into()))
    );
    // The queue got nothing; the modules run did count the packet.
    let q = e.command("q", "get_status", &Value::map()).unwrap();
    assert_eq!(q.get("count").and_then(|v| v.as_i64()), Some(0), "{q:?}");
    assert_eq!(packets(&e, "ttl", 0), before + 1);
    assert!(render(std::slice::from_ref(&p)).starts_with("Packet 1 (dry run)\n"));
    // From a module without input gates: taken as its output.
    let p = e.trace_packet("src", &udp(1)).unwrap();
    assert_eq!(path(&p)[0], ("src", None, vec![0]));
    assert_eq!(path(&p)[1], ("rw", Some(0), vec![0]));
    // Bad input is named.
    let err = |r: bessemer_core::Result<PacketTrace>| r.unwrap_err().to_string();
    assert!(err(e.trace_packet("nope", &udp(1))).contains("nope"));
    assert!(e.graph().trace().is_none(), "a dry run arms no trace");
}

#[test]
fn trace_add_checks_its_arguments_and_caps_packets() {
    let mut e = engine();
    pipeline(&mut e, udp(64));
    let msg = |r: bessemer_core::Result<()>| r.unwrap_err().to_string();
    assert!(msg(e.trace_add(&["rw".into()], 0)).contains("out of range"));
    assert!(msg(e.trace_add(&["rw".into()], MAX_TRACE_PACKETS + 1)).contains("out of range"));
    assert!(msg(e.trace_add(&["nope".into()], 1)).contains("nope"));
    assert!(e.trace_packets().is_none());
    // Two adds: the counts add up, to the cap of packets kept.
    e.trace_add(&["rw".into()], MAX_TRACE_PACKETS).unwrap();
    e.trace_add(&["set".into()], 10).unwrap();
    let (_, points, left) = e.trace_packets().unwrap();
    assert_eq!(points, ["rw", "set"]);
    assert_eq!(left, MAX_TRACE_PACKETS);
    e.add_worker(0, 0).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| finished(&e, MAX_TRACE_PACKETS as usize)));
    let n = packets(&e, "vlan", 0);
    assert!(eventually(|| packets(&e, "vlan", 0) > n + 1000));
    e.pause_all().unwrap();
    let (pk, _, left) = e.trace_packets().unwrap();
    assert_eq!((pk.len(), left), (MAX_TRACE_PACKETS as usize, 0));
    // Packets captured at rw pass set: one record each, not a second capture.
    assert!(pk.iter().all(|p| p.hops[0].module == "rw"));
    // Removing every module (ResetModules, `daemon reset`) removes the trace too.
    e.reset_modules().unwrap();
    assert!(e.trace_packets().is_none());
}

#[test]
fn a_queued_packet_is_followed_when_its_queue_dequeues_it() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_module(
        &mut e,
        "Rewrite",
        "rw",
        &Value::map().with("templates", Value::List(vec![Value::Bytes(udp(64))])),
    );
    add_module(&mut e, "Queue", "q", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("src", 0, "rw", 0).unwrap();
    e.connect("rw", 0, "q", 0).unwrap();
    e.connect("q", 0, "sink", 0).unwrap();
    e.trace_add(&["rw".to_string()], 2).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| finished(&e, 2)), "{:?}", e.trace_packets());
    e.pause_all().unwrap();
    let (pk, _, _) = e.trace_packets().unwrap();
    for p in &pk {
        assert_eq!(
            path(p),
            [
                ("rw", Some(0), vec![0]),
                ("q", Some(0), vec![]),
                ("q", None, vec![0]),
                ("sink", Some(0), vec![]),
            ]
        );
        assert_eq!(p.hops[1].end, Some(End::Queued));
        assert!(p.hops[2].before.is_none() && p.hops[2].after.is_some());
        assert_eq!(p.hops[3].end, Some(End::Consumed));
    }
}

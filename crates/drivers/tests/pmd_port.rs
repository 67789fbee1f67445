//! PMDPort with the DPDK virtual devices BESS scripts and the 5G UPF use for kernel
//! interfaces (`net_af_xdp`, `net_af_packet`), on veth pairs made by the test: traffic both
//! ways, queues as DPDK would configure them, counters; the forms Bessemer does not serve
//! and malformed vdev strings. Traffic tests need root (they skip without).

mod common;

use std::sync::Arc;

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::{PortHandle, PortParams};
use bessemer_core::{Error, Value};
use bessemer_drivers::pmd_port::DRIVER;
use common::{fnv, pattern, tcp_transfer, TwoHosts};

fn engine() -> Engine {
    Engine::new(EngineConfig {
        buffers: 8192,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap()
}

fn port(
    e: &Engine,
    name: &str,
    nin: usize,
    nout: usize,
    arg: Value,
) -> Result<Arc<PortHandle>, Error> {
    let params = PortParams {
        name: name.into(),
        num_inc_q: nin,
        num_out_q: nout,
        size_inc_q: 0,
        size_out_q: 0,
        pool: e.pool().clone(),
    };
    e.ports().create(&DRIVER, params, &arg)
}

fn vdev(s: &str) -> Value {
    Value::map().with("vdev", s)
}

fn fail(e: &Engine, nin: usize, nout: usize, arg: Value) -> Error {
    match port(e, "bad", nin, nout, arg) {
        Ok(h) => panic!("port accepted: {}", h.port().desc()),
        Err(err) => err,
    }
}

fn ping_ok(ns: &str, to: &str) {
    let out = std::process::Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", to,
        ])
        .output()
        .expect("ping runs");
    assert!(
        out.status.success(),
        "ping {to} from {ns} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn af_xdp_and_af_packet_vdevs_carry_traffic_both_ways() {
    let h = TwoHosts::new(121);
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    // As the UPF creates them: AF_XDP with as many queues as the device has; AF_PACKET with
    // qpairs=2 and num_out_q=2 but the default single incoming queue.
    let pa = port(
        &e,
        "pa",
        1,
        1,
        vdev(&format!(
            "net_af_xdp0,iface={},start_queue=0,queue_count=1",
            h.la.outer
        )),
    )
    .unwrap();
    let pb = port(
        &e,
        "pb",
        0,
        2,
        vdev(&format!("net_af_packet1,iface={},qpairs=2", h.lb.outer))
            .with("promiscuous_mode", true)
            .with("hwcksum", false)
            .with("socket_id", 0i64),
    )
    .unwrap();
    assert_eq!(pa.driver().name, "PMDPort");
    assert_eq!((pa.num_inc_q(), pa.num_out_q()), (1, 1));
    assert_eq!((pb.num_inc_q(), pb.num_out_q()), (1, 2));
    let class = |n| bessemer_modules::find(n).unwrap();
    for (inc, out, from, to) in [
        ("inc_a", "out_b", "pa", "pb"),
        ("inc_b", "out_a", "pb", "pa"),
    ] {
        e.create_module(
            class("PortInc"),
            Some(inc),
            &Value::map().with("port", from),
        )
        .unwrap();
        e.create_module(class("PortOut"), Some(out), &Value::map().with("port", to))
            .unwrap();
        e.connect(inc, 0, out, 0).unwrap();
    }
    e.resume_all().unwrap();
    ping_ok(&h.a.name, &h.b_ip);
    ping_ok(&h.b.name, &h.a_ip);
    let data = pattern(1 << 20);
    assert_eq!(fnv(&tcp_transfer(&h, &data)), fnv(&data));
    for p in [&pa, &pb] {
        let (inc, out) = p.counts();
        assert!(
            inc.packets >= 6 && out.packets >= 6,
            "{}: {inc:?} {out:?}",
            p.name()
        );
        assert!(p.port().link_status().link_up, "{}: link down", p.name());
    }
    // pa receives the 1 MiB stream, pb sends it: the bytes are counted on both.
    assert!(pa.counts().0.bytes >= 1 << 20);
    assert!(pb.counts().1.bytes >= 1 << 20);
    let d = pb.port().desc();
    assert!(d.contains(&h.lb.outer), "{d}");
    drop((pa, pb));
    for m in ["inc_a", "out_b", "inc_b", "out_a"] {
        e.destroy_module(m).unwrap();
    }
    e.ports().destroy("pa").unwrap();
    e.ports().destroy("pb").unwrap();
    assert_eq!(e.pool().free_count(), e.pool().capacity(), "buffers leaked");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn queues_beyond_the_device_and_a_missing_interface_are_refused() {
    let h = TwoHosts::new(122);
    let e = engine();
    let x = format!("net_af_xdp0,iface={},queue_count=1", h.la.outer);
    let err = fail(&e, 2, 1, vdev(&x));
    assert_eq!(err.code, libc::EINVAL, "{}", err.msg);
    assert!(
        err.msg.contains("num_inc_q 2") && err.msg.contains("queue_count=1"),
        "{}",
        err.msg
    );
    let p = format!("net_af_packet0,iface={}", h.lb.outer);
    let err = fail(&e, 1, 3, vdev(&p));
    assert!(
        err.msg.contains("num_out_q 3") && err.msg.contains("qpairs=1"),
        "{}",
        err.msg
    );
    let err = fail(&e, 1, 1, vdev("net_af_packet0,iface=nosuchif0"));
    assert_eq!(err.code, libc::ENOENT, "{}", err.msg);
    assert!(err.msg.contains("nosuchif0"), "{}", err.msg);
    // Nothing was left behind: the interface takes a port afterwards.
    port(&e, "ok", 1, 1, vdev(&p)).unwrap();
    e.ports().destroy("ok").unwrap();
}

/// `port_id`, `pci` and other vdevs go to DPDK (crate bessemer-dpdk; its own tests and
/// python/tests/test_pmd_port.py cover them): a port DPDK does not have is ENODEV, as BESS
/// answers, and a PCI address nothing is bound to is refused naming it.
#[test]
#[cfg_attr(not(root), ignore = "needs root: DPDK's EAL")]
fn dpdk_forms_without_a_device_are_refused_with_the_reason() {
    let e = engine();
    if let Err(why) = bessemer_dpdk::available() {
        let err = fail(&e, 0, 0, Value::map().with("port_id", 0u64));
        assert!(err.msg.contains("without DPDK"), "{} ({why})", err.msg);
        return;
    }
    let err = fail(&e, 0, 0, Value::map().with("port_id", 0u64));
    assert_eq!(err.code, libc::ENODEV, "{}", err.msg);
    assert!(err.msg.contains("DPDK has no port 0"), "{}", err.msg);
    let err = fail(&e, 0, 0, Value::map().with("pci", "0000:3b:00.0"));
    assert!(err.msg.contains("0000:3b:00.0"), "{}", err.msg);
}

#[test]
fn forms_bessemer_does_not_serve_and_malformed_vdevs() {
    let e = engine();
    for (arg, code, needle) in [
        (Value::map(), libc::EINVAL, "no port specified"),
        (vdev(""), libc::EINVAL, "vdev is empty"),
        (
            vdev("net_af_xdp0,queue_count=1"),
            libc::EINVAL,
            "iface=<interface> is required",
        ),
        (
            vdev("net_af_xdp0,iface=x,queue_count=abc"),
            libc::EINVAL,
            "queue_count=abc",
        ),
        (
            vdev("net_af_packet0,iface=x,qpairs=0"),
            libc::EINVAL,
            "qpairs=0",
        ),
        (
            vdev("net_af_packet0,iface=x,bogus=1"),
            libc::EINVAL,
            "unknown net_af_packet option 'bogus'",
        ),
        (
            vdev("net_af_packet0,iface=x,qpairs"),
            libc::EINVAL,
            "'qpairs' is not key=value",
        ),
        (
            vdev("net_af_xdp0,iface=x").with("vlan_offload_rx_strip", true),
            libc::ENOTSUP,
            "vlan_offload_rx_strip",
        ),
        (
            vdev("net_af_xdp0,iface=x").with("flow_profiles", Value::List(vec![3i64.into()])),
            libc::ENOTSUP,
            "flow_profiles",
        ),
    ] {
        let err = fail(&e, 0, 0, arg);
        assert_eq!(err.code, code, "{}", err.msg);
        assert!(err.msg.contains(needle), "{needle:?} not in: {}", err.msg);
        if code == libc::ENOTSUP {
            // Each refusal names exactly what is served.
            assert!(
                err.msg.contains("net_af_xdp") && err.msg.contains("net_af_packet")
                    || err.msg.contains("DPDK NIC"),
                "{}",
                err.msg
            );
        }
    }
}

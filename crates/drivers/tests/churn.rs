//! Ports destroyed and recreated while traffic flows (AFPacketPort and VPort): no crash, no
//! leaked buffer, and the counters add up each round (packets in = packets out + drops, each
//! drop under its named reason). Needs root; every loop is bounded.

mod common;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::{PortDriver, PortParams};
use bessemer_core::Value;
use bessemer_drivers::netns;
use common::TwoHosts;

const ROUNDS: usize = 4;

fn class(n: &str) -> &'static bessemer_core::ModuleClass {
    bessemer_modules::find(n).unwrap()
}

/// Sends UDP from host A to host B (a made-up neighbour entry, so no ARP is needed) until
/// `stop`, for at most 30 s.
fn blast(h: &TwoHosts, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    common::sh_in(
        &h.a.name,
        &[
            "ip",
            "neigh",
            "replace",
            &h.b_ip,
            "lladdr",
            "02:00:00:00:00:bb",
            "dev",
            &h.la.inner,
        ],
    );
    let (ns, from, to) = (h.a.name.clone(), h.a_ip.clone(), h.b_ip.clone());
    std::thread::spawn(move || {
        let sock = netns::run_in(&ns, || {
            let s = UdpSocket::bind(format!("{from}:0")).unwrap();
            s.connect(format!("{to}:9")).unwrap();
            Ok(s)
        })
        .unwrap();
        let t0 = Instant::now();
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
            if sock.send(&[0x5a; 100]).is_ok() {
                sent += 1;
            }
            if sent.is_multiple_of(64) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        sent
    })
}

fn churn(driver: &'static PortDriver, arg_a: Value, arg_b: Value, h: &TwoHosts) {
    let mut e = Engine::new(EngineConfig {
        buffers: 4096,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap();
    e.add_worker(0, 0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = blast(h, stop.clone());
    let mut forwarded = 0;
    for round in 0..ROUNDS {
        let pool = e.pool().clone();
        for (name, arg) in [("pa", &arg_a), ("pb", &arg_b)] {
            let p = PortParams {
                name: name.into(),
                num_inc_q: 1,
                num_out_q: 1,
                size_inc_q: 0,
                size_out_q: 0,
                pool: pool.clone(),
            };
            e.ports().create(driver, p, arg).unwrap();
        }
        let port = |p: &str| Value::map().with("port", p);
        e.create_module(class("PortInc"), Some("inc_a"), &port("pa"))
            .unwrap();
        e.create_module(class("PortOut"), Some("out_b"), &port("pb"))
            .unwrap();
        e.connect("inc_a", 0, "out_b", 0).unwrap();
        e.resume_all().unwrap();
        std::thread::sleep(Duration::from_millis(150));
        e.pause_all().unwrap();

        // Paused: nothing is in flight, so every packet read is accounted for.
        let g = e.graph();
        let sent_on = g.ogate_counts("inc_a", 0).unwrap().packets;
        let drops_of = |m: &str| -> u64 { g.drops_of(m).unwrap().iter().map(|(_, n)| n).sum() };
        // Packets read before the connection existed went to a dead end, counted as such.
        let read = sent_on + drops_of("inc_a");
        let drops = drops_of("out_b");
        let (_, out_b) = e.ports().get("pb").unwrap().counts();
        let (in_a, _) = e.ports().get("pa").unwrap().counts();
        assert!(read > 0, "round {round}: no traffic reached the switch");
        assert_eq!(
            in_a.packets, read,
            "round {round}: port and module disagree"
        );
        assert_eq!(
            sent_on,
            out_b.packets + drops,
            "round {round}: in != out + dropped"
        );
        forwarded += out_b.packets;

        e.destroy_module("inc_a").unwrap();
        e.destroy_module("out_b").unwrap();
        e.ports().destroy("pa").unwrap();
        e.ports().destroy("pb").unwrap();
        assert_eq!(
            e.pool().free_count(),
            e.pool().capacity(),
            "round {round}: buffers leaked"
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(sender.join().unwrap() > 0);
    assert!(forwarded > 0);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn af_packet_ports_recreated_under_traffic() {
    let h = TwoHosts::new(181);
    let a = Value::map().with("ifname", h.la.outer.as_str());
    let b = Value::map().with("ifname", h.lb.outer.as_str());
    churn(&bessemer_drivers::af_packet_port::DRIVER, a, b, &h);
}

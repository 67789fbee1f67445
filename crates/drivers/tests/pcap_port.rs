//! PCAPPort (BESS's libpcap driver, served by the AF_PACKET code): two hosts joined by two
//! PCAPPorts on a real worker exchange pings and a TCP stream; bad `dev` values are refused.
//! Needs root; every wait is bounded.

mod common;

use std::process::Command;

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::PortParams;
use bessemer_core::Value;
use bessemer_drivers::pcap_port::DRIVER;
use common::TwoHosts;

fn params(e: &Engine) -> PortParams {
    PortParams {
        name: String::new(),
        num_inc_q: 0,
        num_out_q: 0,
        size_inc_q: 0,
        size_out_q: 0,
        pool: e.pool().clone(),
    }
}

fn ping_ok(ns: &str, to: &str) {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", to,
        ])
        .output()
        .expect("ping runs");
    assert!(
        out.status.success(),
        "ping {to} from {ns}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn two_pcap_ports_switch_pings_both_ways() {
    let h = TwoHosts::new(81);
    let mut e = Engine::new(EngineConfig {
        buffers: 4096,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap();
    e.add_worker(0, 0).unwrap();
    let mut names = Vec::new();
    for ifname in [&h.la.outer, &h.lb.outer] {
        let p = e
            .ports()
            .create(
                &DRIVER,
                params(&e),
                &Value::map().with("dev", ifname.as_str()),
            )
            .unwrap();
        assert_eq!((p.num_inc_q(), p.num_out_q()), (1, 1));
        assert!(p.port().desc().contains("promiscuous"));
        names.push(p.name().to_string());
    }
    assert_eq!(names, ["pcap_port0", "pcap_port1"]);
    let class = |n| bessemer_modules::find(n).unwrap();
    for (from, to) in [(0, 1), (1, 0)] {
        let inc = e
            .create_module(
                class("PortInc"),
                None,
                &Value::map().with("port", names[from].as_str()),
            )
            .unwrap();
        let out = e
            .create_module(
                class("PortOut"),
                None,
                &Value::map().with("port", names[to].as_str()),
            )
            .unwrap();
        e.connect(&inc, 0, &out, 0).unwrap();
    }
    e.resume_all().unwrap();
    ping_ok(&h.a.name, &h.b_ip);
    ping_ok(&h.b.name, &h.a_ip);
    let (inc, out) = e.ports().get(&names[0]).unwrap().counts();
    assert!(inc.packets >= 3 && out.packets >= 3, "{inc:?} {out:?}");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn bad_dev_is_refused() {
    let e = Engine::new(EngineConfig {
        buffers: 256,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap();
    let err = e
        .ports()
        .create(&DRIVER, params(&e), &Value::map())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code, libc::EINVAL);
    assert!(err.msg.contains("dev"), "{}", err.msg);
    let err = e
        .ports()
        .create(
            &DRIVER,
            params(&e),
            &Value::map().with("dev", "nosuchdev81"),
        )
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code, libc::ENOENT);
    assert!(
        err.msg.contains("PCAPPort") && err.msg.contains("nosuchdev81"),
        "{}",
        err.msg
    );
}

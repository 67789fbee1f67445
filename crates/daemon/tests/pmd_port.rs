//! PMDPort over gRPC as the 5G UPF creates it: `vdev="net_af_xdp0,iface=X,start_queue=0,
//! queue_count=N"` and `vdev="net_af_packet1,iface=Y,qpairs=N"` on veth pairs made by the
//! test (peers in their own namespaces), traffic between the namespaces through the daemon,
//! ListPorts / GetPortStats / GetLinkStatus as a client reads them, and the refusals. Needs
//! root (skips without).

mod common;

use std::process::Command;

use bessemer_daemon::pb;
use common::*;
use pb::pmd_port_arg::Port;

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace holding one end of a veth pair whose other end stays here; both removed on
/// drop (also when the test fails).
struct Host {
    ns: String,
    outer: String,
}

impl Host {
    fn new(tag: &str, addr: &str) -> Host {
        let id = std::process::id() % 100_000;
        let h = Host {
            ns: format!("bpm{tag}{id}"),
            outer: format!("bpo{tag}{id}"),
        };
        let inner = format!("bpi{tag}{id}");
        sh(&["ip", "netns", "add", &h.ns]);
        sh(&[
            "ip", "link", "add", &h.outer, "type", "veth", "peer", "name", &inner,
        ]);
        sh(&["ip", "link", "set", &inner, "netns", &h.ns]);
        sh(&["ip", "link", "set", &h.outer, "up"]);
        for c in [
            vec!["ip", "link", "set", "lo", "up"],
            vec!["ip", "link", "set", &inner, "up"],
            vec!["ip", "addr", "add", addr, "dev", &inner],
        ] {
            let mut v = vec!["ip", "netns", "exec", &h.ns];
            v.extend(c);
            sh(&v);
        }
        h
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.outer])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

fn pmd(vdev: &str) -> Option<prost_types::Any> {
    Some(any(
        "PMDPortArg",
        &pb::PmdPortArg {
            port: Some(Port::Vdev(vdev.into())),
            ..Default::default()
        },
    ))
}

async fn create_port(
    c: &mut Client,
    name: &str,
    nin: u64,
    nout: u64,
    arg: Option<prost_types::Any>,
) -> pb::CreatePortResponse {
    c.create_port(pb::CreatePortRequest {
        name: name.into(),
        driver: "PMDPort".into(),
        num_inc_q: nin,
        num_out_q: nout,
        arg,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

async fn module(c: &mut Client, name: &str, class: &str, port: &str) {
    let arg = if class == "PortInc" {
        any(
            "PortIncArg",
            &pb::PortIncArg {
                port: port.into(),
                ..Default::default()
            },
        )
    } else {
        any("PortOutArg", &pb::PortOutArg { port: port.into() })
    };
    let r = c
        .create_module(pb::CreateModuleRequest {
            name: name.into(),
            mclass: class.into(),
            arg: Some(arg),
        })
        .await
        .unwrap()
        .into_inner();
    ok(&r.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
async fn upf_style_pmd_ports_forward_between_namespaces() {
    let a = Host::new("a", "10.123.0.1/24");
    let b = Host::new("b", "10.123.0.2/24");
    let d = Daemon::start("pmdport", &[]);
    bounded(async {
        let mut c = d.client().await;
        let r = create_port(
            &mut c,
            "pa",
            1,
            1,
            pmd(&format!(
                "net_af_xdp0,iface={},start_queue=0,queue_count=1",
                a.outer
            )),
        )
        .await;
        ok(&r.error);
        let r = create_port(
            &mut c,
            "pb",
            0,
            2,
            pmd(&format!("net_af_packet1,iface={},qpairs=2", b.outer)),
        )
        .await;
        ok(&r.error);
        let l = c
            .list_ports(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        let mut ports: Vec<_> = l
            .ports
            .iter()
            .map(|p| (p.name.as_str(), p.driver.as_str(), p.num_inc_q, p.num_out_q))
            .collect();
        ports.sort();
        assert_eq!(
            ports,
            vec![("pa", "PMDPort", 1, 1), ("pb", "PMDPort", 1, 2)]
        );
        for (inc, out, from, to) in [
            ("inc_a", "out_b", "pa", "pb"),
            ("inc_b", "out_a", "pb", "pa"),
        ] {
            module(&mut c, inc, "PortInc", from).await;
            module(&mut c, out, "PortOut", to).await;
            let r = c
                .connect_modules(pb::ConnectModulesRequest {
                    m1: inc.into(),
                    m2: out.into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            ok(&r.error);
        }
        run_on_worker0(&mut c).await;
        let ns = a.ns.clone();
        let ping = tokio::task::spawn_blocking(move || {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns,
                    "ping",
                    "-c",
                    "3",
                    "-i",
                    "0.2",
                    "-W",
                    "2",
                    "10.123.0.2",
                ])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            ping.status.success(),
            "ping through the PMDPorts failed: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        for name in ["pa", "pb"] {
            // The last reply can reach ping before the worker has counted its send: the
            // counters are read until they hold all three (bounded: 50 x 100 ms).
            let mut tries = 0;
            let (inc, out) = loop {
                let s = c
                    .get_port_stats(pb::GetPortStatsRequest { name: name.into() })
                    .await
                    .unwrap()
                    .into_inner();
                ok(&s.error);
                let (inc, out) = (s.inc.unwrap(), s.out.unwrap());
                tries += 1;
                if (inc.bytes >= 3 * 98 && out.bytes >= 3 * 98) || tries == 50 {
                    break (inc, out);
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            };
            // 3 echo requests and replies, plus ARP.
            assert!(
                inc.packets >= 3 && out.packets >= 3,
                "{name}: {inc:?} {out:?}"
            );
            assert!(
                inc.bytes >= 3 * 98 && out.bytes >= 3 * 98,
                "{name}: {inc:?} {out:?}"
            );
            let l = c
                .get_link_status(pb::GetLinkStatusRequest { name: name.into() })
                .await
                .unwrap()
                .into_inner();
            ok(&l.error);
            assert!(l.link_up, "{name}: link down");
        }

        // A DPDK port that does not exist (ENODEV, as BESS answers), and a malformed vdev.
        let r = create_port(
            &mut c,
            "px",
            0,
            0,
            Some(any(
                "PMDPortArg",
                &pb::PmdPortArg {
                    port: Some(Port::PortId(0)),
                    ..Default::default()
                },
            )),
        )
        .await;
        if bessemer_dpdk::available().is_ok() {
            let e = err(&r.error, "DPDK has no port 0");
            assert_eq!(e.code, libc::ENODEV);
        } else {
            err(&r.error, "without DPDK");
        }
        let r = create_port(&mut c, "px", 0, 0, pmd("net_af_xdp2,iface")).await;
        let e = err(&r.error, "'iface' is not key=value");
        assert_eq!(e.code, libc::EINVAL);
        // More queues than the device has.
        let r = create_port(
            &mut c,
            "px",
            2,
            2,
            pmd(&format!("net_af_packet3,iface={},qpairs=1", a.outer)),
        )
        .await;
        assert_eq!(err(&r.error, "qpairs=1").code, libc::EINVAL);
    })
    .await;
    drop(d);
    drop((a, b));
}

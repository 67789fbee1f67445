//! VPort (TAP) tests: the kernel of a namespace answers frames the switch sends it, traffic
//! from the namespace reaches the switch byte for byte, the interface goes with the port, bad
//! arguments are refused, and two namespaces talk through a running engine.

mod common;

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::{PortConf, PortHandle, PortParams};
use bessemer_core::testing::{CaptureHandle, Harness};
use bessemer_core::{Error, PacketPool, Value};
use bessemer_drivers::{netns, vport::DRIVER};
use bessemer_modules::io::{port_inc, port_out};
use common::{fnv, pattern, sh_in, tcp_between, unique, Netns};

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn params(name: &str, pool: &PacketPool) -> PortParams {
    PortParams {
        name: name.to_string(),
        num_inc_q: 0,
        num_out_q: 0,
        size_inc_q: 0,
        size_out_q: 0,
        pool: pool.clone(),
    }
}

fn vport_arg(ifname: &str, ns: &str, addrs: &[&str]) -> Value {
    let addrs: Vec<Value> = addrs.iter().map(|a| Value::from(*a)).collect();
    Value::map()
        .with("ifname", ifname)
        .with("netns", ns)
        .with("ip_addrs", Value::List(addrs))
}

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn ipv4(ip: &str) -> [u8; 4] {
    ip.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

/// ARP request "who has `target`, tell `sender`" from PEER_MAC.
fn arp_request(sender: &str, target: &str) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&ipv4(sender));
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ipv4(target));
    f
}

/// ICMP echo request from `src` (PEER_MAC) to `dst` at `dst_mac`.
fn echo_request(src: &str, dst: &str, dst_mac: [u8; 6], id: u16, payload: &[u8]) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&1u16.to_be_bytes());
    icmp.extend_from_slice(payload);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 1, 0, 0]);
    ip.extend_from_slice(&ipv4(src));
    ip.extend_from_slice(&ipv4(dst));
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

/// True for an IPv4 ICMP echo reply.
fn is_echo_reply(f: &[u8]) -> bool {
    f.len() > 34 && f[12..14] == [0x08, 0x00] && f[23] == 1 && f[34] == 0
}

/// Polls PortInc `inc` (tasks `0..tasks`) until a frame matching `want` was captured, or 5 s.
/// Returns that frame and how many frames were captured in all.
fn wait_for(
    h: &mut Harness,
    cap: &CaptureHandle,
    tasks: usize,
    want: impl Fn(&[u8]) -> bool,
    seen: &mut usize,
) -> Option<Vec<u8>> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let mut got = 0;
        for i in 0..tasks {
            got += h.run_task("inc", i).packets;
        }
        let frames = cap.take_data();
        *seen += frames.len();
        if let Some(f) = frames.into_iter().find(|f| want(f)) {
            return Some(f);
        }
        if got == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    None
}

struct Setup {
    h: Harness,
    cap: CaptureHandle,
    port: Arc<PortHandle>,
    ifname: String,
}

/// A harness with VPort `vp` (extra arguments in `arg`) and PortInc `inc` / PortOut `out`.
fn setup(arg: Value, num_inc_q: usize) -> Setup {
    let mut h = Harness::new();
    let ifname = arg
        .get("ifname")
        .and_then(|v| v.as_str())
        .unwrap()
        .to_string();
    let mut p = params("vp", &h.pool);
    p.num_inc_q = num_inc_q;
    let port = h.graph.ports().create(&DRIVER, p, &arg).unwrap();
    let with_port = Value::map().with("port", "vp");
    h.add(&port_inc::CLASS, "inc", &with_port).unwrap();
    h.add(&port_out::CLASS, "out", &with_port).unwrap();
    let cap = h.capture("inc", 0);
    Setup {
        h,
        cap,
        port,
        ifname,
    }
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn namespace_kernel_answers_arp_and_ping() {
    let ns = Netns::new("bvp");
    let ifname = unique("vpa");
    let mut s = setup(vport_arg(&ifname, &ns.name, &["10.71.0.1/24"]), 0);
    let mac = s.port.port().conf().mac_addr;
    assert!(s.port.port().link_status().link_up);

    let arp = arp_request("10.71.0.2", "10.71.0.1");
    s.h.inject("out", 0, std::slice::from_ref(&arp));
    let mut seen = 0;
    let reply = wait_for(
        &mut s.h,
        &s.cap,
        1,
        |f| f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 2],
        &mut seen,
    )
    .expect("no ARP reply from the namespace");
    assert_eq!(reply[0..6], PEER_MAC, "reply goes to the asker");
    assert_eq!(reply[6..12], mac, "reply comes from the port's MAC");
    assert_eq!(reply[22..28], mac, "sender hardware address");
    assert_eq!(reply[28..32], ipv4("10.71.0.1"));
    assert_eq!(reply[32..38], PEER_MAC);
    assert_eq!(reply[38..42], ipv4("10.71.0.2"));

    let payload = b"bessemer vport echo 0123456789";
    let echo = echo_request("10.71.0.2", "10.71.0.1", mac, 0x4242, payload);
    s.h.inject("out", 0, std::slice::from_ref(&echo));
    let reply = wait_for(&mut s.h, &s.cap, 1, is_echo_reply, &mut seen)
        .expect("no ICMP echo reply from the namespace");
    assert_eq!(reply[0..6], PEER_MAC);
    assert_eq!(reply[26..30], ipv4("10.71.0.1"), "reply source");
    assert_eq!(reply[30..34], ipv4("10.71.0.2"), "reply destination");
    assert_eq!(csum(&reply[14..34]), 0, "IPv4 header checksum");
    assert_eq!(csum(&reply[34..]), 0, "ICMP checksum");
    assert_eq!(reply[38..40], 0x4242u16.to_be_bytes(), "echo id");
    assert_eq!(reply[40..42], 1u16.to_be_bytes(), "echo sequence");
    assert_eq!(&reply[42..], payload);

    let (inc, out) = s.port.counts();
    assert_eq!(out.packets, 2);
    assert_eq!(out.bytes, (arp.len() + echo.len()) as u64);
    assert_eq!(out.dropped, 0);
    assert_eq!(inc.packets, seen as u64, "every received frame is counted");
    assert!(inc.bytes >= (reply.len() + 42) as u64);
    assert_eq!(s.h.drops("out", "tx_failed"), 0);

    // A runt frame is refused by the TAP, and nothing goes out while the interface is down:
    // both stay with PortOut, which counts them.
    s.h.inject("out", 0, &[vec![0xff; 6]]);
    assert_eq!(s.h.drops("out", "tx_failed"), 1);
    let conf = s.port.port().conf();
    s.port
        .port()
        .set_conf(&PortConf {
            admin_up: false,
            ..conf
        })
        .unwrap();
    assert!(!s.port.port().link_status().link_up);
    s.h.inject("out", 0, &[arp.clone(), echo.clone()]);
    assert_eq!(s.h.drops("out", "tx_failed"), 3);
    let (_, out) = s.port.counts();
    assert_eq!((out.packets, out.dropped), (2, 3));
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn jumbo_echo_crosses_a_tap_with_a_9000_mtu() {
    let ns = Netns::new("bvp");
    let ifname = unique("vpj");
    let mut s = setup(vport_arg(&ifname, &ns.name, &["10.79.0.1/24"]), 0);
    let conf = s.port.port().conf();
    s.port
        .port()
        .set_conf(&PortConf { mtu: 9000, ..conf })
        .unwrap();
    assert_eq!(s.port.port().conf().mtu, 9000);
    let mac = conf.mac_addr;
    // The namespace must know where to answer: tell it with an ARP request first.
    s.h.inject("out", 0, &[arp_request("10.79.0.2", "10.79.0.1")]);
    let mut seen = 0;
    wait_for(
        &mut s.h,
        &s.cap,
        1,
        |f| f[12..14] == [0x08, 0x06],
        &mut seen,
    )
    .expect("no ARP reply");
    // A 9000-byte IP packet each way: larger than a default buffer, so both directions use
    // the large-frame pool.
    let payload: Vec<u8> = (0..8972u32).map(|i| (i * 7) as u8).collect();
    let echo = echo_request("10.79.0.2", "10.79.0.1", mac, 0x4a4a, &payload);
    assert_eq!(echo.len(), 9014);
    s.h.inject("out", 0, std::slice::from_ref(&echo));
    let reply = wait_for(&mut s.h, &s.cap, 1, is_echo_reply, &mut seen)
        .expect("no jumbo ICMP echo reply from the namespace");
    assert_eq!(reply.len(), 9014);
    assert_eq!(csum(&reply[34..]), 0, "ICMP checksum");
    assert_eq!(&reply[42..], &payload[..]);
    assert_eq!(s.port.counts().0.dropped, 0);
    assert_eq!(s.h.drops("out", "tx_failed"), 0);
}

/// Sends one UDP datagram from inside the namespace to 10.72.0.2:9999 (routed via the tap
/// to PEER_MAC) and returns the frame PortInc got.
fn udp_from_namespace(extra: &[(&str, Value)], num_inc_q: usize) -> (Vec<u8>, [u8; 6]) {
    let ns = Netns::new("bvp");
    let ifname = unique("vpu");
    let mut arg = vport_arg(&ifname, &ns.name, &["10.72.0.1/24"]);
    for (k, v) in extra {
        arg = arg.with(k, v.clone());
    }
    let mut s = setup(arg, num_inc_q);
    assert_eq!(s.port.num_inc_q(), num_inc_q.max(1));
    let mac = s.port.port().conf().mac_addr;
    sh_in(
        &ns.name,
        &[
            "ip",
            "neigh",
            "add",
            "10.72.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            &s.ifname,
            "nud",
            "permanent",
        ],
    );
    let payload: Vec<u8> = (0..200u8).collect();
    let mut frame = None;
    let mut seen = 0;
    // Several source ports, so that with several queues the flows spread over them.
    for sport in 0..4u16 {
        netns::run_in(&ns.name, || {
            let sock = UdpSocket::bind(("10.72.0.1", 40000 + sport))
                .map_err(|e| Error::new(libc::EIO, e.to_string()))?;
            sock.send_to(&payload, "10.72.0.2:9999")
                .map_err(|e| Error::new(libc::EIO, e.to_string()))?;
            Ok(())
        })
        .unwrap();
        // The only extras callers pass are the two VLAN tags (8 bytes in all).
        let tagged = !extra.is_empty();
        let f = wait_for(
            &mut s.h,
            &s.cap,
            num_inc_q.max(1),
            |f| {
                let off = if tagged { 8 } else { 0 };
                f.len() > 42 + off
                    && f[12 + off..14 + off] == [0x08, 0x00]
                    && f[23 + off] == 17
                    && f[36 + off..38 + off] == 9999u16.to_be_bytes()
            },
            &mut seen,
        )
        .expect("the datagram did not come out of the port");
        frame.get_or_insert(f);
    }
    let (inc, _) = s.port.counts();
    assert_eq!(inc.packets, seen as u64);
    assert_eq!(inc.dropped, 0);
    let (per_queue, _) = s.port.queue_counts();
    assert_eq!(per_queue.len(), num_inc_q.max(1));
    assert_eq!(
        per_queue.iter().map(|q| q.packets).sum::<u64>(),
        seen as u64
    );
    if num_inc_q > 1 {
        let d = sh_in(&ns.name, &["ip", "-d", "link", "show", &s.ifname]);
        assert!(d.contains("multi_queue"), "{d}");
    }
    (frame.unwrap(), mac)
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn udp_from_namespace_arrives_byte_for_byte() {
    let (f, mac) = udp_from_namespace(&[], 0);
    assert_eq!(f[0..6], PEER_MAC);
    assert_eq!(f[6..12], mac);
    assert_eq!(f[26..30], ipv4("10.72.0.1"));
    assert_eq!(f[30..34], ipv4("10.72.0.2"));
    assert_eq!(csum(&f[14..34]), 0, "IPv4 header checksum");
    assert_eq!(f[38..40], 208u16.to_be_bytes(), "UDP length");
    assert_eq!(f.len(), 14 + 20 + 8 + 200);
    let payload: Vec<u8> = (0..200u8).collect();
    assert_eq!(&f[42..], &payload[..]);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn multi_queue_tap_receives_on_its_queues() {
    let (f, _) = udp_from_namespace(&[], 3);
    assert_eq!(f.len(), 14 + 20 + 8 + 200);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn tx_tci_tags_frames_from_the_host() {
    let (f, mac) = udp_from_namespace(
        &[
            ("tx_tci", Value::from(5i64)),
            ("tx_outer_tci", Value::from(7i64)),
        ],
        0,
    );
    assert_eq!(f[0..6], PEER_MAC);
    assert_eq!(f[6..12], mac);
    assert_eq!(f[12..16], [0x88, 0xa8, 0, 7], "outer 802.1ad tag");
    assert_eq!(f[16..20], [0x81, 0x00, 0, 5], "inner 802.1Q tag");
    assert_eq!(f[20..22], [0x08, 0x00]);
    assert_eq!(f.len(), 8 + 14 + 20 + 8 + 200);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn loopback_sends_frames_back_in_tagged() {
    let ns = Netns::new("bvp");
    let arg = vport_arg(&unique("vpo"), &ns.name, &["10.77.0.1/24"])
        .with("loopback", true)
        .with("tx_tci", 0x0fffi64);
    let mut s = setup(arg, 0);
    assert!(s.port.port().desc().contains("loopback"));
    let mac = s.port.port().conf().mac_addr;
    let arp = arp_request("10.77.0.2", "10.77.0.1");
    let echo = echo_request("10.77.0.2", "10.77.0.1", mac, 7, b"around");
    s.h.inject("out", 0, &[arp.clone(), echo.clone()]);
    let mut back = Vec::new();
    let t = Instant::now();
    while back.len() < 2 && t.elapsed() < Duration::from_secs(5) {
        s.h.run_task("inc", 0);
        back.extend(
            s.cap
                .take_data()
                .into_iter()
                .filter(|f| f.len() >= 18 && f[12..16] == [0x81, 0x00, 0x0f, 0xff]),
        );
    }
    let untag = |f: &[u8]| [&f[..12], &f[16..]].concat();
    // The host may loop frames of its own too (a larger batch can bring them in the same
    // read); ours come first.
    assert!(back.len() >= 2, "looped frames: {}", back.len());
    assert_eq!(untag(&back[0]), arp);
    assert_eq!(untag(&back[1]), echo);
    // The host never saw them: no ARP entry for the asker.
    let neigh = sh_in(&ns.name, &["ip", "neigh", "show", "10.77.0.2"]);
    assert!(neigh.trim().is_empty(), "{neigh}");

    // Frames still in the ring when the port goes are freed (the harness checks the pool).
    s.h.inject("out", 0, &[arp.clone(), arp.clone(), arp]);
    let (_, out) = s.port.counts();
    assert_eq!(out.packets, 5);
    for m in ["inc", "out", "cap_inc_0"] {
        s.h.graph.remove_module(m, &mut s.h.ctx).unwrap();
    }
    drop(s.port);
    s.h.graph.ports().destroy("vp").unwrap();
}

fn link_exists(ns: &str, ifname: &str) -> bool {
    sh_in(ns, &["ip", "-o", "link"])
        .lines()
        .any(|l| l.split(':').nth(1).map(|n| n.trim()) == Some(ifname))
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn port_name_is_the_default_ifname_and_destroy_removes_the_interface() {
    let ns = Netns::new("bvp");
    let h = Harness::new();
    let name = unique("vpd");
    let arg = Value::map().with("netns", ns.name.as_str());
    let port = h
        .graph
        .ports()
        .create(&DRIVER, params(&name, &h.pool), &arg)
        .unwrap();
    assert!(
        link_exists(&ns.name, &name),
        "interface named after the port"
    );
    assert!(port.port().desc().contains(&name));

    let conf = port.port().conf();
    assert_eq!(conf.mac_addr[0] & 3, 2, "unicast, locally administered MAC");
    assert_eq!(conf.mtu, 1500);
    assert!(conf.admin_up);
    assert!(port.port().link_status().link_up);

    // SetPortConf: down, new MTU and MAC; then up again.
    let mac2 = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    port.port()
        .set_conf(&PortConf {
            mac_addr: mac2,
            mtu: 1400,
            admin_up: false,
        })
        .unwrap();
    assert!(!port.port().link_status().link_up);
    let c = port.port().conf();
    assert_eq!((c.mac_addr, c.mtu, c.admin_up), (mac2, 1400, false));
    assert!(sh_in(&ns.name, &["ip", "link", "show", &name]).contains("02:11:22:33:44:55"));
    port.port()
        .set_conf(&PortConf {
            admin_up: true,
            ..c
        })
        .unwrap();
    assert!(port.port().link_status().link_up);

    drop(port);
    h.graph.ports().destroy(&name).unwrap();
    let t = Instant::now();
    while link_exists(&ns.name, &name) && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !link_exists(&ns.name, &name),
        "interface still there after destroy"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn vanished_namespace_shows_link_down() {
    let ns = Netns::new("bvp");
    let mut s = setup(vport_arg(&unique("vpg"), &ns.name, &["10.73.0.1/24"]), 0);
    assert!(s.port.port().link_status().link_up);
    drop(ns);
    let t = Instant::now();
    while s.port.port().link_status().link_up && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!s.port.port().link_status().link_up);
    // The kernel removes the interface with the namespace (asynchronously): from then on
    // sends fail (counted as tx_failed) and receives find nothing, without panics.
    let t = Instant::now();
    loop {
        s.h.inject("out", 0, &[arp_request("10.73.0.2", "10.73.0.1")]);
        if s.port.counts().1.dropped > 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "sends to a removed interface still succeed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..1000 {
        if s.h.run_task("inc", 0).packets == 0 {
            break;
        }
    }
    assert_eq!(s.h.run_task("inc", 0).packets, 0);
    let (_, out) = s.port.counts();
    assert_eq!(s.h.drops("out", "tx_failed"), out.dropped);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn without_netns_the_interface_is_made_where_the_daemon_runs() {
    // The "daemon" is this test thread, moved into a namespace of its own.
    let ns = Netns::new("bvp");
    let h = Harness::new();
    let ifname = unique("vpn");
    let arg = Value::map()
        .with("ifname", ifname.as_str())
        .with("ip_addrs", Value::List(vec!["10.76.0.1/24".into()]));
    let port = netns::run_in(&ns.name, || {
        h.graph.ports().create(&DRIVER, params("vp", &h.pool), &arg)
    })
    .unwrap();
    assert!(link_exists(&ns.name, &ifname));
    let a = sh_in(&ns.name, &["ip", "-o", "addr", "show", "dev", &ifname]);
    assert!(a.contains("10.76.0.1/24"), "{a}");
    assert!(port.port().desc().contains(&ifname));
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn container_pid_puts_the_interface_into_that_process_namespace() {
    let ns = Netns::new("bvp");
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "sleep", "30"])
        .spawn()
        .unwrap();
    // `ip netns exec` enters the namespace, then execs sleep (same pid): wait until the
    // process is in it.
    let path = format!("/proc/{}/ns/net", child.id());
    let target = std::fs::metadata(format!("/var/run/netns/{}", ns.name)).unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&path) {
            Ok(m) if m.ino() == target.ino() => break,
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let h = Harness::new();
    let ifname = unique("vpc");
    let arg = Value::map()
        .with("ifname", ifname.as_str())
        .with("container_pid", child.id() as i64);
    let made = h.graph.ports().create(&DRIVER, params("vp", &h.pool), &arg);
    let _ = child.kill();
    let _ = child.wait();
    let port = made.unwrap();
    assert!(link_exists(&ns.name, &ifname));
    assert!(port.port().desc().contains(&ifname));
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn no_permission_is_reported_with_a_hint() {
    let ns = Netns::new("bvp");
    let h = Harness::new();
    let arg = Value::map().with("ifname", unique("vpp").as_str());
    let e = netns::run_in(&ns.name, || {
        // Only this thread becomes nobody (the raw syscall, unlike setuid(3), is per thread).
        // SAFETY: plain syscall.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(r, 0);
        Ok(h.graph.ports().create(&DRIVER, params("vp", &h.pool), &arg))
    })
    .unwrap()
    .err()
    .expect("created a TAP without privileges");
    assert!(e.code == libc::EPERM || e.code == libc::EACCES, "{e:?}");
    assert!(e.msg.contains("root"), "{e:?}");
}

fn create_err(arg: &Value, name: &str) -> Error {
    let h = Harness::new();
    match h.graph.ports().create(&DRIVER, params(name, &h.pool), arg) {
        Ok(_) => panic!("created a port from {arg:?}"),
        Err(e) => e,
    }
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn bad_arguments_are_refused() {
    let ns = Netns::new("bvp");
    let ok = |k: &str, v: Value| vport_arg(&unique("vpe"), &ns.name, &[]).with(k, v);

    let e = create_err(&vport_arg("vpx", "bessemer_no_such_ns", &[]), "vp");
    assert_eq!(e.code, libc::ENOENT, "{e:?}");
    assert!(e.msg.contains("bessemer_no_such_ns"), "{e:?}");

    let e = create_err(&Value::map().with("docker", "web"), "vp");
    assert_eq!(e.code, libc::ENOTSUP, "{e:?}");
    assert!(e.msg.contains("docker"), "{e:?}");

    let e = create_err(&Value::map().with("container_pid", 2_000_000_000i64), "vp");
    assert_eq!(e.code, libc::ESRCH, "{e:?}");

    let e = create_err(
        &Value::map()
            .with("netns", ns.name.as_str())
            .with("container_pid", 1i64),
        "vp",
    );
    assert_eq!(e.code, libc::EINVAL, "{e:?}");

    for bad in ["10.0.0.300/24", "10.0.0.1/40", "nonsense"] {
        let e = create_err(&vport_arg("vpx", &ns.name, &["10.1.0.1/24", bad]), "vp");
        assert_eq!(e.code, libc::EINVAL, "{e:?}");
        assert!(
            e.msg.contains("ip_addrs[1]") && e.msg.contains(bad),
            "{e:?}"
        );
    }

    let e = create_err(&vport_arg("a_much_too_long_name", &ns.name, &[]), "vp");
    assert_eq!(e.code, libc::EINVAL, "{e:?}");
    assert!(e.msg.contains("ifname"), "{e:?}");
    let e = create_err(&Value::Null, "a_much_too_long_port_name");
    assert_eq!(e.code, libc::EINVAL, "{e:?}");

    let e = create_err(&ok("rxq_cpus", Value::List(vec![0.into(), 1.into()])), "vp");
    assert_eq!(e.code, libc::EINVAL, "{e:?}");
    assert!(e.msg.contains("rxq_cpus"), "{e:?}");
    let e = create_err(&ok("tx_tci", Value::from(70000i64)), "vp");
    assert_eq!(e.code, libc::EINVAL, "{e:?}");
    let e = create_err(&ok("no_such_field", Value::from(1i64)), "vp");
    assert!(e.msg.contains("no_such_field"), "{e:?}");

    // A name already taken in the target namespace.
    let h = Harness::new();
    let taken = unique("vpt");
    let _p = h
        .graph
        .ports()
        .create(
            &DRIVER,
            params("first", &h.pool),
            &vport_arg(&taken, &ns.name, &[]),
        )
        .unwrap();
    let e = create_err(&vport_arg(&taken, &ns.name, &[]), "vp");
    assert_eq!(e.code, libc::EEXIST, "{e:?}");
    assert!(e.msg.contains(&taken), "{e:?}");

    // A failure after the interface was made (the kernel refuses the second, equal
    // address) removes the interface again.
    let late = unique("vpl");
    let e = create_err(
        &vport_arg(&late, &ns.name, &["10.74.0.1/24", "10.74.0.1/24"]),
        "vp",
    );
    assert_eq!(e.code, libc::EEXIST, "{e:?}");
    assert!(e.msg.contains("ip_addrs"), "{e:?}");
    assert!(!link_exists(&ns.name, &late), "interface left behind");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn two_namespaces_talk_through_the_switch() {
    let a = Netns::new("bva");
    let b = Netns::new("bvb");
    let mut e = Engine::new(EngineConfig {
        buffers: 4096,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap();
    e.add_worker(0, 0).unwrap();
    for (port, ns, addr) in [("va", &a, "10.75.0.1/24"), ("vb", &b, "10.75.0.2/24")] {
        let arg = vport_arg(&unique("vps"), &ns.name, &[addr]);
        e.ports()
            .create(&DRIVER, params(port, e.pool()), &arg)
            .unwrap();
    }
    for (m, class, port) in [
        ("ia", &port_inc::CLASS, "va"),
        ("ob", &port_out::CLASS, "vb"),
        ("ib", &port_inc::CLASS, "vb"),
        ("oa", &port_out::CLASS, "va"),
    ] {
        e.create_module(class, Some(m), &Value::map().with("port", port))
            .unwrap();
    }
    e.connect("ia", 0, "ob", 0).unwrap();
    e.connect("ib", 0, "oa", 0).unwrap();
    e.resume_all().unwrap();

    let io = |r: std::io::Result<usize>| r.map_err(|e| Error::new(libc::EIO, e.to_string()));
    let bind = |ns: &str, addr: &'static str| {
        netns::run_in(ns, || {
            let s = UdpSocket::bind(addr).map_err(|e| Error::new(libc::EIO, e.to_string()))?;
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            Ok(s)
        })
        .unwrap()
    };
    let sa = bind(&a.name, "10.75.0.1:7001");
    let sb = bind(&b.name, "10.75.0.2:7002");
    let mut buf = [0u8; 64];
    for i in 0..5u8 {
        io(sa.send_to(&[i; 32], "10.75.0.2:7002")).unwrap();
        let (n, from) = sb.recv_from(&mut buf).expect("B got nothing from A");
        assert_eq!(&buf[..n], &[i; 32]);
        assert_eq!(from.to_string(), "10.75.0.1:7001");
        io(sb.send_to(&[i + 100; 16], from)).unwrap();
        let (n, _) = sa.recv_from(&mut buf).expect("A got no answer from B");
        assert_eq!(&buf[..n], &[i + 100; 16]);
    }
    // TCP: the hosts' stacks hand the taps super-frames with partial checksums (the taps
    // announce TSO and checksum offload); the ports cut them into valid segments.
    let data = pattern(4 << 20);
    let got = tcp_between(&a.name, &b.name, "10.75.0.2:5201".parse().unwrap(), &data);
    assert_eq!(got.len(), data.len());
    assert_eq!(fnv(&got), fnv(&data));
    let d = e.ports().get("va").unwrap().port().desc();
    assert!(d.contains("offloads: checksum, TSO"), "{d}");
    assert!(
        !d.contains("; 0 super-frame"),
        "no super-frame came through: {d}"
    );
    // Paused, nothing is in flight: what one port received the other sent (or, before the
    // PortInc was connected, its dead end dropped). The hosts' own IPv6 chatter crosses too,
    // so the counts are at least (not exactly) the 5 datagrams and the ARP exchange.
    e.pause_all().unwrap();
    let (a_in, a_out) = e.ports().get("va").unwrap().counts();
    let (b_in, b_out) = e.ports().get("vb").unwrap().counts();
    let early = |m: &str| e.graph().total_drops(m).unwrap();
    assert!(a_in.packets >= 6, "{a_in:?}");
    assert_eq!(a_in.packets, b_out.packets + b_out.dropped + early("ia"));
    assert!(b_in.packets >= 6, "{b_in:?}");
    assert_eq!(b_in.packets, a_out.packets + a_out.dropped + early("ib"));
    e.resume_all().unwrap();
}

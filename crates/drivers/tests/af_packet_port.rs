//! AFPacketPort end to end: two hosts (namespaces on veths) joined by a switch of two
//! AFPacketPorts on a real worker (PortInc(a) -> PortOut(b) and back). Checks ARP and ping,
//! a UDP datagram byte for byte, a TCP transfer with the veths' default offloads (TSO
//! super-frames, partial checksums), jumbo MTUs, fanout queues, link state and bad input.
//! Needs root; every wait is bounded.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::packet::DATA_CAPACITY;
use bessemer_core::port::{PortHandle, PortParams};
use bessemer_core::{PacketBatch, PacketPool, Value};
use bessemer_drivers::af_packet_port::DRIVER;
use bessemer_drivers::netns;
use common::{
    eventually, fnv, io, pattern, sh, sh_in, tcp_transfer, tcp_transfer_to, Link, Netns, TwoHosts,
};

fn engine() -> Engine {
    Engine::new(EngineConfig {
        buffers: 8192,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap()
}

fn arg(ifname: &str) -> Value {
    Value::map().with("ifname", ifname)
}

fn params(name: &str, pool: &PacketPool, nin: usize, nout: usize) -> PortParams {
    PortParams {
        name: name.into(),
        num_inc_q: nin,
        num_out_q: nout,
        size_inc_q: 0,
        size_out_q: 0,
        pool: pool.clone(),
    }
}

/// A switch between the hosts' outer veth ends: ports `pa`, `pb`, forwarding both ways.
fn switch(h: &TwoHosts, extra: &[(&str, Value)], nin: usize, nout: usize) -> Engine {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    for (name, ifname) in [("pa", &h.la.outer), ("pb", &h.lb.outer)] {
        let mut a = arg(ifname);
        for (k, v) in extra {
            a = a.with(k, v.clone());
        }
        let pool = e.pool().clone();
        e.ports()
            .create(&DRIVER, params(name, &pool, nin, nout), &a)
            .unwrap();
    }
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
    e
}

fn ping(ns: &str, to: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2",
    ];
    args.extend_from_slice(extra);
    args.push(to);
    Command::new("ip").args(&args).output().expect("ping runs")
}

fn ping_ok(ns: &str, to: &str, extra: &[&str]) {
    let out = ping(ns, to, extra);
    assert!(
        out.status.success(),
        "ping {to} from {ns} {extra:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mac_of(ns: &str, ifname: &str) -> String {
    let s = sh_in(ns, &["ip", "-o", "link", "show", "dev", ifname]);
    let i = s.find("link/ether ").expect("an ethernet interface") + 11;
    s[i..i + 17].to_string()
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn ping_both_ways_and_arp_resolves() {
    let h = TwoHosts::new(71);
    let e = switch(&h, &[], 0, 0);
    ping_ok(&h.a.name, &h.b_ip, &[]);
    ping_ok(&h.b.name, &h.a_ip, &[]);
    let neigh = sh_in(&h.a.name, &["ip", "neigh", "show", &h.b_ip]);
    assert!(
        neigh.contains(&mac_of(&h.b.name, &h.lb.inner)),
        "A's ARP entry for B: {neigh}"
    );
    let pa = e.ports().get("pa").unwrap();
    let (inc, out) = pa.counts();
    assert!(inc.packets >= 4 && out.packets >= 4, "{inc:?} {out:?}");
    assert_eq!(inc.dropped, 0);
    let d = pa.port().desc();
    assert!(d.contains(&h.la.outer) && d.contains("TPACKET_V2"), "{d}");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn udp_datagrams_arrive_byte_for_byte() {
    let h = TwoHosts::new(72);
    let e = switch(&h, &[("promiscuous", Value::from(true))], 0, 0);
    ping_ok(&h.a.name, &h.b_ip, &[]);
    let b_addr: SocketAddr = format!("{}:9999", h.b_ip).parse().unwrap();
    let rx = netns::run_in(&h.b.name, || io(UdpSocket::bind(b_addr))).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let a_ip = h.a_ip.clone();
    let tx = netns::run_in(&h.a.name, || io(UdpSocket::bind((a_ip.as_str(), 0)))).unwrap();
    // The veth leaves UDP checksums to "hardware": the port completes them.
    for len in [1usize, 100, 1000, 1472] {
        let data = pattern(len);
        tx.send_to(&data, b_addr).unwrap();
        let mut buf = vec![0u8; 2048];
        let (n, from) = rx.recv_from(&mut buf).expect("datagram arrives");
        assert_eq!(&buf[..n], &data[..], "{len}-byte datagram");
        assert_eq!(from.ip().to_string(), h.a_ip);
    }
    // UDP GSO (UDP_SEGMENT): one 4000-byte send leaves as four 1000-byte datagrams, whether
    // the kernel or the port cuts it.
    let seg: libc::c_int = 1000;
    // SAFETY: a valid socket and option value.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&tx),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            &seg as *const libc::c_int as *const libc::c_void,
            4,
        )
    };
    assert_eq!(r, 0, "UDP_SEGMENT");
    let data = pattern(4000);
    tx.send_to(&data, b_addr).unwrap();
    for k in 0..4 {
        let mut buf = vec![0u8; 2048];
        let (n, _) = rx.recv_from(&mut buf).expect("segment arrives");
        assert_eq!(&buf[..n], &data[k * 1000..(k + 1) * 1000], "segment {k}");
    }
    let d = e.ports().get("pa").unwrap().port().desc();
    assert!(
        d.contains("; 1 super-frame"),
        "the UDP super-frame was not cut here: {d}"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn tcp_transfer_with_default_offloads_arrives_intact() {
    let h = TwoHosts::new(73);
    let e = switch(&h, &[], 0, 0);
    ping_ok(&h.a.name, &h.b_ip, &[]);
    let data = pattern(4 << 20);
    let got = tcp_transfer(&h, &data);
    assert_eq!(got.len(), data.len());
    assert_eq!(fnv(&got), fnv(&data));
    // TSO on A's veth hands the switch super-frames; B saw MTU-sized segments.
    let (inc, _) = e.ports().get("pa").unwrap().counts();
    let (_, out_b) = e.ports().get("pb").unwrap().counts();
    assert!(out_b.packets >= (4 << 20) / 1448, "{out_b:?}");
    assert!(inc.packets >= out_b.packets, "{inc:?} {out_b:?}");
    let d = e.ports().get("pa").unwrap().port().desc();
    assert!(
        !d.contains("; 0 super-frame"),
        "no super-frame came through: {d}"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn jumbo_frames_cross_up_to_the_mtu_and_tcp_keeps_its_segment_size() {
    let h = TwoHosts::new(74);
    h.la.set_mtu(&h.a, 9000);
    h.lb.set_mtu(&h.b, 9000);
    let e = switch(&h, &[], 0, 0);
    // Just above a default buffer, and a whole 9000-byte IP packet: both cross both ways.
    let above = (DATA_CAPACITY + 1 - 14 - 20 - 8).to_string();
    for size in [above.as_str(), "8972"] {
        ping_ok(&h.a.name, &h.b_ip, &["-M", "do", "-s", size]);
        ping_ok(&h.b.name, &h.a_ip, &["-M", "do", "-s", size]);
    }
    let (rx, _) = e.ports().get("pa").unwrap().counts();
    assert_eq!(rx.dropped, 0, "no frame dropped");
    // TCP with a 9000 MTU: super-frames are cut at the sender's segment size.
    let data = pattern(3 << 20);
    let got = tcp_transfer(&h, &data);
    assert_eq!(fnv(&got), fnv(&data));
    assert_eq!(got.len(), data.len());
    let d = e.ports().get("pa").unwrap().port().desc();
    assert!(!d.contains("; 0 super-frame"), "{d}");
    // Jumbo frames used the large-frame pool, and every one of its buffers came back.
    let large = e.pool().large().expect("a large-frame pool");
    assert!(large.stats().alloc_failures == 0);
    drop(e);
    assert_eq!(large.free_count(), large.capacity(), "jumbo buffers leaked");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn fanout_spreads_flows_over_queues() {
    let h = TwoHosts::new(75);
    let e = switch(&h, &[], 3, 2);
    let pa = e.ports().get("pa").unwrap();
    assert_eq!((pa.num_inc_q(), pa.num_out_q()), (3, 2));
    ping_ok(&h.a.name, &h.b_ip, &[]);
    let b_addr: SocketAddr = format!("{}:9998", h.b_ip).parse().unwrap();
    let rx = netns::run_in(&h.b.name, || io(UdpSocket::bind(b_addr))).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = 0;
    for i in 0..24u8 {
        let a_ip = h.a_ip.clone();
        let tx = netns::run_in(&h.a.name, || io(UdpSocket::bind((a_ip.as_str(), 0)))).unwrap();
        tx.send_to(&[i; 64], b_addr).unwrap();
        let mut buf = [0u8; 128];
        let (n, _) = rx.recv_from(&mut buf).expect("datagram arrives");
        assert_eq!(&buf[..n], &[i; 64]);
        got += 1;
    }
    assert_eq!(got, 24);
    let (qs, _) = pa.queue_counts();
    let busy = qs.iter().filter(|q| q.packets > 0).count();
    assert!(busy >= 2, "24 flows all hashed to one queue: {qs:?}");
    let data = pattern(1 << 20);
    assert_eq!(fnv(&tcp_transfer(&h, &data)), fnv(&data));
}

/// Receives from `port`'s queue 0 for `ms` milliseconds; returns the frames' bytes.
fn drain_rx(port: &PortHandle, pool: &PacketPool, ms: u64) -> Vec<Vec<u8>> {
    let mut q = port.port().rx_queue(0).unwrap();
    let mut cache = pool.cache();
    let mut got = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(ms) {
        let mut b = PacketBatch::new();
        if q.recv(&mut cache, &mut b, 32) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        got.extend(b.pkts().iter().map(|p| p.data().to_vec()));
        cache.free_bulk(&mut b);
    }
    got
}

fn frame(marker: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f.extend_from_slice(&[marker; 46]);
    f
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn port_in_a_namespace_receives_and_sender_ignores_its_own_packets() {
    let host = Netns::new("bhx");
    let l = Link::new(&host, "10.76.0.1/24");
    let pool = PacketPool::new("t", 1024, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    let outer = table
        .create(&DRIVER, params("outer", &pool, 1, 1), &arg(&l.outer))
        .unwrap();
    let inner = table
        .create(
            &DRIVER,
            params("inner", &pool, 1, 1),
            &arg(&l.inner).with("netns", host.name.as_str()),
        )
        .unwrap();
    assert!(inner.port().desc().contains(&host.name));
    let mut cache = pool.cache();
    let mut tx = outer.port().tx_queue(0).unwrap();
    let mut b = PacketBatch::new();
    for i in 0..10u8 {
        let mut p = cache.alloc(60).unwrap();
        p.set_data(&frame(0xa0 + i));
        b.push(p).unwrap();
    }
    assert_eq!(tx.send(&mut cache, &mut b), 10);
    assert!(b.is_empty());
    drop(cache);
    let mine = |f: &Vec<u8>| f.len() >= 60 && f[12..14] == [0x88, 0xb5];
    let seen_inner: Vec<_> = drain_rx(&inner, &pool, 300)
        .into_iter()
        .filter(mine)
        .collect();
    assert_eq!(seen_inner.len(), 10, "the peer got every frame");
    assert_eq!(seen_inner[3], frame(0xa3));
    let seen_outer = drain_rx(&outer, &pool, 100)
        .into_iter()
        .filter(mine)
        .count();
    assert_eq!(seen_outer, 0, "the sender received its own frames");
    drop((outer, inner));
    assert_eq!(table.reset(), Vec::<String>::new());
    assert_eq!(pool.free_count(), pool.capacity());
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn link_state_conf_and_a_vanishing_interface() {
    let host = Netns::new("bhy");
    let l = Link::new(&host, "10.77.0.1/24");
    let pool = PacketPool::new("t", 256, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    let p = table
        .create(&DRIVER, params("p", &pool, 1, 1), &arg(&l.outer))
        .unwrap();
    // Carrier changes reach the interface's flags asynchronously: wait for each, bounded.
    assert!(eventually(|| p.port().link_status().link_up));
    let st = p.port().link_status();
    assert_eq!(st.speed_mbps, 10000, "veth reports 10 Gbit/s");
    let conf = p.port().conf();
    assert_eq!(
        conf.mac_addr
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        mac_of_here(&l.outer)
    );
    assert!(conf.admin_up);
    let mut c2 = conf.clone();
    c2.mtu = 2000;
    p.port().set_conf(&c2).unwrap();
    assert!(sh(&["ip", "link", "show", "dev", &l.outer]).contains("mtu 2000"));
    // Peer down: no carrier.
    sh_in(&host.name, &["ip", "link", "set", &l.inner, "down"]);
    assert!(eventually(|| !p.port().link_status().link_up));
    c2.admin_up = false;
    p.port().set_conf(&c2).unwrap();
    assert!(!p.port().conf().admin_up);
    // Frames that arrived while the link was up (the kernel's IPv6 neighbour discovery,
    // whenever it runs) may still sit in the ring: taken now, so that only what arrives
    // after the interface is gone is checked below (nothing can).
    drain_rx(&p, &pool, 20);
    // The interface goes away: link down, sends fail, nothing panics or leaks.
    sh(&["ip", "link", "del", &l.outer]);
    assert!(eventually(|| !p.port().link_status().link_up));
    let mut cache = pool.cache();
    let mut tx = p.port().tx_queue(0).unwrap();
    let mut b = PacketBatch::new();
    let mut pk = cache.alloc(60).unwrap();
    pk.set_data(&frame(1));
    b.push(pk).unwrap();
    assert_eq!(tx.send(&mut cache, &mut b), 0);
    assert_eq!(b.len(), 1, "an unsent packet stays in the batch");
    cache.free_bulk(&mut b);
    drop(cache);
    assert!(drain_rx(&p, &pool, 20).is_empty());
    drop((tx, p));
    table.destroy("p").unwrap();
    assert_eq!(pool.free_count(), pool.capacity());
}

fn mac_of_here(ifname: &str) -> String {
    let s = sh(&["ip", "-o", "link", "show", "dev", ifname]);
    let i = s.find("link/ether ").unwrap() + 11;
    s[i..i + 17].to_string()
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn bad_input_is_refused_with_clear_errors() {
    let host = Netns::new("bhz");
    let l = Link::new(&host, "10.78.0.1/24");
    let pool = PacketPool::new("t", 256, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    let create = |name: &str, a: &Value, nin| {
        table
            .create(&DRIVER, params(name, &pool, nin, 1), a)
            .map(|_| ())
    };
    let e = create("p", &arg("nosuchif77"), 1).unwrap_err();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains("nosuchif77"), "{}", e.msg);
    let e = create("p", &arg(&l.inner).with("netns", "bessemer-no-such-ns"), 1).unwrap_err();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains("bessemer-no-such-ns"), "{}", e.msg);
    // The interface exists, but in another namespace than the one named.
    let e = create("p", &arg(&l.outer).with("netns", host.name.as_str()), 1).unwrap_err();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains(&host.name), "{}", e.msg);
    let e = create("p", &arg(&l.outer), 129).unwrap_err();
    assert_eq!(e.code, libc::EINVAL);
    assert!(e.msg.contains("num_inc_q"), "{}", e.msg);
    let e = create("p", &arg(&l.outer).with("block_size", 1000u32), 1).unwrap_err();
    assert!(e.msg.contains("block_size"), "{}", e.msg);
    create("p", &arg(&l.outer), 2).unwrap();
    let e = create("q", &arg(&l.outer), 1).unwrap_err();
    assert_eq!(e.code, libc::EBUSY);
    assert!(e.msg.contains(&l.outer), "{}", e.msg);
    table.destroy("p").unwrap();
    // Released with the port.
    create("q", &arg(&l.outer), 1).unwrap();
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn ring_overflow_is_counted_as_drops() {
    let host = Netns::new("bhw");
    let l = Link::new(&host, "10.79.0.1/24");
    let pool = PacketPool::new("t", 1024, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    // A tiny ring nobody reads: two one-page blocks.
    let small = table
        .create(
            &DRIVER,
            params("small", &pool, 1, 1),
            &arg(&l.outer)
                .with("block_size", 4096u32)
                .with("num_blocks", 2u32),
        )
        .unwrap();
    let sender = table
        .create(
            &DRIVER,
            params("sender", &pool, 1, 1),
            &arg(&l.inner).with("netns", host.name.as_str()),
        )
        .unwrap();
    let mut cache = pool.cache();
    let mut tx = sender.port().tx_queue(0).unwrap();
    let mut sent = 0;
    for _ in 0..20 {
        let mut b = PacketBatch::new();
        for i in 0..25u8 {
            let mut p = cache.alloc(60).unwrap();
            p.set_data(&frame(i));
            b.push(p).unwrap();
        }
        sent += tx.send(&mut cache, &mut b);
        cache.free_bulk(&mut b);
    }
    assert_eq!(sent, 500);
    drop((tx, cache));
    std::thread::sleep(Duration::from_millis(20));
    let (inc, _) = small.counts();
    assert!(inc.dropped > 0, "no drops counted: {inc:?}");
    let got = drain_rx(&small, &pool, 100).len() as u64;
    let (inc, _) = small.counts();
    assert!(
        got + inc.dropped >= 500,
        "got {got}, dropped {}",
        inc.dropped
    );
    assert!(got < 500);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn ipv6_tcp_crosses_intact() {
    let h = TwoHosts::new(80);
    let e = switch(&h, &[], 0, 0);
    for (ns, dev, ip) in [
        (&h.a.name, &h.la.inner, "fd00:80::1/64"),
        (&h.b.name, &h.lb.inner, "fd00:80::2/64"),
    ] {
        sh_in(ns, &["ip", "addr", "add", ip, "dev", dev, "nodad"]);
    }
    ping_ok(&h.a.name, "fd00:80::2", &[]);
    ping_ok(&h.b.name, "fd00:80::1", &[]);
    // TSO6 super-frames from A are cut by the port.
    let data = pattern(2 << 20);
    let got = tcp_transfer_to(&h, "[fd00:80::2]:5203".parse().unwrap(), &data);
    assert_eq!(got.len(), data.len());
    assert_eq!(fnv(&got), fnv(&data));
    let d = e.ports().get("pa").unwrap().port().desc();
    assert!(!d.contains("; 0 super-frame"), "{d}");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn vlan_tag_moved_out_by_the_kernel_is_put_back() {
    let host = Netns::new("bhv");
    let l = Link::new(&host, "10.81.0.1/24");
    let pool = PacketPool::new("t", 1024, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    let outer = table
        .create(&DRIVER, params("outer", &pool, 1, 1), &arg(&l.outer))
        .unwrap();
    let inner = table
        .create(
            &DRIVER,
            params("inner", &pool, 1, 1),
            &arg(&l.inner).with("netns", host.name.as_str()),
        )
        .unwrap();
    // The receiving side untags 802.1Q frames into skb metadata before AF_PACKET sees them.
    let mut tagged = vec![0xff; 6];
    tagged.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x81, 0x00, 0x20, 0x0a, 0x88, 0xb5]);
    tagged.extend_from_slice(&[0x5a; 50]);
    let mut cache = pool.cache();
    let mut tx = inner.port().tx_queue(0).unwrap();
    let mut b = PacketBatch::new();
    for _ in 0..3 {
        let mut p = cache.alloc(tagged.len()).unwrap();
        p.set_data(&tagged);
        b.push(p).unwrap();
    }
    assert_eq!(tx.send(&mut cache, &mut b), 3);
    drop(cache);
    let got: Vec<_> = drain_rx(&outer, &pool, 300)
        .into_iter()
        .filter(|f| f.len() > 16 && f[16..18] == [0x88, 0xb5])
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], tagged, "the frame arrives with its VLAN tag");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn without_cap_net_raw_the_error_says_what_is_needed() {
    let host = Netns::new("bhu");
    let l = Link::new(&host, "10.82.0.1/24");
    let pool = PacketPool::new("t", 256, PagePolicy::Plain).unwrap();
    let table = bessemer_core::port::PortTable::new();
    // Capabilities are per thread: drop them all on a helper thread and open the port there.
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            #[repr(C)]
            struct Header {
                version: u32,
                pid: i32,
            }
            #[repr(C)]
            #[derive(Clone, Copy)]
            struct Data {
                effective: u32,
                permitted: u32,
                inheritable: u32,
            }
            let h = Header {
                version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
                pid: 0,
            };
            let d = [Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            // SAFETY: capset with a valid v3 header and two data words.
            let r = unsafe { libc::syscall(libc::SYS_capset, &h, d.as_ptr()) };
            assert_eq!(r, 0, "capset");
            table
                .create(&DRIVER, params("p", &pool, 1, 1), &arg(&l.outer))
                .map(|_| ())
                .unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert_eq!(err.code, libc::EPERM, "{}", err.msg);
    assert!(err.msg.contains("CAP_NET_RAW"), "{}", err.msg);
    // The failed attempt left the interface free.
    table
        .create(&DRIVER, params("p", &pool, 1, 1), &arg(&l.outer))
        .unwrap();
}

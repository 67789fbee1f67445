//! MemifPort: a server and a client port joined over a Unix socket exchange frames both
//! ways byte for byte (chained buffers for frames longer than one), reconnect after the
//! peer goes, and a hand-made client that breaks the rules (wrong id or secret, an
//! unsealed region, descriptors outside its memory, a runaway ring index) is refused or
//! counted while the port keeps working. No root needed. DPDK's own net_memif is the
//! peer in python/tests/test_memif.py.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::testing::Harness;

mod common;
use bessemer_core::Value;
use bessemer_drivers::memif::{self, AddRing, Channel, Desc, Init, Msg, Ring};
use bessemer_drivers::memif_port::DRIVER;
use bessemer_modules::io::{port_inc, port_out};
use bessemer_slice::sys;
use common::{create_port, frames, link_up, wait_until};

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn temp_socket() -> String {
    std::env::temp_dir()
        .join(format!(
            "bessemer-memif-{}-{}.sock",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ))
        .to_string_lossy()
        .into_owned()
}

/// One counter of the port's `show port` line.
fn counter(h: &Harness, port: &str, name: &str) -> u64 {
    let d = h.graph.ports().get(port).unwrap().port().desc();
    d.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no counter {name} in '{d}'"))
        .parse()
        .unwrap()
}

/// Runs `inc`'s task until `n` packets were captured (or 5 s pass).
fn receive(h: &mut Harness, inc: &str, cap: &bessemer_core::testing::CaptureHandle, n: usize) {
    let t = Instant::now();
    while cap.len() < n && t.elapsed() < Duration::from_secs(5) {
        h.run_task(inc, 0);
    }
}

/// A server port "srv" and a client port "cli" on one socket, each with a PortInc (captured)
/// and a PortOut.
fn pair(
    h: &mut Harness,
    extra: &[(&str, Value)],
) -> (String, [bessemer_core::testing::CaptureHandle; 2]) {
    let path = temp_socket();
    let mut srv = Value::map().with("socket", path.as_str());
    let mut cli = Value::map()
        .with("socket", path.as_str())
        .with("role", "client");
    for (k, v) in extra {
        srv = srv.with(k, v.clone());
        cli = cli.with(k, v.clone());
    }
    create(h, "srv", &srv).unwrap();
    create(h, "cli", &cli).unwrap();
    let mut caps = Vec::new();
    for p in ["srv", "cli"] {
        let inc = format!("{p}_inc");
        h.add(&port_inc::CLASS, &inc, &Value::map().with("port", p))
            .unwrap();
        h.add(
            &port_out::CLASS,
            &format!("{p}_out"),
            &Value::map().with("port", p),
        )
        .unwrap();
        caps.push(h.capture(&inc, 0));
    }
    wait_until("the client to connect", || {
        link_up(h, "srv") && link_up(h, "cli")
    });
    // A client hands the server its empty receive buffers at its first poll.
    h.run_task("cli_inc", 0);
    (path, caps.try_into().ok().unwrap())
}

#[test]
fn frames_cross_both_ways_byte_for_byte_with_chained_buffers() {
    let mut h = Harness::new();
    let (_, [srv_cap, cli_cap]) = pair(&mut h, &[]);
    // 2048-byte buffers: 3000 and 9000 bytes take two and five descriptors.
    let sent = frames(&[60, 1514, 2048, 3000, 64, 9000]);
    h.inject("cli_out", 0, &sent);
    receive(&mut h, "srv_inc", &srv_cap, sent.len());
    assert_eq!(srv_cap.take_data(), sent);
    let back = frames(&[61, 4000, 1500]);
    h.inject("srv_out", 0, &back);
    receive(&mut h, "cli_inc", &cli_cap, back.len());
    assert_eq!(cli_cap.take_data(), back);
    // Many more than a ring holds, in batches, with the receiver draining between them.
    let many = frames(&[100; 64]);
    for round in 0..40 {
        h.inject("cli_out", 0, &many);
        receive(&mut h, "srv_inc", &srv_cap, 64);
        let got = srv_cap.take_data();
        assert_eq!(got.len(), 64, "round {round}");
        assert_eq!(got, many);
    }
    assert_eq!(counter(&h, "srv", "rx_packets"), 6 + 64 * 40);
    assert_eq!(counter(&h, "cli", "tx_packets"), 6 + 64 * 40);
    assert_eq!(counter(&h, "cli", "rx_packets"), 3);
    for c in [
        "rx_bad_desc",
        "bad_ring_index",
        "tx_ring_full",
        "rx_no_buffer",
    ] {
        assert_eq!(counter(&h, "srv", c) + counter(&h, "cli", c), 0, "{c}");
    }
    // Polling receivers: nobody asked to be interrupted.
    assert_eq!(counter(&h, "cli", "interrupts_sent"), 0);
    let (inc, _) = h.graph.ports().get("srv").unwrap().counts();
    assert_eq!(inc.dropped, 0);
    assert_eq!(h.in_use(), 0, "every packet buffer back in the pool");
}

#[test]
fn a_full_ring_drops_counted_and_frees_every_buffer() {
    let mut h = Harness::new();
    let (_, [srv_cap, _]) = pair(&mut h, &[("ring_size", Value::from(64u64))]);
    // The server does not receive: 64 fit, the rest of 3 batches of 64 are dropped.
    let f = frames(&[80; 64]);
    for _ in 0..3 {
        h.inject("cli_out", 0, &f);
    }
    assert_eq!(counter(&h, "cli", "tx_packets"), 64);
    assert_eq!(counter(&h, "cli", "tx_ring_full"), 128);
    let (_, out) = h.graph.ports().get("cli").unwrap().counts();
    assert_eq!(out.packets, 64);
    assert_eq!(h.in_use(), 0);
    receive(&mut h, "srv_inc", &srv_cap, 64);
    assert_eq!(srv_cap.take_data().len(), 64);
}

#[test]
fn peers_reconnect_and_a_second_client_is_refused() {
    let mut h = Harness::new();
    let (path, [srv_cap, _]) = pair(&mut h, &[]);
    // A second client for the same interface is told it is taken.
    let ch = Channel::new(bessemer_slice::daemon::connect(&path).unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    match ch.recv(deadline).unwrap().0 {
        Msg::Disconnect { reason, .. } => assert!(reason.contains("already connected"), "{reason}"),
        m => panic!("expected DISCONNECT, got {m:?}"),
    }
    // The client port goes; the server's link follows; a new client connects and works.
    h.graph.remove_module("cli_inc", &mut h.ctx).unwrap();
    h.graph.remove_module("cli_out", &mut h.ctx).unwrap();
    h.graph.ports().destroy("cli").unwrap();
    wait_until("the server to see the client leave", || !link_up(&h, "srv"));
    assert_eq!(counter(&h, "srv", "disconnects"), 1);
    create(
        &h,
        "cli2",
        &Value::map()
            .with("socket", path.as_str())
            .with("role", "client"),
    )
    .unwrap();
    h.add(
        &port_out::CLASS,
        "cli2_out",
        &Value::map().with("port", "cli2"),
    )
    .unwrap();
    wait_until("the new client", || {
        link_up(&h, "srv") && link_up(&h, "cli2")
    });
    let f = frames(&[70, 71]);
    h.inject("cli2_out", 0, &f);
    receive(&mut h, "srv_inc", &srv_cap, 2);
    assert_eq!(srv_cap.take_data(), f);
    assert_eq!(counter(&h, "srv", "connects"), 2);
}

/// A client made by hand (the way a buggy or hostile application would talk).
struct RogueClient {
    ch: Channel,
    deadline: Instant,
}

impl RogueClient {
    fn connect(path: &str) -> RogueClient {
        let ch = Channel::new(bessemer_slice::daemon::connect(path).unwrap());
        let deadline = Instant::now() + Duration::from_secs(5);
        match ch.recv(deadline).unwrap().0 {
            Msg::Hello(h) => assert_eq!(h.max_version, memif::VERSION),
            m => panic!("expected HELLO, got {m:?}"),
        }
        RogueClient { ch, deadline }
    }

    fn send(&self, m: Msg, fd: Option<&OwnedFd>) -> Msg {
        self.ch.send(&m, fd.map(|f| f.as_raw_fd())).unwrap();
        self.ch.recv(self.deadline).unwrap().0
    }

    fn init(&self, id: u32, secret: &str) -> Msg {
        self.send(
            Msg::Init(Init {
                version: memif::VERSION,
                id,
                mode: memif::MODE_ETHERNET,
                secret: secret.into(),
                name: "rogue".into(),
            }),
            None,
        )
    }
}

fn refused(m: Msg, why: &str) {
    match m {
        Msg::Disconnect { reason, .. } => assert!(reason.contains(why), "'{reason}' lacks '{why}'"),
        m => panic!("expected DISCONNECT ({why}), got {m:?}"),
    }
}

#[test]
fn wrong_id_secret_or_unsealed_memory_is_refused_by_name() {
    let h = Harness::new();
    let path = temp_socket();
    create(
        &h,
        "srv",
        &Value::map()
            .with("socket", path.as_str())
            .with("id", 7u64)
            .with("secret", "s3"),
    )
    .unwrap();
    refused(
        RogueClient::connect(&path).init(0, "s3"),
        "no interface with id 0",
    );
    refused(RogueClient::connect(&path).init(7, "nope"), "wrong secret");
    // A region that is not sealed against shrinking could be cut under the daemon.
    let c = RogueClient::connect(&path);
    assert_eq!(c.init(7, "s3"), Msg::Ack);
    // SAFETY: a plain memfd without seals.
    let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fresh descriptor.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: our descriptor.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 65536) }, 0);
    refused(
        c.send(
            Msg::AddRegion {
                index: 0,
                size: 65536,
            },
            Some(&fd),
        ),
        "sealed against shrinking",
    );
    // A region announced larger than its file.
    let c = RogueClient::connect(&path);
    assert_eq!(c.init(7, "s3"), Msg::Ack);
    let small = sys::memfd("small", 4096).unwrap();
    refused(
        c.send(
            Msg::AddRegion {
                index: 0,
                size: 1 << 20,
            },
            Some(&small),
        ),
        "smaller than",
    );
    assert_eq!(counter(&h, "srv", "handshake_errors"), 4);
    assert!(!link_up(&h, "srv"));
}

#[test]
fn descriptors_outside_the_region_and_runaway_indices_are_counted_not_followed() {
    let mut h = Harness::new();
    let path = temp_socket();
    create(&h, "srv", &Value::map().with("socket", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "srv"))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "srv"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = RogueClient::connect(&path);
    assert_eq!(c.init(0, ""), Msg::Ack);
    // One region: a C2S and an S2C ring of 16, then 32 buffers of 256 bytes.
    let size = 16u32;
    let rb = Ring::bytes(size);
    let len = 2 * rb + 32 * 256;
    let memfd = sys::memfd("rogue", len).unwrap();
    let map = sys::Mapping::new(memfd.as_raw_fd(), len).unwrap();
    // SAFETY: both rings lie inside the mapping, which outlives them (end of the test).
    let (c2s, s2c) = unsafe {
        (
            Ring::new(map.base(), size),
            Ring::new(map.base().add(rb), size),
        )
    };
    c2s.init(0);
    s2c.init(0);
    assert_eq!(
        c.send(
            Msg::AddRegion {
                index: 0,
                size: len as u64
            },
            Some(&memfd)
        ),
        Msg::Ack
    );
    for (i, c2s) in [true, false].into_iter().enumerate() {
        let ev = sys::eventfd().unwrap();
        let m = Msg::AddRing(AddRing {
            c2s,
            index: 0,
            region: 0,
            offset: (i * rb) as u32,
            log2_ring_size: 4,
            private_hdr_size: 0,
        });
        assert_eq!(c.send(m, Some(&ev)), Msg::Ack);
    }
    match c.send(
        Msg::Connect {
            if_name: "rogue0".into(),
        },
        None,
    ) {
        Msg::Connected { if_name } => assert_eq!(if_name, "srv"),
        m => panic!("expected CONNECTED, got {m:?}"),
    }
    wait_until("the link", || link_up(&h, "srv"));
    let buf = |k: u32| 2 * rb as u32 + k * 256;
    // SAFETY: buffer 0 lies inside the mapping.
    unsafe {
        std::ptr::copy_nonoverlapping([0xabu8; 60].as_ptr(), map.base().add(buf(0) as usize), 60)
    };
    let good = Desc {
        flags: 0,
        region: 0,
        length: 60,
        offset: buf(0),
    };
    c2s.set_desc(0, good);
    c2s.set_desc(
        1,
        Desc {
            offset: len as u32 - 10,
            ..good
        },
    ); // runs past the region
    c2s.set_desc(2, Desc { region: 3, ..good }); // a region that does not exist
    c2s.set_desc(3, Desc { length: 0, ..good });
    c2s.set_desc(4, good);
    c2s.head().store(5, Ordering::Release);
    receive(&mut h, "inc", &cap, 2);
    std::thread::sleep(Duration::from_millis(20));
    h.run_task("inc", 0);
    assert_eq!(cap.take_data(), vec![vec![0xab; 60]; 2]);
    assert_eq!(counter(&h, "srv", "rx_bad_desc"), 3);
    assert_eq!(
        c2s.tail().load(Ordering::Acquire),
        5,
        "bad slots are consumed too"
    );
    // A head far beyond the ring: nothing read, counted.
    c2s.head().store(5 + 1000, Ordering::Release);
    h.run_task("inc", 0);
    assert!(counter(&h, "srv", "bad_ring_index") >= 1);
    assert!(cap.take_data().is_empty());
    // Sending: S2C buffers the client offers, one of them outside its region.
    s2c.set_desc(
        0,
        Desc {
            flags: 0,
            region: 0,
            length: 256,
            offset: buf(16),
        },
    );
    s2c.set_desc(
        1,
        Desc {
            flags: 0,
            region: 0,
            length: 256,
            offset: len as u32,
        },
    );
    s2c.head().store(2, Ordering::Release);
    h.inject("out", 0, &frames(&[60, 60]));
    assert_eq!(s2c.tail().load(Ordering::Acquire), 1);
    assert_eq!(s2c.desc(0).length, 60);
    assert_eq!(counter(&h, "srv", "tx_bad_desc"), 1);
    assert_eq!(h.in_use(), 0, "no buffer leaked");
    // The client going away ends the link; the port is ready for the next.
    drop(c);
    wait_until("the link to go down", || !link_up(&h, "srv"));
}

#[test]
fn a_receiver_in_interrupt_mode_is_signalled() {
    let mut h = Harness::new();
    let (_, [srv_cap, _]) = pair(&mut h, &[("interrupt", Value::from(true))]);
    h.inject("cli_out", 0, &frames(&[60; 8]));
    assert!(counter(&h, "cli", "interrupts_sent") >= 1);
    receive(&mut h, "srv_inc", &srv_cap, 8);
    assert_eq!(srv_cap.take_data().len(), 8);
}

#[test]
fn bad_arguments_are_named() {
    let h = Harness::new();
    for (arg, want) in [
        (Value::map().with("role", "boss"), "role 'boss'"),
        (Value::map().with("ring_size", 1000u64), "ring_size 1000"),
        (Value::map().with("buffer_size", 100u64), "buffer_size 100"),
        (Value::map().with("secret", "x".repeat(30)), "secret"),
        (Value::map().with("sokcet", "/tmp/x"), "sokcet"),
        (
            Value::map()
                .with("role", "client")
                .with("socket", format!("/tmp/{}", "x".repeat(120)).as_str()),
            "must be 1..",
        ),
    ] {
        let e = create(&h, "bad", &arg).err().expect("refused");
        assert!(e.to_string().contains(want), "'{e}' lacks '{want}'");
    }
    // A file that is not a socket is not replaced.
    let f = std::env::temp_dir().join(format!("bessemer-memif-file-{}", std::process::id()));
    std::fs::write(&f, b"keep me").unwrap();
    let e = create(&h, "bad", &Value::map().with("socket", f.to_str().unwrap()))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&f).unwrap(), b"keep me");
    let _ = std::fs::remove_file(f);
}

fn create(
    h: &Harness,
    name: &str,
    arg: &Value,
) -> bessemer_core::Result<std::sync::Arc<bessemer_core::port::PortHandle>> {
    create_port(h, &DRIVER, name, arg)
}

//! `port_rx`: the receive paths of ports whose input comes from outside the daemon: a
//! UnixSocketPort's client (messages of any size, empty ones, disconnects) and a
//! PcapFilePort's input file (any bytes; replayed once, in a loop or at its recorded pace),
//! with what was received sent out again through the port's outgoing queue.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::packet::{DATA_CAPACITY, LARGE_DATA_CAPACITY};
use bessemer_core::port::{PortParams, RxQueue};
use bessemer_core::testing::Harness;
use bessemer_core::{PacketBatch, PoolCache, Value};

use crate::input::Input;

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn params(h: &Harness, name: &str) -> PortParams {
    PortParams {
        name: name.into(),
        num_inc_q: 0,
        num_out_q: 0,
        size_inc_q: 0,
        size_out_q: 0,
        pool: h.pool.clone(),
    }
}

/// The first byte picks the port: even a UnixSocketPort, odd a PcapFilePort.
pub fn port_rx(data: &[u8]) {
    let mut i = Input::new(data);
    if i.u8() & 1 == 0 {
        unix_socket(&mut i);
    } else {
        pcap_file(&mut i);
    }
}

// ---- UnixSocketPort ----------------------------------------------------------------------

/// A non-blocking SOCK_SEQPACKET client connected to abstract name `path` ('@...').
fn client(path: &str) -> OwnedFd {
    // SAFETY: plain syscalls on a fresh socket; the address is built in bounds.
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let s = OwnedFd::from_raw_fd(fd);
        let mut a: libc::sockaddr_un = std::mem::zeroed();
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, b) in a.sun_path.iter_mut().zip(path.bytes()) {
            *d = b as libc::c_char;
        }
        a.sun_path[0] = 0;
        let len = std::mem::size_of::<libc::sa_family_t>() + path.len();
        let r = libc::connect(
            s.as_raw_fd(),
            (&a as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        s
    }
}

fn wait_link(h: &Harness, name: &str, up: bool) {
    let port = h.graph.ports().get(name).expect("port");
    let t = Instant::now();
    while port.port().link_status().link_up != up {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "unix port link not {} within 5 s",
            if up { "up" } else { "down" }
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Receives once; checks each packet against the messages sent and not yet received.
fn recv_check(
    rx: &mut Box<dyn RxQueue>,
    cache: &mut PoolCache,
    max: usize,
    expect: &mut VecDeque<Vec<u8>>,
    held: &mut Vec<bessemer_core::Packet>,
) -> usize {
    let mut b = PacketBatch::new();
    let got = rx.recv(cache, &mut b, max);
    assert_eq!(got, b.len());
    for p in b.drain() {
        let want = expect.pop_front().expect("a packet nobody sent");
        assert_eq!(
            p.data(),
            &want[..],
            "received bytes differ from the message"
        );
        held.push(p);
    }
    got
}

/// Sends a one-byte marker and receives until it arrives (at most 2 s), so that the port
/// has read every message sent before it.
fn sync(
    c: &OwnedFd,
    rx: &mut Box<dyn RxQueue>,
    cache: &mut PoolCache,
    expect: &mut VecDeque<Vec<u8>>,
    held: &mut Vec<bessemer_core::Packet>,
) {
    let t = Instant::now();
    loop {
        // SAFETY: a valid one-byte buffer.
        let r = unsafe {
            libc::send(
                c.as_raw_fd(),
                b"!".as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r == 1 {
            expect.push_back(b"!".to_vec());
            break;
        }
        // The socket buffer is full: make room.
        recv_check(rx, cache, 32, expect, held);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the client cannot send"
        );
    }
    while !expect.is_empty() && t.elapsed() < Duration::from_secs(2) {
        recv_check(rx, cache, 32, expect, held);
    }
    assert!(expect.is_empty(), "{} messages never arrived", expect.len());
}

/// A UnixSocketPort (no idle throttling; confirm_connect from the input) and a client, then
/// up to 64 operations: the client sends messages (any length up to 12 000 bytes, empty ones
/// included), the port receives (a max from the input), the port sends what it holds back
/// to the client, the client reads, the client leaves (after the port read what it sent)
/// and comes back. Checked: every non-empty message that fits a buffer arrives intact and
/// in order, oversize and empty ones are counted as driver drops, and every buffer comes back.
fn unix_socket(i: &mut Input) {
    let confirm = i.u8() & 1 == 1;
    let h = Harness::new();
    let path = format!(
        "@bessemer-fuzz-unix-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    h.graph
        .ports()
        .create(
            &bessemer_drivers::unix_socket_port::DRIVER,
            params(&h, "u0"),
            &Value::map()
                .with("path", path.as_str())
                .with("min_rx_interval_ns", -1i64)
                .with("confirm_connect", confirm),
        )
        .expect("UnixSocketPort");
    let handle = h.graph.ports().get("u0").expect("port u0");
    let mut rx = handle.port().rx_queue(0).expect("rx");
    let mut tx = handle.port().tx_queue(0).expect("tx");
    let mut cache = h.pool.cache();
    let mut c = client(&path);
    wait_link(&h, "u0", true);
    let mut expect: VecDeque<Vec<u8>> = VecDeque::new();
    let mut dropped = 0u64;
    let mut held = Vec::new();
    let mut buf = vec![0u8; 16384];
    for _ in 0..64 {
        if i.is_empty() {
            break;
        }
        let op = i.u8();
        match op % 5 {
            0 | 1 => {
                for _ in 0..=op / 32 {
                    let len = if op.is_multiple_of(5) {
                        i.u16() as usize % 12000
                    } else {
                        i.u8() as usize
                    };
                    let fill = i.u8();
                    let msg = vec![fill; len];
                    // SAFETY: a valid buffer of msg.len() bytes.
                    let r = unsafe {
                        libc::send(
                            c.as_raw_fd(),
                            msg.as_ptr().cast(),
                            msg.len(),
                            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                    if r < 0 {
                        break;
                    }
                    // Oversize and empty messages are dropped and counted by the port.
                    if len > DATA_CAPACITY || len == 0 {
                        dropped += 1;
                    } else {
                        expect.push_back(msg);
                    }
                }
            }
            2 => {
                let max = 1 + (op as usize / 5) % 32;
                recv_check(&mut rx, &mut cache, max, &mut expect, &mut held);
            }
            3 => {
                let mut b = PacketBatch::new();
                for p in held.drain(..held.len().min(1 + op as usize % 32)) {
                    assert!(b.push(p).is_ok());
                }
                let n = b.len();
                let s = tx.send(&mut cache, &mut b);
                assert_eq!(s + b.len(), n);
                cache.free_bulk(&mut b);
                // The client reads what came (and the confirmation, if any).
                for _ in 0..64 {
                    // SAFETY: a valid buffer.
                    let r = unsafe {
                        libc::recv(
                            c.as_raw_fd(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                            libc::MSG_DONTWAIT,
                        )
                    };
                    if r <= 0 {
                        break;
                    }
                }
            }
            _ => {
                // The port reads everything first: a departed client's unread messages are
                // dropped after a grace period, which this target does not model.
                sync(&c, &mut rx, &mut cache, &mut expect, &mut held);
                drop(c);
                wait_link(&h, "u0", false);
                c = client(&path);
                wait_link(&h, "u0", true);
            }
        }
    }
    sync(&c, &mut rx, &mut cache, &mut expect, &mut held);
    // Oversize and empty messages are counted once the port has read past them.
    assert_eq!(handle.port().driver_drops().0, dropped, "dropped count");
    let _ = handle.port().desc();
    for p in held {
        cache.free(p);
    }
    drop(c);
    drop((rx, tx));
    cache.flush_all();
    drop(cache);
    drop(handle);
    h.graph.ports().destroy("u0").expect("destroy u0");
}

// ---- PcapFilePort ------------------------------------------------------------------------

fn temp_file(what: &str) -> std::path::PathBuf {
    std::env::temp_dir()
        .join(format!(
            "bessemer-fuzz-{what}-{}-{:?}.pcap",
            std::process::id(),
            std::thread::current().id()
        ))
        .to_path_buf()
}

/// A PcapFilePort reading the rest of the input as its file (repeat and timing from one
/// byte) and writing to another file: creating it answers a port or an error; the frames
/// received (bounded rounds) are the file's frames, in order, cut to the largest buffer;
/// each is sent to the output file, which then reads back as a capture of the frames sent.
fn pcap_file(i: &mut Input) {
    let flags = i.u8();
    let (repeat, timing) = (flags & 1 == 1, flags & 2 == 2);
    let file = i.rest();
    let rx_path = temp_file("rx");
    let tx_path = temp_file("tx");
    std::fs::write(&rx_path, file).expect("write the input file");
    let h = Harness::new();
    let created = h.graph.ports().create(
        &bessemer_drivers::pcap_file_port::DRIVER,
        params(&h, "f0"),
        &Value::map()
            .with("rx_file", rx_path.to_string_lossy().as_ref())
            .with("tx_file", tx_path.to_string_lossy().as_ref())
            .with("repeat", repeat)
            .with("timing", timing),
    );
    let _ = std::fs::remove_file(&rx_path);
    if created.is_err() {
        // A file the port refuses is one its reader refuses or one not of Ethernet frames.
        let ok = bessemer_core::pcap::read(file).ok();
        assert!(
            ok.is_none_or(|f| f
                .iter()
                .any(|f| f.linktype != bessemer_core::pcap::LINKTYPE_ETHERNET)),
            "a readable Ethernet capture refused"
        );
        let _ = std::fs::remove_file(&tx_path);
        return;
    }
    let want = bessemer_core::pcap::read(file).expect("the port read it");
    let handle = h.graph.ports().get("f0").expect("port f0");
    let mut rx = handle.port().rx_queue(0).expect("rx");
    let mut tx = handle.port().tx_queue(0).expect("tx");
    let mut cache = h.pool.cache();
    let mut got = 0usize;
    let mut sent = 0usize;
    for _ in 0..16 {
        let mut b = PacketBatch::new();
        let n = rx.recv(&mut cache, &mut b, 32);
        assert_eq!(n, b.len());
        for p in b.pkts() {
            let f = &want[got % want.len().max(1)];
            let stored = &file[f.data.clone()];
            let len = stored.len().min(LARGE_DATA_CAPACITY);
            assert_eq!(
                p.data(),
                &stored[..len],
                "frame {got} differs from the file's"
            );
            got += 1;
        }
        let offered = b.len();
        let s = tx.send(&mut cache, &mut b);
        assert_eq!(s + b.len(), offered);
        sent += s;
        cache.free_bulk(&mut b);
        if n == 0 && !timing {
            break;
        }
    }
    if !repeat && !timing {
        assert_eq!(got, want.len().min(16 * 32), "frames received");
    }
    let _ = handle.port().desc();
    drop((rx, tx));
    cache.flush_all();
    drop(cache);
    drop(handle);
    h.graph.ports().destroy("f0").expect("destroy f0");
    let out = std::fs::read(&tx_path).expect("the output file");
    let _ = std::fs::remove_file(&tx_path);
    let frames = bessemer_core::pcap::read(&out).expect("the output file reads back");
    assert_eq!(frames.len(), sent, "records in the output file");
}

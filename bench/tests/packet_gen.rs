//! make bench-ports' second generator (bench/src/packet_gen.rs, an AF_PACKET TX ring): the
//! frames it puts on a veth are the frames it was given, byte for byte (the virtio header in
//! front of each slot's frame does not reach the wire), every one of them in turn. The
//! namespaces are the test's own (A: a0 —veth— b0: B). Needs root.

#[path = "../src/packet_gen.rs"]
mod packet_gen;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use bessemer_drivers::netns;
use packet_gen::TxRing;

fn ip(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {}", args.join(" "));
}

/// Two namespaces joined by a veth pair; removed on drop (also when the test fails).
struct Topo(String);

impl Topo {
    fn new() -> Topo {
        let t = Topo(format!("pgen{}", std::process::id() % 100000));
        let (a, b) = (t.ns("a"), t.ns("b"));
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        ip(&[
            "-n", &a, "link", "add", "a0", "type", "veth", "peer", "name", "b0", "netns", &b,
        ]);
        ip(&["-n", &a, "link", "set", "a0", "up"]);
        ip(&["-n", &b, "link", "set", "b0", "up"]);
        t
    }

    fn ns(&self, n: &str) -> String {
        format!("{}{n}", self.0)
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for n in ["a", "b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// A receiving AF_PACKET socket on `ifname` (all protocols).
fn raw_socket(ifname: &str) -> OwnedFd {
    let idx = netns::ifindex(ifname).expect("ifindex") as i32;
    // SAFETY: plain socket call; owned right after.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        )
    };
    assert!(fd >= 0, "AF_PACKET socket");
    // SAFETY: a fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = idx;
    // SAFETY: a valid sockaddr_ll.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "bind to {ifname}");
    fd
}

/// Frame `i` of `len` bytes: broadcast, a local experimental EtherType, `i`, a pattern.
fn frame(i: usize, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5]);
    f.extend_from_slice(&(i as u32).to_be_bytes());
    f.extend((0..len - 18).map(|k| (k * 7 + i) as u8));
    f
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces, veth, AF_PACKET")]
fn tx_ring_puts_the_given_frames_on_the_wire_in_turn() {
    let t = Topo::new();
    // The smallest and largest frames bench-ports sends, and one between.
    let frames = vec![frame(0, 60), frame(1, 1514), frame(2, 700)];
    let rx = netns::run_in(&t.ns("b"), || Ok(raw_socket("b0"))).unwrap();
    let fr = frames.clone();
    let mut ring = netns::run_in(&t.ns("a"), move || {
        TxRing::open("a0", &fr).map_err(|e| bessemer_core::Error::new(libc::EIO, e))
    })
    .expect("TX ring");
    let mut seen = [0usize; 3];
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    // A burst at a time, drained before the next, until 300 of ours came (at most 10 s).
    while seen.iter().sum::<usize>() < 300 && start.elapsed() < Duration::from_secs(10) {
        let handed = ring.send_burst().expect("send");
        assert!(handed <= 256, "{handed} frames in one burst");
        let drain = Instant::now();
        while drain.elapsed() < Duration::from_millis(50) {
            // SAFETY: receives into our buffer.
            let r = unsafe {
                libc::recv(
                    rx.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            // Other frames (IPv6 neighbour discovery of the new link) are not ours.
            if r >= 14 && buf[12..14] == [0x88, 0xb5] {
                let got = &buf[..r as usize];
                let i = frames
                    .iter()
                    .position(|f| f[..] == *got)
                    .unwrap_or_else(|| panic!("a frame arrived changed: {got:02x?}"));
                seen[i] += 1;
            }
        }
    }
    assert!(
        seen.iter().sum::<usize>() >= 300 && seen.iter().all(|&n| n >= 50),
        "frames received of each: {seen:?}"
    );
}

#[test]
fn a_frame_too_long_for_a_slot_is_refused_with_its_reason() {
    let e = TxRing::open("lo", &[frame(0, 60), frame(1, 2040)])
        .err()
        .expect("refused");
    assert!(e.contains("frames must be 14..=2006 bytes"), "{e}");
    let e = TxRing::open("lo", &[]).err().expect("refused");
    assert!(e.contains("frames must be"), "{e}");
}

//! Smoke test of NetSlice's comparison forwarders (bench/src/netslice_fwd.rs): 1000 frames
//! through each of pcap, pcap-mmap and mmsg between namespaces the test makes
//! (A: a0 —veth— a1 [forwarder in F] b1 —veth— b0: B), one at a time, each checked byte for
//! byte at the far end, and the forwarder's counters. Needs root.

#[path = "../src/netslice_fwd.rs"]
#[allow(dead_code)]
mod netslice_fwd;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bessemer_drivers::netns;
use netslice_fwd::{Api, Forwarder};

const FRAMES: usize = 1000;

fn ip(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {}", args.join(" "));
}

/// The three namespaces and two veth pairs; removed on drop (also when the test fails).
struct Topo(String);

impl Topo {
    fn new(tag: &str) -> Topo {
        let p = format!("nsf{}{tag}", std::process::id() % 100000);
        let t = Topo(p.clone());
        for n in ["a", "f", "b"] {
            ip(&["netns", "add", &format!("{p}{n}")]);
        }
        let (a, f, b) = (format!("{p}a"), format!("{p}f"), format!("{p}b"));
        ip(&[
            "-n", &a, "link", "add", "a0", "type", "veth", "peer", "name", "a1", "netns", &f,
        ]);
        ip(&[
            "-n", &b, "link", "add", "b0", "type", "veth", "peer", "name", "b1", "netns", &f,
        ]);
        for (ns, l) in [(&a, "a0"), (&f, "a1"), (&f, "b1"), (&b, "b0")] {
            ip(&["-n", ns, "link", "set", l, "up"]);
        }
        t
    }
    fn ns(&self, n: &str) -> String {
        format!("{}{n}", self.0)
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for n in ["a", "f", "b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

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

/// Frame `i`: broadcast, a local experimental EtherType, then `i` and a pattern.
fn frame(i: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5]);
    f.extend_from_slice(&(i as u32).to_be_bytes());
    f.extend((0..(46 + i % 200)).map(|k| (k * 7 + i) as u8));
    f
}

fn forwards_1000(api: Api, tag: &str) {
    let t = Topo::new(tag);
    let fwd = netns::run_in(&t.ns("f"), || {
        Forwarder::start(api, "a1", "b1", 0, Duration::from_secs(60))
            .map_err(|e| bessemer_core::Error::new(libc::EIO, e))
    })
    .expect("forwarder");
    let tx = netns::run_in(&t.ns("a"), || Ok(raw_socket("a0"))).unwrap();
    let rx = netns::run_in(&t.ns("b"), || Ok(raw_socket("b0"))).unwrap();
    let mut buf = [0u8; 2048];
    let mut got = 0;
    for i in 0..FRAMES {
        let f = frame(i);
        // SAFETY: sends our buffer on a bound socket.
        let w = unsafe {
            libc::send(
                tx.as_raw_fd(),
                f.as_ptr() as *const libc::c_void,
                f.len(),
                0,
            )
        };
        assert_eq!(w, f.len() as isize, "send frame {i}");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
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
                std::thread::sleep(Duration::from_micros(20));
                continue;
            }
            // Other frames (IPv6 neighbour discovery of the new links) are not ours.
            if r >= 14 && buf[12..14] == [0x88, 0xb5] {
                assert_eq!(&buf[..r as usize], &f[..], "frame {i} arrived changed");
                got += 1;
                break;
            }
        }
    }
    let stats = fwd.stats.clone();
    fwd.finish().expect("forwarder ended without error");
    assert_eq!(got, FRAMES, "{api:?}: frames through the forwarder");
    assert!(
        stats.tx.load(Ordering::Relaxed) >= FRAMES as u64,
        "{api:?}: tx counter"
    );
    assert!(
        stats.rx.load(Ordering::Relaxed) >= FRAMES as u64,
        "{api:?}: rx counter"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces, veth, AF_PACKET")]
fn pcap_forwards_1000_frames() {
    forwards_1000(Api::Pcap, "p");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces, veth, AF_PACKET")]
fn pcap_mmap_forwards_1000_frames() {
    forwards_1000(Api::PcapMmap, "m");
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces, veth, AF_PACKET")]
fn mmsg_forwards_1000_frames() {
    forwards_1000(Api::Mmsg(8), "s");
}

#[test]
fn bad_batch_is_refused_with_its_reason() {
    let e = Forwarder::start(Api::Mmsg(0), "lo", "lo", 0, Duration::from_secs(1)).err();
    assert!(e.is_some_and(|m| m.contains("mmsg batch 0")));
}

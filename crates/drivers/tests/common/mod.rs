//! Test hosts for driver tests: network namespaces joined by veth pairs, made by the test
//! and removed when the guard drops (also when the test fails). Names carry the process id
//! so parallel test runs never collide. Needs root; tests skip (with a message) without it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use bessemer_core::{Error, Result};
use bessemer_drivers::netns;
use std::sync::atomic::{AtomicUsize, Ordering};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Runs a command, panicking with its output if it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command inside namespace `ns`.
pub fn sh_in(ns: &str, args: &[&str]) -> String {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    sh(&v)
}

/// A unique short name (interface names are limited to 15 bytes).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}{}",
        std::process::id() % 100_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A namespace removed on drop.
pub struct Netns {
    /// Its name (under /var/run/netns).
    pub name: String,
}

impl Netns {
    /// Creates a fresh namespace with loopback up.
    pub fn new(prefix: &str) -> Netns {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        sh_in(&ns.name, &["ip", "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A veth pair: `outer` stays where the switch runs (the daemon's namespace, or `outer_ns`),
/// `inner` is moved into `host` with address `addr` (CIDR). Removed on drop.
pub struct Link {
    /// The switch-side interface.
    pub outer: String,
    /// The host-side interface.
    pub inner: String,
}

impl Link {
    /// Creates the pair, moves `inner` into `host`, brings both up and gives `inner` `addr`.
    pub fn new(host: &Netns, addr: &str) -> Link {
        let outer = unique("bo");
        let inner = unique("bi");
        sh(&[
            "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        let l = Link {
            outer: outer.clone(),
            inner: inner.clone(),
        };
        sh(&["ip", "link", "set", &inner, "netns", &host.name]);
        sh(&["ip", "link", "set", &outer, "up"]);
        sh_in(&host.name, &["ip", "link", "set", &inner, "up"]);
        sh_in(&host.name, &["ip", "addr", "add", addr, "dev", &inner]);
        l
    }

    /// Sets the MTU on both ends (`inner` lives in `host`).
    pub fn set_mtu(&self, host: &Netns, mtu: u32) {
        let m = mtu.to_string();
        sh(&["ip", "link", "set", &self.outer, "mtu", &m]);
        sh_in(&host.name, &["ip", "link", "set", &self.inner, "mtu", &m]);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Deleting one end removes both (also after the namespace went away).
        let _ = Command::new("ip")
            .args(["link", "del", &self.outer])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Two hosts, each in its own namespace on its own veth, 10.X.0.1/24 and 10.X.0.2/24, with
/// the switch-side ends in the test's namespace. The switch under test joins them.
pub struct TwoHosts {
    /// Host A (address `a_ip`).
    pub a: Netns,
    /// Host B (address `b_ip`).
    pub b: Netns,
    /// A's link (`outer` is the switch port).
    pub la: Link,
    /// B's link.
    pub lb: Link,
    /// A's address.
    pub a_ip: String,
    /// B's address.
    pub b_ip: String,
}

impl TwoHosts {
    /// Builds the topology on subnet 10.`subnet`.0.0/24.
    pub fn new(subnet: u8) -> TwoHosts {
        let a = Netns::new("bha");
        let b = Netns::new("bhb");
        let a_ip = format!("10.{subnet}.0.1");
        let b_ip = format!("10.{subnet}.0.2");
        let la = Link::new(&a, &format!("{a_ip}/24"));
        let lb = Link::new(&b, &format!("{b_ip}/24"));
        TwoHosts {
            a,
            b,
            la,
            lb,
            a_ip,
            b_ip,
        }
    }
}

/// An io::Result as a Bessemer Result.
pub fn io<T>(r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| Error::new(libc::EIO, e.to_string()))
}

/// `n` pseudo-random bytes (xorshift), the same every run.
pub fn pattern(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// FNV-1a hash of `b`.
pub fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Sends `data` over TCP from host A to host B; returns what B received (bounded in time).
pub fn tcp_transfer(h: &TwoHosts, data: &[u8]) -> Vec<u8> {
    let b_addr: SocketAddr = format!("{}:5201", h.b_ip).parse().unwrap();
    tcp_transfer_to(h, b_addr, data)
}

/// As `tcp_transfer`, to `b_addr` (an address of host B).
pub fn tcp_transfer_to(h: &TwoHosts, b_addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    tcp_between(&h.a.name, &h.b.name, b_addr, data)
}

/// Sends `data` over TCP from namespace `a` to `b_addr` in namespace `b`; returns what
/// arrived (bounded in time).
pub fn tcp_between(a: &str, b: &str, b_addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let listener = netns::run_in(b, || io(TcpListener::bind(b_addr))).unwrap();
    let server = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        listener.set_nonblocking(true)?;
        let t = Instant::now();
        let (mut s, _) = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if t.elapsed() > Duration::from_secs(20) {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut got = Vec::new();
        s.read_to_end(&mut got)?;
        Ok(got)
    });
    let mut c = netns::run_in(a, || {
        io(TcpStream::connect_timeout(&b_addr, Duration::from_secs(10)))
    })
    .unwrap();
    c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(data).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    server.join().unwrap().expect("server received the stream")
}

/// Waits (bounded: 10 s) until `f` holds; interface state such as carrier changes arrives
/// asynchronously, later still on a loaded machine.
#[allow(dead_code)]
pub fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(10) {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

/// Creates a port of `driver` named `name` in the harness's port table, with the harness's
/// pool and the driver's default queues.
pub fn create_port(
    h: &bessemer_core::testing::Harness,
    driver: &'static bessemer_core::port::PortDriver,
    name: &str,
    arg: &bessemer_core::Value,
) -> Result<std::sync::Arc<bessemer_core::port::PortHandle>> {
    h.graph.ports().create(
        driver,
        bessemer_core::port::PortParams {
            name: name.into(),
            num_inc_q: 0,
            num_out_q: 0,
            size_inc_q: 0,
            size_out_q: 0,
            pool: h.pool.clone(),
        },
        arg,
    )
}

/// Distinct Ethernet-looking frames of the given sizes.
pub fn frames(sizes: &[usize]) -> Vec<Vec<u8>> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut f: Vec<u8> = (0..n).map(|j| (j * 7 + i * 13) as u8).collect();
            f[..14].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00]);
            f
        })
        .collect()
}

/// Waits until `f` holds, polling every 2 ms; fails the test after 10 s naming `what`.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The link state of port `port` of the harness.
pub fn link_up(h: &bessemer_core::testing::Harness, port: &str) -> bool {
    h.graph
        .ports()
        .get(port)
        .unwrap()
        .port()
        .link_status()
        .link_up
}

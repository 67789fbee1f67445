//! VPort: a virtual Ethernet interface for the Linux host or a container (BESS's `VPort`).
//!
//! BESS backs its VPort with its own kernel module; Bessemer uses a TAP device
//! (/dev/net/tun, `IFF_TAP | IFF_NO_PI`, `IFF_MULTI_QUEUE` when it has more than one queue:
//! one non-blocking tap fd per queue). What the host sends on the interface is what the
//! port receives; what the port sends appears on the interface as received by the host.
//!
//! The interface is created in the daemon's namespace under a temporary name and, when the
//! argument names a namespace, moved there and renamed to `ifname` in one step (so a same
//! named interface in the daemon's namespace does not matter). Addresses are assigned and the
//! link brought up with the `ip` command (iproute2): the control path is not hot, and it
//! keeps netlink message building out of this file. Closing the last tap fd (destroying the
//! port) removes the interface, in whichever namespace it lives.
//!
//! Offloads (`IFF_VNET_HDR`): every frame comes with a virtio-net header, and the tap
//! announces checksum and TCP/UDP segmentation offload (`TUNSETOFFLOAD`), so the host stack
//! hands the port 64 KiB super-frames and partial checksums instead of segmenting and
//! checksumming each packet itself; one read then brings up to 64 KiB. The port cuts them
//! into wire-size segments and finishes checksums in software (shared with AFPacketPort, see
//! `vnet`), so what enters the pipeline is always ordinary frames. Frames it sends go out
//! with an empty header (complete, nothing to offload).
//!
//! With `loopback`, frames sent to the port come back in on it (as BESS's module does it,
//! before the host sees them); the interface still exists and what the host sends still
//! arrives.

use std::ffi::c_void;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bessemer_core::packet::{DATA_CAPACITY, LARGE_DATA_CAPACITY};
use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, Packet, PacketBatch, PacketPool, PoolCache, Result, Value};
use crossbeam_queue::ArrayQueue;

use crate::ifctl;
use crate::netns;
use crate::vnet::{
    self, Gso, Vnet, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4, VNET_HDR_LEN,
};

// TUNSETOFFLOAD and its flags (linux/if_tun.h).
const TUNSETOFFLOAD: libc::Ioctl = 0x4004_54d0;
const TUN_F_CSUM: u64 = 0x01;
const TUN_F_TSO4: u64 = 0x02;
const TUN_F_TSO6: u64 = 0x04;
const TUN_F_USO4: u64 = 0x20;
const TUN_F_USO6: u64 = 0x40;
/// Bytes past a default buffer a read may bring: a whole super-frame (the IP length limit
/// plus link headers).
const SPILL: usize = 65536 + 64;

/// The VPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "VPort",
    name_template: "vport",
    help: "virtual Ethernet interface for the host or a container namespace (a TAP device)",
    arg_type: "VPortArg",
    arg_doc: &[
        "ifname: string — interface name (default: the port name; at most 15 bytes)",
        "docker: string — not supported (give container_pid or netns instead)",
        "container_pid: int64 — put the interface into this process's network namespace",
        "netns: string — put the interface into this namespace (a name under /var/run/netns, or a path)",
        "rxq_cpus: [int64] — accepted for compatibility, one per outgoing queue (no effect on a TAP)",
        "tx_tci: uint64 — push an 802.1Q tag with this TCI on every frame the host sends",
        "tx_outer_tci: uint64 — push an outer 802.1ad tag with this TCI on every frame the host sends",
        "loopback: bool — frames sent to the port come back in on it (tagged as host frames) instead of reaching the host",
        "ip_addrs: [string] — addresses (CIDR) to give the interface, e.g. 10.0.0.1/24",
    ],
    create,
};

const MSG: &str = "VPortArg";

/// What the argument asks for, checked before anything is created.
struct Config {
    ifname: String,
    /// Namespace as `netns::run_in` takes it ("" = the daemon's own).
    netns: String,
    /// The VLAN tags to push on received frames, outermost first.
    tags: Vec<u8>,
    ip_addrs: Vec<String>,
    loopback: bool,
    /// Frames the kernel may queue for us (`txqueuelen`), if asked.
    qlen: Option<usize>,
    nfds: usize,
    num_out_q: usize,
}

fn parse(p: &PortParams, arg: &Value) -> Result<Config> {
    let mut a = Args::new(arg, MSG)?;
    let ifname = match a.str("ifname")?.filter(|s| !s.is_empty()) {
        Some(n) => {
            check_ifname(n).map_err(|why| Error::invalid(format!("{MSG}.ifname: {why}")))?;
            n.to_string()
        }
        None => {
            check_ifname(&p.name).map_err(|why| {
                Error::invalid(format!(
                    "{MSG}.ifname not given and the port name cannot be an interface name: {why}"
                ))
            })?;
            p.name.clone()
        }
    };
    let docker = a.str("docker")?;
    let pid = a
        .int("container_pid", 0, i32::MAX as i64)?
        .filter(|&p| p != 0);
    let ns = a.str("netns")?.filter(|s| !s.is_empty());
    let given = docker.is_some() as u8 + pid.is_some() as u8 + ns.is_some() as u8;
    if given > 1 {
        return Err(Error::invalid(format!(
            "{MSG}: give only one of docker, container_pid and netns"
        )));
    }
    if docker.is_some() {
        return Err(Error::unsupported(format!(
            "{MSG}.docker: Docker containers are not supported; give the container's \
             process id as container_pid (docker inspect --format '{{{{.State.Pid}}}}' NAME) \
             or its namespace as netns"
        )));
    }
    let netns = if let Some(pid) = pid {
        let path = format!("/proc/{pid}/ns/net");
        if std::fs::metadata(&path).is_err() {
            return Err(Error::new(
                libc::ESRCH,
                format!("{MSG}.container_pid: no process {pid} ({path} does not exist)"),
            ));
        }
        path
    } else if let Some(ns) = ns {
        let path = netns::path_of(ns);
        if let Err(e) = std::fs::metadata(&path) {
            return Err(Error::not_found(format!(
                "{MSG}.netns: network namespace '{ns}' does not exist ({path}: {e})"
            )));
        }
        ns.to_string()
    } else {
        String::new()
    };

    let num_out_q = p.num_out_q.max(1);
    let cpus = a.list("rxq_cpus")?;
    if !cpus.is_empty() && cpus.len() != num_out_q {
        return Err(Error::invalid(format!(
            "{MSG}.rxq_cpus: must name one core per outgoing queue ({num_out_q}), got {}",
            cpus.len()
        )));
    }
    for (i, c) in cpus.iter().enumerate() {
        if c.as_i64().is_none_or(|c| c < 0) {
            return Err(Error::invalid(format!(
                "{MSG}.rxq_cpus[{i}]: {c:?} is not a core number"
            )));
        }
    }

    let tci = a.uint("tx_tci", 0xffff)?.unwrap_or(0) as u16;
    let outer = a.uint("tx_outer_tci", 0xffff)?.unwrap_or(0) as u16;
    let mut tags = Vec::new();
    if outer != 0 {
        tags.extend_from_slice(&[0x88, 0xa8]);
        tags.extend_from_slice(&outer.to_be_bytes());
    }
    if tci != 0 {
        tags.extend_from_slice(&[0x81, 0x00]);
        tags.extend_from_slice(&tci.to_be_bytes());
    }

    let loopback = a.bool("loopback")?.unwrap_or(false);

    let mut ip_addrs = Vec::new();
    for (i, v) in a.list("ip_addrs")?.iter().enumerate() {
        let s = v.as_str().ok_or_else(|| {
            Error::invalid(format!("{MSG}.ip_addrs[{i}]: expected a string, got {v:?}"))
        })?;
        check_cidr(s).map_err(|why| Error::invalid(format!("{MSG}.ip_addrs[{i}]: {why}")))?;
        ip_addrs.push(s.to_string());
    }
    a.finish()?;

    Ok(Config {
        ifname,
        netns,
        tags,
        ip_addrs,
        loopback,
        qlen: (p.size_inc_q > 0).then_some(p.size_inc_q),
        nfds: p.num_inc_q.max(1),
        num_out_q,
    })
}

/// Checks a Linux interface name the way the kernel does (`dev_valid_name`).
fn check_ifname(n: &str) -> std::result::Result<(), String> {
    if n.is_empty() || n.len() >= libc::IFNAMSIZ {
        return Err(format!(
            "'{n}' is not a valid interface name (1..{} bytes)",
            libc::IFNAMSIZ - 1
        ));
    }
    // '%' would make the kernel pick a numbered name ("vp%d" -> "vp0") we would not know.
    if n == "." || n == ".." || n.bytes().any(|b| b"/:%".contains(&b) || b <= b' ') {
        return Err(format!(
            "'{n}' is not a valid interface name (no '/', ':', '%', blanks, '.' or '..')"
        ));
    }
    Ok(())
}

/// Checks "ADDRESS[/PREFIX]" (IPv4 or IPv6).
fn check_cidr(s: &str) -> std::result::Result<(), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| {
        format!("'{s}' is not an IP address with a prefix length (e.g. 10.0.0.1/24)")
    })?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if let Some(l) = len {
        match l.parse::<u32>() {
            Ok(l) if l <= max => {}
            _ => return Err(format!("'{s}': prefix length must be 0..{max}")),
        }
    }
    Ok(())
}

static TMP_SEQ: AtomicUsize = AtomicUsize::new(0);

fn create(p: &PortParams, arg: &Value) -> Result<NewPort> {
    let cfg = parse(p, arg)?;
    let exists = netns::run_in(&cfg.netns, || Ok(netns::ifindex(&cfg.ifname).is_ok()))?;
    if exists {
        let place = if cfg.netns.is_empty() {
            "the daemon's namespace".to_string()
        } else {
            format!("namespace '{}'", cfg.netns)
        };
        return Err(Error::exists(format!(
            "{MSG}.ifname: an interface named '{}' already exists in {place}",
            cfg.ifname
        )));
    }
    // Moving renames the interface, so its name in the daemon's namespace is a throwaway one;
    // it must be free, or TUNSETIFF would attach to someone else's persistent TAP.
    let first_name = if cfg.netns.is_empty() {
        cfg.ifname.clone()
    } else {
        (0..64)
            .map(|_| {
                format!(
                    "bvp{}_{}",
                    std::process::id() % 100_000,
                    TMP_SEQ.fetch_add(1, Ordering::Relaxed) % 100_000
                )
            })
            .find(|n| netns::ifindex(n).is_err())
            .ok_or_else(|| Error::exists("no free temporary interface name (bvp<pid>_<n>)"))?
    };
    // Dropping `fds` on any error below removes the interface again.
    let (fds, offloads) = open_tap(&first_name, cfg.nfds)?;
    let mac = hwaddr(&first_name).unwrap_or([0; 6]);
    if !cfg.netns.is_empty() {
        let path = netns::path_of(&cfg.netns);
        ip(&[
            "link",
            "set",
            "dev",
            &first_name,
            "netns",
            &path,
            "name",
            &cfg.ifname,
        ])
        .map_err(|e| {
            Error::new(
                e.code,
                format!(
                    "cannot move the interface into namespace '{}': {}",
                    cfg.netns, e.msg
                ),
            )
        })?;
    }
    netns::run_in(&cfg.netns, || {
        for addr in &cfg.ip_addrs {
            ip(&["addr", "add", addr, "dev", &cfg.ifname]).map_err(|e| {
                Error::new(
                    e.code,
                    format!(
                        "{MSG}.ip_addrs: cannot add {addr} to {}: {}",
                        cfg.ifname, e.msg
                    ),
                )
            })?;
        }
        if let Some(q) = cfg.qlen {
            ip(&[
                "link",
                "set",
                "dev",
                &cfg.ifname,
                "txqueuelen",
                &q.to_string(),
            ])?;
        }
        ip(&["link", "set", "dev", &cfg.ifname, "up"])
    })?;
    tracing::info!(
        ifname = %cfg.ifname,
        netns = %cfg.netns,
        queues = cfg.nfds,
        "VPort: TAP interface created"
    );
    // BESS's module turns a loopback queue around before the host sees it; here the turn
    // happens in the driver: one lock-free ring per incoming queue, filled by PortOut.
    let rings = cfg.loopback.then(|| {
        let slots = if p.size_out_q > 0 { p.size_out_q } else { 256 };
        Arc::new(LoopRings {
            rings: (0..cfg.nfds).map(|_| ArrayQueue::new(slots)).collect(),
            pool: p.pool.clone(),
        })
    });
    let port = VPort {
        fds: fds.into(),
        rings,
        ifname: cfg.ifname,
        netns: cfg.netns,
        mac,
        tags: cfg.tags,
        rx_dropped: Arc::new(AtomicU64::new(0)),
        offloads,
        segmented: Arc::new(AtomicU64::new(0)),
    };
    Ok(NewPort {
        port: Box::new(port),
        num_inc_q: cfg.nfds,
        num_out_q: cfg.num_out_q,
    })
}

/// Opens `n` queues of TAP interface `name` (created by the first), non-blocking, with
/// virtio-net headers; turns on the offloads the port handles and says which it got.
fn open_tap(name: &str, n: usize) -> Result<(Vec<OwnedFd>, &'static str)> {
    let mut fds = Vec::with_capacity(n);
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
    if n > 1 {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    for q in 0..n {
        // SAFETY: plain syscall with a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(netns::os_error("cannot open /dev/net/tun"));
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut r = ifctl::ifreq(name);
        r.ifr_ifru.ifru_flags = flags as libc::c_short;
        if let Err(e) = ifctl::ioctl(&fd, libc::TUNSETIFF, &mut r) {
            return Err(netns::io_error(
                &format!("cannot create TAP interface '{name}' (queue {q})"),
                e,
            ));
        }
        fds.push(fd);
    }
    // UDP segmentation offload needs Linux 6.2; older kernels refuse the whole set.
    let tcp = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
    let mut got = "offloads off (the kernel took none)";
    for (set, what) in [
        (
            tcp | TUN_F_USO4 | TUN_F_USO6,
            "offloads: checksum, TSO, USO",
        ),
        (tcp, "offloads: checksum, TSO"),
    ] {
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(fds[0].as_raw_fd(), TUNSETOFFLOAD, set as libc::c_ulong) } == 0 {
            got = what;
            break;
        }
    }
    Ok((fds, got))
}

/// Interface-control call `f` on a fresh socket in the calling thread's namespace; its OS
/// error names interface `name`.
fn if_ctl<T>(name: &str, f: impl FnOnce(&OwnedFd) -> std::io::Result<T>) -> Result<T> {
    let s = netns::socket(
        libc::AF_INET,
        libc::SOCK_DGRAM,
        0,
        "socket for interface ioctls",
    )?;
    f(&s).map_err(|e| netns::io_error(&format!("interface '{name}'"), e))
}

fn hwaddr(name: &str) -> Result<[u8; 6]> {
    if_ctl(name, |s| ifctl::mac(s, name))
}

fn ifflags(name: &str) -> Result<i32> {
    if_ctl(name, |s| ifctl::flags(s, name))
}

fn mtu(name: &str) -> Result<u32> {
    if_ctl(name, |s| ifctl::mtu(s, name))
}

/// The `ip` binary: daemons often run with a short PATH, so look in the usual places first.
fn ip_binary() -> &'static str {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("ip")
}

/// Runs `ip ARGS` in the calling thread's namespace; its message becomes the error.
fn ip(args: &[&str]) -> Result<()> {
    run_ip(ip_binary(), args)
}

fn run_ip(bin: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::not_found(
                    "the 'ip' command (iproute2) is not installed; VPort needs it to move, \
                     address and bring up its interface",
                )
            } else {
                Error::new(libc::EIO, format!("cannot run 'ip': {e}"))
            }
        })?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let code = if msg.contains("File exists") || msg.contains("already") {
        libc::EEXIST
    } else if msg.contains("not permitted") || msg.contains("Permission denied") {
        libc::EPERM
    } else if msg.contains("No such") || msg.contains("Cannot find") {
        libc::ENOENT
    } else {
        libc::EINVAL
    };
    let hint = if code == libc::EPERM {
        " (the daemon needs root, or CAP_NET_ADMIN)"
    } else {
        ""
    };
    Err(Error::new(
        code,
        format!("ip {}: {msg}{hint}", args.join(" ")),
    ))
}

/// Frames on their way back in on a loopback port, one ring per incoming queue.
struct LoopRings {
    rings: Box<[ArrayQueue<Packet>]>,
    pool: PacketPool,
}

impl Drop for LoopRings {
    fn drop(&mut self) {
        let mut cache = self.pool.cache();
        for r in self.rings.iter() {
            while let Some(p) = r.pop() {
                cache.free(p);
            }
        }
        cache.flush_all();
    }
}

/// A TAP-backed port.
struct VPort {
    fds: Arc<[OwnedFd]>,
    rings: Option<Arc<LoopRings>>,
    ifname: String,
    netns: String,
    mac: [u8; 6],
    tags: Vec<u8>,
    rx_dropped: Arc<AtomicU64>,
    offloads: &'static str,
    /// Super-frames from the host cut into segments.
    segmented: Arc<AtomicU64>,
}

impl Port for VPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        let fd = self.fds[qid].as_raw_fd();
        let mut tags = [0u8; 8];
        tags[..self.tags.len()].copy_from_slice(&self.tags);
        Ok(Box::new(VPortRx {
            _fds: self.fds.clone(),
            fd,
            rings: self.rings.clone(),
            qid,
            tags,
            tag_len: self.tags.len(),
            dropped: self.rx_dropped.clone(),
            segmented: self.segmented.clone(),
            hdr: [0; VNET_HDR_LEN],
            spill: Vec::new(),
            stage: Vec::new(),
            pending: None,
            seg: 0,
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        // More outgoing than incoming queues share tap queues: writing to one tap fd from
        // several threads is safe, while a tap queue nobody reads would swallow frames.
        let fd = self.fds[qid % self.fds.len()].as_raw_fd();
        Ok(Box::new(VPortTx {
            _fds: self.fds.clone(),
            fd,
            rings: self.rings.clone(),
            ring: qid % self.fds.len(),
        }))
    }

    fn link_status(&self) -> LinkStatus {
        let flags = netns::run_in(&self.netns, || ifflags(&self.ifname)).unwrap_or(0);
        LinkStatus {
            speed_mbps: 0,
            full_duplex: true,
            autoneg: false,
            link_up: ifctl::is_link_up(flags),
        }
    }

    fn conf(&self) -> PortConf {
        netns::run_in(&self.netns, || {
            Ok(PortConf {
                mac_addr: hwaddr(&self.ifname)?,
                mtu: mtu(&self.ifname)?,
                admin_up: ifctl::is_up(ifflags(&self.ifname)?),
            })
        })
        .unwrap_or(PortConf {
            mac_addr: self.mac,
            mtu: 0,
            admin_up: false,
        })
    }

    fn set_conf(&self, conf: &PortConf) -> Result<()> {
        let name = self.ifname.as_str();
        netns::run_in(&self.netns, || {
            if conf.mac_addr != [0; 6] && conf.mac_addr != hwaddr(name)? {
                if_ctl(name, |s| ifctl::set_mac(s, name, conf.mac_addr))?;
            }
            if conf.mtu != 0 && conf.mtu != mtu(name)? {
                if_ctl(name, |s| ifctl::set_mtu(s, name, conf.mtu))?;
            }
            let flags = ifflags(name)?;
            if ifctl::is_up(flags) != conf.admin_up {
                if_ctl(name, |s| {
                    ifctl::set_flags(s, name, ifctl::with_up(flags, conf.admin_up))
                })?;
            }
            Ok(())
        })
    }

    fn driver_drops(&self) -> (u64, u64) {
        (self.rx_dropped.load(Ordering::Relaxed), 0)
    }

    fn desc(&self) -> String {
        let place = if self.netns.is_empty() {
            String::new()
        } else {
            format!(" in netns {}", self.netns)
        };
        let lo = if self.rings.is_some() {
            ", loopback"
        } else {
            ""
        };
        format!(
            "tap {}{place}, {} queue(s), {}; {} super-frame(s) segmented{lo}",
            self.ifname,
            self.fds.len(),
            self.offloads,
            self.segmented.load(Ordering::Relaxed)
        )
    }
}

/// One tap queue, read side.
struct VPortRx {
    _fds: Arc<[OwnedFd]>,
    fd: RawFd,
    rings: Option<Arc<LoopRings>>,
    qid: usize,
    tags: [u8; 8],
    tag_len: usize,
    dropped: Arc<AtomicU64>,
    segmented: Arc<AtomicU64>,
    /// The virtio-net header of the frame just read.
    hdr: [u8; VNET_HDR_LEN],
    /// Where a read puts the bytes of a frame beyond a default buffer (a jumbo frame or a
    /// super-frame), made on the first read.
    spill: Vec<u8>,
    /// A super-frame being cut into segments (it may take several polls), its header and
    /// how many payload bytes are done.
    stage: Vec<u8>,
    pending: Option<Vnet>,
    seg: usize,
}

impl VPortRx {
    /// Pushes the configured VLAN tags after the MAC addresses; None (counted, freed) if
    /// the frame cannot take them.
    #[inline]
    fn tag(&self, cache: &mut PoolCache, mut pkt: Packet) -> Option<Packet> {
        let t = self.tag_len;
        if t == 0 {
            return Some(pkt);
        }
        if pkt.is_shared() && pkt.len() >= 12 {
            // A looped-back replica shares its descriptor: tag a private copy.
            match cache.alloc_any(pkt.len()) {
                Some(mut c) => {
                    c.data_mut().copy_from_slice(pkt.data());
                    cache.free(pkt);
                    pkt = c;
                }
                None => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    cache.free(pkt);
                    return None;
                }
            }
        }
        if pkt.len() < 12 || pkt.prepend(t).is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            cache.free(pkt);
            return None;
        }
        let d = pkt.data_mut();
        d.copy_within(t..t + 12, 0);
        d[12..12 + t].copy_from_slice(&self.tags[..t]);
        Some(pkt)
    }
}

impl RxQueue for VPortRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let max = max.min(batch.room());
        let mut n = 0;
        if let Some(lr) = &self.rings {
            while n < max {
                let Some(pkt) = lr.rings[self.qid].pop() else {
                    break;
                };
                if let Some(pkt) = self.tag(cache, pkt) {
                    // SAFETY: n < max <= the batch's room at entry.
                    unsafe { batch.push_unchecked(pkt) };
                    n += 1;
                }
            }
        }
        if self.spill.is_empty() {
            self.spill = vec![0; SPILL];
        }
        if self.pending.is_some() {
            n += self.resume(cache, batch, max - n);
        }
        while n < max && self.pending.is_none() {
            let Some(mut pkt) = cache.alloc(DATA_CAPACITY) else {
                break;
            };
            let buf = pkt.data_mut();
            let head = buf.len();
            let iov = [
                libc::iovec {
                    iov_base: self.hdr.as_mut_ptr() as *mut c_void,
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: buf.as_mut_ptr() as *mut c_void,
                    iov_len: head,
                },
                libc::iovec {
                    iov_base: self.spill.as_mut_ptr() as *mut c_void,
                    iov_len: self.spill.len(),
                },
            ];
            // A tap read returns exactly one frame (or EAGAIN when none is queued).
            // SAFETY: reads into the header, the packet's own data area and the spill area,
            // at most their lengths.
            let r = unsafe { libc::readv(self.fd, iov.as_ptr(), 3) };
            if r <= 0 {
                cache.free(pkt);
                break;
            }
            let len = (r as usize).saturating_sub(VNET_HDR_LEN);
            let v = Vnet::parse(&self.hdr);
            let gso = v.gso_type & !GSO_ECN;
            if len < 14
                || len >= head + self.spill.len()
                || (gso == GSO_NONE && len > LARGE_DATA_CAPACITY)
            {
                // Too short, possibly cut short, or larger than any buffer.
                self.dropped.fetch_add(1, Ordering::Relaxed);
                cache.free(pkt);
                continue;
            }
            if gso != GSO_NONE {
                if !matches!(gso, GSO_TCPV4 | GSO_TCPV6 | GSO_UDP_L4) {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    cache.free(pkt);
                    continue;
                }
                // Cut from one contiguous copy (it may take several polls).
                self.stage.clear();
                self.stage.extend_from_slice(&pkt.data()[..len.min(head)]);
                self.stage
                    .extend_from_slice(&self.spill[..len.saturating_sub(head)]);
                cache.free(pkt);
                self.pending = Some(v);
                self.seg = 0;
                n += self.resume(cache, batch, max - n);
                continue;
            }
            if len > head {
                let Some(mut big) = cache.alloc_any(len) else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    cache.free(pkt);
                    continue;
                };
                let d = big.data_mut();
                d[..head].copy_from_slice(pkt.data());
                d[head..].copy_from_slice(&self.spill[..len - head]);
                cache.free(pkt);
                pkt = big;
            }
            pkt.set_len(len);
            if !v.finish_csum(pkt.data_mut()) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                cache.free(pkt);
                continue;
            }
            if let Some(pkt) = self.tag(cache, pkt) {
                // SAFETY: n < max <= the batch's room at entry.
                unsafe { batch.push_unchecked(pkt) };
                n += 1;
            }
        }
        n
    }
}

impl VPortRx {
    /// Cuts more segments off the pending super-frame into `batch` (at most `room`);
    /// returns how many it added. The frame stays pending while the batch or pool runs out.
    fn resume(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, room: usize) -> usize {
        let Some(v) = self.pending else {
            return 0;
        };
        let Some(g) = Gso::parse(&self.stage, v, vnet::segment_capacity(cache)) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.pending = None;
            return 0;
        };
        let mut cut = PacketBatch::new();
        if vnet::segment_into(
            cache,
            &mut cut,
            room,
            &self.stage,
            &g,
            &mut self.seg,
            |_| {},
        ) {
            self.pending = None;
            self.segmented.fetch_add(1, Ordering::Relaxed);
        }
        let mut n = 0;
        for p in cut.drain() {
            if let Some(p) = self.tag(cache, p) {
                // SAFETY: at most `room` segments were cut, and room <= the batch's room.
                unsafe { batch.push_unchecked(p) };
                n += 1;
            }
        }
        n
    }
}

/// One tap queue, write side.
struct VPortTx {
    _fds: Arc<[OwnedFd]>,
    fd: RawFd,
    rings: Option<Arc<LoopRings>>,
    ring: usize,
}

impl VPortTx {
    /// Loopback: hands the frames to the incoming queue's ring; a full ring keeps the rest.
    fn turn_around(lr: &LoopRings, ring: usize, batch: &mut PacketBatch) -> usize {
        let mut sent = 0;
        let mut failed = PacketBatch::new();
        for pkt in batch.drain() {
            match lr.rings[ring].push(pkt) {
                Ok(()) => sent += 1,
                Err(pkt) => {
                    // SAFETY: failed is empty here.
                    unsafe { failed.push_unchecked(pkt) };
                    break;
                }
            }
        }
        if !failed.is_empty() {
            failed.append(batch);
            batch.append(&mut failed);
        }
        sent
    }
}

impl TxQueue for VPortTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        if let Some(lr) = &self.rings {
            return Self::turn_around(lr, self.ring, batch);
        }
        let mut done = PacketBatch::new();
        let mut failed = PacketBatch::new();
        for pkt in batch.drain() {
            let d = pkt.data();
            // A complete frame: an empty virtio-net header (nothing to offload).
            let hdr = [0u8; VNET_HDR_LEN];
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr() as *mut c_void,
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: d.as_ptr() as *mut c_void,
                    iov_len: d.len(),
                },
            ];
            // SAFETY: writes the header and the packet's bytes; the tap takes one whole frame
            // per write.
            let r = unsafe { libc::writev(self.fd, iov.as_ptr(), 2) };
            if r >= 0 {
                // SAFETY: done holds at most as many packets as the batch did.
                unsafe { done.push_unchecked(pkt) };
                continue;
            }
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: as above.
            unsafe { failed.push_unchecked(pkt) };
            if !matches!(e, libc::EINVAL | libc::EMSGSIZE | libc::EFAULT) {
                // The queue is full, the link is gone or down: the rest would fail too
                // (the drain leaves them in the batch).
                break;
            }
        }
        let sent = done.len();
        cache.free_bulk(&mut done);
        if !failed.is_empty() {
            failed.append(batch);
            batch.append(&mut failed);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_follow_the_kernel_rules() {
        assert!(check_ifname("vport0").is_ok());
        assert!(check_ifname("a234567890abcde").is_ok());
        assert!(check_ifname("a234567890abcdef").is_err());
        assert!(check_ifname("").is_err());
        for bad in ["a/b", "a:b", "a b", "vp%d", ".", ".."] {
            assert!(check_ifname(bad).is_err(), "{bad}");
        }
    }

    fn params(name: &str, num_out_q: usize) -> PortParams {
        PortParams {
            name: name.to_string(),
            num_inc_q: 0,
            num_out_q,
            size_inc_q: 0,
            size_out_q: 0,
            pool: bessemer_core::PacketPool::new(
                "vport_unit",
                64,
                bessemer_core::mem::PagePolicy::Plain,
            )
            .unwrap(),
        }
    }

    #[test]
    fn arguments_are_checked_before_anything_is_made() {
        let err = |arg: Value| parse(&params("vp", 0), &arg).err().expect("accepted");
        let e = err(Value::map().with("docker", "web"));
        assert_eq!(e.code, libc::ENOTSUP);
        let e = err(Value::map().with("netns", "bessemer_no_such_netns"));
        assert_eq!(e.code, libc::ENOENT);
        assert!(e.msg.contains("bessemer_no_such_netns"), "{e:?}");
        let e = err(Value::map().with("ip_addrs", Value::List(vec!["1.2.3.4/99".into()])));
        assert!(e.msg.contains("ip_addrs[0]"), "{e:?}");
        let e = err(Value::map().with("rxq_cpus", Value::List(vec![0.into(), 1.into()])));
        assert!(e.msg.contains("rxq_cpus"), "{e:?}");
        let e = err(Value::map().with("tx_outer_tci", 65536i64));
        assert!(e.msg.contains("tx_outer_tci"), "{e:?}");
        let e = parse(&params("a_very_long_port_name", 0), &Value::Null)
            .err()
            .unwrap();
        assert!(e.msg.contains("ifname not given"), "{e:?}");

        let ok = Value::map()
            .with("rxq_cpus", Value::List(vec![0.into(), 1.into()]))
            .with("tx_tci", 0x123i64)
            .with("tx_outer_tci", 0x456i64)
            .with(
                "ip_addrs",
                Value::List(vec!["10.0.0.1/24".into(), "fd00::1".into()]),
            );
        let c = parse(&params("vp7", 2), &ok).unwrap();
        assert_eq!(c.ifname, "vp7");
        assert_eq!(c.netns, "");
        assert_eq!(c.tags, [0x88, 0xa8, 0x04, 0x56, 0x81, 0x00, 0x01, 0x23]);
        assert_eq!((c.nfds, c.num_out_q), (1, 2));
        assert_eq!(c.ip_addrs, ["10.0.0.1/24", "fd00::1"]);
    }

    #[test]
    fn a_missing_ip_command_is_named() {
        let e = run_ip("/nonexistent/bessemer/ip", &["link"]).unwrap_err();
        assert_eq!(e.code, libc::ENOENT);
        assert!(e.msg.contains("iproute2"), "{e:?}");
    }

    #[test]
    fn addresses_need_a_valid_prefix() {
        for ok in ["10.0.0.1/24", "10.0.0.1", "fd00::1/64", "0.0.0.0/0"] {
            assert!(check_cidr(ok).is_ok(), "{ok}");
        }
        for bad in [
            "10.0.0.1/33",
            "10.0.0/24",
            "fd00::1/129",
            "x/1",
            "10.0.0.1/",
            "",
        ] {
            assert!(check_cidr(bad).is_err(), "{bad}");
        }
    }
}

//! AFXDPPort: one AF_XDP socket per queue pair on a Linux interface, with Bessemer's packet
//! memory as the UMEM, so neither direction copies a byte in user space.
//!
//! * The pool's frame region (4096-byte frames) is registered as the UMEM of every socket
//!   (chunk 4096, headroom 0). Each socket registers it separately rather than sharing one
//!   UMEM with `XDP_SHARED_UMEM`: a shared UMEM forces every socket to the first one's mode
//!   (copy or zero-copy) and needs a bound socket alive to share from, whereas separate
//!   registrations let every port choose its mode and live independently. The kernel allows
//!   the same memory in several UMEMs; a frame is only ever on one socket's rings at a time,
//!   because it is owned by exactly one place (the graph, or one socket's kernel side).
//! * RX: the fill ring holds frames allocated from the pool; an RX descriptor's address is
//!   the frame plus the data offset, so the frame becomes the packet (offset and length set
//!   from the descriptor) with no copy. TX puts a packet's frame address on the TX ring; the
//!   completion ring gives the frame back and it is freed to the pool.
//! * A hand-assembled six-instruction XDP program redirects each packet to the XSKMAP entry
//!   of its RX queue (or passes it to the stack when no socket listens there); it is attached
//!   with a BPF link, so closing the link detaches it. Ports on one interface share it.
//! * Each socket remembers which frames the kernel holds (fill ring, TX in flight) in a
//!   bitmap, so closing the port returns every one of them to the pool.
//! * Jumbo frames: the program is loaded as multi-buffer aware and sockets bind with
//!   `XDP_USE_SG` (Linux 6.6+), so the MTU is not capped at what fits one frame. A frame that
//!   arrives in several UMEM frames is gathered into one buffer of the pool's large-frame
//!   companion (the one copy on this path); a packet longer than a UMEM frame goes out as a
//!   chain of descriptors. Older kernels get single-frame operation and say so in the error
//!   when the MTU is too large for it.

use std::cell::UnsafeCell;
use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bessemer_core::packet::{FRAME_SHIFT, FRAME_SIZE, HEADROOM};
use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PacketPool, PoolCache, Result, Value, MAX_BURST};

use crate::ifctl::{self, getsockopt, setsockopt};
use crate::netns;
use crate::partial_csum;
use crate::xdp_desc::{self, HeldFrames};

const MSG: &str = "bessemer.pb.AFXDPPortArg";
const DEFAULT_RING: u64 = 2048;
const MIN_RING: u64 = 64;
const MAX_RING: u64 = 1 << 16;

/// The AFXDPPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "AFXDPPort",
    name_template: "afxdp_port",
    help: "AF_XDP sockets on a Linux interface; the packet pool is the UMEM (no copies in user space)",
    arg_type: MSG,
    arg_doc: &[
        "ifname: string — the interface (required)",
        "netns: string — its network namespace (name under /var/run/netns, or a path); empty: the daemon's",
        "qid: uint64 — first interface queue; port queue i uses interface queue qid + i",
        "zero_copy: bool — require zero-copy mode (fail if the interface's driver cannot)",
        "copy: bool — force copy mode",
        "skb_mode: bool — attach the XDP program in generic (SKB) mode",
        "ring_size: uint32 — descriptors per ring, a power of two in 64..65536 (default 2048; size_inc_q/size_out_q take precedence)",
        "busy_budget: uint32 — busy polling: SO_PREFER_BUSY_POLL with this NAPI budget and SO_BUSY_POLL 20 µs (0, the default: off; Linux 5.11, CAP_NET_ADMIN)",
    ],
    create,
};

mod attach;
mod queues;
mod xsk;

pub use attach::*;
use queues::*;
use xsk::*;

// ---------------------------------------------------------------------------------------
// The port.

struct AfXdpPort {
    xsks: Vec<Arc<Xsk>>,
    nin: usize,
    nout: usize,
    ctl: OwnedFd,
    ifname: String,
    desc: String,
    /// Registered in PORTS while the port lives.
    _target: Arc<OffloadTarget>,
}

impl Port for AfXdpPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        let x = self
            .xsks
            .get(qid)
            .filter(|_| qid < self.nin)
            .ok_or_else(|| Error::invalid(format!("no incoming queue {qid}")))?;
        if x.rx_open.swap(true, Ordering::AcqRel) {
            return Err(Error::busy(format!("incoming queue {qid} is already open")));
        }
        Ok(Box::new(XskRx { x: x.clone() }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        let x = self
            .xsks
            .get(qid)
            .filter(|_| qid < self.nout)
            .ok_or_else(|| Error::invalid(format!("no outgoing queue {qid}")))?;
        if x.tx_open.swap(true, Ordering::AcqRel) {
            return Err(Error::busy(format!("outgoing queue {qid} is already open")));
        }
        Ok(Box::new(XskTx { x: x.clone() }))
    }

    fn link_status(&self) -> LinkStatus {
        ifctl::link_status(&self.ctl, &self.ifname)
    }

    fn set_conf(&self, conf: &PortConf) -> Result<()> {
        ifctl::set_conf(&self.ctl, &self.ifname, &self.conf(), conf, |step, e| {
            let what = match step {
                ifctl::Step::Mtu(_) => "MTU",
                ifctl::Step::Mac => "MAC address",
                ifctl::Step::ReadFlags | ifctl::Step::AdminUp => "state (up/down)",
            };
            netns::io_error(&format!("cannot set the {what} of '{}'", self.ifname), e)
        })
    }

    fn conf(&self) -> PortConf {
        ifctl::conf(&self.ctl, &self.ifname)
    }

    fn driver_drops(&self) -> (u64, u64) {
        self.xsks.iter().fold((0, 0), |(i, o), x| {
            let s = x.stats();
            let (ri, ro) = (
                x.rx_dropped.load(Ordering::Relaxed) + x.rx_invalid.load(Ordering::Relaxed),
                x.tx_dropped.load(Ordering::Relaxed) + x.comp_invalid.load(Ordering::Relaxed),
            );
            (
                i + s.rx_dropped + s.rx_ring_full + ri,
                o + s.tx_invalid_descs + ro,
            )
        })
    }

    fn desc(&self) -> String {
        self.desc.clone()
    }
}

/// `ETHTOOL_GCHANNELS`' answer.
#[repr(C)]
#[derive(Default)]
struct Channels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The interface's RX queue count, if its driver reports it.
fn queue_count(ctl: &OwnedFd, ifname: &str) -> Option<u32> {
    let mut ch = Channels {
        cmd: ifctl::ETHTOOL_GCHANNELS,
        ..Channels::default()
    };
    let ok = ifctl::ethtool(ctl, ifname, &mut ch).is_ok();
    // Drivers report RX-only and combined queues; when both are non-zero, some count one
    // queue in both, so the sum is an upper bound (the kernel's bind has the last word).
    let n = if ch.rx_count == 0 || ch.combined_count == 0 {
        ch.rx_count.max(ch.combined_count)
    } else {
        ch.rx_count + ch.combined_count
    };
    (ok && n > 0).then_some(n)
}

fn ring_size(field: &str, v: u64) -> Result<u32> {
    if !v.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&v) {
        return Err(Error::invalid(format!(
            "{MSG}.{field}: {v} is not a power of two in {MIN_RING}..{MAX_RING}"
        )));
    }
    Ok(v as u32)
}

/// [`Xsk::open`], retried for a while when the queue is busy: the kernel lets go of a
/// closed socket's queue in deferred work, so a port made right after another one on the
/// same queue was destroyed may find it still taken for a moment.
/// Socket options of busy polling (linux/socket.h; not in every libc).
const SO_BUSY_POLL: i32 = 46;
const SO_PREFER_BUSY_POLL: i32 = 69;
const SO_BUSY_POLL_BUDGET: i32 = 70;

/// Turns busy polling on for one socket: the device's NAPI runs when this thread polls.
fn busy_poll(x: &Xsk, budget: u32) -> Result<()> {
    // SAFETY: the socket is open for the Xsk's life; borrowed only for these calls.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(x.fd) };
    let why = "(busy polling needs Linux 5.11 and CAP_NET_ADMIN)";
    for (opt, val, name) in [
        (SO_PREFER_BUSY_POLL, 1i32, "SO_PREFER_BUSY_POLL"),
        (SO_BUSY_POLL, 20, "SO_BUSY_POLL"),
        (SO_BUSY_POLL_BUDGET, budget as i32, "SO_BUSY_POLL_BUDGET"),
    ] {
        setsockopt(
            &fd,
            libc::SOL_SOCKET,
            opt,
            &val,
            &format!("cannot set {name} {why}"),
        )?;
    }
    Ok(())
}

fn open_retrying(
    pool: &PacketPool,
    attach: &Arc<Attach>,
    ifindex: u32,
    queue: u32,
    rings: Rings,
    mode: Mode,
) -> Result<Xsk> {
    let t = std::time::Instant::now();
    let mut sg = attach.frags;
    loop {
        match Xsk::open(pool, attach, ifindex, queue, rings, mode, sg) {
            Err(e) if e.code == libc::EBUSY && t.elapsed().as_millis() < 1000 => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            // A driver (mode) without multi-buffer AF_XDP: single frames only.
            Err(e) if sg && (e.code == libc::EINVAL || e.code == libc::EOPNOTSUPP) => sg = false,
            other => return other,
        }
    }
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, MSG)?;
    let ifname = a.str("ifname")?.unwrap_or("").to_string();
    let ns = a.str("netns")?.unwrap_or("").to_string();
    let qid = a.uint("qid", u32::MAX as u64)?.unwrap_or(0) as u32;
    let zero_copy = a.bool("zero_copy")?.unwrap_or(false);
    let copy = a.bool("copy")?.unwrap_or(false);
    let skb_mode = a.bool("skb_mode")?.unwrap_or(false);
    let ring = a.uint("ring_size", u32::MAX as u64)?.unwrap_or(0);
    let busy_budget = a.uint("busy_budget", u16::MAX as u64)?.unwrap_or(0) as u32;
    a.finish()?;
    if ifname.is_empty() {
        return Err(Error::invalid(format!("{MSG}.ifname: required")));
    }
    if zero_copy && copy {
        return Err(Error::invalid(format!(
            "{MSG}: zero_copy and copy exclude each other"
        )));
    }
    let ring = if ring == 0 { DEFAULT_RING } else { ring };
    let rings = Rings {
        rx: if params.size_inc_q > 0 {
            ring_size("size_inc_q", params.size_inc_q as u64)?
        } else {
            ring_size("ring_size", ring)?
        },
        tx: if params.size_out_q > 0 {
            ring_size("size_out_q", params.size_out_q as u64)?
        } else {
            ring_size("ring_size", ring)?
        },
    };
    let nin = params.num_inc_q.max(1);
    let nout = params.num_out_q.max(1);
    let nsock = nin.max(nout);
    // Fill rings hold pool frames while idle: they must leave the graph most of the pool.
    let lent = nin * rings.rx as usize;
    if lent > params.pool.capacity() / 2 {
        return Err(Error::invalid(format!(
            "{MSG}.ring_size: {nin} queue(s) × {} fill descriptors would hold {lent} of the pool's {} buffers (at most half)",
            rings.rx,
            params.pool.capacity()
        )));
    }
    if qid as u64 + nsock as u64 > u32::MAX as u64 {
        return Err(Error::invalid(format!("{MSG}.qid: {qid} is out of range")));
    }
    let pool = params.pool.clone();
    let name = ifname.clone();
    let (xsks, ctl, generic, ifindex) = netns::run_in(&ns, move || {
        let ifindex = netns::ifindex(&name)?;
        let ctl = netns::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM,
            0,
            "cannot open a control socket",
        )?;
        let last = qid + nsock as u32 - 1;
        let have = queue_count(&ctl, &name);
        if let Some(have) = have {
            if last >= have {
                return Err(Error::invalid(format!(
                    "{MSG}.qid: interface '{name}' has {have} queue(s) (0..{}); queues {qid}..{last} are out of range",
                    have - 1
                )));
            }
        }
        let entries = (last + 1).max(have.unwrap_or(0));
        // A veth's peer is a local stack that may leave checksums to "hardware".
        let partial_csums = ifctl::driver_name(&ctl, &name).as_deref() == Some("veth");
        let attach = Attach::get(&name, ifindex, entries, skb_mode)?;
        let mut mode = if copy { Mode::Copy } else { Mode::ZeroCopy };
        let mut xsks = Vec::with_capacity(nsock);
        for i in 0..nsock as u32 {
            let q = qid + i;
            attach.claim(q)?;
            let x = match open_retrying(&pool, &attach, ifindex, q, rings, mode) {
                Err(e) if mode == Mode::ZeroCopy && !zero_copy && e.code != libc::EBUSY => {
                    mode = Mode::Copy;
                    open_retrying(&pool, &attach, ifindex, q, rings, mode)
                }
                other => other,
            };
            let mut x = match x {
                Ok(x) => x,
                Err(mut e) => {
                    attach.release(q);
                    if e.code == libc::EINVAL {
                        e.msg += &format!(" (is queue {q} out of range?)");
                    }
                    return Err(e);
                }
            };
            x.partial_csums = partial_csums;
            if busy_budget > 0 {
                if let Err(e) = busy_poll(&x, busy_budget) {
                    attach.release(q);
                    return Err(e);
                }
                x.busy_poll = true;
            }
            let x = Arc::new(x);
            xsks.push(x.clone());
            if (i as usize) < nin {
                attach.insert(q, x.fd)?;
            }
        }
        let generic = attach.generic;
        Ok((xsks, ctl, generic, ifindex))
    })?;
    let mode = match xsks[0].mode {
        Mode::ZeroCopy => "zero-copy",
        Mode::Copy => "copy",
    };
    let last = qid as usize + nsock - 1;
    let desc = format!(
        "{}{ifname} queue(s) {qid}..{last}, {mode}, XDP {} mode, {}",
        if ns.is_empty() {
            String::new()
        } else {
            format!("{ns}/")
        },
        if generic { "generic (skb)" } else { "native" },
        if xsks.iter().all(|x| x.sg) {
            "multi-buffer (jumbo frames)"
        } else {
            "single-buffer (frames up to one UMEM frame)"
        }
    ) + &if busy_budget > 0 {
        format!(", busy polling (budget {busy_budget})")
    } else {
        String::new()
    } + if xsks[0].partial_csums {
        ", completes partial TCP/UDP checksums (veth peer offload)"
    } else {
        ""
    };
    let target = Arc::new(OffloadTarget {
        attach: xsks[0].attach.clone(),
        ifname: ifname.clone(),
        netns: ns,
        ifindex,
    });
    {
        let mut reg = PORTS.lock().unwrap_or_else(|p| p.into_inner());
        reg.retain(|(_, w)| w.strong_count() > 0);
        reg.push((
            (params.pool.region_base() as usize, params.name.clone()),
            Arc::downgrade(&target),
        ));
    }
    Ok(NewPort {
        port: Box::new(AfXdpPort {
            xsks,
            nin,
            nout,
            ctl,
            ifname,
            desc,
            _target: target,
        }),
        num_inc_q: nin,
        num_out_q: nout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::mem::PagePolicy;

    fn params(pool: &PacketPool) -> PortParams {
        PortParams {
            name: "x".into(),
            num_inc_q: 0,
            num_out_q: 0,
            size_inc_q: 0,
            size_out_q: 0,
            pool: pool.clone(),
        }
    }

    fn err(arg: Value) -> Error {
        let pool = PacketPool::new("t", 1024, PagePolicy::Plain).unwrap();
        match create(&params(&pool), &arg) {
            Err(e) => e,
            Ok(_) => panic!("accepted {arg:?}"),
        }
    }

    #[test]
    fn program_encodes_as_the_kernel_expects() {
        let p = program(7);
        // SAFETY: Insn is 8 plain bytes.
        let bytes: [u8; 48] = unsafe { std::mem::transmute(p) };
        assert_eq!(&bytes[0..8], &[0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[8..16], &[0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&bytes[24..32], &[0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&bytes[32..40], &[0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(&bytes[40..48], &[0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn arguments_are_checked() {
        assert!(err(Value::map()).msg.contains("ifname: required"));
        let e = err(Value::map()
            .with("ifname", "lo")
            .with("copy", true)
            .with("zero_copy", true));
        assert!(e.msg.contains("exclude"), "{}", e.msg);
        let e = err(Value::map().with("ifname", "lo").with("ring_size", 100u64));
        assert!(e.msg.contains("ring_size: 100"), "{}", e.msg);
        let e = err(Value::map().with("ifname", "lo").with("ring_size", 1024u64));
        assert!(e.msg.contains("at most half"), "{}", e.msg);
        let e = err(Value::map().with("ifname", "lo").with("bogus", 1u64));
        assert!(e.msg.contains("bogus"), "{}", e.msg);
    }
}

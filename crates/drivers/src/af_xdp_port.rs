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

// ---------------------------------------------------------------------------------------
// eBPF: the program, the XSKMAP and the link, made with the bpf(2) syscall directly.

use crate::bpf::{
    insn, link_detach, link_xdp, load_xdp_flags, map_create, map_update_u32, Insn,
    BPF_FUNC_REDIRECT_MAP, BPF_F_XDP_HAS_FRAGS, BPF_MAP_TYPE_XSKMAP, BPF_PSEUDO_MAP_FD,
    XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, XDP_PASS,
};

/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
fn program(map_fd: RawFd) -> [Insn; 6] {
    [
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0), // r2 = *(u32 *)(r1 + 16)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = &xsks (64-bit immediate...)
        insn(0, 0, 0, 0, 0),                        // (...its upper half)
        insn(0xb7, 3, 0, 0, XDP_PASS),              // r3 = XDP_PASS (result when no entry)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                     // exit
    ]
}

/// The XDP program attached to one interface, shared by every port on it.
struct Attach {
    key: (u64, u64, u32),
    ifname: String,
    map: OwnedFd,
    entries: u32,
    generic: bool,
    /// The program accepts multi-buffer packets (sockets may bind with XDP_USE_SG).
    frags: bool,
    taken: Mutex<HashSet<u32>>,
    // Closing the link detaches the program; the program fd only keeps it loaded.
    _link: OwnedFd,
    _prog: OwnedFd,
}

static ATTACHED: Mutex<Vec<Weak<Attach>>> = Mutex::new(Vec::new());

impl Drop for Attach {
    fn drop(&mut self) {
        // Closing the link detaches the program too, but not always before close returns;
        // an explicit detach is synchronous, so the interface is free for the next port.
        link_detach(&self._link);
    }
}

impl Attach {
    /// The program on `ifindex` of the current namespace, attaching it if needed.
    fn get(ifname: &str, ifindex: u32, entries: u32, skb_mode: bool) -> Result<Arc<Attach>> {
        let ns = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| {
            Error::new(libc::EIO, format!("cannot identify network namespace: {e}"))
        })?;
        let key = (ns.dev(), ns.ino(), ifindex);
        let mut reg = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        reg.retain(|w| w.strong_count() > 0);
        if let Some(a) = reg.iter().filter_map(Weak::upgrade).find(|a| a.key == key) {
            if a.entries < entries {
                return Err(Error::invalid(format!(
                    "interface '{ifname}': queue {} is beyond the {} the attached XDP program serves",
                    entries - 1,
                    a.entries
                )));
            }
            return Ok(a);
        }
        let map = map_create(
            BPF_MAP_TYPE_XSKMAP,
            4,
            4,
            entries,
            "cannot create the XSKMAP (bpf)",
        )?;
        let (prog, frags) = load_program(map.as_raw_fd())?;
        let attach = |flags: u32| {
            link_xdp(
                prog.as_raw_fd(),
                ifindex,
                flags,
                &format!("cannot attach the XDP program to '{ifname}'"),
            )
        };
        let (link, generic) = if skb_mode {
            (attach(XDP_FLAGS_SKB_MODE), true)
        } else {
            match attach(XDP_FLAGS_DRV_MODE) {
                Err(e) if e.code == libc::EOPNOTSUPP || e.code == libc::EINVAL => {
                    (attach(XDP_FLAGS_SKB_MODE), true)
                }
                other => (other, false),
            }
        };
        let link = link.map_err(|mut e| {
            if e.code == libc::EBUSY || e.code == libc::EEXIST {
                e.msg += " (the interface already has an XDP program of another user)";
            }
            if e.code == libc::ERANGE {
                e.msg += &format!(
                    " (the MTU of '{ifname}' is larger than one XDP frame holds{}; lower it, \
                     or use AFPacketPort for jumbo frames)",
                    if frags {
                        " and its driver takes no multi-buffer XDP"
                    } else {
                        ", and this kernel loads no multi-buffer XDP programs"
                    }
                );
            }
            e
        })?;
        let a = Arc::new(Attach {
            key,
            ifname: ifname.to_string(),
            map,
            entries,
            generic,
            frags,
            taken: Mutex::new(HashSet::new()),
            _link: link,
            _prog: prog,
        });
        reg.push(Arc::downgrade(&a));
        Ok(a)
    }

    /// Reserves interface queue `q` for one socket.
    fn claim(&self, q: u32) -> Result<()> {
        if !self
            .taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(q)
        {
            return Err(Error::busy(format!(
                "queue {q} of interface '{}' is already used by another AF_XDP port",
                self.ifname
            )));
        }
        Ok(())
    }

    fn release(&self, q: u32) {
        self.taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&q);
    }

    /// Points the program's entry for queue `q` at socket `fd`.
    fn insert(&self, q: u32, fd: RawFd) -> Result<()> {
        let r = map_update_u32(self.map.as_raw_fd(), q, fd as u32);
        if r < 0 {
            return Err(netns::os_error(&format!(
                "cannot insert the socket of queue {q} into the XSKMAP"
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Offload (crates/drivers/src/xdp_offload.rs): another program may take the place of the
// redirect program on the port's interface, through the same link (BPF_LINK_UPDATE swaps
// programs atomically, so no packet sees the interface without a program), and reuse the
// XSKMAP, so what it sends up still reaches the port's sockets.

/// BPF_LINK_UPDATE.
const BPF_LINK_UPDATE: i32 = 29;

/// What an offload needs of an AFXDPPort: its interface, the XSKMAP and the link.
pub struct OffloadTarget {
    attach: Arc<Attach>,
    /// The interface and its namespace ("" for the daemon's).
    pub ifname: String,
    pub netns: String,
    pub ifindex: u32,
}

/// AFXDPPorts by (pool, port name): ports are named per engine, and an engine has one pool.
type PortKey = (usize, String);
static PORTS: Mutex<Vec<(PortKey, Weak<OffloadTarget>)>> = Mutex::new(Vec::new());

/// The offload target of AFXDPPort `port` of the engine whose pool is `pool`.
pub fn offload_target(pool: &PacketPool, port: &str) -> Option<Arc<OffloadTarget>> {
    let key = (pool.region_base() as usize, port.to_string());
    let reg = PORTS.lock().unwrap_or_else(|p| p.into_inner());
    reg.iter()
        .filter(|(k, _)| *k == key)
        .find_map(|(_, w)| w.upgrade())
}

impl OffloadTarget {
    /// The port's XSKMAP (interface queue -> socket), for the offload program to reuse.
    pub fn xskmap(&self) -> RawFd {
        self.attach.map.as_raw_fd()
    }

    /// Whether the port's program is multi-buffer aware (a replacement must be too, or the
    /// kernel refuses it on an interface whose MTU needs it).
    pub fn frags(&self) -> bool {
        self.attach.frags
    }

    /// Whether the program runs in generic (skb) mode.
    pub fn generic(&self) -> bool {
        self.attach.generic
    }

    /// Puts program `prog` in place of what runs on the interface now.
    pub fn install(&self, prog: RawFd) -> Result<()> {
        self.swap(prog)
    }

    /// Puts the port's own redirect program back.
    pub fn restore(&self) -> Result<()> {
        self.attach.swap(self.attach._prog.as_raw_fd())
    }

    fn swap(&self, prog: RawFd) -> Result<()> {
        self.attach.swap(prog)
    }

    /// A handle that can put the redirect program back as long as the interface's program
    /// lives, even after this port is gone: another port on the same interface keeps it.
    pub fn restorer(&self) -> Restorer {
        Restorer(Arc::downgrade(&self.attach))
    }
}

/// See [`OffloadTarget::restorer`].
pub struct Restorer(Weak<Attach>);

impl Restorer {
    /// Puts the redirect program back (nothing to do when the interface's program is gone).
    pub fn restore(&self) -> Result<()> {
        match self.0.upgrade() {
            Some(a) => a.swap(a._prog.as_raw_fd()),
            None => Ok(()),
        }
    }
}

impl Attach {
    /// Replaces the program on the interface through the link.
    fn swap(&self, prog: RawFd) -> Result<()> {
        let r = crate::bpf::Attr::new()
            .u32(0, self._link.as_raw_fd() as u32)
            .u32(4, prog as u32)
            .call(BPF_LINK_UPDATE);
        if r < 0 {
            return Err(netns::os_error(&format!(
                "cannot replace the XDP program on '{}' (BPF_LINK_UPDATE)",
                self.ifname
            )));
        }
        Ok(())
    }
}

/// Loads the program, multi-buffer aware where the kernel allows; says which it got.
fn load_program(map_fd: RawFd) -> Result<(OwnedFd, bool)> {
    let prog = program(map_fd);
    match load_xdp_flags(&prog, "bessemer_xsk", BPF_F_XDP_HAS_FRAGS) {
        Ok(fd) => Ok((fd, true)),
        Err(_) => Ok((load_xdp_flags(&prog, "bessemer_xsk", 0)?, false)),
    }
}

// ---------------------------------------------------------------------------------------
// AF_XDP sockets and their rings.

const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_USE_SG: u16 = 1 << 4;
/// `xdp_desc.options`: more descriptors of this packet follow.
const XDP_PKT_CONTD: u32 = 1;
/// Most packet bytes one UMEM frame carries (after the kernel's XDP headroom).
const UMEM_DATA: usize = FRAME_SIZE - HEADROOM;
const XDP_RING_NEED_WAKEUP: u32 = 1;
/// Most wake-up calls one send makes to drain the TX ring in copy mode (the kernel takes at
/// most 32 descriptors per call; 2048 / 32 = 64 calls empty a default-sized ring).
const MAX_TX_KICKS: u32 = 80;
const PGOFF_RX: i64 = 0;
const PGOFF_TX: i64 = 0x8000_0000;
const PGOFF_FILL: i64 = 0x1_0000_0000;
const PGOFF_COMP: i64 = 0x1_8000_0000;

/// One mapped ring: producer, consumer and flags words and `size` entries.
struct Ring {
    map: *mut libc::c_void,
    map_len: usize,
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    size: u32,
}

impl Ring {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        pgoff: i64,
        size: u32,
        elem: usize,
    ) -> Result<Ring> {
        let map_len = off.desc as usize + size as usize * elem;
        // SAFETY: mapping a ring of our own socket; the kernel checks the length.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(netns::os_error("cannot map an AF_XDP ring"));
        }
        let at = |o: u64| (map as *mut u8).wrapping_add(o as usize);
        Ok(Ring {
            map,
            map_len,
            prod: at(off.producer) as *const AtomicU32,
            cons: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            desc: at(off.desc),
            mask: size - 1,
            size,
        })
    }

    #[inline(always)]
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping, which lives as long as the ring.
        unsafe { &*self.prod }
    }

    #[inline(always)]
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.cons }
    }

    #[inline(always)]
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Entry `i` of a fill or completion ring (frame addresses).
    #[inline(always)]
    fn addr(&self, i: u32) -> *mut u64 {
        (self.desc as *mut u64).wrapping_add((i & self.mask) as usize)
    }

    /// Entry `i` of an RX or TX ring.
    #[inline(always)]
    fn xdesc(&self, i: u32) -> *mut libc::xdp_desc {
        (self.desc as *mut libc::xdp_desc).wrapping_add((i & self.mask) as usize)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unused from here on.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// State of the receive side (fill and RX rings), touched only by the RX queue's owner.
struct RxSide {
    fill_prod: u32,
    fill_cons: u32,
    rx_cons: u32,
    held: HeldFrames,
}

/// State of the transmit side (TX and completion rings), touched only by the TX queue's owner.
struct TxSide {
    tx_prod: u32,
    tx_cons: u32,
    comp_cons: u32,
    held: HeldFrames,
}

/// Which AF_XDP mode a socket runs in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    ZeroCopy,
    Copy,
}

/// One AF_XDP socket bound to one interface queue.
struct Xsk {
    fd: RawFd,
    pool: PacketPool,
    queue: u32,
    attach: Arc<Attach>,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
    mode: Mode,
    /// Bound with XDP_USE_SG: packets may span several descriptors.
    sg: bool,
    /// Received packets lost in user space (a jumbo frame with no large buffer for it).
    rx_dropped: AtomicU64,
    /// Packets too long for a socket without XDP_USE_SG.
    tx_dropped: AtomicU64,
    /// RX descriptors refused by `xdp_desc::take_rx` (outside the UMEM, a frame not lent,
    /// bytes past the frame).
    rx_invalid: AtomicU64,
    /// Completion descriptors refused by `xdp_desc::take_completed`.
    comp_invalid: AtomicU64,
    /// Complete TCP/UDP checksums a local sender left partial (a veth peer's offload).
    partial_csums: bool,
    /// Busy polling (SO_PREFER_BUSY_POLL): an empty receive poll drives the device's NAPI
    /// from this thread with a syscall, instead of waiting for its interrupt.
    busy_poll: bool,
    rx_open: AtomicBool,
    tx_open: AtomicBool,
    /// Descriptors were left on the TX ring after the last wake-up (device queue busy): the
    /// receive side kicks again on its next poll, so they do not wait for the next send.
    tx_backlog: AtomicBool,
    rxs: UnsafeCell<RxSide>,
    txs: UnsafeCell<TxSide>,
}

// SAFETY: the rings are shared memory with the kernel; `rxs` is touched only by the holder of
// the RX queue and `txs` only by the holder of the TX queue (each exclusive via `*_open`),
// and by `Drop`, which runs when no queue object is left.
unsafe impl Send for Xsk {}
// SAFETY: as for `Send`: through `&Xsk` the `rxs` and `txs` cells are reached only by the
// single holder of each queue (`rx_open` / `tx_open`); every other field is atomic or
// immutable.
unsafe impl Sync for Xsk {}

/// Ring sizes of one socket.
#[derive(Clone, Copy)]
struct Rings {
    rx: u32,
    tx: u32,
}

impl Xsk {
    /// Opens a socket on `ifindex` queue `queue` of the current namespace, registers the pool
    /// as its UMEM and binds it in `mode`.
    fn open(
        pool: &PacketPool,
        attach: &Arc<Attach>,
        ifindex: u32,
        queue: u32,
        rings: Rings,
        mode: Mode,
        sg: bool,
    ) -> Result<Xsk> {
        let sock = netns::socket(
            libc::AF_XDP,
            libc::SOCK_RAW,
            0,
            "cannot open an AF_XDP socket",
        )?;
        let fd = sock.as_raw_fd();
        let reg = libc::xdp_umem_reg {
            addr: pool.region_base() as u64,
            len: pool.region_len() as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(
            &fd,
            libc::SOL_XDP,
            XDP_UMEM_REG,
            &reg,
            "cannot register the packet pool as AF_XDP UMEM",
        )?;
        for (opt, n) in [
            (XDP_UMEM_FILL_RING, rings.rx),
            (XDP_UMEM_COMPLETION_RING, rings.tx),
            (XDP_RX_RING, rings.rx),
            (XDP_TX_RING, rings.tx),
        ] {
            setsockopt(&fd, libc::SOL_XDP, opt, &n, "cannot size an AF_XDP ring")?;
        }
        let off: libc::xdp_mmap_offsets = getsockopt(&fd, libc::SOL_XDP, XDP_MMAP_OFFSETS)
            .ok_or_else(|| netns::os_error("cannot read AF_XDP ring offsets"))?;
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let fill = Ring::map(fd, &off.fr, PGOFF_FILL, rings.rx, 8)?;
        let comp = Ring::map(fd, &off.cr, PGOFF_COMP, rings.tx, 8)?;
        let rx = Ring::map(fd, &off.rx, PGOFF_RX, rings.rx, desc)?;
        let tx = Ring::map(fd, &off.tx, PGOFF_TX, rings.tx, desc)?;
        let flags = XDP_USE_NEED_WAKEUP
            | if sg { XDP_USE_SG } else { 0 }
            | match mode {
                Mode::ZeroCopy => XDP_ZEROCOPY,
                Mode::Copy => XDP_COPY,
            };
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: a valid sockaddr_xdp.
        if unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        } != 0
        {
            let mut e = netns::os_error(&format!(
                "cannot bind an AF_XDP socket to queue {queue} of '{}' in {} mode",
                attach.ifname,
                if mode == Mode::ZeroCopy {
                    "zero-copy"
                } else {
                    "copy"
                }
            ));
            if e.code == libc::EBUSY {
                e.msg += " (another AF_XDP socket uses that queue)";
            }
            return Err(e);
        }
        let frames = pool.capacity();
        Ok(Xsk {
            fd: std::os::fd::IntoRawFd::into_raw_fd(sock),
            pool: pool.clone(),
            queue,
            attach: attach.clone(),
            fill,
            comp,
            rx,
            tx,
            mode,
            sg,
            rx_dropped: AtomicU64::new(0),
            tx_dropped: AtomicU64::new(0),
            rx_invalid: AtomicU64::new(0),
            comp_invalid: AtomicU64::new(0),
            partial_csums: false,
            busy_poll: false,
            rx_open: AtomicBool::new(false),
            tx_open: AtomicBool::new(false),
            tx_backlog: AtomicBool::new(false),
            rxs: UnsafeCell::new(RxSide {
                fill_prod: 0,
                fill_cons: 0,
                rx_cons: 0,
                held: HeldFrames::new(frames),
            }),
            txs: UnsafeCell::new(TxSide {
                tx_prod: 0,
                tx_cons: 0,
                comp_cons: 0,
                held: HeldFrames::new(frames),
            }),
        })
    }

    /// Has the kernel take the TX ring's descriptors up to `prod`. In copy mode one call
    /// sends at most 32 and answers EAGAIN while more remain or while the device queue is
    /// busy (a veth peer's ring is full); what stays on the ring would wait for the next
    /// send, which never comes when TCP is waiting for exactly those segments (the sender
    /// then stalls on retransmission timeouts). So the call is repeated while the kernel
    /// makes progress, bounded; a remainder sets `tx_backlog` for the receive side.
    /// Zero-copy drivers send from their own context: one call wakes them.
    fn kick_tx(&self, prod: u32) {
        let mut cons = self.tx.cons().load(Ordering::Acquire);
        let mut kicks = 0;
        let mut busy = true;
        while cons != prod && kicks < MAX_TX_KICKS {
            kicks += 1;
            // SAFETY: a wake-up call with no buffer.
            let r = unsafe {
                libc::sendto(
                    self.fd,
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if self.mode == Mode::ZeroCopy {
                return;
            }
            // Another call helps only if this one moved the ring and failed for a reason
            // that passes (budget spent, device busy); a call that moved nothing, or a link
            // that is down (ENETDOWN, ENXIO: the ring fills and later packets stay in the
            // batch, counted as drops by the caller), ends the loop.
            let retryable = r >= 0
                || matches!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                );
            let now = self.tx.cons().load(Ordering::Acquire);
            let progress = now != cons;
            cons = now;
            if !progress || !retryable {
                // A busy device drains: the receive side kicks again. A failing link would
                // only fail again on every poll.
                busy = retryable;
                break;
            }
        }
        self.tx_backlog
            .store(cons != prod && busy, Ordering::Relaxed);
    }

    /// Kicks a TX ring left with descriptors (see `kick_tx`), from the receive side.
    #[inline]
    fn retry_tx_backlog(&self) {
        if self.tx_backlog.load(Ordering::Relaxed) {
            self.kick_tx(self.tx.prod().load(Ordering::Acquire));
        }
    }

    fn stats(&self) -> libc::xdp_statistics {
        getsockopt(&self.fd, libc::SOL_XDP, XDP_STATISTICS).unwrap_or_else(|| {
            // SAFETY: plain data; all-zero is valid.
            unsafe { std::mem::zeroed() }
        })
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // Closing unbinds the socket (and removes it from the XSKMAP): from then on the
        // kernel writes no frame, so the frames it held go back to the pool.
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.fd) };
        if self.mode == Mode::ZeroCopy {
            // A zero-copy driver gives the UMEM up in deferred work after the close.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let mut cache = self.pool.cache();
        let sides = [&self.rxs.get_mut().held, &self.txs.get_mut().held];
        for held in sides {
            for idx in held.frames() {
                // SAFETY: the frame was ours, lent to the kernel, which has let it go.
                if let Some(p) = unsafe { self.pool.packet_at((idx as u64) << FRAME_SHIFT) } {
                    cache.free(p);
                }
            }
        }
        drop(cache);
        self.attach.release(self.queue);
    }
}

// ---------------------------------------------------------------------------------------
// Queues.

struct XskRx {
    x: Arc<Xsk>,
}

impl Drop for XskRx {
    fn drop(&mut self) {
        self.x.rx_open.store(false, Ordering::Release);
    }
}

impl XskRx {
    /// Tops the fill ring up with fresh frames, a burst at a time.
    #[inline]
    fn refill(&mut self, cache: &mut PoolCache) {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the RX side.
        let s = unsafe { &mut *x.rxs.get() };
        let mut room = x.fill.size - s.fill_prod.wrapping_sub(s.fill_cons);
        if room < MAX_BURST as u32 {
            s.fill_cons = x.fill.cons().load(Ordering::Acquire);
            room = x.fill.size - s.fill_prod.wrapping_sub(s.fill_cons);
            if room < MAX_BURST as u32 {
                return;
            }
        }
        if cache.pool().id() != x.pool.id() {
            return;
        }
        let mut tmp = PacketBatch::new();
        let start = s.fill_prod;
        while room >= MAX_BURST as u32 && cache.alloc_bulk(&mut tmp, MAX_BURST, 0) != 0 {
            for p in tmp.drain() {
                let idx = p.frame_index();
                // SAFETY: the slot is free (room counted it); the frame goes to the kernel.
                unsafe { *x.fill.addr(s.fill_prod) = (idx as u64) << FRAME_SHIFT };
                s.held.set(idx);
                s.fill_prod = s.fill_prod.wrapping_add(1);
                let _ = p.into_raw();
            }
            room -= MAX_BURST as u32;
        }
        if s.fill_prod != start {
            x.fill.prod().store(s.fill_prod, Ordering::Release);
            if x.fill.needs_wakeup() {
                // SAFETY: a wake-up call with no buffer.
                unsafe {
                    libc::recvfrom(
                        x.fd,
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            }
        }
    }
}

/// A packet that came in several descriptors (multi-buffer), starting `start` descriptors
/// past the consumer: gathered into one buffer (the fragments' frames are freed), or None if
/// the kernel has not published all of it yet. Returns the packet (None: dropped and
/// counted, no buffer that large) and the descriptors it used.
fn gather(
    x: &Xsk,
    s: &mut RxSide,
    cache: &mut PoolCache,
    start: usize,
    avail: usize,
) -> Option<(Option<bessemer_core::Packet>, usize)> {
    let desc = |j: usize| {
        // SAFETY: entries up to the producer index are filled (the caller's acquire).
        unsafe { std::ptr::read(x.rx.xdesc(s.rx_cons.wrapping_add(j as u32))) }
    };
    let mut n = 0;
    let mut total = 0;
    loop {
        if start + n >= avail {
            return None;
        }
        let d = desc(start + n);
        total += d.len as usize;
        n += 1;
        if d.options & XDP_PKT_CONTD == 0 {
            break;
        }
    }
    let mut out = cache.alloc_any(total);
    let mut at = 0;
    let mut invalid = false;
    for j in start..start + n {
        let d = desc(j);
        match xdp_desc::take_rx(&x.pool, &mut s.held, cache, d.addr, d.len) {
            Ok(f) => {
                if let Some(o) = out.as_mut() {
                    o.data_mut()[at..at + f.len()].copy_from_slice(f.data());
                }
                at += f.len();
                cache.free(f);
            }
            Err(_) => invalid = true,
        }
    }
    if invalid {
        // One bad fragment spoils the packet: what came with it is dropped with it.
        if let Some(o) = out.take() {
            cache.free(o);
        }
        x.rx_invalid.fetch_add(1, Ordering::Relaxed);
    } else if out.is_none() {
        x.rx_dropped.fetch_add(1, Ordering::Relaxed);
    }
    Some((out, n))
}

impl RxQueue for XskRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the RX side.
        let s = unsafe { &mut *x.rxs.get() };
        let avail = x.rx.prod().load(Ordering::Acquire).wrapping_sub(s.rx_cons) as usize;
        let want = max.min(batch.room());
        let mut used = 0;
        let mut got = 0;
        while got < want && used < avail {
            // SAFETY: entries up to the producer index are filled (acquire above).
            let d = unsafe { std::ptr::read(x.rx.xdesc(s.rx_cons.wrapping_add(used as u32))) };
            if d.options & XDP_PKT_CONTD != 0 {
                let Some((p, n)) = gather(x, s, cache, used, avail) else {
                    break;
                };
                used += n;
                if let Some(mut p) = p {
                    if x.partial_csums {
                        partial_csum::complete(p.data_mut());
                    }
                    // SAFETY: got < want <= batch.room() at entry.
                    unsafe { batch.push_unchecked(p) };
                    got += 1;
                }
                continue;
            }
            used += 1;
            let Ok(mut p) = xdp_desc::take_rx(&x.pool, &mut s.held, cache, d.addr, d.len) else {
                x.rx_invalid.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if x.partial_csums {
                partial_csum::complete(p.data_mut());
            }
            // SAFETY: got < want <= batch.room() at entry.
            unsafe { batch.push_unchecked(p) };
            got += 1;
        }
        if used > 0 {
            s.rx_cons = s.rx_cons.wrapping_add(used as u32);
            x.rx.cons().store(s.rx_cons, Ordering::Release);
        }
        self.refill(cache);
        self.x.retry_tx_backlog();
        if got == 0 && self.x.busy_poll {
            // SAFETY: a receive call with no buffer: it only runs the busy poll.
            unsafe {
                libc::recvfrom(
                    self.x.fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        got
    }
}

struct XskTx {
    x: Arc<Xsk>,
}

impl Drop for XskTx {
    fn drop(&mut self) {
        self.x.tx_open.store(false, Ordering::Release);
    }
}

impl XskTx {
    /// Frees the frames the kernel has finished sending.
    #[inline]
    fn reap(&mut self, cache: &mut PoolCache) {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the TX side.
        let s = unsafe { &mut *x.txs.get() };
        let prod = x.comp.prod().load(Ordering::Acquire);
        if prod == s.comp_cons {
            return;
        }
        let mut tmp = PacketBatch::new();
        while s.comp_cons != prod {
            // SAFETY: entries up to the producer index are filled.
            let addr = unsafe { *x.comp.addr(s.comp_cons) };
            s.comp_cons = s.comp_cons.wrapping_add(1);
            match xdp_desc::take_completed(&x.pool, &mut s.held, addr) {
                Ok(p) => {
                    // SAFETY: the batch is flushed whenever it is full.
                    unsafe { tmp.push_unchecked(p) };
                    if tmp.is_full() {
                        cache.free_bulk(&mut tmp);
                    }
                }
                Err(_) => {
                    x.comp_invalid.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        x.comp.cons().store(prod, Ordering::Release);
        cache.free_bulk(&mut tmp);
    }
}

impl TxQueue for XskTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        self.reap(cache);
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the TX side.
        let s = unsafe { &mut *x.txs.get() };
        let mut room = x.tx.size - s.tx_prod.wrapping_sub(s.tx_cons);
        if (room as usize) < batch.len() {
            s.tx_cons = x.tx.cons().load(Ordering::Acquire);
            room = x.tx.size - s.tx_prod.wrapping_sub(s.tx_cons);
        }
        let ours = x.pool.id();
        let can_copy = cache.pool().id() == ours;
        let mut rest = PacketBatch::new();
        let mut sent = 0;
        for p in batch.drain() {
            let len = p.len();
            if room == 0 || !rest.is_empty() || len == 0 {
                // SAFETY: rest holds at most the batch's own packets.
                unsafe { rest.push_unchecked(p) };
                continue;
            }
            if len > UMEM_DATA {
                // A jumbo packet: copied into a chain of UMEM frames.
                let k = len.div_ceil(UMEM_DATA);
                if !x.sg {
                    // Never sendable on this socket: dropped here, counted by the port.
                    x.tx_dropped.fetch_add(1, Ordering::Relaxed);
                    cache.free(p);
                    continue;
                }
                let mut chain = PacketBatch::new();
                if !can_copy || k > room as usize || cache.alloc_bulk(&mut chain, k, 0) != k {
                    // SAFETY: as above.
                    unsafe { rest.push_unchecked(p) };
                    continue;
                }
                for (i, (mut q, part)) in chain.drain().zip(p.data().chunks(UMEM_DATA)).enumerate()
                {
                    q.set_data_bounds(HEADROOM, part.len());
                    q.data_mut().copy_from_slice(part);
                    let idx = q.frame_index();
                    // SAFETY: the slot is free (room counted k of them).
                    unsafe {
                        x.tx.xdesc(s.tx_prod).write(libc::xdp_desc {
                            addr: ((idx as u64) << FRAME_SHIFT) + HEADROOM as u64,
                            len: part.len() as u32,
                            options: if i + 1 < k { XDP_PKT_CONTD } else { 0 },
                        })
                    };
                    s.held.set(idx);
                    let _ = q.into_raw();
                    s.tx_prod = s.tx_prod.wrapping_add(1);
                }
                cache.free(p);
                room -= k as u32;
                sent += 1;
                continue;
            }
            // A frame of another pool is not in the UMEM, and a shared frame might be on
            // another ring too: both go out as a copy in a fresh frame.
            let p = if p.pool_id() == ours && !p.is_shared() {
                p
            } else if can_copy {
                match cache.alloc(0) {
                    Some(mut q) => {
                        // Up to a whole UMEM frame after the headroom (a jumbo frame from
                        // another port may fill more than a fresh buffer's data area).
                        q.set_data_bounds(HEADROOM, len);
                        q.data_mut().copy_from_slice(p.data());
                        cache.free(p);
                        q
                    }
                    None => {
                        // SAFETY: as above.
                        unsafe { rest.push_unchecked(p) };
                        continue;
                    }
                }
            } else {
                // SAFETY: as above.
                unsafe { rest.push_unchecked(p) };
                continue;
            };
            let idx = p.frame_index();
            // SAFETY: the slot is free (room counted it).
            unsafe {
                x.tx.xdesc(s.tx_prod).write(libc::xdp_desc {
                    addr: ((idx as u64) << FRAME_SHIFT) + p.data_offset() as u64,
                    len: len as u32,
                    options: 0,
                })
            };
            s.held.set(idx);
            let _ = p.into_raw();
            s.tx_prod = s.tx_prod.wrapping_add(1);
            room -= 1;
            sent += 1;
        }
        batch.append(&mut rest);
        if sent > 0 {
            x.tx.prod().store(s.tx_prod, Ordering::Release);
        }
        if x.tx.needs_wakeup() && s.tx_prod != x.tx.cons().load(Ordering::Relaxed) {
            x.kick_tx(s.tx_prod);
        }
        sent
    }
}

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

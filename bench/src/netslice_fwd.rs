//! NetSlice's comparison (issue 11, seed 001 §4): small standalone forwarders between two
//! interfaces that differ only in the packet I/O API they use, so that the API is what the
//! benchmark measures (none goes through the Bessemer pipeline). Each forwards both ways,
//! one frame or one batch at a time, on a thread pinned to one core, spinning (non-blocking
//! calls), until stopped or its deadline passes.
//!
//! * `pcap`: an AF_PACKET SOCK_RAW socket per interface, one `recv` and one `send` per frame
//!   (libpcap's classic path: `pcap_next` + `pcap_inject`).
//! * `pcap-mmap`: an AF_PACKET socket per interface with a TPACKET_V2 RX ring and TX ring
//!   mapped into the process (libpcap's mmap mode for receive, the TX ring for sending):
//!   frames are copied from the RX slot into a TX slot and a `send(NULL, 0)` per sweep kicks
//!   the TX ring.
//! * `mmsg`: `recvmmsg` / `sendmmsg` of up to `batch` frames per call.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The packet I/O API a forwarder uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// One `recv` + one `send` per frame.
    Pcap,
    /// TPACKET_V2 RX and TX rings.
    PcapMmap,
    /// `recvmmsg` / `sendmmsg` batches of this many frames.
    Mmsg(usize),
}

/// Frame counters of a forwarder (both directions together); every frame received is
/// either forwarded or counted under a drop reason.
#[derive(Default)]
pub struct FwdStats {
    /// Frames received.
    pub rx: AtomicU64,
    /// Frames handed to the other interface.
    pub tx: AtomicU64,
    /// Dropped: the other side's send failed (`send`/`sendmmsg` error or short count).
    pub drop_send_failed: AtomicU64,
    /// Dropped: no free slot in the other side's TX ring (`pcap-mmap`).
    pub drop_tx_ring_full: AtomicU64,
    /// Dropped: the frame did not fit a slot or buffer.
    pub drop_too_long: AtomicU64,
}

impl FwdStats {
    /// The counters as a JSON object.
    pub fn json(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{{\"rx\":{},\"tx\":{},\"drop_send_failed\":{},\"drop_tx_ring_full\":{},\"drop_too_long\":{}}}",
            g(&self.rx),
            g(&self.tx),
            g(&self.drop_send_failed),
            g(&self.drop_tx_ring_full),
            g(&self.drop_too_long)
        )
    }
}

/// A running forwarder thread (named `bench-fwd`, so the benchmark counts its CPU time).
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    /// Its counters.
    pub stats: Arc<FwdStats>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

/// Largest frame a forwarder moves (slot and buffer size).
const BUF: usize = 2048;
/// Bytes of a TPACKET_V2 slot before the frame in a TX slot (TPACKET_ALIGN(sizeof
/// tpacket2_hdr)); the kernel reads TX frames from there.
const TX_DATA_OFFSET: usize = 32;
/// Where the kernel puts the sockaddr_ll in an RX slot; sll_pkttype is its byte 10.
const SLL_OFFSET: usize = 32;
/// Slots per ring (RX and TX each): 2 blocks of 1 MiB with 2 KiB slots.
const RING_BLOCK: u32 = 1 << 20;
const RING_BLOCKS: u32 = 2;
/// Most frames moved per direction before the other direction gets its turn.
const SWEEP: usize = 256;

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn pin_self(core: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(os_err("sched_setaffinity"));
        }
    }
    Ok(())
}

fn ifindex(ifname: &str) -> Result<i32, String> {
    let c = std::ffi::CString::new(ifname).map_err(|_| format!("bad interface name {ifname:?}"))?;
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(format!("no interface {ifname}"));
    }
    Ok(i as i32)
}

fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, v: &T, what: &str) -> Result<(), String> {
    // SAFETY: v is a valid T of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r != 0 {
        return Err(os_err(what));
    }
    Ok(())
}

/// An AF_PACKET socket on `ifname` that ignores frames sent from this host; `rings` sets up
/// TPACKET_V2 RX and TX rings before binding (so no frame lands outside them).
fn packet_socket(ifname: &str, rings: bool) -> Result<OwnedFd, String> {
    let idx = ifindex(ifname)?;
    // Protocol 0: receives nothing until bound with ETH_P_ALL below.
    // SAFETY: plain socket call; the fd is owned right after.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err("AF_PACKET socket"));
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Our own sends on the other socket would otherwise come back as PACKET_OUTGOING.
    setsockopt(
        &fd,
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        &1i32,
        "PACKET_IGNORE_OUTGOING",
    )?;
    if rings {
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as i32),
            "PACKET_VERSION TPACKET_V2",
        )?;
        let req = libc::tpacket_req {
            tp_block_size: RING_BLOCK,
            tp_block_nr: RING_BLOCKS,
            tp_frame_size: BUF as u32,
            tp_frame_nr: RING_BLOCK / BUF as u32 * RING_BLOCKS,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req, "RX ring")?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req, "TX ring")?;
    }
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = idx;
    // SAFETY: binds to a valid sockaddr_ll.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r != 0 {
        return Err(os_err(&format!("bind to {ifname}")));
    }
    Ok(fd)
}

impl Forwarder {
    /// Opens the sockets on `a` and `b` (in the caller's namespace) and starts forwarding
    /// between them with `api` on a thread pinned to `core`, for at most `limit`.
    pub fn start(
        api: Api,
        a: &str,
        b: &str,
        core: usize,
        limit: Duration,
    ) -> Result<Forwarder, String> {
        if let Api::Mmsg(n) = api {
            if n == 0 || n > 1024 {
                return Err(format!("mmsg batch {n}: must be 1..=1024"));
            }
        }
        let rings = api == Api::PcapMmap;
        let (fa, fb) = (packet_socket(a, rings)?, packet_socket(b, rings)?);
        let (ra, rb) = if rings {
            (
                Some(Rings::map(fa.as_raw_fd())?),
                Some(Rings::map(fb.as_raw_fd())?),
            )
        } else {
            (None, None)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(FwdStats::default());
        let (st, sa) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("bench-fwd".into())
            .spawn(move || -> Result<(), String> {
                pin_self(core)?;
                let deadline = Instant::now() + limit;
                match (api, ra, rb) {
                    (Api::Pcap, ..) => pcap_loop(&fa, &fb, &st, &sa, deadline),
                    (Api::Mmsg(n), ..) => mmsg_loop(&fa, &fb, n, &st, &sa, deadline),
                    (Api::PcapMmap, Some(mut ra), Some(mut rb)) => {
                        mmap_loop(&fa, &mut ra, &fb, &mut rb, &st, &sa, deadline);
                        Ok(())
                    }
                    _ => Err("pcap-mmap without rings".into()),
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Forwarder {
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Stops the thread; its error if it failed.
    pub fn finish(mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("forwarder panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// True when the loop must end; reads the clock only every 4096 calls.
fn done(n: &mut u32, stop: &AtomicBool, deadline: Instant) -> bool {
    *n = n.wrapping_add(1);
    if !(*n).is_multiple_of(4096) {
        return false;
    }
    stop.load(Ordering::Relaxed) || Instant::now() >= deadline
}

fn pcap_loop(
    a: &OwnedFd,
    b: &OwnedFd,
    stop: &AtomicBool,
    s: &FwdStats,
    deadline: Instant,
) -> Result<(), String> {
    let mut buf = [0u8; BUF];
    let mut n = 0;
    while !done(&mut n, stop, deadline) {
        for (from, to) in [(a, b), (b, a)] {
            // SAFETY: receives into our buffer.
            let r = unsafe {
                libc::recv(
                    from.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    BUF,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if r <= 0 {
                continue;
            }
            s.rx.fetch_add(1, Ordering::Relaxed);
            if r as usize > BUF {
                s.drop_too_long.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // SAFETY: sends r bytes of our buffer.
            let w = unsafe {
                libc::send(
                    to.as_raw_fd(),
                    buf.as_ptr() as *const libc::c_void,
                    r as usize,
                    libc::MSG_DONTWAIT,
                )
            };
            if w == r {
                s.tx.fetch_add(1, Ordering::Relaxed);
            } else {
                s.drop_send_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

fn mmsg_loop(
    a: &OwnedFd,
    b: &OwnedFd,
    batch: usize,
    stop: &AtomicBool,
    s: &FwdStats,
    deadline: Instant,
) -> Result<(), String> {
    let mut bufs = vec![0u8; BUF * batch];
    let mut iov: Vec<libc::iovec> = bufs
        .chunks_mut(BUF)
        .map(|c| libc::iovec {
            iov_base: c.as_mut_ptr() as *mut libc::c_void,
            iov_len: BUF,
        })
        .collect();
    // SAFETY: mmsghdr is plain data; each points at its own iovec, which outlives it.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut n = 0;
    while !done(&mut n, stop, deadline) {
        for (from, to) in [(a, b), (b, a)] {
            for v in iov.iter_mut() {
                v.iov_len = BUF;
            }
            // SAFETY: up to `batch` messages into our buffers.
            let got = unsafe {
                libc::recvmmsg(
                    from.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    batch as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if got <= 0 {
                continue;
            }
            let got = got as usize;
            s.rx.fetch_add(got as u64, Ordering::Relaxed);
            let mut keep = 0;
            for i in 0..got {
                let len = msgs[i].msg_len as usize;
                if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > BUF {
                    s.drop_too_long.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // Send the frames in place: point message `keep` at buffer i.
                iov[keep].iov_base = iov[i].iov_base;
                iov[keep].iov_len = len;
                keep += 1;
            }
            // SAFETY: `keep` messages pointing at received bytes in our buffers.
            let sent = unsafe {
                libc::sendmmsg(
                    to.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    keep as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            let sent = sent.max(0) as usize;
            s.tx.fetch_add(sent as u64, Ordering::Relaxed);
            s.drop_send_failed
                .fetch_add((keep - sent) as u64, Ordering::Relaxed);
            // Buffers back to their own messages.
            for (v, c) in iov.iter_mut().zip(bufs.chunks_mut(BUF)) {
                v.iov_base = c.as_mut_ptr() as *mut libc::c_void;
            }
        }
    }
    Ok(())
}

/// A socket's TPACKET_V2 RX ring and TX ring, mapped together (RX first).
struct Rings {
    base: *mut u8,
    len: usize,
    frames: usize,
    rx_cur: usize,
    tx_cur: usize,
}

// SAFETY: the mapping is used by one thread at a time (moved into the forwarder).
unsafe impl Send for Rings {}

impl Rings {
    fn map(fd: i32) -> Result<Rings, String> {
        let ring = (RING_BLOCK * RING_BLOCKS) as usize;
        // SAFETY: maps the socket's rings; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * ring,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap of the packet rings"));
        }
        Ok(Rings {
            base: p as *mut u8,
            len: 2 * ring,
            frames: ring / BUF,
            rx_cur: 0,
            tx_cur: 0,
        })
    }

    fn rx(&self, i: usize) -> *mut u8 {
        // SAFETY: i < frames: inside the RX half.
        unsafe { self.base.add(i * BUF) }
    }

    fn tx(&self, i: usize) -> *mut u8 {
        // SAFETY: i < frames: inside the TX half.
        unsafe { self.base.add(self.len / 2 + i * BUF) }
    }

    fn status(slot: *mut u8) -> &'static AtomicU32 {
        // SAFETY: tp_status is the aligned u32 at offset 0 of a slot, shared with the kernel;
        // the mapping outlives every use (it lives as long as the Rings).
        unsafe { &*(slot as *const AtomicU32) }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Moves up to SWEEP frames from `from`'s RX ring into `to`'s TX ring; true if any was queued.
fn mmap_sweep(from: &mut Rings, to: &mut Rings, s: &FwdStats) -> bool {
    let mut queued = false;
    for _ in 0..SWEEP {
        let slot = from.rx(from.rx_cur);
        let st = Rings::status(slot);
        let status = st.load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            break;
        }
        // SAFETY: the kernel wrote a tpacket2_hdr at the start of the slot.
        let h = unsafe { &*(slot as *const libc::tpacket2_hdr) };
        let (mac, snap, len) = (h.tp_mac as usize, h.tp_snaplen as usize, h.tp_len as usize);
        // SAFETY: inside the slot.
        let outgoing = unsafe { *slot.add(SLL_OFFSET + 10) } == libc::PACKET_OUTGOING;
        if !outgoing {
            s.rx.fetch_add(1, Ordering::Relaxed);
            if mac + snap > BUF || snap < len || TX_DATA_OFFSET + snap > BUF {
                s.drop_too_long.fetch_add(1, Ordering::Relaxed);
            } else {
                let t = to.tx(to.tx_cur);
                let ts = Rings::status(t);
                let tstatus = ts.load(Ordering::Acquire);
                if tstatus & libc::TP_STATUS_WRONG_FORMAT != 0 {
                    // The kernel refused the slot's last frame: it was counted as sent and
                    // is lost; count it and reuse the slot.
                    s.drop_send_failed.fetch_add(1, Ordering::Relaxed);
                    s.tx.fetch_sub(1, Ordering::Relaxed);
                }
                if tstatus == libc::TP_STATUS_AVAILABLE
                    || tstatus & libc::TP_STATUS_WRONG_FORMAT != 0
                {
                    // SAFETY: snap bytes at mac inside the RX slot, copied to the TX slot's
                    // data area (bounds checked above); the header is ours until we hand it
                    // over with the status store.
                    unsafe {
                        std::ptr::copy_nonoverlapping(slot.add(mac), t.add(TX_DATA_OFFSET), snap);
                        let th = &mut *(t as *mut libc::tpacket2_hdr);
                        th.tp_len = snap as u32;
                        th.tp_snaplen = snap as u32;
                    }
                    ts.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
                    to.tx_cur = (to.tx_cur + 1) % to.frames;
                    s.tx.fetch_add(1, Ordering::Relaxed);
                    queued = true;
                } else {
                    s.drop_tx_ring_full.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        st.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        from.rx_cur = (from.rx_cur + 1) % from.frames;
    }
    queued
}

fn mmap_loop(
    fa: &OwnedFd,
    ra: &mut Rings,
    fb: &OwnedFd,
    rb: &mut Rings,
    stop: &AtomicBool,
    s: &FwdStats,
    deadline: Instant,
) {
    let kick = |fd: &OwnedFd| {
        // SAFETY: a zero-length send: transmits the TX ring's requested slots.
        unsafe { libc::send(fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
    };
    let mut n = 0;
    while !done(&mut n, stop, deadline) {
        if mmap_sweep(ra, rb, s) {
            kick(fb);
        }
        if mmap_sweep(rb, ra, s) {
            kick(fa);
        }
    }
}

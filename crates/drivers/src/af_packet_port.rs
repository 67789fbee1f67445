//! AFPacketPort: a Linux interface through AF_PACKET sockets. Each incoming queue is a socket
//! with a TPACKET_V2 mmap RX ring of 2 KiB slots, walked without syscalls; a slot goes back
//! to the kernel as soon as its frame is copied into a pool buffer. TPACKET_V2 rather than
//! V3: V3 hands over a partly filled block only after a timer (at least 1 ms), which made a
//! ping through the switch take 1-2 ms; V2 hands over each frame at once, for the same
//! throughput here. A frame longer than a slot (jumbo, super-frame) is queued whole on the
//! socket (PACKET_COPY_THRESH) and read with one `recv`. Several incoming queues are joined
//! by PACKET_FANOUT (flow hash). Each outgoing queue is a socket that receives nothing and
//! sends a whole batch per `sendmmsg` call.
//!
//! Offloads: veth and GRO hand AF_PACKET TCP super-frames (up to 64 KiB) and packets whose
//! L4 checksum is left to the NIC. The RX sockets ask for a virtio-net header per frame
//! (PACKET_VNET_HDR), and the driver segments TCP (IPv4/IPv6) and UDP (GSO_UDP_L4)
//! super-frames in software and completes partial checksums, so forwarded traffic is valid on
//! the wire whatever the offload settings of the interface or its peer. Frames larger than a
//! pool buffer (jumbo MTUs) go into the pool's large-frame companion; a super-frame is cut
//! into segments of the sender's size when they fit such a buffer (TCP is cut finer if not).
//! Unless `keep_offloads` is set, GRO and LRO are switched off on the
//! interface while the port exists (less work for the kernel and for the segmenter).
//!
//! PCAPPort (BESS's libpcap driver) is this driver with `dev` as interface: see `pcap_port`.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PoolCache, Result, Value, MAX_BURST};

use crate::ifctl::{
    self, ethtool_get, ethtool_set, getsockopt, setsockopt, ETHTOOL_GFLAGS, ETHTOOL_GGRO,
    ETHTOOL_SFLAGS, ETHTOOL_SGRO, ETH_FLAG_LRO,
};
use crate::netns;
use crate::vnet::{
    self, oversized_tcp, Gso, Vnet, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4,
    VNET_HDR_LEN,
};

/// What a port is opened with (AFPacketPortArg, or PCAPPort's `dev`).
#[derive(Clone, Debug)]
pub struct Config {
    /// The interface.
    pub ifname: String,
    /// Its network namespace (empty: the daemon's).
    pub netns: String,
    /// Put the interface in promiscuous mode.
    pub promiscuous: bool,
    /// RX ring block size in bytes (ring memory = block_size × num_blocks, in 2 KiB slots).
    pub block_size: u32,
    /// RX ring blocks.
    pub num_blocks: u32,
    /// Leave GRO/LRO as they are.
    pub keep_offloads: bool,
    /// Driver name for messages.
    pub driver: &'static str,
}

/// Default RX ring block size (1 MiB: 512 slots).
pub const DEFAULT_BLOCK_SIZE: u32 = 1 << 20;
/// Default number of RX ring blocks.
pub const DEFAULT_NUM_BLOCKS: u32 = 8;
/// Most RX ring memory per queue.
const MAX_RING_BYTES: u64 = 1 << 30;
/// Bytes per RX ring slot (header, offload header and frame): a full-size Ethernet frame
/// fits; longer ones (jumbo frames, super-frames) are read whole from the socket.
const FRAME_SLOT: usize = 2048;
/// Where the kernel puts the sockaddr_ll in a slot (after the aligned tpacket2_hdr).
const SLL_OFFSET: usize = 32;
/// Longest frame read from the socket (a super-frame: the IP length limit plus headers).
const STAGE_FRAME: usize = 65536 + 64;

impl Config {
    /// Reads an AFPacketPortArg.
    pub fn from_arg(arg: &Value) -> Result<Config> {
        const MSG: &str = "bessemer.pb.AFPacketPortArg";
        let mut a = Args::new(arg, MSG)?;
        let ifname = a.str("ifname")?.unwrap_or("").to_string();
        let netns = a.str("netns")?.unwrap_or("").to_string();
        let promiscuous = a.bool("promiscuous")?.unwrap_or(false);
        let block_size = a.uint("block_size", u32::MAX as u64)?.unwrap_or(0) as u32;
        let num_blocks = a.uint("num_blocks", u32::MAX as u64)?.unwrap_or(0) as u32;
        let keep_offloads = a.bool("keep_offloads")?.unwrap_or(false);
        a.finish()?;
        if ifname.is_empty() {
            return Err(Error::invalid(format!(
                "{MSG}.ifname: an interface name is required"
            )));
        }
        let page = page_size();
        let block_size = if block_size == 0 {
            DEFAULT_BLOCK_SIZE
        } else {
            block_size
        };
        if !block_size.is_power_of_two() || (block_size as usize) < page {
            return Err(Error::invalid(format!(
                "{MSG}.block_size: {block_size} must be a power of two of at least {page} bytes"
            )));
        }
        let num_blocks = if num_blocks == 0 {
            DEFAULT_NUM_BLOCKS
        } else {
            num_blocks
        };
        if block_size as u64 * num_blocks as u64 > MAX_RING_BYTES {
            return Err(Error::invalid(format!(
                "{MSG}.num_blocks: {num_blocks} blocks of {block_size} bytes exceed {MAX_RING_BYTES} bytes per queue"
            )));
        }
        Ok(Config {
            ifname,
            netns,
            promiscuous,
            block_size,
            num_blocks,
            keep_offloads,
            driver: "AFPacketPort",
        })
    }
}

fn page_size() -> usize {
    // SAFETY: trivial libc call.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

// ---- interfaces in use ----

/// (namespace device, namespace inode, ifindex) of every interface a port holds.
static IN_USE: Mutex<Option<HashSet<(u64, u64, u32)>>> = Mutex::new(None);

/// Holds an interface for one port; released on drop.
struct IfClaim((u64, u64, u32));

impl IfClaim {
    fn take(key: (u64, u64, u32), what: &str) -> Result<IfClaim> {
        let mut g = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if !g.get_or_insert_with(HashSet::new).insert(key) {
            return Err(Error::busy(format!(
                "{what} is already used by another port"
            )));
        }
        Ok(IfClaim(key))
    }
}

impl Drop for IfClaim {
    fn drop(&mut self) {
        let mut g = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = g.as_mut() {
            s.remove(&self.0);
        }
    }
}

fn current_netns_id() -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| (m.dev(), m.ino()))
        .unwrap_or((0, 0))
}

// ---- the RX ring ----

/// A shared memory mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; exclusive use of a ring is ensured by queue claims.
unsafe impl Send for Mapping {}
// SAFETY: as above; slot status words shared with the kernel are read and written atomically.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from mmap.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Where a queue stopped in its ring (kept across queue owners).
#[derive(Clone, Copy, Default)]
struct Cursor {
    /// Current frame slot.
    frame: usize,
    /// Payload bytes of the current super-frame already segmented.
    seg: usize,
}

/// One incoming queue: its socket, ring and counters.
struct RxShared {
    fd: OwnedFd,
    ring: Mapping,
    num_frames: usize,
    cursor: Mutex<Option<Cursor>>,
    /// Kernel drops read so far (PACKET_STATISTICS resets on read).
    kernel_drops: AtomicU64,
    /// Frames the driver dropped (too big for a buffer, truncated, malformed offload).
    own_drops: AtomicU64,
    /// Super-frames (and jumbo TCP segments) cut into buffer-sized segments.
    segmented: AtomicU64,
}

impl RxShared {
    fn drops(&self) -> u64 {
        if let Some(s) =
            getsockopt::<libc::tpacket_stats>(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)
        {
            self.kernel_drops
                .fetch_add(s.tp_drops as u64, Ordering::Relaxed);
        }
        self.kernel_drops.load(Ordering::Relaxed) + self.own_drops.load(Ordering::Relaxed)
    }
}

struct RxQ {
    sh: Arc<RxShared>,
    base: *mut u8,
    cur: Cursor,
    drops: u64,
    segmented: u64,
    /// Largest segment buffer, known on the first super-frame.
    seg_cap: Option<usize>,
    /// A frame too long for its ring slot, read whole from the socket (made on first use).
    stage: Vec<u8>,
    /// Bytes in `stage` that belong to the current slot (0: not read yet).
    staged: usize,
}

// SAFETY: the queue exclusively owns its ring position; the pointer is into a mapping kept
// alive by `sh`.
unsafe impl Send for RxQ {}

impl Drop for RxQ {
    fn drop(&mut self) {
        if self.staged > 0 {
            // The next owner could not read this frame again from the socket: it is lost.
            self.drops += 1;
            self.release_frame();
        }
        self.flush_drops();
        *self.sh.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.cur);
    }
}

/// What became of one frame.
enum Step {
    /// Fully consumed (packets appended, or dropped and counted).
    Done,
    /// Batch full or pool empty: resume this frame next time.
    Stop,
}

impl RxQ {
    fn flush_drops(&mut self) {
        if self.drops > 0 {
            self.sh.own_drops.fetch_add(self.drops, Ordering::Relaxed);
            self.drops = 0;
        }
        if self.segmented > 0 {
            self.sh
                .segmented
                .fetch_add(self.segmented, Ordering::Relaxed);
            self.segmented = 0;
        }
    }

    /// The header of frame slot `i`.
    #[inline]
    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: i < num_frames, inside the mapping.
        unsafe { self.base.add(i * FRAME_SLOT) }
    }

    #[inline]
    fn slot_status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: tp_status is the aligned u32 at offset 0 of a tpacket2_hdr, shared with
        // the kernel.
        unsafe { &*(self.slot(i) as *const AtomicU32) }
    }

    /// Hands the current slot back to the kernel and moves to the next.
    #[inline]
    fn release_frame(&mut self) {
        self.slot_status(self.cur.frame)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.cur.frame = (self.cur.frame + 1) % self.sh.num_frames;
        self.cur.seg = 0;
        self.staged = 0;
    }

    /// Reads the whole frame of a TP_STATUS_COPY slot from the socket into `stage`; false
    /// (counted) if it is not there or longer than any frame.
    fn read_whole(&mut self) -> bool {
        if self.stage.is_empty() {
            self.stage = vec![0; VNET_HDR_LEN + STAGE_FRAME];
        }
        // SAFETY: reads at most stage.len() bytes into our buffer.
        let n = unsafe {
            libc::recv(
                self.sh.fd.as_raw_fd(),
                self.stage.as_mut_ptr() as *mut libc::c_void,
                self.stage.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < (VNET_HDR_LEN + 14) as isize || n as usize > self.stage.len() {
            self.drops += 1;
            return false;
        }
        self.staged = n as usize;
        true
    }

    /// Copies (or segments) the frame at the cursor into `batch`.
    fn take_frame(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> Step {
        let b = self.slot(self.cur.frame);
        // SAFETY: the kernel wrote a tpacket2_hdr at the start of our slot.
        let h = unsafe { &*(b as *const libc::tpacket2_hdr) };
        let (mac, snap, len, status) = (
            h.tp_mac as usize,
            h.tp_snaplen as usize,
            h.tp_len as usize,
            h.tp_status,
        );
        let copy = status & libc::TP_STATUS_COPY != 0;
        // sockaddr_ll follows the aligned header; sll_pkttype is its byte 10.
        if mac + snap > FRAME_SLOT || mac < VNET_HDR_LEN || SLL_OFFSET + 11 > FRAME_SLOT {
            if copy && self.staged == 0 {
                self.read_whole();
            }
            self.drops += 1;
            return Step::Done;
        }
        // SAFETY: bounds checked above.
        let pkttype = unsafe { *b.add(SLL_OFFSET + 10) };
        if pkttype == libc::PACKET_OUTGOING {
            if copy && self.staged == 0 {
                self.read_whole();
            }
            return Step::Done;
        }
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                h.tp_vlan_tpid
            } else {
                0x8100
            };
            (tpid, h.tp_vlan_tci)
        });
        if copy {
            // Longer than the slot: the whole frame waits on the socket, in ring order.
            if self.staged == 0 && !self.read_whole() {
                return Step::Done;
            }
            let stage = std::mem::take(&mut self.stage);
            let (vh, frame) = stage[..self.staged].split_at(VNET_HDR_LEN);
            let step = self.deliver(cache, batch, max, frame, Vnet::parse(vh), vlan);
            self.stage = stage;
            return step;
        }
        if snap < len || snap < 14 {
            self.drops += 1;
            return Step::Done;
        }
        // SAFETY: frame bytes and the vnet header before them lie inside the slot.
        let (frame, vh) = unsafe {
            let f = b.add(mac);
            (
                std::slice::from_raw_parts(f, snap),
                std::slice::from_raw_parts(f.sub(VNET_HDR_LEN), VNET_HDR_LEN),
            )
        };
        self.deliver(cache, batch, max, frame, Vnet::parse(vh), vlan)
    }

    /// Copies or segments one whole frame (with its offload header) into `batch`.
    fn deliver(
        &mut self,
        cache: &mut PoolCache,
        batch: &mut PacketBatch,
        max: usize,
        frame: &[u8],
        vnet: Vnet,
        vlan: Option<(u16, u16)>,
    ) -> Step {
        let snap = frame.len();
        match vnet.gso_type & !GSO_ECN {
            GSO_NONE => {
                let Some(mut p) = cache.alloc_any(snap) else {
                    if snap <= cache.data_capacity() {
                        return Step::Stop;
                    }
                    // No buffer this large: a TCP segment is cut like a super-frame; anything
                    // else is lost.
                    if let Some(v) = oversized_tcp(frame) {
                        return self.segment(cache, batch, max, frame, v, vlan);
                    }
                    self.drops += 1;
                    return Step::Done;
                };
                let d = p.data_mut();
                d.copy_from_slice(frame);
                if !vnet.finish_csum(d) {
                    cache.free(p);
                    self.drops += 1;
                    return Step::Done;
                }
                if let Some(t) = vlan {
                    insert_vlan(&mut p, t);
                }
                // SAFETY: the caller guarantees room.
                unsafe { batch.push_unchecked(p) };
                Step::Done
            }
            GSO_TCPV4 | GSO_TCPV6 | GSO_UDP_L4 => {
                self.segment(cache, batch, max, frame, vnet, vlan)
            }
            _ => {
                self.drops += 1;
                Step::Done
            }
        }
    }

    /// Cuts a TCP or UDP super-frame into segments that each fit a buffer, resuming at
    /// `cur.seg` payload bytes.
    fn segment(
        &mut self,
        cache: &mut PoolCache,
        batch: &mut PacketBatch,
        max: usize,
        f: &[u8],
        vnet: Vnet,
        vlan: Option<(u16, u16)>,
    ) -> Step {
        let cap = *self
            .seg_cap
            .get_or_insert_with(|| vnet::segment_capacity(cache));
        let Some(g) = Gso::parse(f, vnet, cap) else {
            self.drops += 1;
            return Step::Done;
        };
        let put_tag = |p: &mut bessemer_core::Packet| {
            if let Some(t) = vlan {
                insert_vlan(p, t);
            }
        };
        if !vnet::segment_into(cache, batch, max, f, &g, &mut self.cur.seg, put_tag) {
            return Step::Stop;
        }
        self.segmented += 1;
        Step::Done
    }
}

/// Puts back the VLAN tag the kernel moved into the frame header.
fn insert_vlan(p: &mut bessemer_core::Packet, (tpid, tci): (u16, u16)) {
    if p.prepend(4).is_some() {
        let d = p.data_mut();
        d.copy_within(4..16, 0);
        d[12..14].copy_from_slice(&tpid.to_be_bytes());
        d[14..16].copy_from_slice(&tci.to_be_bytes());
    }
}

impl RxQueue for RxQ {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let start = batch.len();
        let max = (start + max).min(MAX_BURST);
        while batch.len() < max {
            let st = self.slot_status(self.cur.frame).load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            match self.take_frame(cache, batch, max) {
                Step::Stop => break,
                Step::Done => self.release_frame(),
            }
        }
        if self.drops | self.segmented > 0 {
            self.flush_drops();
        }
        batch.len() - start
    }
}

// ---- TX ----

struct TxShared {
    fd: OwnedFd,
    /// Packets the kernel refused individually (too big for the MTU, malformed).
    own_drops: AtomicU64,
}

struct TxQ {
    sh: Arc<TxShared>,
}

impl TxQueue for TxQ {
    /// Why sendmmsg and not a TX ring: the kernel copies each packet into an skb either way
    /// (with a ring we would first copy into the ring), one call per batch is the same number
    /// of syscalls as kicking a ring, and sendmmsg reports per-packet errors at once, with no
    /// ring slots to track for completion. The buffers are free as soon as it returns.
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let n = batch.len();
        if n == 0 {
            return 0;
        }
        // SAFETY: plain data, zero is valid.
        let mut iov: [libc::iovec; MAX_BURST] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BURST] = unsafe { std::mem::zeroed() };
        for (i, p) in batch.pkts().iter().enumerate() {
            let d = p.data();
            iov[i] = libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // Per message: 0 sent, 1 refused by the kernel (dropped here and counted).
        let mut fate = [0u8; MAX_BURST];
        let mut i = 0;
        let mut done = 0; // messages settled (sent or refused), a prefix
        while i < n {
            // SAFETY: msgs[i..n] point at live packet data that outlives the call.
            let r = unsafe {
                libc::sendmmsg(
                    self.sh.fd.as_raw_fd(),
                    msgs.as_mut_ptr().add(i),
                    (n - i) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                i += r as usize;
                done = i;
                continue;
            }
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if e == libc::EMSGSIZE || e == libc::EINVAL {
                fate[i] = 1;
                i += 1;
                done = i;
                continue;
            }
            // Full, link down or interface gone: the rest stays in the batch.
            break;
        }
        if done == 0 {
            return 0;
        }
        let mut rest = PacketBatch::new();
        let mut gone = PacketBatch::new();
        let mut sent = 0;
        let mut refused = 0;
        for (k, p) in batch.drain().enumerate() {
            if k < done {
                if fate[k] == 0 {
                    sent += 1;
                } else {
                    refused += 1;
                }
                // SAFETY: at most n <= MAX_BURST packets.
                unsafe { gone.push_unchecked(p) };
            } else {
                // SAFETY: as above.
                unsafe { rest.push_unchecked(p) };
            }
        }
        cache.free_bulk(&mut gone);
        batch.append(&mut rest);
        if refused > 0 {
            self.sh.own_drops.fetch_add(refused, Ordering::Relaxed);
        }
        sent
    }
}

// ---- the port ----

struct AfPacketPort {
    ifname: String,
    ctl: OwnedFd,
    rx: Vec<Arc<RxShared>>,
    tx: Vec<Arc<TxShared>>,
    /// ethtool (set command, old value) to put back on drop.
    restore: Vec<(u32, u32)>,
    desc: String,
    _claim: IfClaim,
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        for &(cmd, old) in &self.restore {
            ethtool_set(&self.ctl, &self.ifname, cmd, old);
        }
    }
}

impl Port for AfPacketPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        let sh = self
            .rx
            .get(qid)
            .ok_or_else(|| Error::invalid(format!("no incoming queue {qid}")))?;
        let cur = sh
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| Error::busy(format!("incoming queue {qid} is already open")))?;
        Ok(Box::new(RxQ {
            sh: sh.clone(),
            base: sh.ring.ptr,
            cur,
            drops: 0,
            segmented: 0,
            seg_cap: None,
            stage: Vec::new(),
            staged: 0,
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        let sh = self
            .tx
            .get(qid)
            .ok_or_else(|| Error::invalid(format!("no outgoing queue {qid}")))?;
        Ok(Box::new(TxQ { sh: sh.clone() }))
    }

    fn link_status(&self) -> LinkStatus {
        // Speed, duplex and autoneg only while the link is up.
        let st = ifctl::link_status(&self.ctl, &self.ifname);
        if st.link_up {
            st
        } else {
            LinkStatus::default()
        }
    }

    fn conf(&self) -> PortConf {
        ifctl::conf(&self.ctl, &self.ifname)
    }

    fn set_conf(&self, conf: &PortConf) -> Result<()> {
        let name = &self.ifname;
        ifctl::set_conf(&self.ctl, name, &self.conf(), conf, |step, e| {
            let what = match step {
                ifctl::Step::Mtu(mtu) => format!("mtu {mtu}"),
                ifctl::Step::Mac => "mac_addr".to_string(),
                ifctl::Step::ReadFlags => {
                    return Error::not_found(format!("interface {name} is gone"))
                }
                ifctl::Step::AdminUp => "admin_up".to_string(),
            };
            netns::io_error(&format!("{name} {what}"), e)
        })
    }

    fn driver_drops(&self) -> (u64, u64) {
        let inc = self.rx.iter().map(|r| r.drops()).sum();
        let out = self
            .tx
            .iter()
            .map(|t| t.own_drops.load(Ordering::Relaxed))
            .sum();
        (inc, out)
    }

    fn desc(&self) -> String {
        let seg: u64 = self
            .rx
            .iter()
            .map(|r| r.segmented.load(Ordering::Relaxed))
            .sum();
        format!("{}; {seg} super-frame(s) segmented", self.desc)
    }
}

/// Opens an AF_PACKET port on `cfg.ifname` (the shared constructor of AFPacketPort and
/// PCAPPort).
pub fn open(params: &PortParams, cfg: &Config) -> Result<NewPort> {
    let nq_in = if params.num_inc_q == 0 {
        1
    } else {
        params.num_inc_q
    };
    let nq_out = if params.num_out_q == 0 {
        1
    } else {
        params.num_out_q
    };
    let where_ = if cfg.netns.is_empty() {
        String::new()
    } else {
        format!(" in network namespace '{}'", cfg.netns)
    };
    let cfg2 = cfg.clone();
    let where2 = where_.clone();
    let port = netns::run_in(&cfg.netns, move || open_here(&cfg2, nq_in, nq_out, &where2))
        .map_err(|e| Error::new(e.code, format!("{}: {}", cfg.driver, e.msg)))?;
    Ok(NewPort {
        port: Box::new(port),
        num_inc_q: nq_in,
        num_out_q: nq_out,
    })
}

/// Opens every socket inside the interface's namespace.
fn open_here(cfg: &Config, nq_in: usize, nq_out: usize, where_: &str) -> Result<AfPacketPort> {
    let ifindex = netns::ifindex(&cfg.ifname).map_err(|e| Error::new(e.code, e.msg + where_))?;
    let (nsdev, nsino) = current_netns_id();
    let claim = IfClaim::take(
        (nsdev, nsino, ifindex),
        &format!("interface '{}'{where_}", cfg.ifname),
    )?;
    let ctl = netns::socket(libc::AF_INET, libc::SOCK_DGRAM, 0, "control socket")?;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    let bind = |fd: &OwnedFd, sll: &libc::sockaddr_ll| -> Result<()> {
        // SAFETY: sll is a valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r != 0 {
            return Err(netns::os_error(&format!("binding to {}", cfg.ifname)));
        }
        Ok(())
    };

    let mut rx = Vec::with_capacity(nq_in);
    let mut fanout_id: Option<u32> = None;
    for q in 0..nq_in {
        // Protocol 0 until bound: nothing is queued before the ring exists.
        let fd = netns::socket(libc::AF_PACKET, libc::SOCK_RAW, 0, "AF_PACKET socket")?;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as i32),
            "PACKET_VERSION TPACKET_V2",
        )?;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            &1i32,
            "PACKET_VNET_HDR",
        )?;
        // Older kernels lack it; the ring walk also skips PACKET_OUTGOING frames.
        let _ = setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &1i32,
            "PACKET_IGNORE_OUTGOING",
        );
        // Room on the socket for frames too long for a slot (up to 64 super-frames); root
        // may exceed net.core.rmem_max, others get what it allows.
        let rcvbuf = 64 * STAGE_FRAME as i32;
        if setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &rcvbuf,
            "SO_RCVBUFFORCE",
        )
        .is_err()
        {
            let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf, "SO_RCVBUF");
        }
        // A frame longer than its slot is queued whole on the socket (TP_STATUS_COPY).
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_COPY_THRESH,
            &1i32,
            "PACKET_COPY_THRESH",
        )?;
        let req = libc::tpacket_req {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.num_blocks,
            tp_frame_size: FRAME_SLOT as u32,
            tp_frame_nr: (cfg.block_size / FRAME_SLOT as u32) * cfg.num_blocks,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req, "RX ring")?;
        let len = cfg.block_size as usize * cfg.num_blocks as usize;
        // SAFETY: mapping the ring the kernel just allocated for this socket.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(netns::os_error("mapping the RX ring"));
        }
        let ring = Mapping {
            ptr: ptr as *mut u8,
            len,
        };
        bind(&fd, &sll)?;
        if q == 0 && cfg.promiscuous {
            let mr = libc::packet_mreq {
                mr_ifindex: ifindex as i32,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(
                &fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mr,
                "promiscuous mode",
            )?;
        }
        if nq_in > 1 {
            let kind = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
            // The first socket asks the kernel for a group id no one else uses; the others
            // join that group.
            let v = match fanout_id {
                None => (kind | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16,
                Some(id) => id | (kind << 16),
            };
            setsockopt(
                &fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &v,
                "PACKET_FANOUT",
            )?;
            if fanout_id.is_none() {
                let got: u32 = getsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT)
                    .ok_or_else(|| netns::os_error("reading the fanout group"))?;
                fanout_id = Some(got & 0xffff);
            }
        }
        rx.push(Arc::new(RxShared {
            fd,
            ring,
            num_frames: (cfg.block_size as usize / FRAME_SLOT) * cfg.num_blocks as usize,
            cursor: Mutex::new(Some(Cursor::default())),
            kernel_drops: AtomicU64::new(0),
            own_drops: AtomicU64::new(0),
            segmented: AtomicU64::new(0),
        }));
    }

    let mut tx = Vec::with_capacity(nq_out);
    for _ in 0..nq_out {
        // Protocol 0: a send-only socket, it never queues received packets.
        let fd = netns::socket(libc::AF_PACKET, libc::SOCK_RAW, 0, "AF_PACKET socket")?;
        let mut s = sll;
        s.sll_protocol = 0;
        bind(&fd, &s)?;
        tx.push(Arc::new(TxShared {
            fd,
            own_drops: AtomicU64::new(0),
        }));
    }

    let mut restore = Vec::new();
    let mut off = Vec::new();
    if !cfg.keep_offloads {
        if ethtool_get(&ctl, &cfg.ifname, ETHTOOL_GGRO) == Some(1)
            && ethtool_set(&ctl, &cfg.ifname, ETHTOOL_SGRO, 0)
        {
            restore.push((ETHTOOL_SGRO, 1));
            off.push("gro");
        }
        if let Some(fl) = ethtool_get(&ctl, &cfg.ifname, ETHTOOL_GFLAGS) {
            if fl & ETH_FLAG_LRO != 0
                && ethtool_set(&ctl, &cfg.ifname, ETHTOOL_SFLAGS, fl & !ETH_FLAG_LRO)
            {
                restore.push((ETHTOOL_SFLAGS, fl));
                off.push("lro");
            }
        }
    }
    let offloads = if cfg.keep_offloads {
        "offloads kept".to_string()
    } else if off.is_empty() {
        "gro/lro already off".to_string()
    } else {
        format!("offloads off: {}", off.join(" "))
    };
    let desc = format!(
        "{}{where_}: {nq_in} rx queue(s) (TPACKET_V2 ring of {} {}-byte slots{}), {nq_out} tx queue(s) (sendmmsg), software GSO/checksum; {offloads}",
        cfg.ifname,
        (cfg.block_size as usize / FRAME_SLOT) * cfg.num_blocks as usize,
        FRAME_SLOT,
        if cfg.promiscuous { ", promiscuous" } else { "" },
    );
    Ok(AfPacketPort {
        ifname: cfg.ifname.clone(),
        ctl,
        rx,
        tx,
        restore,
        desc,
        _claim: claim,
    })
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    open(params, &Config::from_arg(arg)?)
}

/// The AFPacketPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "AFPacketPort",
    name_template: "af_packet_port",
    help: "a Linux interface through AF_PACKET sockets (TPACKET_V2 RX ring, sendmmsg TX, PACKET_FANOUT across queues)",
    arg_type: "bessemer.pb.AFPacketPortArg",
    arg_doc: &[
        "ifname: string — the interface (required)",
        "netns: string — its network namespace (name under /var/run/netns, or a path); empty: the daemon's",
        "promiscuous: bool — put the interface in promiscuous mode",
        "block_size: uint32 — RX ring block size in bytes (power of two, at least a page; default 1 MiB)",
        "num_blocks: uint32 — RX ring blocks per queue (default 8)",
        "keep_offloads: bool — leave GRO/LRO on (by default they are switched off while the port exists); GSO super-frames and partial checksums are always handled in software",
    ],
    create,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_bad_fields() {
        let e = Config::from_arg(&Value::map()).unwrap_err();
        assert!(e.msg.contains("ifname"), "{}", e.msg);
        let e = Config::from_arg(&Value::map().with("ifname", "x").with("block_size", 5000u32))
            .unwrap_err();
        assert!(e.msg.contains("block_size"), "{}", e.msg);
        let e = Config::from_arg(
            &Value::map()
                .with("ifname", "x")
                .with("block_size", 1u32 << 20)
                .with("num_blocks", 4096u32),
        )
        .unwrap_err();
        assert!(e.msg.contains("num_blocks"), "{}", e.msg);
        let e = Config::from_arg(&Value::map().with("ifname", "x").with("bogus", 1)).unwrap_err();
        assert!(e.msg.contains("bogus"), "{}", e.msg);
        let c = Config::from_arg(&Value::map().with("ifname", "x")).unwrap();
        assert_eq!(
            (c.block_size, c.num_blocks),
            (DEFAULT_BLOCK_SIZE, DEFAULT_NUM_BLOCKS)
        );
    }
}

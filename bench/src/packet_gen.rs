//! make bench-ports' second traffic generator, for kernels that refuse the first one
//! (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`): an AF_PACKET socket with a
//! TPACKET_V2 TX ring and `PACKET_QDISC_BYPASS`, so each frame goes from the ring straight
//! to the interface's transmit (`dev_direct_xmit`), with no qdisc.
//!
//! The ring's slots are written once, when it is made: slot `i` holds `frames[i % n]`, so
//! handing slots back to the kernel is all a send costs in user space. A slot is free again
//! when the kernel is done with the frame; a frame the interface drops (a full veth ring) is
//! put back as a send request by the kernel and sent again by the next kick.
//!
//! Each slot starts with a `virtio_net_hdr` (`PACKET_VNET_HDR`) whose `hdr_len` is the whole
//! frame, so the kernel copies the frame into the skb's linear part. Without it only the
//! Ethernet header is copied and the rest is attached as the ring's pages, which a veth
//! then copies again into freshly allocated pages (the frames leave the namespace), and an
//! XDP program behind it copies once more: 0.71 against 0.89 Mpps at 64 bytes and 0.63
//! against 0.80 at 1518 bytes into the sink alone, on the development VM.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per slot: the largest frame (1514) plus the slot's and the virtio header.
const SLOT: usize = 2048;
/// Where a TX slot's data starts (TPACKET_ALIGN(sizeof(struct tpacket2_hdr))).
const DATA_OFFSET: usize = 32;
/// sizeof(struct virtio_net_hdr), in front of each frame; `hdr_len` is at bytes 2..4
/// (little-endian: the socket is not a legacy big-endian virtio device's).
const VNET_HDR: usize = 10;
/// The largest frame a slot holds.
const FRAME_MAX: usize = SLOT - DATA_OFFSET - VNET_HDR;
/// 4 blocks of 1 MiB: 2048 slots, enough frames in flight to keep the interface busy.
const BLOCK: u32 = 1 << 20;
const BLOCKS: u32 = 4;
/// Most slots handed to the kernel per kick (as many as a live-frames batch).
const BURST: usize = 256;

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
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

/// A send-only AF_PACKET socket on one interface with its TX ring mapped.
pub struct TxRing {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    slots: usize,
    cur: usize,
}

// SAFETY: the mapping is used by one thread at a time (the generator's, after a move).
unsafe impl Send for TxRing {}

impl TxRing {
    /// Opens the socket on `ifname` (in the calling thread's network namespace) and fills
    /// the ring with `frames` in turn. The socket is bound with protocol 0, so it receives
    /// nothing.
    pub fn open(ifname: &str, frames: &[Vec<u8>]) -> Result<TxRing, String> {
        if frames.is_empty() || frames.iter().any(|f| f.len() < 14 || f.len() > FRAME_MAX) {
            return Err(format!("frames must be 14..={FRAME_MAX} bytes"));
        }
        let c =
            std::ffi::CString::new(ifname).map_err(|_| format!("bad interface name {ifname:?}"))?;
        // SAFETY: a NUL-terminated name.
        let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if idx == 0 {
            return Err(format!("no interface {ifname}"));
        }
        // SAFETY: plain socket call; the fd is owned right after.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(os_err("AF_PACKET socket"));
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
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
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            &1i32,
            "PACKET_QDISC_BYPASS",
        )?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK,
            tp_block_nr: BLOCKS,
            tp_frame_size: SLOT as u32,
            tp_frame_nr: BLOCK / SLOT as u32 * BLOCKS,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req, "TX ring")?;
        // SAFETY: sockaddr_ll is plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0;
        sll.sll_ifindex = idx as i32;
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
        let len = (BLOCK * BLOCKS) as usize;
        // SAFETY: maps the socket's TX ring; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap of the TX ring"));
        }
        let ring = TxRing {
            fd,
            base: p as *mut u8,
            len,
            slots: len / SLOT,
            cur: 0,
        };
        for i in 0..ring.slots {
            let f = &frames[i % frames.len()];
            let slot = ring.slot(i);
            let mut vnet = [0u8; VNET_HDR];
            vnet[2..4].copy_from_slice(&(f.len() as u16).to_le_bytes());
            // SAFETY: the slot is ours (status AVAILABLE: the ring is new) and the header and
            // frame fit behind the slot's header (checked above).
            unsafe {
                let data = slot.add(DATA_OFFSET);
                std::ptr::copy_nonoverlapping(vnet.as_ptr(), data, VNET_HDR);
                std::ptr::copy_nonoverlapping(f.as_ptr(), data.add(VNET_HDR), f.len());
                let h = &mut *(slot as *mut libc::tpacket2_hdr);
                h.tp_len = (VNET_HDR + f.len()) as u32;
                h.tp_snaplen = h.tp_len;
            }
        }
        Ok(ring)
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: i < slots: inside the mapping.
        unsafe { self.base.add(i * SLOT) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: tp_status is the aligned u32 at offset 0 of a slot, shared with the
        // kernel; the mapping lives as long as self.
        unsafe { &*(self.slot(i) as *const AtomicU32) }
    }

    /// Hands up to BURST free slots to the kernel and kicks the transmit; returns how many
    /// frames were handed over (each is sent, or retried by the kernel until it is). A full
    /// interface is not an error: its frames wait in the ring.
    pub fn send_burst(&mut self) -> Result<u64, String> {
        let mut queued = 0;
        while queued < BURST {
            let st = self.status(self.cur);
            let s = st.load(Ordering::Acquire);
            if s & libc::TP_STATUS_WRONG_FORMAT != 0 {
                return Err("the kernel refused a frame of the TX ring (wrong format)".into());
            }
            if s != libc::TP_STATUS_AVAILABLE {
                break;
            }
            st.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.cur = (self.cur + 1) % self.slots;
            queued += 1;
        }
        // SAFETY: a zero-length send: transmits the ring's requested slots.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            // EAGAIN: the socket's send buffer is full; ENOBUFS: the interface dropped a
            // frame, which the kernel put back in the ring. Both clear by themselves.
            if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) {
                return Err(format!("send on the TX ring: {e}"));
            }
        }
        Ok(queued as u64)
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

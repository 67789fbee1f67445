//! AF_XDP sockets and their rings.

use super::*;

pub(super) const XDP_MMAP_OFFSETS: i32 = 1;
pub(super) const XDP_RX_RING: i32 = 2;
pub(super) const XDP_TX_RING: i32 = 3;
pub(super) const XDP_UMEM_REG: i32 = 4;
pub(super) const XDP_UMEM_FILL_RING: i32 = 5;
pub(super) const XDP_UMEM_COMPLETION_RING: i32 = 6;
pub(super) const XDP_STATISTICS: i32 = 7;
pub(super) const XDP_COPY: u16 = 1 << 1;
pub(super) const XDP_ZEROCOPY: u16 = 1 << 2;
pub(super) const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
pub(super) const XDP_USE_SG: u16 = 1 << 4;
/// `xdp_desc.options`: more descriptors of this packet follow.
pub(super) const XDP_PKT_CONTD: u32 = 1;
/// Most packet bytes one UMEM frame carries (after the kernel's XDP headroom).
pub(super) const UMEM_DATA: usize = FRAME_SIZE - HEADROOM;
pub(super) const XDP_RING_NEED_WAKEUP: u32 = 1;
/// Most wake-up calls one send makes to drain the TX ring in copy mode (the kernel takes at
/// most 32 descriptors per call; 2048 / 32 = 64 calls empty a default-sized ring).
pub(super) const MAX_TX_KICKS: u32 = 80;
pub(super) const PGOFF_RX: i64 = 0;
pub(super) const PGOFF_TX: i64 = 0x8000_0000;
pub(super) const PGOFF_FILL: i64 = 0x1_0000_0000;
pub(super) const PGOFF_COMP: i64 = 0x1_8000_0000;

/// One mapped ring: producer, consumer and flags words and `size` entries.
pub(super) struct Ring {
    pub(super) map: *mut libc::c_void,
    pub(super) map_len: usize,
    pub(super) prod: *const AtomicU32,
    pub(super) cons: *const AtomicU32,
    pub(super) flags: *const AtomicU32,
    pub(super) desc: *mut u8,
    pub(super) mask: u32,
    pub(super) size: u32,
}

impl Ring {
    pub(super) fn map(
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
    pub(super) fn prod(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping, which lives as long as the ring.
        unsafe { &*self.prod }
    }

    #[inline(always)]
    pub(super) fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.cons }
    }

    #[inline(always)]
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as above.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Entry `i` of a fill or completion ring (frame addresses).
    #[inline(always)]
    pub(super) fn addr(&self, i: u32) -> *mut u64 {
        (self.desc as *mut u64).wrapping_add((i & self.mask) as usize)
    }

    /// Entry `i` of an RX or TX ring.
    #[inline(always)]
    pub(super) fn xdesc(&self, i: u32) -> *mut libc::xdp_desc {
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
pub(super) struct RxSide {
    pub(super) fill_prod: u32,
    pub(super) fill_cons: u32,
    pub(super) rx_cons: u32,
    pub(super) held: HeldFrames,
}

/// State of the transmit side (TX and completion rings), touched only by the TX queue's owner.
pub(super) struct TxSide {
    pub(super) tx_prod: u32,
    pub(super) tx_cons: u32,
    pub(super) comp_cons: u32,
    pub(super) held: HeldFrames,
}

/// Which AF_XDP mode a socket runs in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    ZeroCopy,
    Copy,
}

/// One AF_XDP socket bound to one interface queue.
pub(super) struct Xsk {
    pub(super) fd: RawFd,
    pub(super) pool: PacketPool,
    pub(super) queue: u32,
    pub(super) attach: Arc<Attach>,
    pub(super) fill: Ring,
    pub(super) comp: Ring,
    pub(super) rx: Ring,
    pub(super) tx: Ring,
    pub(super) mode: Mode,
    /// Bound with XDP_USE_SG: packets may span several descriptors.
    pub(super) sg: bool,
    /// Received packets lost in user space (a jumbo frame with no large buffer for it).
    pub(super) rx_dropped: AtomicU64,
    /// Packets too long for a socket without XDP_USE_SG.
    pub(super) tx_dropped: AtomicU64,
    /// RX descriptors refused by `xdp_desc::take_rx` (outside the UMEM, a frame not lent,
    /// bytes past the frame).
    pub(super) rx_invalid: AtomicU64,
    /// Completion descriptors refused by `xdp_desc::take_completed`.
    pub(super) comp_invalid: AtomicU64,
    /// Complete TCP/UDP checksums a local sender left partial (a veth peer's offload).
    pub(super) partial_csums: bool,
    /// Busy polling (SO_PREFER_BUSY_POLL): an empty receive poll drives the device's NAPI
    /// from this thread with a syscall, instead of waiting for its interrupt.
    pub(super) busy_poll: bool,
    pub(super) rx_open: AtomicBool,
    pub(super) tx_open: AtomicBool,
    /// Descriptors were left on the TX ring after the last wake-up (device queue busy): the
    /// receive side kicks again on its next poll, so they do not wait for the next send.
    pub(super) tx_backlog: AtomicBool,
    pub(super) rxs: UnsafeCell<RxSide>,
    pub(super) txs: UnsafeCell<TxSide>,
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
pub(super) struct Rings {
    pub(super) rx: u32,
    pub(super) tx: u32,
}

impl Xsk {
    /// Opens a socket on `ifindex` queue `queue` of the current namespace, registers the pool
    /// as its UMEM and binds it in `mode`.
    pub(super) fn open(
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
    pub(super) fn kick_tx(&self, prod: u32) {
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
    pub(super) fn retry_tx_backlog(&self) {
        if self.tx_backlog.load(Ordering::Relaxed) {
            self.kick_tx(self.tx.prod().load(Ordering::Acquire));
        }
    }

    pub(super) fn stats(&self) -> libc::xdp_statistics {
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

//! The application's side: [`Slice::attach`] connects to a slice port's socket, receives the
//! shared region and its eventfd, and then moves frames with no system call on the fast
//! path: received frames are read in place in the shared packet area and frames to send are
//! written in place there (zero copy between the app and the slice; the daemon takes a sent
//! frame into its pipeline in place too, and may hand it back on the receive ring).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::daemon::connect;
use crate::layout::{self, hdr, Consumer, Layout, Producer, RingId, RingPtrs};
use crate::sys::{self, Mapping};

/// One packet in the shared packet area: the offset of its first byte from the area's
/// start and its length. It lies inside one frame, not necessarily at the frame's start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// Byte offset of the packet in the packet area.
    pub offset: u32,
    /// Bytes of packet data (for a frame from `alloc_tx`: the room up to the frame's end).
    pub len: u32,
}

/// The app's own counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Descriptors from the daemon that failed validation (never expected).
    pub rx_invalid: u64,
    /// Times `wait` slept on the eventfd.
    pub sleeps: u64,
}

/// An attached slice: one receive and one send queue shared with the daemon.
pub struct Slice {
    sock: OwnedFd,
    rx_kick: OwnedFd,
    _memfd: OwnedFd,
    map: Mapping,
    layout: Layout,
    rx: Consumer,
    rx_free: Producer,
    tx: Producer,
    tx_free: Consumer,
    /// Offsets of send frames the app holds and has not filled.
    spare: Vec<u32>,
    counters: AppCounters,
}

fn proto_err(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl Slice {
    /// Attaches to the slice port listening at `path` ('@' = abstract name), waiting up to
    /// 5 s for the daemon's hello (a port serves one app at a time).
    pub fn attach(path: &str) -> io::Result<Slice> {
        Self::attach_timeout(path, Duration::from_secs(5))
    }

    /// As [`attach`](Self::attach), waiting up to `timeout` for the hello.
    pub fn attach_timeout(path: &str, timeout: Duration) -> io::Result<Slice> {
        let sock = connect(path)?;
        // poll_in answers false on EINTR too: wait again for what is left of the timeout, so a
        // signal (a timer, SIGCHLD) does not turn into "another app is attached".
        let deadline = std::time::Instant::now() + timeout;
        let mut ready = false;
        while !ready {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            ready = sys::poll_in(sock.as_raw_fd(), ms)?;
        }
        if !ready {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no hello from slice '{path}' within {timeout:?}: another app is attached"),
            ));
        }
        let mut hello = [0u8; 64];
        let (n, mut fds) = sys::recv_fds(sock.as_raw_fd(), &mut hello)?;
        if n != 16 || fds.len() != 2 || hello[..8] != layout::MAGIC.to_le_bytes() {
            return Err(proto_err(format!(
                "'{path}' is not a slice port (unexpected hello: {n} bytes, {} descriptors)",
                fds.len()
            )));
        }
        let region_len = u64::from_le_bytes(hello[8..16].try_into().expect("8 bytes")) as usize;
        let rx_kick = fds.pop().expect("two fds");
        let memfd = fds.pop().expect("two fds");
        // SAFETY: fstat into a zeroed struct.
        let size = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(memfd.as_raw_fd(), &mut st) != 0 {
                return Err(io::Error::last_os_error());
            }
            st.st_size as usize
        };
        if size < region_len || region_len < layout::PAGE {
            return Err(proto_err("slice region is smaller than announced"));
        }
        let map = Mapping::new(memfd.as_raw_fd(), region_len)?;
        // SAFETY: region_len bytes are mapped.
        let layout = unsafe { Layout::read_header(map.base(), region_len) }.map_err(proto_err)?;
        // SAFETY: the layout was checked against the mapping's length.
        let ring = |id| unsafe { RingPtrs::new(map.base(), &layout, id) };
        let f = layout.frames_per_dir;
        Ok(Slice {
            rx: Consumer::new(ring(RingId::Rx), 0),
            rx_free: Producer::new(ring(RingId::RxFree), 0),
            tx: Producer::new(ring(RingId::Tx), 0),
            tx_free: Consumer::new(ring(RingId::TxFree), 0),
            spare: Vec::with_capacity(f as usize),
            counters: AppCounters::default(),
            sock,
            rx_kick,
            _memfd: memfd,
            map,
            layout,
        })
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> usize {
        self.layout.frame_size as usize
    }

    /// Entries per ring (= frames per direction).
    pub fn ring_size(&self) -> usize {
        self.layout.ring_size as usize
    }

    /// The app's counters.
    pub fn counters(&self) -> AppCounters {
        self.counters
    }

    /// False once the daemon closed the socket (port destroyed, daemon gone).
    pub fn is_attached(&self) -> bool {
        !matches!(sys::poll_in(self.sock.as_raw_fd(), 0), Ok(true))
    }

    /// A free send frame's descriptor from the daemon: the start of a send frame.
    fn valid_send_frame(&self, off: u32) -> bool {
        let fs = self.layout.frame_size;
        off.is_multiple_of(fs)
            && self
                .layout
                .frame_of(off, 0)
                .is_some_and(|i| i >= self.layout.frames_per_dir)
    }

    /// Byte range in the area of the packet `d` names, clamped to the frame it starts in.
    fn range(&self, d: Desc) -> (usize, usize) {
        let fs = self.frame_size();
        let off = (d.offset as usize).min(self.layout.area_len() - 1);
        let end = (off / fs + 1) * fs;
        (off, end)
    }

    /// Receives up to `out.len()` frames; returns how many. Read each with
    /// [`data`](Self::data) and give it back with [`release`](Self::release).
    pub fn recv_batch(&mut self, out: &mut [Desc]) -> usize {
        if self.rx.avail() == 0 {
            let _ = self.rx.refresh();
        }
        let n = (self.rx.avail() as usize).min(out.len());
        let mut got = 0;
        for _ in 0..n {
            let (offset, len) = layout::undesc(self.rx.pop());
            // Copy frames and, without a copy, the app's own send frames come this way.
            if self.layout.frame_of(offset, len).is_none() {
                self.counters.rx_invalid += 1;
                continue;
            }
            out[got] = Desc { offset, len };
            self.counters.rx_bytes += len as u64;
            got += 1;
        }
        if n > 0 {
            self.rx.release();
        }
        self.counters.rx_packets += got as u64;
        got
    }

    /// The bytes of a packet (`d.len` of them, at most up to its frame's end).
    pub fn data(&self, d: Desc) -> &[u8] {
        let (off, end) = self.range(d);
        let len = (d.len as usize).min(end - off);
        // SAFETY: clamped inside the area.
        unsafe { std::slice::from_raw_parts(self.map.base().add(self.layout.area_off + off), len) }
    }

    /// The bytes from `d`'s offset to its frame's end, writable (its first `d.len` bytes are
    /// the packet; for a frame from `alloc_tx` that is all of them).
    pub fn frame_mut(&mut self, d: Desc) -> &mut [u8] {
        let (off, end) = self.range(d);
        // SAFETY: clamped inside the area; &mut self keeps this the only view through self.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.map.base().add(self.layout.area_off + off),
                end - off,
            )
        }
    }

    /// Gives received frames back to the daemon.
    pub fn release(&mut self, ds: &[Desc]) {
        if ds.is_empty() {
            return;
        }
        let _ = self.rx_free.refresh();
        // The free ring holds every receive frame, so there is always room for the app's.
        for d in ds.iter().take(self.rx_free.room() as usize) {
            self.rx_free.push(layout::desc(d.offset, 0));
        }
        self.rx_free.publish();
    }

    /// Takes up to `out.len()` empty send frames; returns how many. Each starts
    /// [`TX_HEADROOM`](layout::TX_HEADROOM) bytes into its frame (room for headers the
    /// pipeline may prepend) and its `len` is the room left to the frame's end. Fill them
    /// with [`frame_mut`](Self::frame_mut), set `len` and pass them to
    /// [`send_batch`](Self::send_batch). A packet may also start elsewhere in its frame, on
    /// a multiple of [`TX_ALIGN`](layout::TX_ALIGN) bytes (the frame's start, for the
    /// largest packets).
    pub fn alloc_tx(&mut self, out: &mut [Desc]) -> usize {
        if self.spare.len() < out.len() {
            let _ = self.tx_free.refresh();
            let n = self.tx_free.avail();
            for _ in 0..n {
                let (off, _) = layout::undesc(self.tx_free.pop());
                if self.valid_send_frame(off) {
                    self.spare.push(off);
                } else {
                    self.counters.rx_invalid += 1;
                }
            }
            if n > 0 {
                self.tx_free.release();
            }
        }
        let n = self.spare.len().min(out.len());
        let h = self.layout.tx_headroom;
        for d in out.iter_mut().take(n) {
            *d = Desc {
                offset: self.spare.pop().expect("counted") + h,
                len: self.layout.frame_size - h,
            };
        }
        n
    }

    /// Queues filled send frames for the daemon; returns how many were queued (fewer if
    /// the ring is full: the rest stay the app's, to send again or return with
    /// [`free_tx`](Self::free_tx)).
    pub fn send_batch(&mut self, ds: &[Desc]) -> usize {
        if (self.tx.room() as usize) < ds.len() {
            let _ = self.tx.refresh();
        }
        let n = (self.tx.room() as usize).min(ds.len());
        for d in &ds[..n] {
            self.tx.push(layout::desc(d.offset, d.len));
            self.counters.tx_bytes += d.len as u64;
        }
        if n > 0 {
            self.tx.publish();
        }
        self.counters.tx_packets += n as u64;
        n
    }

    /// Returns unsent send frames to the app's spare list.
    pub fn free_tx(&mut self, ds: &[Desc]) {
        let fs = self.layout.frame_size;
        self.spare
            .extend(ds.iter().map(|d| d.offset - d.offset % fs));
    }

    /// Copies `frames` into send frames and queues them; returns how many were sent.
    pub fn send_copy(&mut self, frames: &[&[u8]]) -> usize {
        let mut ds = vec![Desc::default(); frames.len()];
        let n = self.alloc_tx(&mut ds);
        let fs = self.layout.frame_size;
        let mut ok = Vec::with_capacity(n);
        for (d, f) in ds[..n].iter().zip(frames) {
            let len = f.len().min(self.frame_size());
            // A packet too long for the headroom's place starts at the frame's start.
            let at = if len > d.len as usize {
                Desc {
                    offset: d.offset - d.offset % fs,
                    len: fs,
                }
            } else {
                *d
            };
            self.frame_mut(at)[..len].copy_from_slice(&f[..len]);
            ok.push(Desc {
                offset: at.offset,
                len: len as u32,
            });
        }
        let sent = self.send_batch(&ok);
        self.free_tx(&ok[sent..]);
        sent
    }

    /// Waits until a frame can be received: busy-polls for `spin` first, then sleeps on the
    /// eventfd until `timeout` (None: forever). True if a frame is ready.
    pub fn wait(&mut self, spin: Duration, timeout: Option<Duration>) -> io::Result<bool> {
        let t0 = Instant::now();
        loop {
            if self.rx.refresh().unwrap_or(0) > 0 {
                return Ok(true);
            }
            if t0.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
        // SAFETY: the header lies inside the mapping.
        let flag = unsafe { &*self.map.base().add(hdr::APP_WAITING).cast::<AtomicU32>() };
        loop {
            flag.store(1, Ordering::Relaxed);
            // Pairs with the daemon's fence between publishing and reading the flag: either
            // it sees the flag and kicks, or we see its frames here.
            fence(Ordering::SeqCst);
            if self.rx.refresh().unwrap_or(0) > 0 {
                flag.store(0, Ordering::Relaxed);
                return Ok(true);
            }
            let left = match timeout {
                None => -1,
                Some(t) => {
                    let e = t0.elapsed();
                    if e >= t {
                        flag.store(0, Ordering::Relaxed);
                        return Ok(false);
                    }
                    (t - e).as_millis().clamp(1, i32::MAX as u128) as i32
                }
            };
            self.counters.sleeps += 1;
            let woke = sys::poll_in(self.rx_kick.as_raw_fd(), left.min(100));
            flag.store(0, Ordering::Relaxed);
            if matches!(woke, Ok(true)) {
                sys::drain(self.rx_kick.as_raw_fd());
            }
            woke?;
            if !self.is_attached() {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the daemon closed the slice",
                ));
            }
        }
    }

    /// Testing aid for misbehaving-peer tests: pushes raw `words` (unchecked descriptors)
    /// onto ring `ring` (one the app produces: Tx or RxFree).
    #[doc(hidden)]
    pub fn push_raw(&mut self, ring: RingId, words: &[u64]) {
        let p = match ring {
            RingId::Tx => &mut self.tx,
            _ => &mut self.rx_free,
        };
        let _ = p.refresh();
        for w in words.iter().take(p.room() as usize) {
            p.push(*w);
        }
        p.publish();
    }

    /// Testing aid: overwrites the index the app owns in ring `ring` with `value`.
    #[doc(hidden)]
    pub fn scribble_index(&mut self, ring: RingId, value: u32) {
        // SAFETY: the layout was checked against the mapping.
        let r = unsafe { RingPtrs::new(self.map.base(), &self.layout, ring) };
        let own = match ring {
            RingId::Tx | RingId::RxFree => r.prod,
            RingId::Rx | RingId::TxFree => r.cons,
        };
        // SAFETY: inside the mapping.
        unsafe { (*own).store(value, Ordering::Release) };
    }
}

//! The shared region's layout and the single-producer/single-consumer descriptor rings in it.
//!
//! ```text
//! page 0            header: magic, version, geometry, the app's "wake me" flag
//! ring_off(r)       one page-aligned block per ring: producer index (own cache line),
//!                   consumer index (own cache line), then `ring_size` u64 descriptors
//! area_off          packet area: 2 × frames_per_dir frames of frame_size bytes;
//!                   frames [0, F) are the daemon's copy frames, [F, 2F) the app's send
//!                   frames, which the daemon passes through its pipeline and may hand
//!                   back to the app on the receive ring without a copy
//! ```
//!
//! A descriptor is `offset | len << 32`, the offset counted from the packet area's start;
//! since version 2 it names the packet's first byte, which need not start its frame (a send
//! frame comes with [`TX_HEADROOM`] bytes in front, and the pipeline may move the start).
//! Each side keeps its own copies of the indices it writes and never reads them back from
//! the shared memory: the peer can overwrite anything there, so only the peer's index and
//! the descriptors are ever read, and both are validated before use.

use std::sync::atomic::{AtomicU32, Ordering};

/// "BSSLICE1" as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BSSLICE1");
/// Protocol version: 2 = zero copy both ways (frames of 4096 bytes, send frames with
/// headroom, send frames may come back on the receive ring at any offset in their frame).
pub const VERSION: u32 = 2;
/// Page size the layout aligns to.
pub const PAGE: usize = 4096;
/// Bytes per frame (the daemon's packet frame size, so an app's frame is a pipeline buffer).
pub const FRAME_SIZE: u32 = 4096;
/// Bytes in front of the packet in a fresh send frame, for headers the pipeline prepends
/// (encapsulation): 3840 bytes remain for the packet.
pub const TX_HEADROOM: u32 = 256;
/// Packets the app sends start on a multiple of this in their frame.
pub const TX_ALIGN: u32 = 64;
/// Largest ring (and frames per direction) a slice may have.
pub const MAX_RING_SIZE: u32 = 1 << 15;
/// Smallest ring.
pub const MIN_RING_SIZE: u32 = 64;

/// The four rings, named from the application's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum RingId {
    /// Daemon → app: filled frames for the app to read (the app's receive ring).
    Rx = 0,
    /// App → daemon: received frames the app is done with.
    RxFree = 1,
    /// App → daemon: frames the app filled (the app's send ring).
    Tx = 2,
    /// Daemon → app: sent frames, free for the app to fill again.
    TxFree = 3,
}

/// Header field offsets (bytes from the region's start).
pub mod hdr {
    /// u64 magic.
    pub const MAGIC: usize = 0;
    /// u32 version.
    pub const VERSION: usize = 8;
    /// u32 ring size (entries, a power of two).
    pub const RING_SIZE: usize = 12;
    /// u32 frames per direction (= ring size).
    pub const FRAMES_PER_DIR: usize = 16;
    /// u32 frame size.
    pub const FRAME_SIZE: usize = 20;
    /// u64 total region length.
    pub const REGION_LEN: usize = 24;
    /// u64 packet area offset.
    pub const AREA_OFF: usize = 32;
    /// 4 × u64 ring offsets.
    pub const RING_OFF: usize = 40;
    /// u32 headroom of a fresh send frame (version 2).
    pub const TX_HEADROOM: usize = 72;
    /// u32 set by the app while it sleeps on the rx eventfd (own cache line).
    pub const APP_WAITING: usize = 128;
}

/// Geometry both sides derive from the ring size alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Entries per ring (power of two).
    pub ring_size: u32,
    /// Frames per direction.
    pub frames_per_dir: u32,
    /// Frame size in bytes.
    pub frame_size: u32,
    /// Headroom of a fresh send frame.
    pub tx_headroom: u32,
    /// Offsets of the four rings.
    pub ring_off: [usize; 4],
    /// Offset of the packet area.
    pub area_off: usize,
    /// Total region length.
    pub region_len: usize,
}

impl Layout {
    /// The layout for `ring_size` entries per ring, or why not.
    pub fn new(ring_size: u32) -> Result<Layout, String> {
        if !ring_size.is_power_of_two() || !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&ring_size) {
            return Err(format!(
                "ring size {ring_size} must be a power of two between {MIN_RING_SIZE} and {MAX_RING_SIZE}"
            ));
        }
        let ring_bytes = (128 + 8 * ring_size as usize).div_ceil(PAGE) * PAGE;
        let mut off = PAGE;
        let mut ring_off = [0; 4];
        for r in &mut ring_off {
            *r = off;
            off += ring_bytes;
        }
        let area_off = off;
        let region_len = area_off + 2 * ring_size as usize * FRAME_SIZE as usize;
        Ok(Layout {
            ring_size,
            frames_per_dir: ring_size,
            frame_size: FRAME_SIZE,
            tx_headroom: TX_HEADROOM,
            ring_off,
            area_off,
            region_len,
        })
    }

    /// Size of the packet area.
    pub fn area_len(&self) -> usize {
        2 * self.frames_per_dir as usize * self.frame_size as usize
    }

    /// The frame a packet at area offset `off` of `len` bytes lies in, if it lies wholly
    /// inside one frame of the area.
    pub fn frame_of(&self, off: u32, len: u32) -> Option<u32> {
        let fs = self.frame_size;
        let idx = off / fs;
        (idx < 2 * self.frames_per_dir && off % fs + len <= fs).then_some(idx)
    }

    /// Writes the header (daemon side, before the app sees the region).
    ///
    /// # Safety
    /// `base` maps at least `region_len` writable bytes.
    pub unsafe fn write_header(&self, base: *mut u8) {
        base.add(hdr::MAGIC).cast::<u64>().write_unaligned(MAGIC);
        base.add(hdr::VERSION)
            .cast::<u32>()
            .write_unaligned(VERSION);
        base.add(hdr::RING_SIZE)
            .cast::<u32>()
            .write_unaligned(self.ring_size);
        base.add(hdr::FRAMES_PER_DIR)
            .cast::<u32>()
            .write_unaligned(self.frames_per_dir);
        base.add(hdr::FRAME_SIZE)
            .cast::<u32>()
            .write_unaligned(self.frame_size);
        base.add(hdr::TX_HEADROOM)
            .cast::<u32>()
            .write_unaligned(self.tx_headroom);
        base.add(hdr::REGION_LEN)
            .cast::<u64>()
            .write_unaligned(self.region_len as u64);
        base.add(hdr::AREA_OFF)
            .cast::<u64>()
            .write_unaligned(self.area_off as u64);
        for (i, o) in self.ring_off.iter().enumerate() {
            base.add(hdr::RING_OFF + 8 * i)
                .cast::<u64>()
                .write_unaligned(*o as u64);
        }
    }

    /// Reads and checks a header (app side): the layout it describes must be exactly the
    /// one derived from its ring size and fit in `len` bytes.
    ///
    /// # Safety
    /// `base` maps at least `len` readable bytes, `len` ≥ one page.
    pub unsafe fn read_header(base: *const u8, len: usize) -> Result<Layout, String> {
        if len < PAGE {
            return Err(format!("region of {len} bytes is smaller than its header"));
        }
        let magic = base.add(hdr::MAGIC).cast::<u64>().read_unaligned();
        if magic != MAGIC {
            return Err("not a slice region (bad magic)".into());
        }
        let version = base.add(hdr::VERSION).cast::<u32>().read_unaligned();
        if version != VERSION {
            return Err(format!(
                "slice protocol version {version}; this library speaks {VERSION}"
            ));
        }
        let l = Layout::new(base.add(hdr::RING_SIZE).cast::<u32>().read_unaligned())?;
        let region_len = base.add(hdr::REGION_LEN).cast::<u64>().read_unaligned();
        let area_off = base.add(hdr::AREA_OFF).cast::<u64>().read_unaligned();
        let frame_size = base.add(hdr::FRAME_SIZE).cast::<u32>().read_unaligned();
        let headroom = base.add(hdr::TX_HEADROOM).cast::<u32>().read_unaligned();
        if region_len != l.region_len as u64
            || area_off != l.area_off as u64
            || frame_size != l.frame_size
            || headroom != l.tx_headroom
            || len < l.region_len
        {
            return Err("slice header geometry is inconsistent".into());
        }
        Ok(l)
    }
}

/// Indices of one ring in shared memory (cache-line separated).
pub struct RingPtrs {
    /// Producer index.
    pub prod: *const AtomicU32,
    /// Consumer index.
    pub cons: *const AtomicU32,
    /// First descriptor.
    pub desc: *mut u64,
    /// Entries (power of two).
    pub size: u32,
}

// SAFETY: raw pointers into a shared mapping whose owner outlives the users.
unsafe impl Send for RingPtrs {}

impl RingPtrs {
    /// Pointers to ring `id` of a region laid out as `l` at `base`.
    ///
    /// # Safety
    /// `base` maps `l.region_len` bytes that outlive the returned value.
    pub unsafe fn new(base: *mut u8, l: &Layout, id: RingId) -> RingPtrs {
        let r = base.add(l.ring_off[id as usize]);
        RingPtrs {
            prod: r.cast::<AtomicU32>(),
            cons: r.add(64).cast::<AtomicU32>(),
            desc: r.add(128).cast::<u64>(),
            size: l.ring_size,
        }
    }
}

/// The producer end of a ring: `prod` is ours (kept privately), `cons` the peer's.
pub struct Producer {
    ring: RingPtrs,
    prod: u32,
    /// Last free space seen, so the peer's index is read once per batch at most.
    room: u32,
}

/// What a ring end found wrong with the peer's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadIndex;

impl Producer {
    /// The producer end of `ring`, starting at index `start`.
    pub fn new(ring: RingPtrs, start: u32) -> Producer {
        Producer {
            ring,
            prod: start,
            room: 0,
        }
    }

    /// Free entries, reading the consumer's index; an index that claims more entries were
    /// consumed than produced is reported (and the ring then counts as full).
    pub fn refresh(&mut self) -> Result<u32, BadIndex> {
        // SAFETY: the ring's mapping outlives self.
        let cons = unsafe { (*self.ring.cons).load(Ordering::Acquire) };
        let used = self.prod.wrapping_sub(cons);
        if used > self.ring.size {
            self.room = 0;
            return Err(BadIndex);
        }
        self.room = self.ring.size - used;
        Ok(self.room)
    }

    /// Free entries last seen (without reading the peer's index).
    pub fn room(&self) -> u32 {
        self.room
    }

    /// Writes one descriptor (the caller checked `room() > 0`); visible after `publish`.
    pub fn push(&mut self, d: u64) {
        debug_assert!(self.room > 0);
        let i = (self.prod & (self.ring.size - 1)) as usize;
        // SAFETY: i < size; the slot is free (room > 0).
        unsafe { self.ring.desc.add(i).write_volatile(d) };
        self.prod = self.prod.wrapping_add(1);
        self.room -= 1;
    }

    /// Makes the pushed descriptors visible to the consumer.
    pub fn publish(&self) {
        // SAFETY: the ring's mapping outlives self.
        unsafe { (*self.ring.prod).store(self.prod, Ordering::Release) };
    }
}

/// The consumer end of a ring: `cons` is ours (kept privately), `prod` the peer's.
pub struct Consumer {
    ring: RingPtrs,
    cons: u32,
    avail: u32,
}

impl Consumer {
    /// The consumer end of `ring`, starting at index `start`.
    pub fn new(ring: RingPtrs, start: u32) -> Consumer {
        Consumer {
            ring,
            cons: start,
            avail: 0,
        }
    }

    /// Entries ready, reading the producer's index; an index more than a ring ahead is
    /// reported (and nothing is consumed).
    pub fn refresh(&mut self) -> Result<u32, BadIndex> {
        // SAFETY: the ring's mapping outlives self.
        let prod = unsafe { (*self.ring.prod).load(Ordering::Acquire) };
        let avail = prod.wrapping_sub(self.cons);
        if avail > self.ring.size {
            self.avail = 0;
            return Err(BadIndex);
        }
        self.avail = avail;
        Ok(avail)
    }

    /// Entries last seen ready.
    pub fn avail(&self) -> u32 {
        self.avail
    }

    /// Takes one descriptor (the caller checked `avail() > 0`); its slot is given back by
    /// `release`.
    pub fn pop(&mut self) -> u64 {
        debug_assert!(self.avail > 0);
        let i = (self.cons & (self.ring.size - 1)) as usize;
        // SAFETY: i < size.
        let d = unsafe { self.ring.desc.add(i).read_volatile() };
        self.cons = self.cons.wrapping_add(1);
        self.avail -= 1;
        d
    }

    /// Gives the popped slots back to the producer.
    pub fn release(&self) {
        // SAFETY: the ring's mapping outlives self.
        unsafe { (*self.ring.cons).store(self.cons, Ordering::Release) };
    }
}

/// Packs a descriptor.
pub fn desc(offset: u32, len: u32) -> u64 {
    offset as u64 | (len as u64) << 32
}

/// Unpacks a descriptor: (offset, len).
pub fn undesc(d: u64) -> (u32, u32) {
    (d as u32, (d >> 32) as u32)
}

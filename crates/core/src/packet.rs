//! Packet buffers: the descriptor layout and the owned `Packet` handle.
//!
//! A pool has two regions. The descriptor array holds, per buffer, a 256-byte record:
//!
//! ```text
//! 0      64                192       256
//! | desc | metadata (128)   | scratch |
//! ```
//!
//! and the frame region holds one `FRAME_SIZE` (4096, a power of two) data frame per buffer,
//! so a frame address maps to its descriptor by a shift (AF_XDP UMEM-compatible). Keeping the
//! descriptors dense, apart from the frames, keeps a worker's hot descriptors in a few pages
//! and cache sets; the default data offset of each frame is staggered by 64 bytes per frame
//! (frame index mod 16) for the same reason: 4096-byte-aligned objects all fall into one L1
//! cache set.
//!
//! Frames larger than a default buffer (jumbo frames) live in a companion pool of
//! [`LARGE_FRAME_SIZE`] frames (see `PacketPool::large`); every descriptor records its
//! frame's size, so a packet's room is known whichever pool it came from.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::metadata::METADATA_TOTAL_SIZE;

/// Size of one packet data frame (a power of two, AF_XDP-compatible).
pub const FRAME_SIZE: usize = 4096;
/// log2 of FRAME_SIZE.
pub const FRAME_SHIFT: u32 = 12;
/// Frame size of the companion pools that hold jumbo frames (a 9000-byte MTU and more).
pub const LARGE_FRAME_SIZE: usize = 16384;
/// Size of one descriptor record (descriptor, metadata, scratch).
pub const DESC_SIZE: usize = 256;
/// Offset of the dynamic metadata area in a descriptor record.
pub const METADATA_OFFSET: usize = 64;
/// Offset of the per-packet scratch area (for drivers and modules).
pub const SCRATCH_OFFSET: usize = METADATA_OFFSET + METADATA_TOTAL_SIZE;
/// Size of the scratch area.
pub const SCRATCH_SIZE: usize = 64;
/// Least headroom in front of the data of a fresh packet (for encapsulation).
pub const HEADROOM: usize = 256;
/// Number of distinct default data offsets (staggered by 64 bytes).
pub const DATA_OFFSET_COLOURS: usize = 16;
/// Largest packet every fresh buffer can hold without using headroom.
pub const DATA_CAPACITY: usize = data_capacity(FRAME_SIZE);
/// Largest packet every fresh buffer of a large-frame pool can hold.
pub const LARGE_DATA_CAPACITY: usize = data_capacity(LARGE_FRAME_SIZE);

/// Largest packet every fresh buffer of `frame_size`-byte frames holds without headroom.
pub const fn data_capacity(frame_size: usize) -> usize {
    frame_size - HEADROOM - 64 * (DATA_OFFSET_COLOURS - 1)
}

/// Default data offset of frame `idx`.
#[inline(always)]
pub const fn home_offset(idx: usize) -> usize {
    HEADROOM + 64 * (idx % DATA_OFFSET_COLOURS)
}

const _: () = assert!(FRAME_SIZE == 1 << FRAME_SHIFT);
const _: () = assert!(DATA_CAPACITY >= 2048);
const _: () = assert!(METADATA_TOTAL_SIZE >= 96);
const _: () = assert!(SCRATCH_OFFSET + SCRATCH_SIZE == DESC_SIZE);

#[cfg(debug_assertions)]
pub(crate) const STATE_FREE: u32 = 0xF2EE_F2EE;
#[cfg(debug_assertions)]
pub(crate) const STATE_LIVE: u32 = 0x11FE_11FE;

/// The descriptor at the start of every descriptor record.
#[repr(C, align(64))]
pub struct PacketDesc {
    pub(crate) data_off: u16,
    pub(crate) refcnt: AtomicU16,
    pub(crate) data_len: u32,
    pub(crate) pool_id: u16,
    pub(crate) home_off: u16,
    pub(crate) frame_idx: u32,
    pub(crate) buf: *mut u8,
    pub(crate) state: u32,
    pub(crate) frame_size: u32,
    _pad: [u32; 8],
}

const _: () = assert!(std::mem::size_of::<PacketDesc>() == METADATA_OFFSET);

/// An owned reference to one packet buffer.
///
/// Not `Clone`: a packet is in exactly one place (a batch, a queue, a module's table); a
/// second reference is made explicitly with [`crate::Context::clone_packet`], which bumps the
/// reference count. Dropping a `Packet` without freeing it leaks the buffer, so the framework
/// always frees through the pool.
#[repr(transparent)]
pub struct Packet(NonNull<PacketDesc>);

// SAFETY: a Packet is an exclusive handle to its frame; it moves between threads through rings.
unsafe impl Send for Packet {}

impl Packet {
    /// Wraps a raw descriptor pointer (pool internals and drivers only).
    ///
    /// # Safety
    /// `desc` must point at the descriptor of a live frame of a registered pool, and the caller
    /// must own that reference.
    #[inline(always)]
    pub unsafe fn from_raw(desc: *mut PacketDesc) -> Packet {
        Packet(NonNull::new_unchecked(desc))
    }

    /// Gives up the handle without freeing (pool internals and drivers only).
    #[inline(always)]
    pub fn into_raw(self) -> *mut PacketDesc {
        self.0.as_ptr()
    }

    /// Raw descriptor pointer (for identity comparisons in tests).
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut PacketDesc {
        self.0.as_ptr()
    }

    #[inline(always)]
    fn desc(&self) -> &PacketDesc {
        // SAFETY: the handle guarantees a live frame.
        let d = unsafe { self.0.as_ref() };
        #[cfg(debug_assertions)]
        assert_eq!(d.state, STATE_LIVE, "use after free of a packet buffer");
        d
    }

    #[inline(always)]
    fn desc_mut(&mut self) -> &mut PacketDesc {
        // SAFETY: as above, and the handle is exclusive.
        let d = unsafe { self.0.as_mut() };
        #[cfg(debug_assertions)]
        assert_eq!(d.state, STATE_LIVE, "use after free of a packet buffer");
        d
    }

    #[inline(always)]
    fn record(&self) -> *mut u8 {
        self.0.as_ptr() as *mut u8
    }

    #[inline(always)]
    fn frame(&self) -> *mut u8 {
        // SAFETY: the handle guarantees a live descriptor.
        unsafe { (*self.0.as_ptr()).buf }
    }

    /// Length of the packet data in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.desc().data_len as usize
    }

    /// True if the packet has no data bytes.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Length in bits, as counted by rate limits and gate counters.
    #[inline(always)]
    pub fn bits(&self) -> u64 {
        self.len() as u64 * 8
    }

    /// Offset of the first data byte from the start of the data frame.
    #[inline(always)]
    pub fn data_offset(&self) -> usize {
        self.desc().data_off as usize
    }

    /// Bytes free in front of the data.
    #[inline(always)]
    pub fn headroom(&self) -> usize {
        self.data_offset()
    }

    /// Bytes free after the data.
    #[inline(always)]
    pub fn tailroom(&self) -> usize {
        let d = self.desc();
        d.frame_size as usize - d.data_off as usize - d.data_len as usize
    }

    /// Size of the packet's frame (FRAME_SIZE, or LARGE_FRAME_SIZE for a jumbo buffer).
    #[inline(always)]
    pub fn frame_size(&self) -> usize {
        self.desc().frame_size as usize
    }

    /// Most data bytes the buffer holds from its default data offset (at least
    /// `DATA_CAPACITY`).
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        let d = self.desc();
        d.frame_size as usize - d.home_off as usize
    }

    /// The packet bytes.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let d = self.desc();
        // SAFETY: data_off + data_len <= frame_size is kept by every mutator.
        unsafe {
            std::slice::from_raw_parts(self.frame().add(d.data_off as usize), d.data_len as usize)
        }
    }

    /// The packet bytes, writable. Replicated packets share bytes: see [`Packet::is_shared`].
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (off, len) = {
            let d = self.desc_mut();
            (d.data_off as usize, d.data_len as usize)
        };
        // SAFETY: as in `data`, and the handle is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.frame().add(off), len) }
    }

    /// Sets the data length, keeping the start; fails if it would not fit in the frame.
    #[inline(always)]
    pub fn set_len(&mut self, len: usize) -> bool {
        let off = self.data_offset();
        if off + len > self.frame_size() {
            return false;
        }
        self.desc_mut().data_len = len as u32;
        true
    }

    /// Sets where the data starts in the frame and how long it is, for a frame whose bytes
    /// something outside the pool filled (an AF_XDP RX descriptor gives both); fails,
    /// changing nothing, if the range does not fit in the frame.
    #[inline(always)]
    pub fn set_data_bounds(&mut self, off: usize, len: usize) -> bool {
        if off + len > self.frame_size() {
            return false;
        }
        let d = self.desc_mut();
        d.data_off = off as u16;
        d.data_len = len as u32;
        true
    }

    /// Grows the data at the front by `n` bytes (into headroom); returns the new front.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.headroom() {
            return None;
        }
        let d = self.desc_mut();
        d.data_off -= n as u16;
        d.data_len += n as u32;
        Some(&mut self.data_mut()[..n])
    }

    /// Removes `n` bytes from the front; fails if the packet is shorter.
    #[inline]
    pub fn adj(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        let d = self.desc_mut();
        d.data_off += n as u16;
        d.data_len -= n as u32;
        true
    }

    /// Grows the data at the end by `n` bytes (into tailroom); returns the new tail.
    #[inline]
    pub fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        let old = self.len();
        self.desc_mut().data_len += n as u32;
        Some(&mut self.data_mut()[old..])
    }

    /// Removes `n` bytes from the end; fails if the packet is shorter.
    #[inline]
    pub fn trim(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.desc_mut().data_len -= n as u32;
        true
    }

    /// Replaces the packet contents with `bytes` at the frame's default data offset.
    pub fn set_data(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.capacity() {
            return false;
        }
        {
            let d = self.desc_mut();
            d.data_off = d.home_off;
            d.data_len = bytes.len() as u32;
        }
        self.data_mut().copy_from_slice(bytes);
        true
    }

    /// [`Packet::set_data_padded`] for a template of exactly `B` 64-byte blocks: a copy of
    /// fixed size, which the compiler emits as straight vector loads and stores. `len` must
    /// not exceed `B * 64`. False (packet unchanged) if the buffer cannot hold the blocks.
    #[inline(always)]
    pub fn set_data_blocks<const B: usize>(&mut self, blocks: &[[u8; 64]; B], len: usize) -> bool {
        debug_assert!(len <= B * 64);
        let Some(at) = self.reset_at_home(len, B * 64) else {
            return false;
        };
        // SAFETY: `reset_at_home` checked that B * 64 bytes fit from `at`.
        unsafe { (at as *mut [[u8; 64]; B]).write_unaligned(*blocks) };
        true
    }

    /// Makes the packet `len` bytes long at its home offset and returns where its data now
    /// starts, for a caller that writes the bytes itself (`room` bytes from there, `len` or
    /// more, are inside the buffer); None, packet unchanged, if the buffer has less room.
    /// The bytes are left as they were: the caller writes them.
    #[inline(always)]
    pub fn reset_at_home(&mut self, len: usize, room: usize) -> Option<*mut u8> {
        debug_assert!(len <= room);
        let off = {
            let d = self.desc_mut();
            if room > d.frame_size as usize - d.home_off as usize {
                return None;
            }
            d.data_off = d.home_off;
            d.data_len = len as u32;
            d.home_off as usize
        };
        // SAFETY: `off` is inside the frame (home_off < frame_size).
        Some(unsafe { self.frame().add(off) })
    }

    /// Replaces the contents with the first `len` bytes of `padded`, copying all of `padded`
    /// in 64-byte blocks (inline vector moves, no `memcpy` call). `padded.len()` must be a
    /// multiple of 64, at least `len` and at most the buffer's capacity; false otherwise.
    #[inline(always)]
    pub fn set_data_padded(&mut self, padded: &[u8], len: usize) -> bool {
        if len > padded.len() || padded.len() > self.capacity() || !padded.len().is_multiple_of(64)
        {
            return false;
        }
        let off = {
            let d = self.desc_mut();
            d.data_off = d.home_off;
            d.data_len = len as u32;
            d.home_off as usize
        };
        // SAFETY: padded.len() <= capacity = frame_size - home_off.
        unsafe {
            let dst = self.frame().add(off);
            for (i, block) in padded.chunks_exact(64).enumerate() {
                std::ptr::copy_nonoverlapping(block.as_ptr(), dst.add(i * 64), 64);
            }
        }
        true
    }

    /// True if another handle refers to the same buffer (after Replicate).
    #[inline(always)]
    pub fn is_shared(&self) -> bool {
        self.desc().refcnt.load(Ordering::Relaxed) > 1
    }

    /// Current reference count.
    pub fn refcnt(&self) -> u16 {
        self.desc().refcnt.load(Ordering::Relaxed)
    }

    /// Index of the pool the buffer belongs to.
    pub fn pool_id(&self) -> u16 {
        self.desc().pool_id
    }

    /// Index of the buffer in its pool (frame address = frame base + index × frame size).
    pub fn frame_index(&self) -> u32 {
        self.desc().frame_idx
    }

    /// The whole dynamic metadata area.
    #[inline(always)]
    pub fn metadata(&self) -> &[u8; METADATA_TOTAL_SIZE] {
        let _ = self.desc();
        // SAFETY: the metadata area lies inside the record right after the descriptor.
        unsafe { &*(self.record().add(METADATA_OFFSET) as *const [u8; METADATA_TOTAL_SIZE]) }
    }

    /// The whole dynamic metadata area, writable.
    #[inline(always)]
    pub fn metadata_mut(&mut self) -> &mut [u8; METADATA_TOTAL_SIZE] {
        let _ = self.desc_mut();
        // SAFETY: as above, and the handle is exclusive.
        unsafe { &mut *(self.record().add(METADATA_OFFSET) as *mut [u8; METADATA_TOTAL_SIZE]) }
    }

    /// Reads a metadata attribute of `N` bytes at its assigned offset (zeros if unassigned).
    #[inline(always)]
    pub fn get_attr<const N: usize>(&self, off: crate::metadata::AttrOffset) -> [u8; N] {
        match off {
            crate::metadata::AttrOffset::At(o) => {
                let o = o as usize;
                let mut out = [0u8; N];
                out.copy_from_slice(&self.metadata()[o..o + N]);
                out
            }
            _ => [0u8; N],
        }
    }

    /// Writes a metadata attribute at its assigned offset (skipped when nobody reads it).
    #[inline(always)]
    pub fn set_attr(&mut self, off: crate::metadata::AttrOffset, value: &[u8]) {
        if let crate::metadata::AttrOffset::At(o) = off {
            let o = o as usize;
            self.metadata_mut()[o..o + value.len()].copy_from_slice(value);
        }
    }

    /// The per-packet scratch area (driver/module private).
    pub fn scratch_mut(&mut self) -> &mut [u8; SCRATCH_SIZE] {
        let _ = self.desc_mut();
        // SAFETY: the scratch area lies inside the record.
        unsafe { &mut *(self.record().add(SCRATCH_OFFSET) as *mut [u8; SCRATCH_SIZE]) }
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Packet(pool {}, frame {}, len {})",
            self.pool_id(),
            self.frame_index(),
            self.len()
        )
    }
}

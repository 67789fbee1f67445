//! Checking what the kernel hands back on AF_XDP rings (RX and completion descriptors)
//! before any of it is used as a packet: the address must fall in a frame of the UMEM that
//! the socket lent to the kernel, and the bytes it names must lie inside that frame.
//! Anything else is refused and counted, and its frame is left alone, so ring contents,
//! however wrong, cannot make the daemon touch memory outside the UMEM, take a frame it did
//! not lend (which another owner may be using) or take one frame twice. Kept apart from the
//! socket code so the fuzzer (`crates/fuzz-targets`, `xdp_descriptors`) can drive it.

use bessemer_core::packet::{FRAME_SHIFT, FRAME_SIZE};
use bessemer_core::{Packet, PacketPool, PoolCache};

/// Frames one socket lent to the kernel (fill ring, or TX ring until completion): one bit
/// per frame of the pool.
pub struct HeldFrames(Box<[u64]>);

impl HeldFrames {
    /// No frame held, room for `frames` frames.
    pub fn new(frames: usize) -> HeldFrames {
        HeldFrames(vec![0; frames.div_ceil(64)].into_boxed_slice())
    }

    /// Marks frame `idx` as lent to the kernel.
    #[inline(always)]
    pub fn set(&mut self, idx: u32) {
        if let Some(w) = self.0.get_mut(idx as usize / 64) {
            *w |= 1 << (idx % 64);
        }
    }

    /// Marks frame `idx` as ours again.
    #[inline(always)]
    pub fn clear(&mut self, idx: u32) {
        if let Some(w) = self.0.get_mut(idx as usize / 64) {
            *w &= !(1 << (idx % 64));
        }
    }

    /// Whether frame `idx` is lent to the kernel.
    #[inline(always)]
    pub fn contains(&self, idx: u32) -> bool {
        self.0
            .get(idx as usize / 64)
            .is_some_and(|w| w & (1 << (idx % 64)) != 0)
    }

    /// The frames lent, in order.
    pub fn frames(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| (i * 64 + b) as u32)
        })
    }
}

/// Why a descriptor was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadDesc {
    /// The address is past the UMEM's last frame.
    OutsideUmem,
    /// The frame was not lent to the kernel (it is the graph's, or already returned).
    NotLent,
    /// Offset + length run past the end of the frame.
    PastFrame,
}

/// Where a valid descriptor's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescSpan {
    /// Frame index in the UMEM.
    pub frame: u32,
    /// Offset of the first byte within the frame.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// Checks descriptor `addr`/`len` against a UMEM of `nframes` frames of which `held` are
/// lent to the kernel. Pure: reads nothing but its arguments.
#[inline(always)]
pub fn check(addr: u64, len: u32, nframes: usize, held: &HeldFrames) -> Result<DescSpan, BadDesc> {
    let frame = addr >> FRAME_SHIFT;
    if frame >= nframes as u64 {
        return Err(BadDesc::OutsideUmem);
    }
    let frame = frame as u32;
    if !held.contains(frame) {
        return Err(BadDesc::NotLent);
    }
    let offset = addr as usize & (FRAME_SIZE - 1);
    let len = len as usize;
    if offset + len > FRAME_SIZE {
        return Err(BadDesc::PastFrame);
    }
    Ok(DescSpan { frame, offset, len })
}

/// Takes back the frame an RX descriptor names as a packet holding its bytes. A lent frame
/// with bounds past its end is taken back and freed (the kernel returned it) and refused
/// as `PastFrame`; any other refused descriptor leaves every frame as it was.
#[inline(always)]
pub fn take_rx(
    pool: &PacketPool,
    held: &mut HeldFrames,
    cache: &mut PoolCache,
    addr: u64,
    len: u32,
) -> Result<Packet, BadDesc> {
    let span = match check(addr, len, pool.capacity(), held) {
        Ok(span) => span,
        Err(BadDesc::PastFrame) => {
            let frame = (addr >> FRAME_SHIFT) as u32;
            held.clear(frame);
            // SAFETY: the frame is in the UMEM and was lent to the kernel, which gave it back.
            if let Some(p) = unsafe { pool.packet_at((frame as u64) << FRAME_SHIFT) } {
                cache.free(p);
            }
            return Err(BadDesc::PastFrame);
        }
        Err(e) => return Err(e),
    };
    held.clear(span.frame);
    // SAFETY: as above: lent, in the UMEM, given back.
    let mut p = unsafe { pool.packet_at((span.frame as u64) << FRAME_SHIFT) }
        .expect("check() keeps the frame inside the pool");
    let fits = p.set_data_bounds(span.offset, span.len);
    debug_assert!(fits, "check() keeps the bytes inside the frame");
    Ok(p)
}

/// Takes back the frame a completion descriptor names (a sent packet's), if it was lent.
#[inline(always)]
pub fn take_completed(
    pool: &PacketPool,
    held: &mut HeldFrames,
    addr: u64,
) -> Result<Packet, BadDesc> {
    let span = check(addr, 0, pool.capacity(), held)?;
    held.clear(span.frame);
    // SAFETY: lent to the kernel for sending, in the UMEM, completed.
    Ok(
        unsafe { pool.packet_at((span.frame as u64) << FRAME_SHIFT) }
            .expect("check() keeps the frame inside the pool"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::mem::PagePolicy;

    #[test]
    fn held_frames_are_listed() {
        let mut h = HeldFrames::new(130);
        h.set(0);
        h.set(65);
        h.set(129);
        h.clear(65);
        assert_eq!(h.frames().collect::<Vec<_>>(), vec![0, 129]);
        assert!(h.contains(129) && !h.contains(65) && !h.contains(5000));
    }

    #[test]
    fn descriptors_outside_the_umem_unlent_or_past_the_frame_are_refused() {
        let mut h = HeldFrames::new(8);
        h.set(3);
        let at = |f: u64, off: u64| (f << FRAME_SHIFT) + off;
        assert_eq!(
            check(at(3, 256), 1500, 8, &h),
            Ok(DescSpan {
                frame: 3,
                offset: 256,
                len: 1500
            })
        );
        assert_eq!(check(at(8, 0), 60, 8, &h), Err(BadDesc::OutsideUmem));
        assert_eq!(check(u64::MAX, 60, 8, &h), Err(BadDesc::OutsideUmem));
        assert_eq!(check(at(2, 256), 60, 8, &h), Err(BadDesc::NotLent));
        assert_eq!(check(at(3, 4000), 200, 8, &h), Err(BadDesc::PastFrame));
        assert_eq!(check(at(3, 0), u32::MAX, 8, &h), Err(BadDesc::PastFrame));
    }

    #[test]
    fn a_frame_is_taken_back_once_and_a_bad_one_is_freed() {
        let pool = PacketPool::new("t", 64, PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut held = HeldFrames::new(pool.capacity());
        let mut lent = Vec::new();
        for _ in 0..2 {
            let p = cache.alloc(0).unwrap();
            held.set(p.frame_index());
            lent.push(p.frame_index());
            let _ = p.into_raw();
        }
        let addr = |f: u32| ((f as u64) << FRAME_SHIFT) + 256;
        let p = take_rx(&pool, &mut held, &mut cache, addr(lent[0]), 60).unwrap();
        assert_eq!(p.len(), 60);
        // The same descriptor again: that frame is no longer lent.
        let again = take_rx(&pool, &mut held, &mut cache, addr(lent[0]), 60);
        assert_eq!(again.err(), Some(BadDesc::NotLent));
        let bad = take_rx(&pool, &mut held, &mut cache, addr(lent[1]), 8000);
        assert_eq!(bad.err(), Some(BadDesc::PastFrame));
        assert!(!held.contains(lent[1]));
        cache.free(p);
        drop(cache);
        assert_eq!(pool.free_count(), pool.capacity());
    }
}

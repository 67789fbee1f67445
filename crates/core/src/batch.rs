//! Packet batches: the only unit the module graph moves.

use std::mem::MaybeUninit;

use crate::packet::Packet;

/// Maximum number of packets in one batch: 64 (as the omec fork ships; every per-batch cost
/// is spread over twice the packets of upstream BESS's 32, see docs/performance.md), or 32
/// with the `batch32` feature.
pub const MAX_BURST: usize = if cfg!(feature = "batch32") { 32 } else { 64 };

/// Up to `MAX_BURST` owned packets.
pub struct PacketBatch {
    cnt: usize,
    pkts: [MaybeUninit<Packet>; MAX_BURST],
}

impl Default for PacketBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBatch {
    /// An empty batch.
    #[inline(always)]
    pub const fn new() -> Self {
        PacketBatch {
            cnt: 0,
            pkts: [const { MaybeUninit::uninit() }; MAX_BURST],
        }
    }

    /// Number of packets in the batch.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.cnt
    }

    /// True if the batch holds no packet.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.cnt == 0
    }

    /// True if no more packets fit.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.cnt == MAX_BURST
    }

    /// Free slots.
    #[inline(always)]
    pub fn room(&self) -> usize {
        MAX_BURST - self.cnt
    }

    /// The packets.
    #[inline(always)]
    pub fn pkts(&self) -> &[Packet] {
        // SAFETY: the first `cnt` slots are initialised.
        unsafe { std::slice::from_raw_parts(self.pkts.as_ptr() as *const Packet, self.cnt) }
    }

    /// The packets, writable.
    #[inline(always)]
    pub fn pkts_mut(&mut self) -> &mut [Packet] {
        // SAFETY: the first `cnt` slots are initialised.
        unsafe { std::slice::from_raw_parts_mut(self.pkts.as_mut_ptr() as *mut Packet, self.cnt) }
    }

    /// Adds a packet; gives it back if the batch is full.
    #[inline(always)]
    pub fn push(&mut self, pkt: Packet) -> Result<(), Packet> {
        if self.cnt == MAX_BURST {
            return Err(pkt);
        }
        self.pkts[self.cnt].write(pkt);
        self.cnt += 1;
        Ok(())
    }

    /// Adds a packet to a batch known to have room.
    ///
    /// # Safety
    /// `self.len() < MAX_BURST`.
    #[inline(always)]
    pub unsafe fn push_unchecked(&mut self, pkt: Packet) {
        debug_assert!(self.cnt < MAX_BURST);
        self.pkts.get_unchecked_mut(self.cnt).write(pkt);
        self.cnt += 1;
    }

    /// Removes and returns the last packet.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<Packet> {
        if self.cnt == 0 {
            return None;
        }
        self.cnt -= 1;
        // SAFETY: slot `cnt` was initialised and is now outside the live range.
        Some(unsafe { self.pkts[self.cnt].assume_init_read() })
    }

    /// Moves all packets out, in order, leaving the batch empty.
    #[inline(always)]
    pub fn drain(&mut self) -> Drain<'_> {
        let n = self.cnt;
        self.cnt = 0;
        Drain {
            batch: self,
            i: 0,
            n,
        }
    }

    /// Moves all packets of `other` to the end of `self`; `other.len() <= self.room()` required.
    #[inline(always)]
    pub fn append(&mut self, other: &mut PacketBatch) {
        assert!(other.cnt <= self.room(), "batch overflow in append");
        if self.cnt == 0 && other.cnt > 4 {
            // Fixed-size copy of the whole slot array: a few vector moves, no memcpy call.
            // SAFETY: bitwise copy of MaybeUninit slots; `other` gives up ownership below.
            self.pkts = unsafe { std::ptr::read(&other.pkts) };
            self.cnt = other.cnt;
            other.cnt = 0;
            return;
        }
        if other.cnt <= 4 {
            for i in 0..other.cnt {
                // SAFETY: slot i < other.cnt is initialised; it moves to a free slot here.
                let p = unsafe { other.pkts[i].assume_init_read() };
                self.pkts[self.cnt + i].write(p);
            }
            self.cnt += other.cnt;
            other.cnt = 0;
            return;
        }
        // SAFETY: ranges are in bounds and disjoint (different batches); ownership moves.
        unsafe {
            std::ptr::copy_nonoverlapping(
                other.pkts.as_ptr(),
                self.pkts.as_mut_ptr().add(self.cnt),
                other.cnt,
            );
        }
        self.cnt += other.cnt;
        other.cnt = 0;
    }

    /// Raw slot pointer, for the pool's bulk routines.
    #[inline(always)]
    pub(crate) fn slots_mut(&mut self) -> *mut Packet {
        self.pkts.as_mut_ptr() as *mut Packet
    }

    /// Sets the count after the pool filled slots directly.
    ///
    /// # Safety
    /// Slots `..n` must hold owned packets.
    #[inline(always)]
    pub(crate) unsafe fn set_len(&mut self, n: usize) {
        self.cnt = n;
    }

    /// Keeps the packets for which `keep` is true, in order, and moves the others to `out`
    /// (which must have room for them).
    #[inline]
    pub fn split_off_if(&mut self, out: &mut PacketBatch, mut keep: impl FnMut(&Packet) -> bool) {
        let n = self.cnt;
        let mut w = 0;
        self.cnt = 0;
        for i in 0..n {
            // SAFETY: slot i < n is initialised; each packet is moved exactly once.
            let p = unsafe { self.pkts[i].assume_init_read() };
            if keep(&p) {
                self.pkts[w].write(p);
                w += 1;
            } else if let Err(p) = out.push(p) {
                // Caller broke the room contract: keep the packet rather than leak it.
                self.pkts[w].write(p);
                w += 1;
            }
        }
        self.cnt = w;
    }
}

impl Drop for PacketBatch {
    fn drop(&mut self) {
        if self.cnt != 0 && !std::thread::panicking() {
            // Packets must go back to their pool; a batch dropped full is a leak bug.
            debug_assert!(
                false,
                "PacketBatch dropped with {} packets (leak)",
                self.cnt
            );
        }
    }
}

/// Iterator moving packets out of a batch.
pub struct Drain<'a> {
    batch: &'a mut PacketBatch,
    i: usize,
    n: usize,
}

impl Iterator for Drain<'_> {
    type Item = Packet;
    #[inline(always)]
    fn next(&mut self) -> Option<Packet> {
        if self.i == self.n {
            return None;
        }
        // SAFETY: slots i..n were initialised and are read once each.
        let p = unsafe { self.batch.pkts[self.i].assume_init_read() };
        self.i += 1;
        Some(p)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.n - self.i, Some(self.n - self.i))
    }
}

impl ExactSizeIterator for Drain<'_> {}

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        // Packets not consumed stay owned by the batch, compacted to the front.
        let rest = self.n - self.i;
        if rest > 0 {
            // SAFETY: moves the unread initialised slots to the front.
            unsafe {
                let base = self.batch.pkts.as_mut_ptr();
                std::ptr::copy(base.add(self.i), base, rest);
            }
        }
        self.batch.cnt = rest;
    }
}

//! The runnable sets of the weighted-fair and priority policies and the tree's wake-up queue.

use super::{at, at_mut, MAX_CHILDREN, MAX_PASS_INC, NONE};

/// Key of a slot whose child is not runnable (or of a free slot).
pub(super) const BLOCKED_KEY: u64 = u64::MAX;
/// Low bits of a key: the slot (so keys are unique and ties go to the lower slot).
pub(super) const SLOT_BITS: u32 = MAX_CHILDREN.trailing_zeros();
pub(super) const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Passes are rebased (all lowered by the global pass) before any reaches this.
pub(super) const REBASE_AT: u64 = 1 << (63 - SLOT_BITS);

/// The runnable set of a weighted-fair class: a sorted FIFO beside a tournament (winner)
/// tree over child slots.
///
/// Each runnable child owns a slot and a key `pass << SLOT_BITS | slot` (unique, so ties go
/// to the lower slot), held in exactly one of two places:
///
/// * the **tree**: node `i` holds the lowest key below it (slot `s` is node `cap + s`, with
///   BLOCKED_KEY when its key is not in the tree), so `key[1]` is the tree's lowest key.
///   Changing one key recomputes the minimum along its path to the root: log2(slots) steps
///   with no data-dependent branches or addresses, unlike a heap's sift-down;
/// * the **FIFO**: a ring of keys in increasing order. A key larger than every key in it
///   is appended in O(1), and its first key is its lowest.
///
/// The lowest runnable key is the lower of the tree's and the FIFO's first. After a child
/// runs its key grows; when it is then larger than the FIFO's last key (always, when the
/// shares are equal: the child that ran goes behind all others) it moves to the FIFO's end
/// without touching the tree, otherwise into the tree. A round thus costs at most one
/// tree path, and none in the common case where the children take turns. Operations away
/// from the lowest key (a child leaving from the middle of the FIFO, a rebase, growing)
/// first move the FIFO's keys into the tree.
#[derive(Clone, Debug)]
pub(super) struct Tourney {
    /// Number of slots (a power of two, at least 2).
    pub(super) cap: usize,
    /// Tree of minimum keys, `2 * cap` long (index 0 unused).
    pub(super) key: Vec<u64>,
    pub(super) stride: Vec<u32>,
    /// Class index per slot (NONE if free).
    pub(super) child: Vec<u32>,
    pub(super) free: Vec<u32>,
    /// Runnable children.
    pub(super) nrun: u32,
    /// The FIFO's ring (`cap` long; each runnable slot is in the tree or here, not both).
    pub(super) fifo: Vec<u64>,
    /// Ring index of the FIFO's first key.
    pub(super) head: u32,
    /// Keys in the FIFO.
    pub(super) len: u32,
    /// The FIFO's first key (BLOCKED_KEY if empty), kept beside the ring so that finding the
    /// lowest key is one comparison of two loads.
    pub(super) front: u64,
    /// The FIFO's last key (0 if empty: any key may then be appended).
    pub(super) back: u64,
}

impl Tourney {
    pub(super) fn new() -> Self {
        Tourney {
            cap: 2,
            key: vec![BLOCKED_KEY; 4],
            stride: vec![0; 2],
            child: vec![NONE; 2],
            free: vec![1, 0],
            nrun: 0,
            fifo: vec![0; 2],
            head: 0,
            len: 0,
            front: BLOCKED_KEY,
            back: 0,
        }
    }

    /// The runnable slot with the lowest pass (if any is runnable).
    #[inline(always)]
    pub(super) fn top(&self) -> usize {
        (self.top_key() & SLOT_MASK) as usize
    }

    /// The lowest key: the runnable slot with the lowest pass, and that pass.
    #[inline(always)]
    pub(super) fn top_key(&self) -> u64 {
        self.front.min(*at(&self.key, 1))
    }

    /// The child in the runnable slot with the lowest pass (one must be runnable).
    #[inline(always)]
    pub(super) fn top_child(&self) -> u32 {
        *at(&self.child, self.top())
    }

    /// Sets a slot's key in the tree and recomputes the minima on its path to the root.
    #[inline]
    pub(super) fn set_key(&mut self, slot: usize, key: u64) {
        assert!(slot < self.cap);
        let k = self.key.as_mut_ptr();
        let mut i = self.cap + slot;
        let mut m = key;
        // SAFETY: `key` is `2 * cap` long, so `i` and `i ^ 1` (both below `2 * cap`, `i`
        // only shrinking) are in bounds.
        unsafe {
            *k.add(i) = key;
            while i > 1 {
                m = m.min(*k.add(i ^ 1));
                i >>= 1;
                *k.add(i) = m;
            }
        }
    }

    /// Removes the FIFO's first key (the FIFO must not be empty).
    #[inline(always)]
    pub(super) fn pop_front(&mut self) {
        debug_assert!(self.len > 0);
        self.head = (self.head + 1) & (self.cap as u32 - 1);
        self.len -= 1;
        if self.len == 0 {
            self.front = BLOCKED_KEY;
            self.back = 0;
        } else {
            self.front = *at(&self.fifo, self.head as usize);
        }
    }

    /// Appends a key larger than every key in the FIFO.
    #[inline(always)]
    pub(super) fn push_back(&mut self, key: u64) {
        debug_assert!(key > self.back || self.len == 0);
        let i = (self.head + self.len) & (self.cap as u32 - 1);
        *at_mut(&mut self.fifo, i as usize) = key;
        if self.len == 0 {
            self.front = key;
        }
        self.len += 1;
        self.back = key;
    }

    /// Puts a runnable slot's key where it is cheapest: the FIFO's end if it is larger than
    /// every key there, else the tree (whose leaf for the slot must be BLOCKED_KEY).
    #[inline(always)]
    pub(super) fn insert(&mut self, slot: usize, key: u64) {
        if key >= self.back {
            self.push_back(key);
        } else {
            self.set_key(slot, key);
        }
    }

    /// Replaces the lowest key `top` (of `slot`) with the larger `key`.
    #[inline(always)]
    pub(super) fn requeue_top(&mut self, slot: usize, top: u64, key: u64) {
        if top == self.front {
            self.pop_front();
            self.insert(slot, key);
        } else if key >= self.back {
            self.set_key(slot, BLOCKED_KEY);
            self.push_back(key);
        } else {
            self.set_key(slot, key);
        }
    }

    /// Removes the lowest key `top` (of `slot`).
    #[inline(always)]
    pub(super) fn remove_top(&mut self, slot: usize, top: u64) {
        if top == self.front {
            self.pop_front();
        } else {
            self.set_key(slot, BLOCKED_KEY);
        }
    }

    /// The child holding the lowest key `top` ran: the global pass becomes its pass, and its
    /// pass grows by `inc`, or it leaves the set if it is now `blocked`.
    #[inline(always)]
    pub(super) fn ran(&mut self, top: u64, inc: u64, blocked: bool, vtime: &mut u64) {
        let slot = (top & SLOT_MASK) as usize;
        let pass = top >> SLOT_BITS;
        *vtime = pass;
        if blocked {
            self.nrun -= 1;
            self.remove_top(slot, top);
        } else if pass + inc < REBASE_AT {
            self.requeue_top(slot, top, top + (inc << SLOT_BITS));
        } else {
            // Moves every key into the tree and lowers them by `pass` (to 0 for this one).
            self.rebase(vtime);
            self.set_key(slot, (inc << SLOT_BITS) | slot as u64);
        }
    }

    /// Moves every key of the FIFO into the tree.
    #[cold]
    pub(super) fn flush(&mut self) {
        let mask = self.cap - 1;
        for j in 0..self.len as usize {
            let k = self.fifo[(self.head as usize + j) & mask];
            self.key[self.cap + (k & SLOT_MASK) as usize] = k;
        }
        self.head = 0;
        self.len = 0;
        self.front = BLOCKED_KEY;
        self.back = 0;
        self.rebuild();
    }

    pub(super) fn rebuild(&mut self) {
        for i in (1..self.cap).rev() {
            self.key[i] = self.key[2 * i].min(self.key[2 * i + 1]);
        }
    }

    /// Gives `child` a (blocked) slot.
    pub(super) fn alloc(&mut self, child: u32, stride: u32) -> u32 {
        if self.free.is_empty() {
            self.flush();
            let old = self.cap;
            self.cap *= 2;
            let mut key = vec![BLOCKED_KEY; 2 * self.cap];
            key[self.cap..self.cap + old].copy_from_slice(&self.key[old..2 * old]);
            self.key = key;
            self.rebuild();
            self.stride.resize(self.cap, 0);
            self.child.resize(self.cap, NONE);
            self.fifo.resize(self.cap, 0);
            self.free.extend((old as u32..self.cap as u32).rev());
        }
        let s = self.free.pop().expect("free slot");
        self.child[s as usize] = child;
        self.stride[s as usize] = stride;
        s
    }

    /// Frees a (blocked) slot.
    pub(super) fn release(&mut self, slot: u32) {
        debug_assert_eq!(self.key[self.cap + slot as usize], BLOCKED_KEY);
        self.child[slot as usize] = NONE;
        self.free.push(slot);
    }

    /// Lowers every runnable pass and the global pass by `vtime` (keeps all orders).
    #[cold]
    pub(super) fn rebase(&mut self, vtime: &mut u64) {
        self.flush();
        let m = *vtime << SLOT_BITS;
        for k in &mut self.key[1..] {
            if *k != BLOCKED_KEY {
                *k -= m.min(*k & !SLOT_MASK);
            }
        }
        *vtime = 0;
    }

    /// Makes a blocked slot runnable `remain` ahead of the lowest runnable pass.
    pub(super) fn join(&mut self, slot: usize, remain: u64, vtime: &mut u64) {
        let base = if self.nrun > 0 {
            self.top_key() >> SLOT_BITS
        } else {
            *vtime
        };
        let mut p = base + remain.min(MAX_PASS_INC);
        if p >= REBASE_AT {
            p -= *vtime;
            self.rebase(vtime);
        }
        self.nrun += 1;
        self.insert(slot, (p << SLOT_BITS) | slot as u64);
    }

    /// Makes a runnable slot blocked; returns how far ahead of the global pass it was.
    pub(super) fn leave(&mut self, slot: usize, vtime: u64) -> u64 {
        if self.key[self.cap + slot] == BLOCKED_KEY {
            // In the FIFO, perhaps in its middle.
            self.flush();
        }
        let remain = (self.key[self.cap + slot] >> SLOT_BITS).saturating_sub(vtime);
        self.nrun -= 1;
        self.set_key(slot, BLOCKED_KEY);
        remain
    }
}

/// A set of ranks with O(1) "first member": a three-level bitmap (up to 64^3 ranks).
#[derive(Clone, Debug, Default)]
pub(super) struct RankSet {
    pub(super) top: u64,
    pub(super) mid: Vec<u64>,
    pub(super) bits: Vec<u64>,
}

impl RankSet {
    pub(super) fn with_len(n: usize) -> Self {
        let words = n.div_ceil(64).max(1);
        RankSet {
            top: 0,
            mid: vec![0; words.div_ceil(64)],
            bits: vec![0; words],
        }
    }

    #[inline]
    pub(super) fn set(&mut self, i: u32) {
        let w = (i >> 6) as usize;
        self.bits[w] |= 1 << (i & 63);
        let m = w >> 6;
        self.mid[m] |= 1 << (w & 63);
        self.top |= 1 << m;
    }

    #[inline]
    pub(super) fn unset(&mut self, i: u32) {
        let w = (i >> 6) as usize;
        self.bits[w] &= !(1u64 << (i & 63));
        if self.bits[w] == 0 {
            let m = w >> 6;
            self.mid[m] &= !(1u64 << (w & 63));
            if self.mid[m] == 0 {
                self.top &= !(1u64 << m);
            }
        }
    }

    #[inline]
    pub(super) fn first(&self) -> usize {
        debug_assert!(self.top != 0);
        // A set bit in `top` (`mid`) names a word of `mid` (`bits`) with a set bit.
        let m = self.top.trailing_zeros() as usize;
        let w = (m << 6) + at(&self.mid, m).trailing_zeros() as usize;
        (w << 6) + at(&self.bits, w).trailing_zeros() as usize
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.top == 0
    }
}

/// A pending wake-up: class `idx` may run again at TSC `at` (if its `wake_gen` still
/// equals `gen`; otherwise the entry is stale and skipped).
#[derive(Clone, Copy, Debug)]
pub(super) struct Wake {
    pub(super) at: u64,
    pub(super) idx: u32,
    pub(super) gen: u32,
}

/// The tree's wake-up queue: a binary min-heap on the wake time.
#[derive(Debug, Default)]
pub(super) struct WakeQueue {
    pub(super) h: Vec<Wake>,
}

impl WakeQueue {
    /// The earliest wake time (u64::MAX if none).
    #[inline(always)]
    pub(super) fn next_at(&self) -> u64 {
        self.h.first().map_or(u64::MAX, |w| w.at)
    }

    #[inline]
    pub(super) fn push(&mut self, at: u64, idx: u32, gen: u32) {
        let h = &mut self.h;
        h.push(Wake { at, idx, gen });
        let mut pos = h.len() - 1;
        let e = h[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if h[parent].at <= e.at {
                break;
            }
            h[pos] = h[parent];
            pos = parent;
        }
        h[pos] = e;
    }

    /// Removes the earliest entry (the queue must not be empty).
    pub(super) fn pop(&mut self) -> Wake {
        let h = &mut self.h;
        let top = h[0];
        let last = h.pop().expect("non-empty");
        let n = h.len();
        if n > 0 {
            // Bottom-up: move the hole down along the earlier children, then sift `last`
            // (usually a late entry) up from there.
            let mut pos = 0;
            let mut l = 1;
            while l + 1 < n {
                let c = l + (h[l + 1].at < h[l].at) as usize;
                h[pos] = h[c];
                pos = c;
                l = 2 * pos + 1;
            }
            if l < n {
                h[pos] = h[l];
                pos = l;
            }
            while pos > 0 {
                let parent = (pos - 1) / 2;
                if h[parent].at <= last.at {
                    break;
                }
                h[pos] = h[parent];
                pos = parent;
            }
            h[pos] = last;
        }
        top
    }
}

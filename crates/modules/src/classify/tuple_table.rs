//! One tuple of a tuple-space classifier: an exact-match table of masked keys in which every
//! key sits in its home slot or the next one. A lookup then reads exactly two slots and
//! decides without a data-dependent branch, which matters when each packet probes every
//! tuple and most probes miss: a miss costs no mispredicted branch and probes of successive
//! packets overlap. Inserting a key that finds both slots taken doubles the table (or, past
//! a size bound, puts it in a small overflow list scanned on every lookup).
use std::hint::select_unpredictable;

use super::table::hash_words;

/// Slot marker for "no key".
const EMPTY: u64 = u64::MAX;

/// A table from keys of `words` u64 words to (rank, value): rank orders matches (0 = none).
#[derive(Clone, Debug)]
pub struct TupleTable {
    words: usize,
    /// Words per slot: the key, then the rank, then the value (EMPTY: free slot).
    stride: usize,
    bits: u32,
    /// 2^bits + 1 slots: the last one only ever holds keys whose home is the one before it.
    slots: Vec<u64>,
    /// Keys that found no room (kept rare by the size bound): (key, rank, value).
    overflow: Vec<(Vec<u64>, u64, u32)>,
    len: usize,
}

impl TupleTable {
    /// An empty table for keys of `words` words.
    pub fn new(words: usize) -> TupleTable {
        let mut t = TupleTable {
            words,
            stride: words + 2,
            bits: 0,
            slots: Vec::new(),
            overflow: Vec::new(),
            len: 0,
        };
        t.reset(3);
        t
    }

    fn reset(&mut self, bits: u32) {
        self.bits = bits;
        self.slots = vec![0; ((1usize << bits) + 1) * self.stride];
        for s in self.slots.chunks_exact_mut(self.stride) {
            s[self.words + 1] = EMPTY;
        }
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h >> (64 - self.bits)) as usize
    }

    fn find(&self, key: &[u64]) -> Option<usize> {
        let i = self.home(hash_words(key));
        (i..i + 2).find(|&j| {
            let s = &self.slots[j * self.stride..(j + 1) * self.stride];
            s[self.words + 1] != EMPTY && s[..self.words] == *key
        })
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u64]) -> Option<u32> {
        match self.find(key) {
            Some(j) => Some(self.slots[j * self.stride + self.words + 1] as u32),
            None => self.overflow.iter().find(|o| o.0 == key).map(|o| o.2),
        }
    }

    /// Inserts or replaces `key`; returns the value it replaced.
    pub fn insert(&mut self, key: &[u64], rank: u64, v: u32) -> Option<u32> {
        debug_assert!(rank != 0);
        let w = self.words;
        if let Some(j) = self.find(key) {
            let s = &mut self.slots[j * self.stride..(j + 1) * self.stride];
            let old = s[w + 1] as u32;
            s[w] = rank;
            s[w + 1] = v as u64;
            return Some(old);
        }
        if let Some(o) = self.overflow.iter_mut().find(|o| o.0 == key) {
            let old = o.2;
            (o.1, o.2) = (rank, v);
            return Some(old);
        }
        self.len += 1;
        self.place(key, rank, v);
        None
    }

    fn try_place(&mut self, key: &[u64], rank: u64, v: u32) -> bool {
        let (w, st) = (self.words, self.stride);
        let i = self.home(hash_words(key));
        for j in i..i + 2 {
            let s = &mut self.slots[j * st..(j + 1) * st];
            if s[w + 1] == EMPTY {
                s[..w].copy_from_slice(key);
                s[w] = rank;
                s[w + 1] = v as u64;
                return true;
            }
        }
        false
    }

    fn place(&mut self, key: &[u64], rank: u64, v: u32) {
        if self.try_place(key, rank, v) {
            return;
        }
        // Grow while the table stays within 16 slots per key; past that the key is one of
        // a rare cluster and goes to the overflow list.
        let mut entries: Vec<(Vec<u64>, u64, u32)> = self.entries().collect();
        entries.push((key.to_vec(), rank, v));
        let mut bits = self.bits;
        loop {
            bits += 1;
            if (1usize << bits) > 16 * entries.len().max(8) {
                // Keep the larger table; whatever does not fit overflows.
                self.reset(bits - 1);
                self.overflow.clear();
                for (k, r, v) in &entries {
                    if !self.try_place(k, *r, *v) {
                        self.overflow.push((k.clone(), *r, *v));
                    }
                }
                return;
            }
            self.reset(bits);
            if entries.iter().all(|(k, r, v)| self.try_place(k, *r, *v)) {
                self.overflow.clear();
                return;
            }
        }
    }

    fn entries(&self) -> impl Iterator<Item = (Vec<u64>, u64, u32)> + '_ {
        let w = self.words;
        self.slots
            .chunks_exact(self.stride)
            .filter(move |s| s[w + 1] != EMPTY)
            .map(move |s| (s[..w].to_vec(), s[w], s[w + 1] as u32))
            .chain(self.overflow.iter().cloned())
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &[u64]) -> Option<u32> {
        let w = self.words;
        let v = match self.find(key) {
            Some(j) => {
                let s = &mut self.slots[j * self.stride..(j + 1) * self.stride];
                let v = s[w + 1] as u32;
                s.fill(0);
                s[w + 1] = EMPTY;
                v
            }
            None => {
                let i = self.overflow.iter().position(|o| o.0 == key)?;
                self.overflow.swap_remove(i).2
            }
        };
        self.len -= 1;
        Some(v)
    }

    /// Every (key, value) pair.
    pub fn iter(&self) -> impl Iterator<Item = (Vec<u64>, u32)> + '_ {
        self.entries().map(|(k, _, v)| (k, v))
    }

    /// Looks up a key of `W` words (the table's width): (rank, value), rank 0 if absent.
    #[inline(always)]
    pub fn lookup<const W: usize>(&self, key: &[u64; W]) -> (u64, u32) {
        debug_assert_eq!(W, self.words);
        let i = self.home(hash_words(key)) * (W + 2);
        let s = &self.slots[i..i + 2 * (W + 2)];
        let (mut d0, mut d1) = (0u64, 0u64);
        for j in 0..W {
            d0 |= s[j] ^ key[j];
            d1 |= s[W + 2 + j] ^ key[j];
        }
        // Free slots hold a zero key and rank, so an all-zero key "matching" one gives rank 0.
        // Selects, not branches: whether a probe hits is random from packet to packet.
        let r0 = select_unpredictable(d0 == 0, s[W], 0);
        let r1 = select_unpredictable(d1 == 0, s[2 * W + 2], 0);
        let first = r0 >= r1;
        let mut r = select_unpredictable(first, r0, r1);
        let mut v = select_unpredictable(first, s[W + 1], s[2 * W + 3]) as u32;
        if !self.overflow.is_empty() {
            for o in &self.overflow {
                if o.0[..] == key[..] && o.1 > r {
                    (r, v) = (o.1, o.2);
                }
            }
        }
        (r, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Inserts, replacements and removals against a HashMap, keys from a small space so
        /// they collide and replace; lookups of every key after each step.
        #[test]
        fn agrees_with_a_hashmap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..300, 1u64..5), 1..400),
        ) {
            let mut t = TupleTable::new(2);
            let mut m: HashMap<[u64; 2], (u64, u32)> = HashMap::new();
            for (n, (ins, k, rank)) in ops.into_iter().enumerate() {
                let key = [k.wrapping_mul(0x1_0000_0001) & 0xff_00ff, k >> 3];
                if ins {
                    let old = m.insert(key, (rank, n as u32)).map(|o| o.1);
                    prop_assert_eq!(t.insert(&key, rank, n as u32), old);
                } else {
                    prop_assert_eq!(t.remove(&key), m.remove(&key).map(|o| o.1));
                }
                prop_assert_eq!(t.len(), m.len());
                for k in 0u64..300 {
                    let key = [k.wrapping_mul(0x1_0000_0001) & 0xff_00ff, k >> 3];
                    let want = m.get(&key).copied();
                    prop_assert_eq!(t.get(&key), want.map(|w| w.1));
                    let got = t.lookup::<2>(&key);
                    prop_assert_eq!(got, want.unwrap_or((0, got.1)));
                }
            }
        }
    }

    #[test]
    fn the_all_zero_key_is_found_and_missed() {
        let mut t = TupleTable::new(1);
        assert_eq!(t.lookup::<1>(&[0]).0, 0);
        t.insert(&[0], 7, 3);
        assert_eq!(t.lookup::<1>(&[0]), (7, 3));
        assert_eq!(t.remove(&[0]), Some(3));
        assert_eq!(t.lookup::<1>(&[0]).0, 0);
    }
}

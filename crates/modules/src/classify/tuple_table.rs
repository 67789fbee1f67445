//! One tuple of a tuple-space classifier: an exact-match table of masked keys in which every
//! key sits in its home slot or the next one. A lookup then reads exactly two slots and
//! decides without a data-dependent branch, which matters when each packet probes every
//! tuple and most probes miss: a miss costs no mispredicted branch and probes of successive
//! packets overlap. Inserting a key that finds both slots taken doubles the table (or, past
//! a size bound, puts it in a small overflow list scanned on every lookup).
use std::hint::select_unpredictable;

/// Hashes key words: a multiply per word by an odd constant, XORed. Cheaper than
/// [`super::table::hash_words`] (this runs once per packet per tuple); the table index is the
/// top bits, which depend on every key bit, and a poor spread only costs table size or
/// overflow entries, never a wrong answer.
#[inline(always)]
fn hash_words(words: &[u64]) -> u64 {
    const K: [u64; 8] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0x85EB_CA77_C2B2_AE63,
        0x27D4_EB2F_1656_67C5,
        0xFF51_AFD7_ED55_8CCD,
        0xC4CE_B9FE_1A85_EC53,
        0x94D0_49BB_1331_11EB,
    ];
    let mut h = 0u64;
    for (i, &w) in words.iter().enumerate() {
        h ^= w.wrapping_mul(K[i & 7]);
    }
    h
}

/// A table from keys of `words` u64 words to non-zero u64 tags; a lookup's tag orders
/// matches (0 = no match).
#[derive(Clone, Debug)]
pub struct TupleTable {
    words: usize,
    /// Words per slot: the key, then the tag (0: free slot, whose key is all zero).
    stride: usize,
    bits: u32,
    /// 2^bits + 1 slots: the last one only ever holds keys whose home is the one before it.
    slots: Vec<u64>,
    /// Keys that found no room (kept rare by the size bound): (key, tag).
    overflow: Vec<(Vec<u64>, u64)>,
    len: usize,
}

impl TupleTable {
    /// An empty table for keys of `words` words.
    pub fn new(words: usize) -> TupleTable {
        let mut t = TupleTable {
            words,
            stride: words + 1,
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
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when some key sits in the overflow list ([`TupleTable::lookup`] must scan it).
    pub fn has_overflow(&self) -> bool {
        !self.overflow.is_empty()
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h >> (64 - self.bits)) as usize
    }

    fn find(&self, key: &[u64]) -> Option<usize> {
        let i = self.home(hash_words(key));
        (i..i + 2).find(|&j| {
            let s = &self.slots[j * self.stride..(j + 1) * self.stride];
            s[self.words] != 0 && s[..self.words] == *key
        })
    }

    /// The tag stored under `key`.
    pub fn get(&self, key: &[u64]) -> Option<u64> {
        match self.find(key) {
            Some(j) => Some(self.slots[j * self.stride + self.words]),
            None => self.overflow.iter().find(|o| o.0 == key).map(|o| o.1),
        }
    }

    /// Inserts or replaces `key` with a non-zero tag; returns the tag it replaced.
    pub fn insert(&mut self, key: &[u64], tag: u64) -> Option<u64> {
        assert!(tag != 0, "tag 0 marks free slots");
        if let Some(j) = self.find(key) {
            let s = &mut self.slots[j * self.stride + self.words];
            return Some(std::mem::replace(s, tag));
        }
        if let Some(o) = self.overflow.iter_mut().find(|o| o.0 == key) {
            return Some(std::mem::replace(&mut o.1, tag));
        }
        self.len += 1;
        self.place(key, tag);
        None
    }

    fn try_place(&mut self, key: &[u64], tag: u64) -> bool {
        let (w, st) = (self.words, self.stride);
        let i = self.home(hash_words(key));
        for j in i..i + 2 {
            let s = &mut self.slots[j * st..(j + 1) * st];
            if s[w] == 0 {
                s[..w].copy_from_slice(key);
                s[w] = tag;
                return true;
            }
        }
        false
    }

    fn place(&mut self, key: &[u64], tag: u64) {
        if self.try_place(key, tag) {
            return;
        }
        // Grow while the table stays within 16 slots per key; past that the key is one of
        // a rare cluster and goes to the overflow list.
        let mut entries: Vec<(Vec<u64>, u64)> = self.iter().collect();
        entries.push((key.to_vec(), tag));
        let mut bits = self.bits;
        loop {
            bits += 1;
            if (1usize << bits) > 16 * entries.len().max(8) {
                // Keep the larger table; whatever does not fit overflows.
                self.reset(bits - 1);
                self.overflow.clear();
                for (k, t) in &entries {
                    if !self.try_place(k, *t) {
                        self.overflow.push((k.clone(), *t));
                    }
                }
                return;
            }
            self.reset(bits);
            if entries.iter().all(|(k, t)| self.try_place(k, *t)) {
                self.overflow.clear();
                return;
            }
        }
    }

    /// Removes `key`; returns its tag.
    pub fn remove(&mut self, key: &[u64]) -> Option<u64> {
        let w = self.words;
        let t = match self.find(key) {
            Some(j) => {
                let s = &mut self.slots[j * self.stride..(j + 1) * self.stride];
                let t = s[w];
                s.fill(0);
                t
            }
            None => {
                let i = self.overflow.iter().position(|o| o.0 == key)?;
                self.overflow.swap_remove(i).1
            }
        };
        self.len -= 1;
        Some(t)
    }

    /// Every (key, tag) pair.
    pub fn iter(&self) -> impl Iterator<Item = (Vec<u64>, u64)> + '_ {
        let w = self.words;
        self.slots
            .chunks_exact(self.stride)
            .filter(move |s| s[w] != 0)
            .map(move |s| (s[..w].to_vec(), s[w]))
            .chain(self.overflow.iter().cloned())
    }

    /// Every tag (without copying keys out).
    pub fn tags(&self) -> impl Iterator<Item = u64> + '_ {
        let w = self.words;
        self.slots
            .chunks_exact(self.stride)
            .map(move |s| s[w])
            .filter(|&t| t != 0)
            .chain(self.overflow.iter().map(|o| o.1))
    }

    /// Replaces every tag by `f(tag)` (non-zero).
    pub fn map_tags(&mut self, f: impl Fn(u64) -> u64) {
        let w = self.words;
        for s in self.slots.chunks_exact_mut(self.stride) {
            if s[w] != 0 {
                s[w] = f(s[w]);
            }
        }
        for o in &mut self.overflow {
            o.1 = f(o.1);
        }
    }

    /// Looks up a key of `W` words (the table's width): its tag, 0 if absent. With
    /// `OVERFLOW` false the overflow list is not scanned (the caller checked it is empty).
    #[inline(always)]
    pub fn lookup<const W: usize, const OVERFLOW: bool>(&self, key: &[u64; W]) -> u64 {
        debug_assert_eq!(W, self.words);
        let i = self.home(hash_words(key)) * (W + 1);
        debug_assert!(i + 2 * (W + 1) <= self.slots.len());
        // SAFETY: home < 2^bits and there are 2^bits + 1 slots of W + 1 words, so the home
        // slot and the next are inside `slots` (this saves a bounds check per probe).
        let s = unsafe { self.slots.get_unchecked(i..i + 2 * (W + 1)) };
        let (mut d0, mut d1) = (0u64, 0u64);
        for j in 0..W {
            d0 |= s[j] ^ key[j];
            d1 |= s[W + 1 + j] ^ key[j];
        }
        // Selects, not branches: whether a probe hits is random from packet to packet. A
        // free slot holds a zero key and tag, so an all-zero key "matching" it gives 0.
        let t0 = select_unpredictable(d0 == 0, s[W], 0);
        let t1 = select_unpredictable(d1 == 0, s[2 * W + 1], 0);
        let mut t = t0 | t1;
        if OVERFLOW {
            for o in &self.overflow {
                if o.0[..] == key[..] {
                    t = o.1;
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(k: u64) -> [u64; 2] {
        [k.wrapping_mul(0x1_0000_0001) & 0xff_00ff, k >> 3]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Inserts, replacements and removals against a HashMap, keys from a small space so
        /// they collide and replace; lookups of every key after each step.
        #[test]
        fn agrees_with_a_hashmap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..400),
        ) {
            let mut t = TupleTable::new(2);
            let mut m: HashMap<[u64; 2], u64> = HashMap::new();
            for (n, (ins, k)) in ops.into_iter().enumerate() {
                let tag = n as u64 + 1;
                if ins {
                    prop_assert_eq!(t.insert(&key(k), tag), m.insert(key(k), tag));
                } else {
                    prop_assert_eq!(t.remove(&key(k)), m.remove(&key(k)));
                }
                prop_assert_eq!(t.len(), m.len());
                for k in 0u64..300 {
                    let want = m.get(&key(k)).copied();
                    prop_assert_eq!(t.get(&key(k)), want);
                    prop_assert_eq!(t.lookup::<2, true>(&key(k)), want.unwrap_or(0));
                    if !t.has_overflow() {
                        prop_assert_eq!(t.lookup::<2, false>(&key(k)), want.unwrap_or(0));
                    }
                }
            }
        }
    }

    #[test]
    fn the_all_zero_key_is_found_and_missed() {
        let mut t = TupleTable::new(1);
        assert_eq!(t.lookup::<1, false>(&[0]), 0);
        t.insert(&[0], 7);
        assert_eq!(t.lookup::<1, false>(&[0]), 7);
        assert_eq!(t.remove(&[0]), Some(7));
        assert_eq!(t.lookup::<1, false>(&[0]), 0);
    }

    #[test]
    fn a_cluster_that_cannot_be_placed_overflows() {
        // Keys whose hashes share their top bits all want the same home slot.
        let mut t = TupleTable::new(1);
        let mut keys: Vec<u64> = Vec::new();
        let mut k = 0u64;
        while keys.len() < 6 {
            if hash_words(&[k]) >> 50 == 0 {
                keys.push(k);
            }
            k += 1;
        }
        for (i, &k) in keys.iter().enumerate() {
            t.insert(&[k], i as u64 + 1);
        }
        assert!(t.has_overflow());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.lookup::<1, true>(&[k]), i as u64 + 1);
        }
    }
}

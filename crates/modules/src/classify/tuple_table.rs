//! One tuple of a tuple-space classifier: an exact-match table of masked keys in which every
//! key sits in one of two slots chosen by its hash. A lookup then reads exactly two slots and
//! decides without a data-dependent branch, which matters when each packet probes every
//! tuple and most probes miss: a miss costs no mispredicted branch and probes of successive
//! packets overlap.
//!
//! A small table uses a key's home slot and the next one: the cheapest lookup there is, and
//! a table of a few hundred keys that needs many slots per key to place them all still fits
//! the first-level cache. Past [`NEIGHBOUR_MAX_BYTES`] the two slots are independent (cuckoo
//! hashing, keys moved to their other slot to make room), kept at most 2/5 full: with
//! neighbouring slots any three keys sharing a home force the table to double, and 5 000
//! keys took 64 Ki slots and still left a list to scan, so every probe missed the caches.
//! A key that finds no slot (past a size bound) goes to a small overflow list scanned on
//! every lookup.
use std::hint::select_unpredictable;

/// Hashes key words: a multiply per word by an odd constant, XORed. Cheaper than
/// [`super::table::hash_words`] (this runs once per packet per tuple); the first slot is the
/// top bits, which depend on every key bit, and a poor spread only costs table size or
/// overflow entries, never a wrong answer.
#[inline(always)]
pub fn hash_words(words: &[u64]) -> u64 {
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

/// The second slot's hash, from the first: the halves folded and multiplied again, so its
/// top bits depend on every bit of `h` (the low bits of a product depend only on the low bits
/// of the key, so taking them would send keys that differ in high bytes to one slot).
#[inline(always)]
fn rehash(h: u64) -> u64 {
    (h ^ (h >> 32)).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// Slot bytes a table with neighbouring slots may grow to before it turns to independent
/// ones.
pub const NEIGHBOUR_MAX_BYTES: usize = 64 << 10;
/// Keys moved at most per insert before the table grows.
const MAX_KICKS: usize = 256;
/// Most slots per key a table grows to; past it keys that find no slot overflow.
const MAX_SLOTS_PER_KEY: usize = 16;

/// A table from keys of `words` u64 words to non-zero u64 tags; a lookup's tag orders
/// matches (0 = no match).
#[derive(Clone, Debug)]
pub struct TupleTable {
    words: usize,
    /// Words per slot: the key, then the tag (0: free slot, whose key is all zero).
    stride: usize,
    bits: u32,
    /// The two slots of a key are independent (else its home and the next).
    cuckoo: bool,
    /// Largest `bits` allowed whatever the key count (tests lower it).
    max_bits: u32,
    /// 2^bits + 1 slots (with neighbouring slots, the last one only ever holds keys whose
    /// home is the one before it).
    slots: Vec<u64>,
    /// Keys that found no room (kept rare by the size bound): (key, tag).
    overflow: Vec<(Vec<u64>, u64)>,
    len: usize,
}

impl TupleTable {
    /// An empty table for keys of `words` words.
    pub fn new(words: usize) -> TupleTable {
        TupleTable::with_max_bits(words, 40)
    }

    fn with_max_bits(words: usize, max_bits: u32) -> TupleTable {
        let mut t = TupleTable {
            words,
            stride: words + 1,
            bits: 0,
            cuckoo: false,
            max_bits,
            slots: Vec::new(),
            overflow: Vec::new(),
            len: 0,
        };
        t.reset(3);
        t
    }

    fn reset(&mut self, bits: u32) {
        self.bits = bits;
        self.slots = super::table::zeroed_table(((1usize << bits) + 1) * self.stride, 0u64);
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

    /// Bytes of slots.
    pub fn size_bytes(&self) -> usize {
        self.slots.len() * 8
    }

    /// True when a key's two slots are independent (a large table: see the module notes);
    /// lookups must then pass `CUCKOO` true.
    pub fn is_cuckoo(&self) -> bool {
        self.cuckoo
    }

    /// The two slots of a key hashing to `h`.
    #[inline(always)]
    fn homes_of<const CUCKOO: bool>(&self, h: u64) -> (usize, usize) {
        let s = 64 - self.bits;
        let a = (h >> s) as usize;
        (
            a,
            if CUCKOO {
                (rehash(h) >> s) as usize
            } else {
                a + 1
            },
        )
    }

    fn homes(&self, h: u64) -> (usize, usize) {
        match self.cuckoo {
            true => self.homes_of::<true>(h),
            false => self.homes_of::<false>(h),
        }
    }

    fn slot(&self, i: usize) -> &[u64] {
        &self.slots[i * self.stride..(i + 1) * self.stride]
    }

    fn find(&self, key: &[u64]) -> Option<usize> {
        let (a, b) = self.homes(hash_words(key));
        [a, b].into_iter().find(|&j| {
            let s = self.slot(j);
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
        // At most 2/5 full: beyond about half, cuckoo inserts fail more and more often.
        if self.cuckoo && self.len * 5 > (1usize << self.bits) * 2 && self.bits < self.max_bits {
            self.rebuild(self.bits + 1, Some((key.to_vec(), tag)));
        } else {
            self.place(key, tag);
        }
        None
    }

    /// Puts `key` in one of its slots, in a cuckoo table moving keys to their other slot to
    /// make room; the entry left without a slot when that fails (the new key or one it
    /// moved).
    fn try_place(&mut self, key: &[u64], tag: u64) -> Option<(Vec<u64>, u64)> {
        let (w, st) = (self.words, self.stride);
        let mut cur: Vec<u64> = key.to_vec();
        let mut cur_tag = tag;
        // The slot the current entry was just pushed out of (it must try the other one).
        let mut from = usize::MAX;
        let kicks = if self.cuckoo { MAX_KICKS } else { 1 };
        for kick in 0..kicks {
            let (a, b) = self.homes(hash_words(&cur));
            for j in [a, b] {
                if self.slots[j * st + w] == 0 {
                    let s = &mut self.slots[j * st..(j + 1) * st];
                    s[..w].copy_from_slice(&cur);
                    s[w] = cur_tag;
                    return None;
                }
            }
            if kick + 1 == kicks {
                break;
            }
            let victim = if from == a { b } else { a };
            let s = &mut self.slots[victim * st..(victim + 1) * st];
            let old: Vec<u64> = s[..w].to_vec();
            let old_tag = s[w];
            s[..w].copy_from_slice(&cur);
            s[w] = cur_tag;
            cur = old;
            cur_tag = old_tag;
            from = victim;
        }
        Some((cur, cur_tag))
    }

    fn place(&mut self, key: &[u64], tag: u64) {
        if let Some(left) = self.try_place(key, tag) {
            if self.bits < self.max_bits {
                self.rebuild(self.bits + 1, Some(left));
            } else {
                self.overflow.push(left);
            }
        }
    }

    /// Moves every entry (and `extra`) into a table of 2^bits slots or more: it grows
    /// while some entry finds no slot, turning to independent slots past
    /// NEIGHBOUR_MAX_BYTES, and stays within MAX_SLOTS_PER_KEY slots per key; past that
    /// the entries without a slot overflow.
    fn rebuild(&mut self, mut bits: u32, extra: Option<(Vec<u64>, u64)>) {
        let mut entries: Vec<(Vec<u64>, u64)> = self.iter().collect();
        entries.extend(extra);
        loop {
            if !self.cuckoo && ((1usize << bits) + 1) * self.stride * 8 > NEIGHBOUR_MAX_BYTES {
                self.cuckoo = true;
                // At most 2/5 full from the start.
                while entries.len() * 5 > (1usize << bits) * 2 && bits > 3 {
                    bits -= 1;
                }
                while entries.len() * 5 > (1usize << bits) * 2 {
                    bits += 1;
                }
                bits = bits.min(self.max_bits);
            }
            self.reset(bits);
            self.overflow.clear();
            let mut left = Vec::new();
            for (k, t) in &entries {
                left.extend(self.try_place(k, *t));
            }
            let bound = (1usize << (bits + 1)) > MAX_SLOTS_PER_KEY * entries.len().max(8);
            if left.is_empty() || (self.cuckoo && bound) || bits >= self.max_bits {
                self.overflow = left;
                return;
            }
            bits += 1;
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

    /// Prefetches both slots of a key hashing to `h` in a cuckoo table.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        let (a, b) = self.homes_of::<true>(h);
        let p = self.slots.as_ptr();
        super::table::prefetch(p.wrapping_add(a * self.stride));
        super::table::prefetch(p.wrapping_add(b * self.stride));
    }

    /// Looks up a key of `W` words (the table's width): its tag, 0 if absent. With
    /// `OVERFLOW` false the overflow list is not scanned (the caller checked it is empty).
    #[inline(always)]
    pub fn lookup<const W: usize, const OVERFLOW: bool>(&self, key: &[u64; W]) -> u64 {
        match self.cuckoo {
            true => self.lookup_hashed::<W, OVERFLOW, true>(key, hash_words(key)),
            false => self.lookup_hashed::<W, OVERFLOW, false>(key, hash_words(key)),
        }
    }

    /// As [`TupleTable::lookup`], for a key whose [`hash_words`] is `h`; `CUCKOO` must be
    /// [`TupleTable::is_cuckoo`].
    #[inline(always)]
    pub fn lookup_hashed<const W: usize, const OVERFLOW: bool, const CUCKOO: bool>(
        &self,
        key: &[u64; W],
        h: u64,
    ) -> u64 {
        debug_assert_eq!(W, self.words);
        debug_assert_eq!(CUCKOO, self.cuckoo);
        let (a, b) = self.homes_of::<CUCKOO>(h);
        let (a, b) = (a * (W + 1), b * (W + 1));
        debug_assert!(a.max(b) + W < self.slots.len());
        // SAFETY: the homes are at most 2^bits and there are 2^bits + 1 slots of W + 1
        // words (this saves a bounds check per probe).
        let (s0, s1) = unsafe {
            (
                self.slots.get_unchecked(a..a + W + 1),
                self.slots.get_unchecked(b..b + W + 1),
            )
        };
        let (mut d0, mut d1) = (0u64, 0u64);
        for j in 0..W {
            d0 |= s0[j] ^ key[j];
            d1 |= s1[j] ^ key[j];
        }
        // Selects, not branches: whether a probe hits is random from packet to packet. A
        // free slot holds a zero key and tag, so an all-zero key "matching" it gives 0; when
        // both homes are one slot, a hit ORs its tag with itself.
        let t0 = select_unpredictable(d0 == 0, s0[W], 0);
        let t1 = select_unpredictable(d1 == 0, s1[W], 0);
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
    fn keys_beyond_the_size_bound_overflow() {
        // A table held to 8 slots cannot place 12 keys: the rest overflow and are found.
        let mut t = TupleTable::with_max_bits(1, 3);
        for k in 0..12u64 {
            t.insert(&[k * 0x1234_5677], k + 1);
        }
        assert!(t.has_overflow());
        assert_eq!(t.len(), 12);
        for k in 0..12u64 {
            assert_eq!(t.lookup::<1, true>(&[k * 0x1234_5677]), k + 1);
            assert_eq!(t.get(&[k * 0x1234_5677]), Some(k + 1));
        }
        assert_eq!(t.lookup::<1, true>(&[5]), 0);
        for k in 0..12u64 {
            assert_eq!(t.remove(&[k * 0x1234_5677]), Some(k + 1));
        }
        assert!(t.is_empty());
    }

    #[test]
    fn a_cuckoo_table_agrees_with_a_hashmap_through_removals() {
        let mut t = TupleTable::new(2);
        let mut m: HashMap<[u64; 2], u64> = HashMap::new();
        let mut rng = crate::util::FastRng::new(7);
        for n in 1..20_000u64 {
            let k = key(rng.below(6000));
            if rng.below(3) == 0 {
                assert_eq!(t.remove(&k), m.remove(&k));
            } else {
                assert_eq!(t.insert(&k, n), m.insert(k, n));
            }
        }
        assert!(t.is_cuckoo());
        assert_eq!(t.len(), m.len());
        for k in 0..6000u64 {
            let want = m.get(&key(k)).copied();
            assert_eq!(t.get(&key(k)), want);
            assert_eq!(t.lookup::<2, true>(&key(k)), want.unwrap_or(0));
        }
    }

    #[test]
    fn thousands_of_sequential_keys_fit_without_overflow() {
        // The UPF's session keys: a constant part and a counter in the high bytes.
        let mut t = TupleTable::new(1);
        for i in 0..20_000u64 {
            t.insert(&[0x0102 | (i + 1) << 40], i + 1);
        }
        assert!(!t.has_overflow());
        assert!(t.is_cuckoo());
        assert!(t.size_bytes() <= 16 * 65_537, "{} bytes", t.size_bytes());
        for i in 0..20_000u64 {
            assert_eq!(t.lookup::<1, false>(&[0x0102 | (i + 1) << 40]), i + 1);
        }
    }
}

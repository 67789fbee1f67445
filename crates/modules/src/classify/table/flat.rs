//! The flat open-addressing hash table keyed by 64-bit words, its hash and cache prefetch.

/// Hints the CPU to fetch the cache line at `p` (no effect where unsupported).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A zeroed table of `n` words. Big ones are offered to the kernel for transparent huge
/// pages before first touch: random lookups over tens of MiB otherwise miss the TLB on
/// almost every packet. (Advice only; plain pages if refused.)
pub fn zeroed_table<T: Copy>(n: usize, zero: T) -> Vec<T> {
    let v = vec![zero; n];
    let bytes = n * std::mem::size_of::<T>();
    const HUGE: usize = 2 << 20;
    if bytes >= 2 * HUGE {
        let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (v.as_ptr() as usize + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice on whole pages inside the vector's own allocation.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    v
}

/// Hashes key words: one multiply per word by a per-position odd constant, folded by
/// XOR (the products are independent, so this is a few cycles). The top bits (the table
/// index) depend on every key bit; the middle bits give the slot tag.
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
    let mut h = 0x243F_6A88_85A3_08D3;
    for (i, &w) in words.iter().enumerate() {
        h ^= (w ^ K[(i + 3) & 7]).wrapping_mul(K[i & 7]);
    }
    h
}

pub(super) const OCCUPIED: u64 = 1 << 63;
/// Zero words after a [`FlatTable`]'s last slot.
pub(super) const PAD_WORDS: usize = 2;

/// A hash map from keys of `words` u64 words to u32 values, stored flat: each slot is one
/// meta word (occupied bit, 31 hash bits, value) followed by the key words and, if the
/// table has any, `payload` words of the value's own data, so a lookup usually touches one
/// cache line. Linear probing, backward-shift deletion, load <= 5/8.
#[derive(Clone, Debug)]
pub struct FlatTable {
    words: usize,
    payload: usize,
    stride: usize,
    bits: u32,
    mask: usize,
    len: usize,
    /// Grow when len exceeds capacity x load_num / 8.
    load_num: usize,
    slots: Vec<u64>,
}

impl FlatTable {
    /// A table kept at most 1/4 full: more memory, shorter probes (for small tables that
    /// are searched many times per packet).
    pub fn sparse(words: usize) -> FlatTable {
        let mut t = FlatTable::new(words);
        t.load_num = 2;
        t
    }

    /// An empty table for keys of `words` words (1..=8).
    pub fn new(words: usize) -> FlatTable {
        FlatTable::with_payload(words, 0)
    }

    /// An empty table for keys of `words` words (1..=8) whose slots also hold `payload`
    /// words of data (see [`FlatTable::payload`]).
    pub fn with_payload(words: usize, payload: usize) -> FlatTable {
        assert!((1..=8).contains(&words));
        let mut t = FlatTable {
            words,
            payload,
            stride: words + 1 + payload,
            bits: 0,
            mask: 0,
            len: 0,
            load_num: 5,
            slots: Vec::new(),
        };
        t.resize(4);
        t
    }

    fn resize(&mut self, bits: u32) {
        let old = std::mem::take(&mut self.slots);
        let old_stride = self.stride;
        self.bits = bits;
        self.mask = (1usize << bits) - 1;
        // A few zero words after the last slot: a payload may be read in whole 16-byte
        // chunks (see `ValuePlan`).
        self.slots = zeroed_table((1usize << bits) * self.stride + PAD_WORDS, 0u64);
        self.len = 0;
        for s in old.chunks_exact(old_stride) {
            // (The padding after the last slot, if it makes a chunk, is not occupied.)
            if s[0] & OCCUPIED != 0 {
                let (k, v) = (&s[1..1 + self.words], s[0] as u32);
                let h = hash_words(k);
                let i = self.insert_hashed(k, h, v).1;
                self.slots[i * self.stride + 1 + self.words..(i + 1) * self.stride]
                    .copy_from_slice(&s[1 + self.words..]);
            }
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

    /// Key length in words.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Payload words per slot.
    pub fn payload_words(&self) -> usize {
        self.payload
    }

    /// Removes every key and gives back the memory.
    pub fn clear(&mut self) {
        self.slots = Vec::new();
        self.len = 0;
        self.resize(4);
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn tag(h: u64) -> u64 {
        ((h >> 16) & 0x7fff_ffff) << 32
    }

    /// Prefetches the slot where a key with hash `h` starts its probe.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        let i = self.home(h) * self.stride;
        prefetch(self.slots.as_ptr().wrapping_add(i));
        // A slot may straddle two lines (a payload makes that likelier).
        prefetch(self.slots.as_ptr().wrapping_add(i + self.stride - 1));
    }

    /// Looks up a key whose hash is `h`.
    #[inline(always)]
    pub fn get_hashed(&self, key: &[u64], h: u64) -> Option<u32> {
        self.find_hashed(key, h)
            .map(|i| self.slots[i * self.stride] as u32)
    }

    /// The slot of a key whose hash is `h`.
    #[inline(always)]
    fn find_hashed(&self, key: &[u64], h: u64) -> Option<usize> {
        let want = OCCUPIED | Self::tag(h);
        let mut i = self.home(h);
        loop {
            let s = &self.slots[i * self.stride..(i + 1) * self.stride];
            let m = s[0];
            if m & OCCUPIED == 0 {
                return None;
            }
            if m & 0xffff_ffff_0000_0000 == want && s[1..1 + self.words] == *key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Looks up a key of exactly `W` words (the table's width) whose hash is `h`: its value
    /// and its payload words, followed by at least `PAD_WORDS` more words (the next slots'
    /// or padding) that a reader of whole 16-byte chunks may take in.
    #[inline(always)]
    pub fn get_with_payload<const W: usize>(
        &self,
        key: &[u64; W],
        h: u64,
    ) -> Option<(u32, &[u64])> {
        debug_assert_eq!(W, self.words);
        let want = OCCUPIED | Self::tag(h);
        let mut i = self.home(h);
        loop {
            let s = &self.slots[i * self.stride..(i + 1) * self.stride];
            let m = s[0];
            if m & OCCUPIED == 0 {
                return None;
            }
            if m & 0xffff_ffff_0000_0000 == want {
                let k: &[u64; W] = s[1..1 + W].try_into().unwrap();
                if k == key {
                    return Some((m as u32, &self.slots[i * self.stride + 1 + W..]));
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The payload words of a key (None if absent).
    pub fn payload(&self, key: &[u64]) -> Option<&[u64]> {
        let i = self.find_hashed(key, hash_words(key))?;
        Some(&self.slots[i * self.stride + 1 + self.words..(i + 1) * self.stride])
    }

    /// Sets the payload words of a key present in the table; false if absent.
    pub fn set_payload(&mut self, key: &[u64], payload: &[u64]) -> bool {
        let Some(i) = self.find_hashed(key, hash_words(key)) else {
            return false;
        };
        self.slots[i * self.stride + 1 + self.words..(i + 1) * self.stride]
            .copy_from_slice(payload);
        true
    }

    /// Looks up a key of exactly `W` words (the table's width) whose hash is `h`: the
    /// fixed width lets the comparison compile to `W` word compares.
    #[inline(always)]
    pub fn get_n<const W: usize>(&self, key: &[u64; W], h: u64) -> Option<u32> {
        debug_assert_eq!(W, self.words);
        let want = OCCUPIED | Self::tag(h);
        let mut i = self.home(h);
        loop {
            let s = &self.slots[i * self.stride..i * self.stride + W + 1];
            let m = s[0];
            if m & OCCUPIED == 0 {
                return None;
            }
            if m & 0xffff_ffff_0000_0000 == want {
                let k: &[u64; W] = s[1..].try_into().unwrap();
                if k == key {
                    return Some(m as u32);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// As `get_n`, for sparse tables: checks the home slot and the next without branching
    /// on their contents (at load <= 1/4 a search rarely goes further), so a miss costs no
    /// mispredicted branch; longer runs take the general path.
    #[inline(always)]
    pub fn get_near<const W: usize>(&self, key: &[u64; W], h: u64) -> Option<u32> {
        let want = OCCUPIED | Self::tag(h);
        let i0 = self.home(h);
        let i1 = (i0 + 1) & self.mask;
        let s0 = &self.slots[i0 * self.stride..i0 * self.stride + W + 1];
        let s1 = &self.slots[i1 * self.stride..i1 * self.stride + W + 1];
        let (mut d0, mut d1) = (
            (s0[0] & 0xffff_ffff_0000_0000) ^ want,
            (s1[0] & 0xffff_ffff_0000_0000) ^ want,
        );
        for j in 0..W {
            d0 |= s0[1 + j] ^ key[j];
            d1 |= s1[1 + j] ^ key[j];
        }
        if (d0 == 0) | (d1 == 0) {
            return Some(if d0 == 0 { s0[0] } else { s1[0] } as u32);
        }
        if (s0[0] & OCCUPIED == 0) | (s1[0] & OCCUPIED == 0) {
            return None;
        }
        self.get_n(key, h)
    }

    /// Looks up a key.
    pub fn get(&self, key: &[u64]) -> Option<u32> {
        self.get_hashed(key, hash_words(key))
    }

    /// Inserts or replaces; the old value and the key's slot (a new key's payload is zero).
    fn insert_hashed(&mut self, key: &[u64], h: u64, v: u32) -> (Option<u32>, usize) {
        let meta = OCCUPIED | Self::tag(h) | v as u64;
        let w = self.words;
        let mut i = self.home(h);
        loop {
            let s = &mut self.slots[i * self.stride..(i + 1) * self.stride];
            if s[0] & OCCUPIED == 0 {
                s[0] = meta;
                s[1..1 + w].copy_from_slice(key);
                self.len += 1;
                return (None, i);
            }
            if s[0] & 0xffff_ffff_0000_0000 == meta & 0xffff_ffff_0000_0000 && s[1..1 + w] == *key {
                let old = s[0] as u32;
                s[0] = meta;
                return (Some(old), i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Inserts or replaces a key's value; returns the old value.
    pub fn insert(&mut self, key: &[u64], v: u32) -> Option<u32> {
        debug_assert_eq!(key.len(), self.words);
        if (self.len + 1) * 8 > (self.mask + 1) * self.load_num {
            self.resize(self.bits + 1);
        }
        self.insert_hashed(key, hash_words(key), v).0
    }

    /// Removes a key; returns its value.
    pub fn remove(&mut self, key: &[u64]) -> Option<u32> {
        let h = hash_words(key);
        let want = OCCUPIED | Self::tag(h);
        let st = self.stride;
        let mut i = self.home(h);
        loop {
            let m = self.slots[i * st];
            if m & OCCUPIED == 0 {
                return None;
            }
            if m & 0xffff_ffff_0000_0000 == want
                && self.slots[i * st + 1..i * st + 1 + self.words] == *key
            {
                break;
            }
            i = (i + 1) & self.mask;
        }
        let v = self.slots[i * st] as u32;
        // Backward shift: pull later entries of the run into the hole when their home
        // position allows it, so no tombstones are needed.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        loop {
            let m = self.slots[j * st];
            if m & OCCUPIED == 0 {
                break;
            }
            let home = self.home(hash_words(&self.slots[j * st + 1..j * st + 1 + self.words]));
            let dist_j = j.wrapping_sub(home) & self.mask;
            let dist_hole = hole.wrapping_sub(home) & self.mask;
            if dist_hole <= dist_j {
                self.slots.copy_within(j * st..(j + 1) * st, hole * st);
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.slots[hole * st..(hole + 1) * st].fill(0);
        self.len -= 1;
        Some(v)
    }

    /// Every (key, value) pair, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u64], u32)> + '_ {
        self.iter_payload().map(|(k, v, _)| (k, v))
    }

    /// Every (key, value, payload) triple, in table order.
    pub fn iter_payload(&self) -> impl Iterator<Item = (&[u64], u32, &[u64])> + '_ {
        let w = self.words;
        self.slots
            .chunks_exact(self.stride)
            .filter(|s| s[0] & OCCUPIED != 0)
            .map(move |s| (&s[1..1 + w], s[0] as u32, &s[1 + w..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn flat_table_matches_a_hashmap_through_inserts_and_removes() {
        let mut t = FlatTable::new(2);
        let mut r: HashMap<[u64; 2], u32> = HashMap::new();
        let mut x: u64 = 12345;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = [x % 3000, (x >> 20) % 3];
            if i % 3 == 0 {
                assert_eq!(t.remove(&k), r.remove(&k));
            } else {
                assert_eq!(t.insert(&k, i), r.insert(k, i));
            }
            assert_eq!(t.len(), r.len());
        }
        for (k, v) in &r {
            assert_eq!(t.get(k), Some(*v));
            assert_eq!(t.get_n(k, hash_words(k)), Some(*v));
        }
        // The sparse table's two-slot lookup, present and absent keys, including keys in
        // runs longer than two slots.
        let mut sp = FlatTable::sparse(2);
        for (k, v) in &r {
            sp.insert(k, *v);
        }
        let mut long_runs = 0;
        for a in 0..3000u64 {
            for b in 0..3u64 {
                let k = [a, b];
                assert_eq!(sp.get_near(&k, hash_words(&k)), r.get(&k).copied());
                let home = sp.home(hash_words(&k));
                let occ = |i: usize| sp.slots[(i & sp.mask) * 3] & OCCUPIED != 0;
                long_runs += (occ(home) && occ(home + 1)) as usize;
            }
        }
        assert!(long_runs > 0, "the test should reach the general path");
        assert_eq!(t.iter().count(), r.len());
        assert_eq!(t.get(&[99_999, 0]), None);
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.get(&[1, 1]), None);
    }
}

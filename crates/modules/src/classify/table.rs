//! Shared building blocks of the classifiers: a flat open-addressing hash table keyed by a
//! fixed number of 64-bit words, cache prefetch, and BESS's gate conventions.

use crate::util::Verdict;
use bessemer_core::module::MAX_GATES;
use bessemer_core::{AttrOffset, Context, Error, Result, Value};

/// BESS's DROP_GATE: a rule or default gate with this id drops the packet.
pub const DROP_GATE: u16 = MAX_GATES;

/// Checks a gate argument the way BESS's `is_valid_gate` does (a real gate or DROP_GATE).
pub fn check_gate(v: Option<u64>, field: &str) -> Result<u16> {
    match v {
        Some(g) if g <= DROP_GATE as u64 => Ok(g as u16),
        Some(g) => Err(Error::invalid(format!(
            "{field}: {g} is not a gate (0..{MAX_GATES}, or {DROP_GATE} to drop)"
        ))),
        None => Ok(0),
    }
}

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

const OCCUPIED: u64 = 1 << 63;
/// Zero words after a [`FlatTable`]'s last slot.
const PAD_WORDS: usize = 2;

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

/// Reads a FieldData message (`value_bin` bytes or `value_int`, big-endian) as exactly
/// `size` bytes; `Ok(None)` when it has neither.
pub fn field_data(v: &Value, size: usize, what: &str) -> Result<Option<Vec<u8>>> {
    let mut a = bessemer_core::Args::new(v, what)?;
    let bin = a.bytes("value_bin")?;
    // uint64 values above i64::MAX arrive wrapped to negative Ints (Value has one integer
    // type): take the bits as they are.
    let int = match a.any("value_int") {
        None => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| {
            Error::invalid(format!(
                "{what}.value_int: expected an integer, got {}",
                v.type_name()
            ))
        })? as u64),
    };
    a.finish()?;
    match (bin, int) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "{what}: value_bin and value_int are exclusive"
        ))),
        (Some(b), None) => {
            if b.len() != size {
                return Err(Error::invalid(format!(
                    "{what}.value_bin: {} bytes for a {size}-byte field",
                    b.len()
                )));
            }
            Ok(Some(b.to_vec()))
        }
        (None, Some(i)) => {
            if size < 8 && i >> (8 * size) != 0 {
                return Err(Error::invalid(format!(
                    "{what}.value_int: {i:#x} does not fit in {size} bytes"
                )));
            }
            Ok(Some(i.to_be_bytes()[8 - size..].to_vec()))
        }
        (None, None) => Ok(None),
    }
}

/// One match field: `size` bytes at a packet offset or of a metadata attribute.
#[derive(Clone, Debug)]
pub struct MatchField {
    /// Packet data offset, or None for a metadata attribute.
    pub offset: Option<usize>,
    /// Attribute name (for attribute fields).
    pub attr: Option<String>,
    /// Attribute id as declared at init.
    pub attr_id: usize,
    /// Field size in bytes (1..=8).
    pub size: usize,
    /// Byte position in the key.
    pub pos: usize,
}

/// Most fields per classifier and bytes per field (BESS's MAX_FIELDS, MAX_FIELD_SIZE).
pub const MAX_FIELDS: usize = 8;
/// Largest field size in bytes.
pub const MAX_FIELD_SIZE: usize = 8;
/// Largest packet offset of a field (BESS's limit).
pub const MAX_OFFSET: i64 = 1024;
/// Most rules an ExactMatch or WildcardMatch table holds (and the largest `entries`): a
/// bound on the memory one module's commands can take (about 60 bytes a rule).
pub const MAX_RULES: u64 = 1 << 22;

/// The rule limit of a table whose `entries` argument was `entries` (0: [`MAX_RULES`]).
pub fn rule_limit(entries: u64) -> u64 {
    if entries == 0 {
        MAX_RULES
    } else {
        entries
    }
}

/// The error for a rule that does not fit a table of `limit` rules.
pub fn table_full(what: &str, limit: u64) -> Error {
    Error::new(
        libc::ENOSPC,
        format!("{what}: the table is full ({limit} entries; `entries` sets the limit, at most {MAX_RULES})"),
    )
}

/// Parses a `Field` message (`attr_name` or `offset`, `num_bytes`), declaring attributes.
pub fn parse_field(
    v: &Value,
    what: &str,
    pos: usize,
    init: &mut bessemer_core::InitContext,
) -> Result<MatchField> {
    parse_field_mode(v, what, pos, init, bessemer_core::AccessMode::Read)
}

/// As [`parse_field`], declaring attribute fields with access `mode`.
pub fn parse_field_mode(
    v: &Value,
    what: &str,
    pos: usize,
    init: &mut bessemer_core::InitContext,
    mode: bessemer_core::AccessMode,
) -> Result<MatchField> {
    let mut a = bessemer_core::Args::new(v, what)?;
    let attr = a.str("attr_name")?.filter(|s| !s.is_empty());
    let offset = a.int("offset", 0, MAX_OFFSET)?;
    let size = a
        .int("num_bytes", 1, MAX_FIELD_SIZE as i64)?
        .ok_or_else(|| Error::invalid(format!("{what}.num_bytes is required (1..8)")))?
        as usize;
    a.finish()?;
    let (offset, attr_id) = match (attr, offset) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "{what}: give either attr_name or offset, not both"
            )))
        }
        (None, None) => {
            return Err(Error::invalid(format!(
                "{what}: must specify 'offset' or 'attr_name'"
            )))
        }
        (Some(name), None) => {
            let id = init.add_attr(bessemer_core::AttrSpec {
                name: name.to_string(),
                size,
                mode,
            })?;
            (None, id)
        }
        (None, Some(o)) => (Some(o as usize), 0),
    };
    Ok(MatchField {
        offset,
        attr: attr.map(str::to_string),
        attr_id,
        size,
        pos,
    })
}

/// The `Field` message describing a field (for get_initial_arg).
pub fn field_value(f: &MatchField) -> Value {
    let v = Value::map();
    let v = match (&f.attr, f.offset) {
        (Some(n), _) => v.with("attr_name", n.as_str()),
        (None, Some(o)) => v.with("offset", o),
        (None, None) => v,
    };
    v.with("num_bytes", f.size)
}

/// How to load one field into the key words: one unaligned 8-byte load, masked, shifted
/// into place (key bytes are little-endian words, so byte `pos` is word pos/8, bit 8*(pos%8)).
#[derive(Clone, Copy, Debug)]
struct KeyField {
    offset: Option<usize>,
    size: usize,
    word: usize,
    shift: u32,
    /// Field mask as a little-endian word (zero beyond `size` bytes).
    mask: u64,
}

/// Packet bytes that are contiguous both in the packet and in the key (neighbouring fields,
/// such as an IPv4 address pair and the ports after them), loaded as one 8-byte word.
#[derive(Clone, Copy, Debug)]
struct KeyChunk {
    offset: usize,
    /// Bit position in the key.
    pos: usize,
    /// The fields' masks, each at its byte position in the chunk (zero past them).
    mask: u64,
}

/// Builds table keys from packets for a list of fields.
#[derive(Clone, Debug)]
pub struct KeyBuilder {
    fields: Vec<KeyField>,
    /// When every field is in the packet: the fields merged into chunks, used for packets at
    /// least `chunk_end` bytes long (every chunk's 8-byte load inside them). Fewer loads,
    /// masks and shifts than field by field (WildcardMatch's 5-tuple: 3 instead of 5).
    chunks: Option<Vec<KeyChunk>>,
    chunk_end: usize,
    /// Every field is a metadata attribute and the CPU shuffles bytes (SSSE3): keys are
    /// gathered batch by batch with a [`GatherPlan`].
    gathers: bool,
}

#[inline(always)]
fn load_le(b: &[u8], at: usize, size: usize) -> Option<u64> {
    match b.get(at..at + 8) {
        Some(w) => Some(u64::from_le_bytes(w.try_into().unwrap())),
        None => {
            let part = b.get(at..at + size)?;
            let mut t = [0u8; 8];
            t[..size].copy_from_slice(part);
            Some(u64::from_le_bytes(t))
        }
    }
}

impl KeyBuilder {
    /// A builder for `fields`; `masks[i]` are field i's mask bytes (all ones if None).
    pub fn new(fields: &[MatchField], masks: &[Option<Vec<u8>>]) -> KeyBuilder {
        let fields = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut m = [0u8; 8];
                match masks.get(i).and_then(|m| m.as_ref()) {
                    Some(b) => m[..f.size].copy_from_slice(b),
                    None => m[..f.size].fill(0xff),
                }
                KeyField {
                    offset: f.offset,
                    size: f.size,
                    word: f.pos / 8,
                    shift: (f.pos % 8) as u32 * 8,
                    mask: u64::from_le_bytes(m),
                }
            })
            .collect::<Vec<KeyField>>();
        let mut chunks: Option<Vec<KeyChunk>> = Some(Vec::new());
        // (chunk, bytes in it so far) for the chunk being filled.
        let mut open: Option<(KeyChunk, usize)> = None;
        for f in &fields {
            let (Some(o), Some(cs)) = (f.offset, chunks.as_mut()) else {
                chunks = None;
                break;
            };
            let pos = f.word * 64 + f.shift as usize;
            match &mut open {
                Some((c, len))
                    if c.offset + *len == o && c.pos + *len * 8 == pos && *len + f.size <= 8 =>
                {
                    c.mask |= f.mask << (*len * 8);
                    *len += f.size;
                }
                _ => {
                    if let Some((c, _)) = open.take() {
                        cs.push(c);
                    }
                    open = Some((
                        KeyChunk {
                            offset: o,
                            pos,
                            mask: f.mask,
                        },
                        f.size,
                    ));
                }
            }
        }
        if let (Some(cs), Some((c, _))) = (chunks.as_mut(), open) {
            cs.push(c);
        }
        let chunk_end = chunks
            .iter()
            .flatten()
            .map(|c| c.offset + 8)
            .max()
            .unwrap_or(0);
        let gathers = !fields.is_empty() && fields.iter().all(|f| f.offset.is_none()) && ssse3();
        KeyBuilder {
            fields,
            chunks,
            chunk_end,
            gathers,
        }
    }

    /// True when keys are gathered batch by batch ([`PlanCache::get`]): every field is a
    /// metadata attribute and the CPU can shuffle bytes.
    pub fn gathers(&self) -> bool {
        self.gathers
    }

    /// The plan gathering keys of fields at attribute offsets `offs` (field i's is
    /// `offs[i]`); only for a builder that [`KeyBuilder::gathers`].
    fn make_plan(&self, offs: &[AttrOffset], plan: &mut GatherPlan) {
        // Control bytes by (key chunk, metadata lane): 0x80 yields a zero byte.
        let mut ctrl = [Lane([0x80; 16]); MAX_STEPS];
        let mut mask = [Lane([0; 16]); KEY_CHUNKS];
        let mut used = 0u32;
        for (f, &o) in self.fields.iter().zip(offs) {
            // An attribute no writer reaches reads as zeros: no bytes to gather.
            let AttrOffset::At(m) = o else { continue };
            let pos = f.word * 8 + f.shift as usize / 8;
            for j in 0..f.size {
                let (src, dst) = (m as usize + j, pos + j);
                if src >= METADATA_BYTES {
                    continue;
                }
                let k = dst / 16 * LANES + src / 16;
                ctrl[k].0[dst % 16] = (src % 16) as u8;
                mask[dst / 16].0[dst % 16] = (f.mask >> (8 * j)) as u8;
                used |= 1 << k;
            }
        }
        plan.mask = mask;
        let mut n = 0;
        for c in 0..KEY_CHUNKS {
            for l in 0..LANES {
                let k = c * LANES + l;
                if used >> k & 1 != 0 {
                    plan.ctrl[n] = ctrl[k];
                    plan.lane[n] = (l * 16) as u8;
                    n += 1;
                }
            }
            plan.ends[c] = n as u8;
        }
    }

    /// The key bits of `data` as chunks (see `chunks`), or None to go field by field (a
    /// metadata field, or a packet shorter than `chunk_end`).
    #[inline(always)]
    fn chunked<'a>(&'a self, data: &'a [u8]) -> Option<impl Iterator<Item = (u64, usize)> + 'a> {
        let cs = self.chunks.as_ref()?;
        if data.len() < self.chunk_end {
            return None;
        }
        Some(cs.iter().map(move |c| {
            let w: [u8; 8] = data[c.offset..c.offset + 8].try_into().unwrap();
            (u64::from_le_bytes(w) & c.mask, c.pos)
        }))
    }

    /// Field `f` (number `i`) of `pkt`, masked; None when the packet is too short for it.
    #[inline(always)]
    fn field(
        &self,
        i: usize,
        f: &KeyField,
        offs: &[bessemer_core::AttrOffset],
        pkt: &bessemer_core::Packet,
    ) -> Option<u64> {
        let v = match f.offset {
            Some(o) => load_le(pkt.data(), o, f.size)?,
            None => match offs[i] {
                bessemer_core::AttrOffset::At(m) => {
                    load_le(&pkt.metadata()[..], m as usize, f.size).unwrap_or(0)
                }
                _ => 0,
            },
        };
        Some(v & f.mask)
    }

    /// The key of `pkt` (`offs[i]`: field i's attribute offset), or None when the packet
    /// is too short for a packet field.
    #[inline(always)]
    pub fn build<const W: usize>(
        &self,
        offs: &[bessemer_core::AttrOffset],
        pkt: &bessemer_core::Packet,
    ) -> Option<[u64; W]> {
        let mut k = [0u64; W];
        self.build_into(offs, pkt, &mut k).then_some(k)
    }

    /// As [`KeyBuilder::build`], into `k` (all zero on entry); false when the packet is too
    /// short for a packet field.
    #[inline(always)]
    pub fn build_into<const W: usize>(
        &self,
        offs: &[bessemer_core::AttrOffset],
        pkt: &bessemer_core::Packet,
        k: &mut [u64; W],
    ) -> bool {
        if W <= 2 {
            // Keys of up to two words are assembled in a u128 (registers): OR-ing each field
            // into `k[word]` in memory makes a chain of read-modify-writes per packet.
            let mut acc = 0u128;
            if let Some(cs) = self.chunked(pkt.data()) {
                for (v, p) in cs {
                    acc |= (v as u128) << p;
                }
                k[0] |= acc as u64;
                if W == 2 {
                    k[W - 1] |= (acc >> 64) as u64;
                }
                return true;
            }
            for (i, f) in self.fields.iter().enumerate() {
                let Some(v) = self.field(i, f, offs, pkt) else {
                    return false;
                };
                acc |= (v as u128) << (f.word * 64 + f.shift as usize);
            }
            k[0] |= acc as u64;
            if W == 2 {
                k[W - 1] |= (acc >> 64) as u64;
            }
            return true;
        }
        if W <= 4 {
            // The same in two u128s (the UPF's 22-byte PDR key): a field's bit position is
            // the same for every packet, so the branches below always go the same way.
            let (mut lo, mut hi) = (0u128, 0u128);
            let mut put = |v: u64, p: usize| {
                let v = v as u128;
                if p < 128 {
                    lo |= v << p;
                    if p > 64 {
                        hi |= v >> (128 - p);
                    }
                } else {
                    hi |= v << (p - 128);
                }
            };
            if let Some(cs) = self.chunked(pkt.data()) {
                for (v, p) in cs {
                    put(v, p);
                }
            } else {
                for (i, f) in self.fields.iter().enumerate() {
                    let Some(v) = self.field(i, f, offs, pkt) else {
                        return false;
                    };
                    put(v, f.word * 64 + f.shift as usize);
                }
            }
            k[0] |= lo as u64;
            k[1] |= (lo >> 64) as u64;
            k[2] |= hi as u64;
            if W == 4 {
                k[W - 1] |= (hi >> 64) as u64;
            }
            return true;
        }
        for (i, f) in self.fields.iter().enumerate() {
            let v = match f.offset {
                Some(o) => match load_le(pkt.data(), o, f.size) {
                    Some(v) => v,
                    None => return false,
                },
                None => match offs[i] {
                    bessemer_core::AttrOffset::At(m) => {
                        load_le(&pkt.metadata()[..], m as usize, f.size).unwrap_or(0)
                    }
                    _ => 0,
                },
            } & f.mask;
            k[f.word] |= v << f.shift;
            if f.shift != 0 && f.word + 1 < W {
                k[f.word + 1] |= v >> (64 - f.shift);
            }
        }
        true
    }
}

/// Bytes of metadata a packet carries.
const METADATA_BYTES: usize = bessemer_core::metadata::METADATA_TOTAL_SIZE;
/// 16-byte lanes of the metadata area.
const LANES: usize = METADATA_BYTES / 16;
/// 16-byte chunks of the longest key (8 words).
const KEY_CHUNKS: usize = 4;
/// Most (key chunk, metadata lane) pairs a plan shuffles.
const MAX_STEPS: usize = KEY_CHUNKS * LANES;
const _: () = assert!(MAX_STEPS <= 32 && METADATA_BYTES.is_multiple_of(16));

/// 16 bytes, aligned for a vector load.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
struct Lane([u8; 16]);

/// True when the CPU has SSSE3's byte shuffle (checked once; std caches it).
fn ssse3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("ssse3")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// How to gather a batch's keys from metadata attributes: each 16-byte chunk of a key is the
/// OR of byte shuffles of the 16-byte metadata lanes its fields' bytes sit in, then masked.
/// A field costs nothing per packet beyond the lanes it shares with the others (the UPF's
/// eight-field PDR key: four shuffles, where field by field took about 25 instructions a
/// field). Built per batch from the attribute offsets ([`KeyBuilder::gather_plan`]).
#[derive(Clone, Debug)]
pub struct GatherPlan {
    /// Step i shuffles metadata bytes `lane[i]..lane[i] + 16` by `ctrl[i]`.
    ctrl: [Lane; MAX_STEPS],
    lane: [u8; MAX_STEPS],
    /// The steps of key chunk c are `ends[c - 1]..ends[c]` (from 0 for chunk 0).
    ends: [u8; KEY_CHUNKS],
    /// The fields' masks, by key byte (zero past the fields).
    mask: [Lane; KEY_CHUNKS],
}

impl GatherPlan {
    fn empty() -> GatherPlan {
        GatherPlan {
            ctrl: [Lane([0x80; 16]); MAX_STEPS],
            lane: [0; MAX_STEPS],
            ends: [0; KEY_CHUNKS],
            mask: [Lane([0; 16]); KEY_CHUNKS],
        }
    }

    /// Writes the key of each of `pkts` into `keys` (every word of each).
    #[inline]
    pub fn build_all<const W: usize>(&self, pkts: &[bessemer_core::Packet], keys: &mut [[u64; W]]) {
        assert!(W <= 8 && keys.len() >= pkts.len());
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a plan exists only where the CPU has SSSE3 (`KeyBuilder::gathers`).
        unsafe {
            self.build_all_ssse3(pkts, keys)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("gather plans are made only on x86_64")
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "ssse3")]
    unsafe fn build_all_ssse3<const W: usize>(
        &self,
        pkts: &[bessemer_core::Packet],
        keys: &mut [[u64; W]],
    ) {
        use std::arch::x86_64::*;
        let chunks = (W * 8).div_ceil(16);
        for (p, k) in pkts.iter().zip(keys.iter_mut()) {
            let meta = p.metadata().as_ptr();
            let mut start = 0;
            for c in 0..chunks {
                let end = self.ends[c] as usize;
                let mut a = _mm_setzero_si128();
                for s in start..end {
                    // SAFETY: lanes are 16-byte steps inside the metadata area.
                    let v = _mm_loadu_si128(meta.add(self.lane[s] as usize) as *const __m128i);
                    let ctl = _mm_load_si128(self.ctrl[s].0.as_ptr() as *const __m128i);
                    a = _mm_or_si128(a, _mm_shuffle_epi8(v, ctl));
                }
                start = end;
                a = _mm_and_si128(a, _mm_load_si128(self.mask[c].0.as_ptr() as *const __m128i));
                // SAFETY: chunk c covers key bytes 16c.. inside the W words (a last half
                // chunk stores 8 bytes).
                let dst = (k.as_mut_ptr() as *mut u8).add(16 * c) as *mut __m128i;
                if 16 * c + 16 <= W * 8 {
                    _mm_storeu_si128(dst, a);
                } else {
                    _mm_storel_epi64(dst, a);
                }
            }
        }
    }
}

/// A classifier's [`GatherPlan`] with the attribute offsets it was made for: offsets change
/// only with the graph, so the plan is made once, not per batch (the PDR key's took about
/// 900 instructions).
#[derive(Clone, Debug)]
pub struct PlanCache {
    offs: Option<[AttrOffset; MAX_FIELDS]>,
    plan: GatherPlan,
}

impl Default for PlanCache {
    fn default() -> PlanCache {
        PlanCache {
            offs: None,
            plan: GatherPlan::empty(),
        }
    }
}

impl PlanCache {
    /// The plan gathering keys for `keys` from this batch's attribute offsets `offs` (made
    /// anew when they changed); None when `keys` does not gather (build each key with
    /// [`KeyBuilder::build_into`]).
    #[inline]
    pub fn get(&mut self, keys: &KeyBuilder, offs: &[AttrOffset]) -> Option<&GatherPlan> {
        if !keys.gathers {
            return None;
        }
        let mut o = [AttrOffset::NoRead; MAX_FIELDS];
        o[..offs.len()].copy_from_slice(offs);
        if self.offs != Some(o) {
            keys.make_plan(offs, &mut self.plan);
            self.offs = Some(o);
        }
        Some(&self.plan)
    }
}

/// Checks the number of `fields` of a classifier argument `what` (1..=MAX_FIELDS).
pub fn check_field_count(fields: &[Value], what: &str) -> Result<()> {
    if fields.is_empty() {
        return Err(Error::invalid(format!(
            "{what}.fields: at least one field is required"
        )));
    }
    if fields.len() > MAX_FIELDS {
        return Err(Error::invalid(format!(
            "{what}.fields: at most {MAX_FIELDS} fields, got {}",
            fields.len()
        )));
    }
    Ok(())
}

/// Parses the `fields` of classifier argument `what`, laid out one after another in the key;
/// `each` sees every field as soon as it is parsed (so its errors come in field order).
pub fn parse_fields(
    fields: &[Value],
    what: &str,
    init: &mut bessemer_core::InitContext,
    mut each: impl FnMut(usize, &MatchField) -> Result<()>,
) -> Result<Vec<MatchField>> {
    let mut parsed = Vec::with_capacity(fields.len());
    let mut pos = 0;
    for (i, f) in fields.iter().enumerate() {
        let mf = parse_field(f, &format!("{what}.fields[{i}]"), pos, init)?;
        each(i, &mf)?;
        pos += mf.size;
        parsed.push(mf);
    }
    Ok(parsed)
}

/// How a rule's `value_int` becomes the bytes a value field writes (the omec-project fork
/// differs between its classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrder {
    /// ExactMatch: big-endian for packet offsets, little-endian (host order) for attributes.
    BigForOffsets,
    /// WildcardMatch: little-endian (host order) for both.
    Little,
}

/// The fields a classifier writes into a packet when a rule matches: the omec-project fork's
/// `values` (ExactMatchArg.values, WildcardMatchArg.values), each rule carrying the bytes to
/// write.
#[derive(Clone, Debug, Default)]
pub struct ValueFields {
    /// The fields, laid out one after another in a rule's value bytes.
    pub fields: Vec<MatchField>,
    /// Total bytes of a rule's values.
    pub size: usize,
    /// Every field is a metadata attribute and the CPU shuffles bytes: values are written
    /// with a [`ValuePlan`].
    scatters: bool,
}

impl ValueFields {
    /// Parses the `values` list (Field messages) of argument `what`; attribute fields are
    /// declared written.
    pub fn parse(
        list: &[Value],
        what: &str,
        init: &mut bessemer_core::InitContext,
    ) -> Result<ValueFields> {
        if list.len() > MAX_FIELDS {
            return Err(Error::invalid(format!(
                "{what}.values: at most {MAX_FIELDS} values"
            )));
        }
        let mut fields = Vec::with_capacity(list.len());
        let mut pos = 0;
        for (i, f) in list.iter().enumerate() {
            let mf = parse_field_mode(
                f,
                &format!("{what}.values[{i}]"),
                pos,
                init,
                bessemer_core::AccessMode::Write,
            )?;
            pos += mf.size;
            fields.push(mf);
        }
        let scatters = !fields.is_empty()
            && fields.iter().all(|f: &MatchField| f.offset.is_none())
            && pos <= 16 * KEY_CHUNKS
            && ssse3();
        Ok(ValueFields {
            fields,
            size: pos,
            scatters,
        })
    }

    /// True when the classifier writes nothing.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The bytes a rule writes, from its FieldData list `list` (field `name` of message
    /// `what`): one per value field, `value_bin` as given, `value_int` in `order`.
    pub fn rule_bytes(
        &self,
        list: &[Value],
        what: &str,
        name: &str,
        order: IntOrder,
    ) -> Result<Vec<u8>> {
        if list.len() != self.fields.len() {
            return Err(Error::invalid(format!(
                "{what}.{name}: rule has incorrect number of values. Need {}, has {}",
                self.fields.len(),
                list.len()
            )));
        }
        let mut out = Vec::with_capacity(self.size);
        for (i, (v, f)) in list.iter().zip(&self.fields).enumerate() {
            let w = format!("{what}.{name}[{i}]");
            let mut b = field_data(v, f.size, &w)?
                .ok_or_else(|| Error::invalid(format!("{w}: value_bin or value_int required")))?;
            let little = match order {
                IntOrder::Little => true,
                IntOrder::BigForOffsets => f.offset.is_none(),
            };
            if little && v.get("value_int").is_some() {
                b.reverse();
            }
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    /// The attribute offsets of the value fields for this batch.
    pub fn offsets(&self, ctx: &bessemer_core::Context) -> [AttrOffset; MAX_FIELDS] {
        let mut offs = [AttrOffset::NoWrite; MAX_FIELDS];
        for (o, f) in offs.iter_mut().zip(&self.fields) {
            if f.offset.is_none() {
                *o = ctx.attr(f.attr_id);
            }
        }
        offs
    }

    /// Writes a rule's value bytes into a packet: at its data offsets (a field beyond the
    /// packet's end is skipped) and into its attributes.
    #[inline(always)]
    pub fn apply(&self, p: &mut bessemer_core::Packet, offs: &[AttrOffset], bytes: &[u8]) {
        for (f, &o) in self.fields.iter().zip(offs) {
            let v = &bytes[f.pos..f.pos + f.size];
            match f.offset {
                Some(off) => {
                    if let Some(d) = p.data_mut().get_mut(off..off + f.size) {
                        d.copy_from_slice(v);
                    }
                }
                // Fixed-size copies for the usual sizes: a copy of a run-time length is a
                // call to memcpy per field per packet.
                None => match *v {
                    [a] => p.set_attr(o, &[a]),
                    [a, b] => p.set_attr(o, &[a, b]),
                    [a, b, c, d] => p.set_attr(o, &[a, b, c, d]),
                    [a, b, c, d, e, f, g, h] => p.set_attr(o, &[a, b, c, d, e, f, g, h]),
                    _ => p.set_attr(o, v),
                },
            }
        }
    }

    /// Bytes a [`ValuePlan`] reads from a rule's value bytes (whole 16-byte chunks): a
    /// table keeps that many readable bytes from each rule's start ([`VALUES_PAD`] more at
    /// the end of its value array).
    pub fn read_len(&self) -> usize {
        self.size.div_ceil(16) * 16
    }

    /// The plan writing values at attribute offsets `offs` (the value fields', as
    /// [`ValueFields::offsets`] gives them); only for fields that [`ValueFields::scatters`].
    fn make_plan(&self, offs: &[AttrOffset], plan: &mut ValuePlan) {
        let mut ctrl = [[Lane([0x80; 16]); KEY_CHUNKS]; LANES];
        let mut mask = [Lane([0; 16]); LANES];
        for (f, &o) in self.fields.iter().zip(offs) {
            // Nobody reads it downstream: no write.
            let AttrOffset::At(m) = o else { continue };
            for j in 0..f.size {
                let (src, dst) = (f.pos + j, m as usize + j);
                if dst >= METADATA_BYTES {
                    continue;
                }
                let lane = &mut ctrl[dst / 16];
                // A later field writing the same byte wins, as when written in order.
                for c in lane.iter_mut() {
                    c.0[dst % 16] = 0x80;
                }
                lane[src / 16].0[dst % 16] = (src % 16) as u8;
                mask[dst / 16].0[dst % 16] = 0xff;
            }
        }
        let mut n = 0;
        for l in 0..LANES {
            if mask[l].0 != [0; 16] {
                plan.lane[n] = (l * 16) as u8;
                plan.ctrl[n] = ctrl[l];
                plan.mask[n] = mask[l];
                n += 1;
            }
        }
        plan.lanes = n as u8;
        plan.chunks = self.size.div_ceil(16) as u8;
    }

    /// True when values are written with a [`ValuePlan`] ([`ValueCache::get`]).
    pub fn scatters(&self) -> bool {
        self.scatters
    }

    /// A rule's value bytes as a FieldData list (value_bin).
    pub fn value_list(&self, bytes: &[u8]) -> Value {
        bin_list(field_bytes(&self.fields, bytes))
    }
}

/// Zero bytes a table keeps after its last rule's value bytes, so that a [`ValuePlan`] may
/// read whole 16-byte chunks of any rule's.
pub const VALUES_PAD: usize = 16 * KEY_CHUNKS;

/// How to write a batch's rule values into metadata attributes: each 16-byte metadata lane
/// the fields touch is blended with the OR of byte shuffles of the rule's value bytes (16 at
/// a time). The PDR rule's five fields go into one lane in two shuffles, where copying field
/// by field took about 25 instructions a field.
#[derive(Clone, Debug)]
pub struct ValuePlan {
    /// Lane i is metadata bytes `lane[i]..lane[i] + 16`, for i below `lanes`.
    lane: [u8; LANES],
    lanes: u8,
    /// Per lane, per 16-byte chunk of the value bytes: the shuffle placing its bytes.
    ctrl: [[Lane; KEY_CHUNKS]; LANES],
    /// Per lane: the bytes written.
    mask: [Lane; LANES],
    /// 16-byte chunks of the value bytes.
    chunks: u8,
}

impl ValuePlan {
    fn empty() -> ValuePlan {
        ValuePlan {
            lane: [0; LANES],
            lanes: 0,
            ctrl: [[Lane([0x80; 16]); KEY_CHUNKS]; LANES],
            mask: [Lane([0; 16]); LANES],
            chunks: 0,
        }
    }

    /// Writes `rows[i]`, a rule's value bytes (at least [`ValueFields::read_len`] of them),
    /// into packet i's attributes; an empty row writes nothing.
    #[inline]
    pub fn apply_all(&self, pkts: &mut [bessemer_core::Packet], rows: &[&[u8]]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a plan exists only where the CPU has SSSE3 (`ValueFields::scatters`).
        unsafe {
            self.apply_all_ssse3(pkts, rows)
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("value plans are made only on x86_64")
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "ssse3")]
    unsafe fn apply_all_ssse3(&self, pkts: &mut [bessemer_core::Packet], rows: &[&[u8]]) {
        use std::arch::x86_64::*;
        let chunks = self.chunks as usize;
        let n = pkts.len().min(rows.len());
        for i in 0..n {
            let r = rows[i];
            if r.is_empty() {
                continue;
            }
            assert!(r.len() >= 16 * chunks, "value row too short");
            // SAFETY: the row holds `chunks` whole chunks (checked above).
            let src = |c: usize| _mm_loadu_si128(r.as_ptr().add(16 * c) as *const __m128i);
            let zero = _mm_setzero_si128();
            let v0 = src(0);
            let v1 = if chunks > 1 { src(1) } else { zero };
            let v2 = if chunks > 2 { src(2) } else { zero };
            let v3 = if chunks > 3 { src(3) } else { zero };
            let meta = pkts[i].metadata_mut().as_mut_ptr();
            for l in 0..self.lanes as usize {
                let ctrl = &self.ctrl[l];
                let ctl = |c: usize| _mm_load_si128(ctrl[c].0.as_ptr() as *const __m128i);
                let mut new = _mm_shuffle_epi8(v0, ctl(0));
                if chunks > 1 {
                    new = _mm_or_si128(new, _mm_shuffle_epi8(v1, ctl(1)));
                }
                if chunks > 2 {
                    new = _mm_or_si128(new, _mm_shuffle_epi8(v2, ctl(2)));
                }
                if chunks > 3 {
                    new = _mm_or_si128(new, _mm_shuffle_epi8(v3, ctl(3)));
                }
                let m = _mm_load_si128(self.mask[l].0.as_ptr() as *const __m128i);
                // SAFETY: lanes are 16-byte steps inside the metadata area.
                let at = meta.add(self.lane[l] as usize) as *mut __m128i;
                let old = _mm_loadu_si128(at);
                _mm_storeu_si128(at, _mm_or_si128(_mm_andnot_si128(m, old), new));
            }
        }
    }
}

/// A classifier's [`ValuePlan`] with the attribute offsets it was made for (see
/// [`PlanCache`]).
#[derive(Clone, Debug)]
pub struct ValueCache {
    offs: Option<[AttrOffset; MAX_FIELDS]>,
    plan: ValuePlan,
}

impl Default for ValueCache {
    fn default() -> ValueCache {
        ValueCache {
            offs: None,
            plan: ValuePlan::empty(),
        }
    }
}

impl ValueCache {
    /// The plan writing `values` at this batch's attribute offsets `offs` (made anew when
    /// they changed); None when `values` are not written with a plan.
    #[inline]
    pub fn get(&mut self, values: &ValueFields, offs: &[AttrOffset]) -> Option<&ValuePlan> {
        if !values.scatters {
            return None;
        }
        let mut o = [AttrOffset::NoWrite; MAX_FIELDS];
        o[..offs.len()].copy_from_slice(offs);
        if self.offs != Some(o) {
            values.make_plan(offs, &mut self.plan);
            self.offs = Some(o);
        }
        Some(&self.plan)
    }
}

/// The bytes of each of `fields` (laid out one after another) in `bytes`.
pub fn field_bytes(fields: &[MatchField], bytes: &[u8]) -> Vec<Vec<u8>> {
    fields
        .iter()
        .map(|f| bytes[f.pos..f.pos + f.size].to_vec())
        .collect()
}

/// The key length in 64-bit words of `fields` laid out by [`parse_fields`].
pub fn key_len_words(fields: &[MatchField]) -> usize {
    fields.last().map_or(0, |f| f.pos + f.size).div_ceil(8)
}

/// The `fields` list of a classifier's get_initial_arg.
pub fn fields_value(fields: &[MatchField]) -> Value {
    Value::List(fields.iter().map(field_value).collect())
}

/// What a field classifier keeps besides its rules: the match fields, the key builder, the key
/// length in 64-bit words (1..=8) and the gate of packets that match no rule.
pub struct Matcher {
    /// The match fields, laid out one after another in the key.
    pub fields: Vec<MatchField>,
    /// Builds packets' keys.
    pub keys: KeyBuilder,
    /// The key length in 64-bit words.
    pub words: usize,
    /// The gate of packets that match no rule (initially DROP_GATE: dropped).
    pub default_gate: u16,
    /// The plan gathering keys from attributes, if the keys are gathered.
    pub plan: PlanCache,
    /// The plan writing rules' values, if they are written with one.
    pub vplan: ValueCache,
}

impl Matcher {
    /// A matcher for `fields` (from [`parse_fields`]); `masks[i]` are field i's mask bytes
    /// (all ones if None or absent).
    pub fn new(fields: Vec<MatchField>, masks: &[Option<Vec<u8>>]) -> Matcher {
        Matcher {
            keys: KeyBuilder::new(&fields, masks),
            words: key_len_words(&fields),
            fields,
            default_gate: DROP_GATE,
            plan: PlanCache::default(),
            vplan: ValueCache::default(),
        }
    }
}

/// What ExactMatch and WildcardMatch share around their tables: a [`Matcher`] and rules added
/// one at a time.
pub(crate) trait RuleClassifier {
    /// The class name, prefix of its argument types (`ExactMatch` -> `ExactMatchConfig`).
    const CLASS: &'static str;
    /// The rule set, taken out while `set_runtime_config` tries a new one.
    type Rules;

    /// The fields, key builder and default gate.
    fn matcher(&self) -> &Matcher;
    /// The same, to change the default gate.
    fn matcher_mut(&mut self) -> &mut Matcher;
    /// The matcher, to update its plans, and the value fields.
    fn matcher_and_values(&mut self) -> (&mut Matcher, &ValueFields);
    /// Adds (or replaces) the rule `arg`, a message of type `what`.
    fn add_rule(&mut self, arg: &Value, what: &str) -> Result<()>;
    /// All rules, as `get_runtime_config` lists them.
    fn rules_value(&self) -> Vec<Value>;
    /// Takes the rule set out, leaving none.
    fn take_rules(&mut self) -> Self::Rules;
    /// Puts a rule set taken out back.
    fn put_rules(&mut self, rules: Self::Rules);
    /// The batch path for keys of `W` words, attribute offsets `offs` (one per field), with
    /// this batch's `plans`.
    fn run<const W: usize>(
        &self,
        ctx: &mut bessemer_core::Context,
        batch: &mut bessemer_core::PacketBatch,
        offs: &[bessemer_core::AttrOffset],
        plans: Plans<'_>,
    );
}

/// A classifier's `process_batch`: resolves the attribute fields' offsets once per batch and
/// runs the batch path compiled for the key length.
#[inline(always)]
pub(crate) fn process_batch<C: RuleClassifier>(
    c: &mut C,
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
) {
    let (m, values) = c.matcher_and_values();
    let mut offs = [bessemer_core::AttrOffset::NoRead; MAX_FIELDS];
    for (i, f) in m.fields.iter().enumerate() {
        if f.offset.is_none() {
            offs[i] = ctx.attr(f.attr_id);
        }
    }
    let offs = &offs[..m.fields.len()];
    let gathers = m.plan.get(&m.keys, offs).is_some();
    let voffs = values.offsets(ctx);
    let scatters = m.vplan.get(values, &voffs[..values.fields.len()]).is_some();
    let m = c.matcher();
    let plans = Plans {
        keys: gathers.then_some(&m.plan.plan),
        values: scatters.then_some(&m.vplan.plan),
    };
    match m.words {
        1 => c.run::<1>(ctx, batch, offs, plans),
        2 => c.run::<2>(ctx, batch, offs, plans),
        3 => c.run::<3>(ctx, batch, offs, plans),
        4 => c.run::<4>(ctx, batch, offs, plans),
        5 => c.run::<5>(ctx, batch, offs, plans),
        6 => c.run::<6>(ctx, batch, offs, plans),
        7 => c.run::<7>(ctx, batch, offs, plans),
        _ => c.run::<8>(ctx, batch, offs, plans),
    }
}

/// A batch's plans for a field classifier: gathering keys and writing values, where they
/// apply.
#[derive(Clone, Copy)]
pub(crate) struct Plans<'a> {
    /// Builds the keys (else each key is built field by field).
    pub keys: Option<&'a GatherPlan>,
    /// Writes the values (else each is written field by field).
    pub values: Option<&'a ValuePlan>,
}

/// The `add` command the classifiers share (a handler for the class's command table).
pub(crate) fn cmd_add<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    c.add_rule(arg, &format!("{}CommandAddArg", C::CLASS))
        .map(|()| Value::Null)
}

/// The `set_default_gate` command the classifiers share.
pub(crate) fn cmd_set_default_gate<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    set_default_gate(c, arg).map(|()| Value::Null)
}

/// The `get_runtime_config` command the classifiers share.
pub(crate) fn cmd_get_runtime_config<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    get_runtime_config(c, arg)
}

/// The `set_runtime_config` command the classifiers share.
pub(crate) fn cmd_set_runtime_config<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    set_runtime_config(c, arg).map(|()| Value::Null)
}

fn set_default_gate<C: RuleClassifier>(c: &mut C, arg: &Value) -> Result<()> {
    let what = format!("{}CommandSetDefaultGateArg", C::CLASS);
    let mut a = bessemer_core::Args::new(arg, &what)?;
    let g = check_gate(a.uint("gate", u64::MAX)?, &format!("{what}.gate"))?;
    a.finish()?;
    c.matcher_mut().default_gate = g;
    Ok(())
}

fn get_runtime_config<C: RuleClassifier>(c: &C, arg: &Value) -> Result<Value> {
    bessemer_core::Args::new(arg, "EmptyArg")?.finish()?;
    let def = c.matcher().default_gate;
    Ok(Value::map()
        .with("default_gate", def as u64)
        .with("rules", Value::List(c.rules_value())))
}

fn set_runtime_config<C: RuleClassifier>(c: &mut C, arg: &Value) -> Result<()> {
    let what = format!("{}Config", C::CLASS);
    let mut a = bessemer_core::Args::new(arg, &what)?;
    let def = check_gate(
        a.uint("default_gate", u64::MAX)?,
        &format!("{what}.default_gate"),
    )?;
    let rules = a.list("rules")?;
    a.finish()?;
    // Tried on an empty rule set: a bad rule leaves the module as it was.
    let old = c.take_rules();
    for (i, r) in rules.iter().enumerate() {
        if let Err(e) = c.add_rule(r, &format!("{what}.rules[{i}]")) {
            c.put_rules(old);
            return Err(e);
        }
    }
    c.matcher_mut().default_gate = def;
    Ok(())
}

bessemer_core::drop_reasons! {
    /// Drop reasons of the table classifiers (ExactMatch, WildcardMatch, L2Forward).
    pub enum TableDrop {
        /// No rule matched and there is no default gate.
        NoMatch = "no_match",
        /// The packet is too short for a field.
        TooShort = "too_short",
        /// The matching rule's gate is DROP_GATE.
        Rule = "rule_drop",
    }
}

/// Where a packet of a field classifier goes: to the gate of the rule it matched (`found`),
/// else to the default gate `def`, which packets too short for a field (`status` already
/// `Some(TooShort)`) take too; DROP_GATE drops it (under `Rule` or `NoMatch`).
/// Sets `status` (`None` or the drop reason, as [`split`] takes it) and `gate`.
#[inline(always)]
pub fn resolve_gate(found: Option<u16>, def: u16, status: &mut Option<TableDrop>, gate: &mut u16) {
    match found {
        Some(DROP_GATE) => *status = Some(TableDrop::Rule),
        Some(g) => *gate = g,
        None if def == DROP_GATE => {
            if status.is_none() {
                *status = Some(TableDrop::NoMatch);
            }
        }
        None => {
            *status = None;
            *gate = def;
        }
    }
}

/// Sends packet i out of `gates[i]`, or drops it under reason `status[i]` when it is set; a
/// batch bound for one gate is forwarded whole.
#[inline(always)]
pub fn split<R: bessemer_core::DropReason + PartialEq>(
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
    gates: &[u16; bessemer_core::MAX_BURST],
    status: &[Option<R>; bessemer_core::MAX_BURST],
) {
    crate::util::send_each(ctx, batch, |i| match status[i] {
        None => Verdict::Gate(gates[i]),
        Some(r) => Verdict::Drop(r),
    });
}

/// Packs key bytes into little-endian words (the table key).
#[inline(always)]
pub fn key_words(key: &[u8; 64], out: &mut [u64; 8]) {
    for (w, c) in out.iter_mut().zip(key.chunks_exact(8)) {
        *w = u64::from_le_bytes(c.try_into().unwrap());
    }
}

/// Unpacks table key words into key bytes (the inverse of [`key_words`]; missing words are
/// zero).
pub fn key_bytes(words: &[u64]) -> [u8; 64] {
    let mut key = [0u8; 64];
    for (c, w) in key.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    key
}

/// A FieldData list of `value_bin` entries, one per byte string.
pub fn bin_list(values: impl IntoIterator<Item = Vec<u8>>) -> Value {
    Value::List(
        values
            .into_iter()
            .map(|b| Value::map().with("value_bin", b))
            .collect(),
    )
}

/// The `get_initial_arg` answer of ExactMatch and WildcardMatch, fields in the order of
/// their argument messages: `fields`, `masks` (ExactMatch's, when given), the fork's `values`
/// (when any), `masksv` (ExactMatch's, when given) and `entries` (when not 0).
pub fn initial_arg(
    fields: &[MatchField],
    masks: Option<Value>,
    values: &ValueFields,
    masksv: Option<Value>,
    entries: u64,
) -> Value {
    let mut v = Value::map().with("fields", fields_value(fields));
    if let Some(m) = masks {
        v = v.with("masks", m);
    }
    if !values.is_empty() {
        v = v.with("values", fields_value(&values.fields));
    }
    if let Some(m) = masksv {
        v = v.with("masksv", m);
    }
    if entries != 0 {
        v = v.with("entries", entries);
    }
    v
}

/// Test helpers building the classifiers' argument messages.
#[cfg(test)]
pub mod test_util {
    use bessemer_core::Value;

    /// A `Field` at packet offset `o` of `n` bytes.
    pub fn off(o: i64, n: i64) -> Value {
        Value::map().with("offset", o).with("num_bytes", n)
    }
    /// A FieldData of bytes.
    pub fn bin(b: &[u8]) -> Value {
        Value::map().with("value_bin", b.to_vec())
    }
    /// A FieldData of a big-endian number.
    pub fn int(i: u64) -> Value {
        Value::map().with("value_int", Value::Int(i as i64))
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

    /// Keys `KeyBuilder` builds from `fields` (masked by `masks`) of a packet holding `pkt`:
    /// the full 8-word key, and each narrow width (keys in registers) from the narrowest that
    /// holds the fields to 4.
    #[allow(clippy::type_complexity)]
    fn keys_at_every_width(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        pkt: &[u8],
    ) -> (Option<[u64; 8]>, Vec<(usize, Option<Vec<u64>>)>) {
        let kb = KeyBuilder::new(fields, masks);
        let pool =
            bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut p = cache.alloc(0).unwrap();
        assert!(p.set_data(pkt));
        let offs = [bessemer_core::AttrOffset::NoRead; 8];
        let full = kb.build::<8>(&offs, &p);
        let narrow = |w: usize| -> Option<Vec<u64>> {
            match w {
                1 => kb.build::<1>(&offs, &p).map(|k| k.to_vec()),
                2 => kb.build::<2>(&offs, &p).map(|k| k.to_vec()),
                3 => kb.build::<3>(&offs, &p).map(|k| k.to_vec()),
                _ => kb.build::<4>(&offs, &p).map(|k| k.to_vec()),
            }
        };
        let width = fields.iter().map(|f| f.pos + f.size).max().unwrap_or(0);
        let narrows = (width.div_ceil(8).max(1)..=4)
            .map(|w| (w, narrow(w)))
            .collect();
        cache.free(p);
        (full, narrows)
    }

    /// The key copied byte by byte (None if a field runs past the packet).
    fn bytewise_key(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        pkt: &[u8],
    ) -> Option<[u64; 8]> {
        let fits = fields
            .iter()
            .all(|f| f.offset.unwrap() + f.size <= pkt.len());
        fits.then(|| {
            let mut bytes = [0u8; 64];
            for (f, m) in fields.iter().zip(masks) {
                for j in 0..f.size {
                    bytes[f.pos + j] = pkt[f.offset.unwrap() + j] & m.as_ref().unwrap()[j];
                }
            }
            let mut want = [0u64; 8];
            key_words(&bytes, &mut want);
            want
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        #[test]
        fn key_builder_matches_bytewise_extraction(
            layout in proptest::collection::vec((0usize..24, 1usize..=8, proptest::prelude::any::<[u8; 8]>()), 1..=8),
            pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            // Fields at arbitrary offsets and sizes (crossing key words), with masks, against
            // copying bytes one by one.
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(o, size, _)| {
                    let f = MatchField { offset: Some(o), attr: None, attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(_, size, m)| Some(m[..*size].to_vec())).collect();
            let (got, narrows) = keys_at_every_width(&fields, &masks, &pkt);
            for (w, k) in narrows {
                proptest::prop_assert_eq!(k, got.map(|g| g[..w].to_vec()));
            }
            proptest::prop_assert_eq!(got, bytewise_key(&fields, &masks, &pkt));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Fields mostly next to each other in the packet (as a 5-tuple's), so that they are
        /// loaded as merged chunks: every key width agrees with copying bytes one by one.
        #[test]
        fn neighbouring_fields_load_as_chunks(
            start in 0usize..8,
            layout in proptest::collection::vec((0usize..4, 1usize..=8, proptest::prelude::any::<[u8; 8]>()), 1..=6),
            pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            // A one-byte gap before a field in a quarter of the cases, none otherwise.
            let (mut pos, mut at) = (0, start);
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(gap, size, _)| {
                    if gap == 0 {
                        at += 1;
                    }
                    let f = MatchField { offset: Some(at), attr: None, attr_id: 0, size, pos };
                    pos += size;
                    at += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(_, size, m)| Some(m[..*size].to_vec())).collect();
            let want = bytewise_key(&fields, &masks, &pkt);
            for (w, k) in keys_at_every_width(&fields, &masks, &pkt).1 {
                proptest::prop_assert_eq!(k, want.map(|g| g[..w].to_vec()));
            }
        }
    }

    /// The keys a gather plan builds from `fields` (attributes at `offs`, masked by `masks`)
    /// of a packet whose metadata is `meta`, next to the keys built field by field, for key
    /// width `W`.
    fn gathered_and_built<const W: usize>(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        offs: &[AttrOffset],
        meta: &[u8; METADATA_BYTES],
    ) -> Option<([u64; W], [u64; W])> {
        let kb = KeyBuilder::new(fields, masks);
        let mut cache = PlanCache::default();
        let plan = cache.get(&kb, offs)?;
        let pool =
            bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain).unwrap();
        let mut pc = pool.cache();
        let mut p = pc.alloc(60).unwrap();
        p.metadata_mut().copy_from_slice(meta);
        let mut got = [[u64::MAX; W]; 2];
        plan.build_all::<W>(std::slice::from_ref(&p), &mut got[..1]);
        let want = kb.build::<W>(offs, &p).unwrap();
        pc.free(p);
        Some((got[0], want))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Keys gathered by byte shuffles from attributes anywhere in the metadata area (some
        /// unwritten, reading as zeros), with masks, match the keys built field by field.
        #[test]
        fn gathered_keys_match_keys_built_field_by_field(
            layout in proptest::collection::vec(
                (1usize..=8, 0usize..=120, proptest::prelude::any::<[u8; 8]>(), 0u8..8), 1..=8),
            meta in proptest::collection::vec(proptest::prelude::any::<u8>(), METADATA_BYTES),
        ) {
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(size, _, _, _)| {
                    let f = MatchField { offset: None, attr: Some("a".into()), attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(size, _, m, _)| Some(m[..*size].to_vec())).collect();
            let offs: Vec<AttrOffset> = layout
                .iter()
                .map(|&(size, o, _, kind)| match kind {
                    0 => AttrOffset::NoRead,
                    _ => AttrOffset::At(o.min(METADATA_BYTES - size) as u16),
                })
                .collect();
            let meta: [u8; METADATA_BYTES] = meta.try_into().unwrap();
            let words = pos.div_ceil(8);
            macro_rules! check {
                ($w:literal) => {
                    if words <= $w {
                        if let Some((got, want)) = gathered_and_built::<$w>(&fields, &masks, &offs, &meta) {
                            proptest::prop_assert_eq!(got, want, "width {}", $w);
                        }
                    }
                };
            }
            check!(1);
            check!(2);
            check!(3);
            check!(4);
            check!(5);
            check!(8);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Values written by a value plan (attributes anywhere in the metadata area, some not
        /// written, some overlapping: the later field wins) leave the metadata as writing
        /// them field by field does.
        #[test]
        fn planned_value_writes_match_writes_field_by_field(
            layout in proptest::collection::vec((1usize..=8, 0usize..=120, 0u8..8), 1..=8),
            meta in proptest::collection::vec(proptest::prelude::any::<u8>(), METADATA_BYTES),
            vals in proptest::collection::vec(proptest::prelude::any::<u8>(), 64),
        ) {
            if !ssse3() {
                return Ok(());
            }
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(size, _, _)| {
                    let f = MatchField { offset: None, attr: Some("v".into()), attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let values = ValueFields { fields, size: pos, scatters: true };
            let mut offs = [AttrOffset::NoWrite; MAX_FIELDS];
            for (o, &(size, at, kind)) in offs.iter_mut().zip(&layout) {
                // A few offsets shared, so that fields overlap.
                let at = if kind == 1 { 40 } else { at };
                *o = match kind {
                    0 => AttrOffset::NoWrite,
                    _ => AttrOffset::At(at.min(METADATA_BYTES - size) as u16),
                };
            }
            let mut cache = ValueCache::default();
            let plan = cache.get(&values, &offs[..layout.len()]).unwrap();
            let pool =
                bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain)
                    .unwrap();
            let mut pc = pool.cache();
            let mut a = pc.alloc(60).unwrap();
            let mut b = pc.alloc(60).unwrap();
            a.metadata_mut().copy_from_slice(&meta);
            b.metadata_mut().copy_from_slice(&meta);
            let row = &vals[..values.read_len()];
            let mut pkts = [a];
            plan.apply_all(&mut pkts, &[row]);
            values.apply(&mut b, &offs, &vals[..pos]);
            let [a] = pkts;
            let same = a.metadata() == b.metadata();
            pc.free(a);
            pc.free(b);
            proptest::prop_assert!(same);
        }
    }

    #[test]
    fn field_data_is_big_endian_and_sized() {
        let v = Value::map().with("value_int", 0x0800);
        assert_eq!(field_data(&v, 2, "f").unwrap(), Some(vec![8, 0]));
        let v = Value::map().with("value_int", 0x10000);
        assert!(field_data(&v, 2, "f")
            .unwrap_err()
            .msg
            .contains("f.value_int"));
        let v = Value::map().with("value_bin", vec![1u8, 2, 3]);
        assert!(field_data(&v, 2, "f")
            .unwrap_err()
            .msg
            .contains("f.value_bin"));
        assert_eq!(field_data(&Value::map(), 2, "f").unwrap(), None);
        let v = Value::map().with("value_int", Value::from(u64::MAX));
        assert_eq!(field_data(&v, 8, "f").unwrap(), Some(vec![0xff; 8]));
        let v = Value::map().with("value_int", "x");
        assert!(field_data(&v, 8, "f")
            .unwrap_err()
            .msg
            .contains("f.value_int"));
    }
}

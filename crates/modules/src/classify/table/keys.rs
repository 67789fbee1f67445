//! Match fields (an attribute or a packet offset, 1..8 bytes) and the keys built from them:
//! field by field, or gathered from packet metadata with byte shuffles (SSSE3) by a plan per
//! set of fields.

use super::*;

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
pub(super) struct KeyField {
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
pub(super) struct KeyChunk {
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
pub(super) fn load_le(b: &[u8], at: usize, size: usize) -> Option<u64> {
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
pub(super) const METADATA_BYTES: usize = bessemer_core::metadata::METADATA_TOTAL_SIZE;
/// 16-byte lanes of the metadata area.
pub(super) const LANES: usize = METADATA_BYTES / 16;
/// 16-byte chunks of the longest key (8 words).
pub(super) const KEY_CHUNKS: usize = 4;
/// Most (key chunk, metadata lane) pairs a plan shuffles.
pub(super) const MAX_STEPS: usize = KEY_CHUNKS * LANES;
const _: () = assert!(MAX_STEPS <= 32 && METADATA_BYTES.is_multiple_of(16));

/// 16 bytes, aligned for a vector load.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
pub(super) struct Lane(pub(super) [u8; 16]);

/// True when the CPU has SSSE3's byte shuffle (checked once; std caches it).
pub(super) fn ssse3() -> bool {
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
/// field). Built per batch from the attribute offsets ([`PlanCache::get`]).
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
    pub(super) offs: Option<[AttrOffset; MAX_FIELDS]>,
    pub(super) plan: GatherPlan,
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

//! Value fields: the bytes a matching rule writes into the packet, and plans writing them.

use super::*;

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
    pub(super) scatters: bool,
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
    pub(super) offs: Option<[AttrOffset; MAX_FIELDS]>,
    pub(super) plan: ValuePlan,
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

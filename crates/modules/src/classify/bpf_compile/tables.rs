//! A batch's field values by column, and the per-field tables the merged paths are filed in:
//! a hash table of (value, path list) and, for small value ranges, a flat array.

use super::*;

/// Most distinct fields the merged structure evaluates per packet (a bit each in a u64).
pub const MAX_FIELDS: usize = 64;

/// The field values of one batch, a column per field: the scratch space of
/// [`Merged::first_match_batch`], reused from batch to batch (only the columns of the
/// installed fields are written, each for every packet before it is read).
pub struct Columns {
    pub(super) vals: [[u32; MAX_BURST]; MAX_FIELDS],
    pub(super) valid: [u64; MAX_BURST],
}

impl Columns {
    /// Zeroed scratch.
    pub const fn new() -> Columns {
        Columns {
            vals: [[0; MAX_BURST]; MAX_FIELDS],
            valid: [0; MAX_BURST],
        }
    }
}

impl Default for Columns {
    fn default() -> Columns {
        Columns::new()
    }
}

/// Bytes that stand in, in the column pass, for a packet too short for the fixed-offset
/// loads: every load then needs no check, and that packet's result is recomputed by the
/// per-packet path, which checks each load.
pub(super) static PAD: [u8; PAD_LEN] = [0; PAD_LEN];
pub(super) const PAD_LEN: usize = 256;

/// How the fields' values are computed per packet, grouped by kind so that each group is a
/// plain loop (no per-field dispatch): the packet length, loads at fixed offsets (by size),
/// loads past the IPv4 header (after the fixed loads they index by), masked copies of
/// earlier fields (after everything they copy).
#[derive(Clone, Debug, Default)]
pub(super) struct FieldPlan {
    pub(super) len: Option<u8>,
    /// (field, offset) of the 1-, 2- and 4-byte loads at fixed offsets.
    pub(super) abs: [Vec<(u8, usize)>; 3],
    /// Bits of every fixed-offset field.
    pub(super) abs_bits: u64,
    /// One past the last byte any fixed-offset load reads: a packet this long makes them all
    /// valid, with no check per load.
    pub(super) abs_end: usize,
    /// (field, index field x, offset, size): `size` bytes at 4 * (x & 0xf) + offset.
    pub(super) ind: Vec<(u8, u8, u32, u8)>,
    /// (field, source field, mask).
    pub(super) masked: Vec<(u8, u8, u32)>,
}

/// The index in `FieldPlan::abs` of a load's size.
pub(super) fn size_class(size: u8) -> usize {
    match size {
        1 => 0,
        2 => 1,
        _ => 2,
    }
}

/// Where field `i`'s value sits in the per-packet array. Field indexes are below
/// `MAX_FIELDS` (a power of two) by construction; the mask only lets the compiler see it, so
/// that no read or write of a value carries a bounds check.
#[inline(always)]
pub(super) fn ix(i: u8) -> usize {
    i as usize & (MAX_FIELDS - 1)
}

/// `N` big-endian bytes of `p` at `at`, for loads the caller has proven inside the packet.
///
/// # Safety
/// `at + N <= p.len()`.
#[inline(always)]
pub(super) unsafe fn be_at<const N: usize>(p: &[u8], at: usize) -> u32 {
    debug_assert!(at + N <= p.len());
    // SAFETY: the caller guarantees the N bytes at `at` are inside `p`; [u8; N] has
    // alignment 1, so the read needs no alignment.
    let b = unsafe { p.as_ptr().add(at).cast::<[u8; N]>().read() };
    b.iter().fold(0u32, |v, &x| (v << 8) | x as u32)
}

/// `size` big-endian bytes of `p` at `at`, None past the end (as the interpreter's loads).
#[inline(always)]
pub(super) fn be(p: &[u8], at: usize, size: u8) -> Option<u32> {
    match size {
        1 => p.get(at).map(|&b| b as u32),
        2 => p
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as u32),
        _ => p
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
    }
}

/// A condition in a form checked without branching: it holds when
/// `(value & mask) - lo` (wrapping) is at most `span`. Every test and its negation fits:
/// equality is `[k, k]`, `>=` and `>` are intervals up to `u32::MAX`, a bit test is
/// `value & k` in `[1, MAX]`, and a negation is the interval's complement (an empty one is
/// `mask` 0, `lo` 1, `span` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cond {
    pub(super) field: u8,
    pub(super) mask: u32,
    pub(super) lo: u32,
    pub(super) span: u32,
}

impl Cond {
    /// A condition every value meets.
    const ALWAYS: Cond = Cond {
        field: 0,
        mask: 0,
        lo: 0,
        span: u32::MAX,
    };

    pub(super) fn new(field: u8, test: Test, expect: bool) -> Cond {
        const NEVER: (u32, u32, u32) = (0, 1, 0);
        let (mask, lo, span) = match test {
            Test::Eq(k) => (u32::MAX, k, 0),
            Test::Ge(k) => (u32::MAX, k, u32::MAX - k),
            Test::Gt(u32::MAX) => NEVER,
            Test::Gt(k) => (u32::MAX, k + 1, u32::MAX - k - 1),
            Test::Set(0) => NEVER,
            Test::Set(k) => (k, 1, u32::MAX - 1),
        };
        let (mask, lo, span) = if expect {
            (mask, lo, span)
        } else if (mask, lo, span) == NEVER {
            (u32::MAX, 0, u32::MAX)
        } else if span == u32::MAX {
            NEVER
        } else {
            (
                mask,
                lo.wrapping_add(span).wrapping_add(1),
                u32::MAX - span - 1,
            )
        };
        Cond {
            field,
            mask,
            lo,
            span,
        }
    }

    /// Whether the condition holds for its field's value `v`.
    #[inline(always)]
    pub(super) fn holds_for(&self, v: u32) -> bool {
        (v & self.mask).wrapping_sub(self.lo) <= self.span
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Path {
    pub(super) filter: u32,
    /// Fields that must be inside the packet.
    pub(super) need: u64,
    pub(super) conds: (u32, u32),
}

/// An open-addressing map from a key field's value to a run of `Merged::paths`, with a
/// guard: a condition every path of the table has, checked before the lookup (and dropped
/// from the paths), so that a packet skips the tables of other protocols (an IPv4 packet the
/// IPv6 tables) without hashing.
#[derive(Clone, Debug)]
pub(super) struct KeyTable {
    pub(super) field: u8,
    pub(super) shift: u32,
    /// Fields the guard and the lookup read (the key and the guard's field): a packet
    /// missing one cannot take any path here (they all need both).
    pub(super) need: u64,
    pub(super) guard: Cond,
    /// The first filter of any path here: once a filter before it has matched, the table
    /// cannot change the result.
    pub(super) first: u32,
    /// (value, start, len) of runs of `Merged::paths`; len 0 = empty slot.
    pub(super) slots: Vec<(u32, u32, u32)>,
}

impl KeyTable {
    #[inline(always)]
    pub(super) fn home(&self, v: u32) -> usize {
        slot_of(v, self.shift)
    }

    pub(super) fn build(field: u8, entries: &[(u32, u32, u32)]) -> KeyTable {
        let bits = (entries.len() * 2)
            .next_power_of_two()
            .max(4)
            .trailing_zeros();
        let mut t = KeyTable {
            field,
            shift: 32 - bits,
            need: 0,
            guard: Cond::ALWAYS,
            first: 0,
            slots: vec![(0, 0, 0); 1 << bits],
        };
        let m = t.slots.len() - 1;
        for &e in entries {
            let mut i = t.home(e.0);
            while t.slots[i].2 != 0 {
                i = (i + 1) & m;
            }
            t.slots[i] = e;
        }
        t
    }

    #[inline(always)]
    pub(super) fn get(&self, v: u32) -> (u32, u32) {
        let m = self.slots.len() - 1;
        let mut i = self.home(v);
        loop {
            let s = self.slots[i];
            if s.2 == 0 || s.0 == v {
                return (s.1, s.2);
            }
            i = (i + 1) & m;
        }
    }
}

/// A key table in a form a batch is looked up in without a branch per packet: whether a
/// packet's key is in the table, and which of its paths hold, vary at random from packet to
/// packet, and each mispredicted branch costs about as much as the rest of the lookup.
/// Every key sits in its home slot or the next; every run has `per_run` paths and every path
/// `per_path` conditions (padding: paths of no filter, conditions that always hold), so the
/// lookup, the path checks and the choice of the best filter are selects and loops of fixed
/// length. Tables whose runs or paths are longer than the bounds stay branchy ([`KeyTable`]).
#[derive(Clone, Debug)]
pub(super) struct FlatTable {
    pub(super) field: u8,
    /// Conditions every path of the table has (the guard among them), checked once per
    /// packet over the whole batch (a vectorised loop per condition), not per path.
    pub(super) common: Vec<Cond>,
    /// Fields the table's key and common conditions read.
    pub(super) need: u64,
    pub(super) shift: u32,
    /// (value, run) for each slot, plus one past the last so that home + 1 needs no wrap;
    /// empty slots hold a value no key has, and run 0, whose paths belong to no filter.
    pub(super) slots: Vec<(u32, u32)>,
    pub(super) per_run: usize,
    pub(super) per_path: usize,
    /// (filter or `u32::MAX` for padding, fields the path needs) per path.
    pub(super) paths: Vec<(u32, u64)>,
    /// `per_path` conditions per path.
    pub(super) conds: Vec<Cond>,
}

/// The slot a key table of `2^(32 - shift)` slots hashes `v` to (multiplicative hashing).
#[inline(always)]
pub(super) fn slot_of(v: u32, shift: u32) -> usize {
    (v.wrapping_mul(0x9E37_79B1) >> shift) as usize
}

/// The longest run and path a [`FlatTable`] pads to, and its largest size.
pub(super) const FLAT_MAX_RUN: usize = 4;
pub(super) const FLAT_MAX_CONDS: usize = 8;
pub(super) const FLAT_MAX_SLOTS: usize = 1 << 16;

impl FlatTable {
    /// The flat form of `t`, whose runs of `m.paths` are `entries` (value, start, len), or
    /// None if a run or a path is too long or the keys do not fit two-slot neighbourhoods.
    pub(super) fn build(
        m: &Merged,
        t: &KeyTable,
        entries: &[(u32, u32, u32)],
    ) -> Option<FlatTable> {
        let per_run = entries
            .iter()
            .map(|e| e.2 as usize)
            .max()
            .unwrap_or(0)
            .max(1);
        let run_paths = |e: &(u32, u32, u32)| &m.paths[e.1 as usize..(e.1 + e.2) as usize];
        let path_conds = |p: &Path| &m.conds[p.conds.0 as usize..p.conds.1 as usize];
        let all = || entries.iter().flat_map(|e| run_paths(e).iter());
        let common: Vec<Cond> = all()
            .next()
            .map(|p0| {
                path_conds(p0)
                    .iter()
                    .copied()
                    .filter(|c| all().all(|p| path_conds(p).contains(c)))
                    .collect()
            })
            .unwrap_or_default();
        let own = |p: &Path| path_conds(p).iter().filter(|c| !common.contains(c)).count();
        let per_path = all().map(own).max().unwrap_or(0);
        if per_run > FLAT_MAX_RUN || per_path > FLAT_MAX_CONDS {
            return None;
        }
        // A value no key has (there are fewer keys than candidates) marks empty slots.
        let keys: std::collections::HashSet<u32> = entries.iter().map(|e| e.0).collect();
        let empty = (0..=entries.len() as u32).find(|v| !keys.contains(v))?;
        let mut bits = (entries.len() * 2)
            .next_power_of_two()
            .max(4)
            .trailing_zeros();
        let slots = loop {
            let size = 1usize << bits;
            if size > FLAT_MAX_SLOTS {
                return None;
            }
            let mut slots = vec![(empty, 0u32); size + 1];
            let placed = entries.iter().enumerate().all(|(run, e)| {
                let h = slot_of(e.0, 32 - bits);
                let free = [h, h + 1].into_iter().find(|&i| slots[i].0 == empty);
                free.map(|i| slots[i] = (e.0, run as u32 + 1)).is_some()
            });
            if placed {
                break slots;
            }
            bits += 1;
        };
        let mut flat = FlatTable {
            field: t.field,
            common: std::iter::once(t.guard)
                .filter(|g| *g != Cond::ALWAYS)
                .chain(common.iter().copied())
                .collect(),
            need: t.need,
            shift: 32 - bits,
            slots,
            per_run,
            per_path,
            paths: Vec::with_capacity((entries.len() + 1) * per_run),
            conds: Vec::with_capacity((entries.len() + 1) * per_run * per_path),
        };
        let pad_path = |f: &mut FlatTable| {
            f.paths.push((u32::MAX, 0));
            f.conds.extend(std::iter::repeat_n(Cond::ALWAYS, per_path));
        };
        (0..per_run).for_each(|_| pad_path(&mut flat));
        for e in entries {
            for p in run_paths(e) {
                flat.paths.push((p.filter, p.need));
                let before = flat.conds.len();
                let own = path_conds(p).iter().filter(|c| !common.contains(c));
                flat.conds.extend(own);
                let missing = per_path - (flat.conds.len() - before);
                flat.conds
                    .extend(std::iter::repeat_n(Cond::ALWAYS, missing));
            }
            (e.2 as usize..per_run).for_each(|_| pad_path(&mut flat));
        }
        Some(flat)
    }

    /// Lowers each `best[p]` to the first filter of this table that accepts packet `p`.
    #[inline(always)]
    pub(super) fn search(&self, cols: &Columns, best: &mut [u32]) {
        let n = best.len().min(MAX_BURST);
        // 1 where the packet has the table's fields and meets its common conditions.
        let mut pass = [0u32; MAX_BURST];
        for (ok, &valid) in pass[..n].iter_mut().zip(&cols.valid[..n]) {
            *ok = (self.need & !valid == 0) as u32;
        }
        for c in &self.common {
            for (ok, &v) in pass[..n].iter_mut().zip(&cols.vals[ix(c.field)][..n]) {
                *ok &= c.holds_for(v) as u32;
            }
        }
        // A table of another protocol's paths (the IPv6 ones for an IPv4 batch) is skipped
        // whole: no packet meets its guard.
        if pass[..n].iter().fold(0, |any, &ok| any | ok) == 0 {
            return;
        }
        let pass = &pass;
        // The common shapes get their loops unrolled (a filter per key value, a few
        // conditions per path).
        match (self.per_run, self.per_path) {
            (1, 0) => self.search_shaped::<1, 0>(cols, pass, &mut best[..n]),
            (1, 1) => self.search_shaped::<1, 1>(cols, pass, &mut best[..n]),
            (1, 2) => self.search_shaped::<1, 2>(cols, pass, &mut best[..n]),
            (1, 3) => self.search_shaped::<1, 3>(cols, pass, &mut best[..n]),
            (1, 4) => self.search_shaped::<1, 4>(cols, pass, &mut best[..n]),
            (2, 1) => self.search_shaped::<2, 1>(cols, pass, &mut best[..n]),
            (2, 2) => self.search_shaped::<2, 2>(cols, pass, &mut best[..n]),
            _ => self.search_any(cols, pass, &mut best[..n]),
        }
    }

    #[inline(never)]
    pub(super) fn search_shaped<const R: usize, const C: usize>(
        &self,
        cols: &Columns,
        pass: &[u32; MAX_BURST],
        best: &mut [u32],
    ) {
        debug_assert!(self.per_run == R && self.per_path == C);
        self.search_with(cols, pass, best, R, C)
    }

    #[inline(never)]
    pub(super) fn search_any(&self, cols: &Columns, pass: &[u32; MAX_BURST], best: &mut [u32]) {
        self.search_with(cols, pass, best, self.per_run, self.per_path)
    }

    /// The search, for runs of `per_run` paths of `per_path` conditions (constants in the
    /// shaped copies).
    #[inline(always)]
    pub(super) fn search_with(
        &self,
        cols: &Columns,
        pass: &[u32; MAX_BURST],
        best: &mut [u32],
        per_run: usize,
        per_path: usize,
    ) {
        use std::hint::select_unpredictable as select;
        let key = &cols.vals[ix(self.field)];
        let mask = self.slots.len() - 2;
        let slots = self.slots.as_ptr();
        // Each packet's candidate goes to `cand` first and is merged into `best` by a
        // separate (vectorised) minimum: folded into `best` directly, the compiler turns
        // the comparisons back into branches, which mispredict here.
        let mut cand = [u32::MAX; MAX_BURST];
        let n = best.len().min(MAX_BURST);
        for (p, c) in cand[..n].iter_mut().enumerate() {
            let v = key[p];
            let h = slot_of(v, self.shift) & mask;
            // SAFETY: `h <= mask`, and `slots` has `mask + 2` entries (build).
            let (s0, s1) = unsafe { (*slots.add(h), *slots.add(h + 1)) };
            // Both slots hold `v` only when it is the empty marker; both runs are then 0.
            let run = select(s0.0 == v, s0.1, 0) | select(s1.0 == v, s1.1, 0);
            let failed = pass[p] ^ 1;
            let valid = cols.valid[p];
            let first = run as usize * per_run;
            for i in first..first + per_run {
                debug_assert!(i < self.paths.len() && (i + 1) * per_path <= self.conds.len());
                // SAFETY: runs are 0..=entries, each with `per_run` paths and
                // `per_run * per_path` conditions (build).
                let (filter, need) = unsafe { *self.paths.get_unchecked(i) };
                // SAFETY: as above: path `i`'s `per_path` conditions end at
                // `(i + 1) * per_path <= conds.len()`.
                let conds = unsafe { self.conds.get_unchecked(i * per_path..(i + 1) * per_path) };
                // 1 unless every condition holds; opaque to the optimiser, which would
                // otherwise make a branch of each condition.
                let fails = std::hint::black_box(
                    conds
                        .iter()
                        .fold(failed | ((need & !valid != 0) as u32), |f, c| {
                            f | (!c.holds_for(cols.vals[ix(c.field)][p])) as u32
                        }),
                );
                *c = (*c).min(filter | fails.wrapping_neg());
            }
        }
        for (b, c) in best.iter_mut().zip(&cand[..n]) {
            *b = (*b).min(*c);
        }
    }
}

//! WildcardMatch: rules of (values, masks, priority) -> gate, matched by tuple-space search:
//! one exact-match table per distinct mask; the highest-priority matching rule wins.
use bessemer_core::{
    handler, Args, AttrOffset, CommandSpec, Context, Error, Instance, Module, ModuleClass,
    PacketBatch, Result, Value, MAX_BURST,
};

use super::table::{
    self, bin_list, check_field_count, check_gate, cmd_add, cmd_get_runtime_config,
    cmd_set_default_gate, cmd_set_runtime_config, field_bytes, field_data, initial_arg, key_bytes,
    key_words, parse_fields, prefetch, process_batch, resolve_gate, split, IntOrder, Matcher,
    Plans, RuleClassifier, TableDrop, ValueFields, VALUES_PAD,
};
use super::tuple_table::{hash_words as tuple_hash, TupleTable};

/// Most distinct masks (tuples). BESS allows 8; Bessemer allows more.
pub const MAX_TUPLES: usize = 32;

#[derive(Clone, Copy, Debug)]
struct RuleData {
    priority: i32,
    gate: u16,
}

pub(crate) struct Tuple {
    mask: [u64; 8],
    /// Masked key (folded, see `fold`) -> tag (see [`Tuple::tag`]).
    table: TupleTable,
    /// When the mask has at most 64 bits set and each key word's masked bits, rotated by
    /// fold[j], miss those of the words before: the table is keyed by the OR of the rotated
    /// words, one word, which is cheaper to hash and compare. None: the full key.
    fold: Option<[u32; 8]>,
    data: Vec<RuleData>,
    /// The bytes each rule writes (the fork's `valuesv`, laid out as `values`), `vsize` per
    /// rule in `data`'s order: a flat array, where 64 bytes inline in every rule made 5 000
    /// rules span 360 KB; then VALUES_PAD bytes (see `ValuePlan`).
    vals: Vec<u8>,
    vsize: usize,
    /// Key bits (under `mask`) every rule of the tuple has alike, and their values: a
    /// packet that differs there matches no rule, and a large tuple is not probed for it
    /// (the UPF's PDR tuples differ in `src_iface`, so a packet probes only its direction's
    /// tuple). Narrowed on add, never widened on delete (fewer bits is still a sound test).
    common_mask: [u64; 8],
    common_val: [u64; 8],
    free: Vec<u32>,
    max_priority: i32,
    /// Creation order (1..=MAX_ORDER, renumbered when used up): among equal priorities the
    /// rule of the later tuple wins, as in BESS.
    order: u32,
}

/// The rotations folding a mask of `w` words into one word (see `Tuple::fold`), if any.
fn fold_of(mask: &[u64; 8], w: usize) -> Option<[u32; 8]> {
    if w == 1 {
        return None;
    }
    let (mut used, mut rot) = (mask[0], [0u32; 8]);
    for j in 1..w {
        let r = (0..64).find(|&r| used & mask[j].rotate_left(r) == 0)?;
        rot[j] = r;
        used |= mask[j].rotate_left(r);
    }
    Some(rot)
}

/// Tag bits below the tuple order: the rule's index in its tuple's `data`.
const IDX_BITS: u32 = 26;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
/// Highest tuple order a tag can carry (6 bits; at least MAX_TUPLES + 1).
const MAX_ORDER: u32 = 63;

/// The index into `data` of a tag.
fn rule_index(tag: u64) -> usize {
    (tag & IDX_MASK) as usize
}

impl Tuple {
    fn recompute_max(&mut self) {
        // A tag's top half is the rule's priority (biased), so the highest tag has it.
        self.max_priority = self
            .table
            .tags()
            .max()
            .map_or(i32::MIN, |t| ((t >> 32) as u32 ^ 0x8000_0000) as i32);
    }

    /// A rule's tag: its place in the match order as one number (higher wins, never 0:
    /// priority, then the tuple's creation order, as BESS breaks ties) over its index.
    fn tag(&self, priority: i32, i: u32) -> u64 {
        ((((priority as u32) ^ 0x8000_0000) as u64) << 32)
            | ((self.order as u64) << IDX_BITS)
            | i as u64
    }

    /// A tag above every tag of this tuple.
    fn bound(&self) -> u64 {
        self.tag(self.max_priority, IDX_MASK as u32)
    }

    /// The table key of a masked key of `w` words.
    fn table_key(&self, key: &[u64], w: usize) -> Vec<u64> {
        match self.fold {
            Some(rot) => vec![(0..w).fold(0, |x, j| x | key[j].rotate_left(rot[j]))],
            None => key[..w].to_vec(),
        }
    }

    /// The masked key of `w` words a table key stands for.
    fn masked_key(&self, tk: &[u64], w: usize) -> Vec<u64> {
        match self.fold {
            Some(rot) => (0..w)
                .map(|j| tk[0].rotate_right(rot[j]) & self.mask[j])
                .collect(),
            None => tk.to_vec(),
        }
    }

    /// Sets rule `i`'s value bytes.
    fn set_vals(&mut self, i: usize, bytes: &[u8]) {
        self.vals[i * self.vsize..(i + 1) * self.vsize].copy_from_slice(bytes);
    }

    /// Rule `i`'s value bytes.
    fn rule_vals(&self, i: usize) -> &[u8] {
        &self.vals[i * self.vsize..(i + 1) * self.vsize]
    }

    /// Renumbers the tuple (its tags carry its order).
    fn set_order(&mut self, order: u32) {
        self.order = order;
        let bits = (order as u64) << IDX_BITS;
        let mask = (MAX_ORDER as u64) << IDX_BITS;
        self.table.map_tags(|t| (t & !mask) | bits);
    }
}

/// Wildcard (value/mask) classifier with priorities.
pub struct WildcardMatch {
    matcher: Matcher,
    /// Tuples in lookup order: highest max priority first, later-created first on ties.
    tuples: Vec<Tuple>,
    /// Fields written when a rule matches (omec-project fork's `values`).
    values: ValueFields,
    /// Most rules of one mask (the fork's `entries`, which sizes each tuple's table; 0 = no
    /// limit but [`table::MAX_RULES`] in all).
    entries: u64,
}

type KeyMask = ([u64; 8], [u64; 8]);

impl WildcardMatch {
    fn key_mask(&self, values: &[Value], masks: &[Value], what: &str) -> Result<KeyMask> {
        let n = self.matcher.fields.len();
        if values.len() != n {
            return Err(Error::invalid(format!(
                "{what}.values: must specify {n} values"
            )));
        }
        if masks.len() != n {
            return Err(Error::invalid(format!(
                "{what}.masks: must specify {n} masks"
            )));
        }
        let (mut kb, mut mb) = ([0u8; 64], [0u8; 64]);
        for (i, f) in self.matcher.fields.iter().enumerate() {
            let v = field_data(&values[i], f.size, &format!("{what}.values[{i}]"))?
                .unwrap_or_else(|| vec![0; f.size]);
            let m = field_data(&masks[i], f.size, &format!("{what}.masks[{i}]"))?
                .unwrap_or_else(|| vec![0; f.size]);
            if v.iter().zip(&m).any(|(v, m)| v & !m != 0) {
                return Err(Error::invalid(format!(
                    "{what}.values[{i}]: invalid pair of value 0x{} and mask 0x{}",
                    hex(&v),
                    hex(&m)
                )));
            }
            kb[f.pos..f.pos + f.size].copy_from_slice(&v);
            mb[f.pos..f.pos + f.size].copy_from_slice(&m);
        }
        let (mut k, mut m) = ([0u64; 8], [0u64; 8]);
        key_words(&kb, &mut k);
        key_words(&mb, &mut m);
        Ok((k, m))
    }

    fn sort_tuples(&mut self) {
        self.tuples.sort_by(|a, b| {
            b.max_priority
                .cmp(&a.max_priority)
                .then(b.order.cmp(&a.order))
        });
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl RuleClassifier for WildcardMatch {
    const CLASS: &'static str = "WildcardMatch";
    type Rules = Vec<Tuple>;

    fn matcher(&self) -> &Matcher {
        &self.matcher
    }
    fn matcher_mut(&mut self) -> &mut Matcher {
        &mut self.matcher
    }
    fn matcher_and_values(&mut self) -> (&mut Matcher, &ValueFields) {
        (&mut self.matcher, &self.values)
    }
    fn add_rule(&mut self, arg: &Value, what: &str) -> Result<()> {
        let mut a = Args::new(arg, what)?;
        let gate = check_gate(a.uint("gate", u64::MAX)?, &format!("{what}.gate"))?;
        // BESS stores the int64 field in a C++ int: wider values wrap (the UPF agent sends
        // 2^32 - 1 - precedence, which becomes -1 - precedence and keeps its order).
        let priority = a.int("priority", i64::MIN, i64::MAX)?.unwrap_or(0) as i32;
        let values = a.list("values")?;
        let masks = a.list("masks")?;
        let valuesv = a.list("valuesv")?;
        a.finish()?;
        let (key, mask) = self.key_mask(values, masks, what)?;
        let bytes = self
            .values
            .rule_bytes(valuesv, what, "valuesv", IntOrder::Little)?;
        let w = self.matcher.words;
        // The fork's `entries` sizes each mask's own hash table (one per tuple), so the limit
        // counts the rules of the rule's mask: the UPF's four PDR masks each hold `entries`
        // (its upf.jsonc: "50K per unique tuple"). With no `entries` the whole table is
        // capped at MAX_RULES.
        let limit = table::rule_limit(self.entries);
        let n: usize = self
            .tuples
            .iter()
            .filter(|t| self.entries == 0 || t.mask[..w] == mask[..w])
            .map(|t| t.table.len())
            .sum();
        if n as u64 >= limit {
            let exists = self
                .tuples
                .iter()
                .any(|t| t.mask[..w] == mask[..w] && t.table.get(&t.table_key(&key, w)).is_some());
            if !exists && self.entries == 0 {
                return Err(table::table_full(what, limit));
            }
            if !exists {
                return Err(Error::new(
                    libc::ENOSPC,
                    format!("{what}: this mask's table is full ({limit} entries; `entries` sets each mask's limit)"),
                ));
            }
        }
        let idx = match self.tuples.iter().position(|t| t.mask[..w] == mask[..w]) {
            Some(i) => i,
            None => {
                if self.tuples.len() >= MAX_TUPLES {
                    return Err(Error::new(
                        libc::ENOSPC,
                        format!("{what}.masks: at most {MAX_TUPLES} distinct masks"),
                    ));
                }
                let mut order = self.tuples.iter().map(|t| t.order).max().unwrap_or(0) + 1;
                if order > MAX_ORDER {
                    // Orders used up by tuples since deleted: renumber 1.. keeping the order.
                    let mut by_order: Vec<&mut Tuple> = self.tuples.iter_mut().collect();
                    by_order.sort_by_key(|t| t.order);
                    for (o, t) in by_order.into_iter().enumerate() {
                        t.set_order(o as u32 + 1);
                    }
                    order = self.tuples.len() as u32 + 1;
                }
                self.tuples.push(Tuple {
                    mask,
                    table: TupleTable::new(if fold_of(&mask, w).is_some() { 1 } else { w }),
                    fold: fold_of(&mask, w),
                    data: Vec::new(),
                    vals: vec![0; VALUES_PAD],
                    vsize: self.values.size,
                    common_mask: mask,
                    common_val: key,
                    free: Vec::new(),
                    max_priority: i32::MIN,
                    order,
                });
                self.tuples.len() - 1
            }
        };
        let t = &mut self.tuples[idx];
        let d = RuleData { priority, gate };
        for ((m, v), k) in t
            .common_mask
            .iter_mut()
            .zip(&mut t.common_val)
            .zip(&key[..w])
        {
            *m &= !(k ^ *v);
            *v &= *m;
        }
        let tk = t.table_key(&key, w);
        // Only replacing the rule that held the maximum with a lower priority needs a scan
        // of the tuple (rules may number thousands, added one command each).
        let mut rescan = false;
        match t.table.get(&tk) {
            Some(tag) => {
                let i = rule_index(tag);
                rescan = t.data[i].priority == t.max_priority && priority < t.max_priority;
                t.data[i] = d;
                t.set_vals(i, &bytes);
                t.table.insert(&tk, t.tag(priority, i as u32));
            }
            None => {
                if t.free.is_empty() && t.data.len() as u64 > IDX_MASK {
                    return Err(Error::new(
                        libc::ENOSPC,
                        format!("{what}: too many rules with this mask"),
                    ));
                }
                let i = match t.free.pop() {
                    Some(i) => {
                        t.data[i as usize] = d;
                        t.set_vals(i as usize, &bytes);
                        i
                    }
                    None => {
                        t.data.push(d);
                        t.vals.resize(t.vals.len() + t.vsize, 0);
                        t.set_vals(t.data.len() - 1, &bytes);
                        (t.data.len() - 1) as u32
                    }
                };
                t.table.insert(&tk, t.tag(priority, i));
            }
        }
        if rescan {
            t.recompute_max();
        } else {
            t.max_priority = t.max_priority.max(priority);
        }
        self.sort_tuples();
        Ok(())
    }

    fn rules_value(&self) -> Vec<Value> {
        type Row = (i32, u16, Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<u8>);
        let split = |w: &[u64]| field_bytes(&self.matcher.fields, &key_bytes(w));
        let mut rows: Vec<Row> = Vec::new();
        for t in &self.tuples {
            let mb = split(&t.mask[..]);
            for (k, tag) in t.table.iter() {
                let d = t.data[rule_index(tag)];
                let k = t.masked_key(&k, self.matcher.words);
                let vals = t.rule_vals(rule_index(tag)).to_vec();
                rows.push((d.priority, d.gate, mb.clone(), split(&k), vals));
            }
        }
        // Priority, gate, masks, values: BESS's order.
        rows.sort();
        rows.into_iter()
            .map(|(p, g, m, v, vals)| {
                let r = Value::map()
                    .with("gate", g as u64)
                    .with("priority", p as i64)
                    .with("values", bin_list(v))
                    .with("masks", bin_list(m));
                if self.values.is_empty() {
                    r
                } else {
                    r.with("valuesv", self.values.value_list(&vals))
                }
            })
            .collect()
    }
    fn take_rules(&mut self) -> Vec<Tuple> {
        std::mem::take(&mut self.tuples)
    }
    fn put_rules(&mut self, rules: Vec<Tuple>) {
        self.tuples = rules;
    }
    /// The batch path for keys of `W` words: tuple by tuple over the whole batch, skipping
    /// packets whose best match so far already beats every rule of the tuple.
    #[inline(always)]
    fn run<const W: usize>(
        &self,
        ctx: &mut Context,
        batch: &mut PacketBatch,
        offs: &[AttrOffset],
        plans: Plans<'_>,
    ) {
        let n = batch.len();
        let mut keys = [[0u64; W]; MAX_BURST];
        let mut status: [Option<TableDrop>; MAX_BURST] = [None; MAX_BURST];
        if let Some(plan) = plans.keys {
            plan.build_all::<W>(batch.pkts(), &mut keys);
        } else {
            for (i, p) in batch.pkts().iter().enumerate() {
                // Built in place: a copy out of a key just assembled stalls on store
                // forwarding.
                if !self.matcher.keys.build_into::<W>(offs, p, &mut keys[i]) {
                    status[i] = Some(TableDrop::TooShort);
                }
            }
        }
        // Best tag per packet; 0 = no match yet, u64::MAX = too short (it then takes no part:
        // nothing can beat it).
        let mut best = [0u64; MAX_BURST];
        for i in 0..n {
            if status[i].is_some() {
                best[i] = u64::MAX;
            }
        }
        // Bits every key has (AND) and bits some key has (OR), for the large tuples to skip
        // a batch that none of their rules can match (`probe_big`). Too-short packets'
        // keys take part: that can only keep a tuple from being skipped.
        let (mut kand, mut kor) = ([u64::MAX; W], [0u64; W]);
        for k in &keys[..n] {
            for j in 0..W {
                kand[j] &= k[j];
                kor[j] |= k[j];
            }
        }
        let mut by_order = [0u8; MAX_ORDER as usize + 1];
        for (ti, t) in self.tuples.iter().enumerate() {
            by_order[t.order as usize] = ti as u8;
            // Tuples come in decreasing order of their bound: once every packet has a match
            // that beats it, no later tuple can change anything. Checked every fourth tuple:
            // the minimum of 32 u64s is dear next to a probe of them all.
            if ti % 4 == 0 && best[..n].iter().copied().min().unwrap_or(u64::MAX) > t.bound() {
                break;
            }
            let mask: &[u64; W] = t.mask[..W].try_into().unwrap();
            if t.table.is_cuckoo() {
                if !t.may_match_any(mask, &kand, &kor) {
                    continue;
                }
                match t.table.has_overflow() {
                    true => probe_big::<W, true>(t, mask, &keys[..n], &mut best[..n]),
                    false => probe_big::<W, false>(t, mask, &keys[..n], &mut best[..n]),
                }
                continue;
            }
            match (t.fold, t.table.has_overflow()) {
                (Some(rot), true) => {
                    probe_folded::<W, true>(t, mask, &rot, &keys[..n], &mut best[..n])
                }
                (Some(rot), false) => {
                    probe_folded::<W, false>(t, mask, &rot, &keys[..n], &mut best[..n])
                }
                (None, true) => probe::<W, true>(t, mask, &keys[..n], &mut best[..n]),
                (None, false) => probe::<W, false>(t, mask, &keys[..n], &mut best[..n]),
            }
        }
        // The matched rule of packet i, if any: (tuple, rule index), its record prefetched.
        let mut found: [Option<(u8, u32)>; MAX_BURST] = [None; MAX_BURST];
        for i in 0..n {
            let tag = best[i];
            if status[i].is_none() && tag != 0 {
                let ti = by_order[(tag >> IDX_BITS & MAX_ORDER as u64) as usize];
                let ri = rule_index(tag);
                let t = &self.tuples[ti as usize];
                prefetch(t.data.as_ptr().wrapping_add(ri));
                prefetch(t.vals.as_ptr().wrapping_add(ri * t.vsize));
                found[i] = Some((ti, ri as u32));
            }
        }
        let def = self.matcher.default_gate;
        let mut gates = [0u16; MAX_BURST];
        for i in 0..n {
            let gate = found[i].map(|(ti, ri)| self.tuples[ti as usize].data[ri as usize].gate);
            resolve_gate(gate, def, &mut status[i], &mut gates[i]);
        }
        if !self.values.is_empty() {
            // The fork writes a matched rule's values when its gate is not the default gate.
            if let Some(vp) = plans.values {
                let read = self.values.read_len();
                let mut rows: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
                for i in 0..n {
                    if let Some((ti, ri)) = found[i] {
                        let t = &self.tuples[ti as usize];
                        if t.data[ri as usize].gate != def {
                            // Padded: see `Tuple::vals`.
                            let at = ri as usize * t.vsize;
                            rows[i] = &t.vals[at..at + read];
                        }
                    }
                }
                vp.apply_all(batch.pkts_mut(), &rows[..n]);
            } else {
                let offs = self.values.offsets(ctx);
                for (i, p) in batch.pkts_mut().iter_mut().enumerate() {
                    if let Some((ti, ri)) = found[i] {
                        let t = &self.tuples[ti as usize];
                        if t.data[ri as usize].gate != def {
                            self.values.apply(p, &offs, t.rule_vals(ri as usize));
                        }
                    }
                }
            }
        }
        split(ctx, batch, &gates, &status);
    }
}

impl Tuple {
    /// False when no key of a batch whose keys have all of `kand`'s bits and only `kor`'s
    /// can match a rule of this tuple: a bit all its rules share (`common_mask`,
    /// `common_val`) is the other way in every key, so `probe_big` would pass over every
    /// packet. The UPF's uplink and downlink PDRs differ in `src_iface`, so a batch from
    /// one side skips the other side's tuples instead of testing each packet against them
    /// (callgrind, `bench/upf_profile.py`).
    #[inline(always)]
    fn may_match_any<const W: usize>(
        &self,
        mask: &[u64; W],
        kand: &[u64; W],
        kor: &[u64; W],
    ) -> bool {
        let mut dead = 0u64;
        for j in 0..W {
            let (cm, cv) = (self.common_mask[j], self.common_val[j]);
            // Of the masked key bits the rules share: those some key has, and those every
            // key has. A shared 1 no key has, or a shared 0 every key has, fails every key
            // (and so does any bit of `cv` outside `cm`, which `probe_big` tests too).
            let some = kor[j] & mask[j] & cm;
            let every = kand[j] & mask[j] & cm;
            dead |= (cv & !some) | (!cv & every);
        }
        dead == 0
    }
}

/// Probes tuple `t` for every key, keeping each packet's highest tag in `best`.
#[inline(always)]
fn probe<const W: usize, const OVERFLOW: bool>(
    t: &Tuple,
    mask: &[u64; W],
    keys: &[[u64; W]],
    best: &mut [u64],
) {
    for (k, b) in keys.iter().zip(best.iter_mut()) {
        let mut mk = [0u64; W];
        for j in 0..W {
            mk[j] = k[j] & mask[j];
        }
        *b = (*b).max(
            t.table
                .lookup_hashed::<W, OVERFLOW, false>(&mk, tuple_hash(&mk)),
        );
    }
}

/// As [`probe`], for a large (cuckoo) tuple: only the packets that may still
/// change their best match (the tuple's bound beats it, and the key has the bits all its
/// rules share) are probed, their two slots prefetched for the whole batch first so that
/// the misses overlap.
#[inline(always)]
fn probe_big<const W: usize, const OVERFLOW: bool>(
    t: &Tuple,
    mask: &[u64; W],
    keys: &[[u64; W]],
    best: &mut [u64],
) {
    let bound = t.bound();
    let mut todo = [0u8; MAX_BURST];
    let mut tks = [[0u64; W]; MAX_BURST];
    let mut hs = [0u64; MAX_BURST];
    let mut m = 0;
    for (i, k) in keys.iter().enumerate() {
        let mut mk = [0u64; W];
        let mut off = 0u64;
        for j in 0..W {
            mk[j] = k[j] & mask[j];
            off |= (mk[j] & t.common_mask[j]) ^ t.common_val[j];
        }
        if best[i] >= bound || off != 0 {
            continue;
        }
        let h = match t.fold {
            Some(rot) => {
                let mut x = 0u64;
                for j in 0..W {
                    x |= mk[j].rotate_left(rot[j]);
                }
                tks[m][0] = x;
                tuple_hash(&[x])
            }
            None => {
                tks[m] = mk;
                tuple_hash(&mk)
            }
        };
        t.table.prefetch(h);
        todo[m] = i as u8;
        hs[m] = h;
        m += 1;
    }
    for q in 0..m {
        let i = todo[q] as usize;
        let tag = if t.fold.is_some() {
            t.table
                .lookup_hashed::<1, OVERFLOW, true>(&[tks[q][0]], hs[q])
        } else {
            t.table.lookup_hashed::<W, OVERFLOW, true>(&tks[q], hs[q])
        };
        best[i] = best[i].max(tag);
    }
}

/// As [`probe`], for a tuple keyed by folded keys (`rot`: see `Tuple::fold`).
#[inline(always)]
fn probe_folded<const W: usize, const OVERFLOW: bool>(
    t: &Tuple,
    mask: &[u64; W],
    rot: &[u32; 8],
    keys: &[[u64; W]],
    best: &mut [u64],
) {
    for (k, b) in keys.iter().zip(best.iter_mut()) {
        let mut x = 0u64;
        for j in 0..W {
            x |= (k[j] & mask[j]).rotate_left(rot[j]);
        }
        *b = (*b).max(
            t.table
                .lookup_hashed::<1, OVERFLOW, false>(&[x], tuple_hash(&[x])),
        );
    }
}

impl WildcardMatch {
    /// The `delete` command.
    fn cmd_delete(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "WildcardMatchCommandDeleteArg";
        let mut a = Args::new(arg, what)?;
        let values = a.list("values")?;
        let masks = a.list("masks")?;
        a.finish()?;
        let (key, mask) = self.key_mask(values, masks, what)?;
        let w = self.matcher.words;
        let Some(ti) = self.tuples.iter().position(|t| t.mask[..w] == mask[..w]) else {
            return Err(Error::not_found(format!("{what}: no rule with this mask")));
        };
        let t = &mut self.tuples[ti];
        let Some(tag) = t.table.remove(&t.table_key(&key, w)) else {
            return Err(Error::not_found(format!(
                "{what}: no rule with these values"
            )));
        };
        t.free.push(rule_index(tag) as u32);
        if t.table.is_empty() {
            self.tuples.remove(ti);
        } else {
            t.recompute_max();
        }
        self.sort_tuples();
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.tuples.clear();
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command.
    fn cmd_get_initial_arg(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(initial_arg(
            &self.matcher.fields,
            None,
            &self.values,
            None,
            self.entries,
        ))
    }
}

impl Module for WildcardMatch {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_batch(self, ctx, batch)
    }

    fn desc(&self) -> String {
        let rules: usize = self.tuples.iter().map(|t| t.table.len()).sum();
        format!("{} fields, {rules} rules", self.matcher.fields.len())
    }
}

fn create(init: &mut bessemer_core::InitContext, arg: &Value) -> Result<Instance> {
    let what = "WildcardMatchArg";
    let mut a = Args::new(arg, what)?;
    let fields = a.list("fields")?;
    let values = a.list("values")?;
    let entries = a.uint("entries", table::MAX_RULES)?.unwrap_or(0);
    a.finish()?;
    check_field_count(fields, what)?;
    let parsed = parse_fields(fields, what, init, |_, _| Ok(()))?;
    let values = ValueFields::parse(values, what, init)?;
    Ok(Instance::Exclusive(Box::new(WildcardMatch {
        matcher: Matcher::new(parsed, &[]),
        tuples: Vec::new(),
        values,
        entries,
    })))
}

/// The WildcardMatch class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "WildcardMatch",
    name_template: "wm",
    help: "Multi-field classifier with a wildcard match table",
    arg_type: "WildcardMatchArg",
    arg_doc: &[
        "fields: [{offset: uint32 (0..1024) | attr_name: string, num_bytes: uint32 (1..8)}] — up to 8 fields each rule matches",
        "rules (add): values and masks, one FieldData per field: value_bin = bytes as in the packet, value_int = big-endian number",
        "the matching rule of highest priority wins (equal priorities: the rule whose mask was added later); up to 32 distinct masks",
        "no match goes to the default gate (initially none: dropped, counted no_match); packets too short for a field take the default gate",
        "values: [Field] — (omec-project fork) fields written when a rule whose gate is not the default gate matches; each add",
        "  carries valuesv: [FieldData], one per value field (value_int in host order, little-endian, as the fork); a field past the packet end is skipped",
        "entries: uint64 — (fork) most rules of one mask (the fork sizes each mask's table with it): a new rule beyond it fails with ENOSPC (0 or absent: 4194304 in all, also the largest accepted)",
    ],
    igates: 1,
    ogates: bessemer_core::module::MAX_GATES,
    commands: &[
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "returns the WildcardMatchArg the module was built from",
            mt_safe: true,
            reply_type: "WildcardMatchArg",
            mutates: false,
            handler: handler!(Exclusive WildcardMatch, WildcardMatch::cmd_get_initial_arg),
        },
        CommandSpec {
            name: "get_runtime_config",
            arg_type: "EmptyArg",
            help: "returns a WildcardMatchConfig: default gate and all rules",
            mt_safe: true,
            reply_type: "WildcardMatchConfig",
            mutates: false,
            handler: handler!(Exclusive WildcardMatch, cmd_get_runtime_config::<WildcardMatch>),
        },
        CommandSpec {
            name: "set_runtime_config",
            arg_type: "WildcardMatchConfig",
            help: "replaces the default gate and all rules",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive WildcardMatch, cmd_set_runtime_config::<WildcardMatch>),
        },
        CommandSpec {
            name: "add",
            arg_type: "WildcardMatchCommandAddArg",
            help: "adds (or replaces) a rule: values/masks, priority -> gate (8192 = drop)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive WildcardMatch, cmd_add::<WildcardMatch>),
        },
        CommandSpec {
            name: "delete",
            arg_type: "WildcardMatchCommandDeleteArg",
            help: "removes the rule with these values and masks",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive WildcardMatch, WildcardMatch::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all rules",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive WildcardMatch, WildcardMatch::cmd_clear),
        },
        CommandSpec {
            name: "set_default_gate",
            arg_type: "WildcardMatchCommandSetDefaultGateArg",
            help: "sets the gate for packets that match no rule (8192 = drop)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive WildcardMatch, cmd_set_default_gate::<WildcardMatch>),
        },
    ],
    drop_reasons: TableDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::super::table::test_util::{bin, int, off};
    use super::*;
    use bessemer_core::testing::Harness;
    use proptest::prelude::*;

    fn rule(values: Vec<Value>, masks: Vec<Value>, priority: i64, gate: u64) -> Value {
        Value::map()
            .with("gate", gate)
            .with("priority", priority)
            .with("values", Value::List(values))
            .with("masks", Value::List(masks))
    }

    /// 60-byte frame with IPv4 dst at 30..34 and UDP dst port at 36..38.
    fn pkt(dst: [u8; 4], port: u16) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[12] = 0x08;
        p[14] = 0x45;
        p[30..34].copy_from_slice(&dst);
        p[36..38].copy_from_slice(&port.to_be_bytes());
        p
    }

    fn fields() -> Value {
        Value::map().with("fields", Value::List(vec![off(30, 4), off(36, 2)]))
    }

    #[test]
    fn wide_priorities_wrap_as_bess_int_keeping_the_agents_order() {
        // The UPF agent sends 2^32 - 1 - precedence; BESS keeps it in a C++ int (-1 - p),
        // so a lower precedence still wins, whichever rule came first.
        let agent = |precedence: i64| (1i64 << 32) - 1 - precedence;
        let mut h = Harness::new();
        h.add(&CLASS, "wm", &fields()).unwrap();
        let c: Vec<_> = (0..3).map(|g| h.capture("wm", g)).collect();
        let any = || vec![int(0), int(0)];
        h.command(
            "wm",
            "add",
            &rule(any(), vec![int(0), int(0xffff)], agent(5), 1),
        )
        .unwrap();
        h.command("wm", "add", &rule(any(), vec![int(0), int(0)], agent(2), 2))
            .unwrap();
        h.command(
            "wm",
            "add",
            &rule(any(), vec![int(0xffff_ffff), int(0)], agent(9), 0),
        )
        .unwrap();
        let p = pkt([0, 0, 0, 0], 0);
        h.inject("wm", 0, std::slice::from_ref(&p));
        assert_eq!(c[2].take_data(), vec![p.clone()]);
        assert!(c[0].take_data().is_empty() && c[1].take_data().is_empty());
        let cfg = h
            .command("wm", "get_runtime_config", &Value::map())
            .unwrap();
        let prios: Vec<i64> = cfg
            .get("rules")
            .and_then(|r| r.as_list())
            .unwrap()
            .iter()
            .map(|r| r.get("priority").and_then(|p| p.as_i64()).unwrap())
            .collect();
        let mut sorted = prios.clone();
        sorted.sort();
        assert_eq!(sorted, vec![-10, -6, -3]);
    }

    #[test]
    fn matches_survive_tuple_renumbering() {
        let mut h = Harness::new();
        h.add(&CLASS, "wm", &fields()).unwrap();
        let c: Vec<_> = (0..4).map(|g| h.capture("wm", g)).collect();
        let spec = |v: u8, m: u8| {
            (
                vec![bin(&[v, 0, 0, 0]), int(0)],
                vec![bin(&[m, 0, 0, 0]), int(0)],
            )
        };
        let add = |h: &mut Harness, v: u8, m: u8, prio: i64, g: u64| {
            let (vs, ms) = spec(v, m);
            h.command("wm", "add", &rule(vs, ms, prio, g)).unwrap();
        };
        let del = |h: &mut Harness, v: u8, m: u8| {
            let (vs, ms) = spec(v, m);
            let arg = Value::map()
                .with("values", Value::List(vs))
                .with("masks", Value::List(ms));
            h.command("wm", "delete", &arg).unwrap();
        };
        // Z then B; Z goes, so B is not first. Two tuples that never match the packet then
        // replace each other until the creation orders a tag can carry are used up and the
        // tuples are renumbered; B's rule must still be found as B's.
        add(&mut h, 10, 0xff, 0, 3);
        add(&mut h, 10, 0xfe, 0, 1);
        del(&mut h, 10, 0xff);
        add(&mut h, 2, 0x0e, 0, 3);
        for _ in 0..MAX_ORDER {
            add(&mut h, 2, 0x0a, 0, 3);
            del(&mut h, 2, 0x0e);
            add(&mut h, 2, 0x0e, 0, 3);
            del(&mut h, 2, 0x0a);
        }
        let p = pkt([10, 1, 2, 3], 9);
        h.inject("wm", 0, std::slice::from_ref(&p));
        assert_eq!(c[1].take_data(), vec![p.clone()]);
        // A later tuple matching it with the same priority wins the tie; a higher priority
        // in the older tuple wins over it.
        add(&mut h, 10, 0x0e, 0, 2);
        h.inject("wm", 0, std::slice::from_ref(&p));
        assert_eq!(c[2].take_data(), vec![p.clone()]);
        add(&mut h, 10, 0xfe, 1, 1);
        h.inject("wm", 0, std::slice::from_ref(&p));
        assert_eq!(c[1].take_data(), vec![p]);
        assert!(c[0].is_empty() && c[3].is_empty());
    }

    #[test]
    fn early_stop_uses_each_tuples_true_maximum() {
        // Four tuples of priority-10 rules every packet matches, then (fifth, where the
        // batch checks whether to stop) a tuple whose best rule must keep it in play.
        let mut h = Harness::new();
        h.add(&CLASS, "wm", &fields()).unwrap();
        let c: Vec<_> = (0..4).map(|g| h.capture("wm", g)).collect();
        let add = |h: &mut Harness, dst: [u8; 4], dm: [u8; 4], port: u64, pm: u64, prio, g| {
            let r = rule(vec![bin(&dst), int(port)], vec![bin(&dm), int(pm)], prio, g);
            h.command("wm", "add", &r).unwrap();
        };
        add(&mut h, [10, 0, 0, 0], [255, 0, 0, 0], 0, 0, 10, 1);
        add(&mut h, [10, 1, 0, 0], [255, 255, 0, 0], 0, 0, 10, 1);
        add(&mut h, [10, 1, 2, 0], [255, 255, 255, 0], 0, 0, 10, 1);
        add(&mut h, [10, 1, 2, 3], [255, 255, 255, 255], 0, 0, 10, 1);
        let ps: Vec<_> = (0..4).map(|_| pkt([10, 1, 2, 3], 9)).collect();
        let port = |h: &mut Harness, p: u64, prio, g| add(h, [0; 4], [0; 4], p, 0xffff, prio, g);
        // The matching rule (50) first, then a lower one: the tuple's maximum stays 50.
        port(&mut h, 9, 50, 2);
        port(&mut h, 8, 1, 3);
        h.inject("wm", 0, &ps);
        assert_eq!(c[2].take_data(), ps);
        // The maximum lowered by a replacement (50 -> 30) is found among the others (40).
        port(&mut h, 7, 40, 3);
        port(&mut h, 9, 30, 2);
        h.inject("wm", 0, &ps);
        assert_eq!(c[2].take_data(), ps);
        port(&mut h, 9, 5, 2);
        h.inject("wm", 0, &ps);
        assert_eq!(c[1].take_data(), ps);
        // Replacing a rule below the maximum (40) leaves it.
        port(&mut h, 8, 2, 3);
        port(&mut h, 9, 35, 2);
        h.inject("wm", 0, &ps);
        assert_eq!(c[2].take_data(), ps);
        assert!(c[0].is_empty() && c[3].is_empty());
    }

    #[test]
    fn values_are_written_when_the_rule_gate_is_not_the_default() {
        let mut h = Harness::new();
        let arg = Value::map()
            .with("fields", Value::List(vec![off(30, 4)]))
            .with("values", Value::List(vec![off(26, 4)]))
            .with("entries", 3);
        h.add(&CLASS, "wm", &arg).unwrap();
        h.command("wm", "set_default_gate", &Value::map().with("gate", 0))
            .unwrap();
        let add = |dst: [u8; 4], gate: u64, v: Value| {
            Value::map()
                .with("gate", gate)
                .with("priority", 1)
                .with("values", Value::List(vec![bin(&dst)]))
                .with("masks", Value::List(vec![bin(&[0xff; 4])]))
                .with("valuesv", Value::List(vec![v]))
        };
        // value_int in host order (the fork): 0x0a000063 is written as 63 00 00 0a.
        h.command("wm", "add", &add([10, 0, 0, 2], 1, int(0x0a00_0063)))
            .unwrap();
        h.command("wm", "add", &add([10, 0, 0, 3], 1, bin(&[1, 2, 3, 4])))
            .unwrap();
        // A rule whose gate is the default gate writes nothing (as the fork).
        h.command("wm", "add", &add([10, 0, 0, 4], 0, bin(&[9, 9, 9, 9])))
            .unwrap();
        let e = h
            .command("wm", "add", &add([10, 0, 0, 5], 1, int(1)))
            .unwrap_err();
        assert_eq!(e.code, libc::ENOSPC, "{}", e.msg);
        // `entries` limits each mask (the fork gives each tuple its own table of that size):
        // a rule with another mask still fits, a fourth of that mask too.
        let other = |dst: [u8; 4], m: [u8; 4]| {
            add(dst, 2, int(7)).with("masks", Value::List(vec![bin(&m)]))
        };
        for d in 1..=3u8 {
            h.command("wm", "add", &other([10, 0, d, 0], [0xff, 0xff, 0xff, 0]))
                .unwrap();
        }
        let e = h
            .command("wm", "add", &other([10, 0, 4, 0], [0xff, 0xff, 0xff, 0]))
            .unwrap_err();
        assert_eq!(e.code, libc::ENOSPC, "{}", e.msg);
        assert!(
            e.msg.contains("mask's table is full (3 entries"),
            "{}",
            e.msg
        );
        for d in 1..=3u8 {
            h.command(
                "wm",
                "delete",
                &Value::map()
                    .with("values", Value::List(vec![bin(&[10, 0, d, 0])]))
                    .with("masks", Value::List(vec![bin(&[0xff, 0xff, 0xff, 0])])),
            )
            .unwrap();
        }
        let e = h
            .command(
                "wm",
                "add",
                &add([10, 0, 0, 2], 1, int(1)).with("valuesv", Value::List(vec![])),
            )
            .unwrap_err();
        assert!(e.msg.contains("valuesv"), "{}", e.msg);
        let (g0, g1) = (h.capture("wm", 0), h.capture("wm", 1));
        let ps = [
            pkt([10, 0, 0, 2], 1),
            pkt([10, 0, 0, 3], 1),
            pkt([10, 0, 0, 4], 1),
            pkt([10, 0, 0, 9], 1),
        ];
        h.inject("wm", 0, &ps);
        let mut w2 = ps[0].clone();
        w2[26..30].copy_from_slice(&[0x63, 0, 0, 0x0a]);
        let mut w3 = ps[1].clone();
        w3[26..30].copy_from_slice(&[1, 2, 3, 4]);
        let written = vec![w2, w3];
        assert_eq!(g1.take_data(), written);
        assert_eq!(g0.take_data(), vec![ps[2].clone(), ps[3].clone()]);
        // get_initial_arg and the runtime config carry the values; a fresh module restores.
        let init = h.command("wm", "get_initial_arg", &Value::map()).unwrap();
        assert_eq!(init.get("values").unwrap(), &Value::List(vec![off(26, 4)]));
        assert_eq!(init.get("entries").and_then(Value::as_i64), Some(3));
        let cfg = h
            .command("wm", "get_runtime_config", &Value::map())
            .unwrap();
        let mut f = Harness::new();
        f.add(&CLASS, "wm", &arg).unwrap();
        f.command("wm", "set_runtime_config", &cfg).unwrap();
        let (f0, f1) = (f.capture("wm", 0), f.capture("wm", 1));
        f.inject("wm", 0, &ps);
        assert_eq!(f1.take_data(), written);
        assert_eq!(f0.len(), 2);
    }

    #[test]
    fn highest_priority_wins_and_defaults_apply() {
        let mut h = Harness::new();
        h.add(&CLASS, "wm", &fields()).unwrap();
        let c: Vec<_> = (0..4).map(|g| h.capture("wm", g)).collect();
        // 172.0.0.0/8 any port -> 1 (prio 1); port 80 any address -> 2 (prio 0);
        // 172.12.55.99 port 80 -> 3 (prio 5).
        h.command(
            "wm",
            "add",
            &rule(
                vec![bin(&[172, 0, 0, 0]), int(0)],
                vec![bin(&[255, 0, 0, 0]), int(0)],
                1,
                1,
            ),
        )
        .unwrap();
        h.command(
            "wm",
            "add",
            &rule(vec![int(0), int(80)], vec![int(0), int(0xffff)], 0, 2),
        )
        .unwrap();
        h.command(
            "wm",
            "add",
            &rule(
                vec![bin(&[172, 12, 55, 99]), int(80)],
                vec![int(0xffff_ffff), int(0xffff)],
                5,
                3,
            ),
        )
        .unwrap();
        let (a, b, x, y) = (
            pkt([172, 1, 1, 1], 80),
            pkt([10, 0, 0, 1], 80),
            pkt([172, 12, 55, 99], 80),
            pkt([10, 0, 0, 1], 81),
        );
        h.inject(
            "wm",
            0,
            &[a.clone(), b.clone(), x.clone(), y.clone(), a[..35].to_vec()],
        );
        assert_eq!(c[1].take_data(), vec![a.clone()]);
        assert_eq!(c[2].take_data(), vec![b.clone()]);
        assert_eq!(c[3].take_data(), vec![x.clone()]);
        assert_eq!(h.drops("wm", "no_match"), 1);
        assert_eq!(h.drops("wm", "too_short"), 1);
        h.command("wm", "set_default_gate", &Value::map().with("gate", 0))
            .unwrap();
        h.inject("wm", 0, &[y.clone(), a[..35].to_vec()]);
        assert_eq!(c[0].take_data(), vec![y.clone(), a[..35].to_vec()]);
        // Deleting the top rule exposes the next one; equal priorities: later mask wins.
        h.command(
            "wm",
            "delete",
            &Value::map()
                .with(
                    "values",
                    Value::List(vec![bin(&[172, 12, 55, 99]), int(80)]),
                )
                .with("masks", Value::List(vec![int(0xffff_ffff), int(0xffff)])),
        )
        .unwrap();
        h.inject("wm", 0, std::slice::from_ref(&x));
        assert_eq!(c[1].take_data(), vec![x.clone()]);
        h.command(
            "wm",
            "add",
            &rule(vec![int(0), int(80)], vec![int(0), int(0xffff)], 1, 8192),
        )
        .unwrap();
        h.inject("wm", 0, std::slice::from_ref(&x));
        assert_eq!(
            h.drops("wm", "rule_drop"),
            1,
            "priority-1 tie with 172/8: the port mask, added later, wins"
        );
        h.command(
            "wm",
            "add",
            &rule(vec![int(0), int(80)], vec![int(0), int(0xfff0)], 1, 3),
        )
        .unwrap();
        h.inject("wm", 0, std::slice::from_ref(&x));
        assert_eq!(
            c[3].take_data(),
            vec![x.clone()],
            "the newest mask wins the tie"
        );
        h.command("wm", "clear", &Value::map()).unwrap();
        h.inject("wm", 0, std::slice::from_ref(&x));
        assert_eq!(c[0].take_data(), vec![x]);
    }

    #[test]
    fn runtime_config_round_trips_and_errors_name_fields() {
        let mut h = Harness::new();
        h.add(&CLASS, "wm", &fields()).unwrap();
        let r1 = rule(
            vec![bin(&[10, 0, 0, 0]), bin(&[0, 0])],
            vec![bin(&[255, 0, 0, 0]), bin(&[0, 0])],
            3,
            1,
        );
        let r2 = rule(
            vec![bin(&[0, 0, 0, 0]), bin(&[0, 80])],
            vec![bin(&[0, 0, 0, 0]), bin(&[255, 255])],
            1,
            2,
        );
        h.command("wm", "add", &r1).unwrap();
        h.command("wm", "add", &r2).unwrap();
        let cfg = h
            .command("wm", "get_runtime_config", &Value::map())
            .unwrap();
        let want = Value::map()
            .with("default_gate", 8192u64)
            .with("rules", Value::List(vec![r2.clone(), r1.clone()]));
        assert_eq!(cfg, want);
        h.command("wm", "clear", &Value::map()).unwrap();
        h.command("wm", "set_runtime_config", &cfg).unwrap();
        assert_eq!(
            h.command("wm", "get_runtime_config", &Value::map())
                .unwrap(),
            want
        );
        assert_eq!(
            h.command("wm", "get_initial_arg", &Value::map()).unwrap(),
            fields()
        );
        let e = h
            .command(
                "wm",
                "add",
                &rule(vec![int(1), int(0)], vec![int(0), int(0)], 0, 0),
            )
            .unwrap_err();
        assert!(e.msg.contains("values[0]: invalid pair"), "{}", e.msg);
        let e = h
            .command("wm", "add", &rule(vec![int(0)], vec![int(0), int(0)], 0, 0))
            .unwrap_err();
        assert!(e.msg.contains("values"), "{}", e.msg);
        let e = h
            .command(
                "wm",
                "add",
                &rule(vec![int(0), int(1 << 16)], vec![int(0), int(0)], 0, 0),
            )
            .unwrap_err();
        assert!(e.msg.contains("values[1].value_int"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "x",
                &Value::map().with("fields", Value::List(vec![off(-1, 2)])),
            )
            .unwrap_err();
        assert!(e.msg.contains("fields[0].offset"), "{}", e.msg);
        // Too many masks.
        for i in 0..MAX_TUPLES as u64 - 2 {
            h.command(
                "wm",
                "add",
                &rule(vec![int(0), int(0)], vec![int(i + 1), int(0)], 0, 0),
            )
            .unwrap();
        }
        let e = h
            .command(
                "wm",
                "add",
                &rule(vec![int(0), int(0)], vec![int(999), int(0)], 0, 0),
            )
            .unwrap_err();
        assert!(e.msg.contains("masks"), "{}", e.msg);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn agrees_with_a_linear_scan(
            masks in proptest::collection::vec(any::<[u8; 3]>(), 1..6),
            rules in proptest::collection::vec((any::<prop::sample::Index>(), any::<[u8; 3]>(), -3i64..4, 0u16..4), 0..40),
            dels in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            pkts in proptest::collection::vec((any::<[u8; 3]>(), any::<prop::sample::Index>(), any::<bool>()), 1..80),
        ) {
            // Fields: byte 0 and bytes 2..4 (a 3-byte key); few distinct masks so ties happen.
            let mut h = Harness::new();
            h.add(&CLASS, "wm", &Value::map().with("fields", Value::List(vec![off(0, 1), off(2, 2)]))).unwrap();
            h.command("wm", "set_default_gate", &Value::map().with("gate", 9)).unwrap();
            let caps: Vec<_> = (0..10).map(|g| h.capture("wm", g)).collect();
            // Reference: rules with (mask, value, priority, gate, mask creation order).
            let mut reference: Vec<([u8; 3], [u8; 3], i64, u16)> = Vec::new();
            let mut mask_order: Vec<[u8; 3]> = Vec::new();
            let mut added: Vec<([u8; 3], [u8; 3])> = Vec::new();
            let and = |v: [u8; 3], m: [u8; 3]| [v[0] & m[0], v[1] & m[1], v[2] & m[2]];
            let spec = |v: [u8; 3], m: [u8; 3]| (vec![bin(&v[..1]), bin(&v[1..])], vec![bin(&m[..1]), bin(&m[1..])]);
            for (mi, v, p, g) in &rules {
                let m = masks[mi.index(masks.len())];
                let v = and(*v, m);
                let (vs, ms) = spec(v, m);
                h.command("wm", "add", &rule(vs, ms, *p, *g as u64)).unwrap();
                if !mask_order.contains(&m) {
                    mask_order.push(m);
                }
                reference.retain(|r| (r.0, r.1) != (m, v));
                reference.push((m, v, *p, *g));
                added.push((m, v));
            }
            for d in &dels {
                if added.is_empty() { break; }
                let (m, v) = added[d.index(added.len())];
                let (vs, ms) = spec(v, m);
                let had = reference.iter().any(|r| (r.0, r.1) == (m, v));
                let r = h.command("wm", "delete", &Value::map().with("values", Value::List(vs)).with("masks", Value::List(ms)));
                prop_assert_eq!(r.is_ok(), had);
                reference.retain(|r| (r.0, r.1) != (m, v));
                if !reference.iter().any(|r| r.0 == m) {
                    mask_order.retain(|x| *x != m);
                }
            }
            let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 10];
            let mut input = Vec::new();
            for (v, pick, from_rule) in &pkts {
                let v = if *from_rule && !added.is_empty() {
                    let (m, rv) = added[pick.index(added.len())];
                    [rv[0] | (v[0] & !m[0]), rv[1] | (v[1] & !m[1]), rv[2] | (v[2] & !m[2])]
                } else { *v };
                let mut p = vec![0u8; 6];
                p[0] = v[0];
                p[2..4].copy_from_slice(&v[1..]);
                let order = |m: &[u8; 3]| mask_order.iter().position(|x| x == m).unwrap();
                let g = reference
                    .iter()
                    .filter(|r| and(v, r.0) == r.1)
                    .max_by(|a, b| a.2.cmp(&b.2).then(order(&a.0).cmp(&order(&b.0))))
                    .map(|r| r.3)
                    .unwrap_or(9);
                want[g as usize].push(p.clone());
                input.push(p);
            }
            h.inject("wm", 0, &input);
            for g in 0..10 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone());
            }
        }
    }

    /// 11-byte keys: an interface byte, two 4-byte fields and a 2-byte one.
    const BIG_MASKS: [[u8; 11]; 3] = [
        // 72 bits: a two-word key.
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0],
        // 56 bits: folded into one word.
        [0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        // A few distinct values: a small table.
        [0, 0xf0, 0, 0, 0, 0, 0, 0, 0, 0, 0x03],
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]

        /// Tuples of hundreds to thousands of rules (large enough for independent slots,
        /// the per-batch prefetch and the shared-bits test; mostly one interface value per
        /// mask, some the other) agree with a linear scan, through deletes.
        #[test]
        fn large_tuples_agree_with_a_linear_scan(
            seed in any::<u64>(),
            n in 1200usize..2500,
            other_iface in 0u32..20,
            pkts in proptest::collection::vec((any::<[u8; 11]>(), any::<prop::sample::Index>(), 0u8..3), 1..150),
        ) {
            let mut rng = crate::util::FastRng::new(seed);
            let mut h = Harness::new();
            h.add(&CLASS, "wm", &Value::map().with("fields", Value::List(vec![off(0, 1), off(1, 4), off(5, 4), off(9, 2)]))).unwrap();
            h.command("wm", "set_default_gate", &Value::map().with("gate", 9)).unwrap();
            let caps: Vec<_> = (0..10).map(|g| h.capture("wm", g)).collect();
            let and = |v: [u8; 11], m: [u8; 11]| -> [u8; 11] { std::array::from_fn(|i| v[i] & m[i]) };
            let spec = |v: &[u8; 11], m: &[u8; 11]| {
                let s = |b: &[u8; 11]| vec![bin(&b[..1]), bin(&b[1..5]), bin(&b[5..9]), bin(&b[9..])];
                (s(v), s(m))
            };
            let mut reference: Vec<([u8; 11], [u8; 11], i64, u16)> = Vec::new();
            let mut mask_order: Vec<[u8; 11]> = Vec::new();
            for i in 0..n {
                let mi = rng.below(3) as usize;
                let m = BIG_MASKS[mi];
                let mut v = [0u8; 11];
                for b in v.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                v[0] = if rng.below(20) < other_iface as u64 { 2 - mi as u8 % 2 } else { 1 + mi as u8 % 2 };
                let v = and(v, m);
                let p = rng.below(5) as i64 - 2;
                let g = (i % 4) as u16;
                let (vs, ms) = spec(&v, &m);
                h.command("wm", "add", &rule(vs, ms, p, g as u64)).unwrap();
                if !mask_order.contains(&m) {
                    mask_order.push(m);
                }
                reference.retain(|r| (r.0, r.1) != (m, v));
                reference.push((m, v, p, g));
            }
            // Deletes a tenth of the rules (never all of a mask's: the order stays).
            for _ in 0..n / 10 {
                let i = rng.below(reference.len() as u64) as usize;
                let (m, v, _, _) = reference[i];
                if reference.iter().filter(|r| r.0 == m).count() < 2 {
                    continue;
                }
                let (vs, ms) = spec(&v, &m);
                h.command("wm", "delete", &Value::map().with("values", Value::List(vs)).with("masks", Value::List(ms))).unwrap();
                reference.remove(i);
            }
            let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 10];
            let mut input = Vec::new();
            for (v, pick, kind) in &pkts {
                let v = match kind {
                    0 => *v,
                    _ => {
                        let (m, rv, _, _) = reference[pick.index(reference.len())];
                        let mut x: [u8; 11] = std::array::from_fn(|i| rv[i] | (v[i] & !m[i]));
                        if *kind == 2 {
                            x[0] ^= 3; // the other interface: usually no rule
                        }
                        x
                    }
                };
                let order = |m: &[u8; 11]| mask_order.iter().position(|x| x == m).unwrap();
                let g = reference
                    .iter()
                    .filter(|r| and(v, r.0) == r.1)
                    .max_by(|a, b| a.2.cmp(&b.2).then(order(&a.0).cmp(&order(&b.0))))
                    .map(|r| r.3)
                    .unwrap_or(9);
                let mut p = v.to_vec();
                p.resize(14, 0);
                want[g as usize].push(p.clone());
                input.push(p);
            }
            h.inject("wm", 0, &input);
            for g in 0..10 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone());
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        /// Mask (index into MASKS), value bytes, priority, gate.
        Add(usize, [u8; 12], i64, u16),
        /// The rule added at this position (modulo the number added), or a random one.
        Delete(prop::sample::Index, bool),
        Clear,
    }

    /// 12-byte keys (two words): masks of at most 64 bits (tables keyed by folded keys),
    /// the whole key (not foldable) and overlapping ones.
    const MASKS: [[u8; 12]; 6] = [
        [0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0x0f],
        [0xff; 12],
        [0xf0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0],
        [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x01,
        ],
        [
            0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ];

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => (0..MASKS.len(), any::<[u8; 12]>(), -2i64..3, 0u16..4)
                .prop_map(|(m, v, p, g)| Step::Add(m, v, p, g)),
            3 => (any::<prop::sample::Index>(), proptest::bool::weighted(0.2))
                .prop_map(|(i, random)| Step::Delete(i, random)),
            1 => Just(Step::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Two-word keys through add / delete / clear: after every command each packet gets
        /// the gate of the best rule of a plain list (highest priority, then the mask
        /// created last), and get_runtime_config lists the rules of the list.
        #[test]
        fn wide_keys_agree_with_a_linear_model_through_commands(
            steps in proptest::collection::vec(step(), 1..24),
            pkts in proptest::collection::vec((any::<[u8; 12]>(), any::<prop::sample::Index>(), any::<bool>()), 1..32),
        ) {
            let mut h = Harness::new();
            h.add(&CLASS, "wm", &Value::map().with("fields", Value::List(vec![off(0, 8), off(8, 4)]))).unwrap();
            h.command("wm", "set_default_gate", &Value::map().with("gate", 9)).unwrap();
            let caps: Vec<_> = (0..10).map(|g| h.capture("wm", g)).collect();
            let and = |v: [u8; 12], m: [u8; 12]| -> [u8; 12] { std::array::from_fn(|i| v[i] & m[i]) };
            let spec = |v: &[u8; 12], m: &[u8; 12]| {
                (vec![bin(&v[..8]), bin(&v[8..])], vec![bin(&m[..8]), bin(&m[8..])])
            };
            // (mask, value, priority, gate); masks in creation order.
            let mut model: Vec<([u8; 12], [u8; 12], i64, u16)> = Vec::new();
            let mut order: Vec<[u8; 12]> = Vec::new();
            let mut added: Vec<([u8; 12], [u8; 12])> = Vec::new();
            for st in steps {
                match st {
                    Step::Add(mi, v, p, g) => {
                        let m = MASKS[mi];
                        let v = and(v, m);
                        let (vs, ms) = spec(&v, &m);
                        h.command("wm", "add", &rule(vs, ms, p, g as u64)).unwrap();
                        if !order.contains(&m) {
                            order.push(m);
                        }
                        model.retain(|r| (r.0, r.1) != (m, v));
                        model.push((m, v, p, g));
                        added.push((m, v));
                    }
                    Step::Delete(i, random) => {
                        let (m, v) = if added.is_empty() || random {
                            (MASKS[i.index(MASKS.len())], and([0x5a; 12], MASKS[i.index(MASKS.len())]))
                        } else {
                            added[i.index(added.len())]
                        };
                        let (vs, ms) = spec(&v, &m);
                        let had = model.iter().any(|r| (r.0, r.1) == (m, v));
                        let r = h.command("wm", "delete", &Value::map().with("values", Value::List(vs)).with("masks", Value::List(ms)));
                        prop_assert_eq!(r.is_ok(), had);
                        model.retain(|r| (r.0, r.1) != (m, v));
                        if !model.iter().any(|r| r.0 == m) {
                            order.retain(|x| *x != m);
                        }
                    }
                    Step::Clear => {
                        h.command("wm", "clear", &Value::map()).unwrap();
                        model.clear();
                        order.clear();
                    }
                }
                let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 10];
                let mut input = Vec::new();
                for (v, pick, from_rule) in &pkts {
                    let v = if *from_rule && !added.is_empty() {
                        let (m, rv) = added[pick.index(added.len())];
                        std::array::from_fn(|i| rv[i] | (v[i] & !m[i]))
                    } else {
                        *v
                    };
                    let pos = |m: &[u8; 12]| order.iter().position(|x| x == m).unwrap();
                    let g = model
                        .iter()
                        .filter(|r| and(v, r.0) == r.1)
                        .max_by(|a, b| a.2.cmp(&b.2).then(pos(&a.0).cmp(&pos(&b.0))))
                        .map_or(9, |r| r.3);
                    want[g as usize].push(v.to_vec());
                    input.push(v.to_vec());
                }
                h.inject("wm", 0, &input);
                for (g, c) in caps.iter().enumerate() {
                    prop_assert_eq!(c.take_data(), want[g].clone(), "gate {}", g);
                }
                let cfg = h.command("wm", "get_runtime_config", &Value::map()).unwrap();
                let mut listed: Vec<Value> = match cfg.get("rules") {
                    Some(Value::List(l)) => l.clone(),
                    _ => Vec::new(),
                };
                let mut expected: Vec<Value> = model
                    .iter()
                    .map(|(m, v, p, g)| {
                        Value::map()
                            .with("gate", *g as u64)
                            .with("priority", *p)
                            .with("values", Value::List(spec(v, m).0))
                            .with("masks", Value::List(spec(v, m).1))
                    })
                    .collect();
                let key = |r: &Value| format!("{r:?}");
                listed.sort_by_key(key);
                expected.sort_by_key(key);
                prop_assert_eq!(listed, expected);
            }
        }
    }
}

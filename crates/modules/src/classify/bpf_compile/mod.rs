//! BPF filters merged into one decision structure.
//!
//! Each decoded classic-BPF program is executed symbolically once, when installed: every path
//! from the first instruction to a return becomes a list of conditions on packet *fields*
//! (a load at a fixed offset, or past the IPv4 header through the `ldxb 4*([k]&0xf)` idiom,
//! optionally ANDed with a constant; or the packet length). A path accepts when it ends in
//! a non-zero return, and it is taken exactly when its conditions hold and all its loads are
//! inside the packet, because a program's control flow depends on nothing else.
//!
//! All filters' accepting paths are then indexed together: each path that requires some
//! field to equal a constant is filed under its rarest such (field, constant) pair in a
//! per-field hash table, so a packet reads each key field once, looks its value up, and only
//! checks the few paths listed there (plus paths without any equality). Lists are in filter
//! order and searching stops once no remaining candidate can come before the best match: the
//! result is always the first filter (in priority order) whose program returns non-zero,
//! as a scan running every program would find. Programs the analysis does not model (loads
//! indexed by computed values, arithmetic on packet data, too many paths) keep being run by
//! the interpreter, in their place in the order.
use std::collections::HashMap;

mod analyse;
mod tables;

pub use analyse::*;
pub use tables::*;

use super::cbpf::{alu, exec, Op, AND};
use bessemer_core::MAX_BURST;

/// All installed filters as one structure (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// Every field any path reads, evaluated once per packet.
    fields: Vec<Field>,
    /// How to compute `fields`.
    plan: FieldPlan,
    /// Accepting paths, grouped in runs (one per key table value, then the unkeyed ones),
    /// each run in filter order: a lookup yields a range of this array, not a list of ids.
    paths: Vec<Path>,
    conds: Vec<Cond>,
    keys: Vec<KeyTable>,
    /// Each key table in the branch-free form the batch evaluation uses, where it fits.
    flat: Vec<Option<FlatTable>>,
    /// The run of paths without an equality to file them under.
    unkeyed: (u32, u32),
    /// Filters the interpreter runs, in order.
    slow: Vec<u32>,
}

/// A path before it is laid out: its filter, needed fields and conditions.
struct Pending {
    filter: u32,
    need: u64,
    conds: Vec<Cond>,
}

impl Merged {
    /// Merges filters given in priority order as their analysis (None: interpreted).
    pub fn build<'a>(filters: impl IntoIterator<Item = Option<&'a [PathSpec]>>) -> Merged {
        let mut m = Merged::default();
        let mut field_ix: HashMap<Field, u8> = HashMap::new();
        let mut accepted: Vec<(u32, &'a PathSpec)> = Vec::new();
        for (fi, a) in filters.into_iter().enumerate() {
            let fi = fi as u32;
            let Some(paths) = a else {
                m.slow.push(fi);
                continue;
            };
            // All of a filter's fields get an index, or it is interpreted.
            let mut new: Vec<Field> = Vec::new();
            for p in paths {
                // Loads first, each unmasked form before its masked ones: a field is then
                // always computed after the fields its value is derived from.
                for f in p.loads.iter().copied().chain(p.conds.iter().map(|c| c.0)) {
                    for f in [f.unmasked(), f] {
                        if !field_ix.contains_key(&f) && !new.contains(&f) {
                            new.push(f);
                        }
                    }
                }
            }
            if field_ix.len() + new.len() > MAX_FIELDS {
                m.slow.push(fi);
                continue;
            }
            for f in new {
                field_ix.insert(f, m.fields.len() as u8);
                m.fields.push(f);
            }
            accepted.extend(paths.iter().map(|p| (fi, p)));
        }
        // How many paths require each (field, value): a path is filed under its rarest.
        let mut count: HashMap<(Field, u32), u32> = HashMap::new();
        for (_, p) in &accepted {
            for &(f, t, e) in &p.conds {
                if let (Test::Eq(k), true) = (t, e) {
                    *count.entry((f, k)).or_default() += 1;
                }
            }
        }
        // Paths in filter order, by key field and value (or unkeyed).
        let mut by_key: HashMap<u8, HashMap<u32, Vec<Pending>>> = HashMap::new();
        let mut unkeyed: Vec<Pending> = Vec::new();
        'paths: for (fi, p) in accepted {
            let mut need = 0u64;
            for f in p.loads.iter().chain(p.conds.iter().map(|c| &c.0)) {
                need |= 1 << field_ix[&f.unmasked()];
            }
            let mut key: Option<(Field, u32)> = None;
            for &(f, t, expect) in &p.conds {
                if let (Test::Eq(k), true) = (t, expect) {
                    if key.is_none_or(|best| count[&(f, k)] <= count[&best]) {
                        key = Some((f, k));
                    }
                }
            }
            // A field the path requires to equal a constant decides every other test of it
            // here, before or after the equality: those conditions are dropped, or the path
            // with them if one fails (it can never be taken). The key's own equality is what
            // the lookup checks; the other equalities stay, once each.
            let mut known: Vec<(Field, u32)> = key.into_iter().collect();
            for &(f, t, expect) in &p.conds {
                if let (Test::Eq(k), true) = (t, expect) {
                    match known.iter().find(|kv| kv.0 == f) {
                        Some(&(_, c)) if c != k => continue 'paths,
                        Some(_) => {}
                        None => known.push((f, k)),
                    }
                }
            }
            let mut conds = Vec::new();
            for &(f, t, expect) in &p.conds {
                let equality = matches!((t, expect), (Test::Eq(_), true));
                if key.is_some_and(|(kf, _)| kf == f) && equality {
                    continue;
                }
                if !equality {
                    match known.iter().find(|kv| kv.0 == f) {
                        Some(&(_, c)) if t.holds(c) == expect => continue,
                        Some(_) => continue 'paths,
                        None => {}
                    }
                }
                let c = Cond::new(field_ix[&f], t, expect);
                if !conds.contains(&c) {
                    conds.push(c);
                }
            }
            let pending = Pending {
                filter: fi,
                need,
                conds,
            };
            match key {
                Some((f, k)) => by_key
                    .entry(field_ix[&f])
                    .or_default()
                    .entry(k)
                    .or_default()
                    .push(pending),
                None => unkeyed.push(pending),
            }
        }
        for (i, f) in m.fields.iter().enumerate() {
            let i = i as u8;
            let plan = &mut m.plan;
            if f.mask != u32::MAX {
                plan.masked.push((i, field_ix[&f.unmasked()], f.mask));
                continue;
            }
            match (f.size, f.msh) {
                (0, _) => plan.len = Some(i),
                (size, None) => {
                    let at = f.xc as usize + f.off as usize;
                    plan.abs[size_class(size)].push((i, at));
                    plan.abs_bits |= 1 << i;
                    plan.abs_end = plan.abs_end.max(at + size as usize);
                }
                (size, Some(k)) => {
                    plan.ind
                        .push((i, field_ix[&Field::load(1, None, 0, k)], f.off, size));
                }
            }
        }
        // An indexed load's X is a fixed-offset byte (computed first), and a masked field
        // copies an unmasked one: masked copies of indexed loads come after those, so
        // `masked` keeps field order, in which every source precedes its copies.
        let mut fields: Vec<_> = by_key.into_iter().collect();
        fields.sort_by_key(|(f, _)| *f);
        for (f, vals) in fields {
            // The guard: the first condition of the table's first path that every path of
            // the table has.
            let all = || vals.values().flatten();
            let guard = all().next().and_then(|p0| {
                p0.conds
                    .iter()
                    .copied()
                    .find(|c| all().all(|p| p.conds.contains(c)))
            });
            let first = all().map(|p| p.filter).min().unwrap_or(0);
            let mut entries = Vec::new();
            for (v, list) in vals {
                let start = m.paths.len() as u32;
                for p in list {
                    m.push_path(p, guard);
                }
                entries.push((v, start, m.paths.len() as u32 - start));
            }
            let mut t = KeyTable::build(f, &entries);
            t.need = 1 << f;
            t.first = first;
            if let Some(g) = guard {
                t.guard = g;
                t.need |= 1 << g.field;
            }
            m.flat.push(FlatTable::build(&m, &t, &entries));
            m.keys.push(t);
        }
        let start = m.paths.len() as u32;
        for p in unkeyed {
            m.push_path(p, None);
        }
        m.unkeyed = (start, m.paths.len() as u32);
        m
    }

    /// Appends a path, without the condition `guard` its table checks before the lookup.
    fn push_path(&mut self, p: Pending, guard: Option<Cond>) {
        let start = self.conds.len() as u32;
        self.conds
            .extend(p.conds.into_iter().filter(|c| Some(*c) != guard));
        self.paths.push(Path {
            filter: p.filter,
            need: p.need,
            conds: (start, self.conds.len() as u32),
        });
    }

    /// Paths `start..end` for one packet whose fields are `valid` and read by `value`: the
    /// first path that holds and comes before `best`, or `best`.
    #[inline(always)]
    fn scan(&self, start: u32, end: u32, best: u32, valid: u64, value: impl Fn(u8) -> u32) -> u32 {
        for path in &self.paths[start as usize..end as usize] {
            if path.filter >= best {
                break;
            }
            // Every condition is evaluated (no early exit): which one fails varies from
            // packet to packet, and a mispredicted exit costs more than the few conditions a
            // path has.
            let holds = path.need & !valid == 0
                && self.conds[path.conds.0 as usize..path.conds.1 as usize]
                    .iter()
                    .fold(true, |ok, c| ok & c.holds_for(value(c.field)));
            if holds {
                return path.filter;
            }
        }
        best
    }

    /// Key table `k` for one packet (as [`Merged::scan`]): the run its key value names.
    #[inline(always)]
    fn search_table(&self, k: &KeyTable, best: u32, valid: u64, value: impl Fn(u8) -> u32) -> u32 {
        // One branch for the three reasons to skip the table (which of them holds varies
        // from packet to packet; the non-short-circuit `&` keeps it one).
        if !((k.need & !valid == 0) & k.guard.holds_for(value(k.guard.field)) & (k.first < best)) {
            return best;
        }
        let (start, len) = k.get(value(k.field));
        self.scan(start, start + len, best, valid, value)
    }

    /// The interpreted filters before `best` for packet `p`: the first that accepts, or
    /// `best`.
    #[inline(always)]
    fn run_slow<'p>(&self, best: u32, p: &[u8], progs: impl Fn(u32) -> &'p [Op]) -> u32 {
        for &fi in &self.slow {
            if fi >= best {
                break;
            }
            if exec(progs(fi), p) != 0 {
                return fi;
            }
        }
        best
    }

    /// The first filter (index in priority order) whose program accepts `p`; `progs(i)` is
    /// filter i's decoded program, for the interpreted ones.
    #[inline(always)]
    pub fn first_match<'p>(&self, p: &[u8], progs: impl Fn(u32) -> &'p [Op]) -> Option<u32> {
        self.first_match_with(&mut [0; MAX_FIELDS], p, progs)
    }

    /// As [`Merged::first_match`], with `vals` as scratch space (reused across packets, so
    /// it is not cleared for each: only fields found valid are read).
    #[inline(always)]
    pub fn first_match_with<'p>(
        &self,
        vals: &mut [u32; MAX_FIELDS],
        p: &[u8],
        progs: impl Fn(u32) -> &'p [Op],
    ) -> Option<u32> {
        let plan = &self.plan;
        let mut valid = 0u64;
        if let Some(i) = plan.len {
            vals[ix(i)] = p.len() as u32;
            valid |= 1 << i;
        }
        if p.len() >= plan.abs_end {
            // Every fixed-offset load ends at or before `abs_end` (FieldPlan), which this
            // packet reaches.
            for &(i, at) in &plan.abs[0] {
                // SAFETY: `at + 1 <= abs_end <= p.len()` (above).
                vals[ix(i)] = unsafe { be_at::<1>(p, at) };
            }
            for &(i, at) in &plan.abs[1] {
                // SAFETY: `at + 2 <= abs_end <= p.len()` (above).
                vals[ix(i)] = unsafe { be_at::<2>(p, at) };
            }
            for &(i, at) in &plan.abs[2] {
                // SAFETY: `at + 4 <= abs_end <= p.len()` (above).
                vals[ix(i)] = unsafe { be_at::<4>(p, at) };
            }
            valid |= plan.abs_bits;
        } else {
            for (c, size) in [(0, 1), (1, 2), (2, 4)] {
                for &(i, at) in &plan.abs[c] {
                    if let Some(v) = be(p, at, size) {
                        vals[ix(i)] = v;
                        valid |= 1 << i;
                    }
                }
            }
        }
        for &(i, x, off, size) in &plan.ind {
            if valid & (1 << x) != 0 {
                let at = ((vals[ix(x)] & 0x0f) << 2) as usize + off as usize;
                if let Some(v) = be(p, at, size) {
                    vals[ix(i)] = v;
                    valid |= 1 << i;
                }
            }
        }
        for &(i, j, mask) in &plan.masked {
            if valid & (1 << j) != 0 {
                vals[ix(i)] = vals[ix(j)] & mask;
                valid |= 1 << i;
            }
        }
        let value = |f: u8| vals[ix(f)];
        let mut best = u32::MAX;
        for k in &self.keys {
            best = self.search_table(k, best, valid, value);
        }
        best = self.scan(self.unkeyed.0, self.unkeyed.1, best, valid, value);
        best = self.run_slow(best, p, &progs);
        (best != u32::MAX).then_some(best)
    }

    /// [`Merged::first_match`] for every packet of a batch (at most `MAX_BURST`): `out[i]`
    /// is the first accepting filter of `pkts[i]`, or `u32::MAX`. Each step of the per-packet
    /// evaluation (a field's load, a table's guard and lookup) runs over the whole batch
    /// before the next, so the structure is walked once per batch, not once per packet.
    /// `pkts` is scratch too: entries of packets too short for the fixed-offset loads are
    /// replaced.
    pub fn first_match_batch<'p>(
        &self,
        cols: &mut Columns,
        pkts: &mut [&[u8]],
        progs: impl Fn(u32) -> &'p [Op],
        out: &mut [u32; MAX_BURST],
    ) {
        debug_assert!(
            pkts.len() <= MAX_BURST,
            "a batch holds at most MAX_BURST packets"
        );
        let n = pkts.len().min(MAX_BURST);
        let data = &mut pkts[..n];
        let plan = &self.plan;
        if plan.abs_end > PAD_LEN {
            let mut vals = [0; MAX_FIELDS];
            for (o, p) in out.iter_mut().zip(data.iter()) {
                *o = self
                    .first_match_with(&mut vals, p, &progs)
                    .unwrap_or(u32::MAX);
            }
            return;
        }
        let mut valid = plan.abs_bits;
        if let Some(i) = plan.len {
            for (v, p) in cols.vals[ix(i)].iter_mut().zip(data.iter()) {
                *v = p.len() as u32;
            }
            valid |= 1 << i;
        }
        // Packets too short for the fixed-offset loads read the pad instead; they are
        // recomputed one by one at the end.
        let mut short = 0u64;
        let mut orig: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
        for (i, d) in data.iter_mut().enumerate() {
            if d.len() < plan.abs_end {
                orig[i] = d;
                *d = &PAD;
                short |= 1 << i;
            }
        }
        let data = &*data;
        // Every fixed-offset load ends at or before `abs_end` (FieldPlan), which every
        // packet in `data` (or the pad) reaches.
        for &(i, at) in &plan.abs[0] {
            for (v, d) in cols.vals[ix(i)].iter_mut().zip(data) {
                // SAFETY: `at + 1 <= abs_end <= d.len()`: `d` is a packet that reaches
                // `abs_end` or the pad (above).
                *v = unsafe { be_at::<1>(d, at) };
            }
        }
        for &(i, at) in &plan.abs[1] {
            for (v, d) in cols.vals[ix(i)].iter_mut().zip(data) {
                // SAFETY: `at + 2 <= abs_end <= d.len()`: `d` is a packet that reaches
                // `abs_end` or the pad (above).
                *v = unsafe { be_at::<2>(d, at) };
            }
        }
        for &(i, at) in &plan.abs[2] {
            for (v, d) in cols.vals[ix(i)].iter_mut().zip(data) {
                // SAFETY: `at + 4 <= abs_end <= d.len()`: `d` is a packet that reaches
                // `abs_end` or the pad (above).
                *v = unsafe { be_at::<4>(d, at) };
            }
        }
        cols.valid[..n].fill(valid);
        // An indexed load's X is a fixed-offset byte: valid for every packet here.
        for &(i, x, off, size) in &plan.ind {
            for (p, d) in data.iter().enumerate() {
                let at = ((cols.vals[ix(x)][p] & 0x0f) << 2) as usize + off as usize;
                let v = be(d, at, size);
                cols.vals[ix(i)][p] = v.unwrap_or(0);
                cols.valid[p] |= (v.is_some() as u64) << i;
            }
        }
        for &(i, j, mask) in &plan.masked {
            for p in 0..n {
                cols.vals[ix(i)][p] = cols.vals[ix(j)][p] & mask;
                cols.valid[p] |= ((cols.valid[p] >> j) & 1) << i;
            }
        }
        let cols = &*cols;
        let best = out;
        best[..n].fill(u32::MAX);
        for (k, flat) in self.keys.iter().zip(&self.flat) {
            if let Some(flat) = flat {
                flat.search(cols, &mut best[..n]);
                continue;
            }
            for (p, b) in best[..n].iter_mut().enumerate() {
                *b = self.search_table(k, *b, cols.valid[p], |f| cols.vals[ix(f)][p]);
            }
        }
        if self.unkeyed.0 != self.unkeyed.1 {
            for (p, b) in best[..n].iter_mut().enumerate() {
                let value = |f: u8| cols.vals[ix(f)][p];
                *b = self.scan(self.unkeyed.0, self.unkeyed.1, *b, cols.valid[p], value);
            }
        }
        if !self.slow.is_empty() {
            for (b, pkt) in best[..n].iter_mut().zip(data) {
                *b = self.run_slow(*b, pkt, &progs);
            }
        }
        let mut vals = [0; MAX_FIELDS];
        while short != 0 {
            let p = short.trailing_zeros() as usize;
            short &= short - 1;
            best[p] = self
                .first_match_with(&mut vals, orig[p], &progs)
                .unwrap_or(u32::MAX);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::classify::bpf::{compile, decode, validate, Insn};
    use proptest::prelude::*;

    /// Ethernet frames: IPv4 (random IHL, protocol, fragment, addresses, ports), IPv6, ARP
    /// and tagged ones, cut at a random length.
    pub(crate) fn frame() -> impl Strategy<Value = Vec<u8>> {
        (
            prop_oneof![4 => Just(0x0800u16), 1 => Just(0x86dd), 1 => Just(0x0806), 1 => Just(0x8100)],
            prop_oneof![4 => Just(0x45u8), 1 => Just(0x46), 1 => Just(0x4f), 1 => Just(0x42)],
            prop_oneof![Just(6u8), Just(17), Just(1)],
            prop_oneof![4 => Just(0u16), 1 => Just(0x2000), 1 => Just(0x0010)],
            (0u8..3, 0u8..4),
            (0u16..4, 0u16..4),
            proptest::collection::vec(any::<u8>(), 0..40),
            prop_oneof![4 => Just(usize::MAX), 1 => 0usize..100],
        )
            .prop_map(|(ty, vihl, proto, frag, (net, host), (sp, dp), tail, cut)| {
                let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
                f.extend_from_slice(&ty.to_be_bytes());
                if ty == 0x8100 {
                    f.extend_from_slice(&[0x00, 0x05, 0x08, 0x00]);
                }
                let mut ip = vec![vihl, 0, 0, 60, 0, 1];
                ip.extend_from_slice(&frag.to_be_bytes());
                ip.extend_from_slice(&[64, proto, 0, 0, 10, net, 0, host, 10, 0, net, host]);
                ip.extend_from_slice(&(1000 + sp).to_be_bytes());
                ip.extend_from_slice(&(1000 + dp).to_be_bytes());
                ip.extend_from_slice(&tail);
                f.extend_from_slice(&ip);
                f.truncate(cut.max(1).min(f.len()));
                f
            })
    }

    /// pcap-filter expressions, some with constants drawn at random so several filters
    /// share fields and values.
    pub(crate) fn expr() -> impl Strategy<Value = String> {
        let port = || 1000u16..1004;
        prop_oneof![
            port().prop_map(|p| format!("udp dst port {p}")),
            port().prop_map(|p| format!("tcp src port {p}")),
            port().prop_map(|p| format!("port {p}")),
            (0u8..3).prop_map(|n| format!("src net 10.{n}.0.0/16 and udp")),
            (0u8..3, 0u8..4).prop_map(|(n, h)| format!("dst host 10.0.{n}.{h}")),
            (0u8..3).prop_map(|n| format!("ip and not src net 10.{n}.0.0/16")),
            port().prop_map(|p| format!("portrange {p}-{} or icmp", p + 1)),
            Just("ip".to_string()),
            Just("ip6".to_string()),
            Just("arp".to_string()),
            Just("vlan".to_string()),
            Just("ip[6:2] & 0x1fff = 0".to_string()),
            Just("tcp[13] & 2 != 0".to_string()),
            Just("udp and len > 60".to_string()),
            Just("ip[0] & 0xf > 5".to_string()),
            Just("ip[ip[0] & 3] = 0".to_string()),
        ]
    }

    fn prog_of(e: &str) -> Vec<Op> {
        let p = compile(e).unwrap();
        validate(&p).unwrap();
        decode(&p)
    }

    fn linear(progs: &[Vec<Op>], p: &[u8]) -> Option<u32> {
        progs.iter().position(|g| exec(g, p) != 0).map(|i| i as u32)
    }

    fn merged(progs: &[Vec<Op>]) -> Merged {
        let an: Vec<_> = progs.iter().map(|p| analyse(p)).collect();
        Merged::build(an.iter().map(|a| a.as_deref()))
    }

    #[test]
    fn common_filters_are_merged_not_interpreted() {
        for e in [
            "udp dst port 53",
            "src net 10.0.0.0/24 and udp",
            "tcp and src net 10.0.0.0/8",
            "portrange 50-60 or icmp",
            "vlan 5 and udp",
            "udp and len > 60",
        ] {
            assert!(analyse(&prog_of(e)).is_some(), "{e}");
        }
        let m = merged(&[prog_of("udp dst port 53"), prog_of("udp dst port 54")]);
        assert!(m.slow.is_empty() && m.unkeyed.0 == m.unkeyed.1);
        assert!(!m.flat.is_empty() && m.flat.iter().all(Option::is_some));
    }

    /// `first_match_batch`'s answers, as `first_match`'s.
    fn batch_of(m: &Merged, progs: &[Vec<Op>], pkts: &[Vec<u8>]) -> Vec<Option<u32>> {
        let mut refs: Vec<&[u8]> = pkts.iter().map(Vec::as_slice).collect();
        let mut out = [0; MAX_BURST];
        let mut cols = Box::new(Columns::new());
        m.first_match_batch(&mut cols, &mut refs, |i| &progs[i as usize], &mut out);
        out[..pkts.len()]
            .iter()
            .map(|&b| (b != u32::MAX).then_some(b))
            .collect()
    }

    /// A key value shared by more filters than a flat table's run holds keeps its table
    /// branchy; the batch answers are the same either way, and the branch-free form serves
    /// the other tables.
    #[test]
    fn long_runs_stay_branchy_and_agree() {
        let mut exprs = vec!["udp dst port 53 and src host 10.0.0.9"; FLAT_MAX_RUN + 1];
        exprs.push("udp dst port 53");
        exprs.push("src net 10.1.0.0/16 and udp");
        let progs: Vec<Vec<Op>> = exprs.iter().map(|e| prog_of(e)).collect();
        let m = merged(&progs);
        assert!(m.flat.iter().any(Option::is_none) && m.flat.iter().any(Option::is_some));
        let udp = |src: [u8; 4], dport: u16| {
            let mut f = vec![0u8; 60];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[23] = 17;
            f[26..30].copy_from_slice(&src);
            f[36..38].copy_from_slice(&dport.to_be_bytes());
            f
        };
        let pkts = vec![
            udp([10, 0, 0, 9], 53),
            udp([10, 0, 0, 8], 53),
            udp([10, 1, 2, 3], 54),
            udp([10, 2, 0, 9], 54),
            udp([10, 1, 0, 9], 53)[..30].to_vec(),
            udp([10, 1, 0, 9], 53)[..29].to_vec(),
        ];
        let want: Vec<Option<u32>> = pkts.iter().map(|p| linear(&progs, p)).collect();
        assert_eq!(want, [Some(0), Some(5), Some(6), None, Some(6), None]);
        assert_eq!(batch_of(&m, &progs, &pkts), want);
    }

    /// Constants and values around the edges the interval form wraps at.
    fn edge() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(1),
            Just(u32::MAX),
            Just(u32::MAX - 1),
            Just(0x8000_0000),
            0u32..16,
            any::<u32>(),
        ]
    }

    proptest! {
        /// The branch-free condition agrees with the test it was made from, either outcome.
        #[test]
        fn interval_conditions_agree_with_their_tests(
            kind in 0u8..4, k in edge(), v in edge(), expect in any::<bool>(),
        ) {
            let t = match kind {
                0 => Test::Eq(k),
                1 => Test::Gt(k),
                2 => Test::Ge(k),
                _ => Test::Set(k),
            };
            prop_assert_eq!(Cond::new(3, t, expect).holds_for(v), t.holds(v) == expect);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Sets of real filters: the merged structure finds the first accepting one.
        #[test]
        fn merged_filters_agree_with_a_linear_scan(
            exprs in proptest::collection::vec(expr(), 0..24),
            pkts in proptest::collection::vec(frame(), 1..32),
        ) {
            let progs: Vec<Vec<Op>> = exprs.iter().map(|e| prog_of(e)).collect();
            let m = merged(&progs);
            let mut want = Vec::new();
            for p in &pkts {
                want.push(linear(&progs, p));
                prop_assert_eq!(
                    m.first_match(p, |i| &progs[i as usize]),
                    linear(&progs, p),
                    "{:?}", exprs
                );
            }
            prop_assert_eq!(batch_of(&m, &progs, &pkts), want, "{:?}", exprs);
        }

        /// Random valid programs, alone and after a filter that rarely matches: the merged
        /// form accepts exactly what the interpreter accepts.
        #[test]
        fn random_programs_agree_with_the_interpreter(
            prog in proptest::collection::vec(
                (
                    prop::sample::select(vec![
                        0x20u16, 0x28, 0x30, 0x40, 0x48, 0x50, 0x80, 0x81, 0x00, 0x01,
                        0x60, 0x61, 0xb1, 0x02, 0x03, 0x04, 0x14, 0x24, 0x34, 0x3c, 0x44,
                        0x54, 0x5c, 0x64, 0x74, 0x84, 0x94, 0xa4, 0x05, 0x15, 0x15, 0x15,
                        0x25, 0x2d, 0x35, 0x45, 0x1d, 0x06, 0x16, 0x07, 0x87,
                    ]),
                    0u8..4,
                    0u8..4,
                    prop_oneof![0u32..40, Just(0x0800), Just(0x45), Just(0xf), any::<u32>()],
                ),
                1..24,
            ),
            pkts in proptest::collection::vec(frame(), 1..16),
        ) {
            let mut prog: Vec<Insn> = prog
                .into_iter()
                .map(|(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect();
            prog.push(Insn { code: 0x16, jt: 0, jf: 0, k: 0 });
            let n = prog.len();
            for (pc, i) in prog.iter_mut().enumerate() {
                let room = (n - pc - 1).max(1);
                match i.code & 0x07 {
                    0x02 | 0x03 => i.k %= 16,
                    0x00 | 0x01 if i.code & 0xe0 == 0x60 => i.k %= 16,
                    0x05 if i.code & 0xf0 == 0 => i.k %= room as u32,
                    0x05 => {
                        i.jt %= room.min(255) as u8;
                        i.jf %= room.min(255) as u8;
                    }
                    0x04 if i.code & 0x08 == 0 => match i.code & 0xf0 {
                        0x30 | 0x90 if i.k == 0 => i.k = 1,
                        0x60 | 0x70 => i.k %= 32,
                        _ => {}
                    },
                    _ => {}
                }
            }
            prop_assume!(validate(&prog).is_ok());
            let progs = vec![prog_of("udp dst port 1003 and src host 10.2.0.3"), decode(&prog)];
            let alone = merged(&progs[1..]);
            let both = merged(&progs);
            for p in &pkts {
                prop_assert_eq!(
                    alone.first_match(p, |_| &progs[1]),
                    (exec(&progs[1], p) != 0).then_some(0),
                    "{:?}", prog
                );
                prop_assert_eq!(both.first_match(p, |i| &progs[i as usize]), linear(&progs, p));
            }
            let want: Vec<Option<u32>> = pkts.iter().map(|p| linear(&progs, p)).collect();
            prop_assert_eq!(batch_of(&both, &progs, &pkts), want);
        }
    }
}

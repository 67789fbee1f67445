//! First-match index for ACL rules: tuple-space search. Rules with the same shape (source
//! and destination prefix lengths, which ports are given) share one exact-match table of
//! their masked fields; a lookup probes tables in the order of their earliest rule and stops
//! once the best rule found comes before every rule of the remaining tables, so its cost
//! follows the number of shapes, not of rules.
use std::collections::HashMap;

use super::table::{hash_words, FlatTable};

/// What the index needs of a rule: prefixes as (net, mask) and ports (0 = any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexRule {
    /// Source network (host bits clear) and mask.
    pub src: (u32, u32),
    /// Destination network and mask.
    pub dst: (u32, u32),
    /// Source port, 0 = any.
    pub src_port: u16,
    /// Destination port, 0 = any.
    pub dst_port: u16,
}

type Shape = (u32, u32, bool, bool);

struct Tuple {
    shape: Shape,
    /// Index of the earliest rule in `table`: no rule of this table can beat a match before it.
    first: u32,
    /// Masked key -> earliest rule with that key.
    table: FlatTable,
}

/// Rule indexes by shape, answering "first rule matching" for a packet's fields.
#[derive(Default)]
pub struct AclIndex {
    /// In order of `first` (rules only ever append, so creation order).
    tuples: Vec<Tuple>,
    by_shape: HashMap<Shape, usize>,
    len: u32,
}

#[inline(always)]
fn key(src: u32, dst: u32, sport: u16, dport: u16) -> [u64; 2] {
    [
        ((src as u64) << 32) | dst as u64,
        ((sport as u64) << 16) | dport as u64,
    ]
}

impl AclIndex {
    /// An empty index.
    pub fn new() -> AclIndex {
        AclIndex::default()
    }

    /// Forgets every rule.
    pub fn clear(&mut self) {
        *self = AclIndex::default();
    }

    /// Appends a rule; it gets the next index (0, 1, ...).
    pub fn push(&mut self, r: &IndexRule) {
        let idx = self.len;
        self.len += 1;
        let shape = (r.src.1, r.dst.1, r.src_port != 0, r.dst_port != 0);
        let ti = *self.by_shape.entry(shape).or_insert_with(|| {
            self.tuples.push(Tuple {
                shape,
                first: idx,
                table: FlatTable::sparse(2),
            });
            self.tuples.len() - 1
        });
        let k = key(r.src.0, r.dst.0, r.src_port, r.dst_port);
        let t = &mut self.tuples[ti];
        // An earlier rule with the same fields shadows this one for good.
        if t.table.get(&k).is_none() {
            t.table.insert(&k, idx);
        }
    }

    /// The first rule (index) matching a packet with these addresses and ports (None: the
    /// packet has no L4 ports, so only port-less rules can match).
    #[inline(always)]
    pub fn lookup(&self, src: u32, dst: u32, ports: Option<(u16, u16)>) -> Option<u32> {
        let mut best = u32::MAX;
        for t in &self.tuples {
            if t.first >= best {
                break;
            }
            let (smask, dmask, has_sport, has_dport) = t.shape;
            let (sp, dp) = match ports {
                _ if !(has_sport || has_dport) => (0, 0),
                None => continue,
                Some((s, d)) => (if has_sport { s } else { 0 }, if has_dport { d } else { 0 }),
            };
            let k = key(src & smask, dst & dmask, sp, dp);
            if let Some(i) = t.table.get_near(&k, hash_words(&k)) {
                best = best.min(i);
            }
        }
        (best != u32::MAX).then_some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn matches(r: &IndexRule, src: u32, dst: u32, ports: Option<(u16, u16)>) -> bool {
        if src & r.src.1 != r.src.0 || dst & r.dst.1 != r.dst.0 {
            return false;
        }
        if r.src_port == 0 && r.dst_port == 0 {
            return true;
        }
        match ports {
            Some((s, d)) => {
                (r.src_port == 0 || r.src_port == s) && (r.dst_port == 0 || r.dst_port == d)
            }
            None => false,
        }
    }

    fn prefix() -> impl Strategy<Value = (u32, u32)> {
        (
            0u32..4,
            prop_oneof![Just(0u32), Just(8), Just(16), Just(24), Just(32), 0u32..=32],
        )
            .prop_map(|(a, len)| {
                let addr = 0x0a00_0000 | (a << 16) | (a * 0x0101);
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                (addr & mask, mask)
            })
    }

    fn rule() -> impl Strategy<Value = IndexRule> {
        (prefix(), prefix(), 0u16..3, 0u16..3).prop_map(|(src, dst, src_port, dst_port)| {
            IndexRule {
                src,
                dst,
                src_port,
                dst_port,
            }
        })
    }

    fn packet() -> impl Strategy<Value = (u32, u32, Option<(u16, u16)>)> {
        (
            0u32..4,
            any::<u16>(),
            0u32..4,
            any::<u16>(),
            proptest::option::of((1u16..3, 1u16..3)),
        )
            .prop_map(|(a, x, b, y, ports)| {
                (
                    0x0a00_0000 | (a << 16) | (x as u32 & 0x0303),
                    0x0a00_0000 | (b << 16) | (y as u32 & 0x0303),
                    ports,
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Appends and clears in random order; after each step every packet gets the
        /// first matching rule of a plain scan.
        #[test]
        fn agrees_with_a_linear_scan(
            steps in proptest::collection::vec(
                prop_oneof![
                    8 => proptest::collection::vec(rule(), 1..20).prop_map(Some),
                    1 => Just(None),
                ],
                1..6,
            ),
            pkts in proptest::collection::vec(packet(), 1..48),
        ) {
            let mut idx = AclIndex::new();
            let mut rules: Vec<IndexRule> = Vec::new();
            for step in steps {
                match step {
                    Some(new) => {
                        for r in new {
                            idx.push(&r);
                            rules.push(r);
                        }
                    }
                    None => {
                        idx.clear();
                        rules.clear();
                    }
                }
                for &(s, d, p) in &pkts {
                    let want = rules.iter().position(|r| matches(r, s, d, p)).map(|i| i as u32);
                    prop_assert_eq!(idx.lookup(s, d, p), want);
                }
            }
        }
    }
}

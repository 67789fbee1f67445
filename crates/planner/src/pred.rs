//! Predicates over packet header fields (seed 003 §3.7.3, §5.3.1): atoms are
//! (field, value, mask) triples, a [`Conj`] is a conjunction of atoms, a [`Term`] is a
//! conjunction with negated conjunctions (what the F port of a filter contributes), and a
//! [`Dnf`] is a disjunction of terms (what several paths into one node contribute).
//! Satisfiability is decided structurally by [`Term::decide`]: no SMT solver at run time.

use std::fmt;

/// A packet header field a predicate can constrain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// Ethernet type (16 bits).
    EtherType,
    /// IPv4 protocol number (8 bits).
    IpProto,
    /// IPv4 source address.
    SrcIp,
    /// IPv4 destination address.
    DstIp,
    /// L4 source port.
    SrcPort,
    /// L4 destination port.
    DstPort,
    /// Low 16 bits of the Toeplitz RSS hash: an opaque, derived field (seed note §8.2).
    RssBucket,
    /// The hardware RX queue a packet arrived on (what an XDP program sees).
    RxQueue,
}

/// Number of fields.
pub const NFIELDS: usize = 8;

/// All fields in index order.
pub const FIELDS: [Field; NFIELDS] = [
    Field::EtherType,
    Field::IpProto,
    Field::SrcIp,
    Field::DstIp,
    Field::SrcPort,
    Field::DstPort,
    Field::RssBucket,
    Field::RxQueue,
];

/// Ethernet type of IPv4.
pub const ETH_IPV4: u32 = 0x0800;
/// IP protocol number of TCP.
pub const PROTO_TCP: u32 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u32 = 17;

impl Field {
    /// Width of the field in bits.
    pub fn width(self) -> u32 {
        match self {
            Field::EtherType | Field::SrcPort | Field::DstPort | Field::RssBucket => 16,
            Field::IpProto | Field::RxQueue => 8,
            Field::SrcIp | Field::DstIp => 32,
        }
    }
    /// Mask with every bit of the field set.
    pub fn full_mask(self) -> u32 {
        if self.width() == 32 {
            u32::MAX
        } else {
            (1u32 << self.width()) - 1
        }
    }
    /// Index of the field in [`FIELDS`].
    pub fn index(self) -> usize {
        self as usize
    }
    /// Short name used in printed predicates.
    pub fn name(self) -> &'static str {
        match self {
            Field::EtherType => "ethertype",
            Field::IpProto => "proto",
            Field::SrcIp => "sip",
            Field::DstIp => "dip",
            Field::SrcPort => "sport",
            Field::DstPort => "dport",
            Field::RssBucket => "rsshash",
            Field::RxQueue => "rxq",
        }
    }
}

/// A concrete packet header: one value per field (derived fields included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Field values, indexed by [`Field::index`].
    pub vals: [u32; NFIELDS],
}

impl Header {
    /// An IPv4 header with a 5-tuple; the RSS bucket is computed from it.
    pub fn ipv4(proto: u32, sip: u32, dip: u32, sport: u32, dport: u32) -> Header {
        let mut h = Header::default();
        h.vals[Field::EtherType.index()] = ETH_IPV4;
        h.vals[Field::IpProto.index()] = proto & 0xff;
        h.vals[Field::SrcIp.index()] = sip;
        h.vals[Field::DstIp.index()] = dip;
        h.vals[Field::SrcPort.index()] = sport & 0xffff;
        h.vals[Field::DstPort.index()] = dport & 0xffff;
        h.recompute_rss();
        h
    }
    /// Value of one field.
    pub fn get(&self, f: Field) -> u32 {
        self.vals[f.index()]
    }
    /// Sets one field (truncated to its width); derived fields are not recomputed.
    pub fn set(&mut self, f: Field, v: u32) {
        self.vals[f.index()] = v & f.full_mask();
    }
    /// Recomputes the RSS bucket the way a NIC hashes: 4-tuple for TCP/UDP, addresses for
    /// other IPv4, zero for non-IPv4.
    pub fn recompute_rss(&mut self) {
        let hash = if self.get(Field::EtherType) != ETH_IPV4 {
            0
        } else {
            let mut input = Vec::with_capacity(12);
            input.extend_from_slice(&self.get(Field::SrcIp).to_be_bytes());
            input.extend_from_slice(&self.get(Field::DstIp).to_be_bytes());
            let p = self.get(Field::IpProto);
            if p == PROTO_TCP || p == PROTO_UDP {
                input.extend_from_slice(&(self.get(Field::SrcPort) as u16).to_be_bytes());
                input.extend_from_slice(&(self.get(Field::DstPort) as u16).to_be_bytes());
            }
            toeplitz(&input)
        };
        self.set(Field::RssBucket, hash & 0xffff);
    }
    /// The predicate true of exactly this header.
    pub fn to_conj(&self) -> Conj {
        let mut c = Conj::TRUE;
        for f in FIELDS {
            c.v[f.index()] = self.get(f);
            c.m[f.index()] = f.full_mask();
        }
        c
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}:{} -> {}:{}",
            proto_name(self.get(Field::IpProto)),
            ip_str(self.get(Field::SrcIp)),
            self.get(Field::SrcPort),
            ip_str(self.get(Field::DstIp)),
            self.get(Field::DstPort)
        )
    }
}

/// Dotted-quad text of an IPv4 address.
pub fn ip_str(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// "udp", "tcp" or the number.
pub fn proto_name(p: u32) -> String {
    match p {
        PROTO_TCP => "tcp".into(),
        PROTO_UDP => "udp".into(),
        n => n.to_string(),
    }
}

/// The default Toeplitz key most drivers program (Microsoft's RSS verification key).
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Toeplitz hash of `input` under [`RSS_KEY`].
pub fn toeplitz(input: &[u8]) -> u32 {
    let mut result = 0u32;
    let mut window = u32::from_be_bytes([RSS_KEY[0], RSS_KEY[1], RSS_KEY[2], RSS_KEY[3]]);
    for (i, byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte & (0x80 >> b) != 0 {
                result ^= window;
            }
            let next = i * 8 + b + 32;
            let bit = RSS_KEY
                .get(next / 8)
                .map(|k| (k >> (7 - next % 8)) & 1)
                .unwrap_or(0);
            window = (window << 1) | bit as u32;
        }
    }
    result
}

/// A conjunction of (field, value, mask) atoms, normalised to one merged atom per field
/// (mask 0 = the field is unconstrained). Two atoms on one field contradict when they
/// disagree on a bit both masks cover (the thesis's "one label, one value" axiom with masks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conj {
    /// Values per field (only bits under the mask are meaningful, the rest are zero).
    pub v: [u32; NFIELDS],
    /// Masks per field.
    pub m: [u32; NFIELDS],
}

/// How a negated conjunction relates to a positive one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Relation {
    /// The two contradict: the negation is implied.
    Disjoint,
    /// The positive implies the negated conjunction: the term is unsatisfiable.
    Implied,
    /// Neither.
    Open,
}

impl Conj {
    /// The empty conjunction (true).
    pub const TRUE: Conj = Conj {
        v: [0; NFIELDS],
        m: [0; NFIELDS],
    };

    /// The conjunction of one atom.
    pub fn atom(f: Field, value: u32, mask: u32) -> Conj {
        let mut c = Conj::TRUE;
        let m = mask & f.full_mask();
        c.v[f.index()] = value & m;
        c.m[f.index()] = m;
        c
    }
    /// One exact atom (`field = value`).
    pub fn eq(f: Field, value: u32) -> Conj {
        Conj::atom(f, value, u32::MAX)
    }
    /// Conjunction with one more atom; `None` when it contradicts.
    pub fn with(self, f: Field, value: u32, mask: u32) -> Option<Conj> {
        self.and(&Conj::atom(f, value, mask))
    }
    /// Conjunction of two conjunctions; `None` when they contradict.
    pub fn and(&self, o: &Conj) -> Option<Conj> {
        let mut r = *self;
        for i in 0..NFIELDS {
            if (self.v[i] ^ o.v[i]) & self.m[i] & o.m[i] != 0 {
                return None;
            }
            r.v[i] |= o.v[i];
            r.m[i] |= o.m[i];
        }
        Some(r)
    }
    /// True when a concrete header satisfies every atom.
    pub fn eval(&self, h: &Header) -> bool {
        (0..NFIELDS).all(|i| h.vals[i] & self.m[i] == self.v[i])
    }
    /// True when no field is constrained.
    pub fn is_true(&self) -> bool {
        self.m.iter().all(|m| *m == 0)
    }
    /// True when every one of `fields` is fully constrained.
    pub fn is_exact_on(&self, fields: &[Field]) -> bool {
        fields.iter().all(|f| self.m[f.index()] == f.full_mask())
    }
    /// True when `self` implies `o` (every atom of `o` is fixed the same way in `self`).
    pub fn implies(&self, o: &Conj) -> bool {
        (0..NFIELDS).all(|i| o.m[i] & !self.m[i] == 0 && (self.v[i] ^ o.v[i]) & o.m[i] == 0)
    }
    fn relation(&self, neg: &Conj) -> Relation {
        if (0..NFIELDS).any(|i| (self.v[i] ^ neg.v[i]) & self.m[i] & neg.m[i] != 0) {
            Relation::Disjoint
        } else if self.implies(neg) {
            Relation::Implied
        } else {
            Relation::Open
        }
    }
    fn free_bits(&self, neg: &Conj) -> u32 {
        (0..NFIELDS)
            .map(|i| (neg.m[i] & !self.m[i]).count_ones())
            .sum()
    }
}

impl fmt::Display for Conj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_true() {
            return write!(f, "true");
        }
        let mut first = true;
        for fld in FIELDS {
            let (v, m) = (self.v[fld.index()], self.m[fld.index()]);
            if m == 0 {
                continue;
            }
            if !first {
                write!(f, " & ")?;
            }
            first = false;
            let val = match fld {
                Field::SrcIp | Field::DstIp => ip_str(v),
                Field::IpProto => proto_name(v),
                Field::EtherType => format!("{v:#06x}"),
                _ => v.to_string(),
            };
            if m == fld.full_mask() {
                write!(f, "{}={}", fld.name(), val)?;
            } else if matches!(fld, Field::SrcIp | Field::DstIp)
                && m.leading_ones() + m.trailing_zeros() == 32
            {
                write!(f, "{}={}/{}", fld.name(), val, m.leading_ones())?;
            } else {
                write!(f, "{}={}&{:#x}", fld.name(), val, m)?;
            }
        }
        Ok(())
    }
}

/// Steps the decision procedure may take before it answers "unknown".
pub const DEFAULT_BUDGET: u32 = 200_000;

/// A conjunction with negated conjunctions: `pos ∧ ¬neg₁ ∧ … ∧ ¬negₖ`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    /// The positive part.
    pub pos: Conj,
    /// Conjunctions that must not hold.
    pub neg: Vec<Conj>,
}

impl Term {
    /// The term that is always true.
    pub fn truth() -> Term {
        Term {
            pos: Conj::TRUE,
            neg: Vec::new(),
        }
    }
    /// A purely positive term.
    pub fn of(pos: Conj) -> Term {
        Term {
            pos,
            neg: Vec::new(),
        }
    }
    /// The negation of one conjunction.
    pub fn not(c: Conj) -> Term {
        Term {
            pos: Conj::TRUE,
            neg: vec![c],
        }
    }
    /// Conjunction of two terms; `None` when the positive parts contradict. Negations that
    /// the positive part already rules out are dropped, so terms stay small along long
    /// filter chains.
    pub fn and(&self, o: &Term) -> Option<Term> {
        let pos = self.pos.and(&o.pos)?;
        let mut neg = Vec::with_capacity(self.neg.len() + o.neg.len());
        for n in self.neg.iter().chain(o.neg.iter()) {
            match pos.relation(n) {
                Relation::Disjoint => {}
                Relation::Implied => return None,
                Relation::Open => neg.push(*n),
            }
        }
        Some(Term { pos, neg })
    }
    /// True when a concrete header satisfies the term.
    pub fn eval(&self, h: &Header) -> bool {
        self.pos.eval(h) && !self.neg.iter().any(|n| n.eval(h))
    }
    /// Decides satisfiability; `None` when the step budget runs out.
    pub fn decide(&self, budget: u32) -> Option<bool> {
        let mut steps = budget;
        sat(self.pos, &self.neg, &mut steps)
    }
    /// Satisfiability for pruning: "unknown" counts as satisfiable, which keeps an edge and
    /// so is always sound.
    pub fn maybe_sat(&self) -> bool {
        self.decide(DEFAULT_BUDGET).unwrap_or(true)
    }
}

/// The structural procedure: drop negations disjoint from the positive part, fail on one it
/// implies, otherwise split the negation with the fewest free bits into disjoint cases
/// (the first i-1 free bits equal to it, bit i different) and recurse.
fn sat(pos: Conj, negs: &[Conj], steps: &mut u32) -> Option<bool> {
    if *steps == 0 {
        return None;
    }
    *steps -= 1;
    let mut live: Vec<Conj> = Vec::with_capacity(negs.len());
    for n in negs {
        match pos.relation(n) {
            Relation::Disjoint => {}
            Relation::Implied => return Some(false),
            Relation::Open => live.push(*n),
        }
    }
    let Some((k, _)) = live
        .iter()
        .enumerate()
        .min_by_key(|(_, n)| pos.free_bits(n))
    else {
        return Some(true);
    };
    let n = live.swap_remove(k);
    let mut prefix = pos;
    for i in 0..NFIELDS {
        let mut free = n.m[i] & !pos.m[i];
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free &= !bit;
            let mut branch = prefix;
            branch.m[i] |= bit;
            branch.v[i] = (branch.v[i] & !bit) | (!n.v[i] & bit);
            if sat(branch, &live, steps)? {
                return Some(true);
            }
            prefix.m[i] |= bit;
            prefix.v[i] = (prefix.v[i] & !bit) | (n.v[i] & bit);
        }
    }
    Some(false)
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.pos)?;
        for n in &self.neg {
            write!(f, " & !({n})")?;
        }
        Ok(())
    }
}

/// A disjunction of terms (empty = false).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dnf {
    /// The disjuncts.
    pub terms: Vec<Term>,
}

impl Dnf {
    /// The false predicate.
    pub fn falsity() -> Dnf {
        Dnf { terms: Vec::new() }
    }
    /// The true predicate.
    pub fn truth() -> Dnf {
        Dnf {
            terms: vec![Term::truth()],
        }
    }
    /// A one-term predicate.
    pub fn of(t: Term) -> Dnf {
        Dnf { terms: vec![t] }
    }
    /// Disjunction.
    pub fn or(&mut self, o: &Dnf) {
        self.terms.extend(o.terms.iter().cloned());
    }
    /// Conjunction with one term.
    pub fn and_term(&self, t: &Term) -> Dnf {
        Dnf {
            terms: self.terms.iter().filter_map(|x| x.and(t)).collect(),
        }
    }
    /// Conjunction (distributes; the result has |self|·|o| terms at most).
    pub fn and(&self, o: &Dnf) -> Dnf {
        let mut terms = Vec::new();
        for a in &self.terms {
            for b in &o.terms {
                if let Some(t) = a.and(b) {
                    terms.push(t);
                }
            }
        }
        Dnf { terms }
    }
    /// True when a concrete header satisfies some term.
    pub fn eval(&self, h: &Header) -> bool {
        self.terms.iter().any(|t| t.eval(h))
    }
    /// Decides satisfiability; `None` when the budget runs out.
    pub fn decide(&self, budget: u32) -> Option<bool> {
        let mut unknown = false;
        for t in &self.terms {
            match t.decide(budget) {
                Some(true) => return Some(true),
                None => unknown = true,
                Some(false) => {}
            }
        }
        if unknown {
            None
        } else {
            Some(false)
        }
    }
    /// Satisfiability for pruning ("unknown" counts as satisfiable).
    pub fn maybe_sat(&self) -> bool {
        self.decide(DEFAULT_BUDGET).unwrap_or(true)
    }
    /// Drops terms proven unsatisfiable.
    pub fn simplify(&mut self) {
        self.terms.retain(|t| t.maybe_sat());
    }
}

impl fmt::Display for Dnf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return write!(f, "false");
        }
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                write!(f, " | ")?;
            }
            write!(f, "({t})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toeplitz_matches_the_published_verification_vector() {
        // 66.9.149.187:2794 -> 161.142.100.80:1766 (Microsoft's RSS verification suite).
        let h = Header::ipv4(PROTO_TCP, 0x42_09_95_bb, 0xa1_8e_64_50, 2794, 1766);
        let mut input = Vec::new();
        input.extend_from_slice(&0x42_09_95_bbu32.to_be_bytes());
        input.extend_from_slice(&0xa1_8e_64_50u32.to_be_bytes());
        input.extend_from_slice(&2794u16.to_be_bytes());
        input.extend_from_slice(&1766u16.to_be_bytes());
        assert_eq!(toeplitz(&input), 0x51cc_c178);
        assert_eq!(h.get(Field::RssBucket), 0xc178);
    }

    #[test]
    fn one_label_two_values_is_false() {
        let a = Conj::eq(Field::DstPort, 53);
        assert!(a.with(Field::DstPort, 67, u32::MAX).is_none());
        assert!(a.with(Field::DstPort, 53 | 0x100, 0xff).is_some());
    }

    #[test]
    fn filter_chain_terms() {
        // UDP to 53 that missed "UDP to *" is impossible; UDP to 53 that missed "TCP" is not.
        let udp53 = Conj::eq(Field::IpProto, PROTO_UDP)
            .with(Field::DstPort, 53, u32::MAX)
            .unwrap();
        let t = Term {
            pos: udp53,
            neg: vec![Conj::eq(Field::IpProto, PROTO_UDP)],
        };
        assert_eq!(t.decide(1000), Some(false));
        let t = Term {
            pos: udp53,
            neg: vec![Conj::eq(Field::IpProto, PROTO_TCP)],
        };
        assert_eq!(t.decide(1000), Some(true));
        // rxq has 8 bits: excluding all 256 values by negations is unsatisfiable.
        let all: Vec<Conj> = (0..256).map(|q| Conj::eq(Field::RxQueue, q)).collect();
        let t = Term {
            pos: Conj::TRUE,
            neg: all.clone(),
        };
        assert_eq!(t.decide(1_000_000), Some(false));
        let t = Term {
            pos: Conj::TRUE,
            neg: all[1..].to_vec(),
        };
        assert_eq!(t.decide(1_000_000), Some(true));
    }
}

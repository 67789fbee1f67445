//! The structural decision procedure agrees with Z3 (Debian's libz3 through the `z3` crate)
//! on random terms and DNFs, and with direct evaluation on random headers.

use bessemer_planner::pred::{Conj, Dnf, Field, Header, Term, FIELDS};
use proptest::prelude::*;
use z3::ast::{Ast, Bool, BV};

fn field_strategy() -> impl Strategy<Value = Field> {
    // A few fields of different widths keep atoms interacting.
    prop::sample::select(vec![
        Field::IpProto,
        Field::DstPort,
        Field::SrcIp,
        Field::RxQueue,
    ])
}

fn atom_strategy() -> impl Strategy<Value = (Field, u32, u32)> {
    (
        field_strategy(),
        0u32..8,
        prop::sample::select(vec![0x1u32, 0x3, 0x7, 0x6, 0x4, u32::MAX]),
    )
}

fn conj_strategy(max_atoms: usize) -> impl Strategy<Value = Conj> {
    prop::collection::vec(atom_strategy(), 0..=max_atoms).prop_map(|atoms| {
        let mut c = Conj::TRUE;
        for (f, v, m) in atoms {
            // Contradicting atoms are dropped so the conjunction stays consistent.
            if let Some(n) = c.with(f, v, m) {
                c = n;
            }
        }
        c
    })
}

fn term_strategy() -> impl Strategy<Value = Term> {
    (
        conj_strategy(2),
        prop::collection::vec(conj_strategy(2), 0..7),
    )
        .prop_map(|(pos, neg)| Term { pos, neg })
}

fn z3_conj<'c>(ctx: &'c z3::Context, vars: &[BV<'c>], c: &Conj) -> Bool<'c> {
    let parts: Vec<Bool> = FIELDS
        .iter()
        .filter(|f| c.m[f.index()] != 0)
        .map(|f| {
            let w = f.width();
            let m = BV::from_u64(ctx, c.m[f.index()] as u64, w);
            let v = BV::from_u64(ctx, c.v[f.index()] as u64, w);
            vars[f.index()].bvand(&m)._eq(&v)
        })
        .collect();
    let refs: Vec<&Bool> = parts.iter().collect();
    Bool::and(ctx, &refs)
}

fn z3_term<'c>(ctx: &'c z3::Context, vars: &[BV<'c>], t: &Term) -> Bool<'c> {
    let mut parts = vec![z3_conj(ctx, vars, &t.pos)];
    for n in &t.neg {
        parts.push(z3_conj(ctx, vars, n).not());
    }
    let refs: Vec<&Bool> = parts.iter().collect();
    Bool::and(ctx, &refs)
}

fn z3_sat(d: &Dnf) -> bool {
    let cfg = z3::Config::new();
    let ctx = z3::Context::new(&cfg);
    let vars: Vec<BV> = FIELDS
        .iter()
        .map(|f| BV::new_const(&ctx, f.name(), f.width()))
        .collect();
    let terms: Vec<Bool> = d.terms.iter().map(|t| z3_term(&ctx, &vars, t)).collect();
    let refs: Vec<&Bool> = terms.iter().collect();
    let solver = z3::Solver::new(&ctx);
    solver.assert(&Bool::or(&ctx, &refs));
    match solver.check() {
        z3::SatResult::Sat => true,
        z3::SatResult::Unsat => false,
        z3::SatResult::Unknown => panic!("z3 answered unknown on a bit-vector formula"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(250))]

    #[test]
    fn structural_procedure_agrees_with_z3(t in term_strategy()) {
        let ours = t.decide(1_000_000);
        prop_assert_eq!(ours, Some(z3_sat(&Dnf::of(t.clone()))), "term {}", t);
    }

    #[test]
    fn conjunction_of_terms_agrees_with_z3(a in term_strategy(), b in term_strategy()) {
        let d = Dnf::of(a).and(&Dnf::of(b));
        prop_assert_eq!(d.decide(1_000_000), Some(z3_sat(&d)), "dnf {}", d);
    }

    #[test]
    fn a_satisfying_header_exists_exactly_when_sat(t in term_strategy(), vals in prop::array::uniform8(0u32..8)) {
        // Any header that satisfies the term proves it satisfiable.
        let mut h = Header::default();
        for f in FIELDS {
            h.set(f, vals[f.index()]);
        }
        if t.eval(&h) {
            prop_assert_eq!(t.decide(1_000_000), Some(true));
        }
    }
}

#[test]
fn z3_sees_the_axiom_too() {
    let t = Term::of(Conj::eq(Field::DstPort, 53));
    let u = Term::of(Conj::eq(Field::DstPort, 67));
    let d = Dnf::of(t).and(&Dnf::of(u));
    assert!(!z3_sat(&Dnf::of(Term {
        pos: Conj::eq(Field::DstPort, 53),
        neg: vec![Conj::atom(Field::DstPort, 1, 1)],
    })));
    assert_eq!(d.decide(100), Some(false));
}

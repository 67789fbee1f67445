//! Specialisation soundness: on every packet a queue receives, its pruned pipeline does
//! exactly what the full pipeline does; packets that break the guard go to the full
//! pipeline and are counted; the default queue is never pruned.

mod common;

use bessemer_planner::embed::{
    demo_pipeline, specialise, Classifier, Lpg, LpgModule, Outcome, Target,
};
use bessemer_planner::graph::Dest;
use bessemer_planner::nic::{configured_prg, Filter, FilterKind, Intel82599, NicModel, Sfc9020};
use bessemer_planner::pred::{Conj, Field, Header, PROTO_TCP, PROTO_UDP};
use common::{IPS, PORTS};
use proptest::prelude::*;

fn lpg_strategy() -> impl Strategy<Value = Lpg> {
    let wild_rule = (
        0usize..4,
        prop::sample::select(vec![0xffffu32, 0xff00, 0x3]),
        -2i32..3,
        0usize..3,
    );
    let exact_rule = (0usize..2, 0usize..4, 0usize..4, 0usize..4);
    let route = (
        0usize..4,
        prop::sample::select(vec![0u8, 8, 16, 24, 32]),
        0usize..3,
    );
    (
        prop::collection::vec(wild_rule, 0..6),
        prop::collection::vec(exact_rule, 0..8),
        prop::collection::vec(route, 0..5),
    )
        .prop_map(|(w, e, r)| {
            let wild = LpgModule {
                name: "wild".into(),
                classifier: Classifier::WildcardMatch {
                    rules: w
                        .into_iter()
                        .map(|(p, m, prio, g)| (Conj::atom(Field::DstPort, PORTS[p], m), prio, g))
                        .collect(),
                },
                default_gate: 2,
                gates: vec![
                    Target::Module(1),
                    Target::Module(2),
                    Target::Out("wild-default".into()),
                ],
            };
            let exact = LpgModule {
                name: "exact".into(),
                classifier: Classifier::ExactMatch {
                    fields: vec![Field::IpProto, Field::DstIp, Field::DstPort],
                    rules: e
                        .into_iter()
                        .map(|(p, d, port, g)| {
                            (vec![[PROTO_UDP, PROTO_TCP][p], IPS[d], PORTS[port]], g)
                        })
                        .collect(),
                },
                default_gate: 0,
                gates: vec![
                    Target::Module(2),
                    Target::Out("svc-a".into()),
                    Target::Drop,
                    Target::Out("svc-b".into()),
                ],
            };
            let lookup = LpgModule {
                name: "lookup".into(),
                classifier: Classifier::IpLookup {
                    routes: r.into_iter().map(|(p, l, g)| (IPS[p], l, g)).collect(),
                },
                default_gate: 0,
                gates: vec![
                    Target::Drop,
                    Target::Out("r1".into()),
                    Target::Out("r2".into()),
                ],
            };
            Lpg {
                modules: vec![Some(wild), Some(exact), Some(lookup)],
                root: 0,
            }
        })
}

fn check(
    m: &dyn NicModel,
    cfg: &bessemer_planner::nic::NicConfig,
    lpg: &Lpg,
    pkts: &[(Header, u16)],
) -> Result<(), TestCaseError> {
    lpg.validate()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let prg = configured_prg(m, cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut queues = specialise(&prg, lpg);
    let q0 = queues.iter().find(|q| q.dest == Dest::Queue(0)).unwrap();
    prop_assert_eq!(&q0.pipeline, lpg, "the default queue is never pruned");
    for (h, wrong) in pkts {
        let full = lpg.run(h);
        let d = m.semantic(cfg, h);
        let qp = queues.iter_mut().find(|q| q.dest == d).unwrap();
        prop_assert!(
            qp.guard.eval(h),
            "packet {} on {} breaks its guarantee",
            h,
            d
        );
        prop_assert_eq!(
            qp.pipeline.run(h),
            full.clone(),
            "pruned pipeline of {} differs on {}",
            d,
            h
        );
        // The same packet mis-steered (as during a reconfiguration) still gets the full
        // pipeline's answer, and the guard counts it when it does not conform.
        let qw = &mut queues[*wrong as usize % 4];
        let misses = qw.guard_misses;
        let conforms = qw.guard.eval(h);
        prop_assert_eq!(qw.process(lpg, h), full);
        prop_assert_eq!(qw.guard_misses, misses + u64::from(!conforms));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn pruned_equals_full_82599(cfg in common::config_82599(4), lpg in lpg_strategy(),
                                pkts in prop::collection::vec((common::header(), 0u16..4), 1..40)) {
        check(&Intel82599 { queues: 4 }, &cfg, &lpg, &pkts)?;
    }

    #[test]
    fn pruned_equals_full_sfc9020(cfg in common::config_sfc(4), lpg in lpg_strategy(),
                                  pkts in prop::collection::vec((common::header(), 0u16..4), 1..40)) {
        check(&Sfc9020 { queues: 4 }, &cfg, &lpg, &pkts)?;
    }
}

#[test]
fn a_queue_for_one_service_keeps_only_that_service() {
    let m = Intel82599 { queues: 4 };
    let mut cfg = m.initial_config();
    cfg.rss.clear();
    let dns = (PROTO_UDP, IPS[0], 53);
    let web = (PROTO_TCP, IPS[1], 80);
    for ((p, d, port), q) in [(dns, 1), (web, 2)] {
        cfg.filters.push(Filter {
            kind: FilterKind::FiveTuple,
            matcher: Conj::eq(Field::IpProto, p)
                .with(Field::DstIp, d, u32::MAX)
                .and_then(|c| c.with(Field::DstPort, port, u32::MAX))
                .unwrap(),
            dest: Dest::Queue(q),
        });
    }
    let lpg = demo_pipeline(
        &[dns, web, (PROTO_UDP, IPS[2], 1053)],
        &[(0x0a00_0000, 8), (0xc0a8_0000, 16)],
    );
    let prg = configured_prg(&m, &cfg).unwrap();
    let queues = specialise(&prg, &lpg);
    let q1 = &queues[1];
    let text = q1.pipeline.to_text();
    assert!(
        text.contains("dport=53") && !text.contains("dport=80") && !text.contains("dport=1053"),
        "{text}"
    );
    assert!(
        text.contains("(pruned)"),
        "the route table is unreachable from Q1:\n{text}"
    );
    assert!(q1.stats.rules_removed >= 4, "{:?}", q1.stats);
    let h = Header::ipv4(PROTO_UDP, 7, IPS[0], 999, 53);
    assert_eq!(q1.pipeline.run(&h), Outcome::Out("10.0.0.1:53".into()));
    assert_eq!(queues[0].pipeline, lpg);
    // Q3 receives nothing under this configuration: its whole pipeline is pruned.
    assert!(queues[3].pipeline.modules.iter().all(|m| m.is_none()));
}

#[test]
fn bad_pipelines_are_rejected_with_a_reason() {
    let mut lpg = demo_pipeline(&[(PROTO_UDP, 1, 53)], &[]);
    lpg.modules[0].as_mut().unwrap().gates[0] = Target::Module(9);
    assert!(lpg
        .validate()
        .unwrap_err()
        .to_string()
        .contains("missing module 9"));
    let mut lpg = demo_pipeline(&[(PROTO_UDP, 1, 53)], &[]);
    lpg.modules[2].as_mut().unwrap().gates[0] = Target::Module(0);
    assert!(lpg.validate().unwrap_err().to_string().contains("cycle"));
}

//! Policies and search: the portability claim (one policy, two NIC models, equivalent
//! outcomes), model fidelity of the search's flow map, incremental = basic flow maps, lazy
//! removal and rebuilds, local search, and the cost functions' verdicts.

use bessemer_planner::graph::Dest;
use bessemer_planner::nic::{configured_prg, Intel82599, NicModel, Sfc9020, XdpPort};
use bessemer_planner::search::{
    full_search, generate_flows, Balance, Bandwidth, CostFn, FlowMapMode, Isolation, Planner, Qmap,
    QueueLoad, Verdict,
};
use proptest::prelude::*;

/// The flow map agrees with the NIC's semantic function and with the configured PRG.
fn assert_fidelity(p: &Planner, m: &dyn NicModel) {
    let prg = configured_prg(m, &p.cfg).expect("valid configuration");
    for (id, f) in p.flows() {
        let want = m.semantic(&p.cfg, &f.header);
        assert_eq!(p.qmap.flow_dest[id], Some(want), "flow {id} {}", f.header);
        assert_eq!(prg.trace(&f.header), Some(want), "flow {id} {}", f.header);
    }
}

fn loads(p: &Planner) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = p.qmap.loads.iter().map(|l| (l.hp, l.be)).collect();
    v.sort_unstable();
    v
}

#[test]
fn same_policy_same_outcome_on_82599_and_sfc9020() {
    let flows = generate_flows(60, 7, 4, 0);
    let (a, b) = (Intel82599 { queues: 6 }, Sfc9020 { queues: 6 });
    let iso = Isolation { k: 2 };
    for cost in [&iso as &dyn CostFn, &Balance] {
        let pa = full_search(&a, cost, FlowMapMode::Incremental, &flows, 50).unwrap();
        let pb = full_search(&b, cost, FlowMapMode::Incremental, &flows, 50).unwrap();
        assert_fidelity(&pa, &a);
        assert_fidelity(&pb, &b);
        assert!(
            !pa.verdict().is_reject(),
            "{} on 82599: {:?}",
            cost.name(),
            pa.verdict()
        );
        assert_eq!(pa.verdict(), pb.verdict(), "{}", cost.name());
        assert_eq!(loads(&pa), loads(&pb), "{}", cost.name());
    }
    // Isolation really isolates: every high-priority flow lands on Q0 or Q1 on both NICs.
    for m in [&a as &dyn NicModel, &b] {
        let p = full_search(m, &iso, FlowMapMode::Incremental, &flows, 0).unwrap();
        for (_, f) in p.flows() {
            let Dest::Queue(q) = m.semantic(&p.cfg, &f.header) else {
                panic!("not a queue")
            };
            assert_eq!(q < 2, f.hp, "{} {}", m.name(), f.header);
        }
    }
}

#[test]
fn bandwidth_shares_use_hardware_limiters_on_82599_and_software_on_sfc9020() {
    let flows = generate_flows(12, 3, 3, 500);
    let (a, b) = (Intel82599 { queues: 4 }, Sfc9020 { queues: 4 });
    let bw = Bandwidth {
        k: 1,
        hp_penalty: 10.0,
    };
    let pa = full_search(&a, &bw, FlowMapMode::Incremental, &flows, 10).unwrap();
    let pb = full_search(&b, &bw, FlowMapMode::Incremental, &flows, 10).unwrap();
    assert_eq!(
        pa.verdict(),
        Verdict::Accept(0.0),
        "every queue's limit equals its flows' demand"
    );
    assert_eq!(pa.verdict(), pb.verdict());
    assert_eq!(pa.cfg.limits, pb.cfg.limits);
    let total: u32 = pa.cfg.limits.iter().flatten().sum();
    assert_eq!(total, 12 * 500);
    assert!(a.hw_rate_limiters() && !b.hw_rate_limiters());
    assert!(configured_prg(&a, &pa.cfg)
        .unwrap()
        .to_text()
        .contains("TxRateLimit_"));
}

#[test]
fn overflow_beyond_the_5tuple_filters_uses_flow_director_with_one_mask() {
    let m = Intel82599 { queues: 10 };
    let flows = generate_flows(200, 11, 0, 0);
    let p = full_search(&m, &Balance, FlowMapMode::Incremental, &flows, 0).unwrap();
    assert_fidelity(&p, &m);
    let fdir: Vec<_> = p
        .cfg
        .filters
        .iter()
        .filter(|f| f.kind == bessemer_planner::nic::FilterKind::FlowDirector)
        .collect();
    assert!(!fdir.is_empty());
    assert!(
        fdir.iter().all(|f| f.matcher.m == fdir[0].matcher.m),
        "one global mask"
    );
    let max = p.qmap.loads.iter().map(|l| l.flows).max().unwrap();
    let min = p.qmap.loads.iter().map(|l| l.flows).min().unwrap();
    assert!(max - min <= 1, "balanced: {:?}", p.qmap.loads);
}

#[test]
fn lazy_removal_then_rebuild() {
    let m = Intel82599 { queues: 4 };
    let flows = generate_flows(30, 5, 0, 0);
    let mut p = full_search(&m, &Balance, FlowMapMode::Incremental, &flows, 0).unwrap();
    let filters = p.cfg.filters.len();
    for id in 0..10 {
        p.remove_flow(id).unwrap();
    }
    assert!(p
        .remove_flow(3)
        .unwrap_err()
        .to_string()
        .contains("no flow 3"));
    assert_eq!(
        p.cfg.filters.len(),
        filters,
        "removal leaves the filters in place"
    );
    assert_eq!(p.stale_filters(), 10);
    assert_eq!(p.qmap.loads.iter().map(|l| l.flows).sum::<u32>(), 20);
    assert_fidelity(&p, &m);
    p.rebuild().unwrap();
    assert_eq!(p.stale_filters(), 0);
    assert_eq!(p.cfg.filters.len(), 20);
    assert_fidelity(&p, &m);
}

#[test]
fn local_search_never_makes_things_worse() {
    // Without the flow-sorting function, a greedy pass over alternating classes can end
    // unbalanced; the local search may only improve it.
    let m = Sfc9020 { queues: 5 };
    let flows = generate_flows(23, 9, 2, 0);
    let iso = Isolation { k: 2 };
    let mut p = Planner::new(&m, &iso, FlowMapMode::Incremental).unwrap();
    for f in &flows {
        p.add_flow(*f).unwrap();
    }
    let before = p.verdict();
    p.local_search(20);
    assert!(!Verdict::better(&before, &p.verdict()));
    assert_fidelity(&p, &m);
}

#[test]
fn cost_functions_verdicts() {
    let load = |flows, hp, be, bw| QueueLoad { flows, hp, be, bw };
    let mut q = Qmap {
        flow_dest: vec![],
        loads: vec![load(1, 1, 0, 50), load(1, 0, 1, 30)],
        limits: vec![Some(100), None],
        off_queue: 0,
    };
    assert_eq!(Isolation { k: 1 }.cost(&q), Verdict::Accept(0.0));
    assert_eq!(Balance.cost(&q), Verdict::Ok(0.0));
    // Alg. 3: 10 x |100 - 50| + |0 - 30|.
    assert_eq!(
        Bandwidth {
            k: 1,
            hp_penalty: 10.0
        }
        .cost(&q),
        Verdict::Accept(530.0)
    );
    q.loads[0] = load(2, 1, 1, 50);
    assert_eq!(
        Isolation { k: 1 }.cost(&q),
        Verdict::Reject(1.0),
        "a best-effort flow on the HP queue"
    );
    assert_eq!(Balance.cost(&q), Verdict::Ok(0.25));
    assert!(Verdict::better(
        &Verdict::Accept(99.0),
        &Verdict::Reject(0.0)
    ));
}

#[test]
fn xdp_map_search_keeps_fidelity() {
    let m = XdpPort {
        queues: 3,
        map_entries: 8,
    };
    let mut p = Planner::new(&m, &Balance, FlowMapMode::Incremental).unwrap();
    for f in generate_flows(12, 2, 0, 0) {
        p.add_flow(f).unwrap();
    }
    assert_eq!(
        p.cfg.filters.len(),
        8,
        "the map fills up, the rest stay on their arrival queue"
    );
    assert_fidelity(&p, &m);
    // Two flows with map entries leave; their entries go stale. The next flow finds the map
    // full, and the planner rewrites one stale entry for it (a replacement) instead of
    // needing a new one.
    p.remove_flow(0).unwrap();
    p.remove_flow(1).unwrap();
    assert_eq!(p.stale_filters(), 2);
    let id = p.add_flow(generate_flows(13, 2, 0, 0)[12]).unwrap();
    assert_eq!(p.stats.rebuilds, 0);
    assert_eq!(p.stale_filters(), 1);
    assert_eq!(p.cfg.filters.len(), 8);
    let key = bessemer_planner::nic::exact_match(&p.flows().last().unwrap().1.header);
    assert!(
        p.cfg.filters.iter().any(|f| f.matcher == key),
        "the new flow has an entry"
    );
    assert_eq!(p.flows().count(), 11);
    assert_eq!(id, 12);
    assert_fidelity(&p, &m);
    // A rebuild flushes the remaining stale entry.
    p.rebuild().unwrap();
    assert_eq!((p.stats.rebuilds, p.stale_filters()), (1, 0));
    assert_fidelity(&p, &m);
}

#[test]
fn a_stale_filter_full_nic_rebuilds_when_no_replacement_fits() {
    // The removed flow's twin is still live, so its stale filter cannot be rewritten (the
    // twin would change queue): the planner falls back to a rebuild.
    let m = XdpPort {
        queues: 2,
        map_entries: 2,
    };
    let mut p = Planner::new(&m, &Balance, FlowMapMode::Incremental).unwrap();
    let flows = generate_flows(3, 4, 0, 0);
    p.add_flow(flows[0]).unwrap();
    p.add_flow(flows[1]).unwrap();
    let twin = p.add_flow(flows[0]).unwrap();
    assert_eq!(p.cfg.filters.len(), 2);
    p.remove_flow(0).unwrap();
    assert_eq!(p.stale_filters(), 1);
    p.add_flow(flows[2]).unwrap();
    assert_eq!(p.stats.rebuilds, 1);
    assert_eq!(p.stale_filters(), 0);
    assert!(p.flows().any(|(i, _)| i == twin));
    assert_fidelity(&p, &m);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn incremental_flow_maps_equal_basic_ones(n in 1usize..40, seed in 0u64..1000, hp in 0usize..4, queues in 2u16..6,
                                              removals in prop::collection::vec(0usize..40, 0..8), more in 0usize..8) {
        for m in [&Intel82599 { queues } as &dyn NicModel, &Sfc9020 { queues }] {
            let flows = generate_flows(n + more, seed, hp, 0);
            let iso = Isolation { k: 1 };
            let mut a = full_search(m, &iso, FlowMapMode::Incremental, &flows[..n], 0).unwrap();
            let mut b = full_search(m, &iso, FlowMapMode::Basic, &flows[..n], 0).unwrap();
            for r in &removals {
                if *r < n {
                    let _ = a.remove_flow(*r);
                    let _ = b.remove_flow(*r);
                }
            }
            for f in &flows[n..] {
                a.add_flow(*f).unwrap();
                b.add_flow(*f).unwrap();
            }
            prop_assert_eq!(&a.cfg, &b.cfg);
            prop_assert_eq!(&a.qmap, &b.qmap);
            assert_fidelity(&a, m);
        }
    }
}

/// Four 5 Gb/s flows on a 10 GbE 82599 cannot all be carried: the search refuses them and
/// names the flows and the link, in the library, in the request path the CLI and the
/// daemon's PlanNic share, and when flows are added one by one.
#[test]
fn bandwidth_beyond_the_link_is_refused_with_the_flows_named() {
    let bw = Bandwidth {
        k: 1,
        hp_penalty: 10.0,
    };
    let four = generate_flows(4, 1, 0, 5000);
    for m in [
        &Intel82599 { queues: 4 } as &dyn NicModel,
        &Sfc9020 { queues: 4 },
    ] {
        let e = full_search(m, &bw, FlowMapMode::Incremental, &four, 10)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("flows 1..4 ask 20000 Mb/s") && e.contains("10000 Mb/s link"),
            "{}: {e}",
            m.name()
        );
        assert!(e.contains("udp 10.0.77.173:1024 -> 10.1.0.1:11211"), "{e}");
    }
    // One flow alone above the link is named by itself.
    let mut three = generate_flows(3, 1, 0, 100);
    three[1].bw_mbps = 15000;
    let m = Intel82599 { queues: 4 };
    let e = full_search(&m, &Balance, FlowMapMode::Incremental, &three, 0)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("flow 2 (udp 10.0.96.118:1025 -> 10.1.0.1:11211) asks 15000 Mb/s")
            && e.contains("the 82599's 10000 Mb/s link"),
        "{e}"
    );
    // The request path (CLI and PlanNic): the same refusal.
    use bessemer_planner::request;
    let model = request::model("82599", 4, None, None).unwrap();
    let cost = request::policy("bandwidth", 1, 10.0).unwrap();
    let flows = request::flows(None, Some(4), 1, 0, 5000).unwrap();
    let e = request::search(model.as_ref(), cost.as_ref(), &flows, &Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("flows 1..4 ask 20000 Mb/s"), "{e}");
    // Flows added one by one: the one that does not fit is refused and not placed; once
    // another leaves, it fits.
    let mut p = full_search(
        &m,
        &bw,
        FlowMapMode::Incremental,
        &generate_flows(2, 1, 0, 4000),
        0,
    )
    .unwrap();
    let extra = generate_flows(3, 1, 0, 4000)[2];
    let e = p.add_flow(extra).unwrap_err().to_string();
    assert!(
        e.contains("asks 4000 Mb/s") && e.contains("12000 Mb/s") && e.contains("10000 Mb/s link"),
        "{e}"
    );
    assert_eq!(p.flows().count(), 2);
    assert_eq!(p.qmap.loads.iter().map(|l| l.bw).sum::<u64>(), 8000);
    p.remove_flow(0).unwrap();
    p.add_flow(extra).unwrap();
    assert_eq!(p.qmap.loads.iter().map(|l| l.bw).sum::<u64>(), 8000);
}

/// A per-queue limit outside what the queue's limiter can be set to is refused by the
/// model's constraints: above the 82599's 10 Gb/s maximum, below its 10 Mb/s minimum, and
/// for a software token bucket zero or above the link.
#[test]
fn a_rate_limit_outside_the_limiters_range_is_refused() {
    let m = Intel82599 { queues: 4 };
    let mut cfg = m.initial_config();
    cfg.limits[1] = Some(15000);
    let e = m.check(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("Q1") && e.contains("15000 Mb/s") && e.contains("10 to 10000 Mb/s"),
        "{e}"
    );
    assert!(Planner::with_config(&m, &Balance, FlowMapMode::Incremental, cfg.clone()).is_err());
    cfg.limits[1] = Some(5);
    assert!(m.check(&cfg).is_err());
    cfg.limits[1] = Some(10000);
    m.check(&cfg).unwrap();
    let s = Sfc9020 { queues: 2 };
    let mut cfg = s.initial_config();
    for bad in [0, 10001] {
        cfg.limits[0] = Some(bad);
        let e = s.check(&cfg).unwrap_err().to_string();
        assert!(e.contains("Q0") && e.contains("1 to 10000 Mb/s"), "{e}");
    }
    cfg.limits = vec![None; 3];
    assert!(s.check(&cfg).unwrap_err().to_string().contains("3 queues"));
}

/// Isolation ignores limits, so the oracle's "queue limit + the flow's rate" change wins
/// every tie; with flows leaving lazily (their share stays in the limit) and others joining,
/// that sum used to climb past the limiter's maximum. A flow below the limiter's minimum
/// gets the minimum.
#[test]
fn the_oracle_keeps_limits_within_the_limiters_range() {
    let m = Intel82599 { queues: 2 };
    let iso = Isolation { k: 1 };
    let mut p = Planner::new(&m, &iso, FlowMapMode::Incremental).unwrap();
    for round in 0..6u64 {
        let ids: Vec<usize> = generate_flows(2, round + 1, 0, 3000)
            .into_iter()
            .map(|f| p.add_flow(f).unwrap())
            .collect();
        for id in ids {
            p.remove_flow(id).unwrap();
        }
    }
    assert!(
        p.cfg
            .limits
            .iter()
            .flatten()
            .all(|r| (10..=10000).contains(r)),
        "{:?}",
        p.cfg.limits
    );
    m.check(&p.cfg).unwrap();
    let mut p = Planner::new(&m, &iso, FlowMapMode::Incremental).unwrap();
    p.add_flow(generate_flows(1, 1, 0, 4)[0]).unwrap();
    assert_eq!(
        p.cfg.limits.iter().flatten().max(),
        Some(&10),
        "{:?}",
        p.cfg.limits
    );
}

/// Numeric policy inputs that make no sense are refused, not silently clamped: isolation
/// with no high-priority queue or no best-effort one, a negative or NaN HP penalty.
#[test]
fn policy_parameters_out_of_range_are_refused() {
    let m = Intel82599 { queues: 4 };
    let flows = generate_flows(6, 1, 2, 0);
    for k in [0, 4, 9] {
        let e = full_search(&m, &Isolation { k }, FlowMapMode::Incremental, &flows, 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains(&format!("k={k}")) && e.contains("1 to 3"), "{e}");
    }
    for hp_penalty in [-1.0, f64::NAN, f64::INFINITY] {
        let e = full_search(
            &m,
            &Bandwidth { k: 1, hp_penalty },
            FlowMapMode::Incremental,
            &flows,
            0,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("hp_penalty"), "{e}");
    }
    full_search(&m, &Isolation { k: 3 }, FlowMapMode::Incremental, &flows, 0).unwrap();
}

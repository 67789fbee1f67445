//! The dataflow model and the NIC models: c-node expansion under the locality rule, the
//! thesis's Fig. 5.1 example, and model fidelity (the configured PRG and the per-queue
//! guarantees agree with each NIC's semantic function on every packet).

mod common;

use bessemer_planner::graph::{Dest, ModelError, Node, NodeKind, NodeRef, Subgraph};
use bessemer_planner::nic::{
    configured_prg, EthtoolNic, Filter, FilterKind, Intel82599, NicConfig, NicModel, Sfc9020,
    XdpPort,
};
use bessemer_planner::pred::{Conj, Field, Header, PROTO_UDP};
use proptest::prelude::*;

fn udp_dport(p: u32) -> Conj {
    Conj::eq(Field::IpProto, PROTO_UDP)
        .with(Field::DstPort, p, u32::MAX)
        .unwrap()
}

fn fig51() -> (Intel82599, NicConfig) {
    let m = Intel82599 { queues: 4 };
    let mut cfg = m.initial_config();
    cfg.rss.clear();
    for (p, q) in [(1053, 1), (67, 2), (53, 1)] {
        cfg.filters.push(Filter {
            kind: FilterKind::FiveTuple,
            matcher: udp_dport(p),
            dest: Dest::Queue(q),
        });
    }
    (m, cfg)
}

#[test]
fn fig_5_1_chain_and_guarantees() {
    let (m, cfg) = fig51();
    let g = configured_prg(&m, &cfg).unwrap();
    let text = g.to_text();
    let a = text.find("5T(proto=udp & dport=1053)").unwrap();
    let b = text.find("5T(proto=udp & dport=67)").unwrap();
    let c = text.find("5T(proto=udp & dport=53)").unwrap();
    assert!(a < b && b < c, "filters chained in order:\n{text}");
    let guarantees = g.guarantees();
    let q = |d: Dest| guarantees.iter().find(|(x, _)| *x == d).unwrap().1.clone();
    let h53 = Header::ipv4(PROTO_UDP, 1, 2, 999, 53);
    let h67 = Header::ipv4(PROTO_UDP, 1, 2, 999, 67);
    let h80 = Header::ipv4(PROTO_UDP, 1, 2, 999, 80);
    assert!(q(Dest::Queue(1)).eval(&h53) && !q(Dest::Queue(2)).eval(&h53));
    assert!(q(Dest::Queue(2)).eval(&h67) && !q(Dest::Queue(1)).eval(&h67));
    assert!(q(Dest::Queue(0)).eval(&h80));
    assert_eq!(
        q(Dest::Queue(3)).decide(100_000),
        Some(false),
        "nothing reaches Q3"
    );
    assert_eq!(g.trace(&h53), Some(Dest::Queue(1)));
    // The default queue's guarantee says what it will never see: IPv4 UDP to port 53.
    let dns = udp_dport(53)
        .with(Field::EtherType, 0x0800, u32::MAX)
        .unwrap();
    let not_dns = q(Dest::Queue(0)).and_term(&bessemer_planner::pred::Term::of(dns));
    assert_eq!(not_dns.decide(100_000), Some(false));
}

#[test]
fn locality_rule_rejects_edges_outside_the_c_node_neighbourhood() {
    let (m, cfg) = fig51();
    let mut g = configured_prg(&m, &cfg).unwrap();
    let before = g.to_text();
    let x = g.table("5tuple").unwrap();
    let stranger = g.root; // RxIn precedes x; it is not a successor.
    let bad = Subgraph {
        nodes: vec![(
            Node::new("Bad", NodeKind::F).port(bessemer_planner::graph::Port::new(
                "out",
                bessemer_planner::pred::Term::truth(),
                vec![],
            )),
            vec![vec![NodeRef::Old(stranger)]],
        )],
        entry: Some(NodeRef::New(0)),
    };
    match g.apply(x, bad) {
        Err(ModelError::Locality(msg)) => assert!(msg.contains("not a successor"), "{msg}"),
        other => panic!("expected a locality error, got {other:?}"),
    }
    assert_eq!(g.to_text(), before, "a rejected expansion changes nothing");
    assert_eq!(
        g.apply(g.root, Subgraph::default()).unwrap_err(),
        ModelError::NotConfigNode(g.root)
    );
}

#[test]
fn apply_then_undo_restores_the_graph() {
    let (m, cfg) = fig51();
    let mut g = configured_prg(&m, &cfg).unwrap();
    let before = (g.to_text(), g.incoming.clone());
    let f = Filter {
        kind: FilterKind::FiveTuple,
        matcher: udp_dport(80),
        dest: Dest::Queue(3),
    };
    let a = bessemer_planner::nic::add_filter(&m, &mut g, &f).unwrap();
    assert_eq!(
        g.trace(&Header::ipv4(PROTO_UDP, 1, 2, 3, 80)),
        Some(Dest::Queue(3))
    );
    g.undo(a);
    assert_eq!((g.to_text(), g.incoming.clone()), before);
    assert_eq!(
        g.trace(&Header::ipv4(PROTO_UDP, 1, 2, 3, 80)),
        Some(Dest::Queue(0))
    );
}

#[test]
fn hardware_constraints_are_enforced() {
    let m = Intel82599 { queues: 4 };
    let mut cfg = m.initial_config();
    let h = Header::ipv4(PROTO_UDP, 1, 2, 3, 4);
    cfg.filters.push(Filter {
        kind: FilterKind::FlowDirector,
        matcher: bessemer_planner::nic::exact_match(&h),
        dest: Dest::Queue(1),
    });
    cfg.filters.push(Filter {
        kind: FilterKind::FlowDirector,
        matcher: udp_dport(4),
        dest: Dest::Queue(1),
    });
    let e = configured_prg(&m, &cfg).unwrap_err().to_string();
    assert!(e.contains("global mask"), "{e}");
    let s = Sfc9020 { queues: 4 };
    let mut cfg = s.initial_config();
    cfg.filters.push(Filter {
        kind: FilterKind::SfWild,
        matcher: Conj::eq(Field::SrcIp, 1),
        dest: Dest::Queue(1),
    });
    let e = configured_prg(&s, &cfg).unwrap_err().to_string();
    assert!(e.contains("wildcards only the source"), "{e}");
    let mut cfg = s.initial_config();
    cfg.filters.push(Filter {
        kind: FilterKind::FiveTuple,
        matcher: udp_dport(4),
        dest: Dest::Queue(1),
    });
    assert!(configured_prg(&s, &cfg)
        .unwrap_err()
        .to_string()
        .contains("no 5T filters"));
}

/// The queue the configured PRG predicts, and the guarantee of every queue, agree with the
/// NIC's semantic function.
fn fidelity(m: &dyn NicModel, cfg: &NicConfig, packets: &[Header]) -> Result<(), TestCaseError> {
    let g = configured_prg(m, cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let guarantees = g.guarantees();
    for h in packets {
        let want = m.semantic(cfg, h);
        prop_assert_eq!(g.trace(h), Some(want), "{} {}", m.name(), h);
        for (d, pred) in &guarantees {
            prop_assert_eq!(pred.eval(h), *d == want, "guarantee of {} on {}", d, h);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fidelity_82599(cfg in common::config_82599(4), pkts in prop::collection::vec(common::header(), 1..40)) {
        fidelity(&Intel82599 { queues: 4 }, &cfg, &pkts)?;
    }

    #[test]
    fn fidelity_sfc9020(cfg in common::config_sfc(4), pkts in prop::collection::vec(common::header(), 1..40)) {
        fidelity(&Sfc9020 { queues: 4 }, &cfg, &pkts)?;
    }

    #[test]
    fn fidelity_ethtool_ntuple(cfg in common::config_ntuple(3, 8), pkts in prop::collection::vec(common::header(), 1..40)) {
        let nic = EthtoolNic { iface: "test0".into(), queues: 3, rss_size: 8, ntuple: true, ntuple_rules: 16, tx_maxrate: false, link_mbps: Some(10_000) };
        fidelity(&nic, &cfg, &pkts)?;
    }

    #[test]
    fn fidelity_xdp(cfg in common::config_xdp(4), pkts in prop::collection::vec(common::header(), 1..40)) {
        fidelity(&XdpPort { queues: 4, map_entries: 64 }, &cfg, &pkts)?;
    }
}

/// Every change the oracle suggests keeps the configuration within the NIC's constraints
/// (filter counts, the 82599's global FDir mask, the SFC9020's wildcard rule).
fn oracle_suggestions_are_valid(
    m: &dyn NicModel,
    cfg: &NicConfig,
    flow: &bessemer_planner::nic::FlowSpec,
) -> Result<(), TestCaseError> {
    for change in m.oracle(cfg, flow) {
        let mut next = cfg.clone();
        for a in &change {
            match a {
                bessemer_planner::nic::Action::AddFilter(f) => next.filters.push(*f),
                bessemer_planner::nic::Action::Replace { index, filter } => {
                    next.filters[*index] = *filter
                }
                bessemer_planner::nic::Action::SetLimit { queue, mbps } => {
                    next.limits[*queue as usize] = *mbps
                }
            }
        }
        prop_assert!(
            m.check(&next).is_ok(),
            "{}: {:?} -> {:?}",
            m.name(),
            change,
            m.check(&next)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn oracles_respect_hardware_constraints(cfg82 in common::config_82599(4), cfgsf in common::config_sfc(4),
                                            h in common::header(), bw in 0u32..2, full in any::<bool>()) {
        let flow = bessemer_planner::nic::FlowSpec { header: h, hp: false, bw_mbps: bw * 100 };
        let m = Intel82599 { queues: 4 };
        let mut cfg = cfg82;
        if full {
            // Fill the 5-tuple table so the oracle moves on to Flow Director.
            while cfg.filters.iter().filter(|f| f.kind == FilterKind::FiveTuple).count() < bessemer_planner::nic::I82599_5T {
                cfg.filters.insert(0, Filter { kind: FilterKind::FiveTuple, matcher: Conj::eq(Field::DstPort, 9), dest: Dest::Queue(0) });
            }
        }
        if m.check(&cfg).is_ok() {
            oracle_suggestions_are_valid(&m, &cfg, &flow)?;
            let kinds: Vec<FilterKind> = m.oracle(&cfg, &flow).iter().flatten().filter_map(|a| match a {
                bessemer_planner::nic::Action::AddFilter(f) => Some(f.kind), _ => None }).collect();
            // Flow Director only once the 5-tuple filters are used up, and then no more
            // 5-tuple filters.
            prop_assert!(!kinds.contains(&FilterKind::FiveTuple) || !full);
            prop_assert!(!kinds.contains(&FilterKind::FlowDirector) || full);
            prop_assert!(full || kinds.contains(&FilterKind::FiveTuple));
        }
        let s = Sfc9020 { queues: 4 };
        if s.check(&cfgsf).is_ok() && h.get(Field::EtherType) == 0x0800 {
            oracle_suggestions_are_valid(&s, &cfgsf, &flow)?;
        }
    }
}

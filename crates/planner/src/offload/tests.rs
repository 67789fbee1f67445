use super::*;
use bessemer_core::Value;

fn five_tuple() -> Vec<Field> {
    [(23, 1), (26, 4), (30, 4), (34, 2), (36, 2)]
        .iter()
        .map(|&(o, n)| Field {
            offset: Some(o),
            size: n,
            mask: vec![0xff; n],
        })
        .collect()
}

fn rule(i: u8, gate: Option<u16>) -> Rule {
    Rule {
        fields: vec![
            vec![17],
            vec![10, 0, 0, i],
            vec![10, 0, 1, 1],
            vec![0x10, i],
            vec![0, 53],
        ],
        gate,
    }
}

fn module(class: &str, node: Node, ogates: &[(u16, &str)]) -> Module {
    Module {
        class: class.into(),
        node,
        ogates: ogates.iter().map(|(g, m)| (*g, m.to_string())).collect(),
    }
}

fn port(driver: &str, ifname: &str, ifindex: u32, netns: &str) -> PortInfo {
    PortInfo {
        driver: driver.into(),
        ifname: ifname.into(),
        ifindex,
        netns: netns.into(),
    }
}

/// p0 -> em: gate 0 -> swap -> out1 (p1), gate 1 -> sink, gate 2 -> nat (user), gate 3
/// -> out0 (p0, TX), gate 4 unconnected, default gate 2.
fn view(rules: Vec<Rule>) -> View {
    let mut v = View {
        port: "p0".into(),
        entries: vec!["em".into(), "em".into()],
        ..View::default()
    };
    v.ports
        .insert("p0".into(), port("AFXDPPort", "veth0", 7, ""));
    v.ports
        .insert("p1".into(), port("AFXDPPort", "veth1", 9, ""));
    v.ports
        .insert("pk".into(), port("AFPacketPort", "veth2", 11, ""));
    let em = Node::ExactMatch {
        fields: five_tuple(),
        has_values: false,
        rules,
        default_gate: Some(2),
    };
    for (n, m) in [
        (
            "em",
            module(
                "ExactMatch",
                em,
                &[(0, "swap"), (1, "sink"), (2, "nat"), (3, "out0")],
            ),
        ),
        ("swap", module("MACSwap", Node::MacSwap, &[(0, "out1")])),
        (
            "out1",
            module("PortOut", Node::PortOut { port: "p1".into() }, &[]),
        ),
        (
            "out0",
            module("PortOut", Node::PortOut { port: "p0".into() }, &[]),
        ),
        ("sink", module("Sink", Node::Sink, &[])),
        (
            "nat",
            module(
                "NAT",
                Node::Other {
                    class: "NAT".into(),
                },
                &[(0, "out1")],
            ),
        ),
    ] {
        v.modules.insert(n.into(), m);
    }
    v
}

#[test]
fn gates_get_the_actions_their_chains_allow() {
    let v = view(vec![
        rule(1, Some(0)),
        rule(2, Some(1)),
        rule(3, Some(2)),
        rule(4, Some(3)),
        rule(5, Some(4)),
        rule(6, None),
    ]);
    let p = v.plan();
    assert_eq!(p.none_why, None);
    assert_eq!(p.classifier.as_deref(), Some("em"));
    assert_eq!(p.key.len(), 13);
    assert_eq!(p.key[0], (23, 0xff));
    assert_eq!(p.key[1], (26, 0xff));
    let g0 = p.gate(0);
    assert_eq!(g0.action.kind, Kind::Redirect(0));
    assert!(g0.action.mac_swap);
    assert_eq!(
        g0.chain,
        vec![
            ("em".to_string(), Some(0)),
            ("swap".to_string(), Some(0)),
            ("out1".to_string(), None)
        ]
    );
    assert_eq!(p.devs, vec![("p1".to_string(), 9, String::new())]);
    assert_eq!(p.gate(1).action.kind, Kind::Drop);
    assert_eq!(p.gate(2).action.kind, Kind::User);
    assert!(p.gate(2).why.contains("NAT"), "{}", p.gate(2).why);
    assert_eq!(p.gate(3).action.kind, Kind::Tx);
    assert_eq!(p.gate(4).action.kind, Kind::Drop);
    assert_eq!(p.gate(4).chain, vec![("em".to_string(), None)]);
    assert_eq!(
        p.gate(4).drop,
        Some(("em".to_string(), "deadend".to_string()))
    );
    assert_eq!(p.gate(DROP_RULE).action.kind, Kind::Drop);
    assert_eq!(p.default.action.kind, Kind::User);
    assert_eq!(p.rules.len(), 6);
    // Rule 1's key: proto, sip, dip, sport, dport, zero padding.
    let RuleKey::Exact(k) = p.rules[0].0 else {
        panic!("{:?}", p.rules[0].0)
    };
    assert_eq!(&k[..14], &[17, 10, 0, 0, 1, 10, 0, 1, 1, 0x10, 1, 0, 53, 0]);
    let t = p.text();
    assert!(t.contains("XDP_REDIRECT"), "{t}");
    assert!(t.contains("23,26..37"), "{t}");
}

#[test]
fn what_cannot_be_offloaded_says_why() {
    let mut v = view(vec![rule(1, Some(0))]);
    v.entries.push("swap".into());
    assert!(v.plan().none_why.unwrap().contains("different modules"));

    let mut v = view(vec![]);
    v.entries.clear();
    assert!(v.plan().none_why.unwrap().contains("no PortInc"));

    let mut v = view(vec![]);
    if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
        fields[0].offset = None;
    }
    assert!(v.plan().none_why.unwrap().contains("metadata attribute"));

    let mut v = view(vec![]);
    if let Node::ExactMatch { has_values, .. } = &mut v.modules.get_mut("em").unwrap().node {
        *has_values = true;
    }
    assert!(v.plan().none_why.unwrap().contains("values"));

    let mut v = view(vec![]);
    if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
        fields.push(Field {
            offset: Some(40),
            size: 8,
            mask: vec![0xff; 8],
        });
        fields.push(Field {
            offset: Some(48),
            size: 8,
            mask: vec![0xff; 8],
        });
        fields.push(Field {
            offset: Some(56),
            size: 8,
            mask: vec![0xff; 8],
        });
    }
    assert!(v.plan().none_why.unwrap().contains("37 bytes"));

    // A PortOut to a non-AF_XDP port, or to another namespace, stays in user space.
    let mut v = view(vec![rule(1, Some(0))]);
    v.modules.get_mut("out1").unwrap().node = Node::PortOut { port: "pk".into() };
    let p = v.plan();
    assert_eq!(p.gate(0).action.kind, Kind::User);
    assert!(p.gate(0).why.contains("AFPacketPort"), "{}", p.gate(0).why);
    let mut v = view(vec![rule(1, Some(0))]);
    v.ports.get_mut("p1").unwrap().netns = "other".into();
    assert!(v.plan().gate(0).why.contains("namespace"));
}

#[test]
fn without_classifier_every_packet_takes_the_chain() {
    let mut v = view(vec![]);
    v.entries = vec!["swap".into()];
    let p = v.plan();
    assert!(p.key.is_empty());
    assert_eq!(p.default.action.kind, Kind::Redirect(0));
    assert!(p.default.action.mac_swap);
    assert_eq!(p.default.chain[0].0, "swap");
    assert_eq!(&p.config_bytes(0)[0..4], &0u32.to_ne_bytes());
    assert_eq!(p.config_bytes(0)[8], 3); // K_REDIRECT
}

#[test]
fn masks_apply_to_keys_and_the_layout() {
    let mut v = view(vec![rule(0xff, Some(1))]);
    if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
        fields[1].mask = vec![0xff, 0xff, 0xff, 0xf0];
    }
    let p = v.plan();
    assert_eq!(p.key[4], (29, 0xf0));
    assert!(matches!(p.rules[0].0, RuleKey::Exact(k) if k[4] == 0xf0));
    let c = p.config_bytes(0);
    assert_eq!(&c[0..4], &13u32.to_ne_bytes());
    assert_eq!(&c[4..8], &0u32.to_ne_bytes()); // masked: the generic gather
    assert_eq!(
        &view(vec![]).plan().config_bytes(0)[4..8],
        &1u32.to_ne_bytes()
    );
    assert_eq!(&c[32 + 8..34 + 8], &29u16.to_ne_bytes());
    assert_eq!(c[96 + 4], 0xf0);
}

#[test]
fn overflowing_rules_send_misses_up() {
    let rules: Vec<Rule> = (0..MAX_RULES + 3)
        .map(|i| Rule {
            fields: vec![
                vec![17],
                (i as u32).to_be_bytes().to_vec(),
                vec![0; 4],
                vec![0; 2],
                vec![0; 2],
            ],
            gate: Some(1),
        })
        .collect();
    let mut v = view(rules);
    if let Node::ExactMatch { default_gate, .. } = &mut v.modules.get_mut("em").unwrap().node {
        *default_gate = Some(1);
    }
    let p = v.plan();
    assert_eq!(p.rules.len(), MAX_RULES);
    assert_eq!(p.overflow, 3);
    assert_eq!(p.default.action.kind, Kind::User);
}

#[test]
fn sync_keeps_slots_and_sends_only_changes() {
    let mut st = OffloadState::new();
    let v = view(vec![rule(1, Some(0)), rule(2, Some(1))]);
    let ops = st.sync(&v.plan());
    let puts = ops
        .iter()
        .filter(|o| matches!(o, MapOp::Put { .. }))
        .count();
    assert_eq!(puts, 2);
    assert!(ops.iter().any(|o| matches!(
        o,
        MapOp::Dev {
            slot: 0,
            ifindex: 9,
            ..
        }
    )));
    assert!(matches!(ops.last(), Some(MapOp::Config(_))));
    let slot_of = |st: &OffloadState, i: u8| {
        let p = view(vec![rule(i, Some(0))]).plan();
        st.rules[&p.rules[0].0].0
    };
    let s1 = slot_of(&st, 1);
    let s2 = slot_of(&st, 2);
    assert_ne!(s1, s2);
    assert!(s1 >= FIRST_RULE_SLOT && s2 >= FIRST_RULE_SLOT);

    // The same plan again: nothing to do.
    assert!(st.sync(&v.plan()).is_empty());

    // Delete rule 1, add rule 3: rule 2 keeps its slot, rule 3 reuses rule 1's after
    // a reset, and the delete carries the chain its counts belong to.
    let v = view(vec![rule(2, Some(1)), rule(3, Some(0))]);
    let ops = st.sync(&v.plan());
    match &ops[0] {
        MapOp::Delete { slot, chain, .. } => {
            assert_eq!(*slot, s1);
            assert_eq!(chain[0], ("em".to_string(), Some(0)));
        }
        o => panic!("first op {o:?}"),
    }
    assert!(ops.contains(&MapOp::ResetCounter(s1)));
    assert_eq!(slot_of(&st, 2), s2);
    assert_eq!(slot_of(&st, 3), s1);
    assert_eq!(st.len(), 2);

    // A gate re-pointed: the rule's action is rewritten in place, same slot.
    let mut v = view(vec![rule(2, Some(1)), rule(3, Some(0))]);
    v.modules
        .get_mut("em")
        .unwrap()
        .ogates
        .insert(1, "out0".into());
    let ops = st.sync(&v.plan());
    assert_eq!(ops.len(), 1, "{ops:?}");
    match &ops[0] {
        MapOp::Put { action, .. } => {
            assert_eq!(action[0], 2); // K_TX
            assert_eq!(&action[12..16], &s2.to_ne_bytes());
        }
        o => panic!("{o:?}"),
    }

    // Clear: every rule deleted, the slots listed for retiring.
    let ops = st.sync(&view(vec![]).plan());
    assert_eq!(
        ops.iter()
            .filter(|o| matches!(o, MapOp::Delete { .. }))
            .count(),
        2
    );
    assert!(st.is_empty());
    assert_eq!(st.slots().len(), 1);
}

/// p0 -> `root` (the node given); gate 0 -> upd (Update) -> push (VLANPush) -> out1,
/// gate 1 -> pop (VLANPop) -> swap -> out0, gate 2 -> nat (user).
fn chain_view(root: Node, class: &str) -> View {
    let mut v = view(vec![]);
    v.entries = vec!["cls".into()];
    for (n, m) in [
        (
            "cls",
            module(class, root, &[(0, "upd"), (1, "pop"), (2, "nat")]),
        ),
        (
            "upd",
            module(
                "Update",
                Node::Update {
                    fields: vec![(30, 4, 0x0a00_0001), (100, 2, 7)],
                },
                &[(0, "push")],
            ),
        ),
        (
            "push",
            module("VLANPush", Node::VlanPush { tci: 0x0064 }, &[(0, "out1")]),
        ),
        ("pop", module("VLANPop", Node::VlanPop, &[(0, "swap")])),
        ("swap", module("MACSwap", Node::MacSwap, &[(0, "out0")])),
    ] {
        v.modules.insert(n.into(), m);
    }
    v
}

fn routes() -> Node {
    Node::IpLookup {
        routes: vec![
            Route {
                prefix: 0x0a00_0000,
                len: 8,
                gate: Some(0),
            },
            Route {
                prefix: 0x0a01_0000,
                len: 16,
                gate: Some(1),
            },
            Route {
                prefix: 0x0a01_0200,
                len: 24,
                gate: None,
            },
        ],
        default_gate: None,
    }
}

#[test]
fn ip_lookup_routes_become_lpm_entries_with_rewrite_chains() {
    let p = chain_view(routes(), "IPLookup").plan();
    assert_eq!(p.none_why, None);
    assert_eq!(p.cls, Cls::Lpm);
    assert!(p.key.is_empty());
    assert_eq!(p.rules.len(), 3);
    assert_eq!(
        p.rules[1].0,
        RuleKey::Prefix {
            addr: 0x0a01_0000,
            len: 16
        }
    );
    // struct lpm_key: prefixlen (host order), then the address in network order.
    assert_eq!(
        p.rules[1].0.bytes(),
        [16u32.to_ne_bytes().as_slice(), &[10, 1, 0, 0]].concat()
    );
    assert_eq!(p.rules[1].0.map(), "lpm");
    let g0 = p.gate(0);
    assert_eq!(g0.action.kind, Kind::Redirect(0));
    assert_eq!(
        g0.action.rewrite,
        vec![
            Op::Write {
                offset: 30,
                bytes: vec![10, 0, 0, 1],
                need: 102
            },
            Op::Write {
                offset: 100,
                bytes: vec![0, 7],
                need: 102
            },
            Op::Push(0x64)
        ]
    );
    assert_eq!(prog_min_len(&g0.action.rewrite), 102);
    let g1 = p.gate(1);
    assert_eq!(g1.action.kind, Kind::Tx);
    assert_eq!(g1.action.rewrite, vec![Op::Pop, Op::MacSwap]);
    assert!(!g1.action.mac_swap, "the swap is in the program");
    // After a pop of up to 4 bytes the swap still needs 18.
    assert_eq!(prog_min_len(&g1.action.rewrite), 22);
    assert_eq!(p.gate(DROP_RULE).action.kind, Kind::Drop);
    assert_eq!(
        p.gate(DROP_RULE).drop,
        Some(("cls".to_string(), "rule_drop".to_string()))
    );
    // No /0 route: a miss is IPLookup's no_match drop, done in the kernel.
    assert_eq!(p.default.action.kind, Kind::Drop);
    assert_eq!(
        p.default.drop,
        Some(("cls".to_string(), "no_match".to_string()))
    );
    let c = p.config_bytes(0);
    assert_eq!(&c[128..132], &1u32.to_ne_bytes());
    let t = p.text();
    assert!(t.contains("IPLookup"), "{t}");
    assert!(t.contains("after rewrites"), "{t}");
}

fn wild(rules: Vec<(u8, u8, i32, Option<u16>)>) -> Node {
    // One 4-byte field at 30 (IPv4 destination); rules (value of the first byte, mask of
    // the first byte, priority, gate).
    Node::WildcardMatch {
        fields: vec![Field {
            offset: Some(30),
            size: 4,
            mask: vec![0xff; 4],
        }],
        has_values: false,
        rules: rules
            .into_iter()
            .map(|(v, m, priority, gate)| WildRule {
                values: vec![vec![v & m, 0, 0, 0]],
                masks: vec![vec![m, 0, 0, 0]],
                priority,
                gate,
            })
            .collect(),
        default_gate: Some(2),
    }
}

#[test]
fn wildcard_rules_go_to_one_tuple_per_mask() {
    let p = chain_view(
        wild(vec![
            (10, 0xff, 5, Some(0)),
            (11, 0xff, 5, Some(1)),
            (8, 0xf8, 7, None),
            (0, 0, -3, Some(1)),
        ]),
        "WildcardMatch",
    )
    .plan();
    assert_eq!(p.none_why, None);
    assert_eq!(p.cls, Cls::Wild);
    assert_eq!(p.key, vec![(30, 0xff), (31, 0xff), (32, 0xff), (33, 0xff)]);
    assert_eq!(p.wmasks.len(), 3);
    assert_eq!(p.wmasks[1][..4], [0xf8, 0, 0, 0]);
    let mut k = [0u8; KEY_MAX];
    k[0] = 8;
    assert_eq!(
        p.rules[2],
        (RuleKey::Masked { mask: 1, key: k }, DROP_RULE, biased(7))
    );
    assert_eq!(p.rules[3].2, biased(-3));
    assert!(biased(-3) < biased(5) && biased(5) < biased(7));
    assert_eq!(p.default.action.kind, Kind::User, "gate 2 is NAT");
    let c = p.config_bytes(0);
    assert_eq!(&c[128..132], &2u32.to_ne_bytes());
    assert_eq!(&c[132..136], &3u32.to_ne_bytes());
    assert_eq!(c[136 + 32], 0xf8);
    assert_eq!(p.rules[0].0.bytes().len(), 4 + KEY_MAX);
}

#[test]
fn wildcard_tables_the_program_cannot_search_stay_in_user_space() {
    // Nine masks.
    let rules = (0..9)
        .map(|i| (0, (0xff00u16 >> i) as u8, i, Some(0)))
        .collect();
    let why = chain_view(wild(rules), "WildcardMatch")
        .plan()
        .none_why
        .unwrap();
    assert!(why.contains("9 distinct masks"), "{why}");

    // Equal priorities under different masks that can match one packet: the module's
    // tie order (mask creation) is not known to the planner.
    let why = chain_view(
        wild(vec![(10, 0xff, 5, Some(0)), (8, 0xf8, 5, Some(1))]),
        "WildcardMatch",
    )
    .plan()
    .none_why
    .unwrap();
    assert!(why.contains("priority 5"), "{why}");
    // Equal priorities that cannot overlap are fine.
    let p = chain_view(
        wild(vec![(10, 0xff, 5, Some(0)), (16, 0xf8, 5, Some(1))]),
        "WildcardMatch",
    )
    .plan();
    assert_eq!(p.none_why, None);

    // valuesv (rewrites on a hit) and metadata fields stay in user space.
    let mut n = wild(vec![]);
    if let Node::WildcardMatch { has_values, .. } = &mut n {
        *has_values = true;
    }
    let why = chain_view(n, "WildcardMatch").plan().none_why.unwrap();
    assert!(why.contains("values"), "{why}");
}

#[test]
fn vlan_split_gates_are_vid_keys_with_the_pop_first() {
    let mut v = chain_view(Node::VlanSplit, "VLANSplit");
    v.modules
        .get_mut("cls")
        .unwrap()
        .ogates
        .insert(100, "swap".into());
    let p = v.plan();
    assert_eq!(p.none_why, None);
    assert_eq!(p.cls, Cls::Vlan);
    assert_eq!(&p.config_bytes(0)[128..132], &3u32.to_ne_bytes());
    // Gates 0, 1, 2 (nat), 100.
    assert_eq!(p.rules.len(), 4);
    let mut k = [0u8; KEY_MAX];
    k[1] = 100;
    assert!(p.rules.contains(&(RuleKey::Exact(k), 100, 0)));
    assert_eq!(p.gate(100).action.rewrite, vec![Op::Pop, Op::MacSwap]);
    assert_eq!(
        p.gate(1).action.rewrite,
        vec![Op::Pop, Op::Pop, Op::MacSwap]
    );
    assert_eq!(prog_min_len(&p.gate(1).action.rewrite), 26);
    assert_eq!(p.gate(2).action.kind, Kind::User);
    // Another VID: its gate is unconnected, a deadend drop.
    assert_eq!(p.default.action.kind, Kind::Drop);
    assert_eq!(
        p.default.drop,
        Some(("cls".to_string(), "deadend".to_string()))
    );
    assert!(p.text().contains("VLANSplit"));
}

/// A BPF filter compiled by libpcap, as the module's `get_programs` reports it.
fn bpf_filter(expr: &str, gate: u16) -> BpfFilter {
    let program = bessemer_modules::classify::bpf::compile(expr)
        .unwrap()
        .iter()
        .map(|i| CbpfInsn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    BpfFilter {
        expr: expr.into(),
        gate,
        program,
    }
}

#[test]
fn bpf_filters_run_in_the_kernel_with_one_key_per_gate() {
    let filters = vec![
        bpf_filter("udp dst port 53", 1),
        bpf_filter("tcp[tcpflags] & tcp-syn != 0", 0),
        bpf_filter("vlan and udp", 2),
        bpf_filter("ip proto 47", 1),
        bpf_filter("len > 1000", 7),
    ];
    let v = chain_view(
        Node::Bpf {
            filters: filters.clone(),
        },
        "BPF",
    );
    let p = v.plan();
    assert_eq!(p.none_why, None, "{}", p.text());
    assert_eq!(p.cls, Cls::Bpf);
    assert_eq!(p.filters, filters);
    // Gates 0, 1, 2, 7: one key each; no match is gate 0, the default.
    let key = |g: u16| {
        let mut k = [0u8; KEY_MAX];
        k[..2].copy_from_slice(&g.to_be_bytes());
        RuleKey::Exact(k)
    };
    assert_eq!(p.rules.len(), 4);
    for g in [0u16, 1, 2, 7] {
        assert!(p.rules.contains(&(key(g), g, 0)), "{:?}", p.rules);
    }
    assert_eq!(p.default.chain[0], ("cls".to_string(), Some(0)));
    assert_eq!(p.gate(1).action.kind, Kind::Tx);
    assert_eq!(p.gate(2).action.kind, Kind::User);
    // Gate 7 is unconnected: dropped as the module's deadend.
    assert_eq!(p.gate(7).action.kind, Kind::Drop);
    assert_eq!(
        p.gate(7).drop,
        Some(("cls".to_string(), "deadend".to_string()))
    );
    let n: usize = filters.iter().map(|f| f.program.len()).sum();
    let c = p.config_bytes(0);
    assert_eq!(&c[128..132], &4u32.to_ne_bytes());
    assert_eq!(&c[392..396], &5u32.to_ne_bytes());
    assert_eq!(&c[396..400], &(n as u32 + 5 + 1).to_ne_bytes());
    let b = filters[0].to_bytes();
    assert_eq!(&b[0..4], &(filters[0].program.len() as u32).to_ne_bytes());
    assert_eq!(&b[4..6], &1u16.to_ne_bytes());
    assert_eq!(&b[8..10], &filters[0].program[0].code.to_ne_bytes());
    assert!(p.text().contains("(BPF), 5 filter(s)"), "{}", p.text());

    // Syncs: the filters go to the bank the configuration does not name, then the
    // configuration switches; unchanged filters are not rewritten.
    let mut st = OffloadState::new();
    let ops = st.sync(&p);
    let slots: Vec<u32> = ops
        .iter()
        .filter_map(|o| match o {
            MapOp::Filter { slot, .. } => Some(*slot),
            _ => None,
        })
        .collect();
    assert_eq!(slots, (32..37).collect::<Vec<_>>());
    let cfg_at = ops.iter().position(|o| matches!(o, MapOp::Config(_)));
    let MapOp::Config(c) = &ops[cfg_at.unwrap()] else {
        unreachable!()
    };
    assert_eq!(&c[400..404], &1u32.to_ne_bytes());
    assert!(ops
        .iter()
        .skip(cfg_at.unwrap())
        .all(|o| !matches!(o, MapOp::Filter { .. } | MapOp::Put { .. })));
    assert!(st.sync(&p).is_empty());
    // A filter deleted: the other bank, and gate 7's key goes after the switch.
    let mut fewer = filters.clone();
    fewer.pop();
    let p2 = chain_view(Node::Bpf { filters: fewer }, "BPF").plan();
    let ops = st.sync(&p2);
    let slots: Vec<u32> = ops
        .iter()
        .filter_map(|o| match o {
            MapOp::Filter { slot, .. } => Some(*slot),
            _ => None,
        })
        .collect();
    assert_eq!(slots, (0..4).collect::<Vec<_>>());
    let cfg_at = ops
        .iter()
        .position(|o| matches!(o, MapOp::Config(_)))
        .unwrap();
    let del_at = ops
        .iter()
        .position(|o| matches!(o, MapOp::Delete { key: k, .. } if *k == key(7)))
        .unwrap();
    assert!(del_at > cfg_at, "{ops:?}");
}

#[test]
fn bpf_modules_beyond_the_programs_bounds_say_why() {
    let plan = |filters: Vec<BpfFilter>| chain_view(Node::Bpf { filters }, "BPF").plan();
    // No filters: everything leaves by gate 0, in the kernel too.
    let p = plan(vec![]);
    assert_eq!(p.none_why, None);
    assert!(p.rules.is_empty());
    assert_eq!(p.default.action.kind, Kind::Redirect(0));
    // 32 filters are run, 33 are not.
    let many = |n| (0..n).map(|i| bpf_filter("udp", i as u16 % 3)).collect();
    assert_eq!(plan(many(CBPF_FILTERS)).none_why, None);
    let p = plan(many(CBPF_FILTERS + 1));
    let why = p.none_why.clone().unwrap();
    assert!(why.contains("33 filters") && why.contains("32"), "{why}");
    assert!(!p.offloads_anything());
    assert!(p.text().contains("nothing offloaded"));
    // A program of more than 256 instructions.
    let mut long = bpf_filter("udp", 1);
    let ret = *long.program.last().unwrap();
    long.program = vec![ret; CBPF_INSNS + 1];
    let why = plan(vec![long]).none_why.unwrap();
    assert!(why.contains("257 instructions"), "{why}");
    // An instruction the interpreter does not run (a BPF extension load), a jump out
    // of the program, no final return.
    let mut ext = bpf_filter("udp", 1);
    ext.program[0].code = 0x20 | 0x40 | 0x80;
    let why = plan(vec![ext]).none_why.unwrap();
    assert!(why.contains("not one the program runs"), "{why}");
    let mut jump = bpf_filter("udp", 1);
    let j = jump.program.iter().position(|i| i.code == 0x15).unwrap();
    jump.program[j].jf = 250;
    let why = plan(vec![jump]).none_why.unwrap();
    assert!(why.contains("jumps out"), "{why}");
    let mut noret = bpf_filter("udp", 1);
    noret.program.push(CbpfInsn {
        code: 0x87,
        jt: 0,
        jf: 0,
        k: 0,
    });
    let why = plan(vec![noret]).none_why.unwrap();
    assert!(why.contains("does not end with a return"), "{why}");
    // Every opcode libpcap emits for these expressions is one the program runs.
    for e in [
        "udp dst port 53",
        "tcp and src net 10.0.0.0/8",
        "ip proto 47",
        "vlan and udp",
        "ip[8] < 5",
        "len > 1000",
        "ether host 02:00:00:00:00:01",
        "tcp[tcpflags] & tcp-syn != 0",
        "ip6 and tcp port 80",
        "icmp[icmptype] = icmp-echo",
        "ip[2:2] % 7 = 3 or ip[6:2] / 3 > 9 or ip[0] * 2 - 1 ^ 5 = ip[1] >> 1",
    ] {
        assert_eq!(plan(vec![bpf_filter(e, 1)]).none_why, None, "{e}");
    }
}

#[test]
fn an_overflowing_lpm_or_wildcard_table_is_not_offloaded() {
    // A missing /32 would let its /8 match instead: the whole table stays up.
    let routes = (0..MAX_RULES as u32 + 1)
        .map(|i| Route {
            prefix: 0x0a00_0000 | i,
            len: 32,
            gate: Some(0),
        })
        .collect();
    let v = chain_view(
        Node::IpLookup {
            routes,
            default_gate: None,
        },
        "IPLookup",
    );
    let p = v.plan();
    let why = p.none_why.unwrap();
    assert!(why.contains("65537 rules"), "{why}");
    assert!(p.rules.is_empty() && p.classifier.is_none());
}

#[test]
fn rewrite_chains_the_program_cannot_run_go_up() {
    // 25 operations: more than the program runs.
    let mut v = chain_view(routes(), "IPLookup");
    v.modules.get_mut("upd").unwrap().node = Node::Update {
        fields: (0..24).map(|i| (14 + i, 1, 0)).collect(),
    };
    let g = v.plan().gate(0).clone();
    assert_eq!(g.action.kind, Kind::User);
    assert!(g.why.contains("25 operations"), "{}", g.why);
    // A second classifier behind the first.
    let mut v = chain_view(routes(), "IPLookup");
    v.modules.get_mut("push").unwrap().node = wild(vec![]);
    let g = v.plan().gate(0).clone();
    assert_eq!(g.action.kind, Kind::User);
    assert!(g.why.contains("after the first module"), "{}", g.why);
}

#[test]
fn rewrite_programs_get_stable_slots() {
    let mut st = OffloadState::new();
    let v = chain_view(routes(), "IPLookup");
    let ops = st.sync(&v.plan());
    let progs: Vec<_> = ops
        .iter()
        .filter_map(|o| match o {
            MapOp::Prog { slot, prog } => Some((*slot, *prog)),
            _ => None,
        })
        .collect();
    assert_eq!(progs.len(), 2);
    let first_put = ops
        .iter()
        .position(|o| matches!(o, MapOp::Put { .. }))
        .unwrap();
    let last_prog = ops
        .iter()
        .rposition(|o| matches!(o, MapOp::Prog { .. }))
        .unwrap();
    assert!(
        last_prog < first_put,
        "programs before the rules naming them"
    );
    // The /16 route (gate 1: pop, swap) names its program's slot.
    let p = v.plan();
    let pop = prog_bytes(&p.gate(1).action.rewrite);
    let slot = progs.iter().find(|x| x.1 == pop).unwrap().0;
    let put = ops
        .iter()
        .find_map(|o| match o {
            MapOp::Put {
                key: RuleKey::Prefix { len: 16, .. },
                action,
            } => Some(*action),
            _ => None,
        })
        .unwrap();
    assert_eq!(&put[16..20], &slot.to_ne_bytes());
    assert_eq!(pop[2], 2); // two operations
    assert_eq!(&pop[0..2], &22u16.to_ne_bytes());
    // Again: nothing to do. A changed TCI: one new program and the gate-0 rule moved.
    assert!(st.sync(&p).is_empty());
    let mut v = chain_view(routes(), "IPLookup");
    v.modules.get_mut("push").unwrap().node = Node::VlanPush { tci: 5 };
    let ops = st.sync(&v.plan());
    assert_eq!(
        ops.iter()
            .filter(|o| matches!(o, MapOp::Prog { .. }))
            .count(),
        1
    );
    assert_eq!(
        ops.iter()
            .filter(|o| matches!(o, MapOp::Put { .. }))
            .count(),
        1,
        "{ops:?}"
    );
}

#[test]
fn chains_beyond_the_program_slots_go_up_and_are_not_counted_twice() {
    // 300 gates, each VLANPush with its own TCI: 255 programs fit.
    let mut v = view(vec![]);
    v.entries = vec!["vs".into()];
    let mut ogates = Vec::new();
    for g in 0..300u16 {
        let name = format!("push{g}");
        v.modules.insert(
            name.clone(),
            module("VLANPush", Node::VlanPush { tci: g }, &[(0, "out1")]),
        );
        ogates.push((g, name));
    }
    let og: Vec<(u16, &str)> = ogates.iter().map(|(g, n)| (*g, n.as_str())).collect();
    v.modules
        .insert("vs".into(), module("VLANSplit", Node::VlanSplit, &og));
    let p = v.plan();
    assert_eq!(p.rules.len(), 300);
    let mut st = OffloadState::new();
    let ops = st.sync(&p);
    let progs = ops
        .iter()
        .filter(|o| matches!(o, MapOp::Prog { .. }))
        .count();
    assert_eq!(progs, PROG_SLOTS - 1);
    let up = ops
        .iter()
        .filter(|o| matches!(o, MapOp::Put { action, .. } if action[0] == 0))
        .count();
    assert_eq!(up, 300 - (PROG_SLOTS - 1));
    let counted = st.counted();
    assert_eq!(
        counted.iter().filter(|(_, (c, _))| c.is_empty()).count(),
        300 - (PROG_SLOTS - 1),
        "the kernel counts only what it does"
    );
}

#[test]
fn action_bytes_match_the_c_layout() {
    let a = Action {
        kind: Kind::Redirect(5),
        mac_swap: true,
        set_dmac: Some([1, 2, 3, 4, 5, 6]),
        rewrite: Vec::new(),
    };
    let b = a.to_bytes(77, 4, 9);
    assert_eq!(b[0], 3);
    assert_eq!(b[1], 3);
    assert_eq!(&b[2..8], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(&b[8..12], &5u32.to_ne_bytes());
    assert_eq!(&b[12..16], &77u32.to_ne_bytes());
    assert_eq!(&b[16..20], &4u32.to_ne_bytes());
    assert_eq!(&b[20..24], &9u32.to_ne_bytes());
}

#[test]
fn a_bpf_programs_answer_is_read_in_order_and_a_bad_one_names_its_field() {
    let insn = |code: i64, k: i64| {
        Value::map()
            .with("code", code)
            .with("jt", 0)
            .with("jf", 0)
            .with("k", k)
    };
    let filter = |expr: &str, gate: i64, prog: Vec<Value>| {
        Value::map()
            .with("filter", expr)
            .with("gate", gate)
            .with("program", Value::List(prog))
    };
    let answer = Value::map().with(
        "filters",
        Value::List(vec![
            filter("udp", 3, vec![insn(0x28, 12), insn(0x06, 0xffff)]),
            filter("ip", 1, vec![insn(0x06, 0)]),
        ]),
    );
    let got = BpfFilter::list_from_answer(&answer).unwrap();
    assert_eq!(
        got.iter()
            .map(|f| (f.expr.as_str(), f.gate, f.program.len()))
            .collect::<Vec<_>>(),
        vec![("udp", 3, 2), ("ip", 1, 1)]
    );
    assert_eq!(got[0].program[1].k, 0xffff);
    let bad = Value::map().with(
        "filters",
        Value::List(vec![Value::map().with("filter", "udp").with("gate", 1)]),
    );
    let err = BpfFilter::list_from_answer(&bad).unwrap_err();
    assert!(err.contains("'program'"), "{err}");
    assert!(BpfFilter::list_from_answer(&Value::map())
        .unwrap_err()
        .contains("'filters'"));
}

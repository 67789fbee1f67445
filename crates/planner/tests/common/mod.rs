//! Random configurations and packets for the planner's tests.
#![allow(dead_code)]

use bessemer_planner::graph::Dest;
use bessemer_planner::nic::{exact_match, match_fields, Filter, FilterKind, NicConfig, FIVE};
use bessemer_planner::pred::{Conj, Field, Header, PROTO_TCP, PROTO_UDP};
use proptest::prelude::*;

/// Small value pools make filters and packets collide often.
pub const IPS: [u32; 4] = [0x0a00_0001, 0x0a00_0002, 0x0a00_0103, 0xc0a8_0001];
/// Ports in the pool.
pub const PORTS: [u32; 4] = [53, 67, 80, 1053];

/// A random packet header from the pools; sometimes not IPv4, sometimes ICMP.
pub fn header() -> impl Strategy<Value = Header> {
    (
        0usize..10,
        0usize..4,
        0usize..4,
        0usize..4,
        0usize..4,
        0u32..6,
        any::<bool>(),
    )
        .prop_map(|(p, s, d, sp, dp, rxq, tcp)| {
            let proto = match p {
                0 => 1,
                _ if tcp => PROTO_TCP,
                _ => PROTO_UDP,
            };
            let mut h = Header::ipv4(proto, IPS[s], IPS[d], PORTS[sp], PORTS[dp]);
            if p == 9 {
                h.set(Field::EtherType, 0x86dd);
                h.recompute_rss();
            }
            h.set(Field::RxQueue, rxq);
            h
        })
}

/// Which fields of a filter are wildcarded (bit i = FIVE[i]).
pub fn with_wildcards(h: &Header, wild: u8) -> Conj {
    let fields: Vec<Field> = FIVE
        .iter()
        .enumerate()
        .filter(|(i, _)| wild & (1 << i) == 0)
        .map(|(_, f)| *f)
        .collect();
    match_fields(h, &fields)
}

/// A random RSS table over `queues`.
pub fn rss(queues: u16, size: usize) -> impl Strategy<Value = Vec<u16>> {
    prop::collection::vec(0..queues, size)
}

/// A random 82599 configuration.
pub fn config_82599(queues: u16) -> impl Strategy<Value = NicConfig> {
    (
        prop::collection::vec((header(), 0u8..32, 0..queues), 0..6),
        any::<bool>(),
        prop::collection::vec((header(), 0..queues), 0..6),
        rss(queues, 128),
    )
        .prop_map(move |(five, fdir_wild, fdir, rss)| {
            let mut filters: Vec<Filter> = five
                .into_iter()
                .map(|(h, w, q)| Filter {
                    kind: FilterKind::FiveTuple,
                    matcher: with_wildcards(&h, w),
                    dest: Dest::Queue(q),
                })
                .collect();
            let fields: &[Field] = if fdir_wild {
                &[Field::IpProto, Field::DstIp, Field::DstPort]
            } else {
                &FIVE
            };
            for (h, q) in fdir {
                filters.push(Filter {
                    kind: FilterKind::FlowDirector,
                    matcher: match_fields(&h, fields),
                    dest: Dest::Queue(q),
                });
            }
            NicConfig {
                filters,
                rss,
                limits: vec![None; queues as usize],
            }
        })
}

/// A random SFC9020 configuration (keys made unique).
pub fn config_sfc(queues: u16) -> impl Strategy<Value = NicConfig> {
    (
        prop::collection::vec((header(), any::<bool>(), 0..queues), 0..8),
        rss(queues, 128),
    )
        .prop_map(move |(fs, rss)| {
            let mut filters: Vec<Filter> = Vec::new();
            for (h, wild, q) in fs {
                let (kind, matcher) = if wild {
                    (
                        FilterKind::SfWild,
                        match_fields(&h, &[Field::IpProto, Field::DstIp, Field::DstPort]),
                    )
                } else {
                    (FilterKind::SfFull, exact_match(&h))
                };
                if !filters
                    .iter()
                    .any(|f| f.kind == kind && f.matcher == matcher)
                {
                    filters.push(Filter {
                        kind,
                        matcher,
                        dest: Dest::Queue(q),
                    });
                }
            }
            NicConfig {
                filters,
                rss,
                limits: vec![None; queues as usize],
            }
        })
}

/// A random generic-ntuple configuration (arbitrary masks, drop allowed).
pub fn config_ntuple(queues: u16, rss_size: usize) -> impl Strategy<Value = NicConfig> {
    (
        prop::collection::vec((header(), 0u8..32, 0..=queues, 0u32..4), 0..6),
        rss(queues, rss_size),
    )
        .prop_map(move |(fs, rss)| NicConfig {
            filters: fs
                .into_iter()
                .map(|(h, w, q, pm)| {
                    let mut matcher = with_wildcards(&h, w);
                    // Partial masks on the destination address (a prefix) exercise masks.
                    if pm > 0 && matcher.m[Field::DstIp.index()] != 0 {
                        let m = u32::MAX << (8 * pm);
                        matcher.m[Field::DstIp.index()] = m;
                        matcher.v[Field::DstIp.index()] &= m;
                    }
                    Filter {
                        kind: FilterKind::Ntuple,
                        matcher,
                        dest: if q == queues {
                            Dest::Drop
                        } else {
                            Dest::Queue(q)
                        },
                    }
                })
                .collect(),
            rss,
            limits: vec![None; queues as usize],
        })
}

/// A random XDP map.
pub fn config_xdp(queues: u16) -> impl Strategy<Value = NicConfig> {
    prop::collection::vec((header(), 0..queues + 2), 0..8).prop_map(move |es| {
        let mut filters: Vec<Filter> = Vec::new();
        for (h, d) in es {
            let matcher = exact_match(&h);
            if filters.iter().any(|f| f.matcher == matcher) {
                continue;
            }
            let dest = match d {
                q if q < queues => Dest::Queue(q),
                q if q == queues => Dest::Drop,
                _ => Dest::Kernel,
            };
            filters.push(Filter {
                kind: FilterKind::XdpEntry,
                matcher,
                dest,
            });
        }
        NicConfig {
            filters,
            rss: vec![],
            limits: vec![None; queues as usize],
        }
    })
}

//! The cases of the classes with tables (ExactMatch, L2Forward, IPLookup, WildcardMatch, ACL,
//! BPF), each at several sizes.

use super::*;

/// Number of key records in a stream: enough that the sequence does not sit in cache.
pub(super) fn stream_len(entries: usize) -> usize {
    (entries * 4).clamp(1 << 16, 1 << 22)
}

pub(super) fn exact_match_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            // A flow key: IPv4 src, dst and both UDP ports (12 bytes at offset 26).
            let mut rng = FastRng::new(0xE3 + n as u64);
            let keys: Vec<[u8; 12]> = (0..n)
                .map(|_| {
                    let mut k = [0u8; 12];
                    k[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                    k[8..].copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                    k
                })
                .collect();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                data.extend_from_slice(&keys[rng.below(n as u64) as usize]);
            }
            let field = |o: i64| Value::map().with("offset", o).with("num_bytes", 4);
            Case::table(
                format!("ExactMatch {n} entries"),
                format!("exact_match_{n}"),
                "ExactMatch",
                Value::map().with("fields", Value::List(vec![field(26), field(30), field(34)])),
            )
            .setup(move |g, ctx, m| {
                let mut rng = FastRng::new(7);
                for k in &keys {
                    let f = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
                    let arg = Value::map().with("gate", rng.below(GATES)).with(
                        "fields",
                        Value::List(vec![f(&k[..4]), f(&k[4..8]), f(&k[8..])]),
                    );
                    g.command(m, "add", &arg, ctx).unwrap();
                }
            })
            .stream(26, 12, data)
            .target((n >= 1_000_000).then_some(25.0))
        })
        .collect()
}

pub(super) fn l2_forward_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x12 + n as u64);
            let mut macs: Vec<[u8; 6]> = (0..n)
                .map(|_| {
                    let b = rng.next_u64().to_le_bytes();
                    [b[0] & 0xfe, b[1], b[2], b[3], b[4], b[5]]
                })
                .collect();
            macs.sort();
            macs.dedup();
            let m = macs.len();
            let mut data = Vec::with_capacity(stream_len(n) * 6);
            for _ in 0..stream_len(n) {
                data.extend_from_slice(&macs[rng.below(m as u64) as usize]);
            }
            // About half the slots used, as a sized table would be.
            let size = (n / 2).next_power_of_two().max(1);
            Case::table(
                format!("L2Forward {n} entries"),
                format!("l2_forward_{n}"),
                "L2Forward",
                Value::map().with("size", size).with("bucket", 4),
            )
            .setup(move |g, ctx, name| {
                let mut rng = FastRng::new(9);
                for chunk in macs.chunks(1024) {
                    let entries = chunk
                        .iter()
                        .map(|a| {
                            let s: Vec<String> = a.iter().map(|b| format!("{b:02x}")).collect();
                            Value::map()
                                .with("addr", s.join(":"))
                                .with("gate", rng.below(GATES))
                        })
                        .collect();
                    let arg = Value::map().with("entries", Value::List(entries));
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(0, 6, data)
        })
        .collect()
}

/// Prefix lengths roughly as in an Internet routing table: mostly /24, few beyond.
pub(super) fn prefix_len(rng: &mut FastRng) -> u8 {
    match rng.below(100) {
        0 => 8 + rng.below(8) as u8,
        1..=3 => 16,
        4..=19 => 17 + rng.below(5) as u8,
        20..=29 => 22,
        30..=41 => 23,
        42..=96 => 24,
        _ => 25 + rng.below(8) as u8,
    }
}

pub(super) fn ip_lookup_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x1F + n as u64);
            let mut seen = std::collections::HashSet::new();
            let mut prefixes: Vec<(u32, u8)> = Vec::with_capacity(n);
            while prefixes.len() < n {
                let len = prefix_len(&mut rng);
                let p = (rng.next_u64() as u32) & (u32::MAX << (32 - len as u32));
                if seen.insert((p, len)) {
                    prefixes.push((p, len));
                }
            }
            // Destinations inside random prefixes (random host bits).
            let mut data = Vec::with_capacity(stream_len(n) * 4);
            for _ in 0..stream_len(n) {
                let (p, len) = prefixes[rng.below(n as u64) as usize];
                let host = (rng.next_u64() as u32) & !(u32::MAX << (32 - len as u32));
                data.extend_from_slice(&(p | host).to_be_bytes());
            }
            Case::table(
                format!("IPLookup {n} prefixes"),
                format!("ip_lookup_{n}"),
                "IPLookup",
                Value::map()
                    .with("max_rules", (n as u64).max(1024))
                    .with("max_tbl8s", ((n / 8) as u64).max(128)),
            )
            .setup(move |g, ctx, name| {
                let mut rng = FastRng::new(11);
                for &(p, len) in &prefixes {
                    let arg = Value::map()
                        .with("prefix", std::net::Ipv4Addr::from(p).to_string())
                        .with("prefix_len", len as u64)
                        .with("gate", rng.below(GATES));
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(30, 4, data)
            .target((n >= 1_000_000).then_some(30.0))
        })
        .collect()
}

pub(super) fn wildcard_match_cases(rules: &[usize]) -> Vec<Case> {
    // Fields: protocol (1), IPv4 src (4), dst (4), UDP src port (2), dst port (2).
    // Ten masks: address prefixes of various lengths, with and without ports.
    let masks: [[u64; 5]; 10] = [
        [0, 0xffff_ff00, 0, 0, 0],
        [0, 0, 0xffff_ff00, 0, 0],
        [0, 0xffff_0000, 0xffff_0000, 0, 0],
        [0xff, 0, 0, 0, 0xffff],
        [0xff, 0xffff_ffff, 0xffff_ffff, 0xffff, 0xffff],
        [0, 0xff00_0000, 0, 0, 0],
        [0, 0, 0xffff_fff0, 0, 0xffff],
        [0xff, 0xffff_ff00, 0, 0xffff, 0],
        [0, 0, 0, 0xff00, 0],
        [0xff, 0, 0xffff_ffff, 0, 0],
    ];
    rules
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x33 + n as u64);
            // Rule i uses mask i % 10: values random under the mask.
            let rule_vals: Vec<(usize, [u64; 5], i64, u64)> = (0..n)
                .map(|i| {
                    let m = masks[i % masks.len()];
                    let mut v = [0u64; 5];
                    for f in 0..5 {
                        v[f] = rng.next_u64() & m[f];
                    }
                    (i % masks.len(), v, rng.below(1000) as i64, rng.below(GATES))
                })
                .collect();
            // Packets: a random rule's values, random bits where its mask is zero. Bytes
            // 23..38 of the frame: proto, checksum (2), src, dst, ports.
            let mut data = Vec::with_capacity(stream_len(n) * 15);
            for _ in 0..stream_len(n) {
                let (mi, v, _, _) = rule_vals[rng.below(n as u64) as usize];
                let m = masks[mi];
                let mut rec = [0u8; 15];
                let fill = |rng: &mut FastRng, f: usize| v[f] | (rng.next_u64() & !m[f]);
                rec[0] = fill(&mut rng, 0) as u8;
                rec[3..7].copy_from_slice(&(fill(&mut rng, 1) as u32).to_be_bytes());
                rec[7..11].copy_from_slice(&(fill(&mut rng, 2) as u32).to_be_bytes());
                rec[11..13].copy_from_slice(&(fill(&mut rng, 3) as u16).to_be_bytes());
                rec[13..15].copy_from_slice(&(fill(&mut rng, 4) as u16).to_be_bytes());
                data.extend_from_slice(&rec);
            }
            let field = |o: i64, s: usize| Value::map().with("offset", o).with("num_bytes", s);
            let fd = |x: u64| Value::map().with("value_int", Value::Int(x as i64));
            Case::table(
                format!("WildcardMatch {n} rules / 10 masks"),
                format!("wildcard_match_{n}"),
                "WildcardMatch",
                Value::map().with(
                    "fields",
                    Value::List(vec![
                        field(23, 1),
                        field(26, 4),
                        field(30, 4),
                        field(34, 2),
                        field(36, 2),
                    ]),
                ),
            )
            .setup(move |g, ctx, name| {
                for (mi, v, prio, gate) in &rule_vals {
                    let arg = Value::map()
                        .with("gate", *gate)
                        .with("priority", *prio)
                        .with("values", Value::List(v.iter().map(|&x| fd(x)).collect()))
                        .with(
                            "masks",
                            Value::List(masks[*mi].iter().map(|&x| fd(x)).collect()),
                        );
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(23, 15, data)
            .target((n == 100).then_some(25.0))
        })
        .collect()
}

/// `a.b.c.d` of a host-order address.
pub(super) fn ip4(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// A 12-byte record for offset 26: IPv4 source, destination, UDP source and destination port.
pub(super) fn flow_rec(src: u32, dst: u32, sport: u16, dport: u16) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..4].copy_from_slice(&src.to_be_bytes());
    r[4..8].copy_from_slice(&dst.to_be_bytes());
    r[8..10].copy_from_slice(&sport.to_be_bytes());
    r[10..].copy_from_slice(&dport.to_be_bytes());
    r
}

pub(super) fn acl_cases(rules: &[usize]) -> Vec<Case> {
    // Rule i: source 10.(i / 256).(i % 256).0/24, destination a random /16, destination port
    // 1024 + i, any source port; every fourth rule denies, the others allow. Each packet is
    // made for one allowing rule chosen uniformly at random (source inside its /24, destination
    // inside its /16, its port) and matches that rule only: the first-match scan reads on
    // average half the list before deciding, and no packet is dropped.
    rules
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0xAC + n as u64);
            let rs: Vec<(u32, u32, u16, bool)> = (0..n)
                .map(|i| {
                    let src = 0x0a00_0000 | ((i as u32) << 8);
                    let dst = (rng.next_u64() as u32) & 0xffff_0000;
                    (src, dst, 1024 + i as u16, i % 4 == 3)
                })
                .collect();
            let allow: Vec<usize> = (0..n).filter(|&i| !rs[i].3).collect();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                let (src, dst, dport, _) = rs[allow[rng.below(allow.len() as u64) as usize]];
                let h = rng.next_u64();
                data.extend_from_slice(&flow_rec(
                    src | (h as u32 & 0xff),
                    dst | ((h >> 8) as u32 & 0xffff),
                    1024 + (h >> 32) as u16 % 60000,
                    dport,
                ));
            }
            let list = rs
                .iter()
                .map(|&(src, dst, dport, drop)| {
                    Value::map()
                        .with("src_ip", format!("{}/24", ip4(src)))
                        .with("dst_ip", format!("{}/16", ip4(dst)))
                        .with("src_port", 0u64)
                        .with("dst_port", dport as u64)
                        .with("drop", drop)
                })
                .collect::<Vec<Value>>();
            Case::table(
                format!("ACL {n} rules"),
                format!("acl_{n}"),
                "ACL",
                Value::map().with("rules", list),
            )
            .stream(26, 12, data)
            .target((n == 1000).then_some(20.0))
            .note(
                "ACL, BPF: each packet matches one rule / filter, chosen uniformly at random \
                 (ACL: among the allowing ones; every fourth rule denies): on average half the \
                 list is scanned before the decision",
            )
        })
        .collect()
}

pub(super) fn bpf_cases(filters: &[usize]) -> Vec<Case> {
    // Filter i (priority n - i, so evaluated in index order; gate random): `udp dst port
    // 1024+i` for even i, `src net 10.(i / 256).(i % 256).0/24 and udp` for odd i. Each packet
    // is made for one filter chosen uniformly at random and matches only it (port filters'
    // packets come from 172.16/12, net filters' packets go to ports 40000 and up): a packet
    // runs on average half the programs before its match. Compiling is set-up.
    filters
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0xBF + n as u64);
            let list = (0..n)
                .map(|i| {
                    let f = if i.is_multiple_of(2) {
                        format!("udp dst port {}", 1024 + i)
                    } else {
                        format!("src net 10.{}.{}.0/24 and udp", i / 256, i % 256)
                    };
                    Value::map()
                        .with("priority", (n - i) as i64)
                        .with("filter", f)
                        .with("gate", rng.below(GATES))
                })
                .collect::<Vec<Value>>();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                let i = rng.below(n as u64) as u32;
                let h = rng.next_u64();
                let dst = 0xc0a8_0000 | (h as u32 & 0xffff);
                let sport = 1024 + (h >> 16) as u16 % 60000;
                let rec = if i.is_multiple_of(2) {
                    let src = 0xac10_0000 | ((h >> 32) as u32 & 0x000f_ffff);
                    flow_rec(src, dst, sport, 1024 + i as u16)
                } else {
                    let src = 0x0a00_0000 | (i << 8) | ((h >> 32) as u32 & 0xff);
                    flow_rec(src, dst, sport, 40000 + (h >> 40) as u16 % 20000)
                };
                data.extend_from_slice(&rec);
            }
            Case::table(
                format!("BPF {n} filters"),
                format!("bpf_{n}"),
                "BPF",
                Value::map().with("filters", list),
            )
            .stream(26, 12, data)
            .target(match n {
                10 => Some(40.0),
                100 => Some(20.0),
                _ => None,
            })
            .note(
                "ACL, BPF: each packet matches one rule / filter, chosen uniformly at random \
                 (ACL: among the allowing ones; every fourth rule denies): on average half the \
                 list is scanned before the decision",
            )
        })
        .collect()
}

//! One case (or one per mode) of every other class that processes packets.

use super::*;

/// `count` records of `width` bytes, each filled by `f`.
pub(super) fn records(
    seed: u64,
    count: usize,
    width: usize,
    mut f: impl FnMut(&mut FastRng, &mut [u8]),
) -> Vec<u8> {
    let mut rng = FastRng::new(seed);
    let mut data = vec![0u8; count * width];
    for rec in data.chunks_mut(width) {
        f(&mut rng, rec);
    }
    data
}

/// Random IPv4 5-tuple parts (offset 26: addresses and ports), one per packet.
pub(super) fn random_flows(seed: u64) -> Vec<u8> {
    records(seed, 1 << 16, 12, |rng, r| {
        let (a, b) = (rng.next_u64(), rng.next_u64());
        r.copy_from_slice(&flow_rec(
            0x0a00_0000 | (a as u32 & 0x00ff_ffff),
            (a >> 32) as u32,
            1024 + b as u16 % 60000,
            1 + (b >> 16) as u16 % 1024,
        ));
    })
}

/// Output gates 0..GATES as a list argument.
pub(super) fn gate_list(n: u64) -> Value {
    Value::List((0..n).map(|g| Value::Int(g as i64)).collect())
}

/// A MetadataTest argument reading (or writing) the named attributes.
pub(super) fn md_test(mode: &str, attrs: &[(&str, i64)]) -> Value {
    Value::map().with(
        mode,
        Value::Map(
            attrs
                .iter()
                .map(|&(n, s)| (n.to_string(), Value::Int(s)))
                .collect(),
        ),
    )
}

/// A SetMetadata argument of constant attributes: (name, size, bytes).
pub(super) fn set_md(attrs: &[(&str, usize, &[u8])]) -> Value {
    Value::map().with(
        "attrs",
        attrs
            .iter()
            .map(|&(n, size, v)| {
                Value::map()
                    .with("name", n)
                    .with("size", size)
                    .with("value_bin", v.to_vec())
            })
            .collect::<Vec<Value>>(),
    )
}

/// Footnote of the cases with metadata stages.
pub(super) const METADATA_NOTE: &str =
    "metadata: the classes that read attributes (EtherEncap, IPEncap, \
     VXLANEncap, GenericEncap) come after a SetMetadata writing them, those that write attributes \
     (SetMetadata, IPEncap, VXLANEncap, VXLANDecap) before a MetadataTest reading them (else the \
     writes would be skipped); both stages are in the baseline too";

/// One case per class whose cost does not depend on a table, each in a typical configuration
/// (the `conf/modules/<class>.bess` samples'), with traffic it passes without drops.
pub(super) fn other_cases() -> Vec<Case> {
    let mac1: &[u8] = &[2, 0, 0, 0, 0, 1];
    let mac2: &[u8] = &[2, 0, 0, 0, 0, 2];
    let nat_flows = 100_000usize;
    vec![
        // Basic.
        Case::new("Bypass", "bypass", "Bypass", Value::map()),
        Case::new("Merge", "merge", "Merge", Value::map()),
        Case::new(
            "Replicate to 2 gates",
            "replicate_2",
            "Replicate",
            Value::map().with("gates", gate_list(2)),
        )
        .note(
            "Replicate: per input packet; every packet leaves twice (gates 0 and 1), so the \
             cost includes one clone and a second packet freed by Sink",
        ),
        Case::new(
            "RoundRobin 4 gates, per packet",
            "round_robin_4",
            "RoundRobin",
            Value::map().with("gates", gate_list(GATES)),
        ),
        Case::new(
            "RandomSplit 4 gates, drop_rate 0",
            "random_split_4",
            "RandomSplit",
            Value::map()
                .with("drop_rate", 0.0)
                .with("gates", gate_list(GATES)),
        ),
        Case::new(
            "Split on 1 data byte (4 gates)",
            "split_4",
            "Split",
            Value::map().with("size", 1u64).with("offset", 42),
        )
        .stream(
            42,
            1,
            records(0x5b, 1 << 16, 1, |rng, r| r[0] = rng.below(GATES) as u8),
        ),
        Case::new(
            "WorkerSplit (worker 0 -> gate 0)",
            "worker_split",
            "WorkerSplit",
            Value::map(),
        ),
        Case::new(
            "MetadataTest (writes 2 attributes)",
            "metadata_test",
            "MetadataTest",
            md_test("write", &[("flow_id", 4), ("color", 1)]),
        ),
        Case::new("Buffer", "buffer", "Buffer", Value::map()),
        // Rewriting.
        Case::new(
            "Rewrite 4 templates",
            "rewrite_4",
            "Rewrite",
            Value::map().with(
                "templates",
                (0..4u8)
                    .map(|i| {
                        let mut t = template();
                        t[33] = 2 + i;
                        Value::Bytes(t)
                    })
                    .collect::<Vec<Value>>(),
            ),
        ),
        Case::new(
            "Update 2 fields",
            "update_2",
            "Update",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("offset", 26)
                        .with("size", 4u64)
                        .with("value", 0x0a00_0063u64),
                    Value::map()
                        .with("offset", 34)
                        .with("size", 2u64)
                        .with("value", 5000u64),
                ],
            ),
        ),
        Case::new(
            "RandomUpdate 2 fields",
            "random_update_2",
            "RandomUpdate",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("offset", 26)
                        .with("size", 4u64)
                        .with("min", 0x0a00_0000u64)
                        .with("max", 0x0aff_ffffu64),
                    Value::map()
                        .with("offset", 34)
                        .with("size", 2u64)
                        .with("min", 1024u64)
                        .with("max", 65535u64),
                ],
            ),
        ),
        Case::new(
            "SetMetadata 2 attrs (constant, from data)",
            "set_metadata_2",
            "SetMetadata",
            Value::map().with(
                "attrs",
                vec![
                    Value::map()
                        .with("name", "ether_src")
                        .with("size", 6u64)
                        .with("value_bin", mac1.to_vec()),
                    Value::map()
                        .with("name", "flow_src")
                        .with("size", 4u64)
                        .with("offset", 26),
                ],
            ),
        )
        .post(
            "MetadataTest",
            md_test("read", &[("ether_src", 6), ("flow_src", 4)]),
        )
        .note(METADATA_NOTE),
        Case::new("MACSwap", "mac_swap", "MACSwap", Value::map()),
        Case::new("IPSwap", "ip_swap", "IPSwap", Value::map()),
        Case::new("UpdateTTL", "update_ttl", "UpdateTTL", Value::map()),
        Case::new(
            "IPChecksum (compute)",
            "ip_checksum",
            "IPChecksum",
            Value::map(),
        ),
        Case::new(
            "L4Checksum (compute, UDP)",
            "l4_checksum",
            "L4Checksum",
            Value::map(),
        ),
        Case::new(
            format!("NAT int->ext, {nat_flows} flows"),
            format!("nat_{nat_flows}"),
            "NAT",
            Value::map().with(
                "ext_addrs",
                (1..=4u32)
                    .map(|i| {
                        Value::map().with("ext_addr", ip4(0xcb00_7100 | i)).with(
                            "port_ranges",
                            vec![Value::map().with("begin", 1024u64).with("end", 65535u64)],
                        )
                    })
                    .collect::<Vec<Value>>(),
            ),
        )
        .stream(26, 12, {
            let mut rng = FastRng::new(0x4a7);
            let flows: Vec<[u8; 12]> = (0..nat_flows)
                .map(|_| {
                    let (a, b) = (rng.next_u64(), rng.next_u64());
                    flow_rec(
                        0x0a00_0000 | (a as u32 & 0xffff),
                        0x0808_0000 | ((a >> 32) as u32 & 0xffff),
                        1024 + b as u16 % 60000,
                        if b >> 63 == 0 { 53 } else { 443 },
                    )
                })
                .collect();
            records(0x4a8, stream_len(nat_flows), 12, |rng, r| {
                r.copy_from_slice(&flows[rng.below(nat_flows as u64) as usize])
            })
        })
        .note(
            "NAT: packets on input 0 (internal -> external) from 100 000 flows (random internal \
             source address and port) over 4 external addresses; mappings are made in the \
             warm-up, so the runs measure lookups and rewrites",
        ),
        Case::new(
            "StaticNAT int->ext, one /16 pair",
            "static_nat",
            "StaticNAT",
            Value::map().with(
                "pairs",
                vec![Value::map()
                    .with(
                        "int_range",
                        Value::map()
                            .with("start", "10.0.0.0")
                            .with("end", "10.0.255.255"),
                    )
                    .with(
                        "ext_range",
                        Value::map()
                            .with("start", "198.18.0.0")
                            .with("end", "198.18.255.255"),
                    )],
            ),
        )
        .stream(
            26,
            4,
            records(0x5a7, 1 << 16, 4, |rng, r| {
                r.copy_from_slice(&(0x0a00_0000 | (rng.next_u64() as u32 & 0xffff)).to_be_bytes())
            }),
        ),
        // Timestamps.
        Case::new(
            "Timestamp (offset 42)",
            "timestamp",
            "Timestamp",
            Value::map().with("offset", 42),
        ),
        Case::new(
            "Measure (offset 42)",
            "measure",
            "Measure",
            Value::map().with("offset", 42),
        )
        .pre("Timestamp", Value::map().with("offset", 42))
        .note("Measure: after a Timestamp at the same offset (in the baseline too)"),
        // Encapsulation.
        Case::new("EtherEncap", "ether_encap", "EtherEncap", Value::map())
            .pre(
                "SetMetadata",
                set_md(&[
                    ("ether_src", 6, mac1),
                    ("ether_dst", 6, mac2),
                    ("ether_type", 2, &[0x08, 0x00]),
                ]),
            )
            .note(METADATA_NOTE),
        Case::new("IPEncap", "ip_encap", "IPEncap", Value::map())
            .pre(
                "SetMetadata",
                set_md(&[
                    ("ip_src", 4, &[10, 0, 0, 1]),
                    ("ip_dst", 4, &[10, 0, 0, 2]),
                    ("ip_proto", 1, &[17]),
                ]),
            )
            .post(
                "MetadataTest",
                md_test("read", &[("ip_nexthop", 4), ("ether_type", 2)]),
            )
            .note(METADATA_NOTE),
        Case::new(
            "VXLANEncap",
            "vxlan_encap",
            "VXLANEncap",
            Value::map().with("dstport", 4789u64),
        )
        .pre(
            "SetMetadata",
            set_md(&[
                ("tun_ip_src", 4, &[192, 168, 0, 1]),
                ("tun_ip_dst", 4, &[192, 168, 0, 2]),
                ("tun_id", 4, &[0, 0, 0, 100]),
            ]),
        )
        .post(
            "MetadataTest",
            md_test("read", &[("ip_src", 4), ("ip_dst", 4), ("ip_proto", 1)]),
        )
        .note(METADATA_NOTE),
        Case::new(
            "VXLANDecap (110-byte VXLAN frames)",
            "vxlan_decap",
            "VXLANDecap",
            Value::map(),
        )
        .template(vxlan_template())
        .post(
            "MetadataTest",
            md_test(
                "read",
                &[("tun_ip_src", 4), ("tun_ip_dst", 4), ("tun_id", 4)],
            ),
        )
        .note(METADATA_NOTE),
        Case::new(
            "GenericEncap 3 fields (8 bytes)",
            "generic_encap",
            "GenericEncap",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("size", 4u64)
                        .with("value", Value::map().with("value_int", 0xdead_beefu64)),
                    Value::map().with("size", 2u64).with("attribute", "foo"),
                    Value::map()
                        .with("size", 2u64)
                        .with("value", Value::map().with("value_int", 0x1234u64)),
                ],
            ),
        )
        .pre("SetMetadata", set_md(&[("foo", 2, &[0xab, 0xcd])]))
        .note(METADATA_NOTE),
        Case::new(
            "GenericDecap 14 bytes",
            "generic_decap",
            "GenericDecap",
            Value::map().with("bytes", 14u64),
        ),
        Case::new(
            "VLANPush",
            "vlan_push",
            "VLANPush",
            Value::map().with("tci", 100u64),
        ),
        Case::new(
            "VLANPop (64-byte tagged frames)",
            "vlan_pop",
            "VLANPop",
            Value::map(),
        )
        .template(vlan_template()),
        Case::new(
            "VLANSplit (64-byte tagged, VIDs 0-3)",
            "vlan_split",
            "VLANSplit",
            Value::map(),
        )
        .template(vlan_template())
        .stream(
            14,
            2,
            records(0x715, 1 << 16, 2, |rng, r| {
                r.copy_from_slice(&(rng.below(GATES) as u16).to_be_bytes())
            }),
        ),
        Case::new(
            "MPLSPop (64-byte MPLS frames)",
            "mpls_pop",
            "MPLSPop",
            Value::map().with("next_eth_type", 0x0800u64),
        )
        .template(mpls_template()),
        // Classification without a table.
        Case::new(
            "HashLB l2, 4 gates",
            "hash_lb_l2",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l2"),
        )
        .stream(
            0,
            12,
            records(0x4b2, 1 << 16, 12, |rng, r| {
                r[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                r[8..].copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                r[0] &= 0xfe;
                r[6] &= 0xfe;
            }),
        ),
        Case::new(
            "HashLB l3, 4 gates",
            "hash_lb_l3",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l3"),
        )
        .stream(26, 12, random_flows(0x4b3)),
        Case::new(
            "HashLB l4, 4 gates",
            "hash_lb_l4",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l4"),
        )
        .stream(26, 12, random_flows(0x4b4)),
        Case::new(
            "UrlFilter, UDP (not inspected)",
            "url_filter_udp",
            "UrlFilter",
            url_filter_arg(),
        )
        .stream(26, 12, random_flows(0x0f1)),
        Case::new(
            "UrlFilter, TCP of flows never seen",
            "url_filter_tcp",
            "UrlFilter",
            url_filter_arg(),
        )
        .template(tcp_template())
        .stream(26, 12, random_flows(0x0f2))
        .note(
            "UrlFilter: the non-HTTP paths on input 0: UDP (parsed, passed) and TCP ACKs of \
             flows whose SYN it never saw (parsed, one flow-table miss, passed)",
        ),
    ]
}

pub(super) fn url_filter_arg() -> Value {
    Value::map().with(
        "blacklist",
        vec![Value::map()
            .with("host", "example.com")
            .with("path", "/secret")],
    )
}

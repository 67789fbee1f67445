//! IPEncap: prepends an IPv4 header built from metadata attributes.
use bessemer_core::{AccessMode, Args, Context, Instance, Module, ModuleClass, PacketBatch, Value};

use crate::headers::{put_ipv4_header, ETHERTYPE_IPV4, IPV4_MIN_LEN};
use crate::util::add_attrs;
use crate::util::{process_each, Verdict};

const ATTR_SRC: usize = 0;
const ATTR_DST: usize = 1;
const ATTR_PROTO: usize = 2;
const ATTR_NEXTHOP: usize = 3;
const ATTR_ETHER_TYPE: usize = 4;

bessemer_core::drop_reasons! {
    /// Why IPEncap drops packets.
    pub enum IpEncapDrop {
        NoHeadroom = "no_headroom",
    }
}

// A packet never exceeds its frame, so the IPv4 total length always fits in 16 bits.
const _: () = assert!(bessemer_core::packet::FRAME_SIZE + IPV4_MIN_LEN <= u16::MAX as usize);

/// Flags/fragment word with only Don't Fragment set (as BESS sends).
const IPV4_DF: u16 = 0x4000;
const DEFAULT_TTL: u8 = 64;

/// Prepends a 20-byte IPv4 header (TTL 64, DF, no options, id 0) with source `ip_src`,
/// destination `ip_dst` and protocol `ip_proto` from metadata; then sets `ip_nexthop` to
/// the destination and `ether_type` to IPv4 for an EtherEncap downstream.
pub struct IpEncap;

impl Module for IpEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let (src, dst, proto) = (ctx.attr(ATTR_SRC), ctx.attr(ATTR_DST), ctx.attr(ATTR_PROTO));
        let (nexthop, ether_type) = (ctx.attr(ATTR_NEXTHOP), ctx.attr(ATTR_ETHER_TYPE));
        process_each(ctx, batch, |p| {
            let s: [u8; 4] = p.get_attr(src);
            let d: [u8; 4] = p.get_attr(dst);
            let [pr]: [u8; 1] = p.get_attr(proto);
            let total = (p.len() + IPV4_MIN_LEN) as u16;
            // BESS leaves a packet without headroom unchanged; we drop and count it instead.
            let Some(h) = p.prepend(IPV4_MIN_LEN) else {
                return Verdict::Drop(IpEncapDrop::NoHeadroom);
            };
            put_ipv4_header(h, total, IPV4_DF, DEFAULT_TTL, pr, s, d);
            p.set_attr(nexthop, &d);
            p.set_attr(ether_type, &ETHERTYPE_IPV4.to_be_bytes());
            Verdict::Gate(0)
        });
    }
}

/// The IPEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPEncap",
    name_template: "ip_encap",
    help: "prepends an IPv4 header taken from metadata attributes",
    arg_type: "IPEncapArg",
    arg_doc: &[
        "(no fields) — reads metadata ip_src (4 bytes, network order), ip_dst (4), ip_proto (1); writes ip_nexthop (4) and ether_type (2, = 0x0800)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: IpEncapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        Args::new(arg, "IPEncapArg")?.finish()?;
        add_attrs(
            init,
            &[
                ("ip_src", 4, AccessMode::Read),
                ("ip_dst", 4, AccessMode::Read),
                ("ip_proto", 1, AccessMode::Read),
                ("ip_nexthop", 4, AccessMode::Write),
                ("ether_type", 2, AccessMode::Write),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(IpEncap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::ether_encap;
    use crate::encap::testutil::{hex, set_meta, EAT_HEADROOM};
    use crate::rewrite::set_metadata;
    use bessemer_core::testing::Harness;
    use smoltcp::wire::Ipv4Packet;

    fn setup(h: &mut Harness) {
        let meta = set_meta(&[
            ("ip_src", &hex("0a000001")),
            ("ip_dst", &hex("0a000002")),
            ("ip_proto", &hex("11")),
            ("ether_src", &hex("020000000001")),
            ("ether_dst", &hex("020000000002")),
        ]);
        h.add(&set_metadata::CLASS, "set", &meta).unwrap();
        h.add(&CLASS, "ip", &Value::Null).unwrap();
        h.add(&ether_encap::CLASS, "eth", &Value::Null).unwrap();
        h.connect("set", 0, "ip", 0).unwrap();
        h.connect("ip", 0, "eth", 0).unwrap();
    }

    #[test]
    fn checksum_matches_a_known_header() {
        // The classic example header from RFC 1071 discussions: checksum 0xb861.
        let want = hex("4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7");
        let mut h = [0xffu8; 20];
        put_ipv4_header(
            &mut h,
            0x73,
            IPV4_DF,
            DEFAULT_TTL,
            0x11,
            [192, 168, 0, 1],
            [192, 168, 0, 199],
        );
        assert_eq!(h[..], want[..]);
    }

    #[test]
    fn prepends_ipv4_header_and_sets_ether_type_for_ether_encap() {
        let mut h = Harness::new();
        setup(&mut h);
        let c = h.capture("eth", 0);
        let payload = hex("1234 5678 0008 0000");
        h.inject("set", 0, std::slice::from_ref(&payload));
        let got = c.take_data();
        // Total length 28 = 0x1c; checksum by hand:
        // 4500+001c+0000+4000+4011+0000+0a00+0001+0a00+0002 = 0xd930 -> !0xd930 = 0x26cf
        let want = hex("020000000002 020000000001 0800 \
             4500 001c 0000 4000 4011 26cf 0a00 0001 0a00 0002 \
             1234 5678 0008 0000");
        assert_eq!(got, vec![want]);
        let ip = Ipv4Packet::new_checked(&got[0][14..]).unwrap();
        assert!(ip.verify_checksum());
    }

    #[test]
    fn empty_payload_and_no_headroom() {
        let mut h = Harness::new();
        setup(&mut h);
        h.add(&EAT_HEADROOM, "eat", &Value::Null).unwrap();
        h.connect("eat", 0, "set", 0).unwrap();
        let c = h.capture("eth", 0);
        h.inject("set", 0, &[vec![]]);
        let got = c.take_data();
        assert_eq!(&got[0][14..18], &hex("4500 0014"));
        assert!(Ipv4Packet::new_checked(&got[0][14..])
            .unwrap()
            .verify_checksum());
        h.inject("eat", 0, &[vec![0u8; 8]]);
        assert!(c.take_data().is_empty());
        assert_eq!(h.drops("ip", "no_headroom"), 1);
    }
}

//! VXLANDecap: strips the outer Ethernet/IPv4/UDP/VXLAN headers, keeping the tunnel
//! endpoints and VNI in metadata.
use bessemer_core::{
    AccessMode, Args, Context, Instance, Module, ModuleClass, Packet, PacketBatch, Value,
};

use crate::checksum::PROTO_UDP;
use crate::headers::{
    ip_version, ipv4_in_frame, udp, vxlan, Ipv4Error, UdpView, VxlanView, ETH_LEN,
};
use crate::util::add_attrs;
use crate::util::{process_each, Verdict};

const ATTR_TUN_SRC: usize = 0;
const ATTR_TUN_DST: usize = 1;
const ATTR_TUN_ID: usize = 2;

bessemer_core::drop_reasons! {
    /// Why VXLANDecap drops packets.
    pub enum VxlanDecapDrop {
        TooShort = "too_short",
        NotVxlan = "not_vxlan",
        Malformed = "malformed",
        Fragment = "fragment",
    }
}

/// Where the outer headers end and what the tunnel fields are, or a drop reason.
struct Outer {
    strip: usize,
    src: [u8; 4],
    dst: [u8; 4],
    vni: [u8; 4],
}

fn parse(d: &[u8]) -> Result<Outer, VxlanDecapDrop> {
    let ip = match ipv4_in_frame(d) {
        Ok(ip) => ip,
        Err(Ipv4Error::TooShort) => return Err(VxlanDecapDrop::TooShort),
        Err(Ipv4Error::NotIpv4) => return Err(VxlanDecapDrop::NotVxlan),
        // Not version 4: not a VXLAN packet; a bad IHL or total length: malformed.
        Err(Ipv4Error::BadHeader)
            if ip_version(d.get(ETH_LEN..).unwrap_or_default()) != Some(4) =>
        {
            return Err(VxlanDecapDrop::NotVxlan)
        }
        Err(Ipv4Error::BadHeader) => return Err(VxlanDecapDrop::Malformed),
    };
    if ip.protocol() != PROTO_UDP {
        return Err(VxlanDecapDrop::NotVxlan);
    }
    if ip.is_fragment() {
        return Err(VxlanDecapDrop::Fragment);
    }
    let l4 = ip.payload();
    if l4.len() < udp::HEADER_LEN + vxlan::HEADER_LEN {
        return Err(VxlanDecapDrop::TooShort);
    }
    let udp = UdpView::new_checked(l4).map_err(|_| VxlanDecapDrop::Malformed)?;
    if !udp.length_ok() || (udp.length() as usize) < udp::HEADER_LEN + vxlan::HEADER_LEN {
        return Err(VxlanDecapDrop::Malformed);
    }
    let vx = VxlanView::new_checked(udp.payload()).map_err(|_| VxlanDecapDrop::TooShort)?;
    if vx.flags() & vxlan::FLAG_I == 0 {
        return Err(VxlanDecapDrop::NotVxlan);
    }
    Ok(Outer {
        strip: ETH_LEN + ip.header_len() + udp::HEADER_LEN + vxlan::HEADER_LEN,
        src: ip.src_bytes(),
        dst: ip.dst_bytes(),
        vni: vx.vni().to_be_bytes(),
    })
}

/// Removes Ethernet + IPv4 (with options) + UDP + VXLAN headers; writes `tun_ip_src`,
/// `tun_ip_dst` (network order) and `tun_id` (the 24-bit VNI as a network-order u32).
/// Packets that are not IPv4/UDP with the VXLAN I flag, fragments, malformed and truncated
/// ones are dropped under named reasons (BESS assumes every packet is VXLAN).
pub struct VxlanDecap;

impl Module for VxlanDecap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let (src, dst, id) = (
            ctx.attr(ATTR_TUN_SRC),
            ctx.attr(ATTR_TUN_DST),
            ctx.attr(ATTR_TUN_ID),
        );
        process_each(ctx, batch, |p: &mut Packet| {
            let o = match parse(p.data()) {
                Ok(o) => o,
                Err(r) => return Verdict::Drop(r),
            };
            p.set_attr(src, &o.src);
            p.set_attr(dst, &o.dst);
            p.set_attr(id, &o.vni);
            let ok = p.adj(o.strip);
            debug_assert!(ok, "parse checked the length");
            Verdict::Gate(0)
        });
    }
}

/// The VXLANDecap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "VXLANDecap",
    name_template: "vxlan_decap",
    help: "removes the outer Ethernet/IPv4/UDP/VXLAN headers",
    arg_type: "VXLANDecapArg",
    arg_doc: &[
        "(no fields) — writes metadata tun_ip_src (4), tun_ip_dst (4), tun_id (4, VNI in network order)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: VxlanDecapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        Args::new(arg, "VXLANDecapArg")?.finish()?;
        add_attrs(
            init,
            &[
                ("tun_ip_src", 4, AccessMode::Write),
                ("tun_ip_dst", 4, AccessMode::Write),
                ("tun_id", 4, AccessMode::Write),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(VxlanDecap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::hex;
    use crate::encap::{ether_encap, ip_encap, vxlan_encap};
    use crate::rewrite::set_metadata;
    use bessemer_core::testing::Harness;

    const INNER: &str = "0a0000000002 0a0000000001 0800 dead beef";

    /// A VXLAN frame: outer IPv4 with `ip_extra` option bytes, UDP to 4789, VNI 0x123456.
    fn frame(ip_extra: &[u8]) -> Vec<u8> {
        let inner = hex(INNER);
        let udp_len = 16 + inner.len();
        let ihl = 20 + ip_extra.len();
        let total = (ihl + udp_len) as u16;
        let mut ip = hex("4500 0000 0000 4000 4011 0000 c0a80001 c0a80002");
        ip[0] = 0x40 | (ihl / 4) as u8;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(ip_extra);
        [
            hex("020000000002 020000000001 0800"),
            ip,
            hex("c0f0 12b5"),
            (udp_len as u16).to_be_bytes().to_vec(),
            hex("0000 08000000 12345600"),
            inner,
        ]
        .concat()
    }

    /// VXLANDecap -> VXLANEncap -> IPEncap -> EtherEncap with the MACs set again: the
    /// tunnel metadata written by decap is what encap reads.
    fn roundtrip(h: &mut Harness) {
        h.add(&CLASS, "dec", &Value::Null).unwrap();
        h.add(&vxlan_encap::CLASS, "vx", &Value::Null).unwrap();
        let macs = crate::encap::testutil::set_meta(&[
            ("ether_src", &hex("020000000001")),
            ("ether_dst", &hex("020000000002")),
        ]);
        h.add(&set_metadata::CLASS, "macs", &macs).unwrap();
        h.add(&ip_encap::CLASS, "ip", &Value::Null).unwrap();
        h.add(&ether_encap::CLASS, "eth", &Value::Null).unwrap();
        h.connect("dec", 0, "vx", 0).unwrap();
        h.connect("vx", 0, "macs", 0).unwrap();
        h.connect("macs", 0, "ip", 0).unwrap();
        h.connect("ip", 0, "eth", 0).unwrap();
    }

    #[test]
    fn decap_then_encap_rebuilds_the_tunnel_headers() {
        let mut h = Harness::new();
        roundtrip(&mut h);
        let c = h.capture("eth", 0);
        h.inject("dec", 0, &[frame(&[])]);
        let got = c.take_data();
        assert_eq!(got.len(), 1);
        let mut want = frame(&[]);
        // What differs from the input: the IP checksum (the input had none) and the UDP
        // source port (a hash of the inner MACs).
        want[24..26].copy_from_slice(&got[0][24..26]);
        want[34..36].copy_from_slice(&got[0][34..36]);
        assert_eq!(got[0], want);
        assert!(smoltcp::wire::Ipv4Packet::new_checked(&got[0][14..])
            .unwrap()
            .verify_checksum());
    }

    #[test]
    fn strips_headers_including_ip_options() {
        let mut h = Harness::new();
        h.add(&CLASS, "dec", &Value::Null).unwrap();
        let c = h.capture("dec", 0);
        h.inject("dec", 0, &[frame(&[]), frame(&hex("01010101"))]);
        assert_eq!(c.take_data(), vec![hex(INNER), hex(INNER)]);
    }

    #[test]
    fn malformed_and_foreign_packets_are_counted() {
        let mut h = Harness::new();
        h.add(&CLASS, "dec", &Value::Null).unwrap();
        let c = h.capture("dec", 0);
        let good = frame(&[]);
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&hex("0806"));
        let mut tcp = good.clone();
        tcp[23] = 6;
        let mut v6 = good.clone();
        v6[14] = 0x65;
        let mut no_i_flag = good.clone();
        no_i_flag[42] = 0;
        let mut bad_ihl = good.clone();
        bad_ihl[14] = 0x44;
        let mut short_total = good.clone();
        short_total[16..18].copy_from_slice(&hex("0010"));
        let mut bad_udp_len = good.clone();
        bad_udp_len[38..40].copy_from_slice(&hex("0004"));
        let mut frag = good.clone();
        frag[20] = 0x20; // more fragments
        let mut frag2 = good.clone();
        frag2[21] = 0x10; // offset 16*8
        h.inject(
            "dec",
            0,
            &[
                good[..10].to_vec(),             // too_short: no Ethernet header
                good[..30].to_vec(),             // too_short: truncated IP header
                good[..good.len() - 1].to_vec(), // too_short: shorter than IP total length
                good[..40].to_vec(),             // too_short
                arp,                             // not_vxlan
                tcp,                             // not_vxlan
                v6,                              // not_vxlan
                no_i_flag,                       // not_vxlan
                bad_ihl,                         // malformed
                short_total,                     // malformed
                bad_udp_len,                     // malformed
                frag,                            // fragment
                frag2,                           // fragment
                good.clone(),
            ],
        );
        assert_eq!(c.take_data(), vec![hex(INNER)]);
        assert_eq!(h.drops("dec", "too_short"), 4);
        assert_eq!(h.drops("dec", "not_vxlan"), 4);
        assert_eq!(h.drops("dec", "malformed"), 3);
        assert_eq!(h.drops("dec", "fragment"), 2);
    }

    use crate::encap::testutil::{all_drops, suffixes_in_order};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Mutated and truncated VXLAN frames never panic: each is decapsulated (leaving a
        /// suffix of the input) or counted as a drop.
        #[test]
        fn mutated_frames_are_decapsulated_or_counted(
            muts in proptest::collection::vec((0usize..68, any::<u8>(), 0usize..=68), 1..40)
        ) {
            let mut h = Harness::new();
            h.add(&CLASS, "dec", &Value::Null).unwrap();
            let c = h.capture("dec", 0);
            let input: Vec<Vec<u8>> = muts
                .iter()
                .map(|&(i, b, len)| {
                    let mut f = frame(&[]);
                    f[i] = b;
                    f.truncate(len);
                    f
                })
                .collect();
            h.inject("dec", 0, &input);
            let out = c.take_data();
            prop_assert_eq!(out.len() as u64 + all_drops(&h, "dec"), input.len() as u64);
            prop_assert!(suffixes_in_order(&out, &input));
        }
    }
}

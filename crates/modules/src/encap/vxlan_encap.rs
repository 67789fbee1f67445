//! VXLANEncap: prepends UDP and VXLAN headers; the outer IP and Ethernet headers come from
//! IPEncap and EtherEncap downstream, fed by the metadata this module writes.
use bessemer_core::{
    AccessMode, Args, Context, Error, Instance, Module, ModuleClass, PacketBatch, Value,
};

use crate::hash::crc32c;
use crate::headers::{udp, vxlan, EthernetView, UdpView, VxlanView};
use crate::util::add_attrs;
use crate::util::{process_each, Verdict};

const ATTR_TUN_SRC: usize = 0;
const ATTR_TUN_DST: usize = 1;
const ATTR_TUN_ID: usize = 2;
const ATTR_IP_SRC: usize = 3;
const ATTR_IP_DST: usize = 4;
const ATTR_IP_PROTO: usize = 5;

bessemer_core::drop_reasons! {
    /// Why VXLANEncap drops packets.
    pub enum VxlanEncapDrop {
        TooShort = "too_short",
        NoHeadroom = "no_headroom",
    }
}

/// The IANA VXLAN port, BESS's default `dstport`.
pub const VXLAN_PORT: u16 = 4789;
const UDP_LEN: usize = udp::HEADER_LEN;
const VXLAN_LEN: usize = vxlan::HEADER_LEN;
const IPPROTO_UDP: u8 = 17;

// A packet never exceeds its frame, so the UDP length always fits in 16 bits.
const _: () = assert!(bessemer_core::packet::FRAME_SIZE + UDP_LEN + VXLAN_LEN <= u16::MAX as usize);

/// Prepends UDP (source port from a hash of the inner MAC addresses, destination `dstport`,
/// checksum 0) and VXLAN (I flag, VNI from `tun_id`) headers; copies `tun_ip_src` /
/// `tun_ip_dst` to `ip_src` / `ip_dst` and sets `ip_proto` to UDP for an IPEncap downstream.
pub struct VxlanEncap {
    dstport: [u8; 2],
}

impl Module for VxlanEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let (tsrc, tdst, tid) = (
            ctx.attr(ATTR_TUN_SRC),
            ctx.attr(ATTR_TUN_DST),
            ctx.attr(ATTR_TUN_ID),
        );
        let (isrc, idst, iproto) = (
            ctx.attr(ATTR_IP_SRC),
            ctx.attr(ATTR_IP_DST),
            ctx.attr(ATTR_IP_PROTO),
        );
        let dstport = self.dstport;
        process_each(ctx, batch, |p| {
            // The source port hashes the inner Ethernet addresses: the inner frame must have
            // an Ethernet header (BESS reads the bytes regardless).
            let Ok(inner) = EthernetView::new_checked(p.data()) else {
                return Verdict::Drop(VxlanEncapDrop::TooShort);
            };
            let hash = crc32c(u32::MAX, inner.addrs()) | 0x00f0;
            let udp_len = (p.len() + UDP_LEN + VXLAN_LEN) as u16;
            let s: [u8; 4] = p.get_attr(tsrc);
            let d: [u8; 4] = p.get_attr(tdst);
            // tun_id is a 32-bit VNI in network order (as VXLANDecap writes it); the VXLAN
            // header carries its low 24 bits.
            let vni = u32::from_be_bytes(p.get_attr(tid));
            // BESS leaves a packet without headroom unchanged; we drop and count it instead.
            let Some((mut udp, mut vx)) = p.prepend(UDP_LEN + VXLAN_LEN).and_then(|h| {
                let (u, v) = h.split_at_mut(UDP_LEN);
                Some((
                    UdpView::new_checked(u).ok()?,
                    VxlanView::new_checked(v).ok()?,
                ))
            }) else {
                return Verdict::Drop(VxlanEncapDrop::NoHeadroom);
            };
            // BESS stores the low 16 hash bits in host (little-endian) order.
            udp.set_src_port(u16::from_be_bytes((hash as u16).to_le_bytes()));
            udp.set_dst_port(u16::from_be_bytes(dstport));
            udp.set_length(udp_len);
            udp.set_checksum(0);
            vx.fill(vni);
            p.set_attr(isrc, &s);
            p.set_attr(idst, &d);
            p.set_attr(iproto, &[IPPROTO_UDP]);
            Verdict::Gate(0)
        });
    }

    fn desc(&self) -> String {
        format!("dstport {}", u16::from_be_bytes(self.dstport))
    }
}

/// The VXLANEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "VXLANEncap",
    name_template: "vxlan_encap",
    help: "prepends UDP/VXLAN headers (outer IP/Ethernet via IPEncap/EtherEncap)",
    arg_type: "VXLANEncapArg",
    arg_doc: &[
        "dstport: uint64 — UDP destination port (default 4789; 0 means the default)",
        "  reads metadata tun_ip_src (4), tun_ip_dst (4), tun_id (4, VNI in network order); writes ip_src, ip_dst, ip_proto",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: VxlanEncapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        let mut a = Args::new(arg, "VXLANEncapArg")?;
        let port = a.uint("dstport", u64::MAX)?.unwrap_or(0);
        a.finish()?;
        let port = match port {
            0 => VXLAN_PORT,
            1..=65535 => port as u16,
            _ => {
                return Err(Error::invalid(format!(
                    "VXLANEncapArg.dstport: {port} is not a UDP port (1..65535)"
                )))
            }
        };
        add_attrs(
            init,
            &[
                ("tun_ip_src", 4, AccessMode::Read),
                ("tun_ip_dst", 4, AccessMode::Read),
                ("tun_id", 4, AccessMode::Read),
                ("ip_src", 4, AccessMode::Write),
                ("ip_dst", 4, AccessMode::Write),
                ("ip_proto", 1, AccessMode::Write),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(VxlanEncap {
            dstport: port.to_be_bytes(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::{hex, set_meta, EAT_HEADROOM};
    use crate::encap::{ether_encap, ip_encap};
    use crate::rewrite::set_metadata;
    use bessemer_core::testing::Harness;
    use smoltcp::wire::Ipv4Packet;

    const INNER: &str = "0a0000000002 0a0000000001 0800 dead beef";

    fn inner_port() -> [u8; 2] {
        let h = crc32c(u32::MAX, &hex(INNER)[..12]) | 0xf0;
        (h as u16).to_le_bytes()
    }

    /// SetMetadata -> VXLANEncap -> IPEncap -> EtherEncap: the full outer frame.
    #[test]
    fn builds_the_outer_headers_with_ip_and_ether_encap() {
        let mut h = Harness::new();
        let meta = set_meta(&[
            ("tun_ip_src", &hex("c0a80001")),
            ("tun_ip_dst", &hex("c0a80002")),
            ("tun_id", &hex("00123456")),
            ("ether_src", &hex("020000000001")),
            ("ether_dst", &hex("020000000002")),
        ]);
        h.add(&set_metadata::CLASS, "set", &meta).unwrap();
        h.add(&CLASS, "vx", &Value::map().with("dstport", 8472))
            .unwrap();
        h.add(&ip_encap::CLASS, "ip", &Value::Null).unwrap();
        h.add(&ether_encap::CLASS, "eth", &Value::Null).unwrap();
        h.connect("set", 0, "vx", 0).unwrap();
        h.connect("vx", 0, "ip", 0).unwrap();
        h.connect("ip", 0, "eth", 0).unwrap();
        let c = h.capture("eth", 0);
        h.inject("set", 0, &[hex(INNER)]);
        let got = c.take_data();
        assert_eq!(got.len(), 1);
        let p = &got[0];
        // Ethernet, then IPv4 of 20 + 8 + 8 + 18 = 54 bytes carrying UDP.
        assert_eq!(&p[..14], &hex("020000000002 020000000001 0800")[..]);
        let ip = Ipv4Packet::new_checked(&p[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(&p[14..24], &hex("4500 0036 0000 4000 4011")[..]);
        assert_eq!(&p[26..34], &hex("c0a80001 c0a80002")[..]);
        // UDP: hashed source port, 8472, length 34, checksum 0; VXLAN: I flag, VNI 0x123456.
        let port = inner_port();
        let want_udp = [
            port.to_vec(),
            hex("2118 0022 0000 08000000 12345600"),
            hex(INNER),
        ]
        .concat();
        assert_eq!(&p[34..], &want_udp[..]);
        assert_eq!(port[0] & 0xf0, 0xf0);
    }

    #[test]
    fn defaults_and_errors() {
        let mut h = Harness::new();
        h.add(&CLASS, "vx", &Value::Null).unwrap();
        let c = h.capture("vx", 0);
        h.inject("vx", 0, &[hex(INNER), hex("0102030405060708090a0b0c0d")]);
        let got = c.take_data();
        let port = inner_port();
        assert_eq!(
            got,
            vec![[
                port.to_vec(),
                hex("12b5 0022 0000 08000000 00000000"),
                hex(INNER)
            ]
            .concat()]
        );
        assert_eq!(h.drops("vx", "too_short"), 1);
        let e = h
            .add(&CLASS, "bad", &Value::map().with("dstport", 65536))
            .unwrap_err();
        assert!(e.msg.contains("VXLANEncapArg.dstport"), "{}", e.msg);
        let e = h
            .add(&CLASS, "bad2", &Value::map().with("dstport", "x"))
            .unwrap_err();
        assert!(e.msg.contains("VXLANEncapArg.dstport"), "{}", e.msg);
    }

    #[test]
    fn no_headroom_is_counted() {
        let mut h = Harness::new();
        h.add(&EAT_HEADROOM, "eat", &Value::Null).unwrap();
        h.add(&CLASS, "vx", &Value::Null).unwrap();
        h.connect("eat", 0, "vx", 0).unwrap();
        let c = h.capture("vx", 0);
        h.inject("eat", 0, &[hex(INNER)]);
        assert!(c.is_empty());
        assert_eq!(h.drops("vx", "no_headroom"), 1);
    }
}

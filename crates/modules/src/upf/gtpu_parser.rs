//! GtpuParser (omec-project fork): fills the UPF's match attributes from a packet's headers,
//! the inner ones for a GTP-U G-PDU and the outer ones otherwise.
use bessemer_core::{
    AccessMode, Args, AttrOffset, Context, Instance, Module, ModuleClass, Packet, PacketBatch,
    Value,
};

use crate::checksum::{PROTO_TCP, PROTO_UDP};
use crate::headers::{
    ip_version, Ipv4Error, Ipv4View, PortsView, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_LEN, PROTO_ICMP,
};
use crate::upf::gtpu::{self, GtpuError};
use crate::util::{add_attrs, process_each, Verdict};

/// IP protocol number of ESP (no ports: its payload is encrypted).
const PROTO_ESP: u8 = 50;
/// What the fork writes for a field the packet does not have (all ones).
const NONE4: [u8; 4] = [0xff; 4];
const NONE2: [u8; 2] = [0xff; 2];

const GATE_DEFAULT: u16 = 0;
const GATE_FORWARD: u16 = 1;

const ATTR_SRC_IP: usize = 0;
const ATTR_DST_IP: usize = 1;
const ATTR_SRC_PORT: usize = 2;
const ATTR_DST_PORT: usize = 3;
const ATTR_TEID: usize = 4;
const ATTR_TUNNEL_DST: usize = 5;
const ATTR_PROTO: usize = 6;

bessemer_core::drop_reasons! {
    /// Why GtpuParser drops packets.
    pub enum GtpuParserDrop {
        Gtpu(GtpuError),
        /// The packet inside a G-PDU is a truncated or malformed IPv4 packet.
        InnerMalformed = "inner_malformed",
    }
}

/// The attribute values of one packet, every field as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    src: [u8; 4],
    dst: [u8; 4],
    sport: [u8; 2],
    dport: [u8; 2],
    teid: [u8; 4],
    tunnel_dst: [u8; 4],
    proto: u8,
}

/// Ports of a TCP or UDP packet, or all ones for a later fragment (which has no L4 header)
/// and for other protocols; `Err` when the L4 header is cut short.
fn ports<T: AsRef<[u8]>>(ip: &Ipv4View<T>) -> Result<([u8; 2], [u8; 2]), ()> {
    let p = ip.protocol();
    if (p != PROTO_TCP && p != PROTO_UDP) || !ip.has_l4_header() {
        return Ok((NONE2, NONE2));
    }
    let v = PortsView::new_checked(ip.payload()).map_err(|_| ())?;
    Ok((v.src_port().to_be_bytes(), v.dst_port().to_be_bytes()))
}

/// The fields of an IPv4 packet carried in no tunnel, or None for a protocol the fork
/// leaves unparsed (the packet goes on without attributes).
fn outer_fields<T: AsRef<[u8]>>(ip: &Ipv4View<T>) -> Result<Option<Fields>, GtpuParserDrop> {
    let p = ip.protocol();
    if !matches!(p, PROTO_TCP | PROTO_UDP | PROTO_ICMP | PROTO_ESP) {
        return Ok(None);
    }
    let (sport, dport) = ports(ip).map_err(|_| GtpuError::Ipv4(Ipv4Error::TooShort))?;
    Ok(Some(Fields {
        src: ip.src_bytes(),
        dst: ip.dst_bytes(),
        sport,
        dport,
        teid: NONE4,
        tunnel_dst: NONE4,
        proto: p,
    }))
}

/// The fields of a G-PDU of a common shape (see [`gtpu::plain_gpdu_outer`]) carrying IPv4
/// without options, read straight from the bytes, when the full classification would
/// accept it with them; None sends the frame down the full path.
#[inline(always)]
fn plain_fields(d: &[u8]) -> Option<Fields> {
    let outer = gtpu::plain_gpdu_outer(d)?;
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]) as usize;
    let o = ETH_LEN + outer;
    // The inner packet runs to the end of the GTP-U message: its length field counts from
    // the end of the mandatory header, so less what the optional part took.
    let inner_len = be16(d, ETH_LEN + 30) + gtpu::PLAIN_OUTER - outer;
    let i = d.get(o..o + 20)?;
    let total = be16(i, 2);
    if inner_len < 20 || i[0] != 0x45 || total < 20 || total > inner_len {
        return None;
    }
    let proto = i[9];
    let (sport, dport) = if (proto == PROTO_TCP || proto == PROTO_UDP) && be16(i, 6) & 0x1fff == 0 {
        let p = d.get(o + 20..o + 24)?;
        if total < 24 {
            return None;
        }
        ([p[0], p[1]], [p[2], p[3]])
    } else {
        (NONE2, NONE2)
    };
    let four = |at: usize| [d[at], d[at + 1], d[at + 2], d[at + 3]];
    Some(Fields {
        src: [i[12], i[13], i[14], i[15]],
        dst: [i[16], i[17], i[18], i[19]],
        sport,
        dport,
        teid: four(ETH_LEN + 32),
        tunnel_dst: four(ETH_LEN + 16),
        proto,
    })
}

/// The fields of an untagged IPv4 packet without options carrying TCP, or UDP not to the
/// GTP-U port, unfragmented (the UPF's downlink), read straight from the bytes, when the
/// full classification would accept it with them; None sends the frame down the full path.
/// (Through the full path such a packet cost about 90 instructions more than a G-PDU
/// through its short path: callgrind, `bench/upf_profile.py`.)
#[inline(always)]
fn plain_ip_fields(d: &[u8]) -> Option<Fields> {
    let h = d.get(..ETH_LEN + 24)?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]) as usize;
    let proto = h[23];
    // Total length at least 24: the ports are inside the packet (the full path drops a
    // shorter TCP or UDP packet as too short).
    if h[12..14] != [0x08, 0x00]
        || h[14] != 0x45
        || be16(16) < 24
        || be16(16) > d.len() - ETH_LEN
        || be16(20) & 0x1fff != 0
        || !(proto == PROTO_TCP || (proto == PROTO_UDP && be16(36) != gtpu::PORT as usize))
    {
        return None;
    }
    Some(Fields {
        src: [h[26], h[27], h[28], h[29]],
        dst: [h[30], h[31], h[32], h[33]],
        sport: [h[34], h[35]],
        dport: [h[36], h[37]],
        teid: NONE4,
        tunnel_dst: NONE4,
        proto,
    })
}

/// The gate of a frame and the attributes to write (None: write none).
#[inline(always)]
fn classify(d: &[u8]) -> Result<(u16, Option<Fields>), GtpuParserDrop> {
    if let Some(f) = plain_fields(d) {
        return Ok((GATE_FORWARD, Some(f)));
    }
    match plain_ip_fields(d) {
        Some(f) => Ok((GATE_FORWARD, Some(f))),
        None => classify_full(d),
    }
}

/// [`classify`] for any frame.
fn classify_full(d: &[u8]) -> Result<(u16, Option<Fields>), GtpuParserDrop> {
    let Some(t) = d.get(12..ETH_LEN) else {
        return Err(GtpuError::Ipv4(Ipv4Error::TooShort).into());
    };
    match u16::from_be_bytes([t[0], t[1]]) {
        ETHERTYPE_IPV4 => {}
        // The fork forwards ARP on the forward gate (and reads its bytes as IPv4); nothing
        // in an ARP packet is a match field, so none is written.
        ETHERTYPE_ARP => return Ok((GATE_FORWARD, None)),
        _ => return Ok((GATE_DEFAULT, None)),
    }
    let ip = Ipv4View::new_checked(&d[ETH_LEN..]).map_err(GtpuError::Ipv4)?;
    let is_gtpu = ip.protocol() == PROTO_UDP
        && ip.has_l4_header()
        && PortsView::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == gtpu::PORT);
    if !is_gtpu {
        return Ok((GATE_FORWARD, outer_fields(&ip)?));
    }
    let tun = gtpu::parse(d)?;
    if tun.msg_type != gtpu::MSG_GPDU {
        // Signalling (echo, end marker, error indication) carries no user packet to match.
        return Ok((GATE_DEFAULT, None));
    }
    let inner = &d[tun.payload_off()..tun.end()];
    if ip_version(inner) != Some(4) {
        return Ok((GATE_DEFAULT, None));
    }
    let iip = Ipv4View::new_checked(inner).map_err(|_| GtpuParserDrop::InnerMalformed)?;
    let (sport, dport) = ports(&iip).map_err(|_| GtpuParserDrop::InnerMalformed)?;
    Ok((
        GATE_FORWARD,
        Some(Fields {
            src: iip.src_bytes(),
            dst: iip.dst_bytes(),
            sport,
            dport,
            teid: tun.teid,
            tunnel_dst: tun.dst,
            proto: iip.protocol(),
        }),
    ))
}

/// Writes `src_ip`, `dst_ip`, `src_port`, `dst_port`, `teid`, `tunnel_ipv4_dst` and
/// `ip_proto` (network byte order, all ones where absent) from the inner headers of a GTP-U
/// G-PDU or the headers of a plain IPv4 packet, and sends it out of gate 1; other EtherTypes
/// and GTP-U signalling go out of gate 0; malformed packets are dropped under named reasons.
pub struct GtpuParser;

impl Module for GtpuParser {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let offs = [
            ctx.attr(ATTR_SRC_IP),
            ctx.attr(ATTR_DST_IP),
            ctx.attr(ATTR_SRC_PORT),
            ctx.attr(ATTR_DST_PORT),
            ctx.attr(ATTR_TEID),
            ctx.attr(ATTR_TUNNEL_DST),
            ctx.attr(ATTR_PROTO),
        ];
        // Where every attribute is written (the UPF: a classifier reads each), offsets
        // checked once per batch: clamped into the metadata area (no-ops, attributes fit),
        // so that each store needs no check of its own (a check and a branch per attribute
        // and packet cost more than the stores).
        let at = offs.map(|o| match o {
            AttrOffset::At(o) => Some(o as usize),
            _ => None,
        });
        if let [Some(src), Some(dst), Some(sport), Some(dport), Some(teid), Some(tun), Some(proto)] =
            at
        {
            let (src, dst, teid, tun) = (src.min(124), dst.min(124), teid.min(124), tun.min(124));
            let (sport, dport, proto) = (sport.min(126), dport.min(126), proto.min(127));
            return process_each(ctx, batch, |p: &mut Packet| match classify(p.data()) {
                Err(r) => Verdict::Drop(r),
                Ok((gate, f)) => {
                    if let Some(f) = f {
                        let m = p.metadata_mut();
                        m[src..src + 4].copy_from_slice(&f.src);
                        m[dst..dst + 4].copy_from_slice(&f.dst);
                        m[sport..sport + 2].copy_from_slice(&f.sport);
                        m[dport..dport + 2].copy_from_slice(&f.dport);
                        m[teid..teid + 4].copy_from_slice(&f.teid);
                        m[tun..tun + 4].copy_from_slice(&f.tunnel_dst);
                        m[proto] = f.proto;
                    }
                    Verdict::Gate(gate)
                }
            });
        }
        if at.iter().all(Option::is_none) {
            // No module downstream reads any of them: only the gates and drops matter.
            return process_each(ctx, batch, |p: &mut Packet| match classify(p.data()) {
                Err(r) => Verdict::Drop(r),
                Ok((gate, _)) => Verdict::Gate(gate),
            });
        }
        process_each(ctx, batch, |p: &mut Packet| match classify(p.data()) {
            Err(r) => Verdict::Drop(r),
            Ok((gate, f)) => {
                if let Some(f) = f {
                    p.set_attr(offs[ATTR_SRC_IP], &f.src);
                    p.set_attr(offs[ATTR_DST_IP], &f.dst);
                    p.set_attr(offs[ATTR_SRC_PORT], &f.sport);
                    p.set_attr(offs[ATTR_DST_PORT], &f.dport);
                    p.set_attr(offs[ATTR_TEID], &f.teid);
                    p.set_attr(offs[ATTR_TUNNEL_DST], &f.tunnel_dst);
                    p.set_attr(offs[ATTR_PROTO], &[f.proto]);
                }
                Verdict::Gate(gate)
            }
        });
    }
}

/// The GtpuParser class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GtpuParser",
    name_template: "gtpu_parser",
    help: "parsing module for gtp traffic",
    arg_type: "EmptyArg",
    arg_doc: &[
        "(no fields) — writes src_ip, dst_ip, teid, tunnel_ipv4_dst (4), src_port, dst_port (2), ip_proto (1); gate 1 parsed, gate 0 not IPv4 or GTP-U signalling",
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: GtpuParserDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        Args::new(arg, "EmptyArg")?.finish()?;
        add_attrs(
            init,
            &[
                ("src_ip", 4, AccessMode::Write),
                ("dst_ip", 4, AccessMode::Write),
                ("src_port", 2, AccessMode::Write),
                ("dst_port", 2, AccessMode::Write),
                ("teid", 4, AccessMode::Write),
                ("tunnel_ipv4_dst", 4, AccessMode::Write),
                ("ip_proto", 1, AccessMode::Write),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(GtpuParser)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A plain G-PDU carrying IPv4/UDP (ports 1000 -> 2000) in 96 bytes.
    fn gpdu() -> Vec<u8> {
        inner_udp(crate::upf::gtpu::test_frames::plain_gpdu(46), 50)
    }

    /// A 5G uplink G-PDU (optional fields and a PDU Session Container) carrying the same.
    fn psc_gpdu() -> Vec<u8> {
        inner_udp(crate::upf::gtpu::test_frames::psc_gpdu(46), 58)
    }

    /// Fills in an IPv4/UDP packet of 46 bytes at `at`, and the outer addresses.
    fn inner_udp(mut f: Vec<u8>, at: usize) -> Vec<u8> {
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f[46..50].copy_from_slice(&[0, 0, 1, 0]);
        f[at] = 0x45;
        f[at + 2..at + 4].copy_from_slice(&46u16.to_be_bytes());
        f[at + 9] = 17;
        f[at + 12..at + 20].copy_from_slice(&[16, 0, 0, 1, 6, 6, 6, 6]);
        f[at + 20..at + 22].copy_from_slice(&1000u16.to_be_bytes());
        f[at + 22..at + 24].copy_from_slice(&2000u16.to_be_bytes());
        f
    }

    #[test]
    fn a_plain_gpdu_takes_the_short_path() {
        assert!(plain_fields(&gpdu()).is_some());
        assert_eq!(classify(&gpdu()), classify_full(&gpdu()));
    }

    #[test]
    fn a_5g_gpdu_with_a_session_container_takes_the_short_path_with_the_same_fields() {
        let f = plain_fields(&psc_gpdu()).expect("short path");
        assert_eq!(Ok((GATE_FORWARD, Some(f))), classify_full(&psc_gpdu()));
        assert_eq!(f.teid, [0, 0, 1, 0]);
        assert_eq!((f.src, f.sport, f.proto), ([16, 0, 0, 1], [0x03, 0xe8], 17));
        // Without the extension header (next type 0): the 12-byte header, also short.
        let mut g = psc_gpdu();
        g[53] = 0;
        assert_eq!(classify(&g), classify_full(&g));
    }

    /// A plain IPv4/UDP packet (ports 1000 -> 2000) in 60 bytes, as on the downlink.
    fn udp() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[23] = 17;
        f[26..34].copy_from_slice(&[6, 6, 6, 6, 16, 0, 0, 1]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&2000u16.to_be_bytes());
        f
    }

    #[test]
    fn a_plain_ipv4_packet_takes_the_short_path() {
        assert!(plain_ip_fields(&udp()).is_some());
        assert_eq!(classify(&udp()), classify_full(&udp()));
    }

    proptest! {
        /// The plain-IPv4 short path gives what the full classification gives for UDP
        /// packets with header bytes changed (protocol, ports, lengths, fragment fields,
        /// version and header length among them) and frames cut or padded.
        #[test]
        fn the_ip_short_path_agrees_with_the_full_parse(
            edits in proptest::collection::vec((12usize..40, any::<u8>(), 0u8..4), 0..4),
            len in prop_oneof![Just(60usize), 0usize..70],
        ) {
            let mut f = udp();
            crate::upf::gtpu::test_frames::mutate(&mut f, &edits);
            f.resize(len, 0xee);
            prop_assert_eq!(classify(&f), classify_full(&f));
        }

        /// The short path gives what the full classification gives for G-PDUs with outer
        /// and inner header bytes changed and frames cut or padded.
        #[test]
        fn the_short_path_agrees_with_the_full_parse(
            edits in proptest::collection::vec((12usize..76, any::<u8>(), 0u8..4), 0..4),
            len in prop_oneof![Just(96usize), 0usize..110],
        ) {
            let mut f = gpdu();
            crate::upf::gtpu::test_frames::mutate(&mut f, &edits);
            f.resize(len, 0xee);
            prop_assert_eq!(classify(&f), classify_full(&f));
        }

        /// The same for 5G G-PDUs with a PDU Session Container: flags, optional fields,
        /// the extension header's length and next type, the lengths, the inner header.
        #[test]
        fn the_short_path_agrees_for_session_container_gpdus(
            edits in proptest::collection::vec((12usize..84, any::<u8>(), 0u8..4), 0..4),
            len in prop_oneof![Just(104usize), 0usize..118],
        ) {
            let mut f = psc_gpdu();
            crate::upf::gtpu::test_frames::mutate(&mut f, &edits);
            f.resize(len, 0xee);
            prop_assert_eq!(classify(&f), classify_full(&f));
        }
    }
}

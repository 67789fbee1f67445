//! GtpuEncap (omec-project fork): puts an outer IPv4/UDP/GTP-U header, optionally with a PDU
//! Session Container, between a packet's Ethernet header and its IP packet.
use bessemer_core::{
    AccessMode, Args, Context, Instance, Module, ModuleClass, Packet, PacketBatch, Value,
};

use crate::checksum::PROTO_UDP;
use crate::headers::{ETHERTYPE_IPV4, ETH_LEN};
use crate::upf::gtpu;
use crate::util::{add_attrs, process_each, Verdict};

const GATE_FAIL: u16 = 0;
const GATE_FORWARD: u16 = 1;

const ATTR_PDU_TYPE: usize = 0;
const ATTR_SRC: usize = 1;
const ATTR_DST: usize = 2;
const ATTR_TEID: usize = 3;
const ATTR_PORT: usize = 4;
const ATTR_QFI: usize = 5;

/// Outer IPv4 (20) + UDP (8) + GTP-U (8).
const BASE_LEN: usize = 36;
/// The optional fields (4) and a PDU Session Container (4).
const PSC_LEN: usize = 8;
/// The fork's fixed IP identification of outer headers.
const OUTER_IP_ID: u16 = 0x0513;

bessemer_core::drop_reasons! {
    /// Why GtpuEncap drops packets.
    pub enum GtpuEncapDrop {
        /// Shorter than an Ethernet header.
        TooShort = "too_short",
    }
}

/// Encapsulates every packet in IPv4/UDP/GTP-U (a G-PDU) with the tunnel endpoint from the
/// metadata the FAR lookup wrote: `tunnel_out_src_ip4addr`, `tunnel_out_dst_ip4addr`,
/// `tunnel_out_teid`, `tunnel_out_udp_port` (host-order integers, as the fork reads them);
/// with `add_psc`, a PDU Session Container of PDU type `action` and QFI `qfi`. The outer TOS
/// is the inner packet's; the checksums are left 0 for L4Checksum and IPChecksum. A packet
/// without headroom goes out of gate 0 (as the fork), the rest out of gate 1.
pub struct GtpuEncap {
    add_psc: bool,
}

impl GtpuEncap {
    fn encap(
        &self,
        p: &mut Packet,
        offs: &[bessemer_core::metadata::AttrOffset; 6],
    ) -> Verdict<GtpuEncapDrop> {
        let len = p.len();
        if len < ETH_LEN {
            return Verdict::Drop(GtpuEncapDrop::TooShort);
        }
        let encap = BASE_LEN + if self.add_psc { PSC_LEN } else { 0 };
        let inner = len - ETH_LEN;
        let ip_total = inner + encap;
        // Frames are at most 32 KiB, so this cannot happen today; if it did, the packet
        // could not be encapsulated, like one without headroom.
        if ip_total > u16::MAX as usize {
            return Verdict::Gate(GATE_FAIL);
        }
        let d = p.data();
        let tos = if u16::from_be_bytes([d[12], d[13]]) == ETHERTYPE_IPV4 {
            d.get(ETH_LEN + 1).copied().unwrap_or(0)
        } else {
            0
        };
        let mut eth = [0u8; ETH_LEN];
        eth.copy_from_slice(&d[..ETH_LEN]);
        // The fork reads these as native (little-endian on x86) integers: the FAR lookup
        // writes them so.
        let pdu_type = p.get_attr::<1>(offs[ATTR_PDU_TYPE])[0];
        let src = u32::from_le_bytes(p.get_attr(offs[ATTR_SRC]));
        let dst = u32::from_le_bytes(p.get_attr(offs[ATTR_DST]));
        let teid = u32::from_le_bytes(p.get_attr(offs[ATTR_TEID]));
        let port = u16::from_le_bytes(p.get_attr(offs[ATTR_PORT]));
        let qfi = p.get_attr::<1>(offs[ATTR_QFI])[0];
        if p.prepend(encap).is_none() {
            return Verdict::Gate(GATE_FAIL);
        }
        let h = p.data_mut();
        h[..ETH_LEN].copy_from_slice(&eth);
        let o = &mut h[ETH_LEN..ETH_LEN + encap];
        let udp_len = (ip_total - 20) as u16;
        let gtp_len = (ip_total - BASE_LEN) as u16;
        o[0] = 0x45;
        o[1] = tos;
        o[2..4].copy_from_slice(&(ip_total as u16).to_be_bytes());
        o[4..6].copy_from_slice(&OUTER_IP_ID.to_be_bytes());
        o[6..8].fill(0);
        o[8] = 64;
        o[9] = PROTO_UDP;
        o[10..12].fill(0);
        o[12..16].copy_from_slice(&src.to_be_bytes());
        o[16..20].copy_from_slice(&dst.to_be_bytes());
        o[20..22].copy_from_slice(&port.to_be_bytes());
        o[22..24].copy_from_slice(&port.to_be_bytes());
        o[24..26].copy_from_slice(&udp_len.to_be_bytes());
        o[26..28].fill(0);
        o[28] = gtpu::VERSION_PT | if self.add_psc { gtpu::FLAG_E } else { 0 };
        o[29] = gtpu::MSG_GPDU;
        o[30..32].copy_from_slice(&gtp_len.to_be_bytes());
        o[32..36].copy_from_slice(&teid.to_be_bytes());
        if self.add_psc {
            // Sequence number and N-PDU number 0, then the PDU Session Container (one
            // 4-octet unit: PDU type in the high nibble, QFI in the low six bits, no next).
            o[36..44].copy_from_slice(&[
                0,
                0,
                0,
                gtpu::EXT_PDU_SESSION,
                1,
                pdu_type << 4,
                qfi & 0x3f,
                0,
            ]);
        }
        Verdict::Gate(GATE_FORWARD)
    }
}

impl Module for GtpuEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let offs = [
            ctx.attr(ATTR_PDU_TYPE),
            ctx.attr(ATTR_SRC),
            ctx.attr(ATTR_DST),
            ctx.attr(ATTR_TEID),
            ctx.attr(ATTR_PORT),
            ctx.attr(ATTR_QFI),
        ];
        process_each(ctx, batch, |p: &mut Packet| self.encap(p, &offs));
    }
}

/// The GtpuEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GtpuEncap",
    name_template: "gtpu_encap",
    help: "first version of gtpu encap module",
    arg_type: "GtpuEncapArg",
    arg_doc: &[
        "add_psc: bool — add a PDU Session Container extension header (PDU type from `action`, QFI from `qfi`)",
        "reads tunnel_out_src_ip4addr, tunnel_out_dst_ip4addr, tunnel_out_teid (4), tunnel_out_udp_port (2), action, qfi (1); gate 1 encapsulated, gate 0 no headroom",
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: GtpuEncapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        let mut a = Args::new(arg, "GtpuEncapArg")?;
        let add_psc = a.bool("add_psc")?.unwrap_or(false);
        a.finish()?;
        add_attrs(
            init,
            &[
                ("action", 1, AccessMode::Read),
                ("tunnel_out_src_ip4addr", 4, AccessMode::Read),
                ("tunnel_out_dst_ip4addr", 4, AccessMode::Read),
                ("tunnel_out_teid", 4, AccessMode::Read),
                ("tunnel_out_udp_port", 2, AccessMode::Read),
                ("qfi", 1, AccessMode::Read),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(GtpuEncap { add_psc })))
    },
};

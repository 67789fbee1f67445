//! GtpuDecap (omec-project fork): removes the outer IPv4, UDP and GTP-U headers of a G-PDU,
//! keeping its Ethernet header in front of the inner packet.
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, Packet, PacketBatch, Value};

use crate::headers::ETH_LEN;
use crate::upf::gtpu::{self, GtpuError};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why GtpuDecap drops packets.
    pub enum GtpuDecapDrop {
        Gtpu(GtpuError),
        /// A GTP-U message other than a G-PDU (it carries no packet to decapsulate).
        NotGpdu = "not_gpdu",
    }
}

/// Strips outer IPv4 (options included), UDP and the GTP-U header with its optional fields
/// and extension headers; the Ethernet header moves to the front of the inner packet.
/// Packets that are not well-formed GTP-U G-PDUs are dropped under named reasons (the fork
/// assumes every packet is one).
pub struct GtpuDecap;

fn decap(p: &mut Packet) -> Verdict<GtpuDecapDrop> {
    let t = match gtpu::parse(p.data()) {
        Ok(t) => t,
        Err(e) => return Verdict::Drop(e.into()),
    };
    if t.msg_type != gtpu::MSG_GPDU {
        return Verdict::Drop(GtpuDecapDrop::NotGpdu);
    }
    let mut eth = [0u8; ETH_LEN];
    eth.copy_from_slice(&p.data()[..ETH_LEN]);
    let ok = p.adj(t.payload_off() - ETH_LEN);
    debug_assert!(ok, "parse checked the length");
    p.data_mut()[..ETH_LEN].copy_from_slice(&eth);
    Verdict::Gate(0)
}

impl Module for GtpuDecap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, decap);
    }
}

/// The GtpuDecap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GtpuDecap",
    name_template: "gtpu_decap",
    help: "first version of gtpu decap module",
    arg_type: "EmptyArg",
    arg_doc: &["(no fields)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: GtpuDecapDrop::NAMES,
    mt_safe: true,
    create: |_, arg: &Value| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(GtpuDecap)))
    },
};

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
/// assumes every packet is one). It parses the packet itself, as the fork's does, rather than
/// trust what a GtpuParser before it found: modules in between may change the packet, and
/// GtpuDecap may have no parser before it; the common shape is checked on a short path.
pub struct GtpuDecap;

fn decap(p: &mut Packet) -> Verdict<GtpuDecapDrop> {
    if let Some(outer) = gtpu::plain_gpdu_outer(p.data()) {
        // The Ethernet header moved in place to just before the inner packet.
        p.data_mut().copy_within(..ETH_LEN, outer);
        let ok = p.adj(outer);
        debug_assert!(ok, "plain_gpdu_outer checked the length");
        return Verdict::Gate(0);
    }
    decap_parsed(p)
}

/// The general path: the full parse.
fn decap_parsed(p: &mut Packet) -> Verdict<GtpuDecapDrop> {
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
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(GtpuDecap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::mem::PagePolicy;
    use bessemer_core::PacketPool;
    use proptest::prelude::*;

    /// A plain G-PDU: Ethernet, IPv4 without options, UDP to 2152, GTP-U without optional
    /// fields, a 20-byte inner packet.
    fn gpdu() -> Vec<u8> {
        let mut f = gtpu::test_frames::plain_gpdu(20);
        for (i, b) in f[50..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    /// A 5G uplink G-PDU: optional fields and a PDU Session Container before the same 20
    /// bytes.
    fn psc_gpdu() -> Vec<u8> {
        let mut f = gtpu::test_frames::psc_gpdu(20);
        for (i, b) in f[58..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    proptest! {
        /// The short path gives what the full parse gives (verdict and bytes) for G-PDUs,
        /// plain or with a PDU Session Container, with header bytes changed and frames cut
        /// or padded.
        #[test]
        fn the_short_path_agrees_with_the_full_parse(
            psc in any::<bool>(),
            edits in proptest::collection::vec((12usize..58, any::<u8>(), 0u8..4), 0..4),
            len in prop_oneof![Just(70usize), Just(78usize), 0usize..98],
        ) {
            let mut f = if psc { psc_gpdu() } else { gpdu() };
            gtpu::test_frames::mutate(&mut f, &edits);
            f.resize(len, 0xee);
            let pool = PacketPool::new("decap-test", 64, PagePolicy::Plain).unwrap();
            let mut cache = pool.cache();
            let mut a = cache.alloc(0).unwrap();
            let mut b = cache.alloc(0).unwrap();
            prop_assert!(a.set_data(&f) && b.set_data(&f));
            let (va, vb) = (decap(&mut a), decap_parsed(&mut b));
            prop_assert_eq!(va, vb);
            prop_assert_eq!(a.data(), b.data());
            cache.free(a);
            cache.free(b);
        }
    }

    #[test]
    fn a_plain_gpdu_takes_the_short_path() {
        assert_eq!(gtpu::plain_gpdu_outer(&gpdu()), Some(gtpu::PLAIN_OUTER));
        assert_eq!(
            gtpu::plain_gpdu_outer(&psc_gpdu()),
            Some(gtpu::PLAIN_OUTER + 8)
        );
    }
}

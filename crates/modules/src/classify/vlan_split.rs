//! VLANSplit: sends each frame to the gate numbered by its outer 802.1Q VLAN id, removing
//! that tag.
use bessemer_core::module::MAX_GATES;
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

use crate::headers::{outer_tag, strip_outer_tag, OuterTag};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why VLANSplit drops packets.
    pub enum VlanSplitDrop {
        TooShort = "too_short",
    }
}

/// Tagged frames (TPID 0x8100 or 0x88a8) leave untagged by gate VID (the outer tag only is
/// removed); untagged frames leave unchanged by gate 0.
pub struct VlanSplit;

impl Module for VlanSplit {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| match outer_tag(p.data()) {
            OuterTag::Untagged => Verdict::Gate(0),
            OuterTag::TooShort => Verdict::Drop(VlanSplitDrop::TooShort),
            OuterTag::Tagged(tci) => {
                strip_outer_tag(p);
                Verdict::Gate(tci & 0x0fff)
            }
        });
    }
}

/// The VLANSplit class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "VLANSplit",
    name_template: "vlan_split",
    help: "split packets depending on their VID",
    arg_type: "VLANSplitArg",
    arg_doc: &[
        "(no fields) tagged frames (0x8100/0x88a8) leave by gate VID with the outer tag removed; untagged by gate 0",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[],
    drop_reasons: VlanSplitDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "VLANSplitArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(VlanSplit)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    const MACS: [u8; 12] = [0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];

    fn tagged(tpid: u16, tci: u16, rest: &[u8]) -> Vec<u8> {
        let mut f = MACS.to_vec();
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
        f.extend_from_slice(rest);
        f
    }

    fn untagged(rest: &[u8]) -> Vec<u8> {
        let mut f = MACS.to_vec();
        f.extend_from_slice(rest);
        f
    }

    #[test]
    fn tagged_frames_leave_by_vid_untagged() {
        let mut h = Harness::new();
        h.add(&CLASS, "vs", &Value::Null).unwrap();
        let (g0, g5, g4095, g7) = (
            h.capture("vs", 0),
            h.capture("vs", 5),
            h.capture("vs", 4095),
            h.capture("vs", 7),
        );
        let ip = [0x08, 0x00, 0x45, 0, 0, 20];
        h.inject(
            "vs",
            0,
            &[
                // PCP 7, DEI 1 must not leak into the gate.
                tagged(0x8100, 0xf005, &ip),
                tagged(0x8100, 0x0fff, &ip),
                untagged(&ip),
                // QinQ: the outer (service) tag decides; the inner tag stays.
                tagged(0x88a8, 7, &[0x81, 0x00, 0x00, 0x09, 0x08, 0x00]),
                // Priority tag (VID 0): gate 0, tag removed.
                tagged(0x8100, 0x2000, &ip),
            ],
        );
        assert_eq!(g5.take_data(), vec![untagged(&ip)]);
        assert_eq!(g4095.take_data(), vec![untagged(&ip)]);
        assert_eq!(
            g7.take_data(),
            vec![untagged(&[0x81, 0x00, 0x00, 0x09, 0x08, 0x00])]
        );
        assert_eq!(g0.take_data(), vec![untagged(&ip), untagged(&ip)]);
    }

    #[test]
    fn short_frames_are_dropped_and_ipv6_passes_on_gate_0() {
        let mut h = Harness::new();
        h.add(&CLASS, "vs", &Value::Null).unwrap();
        let g0 = h.capture("vs", 0);
        let v6 = untagged(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        h.inject(
            "vs",
            0,
            &[
                vec![],
                MACS.to_vec(),
                untagged(&[0x81]),
                // A tag with no inner type.
                tagged(0x8100, 5, &[]),
                tagged(0x8100, 5, &[0x08]),
                // Exactly a tag and an inner type: 18 bytes, leaves as a 14-byte header.
                tagged(0x8100, 0, &[0x08, 0x06]),
                v6.clone(),
            ],
        );
        assert_eq!(h.drops("vs", "too_short"), 5);
        assert_eq!(g0.take_data(), vec![untagged(&[0x08, 0x06]), v6]);
    }

    #[test]
    fn arguments_are_rejected() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "vs", &Value::map().with("tci", 5))
            .unwrap_err();
        assert!(
            e.msg.contains("VLANSplitArg") && e.msg.contains("tci"),
            "{}",
            e.msg
        );
    }
}

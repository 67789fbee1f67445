//! VLANPop: removes the outer 802.1Q/802.1ad VLAN tag.
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch, Value};

use crate::headers::{outer_tag, strip_outer_tag, OuterTag};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why VLANPop drops packets.
    pub enum VlanPopDrop {
        TooShort = "too_short",
    }
}

/// Removes the outer tag (TPID 0x8100 or 0x88a8) after the MAC addresses; untagged frames
/// pass unchanged, as in BESS. Frames shorter than an Ethernet header, or tagged frames too
/// short to hold the tag and the inner EtherType, are dropped as `too_short`.
pub struct VlanPop;

impl Module for VlanPop {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| match outer_tag(p.data()) {
            OuterTag::Untagged => Verdict::Gate(0),
            OuterTag::TooShort => Verdict::Drop(VlanPopDrop::TooShort),
            OuterTag::Tagged(_) => {
                strip_outer_tag(p);
                Verdict::Gate(0)
            }
        });
    }
}

/// The VLANPop class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "VLANPop",
    name_template: "vlan_pop",
    help: "removes the outer 802.1Q/802.1ad VLAN tag",
    arg_type: "VLANPopArg",
    arg_doc: &["(no fields) — untagged frames pass unchanged"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: VlanPopDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        Args::new(arg, "VLANPopArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(VlanPop)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::hex;
    use crate::encap::vlan_push;
    use bessemer_core::testing::Harness;

    const MACS: &str = "020000000002 020000000001";

    #[test]
    fn pops_outer_tags_and_passes_untagged_frames() {
        let mut h = Harness::new();
        h.add(&CLASS, "pop", &Value::Null).unwrap();
        let c = h.capture("pop", 0);
        h.inject(
            "pop",
            0,
            &[
                hex(&format!("{MACS} 8100 0064 0800 4500")),
                hex(&format!("{MACS} 88a8 0007 8100 0064 0800")),
                hex(&format!("{MACS} 0800 4500")),
                hex(&format!("{MACS} 8100 0064")),
                hex(&format!("{MACS} 8100 00")),
                hex("0102"),
            ],
        );
        assert_eq!(
            c.take_data(),
            vec![
                hex(&format!("{MACS} 0800 4500")),
                hex(&format!("{MACS} 8100 0064 0800")),
                hex(&format!("{MACS} 0800 4500")),
            ]
        );
        assert_eq!(h.drops("pop", "too_short"), 3);
    }

    #[test]
    fn push_then_pop_is_the_identity() {
        let mut h = Harness::new();
        h.add(&vlan_push::CLASS, "push", &Value::map().with("tci", 42))
            .unwrap();
        h.add(&CLASS, "pop", &Value::Null).unwrap();
        h.connect("push", 0, "pop", 0).unwrap();
        let c = h.capture("pop", 0);
        let frames = vec![
            hex(&format!("{MACS} 0800 4500 0000")),
            hex(&format!("{MACS} 8100 0001 86dd")),
        ];
        h.inject("push", 0, &frames);
        assert_eq!(c.take_data(), frames);
    }

    use crate::encap::testutil::all_drops;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Push then pop returns every frame of at least an Ethernet header unchanged; shorter
        /// ones are counted by the push.
        #[test]
        fn push_pop_identity(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..40),
            tci in any::<u16>(),
        ) {
            let mut h = Harness::new();
            h.add(&vlan_push::CLASS, "push", &Value::map().with("tci", tci as i64)).unwrap();
            h.add(&CLASS, "pop", &Value::Null).unwrap();
            h.connect("push", 0, "pop", 0).unwrap();
            let c = h.capture("pop", 0);
            h.inject("push", 0, &frames);
            let want: Vec<Vec<u8>> = frames.iter().filter(|f| f.len() >= 14).cloned().collect();
            prop_assert_eq!(c.take_data(), want);
            prop_assert_eq!(
                all_drops(&h, "push"),
                frames.iter().filter(|f| f.len() < 14).count() as u64
            );
            prop_assert_eq!(all_drops(&h, "pop"), 0);
        }
    }
}

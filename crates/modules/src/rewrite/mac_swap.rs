//! MACSwap: swaps the Ethernet source and destination addresses.
use crate::headers::EthernetView;
use crate::util::{process_each, Verdict};
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

bessemer_core::drop_reasons! {
    /// Why MACSwap drops packets.
    pub enum MacSwapDrop {
        TooShort = "too_short",
    }
}

/// Swaps the two MAC addresses of every frame; frames shorter than an Ethernet header are
/// dropped (BESS would read past them).
pub struct MacSwap;

impl Module for MacSwap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| {
            match EthernetView::new_checked(p.data_mut()) {
                Ok(mut eth) => {
                    eth.swap_addrs();
                    Verdict::Gate(0)
                }
                Err(_) => Verdict::Drop(MacSwapDrop::TooShort),
            }
        });
    }
}

/// The MACSwap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "MACSwap",
    name_template: "macswap",
    help: "swaps source/destination MAC addresses",
    arg_type: "MACSwapArg",
    arg_doc: &["(no fields)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: MacSwapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "MACSwapArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(MacSwap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::hex;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn swaps_addresses_and_drops_short_frames() {
        let mut h = Harness::new();
        h.add(&CLASS, "m", &Value::Null).unwrap();
        let c = h.capture("m", 0);
        let frame = hex(
            "02000000 00020200 00000001 08004500 001e0001 40004011 26cc0a00 \
                         00010a00 000204d2 0050000a 7e4c6869",
        );
        let want = hex(
            "02000000 00010200 00000002 08004500 001e0001 40004011 26cc0a00 \
                        00010a00 000204d2 0050000a 7e4c6869",
        );
        h.inject(
            "m",
            0,
            &[frame, vec![1; 13], hex("aaaaaaaaaaaa bbbbbbbbbbbb 0806")],
        );
        assert_eq!(
            c.take_data(),
            vec![want, hex("bbbbbbbbbbbb aaaaaaaaaaaa 0806")]
        );
        assert_eq!(h.drops("m", "too_short"), 1);
    }

    #[test]
    fn rejects_unknown_fields() {
        let mut h = Harness::new();
        let e = h.add(&CLASS, "m", &Value::map().with("x", 1)).unwrap_err();
        assert!(e.msg.contains("MACSwapArg: unknown field 'x'"), "{}", e.msg);
    }
}

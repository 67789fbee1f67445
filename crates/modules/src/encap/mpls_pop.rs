//! MPLSPop: removes the outer MPLS label of MPLS frames; other frames leave on gate 1.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

use crate::headers::{remove_after_macs, EthernetView, ETHERTYPE_IPV4, ETH_LEN};
use crate::util::{process_each, Verdict};

/// EtherType of MPLS unicast.
pub const ETHERTYPE_MPLS: u16 = 0x8847;
const LABEL_LEN: usize = 4;

bessemer_core::drop_reasons! {
    /// Why MPLSPop drops packets.
    pub enum MplsPopDrop {
        TooShort = "too_short",
    }
}

/// Pops one MPLS label (regardless of the bottom-of-stack bit, as BESS) from frames with
/// EtherType 0x8847 and sends them out of gate 0: either with the Ethernet header kept and
/// its EtherType set to `next_eth_type`, or (`remove_eth_header`) with the Ethernet header
/// removed too. Non-MPLS frames leave unchanged on gate 1.
pub struct MplsPop {
    remove_eth_header: bool,
    next_eth_type: [u8; 2],
}

fn parse(arg: &Value, msg: &str) -> Result<(bool, u16)> {
    let mut a = Args::new(arg, msg)?;
    let remove = a.bool("remove_eth_header")?.unwrap_or(false);
    let ty = a
        .uint("next_eth_type", 0xffff)?
        .unwrap_or(ETHERTYPE_IPV4 as u64) as u16;
    a.finish()?;
    Ok((remove, ty))
}

impl MplsPop {
    /// The `set` command.
    fn cmd_set(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let (remove, ty) = parse(arg, "MplsPopArg")?;
        self.remove_eth_header = remove;
        self.next_eth_type = ty.to_be_bytes();
        Ok(Value::Null)
    }
}

impl Module for MplsPop {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let mut other = PacketBatch::new();
        batch.split_off_if(&mut other, |p| {
            EthernetView::new_checked(p.data()).map_or(true, |e| e.ethertype() == ETHERTYPE_MPLS)
        });
        let (remove, ty) = (
            self.remove_eth_header,
            u16::from_be_bytes(self.next_eth_type),
        );
        process_each(ctx, batch, |p| {
            if p.len() < ETH_LEN + LABEL_LEN {
                return Verdict::Drop(MplsPopDrop::TooShort);
            }
            if remove {
                p.adj(ETH_LEN + LABEL_LEN);
            } else {
                remove_after_macs(p, LABEL_LEN, Some(ty));
            }
            Verdict::Gate(0)
        });
        ctx.forward(1, &mut other);
    }

    fn desc(&self) -> String {
        if self.remove_eth_header {
            "removes Ethernet header".to_string()
        } else {
            format!("next type 0x{:04x}", u16::from_be_bytes(self.next_eth_type))
        }
    }
}

/// The MPLSPop class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "MPLSPop",
    name_template: "mpls_pop",
    help: "pops the outer MPLS label (non-MPLS frames leave on gate 1)",
    arg_type: "MplsPopArg",
    arg_doc: &[
        "remove_eth_header: bool — also remove the Ethernet header (default false)",
        "next_eth_type: uint32 — EtherType written after the pop when the header is kept (default 0x0800)",
        "  gate 0: popped MPLS frames; gate 1: frames that are not MPLS (EtherType != 0x8847), unchanged",
    ],
    igates: 1,
    ogates: 2,
    commands: &[CommandSpec {
        name: "set",
        arg_type: "MplsPopArg",
        help: "sets remove_eth_header and next_eth_type (absent fields take their defaults)",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive MplsPop, MplsPop::cmd_set),
    }],
    drop_reasons: MplsPopDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let (remove, ty) = parse(arg, "MplsPopArg")?;
        Ok(Instance::Exclusive(Box::new(MplsPop {
            remove_eth_header: remove,
            next_eth_type: ty.to_be_bytes(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::hex;
    use bessemer_core::testing::Harness;

    const MACS: &str = "020000000002 020000000001";

    #[test]
    fn pops_label_keeps_header_and_splits_non_mpls() {
        let mut h = Harness::new();
        h.add(&CLASS, "pop", &Value::Null).unwrap();
        let c0 = h.capture("pop", 0);
        let c1 = h.capture("pop", 1);
        h.inject(
            "pop",
            0,
            &[
                hex(&format!("{MACS} 8847 00064140 4500")),
                hex(&format!("{MACS} 0800 4500")),
                hex(&format!("{MACS} 8847 0006")),
                hex("0102"),
            ],
        );
        assert_eq!(c0.take_data(), vec![hex(&format!("{MACS} 0800 4500"))]);
        assert_eq!(c1.take_data(), vec![hex(&format!("{MACS} 0800 4500"))]);
        assert_eq!(h.drops("pop", "too_short"), 2);
    }

    #[test]
    fn set_command_changes_behaviour() {
        let mut h = Harness::new();
        h.add(&CLASS, "pop", &Value::map().with("next_eth_type", 0x86dd))
            .unwrap();
        let c0 = h.capture("pop", 0);
        let frame = hex(&format!("{MACS} 8847 00064140 6000"));
        h.inject("pop", 0, std::slice::from_ref(&frame));
        assert_eq!(c0.take_data(), vec![hex(&format!("{MACS} 86dd 6000"))]);
        h.command("pop", "set", &Value::map().with("remove_eth_header", true))
            .unwrap();
        h.inject("pop", 0, &[frame]);
        assert_eq!(c0.take_data(), vec![hex("6000")]);
        let e = h
            .command("pop", "set", &Value::map().with("next_eth_type", 0x10000))
            .unwrap_err();
        assert!(e.msg.contains("MplsPopArg.next_eth_type"), "{}", e.msg);
    }

    use crate::encap::testutil::all_drops;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Arbitrary frames (half of them MPLS-typed) go to gate 0 popped, gate 1 unchanged,
        /// or are counted.
        #[test]
        fn arbitrary_frames_are_split_or_counted(
            frames in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..40), any::<bool>()), 1..40),
            remove in any::<bool>(),
        ) {
            let mut h = Harness::new();
            h.add(&CLASS, "pop", &Value::map().with("remove_eth_header", remove)).unwrap();
            let c0 = h.capture("pop", 0);
            let c1 = h.capture("pop", 1);
            let input: Vec<Vec<u8>> = frames
                .into_iter()
                .map(|(mut f, mpls)| {
                    if mpls && f.len() >= 14 {
                        f[12..14].copy_from_slice(&[0x88, 0x47]);
                    }
                    f
                })
                .collect();
            h.inject("pop", 0, &input);
            let (o0, o1) = (c0.take_data(), c1.take_data());
            let is_mpls = |f: &Vec<u8>| f.len() >= 14 && f[12..14] == [0x88, 0x47];
            let others: Vec<Vec<u8>> =
                input.iter().filter(|f| f.len() >= 14 && !is_mpls(f)).cloned().collect();
            prop_assert_eq!(o1, others);
            let mpls: Vec<Vec<u8>> = input.iter().filter(|f| is_mpls(f)).cloned().collect();
            let short = input.iter().filter(|f| f.len() < 14).count();
            prop_assert_eq!(o0.len() as u64 + all_drops(&h, "pop"), (mpls.len() + short) as u64);
            prop_assert_eq!(o0.len(), mpls.iter().filter(|f| f.len() >= 18).count());
            for (o, i) in o0.iter().zip(mpls.iter().filter(|f| f.len() >= 18)) {
                if remove {
                    prop_assert_eq!(&o[..], &i[18..]);
                } else {
                    prop_assert_eq!(&o[..12], &i[..12]);
                    prop_assert_eq!(&o[12..14], &[0x08, 0x00]);
                    prop_assert_eq!(&o[14..], &i[18..]);
                }
            }
        }
    }
}

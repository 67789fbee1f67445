//! VLANPush: inserts an 802.1Q (or, over an existing 802.1Q tag, 802.1ad) VLAN tag.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

use crate::headers::{push_tag, EthernetView, ETHERTYPE_QINQ, ETHERTYPE_VLAN};
use crate::util::{process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why VLANPush drops packets.
    pub enum VlanPushDrop {
        TooShort = "too_short",
        NoHeadroom = "no_headroom",
    }
}

/// Inserts a 4-byte tag with `tci` after the MAC addresses. Like BESS, the new tag's TPID is
/// 0x88a8 when the frame already carries an 802.1Q (0x8100) tag, 0x8100 otherwise (so a
/// frame with an outer 0x88a8 tag gets an 0x8100 tag in front of it, as in BESS).
pub struct VlanPush {
    tci: u16,
}

fn parse_tci(arg: &Value) -> Result<u16> {
    let mut a = Args::new(arg, "VLANPushArg")?;
    let tci = a.uint("tci", 0xffff)?.unwrap_or(0) as u16;
    a.finish()?;
    Ok(tci)
}

impl VlanPush {
    /// The `set_tci` command.
    fn cmd_set_tci(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.tci = parse_tci(arg)?;
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command: the TCI (the XDP offload reads it to push the tag in
    /// the kernel).
    fn cmd_get_initial_arg(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Value::map().with("tci", self.tci as u64))
    }
}

impl Module for VlanPush {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let tci = self.tci;
        process_each(ctx, batch, |p| {
            let tpid = match EthernetView::new_checked(p.data()) {
                Err(_) => return Verdict::Drop(VlanPushDrop::TooShort),
                Ok(eth) if eth.ethertype() == ETHERTYPE_VLAN => ETHERTYPE_QINQ,
                Ok(_) => ETHERTYPE_VLAN,
            };
            // BESS leaves a packet without headroom unchanged; we drop and count it instead.
            if !push_tag(p, tpid, tci) {
                return Verdict::Drop(VlanPushDrop::NoHeadroom);
            }
            Verdict::Gate(0)
        });
    }

    fn desc(&self) -> String {
        let t = self.tci;
        format!("PCP={} DEI={} VID={}", t >> 13, (t >> 12) & 1, t & 0x0fff)
    }
}

/// The VLANPush class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "VLANPush",
    name_template: "vlan_push",
    help: "inserts an 802.1Q/802.1ad VLAN tag",
    arg_type: "VLANPushArg",
    arg_doc: &[
        "tci: uint64 — tag control information (PCP 3 bits, DEI 1, VID 12; 0..65535, default 0)",
        "  TPID 0x8100, or 0x88a8 when the frame already has an 0x8100 tag",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "set_tci",
            arg_type: "VLANPushArg",
            help: "changes the TCI of pushed tags",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive VlanPush, VlanPush::cmd_set_tci),
        },
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "the TCI of pushed tags",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: false,
            handler: handler!(Exclusive VlanPush, VlanPush::cmd_get_initial_arg),
        },
    ],
    drop_reasons: VlanPushDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Ok(Instance::Exclusive(Box::new(VlanPush {
            tci: parse_tci(arg)?,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::{hex, EAT_HEADROOM};
    use bessemer_core::testing::Harness;

    const MACS: &str = "020000000002 020000000001";

    #[test]
    fn initial_arg_is_the_tci() {
        let mut h = Harness::new();
        h.add(&CLASS, "p", &Value::map().with("tci", 0xa064))
            .unwrap();
        h.command("p", "set_tci", &Value::map().with("tci", 7))
            .unwrap();
        let v = h.command("p", "get_initial_arg", &Value::map()).unwrap();
        assert_eq!(v.get("tci").and_then(Value::as_i64), Some(7));
    }

    #[test]
    fn pushes_8021q_then_8021ad_over_an_existing_tag() {
        let mut h = Harness::new();
        // PCP 5, DEI 0, VID 100 = 0xa064
        h.add(&CLASS, "p", &Value::map().with("tci", 0xa064))
            .unwrap();
        h.add(&CLASS, "q", &Value::map().with("tci", 7)).unwrap();
        h.connect("p", 0, "q", 0).unwrap();
        let c = h.capture("q", 0);
        h.inject("p", 0, &[hex(&format!("{MACS} 0800 4500"))]);
        assert_eq!(
            c.take_data(),
            vec![hex(&format!("{MACS} 88a8 0007 8100 a064 0800 4500"))]
        );
        assert_eq!(
            h.graph
                .modules()
                .iter()
                .find(|m| m.name == "p")
                .unwrap()
                .desc,
            "PCP=5 DEI=0 VID=100"
        );
    }

    #[test]
    fn bess_pushes_8100_over_an_8021ad_tag() {
        let mut h = Harness::new();
        h.add(&CLASS, "p", &Value::map().with("tci", 1)).unwrap();
        let c = h.capture("p", 0);
        h.inject("p", 0, &[hex(&format!("{MACS} 88a8 0002 0800"))]);
        assert_eq!(
            c.take_data(),
            vec![hex(&format!("{MACS} 8100 0001 88a8 0002 0800"))]
        );
    }

    #[test]
    fn set_tci_short_frames_and_headroom() {
        let mut h = Harness::new();
        h.add(&EAT_HEADROOM, "eat", &Value::Null).unwrap();
        h.add(&CLASS, "p", &Value::Null).unwrap();
        h.connect("eat", 0, "p", 0).unwrap();
        let c = h.capture("p", 0);
        h.command("p", "set_tci", &Value::map().with("tci", 0xffff))
            .unwrap();
        h.inject("p", 0, &[hex(&format!("{MACS} 0800")), hex("0102")]);
        assert_eq!(c.take_data(), vec![hex(&format!("{MACS} 8100 ffff 0800"))]);
        assert_eq!(h.drops("p", "too_short"), 1);
        h.inject("eat", 0, &[hex(&format!("{MACS} 0800"))]);
        assert!(c.is_empty());
        assert_eq!(h.drops("p", "no_headroom"), 1);
        let e = h
            .command("p", "set_tci", &Value::map().with("tci", 0x10000))
            .unwrap_err();
        assert!(e.msg.contains("VLANPushArg.tci"), "{}", e.msg);
    }
}

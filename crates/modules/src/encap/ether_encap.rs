//! EtherEncap: prepends an Ethernet header built from metadata attributes.
use bessemer_core::{AccessMode, Args, Context, Instance, Module, ModuleClass, PacketBatch, Value};

use crate::headers::{EthernetView, ETH_LEN};
use crate::util::add_attrs;
use crate::util::{process_each, Verdict};

const ATTR_SRC: usize = 0;
const ATTR_DST: usize = 1;
const ATTR_TYPE: usize = 2;

bessemer_core::drop_reasons! {
    /// Why EtherEncap drops packets.
    pub enum EtherEncapDrop {
        NoHeadroom = "no_headroom",
    }
}

/// Prepends dst (`ether_dst`), src (`ether_src`) and EtherType (`ether_type`, stored in
/// network order) read from each packet's metadata.
pub struct EtherEncap;

impl Module for EtherEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let (src, dst, ty) = (ctx.attr(ATTR_SRC), ctx.attr(ATTR_DST), ctx.attr(ATTR_TYPE));
        process_each(ctx, batch, |p| {
            let s: [u8; 6] = p.get_attr(src);
            let d: [u8; 6] = p.get_attr(dst);
            let t: [u8; 2] = p.get_attr(ty);
            // BESS leaves a packet without headroom unchanged; we drop and count it instead.
            let Some(mut eth) = p
                .prepend(ETH_LEN)
                .and_then(|h| EthernetView::new_checked(h).ok())
            else {
                return Verdict::Drop(EtherEncapDrop::NoHeadroom);
            };
            eth.set_dst(d);
            eth.set_src(s);
            eth.set_ethertype(u16::from_be_bytes(t));
            Verdict::Gate(0)
        });
    }
}

/// The EtherEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "EtherEncap",
    name_template: "ether_encap",
    help: "prepends an Ethernet header taken from metadata attributes",
    arg_type: "EtherEncapArg",
    arg_doc: &[
        "(no fields) — reads metadata ether_src (6 bytes), ether_dst (6), ether_type (2, network order)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: EtherEncapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        Args::new(arg, "EtherEncapArg")?.finish()?;
        add_attrs(
            init,
            &[
                ("ether_src", 6, AccessMode::Read),
                ("ether_dst", 6, AccessMode::Read),
                ("ether_type", 2, AccessMode::Read),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(EtherEncap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::{hex, set_meta, EAT_HEADROOM};
    use crate::rewrite::set_metadata;
    use bessemer_core::testing::Harness;

    fn setup(h: &mut Harness) {
        let meta = set_meta(&[
            ("ether_src", &hex("020000000001")),
            ("ether_dst", &hex("020000000002")),
            ("ether_type", &hex("0800")),
        ]);
        h.add(&set_metadata::CLASS, "set", &meta).unwrap();
        h.add(&CLASS, "enc", &Value::Null).unwrap();
        h.connect("set", 0, "enc", 0).unwrap();
    }

    #[test]
    fn prepends_header_from_metadata() {
        let mut h = Harness::new();
        setup(&mut h);
        let c = h.capture("enc", 0);
        h.inject("set", 0, &[hex("45000014"), vec![]]);
        assert_eq!(
            c.take_data(),
            vec![
                hex("020000000002 020000000001 0800 45000014"),
                hex("020000000002 020000000001 0800"),
            ]
        );
    }

    #[test]
    fn unset_attributes_read_as_zero() {
        let mut h = Harness::new();
        h.add(&CLASS, "enc", &Value::Null).unwrap();
        let c = h.capture("enc", 0);
        h.inject("enc", 0, &[vec![0xaa]]);
        assert_eq!(c.take_data(), vec![[vec![0u8; 14], vec![0xaa]].concat()]);
    }

    #[test]
    fn no_headroom_is_counted() {
        let mut h = Harness::new();
        setup(&mut h);
        h.add(&EAT_HEADROOM, "eat", &Value::Null).unwrap();
        h.connect("eat", 0, "set", 0).unwrap();
        let c = h.capture("enc", 0);
        h.inject("eat", 0, &[vec![1, 2, 3]]);
        assert!(c.take_data().is_empty());
        assert_eq!(h.drops("enc", "no_headroom"), 1);
    }

    #[test]
    fn rejects_unknown_fields() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "e", &Value::map().with("tci", 3))
            .unwrap_err();
        assert!(
            e.msg.contains("EtherEncapArg: unknown field 'tci'"),
            "{}",
            e.msg
        );
    }
}

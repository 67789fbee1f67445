//! Split: sends each packet to the output gate named by a metadata attribute or packet bytes.
use crate::util::{process_each, send_each, Verdict};
use bessemer_core::metadata::METADATA_TOTAL_SIZE;
use bessemer_core::module::MAX_GATES;
use bessemer_core::{
    AccessMode, Args, AttrOffset, AttrSpec, Context, Error, Instance, Module, ModuleClass,
    PacketBatch, MAX_BURST,
};

/// Reads `size` bytes (big-endian) from an attribute or a packet offset; the value is the
/// output gate.
pub struct Split {
    size: usize,
    offset: Option<usize>,
}

bessemer_core::drop_reasons! {
    /// Why Split drops packets.
    pub enum SplitDrop {
        OutOfRange = "gate_out_of_range",
        TooShort = "too_short",
    }
}

impl Split {
    /// Packet by packet, from packet bytes or an attribute anywhere.
    fn each(&self, ctx: &mut Context, batch: &mut PacketBatch, attr: AttrOffset) {
        let (offset, size) = (self.offset, self.size);
        // The value built in a register, a byte at a time: copied into a buffer (a memcpy of
        // a run-time length) and read back as one word, it waited on a store-forwarding
        // stall every packet (three quarters of the class's time).
        let be = |b: &[u8]| b.iter().fold(0u64, |v, &x| v << 8 | x as u64);
        process_each(ctx, batch, |p| {
            let v = match offset {
                Some(off) => {
                    let Some(b) = p.data().get(off..off + size) else {
                        return Verdict::Drop(SplitDrop::TooShort);
                    };
                    be(b)
                }
                None => match attr {
                    AttrOffset::At(o) => {
                        let o = o as usize;
                        be(&p.metadata()[o..o + size])
                    }
                    _ => 0,
                },
            };
            gate_of(v)
        });
    }
}

/// Where a packet whose value is `v` goes.
#[inline(always)]
fn gate_of(v: u64) -> Verdict<SplitDrop> {
    if v >= MAX_GATES as u64 {
        Verdict::Drop(SplitDrop::OutOfRange)
    } else {
        Verdict::Gate(v as u16)
    }
}

impl Module for Split {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let attr = ctx.attr(0);
        if self.offset.is_some() {
            return self.each(ctx, batch, attr);
        }
        // An attribute: read with one 8-byte load where it fits in the metadata area, and
        // the batch forwarded whole when every packet goes one way (a copy of a run-time
        // length per packet, then a second pass comparing verdicts, cost more).
        let o = match attr {
            AttrOffset::At(o) if o as usize + 8 <= METADATA_TOTAL_SIZE => o as usize,
            AttrOffset::At(_) => return self.each(ctx, batch, attr),
            // No writer reaches it: the value is 0 for every packet.
            AttrOffset::NoRead | AttrOffset::NoWrite => return ctx.forward(0, batch),
        };
        let shift = 64 - 8 * self.size as u32;
        let mut v = [Verdict::Gate(0); MAX_BURST];
        let (mut or, mut and) = (0u64, u64::MAX);
        for (v, p) in v.iter_mut().zip(batch.pkts()) {
            let w: [u8; 8] = p.metadata()[o..o + 8].try_into().unwrap();
            let x = u64::from_be_bytes(w) >> shift;
            or |= x;
            and &= x;
            *v = gate_of(x);
        }
        if or == and && or < MAX_GATES as u64 {
            return ctx.forward(or as u16, batch);
        }
        send_each(ctx, batch, |i| v[i]);
    }

    fn desc(&self) -> String {
        match self.offset {
            Some(o) => format!("{} bytes at offset {o}", self.size),
            None => format!("{}-byte attribute", self.size),
        }
    }
}

/// The Split class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Split",
    name_template: "split",
    help: "split packets depending on packet data or metadata attributes",
    arg_type: "SplitArg",
    arg_doc: &[
        "size: uint64 — bytes to read, 1..8 (big-endian)",
        "attribute: string — metadata attribute to read (or:)",
        "offset: int64 — packet data offset to read (0 when neither is given, as BESS)",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[],
    drop_reasons: SplitDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "SplitArg")?;
        let size = a
            .int("size", 1, 8)?
            .ok_or_else(|| Error::invalid("SplitArg.size is required (1..8)"))?
            as usize;
        let attribute = a.str("attribute")?;
        let offset = a.int("offset", 0, 4095)?;
        a.finish()?;
        let offset = match (attribute, offset) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "SplitArg: give either attribute or offset, not both",
                ))
            }
            // protobuf cannot tell offset 0 from no offset: BESS reads byte 0 then.
            (None, None) => Some(0),
            (Some(name), None) => {
                init.add_attr(AttrSpec {
                    name: name.to_string(),
                    size,
                    mode: AccessMode::Read,
                })?;
                None
            }
            (None, Some(o)) => Some(o as usize),
        };
        Ok(Instance::Exclusive(Box::new(Split { size, offset })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn splits_on_packet_bytes_and_drops_bad_ones() {
        let mut h = Harness::new();
        h.add(&CLASS, "s", &Value::map().with("size", 2).with("offset", 4))
            .unwrap();
        let (c3, c9) = (h.capture("s", 3), h.capture("s", 9));
        let mk = |v: u16| {
            let mut p = vec![0u8; 60];
            p[4..6].copy_from_slice(&v.to_be_bytes());
            p
        };
        h.inject("s", 0, &[mk(3), mk(9), mk(3), mk(9000), vec![0u8; 5]]);
        assert_eq!(c3.take().len(), 2);
        assert_eq!(c9.take().len(), 1);
        assert_eq!(h.drops("s", "gate_out_of_range"), 1);
        assert_eq!(h.drops("s", "too_short"), 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Splitting on an attribute of every size, batches going one way or several: each
        /// packet leaves by the gate its big-endian value names, values past the gates drop.
        #[test]
        fn splits_on_an_attribute(
            size in 1usize..=8,
            vals in proptest::collection::vec(
                proptest::prop_oneof![0u64..4, proptest::prelude::Just(3u64), 0u64..100_000], 1..10),
        ) {
            let mut h = Harness::new();
            let attr = Value::map().with("name", "g").with("size", size as i64).with("offset", 0);
            h.add(&crate::rewrite::set_metadata::CLASS, "set",
                  &Value::map().with("attrs", Value::List(vec![attr]))).unwrap();
            h.add(&CLASS, "s", &Value::map().with("size", size as i64).with("attribute", "g"))
                .unwrap();
            h.connect("set", 0, "s", 0).unwrap();
            let caps: Vec<_> = (0..8).map(|g| h.capture("s", g)).collect();
            let keep = if size == 8 { u64::MAX } else { (1 << (8 * size)) - 1 };
            let pkts: Vec<Vec<u8>> = vals
                .iter()
                .map(|&v| {
                    let mut p = (v & keep).to_be_bytes()[8 - size..].to_vec();
                    p.resize(20, 0xaa);
                    p
                })
                .collect();
            h.inject("set", 0, &pkts);
            for (g, c) in caps.iter().enumerate() {
                let want = vals.iter().filter(|&&v| v & keep == g as u64).count();
                proptest::prop_assert_eq!(c.take().len(), want, "gate {}", g);
            }
            let out = vals.iter().filter(|&&v| v & keep >= MAX_GATES as u64).count();
            proptest::prop_assert_eq!(h.drops("s", "gate_out_of_range"), out as u64);
        }
    }

    #[test]
    fn argument_errors() {
        let mut h = Harness::new();
        assert!(h
            .add(&CLASS, "a", &Value::map().with("size", 9).with("offset", 0))
            .is_err());
        // Neither attribute nor offset: offset 0 (what an `offset: 0` arrives as), as BESS.
        h.add(&CLASS, "b", &Value::map().with("size", 1)).unwrap();
        let c = h.capture("b", 7);
        h.inject("b", 0, &[vec![7u8, 1, 2]]);
        assert_eq!(c.take().len(), 1);
        let both = Value::map()
            .with("size", 1)
            .with("offset", 0)
            .with("attribute", "x");
        assert!(h
            .add(&CLASS, "c", &both)
            .unwrap_err()
            .msg
            .contains("not both"));
    }
}

//! SetMetadata: sets metadata attributes from constants or packet bytes.
use crate::util::{process_each, Verdict};
use bessemer_core::metadata::MAX_ATTR_SIZE;
use bessemer_core::{
    AccessMode, Args, AttrSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

#[derive(Clone, Debug)]
struct Attr {
    size: usize,
    value: [u8; MAX_ATTR_SIZE],
    offset: Option<usize>,
    mask: Option<Vec<u8>>,
    rshift_bits: i32,
}

/// Writes each declared attribute: a constant, or `size` bytes copied from the packet at
/// `offset` (optionally masked and shifted right).
pub struct SetMetadata {
    attrs: Vec<Attr>,
}

bessemer_core::drop_reasons! {
    /// Why SetMetadata drops packets.
    pub enum SetMetadataDrop {
        TooShort = "too_short",
    }
}

fn parse_attr(v: &Value, i: usize, init: &mut bessemer_core::InitContext) -> Result<Attr> {
    let m = format!("SetMetadataArg.attrs[{i}]");
    let mut a = Args::new(v, &m)?;
    let name = a
        .str("name")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::invalid(format!("{m}.name is required")))?;
    let size = a
        .int("size", 1, MAX_ATTR_SIZE as i64)?
        .ok_or_else(|| Error::invalid(format!("{m}.size is required")))? as usize;
    let value_int = a.uint("value_int", u64::MAX)?;
    let value_bin = a.bytes("value_bin")?;
    let offset = a.int("offset", 0, 4095)?;
    let mask = a.bytes("mask")?.map(|b| b.to_vec());
    let rshift_bits = a.int("rshift_bits", -255, 255)?.unwrap_or(0) as i32;
    a.finish()?;
    let mut value = [0u8; MAX_ATTR_SIZE];
    match (value_int, value_bin) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "{m}: value_int and value_bin are exclusive"
            )))
        }
        (Some(v), None) => {
            // Big-endian (network order), right-aligned, as BESS stores integer values.
            if size < 8 && v >> (8 * size) != 0 {
                return Err(Error::invalid(format!(
                    "{m}.value_int: {v} does not fit in {size} bytes"
                )));
            }
            let n = size.min(8);
            value[size - n..size].copy_from_slice(&v.to_be_bytes()[8 - n..]);
        }
        (None, Some(b)) => {
            if b.len() != size {
                return Err(Error::invalid(format!(
                    "{m}.value_bin: {} bytes for a {size}-byte attribute",
                    b.len()
                )));
            }
            value[..size].copy_from_slice(b);
        }
        (None, None) => {}
    }
    if let Some(mk) = &mask {
        if mk.len() != size {
            return Err(Error::invalid(format!(
                "{m}.mask: {} bytes for a {size}-byte attribute",
                mk.len()
            )));
        }
    }
    init.add_attr(AttrSpec {
        name: name.to_string(),
        size,
        mode: AccessMode::Write,
    })?;
    Ok(Attr {
        size,
        value,
        offset: offset.map(|o| o as usize),
        mask,
        rshift_bits,
    })
}

fn shift_right(bytes: &mut [u8], bits: i32) {
    if bits == 0 {
        return;
    }
    // Treat the bytes as one big-endian number and shift it (left for negative counts).
    let mut v: Vec<u8> = bytes.to_vec();
    let (amount, right) = (bits.unsigned_abs() as usize, bits > 0);
    for _ in 0..amount {
        if right {
            let mut carry = 0u8;
            for b in v.iter_mut() {
                let nc = *b & 1;
                *b = (*b >> 1) | (carry << 7);
                carry = nc;
            }
        } else {
            let mut carry = 0u8;
            for b in v.iter_mut().rev() {
                let nc = *b >> 7;
                *b = (*b << 1) | carry;
                carry = nc;
            }
        }
    }
    bytes.copy_from_slice(&v);
}

impl Module for SetMetadata {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let need = self
            .attrs
            .iter()
            .filter_map(|a| a.offset.map(|o| o + a.size))
            .max()
            .unwrap_or(0);
        let attrs = &self.attrs;
        // Attribute by attribute over the packets long enough for every offset; the short
        // ones are dropped below.
        for (id, a) in attrs.iter().enumerate() {
            let off = ctx.attr(id);
            for p in batch.pkts_mut().iter_mut().filter(|p| p.len() >= need) {
                match a.offset {
                    None => p.set_attr(off, &a.value[..a.size]),
                    Some(o) => {
                        let mut buf = [0u8; MAX_ATTR_SIZE];
                        let v = &mut buf[..a.size];
                        v.copy_from_slice(&p.data()[o..o + a.size]);
                        if let Some(mk) = &a.mask {
                            v.iter_mut().zip(mk).for_each(|(b, m)| *b &= m);
                        }
                        shift_right(v, a.rshift_bits);
                        p.set_attr(off, v);
                    }
                }
            }
        }
        process_each(ctx, batch, |p| {
            if p.len() < need {
                Verdict::Drop(SetMetadataDrop::TooShort)
            } else {
                Verdict::Gate(0)
            }
        });
    }

    fn desc(&self) -> String {
        format!("{} attributes", self.attrs.len())
    }
}

/// The SetMetadata class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "SetMetadata",
    name_template: "setattr",
    help: "Set metadata attributes to packets",
    arg_type: "SetMetadataArg",
    arg_doc: &[
        "attrs: [{name: string, size: uint64 (1..32), value_int: uint64 | value_bin: bytes, offset: int32, mask: bytes, rshift_bits: int32}]",
        "  a constant value, or size bytes copied from packet data at offset (masked, shifted right)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: SetMetadataDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "SetMetadataArg")?;
        let list = a.list("attrs")?;
        a.finish()?;
        let attrs = list.iter().enumerate().map(|(i, v)| parse_attr(v, i, init)).collect::<Result<Vec<_>>>()?;
        Ok(Instance::Exclusive(Box::new(SetMetadata { attrs })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::AttrOffset;

    fn arg(attrs: Vec<Value>) -> Value {
        Value::map().with("attrs", Value::List(attrs))
    }

    #[test]
    fn constant_and_packet_bytes_land_at_the_assigned_offset() {
        let mut h = Harness::new();
        let attrs = vec![
            Value::map()
                .with("name", "c")
                .with("size", 2)
                .with("value_bin", vec![0xbe, 0xef]),
            Value::map()
                .with("name", "p")
                .with("size", 2)
                .with("offset", 1)
                .with("mask", vec![0xff, 0xf0])
                .with("rshift_bits", 4),
        ];
        h.add(&CLASS, "set", &arg(attrs)).unwrap();
        // Split reads 'p' so the writes are not skipped; it forwards by the attribute value.
        h.add(
            &crate::basic::split::CLASS,
            "split",
            &Value::map().with("size", 2).with("attribute", "p"),
        )
        .unwrap();
        h.connect("set", 0, "split", 0).unwrap();
        let AttrOffset::At(po) = h.graph.attr_offsets("set").unwrap()[1].1 else {
            panic!("p has no offset")
        };
        // 0x01 0x2f -> masked 0x0120 -> >>4 = 0x0012 = gate 18
        let cap = h.capture("split", 18);
        h.inject("set", 0, &[vec![0x00, 0x01, 0x2f, 0x00]]);
        let got = cap.take();
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0].meta[po as usize..po as usize + 2], &[0x00, 0x12]);
        // 'c' has no reader: its write is skipped.
        assert_eq!(
            h.graph.attr_offsets("set").unwrap()[0].1,
            AttrOffset::NoWrite
        );
        h.inject("set", 0, &[vec![0u8; 2]]);
        assert_eq!(h.drops("set", "too_short"), 1);
    }

    #[test]
    fn argument_errors_name_the_attribute() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "a", &arg(vec![Value::map().with("size", 2)]))
            .unwrap_err();
        assert!(e.msg.contains("attrs[0].name"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "b",
                &arg(vec![Value::map()
                    .with("name", "x")
                    .with("size", 1)
                    .with("value_bin", vec![1, 2])]),
            )
            .unwrap_err();
        assert!(e.msg.contains("value_bin"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "c",
                &arg(vec![Value::map().with("name", "x").with("size", 40)]),
            )
            .unwrap_err();
        assert!(e.msg.contains("size"), "{}", e.msg);
    }
}

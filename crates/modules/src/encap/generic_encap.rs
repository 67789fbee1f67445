//! GenericEncap: prepends a header made of constant fields and metadata attributes.
use bessemer_core::{
    AccessMode, Args, AttrSpec, Context, Error, InitContext, Instance, Module, ModuleClass,
    PacketBatch, Result, Value,
};

use crate::util::{copy_small, process_each, Verdict};

/// Most fields one GenericEncap holds (BESS's MAX_FIELDS).
pub const MAX_FIELDS: usize = 8;
/// Largest field, in bytes (BESS's MAX_FIELD_SIZE).
pub const MAX_FIELD_SIZE: usize = 8;

bessemer_core::drop_reasons! {
    /// Why GenericEncap drops packets.
    pub enum GenericEncapDrop {
        NoHeadroom = "no_headroom",
    }
}

#[derive(Clone, Copy, Debug)]
enum Source {
    /// Index of the declared metadata attribute.
    Attr(usize),
    Const,
}

#[derive(Clone, Copy, Debug)]
struct Field {
    pos: usize,
    size: usize,
    src: Source,
}

/// Prepends `sum(size)` bytes: each field is either a constant (big-endian `value_int`, or
/// `value_bin` bytes) or the first `size` bytes of a metadata attribute of that size.
pub struct GenericEncap {
    fields: Vec<Field>,
    /// The header with every constant field filled in.
    template: [u8; MAX_FIELDS * MAX_FIELD_SIZE],
    size: usize,
}

fn parse_field(
    v: &Value,
    i: usize,
    pos: usize,
    template: &mut [u8],
    init: &mut InitContext,
) -> Result<Field> {
    let m = format!("GenericEncapArg.fields[{i}]");
    let mut a = Args::new(v, &m)?;
    let size = a
        .int("size", 1, MAX_FIELD_SIZE as i64)?
        .ok_or_else(|| Error::invalid(format!("{m}.size is required (1..{MAX_FIELD_SIZE})")))?
        as usize;
    let attribute = a.str("attribute")?;
    let value = a.message("value")?;
    a.finish()?;
    let src = match (attribute, value) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "{m}: 'attribute' and 'value' are exclusive"
            )))
        }
        (None, None) => {
            return Err(Error::invalid(format!(
                "{m}: must specify 'value' or 'attribute'"
            )))
        }
        (Some(name), None) => {
            if name.is_empty() {
                return Err(Error::invalid(format!("{m}.attribute: empty name")));
            }
            Source::Attr(init.add_attr(AttrSpec {
                name: name.to_string(),
                size,
                mode: AccessMode::Read,
            })?)
        }
        (None, Some(fd)) => {
            let vm = format!("{m}.value");
            let mut b = Args::new(fd, &vm)?;
            let int = b.uint("value_int", u64::MAX)?;
            let bin = b.bytes("value_bin")?;
            b.finish()?;
            let out = &mut template[pos..pos + size];
            match (int, bin) {
                (Some(v), None) => {
                    if size < 8 && v >> (8 * size) != 0 {
                        return Err(Error::invalid(format!(
                            "{vm}.value_int: {v} does not fit in {size} bytes"
                        )));
                    }
                    out.copy_from_slice(&v.to_be_bytes()[8 - size..]);
                }
                (None, Some(bytes)) => {
                    if bytes.len() != size {
                        return Err(Error::invalid(format!(
                            "{vm}.value_bin: {} bytes for a {size}-byte field",
                            bytes.len()
                        )));
                    }
                    out.copy_from_slice(bytes);
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "{vm}: exactly one of value_int and value_bin is required"
                    )))
                }
            }
            Source::Const
        }
    };
    Ok(Field { pos, size, src })
}

impl Module for GenericEncap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let mut offs = [bessemer_core::AttrOffset::NoRead; MAX_FIELDS];
        for (i, f) in self.fields.iter().enumerate() {
            if let Source::Attr(id) = f.src {
                offs[i] = ctx.attr(id);
            }
        }
        let (fields, size, template) = (&self.fields, self.size, &self.template);
        process_each(ctx, batch, |p| {
            // BESS leaves a packet without headroom unchanged; we drop and count it instead.
            let Some(h) = p.prepend(size) else {
                return Verdict::Drop(GenericEncapDrop::NoHeadroom);
            };
            // The constant fields straight into the packet, then the attributes over them.
            // (Built in a local copy first, a field's narrow store and the whole header's
            // wide load of the same bytes stalled store forwarding: half the class's time.)
            copy_small(h, &template[..size]);
            for (i, f) in fields.iter().enumerate() {
                if let Source::Attr(_) = f.src {
                    let mut v = [0u8; MAX_FIELD_SIZE];
                    if let bessemer_core::AttrOffset::At(o) = offs[i] {
                        let o = o as usize;
                        copy_small(&mut v[..f.size], &p.metadata()[o..o + f.size]);
                    }
                    copy_small(&mut p.data_mut()[f.pos..f.pos + f.size], &v[..f.size]);
                }
            }
            Verdict::Gate(0)
        });
    }

    fn desc(&self) -> String {
        format!("{} fields, {} bytes", self.fields.len(), self.size)
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "GenericEncapArg")?;
    let list = a.list("fields")?;
    a.finish()?;
    if list.len() > MAX_FIELDS {
        return Err(Error::invalid(format!(
            "GenericEncapArg.fields: {} fields, at most {MAX_FIELDS}",
            list.len()
        )));
    }
    let mut template = [0u8; MAX_FIELDS * MAX_FIELD_SIZE];
    let mut fields = Vec::with_capacity(list.len());
    let mut pos = 0;
    for (i, v) in list.iter().enumerate() {
        let f = parse_field(v, i, pos, &mut template, init)?;
        pos += f.size;
        fields.push(f);
    }
    Ok(Instance::Exclusive(Box::new(GenericEncap {
        fields,
        template,
        size: pos,
    })))
}

/// The GenericEncap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GenericEncap",
    name_template: "generic_encap",
    help: "prepends a header of constant values and metadata attributes",
    arg_type: "GenericEncapArg",
    arg_doc: &[
        "fields: [{size: uint64 (1..8), attribute: string | value: {value_int: uint64 | value_bin: bytes}}] — at most 8, laid out in order",
        "  value_int is written big-endian in size bytes; an attribute field copies that attribute (declared with this size)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: GenericEncapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::{hex, set_meta, EAT_HEADROOM};
    use crate::rewrite::set_metadata;
    use bessemer_core::testing::Harness;

    fn konst(size: i64, v: u64) -> Value {
        Value::map().with("size", size).with(
            "value",
            Value::map().with("value_int", Value::Int(v as i64)),
        )
    }

    fn attr(size: i64, name: &str) -> Value {
        Value::map().with("size", size).with("attribute", name)
    }

    fn fields(f: Vec<Value>) -> Value {
        Value::map().with("fields", Value::List(f))
    }

    #[test]
    fn the_bess_example_header() {
        // BESS's documented example: 4-byte 0xdeadbeef, 2-byte attribute 'foo', 2-byte 0x1234.
        let mut h = Harness::new();
        h.add(
            &set_metadata::CLASS,
            "set",
            &set_meta(&[("foo", &hex("abcd"))]),
        )
        .unwrap();
        let f = fields(vec![
            konst(4, 0xdead_beef),
            attr(2, "foo"),
            konst(2, 0x1234),
            Value::map()
                .with("size", 3)
                .with("value", Value::map().with("value_bin", hex("010203"))),
        ]);
        h.add(&CLASS, "enc", &f).unwrap();
        h.connect("set", 0, "enc", 0).unwrap();
        let c = h.capture("enc", 0);
        h.inject("set", 0, &[hex("ffff"), vec![]]);
        assert_eq!(
            c.take_data(),
            vec![
                hex("deadbeef abcd 1234 010203 ffff"),
                hex("deadbeef abcd 1234 010203"),
            ]
        );
    }

    #[test]
    fn no_fields_passes_packets_unchanged_and_no_headroom_is_counted() {
        let mut h = Harness::new();
        h.add(&CLASS, "nop", &Value::Null).unwrap();
        let c = h.capture("nop", 0);
        h.inject("nop", 0, &[hex("0102")]);
        assert_eq!(c.take_data(), vec![hex("0102")]);
        h.add(&EAT_HEADROOM, "eat", &Value::Null).unwrap();
        h.add(&CLASS, "enc", &fields(vec![konst(1, 7)])).unwrap();
        h.connect("eat", 0, "enc", 0).unwrap();
        let c = h.capture("enc", 0);
        h.inject("eat", 0, &[hex("0102")]);
        assert!(c.is_empty());
        assert_eq!(h.drops("enc", "no_headroom"), 1);
    }

    #[test]
    fn argument_errors_name_the_field() {
        let mut h = Harness::new();
        let cases = [
            (fields(vec![konst(9, 1)]), "fields[0].size"),
            (
                fields(vec![konst(1, 1), konst(1, 256)]),
                "fields[1].value.value_int",
            ),
            (
                fields(vec![Value::map().with("size", 2)]),
                "fields[0]: must specify",
            ),
            (
                fields(vec![Value::map()
                    .with("size", 2)
                    .with("value", Value::map().with("value_bin", hex("01")))]),
                "fields[0].value.value_bin",
            ),
            (fields(vec![konst(1, 0); 9]), "at most 8"),
            (fields(vec![attr(2, "")]), "fields[0].attribute"),
        ];
        for (i, (arg, want)) in cases.into_iter().enumerate() {
            let e = h.add(&CLASS, &format!("e{i}"), &arg).unwrap_err();
            assert!(e.msg.contains(want), "{want}: {}", e.msg);
        }
    }

    use crate::encap::generic_decap;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any set of constant fields is prepended as its big-endian bytes, and GenericDecap
        /// of the header size gives the payload back.
        #[test]
        fn constant_header_then_decap_is_the_identity(
            vals in proptest::collection::vec((1usize..=8, any::<u64>()), 0..=8),
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..10),
        ) {
            let mut h = Harness::new();
            let mut header = Vec::new();
            let list: Vec<Value> = vals
                .iter()
                .map(|&(size, v)| {
                    // Integer arguments are signed 64-bit in the framework (larger uint64 values
                    // are refused by the daemon; value_bin carries them).
                    let v = if size == 8 { v >> 1 } else { v & ((1u64 << (8 * size)) - 1) };
                    header.extend_from_slice(&v.to_be_bytes()[8 - size..]);
                    konst(size as i64, v)
                })
                .collect();
            h.add(&CLASS, "enc", &fields(list)).unwrap();
            h.add(&generic_decap::CLASS, "dec", &Value::map().with("bytes", header.len())).unwrap();
            let c_enc = h.capture("enc", 0);
            h.inject("enc", 0, &payloads);
            let got = c_enc.take_data();
            let want: Vec<Vec<u8>> = payloads.iter().map(|p| [header.clone(), p.clone()].concat()).collect();
            prop_assert_eq!(&got, &want);
            let c_dec = h.capture("dec", 0);
            h.inject("dec", 0, &got);
            prop_assert_eq!(c_dec.take_data(), payloads);
        }
    }
}

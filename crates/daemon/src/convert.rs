//! `google.protobuf.Any` <-> [`Value`]: argument messages are decoded with prost-reflect
//! against the daemon's descriptor pool into `Value::Map`s keyed by protobuf field names, and
//! command results are encoded back into named messages.
//!
//! Decoding keeps only the fields that are set (proto3 scalars at their default value are
//! absent, as protobuf itself does not tell them apart); repeated fields become
//! `Value::List`, maps `Value::Map` keyed by the decimal/string form of the key, nested
//! messages `Value::Map`, enums `Value::Int`. Every failure is an EINVAL [`Error`] naming the
//! type and field; nothing here panics on client input.

use std::sync::OnceLock;

use bessemer_core::{Error, Result, Value};
use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value as PValue,
};

/// The encoded `FileDescriptorSet` of `proto/bess/*.proto` (with its imports).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/bess_descriptor.bin"));

/// Protobuf package of every BESS message.
pub const PACKAGE: &str = "bess.pb";

/// The type URL prefix BESS clients use in `Any.type_url`.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The descriptor pool of the BESS protocol (decoded once).
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the descriptor set built by build.rs is valid")
    })
}

/// `bess.pb.<name>` unless `name` is already qualified.
pub fn full_name(name: &str) -> String {
    if name.contains('.') {
        name.to_string()
    } else {
        format!("{PACKAGE}.{name}")
    }
}

/// The message name of a type URL (the part after the last '/').
pub fn type_name_of_url(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// Decodes an `Any` into a [`Value`].
///
/// An absent `Any`, or one with neither type URL nor bytes, is an empty message. `expected`
/// (a message name, qualified or not) is the type the caller requires; `what` names the
/// request for error messages (e.g. "module class 'Source'").
pub fn any_to_value(
    any: Option<&prost_types::Any>,
    expected: Option<&str>,
    what: &str,
) -> Result<Value> {
    let Some(any) = any else {
        return Ok(Value::map());
    };
    if any.type_url.is_empty() {
        if any.value.is_empty() {
            return Ok(Value::map());
        }
        return Err(Error::invalid(format!(
            "argument for {what}: Any has {} bytes of value but no type URL",
            any.value.len()
        )));
    }
    let name = type_name_of_url(&any.type_url);
    let Some(desc) = pool().get_message_by_name(name) else {
        return Err(Error::invalid(format!(
            "argument for {what}: unknown message type '{name}' (type URL '{}')",
            truncate(&any.type_url, 200)
        )));
    };
    if let Some(exp) = expected {
        let exp = full_name(exp);
        if desc.full_name() != exp && any.value.is_empty() {
            // BESS unpacks an Any of another type into the expected message and goes on with
            // its defaults. pybess relies on it (it packs `EmptyArg` for a class whose
            // `<Class>Arg` its protobuf module lacks), and so does the UPF's agent (it sends
            // `ExactMatchCommandClearArg` where the command takes `EmptyArg`). An argument
            // with no field set is taken that way; one carrying fields of another message
            // is refused below, since BESS would silently drop what it says.
            return Ok(Value::map());
        }
        if desc.full_name() != exp && !same_message_elsewhere(&desc, &exp) {
            return Err(Error::invalid(format!(
                "argument for {what} must be a {exp}, got a {}",
                desc.full_name()
            )));
        }
    }
    decode_value(&desc, &any.value)
}

/// True if `got` is the message `expected` names, declared in another package: same name, same
/// fields (numbers, names, types, nested messages alike). A BESS plugin's messages live in the
/// plugin's package (`sample.supdate.pb.SequentialUpdateArg`, as omec's pybess packs them),
/// while Bessemer builds the class in and also declares them in `bess.pb`; either is accepted.
fn same_message_elsewhere(got: &MessageDescriptor, expected: &str) -> bool {
    pool()
        .get_message_by_name(expected)
        .is_some_and(|exp| got.name() == exp.name() && same_shape(got, &exp, 0))
}

/// Field-by-field equality of two message types (recursing into nested messages, to a bound).
fn same_shape(a: &MessageDescriptor, b: &MessageDescriptor, depth: usize) -> bool {
    if a.full_name() == b.full_name() {
        return true;
    }
    if depth > 8 || a.fields().len() != b.fields().len() {
        return false;
    }
    a.fields().all(|fa| {
        b.get_field(fa.number()).is_some_and(|fb| {
            fa.name() == fb.name()
                && fa.cardinality() == fb.cardinality()
                && match (fa.kind(), fb.kind()) {
                    (Kind::Message(ma), Kind::Message(mb)) => same_shape(&ma, &mb, depth + 1),
                    (Kind::Enum(ea), Kind::Enum(eb)) => ea.full_name() == eb.full_name(),
                    (ka, kb) => ka == kb,
                }
        })
    })
}

/// Arguments at least this long have their repeated message fields decoded one element at
/// a time (see [`decode_value`]).
const SPLIT_MIN: usize = 64 << 10;

/// Decodes message bytes of type `desc` into a [`Value::Map`].
///
/// A large argument is mostly a long repeated message field (a million table rules): as
/// one dynamic message each element costs over a kilobyte of maps, so its elements are cut
/// out of the bytes and decoded and converted one at a time, and the rest of the message
/// is decoded as usual. The result is the same as decoding the whole.
pub fn decode_value(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Value> {
    if bytes.len() >= SPLIT_MIN {
        let lists: Vec<FieldDescriptor> = desc
            .fields()
            .filter(|f| f.is_list() && matches!(f.kind(), Kind::Message(_)))
            .collect();
        if !lists.is_empty() {
            if let Some((rest, elems)) = split_fields(bytes, &lists) {
                return decode_split(desc, &rest, &lists, elems);
            }
        }
    }
    decode_whole(desc, bytes)
}

/// [`decode_value`] for a message whose repeated message fields `lists` were cut out of
/// the bytes: `rest` is the remainder, `elems[i]` the elements of `lists[i]`.
fn decode_split(
    desc: &MessageDescriptor,
    rest: &[u8],
    lists: &[FieldDescriptor],
    elems: Vec<Vec<&[u8]>>,
) -> Result<Value> {
    let Value::Map(mut map) = decode_whole(desc, rest)? else {
        unreachable!("a message decodes to a map");
    };
    for (fd, elems) in lists.iter().zip(elems) {
        if elems.is_empty() {
            continue;
        }
        let Kind::Message(m) = fd.kind() else {
            unreachable!("only message fields are cut out");
        };
        let mut out = Vec::with_capacity(elems.len());
        for e in elems {
            out.push(decode_value(&m, e)?);
        }
        map.push((fd.name().to_string(), Value::List(out)));
    }
    let number = |name: &str| desc.get_field_by_name(name).map_or(0, |f| f.number());
    map.sort_by_key(|(name, _)| number(name));
    Ok(Value::Map(map))
}

/// Reads a varint at `*at`, advancing it; None if the bytes end first or it is too long.
fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// What [`split_fields`] cuts a message into: the bytes left, and each list field's elements.
type Split<'a> = (Vec<u8>, Vec<Vec<&'a [u8]>>);

/// Cuts the occurrences of fields `lists` (repeated, message-typed) out of message bytes
/// `b`: the remaining bytes and each field's element bytes in order. None when the bytes
/// are not well-formed (or hold groups): the caller then decodes them whole, which names
/// the problem.
fn split_fields<'a>(b: &'a [u8], lists: &[FieldDescriptor]) -> Option<Split<'a>> {
    let mut rest = Vec::new();
    let mut elems = vec![Vec::new(); lists.len()];
    let mut at = 0;
    while at < b.len() {
        let start = at;
        let tag = varint(b, &mut at)?;
        let (number, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => {
                varint(b, &mut at)?;
            }
            1 => at = at.checked_add(8).filter(|&e| e <= b.len())?,
            5 => at = at.checked_add(4).filter(|&e| e <= b.len())?,
            2 => {
                let len = usize::try_from(varint(b, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|&e| e <= b.len())?;
                if let Some(i) = lists.iter().position(|f| f.number() as u64 == number) {
                    elems[i].push(&b[at..end]);
                    at = end;
                    continue;
                }
                at = end;
            }
            _ => return None,
        }
        rest.extend_from_slice(&b[start..at]);
    }
    Some((rest, elems))
}

fn decode_whole(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Value> {
    let msg = DynamicMessage::decode(desc.clone(), bytes).map_err(|e| {
        Error::invalid(format!(
            "cannot decode {} ({} bytes): {e}",
            desc.full_name(),
            bytes.len()
        ))
    })?;
    message_into_value(msg)
}

/// A dynamic message as a [`Value::Map`] of its set fields, in field-number order.
pub fn message_to_value(msg: &DynamicMessage) -> Result<Value> {
    message_into_value(msg.clone())
}

/// [`message_to_value`], consuming the message: each part is dropped as soon as it is
/// converted, so a large argument (a million table rules) is never held twice over, once
/// as the dynamic message and once as the `Value` (the peak is about the larger of the two,
/// not their sum).
pub fn message_into_value(mut msg: DynamicMessage) -> Result<Value> {
    if msg.unknown_fields().next().is_some() {
        tracing::debug!(
            msg = msg.descriptor().full_name(),
            "ignoring unknown fields in an argument"
        );
    }
    let mut fields: Vec<(FieldDescriptor, PValue)> = msg.take_fields().collect();
    drop(msg);
    fields.sort_by_key(|(f, _)| f.number());
    let mut out = Vec::with_capacity(fields.len());
    for (fd, v) in fields {
        let v = field_into_value(&fd, v)?;
        out.push((fd.name().to_string(), v));
    }
    Ok(Value::Map(out))
}

fn field_into_value(fd: &FieldDescriptor, v: PValue) -> Result<Value> {
    Ok(match v {
        PValue::Bool(b) => Value::Bool(b),
        PValue::I32(i) => Value::Int(i as i64),
        PValue::I64(i) => Value::Int(i),
        PValue::U32(u) => Value::Int(u as i64),
        // Value has one integer type: a uint64 above i64::MAX is kept as its bit pattern (a
        // negative Int), which `Args::uint`, FieldData's `value_int` and the encoder read
        // back as the same u64. BESS's uint64 fields take every value (the UPF's F-SEIDs are
        // random 64-bit numbers).
        PValue::U64(u) => Value::Int(u as i64),
        PValue::F32(f) => Value::Float(f as f64),
        PValue::F64(f) => Value::Float(f),
        PValue::String(s) => Value::Str(s),
        PValue::Bytes(b) => Value::Bytes(b.to_vec()),
        PValue::EnumNumber(n) => Value::Int(n as i64),
        PValue::Message(m) => message_into_value(m)?,
        PValue::List(l) => {
            let mut out = Vec::with_capacity(l.len());
            for x in l {
                out.push(field_into_value(fd, x)?);
            }
            Value::List(out)
        }
        PValue::Map(m) => {
            let val_fd = fd.kind().as_message().map(|e| e.map_entry_value_field());
            let mut entries = Vec::with_capacity(m.len());
            for (k, x) in m {
                let key = match k {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(u) => u.to_string(),
                    MapKey::U64(u) => u.to_string(),
                    MapKey::String(s) => s,
                };
                let val = match &val_fd {
                    Some(vf) => field_into_value(vf, x)?,
                    None => field_into_value(fd, x)?,
                };
                entries.push((key, val));
            }
            // HashMap order is random; keep responses and module input deterministic.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Map(entries)
        }
    })
}

/// Encodes `v` as message `type_name` (qualified or not) into an `Any`.
///
/// Fields of `v` that the message lacks are an error in debug builds and skipped with a
/// warning in release builds.
pub fn value_to_any(type_name: &str, v: &Value) -> Result<prost_types::Any> {
    let name = full_name(type_name);
    let desc = pool()
        .get_message_by_name(&name)
        .ok_or_else(|| Error::invalid(format!("unknown message type '{name}'")))?;
    let msg = value_to_message(&desc, v)?;
    Ok(prost_types::Any {
        type_url: format!("{TYPE_URL_PREFIX}{name}"),
        value: msg.encode_to_vec(),
    })
}

/// Builds a dynamic message of type `desc` from a [`Value::Map`] (or `Null`).
pub fn value_to_message(desc: &MessageDescriptor, v: &Value) -> Result<DynamicMessage> {
    let mut msg = DynamicMessage::new(desc.clone());
    let fields = match v {
        Value::Null => return Ok(msg),
        Value::Map(m) => m,
        other => {
            return Err(Error::invalid(format!(
                "{}: expected a message, got {}",
                desc.full_name(),
                other.type_name()
            )))
        }
    };
    for (k, fv) in fields {
        let Some(fd) = desc.get_field_by_name(k) else {
            let msg = format!("{} has no field '{k}'", desc.full_name());
            if cfg!(debug_assertions) {
                return Err(Error::invalid(msg));
            }
            tracing::warn!("{msg}; field skipped");
            continue;
        };
        if matches!(fv, Value::Null) {
            continue;
        }
        let pv = if fd.is_map() {
            map_to_pvalue(&fd, fv)?
        } else if fd.is_list() {
            let items = fv.as_list().ok_or_else(|| wrong(&fd, "a list", fv))?;
            PValue::List(
                items
                    .iter()
                    .map(|x| scalar_to_pvalue(&fd, &fd.kind(), x))
                    .collect::<Result<Vec<_>>>()?,
            )
        } else {
            scalar_to_pvalue(&fd, &fd.kind(), fv)?
        };
        msg.try_set_field(&fd, pv)
            .map_err(|e| Error::invalid(format!("{}: cannot set field: {e}", fd.full_name())))?;
    }
    Ok(msg)
}

fn wrong(fd: &FieldDescriptor, want: &str, got: &Value) -> Error {
    Error::invalid(format!(
        "{}: expected {want}, got {}",
        fd.full_name(),
        got.type_name()
    ))
}

fn map_to_pvalue(fd: &FieldDescriptor, v: &Value) -> Result<PValue> {
    let Value::Map(entries) = v else {
        return Err(wrong(fd, "a map", v));
    };
    let entry = fd
        .kind()
        .as_message()
        .cloned()
        .ok_or_else(|| Error::invalid(format!("{}: not a map field", fd.full_name())))?;
    let (kf, vf) = (entry.map_entry_key_field(), entry.map_entry_value_field());
    let mut out = std::collections::HashMap::new();
    for (k, x) in entries {
        let bad_key = || Error::invalid(format!("{}: bad map key '{k}'", fd.full_name()));
        let key = match kf.kind() {
            Kind::String => MapKey::String(k.clone()),
            Kind::Bool => MapKey::Bool(k.parse().map_err(|_| bad_key())?),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
                MapKey::I32(k.parse().map_err(|_| bad_key())?)
            }
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
                MapKey::I64(k.parse().map_err(|_| bad_key())?)
            }
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(k.parse().map_err(|_| bad_key())?),
            Kind::Uint64 | Kind::Fixed64 => MapKey::U64(k.parse().map_err(|_| bad_key())?),
            _ => return Err(bad_key()),
        };
        out.insert(key, scalar_to_pvalue(&vf, &vf.kind(), x)?);
    }
    Ok(PValue::Map(out))
}

fn scalar_to_pvalue(fd: &FieldDescriptor, kind: &Kind, v: &Value) -> Result<PValue> {
    let int = |min: i64, max: i64| -> Result<i64> {
        let i = match v {
            Value::Bool(b) => *b as i64,
            _ => v.as_i64().ok_or_else(|| wrong(fd, "an integer", v))?,
        };
        if i < min || i > max {
            return Err(Error::invalid(format!(
                "{}: {i} is out of range [{min}, {max}]",
                fd.full_name()
            )));
        }
        Ok(i)
    };
    Ok(match kind {
        Kind::Double => PValue::F64(v.as_f64().ok_or_else(|| wrong(fd, "a number", v))?),
        Kind::Float => PValue::F32(v.as_f64().ok_or_else(|| wrong(fd, "a number", v))? as f32),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            PValue::I32(int(i32::MIN as i64, i32::MAX as i64)? as i32)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => PValue::I64(int(i64::MIN, i64::MAX)?),
        Kind::Uint32 | Kind::Fixed32 => PValue::U32(int(0, u32::MAX as i64)? as u32),
        // The inverse of `Value::from(u64)` (a bit cast): negative values are the upper half.
        Kind::Uint64 | Kind::Fixed64 => PValue::U64(int(i64::MIN, i64::MAX)? as u64),
        Kind::Bool => match v {
            Value::Bool(b) => PValue::Bool(*b),
            Value::Int(0) => PValue::Bool(false),
            Value::Int(1) => PValue::Bool(true),
            _ => return Err(wrong(fd, "a bool", v)),
        },
        Kind::String => PValue::String(
            v.as_str()
                .ok_or_else(|| wrong(fd, "a string", v))?
                .to_string(),
        ),
        Kind::Bytes => PValue::Bytes(
            v.as_bytes()
                .ok_or_else(|| wrong(fd, "bytes", v))?
                .to_vec()
                .into(),
        ),
        Kind::Message(m) => PValue::Message(value_to_message(m, v)?),
        Kind::Enum(_) => PValue::EnumNumber(int(i32::MIN as i64, i32::MAX as i64)? as i32),
    })
}

/// At most `n` bytes of `s` (on a char boundary), for echoing client input in messages.
pub fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// `get_status` → `GetStatus`.
pub fn camel_case(cmd: &str) -> String {
    cmd.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The full name of the message a command's result is encoded as: its table entry's
/// `reply_type`.
pub fn response_type(spec: &bessemer_core::CommandSpec) -> String {
    full_name(spec.reply_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(name: &str, bytes: Vec<u8>) -> prost_types::Any {
        prost_types::Any {
            type_url: format!("{TYPE_URL_PREFIX}{name}"),
            value: bytes,
        }
    }

    #[test]
    fn large_arguments_decode_element_by_element_to_the_same_value() {
        // A WildcardMatchConfig of 5 000 rules (over SPLIT_MIN), its list field between two
        // scalars and a rule repeated at the end, then the same bytes cut short.
        let rule = |i: u32| {
            Value::map()
                .with("gate", (i % 7) as u64)
                .with("priority", i as i64)
                .with(
                    "values",
                    Value::List(vec![
                        Value::map().with("value_bin", i.to_be_bytes().to_vec())
                    ]),
                )
        };
        let cfg = Value::map()
            .with("default_gate", 3u64)
            .with("rules", Value::List((0..5000).map(rule).collect()));
        let mut bytes = value_to_any("WildcardMatchConfig", &cfg).unwrap().value;
        assert!(bytes.len() >= SPLIT_MIN, "{} bytes", bytes.len());
        let desc = pool()
            .get_message_by_name("bess.pb.WildcardMatchConfig")
            .unwrap();
        let more = value_to_any(
            "WildcardMatchConfig",
            &Value::map().with("rules", Value::List(vec![rule(9)])),
        )
        .unwrap()
        .value;
        bytes.extend(&more);
        let split = decode_value(&desc, &bytes).unwrap();
        assert_eq!(split, decode_whole(&desc, &bytes).unwrap());
        let Some(Value::List(rules)) = split.get("rules") else {
            panic!("no rules in {split:?}");
        };
        assert_eq!(rules.len(), 5001);
        assert_eq!(rules[5000], rule(9));
        let cut = &bytes[..bytes.len() - 3];
        let e = decode_value(&desc, cut).unwrap_err();
        assert!(
            e.msg.contains("cannot decode bess.pb.WildcardMatchConfig"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn decodes_set_fields_only() {
        let arg = crate::pb::SourceArg { pkt_size: 100 };
        let v = any_to_value(
            Some(&any("bess.pb.SourceArg", arg.encode_to_vec())),
            Some("SourceArg"),
            "Source",
        )
        .unwrap();
        assert_eq!(v, Value::map().with("pkt_size", 100));
        let v = any_to_value(
            Some(&any("bess.pb.SourceArg", vec![])),
            Some("SourceArg"),
            "x",
        )
        .unwrap();
        assert_eq!(v, Value::map());
        assert_eq!(
            any_to_value(None, Some("SourceArg"), "x").unwrap(),
            Value::map()
        );
    }

    #[test]
    fn nested_repeated_map_oneof_and_bytes() {
        use crate::pb::*;
        let arg = SetMetadataArg {
            attrs: vec![set_metadata_arg::Attribute {
                name: "a".into(),
                size: 2,
                value: Some(set_metadata_arg::attribute::Value::ValueBin(vec![1, 2])),
                offset: 0,
                mask: vec![],
                rshift_bits: -1,
            }],
        };
        let v = any_to_value(
            Some(&any("bess.pb.SetMetadataArg", arg.encode_to_vec())),
            None,
            "x",
        )
        .unwrap();
        let expect = Value::map().with(
            "attrs",
            vec![Value::map()
                .with("name", "a")
                .with("size", 2)
                .with("value_bin", vec![1u8, 2])
                .with("rshift_bits", -1)],
        );
        assert_eq!(v, expect);
        let m = MetadataTestArg {
            read: [("x".to_string(), 4), ("b".to_string(), 2)].into(),
            ..Default::default()
        };
        let v = any_to_value(
            Some(&any("bess.pb.MetadataTestArg", m.encode_to_vec())),
            None,
            "x",
        )
        .unwrap();
        assert_eq!(
            v,
            Value::map().with(
                "read",
                Value::Map(vec![("b".into(), 2.into()), ("x".into(), 4.into())])
            )
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let e = any_to_value(Some(&any("bess.pb.Nope", vec![])), None, "Source").unwrap_err();
        assert_eq!(e.code, libc::EINVAL);
        assert!(e.msg.contains("bess.pb.Nope"), "{}", e.msg);
        let queue = crate::pb::QueueArg {
            size: 64,
            ..Default::default()
        };
        let e = any_to_value(
            Some(&any("bess.pb.QueueArg", queue.encode_to_vec())),
            Some("SourceArg"),
            "module class 'Source'",
        )
        .unwrap_err();
        assert!(
            e.msg.contains("bess.pb.SourceArg") && e.msg.contains("bess.pb.QueueArg"),
            "{}",
            e.msg
        );
        let e = any_to_value(
            Some(&any("bess.pb.SourceArg", vec![0xff, 0xff, 0xff])),
            None,
            "x",
        )
        .unwrap_err();
        assert_eq!(e.code, libc::EINVAL);
    }

    #[test]
    fn uint64_values_above_i64_max_round_trip() {
        // The UPF's agent keys sessions by random 64-bit F-SEIDs (FieldData.value_int).
        let fseid = 15_651_156_325_097_046_716u64;
        let msg = crate::pb::FieldData {
            encoding: Some(crate::pb::field_data::Encoding::ValueInt(fseid)),
        };
        let v = any_to_value(
            Some(&any("bess.pb.FieldData", msg.encode_to_vec())),
            Some("FieldData"),
            "x",
        )
        .unwrap();
        let mut a = bessemer_core::Args::new(&v, "FieldData").unwrap();
        assert_eq!(a.uint("value_int", u64::MAX).unwrap(), Some(fseid));
        let back = value_to_any("bess.pb.FieldData", &v).unwrap();
        assert_eq!(crate::pb::FieldData::decode(&back.value[..]).unwrap(), msg);
    }

    #[test]
    fn a_plugin_message_is_taken_under_its_own_package() {
        // omec's pybess packs the sample plugin's argument in the plugin's package.
        let arg = any(
            "sample.supdate.pb.SequentialUpdateArg",
            crate::pb::SequentialUpdateArg {
                fields: vec![crate::pb::sequential_update_arg::Field {
                    offset: 46,
                    size: 4,
                    min: 1,
                    max: 9,
                }],
            }
            .encode_to_vec(),
        );
        let v = any_to_value(
            Some(&arg),
            Some("SequentialUpdateArg"),
            "module class 'SequentialUpdate'",
        )
        .unwrap();
        let f = &v.get("fields").unwrap().as_list().unwrap()[0];
        assert_eq!(f.get("offset").unwrap().as_i64(), Some(46));
        assert_eq!(f.get("max").unwrap().as_i64(), Some(9));
        // A message of another name is still refused.
        let e = any_to_value(Some(&arg), Some("UpdateArg"), "x").unwrap_err();
        assert!(e.msg.contains("must be a bess.pb.UpdateArg"), "{}", e.msg);
    }

    #[test]
    fn empty_arg_stands_for_any_message_with_defaults() {
        let v = any_to_value(
            Some(&any("bess.pb.EmptyArg", vec![])),
            Some("SourceArg"),
            "module class 'Source'",
        )
        .unwrap();
        assert_eq!(v, Value::map());
        // So is any other message with no field set (the UPF's `*CommandClearArg`)...
        let v = any_to_value(
            Some(&any("bess.pb.ExactMatchCommandClearArg", vec![])),
            Some("EmptyArg"),
            "command 'clear'",
        )
        .unwrap();
        assert_eq!(v, Value::map());
        // ...but one carrying fields of another message is refused, naming both.
        let queue = crate::pb::QueueArg {
            size: 64,
            ..Default::default()
        };
        let e = any_to_value(
            Some(&any("bess.pb.QueueArg", queue.encode_to_vec())),
            Some("SourceArg"),
            "module class 'Source'",
        )
        .unwrap_err();
        assert!(e.msg.contains("bess.pb.QueueArg"), "{}", e.msg);
        // An EmptyArg that does not decode is still an error.
        let e = any_to_value(
            Some(&any("bess.pb.EmptyArg", vec![0xff, 0xff, 0xff])),
            Some("SourceArg"),
            "x",
        )
        .unwrap_err();
        assert_eq!(e.code, libc::EINVAL);
    }

    #[test]
    fn deep_group_nesting_is_an_error_not_a_crash() {
        // 100 000 nested start-group tags of field 1.
        let b = vec![0x0bu8; 100_000];
        let r = any_to_value(Some(&any("bess.pb.EmptyArg", b)), None, "x");
        assert!(r.is_err());
    }

    #[test]
    fn encodes_responses() {
        let reply = |class: &str, cmd: &str| {
            let c = bessemer_modules::classes()
                .iter()
                .find(|c| c.name == class)
                .unwrap();
            response_type(c.command(cmd).unwrap())
        };
        assert_eq!(
            reply("Queue", "get_status"),
            "bess.pb.QueueCommandGetStatusResponse"
        );
        assert_eq!(
            reply("Measure", "get_summary"),
            "bess.pb.MeasureCommandGetSummaryResponse"
        );
        assert_eq!(reply("Source", "set_burst"), "bess.pb.EmptyArg");
        assert_eq!(
            reply("ExactMatch", "get_runtime_config"),
            "bess.pb.ExactMatchConfig"
        );
        let v = Value::map()
            .with("count", 3)
            .with("size", 1024)
            .with("dropped", 0);
        let a = value_to_any("QueueCommandGetStatusResponse", &v).unwrap();
        let r = crate::pb::QueueCommandGetStatusResponse::decode(a.value.as_slice()).unwrap();
        assert_eq!((r.count, r.size, r.dropped), (3, 1024, 0));
        let h = Value::map()
            .with("count", 2)
            .with("percentile_values_ns", vec![Value::Int(5)]);
        let v = Value::map()
            .with("timestamp", 1.5)
            .with("latency", h.clone())
            .with("jitter", h);
        let a = value_to_any("MeasureCommandGetSummaryResponse", &v).unwrap();
        let r = crate::pb::MeasureCommandGetSummaryResponse::decode(a.value.as_slice()).unwrap();
        assert_eq!(r.latency.unwrap().percentile_values_ns, vec![5]);
        let e = value_to_any(
            "QueueCommandGetStatusResponse",
            &Value::map().with("count", "x"),
        )
        .unwrap_err();
        assert!(e.msg.contains("count"), "{}", e.msg);
        let v = Value::map().with("count", Value::from(u64::MAX - 1));
        let a = value_to_any("QueueCommandGetStatusResponse", &v).unwrap();
        let r = crate::pb::QueueCommandGetStatusResponse::decode(a.value.as_slice()).unwrap();
        assert_eq!(r.count, u64::MAX - 1);
        let v = Value::map().with("gates", vec![Value::Int(1), Value::Str("x".into())]);
        let e = value_to_any("L2ForwardCommandLookupResponse", &v).unwrap_err();
        assert!(e.msg.contains("gates"), "{}", e.msg);
        let v = Value::map().with("next_eth_type", -1);
        let e = value_to_any("MplsPopArg", &v).unwrap_err();
        assert!(e.msg.contains("out of range"), "{}", e.msg);
        if cfg!(debug_assertions) {
            assert!(value_to_any("EmptyArg", &Value::map().with("zz", 1)).is_err());
        }
    }

    #[test]
    fn camel() {
        assert_eq!(camel_case("get_status"), "GetStatus");
        assert_eq!(camel_case("set_default_gate"), "SetDefaultGate");
        assert_eq!(camel_case("clear"), "Clear");
    }
}

#[cfg(test)]
mod class_tests {
    use super::*;

    /// Every argument type a module class names is a message of the protocol, so a BESS
    /// client can send it.
    #[test]
    fn every_class_argument_type_is_in_the_protocol() {
        let mut missing = Vec::new();
        for c in bessemer_modules::classes() {
            let mut names = vec![c.arg_type];
            names.extend(c.commands.iter().map(|x| x.arg_type));
            for n in names {
                if pool().get_message_by_name(&full_name(n)).is_none() {
                    missing.push(format!("{}: {n}", c.name));
                }
            }
        }
        assert!(missing.is_empty(), "not in proto/bess: {missing:?}");
    }

    /// Every command's reply type is a message of the protocol, and it is BESS's
    /// `<Class>Command<Cmd>Response` wherever the protocol has that message (a new command
    /// whose entry says `EmptyArg` where BESS answers with data would drop the data).
    #[test]
    fn every_command_reply_type_is_the_protocols() {
        let mut wrong = Vec::new();
        for c in bessemer_modules::classes() {
            for spec in c.commands {
                let what = format!("{}.{}", c.name, spec.name);
                if pool().get_message_by_name(&response_type(spec)).is_none() {
                    wrong.push(format!("{what}: {} is not in proto/bess", spec.reply_type));
                }
                let conventional = format!("{}Command{}Response", c.name, camel_case(spec.name));
                if pool()
                    .get_message_by_name(&full_name(&conventional))
                    .is_some()
                    && spec.reply_type != conventional
                {
                    wrong.push(format!(
                        "{what}: answers {} where BESS has {conventional}",
                        spec.reply_type
                    ));
                }
                // Reading commands never change what a module does to packets.
                if spec.name.starts_with("get_") && spec.mutates {
                    wrong.push(format!("{what}: a get_ command marked mutates"));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}

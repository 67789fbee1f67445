//! Update: writes constant values at packet offsets.
use super::offset_fields::{parse_fields_arg, parse_offset_fields, OffsetField, OffsetFields};
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

/// One field to set: `size` bytes (1..8) of the constant value, big-endian, at `offset`.
type Field = OffsetField<u64>;

/// Sets fields of every packet; packets too short for a field are dropped.
pub struct Update {
    fields: OffsetFields<u64>,
    /// The fields as 8-byte windows, in order: a packet at least `window_end` bytes long
    /// gets each field with one load, a blend and one store (a copy of the field's run-time
    /// size was a call to memcpy per packet).
    windows: Vec<Window>,
    window_end: usize,
}

/// One field over the 8 bytes at `offset`: the bytes it keeps (`keep`) and the value's bytes
/// in place (`value`), both as native-order words of those bytes.
#[derive(Clone, Copy, Debug)]
struct Window {
    offset: usize,
    keep: u64,
    value: u64,
}

impl Window {
    fn of(f: &Field) -> Window {
        let mut value = [0u8; 8];
        let mut keep = [0xffu8; 8];
        value[..f.size].copy_from_slice(&f.spec.to_be_bytes()[8 - f.size..]);
        keep[..f.size].fill(0);
        Window {
            offset: f.offset,
            keep: u64::from_ne_bytes(keep),
            value: u64::from_ne_bytes(value),
        }
    }
}

bessemer_core::drop_reasons! {
    /// Why Update drops packets.
    pub enum UpdateDrop {
        TooShort = "too_short",
    }
}
/// Most fields one Update holds (BESS's limit).
pub const MAX_FIELDS: usize = 16;

fn parse_fields(list: &[Value], msg: &str) -> Result<Vec<Field>> {
    parse_offset_fields(list, msg, 8, "1..8", |mut a, m, size| {
        let value = a.uint("value", u64::MAX)?.unwrap_or(0);
        a.finish()?;
        if size < 8 && value >> (8 * size) != 0 {
            return Err(Error::invalid(format!(
                "{m}.value: {value} does not fit in {size} bytes"
            )));
        }
        Ok(value)
    })
}

impl Update {
    fn set(&mut self, fields: Vec<Field>) -> Result<()> {
        if fields.len() > MAX_FIELDS {
            return Err(Error::invalid(format!(
                "Update holds at most {MAX_FIELDS} fields"
            )));
        }
        self.windows = fields.iter().map(Window::of).collect();
        self.window_end = fields.iter().map(|f| f.offset + 8).max().unwrap_or(0);
        self.fields.set(fields);
        Ok(())
    }
}

impl Update {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let new = parse_fields_arg(arg, "UpdateArg", parse_fields)?;
        self.set(self.fields.extended(new))?;
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command: the fields as `add` takes them (the XDP offload reads
    /// them to do the writes in the kernel).
    fn cmd_get_initial_arg(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let list = self
            .fields
            .fields()
            .iter()
            .map(|f| {
                Value::map()
                    .with("offset", f.offset as i64)
                    .with("size", f.size as u64)
                    .with("value", f.spec)
            })
            .collect();
        Ok(Value::map().with("fields", Value::List(list)))
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "UpdateCommandClearArg")?.finish()?;
        self.set(Vec::new())?;
        Ok(Value::Null)
    }
}

impl Module for Update {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let end = self.window_end;
        if batch.pkts().iter().all(|p| p.len() >= end) {
            for p in batch.pkts_mut() {
                let d = p.data_mut();
                for w in &self.windows {
                    let b: &mut [u8; 8] = (&mut d[w.offset..w.offset + 8]).try_into().unwrap();
                    *b = ((u64::from_ne_bytes(*b) & w.keep) | w.value).to_ne_bytes();
                }
            }
            return ctx.forward(0, batch);
        }
        // Some packet ends within 8 bytes of a field: field by field.
        self.fields
            .write_each(ctx, batch, UpdateDrop::TooShort, |&value| value);
    }

    fn desc(&self) -> String {
        self.fields.desc()
    }
}

/// The Update class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Update",
    name_template: "update",
    help: "updates packet data with specified values",
    arg_type: "UpdateArg",
    arg_doc: &[
        "fields: [{offset: int64, size: uint64 (1..8), value: uint64}] — values written big-endian",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "UpdateArg",
            help: "adds fields",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Update, Update::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "UpdateCommandClearArg",
            help: "removes all fields",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Update, Update::cmd_clear),
        },
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "the fields written, as `add` takes them",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: false,
            handler: handler!(Exclusive Update, Update::cmd_get_initial_arg),
        },
    ],
    drop_reasons: UpdateDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let fields = parse_fields_arg(arg, "UpdateArg", parse_fields)?;
        let mut u = Update {
            fields: OffsetFields::default(),
            windows: Vec::new(),
            window_end: 0,
        };
        u.set(fields)?;
        Ok(Instance::Exclusive(Box::new(u)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn fields(f: &[(i64, i64, u64)]) -> Value {
        Value::map().with(
            "fields",
            Value::List(
                f.iter()
                    .map(|&(o, s, v)| {
                        Value::map()
                            .with("offset", o)
                            .with("size", s)
                            .with("value", Value::Int(v as i64))
                    })
                    .collect(),
            ),
        )
    }

    #[test]
    fn initial_arg_lists_the_fields_in_order() {
        let mut h = Harness::new();
        h.add(&CLASS, "u", &fields(&[(12, 2, 0x0800)])).unwrap();
        h.command("u", "add", &fields(&[(0, 6, 0x0202_0000_0001)]))
            .unwrap();
        let v = h.command("u", "get_initial_arg", &Value::map()).unwrap();
        let got: Vec<_> = v
            .get("fields")
            .and_then(Value::as_list)
            .unwrap()
            .iter()
            .map(|f| ["offset", "size", "value"].map(|k| f.get(k).and_then(Value::as_i64).unwrap()))
            .collect();
        assert_eq!(got, vec![[12, 2, 0x0800], [0, 6, 0x0202_0000_0001]]);
    }

    #[test]
    fn writes_values_big_endian_and_drops_short_packets() {
        let mut h = Harness::new();
        h.add(&CLASS, "u", &fields(&[(0, 2, 0xabcd), (10, 4, 7)]))
            .unwrap();
        let c = h.capture("u", 0);
        h.inject("u", 0, &[vec![0u8; 20], vec![0u8; 13], vec![1u8; 14]]);
        let got = c.take_data();
        assert_eq!(got.len(), 2);
        assert_eq!(&got[0][0..2], &[0xab, 0xcd]);
        assert_eq!(&got[0][10..14], &[0, 0, 0, 7]);
        assert_eq!(got[1][2], 1, "other bytes untouched");
        assert_eq!(h.drops("u", "too_short"), 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Overlapping fields of every size, batches whose packets all take the 8-byte
        /// windows or not: each field is written in order, big-endian, short packets dropped.
        #[test]
        fn fields_are_written_in_order_whatever_the_path(
            spec in proptest::collection::vec((0usize..40, 1usize..=8, proptest::prelude::any::<u64>()), 1..6),
            lens in proptest::collection::vec(0usize..64, 1..8),
            fill in proptest::prelude::any::<u8>(),
        ) {
            let f: Vec<(i64, i64, u64)> = spec
                .iter()
                .map(|&(o, s, v)| (o as i64, s as i64, if s == 8 { v } else { v & ((1 << (8 * s)) - 1) }))
                .collect();
            let mut h = Harness::new();
            h.add(&CLASS, "u", &fields(&f)).unwrap();
            let c = h.capture("u", 0);
            let pkts: Vec<Vec<u8>> = lens.iter().map(|&n| vec![fill; n]).collect();
            let need = f.iter().map(|&(o, s, _)| (o + s) as usize).max().unwrap();
            let want: Vec<Vec<u8>> = pkts
                .iter()
                .filter(|p| p.len() >= need)
                .map(|p| {
                    let mut p = p.clone();
                    for &(o, s, v) in &f {
                        let (o, s) = (o as usize, s as usize);
                        p[o..o + s].copy_from_slice(&v.to_be_bytes()[8 - s..]);
                    }
                    p
                })
                .collect();
            h.inject("u", 0, &pkts);
            proptest::prop_assert_eq!(c.take_data(), want);
        }
    }

    #[test]
    fn errors_name_the_field() {
        let mut h = Harness::new();
        let e = h.add(&CLASS, "a", &fields(&[(0, 1, 300)])).unwrap_err();
        assert!(e.msg.contains("fields[0].value"), "{}", e.msg);
        let e = h.add(&CLASS, "b", &fields(&[(0, 9, 1)])).unwrap_err();
        assert!(e.msg.contains("fields[0].size"), "{}", e.msg);
        h.add(&CLASS, "c", &fields(&[])).unwrap();
        h.command("c", "add", &fields(&[(1, 1, 5)])).unwrap();
        let cap = h.capture("c", 0);
        h.inject("c", 0, &[vec![0u8; 4]]);
        assert_eq!(cap.take_data(), vec![vec![0, 5, 0, 0]]);
    }
}

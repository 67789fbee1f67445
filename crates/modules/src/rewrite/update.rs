//! Update: writes constant values at packet offsets.
use crate::util::{process_each, Verdict};
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

/// One field to set: `size` bytes (1..8) of `value`, big-endian, at `offset`.
#[derive(Clone, Debug)]
struct Field {
    offset: usize,
    size: usize,
    value: [u8; 8],
}

/// Sets fields of every packet; packets too short for a field are dropped.
pub struct Update {
    fields: Vec<Field>,
    min_len: usize,
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
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let m = format!("{msg}.fields[{i}]");
            let mut a = Args::new(f, &m)?;
            let offset = a.int("offset", 0, 4095)?.unwrap_or(0) as usize;
            let size = a
                .int("size", 1, 8)?
                .ok_or_else(|| Error::invalid(format!("{m}.size is required (1..8)")))?
                as usize;
            let value = a.uint("value", u64::MAX)?.unwrap_or(0);
            a.finish()?;
            if size < 8 && value >> (8 * size) != 0 {
                return Err(Error::invalid(format!(
                    "{m}.value: {value} does not fit in {size} bytes"
                )));
            }
            Ok(Field {
                offset,
                size,
                value: value.to_be_bytes(),
            })
        })
        .collect()
}

impl Update {
    fn set(&mut self, fields: Vec<Field>) -> Result<()> {
        if fields.len() > MAX_FIELDS {
            return Err(Error::invalid(format!(
                "Update holds at most {MAX_FIELDS} fields"
            )));
        }
        self.min_len = fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0);
        self.fields = fields;
        Ok(())
    }
}

impl Update {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "UpdateArg")?;
        let new = parse_fields(a.list("fields")?, "UpdateArg")?;
        a.finish()?;
        let mut all = self.fields.clone();
        all.extend(new);
        self.set(all)?;
        Ok(Value::Null)
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
        let fields = &self.fields;
        let min_len = self.min_len;
        process_each(ctx, batch, |p| {
            if p.len() < min_len {
                return Verdict::Drop(UpdateDrop::TooShort);
            }
            let d = p.data_mut();
            for f in fields {
                d[f.offset..f.offset + f.size].copy_from_slice(&f.value[8 - f.size..]);
            }
            Verdict::Gate(0)
        });
    }

    fn desc(&self) -> String {
        format!("{} fields", self.fields.len())
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
            handler: handler!(Exclusive Update, Update::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "UpdateCommandClearArg",
            help: "removes all fields",
            mt_safe: false,
            handler: handler!(Exclusive Update, Update::cmd_clear),
        },
    ],
    drop_reasons: UpdateDrop::NAMES,
    mt_safe: true,
    create: |_, arg| {
        let mut a = Args::new(arg, "UpdateArg")?;
        let fields = parse_fields(a.list("fields")?, "UpdateArg")?;
        a.finish()?;
        let mut u = Update {
            fields: Vec::new(),
            min_len: 0,
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

//! RandomUpdate: writes random values within ranges at packet offsets.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use super::offset_fields::{parse_fields_arg, parse_offset_fields, OffsetField, OffsetFields};
use crate::util::FastRng;

/// A field's random range: `min` and the number of values from it.
#[derive(Clone, Debug)]
struct Range {
    min: u64,
    span: u64,
}

type Field = OffsetField<Range>;

/// Sets each field to a uniform random value in [min, max] (big-endian); packets too short
/// for a field are dropped.
pub struct RandomUpdate {
    fields: OffsetFields<Range>,
    rng: FastRng,
}

bessemer_core::drop_reasons! {
    /// Why RandomUpdate drops packets.
    pub enum RandomUpdateDrop {
        TooShort = "too_short",
    }
}

fn parse_fields(list: &[Value], msg: &str) -> Result<Vec<Field>> {
    if list.len() > 16 {
        return Err(Error::invalid(format!("{msg}.fields: at most 16 fields")));
    }
    parse_offset_fields(list, msg, 4, "1, 2 or 4", |mut a, m, size| {
        let min = a.uint("min", u32::MAX as u64)?.unwrap_or(0);
        let max = a.uint("max", u32::MAX as u64)?.unwrap_or(0);
        a.finish()?;
        if size == 3 {
            return Err(Error::invalid(format!("{m}.size: must be 1, 2 or 4")));
        }
        let limit = if size == 4 {
            u32::MAX as u64
        } else {
            (1u64 << (8 * size)) - 1
        };
        if min > max || max > limit {
            return Err(Error::invalid(format!(
                "{m}: range [{min}, {max}] is empty or exceeds {size} bytes"
            )));
        }
        Ok(Range {
            min,
            span: max - min + 1,
        })
    })
}

impl RandomUpdate {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let new = parse_fields_arg(arg, "RandomUpdateArg", parse_fields)?;
        if self.fields.count() + new.len() > 16 {
            return Err(Error::invalid("RandomUpdate holds at most 16 fields"));
        }
        self.fields.set(self.fields.extended(new));
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "RandomUpdateCommandClearArg")?.finish()?;
        self.fields.set(Vec::new());
        Ok(Value::Null)
    }
}

impl Module for RandomUpdate {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let rng = &mut self.rng;
        self.fields
            .write_each(ctx, batch, RandomUpdateDrop::TooShort, |r| {
                r.min + rng.below(r.span)
            });
    }

    fn desc(&self) -> String {
        self.fields.desc()
    }
}

/// The RandomUpdate class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "RandomUpdate",
    name_template: "rupdate",
    help: "updates packet data with random values",
    arg_type: "RandomUpdateArg",
    arg_doc: &["fields: [{offset: int64, size: uint64 (1, 2, 4), min: uint64, max: uint64}] — uniform in [min, max]"],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec { name: "add", arg_type: "RandomUpdateArg", help: "adds fields", mt_safe: false, handler: handler!(Exclusive RandomUpdate, RandomUpdate::cmd_add) },
        CommandSpec { name: "clear", arg_type: "RandomUpdateCommandClearArg", help: "removes all fields", mt_safe: false, handler: handler!(Exclusive RandomUpdate, RandomUpdate::cmd_clear) },
    ],
    drop_reasons: RandomUpdateDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let fields = parse_fields_arg(arg, "RandomUpdateArg", parse_fields)?;
        let mut m = RandomUpdate { fields: OffsetFields::default(), rng: FastRng::from_tsc() };
        m.fields.set(fields);
        Ok(Instance::Exclusive(Box::new(m)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    #[test]
    fn values_stay_in_range_and_cover_both_ends() {
        let mut h = Harness::new();
        let f = Value::map()
            .with("offset", 2)
            .with("size", 2)
            .with("min", 1000)
            .with("max", 1003);
        h.add(
            &CLASS,
            "ru",
            &Value::map().with("fields", Value::List(vec![f])),
        )
        .unwrap();
        let c = h.capture("ru", 0);
        for _ in 0..20 {
            h.inject("ru", 0, &vec![vec![0u8; 8]; 32]);
        }
        h.inject("ru", 0, &[vec![0u8; 3]]);
        let seen: std::collections::BTreeSet<u16> = c
            .take_data()
            .iter()
            .map(|p| u16::from_be_bytes([p[2], p[3]]))
            .collect();
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            vec![1000, 1001, 1002, 1003]
        );
        assert_eq!(h.drops("ru", "too_short"), 1);
    }

    #[test]
    fn bad_ranges_are_refused() {
        let mut h = Harness::new();
        let f = Value::map()
            .with("offset", 0)
            .with("size", 1)
            .with("min", 5)
            .with("max", 300);
        let e = h
            .add(
                &CLASS,
                "a",
                &Value::map().with("fields", Value::List(vec![f])),
            )
            .unwrap_err();
        assert!(e.msg.contains("fields[0]"), "{}", e.msg);
    }
}

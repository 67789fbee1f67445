//! SequentialUpdate (the omec-project fork's sample plugin, used by the UPF's sim mode):
//! rewrites packet fields with values counting up through a range.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, Packet, PacketBatch,
    Result, Value,
};

use crate::rewrite::offset_fields::{parse_fields_arg, parse_offset_fields};
use crate::util::{process_each, Verdict};

/// Most fields one module rewrites (the plugin's kMaxVariable).
const MAX_VARS: usize = 16;

bessemer_core::drop_reasons! {
    /// Why SequentialUpdate drops packets.
    pub enum SequentialUpdateDrop {
        /// Shorter than a field's end.
        TooShort = "too_short",
    }
}

/// One field: where, and the next value of its count.
#[derive(Clone, Debug)]
struct Var {
    offset: usize,
    size: usize,
    min: u32,
    /// `max - min + 1`, or 2^32 - 1 where that wraps to 0 (as the plugin).
    range: u32,
    cur: u32,
}

impl Var {
    /// Writes the next values, one per packet in order, as `N` big-endian bytes (every
    /// packet long enough).
    #[inline(always)]
    fn write_all<const N: usize>(&mut self, batch: &mut PacketBatch) {
        let (off, min, range) = (self.offset, self.min, self.range);
        let mut cur = self.cur;
        for p in batch.pkts_mut() {
            let be = min.wrapping_add(cur).to_be_bytes();
            let b: [u8; N] = be[4 - N..].try_into().unwrap();
            p.data_mut()[off..off + N].copy_from_slice(&b);
            cur += 1;
            if cur >= range {
                cur = 0;
            }
        }
        self.cur = cur;
    }
}

/// Writes each field (big-endian, `size` 1, 2 or 4 bytes at `offset`) with `min`, `min + 1`,
/// ... `max`, then `min` again, one value per packet in arrival order, each field counting
/// on its own. Packets too short for a field are dropped (the plugin writes past them).
pub struct SequentialUpdate {
    vars: Vec<Var>,
}

fn parse(list: &[Value], msg: &str) -> Result<Vec<Var>> {
    if list.len() > MAX_VARS {
        return Err(Error::invalid(format!(
            "max {MAX_VARS} variables can be specified"
        )));
    }
    let fields = parse_offset_fields(list, msg, 4, "1, 2, or 4", |mut a, m, size| {
        let min = a.uint("min", u64::MAX)?.unwrap_or(0);
        let max = a.uint("max", u64::MAX)?.unwrap_or(0);
        a.finish()?;
        if size == 3 {
            return Err(Error::invalid(format!("{m}: 'size' must be 1, 2, or 4")));
        }
        // The plugin clamps the bounds to the field (after truncating them to 32 bits).
        let limit = if size == 4 {
            u32::MAX
        } else {
            (1u32 << (8 * size)) - 1
        };
        let (min, max) = ((min as u32).min(limit), (max as u32).min(limit));
        if min > max {
            return Err(Error::invalid(format!(
                "{m}: 'min' should not be greater than 'max'"
            )));
        }
        Ok((min, max))
    })?;
    Ok(fields
        .into_iter()
        .map(|f| {
            let (min, max) = f.spec;
            let range = match (max - min).wrapping_add(1) {
                0 => u32::MAX,
                r => r,
            };
            Var {
                offset: f.offset,
                size: f.size,
                min,
                range,
                cur: 0,
            }
        })
        .collect())
}

impl SequentialUpdate {
    /// The `add` command: more fields, counting from their `min`.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let new = parse_fields_arg(arg, "SequentialUpdateArg", parse)?;
        if self.vars.len() + new.len() > MAX_VARS {
            return Err(Error::invalid(format!(
                "max {MAX_VARS} variables can be specified"
            )));
        }
        self.vars.extend(new);
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.vars.clear();
        Ok(Value::Null)
    }
}

impl Module for SequentialUpdate {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let min_len = self
            .vars
            .iter()
            .map(|v| v.offset + v.size)
            .max()
            .unwrap_or(0);
        let vars = &mut self.vars;
        if batch.pkts().iter().all(|p| p.len() >= min_len) {
            // Field by field over the batch: each field's count stays in a register, and no
            // verdict per packet (every packet goes on).
            for v in vars.iter_mut() {
                match v.size {
                    4 => v.write_all::<4>(batch),
                    2 => v.write_all::<2>(batch),
                    _ => v.write_all::<1>(batch),
                }
            }
            return ctx.forward(0, batch);
        }
        process_each(ctx, batch, |p: &mut Packet| {
            if p.len() < min_len {
                return Verdict::Drop(SequentialUpdateDrop::TooShort);
            }
            let d = p.data_mut();
            for v in vars.iter_mut() {
                let value = v.min.wrapping_add(v.cur);
                v.cur += 1;
                if v.cur >= v.range {
                    v.cur = 0;
                }
                let be = value.to_be_bytes();
                // One fixed-size store per size: a copy of a run-time length is a call to
                // memcpy, which costs more than the store.
                match v.size {
                    4 => d[v.offset..v.offset + 4].copy_from_slice(&be),
                    2 => d[v.offset..v.offset + 2].copy_from_slice(&be[2..]),
                    _ => d[v.offset] = be[3],
                }
            }
            Verdict::Gate(0)
        });
    }

    fn desc(&self) -> String {
        format!("{} fields", self.vars.len())
    }
}

/// The SequentialUpdate class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "SequentialUpdate",
    name_template: "supdate",
    help: "updates packet data sequentially in a range",
    arg_type: "SequentialUpdateArg",
    arg_doc: &[
        "fields: [{offset: int64, size: uint64 (1, 2, 4), min: uint64, max: uint64}] — min, min+1, ... max, min, ... (bounds clamped to the field)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "SequentialUpdateArg",
            help: "adds fields",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive SequentialUpdate, SequentialUpdate::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all fields",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive SequentialUpdate, SequentialUpdate::cmd_clear),
        },
    ],
    drop_reasons: SequentialUpdateDrop::NAMES,
    max_workers: 1,
    create: |_, arg: &Value| {
        let vars = parse_fields_arg(arg, "SequentialUpdateArg", parse)?;
        Ok(Instance::Exclusive(Box::new(SequentialUpdate { vars })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn field(offset: usize, size: usize, min: u64, max: u64) -> Value {
        Value::map()
            .with("offset", offset as i64)
            .with("size", size as i64)
            .with("min", min)
            .with("max", max)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Over batches with and without short packets (dropped, not counted), each field
        /// counts through its range one value per packet that passes.
        #[test]
        fn each_field_counts_per_packet_that_passes(
            spec in proptest::collection::vec((0usize..8, proptest::sample::select(vec![1usize, 2, 4]), 0u64..300, 0u64..6), 1..4),
            batches in proptest::collection::vec(proptest::collection::vec(0usize..16, 1..9), 1..5),
        ) {
            let fields: Vec<Value> = spec.iter().map(|&(o, s, min, span)| field(o, s, min, min + span)).collect();
            let mut h = Harness::new();
            h.add(&CLASS, "s", &Value::map().with("fields", fields)).unwrap();
            let out = h.capture("s", 0);
            let need = spec.iter().map(|&(o, s, _, _)| o + s).max().unwrap();
            let mut cur = vec![0u64; spec.len()];
            let mut want = Vec::new();
            for lens in &batches {
                let pkts: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0xee; n]).collect();
                for p in pkts.iter().filter(|p| p.len() >= need) {
                    let mut p = p.clone();
                    for (c, &(o, s, min, span)) in cur.iter_mut().zip(&spec) {
                        let limit = if s == 4 { u32::MAX as u64 } else { (1 << (8 * s)) - 1 };
                        let (lo, hi) = (min.min(limit), (min + span).min(limit));
                        let v = lo + *c;
                        *c = (*c + 1) % (hi - lo + 1);
                        p[o..o + s].copy_from_slice(&v.to_be_bytes()[8 - s..]);
                    }
                    want.push(p);
                }
                h.inject("s", 0, &pkts);
            }
            proptest::prop_assert_eq!(out.take_data(), want);
        }
    }
}

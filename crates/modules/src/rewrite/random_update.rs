//! RandomUpdate: writes random values within ranges at packet offsets.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use super::offset_fields::{parse_fields_arg, parse_offset_fields, OffsetField, OffsetFields};
use bessemer_core::Packet;

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
    /// The shortest packet that holds every field.
    min_len: usize,
    rng: WyRand,
}

/// wyrand (Wang Yi's generator): a counter stepped by an odd constant and one 64x64->128-bit
/// multiply of it, folded. Each output depends on the counter alone, so the outputs of one
/// batch are computed in parallel (the only chain is an add), where a generator whose next
/// state is its output mixed (xorshift, an LCG) makes every packet wait for the previous
/// one's multiply. 64 bits per step: two 32-bit draws. Passes BigCrush and PractRand.
struct WyRand(u64);

impl WyRand {
    fn from_tsc() -> WyRand {
        WyRand(bessemer_core::tsc::rdtsc())
    }

    #[inline(always)]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        (t >> 64) as u64 ^ t as u64
    }
}

/// A uniform value in `min..min + span` from 32 random bits `r` (span <= 2^32): the
/// multiply-shift reduction, no division.
#[inline(always)]
fn scale(r: u64, min: u64, span: u64) -> u64 {
    min + (((r & 0xffff_ffff) * span) >> 32)
}

/// Writes one random value of field `f` into every packet of `pkts` (each holds the field),
/// big-endian, with `put(packet bytes at the field, value)`.
#[inline(always)]
fn fill(pkts: &mut [Packet], rng: &mut WyRand, f: &Field, put: impl Fn(*mut u8, u64)) {
    let (off, min, span) = (f.offset, f.spec.min, f.spec.span);
    let at = |p: &mut Packet| {
        let d = p.data_mut();
        debug_assert!(off + f.size <= d.len());
        // SAFETY: the caller checked every packet is at least the fields' end long.
        unsafe { d.as_mut_ptr().add(off) }
    };
    let mut pairs = pkts.chunks_exact_mut(2);
    for pair in &mut pairs {
        let r = rng.next();
        put(at(&mut pair[0]), scale(r, min, span));
        put(at(&mut pair[1]), scale(r >> 32, min, span));
    }
    for p in pairs.into_remainder() {
        put(at(p), scale(rng.next(), min, span));
    }
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
        self.set(self.fields.extended(new));
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "RandomUpdateCommandClearArg")?.finish()?;
        self.set(Vec::new());
        Ok(Value::Null)
    }

    fn set(&mut self, fields: Vec<Field>) {
        self.min_len = fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0);
        self.fields.set(fields);
    }
}

impl Module for RandomUpdate {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let min_len = self.min_len;
        let pkts = batch.pkts_mut();
        // Every packet holds every field (the rule): one field at a time over the batch, a
        // loop the compiler keeps free of per-packet length checks and size dispatch.
        if pkts.iter().fold(true, |ok, p| ok & (p.len() >= min_len)) {
            let rng = &mut self.rng;
            for f in self.fields.fields() {
                // `fill` hands each `put` a pointer to the field's bytes, inside the packet.
                match f.size {
                    // SAFETY: the 4 field bytes at `p` are inside the packet (`fill`);
                    // the write is unaligned.
                    4 => fill(pkts, rng, f, |p, v| unsafe {
                        p.cast::<u32>().write_unaligned((v as u32).to_be())
                    }),
                    // SAFETY: the 2 field bytes at `p` are inside the packet (`fill`);
                    // the write is unaligned.
                    2 => fill(pkts, rng, f, |p, v| unsafe {
                        p.cast::<u16>().write_unaligned((v as u16).to_be())
                    }),
                    // SAFETY: the field byte at `p` is inside the packet (`fill`).
                    _ => fill(pkts, rng, f, |p, v| unsafe { p.write(v as u8) }),
                }
            }
            return ctx.forward(0, batch);
        }
        // Some packet is too short: packet by packet, dropping those.
        let rng = &mut self.rng;
        self.fields
            .write_each(ctx, batch, RandomUpdateDrop::TooShort, |r| {
                scale(rng.next(), r.min, r.span)
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
        CommandSpec { name: "add", arg_type: "RandomUpdateArg", help: "adds fields", mt_safe: false, reply_type: "EmptyArg", mutates: true, handler: handler!(Exclusive RandomUpdate, RandomUpdate::cmd_add) },
        CommandSpec { name: "clear", arg_type: "RandomUpdateCommandClearArg", help: "removes all fields", mt_safe: false, reply_type: "EmptyArg", mutates: true, handler: handler!(Exclusive RandomUpdate, RandomUpdate::cmd_clear) },
    ],
    drop_reasons: RandomUpdateDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let fields = parse_fields_arg(arg, "RandomUpdateArg", parse_fields)?;
        let mut m = RandomUpdate {
            fields: OffsetFields::default(),
            min_len: 0,
            rng: WyRand::from_tsc(),
        };
        m.set(fields);
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

    use proptest::prelude::*;

    fn field(offset: usize, size: usize, min: u64, max: u64) -> Value {
        Value::map()
            .with("offset", offset as u64)
            .with("size", size as u64)
            .with("min", min)
            .with("max", max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever the fields (sizes 1, 2, 4; up to 16, added at creation and by `add`) and
        /// the packets (batches all long enough, or mixed with packets too short for some
        /// field): a long enough packet leaves with every field in its range and every other
        /// byte as it came, in order; a shorter one is dropped unchanged under too_short;
        /// no buffer leaks.
        #[test]
        fn writes_each_field_in_range_and_nothing_else(
            spec in proptest::collection::vec((0usize..3, 0usize..6, any::<u32>(), any::<u32>()), 1..=16),
            split in any::<prop::sample::Index>(),
            batches in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec((0usize..120, any::<u8>()), 0..=64)),
                1..4),
        ) {
            // Fields laid end to end (gaps of 0-5 bytes), so that each one's bytes are its own.
            let mut fields = Vec::new();
            let mut at = 0;
            for &(sz, gap, a, b) in &spec {
                let size = [1usize, 2, 4][sz];
                let limit = if size == 4 { u32::MAX as u64 } else { (1u64 << (8 * size)) - 1 };
                let (lo, hi) = ((a as u64).min(b as u64) & limit, (a as u64).max(b as u64) & limit);
                let (lo, hi) = (lo.min(hi), lo.max(hi));
                fields.push((at + gap, size, lo, hi));
                at += gap + size;
            }
            let end = at;
            let k = split.index(fields.len() + 1);
            let arg = |fs: &[(usize, usize, u64, u64)]| {
                Value::map().with(
                    "fields",
                    Value::List(fs.iter().map(|&(o, s, lo, hi)| field(o, s, lo, hi)).collect()),
                )
            };
            let mut h = Harness::new();
            h.add(&CLASS, "ru", &arg(&fields[..k])).unwrap();
            if k < fields.len() {
                h.command("ru", "add", &arg(&fields[k..])).unwrap();
            }
            let c = h.capture("ru", 0);
            let mut sent = Vec::new();
            let mut short = 0;
            for (all_long, pkts) in &batches {
                let pkts: Vec<Vec<u8>> = pkts
                    .iter()
                    .map(|&(len, fill)| {
                        let len = if *all_long { end + len } else { len };
                        (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
                    })
                    .collect();
                short += pkts.iter().filter(|p| p.len() < end).count() as u64;
                sent.extend(pkts.iter().filter(|p| p.len() >= end).cloned());
                h.inject("ru", 0, &pkts);
            }
            let got = c.take_data();
            prop_assert_eq!(got.len(), sent.len());
            for (g, s) in got.iter().zip(&sent) {
                prop_assert_eq!(g.len(), s.len());
                let mut mine = vec![false; s.len()];
                for &(o, size, lo, hi) in &fields {
                    let v = g[o..o + size].iter().fold(0u64, |v, &b| v << 8 | b as u64);
                    prop_assert!(lo <= v && v <= hi, "field at {} = {} not in [{}, {}]", o, v, lo, hi);
                    mine[o..o + size].fill(true);
                }
                for i in 0..s.len() {
                    if !mine[i] {
                        prop_assert_eq!(g[i], s[i], "byte {} changed", i);
                    }
                }
            }
            prop_assert_eq!(h.drops("ru", "too_short"), short);
            prop_assert_eq!(h.in_use(), 0);
        }
    }

    #[test]
    fn values_spread_evenly_over_the_range() {
        // 10 values, 12 800 draws (both the two-draws-per-step pairs and a batch's odd last
        // packet): each value about 1 280 times (a deviation of 25 % is about 9 standard
        // deviations); and a full 32-bit range reaches both halves and both parities.
        let mut h = Harness::new();
        let arg = Value::map().with(
            "fields",
            Value::List(vec![field(0, 1, 10, 19), field(1, 4, 0, u32::MAX as u64)]),
        );
        h.add(&CLASS, "ru", &arg).unwrap();
        let c = h.capture("ru", 0);
        for _ in 0..200 {
            h.inject("ru", 0, &vec![vec![0u8; 8]; 63]);
            h.inject("ru", 0, &[vec![0u8; 8]]);
        }
        let got = c.take_data();
        assert_eq!(got.len(), 12_800);
        let mut counts = [0u32; 256];
        let (mut high, mut odd) = (0, 0);
        for p in &got {
            counts[p[0] as usize] += 1;
            let v = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
            high += v >> 31;
            odd += v & 1;
        }
        for (v, &n) in counts.iter().enumerate() {
            if (10..=19).contains(&v) {
                assert!((960..=1600).contains(&n), "value {v} drawn {n} times");
            } else {
                assert_eq!(n, 0, "value {v} out of range");
            }
        }
        assert!(
            (5_400..=7_400).contains(&high),
            "{high} of 12 800 in the upper half"
        );
        assert!((5_400..=7_400).contains(&odd), "{odd} of 12 800 odd");
    }
}

//! Shared building blocks of the classifiers: a flat open-addressing hash table keyed by a
//! fixed number of 64-bit words, cache prefetch, and BESS's gate conventions.

mod flat;
mod keys;
mod values;

pub use flat::*;
pub use keys::*;
pub use values::*;

use crate::util::Verdict;
use bessemer_core::module::MAX_GATES;
use bessemer_core::{AttrOffset, Context, Error, Result, Value};

/// BESS's DROP_GATE: a rule or default gate with this id drops the packet.
pub const DROP_GATE: u16 = MAX_GATES;

/// Checks a gate argument the way BESS's `is_valid_gate` does (a real gate or DROP_GATE).
pub fn check_gate(v: Option<u64>, field: &str) -> Result<u16> {
    match v {
        Some(g) if g <= DROP_GATE as u64 => Ok(g as u16),
        Some(g) => Err(Error::invalid(format!(
            "{field}: {g} is not a gate (0..{MAX_GATES}, or {DROP_GATE} to drop)"
        ))),
        None => Ok(0),
    }
}

/// Checks the number of `fields` of a classifier argument `what` (1..=MAX_FIELDS).
pub fn check_field_count(fields: &[Value], what: &str) -> Result<()> {
    if fields.is_empty() {
        return Err(Error::invalid(format!(
            "{what}.fields: at least one field is required"
        )));
    }
    if fields.len() > MAX_FIELDS {
        return Err(Error::invalid(format!(
            "{what}.fields: at most {MAX_FIELDS} fields, got {}",
            fields.len()
        )));
    }
    Ok(())
}

/// Parses the `fields` of classifier argument `what`, laid out one after another in the key;
/// `each` sees every field as soon as it is parsed (so its errors come in field order).
pub fn parse_fields(
    fields: &[Value],
    what: &str,
    init: &mut bessemer_core::InitContext,
    mut each: impl FnMut(usize, &MatchField) -> Result<()>,
) -> Result<Vec<MatchField>> {
    let mut parsed = Vec::with_capacity(fields.len());
    let mut pos = 0;
    for (i, f) in fields.iter().enumerate() {
        let mf = parse_field(f, &format!("{what}.fields[{i}]"), pos, init)?;
        each(i, &mf)?;
        pos += mf.size;
        parsed.push(mf);
    }
    Ok(parsed)
}

/// The bytes of each of `fields` (laid out one after another) in `bytes`.
pub fn field_bytes(fields: &[MatchField], bytes: &[u8]) -> Vec<Vec<u8>> {
    fields
        .iter()
        .map(|f| bytes[f.pos..f.pos + f.size].to_vec())
        .collect()
}

/// The key length in 64-bit words of `fields` laid out by [`parse_fields`].
pub fn key_len_words(fields: &[MatchField]) -> usize {
    fields.last().map_or(0, |f| f.pos + f.size).div_ceil(8)
}

/// The `fields` list of a classifier's get_initial_arg.
pub fn fields_value(fields: &[MatchField]) -> Value {
    Value::List(fields.iter().map(field_value).collect())
}

/// What a field classifier keeps besides its rules: the match fields, the key builder, the key
/// length in 64-bit words (1..=8) and the gate of packets that match no rule.
pub struct Matcher {
    /// The match fields, laid out one after another in the key.
    pub fields: Vec<MatchField>,
    /// Builds packets' keys.
    pub keys: KeyBuilder,
    /// The key length in 64-bit words.
    pub words: usize,
    /// The gate of packets that match no rule (initially DROP_GATE: dropped).
    pub default_gate: u16,
    /// The plan gathering keys from attributes, if the keys are gathered.
    pub plan: PlanCache,
    /// The plan writing rules' values, if they are written with one.
    pub vplan: ValueCache,
}

impl Matcher {
    /// A matcher for `fields` (from [`parse_fields`]); `masks[i]` are field i's mask bytes
    /// (all ones if None or absent).
    pub fn new(fields: Vec<MatchField>, masks: &[Option<Vec<u8>>]) -> Matcher {
        Matcher {
            keys: KeyBuilder::new(&fields, masks),
            words: key_len_words(&fields),
            fields,
            default_gate: DROP_GATE,
            plan: PlanCache::default(),
            vplan: ValueCache::default(),
        }
    }
}

/// What ExactMatch and WildcardMatch share around their tables: a [`Matcher`] and rules added
/// one at a time.
pub(crate) trait RuleClassifier {
    /// The class name, prefix of its argument types (`ExactMatch` -> `ExactMatchConfig`).
    const CLASS: &'static str;
    /// The rule set, taken out while `set_runtime_config` tries a new one.
    type Rules;

    /// The fields, key builder and default gate.
    fn matcher(&self) -> &Matcher;
    /// The same, to change the default gate.
    fn matcher_mut(&mut self) -> &mut Matcher;
    /// The matcher, to update its plans, and the value fields.
    fn matcher_and_values(&mut self) -> (&mut Matcher, &ValueFields);
    /// Adds (or replaces) the rule `arg`, a message of type `what`.
    fn add_rule(&mut self, arg: &Value, what: &str) -> Result<()>;
    /// All rules, as `get_runtime_config` lists them.
    fn rules_value(&self) -> Vec<Value>;
    /// Takes the rule set out, leaving none.
    fn take_rules(&mut self) -> Self::Rules;
    /// Puts a rule set taken out back.
    fn put_rules(&mut self, rules: Self::Rules);
    /// The batch path for keys of `W` words, attribute offsets `offs` (one per field), with
    /// this batch's `plans`.
    fn run<const W: usize>(
        &self,
        ctx: &mut bessemer_core::Context,
        batch: &mut bessemer_core::PacketBatch,
        offs: &[bessemer_core::AttrOffset],
        plans: Plans<'_>,
    );
}

/// A classifier's `process_batch`: resolves the attribute fields' offsets once per batch and
/// runs the batch path compiled for the key length.
#[inline(always)]
pub(crate) fn process_batch<C: RuleClassifier>(
    c: &mut C,
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
) {
    let (m, values) = c.matcher_and_values();
    let mut offs = [bessemer_core::AttrOffset::NoRead; MAX_FIELDS];
    for (i, f) in m.fields.iter().enumerate() {
        if f.offset.is_none() {
            offs[i] = ctx.attr(f.attr_id);
        }
    }
    let offs = &offs[..m.fields.len()];
    let gathers = m.plan.get(&m.keys, offs).is_some();
    let voffs = values.offsets(ctx);
    let scatters = m.vplan.get(values, &voffs[..values.fields.len()]).is_some();
    let m = c.matcher();
    let plans = Plans {
        keys: gathers.then_some(&m.plan.plan),
        values: scatters.then_some(&m.vplan.plan),
    };
    match m.words {
        1 => c.run::<1>(ctx, batch, offs, plans),
        2 => c.run::<2>(ctx, batch, offs, plans),
        3 => c.run::<3>(ctx, batch, offs, plans),
        4 => c.run::<4>(ctx, batch, offs, plans),
        5 => c.run::<5>(ctx, batch, offs, plans),
        6 => c.run::<6>(ctx, batch, offs, plans),
        7 => c.run::<7>(ctx, batch, offs, plans),
        _ => c.run::<8>(ctx, batch, offs, plans),
    }
}

/// A batch's plans for a field classifier: gathering keys and writing values, where they
/// apply.
#[derive(Clone, Copy)]
pub(crate) struct Plans<'a> {
    /// Builds the keys (else each key is built field by field).
    pub keys: Option<&'a GatherPlan>,
    /// Writes the values (else each is written field by field).
    pub values: Option<&'a ValuePlan>,
}

/// The `add` command the classifiers share (a handler for the class's command table).
pub(crate) fn cmd_add<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    c.add_rule(arg, &format!("{}CommandAddArg", C::CLASS))
        .map(|()| Value::Null)
}

/// The `set_default_gate` command the classifiers share.
pub(crate) fn cmd_set_default_gate<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    set_default_gate(c, arg).map(|()| Value::Null)
}

/// The `get_runtime_config` command the classifiers share.
pub(crate) fn cmd_get_runtime_config<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    get_runtime_config(c, arg)
}

/// The `set_runtime_config` command the classifiers share.
pub(crate) fn cmd_set_runtime_config<C: RuleClassifier>(
    c: &mut C,
    _ctx: &mut Context,
    arg: &Value,
) -> Result<Value> {
    set_runtime_config(c, arg).map(|()| Value::Null)
}

fn set_default_gate<C: RuleClassifier>(c: &mut C, arg: &Value) -> Result<()> {
    let what = format!("{}CommandSetDefaultGateArg", C::CLASS);
    let mut a = bessemer_core::Args::new(arg, &what)?;
    let g = check_gate(a.uint("gate", u64::MAX)?, &format!("{what}.gate"))?;
    a.finish()?;
    c.matcher_mut().default_gate = g;
    Ok(())
}

fn get_runtime_config<C: RuleClassifier>(c: &C, arg: &Value) -> Result<Value> {
    bessemer_core::Args::new(arg, "EmptyArg")?.finish()?;
    let def = c.matcher().default_gate;
    Ok(Value::map()
        .with("default_gate", def as u64)
        .with("rules", Value::List(c.rules_value())))
}

fn set_runtime_config<C: RuleClassifier>(c: &mut C, arg: &Value) -> Result<()> {
    let what = format!("{}Config", C::CLASS);
    let mut a = bessemer_core::Args::new(arg, &what)?;
    let def = check_gate(
        a.uint("default_gate", u64::MAX)?,
        &format!("{what}.default_gate"),
    )?;
    let rules = a.list("rules")?;
    a.finish()?;
    // Tried on an empty rule set: a bad rule leaves the module as it was.
    let old = c.take_rules();
    for (i, r) in rules.iter().enumerate() {
        if let Err(e) = c.add_rule(r, &format!("{what}.rules[{i}]")) {
            c.put_rules(old);
            return Err(e);
        }
    }
    c.matcher_mut().default_gate = def;
    Ok(())
}

bessemer_core::drop_reasons! {
    /// Drop reasons of the table classifiers (ExactMatch, WildcardMatch, L2Forward).
    pub enum TableDrop {
        /// No rule matched and there is no default gate.
        NoMatch = "no_match",
        /// The packet is too short for a field.
        TooShort = "too_short",
        /// The matching rule's gate is DROP_GATE.
        Rule = "rule_drop",
    }
}

/// Where a packet of a field classifier goes: to the gate of the rule it matched (`found`),
/// else to the default gate `def`, which packets too short for a field (`status` already
/// `Some(TooShort)`) take too; DROP_GATE drops it (under `Rule` or `NoMatch`).
/// Sets `status` (`None` or the drop reason, as [`split`] takes it) and `gate`.
#[inline(always)]
pub fn resolve_gate(found: Option<u16>, def: u16, status: &mut Option<TableDrop>, gate: &mut u16) {
    match found {
        Some(DROP_GATE) => *status = Some(TableDrop::Rule),
        Some(g) => *gate = g,
        None if def == DROP_GATE => {
            if status.is_none() {
                *status = Some(TableDrop::NoMatch);
            }
        }
        None => {
            *status = None;
            *gate = def;
        }
    }
}

/// Sends packet i out of `gates[i]`, or drops it under reason `status[i]` when it is set; a
/// batch bound for one gate is forwarded whole.
#[inline(always)]
pub fn split<R: bessemer_core::DropReason + PartialEq>(
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
    gates: &[u16; bessemer_core::MAX_BURST],
    status: &[Option<R>; bessemer_core::MAX_BURST],
) {
    crate::util::send_each(ctx, batch, |i| match status[i] {
        None => Verdict::Gate(gates[i]),
        Some(r) => Verdict::Drop(r),
    });
}

/// Packs key bytes into little-endian words (the table key).
#[inline(always)]
pub fn key_words(key: &[u8; 64], out: &mut [u64; 8]) {
    for (w, c) in out.iter_mut().zip(key.chunks_exact(8)) {
        *w = u64::from_le_bytes(c.try_into().unwrap());
    }
}

/// Unpacks table key words into key bytes (the inverse of [`key_words`]; missing words are
/// zero).
pub fn key_bytes(words: &[u64]) -> [u8; 64] {
    let mut key = [0u8; 64];
    for (c, w) in key.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    key
}

/// A FieldData list of `value_bin` entries, one per byte string.
pub fn bin_list(values: impl IntoIterator<Item = Vec<u8>>) -> Value {
    Value::List(
        values
            .into_iter()
            .map(|b| Value::map().with("value_bin", b))
            .collect(),
    )
}

/// The `get_initial_arg` answer of ExactMatch and WildcardMatch, fields in the order of
/// their argument messages: `fields`, `masks` (ExactMatch's, when given), the fork's `values`
/// (when any), `masksv` (ExactMatch's, when given) and `entries` (when not 0).
pub fn initial_arg(
    fields: &[MatchField],
    masks: Option<Value>,
    values: &ValueFields,
    masksv: Option<Value>,
    entries: u64,
) -> Value {
    let mut v = Value::map().with("fields", fields_value(fields));
    if let Some(m) = masks {
        v = v.with("masks", m);
    }
    if !values.is_empty() {
        v = v.with("values", fields_value(&values.fields));
    }
    if let Some(m) = masksv {
        v = v.with("masksv", m);
    }
    if entries != 0 {
        v = v.with("entries", entries);
    }
    v
}

/// Test helpers building the classifiers' argument messages.
#[cfg(test)]
pub mod test_util {
    use bessemer_core::Value;

    /// A `Field` at packet offset `o` of `n` bytes.
    pub fn off(o: i64, n: i64) -> Value {
        Value::map().with("offset", o).with("num_bytes", n)
    }
    /// A FieldData of bytes.
    pub fn bin(b: &[u8]) -> Value {
        Value::map().with("value_bin", b.to_vec())
    }
    /// A FieldData of a big-endian number.
    pub fn int(i: u64) -> Value {
        Value::map().with("value_int", Value::Int(i as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys `KeyBuilder` builds from `fields` (masked by `masks`) of a packet holding `pkt`:
    /// the full 8-word key, and each narrow width (keys in registers) from the narrowest that
    /// holds the fields to 4.
    #[allow(clippy::type_complexity)]
    fn keys_at_every_width(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        pkt: &[u8],
    ) -> (Option<[u64; 8]>, Vec<(usize, Option<Vec<u64>>)>) {
        let kb = KeyBuilder::new(fields, masks);
        let pool =
            bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut p = cache.alloc(0).unwrap();
        assert!(p.set_data(pkt));
        let offs = [bessemer_core::AttrOffset::NoRead; 8];
        let full = kb.build::<8>(&offs, &p);
        let narrow = |w: usize| -> Option<Vec<u64>> {
            match w {
                1 => kb.build::<1>(&offs, &p).map(|k| k.to_vec()),
                2 => kb.build::<2>(&offs, &p).map(|k| k.to_vec()),
                3 => kb.build::<3>(&offs, &p).map(|k| k.to_vec()),
                _ => kb.build::<4>(&offs, &p).map(|k| k.to_vec()),
            }
        };
        let width = fields.iter().map(|f| f.pos + f.size).max().unwrap_or(0);
        let narrows = (width.div_ceil(8).max(1)..=4)
            .map(|w| (w, narrow(w)))
            .collect();
        cache.free(p);
        (full, narrows)
    }

    /// The key copied byte by byte (None if a field runs past the packet).
    fn bytewise_key(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        pkt: &[u8],
    ) -> Option<[u64; 8]> {
        let fits = fields
            .iter()
            .all(|f| f.offset.unwrap() + f.size <= pkt.len());
        fits.then(|| {
            let mut bytes = [0u8; 64];
            for (f, m) in fields.iter().zip(masks) {
                for j in 0..f.size {
                    bytes[f.pos + j] = pkt[f.offset.unwrap() + j] & m.as_ref().unwrap()[j];
                }
            }
            let mut want = [0u64; 8];
            key_words(&bytes, &mut want);
            want
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        #[test]
        fn key_builder_matches_bytewise_extraction(
            layout in proptest::collection::vec((0usize..24, 1usize..=8, proptest::prelude::any::<[u8; 8]>()), 1..=8),
            pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            // Fields at arbitrary offsets and sizes (crossing key words), with masks, against
            // copying bytes one by one.
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(o, size, _)| {
                    let f = MatchField { offset: Some(o), attr: None, attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(_, size, m)| Some(m[..*size].to_vec())).collect();
            let (got, narrows) = keys_at_every_width(&fields, &masks, &pkt);
            for (w, k) in narrows {
                proptest::prop_assert_eq!(k, got.map(|g| g[..w].to_vec()));
            }
            proptest::prop_assert_eq!(got, bytewise_key(&fields, &masks, &pkt));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Fields mostly next to each other in the packet (as a 5-tuple's), so that they are
        /// loaded as merged chunks: every key width agrees with copying bytes one by one.
        #[test]
        fn neighbouring_fields_load_as_chunks(
            start in 0usize..8,
            layout in proptest::collection::vec((0usize..4, 1usize..=8, proptest::prelude::any::<[u8; 8]>()), 1..=6),
            pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            // A one-byte gap before a field in a quarter of the cases, none otherwise.
            let (mut pos, mut at) = (0, start);
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(gap, size, _)| {
                    if gap == 0 {
                        at += 1;
                    }
                    let f = MatchField { offset: Some(at), attr: None, attr_id: 0, size, pos };
                    pos += size;
                    at += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(_, size, m)| Some(m[..*size].to_vec())).collect();
            let want = bytewise_key(&fields, &masks, &pkt);
            for (w, k) in keys_at_every_width(&fields, &masks, &pkt).1 {
                proptest::prop_assert_eq!(k, want.map(|g| g[..w].to_vec()));
            }
        }
    }

    /// The keys a gather plan builds from `fields` (attributes at `offs`, masked by `masks`)
    /// of a packet whose metadata is `meta`, next to the keys built field by field, for key
    /// width `W`.
    fn gathered_and_built<const W: usize>(
        fields: &[MatchField],
        masks: &[Option<Vec<u8>>],
        offs: &[AttrOffset],
        meta: &[u8; METADATA_BYTES],
    ) -> Option<([u64; W], [u64; W])> {
        let kb = KeyBuilder::new(fields, masks);
        let mut cache = PlanCache::default();
        let plan = cache.get(&kb, offs)?;
        let pool =
            bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain).unwrap();
        let mut pc = pool.cache();
        let mut p = pc.alloc(60).unwrap();
        p.metadata_mut().copy_from_slice(meta);
        let mut got = [[u64::MAX; W]; 2];
        plan.build_all::<W>(std::slice::from_ref(&p), &mut got[..1]);
        let want = kb.build::<W>(offs, &p).unwrap();
        pc.free(p);
        Some((got[0], want))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Keys gathered by byte shuffles from attributes anywhere in the metadata area (some
        /// unwritten, reading as zeros), with masks, match the keys built field by field.
        #[test]
        fn gathered_keys_match_keys_built_field_by_field(
            layout in proptest::collection::vec(
                (1usize..=8, 0usize..=120, proptest::prelude::any::<[u8; 8]>(), 0u8..8), 1..=8),
            meta in proptest::collection::vec(proptest::prelude::any::<u8>(), METADATA_BYTES),
        ) {
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(size, _, _, _)| {
                    let f = MatchField { offset: None, attr: Some("a".into()), attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let masks: Vec<Option<Vec<u8>>> =
                layout.iter().map(|(size, _, m, _)| Some(m[..*size].to_vec())).collect();
            let offs: Vec<AttrOffset> = layout
                .iter()
                .map(|&(size, o, _, kind)| match kind {
                    0 => AttrOffset::NoRead,
                    _ => AttrOffset::At(o.min(METADATA_BYTES - size) as u16),
                })
                .collect();
            let meta: [u8; METADATA_BYTES] = meta.try_into().unwrap();
            let words = pos.div_ceil(8);
            macro_rules! check {
                ($w:literal) => {
                    if words <= $w {
                        if let Some((got, want)) = gathered_and_built::<$w>(&fields, &masks, &offs, &meta) {
                            proptest::prop_assert_eq!(got, want, "width {}", $w);
                        }
                    }
                };
            }
            check!(1);
            check!(2);
            check!(3);
            check!(4);
            check!(5);
            check!(8);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Values written by a value plan (attributes anywhere in the metadata area, some not
        /// written, some overlapping: the later field wins) leave the metadata as writing
        /// them field by field does.
        #[test]
        fn planned_value_writes_match_writes_field_by_field(
            layout in proptest::collection::vec((1usize..=8, 0usize..=120, 0u8..8), 1..=8),
            meta in proptest::collection::vec(proptest::prelude::any::<u8>(), METADATA_BYTES),
            vals in proptest::collection::vec(proptest::prelude::any::<u8>(), 64),
        ) {
            if !ssse3() {
                return Ok(());
            }
            let mut pos = 0;
            let fields: Vec<MatchField> = layout
                .iter()
                .map(|&(size, _, _)| {
                    let f = MatchField { offset: None, attr: Some("v".into()), attr_id: 0, size, pos };
                    pos += size;
                    f
                })
                .collect();
            let values = ValueFields { fields, size: pos, scatters: true };
            let mut offs = [AttrOffset::NoWrite; MAX_FIELDS];
            for (o, &(size, at, kind)) in offs.iter_mut().zip(&layout) {
                // A few offsets shared, so that fields overlap.
                let at = if kind == 1 { 40 } else { at };
                *o = match kind {
                    0 => AttrOffset::NoWrite,
                    _ => AttrOffset::At(at.min(METADATA_BYTES - size) as u16),
                };
            }
            let mut cache = ValueCache::default();
            let plan = cache.get(&values, &offs[..layout.len()]).unwrap();
            let pool =
                bessemer_core::PacketPool::new("t", 64, bessemer_core::mem::PagePolicy::Plain)
                    .unwrap();
            let mut pc = pool.cache();
            let mut a = pc.alloc(60).unwrap();
            let mut b = pc.alloc(60).unwrap();
            a.metadata_mut().copy_from_slice(&meta);
            b.metadata_mut().copy_from_slice(&meta);
            let row = &vals[..values.read_len()];
            let mut pkts = [a];
            plan.apply_all(&mut pkts, &[row]);
            values.apply(&mut b, &offs, &vals[..pos]);
            let [a] = pkts;
            let same = a.metadata() == b.metadata();
            pc.free(a);
            pc.free(b);
            proptest::prop_assert!(same);
        }
    }

    #[test]
    fn field_data_is_big_endian_and_sized() {
        let v = Value::map().with("value_int", 0x0800);
        assert_eq!(field_data(&v, 2, "f").unwrap(), Some(vec![8, 0]));
        let v = Value::map().with("value_int", 0x10000);
        assert!(field_data(&v, 2, "f")
            .unwrap_err()
            .msg
            .contains("f.value_int"));
        let v = Value::map().with("value_bin", vec![1u8, 2, 3]);
        assert!(field_data(&v, 2, "f")
            .unwrap_err()
            .msg
            .contains("f.value_bin"));
        assert_eq!(field_data(&Value::map(), 2, "f").unwrap(), None);
        let v = Value::map().with("value_int", Value::from(u64::MAX));
        assert_eq!(field_data(&v, 8, "f").unwrap(), Some(vec![0xff; 8]));
        let v = Value::map().with("value_int", "x");
        assert!(field_data(&v, 8, "f")
            .unwrap_err()
            .msg
            .contains("f.value_int"));
    }
}

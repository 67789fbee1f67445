//! ExactMatch: sends each packet to the gate of the rule whose field values equal the
//! packet's (masked) fields, from a hash table of up to millions of rules.
use bessemer_core::{
    handler, Args, AttrOffset, CommandSpec, Context, Error, Instance, Module, ModuleClass,
    PacketBatch, Result, Value, MAX_BURST,
};

use super::table::{
    self, bin_list, check_field_count, check_gate, cmd_add, cmd_get_runtime_config,
    cmd_set_default_gate, cmd_set_runtime_config, field_bytes, field_data, hash_words, initial_arg,
    key_bytes, key_words, parse_fields, process_batch, resolve_gate, split, FlatTable, IntOrder,
    Matcher, Plans, RuleClassifier, TableDrop, ValueFields,
};

/// The payload words a rule's value bytes take.
fn payload_words(values: &ValueFields) -> usize {
    values.size.div_ceil(8)
}

/// Value bytes as payload words (memory order, zero-padded).
fn to_payload(bytes: &[u8], words: usize) -> Vec<u64> {
    let mut w = vec![0u64; words];
    for (i, c) in bytes.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        w[i] = u64::from_ne_bytes(b);
    }
    w
}

/// Payload words as the value bytes they hold (memory order).
#[inline(always)]
fn payload_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64s have no padding and every byte of them is a valid u8; the slice covers
    // exactly their memory.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8) }
}

/// Multi-field exact-match classifier.
pub struct ExactMatch {
    matcher: Matcher,
    /// Configured masks (empty when none was given, as BESS reports them back).
    masks_given: bool,
    /// Per-byte mask over the whole key (zero outside fields).
    mask: [u8; 64],
    /// Key words -> gate, each rule's value bytes in its slot's payload words: one probe
    /// finds both (a second table and a `Vec` per rule cost two more dependent misses).
    table: FlatTable,
    /// Fields written on a hit (omec-project fork's `values`).
    values: ValueFields,
    /// The `masksv` given (reported back by get_initial_arg; writes ignore them, as in the
    /// fork).
    masksv: Vec<Vec<u8>>,
    /// Most rules (the fork's `entries`; 0 = no limit).
    entries: u64,
}

impl ExactMatch {
    /// Builds the table key of a rule from its FieldData values.
    fn rule_key(&self, list: &[Value], what: &str) -> Result<Vec<u64>> {
        if list.len() != self.matcher.fields.len() {
            return Err(Error::invalid(format!(
                "{what}.fields: rule should have {} fields (has {})",
                self.matcher.fields.len(),
                list.len()
            )));
        }
        let mut key = [0u8; 64];
        for (i, (v, f)) in list.iter().zip(&self.matcher.fields).enumerate() {
            let mut b =
                field_data(v, f.size, &format!("{what}.fields[{i}]"))?.ok_or_else(|| {
                    Error::invalid(format!(
                        "{what}.fields[{i}]: value_bin or value_int required"
                    ))
                })?;
            // The fork's RuleFieldsFromPb: value_int is big-endian for packet offsets and in
            // host order (little-endian) for attributes, which hold host-order numbers that
            // the fork's classes (and our valuesv writes) put there.
            if f.offset.is_none() && v.get("value_int").is_some() {
                b.reverse();
            }
            key[f.pos..f.pos + f.size].copy_from_slice(&b);
        }
        // Stored masked, as packets are masked before lookup.
        for (k, m) in key.iter_mut().zip(&self.mask) {
            *k &= m;
        }
        let mut w = [0u64; 8];
        key_words(&key, &mut w);
        Ok(w[..self.matcher.words].to_vec())
    }
}

impl RuleClassifier for ExactMatch {
    const CLASS: &'static str = "ExactMatch";
    type Rules = FlatTable;

    fn matcher(&self) -> &Matcher {
        &self.matcher
    }
    fn matcher_mut(&mut self) -> &mut Matcher {
        &mut self.matcher
    }
    fn matcher_and_values(&mut self) -> (&mut Matcher, &ValueFields) {
        (&mut self.matcher, &self.values)
    }
    fn add_rule(&mut self, arg: &Value, what: &str) -> Result<()> {
        let mut a = Args::new(arg, what)?;
        let gate = check_gate(a.uint("gate", u64::MAX)?, &format!("{what}.gate"))?;
        let fields = a.list("fields")?;
        let values = a.list("values")?;
        a.finish()?;
        if fields.is_empty() {
            return Err(Error::invalid(format!(
                "{what}.fields: 'fields' must be a list"
            )));
        }
        let key = self.rule_key(fields, what)?;
        let action = self
            .values
            .rule_bytes(values, what, "values", IntOrder::BigForOffsets)?;
        let limit = table::rule_limit(self.entries);
        if self.table.len() as u64 >= limit && self.table.get(&key).is_none() {
            return Err(table::table_full(what, limit));
        }
        self.table.insert(&key, gate as u32);
        let pw = self.table.payload_words();
        self.table.set_payload(&key, &to_payload(&action, pw));
        Ok(())
    }

    fn rules_value(&self) -> Vec<Value> {
        type Row = (u16, Vec<Vec<u8>>, Option<Vec<u8>>);
        let has_values = !self.values.is_empty();
        let mut rules: Vec<Row> = self
            .table
            .iter_payload()
            .map(|(k, g, pl)| {
                let vals = field_bytes(&self.matcher.fields, &key_bytes(k));
                let action = has_values.then(|| payload_bytes(pl)[..self.values.size].to_vec());
                (g as u16, vals, action)
            })
            .collect();
        // Sorted by gate, then values, as BESS returns them.
        rules.sort();
        rules
            .into_iter()
            .map(|(g, vals, action)| {
                let v = Value::map()
                    .with("gate", g as u64)
                    .with("fields", bin_list(vals));
                match action {
                    Some(a) => v.with("values", self.values.value_list(&a)),
                    None => v,
                }
            })
            .collect()
    }
    fn take_rules(&mut self) -> FlatTable {
        let empty = FlatTable::with_payload(self.matcher.words, payload_words(&self.values));
        std::mem::replace(&mut self.table, empty)
    }
    fn put_rules(&mut self, rules: FlatTable) {
        self.table = rules;
    }
    /// The batch path for keys of `W` words: build keys, hash and prefetch every packet's
    /// slot, then look up (the loads overlap), then split.
    #[inline(always)]
    fn run<const W: usize>(
        &self,
        ctx: &mut Context,
        batch: &mut PacketBatch,
        offs: &[AttrOffset],
        plans: Plans<'_>,
    ) {
        let n = batch.len();
        let mut keys = [[0u64; W]; MAX_BURST];
        let mut hashes = [0u64; MAX_BURST];
        let mut status: [Option<TableDrop>; MAX_BURST] = [None; MAX_BURST];
        let mut gates = [0u16; MAX_BURST];
        if let Some(plan) = plans.keys {
            plan.build_all::<W>(batch.pkts(), &mut keys);
            for i in 0..n {
                hashes[i] = hash_words(&keys[i]);
                self.table.prefetch(hashes[i]);
            }
        } else {
            for (i, p) in batch.pkts().iter().enumerate() {
                if self.matcher.keys.build_into::<W>(offs, p, &mut keys[i]) {
                    hashes[i] = hash_words(&keys[i]);
                    self.table.prefetch(hashes[i]);
                } else {
                    status[i] = Some(TableDrop::TooShort);
                }
            }
        }
        let def = self.matcher.default_gate;
        let mut hits = 0u64;
        let mut acts: [&[u64]; MAX_BURST] = [&[]; MAX_BURST];
        for i in 0..n {
            let found = if status[i].is_none() {
                self.table.get_with_payload(&keys[i], hashes[i])
            } else {
                None
            };
            let found = found.map(|(g, pl)| {
                hits |= 1 << i;
                acts[i] = pl;
                g as u16
            });
            resolve_gate(found, def, &mut status[i], &mut gates[i]);
        }
        if hits != 0 && !self.values.is_empty() {
            // The fork's values: a hit writes its rule's bytes into the packet.
            if let Some(vp) = plans.values {
                let read = self.values.read_len();
                let mut rows: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
                for i in 0..n {
                    if hits >> i & 1 != 0 {
                        // The payload is followed by enough words for `read`
                        // (`FlatTable::get_with_payload`).
                        rows[i] = &payload_bytes(acts[i])[..read];
                    }
                }
                vp.apply_all(batch.pkts_mut(), &rows[..n]);
            } else {
                let offs = self.values.offsets(ctx);
                for (i, p) in batch.pkts_mut().iter_mut().enumerate() {
                    if hits >> i & 1 != 0 {
                        self.values.apply(p, &offs, payload_bytes(acts[i]));
                    }
                }
            }
        }
        split(ctx, batch, &gates, &status);
    }
}

impl ExactMatch {
    /// The `delete` command.
    fn cmd_delete(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "ExactMatchCommandDeleteArg";
        let mut a = Args::new(arg, what)?;
        let fields = a.list("fields")?;
        a.finish()?;
        if fields.is_empty() {
            return Err(Error::invalid(format!(
                "{what}.fields: argument must be a list"
            )));
        }
        let key = self.rule_key(fields, what)?;
        if self.table.remove(&key).is_none() {
            return Err(Error::not_found("rule doesn't exist"));
        }
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.table.clear();
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command.
    fn cmd_get_initial_arg(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let fields = &self.matcher.fields;
        let masks = self
            .masks_given
            .then(|| bin_list(field_bytes(fields, &self.mask)));
        let masksv = (!self.masksv.is_empty()).then(|| bin_list(self.masksv.iter().cloned()));
        Ok(initial_arg(
            fields,
            masks,
            &self.values,
            masksv,
            self.entries,
        ))
    }
}

impl Module for ExactMatch {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_batch(self, ctx, batch)
    }

    fn desc(&self) -> String {
        format!(
            "{} fields, {} rules",
            self.matcher.fields.len(),
            self.table.len()
        )
    }
}

fn create(init: &mut bessemer_core::InitContext, arg: &Value) -> Result<Instance> {
    let what = "ExactMatchArg";
    let mut a = Args::new(arg, what)?;
    let fields = a.list("fields")?;
    let masks = a.list("masks")?;
    let values = a.list("values")?;
    let masksv = a.list("masksv")?;
    let entries = a.uint("entries", table::MAX_RULES)?.unwrap_or(0);
    a.finish()?;
    check_field_count(fields, what)?;
    if !masks.is_empty() && masks.len() != fields.len() {
        return Err(Error::invalid(format!(
            "{what}.masks: must provide masks for all fields (or no masks for default match on all bits on all fields)"
        )));
    }
    let mut mask = [0u8; 64];
    let parsed = parse_fields(fields, what, init, |i, mf| {
        let m = match masks.get(i) {
            Some(mv) => field_data(mv, mf.size, &format!("{what}.masks[{i}]"))?,
            None => None,
        };
        // An absent or all-zero mask means all bits, as in BESS.
        let field_mask = &mut mask[mf.pos..mf.pos + mf.size];
        match m {
            Some(m) if m.iter().any(|&b| b != 0) => field_mask.copy_from_slice(&m),
            _ => field_mask.fill(0xff),
        }
        Ok(())
    })?;
    let field_masks: Vec<Option<Vec<u8>>> = parsed
        .iter()
        .map(|f| Some(mask[f.pos..f.pos + f.size].to_vec()))
        .collect();
    let matcher = Matcher::new(parsed, &field_masks);
    let values = ValueFields::parse(values, what, init)?;
    if !masksv.is_empty() && masksv.len() != values.fields.len() {
        return Err(Error::invalid(format!(
            "{what}.masksv: must provide masks for all values (or none)"
        )));
    }
    let masksv = masksv
        .iter()
        .zip(&values.fields)
        .enumerate()
        .map(|(i, (m, f))| {
            field_data(m, f.size, &format!("{what}.masksv[{i}]"))
                .map(|b| b.unwrap_or_else(|| vec![0; f.size]))
        })
        .collect::<Result<Vec<_>>>()?;
    let words = matcher.words;
    Ok(Instance::Exclusive(Box::new(ExactMatch {
        table: FlatTable::with_payload(words, payload_words(&values)),
        matcher,
        masks_given: !masks.is_empty(),
        mask,
        values,
        masksv,
        entries,
    })))
}

/// The ExactMatch class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "ExactMatch",
    name_template: "em",
    help: "Multi-field classifier with an exact match table",
    arg_type: "ExactMatchArg",
    arg_doc: &[
        "fields: [{offset: uint32 (0..1024) | attr_name: string, num_bytes: uint32 (1..8)}] — up to 8 fields matched together",
        "masks: [{value_bin: bytes | value_int: uint64}] — one per field (or none): bits that count; all-zero or absent = all bits",
        "values and masks: value_bin = the bytes as they appear in the packet or attribute; value_int = number of num_bytes bytes,",
        "  big-endian for offsets; a rule key's value_int on an attribute field is in host order (little-endian), as BESS's RuleFieldsFromPb",
        "no match goes to the default gate (initially none: dropped, counted no_match); packets too short for a field take the default gate",
        "values: [Field] — (omec-project fork) fields written on a hit: each rule's add carries values: [FieldData], one per value field;",
        "  value_int is big-endian for offsets, host order (little-endian) for attributes, as the fork; a field past the packet end is skipped",
        "masksv: [FieldData] — (fork) masks of the values: checked and reported back, not applied to writes (as the fork)",
        "entries: uint64 — (fork) table capacity: adding a new rule beyond it fails with ENOSPC (0 or absent: 4194304, also the largest accepted)",
    ],
    igates: 1,
    ogates: bessemer_core::module::MAX_GATES,
    commands: &[
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "returns the ExactMatchArg the module was built from",
            mt_safe: true,
            reply_type: "ExactMatchArg",
            mutates: false,
            handler: handler!(Exclusive ExactMatch, ExactMatch::cmd_get_initial_arg),
        },
        CommandSpec {
            name: "get_runtime_config",
            arg_type: "EmptyArg",
            help: "returns an ExactMatchConfig: default gate and all rules",
            mt_safe: true,
            reply_type: "ExactMatchConfig",
            mutates: false,
            handler: handler!(Exclusive ExactMatch, cmd_get_runtime_config::<ExactMatch>),
        },
        CommandSpec {
            name: "set_runtime_config",
            arg_type: "ExactMatchConfig",
            help: "replaces the default gate and all rules",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive ExactMatch, cmd_set_runtime_config::<ExactMatch>),
        },
        CommandSpec {
            name: "add",
            arg_type: "ExactMatchCommandAddArg",
            help: "adds (or replaces) a rule: field values -> gate (8192 = drop)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive ExactMatch, cmd_add::<ExactMatch>),
        },
        CommandSpec {
            name: "delete",
            arg_type: "ExactMatchCommandDeleteArg",
            help: "removes the rule with these field values",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive ExactMatch, ExactMatch::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all rules",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive ExactMatch, ExactMatch::cmd_clear),
        },
        CommandSpec {
            name: "set_default_gate",
            arg_type: "ExactMatchCommandSetDefaultGateArg",
            help: "sets the gate for packets that match no rule (8192 = drop)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive ExactMatch, cmd_set_default_gate::<ExactMatch>),
        },
    ],
    drop_reasons: TableDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::super::table::test_util::{bin, int, off};
    use super::*;
    use bessemer_core::testing::{CaptureHandle, Harness};
    use proptest::prelude::*;

    fn add(fields: Vec<Value>, gate: u64) -> Value {
        Value::map()
            .with("gate", gate)
            .with("fields", Value::List(fields))
    }

    /// Ethernet + IPv4 header with the given ethertype, src and dst (34 bytes + 26 payload).
    fn pkt(ethertype: u16, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[12..14].copy_from_slice(&ethertype.to_be_bytes());
        p[14] = 0x45;
        p[26..30].copy_from_slice(&src);
        p[30..34].copy_from_slice(&dst);
        p
    }

    fn attr(name: &str, n: i64) -> Value {
        Value::map().with("attr_name", name).with("num_bytes", n)
    }

    /// ExactMatch on the IPv4 destination writing values (the omec fork's `values`): the
    /// source address at offset 26 and a 2-byte attribute `tag`, which a second ExactMatch
    /// downstream classifies on.
    fn values_pipeline(extra: Value) -> (Harness, Vec<CaptureHandle>) {
        let mut h = Harness::new();
        let mut arg = Value::map()
            .with("fields", Value::List(vec![off(30, 4)]))
            .with("values", Value::List(vec![off(26, 4), attr("tag", 2)]));
        if let Value::Map(m) = extra {
            for (k, v) in m {
                arg = arg.with(&k, v);
            }
        }
        h.add(&CLASS, "em", &arg).unwrap();
        h.add(
            &CLASS,
            "by_tag",
            &Value::map().with("fields", Value::List(vec![attr("tag", 2)])),
        )
        .unwrap();
        h.connect("em", 0, "by_tag", 0).unwrap();
        for (t, g) in [(0x0102u64, 1u64), (0x0201, 2), (0, 3)] {
            h.command(
                "by_tag",
                "add",
                &Value::map()
                    .with("gate", g)
                    .with("fields", Value::List(vec![int(t)])),
            )
            .unwrap();
        }
        let caps = (1..=3).map(|g| h.capture("by_tag", g)).collect();
        (h, caps)
    }

    #[test]
    fn values_are_written_on_a_hit_as_the_fork_does() {
        let (mut h, caps) = values_pipeline(Value::map());
        // Offset values: value_int big-endian; attribute values: value_int in host order,
        // so tag 0x0102 is stored as bytes 02 01, which by_tag's value_int 0x0102 key (also
        // host order on an attribute, as the fork's RuleFieldsFromPb) matches.
        h.command(
            "em",
            "add",
            &Value::map()
                .with("gate", 0)
                .with("fields", Value::List(vec![bin(&[10, 0, 0, 2])]))
                .with("values", Value::List(vec![int(0xc0a8_0001), int(0x0102)])),
        )
        .unwrap();
        h.command(
            "em",
            "add",
            &Value::map()
                .with("gate", 0)
                .with("fields", Value::List(vec![bin(&[10, 0, 0, 3])]))
                .with(
                    "values",
                    Value::List(vec![bin(&[1, 2, 3, 4]), bin(&[0x01, 0x02])]),
                ),
        )
        .unwrap();
        h.command("em", "set_default_gate", &Value::map().with("gate", 0))
            .unwrap();
        let p2 = pkt(0x0800, [10, 0, 0, 1], [10, 0, 0, 2]);
        let p3 = pkt(0x0800, [10, 0, 0, 1], [10, 0, 0, 3]);
        let miss = pkt(0x0800, [10, 0, 0, 1], [10, 0, 0, 9]);
        h.inject("em", 0, &[p2.clone(), p3.clone(), miss.clone()]);
        let mut want2 = p2;
        want2[26..30].copy_from_slice(&[192, 168, 0, 1]);
        let mut want3 = p3;
        want3[26..30].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(
            caps[0].take_data(),
            vec![want2],
            "tag bytes 02 01 = int 0x0102"
        );
        assert_eq!(
            caps[1].take_data(),
            vec![want3],
            "tag bytes 01 02 = int 0x0201"
        );
        assert_eq!(caps[2].take_data(), vec![miss], "a miss writes nothing");
        // A rule must carry one value per value field.
        let e = h
            .command(
                "em",
                "add",
                &Value::map()
                    .with("gate", 0)
                    .with("fields", Value::List(vec![bin(&[10, 0, 0, 4])])),
            )
            .unwrap_err();
        assert!(e.msg.contains("incorrect number of values"), "{}", e.msg);
    }

    #[test]
    fn entries_caps_the_table_and_masksv_are_reported() {
        let extra = Value::map().with("entries", 2).with(
            "masksv",
            Value::List(vec![int(0xffff_ffff), bin(&[0xff, 0x00])]),
        );
        let (mut h, _caps) = values_pipeline(extra);
        let rule = |last: u8| {
            Value::map()
                .with("gate", 0)
                .with("fields", Value::List(vec![bin(&[10, 0, 0, last])]))
                .with("values", Value::List(vec![int(1), bin(&[1, 2])]))
        };
        h.command("em", "add", &rule(1)).unwrap();
        h.command("em", "add", &rule(2)).unwrap();
        h.command("em", "add", &rule(2)).unwrap(); // replacing one is fine
        let e = h.command("em", "add", &rule(3)).unwrap_err();
        assert_eq!(e.code, libc::ENOSPC, "{}", e.msg);
        let init = h.command("em", "get_initial_arg", &Value::map()).unwrap();
        assert_eq!(init.get("entries").and_then(Value::as_i64), Some(2));
        assert_eq!(
            init.get("values").unwrap(),
            &Value::List(vec![off(26, 4), attr("tag", 2)])
        );
        assert_eq!(
            init.get("masksv").unwrap(),
            &Value::List(vec![bin(&[0xff; 4]), bin(&[0xff, 0x00])])
        );
        // The runtime config carries each rule's values; a fresh module restores them.
        let cfg = h
            .command("em", "get_runtime_config", &Value::map())
            .unwrap();
        let (mut fresh, caps) = values_pipeline(Value::map());
        fresh.command("em", "set_runtime_config", &cfg).unwrap();
        assert_eq!(
            fresh
                .command("em", "get_runtime_config", &Value::map())
                .unwrap(),
            cfg
        );
        let p = pkt(0x0800, [10, 0, 0, 9], [10, 0, 0, 1]);
        fresh.inject("em", 0, std::slice::from_ref(&p));
        let mut want = p;
        want[26..30].copy_from_slice(&[0, 0, 0, 1]);
        // Tag bytes 01 02: by_tag's rule 0x0201 (host order on an attribute), gate 2.
        assert_eq!(caps[1].take_data(), vec![want]);
        assert!(caps[0].is_empty() && caps[2].is_empty());
    }

    #[test]
    fn classifies_by_fields_with_default_gate_and_drops() {
        let mut h = Harness::new();
        let arg = Value::map().with(
            "fields",
            Value::List(vec![off(12, 2), off(26, 4), off(30, 4)]),
        );
        h.add(&CLASS, "em", &arg).unwrap();
        let (c0, c1, c5) = (h.capture("em", 0), h.capture("em", 1), h.capture("em", 5));
        h.command(
            "em",
            "add",
            &add(
                vec![int(0x0800), bin(&[10, 0, 0, 1]), bin(&[10, 0, 0, 2])],
                1,
            ),
        )
        .unwrap();
        h.command(
            "em",
            "add",
            &add(
                vec![int(0x0800), bin(&[10, 0, 0, 3]), bin(&[10, 0, 0, 2])],
                0,
            ),
        )
        .unwrap();
        let a = pkt(0x0800, [10, 0, 0, 1], [10, 0, 0, 2]);
        let b = pkt(0x0800, [10, 0, 0, 3], [10, 0, 0, 2]);
        let miss = pkt(0x86dd, [10, 0, 0, 1], [10, 0, 0, 2]);
        // No default gate yet: misses and short packets are dropped, counted.
        h.inject(
            "em",
            0,
            &[a.clone(), b.clone(), miss.clone(), a[..30].to_vec()],
        );
        assert_eq!(c1.take_data(), vec![a.clone()]);
        assert_eq!(c0.take_data(), vec![b.clone()]);
        assert_eq!(h.drops("em", "no_match"), 1);
        assert_eq!(h.drops("em", "too_short"), 1);
        h.command("em", "set_default_gate", &Value::map().with("gate", 5))
            .unwrap();
        h.inject("em", 0, &[miss.clone(), a[..30].to_vec()]);
        assert_eq!(c5.take_data(), vec![miss.clone(), a[..30].to_vec()]);
        // A rule to gate 8192 drops.
        h.command(
            "em",
            "add",
            &add(
                vec![int(0x0800), bin(&[10, 0, 0, 1]), bin(&[10, 0, 0, 2])],
                8192,
            ),
        )
        .unwrap();
        h.inject("em", 0, std::slice::from_ref(&a));
        assert_eq!(h.drops("em", "rule_drop"), 1);
        let del = Value::map().with(
            "fields",
            Value::List(vec![int(0x0800), bin(&[10, 0, 0, 1]), bin(&[10, 0, 0, 2])]),
        );
        h.command("em", "delete", &del).unwrap();
        assert_eq!(
            h.command("em", "delete", &del).unwrap_err().code,
            Error::not_found("").code
        );
        h.inject("em", 0, std::slice::from_ref(&a));
        assert_eq!(c5.take_data(), vec![a.clone()]);
        h.command("em", "clear", &Value::map()).unwrap();
        h.inject("em", 0, std::slice::from_ref(&b));
        assert_eq!(c5.take_data(), vec![b]);
        assert!(c0.is_empty() && c1.is_empty());
    }

    #[test]
    fn masks_select_bits_and_metadata_fields_work() {
        let mut h = Harness::new();
        // The IP version nibble (mask 0xf0 of byte 14) and a metadata attribute.
        let arg = Value::map()
            .with(
                "fields",
                Value::List(vec![
                    off(14, 1),
                    Value::map().with("attr_name", "tag").with("num_bytes", 2),
                ]),
            )
            .with("masks", Value::List(vec![int(0xf0), int(0)]));
        h.add(
            &crate::rewrite::set_metadata::CLASS,
            "set",
            &Value::map().with(
                "attrs",
                Value::List(vec![Value::map()
                    .with("name", "tag")
                    .with("size", 2)
                    .with("value_int", 0x0102)]),
            ),
        )
        .unwrap();
        h.add(&CLASS, "em", &arg).unwrap();
        h.connect("set", 0, "em", 0).unwrap();
        let c3 = h.capture("em", 3);
        h.command("em", "add", &add(vec![int(0x40), bin(&[1, 2])], 3))
            .unwrap();
        let mut p = vec![0u8; 20];
        p[14] = 0x4f;
        let mut q = p.clone();
        q[14] = 0x6f;
        h.inject("set", 0, &[p.clone(), q]);
        assert_eq!(c3.take_data(), vec![p]);
        assert_eq!(h.drops("em", "no_match"), 1);
        let init = h.command("em", "get_initial_arg", &Value::map()).unwrap();
        assert_eq!(
            init.get("masks").unwrap(),
            &Value::List(vec![bin(&[0xf0]), bin(&[0xff, 0xff])])
        );
    }

    #[test]
    fn runtime_config_round_trips() {
        let mut h = Harness::new();
        let arg = Value::map().with("fields", Value::List(vec![off(0, 2)]));
        h.add(&CLASS, "em", &arg).unwrap();
        h.command("em", "add", &add(vec![bin(&[0, 2])], 7)).unwrap();
        h.command("em", "add", &add(vec![bin(&[0, 1])], 7)).unwrap();
        h.command("em", "add", &add(vec![bin(&[9, 9])], 1)).unwrap();
        h.command("em", "set_default_gate", &Value::map().with("gate", 4))
            .unwrap();
        let cfg = h
            .command("em", "get_runtime_config", &Value::map())
            .unwrap();
        let want = Value::map().with("default_gate", 4u64).with(
            "rules",
            Value::List(vec![
                add(vec![bin(&[9, 9])], 1),
                add(vec![bin(&[0, 1])], 7),
                add(vec![bin(&[0, 2])], 7),
            ]),
        );
        assert_eq!(cfg, want);
        h.command("em", "clear", &Value::map()).unwrap();
        h.command("em", "set_runtime_config", &cfg).unwrap();
        assert_eq!(
            h.command("em", "get_runtime_config", &Value::map())
                .unwrap(),
            want
        );
        // A bad rule leaves the old configuration in place.
        let bad = Value::map().with("rules", Value::List(vec![add(vec![bin(&[1, 2, 3])], 0)]));
        let e = h.command("em", "set_runtime_config", &bad).unwrap_err();
        assert!(e.msg.contains("rules[0].fields[0].value_bin"), "{}", e.msg);
        assert_eq!(
            h.command("em", "get_runtime_config", &Value::map())
                .unwrap(),
            want
        );
    }

    #[test]
    fn argument_errors_name_the_field() {
        let mut h = Harness::new();
        let e = h
            .add(
                &CLASS,
                "a",
                &Value::map().with("fields", Value::List(vec![off(0, 9)])),
            )
            .unwrap_err();
        assert!(e.msg.contains("fields[0].num_bytes"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "b",
                &Value::map().with("fields", Value::List(vec![off(2000, 1)])),
            )
            .unwrap_err();
        assert!(e.msg.contains("fields[0].offset"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "c",
                &Value::map()
                    .with("fields", Value::List(vec![off(0, 1), off(1, 1)]))
                    .with("masks", Value::List(vec![int(1)])),
            )
            .unwrap_err();
        assert!(e.msg.contains("masks"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "d",
                &Value::map()
                    .with("fields", Value::List(vec![off(0, 1)]))
                    .with("masks", Value::List(vec![int(0x100)])),
            )
            .unwrap_err();
        assert!(e.msg.contains("masks[0].value_int"), "{}", e.msg);
        h.add(
            &CLASS,
            "e",
            &Value::map().with("fields", Value::List(vec![off(0, 2)])),
        )
        .unwrap();
        let e = h.command("e", "add", &add(vec![bin(&[1])], 0)).unwrap_err();
        assert!(e.msg.contains("fields[0].value_bin"), "{}", e.msg);
        let e = h
            .command("e", "add", &add(vec![bin(&[1, 2])], 9000))
            .unwrap_err();
        assert!(e.msg.contains("gate"), "{}", e.msg);
        let e = h
            .command("e", "add", &add(vec![bin(&[1, 2]), bin(&[3, 4])], 0))
            .unwrap_err();
        assert!(e.msg.contains("fields"), "{}", e.msg);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn agrees_with_a_linear_scan(
            rules in proptest::collection::vec((any::<[u8; 3]>(), 0u16..4), 0..40),
            dels in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            pkts in proptest::collection::vec((any::<[u8; 3]>(), any::<prop::sample::Index>(), any::<bool>()), 1..80),
            mask in any::<u8>(),
        ) {
            // Fields: byte 1 masked, bytes 4..6; packets either random or copies of a rule.
            let mut h = Harness::new();
            let arg = Value::map()
                .with("fields", Value::List(vec![off(1, 1), off(4, 2)]))
                .with("masks", Value::List(vec![int(mask as u64), int(0xffff)]));
            h.add(&CLASS, "em", &arg).unwrap();
            h.command("em", "set_default_gate", &Value::map().with("gate", 9)).unwrap();
            let caps: Vec<_> = (0..10).map(|g| h.capture("em", g)).collect();
            let m = if mask == 0 { 0xff } else { mask };
            let mut reference: Vec<([u8; 3], u16)> = Vec::new();
            for (v, g) in &rules {
                h.command("em", "add", &add(vec![bin(&[v[0]]), bin(&v[1..])], *g as u64)).unwrap();
                let k = [v[0] & m, v[1], v[2]];
                reference.retain(|(rk, _)| *rk != k);
                reference.push((k, *g));
            }
            for d in &dels {
                if rules.is_empty() { break; }
                let v = rules[d.index(rules.len())].0;
                let del = Value::map().with("fields", Value::List(vec![bin(&[v[0]]), bin(&v[1..])]));
                let k = [v[0] & m, v[1], v[2]];
                let had = reference.iter().any(|(rk, _)| *rk == k);
                prop_assert_eq!(h.command("em", "delete", &del).is_ok(), had);
                reference.retain(|(rk, _)| *rk != k);
            }
            let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 10];
            let mut input = Vec::new();
            for (v, pick, from_rule) in &pkts {
                let v = if *from_rule && !rules.is_empty() { rules[pick.index(rules.len())].0 } else { *v };
                let mut p = vec![0u8; 8];
                p[1] = v[0];
                p[4..6].copy_from_slice(&v[1..]);
                let k = [v[0] & m, v[1], v[2]];
                let g = reference.iter().find(|(rk, _)| *rk == k).map(|r| r.1).unwrap_or(9);
                want[g as usize].push(p.clone());
                input.push(p);
            }
            h.inject("em", 0, &input);
            for g in 0..10 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone());
            }
        }
    }
}

//! Qos (omec-project fork): an exact-match classifier whose rules either send packets to a
//! gate or meter them with a two-rate three-colour marker (RFC 2698) and send them to the
//! gate of their colour; on a hit the rule's values are written into the packet.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, AttrOffset, CommandSpec, Context, Error, InitContext, Instance, ModuleClass, Packet,
    PacketBatch, Result, SharedModule, Value, MAX_BURST,
};

use crate::classify::table::{
    field_data, hash_words, key_words, parse_fields, prefetch, FlatTable, IntOrder, KeyBuilder,
    MatchField, ValueFields, DROP_GATE, MAX_FIELDS,
};
use crate::util::{process_each, Verdict, IDLE};

/// The gate of metered rules in `add`: their packets leave by colour.
pub const METER_GATE: u16 = 0;
/// Gate of packets a metered rule marks green.
pub const GREEN_GATE: u16 = 1;
/// Gate of packets a metered rule marks yellow.
pub const YELLOW_GATE: u16 = 2;
/// Gate of packets a metered rule marks red.
pub const RED_GATE: u16 = 3;
/// What a metered rule deducts from the frame length when `deduct_len` is not given (the
/// Ethernet header).
const DEFAULT_DEDUCT: i64 = 14;

bessemer_core::drop_reasons! {
    /// Why Qos drops packets.
    pub enum QosDrop {
        /// No rule matched and the default gate is DROP_GATE (as it is initially).
        NoMatch = "no_match",
        /// The packet is too short for a packet-offset field.
        TooShort = "too_short",
        /// The matching rule's gate is DROP_GATE.
        Rule = "rule_drop",
    }
}

/// A packet's colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Within the committed rate.
    Green,
    /// Above the committed rate, within the peak rate.
    Yellow,
    /// Above the peak rate.
    Red,
}

/// A colour-blind two-rate three-colour marker (RFC 2698; DPDK's `rte_meter_trtcm` the
/// fork uses). Rates are bytes per second, bursts bytes; time is in ticks of `hz` per
/// second. Tokens are kept scaled by `hz` so that refilling is exact.
#[derive(Clone, Debug)]
pub struct TrTcm {
    cir: u128,
    pir: u128,
    cap_c: u128,
    cap_p: u128,
    hz: u128,
    tc: u128,
    tp: u128,
    last: u64,
}

impl TrTcm {
    /// A marker with both buckets full at time `now`; `Err` for the parameters DPDK
    /// refuses (a zero rate or burst, or a peak rate below the committed one).
    pub fn new(cir: u64, pir: u64, cbs: u64, pbs: u64, hz: u64, now: u64) -> Result<TrTcm> {
        if cir == 0 || pir == 0 || pir < cir || cbs == 0 || pbs == 0 || hz == 0 {
            return Err(Error::invalid(format!(
                "Insert Failed - trTCM parameters cir {cir} pir {pir} cbs {cbs} pbs {pbs}: \
                 rates and bursts must be non-zero and pir at least cir"
            )));
        }
        let hz = hz as u128;
        Ok(TrTcm {
            cir: cir as u128,
            pir: pir as u128,
            cap_c: cbs as u128 * hz,
            cap_p: pbs as u128 * hz,
            hz,
            tc: cbs as u128 * hz,
            tp: pbs as u128 * hz,
            last: now,
        })
    }

    /// The colour of a packet of `len` bytes arriving at `now` (time never runs back: an
    /// earlier `now` adds no tokens).
    pub fn color(&mut self, now: u64, len: u64) -> Color {
        let dt = now.saturating_sub(self.last) as u128;
        self.last = self.last.max(now);
        self.tc = (self.tc + dt * self.cir).min(self.cap_c);
        self.tp = (self.tp + dt * self.pir).min(self.cap_p);
        let need = len as u128 * self.hz;
        if self.tp < need {
            Color::Red
        } else if self.tc < need {
            self.tp -= need;
            Color::Yellow
        } else {
            self.tc -= need;
            self.tp -= need;
            Color::Green
        }
    }
}

/// One rule: where its packets go, and what it writes.
struct Rule {
    gate: u16,
    deduct_len: i64,
    values: Vec<u8>,
    meter: Option<Mutex<TrTcm>>,
}

/// A rule key: the masked key words.
#[derive(Clone, Copy)]
struct Key([u64; 8]);

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        // Branch-free over the fixed eight words: the derived comparison of a 64-byte array
        // is a call to libc's memcmp on every lookup.
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // One multiply per word (the classifiers' hash) instead of SipHash over 64 bytes on
        // every packet; the stored keys come from the control plane, so collisions cannot be
        // forced by traffic. A product's low bits depend only on its input's low bits, and
        // the map indexes by the low bits: a finalizer (MurmurHash3's) mixes the high bits
        // down, else keys differing only in high bytes (a session id after a constant
        // interface and QER id) all share one probe sequence and a lookup scans them all.
        let mut h = hash_words(&self.0);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        state.write_u64(h ^ (h >> 33));
    }
}

/// Passes the key's own hash through.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

struct Table {
    rules: HashMap<Key, Arc<Rule>, BuildHasherDefault<KeyHasher>>,
    /// The packet path's view of `rules`: key words to a slot of `slots`, one flat table
    /// whose probe a batch prefetches before looking up (the map above costs several
    /// dependent cache misses per lookup once the rules outgrow the caches).
    index: FlatTable,
    slots: Vec<Option<Arc<Rule>>>,
    free: Vec<u32>,
    default_gate: u16,
}

impl Table {
    fn new(words: usize) -> Table {
        Table {
            rules: HashMap::default(),
            index: FlatTable::new(words),
            slots: Vec::new(),
            free: Vec::new(),
            default_gate: DROP_GATE,
        }
    }

    /// Adds or replaces the rule of `key` (its first `words` words are the index's key).
    fn set(&mut self, key: Key, rule: Arc<Rule>, words: usize) {
        let w = &key.0[..words];
        match self.index.get(w) {
            Some(i) => self.slots[i as usize] = Some(rule.clone()),
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i as usize] = Some(rule.clone());
                        i
                    }
                    None => {
                        self.slots.push(Some(rule.clone()));
                        (self.slots.len() - 1) as u32
                    }
                };
                self.index.insert(w, i);
            }
        }
        self.rules.insert(key, rule);
    }

    fn remove(&mut self, key: &Key, words: usize) {
        if self.rules.remove(key).is_some() {
            if let Some(i) = self.index.remove(&key.0[..words]) {
                self.slots[i as usize] = None;
                self.free.push(i);
            }
        }
    }

    fn clear(&mut self) {
        self.rules.clear();
        self.index.clear();
        self.slots.clear();
        self.free.clear();
    }
}

/// Looks up each packet's key (the `fields`, exact match); a rule of gate 0 meters the
/// packet (frame length minus `deduct_len`) and sends it out of gate 1, 2 or 3 by colour,
/// any other rule out of its gate; a hit writes the rule's `values`. A miss goes to the
/// default gate (initially DROP_GATE: dropped). One instance may be run by every worker and
/// its commands run while they do: rules sit behind a read-write lock, each meter behind its
/// own lock.
pub struct Qos {
    fields: Vec<MatchField>,
    /// Key words the fields fill (the rest are zero).
    words: usize,
    keys: KeyBuilder,
    values: ValueFields,
    entries: u64,
    table: RwLock<Table>,
}

fn valid_rule_gate(g: u64) -> bool {
    g == METER_GATE as u64 || (g > RED_GATE as u64 && g < MAX_GATES as u64) || g == DROP_GATE as u64
}

impl Qos {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of a command's `fields` (FieldData, one per field): `value_bin` as given,
    /// `value_int` in host (little-endian) order, as the fork's `uint64_to_bin(.., false)`.
    fn key(&self, list: &[Value], what: &str) -> Result<Key> {
        if list.len() != self.fields.len() {
            return Err(Error::invalid(format!(
                "{what}.fields: must specify {} fields, got {}",
                self.fields.len(),
                list.len()
            )));
        }
        let mut bytes = [0u8; 64];
        for (i, (v, f)) in list.iter().zip(&self.fields).enumerate() {
            let w = format!("{what}.fields[{i}]");
            let mut b = field_data(v, f.size, &w)?
                .ok_or_else(|| Error::invalid(format!("{w}: value_bin or value_int required")))?;
            if v.get("value_int").is_some() {
                b.reverse();
            }
            bytes[f.pos..f.pos + f.size].copy_from_slice(&b);
        }
        let mut k = [0u64; 8];
        key_words(&bytes, &mut k);
        Ok(Key(k))
    }

    /// The `add` command: adds or replaces a rule.
    fn cmd_add(&self, ctx: &mut Context, arg: &Value) -> Result<Value> {
        const W: &str = "QosCommandAddArg";
        let mut a = bessemer_core::Args::new(arg, W)?;
        let gate = a.uint("gate", u64::MAX)?.unwrap_or(0);
        let cir = a.uint("cir", u64::MAX)?.unwrap_or(0);
        let pir = a.uint("pir", u64::MAX)?.unwrap_or(0);
        let cbs = a.uint("cbs", u64::MAX)?.unwrap_or(0);
        let pbs = a.uint("pbs", u64::MAX)?.unwrap_or(0);
        let _ebs = a.uint("ebs", u64::MAX)?;
        let deduct_len = a.int("deduct_len", i64::MIN, i64::MAX)?;
        let fields = a.list("fields")?;
        let values = a.list("values")?;
        a.finish()?;
        if !valid_rule_gate(gate) {
            return Err(Error::invalid(format!("Invalid gate: {gate}")));
        }
        let key = self.key(fields, W)?;
        let values = self
            .values
            .rule_bytes(values, W, "values", IntOrder::Little)?;
        let meter = if gate == METER_GATE as u64 {
            let now = ctx.refresh_now();
            Some(Mutex::new(TrTcm::new(
                cir,
                pir,
                cbs,
                pbs,
                bessemer_core::tsc::hz(),
                now,
            )?))
        } else {
            None
        };
        let rule = Arc::new(Rule {
            gate: gate as u16,
            deduct_len: deduct_len.unwrap_or(DEFAULT_DEDUCT),
            values,
            meter,
        });
        let mut t = self.write();
        if self.entries != 0 && t.rules.len() as u64 >= self.entries && !t.rules.contains_key(&key)
        {
            return Err(Error::new(
                libc::ENOSPC,
                format!("Qos: table full ({} entries)", self.entries),
            ));
        }
        t.set(key, rule, self.words);
        Ok(Value::Null)
    }

    /// The `delete` command (deleting a rule that is not there succeeds, as the fork).
    fn cmd_delete(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        const W: &str = "QosCommandDeleteArg";
        let mut a = bessemer_core::Args::new(arg, W)?;
        let fields = a.list("fields")?;
        a.finish()?;
        let key = self.key(fields, W)?;
        self.write().remove(&key, self.words);
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        bessemer_core::Args::new(arg, "EmptyArg")?.finish()?;
        self.write().clear();
        Ok(Value::Null)
    }

    /// The `set_default_gate` command.
    fn cmd_set_default_gate(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = bessemer_core::Args::new(arg, "QosCommandSetDefaultGateArg")?;
        let g = a.uint("gate", u64::MAX)?.unwrap_or(0);
        a.finish()?;
        if g > DROP_GATE as u64 {
            return Err(Error::invalid(format!(
                "QosCommandSetDefaultGateArg.gate: {g} is not a gate (0..{MAX_GATES}, or {DROP_GATE} to drop)"
            )));
        }
        self.write().default_gate = g as u16;
        Ok(Value::Null)
    }

    fn decide(
        &self,
        t: &Table,
        p: &mut Packet,
        rule: Option<&Arc<Rule>>,
        voffs: &[AttrOffset],
        now: u64,
    ) -> Verdict<QosDrop> {
        let Some(rule) = rule else {
            return match t.default_gate {
                DROP_GATE => Verdict::Drop(QosDrop::NoMatch),
                g => Verdict::Gate(g),
            };
        };
        let mut gate = rule.gate;
        if let Some(m) = &rule.meter {
            let len = (p.len() as i64).saturating_sub(rule.deduct_len).max(0) as u64;
            gate = match m
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .color(now, len)
            {
                Color::Green => GREEN_GATE,
                Color::Yellow => YELLOW_GATE,
                Color::Red => RED_GATE,
            };
        }
        self.values.apply(p, voffs, &rule.values);
        if gate == DROP_GATE {
            Verdict::Drop(QosDrop::Rule)
        } else {
            Verdict::Gate(gate)
        }
    }
}

impl SharedModule for Qos {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let mut offs = [AttrOffset::NoRead; MAX_FIELDS];
        for (o, f) in offs.iter_mut().zip(&self.fields) {
            if f.offset.is_none() {
                *o = ctx.attr(f.attr_id);
            }
        }
        let voffs = self.values.offsets(ctx);
        let now = ctx.refresh_now();
        let t = self.read();
        let w = self.words;
        // Three passes so that the misses of a batch overlap: keys and their probes
        // prefetched, then the lookups with each rule prefetched, then the meters.
        let mut keys = [[0u64; 8]; MAX_BURST];
        let mut hashes = [0u64; MAX_BURST];
        let mut short = [false; MAX_BURST];
        for (i, p) in batch.pkts_mut().iter().enumerate() {
            match self.keys.build::<8>(&offs, p) {
                Some(k) => {
                    keys[i] = k;
                    hashes[i] = hash_words(&k[..w]);
                    t.index.prefetch(hashes[i]);
                }
                None => short[i] = true,
            }
        }
        let mut rules: [Option<&Arc<Rule>>; MAX_BURST] = [None; MAX_BURST];
        for i in 0..batch.pkts_mut().len() {
            if short[i] {
                continue;
            }
            rules[i] = t
                .index
                .get_hashed(&keys[i][..w], hashes[i])
                .and_then(|s| t.slots[s as usize].as_ref());
            if let Some(r) = rules[i] {
                prefetch(Arc::as_ptr(r));
            }
        }
        let mut i = 0;
        process_each(ctx, batch, |p: &mut Packet| {
            let j = i;
            i += 1;
            if short[j] {
                return Verdict::Drop(QosDrop::TooShort);
            }
            self.decide(&t, p, rules[j], &voffs, now)
        });
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn desc(&self) -> String {
        format!(
            "{} fields, {} rules",
            self.fields.len(),
            self.read().rules.len()
        )
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    const W: &str = "QosArg";
    let mut a = bessemer_core::Args::new(arg, W)?;
    let fields = a.list("fields")?;
    let values = a.list("values")?;
    let entries = a.uint("entries", u64::MAX)?.unwrap_or(0);
    a.finish()?;
    if fields.len() > MAX_FIELDS {
        return Err(Error::invalid(format!(
            "{W}.fields: at most {MAX_FIELDS} fields, got {}",
            fields.len()
        )));
    }
    let fields = parse_fields(fields, W, init, |_, _| Ok(()))?;
    let values = ValueFields::parse(values, W, init)?;
    let words = fields
        .iter()
        .map(|f| f.pos + f.size)
        .max()
        .unwrap_or(0)
        .div_ceil(8)
        .max(1);
    Ok(Instance::Shared(Box::new(Qos {
        keys: KeyBuilder::new(&fields, &[]),
        fields,
        words,
        values,
        entries,
        table: RwLock::new(Table::new(words)),
    })))
}

/// The Qos class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Qos",
    name_template: "qos",
    help: "Multi-field classifier with a QOS",
    arg_type: "QosArg",
    arg_doc: &[
        "fields: [Field] — match fields (attr_name or offset, num_bytes 1..8), exact match",
        "values: [Field] — fields a matching rule writes",
        "entries: uint64 — most rules (0: no limit)",
        "gates: 0 never (metered rules leave by colour), 1 green, 2 yellow, 3 red, 4.. rule gates",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "QosCommandAddArg",
            help: "adds a rule: gate 0 meters (cir/pir bytes/s, cbs/pbs bytes, deduct_len), else a gate above 3 or DROP_GATE",
            mt_safe: true,
            handler: handler!(Shared Qos, Qos::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "QosCommandDeleteArg",
            help: "deletes the rule of a key",
            mt_safe: true,
            handler: handler!(Shared Qos, Qos::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "deletes every rule",
            mt_safe: true,
            handler: handler!(Shared Qos, Qos::cmd_clear),
        },
        CommandSpec {
            name: "set_default_gate",
            arg_type: "QosCommandSetDefaultGateArg",
            help: "sets the gate of packets no rule matches",
            mt_safe: true,
            handler: handler!(Shared Qos, Qos::cmd_set_default_gate),
        },
    ],
    drop_reasons: QosDrop::NAMES,
    mt_safe: true,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Keys that differ only above their low five bytes (the UPF's session QER key: the
    /// interface and QER id first, the session id after) still spread over the map's low
    /// hash bits, so a lookup does not scan every rule.
    #[test]
    fn keys_differing_in_high_bytes_spread_over_low_hash_bits() {
        let b = BuildHasherDefault::<KeyHasher>::default();
        let mut low: Vec<u64> = (0..5000u64)
            .map(|i| {
                let mut w = [0u64; 8];
                w[0] = 1 | 1 << 8 | (i + 1) << 40;
                b.hash_one(Key(w)) & 0xfff
            })
            .collect();
        // 5000 random values over 4096 bins leave about 2900 distinct; unmixed, 16.
        low.sort_unstable();
        low.dedup();
        assert!(low.len() > 2500, "{} distinct low-bit values", low.len());
    }
}

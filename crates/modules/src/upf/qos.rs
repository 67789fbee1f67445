//! Qos (omec-project fork): an exact-match classifier whose rules either send packets to a
//! gate or meter them with a two-rate three-colour marker (RFC 2698) and send them to the
//! gate of their colour; on a hit the rule's values are written into the packet.
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{PoisonError, RwLock};

use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, AttrOffset, CommandSpec, Context, Error, InitContext, Instance, ModuleClass, Packet,
    PacketBatch, Result, SharedModule, Value, MAX_BURST,
};

use crate::classify::table::{
    field_data, hash_words, key_words, parse_fields, prefetch, FlatTable, IntOrder, KeyBuilder,
    MatchField, PlanCache, ValueCache, ValueFields, DROP_GATE, MAX_FIELDS, VALUES_PAD,
};
use crate::util::{send_each, Verdict, IDLE};

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
#[repr(C)]
pub struct TrTcm {
    // The fields every packet updates first: a rule's first cache line holds them (see
    // `Rule`).
    tc: u128,
    tp: u128,
    last: u64,
    cir: u64,
    pir: u64,
    hz: u64,
    cap_c: u128,
    cap_p: u128,
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
        let h = hz as u128;
        Ok(TrTcm {
            tc: cbs as u128 * h,
            tp: pbs as u128 * h,
            last: now,
            cir,
            pir,
            hz,
            cap_c: cbs as u128 * h,
            cap_p: pbs as u128 * h,
        })
    }

    /// The colour of a packet of `len` bytes arriving at `now` (time never runs back: an
    /// earlier `now` adds no tokens).
    #[inline]
    pub fn color(&mut self, now: u64, len: u64) -> Color {
        let dt = now.saturating_sub(self.last) as u128;
        self.last = self.last.max(now);
        self.tc = (self.tc + dt * self.cir as u128).min(self.cap_c);
        self.tp = (self.tp + dt * self.pir as u128).min(self.cap_p);
        let need = len as u128 * self.hz as u128;
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

/// A [`TrTcm`] in the 48 bytes a rule has left in its cache line (see `Rule`): the same
/// arithmetic, with tokens kept in u64, which holds them exactly when both bursts and the
/// tick rate are below 2^32 (tokens never exceed burst × rate). Other markers stay
/// [`TrTcm`]s in `Table::big`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct SmallTrTcm {
    tc: u64,
    tp: u64,
    last: u64,
    cir: u64,
    pir: u64,
    cbs: u32,
    pbs: u32,
}

impl SmallTrTcm {
    /// `m` in the small form, if it fits (`m.hz` is the rate `color` is then given).
    fn new(m: &TrTcm) -> Option<SmallTrTcm> {
        let (cbs, pbs) = (m.cap_c / m.hz as u128, m.cap_p / m.hz as u128);
        if m.hz > u32::MAX as u64 || cbs > u32::MAX as u128 || pbs > u32::MAX as u128 {
            return None;
        }
        Some(SmallTrTcm {
            tc: m.tc as u64,
            tp: m.tp as u64,
            last: m.last,
            cir: m.cir,
            pir: m.pir,
            cbs: cbs as u32,
            pbs: pbs as u32,
        })
    }

    /// As [`TrTcm::color`], ticks at `hz` per second (below 2^32, as `new` requires).
    #[inline(always)]
    fn color(&mut self, now: u64, len: u64, hz: u64) -> Color {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        // In 64 bits: a bucket holds at most burst x rate (both below 2^32), so a sum that
        // overflows is past the cap anyway (the 128-bit arithmetic took twice the
        // instructions, three markers a packet on the UPF's path).
        let fill = |t: u64, rate: u64, cap: u64| match dt.checked_mul(rate) {
            Some(add) => t.saturating_add(add).min(cap),
            None => cap,
        };
        let tc = fill(self.tc, self.cir, self.cbs as u64 * hz);
        let tp = fill(self.tp, self.pir, self.pbs as u64 * hz);
        // A packet too long for 64 bits exceeds any bucket: red.
        let need = len.saturating_mul(hz);
        let (tc, tp, c) = if tp < need {
            (tc, tp, Color::Red)
        } else if tc < need {
            (tc, tp - need, Color::Yellow)
        } else {
            (tc - need, tp - need, Color::Green)
        };
        self.tc = tc;
        self.tp = tp;
        c
    }
}

/// What kind of marker a rule has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum MeterKind {
    /// None: the rule sends its packets to its gate.
    None,
    /// In the rule's own line (`Rule::meter`).
    Small,
    /// In `Table::big` (parameters too large for the small form, or a `deduct_len` beyond
    /// 32 bits).
    Big,
}

/// A marker too large for a rule's line, with its rule's `deduct_len`.
struct BigMeter {
    deduct_len: i64,
    meter: UnsafeCell<TrTcm>,
}

// SAFETY: `meter` is read and written only as its rule's marker is (`Rule::locked_if`).
unsafe impl Sync for BigMeter {}

/// One rule: where its packets go and, for a metered rule, its marker, in one aligned cache
/// line of one flat array: the packet path reaches a rule from the index in one step and
/// prefetches one line, where an `Arc` per rule (and a `Vec` for its values) cost a
/// dependent miss each, and 10 000 rules of two lines each overflowed the second-level
/// cache.
#[repr(C, align(64))]
struct Rule {
    /// Guards the marker when several workers run the module: 0 free, 1 held. A spin lock
    /// taken with one locked instruction and released with a plain store (a `Mutex` takes
    /// one locked instruction for each, and each drains the store buffer in the middle of a
    /// batch's overlapped misses); held for a few dozen instructions, contended only when
    /// two workers meter one rule at once.
    lock: AtomicU32,
    deduct_len: i32,
    gate: u16,
    kind: MeterKind,
    meter: UnsafeCell<SmallTrTcm>,
}

const _: () = assert!(std::mem::size_of::<Rule>() == 64);

// SAFETY: `meter`, the only state mutated through a shared reference, is read and written
// only by a worker holding `lock`, or by the only worker that runs the module
// (`Rule::locked_if`); everything else changes only through `&mut` (commands hold the
// table's write lock).
unsafe impl Sync for Rule {}

impl Rule {
    /// A rule of `gate` with its marker, if any: the rule, and the marker to keep in
    /// `Table::big` when it does not fit the rule's line.
    fn new(gate: u16, deduct_len: i64, meter: Option<TrTcm>) -> (Rule, Option<Box<BigMeter>>) {
        let small = meter.as_ref().and_then(SmallTrTcm::new);
        let d32 = i32::try_from(deduct_len).ok();
        let (kind, big) = match (&meter, small, d32) {
            (None, _, _) => (MeterKind::None, None),
            (Some(_), Some(_), Some(_)) => (MeterKind::Small, None),
            (Some(m), _, _) => (
                MeterKind::Big,
                Some(Box::new(BigMeter {
                    deduct_len,
                    meter: UnsafeCell::new(m.clone()),
                })),
            ),
        };
        let idle = SmallTrTcm {
            tc: 0,
            tp: 0,
            last: 0,
            cir: 0,
            pir: 0,
            cbs: 0,
            pbs: 0,
        };
        let rule = Rule {
            lock: AtomicU32::new(0),
            deduct_len: d32.unwrap_or(0),
            gate,
            kind,
            meter: UnsafeCell::new(small.filter(|_| kind == MeterKind::Small).unwrap_or(idle)),
        };
        (rule, big)
    }

    /// Runs `f` holding the rule's lock when `shared`, else without it.
    ///
    /// Only packets touch a marker while workers run (commands replace rules under the
    /// table's write lock, which `process_batch` excludes by holding the read lock), so the
    /// lock only keeps workers apart. When `Context::shared` says no other worker runs the
    /// module, none can until the workers are next paused, and a pause is a task boundary:
    /// the locked instruction (which also waits for every store before it) is skipped. A
    /// rule's lock is never held across batches, so a module that becomes shared starts
    /// with every lock free.
    #[inline(always)]
    fn locked_if<R>(&self, shared: bool, f: impl FnOnce() -> R) -> R {
        if shared {
            self.locked(f)
        } else {
            f()
        }
    }

    /// Runs `f` holding the rule's lock.
    #[inline(always)]
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Releases the lock when dropped, also if `f` panics (a poisoned `Mutex` let the
        /// other workers go on; a spin lock left held would stop them).
        struct Held<'a>(&'a AtomicU32);
        impl Drop for Held<'_> {
            #[inline(always)]
            fn drop(&mut self) {
                self.0.store(0, Ordering::Release);
            }
        }
        while self
            .lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        let _held = Held(&self.lock);
        f()
    }
}

/// A rule key: the masked key words.
#[derive(Clone, Copy)]
struct Key([u64; 8]);

struct Table {
    /// Key words to a slot of `rules` (and of `vals`).
    index: FlatTable,
    rules: Vec<Rule>,
    /// Each slot's value bytes, `vsize` per slot (a flat array: the one-byte QFI of 10 000
    /// rules is 10 KB that stays cached), then VALUES_PAD bytes (see `ValuePlan`).
    vals: Vec<u8>,
    vsize: usize,
    /// The markers of `MeterKind::Big` rules, by slot.
    big: Vec<Option<Box<BigMeter>>>,
    free: Vec<u32>,
    default_gate: u16,
}

impl Table {
    fn new(words: usize, vsize: usize) -> Table {
        Table {
            index: FlatTable::new(words),
            rules: Vec::new(),
            vals: vec![0; VALUES_PAD],
            vsize,
            big: Vec::new(),
            free: Vec::new(),
            default_gate: DROP_GATE,
        }
    }

    /// Adds or replaces the rule of `key` (its first `words` words are the index's key).
    fn set(
        &mut self,
        key: &Key,
        (rule, big): (Rule, Option<Box<BigMeter>>),
        vals: &[u8],
        words: usize,
    ) {
        let w = &key.0[..words];
        let i = match self.index.get(w) {
            Some(i) => i as usize,
            None => {
                let i = match self.free.pop() {
                    Some(i) => i as usize,
                    None => {
                        self.rules.push(Rule::new(DROP_GATE, 0, None).0);
                        self.big.push(None);
                        self.vals.resize(self.vals.len() + self.vsize, 0);
                        self.rules.len() - 1
                    }
                };
                self.index.insert(w, i as u32);
                i
            }
        };
        self.rules[i] = rule;
        self.big[i] = big;
        self.vals[i * self.vsize..(i + 1) * self.vsize].copy_from_slice(vals);
    }

    fn remove(&mut self, key: &Key, words: usize) {
        if let Some(i) = self.index.remove(&key.0[..words]) {
            self.big[i as usize] = None;
            self.free.push(i);
        }
    }

    fn clear(&mut self) {
        self.index.clear();
        self.rules.clear();
        self.big.clear();
        self.vals = vec![0; VALUES_PAD];
        self.free.clear();
    }
}

/// One worker's plans gathering keys and writing values (see [`PlanCache`]).
struct WorkerPlan(UnsafeCell<(PlanCache, ValueCache)>);

// SAFETY: worker `wid` alone touches slot `wid` (`Qos::run`), and a worker runs one module
// call at a time (the batches a module sends on are run after it returns).
unsafe impl Sync for WorkerPlan {}

/// No rule (a slot number no table reaches).
const NO_RULE: u32 = u32::MAX;

/// Looks up each packet's key (the `fields`, exact match); a rule of gate 0 meters the
/// packet (frame length minus `deduct_len`) and sends it out of gate 1, 2 or 3 by colour,
/// any other rule out of its gate; a hit writes the rule's `values`. A miss goes to the
/// default gate (initially DROP_GATE: dropped). One instance may be run by every worker and
/// its commands run while they do: rules sit behind a read-write lock, each meter behind its
/// own lock, taken only while more than one worker runs the module.
pub struct Qos {
    fields: Vec<MatchField>,
    /// Key words the fields fill (the rest are zero).
    words: usize,
    keys: KeyBuilder,
    values: ValueFields,
    entries: u64,
    /// The tick rate of every marker (the TSC's).
    hz: u64,
    table: RwLock<Table>,
    /// Each worker's key-gathering plan, by worker id (empty when keys are not gathered).
    plans: Box<[WorkerPlan]>,
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
            Some(TrTcm::new(cir, pir, cbs, pbs, self.hz, now)?)
        } else {
            None
        };
        let rule = Rule::new(gate as u16, deduct_len.unwrap_or(DEFAULT_DEDUCT), meter);
        let mut t = self.write();
        let w = &key.0[..self.words];
        if self.entries != 0 && t.index.len() as u64 >= self.entries && t.index.get(w).is_none() {
            return Err(Error::new(
                libc::ENOSPC,
                format!("Qos: table full ({} entries)", self.entries),
            ));
        }
        t.set(&key, rule, &values, self.words);
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

    /// The gate of a packet of `p` whose rule is in `slot` (NO_RULE: none): the default
    /// gate, the rule's gate or its marker's colour; DROP_GATE drops it. Writes the rule's
    /// values when `voffs` are given (else a value plan writes them).
    #[inline(always)]
    fn gate_of(
        &self,
        t: &Table,
        p: &mut Packet,
        slot: u32,
        voffs: Option<&[AttrOffset]>,
        now: u64,
        shared: bool,
    ) -> u16 {
        if slot == NO_RULE {
            return t.default_gate;
        }
        let s = slot as usize;
        let rule = &t.rules[s];
        let gate = match rule.kind {
            MeterKind::None => rule.gate,
            MeterKind::Small => {
                let len = (p.len() as i64 - rule.deduct_len as i64).max(0) as u64;
                // SAFETY: only this thread touches the marker: the lock is held, or no other
                // worker runs the module (see `Rule::locked_if`).
                let c = rule.locked_if(shared, || unsafe {
                    (*rule.meter.get()).color(now, len, self.hz)
                });
                color_gate(c)
            }
            MeterKind::Big => {
                let b = t.big[s].as_deref().expect("a big marker for a Big rule");
                let len = (p.len() as i64).saturating_sub(b.deduct_len).max(0) as u64;
                // SAFETY: as above; the rule's lock guards its big marker too.
                color_gate(rule.locked_if(shared, || unsafe { (*b.meter.get()).color(now, len) }))
            }
        };
        if let Some(voffs) = voffs.filter(|_| t.vsize != 0) {
            self.values
                .apply(p, voffs, &t.vals[s * t.vsize..(s + 1) * t.vsize]);
        }
        gate
    }

    /// The batch path for keys of `W` words (`W` at least the table's width): three passes
    /// so that the misses of a batch overlap: keys and their index probes prefetched, then
    /// the lookups with each rule's line (and values) prefetched, then the meters.
    #[inline(always)]
    fn run<const W: usize>(&self, ctx: &mut Context, batch: &mut PacketBatch, t: &Table) {
        let mut offs = [AttrOffset::NoRead; MAX_FIELDS];
        for (o, f) in offs.iter_mut().zip(&self.fields) {
            if f.offset.is_none() {
                *o = ctx.attr(f.attr_id);
            }
        }
        let voffs = self.values.offsets(ctx);
        let now = ctx.refresh_now();
        // Read once: it changes only while the workers are paused (`Context::shared`).
        let shared = ctx.shared();
        let w = self.words;
        let n = batch.len();
        let mut keys = [[0u64; W]; MAX_BURST];
        let mut hashes = [0u64; MAX_BURST];
        let mut short = [false; MAX_BURST];
        // The control thread (no worker id) makes plans of its own.
        let mut own = Default::default();
        let (kcache, vcache) = match self.plans.get(ctx.wid) {
            // SAFETY: this worker's slot (see `WorkerPlan`).
            Some(slot) => unsafe { &mut *slot.0.get() },
            None => &mut own,
        };
        // A packet whose key is its predecessor's (`same`) takes its rule without a lookup:
        // a slice meter's few keys, or a flow's packets in a row, hash and probe once a run.
        let mut same = [false; MAX_BURST];
        if let Some(plan) = kcache.get(&self.keys, &offs[..self.fields.len()]) {
            plan.build_all::<W>(batch.pkts(), &mut keys);
            for i in 0..n {
                if i > 0 && keys[i] == keys[i - 1] {
                    same[i] = true;
                    continue;
                }
                hashes[i] = hash_words(&keys[i][..w]);
                t.index.prefetch(hashes[i]);
            }
        } else {
            for (i, p) in batch.pkts().iter().enumerate() {
                if self.keys.build_into::<W>(&offs, p, &mut keys[i]) {
                    if i > 0 && !short[i - 1] && keys[i] == keys[i - 1] {
                        same[i] = true;
                        continue;
                    }
                    hashes[i] = hash_words(&keys[i][..w]);
                    t.index.prefetch(hashes[i]);
                } else {
                    short[i] = true;
                }
            }
        }
        let mut slots = [NO_RULE; MAX_BURST];
        for i in 0..n {
            if short[i] {
                continue;
            }
            if same[i] {
                slots[i] = slots[i - 1];
                continue;
            }
            let s = if W == w {
                t.index.get_n::<W>(&keys[i], hashes[i])
            } else {
                t.index.get_hashed(&keys[i][..w], hashes[i])
            };
            if let Some(s) = s {
                slots[i] = s;
                prefetch(t.rules.as_ptr().wrapping_add(s as usize));
                if t.vsize != 0 {
                    prefetch(t.vals.as_ptr().wrapping_add(s as usize * t.vsize));
                }
            }
        }
        let vplan = vcache.get(&self.values, &voffs[..self.values.fields.len()]);
        if let Some(vp) = vplan.filter(|_| t.vsize != 0) {
            // Every hit writes its rule's values (also when it meters red or drops).
            let mut rows: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
            let read = self.values.read_len();
            for i in 0..n {
                if slots[i] != NO_RULE {
                    let at = slots[i] as usize * t.vsize;
                    rows[i] = &t.vals[at..at + read];
                }
            }
            vp.apply_all(batch.pkts_mut(), &rows[..n]);
        }
        let voffs = vplan.is_none().then_some(&voffs[..]);
        // Gates kept as they come (TOO_SHORT for packets too short for a field), with
        // whether they all agree: the usual case, where the batch is forwarded whole without
        // a second pass over them.
        let mut gates = [0u16; MAX_BURST];
        let (mut or, mut and) = (0u16, u16::MAX);
        let pkts = batch.pkts_mut();
        let mut i = 0;
        while i < n {
            // A run of packets metered by one rule, on the only worker running the module:
            // the marker is read once into registers and written back once (packet by
            // packet, each colour waited for the previous packet's stores to the marker).
            let s = slots[i];
            if !shared && s != NO_RULE && t.rules[s as usize].kind == MeterKind::Small {
                let end = (i + 1..n).find(|&j| slots[j] != s).unwrap_or(n);
                if end - i > 1 {
                    let rule = &t.rules[s as usize];
                    // SAFETY: no other worker runs the module (`shared` is false), so only
                    // this thread touches the marker (see `Rule::locked_if`).
                    let mut m = unsafe { *rule.meter.get() };
                    for (k, p) in pkts.iter_mut().enumerate().take(end).skip(i) {
                        let len = (p.len() as i64 - rule.deduct_len as i64).max(0) as u64;
                        let g = color_gate(m.color(now, len, self.hz));
                        if let Some(voffs) = voffs.filter(|_| t.vsize != 0) {
                            self.values.apply(
                                p,
                                voffs,
                                &t.vals[s as usize * t.vsize..(s as usize + 1) * t.vsize],
                            );
                        }
                        gates[k] = g;
                        or |= g;
                        and &= g;
                    }
                    // SAFETY: as above.
                    unsafe { *rule.meter.get() = m };
                    i = end;
                    continue;
                }
            }
            let g = if short[i] {
                TOO_SHORT
            } else {
                self.gate_of(t, &mut pkts[i], s, voffs, now, shared)
            };
            gates[i] = g;
            or |= g;
            and &= g;
            i += 1;
        }
        if or == and && or < DROP_GATE {
            return ctx.forward(or, batch);
        }
        send_each(ctx, batch, |i| match gates[i] {
            g if g < DROP_GATE => Verdict::Gate(g),
            TOO_SHORT => Verdict::Drop(QosDrop::TooShort),
            _ if slots[i] == NO_RULE => Verdict::Drop(QosDrop::NoMatch),
            _ => Verdict::Drop(QosDrop::Rule),
        });
    }
}

/// A packet's gate when it is too short for a field (no real gate: it is dropped).
const TOO_SHORT: u16 = u16::MAX;
const _: () = assert!(TOO_SHORT > DROP_GATE);

/// The gate of a colour.
#[inline(always)]
fn color_gate(c: Color) -> u16 {
    match c {
        Color::Green => GREEN_GATE,
        Color::Yellow => YELLOW_GATE,
        Color::Red => RED_GATE,
    }
}

impl SharedModule for Qos {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let t = self.read();
        match self.words {
            1 => self.run::<1>(ctx, batch, &t),
            2 => self.run::<2>(ctx, batch, &t),
            3 => self.run::<3>(ctx, batch, &t),
            4 => self.run::<4>(ctx, batch, &t),
            _ => self.run::<8>(ctx, batch, &t),
        }
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn desc(&self) -> String {
        format!(
            "{} fields, {} rules",
            self.fields.len(),
            self.read().index.len()
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
    let vsize = values.size;
    let keys = KeyBuilder::new(&fields, &[]);
    let workers = if keys.gathers() || values.scatters() {
        bessemer_core::engine::MAX_WORKERS
    } else {
        0
    };
    Ok(Instance::Shared(Box::new(Qos {
        hz: bessemer_core::tsc::hz(),
        plans: (0..workers)
            .map(|_| WorkerPlan(UnsafeCell::new(Default::default())))
            .collect(),
        keys,
        fields,
        words,
        values,
        entries,
        table: RwLock::new(Table::new(words, vsize)),
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
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Qos, Qos::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "QosCommandDeleteArg",
            help: "deletes the rule of a key",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Qos, Qos::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "deletes every rule",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Qos, Qos::cmd_clear),
        },
        CommandSpec {
            name: "set_default_gate",
            arg_type: "QosCommandSetDefaultGateArg",
            help: "sets the gate of packets no rule matches",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Qos, Qos::cmd_set_default_gate),
        },
    ],
    drop_reasons: QosDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The small form colours every packet as the full marker does, and keeps the same
        /// state, over parameters up to its limits and long idle times.
        #[test]
        fn the_small_marker_agrees_with_the_full_one(
            cir in 1u64..1 << 40,
            extra in 0u64..1 << 40,
            cbs in 1u64..1 << 32,
            pbs in 1u64..1 << 32,
            hz in 1u64..1 << 32,
            pkts in proptest::collection::vec(
                (0u64..1 << 36, prop_oneof![0u64..70_000, any::<u64>()]), 1..40),
        ) {
            let mut full = TrTcm::new(cir, cir + extra, cbs, pbs, hz, 1000).unwrap();
            let mut small = SmallTrTcm::new(&full).unwrap();
            let mut now = 1000u64;
            for (dt, len) in pkts {
                // Time also runs back now and then (an earlier `now` adds nothing).
                now = if dt % 7 == 0 { now.saturating_sub(dt) } else { now + dt };
                prop_assert_eq!(small.color(now, len, hz), full.color(now, len));
                prop_assert_eq!(Some(small), SmallTrTcm::new(&full));
            }
        }
    }

    #[test]
    fn large_markers_stay_full_size() {
        let hz = 1u64 << 20;
        assert!(SmallTrTcm::new(&TrTcm::new(1, 1, 1 << 32, 1, hz, 0).unwrap()).is_none());
        assert!(SmallTrTcm::new(&TrTcm::new(1, 1, 1, 1 << 32, hz, 0).unwrap()).is_none());
        assert!(SmallTrTcm::new(&TrTcm::new(1, 1, 1, 1, 1 << 32, 0).unwrap()).is_none());
        let m = TrTcm::new(1, 1, 1, 1, hz, 0).unwrap();
        assert!(SmallTrTcm::new(&m).is_some());
        assert_eq!(Rule::new(0, 14, Some(m.clone())).0.kind, MeterKind::Small);
        assert_eq!(Rule::new(0, 1 << 40, Some(m)).0.kind, MeterKind::Big);
        assert_eq!(Rule::new(5, 14, None).0.kind, MeterKind::None);
    }
}

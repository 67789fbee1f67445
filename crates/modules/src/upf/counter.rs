//! Counter (omec-project fork): per-session packet and byte counts, indexed by a metadata
//! attribute the PDR lookup writes.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, AccessMode, Args, CommandSpec, Context, Error, Instance, ModuleClass, PacketBatch,
    Result, SharedModule, Value,
};

use crate::util::{add_attrs, IDLE};

/// Most counters one module may hold (16 bytes each).
const MAX_TOTAL: u64 = 1 << 24;

/// Counts packets and bytes per counter id (the `name_id` attribute, a native 32-bit
/// integer as the PDR lookup writes it); ids at or above `total` are not counted. Every
/// packet goes on out of gate 0. Several workers may run one instance: the counts are
/// atomics, added to with a locked instruction only while more than one worker runs it.
pub struct Counter {
    /// Packets and bytes counted per id since the module was made. Only packets write them,
    /// so that a module run by one worker has one writer and adds without a locked
    /// instruction (`process_batch`).
    ctrs: Vec<[AtomicU64; 2]>,
    /// What each counter held when it was last zeroed (`remove`, `removeAll`): a counter
    /// reads `ctrs - base`. Zeroing `ctrs` itself from a command, which runs beside the
    /// workers, could be undone by a worker's plain add (it would store its old value plus
    /// one). Zero-filled, so its pages are not touched until used.
    base: Mutex<Vec<[u64; 2]>>,
    /// Counters added and not removed (the fork's `curr_count`, what `desc` shows).
    sessions: AtomicU64,
}

fn ctr_id(arg: &Value, msg: &str) -> Result<u32> {
    let mut a = Args::new(arg, msg)?;
    let id = a.uint("ctr_id", u32::MAX as u64)?.unwrap_or(0) as u32;
    a.finish()?;
    Ok(id)
}

impl Counter {
    fn base(&self) -> std::sync::MutexGuard<'_, Vec<[u64; 2]>> {
        self.base.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Zeroes counter `i` (see `base`).
    fn zero(&self, base: &mut [[u64; 2]], i: usize) {
        if let (Some(c), Some(b)) = (self.ctrs.get(i), base.get_mut(i)) {
            *b = [c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)];
        }
    }

    /// The `add` command: a session starts (its counter is not reset: `remove` did that).
    fn cmd_add(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        ctr_id(arg, "CounterAddArg")?;
        self.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(Value::Null)
    }

    /// The `remove` command: zeroes the counter and ends its session.
    fn cmd_remove(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let id = ctr_id(arg, "CounterRemoveArg")? as usize;
        self.zero(&mut self.base(), id);
        // The fork decrements below zero; a count of sessions stays at zero here.
        let _ = self
            .sessions
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        Ok(Value::Null)
    }

    /// The `removeAll` command.
    fn cmd_remove_all(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let mut base = self.base();
        for i in 0..self.ctrs.len() {
            self.zero(&mut base, i);
        }
        self.sessions.store(0, Ordering::Relaxed);
        Ok(Value::Null)
    }
}

impl SharedModule for Counter {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let off = ctx.attr(0);
        if ctx.shared() {
            for p in batch.pkts() {
                let id = u32::from_le_bytes(p.get_attr(off)) as usize;
                if let Some(c) = self.ctrs.get(id) {
                    c[0].fetch_add(1, Ordering::Relaxed);
                    c[1].fetch_add(p.len() as u64, Ordering::Relaxed);
                }
            }
        } else {
            // This worker is the counters' only writer until the workers are next paused
            // (`Context::shared`; commands never write `ctrs`), so a load and a store add
            // exactly, without the locked instruction (which also waits for the stores before
            // it). The pause that makes the module shared orders these stores before the
            // other workers' first adds.
            for p in batch.pkts() {
                let id = u32::from_le_bytes(p.get_attr(off)) as usize;
                if let Some(c) = self.ctrs.get(id) {
                    c[0].store(c[0].load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    let bytes = c[1].load(Ordering::Relaxed) + p.len() as u64;
                    c[1].store(bytes, Ordering::Relaxed);
                }
            }
        }
        ctx.forward(0, batch);
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn desc(&self) -> String {
        format!("{} sessions", self.sessions.load(Ordering::Relaxed))
    }

    fn info(&self) -> Value {
        let base = self.base();
        let counters = self
            .ctrs
            .iter()
            .zip(base.iter())
            .enumerate()
            .map(|(i, (c, b))| {
                let pkts = c[0].load(Ordering::Relaxed).wrapping_sub(b[0]);
                let bytes = c[1].load(Ordering::Relaxed).wrapping_sub(b[1]);
                (i, pkts, bytes)
            })
            .filter(|&(_, pkts, _)| pkts != 0)
            .map(|(i, pkts, bytes)| {
                Value::map()
                    .with("ctr_id", i)
                    .with("pkts", pkts)
                    .with("bytes", bytes)
            })
            .collect::<Vec<_>>();
        Value::map()
            .with("sessions", self.sessions.load(Ordering::Relaxed))
            .with("counters", counters)
    }
}

/// The Counter class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Counter",
    name_template: "counter",
    help: "Counts the number of packets/bytes in the UP4 pipeline",
    arg_type: "CounterArg",
    arg_doc: &[
        "name_id: string — the attribute (4 bytes) holding the counter id (required)",
        "check_exist: bool — accepted; counters are an array, as the fork's default build",
        "total: uint32 — number of counters, ids 0..total (required, at most 2^24)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "CounterAddArg",
            help: "starts a session's counter",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Counter, Counter::cmd_add),
        },
        CommandSpec {
            name: "removeAll",
            arg_type: "EmptyArg",
            help: "zeroes every counter",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Counter, Counter::cmd_remove_all),
        },
        CommandSpec {
            name: "remove",
            arg_type: "CounterRemoveArg",
            help: "zeroes a session's counter",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Counter, Counter::cmd_remove),
        },
    ],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg: &Value| {
        let mut a = Args::new(arg, "CounterArg")?;
        let name = a.str("name_id")?.unwrap_or("").to_string();
        let _check_exist = a.bool("check_exist")?;
        let total = a.uint("total", u32::MAX as u64)?.unwrap_or(0);
        a.finish()?;
        if name.is_empty() {
            return Err(Error::invalid("Invalid counter idx name"));
        }
        if total == 0 {
            return Err(Error::invalid("Invalid total number"));
        }
        if total > MAX_TOTAL {
            return Err(Error::invalid(format!(
                "CounterArg.total: at most {MAX_TOTAL} counters, got {total}"
            )));
        }
        add_attrs(init, &[(&name, 4, AccessMode::Read)])?;
        Ok(Instance::Shared(Box::new(Counter {
            ctrs: (0..total).map(|_| Default::default()).collect(),
            base: Mutex::new(vec![[0; 2]; total as usize]),
            sessions: AtomicU64::new(0),
        })))
    },
};

//! WorkerSplit: sends each batch out of the gate mapped to the worker running it.
use crate::util::IDLE;
use std::sync::atomic::{AtomicI32, Ordering};

use bessemer_core::engine::MAX_WORKERS;
use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, ModuleClass, PacketBatch, Result,
    SharedModule, Value,
};

bessemer_core::drop_reasons! {
    /// Why WorkerSplit drops packets.
    pub enum WorkerSplitDrop {
        Unmapped = "unmapped_worker",
    }
}

/// Per-worker output gates; -1 means the worker's packets are dropped. Workers run it
/// concurrently, so the table is atomics (written only by `reset`, with workers paused).
pub struct WorkerSplit {
    gates: [AtomicI32; MAX_WORKERS],
}

impl WorkerSplit {
    fn reset(&self, arg: &Value, msg: &str) -> Result<()> {
        let mut a = Args::new(arg, msg)?;
        let map = a.any("worker_gates");
        a.finish()?;
        let entries: &[(String, Value)] = match map {
            None => &[],
            Some(Value::Map(m)) => m,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "{msg}.worker_gates: expected a map of worker id to gate, got {}",
                    other.type_name()
                )))
            }
        };
        let mut table = [-1i32; MAX_WORKERS];
        if entries.is_empty() {
            // BESS's default: worker i uses gate i.
            for (i, g) in table.iter_mut().enumerate() {
                *g = i as i32;
            }
        }
        for (k, v) in entries {
            let wid = k
                .parse::<usize>()
                .ok()
                .filter(|&w| w < MAX_WORKERS)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{msg}.worker_gates: key '{k}' is not a worker id (0..{MAX_WORKERS})"
                    ))
                })?;
            let gate = v
                .as_i64()
                .filter(|g| (0..MAX_GATES as i64).contains(g))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{msg}.worker_gates[{k}]: {v:?} is not an output gate (0..{MAX_GATES})"
                    ))
                })?;
            table[wid] = gate as i32;
        }
        for (slot, g) in self.gates.iter().zip(table) {
            slot.store(g, Ordering::Relaxed);
        }
        Ok(())
    }

    fn gate_of(&self, wid: usize) -> Option<u16> {
        let g = self.gates.get(wid)?.load(Ordering::Relaxed);
        u16::try_from(g).ok()
    }
}

impl WorkerSplit {
    /// The `reset` command.
    fn cmd_reset(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.reset(arg, "WorkerSplitArg")?;
        Ok(Value::Null)
    }
}

impl SharedModule for WorkerSplit {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        match self.gate_of(ctx.wid) {
            Some(g) => ctx.forward(g, batch),
            None => ctx.drop_batch(batch, WorkerSplitDrop::Unmapped),
        }
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn info(&self) -> Value {
        Value::Map(
            (0..MAX_WORKERS)
                .filter_map(|w| {
                    self.gate_of(w)
                        .map(|g| (w.to_string(), Value::Int(g as i64)))
                })
                .collect(),
        )
    }
}

/// The WorkerSplit class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "WorkerSplit",
    name_template: "ws",
    help: "send packets to output gate X, the id of current worker",
    arg_type: "WorkerSplitArg",
    arg_doc: &[
        "worker_gates: map<uint32, uint32> — worker id → output gate; workers not listed drop",
        "  (empty: worker i uses gate i)",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[CommandSpec {
        name: "reset",
        arg_type: "WorkerSplitArg",
        help: "replaces the worker → gate map",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Shared WorkerSplit, WorkerSplit::cmd_reset),
    }],
    drop_reasons: WorkerSplitDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let ws = WorkerSplit {
            gates: std::array::from_fn(|_| AtomicI32::new(-1)),
        };
        ws.reset(arg, "WorkerSplitArg")?;
        Ok(Instance::Shared(Box::new(ws)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn pkts() -> Vec<Vec<u8>> {
        vec![vec![1u8; 60], vec![2u8; 14], vec![]]
    }

    #[test]
    fn default_map_sends_worker_i_to_gate_i() {
        let mut h = Harness::new();
        h.add(&CLASS, "ws", &Value::Null).unwrap();
        let (g0, g3) = (h.capture("ws", 0), h.capture("ws", 3));
        h.inject("ws", 0, &pkts());
        assert_eq!(g0.take_data(), pkts());
        h.ctx.wid = 3;
        h.inject("ws", 0, &pkts());
        assert_eq!(g3.take_data(), pkts());
        assert!(g0.is_empty());
    }

    #[test]
    fn explicit_map_and_unmapped_workers_drop() {
        let mut h = Harness::new();
        let map = Value::Map(vec![
            ("0".into(), Value::Int(2)),
            ("5".into(), Value::Int(2)),
        ]);
        h.add(&CLASS, "ws", &Value::map().with("worker_gates", map))
            .unwrap();
        let g2 = h.capture("ws", 2);
        h.inject("ws", 0, &pkts());
        h.ctx.wid = 5;
        h.inject("ws", 0, &pkts());
        assert_eq!(g2.take_data().len(), 6);
        h.ctx.wid = 1;
        h.inject("ws", 0, &pkts());
        assert_eq!(h.drops("ws", "unmapped_worker"), 3);
        // reset with an empty map goes back to the identity map.
        h.command("ws", "reset", &Value::map()).unwrap();
        let g1 = h.capture("ws", 1);
        h.inject("ws", 0, &pkts());
        assert_eq!(g1.take_data(), pkts());
    }

    #[test]
    fn bad_maps_name_the_field() {
        let mut h = Harness::new();
        let bad_key = Value::Map(vec![("64".into(), Value::Int(0))]);
        let e = h
            .add(&CLASS, "a", &Value::map().with("worker_gates", bad_key))
            .unwrap_err();
        assert!(
            e.msg.contains("worker_gates") && e.msg.contains("'64'"),
            "{}",
            e.msg
        );
        let bad_gate = Value::Map(vec![("1".into(), Value::Int(8192))]);
        let e = h
            .add(
                &CLASS,
                "b",
                &Value::map().with("worker_gates", bad_gate.clone()),
            )
            .unwrap_err();
        assert!(e.msg.contains("worker_gates[1]"), "{}", e.msg);
        h.add(&CLASS, "c", &Value::Null).unwrap();
        let e = h
            .command("c", "reset", &Value::map().with("worker_gates", bad_gate))
            .unwrap_err();
        assert!(e.msg.contains("worker_gates[1]"), "{}", e.msg);
        // A failed reset leaves the old map: worker 0 still uses gate 0.
        let g0 = h.capture("c", 0);
        h.inject("c", 0, &pkts());
        assert_eq!(g0.take_data(), pkts());
    }
}

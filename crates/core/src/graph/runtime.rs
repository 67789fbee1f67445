//! Which workers run each module, and the modules' runtime counters (`show runtime`).

use std::sync::Arc;

use super::{Counter, Pipeline};
use crate::sched::TaskId;

/// One worker's runtime counters of one module (written by that worker only).
///
/// Calls and packets of input-gate batches come from the gate counters (exact, free);
/// these slots add what those cannot say: task runs, the per-worker split of a module
/// several workers run, and the sampled TSC cycles (see `exec.rs`, "runtime").
#[derive(Default)]
pub(crate) struct RtSlot {
    pub(crate) task_calls: Counter,
    pub(crate) task_packets: Counter,
    pub(crate) multi_calls: Counter,
    pub(crate) multi_packets: Counter,
    pub(crate) s_calls: Counter,
    pub(crate) s_packets: Counter,
    pub(crate) s_cycles: Counter,
}

/// One worker's share of a module's runtime (see [`ModuleRuntime`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerRuntime {
    /// Worker id.
    pub wid: usize,
    /// Calls of the module (task runs and batches processed), exact.
    pub calls: u64,
    /// Packets: those its task runs reported plus those it was given, exact.
    pub packets: u64,
    /// Calls whose TSC cycles were measured.
    pub sampled_calls: u64,
    /// Packets of those calls.
    pub sampled_packets: u64,
    /// TSC cycles of those calls.
    pub sampled_cycles: u64,
}

impl WorkerRuntime {
    /// Subtracts an earlier reading (a `clear runtime` baseline), saturating at 0.
    pub fn since(&self, base: &WorkerRuntime) -> WorkerRuntime {
        WorkerRuntime {
            wid: self.wid,
            calls: self.calls.saturating_sub(base.calls),
            packets: self.packets.saturating_sub(base.packets),
            sampled_calls: self.sampled_calls.saturating_sub(base.sampled_calls),
            sampled_packets: self.sampled_packets.saturating_sub(base.sampled_packets),
            sampled_cycles: self.sampled_cycles.saturating_sub(base.sampled_cycles),
        }
    }

    /// Estimated cycles per call (sampled), or None with no sample.
    pub fn cycles_per_call(&self) -> Option<f64> {
        (self.sampled_calls > 0).then(|| self.sampled_cycles as f64 / self.sampled_calls as f64)
    }

    /// Estimated cycles per packet (sampled), or None with no sampled packet.
    pub fn cycles_per_packet(&self) -> Option<f64> {
        (self.sampled_packets > 0).then(|| self.sampled_cycles as f64 / self.sampled_packets as f64)
    }

    /// Estimated cycles of all calls: cycles per call times calls.
    pub fn cycles(&self) -> u64 {
        self.cycles_per_call()
            .map_or(0, |c| (c * self.calls as f64).round() as u64)
    }
}

/// A module's runtime (`show runtime`): per worker that called it, exact calls and packets
/// and the sampled cycles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleRuntime {
    /// Instance name.
    pub name: String,
    /// Class name.
    pub mclass: &'static str,
    /// One row per worker with calls or samples, by worker id.
    pub workers: Vec<WorkerRuntime>,
}

impl Pipeline {
    /// Records which workers run each module, from where each task is placed (`task_worker`;
    /// None for a task on no worker). Call with every worker that runs the graph paused.
    pub fn set_task_workers(&mut self, task_worker: &dyn Fn(TaskId) -> Option<usize>) {
        self.workers_dirty = self.live_ids().collect();
        self.refresh_workers(task_worker);
    }

    /// Says that task `t` moved (placed on a worker, or taken off): the next
    /// [`Pipeline::refresh_workers`] recomputes its component.
    pub fn task_moved(&mut self, t: TaskId) {
        if let Some(e) = self.task(t) {
            self.workers_dirty.push(e.module);
        }
    }

    /// As [`Pipeline::set_task_workers`], for the components changed since the last call
    /// (by graph changes and [`Pipeline::task_moved`]): which workers' tasks reach each of
    /// their modules. Call with every worker that runs the graph paused.
    pub fn refresh_workers(&mut self, task_worker: &dyn Fn(TaskId) -> Option<usize>) {
        if self.workers_dirty.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.workers_dirty);
        let mut sc = std::mem::take(&mut self.scratch);
        let mut walk = Vec::new();
        for ids in self.components_of(&dirty, &mut sc) {
            for (k, &i) in ids.iter().enumerate() {
                sc.local[i as usize] = k as u32;
            }
            let mut masks = vec![0u64; ids.len()];
            for &i in &ids {
                for &t in &self.node(i).tasks {
                    let Some(w) = task_worker(t) else { continue };
                    self.reach_into(i, true, &mut sc, &mut walk);
                    for &m in &walk {
                        masks[sc.local[m as usize] as usize] |= 1u64 << (w % 64);
                    }
                }
            }
            for (&i, mask) in ids.iter().zip(masks) {
                let n = self.nodes[i as usize].as_mut().unwrap();
                n.workers = mask;
                n.multi = mask.count_ones() > 1;
                let slots = 64 - mask.leading_zeros() as usize;
                if n.rt.len() < slots {
                    n.rt.resize_with(slots, RtSlot::default);
                }
            }
            self.refresh_gates_of(&ids);
            self.recomputed += ids.len() as u64;
        }
        self.scratch = sc;
    }

    /// Modules run by more workers than their class allows (BESS's
    /// `CheckModuleConstraints` against `ModuleClass::max_workers`), each with the workers
    /// that run it, as of the last [`Pipeline::set_task_workers`].
    pub fn worker_violations(&self) -> Vec<(String, Vec<usize>)> {
        let mut out: Vec<(String, Vec<usize>)> = self
            .nodes
            .iter()
            .flatten()
            .filter(|n| n.workers.count_ones() > n.class.max_workers)
            .map(|n| {
                let ws = (0..64).filter(|w| n.workers & (1u64 << w) != 0).collect();
                (n.name.clone(), ws)
            })
            .collect();
        out.sort();
        out
    }

    /// Runtime sampling is on (see [`crate::Engine::set_runtime`]).
    pub fn runtime_enabled(&self) -> bool {
        self.runtime
    }

    /// Turns runtime sampling on or off; only with the workers paused (the engine's
    /// [`crate::Engine::set_runtime`]) or before any runs.
    pub fn set_runtime(&mut self, on: bool) {
        if on && !self.runtime {
            self.rt_since = Some(std::time::Instant::now());
        }
        self.runtime = on;
        self.slow = self.runtime || self.trace.is_some();
    }

    /// Arms (Some) or removes (None) the packet trace; only with the workers paused (the
    /// engine's [`crate::Engine::trace_add`]) or before any runs.
    pub fn set_trace(&mut self, t: Option<Arc<crate::trace::Tracer>>) {
        self.trace = t;
        self.slow = self.runtime || self.trace.is_some();
    }

    /// The packet trace armed, if any.
    pub fn trace(&self) -> Option<&Arc<crate::trace::Tracer>> {
        self.trace.as_ref()
    }

    /// Seconds since runtime sampling was turned on or last cleared (0 if never on).
    pub fn runtime_secs(&self) -> f64 {
        self.rt_since.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    /// Starts every module's runtime counts afresh (`clear runtime`): later readings of
    /// [`Pipeline::runtime`] with `since_clear` count from now. The counters themselves go
    /// on (the gate counters other views read, Prometheus's series).
    pub fn clear_runtime(&mut self) {
        let now = self.runtime(false);
        for m in now {
            if let Ok(id) = self.id_of(&m.name) {
                self.nodes[id as usize].as_mut().unwrap().rt_base = m.workers;
            }
        }
        self.rt_since = Some(std::time::Instant::now());
    }

    /// Every module's runtime counters, in creation-slot order (`show runtime`).
    ///
    /// The batches a module processes are counted once, on the gates that lead to it (the
    /// same counters as GetModuleInfo's), less those that were merged into another batch
    /// or dropped at the hop limit; a module run by one worker has them on that worker. A
    /// module several workers run counts its own calls per worker while runtime sampling
    /// is on. Task runs are counted per worker while sampling is on. Counts go on from the
    /// module's creation; callers keep a baseline to clear them (`clear runtime`).
    ///
    /// `since_clear`: less what was counted up to the last [`Pipeline::clear_runtime`].
    pub fn runtime(&self, since_clear: bool) -> Vec<ModuleRuntime> {
        let mut inb = vec![(0u64, 0u64); self.nodes.len()];
        for n in self.nodes.iter().flatten() {
            for og in n.ogates.iter().flatten() {
                let e = &mut inb[og.dst as usize];
                e.0 += og.stats.batches.get();
                e.1 += og.stats.packets.get();
            }
        }
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(n) = n else { continue };
            let mut rows: Vec<WorkerRuntime> =
                n.rt.iter()
                    .enumerate()
                    .map(|(w, s)| WorkerRuntime {
                        wid: w,
                        calls: s.task_calls.get() + s.multi_calls.get(),
                        packets: s.task_packets.get() + s.multi_packets.get(),
                        sampled_calls: s.s_calls.get(),
                        sampled_packets: s.s_packets.get(),
                        sampled_cycles: s.s_cycles.get(),
                    })
                    .collect();
            let multi_calls: u64 = n.rt.iter().map(|s| s.multi_calls.get()).sum();
            let multi_packets: u64 = n.rt.iter().map(|s| s.multi_packets.get()).sum();
            let calls = inb[i]
                .0
                .saturating_sub(n.uncalled.get())
                .saturating_sub(multi_calls);
            let packets = inb[i]
                .1
                .saturating_sub(n.unprocessed.get())
                .saturating_sub(multi_packets);
            if calls > 0 || packets > 0 {
                // Batches processed while one worker ran the module: its worker now, or
                // the one that was sampled most (the placement changed), else worker 0.
                let w = if n.workers.count_ones() == 1 {
                    n.workers.trailing_zeros() as usize
                } else {
                    rows.iter()
                        .max_by_key(|r| (r.sampled_calls, std::cmp::Reverse(r.wid)))
                        .map_or(0, |r| r.wid)
                };
                if rows.len() <= w {
                    rows.extend((rows.len()..=w).map(|wid| WorkerRuntime {
                        wid,
                        ..Default::default()
                    }));
                }
                rows[w].calls += calls;
                rows[w].packets += packets;
            }
            if since_clear {
                for r in rows.iter_mut() {
                    if let Some(b) = n.rt_base.iter().find(|b| b.wid == r.wid) {
                        *r = r.since(b);
                    }
                }
            }
            rows.retain(|r| r.calls > 0 || r.sampled_calls > 0);
            out.push(ModuleRuntime {
                name: n.name.clone(),
                mclass: n.class.name,
                workers: rows,
            });
        }
        out
    }
}

//! The engine: the graph, the packet pool and the worker threads, behind the operations a
//! controller performs. Every operation is atomic: on error nothing changed.
//!
//! Graph and class-tree changes happen with the workers paused (BESS's barrier); a paused
//! worker has finished its current task, so no batch is in flight and none is lost.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::exec::Context;
use crate::graph::Pipeline;
use crate::mem::PagePolicy;
use crate::module::ModuleClass;
use crate::pool::PacketPool;
use crate::sched::{ClassTree, Policy, TaskId, TcInfo};
use crate::value::Value;

mod tx;
mod worker;

pub use tx::{TxOp, TxOutcome};
use worker::{
    check_core, worker_main, GraphCell, RunClock, WorkerShared, REQ_PAUSE, REQ_RUN, REQ_STOP,
    ST_FINISHED, ST_PAUSED, ST_RUNNING,
};

pub use crate::limits::MAX_WORKERS;

/// A worker's run state, as `ListWorkers` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    /// Running its scheduler loop.
    Running,
    /// Asked to pause, not yet paused.
    Pausing,
    /// Paused at a task boundary.
    Paused,
    /// Thread has exited.
    Finished,
}

struct Worker {
    core: usize,
    shared: Arc<WorkerShared>,
    thread: Option<JoinHandle<()>>,
}

/// A worker as listed to controllers.
#[derive(Clone, Debug)]
pub struct WorkerInfo {
    /// Worker id.
    pub wid: usize,
    /// CPU core it is pinned to.
    pub core: usize,
    /// Run state.
    pub state: WorkerState,
    /// Number of traffic classes (excluding the implicit root).
    pub num_tcs: usize,
    /// Number of tasks attached.
    pub num_tasks: usize,
    /// Scheduler rounds so far.
    pub rounds: u64,
    /// Rounds in which nothing was runnable.
    pub idle_rounds: u64,
    /// Naps taken while idle (only with [`Engine::set_idle_sleep_max_us`] above 0).
    pub naps: u64,
    /// TSC cycles spent running (not paused) since the worker started.
    pub run_cycles: u64,
    /// Packets the worker's modules dropped, dead ends included (BESS's `silent_drops`, the
    /// "Deadend pkts" of bessctl's `show worker`).
    pub silent_drops: u64,
}

/// Where a module's task is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskPlace {
    /// Worker id, None while no worker exists.
    pub wid: Option<usize>,
    /// Leaf class name holding it.
    pub leaf: String,
}

/// Engine configuration.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Packet buffers in the pool.
    pub buffers: usize,
    /// Page policy for packet memory.
    pub pages: PagePolicy,
    /// Pin worker threads to their cores (off only for tests on busy machines).
    pub pin: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            buffers: 32768,
            pages: PagePolicy::Auto,
            pin: true,
        }
    }
}

/// The dataplane: graph, pool, workers.
pub struct Engine {
    graph: Arc<GraphCell>,
    pool: PacketPool,
    ctx: Context,
    workers: Vec<Option<Worker>>,
    places: HashMap<TaskId, TaskPlace>,
    /// Tasks on no worker yet, in creation order (BESS's orphan list): they are placed when
    /// the workers resume.
    orphans: Vec<TaskId>,
    /// Where the round-robin choice of a worker for "any worker" continues (BESS's
    /// `get_next_active_worker`).
    next_worker: usize,
    cfg: EngineConfig,
    default_core: usize,
    /// Longest nap of an idle worker in µs (0: workers always poll, as BESS's do); read by
    /// every worker on its idle rounds.
    idle_sleep_max_us: Arc<AtomicU32>,
}

/// Largest accepted `idle_sleep_max_us` (10 ms, as Open vSwitch's `pmd-sleep-max`).
pub const MAX_IDLE_SLEEP_US: u32 = 10_000;

fn leaf_name(module: &str, idx: usize) -> String {
    format!("!leaf_{module}:{idx}")
}

impl Engine {
    /// Creates an engine with its packet pool; no workers yet.
    pub fn new(cfg: EngineConfig) -> Result<Engine> {
        let pool = PacketPool::new("pool0", cfg.buffers, cfg.pages)
            .map_err(|e| Error::no_mem(e.to_string()))?;
        let ctx = Context::new(usize::MAX, &pool);
        Ok(Engine {
            graph: Arc::new(GraphCell(UnsafeCell::new(Pipeline::new()))),
            pool,
            ctx,
            workers: Vec::new(),
            places: HashMap::new(),
            orphans: Vec::new(),
            next_worker: 0,
            cfg,
            default_core: 0,
            idle_sleep_max_us: Arc::new(AtomicU32::new(0)),
        })
    }

    /// Lets idle workers sleep: a worker whose tasks have found no packet for 1 ms naps
    /// between rounds, 8 µs at first and doubling up to `max_us`, until a round finds work
    /// again (Open vSwitch's `pmd-sleep-max`). 0 (the default) keeps BESS's behaviour: workers
    /// always poll. A nap delays the first packet after an idle spell by up to `max_us`.
    pub fn set_idle_sleep_max_us(&self, max_us: u32) -> Result<()> {
        if max_us > MAX_IDLE_SLEEP_US {
            return Err(Error::invalid(format!(
                "idle sleep {max_us} us is out of range (0..={MAX_IDLE_SLEEP_US})"
            )));
        }
        self.idle_sleep_max_us.store(max_us, Ordering::Relaxed);
        Ok(())
    }

    /// The longest nap of an idle worker in µs (0: workers always poll).
    pub fn idle_sleep_max_us(&self) -> u32 {
        self.idle_sleep_max_us.load(Ordering::Relaxed)
    }

    /// Turns runtime sampling (`show runtime`: per module and worker, calls, packets and
    /// sampled TSC cycles) on or off, with the workers paused. Off by default in the core.
    pub fn set_runtime(&mut self, on: bool) -> Result<()> {
        self.paused(|e| {
            e.graph_mut().set_runtime(on);
            Ok(())
        })
    }

    /// Starts the runtime counts afresh (`clear runtime`, see
    /// [`Pipeline::clear_runtime`]), with the workers paused.
    pub fn clear_runtime(&mut self) -> Result<()> {
        self.paused(|e| {
            e.graph_mut().clear_runtime();
            Ok(())
        })
    }

    /// Arms a packet trace (`trace add`): the next `count` packets entering any of the
    /// modules `points` (batches given to it, or packets its task produces) are traced
    /// through the graph (see [`crate::trace`]). A trace already armed gets the points and
    /// the count added (its records are kept). Off by default.
    pub fn trace_add(&mut self, points: &[String], count: u32) -> Result<()> {
        use crate::trace::{Tracer, MAX_TRACE_PACKETS};
        if count == 0 || count > MAX_TRACE_PACKETS {
            return Err(Error::invalid(format!(
                "trace count {count} is out of range (1..={MAX_TRACE_PACKETS} packets)"
            )));
        }
        if points.is_empty() {
            return Err(Error::invalid(
                "trace add needs a module or a port to trace at",
            ));
        }
        for p in points {
            self.graph().id_of(p)?;
        }
        if let Some(t) = self.graph().trace() {
            t.add(points.to_vec(), count);
            return Ok(());
        }
        let t = Arc::new(Tracer::new(points.to_vec(), count));
        self.paused(|e| {
            e.graph_mut().set_trace(Some(t));
            Ok(())
        })
    }

    /// Removes the packet trace and its records (`clear trace`): the runner is back on its
    /// plain path.
    pub fn trace_clear(&mut self) -> Result<()> {
        if self.graph().trace().is_none() {
            return Ok(());
        }
        self.paused(|e| {
            e.graph_mut().set_trace(None);
            Ok(())
        })
    }

    /// The packets traced so far (`show trace`), with the trace's capture points and the
    /// packets it has still to capture; None when no trace is armed.
    pub fn trace_packets(&self) -> Option<(Vec<crate::trace::PacketTrace>, Vec<String>, u32)> {
        let t = self.graph().trace()?;
        let (points, left) = t.pending();
        Some((t.packets(), points, left))
    }

    /// Runs one packet through the graph from `module` without sending it (`trace packet`,
    /// OVS's `ofproto/trace`), with the workers paused, and returns its trace. Modules
    /// that would send it to a port (PortOut, QueueOut) or hold it (Queue, DRR, Buffer) are
    /// not run; the others run on their real state (counters, learned entries may change:
    /// docs/compat.md). A module without input gates is taken as having produced it.
    pub fn trace_packet(
        &mut self,
        module: &str,
        bytes: &[u8],
    ) -> Result<crate::trace::PacketTrace> {
        let id = self.graph().id_of(module)?;
        self.paused(|e| {
            let mut ctx = std::mem::replace(&mut e.ctx, Context::new(usize::MAX, &e.pool));
            let r = ctx.trace_dry(e.graph(), id, bytes);
            e.ctx = ctx;
            r
        })
    }

    /// The packet pool.
    pub fn pool(&self) -> &PacketPool {
        &self.pool
    }

    /// Read access to the graph (counters may move while workers run).
    pub fn graph(&self) -> &Pipeline {
        // SAFETY: shared reads; mutation only through `&mut self` with workers paused.
        unsafe { &*self.graph.0.get() }
    }

    fn worker(&self, wid: usize) -> Result<&Worker> {
        self.workers
            .get(wid)
            .and_then(|w| w.as_ref())
            .ok_or_else(|| Error::not_found(format!("worker {wid} does not exist")))
    }

    /// Ids of existing workers.
    pub fn worker_ids(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&w| self.workers[w].is_some())
            .collect()
    }

    /// Starts worker `wid` pinned to `core` (a CPU id of the machine), paused as BESS launches
    /// its workers: it runs once resumed (`resume_all`, `resume_worker`).
    pub fn add_worker(&mut self, wid: usize, core: usize) -> Result<()> {
        if wid >= MAX_WORKERS {
            return Err(Error::invalid(format!(
                "worker id {wid} is out of range (0..{MAX_WORKERS})"
            )));
        }
        if self.workers.get(wid).is_some_and(|w| w.is_some()) {
            return Err(Error::exists(format!("worker {wid} already exists")));
        }
        check_core(core)?;
        let shared = Arc::new(WorkerShared {
            req: AtomicU8::new(REQ_PAUSE),
            state: AtomicU8::new(ST_RUNNING),
            paused: Mutex::new(false),
            clock: UnsafeCell::new(RunClock::default()),
            cv: Condvar::new(),
            cv_ack: Condvar::new(),
            tree: UnsafeCell::new(ClassTree::new(wid)),
            rounds: AtomicU64::new(0),
            idle_rounds: AtomicU64::new(0),
            naps: AtomicU64::new(0),
            silent_drops: AtomicU64::new(0),
        });
        let (sh, graph, pool, pin, nap) = (
            shared.clone(),
            self.graph.clone(),
            self.pool.clone(),
            self.cfg.pin,
            self.idle_sleep_max_us.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("bessemer-w{wid}"))
            .spawn(move || worker_main(wid, core, pin, sh, graph, pool, nap))
            .map_err(|e| Error::no_mem(format!("cannot start worker {wid}: {e}")))?;
        if self.workers.len() <= wid {
            self.workers.resize_with(wid + 1, || None);
        }
        self.workers[wid] = Some(Worker {
            core,
            shared,
            thread: Some(thread),
        });
        if let Err(e) = self.pause_worker(wid) {
            // Atomic: a worker that never reached its first pause is stopped again.
            let _ = self.destroy_worker(wid);
            return Err(e);
        }
        tracing::info!(wid, core, "worker started (paused until resumed)");
        Ok(())
    }

    /// The worker a traffic class or task asked for goes to, as BESS's `AttachTc` decides:
    /// `Some(w)` must exist, except that worker 0 is launched on the default core when no
    /// worker exists; `None` (BESS's wid -1) takes the next worker round-robin, launching
    /// worker 0 when there is none.
    pub fn worker_for(&mut self, wid: Option<usize>) -> Result<usize> {
        let none = self.worker_ids().is_empty();
        match wid {
            Some(w) if self.worker(w).is_ok() => Ok(w),
            Some(0) | None if none => {
                self.add_worker(0, self.default_core)?;
                Ok(0)
            }
            Some(w) => Err(Error::invalid(format!("worker {w} does not exist"))),
            None => Ok(self.next_active_worker()),
        }
    }

    /// BESS's `get_next_active_worker`: existing workers in turn.
    fn next_active_worker(&mut self) -> usize {
        let ids = self.worker_ids();
        let w = ids
            .iter()
            .copied()
            .find(|&w| w >= self.next_worker)
            .unwrap_or(ids[0]);
        self.next_worker = w + 1;
        w
    }

    /// Places every orphan task (BESS's `attach_orphans`) on the next worker round-robin;
    /// worker 0 is launched if none exists.
    pub fn attach_orphans(&mut self) -> Result<()> {
        if self.orphans.is_empty() {
            return Ok(());
        }
        if self.worker_ids().is_empty() {
            self.add_worker(0, self.default_core)?;
        }
        let orphans = std::mem::take(&mut self.orphans);
        let targets: Vec<(TaskId, usize)> = orphans
            .iter()
            .map(|&t| (t, self.next_active_worker()))
            .collect();
        let r = self.paused(|e| {
            for &(t, w) in &targets {
                e.place_task(t, w, None)?;
            }
            Ok(())
        });
        if r.is_err() {
            // Whatever was not placed stays an orphan.
            self.orphans = orphans
                .into_iter()
                .filter(|t| self.places.get(t).is_none_or(|p| p.wid.is_none()))
                .collect();
        }
        r
    }

    /// Stops and removes a worker that has no traffic classes or tasks.
    pub fn destroy_worker(&mut self, wid: usize) -> Result<()> {
        let w = self.worker(wid)?;
        // SAFETY: reading the tree's size; the worker does not change its shape.
        let n = unsafe { (*w.shared.tree.get()).len() };
        if n > 1 {
            return Err(Error::busy(format!(
                "worker {wid} still has {} traffic class(es); remove them first",
                n - 1
            )));
        }
        let mut w = self.workers[wid].take().unwrap();
        {
            let _g = w.shared.paused.lock().unwrap();
            w.shared.req.store(REQ_STOP, Ordering::Release);
            w.shared.cv.notify_all();
        }
        if let Some(t) = w.thread.take() {
            let _ = t.join();
        }
        Ok(())
    }

    /// Pauses one worker at a task boundary and waits until it is paused.
    pub fn pause_worker(&mut self, wid: usize) -> Result<()> {
        let w = self.worker(wid)?;
        let sh = &w.shared;
        let mut paused = sh.paused.lock().unwrap();
        sh.req.store(REQ_PAUSE, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Safe to return once `paused` is true: the worker only leaves its pause loop after
        // seeing REQ_RUN under this lock.
        while !*paused && sh.state.load(Ordering::Acquire) != ST_FINISHED {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::busy(format!(
                    "worker {wid} did not pause within 10 s"
                )));
            }
            paused = sh.cv_ack.wait_timeout(paused, left).unwrap().0;
        }
        Ok(())
    }

    /// Resumes a paused worker.
    pub fn resume_worker(&mut self, wid: usize) -> Result<()> {
        let w = self.worker(wid)?;
        let _g = w.shared.paused.lock().unwrap();
        w.shared.req.store(REQ_RUN, Ordering::Release);
        w.shared.cv.notify_all();
        Ok(())
    }

    /// Pauses every worker.
    pub fn pause_all(&mut self) -> Result<()> {
        for wid in self.worker_ids() {
            self.pause_worker(wid)?;
        }
        Ok(())
    }

    /// Resumes every worker after placing the orphan tasks (BESS's ResumeAll; with orphans
    /// and no worker, worker 0 is started on the default core).
    pub fn resume_all(&mut self) -> Result<()> {
        self.attach_orphans()?;
        for wid in self.worker_ids() {
            self.resume_worker(wid)?;
        }
        Ok(())
    }

    /// Sets the core of the worker `resume_all` starts when tasks exist and no worker does.
    pub fn set_default_core(&mut self, core: usize) -> Result<()> {
        check_core(core)?;
        self.default_core = core;
        Ok(())
    }

    /// State of one worker.
    pub fn worker_state(&self, wid: usize) -> Result<WorkerState> {
        let w = self.worker(wid)?;
        let asked_to_pause = w.shared.req.load(Ordering::Acquire) == REQ_PAUSE;
        Ok(match w.shared.state.load(Ordering::Acquire) {
            ST_RUNNING if asked_to_pause => WorkerState::Pausing,
            ST_RUNNING => WorkerState::Running,
            ST_PAUSED => WorkerState::Paused,
            _ => WorkerState::Finished,
        })
    }

    /// All workers.
    pub fn list_workers(&self) -> Vec<WorkerInfo> {
        self.worker_ids()
            .into_iter()
            .map(|wid| {
                let w = self.workers[wid].as_ref().unwrap();
                // SAFETY: size reads of the tree; racy but harmless counts.
                let tree = unsafe { &*w.shared.tree.get() };
                WorkerInfo {
                    wid,
                    core: w.core,
                    state: self.worker_state(wid).unwrap(),
                    num_tcs: tree.len().saturating_sub(1),
                    num_tasks: tree.tasks().len(),
                    rounds: w.shared.rounds.load(Ordering::Relaxed),
                    idle_rounds: w.shared.idle_rounds.load(Ordering::Relaxed),
                    naps: w.shared.naps.load(Ordering::Relaxed),
                    run_cycles: w.shared.run_cycles(),
                    silent_drops: w.shared.silent_drops.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Runs `f` with every running worker paused, resuming those afterwards.
    pub fn paused<T>(&mut self, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
        let running: Vec<usize> = self
            .worker_ids()
            .into_iter()
            .filter(|&w| {
                self.workers[w]
                    .as_ref()
                    .unwrap()
                    .shared
                    .req
                    .load(Ordering::Acquire)
                    == REQ_RUN
            })
            .collect();
        for &w in &running {
            self.pause_worker(w)?;
        }
        let r = f(self);
        self.refresh_task_workers();
        for &w in &running {
            self.resume_worker(w)?;
        }
        r
    }

    fn graph_mut(&mut self) -> &mut Pipeline {
        // SAFETY: callers hold `&mut self` inside `paused`, so no worker runs the graph.
        unsafe { &mut *self.graph.0.get() }
    }

    fn tree_mut(&mut self, wid: usize) -> Result<&mut ClassTree> {
        let w = self.worker(wid)?;
        // SAFETY: called inside `paused`.
        Ok(unsafe { &mut *w.shared.tree.get() })
    }

    fn tree(&self, wid: usize) -> Result<&ClassTree> {
        let w = self.worker(wid)?;
        // SAFETY: reads of the tree shape (changed only by the control thread).
        Ok(unsafe { &*w.shared.tree.get() })
    }

    /// Tells the graph which workers run which modules (workers paused): for the parts of
    /// the graph changed since the last call (see [`Pipeline::refresh_workers`]).
    fn refresh_task_workers(&mut self) {
        // SAFETY: called inside `paused` (as `graph_mut`); `places` is another field.
        let graph = unsafe { &mut *self.graph.0.get() };
        let places = &self.places;
        graph.refresh_workers(&|t| places.get(&t).and_then(|p| p.wid));
    }

    /// Checks the graph's bookkeeping and derived state against a computation from scratch
    /// (see [`Pipeline::verify`]), with the workers' task placement. For tests.
    #[doc(hidden)]
    pub fn verify_graph(&self) -> std::result::Result<(), String> {
        let places = &self.places;
        self.graph().verify(&|t| places.get(&t).and_then(|p| p.wid))
    }

    /// Modules run by more workers than their class allows, with those workers (what
    /// BESS's CheckSchedulingConstraints reports as fatal module violations).
    pub fn constraint_violations(&self) -> Vec<(String, Vec<usize>)> {
        self.graph().worker_violations()
    }

    /// Puts a task in a leaf on worker `wid` (under `parent` or the worker's root).
    fn place_task(&mut self, t: TaskId, wid: usize, parent: Option<&str>) -> Result<()> {
        let (module, idx) = {
            let g = self.graph();
            let m = g
                .task_module(t)
                .ok_or_else(|| Error::not_found("task vanished"))?
                .to_string();
            let idx = g.tasks_of(&m)?.iter().position(|&x| x == t).unwrap_or(0);
            (m, idx)
        };
        let leaf = leaf_name(&module, idx);
        let old = self.places.get(&t).cloned();
        let tree = self.tree_mut(wid)?;
        if parent.is_some_and(|p| tree.info(p).is_none()) {
            return Err(Error::not_found(format!(
                "traffic class '{}' does not exist on worker {wid}",
                parent.unwrap()
            )));
        }
        // Detach from the old place first (it may be the same tree).
        if let Some(TaskPlace {
            wid: Some(ow),
            leaf: ol,
        }) = &old
        {
            let ot = self.tree_mut(*ow)?;
            ot.detach_task(t);
            let _ = ot.remove_class(ol);
        }
        let tree = self.tree_mut(wid)?;
        let res = tree
            .add_class(&leaf, Policy::Leaf, parent, 0, 1)
            .and_then(|_| tree.attach_task(&leaf, t))
            .map_err(|e| Error::invalid(e.to_string()));
        if let Err(e) = res {
            let _ = tree.remove_class(&leaf);
            if let Some(TaskPlace { wid: Some(ow), .. }) = &old {
                let _ = self.restore_task(t, *ow, &leaf);
            }
            return Err(e);
        }
        self.places.insert(
            t,
            TaskPlace {
                wid: Some(wid),
                leaf,
            },
        );
        self.graph_mut().task_moved(t);
        Ok(())
    }

    fn restore_task(&mut self, t: TaskId, wid: usize, leaf: &str) -> Result<()> {
        let tree = self.tree_mut(wid)?;
        tree.add_class(leaf, Policy::Leaf, None, 0, 1)
            .map_err(|e| Error::invalid(e.to_string()))?;
        tree.attach_task(leaf, t)
            .map_err(|e| Error::invalid(e.to_string()))
    }

    /// Creates a module. It is built (argument parsed, tables allocated) while the workers
    /// run and inserted with them paused, as BESS does, so a large table does not stall
    /// traffic. Its tasks are orphans until attached or until the workers resume (BESS's
    /// `RegisterTask`); the resume that places the first of them launches worker 0 when no
    /// worker exists. Returns its name.
    pub fn create_module(
        &mut self,
        class: &'static ModuleClass,
        name: Option<&str>,
        arg: &Value,
    ) -> Result<String> {
        let built = self.graph().build_module(class, name, arg)?;
        self.paused(|e| e.insert_built(built))
    }

    /// Inserts a built module (workers paused); its tasks become orphans. Returns its name.
    fn insert_built(&mut self, built: crate::graph::BuiltModule) -> Result<String> {
        let (id, tasks) = self.graph_mut().insert_module(built)?;
        let name = self.graph().name_of(id).to_string();
        for (i, t) in tasks.iter().enumerate() {
            self.places.insert(
                *t,
                TaskPlace {
                    wid: None,
                    leaf: leaf_name(&name, i),
                },
            );
            self.orphans.push(*t);
        }
        Ok(name)
    }

    /// Removes a module (workers paused): its tasks leave their classes, packets it holds
    /// are freed.
    fn remove_paused(&mut self, name: &str) -> Result<()> {
        for t in self.graph().tasks_of(name)? {
            self.unplace_task(t);
        }
        let mut ctx = std::mem::replace(&mut self.ctx, Context::new(usize::MAX, &self.pool));
        let r = self.graph_mut().remove_module(name, &mut ctx);
        self.ctx = ctx;
        r.map(|_| ())
    }

    fn unplace_task(&mut self, t: TaskId) {
        self.orphans.retain(|&o| o != t);
        self.graph_mut().task_moved(t);
        if let Some(TaskPlace { wid: Some(w), leaf }) = self.places.remove(&t) {
            if let Ok(tree) = self.tree_mut(w) {
                tree.detach_task(t);
                let _ = tree.remove_class(&leaf);
            }
        }
    }

    /// Destroys a module, disconnecting it and freeing packets it holds.
    pub fn destroy_module(&mut self, name: &str) -> Result<()> {
        self.graph().id_of(name)?;
        self.paused(|e| e.remove_paused(name))
    }

    /// Connects `from:ogate -> igate:to`.
    pub fn connect(&mut self, from: &str, ogate: u16, to: &str, igate: u16) -> Result<()> {
        self.paused(|e| e.graph_mut().connect(from, ogate, to, igate))
    }

    /// Installs a gate hook (see [`Pipeline::add_hook`]) with the workers paused.
    pub fn add_hook(
        &mut self,
        module: &str,
        dir: crate::hook::GateDir,
        gate: Option<u16>,
        name: &str,
        hook: std::sync::Arc<dyn crate::hook::GateHook>,
    ) -> Result<()> {
        self.paused(|e| e.graph_mut().add_hook(module, dir, gate, name, hook))
    }

    /// Removes a gate hook with the workers paused.
    pub fn remove_hook(
        &mut self,
        module: &str,
        dir: crate::hook::GateDir,
        gate: Option<u16>,
        name: &str,
    ) -> Result<()> {
        self.paused(|e| e.graph_mut().remove_hook(module, dir, gate, name))
    }

    /// Turns bit counting on or off for output gates of a module, workers paused.
    pub fn track_gate(&mut self, module: &str, gate: Option<u16>, on: bool) -> Result<()> {
        self.paused(|e| e.graph_mut().track_gate(module, gate, on))
    }

    /// The ports (created and looked up without pausing: no module changes).
    pub fn ports(&self) -> &crate::port::PortTable {
        self.graph().ports()
    }

    /// Disconnects an output gate.
    pub fn disconnect(&mut self, from: &str, ogate: u16) -> Result<()> {
        self.paused(|e| e.graph_mut().disconnect(from, ogate))
    }

    /// Runs a module command: with the workers paused, except a command whose table entry is
    /// `mt_safe` (BESS's THREAD_SAFE) on a [`SharedModule`](crate::SharedModule) instance,
    /// which runs while the workers run.
    pub fn command(&mut self, module: &str, cmd: &str, arg: &Value) -> Result<Value> {
        let spec = self.graph().command_spec(module, cmd)?;
        if spec.mt_safe && self.graph().is_shared(module)? {
            // BESS's THREAD_SAFE command on a module that guards its own state: the workers
            // keep running it.
            let mut ctx = std::mem::replace(&mut self.ctx, Context::new(usize::MAX, &self.pool));
            let r = self.graph().command_shared(module, cmd, arg, &mut ctx);
            self.ctx = ctx;
            return r;
        }
        self.paused(|e| {
            let mut ctx = std::mem::replace(&mut e.ctx, Context::new(usize::MAX, &e.pool));
            let r = e.graph_mut().command(module, cmd, arg, &mut ctx);
            e.ctx = ctx;
            r
        })
    }

    /// Adds a traffic class on a worker.
    pub fn add_tc(
        &mut self,
        wid: usize,
        name: &str,
        policy: Policy,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<()> {
        self.worker(wid)?;
        if self
            .worker_ids()
            .iter()
            .any(|&w| self.tree(w).is_ok_and(|t| t.info(name).is_some()))
        {
            return Err(Error::exists(format!(
                "traffic class '{name}' already exists"
            )));
        }
        self.paused(|e| {
            e.tree_mut(wid)?
                .add_class(name, policy, parent, priority, share)
                .map_err(|err| Error::invalid(err.to_string()))
        })
    }

    /// Finds which worker has a class.
    pub fn tc_worker(&self, name: &str) -> Result<usize> {
        self.worker_ids()
            .into_iter()
            .find(|&w| self.tree(w).is_ok_and(|t| t.info(name).is_some()))
            .ok_or_else(|| Error::not_found(format!("traffic class '{name}' does not exist")))
    }

    /// Moves task `idx` of `module` under class `parent` (on its worker) or to the root of
    /// worker `wid` (chosen by [`Engine::worker_for`]; `None` is any worker). Placement is
    /// never refused for thread safety: `constraint_violations` reports what BESS would.
    pub fn attach_task(
        &mut self,
        module: &str,
        idx: usize,
        parent: Option<&str>,
        wid: Option<usize>,
    ) -> Result<()> {
        let tasks = self.graph().tasks_of(module)?;
        let t = *tasks.get(idx).ok_or_else(|| {
            Error::not_found(format!(
                "module '{module}' has {} task(s); no task {idx}",
                tasks.len()
            ))
        })?;
        let target = match parent {
            Some(p) => self.tc_worker(p)?,
            None => self.worker_for(wid)?,
        };
        self.paused(|e| {
            e.place_task(t, target, parent)?;
            e.orphans.retain(|&o| o != t);
            Ok(())
        })
    }

    /// Removes a traffic class with no children.
    pub fn remove_tc(&mut self, name: &str) -> Result<()> {
        if name.starts_with('!') {
            return Err(Error::invalid(format!(
                "traffic class '{name}' is managed by Bessemer"
            )));
        }
        let wid = self.tc_worker(name)?;
        self.paused(|e| {
            e.tree_mut(wid)?
                .remove_class(name)
                .map_err(|err| Error::busy(err.to_string()))
        })
    }

    /// Changes a class's policy parameters (same policy kind).
    pub fn update_tc(&mut self, name: &str, policy: Policy) -> Result<()> {
        let wid = self.tc_worker(name)?;
        self.paused(|e| {
            e.tree_mut(wid)?
                .update_policy(name, policy)
                .map_err(|err| Error::invalid(err.to_string()))
        })
    }

    /// Every traffic class on every worker, with its worker id.
    pub fn list_tcs(&self) -> Vec<(usize, TcInfo)> {
        let mut out = Vec::new();
        for w in self.worker_ids() {
            if let Ok(t) = self.tree(w) {
                out.extend(t.list().into_iter().map(|i| (w, i)));
            }
        }
        out
    }

    /// Where each task of a module is attached.
    pub fn task_places(&self, module: &str) -> Result<Vec<TaskPlace>> {
        Ok(self
            .graph()
            .tasks_of(module)?
            .iter()
            .filter_map(|t| self.places.get(t).cloned())
            .collect())
    }

    /// Destroys all modules (ResetModules), under one pause of the workers (not one per
    /// module).
    pub fn reset_modules(&mut self) -> Result<()> {
        let names: Vec<String> = self.graph().modules().into_iter().map(|m| m.name).collect();
        self.paused(|e| {
            for n in &names {
                e.remove_paused(n)?;
            }
            // The trace's capture points and records name modules that are gone.
            e.graph_mut().set_trace(None);
            Ok(())
        })
    }

    /// Destroys everything: modules, classes, workers (ResetAll).
    pub fn reset_all(&mut self) -> Result<()> {
        self.reset_modules()?;
        // No module holds a queue any more, so every port goes.
        self.graph().ports().reset();
        for wid in self.worker_ids() {
            let user: Vec<String> = self
                .tree(wid)?
                .list()
                .into_iter()
                .filter(|i| !i.name.starts_with('!'))
                .map(|i| i.name)
                .collect();
            self.paused(|e| {
                let tree = e.tree_mut(wid)?;
                // Children first: repeat until every user class is gone.
                for _ in 0..user.len() + 1 {
                    for n in &user {
                        let _ = tree.remove_class(n);
                    }
                }
                Ok(())
            })?;
            self.destroy_worker(wid)?;
        }
        Ok(())
    }

    /// Moves traffic class `name` under `parent` (None: the root of its worker) with a new
    /// priority and share (BESS's UpdateTcParent). Both classes must be on the same worker;
    /// to move a task's leaf to another worker use [`Engine::attach_task`].
    pub fn set_tc_parent(
        &mut self,
        name: &str,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<()> {
        let wid = self.tc_worker(name)?;
        if let Some(p) = parent {
            let pw = self.tc_worker(p)?;
            if pw != wid {
                return Err(Error::invalid(format!(
                    "traffic class '{name}' is on worker {wid} and '{p}' on worker {pw}; \
                     a class cannot move between workers"
                )));
            }
        }
        self.paused(|e| {
            e.tree_mut(wid)?
                .set_parent(name, parent, priority, share)
                .map_err(|err| Error::invalid(err.to_string()))
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.reset_modules();
        for w in self.workers.iter_mut().flatten() {
            let _g = w.shared.paused.lock().unwrap();
            w.shared.req.store(REQ_STOP, Ordering::Release);
            w.shared.cv.notify_all();
        }
        for w in self.workers.iter_mut().flatten() {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

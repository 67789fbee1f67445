//! The module graph: instances, gates, connections, tasks, and what is derived from them on
//! every change (input-gate order for batch merging, metadata offsets).
//!
//! The control thread changes the graph only while the workers that run it are paused; the
//! workers read it without locks.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::exec::Context;
use crate::hook::{GateDir, GateHook, HookPlace, NamedHook};
use crate::metadata::{assign_offsets, check_declarations, AttrOffset, AttrSpec, MetaModule};
use crate::module::{
    CommandSpec, CoreDrop, Handler, InitContext, Instance, Module, ModuleClass, SharedModule,
    MAX_GATES,
};
use crate::sched::TaskId;
use crate::value::Value;

/// A counter read by the control thread, written by one worker ([`Counter::add`]) or several
/// ([`Counter::add_shared`]).
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (load + store: one writer per counter, so no locked instruction).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    /// Adds `n` with a locked instruction, for a counter several workers may update.
    #[inline(always)]
    pub fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds `n`: [`Counter::add_shared`] if `shared`, else [`Counter::add`].
    #[inline(always)]
    pub fn add_by(&self, n: u64, shared: bool) {
        if shared {
            self.add_shared(n)
        } else {
            self.add(n)
        }
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Sets to zero.
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

/// Per-gate traffic counters.
#[derive(Default)]
pub struct GateStats {
    /// Packets that crossed the gate.
    pub packets: Counter,
    /// Batches that crossed the gate.
    pub batches: Counter,
    /// Bits that crossed the gate (counted only when bit tracking is on for the gate).
    pub bits: Counter,
}

/// A snapshot of gate counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCounts {
    /// Packets.
    pub packets: u64,
    /// Batches.
    pub batches: u64,
    /// Bits (0 unless tracked).
    pub bits: u64,
}

impl GateStats {
    fn snapshot(&self) -> GateCounts {
        GateCounts {
            packets: self.packets.get(),
            batches: self.batches.get(),
            bits: self.bits.get(),
        }
    }
}

pub(crate) struct OGate {
    pub(crate) dst: u32,
    pub(crate) dst_prio: u32,
    pub(crate) igate: u16,
    pub(crate) stats: GateStats,
    pub(crate) track_bits: bool,
    pub(crate) hooks: Vec<NamedHook>,
    /// No hooks, no bit tracking and a module of one worker: `forward`'s fast path may
    /// move a batch through (kept by [`Pipeline::refresh_gates`] after every change).
    pub(crate) plain: bool,
    /// The node `dst` names, so that a batch moved through the gate reaches its module
    /// without a lookup (kept by [`Pipeline::refresh_gates`], which every change of the
    /// node list or of the connections runs).
    pub(crate) dst_node: *const Node,
}

// SAFETY: `dst_node` is only read, by workers running the pipeline it points into, and is
// rewritten only through `&mut Pipeline` (workers paused).
unsafe impl Send for OGate {}
// SAFETY: as for Send.
unsafe impl Sync for OGate {}

pub(crate) enum InstanceCell {
    Exclusive(UnsafeCell<Box<dyn Module>>),
    Shared(Box<dyn SharedModule>),
}

/// A connection taken out of the graph, counters and hooks included (see
/// [`Pipeline::detach`]).
pub(crate) struct DetachedGate {
    src: u32,
    ogate: u16,
    og: OGate,
    pos: usize,
}

/// A module instance constructed but not yet in the graph (see [`Pipeline::build_module`]).
pub struct BuiltModule {
    class: &'static ModuleClass,
    name: String,
    init: InitContext,
    inst: Instance,
    arg: Value,
}

impl BuiltModule {
    /// The instance name it will have.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One module instance in the graph.
pub struct Node {
    pub(crate) name: String,
    pub(crate) class: &'static ModuleClass,
    pub(crate) inst: InstanceCell,
    pub(crate) ogates: Vec<Option<OGate>>,
    pub(crate) igates: Vec<Vec<(u32, u16)>>,
    pub(crate) ihooks: Vec<Vec<NamedHook>>,
    pub(crate) attrs: Vec<AttrSpec>,
    pub(crate) offsets: Vec<AttrOffset>,
    pub(crate) drops: Box<[Counter]>,
    pub(crate) tasks: Vec<TaskId>,
    pub(crate) prio: u32,
    /// Metadata warnings about this module: (attribute, text).
    warnings: Vec<(String, String)>,
    /// The argument it was created with (what the web view and `get_initial_arg`-style
    /// questions show; never read on the data path).
    pub(crate) init_arg: Value,
    /// Workers whose tasks reach this module (bit per worker id), set by
    /// [`Pipeline::set_task_workers`] while those workers are paused.
    pub(crate) workers: u64,
    /// More than one worker reaches the module: counters are updated atomically, and an
    /// exclusive instance is run under `lock`, so any placement BESS accepts runs safely.
    pub(crate) multi: bool,
    pub(crate) lock: std::sync::atomic::AtomicBool,
    /// Runtime counters (`show runtime`), one slot per worker id up to the highest in
    /// `workers` (grown by [`Pipeline::refresh_workers`], never shrunk).
    pub(crate) rt: Vec<RtSlot>,
    /// Batches counted on a gate into this module that never became a call of it: merged
    /// into another batch waiting for the same input gate, or dropped at the hop limit.
    pub(crate) uncalled: Counter,
    /// Packets counted on a gate into this module that it never got (the hop limit).
    pub(crate) unprocessed: Counter,
    /// The runtime rows at the last [`Pipeline::clear_runtime`] (control thread only).
    rt_base: Vec<WorkerRuntime>,
}

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

/// A task registered by a module.
#[derive(Clone, Debug)]
pub struct TaskEntry {
    /// Module index.
    pub module: u32,
    /// Argument passed to `run_task`.
    pub arg: u64,
}

/// One connection, as listed to controllers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Upstream module.
    pub from: String,
    /// Its output gate.
    pub ogate: u16,
    /// Downstream module.
    pub to: String,
    /// Its input gate.
    pub igate: u16,
    /// Counters of the output gate.
    pub counts: GateCounts,
}

/// A module as listed to controllers.
#[derive(Clone, Debug)]
pub struct ModuleSummary {
    /// Instance name.
    pub name: String,
    /// Class name.
    pub mclass: &'static str,
    /// Module's own description.
    pub desc: String,
}

/// The module graph.
///
/// What is derived from the graph (metadata offsets, input-gate priorities, which workers run
/// a module, each output gate's fast-path flag and destination pointer) depends only on the
/// weakly connected component a module is in, so every change recomputes just the
/// components it touched: a change costs what those components cost, not what the whole
/// graph does.
#[derive(Default)]
pub struct Pipeline {
    nodes: Vec<Option<Node>>,
    by_name: HashMap<String, u32>,
    tasks: Vec<Option<TaskEntry>>,
    /// Empty slots of `nodes` and `tasks`; the lowest is reused first (so modules list in
    /// the order they would have with a scan for the first empty slot).
    free_nodes: BTreeSet<u32>,
    free_tasks: BTreeSet<u32>,
    /// Modules declaring each metadata attribute name (for the size check of a new module).
    attr_users: HashMap<String, BTreeSet<u32>>,
    /// Modules whose component's worker placement must be recomputed by the next
    /// [`Pipeline::refresh_workers`].
    workers_dirty: Vec<u32>,
    scratch: Scratch,
    /// Per class name template (of the classes with modules so far, and not ending in a
    /// digit): a number below which every generated name `<template><n>` is taken, so that
    /// finding the lowest free one does not walk every name taken.
    name_hints: HashMap<&'static str, u64>,
    /// Modules whose derived state was recomputed so far, by [`Pipeline::settle`] and
    /// [`Pipeline::refresh_workers`] (what a change costs; see [`Pipeline::recomputed`]).
    recomputed: u64,
    ports: crate::port::PortTable,
    /// Runtime sampling (`show runtime`) is on: workers count task runs and time sampled
    /// calls (changed only with the workers paused, see [`crate::Engine::set_runtime`]).
    pub(crate) runtime: bool,
    /// When runtime sampling was last turned on or cleared.
    rt_since: Option<std::time::Instant>,
    /// The packet trace armed (`trace add`), if any (changed only with the workers paused).
    pub(crate) trace: Option<Arc<crate::trace::Tracer>>,
    /// `runtime || trace.is_some()`: the one flag the runner tests per task group to leave
    /// its plain path (see `Context::run_task_group`), so that tracing, when off, adds
    /// nothing to what runtime sampling already cost there.
    pub(crate) slow: bool,
}

/// What [`Pipeline::settle`] computes for one component before writing it.
struct Derived {
    ids: Vec<u32>,
    offsets: Option<Vec<Vec<AttrOffset>>>,
    warnings: Vec<Vec<(String, String)>>,
    prio: Vec<u32>,
}

/// Per-slot scratch for walks over components, kept between changes so that a walk costs
/// what the component does (no per-walk clearing or hashing).
#[derive(Default)]
struct Scratch {
    /// `mark[i] == epoch`: slot `i` was visited by the current walk.
    mark: Vec<u32>,
    epoch: u32,
    /// A module's index within the component being computed (valid for its members).
    local: Vec<u32>,
}

impl Scratch {
    /// Starts a walk over a graph of `slots` slots.
    fn begin(&mut self, slots: usize) {
        if self.mark.len() < slots {
            self.mark.resize(slots, 0);
            self.local.resize(slots, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.fill(0);
            self.epoch = 1;
        }
    }

    /// Marks slot `i`; false if the current walk had already.
    fn visit(&mut self, i: u32) -> bool {
        let m = &mut self.mark[i as usize];
        if *m == self.epoch {
            return false;
        }
        *m = self.epoch;
        true
    }
}

/// Edges of one component by local index: module `k` feeds `to[at[k]..at[k + 1]]`.
struct Edges {
    at: Vec<usize>,
    to: Vec<usize>,
}

impl Edges {
    fn of(&self, k: usize) -> &[usize] {
        &self.to[self.at[k]..self.at[k + 1]]
    }

    fn len(&self) -> usize {
        self.at.len() - 1
    }
}

// SAFETY: an Exclusive instance reached by several workers (`Node::multi`, kept current by
// `set_task_workers`) is run only under its node lock, and the control thread mutates only
// while the workers are paused.
unsafe impl Sync for Pipeline {}
// SAFETY: the module instances are `Send` (the `Module` and `SharedModule` traits require
// it), and the gates' `dst_node` pointers point into the heap-allocated node list, which
// stays where it is when the `Pipeline` value moves to another thread.
unsafe impl Send for Pipeline {}

/// Longest module, port or traffic-class name accepted (BESS has no limit; ours bounds memory).
pub const MAX_NAME_LEN: usize = 1024;

/// True if `name` is acceptable as a module or port name. BESS takes any non-empty string
/// (`soc_3_2026-11-24-10-00`, `my-mod.1`, ...); so do we, up to [`MAX_NAME_LEN`] bytes, except
/// for control characters (newlines, escapes, tabs): a name is printed in logs, tables and
/// terminals, where they would forge lines or send escape sequences (docs/compat.md).
pub fn valid_name(name: &str) -> bool {
    name_problem(name).is_none()
}

/// Why `name` is not acceptable as a module or port name (see [`valid_name`]), if it is not.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "the name is too long ({} bytes; at most {MAX_NAME_LEN})",
            name.len()
        ));
    }
    let (at, c) = name.char_indices().find(|(_, c)| c.is_control())?;
    Some(format!(
        "the name '{}' holds a control character ({} at byte {at}); names are printed in \
         logs, tables and terminals",
        name.chars()
            .flat_map(char::escape_default)
            .collect::<String>(),
        c.escape_default()
    ))
}

impl Pipeline {
    /// An empty graph.
    pub fn new() -> Pipeline {
        Pipeline::default()
    }

    /// The port table modules look ports up in.
    pub fn ports(&self) -> &crate::port::PortTable {
        &self.ports
    }

    pub(crate) fn node(&self, id: u32) -> &Node {
        self.nodes[id as usize]
            .as_ref()
            .expect("dangling module id")
    }

    pub(crate) fn task(&self, t: TaskId) -> Option<&TaskEntry> {
        self.tasks.get(t.0 as usize).and_then(|e| e.as_ref())
    }

    /// Name of a module by index.
    pub fn name_of(&self, id: u32) -> &str {
        &self.node(id).name
    }

    /// Index of a module by name.
    pub fn id_of(&self, name: &str) -> Result<u32> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::not_found(format!("no module named '{name}'")))
    }

    /// Number of modules.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True if there is no module.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// BESS's default name: the class template followed by the lowest unused number.
    pub fn default_name(&self, class: &ModuleClass) -> String {
        self.default_name_besides(class, &|_| false)
    }

    /// BESS's generated name for a new module of `class` that is neither in the graph nor
    /// `taken` (names chosen for modules not yet inserted).
    pub fn default_name_besides(
        &self,
        class: &ModuleClass,
        taken: &dyn Fn(&str) -> bool,
    ) -> String {
        let from = self
            .name_hints
            .get(class.name_template)
            .copied()
            .unwrap_or(0);
        (from..)
            .map(|i| format!("{}{}", class.name_template, i))
            .find(|n| !self.by_name.contains_key(n) && !taken(n))
            .expect("some name is free")
    }

    /// Keeps `name_hints` true after `name` was taken (by a module of `class`).
    fn name_taken(&mut self, class: &ModuleClass, name: &str) {
        let t = class.name_template;
        if !self.name_hints.contains_key(t) && !t.ends_with(|c: char| c.is_ascii_digit()) {
            let free = (0..)
                .find(|i| !self.by_name.contains_key(&format!("{t}{i}")))
                .expect("some name is free");
            self.name_hints.insert(t, free);
        }
        if let Some((prefix, n)) = generated_number(name) {
            if let Some((&t, h)) = self.name_hints.get_key_value(prefix) {
                if n == *h {
                    let mut h = n;
                    while self.by_name.contains_key(&format!("{t}{h}")) {
                        h += 1;
                    }
                    self.name_hints.insert(t, h);
                }
            }
        }
    }

    /// Keeps `name_hints` true after `name` was freed.
    fn name_freed(&mut self, name: &str) {
        if let Some((prefix, n)) = generated_number(name) {
            if let Some(h) = self.name_hints.get_mut(prefix) {
                *h = (*h).min(n);
            }
        }
    }

    /// Takes a connection out of the graph with its counters and hooks, to be put back
    /// exactly by [`Pipeline::reattach`] (a transaction's rollback). Validates the gate as
    /// [`Pipeline::disconnect`]; None if the gate is not connected.
    pub(crate) fn detach(&mut self, from: &str, ogate: u16) -> Result<Option<DetachedGate>> {
        let src = self.id_of(from)?;
        let class = self.node(src).class;
        if ogate >= class.ogates.min(MAX_GATES) {
            return Err(Error::invalid(format!(
                "module '{from}' ({}) has {} output gate(s); gate {ogate} is out of range",
                class.name, class.ogates
            )));
        }
        let Some(og) = self.nodes[src as usize]
            .as_mut()
            .and_then(|n| n.ogates.get_mut(ogate as usize))
            .and_then(Option::take)
        else {
            return Ok(None);
        };
        let mut pos = 0;
        if let Some(dst) = self.nodes[og.dst as usize].as_mut() {
            if let Some(ups) = dst.igates.get_mut(og.igate as usize) {
                if let Some(i) = ups.iter().position(|&(s, g)| s == src && g == ogate) {
                    ups.remove(i);
                    pos = i;
                }
            }
        }
        self.settle(&[src, og.dst])?;
        Ok(Some(DetachedGate {
            src,
            ogate,
            og,
            pos,
        }))
    }

    /// Puts back a connection taken by [`Pipeline::detach`], where it was.
    pub(crate) fn reattach(&mut self, d: DetachedGate) {
        let DetachedGate {
            src,
            ogate,
            og,
            pos,
        } = d;
        let (dst, igate) = (og.dst, og.igate as usize);
        if let Some(d) = self.nodes[dst as usize].as_mut() {
            if d.igates.len() <= igate {
                d.igates.resize_with(igate + 1, Vec::new);
            }
            let ups = &mut d.igates[igate];
            ups.insert(pos.min(ups.len()), (src, ogate));
        }
        if let Some(n) = self.nodes[src as usize].as_mut() {
            if n.ogates.len() <= ogate as usize {
                n.ogates.resize_with(ogate as usize + 1, || None);
            }
            n.ogates[ogate as usize] = Some(og);
        }
        // The graph with this connection was valid before.
        let _ = self.settle(&[src]);
    }

    /// Creates a module (not yet connected). Returns its id and the task ids it registered.
    pub fn add_module(
        &mut self,
        class: &'static ModuleClass,
        name: Option<&str>,
        arg: &Value,
    ) -> Result<(u32, Vec<TaskId>)> {
        let built = self.build_module(class, name, arg)?;
        self.insert_module(built)
    }

    /// Constructs a module instance (parses its argument, allocates its tables) without
    /// changing the graph, so it can run while workers run the graph (BESS builds a module
    /// before it takes the workers' barrier). [`Pipeline::insert_module`] adds it.
    pub fn build_module(
        &self,
        class: &'static ModuleClass,
        name: Option<&str>,
        arg: &Value,
    ) -> Result<BuiltModule> {
        let name = match name {
            Some(n) if !n.is_empty() => {
                if let Some(why) = name_problem(n) {
                    return Err(Error::invalid(format!("module name: {why}")));
                }
                if self.by_name.contains_key(n) {
                    return Err(Error::exists(format!("module '{n}' already exists")));
                }
                n.to_string()
            }
            _ => self.default_name(class),
        };
        let mut init = InitContext::new(&name);
        init.ports = self.ports.clone();
        let inst = (class.create)(&mut init, arg).map_err(|mut e| {
            e.msg = format!("{} '{}': {}", class.name, name, e.msg);
            e
        })?;
        Ok(BuiltModule {
            class,
            name,
            init,
            inst,
            arg: arg.clone(),
        })
    }

    /// Adds a module made by [`Pipeline::build_module`] (with the workers that run the graph
    /// paused). Returns its id and the task ids it registered.
    pub fn insert_module(&mut self, built: BuiltModule) -> Result<(u32, Vec<TaskId>)> {
        let BuiltModule {
            class,
            name,
            init,
            inst,
            arg,
        } = built;
        if self.by_name.contains_key(&name) {
            return Err(Error::exists(format!("module '{name}' already exists")));
        }
        let id = match self.free_nodes.first() {
            Some(&i) => i,
            None => self.nodes.len() as u32,
        };
        self.check_attr_sizes(id, &name, &init.attrs)?;
        let inst = match inst {
            Instance::Exclusive(m) => InstanceCell::Exclusive(UnsafeCell::new(m)),
            Instance::Shared(m) => InstanceCell::Shared(m),
        };
        let moved = if self.free_nodes.remove(&id) {
            false
        } else {
            let at = self.nodes.as_ptr();
            self.nodes.push(None);
            // A reallocation moved every node: each gate's destination pointer is stale.
            at != self.nodes.as_ptr()
        };
        let mut tasks = Vec::new();
        for &arg in &init.tasks {
            let t = match self.free_tasks.pop_first() {
                Some(i) => i as usize,
                None => {
                    self.tasks.push(None);
                    self.tasks.len() - 1
                }
            };
            self.tasks[t] = Some(TaskEntry { module: id, arg });
            tasks.push(TaskId(t as u32));
        }
        for a in &init.attrs {
            self.attr_users
                .entry(a.name.clone())
                .or_default()
                .insert(id);
        }
        let nattrs = init.attrs.len();
        self.nodes[id as usize] = Some(Node {
            name: name.clone(),
            class,
            inst,
            ogates: Vec::new(),
            igates: Vec::new(),
            ihooks: Vec::new(),
            attrs: init.attrs,
            offsets: vec![AttrOffset::NoRead; nattrs],
            drops: (0..class.drop_reasons.len() + CoreDrop::NAMES.len())
                .map(|_| Counter::default())
                .collect(),
            tasks: tasks.clone(),
            prio: 0,
            init_arg: arg,
            warnings: Vec::new(),
            workers: 0,
            multi: false,
            lock: std::sync::atomic::AtomicBool::new(false),
            rt: Vec::new(),
            uncalled: Counter::default(),
            unprocessed: Counter::default(),
            rt_base: Vec::new(),
        });
        self.by_name.insert(name.clone(), id);
        self.name_taken(class, &name);
        if moved {
            self.refresh_gates();
        }
        if let Err(e) = self.settle(&[id]) {
            // Atomic: undo the creation (no packets can be held yet).
            self.drop_node(id);
            return Err(e);
        }
        Ok((id, tasks))
    }

    /// Refuses a new module (to be slot `id`) that declares an attribute under a size other
    /// modules declare it with, with the error a whole-graph assignment names: the modules
    /// declaring those attributes, in slot order, checked as `assign_offsets` checks them.
    fn check_attr_sizes(&self, id: u32, name: &str, attrs: &[AttrSpec]) -> Result<()> {
        let mut ids: BTreeSet<u32> = attrs
            .iter()
            .filter_map(|a| self.attr_users.get(&a.name))
            .flatten()
            .copied()
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        ids.insert(id);
        let shared = |a: &AttrSpec| attrs.iter().any(|b| b.name == a.name);
        let metas: Vec<MetaModule> = ids
            .iter()
            .map(|&i| {
                let (name, attrs) = if i == id {
                    (name.to_string(), attrs.to_vec())
                } else {
                    let n = self.node(i);
                    let mine = n.attrs.iter().filter(|a| shared(a)).cloned().collect();
                    (n.name.clone(), mine)
                };
                MetaModule {
                    name,
                    attrs,
                    downstream: Vec::new(),
                }
            })
            .collect();
        check_declarations(&metas).map_err(|e| Error::invalid(e.to_string()))
    }

    fn drop_node(&mut self, id: u32) -> Node {
        let node = self.nodes[id as usize].take().expect("module exists");
        self.by_name.remove(&node.name);
        self.name_freed(&node.name);
        for t in &node.tasks {
            self.tasks[t.0 as usize] = None;
            self.free_tasks.insert(t.0);
        }
        for a in &node.attrs {
            if let Some(users) = self.attr_users.get_mut(&a.name) {
                users.remove(&id);
                if users.is_empty() {
                    self.attr_users.remove(&a.name);
                }
            }
        }
        if id as usize + 1 == self.nodes.len() {
            // Keep `nodes` no longer than its last module (as a scan for a free slot would
            // find the same slots).
            self.nodes.pop();
            while let Some(None) = self.nodes.last() {
                self.nodes.pop();
                self.free_nodes.pop_last();
            }
        } else {
            self.free_nodes.insert(id);
        }
        node
    }

    /// Destroys a module: disconnects all its gates, frees the packets it holds.
    pub fn remove_module(&mut self, name: &str, ctx: &mut Context) -> Result<Vec<TaskId>> {
        let id = self.id_of(name)?;
        // Disconnect our output gates and every upstream gate pointing at us.
        let ups: Vec<(u32, u16)> = self.node(id).igates.iter().flatten().copied().collect();
        let mut neighbours: Vec<u32> = ups.iter().map(|&(src, _)| src).collect();
        neighbours.extend(self.node(id).ogates.iter().flatten().map(|g| g.dst));
        for (src, og) in ups {
            self.unlink(src, og);
        }
        let nog = self.node(id).ogates.len();
        for og in 0..nog {
            self.unlink(id, og as u16);
        }
        let node = self.drop_node(id);
        match &node.inst {
            InstanceCell::Exclusive(m) => {
                // SAFETY: workers are paused; we own the node now.
                unsafe { (*m.get()).deinit(ctx) }
            }
            InstanceCell::Shared(m) => m.deinit(ctx),
        }
        neighbours.retain(|&n| n != id);
        self.settle(&neighbours)?;
        Ok(node.tasks)
    }

    fn unlink(&mut self, src: u32, ogate: u16) -> bool {
        let Some(slot) = self.nodes[src as usize]
            .as_mut()
            .and_then(|n| n.ogates.get_mut(ogate as usize))
        else {
            return false;
        };
        let Some(og) = slot.take() else { return false };
        if let Some(dst) = self.nodes[og.dst as usize].as_mut() {
            if let Some(ups) = dst.igates.get_mut(og.igate as usize) {
                ups.retain(|&(s, g)| !(s == src && g == ogate));
            }
        }
        true
    }

    /// Connects `from:ogate -> igate:to`, validating gates as BESS does.
    pub fn connect(&mut self, from: &str, ogate: u16, to: &str, igate: u16) -> Result<()> {
        let src = self.id_of(from)?;
        let dst = self.id_of(to)?;
        let (sc, dc) = (self.node(src).class, self.node(dst).class);
        if ogate >= sc.ogates.min(MAX_GATES) {
            return Err(Error::invalid(format!(
                "module '{from}' ({}) has {} output gate(s); gate {ogate} is out of range",
                sc.name, sc.ogates
            )));
        }
        if igate >= dc.igates.min(MAX_GATES) {
            return Err(Error::invalid(format!(
                "module '{to}' ({}) has {} input gate(s); gate {igate} is out of range",
                dc.name, dc.igates
            )));
        }
        if let Some(Some(og)) = self.node(src).ogates.get(ogate as usize) {
            return Err(Error::busy(format!(
                "output gate {ogate} of module '{from}' is already connected to '{}'",
                self.node(og.dst).name
            )));
        }
        {
            let n = self.nodes[src as usize].as_mut().unwrap();
            if n.ogates.len() <= ogate as usize {
                n.ogates.resize_with(ogate as usize + 1, || None);
            }
            n.ogates[ogate as usize] = Some(OGate {
                dst,
                dst_prio: 0,
                igate,
                stats: GateStats::default(),
                track_bits: false,
                hooks: Vec::new(),
                plain: false,
                dst_node: std::ptr::null(),
            });
            let d = self.nodes[dst as usize].as_mut().unwrap();
            if d.igates.len() <= igate as usize {
                d.igates.resize_with(igate as usize + 1, Vec::new);
            }
            d.igates[igate as usize].push((src, ogate));
        }
        if let Err(e) = self.settle(&[src]) {
            self.unlink(src, ogate);
            self.settle(&[src, dst]).expect("previous graph was valid");
            return Err(e);
        }
        Ok(())
    }

    /// Disconnects output gate `ogate` of module `from`. As in BESS, a gate that exists in the
    /// class but is not connected is left as it is (no error); a gate beyond the class's
    /// output gates is EINVAL.
    pub fn disconnect(&mut self, from: &str, ogate: u16) -> Result<()> {
        let src = self.id_of(from)?;
        let class = self.node(src).class;
        if ogate >= class.ogates.min(MAX_GATES) {
            return Err(Error::invalid(format!(
                "module '{from}' ({}) has {} output gate(s); gate {ogate} is out of range",
                class.name, class.ogates
            )));
        }
        let dst = match self.node(src).ogates.get(ogate as usize) {
            Some(Some(g)) => g.dst,
            _ => return Ok(()),
        };
        self.unlink(src, ogate);
        self.settle(&[src, dst])
    }

    /// Recomputes every output gate's `plain` flag and destination pointer (after the node
    /// list moved in memory).
    pub(crate) fn refresh_gates(&mut self) {
        let ids: Vec<u32> = self.live_ids().collect();
        self.refresh_gates_of(&ids);
    }

    /// Recomputes the `plain` flag and destination pointer of the output gates of `ids` (after
    /// a change of their hooks, bit tracking, connections or worker placement).
    fn refresh_gates_of(&mut self, ids: &[u32]) {
        let mut at: Vec<*const Node> = Vec::new();
        for &i in ids {
            let Some(n) = self.nodes[i as usize].as_ref() else {
                continue;
            };
            at.clear();
            at.extend(n.ogates.iter().flatten().map(|g| {
                self.nodes[g.dst as usize]
                    .as_ref()
                    .map_or(std::ptr::null(), |d| d as *const Node)
            }));
            let n = self.nodes[i as usize].as_mut().unwrap();
            let multi = n.multi;
            for (og, &p) in n.ogates.iter_mut().flatten().zip(&at) {
                og.plain = !multi && og.hooks.is_empty() && !og.track_bits;
                og.dst_node = p;
            }
        }
    }

    fn live_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_some())
            .map(|(i, _)| i as u32)
    }

    /// The weakly connected components (modules joined by connections in either direction)
    /// containing the live modules among `seeds`, each sorted by slot.
    fn components_of(&self, seeds: &[u32], sc: &mut Scratch) -> Vec<Vec<u32>> {
        sc.begin(self.nodes.len());
        let mut out = Vec::new();
        for &s in seeds {
            if self.nodes.get(s as usize).is_none_or(|n| n.is_none()) || !sc.visit(s) {
                continue;
            }
            let mut comp = vec![s];
            let mut k = 0;
            while k < comp.len() {
                let n = self.node(comp[k]);
                k += 1;
                let ups = n.igates.iter().flatten().map(|&(src, _)| src);
                let downs = n.ogates.iter().flatten().map(|g| g.dst);
                for j in ups.chain(downs) {
                    if sc.visit(j) {
                        comp.push(j);
                    }
                }
            }
            comp.sort_unstable();
            out.push(comp);
        }
        out
    }

    /// Numbers the members of a component (`sc.local`) and lists its edges by those numbers.
    fn edges(&self, ids: &[u32], sc: &mut Scratch) -> Edges {
        for (k, &i) in ids.iter().enumerate() {
            sc.local[i as usize] = k as u32;
        }
        let mut at = Vec::with_capacity(ids.len() + 1);
        let mut to = Vec::new();
        at.push(0);
        for &i in ids {
            let n = self.node(i);
            to.extend(
                n.ogates
                    .iter()
                    .flatten()
                    .map(|g| sc.local[g.dst as usize] as usize),
            );
            at.push(to.len());
        }
        Edges { at, to }
    }

    /// Recomputes derived state for the whole graph: input-gate priorities and metadata
    /// offsets (every change already keeps them current; see [`Pipeline::settle`]).
    pub fn recompute(&mut self) -> Result<()> {
        let ids: Vec<u32> = self.live_ids().collect();
        self.refresh_gates_of(&ids);
        self.settle(&ids)
    }

    /// Recomputes what is derived from the graph for the components containing `seeds` (the
    /// modules a change touched): metadata offsets and warnings, input-gate priorities, the
    /// output gates' flags; their worker placement is left to the next
    /// [`Pipeline::refresh_workers`]. A component's result is the one a whole-graph
    /// computation gives it, since nothing crosses components. On an error (attributes that
    /// do not fit) nothing is written.
    fn settle(&mut self, seeds: &[u32]) -> Result<()> {
        let mut sc = std::mem::take(&mut self.scratch);
        let r = self.settle_with(seeds, &mut sc);
        self.scratch = sc;
        r
    }

    fn settle_with(&mut self, seeds: &[u32], sc: &mut Scratch) -> Result<()> {
        let comps = self.components_of(seeds, sc);
        let mut results = Vec::with_capacity(comps.len());
        for ids in comps {
            results.push(self.derive(ids, sc)?);
        }
        for mut d in results {
            for (k, &i) in d.ids.iter().enumerate() {
                // Components are disjoint: `local` still numbers this one's members.
                sc.local[i as usize] = k as u32;
            }
            for (k, &i) in d.ids.iter().enumerate() {
                let n = self.nodes[i as usize].as_mut().unwrap();
                match &d.offsets {
                    Some(o) => n.offsets.clone_from(&o[k]),
                    None => n.offsets.clear(),
                }
                for (_, w) in &d.warnings[k] {
                    if !n.warnings.iter().any(|(_, old)| old == w) {
                        tracing::warn!("{w}");
                    }
                }
                n.warnings = std::mem::take(&mut d.warnings[k]);
                n.prio = d.prio[k];
                for g in n.ogates.iter_mut().flatten() {
                    g.dst_prio = d.prio[sc.local[g.dst as usize] as usize];
                }
            }
            self.refresh_gates_of(&d.ids);
            self.recomputed += d.ids.len() as u64;
            self.workers_dirty.append(&mut d.ids);
        }
        if self.workers_dirty.len() > 2 * self.nodes.len() + 64 {
            // A graph nobody refreshes the workers of (tests build those): stay bounded.
            self.workers_dirty = self.live_ids().collect();
        }
        Ok(())
    }

    /// How many times a module's derived state (metadata, priority, gate flags, workers) has
    /// been recomputed so far: a change recomputes the modules of the components it touched,
    /// so what it adds does not grow with the rest of the graph. For tests.
    #[doc(hidden)]
    pub fn recomputed(&self) -> u64 {
        self.recomputed
    }

    /// Metadata offsets and warnings and input-gate priorities of one component (`ids`,
    /// sorted by slot), computed as for the whole graph.
    fn derive(&self, ids: Vec<u32>, sc: &mut Scratch) -> Result<Derived> {
        let edges = self.edges(&ids, sc);
        // Without any attribute in the component there is nothing to place or warn about.
        let any_attrs = ids.iter().any(|&i| !self.node(i).attrs.is_empty());
        let (offsets, warnings) = if any_attrs {
            let metas: Vec<MetaModule> = ids
                .iter()
                .enumerate()
                .map(|(k, &i)| {
                    let n = self.node(i);
                    MetaModule {
                        name: n.name.clone(),
                        attrs: n.attrs.clone(),
                        downstream: edges.of(k).to_vec(),
                    }
                })
                .collect();
            let a = assign_offsets(&metas).map_err(|e| Error::invalid(e.to_string()))?;
            let mut warnings = vec![Vec::new(); ids.len()];
            for ((m, attr), text) in a.warned.into_iter().zip(a.warnings) {
                warnings[m].push((attr, text));
            }
            (Some(a.offsets), warnings)
        } else {
            (None, vec![Vec::new(); ids.len()])
        };
        let prio = longest_paths(&edges);
        Ok(Derived {
            ids,
            offsets,
            warnings,
            prio,
        })
    }

    /// Metadata warnings of the current graph (e.g. attributes read without a writer), by
    /// attribute and then module.
    pub fn warnings(&self) -> Vec<String> {
        let mut all: Vec<(&str, u32, &str)> = self
            .live_ids()
            .flat_map(|i| {
                self.node(i)
                    .warnings
                    .iter()
                    .map(move |(a, w)| (a.as_str(), i, w.as_str()))
            })
            .collect();
        all.sort();
        all.into_iter().map(|(_, _, w)| w.to_string()).collect()
    }

    /// Modules reachable downstream of a module (including itself).
    pub fn reachable_from(&self, start: u32) -> Vec<u32> {
        self.reach(start, false)
    }

    /// Walks downstream. With `stop_at_buffers`, a module other than `start` that has both
    /// input gates and a task of its own (Queue, DRR: BESS's `propagate_workers_ = false`) is
    /// included but not expanded: its own task, not the caller's, runs what follows it.
    fn reach(&self, start: u32, stop_at_buffers: bool) -> Vec<u32> {
        let mut out = Vec::new();
        self.reach_into(start, stop_at_buffers, &mut Scratch::default(), &mut out);
        out
    }

    /// [`Pipeline::reach`] into `out`, marking visits in `sc`.
    fn reach_into(&self, start: u32, stop_at_buffers: bool, sc: &mut Scratch, out: &mut Vec<u32>) {
        sc.begin(self.nodes.len());
        out.clear();
        sc.visit(start);
        out.push(start);
        let mut k = 0;
        while k < out.len() {
            let i = out[k];
            k += 1;
            let n = self.node(i);
            if stop_at_buffers && i != start && n.class.igates > 0 && !n.tasks.is_empty() {
                continue;
            }
            for g in n.ogates.iter().flatten() {
                if sc.visit(g.dst) {
                    out.push(g.dst);
                }
            }
        }
    }

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

    /// Tasks of a module.
    pub fn tasks_of(&self, name: &str) -> Result<Vec<TaskId>> {
        Ok(self.node(self.id_of(name)?).tasks.clone())
    }

    /// The module a task belongs to.
    pub fn task_module(&self, t: TaskId) -> Option<&str> {
        self.task(t).map(|e| self.node(e.module).name.as_str())
    }

    /// All modules, in creation-slot order.
    pub fn modules(&self) -> Vec<ModuleSummary> {
        self.nodes
            .iter()
            .flatten()
            .map(|n| ModuleSummary {
                name: n.name.clone(),
                mclass: n.class.name,
                desc: self.desc_of(n),
            })
            .collect()
    }

    fn desc_of(&self, n: &Node) -> String {
        match &n.inst {
            // SAFETY: a read of module state from the control thread, as BESS does.
            InstanceCell::Exclusive(m) => unsafe { (*m.get()).desc() },
            InstanceCell::Shared(m) => m.desc(),
        }
    }

    /// Class of a module.
    pub fn class_of(&self, name: &str) -> Result<&'static ModuleClass> {
        Ok(self.node(self.id_of(name)?).class)
    }

    /// The argument the module was created with.
    pub fn init_arg_of(&self, name: &str) -> Result<&Value> {
        Ok(&self.node(self.id_of(name)?).init_arg)
    }

    /// Module-specific info value.
    pub fn info_of(&self, name: &str) -> Result<Value> {
        let n = self.node(self.id_of(name)?);
        Ok(match &n.inst {
            // SAFETY: workers running this module are paused by the caller.
            InstanceCell::Exclusive(m) => unsafe { (*m.get()).info() },
            InstanceCell::Shared(m) => m.info(),
        })
    }

    /// The histograms every module keeps ([`Module::histograms`]), by module in
    /// creation-slot order; modules with none are left out. Read while workers run, as
    /// `desc` is (a module's histogram never changes size, so a reading is a few counts
    /// apart from an instant's, never out of bounds).
    pub fn histograms(&self) -> Vec<(String, &'static str, Vec<crate::module::HistogramExport>)> {
        self.nodes
            .iter()
            .flatten()
            .filter_map(|n| {
                let h = match &n.inst {
                    // SAFETY: a read of module state from the control thread, as `desc_of`.
                    InstanceCell::Exclusive(m) => unsafe { (*m.get()).histograms() },
                    InstanceCell::Shared(m) => m.histograms(),
                };
                (!h.is_empty()).then(|| (n.name.clone(), n.class.name, h))
            })
            .collect()
    }

    /// Every connection with its counters.
    pub fn connections(&self) -> Vec<Connection> {
        let mut out = Vec::new();
        for n in self.nodes.iter().flatten() {
            for (g, og) in n.ogates.iter().enumerate() {
                if let Some(og) = og {
                    out.push(Connection {
                        from: n.name.clone(),
                        ogate: g as u16,
                        to: self.node(og.dst).name.clone(),
                        igate: og.igate,
                        counts: og.stats.snapshot(),
                    });
                }
            }
        }
        out
    }

    /// Counters of one output gate.
    pub fn ogate_counts(&self, name: &str, ogate: u16) -> Result<GateCounts> {
        let n = self.node(self.id_of(name)?);
        match n.ogates.get(ogate as usize) {
            Some(Some(g)) => Ok(g.stats.snapshot()),
            _ => Err(Error::not_found(format!(
                "output gate {ogate} of module '{name}' is not connected"
            ))),
        }
    }

    /// Counters of one input gate (the sum over its upstream output gates).
    pub fn igate_counts(&self, name: &str, igate: u16) -> Result<GateCounts> {
        let n = self.node(self.id_of(name)?);
        let mut c = GateCounts::default();
        for &(src, og) in n
            .igates
            .get(igate as usize)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
        {
            if let Some(Some(g)) = self.node(src).ogates.get(og as usize) {
                let s = g.stats.snapshot();
                c.packets += s.packets;
                c.batches += s.batches;
                c.bits += s.bits;
            }
        }
        Ok(c)
    }

    /// Turns bit counting on or off for every output gate of a module (or all modules).
    pub fn track_bits(&mut self, name: Option<&str>, on: bool) -> Result<()> {
        let only = name.map(|n| self.id_of(n)).transpose()?;
        for (i, n) in self.nodes.iter_mut().enumerate() {
            let Some(n) = n else { continue };
            if only.is_some_and(|o| o as usize != i) {
                continue;
            }
            for g in n.ogates.iter_mut().flatten() {
                g.track_bits = on;
            }
        }
        match only {
            Some(id) => self.refresh_gates_of(&[id]),
            None => self.refresh_gates(),
        }
        Ok(())
    }

    /// Drop counters of a module by reason name (only reasons with drops, plus totals).
    pub fn drops_of(&self, name: &str) -> Result<Vec<(String, u64)>> {
        let n = self.node(self.id_of(name)?);
        let mut out = Vec::new();
        for (i, r) in n.class.drop_reasons.iter().enumerate() {
            out.push((r.to_string(), n.drops[i].get()));
        }
        let k = n.class.drop_reasons.len();
        for (i, r) in CoreDrop::NAMES.iter().enumerate() {
            out.push((r.to_string(), n.drops[k + i].get()));
        }
        Ok(out)
    }

    /// Total packets dropped by a module under all reasons.
    pub fn total_drops(&self, name: &str) -> Result<u64> {
        Ok(self.drops_of(name)?.iter().map(|(_, c)| c).sum())
    }

    /// Metadata offsets of a module's attributes.
    pub fn attr_offsets(&self, name: &str) -> Result<Vec<(AttrSpec, AttrOffset)>> {
        let n = self.node(self.id_of(name)?);
        Ok(n.attrs
            .iter()
            .cloned()
            .zip(n.offsets.iter().copied())
            .collect())
    }

    /// Runs a module command (workers that may run the module must be paused by the caller).
    pub fn command(
        &mut self,
        name: &str,
        cmd: &str,
        arg: &Value,
        ctx: &mut Context,
    ) -> Result<Value> {
        let id = self.id_of(name)?;
        let spec = self.command_spec(name, cmd)?;
        let n = self.node(id);
        ctx.enter(self, id);
        let r = match (&n.inst, spec.handler) {
            (InstanceCell::Exclusive(m), Handler::Exclusive(h)) => {
                // SAFETY: exclusive access: the caller paused every worker that can run it.
                h(unsafe { &mut *m.get() }.as_mut() as &mut dyn Any, ctx, arg)
            }
            (InstanceCell::Shared(m), Handler::Shared(h)) => h(m.as_ref() as &dyn Any, ctx, arg),
            _ => Err(handler_mismatch(name, n.class.name, cmd)),
        };
        ctx.flush_outputs(self);
        ctx.drain::<false, false, false>(self);
        r
    }

    /// The table entry of command `cmd` of module `name`; an unknown command is `ENOTSUP`
    /// (as BESS's `RunCommand`), naming the class and listing its commands.
    pub fn command_spec(&self, name: &str, cmd: &str) -> Result<&'static CommandSpec> {
        let n = self.node(self.id_of(name)?);
        n.class.command(cmd).ok_or_else(|| {
            let known: Vec<&str> = n.class.commands.iter().map(|c| c.name).collect();
            Error::unsupported(format!(
                "module '{name}' ({}) has no command '{cmd}' (commands: {})",
                n.class.name,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }

    /// True if module `name` is a [`SharedModule`](crate::module::SharedModule) instance.
    pub fn is_shared(&self, name: &str) -> Result<bool> {
        let n = self.node(self.id_of(name)?);
        Ok(matches!(n.inst, InstanceCell::Shared(_)))
    }

    /// Runs a thread-safe command (`mt_safe` table entry) of a shared instance while workers
    /// may run it. Anything the handler emits is dropped as `unhandled`: only the control
    /// thread runs here, so nothing may go downstream.
    pub fn command_shared(
        &self,
        name: &str,
        cmd: &str,
        arg: &Value,
        ctx: &mut Context,
    ) -> Result<Value> {
        let id = self.id_of(name)?;
        let spec = self.command_spec(name, cmd)?;
        let n = self.node(id);
        let (InstanceCell::Shared(m), Handler::Shared(h), true) =
            (&n.inst, spec.handler, spec.mt_safe)
        else {
            return Err(Error::invalid(format!(
                "command '{cmd}' of module '{name}' ({}) needs the workers paused",
                n.class.name
            )));
        };
        ctx.enter(self, id);
        let r = h(m.as_ref() as &dyn Any, ctx, arg);
        ctx.discard_outputs();
        r
    }

    /// The connected gates of a module on one side (`gate` = None: all of them).
    pub fn hook_gates(&self, module: &str, dir: GateDir, gate: Option<u16>) -> Result<Vec<u16>> {
        let n = self.node(self.id_of(module)?);
        let connected: Vec<u16> = match dir {
            GateDir::Out => n
                .ogates
                .iter()
                .enumerate()
                .filter(|(_, g)| g.is_some())
                .map(|(i, _)| i as u16)
                .collect(),
            GateDir::In => n
                .igates
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.is_empty())
                .map(|(i, _)| i as u16)
                .collect(),
        };
        let side = if dir == GateDir::Out {
            "output"
        } else {
            "input"
        };
        match gate {
            Some(g) if connected.contains(&g) => Ok(vec![g]),
            Some(g) => Err(Error::not_found(format!(
                "{side} gate {g} of module '{module}' is not connected"
            ))),
            None if connected.is_empty() => Err(Error::not_found(format!(
                "module '{module}' has no connected {side} gate"
            ))),
            None => Ok(connected),
        }
    }

    fn hooks_mut(&mut self, id: u32, dir: GateDir, gate: u16) -> &mut Vec<NamedHook> {
        let n = self.nodes[id as usize]
            .as_mut()
            .expect("dangling module id");
        match dir {
            GateDir::Out => &mut n.ogates[gate as usize].as_mut().expect("connected").hooks,
            GateDir::In => {
                if n.ihooks.len() <= gate as usize {
                    n.ihooks.resize_with(gate as usize + 1, Vec::new);
                }
                &mut n.ihooks[gate as usize]
            }
        }
    }

    /// Installs `hook` as `name` on a gate (or on every connected gate of that side). Fails,
    /// changing nothing, if a gate is not connected or already has a hook of that name.
    pub fn add_hook(
        &mut self,
        module: &str,
        dir: GateDir,
        gate: Option<u16>,
        name: &str,
        hook: Arc<dyn GateHook>,
    ) -> Result<()> {
        let gates = self.hook_gates(module, dir, gate)?;
        let id = self.id_of(module)?;
        for &g in &gates {
            if self.hooks_mut(id, dir, g).iter().any(|h| h.name == name) {
                return Err(Error::busy(format!(
                    "gate {g} of module '{module}' already has a hook named '{name}'"
                )));
            }
        }
        for g in gates {
            self.hooks_mut(id, dir, g).push(NamedHook {
                name: name.to_string(),
                hook: hook.clone(),
            });
        }
        self.refresh_gates_of(&[id]);
        Ok(())
    }

    /// Removes the hook `name` from a gate (or every gate of that side); fails if none had it.
    pub fn remove_hook(
        &mut self,
        module: &str,
        dir: GateDir,
        gate: Option<u16>,
        name: &str,
    ) -> Result<()> {
        let gates = self.hook_gates(module, dir, gate)?;
        let id = self.id_of(module)?;
        let mut removed = 0;
        for g in gates {
            let hooks = self.hooks_mut(id, dir, g);
            let before = hooks.len();
            hooks.retain(|h| h.name != name);
            removed += before - hooks.len();
        }
        self.refresh_gates_of(&[id]);
        if removed == 0 {
            return Err(Error::not_found(format!(
                "module '{module}' has no hook named '{name}' on that gate"
            )));
        }
        Ok(())
    }

    /// Every installed hook.
    pub fn hooks(&self) -> Vec<HookPlace> {
        let mut out = Vec::new();
        for n in self.nodes.iter().flatten() {
            for (g, ih) in n.ihooks.iter().enumerate() {
                for h in ih {
                    out.push(HookPlace {
                        module: n.name.clone(),
                        dir: GateDir::In,
                        gate: g as u16,
                        name: h.name.clone(),
                        class: h.hook.class_name(),
                    });
                }
            }
            for (g, og) in n.ogates.iter().enumerate() {
                for h in og.iter().flat_map(|o| o.hooks.iter()) {
                    out.push(HookPlace {
                        module: n.name.clone(),
                        dir: GateDir::Out,
                        gate: g as u16,
                        name: h.name.clone(),
                        class: h.hook.class_name(),
                    });
                }
            }
        }
        out
    }

    /// Turns bit counting on or off for one output gate (or all output gates) of a module.
    pub fn track_gate(&mut self, module: &str, gate: Option<u16>, on: bool) -> Result<()> {
        let gates = self.hook_gates(module, GateDir::Out, gate)?;
        let id = self.id_of(module)?;
        let n = self.nodes[id as usize]
            .as_mut()
            .expect("dangling module id");
        for g in gates {
            if let Some(og) = n.ogates[g as usize].as_mut() {
                og.track_bits = on;
            }
        }
        self.refresh_gates_of(&[id]);
        Ok(())
    }

    /// Whether bits are counted on an output gate.
    pub fn is_tracked(&self, module: &str, gate: u16) -> Result<bool> {
        let n = self.node(self.id_of(module)?);
        Ok(matches!(n.ogates.get(gate as usize), Some(Some(g)) if g.track_bits))
    }

    /// Resets the counters of one output gate (Track's `reset`); the gate must be connected.
    pub fn reset_gate_stats(&self, module: &str, gate: u16) -> Result<()> {
        let n = self.node(self.id_of(module)?);
        let Some(Some(g)) = n.ogates.get(gate as usize) else {
            return Err(Error::not_found(format!(
                "output gate {gate} of module '{module}' is not connected"
            )));
        };
        g.stats.packets.reset();
        g.stats.batches.reset();
        g.stats.bits.reset();
        Ok(())
    }

    /// Checks the graph's bookkeeping and everything derived from it against a computation
    /// from scratch over the whole graph (metadata offsets and warnings, input-gate
    /// priorities, worker placement from `task_worker`, output gates' flags and pointers);
    /// names the first difference. For tests: it costs a whole-graph computation.
    #[doc(hidden)]
    pub fn verify(
        &self,
        task_worker: &dyn Fn(TaskId) -> Option<usize>,
    ) -> std::result::Result<(), String> {
        let ids: Vec<u32> = self.live_ids().collect();
        if ids.len() != self.by_name.len() {
            return Err(format!(
                "{} modules, {} names",
                ids.len(),
                self.by_name.len()
            ));
        }
        if matches!(self.nodes.last(), Some(None)) {
            return Err("the module list ends in an empty slot".into());
        }
        let empty: BTreeSet<u32> = (0..self.nodes.len() as u32)
            .filter(|&i| self.nodes[i as usize].is_none())
            .collect();
        if empty != self.free_nodes {
            return Err(format!("free slots {:?}, empty {empty:?}", self.free_nodes));
        }
        let empty: BTreeSet<u32> = (0..self.tasks.len() as u32)
            .filter(|&t| self.tasks[t as usize].is_none())
            .collect();
        if empty != self.free_tasks {
            return Err(format!("free tasks {:?}, empty {empty:?}", self.free_tasks));
        }
        let mut users: HashMap<String, BTreeSet<u32>> = HashMap::new();
        for &i in &ids {
            let n = self.node(i);
            if self.by_name.get(&n.name) != Some(&i) {
                return Err(format!("module '{}' is not named by slot {i}", n.name));
            }
            for t in &n.tasks {
                if self.task(*t).map(|e| e.module) != Some(i) {
                    return Err(format!("task {t:?} of '{}' is not its", n.name));
                }
            }
            for a in &n.attrs {
                users.entry(a.name.clone()).or_default().insert(i);
            }
            for (g, og) in n.ogates.iter().enumerate() {
                let Some(og) = og else { continue };
                let Some(d) = self.nodes.get(og.dst as usize).and_then(|d| d.as_ref()) else {
                    return Err(format!("gate {}:{g} leads to an empty slot", n.name));
                };
                if !d
                    .igates
                    .get(og.igate as usize)
                    .is_some_and(|u| u.contains(&(i, g as u16)))
                {
                    return Err(format!(
                        "gate {}:{g} is not among {}'s inputs",
                        n.name, d.name
                    ));
                }
                if !std::ptr::eq(og.dst_node, d) {
                    return Err(format!("gate {}:{g} points elsewhere", n.name));
                }
                if og.plain != (!n.multi && og.hooks.is_empty() && !og.track_bits) {
                    return Err(format!("gate {}:{g} has a stale fast-path flag", n.name));
                }
                if og.dst_prio != d.prio {
                    return Err(format!("gate {}:{g} has a stale priority", n.name));
                }
            }
            for (ig, ups) in n.igates.iter().enumerate() {
                for &(src, g) in ups {
                    let back = self
                        .nodes
                        .get(src as usize)
                        .and_then(|s| s.as_ref())
                        .and_then(|s| s.ogates.get(g as usize))
                        .and_then(|o| o.as_ref());
                    if !back.is_some_and(|o| o.dst == i && o.igate as usize == ig) {
                        return Err(format!("input {}:{ig} lists a gate that is not", n.name));
                    }
                }
            }
        }
        if users != self.attr_users {
            return Err("attribute users differ".into());
        }
        for (t, &h) in &self.name_hints {
            if let Some(i) = (0..h).find(|i| !self.by_name.contains_key(&format!("{t}{i}"))) {
                return Err(format!("'{t}{i}' is free below the name hint {h}"));
            }
        }
        for (t, e) in self.tasks.iter().enumerate() {
            if let Some(e) = e {
                if !self.nodes.get(e.module as usize).is_some_and(|n| {
                    n.as_ref()
                        .is_some_and(|n| n.tasks.contains(&TaskId(t as u32)))
                }) {
                    return Err(format!("task {t} belongs to no module"));
                }
            }
        }
        // Metadata over the whole graph at once.
        let index: HashMap<u32, usize> = ids.iter().enumerate().map(|(k, &i)| (i, k)).collect();
        let downstream: Vec<Vec<usize>> = ids
            .iter()
            .map(|&i| {
                self.node(i)
                    .ogates
                    .iter()
                    .flatten()
                    .map(|g| index[&g.dst])
                    .collect()
            })
            .collect();
        let metas: Vec<MetaModule> = ids
            .iter()
            .zip(&downstream)
            .map(|(&i, d)| MetaModule {
                name: self.node(i).name.clone(),
                attrs: self.node(i).attrs.clone(),
                downstream: d.clone(),
            })
            .collect();
        let a = assign_offsets(&metas).map_err(|e| e.to_string())?;
        for (k, &i) in ids.iter().enumerate() {
            let n = self.node(i);
            let want: &[AttrOffset] = if n.attrs.is_empty() {
                &[]
            } else {
                &a.offsets[k]
            };
            if n.offsets != want {
                return Err(format!(
                    "'{}': offsets {:?}, want {want:?}",
                    n.name, n.offsets
                ));
            }
        }
        if self.warnings() != a.warnings {
            return Err(format!(
                "warnings {:?}, want {:?}",
                self.warnings(),
                a.warnings
            ));
        }
        // Priorities by relaxation over each component, and worker placement.
        for comp in self.components_of(&ids, &mut Scratch::default()) {
            let local: HashMap<u32, usize> =
                comp.iter().enumerate().map(|(k, &i)| (i, k)).collect();
            let down: Vec<Vec<usize>> = comp
                .iter()
                .map(|&i| {
                    let n = self.node(i);
                    n.ogates.iter().flatten().map(|g| local[&g.dst]).collect()
                })
                .collect();
            let cap = comp.len() as u32;
            let mut dist = vec![0u32; comp.len()];
            for _ in 0..comp.len() {
                let mut changed = false;
                for (k, ds) in down.iter().enumerate() {
                    for &d in ds {
                        if d != k && dist[d] < dist[k] + 1 && dist[k] < cap {
                            dist[d] = dist[k] + 1;
                            changed = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
            for (k, &i) in comp.iter().enumerate() {
                if self.node(i).prio != dist[k] {
                    return Err(format!(
                        "'{}': priority {}, want {}",
                        self.node(i).name,
                        self.node(i).prio,
                        dist[k]
                    ));
                }
            }
        }
        let mut masks: HashMap<u32, u64> = HashMap::new();
        let (mut sc, mut walk) = (Scratch::default(), Vec::new());
        for (t, e) in self.tasks.iter().enumerate() {
            let Some(e) = e else { continue };
            let Some(w) = task_worker(TaskId(t as u32)) else {
                continue;
            };
            self.reach_into(e.module, true, &mut sc, &mut walk);
            for &m in &walk {
                *masks.entry(m).or_default() |= 1u64 << (w % 64);
            }
        }
        for &i in &ids {
            let n = self.node(i);
            let want = masks.get(&i).copied().unwrap_or(0);
            if n.workers != want || n.multi != (want.count_ones() > 1) {
                return Err(format!(
                    "'{}': workers {:#x}, want {want:#x}",
                    n.name, n.workers
                ));
            }
        }
        Ok(())
    }

    /// Resets every gate and drop counter.
    pub fn reset_stats(&self) {
        for n in self.nodes.iter().flatten() {
            for g in n.ogates.iter().flatten() {
                g.stats.packets.reset();
                g.stats.batches.reset();
                g.stats.bits.reset();
            }
            for d in n.drops.iter() {
                d.reset();
            }
        }
    }
}

/// A name of the form `<prefix><n>` as a generated name has it (`n` in decimal without
/// leading zeros): the prefix and `n`.
fn generated_number(name: &str) -> Option<(&str, u64)> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (prefix, num) = name.split_at(name.len() - digits);
    if num.is_empty() || (num.len() > 1 && num.starts_with('0')) {
        return None;
    }
    Some((prefix, num.parse().ok()?))
}

/// Longest-path distance of each module of a component from the modules nothing feeds
/// (`downstream[k]`: the modules module `k` feeds, by index; self-loops ignored), which
/// orders pending batches so that batches for the same input gate meet before it runs
/// (BESS's igate priority). In a component with a loop, distances grow along the loop until
/// they reach the component's size, as an iterative relaxation bounded by it gives.
fn longest_paths(edges: &Edges) -> Vec<u32> {
    let n = edges.len();
    let mut dist = vec![0u32; n];
    // Kahn's order: exact for a loop-free component, in time linear in its size.
    let mut indeg = vec![0u32; n];
    for k in 0..n {
        for &d in edges.of(k) {
            if d != k {
                indeg[d] += 1;
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&k| indeg[k] == 0).collect();
    let mut done = 0;
    while let Some(k) = ready.pop() {
        done += 1;
        for &d in edges.of(k) {
            if d != k {
                dist[d] = dist[d].max(dist[k] + 1);
                indeg[d] -= 1;
                if indeg[d] == 0 {
                    ready.push(d);
                }
            }
        }
    }
    if done == n {
        return dist;
    }
    // A loop: relax edges in slot order until nothing changes, distances bounded by the
    // component's size (at most that many passes).
    dist.iter_mut().for_each(|d| *d = 0);
    let cap = n as u32;
    for _ in 0..n {
        let mut changed = false;
        for k in 0..n {
            for &d in edges.of(k) {
                if d != k && dist[d] < dist[k] + 1 && dist[k] < cap {
                    dist[d] = dist[k] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    dist
}

/// A class whose command entry's handler kind does not match its instance kind (a class bug).
fn handler_mismatch(name: &str, class: &str, cmd: &str) -> Error {
    Error::unsupported(format!(
        "command '{cmd}' of module '{name}' ({class}) has a handler for the other kind of instance"
    ))
}

//! The module graph: instances, gates, connections, tasks, and what is derived from them on
//! every change (input-gate order for batch merging, metadata offsets).
//!
//! The control thread changes the graph only while the workers that run it are paused; the
//! workers read it without locks.

use std::cell::UnsafeCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::drop::CoreDrop;
use crate::error::{Error, Result};
use crate::exec::Context;
use crate::hook::NamedHook;
use crate::metadata::{check_declarations, AttrOffset, AttrSpec, MetaModule};
use crate::module::{InitContext, Instance, Module, ModuleClass, SharedModule, MAX_GATES};
use crate::sched::TaskId;
use crate::value::Value;

mod command;
mod derive;
mod hooks;
mod runtime;
mod verify;

pub use crate::counter::Counter;
pub use crate::names::{name_problem, valid_name, MAX_NAME_LEN};
use derive::Scratch;
pub(crate) use runtime::RtSlot;
pub use runtime::{ModuleRuntime, WorkerRuntime};

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

// SAFETY: an Exclusive instance reached by several workers (`Node::multi`, kept current by
// `set_task_workers`) is run only under its node lock, and the control thread mutates only
// while the workers are paused.
unsafe impl Sync for Pipeline {}
// SAFETY: the module instances are `Send` (the `Module` and `SharedModule` traits require
// it), and the gates' `dst_node` pointers point into the heap-allocated node list, which
// stays where it is when the `Pipeline` value moves to another thread.
unsafe impl Send for Pipeline {}

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

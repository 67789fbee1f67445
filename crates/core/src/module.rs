//! The module API: classes, instances, commands.
//!
//! A module class is a static [`ModuleClass`] descriptor (BESS's `ADD_MODULE`): its name, help
//! text, gate counts, argument message, command table and named drop reasons, plus a
//! constructor. Adding a class is adding one file with one such descriptor and one line in the
//! class registry (`bessemer_modules::classes()`).

use crate::batch::PacketBatch;
use crate::error::{Error, Result};
use crate::exec::Context;
use crate::metadata::AttrSpec;
use crate::sched::TaskResult;
use crate::value::Value;

/// Most gates a module may have in each direction (BESS's MAX_GATES).
pub const MAX_GATES: u16 = 8192;

/// One command of a module class (BESS's `Commands` table entry).
#[derive(Clone, Copy, Debug)]
pub struct CommandSpec {
    /// Command name, e.g. "add".
    pub name: &'static str,
    /// Argument message type, e.g. "ExactMatchCommandAddArg".
    pub arg_type: &'static str,
    /// One-line description.
    pub help: &'static str,
    /// BESS's `Command::THREAD_SAFE`: the command only reads, or changes state the module
    /// guards itself, so it may run while workers run the module.
    pub mt_safe: bool,
}

/// A module class descriptor.
pub struct ModuleClass {
    /// BESS class name, e.g. "Source".
    pub name: &'static str,
    /// Template for automatic instance names (BESS's, e.g. "source" → source0, source1, ...).
    pub name_template: &'static str,
    /// Help text shown by `show mclass`.
    pub help: &'static str,
    /// Argument message type name, e.g. "SourceArg".
    pub arg_type: &'static str,
    /// Documentation of the argument fields, one line per field ("name: type — meaning").
    pub arg_doc: &'static [&'static str],
    /// Number of input gates.
    pub igates: u16,
    /// Number of output gates.
    pub ogates: u16,
    /// Commands the class accepts.
    pub commands: &'static [CommandSpec],
    /// Named reasons a module of this class drops packets (index = reason id).
    pub drop_reasons: &'static [&'static str],
    /// BESS's `max_allowed_workers_`: true if one instance may be run by several workers at
    /// once (BESS: `Worker::kMaxWorkers`), false if by one. A placement beyond it is reported by
    /// `CheckSchedulingConstraints`; the runner still executes it safely (see `graph::Node`).
    pub mt_safe: bool,
    /// Constructs an instance from its argument.
    pub create: fn(&mut InitContext, &Value) -> Result<Instance>,
}

impl std::fmt::Debug for ModuleClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleClass")
            .field("name", &self.name)
            .finish()
    }
}

impl ModuleClass {
    /// Looks up a command by name.
    pub fn command(&self, name: &str) -> Option<&'static CommandSpec> {
        self.commands.iter().find(|c| c.name == name)
    }

    /// Help text in the format `show mclass` prints.
    pub fn describe(&self) -> String {
        let mut s = format!("{} — {}\n", self.name, self.help);
        s += &format!(
            "  gates: {} input, {} output\n  argument: {}\n",
            self.igates, self.ogates, self.arg_type
        );
        for line in self.arg_doc {
            s += &format!("    {line}\n");
        }
        if !self.commands.is_empty() {
            s += "  commands:\n";
            for c in self.commands {
                s += &format!("    {}({}): {}\n", c.name, c.arg_type, c.help);
            }
        }
        if !self.drop_reasons.is_empty() {
            s += &format!("  drop reasons: {}\n", self.drop_reasons.join(", "));
        }
        s
    }
}

/// What a class constructor gets besides its argument.
pub struct InitContext {
    /// The instance name chosen.
    pub name: String,
    pub(crate) tasks: Vec<u64>,
    pub(crate) attrs: Vec<AttrSpec>,
    pub(crate) ports: crate::port::PortTable,
}

impl InitContext {
    /// A context for constructing module `name` (tests and the engine).
    pub fn new(name: &str) -> InitContext {
        InitContext {
            name: name.to_string(),
            tasks: Vec::new(),
            attrs: Vec::new(),
            ports: crate::port::PortTable::new(),
        }
    }

    /// Registers a task; the scheduler will call `run_task(ctx, arg)`. Returns the task index.
    pub fn register_task(&mut self, arg: u64) -> usize {
        self.tasks.push(arg);
        self.tasks.len() - 1
    }

    /// Declares a metadata attribute; returns its id for [`Context::attr`].
    pub fn add_attr(&mut self, spec: AttrSpec) -> Result<usize> {
        if self.attrs.iter().any(|a| a.name == spec.name) {
            return Err(Error::invalid(format!(
                "module '{}' declares metadata attribute '{}' twice",
                self.name, spec.name
            )));
        }
        if spec.size == 0 || spec.size > crate::metadata::MAX_ATTR_SIZE {
            return Err(Error::invalid(format!(
                "metadata attribute '{}' has size {} (must be 1..={})",
                spec.name,
                spec.size,
                crate::metadata::MAX_ATTR_SIZE
            )));
        }
        if self.attrs.len() == crate::metadata::MAX_ATTRS_PER_MODULE {
            return Err(Error::invalid(format!(
                "module '{}' declares more than {} metadata attributes",
                self.name,
                crate::metadata::MAX_ATTRS_PER_MODULE
            )));
        }
        self.attrs.push(spec);
        Ok(self.attrs.len() - 1)
    }

    /// Looks up a port by name (for the I/O modules).
    pub fn port(&self, name: &str) -> Result<std::sync::Arc<crate::port::PortHandle>> {
        self.ports.get(name)
    }

    /// Tasks registered so far.
    pub fn tasks(&self) -> &[u64] {
        &self.tasks
    }

    /// Attributes declared so far.
    pub fn attrs(&self) -> &[AttrSpec] {
        &self.attrs
    }
}

/// A module instance run by one worker at a time.
pub trait Module: Send + 'static {
    /// Processes a batch arriving on input gate `igate`. Every packet must be emitted,
    /// forwarded, freed or dropped; any left in `batch` are dropped as "unhandled".
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        let _ = igate;
        ctx.drop_batch(batch, DROP_UNHANDLED);
    }

    /// Runs one of the module's tasks (registered at init); returns what it did.
    fn run_task(&mut self, ctx: &mut Context, arg: u64) -> TaskResult {
        let _ = (ctx, arg);
        TaskResult {
            block: true,
            packets: 0,
            bits: 0,
        }
    }

    /// Handles a command from the class's command table.
    fn command(&mut self, ctx: &mut Context, cmd: &str, arg: &Value) -> Result<Value> {
        let _ = (ctx, arg);
        Err(Error::unsupported(format!(
            "command '{cmd}' is not supported"
        )))
    }

    /// One-line description for `ListModules` / `show module`.
    fn desc(&self) -> String {
        String::new()
    }

    /// Module-specific details for `GetModuleInfo`.
    fn info(&self) -> Value {
        Value::Null
    }

    /// Releases any packets the module holds (called before destruction, workers paused).
    fn deinit(&mut self, ctx: &mut Context) {
        let _ = ctx;
    }
}

/// A module instance that several workers may run concurrently (`&self` entry points).
pub trait SharedModule: Send + Sync + 'static {
    /// As [`Module::process_batch`].
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16);
    /// As [`Module::run_task`].
    fn run_task(&self, ctx: &mut Context, arg: u64) -> TaskResult;
    /// As [`Module::command`].
    fn command(&self, ctx: &mut Context, cmd: &str, arg: &Value) -> Result<Value> {
        let _ = (ctx, arg);
        Err(Error::unsupported(format!(
            "command '{cmd}' is not supported"
        )))
    }
    /// As [`Module::desc`].
    fn desc(&self) -> String {
        String::new()
    }
    /// As [`Module::info`].
    fn info(&self) -> Value {
        Value::Null
    }
    /// As [`Module::deinit`].
    fn deinit(&self, ctx: &mut Context) {
        let _ = ctx;
    }
}

/// A constructed module instance.
pub enum Instance {
    /// Run by at most one worker (the graph checker enforces it).
    Exclusive(Box<dyn Module>),
    /// Safe to run from several workers.
    Shared(Box<dyn SharedModule>),
}

/// Drop reason id every class has: packets a module left unhandled.
pub const DROP_UNHANDLED: usize = usize::MAX;
/// Drop reason id every class has: packets sent to an unconnected output gate.
pub const DROP_DEADEND: usize = usize::MAX - 1;

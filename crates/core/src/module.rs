//! The module API: classes, instances, commands.
//!
//! A module class is a static [`ModuleClass`] descriptor (BESS's `ADD_MODULE`): its name, help
//! text, gate counts, argument message, command table and named drop reasons, plus a
//! constructor. Adding a class is adding one file with one such descriptor and one line in the
//! class registry (`bessemer_modules::classes()`).
//!
//! Each command table entry carries its handler ([`handler!`](crate::handler)); the core finds
//! the entry by name and calls it. Each class's drop reasons are one enum declared with
//! [`drop_reasons!`](crate::drop_reasons), whose variants are both counter index and printed
//! name; the reasons every class has are [`CoreDrop`].

use std::any::Any;

use crate::batch::PacketBatch;
use crate::error::{Error, Result};
use crate::exec::Context;
use crate::metadata::AttrSpec;
use crate::sched::TaskResult;
use crate::value::Value;

pub use crate::drop::{CoreDrop, DropReason};

/// Most gates a module may have in each direction (BESS's MAX_GATES).
pub const MAX_GATES: u16 = 8192;

/// [`ModuleClass::max_workers`] of a class any number of workers may run at once (BESS's
/// `Worker::kMaxWorkers`, which is also the most workers there can be).
pub const ALL_WORKERS: u32 = crate::limits::MAX_WORKERS as u32;

/// A command handler bound to its table entry. The instance arrives as `dyn Any` and is
/// downcast to the class's type by the handler ([`handler!`](crate::handler) writes that part).
#[derive(Clone, Copy)]
pub enum Handler {
    /// Runs on an exclusive ([`Module`]) instance, with `&mut` access.
    Exclusive(fn(&mut dyn Any, &mut Context, &Value) -> Result<Value>),
    /// Runs on a [`SharedModule`] instance, with `&` access.
    Shared(fn(&dyn Any, &mut Context, &Value) -> Result<Value>),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handler::Exclusive(_) => "Handler::Exclusive",
            Handler::Shared(_) => "Handler::Shared",
        })
    }
}

/// The instance a command handler runs on, as its class's type `T`. A table entry whose
/// handler names another type is a class bug: it panics (the module tests call every command
/// of every class).
#[doc(hidden)]
pub fn downcast_mut<T: Any>(m: &mut dyn Any) -> &mut T {
    m.downcast_mut::<T>()
        .expect("command handler bound to another module type")
}

/// As [`downcast_mut`], for shared instances.
#[doc(hidden)]
pub fn downcast_ref<T: Any>(m: &dyn Any) -> &T {
    m.downcast_ref::<T>()
        .expect("command handler bound to another module type")
}

/// A [`Handler`] calling a method (or closure) typed on the class's instance type:
/// `handler!(Exclusive Source, Source::cmd_set_burst)` for a `fn(&mut Source, &mut Context,
/// &Value) -> Result<Value>`, `handler!(Shared Queue, Queue::cmd_get_status)` for a
/// `fn(&Queue, &mut Context, &Value) -> Result<Value>`.
#[macro_export]
macro_rules! handler {
    (Exclusive $t:ty, $f:expr) => {
        $crate::module::Handler::Exclusive(|m, ctx, arg| {
            let f: fn(
                &mut $t,
                &mut $crate::Context,
                &$crate::Value,
            ) -> $crate::Result<$crate::Value> = $f;
            f($crate::module::downcast_mut::<$t>(m), ctx, arg)
        })
    };
    (Shared $t:ty, $f:expr) => {
        $crate::module::Handler::Shared(|m, ctx, arg| {
            let f: fn(&$t, &mut $crate::Context, &$crate::Value) -> $crate::Result<$crate::Value> =
                $f;
            f($crate::module::downcast_ref::<$t>(m), ctx, arg)
        })
    };
}

/// One command of a module class (BESS's `Commands` table entry), bound to its handler.
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
    /// The message the command answers with (a `bess.pb` message name without the package):
    /// BESS's `<Class>Command<Cmd>Response` where the protocol has one, a class's own
    /// message where BESS answers with that (`get_initial_arg` → `ExactMatchArg`), else
    /// `EmptyArg`. The daemon encodes the handler's result as this message.
    pub reply_type: &'static str,
    /// Whether the command changes what the module does to packets (its rules or
    /// settings): the daemon brings state derived from the pipeline (XDP offloads) up to
    /// date after such a command, and only after one. Reading, and reading-and-clearing
    /// statistics, do not.
    pub mutates: bool,
    /// What runs the command.
    pub handler: Handler,
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
    /// Named reasons a module of this class drops packets, in counter order: the `NAMES` of
    /// the class's [`drop_reasons!`](crate::drop_reasons) enum.
    pub drop_reasons: &'static [&'static str],
    /// BESS's `max_allowed_workers_`: how many workers may run one instance at once —
    /// [`ALL_WORKERS`] (BESS's `Worker::kMaxWorkers`) for most stateless classes and the
    /// classifiers, 1 (BESS's default) for most stateful ones, 2 for NAT. A placement beyond it
    /// is reported by `CheckSchedulingConstraints`; the runner still executes it safely (see
    /// `graph::Node`).
    pub max_workers: u32,
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
        // Thread safety and what `duplicate` (docs/multicore.md) makes of the class.
        s += &match self.max_workers {
            1 => "  workers: one; duplicated: a copy per worker with its own state (commands on \
                  the template name reach every copy)\n"
                .to_string(),
            ALL_WORKERS.. => "  workers: any number; duplicated: a copy per worker (its own \
                              state), or one instance the copies share (the template \
                              references it)\n"
                .to_string(),
            n => format!(
                "  workers: up to {n}; duplicated: a copy per worker with its own state \
                 (commands on the template name reach every copy)\n"
            ),
        };
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
pub trait Module: Any + Send {
    /// Processes a batch arriving on input gate `igate`. Every packet must be emitted,
    /// forwarded, freed or dropped; any left in `batch` are dropped as "unhandled".
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        let _ = igate;
        ctx.drop_batch(batch, CoreDrop::Unhandled);
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

    /// One-line description for `ListModules` / `show module`.
    fn desc(&self) -> String {
        String::new()
    }

    /// Module-specific details for `GetModuleInfo`.
    fn info(&self) -> Value {
        Value::Null
    }

    /// The histograms the module keeps (Measure's latency and jitter), for `show latency`
    /// and Prometheus; read from the control thread while workers run, as `desc` is.
    fn histograms(&self) -> Vec<HistogramExport> {
        Vec::new()
    }

    /// Releases any packets the module holds (called before destruction, workers paused).
    fn deinit(&mut self, ctx: &mut Context) {
        let _ = ctx;
    }
}

/// A module instance that several workers may run concurrently (`&self` entry points).
pub trait SharedModule: Any + Send + Sync {
    /// As [`Module::process_batch`].
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16);
    /// As [`Module::run_task`].
    fn run_task(&self, ctx: &mut Context, arg: u64) -> TaskResult;
    /// As [`Module::desc`].
    fn desc(&self) -> String {
        String::new()
    }
    /// As [`Module::info`].
    fn info(&self) -> Value {
        Value::Null
    }
    /// As [`Module::histograms`].
    fn histograms(&self) -> Vec<HistogramExport> {
        Vec::new()
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

/// A module's histogram of nanosecond values as the daemon exports it (`show latency`,
/// Prometheus histograms): HDR-style log-spaced buckets, two per power of two of the
/// module's resolution, up to its range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramExport {
    /// What it measures: "latency", "jitter".
    pub name: &'static str,
    /// Upper bounds of the buckets in ns, increasing: `counts[i]` holds the values `v` with
    /// `bounds_ns[i - 1] < v <= bounds_ns[i]`.
    pub bounds_ns: Vec<u64>,
    /// One count per bound, then the values above the last bound (`+Inf`).
    pub counts: Vec<u64>,
    /// Values recorded.
    pub count: u64,
    /// Their sum in ns.
    pub sum_ns: u64,
    /// Values beyond the module's range (counted in the last bucket).
    pub above_range: u64,
    /// The module's own bucket width in ns (values are rounded down to a multiple of it).
    pub resolution_ns: u64,
    /// Smallest and largest value recorded (0 when none).
    pub min_ns: u64,
    /// Largest value recorded.
    pub max_ns: u64,
    /// Percentiles (50, 90, 99, 99.9) and their values in ns.
    pub percentiles: Vec<(f64, u64)>,
}

/// The percentiles `show latency` labels.
pub const EXPORT_PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

/// The HDR-style bounds for a histogram of `resolution` ns buckets up to `range` ns:
/// resolution x 2^k and x 1.5 x 2^k, until one reaches the range.
pub fn export_bounds(resolution: u64, range: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut b = resolution.max(1);
    loop {
        v.push(b);
        if b >= range {
            break;
        }
        let mid = b + b / 2;
        if mid > b && mid < range {
            v.push(mid);
        }
        match b.checked_mul(2) {
            Some(n) => b = n,
            None => break,
        }
    }
    v
}

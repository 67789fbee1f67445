//! A single-threaded harness for packet-level module tests: inject packets into a module's
//! input gate, run tasks, capture what leaves each output gate, and check that every buffer
//! went back to the pool.

use std::sync::{Arc, Mutex};

use crate::batch::{PacketBatch, MAX_BURST};
use crate::error::Result;
use crate::exec::Context;
use crate::graph::Pipeline;
use crate::mem::PagePolicy;
use crate::metadata::METADATA_TOTAL_SIZE;
use crate::module::{InitContext, Instance, Module, ModuleClass};
use crate::pool::PacketPool;
use crate::sched::{TaskId, TaskResult};
use crate::value::Value;

/// One packet seen by a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Packet bytes.
    pub data: Vec<u8>,
    /// The metadata area at capture time.
    pub meta: Vec<u8>,
    /// Input gate of the capture it arrived on.
    pub igate: u16,
}

type Store = Arc<Mutex<Vec<Captured>>>;

thread_local! {
    static NEXT_STORE: std::cell::RefCell<Option<Store>> = const { std::cell::RefCell::new(None) };
    static NEXT_FEED: std::cell::RefCell<Option<Feed>> = const { std::cell::RefCell::new(None) };
}

struct Capture {
    store: Store,
}

impl Module for Capture {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        let mut s = self.store.lock().unwrap();
        for p in batch.pkts() {
            s.push(Captured {
                data: p.data().to_vec(),
                meta: p.metadata()[..METADATA_TOTAL_SIZE].to_vec(),
                igate,
            });
        }
        drop(s);
        ctx.free_batch(batch);
    }
}

/// Test-only class: records every packet it receives, then frees it.
pub static CAPTURE: ModuleClass = ModuleClass {
    name: "TestCapture",
    name_template: "capture",
    help: "records packets for tests",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 64,
    ogates: 0,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, _| {
        let store = NEXT_STORE
            .with(|s| s.borrow_mut().take())
            .unwrap_or_default();
        Ok(Instance::Exclusive(Box::new(Capture { store })))
    },
};

/// A test packet: its bytes and (metadata offset, bytes) pairs to preset.
pub type TestPacket = (Vec<u8>, Vec<(usize, Vec<u8>)>);

type Feed = Arc<Mutex<Vec<TestPacket>>>;

struct Inject {
    feed: Feed,
}

impl Module for Inject {
    fn run_task(&mut self, ctx: &mut Context, _arg: u64) -> TaskResult {
        let items: Vec<_> = {
            let mut f = self.feed.lock().unwrap();
            let n = f.len().min(MAX_BURST);
            f.drain(..n).collect()
        };
        let mut b = PacketBatch::new();
        let mut bits = 0;
        for (bytes, meta) in &items {
            let Some(mut p) = ctx.alloc_any(bytes.len()) else {
                break;
            };
            assert_eq!(p.len(), bytes.len(), "test packet too large");
            p.data_mut().copy_from_slice(bytes);
            for (off, v) in meta {
                p.metadata_mut()[*off..*off + v.len()].copy_from_slice(v);
            }
            bits += p.bits();
            assert!(b.push(p).is_ok(), "batch has room");
        }
        let n = b.len() as u32;
        ctx.forward(0, &mut b);
        TaskResult {
            block: n == 0,
            packets: n,
            bits,
        }
    }
}

/// Test-only class: sends packets queued by the harness out of gate 0.
pub static INJECT: ModuleClass = ModuleClass {
    name: "TestInject",
    name_template: "inject",
    help: "emits packets queued by a test",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 0,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |init: &mut InitContext, _| {
        init.register_task(0);
        let feed = NEXT_FEED
            .with(|s| s.borrow_mut().take())
            .unwrap_or_default();
        Ok(Instance::Exclusive(Box::new(Inject { feed })))
    },
};

/// A graph, a pool and a context on the test thread.
pub struct Harness {
    /// The graph under test.
    pub graph: Pipeline,
    /// The context modules run with.
    pub ctx: Context,
    /// The pool packets come from.
    pub pool: PacketPool,
    feeds: Vec<(String, u16, Feed, TaskId)>,
}

/// Handle to the packets captured at one output gate.
#[derive(Clone)]
pub struct CaptureHandle(Store);

impl CaptureHandle {
    /// Removes and returns everything captured so far.
    pub fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    /// Packet bytes captured so far (removing them).
    pub fn take_data(&self) -> Vec<Vec<u8>> {
        self.take().into_iter().map(|c| c.data).collect()
    }
    /// Number of packets captured and not yet taken.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    /// True if nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A harness with a 4096-buffer pool on plain pages.
    pub fn new() -> Harness {
        let pool = PacketPool::new("test", 4096, PagePolicy::Plain).expect("test pool");
        let ctx = Context::new(0, &pool);
        Harness {
            graph: Pipeline::new(),
            ctx,
            pool,
            feeds: Vec::new(),
        }
    }

    /// Creates a module.
    pub fn add(&mut self, class: &'static ModuleClass, name: &str, arg: &Value) -> Result<String> {
        let (id, _) = self.graph.add_module(class, Some(name), arg)?;
        Ok(self.graph.name_of(id).to_string())
    }

    /// A module's one-line description (`show module`'s desc), or "" if there is no such module.
    pub fn desc(&self, module: &str) -> String {
        self.graph
            .modules()
            .into_iter()
            .find(|m| m.name == module)
            .map(|m| m.desc)
            .unwrap_or_default()
    }

    /// Connects two modules.
    pub fn connect(&mut self, from: &str, ogate: u16, to: &str, igate: u16) -> Result<()> {
        self.graph.connect(from, ogate, to, igate)
    }

    /// Attaches a capture to `module:ogate`.
    pub fn capture(&mut self, module: &str, ogate: u16) -> CaptureHandle {
        let store: Store = Store::default();
        NEXT_STORE.with(|s| *s.borrow_mut() = Some(store.clone()));
        let name = format!("cap_{module}_{ogate}");
        self.graph
            .add_module(&CAPTURE, Some(&name), &Value::Null)
            .expect("capture");
        self.graph
            .connect(module, ogate, &name, 0)
            .expect("connect capture");
        CaptureHandle(store)
    }

    fn feed_for(&mut self, module: &str, igate: u16) -> (Feed, TaskId) {
        if let Some((_, _, f, t)) = self
            .feeds
            .iter()
            .find(|(m, g, _, _)| m == module && *g == igate)
        {
            return (f.clone(), *t);
        }
        let feed: Feed = Feed::default();
        NEXT_FEED.with(|s| *s.borrow_mut() = Some(feed.clone()));
        let name = format!("inj_{module}_{igate}");
        let (_, tasks) = self
            .graph
            .add_module(&INJECT, Some(&name), &Value::Null)
            .expect("injector");
        self.graph
            .connect(&name, 0, module, igate)
            .expect("connect injector");
        self.feeds
            .push((module.to_string(), igate, feed.clone(), tasks[0]));
        (feed, tasks[0])
    }

    /// Sends packets into `module:igate` and runs the graph until they are all processed.
    pub fn inject(&mut self, module: &str, igate: u16, packets: &[Vec<u8>]) {
        let items = packets.iter().map(|p| (p.clone(), Vec::new())).collect();
        self.inject_with_meta(module, igate, items)
    }

    /// As `inject`, with metadata bytes preset at given offsets for each packet.
    pub fn inject_with_meta(&mut self, module: &str, igate: u16, items: Vec<TestPacket>) {
        let (feed, task) = self.feed_for(module, igate);
        feed.lock().unwrap().extend(items);
        for _ in 0..100_000 {
            if feed.lock().unwrap().is_empty() {
                break;
            }
            self.ctx.run_task(&self.graph, task);
        }
    }

    /// Runs task `idx` of a module once.
    pub fn run_task(&mut self, module: &str, idx: usize) -> TaskResult {
        let t = self.graph.tasks_of(module).expect("module")[idx];
        self.ctx.run_task(&self.graph, t)
    }

    /// Runs task `idx` of a module as a worker's round runs a lone task: up to `max_runs`
    /// times while each run reports packets.
    pub fn run_task_group(
        &mut self,
        module: &str,
        idx: usize,
        max_runs: u64,
    ) -> crate::sched::RunGroup {
        let t = self.graph.tasks_of(module).expect("module")[idx];
        self.ctx.run_task_group(&self.graph, t, max_runs)
    }

    /// Runs a module command.
    pub fn command(&mut self, module: &str, cmd: &str, arg: &Value) -> Result<Value> {
        self.graph.command(module, cmd, arg, &mut self.ctx)
    }

    /// Drop count of a module under a reason name.
    pub fn drops(&self, module: &str, reason: &str) -> u64 {
        self.graph
            .drops_of(module)
            .expect("module")
            .into_iter()
            .find(|(r, _)| r == reason)
            .unwrap_or_else(|| panic!("module '{module}' has no drop reason '{reason}'"))
            .1
    }

    /// Buffers currently allocated, jumbo ones included (should be 0 once all packets left
    /// the graph).
    pub fn in_use(&self) -> usize {
        let large = self
            .pool
            .large_made()
            .map_or(0, |l| l.capacity() - l.free_count());
        self.pool.capacity() - self.pool.free_count() + large
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let names: Vec<String> = self.graph.modules().into_iter().map(|m| m.name).collect();
        for n in names {
            let _ = self.graph.remove_module(&n, &mut self.ctx);
        }
        if !std::thread::panicking() {
            assert_eq!(self.in_use(), 0, "packet buffers leaked by the test");
        }
    }
}

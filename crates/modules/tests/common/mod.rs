//! Helpers the integration tests share: engines, class look-up, gate counters, bounded waits
//! and the usual Source/Sink modules. (Each test file uses only some of them.)
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::{ModuleClass, Value};

/// An engine with `buffers` packet buffers on plain pages, workers not pinned.
pub fn engine_with_buffers(buffers: usize) -> Engine {
    Engine::new(EngineConfig {
        buffers,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap()
}

/// An engine with 4096 packet buffers on plain pages, workers not pinned.
pub fn engine() -> Engine {
    engine_with_buffers(4096)
}

/// Adds worker 0 on core 0 and worker 1 on core 1 (core 0 again on a one-CPU machine).
pub fn add_two_workers(e: &mut Engine) {
    e.add_worker(0, 0).unwrap();
    e.add_worker(1, 1 % std::thread::available_parallelism().unwrap().get())
        .unwrap();
}

/// The module class BESS calls `n`.
pub fn class(n: &str) -> &'static ModuleClass {
    bessemer_modules::find(n).unwrap()
}

/// Creates a module of the class BESS calls `class_name`, named `name`, from `arg`.
pub fn add_module(e: &mut Engine, class_name: &str, name: &str, arg: &Value) {
    e.create_module(class(class_name), Some(name), arg).unwrap();
}

/// Creates a Source module named `name` (default arguments).
pub fn add_source(e: &mut Engine, name: &str) {
    add_module(e, "Source", name, &Value::map());
}

/// Creates a Sink module named `name`.
pub fn add_sink(e: &mut Engine, name: &str) {
    add_module(e, "Sink", name, &Value::Null);
}

/// Creates Source `src` and Sink `sink` and connects the source's gate 0 to the sink.
pub fn add_source_to_sink(e: &mut Engine, src: &str, sink: &str) {
    add_source(e, src);
    add_sink(e, sink);
    e.connect(src, 0, sink, 0).unwrap();
}

/// Packets that left output gate `og` of module `from`.
pub fn packets(e: &Engine, from: &str, og: u16) -> u64 {
    e.graph().ogate_counts(from, og).unwrap().packets
}

/// Waits (bounded) until `f` holds.
pub fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

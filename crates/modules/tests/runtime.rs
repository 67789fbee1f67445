//! Runtime sampling (`show runtime`) with real worker threads: calls and packets per module
//! and worker are exact, the sampled cycles are there, and nothing is counted while off.

mod common;

use bessemer_core::graph::{ModuleRuntime, WorkerRuntime};
use bessemer_core::{Engine, Value};
use common::{add_module, add_sink, add_source, add_two_workers, engine, eventually, packets};

fn rt(e: &Engine, name: &str) -> ModuleRuntime {
    e.graph()
        .runtime(true)
        .into_iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no runtime for {name}"))
}

fn total(m: &ModuleRuntime) -> WorkerRuntime {
    m.workers
        .iter()
        .fold(WorkerRuntime::default(), |a, w| WorkerRuntime {
            wid: 0,
            calls: a.calls + w.calls,
            packets: a.packets + w.packets,
            sampled_calls: a.sampled_calls + w.sampled_calls,
            sampled_packets: a.sampled_packets + w.sampled_packets,
            sampled_cycles: a.sampled_cycles + w.sampled_cycles,
        })
}

/// Source -> 8 x Bypass -> Sink on one worker.
fn chain(e: &mut Engine) {
    e.add_worker(0, 0).unwrap();
    add_source(e, "src");
    let mut prev = "src".to_string();
    for i in 0..8 {
        let b = format!("bp{i}");
        add_module(e, "Bypass", &b, &Value::map());
        e.connect(&prev, 0, &b, 0).unwrap();
        prev = b;
    }
    add_sink(e, "sink");
    e.connect(&prev, 0, "sink", 0).unwrap();
}

#[test]
fn chain_counts_every_call_and_packet_exactly_and_samples_cycles() {
    let mut e = engine();
    chain(&mut e);
    e.set_runtime(true).unwrap();
    assert!(e.graph().runtime_enabled());
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "bp7", 0) > 200_000));
    e.pause_all().unwrap();
    let src = rt(&e, "src");
    assert_eq!(src.workers.len(), 1, "{src:?}");
    let s = src.workers[0];
    assert_eq!(s.wid, 0);
    // The source's packets are what left its gate; each run sends one batch.
    assert_eq!(s.packets, packets(&e, "src", 0));
    assert!(
        s.calls > 0 && s.sampled_calls > 0 && s.sampled_cycles > 0,
        "{s:?}"
    );
    let batches = e
        .graph()
        .connections()
        .into_iter()
        .find(|c| c.from == "src")
        .unwrap()
        .counts
        .batches;
    assert!(s.calls >= batches);
    for name in ["bp0", "bp3", "bp7", "sink"] {
        let m = rt(&e, name);
        assert_eq!(m.mclass, if name == "sink" { "Sink" } else { "Bypass" });
        assert_eq!(m.workers.len(), 1, "{m:?}");
        let w = m.workers[0];
        assert_eq!(
            (w.wid, w.calls, w.packets),
            (0, batches, s.packets),
            "{name}"
        );
        assert!(w.sampled_calls > 0, "{name}: {w:?}");
        assert!(w.sampled_cycles > 0, "{name}: {w:?}");
        // One sampled run in about RT_PERIOD: far fewer than all.
        assert!(w.sampled_calls < w.calls / 8, "{name}: {w:?}");
        let cpp = w.cycles_per_packet().unwrap();
        assert!(cpp > 0.0 && cpp < 10_000.0, "{name}: {cpp}");
        assert!(w.cycles() > 0);
    }
}

#[test]
fn off_by_default_counts_only_gate_batches_and_samples_nothing() {
    let mut e = engine();
    chain(&mut e);
    assert!(!e.graph().runtime_enabled());
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "bp7", 0) > 10_000));
    e.pause_all().unwrap();
    // Task runs are counted only while sampling is on; batches always (gate counters).
    assert!(rt(&e, "src").workers.is_empty());
    let w = rt(&e, "bp0").workers[0];
    assert_eq!(w.packets, packets(&e, "src", 0));
    assert_eq!((w.sampled_calls, w.sampled_cycles), (0, 0));
}

#[test]
fn a_module_two_workers_run_is_split_per_worker_exactly() {
    let mut e = engine();
    add_two_workers(&mut e);
    e.set_runtime(true).unwrap();
    for src in ["a", "b"] {
        add_source(&mut e, src);
    }
    add_module(&mut e, "Measure", "m", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("a", 0, "m", 0).unwrap();
    e.connect("b", 0, "m", 0).unwrap();
    e.connect("m", 0, "sink", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(
        || packets(&e, "a", 0) > 50_000 && packets(&e, "b", 0) > 50_000
    ));
    e.pause_all().unwrap();
    let m = rt(&e, "m");
    assert_eq!(
        m.workers.iter().map(|w| w.wid).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(m.workers[0].packets, packets(&e, "a", 0));
    assert_eq!(m.workers[1].packets, packets(&e, "b", 0));
    let t = total(&m);
    let sink = total(&rt(&e, "sink"));
    assert_eq!(t.packets, sink.packets);
    assert!(m.workers.iter().all(|w| w.sampled_cycles > 0), "{m:?}");
    // `clear runtime`: counts start afresh (nothing since, while paused), the gate
    // counters other views read go on.
    let before = packets(&e, "m", 0);
    e.clear_runtime().unwrap();
    assert!(rt(&e, "m").workers.is_empty(), "{:?}", rt(&e, "m"));
    assert_eq!(packets(&e, "m", 0), before);
    let raw = |e: &Engine| {
        let all = e.graph().runtime(false);
        total(all.iter().find(|m| m.name == "m").unwrap())
    };
    assert_eq!(raw(&e).packets, t.packets);
    e.resume_all().unwrap();
    assert!(eventually(|| total(&rt(&e, "m")).packets > 1000));
    e.pause_all().unwrap();
    let fresh = total(&rt(&e, "m"));
    assert_eq!(fresh.packets + t.packets, raw(&e).packets);
    assert_eq!(fresh.calls + t.calls, raw(&e).calls);
    assert!(e.graph().runtime_secs() > 0.0);
}

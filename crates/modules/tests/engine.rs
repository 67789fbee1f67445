//! End-to-end tests of the engine with real worker threads: pause/resume, graph changes
//! under traffic, chaining across workers with a Queue, constraint checks and atomic errors.

use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig, WorkerState};
use bessemer_core::mem::PagePolicy;
use bessemer_core::sched::Policy;
use bessemer_core::Value;

fn engine() -> Engine {
    Engine::new(EngineConfig {
        buffers: 4096,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap()
}

fn class(n: &str) -> &'static bessemer_core::ModuleClass {
    bessemer_modules::find(n).unwrap()
}

fn packets(e: &Engine, from: &str, og: u16) -> u64 {
    e.graph().ogate_counts(from, og).unwrap().packets
}

/// Waits (bounded) until `f` holds.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn pause_stops_traffic_and_loses_nothing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Bypass"), Some("bp"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.connect("src", 0, "bp", 0).unwrap();
    e.connect("bp", 0, "sink", 0).unwrap();
    assert!(eventually(|| packets(&e, "bp", 0) > 10_000));
    for _ in 0..20 {
        e.pause_all().unwrap();
        assert_eq!(e.worker_state(0).unwrap(), WorkerState::Paused);
        let (a, b) = (packets(&e, "src", 0), packets(&e, "bp", 0));
        // Every packet that left the source reached the sink (or, before bp was connected
        // to it, bp's dead end): nothing in flight, nothing lost.
        assert_eq!(a, b + e.graph().total_drops("bp").unwrap());
        assert_eq!(
            e.pool().free_count(),
            e.pool().capacity(),
            "buffers outstanding while paused"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(packets(&e, "src", 0), a, "traffic while paused");
        e.resume_all().unwrap();
        assert!(eventually(|| packets(&e, "src", 0) > a));
    }
}

#[test]
fn graph_changes_under_traffic_are_consistent() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.connect("src", 0, "sink", 0).unwrap();
    for i in 0..10 {
        assert!(eventually(|| packets(&e, "src", 0) > 1000));
        // Splice a Bypass in and out while the worker runs.
        let bp = format!("bp{i}");
        e.create_module(class("Bypass"), Some(&bp), &Value::map())
            .unwrap();
        e.disconnect("src", 0).unwrap();
        e.connect("src", 0, &bp, 0).unwrap();
        e.connect(&bp, 0, "sink", 0).unwrap();
        assert!(eventually(|| packets(&e, &bp, 0) > 1000));
        e.destroy_module(&bp).unwrap();
        e.connect("src", 0, "sink", 0).unwrap();
    }
    e.pause_all().unwrap();
    // Between a disconnect and the next connect the source's gate is a dead end; nothing
    // else may be dropped, and every buffer is back.
    for (reason, n) in e.graph().drops_of("src").unwrap() {
        assert!(reason == "deadend" || n == 0, "{reason}: {n}");
    }
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

#[test]
fn queue_chains_two_workers() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.add_worker(1, 1 % std::thread::available_parallelism().unwrap().get())
        .unwrap();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Queue"), Some("q"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.connect("src", 0, "q", 0).unwrap();
    e.connect("q", 0, "sink", 0).unwrap();
    e.attach_task("q", 0, None, Some(1)).unwrap();
    assert_eq!(e.task_places("q").unwrap()[0].wid, Some(1));
    assert!(eventually(|| packets(&e, "q", 0) > 10_000));
    e.pause_all().unwrap();
    let sent = packets(&e, "src", 0);
    let out = packets(&e, "q", 0);
    let dropped = e.graph().total_drops("q").unwrap();
    let st = e.command("q", "get_status", &Value::map()).unwrap();
    let held = st.get("count").and_then(|v| v.as_i64()).unwrap() as u64;
    // Conservation: everything the source sent is out, dropped (queue full) or held.
    assert_eq!(
        sent,
        out + dropped + held,
        "sent {sent} out {out} dropped {dropped} held {held}"
    );
    e.reset_all().unwrap();
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

#[test]
fn unsafe_sharing_across_workers_is_refused() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.add_worker(1, 0).unwrap();
    e.create_module(class("Source"), Some("a"), &Value::map())
        .unwrap();
    e.create_module(class("Source"), Some("b"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.connect("a", 0, "sink", 0).unwrap();
    let err = e.connect("b", 0, "sink", 0).unwrap_err();
    assert!(
        err.msg.contains("'sink'") && err.msg.contains("workers 0 and 1"),
        "{}",
        err.msg
    );
    // The failed connection left nothing behind.
    assert_eq!(e.graph().connections().len(), 1);
    // Moving a task to another worker is refused the same way, and changes nothing.
    e.attach_task("b", 0, None, Some(0)).unwrap();
    e.connect("b", 0, "sink", 0).unwrap();
    let err = e.attach_task("a", 0, None, Some(1)).unwrap_err();
    assert!(err.msg.contains("not thread-safe"), "{}", err.msg);
    assert_eq!(
        e.task_places("a").unwrap()[0].wid,
        Some(0),
        "failed attach restored the old place"
    );
    assert!(eventually(
        || packets(&e, "a", 0) > 0 && packets(&e, "b", 0) > 0
    ));
}

#[test]
fn bad_requests_name_the_problem_and_change_nothing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    let before = e.graph().modules().len();
    let err = e
        .create_module(class("Source"), Some("src"), &Value::map())
        .unwrap_err();
    assert!(err.msg.contains("'src' already exists"), "{}", err.msg);
    let err = e
        .create_module(class("Source"), Some("9bad"), &Value::map())
        .unwrap_err();
    assert!(err.msg.contains("not a valid module name"), "{}", err.msg);
    let err = e
        .create_module(class("Source"), None, &Value::map().with("bogus", 1))
        .unwrap_err();
    assert!(err.msg.contains("unknown field 'bogus'"), "{}", err.msg);
    let err = e.connect("src", 1, "sink", 0).unwrap_err();
    assert!(err.msg.contains("gate 1 is out of range"), "{}", err.msg);
    let err = e.connect("src", 0, "nope", 0).unwrap_err();
    assert!(err.msg.contains("no module named 'nope'"), "{}", err.msg);
    let err = e.connect("sink", 0, "src", 0).unwrap_err();
    assert!(err.msg.contains("output gate"), "{}", err.msg);
    e.connect("src", 0, "sink", 0).unwrap();
    let err = e.connect("src", 0, "sink", 0).unwrap_err();
    assert!(err.msg.contains("already connected"), "{}", err.msg);
    let err = e.command("src", "explode", &Value::map()).unwrap_err();
    assert!(err.msg.contains("no command 'explode'"), "{}", err.msg);
    assert!(e.destroy_module("ghost").is_err());
    assert!(e.add_worker(0, 0).is_err());
    assert!(e
        .add_worker(2, 4096)
        .unwrap_err()
        .msg
        .contains("core 4096 does not exist"));
    assert!(e.add_tc(0, "!x", Policy::RoundRobin, None, 0, 1).is_err());
    assert_eq!(e.graph().modules().len(), before);
    assert_eq!(e.graph().connections().len(), 1);
    assert!(
        eventually(|| packets(&e, "src", 0) > 0),
        "pipeline still runs"
    );
}

#[test]
fn default_names_follow_bess_templates() {
    let mut e = engine();
    let a = e.create_module(class("Sink"), None, &Value::Null).unwrap();
    let b = e.create_module(class("Sink"), None, &Value::Null).unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("sink0", "sink1"));
    e.destroy_module("sink0").unwrap();
    assert_eq!(
        e.create_module(class("Sink"), None, &Value::Null).unwrap(),
        "sink0"
    );
}

#[test]
fn tasks_wait_for_a_worker_and_resume_all_starts_one() {
    let mut e = engine();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.connect("src", 0, "sink", 0).unwrap();
    assert_eq!(e.task_places("src").unwrap()[0].wid, None);
    e.resume_all().unwrap();
    assert_eq!(e.worker_ids(), vec![0]);
    assert!(eventually(|| packets(&e, "src", 0) > 0));
}

#[test]
fn traffic_classes_on_a_worker() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.add_tc(
        0,
        "limited",
        Policy::RateLimit {
            resource: bessemer_core::sched::Resource::Packet,
            limit: 100_000,
            max_burst: 0,
        },
        None,
        0,
        1,
    )
    .unwrap();
    e.create_module(class("Source"), Some("src"), &Value::map())
        .unwrap();
    e.create_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    e.connect("src", 0, "sink", 0).unwrap();
    e.attach_task("src", 0, Some("limited"), None).unwrap();
    assert_eq!(e.task_places("src").unwrap()[0].leaf, "!leaf_src:0");
    let p0 = packets(&e, "src", 0);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let rate = (packets(&e, "src", 0) - p0) as f64 / t0.elapsed().as_secs_f64();
    assert!(
        rate > 50_000.0 && rate < 150_000.0,
        "rate {rate} pps, limit 100000"
    );
    assert!(
        e.remove_tc("limited").is_err(),
        "class with a child can't go"
    );
    assert!(e
        .list_tcs()
        .iter()
        .any(|(w, i)| *w == 0 && i.name == "limited"));
}

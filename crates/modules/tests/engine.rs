//! End-to-end tests of the engine with real worker threads: pause/resume, graph changes
//! under traffic, chaining across workers with a Queue, constraint checks and atomic errors.

mod common;

use std::time::{Duration, Instant};

use bessemer_core::engine::WorkerState;
use bessemer_core::sched::Policy;
use bessemer_core::Value;
use common::{
    add_module, add_sink, add_source, add_source_to_sink, add_two_workers, class, engine,
    eventually, packets,
};

#[test]
fn pause_stops_traffic_and_loses_nothing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_module(&mut e, "Bypass", "bp", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("src", 0, "bp", 0).unwrap();
    e.connect("bp", 0, "sink", 0).unwrap();
    e.resume_all().unwrap();
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
    add_source_to_sink(&mut e, "src", "sink");
    e.resume_all().unwrap();
    for i in 0..10 {
        assert!(eventually(|| packets(&e, "src", 0) > 1000));
        // Splice a Bypass in and out while the worker runs.
        let bp = format!("bp{i}");
        add_module(&mut e, "Bypass", &bp, &Value::map());
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
    add_two_workers(&mut e);
    add_source(&mut e, "src");
    add_module(&mut e, "Queue", "q", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("src", 0, "q", 0).unwrap();
    e.connect("q", 0, "sink", 0).unwrap();
    e.attach_task("q", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
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
fn sharing_across_workers_is_reported_runs_safely_and_counts_exactly() {
    let mut e = engine();
    add_two_workers(&mut e);
    for src in ["a", "b"] {
        add_source(&mut e, src);
    }
    // Measure allows every worker in BESS, RoundRobin one; as in BESS, neither placement is
    // refused, and the second is reported.
    add_module(&mut e, "Measure", "m", &Value::map());
    e.create_module(
        class("RoundRobin"),
        Some("rr"),
        &Value::map().with("gates", Value::List(vec![Value::Int(0)])),
    )
    .unwrap();
    add_sink(&mut e, "sink");
    e.connect("m", 0, "rr", 0).unwrap();
    e.connect("rr", 0, "sink", 0).unwrap();
    e.connect("a", 0, "m", 0).unwrap();
    e.connect("b", 0, "m", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    let v = e.constraint_violations();
    assert_eq!(v, vec![("rr".to_string(), vec![0, 1])], "{v:?}");
    assert!(eventually(
        || packets(&e, "a", 0) > 50_000 && packets(&e, "b", 0) > 50_000
    ));
    e.pause_all().unwrap();
    // Both workers ran `m` (serialised); not one packet or count went missing.
    let into_m = packets(&e, "a", 0) + packets(&e, "b", 0);
    let out_m = packets(&e, "m", 0);
    assert_eq!(into_m, out_m + e.graph().total_drops("m").unwrap());
    let out_rr = packets(&e, "rr", 0);
    assert_eq!(out_m, out_rr + e.graph().total_drops("rr").unwrap());
    let sum = e.command("m", "get_summary", &Value::map()).unwrap();
    let seen = sum.get("packets").and_then(|v| v.as_i64()).unwrap_or(-1) as u64;
    assert_eq!(seen, into_m, "Measure's own count is exact too: {sum:?}");
    assert_eq!(e.pool().free_count(), e.pool().capacity());
    // Back on one worker, no violation remains.
    e.attach_task("b", 0, None, Some(0)).unwrap();
    assert!(e.constraint_violations().is_empty());
}

#[test]
fn bad_requests_name_the_problem_and_change_nothing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_sink(&mut e, "sink");
    let before = e.graph().modules().len();
    let err = e
        .create_module(class("Source"), Some("src"), &Value::map())
        .unwrap_err();
    assert!(err.msg.contains("'src' already exists"), "{}", err.msg);
    let long = "x".repeat(bessemer_core::graph::MAX_NAME_LEN + 1);
    let err = e
        .create_module(class("Source"), Some(&long), &Value::map())
        .unwrap_err();
    assert!(
        err.msg.contains("module name: the name is too long"),
        "{}",
        err.msg
    );
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
    e.resume_all().unwrap();
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
    add_source_to_sink(&mut e, "src", "sink");
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
    add_source_to_sink(&mut e, "src", "sink");
    e.attach_task("src", 0, Some("limited"), None).unwrap();
    e.resume_all().unwrap();
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

#[test]
fn new_tasks_are_orphans_until_resume_and_spread_over_workers() {
    let mut e = engine();
    add_two_workers(&mut e);
    e.resume_all().unwrap();
    for i in 0..4 {
        let (src, sink) = (format!("src{i}"), format!("sink{i}"));
        add_source_to_sink(&mut e, &src, &sink);
    }
    // Running workers, but the new tasks are on none of them yet (BESS's orphans).
    assert_eq!(e.task_places("src0").unwrap()[0].wid, None);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(packets(&e, "src0", 0), 0, "an orphan task ran");
    // An explicit attach places a task at once.
    e.attach_task("src3", 0, None, Some(1)).unwrap();
    assert_eq!(e.task_places("src3").unwrap()[0].wid, Some(1));
    e.resume_all().unwrap();
    let wids: Vec<Option<usize>> = (0..3)
        .map(|i| e.task_places(&format!("src{i}")).unwrap()[0].wid)
        .collect();
    assert_eq!(
        wids,
        vec![Some(0), Some(1), Some(0)],
        "round-robin placement"
    );
    assert!(eventually(|| (0..4).all(|i| packets(
        &e,
        &format!("src{i}"),
        0
    ) > 0)));
}

#[test]
fn worker_zero_is_launched_on_demand_and_cores_are_cpu_ids() {
    let mut e = engine();
    let err = e.worker_for(Some(3)).unwrap_err();
    assert!(err.msg.contains("worker 3 does not exist"), "{}", err.msg);
    assert_eq!(e.worker_for(None).unwrap(), 0);
    assert_eq!(e.worker_ids(), vec![0]);
    assert_eq!(
        e.worker_state(0).unwrap(),
        WorkerState::Paused,
        "workers start paused, as BESS launches them"
    );
    assert_eq!(e.worker_for(Some(0)).unwrap(), 0);
    // Any CPU of the machine is a core, whatever this process's own affinity is.
    let present = std::fs::read_to_string("/sys/devices/system/cpu/present").unwrap();
    let last: usize = present
        .trim()
        .rsplit(['-', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    e.add_worker(1, last).unwrap();
    assert_eq!(e.list_workers()[1].core, last);
    let err = e.add_worker(2, last + 1).unwrap_err();
    assert!(err.msg.contains("does not exist"), "{}", err.msg);
}

#[test]
fn disconnecting_an_unconnected_gate_is_a_no_op() {
    let mut e = engine();
    add_module(&mut e, "Bypass", "bp", &Value::map());
    e.disconnect("bp", 0).unwrap();
    e.disconnect("bp", 7).unwrap();
    // A gate the class does not have is still an error (BESS: EINVAL).
    add_sink(&mut e, "s");
    let err = e.disconnect("s", 0).unwrap_err();
    assert!(err.msg.contains("gate 0 is out of range"), "{}", err.msg);
    assert!(e.disconnect("ghost", 0).is_err());
    // Names are any non-empty string, as BESS takes them.
    for name in ["soc_3_2026-11-24-10-00", "my-mod.1", "9lives"] {
        assert_eq!(
            e.create_module(class("Sink"), Some(name), &Value::Null)
                .unwrap(),
            name
        );
    }
}

/// Packets the `Probe` test class has seen.
static PROBED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts and frees what it receives.
struct Probe;

impl bessemer_core::Module for Probe {
    fn process_batch(
        &mut self,
        ctx: &mut bessemer_core::Context,
        batch: &mut bessemer_core::PacketBatch,
        _igate: u16,
    ) {
        PROBED.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        ctx.free_batch(batch);
    }
}

/// The Probe class (also the template of the other test class).
const PROBE_CLASS: bessemer_core::ModuleClass = bessemer_core::ModuleClass {
    name: "Probe",
    name_template: "probe",
    help: "test: counts packets",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 1,
    ogates: 0,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, _| Ok(bessemer_core::Instance::Exclusive(Box::new(Probe))),
};

static PROBE: bessemer_core::ModuleClass = PROBE_CLASS;

/// A class whose construction builds a 1M-entry table and only finishes once traffic has
/// flowed meanwhile: it cannot be built while the workers are paused.
static SLOW_BUILD: bessemer_core::ModuleClass = bessemer_core::ModuleClass {
    name: "SlowBuild",
    name_template: "slow",
    help: "test: construction waits for traffic",
    create: |_, _| {
        let table: Vec<u64> = (0..1u64 << 20).collect();
        let start = PROBED.load(std::sync::atomic::Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(10);
        while PROBED.load(std::sync::atomic::Ordering::Relaxed) < start + 10_000 {
            if Instant::now() > deadline {
                return Err(bessemer_core::Error::busy(
                    "no packet moved while the module was built: the workers were paused",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(table.len(), 1 << 20);
        Ok(bessemer_core::Instance::Exclusive(Box::new(Probe)))
    },
    ..PROBE_CLASS
};

#[test]
fn modules_are_built_while_traffic_flows_and_inserted_atomically() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    e.create_module(&PROBE, Some("probe"), &Value::map())
        .unwrap();
    e.connect("src", 0, "probe", 0).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "src", 0) > 0));
    // Built while the worker runs (its constructor waits for traffic), then inserted.
    e.create_module(&SLOW_BUILD, Some("big"), &Value::map())
        .unwrap();
    assert!(e.graph().id_of("big").is_ok());
    e.pause_all().unwrap();
    // Nothing lost around the insertion: every packet the source sent reached the probe.
    assert_eq!(
        packets(&e, "src", 0),
        PROBED.load(std::sync::atomic::Ordering::Relaxed)
    );
    // A name taken while the module was being built is still refused.
    let err = e
        .create_module(&PROBE, Some("big"), &Value::map())
        .unwrap_err();
    assert_eq!(err.code, libc::EEXIST);
}

/// A worker's `silent_drops` (BESS's, bessctl's "Deadend pkts") counts every packet its
/// modules dropped: sends to an unconnected gate and drops under a class's own reasons.
#[test]
fn worker_silent_drops_count_what_its_modules_drop() {
    let mut e = engine();
    add_two_workers(&mut e);
    // Worker 0: a Bypass whose output is a dead end. Worker 1: UpdateTTL, which drops the
    // Source's zero-filled (TTL 0, non-IPv4) packets under its own reason.
    add_source(&mut e, "src0");
    add_module(&mut e, "Bypass", "bp", &Value::map());
    e.connect("src0", 0, "bp", 0).unwrap();
    add_source(&mut e, "src1");
    add_module(&mut e, "UpdateTTL", "ttl", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("src1", 0, "ttl", 0).unwrap();
    e.connect("ttl", 0, "sink", 0).unwrap();
    e.attach_task("src0", 0, None, Some(0)).unwrap();
    e.attach_task("src1", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| e
        .list_workers()
        .iter()
        .all(|w| w.silent_drops > 10_000)));
    e.pause_all().unwrap();
    let workers = e.list_workers();
    let dropped = |m: &str| -> u64 {
        e.graph()
            .drops_of(m)
            .unwrap()
            .into_iter()
            .filter(|(r, _)| r != "pool_exhausted")
            .map(|(_, n)| n)
            .sum()
    };
    let deadends = e
        .graph()
        .drops_of("bp")
        .unwrap()
        .into_iter()
        .find(|(r, _)| r == "deadend")
        .unwrap()
        .1;
    assert_eq!(workers[0].silent_drops, deadends);
    assert_eq!(workers[0].silent_drops, dropped("bp") + dropped("src0"));
    assert_eq!(workers[1].silent_drops, dropped("ttl") + dropped("src1"));
    assert_eq!(packets(&e, "ttl", 0), 0, "every packet was dropped");
}

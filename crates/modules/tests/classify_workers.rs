//! Classifiers that BESS lets several workers run at once (HashLB, BPF, WorkerSplit) are
//! accepted by the engine when two workers' tasks reach them, and pass traffic.

mod common;

use bessemer_core::engine::Engine;
use bessemer_core::Value;
use common::{add_module, add_sink, add_source, add_two_workers, engine, eventually, packets};

/// Two sources on workers 0 and 1 feed `mid`; its gates 0 and 1 feed queues drained by sinks.
fn two_worker_graph(mid_class: &str, mid_arg: Value) -> Engine {
    let mut e = engine();
    add_two_workers(&mut e);
    add_module(&mut e, mid_class, "mid", &mid_arg);
    // Downstream first, so no packet meets an unconnected gate.
    for i in 0..2u16 {
        let (q, sink) = (format!("q{i}"), format!("sink{i}"));
        add_module(&mut e, "Queue", &q, &Value::map());
        add_sink(&mut e, &sink);
        e.connect("mid", i, &q, 0).unwrap();
        e.connect(&q, 0, &sink, 0).unwrap();
        e.attach_task(&q, 0, None, Some(0)).unwrap();
    }
    for (i, src) in ["a", "b"].into_iter().enumerate() {
        add_source(&mut e, src);
        e.attach_task(src, 0, None, Some(i)).unwrap();
        e.connect(src, 0, "mid", 0).unwrap();
    }
    e.resume_all().unwrap();
    e
}

fn out(e: &Engine, g: u16) -> u64 {
    packets(e, "mid", g)
}

#[test]
fn hash_lb_runs_on_two_workers() {
    let gates = Value::List(vec![Value::Int(0), Value::Int(1)]);
    let mut e = two_worker_graph(
        "HashLB",
        Value::map().with("gates", gates).with("mode", "l2"),
    );
    // Source frames are all alike: one flow, one gate.
    assert!(eventually(|| out(&e, 0) + out(&e, 1) > 10_000));
    e.pause_all().unwrap();
    assert!(out(&e, 0) == 0 || out(&e, 1) == 0, "one flow, one gate");
    e.reset_all().unwrap();
}

#[test]
fn bpf_runs_on_two_workers() {
    let f = Value::map()
        .with("priority", 1)
        .with("filter", "ip or not ip")
        .with("gate", 1);
    let mut e = two_worker_graph("BPF", Value::map().with("filters", Value::List(vec![f])));
    assert!(eventually(|| out(&e, 1) > 10_000));
    e.pause_all().unwrap();
    assert_eq!(out(&e, 0), 0);
    e.reset_all().unwrap();
}

#[test]
fn worker_split_sends_each_worker_to_its_gate() {
    let mut e = two_worker_graph("WorkerSplit", Value::map());
    assert!(eventually(|| out(&e, 0) > 1000 && out(&e, 1) > 1000));
    e.pause_all().unwrap();
    // Worker 0 only ever used gate 0 and worker 1 gate 1: the sources' counts match.
    let sent_a = packets(&e, "a", 0);
    let sent_b = packets(&e, "b", 0);
    assert_eq!((out(&e, 0), out(&e, 1)), (sent_a, sent_b));
    e.reset_all().unwrap();
}

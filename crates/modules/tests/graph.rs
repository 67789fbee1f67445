//! Graph-level behaviour with real classes: batch merging at input gates, dead ends, loops,
//! per-gate counters and metadata offsets recomputed on graph changes.

mod common;

use bessemer_core::testing::Harness;
use bessemer_core::{AttrOffset, Value, MAX_BURST};
use common::class;

fn list(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

#[test]
fn split_batches_merge_again_at_a_shared_input_gate() {
    let mut h = Harness::new();
    h.add(
        class("RoundRobin"),
        "rr",
        &Value::map().with("gates", list(&[0, 1])),
    )
    .unwrap();
    h.add(class("Bypass"), "a", &Value::map()).unwrap();
    h.add(class("Bypass"), "b", &Value::map()).unwrap();
    h.add(class("Bypass"), "m", &Value::map()).unwrap();
    h.connect("rr", 0, "a", 0).unwrap();
    h.connect("rr", 1, "b", 0).unwrap();
    h.connect("a", 0, "m", 0).unwrap();
    h.connect("b", 0, "m", 0).unwrap();
    let cap = h.capture("m", 0);
    let pkts: Vec<Vec<u8>> = (0..MAX_BURST as u8).map(|i| vec![i; 64]).collect();
    h.inject("rr", 0, &pkts);
    // rr split one batch into two halves; both reached m's input gate before m ran, so m
    // processed (and emitted) a single merged batch.
    assert_eq!(h.graph.ogate_counts("rr", 0).unwrap().batches, 1);
    assert_eq!(h.graph.ogate_counts("rr", 1).unwrap().batches, 1);
    let m = h.graph.ogate_counts("m", 0).unwrap();
    assert_eq!((m.packets, m.batches), (MAX_BURST as u64, 1));
    let got = cap.take_data();
    assert_eq!(got.len(), MAX_BURST);
    let mut firsts: Vec<u8> = got.iter().map(|p| p[0]).collect();
    firsts.sort();
    assert_eq!(
        firsts,
        (0..MAX_BURST as u8).collect::<Vec<_>>(),
        "each packet exactly once"
    );
}

#[test]
fn unconnected_gate_frees_and_counts_deadends() {
    let mut h = Harness::new();
    h.add(class("Bypass"), "bp", &Value::map()).unwrap();
    h.inject("bp", 0, &vec![vec![0u8; 60]; 10]);
    assert_eq!(h.drops("bp", "deadend"), 10);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn a_loop_in_the_graph_is_bounded_and_counted() {
    let mut h = Harness::new();
    h.add(class("Bypass"), "x", &Value::map()).unwrap();
    h.add(class("Bypass"), "y", &Value::map()).unwrap();
    h.connect("x", 0, "y", 0).unwrap();
    h.connect("y", 0, "x", 1).unwrap();
    h.connect("x", 1, "y", 1).unwrap();
    h.connect("y", 1, "x", 0).unwrap();
    h.inject("x", 0, &vec![vec![1u8; 60]; 5]);
    let dropped = h.drops("x", "hop_limit") + h.drops("y", "hop_limit");
    assert_eq!(dropped, 5);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn gate_counters_count_packets_batches_and_bits() {
    let mut h = Harness::new();
    h.add(class("Bypass"), "bp", &Value::map()).unwrap();
    h.add(class("Sink"), "sink", &Value::Null).unwrap();
    h.connect("bp", 0, "sink", 0).unwrap();
    h.graph.track_bits(None, true).unwrap();
    h.inject("bp", 0, &vec![vec![0u8; 100]; MAX_BURST + 3]);
    let c = h.graph.ogate_counts("bp", 0).unwrap();
    assert_eq!(
        (c.packets, c.batches, c.bits),
        (MAX_BURST as u64 + 3, 2, (MAX_BURST as u64 + 3) * 800)
    );
    assert_eq!(h.graph.igate_counts("sink", 0).unwrap(), c);
}

#[test]
fn metadata_offsets_follow_graph_changes() {
    let mut h = Harness::new();
    let set = Value::map().with(
        "attrs",
        Value::List(vec![Value::map()
            .with("name", "flow")
            .with("size", 2)
            .with("value_int", 7)]),
    );
    h.add(class("SetMetadata"), "set", &set).unwrap();
    h.add(
        class("Split"),
        "split",
        &Value::map().with("size", 2).with("attribute", "flow"),
    )
    .unwrap();
    // Nobody reads 'flow' yet: the writer's writes are skipped.
    assert_eq!(
        h.graph.attr_offsets("set").unwrap()[0].1,
        AttrOffset::NoWrite
    );
    assert_eq!(
        h.graph.attr_offsets("split").unwrap()[0].1,
        AttrOffset::NoRead
    );
    h.connect("set", 0, "split", 0).unwrap();
    let w = h.graph.attr_offsets("set").unwrap()[0].1;
    let r = h.graph.attr_offsets("split").unwrap()[0].1;
    assert!(
        matches!(w, AttrOffset::At(_)) && w == r,
        "writer {w:?} reader {r:?}"
    );
    let cap = h.capture("split", 7);
    h.inject("set", 0, &[vec![0u8; 60]]);
    assert_eq!(
        cap.take().len(),
        1,
        "packet went out of the gate named by the attribute; drops {:?} {:?}; offsets {:?} {:?}",
        h.graph.drops_of("set"),
        h.graph.drops_of("split"),
        h.graph.attr_offsets("set"),
        h.graph.attr_offsets("split"),
    );
    h.graph.disconnect("set", 0).unwrap();
    assert_eq!(
        h.graph.attr_offsets("set").unwrap()[0].1,
        AttrOffset::NoWrite
    );
}

/// src (Source) -> bp (Bypass) -> sink.
fn source_bypass_sink() -> Harness {
    let mut h = Harness::new();
    h.add(class("Source"), "src", &Value::map()).unwrap();
    h.add(class("Bypass"), "bp", &Value::map()).unwrap();
    h.add(class("Sink"), "sink", &Value::Null).unwrap();
    h.connect("src", 0, "bp", 0).unwrap();
    h.connect("bp", 0, "sink", 0).unwrap();
    h
}

#[test]
fn counters_agree_along_a_chain() {
    let mut h = source_bypass_sink();
    for _ in 0..10 {
        assert_eq!(h.run_task("src", 0).packets as usize, MAX_BURST);
    }
    let a = h.graph.ogate_counts("src", 0).unwrap();
    let b = h.graph.ogate_counts("bp", 0).unwrap();
    assert_eq!((a.packets, a.batches), (10 * MAX_BURST as u64, 10));
    assert_eq!(a, b);
    assert_eq!(h.in_use(), 0);
}

/// A group of runs of one task (a worker's round of a lone task): each run's batch goes
/// all the way downstream before the next run, and the group reports the runs' sum.
#[test]
fn a_task_run_as_a_group_drains_each_run_before_the_next() {
    let mut h = source_bypass_sink();
    h.command("src", "set_burst", &Value::map().with("burst", 3))
        .unwrap();
    let g = h.run_task_group("src", 0, 16);
    assert_eq!((g.runs, g.result.packets, g.idle_tail), (16, 48, None));
    assert_eq!(g.result.bits, 48 * 60 * 8);
    let bp = h.graph.ogate_counts("bp", 0).unwrap();
    assert_eq!((bp.packets, bp.batches), (48, 16), "one batch per run");
    assert_eq!(h.graph.igate_counts("sink", 0).unwrap().packets, 48);
    assert_eq!(h.in_use(), 0);
    // One run when the scheduler allows one.
    let g = h.run_task_group("src", 0, 1);
    assert_eq!((g.runs, g.result.packets), (1, 3));
}

/// Counts the packets of the batches it sees.
struct CountingHook(std::sync::atomic::AtomicU64);

impl bessemer_core::hook::GateHook for CountingHook {
    fn class_name(&self) -> &'static str {
        "Counting"
    }
    fn on_batch(&self, batch: &bessemer_core::PacketBatch) {
        self.0
            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// a (Bypass) -> b (Bypass) -> sink.
fn bypass_chain() -> Harness {
    let mut h = Harness::new();
    h.add(class("Bypass"), "a", &Value::map()).unwrap();
    h.add(class("Bypass"), "b", &Value::map()).unwrap();
    h.add(class("Sink"), "sink", &Value::Null).unwrap();
    h.connect("a", 0, "b", 0).unwrap();
    h.connect("b", 0, "sink", 0).unwrap();
    h
}

#[test]
fn hooks_and_bit_tracking_added_or_removed_between_batches_apply_to_the_next_one() {
    use bessemer_core::hook::GateDir;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    let mut h = bypass_chain();
    let batch = vec![vec![0u8; 100]; 5];
    h.inject("a", 0, &batch);
    let hook = Arc::new(CountingHook(Default::default()));
    h.graph
        .add_hook("b", GateDir::Out, Some(0), "count", hook.clone())
        .unwrap();
    h.inject("a", 0, &batch);
    assert_eq!(
        hook.0.load(Ordering::Relaxed),
        5,
        "hook added after traffic"
    );
    h.graph.track_gate("a", Some(0), true).unwrap();
    h.inject("a", 0, &batch);
    assert_eq!(hook.0.load(Ordering::Relaxed), 10);
    assert_eq!(h.graph.ogate_counts("a", 0).unwrap().bits, 5 * 800);
    h.graph
        .remove_hook("b", GateDir::Out, Some(0), "count")
        .unwrap();
    h.graph.track_gate("a", Some(0), false).unwrap();
    h.inject("a", 0, &batch);
    assert_eq!(hook.0.load(Ordering::Relaxed), 10, "hook removed");
    assert_eq!(h.graph.ogate_counts("a", 0).unwrap().bits, 5 * 800);
    let c = h.graph.ogate_counts("b", 0).unwrap();
    assert_eq!((c.packets, c.batches), (20, 4));
    assert_eq!(h.in_use(), 0);
}

#[test]
fn a_chain_keeps_forwarding_after_modules_are_added_and_removed_around_it() {
    // The runner moves a batch to the next module through a pointer the gate keeps; adding
    // modules grows the module list (moving it in memory) and removing one empties a slot,
    // so every change must leave those pointers right (debug builds also check each use).
    let mut h = bypass_chain();
    let batch = vec![vec![0u8; 60]; 7];
    h.inject("a", 0, &batch);
    for i in 0..200 {
        h.add(class("Bypass"), &format!("extra{i}"), &Value::map())
            .unwrap();
    }
    h.inject("a", 0, &batch);
    for i in (0..200).step_by(3) {
        h.graph
            .remove_module(&format!("extra{i}"), &mut h.ctx)
            .unwrap();
    }
    h.inject("a", 0, &batch);
    // (Gate counters live on the connection: read them before it goes.)
    assert_eq!(h.graph.igate_counts("sink", 0).unwrap().packets, 21);
    h.graph.disconnect("b", 0).unwrap();
    h.add(class("Sink"), "sink2", &Value::Null).unwrap();
    h.connect("b", 0, "sink2", 0).unwrap();
    h.inject("a", 0, &batch);
    assert_eq!(h.graph.igate_counts("sink2", 0).unwrap().packets, 7);
    assert_eq!(h.in_use(), 0);
}

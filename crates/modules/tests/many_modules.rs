//! Large graphs through the Engine API: creating and destroying ten thousand modules leaves an
//! empty, consistent graph, and every change keeps what is derived from the graph (metadata
//! offsets and warnings, input-gate priorities, worker placement, gate flags) equal to a
//! computation from scratch.

mod common;

use bessemer_core::Value;
use common::{add_module, add_sink, add_source, engine};

/// Metadata writer and reader of attribute `x` (2 bytes).
fn set_x() -> Value {
    Value::map().with(
        "attrs",
        Value::List(vec![Value::map()
            .with("name", "x")
            .with("size", 2)
            .with("value_int", 1)]),
    )
}

fn split_x() -> Value {
    Value::map().with("size", 2).with("attribute", "x")
}

/// One pipeline `p<k>`: Source -> SetMetadata -> Bypass -> Queue (own task) -> Split ->
/// Sink; every fourth one also has a reader with no writer upstream (a metadata warning)
/// and a loop (Merge feeding itself back through a Bypass).
fn add_pipeline(e: &mut bessemer_core::Engine, k: usize) -> Vec<String> {
    let m = |s: &str| format!("p{k}_{s}");
    add_source(e, &m("src"));
    add_module(e, "SetMetadata", &m("set"), &set_x());
    add_module(e, "Bypass", &m("bp"), &Value::map());
    add_module(e, "Queue", &m("q"), &Value::map());
    add_module(e, "Split", &m("split"), &split_x());
    add_sink(e, &m("sink"));
    let mut names = ["src", "set", "bp", "q", "split", "sink"].map(m).to_vec();
    for w in names.windows(2) {
        e.connect(&w[0], 0, &w[1], 0).unwrap();
    }
    if k.is_multiple_of(4) {
        add_module(e, "Split", &m("orphan_reader"), &split_x());
        add_module(e, "Merge", &m("merge"), &Value::map());
        add_module(e, "Bypass", &m("back"), &Value::map());
        e.connect(&m("merge"), 0, &m("back"), 0).unwrap();
        e.connect(&m("back"), 0, &m("merge"), 1).unwrap();
        e.connect(&m("split"), 1, &m("merge"), 0).unwrap();
        names.extend(["orphan_reader", "merge", "back"].map(m));
    }
    e.attach_task(&m("src"), 0, None, Some(k % 2)).unwrap();
    e.attach_task(&m("q"), 0, None, Some((k + 1) % 2)).unwrap();
    names
}

#[test]
fn ten_thousand_modules_are_created_and_destroyed_leaving_an_empty_consistent_graph() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.add_worker(1, 0).unwrap();
    let mut names = Vec::new();
    let mut k = 0;
    while names.len() < 10_000 {
        names.extend(add_pipeline(&mut e, k));
        k += 1;
        if k % 300 == 0 {
            e.verify_graph().unwrap();
        }
    }
    // Unconnected modules in between.
    for i in 0..500 {
        let n = format!("lone{i}");
        add_sink(&mut e, &n);
        names.push(n);
    }
    e.verify_graph().unwrap();
    assert_eq!(e.graph().len(), names.len());
    assert!(e.constraint_violations().is_empty());
    // Destroy from the middle of each pipeline first (so each splits in two), then the rest
    // in creation order.
    let (middle, rest): (Vec<&String>, Vec<&String>) =
        names.iter().partition(|n| n.ends_with("_q"));
    for (i, n) in middle.iter().chain(rest.iter()).enumerate() {
        e.destroy_module(n).unwrap();
        if i % 1000 == 0 {
            e.verify_graph().unwrap();
        }
    }
    assert!(e.graph().is_empty());
    assert!(e.graph().modules().is_empty());
    assert!(e.graph().connections().is_empty());
    assert!(e.graph().warnings().is_empty());
    e.verify_graph().unwrap();
    // Every task left its worker: nothing is scheduled any more.
    assert!(e.list_workers().iter().all(|w| w.num_tasks == 0));
    // The emptied graph takes modules again, in the first slots.
    add_source(&mut e, "again");
    assert_eq!(e.graph().id_of("again").unwrap(), 0);
    e.verify_graph().unwrap();
}

/// Metadata is recomputed per connected part of the graph; a warning or an offset never
/// depends on an unrelated part, and destroying a module in the middle updates both halves.
#[test]
fn graph_changes_keep_derived_state_equal_to_a_fresh_computation() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_module(&mut e, "SetMetadata", "set", &set_x());
    add_module(&mut e, "Bypass", "bp", &Value::map());
    add_module(&mut e, "Split", "split", &split_x());
    add_sink(&mut e, "sink");
    for (a, b) in [
        ("src", "set"),
        ("set", "bp"),
        ("bp", "split"),
        ("split", "sink"),
    ] {
        e.connect(a, 0, b, 0).unwrap();
        e.verify_graph().unwrap();
    }
    e.attach_task("src", 0, None, Some(0)).unwrap();
    e.verify_graph().unwrap();
    assert!(e.graph().warnings().is_empty());
    // Cut the path: the reader is left without a writer (a warning), and comes back.
    e.disconnect("set", 0).unwrap();
    e.verify_graph().unwrap();
    assert_eq!(e.graph().warnings().len(), 1, "{:?}", e.graph().warnings());
    e.connect("set", 0, "bp", 0).unwrap();
    e.verify_graph().unwrap();
    assert!(e.graph().warnings().is_empty());
    e.destroy_module("bp").unwrap();
    e.verify_graph().unwrap();
    assert_eq!(e.graph().warnings().len(), 1);
    // A second writer of `x` with another size is refused wherever it is.
    let bad = Value::map().with(
        "attrs",
        Value::List(vec![Value::map()
            .with("name", "x")
            .with("size", 4)
            .with("value_int", 1)]),
    );
    let err = e
        .create_module(common::class("SetMetadata"), Some("bad"), &bad)
        .unwrap_err();
    assert!(
        err.msg
            .contains("'x' is 2 bytes in module 'set' but 4 bytes in module 'bad'"),
        "{}",
        err.msg
    );
    e.verify_graph().unwrap();
    // In a free slot before every other user of `x`, the new module is named first.
    e.destroy_module("src").unwrap();
    let err = e
        .create_module(common::class("SetMetadata"), Some("bad"), &bad)
        .unwrap_err();
    assert!(
        err.msg
            .contains("'x' is 4 bytes in module 'bad' but 2 bytes in module 'set'"),
        "{}",
        err.msg
    );
    e.verify_graph().unwrap();
}

/// What one change recomputes is its own part of the graph: destroying (or creating,
/// connecting, placing a task of) a module of a six-module pipeline recomputes at most those
/// six modules (twice: metadata and priorities, then worker placement), however many other
/// modules the graph holds.
#[test]
fn a_change_recomputes_only_the_part_of_the_graph_it_touches() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    e.add_worker(1, 0).unwrap();
    for i in 0..2000 {
        add_sink(&mut e, &format!("lone{i}"));
    }
    for k in 1..100 {
        add_pipeline(&mut e, 4 * k + 1);
    }
    let cost = |e: &mut bessemer_core::Engine, change: &dyn Fn(&mut bessemer_core::Engine)| {
        let before = e.graph().recomputed();
        change(e);
        e.graph().recomputed() - before
    };
    assert!(cost(&mut e, &|e| add_sink(e, "new")) <= 2);
    assert!(cost(&mut e, &|e| e.connect("p5_split", 1, "new", 0).unwrap()) <= 2 * 7);
    assert!(
        cost(&mut e, &|e| e
            .attach_task("p9_src", 0, None, Some(1))
            .unwrap())
            <= 6
    );
    assert!(cost(&mut e, &|e| e.destroy_module("p13_bp").unwrap()) <= 2 * 5);
    assert!(cost(&mut e, &|e| e.destroy_module("lone7").unwrap()) == 0);
    assert!(cost(&mut e, &|e| e.disconnect("p17_q", 0).unwrap()) <= 2 * 6);
    e.verify_graph().unwrap();
}

/// Generated names are BESS's: the class's template and the lowest number no module has,
/// whichever modules took or freed numbers before (a name is found without walking every
/// name taken).
#[test]
fn generated_names_take_the_lowest_free_number() {
    let mut e = engine();
    let sink = common::class("Sink");
    let new = |e: &mut bessemer_core::Engine| e.create_module(sink, None, &Value::Null).unwrap();
    let lowest_free = |e: &bessemer_core::Engine| {
        (0..)
            .map(|i| format!("sink{i}"))
            .find(|n| e.graph().id_of(n).is_err())
            .unwrap()
    };
    for i in 0..2000 {
        assert_eq!(new(&mut e), format!("sink{i}"));
    }
    for n in ["sink7", "sink1500", "sink3"] {
        e.destroy_module(n).unwrap();
    }
    // Names another class's module takes count too, and so do explicit names.
    add_module(&mut e, "Bypass", "sink3", &Value::map());
    for _ in 0..3 {
        let want = lowest_free(&e);
        assert_eq!(new(&mut e), want);
    }
    assert!(e.graph().id_of("sink2000").is_ok(), "7, 1500, then 2000");
    add_sink(&mut e, "sink2001");
    add_sink(&mut e, "sink02");
    assert_eq!(new(&mut e), "sink2002");
    e.destroy_module("sink0").unwrap();
    assert_eq!(new(&mut e), "sink0");
    e.verify_graph().unwrap();
}

use proptest::prelude::*;

/// One change of a random graph: modules are picked by position among those created.
#[derive(Clone, Debug)]
enum Op {
    Create(usize),
    Connect(usize, u16, usize, u16),
    Disconnect(usize, u16),
    Destroy(usize),
    Place(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..7).prop_map(Op::Create),
        6 => (0usize..64, 0u16..2, 0usize..64, 0u16..2).prop_map(|(a, g, b, i)| Op::Connect(a, g, b, i)),
        1 => (0usize..64, 0u16..2).prop_map(|(a, g)| Op::Disconnect(a, g)),
        1 => (0usize..64).prop_map(Op::Destroy),
        1 => (0usize..64, 0usize..2).prop_map(|(a, w)| Op::Place(a, w)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// After any sequence of changes (loops, splits, metadata writers and readers, tasks on
    /// two workers), what each change recomputed equals a computation from scratch.
    #[test]
    fn any_change_sequence_keeps_derived_state_exact(ops in proptest::collection::vec(op(), 1..60)) {
        let mut e = engine();
        e.add_worker(0, 0).unwrap();
        e.add_worker(1, 0).unwrap();
        let mut names: Vec<String> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let pick = |k: usize| (!names.is_empty()).then(|| names[k % names.len()].clone());
            match op {
                Op::Create(c) => {
                    let n = format!("m{step}");
                    let (class, arg) = match c {
                        0 => ("Sink", Value::Null),
                        1 => ("Bypass", Value::map()),
                        2 => ("Merge", Value::map()),
                        3 => ("SetMetadata", set_x()),
                        4 => ("Split", split_x()),
                        5 => ("Queue", Value::map()),
                        _ => ("Source", Value::map()),
                    };
                    add_module(&mut e, class, &n, &arg);
                    names.push(n);
                }
                Op::Connect(a, g, b, i) => {
                    if let (Some(a), Some(b)) = (pick(a), pick(b)) {
                        let _ = e.connect(&a, g, &b, i);
                    }
                }
                Op::Disconnect(a, g) => {
                    if let Some(a) = pick(a) {
                        let _ = e.disconnect(&a, g);
                    }
                }
                Op::Destroy(a) => {
                    if let Some(a) = pick(a) {
                        e.destroy_module(&a).unwrap();
                        names.retain(|n| *n != a);
                    }
                }
                Op::Place(a, w) => {
                    if let Some(a) = pick(a) {
                        let _ = e.attach_task(&a, 0, None, Some(w));
                    }
                }
            }
            prop_assert_eq!(e.verify_graph(), Ok(()), "after {:?}", step);
        }
        e.reset_modules().unwrap();
        prop_assert!(e.graph().is_empty());
        prop_assert_eq!(e.verify_graph(), Ok(()));
    }
}

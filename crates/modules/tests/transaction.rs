//! Graph transactions: a group of changes applied under one pause, all or nothing. A splice
//! under traffic drops nothing; a failed transaction leaves the graph exactly as it was.

mod common;

use bessemer_core::engine::{TxOp, TxOutcome};
use bessemer_core::Value;
use common::{add_module, add_sink, add_source, class, engine, eventually, packets};

fn connect(from: &str, ogate: u16, to: &str, igate: u16) -> TxOp {
    TxOp::Connect {
        from: from.into(),
        ogate,
        to: to.into(),
        igate,
    }
}

fn disconnect(from: &str, ogate: u16) -> TxOp {
    TxOp::Disconnect {
        from: from.into(),
        ogate,
    }
}

fn create(mclass: &str, name: &str) -> TxOp {
    TxOp::Create {
        class: class(mclass),
        name: (!name.is_empty()).then(|| name.to_string()),
        arg: Value::map(),
    }
}

/// Connections as (from, ogate, to, igate, packets): the graph's shape and its counters.
fn shape(e: &bessemer_core::Engine) -> Vec<(String, u16, String, u16, u64)> {
    let mut v: Vec<_> = e
        .graph()
        .connections()
        .into_iter()
        .map(|c| (c.from, c.ogate, c.to, c.igate, c.counts.packets))
        .collect();
    v.sort();
    v
}

#[test]
fn splices_under_traffic_drop_nothing() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_sink(&mut e, "sink");
    e.connect("src", 0, "sink", 0).unwrap();
    e.resume_all().unwrap();
    let mut prev = "src".to_string();
    for i in 0..30 {
        assert!(eventually(|| packets(&e, "src", 0) > 100 * (i + 1)));
        // Splice bp<i> between the last module and the sink, in one transaction.
        let bp = format!("bp{i}");
        let out = e
            .transaction(vec![
                create("Bypass", &bp),
                disconnect(&prev, 0),
                connect(&prev, 0, &bp, 0),
                connect(&bp, 0, "sink", 0),
            ])
            .unwrap();
        assert_eq!(out[0], TxOutcome::Created(bp.clone()));
        prev = bp;
    }
    // Splice every Bypass out again, also in one transaction each.
    for i in (0..30).rev() {
        let bp = format!("bp{i}");
        let up = if i == 0 {
            "src".to_string()
        } else {
            format!("bp{}", i - 1)
        };
        e.transaction(vec![
            disconnect(&up, 0),
            TxOp::Destroy { name: bp.clone() },
            connect(&up, 0, "sink", 0),
        ])
        .unwrap();
    }
    e.pause_all().unwrap();
    for m in e.graph().modules() {
        assert_eq!(
            e.graph().total_drops(&m.name).unwrap(),
            0,
            "{} dropped packets during the splices",
            m.name
        );
    }
    assert_eq!(shape(&e).len(), 1);
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

#[test]
fn a_failed_transaction_leaves_the_graph_exactly_as_it_was() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    add_source(&mut e, "src");
    add_module(&mut e, "Bypass", "bp", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("src", 0, "bp", 0).unwrap();
    e.connect("bp", 0, "sink", 0).unwrap();
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "bp", 0) > 1000));
    e.pause_all().unwrap();
    let before = shape(&e);
    let modules: Vec<String> = e.graph().modules().into_iter().map(|m| m.name).collect();
    // Creates, a disconnect, a connect and a destroy, then a connect to a missing module.
    let err = e
        .transaction(vec![
            create("Bypass", "new"),
            disconnect("bp", 0),
            connect("bp", 0, "new", 0),
            TxOp::Destroy {
                name: "sink".into(),
            },
            connect("new", 0, "nowhere", 0),
        ])
        .unwrap_err();
    assert_eq!(err.code, libc::ENOENT);
    assert!(
        err.msg.contains("change 5 (connect new:0 -> 0:nowhere)") && err.msg.contains("nowhere"),
        "{}",
        err.msg
    );
    // Same modules, same connections with the same counters.
    let after: Vec<String> = e.graph().modules().into_iter().map(|m| m.name).collect();
    assert_eq!(after, modules);
    assert_eq!(shape(&e), before);
    // And it still runs.
    let n = packets(&e, "bp", 0);
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "bp", 0) > n + 1000));
}

#[test]
fn bad_changes_are_refused_before_anything_runs() {
    let mut e = engine();
    add_source(&mut e, "src");
    // A module argument that does not parse: refused at build, naming the change.
    let err = e
        .transaction(vec![
            create("Bypass", "a"),
            TxOp::Create {
                class: class("Source"),
                name: Some("s2".into()),
                arg: Value::map().with("pkt_size", "big"),
            },
        ])
        .unwrap_err();
    assert!(
        err.msg.contains("change 2 (create s2::Source)"),
        "{}",
        err.msg
    );
    assert!(e.graph().class_of("a").is_err(), "nothing was created");
    // The same name twice.
    let err = e
        .transaction(vec![create("Bypass", "x"), create("Sink", "x")])
        .unwrap_err();
    assert_eq!(err.code, libc::EEXIST);
    // Unnamed modules get distinct generated names.
    let out = e
        .transaction(vec![create("Bypass", ""), create("Bypass", "")])
        .unwrap();
    assert_eq!(
        out,
        vec![
            TxOutcome::Created("bypass0".into()),
            TxOutcome::Created("bypass1".into())
        ]
    );
    // A failing command undoes the structure before it.
    let err = e
        .transaction(vec![
            connect("src", 0, "bypass0", 0),
            TxOp::Command {
                module: "bypass0".into(),
                cmd: "no_such_command".into(),
                arg: Value::map(),
            },
        ])
        .unwrap_err();
    assert_eq!(err.code, libc::ENOTSUP);
    assert!(e.graph().connections().is_empty());
}

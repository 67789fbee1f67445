//! The UPF classes the fork lets every worker run (Qos, Counter) run on two workers at once,
//! their thread-safe commands running while the workers do.

mod common;

use bessemer_core::engine::Engine;
use bessemer_core::Value;
use common::{add_module, add_sink, add_source, add_two_workers, engine, eventually, packets};

/// Sources on workers 0 and 1 feed `mid`, whose `gates` feed queues drained by sinks.
fn two_workers(class: &str, arg: &Value, gates: &[u16]) -> Engine {
    let mut e = engine();
    add_two_workers(&mut e);
    add_module(&mut e, class, "mid", arg);
    for &g in gates {
        let (q, sink) = (format!("q{g}"), format!("sink{g}"));
        add_module(&mut e, "Queue", &q, &Value::map());
        add_sink(&mut e, &sink);
        e.connect("mid", g, &q, 0).unwrap();
        e.connect(&q, 0, &sink, 0).unwrap();
        e.attach_task(&q, 0, None, Some(0)).unwrap();
    }
    for (i, src) in ["a", "b"].into_iter().enumerate() {
        add_source(&mut e, src);
        e.attach_task(src, 0, None, Some(i)).unwrap();
        e.connect(src, 0, "mid", 0).unwrap();
    }
    e
}

#[test]
fn qos_meters_on_two_workers_while_rules_change() {
    let arg = Value::map().with(
        "fields",
        vec![Value::map().with("offset", 0).with("num_bytes", 1)],
    );
    let mut e = two_workers("Qos", &arg, &[1, 2, 3, 4]);
    assert!(e.constraint_violations().is_empty());
    let meter = Value::map()
        .with("gate", 0)
        .with("cir", 1_000_000u64)
        .with("pir", 2_000_000u64)
        .with("cbs", 10_000u64)
        .with("pbs", 20_000u64)
        .with("fields", vec![Value::map().with("value_int", 0)]);
    e.command("mid", "add", &meter).unwrap();
    e.resume_all().unwrap();
    let colours = |e: &Engine| (1..=3).map(|g| packets(e, "mid", g)).sum::<u64>();
    assert!(eventually(|| colours(&e) > 10_000));
    // Thread-safe: runs while both workers run the module.
    e.command("mid", "set_default_gate", &Value::map().with("gate", 4))
        .unwrap();
    e.command("mid", "clear", &Value::map()).unwrap();
    assert!(eventually(|| packets(&e, "mid", 4) > 10_000));
    e.pause_all().unwrap();
    let sent = packets(&e, "a", 0) + packets(&e, "b", 0);
    let red = packets(&e, "mid", 3);
    assert!(red > 0, "1 MB/s cannot carry both sources");
    assert_eq!(colours(&e) + packets(&e, "mid", 4), sent);
    e.reset_all().unwrap();
}

#[test]
fn counter_counts_both_workers_packets() {
    let arg = Value::map().with("name_id", "ctr_id").with("total", 4);
    let mut e = two_workers("Counter", &arg, &[0]);
    assert!(e.constraint_violations().is_empty());
    e.resume_all().unwrap();
    assert!(eventually(|| packets(&e, "mid", 0) > 10_000));
    e.command("mid", "add", &Value::map().with("ctr_id", 0))
        .unwrap();
    e.pause_all().unwrap();
    // No module writes ctr_id: every packet reads id 0.
    let sent = packets(&e, "a", 0) + packets(&e, "b", 0);
    let info = e.graph().info_of("mid").unwrap();
    let ctr = &info.get("counters").and_then(Value::as_list).unwrap()[0];
    assert_eq!(ctr.get("pkts").and_then(Value::as_i64), Some(sent as i64));
    assert_eq!(info.get("sessions").and_then(Value::as_i64), Some(1));
    e.reset_all().unwrap();
}

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

/// Qos skips its meters' locks and Counter its locked adds while one worker runs them
/// (`Context::shared`): worker 0 alone, then a second source on worker 1 (the modules become
/// shared at a pause), then worker 0 alone again. Each phase starts the meter with full
/// buckets, which allow exactly `GREEN` green and `YELLOW` yellow packets (the rates add a
/// byte a second, far less than a packet during the test), and runs until packets turn red:
/// a meter update lost to a race between the workers would show as an extra green or yellow
/// packet, a lost count as a short total.
#[test]
fn qos_and_counter_count_exactly_as_workers_join_and_leave() {
    const GREEN: u64 = 150_000;
    const YELLOW: u64 = 150_000;
    // Source's default 60-byte packets less the Ethernet header (`deduct_len`'s default).
    const METERED: u64 = 46;
    let mut e = engine();
    add_two_workers(&mut e);
    let ctr = Value::map().with("name_id", "ctr_id").with("total", 4);
    add_module(&mut e, "Counter", "ctr", &ctr);
    let qos = Value::map().with(
        "fields",
        vec![Value::map().with("offset", 0).with("num_bytes", 1)],
    );
    add_module(&mut e, "Qos", "qos", &qos);
    add_sink(&mut e, "sink");
    e.connect("ctr", 0, "qos", 0).unwrap();
    for g in 1..=4 {
        e.connect("qos", g, "sink", 0).unwrap();
    }
    // Source packets are never written: every one has key 0 and counter id 0. A miss would
    // leave by gate 4.
    e.command("qos", "set_default_gate", &Value::map().with("gate", 4))
        .unwrap();
    let meter = Value::map()
        .with("gate", 0)
        .with("cir", 1u64)
        .with("pir", 1u64)
        .with("cbs", GREEN * METERED)
        .with("pbs", (GREEN + YELLOW) * METERED)
        .with("fields", vec![Value::map().with("value_int", 0)]);
    e.command("ctr", "add", &Value::map().with("ctr_id", 0))
        .unwrap();
    add_source(&mut e, "a");
    e.connect("a", 0, "ctr", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    let colours = |e: &Engine| [1, 2, 3].map(|g| packets(e, "qos", g));
    // One phase (workers paused before and after): fresh buckets, run until red.
    let phase = |e: &mut Engine, what: &str| {
        e.command("qos", "add", &meter).unwrap();
        let before = colours(e);
        e.resume_all().unwrap();
        assert!(
            eventually(|| colours(e)[2] > before[2] + 20_000),
            "{what}: no red"
        );
        e.pause_all().unwrap();
        let after = colours(e);
        assert_eq!(after[0] - before[0], GREEN, "{what}: green");
        assert_eq!(after[1] - before[1], YELLOW, "{what}: yellow");
    };
    phase(&mut e, "worker 0");

    // A second worker: both modules become shared, and both workers meter the one rule.
    add_source(&mut e, "b");
    e.connect("b", 0, "ctr", 0).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    phase(&mut e, "workers 0 and 1");
    let from_b = packets(&e, "b", 0);
    assert!(from_b > 0, "worker 1 ran");
    e.destroy_module("b").unwrap();

    phase(&mut e, "worker 0 again");
    let sent = packets(&e, "a", 0) + from_b;
    assert_eq!(packets(&e, "qos", 4), 0, "every packet matched the rule");
    assert_eq!(colours(&e).iter().sum::<u64>(), sent);
    let info = e.graph().info_of("ctr").unwrap();
    let c = &info.get("counters").and_then(Value::as_list).unwrap()[0];
    assert_eq!(c.get("pkts").and_then(Value::as_i64), Some(sent as i64));
    assert_eq!(
        c.get("bytes").and_then(Value::as_i64),
        Some(60 * sent as i64)
    );
    assert_eq!(e.graph().total_drops("qos").unwrap(), 0);
    e.reset_all().unwrap();
}

/// `remove` and `removeAll` zero counters while the workers count (without a locked add when
/// one worker runs the module): counts start again from zero, and a counter zeroed while its
/// packets flow never reads more than was sent after the command.
#[test]
fn counter_zeroes_while_one_worker_counts() {
    let mut e = engine();
    e.add_worker(0, 0).unwrap();
    let ctr = Value::map().with("name_id", "ctr_id").with("total", 4);
    add_module(&mut e, "Counter", "ctr", &ctr);
    add_sink(&mut e, "sink");
    e.connect("ctr", 0, "sink", 0).unwrap();
    add_source(&mut e, "a");
    e.connect("a", 0, "ctr", 0).unwrap();
    e.resume_all().unwrap();
    let pkts = |e: &Engine| {
        let info = e.graph().info_of("ctr").unwrap();
        let l = info.get("counters").and_then(Value::as_list).unwrap();
        l.first()
            .and_then(|c| c.get("pkts").and_then(Value::as_i64))
            .unwrap_or(0) as u64
    };
    assert!(eventually(|| pkts(&e) > 20_000));
    for cmd in ["remove", "removeAll"] {
        let arg = if cmd == "remove" {
            Value::map().with("ctr_id", 0)
        } else {
            Value::map()
        };
        let before = packets(&e, "ctr", 0);
        e.command("ctr", cmd, &arg).unwrap();
        let n = pkts(&e);
        // The gate counts a batch just after the counters do: one batch of slack.
        let since = packets(&e, "ctr", 0) - before;
        assert!(n <= since + 64, "{cmd}: {n} counted since, {since} sent");
        assert!(eventually(|| pkts(&e) > 20_000));
    }
    e.pause_all().unwrap();
    e.command("ctr", "removeAll", &Value::map()).unwrap();
    assert_eq!(pkts(&e), 0);
    e.reset_all().unwrap();
}

//! Two workers through shared modules with every count exact: port queue counters (one
//! outgoing queue fed by both workers, one PortInc whose queue tasks run on both), Queue
//! between workers (backpressure by drops, `queue_full` and its own counters), a pipeline
//! duplicated per worker over queue pairs, and the constraint checker naming module and
//! workers for each placement it reports.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Engine, PacketBatch, PoolCache, Result, Value};
use common::{add_module, add_sink, add_source, add_two_workers, engine, eventually, packets};

/// An in-memory port: incoming queue i makes 60-byte frames until its share of `limit` was
/// made (each queue its own traffic, as RSS gives it: with one shared budget a fast worker
/// drained every frame before the other one started, and a queue saw none); an outgoing queue
/// takes every other packet of a batch and frees it (the rest stay in the batch: the sender's
/// `tx_failed`).
struct MemPort {
    limit: u64,
    queues: u64,
}

struct MemRx {
    made: Arc<AtomicU64>,
    limit: u64,
}

struct MemTx;

impl RxQueue for MemRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let want = max.min(batch.room()) as u64;
        // Reserve frames from the queue's budget, so the total made is exact.
        let mut got = 0;
        let _ = self
            .made
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                got = want.min(self.limit - m);
                Some(m + got)
            });
        for _ in 0..got {
            let p = cache.alloc(60).expect("buffer");
            batch.push(p).ok().unwrap();
        }
        got as usize
    }
}

impl TxQueue for MemTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let mut rest = PacketBatch::new();
        let mut sent = 0;
        for (i, p) in batch.drain().enumerate() {
            if i % 2 == 0 {
                cache.free(p);
                sent += 1;
            } else {
                rest.push(p).ok().unwrap();
            }
        }
        batch.append(&mut rest);
        sent
    }
}

impl Port for MemPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        // Queue i's share: limit / queues, the remainder to the first ones; exact in sum.
        let q = qid as u64;
        let share = self.limit / self.queues + u64::from(q < self.limit % self.queues);
        Ok(Box::new(MemRx {
            made: Arc::default(),
            limit: share,
        }))
    }
    fn tx_queue(&self, _qid: usize) -> Result<Box<dyn TxQueue>> {
        Ok(Box::new(MemTx))
    }
    fn link_status(&self) -> LinkStatus {
        LinkStatus {
            link_up: true,
            ..Default::default()
        }
    }
    fn conf(&self) -> PortConf {
        PortConf::default()
    }
}

fn create(p: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "MemPortArg")?;
    let limit = a.uint("limit", u64::MAX)?.unwrap_or(0);
    a.finish()?;
    Ok(NewPort {
        port: Box::new(MemPort {
            limit,
            queues: p.num_inc_q.max(1) as u64,
        }),
        num_inc_q: p.num_inc_q.max(1),
        num_out_q: p.num_out_q.max(1),
    })
}

static MEM_PORT: PortDriver = PortDriver {
    name: "MemPort",
    name_template: "mem",
    help: "test port in memory",
    arg_type: "MemPortArg",
    arg_doc: &[],
    create,
};

fn mem_port(e: &Engine, name: &str, inc: usize, out: usize, limit: u64) {
    e.ports()
        .create(
            &MEM_PORT,
            PortParams {
                name: name.into(),
                num_inc_q: inc,
                num_out_q: out,
                size_inc_q: 0,
                size_out_q: 0,
                pool: e.pool().clone(),
            },
            &Value::map().with("limit", limit),
        )
        .unwrap();
}

fn port_arg(port: &str) -> Value {
    Value::map().with("port", port)
}

fn queue_arg(port: &str, qid: u64) -> Value {
    Value::map().with("port", port).with("qid", qid)
}

fn status(e: &mut Engine, q: &str, key: &str) -> u64 {
    let st = e.command(q, "get_status", &Value::map()).unwrap();
    st.get(key).and_then(|v| v.as_i64()).unwrap() as u64
}

#[test]
fn one_outgoing_queue_fed_by_two_workers_counts_exactly() {
    let mut e = engine();
    add_two_workers(&mut e);
    mem_port(&e, "p", 1, 1, 0);
    add_source(&mut e, "a");
    add_source(&mut e, "b");
    add_module(&mut e, "PortOut", "out", &port_arg("p"));
    e.connect("a", 0, "out", 0).unwrap();
    e.connect("b", 0, "out", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    // PortOut allows every worker: nothing to report, both workers write queue 0.
    assert!(e.constraint_violations().is_empty());
    assert!(eventually(
        || packets(&e, "a", 0) > 50_000 && packets(&e, "b", 0) > 50_000
    ));
    e.pause_all().unwrap();
    let arrived = packets(&e, "a", 0) + packets(&e, "b", 0);
    let h = e.ports().get("p").unwrap();
    let (_, out) = h.counts();
    assert_eq!(out.packets + out.dropped, arrived, "{out:?}");
    // The driver takes every other packet of each batch: both halves are counted.
    assert!(out.packets > 0 && out.dropped > 0);
    assert_eq!(out.bytes, out.packets * 60);
    assert_eq!(e.graph().total_drops("out").unwrap(), out.dropped);
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

#[test]
fn port_inc_queues_on_two_workers_count_exactly_and_are_reported() {
    let mut e = engine();
    add_two_workers(&mut e);
    let limit = 400_000;
    mem_port(&e, "p", 2, 1, limit);
    add_module(&mut e, "PortInc", "inc", &port_arg("p"));
    add_sink(&mut e, "sink");
    e.connect("inc", 0, "sink", 0).unwrap();
    e.attach_task("inc", 0, None, Some(0)).unwrap();
    e.attach_task("inc", 1, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    // BESS's usual multi-core receive set-up: PortInc allows every worker (port_inc.h), so
    // nothing is reported (pybess's resume_all would raise ConstraintError otherwise).
    assert!(e.constraint_violations().is_empty());
    assert!(eventually(|| packets(&e, "inc", 0) == limit));
    e.pause_all().unwrap();
    let h = e.ports().get("p").unwrap();
    let (inc, _) = h.counts();
    let (per_queue, _) = h.queue_counts();
    assert_eq!(inc.packets, limit);
    assert_eq!(per_queue.iter().map(|q| q.packets).sum::<u64>(), limit);
    assert!(per_queue.iter().all(|q| q.packets > 0), "{per_queue:?}");
    assert_eq!(inc.bytes, limit * 60);
}

#[test]
fn queue_between_two_workers_counts_every_packet() {
    let mut e = engine();
    add_two_workers(&mut e);
    add_source(&mut e, "a");
    add_source(&mut e, "b");
    // A small ring: both producers overrun it, so `queue_full` drops happen from both.
    add_module(&mut e, "Queue", "q", &Value::map().with("size", 64));
    add_sink(&mut e, "sink");
    e.connect("a", 0, "q", 0).unwrap();
    e.connect("b", 0, "q", 0).unwrap();
    e.connect("q", 0, "sink", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.attach_task("q", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    // Queue allows every worker; the Sink after it runs on the queue's worker only.
    assert!(e.constraint_violations().is_empty());
    assert!(eventually(
        || packets(&e, "q", 0) > 50_000 && e.graph().total_drops("q").unwrap() > 0
    ));
    e.pause_all().unwrap();
    let sent = packets(&e, "a", 0) + packets(&e, "b", 0);
    let (enq, deq, dropped, held) = (
        status(&mut e, "q", "enqueued"),
        status(&mut e, "q", "dequeued"),
        status(&mut e, "q", "dropped"),
        status(&mut e, "q", "count"),
    );
    assert_eq!(enq + dropped, sent, "every arrival is enqueued or dropped");
    assert_eq!(enq, deq + held);
    assert_eq!(deq, packets(&e, "q", 0));
    let drops = e.graph().drops_of("q").unwrap();
    let full = drops.iter().find(|(r, _)| r == "queue_full").unwrap().1;
    assert_eq!(
        full, dropped,
        "the named drop counter matches the queue's own"
    );
    e.reset_all().unwrap();
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

#[test]
fn duplicated_pipeline_owns_one_queue_pair_per_worker() {
    let mut e = engine();
    add_two_workers(&mut e);
    let limit = 200_000;
    mem_port(&e, "p", 2, 2, limit);
    for w in 0..2u64 {
        let (inc, bp, out) = (format!("in@w{w}"), format!("bp@w{w}"), format!("out@w{w}"));
        add_module(&mut e, "QueueInc", &inc, &queue_arg("p", w));
        add_module(&mut e, "Bypass", &bp, &Value::map());
        add_module(&mut e, "QueueOut", &out, &queue_arg("p", w));
        e.connect(&inc, 0, &bp, 0).unwrap();
        e.connect(&bp, 0, &out, 0).unwrap();
        e.attach_task(&inc, 0, None, Some(w as usize)).unwrap();
    }
    e.resume_all().unwrap();
    assert!(e.constraint_violations().is_empty());
    assert!(eventually(|| packets(&e, "in@w0", 0)
        + packets(&e, "in@w1", 0)
        == limit));
    e.pause_all().unwrap();
    let h = e.ports().get("p").unwrap();
    let (inc_q, out_q) = h.queue_counts();
    for w in 0..2 {
        // Each copy saw exactly its own queue's packets and sent them on its own queue.
        let copy = packets(&e, &format!("in@w{w}"), 0);
        assert!(copy > 0);
        assert_eq!(inc_q[w].packets, copy);
        assert_eq!(packets(&e, &format!("bp@w{w}"), 0), copy);
        assert_eq!(out_q[w].packets + out_q[w].dropped, copy);
    }
    let (inc, out) = h.counts();
    assert_eq!(inc.packets, limit);
    assert_eq!(out.packets + out.dropped, limit);
}

#[test]
fn constraint_checker_names_module_and_workers() {
    let mut e = engine();
    add_two_workers(&mut e);
    for src in ["a", "b"] {
        add_source(&mut e, src);
    }
    // NAT (two workers allowed) and a single-worker class reached by both workers, the
    // latter behind a classifier that allows every worker; a Queue's own task cuts the reach.
    add_module(
        &mut e,
        "NAT",
        "nat",
        &Value::map().with(
            "ext_addrs",
            Value::List(vec![Value::map().with("ext_addr", "192.0.2.1")]),
        ),
    );
    add_module(&mut e, "Bypass", "bp", &Value::map());
    add_module(&mut e, "UrlFilter", "uf", &Value::map());
    add_module(&mut e, "Queue", "q", &Value::map());
    add_module(
        &mut e,
        "RoundRobin",
        "rr",
        &Value::map().with("gates", Value::List(vec![Value::Int(0)])),
    );
    add_sink(&mut e, "sink");
    e.connect("a", 0, "nat", 0).unwrap();
    e.connect("b", 0, "nat", 1).unwrap();
    e.connect("nat", 0, "bp", 0).unwrap();
    e.connect("nat", 1, "q", 0).unwrap();
    e.connect("bp", 0, "uf", 0).unwrap();
    e.connect("uf", 0, "sink", 0).unwrap();
    e.connect("q", 0, "rr", 0).unwrap();
    e.connect("rr", 0, "sink", 0).unwrap();
    e.attach_task("a", 0, None, Some(0)).unwrap();
    e.attach_task("b", 0, None, Some(1)).unwrap();
    e.attach_task("q", 0, None, Some(1)).unwrap();
    e.resume_all().unwrap();
    assert_eq!(
        e.constraint_violations(),
        vec![("uf".to_string(), vec![0, 1])],
        "NAT allows two workers; rr is behind the queue: worker 1 only"
    );
    // Both sources on one worker: nothing to report.
    e.attach_task("b", 0, None, Some(0)).unwrap();
    assert!(e.constraint_violations().is_empty());
}

/// BESS's worker limits of the NAT classes: the fork's NAT allows two workers (nat.h), so a
/// third is reported; StaticNAT allows one, so BESS's `test_nat_negative` (two sources on
/// two workers into one StaticNAT) is refused.
#[test]
fn nat_allows_two_workers_and_static_nat_one() {
    let mut e = engine();
    add_two_workers(&mut e);
    let cores = std::thread::available_parallelism().unwrap().get();
    e.add_worker(2, 2 % cores).unwrap();
    let ext = Value::map().with(
        "ext_addrs",
        Value::List(vec![Value::map().with("ext_addr", "192.0.2.1")]),
    );
    add_module(&mut e, "NAT", "nat", &ext);
    add_module(&mut e, "StaticNAT", "snat", &Value::map());
    add_sink(&mut e, "sink");
    e.connect("nat", 0, "sink", 0).unwrap();
    e.connect("nat", 1, "sink", 0).unwrap();
    e.connect("snat", 0, "sink", 0).unwrap();
    e.connect("snat", 1, "sink", 0).unwrap();
    for (src, to, igate, wid) in [
        ("a", "nat", 0, 0),
        ("b", "nat", 1, 1),
        ("c", "snat", 0, 0),
        ("d", "snat", 1, 1),
    ] {
        add_source(&mut e, src);
        e.connect(src, 0, to, igate).unwrap();
        e.attach_task(src, 0, None, Some(wid)).unwrap();
    }
    assert_eq!(
        e.constraint_violations(),
        vec![("snat".to_string(), vec![0, 1])],
        "NAT on two workers is allowed, StaticNAT on two is not"
    );
    add_source(&mut e, "x");
    e.connect("x", 0, "nat", 0).unwrap();
    e.attach_task("x", 0, None, Some(2)).unwrap();
    assert_eq!(
        e.constraint_violations(),
        vec![
            ("nat".to_string(), vec![0, 1, 2]),
            ("snat".to_string(), vec![0, 1]),
        ],
        "a third worker on NAT is one too many"
    );
}

//! The I/O modules over an in-memory loopback driver: what PortOut sends, PortInc receives;
//! queues are claimed exclusively; counters and drops are kept per queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::testing::Harness;
use bessemer_core::{Args, PacketBatch, PoolCache, Result, Value};
use bessemer_modules::io::{port_inc, port_out, queue_inc, queue_out};

/// Frames sent on queue i come back on incoming queue i; at most `cap` wait per queue.
struct Loopback {
    rings: Vec<Arc<Mutex<VecDeque<Vec<u8>>>>>,
    cap: usize,
}

struct LoopRx(Arc<Mutex<VecDeque<Vec<u8>>>>);
struct LoopTx(Arc<Mutex<VecDeque<Vec<u8>>>>, usize);

impl RxQueue for LoopRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let mut ring = self.0.lock().unwrap();
        let mut n = 0;
        let limit = max.min(batch.room());
        while n < limit {
            let Some(f) = ring.pop_front() else { break };
            let mut p = cache.alloc(f.len()).expect("buffer");
            p.data_mut().copy_from_slice(&f);
            batch.push(p).ok().unwrap();
            n += 1;
        }
        n
    }
}

impl TxQueue for LoopTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let mut ring = self.0.lock().unwrap();
        let room = self.1.saturating_sub(ring.len()).min(batch.len());
        let mut rest = PacketBatch::new();
        let mut sent = 0;
        for p in batch.drain() {
            if sent < room {
                ring.push_back(p.data().to_vec());
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

impl Port for Loopback {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        Ok(Box::new(LoopRx(self.rings[qid].clone())))
    }
    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        Ok(Box::new(LoopTx(self.rings[qid].clone(), self.cap)))
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
    let mut a = Args::new(arg, "LoopbackArg")?;
    let cap = a.int("cap", 1, 1 << 20)?.unwrap_or(1024) as usize;
    a.finish()?;
    let n = p.num_inc_q.max(1);
    Ok(NewPort {
        port: Box::new(Loopback {
            rings: (0..n).map(|_| Arc::default()).collect(),
            cap,
        }),
        num_inc_q: n,
        num_out_q: n,
    })
}

static LOOPBACK: PortDriver = PortDriver {
    name: "Loopback",
    name_template: "loop",
    help: "test loopback",
    arg_type: "LoopbackArg",
    arg_doc: &[],
    create,
};

fn port(h: &Harness, name: &str, queues: usize, cap: i64) {
    h.graph
        .ports()
        .create(
            &LOOPBACK,
            PortParams {
                name: name.into(),
                num_inc_q: queues,
                num_out_q: queues,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &Value::map().with("cap", cap),
        )
        .unwrap();
}

fn arg(port: &str) -> Value {
    Value::map().with("port", port)
}

#[test]
fn port_out_to_port_inc_moves_packets_and_counts_them() {
    let mut h = Harness::new();
    port(&h, "lo0", 1, 1024);
    h.add(&port_out::CLASS, "out", &arg("lo0")).unwrap();
    h.add(&port_inc::CLASS, "inc", &arg("lo0")).unwrap();
    let cap = h.capture("inc", 0);
    let b = bessemer_core::MAX_BURST;
    let frames: Vec<Vec<u8>> = (0..(b + 8) as u8)
        .map(|i| vec![i; 60 + i as usize])
        .collect();
    h.inject("out", 0, &frames);
    let r1 = h.run_task("inc", 0);
    let r2 = h.run_task("inc", 0);
    assert_eq!(
        (r1.packets as usize, r2.packets),
        (b, 8),
        "one burst is at most a batch"
    );
    assert_eq!(cap.take_data(), frames);
    let (inc, out) = h.graph.ports().get("lo0").unwrap().counts();
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!(
        (inc.packets, inc.bytes, inc.dropped),
        (frames.len() as u64, bytes, 0)
    );
    assert_eq!(
        (out.packets, out.bytes, out.dropped),
        (frames.len() as u64, bytes, 0)
    );
    assert!(h.run_task("inc", 0).block, "an empty queue blocks the task");
}

#[test]
fn a_full_ring_drops_and_counts_what_was_not_sent() {
    let mut h = Harness::new();
    port(&h, "lo0", 1, 5);
    h.add(&queue_out::CLASS, "out", &arg("lo0")).unwrap();
    h.inject("out", 0, &vec![vec![1u8; 64]; 8]);
    assert_eq!(h.drops("out", "tx_failed"), 3);
    let (_, out) = h.graph.ports().get("lo0").unwrap().counts();
    assert_eq!((out.packets, out.dropped), (5, 3));
}

#[test]
fn queues_are_claimed_once_and_released_with_their_module() {
    let mut h = Harness::new();
    port(&h, "lo0", 2, 64);
    h.add(&queue_inc::CLASS, "q1", &arg("lo0").with("qid", 1))
        .unwrap();
    let e = h.add(&port_inc::CLASS, "all", &arg("lo0")).unwrap_err();
    assert!(
        e.msg.contains("queue 1 of port 'lo0' is already used"),
        "{}",
        e.msg
    );
    let e = h
        .add(&queue_inc::CLASS, "q9", &arg("lo0").with("qid", 9))
        .unwrap_err();
    assert!(e.msg.contains("no queue 9"), "{}", e.msg);
    let e = h.add(&port_inc::CLASS, "x", &arg("nope")).unwrap_err();
    assert!(e.msg.contains("no port named 'nope'"), "{}", e.msg);
    let e = h.add(&port_out::CLASS, "y", &Value::map()).unwrap_err();
    assert!(e.msg.contains("PortOutArg.port"), "{}", e.msg);
    // In use: the port cannot go; once the module is gone it can.
    let e = h.graph.ports().destroy("lo0").unwrap_err();
    assert!(e.msg.contains("in use"), "{}", e.msg);
    let mut ctx = bessemer_core::Context::new(0, &h.pool);
    h.graph.remove_module("q1", &mut ctx).unwrap();
    h.add(&port_inc::CLASS, "all", &arg("lo0")).unwrap();
    assert_eq!(
        h.graph.tasks_of("all").unwrap().len(),
        2,
        "one task per queue"
    );
    h.graph.remove_module("all", &mut ctx).unwrap();
    ctx.release_cache();
    h.graph.ports().destroy("lo0").unwrap();
    assert!(h.graph.ports().get("lo0").is_err());
}

//! Queue: a bounded ring with its own task, the hand-over point between workers.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;

use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, ModuleClass, Packet, PacketBatch, Result,
    SharedModule, Value, MAX_BURST,
};

use super::ring::Ring;

bessemer_core::drop_reasons! {
    /// Why Queue drops packets.
    pub enum QueueDrop {
        Full = "queue_full",
    }
}

/// Packets enqueued on the input gate (any worker) are dequeued by the queue's own task
/// (its worker) and sent out of gate 0. When full, arriving packets are dropped and counted
/// as `queue_full`. With `backpressure`, the queue reports itself congested (in
/// `get_status` and its description) once it is more than half full; upstream tasks are
/// not throttled automatically.
pub struct Queue {
    // The lock is only written by `set_size` (workers paused); readers share it.
    ring: RwLock<Ring<Packet>>,
    burst: AtomicUsize,
    backpressure: bool,
    // The producers' counters and the consumer's sit on separate cache lines, so that a
    // Queue between two workers does not bounce one line between them on every batch.
    enqueued: Padded,
    dropped: Padded,
    dequeued: Padded,
}

/// A counter alone on its cache line pair (adjacent-line prefetch).
#[repr(align(128))]
struct Padded(AtomicU64);

impl std::ops::Deref for Padded {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

fn check_size(size: u64, msg: &str) -> Result<usize> {
    if !(2..=1 << 20).contains(&size) || !size.is_power_of_two() {
        return Err(Error::invalid(format!(
            "{msg}.size: {size} must be a power of two in [2, 1048576]"
        )));
    }
    Ok(size as usize)
}

impl Queue {
    /// The `set_burst` command.
    fn cmd_set_burst(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let b = crate::util::parse_burst(arg, "QueueCommandSetBurstArg")?;
        self.burst.store(b, Ordering::Relaxed);
        Ok(Value::Null)
    }

    /// The `set_size` command.
    fn cmd_set_size(&self, ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "QueueCommandSetSizeArg")?;
        let size = check_size(
            a.uint("size", u64::MAX)?.unwrap_or(0),
            "QueueCommandSetSizeArg",
        )?;
        a.finish()?;
        let mut ring = self.ring.write().unwrap();
        if ring.len() > size {
            return Err(Error::busy(format!(
                "queue holds {} packets, more than the new size {size}",
                ring.len()
            )));
        }
        let new = Ring::new(size);
        let mut held = Vec::with_capacity(ring.len());
        while ring.pop_burst(usize::MAX, |p| held.push(p)) > 0 {}
        let n = held.len();
        let mut rest = held.into_iter();
        // Fits: the size was checked against what the ring held.
        new.push_burst(n, &mut rest);
        for p in rest {
            ctx.drop_packet(p, QueueDrop::Full);
        }
        *ring = new;
        Ok(Value::Null)
    }

    /// The `get_status` command.
    fn cmd_get_status(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "QueueCommandGetStatusArg")?.finish()?;
        let ring = self.ring.read().unwrap();
        Ok(Value::map()
            .with("count", ring.len())
            .with("size", ring.capacity())
            .with("enqueued", self.enqueued.load(Ordering::Relaxed))
            .with("dequeued", self.dequeued.load(Ordering::Relaxed))
            .with("dropped", self.dropped.load(Ordering::Relaxed)))
    }
}

impl SharedModule for Queue {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let ring = self.ring.read().unwrap();
        let n = batch.len();
        let mut pkts = batch.drain();
        let ok = ring.push_burst(n, &mut pkts);
        drop(ring);
        let mut full = 0;
        for p in pkts {
            full += 1;
            ctx.drop_packet(p, QueueDrop::Full);
        }
        if full > 0 {
            self.dropped.fetch_add(full, Ordering::Relaxed);
        }
        self.enqueued.fetch_add(ok as u64, Ordering::Relaxed);
    }

    fn run_task(&self, ctx: &mut Context, _arg: u64) -> TaskResult {
        let ring = self.ring.read().unwrap();
        let burst = self.burst.load(Ordering::Relaxed);
        let mut b = PacketBatch::new();
        let mut bits = 0;
        ring.pop_burst(burst, |p| {
            bits += p.bits();
            // SAFETY: at most burst <= MAX_BURST packets are taken.
            unsafe { b.push_unchecked(p) };
        });
        drop(ring);
        let n = b.len() as u32;
        self.dequeued.fetch_add(n as u64, Ordering::Relaxed);
        ctx.forward(0, &mut b);
        TaskResult {
            block: n == 0,
            packets: n,
            bits,
        }
    }

    fn desc(&self) -> String {
        let ring = self.ring.read().unwrap();
        let congested = self.backpressure && ring.len() * 2 > ring.capacity();
        format!(
            "{}/{}{}",
            ring.len(),
            ring.capacity(),
            if congested { " congested" } else { "" }
        )
    }

    fn deinit(&self, ctx: &mut Context) {
        let ring = self.ring.read().unwrap();
        while ring.pop_burst(usize::MAX, |p| ctx.free(p)) > 0 {}
    }
}

/// The Queue class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Queue",
    name_template: "queue",
    help: "terminates current task and enqueue packets for new task",
    arg_type: "QueueArg",
    arg_doc: &[
        "size: uint64 — ring capacity, a power of two (default 1024)",
        "prefetch: bool — accepted for compatibility (no effect)",
        "backpressure: bool — report congestion when more than half full",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "set_burst",
            arg_type: "QueueCommandSetBurstArg",
            help: "packets dequeued per run",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Queue, Queue::cmd_set_burst),
        },
        CommandSpec {
            name: "set_size",
            arg_type: "QueueCommandSetSizeArg",
            help: "changes the capacity",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared Queue, Queue::cmd_set_size),
        },
        CommandSpec {
            name: "get_status",
            arg_type: "QueueCommandGetStatusArg",
            help: "occupancy and counters",
            mt_safe: true,
            reply_type: "QueueCommandGetStatusResponse",
            mutates: false,
            handler: handler!(Shared Queue, Queue::cmd_get_status),
        },
    ],
    drop_reasons: QueueDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "QueueArg")?;
        let size = check_size(a.uint("size", u64::MAX)?.unwrap_or(1024), "QueueArg")?;
        let _prefetch = a.bool("prefetch")?;
        let backpressure = a.bool("backpressure")?.unwrap_or(false);
        a.finish()?;
        init.register_task(0);
        Ok(Instance::Shared(Box::new(Queue {
            ring: RwLock::new(Ring::new(size)),
            burst: AtomicUsize::new(MAX_BURST),
            backpressure,
            enqueued: Padded(AtomicU64::new(0)),
            dropped: Padded(AtomicU64::new(0)),
            dequeued: Padded(AtomicU64::new(0)),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn status(h: &mut Harness, k: &str) -> i64 {
        h.command("q", "get_status", &Value::map())
            .unwrap()
            .get(k)
            .unwrap()
            .as_i64()
            .unwrap()
    }

    #[test]
    fn overflow_drops_and_task_dequeues_in_order() {
        let mut h = Harness::new();
        h.add(&CLASS, "q", &Value::map().with("size", 16)).unwrap();
        let c = h.capture("q", 0);
        let pkts: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 60]).collect();
        h.inject("q", 0, &pkts);
        assert_eq!(h.drops("q", "queue_full"), 4);
        assert_eq!(
            (
                status(&mut h, "count"),
                status(&mut h, "enqueued"),
                status(&mut h, "dropped")
            ),
            (16, 16, 4)
        );
        h.command("q", "set_burst", &Value::map().with("burst", 10))
            .unwrap();
        assert_eq!(h.run_task("q", 0).packets, 10);
        assert_eq!(h.run_task("q", 0).packets, 6);
        assert!(h.run_task("q", 0).block);
        let got: Vec<u8> = c.take_data().iter().map(|p| p[0]).collect();
        assert_eq!(got, (0..16u8).collect::<Vec<_>>());
    }

    #[test]
    fn resizing_keeps_packets_and_destroy_frees_them() {
        let mut h = Harness::new();
        h.add(&CLASS, "q", &Value::map()).unwrap();
        h.inject("q", 0, &vec![vec![1u8; 60]; 8]);
        assert!(
            h.command("q", "set_size", &Value::map().with("size", 4))
                .is_err(),
            "would lose packets"
        );
        h.command("q", "set_size", &Value::map().with("size", 8))
            .unwrap();
        assert_eq!((status(&mut h, "count"), status(&mut h, "size")), (8, 8));
        assert!(h
            .command("q", "set_size", &Value::map().with("size", 6))
            .unwrap_err()
            .msg
            .contains("power of two"));
        // The harness checks on drop that the 8 held packets were freed.
    }
}

//! Source: generates packets of a fixed size as fast as its task is scheduled.
use crate::util::IDLE;
use bessemer_core::packet::DATA_CAPACITY;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, Result, Value,
    MAX_BURST,
};

/// Generates `burst` packets of `pkt_size` bytes per run (contents are left as they are;
/// put a Rewrite after it to give packets contents).
pub struct Source {
    pkt_size: usize,
    burst: usize,
}

bessemer_core::drop_reasons! {
    /// Why Source drops packets.
    pub enum SourceDrop {
        PoolExhausted = "pool_exhausted",
    }
}

impl Source {
    /// The `set_pkt_size` command.
    fn cmd_set_pkt_size(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "SourceCommandSetPktSizeArg")?;
        let v = a.int("pkt_size", 1, DATA_CAPACITY as i64)?;
        a.finish()?;
        self.pkt_size = v
            .ok_or_else(|| Error::invalid("SourceCommandSetPktSizeArg.pkt_size is required"))?
            as usize;
        Ok(Value::Null)
    }

    /// The `set_burst` command.
    fn cmd_set_burst(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.burst = crate::util::parse_burst(arg, "SourceCommandSetBurstArg")?;
        Ok(Value::Null)
    }
}

impl Module for Source {
    fn run_task(&mut self, ctx: &mut Context, _arg: u64) -> TaskResult {
        if self.burst == 0 {
            return IDLE;
        }
        let mut batch = ctx.new_batch();
        let n = ctx.alloc_bulk(&mut batch, self.burst, self.pkt_size);
        if n == 0 {
            // The pool is exhausted: the packets this run would have made are counted.
            ctx.count_drops(SourceDrop::PoolExhausted, self.burst as u64);
            ctx.send(0, batch);
            return IDLE;
        }
        ctx.send(0, batch);
        TaskResult {
            block: false,
            packets: n as u32,
            bits: (n * self.pkt_size * 8) as u64,
        }
    }

    fn desc(&self) -> String {
        format!("{} bytes, burst {}", self.pkt_size, self.burst)
    }
}

fn create(init: &mut bessemer_core::InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "SourceArg")?;
    let pkt_size = a.int("pkt_size", 1, DATA_CAPACITY as i64)?.unwrap_or(60) as usize;
    a.finish()?;
    let burst = MAX_BURST;
    init.register_task(0);
    Ok(Instance::Exclusive(Box::new(Source { pkt_size, burst })))
}

/// The Source class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Source",
    name_template: "source",
    help: "infinitely generates packets with uninitialized data",
    arg_type: "SourceArg",
    arg_doc: &["pkt_size: uint64 — bytes per packet (default 60); the burst is set with set_burst"],
    igates: 0,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "set_pkt_size",
            arg_type: "SourceCommandSetPktSizeArg",
            help: "changes the packet size",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Source, Source::cmd_set_pkt_size),
        },
        CommandSpec {
            name: "set_burst",
            arg_type: "SourceCommandSetBurstArg",
            help: "changes packets per run",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Source, Source::cmd_set_burst),
        },
    ],
    drop_reasons: SourceDrop::NAMES,
    max_workers: 1,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    #[test]
    fn emits_bursts_of_the_configured_size() {
        let mut h = Harness::new();
        h.add(&CLASS, "src", &Value::map().with("pkt_size", 100))
            .unwrap();
        let c = h.capture("src", 0);
        let r = h.run_task("src", 0);
        assert_eq!(
            (r.packets as usize, r.bits),
            (MAX_BURST, (MAX_BURST * 800) as u64)
        );
        assert!(c.take().iter().all(|p| p.data.len() == 100));
        h.command("src", "set_burst", &Value::map().with("burst", 3))
            .unwrap();
        h.command("src", "set_pkt_size", &Value::map().with("pkt_size", 1500))
            .unwrap();
        assert_eq!(h.run_task("src", 0).packets, 3);
        let lens: Vec<usize> = c.take().iter().map(|p| p.data.len()).collect();
        assert_eq!(lens, vec![1500; 3]);
        // burst 0 switches the Source off, as in BESS (scripts stop a direction that way);
        // an argument with no field set is burst 0, as protobuf sends it.
        for arg in [Value::map().with("burst", 0), Value::map()] {
            h.command("src", "set_burst", &arg).unwrap();
            let r = h.run_task("src", 0);
            assert!(r.block && r.packets == 0);
            assert!(c.take().is_empty());
            assert_eq!(h.drops("src", "pool_exhausted"), 0);
        }
    }

    #[test]
    fn pool_exhaustion_is_counted_not_fatal() {
        let mut h = Harness::new();
        h.add(&CLASS, "src", &Value::map()).unwrap();
        h.add(&crate::basic::sink::CLASS, "sink", &Value::Null)
            .unwrap();
        h.connect("src", 0, "sink", 0).unwrap();
        let mut held = Vec::new();
        while let Some(p) = h.ctx.alloc(60) {
            held.push(p);
        }
        let r = h.run_task("src", 0);
        assert!(r.block && r.packets == 0);
        assert_eq!(h.drops("src", "pool_exhausted"), MAX_BURST as u64);
        for p in held {
            h.ctx.free(p);
        }
        assert_eq!(h.run_task("src", 0).packets as usize, MAX_BURST);
    }

    #[test]
    fn arguments_are_checked() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "a", &Value::map().with("pkt_size", 0))
            .unwrap_err();
        assert!(e.msg.contains("SourceArg.pkt_size"), "{}", e.msg);
        let e = h
            .add(&CLASS, "b", &Value::map().with("burst", 4))
            .unwrap_err();
        assert!(e.msg.contains("unknown field 'burst'"), "{}", e.msg);
        h.add(&CLASS, "c", &Value::Null).unwrap();
        assert!(h
            .command(
                "c",
                "set_burst",
                &Value::map().with("burst", MAX_BURST as i64 + 1)
            )
            .is_err());
    }
}

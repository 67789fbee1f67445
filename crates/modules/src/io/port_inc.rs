//! PortInc: receives from every incoming queue of a port, one task per queue.
use super::{claim_all, port_name, queues_desc, Rx};
use crate::util::parse_burst;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, InitContext, Instance, Module, ModuleClass, Result, Value,
    MAX_BURST,
};

/// Polls all of a port's incoming queues; packets leave on gate 0.
pub struct PortInc {
    queues: Vec<Rx>,
    burst: usize,
}

impl PortInc {
    /// The `set_burst` command.
    fn cmd_set_burst(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.burst = parse_burst(arg, "PortIncCommandSetBurstArg")?;
        Ok(Value::Null)
    }
}

impl Module for PortInc {
    fn run_task(&mut self, ctx: &mut Context, arg: u64) -> TaskResult {
        self.queues[arg as usize].poll(ctx, self.burst)
    }

    fn desc(&self) -> String {
        let first = self.queues.first().map(|q| &q.claim);
        let queues = queues_desc(first, self.queues.len());
        format!("{queues}, burst {}", self.burst)
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "PortIncArg")?;
    let port = port_name(&mut a, "PortIncArg")?.to_string();
    let _prefetch = a.bool("prefetch")?;
    a.finish()?;
    let h = init.port(&port)?;
    let queues = claim_all(&port, "incoming", h.num_inc_q(), |q| {
        let (claim, queue) = h.claim_rx(q)?;
        Ok(Rx { claim, queue })
    })?;
    for q in 0..queues.len() {
        init.register_task(q as u64);
    }
    Ok(Instance::Exclusive(Box::new(PortInc {
        queues,
        burst: MAX_BURST,
    })))
}

/// The PortInc class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "PortInc",
    name_template: "port_inc",
    help: "receives packets from a port",
    arg_type: "PortIncArg",
    arg_doc: &[
        "port: string — the port to receive from (all its incoming queues, one task each)",
        "prefetch: bool — accepted for compatibility (no effect)",
    ],
    igates: 0,
    ogates: 1,
    commands: &[CommandSpec {
        name: "set_burst",
        arg_type: "PortIncCommandSetBurstArg",
        help: "sets packets received per task run (1..32)",
        mt_safe: true,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive PortInc, PortInc::cmd_set_burst),
    }],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

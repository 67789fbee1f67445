//! QueueInc: receives from one incoming queue of a port.
use super::{port_name, Rx};
use crate::util::parse_burst;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, InitContext, Instance, Module, ModuleClass, Result, Value,
    MAX_BURST,
};

/// Polls one incoming queue; packets leave on gate 0.
pub struct QueueInc {
    rx: Rx,
    burst: usize,
}

impl QueueInc {
    /// The `set_burst` command.
    fn cmd_set_burst(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.burst = parse_burst(arg, "QueueIncCommandSetBurstArg")?;
        Ok(Value::Null)
    }
}

impl Module for QueueInc {
    fn run_task(&mut self, ctx: &mut Context, _arg: u64) -> TaskResult {
        self.rx.poll(ctx, self.burst)
    }

    fn desc(&self) -> String {
        format!(
            "{}:{}, burst {}",
            self.rx.claim.port().name(),
            self.rx.claim.qid(),
            self.burst
        )
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "QueueIncArg")?;
    let port = port_name(&mut a, "QueueIncArg")?.to_string();
    let qid = a.uint("qid", u64::MAX)?.unwrap_or(0);
    let _prefetch = a.bool("prefetch")?;
    a.finish()?;
    let h = init.port(&port)?;
    let (claim, queue) = h.claim_rx(usize::try_from(qid).unwrap_or(usize::MAX))?;
    init.register_task(0);
    Ok(Instance::Exclusive(Box::new(QueueInc {
        rx: super::Rx { claim, queue },
        burst: MAX_BURST,
    })))
}

/// The QueueInc class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "QueueInc",
    name_template: "queue_inc",
    help: "receives packets from a port via a specific queue",
    arg_type: "QueueIncArg",
    arg_doc: &[
        "port: string — the port",
        "qid: uint64 — the incoming queue (default 0)",
        "prefetch: bool — accepted for compatibility (no effect)",
    ],
    igates: 0,
    ogates: 1,
    commands: &[CommandSpec {
        name: "set_burst",
        arg_type: "QueueIncCommandSetBurstArg",
        help: "sets packets received per task run (1..32)",
        mt_safe: true,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive QueueInc, QueueInc::cmd_set_burst),
    }],
    drop_reasons: &[],
    max_workers: 1,
    create,
};

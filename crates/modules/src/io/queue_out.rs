//! QueueOut: sends packets to one outgoing queue of a port.
use super::{port_name, Tx};
use bessemer_core::{
    Args, Context, InitContext, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

/// Sends every packet arriving on gate 0 to one queue; what the driver cannot take is
/// dropped as `tx_failed`.
pub struct QueueOut {
    tx: Tx,
}

impl Module for QueueOut {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        self.tx.send(ctx, batch);
    }

    fn desc(&self) -> String {
        format!("{}:{}", self.tx.claim.port().name(), self.tx.claim.qid())
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "QueueOutArg")?;
    let port = port_name(&mut a, "QueueOutArg")?.to_string();
    let qid = a.uint("qid", u64::MAX)?.unwrap_or(0);
    a.finish()?;
    let h = init.port(&port)?;
    let (claim, queue) = h.claim_tx(usize::try_from(qid).unwrap_or(usize::MAX))?;
    Ok(Instance::Exclusive(Box::new(QueueOut {
        tx: Tx { claim, queue },
    })))
}

/// The QueueOut class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "QueueOut",
    name_template: "queue_out",
    help: "sends packets to a port via a specific queue",
    arg_type: "QueueOutArg",
    arg_doc: &[
        "port: string — the port",
        "qid: uint64 — the outgoing queue (default 0)",
    ],
    igates: 1,
    ogates: 0,
    commands: &[],
    drop_reasons: super::TxDrop::NAMES,
    max_workers: 1,
    create,
};

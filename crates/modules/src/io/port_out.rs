//! PortOut: sends packets to a port.
use super::{claim_all, port_name, queues_desc, Tx};
use bessemer_core::{
    Args, Context, InitContext, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

/// Sends every packet arriving on gate 0 to the port (queue = worker id modulo the number of
/// outgoing queues); what the driver cannot take is dropped as `tx_failed`.
pub struct PortOut {
    queues: Vec<Tx>,
}

impl Module for PortOut {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let q = ctx.wid % self.queues.len();
        self.queues[q].send(ctx, batch);
    }

    fn desc(&self) -> String {
        queues_desc(self.queues.first().map(|q| &q.claim), self.queues.len())
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "PortOutArg")?;
    let port = port_name(&mut a, "PortOutArg")?.to_string();
    a.finish()?;
    let h = init.port(&port)?;
    let queues = claim_all(&port, "outgoing", h.num_out_q(), |q| {
        let (claim, queue) = h.claim_tx(q)?;
        Ok(Tx { claim, queue })
    })?;
    Ok(Instance::Exclusive(Box::new(PortOut { queues })))
}

/// The PortOut class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "PortOut",
    name_template: "port_out",
    help: "sends packets to a port",
    arg_type: "PortOutArg",
    arg_doc: &["port: string — the port to send to (claims all its outgoing queues)"],
    igates: 1,
    ogates: 0,
    commands: &[],
    drop_reasons: super::TxDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create,
};

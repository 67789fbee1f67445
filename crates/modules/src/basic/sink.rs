//! Sink: frees every packet it receives.
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

/// Frees all packets.
pub struct Sink;

impl Module for Sink {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        ctx.free_batch(batch);
    }
}

/// The Sink class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Sink",
    name_template: "sink",
    help: "discards all packets",
    arg_type: "SinkArg",
    arg_doc: &[],
    igates: 1,
    ogates: 0,
    commands: &[],
    drop_reasons: &[],
    mt_safe: false,
    create: |_, arg| {
        Args::new(arg, "SinkArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(Sink)))
    },
};

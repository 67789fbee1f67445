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
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "SinkArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(Sink)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn frees_everything_without_counting_drops() {
        let mut h = Harness::new();
        h.add(&CLASS, "s", &Value::Null).unwrap();
        h.inject("s", 0, &vec![vec![0u8; 64]; 100]);
        assert_eq!(h.in_use(), 0);
        assert_eq!(h.graph.total_drops("s").unwrap(), 0);
        assert!(h.add(&CLASS, "t", &Value::map().with("x", 1)).is_err());
    }
}

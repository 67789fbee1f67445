//! Merge: many input gates into output gate 0.
use bessemer_core::module::MAX_GATES;
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

/// Sends every batch from any input gate out of gate 0.
pub struct Merge;

impl Module for Merge {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        ctx.forward(0, batch);
    }
}

/// The Merge class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Merge",
    name_template: "merge",
    help: "All input gates go out of a single output gate",
    arg_type: "MergeArg",
    arg_doc: &[],
    igates: MAX_GATES,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "MergeArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(Merge)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn all_inputs_leave_on_gate_zero() {
        let mut h = Harness::new();
        h.add(&CLASS, "m", &Value::Null).unwrap();
        let cap = h.capture("m", 0);
        h.inject("m", 0, &[vec![1; 60]]);
        h.inject("m", 5, &[vec![2; 60], vec![3; 61]]);
        assert_eq!(cap.take_data(), vec![vec![1; 60], vec![2; 60], vec![3; 61]]);
        assert!(h.add(&CLASS, "bad", &Value::map().with("x", 1)).is_err());
    }
}

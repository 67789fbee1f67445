//! NoOP: a task that does nothing (for scheduler experiments).
use crate::util::IDLE;
use bessemer_core::sched::TaskResult;
use bessemer_core::{Args, Context, Instance, Module, ModuleClass};

/// Registers one task that always reports no work.
pub struct NoOP;

impl Module for NoOP {
    fn run_task(&mut self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }
}

/// The NoOP class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "NoOP",
    name_template: "noop",
    help: "creates a task that does nothing",
    arg_type: "NoOpArg",
    arg_doc: &[],
    igates: 0,
    ogates: 0,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |init, arg| {
        Args::new(arg, "NoOpArg")?.finish()?;
        init.register_task(0);
        Ok(Instance::Exclusive(Box::new(NoOP)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn task_reports_no_work() {
        let mut h = Harness::new();
        h.add(&CLASS, "n", &Value::Null).unwrap();
        let r = h.run_task("n", 0);
        assert!(r.block && r.packets == 0);
    }
}

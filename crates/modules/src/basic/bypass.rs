//! Bypass: forwards input gate i to output gate i, optionally burning cycles (for benchmarks).
use bessemer_core::module::MAX_GATES;
use bessemer_core::{tsc, Args, Context, Instance, Module, ModuleClass, PacketBatch};

/// Forwards batches unchanged after busy-waiting the configured cycles.
pub struct Bypass {
    /// Any of the three is non-zero (one test per batch on the plain path).
    burns: bool,
    per_batch: u64,
    per_packet: u64,
    per_byte: u64,
}

impl Bypass {
    /// Busy-waits the configured cycles, then forwards. Out of line, forward included, so
    /// that the plain Bypass (BESS's perftest chains) keeps nothing live across a call and
    /// saves no registers.
    #[cold]
    #[inline(never)]
    fn burn_and_forward(&self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        let bytes: u64 = batch.pkts().iter().map(|p| p.len() as u64).sum();
        let cycles = self.per_batch + self.per_packet * batch.len() as u64 + self.per_byte * bytes;
        let start = tsc::rdtsc();
        while tsc::rdtsc().wrapping_sub(start) < cycles {
            std::hint::spin_loop();
        }
        ctx.forward(igate, batch);
    }
}

impl Module for Bypass {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        if self.burns {
            return self.burn_and_forward(ctx, batch, igate);
        }
        ctx.forward(igate, batch);
    }

    fn desc(&self) -> String {
        format!(
            "{}/batch {}/pkt {}/byte cycles",
            self.per_batch, self.per_packet, self.per_byte
        )
    }
}

/// The Bypass class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Bypass",
    name_template: "bypass",
    help: "bypasses packets without any processing",
    arg_type: "BypassArg",
    arg_doc: &[
        "cycles_per_batch: uint32 — busy-wait cycles per batch",
        "cycles_per_packet: uint32 — busy-wait cycles per packet",
        "cycles_per_byte: uint32 — busy-wait cycles per byte",
    ],
    igates: MAX_GATES,
    ogates: MAX_GATES,
    commands: &[],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut a = Args::new(arg, "BypassArg")?;
        let per_batch = a.uint("cycles_per_batch", u32::MAX as u64)?.unwrap_or(0);
        let per_packet = a.uint("cycles_per_packet", u32::MAX as u64)?.unwrap_or(0);
        let per_byte = a.uint("cycles_per_byte", u32::MAX as u64)?.unwrap_or(0);
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(Bypass {
            burns: per_batch | per_packet | per_byte != 0,
            per_batch,
            per_packet,
            per_byte,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn forwards_each_input_gate_to_the_same_output_gate() {
        let mut h = Harness::new();
        h.add(&CLASS, "bp", &Value::map().with("cycles_per_packet", 10))
            .unwrap();
        let (c0, c3) = (h.capture("bp", 0), h.capture("bp", 3));
        h.inject("bp", 0, &[vec![1; 60]]);
        h.inject("bp", 3, &[vec![3; 70], vec![4; 80]]);
        assert_eq!(c0.take_data(), vec![vec![1; 60]]);
        assert_eq!(c3.take_data(), vec![vec![3; 70], vec![4; 80]]);
        let e = h
            .add(&CLASS, "x", &Value::map().with("cycles_per_byte", -1))
            .unwrap_err();
        assert!(e.msg.contains("BypassArg.cycles_per_byte"), "{}", e.msg);
    }
}

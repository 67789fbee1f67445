//! GenericDecap: removes a fixed number of bytes from the front of every packet.
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch, Value};

use crate::util::{process_each, Verdict};

/// Largest `bytes` accepted (BESS's limit).
pub const MAX_DECAP: u64 = 1024;

bessemer_core::drop_reasons! {
    /// Why GenericDecap drops packets.
    pub enum GenericDecapDrop {
        TooShort = "too_short",
    }
}

/// Strips `bytes` bytes from the front of each packet. A packet shorter than that is dropped
/// as `too_short` (BESS passes it on unchanged).
pub struct GenericDecap {
    bytes: usize,
}

impl Module for GenericDecap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = self.bytes;
        if n == 0 {
            return ctx.forward(0, batch);
        }
        process_each(ctx, batch, |p| {
            if p.adj(n) {
                Verdict::Gate(0)
            } else {
                Verdict::Drop(GenericDecapDrop::TooShort)
            }
        });
    }

    fn desc(&self) -> String {
        format!("{} bytes", self.bytes)
    }
}

/// The GenericDecap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GenericDecap",
    name_template: "generic_decap",
    help: "removes a fixed number of bytes from the front of packets",
    arg_type: "GenericDecapArg",
    arg_doc: &["bytes: uint64 — bytes to remove (0..1024; 0 passes packets unchanged)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: GenericDecapDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "GenericDecapArg")?;
        let bytes = a.uint("bytes", MAX_DECAP)?.unwrap_or(0) as usize;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(GenericDecap { bytes })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::testutil::hex;
    use bessemer_core::testing::Harness;

    #[test]
    fn strips_bytes_and_drops_short_packets() {
        let mut h = Harness::new();
        h.add(&CLASS, "dec", &Value::map().with("bytes", 4))
            .unwrap();
        let c = h.capture("dec", 0);
        h.inject(
            "dec",
            0,
            &[hex("01020304 0506"), hex("01020304"), hex("010203"), vec![]],
        );
        assert_eq!(c.take_data(), vec![hex("0506"), vec![]]);
        assert_eq!(h.drops("dec", "too_short"), 2);
    }

    #[test]
    fn zero_is_a_no_op_and_range_is_checked() {
        let mut h = Harness::new();
        h.add(&CLASS, "nop", &Value::Null).unwrap();
        let c = h.capture("nop", 0);
        h.inject("nop", 0, &[hex("01"), vec![]]);
        assert_eq!(c.take_data(), vec![hex("01"), vec![]]);
        let e = h
            .add(&CLASS, "big", &Value::map().with("bytes", 1025))
            .unwrap_err();
        assert!(e.msg.contains("GenericDecapArg.bytes"), "{}", e.msg);
    }
}

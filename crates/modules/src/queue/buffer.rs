//! Buffer: collects packets until a full batch is ready, then sends the whole batch on.
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch, Value, MAX_BURST};

/// Holds arriving packets until `MAX_BURST` have gathered, then forwards exactly one full
/// batch; the remainder waits for the next arrival (as BESS, there is no timeout: a trickle
/// can wait indefinitely). Held packets are freed when the module is destroyed.
pub struct Buffer {
    buf: PacketBatch,
}

impl Module for Buffer {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        for p in batch.drain() {
            // SAFETY: `buf` is forwarded (emptied) as soon as it is full.
            unsafe { self.buf.push_unchecked(p) };
            if self.buf.is_full() {
                ctx.forward(0, &mut self.buf);
            }
        }
    }

    fn desc(&self) -> String {
        format!("{}/{MAX_BURST}", self.buf.len())
    }

    fn deinit(&mut self, ctx: &mut Context) {
        ctx.free_batch(&mut self.buf);
    }
}

/// The Buffer class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Buffer",
    name_template: "buffer",
    help: "gathers packets into full batches",
    arg_type: "BufferArg",
    arg_doc: &["(no fields) — forwards only full batches (64 packets)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, arg: &Value| {
        Args::new(arg, "BufferArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(Buffer {
            buf: PacketBatch::new(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn pkts(range: std::ops::Range<u8>) -> Vec<Vec<u8>> {
        range.map(|i| vec![i; 60]).collect()
    }

    #[test]
    fn forwards_only_full_batches_in_order() {
        let mut h = Harness::new();
        h.add(&CLASS, "buf", &Value::Null).unwrap();
        let c = h.capture("buf", 0);
        h.inject("buf", 0, &pkts(0..20));
        assert!(c.is_empty());
        assert_eq!(
            h.graph
                .modules()
                .iter()
                .find(|m| m.name == "buf")
                .unwrap()
                .desc,
            format!("20/{MAX_BURST}")
        );
        let b = MAX_BURST as u8;
        h.inject("buf", 0, &pkts(20..b + 8));
        let got = c.take();
        assert_eq!(got.len(), MAX_BURST);
        let firsts: Vec<u8> = got.iter().map(|p| p.data[0]).collect();
        assert_eq!(firsts, (0..b).collect::<Vec<u8>>());
        // 8 wait; B - 8 more complete the next batch exactly.
        h.inject("buf", 0, &pkts(b + 8..2 * b));
        let firsts: Vec<u8> = c.take().iter().map(|p| p.data[0]).collect();
        assert_eq!(firsts, (b..2 * b).collect::<Vec<u8>>());
    }

    #[test]
    fn held_packets_are_freed_on_destroy() {
        let mut h = Harness::new();
        h.add(&CLASS, "buf", &Value::Null).unwrap();
        h.inject("buf", 0, &pkts(0..5));
        assert_eq!(h.in_use(), 5);
        // The harness asserts on drop that every buffer came back.
    }
}

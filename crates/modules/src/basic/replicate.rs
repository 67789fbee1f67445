//! Replicate: sends each packet out of every listed gate, each gate its own copy.
use bessemer_core::module::MAX_GATES;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Instance, Module, ModuleClass, Packet, PacketBatch,
    Result, Value,
};

use crate::util::{gates_value, parse_gates};

/// Copies each packet to every gate in `gates`: as BESS's, the first gate gets the original
/// and every other gate a fresh buffer with a copy of its bytes (at the same data offset) and
/// metadata, so a module that rewrites one branch's packets leaves the others' alone.
pub struct Replicate {
    gates: Vec<u16>,
}

/// A private copy of `pkt`: data at the same offset (so the same headroom) and metadata;
/// None when the pool is out of buffers.
fn copy_packet(ctx: &mut Context, pkt: &Packet) -> Option<Packet> {
    let mut c = ctx.alloc_any(pkt.len())?;
    let off = pkt.data_offset();
    if off + pkt.len() <= c.frame_size() {
        c.set_data_bounds(off, pkt.len());
    }
    c.data_mut().copy_from_slice(pkt.data());
    c.metadata_mut().copy_from_slice(pkt.metadata());
    Some(c)
}

bessemer_core::drop_reasons! {
    /// Why Replicate drops packets.
    pub enum ReplicateDrop {
        /// No gates to replicate to.
        NoGates = "no_gates",
        /// The pool had no buffer for a copy (that gate misses the packet).
        NoBuffer = "no_buffer",
    }
}

impl Replicate {
    /// The `set_gates` command.
    fn cmd_set_gates(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "ReplicateCommandSetGatesArg")?;
        let gates = parse_gates(a.list("gates")?, "ReplicateCommandSetGatesArg", true)?;
        a.finish()?;
        self.gates = gates;
        Ok(Value::Null)
    }
}

impl Module for Replicate {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let Some((&first, rest)) = self.gates.split_first() else {
            return ctx.drop_batch(batch, ReplicateDrop::NoGates);
        };
        for pkt in batch.drain() {
            for &g in rest {
                match copy_packet(ctx, &pkt) {
                    Some(c) => ctx.emit(g, c),
                    None => ctx.count_drops(ReplicateDrop::NoBuffer, 1),
                }
            }
            ctx.emit(first, pkt);
        }
    }

    fn desc(&self) -> String {
        format!("{} gates", self.gates.len())
    }

    fn info(&self) -> Value {
        Value::map().with("gates", gates_value(&self.gates))
    }
}

/// The Replicate class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Replicate",
    name_template: "repl",
    help: "makes a copy of a packet and sends it out over n gates (the first gate gets the original, each other gate its own copy of bytes and metadata)",
    arg_type: "ReplicateArg",
    arg_doc: &["gates: [int64] — output gates every packet is sent to"],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[CommandSpec {
        name: "set_gates",
        arg_type: "ReplicateCommandSetGatesArg",
        help: "replaces the list of output gates",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive Replicate, Replicate::cmd_set_gates),
    }],
    drop_reasons: ReplicateDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut a = Args::new(arg, "ReplicateArg")?;
        let gates = parse_gates(a.list("gates")?, "ReplicateArg", true)?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(Replicate { gates })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn gates(g: &[i64]) -> Value {
        Value::map().with(
            "gates",
            Value::List(g.iter().map(|&x| Value::Int(x)).collect()),
        )
    }

    #[test]
    fn every_gate_gets_every_packet_and_buffers_come_back() {
        let mut h = Harness::new();
        h.add(&CLASS, "r", &gates(&[0, 2, 5])).unwrap();
        let caps: Vec<_> = [0u16, 2, 5].iter().map(|&g| h.capture("r", g)).collect();
        let pkts: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 64]).collect();
        h.inject("r", 0, &pkts);
        for c in &caps {
            assert_eq!(c.take_data(), pkts);
        }
        assert_eq!(h.in_use(), 0);
    }

    #[test]
    fn set_gates_and_errors() {
        let mut h = Harness::new();
        h.add(&CLASS, "r", &gates(&[])).unwrap();
        h.inject("r", 0, &[vec![0; 60]]);
        assert_eq!(h.drops("r", "no_gates"), 1);
        h.command("r", "set_gates", &gates(&[1])).unwrap();
        let c = h.capture("r", 1);
        h.inject("r", 0, &[vec![0; 60]]);
        assert_eq!(c.len(), 1);
        let e = h.add(&CLASS, "x", &gates(&[9000])).unwrap_err();
        assert!(e.msg.contains("ReplicateArg.gates"), "{}", e.msg);
    }
}

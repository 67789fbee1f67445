//! RoundRobin: spreads packets (or whole batches) over output gates in turn.
use bessemer_core::module::MAX_GATES;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value, MAX_BURST,
};

use crate::util::{gates_value, parse_gates};

bessemer_core::drop_reasons! {
    /// Why RoundRobin drops packets.
    pub enum RoundRobinDrop {
        /// The module has no gates to send to.
        NoGates = "no_gates",
    }
}

/// Sends each packet (mode "packet") or batch (mode "batch") to the next gate in `gates`.
pub struct RoundRobin {
    gates: Vec<u16>,
    per_packet: bool,
    next: usize,
}

fn parse_mode(mode: Option<&str>, msg: &str) -> Result<bool> {
    match mode {
        None | Some("") | Some("packet") => Ok(true),
        Some("batch") => Ok(false),
        Some(m) => Err(Error::invalid(format!(
            "{msg}.mode: '{m}' is not 'packet' or 'batch'"
        ))),
    }
}

impl RoundRobin {
    /// The `set_mode` command.
    fn cmd_set_mode(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "RoundRobinCommandSetModeArg")?;
        let mode = parse_mode(a.str("mode")?, "RoundRobinCommandSetModeArg")?;
        a.finish()?;
        self.per_packet = mode;
        Ok(Value::Null)
    }

    /// The `set_gates` command.
    fn cmd_set_gates(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "RoundRobinCommandSetGatesArg")?;
        let gates = parse_gates(a.list("gates")?, "RoundRobinCommandSetGatesArg", false)?;
        a.finish()?;
        self.gates = gates;
        self.next = 0;
        Ok(Value::Null)
    }
}

impl RoundRobin {
    /// Mode "packet": packet i goes to `gates[(next + i) % n]`. The gates are worked out for
    /// the whole batch first (a counter that wraps, no division), then the batch leaves
    /// through [`crate::gates::split_routed`] (whole when every packet has the same gate),
    /// which sends exactly what one `emit` per packet would, in the same order; gates from
    /// [`FEW_GATES`](crate::gates::FEW_GATES) up still go packet by packet through `emit`.
    #[inline(always)]
    fn per_packet_split(&mut self, ctx: &mut Context, batch: &mut PacketBatch) {
        let n = self.gates.len();
        let len = batch.len();
        if len == 0 {
            return;
        }
        let mut gates = [0u16; MAX_BURST];
        let mut any = 0u16;
        let mut differ = 0u16;
        let first = self.gates[self.next];
        let mut j = self.next;
        for g in &mut gates[..len] {
            *g = self.gates[j];
            any |= *g;
            differ |= *g ^ first;
            j += 1;
            if j == n {
                j = 0;
            }
        }
        self.next = j;
        if differ == 0 {
            return ctx.forward(first, batch);
        }
        crate::gates::split_routed(ctx, batch, &gates, any);
    }

    /// Mode "packet" one `emit` per packet: what `per_packet_split` must match (tests).
    #[cfg(test)]
    fn per_packet_emit(&mut self, ctx: &mut Context, batch: &mut PacketBatch) {
        let n = self.gates.len();
        for pkt in batch.drain() {
            ctx.emit(self.gates[self.next], pkt);
            self.next = (self.next + 1) % n;
        }
    }
}

impl Module for RoundRobin {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = self.gates.len();
        if n == 0 {
            return ctx.drop_batch(batch, RoundRobinDrop::NoGates);
        }
        if self.per_packet {
            self.per_packet_split(ctx, batch);
        } else {
            let g = self.gates[self.next];
            self.next = (self.next + 1) % n;
            ctx.forward(g, batch);
        }
    }

    fn desc(&self) -> String {
        format!(
            "{} gates, per {}",
            self.gates.len(),
            if self.per_packet { "packet" } else { "batch" }
        )
    }

    fn info(&self) -> Value {
        Value::map().with("gates", gates_value(&self.gates))
    }
}

/// The RoundRobin class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "RoundRobin",
    name_template: "rr",
    help: "splits packets evenly with round robin",
    arg_type: "RoundRobinArg",
    arg_doc: &[
        "gates: [int64] — output gates, in turn",
        "mode: string — 'packet' (default) or 'batch'",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[
        CommandSpec {
            name: "set_mode",
            arg_type: "RoundRobinCommandSetModeArg",
            help: "'packet' or 'batch'",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive RoundRobin, RoundRobin::cmd_set_mode),
        },
        CommandSpec {
            name: "set_gates",
            arg_type: "RoundRobinCommandSetGatesArg",
            help: "replaces the gate list",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive RoundRobin, RoundRobin::cmd_set_gates),
        },
    ],
    drop_reasons: RoundRobinDrop::NAMES,
    max_workers: 1,
    create: |_, arg| {
        let mut a = Args::new(arg, "RoundRobinArg")?;
        let gates = parse_gates(a.list("gates")?, "RoundRobinArg", false)?;
        let per_packet = parse_mode(a.str("mode")?, "RoundRobinArg")?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(RoundRobin {
            gates,
            per_packet,
            next: 0,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    fn arg(g: &[i64], mode: &str) -> Value {
        Value::map()
            .with(
                "gates",
                Value::List(g.iter().map(|&x| Value::Int(x)).collect()),
            )
            .with("mode", mode)
    }

    #[test]
    fn packet_mode_alternates_exactly() {
        let mut h = Harness::new();
        h.add(&CLASS, "rr", &arg(&[0, 1, 2], "packet")).unwrap();
        let caps: Vec<_> = (0..3).map(|g| h.capture("rr", g)).collect();
        let pkts: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i; 60]).collect();
        h.inject("rr", 0, &pkts);
        for (g, c) in caps.iter().enumerate() {
            let got: Vec<u8> = c.take_data().iter().map(|p| p[0]).collect();
            assert_eq!(
                got,
                (0..30u8)
                    .filter(|i| *i as usize % 3 == g)
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn batch_mode_sends_whole_batches_in_turn() {
        let mut h = Harness::new();
        h.add(&CLASS, "rr", &arg(&[3, 4], "batch")).unwrap();
        let (a, b) = (h.capture("rr", 3), h.capture("rr", 4));
        for i in 0..4u8 {
            h.inject("rr", 0, &[vec![i; 60], vec![i; 60]]);
        }
        assert_eq!(
            a.take_data().iter().map(|p| p[0]).collect::<Vec<_>>(),
            vec![0, 0, 2, 2]
        );
        assert_eq!(
            b.take_data().iter().map(|p| p[0]).collect::<Vec<_>>(),
            vec![1, 1, 3, 3]
        );
        h.command("rr", "set_mode", &Value::map().with("mode", "packet"))
            .unwrap();
        h.inject("rr", 0, &[vec![9; 60], vec![9; 60]]);
        assert_eq!((a.len(), b.len()), (1, 1));
    }

    #[test]
    fn bad_arguments_are_named() {
        let mut h = Harness::new();
        assert!(h
            .add(&CLASS, "a", &arg(&[], "packet"))
            .unwrap_err()
            .msg
            .contains("at least one gate"));
        assert!(h
            .add(&CLASS, "b", &arg(&[0], "flow"))
            .unwrap_err()
            .msg
            .contains("RoundRobinArg.mode"));
        assert!(h
            .add(&CLASS, "c", &arg(&[-1], "packet"))
            .unwrap_err()
            .msg
            .contains("RoundRobinArg.gates"));
    }

    /// RoundRobin whose mode "packet" emits packet by packet: the reference.
    struct EmitRoundRobin(RoundRobin);

    impl Module for EmitRoundRobin {
        fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
            self.0.per_packet_emit(ctx, batch);
        }
    }

    static EMIT_CLASS: ModuleClass = ModuleClass {
        name: "EmitRoundRobin",
        name_template: "err",
        create: |_, arg| {
            let mut a = Args::new(arg, "RoundRobinArg")?;
            let gates = parse_gates(a.list("gates")?, "RoundRobinArg", false)?;
            let _ = a.str("mode")?;
            a.finish()?;
            Ok(Instance::Exclusive(Box::new(EmitRoundRobin(RoundRobin {
                gates,
                per_packet: true,
                next: 0,
            }))))
        },
        ..CLASS
    };

    /// Packet bytes in the order they reach one capture that every gate in `used` leads to.
    fn run(class: &'static ModuleClass, gates: &[i64], batches: &[usize]) -> Vec<Vec<u8>> {
        let mut h = Harness::new();
        h.add(class, "rr", &arg(gates, "packet")).unwrap();
        let c = h.capture("rr", gates[0] as u16);
        let mut used: Vec<i64> = gates.to_vec();
        used.sort_unstable();
        used.dedup();
        for &g in &used {
            if g != gates[0] {
                h.connect("rr", g as u16, &format!("cap_rr_{}", gates[0]), 0)
                    .unwrap();
            }
        }
        let mut out = Vec::new();
        let mut k = 0u16;
        for &n in batches {
            let pkts: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    k += 1;
                    let mut p = vec![0u8; 60];
                    p[..2].copy_from_slice(&k.to_be_bytes());
                    p
                })
                .collect();
            h.inject("rr", 0, &pkts);
            out.extend(c.take_data());
        }
        assert_eq!(h.in_use(), 0);
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// The batch split sends what one emit per packet sends, in the same order, across
        /// batches (the turn carries over), with repeated gates and gates past the split's
        /// few-gate range.
        #[test]
        fn split_sends_as_emit_does(
            gates in proptest::collection::vec(0i64..12, 1..7),
            batches in proptest::collection::vec(0usize..=MAX_BURST, 1..6),
        ) {
            proptest::prop_assert_eq!(run(&CLASS, &gates, &batches), run(&EMIT_CLASS, &gates, &batches));
        }
    }
}

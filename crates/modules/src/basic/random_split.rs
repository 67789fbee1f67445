//! RandomSplit: drops a share of packets and spreads the rest over gates at random.
use bessemer_core::module::MAX_GATES;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use crate::util::{parse_gates, process_each, FastRng, Verdict};

/// Drops each packet with probability `drop_rate`, else sends it to a uniformly random gate.
pub struct RandomSplit {
    drop_threshold: u64,
    gates: Vec<u16>,
    rng: FastRng,
}

bessemer_core::drop_reasons! {
    /// Why RandomSplit drops packets.
    pub enum RandomSplitDrop {
        Random = "random_drop",
    }
}

fn threshold(rate: Option<f64>, msg: &str) -> Result<u64> {
    let r = rate.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&r) {
        return Err(Error::invalid(format!(
            "{msg}.drop_rate: {r} is not within [0, 1]"
        )));
    }
    Ok((r * (1u64 << 32) as f64) as u64)
}

impl RandomSplit {
    /// The `set_droprate` command.
    fn cmd_set_droprate(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "RandomSplitCommandSetDroprateArg")?;
        let t = threshold(a.float("drop_rate")?, "RandomSplitCommandSetDroprateArg")?;
        a.finish()?;
        self.drop_threshold = t;
        Ok(Value::Null)
    }

    /// The `set_gates` command.
    fn cmd_set_gates(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "RandomSplitCommandSetGatesArg")?;
        let g = parse_gates(a.list("gates")?, "RandomSplitCommandSetGatesArg", false)?;
        a.finish()?;
        self.gates = g;
        Ok(Value::Null)
    }
}

impl Module for RandomSplit {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = self.gates.len() as u64;
        let (rng, gates, threshold) = (&mut self.rng, &self.gates, self.drop_threshold);
        process_each(ctx, batch, |_| {
            let x = rng.next_u64();
            if (x & 0xffff_ffff) < threshold {
                Verdict::Drop(RandomSplitDrop::Random)
            } else {
                Verdict::Gate(gates[(((x >> 32) * n) >> 32) as usize])
            }
        });
    }

    fn desc(&self) -> String {
        format!(
            "drop {:.3}, {} gates",
            self.drop_threshold as f64 / (1u64 << 32) as f64,
            self.gates.len()
        )
    }
}

/// The RandomSplit class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "RandomSplit",
    name_template: "random_split",
    help: "randomly splits/drops packets",
    arg_type: "RandomSplitArg",
    arg_doc: &[
        "drop_rate: double — probability of dropping a packet, 0..1",
        "gates: [int64] — output gates chosen uniformly for the rest",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[
        CommandSpec {
            name: "set_droprate",
            arg_type: "RandomSplitCommandSetDroprateArg",
            help: "changes drop_rate",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive RandomSplit, RandomSplit::cmd_set_droprate),
        },
        CommandSpec {
            name: "set_gates",
            arg_type: "RandomSplitCommandSetGatesArg",
            help: "replaces the gate list",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive RandomSplit, RandomSplit::cmd_set_gates),
        },
    ],
    drop_reasons: RandomSplitDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut a = Args::new(arg, "RandomSplitArg")?;
        let drop_threshold = threshold(a.float("drop_rate")?, "RandomSplitArg")?;
        let gates = parse_gates(a.list("gates")?, "RandomSplitArg", false)?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(RandomSplit {
            drop_threshold,
            gates,
            rng: FastRng::from_tsc(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    #[test]
    fn drops_about_the_rate_and_spreads_the_rest() {
        let mut h = Harness::new();
        let arg = Value::map()
            .with("drop_rate", 0.5)
            .with("gates", Value::List(vec![Value::Int(0), Value::Int(1)]));
        h.add(&CLASS, "rs", &arg).unwrap();
        let (a, b) = (h.capture("rs", 0), h.capture("rs", 1));
        for _ in 0..100 {
            h.inject("rs", 0, &vec![vec![0u8; 60]; 100]);
        }
        let dropped = h.drops("rs", "random_drop");
        assert!(
            (4500..=5500).contains(&dropped),
            "dropped {dropped} of 10000"
        );
        let (na, nb) = (a.take().len() as u64, b.take().len() as u64);
        assert_eq!(na + nb + dropped, 10_000);
        assert!(na > 2000 && nb > 2000, "{na} {nb}");
        h.command("rs", "set_droprate", &Value::map().with("drop_rate", 0.0))
            .unwrap();
        h.inject("rs", 0, &vec![vec![0u8; 60]; 100]);
        assert_eq!(h.drops("rs", "random_drop"), dropped);
        let e = h
            .command("rs", "set_droprate", &Value::map().with("drop_rate", 1.5))
            .unwrap_err();
        assert!(e.msg.contains("drop_rate"), "{}", e.msg);
    }
}

//! The complete example of `docs/guide.md`, "Writing a module class": compiled and tested
//! here so the guide cannot drift from the API.

use bessemer_core::testing::Harness;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

bessemer_core::drop_reasons! {
    /// Why TrimTo drops packets.
    pub enum TrimToDrop {
        /// Shorter than the length asked for.
        TooShort = "too_short",
    }
}

/// Cuts every packet to `len` bytes; shorter packets are dropped.
pub struct TrimTo {
    len: usize,
}

impl TrimTo {
    fn parse(arg: &Value, msg: &str) -> Result<usize> {
        let mut a = Args::new(arg, msg)?;
        let len = a.uint("len", 9000)?.unwrap_or(60) as usize;
        a.finish()?;
        Ok(len)
    }

    /// The `set_len` command.
    fn cmd_set_len(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.len = Self::parse(arg, "TrimToArg")?;
        Ok(Value::Null)
    }
}

impl Module for TrimTo {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        for mut pkt in batch.drain() {
            if pkt.len() < self.len {
                ctx.drop_packet(pkt, TrimToDrop::TooShort);
            } else {
                pkt.set_len(self.len);
                ctx.emit(0, pkt);
            }
        }
    }
}

/// The TrimTo class: what `show mclass` prints, and what the daemon and scripts call.
pub static CLASS: ModuleClass = ModuleClass {
    name: "TrimTo",
    name_template: "trim_to",
    help: "cuts packets to a length; shorter ones are dropped",
    arg_type: "TrimToArg",
    arg_doc: &["len: uint — length to cut packets to (default 60)"],
    igates: 1,
    ogates: 1,
    commands: &[CommandSpec {
        name: "set_len",
        arg_type: "TrimToArg",
        help: "changes the length",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive TrimTo, TrimTo::cmd_set_len),
    }],
    drop_reasons: TrimToDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let len = TrimTo::parse(arg, "TrimToArg")?;
        Ok(Instance::Exclusive(Box::new(TrimTo { len })))
    },
};

#[test]
fn trims_drops_short_packets_and_changes_length_by_command() {
    let mut h = Harness::new();
    h.add(&CLASS, "t", &Value::map().with("len", 4)).unwrap();
    let out = h.capture("t", 0);
    h.inject("t", 0, &[vec![1, 2, 3, 4, 5, 6], vec![1, 2]]);
    assert_eq!(out.take_data(), vec![vec![1, 2, 3, 4]]);
    assert_eq!(h.drops("t", "too_short"), 1);
    h.command("t", "set_len", &Value::map().with("len", 2))
        .unwrap();
    h.inject("t", 0, &[vec![9, 8, 7]]);
    assert_eq!(out.take_data(), vec![vec![9, 8]]);
    assert!(h.add(&CLASS, "u", &Value::map().with("len", -1)).is_err());
    assert_eq!(h.in_use(), 0);
}

//! Dump: prints a packet in hex at most once per interval, forwarding everything.
use std::time::{Duration, Instant};

use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

/// Hex-dumps one packet per `interval` to standard output.
pub struct Dump {
    interval: Duration,
    last: Option<Instant>,
    dumped: u64,
}

fn interval(v: Option<f64>, msg: &str) -> Result<Duration> {
    let s = v.unwrap_or(1.0);
    if !(0.0..=86_400.0).contains(&s) {
        return Err(Error::invalid(format!(
            "{msg}.interval: {s} s is not within [0, 86400]"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Formats bytes as offset-prefixed hex lines of 16 bytes.
pub fn hexdump(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        s += &format!("{:04x}:", i * 16);
        for b in chunk {
            s += &format!(" {b:02x}");
        }
        s.push('\n');
    }
    s
}

impl Dump {
    /// The `set_interval` command.
    fn cmd_set_interval(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "DumpArg")?;
        self.interval = interval(a.float("interval")?, "DumpArg")?;
        a.finish()?;
        Ok(Value::Null)
    }
}

impl Module for Dump {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        if let Some(p) = batch.pkts().first() {
            let now = Instant::now();
            if self
                .last
                .is_none_or(|l| now.duration_since(l) >= self.interval)
            {
                self.last = Some(now);
                self.dumped += 1;
                // The metadata area is shown up to its last non-zero byte (attribute offsets
                // are per module, so the raw area is what is meaningful here).
                let meta = p.metadata();
                let used = meta.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                println!(
                    "{}: {} bytes\n{}metadata ({used} of {} bytes):\n{}",
                    ctx.module_name(),
                    p.len(),
                    hexdump(p.data()),
                    meta.len(),
                    hexdump(&meta[..used])
                );
            }
        }
        ctx.forward(0, batch);
    }

    fn desc(&self) -> String {
        format!(
            "every {:.1} s, {} dumped",
            self.interval.as_secs_f64(),
            self.dumped
        )
    }
}

/// The Dump class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Dump",
    name_template: "dump",
    help: "Dump packet data and metadata attributes",
    arg_type: "DumpArg",
    arg_doc: &["interval: double — seconds between dumps (default 1)"],
    igates: 1,
    ogates: 1,
    commands: &[CommandSpec {
        name: "set_interval",
        arg_type: "DumpArg",
        help: "changes the interval",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive Dump, Dump::cmd_set_interval),
    }],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, arg| {
        let mut a = Args::new(arg, "DumpArg")?;
        let interval = interval(a.float("interval")?, "DumpArg")?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(Dump {
            interval,
            last: None,
            dumped: 0,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    #[test]
    fn forwards_everything_and_dumps_once_per_interval() {
        let mut h = Harness::new();
        h.add(&CLASS, "d", &Value::map().with("interval", 3600.0))
            .unwrap();
        let c = h.capture("d", 0);
        h.inject("d", 0, &vec![vec![0xabu8; 20]; 40]);
        assert_eq!(c.take().len(), 40);
        assert_eq!(h.graph.modules()[0].desc, "every 3600.0 s, 1 dumped");
        assert!(hexdump(&[1, 2, 3]).starts_with("0000: 01 02 03"));
        assert!(h
            .command("d", "set_interval", &Value::map().with("interval", -1.0))
            .is_err());
    }
}

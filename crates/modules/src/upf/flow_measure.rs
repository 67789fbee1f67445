//! FlowMeasure (omec-project fork): per-session (FSEID, PDR) latency and jitter histograms
//! with packet and byte counts, in two tables a leader module flips between so that one can
//! be read while the other fills.
use std::collections::HashMap;

use bessemer_core::module::HistogramExport;
use bessemer_core::{
    handler, AccessMode, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass,
    PacketBatch, Result, Value,
};

use crate::measure::measure::Histogram;
use crate::measure::timestamp::now_ns;
use crate::util::add_attrs;

/// Histogram buckets and their width, as the fork's `SessionStats`.
const NUM_BUCKETS: u64 = 100;
const BUCKET_NS: u64 = 1000;
/// Sessions per table when `entries` is 0.
const DEFAULT_ENTRIES: u64 = 1 << 16;
/// The module-wide histograms (Bessemer's own, for Prometheus and `show latency`): the
/// sessions' 1 us buckets, up to 10 ms.
const ALL_BUCKETS: u64 = 10_000;

const ATTR_FLAG: usize = 0;
const ATTR_TS: usize = 1;
const ATTR_FSEID: usize = 2;
const ATTR_PDR: usize = 3;

/// The two tables' flag values (the fork's `Flag`); 0 is invalid.
const FLAG_A: u64 = 1;
const FLAG_B: u64 = 2;

struct Stats {
    pkts: u64,
    bytes: u64,
    last_latency: u64,
    latency: Histogram,
    jitter: Histogram,
}

/// Records, for each packet with a timestamp (the `timestamp` attribute, ns) not in the
/// future, its latency (now - timestamp) and jitter (difference from the session's last
/// latency) under its session (`fseid`, `pdr_id`) in the table the flag selects: a leader
/// writes its current flag into `flag_attr_name` of every packet, a follower reads it there
/// (packets with an invalid flag are not recorded). Every packet goes on out of gate 0.
pub struct FlowMeasure {
    leader: bool,
    flag: u64,
    entries: usize,
    tables: [HashMap<(u64, u64), Stats, crate::hash::SeededMix>; 2],
    /// Every recorded latency and jitter of every session, since the module was created
    /// (never cleared by `read`, so that the exported histograms only grow, as Prometheus
    /// needs): one histogram per module however many sessions there are.
    all_latency: Histogram,
    all_jitter: Histogram,
}

fn histogram_value(h: &Histogram, percentiles: &[f64]) -> Value {
    let s = h.summarize(percentiles);
    Value::map()
        .with("count", s.count)
        .with("above_range", s.above_range)
        .with("resolution_ns", BUCKET_NS)
        .with("min_ns", s.min)
        .with("avg_ns", s.avg)
        .with("max_ns", s.max)
        .with("total_ns", s.total)
        .with(
            "percentile_values_ns",
            s.percentiles
                .into_iter()
                .map(Value::from)
                .collect::<Vec<_>>(),
        )
}

fn percentiles(list: &[Value], what: &str) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let p = v
            .as_f64()
            .filter(|p| (0.0..=100.0).contains(p))
            .ok_or_else(|| Error::invalid(format!("{what}[{i}]: a percentile in [0, 100]")))?;
        if out.last().is_some_and(|&q| p < q) {
            return Err(Error::invalid(format!(
                "{what}: percentiles must be sorted"
            )));
        }
        out.push(p);
    }
    Ok(out)
}

impl FlowMeasure {
    /// The `read` command: the statistics of one table (by flag), cleared after if asked.
    fn cmd_read(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        const W: &str = "FlowMeasureCommandReadArg";
        let mut a = Args::new(arg, W)?;
        let clear = a.bool("clear")?.unwrap_or(false);
        let lat = percentiles(
            a.list("latency_percentiles")?,
            &format!("{W}.latency_percentiles"),
        )?;
        let jit = percentiles(
            a.list("jitter_percentiles")?,
            &format!("{W}.jitter_percentiles"),
        )?;
        let flag = a.uint("flag_to_read", u64::MAX)?.unwrap_or(0);
        a.finish()?;
        if flag != FLAG_A && flag != FLAG_B {
            return Err(Error::invalid("invalid flag value"));
        }
        let table = &mut self.tables[(flag - 1) as usize];
        let mut keys: Vec<_> = table.keys().copied().collect();
        keys.sort_unstable();
        let stats: Vec<Value> = keys
            .iter()
            .map(|k| {
                let s = &table[k];
                Value::map()
                    .with("fseid", k.0)
                    .with("pdr", k.1)
                    .with("latency", histogram_value(&s.latency, &lat))
                    .with("jitter", histogram_value(&s.jitter, &jit))
                    .with("total_bytes", s.bytes)
                    .with("total_packets", s.pkts)
            })
            .collect();
        if clear {
            table.clear();
        }
        Ok(Value::map().with("statistics", stats))
    }

    /// The `flip` command (leaders only): the other table fills from now on; answers the
    /// flag of the one that was filling.
    fn cmd_flip(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "FlowMeasureCommandFlipArg")?.finish()?;
        if !self.leader {
            return Err(Error::invalid("only leaders can flip the flag"));
        }
        let old = self.flag;
        self.flag = if old == FLAG_A { FLAG_B } else { FLAG_A };
        Ok(Value::map().with("old_flag", old))
    }
}

impl Module for FlowMeasure {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = now_ns(ctx.refresh_now());
        let (fa, ta, sa, pa) = (
            ctx.attr(ATTR_FLAG),
            ctx.attr(ATTR_TS),
            ctx.attr(ATTR_FSEID),
            ctx.attr(ATTR_PDR),
        );
        for p in batch.pkts_mut() {
            if self.leader {
                p.set_attr(fa, &self.flag.to_le_bytes());
            } else {
                match u64::from_le_bytes(p.get_attr(fa)) {
                    f @ (FLAG_A | FLAG_B) => self.flag = f,
                    _ => continue,
                }
            }
            let ts = u64::from_le_bytes(p.get_attr(ta));
            if ts == 0 || now < ts {
                continue;
            }
            let key = (
                u64::from_le_bytes(p.get_attr(sa)),
                u32::from_le_bytes(p.get_attr(pa)) as u64,
            );
            let table = &mut self.tables[(self.flag - 1) as usize];
            if !table.contains_key(&key) && table.len() >= self.entries {
                continue;
            }
            let s = table.entry(key).or_insert_with(|| Stats {
                pkts: 0,
                bytes: 0,
                last_latency: 0,
                latency: Histogram::new(NUM_BUCKETS, BUCKET_NS),
                jitter: Histogram::new(NUM_BUCKETS, BUCKET_NS),
            });
            let lat = now - ts;
            if s.last_latency == 0 {
                s.last_latency = lat;
            }
            let jit = s.last_latency.abs_diff(lat);
            s.jitter.insert(jit);
            s.last_latency = lat;
            s.latency.insert(lat);
            self.all_jitter.insert(jit);
            self.all_latency.insert(lat);
            s.pkts += 1;
            s.bytes += p.len() as u64;
        }
        ctx.forward(0, batch);
    }

    fn desc(&self) -> String {
        format!(
            "{}, flag {}, {} + {} sessions",
            if self.leader { "leader" } else { "follower" },
            self.flag,
            self.tables[0].len(),
            self.tables[1].len()
        )
    }

    /// Latency and jitter of all sessions together (see `all_latency`); per-session
    /// histograms stay with the `read` command, so the exported series are bounded by the
    /// number of FlowMeasure modules, not of sessions.
    fn histograms(&self) -> Vec<HistogramExport> {
        vec![
            self.all_latency.export("latency"),
            self.all_jitter.export("jitter"),
        ]
    }
}

/// The FlowMeasure class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "FlowMeasure",
    name_template: "qos_measure",
    help: "Measures QoS metrics",
    arg_type: "FlowMeasureArg",
    arg_doc: &[
        "flag_attr_name: string — the 8-byte attribute carrying the table flag (required)",
        "entries: uint64 — sessions per table (0: 65536)",
        "leader: bool — write the flag (and flip it) rather than read it",
        "reads timestamp (8, ns), fseid (8), pdr_id (4)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "read",
            arg_type: "FlowMeasureCommandReadArg",
            help: "statistics of the table of flag_to_read (a FlowMeasureReadResponse)",
            mt_safe: true,
            reply_type: "FlowMeasureReadResponse",
            mutates: false,
            handler: handler!(Exclusive FlowMeasure, FlowMeasure::cmd_read),
        },
        CommandSpec {
            name: "flip",
            arg_type: "FlowMeasureCommandFlipArg",
            help: "switches tables (leaders only; a FlowMeasureFlipResponse)",
            mt_safe: true,
            reply_type: "FlowMeasureFlipResponse",
            mutates: true,
            handler: handler!(Exclusive FlowMeasure, FlowMeasure::cmd_flip),
        },
    ],
    drop_reasons: &[],
    max_workers: 1,
    create: |init, arg: &Value| {
        let mut a = Args::new(arg, "FlowMeasureArg")?;
        let flag_attr = a.str("flag_attr_name")?.unwrap_or("").to_string();
        let entries = a.uint("entries", u32::MAX as u64)?.unwrap_or(0);
        let leader = a.bool("leader")?.unwrap_or(false);
        a.finish()?;
        if flag_attr.is_empty() {
            return Err(Error::invalid("invalid flag attribute name"));
        }
        let mode = if leader {
            AccessMode::Write
        } else {
            AccessMode::Read
        };
        add_attrs(
            init,
            &[
                (&flag_attr, 8, mode),
                ("timestamp", 8, AccessMode::Read),
                ("fseid", 8, AccessMode::Read),
                ("pdr_id", 4, AccessMode::Read),
            ],
        )?;
        Ok(Instance::Exclusive(Box::new(FlowMeasure {
            leader,
            // A follower has seen no flag yet; a leader starts filling table A.
            flag: FLAG_A,
            entries: if entries == 0 {
                DEFAULT_ENTRIES
            } else {
                entries
            } as usize,
            tables: [HashMap::default(), HashMap::default()],
            all_latency: Histogram::new(ALL_BUCKETS, BUCKET_NS),
            all_jitter: Histogram::new(ALL_BUCKETS, BUCKET_NS),
        })))
    },
};

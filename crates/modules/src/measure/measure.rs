//! Measure: latency and jitter histograms of packets marked by Timestamp.
use bessemer_core::{
    AccessMode, Args, AttrOffset, CommandSpec, Context, Error, Instance, Module, ModuleClass,
    PacketBatch, Result, Value,
};

use super::timestamp::{now_ns, parse_place, MARKER, MARK_SIZE};
use crate::util::FastRng;

/// A fixed-resolution histogram of nanosecond values.
#[derive(Clone, Debug)]
pub struct Histogram {
    buckets: Vec<u64>,
    resolution: u64,
    count: u64,
    above: u64,
    min: u64,
    max: u64,
    total: u128,
}

impl Histogram {
    /// Buckets of `resolution` ns up to `max_ns`.
    pub fn new(max_ns: u64, resolution: u64) -> Histogram {
        let resolution = resolution.max(1);
        Histogram {
            buckets: vec![0; (max_ns / resolution + 1) as usize],
            resolution,
            count: 0,
            above: 0,
            min: u64::MAX,
            max: 0,
            total: 0,
        }
    }

    /// Records one value.
    #[inline]
    pub fn insert(&mut self, v: u64) {
        let b = (v / self.resolution) as usize;
        match self.buckets.get_mut(b) {
            Some(x) => *x += 1,
            None => self.above += 1,
        }
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.total += v as u128;
    }

    /// The value below which `p` percent of samples fall (bucket upper bound).
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return ((i as u64 + 1) * self.resolution).min(self.max);
            }
        }
        self.max
    }

    fn summary(&self, percentiles: &[f64]) -> Value {
        let (min, avg) = if self.count == 0 {
            (0, 0)
        } else {
            (self.min, (self.total / self.count as u128) as u64)
        };
        Value::map()
            .with("count", self.count)
            .with("above_range", self.above)
            .with("resolution_ns", self.resolution)
            .with("min_ns", min)
            .with("avg_ns", avg)
            .with("max_ns", self.max)
            .with("total_ns", self.total.min(u64::MAX as u128) as u64)
            .with(
                "percentile_values_ns",
                Value::List(
                    percentiles
                        .iter()
                        .map(|&p| Value::Int(self.percentile(p) as i64))
                        .collect(),
                ),
            )
    }

    fn clear(&mut self) {
        *self = Histogram::new(
            (self.buckets.len() as u64 - 1) * self.resolution,
            self.resolution,
        );
    }
}

/// Reads Timestamp's mark, records one-way latency, and samples jitter (difference between
/// consecutive latencies). Forwards every packet.
pub struct Measure {
    offset: Option<usize>,
    latency: Histogram,
    jitter: Histogram,
    jitter_threshold: u64,
    last_latency: Option<u64>,
    /// Every packet seen (BESS's pkt_cnt_).
    packets: u64,
    /// Bytes of the packets measured (timestamped; BESS's bytes_cnt_).
    bytes: u64,
    rng: FastRng,
}

impl Module for Measure {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = now_ns(ctx.refresh_now());
        let attr = ctx.attr(0);
        // As BESS: every packet counts in `packets`; only marked ones (with a time not in the
        // future) in the bytes and the histograms.
        self.packets += batch.len() as u64;
        for p in batch.pkts() {
            let t = match self.offset {
                Some(off) => match p.data().get(off..off + MARK_SIZE) {
                    Some(m) if m[..4] == MARKER.to_le_bytes() => {
                        u64::from_le_bytes(m[4..].try_into().unwrap())
                    }
                    _ => continue,
                },
                None => match attr {
                    AttrOffset::At(_) => match u64::from_le_bytes(p.get_attr::<8>(attr)) {
                        0 => continue,
                        t => t,
                    },
                    _ => continue,
                },
            };
            if now < t {
                continue;
            }
            let lat = now - t;
            self.bytes += p.len() as u64;
            self.latency.insert(lat);
            if (self.rng.next_u64() >> 32) < self.jitter_threshold {
                if let Some(prev) = self.last_latency {
                    self.jitter.insert(lat.abs_diff(prev));
                }
                self.last_latency = Some(lat);
            }
        }
        ctx.forward(0, batch);
    }

    fn command(&mut self, _ctx: &mut Context, cmd: &str, arg: &Value) -> Result<Value> {
        match cmd {
            "get_summary" => {
                let mut a = Args::new(arg, "MeasureCommandGetSummaryArg")?;
                let clear = a.bool("clear")?.unwrap_or(false);
                let pct = |l: &[Value], f: &str| -> Result<Vec<f64>> {
                    l.iter()
                        .map(|v| match v.as_f64() {
                            Some(x) if (0.0..=100.0).contains(&x) => Ok(x),
                            _ => Err(Error::invalid(format!(
                                "MeasureCommandGetSummaryArg.{f}: {v:?} is not within [0, 100]"
                            ))),
                        })
                        .collect()
                };
                let lp = pct(a.list("latency_percentiles")?, "latency_percentiles")?;
                let jp = pct(a.list("jitter_percentiles")?, "jitter_percentiles")?;
                a.finish()?;
                // BESS: wall-clock seconds; bits of the measured bytes plus 24 bytes of
                // framing overhead for every packet seen.
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                let v = Value::map()
                    .with("timestamp", ts)
                    .with("packets", self.packets)
                    .with("bits", (self.bytes + self.packets * 24) * 8)
                    .with("latency", self.latency.summary(&lp))
                    .with("jitter", self.jitter.summary(&jp));
                if clear {
                    self.clear();
                }
                Ok(v)
            }
            "clear" => {
                Args::new(arg, "EmptyArg")?.finish()?;
                self.clear();
                Ok(Value::Null)
            }
            _ => Err(Error::invalid(format!("unknown command '{cmd}'"))),
        }
    }

    fn desc(&self) -> String {
        format!("{} packets measured", self.packets)
    }
}

impl Measure {
    fn clear(&mut self) {
        self.latency.clear();
        self.jitter.clear();
        self.packets = 0;
        self.bytes = 0;
        self.last_latency = None;
    }
}

/// The Measure class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Measure",
    name_template: "measure",
    help: "measures packet latency (paired with Timestamp module)",
    arg_type: "MeasureArg",
    arg_doc: &[
        "offset: uint64 — where Timestamp put its mark (default 42)",
        "attr_name: string — or: the metadata attribute holding the time",
        "jitter_sample_prob: double — share of measured packets sampled for jitter (default 0.05)",
        "get_summary: packets = every packet seen; bits = (bytes of measured packets + 24 x packets) x 8; timestamp = wall-clock seconds; latency/jitter over marked packets only",
        "latency_ns_max: uint64 — histogram range (default 100 ms)",
        "latency_ns_resolution: uint32 — bucket width (default 100 ns)",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "get_summary",
            arg_type: "MeasureCommandGetSummaryArg",
            help: "latency and jitter summary with percentiles",
            mt_safe: true,
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "resets the histograms",
            mt_safe: true,
        },
    ],
    drop_reasons: &[],
    mt_safe: true,
    create: |init, arg| {
        let mut a = Args::new(arg, "MeasureArg")?;
        let offset = parse_place(&mut a, init, AccessMode::Read, "MeasureArg")?;
        let prob = a
            .float("jitter_sample_prob")?
            .filter(|&p| p != 0.0)
            .unwrap_or(0.05);
        let max_ns = a
            .uint("latency_ns_max", 10_000_000_000)?
            .unwrap_or(100_000_000);
        let res = a
            .uint("latency_ns_resolution", u32::MAX as u64)?
            .unwrap_or(100);
        a.finish()?;
        if !(0.0..=1.0).contains(&prob) {
            return Err(Error::invalid(format!(
                "MeasureArg.jitter_sample_prob: {prob} is not within [0, 1]"
            )));
        }
        if res == 0 || max_ns / res > 10_000_000 {
            return Err(Error::invalid(
                "MeasureArg: latency_ns_max / latency_ns_resolution must be 1..=10000000 buckets",
            ));
        }
        Ok(Instance::Exclusive(Box::new(Measure {
            offset,
            latency: Histogram::new(max_ns, res),
            jitter: Histogram::new(max_ns, res),
            jitter_threshold: (prob * (1u64 << 32) as f64) as u64,
            last_latency: None,
            packets: 0,
            bytes: 0,
            rng: FastRng::from_tsc(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;

    #[test]
    fn histogram_percentiles() {
        let mut h = Histogram::new(1000, 10);
        for v in 1..=100 {
            h.insert(v * 5);
        }
        h.insert(5000);
        assert_eq!(h.percentile(50.0), 260);
        assert_eq!(h.above, 1);
        assert_eq!(h.max, 5000);
    }

    #[test]
    fn literal_marks_unmarked_and_future_packets() {
        let mut h = Harness::new();
        h.add(&CLASS, "m", &Value::map().with("offset", 42))
            .unwrap();
        let c = h.capture("m", 0);
        let mark = |t: u64| {
            let mut p = vec![0u8; 64];
            p[42..46].copy_from_slice(&[0x55, 0xbe, 0xc5, 0x54]);
            p[46..54].copy_from_slice(&t.to_le_bytes());
            p
        };
        // Marked at time 1 ns (latency = now - 1), marked in the far future (skipped),
        // unmarked, and too short for the mark.
        let pkts = vec![mark(1), mark(u64::MAX), vec![0u8; 64], vec![0u8; 40]];
        h.inject("m", 0, &pkts);
        assert_eq!(c.take_data(), pkts, "all forwarded unchanged");
        let s = h.command("m", "get_summary", &Value::map()).unwrap();
        assert_eq!(s.get("packets").unwrap().as_i64(), Some(4));
        assert_eq!(s.get("bits").unwrap().as_i64(), Some((64 + 4 * 24) * 8));
        let lat = s.get("latency").unwrap();
        assert_eq!(lat.get("count").unwrap().as_i64(), Some(1));
    }

    #[test]
    fn timestamped_packets_are_measured() {
        let mut h = Harness::new();
        h.add(&super::super::timestamp::CLASS, "ts", &Value::map())
            .unwrap();
        h.add(&CLASS, "m", &Value::map()).unwrap();
        h.connect("ts", 0, "m", 0).unwrap();
        let c = h.capture("m", 0);
        h.inject("ts", 0, &vec![vec![0u8; 80]; 50]);
        h.inject("m", 0, &[vec![0u8; 80]]); // unmarked: passed on, not measured
        assert_eq!(c.take().len(), 51);
        let pct = Value::List(vec![Value::Float(50.0), Value::Float(99.0)]);
        let s = h
            .command(
                "m",
                "get_summary",
                &Value::map()
                    .with("latency_percentiles", pct)
                    .with("clear", true),
            )
            .unwrap();
        // Every packet seen counts; bits are the measured packets' bytes plus 24 per packet.
        assert_eq!(s.get("packets").unwrap().as_i64(), Some(51));
        assert_eq!(
            s.get("bits").unwrap().as_i64(),
            Some((50 * 80 + 51 * 24) * 8)
        );
        let lat = s.get("latency").unwrap();
        assert_eq!(lat.get("count").unwrap().as_i64(), Some(50));
        let max = lat.get("max_ns").unwrap().as_i64().unwrap();
        assert!(max < 1_000_000_000, "latency {max} ns");
        let pv = lat.get("percentile_values_ns").unwrap().as_list().unwrap();
        assert_eq!(pv.len(), 2);
        let s = h.command("m", "get_summary", &Value::map()).unwrap();
        assert_eq!(s.get("packets").unwrap().as_i64(), Some(0), "cleared");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let ts = s.get("timestamp").unwrap().as_f64().unwrap();
        assert!((now - ts).abs() < 60.0, "epoch seconds: {ts}");
        assert!(h
            .command(
                "m",
                "get_summary",
                &Value::map().with(
                    "latency_percentiles",
                    Value::List(vec![Value::Float(101.0)])
                )
            )
            .is_err());
    }
}

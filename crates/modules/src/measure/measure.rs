//! Measure: latency and jitter histograms of packets marked by Timestamp.
use bessemer_core::module::{export_bounds, HistogramExport, EXPORT_PERCENTILES};
use bessemer_core::{
    handler, AccessMode, Args, AttrOffset, CommandSpec, Context, Error, Instance, Module,
    ModuleClass, PacketBatch, Result, Value,
};

use super::timestamp::{mark_at, now_ns, parse_place, Place};
use crate::util::FastRng;

/// A fixed-resolution histogram of nanosecond values, as BESS's `utils/histogram.h`: bucket
/// i counts values in [i x width, (i + 1) x width) and stands for i x width; one more bucket
/// counts values beyond the range.
#[derive(Clone, Debug)]
pub struct Histogram {
    /// `num_buckets` buckets plus the above-range bucket.
    buckets: Vec<u64>,
    resolution: u64,
    /// `u64::MAX / resolution`: divides by a multiply (see `bucket`).
    recip: u64,
    /// The first value of the above-range bucket (`num_buckets x resolution`, saturated).
    end: u64,
    /// `end`, at most 2^63: below it the multiply divides exactly.
    cutoff: u64,
}

/// What a histogram summary reports (BESS's `Histogram::Summary`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Samples, those above the range included.
    pub count: u64,
    /// Samples beyond the range.
    pub above_range: u64,
    /// Representative value of the lowest non-empty bucket.
    pub min: u64,
    /// Representative value of the highest non-empty bucket (the range end when above).
    pub max: u64,
    /// total / count.
    pub avg: u64,
    /// Sum of the representative values of all samples.
    pub total: u64,
    /// For each percentile X: the smallest representative value whose cumulative share of
    /// samples reaches X.
    pub percentiles: Vec<u64>,
}

impl Histogram {
    /// `num_buckets` buckets of `resolution` ns.
    pub fn new(num_buckets: u64, resolution: u64) -> Histogram {
        let resolution = resolution.max(1);
        Histogram {
            buckets: vec![0; num_buckets as usize + 1],
            resolution,
            recip: u64::MAX / resolution,
            end: num_buckets.saturating_mul(resolution),
            cutoff: num_buckets.saturating_mul(resolution).min(1 << 63),
        }
    }

    /// Records one value.
    #[inline]
    pub fn insert(&mut self, v: u64) {
        let last = self.buckets.len() - 1;
        let i = self.bucket(v).min(last);
        self.buckets[i] += 1;
    }

    /// `v / resolution` where that is below the bucket count, else at least the count.
    #[inline(always)]
    fn bucket(&self, v: u64) -> usize {
        if v >= self.cutoff {
            return match v >= self.end {
                true => self.buckets.len() - 1,
                false => (v / self.resolution) as usize,
            };
        }
        // A division per packet took longer than the rest of the module: the product with
        // the reciprocal is the quotient or one less for any v below 2^63 (the error is
        // below v x (resolution + 1) / (resolution x 2^64) < 1), and one comparison
        // corrects it.
        let q = ((v as u128 * self.recip as u128) >> 64) as u64;
        (q + (v - q * self.resolution >= self.resolution) as u64) as usize
    }

    /// The summary with `percentiles` (sorted, within [0, 100]).
    pub fn summarize(&self, percentiles: &[f64]) -> Summary {
        let count: u64 = self.buckets.iter().sum();
        let mut r = Summary {
            count,
            above_range: *self.buckets.last().unwrap(),
            percentiles: vec![0; percentiles.len()],
            ..Summary::default()
        };
        let (mut found_min, mut so_far, mut total) = (false, 0u64, 0u64);
        let mut next = 0;
        for (i, &freq) in self.buckets.iter().enumerate() {
            let val = i as u64 * self.resolution;
            total = total.wrapping_add(val.wrapping_mul(freq));
            so_far += freq;
            if freq == 0 {
                continue;
            }
            if !found_min {
                r.min = val;
                found_min = true;
            }
            r.max = val;
            while next < percentiles.len() {
                // Not yet X percent of the samples (within an epsilon, as BESS compares).
                let share = (so_far as f64 * 100.0) / count as f64;
                if so_far < count && share < percentiles[next] + f64::EPSILON {
                    break;
                }
                r.percentiles[next] = val;
                next += 1;
            }
        }
        r.avg = total.checked_div(count).unwrap_or(0);
        r.total = total;
        r
    }

    fn summary(&self, percentiles: &[f64]) -> Value {
        let s = self.summarize(percentiles);
        Value::map()
            .with("count", s.count)
            .with("above_range", s.above_range)
            .with("resolution_ns", self.resolution)
            .with("min_ns", s.min)
            .with("avg_ns", s.avg)
            .with("max_ns", s.max)
            .with("total_ns", s.total)
            .with(
                "percentile_values_ns",
                Value::List(
                    s.percentiles
                        .iter()
                        .map(|&v| Value::Int(v as i64))
                        .collect(),
                ),
            )
    }

    fn clear(&mut self) {
        self.buckets.fill(0);
    }

    /// The histogram with HDR-style log-spaced buckets (see
    /// [`bessemer_core::module::export_bounds`]) for `show latency` and Prometheus. A value
    /// is its bucket's representative (i x resolution), as in [`Histogram::summarize`]; the
    /// values above the range count in the last (`+Inf`) bucket and in the sum at the
    /// range's end.
    pub fn export(&self, name: &'static str) -> HistogramExport {
        let n = self.buckets.len() - 1;
        let bounds = export_bounds(self.resolution, self.end.max(self.resolution));
        let mut counts = vec![0u64; bounds.len() + 1];
        let mut j = 0;
        for (i, &c) in self.buckets[..n].iter().enumerate() {
            if c == 0 {
                continue;
            }
            let v = i as u64 * self.resolution;
            while j < bounds.len() && bounds[j] < v {
                j += 1;
            }
            counts[j] += c;
        }
        counts[bounds.len()] += self.buckets[n];
        let s = self.summarize(&EXPORT_PERCENTILES);
        HistogramExport {
            name,
            bounds_ns: bounds,
            counts,
            count: s.count,
            sum_ns: s.total,
            above_range: s.above_range,
            resolution_ns: self.resolution,
            min_ns: s.min,
            max_ns: s.max,
            percentiles: EXPORT_PERCENTILES
                .iter()
                .copied()
                .zip(s.percentiles)
                .collect(),
        }
    }
}

/// Reads Timestamp's mark, records one-way latency, and samples jitter (difference between
/// consecutive latencies). Forwards every packet.
pub struct Measure {
    place: Place,
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

impl Measure {
    /// The `get_summary` command.
    fn cmd_get_summary(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "MeasureCommandGetSummaryArg")?;
        let clear = a.bool("clear")?.unwrap_or(false);
        // As BESS's IsValidPercentiles: within [0, 100] and sorted.
        let pct = |l: &[Value], f: &str| -> Result<Vec<f64>> {
            let v: Vec<f64> = l
                .iter()
                .map(|v| match v.as_f64() {
                    Some(x) if (0.0..=100.0).contains(&x) => Ok(x),
                    _ => Err(Error::invalid(format!(
                        "MeasureCommandGetSummaryArg.{f}: invalid '{f}': {v:?} is not within [0, 100]"
                    ))),
                })
                .collect::<Result<_>>()?;
            if v.windows(2).any(|w| w[0] > w[1]) {
                return Err(Error::invalid(format!(
                    "MeasureCommandGetSummaryArg.{f}: invalid '{f}': not sorted"
                )));
            }
            Ok(v)
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

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.clear();
        Ok(Value::Null)
    }
}

impl Module for Measure {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = now_ns(ctx.refresh_now());
        let attr = ctx.attr(0);
        // As BESS: every packet counts in `packets`; only marked ones (with a time not in the
        // future) in the bytes and the histograms.
        self.packets += batch.len() as u64;
        for p in batch.pkts() {
            // As the fork's measure.cc: the attribute's time if it holds one, else a mark
            // at the offset (0 in attribute mode).
            let (from_attr, off) = match self.place {
                Place::Offset(off) => (0, off),
                Place::Attr => match attr {
                    AttrOffset::At(_) => (u64::from_le_bytes(p.get_attr::<8>(attr)), 0),
                    _ => (0, 0),
                },
            };
            let t = match from_attr {
                0 => match mark_at(p.data(), off) {
                    Some(t) => t,
                    None => continue,
                },
                t => t,
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

    fn desc(&self) -> String {
        format!("{} packets measured", self.packets)
    }

    fn histograms(&self) -> Vec<HistogramExport> {
        vec![self.latency.export("latency"), self.jitter.export("jitter")]
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
        "attr_name: string — the metadata attribute holding the time (default: timestamp)",
        "offset: uint64 — or, when not 0: where Timestamp put its mark in the packet",
        "jitter_sample_prob: double — share of measured packets sampled for jitter (default 0.05)",
        "get_summary: packets = every packet seen; bits = (bytes of measured packets + 24 x packets) x 8; timestamp = wall-clock seconds; latency/jitter over marked packets only",
        "latency_ns_max: uint64 — histogram range (default 100 ms)",
        "latency_ns_resolution: uint32 — bucket width (default 100 ns); at most 5 000 000 buckets (else E2BIG)",
        "summary min/max/avg/total/percentiles are bucket values (i x resolution), the range end for samples above it, as BESS",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "get_summary",
            arg_type: "MeasureCommandGetSummaryArg",
            help: "latency and jitter summary with percentiles",
            mt_safe: true,
            reply_type: "MeasureCommandGetSummaryResponse",
            mutates: false,
            handler: handler!(Exclusive Measure, Measure::cmd_get_summary),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "resets the histograms",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Measure, Measure::cmd_clear),
        },
    ],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "MeasureArg")?;
        let place = parse_place(&mut a, init, AccessMode::Read, "MeasureArg")?;
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
        // As BESS: ceil(max / resolution) buckets, at most half of 10 million.
        let res = res.max(1);
        let buckets = max_ns.div_ceil(res);
        if buckets > 5_000_000 {
            return Err(Error::new(
                libc::E2BIG,
                "MeasureArg: excessive latency_ns_max / latency_ns_resolution",
            ));
        }
        Ok(Instance::Exclusive(Box::new(Measure {
            place,
            latency: Histogram::new(buckets, res),
            jitter: Histogram::new(buckets, res),
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

    proptest::proptest! {
        /// Buckets found by the reciprocal are the quotient's, clamped to the range, for every
        /// resolution and value (the range's edges and values past 2^63 among them).
        #[test]
        fn buckets_are_quotients(
            res in proptest::prop_oneof![1u64..4, 1u64..=u32::MAX as u64, proptest::prelude::any::<u64>()],
            n in proptest::prop_oneof![1u64..10, 1u64..5_000_000],
            v in proptest::prelude::any::<u64>(),
            near in proptest::prelude::any::<bool>(),
        ) {
            let h = Histogram::new(n, res);
            let r = res.max(1);
            // Values near a bucket edge or the range's end as often as anywhere.
            let v = if near { (v % n.saturating_add(2)).saturating_mul(r).saturating_add(v % 3).saturating_sub(1) } else { v };
            let want = ((v / r) as usize).min(n as usize);
            proptest::prop_assert_eq!(h.bucket(v).min(n as usize), want);
        }
    }

    #[test]
    fn histogram_summarizes_as_bess() {
        // 100 buckets of 10 ns: 5, 10, ..., 500 and one value beyond the range.
        let mut h = Histogram::new(100, 10);
        for v in 1..=100 {
            h.insert(v * 5);
        }
        h.insert(5000);
        let s = h.summarize(&[0.0, 50.0, 99.0, 100.0]);
        // Bucket i stands for i x 10: 5 -> 0, 10 and 15 -> 10, ..., 500 -> 500.
        let total: u64 = (1..=100u64).map(|v| (v * 5) / 10 * 10).sum::<u64>() + 1000;
        assert_eq!(
            s,
            Summary {
                count: 101,
                above_range: 1,
                min: 0,
                max: 1000,
                avg: total / 101,
                total,
                // 51 of 101 samples are <= bucket 250; 100 are <= bucket 500.
                percentiles: vec![0, 250, 500, 1000],
            }
        );
        assert_eq!(
            Histogram::new(10, 10).summarize(&[50.0]),
            Summary {
                percentiles: vec![0],
                ..Summary::default()
            }
        );
    }

    #[test]
    fn export_has_log_buckets_that_add_up_and_labelled_percentiles() {
        // 100 ns buckets up to 10 us: bounds 100, 150, 200, 300, 400, ..., 6400, 9600, 12800.
        let mut h = Histogram::new(100, 100);
        for v in [0, 99, 100, 149, 150, 151, 1000, 9_999, 10_000, 50_000] {
            h.insert(v);
        }
        let e = h.export("latency");
        assert_eq!(
            e.bounds_ns,
            vec![
                100, 150, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3200, 4800, 6400, 9600, 12800
            ]
        );
        assert_eq!(e.counts.len(), e.bounds_ns.len() + 1);
        assert_eq!(e.counts.iter().sum::<u64>(), 10);
        assert_eq!(e.count, 10);
        // Representatives: 0, 0 -> le 100; 100, 100 -> le 100; 100 (149), 100 (150 is
        // bucket 1) -> le 100; 151 -> 100; 1000 -> le 1200; 9900 -> le 12800; two above.
        assert_eq!(e.counts[0], 6);
        assert_eq!(e.counts[7], 1);
        assert_eq!(e.counts[14], 1);
        assert_eq!((e.counts[15], e.above_range), (2, 2));
        assert_eq!(e.max_ns, 10_000);
        assert_eq!(
            e.percentiles.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![50.0, 90.0, 99.0, 99.9]
        );
        assert_eq!(e.percentiles[0].1, 100);
        assert_eq!(e.sum_ns, h.summarize(&[]).total);
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
        let e = h
            .command(
                "m",
                "get_summary",
                &Value::map().with(
                    "jitter_percentiles",
                    Value::List(vec![Value::Float(90.0), Value::Float(50.0)]),
                ),
            )
            .unwrap_err();
        assert!(e.msg.contains("invalid 'jitter_percentiles'"), "{}", e.msg);
    }
}

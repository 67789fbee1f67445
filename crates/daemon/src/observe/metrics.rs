//! The Prometheus exposition of a [`Snapshot`]: one registry built per scrape from the
//! counters read at that instant, encoded in Prometheus's text format (0.0.4, which
//! `promtool check metrics` checks). Every series and label is listed in
//! `docs/observability.md`.

use prometheus::core::Collector;
use prometheus::{
    CounterVec, Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder, TEXT_FORMAT,
};

use super::Snapshot;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = TEXT_FORMAT;

struct Builder(Registry);

impl Builder {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        // Names are fixed and distinct, so registering cannot fail.
        self.0
            .register(Box::new(c.clone()))
            .expect("metric names are distinct");
        c
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help).namespace("bessemer"), labels).unwrap())
    }

    fn seconds(&self, name: &str, help: &str, labels: &[&str]) -> CounterVec {
        self.add(CounterVec::new(Opts::new(name, help).namespace("bessemer"), labels).unwrap())
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(IntGaugeVec::new(Opts::new(name, help).namespace("bessemer"), labels).unwrap())
    }
}

/// The process's own figures under Prometheus's conventional names (`process_*`), read from
/// /proc/self: CPU time, resident memory, open and allowed descriptors, threads, start time.
fn process_metrics(b: &Builder) {
    let plain = |name: &str, help: &str| {
        let g = prometheus::Gauge::new(name, help).unwrap();
        b.0.register(Box::new(g.clone())).unwrap();
        g
    };
    // SAFETY: sysconf has no preconditions.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as f64,
        )
    };
    // /proc/self/stat: the fields after the command name (which may hold spaces) in ')'.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14, 15 (utime, stime), 20 (threads), 22 (starttime) of proc(5), less 3.
    let boot = std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("btime ")
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    let rss_pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let cpu = prometheus::Counter::new(
        "process_cpu_seconds_total",
        "CPU time of the whole process (user and system)",
    )
    .unwrap();
    b.0.register(Box::new(cpu.clone())).unwrap();
    cpu.inc_by((field(11) + field(12)) / tick);
    plain(
        "process_resident_memory_bytes",
        "Resident memory of the process",
    )
    .set(rss_pages * page);
    plain("process_open_fds", "Descriptors the process has open").set(fds);
    plain(
        "process_max_fds",
        "The process's descriptor limit (RLIMIT_NOFILE)",
    )
    .set(lim.rlim_cur as f64);
    plain("process_threads", "Threads of the process").set(field(17));
    plain(
        "process_start_time_seconds",
        "When the process started, in seconds since the epoch",
    )
    .set(boot + field(19) / tick);
}

/// The modules' histograms (the latency and jitter of Measure, and of FlowMeasure's sessions
/// all together) as Prometheus histograms,
/// `bessemer_module_<name>_seconds` with `module` and `class` labels: the module's own
/// HDR-style buckets (cumulative, in seconds), `_sum` and `_count`. Built by hand: the
/// client library's histograms can only observe values one by one.
fn histograms(s: &Snapshot) -> Vec<prometheus::proto::MetricFamily> {
    use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
    let mut fams: Vec<MetricFamily> = Vec::new();
    for m in &s.modules {
        for h in &m.histograms {
            let name = format!("bessemer_module_{}_seconds", h.name);
            let at = match fams.iter().position(|f| f.name() == name) {
                Some(i) => i,
                None => {
                    let mut f = MetricFamily::default();
                    f.set_name(name);
                    f.set_help(format!(
                        "A module's {} histogram (Measure; FlowMeasure: all its sessions), in its own HDR-style buckets",
                        h.name
                    ));
                    f.set_field_type(MetricType::HISTOGRAM);
                    fams.push(f);
                    fams.len() - 1
                }
            };
            let mut hist = Histogram::default();
            hist.set_sample_count(h.count);
            hist.set_sample_sum(h.sum_ns as f64 / 1e9);
            let mut cum = 0;
            let buckets = h
                .bounds_ns
                .iter()
                .zip(&h.counts)
                .map(|(&b, &c)| {
                    cum += c;
                    let mut k = Bucket::default();
                    k.set_upper_bound(b as f64 / 1e9);
                    k.set_cumulative_count(cum);
                    k
                })
                .collect();
            hist.set_bucket(buckets);
            let label = |n: &str, v: &str| {
                let mut l = LabelPair::default();
                l.set_name(n.to_string());
                l.set_value(v.to_string());
                l
            };
            let mut metric = Metric::default();
            metric.set_label(vec![label("class", &m.mclass), label("module", &m.name)]);
            metric.set_histogram(hist);
            let mut metrics = fams[at].take_metric();
            metrics.push(metric);
            fams[at].set_metric(metrics);
        }
    }
    fams
}

/// The text served at `/metrics`.
pub fn render(s: &Snapshot) -> String {
    let b = Builder(Registry::new());

    let drops = b.counters(
        "module_drops_total",
        "Packets a module dropped, by the reason its class names",
        &["module", "class", "reason"],
    );
    let gate = ["module", "ogate", "next", "igate"];
    let gate_pkts = b.counters(
        "gate_packets_total",
        "Packets sent through a module's output gate to the module it is connected to",
        &gate,
    );
    let gate_batches = b.counters(
        "gate_batches_total",
        "Batches sent through a module's output gate",
        &gate,
    );
    let rt = ["module", "class", "worker"];
    let rt_calls = b.counters(
        "module_calls_total",
        "Calls of a module on a worker: task runs and batches processed",
        &rt,
    );
    let rt_pkts = b.counters(
        "module_packets_total",
        "Packets a module's task runs reported plus packets it was given, per worker",
        &rt,
    );
    let rt_scalls = b.counters(
        "module_sampled_calls_total",
        "Calls of a module whose TSC cycles were measured (runtime sampling)",
        &rt,
    );
    let rt_spkts = b.counters(
        "module_sampled_packets_total",
        "Packets of the sampled calls",
        &rt,
    );
    let rt_scycles = b.counters(
        "module_sampled_cycles_total",
        "TSC cycles of the sampled calls",
        &rt,
    );
    for m in &s.modules {
        for r in &m.runtime {
            let w = r.wid.to_string();
            let l = [m.name.as_str(), &m.mclass, &w];
            rt_calls.with_label_values(&l).inc_by(r.calls);
            rt_pkts.with_label_values(&l).inc_by(r.packets);
            rt_scalls.with_label_values(&l).inc_by(r.sampled_calls);
            rt_spkts.with_label_values(&l).inc_by(r.sampled_packets);
            rt_scycles.with_label_values(&l).inc_by(r.sampled_cycles);
        }
        for d in &m.drops {
            drops
                .with_label_values(&[&m.name, &m.mclass, &d.reason])
                .inc_by(d.count);
        }
        for o in &m.ogates {
            let (og, ig) = (o.ogate.to_string(), o.igate.to_string());
            let l = [m.name.as_str(), &og, &o.to, &ig];
            gate_pkts.with_label_values(&l).inc_by(o.packets);
            gate_batches.with_label_values(&l).inc_by(o.batches);
        }
    }

    let queue = ["port", "driver", "direction", "queue"];
    let port_pkts = b.counters("port_packets_total", "Packets through a port queue", &queue);
    let port_bytes = b.counters("port_bytes_total", "Bytes through a port queue", &queue);
    let port_drops = b.counters(
        "port_dropped_total",
        "Packets a port queue dropped (receive ring overrun or transmit ring full)",
        &queue,
    );
    let link = b.gauges(
        "port_link_up",
        "1 while a port's link is up, 0 while down (GetLinkStatus)",
        &["port", "driver"],
    );
    for p in &s.ports {
        link.with_label_values(&[p.name.as_str(), &p.driver])
            .set(i64::from(p.link_up));
        for (dir, queues) in [("rx", &p.rx), ("tx", &p.tx)] {
            for (q, c) in queues.iter().enumerate() {
                let q = q.to_string();
                let l = [p.name.as_str(), &p.driver, dir, &q];
                port_pkts.with_label_values(&l).inc_by(c.packets);
                port_bytes.with_label_values(&l).inc_by(c.bytes);
                port_drops.with_label_values(&l).inc_by(c.dropped);
            }
        }
    }

    let cpu = b.seconds(
        "worker_cpu_seconds_total",
        "Time a worker spent running, inside tasks (busy) or outside them (idle)",
        &["worker", "core", "state"],
    );
    let rounds = b.counters(
        "worker_rounds_total",
        "Scheduler rounds of a worker",
        &["worker"],
    );
    let idle_rounds = b.counters(
        "worker_idle_rounds_total",
        "Scheduler rounds in which no task was runnable",
        &["worker"],
    );
    let running = b.gauges(
        "worker_running",
        "1 while a worker runs its scheduler, 0 while paused",
        &["worker"],
    );
    for w in &s.workers {
        let (id, core) = (w.wid.to_string(), w.core.to_string());
        cpu.with_label_values(&[&id, &core, "busy"])
            .inc_by(w.busy_seconds);
        cpu.with_label_values(&[&id, &core, "idle"])
            .inc_by(w.idle_seconds);
        rounds.with_label_values(&[&id]).inc_by(w.rounds);
        idle_rounds.with_label_values(&[&id]).inc_by(w.idle_rounds);
        running
            .with_label_values(&[&id])
            .set(i64::from(w.state == "running"));
    }

    let tc = ["worker", "tc", "policy"];
    let tc_count = b.counters("tc_scheduled_total", "Times a traffic class ran", &tc);
    let tc_cycles = b.counters("tc_cycles_total", "TSC cycles a traffic class used", &tc);
    let tc_pkts = b.counters("tc_packets_total", "Packets a traffic class processed", &tc);
    let tc_bytes = b.counters(
        "tc_bytes_total",
        "Bytes a traffic class processed (BESS's bits / 8, framing overhead included)",
        &tc,
    );
    for t in &s.tcs {
        let w = t.wid.to_string();
        let l = [w.as_str(), &t.name, &t.policy];
        tc_count.with_label_values(&l).inc_by(t.count);
        tc_cycles.with_label_values(&l).inc_by(t.cycles);
        tc_pkts.with_label_values(&l).inc_by(t.packets);
        tc_bytes.with_label_values(&l).inc_by(t.bits / 8);
    }

    let pool = b.gauges(
        "pool_buffers",
        "Packet buffers of the pool, free or in use",
        &["state"],
    );
    let in_use = s.pool.capacity.saturating_sub(s.pool.free);
    pool.with_label_values(&["free"]).set(s.pool.free as i64);
    pool.with_label_values(&["in_use"]).set(in_use as i64);
    b.counters(
        "pool_alloc_failures_total",
        "Buffer allocations that found the pool empty",
        &[],
    )
    .with_label_values::<&str>(&[])
    .inc_by(s.pool.alloc_failures);

    b.gauges(
        "build_info",
        "Always 1; the labels say which bessemerd this is",
        &["version", "target"],
    )
    .with_label_values(&[env!("CARGO_PKG_VERSION"), std::env::consts::ARCH])
    .set(1);
    process_metrics(&b);

    // The listeners' own counters (process-wide, `crate::listen`).
    use std::sync::atomic::Ordering::Relaxed;
    b.counters(
        "connections_refused_total",
        "Connections refused because a listener had its most connections open",
        &[],
    )
    .with_label_values::<&str>(&[])
    .inc_by(crate::listen::REFUSED.load(Relaxed));
    b.counters(
        "accept_errors_total",
        "accept() failures of the listeners (descriptors exhausted, ...), retried",
        &[],
    )
    .with_label_values::<&str>(&[])
    .inc_by(crate::listen::ACCEPT_ERRORS.load(Relaxed));

    let mut families = b.0.gather();
    families.extend(histograms(s));
    let mut out = Vec::new();
    // Encoding into memory cannot fail for these metric types.
    let _ = TextEncoder::new().encode(&families, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::render;

    fn sample() -> Snapshot {
        Snapshot {
            time: 1.0,
            modules: vec![ModuleStats {
                name: "ttl".into(),
                mclass: "UpdateTTL".into(),
                desc: String::new(),
                arg: serde_json::Value::Null,
                drops: vec![
                    DropStat {
                        reason: "ttl_expired".into(),
                        count: 7,
                    },
                    DropStat {
                        reason: "deadend".into(),
                        count: 0,
                    },
                ],
                ogates: vec![EdgeStats {
                    ogate: 0,
                    to: "sink".into(),
                    igate: 1,
                    packets: 93,
                    batches: 3,
                }],
                histograms: vec![HistogramStat {
                    name: "latency".into(),
                    bounds_ns: vec![100, 150, 200],
                    counts: vec![3, 0, 1, 2],
                    count: 6,
                    sum_ns: 1_500,
                    percentiles: vec![(50.0, 100)],
                    max_ns: 300,
                }],
                runtime: vec![RuntimeStat {
                    wid: 0,
                    calls: 3,
                    packets: 100,
                    sampled_calls: 1,
                    sampled_packets: 40,
                    sampled_cycles: 1200,
                    cycles_per_packet: Some(30.0),
                }],
            }],
            ports: vec![PortStats {
                name: "p0".into(),
                driver: "PcapFilePort".into(),
                rx: vec![QueueStats {
                    packets: 5,
                    bytes: 300,
                    dropped: 1,
                }],
                tx: vec![],
                link_up: true,
            }],
            workers: vec![WorkerStats {
                wid: 0,
                core: 1,
                state: "running".into(),
                rounds: 10,
                idle_rounds: 4,
                busy_seconds: 1.5,
                idle_seconds: 0.25,
            }],
            tcs: vec![TcStats {
                wid: 0,
                name: "tc a".into(),
                policy: "leaf".into(),
                parent: "root".into(),
                count: 2,
                cycles: 900,
                packets: 64,
                bits: 8000,
            }],
            pool: PoolStats {
                capacity: 100,
                free: 60,
                alloc_failures: 2,
            },
        }
    }

    #[test]
    fn every_counter_of_the_snapshot_is_a_series_with_its_labels() {
        let text = render(&sample());
        for line in [
            r#"bessemer_module_drops_total{class="UpdateTTL",module="ttl",reason="ttl_expired"} 7"#,
            r#"bessemer_module_drops_total{class="UpdateTTL",module="ttl",reason="deadend"} 0"#,
            r#"bessemer_gate_packets_total{igate="1",module="ttl",next="sink",ogate="0"} 93"#,
            r#"bessemer_gate_batches_total{igate="1",module="ttl",next="sink",ogate="0"} 3"#,
            r#"bessemer_port_packets_total{direction="rx",driver="PcapFilePort",port="p0",queue="0"} 5"#,
            r#"bessemer_port_bytes_total{direction="rx",driver="PcapFilePort",port="p0",queue="0"} 300"#,
            r#"bessemer_port_dropped_total{direction="rx",driver="PcapFilePort",port="p0",queue="0"} 1"#,
            r#"bessemer_worker_cpu_seconds_total{core="1",state="busy",worker="0"} 1.5"#,
            r#"bessemer_worker_cpu_seconds_total{core="1",state="idle",worker="0"} 0.25"#,
            r#"bessemer_worker_rounds_total{worker="0"} 10"#,
            r#"bessemer_worker_idle_rounds_total{worker="0"} 4"#,
            r#"bessemer_worker_running{worker="0"} 1"#,
            r#"bessemer_tc_scheduled_total{policy="leaf",tc="tc a",worker="0"} 2"#,
            r#"bessemer_tc_cycles_total{policy="leaf",tc="tc a",worker="0"} 900"#,
            r#"bessemer_tc_packets_total{policy="leaf",tc="tc a",worker="0"} 64"#,
            r#"bessemer_tc_bytes_total{policy="leaf",tc="tc a",worker="0"} 1000"#,
            r#"bessemer_pool_buffers{state="free"} 60"#,
            r#"bessemer_pool_buffers{state="in_use"} 40"#,
            "bessemer_pool_alloc_failures_total 2",
            r#"bessemer_module_calls_total{class="UpdateTTL",module="ttl",worker="0"} 3"#,
            r#"bessemer_module_packets_total{class="UpdateTTL",module="ttl",worker="0"} 100"#,
            r#"bessemer_module_sampled_calls_total{class="UpdateTTL",module="ttl",worker="0"} 1"#,
            r#"bessemer_module_sampled_packets_total{class="UpdateTTL",module="ttl",worker="0"} 40"#,
            r#"bessemer_module_sampled_cycles_total{class="UpdateTTL",module="ttl",worker="0"} 1200"#,
            "# TYPE bessemer_module_drops_total counter",
            "# TYPE bessemer_pool_buffers gauge",
            "# TYPE bessemer_module_latency_seconds histogram",
            r#"bessemer_module_latency_seconds_bucket{class="UpdateTTL",module="ttl",le="0.0000001"} 3"#,
            r#"bessemer_module_latency_seconds_bucket{class="UpdateTTL",module="ttl",le="0.00000015"} 3"#,
            r#"bessemer_module_latency_seconds_bucket{class="UpdateTTL",module="ttl",le="0.0000002"} 4"#,
            r#"bessemer_module_latency_seconds_bucket{class="UpdateTTL",module="ttl",le="+Inf"} 6"#,
            r#"bessemer_module_latency_seconds_sum{class="UpdateTTL",module="ttl"} 0.0000015"#,
            r#"bessemer_module_latency_seconds_count{class="UpdateTTL",module="ttl"} 6"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = sample();
        s.modules[0].name = "a\"b\\c\nd".into();
        let text = render(&s);
        assert!(
            text.contains(r#"module="a\"b\\c\nd""#),
            "label not escaped:\n{text}"
        );
    }

    #[test]
    fn drop_rates_come_from_successive_readings_and_restart_after_a_reset() {
        let mut r = DropRates::default();
        let mut s = sample();
        r.update(&s);
        assert_eq!(
            r.rate("ttl", "ttl_expired"),
            0.0,
            "one reading gives no rate"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        s.modules[0].drops[0].count = 1007;
        r.update(&s);
        let rate = r.rate("ttl", "ttl_expired");
        assert!(rate > 1000.0 && rate < 1000.0 / 0.05 + 1.0, "{rate}");
        assert_eq!(r.rate("ttl", "deadend"), 0.0);
        assert_eq!(r.rate("nope", "ttl_expired"), 0.0);
        s.modules[0].drops[0].count = 3;
        r.update(&s);
        assert_eq!(
            r.rate("ttl", "ttl_expired"),
            0.0,
            "a reset counter is no negative rate"
        );
    }

    #[test]
    fn only_loopback_and_allowed_networks_are_admitted() {
        use std::net::IpAddr;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let lo = http::Allowed::loopback();
        assert!(lo.permits(ip("127.0.0.1")));
        assert!(lo.permits(ip("127.3.2.1")));
        assert!(lo.permits(ip("::1")));
        assert!(lo.permits(ip("::ffff:127.0.0.1")));
        assert!(!lo.permits(ip("10.1.2.3")));
        assert!(!lo.permits(ip("::ffff:10.1.2.3")));
        assert!(!lo.permits(ip("fe80::1")));
        let some = http::Allowed::with(&["10.0.0.0/8".into(), "192.0.2.7".into()]).unwrap();
        assert!(some.permits(ip("10.200.0.1")));
        assert!(some.permits(ip("192.0.2.7")));
        assert!(!some.permits(ip("192.0.2.8")));
        let e = http::Allowed::with(&["ten".into()]).unwrap_err();
        assert!(e.contains("'ten'"), "{e}");
    }
}

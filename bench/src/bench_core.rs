//! `make bench-core`: the dataplane core's costs per core, against BESS's published figures.
//!
//! Runs each pipeline on this thread, pinned, through the same scheduler and executor a
//! worker uses; reports Mpps per second of thread CPU time and TSC cycles per packet, the
//! median of several runs with the spread (min..max). Ends with one JSON line.

use std::time::{Duration, Instant};

use bessemer_core::graph::Pipeline;
use bessemer_core::mem::PagePolicy;
use bessemer_core::sched::{bench_round_cost, ClassTree, Policy, Resource};
use bessemer_core::{tsc, Context, PacketBatch, PacketPool, Value, MAX_BURST};

#[path = "common.rs"]
mod common;
use common::thread_cpu_secs;

const PROG: &str = "bench-core";

/// BESS (maintained fork, DPDK build, batch 64, 2.6 GHz TSC) on this kind of machine, Mpps.
const BESS_REF: &[(&str, f64)] = &[
    ("src_sink_60", 530.0),
    ("chain1_60", 490.0),
    ("chain8_60", 310.0),
    ("chain32_60", 115.0),
    ("src_rewrite_sink_60", 260.0),
    ("src_sink_burst1_60", 40.0),
];

struct Opts {
    base: common::Base,
    skip_sched: bool,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        base: common::Base::new(5, 0.4),
        skip_sched: false,
    };
    let mut a = common::Args::new(PROG);
    while let Some(opt) = a.next_opt() {
        if a.base(&mut o.base, &opt) {
            continue;
        }
        match opt.as_str() {
            "--skip-sched" => o.skip_sched = true,
            "-h" | "--help" => {
                println!(
                    "usage: bench-core [--runs N] [--secs S] [--core C] [--skip-sched] [--quick]"
                );
                std::process::exit(0)
            }
            other => a.unknown(other),
        }
    }
    o
}

#[derive(Clone, Copy)]
struct Sample {
    mpps: f64,
    cycles: f64,
}

struct Stat {
    median: Sample,
    min_mpps: f64,
    max_mpps: f64,
}

fn summarize(mut v: Vec<Sample>) -> Stat {
    v.sort_by(|a, b| a.mpps.partial_cmp(&b.mpps).unwrap());
    Stat {
        median: v[v.len() / 2],
        min_mpps: v[0].mpps,
        max_mpps: v[v.len() - 1].mpps,
    }
}

/// Runs `step` (which returns packets done) repeatedly for `secs`, giving Mpps per CPU second.
fn measure(secs: f64, mut step: impl FnMut() -> u64) -> Sample {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(30) {
        step();
    }
    let (c0, t0, w0) = (thread_cpu_secs(), tsc::rdtsc(), Instant::now());
    let mut pkts = 0u64;
    while w0.elapsed().as_secs_f64() < secs {
        for _ in 0..256 {
            pkts += step();
        }
    }
    let (c1, t1) = (thread_cpu_secs(), tsc::rdtsc());
    Sample {
        mpps: pkts as f64 / (c1 - c0).max(1e-9) / 1e6,
        cycles: (t1 - t0) as f64 / pkts.max(1) as f64,
    }
}

fn class(name: &str) -> &'static bessemer_core::ModuleClass {
    bessemer_modules::find(name).unwrap_or_else(|| panic!("class {name} missing"))
}

fn udp_frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[12] = 0x08; // IPv4 ethertype
    f[14] = 0x45;
    f
}

/// Builds Source → [Rewrite] → N × Bypass → Sink and measures it through the scheduler.
fn pipeline(
    pool: &PacketPool,
    size: usize,
    burst: usize,
    rewrite: bool,
    bypasses: usize,
    o: &Opts,
) -> Stat {
    let mut g = Pipeline::new();
    let src = Value::map().with("pkt_size", size);
    let (_, tasks) = g.add_module(class("Source"), Some("src"), &src).unwrap();
    let mut ctx = Context::new(0, pool);
    let burst_arg = Value::map().with("burst", burst);
    g.command("src", "set_burst", &burst_arg, &mut ctx).unwrap();
    let mut prev = "src".to_string();
    if rewrite {
        let arg = Value::map().with(
            "templates",
            Value::List(vec![Value::Bytes(udp_frame(size))]),
        );
        g.add_module(class("Rewrite"), Some("rw"), &arg).unwrap();
        g.connect(&prev, 0, "rw", 0).unwrap();
        prev = "rw".into();
    }
    for i in 0..bypasses {
        let name = format!("bp{i}");
        g.add_module(class("Bypass"), Some(&name), &Value::map())
            .unwrap();
        g.connect(&prev, 0, &name, 0).unwrap();
        prev = name;
    }
    g.add_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    g.connect(&prev, 0, "sink", 0).unwrap();
    let mut tree = ClassTree::new(0);
    tree.add_class("leaf", Policy::Leaf, None, 0, 1).unwrap();
    tree.attach_task("leaf", tasks[0]).unwrap();
    let samples = (0..o.base.runs)
        .map(|_| {
            measure(o.base.secs, || {
                let mut n = 0u64;
                tree.schedule_once(&mut |t| {
                    let r = ctx.run_task(&g, t);
                    n += r.packets as u64;
                    r
                });
                n
            })
        })
        .collect();
    let mut sink_in = 0;
    if let Ok(c) = g.igate_counts("sink", 0) {
        sink_in = c.packets;
    }
    assert!(sink_in > 0, "no packet reached the sink");
    summarize(samples)
}

fn alloc_free(pool: &PacketPool, o: &Opts) -> Stat {
    let mut cache = pool.cache();
    let mut b = PacketBatch::new();
    let samples = (0..o.base.runs)
        .map(|_| {
            measure(o.base.secs, || {
                let n = cache.alloc_bulk(&mut b, MAX_BURST, 60);
                cache.free_bulk(&mut b);
                n as u64
            })
        })
        .collect();
    summarize(samples)
}

/// 1000 leaves, each a Source limited to 1 + i × 0.01 Mbps; returns (worst, mean) accuracy.
fn rate_accuracy(pool: &PacketPool, secs: f64) -> (f64, f64, usize) {
    const N: usize = 1000;
    const PKT: usize = 128;
    let mut g = Pipeline::new();
    let mut tree = ClassTree::new(0);
    let mut ctx = Context::new(0, pool);
    g.add_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    let mut limits = Vec::with_capacity(N);
    for i in 0..N {
        let name = format!("s{i}");
        let arg = Value::map().with("pkt_size", PKT);
        let (_, tasks) = g.add_module(class("Source"), Some(&name), &arg).unwrap();
        let one = Value::map().with("burst", 1);
        g.command(&name, "set_burst", &one, &mut ctx).unwrap();
        g.connect(&name, 0, "sink", 0).unwrap();
        let limit = 1_000_000 + 10_000 * i as u64;
        let rl = format!("rl{i}");
        tree.add_class(
            &rl,
            Policy::RateLimit {
                resource: Resource::Bit,
                limit,
                max_burst: 0,
            },
            None,
            0,
            1,
        )
        .unwrap();
        let leaf = format!("leaf{i}");
        tree.add_class(&leaf, Policy::Leaf, Some(&rl), 0, 1)
            .unwrap();
        tree.attach_task(&leaf, tasks[0]).unwrap();
        limits.push((rl, limit));
    }
    let run_for = |tree: &mut ClassTree, ctx: &mut Context, d: f64| {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < d {
            for _ in 0..1024 {
                tree.schedule_once(&mut |t| ctx.run_task(&g, t));
            }
        }
    };
    run_for(&mut tree, &mut ctx, 0.5);
    let snap = |tree: &ClassTree| -> Vec<u64> {
        limits
            .iter()
            .map(|(n, _)| tree.stats(n).unwrap().bits)
            .collect()
    };
    let (b0, t0) = (snap(&tree), tsc::rdtsc());
    run_for(&mut tree, &mut ctx, secs);
    let (b1, t1) = (snap(&tree), tsc::rdtsc());
    let dt = (t1 - t0) as f64 / tsc::hz() as f64;
    let acc: Vec<f64> = (0..N)
        .map(|i| {
            let r = (b1[i] - b0[i]) as f64 / dt / limits[i].1 as f64;
            if r > 1.0 {
                2.0 - r
            } else {
                r
            }
        })
        .collect();
    let worst = acc.iter().cloned().fold(f64::INFINITY, f64::min);
    let mean = acc.iter().sum::<f64>() / N as f64;
    let below = acc.iter().filter(|&&a| a < 0.999).count();
    (worst, mean, below)
}

fn main() {
    let o = parse_opts();
    common::pin(PROG, o.base.core);
    let ghz = tsc::hz() as f64 / 1e9;
    let pool = PacketPool::new("bench", 16384, PagePolicy::Auto).expect("packet pool");
    println!(
        "# bench-core: batch capacity {MAX_BURST}, TSC {ghz:.2} GHz, pinned to core {}, {} runs × {:.1} s, pages: {}",
        o.base.core,
        o.base.runs,
        o.base.secs,
        pool.page_kind()
    );
    println!(
        "{:<28} {:>10} {:>18} {:>10} {:>12}",
        "case", "Mpps", "spread (min..max)", "cyc/pkt", "vs BESS"
    );
    let mut json: Vec<(String, String)> = vec![
        ("batch".into(), MAX_BURST.to_string()),
        ("tsc_ghz".into(), format!("{ghz:.3}")),
    ];
    let row = |name: &str, s: &Stat, json: &mut Vec<(String, String)>| {
        let reference = BESS_REF.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        let ratio = reference
            .map(|r| format!("{:.2}x", s.median.mpps / r))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<28} {:>10.1} {:>8.1}..{:<8.1} {:>10.2} {:>12}",
            name, s.median.mpps, s.min_mpps, s.max_mpps, s.median.cycles, ratio
        );
        json.push((format!("{name}_mpps"), format!("{:.2}", s.median.mpps)));
        json.push((
            format!("{name}_cycles_per_pkt"),
            format!("{:.3}", s.median.cycles),
        ));
        if let Some(r) = reference {
            json.push((
                format!("{name}_vs_bess"),
                format!("{:.3}", s.median.mpps / r),
            ));
        }
    };
    row("alloc_free", &alloc_free(&pool, &o), &mut json);
    for size in [60usize, 1500] {
        row(
            &format!("src_sink_{size}"),
            &pipeline(&pool, size, MAX_BURST, false, 0, &o),
            &mut json,
        );
        row(
            &format!("src_sink_burst1_{size}"),
            &pipeline(&pool, size, 1, false, 0, &o),
            &mut json,
        );
        row(
            &format!("src_rewrite_sink_{size}"),
            &pipeline(&pool, size, MAX_BURST, true, 0, &o),
            &mut json,
        );
        for n in [1usize, 2, 4, 8, 16, 32] {
            row(
                &format!("chain{n}_{size}"),
                &pipeline(&pool, size, MAX_BURST, false, n, &o),
                &mut json,
            );
        }
    }
    if !o.skip_sched {
        println!(
            "\n{:<28} {:>10} {:>10} {:>10} {:>10}",
            "scheduler cycles/round", "1", "16", "256", "4096"
        );
        for policy in ["round_robin", "weighted_fair", "priority"] {
            let rounds = if o.base.quick { 100_000 } else { 2_000_000 };
            let v: Vec<f64> = [1usize, 16, 256, 4096]
                .iter()
                .map(|&n| bench_round_cost(policy, n, rounds))
                .collect();
            println!(
                "{:<28} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                policy, v[0], v[1], v[2], v[3]
            );
            for (n, c) in [1, 16, 256, 4096].iter().zip(&v) {
                json.push((format!("sched_{policy}_{n}_cycles"), format!("{c:.2}")));
            }
        }
        let secs = if o.base.quick { 1.0 } else { 6.0 };
        let (worst, mean, below) = rate_accuracy(&pool, secs);
        println!(
            "\nrate_limit accuracy, 1000 classes at 1-11 Mbps over {secs:.0} s: worst {worst:.5}, mean {mean:.5}, classes below 0.999: {below}"
        );
        json.push(("rate_accuracy_worst".into(), format!("{worst:.6}")));
        json.push(("rate_accuracy_mean".into(), format!("{mean:.6}")));
        json.push(("rate_classes_below_0999".into(), below.to_string()));
    }
    let body: Vec<String> = json.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    println!("{{{}}}", body.join(", "));
}

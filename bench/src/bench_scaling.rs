//! `make bench-scaling`: multi-core scaling of the engine's real worker threads (BESS thesis
//! §5.5.6, Figure 5.9), in memory.
//!
//! * duplication: each worker runs its own copy of Source → MACSwap → Bypass → Sink (one
//!   worker, then two);
//! * chaining: Source → MACSwap → Queue on worker 0, the Queue's task → Bypass → Sink on
//!   worker 1 (and, for the one-worker reference, both tasks on worker 0).
//!
//! Packets are counted where they enter the Sinks, over `--secs` of wall time, `--runs`
//! times (median and spread). Mpps is wall-clock throughput; "Mpps/CPU-s" divides by the CPU
//! time the worker threads actually got, and "CPU share" is that time over wall time ×
//! workers: below ~0.9 the run was contended (other processes took the cores) and the wall
//! figures, hence the scaling factors, are bounded by the machine, not the code. Ends with
//! one JSON line.

use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::{Result, Value};

// The engine pins its own workers; only the options and CPU clocks are shared.
#[path = "common.rs"]
#[allow(dead_code)]
mod common;
use common::{thread_cpu_secs, Args, Base};

const PROG: &str = "bench-scaling";
/// Spread of a case's runs, (max - min) / median, above which its median is not trusted.
const NOISY_SPREAD: f64 = 0.15;
/// CPU share below which a case is marked as contended.
const CONTENDED_SHARE: f64 = 0.9;
/// Target of issue 11: two duplicated workers ≥ 1.8 × one.
const DUP2_TARGET: f64 = 1.8;

fn process_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[derive(Clone, Copy, PartialEq)]
enum Placement {
    Duplicated,
    Chained,
}

struct Case {
    placement: Placement,
    workers: usize,
    size: usize,
}

impl Case {
    fn name(&self) -> String {
        let p = match self.placement {
            Placement::Duplicated => "dup",
            Placement::Chained => "chain",
        };
        format!("{p}{}_{}", self.workers, self.size)
    }
}

#[derive(Clone, Copy)]
struct Sample {
    mpps: f64,
    mpps_per_cpu: f64,
    share: f64,
}

struct Stat {
    median: Sample,
    min: f64,
    max: f64,
    dropped: u64,
}

fn module(e: &mut Engine, class: &str, name: &str, arg: Value) -> Result<()> {
    let c = bessemer_modules::find(class).expect("module class");
    e.create_module(c, Some(name), &arg).map(|_| ())
}

/// Builds `case` on a fresh engine; returns it with the modules whose gate 0 feeds a Sink.
fn build(case: &Case) -> Result<(Engine, Vec<String>)> {
    let mut e = Engine::new(EngineConfig {
        buffers: 32768,
        pages: PagePolicy::Auto,
        pin: true,
    })?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for w in 0..case.workers {
        e.add_worker(w, w % cores)?;
    }
    let src = Value::map().with("pkt_size", case.size as i64);
    let mut into_sinks = Vec::new();
    match case.placement {
        Placement::Duplicated => {
            for w in 0..case.workers {
                let n = |m: &str| format!("{m}@w{w}");
                module(&mut e, "Source", &n("src"), src.clone())?;
                module(&mut e, "MACSwap", &n("a"), Value::map())?;
                module(&mut e, "Bypass", &n("b"), Value::map())?;
                module(&mut e, "Sink", &n("sink"), Value::Null)?;
                e.connect(&n("src"), 0, &n("a"), 0)?;
                e.connect(&n("a"), 0, &n("b"), 0)?;
                e.connect(&n("b"), 0, &n("sink"), 0)?;
                e.attach_task(&n("src"), 0, None, Some(w))?;
                into_sinks.push(n("b"));
            }
        }
        Placement::Chained => {
            module(&mut e, "Source", "src", src)?;
            module(&mut e, "MACSwap", "a", Value::map())?;
            module(&mut e, "Queue", "q", Value::map().with("size", 2048))?;
            module(&mut e, "Bypass", "b", Value::map())?;
            module(&mut e, "Sink", "sink", Value::Null)?;
            e.connect("src", 0, "a", 0)?;
            e.connect("a", 0, "q", 0)?;
            e.connect("q", 0, "b", 0)?;
            e.connect("b", 0, "sink", 0)?;
            e.attach_task("src", 0, None, Some(0))?;
            e.attach_task("q", 0, None, Some(case.workers - 1))?;
            into_sinks.push("b".into());
        }
    }
    if !e.constraint_violations().is_empty() {
        panic!("{PROG}: {} breaks a constraint", case.name());
    }
    Ok((e, into_sinks))
}

fn count(e: &Engine, mods: &[String]) -> u64 {
    mods.iter()
        .map(|m| e.graph().ogate_counts(m, 0).map_or(0, |c| c.packets))
        .sum()
}

fn run(case: &Case, b: &Base) -> Result<Stat> {
    let (mut e, mods) = build(case)?;
    e.resume_all()?;
    std::thread::sleep(Duration::from_millis(if b.quick { 50 } else { 300 }));
    let mut samples = Vec::new();
    for _ in 0..b.runs {
        let (p0, c0, m0, t0) = (
            count(&e, &mods),
            process_cpu_secs(),
            thread_cpu_secs(),
            Instant::now(),
        );
        std::thread::sleep(Duration::from_secs_f64(b.secs));
        let (p1, c1, m1, wall) = (
            count(&e, &mods),
            process_cpu_secs(),
            thread_cpu_secs(),
            t0.elapsed().as_secs_f64(),
        );
        // The workers' CPU time: the process's minus this (mostly sleeping) thread's.
        let cpu = ((c1 - c0) - (m1 - m0)).max(1e-9);
        let pkts = (p1 - p0) as f64;
        samples.push(Sample {
            mpps: pkts / wall / 1e6,
            mpps_per_cpu: pkts / cpu / 1e6,
            share: cpu / (wall * case.workers as f64),
        });
    }
    e.pause_all()?;
    let dropped = if case.placement == Placement::Chained {
        e.graph().total_drops("q")?
    } else {
        0
    };
    samples.sort_by(|x, y| x.mpps.total_cmp(&y.mpps));
    let stat = Stat {
        median: samples[samples.len() / 2],
        min: samples[0].mpps,
        max: samples[samples.len() - 1].mpps,
        dropped,
    };
    e.reset_all()?;
    Ok(stat)
}

fn main() {
    let mut b = Base::new(5, 1.0);
    let mut a = Args::new(PROG);
    let mut only: Option<String> = None;
    while let Some(opt) = a.next_opt() {
        if a.base(&mut b, &opt) {
            continue;
        }
        match opt.as_str() {
            "--only" => only = Some(a.value("--only")),
            "--help" | "-h" => {
                println!("usage: {PROG} [--runs N] [--secs S] [--quick] [--only CASE]");
                return;
            }
            other => a.unknown(other),
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("{PROG}: one CPU: two workers share it, no scaling can show");
    }
    let mut cases = Vec::new();
    for size in [60, 1500] {
        for placement in [Placement::Duplicated, Placement::Chained] {
            for workers in [1, 2] {
                let c = Case {
                    placement,
                    workers,
                    size,
                };
                if only.as_ref().is_none_or(|o| c.name() == *o) {
                    cases.push(c);
                }
            }
        }
    }
    println!(
        "{:<12} {:>8} {:>18} {:>9} {:>11} {:>10} {:>12}",
        "case", "Mpps", "spread (min..max)", "Mpps/core", "Mpps/CPU-s", "CPU share", "queue drops"
    );
    let mut results = Vec::new();
    for c in &cases {
        let s = run(c, &b).unwrap_or_else(|err| {
            eprintln!("{PROG}: {}: {}", c.name(), err.msg);
            std::process::exit(1)
        });
        let m = s.median;
        let busy = if m.share < CONTENDED_SHARE {
            " contended"
        } else {
            ""
        };
        println!(
            "{:<12} {:>8.2} {:>8.2}..{:<8.2} {:>9.2} {:>11.2} {:>10.2} {:>12}{busy}",
            c.name(),
            m.mpps,
            s.min,
            s.max,
            m.mpps / c.workers as f64,
            m.mpps_per_cpu,
            m.share,
            s.dropped
        );
        results.push((c.name(), s));
    }
    let needed = [
        "dup1_60",
        "dup2_60",
        "chain1_60",
        "chain2_60",
        "dup1_1500",
        "dup2_1500",
        "chain1_1500",
        "chain2_1500",
    ];
    if !needed.iter().all(|n| results.iter().any(|(k, _)| k == n)) {
        println!("\n(ratios and the JSON line need every case; --only ran a subset)");
        return;
    }
    let get = |n: &str| &results.iter().find(|(k, _)| k == n).unwrap().1;
    let ratio = |two: &str, one: &str| get(two).median.mpps / get(one).median.mpps.max(1e-9);
    // What two uncontended cores would do: per-CPU-second rates, two cores' worth vs one.
    let ratio_cpu = |two: &str, one: &str| {
        2.0 * get(two).median.mpps_per_cpu / get(one).median.mpps_per_cpu.max(1e-9)
    };
    let dup2 = ratio("dup2_60", "dup1_60");
    let chain2 = ratio("chain2_60", "chain1_60");
    let min_share = results
        .iter()
        .map(|(_, s)| s.median.share)
        .fold(f64::INFINITY, f64::min);
    // A factor is only as good as its two medians: runs that spread widely mean the
    // machine was busy during some of them.
    let spread = |n: &str| {
        let s = get(n);
        (s.max - s.min) / s.median.mpps.max(1e-9)
    };
    let noisy: Vec<&str> = ["dup1_60", "dup2_60"]
        .into_iter()
        .filter(|n| spread(n) > NOISY_SPREAD)
        .collect();
    println!();
    println!(
        "1→2 workers, 60 B: duplicated ×{dup2:.2} (target ≥ {DUP2_TARGET}: {}), chained ×{chain2:.2}; \
         1500 B: duplicated ×{:.2}, chained ×{:.2}",
        if !noisy.is_empty() {
            "not judged, noisy runs"
        } else if dup2 >= DUP2_TARGET {
            "met"
        } else {
            "not met"
        },
        ratio("dup2_1500", "dup1_1500"),
        ratio("chain2_1500", "chain1_1500"),
    );
    println!(
        "per CPU-second (what uncontended cores would give), 60 B: duplicated ×{:.2}, chained ×{:.2}",
        ratio_cpu("dup2_60", "dup1_60"),
        ratio_cpu("chain2_60", "chain1_60"),
    );
    if get("chain2_60").median.share < CONTENDED_SHARE {
        println!(
            "chained, two workers: a Queue of 2048 packets is all that carries work from one \
             worker to the other; when they do not run at the same time (CPU share < 1) the \
             consumer drains at most 2048 per switch and the producer drops the rest (queue drops)"
        );
    }
    for n in &noisy {
        println!(
            "noisy: the runs of {n} spread by {:.0}% of their median (more than {:.0}%): the \
             machine was busy during some of them; run again for a factor to trust",
            spread(n) * 100.0,
            NOISY_SPREAD * 100.0
        );
    }
    if min_share < CONTENDED_SHARE {
        println!(
            "contended: the worker threads got as little as {:.0}% of their cores (other load \
             on this {cores}-CPU machine); wall-clock factors are bounded by that",
            min_share * 100.0
        );
    }
    let mut json = format!(
        "{{\"bench\": \"scaling\", \"dup2_scaling\": {dup2:.3}, \"chain2_scaling\": {chain2:.3}, \
         \"dup2_scaling_cpu\": {:.3}, \"chain2_scaling_cpu\": {:.3}, \"dup2_1500_scaling\": {:.3}, \
         \"chain2_1500_scaling\": {:.3}, \"min_worker_cpu_share\": {min_share:.3}, \"contended\": {}, \
         \"noisy\": {}, \"cpus\": {cores}",
        ratio_cpu("dup2_60", "dup1_60"),
        ratio_cpu("chain2_60", "chain1_60"),
        ratio("dup2_1500", "dup1_1500"),
        ratio("chain2_1500", "chain1_1500"),
        min_share < CONTENDED_SHARE,
        !noisy.is_empty(),
    );
    for (n, s) in &results {
        json += &format!(
            ", \"{n}_mpps\": {:.3}, \"{n}_spread\": {:.3}, \"{n}_cpu_share\": {:.3}",
            s.median.mpps,
            (s.max - s.min) / s.median.mpps.max(1e-9),
            s.median.share
        );
    }
    json += "}";
    println!("{json}");
}

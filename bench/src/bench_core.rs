//! `make bench-core`: the dataplane core's costs per core, against the real BESS measured in
//! the same run (`bench/core.sh` runs `bench/vs_bess.sh` on the same pipelines when bessd is
//! built and passes its figures with `--bess`; otherwise no ratio: "BESS not measured").
//!
//! Runs each pipeline on this thread, pinned, through the same scheduler and executor a
//! worker uses; reports Mpps per second of thread CPU time and TSC cycles per packet. Each
//! case is built afresh in several heap layouts (the allocations before it shifted by a few
//! cache lines each time) and run twice in each: a figure is the median over the layouts,
//! the spread shows what layout alone moves, and a case whose two runs in one layout differ
//! by more than 10 % is marked busy. Ends with one JSON line.

use std::time::Instant;

use bessemer_core::graph::Pipeline;
use bessemer_core::mem::PagePolicy;
use bessemer_core::sched::{bench_round_cost, ClassTree, Policy, Resource, FUSED_RUNS};
use bessemer_core::{tsc, Context, PacketBatch, PacketPool, Value, MAX_BURST};

#[path = "common.rs"]
mod common;
use common::thread_cpu_secs;

const PROG: &str = "bench-core";

/// The cases measured against BESS, and the `make bench-vs-bess` rows that run the same
/// pipeline on the real bessd (`bench/vs_bess.py`'s keys).
const BESS_ROWS: &[(&str, &str)] = &[
    ("src_sink_60", "src_sink"),
    ("src_sink_burst1_60", "src_sink_burst1"),
    ("src_rewrite_sink_60", "rewrite"),
    ("chain1_60", "chain1"),
    ("chain8_60", "chain8"),
    ("chain32_60", "chain32"),
    ("random_update_60", "random_update"),
    ("ip_lookup_10k_60", "ip_lookup_10k"),
    ("ip_lookup_900k_60", "ip_lookup_900k"),
];

/// BESS's Mpps per case, from the JSON line of a `bench/vs_bess.sh` run made for this one
/// (`--bess FILE`): none stored, none guessed.
fn bess_figures(path: &str) -> Result<Vec<(&'static str, f64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let line = text
        .lines()
        .rfind(|l| l.starts_with('{'))
        .ok_or_else(|| format!("{path}: no JSON line"))?;
    if line.contains("\"bess_measured\": false") {
        return Err("bessd was not run (see the lines before the table)".into());
    }
    Ok(BESS_ROWS
        .iter()
        .filter_map(|&(case, row)| {
            let key = format!("\"{row}_bess_mpps\": ");
            let at = line.find(&key)? + key.len();
            let end = line[at..].find([',', '}']).map_or(line.len(), |e| at + e);
            line[at..end].trim().parse().ok().map(|v| (case, v))
        })
        .collect())
}

struct Opts {
    base: common::Base,
    skip_sched: bool,
    /// Only cases whose name starts with this (for profiling one case).
    only: Option<String>,
    /// Run exactly this many steps per case, once, instead of for a time (for instruction
    /// counts under callgrind, which do not depend on time).
    steps: Option<u64>,
    /// Heap layouts each case is built in (`--layouts N`); `base.runs` runs in each.
    layouts: usize,
    /// `--bess FILE`: BESS's figures from `bench/vs_bess.sh`'s JSON line, this run's.
    bess: Option<String>,
}

/// How far each layout shifts the allocations a case makes, in bytes: 13 cache lines, so
/// that five layouts spread a case's objects over most of a 4 KiB page's offsets.
const LAYOUT_STEP: usize = 13 * 64;

fn parse_opts() -> Opts {
    let mut o = Opts {
        base: common::Base::new(2, 0.2),
        skip_sched: false,
        only: None,
        steps: None,
        layouts: 5,
        bess: None,
    };
    let mut a = common::Args::new(PROG);
    while let Some(opt) = a.next_opt() {
        if a.base(&mut o.base, &opt) {
            continue;
        }
        match opt.as_str() {
            "--skip-sched" => o.skip_sched = true,
            "--layouts" => o.layouts = a.value("--layouts").parse().expect("--layouts N"),
            "--only" => o.only = Some(a.value("--only")),
            "--bess" => o.bess = Some(a.value("--bess")),
            "--steps" => {
                o.steps = Some(a.value("--steps").parse().expect("--steps N"));
                o.base.runs = 1;
                o.layouts = 1;
            }
            "-h" | "--help" => {
                println!(
                    "usage: bench-core [--layouts N] [--runs N] [--secs S] [--core C] [--skip-sched] [--quick] [--only CASE-PREFIX] [--steps N] [--bess FILE]\n  \
                     --bess FILE  BESS's Mpps from bench/vs_bess.sh's JSON line (bench/core.sh runs it\n               \
                     when bessd is built); without it no ratio is printed\n  \
                     --layouts N  heap layouts each case is built in (default 5, --quick 3)\n  \
                     --runs N     runs per layout (default 2)\n  \
                     --secs S     seconds per run (default 0.2)"
                );
                std::process::exit(0)
            }
            other => a.unknown(other),
        }
    }
    if o.base.quick && o.steps.is_none() {
        o.layouts = o.layouts.min(3);
    }
    o.layouts = o.layouts.max(1);
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
    /// The largest spread between the runs of one layout (see `Stat::spread`).
    within: f64,
}

/// Spread (max − min over the median) above which a row is marked as measured on a busy
/// machine: other load, not the code, moved the figure.
const BUSY_SPREAD: f64 = 0.10;

impl Stat {
    /// Spread between runs of the same build: what other load, not the code or its layout,
    /// moved.
    fn spread(&self) -> f64 {
        self.within
    }
}

fn summarize(mut v: Vec<Sample>) -> Stat {
    v.sort_by(|a, b| a.mpps.partial_cmp(&b.mpps).unwrap());
    let (min_mpps, max_mpps) = (v[0].mpps, v[v.len() - 1].mpps);
    let median = v[v.len() / 2];
    Stat {
        median,
        min_mpps,
        max_mpps,
        within: (max_mpps - min_mpps) / median.mpps.max(1e-9),
    }
}

/// Combines one case's measurements in several layouts: the median over the layouts of
/// each layout's median run, the layouts' range, and the worst spread inside a layout.
fn over_layouts(per_layout: Vec<Stat>) -> Stat {
    let within = per_layout.iter().map(|s| s.within).fold(0.0, f64::max);
    let mut s = summarize(per_layout.iter().map(|s| s.median).collect());
    s.within = within;
    s
}

/// With `--steps N`: runs `step` exactly N times (no warm-up), for instruction counts.
static STEPS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();

/// Runs `step` (which returns packets done) repeatedly for `secs`, giving Mpps per CPU second.
fn measure(secs: f64, mut step: impl FnMut() -> u64) -> Sample {
    if let Some(&Some(n)) = STEPS.get() {
        let c0 = thread_cpu_secs();
        let pkts: u64 = (0..n).map(|_| step()).sum();
        let cpu = (thread_cpu_secs() - c0).max(1e-9);
        println!("# {n} steps, {pkts} packets");
        return Sample {
            mpps: pkts as f64 / cpu / 1e6,
            cycles: cpu * tsc::hz() as f64 / pkts.max(1) as f64,
        };
    }
    let (pkts, cpu) = common::run_timed(secs, step);
    // Cycles of this thread's CPU time (TSC rate).
    Sample {
        mpps: pkts as f64 / cpu / 1e6,
        cycles: cpu * tsc::hz() as f64 / pkts.max(1) as f64,
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

/// A 60-byte Ethernet/IPv4/UDP frame whose headers parse (lengths, TTL, protocol, IPv4
/// checksum), 10.0.0.1:1234 -> 10.0.0.2:53: `make bench-vs-bess`'s template.
fn udp_frame_valid() -> Vec<u8> {
    let mut f = udp_frame(60);
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[19] = 1; // identification 1
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let sum = f[14..34]
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// A pipeline to measure: modules, connections and a Source task.
struct Case {
    g: Pipeline,
    task: bessemer_core::sched::TaskId,
    ctx: Context,
}

impl Case {
    /// A graph with one Source (`burst` packets of `size` bytes per batch) named "src".
    fn source(pool: &PacketPool, size: usize, burst: usize) -> Case {
        let mut g = Pipeline::new();
        let src = Value::map().with("pkt_size", size);
        let (_, tasks) = g.add_module(class("Source"), Some("src"), &src).unwrap();
        let mut ctx = Context::new(0, pool);
        let burst_arg = Value::map().with("burst", burst);
        g.command("src", "set_burst", &burst_arg, &mut ctx).unwrap();
        Case {
            g,
            task: tasks[0],
            ctx,
        }
    }

    /// Adds a module of `mclass` named `name` and connects `from:0` to it.
    fn then(&mut self, from: &str, mclass: &str, name: &str, arg: Value) -> &mut Case {
        self.g
            .add_module(class(mclass), Some(name), &arg)
            .unwrap_or_else(|e| panic!("{mclass}: {e}"));
        self.g.connect(from, 0, name, 0).unwrap();
        self
    }

    fn command(&mut self, module: &str, cmd: &str, arg: Value) {
        self.g
            .command(module, cmd, &arg, &mut self.ctx)
            .unwrap_or_else(|e| panic!("{module}.{cmd}: {e}"));
    }

    /// Runs the Source task through a one-leaf scheduler tree, `o.base.runs` times.
    fn measure(mut self, o: &Opts, sinks: &[&str]) -> Stat {
        let mut tree = ClassTree::new(0);
        tree.add_class("leaf", Policy::Leaf, None, 0, 1).unwrap();
        tree.attach_task("leaf", self.task).unwrap();
        let (g, ctx) = (&self.g, &mut self.ctx);
        let samples = (0..o.base.runs)
            .map(|_| {
                measure(o.base.secs, || {
                    let mut n = 0u64;
                    // As a worker runs its rounds (several runs of a lone task per round).
                    tree.schedule_round(
                        &mut |t, max_runs| {
                            let group = ctx.run_task_group(g, t, max_runs);
                            n += group.result.packets as u64;
                            group
                        },
                        FUSED_RUNS,
                    );
                    n
                })
            })
            .collect();
        let arrived: u64 = sinks
            .iter()
            .map(|s| g.igate_counts(s, 0).map(|c| c.packets).unwrap_or(0))
            .sum();
        assert!(arrived > 0, "no packet reached the sinks {sinks:?}");
        summarize(samples)
    }
}

/// Source → [Rewrite] → N × Bypass → Sink (BESS's perftest/chain.bess when N > 0).
fn pipeline(
    pool: &PacketPool,
    size: usize,
    burst: usize,
    rewrite: bool,
    bypasses: usize,
    o: &Opts,
) -> Stat {
    let mut c = Case::source(pool, size, burst);
    let mut prev = "src".to_string();
    if rewrite {
        let arg = Value::map().with(
            "templates",
            Value::List(vec![Value::Bytes(udp_frame(size))]),
        );
        c.then(&prev, "Rewrite", "rw", arg);
        prev = "rw".into();
    }
    for i in 0..bypasses {
        let name = format!("bp{i}");
        c.then(&prev, "Bypass", &name, Value::map());
        prev = name;
    }
    c.then(&prev, "Sink", "sink", Value::Null);
    c.measure(o, &["sink"])
}

/// BESS's perftest/complex_split.bess: a tree of RandomSplit modules `depth` deep with
/// `fanout` gates each, every leaf gate → Bypass → Sink.
fn split_tree(pool: &PacketPool, fanout: usize, depth: usize, o: &Opts) -> Stat {
    let mut c = Case::source(pool, 60, MAX_BURST);
    let gates = || {
        Value::map().with(
            "gates",
            Value::List((0..fanout).map(|i| Value::from(i as u64)).collect()),
        )
    };
    c.then("src", "RandomSplit", "rs0", gates());
    let mut level = vec!["rs0".to_string()];
    let mut n = 1;
    for _ in 1..depth {
        let mut next = Vec::new();
        for parent in &level {
            for gate in 0..fanout {
                let name = format!("rs{n}");
                n += 1;
                c.g.add_module(class("RandomSplit"), Some(&name), &gates())
                    .unwrap();
                c.g.connect(parent, gate as u16, &name, 0).unwrap();
                next.push(name);
            }
        }
        level = next;
    }
    let mut sinks = Vec::new();
    for parent in &level {
        for gate in 0..fanout {
            let (bp, sink) = (format!("bp{n}"), format!("sink{n}"));
            n += 1;
            c.g.add_module(class("Bypass"), Some(&bp), &Value::map())
                .unwrap();
            c.g.connect(parent, gate as u16, &bp, 0).unwrap();
            c.then(&bp, "Sink", &sink, Value::Null);
            sinks.push(sink);
        }
    }
    let names: Vec<&str> = sinks.iter().map(String::as_str).collect();
    c.measure(o, &names)
}

/// Source → RandomUpdate (1 000 destination addresses) → ExactMatch on the destination
/// (1 000 entries) → Update → Sink: a classifier pipeline, so no single micro-case is tuned
/// alone.
fn classifier(pool: &PacketPool, o: &Opts) -> Stat {
    const FLOWS: usize = 1000;
    const BASE: u32 = 0x0a00_0000;
    let mut c = Case::source(pool, 60, MAX_BURST);
    let tmpl = Value::List(vec![Value::Bytes(udp_frame(60))]);
    c.then("src", "Rewrite", "rw", Value::map().with("templates", tmpl));
    let range = Value::map()
        .with("offset", 30u64)
        .with("size", 4u64)
        .with("min", BASE as u64)
        .with("max", (BASE as usize + FLOWS - 1) as u64);
    c.then(
        "rw",
        "RandomUpdate",
        "ru",
        Value::map().with("fields", Value::List(vec![range])),
    );
    let field = Value::map().with("offset", 30u64).with("num_bytes", 4u64);
    c.then(
        "ru",
        "ExactMatch",
        "em",
        Value::map().with("fields", Value::List(vec![field])),
    );
    for i in 0..FLOWS {
        let v = Value::map().with(
            "value_bin",
            Value::Bytes((BASE + i as u32).to_be_bytes().to_vec()),
        );
        c.command(
            "em",
            "add",
            Value::map()
                .with("gate", 0u64)
                .with("fields", Value::List(vec![v])),
        );
    }
    let upd = Value::map()
        .with("offset", 26u64)
        .with("size", 4u64)
        .with("value", 0x0101_0101u64);
    c.then(
        "em",
        "Update",
        "upd",
        Value::map().with("fields", Value::List(vec![upd])),
    );
    c.then("upd", "Sink", "sink", Value::Null);
    c.measure(o, &["sink"])
}

/// A module a case puts after its front end: class name, argument, commands (name, argument)
/// run after creating it, and how many of its output gates lead to the Sink.
type Stage<'a> = (&'a str, Value, &'a [(&'a str, Value)], u16);

/// Source -> Rewrite -> RandomUpdate (destination address, uniform in `lo..=hi`) -> [class]
/// -> Sink: the front end of `make bench-vs-bess`'s classifier rows, and those rows.
fn random_dst(pool: &PacketPool, lo: u32, hi: u32, class: Option<Stage>, o: &Opts) -> Stat {
    let mut c = Case::source(pool, 60, MAX_BURST);
    let tmpl = Value::List(vec![Value::Bytes(udp_frame_valid())]);
    c.then("src", "Rewrite", "rw", Value::map().with("templates", tmpl));
    let range = Value::map()
        .with("offset", 30u64)
        .with("size", 4u64)
        .with("min", lo as u64)
        .with("max", hi as u64);
    c.then(
        "rw",
        "RandomUpdate",
        "ru",
        Value::map().with("fields", Value::List(vec![range])),
    );
    let mut last = "ru";
    let mut gates = 1;
    if let Some((cls, arg, cmds, n)) = class {
        c.then("ru", cls, "cls", arg);
        for (cmd, arg) in cmds {
            c.command("cls", cmd, arg.clone());
        }
        last = "cls";
        gates = n;
    }
    c.g.add_module(class_of("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    for g in 0..gates {
        c.g.connect(last, g, "sink", 0).unwrap();
    }
    c.measure(o, &["sink"])
}

fn class_of(name: &str) -> &'static bessemer_core::ModuleClass {
    class(name)
}

/// `make bench-vs-bess`'s 10 000-route table: all 256 /16 of 10/8 and 9 744 distinct /24
/// inside it (gates 0..3 in turn), plus a default route to gate 0.
fn routes_10k() -> Vec<(u32, u8)> {
    let mut r: Vec<(u32, u8)> = (0..256u32).map(|i| (0x0a00_0000 | i << 16, 16)).collect();
    let mut rng = bessemer_modules::util::FastRng::new(10_000);
    let mut seen = std::collections::HashSet::new();
    while seen.len() < 9744 {
        let i = rng.below(1 << 16) as u32;
        if seen.insert(i) {
            r.push((0x0a00_0000 | i << 8, 24));
        }
    }
    r
}

/// `n` distinct prefixes with an Internet table's length mix (per mille: /8-/15 5.4, /16 14,
/// /17-/21 132, /22 110, /23 100, /24 637, longer 1.1), over 1.0.0.0 - 223.255.255.255: the
/// same mix as `make bench-vs-bess`'s 900 000-route row.
pub fn routes_internet(n: usize, seed: u64) -> Vec<(u32, u8)> {
    const MIX: &[(u8, f64)] = &[
        (8, 0.02),
        (9, 0.02),
        (10, 0.05),
        (11, 0.15),
        (12, 0.4),
        (13, 0.8),
        (14, 1.5),
        (15, 2.5),
        (16, 14.0),
        (17, 8.0),
        (18, 14.0),
        (19, 26.0),
        (20, 40.0),
        (21, 44.0),
        (22, 110.0),
        (23, 100.0),
        (24, 637.0),
        (25, 0.2),
        (26, 0.2),
        (27, 0.1),
        (28, 0.1),
        (29, 0.1),
        (30, 0.1),
        (32, 0.2),
    ];
    let total: f64 = MIX.iter().map(|m| m.1).sum();
    let mut rng = bessemer_modules::util::FastRng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut x = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let len = MIX
            .iter()
            .find(|m| {
                x -= m.1;
                x < 0.0
            })
            .map_or(24, |m| m.0);
        let a = 0x0100_0000 + rng.below(0xe000_0000 - 0x0100_0000) as u32;
        let p = a & (u32::MAX << (32 - len as u32));
        if seen.insert((p, len)) {
            out.push((p, len));
        }
    }
    out
}

/// Source -> Rewrite -> RandomUpdate (destinations uniform in `lo..=hi`) -> IPLookup with
/// `routes` (gate i % 4, default route to gate 0) -> Sink.
fn ip_lookup(pool: &PacketPool, routes: &[(u32, u8)], lo: u32, hi: u32, o: &Opts) -> Stat {
    let long = routes
        .iter()
        .filter(|r| r.1 > 24)
        .map(|r| r.0 >> 8)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let arg = Value::map()
        .with("max_rules", (routes.len() + 16).max(1024))
        .with("max_tbl8s", (long + 16).max(128));
    let mut cmds: Vec<(&str, Value)> = routes
        .iter()
        .enumerate()
        .map(|(i, &(p, len))| {
            let r = Value::map()
                .with("prefix", std::net::Ipv4Addr::from(p).to_string())
                .with("prefix_len", len as u64)
                .with("gate", (i % 4) as u64);
            ("add", r)
        })
        .collect();
    cmds.push((
        "add",
        Value::map()
            .with("prefix", "0.0.0.0")
            .with("prefix_len", 0u64)
            .with("gate", 0u64),
    ));
    random_dst(pool, lo, hi, Some(("IPLookup", arg, &cmds, 4)), o)
}

/// What runtime sampling (`show runtime`) costs on Source -> 8 x Bypass -> Sink.
struct RuntimeCost {
    off_mpps: f64,
    on_mpps: f64,
    /// Median over the pairs of 1 - on/off, in percent.
    cost_pct: f64,
    pairs: usize,
    /// The sampled cycles per packet of each module, as `show runtime` gives them.
    modules: Vec<(String, f64)>,
}

/// Runs the chain8 case with runtime sampling off and on, alternated: pairs of runs one
/// right after the other on the same graph, so that load from elsewhere hits both alike;
/// the cost is the median of the pairs' ratios.
fn runtime_cost(pool: &PacketPool, o: &Opts) -> RuntimeCost {
    let mut c = Case::source(pool, 60, MAX_BURST);
    let mut prev = "src".to_string();
    for i in 0..8 {
        let name = format!("bp{i}");
        c.then(&prev, "Bypass", &name, Value::map());
        prev = name;
    }
    c.then(&prev, "Sink", "sink", Value::Null);
    // As the engine does for a task on worker 0: the modules get their worker's slots.
    c.g.set_task_workers(&|_| Some(0));
    let mut tree = ClassTree::new(0);
    tree.add_class("leaf", Policy::Leaf, None, 0, 1).unwrap();
    tree.attach_task("leaf", c.task).unwrap();
    let pairs = if o.base.quick { 6 } else { 20 };
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        let mut pair = [0.0f64; 2];
        // Which runs first alternates too.
        for k in 0..2 {
            let sampled = (i + k) % 2 == 1;
            c.g.set_runtime(sampled);
            let (g, ctx) = (&c.g, &mut c.ctx);
            let s = measure(o.base.secs, || {
                let mut n = 0u64;
                tree.schedule_round(
                    &mut |t, max_runs| {
                        let group = ctx.run_task_group(g, t, max_runs);
                        n += group.result.packets as u64;
                        group
                    },
                    FUSED_RUNS,
                );
                n
            });
            pair[sampled as usize] = s.mpps;
        }
        off.push(pair[0]);
        on.push(pair[1]);
        ratios.push(pair[1] / pair[0]);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let modules =
        c.g.runtime(true)
            .into_iter()
            .map(|m| {
                let cpp = m
                    .workers
                    .first()
                    .and_then(|w| w.cycles_per_packet())
                    .unwrap_or(0.0);
                (m.name, cpp)
            })
            .collect();
    RuntimeCost {
        off_mpps: median(off),
        on_mpps: median(on),
        cost_pct: (1.0 - median(ratios)) * 100.0,
        pairs,
        modules,
    }
}

/// What packet trace costs on Source -> 8 x Bypass -> Sink: Mpps with no trace, with a
/// trace armed whose capture is over (`trace add` done, not yet cleared), and with one
/// capturing at a module outside the chain (every run takes the traced path).
struct TraceCost {
    off_mpps: f64,
    done_mpps: f64,
    capturing_mpps: f64,
    /// Medians over the rounds of 1 - with/off, in percent.
    done_pct: f64,
    capturing_pct: f64,
    rounds: usize,
}

/// Runs the chain8 case in rounds of three runs (no trace, a finished trace, a capturing
/// one), one right after the other on the same graph, in a rotating order, as
/// `runtime_cost` does. Runtime sampling is off, so that with no trace the runner takes its
/// plain path: the one flag test per task group is all tracing adds there.
fn trace_cost(pool: &PacketPool, o: &Opts) -> TraceCost {
    use bessemer_core::trace::Tracer;
    use std::sync::Arc;
    let mut c = Case::source(pool, 60, MAX_BURST);
    let mut prev = "src".to_string();
    for i in 0..8 {
        let name = format!("bp{i}");
        c.then(&prev, "Bypass", &name, Value::map());
        prev = name;
    }
    c.then(&prev, "Sink", "sink", Value::Null);
    c.g.set_task_workers(&|_| Some(0));
    c.g.set_runtime(false);
    let mut tree = ClassTree::new(0);
    tree.add_class("leaf", Policy::Leaf, None, 0, 1).unwrap();
    tree.attach_task("leaf", c.task).unwrap();
    let rounds = if o.base.quick { 6 } else { 20 };
    let mut mpps: [Vec<f64>; 3] = Default::default();
    let (mut done, mut capturing) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let mut r = [0.0f64; 3];
        for k in 0..3 {
            let v = (i + k) % 3;
            c.g.set_trace(match v {
                0 => None,
                // Armed, nothing left to capture: the runner loads one flag of the trace.
                1 => Some(Arc::new(Tracer::new(vec!["elsewhere".into()], 0))),
                // Capturing at a module not in the chain: every call takes the traced path.
                _ => Some(Arc::new(Tracer::new(vec!["elsewhere".into()], 1))),
            });
            let (g, ctx) = (&c.g, &mut c.ctx);
            let s = measure(o.base.secs, || {
                let mut n = 0u64;
                tree.schedule_round(
                    &mut |t, max_runs| {
                        let group = ctx.run_task_group(g, t, max_runs);
                        n += group.result.packets as u64;
                        group
                    },
                    FUSED_RUNS,
                );
                n
            });
            r[v] = s.mpps;
        }
        c.g.set_trace(None);
        for v in 0..3 {
            mpps[v].push(r[v]);
        }
        done.push(r[1] / r[0]);
        capturing.push(r[2] / r[0]);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let [off, d, cap] = mpps;
    TraceCost {
        off_mpps: median(off),
        done_mpps: median(d),
        capturing_mpps: median(cap),
        done_pct: (1.0 - median(done)) * 100.0,
        capturing_pct: (1.0 - median(capturing)) * 100.0,
        rounds,
    }
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
fn rate_accuracy(pool: &PacketPool, secs: f64) -> (f64, f64, usize, f64) {
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
    let (b0, t0, c0) = (snap(&tree), tsc::rdtsc(), thread_cpu_secs());
    run_for(&mut tree, &mut ctx, secs);
    let (b1, t1, c1) = (snap(&tree), tsc::rdtsc(), thread_cpu_secs());
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
    // Rates are per wall-clock second: a thread that lost its core to other load cannot keep
    // them, whatever the scheduler does.
    let cpu_share = (c1 - c0) / dt.max(1e-9);
    (worst, mean, below, cpu_share)
}

/// Scheduler cycles per round of `policy` over `leaves` classes, from this thread's CPU
/// time (median of 3), so a preempted thread does not inflate it.
fn sched_cycles(policy: &str, leaves: usize, quick: bool) -> f64 {
    let rounds = if quick { 100_000 } else { 2_000_000 };
    let mut v: Vec<f64> = (0..3)
        .map(|_| {
            let c0 = thread_cpu_secs();
            let wall = bench_round_cost(policy, leaves, rounds);
            let cpu = thread_cpu_secs() - c0;
            // bench_round_cost's own figure already counts only CPU time (or the TSC span,
            // if lower) over its timed rounds; this one, which also counts building the
            // tree and min(rounds, 100 000) warm-up rounds, can only be higher, and is kept
            // as a second bound.
            let warm = rounds.min(100_000);
            (cpu * tsc::hz() as f64 / (rounds + warm) as f64).min(wall)
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[1]
}

/// Where one batch's cycles go, from cases measured in this run (differences between them;
/// see docs/performance.md, "Cycle budget").
fn budget(results: &[(String, Stat)], sched_round: f64, json: &mut Vec<(String, String)>) {
    let get = |n: &str| {
        results
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, s)| s.median.cycles * MAX_BURST as f64)
    };
    let (Some(af), Some(ss), Some(c8), Some(c32)) = (
        get("alloc_free"),
        get("src_sink_60"),
        get("chain8_60"),
        get("chain32_60"),
    ) else {
        return;
    };
    // Per hop: one more module called and one more gate counted, per batch.
    let hop = (c32 - c8) / 24.0;
    // A lone Source's leaf runs FUSED_RUNS times per round, as a worker runs it.
    let sched = sched_round / FUSED_RUNS as f64;
    let task = (ss - sched - af - hop).max(0.0);
    println!(
        "\ncycle budget of one batch of {MAX_BURST} packets (60 B), cycles per batch \
         (per packet in brackets):"
    );
    let line =
        |what: &str, c: f64| println!("  {what:<58} {c:>8.1} ({:>5.2})", c / MAX_BURST as f64);
    line(
        &format!("scheduler: a round_robin round ({sched_round:.1}) / {FUSED_RUNS} runs"),
        sched,
    );
    line("alloc + free of the batch's buffers (pool cache)", af);
    line(
        "task call + Source's own work (headers, length, batch)",
        task,
    );
    line(
        "per module on the path: dispatch + gate counters + hooks check",
        hop,
    );
    line("= Source -> Sink", ss);
    line(
        "= Source -> 8 x Bypass -> Sink (Source->Sink + 8 hops)",
        ss + 8.0 * hop,
    );
    line("  measured Source -> 8 x Bypass -> Sink", c8);
    for (k, v) in [
        ("budget_sched_cycles_per_batch", sched),
        ("budget_sched_cycles_per_round", sched_round),
        ("budget_alloc_free_cycles_per_batch", af),
        ("budget_task_cycles_per_batch", task),
        ("budget_hop_cycles_per_batch", hop),
    ] {
        json.push((k.into(), format!("{v:.1}")));
    }
}

fn main() {
    let o = parse_opts();
    let _ = STEPS.set(o.steps);
    common::pin(PROG, o.base.core);
    let ghz = tsc::hz() as f64 / 1e9;
    let pool = PacketPool::new("bench", 16384, PagePolicy::Auto).expect("packet pool");
    println!(
        "# bench-core: batch capacity {MAX_BURST}, TSC {ghz:.2} GHz, pinned to core {}, {} layouts × {} runs × {:.2} s, pages: {}",
        o.base.core,
        o.layouts,
        o.base.runs,
        o.base.secs,
        pool.page_kind()
    );
    let bess = match o.bess.as_deref().map(bess_figures) {
        Some(Ok(v)) => {
            println!("# BESS: the real omec bessd measured in this run (bench/vs_bess.sh)");
            Some(v)
        }
        Some(Err(e)) => {
            println!("# BESS not measured: {e}");
            None
        }
        None => {
            println!(
                "# BESS not measured (no --bess: bench/core.sh measures it when bessd is built)"
            );
            None
        }
    };
    println!(
        "{:<28} {:>10} {:>18} {:>10} {:>16}",
        "case", "Mpps", "layouts min..max", "cyc/pkt", "vs BESS"
    );
    let mut json: Vec<(String, String)> = vec![
        ("batch".into(), MAX_BURST.to_string()),
        ("tsc_ghz".into(), format!("{ghz:.3}")),
        ("bess_measured".into(), bess.is_some().to_string()),
    ];
    let mut results: Vec<(String, Stat)> = Vec::new();
    let mut busy = 0usize;
    let wanted = |name: &str| o.only.as_deref().is_none_or(|p| name.starts_with(p));
    let mut row = |name: &str, run: &mut dyn FnMut() -> Stat| {
        if !wanted(name) {
            return;
        }
        let s = over_layouts(
            (0..o.layouts)
                .map(|l| {
                    // Held while the case is built and run, so that its allocations land
                    // elsewhere in each layout.
                    let shift = std::hint::black_box(vec![0u8; l * LAYOUT_STEP]);
                    let s = run();
                    drop(shift);
                    s
                })
                .collect(),
        );
        let compared = BESS_ROWS.iter().any(|(n, _)| *n == name);
        let reference = bess
            .as_ref()
            .and_then(|b| b.iter().find(|(n, _)| *n == name).map(|(_, v)| *v));
        let ratio = match reference {
            Some(r) => format!("{:.2}x", s.median.mpps / r),
            None if compared => "not measured".into(),
            None => "-".into(),
        };
        let mark = if s.spread() > BUSY_SPREAD {
            busy += 1;
            " !busy"
        } else {
            ""
        };
        println!(
            "{:<28} {:>10.1} {:>8.1}..{:<8.1} {:>10.2} {:>16}{mark}",
            name, s.median.mpps, s.min_mpps, s.max_mpps, s.median.cycles, ratio
        );
        json.push((format!("{name}_mpps"), format!("{:.2}", s.median.mpps)));
        json.push((
            format!("{name}_cycles_per_pkt"),
            format!("{:.3}", s.median.cycles),
        ));
        if let Some(r) = reference {
            json.push((format!("{name}_bess_mpps"), format!("{r:.2}")));
            json.push((
                format!("{name}_vs_bess"),
                format!("{:.3}", s.median.mpps / r),
            ));
        }
        results.push((name.to_string(), s));
    };
    row("alloc_free", &mut || alloc_free(&pool, &o));
    for size in [60usize, 1500] {
        row(&format!("src_sink_{size}"), &mut || {
            pipeline(&pool, size, MAX_BURST, false, 0, &o)
        });
        row(&format!("src_sink_burst1_{size}"), &mut || {
            pipeline(&pool, size, 1, false, 0, &o)
        });
        row(&format!("src_rewrite_sink_{size}"), &mut || {
            pipeline(&pool, size, MAX_BURST, true, 0, &o)
        });
        for n in [1usize, 2, 4, 8, 16, 32] {
            row(&format!("chain{n}_{size}"), &mut || {
                pipeline(&pool, size, MAX_BURST, false, n, &o)
            });
        }
    }
    for (fanout, depth) in [(2usize, 3usize), (3, 3)] {
        row(&format!("split_tree{fanout}x{depth}_60"), &mut || {
            split_tree(&pool, fanout, depth, &o)
        });
    }
    row("exactmatch_update_60", &mut || classifier(&pool, &o));
    // `make bench-vs-bess`'s classifier rows, in process: the front end (Rewrite ->
    // RandomUpdate on the destination address), then IPLookup after it.
    const TEN: u32 = 0x0a00_0000;
    row("random_update_60", &mut || {
        random_dst(&pool, TEN, TEN + 999, None, &o)
    });
    let r10k = routes_10k();
    row("ip_lookup_10k_60", &mut || {
        ip_lookup(&pool, &r10k, TEN, TEN | 0x00ff_ffff, &o)
    });
    // 900 000 routes: not in --quick (building the table takes seconds per layout).
    if wanted("ip_lookup_900k_60") && !o.base.quick {
        let r900k = routes_internet(900_000, 900);
        row("ip_lookup_900k_60", &mut || {
            ip_lookup(&pool, &r900k, 0x0100_0000, 0xdfff_ffff, &o)
        });
    }
    if wanted("runtime_chain8_60") {
        let r = runtime_cost(&pool, &o);
        println!(
            "\nruntime sampling (show runtime) on chain8_60, {} alternated off/on pairs: off {:.1} Mpps, on {:.1} Mpps, cost {:.2} % (median of the pairs)",
            r.pairs, r.off_mpps, r.on_mpps, r.cost_pct
        );
        let per: Vec<String> = r
            .modules
            .iter()
            .map(|(m, c)| format!("{m} {c:.1}"))
            .collect();
        println!("  sampled cycles/packet: {}", per.join(", "));
        json.push(("runtime_off_mpps".into(), format!("{:.2}", r.off_mpps)));
        json.push(("runtime_on_mpps".into(), format!("{:.2}", r.on_mpps)));
        json.push(("runtime_cost_pct".into(), format!("{:.2}", r.cost_pct)));
    }
    if wanted("trace_chain8_60") {
        let r = trace_cost(&pool, &o);
        println!(
            "\npacket trace on chain8_60, {} rotated rounds: no trace {:.1} Mpps; a finished trace armed {:.1} Mpps ({:.2} %); one capturing elsewhere {:.1} Mpps ({:.2} %) (medians)",
            r.rounds, r.off_mpps, r.done_mpps, r.done_pct, r.capturing_mpps, r.capturing_pct
        );
        json.push(("trace_off_mpps".into(), format!("{:.2}", r.off_mpps)));
        json.push(("trace_done_mpps".into(), format!("{:.2}", r.done_mpps)));
        json.push(("trace_done_cost_pct".into(), format!("{:.2}", r.done_pct)));
        json.push((
            "trace_capturing_mpps".into(),
            format!("{:.2}", r.capturing_mpps),
        ));
        json.push((
            "trace_capturing_cost_pct".into(),
            format!("{:.2}", r.capturing_pct),
        ));
    }
    if busy > 0 {
        println!(
            "warning: {busy} case(s) marked !busy varied by more than {:.0}% between runs: \
             the machine was busy; rerun for figures to compare",
            BUSY_SPREAD * 100.0
        );
    }
    json.push(("busy_cases".into(), busy.to_string()));
    if o.only.is_none() {
        let sched_round = sched_cycles("round_robin", 1, o.base.quick);
        budget(&results, sched_round, &mut json);
    }
    // `--only sched` runs the scheduler table alone.
    if !o.skip_sched && o.only.as_deref().is_none_or(|p| p == "sched") {
        println!(
            "\n{:<28} {:>10} {:>10} {:>10} {:>10}",
            "scheduler cycles/round", "1", "16", "256", "4096"
        );
        for policy in ["round_robin", "weighted_fair", "priority"] {
            let rounds = if o.base.quick { 100_000 } else { 2_000_000 };
            let v: Vec<f64> = [1usize, 16, 256, 4096]
                .iter()
                .map(|&n| {
                    let _ = rounds;
                    sched_cycles(policy, n, o.base.quick)
                })
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
        let (worst, mean, below, cpu_share) = rate_accuracy(&pool, secs);
        println!(
            "\nrate_limit accuracy, 1000 classes at 1-11 Mbps over {secs:.0} s: worst {worst:.5}, mean {mean:.5}, classes below 0.999: {below}"
        );
        if cpu_share < 0.95 {
            println!(
                "warning: the thread had its core {:.0}% of the time (busy machine): the rates \
                 above are bounded by that, not by the scheduler; rerun on a quiet machine",
                cpu_share * 100.0
            );
        }
        json.push(("rate_cpu_share".into(), format!("{cpu_share:.3}")));
        json.push(("rate_accuracy_worst".into(), format!("{worst:.6}")));
        json.push(("rate_accuracy_mean".into(), format!("{mean:.6}")));
        json.push(("rate_classes_below_0999".into(), below.to_string()));
    }
    let body: Vec<String> = json.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    println!("{{{}}}", body.join(", "));
}

//! Seed 003 Table 5.1 on the 82599 model: 10 queues, the balancing policy, 10/100/250/500
//! flows; full search, +1, +10, -1, -10 flows; basic and incremental flow maps. Prints a
//! table with the thesis's figures beside ours and ends with one JSON line.

use bessemer_planner::nic::Intel82599;
use bessemer_planner::search::{full_search, generate_flows, Balance, FlowMapMode, Planner};
use clap::Parser;
use std::time::Instant;

/// What to run.
#[derive(Parser)]
#[command(
    name = "planner-bench",
    version,
    about = "Seed 003 Table 5.1 on the planner's 82599 model: full search, +1/+10/-1/-10 flows at 10/100/250/500 flows, basic and incremental flow maps, beside the thesis's figures",
    after_help = "Prints a table (median [min..max] of the runs) and ends with one JSON line. Changes nothing on the system."
)]
struct Args {
    /// Runs per size with incremental flow maps, 1 to 1000 (default 5, 3 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Runs per size with basic flow maps (slow), 0 to 1000 (default 3, 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1000))]
    basic_runs: Option<u32>,
    /// Fewer runs: 3 incremental and 1 basic (unless --runs or --basic-runs say otherwise).
    #[arg(long)]
    quick: bool,
}

const SIZES: [usize; 4] = [10, 100, 250, 500];
/// Table 5.1 (seconds): basic full, incremental full, +1, +10, -1, -10.
const THESIS: [[f64; 6]; 4] = [
    [0.011, 0.017, 0.002, 0.022, 9e-6, 23.7e-6],
    [1.2, 0.6, 0.009, 0.094, 74e-6, 117e-6],
    [13.0, 4.0, 0.021, 0.219, 190e-6, 277e-6],
    [76.0, 17.0, 0.043, 0.484, 382e-6, 548e-6],
];

struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    Stat {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

fn fmt_t(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

fn cell(s: &Stat) -> String {
    format!("{} [{}..{}]", fmt_t(s.median), fmt_t(s.min), fmt_t(s.max))
}

/// Times (full, +1, +10, -1, -10) for one mode, size and seed.
fn one_run(mode: FlowMapMode, n: usize, seed: u64) -> [f64; 5] {
    let nic = Intel82599 { queues: 10 };
    let flows = generate_flows(n + 10, seed, 0, 0);
    let t = Instant::now();
    let base: Planner = full_search(&nic, &Balance, mode, &flows[..n], 0).expect("search");
    let full = t.elapsed().as_secs_f64();
    let time_add = |k: usize| {
        let mut p = base.clone();
        let t = Instant::now();
        for f in &flows[n..n + k] {
            p.add_flow(*f).expect("add");
        }
        t.elapsed().as_secs_f64()
    };
    let time_remove = |k: usize| {
        let mut p = base.clone();
        let t = Instant::now();
        for id in 0..k.min(n) {
            p.remove_flow(id).expect("remove");
        }
        t.elapsed().as_secs_f64()
    };
    [
        full,
        time_add(1),
        time_add(10),
        time_remove(1),
        time_remove(10),
    ]
}

fn main() {
    let args = Args::parse();
    let (runs, basic_runs) = if args.quick { (3, 1) } else { (5, 3) };
    let runs = args.runs.unwrap_or(runs) as usize;
    let basic_runs = args.basic_runs.unwrap_or(basic_runs) as usize;
    println!("Seed 003 Table 5.1 grid: 82599 model, 10 queues, balancing cost; median [min..max] of {runs} runs (basic: {basic_runs})");
    println!(
        "{:<6} {:<12} {:<34} {:<34} {:<34}",
        "flows", "mode", "full search", "+1 flow", "+10 flows"
    );
    let mut results: Vec<(usize, &str, Vec<Stat>)> = Vec::new();
    for (si, &n) in SIZES.iter().enumerate() {
        for (mode, name, r) in [
            (FlowMapMode::Basic, "basic", basic_runs),
            (FlowMapMode::Incremental, "incremental", runs),
        ] {
            if r == 0 {
                continue;
            }
            let samples: Vec<[f64; 5]> = (0..r).map(|s| one_run(mode, n, s as u64 + 1)).collect();
            let stats: Vec<Stat> = (0..5)
                .map(|k| stat(samples.iter().map(|s| s[k]).collect()))
                .collect();
            let th = THESIS[si];
            let thesis_full = if mode == FlowMapMode::Basic {
                th[0]
            } else {
                th[1]
            };
            println!(
                "{:<6} {:<12} {:<34} {:<34} {:<34}",
                n,
                name,
                format!("{} (thesis {})", cell(&stats[0]), fmt_t(thesis_full)),
                format!("{} (thesis {})", cell(&stats[1]), fmt_t(th[2])),
                format!("{} (thesis {})", cell(&stats[2]), fmt_t(th[3])),
            );
            println!(
                "{:<6} {:<12} {:<34} {:<34}",
                "",
                "",
                format!("-1 flow:  {} (thesis {})", cell(&stats[3]), fmt_t(th[4])),
                format!("-10 flows: {} (thesis {})", cell(&stats[4]), fmt_t(th[5])),
            );
            results.push((n, name, stats));
        }
    }
    let get = |n: usize, mode: &str, k: usize| {
        results
            .iter()
            .find(|(rn, m, _)| *rn == n && *m == mode)
            .map(|(_, _, s)| s[k].median)
    };
    let full500 = get(500, "incremental", 0).unwrap_or(f64::NAN);
    let add10 = get(500, "incremental", 2).unwrap_or(f64::NAN) * 1e3;
    let rem10 = get(500, "incremental", 4).unwrap_or(f64::NAN) * 1e3;
    let basic500 = get(500, "basic", 0);
    println!();
    println!("targets at 500 flows (incremental): full search {} (target <= 0.5 s, thesis 17 s incremental / 76 s basic): {}",
        fmt_t(full500), if full500 <= 0.5 { "met" } else { "NOT met" });
    println!(
        "  add 10 flows {:.3} ms (target <= 5 ms, thesis 484 ms): {}",
        add10,
        if add10 <= 5.0 { "met" } else { "NOT met" }
    );
    println!(
        "  remove 10 flows {:.4} ms (target <= 1 ms, thesis 0.548 ms): {}",
        rem10,
        if rem10 <= 1.0 { "met" } else { "NOT met" }
    );
    let num = |v: Option<f64>| {
        v.map(|x| format!("{x:.6}"))
            .unwrap_or_else(|| "null".into())
    };
    println!(
        "{{\"bench\": \"planner\", \"full_500_s\": {:.6}, \"add10_ms\": {:.4}, \"remove10_ms\": {:.5}, \"full_500_basic_s\": {}, \"thesis_full_500_s\": 17, \"thesis_full_500_basic_s\": 76, \"thesis_add10_ms\": 484, \"offload_vs_best_userspace\": null, \"offload_vs_xdp_bound\": null}}",
        full500, add10, rem10, num(basic500)
    );
}

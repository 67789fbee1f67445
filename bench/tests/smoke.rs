//! Smoke runs of the benchmarks inside `make test`: every case builds, moves packets and
//! reports, and the JSON line the issue notes quote is there. A fixed number of scheduler
//! rounds (`--steps`), not a time, so that they are quick in a debug build; no figure is
//! judged (timing belongs to `make bench-*`).

use std::process::Command;

/// Runs a benchmark binary; returns its standard output, failing on a non-zero exit.
fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("benchmark starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The number after `"key": ` in a JSON line.
fn json_number(line: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\": ");
    let at = line
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing in {line}"))
        + pat.len();
    let end = line[at..].find([',', '}']).map_or(line.len(), |e| at + e);
    line[at..end].trim().parse().expect("a number")
}

#[test]
fn bench_core_runs_every_case_and_ends_with_its_json_line() {
    let out = run(
        env!("CARGO_BIN_EXE_bench-core"),
        &["--quick", "--steps", "20", "--skip-sched"],
    );
    for case in [
        "alloc_free",
        "src_sink_60",
        "src_sink_burst1_60",
        "src_rewrite_sink_60",
        "chain1_60",
        "chain8_60",
        "chain32_60",
        "split_tree3x3_60",
        "exactmatch_update_60",
    ] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(case)),
            "no row for {case}:\n{out}"
        );
    }
    assert!(out.contains("cycle budget of one batch"), "{out}");
    let json = out.lines().last().expect("output");
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    for key in [
        "src_sink_60_mpps",
        "chain8_60_mpps",
        "src_sink_burst1_60_mpps",
    ] {
        assert!(json_number(json, key) > 0.0, "{key} in {json}");
    }
    assert_eq!(
        json_number(json, "batch") as usize,
        bessemer_core::MAX_BURST
    );
}

#[test]
fn bench_modules_measures_a_classifier_case() {
    let out = run(
        env!("CARGO_BIN_EXE_bench-modules"),
        &["--steps", "5", "--only", "ExactMatch 1000 "],
    );
    let json = out.lines().last().expect("output");
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    // "ExactMatch 1000 entries: base N packets, class N packets": both pipelines ran and
    // every packet got through the class.
    let line = out
        .lines()
        .find(|l| l.starts_with("ExactMatch 1000 entries:"))
        .unwrap_or_else(|| panic!("no ExactMatch row:\n{out}"));
    let counts: Vec<u64> = line
        .split_once(':')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && counts[0] > 0 && counts[0] == counts[1],
        "{line}"
    );
}

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

/// Namespaces for one bench-ports call (`gen`, `sw` with the switch's ends, `sink`) plus a
/// veth pair straight from `gen` to `sink`, as bench/ports.sh makes them (g0 —veth— g1 [sw]
/// s1 —veth— s0; d0 —veth— d1); removed on drop, also when the test fails.
struct PortsTopo(String);

impl PortsTopo {
    fn new() -> PortsTopo {
        let t = PortsTopo(format!("bps{}", std::process::id() % 100000));
        let ip = |args: &[&str]| {
            let ok = Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {}", args.join(" "));
        };
        let (gen, sw, sink) = (t.ns("gen"), t.ns("sw"), t.ns("sink"));
        for n in [&gen, &sw, &sink] {
            ip(&["netns", "add", n]);
        }
        for (ns, a, peer_ns, b) in [
            (&gen, "g0", &sw, "g1"),
            (&sink, "s0", &sw, "s1"),
            (&gen, "d0", &sink, "d1"),
        ] {
            ip(&[
                "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b, "netns", peer_ns,
            ]);
            ip(&["-n", ns, "link", "set", a, "up"]);
            ip(&["-n", peer_ns, "link", "set", b, "up"]);
        }
        ip(&["-n", &gen, "addr", "add", "10.99.0.1/24", "dev", "g0"]);
        ip(&["-n", &sink, "addr", "add", "10.99.0.2/24", "dev", "s0"]);
        t
    }

    fn ns(&self, n: &str) -> String {
        format!("{}{n}", self.0)
    }

    /// Runs `bench-ports <mode>` in the switch's namespace, at most 120 s, with `env`; its
    /// JSON line.
    fn bench(&self, mode: &str, ends: [&str; 4], env: &[(&str, &str)]) -> serde_json::Value {
        let (gen, sink) = (self.ns("gen"), self.ns("sink"));
        let [g0, g1, s1, s0] = ends;
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns("sw"), "timeout", "120"])
            .arg(env!("CARGO_BIN_EXE_bench-ports"))
            .args([mode, &gen, g0, g1, s1, &sink, s0, "1"])
            .env("BENCH_REPS", "1")
            .envs(env.iter().copied())
            .output()
            .expect("bench-ports starts");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "bench-ports {mode} failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }
}

impl Drop for PortsTopo {
    fn drop(&mut self) {
        for n in ["gen", "sw", "sink"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// Every run of a bench-ports JSON line: its frame size and rate at the sink.
fn sink_rates(line: &serde_json::Value) -> Vec<(u64, f64)> {
    line["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {line}"))
        .iter()
        .map(|r| {
            (
                r["frame_bytes"].as_u64().expect("frame_bytes"),
                r["sink_mpps"].as_f64().expect("sink_mpps"),
            )
        })
        .collect()
}

/// make bench-ports on a kernel that refuses live-frames XDP (BPF_PROG_TEST_RUN answering
/// EPERM, as on the development VM) printed nothing for any switch. The `xdp` switch driven
/// by the second generator (AF_PACKET TX ring, forced with BENCH_GEN so that it runs on any
/// kernel) now gets frames of both sizes to the sink, and so does the generator alone (its
/// own trial of live frames, then whichever it picked); their JSON lines name the generator.
#[test]
#[cfg_attr(
    not(root),
    ignore = "needs root: network namespaces, veth, XDP, AF_PACKET"
)]
fn bench_ports_second_generator_drives_a_switch_and_is_named() {
    let t = PortsTopo::new();
    let xdp = t.bench(
        "xdp",
        ["g0", "g1", "s1", "s0"],
        &[("BENCH_GEN", "afpacket"), ("BENCH_FRAME_BYTES", "64,1518")],
    );
    assert_eq!(xdp["generator"], "afpacket", "{xdp}");
    let rates = sink_rates(&xdp);
    assert_eq!(
        rates.iter().map(|r| r.0).collect::<Vec<_>>(),
        [64, 1518],
        "{xdp}"
    );
    assert!(rates.iter().all(|r| r.1 > 0.0), "{xdp}");
    for r in xdp["runs"].as_array().expect("runs") {
        assert!(r["offered_mpps"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }

    let alone = t.bench(
        "generator",
        ["d0", "-", "-", "d1"],
        &[("BENCH_FRAME_BYTES", "64")],
    );
    let kind = alone["generator"].as_str().expect("generator named");
    match kind {
        "xdp-live" => assert!(alone["generator_reason"].is_null(), "{alone}"),
        // Picked only when the kernel refused the first choice, which it says why.
        "afpacket" => assert!(
            alone["generator_reason"]
                .as_str()
                .is_some_and(|r| r.contains("LIVE_FRAMES")),
            "{alone}"
        ),
        other => panic!("unknown generator {other}: {alone}"),
    }
    let rates = sink_rates(&alone);
    assert!(
        rates.len() == 1 && rates[0].0 == 64 && rates[0].1 > 0.0,
        "{alone}"
    );
}

#[test]
fn bench_ports_refuses_an_unknown_generator_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_bench-ports"))
        .args(["generator", "nons", "d0", "-", "-", "nons", "d1", "1"])
        .env("BENCH_GEN", "pktgen")
        .output()
        .expect("bench-ports starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("BENCH_GEN=pktgen: not a generator (xdp-live, afpacket or auto)"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A file holding `text`, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::write(&p, text).expect("temp file");
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn bench_core_prints_no_bess_ratio_it_did_not_measure() {
    // No --bess, and a vs_bess line saying bessd did not run: no ratio, no stored figure.
    let none = TempFile::new(
        "vs-bess-none",
        "BESS not measured: bessd is not built\n{\"bench\": \"vs_bess\", \"bess_measured\": false}\n",
    );
    for extra in [vec![], vec!["--bess", none.path()]] {
        let mut args = vec![
            "--quick",
            "--steps",
            "5",
            "--skip-sched",
            "--only",
            "src_sink_60",
        ];
        args.extend(extra);
        let out = run(env!("CARGO_BIN_EXE_bench-core"), &args);
        assert!(out.contains("# BESS not measured"), "{out}");
        let row = out
            .lines()
            .find(|l| l.starts_with("src_sink_60 "))
            .unwrap_or_else(|| panic!("no src_sink_60 row:\n{out}"));
        assert!(row.ends_with("not measured"), "{row}");
        let json = out.lines().last().expect("output");
        assert!(json.contains("\"bess_measured\": false"), "{json}");
        assert!(!json.contains("_vs_bess"), "{json}");
    }
}

#[test]
fn bench_core_divides_by_the_bess_figure_of_the_run() {
    let fig = TempFile::new(
        "vs-bess-fig",
        "{\"bench\": \"vs_bess\", \"src_sink_bess_mpps\": 2.5, \"bess_measured\": true}\n",
    );
    let out = run(
        env!("CARGO_BIN_EXE_bench-core"),
        &[
            "--quick",
            "--steps",
            "5",
            "--skip-sched",
            "--only",
            "src_sink",
            "--bess",
            fig.path(),
        ],
    );
    let json = out.lines().last().expect("output");
    assert!(json.contains("\"bess_measured\": true"), "{json}");
    assert_eq!(json_number(json, "src_sink_60_bess_mpps"), 2.5);
    let ratio = json_number(json, "src_sink_60_vs_bess");
    let mpps = json_number(json, "src_sink_60_mpps");
    assert!((ratio - mpps / 2.5).abs() < 0.01 * ratio.max(1.0), "{json}");
    // A case the file has no figure for says so.
    let row = out
        .lines()
        .find(|l| l.starts_with("src_sink_burst1_60 "))
        .unwrap_or_else(|| panic!("no burst-1 row:\n{out}"));
    assert!(row.ends_with("not measured"), "{row}");
}

/// The module classes omec's BESS ships (core/modules and the sample plugin), by name.
const BESS_CLASSES: &[&str] = &[
    "ACL",
    "ArpResponder",
    "BPF",
    "Buffer",
    "Bypass",
    "Counter",
    "DRR",
    "Dump",
    "EtherEncap",
    "ExactMatch",
    "FlowGen",
    "FlowMeasure",
    "GenericDecap",
    "GenericEncap",
    "GtpuDecap",
    "GtpuEcho",
    "GtpuEncap",
    "GtpuParser",
    "GtpuPathMonitoring",
    "HashLB",
    "IPChecksum",
    "IPDefrag",
    "IPEncap",
    "IPFrag",
    "IPLookup",
    "IPSwap",
    "L2Forward",
    "L4Checksum",
    "MACSwap",
    "MPLSPop",
    "Measure",
    "Merge",
    "MetadataTest",
    "NAT",
    "NoOP",
    "PortInc",
    "PortOut",
    "Qos",
    "Queue",
    "QueueInc",
    "QueueOut",
    "RandomSplit",
    "RandomUpdate",
    "Replicate",
    "Rewrite",
    "RoundRobin",
    "SequentialUpdate",
    "SetMetadata",
    "Source",
    "Split",
    "StaticNAT",
    "Timestamp",
    "Update",
    "UpdateTTL",
    "UrlFilter",
    "VLANPop",
    "VLANPush",
    "VLANSplit",
    "VXLANDecap",
    "VXLANEncap",
    "WildcardMatch",
    "WorkerSplit",
];

#[test]
fn vs_bess_has_a_row_for_every_class_and_says_when_bessd_is_missing() {
    let dir = env!("CARGO_MANIFEST_DIR");
    // Every class BESS ships is measured by some row or listed as needing a port (Sink ends
    // every row).
    let list = run(
        "python3",
        &[
            &format!("{dir}/vs_bess.py"),
            "--bessd",
            "-",
            "--pybess",
            "-",
            "--list",
        ],
    );
    let classes: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    for c in BESS_CLASSES {
        assert!(classes.contains(c), "no row for {c}:\n{list}");
    }
    // Where bessd is not built, the harness says so, ends with its JSON line and succeeds
    // (an empty cache: never the real one, never a build).
    let cache = std::env::temp_dir().join(format!("vs-bess-empty-{}", std::process::id()));
    std::fs::create_dir_all(&cache).expect("temp dir");
    let out = Command::new(format!("{dir}/vs_bess.sh"))
        .args(["--check-only", "--rows", "src_sink"])
        .env("BESSEMER_BESS_CACHE", &cache)
        .output()
        .expect("vs_bess.sh starts");
    let _ = std::fs::remove_dir_all(&cache);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("BESS not measured: bessd is not built"),
        "{stdout}"
    );
    let json = stdout.lines().last().expect("output");
    assert!(json.contains("\"bess_measured\": false"), "{json}");
}

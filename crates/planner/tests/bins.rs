//! The planner's binaries as a user starts them: `--help` and `--version` answer and do
//! nothing else, an unknown option is refused with exit status 2, and `planner-isolation`
//! removes its namespaces when it ends, whether normally or on SIGTERM.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BINS: [(&str, &str); 3] = [
    ("bessemer-planner", env!("CARGO_BIN_EXE_bessemer-planner")),
    ("planner-bench", env!("CARGO_BIN_EXE_planner-bench")),
    ("planner-isolation", env!("CARGO_BIN_EXE_planner-isolation")),
];

/// Waits for a child at most `limit`; kills it (and fails) when it takes longer, so a binary
/// that starts working instead of answering cannot hang the test run.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} still running after {limit:?}; stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(exe: &str, args: &[&str], what: &str) -> Output {
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_bounded(child, Duration::from_secs(60), what)
}

fn netns_list() -> String {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The namespaces planner-isolation names after its process id.
fn isolation_namespaces(pid: u32) -> [String; 2] {
    [format!("pisoc{pid}"), format!("pisos{pid}")]
}

fn has_namespace(list: &str, name: &str) -> bool {
    list.lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

#[test]
fn every_binary_answers_help_and_version_and_does_nothing_else() {
    for (name, exe) in BINS {
        let out = run(exe, &["--help"], &format!("{name} --help"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} --help: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("Usage:") && stdout.contains(name),
            "{name} --help: {stdout}"
        );
        assert!(out.stderr.is_empty(), "{name} --help wrote to stderr");
        let out = run(exe, &["--version"], &format!("{name} --version"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name} --version: {stdout}");
        assert_eq!(
            stdout.trim(),
            format!("{name} {}", env!("CARGO_PKG_VERSION")),
            "{name} --version"
        );
    }
}

#[test]
fn planner_isolation_help_makes_no_namespaces() {
    let exe = env!("CARGO_BIN_EXE_planner-isolation");
    let child = Command::new(exe)
        .arg("--help")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let _leftovers = Leftovers(pid);
    let out = wait_bounded(child, Duration::from_secs(60), "planner-isolation --help");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("--seconds") && stdout.contains("--runs"),
        "{stdout}"
    );
    let list = netns_list();
    for ns in isolation_namespaces(pid) {
        assert!(!has_namespace(&list, &ns), "--help made namespace {ns}");
    }
}

#[test]
fn an_unknown_option_is_refused_with_status_2() {
    for (name, exe) in BINS {
        let out = run(
            exe,
            &["--no-such-option"],
            &format!("{name} --no-such-option"),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("--no-such-option") && stderr.contains("Usage:"),
            "{name}: {stderr}"
        );
    }
    // A value that is not a number is named too (planner-bench used to ignore it).
    let out = run(
        env!("CARGO_BIN_EXE_planner-bench"),
        &["--runs", "many"],
        "planner-bench --runs many",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'many'") && stderr.contains("--runs"),
        "{stderr}"
    );
    let out = run(
        env!("CARGO_BIN_EXE_planner-isolation"),
        &["--seconds", "0"],
        "planner-isolation --seconds 0",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--seconds"), "{stderr}");
}

/// Removes planner-isolation's namespaces if the test fails before the binary does.
struct Leftovers(u32);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for ns in isolation_namespaces(self.0) {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn enough_cpus() -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        eprintln!("skipped: planner-isolation needs 2 CPUs, this test may use {n}");
    }
    n >= 2
}

/// SIGTERM once the namespaces exist: the binary stops its clients, removes its namespaces
/// (and with them the veths and the programs on them) and ends as killed by that signal.
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn planner_isolation_cleans_up_on_sigterm() {
    if !enough_cpus() {
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_planner-isolation"))
        .args(["--runs", "1", "--seconds", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn planner-isolation");
    let pid = child.id();
    let _leftovers = Leftovers(pid);
    let names = isolation_namespaces(pid);
    let start = Instant::now();
    let mut child = Some(child);
    while !names.iter().all(|n| has_namespace(&netns_list(), n)) {
        if let Some(st) = child.as_mut().unwrap().try_wait().unwrap() {
            let out = child.take().unwrap().wait_with_output().unwrap();
            panic!(
                "planner-isolation ended ({st}) before making its namespaces: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no namespaces {names:?} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let out = wait_bounded(
        child.take().unwrap(),
        Duration::from_secs(30),
        "planner-isolation after SIGTERM",
    );
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGTERM),
        "{:?}: {stderr}",
        out.status
    );
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    let list = netns_list();
    for ns in &names {
        assert!(!has_namespace(&list, ns), "{ns} left behind: {list}");
    }
    // The veths lived in those namespaces; none of them may have landed in ours.
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links
            .lines()
            .any(|l| l.contains(" ic@") || l.contains(" is@")),
        "{links}"
    );
}

/// A short run (one run of 0.3 s per policy and model, 0.3 s timeline phases) ends normally
/// with its figures and leaves no namespace behind.
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn planner_isolation_short_run_ends_clean() {
    if !enough_cpus() {
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_planner-isolation"))
        .args(["--runs", "1", "--seconds", "0.3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn planner-isolation");
    let pid = child.id();
    let _leftovers = Leftovers(pid);
    let out = wait_bounded(child, Duration::from_secs(120), "planner-isolation");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("of 1 runs of 0.3 s"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON last line");
    assert_eq!(json["bench"], "planner-isolation");
    assert_eq!(
        json["isolation_timeline"]["isolation"]
            .as_array()
            .map(|a| a.len()),
        Some(4)
    );
    let list = netns_list();
    for ns in isolation_namespaces(pid) {
        assert!(!has_namespace(&list, &ns), "{ns} left behind: {list}");
    }
}

//! The `bessemer-planner` binary: show, plan (text and Graphviz) and its errors.

use std::process::Command;

fn planner(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bessemer-planner"))
        .args(args)
        .output()
        .expect("run bessemer-planner");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn flow_file(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("planner-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn show_prints_the_prg_with_its_c_nodes() {
    let (ok, out, _) = planner(&["show", "--nic", "82599", "--queues", "3"]);
    assert!(ok);
    assert!(
        out.contains("config<5tuple> C5tuple") && out.contains("config<fdir> Cfdir"),
        "{out}"
    );
    assert!(
        out.contains("CTxRateLimiter2") && out.contains("one global mask"),
        "{out}"
    );
    let (ok, dot, _) = planner(&["show", "--nic", "sfc9020", "--dot"]);
    assert!(ok && dot.starts_with("digraph \"sfcPRG\"") && dot.contains("fillcolor=turquoise"));
}

#[test]
fn plan_prints_configuration_and_pruned_pipelines() {
    let f = flow_file(
        "ok",
        "# two services\nudp 10.0.0.5:4000 10.0.0.1:53 hp\nudp 10.0.0.6:4001 10.0.0.1:53\ntcp 10.0.0.7:4002 10.0.0.2:80\n",
    );
    let fs = f.to_str().unwrap();
    let (ok, out, err) = planner(&[
        "plan",
        "--nic",
        "sfc9020",
        "--queues",
        "3",
        "--policy",
        "isolation",
        "--flows",
        fs,
        "--rss-off",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("verdict: Accept"), "{out}");
    assert!(
        out.contains("udp 10.0.0.5:4000 -> 10.0.0.1:53 hp => Q0"),
        "{out}"
    );
    // Queue 2 only ever sees the web flow: its pipeline keeps only that service.
    let q2 = &out[out.find("queue Q2").expect("Q2 section")..];
    assert!(
        q2.contains("dport=80 -> services") && !q2.contains("dport=53"),
        "{q2}"
    );
    assert!(out.contains("(default queue: never pruned)"));
    let (ok, dot, _) = planner(&["plan", "--generate", "8", "--dot", "--rss-off"]);
    assert!(
        ok && dot.starts_with("digraph") && dot.contains("subgraph cluster_q1"),
        "{dot}"
    );
    std::fs::remove_file(f).ok();
}

#[test]
fn bad_input_gets_a_clear_error() {
    let f = flow_file(
        "bad",
        "udp 10.0.0.5:4000 10.0.0.1:53\nudp 10.0.0.300:1 10.0.0.1:53\n",
    );
    let (ok, _, err) = planner(&["plan", "--flows", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("line 2: bad endpoint \"10.0.0.300:1\""),
        "{err}"
    );
    std::fs::remove_file(f).ok();
    let (ok, _, err) = planner(&["plan"]);
    assert!(
        !ok && err.contains("give --flows FILE or --generate N"),
        "{err}"
    );
    let (ok, _, err) = planner(&["show", "--nic", "ethtool"]);
    assert!(!ok && err.contains("--nic ethtool needs --iface"), "{err}");
    let (ok, _, err) = planner(&["show", "--queues", "0"]);
    assert!(!ok && err.contains("--queues 0"), "{err}");
}

#[test]
fn apply_refuses_what_it_cannot_emulate() {
    let (ok, _, err) = planner(&["apply", "--nic", "xdp", "--iface", "x", "--generate", "2"]);
    assert!(!ok && err.contains("--nic 82599 or --nic sfc9020"), "{err}");
    let (ok, _, err) = planner(&["apply", "--generate", "2"]);
    assert!(!ok && err.contains("apply needs --iface"), "{err}");
}

/// apply, apply again (an update in place), unapply, on a 4-queue veth in a namespace of
/// the test's own; and the errors for what is not there.
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn apply_and_unapply_on_a_veth() {
    struct Netns(String);
    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let ns = Netns(format!("plcli{}", std::process::id()));
    let ip = |args: &[&str]| assert!(Command::new("ip").args(args).status().unwrap().success());
    ip(&["netns", "add", &ns.0]);
    ip(&[
        "-n",
        &ns.0,
        "link",
        "add",
        "ca",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "cb",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
    ]);
    for dev in ["ca", "cb"] {
        ip(&[
            "netns", "exec", &ns.0, "ethtool", "-L", dev, "rx", "4", "tx", "4",
        ]);
    }
    let base = ["--iface", "ca", "--netns", &ns.0, "--generate", "200"];
    let (ok, out, err) = planner(&[&["apply", "--nic", "82599"][..], &base].concat());
    assert!(ok, "{err}");
    assert!(
        out.contains("attached at TCX egress") && out.contains("128 ordered filter(s)"),
        "{out}"
    );
    let (ok, out, err) = planner(&[&["apply", "--nic", "sfc9020"][..], &base].concat());
    assert!(ok && out.contains("updated"), "{out}{err}");
    let (ok, _, err) = planner(&[&["apply", "--queues", "8"][..], &base].concat());
    assert!(!ok && err.contains("the plan needs 8"), "{err}");
    let (ok, out, _) = planner(&["unapply", "--iface", "ca", "--netns", &ns.0]);
    assert!(ok && out.contains("detached"), "{out}");
    let (ok, _, err) = planner(&["unapply", "--iface", "ca", "--netns", &ns.0]);
    assert!(!ok && err.contains("nothing to unapply"), "{err}");
    let (ok, _, err) = planner(&[
        "apply",
        "--iface",
        "nosuch",
        "--netns",
        &ns.0,
        "--generate",
        "2",
    ]);
    assert!(!ok && err.contains("no interface named 'nosuch'"), "{err}");
}

#[test]
fn impossible_bandwidth_and_out_of_range_numbers_are_refused() {
    let refused = |args: &[&str], want: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bessemer-planner"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for w in want {
            assert!(err.contains(w), "{args:?}: {err}");
        }
    };
    refused(
        &[
            "plan",
            "--nic",
            "82599",
            "--policy",
            "bandwidth",
            "--generate",
            "4",
            "--bw",
            "5000",
        ],
        &["flows 1..4 ask 20000 Mb/s", "the 82599's 10000 Mb/s link"],
    );
    let f = flow_file(
        "bw",
        "udp 10.0.0.5:4000 10.0.0.1:53 bw=100\n# a comment\ntcp 10.0.0.7:4002 10.0.0.2:80 bw=15000\n",
    );
    refused(
        &["plan", "--nic", "sfc9020", "--flows", f.to_str().unwrap()],
        &["flow 2 (tcp 10.0.0.7:4002 -> 10.0.0.2:80) asks 15000 Mb/s"],
    );
    std::fs::remove_file(f).ok();
    refused(
        &[
            "plan",
            "--policy",
            "isolation",
            "--hp-queues",
            "4",
            "--generate",
            "4",
        ],
        &["isolation(k=4)", "1 to 3"],
    );
    refused(
        &[
            "plan",
            "--policy",
            "bandwidth",
            "--hp-penalty",
            "-1",
            "--generate",
            "4",
        ],
        &["hp_penalty -1"],
    );
    refused(
        &["show", "--nic", "82599", "--queues", "200"],
        &["--queues 200", "128"],
    );
    // Feasible: the same four flows at 2500 Mb/s each are planned, each queue's limit its
    // flows' demand.
    let (ok, out, err) = planner(&[
        "plan",
        "--nic",
        "82599",
        "--policy",
        "bandwidth",
        "--generate",
        "4",
        "--bw",
        "2500",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("verdict: Accept(0.0)"), "{out}");
}

/// NIC nodes a plan's Graphviz text declares (lines `nX [label=...]` and summaries; the
/// queue pipelines' nodes, `qX_...`, are left out: pruning decides those).
fn dot_nodes(dot: &str) -> usize {
    dot.lines()
        .map(str::trim)
        .filter(|l| l.contains("[label=") && !l.contains("->"))
        .filter(|l| l.starts_with('n') || l.starts_with("more_"))
        .count()
}

#[test]
fn plan_dot_stays_readable_for_many_flows_and_queues() {
    let (ok, eight, err) = planner(&["plan", "--generate", "8", "--dot", "--rss-off"]);
    assert!(ok, "{err}");
    // Grouped: the NIC with its receive and transmit sides apart, the pipelines beside it,
    // each receive queue joined to its pipeline.
    for part in [
        "rankdir=LR",
        "subgraph cluster_nic",
        "subgraph cluster_rx",
        "subgraph cluster_tx",
        "lhead=cluster_q1",
        "... 4 more 5T filters",
        "rank=same",
    ] {
        assert!(eight.contains(part), "no {part} in\n{eight}");
    }
    // A size cap: 200 flows fill the 128 5-tuple filters and spill into flow director
    // filters, one more group of at most 5 nodes; 400 flows draw no more NIC nodes than 200.
    let (ok, many, err) = planner(&["plan", "--generate", "200", "--dot", "--rss-off"]);
    assert!(ok, "{err}");
    assert!(many.contains("... 124 more 5T filters"), "{many}");
    assert!(many.contains("more FDir filters"), "{many}");
    assert!(dot_nodes(&many) <= dot_nodes(&eight) + 5);
    let (ok, more, err) = planner(&["plan", "--generate", "400", "--dot", "--rss-off"]);
    assert!(ok, "{err}");
    assert_eq!(dot_nodes(&more), dot_nodes(&many));
    // More queues than are drawn: the rest in one summary node.
    let (ok, wide, err) = planner(&["plan", "--generate", "40", "--queues", "12", "--dot"]);
    assert!(ok, "{err}");
    assert!(wide.contains("... 4 more queue pipelines"), "{wide}");
    assert_eq!(wide.matches("subgraph cluster_q").count(), 8);
    // Laid out by Graphviz (when installed): the 8-flow plan fits in about 2600 x 1300 px
    // (it was 8463 x 1017 before).
    let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tplain")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("dot is not installed: layout size not checked");
        return;
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(eight.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let f: Vec<f64> = first
        .split_whitespace()
        .skip(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(f.len() == 2, "{first}");
    let (w, h) = (f[0] * 72.0, f[1] * 72.0);
    assert!(w < 3000.0 && h < 1500.0, "{w} x {h} px");
}

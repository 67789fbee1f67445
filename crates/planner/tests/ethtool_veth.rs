//! The generic NIC model read from a real interface: a 4-queue veth made in a namespace of
//! the test's own.

use bessemer_planner::nic::{configured_prg, NicModel};
use std::process::Command;

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?}");
}

/// A veth pair pa/pb with 4 queues each way, in namespace `ns`.
fn four_queue_veth(ns: &str) {
    ip(&[
        "-n",
        ns,
        "link",
        "add",
        "pa",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "pb",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
    ]);
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn reads_channels_and_features_of_a_veth() {
    let ns = Netns(format!("plnr{}", std::process::id()));
    ip(&["netns", "add", &ns.0]);
    four_queue_veth(&ns.0);
    // veth activates one queue pair by default; ask for four (kernel >= 5.15).
    let st = Command::new("ip")
        .args([
            "netns", "exec", &ns.0, "ethtool", "-L", "pb", "rx", "4", "tx", "4",
        ])
        .status()
        .expect("run ethtool");
    assert!(st.success(), "ethtool -L");
    let nic = bessemer_planner::ethtool::read_interface("pb", Some(&ns.0)).unwrap();
    assert_eq!(nic.queues, 4);
    assert!(!nic.ntuple, "veth has no ntuple filters");
    assert_eq!(nic.rss_size, 0, "veth reports no indirection table");
    let g = configured_prg(&nic, &nic.initial_config()).unwrap();
    let text = g.to_text();
    assert!(
        text.contains("RxQueue3") && !text.contains("Cntuple"),
        "{text}"
    );
    // With no filters and no RSS, the oracle has nothing to offer.
    let flow = bessemer_planner::nic::FlowSpec {
        header: bessemer_planner::pred::Header::ipv4(17, 1, 2, 3, 4),
        hp: false,
        bw_mbps: 0,
    };
    assert!(nic.oracle(&nic.initial_config(), &flow).is_empty());
    let missing = bessemer_planner::ethtool::read_interface("nosuchif", Some(&ns.0)).unwrap_err();
    assert!(
        missing.to_string().contains("ethtool -l nosuchif"),
        "{missing}"
    );
}

#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
fn apply_sets_channels_on_a_veth_and_finds_no_tx_rates() {
    let ns = Netns(format!("plna{}", std::process::id()));
    ip(&["netns", "add", &ns.0]);
    four_queue_veth(&ns.0);
    let planner = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bessemer-planner"))
            .args(args)
            .output()
            .expect("run bessemer-planner");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let before = bessemer_planner::ethtool::read_interface("pb", Some(&ns.0)).unwrap();
    assert!(!before.tx_maxrate, "veth has no per-queue TX rate");
    let (ok, out) = planner(&[
        "apply",
        "--nic",
        "ethtool",
        "--iface",
        "pb",
        "--netns",
        &ns.0,
        "--channels",
        "3",
        "--generate",
        "10",
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("pb: 3 channels") && out.contains("with 3 queues"),
        "{out}"
    );
    let after = bessemer_planner::ethtool::read_interface("pb", Some(&ns.0)).unwrap();
    assert_eq!(after.queues, 3);
    let (ok, out) = planner(&[
        "apply",
        "--nic",
        "ethtool",
        "--iface",
        "pb",
        "--netns",
        &ns.0,
        "--channels",
        "9",
        "--generate",
        "10",
    ]);
    assert!(!ok && out.contains("ethtool -L pb 9 channels"), "{out}");
    let (ok, out) = planner(&[
        "unapply", "--nic", "ethtool", "--iface", "pb", "--netns", &ns.0,
    ]);
    assert!(ok && out.contains("nothing to undo"), "{out}");
}

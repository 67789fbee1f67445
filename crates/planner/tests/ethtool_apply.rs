//! `bessemer-planner apply --nic ethtool` against a stand-in `ethtool` that keeps a NIC's
//! ntuple table and RSS setting in files (no NIC with ntuple filters here: veth has none).
//! It refuses, as drivers do, to insert at a location in use or delete an empty one, fails
//! any command holding the text in `$FAKE_FAIL`, and after a command holding the text in
//! `$FAKE_SIGNAL` sends SIGINT to its parent (the planner), as a user's Ctrl-C would.

use std::path::{Path, PathBuf};
use std::process::Command;

const FAKE_ETHTOOL: &str = r#"#!/bin/sh
# state: $FAKE_DIR/rules (one location per line), $FAKE_DIR/rss
echo "$*" >> "$FAKE_DIR/log"
case "$*" in *"$FAKE_FAIL"*) if [ -n "$FAKE_FAIL" ]; then echo "fake: refused" >&2; exit 1; fi;; esac
touch "$FAKE_DIR/rules"
case "$1" in
-l) printf 'Channel parameters for %s:\nPre-set maximums:\nCombined:\t8\nCurrent hardware settings:\nRX:\t\tn/a\nTX:\t\tn/a\nCombined:\t4\n' "$2" ;;
-k) printf 'Features for %s:\nntuple-filters: on\n' "$2" ;;
-x) printf 'RX flow hash indirection table for %s with 4 RX ring(s):\n' "$2"
    i=0; while [ $i -lt 128 ]; do printf '%5d:      0     1     2     3     0     1     2     3\n' $i; i=$((i+8)); done ;;
-X) shift 2; echo "$*" > "$FAKE_DIR/rss" ;;
-n) echo "4 RX rings available"; echo "Total $(wc -l < "$FAKE_DIR/rules") rules"
    while read -r l; do printf '\nFilter: %s\n\tRule Type: UDP over IPv4\n' "$l"; done < "$FAKE_DIR/rules" ;;
-N) if [ "$3" = delete ]; then
      grep -qx "$4" "$FAKE_DIR/rules" || { echo "rmgr: Cannot delete RX class rule: No such file or directory" >&2; exit 1; }
      grep -vx "$4" "$FAKE_DIR/rules" > "$FAKE_DIR/r2"; mv "$FAKE_DIR/r2" "$FAKE_DIR/rules"
    else
      for loc; do :; done
      grep -qx "$loc" "$FAKE_DIR/rules" && { echo "rmgr: Cannot insert RX class rule: File exists" >&2; exit 1; }
      echo "$loc" >> "$FAKE_DIR/rules"
    fi ;;
*) echo "fake ethtool: unexpected $*" >&2; exit 1 ;;
esac
case "$*" in *"$FAKE_SIGNAL"*) if [ -n "$FAKE_SIGNAL" ]; then kill -INT $PPID; fi;; esac
"#;

struct Fake {
    dir: PathBuf,
}

impl Fake {
    fn new(name: &str) -> Fake {
        let dir =
            std::env::temp_dir().join(format!("planner-ethtool-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let exe = dir.join("bin/ethtool");
        std::fs::write(&exe, FAKE_ETHTOOL).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("rules"), "").unwrap();
        Fake { dir }
    }

    fn planner(&self, args: &[&str], fail: &str) -> (bool, String, String) {
        let out = self.run(args, fail, "");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn run(&self, args: &[&str], fail: &str, signal: &str) -> std::process::Output {
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(env!("CARGO_BIN_EXE_bessemer-planner"))
            .args(args)
            .env("PATH", path)
            .env("FAKE_DIR", &self.dir)
            .env("FAKE_FAIL", fail)
            .env("FAKE_SIGNAL", signal)
            .output()
            .expect("run bessemer-planner")
    }

    fn rules(&self) -> Vec<u32> {
        let mut v: Vec<u32> = read(&self.dir.join("rules"))
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        v.sort_unstable();
        v
    }

    fn log(&self) -> String {
        read(&self.dir.join("log"))
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

const APPLY: &[&str] = &[
    "apply",
    "--nic",
    "ethtool",
    "--iface",
    "fake0",
    "--generate",
    "20",
    "--rss-off",
];

#[test]
fn apply_installs_rules_replaces_an_earlier_table_and_unapply_clears_it() {
    let fake = Fake::new("apply");
    // A rule of an earlier configuration, at a location the plan will not use.
    std::fs::write(fake.dir.join("rules"), "100\n").unwrap();
    let (ok, out, err) = fake.planner(APPLY, "");
    assert!(ok, "{out}{err}");
    let rules = fake.rules();
    assert!(
        rules.len() >= 3,
        "RSS off: balancing 20 flows over 4 queues takes rules: {rules:?}"
    );
    let n = rules.len() as u32;
    assert_eq!(
        rules,
        (0..n).collect::<Vec<_>>(),
        "locations 0.. in order, 100 removed"
    );
    assert!(
        out.contains("earlier ntuple rules removed at locations [100]"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{n} ntuple rule(s)")) && out.contains("flow-type udp4"),
        "{out}"
    );
    let log = fake.log();
    assert!(log.contains("-N fake0 delete 100"), "{log}");
    // Applying again replaces rules in place: each location deleted, then inserted.
    let (ok, out, err) = fake.planner(&[APPLY, &["--seed", "7"]].concat(), "");
    assert!(ok, "{out}{err}");
    let log = fake.log();
    let del0 = log.find("-N fake0 delete 0").expect("loc 0 replaced");
    assert!(
        log[del0..].contains("action") && log[del0..].contains("loc 0"),
        "{log}"
    );
    assert!(!fake.rules().is_empty());
    // unapply deletes every rule and gives the RSS table back to the driver.
    let (ok, out, err) = fake.planner(&["unapply", "--nic", "ethtool", "--iface", "fake0"], "");
    assert!(ok, "{out}{err}");
    assert!(fake.rules().is_empty(), "{:?}", fake.rules());
    assert_eq!(read(&fake.dir.join("rss")).trim(), "default");
    assert!(out.contains("ntuple rule 0 deleted"), "{out}");
}

#[test]
fn a_failed_step_is_named_and_what_ran_is_undone() {
    let fake = Fake::new("fail");
    std::fs::write(fake.dir.join("rules"), "100\n").unwrap();
    let (ok, out, err) = fake.planner(APPLY, "loc 2");
    assert!(!ok, "{out}");
    assert!(
        err.contains("loc 2") && err.contains("fake: refused") && err.contains("undone"),
        "{err}"
    );
    // The rules inserted before the failure are gone; the earlier rule the plan did not
    // replace is still there.
    assert_eq!(fake.rules(), vec![100], "{}", fake.log());
    assert!(fake.log().contains("-N fake0 delete 1"), "{}", fake.log());
}

/// Ctrl-C in the middle of an apply: the planner stops before the next step, undoes what
/// it ran (as for a failed step) and ends as killed by SIGINT.
#[test]
fn an_interrupted_apply_undoes_what_it_ran() {
    let fake = Fake::new("sigint");
    std::fs::write(fake.dir.join("rules"), "100\n").unwrap();
    let out = fake.run(APPLY, "", "loc 1");
    let err = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGINT),
        "{:?}: {err}",
        out.status
    );
    assert!(
        err.contains("interrupted by SIGINT") && err.contains("undone"),
        "{err}"
    );
    let log = fake.log();
    assert!(!log.contains("loc 2"), "no step after the signal: {log}");
    assert!(
        log.contains("-N fake0 delete 1") && log.contains("-N fake0 delete 0"),
        "{log}"
    );
    // The RSS table is back to the even spread it had; the earlier rule stays.
    assert_eq!(read(&fake.dir.join("rss")).trim(), "equal 4", "{log}");
    assert_eq!(fake.rules(), vec![100], "{log}");
}

#[test]
fn bad_arguments_are_named() {
    let fake = Fake::new("args");
    let (ok, _, err) = fake.planner(
        &[
            "apply",
            "--nic",
            "82599",
            "--iface",
            "x",
            "--channels",
            "2",
            "--generate",
            "3",
        ],
        "",
    );
    assert!(
        !ok && err.contains("--channels needs --nic ethtool"),
        "{err}"
    );
    let (ok, _, err) = fake.planner(&[APPLY, &["--channels", "0"]].concat(), "");
    assert!(!ok && err.contains("--channels 0: 1 to 256"), "{err}");
    let (ok, _, err) = fake.planner(
        &[
            "apply",
            "--nic",
            "ethtool",
            "--iface",
            "fake0;x",
            "--generate",
            "3",
        ],
        "",
    );
    assert!(!ok && err.contains("bad interface name"), "{err}");
}

//! A generic RSS + ntuple NIC model from what `ethtool` reports for an interface: channels
//! (`-l`), whether ntuple filters are on (`-k`) and the RSS indirection table (`-x`).

use crate::graph::ModelError;
use crate::nic::{EthtoolNic, NicConfig};
use std::process::Command;

/// ntuple rule slots assumed when the driver does not say (ethtool reports rules in use,
/// not capacity).
pub const ASSUMED_NTUPLE_RULES: usize = 128;

fn field(line: &str, name: &str) -> Option<usize> {
    let rest = line
        .trim()
        .strip_prefix(name)?
        .trim_start()
        .strip_prefix(':')?;
    rest.trim().parse().ok()
}

/// RX queues from `ethtool -l` output: the current RX and combined channels. Drivers that
/// report both (veth reports combined = min(rx, tx)) count the larger one.
pub fn parse_channels(text: &str) -> Result<u16, ModelError> {
    let current = text
        .split("Current hardware settings:")
        .nth(1)
        .ok_or_else(|| ModelError::Input("ethtool -l output has no current settings".into()))?;
    let (mut rx, mut combined) = (0, 0);
    for line in current.lines() {
        if let Some(v) = field(line, "RX") {
            rx = v;
        }
        if let Some(v) = field(line, "Combined") {
            combined = v;
        }
    }
    let q = rx.max(combined).max(1);
    u16::try_from(q).map_err(|_| ModelError::Input(format!("{q} channels")))
}

/// Whether `ethtool -k` output says ntuple filters are on.
pub fn parse_ntuple(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        l.starts_with("ntuple-filters:")
            && l["ntuple-filters:".len()..].trim_start().starts_with("on")
    })
}

/// The indirection table from `ethtool -x` output (rows like `  8:  0 1 2 3 ...`).
pub fn parse_rss_table(text: &str) -> Vec<u16> {
    let mut table = Vec::new();
    let Some(body) = text.split("indirection table").nth(1) else {
        return table;
    };
    for line in body.lines().skip(1) {
        let Some((idx, rest)) = line.split_once(':') else {
            break;
        };
        if idx.trim().parse::<usize>().is_err() {
            break;
        }
        table.extend(
            rest.split_whitespace()
                .filter_map(|v| v.parse::<u16>().ok()),
        );
    }
    table
}

/// One change to the interface: an ethtool invocation (arguments after `ethtool`) or a
/// TX queue's rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ethtool ARGS`.
    Ethtool(Vec<String>),
    /// `ethtool ARGS` inserting the ntuple rule at location `loc`.
    Rule { loc: u32, args: Vec<String> },
    /// Write Mb/s (0: unlimited) to `queues/tx-Q/tx_maxrate`.
    TxMaxrate { queue: u16, mbps: u32 },
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Ethtool(a) | Step::Rule { args: a, .. } => {
                write!(f, "ethtool {}", a.join(" "))
            }
            Step::TxMaxrate { queue, mbps } => write!(f, "tx-{queue} tx_maxrate {mbps}"),
        }
    }
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The steps that put a configuration on the interface, in order: RSS table, ntuple rules
/// by location, TX rates. ethtool's `m` masks are inverted (set bits are ignored), unlike
/// ours.
pub fn steps(nic: &EthtoolNic, cfg: &NicConfig) -> Result<Vec<Step>, ModelError> {
    use crate::pred::{ip_str, Field, PROTO_TCP, PROTO_UDP};
    let iface = nic.iface.as_str();
    let mut out = Vec::new();
    if !cfg.rss.is_empty() {
        let mut weights = vec![0usize; nic.queues as usize];
        for q in &cfg.rss {
            weights[*q as usize] += 1;
        }
        let spread: Vec<u16> = (0..cfg.rss.len())
            .map(|i| (i % nic.queues as usize) as u16)
            .collect();
        let mut a = args(&["-X", iface]);
        if cfg.rss == spread {
            a.extend(["equal".into(), nic.queues.to_string()]);
        } else {
            // ethtool sets weights, not entry order: the share per queue is exact.
            a.push("weight".into());
            a.extend(weights.iter().map(|w| w.to_string()));
        }
        out.push(Step::Ethtool(a));
    } else if nic.rss_size > 0 {
        // The model's "RSS off": whatever no rule takes lands on queue 0.
        out.push(Step::Ethtool(args(&["-X", iface, "equal", "1"])));
    }
    for (loc, f) in cfg.filters.iter().enumerate() {
        let c = &f.matcher;
        let m = |fl: Field| c.m[fl.index()];
        let v = |fl: Field| c.v[fl.index()];
        let ports = m(Field::SrcPort) != 0 || m(Field::DstPort) != 0;
        let mut a = args(&["-N", iface, "flow-type"]);
        match (m(Field::IpProto), v(Field::IpProto)) {
            (0xff, PROTO_TCP) => a.push("tcp4".into()),
            (0xff, PROTO_UDP) => a.push("udp4".into()),
            (0xff, p) if !ports => a.extend(["ip4".into(), "l4proto".into(), p.to_string()]),
            (0, _) if !ports => a.push("ip4".into()),
            _ => {
                return Err(ModelError::Constraint(format!(
                    "rule {loc} ({f}): ethtool matches ports only with tcp4/udp4 and the protocol whole"
                )))
            }
        }
        for (fl, name) in [
            (Field::SrcIp, "src-ip"),
            (Field::DstIp, "dst-ip"),
            (Field::SrcPort, "src-port"),
            (Field::DstPort, "dst-port"),
        ] {
            if m(fl) == 0 {
                continue;
            }
            let ignore = !m(fl) & fl.full_mask();
            let (val, mask) = if matches!(fl, Field::SrcIp | Field::DstIp) {
                (ip_str(v(fl)), ip_str(ignore))
            } else {
                (v(fl).to_string(), format!("{ignore:#x}"))
            };
            a.extend([name.into(), val]);
            if ignore != 0 {
                a.extend(["m".into(), mask]);
            }
        }
        let action = match f.dest {
            crate::graph::Dest::Queue(q) => q.to_string(),
            crate::graph::Dest::Drop => "-1".into(),
            crate::graph::Dest::Kernel => {
                return Err(ModelError::Constraint(format!(
                    "rule {loc} ({f}): no such ethtool action"
                )))
            }
        };
        a.extend(["action".into(), action, "loc".into(), loc.to_string()]);
        out.push(Step::Rule {
            loc: loc as u32,
            args: a,
        });
    }
    for (q, l) in cfg.limits.iter().enumerate() {
        if let Some(mbps) = l {
            if !nic.tx_maxrate {
                return Err(ModelError::Constraint(format!(
                    "Q{q}: {mbps} Mb/s, but {iface} takes no tx_maxrate (use a software limiter)"
                )));
            }
            out.push(Step::TxMaxrate {
                queue: q as u16,
                mbps: *mbps,
            });
        }
    }
    Ok(out)
}

/// The commands that would put a configuration on the interface, as a user would type
/// them (printed, not run).
pub fn commands(nic: &EthtoolNic, cfg: &NicConfig) -> Result<Vec<String>, ModelError> {
    Ok(steps(nic, cfg)?
        .into_iter()
        .map(|s| match s {
            Step::Ethtool(_) | Step::Rule { .. } => s.to_string(),
            Step::TxMaxrate { queue, mbps } => format!(
                "echo {mbps} > /sys/class/net/{}/queues/tx-{queue}/tx_maxrate",
                nic.iface
            ),
        })
        .collect())
}

/// Locations of the ntuple rules installed, from `ethtool -n` output ("Filter: 5" lines).
pub fn parse_rule_locations(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Filter:")?.trim().parse().ok())
        .collect()
}

/// Runs a program, inside a network namespace when given one.
fn run_in(netns: Option<&str>, program: &str, args: &[String]) -> Result<String, String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    };
    let out = cmd.args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{program} not found (apt-get install -y ethtool iproute2)")
        } else {
            format!("cannot run {program}: {e}")
        }
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn run_ethtool(netns: Option<&str>, a: &[&str]) -> Result<String, String> {
    run_in(netns, "ethtool", &args(a))
}

fn tx_maxrate_path(iface: &str, queue: u16) -> String {
    format!("/sys/class/net/{iface}/queues/tx-{queue}/tx_maxrate")
}

/// A TX queue's rate in Mb/s (0: unlimited); `None` when the file is not there.
fn read_tx_maxrate(iface: &str, netns: Option<&str>, queue: u16) -> Option<u32> {
    run_in(netns, "cat", &[tx_maxrate_path(iface, queue)])
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn write_tx_maxrate(iface: &str, netns: Option<&str>, queue: u16, mbps: u32) -> Result<(), String> {
    // `sh -c` so that the redirection happens inside the namespace, where its /sys is.
    let script = format!("echo {mbps} > {}", tx_maxrate_path(iface, queue));
    run_in(netns, "sh", &["-c".into(), script])
        .map(|_| ())
        .map_err(|e| {
            if e.contains("not supported") {
                format!("{iface} takes no tx_maxrate (the driver has no per-queue TX rate)")
            } else {
                e
            }
        })
}

/// The link's speed in Mb/s from sysfs; `None` when the driver reports none (the file
/// is unreadable or says -1, as for a link that is down or a device without a speed).
fn read_speed(iface: &str, netns: Option<&str>) -> Option<u32> {
    let text = run_in(netns, "cat", &[format!("/sys/class/net/{iface}/speed")]).ok()?;
    text.trim().parse::<u32>().ok().filter(|s| *s > 0)
}

/// Whether the driver takes per-queue TX rates: queue 0's rate written back unchanged
/// (the kernel refuses the write before anything else when the driver has no such hook).
fn probe_tx_maxrate(iface: &str, netns: Option<&str>) -> bool {
    match read_tx_maxrate(iface, netns, 0) {
        Some(cur) => write_tx_maxrate(iface, netns, 0, cur).is_ok(),
        None => false,
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 16
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
}

/// Reads an interface's capabilities (optionally inside a network namespace).
pub fn read_interface(iface: &str, netns: Option<&str>) -> Result<EthtoolNic, ModelError> {
    if !valid_name(iface) || !netns.is_none_or(valid_name) {
        return Err(ModelError::Input(format!("bad interface name {iface:?}")));
    }
    let channels = run_ethtool(netns, &["-l", iface])
        .map_err(|e| ModelError::Input(format!("ethtool -l {iface}: {e}")))?;
    let queues = parse_channels(&channels)?;
    let ntuple = run_ethtool(netns, &["-k", iface])
        .map(|t| parse_ntuple(&t))
        .unwrap_or(false);
    // No indirection table ("Operation not supported") means no RSS to model.
    let rss = run_ethtool(netns, &["-x", iface])
        .map(|t| parse_rss_table(&t))
        .unwrap_or_default();
    Ok(EthtoolNic {
        iface: iface.into(),
        queues,
        rss_size: rss.len(),
        ntuple,
        ntuple_rules: if ntuple { ASSUMED_NTUPLE_RULES } else { 0 },
        tx_maxrate: probe_tx_maxrate(iface, netns),
        link_mbps: read_speed(iface, netns),
    })
}

/// Sets the number of channels (queue pairs): `combined` first, then separate RX and TX
/// (veth and some drivers have no combined channels).
pub fn set_channels(iface: &str, netns: Option<&str>, n: u16) -> Result<(), ModelError> {
    if !valid_name(iface) || !netns.is_none_or(valid_name) {
        return Err(ModelError::Input(format!("bad interface name {iface:?}")));
    }
    let n = n.to_string();
    run_ethtool(netns, &["-L", iface, "combined", &n])
        .or_else(|_| run_ethtool(netns, &["-L", iface, "rx", &n, "tx", &n]))
        .map(|_| ())
        .map_err(|e| ModelError::Input(format!("ethtool -L {iface} {n} channels: {e}")))
}

/// What [`apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Steps run, in order.
    pub done: Vec<Step>,
    /// ntuple rules of an earlier configuration removed (locations).
    pub removed: Vec<u32>,
}

/// What the interface had before, for undoing a failed apply.
struct Before {
    rss: Vec<u16>,
    rules: Vec<u32>,
    rates: Vec<(u16, u32)>,
}

/// Puts a configuration on a real interface. The planner owns the interface's ntuple table
/// (rules at locations it does not use are removed, as the thesis's Dragonet owns the NIC).
/// A rule being replaced is deleted just before its new one is inserted, so its flow
/// meanwhile follows RSS: steered elsewhere for a moment, not dropped. On a failure the
/// steps already run are undone as far as ethtool allows (rules deleted, the RSS table back
/// to an equal spread or the driver's default, rates restored) and the error names the
/// step that failed and what could not be undone. A signal recorded by
/// [`crate::interrupt`] (the CLI's SIGINT or SIGTERM) counts as a failure before the next step.
pub fn apply(
    nic: &EthtoolNic,
    netns: Option<&str>,
    cfg: &NicConfig,
) -> Result<Applied, ModelError> {
    let iface = nic.iface.as_str();
    let plan = steps(nic, cfg)?;
    let rules_out = run_ethtool(netns, &["-n", iface]).unwrap_or_default();
    let before = Before {
        rss: run_ethtool(netns, &["-x", iface])
            .map(|t| parse_rss_table(&t))
            .unwrap_or_default(),
        rules: parse_rule_locations(&rules_out),
        rates: (0..nic.queues)
            .filter_map(|q| Some((q, read_tx_maxrate(iface, netns, q)?)))
            .collect(),
    };
    let mut applied = Applied::default();
    let used: Vec<u32> = (0..cfg.filters.len() as u32).collect();
    let mut result = Ok(());
    for step in &plan {
        // A signal (the CLI's Ctrl-C) stops here, between steps, and what ran is undone.
        if let Err(e) = crate::interrupt::check() {
            result = Err(format!("{e} before {step}"));
            break;
        }
        if let Step::Rule { loc, .. } = step {
            let loc = *loc;
            if before.rules.contains(&loc) && !applied.removed.contains(&loc) {
                if let Err(e) = run_ethtool(netns, &["-N", iface, "delete", &loc.to_string()]) {
                    result = Err(format!("ethtool -N {iface} delete {loc}: {e}"));
                    break;
                }
                applied.removed.push(loc);
            }
        }
        let r = match step {
            Step::Ethtool(a) | Step::Rule { args: a, .. } => {
                run_in(netns, "ethtool", a).map(|_| ())
            }
            Step::TxMaxrate { queue, mbps } => write_tx_maxrate(iface, netns, *queue, *mbps),
        };
        if let Err(e) = r {
            result = Err(format!("{step}: {e}"));
            break;
        }
        applied.done.push(step.clone());
    }
    if result.is_ok() {
        result = crate::interrupt::check();
    }
    if result.is_ok() {
        for loc in before.rules.iter().filter(|l| !used.contains(l)) {
            if let Err(e) = run_ethtool(netns, &["-N", iface, "delete", &loc.to_string()]) {
                result = Err(format!("ethtool -N {iface} delete {loc}: {e}"));
                break;
            }
            applied.removed.push(*loc);
        }
    }
    match result {
        Ok(()) => Ok(applied),
        Err(e) => {
            let left = undo(nic, netns, &before, &applied);
            Err(ModelError::Input(format!(
                "{iface}: {e}; undone{}",
                if left.is_empty() {
                    String::new()
                } else {
                    format!(" except: {}", left.join("; "))
                }
            )))
        }
    }
}

/// Undoes what a failed [`apply`] ran; returns what could not be undone.
fn undo(nic: &EthtoolNic, netns: Option<&str>, before: &Before, applied: &Applied) -> Vec<String> {
    let iface = nic.iface.as_str();
    let mut left = Vec::new();
    for step in applied.done.iter().rev() {
        let r = match step {
            Step::Rule { loc, .. } => {
                run_ethtool(netns, &["-N", iface, "delete", &loc.to_string()])
            }
            Step::Ethtool(_) => {
                let n = before.rss.iter().max().map_or(0, |m| *m as usize + 1);
                let spread = (0..before.rss.len()).all(|i| before.rss[i] as usize == i % n.max(1));
                if spread && n > 0 {
                    run_ethtool(netns, &["-X", iface, "equal", &n.to_string()])
                } else {
                    run_ethtool(netns, &["-X", iface, "default"])
                }
            }
            Step::TxMaxrate { queue, .. } => {
                let old = before
                    .rates
                    .iter()
                    .find(|(q, _)| q == queue)
                    .map_or(0, |(_, r)| *r);
                write_tx_maxrate(iface, netns, *queue, old).map(|_| String::new())
            }
        };
        if let Err(e) = r {
            left.push(format!("undo of {step}: {e}"));
        }
    }
    if !applied.removed.is_empty() {
        left.push(format!(
            "earlier rules at locations {:?} were removed",
            applied.removed
        ));
    }
    left
}

/// Removes what [`apply`] put on the interface: every ntuple rule, the driver's default
/// RSS table, TX queues unlimited. Returns what it did.
pub fn reset(iface: &str, netns: Option<&str>) -> Result<Vec<String>, ModelError> {
    let nic = read_interface(iface, netns)?;
    let mut done = Vec::new();
    let rules = parse_rule_locations(&run_ethtool(netns, &["-n", iface]).unwrap_or_default());
    for loc in rules {
        run_ethtool(netns, &["-N", iface, "delete", &loc.to_string()])
            .map_err(|e| ModelError::Input(format!("ethtool -N {iface} delete {loc}: {e}")))?;
        done.push(format!("ntuple rule {loc} deleted"));
    }
    if nic.rss_size > 0 {
        run_ethtool(netns, &["-X", iface, "default"])
            .map_err(|e| ModelError::Input(format!("ethtool -X {iface} default: {e}")))?;
        done.push("RSS table back to the driver's default".into());
    }
    if nic.tx_maxrate {
        for q in 0..nic.queues {
            if read_tx_maxrate(iface, netns, q).unwrap_or(0) != 0 {
                write_tx_maxrate(iface, netns, q, 0).map_err(ModelError::Input)?;
                done.push(format!("tx-{q} unlimited"));
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IXGBE_L: &str = "Channel parameters for eth0:\nPre-set maximums:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\t1\nCombined:\t63\nCurrent hardware settings:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\t1\nCombined:\t8\n";
    const IXGBE_X: &str = "RX flow hash indirection table for eth0 with 8 RX ring(s):\n    0:      0     1     2     3     4     5     6     7\n    8:      0     1     2     3     4     5     6     7\nRSS hash key:\n6d:5a:56:da\nRSS hash function:\n    toeplitz: on\n";

    #[test]
    fn parses_a_multiqueue_nic() {
        assert_eq!(parse_channels(IXGBE_L).unwrap(), 8);
        let t = parse_rss_table(IXGBE_X);
        assert_eq!(t.len(), 16);
        assert_eq!(&t[..3], &[0, 1, 2]);
        assert!(parse_ntuple("rx-vlan-filter: on\nntuple-filters: on\n"));
        assert!(!parse_ntuple("ntuple-filters: off [fixed]\n"));
        assert!(parse_channels("garbage").is_err());
        assert!(parse_rss_table("Cannot get RX ring count: Operation not supported").is_empty());
    }

    #[test]
    fn commands_for_a_configuration() {
        use crate::graph::Dest;
        use crate::nic::{Filter, FilterKind};
        use crate::pred::{Conj, Field, PROTO_UDP};
        let nic = EthtoolNic {
            iface: "eth0".into(),
            queues: 4,
            rss_size: 8,
            ntuple: true,
            ntuple_rules: 16,
            tx_maxrate: false,
            link_mbps: None,
        };
        let mut cfg = crate::nic::NicModel::initial_config(&nic);
        let dns = Conj::eq(Field::IpProto, PROTO_UDP)
            .with(Field::DstIp, 0x0a00_0001, 0xffff_ff00)
            .and_then(|c| c.with(Field::DstPort, 53, u32::MAX))
            .unwrap();
        cfg.filters.push(Filter {
            kind: FilterKind::Ntuple,
            matcher: dns,
            dest: Dest::Queue(2),
        });
        cfg.filters.push(Filter {
            kind: FilterKind::Ntuple,
            matcher: Conj::eq(Field::SrcIp, 0x0a00_0009),
            dest: Dest::Drop,
        });
        let cmds = commands(&nic, &cfg).unwrap();
        assert_eq!(cmds[0], "ethtool -X eth0 equal 4");
        assert_eq!(
            cmds[1],
            "ethtool -N eth0 flow-type udp4 dst-ip 10.0.0.0 m 0.0.0.255 dst-port 53 action 2 loc 0"
        );
        assert_eq!(
            cmds[2],
            "ethtool -N eth0 flow-type ip4 src-ip 10.0.0.9 action -1 loc 1"
        );
        cfg.filters.push(Filter {
            kind: FilterKind::Ntuple,
            matcher: Conj::eq(Field::DstPort, 80),
            dest: Dest::Queue(1),
        });
        assert!(commands(&nic, &cfg)
            .unwrap_err()
            .to_string()
            .contains("rule 2"));
    }

    #[test]
    fn rejects_bad_names() {
        let e = read_interface("eth0; rm -rf /", None).unwrap_err();
        assert!(e.to_string().contains("bad interface name"));
    }
}

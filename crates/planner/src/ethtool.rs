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

fn run_ethtool(netns: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "ethtool"]);
            c
        }
        None => Command::new("ethtool"),
    };
    let out = cmd
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ethtool: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Reads an interface's capabilities (optionally inside a network namespace).
pub fn read_interface(iface: &str, netns: Option<&str>) -> Result<EthtoolNic, ModelError> {
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() < 16
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    };
    if !valid(iface) || !netns.is_none_or(valid) {
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
    })
}

/// The ethtool commands that would put a configuration on the interface (printed, not
/// run). ethtool's `m` masks are inverted (set bits are ignored), unlike ours.
pub fn commands(nic: &EthtoolNic, cfg: &NicConfig) -> Result<Vec<String>, ModelError> {
    use crate::pred::{ip_str, Field, PROTO_TCP, PROTO_UDP};
    let iface = &nic.iface;
    let mut out = Vec::new();
    if !cfg.rss.is_empty() {
        let mut weights = vec![0usize; nic.queues as usize];
        for q in &cfg.rss {
            weights[*q as usize] += 1;
        }
        let spread: Vec<u16> = (0..cfg.rss.len())
            .map(|i| (i % nic.queues as usize) as u16)
            .collect();
        if cfg.rss == spread {
            out.push(format!("ethtool -X {iface} equal {}", nic.queues));
        } else {
            let w: Vec<String> = weights.iter().map(|w| w.to_string()).collect();
            // ethtool sets weights, not entry order: the share per queue is exact.
            out.push(format!("ethtool -X {iface} weight {}", w.join(" ")));
        }
    }
    for (loc, f) in cfg.filters.iter().enumerate() {
        let c = &f.matcher;
        let m = |fl: Field| c.m[fl.index()];
        let v = |fl: Field| c.v[fl.index()];
        let ports = m(Field::SrcPort) != 0 || m(Field::DstPort) != 0;
        let mut cmd = format!("ethtool -N {iface} flow-type ");
        match (m(Field::IpProto), v(Field::IpProto)) {
            (0xff, PROTO_TCP) => cmd.push_str("tcp4"),
            (0xff, PROTO_UDP) => cmd.push_str("udp4"),
            (0xff, p) if !ports => cmd.push_str(&format!("ip4 l4proto {p}")),
            (0, _) if !ports => cmd.push_str("ip4"),
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
            cmd.push_str(&format!(" {name} {val}"));
            if ignore != 0 {
                cmd.push_str(&format!(" m {mask}"));
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
        cmd.push_str(&format!(" action {action} loc {loc}"));
        out.push(cmd);
    }
    for (q, l) in cfg.limits.iter().enumerate() {
        if let Some(r) = l {
            out.push(format!(
                "# Q{q}: {r} Mb/s needs a software token bucket (tc); not emitted"
            ));
        }
    }
    Ok(out)
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

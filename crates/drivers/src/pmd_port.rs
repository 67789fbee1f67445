//! PMDPort: BESS's DPDK port driver, for the two DPDK virtual devices that put a Linux
//! interface behind a port, which is how BESS scripts and the 5G UPF use kernel interfaces:
//!
//! * `vdev="net_af_xdp<N>,iface=IF,start_queue=Q,queue_count=C"` is served by [`AFXDPPort`]
//!   (interface queue `Q + i` for port queue `i`);
//! * `vdev="net_af_packet<N>,iface=IF,qpairs=C"` (also spelt `eth_af_packet<N>`) by
//!   [`AFPacketPort`].
//!
//! As with DPDK, the port has the queues the request asks for (`num_inc_q`, `num_out_q`,
//! 1 when 0), and a device refuses more than it has (`queue_count`, `qpairs`; 1 by default).
//! Everything else a PMDPort can name (`port_id`, `pci`, other vdev kinds) needs DPDK and is
//! answered with ENOTSUP; a malformed vdev string with EINVAL naming what is wrong.
//!
//! [`AFXDPPort`]: crate::af_xdp_port
//! [`AFPacketPort`]: crate::af_packet_port

use bessemer_core::port::{NewPort, PortDriver, PortParams};
use bessemer_core::{Args, Error, Result, Value};

use crate::{af_packet_port, af_xdp_port};

const MSG: &str = "PMDPortArg";

/// What Bessemer serves, for error messages.
const SUPPORTED: &str = "Bessemer's PMDPort serves only vdev=\"net_af_xdp<N>,iface=IF[,start_queue=Q][,queue_count=C]\" \
     and vdev=\"net_af_packet<N>,iface=IF[,qpairs=C]\" (kernel interfaces through AF_XDP or AF_PACKET)";

/// The PMDPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "PMDPort",
    name_template: "pmd_port",
    help: "BESS's DPDK port; Bessemer serves its AF_XDP and AF_PACKET virtual devices (net_af_xdp, net_af_packet) with AFXDPPort and AFPacketPort",
    arg_type: MSG,
    arg_doc: &[
        "vdev: string — \"net_af_xdp<N>,iface=IF[,start_queue=Q][,queue_count=C][,force_copy=0|1]\" or \"net_af_packet<N>,iface=IF[,qpairs=C][,blocksz=..][,framesz=..][,framecnt=..][,qdisc_bypass=0|1]\"",
        "port_id: uint64, pci: string — DPDK devices: not available in Bessemer (ENOTSUP)",
        "num_inc_q/num_out_q (CreatePort) — queues (default 1), at most the device's queue_count/qpairs",
        "promiscuous_mode: bool — put the interface in promiscuous mode (AF_PACKET)",
        "loopback, socket_id, hwcksum: accepted and ignored (no effect on these devices)",
        "vlan_offload_rx_strip/filter/qinq, flow_profiles: need a DPDK NIC (ENOTSUP when set)",
    ],
    create,
};

/// A parsed vdev string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vdev {
    /// `net_af_xdp`: an AF_XDP socket per queue.
    AfXdp {
        /// The interface.
        iface: String,
        /// Its first queue.
        start_queue: u32,
        /// How many queues the device has.
        queue_count: u32,
        /// Copy mode forced.
        force_copy: bool,
    },
    /// `net_af_packet`: AF_PACKET sockets joined by a fanout group.
    AfPacket {
        /// The interface.
        iface: String,
        /// How many queue pairs the device has.
        qpairs: u32,
    },
}

fn bad(vdev: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{MSG}.vdev '{vdev}': {what}"))
}

fn number(vdev: &str, key: &str, v: &str, min: u64, max: u64) -> Result<u64> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            vdev,
            format!("{key}={v}: expected a whole number in {min}..={max}"),
        )),
    }
}

fn flag(vdev: &str, key: &str, v: &str) -> Result<bool> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(bad(vdev, format!("{key}={v}: expected 0 or 1"))),
    }
}

/// The device kind a vdev name starts with (DPDK names a vdev by its driver name plus any
/// suffix, e.g. `net_af_xdp0`).
fn kind_of(name: &str) -> Option<&'static str> {
    // Longest first: no kind is a prefix of another one listed after it.
    ["net_af_packet", "eth_af_packet", "net_af_xdp"]
        .into_iter()
        .find(|k| name.starts_with(k))
}

/// Parses a DPDK vdev string of a kind Bessemer serves.
pub fn parse_vdev(vdev: &str) -> Result<Vdev> {
    if vdev.trim().is_empty() {
        return Err(Error::invalid(format!("{MSG}.vdev is empty; {SUPPORTED}")));
    }
    let mut parts = vdev.split(',');
    let name = parts.next().unwrap_or_default();
    let Some(kind) = kind_of(name) else {
        return Err(Error::unsupported(format!(
            "{MSG}.vdev '{vdev}': DPDK virtual device '{name}' is not available: {SUPPORTED}"
        )));
    };
    let mut kv: Vec<(&str, &str)> = Vec::new();
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            return Err(bad(
                vdev,
                if p.is_empty() {
                    "an empty option (two commas in a row, or a trailing comma)".to_string()
                } else {
                    format!("option '{p}' is not key=value")
                },
            ));
        };
        if k.is_empty() || v.is_empty() {
            return Err(bad(vdev, format!("option '{p}' has an empty key or value")));
        }
        if kv.iter().any(|(k2, _)| *k2 == k) {
            return Err(bad(vdev, format!("option '{k}' is given twice")));
        }
        kv.push((k, v));
    }
    let iface = kv
        .iter()
        .find(|(k, _)| *k == "iface")
        .map(|(_, v)| v.to_string())
        .ok_or_else(|| bad(vdev, "iface=<interface> is required"))?;
    if iface.len() >= libc::IFNAMSIZ {
        return Err(bad(
            vdev,
            format!(
                "iface={iface}: interface names have at most {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    if kind == "net_af_xdp" {
        let (mut start_queue, mut queue_count, mut force_copy) = (0, 1, false);
        for (k, v) in kv {
            match k {
                "iface" => {}
                "start_queue" => start_queue = number(vdev, k, v, 0, u32::MAX as u64)? as u32,
                "queue_count" => queue_count = number(vdev, k, v, 1, 1024)? as u32,
                "force_copy" => force_copy = flag(vdev, k, v)?,
                // Performance knobs of DPDK's driver with no counterpart here.
                "shared_umem" => {
                    flag(vdev, k, v)?;
                }
                "busy_budget" => {
                    number(vdev, k, v, 0, u32::MAX as u64)?;
                }
                "xdp_prog" | "use_cni" | "use_pinned_map" | "uds_path" | "dp_path" => {
                    return Err(Error::unsupported(format!(
                        "{MSG}.vdev '{vdev}': option '{k}' (a custom XDP program or the AF_XDP device plugin) is not available: Bessemer's net_af_xdp loads its own XDP program"
                    )))
                }
                _ => {
                    return Err(bad(
                        vdev,
                        format!("unknown net_af_xdp option '{k}' (options: iface, start_queue, queue_count, force_copy, shared_umem, busy_budget)"),
                    ))
                }
            }
        }
        return Ok(Vdev::AfXdp {
            iface,
            start_queue,
            queue_count,
            force_copy,
        });
    }
    let mut qpairs = 1;
    for (k, v) in kv {
        match k {
            "iface" => {}
            "qpairs" => qpairs = number(vdev, k, v, 1, 1024)? as u32,
            // Ring geometry and the qdisc bypass of DPDK's driver: AFPacketPort sizes its own
            // rings and always sends through the qdisc layer.
            "blocksz" | "framesz" | "framecnt" => {
                number(vdev, k, v, 1, u32::MAX as u64)?;
            }
            "qdisc_bypass" => {
                flag(vdev, k, v)?;
            }
            "fanout_mode" => {
                if !["hash", "lb", "cpu", "rollover", "rnd", "qm"].contains(&v) {
                    return Err(bad(
                        vdev,
                        format!("fanout_mode={v}: expected hash, lb, cpu, rollover, rnd or qm"),
                    ));
                }
            }
            _ => {
                return Err(bad(
                    vdev,
                    format!("unknown net_af_packet option '{k}' (options: iface, qpairs, blocksz, framesz, framecnt, qdisc_bypass, fanout_mode)"),
                ))
            }
        }
    }
    Ok(Vdev::AfPacket { iface, qpairs })
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, MSG)?;
    let _loopback = a.bool("loopback")?;
    let port_id = a.uint("port_id", u64::MAX)?;
    let pci = a.str("pci")?;
    let vdev = a.str("vdev")?;
    let vlan: Vec<&str> = [
        "vlan_offload_rx_strip",
        "vlan_offload_rx_filter",
        "vlan_offload_rx_qinq",
    ]
    .into_iter()
    .filter_map(|k| match a.bool(k) {
        Ok(Some(true)) => Some(Ok(k)),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
    .collect::<Result<_>>()?;
    let _socket_id = a.int("socket_id", i32::MIN as i64, i32::MAX as i64)?;
    let promiscuous = a.bool("promiscuous_mode")?.unwrap_or(false);
    let _hwcksum = a.bool("hwcksum")?;
    let flow_profiles = a.list("flow_profiles")?.len();
    a.finish()?;
    let vdev = match (port_id, pci, vdev) {
        (_, _, Some(v)) => v,
        (Some(id), _, _) => {
            return Err(Error::unsupported(format!(
                "{MSG}.port_id={id}: DPDK ports are not available in Bessemer; {SUPPORTED}"
            )))
        }
        (_, Some(p), _) => {
            return Err(Error::unsupported(format!(
                "{MSG}.pci='{p}': DPDK (PCI) ports are not available in Bessemer; {SUPPORTED}"
            )))
        }
        _ => {
            return Err(Error::invalid(format!(
                "{MSG}: no port specified (port_id, pci or vdev); {SUPPORTED}"
            )))
        }
    };
    let dev = parse_vdev(vdev)?;
    if let Some(k) = vlan.first() {
        return Err(Error::unsupported(format!(
            "{MSG}.{k}: VLAN offloads need a DPDK NIC; the '{vdev}' device has none"
        )));
    }
    if flow_profiles > 0 {
        return Err(Error::unsupported(format!(
            "{MSG}.flow_profiles: flow steering rules need a DPDK NIC; the '{vdev}' device has none"
        )));
    }
    let nin = params.num_inc_q.max(1);
    let nout = params.num_out_q.max(1);
    let (limit, what) = match &dev {
        Vdev::AfXdp { queue_count, .. } => (*queue_count, "queue_count"),
        Vdev::AfPacket { qpairs, .. } => (*qpairs, "qpairs"),
    };
    for (q, n) in [("num_inc_q", nin), ("num_out_q", nout)] {
        if n > limit as usize {
            return Err(Error::invalid(format!(
                "{q} {n} is more than the device has: vdev '{vdev}' has {what}={limit}"
            )));
        }
    }
    let inner = PortParams {
        name: params.name.clone(),
        num_inc_q: nin,
        num_out_q: nout,
        size_inc_q: params.size_inc_q,
        size_out_q: params.size_out_q,
        pool: params.pool.clone(),
    };
    match dev {
        Vdev::AfXdp {
            iface,
            start_queue,
            force_copy,
            ..
        } => {
            if promiscuous {
                return Err(Error::unsupported(format!(
                    "{MSG}.promiscuous_mode: not available with net_af_xdp in Bessemer (set it on the interface, or use net_af_packet)"
                )));
            }
            let arg = Value::map()
                .with("ifname", iface)
                .with("qid", start_queue as u64)
                .with("copy", force_copy);
            (af_xdp_port::DRIVER.create)(&inner, &arg)
        }
        Vdev::AfPacket { iface, .. } => {
            let arg = Value::map()
                .with("ifname", iface)
                .with("promiscuous", promiscuous);
            (af_packet_port::DRIVER.create)(&inner, &arg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_upf_forms() {
        assert_eq!(
            parse_vdev("net_af_xdp0,iface=eth1,start_queue=0,queue_count=4").unwrap(),
            Vdev::AfXdp {
                iface: "eth1".into(),
                start_queue: 0,
                queue_count: 4,
                force_copy: false
            }
        );
        assert_eq!(
            parse_vdev("net_af_packet1,iface=veth0,qpairs=2").unwrap(),
            Vdev::AfPacket {
                iface: "veth0".into(),
                qpairs: 2
            }
        );
        assert_eq!(
            parse_vdev(
                "eth_af_packet,iface=x,blocksz=4096,framesz=2048,framecnt=512,qdisc_bypass=1"
            )
            .unwrap(),
            Vdev::AfPacket {
                iface: "x".into(),
                qpairs: 1
            }
        );
    }

    #[test]
    fn malformed_strings_name_the_problem() {
        for (v, want) in [
            ("net_af_xdp0", "iface=<interface> is required"),
            ("net_af_xdp0,iface", "'iface' is not key=value"),
            ("net_af_xdp0,iface=", "empty key or value"),
            ("net_af_xdp0,iface=a,,queue_count=1", "empty option"),
            ("net_af_xdp0,iface=a,queue_count=0", "queue_count=0"),
            ("net_af_xdp0,iface=a,queue_count=two", "queue_count=two"),
            ("net_af_xdp0,iface=a,iface=b", "'iface' is given twice"),
            (
                "net_af_xdp0,iface=a,qpairs=2",
                "unknown net_af_xdp option 'qpairs'",
            ),
            (
                "net_af_packet0,iface=a,queue_count=2",
                "unknown net_af_packet option",
            ),
            (
                "net_af_packet0,iface=a,qdisc_bypass=yes",
                "qdisc_bypass=yes",
            ),
            ("net_af_packet0,iface=abcdefghijklmnop", "at most 15 bytes"),
        ] {
            let e = parse_vdev(v).unwrap_err();
            assert_eq!(e.code, libc::EINVAL, "{v}: {}", e.msg);
            assert!(e.msg.contains(want), "{v}: {}", e.msg);
        }
        for v in [
            "net_pcap0,iface=a",
            "net_tap0,iface=x",
            "virtio_user0,path=/x",
        ] {
            let e = parse_vdev(v).unwrap_err();
            assert_eq!(e.code, libc::ENOTSUP, "{v}: {}", e.msg);
            assert!(e.msg.contains("net_af_xdp") && e.msg.contains("net_af_packet"));
        }
        let e = parse_vdev("net_af_xdp0,iface=a,xdp_prog=/p.o").unwrap_err();
        assert_eq!(e.code, libc::ENOTSUP, "{}", e.msg);
    }
}

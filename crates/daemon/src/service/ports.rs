//! Port RPCs: drivers, creating and destroying ports, their configuration, statistics and
//! link status.

use bessemer_core::mac::{format_mac, parse_mac};
use bessemer_core::{Error, Result};
use tonic::Request;

use super::{
    answer, check_len, check_room, empty, lookup_name, need_name, now, Control, RpcResult,
    MAX_PORTS,
};
use crate::convert::{self, truncate};
use crate::pb;

pub(super) fn list_drivers() -> RpcResult<pb::ListDriversResponse> {
    answer(
        "ListDrivers",
        Ok(pb::ListDriversResponse {
            error: None,
            driver_names: bessemer_drivers::drivers()
                .iter()
                .map(|d| d.name.to_string())
                .collect(),
        }),
    )
}

pub(super) fn get_driver_info(
    r: Request<pb::GetDriverInfoRequest>,
) -> RpcResult<pb::GetDriverInfoResponse> {
    let res = find_driver(&r.get_ref().driver_name).map(|d| pb::GetDriverInfoResponse {
        error: None,
        name: d.name.to_string(),
        help: d.describe(),
        commands: Vec::new(),
    });
    answer("GetDriverInfo", res)
}

pub(super) async fn reset_ports(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    let res = ctl
        .run(|e| {
            let busy: Vec<String> = e
                .ports()
                .list()
                .into_iter()
                .filter(|p| p.users() > 0)
                .map(|p| p.name().to_string())
                .collect();
            if !busy.is_empty() {
                return Err(Error::busy(format!(
                    "ports in use by modules: {} (destroy those modules first)",
                    busy.join(", ")
                )));
            }
            e.ports().reset();
            super::modules::resync(e);
            Ok(())
        })
        .await;
    empty("ResetPorts", res)
}

/// `ShowPortDetails`: each port's own one-line description (`Port::desc`).
pub(super) fn show_port_details(
    e: &bessemer_core::Engine,
    req: crate::bessemer::pb::ShowPortDetailsRequest,
) -> Result<crate::bessemer::pb::ShowPortDetailsResponse> {
    let ports = if req.ports.is_empty() {
        e.ports().list()
    } else {
        req.ports
            .iter()
            .map(|n| e.ports().get(n))
            .collect::<Result<Vec<_>>>()?
    };
    Ok(crate::bessemer::pb::ShowPortDetailsResponse {
        error: None,
        ports: ports
            .into_iter()
            .map(|p| crate::bessemer::pb::PortDetails {
                name: p.name().to_string(),
                driver: p.driver().name.to_string(),
                details: p.port().desc(),
            })
            .collect(),
    })
}

pub(super) async fn list_ports(ctl: &Control) -> RpcResult<pb::ListPortsResponse> {
    let res = ctl
        .run(|e| {
            Ok(pb::ListPortsResponse {
                error: None,
                ports: e
                    .ports()
                    .list()
                    .into_iter()
                    .map(|p| pb::list_ports_response::Port {
                        name: p.name().to_string(),
                        driver: p.driver().name.to_string(),
                        mac_addr: format_mac(&p.port().conf().mac_addr),
                        num_inc_q: p.num_inc_q() as u64,
                        num_out_q: p.num_out_q() as u64,
                        size_inc_q: 0,
                        size_out_q: 0,
                        driver_arg: None,
                    })
                    .collect(),
            })
        })
        .await;
    answer("ListPorts", res)
}

pub(super) async fn create_port(
    ctl: &Control,
    r: Request<pb::CreatePortRequest>,
) -> RpcResult<pb::CreatePortResponse> {
    let req = r.into_inner();
    let res = async {
        let d = find_driver(&req.driver)?;
        check_len(&req.name, "port name")?;
        let what = format!("port driver '{}'", d.name);
        let arg = convert::any_to_value(req.arg.as_ref(), Some(d.arg_type), &what)?;
        // Out-of-range values saturate; the port table refuses them, naming the field.
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let (ni, no) = (n(req.num_inc_q), n(req.num_out_q));
        let (si, so) = (n(req.size_inc_q), n(req.size_out_q));
        let name = req.name;
        ctl.run(move |e| {
            check_room("ports", e.ports().list().len(), 1, MAX_PORTS)?;
            let params = bessemer_core::port::PortParams {
                name,
                num_inc_q: ni,
                num_out_q: no,
                size_inc_q: si,
                size_out_q: so,
                pool: e.pool().clone(),
            };
            let h = e.ports().create(d, params, &arg)?;
            Ok(pb::CreatePortResponse {
                error: None,
                name: h.name().to_string(),
                mac_addr: format_mac(&h.port().conf().mac_addr),
            })
        })
        .await
    }
    .await;
    answer("CreatePort", res)
}

pub(super) async fn destroy_port(
    ctl: &Control,
    r: Request<pb::DestroyPortRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let name = r.into_inner().name;
    let res = ctl
        .run(move |e| {
            let n = need_name(&name, "port name")?;
            e.ports().destroy(&n)?;
            super::modules::resync(e);
            Ok(())
        })
        .await;
    empty("DestroyPort", res)
}

pub(super) async fn set_port_conf(
    ctl: &Control,
    r: Request<pb::SetPortConfRequest>,
) -> RpcResult<pb::CommandResponse> {
    let req = r.into_inner();
    let res = ctl
        .run(move |e| {
            let h = e.ports().get(&need_name(&req.name, "port name")?)?;
            let c = req.conf.unwrap_or_default();
            let cur = h.port().conf();
            let conf = bessemer_core::port::PortConf {
                mac_addr: if c.mac_addr.is_empty() {
                    cur.mac_addr
                } else {
                    parse_mac(&c.mac_addr).ok_or_else(|| {
                        Error::invalid(format!(
                            "'{}' is not a MAC address (aa:bb:cc:dd:ee:ff)",
                            truncate(&c.mac_addr, 64)
                        ))
                    })?
                },
                mtu: if c.mtu == 0 { cur.mtu } else { c.mtu },
                admin_up: c.admin_up,
            };
            h.port().set_conf(&conf)?;
            Ok(pb::CommandResponse::default())
        })
        .await;
    answer("SetPortConf", res)
}

pub(super) async fn get_port_conf(
    ctl: &Control,
    r: Request<pb::GetPortConfRequest>,
) -> RpcResult<pb::GetPortConfResponse> {
    let name = r.into_inner().name;
    let res = ctl
        .run(move |e| {
            let c = e
                .ports()
                .get(&need_name(&name, "port name")?)?
                .port()
                .conf();
            Ok(pb::GetPortConfResponse {
                error: None,
                conf: Some(pb::PortConf {
                    mac_addr: format_mac(&c.mac_addr),
                    mtu: c.mtu,
                    admin_up: c.admin_up,
                }),
            })
        })
        .await;
    answer("GetPortConf", res)
}

pub(super) async fn get_port_stats(
    ctl: &Control,
    r: Request<pb::GetPortStatsRequest>,
) -> RpcResult<pb::GetPortStatsResponse> {
    let name = r.into_inner().name;
    let res = ctl
        .run(move |e| {
            let (i, o) = e.ports().get(&lookup_name(&name, "port name")?)?.counts();
            let stat = |c: bessemer_core::port::DirCounts| pb::get_port_stats_response::Stat {
                packets: c.packets,
                dropped: c.dropped,
                bytes: c.bytes,
                ..Default::default()
            };
            Ok(pb::GetPortStatsResponse {
                error: None,
                inc: Some(stat(i)),
                out: Some(stat(o)),
                timestamp: now(),
            })
        })
        .await;
    answer("GetPortStats", res)
}

pub(super) async fn get_link_status(
    ctl: &Control,
    r: Request<pb::GetLinkStatusRequest>,
) -> RpcResult<pb::GetLinkStatusResponse> {
    let name = r.into_inner().name;
    let res = ctl
        .run(move |e| {
            let l = e
                .ports()
                .get(&lookup_name(&name, "port name")?)?
                .port()
                .link_status();
            Ok(pb::GetLinkStatusResponse {
                error: None,
                speed: l.speed_mbps,
                full_duplex: l.full_duplex,
                autoneg: l.autoneg,
                link_up: l.link_up,
            })
        })
        .await;
    answer("GetLinkStatus", res)
}

/// Port driver names BESS has (those Bessemer lacks are refused with ENOTSUP).
const BESS_DRIVERS: &[&str] = &["PCAPPort", "UnixSocketPort", "VPort", "ZeroCopyVPort"];

fn find_driver(name: &str) -> Result<&'static bessemer_core::port::PortDriver> {
    if name.is_empty() {
        return Err(Error::invalid("port driver name is empty"));
    }
    bessemer_drivers::find(name).ok_or_else(|| {
        let known: Vec<&str> = bessemer_drivers::drivers().iter().map(|d| d.name).collect();
        if BESS_DRIVERS.contains(&name) {
            Error::unsupported(format!(
                "port driver '{name}' is BESS's but not available in Bessemer (drivers: {})",
                known.join(", ")
            ))
        } else {
            Error::not_found(format!(
                "port driver '{}' does not exist (drivers: {})",
                truncate(name, 128),
                known.join(", ")
            ))
        }
    })
}

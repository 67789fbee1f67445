//! `control_sequence`: sequences of control RPCs (ports, modules, connections, commands,
//! gate hooks, workers, traffic classes, transactions) through the daemon's own service,
//! in process; and `http_endpoints`: raw HTTP/1 requests to the daemon's HTTP router
//! (`/metrics`, `/api/snapshot`, the view), parsed by hyper as `bessemerd` serves them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bessemer_core::engine::EngineConfig;
use bessemer_core::mem::PagePolicy;
use bessemer_core::Engine;
use bessemer_daemon::bessemer::pb as ext;
use bessemer_daemon::bessemer::pb::bessemer_control_server::BessemerControl;
use bessemer_daemon::observe::http::{router, Allowed, Endpoints};
use bessemer_daemon::pb;
use bessemer_daemon::pb::bess_control_server::BessControl;
use bessemer_daemon::service::Control;
use tonic::Request;

use crate::input::Input;

/// One engine and its control service per thread, with a runtime to call it from.
struct Daemon {
    rt: tokio::runtime::Runtime,
    control: Control,
    engine: Arc<Mutex<Engine>>,
}

fn daemon() -> Daemon {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let engine = Engine::new(EngineConfig {
        buffers: 1024,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .expect("an engine");
    let engine = Arc::new(Mutex::new(engine));
    let (kill, _) = tokio::sync::watch::channel(false);
    Daemon {
        rt,
        control: Control::new(engine.clone(), kill),
        engine,
    }
}

thread_local! {
    static CONTROL: Daemon = daemon();
    static HTTP: Daemon = http_daemon();
}

/// Panics if a response reports an internal error: a panic the service caught.
fn check(rpc: &str, e: &Option<pb::Error>) {
    if let Some(e) = e {
        assert!(
            !e.errmsg.starts_with("internal error"),
            "{rpc}: {} ({})",
            e.errmsg,
            e.code
        );
    }
}

fn any(ty: &str, value: Vec<u8>) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("type.googleapis.com/{ty}"),
        value,
    }
}

/// An argument for message type `ty` (a `bess.pb` name, or a full name with a dot): the
/// class's smallest valid value or, if the input says so, raw bytes from the input.
fn arg_any(
    i: &mut Input,
    ty: &str,
    sample: Option<bessemer_core::Value>,
) -> Option<prost_types::Any> {
    let full = if ty.contains('.') {
        ty.to_string()
    } else {
        format!("bess.pb.{ty}")
    };
    match i.u8() % 4 {
        0 => None,
        1 => {
            let n = i.u8() as usize;
            Some(any(&full, i.bytes(n).to_vec()))
        }
        _ => {
            let v = sample.unwrap_or_else(bessemer_core::Value::map);
            bessemer_daemon::convert::value_to_any(&full, &v).ok()
        }
    }
}

fn pick<'a>(i: &mut Input, names: &[&'a str]) -> &'a str {
    names[i.u8() as usize % names.len()]
}

const MODULES: &[&str] = &["m0", "m1", "m2", "m3", ""];
const PORTS: &[&str] = &["p0", "p1", ""];
const TCS: &[&str] = &["t0", "t1", "t2", ""];
const POLICIES: &[&str] = &[
    "priority",
    "weighted_fair",
    "round_robin",
    "rate_limit",
    "leaf",
    "bogus",
];
const RESOURCES: &[&str] = &["count", "cycle", "packet", "bit", ""];

/// A small capture file for PcapFilePort (made once per process).
fn pcap_file() -> &'static String {
    static F: OnceLock<String> = OnceLock::new();
    F.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("bessemer-fuzz-ctl-{}.pcap", std::process::id()));
        let mut b = bessemer_core::pcap::file_header().to_vec();
        for len in [60u32, 64, 1514] {
            b.extend([0u8; 8]);
            b.extend(len.to_le_bytes());
            b.extend(len.to_le_bytes());
            b.extend(vec![0x11; len as usize]);
        }
        std::fs::write(&p, b).expect("write the capture file");
        p.to_string_lossy().into_owned()
    })
}

/// A port argument for `driver`: drivers with effects outside the process only ever get an
/// interface that does not exist (or no argument), so that the target creates no device.
fn port_arg(i: &mut Input, driver: &str, name: &str) -> Option<prost_types::Any> {
    use bessemer_core::Value;
    let tid = format!("{:?}", std::thread::current().id());
    let tid: String = tid.chars().filter(|c| c.is_ascii_digit()).collect();
    let sock = format!("@bessemer-fuzz-ctl-{}-{tid}-{name}", std::process::id());
    let (ty, v) = match driver {
        "UnixSocketPort" => (
            "bess.pb.UnixSocketPortArg",
            Value::map()
                .with("path", sock)
                .with("min_rx_interval_ns", i.u8() as i64 - 1)
                .with("confirm_connect", i.u8() & 1 == 1),
        ),
        "SlicePort" => (
            "bessemer.pb.SlicePortArg",
            Value::map()
                .with("path", sock)
                .with("ring_size", [0u64, 64, 100, 128][i.u8() as usize % 4]),
        ),
        "PcapFilePort" => {
            let tx = std::env::temp_dir().join(format!(
                "bessemer-fuzz-ctl-{}-{tid}-{name}.out.pcap",
                std::process::id()
            ));
            let mut v = Value::map().with("tx_file", tx.to_string_lossy().as_ref());
            let f = i.u8();
            if f & 1 == 1 {
                v = v.with("rx_file", pcap_file().as_str());
            }
            (
                "bessemer.pb.PcapFilePortArg",
                v.with("repeat", f & 2 == 2).with("timing", f & 4 == 4),
            )
        }
        // Beyond DPDK's port ids: refused before DPDK starts (a fuzzer never probes devices).
        "PMDPort" => ("bess.pb.PMDPortArg", Value::map().with("port_id", 70000u64)),
        "PCAPPort" => ("bess.pb.PCAPPortArg", Value::map().with("dev", "bfz-none0")),
        "AFXDPPort" => (
            "bessemer.pb.AFXDPPortArg",
            Value::map().with("ifname", "bfz-none0"),
        ),
        _ => (
            "bessemer.pb.AFPacketPortArg",
            Value::map().with("ifname", "bfz-none0"),
        ),
    };
    if i.u8().is_multiple_of(8) {
        return None;
    }
    bessemer_daemon::convert::value_to_any(ty, &v).ok()
}

/// A CreateModuleRequest: a class (port and queue I/O classes name the pool's ports), its
/// smallest argument or input bytes.
fn create_request(i: &mut Input) -> pb::CreateModuleRequest {
    let classes = bessemer_modules::classes();
    let c = classes[i.u8() as usize % classes.len()];
    let port = pick(i, PORTS);
    let name = pick(i, MODULES).to_string();
    let sample = bessemer_modules::samples::minimal_arg(c.name, port);
    pb::CreateModuleRequest {
        name,
        mclass: c.name.to_string(),
        arg: arg_any(i, c.arg_type, Some(sample)),
    }
}

/// A CommandRequest to one of the pool's modules: a command of any class (by name; the
/// argument typed as that command's).
fn command_request(i: &mut Input) -> pb::CommandRequest {
    let classes = bessemer_modules::classes();
    let c = classes[i.u8() as usize % classes.len()];
    let name = pick(i, MODULES).to_string();
    let (cmd, ty) = match c.commands.get(i.u8() as usize % c.commands.len().max(1)) {
        Some(s) => (s.name.to_string(), s.arg_type),
        None => ("bogus".to_string(), "EmptyArg"),
    };
    pb::CommandRequest {
        name,
        cmd,
        arg: arg_any(i, ty, None),
    }
}

fn hook_info(i: &mut Input) -> pb::GateHookInfo {
    let class = pick(i, &["Track", "TcpDump", "PcapNg", "track", "Bogus"]);
    let g = i.u8();
    let gate = match g % 3 {
        0 => Some(pb::gate_hook_info::Gate::Igate(g as i64 / 3 % 4 - 1)),
        1 => Some(pb::gate_hook_info::Gate::Ogate(g as i64 / 3 % 4 - 1)),
        _ => None,
    };
    let fifo = std::env::temp_dir()
        .join("bessemer-fuzz-no-such-dir")
        .join("hook.fifo");
    let arg = match class {
        "TcpDump" | "PcapNg" => bessemer_daemon::convert::value_to_any(
            if class == "TcpDump" {
                "bess.pb.TcpdumpArg"
            } else {
                "bess.pb.PcapngArg"
            },
            &bessemer_core::Value::map()
                .with("fifo", fifo.to_string_lossy().as_ref())
                .with("defer", i.u8() & 1 == 1),
        )
        .ok(),
        _ => bessemer_daemon::convert::value_to_any(
            "bess.pb.TrackArg",
            &bessemer_core::Value::map().with("bits", i.u8() & 1 == 1),
        )
        .ok(),
    };
    pb::GateHookInfo {
        class_name: class.to_string(),
        hook_name: pick(i, &["h0", "h1", ""]).to_string(),
        module_name: pick(i, MODULES).to_string(),
        gate,
        arg,
    }
}

fn traffic_class(i: &mut Input) -> pb::TrafficClass {
    let mut limit = std::collections::HashMap::new();
    let mut max_burst = std::collections::HashMap::new();
    let f = i.u8();
    if f & 1 == 1 {
        limit.insert(pick(i, RESOURCES).to_string(), i.u32() as i64 - 1000);
    }
    if f & 2 == 2 {
        max_burst.insert(pick(i, RESOURCES).to_string(), i.u16() as i64);
    }
    pb::TrafficClass {
        parent: pick(i, TCS).to_string(),
        name: pick(i, TCS).to_string(),
        blocked: f & 4 == 4,
        policy: pick(i, POLICIES).to_string(),
        resource: pick(i, RESOURCES).to_string(),
        arg: Some(if f & 8 == 8 {
            pb::traffic_class::Arg::Priority(i.u8() as i64 - 1)
        } else {
            pb::traffic_class::Arg::Share(i.u8() as i64)
        }),
        wid: (i.u8() % 4) as i64 - 1,
        limit,
        max_burst,
        leaf_module_name: if f & 16 == 16 {
            pick(i, MODULES).to_string()
        } else {
            String::new()
        },
        leaf_module_taskid: (f >> 5) as u64 % 2,
    }
}

/// Up to 48 control operations from the input, each picked by one byte, on a daemon reset
/// at the start (ResetAll): creating and destroying modules and ports (UnixSocketPort,
/// SlicePort and PcapFilePort for real; the drivers that would touch the host's interfaces
/// only with an interface that does not exist), connecting, commands, gate hooks (Track;
/// TcpDump and PcapNg to a FIFO that cannot exist), workers (at most 2, unpinned),
/// pausing and resuming, traffic classes (any policy, parent, limits, leaf), transactions
/// of up to 8 changes, resets and every read-only listing. Checked: every RPC answers (the
/// gRPC status is OK) and none reports an internal error (a panic the service caught);
/// ResetAll at the end succeeds and leaves no module, port or worker.
pub fn control_sequence(data: &[u8]) {
    CONTROL.with(|d| {
        let c = &d.control;
        let mut i = Input::new(data);
        d.rt.block_on(async {
            macro_rules! call {
                ($m:ident, $req:expr) => {{
                    let r = c.$m(Request::new($req)).await.expect("gRPC status OK");
                    r.into_inner()
                }};
            }
            let r = call!(reset_all, pb::EmptyRequest {});
            check("ResetAll", &r.error);
            for _ in 0..48 {
                if i.is_empty() {
                    break;
                }
                let op = i.u8();
                match op % 20 {
                    0 => {
                        let r = call!(create_module, create_request(&mut i));
                        check("CreateModule", &r.error);
                    }
                    1 => {
                        let name = pick(&mut i, MODULES).to_string();
                        let r = call!(destroy_module, pb::DestroyModuleRequest { name });
                        check("DestroyModule", &r.error);
                    }
                    2 => {
                        let req = pb::ConnectModulesRequest {
                            m1: pick(&mut i, MODULES).to_string(),
                            m2: pick(&mut i, MODULES).to_string(),
                            ogate: (i.u8() % 5) as u64,
                            igate: (i.u8() % 5) as u64,
                            skip_default_hooks: i.u8() & 1 == 1,
                        };
                        let r = call!(connect_modules, req);
                        check("ConnectModules", &r.error);
                    }
                    3 => {
                        let req = pb::DisconnectModulesRequest {
                            name: pick(&mut i, MODULES).to_string(),
                            ogate: (i.u8() % 5) as u64,
                        };
                        let r = call!(disconnect_modules, req);
                        check("DisconnectModules", &r.error);
                    }
                    4 => {
                        let r = call!(module_command, command_request(&mut i));
                        check("ModuleCommand", &r.error);
                    }
                    5 => {
                        let driver = pick(
                            &mut i,
                            &[
                                "UnixSocketPort",
                                "SlicePort",
                                "PcapFilePort",
                                "AFPacketPort",
                                "AFXDPPort",
                                "PCAPPort",
                                "PMDPort",
                                "NoSuchDriver",
                            ],
                        );
                        let name = pick(&mut i, PORTS);
                        let q = i.u8();
                        let req = pb::CreatePortRequest {
                            name: name.to_string(),
                            driver: driver.to_string(),
                            num_inc_q: (q % 3) as u64,
                            num_out_q: (q / 3 % 3) as u64,
                            size_inc_q: if q & 0x40 != 0 { i.u16() as u64 } else { 0 },
                            size_out_q: if q & 0x80 != 0 { i.u16() as u64 } else { 0 },
                            arg: port_arg(&mut i, driver, name),
                        };
                        let r = call!(create_port, req);
                        check("CreatePort", &r.error);
                    }
                    6 => {
                        let name = pick(&mut i, PORTS).to_string();
                        let r = call!(destroy_port, pb::DestroyPortRequest { name });
                        check("DestroyPort", &r.error);
                    }
                    7 => {
                        let req = pb::ConfigureGateHookRequest {
                            hook: Some(hook_info(&mut i)),
                            enable: i.u8() & 1 == 1,
                        };
                        let r = call!(configure_gate_hook, req);
                        check("ConfigureGateHook", &r.error);
                    }
                    8 => {
                        let req = pb::GateHookCommandRequest {
                            hook: Some(hook_info(&mut i)),
                            cmd: pick(&mut i, &["reset", "bogus", ""]).to_string(),
                        };
                        let r = call!(gate_hook_command, req);
                        check("GateHookCommand", &r.error);
                    }
                    9 => {
                        let req = pb::AddWorkerRequest {
                            wid: (i.u8() % 3) as i64,
                            core: (i.u8() % 3) as i64,
                            scheduler: pick(&mut i, &["", "experimental", "bogus"]).to_string(),
                        };
                        let r = call!(add_worker, req);
                        check("AddWorker", &r.error);
                    }
                    10 => {
                        let wid = (i.u8() % 3) as i64;
                        let r = call!(destroy_worker, pb::DestroyWorkerRequest { wid });
                        check("DestroyWorker", &r.error);
                    }
                    11 => {
                        let wid = (i.u8() % 4) as i64 - 1;
                        let r = match op / 20 % 4 {
                            0 => call!(pause_all, pb::EmptyRequest {}),
                            1 => call!(resume_all, pb::EmptyRequest {}),
                            2 => call!(pause_worker, pb::PauseWorkerRequest { wid }),
                            _ => call!(resume_worker, pb::ResumeWorkerRequest { wid }),
                        };
                        check("Pause/Resume", &r.error);
                    }
                    12 => {
                        let class = Some(traffic_class(&mut i));
                        let r = call!(add_tc, pb::AddTcRequest { class });
                        check("AddTc", &r.error);
                    }
                    13 => {
                        let class = Some(traffic_class(&mut i));
                        let r = call!(update_tc_params, pb::UpdateTcParamsRequest { class });
                        check("UpdateTcParams", &r.error);
                    }
                    14 => {
                        let class = Some(traffic_class(&mut i));
                        let r = call!(update_tc_parent, pb::UpdateTcParentRequest { class });
                        check("UpdateTcParent", &r.error);
                    }
                    15 => {
                        let r = match op / 20 % 5 {
                            0 => call!(reset_tcs, pb::EmptyRequest {}),
                            1 => call!(reset_modules, pb::EmptyRequest {}),
                            2 => call!(reset_ports, pb::EmptyRequest {}),
                            3 => call!(reset_workers, pb::EmptyRequest {}),
                            _ => call!(reset_all, pb::EmptyRequest {}),
                        };
                        check("Reset", &r.error);
                    }
                    16 => {
                        let n = 1 + i.u8() % 8;
                        let mut ops = Vec::new();
                        for _ in 0..n {
                            use ext::transaction_op::Op;
                            let op = match i.u8() % 5 {
                                0 => Op::CreateModule(create_request(&mut i)),
                                1 => Op::DestroyModule(pb::DestroyModuleRequest {
                                    name: pick(&mut i, MODULES).to_string(),
                                }),
                                2 => Op::ConnectModules(pb::ConnectModulesRequest {
                                    m1: pick(&mut i, MODULES).to_string(),
                                    m2: pick(&mut i, MODULES).to_string(),
                                    ogate: (i.u8() % 5) as u64,
                                    igate: (i.u8() % 5) as u64,
                                    skip_default_hooks: false,
                                }),
                                3 => Op::DisconnectModules(pb::DisconnectModulesRequest {
                                    name: pick(&mut i, MODULES).to_string(),
                                    ogate: (i.u8() % 5) as u64,
                                }),
                                _ => Op::ModuleCommand(command_request(&mut i)),
                            };
                            ops.push(ext::TransactionOp { op: Some(op) });
                        }
                        let r = c
                            .transaction(Request::new(ext::TransactionRequest { ops }))
                            .await
                            .expect("gRPC status OK")
                            .into_inner();
                        check("Transaction", &r.error);
                    }
                    17 => {
                        let name = pick(&mut i, PORTS).to_string();
                        let conf = pb::PortConf {
                            mac_addr: pick(&mut i, &["", "02:00:00:00:00:01", "zz"]).to_string(),
                            mtu: i.u16() as u32,
                            admin_up: i.u8() & 1 == 1,
                        };
                        let r = call!(
                            set_port_conf,
                            pb::SetPortConfRequest {
                                name: name.clone(),
                                conf: Some(conf),
                            }
                        );
                        check("SetPortConf", &r.error);
                        let r = call!(get_port_conf, pb::GetPortConfRequest { name: name.clone() });
                        check("GetPortConf", &r.error);
                        let r = call!(
                            get_link_status,
                            pb::GetLinkStatusRequest { name: name.clone() }
                        );
                        check("GetLinkStatus", &r.error);
                        let r = call!(get_port_stats, pb::GetPortStatsRequest { name });
                        check("GetPortStats", &r.error);
                    }
                    _ => {
                        let name = pick(&mut i, MODULES).to_string();
                        let r = call!(get_module_info, pb::GetModuleInfoRequest { name });
                        check("GetModuleInfo", &r.error);
                        let r = call!(list_modules, pb::EmptyRequest {});
                        check("ListModules", &r.error);
                        let r = call!(list_ports, pb::EmptyRequest {});
                        check("ListPorts", &r.error);
                        let r = call!(list_workers, pb::EmptyRequest {});
                        check("ListWorkers", &r.error);
                        let r = call!(list_tcs, pb::ListTcsRequest { wid: -1 });
                        check("ListTcs", &r.error);
                        let name = pick(&mut i, TCS).to_string();
                        let r = call!(get_tc_stats, pb::GetTcStatsRequest { name });
                        check("GetTcStats", &r.error);
                        let r = call!(list_gate_hooks, pb::EmptyRequest {});
                        check("ListGateHooks", &r.error);
                        let r = call!(check_scheduling_constraints, pb::EmptyRequest {});
                        check("CheckSchedulingConstraints", &r.error);
                        let r = call!(dump_mempool, pb::DumpMempoolRequest { socket: -1 });
                        check("DumpMempool", &r.error);
                        let r = c
                            .show_errors(Request::new(ext::ShowErrorsRequest {
                                modules: Vec::new(),
                                include_zero: true,
                            }))
                            .await
                            .expect("gRPC status OK")
                            .into_inner();
                        check("ShowErrors", &r.error);
                    }
                }
            }
            let r = call!(reset_all, pb::EmptyRequest {});
            check("ResetAll", &r.error);
            assert!(r.error.is_none(), "ResetAll failed: {:?}", r.error);
            let m = call!(list_modules, pb::EmptyRequest {});
            let p = call!(list_ports, pb::EmptyRequest {});
            let w = call!(list_workers, pb::EmptyRequest {});
            assert!(
                m.modules.is_empty() && p.ports.is_empty() && w.workers_status.is_empty(),
                "ResetAll left modules, ports or workers"
            );
        });
    });
}

// ---- HTTP --------------------------------------------------------------------------------

/// An engine with something to show: a port, modules with drop reasons, connections, a
/// tracked gate.
fn http_daemon() -> Daemon {
    let d = daemon();
    let c = &d.control;
    d.rt.block_on(async {
        let port = port_arg(&mut Input::new(&[0, 0, 1]), "UnixSocketPort", "hp");
        let r = c
            .create_port(Request::new(pb::CreatePortRequest {
                name: "hp".into(),
                driver: "UnixSocketPort".into(),
                arg: port,
                ..Default::default()
            }))
            .await
            .expect("OK")
            .into_inner();
        assert!(r.error.is_none(), "{:?}", r.error);
        for (name, class) in [
            ("src", "Source"),
            ("ttl", "UpdateTTL"),
            ("csum", "IPChecksum"),
            ("sink", "Sink"),
        ] {
            let r = c
                .create_module(Request::new(pb::CreateModuleRequest {
                    name: name.into(),
                    mclass: class.into(),
                    arg: None,
                }))
                .await
                .expect("OK")
                .into_inner();
            assert!(r.error.is_none(), "{name}: {:?}", r.error);
        }
        for (a, b) in [("src", "ttl"), ("ttl", "csum"), ("csum", "sink")] {
            let r = c
                .connect_modules(Request::new(pb::ConnectModulesRequest {
                    m1: a.into(),
                    m2: b.into(),
                    ..Default::default()
                }))
                .await
                .expect("OK")
                .into_inner();
            assert!(r.error.is_none(), "{a}->{b}: {:?}", r.error);
        }
    });
    d
}

/// A token the fuzzer can find in the dictionary.
const TOKEN: &str = "fuzz-token-1234";

/// Statuses the endpoints (and hyper, for requests it cannot parse) may answer.
const STATUSES: &[u16] = &[200, 400, 401, 403, 404, 405, 408, 413, 414, 417, 431, 505];

/// The first byte sets the peer (bit 0: 192.0.2.9, else 127.0.0.1), whether 192.0.2.0/24
/// is allowed (bit 1), whether a token is required beyond loopback (bit 2), and which
/// endpoints exist (bit 3 metrics, bit 4 the view; neither means both); the rest is what
/// the client sends on one connection (then it half-closes). Checked: the connection ends
/// within 10 s; every response is HTTP/1.x with an expected status, never a 5xx; a peer
/// not allowed gets no 200; a remote peer gets no 200 without the token when one is
/// required; /metrics answers Prometheus text.
pub fn http_endpoints(data: &[u8]) {
    HTTP.with(|d| {
        let mut i = Input::new(data);
        let f = i.u8();
        let remote = f & 1 == 1;
        let peer = if remote {
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9))
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let allowed = if f & 2 == 2 {
            Allowed::with(&["192.0.2.0/24".to_string()]).expect("a network")
        } else {
            Allowed::loopback()
        };
        let permitted = allowed.permits(peer);
        let token: Option<Arc<str>> = (f & 4 == 4).then(|| Arc::from(TOKEN));
        let what = match (f & 8 == 8, f & 16 == 16) {
            (false, false) => Endpoints {
                metrics: true,
                view: true,
            },
            (m, v) => Endpoints {
                metrics: m,
                view: v,
            },
        };
        let request = i.rest();
        let r = router(d.engine.clone(), allowed, token.clone(), what).layer(
            axum::extract::connect_info::MockConnectInfo(SocketAddr::new(peer, 40000)),
        );
        let out = d.rt.block_on(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut client, server) = tokio::io::duplex(1 << 20);
            let svc = hyper_util::service::TowerToHyperService::new(r);
            let conn = hyper::server::conn::http1::Builder::new()
                .half_close(true)
                .serve_connection(hyper_util::rt::TokioIo::new(server), svc);
            let talk = async move {
                client.write_all(request).await.expect("write the request");
                client.shutdown().await.expect("half-close");
                let mut out = Vec::new();
                let _ = client.read_to_end(&mut out).await;
                out
            };
            let (out, _) =
                tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(talk, conn) })
                    .await
                    .expect("the HTTP connection did not end within 10 s");
            out
        });
        let authorised = !remote
            || token.is_none()
            || request.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes());
        check_responses(&out, permitted && authorised);
    });
}

/// Walks the responses in `out` (status line, headers, a Content-Length body).
fn check_responses(out: &[u8], may_succeed: bool) {
    let mut rest = out;
    while !rest.is_empty() {
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            panic!(
                "a response without the end of its head: {:?}",
                String::from_utf8_lossy(rest)
            );
        };
        let head = std::str::from_utf8(&rest[..end]).expect("a UTF-8 response head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let code: u16 = status_line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP/1.x status line: {status_line:?}"));
        assert!(STATUSES.contains(&code), "unexpected status {code}");
        assert!(
            code != 200 || may_succeed,
            "200 for a peer that is not allowed or has no token"
        );
        let mut len = None;
        let mut chunked = false;
        for l in lines {
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            }
            if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            }
        }
        if chunked {
            // Nothing this router sends is chunked; stop walking rather than parse it.
            return;
        }
        let body_start = end + 4;
        // A HEAD response announces a length but has no body: the next response follows.
        let head_only = rest[body_start..].starts_with(b"HTTP/1.");
        let n = if head_only { 0 } else { len.unwrap_or(0) }.min(rest.len() - body_start);
        let body = &rest[body_start..body_start + n];
        if code == 200 && body.starts_with(b"# HELP") {
            assert!(std::str::from_utf8(body).is_ok(), "metrics not UTF-8");
        }
        rest = &rest[body_start + n..];
    }
}

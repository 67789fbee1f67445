//! Hook RPCs: gate hook classes (Track, TcpDump, PcapNg), configuring, listing and commanding
//! gate hooks, and resume hooks (not supported).

use std::sync::Arc;

use bessemer_core::module::MAX_GATES;
use bessemer_core::{Engine, Error, Result};
use tonic::Request;

use super::{
    answer, check_len, check_room, need_name, unsupported, Control, RpcResult, MAX_GATE_HOOKS,
};
use crate::convert::{self, truncate};
use crate::pb;

pub(super) fn list_gate_hook_class() -> RpcResult<pb::ListGateHookClassResponse> {
    answer(
        "ListGateHookClass",
        Ok(pb::ListGateHookClassResponse {
            error: None,
            names: HOOK_CLASSES.iter().map(|c| c.name.to_string()).collect(),
        }),
    )
}

pub(super) fn get_gate_hook_class_info(
    r: Request<pb::GetGateHookClassInfoRequest>,
) -> RpcResult<pb::GetGateHookClassInfoResponse> {
    let n = r.into_inner().name;
    let res = if n.is_empty() {
        Err(Error::invalid("gate hook class name (name) is empty"))
    } else {
        hook_class(&n).map(|c| pb::GetGateHookClassInfoResponse {
            error: None,
            name: c.name.to_string(),
            help: c.help.to_string(),
            cmds: Vec::new(),
            cmd_args: Vec::new(),
        })
    };
    answer("GetGateHookClassInfo", res)
}

pub(super) async fn configure_gate_hook(
    ctl: &Control,
    r: Request<pb::ConfigureGateHookRequest>,
) -> RpcResult<pb::ConfigureGateHookResponse> {
    let req = r.into_inner();
    let res = ctl
        .run(move |e| configure_hook(e, req.hook.unwrap_or_default(), req.enable))
        .await;
    answer(
        "ConfigureGateHook",
        res.map(|name| pb::ConfigureGateHookResponse { error: None, name }),
    )
}

pub(super) async fn list_gate_hooks(ctl: &Control) -> RpcResult<pb::ListGateHooksResponse> {
    let res = ctl
        .run(|e| {
            Ok(pb::ListGateHooksResponse {
                error: None,
                hooks: list_hooks(e),
            })
        })
        .await;
    answer("ListGateHooks", res)
}

pub(super) async fn gate_hook_command(
    ctl: &Control,
    r: Request<pb::GateHookCommandRequest>,
) -> RpcResult<pb::CommandResponse> {
    let req = r.into_inner();
    let res = ctl
        .run(move |e| run_hook_command(e, &req.hook.unwrap_or_default(), &req.cmd))
        .await;
    answer("GateHookCommand", res)
}

pub(super) fn configure_resume_hook(
    r: Request<pb::ConfigureResumeHookRequest>,
) -> RpcResult<pb::CommandResponse> {
    let n = truncate(&r.get_ref().hook_name, 128);
    answer(
        "ConfigureResumeHook",
        Err(unsupported(format!(
            "resume hook '{n}' is not supported: Bessemer has no resume hooks yet"
        ))),
    )
}

/// A gate hook class: BESS's name (what ListGateHookClass answers), the lowercase alias
/// Bessemer accepted before, the template of default instance names, the argument message.
struct HookClass {
    name: &'static str,
    alias: &'static str,
    template: &'static str,
    arg: &'static str,
    help: &'static str,
}

/// Gate hook classes (BESS's `core/hooks`).
const HOOK_CLASSES: &[HookClass] = &[
    HookClass {
        name: "Track",
        alias: "track",
        template: "track",
        arg: "TrackArg",
        help: "count the packets and batches (bytes too with TrackArg.bits) on output gates, \
               shown by GetModuleInfo",
    },
    HookClass {
        name: "TcpDump",
        alias: "tcpdump",
        template: "tcpdump",
        arg: "TcpdumpArg",
        help: "dump traffic on a network: packets crossing a gate to a FIFO in pcap format \
               (TcpdumpArg: fifo, defer)",
    },
    HookClass {
        name: "PcapNg",
        alias: "pcapng",
        template: "pcapng",
        arg: "PcapngArg",
        help: "packets crossing a gate to a FIFO in pcapng format (PcapngArg: fifo, defer)",
    },
];

/// The hook class named `name` (BESS's name or its lowercase alias).
fn hook_class(name: &str) -> Result<&'static HookClass> {
    HOOK_CLASSES
        .iter()
        .find(|c| c.name == name || c.alias == name)
        .ok_or_else(|| unknown_hook_class(name))
}

fn unknown_hook_class(name: &str) -> Error {
    Error::not_found(format!(
        "no gate hook class '{}' (classes: {}; or in lowercase: {})",
        truncate(name, 128),
        HOOK_CLASSES
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", "),
        HOOK_CLASSES
            .iter()
            .map(|c| c.alias)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Configures a hook as BESS does: an empty module name means every module (those without
/// the named gate are passed over), gate -1 every connected gate of that side, an empty hook
/// name the class's first free default name (`track0`, ...) when enabling and every hook of
/// the class when disabling.
fn configure_hook(e: &mut Engine, h: pb::GateHookInfo, enable: bool) -> Result<String> {
    use bessemer_core::hook::{CaptureFormat, CaptureHook, GateDir, GateHook, TrackHook};
    use pb::gate_hook_info::Gate;
    let class = hook_class(&h.class_name)?;
    let (dir, gate) = match h.gate {
        Some(Gate::Igate(g)) => (GateDir::In, g),
        Some(Gate::Ogate(g)) => (GateDir::Out, g),
        None => {
            return Err(Error::invalid(
                "a gate hook needs an igate or an ogate (-1 for all gates)",
            ))
        }
    };
    let gate = match gate {
        -1 => None,
        g if (0..MAX_GATES as i64).contains(&g) => Some(g as u16),
        g => {
            return Err(Error::invalid(format!(
                "gate {g} is out of range (0..{MAX_GATES}, or -1 for all)"
            )))
        }
    };
    if class.name == "Track" && dir == GateDir::In {
        return Err(Error::invalid(
            "the Track hook counts on output gates; name the upstream module's ogate",
        ));
    }
    check_len(&h.hook_name, "hook name")?;
    let every_module = h.module_name.is_empty();
    let modules: Vec<String> = if every_module {
        let mut m: Vec<String> = e.graph().modules().into_iter().map(|m| m.name).collect();
        m.sort();
        m
    } else {
        let m = need_name(&h.module_name, "module name")?;
        e.graph().id_of(&m)?;
        vec![m]
    };
    // The gates each module has on that side (with every module, those without are skipped).
    let mut places: Vec<(String, Vec<u16>)> = Vec::new();
    for m in modules {
        match e.graph().hook_gates(&m, dir, gate) {
            Ok(g) => places.push((m, g)),
            Err(_) if every_module => {}
            Err(err) => return Err(err),
        }
    }
    let hooks = e.graph().hooks();
    let what = format!("gate hook '{}'", class.name);

    if !enable {
        let mut removed = 0;
        for (m, gates) in &places {
            for &g in gates {
                // An empty name removes the class's hook (BESS's RemoveHookByClass).
                let victim = hooks_on(&hooks, m, dir, g).find(|p| {
                    if h.hook_name.is_empty() {
                        p.class == class.name
                    } else {
                        p.name == h.hook_name
                    }
                });
                let Some(v) = victim else { continue };
                let was_track = v.class == "Track";
                e.remove_hook(m, dir, Some(g), &v.name.clone())?;
                removed += 1;
                if was_track && !has_track_hook(e, m, g) {
                    e.track_gate(m, Some(g), false)?;
                }
            }
        }
        if removed == 0 && !every_module && class.name != "Track" {
            let which = if h.hook_name.is_empty() {
                format!("{} hook", class.name)
            } else {
                format!("hook named '{}'", truncate(&h.hook_name, 128))
            };
            return Err(Error::not_found(format!(
                "module '{}' has no {which} on that gate",
                h.module_name
            )));
        }
        return Ok(h.hook_name);
    }
    let adding = places.iter().map(|(_, g)| g.len()).sum();
    check_room("gate hooks", hooks.len(), adding, MAX_GATE_HOOKS)?;

    // Validate everything before a capture hook opens its FIFO: a refused hook must not have
    // written to (or closed) a pipe a reader already has open.
    let arg = convert::any_to_value(h.arg.as_ref(), Some(class.arg), &what)?;
    let mut a = bessemer_core::Args::new(&arg, class.arg)?;
    let (bits, fifo, defer, reconnect) = if class.name == "Track" {
        (
            a.bool("bits")?.unwrap_or(false),
            String::new(),
            false,
            false,
        )
    } else {
        let fifo = a.str("fifo")?.unwrap_or_default().to_string();
        let defer = a.bool("defer")?.unwrap_or(false);
        let reconnect = a.bool("reconnect")?.unwrap_or(false);
        (false, fifo, defer, reconnect)
    };
    a.finish()?;
    if class.name != "Track" && fifo.is_empty() {
        return Err(Error::invalid(format!(
            "{}.fifo: a FIFO path is required",
            class.arg
        )));
    }
    let taken = |name: &str| {
        places
            .iter()
            .flat_map(|(m, gates)| gates.iter().map(move |&g| (m, g)))
            .find(|(m, g)| hooks_on(&hooks, m, dir, *g).any(|p| p.name == name))
    };
    let name = if h.hook_name.is_empty() {
        // BESS's default: the template and the first number no gate uses yet.
        (0..)
            .map(|i| format!("{}{i}", class.template))
            .find(|n| taken(n).is_none())
            .unwrap_or_default()
    } else {
        if let Some((m, g)) = taken(&h.hook_name) {
            return Err(Error::exists(format!(
                "gate {g} of module '{m}' already has a hook named '{}'",
                h.hook_name
            )));
        }
        h.hook_name.clone()
    };
    let hook: Arc<dyn GateHook> = match class.name {
        "Track" => Arc::new(TrackHook { bits }),
        "TcpDump" => Arc::new(CaptureHook::open(
            &fifo,
            CaptureFormat::Pcap,
            defer,
            reconnect,
        )?),
        _ => Arc::new(CaptureHook::open(
            &fifo,
            CaptureFormat::Pcapng,
            defer,
            reconnect,
        )?),
    };
    for (m, gates) in &places {
        for &g in gates {
            e.add_hook(m, dir, Some(g), &name, hook.clone())?;
            if bits {
                e.track_gate(m, Some(g), true)?;
            }
        }
    }
    Ok(name)
}

/// The hooks of one gate.
fn hooks_on<'a>(
    hooks: &'a [bessemer_core::hook::HookPlace],
    module: &'a str,
    dir: bessemer_core::hook::GateDir,
    gate: u16,
) -> impl Iterator<Item = &'a bessemer_core::hook::HookPlace> + 'a {
    hooks
        .iter()
        .filter(move |p| p.module == module && p.dir == dir && p.gate == gate)
}

/// Whether an output gate still has a Track hook.
fn has_track_hook(e: &Engine, module: &str, gate: u16) -> bool {
    use bessemer_core::hook::GateDir;
    e.graph().hooks().iter().any(|p| {
        p.module == module && p.dir == GateDir::Out && p.gate == gate && p.class == "Track"
    })
}

fn hook_info(module: &str, dir_in: bool, gate: u16, class: &str, name: &str) -> pb::GateHookInfo {
    use pb::gate_hook_info::Gate;
    pb::GateHookInfo {
        class_name: class.to_string(),
        hook_name: name.to_string(),
        module_name: module.to_string(),
        gate: Some(if dir_in {
            Gate::Igate(gate as i64)
        } else {
            Gate::Ogate(gate as i64)
        }),
        arg: None,
    }
}

pub(super) fn list_hooks(e: &Engine) -> Vec<pb::GateHookInfo> {
    use bessemer_core::hook::GateDir;
    e.graph()
        .hooks()
        .into_iter()
        .map(|h| hook_info(&h.module, h.dir == GateDir::In, h.gate, h.class, &h.name))
        .collect()
}

/// Runs a gate hook command as BESS does: the hook is found by module, gate and hook name.
fn run_hook_command(e: &Engine, h: &pb::GateHookInfo, cmd: &str) -> Result<pb::CommandResponse> {
    use bessemer_core::hook::GateDir;
    use pb::gate_hook_info::Gate;
    let module = need_name(&h.module_name, "module name")?;
    e.graph().id_of(&module)?;
    let (dir, gate) = match h.gate {
        Some(Gate::Igate(g)) => (GateDir::In, g),
        Some(Gate::Ogate(g)) => (GateDir::Out, g),
        // An unset gate reads as ogate 0, as in BESS.
        None => (GateDir::Out, 0),
    };
    let place = e
        .graph()
        .hooks()
        .into_iter()
        .find(|p| {
            p.module == module && p.dir == dir && p.gate as i64 == gate && p.name == h.hook_name
        })
        .ok_or_else(|| {
            Error::not_found(format!(
                "{module}: {}gate {gate} has no hook named '{}'",
                if dir == GateDir::In { 'i' } else { 'o' },
                truncate(&h.hook_name, 128)
            ))
        })?;
    let cmd = truncate(cmd, 128);
    if place.class == "Track" && cmd == "reset" {
        // Track's counters are the output gate's own (input-gate Track is refused).
        e.graph().reset_gate_stats(&module, place.gate)?;
        return Ok(pb::CommandResponse::default());
    }
    Err(Error::unsupported(format!(
        "'{}' does not support command '{cmd}'",
        place.class
    )))
}

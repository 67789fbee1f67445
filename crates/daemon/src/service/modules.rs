//! Module RPCs: module classes, creating and destroying modules, GetModuleInfo, connections,
//! module commands and DumpMempool.

use bessemer_core::{AccessMode, AttrOffset, Engine, Error, ModuleClass, Result, Value};
use tonic::Request;

use super::hooks::list_hooks;
use super::observe::drop_counts;
use super::{
    answer, check_len, check_room, empty, gate_of, lookup_name, need_name, now, Control, RpcResult,
    MAX_MODULES,
};
use crate::convert;
use crate::observe::DropRates;
use crate::pb;

pub(super) fn list_mclass() -> RpcResult<pb::ListMclassResponse> {
    answer(
        "ListMclass",
        Ok(pb::ListMclassResponse {
            error: None,
            names: bessemer_modules::classes()
                .iter()
                .map(|c| c.name.to_string())
                .collect(),
        }),
    )
}

pub(super) fn get_mclass_info(
    r: Request<pb::GetMclassInfoRequest>,
) -> RpcResult<pb::GetMclassInfoResponse> {
    answer("GetMclassInfo", mclass_info(&r.get_ref().name))
}

pub(super) async fn reset_modules(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty(
        "ResetModules",
        ctl.run(|e| {
            e.reset_modules()?;
            resync(e);
            Ok(())
        })
        .await,
    )
}

pub(super) async fn list_modules(ctl: &Control) -> RpcResult<pb::ListModulesResponse> {
    let r = ctl
        .run(|e| {
            Ok(pb::ListModulesResponse {
                error: None,
                modules: e
                    .graph()
                    .modules()
                    .into_iter()
                    .map(|m| pb::list_modules_response::Module {
                        name: m.name,
                        mclass: m.mclass.to_string(),
                        desc: m.desc,
                    })
                    .collect(),
            })
        })
        .await;
    answer("ListModules", r)
}

/// The class and argument of a CreateModule request, checked as BESS checks them.
pub(super) fn create_request(
    req: &pb::CreateModuleRequest,
) -> Result<(&'static bessemer_core::ModuleClass, Value)> {
    if req.mclass.is_empty() {
        return Err(Error::invalid("Missing 'mclass' field"));
    }
    check_len(&req.mclass, "module class name")?;
    check_len(&req.name, "module name")?;
    let class = bessemer_modules::find(&req.mclass)
        .ok_or_else(|| Error::not_found(format!("module class '{}' does not exist", req.mclass)))?;
    let what = format!("module class '{}'", class.name);
    // Clients (pybess, our script runner) always pack `<Class>Arg`; a class that
    // takes no argument accepts that message when it is empty.
    let own = format!("{}Arg", class.name);
    let expected = match req.arg.as_ref() {
        Some(a)
            if class.arg_type == "EmptyArg"
                && convert::type_name_of_url(&a.type_url) == convert::full_name(&own)
                && a.value.is_empty() =>
        {
            None
        }
        _ => Some(class.arg_type),
    };
    let arg = convert::any_to_value(req.arg.as_ref(), expected, &what)?;
    Ok((class, arg))
}

pub(super) async fn create_module(
    ctl: &Control,
    r: Request<pb::CreateModuleRequest>,
) -> RpcResult<pb::CreateModuleResponse> {
    let req = r.into_inner();
    let res = async {
        let (class, arg) = create_request(&req)?;
        let name = req.name;
        ctl.run(move |e| {
            check_room("modules", e.graph().len(), 1, MAX_MODULES)?;
            let n = (!name.is_empty()).then_some(name.as_str());
            e.create_module(class, n, &arg)
        })
        .await
    }
    .await;
    answer(
        "CreateModule",
        res.map(|name| pb::CreateModuleResponse { error: None, name }),
    )
}

pub(super) async fn destroy_module(
    ctl: &Control,
    r: Request<pb::DestroyModuleRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let name = r.into_inner().name;
    empty(
        "DestroyModule",
        ctl.run(move |e| {
            e.destroy_module(&need_name(&name, "module name")?)?;
            resync(e);
            Ok(())
        })
        .await,
    )
}

pub(super) async fn get_module_info(
    ctl: &Control,
    r: Request<pb::GetModuleInfoRequest>,
) -> RpcResult<pb::GetModuleInfoResponse> {
    let name = r.into_inner().name;
    let res = ctl
        .run({
            let rates = ctl.drop_rates();
            move |e| {
                let rates = rates.lock().unwrap_or_else(|p| p.into_inner());
                module_info(e, &need_name(&name, "module name")?, &rates)
            }
        })
        .await;
    answer("GetModuleInfo", res)
}

pub(super) async fn connect_modules(
    ctl: &Control,
    r: Request<pb::ConnectModulesRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let req = r.into_inner();
    let res = ctl
        .run(move |e| {
            let m1 = lookup_name(&req.m1, "m1 (upstream module name)")?;
            let m2 = lookup_name(&req.m2, "m2 (downstream module name)")?;
            let og = gate_of(req.ogate, "ogate")?;
            let ig = gate_of(req.igate, "igate")?;
            e.connect(&m1, og, &m2, ig)?;
            resync(e);
            Ok(())
        })
        .await;
    empty("ConnectModules", res)
}

pub(super) async fn disconnect_modules(
    ctl: &Control,
    r: Request<pb::DisconnectModulesRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let req = r.into_inner();
    let res = ctl
        .run(move |e| {
            let name = need_name(&req.name, "module name")?;
            e.disconnect(&name, gate_of(req.ogate, "ogate")?)?;
            resync(e);
            Ok(())
        })
        .await;
    empty("DisconnectModules", res)
}

pub(super) async fn dump_mempool(
    ctl: &Control,
    r: Request<pb::DumpMempoolRequest>,
) -> RpcResult<pb::DumpMempoolResponse> {
    let socket = r.get_ref().socket;
    let res = ctl.run(move |e| mempool_dumps(e, socket)).await;
    answer("DumpMempool", res)
}

pub(super) async fn module_command(
    ctl: &Control,
    r: Request<pb::CommandRequest>,
) -> RpcResult<pb::CommandResponse> {
    let req = r.into_inner();
    let res = ctl.run(move |e| run_module_command(e, req)).await;
    answer("ModuleCommand", res)
}

fn mclass_info(name: &str) -> Result<pb::GetMclassInfoResponse> {
    let name = need_name(name, "module class name")?;
    let c = bessemer_modules::find(&name)
        .ok_or_else(|| Error::not_found(format!("module class '{name}' does not exist")))?;
    // The whole reference text (the same as docs/modules/<Class>.md), not just BESS's
    // one-liner: `show mclass` is where users read arguments, commands and drop reasons.
    Ok(pb::GetMclassInfoResponse {
        error: None,
        name: c.name.to_string(),
        help: c.describe(),
        cmds: c.commands.iter().map(|x| x.name.to_string()).collect(),
        cmd_args: c.commands.iter().map(|x| x.arg_type.to_string()).collect(),
    })
}

fn module_info(e: &Engine, name: &str, rates: &DropRates) -> Result<pb::GetModuleInfoResponse> {
    let g = e.graph();
    let class = g.class_of(name)?;
    let desc = g
        .modules()
        .into_iter()
        .find(|m| m.name == name)
        .map(|m| m.desc)
        .unwrap_or_default();
    let ts = now();
    let mut conns = g.connections();
    // Packets an XDP offload handled in the kernel still count on the gates they would
    // have taken (crate::offload).
    let (kc, kdrops) = if crate::offload::any() {
        crate::offload::kernel_counts(e)
    } else {
        Default::default()
    };
    if !kc.is_empty() {
        for c in &mut conns {
            if let Some((p, b)) = kc.get(&(c.from.clone(), Some(c.ogate))) {
                c.counts.packets += p;
                c.counts.bits += b * 8;
            }
        }
    }
    let hooks = list_hooks(e);
    let mut igates: Vec<pb::get_module_info_response::IGate> = Vec::new();
    let mut ins: Vec<_> = conns.iter().filter(|c| c.to == name).collect();
    ins.sort_by_key(|c| (c.igate, c.from.clone(), c.ogate));
    for c in ins {
        if igates.last().is_none_or(|g| g.igate != c.igate as u64) {
            let mut cnt = g.igate_counts(name, c.igate)?;
            if !kc.is_empty() {
                for k in conns.iter().filter(|k| k.to == name && k.igate == c.igate) {
                    if let Some((p, b)) = kc.get(&(k.from.clone(), Some(k.ogate))) {
                        cnt.packets += p;
                        cnt.bits += b * 8;
                    }
                }
            }
            igates.push(pb::get_module_info_response::IGate {
                igate: c.igate as u64,
                ogates: Vec::new(),
                cnt: cnt.batches,
                pkts: cnt.packets,
                bytes: cnt.bits / 8,
                timestamp: ts,
                gatehooks: gate_hooks_of(&hooks, name, true, c.igate as u64),
            });
        }
        if let Some(ig) = igates.last_mut() {
            ig.ogates.push(pb::get_module_info_response::i_gate::OGate {
                ogate: c.ogate as u64,
                name: c.from.clone(),
            });
        }
    }
    let mut outs: Vec<_> = conns.iter().filter(|c| c.from == name).collect();
    outs.sort_by_key(|c| c.ogate);
    let ogates = outs
        .into_iter()
        .map(|c| pb::get_module_info_response::OGate {
            ogate: c.ogate as u64,
            cnt: c.counts.batches,
            pkts: c.counts.packets,
            bytes: c.counts.bits / 8,
            timestamp: ts,
            name: c.to.clone(),
            igate: c.igate as u64,
            gatehooks: gate_hooks_of(&hooks, name, false, c.ogate as u64),
        })
        .collect();
    let metadata = g
        .attr_offsets(name)?
        .into_iter()
        .map(|(spec, off)| pb::get_module_info_response::Attribute {
            name: spec.name,
            size: spec.size as u64,
            mode: mode_name(spec.mode).to_string(),
            offset: offset_value(off),
        })
        .collect();
    // With the packets the kernel dropped for this module.
    let drops = drop_counts(e, name, rates, true, &kdrops)?;
    let deadends = drops
        .iter()
        .find(|d| d.reason == "deadend")
        .map(|d| d.count)
        .unwrap_or(0);
    Ok(pb::GetModuleInfoResponse {
        error: None,
        name: name.to_string(),
        mclass: class.name.to_string(),
        desc,
        igates,
        ogates,
        metadata,
        deadends,
        drops,
    })
}

fn gate_hooks_of(
    all: &[pb::GateHookInfo],
    module: &str,
    dir_in: bool,
    gate: u64,
) -> Vec<pb::get_module_info_response::GateHook> {
    use pb::gate_hook_info::Gate;
    all.iter()
        .filter(|h| {
            h.module_name == module
                && match h.gate {
                    Some(Gate::Igate(g)) => dir_in && g as u64 == gate,
                    Some(Gate::Ogate(g)) => !dir_in && g as u64 == gate,
                    None => false,
                }
        })
        .map(|h| pb::get_module_info_response::GateHook {
            class_name: h.class_name.clone(),
            hook_name: h.hook_name.clone(),
        })
        .collect()
}

fn mode_name(m: AccessMode) -> &'static str {
    match m {
        AccessMode::Read => "read",
        AccessMode::Write => "write",
        AccessMode::Update => "update",
    }
}

/// BESS's offsets for attributes without a place: -1 no write needed, -2 read of nothing.
fn offset_value(o: AttrOffset) -> i64 {
    match o {
        AttrOffset::At(x) => x as i64,
        AttrOffset::NoWrite => -1,
        AttrOffset::NoRead => -2,
    }
}

/// The module, command and argument of a ModuleCommand request; None for the argument
/// when the class has no such command (the graph then names the class and its commands).
pub(super) fn command_request(
    e: &Engine,
    req: &pb::CommandRequest,
) -> Result<(String, String, Option<Value>)> {
    let name = need_name(&req.name, "module name")?;
    let cmd = need_name(&req.cmd, "command name")?;
    let class = e.graph().class_of(&name)?;
    let Some(spec) = class.command(&cmd) else {
        return Ok((name, cmd, None));
    };
    let what = format!("command '{cmd}' of module '{name}' ({})", class.name);
    let arg = convert::any_to_value(req.arg.as_ref(), Some(spec.arg_type), &what)?;
    Ok((name, cmd, Some(arg)))
}

/// A command's result as the message its table entry names (`CommandSpec::reply_type`).
pub(super) fn command_response(
    class: &ModuleClass,
    module: &str,
    cmd: &str,
    out: Value,
) -> Result<prost_types::Any> {
    let what = format!("command '{cmd}' of module '{module}' ({})", class.name);
    let spec = class
        .command(cmd)
        .ok_or_else(|| Error::unsupported(format!("{what}: the class has no such command")))?;
    let ty = convert::response_type(spec);
    let out = if ty.ends_with(".EmptyArg") && !matches!(&out, Value::Null) && out != Value::map() {
        tracing::warn!(
            "{what} returned data but the protocol has no response message for it; \
             answering with an EmptyArg"
        );
        Value::Null
    } else {
        out
    };
    convert::value_to_any(&ty, &out).map_err(|err| {
        Error::invalid(format!(
            "{what} ran, but its result cannot be encoded as {ty}: {}",
            err.msg
        ))
    })
}

fn run_module_command(e: &mut Engine, req: pb::CommandRequest) -> Result<pb::CommandResponse> {
    let (name, cmd, arg) = command_request(e, &req)?;
    let Some(arg) = arg else {
        // Let the graph name the class and list its commands.
        return e
            .command(&name, &cmd, &Value::map())
            .map(|_| pb::CommandResponse::default());
    };
    let class = e.graph().class_of(&name)?;
    let out = e.command(&name, &cmd, &arg)?;
    if class.command(&cmd).is_some_and(|s| s.mutates) {
        resync(e);
    }
    Ok(pb::CommandResponse {
        error: None,
        data: Some(command_response(class, &name, &cmd, out)?),
    })
}

/// Keeps XDP offloads in step with a change to the pipeline (an ExactMatch's rules, a
/// connection, a module gone).
pub(super) fn resync(e: &mut Engine) {
    if crate::offload::any() {
        crate::offload::resync(e);
    }
}

fn mempool_dumps(e: &Engine, socket: i32) -> Result<pb::DumpMempoolResponse> {
    if socket != -1 && socket != 0 {
        return Err(Error::invalid(format!(
            "socket {socket} has no packet pool (Bessemer has one pool, on socket 0; \
             -1 means all)"
        )));
    }
    let s = e.pool().stats();
    let cap = s.capacity.min(u32::MAX as usize) as u32;
    let free = s.free.min(u32::MAX as usize) as u32;
    Ok(pb::DumpMempoolResponse {
        error: None,
        dumps: vec![pb::MempoolDump {
            socket: 0,
            initialized: true,
            mp_size: cap,
            mp_cache_size: 512,
            mp_element_size: 4096 + 256,
            mp_populated_size: cap,
            mp_available_count: free,
            mp_in_use_count: cap.saturating_sub(free),
            ring_count: free,
            ring_free_count: cap.saturating_sub(free),
            ring_bytes: 0,
        }],
    })
}

//! The `bess.pb.BESSControl` service on top of [`Engine`].
//!
//! Control RPCs are serialised by one mutex around the engine (as BESS serialises them) and
//! run on tokio's blocking pool. Every failure is reported in the response's
//! `error { code, errmsg }` with an errno code; the gRPC status stays OK, as with BESS.

// tonic's handler signature returns `Result<_, Status>`; Status is large, and not ours.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bessemer_core::engine::{WorkerState, MAX_WORKERS};
use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::{Policy, Resource, TaskId, TcInfo};
use bessemer_core::{AccessMode, AttrOffset, Engine, Error, Result, Value};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::convert::{self, truncate};
use crate::pb;

/// The version string GetVersion reports.
pub const VERSION: &str = concat!("bessemer ", env!("CARGO_PKG_VERSION"));

/// Longest name (module, class, port, ...) accepted in a request.
pub use bessemer_core::graph::MAX_NAME_LEN;

/// Port driver names BESS has (those Bessemer lacks are refused with ENOTSUP).
const BESS_DRIVERS: &[&str] = &["PCAPPort", "UnixSocketPort", "VPort", "ZeroCopyVPort"];

/// The engine shared by the RPC handlers.
pub type SharedEngine = Arc<Mutex<Engine>>;

/// The service implementation.
pub struct Control {
    engine: SharedEngine,
    kill: watch::Sender<bool>,
}

impl Control {
    /// A service driving `engine`; KillBess sets `kill` to true.
    pub fn new(engine: SharedEngine, kill: watch::Sender<bool>) -> Control {
        Control { engine, kill }
    }

    /// Runs `f` on the engine in the blocking pool, with the control lock held. A panic in
    /// the engine or a module becomes an EFAULT error instead of taking the daemon down.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Engine) -> Result<T> + Send + 'static,
    {
        let engine = self.engine.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut g = engine.lock().unwrap_or_else(|p| p.into_inner());
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut g))) {
                Ok(r) => r,
                Err(p) => Err(internal(&p)),
            }
        })
        .await;
        r.unwrap_or_else(|e| {
            Err(Error::new(
                libc::EFAULT,
                format!("internal error: request task failed: {e}"),
            ))
        })
    }
}

fn internal(p: &Box<dyn std::any::Any + Send>) -> Error {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    tracing::error!("internal error while handling a request: {what}");
    Error::new(
        libc::EFAULT,
        format!("internal error: {what} (the request was abandoned)"),
    )
}

/// Responses that carry an `error` field.
trait Reply: Default {
    fn set_error(&mut self, e: pb::Error);
}

macro_rules! reply {
    ($($t:ident),* $(,)?) => {
        $(impl Reply for pb::$t {
            fn set_error(&mut self, e: pb::Error) {
                self.error = Some(e);
            }
        })*
    };
}

reply!(
    EmptyResponse,
    VersionResponse,
    ListPluginsResponse,
    ListWorkersResponse,
    ListTcsResponse,
    CheckSchedulingConstraintsResponse,
    GetTcStatsResponse,
    ListDriversResponse,
    GetDriverInfoResponse,
    ListPortsResponse,
    CreatePortResponse,
    GetPortConfResponse,
    GetPortStatsResponse,
    GetLinkStatusResponse,
    ListMclassResponse,
    GetMclassInfoResponse,
    ListModulesResponse,
    CreateModuleResponse,
    GetModuleInfoResponse,
    DumpMempoolResponse,
    CommandResponse,
    ListGateHookClassResponse,
    GetGateHookClassInfoResponse,
    ConfigureGateHookResponse,
    ListGateHooksResponse,
);

type RpcResult<T> = std::result::Result<Response<T>, Status>;

/// Wraps a result into a response: errors go into `error`, the status stays OK.
fn answer<T: Reply>(rpc: &str, r: Result<T>) -> RpcResult<T> {
    Ok(Response::new(match r {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(rpc, code = e.code, "{}", truncate(&e.msg, 500));
            let mut t = T::default();
            t.set_error(pb::Error {
                code: e.code,
                errmsg: e.msg,
            });
            t
        }
    }))
}

fn empty(rpc: &str, r: Result<()>) -> RpcResult<pb::EmptyResponse> {
    answer(rpc, r.map(|_| pb::EmptyResponse::default()))
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::unsupported(what)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A required name field: non-empty and of sane length.
fn need_name(s: &str, what: &str) -> Result<String> {
    if s.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    check_len(s, what)?;
    Ok(s.to_string())
}

fn check_len(s: &str, what: &str) -> Result<()> {
    if s.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} is too long ({} bytes; at most {MAX_NAME_LEN}): '{}'",
            s.len(),
            truncate(s, 64)
        )));
    }
    Ok(())
}

/// A worker id from a request: 0..MAX_WORKERS.
fn wid_of(wid: i64) -> Result<usize> {
    if wid < 0 || wid >= MAX_WORKERS as i64 {
        return Err(Error::invalid(format!(
            "worker id {wid} is out of range (0..={})",
            MAX_WORKERS - 1
        )));
    }
    Ok(wid as usize)
}

/// BESS's MAX_TASKS_PER_MODULE: task ids beyond it are EINVAL, missing ones below it ENOENT.
const MAX_TASKS_PER_MODULE: usize = 32;

/// A worker id where -1 means any worker (BESS's `Worker::kAnyWorker`).
fn wid_or_any(wid: i64) -> Result<Option<usize>> {
    if wid == -1 {
        Ok(None)
    } else {
        wid_of(wid).map(Some).map_err(|_| {
            Error::invalid(format!(
                "'wid' must be -1 or between 0 and {} (got {wid})",
                MAX_WORKERS - 1
            ))
        })
    }
}

fn gate_of(g: u64, what: &str) -> Result<u16> {
    if g >= MAX_GATES as u64 {
        return Err(Error::invalid(format!(
            "{what} {g} is out of range (gates are 0..={})",
            MAX_GATES - 1
        )));
    }
    Ok(g as u16)
}

fn resource_of(s: &str) -> Result<Resource> {
    s.parse::<Resource>().map_err(Error::invalid)
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

/// Waits (at most 1 s) until a resumed worker has left its pause loop, so that ListWorkers
/// right after ResumeAll/ResumeWorker reports it running.
fn await_running(e: &Engine, wid: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while matches!(e.worker_state(wid), Ok(WorkerState::Paused))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// The module and task index of a task id.
fn task_owner(e: &Engine, t: TaskId) -> Option<(String, usize)> {
    let g = e.graph();
    let m = g.task_module(t)?.to_string();
    let idx = g.tasks_of(&m).ok()?.iter().position(|&x| x == t)?;
    Some((m, idx))
}

fn traffic_class(
    e: &Engine,
    wid: usize,
    info: &TcInfo,
    policies: &HashMap<String, Policy>,
) -> pb::TrafficClass {
    let parent = info.parent.clone().unwrap_or_default();
    let arg = match policies.get(&parent) {
        Some(Policy::Priority) => Some(pb::traffic_class::Arg::Priority(info.priority as i64)),
        Some(Policy::WeightedFair { .. }) => Some(pb::traffic_class::Arg::Share(info.share as i64)),
        _ => None,
    };
    let (mut resource, mut limit, mut max_burst) = (String::new(), HashMap::new(), HashMap::new());
    match &info.policy {
        Policy::WeightedFair { resource: r } => resource = r.name().to_string(),
        Policy::RateLimit {
            resource: r,
            limit: l,
            max_burst: b,
        } => {
            resource = r.name().to_string();
            limit.insert(r.name().to_string(), (*l).min(i64::MAX as u64) as i64);
            max_burst.insert(r.name().to_string(), (*b).min(i64::MAX as u64) as i64);
        }
        _ => {}
    }
    let (leaf_module_name, leaf_module_taskid) = info
        .task
        .and_then(|t| task_owner(e, t))
        .map(|(m, i)| (m, i as u64))
        .unwrap_or_default();
    pb::TrafficClass {
        parent,
        name: info.name.clone(),
        blocked: info.blocked,
        policy: info.policy.name().to_string(),
        resource,
        arg,
        wid: wid as i64,
        limit,
        max_burst,
        leaf_module_name,
        leaf_module_taskid,
    }
}

/// The resource of a weighted_fair / rate_limit class from `resource` and the limit maps.
fn class_resource(tc: &pb::TrafficClass, current: Option<Resource>) -> Result<Option<Resource>> {
    let mut r = if tc.resource.is_empty() {
        None
    } else {
        Some(resource_of(&tc.resource)?)
    };
    for (what, m) in [("limit", &tc.limit), ("max_burst", &tc.max_burst)] {
        if m.len() > 1 {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            return Err(Error::invalid(format!(
                "traffic class '{}': {what} must have one key (the resource), got {keys:?}",
                tc.name
            )));
        }
        if let Some(k) = m.keys().next() {
            let kr = resource_of(k)?;
            match r {
                Some(x) if x != kr => {
                    return Err(Error::invalid(format!(
                        "traffic class '{}': {what} is keyed by '{k}' but the resource is '{x}'",
                        tc.name
                    )))
                }
                _ => r = Some(kr),
            }
        }
    }
    Ok(r.or(current))
}

fn limit_value(m: &HashMap<String, i64>, what: &str, name: &str) -> Result<Option<u64>> {
    match m.values().next() {
        None => Ok(None),
        Some(&v) if v < 0 => Err(Error::invalid(format!(
            "traffic class '{name}': {what} {v} is negative"
        ))),
        Some(&v) => Ok(Some(v as u64)),
    }
}

/// The policy a TrafficClass message asks for, completed from `current` (for updates).
fn policy_of(tc: &pb::TrafficClass, current: Option<&Policy>) -> Result<Policy> {
    let kind = if tc.policy.is_empty() {
        match current {
            Some(p) => p.name().to_string(),
            None => {
                return Err(Error::invalid(format!(
                    "traffic class '{}': policy is empty (one of priority, weighted_fair, \
                     round_robin, rate_limit)",
                    tc.name
                )))
            }
        }
    } else {
        tc.policy.clone()
    };
    let cur_resource = match current {
        Some(Policy::WeightedFair { resource }) | Some(Policy::RateLimit { resource, .. }) => {
            Some(*resource)
        }
        _ => None,
    };
    Ok(match kind.as_str() {
        "priority" => Policy::Priority,
        "round_robin" => Policy::RoundRobin,
        "weighted_fair" => Policy::WeightedFair {
            resource: class_resource(tc, cur_resource)?.ok_or_else(|| {
                Error::invalid(format!(
                    "traffic class '{}': weighted_fair needs a resource \
                     (count, cycle, packet or bit)",
                    tc.name
                ))
            })?,
        },
        "rate_limit" => {
            let resource = class_resource(tc, cur_resource)?.ok_or_else(|| {
                Error::invalid(format!(
                    "traffic class '{}': rate_limit needs a resource (count, cycle, packet or \
                     bit), e.g. limit {{\"bit\": 1000000}}",
                    tc.name
                ))
            })?;
            let (cur_limit, cur_burst) = match current {
                Some(Policy::RateLimit {
                    limit, max_burst, ..
                }) => (*limit, *max_burst),
                _ => (0, 0),
            };
            Policy::RateLimit {
                resource,
                limit: limit_value(&tc.limit, "limit", &tc.name)?.unwrap_or(cur_limit),
                max_burst: limit_value(&tc.max_burst, "max_burst", &tc.name)?.unwrap_or(cur_burst),
            }
        }
        "leaf" => {
            return Err(Error::invalid(format!(
                "traffic class '{}': leaf classes are created by modules for their tasks; \
                 attach a task with UpdateTcParent (leaf_module_name) instead",
                tc.name
            )))
        }
        other => {
            return Err(Error::invalid(format!(
                "traffic class '{}': unknown policy '{}' (expected priority, weighted_fair, \
                 round_robin or rate_limit)",
                tc.name,
                truncate(other, 64)
            )))
        }
    })
}

/// Priority and share from the `arg` oneof, defaulting to `cur`.
fn prio_share(tc: &pb::TrafficClass, cur: (i32, u32)) -> Result<(i32, u32)> {
    match tc.arg {
        None => Ok(cur),
        Some(pb::traffic_class::Arg::Priority(p)) => {
            let p = i32::try_from(p).map_err(|_| {
                Error::invalid(format!(
                    "traffic class '{}': priority {p} is out of range",
                    tc.name
                ))
            })?;
            Ok((p, cur.1))
        }
        Some(pb::traffic_class::Arg::Share(s)) => {
            let s = u32::try_from(s).ok().filter(|&s| s > 0).ok_or_else(|| {
                Error::invalid(format!(
                    "traffic class '{}': share {s} is out of range (1..={})",
                    tc.name,
                    bessemer_core::sched::MAX_SHARE
                ))
            })?;
            Ok((cur.0, s))
        }
    }
}

fn find_tc(e: &Engine, name: &str) -> Result<(usize, TcInfo)> {
    e.list_tcs()
        .into_iter()
        .find(|(_, i)| i.name == name)
        .ok_or_else(|| Error::not_found(format!("traffic class '{name}' does not exist")))
}

/// BESS's AttachTc: a child of a `priority` class must say its priority, a child of a
/// `weighted_fair` class its share (EINVAL otherwise).
fn child_arg_given(e: &Engine, tc: &pb::TrafficClass) -> Result<()> {
    use pb::traffic_class::Arg;
    let (_, parent) = find_tc(e, &tc.parent)?;
    match (parent.policy.name(), &tc.arg) {
        ("priority", Some(Arg::Priority(_))) | ("weighted_fair", Some(Arg::Share(_))) => Ok(()),
        ("priority", _) => Err(Error::invalid(format!(
            "No priority specified (parent '{}' is a priority class)",
            tc.parent
        ))),
        ("weighted_fair", _) => Err(Error::invalid(format!(
            "No share specified (parent '{}' is a weighted_fair class)",
            tc.parent
        ))),
        _ => Ok(()),
    }
}

/// `Some(parent)` unless the parent is the worker's implicit root.
fn parent_arg(e: &Engine, parent: Option<&str>) -> Option<String> {
    let p = parent?;
    match find_tc(e, p) {
        Ok((_, i)) if i.parent.is_none() => None,
        _ => Some(p.to_string()),
    }
}

fn add_tc(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
    let name = need_name(&tc.name, "traffic class name")?;
    if name.starts_with('!') {
        return Err(Error::invalid(format!(
            "traffic class names starting with '!' are reserved: '{}'",
            truncate(&name, 64)
        )));
    }
    check_len(&tc.parent, "parent class name")?;
    let policy = policy_of(&tc, None)?;
    let (priority, share) = prio_share(&tc, (0, 1))?;
    let want = wid_or_any(tc.wid)?;
    let (wid, parent) = if tc.parent.is_empty() {
        (e.worker_for(want)?, None)
    } else {
        if want.is_some() {
            return Err(Error::invalid(format!(
                "traffic class '{name}': both 'parent' and 'wid' have been specified \
                 (a class goes on its parent's worker; leave wid -1)"
            )));
        }
        let pw = e.tc_worker(&tc.parent)?;
        child_arg_given(e, &tc)?;
        (pw, parent_arg(e, Some(&tc.parent)))
    };
    if find_tc(e, &name).is_ok() {
        // BESS answers EINVAL, not EEXIST, for a traffic class name in use.
        return Err(Error::invalid(format!("Name '{name}' already exists")));
    }
    e.add_tc(wid, &name, policy, parent.as_deref(), priority, share)
}

fn update_tc_params(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
    let name = need_name(&tc.name, "traffic class name")?;
    let (_, cur) = find_tc(e, &name)?;
    if !matches!(cur.policy.name(), "rate_limit" | "weighted_fair") {
        return Err(Error::invalid(format!(
            "traffic class '{name}' is a {}: only 'rate_limit' and 'weighted_fair' can be updated",
            cur.policy.name()
        )));
    }
    let policy = policy_of(&tc, Some(&cur.policy))?;
    if policy.name() != cur.policy.name() {
        return Err(Error::invalid(format!(
            "traffic class '{name}' is a {}; its policy cannot change to {}",
            cur.policy.name(),
            policy.name()
        )));
    }
    let (priority, share) = prio_share(&tc, (cur.priority, cur.share))?;
    e.update_tc(&name, policy)?;
    if (priority, share) != (cur.priority, cur.share) {
        let parent = parent_arg(e, cur.parent.as_deref());
        e.set_tc_parent(&name, parent.as_deref(), priority, share)?;
    }
    Ok(())
}

fn update_tc_parent(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
    check_len(&tc.parent, "parent class name")?;
    check_len(&tc.leaf_module_name, "module name")?;
    let parent = if tc.parent.is_empty() {
        None
    } else {
        if tc.wid != -1 {
            return Err(Error::invalid(
                "both 'parent' and 'wid' have been specified (leave wid -1 with a parent)",
            ));
        }
        child_arg_given(e, &tc)?;
        Some(tc.parent.clone())
    };
    if !tc.leaf_module_name.is_empty() {
        // Attach a module's task (BESS's attach_task).
        let module = tc.leaf_module_name.clone();
        let idx = usize::try_from(tc.leaf_module_taskid).map_err(|_| {
            Error::invalid(format!("task id {} is out of range", tc.leaf_module_taskid))
        })?;
        let tasks = e.graph().tasks_of(&module)?;
        if idx >= MAX_TASKS_PER_MODULE {
            return Err(Error::invalid(format!(
                "'taskid' must be between 0 and {}",
                MAX_TASKS_PER_MODULE - 1
            )));
        }
        if idx >= tasks.len() {
            return Err(Error::not_found(format!(
                "module '{module}' has {} task(s); no task {idx}",
                tasks.len()
            )));
        }
        let old = e.task_places(&module)?.into_iter().nth(idx);
        let target = match &parent {
            Some(p) => Some(e.tc_worker(p)?),
            None => wid_or_any(tc.wid)?,
        };
        e.attach_task(&module, idx, None, target)?;
        if parent.is_none() && tc.arg.is_none() {
            return Ok(());
        }
        let leaf = e
            .task_places(&module)?
            .into_iter()
            .nth(idx)
            .map(|p| p.leaf)
            .ok_or_else(|| Error::not_found(format!("task {idx} of '{module}' vanished")))?;
        let (priority, share) = prio_share(&tc, (0, 1))?;
        let pa = parent_arg(e, parent.as_deref());
        if let Err(err) = e.set_tc_parent(&leaf, pa.as_deref(), priority, share) {
            // Put the task back where it was.
            if let Some(w) = old.and_then(|o| o.wid) {
                let _ = e.attach_task(&module, idx, None, Some(w));
            }
            return Err(err);
        }
        return Ok(());
    }
    let name = need_name(&tc.name, "traffic class name (or leaf_module_name)")?;
    let (_, cur) = find_tc(e, &name)?;
    let (priority, share) = prio_share(&tc, (cur.priority, cur.share))?;
    let pa = parent_arg(e, parent.as_deref());
    e.set_tc_parent(&name, pa.as_deref(), priority, share)
}

fn reset_tcs(e: &mut Engine) -> Result<()> {
    // Tasks under user classes go back to their worker's root.
    let tcs: HashMap<String, TcInfo> = e
        .list_tcs()
        .into_iter()
        .map(|(_, i)| (i.name.clone(), i))
        .collect();
    let modules: Vec<String> = e.graph().modules().into_iter().map(|m| m.name).collect();
    for m in modules {
        for (idx, place) in e.task_places(&m)?.into_iter().enumerate() {
            let (Some(w), Some(info)) = (place.wid, tcs.get(&place.leaf)) else {
                continue;
            };
            let under_user = info.parent.as_deref().is_some_and(|p| !p.starts_with('!'));
            if under_user {
                e.attach_task(&m, idx, None, Some(w))?;
            }
        }
    }
    // Remove user classes, children first.
    loop {
        let user: Vec<TcInfo> = e
            .list_tcs()
            .into_iter()
            .map(|(_, i)| i)
            .filter(|i| !i.name.starts_with('!'))
            .collect();
        if user.is_empty() {
            return Ok(());
        }
        let mut removed = false;
        let mut last = None;
        for i in user.iter().filter(|i| i.children.is_empty()) {
            match e.remove_tc(&i.name) {
                Ok(()) => removed = true,
                Err(err) => last = Some(err),
            }
        }
        if !removed {
            return Err(last.unwrap_or_else(|| {
                Error::busy(format!(
                    "traffic class '{}' could not be removed",
                    user[0].name
                ))
            }));
        }
    }
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
fn configure_gate_hook(e: &mut Engine, h: pb::GateHookInfo, enable: bool) -> Result<String> {
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

fn list_hooks(e: &Engine) -> Vec<pb::GateHookInfo> {
    use bessemer_core::hook::GateDir;
    e.graph()
        .hooks()
        .into_iter()
        .map(|h| hook_info(&h.module, h.dir == GateDir::In, h.gate, h.class, &h.name))
        .collect()
}

/// Runs a gate hook command as BESS does: the hook is found by module, gate and hook name.
fn gate_hook_command(e: &Engine, h: &pb::GateHookInfo, cmd: &str) -> Result<pb::CommandResponse> {
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

fn module_info(e: &Engine, name: &str) -> Result<pb::GetModuleInfoResponse> {
    let g = e.graph();
    let class = g.class_of(name)?;
    let desc = g
        .modules()
        .into_iter()
        .find(|m| m.name == name)
        .map(|m| m.desc)
        .unwrap_or_default();
    let ts = now();
    let conns = g.connections();
    let hooks = list_hooks(e);
    let mut igates: Vec<pb::get_module_info_response::IGate> = Vec::new();
    let mut ins: Vec<_> = conns.iter().filter(|c| c.to == name).collect();
    ins.sort_by_key(|c| (c.igate, c.from.clone(), c.ogate));
    for c in ins {
        if igates.last().is_none_or(|g| g.igate != c.igate as u64) {
            let cnt = g.igate_counts(name, c.igate)?;
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
    let deadends = g
        .drops_of(name)?
        .into_iter()
        .find(|(r, _)| r == "deadend")
        .map(|(_, n)| n)
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
    })
}

/// BESS's CheckSchedulingConstraints: with every worker paused, orphan tasks are placed first
/// (so every task is checked); a module run by more workers than its class allows is a fatal
/// violation, named in `modules` (the log names the workers too).
fn check_constraints(e: &mut Engine) -> Result<pb::CheckSchedulingConstraintsResponse> {
    if !e
        .list_workers()
        .iter()
        .any(|w| w.state == WorkerState::Running)
    {
        e.attach_orphans()?;
    }
    let violations = e.constraint_violations();
    for (m, ws) in &violations {
        tracing::warn!(
            "scheduling constraint violated: module '{m}' is run by workers {ws:?}, but its \
             class allows one worker; attach the tasks that reach it to one worker or put a \
             Queue in front of it"
        );
    }
    Ok(pb::CheckSchedulingConstraintsResponse {
        error: None,
        fatal: !violations.is_empty(),
        violations: Vec::new(),
        modules: violations
            .into_iter()
            .map(|(name, _)| pb::check_scheduling_constraints_response::ViolatingModule { name })
            .collect(),
    })
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

fn module_command(e: &mut Engine, req: pb::CommandRequest) -> Result<pb::CommandResponse> {
    let name = need_name(&req.name, "module name")?;
    let cmd = need_name(&req.cmd, "command name")?;
    let class = e.graph().class_of(&name)?;
    let Some(spec) = class.command(&cmd) else {
        // Let the graph name the class and list its commands.
        return e
            .command(&name, &cmd, &Value::map())
            .map(|_| pb::CommandResponse::default());
    };
    let what = format!("command '{cmd}' of module '{name}' ({})", class.name);
    let arg = convert::any_to_value(req.arg.as_ref(), Some(spec.arg_type), &what)?;
    let out = e.command(&name, &cmd, &arg)?;
    let ty = convert::response_type(class.name, &cmd);
    let out = if ty.ends_with(".EmptyArg") && !matches!(&out, Value::Null) && out != Value::map() {
        tracing::warn!(
            "{what} returned data but the protocol has no response message for it; \
             answering with an EmptyArg"
        );
        Value::Null
    } else {
        out
    };
    let data = convert::value_to_any(&ty, &out).map_err(|err| {
        Error::invalid(format!(
            "{what} ran, but its result cannot be encoded as {ty}: {}",
            err.msg
        ))
    })?;
    Ok(pb::CommandResponse {
        error: None,
        data: Some(data),
    })
}

fn dump_mempool(e: &Engine, socket: i32) -> Result<pb::DumpMempoolResponse> {
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

fn mac_string(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || {
        Error::invalid(format!(
            "'{}' is not a MAC address (aa:bb:cc:dd:ee:ff)",
            truncate(s, 64)
        ))
    };
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(m)
}

#[tonic::async_trait]
impl pb::bess_control_server::BessControl for Control {
    async fn get_version(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::VersionResponse> {
        answer(
            "GetVersion",
            Ok(pb::VersionResponse {
                error: None,
                version: VERSION.to_string(),
            }),
        )
    }

    async fn reset_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty("ResetAll", self.run(|e| e.reset_all()).await)
    }

    async fn kill_bess(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        tracing::info!("KillBess: shutting down");
        let kill = self.kill.clone();
        // Let this answer reach the client before the server stops.
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let _ = kill.send(true);
        });
        empty("KillBess", Ok(()))
    }

    async fn import_plugin(
        &self,
        r: Request<pb::ImportPluginRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let p = truncate(&r.get_ref().path, 256);
        empty(
            "ImportPlugin",
            Err(unsupported(format!(
                "cannot import '{p}': Bessemer does not load C++ plugins"
            ))),
        )
    }

    async fn unload_plugin(
        &self,
        r: Request<pb::UnloadPluginRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let p = truncate(&r.get_ref().path, 256);
        empty(
            "UnloadPlugin",
            Err(unsupported(format!(
                "cannot unload '{p}': Bessemer does not load C++ plugins"
            ))),
        )
    }

    async fn list_plugins(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListPluginsResponse> {
        // No plugin is ever loaded: the list is empty (ImportPlugin answers ENOTSUP).
        answer("ListPlugins", Ok(pb::ListPluginsResponse::default()))
    }

    async fn pause_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty("PauseAll", self.run(|e| e.pause_all()).await)
    }

    async fn pause_worker(
        &self,
        r: Request<pb::PauseWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let wid = r.get_ref().wid;
        empty(
            "PauseWorker",
            // As BESS: pausing a worker that does not exist does nothing.
            self.run(move |e| {
                let w = wid_of(wid)?;
                if e.worker_state(w).is_err() {
                    return Ok(());
                }
                e.pause_worker(w)
            })
            .await,
        )
    }

    async fn resume_worker(
        &self,
        r: Request<pb::ResumeWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let wid = r.get_ref().wid;
        empty(
            "ResumeWorker",
            self.run(move |e| {
                let w = wid_of(wid)?;
                if e.worker_state(w).is_err() {
                    return Ok(());
                }
                e.resume_worker(w)?;
                await_running(e, w);
                Ok(())
            })
            .await,
        )
    }

    async fn resume_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty(
            "ResumeAll",
            self.run(|e| {
                e.resume_all()?;
                for w in e.worker_ids() {
                    await_running(e, w);
                }
                Ok(())
            })
            .await,
        )
    }

    async fn reset_workers(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty(
            "ResetWorkers",
            self.run(|e| {
                for w in e.worker_ids() {
                    e.destroy_worker(w)?;
                }
                Ok(())
            })
            .await,
        )
    }

    async fn list_workers(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListWorkersResponse> {
        let r = self
            .run(|e| {
                Ok(pb::ListWorkersResponse {
                    error: None,
                    workers_status: e
                        .list_workers()
                        .into_iter()
                        .map(|w| pb::list_workers_response::WorkerStatus {
                            wid: w.wid as i64,
                            core: w.core as i64,
                            running: w.state == WorkerState::Running,
                            num_tcs: w.num_tcs as i64,
                            silent_drops: 0,
                        })
                        .collect(),
                })
            })
            .await;
        answer("ListWorkers", r)
    }

    async fn add_worker(&self, r: Request<pb::AddWorkerRequest>) -> RpcResult<pb::EmptyResponse> {
        let req = r.into_inner();
        let res = async {
            let wid = wid_of(req.wid)?;
            if req.core < 0 || req.core > u32::MAX as i64 {
                return Err(Error::invalid(format!("core {} does not exist", req.core)));
            }
            // BESS's schedulers: "" (default) and "experimental"; ours is one scheduler.
            if !matches!(req.scheduler.as_str(), "" | "default" | "experimental") {
                return Err(Error::invalid(format!(
                    "Invalid scheduler {} (Bessemer has only the default scheduler)",
                    truncate(&req.scheduler, 64)
                )));
            }
            let core = req.core as usize;
            self.run(move |e| e.add_worker(wid, core)).await
        }
        .await;
        empty("AddWorker", res)
    }

    async fn destroy_worker(
        &self,
        r: Request<pb::DestroyWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let wid = r.get_ref().wid;
        empty(
            "DestroyWorker",
            self.run(move |e| e.destroy_worker(wid_of(wid)?)).await,
        )
    }

    async fn reset_tcs(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty("ResetTcs", self.run(reset_tcs).await)
    }

    async fn list_tcs(&self, r: Request<pb::ListTcsRequest>) -> RpcResult<pb::ListTcsResponse> {
        let wid = r.get_ref().wid;
        let res = self
            .run(move |e| {
                let only = if wid < 0 { None } else { Some(wid_of(wid)?) };
                let all = e.list_tcs();
                let policies: HashMap<String, Policy> = all
                    .iter()
                    .map(|(_, i)| (i.name.clone(), i.policy.clone()))
                    .collect();
                let classes_status = all
                    .iter()
                    .filter(|(w, _)| only.is_none_or(|o| o == *w))
                    .map(|(w, i)| pb::list_tcs_response::TrafficClassStatus {
                        class: Some(traffic_class(e, *w, i, &policies)),
                        parent: i.parent.clone().unwrap_or_default(),
                    })
                    .collect();
                Ok(pb::ListTcsResponse {
                    error: None,
                    classes_status,
                })
            })
            .await;
        answer("ListTcs", res)
    }

    async fn check_scheduling_constraints(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::CheckSchedulingConstraintsResponse> {
        let r = self.run(check_constraints).await;
        answer("CheckSchedulingConstraints", r)
    }

    async fn add_tc(&self, r: Request<pb::AddTcRequest>) -> RpcResult<pb::EmptyResponse> {
        let tc = r.into_inner().class.unwrap_or_default();
        empty("AddTc", self.run(move |e| add_tc(e, tc)).await)
    }

    async fn update_tc_params(
        &self,
        r: Request<pb::UpdateTcParamsRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let tc = r.into_inner().class.unwrap_or_default();
        empty(
            "UpdateTcParams",
            self.run(move |e| update_tc_params(e, tc)).await,
        )
    }

    async fn update_tc_parent(
        &self,
        r: Request<pb::UpdateTcParentRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let tc = r.into_inner().class.unwrap_or_default();
        empty(
            "UpdateTcParent",
            self.run(move |e| update_tc_parent(e, tc)).await,
        )
    }

    async fn get_tc_stats(
        &self,
        r: Request<pb::GetTcStatsRequest>,
    ) -> RpcResult<pb::GetTcStatsResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| {
                let name = need_name(&name, "traffic class name")?;
                let (_, i) = find_tc(e, &name)?;
                Ok(pb::GetTcStatsResponse {
                    error: None,
                    timestamp: now(),
                    count: i.stats.count,
                    cycles: i.stats.cycles,
                    packets: i.stats.packets,
                    bits: i.stats.bits,
                })
            })
            .await;
        answer("GetTcStats", res)
    }

    async fn list_drivers(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListDriversResponse> {
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

    async fn get_driver_info(
        &self,
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

    async fn reset_ports(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        let res = self
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
                Ok(())
            })
            .await;
        empty("ResetPorts", res)
    }

    async fn list_ports(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::ListPortsResponse> {
        let res = self
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
                            mac_addr: mac_string(&p.port().conf().mac_addr),
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

    async fn create_port(
        &self,
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
            self.run(move |e| {
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
                    mac_addr: mac_string(&h.port().conf().mac_addr),
                })
            })
            .await
        }
        .await;
        answer("CreatePort", res)
    }

    async fn destroy_port(
        &self,
        r: Request<pb::DestroyPortRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| {
                let n = need_name(&name, "port name")?;
                e.ports().destroy(&n)
            })
            .await;
        empty("DestroyPort", res)
    }

    async fn set_port_conf(
        &self,
        r: Request<pb::SetPortConfRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        let req = r.into_inner();
        let res = self
            .run(move |e| {
                let h = e.ports().get(&need_name(&req.name, "port name")?)?;
                let c = req.conf.unwrap_or_default();
                let cur = h.port().conf();
                let conf = bessemer_core::port::PortConf {
                    mac_addr: if c.mac_addr.is_empty() {
                        cur.mac_addr
                    } else {
                        parse_mac(&c.mac_addr)?
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

    async fn get_port_conf(
        &self,
        r: Request<pb::GetPortConfRequest>,
    ) -> RpcResult<pb::GetPortConfResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| {
                let c = e
                    .ports()
                    .get(&need_name(&name, "port name")?)?
                    .port()
                    .conf();
                Ok(pb::GetPortConfResponse {
                    error: None,
                    conf: Some(pb::PortConf {
                        mac_addr: mac_string(&c.mac_addr),
                        mtu: c.mtu,
                        admin_up: c.admin_up,
                    }),
                })
            })
            .await;
        answer("GetPortConf", res)
    }

    async fn get_port_stats(
        &self,
        r: Request<pb::GetPortStatsRequest>,
    ) -> RpcResult<pb::GetPortStatsResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| {
                let (i, o) = e.ports().get(&need_name(&name, "port name")?)?.counts();
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

    async fn get_link_status(
        &self,
        r: Request<pb::GetLinkStatusRequest>,
    ) -> RpcResult<pb::GetLinkStatusResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| {
                let l = e
                    .ports()
                    .get(&need_name(&name, "port name")?)?
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

    async fn list_mclass(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::ListMclassResponse> {
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

    async fn get_mclass_info(
        &self,
        r: Request<pb::GetMclassInfoRequest>,
    ) -> RpcResult<pb::GetMclassInfoResponse> {
        answer("GetMclassInfo", mclass_info(&r.get_ref().name))
    }

    async fn reset_modules(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        empty("ResetModules", self.run(|e| e.reset_modules()).await)
    }

    async fn list_modules(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListModulesResponse> {
        let r = self
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

    async fn create_module(
        &self,
        r: Request<pb::CreateModuleRequest>,
    ) -> RpcResult<pb::CreateModuleResponse> {
        let req = r.into_inner();
        let res = async {
            if req.mclass.is_empty() {
                return Err(Error::invalid("Missing 'mclass' field"));
            }
            check_len(&req.mclass, "module class name")?;
            check_len(&req.name, "module name")?;
            let class = bessemer_modules::find(&req.mclass).ok_or_else(|| {
                Error::not_found(format!("module class '{}' does not exist", req.mclass))
            })?;
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
            let name = req.name;
            self.run(move |e| {
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

    async fn destroy_module(
        &self,
        r: Request<pb::DestroyModuleRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let name = r.into_inner().name;
        empty(
            "DestroyModule",
            self.run(move |e| e.destroy_module(&need_name(&name, "module name")?))
                .await,
        )
    }

    async fn get_module_info(
        &self,
        r: Request<pb::GetModuleInfoRequest>,
    ) -> RpcResult<pb::GetModuleInfoResponse> {
        let name = r.into_inner().name;
        let res = self
            .run(move |e| module_info(e, &need_name(&name, "module name")?))
            .await;
        answer("GetModuleInfo", res)
    }

    async fn connect_modules(
        &self,
        r: Request<pb::ConnectModulesRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let req = r.into_inner();
        let res = self
            .run(move |e| {
                let m1 = need_name(&req.m1, "m1 (upstream module name)")?;
                let m2 = need_name(&req.m2, "m2 (downstream module name)")?;
                let og = gate_of(req.ogate, "ogate")?;
                let ig = gate_of(req.igate, "igate")?;
                e.connect(&m1, og, &m2, ig)
            })
            .await;
        empty("ConnectModules", res)
    }

    async fn disconnect_modules(
        &self,
        r: Request<pb::DisconnectModulesRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let req = r.into_inner();
        let res = self
            .run(move |e| {
                let name = need_name(&req.name, "module name")?;
                e.disconnect(&name, gate_of(req.ogate, "ogate")?)
            })
            .await;
        empty("DisconnectModules", res)
    }

    async fn dump_mempool(
        &self,
        r: Request<pb::DumpMempoolRequest>,
    ) -> RpcResult<pb::DumpMempoolResponse> {
        let socket = r.get_ref().socket;
        let res = self.run(move |e| dump_mempool(e, socket)).await;
        answer("DumpMempool", res)
    }

    async fn module_command(
        &self,
        r: Request<pb::CommandRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        let req = r.into_inner();
        let res = self.run(move |e| module_command(e, req)).await;
        answer("ModuleCommand", res)
    }

    async fn list_gate_hook_class(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListGateHookClassResponse> {
        answer(
            "ListGateHookClass",
            Ok(pb::ListGateHookClassResponse {
                error: None,
                names: HOOK_CLASSES.iter().map(|c| c.name.to_string()).collect(),
            }),
        )
    }

    async fn get_gate_hook_class_info(
        &self,
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

    async fn configure_gate_hook(
        &self,
        r: Request<pb::ConfigureGateHookRequest>,
    ) -> RpcResult<pb::ConfigureGateHookResponse> {
        let req = r.into_inner();
        let res = self
            .run(move |e| configure_gate_hook(e, req.hook.unwrap_or_default(), req.enable))
            .await;
        answer(
            "ConfigureGateHook",
            res.map(|name| pb::ConfigureGateHookResponse { error: None, name }),
        )
    }

    async fn list_gate_hooks(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListGateHooksResponse> {
        let res = self
            .run(|e| {
                Ok(pb::ListGateHooksResponse {
                    error: None,
                    hooks: list_hooks(e),
                })
            })
            .await;
        answer("ListGateHooks", res)
    }

    async fn gate_hook_command(
        &self,
        r: Request<pb::GateHookCommandRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        let req = r.into_inner();
        let res = self
            .run(move |e| gate_hook_command(e, &req.hook.unwrap_or_default(), &req.cmd))
            .await;
        answer("GateHookCommand", res)
    }

    async fn configure_resume_hook(
        &self,
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
}

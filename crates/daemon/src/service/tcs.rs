//! Traffic-class RPCs: AddTc, UpdateTcParams, UpdateTcParent, ListTcs, GetTcStats, ResetTcs,
//! and the conversions between `pb::TrafficClass` and the scheduler's policies.

use std::collections::HashMap;

use bessemer_core::sched::{Policy, Resource, TaskId, TcInfo};
use bessemer_core::{Engine, Error, Result};
use tonic::Request;

use super::{
    answer, check_len, check_room, empty, need_name, now, wid_of, wid_or_any, Control, RpcResult,
    MAX_TCS,
};
use crate::convert::truncate;
use crate::pb;

pub(super) async fn reset_tcs(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty("ResetTcs", ctl.run(remove_user_tcs).await)
}

pub(super) async fn list_tcs(
    ctl: &Control,
    r: Request<pb::ListTcsRequest>,
) -> RpcResult<pb::ListTcsResponse> {
    let wid = r.get_ref().wid;
    let res = ctl
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

pub(super) async fn add_tc(
    ctl: &Control,
    r: Request<pb::AddTcRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let tc = r.into_inner().class.unwrap_or_default();
    empty("AddTc", ctl.run(move |e| add_class(e, tc)).await)
}

pub(super) async fn update_tc_params(
    ctl: &Control,
    r: Request<pb::UpdateTcParamsRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let tc = r.into_inner().class.unwrap_or_default();
    empty(
        "UpdateTcParams",
        ctl.run(move |e| update_params(e, tc)).await,
    )
}

pub(super) async fn update_tc_parent(
    ctl: &Control,
    r: Request<pb::UpdateTcParentRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let tc = r.into_inner().class.unwrap_or_default();
    empty(
        "UpdateTcParent",
        ctl.run(move |e| update_parent(e, tc)).await,
    )
}

pub(super) async fn get_tc_stats(
    ctl: &Control,
    r: Request<pb::GetTcStatsRequest>,
) -> RpcResult<pb::GetTcStatsResponse> {
    let name = r.into_inner().name;
    let res = ctl
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

/// BESS's MAX_TASKS_PER_MODULE: task ids beyond it are EINVAL, missing ones below it ENOENT.
const MAX_TASKS_PER_MODULE: usize = 32;

fn resource_of(s: &str) -> Result<Resource> {
    s.parse::<Resource>().map_err(Error::invalid)
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

fn add_class(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
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
    check_room("traffic classes", e.list_tcs().len(), 1, MAX_TCS)?;
    e.add_tc(wid, &name, policy, parent.as_deref(), priority, share)
}

fn update_params(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
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

fn update_parent(e: &mut Engine, tc: pb::TrafficClass) -> Result<()> {
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

fn remove_user_tcs(e: &mut Engine) -> Result<()> {
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

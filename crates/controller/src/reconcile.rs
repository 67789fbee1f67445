//! The reconciler: for each BessemerPipeline, the Nodes its selector picks, the graph
//! rendered for each and applied to that node's bessemerd, the outcome written to the
//! status; nodes no longer selected are cleaned; a deleted pipeline is removed from every
//! node it reached (a finalizer holds the deletion until then).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::crd::{BessemerPipeline, BessemerPipelineStatus, NodeStatus};
use crate::daemon::{Access, Applied, Daemon, Failure};
use crate::graph;

/// Held on every pipeline until its modules are off every node.
pub const FINALIZER: &str = "bessemer.io/cleanup";
/// A Node annotation giving its bessemerd's control address (host:port), overriding the
/// node's InternalIP and the controller's --daemon-port.
pub const ADDRESS_ANNOTATION: &str = "bessemer.io/control-address";

pub struct Ctx {
    pub client: kube::Client,
    pub access: Access,
    pub daemon_port: u16,
    /// How often a pipeline is checked on its nodes without any change to it (a restarted
    /// daemon gets its graph back within this).
    pub resync: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("removal from node {0} failed: {1}")]
    Removal(String, String),
}

pub async fn reconcile(p: Arc<BessemerPipeline>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = p.namespace().unwrap_or_else(|| "default".into());
    let api: Api<BessemerPipeline> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, p, |ev| async {
        match ev {
            Event::Apply(p) => apply(&api, &p, &ctx).await,
            Event::Cleanup(p) => cleanup(&p, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    })
}

pub fn error_policy(p: Arc<BessemerPipeline>, e: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(pipeline = %p.name_any(), "{e}");
    Action::requeue(Duration::from_secs(5))
}

/// A node's control address: the annotation, else its InternalIP and the daemon port.
fn address_of(n: &Node, port: u16) -> Result<(String, Option<String>), String> {
    let ip = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone());
    if let Some(a) = n.annotations().get(ADDRESS_ANNOTATION) {
        return Ok((a.clone(), ip));
    }
    match &ip {
        Some(ip) if ip.contains(':') => Ok((format!("[{ip}]:{port}"), Some(ip.clone()))),
        Some(ip) => Ok((format!("{ip}:{port}"), Some(ip.clone()))),
        None => Err(format!(
            "node has neither an InternalIP nor the {ADDRESS_ANNOTATION} annotation"
        )),
    }
}

fn selector(p: &BessemerPipeline) -> ListParams {
    let s: Vec<String> = p
        .spec
        .node_selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if s.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(&s.join(","))
    }
}

async fn apply(
    api: &Api<BessemerPipeline>,
    p: &BessemerPipeline,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let selected = nodes.list(&selector(p)).await?.items;
    let prev: BTreeMap<String, NodeStatus> = p
        .status
        .as_ref()
        .map(|s| {
            s.nodes
                .iter()
                .map(|n| (n.node.clone(), n.clone()))
                .collect()
        })
        .unwrap_or_default();
    let name = p.name_any();

    let work = selected.iter().map(|n| {
        let node = n.name_any();
        let before = prev.get(&node).cloned().unwrap_or_else(|| NodeStatus {
            node: node.clone(),
            ..Default::default()
        });
        let addr = address_of(n, ctx.daemon_port);
        let name = name.clone();
        async move { apply_node(&name, p, ctx, before, addr).await }
    });
    let mut out: Vec<NodeStatus> = join_all(work).await;

    // Nodes that had the pipeline and are no longer selected (relabelled, or deleted).
    let selected_names: Vec<String> = selected.iter().map(|n| n.name_any()).collect();
    for (node, rec) in prev.iter().filter(|(n, _)| !selected_names.contains(n)) {
        let exists = nodes.get_opt(node).await?.is_some();
        match remove_from(rec, ctx).await {
            Ok(()) => {
                tracing::info!(pipeline = %name, node = %node, "removed from a node no longer selected")
            }
            // A Node object that is gone takes its daemon with it: nothing left to wait for.
            Err(e) if !exists => {
                tracing::info!(pipeline = %name, node = %node, "node deleted; its daemon was not cleaned: {e}")
            }
            Err(e) => {
                tracing::warn!(pipeline = %name, node = %node, "cannot remove from a node no longer selected: {e}");
                out.push(NodeStatus {
                    phase: "Removing".into(),
                    message: Some(e.to_string()),
                    ..rec.clone()
                });
            }
        }
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));

    let applied = out.iter().filter(|n| n.phase == "Applied").count();
    let phase = if selected.is_empty() {
        "Pending"
    } else if applied == selected.len() && out.len() == applied {
        "Applied"
    } else {
        "Degraded"
    };
    let status = BessemerPipelineStatus {
        observed_generation: p.meta().generation,
        phase: phase.into(),
        summary: format!("{applied}/{}", selected.len()),
        nodes: out,
    };
    if p.status.as_ref() != Some(&status) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    }
    Ok(Action::requeue(ctx.resync))
}

async fn apply_node(
    pipeline: &str,
    p: &BessemerPipeline,
    ctx: &Ctx,
    before: NodeStatus,
    addr: Result<(String, Option<String>), String>,
) -> NodeStatus {
    let node = before.node.clone();
    let (address, ip) = match addr {
        Ok(a) => a,
        Err(e) => {
            return NodeStatus {
                phase: "Unreachable".into(),
                message: Some(e),
                ..before
            }
        }
    };
    let params = graph::params_for(&p.spec, &node, ip.as_deref());
    let want = match graph::render(&p.spec, &params) {
        Ok(w) => w,
        Err(e) => {
            return NodeStatus {
                phase: "Invalid".into(),
                message: Some(e),
                address,
                ..before
            }
        }
    };
    let mut d = match Daemon::connect(&address, &ctx.access).await {
        Ok(d) => d,
        Err(e) => {
            return NodeStatus {
                phase: "Unreachable".into(),
                message: Some(e.to_string()),
                address,
                ..before
            }
        }
    };
    match d.apply(&before, &want).await {
        Ok(what) => {
            let mut rec = NodeStatus {
                phase: "Applied".into(),
                message: None,
                address,
                applied_hash: Some(want.hash.clone()),
                modules: want
                    .modules
                    .iter()
                    .map(|m| (m.name.clone(), m.hash.clone()))
                    .collect(),
                ports: want.ports.iter().map(|p| p.name.clone()).collect(),
                ..before
            };
            if let Applied::Changed { ops, kept } = what {
                rec.applies += 1;
                rec.applied_at = Some(rfc3339(SystemTime::now()));
                tracing::info!(pipeline, node = %node, ops, kept, applies = rec.applies, "applied");
            }
            let names: Vec<String> = want.modules.iter().map(|m| m.name.clone()).collect();
            match d.drops(&names).await {
                Ok(s) => rec.drops = Some(s),
                Err(e) => tracing::warn!(pipeline, node = %node, "drop counters: {e}"),
            }
            rec
        }
        Err(e) => {
            let phase = match e {
                Failure::Unreachable(_) => "Unreachable",
                Failure::Refused(_) => "Failed",
            };
            tracing::warn!(pipeline, node = %node, "{phase}: {e}");
            NodeStatus {
                phase: phase.into(),
                message: Some(e.to_string()),
                address,
                ..before
            }
        }
    }
}

async fn remove_from(rec: &NodeStatus, ctx: &Ctx) -> Result<(), Failure> {
    if rec.address.is_empty() || (rec.modules.is_empty() && rec.ports.is_empty()) {
        return Ok(());
    }
    Daemon::connect(&rec.address, &ctx.access)
        .await?
        .remove(rec)
        .await
}

/// The pipeline is being deleted: take it off every node it reached. A daemon that cannot
/// be reached holds nothing of it any more once it restarts (bessemerd keeps no state), so
/// it does not hold the deletion; a daemon that refuses does (retried).
async fn cleanup(p: &BessemerPipeline, ctx: &Ctx) -> Result<Action, Error> {
    let recs = p
        .status
        .as_ref()
        .map(|s| s.nodes.clone())
        .unwrap_or_default();
    for rec in &recs {
        match remove_from(rec, ctx).await {
            Ok(()) => tracing::info!(pipeline = %p.name_any(), node = %rec.node, "removed"),
            Err(Failure::Unreachable(e)) => {
                tracing::warn!(pipeline = %p.name_any(), node = %rec.node, "not removed, daemon unreachable: {e}")
            }
            Err(Failure::Refused(e)) => return Err(Error::Removal(rec.node.clone(), e)),
        }
    }
    Ok(Action::await_change())
}

/// `t` as RFC 3339 in UTC, to the second.
pub fn rfc3339(t: SystemTime) -> String {
    let s = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

//! Worker RPCs: adding, pausing, resuming and destroying workers, ListWorkers and
//! CheckSchedulingConstraints.

use bessemer_core::engine::WorkerState;
use bessemer_core::{Engine, Error, Result};
use tonic::Request;

use super::{answer, empty, wid_of, Control, RpcResult};
use crate::convert::truncate;
use crate::pb;

pub(super) async fn pause_all(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty("PauseAll", ctl.run(|e| e.pause_all()).await)
}

pub(super) async fn pause_worker(
    ctl: &Control,
    r: Request<pb::PauseWorkerRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let wid = r.get_ref().wid;
    empty(
        "PauseWorker",
        // As BESS: pausing a worker that does not exist does nothing.
        ctl.run(move |e| {
            let w = wid_of(wid)?;
            if e.worker_state(w).is_err() {
                return Ok(());
            }
            e.pause_worker(w)
        })
        .await,
    )
}

pub(super) async fn resume_worker(
    ctl: &Control,
    r: Request<pb::ResumeWorkerRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let wid = r.get_ref().wid;
    empty(
        "ResumeWorker",
        ctl.run(move |e| {
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

pub(super) async fn resume_all(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty(
        "ResumeAll",
        ctl.run(|e| {
            e.resume_all()?;
            for w in e.worker_ids() {
                await_running(e, w);
            }
            Ok(())
        })
        .await,
    )
}

pub(super) async fn reset_workers(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty(
        "ResetWorkers",
        ctl.run(|e| {
            for w in e.worker_ids() {
                e.destroy_worker(w)?;
            }
            Ok(())
        })
        .await,
    )
}

pub(super) async fn list_workers(ctl: &Control) -> RpcResult<pb::ListWorkersResponse> {
    let r = ctl
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
                        silent_drops: w.silent_drops as i64,
                    })
                    .collect(),
            })
        })
        .await;
    answer("ListWorkers", r)
}

pub(super) async fn add_worker(
    ctl: &Control,
    r: Request<pb::AddWorkerRequest>,
) -> RpcResult<pb::EmptyResponse> {
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
        ctl.run(move |e| e.add_worker(wid, core)).await
    }
    .await;
    empty("AddWorker", res)
}

pub(super) async fn destroy_worker(
    ctl: &Control,
    r: Request<pb::DestroyWorkerRequest>,
) -> RpcResult<pb::EmptyResponse> {
    let wid = r.get_ref().wid;
    empty(
        "DestroyWorker",
        ctl.run(move |e| e.destroy_worker(wid_of(wid)?)).await,
    )
}

pub(super) async fn check_scheduling_constraints(
    ctl: &Control,
) -> RpcResult<pb::CheckSchedulingConstraintsResponse> {
    let r = ctl.run(check_constraints).await;
    answer("CheckSchedulingConstraints", r)
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
            "scheduling constraint violated: module '{m}' is run by workers {ws:?}, more \
             than its class allows (show mclass); attach the tasks that reach it to fewer \
             workers or put a Queue in front of it"
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

//! The `bess.pb.BESSControl` service on top of [`Engine`].
//!
//! Control RPCs are serialised by one mutex around the engine (as BESS serialises them) and
//! run on tokio's blocking pool. Every failure is reported in the response's
//! `error { code, errmsg }` with an errno code; the gRPC status stays OK, as with BESS.
//!
//! This file holds the [`Control`] type, the reply helpers and the argument checks every
//! concern shares, and the `BessControl` impl, whose methods delegate to one file per concern:
//! [`system`] (version, reset, kill, plugins), [`modules`] (module classes, modules,
//! connections, commands, DumpMempool), [`ports`] (drivers, ports), [`workers`] (workers,
//! scheduling constraints), [`tcs`] (traffic classes) and [`hooks`] (gate and resume hooks).

// tonic's handler signature returns `Result<_, Status>`; Status is large, and not ours.
#![allow(clippy::result_large_err)]

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bessemer_core::engine::MAX_WORKERS;
use bessemer_core::module::MAX_GATES;
use bessemer_core::{Engine, Error, Result};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::convert::truncate;
use crate::observe::DropRates;
use crate::pb;

mod ext;
mod hooks;
mod modules;
mod observe;
mod ports;
mod system;
mod tcs;
mod transaction;
mod workers;

/// The version string GetVersion reports.
pub const VERSION: &str = concat!("bessemer ", env!("CARGO_PKG_VERSION"));

/// Longest name (module, class, port, ...) accepted in a request.
pub use bessemer_core::graph::MAX_NAME_LEN;

/// The engine shared by the RPC handlers.
pub type SharedEngine = crate::observe::SharedEngine;

/// The service implementation.
pub struct Control {
    engine: SharedEngine,
    kill: watch::Sender<bool>,
    rates: Arc<Mutex<DropRates>>,
}

impl Control {
    /// A service driving `engine`; KillBess sets `kill` to true.
    pub fn new(engine: SharedEngine, kill: watch::Sender<bool>) -> Control {
        Control {
            engine,
            kill,
            rates: Arc::default(),
        }
    }

    /// The drop rates `ShowErrors` and `GetModuleInfo` report; the daemon's sampler
    /// ([`crate::observe::spawn_sampler`]) keeps them current.
    pub fn drop_rates(&self) -> Arc<Mutex<DropRates>> {
        self.rates.clone()
    }

    /// The engine this service drives.
    pub fn engine(&self) -> SharedEngine {
        self.engine.clone()
    }

    /// Gives the heap's free pages back to the system, after a request that may have freed
    /// a lot (see [`crate::memory`]); in the blocking pool, without the control lock.
    async fn release_freed(&self) {
        let _ = tokio::task::spawn_blocking(crate::memory::release_free_heap).await;
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

/// Whether a request's argument is large enough that freeing its decoded form is worth
/// giving back to the system.
fn large_arg(arg: Option<&prost_types::Any>) -> bool {
    arg.is_some_and(|a| a.value.len() >= crate::memory::LARGE_REQUEST)
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

/// Refused requests logged at INFO per second; beyond it they are counted and summarised,
/// so a client sending bad requests in a loop cannot flood the log.
static REFUSALS_LOG: crate::listen::LogBudget = crate::listen::LogBudget::new(20);

/// Wraps a result into a response: errors go into `error`, the status stays OK.
fn answer<T: Reply>(rpc: &str, r: Result<T>) -> RpcResult<T> {
    Ok(Response::new(match r {
        Ok(t) => t,
        Err(e) => {
            let (log, held) = REFUSALS_LOG.allow();
            if log {
                // The message quotes what the client sent (names, paths): escaped, so a name
                // holding a newline cannot forge a log line.
                let msg = truncate(&e.msg, 500);
                let msg = crate::listen::log_safe(&msg);
                tracing::info!(rpc, code = e.code, held_back = held, "{msg}");
            }
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

/// A name that is looked up as given (BESS's GetPortStats, ConnectModules, ...): an empty one
/// is simply not found (ENOENT), as BESS finds no such entry; only its length is bounded.
fn lookup_name(s: &str, what: &str) -> Result<String> {
    check_len(s, what)?;
    Ok(s.to_string())
}

/// A required name field: non-empty and of sane length.
fn need_name(s: &str, what: &str) -> Result<String> {
    if s.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    check_len(s, what)?;
    if let Some(why) = bessemer_core::graph::name_problem(s) {
        return Err(Error::invalid(format!("{what}: {why}")));
    }
    Ok(s.to_string())
}

/// Most modules at once: CreateModule and transactions refuse more with ENOMEM.
pub const MAX_MODULES: usize = 65_536;
/// Most ports at once.
pub const MAX_PORTS: usize = 1_024;
/// Most traffic classes at once, over all workers.
pub const MAX_TCS: usize = 65_536;
/// Most gate hooks installed at once, over all gates.
pub const MAX_GATE_HOOKS: usize = 65_536;

/// Refuses to make `adding` more of `what` when `have` exist and `max` are allowed (ENOMEM,
/// naming the limit).
fn check_room(what: &str, have: usize, adding: usize, max: usize) -> Result<()> {
    if have.saturating_add(adding) > max {
        return Err(Error::new(
            libc::ENOMEM,
            format!("at most {max} {what} may exist at once ({have} do); the limit is reached"),
        ));
    }
    Ok(())
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

#[tonic::async_trait]
impl pb::bess_control_server::BessControl for Control {
    async fn get_version(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::VersionResponse> {
        system::get_version()
    }

    async fn reset_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        let out = system::reset_all(self).await;
        self.release_freed().await;
        out
    }

    async fn kill_bess(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        system::kill_bess(self).await
    }

    async fn import_plugin(
        &self,
        r: Request<pb::ImportPluginRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        system::import_plugin(r)
    }

    async fn unload_plugin(
        &self,
        r: Request<pb::UnloadPluginRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        system::unload_plugin(r)
    }

    async fn list_plugins(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListPluginsResponse> {
        system::list_plugins()
    }

    async fn pause_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        workers::pause_all(self).await
    }

    async fn pause_worker(
        &self,
        r: Request<pb::PauseWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        workers::pause_worker(self, r).await
    }

    async fn resume_worker(
        &self,
        r: Request<pb::ResumeWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        workers::resume_worker(self, r).await
    }

    async fn resume_all(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        workers::resume_all(self).await
    }

    async fn reset_workers(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        workers::reset_workers(self).await
    }

    async fn list_workers(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListWorkersResponse> {
        workers::list_workers(self).await
    }

    async fn add_worker(&self, r: Request<pb::AddWorkerRequest>) -> RpcResult<pb::EmptyResponse> {
        workers::add_worker(self, r).await
    }

    async fn destroy_worker(
        &self,
        r: Request<pb::DestroyWorkerRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        workers::destroy_worker(self, r).await
    }

    async fn reset_tcs(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        tcs::reset_tcs(self).await
    }

    async fn list_tcs(&self, r: Request<pb::ListTcsRequest>) -> RpcResult<pb::ListTcsResponse> {
        tcs::list_tcs(self, r).await
    }

    async fn check_scheduling_constraints(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::CheckSchedulingConstraintsResponse> {
        workers::check_scheduling_constraints(self).await
    }

    async fn add_tc(&self, r: Request<pb::AddTcRequest>) -> RpcResult<pb::EmptyResponse> {
        tcs::add_tc(self, r).await
    }

    async fn update_tc_params(
        &self,
        r: Request<pb::UpdateTcParamsRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        tcs::update_tc_params(self, r).await
    }

    async fn update_tc_parent(
        &self,
        r: Request<pb::UpdateTcParentRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        tcs::update_tc_parent(self, r).await
    }

    async fn get_tc_stats(
        &self,
        r: Request<pb::GetTcStatsRequest>,
    ) -> RpcResult<pb::GetTcStatsResponse> {
        tcs::get_tc_stats(self, r).await
    }

    async fn list_drivers(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListDriversResponse> {
        ports::list_drivers()
    }

    async fn get_driver_info(
        &self,
        r: Request<pb::GetDriverInfoRequest>,
    ) -> RpcResult<pb::GetDriverInfoResponse> {
        ports::get_driver_info(r)
    }

    async fn reset_ports(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        let out = ports::reset_ports(self).await;
        self.release_freed().await;
        out
    }

    async fn list_ports(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::ListPortsResponse> {
        ports::list_ports(self).await
    }

    async fn create_port(
        &self,
        r: Request<pb::CreatePortRequest>,
    ) -> RpcResult<pb::CreatePortResponse> {
        ports::create_port(self, r).await
    }

    async fn destroy_port(
        &self,
        r: Request<pb::DestroyPortRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let out = ports::destroy_port(self, r).await;
        self.release_freed().await;
        out
    }

    async fn set_port_conf(
        &self,
        r: Request<pb::SetPortConfRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        ports::set_port_conf(self, r).await
    }

    async fn get_port_conf(
        &self,
        r: Request<pb::GetPortConfRequest>,
    ) -> RpcResult<pb::GetPortConfResponse> {
        ports::get_port_conf(self, r).await
    }

    async fn get_port_stats(
        &self,
        r: Request<pb::GetPortStatsRequest>,
    ) -> RpcResult<pb::GetPortStatsResponse> {
        ports::get_port_stats(self, r).await
    }

    async fn get_link_status(
        &self,
        r: Request<pb::GetLinkStatusRequest>,
    ) -> RpcResult<pb::GetLinkStatusResponse> {
        ports::get_link_status(self, r).await
    }

    async fn list_mclass(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::ListMclassResponse> {
        modules::list_mclass()
    }

    async fn get_mclass_info(
        &self,
        r: Request<pb::GetMclassInfoRequest>,
    ) -> RpcResult<pb::GetMclassInfoResponse> {
        modules::get_mclass_info(r)
    }

    async fn reset_modules(&self, _: Request<pb::EmptyRequest>) -> RpcResult<pb::EmptyResponse> {
        let out = modules::reset_modules(self).await;
        self.release_freed().await;
        out
    }

    async fn list_modules(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListModulesResponse> {
        modules::list_modules(self).await
    }

    async fn create_module(
        &self,
        r: Request<pb::CreateModuleRequest>,
    ) -> RpcResult<pb::CreateModuleResponse> {
        let large = large_arg(r.get_ref().arg.as_ref());
        let out = modules::create_module(self, r).await;
        if large {
            self.release_freed().await;
        }
        out
    }

    async fn destroy_module(
        &self,
        r: Request<pb::DestroyModuleRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        let out = modules::destroy_module(self, r).await;
        self.release_freed().await;
        out
    }

    async fn get_module_info(
        &self,
        r: Request<pb::GetModuleInfoRequest>,
    ) -> RpcResult<pb::GetModuleInfoResponse> {
        modules::get_module_info(self, r).await
    }

    async fn connect_modules(
        &self,
        r: Request<pb::ConnectModulesRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        modules::connect_modules(self, r).await
    }

    async fn disconnect_modules(
        &self,
        r: Request<pb::DisconnectModulesRequest>,
    ) -> RpcResult<pb::EmptyResponse> {
        modules::disconnect_modules(self, r).await
    }

    async fn dump_mempool(
        &self,
        r: Request<pb::DumpMempoolRequest>,
    ) -> RpcResult<pb::DumpMempoolResponse> {
        modules::dump_mempool(self, r).await
    }

    async fn module_command(
        &self,
        r: Request<pb::CommandRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        // Commands that replace or remove table entries free them.
        let frees = large_arg(r.get_ref().arg.as_ref())
            || matches!(r.get_ref().cmd.as_str(), "clear" | "set_runtime_config");
        let out = modules::module_command(self, r).await;
        if frees {
            self.release_freed().await;
        }
        out
    }

    async fn list_gate_hook_class(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListGateHookClassResponse> {
        hooks::list_gate_hook_class()
    }

    async fn get_gate_hook_class_info(
        &self,
        r: Request<pb::GetGateHookClassInfoRequest>,
    ) -> RpcResult<pb::GetGateHookClassInfoResponse> {
        hooks::get_gate_hook_class_info(r)
    }

    async fn configure_gate_hook(
        &self,
        r: Request<pb::ConfigureGateHookRequest>,
    ) -> RpcResult<pb::ConfigureGateHookResponse> {
        hooks::configure_gate_hook(self, r).await
    }

    async fn list_gate_hooks(
        &self,
        _: Request<pb::EmptyRequest>,
    ) -> RpcResult<pb::ListGateHooksResponse> {
        hooks::list_gate_hooks(self).await
    }

    async fn gate_hook_command(
        &self,
        r: Request<pb::GateHookCommandRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        hooks::gate_hook_command(self, r).await
    }

    async fn configure_resume_hook(
        &self,
        r: Request<pb::ConfigureResumeHookRequest>,
    ) -> RpcResult<pb::CommandResponse> {
        hooks::configure_resume_hook(r)
    }
}

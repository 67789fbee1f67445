//! System RPCs: GetVersion, ResetAll, KillBess and the plugin RPCs (Bessemer loads no plugins).

use tonic::Request;

use super::{answer, empty, unsupported, Control, RpcResult, VERSION};
use crate::convert::truncate;
use crate::pb;

pub(super) fn get_version() -> RpcResult<pb::VersionResponse> {
    answer(
        "GetVersion",
        Ok(pb::VersionResponse {
            error: None,
            version: VERSION.to_string(),
        }),
    )
}

pub(super) async fn reset_all(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    empty(
        "ResetAll",
        ctl.run(|e| {
            let r = e.reset_all();
            super::modules::resync(e);
            r
        })
        .await,
    )
}

pub(super) async fn kill_bess(ctl: &Control) -> RpcResult<pb::EmptyResponse> {
    tracing::info!("KillBess: shutting down");
    let kill = ctl.kill.clone();
    // Let this answer reach the client before the server stops.
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let _ = kill.send(true);
    });
    empty("KillBess", Ok(()))
}

pub(super) fn import_plugin(r: Request<pb::ImportPluginRequest>) -> RpcResult<pb::EmptyResponse> {
    let p = truncate(&r.get_ref().path, 256);
    empty(
        "ImportPlugin",
        Err(unsupported(format!(
            "cannot import '{p}': Bessemer does not load C++ plugins"
        ))),
    )
}

pub(super) fn unload_plugin(r: Request<pb::UnloadPluginRequest>) -> RpcResult<pb::EmptyResponse> {
    let p = truncate(&r.get_ref().path, 256);
    empty(
        "UnloadPlugin",
        Err(unsupported(format!(
            "cannot unload '{p}': Bessemer does not load C++ plugins"
        ))),
    )
}

pub(super) fn list_plugins() -> RpcResult<pb::ListPluginsResponse> {
    // No plugin is ever loaded: the list is empty (ImportPlugin answers ENOTSUP).
    answer("ListPlugins", Ok(pb::ListPluginsResponse::default()))
}

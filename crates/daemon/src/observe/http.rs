//! The daemon's HTTP endpoints: `/metrics` (Prometheus, `--metrics ADDR`) and the live web
//! view (`/`, `/api/snapshot`, `/api/classes`; `--http ADDR`). Both are off by default, read-only, and answer
//! only peers in the allowed networks (loopback unless `--http-allow` says otherwise).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ipnet::IpNet;

use super::{collect, metrics, SharedEngine, Snapshot};

/// The page of the web view (self-contained: no script or style from elsewhere).
const VIEW_HTML: &str = include_str!("view.html");

/// What one HTTP listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// `/metrics`.
    pub metrics: bool,
    /// The web view: `/`, `/api/snapshot` and `/api/classes`.
    pub view: bool,
}

/// Networks whose peers may use the endpoints.
#[derive(Clone, Debug)]
pub struct Allowed(Vec<IpNet>);

impl Allowed {
    /// Loopback only (IPv4 127.0.0.0/8 and ::1), the default.
    pub fn loopback() -> Allowed {
        Allowed(Vec::new())
    }

    /// Loopback plus these networks ("10.0.0.0/8", "192.0.2.7", "::/0").
    pub fn with(nets: &[String]) -> Result<Allowed, String> {
        nets.iter()
            .map(|n| {
                n.parse::<IpNet>()
                    .or_else(|_| n.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("--http-allow '{n}': not an address or network (e.g. 10.0.0.0/8)")
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Allowed)
    }

    /// True if `ip` may connect.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        ip.is_loopback() || self.0.iter().any(|n| n.contains(&ip))
    }
}

#[derive(Clone)]
struct Shared {
    engine: SharedEngine,
    allowed: Arc<Allowed>,
    /// The daemon's bearer token (`--token-file`): required from peers beyond loopback.
    token: Option<Arc<str>>,
}

async fn snapshot(engine: &SharedEngine) -> Result<Snapshot, Response> {
    let e = engine.clone();
    tokio::task::spawn_blocking(move || collect(&e.lock().unwrap_or_else(|p| p.into_inner())))
        .await
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading counters failed: {e}"),
            )
                .into_response()
        })
}

async fn metrics_page(State(s): State<Shared>) -> Response {
    match snapshot(&s.engine).await {
        Ok(snap) => (
            [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
            metrics::render(&snap),
        )
            .into_response(),
        Err(r) => r,
    }
}

/// Liveness: the daemon's HTTP side answers (a process that cannot answer this is stuck).
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the control plane takes requests, i.e. the engine can be had within a second
/// (it is held while a reconfiguration runs; a wedged one keeps it). 503 with the reason
/// otherwise.
async fn readyz(State(s): State<Shared>) -> Response {
    let e = s.engine.clone();
    let ready = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match e.try_lock() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => return true,
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    })
    .await
    .unwrap_or(false);
    if ready {
        "ready\n".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the engine has been busy for over a second (a reconfiguration is running)\n",
        )
            .into_response()
    }
}

async fn snapshot_json(State(s): State<Shared>) -> Response {
    match snapshot(&s.engine).await {
        Ok(snap) => Json(snap).into_response(),
        Err(r) => r,
    }
}

/// What the web view's details panel says of a class: its help line, argument summary,
/// commands and drop reasons (static: the view fetches it once).
#[derive(serde::Serialize)]
struct ClassInfo {
    name: &'static str,
    help: &'static str,
    arg_type: &'static str,
    arg_doc: &'static [&'static str],
    commands: Vec<(&'static str, &'static str)>,
    drop_reasons: &'static [&'static str],
}

async fn classes_json() -> Json<Vec<ClassInfo>> {
    Json(
        bessemer_modules::classes()
            .iter()
            .map(|c| ClassInfo {
                name: c.name,
                help: c.help,
                arg_type: c.arg_type,
                arg_doc: c.arg_doc,
                commands: c.commands.iter().map(|x| (x.name, x.help)).collect(),
                drop_reasons: c.drop_reasons,
            })
            .collect(),
    )
}

async fn view_page() -> Html<&'static str> {
    Html(VIEW_HTML)
}

async fn only_allowed(
    State(s): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let remote = !Allowed::loopback().permits(peer.ip());
    if remote && s.allowed.permits(peer.ip()) {
        if let Some(want) = &s.token {
            let got = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !got.is_some_and(|t| crate::secret::same_secret(t.as_bytes(), want.as_bytes())) {
                log_refusal(peer, req.uri().path(), "no or wrong bearer token");
                return (
                    StatusCode::UNAUTHORIZED,
                    "this daemon requires 'Authorization: Bearer <token>' from beyond loopback\n",
                )
                    .into_response();
            }
        }
    }
    if !s.allowed.permits(peer.ip()) {
        log_refusal(peer, req.uri().path(), "peer not allowed");
        return (
            StatusCode::FORBIDDEN,
            format!(
                "{} is not allowed here; start bessemerd with --http-allow to admit it\n",
                peer.ip()
            ),
        )
            .into_response();
    }
    next.run(req).await
}

/// HTTP refusals logged per second (a peer probing in a loop cannot flood the log); the rest
/// are counted and summarised.
static REFUSALS_LOG: crate::listen::LogBudget = crate::listen::LogBudget::new(5);

fn log_refusal(peer: SocketAddr, path: &str, why: &str) {
    let (log, held) = REFUSALS_LOG.allow();
    if log {
        let path = crate::listen::log_safe(path);
        let path = path.get(..200).unwrap_or(&path);
        tracing::warn!(%peer, path, held_back = held, "HTTP request refused: {why}");
    }
}

/// The router for `what`; `token` is required from peers beyond loopback.
pub fn router(
    engine: SharedEngine,
    allowed: Allowed,
    token: Option<Arc<str>>,
    what: Endpoints,
) -> Router {
    let shared = Shared {
        engine,
        allowed: Arc::new(allowed),
        token,
    };
    let mut r = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    if what.metrics {
        r = r.route("/metrics", get(metrics_page));
    }
    if what.view {
        r = r
            .route("/", get(view_page))
            .route("/api/snapshot", get(snapshot_json))
            .route("/api/classes", get(classes_json));
    }
    r.layer(middleware::from_fn_with_state(shared.clone(), only_allowed))
        .with_state(shared)
}

/// Binds `addr` and serves `what` until `stop` resolves. Errors name the address.
pub async fn bind(
    addr: SocketAddr,
    engine: SharedEngine,
    allowed: Allowed,
    token: Option<Arc<str>>,
    what: Endpoints,
) -> Result<(tokio::net::TcpListener, Router), String> {
    let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("cannot serve HTTP on {addr}: address already in use")
        } else {
            format!("cannot serve HTTP on {addr}: {e}")
        }
    })?;
    Ok((l, router(engine, allowed, token, what)))
}

/// Most HTTP connections at once (fewer when the descriptor limit is low: `listen::caps`).
pub const MAX_CONNECTIONS: usize = 128;

/// Serves a bound listener until `stop` resolves: each connection through the guarded accept
/// loop (`crate::listen`: at most `limits.max`, silent ones closed, accept errors never end
/// it), HTTP/1.1. Connections still open at the stop are closed.
pub async fn serve(
    l: tokio::net::TcpListener,
    r: Router,
    limits: crate::listen::Limits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    use crate::listen::{Accept, Label, Refusal};
    use tokio_stream::StreamExt;
    let mut incoming =
        std::pin::pin!(Accept::Tcp(l).incoming(Label("HTTP endpoints"), limits, Refusal::Http1));
    let mut stop = std::pin::pin!(stop);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let conn = tokio::select! {
            c = incoming.next() => c,
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Some(Ok(conn)) = conn else { continue };
        let Some(peer) = conn.peer() else { continue };
        let router = r.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut router = router.clone();
                async move {
                    use tower::Service;
                    router.call(req.map(axum::body::Body::new)).await
                }
            });
        conns.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
                .await;
        });
    }
    conns.abort_all();
}

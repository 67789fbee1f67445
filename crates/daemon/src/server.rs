//! Running the daemon: listen, serve, stop cleanly.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bessemer_core::mem::PagePolicy;
use bessemer_core::{Engine, EngineConfig};
use tokio::sync::watch;

use crate::bessemer::pb::bessemer_control_server::BessemerControlServer;
use crate::listen::{self, Accept, Label, Limits, Refusal};
use crate::observe::{self, http::Allowed, http::Endpoints};
use crate::pb::bess_control_server::BessControlServer;
use crate::secret::same_secret;
use crate::service::Control;

/// Where the daemon listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix-domain socket path.
    Unix(PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Daemon settings (from the command line).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where to listen.
    pub listen: Listen,
    /// Engine configuration.
    pub engine: EngineConfig,
    /// File to write the process id to (removed at exit).
    pub pid_file: Option<PathBuf>,
    /// Core of the worker started when tasks need one and none exists (BESS's `-c`).
    pub default_core: usize,
    /// Longest nap of an idle worker in µs (0: workers always poll, as in BESS).
    pub idle_sleep_max_us: u32,
    /// Runtime sampling (`show runtime`) on: the default; `--no-runtime` turns it off.
    pub runtime: bool,
    /// Where to serve Prometheus's `/metrics` (off when None).
    pub metrics: Option<SocketAddr>,
    /// Where to serve the web view (off when None); may equal `metrics`.
    pub http: Option<SocketAddr>,
    /// Networks (besides loopback) whose peers may use the HTTP endpoints.
    pub http_allow: Vec<String>,
    /// Who may use the control port.
    pub security: Security,
    /// Most control connections open at once (fewer when the descriptor limit is low).
    pub max_connections: usize,
    /// How long a new control or HTTP connection may stay silent (or in its TLS handshake).
    pub handshake_timeout: Duration,
    /// How long a connection may go without sending a byte once it has spoken.
    pub idle_timeout: Duration,
}

/// Default of [`Settings::max_connections`].
pub const MAX_CONTROL_CONNECTIONS: usize = 512;
/// Default of [`Settings::handshake_timeout`].
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Settings::idle_timeout`]: well above the keepalive pings' 20 + 10 s, which a
/// live gRPC client answers.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Who may use the control port: TLS (optionally with client certificates) and a bearer
/// token. A control port beyond loopback needs TLS and a credential, unless
/// `insecure_remote` (BESS's behaviour: whoever reaches it controls the daemon).
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// Certificate chain (PEM) to serve TLS with.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) client certificates must be signed by.
    pub tls_client_ca: Option<PathBuf>,
    /// File whose first line is the bearer token every RPC must carry.
    pub token_file: Option<PathBuf>,
    /// Allow a plain, credential-free control port beyond loopback.
    pub insecure_remote: bool,
}

/// The loaded credentials.
struct Credentials {
    tls: Option<tonic::transport::ServerTlsConfig>,
    token: Option<Arc<str>>,
}

fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
}

impl Security {
    /// Loads the files and checks the rule for a control port beyond loopback.
    fn load(&self, listen: &Listen) -> Result<Credentials, String> {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => {
                let id = Identity::from_pem(read(c, "TLS certificate")?, read(k, "TLS key")?);
                let mut cfg = ServerTlsConfig::new().identity(id);
                if let Some(ca) = &self.tls_client_ca {
                    cfg = cfg.client_ca_root(Certificate::from_pem(read(ca, "client CA")?));
                }
                Some(cfg)
            }
            _ => None,
        };
        let token = match &self.token_file {
            Some(p) => {
                let text = String::from_utf8(read(p, "token file")?)
                    .map_err(|_| format!("the token file {} is not text", p.display()))?;
                let t = text.lines().next().unwrap_or("").trim().to_string();
                if t.len() < 16 {
                    return Err(format!(
                        "the token in {} is shorter than 16 characters; use a long random one \
                         (e.g. openssl rand -hex 32)",
                        p.display()
                    ));
                }
                Some(Arc::from(t))
            }
            None => None,
        };
        if let Listen::Tcp(a) = listen {
            let credential = self.tls_client_ca.is_some() || token.is_some();
            let secured = tls.is_some() && credential;
            if !(a.ip().is_loopback() || secured || self.insecure_remote) {
                return Err(format!(
                    "refusing to serve the control port on {a} without TLS and a credential: \
                     anyone who reaches it would control the daemon. Give --tls-cert/--tls-key \
                     and --tls-client-ca or --token-file, bind 127.0.0.1 (the default) or \
                     --unix, or accept the risk with --insecure-remote"
                ));
            }
        }
        Ok(Credentials { tls, token })
    }
}

/// Refuses RPCs on a connection beyond the cap (with the reason), and RPCs without the bearer
/// token (when one is set).
#[derive(Clone)]
struct TokenCheck(Option<Arc<str>>);

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(why) = req
            .extensions()
            .get::<listen::ConnInfo>()
            .and_then(|c| c.over_cap.as_ref())
        {
            return Err(tonic::Status::resource_exhausted(why.as_ref()));
        }
        let Some(want) = &self.0 else { return Ok(req) };
        let got = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match got {
            Some(t) if same_secret(t.as_bytes(), want.as_bytes()) => Ok(req),
            Some(_) => Err(tonic::Status::unauthenticated("wrong bearer token")),
            None => Err(tonic::Status::unauthenticated(
                "this daemon requires 'authorization: Bearer <token>' (see --token-file)",
            )),
        }
    }
}

impl Settings {
    /// Settings for a TCP listener.
    pub fn tcp(bind: IpAddr, port: u16) -> Settings {
        Settings {
            listen: Listen::Tcp(SocketAddr::new(bind, port)),
            engine: EngineConfig::default(),
            pid_file: None,
            default_core: 0,
            idle_sleep_max_us: 0,
            runtime: true,
            metrics: None,
            http: None,
            http_allow: Vec::new(),
            security: Security::default(),
            max_connections: MAX_CONTROL_CONNECTIONS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// Uses plain pages instead of hugepages.
    pub fn no_hugepages(mut self) -> Settings {
        self.engine.pages = PagePolicy::Plain;
        self
    }
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

fn in_use(what: &Listen) -> String {
    format!(
        "cannot listen on {what}: address already in use; \
         another bessemerd or BESS is probably running on {what}"
    )
}

async fn bind(listen: &Listen) -> Result<Listener, String> {
    match listen {
        Listen::Tcp(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => Ok(Listener::Tcp(l)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(in_use(listen)),
            Err(e) => Err(format!("cannot listen on {addr}: {e}")),
        },
        Listen::Unix(path) => {
            if path.exists() {
                // A live server answers a connect; a stale socket file is replaced.
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(in_use(listen));
                }
                std::fs::remove_file(path)
                    .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))?;
            }
            tokio::net::UnixListener::bind(path)
                .map(|l| Listener::Unix(l, path.clone()))
                .map_err(|e| format!("cannot listen on {listen}: {e}"))
        }
    }
}

/// Binds the HTTP listeners `--metrics` and `--http` ask for (one when they name the same
/// address).
async fn bind_http(
    settings: &Settings,
    engine: &Arc<Mutex<Engine>>,
    token: Option<Arc<str>>,
) -> Result<Vec<(tokio::net::TcpListener, axum::Router)>, String> {
    let allowed = Allowed::with(&settings.http_allow)?;
    let mut wanted: Vec<(SocketAddr, Endpoints)> = Vec::new();
    for (addr, view) in [(settings.metrics, false), (settings.http, true)] {
        let Some(addr) = addr else { continue };
        let at = match wanted.iter().position(|(a, _)| *a == addr) {
            Some(i) => i,
            None => {
                wanted.push((addr, Endpoints::default()));
                wanted.len() - 1
            }
        };
        if view {
            wanted[at].1.view = true;
        } else {
            wanted[at].1.metrics = true;
        }
    }
    let mut out = Vec::new();
    for (addr, what) in wanted {
        if !addr.ip().is_loopback() && settings.http_allow.is_empty() {
            tracing::warn!(
                %addr,
                "HTTP endpoints bound beyond loopback answer only loopback peers; \
                 add --http-allow NETWORK to admit others"
            );
        }
        out.push(
            observe::http::bind(addr, engine.clone(), allowed.clone(), token.clone(), what).await?,
        );
    }
    Ok(out)
}

/// SIGTERM and SIGINT handlers, installed before the daemon is reachable (pid file written,
/// listener bound), so a signal sent as soon as it is stops it cleanly.
struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn install() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        StopSignals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }
}

async fn next_signal(s: &mut Option<tokio::signal::unix::Signal>) {
    match s.as_mut() {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Waits for SIGTERM, SIGINT or a KillBess request.
async fn stop_requested(mut sig: StopSignals, mut kill: watch::Receiver<bool>) {
    tokio::select! {
        _ = next_signal(&mut sig.int) => tracing::info!("SIGINT: shutting down"),
        _ = next_signal(&mut sig.term) => tracing::info!("SIGTERM: shutting down"),
        _ = kill.wait_for(|k| *k) => {}
    }
}

/// Runs the daemon until a signal or KillBess; then stops the engine (modules destroyed,
/// workers joined) and removes the pid file. Errors name what failed.
pub async fn run(settings: Settings) -> Result<(), String> {
    let signals = StopSignals::install();
    let creds = settings.security.load(&settings.listen)?;
    let nofile = listen::raise_nofile_limit();
    let (control_max, http_max) = listen::caps(
        nofile,
        settings.max_connections,
        observe::http::MAX_CONNECTIONS,
    );
    tracing::info!(
        nofile,
        control_max,
        http_max,
        "descriptor limit and connection caps"
    );
    let mut engine = Engine::new(settings.engine.clone())
        .map_err(|e| format!("cannot create the packet pool: {e}"))?;
    engine
        .set_default_core(settings.default_core)
        .map_err(|e| format!("--core: {}", e.msg))?;
    engine
        .set_idle_sleep_max_us(settings.idle_sleep_max_us)
        .map_err(|e| format!("--idle-sleep-max-us: {}", e.msg))?;
    engine
        .set_runtime(settings.runtime)
        .map_err(|e| format!("runtime sampling: {}", e.msg))?;
    tracing::info!(
        buffers = settings.engine.buffers,
        pages = ?engine.pool().page_kind(),
        "packet pool ready"
    );
    let engine = Arc::new(Mutex::new(engine));
    // The pid file exists before a client can reach the daemon (a client that got an answer
    // may signal it by that file).
    if let Some(p) = &settings.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write pid file {}: {e}", p.display()))?;
    }
    let listener = match bind(&settings.listen).await {
        Ok(l) => l,
        Err(e) => {
            if let Some(p) = &settings.pid_file {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let http = match bind_http(&settings, &engine, creds.token.clone()).await {
        Ok(h) => h,
        Err(e) => {
            if let Some(p) = &settings.pid_file {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let (kill_tx, kill_rx) = watch::channel(false);
    let control = Arc::new(Control::new(engine.clone(), kill_tx));
    observe::spawn_sampler(engine.clone(), control.drop_rates());
    let check = TokenCheck(creds.token.clone());
    let svc = tonic::service::interceptor::InterceptedService::new(
        BessControlServer::from_arc(control.clone()).max_decoding_message_size(16 << 20),
        check.clone(),
    );
    let ext_svc = tonic::service::interceptor::InterceptedService::new(
        BessemerControlServer::from_arc(control),
        check,
    );
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let mut http_tasks = Vec::new();
    for (l, r) in http {
        tracing::info!(
            "HTTP endpoints on {}",
            l.local_addr().map_err(|e| e.to_string())?
        );
        let mut stop = http_stop_rx.clone();
        let limits = Limits {
            max: http_max,
            first: settings.handshake_timeout,
            idle: settings.idle_timeout,
        };
        http_tasks.push(tokio::spawn(observe::http::serve(
            l,
            r,
            limits,
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        )));
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        let _ = stop_rx.await;
    };
    let secured =
        creds.tls.is_some() && (creds.token.is_some() || settings.security.tls_client_ca.is_some());
    // Keepalive pings find dead and half-open peers; a live client answers them well within
    // the guarded connection's idle limit (at least 35 s).
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)));
    let mut refusal = Refusal::Grpc;
    if let (Some(tls), Listen::Tcp(_)) = (creds.tls, &settings.listen) {
        builder = builder
            .tls_config(tls)
            .map_err(|e| format!("bad TLS certificate or key: {e}"))?;
        refusal = Refusal::GrpcTls;
    }
    let router = builder.add_service(svc).add_service(ext_svc);
    tracing::info!("bessemerd listening on {}", settings.listen);
    if let Listen::Tcp(a) = &settings.listen {
        if !a.ip().is_loopback() && !secured {
            // BESS's protocol has no authentication: whoever reaches the port controls the
            // daemon (creates ports on any interface, reads every packet with tcpdump hooks).
            tracing::warn!(
                "the control port {a} is reachable beyond this host and has no \
                 authentication (--insecure-remote): anyone who can connect to it controls \
                 the daemon; prefer TLS with a credential, 127.0.0.1 or --unix"
            );
        }
    }
    let unix_path = match &listener {
        Listener::Unix(_, p) => Some(p.clone()),
        Listener::Tcp(_) => None,
    };
    let accept = match listener {
        Listener::Tcp(l) => Accept::Tcp(l),
        Listener::Unix(l, _) => Accept::Unix(l),
    };
    let limits = Limits {
        max: control_max,
        first: settings.handshake_timeout,
        idle: settings.idle_timeout.max(Duration::from_secs(35)),
    };
    let incoming = accept.incoming(Label("control port"), limits, refusal);
    let mut server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown));
    let served = tokio::select! {
        r = &mut server => Some(r),
        _ = stop_requested(signals, kill_rx) => None,
    };
    let result = match served {
        // The accept loop never ends by itself: a server that returns without a stop request
        // has failed, however it says it ended.
        Some(r) => Err(match r {
            Ok(Ok(())) => "the control server stopped without a stop request".to_string(),
            Ok(Err(e)) => format!("the control server failed: {e}"),
            Err(e) => format!("the control server's task failed: {e}"),
        }),
        None => {
            let _ = stop_tx.send(());
            // Graceful: in-flight requests finish; clients that hold connections open do
            // not keep the daemon alive for long.
            if tokio::time::timeout(Duration::from_secs(3), &mut server)
                .await
                .is_err()
            {
                tracing::warn!("connections still open after 3 s; stopping anyway");
                server.abort();
            }
            Ok(())
        }
    };
    let _ = http_stop_tx.send(true);
    for t in http_tasks {
        if tokio::time::timeout(Duration::from_secs(3), t)
            .await
            .is_err()
        {
            tracing::warn!("HTTP connections still open after 3 s; stopping anyway");
        }
    }
    tracing::info!("stopping the engine");
    let stopped = tokio::task::spawn_blocking(move || {
        let mut e = engine.lock().unwrap_or_else(|p| p.into_inner());
        let _ = e.pause_all();
        if let Err(err) = e.reset_all() {
            tracing::warn!("reset at shutdown: {err}");
        }
    })
    .await;
    if let Err(e) = stopped {
        tracing::error!("engine shutdown failed: {e}");
    }
    if let Some(p) = &settings.pid_file {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    tracing::info!("bessemerd stopped");
    result
}

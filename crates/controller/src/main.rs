//! `bessemer-controller`: see the library's documentation and docs/deploy.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bessemer_controller::crd::BessemerPipeline;
use bessemer_controller::daemon::Access;
use bessemer_controller::reconcile::{self, Ctx};
use clap::{CommandFactory, Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{reflector, watcher, Controller, WatchStreamExt};
use kube::{Api, Client};
use tracing_subscriber::EnvFilter;

/// Applies BessemerPipeline resources to the bessemerd of every selected node.
#[derive(Parser, Debug)]
#[command(name = "bessemer-controller", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Watch BessemerPipelines and Nodes (through KUBECONFIG, or in-cluster) and apply.
    Run(RunArgs),
    /// Print the BessemerPipeline CustomResourceDefinition (YAML).
    Crd,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// bessemerd's control port on every node (a node's bessemer.io/control-address
    /// annotation overrides address and port).
    #[arg(long, default_value_t = 10514)]
    daemon_port: u16,
    /// Check every pipeline on its nodes this often, changed or not (a restarted daemon gets
    /// its graph back within this).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    resync_secs: f64,
    /// Connect to the daemons over TLS, trusting this CA (PEM).
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// The name in the daemons' certificates (default: the address's host).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
    /// Send this file's first line as a bearer token (the daemons' --token-file).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Timeout of each call to a daemon and of connecting.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    timeout_secs: f64,
    /// Watch this namespace only (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Log level or tracing filter.
    #[arg(long, default_value = "info")]
    log_level: String,
}

fn secs(v: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{what} must be a positive number of seconds, not {v}"))
}

async fn run(a: RunArgs) -> Result<(), String> {
    let token = match &a.token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read --token-file {}: {e}", f.display()))?
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let access = Access {
        tls_ca: a.tls_ca.clone(),
        tls_server_name: a.tls_server_name.clone(),
        token,
        timeout: secs(a.timeout_secs, "--timeout-secs")?,
    };
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot reach Kubernetes (KUBECONFIG or in-cluster): {e}"))?;
    let pipelines: Api<BessemerPipeline> = match &a.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        access,
        daemon_port: a.daemon_port,
        resync: secs(a.resync_secs, "--resync-secs")?,
    });
    // The controller's own status writes must not wake it: only spec changes (generation),
    // finalizers and deletion do; the periodic resync does the rest.
    let key = |p: &BessemerPipeline| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        p.metadata.generation.hash(&mut h);
        p.metadata.deletion_timestamp.is_some().hash(&mut h);
        p.metadata.finalizers.hash(&mut h);
        Some(h.finish())
    };
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(pipelines, watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .predicate_filter(key, Default::default());
    // A node's labels, addresses or annotations changing may change what it should run.
    let node_key = |n: &Node| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        n.metadata.labels.hash(&mut h);
        n.metadata.annotations.hash(&mut h);
        if let Some(s) = &n.status {
            for ad in s.addresses.iter().flatten() {
                (&ad.type_, &ad.address).hash(&mut h);
            }
        }
        Some(h.finish())
    };
    let node_events = watcher(nodes, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(node_key, Default::default());
    let store = reader.clone();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "bessemer-controller running"
    );
    Controller::for_stream(stream, reader)
        .watches_stream(node_events, move |_n: Node| {
            store
                .state()
                .into_iter()
                .map(|p| ObjectRef::from_obj(&*p))
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!("reconcile: {e}");
            }
        })
        .await;
    Ok(())
}

fn main() {
    bessemer_clidoc::generate_if_asked(Cli::command);
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Crd => print!("{}", bessemer_controller::crd_yaml()),
        Cmd::Run(a) => {
            let filter = match EnvFilter::try_new(&a.log_level) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!(
                        "bessemer-controller: bad --log-level '{}': {e}",
                        a.log_level
                    );
                    std::process::exit(2);
                }
            };
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr)
                .init();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            if let Err(e) = rt.block_on(run(a)) {
                eprintln!("bessemer-controller: {e}");
                std::process::exit(1);
            }
        }
    }
}

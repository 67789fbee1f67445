//! `bessemerd`: the BESS-compatible gRPC control daemon. See `docs/daemon.md`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use bessemer_daemon::server::{self, Listen, Settings};
use clap::{CommandFactory, Parser};
use tracing_subscriber::EnvFilter;

/// Bessemer's BESS-compatible control daemon (gRPC service bess.pb.BESSControl).
///
/// Always runs in the foreground and logs to stderr unless --log-file is given.
#[derive(Parser, Debug)]
#[command(name = "bessemerd", version, about)]
struct Cli {
    /// TCP port to listen on.
    #[arg(short = 'p', long, default_value_t = 10514)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Listen on this unix-domain socket instead of TCP.
    #[arg(long, value_name = "PATH")]
    unix: Option<PathBuf>,
    /// Packet buffers in the pool.
    #[arg(long, default_value_t = 32768, value_parser = clap::value_parser!(u32).range(64..=(1 << 24)))]
    buffers: u32,
    /// Use plain 4 KiB pages for packet memory, never hugepages.
    #[arg(long)]
    no_hugepages: bool,
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Append logs to this file instead of stderr.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Write the process id here (removed at exit).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
    /// Run in the foreground (the default and only mode: bessemerd never daemonizes).
    #[arg(short = 'f', long)]
    foreground: bool,
    /// Do not pin worker threads to their cores.
    #[arg(long)]
    no_pin: bool,
    /// Core of the default worker, started when a pipeline runs and no worker was added
    /// (BESS's -c).
    #[arg(short = 'c', long, default_value_t = 0)]
    core: usize,
    /// Let idle workers sleep: after 1 ms without a packet a worker naps between rounds,
    /// 8 µs at first, doubling up to this many µs (at most 10000), until work returns (as
    /// Open vSwitch's pmd-sleep-max). 0, the default, keeps BESS's always-polling workers.
    #[arg(long, value_name = "US", default_value_t = 0)]
    idle_sleep_max_us: u32,
    /// Turn runtime sampling off: `bessemer show runtime` then has no task runs and no
    /// cycles (it costs under 1 % on a chain of 8 Bypass modules; docs/observability.md).
    #[arg(long)]
    no_runtime: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100). Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Serve the live web view of the pipeline at http://ADDR/ (e.g. 127.0.0.1:8080). Off by
    /// default; may be the same address as --metrics.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Also admit HTTP peers from this network (e.g. 10.0.0.0/8; repeatable). Without it the
    /// HTTP endpoints answer loopback peers only.
    #[arg(long, value_name = "NETWORK")]
    http_allow: Vec<String>,
    /// Serve the control port over TLS with this certificate chain (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by this CA (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Require `authorization: Bearer TOKEN` on every RPC (and on HTTP requests from beyond
    /// loopback); the token is the file's first line.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Allow a control port beyond loopback without TLS and credentials, as BESS does
    /// (anyone who reaches it controls the daemon).
    #[arg(long)]
    insecure_remote: bool,
    /// Most control connections open at once; more are refused with a message (at most a
    /// quarter of the open-descriptor limit, which bessemerd raises to its hard limit).
    #[arg(long, value_name = "N", default_value_t = server::MAX_CONTROL_CONNECTIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Close a control or HTTP connection that sends nothing, or does not finish its TLS
    /// handshake, within this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    handshake_timeout: u32,
    /// Close a connection that has sent nothing for this many seconds (the control port's
    /// keepalive pings keep live gRPC clients talking; at least 35 there).
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=86400))]
    idle_timeout: u32,
    /// Arguments added to DPDK's EAL when the first DPDK PMDPort starts it (e.g.
    /// "-a 0000:3b:00.0 --log-level=pmd.net.ice:debug"); see `bessemerd --help` and
    /// docs/ports.md. DPDK is never started by a daemon that creates no DPDK port.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    dpdk_args: Option<String>,
    /// Hugepage memory for DPDK in MB (bessd's -m); 0: no hugepages (plain memory,
    /// virtual devices and AF_XDP only). Default: hugepages if the machine has free ones.
    #[arg(short = 'm', long, value_name = "MB")]
    dpdk_mem: Option<u32>,
    /// Serve PMDPort's net_af_xdp / net_af_packet vdevs with DPDK's own drivers instead of
    /// Bessemer's AFXDPPort / AFPacketPort (which are faster on veth).
    #[arg(long)]
    dpdk_vdevs: bool,
    /// Copy packets between DPDK's buffers and Bessemer's instead of laying DPDK's mbufs
    /// over Bessemer's frames (zero copy, the default where DPDK uses IOVA as VA).
    #[arg(long)]
    dpdk_copy: bool,
}

fn init_logs(cli: &Cli) -> Result<(), String> {
    let filter = EnvFilter::try_new(&cli.log_level)
        .map_err(|e| format!("bad --log-level '{}': {e}", cli.log_level))?;
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    match &cli.log_file {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("cannot open log file {}: {e}", p.display()))?;
            b.with_ansi(false)
                .with_writer(std::sync::Mutex::new(f))
                .init();
        }
        None => b
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init(),
    }
    Ok(())
}

fn main() {
    bessemer_clidoc::generate_if_asked(Cli::command);
    let cli = Cli::parse();
    if let Err(e) = init_logs(&cli) {
        eprintln!("bessemerd: {e}");
        std::process::exit(2);
    }
    let listen = match &cli.unix {
        Some(p) => Listen::Unix(p.clone()),
        None => Listen::Tcp((cli.bind, cli.port).into()),
    };
    let mut settings = Settings::tcp(cli.bind, cli.port);
    settings.listen = listen;
    settings.engine.buffers = cli.buffers as usize;
    settings.engine.pin = !cli.no_pin;
    settings.pid_file = cli.pid_file.clone();
    settings.default_core = cli.core;
    settings.idle_sleep_max_us = cli.idle_sleep_max_us;
    settings.runtime = !cli.no_runtime;
    settings.metrics = cli.metrics;
    settings.http = cli.http;
    settings.http_allow = cli.http_allow.clone();
    settings.max_connections = cli.max_connections as usize;
    settings.handshake_timeout = std::time::Duration::from_secs(cli.handshake_timeout.into());
    settings.idle_timeout = std::time::Duration::from_secs(cli.idle_timeout.into());
    settings.security = server::Security {
        tls_cert: cli.tls_cert.clone(),
        tls_key: cli.tls_key.clone(),
        tls_client_ca: cli.tls_client_ca.clone(),
        token_file: cli.token_file.clone(),
        insecure_remote: cli.insecure_remote,
    };
    if cli.no_hugepages {
        settings = settings.no_hugepages();
    }
    let dpdk_mem = cli.dpdk_mem.or(cli.no_hugepages.then_some(0));
    let dpdk_args = cli
        .dpdk_args
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    bessemer_dpdk::set_eal_args(dpdk_args, dpdk_mem);
    bessemer_drivers::pmd_port::set_kernel_vdevs_to_dpdk(cli.dpdk_vdevs);
    bessemer_drivers::pmd_port::set_dpdk_copy(cli.dpdk_copy);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bessemerd-rpc")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bessemerd: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(server::run(settings)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            if cli.log_file.is_some() {
                tracing::error!("{e}");
            }
            // Always on stderr, whatever the log level.
            eprintln!("bessemerd: {e}");
            std::process::exit(1);
        }
    }
}

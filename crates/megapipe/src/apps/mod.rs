//! Servers built on the channel and, with identical application logic, on plain epoll.
//!
//! A [`Service`] sees a connection's received bytes and appends responses; a backend
//! ([`megapipe_backend`] or [`epoll_backend`]) owns sockets, batching and back-pressure.

pub mod epoll_backend;
pub mod http;
pub mod kv;
pub mod megapipe_backend;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::net;

/// One piece of a response: bytes the service built, or shared bytes (a cached file).
pub enum OutBuf {
    /// Bytes owned by this response.
    Owned(Vec<u8>),
    /// Bytes shared with a cache.
    Shared(Arc<[u8]>),
}

impl AsRef<[u8]> for OutBuf {
    fn as_ref(&self) -> &[u8] {
        match self {
            OutBuf::Owned(v) => v,
            OutBuf::Shared(a) => a,
        }
    }
}

/// Appends bytes to the response, extending the last owned piece instead of adding one.
pub fn push_bytes(out: &mut Vec<OutBuf>, bytes: &[u8]) {
    if let Some(OutBuf::Owned(v)) = out.last_mut() {
        v.extend_from_slice(bytes);
    } else {
        out.push(OutBuf::Owned(bytes.to_vec()));
    }
}

/// What the backend does with a connection after `process`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// Send what was produced, then close.
    Close,
}

/// Application logic shared by both backends.
pub trait Service: Send + Sync + 'static {
    /// Per-connection state.
    type Conn: Default;
    /// Consumes complete requests from the front of `input` (leaving a partial one) and
    /// appends their responses to `out`.
    fn process(&self, conn: &mut Self::Conn, input: &mut Vec<u8>, out: &mut Vec<OutBuf>) -> Flow;
}

/// Echo: every byte received is sent back (the RPC ping-pong server of the benchmark).
pub struct Echo;

impl Service for Echo {
    type Conn = ();
    fn process(&self, _: &mut (), input: &mut Vec<u8>, out: &mut Vec<OutBuf>) -> Flow {
        out.push(OutBuf::Owned(std::mem::take(input)));
        Flow::Continue
    }
}

/// Which I/O backend and which of MegaPipe's techniques a server uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// epoll + non-blocking sockets; `shared_listener`: one listener in every thread's epoll
    /// (the seeds' baseline), else one `SO_REUSEPORT` + `SO_INCOMING_CPU` listener per thread.
    Epoll {
        /// One listener shared by all threads.
        shared_listener: bool,
    },
    /// A channel per thread.
    MegaPipe {
        /// Partitioned listener per channel (`cpu_mask`), else all threads accept on one.
        partitioned: bool,
        /// Batching threshold (1: every request is its own syscall).
        batch: usize,
        /// Accept into lightweight handles.
        lightweight: bool,
        /// One multishot read per connection instead of a read per request (beyond the seeds).
        multishot: bool,
    },
}

impl Io {
    /// The full MegaPipe configuration.
    pub const MEGAPIPE: Io = Io::MegaPipe {
        partitioned: true,
        batch: 32,
        lightweight: true,
        multishot: true,
    };
    /// The best epoll configuration.
    pub const EPOLL: Io = Io::Epoll {
        shared_listener: false,
    };

    /// Parses `megapipe` or `epoll` (the servers' `--io`).
    pub fn parse(s: &str) -> Result<Io, String> {
        match s {
            "megapipe" => Ok(Io::MEGAPIPE),
            "epoll" => Ok(Io::EPOLL),
            other => Err(format!("unknown --io {other:?}: use megapipe or epoll")),
        }
    }
}

/// Counters the server threads add to (read by the benchmark).
#[derive(Default)]
pub struct ServerStats {
    /// System calls made by the I/O loops.
    pub syscalls: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections the service or a failed write ended (bad input, `Connection: close`, quit).
    pub service_closes: AtomicU64,
}

/// Where and how to serve.
pub struct ServeConfig {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// One thread per entry, pinned to that CPU.
    pub cpus: Vec<usize>,
    /// Backend and techniques.
    pub io: Io,
}

/// Largest response backlog per connection before the server stops reading from it (a client
/// that never reads cannot make the server buffer without bound).
pub const MAX_PENDING_OUT: usize = 4 << 20;

/// A running server: its address and the means to stop it.
pub struct Server {
    /// The bound address (port resolved).
    pub addr: SocketAddr,
    /// Set to stop every thread.
    pub stop: Arc<AtomicBool>,
    /// Counters.
    pub stats: Arc<ServerStats>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Stops the threads and waits for them.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Waits for the threads (they end when `stop` is set).
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts `service` on the configured backend, one pinned thread per CPU.
pub fn serve<S: Service>(service: Arc<S>, cfg: ServeConfig) -> std::io::Result<Server> {
    let nonblocking = matches!(cfg.io, Io::Epoll { .. });
    let opts = net::ListenOptions {
        nonblocking,
        ..Default::default()
    };
    let listener = net::tcp_listener(cfg.addr, opts)?;
    let addr = net::local_addr(listener.as_raw_fd())?;
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ServerStats::default());
    let mut threads = Vec::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    let covered: u64 = cfg.cpus.iter().fold(0, |m, &c| m | (1u64 << c));
    let all_cpus = (1u64 << net::online_cpus()) - 1;
    for (i, &cpu) in cfg.cpus.iter().enumerate() {
        let l: OwnedFd = listener.try_clone()?;
        // Cores without a thread still get SYNs; thread 0 also serves the original listener.
        let serve_orig = i == 0 && (covered & all_cpus) != all_cpus;
        let (service, stop, stats, ready) = (
            service.clone(),
            stop.clone(),
            stats.clone(),
            ready_tx.clone(),
        );
        let io = cfg.io;
        threads.push(std::thread::spawn(move || {
            let r = match io {
                Io::Epoll { shared_listener } => epoll_backend::run(
                    &*service,
                    l,
                    addr,
                    cpu,
                    shared_listener,
                    serve_orig,
                    &stop,
                    &stats,
                    ready,
                ),
                Io::MegaPipe {
                    partitioned,
                    batch,
                    lightweight,
                    multishot,
                } => megapipe_backend::run(
                    &*service,
                    l,
                    cpu,
                    megapipe_backend::Options {
                        partitioned,
                        batch,
                        lightweight,
                        multishot,
                        serve_orig,
                    },
                    &stop,
                    &stats,
                    ready,
                )
                .map_err(|e| std::io::Error::other(e.to_string())),
            };
            if let Err(e) = r {
                eprintln!("server thread on cpu {cpu}: {e}");
            }
        }));
    }
    drop(ready_tx);
    for _ in 0..cfg.cpus.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                stop.store(true, Ordering::SeqCst);
                return Err(e);
            }
            Err(_) => return Err(std::io::Error::other("a server thread died while starting")),
        }
    }
    drop(listener);
    Ok(Server {
        addr,
        stop,
        stats,
        threads,
    })
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// What the server binaries share: raises the soft descriptor limit to the hard one (and
/// logs both to stderr), parses `--addr`/`--port`/`--cpus`, serves `service`, prints where
/// it listens, and runs until SIGTERM or SIGINT; a bad argument exits with 2 and
/// a listener that cannot be made with 1, each with a message naming `name` and the problem.
pub fn run_server<S: Service>(
    name: &str,
    service: Arc<S>,
    addr: &str,
    port: u16,
    cpus: Option<&str>,
    io: Io,
) {
    let fail = |code: i32, msg: String| -> ! {
        eprintln!("{name}: {msg}");
        std::process::exit(code);
    };
    let cpus = match cpus
        .map(parse_cpus)
        .unwrap_or_else(|| Ok((0..net::online_cpus()).collect()))
    {
        Ok(c) => c,
        Err(e) => fail(2, e),
    };
    let addr: SocketAddr = match format!("{addr}:{port}").parse() {
        Ok(a) => a,
        Err(e) => fail(2, format!("bad address {addr}:{port}: {e}")),
    };
    // Every connection needs a descriptor (the epoll backend, and MegaPipe's once its
    // direct-descriptor tables are full): take all the hard limit allows.
    let soft = net::raise_nofile_limit();
    let hard = match net::nofile_limits() {
        Ok((_, libc::RLIM_INFINITY)) => "unlimited".to_string(),
        Ok((_, hard)) => hard.to_string(),
        Err(e) => format!("unknown: {e}"),
    };
    eprintln!("{name}: RLIMIT_NOFILE soft limit {soft} (hard {hard})");
    let cfg = ServeConfig {
        addr,
        cpus: cpus.clone(),
        io,
    };
    let server = match serve(service, cfg) {
        Ok(s) => s,
        Err(e) => fail(1, format!("cannot serve on {addr}: {e}")),
    };
    println!(
        "{name} listening on {} (io={io:?}, cpus={cpus:?})",
        server.addr
    );
    wait_for_termination();
    server.shutdown();
}

/// Installs SIGTERM/SIGINT handlers and blocks until one arrives.
pub fn wait_for_termination() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    while !SIGNALLED.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Parses a CPU list such as `0,1` or `0-3`.
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (
                a.parse().map_err(|_| format!("bad cpu {a:?}"))?,
                b.parse().map_err(|_| format!("bad cpu {b:?}"))?,
            );
            v.extend(a..=b);
        } else {
            v.push(part.parse().map_err(|_| format!("bad cpu {part:?}"))?);
        }
    }
    if v.is_empty() || v.iter().any(|&c| c >= 64) {
        return Err(format!("cpu list {s:?} must name CPUs 0..63"));
    }
    Ok(v)
}

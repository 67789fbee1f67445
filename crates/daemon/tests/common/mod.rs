//! Starting `bessemerd` as a subprocess on a free port and talking to it.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bessemer_daemon::pb;
use bessemer_daemon::pb::bess_control_client::BessControlClient;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);

/// The daemon binary built by cargo for the tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_bessemerd");

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().unwrap().port()
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bessemerd-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The options every test daemon gets.
pub fn base_args() -> Vec<String> {
    [
        "--no-pin",
        "--buffers",
        "4096",
        "--no-hugepages",
        "--log-level",
        "warn",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A running daemon; killed (SIGKILL) on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub stderr_path: PathBuf,
}

impl Daemon {
    /// Starts a daemon on a free port with `extra` arguments and waits until it accepts
    /// connections.
    pub fn start(name: &str, extra: &[&str]) -> Daemon {
        let port = free_port();
        let mut args = base_args();
        args.extend(["--port".to_string(), port.to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let d = Daemon::spawn(name, &args, port);
        d.wait_tcp();
        d
    }

    /// Spawns the binary with exactly `args` (stderr to a file).
    pub fn spawn(name: &str, args: &[String], port: u16) -> Daemon {
        let dir = scratch(name);
        let stderr_path = dir.join("stderr.log");
        let err = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start bessemerd");
        Daemon {
            child,
            port,
            stderr_path,
        }
    }

    fn wait_tcp(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bessemerd did not listen on port {} within {WAIT:?}; stderr:\n{}",
                self.port,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.stderr_path) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// A client connected to the daemon.
    pub async fn client(&self) -> BessControlClient<Channel> {
        let ch = Endpoint::from_shared(format!("http://127.0.0.1:{}", self.port))
            .unwrap()
            .connect_timeout(WAIT)
            .timeout(WAIT)
            .connect()
            .await
            .expect("connect to bessemerd");
        BessControlClient::new(ch).max_decoding_message_size(64 << 20)
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_child(&mut self.child, &self.stderr_path)
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill failed");
    }
}

/// Waits at most [`WAIT`] for `child` to exit.
pub fn wait_child(child: &mut Child, stderr: &Path) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "bessemerd did not exit within {WAIT:?}; stderr:\n{}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An `Any` holding message `m` of type `bess.pb.<name>`.
pub fn any<M: Message>(name: &str, m: &M) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("type.googleapis.com/bess.pb.{name}"),
        value: m.encode_to_vec(),
    }
}

/// Asserts that a response carries no error.
#[track_caller]
pub fn ok(e: &Option<pb::Error>) {
    if let Some(e) = e {
        assert_eq!(e.code, 0, "unexpected error: {} ({})", e.errmsg, e.code);
    }
}

/// Asserts that a response carries an error whose message contains `needle`; returns it.
#[track_caller]
pub fn err(e: &Option<pb::Error>, needle: &str) -> pb::Error {
    let e = e.clone().expect("expected an error, got success");
    assert_ne!(e.code, 0, "error without a code: {}", e.errmsg);
    assert!(
        e.errmsg.contains(needle),
        "error message {:?} does not contain {needle:?}",
        e.errmsg
    );
    e
}

/// Runs a future with the global test time bound.
pub async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(120), f)
        .await
        .expect("test exceeded its time bound")
}

/// Adds worker 0 on core 0 and resumes the workers, as a BESS script's end does; both must
/// succeed.
pub async fn run_on_worker0(
    c: &mut bessemer_daemon::pb::bess_control_client::BessControlClient<tonic::transport::Channel>,
) {
    use bessemer_daemon::pb;
    ok(&c
        .add_worker(pb::AddWorkerRequest {
            wid: 0,
            core: 0,
            scheduler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .error);
    ok(&c
        .resume_all(pb::EmptyRequest {})
        .await
        .unwrap()
        .into_inner()
        .error);
}

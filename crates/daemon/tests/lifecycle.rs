//! Starting and stopping: port conflicts, pid file, signals, unix socket.

mod common;

use std::time::{Duration, Instant};

use bessemer_daemon::pb;
use common::*;

#[test]
fn second_daemon_on_the_same_port_refuses_to_start() {
    let d = Daemon::start("first", &[]);
    let mut args = base_args();
    args.extend(["--port".to_string(), d.port.to_string()]);
    let mut second = Daemon::spawn("second", &args, d.port);
    let st = second.wait_exit();
    assert!(!st.success(), "second daemon exited with {st:?}");
    let msg = format!(
        "another bessemerd or BESS is probably running on 127.0.0.1:{}",
        d.port
    );
    assert!(
        second.stderr().contains(&msg),
        "stderr:\n{}",
        second.stderr()
    );
}

#[test]
fn kill_bess_exits_zero_and_removes_the_pid_file() {
    let dir = scratch("kill");
    let pid = dir.join("d.pid");
    let mut d = Daemon::start("kill", &["--pid-file", pid.to_str().unwrap()]);
    // The pid file is written once the daemon is set up, just after its port opens.
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = loop {
        match std::fs::read_to_string(&pid) {
            Ok(s) if s.ends_with('\n') => break s,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            r => panic!("pid file not written: {r:?}"),
        }
    };
    assert_eq!(written.trim(), d.child.id().to_string());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(bounded(async {
        let mut c = d.client().await;
        // Leave something running so shutdown has work to do.
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "src".into(),
                mclass: "Source".into(),
                arg: None,
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "snk".into(),
                mclass: "Sink".into(),
                arg: None,
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        ok(&c
            .connect_modules(pb::ConnectModulesRequest {
                m1: "src".into(),
                m2: "snk".into(),
                ..Default::default()
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
        ok(&c
            .kill_bess(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
    }));
    let st = d.wait_exit();
    assert_eq!(st.code(), Some(0), "stderr:\n{}", d.stderr());
    assert!(!pid.exists());
}

#[test]
fn sigterm_exits_zero_and_removes_the_pid_file() {
    let dir = scratch("term");
    let pid = dir.join("d.pid");
    let mut d = Daemon::start("term", &["--pid-file", pid.to_str().unwrap()]);
    assert!(pid.exists());
    d.signal(libc::SIGTERM);
    let st = d.wait_exit();
    assert_eq!(st.code(), Some(0), "stderr:\n{}", d.stderr());
    assert!(!pid.exists());
}

#[test]
fn unix_socket() {
    let dir = scratch("unix");
    let sock = dir.join("bess.sock");
    let mut args = base_args();
    args.extend(["--unix".to_string(), sock.to_str().unwrap().to_string()]);
    let mut d = Daemon::spawn("unix", &args, 0);
    let deadline = Instant::now() + WAIT;
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(
            Instant::now() < deadline,
            "no socket; stderr:\n{}",
            d.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let path = sock.clone();
    rt.block_on(bounded(async move {
        let ch = tonic::transport::Endpoint::from_static("http://localhost")
            .timeout(WAIT)
            .connect_with_connector(tower::service_fn(move |_| {
                let p = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(p).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }))
            .await
            .expect("connect over the unix socket");
        let mut c = pb::bess_control_client::BessControlClient::new(ch);
        let v = c
            .get_version(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(v.version.starts_with("bessemer"));
    }));
    // A second daemon on the same socket refuses.
    let mut second = Daemon::spawn("unix2", &args, 0);
    let st = second.wait_exit();
    assert!(!st.success());
    assert!(
        second.stderr().contains("probably running"),
        "stderr:\n{}",
        second.stderr()
    );
    d.signal(libc::SIGINT);
    let st = d.wait_exit();
    assert_eq!(st.code(), Some(0), "stderr:\n{}", d.stderr());
    assert!(!sock.exists(), "socket file left behind");
}

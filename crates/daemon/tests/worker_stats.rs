//! What ListWorkers reports about a worker's traffic: `silent_drops`, which bessctl's
//! `show worker` prints as "Deadend pkts".

mod common;

use std::time::{Duration, Instant};

use bessemer_daemon::pb;
use common::*;

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

async fn silent_drops(c: &mut Client) -> i64 {
    let w = c
        .list_workers(pb::EmptyRequest {})
        .await
        .unwrap()
        .into_inner();
    ok(&w.error);
    assert_eq!(w.workers_status.len(), 1);
    w.workers_status[0].silent_drops
}

async fn deadends(c: &mut Client, name: &str) -> u64 {
    let i = c
        .get_module_info(pb::GetModuleInfoRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    ok(&i.error);
    i.deadends
}

/// A Source with nothing connected: every packet is a dead end, counted by the module's
/// `deadends` and by its worker's `silent_drops`, which agree once the worker is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadend_packets_are_the_workers_silent_drops() {
    let d = Daemon::start("worker_stats", &[]);
    bounded(async {
        let mut c = d.client().await;
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
        run_on_worker0(&mut c).await;
        let deadline = Instant::now() + WAIT;
        while silent_drops(&mut c).await < 1000 {
            assert!(Instant::now() < deadline, "no silent drops after {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ok(&c
            .pause_all(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
        let dropped = silent_drops(&mut c).await;
        assert_eq!(dropped as u64, deadends(&mut c, "src").await);
        ok(&c
            .reset_all(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
    })
    .await;
}

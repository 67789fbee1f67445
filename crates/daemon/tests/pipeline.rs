//! A BESS controller's view: classes, modules, workers, traffic classes, commands.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bessemer_daemon::pb;
use common::*;
use prost::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_classes() {
    let d = Daemon::start("classes", &[]);
    bounded(async {
        let mut c = d.client().await;
        let v = c
            .get_version(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&v.error);
        assert!(v.version.starts_with("bessemer "), "{}", v.version);

        let l = c
            .list_mclass(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&l.error);
        for n in ["Source", "Sink", "Queue", "Measure"] {
            assert!(l.names.iter().any(|x| x == n), "{n} missing: {:?}", l.names);
        }
        let i = c
            .get_mclass_info(pb::GetMclassInfoRequest {
                name: "Queue".into(),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&i.error);
        assert_eq!(i.name, "Queue");
        assert!(i.help.contains("QueueArg"), "{}", i.help);
        let k = i.cmds.iter().position(|x| x == "get_status").unwrap();
        assert_eq!(i.cmd_args[k], "QueueCommandGetStatusArg");
        let i = c
            .get_mclass_info(pb::GetMclassInfoRequest {
                name: "NoSuchClass".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&i.error, "NoSuchClass").code, libc::ENOENT);
    })
    .await;
}

async fn ogate_pkts(c: &mut Client, name: &str) -> u64 {
    let i = c
        .get_module_info(pb::GetModuleInfoRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    ok(&i.error);
    i.ogates.first().map(|g| g.pkts).unwrap_or(0)
}

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_to_sink_runs_and_counts() {
    let d = Daemon::start("pipeline", &[]);
    bounded(async {
        let mut c = d.client().await;
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "src".into(),
                mclass: "Source".into(),
                arg: Some(any("SourceArg", &pb::SourceArg { pkt_size: 60 })),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        assert_eq!(r.name, "src");
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: String::new(),
                mclass: "Sink".into(),
                arg: None,
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let sink = r.name.clone();
        assert!(!sink.is_empty());
        let r = c
            .connect_modules(pb::ConnectModulesRequest {
                m1: "src".into(),
                m2: sink.clone(),
                ogate: 0,
                igate: 0,
                skip_default_hooks: false,
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let r = c
            .add_worker(pb::AddWorkerRequest {
                wid: 0,
                core: 0,
                scheduler: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        ok(&c
            .resume_all(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);

        let w = c
            .list_workers(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&w.error);
        assert_eq!(w.workers_status.len(), 1);
        assert_eq!(w.workers_status[0].wid, 0);
        assert!(w.workers_status[0].running);

        // Packets flow: the source's output gate counter rises.
        let deadline = Instant::now() + WAIT;
        let first = loop {
            let n = ogate_pkts(&mut c, "src").await;
            if n > 0 {
                break n;
            }
            assert!(Instant::now() < deadline, "no packets after {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let n = ogate_pkts(&mut c, "src").await;
            if n > first {
                break;
            }
            assert!(Instant::now() < deadline, "packet count stuck at {first}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let i = c
            .get_module_info(pb::GetModuleInfoRequest { name: "src".into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(i.mclass, "Source");
        assert_eq!(i.ogates[0].name, sink);
        assert!(i.ogates[0].cnt > 0 && i.ogates[0].timestamp > 0.0);
        let i = c
            .get_module_info(pb::GetModuleInfoRequest { name: sink.clone() })
            .await
            .unwrap()
            .into_inner();
        ok(&i.error);
        assert_eq!(i.igates.len(), 1);
        assert_eq!(i.igates[0].ogates[0].name, "src");
        assert!(i.igates[0].pkts > 0);

        // The source's task is a leaf on worker 0.
        let t = c
            .list_tcs(pb::ListTcsRequest { wid: -1 })
            .await
            .unwrap()
            .into_inner();
        ok(&t.error);
        let leaf = t
            .classes_status
            .iter()
            .filter_map(|s| s.class.as_ref())
            .find(|c| c.leaf_module_name == "src")
            .expect("leaf of src listed");
        assert_eq!(leaf.policy, "leaf");
        assert_eq!(leaf.wid, 0);

        let m = c
            .list_modules(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(m.modules.len(), 2);
        let dump = c
            .dump_mempool(pb::DumpMempoolRequest { socket: -1 })
            .await
            .unwrap()
            .into_inner();
        ok(&dump.error);
        assert_eq!(dump.dumps[0].mp_size, 4096);

        ok(&c
            .reset_all(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
        let m = c
            .list_modules(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(m.modules.is_empty());
        let w = c
            .list_workers(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(w.workers_status.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_get_status_is_a_typed_response() {
    let d = Daemon::start("queue", &[]);
    bounded(async {
        let mut c = d.client().await;
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "q".into(),
                mclass: "Queue".into(),
                arg: Some(any(
                    "QueueArg",
                    &pb::QueueArg {
                        size: 256,
                        prefetch: false,
                        backpressure: false,
                    },
                )),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let r = c
            .module_command(pb::CommandRequest {
                name: "q".into(),
                cmd: "get_status".into(),
                arg: Some(any(
                    "QueueCommandGetStatusArg",
                    &pb::QueueCommandGetStatusArg {},
                )),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let data = r.data.expect("get_status returns data");
        assert_eq!(
            data.type_url,
            "type.googleapis.com/bess.pb.QueueCommandGetStatusResponse"
        );
        let s = pb::QueueCommandGetStatusResponse::decode(data.value.as_slice()).unwrap();
        assert_eq!(s.size, 256);
        assert_eq!(s.count, 0);

        // A command without result data answers with an EmptyArg.
        let r = c
            .module_command(pb::CommandRequest {
                name: "q".into(),
                cmd: "set_burst".into(),
                arg: Some(any(
                    "QueueCommandSetBurstArg",
                    &pb::QueueCommandSetBurstArg { burst: 8 },
                )),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        assert_eq!(
            r.data.unwrap().type_url,
            "type.googleapis.com/bess.pb.EmptyArg"
        );

        // Wrong argument type, unknown command, unknown module.
        let r = c
            .module_command(pb::CommandRequest {
                name: "q".into(),
                cmd: "set_burst".into(),
                arg: Some(any("SourceArg", &pb::SourceArg { pkt_size: 1 })),
            })
            .await
            .unwrap()
            .into_inner();
        let e = err(&r.error, "bess.pb.QueueCommandSetBurstArg");
        assert!(e.errmsg.contains("bess.pb.SourceArg"), "{}", e.errmsg);
        let r = c
            .module_command(pb::CommandRequest {
                name: "q".into(),
                cmd: "explode".into(),
                arg: None,
            })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "explode");
        let r = c
            .module_command(pb::CommandRequest {
                name: "nope".into(),
                cmd: "get_status".into(),
                arg: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&r.error, "nope").code, libc::ENOENT);
    })
    .await;
}

fn find<'a>(t: &'a pb::ListTcsResponse, name: &str) -> Option<&'a pb::TrafficClass> {
    t.classes_status
        .iter()
        .filter_map(|s| s.class.as_ref())
        .find(|c| c.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_classes() {
    let d = Daemon::start("tcs", &[]);
    bounded(async {
        let mut c = d.client().await;
        ok(&c
            .add_worker(pb::AddWorkerRequest {
                wid: 0,
                core: 0,
                scheduler: "default".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .error);
        let r = c
            .add_worker(pb::AddWorkerRequest {
                wid: 1,
                core: 0,
                scheduler: "fancy".into(),
            })
            .await
            .unwrap()
            .into_inner();
        // BESS's schedulers are "" and "experimental" (both accepted); others are EINVAL.
        assert_eq!(err(&r.error, "fancy").code, libc::EINVAL);

        let add = |tc: pb::TrafficClass| pb::AddTcRequest { class: Some(tc) };
        let r = c
            .add_tc(add(pb::TrafficClass {
                name: "rl".into(),
                policy: "rate_limit".into(),
                wid: -1,
                limit: HashMap::from([("packet".to_string(), 1000)]),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let r = c
            .add_tc(add(pb::TrafficClass {
                name: "prio".into(),
                policy: "priority".into(),
                parent: "rl".into(),
                wid: -1,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let r = c
            .add_tc(add(pb::TrafficClass {
                name: "bad".into(),
                policy: "rate_limit".into(),
                resource: "bit".into(),
                limit: HashMap::from([("packet".to_string(), 1000)]),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "packet");
        let r = c
            .add_tc(add(pb::TrafficClass {
                name: "bad".into(),
                policy: "fifo".into(),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "fifo");

        // Attach a source's task under the priority class with priority 3.
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
            .update_tc_parent(pb::UpdateTcParentRequest {
                class: Some(pb::TrafficClass {
                    leaf_module_name: "src".into(),
                    leaf_module_taskid: 0,
                    parent: "prio".into(),
                    arg: Some(pb::traffic_class::Arg::Priority(3)),
                    wid: -1,
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let t = c
            .list_tcs(pb::ListTcsRequest { wid: 0 })
            .await
            .unwrap()
            .into_inner();
        ok(&t.error);
        let rl = find(&t, "rl").expect("rl listed");
        assert_eq!(rl.policy, "rate_limit");
        assert_eq!(rl.resource, "packet");
        assert_eq!(rl.limit.get("packet"), Some(&1000));
        let leaf = t
            .classes_status
            .iter()
            .filter_map(|s| s.class.as_ref())
            .find(|c| c.leaf_module_name == "src")
            .unwrap();
        assert_eq!(leaf.parent, "prio");
        assert_eq!(leaf.arg, Some(pb::traffic_class::Arg::Priority(3)));

        let r = c
            .update_tc_params(pb::UpdateTcParamsRequest {
                class: Some(pb::TrafficClass {
                    name: "rl".into(),
                    limit: HashMap::from([("packet".to_string(), 5000)]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let t = c
            .list_tcs(pb::ListTcsRequest { wid: -1 })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(find(&t, "rl").unwrap().limit.get("packet"), Some(&5000));

        let s = c
            .get_tc_stats(pb::GetTcStatsRequest { name: "rl".into() })
            .await
            .unwrap()
            .into_inner();
        ok(&s.error);
        assert!(s.timestamp > 0.0);
        let s = c
            .get_tc_stats(pb::GetTcStatsRequest {
                name: "ghost".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&s.error, "ghost").code, libc::ENOENT);

        let k = c
            .check_scheduling_constraints(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&k.error);
        assert!(!k.fatal && k.modules.is_empty());

        // Destroying a worker with classes is refused; ResetTcs clears them.
        let r = c
            .destroy_worker(pb::DestroyWorkerRequest { wid: 0 })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "worker 0");
        ok(&c
            .reset_tcs(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
        let t = c
            .list_tcs(pb::ListTcsRequest { wid: -1 })
            .await
            .unwrap()
            .into_inner();
        assert!(find(&t, "rl").is_none() && find(&t, "prio").is_none());
        assert!(t
            .classes_status
            .iter()
            .filter_map(|s| s.class.as_ref())
            .any(|c| c.leaf_module_name == "src"));
    })
    .await;
}

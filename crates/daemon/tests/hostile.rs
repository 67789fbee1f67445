//! Hostile and malformed requests: each gets an answer (error or success), never a crash.

mod common;

use bessemer_daemon::pb;
use common::*;

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

async fn alive(c: &mut Client) {
    let v = c.get_version(pb::EmptyRequest {}).await;
    assert!(v.is_ok(), "daemon stopped answering: {v:?}");
}

async fn create(
    c: &mut Client,
    name: &str,
    class: &str,
    arg: Option<prost_types::Any>,
) -> pb::CreateModuleResponse {
    c.create_module(pb::CreateModuleRequest {
        name: name.into(),
        mclass: class.into(),
        arg,
    })
    .await
    .expect("gRPC status OK")
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments() {
    let d = Daemon::start("hostile-args", &[]);
    bounded(async {
        let mut c = d.client().await;
        // Garbage bytes in a known type.
        let garbage = prost_types::Any {
            type_url: "type.googleapis.com/bess.pb.SourceArg".into(),
            value: vec![0xff; 64],
        };
        let r = create(&mut c, "g", "Source", Some(garbage)).await;
        let e = err(&r.error, "bess.pb.SourceArg");
        assert_eq!(e.code, libc::EINVAL);
        // Wrong type for the class.
        // (carrying a field: an empty message of another type is taken as defaults, as BESS)
        let wrong = any(
            "ExactMatchArg",
            &pb::ExactMatchArg {
                entries: 10,
                ..Default::default()
            },
        );
        let r = create(&mut c, "w", "Source", Some(wrong)).await;
        let e = err(&r.error, "bess.pb.ExactMatchArg");
        assert!(e.errmsg.contains("bess.pb.SourceArg"), "{}", e.errmsg);
        // Unknown type URL.
        let unknown = prost_types::Any {
            type_url: "type.googleapis.com/evil.Payload".into(),
            value: vec![1, 2, 3],
        };
        let r = create(&mut c, "u", "Source", Some(unknown)).await;
        err(&r.error, "evil.Payload");
        // Bytes without a type.
        let untyped = prost_types::Any {
            type_url: String::new(),
            value: vec![8, 1],
        };
        let r = create(&mut c, "t", "Source", Some(untyped)).await;
        err(&r.error, "type URL");
        // A value the module rejects (pkt_size out of range) names the field.
        let big = any("SourceArg", &pb::SourceArg { pkt_size: 1 << 40 });
        let r = create(&mut c, "b", "Source", Some(big)).await;
        err(&r.error, "pkt_size");
        let huge = any("SourceArg", &pb::SourceArg { pkt_size: u64::MAX });
        let r = create(&mut c, "h", "Source", Some(huge)).await;
        err(&r.error, "pkt_size");
        // Deep nesting: 200 000 nested groups, and nested length-delimited fields.
        let deep = prost_types::Any {
            type_url: "type.googleapis.com/bess.pb.SourceArg".into(),
            value: vec![0x0b; 200_000],
        };
        let r = create(&mut c, "d", "Source", Some(deep)).await;
        assert!(r.error.is_some(), "deep groups accepted");
        let mut v: Vec<u8> = Vec::new();
        for _ in 0..2000 {
            let mut n = vec![0x0a]; // field 1, length-delimited
            let mut len = v.len();
            loop {
                let b = (len & 0x7f) as u8;
                len >>= 7;
                if len == 0 {
                    n.push(b);
                    break;
                }
                n.push(b | 0x80);
            }
            n.extend_from_slice(&v);
            v = n;
        }
        let nested = prost_types::Any {
            type_url: "type.googleapis.com/bess.pb.SetMetadataArg".into(),
            value: v,
        };
        let r = create(&mut c, "n", "SetMetadata", Some(nested)).await;
        assert!(r.error.is_some(), "deeply nested message accepted");
        alive(&mut c).await;
        let m = c
            .list_modules(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(
            m.modules.is_empty(),
            "a rejected module exists: {:?}",
            m.modules
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_numbers() {
    let d = Daemon::start("hostile-names", &[]);
    bounded(async {
        let mut c = d.client().await;
        // Unknown and empty classes.
        let r = create(&mut c, "x", "WarpDrive", None).await;
        assert_eq!(err(&r.error, "WarpDrive").code, libc::ENOENT);
        let r = create(&mut c, "x", "", None).await;
        assert_eq!(err(&r.error, "mclass").code, libc::EINVAL);
        // Any non-empty name is a name (BESS: unicode, dashes, dots); overlong ones are not.
        let r = create(&mut c, "源头模块", "Source", None).await;
        ok(&r.error);
        assert_eq!(r.name, "源头模块");
        let r = create(&mut c, &"x".repeat(100_000), "Sink", None).await;
        err(&r.error, "too long");
        let r = create(&mut c, "snk", "Sink", None).await;
        ok(&r.error);
        // Huge numbers.
        let r = c
            .add_worker(pb::AddWorkerRequest {
                wid: 1_000_000_000_000,
                core: 0,
                scheduler: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "1000000000000");
        let r = c
            .add_worker(pb::AddWorkerRequest {
                wid: 0,
                core: 1_000_000_000_000,
                scheduler: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .pause_worker(pb::PauseWorkerRequest { wid: -5 })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "-5");
        let r = c
            .connect_modules(pb::ConnectModulesRequest {
                m1: "snk".into(),
                m2: "snk".into(),
                ogate: 70000,
                igate: 0,
                skip_default_hooks: true,
            })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "70000");
        let r = c
            .connect_modules(pb::ConnectModulesRequest {
                m1: "snk".into(),
                m2: "snk".into(),
                ogate: 0,
                igate: u64::MAX,
                skip_default_hooks: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .disconnect_modules(pb::DisconnectModulesRequest {
                name: String::new(),
                ogate: 0,
            })
            .await
            .unwrap()
            .into_inner();
        err(&r.error, "empty");
        let r = c
            .add_tc(pb::AddTcRequest {
                class: Some(pb::TrafficClass {
                    name: "big".into(),
                    policy: "weighted_fair".into(),
                    resource: "bit".into(),
                    wid: i64::MAX,
                    arg: Some(pb::traffic_class::Arg::Share(i64::MIN)),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .list_tcs(pb::ListTcsRequest { wid: i64::MAX })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .update_tc_parent(pb::UpdateTcParentRequest {
                class: Some(pb::TrafficClass {
                    leaf_module_name: "snk".into(),
                    leaf_module_taskid: u64::MAX,
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .get_module_info(pb::GetModuleInfoRequest {
                name: "\u{0}\u{202e}évil".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        let r = c
            .dump_mempool(pb::DumpMempoolRequest { socket: i32::MIN })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_some());
        alive(&mut c).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_modules() {
    let d = Daemon::start("hostile-many", &[]);
    bounded(async {
        let mut c = d.client().await;
        let mut made = 0;
        for i in 0..2000 {
            let r = create(&mut c, &format!("m{i}"), "NoOP", None).await;
            if r.error.is_none() {
                made += 1;
            }
        }
        // Every call was answered; those that succeeded are listed.
        let m = c
            .list_modules(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&m.error);
        assert_eq!(m.modules.len(), made);
        assert_eq!(made, 2000, "every valid CreateModule succeeds");
        ok(&c
            .reset_modules(pb::EmptyRequest {})
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
        alive(&mut c).await;
    })
    .await;
}

/// SetPortConf reads MAC addresses as BESS does: six octets of one or two hex digits; other
/// forms are EINVAL and leave the port as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_mac_addresses() {
    let d = Daemon::start("hostile-mac", &[]);
    bounded(async {
        let mut c = d.client().await;
        let port = format!("mac{}", std::process::id());
        let r = c
            .create_port(pb::CreatePortRequest {
                name: port.clone(),
                driver: "UnixSocketPort".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        let created = r.mac_addr;
        let set = |mac: &str| pb::SetPortConfRequest {
            name: port.clone(),
            conf: Some(pb::PortConf {
                mac_addr: mac.into(),
                mtu: 0,
                admin_up: true,
            }),
        };
        let get = pb::GetPortConfRequest { name: port.clone() };
        for bad in [
            "0aa:bb:cc:dd:ee:ff",
            "+a:bb:cc:dd:ee:ff",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "aa:bb:cc:dd:ee:",
            " aa:bb:cc:dd:ee:ff",
            "aa-bb-cc-dd-ee-ff",
        ] {
            let r = c.set_port_conf(set(bad)).await.unwrap().into_inner();
            let e = err(&r.error, "is not a MAC address (aa:bb:cc:dd:ee:ff)");
            assert_eq!(e.code, libc::EINVAL, "{bad:?}");
            assert!(e.errmsg.contains(&format!("'{bad}'")), "{}", e.errmsg);
            let r = c.get_port_conf(get.clone()).await.unwrap().into_inner();
            assert_eq!(r.conf.unwrap().mac_addr, created, "{bad:?} changed the MAC");
        }
        // A well-formed address passes the parser and reaches the driver, which (for this
        // driver) refuses any configuration change.
        for good in ["2:0:A:bB:c:dd", "aa:bb:cc:dd:ee:ff"] {
            let r = c.set_port_conf(set(good)).await.unwrap().into_inner();
            let e = err(&r.error, "cannot be changed");
            assert_eq!(e.code, libc::ENOTSUP, "{good:?}: {}", e.errmsg);
        }
        let r = c
            .destroy_port(pb::DestroyPortRequest { name: port })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        alive(&mut c).await;
    })
    .await;
}

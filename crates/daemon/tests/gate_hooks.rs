//! Gate hooks over gRPC: `tcpdump` streams pcap to a FIFO, `track` counts bytes; errors name
//! the problem and leave the pipeline as it was.

mod common;

use std::ffi::CString;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use bessemer_daemon::pb;
use common::*;
use pb::gate_hook_info::Gate;

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

async fn hook(
    c: &mut Client,
    class: &str,
    module: &str,
    gate: Gate,
    arg: Option<prost_types::Any>,
    enable: bool,
) -> pb::ConfigureGateHookResponse {
    c.configure_gate_hook(pb::ConfigureGateHookRequest {
        hook: Some(pb::GateHookInfo {
            class_name: class.into(),
            hook_name: String::new(),
            module_name: module.into(),
            gate: Some(gate),
            arg,
        }),
        enable,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn source_to_sink(c: &mut Client) {
    for (name, class, arg) in [
        (
            "src",
            "Source",
            Some(any("SourceArg", &pb::SourceArg { pkt_size: 60 })),
        ),
        ("snk", "Sink", None),
    ] {
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: name.into(),
                mclass: class.into(),
                arg,
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
    }
    let r = c
        .connect_modules(pb::ConnectModulesRequest {
            m1: "src".into(),
            m2: "snk".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    ok(&r.error);
}

fn tcpdump_arg(fifo: &str) -> Option<prost_types::Any> {
    Some(any(
        "TcpdumpArg",
        &pb::TcpdumpArg {
            fifo: fifo.into(),
            defer: false,
            reconnect: false,
        },
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcpdump_hook_streams_pcap_and_bad_requests_are_refused() {
    let d = Daemon::start("hooks", &[]);
    let dir = scratch("hooks-fifo");
    let fifo = dir.join("cap.fifo");
    let fifo_s = fifo.to_str().unwrap().to_string();
    let c_path = CString::new(fifo_s.clone()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    bounded(async {
        let mut c = d.client().await;
        let l = c
            .list_gate_hook_class(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        ok(&l.error);
        assert_eq!(l.names, vec!["track", "tcpdump"]);
        source_to_sink(&mut c).await;

        // No reader on the FIFO yet: refused, naming the FIFO.
        let r = hook(
            &mut c,
            "tcpdump",
            "src",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        let e = err(&r.error, "no reader");
        assert_eq!(e.code, libc::ENXIO);
        // Unknown module, unconnected gate, unknown class, missing FIFO path.
        let r = hook(
            &mut c,
            "tcpdump",
            "nosuch",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        assert_eq!(err(&r.error, "nosuch").code, libc::ENOENT);
        let r = hook(
            &mut c,
            "tcpdump",
            "src",
            Gate::Ogate(3),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        assert_eq!(err(&r.error, "output gate 3").code, libc::ENOENT);
        let r = hook(&mut c, "snoop", "src", Gate::Ogate(0), None, true).await;
        assert_eq!(err(&r.error, "snoop").code, libc::ENOENT);
        let r = hook(&mut c, "tcpdump", "src", Gate::Ogate(0), None, true).await;
        assert_eq!(err(&r.error, "fifo").code, libc::EINVAL);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty(), "{:?}", l.hooks);

        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let r = hook(
            &mut c,
            "tcpdump",
            "src",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        ok(&r.error);
        assert_eq!(r.name, "tcpdump");
        let r = hook(
            &mut c,
            "tcpdump",
            "src",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        assert_eq!(err(&r.error, "already has a hook").code, libc::EBUSY);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(l.hooks.len(), 1);
        assert_eq!(l.hooks[0].module_name, "src");
        assert_eq!(l.hooks[0].gate, Some(Gate::Ogate(0)));
        let i = c
            .get_module_info(pb::GetModuleInfoRequest { name: "src".into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(i.ogates[0].gatehooks[0].class_name, "tcpdump");

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

        // Read until a few whole records arrived (bounded in time).
        let mut bytes = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = vec![0u8; 65536];
        while bytes.len() < 24 + 10 * 76 {
            match reader.read(&mut buf) {
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading the fifo: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "only {} bytes from the fifo",
                bytes.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let whole = 24 + (bytes.len() - 24) / 76 * 76;
        let recs = bessemer_core::pcap::parse(&bytes[..whole]).unwrap();
        assert!(recs.len() >= 10);
        assert!(recs.iter().all(|r| r.data.len() == 60 && r.orig_len == 60));

        // Disabling removes it; removing again names what is missing.
        let r = hook(&mut c, "tcpdump", "src", Gate::Ogate(0), None, false).await;
        ok(&r.error);
        let r = hook(&mut c, "tcpdump", "src", Gate::Ogate(0), None, false).await;
        assert_eq!(err(&r.error, "no hook named 'tcpdump'").code, libc::ENOENT);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty());

        // track: bytes appear in GetModuleInfo once enabled.
        let r = hook(&mut c, "track", "src", Gate::Ogate(-1), None, true).await;
        ok(&r.error);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let i = c
                .get_module_info(pb::GetModuleInfoRequest { name: "src".into() })
                .await
                .unwrap()
                .into_inner();
            if i.ogates[0].bytes > 0 {
                assert_eq!(i.ogates[0].gatehooks[0].class_name, "track");
                break;
            }
            assert!(Instant::now() < deadline, "track counted no bytes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The daemon kept serving throughout.
        ok(&c
            .get_version(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner()
            .error);
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

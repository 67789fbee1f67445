//! Gate hooks over gRPC, by BESS's class names (`Track`, `TcpDump`, `PcapNg`) as pybess and
//! bessctl send them, and by Bessemer's lowercase aliases: `TcpDump` streams pcap to a FIFO,
//! `PcapNg` pcapng, `Track` counts bytes; errors name the problem and leave the pipeline as it
//! was.

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
    named_hook(c, class, "", module, gate, arg, enable).await
}

/// ConfigureGateHook as pybess's `_configure_gate_hook` sends it.
async fn named_hook(
    c: &mut Client,
    class: &str,
    name: &str,
    module: &str,
    gate: Gate,
    arg: Option<prost_types::Any>,
    enable: bool,
) -> pb::ConfigureGateHookResponse {
    c.configure_gate_hook(pb::ConfigureGateHookRequest {
        hook: Some(pb::GateHookInfo {
            class_name: class.into(),
            hook_name: name.into(),
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

/// GetModuleInfo of `module` once its first output gate satisfies `cond` (bounded).
async fn wait_for(
    c: &mut Client,
    module: &str,
    cond: impl Fn(&pb::get_module_info_response::OGate) -> bool,
) -> pb::GetModuleInfoResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let i = c
            .get_module_info(pb::GetModuleInfoRequest {
                name: module.into(),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&i.error);
        if cond(&i.ogates[0]) {
            return i;
        }
        assert!(Instant::now() < deadline, "gate counters never got there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// A PcapngArg writing to `fifo`, packed as pybess's pcapng_gate packs it.
fn pcapng_arg(fifo: &str) -> Option<prost_types::Any> {
    Some(any(
        "PcapngArg",
        &pb::PcapngArg {
            fifo: fifo.to_string(),
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
        assert_eq!(l.names, vec!["Track", "TcpDump", "PcapNg"]);
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
        // BESS's default instance name: the template and the first free number.
        assert_eq!(r.name, "tcpdump0");
        let r = named_hook(
            &mut c,
            "TcpDump",
            "tcpdump0",
            "src",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        assert_eq!(err(&r.error, "already has a hook").code, libc::EEXIST);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(l.hooks.len(), 1);
        assert_eq!(l.hooks[0].class_name, "TcpDump");
        assert_eq!(l.hooks[0].hook_name, "tcpdump0");
        assert_eq!(l.hooks[0].module_name, "src");
        assert_eq!(l.hooks[0].gate, Some(Gate::Ogate(0)));
        let i = c
            .get_module_info(pb::GetModuleInfoRequest { name: "src".into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(i.ogates[0].gatehooks[0].class_name, "TcpDump");

        run_on_worker0(&mut c).await;

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

        // Disabling without a name removes the class's hook (BESS's RemoveHookByClass);
        // removing again names what is missing.
        let r = hook(&mut c, "tcpdump", "src", Gate::Ogate(0), None, false).await;
        ok(&r.error);
        let r = hook(&mut c, "tcpdump", "src", Gate::Ogate(0), None, false).await;
        assert_eq!(err(&r.error, "no TcpDump hook").code, libc::ENOENT);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty());

        // Track without bits: listed, packets counted, no bytes.
        let r = hook(&mut c, "track", "src", Gate::Ogate(-1), None, true).await;
        ok(&r.error);
        assert_eq!(r.name, "track0");
        let i = wait_for(&mut c, "src", |o| o.pkts > 0).await;
        assert_eq!(i.ogates[0].bytes, 0, "bytes counted without TrackArg.bits");
        assert_eq!(i.ogates[0].gatehooks.len(), 1);
        assert_eq!(i.ogates[0].gatehooks[0].class_name, "Track");
        assert_eq!(i.ogates[0].gatehooks[0].hook_name, "track0");
        // A second Track with bits (by BESS's name): the next default name, bytes counted.
        let r = hook(
            &mut c,
            "Track",
            "src",
            Gate::Ogate(-1),
            Some(any("TrackArg", &pb::TrackArg { bits: true })),
            true,
        )
        .await;
        ok(&r.error);
        assert_eq!(r.name, "track1");
        let i = wait_for(&mut c, "src", |o| o.bytes > 0).await;
        assert_eq!(i.ogates[0].gatehooks.len(), 2);
        // Disabling every Track (one per call per gate, as BESS's RemoveHookByClass).
        for _ in 0..2 {
            let r = hook(&mut c, "Track", "src", Gate::Ogate(-1), None, false).await;
            ok(&r.error);
        }
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty(), "{:?}", l.hooks);
        let before = wait_for(&mut c, "src", |_| true).await.ogates[0].bytes;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = wait_for(&mut c, "src", |_| true).await.ogates[0].bytes;
        assert_eq!(
            before, after,
            "bytes still counted after the Track hooks left"
        );
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

fn mkfifo(path: &std::path::Path) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Reads from a non-blocking FIFO until `enough` says the bytes suffice (bounded in time).
async fn read_fifo(reader: &mut std::fs::File, enough: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = vec![0u8; 65536];
    while !enough(&bytes) {
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
    bytes
}

/// The whole pcapng blocks at the start of `b` (a reader may stop mid-block).
fn whole_blocks(b: &[u8]) -> &[u8] {
    let mut at = 0;
    while b.len() - at >= 8 {
        let len = u32::from_ne_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        if len < 12 || b.len() - at < len {
            break;
        }
        at += len;
    }
    &b[..at]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pcapng_hook_as_pybess_sends_it_is_read_back_by_us_and_tcpdump() {
    let d = Daemon::start("hooks-ng", &[]);
    let dir = scratch("hooks-ng");
    let fifo = dir.join("ng.fifo");
    let fifo_s = fifo.to_str().unwrap().to_string();
    mkfifo(&fifo);
    bounded(async {
        let mut c = d.client().await;
        let info = c
            .get_gate_hook_class_info(pb::GetGateHookClassInfoRequest {
                name: "pcapng".into(),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&info.error);
        assert_eq!(info.name, "PcapNg");
        source_to_sink(&mut c).await;
        // bessctl's `tshark` command: the reader holds the FIFO open, then pybess's
        // pcapng_gate(True, "", m, "out", 0, fifo) packs a PcapngArg.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let r = named_hook(
            &mut c,
            "PcapNg",
            "",
            "src",
            Gate::Ogate(0),
            pcapng_arg(&fifo_s),
            true,
        )
        .await;
        ok(&r.error);
        assert_eq!(r.name, "pcapng0");
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(l.hooks.len(), 1);
        assert_eq!(l.hooks[0].class_name, "PcapNg");
        assert_eq!(l.hooks[0].hook_name, "pcapng0");
        run_on_worker0(&mut c).await;

        // Section header + interface description (48 bytes), then ten 60-byte packets
        // (28 + 60 + 4 bytes per block).
        let bytes = read_fifo(&mut reader, |b| whole_blocks(b).len() >= 48 + 10 * 92).await;
        let bytes = whole_blocks(&bytes);
        assert_eq!(
            &bytes[0..4],
            &[0x0a, 0x0d, 0x0d, 0x0a],
            "not a pcapng stream"
        );
        let frames = bessemer_core::pcap::read(bytes).unwrap();
        assert!(frames.len() >= 10);
        assert!(frames
            .iter()
            .all(|f| f.data.len() == 60 && f.orig_len == 60 && f.linktype == 1));
        // The capture's timestamps are today's (microseconds since the epoch).
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(frames
            .iter()
            .all(|f| f.ts_ns <= now_ns && now_ns - f.ts_ns < 120_000_000_000));

        // tcpdump (libpcap) reads it too.
        let file = dir.join("capture.pcapng");
        std::fs::write(&file, bytes).unwrap();
        match std::process::Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(&file)
            .output()
        {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "tcpdump -r failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let lines = String::from_utf8_lossy(&out.stdout).lines().count();
                assert_eq!(lines, frames.len(), "tcpdump saw a different packet count");
            }
            Err(e) => eprintln!("skipped the tcpdump check: tcpdump not runnable ({e})"),
        }

        // pybess disables with the name the enable returned, packing an empty PcapngArg.
        let r = named_hook(
            &mut c,
            "PcapNg",
            &r.name,
            "src",
            Gate::Ogate(0),
            Some(any("PcapngArg", &pb::PcapngArg::default())),
            false,
        )
        .await;
        ok(&r.error);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty(), "{:?}", l.hooks);

        // The lowercase alias, with a name of the client's: listed under BESS's name; a
        // new header starts the stream again.
        let r = named_hook(
            &mut c,
            "pcapng",
            "mine",
            "src",
            Gate::Ogate(0),
            pcapng_arg(&fifo_s),
            true,
        )
        .await;
        ok(&r.error);
        assert_eq!(r.name, "mine");
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (
                l.hooks[0].class_name.as_str(),
                l.hooks[0].hook_name.as_str()
            ),
            ("PcapNg", "mine")
        );
        // Past what the first hook left in the pipe, the second one's stream: a header and
        // whole packet blocks (Source's packets are zeros, so the magic cannot be data).
        let shb = |b: &[u8]| b.windows(4).position(|w| w == [0x0a, 0x0d, 0x0d, 0x0a]);
        let more = read_fifo(&mut reader, |b| {
            shb(b).is_some_and(|at| whole_blocks(&b[at..]).len() >= 48 + 2 * 92)
        })
        .await;
        let at = shb(&more).unwrap();
        let frames = bessemer_core::pcap::read(whole_blocks(&more[at..])).unwrap();
        assert!(frames.len() >= 2 && frames.iter().all(|f| f.orig_len == 60));
        let r = hook(&mut c, "pcapng", "src", Gate::Ogate(0), None, false).await;
        ok(&r.error);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty(), "{:?}", l.hooks);
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bessctl_track_enables_on_every_module_and_tcpdump_by_bess_name() {
    let d = Daemon::start("hooks-all", &[]);
    let dir = scratch("hooks-all");
    let fifo = dir.join("td.fifo");
    let fifo_s = fifo.to_str().unwrap().to_string();
    mkfifo(&fifo);
    bounded(async {
        let mut c = d.client().await;
        source_to_sink(&mut c).await;
        // `track bit enable`: every module (empty name), every ogate, no hook name. The sink
        // has no output gate and is passed over.
        let r = named_hook(
            &mut c,
            "Track",
            "",
            "",
            Gate::Ogate(-1),
            Some(any("TrackArg", &pb::TrackArg { bits: true })),
            true,
        )
        .await;
        ok(&r.error);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(l.hooks.len(), 1, "{:?}", l.hooks);
        assert_eq!(
            (
                l.hooks[0].class_name.as_str(),
                l.hooks[0].hook_name.as_str(),
                l.hooks[0].module_name.as_str()
            ),
            ("Track", "track0", "src")
        );
        // The Track hook counts on output gates only.
        let r = hook(&mut c, "Track", "snk", Gate::Igate(0), None, true).await;
        assert_eq!(err(&r.error, "output gates").code, libc::EINVAL);

        // pybess's tcpdump_gate: class TcpDump, a TcpdumpArg with the FIFO.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let r = named_hook(
            &mut c,
            "TcpDump",
            "",
            "src",
            Gate::Ogate(0),
            tcpdump_arg(&fifo_s),
            true,
        )
        .await;
        ok(&r.error);
        assert_eq!(r.name, "tcpdump0");
        run_on_worker0(&mut c).await;
        let bytes = read_fifo(&mut reader, |b| b.len() >= 24 + 5 * 76).await;
        let whole = 24 + (bytes.len() - 24) / 76 * 76;
        let recs = bessemer_core::pcap::parse(&bytes[..whole]).unwrap();
        assert!(recs.len() >= 5);
        wait_for(&mut c, "src", |o| o.bytes > 0).await;

        // `track disable`: every module again; then the TcpDump hook by its name.
        let r = named_hook(&mut c, "Track", "", "", Gate::Ogate(-1), None, false).await;
        ok(&r.error);
        let r = named_hook(
            &mut c,
            "TcpDump",
            "tcpdump0",
            "src",
            Gate::Ogate(0),
            None,
            false,
        )
        .await;
        ok(&r.error);
        let l = c
            .list_gate_hooks(pb::EmptyRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(l.hooks.is_empty(), "{:?}", l.hooks);
        // GateHookCommand finds hooks by module, gate and name, as BESS does.
        let r = c
            .gate_hook_command(pb::GateHookCommandRequest {
                hook: Some(pb::GateHookInfo {
                    hook_name: "track0".into(),
                    module_name: "src".into(),
                    gate: Some(Gate::Ogate(0)),
                    ..Default::default()
                }),
                cmd: "reset".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&r.error, "no hook named 'track0'").code, libc::ENOENT);
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

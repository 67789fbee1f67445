//! PcapFilePort: capture files written by the test are replayed through PortInc, and what
//! PortOut sends is read back from the output file.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::pcap;
use bessemer_core::port::PortHandle;
use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::pcap_file_port::DRIVER;
use bessemer_modules::io::{port_inc, port_out};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A file path in the temp directory, removed on drop.
struct TempFile(String);

impl TempFile {
    fn new(ext: &str) -> TempFile {
        TempFile(
            std::env::temp_dir()
                .join(format!(
                    "bessemer-pcap-{}-{}.{ext}",
                    std::process::id(),
                    SEQ.fetch_add(1, Ordering::Relaxed)
                ))
                .to_string_lossy()
                .into_owned(),
        )
    }
    fn with(ext: &str, bytes: &[u8]) -> TempFile {
        let f = TempFile::new(ext);
        std::fs::write(&f.0, bytes).unwrap();
        f
    }
    fn path(&self) -> &str {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Distinct UDP-in-IPv4 frames of the given sizes (literal header bytes, patterned payload).
fn frames(sizes: &[usize]) -> Vec<Vec<u8>> {
    let header: [u8; 42] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
        0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 0, // UDP 1234 -> 5678
    ];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut f = header.to_vec();
            f[16..18].copy_from_slice(&((n - 14) as u16).to_be_bytes());
            f[38..40].copy_from_slice(&((n - 34) as u16).to_be_bytes());
            f.extend((0..n - header.len()).map(|j| (j + i * 31) as u8));
            f
        })
        .collect()
}

/// A classic pcap file (this machine's byte order, microseconds) with records at the given
/// times (in microseconds).
fn pcap_file(frames: &[Vec<u8>], times_us: &[u64]) -> Vec<u8> {
    let mut f = pcap::file_header().to_vec();
    for (data, t) in frames.iter().zip(times_us) {
        let ts = pcap::Timestamp {
            sec: (t / 1_000_000) as u32,
            usec: (t % 1_000_000) as u32,
        };
        f.extend_from_slice(&pcap::record_header(
            ts,
            data.len() as u32,
            data.len() as u32,
        ));
        f.extend_from_slice(data);
    }
    f
}

/// A big-endian nanosecond pcap file with records at the given times (in nanoseconds).
fn pcap_file_be_ns(frames: &[Vec<u8>], times_ns: &[u64]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&pcap::MAGIC_NSEC.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&4u16.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_be_bytes());
    f.extend_from_slice(&1u32.to_be_bytes());
    for (data, t) in frames.iter().zip(times_ns) {
        let t = t + 1_700_000_000_000_000_000;
        for v in [
            (t / 1_000_000_000) as u32,
            (t % 1_000_000_000) as u32,
            data.len() as u32,
            data.len() as u32,
        ] {
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(data);
    }
    f
}

/// A little-endian pcapng file: section header, one Ethernet interface, enhanced packet
/// blocks (microsecond timestamps).
fn pcapng_file(frames: &[Vec<u8>]) -> Vec<u8> {
    fn block(ty: u32, body: &[u8]) -> Vec<u8> {
        let len = 12 + body.len().div_ceil(4) * 4;
        let mut b = ty.to_le_bytes().to_vec();
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b
    }
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    let mut f = block(0x0a0d_0d0a, &shb);
    f.extend(block(1, &[1, 0, 0, 0, 0, 0, 0, 0]));
    for (i, data) in frames.iter().enumerate() {
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&(i as u32 * 1000).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(data);
        f.extend(block(6, &epb));
    }
    f
}

fn create(
    h: &Harness,
    name: &str,
    arg: &Value,
) -> bessemer_core::Result<std::sync::Arc<PortHandle>> {
    common::create_port(h, &DRIVER, name, arg)
}

/// Runs PortInc until `n` packets were captured (or 5 s pass).
fn receive(h: &mut Harness, cap: &bessemer_core::testing::CaptureHandle, n: usize) {
    let t = Instant::now();
    while cap.len() < n && t.elapsed() < Duration::from_secs(5) {
        h.run_task("inc", 0);
    }
}

#[test]
fn replay_through_port_inc_and_port_out_writes_the_same_records() {
    let mut h = Harness::new();
    let sent = frames(&[60, 64, 1514, 128, 2880]);
    let input = TempFile::with("pcap", &pcap_file(&sent, &[0, 10, 20, 30, 40]));
    let output = TempFile::new("pcap");
    let p = create(
        &h,
        "p0",
        &Value::map()
            .with("rx_file", input.path())
            .with("tx_file", output.path()),
    )
    .unwrap();
    assert_eq!((p.num_inc_q(), p.num_out_q()), (1, 1));
    assert!(p.port().link_status().link_up);
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    h.connect("inc", 0, "out", 0).unwrap();
    for _ in 0..10 {
        h.run_task("inc", 0);
    }
    let bytes = std::fs::read(output.path()).unwrap();
    let records = pcap::parse(&bytes).unwrap();
    let got: Vec<Vec<u8>> = records.iter().map(|r| r.data.clone()).collect();
    assert_eq!(got, sent);
    assert!(records
        .iter()
        .zip(&sent)
        .all(|(r, f)| r.orig_len as usize == f.len()));
    let (inc, out) = p.counts();
    let total: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert_eq!((inc.packets, inc.bytes), (5, total));
    assert_eq!((out.packets, out.bytes, out.dropped), (5, total, 0));
    let desc = p.port().desc();
    assert!(desc.contains("5/5 packets, done"), "{desc}");
    assert!(desc.contains(output.path()), "{desc}");
    // Once done, the link stays up and nothing more arrives.
    assert!(p.port().link_status().link_up);
    assert_eq!(h.run_task("inc", 0).packets, 0);
}

#[test]
fn loop_mode_repeats_the_file() {
    let mut h = Harness::new();
    let sent = frames(&[60, 61, 62]);
    let input = TempFile::with("pcap", &pcap_file(&sent, &[0, 1, 2]));
    create(
        &h,
        "p0",
        &Value::map()
            .with("rx_file", input.path())
            .with("repeat", true),
    )
    .unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    // One burst already wraps around the file several times.
    assert_eq!(
        h.run_task("inc", 0).packets,
        bessemer_core::MAX_BURST as u32
    );
    receive(&mut h, &cap, 40);
    let got = cap.take_data();
    assert!(got.len() >= 40);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f, &sent[i % 3], "packet {i}");
    }
    let desc = h.graph.ports().get("p0").unwrap().port().desc();
    assert!(desc.contains("pass") && !desc.contains("done"), "{desc}");
}

#[test]
fn timing_mode_keeps_the_recorded_gaps() {
    let mut h = Harness::new();
    let sent = frames(&[60, 61, 62]);
    let gaps_ns = [0u64, 40_000_000, 80_000_000];
    let input = TempFile::with("pcap", &pcap_file_be_ns(&sent, &gaps_ns));
    create(
        &h,
        "p0",
        &Value::map()
            .with("rx_file", input.path())
            .with("timing", true),
    )
    .unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let start = Instant::now();
    let mut arrivals = Vec::new();
    while arrivals.len() < 3 && start.elapsed() < Duration::from_secs(5) {
        h.run_task("inc", 0);
        for _ in cap.take_data() {
            arrivals.push(start.elapsed());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(arrivals.len(), 3, "not all packets replayed in 5 s");
    for (i, (a, gap)) in arrivals.iter().zip(gaps_ns).enumerate() {
        assert!(
            *a >= Duration::from_nanos(gap),
            "packet {i} came at {a:?}, before its recorded offset {gap} ns"
        );
    }
    assert!(arrivals[1] - arrivals[0] >= Duration::from_millis(30));
}

#[test]
fn pcapng_input_replays() {
    let mut h = Harness::new();
    let sent = frames(&[60, 99, 1000]);
    let input = TempFile::with("pcapng", &pcapng_file(&sent));
    create(&h, "p0", &Value::map().with("rx_file", input.path())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    receive(&mut h, &cap, 3);
    assert_eq!(cap.take_data(), sent);
}

#[test]
fn jumbo_frames_pass_and_longer_ones_are_truncated_and_counted() {
    let mut h = Harness::new();
    let sent = frames(&[9014, 20000, 60]);
    let input = TempFile::with("pcap", &pcap_file(&sent, &[0, 1, 2]));
    create(&h, "p0", &Value::map().with("rx_file", input.path())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    receive(&mut h, &cap, 3);
    let got = cap.take_data();
    let cap_len = bessemer_core::packet::LARGE_DATA_CAPACITY;
    assert_eq!(got[0], sent[0]);
    assert_eq!(got[1], sent[1][..cap_len]);
    assert_eq!(got[2], sent[2]);
    let desc = h.graph.ports().get("p0").unwrap().port().desc();
    assert!(desc.contains("1 truncated"), "{desc}");
}

#[test]
fn bad_files_are_refused_naming_file_and_offset() {
    let h = Harness::new();
    let missing = TempFile::new("pcap");
    let e = create(&h, "a", &Value::map().with("rx_file", missing.path()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains(missing.path()), "{}", e.msg);

    let bad_magic = TempFile::with("pcap", &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0]);
    let e = create(&h, "b", &Value::map().with("rx_file", bad_magic.path()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::EINVAL);
    assert!(
        e.msg.contains(bad_magic.path()) && e.msg.contains("at byte 0") && e.msg.contains("magic"),
        "{}",
        e.msg
    );

    let mut good = pcap_file(&frames(&[60, 60]), &[0, 1]);
    good.truncate(good.len() - 7);
    let truncated = TempFile::with("pcap", &good);
    let e = create(&h, "c", &Value::map().with("rx_file", truncated.path()))
        .err()
        .unwrap();
    assert!(
        e.msg.contains(truncated.path())
            && e.msg.contains("at byte 100")
            && e.msg.contains("truncated"),
        "{}",
        e.msg
    );

    // Not Ethernet (link type 101, raw IP).
    let mut raw = pcap_file(&frames(&[60]), &[0]);
    raw[20..24].copy_from_slice(&101u32.to_ne_bytes());
    let raw = TempFile::with("pcap", &raw);
    let e = create(&h, "d", &Value::map().with("rx_file", raw.path()))
        .err()
        .unwrap();
    assert!(e.msg.contains("link type 101"), "{}", e.msg);

    // Files over 1 GiB are refused before reading (a sparse file costs no disk).
    let huge = TempFile::new("pcap");
    std::fs::File::create(huge.path())
        .unwrap()
        .set_len((1 << 30) + 1)
        .unwrap();
    let e = create(&h, "e", &Value::map().with("rx_file", huge.path()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::EFBIG);
    assert!(
        e.msg.contains(huge.path()) && e.msg.contains("1 GiB"),
        "{}",
        e.msg
    );

    let e = create(
        &h,
        "f",
        &Value::map().with("tx_file", "/nonexistent-dir/out.pcap"),
    )
    .err()
    .unwrap();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains("/nonexistent-dir/out.pcap"), "{}", e.msg);

    let e = create(&h, "g", &Value::map()).err().unwrap();
    assert!(e.msg.contains("rx_file"), "{}", e.msg);
    assert!(h.graph.ports().list().is_empty());
}

#[test]
fn tx_only_port_writes_what_port_out_sends() {
    let mut h = Harness::new();
    let output = TempFile::new("pcap");
    let p = create(&h, "p0", &Value::map().with("tx_file", output.path())).unwrap();
    assert_eq!((p.num_inc_q(), p.num_out_q()), (0, 1));
    assert!(h
        .add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .is_err());
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    let sent = frames(&[60, 70]);
    h.inject("out", 0, &sent);
    h.inject("out", 0, &sent[..1]);
    let records = pcap::parse(&std::fs::read(output.path()).unwrap()).unwrap();
    let got: Vec<Vec<u8>> = records.into_iter().map(|r| r.data).collect();
    assert_eq!(got, vec![sent[0].clone(), sent[1].clone(), sent[0].clone()]);
}

#[test]
fn the_sample_capture_in_conf_replays() {
    let mut h = Harness::new();
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conf/ports/sample.pcap");
    create(&h, "p0", &Value::map().with("rx_file", sample)).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    receive(&mut h, &cap, 6);
    let got = cap.take_data();
    assert_eq!(got.len(), 6);
    // UDP over IPv4 over Ethernet.
    assert!(got.iter().all(|f| f[12..14] == [0x08, 0x00] && f[23] == 17));
}

#[test]
fn tcpdump_reads_the_written_file() {
    if std::process::Command::new("tcpdump")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: tcpdump is not installed");
        return;
    }
    let mut h = Harness::new();
    let output = TempFile::new("pcap");
    create(&h, "p0", &Value::map().with("tx_file", output.path())).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    h.inject("out", 0, &frames(&[60, 100, 1500]));
    let out = std::process::Command::new("tcpdump")
        .args(["-nn", "-r", output.path()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("10.0.0.1.1234 > 10.0.0.2.5678: UDP"),
        "{text}"
    );
}

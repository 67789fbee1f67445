//! SlicePort with real external processes (the slice-app binary): a round trip through
//! PortInc → MACSwap → PortOut, zero copy both ways and the copies that remain, garbage in
//! the rings, a killed app (also while the pipeline holds its frames), an app that stops
//! consuming. No root needed. Every loop is bounded in count and time.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::port::PortParams;
use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::slice_port::{slice_counters, DRIVER};
use bessemer_modules::basic::source;
use bessemer_modules::io::{port_inc, port_out};
use bessemer_modules::queue::queue;
use bessemer_modules::rewrite::mac_swap;
use bessemer_slice::CounterSnapshot;

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn temp_path() -> String {
    std::env::temp_dir()
        .join(format!(
            "bessemer-slice-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ))
        .to_string_lossy()
        .into_owned()
}

/// A harness with SlicePort "s0" (ring `ring`) and PortInc(s0) → MACSwap → PortOut(s0).
fn pipeline(path: &str, ring: u64) -> Harness {
    let mut h = with_port(path, ring);
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "s0"))
        .unwrap();
    h.add(&mac_swap::CLASS, "swap", &Value::Null).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "s0"))
        .unwrap();
    h.connect("inc", 0, "swap", 0).unwrap();
    h.connect("swap", 0, "out", 0).unwrap();
    h
}

/// A harness with SlicePort "s0" (ring `ring`) and no module.
fn with_port(path: &str, ring: u64) -> Harness {
    let h = Harness::new();
    h.graph
        .ports()
        .create(
            &DRIVER,
            PortParams {
                name: "s0".into(),
                num_inc_q: 0,
                num_out_q: 0,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &Value::map().with("path", path).with("ring_size", ring),
        )
        .unwrap();
    h
}

/// A gauge the port's description shows after its counters (pipeline_frames,
/// retired_regions).
fn gauge(h: &Harness, name: &str) -> u64 {
    let d = h.graph.ports().get("s0").unwrap().port().desc();
    d.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in '{d}'"))
}

/// Mappings of this process backed by slice regions of a port named s0 with rings of
/// `ring` entries (tests run in parallel: each test that counts uses its own ring size).
fn slice_mappings(ring: u32) -> usize {
    let len = bessemer_slice::layout::Layout::new(ring)
        .unwrap()
        .region_len;
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:slice:s0"))
        .filter(|l| {
            let r = l.split_whitespace().next().unwrap();
            let (a, b) = r.split_once('-').unwrap();
            let size =
                usize::from_str_radix(b, 16).unwrap() - usize::from_str_radix(a, 16).unwrap();
            size == len
        })
        .count()
}

fn counters(h: &Harness) -> CounterSnapshot {
    slice_counters(h.graph.ports().get("s0").unwrap().port()).unwrap()
}

fn link_up(h: &Harness) -> bool {
    h.graph
        .ports()
        .get("s0")
        .unwrap()
        .port()
        .link_status()
        .link_up
}

fn app(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_slice-app"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn slice-app")
}

/// Runs the pipeline until the app exits (at most 30 s); returns its stdout.
fn run_until_exit(h: &mut Harness, mut c: Child) -> String {
    let t = Instant::now();
    loop {
        h.run_task("inc", 0);
        if let Some(st) = c.try_wait().unwrap() {
            let out = c.wait_with_output().unwrap();
            assert!(
                st.success(),
                "slice-app failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = c.kill();
            panic!("slice-app did not finish within 30 s");
        }
    }
}

/// Runs the pipeline until the app prints a line (at most 30 s); returns the line.
fn run_until_line(h: &mut Harness, c: &mut Child) -> String {
    let stdout = c.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = BufReader::new(stdout).read_line(&mut l);
        let _ = tx.send(l);
    });
    let t = Instant::now();
    loop {
        h.run_task("inc", 0);
        if let Ok(l) = rx.try_recv() {
            return l.trim().to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no line from slice-app"
        );
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn app_frames_come_back_mac_swapped_with_exact_counters() {
    let path = temp_path();
    let mut h = pipeline(&path, 256);
    assert!(!link_up(&h));
    let n = 5000;
    let out = run_until_exit(&mut h, app(&["roundtrip", &path, &n.to_string(), "60"]));
    assert_eq!(out.trim(), format!("ok rx={n} tx={n}"));
    let c = counters(&h);
    assert_eq!(c.from_app_packets, n);
    assert_eq!(c.to_app_packets, n);
    assert_eq!(c.from_app_bytes, n * 60);
    assert_eq!(c.to_app_bytes, n * 60);
    assert_eq!(
        c.invalid_offset + c.invalid_length + c.invalid_frame_not_held + c.invalid_ring_index,
        0
    );
    assert_eq!(c.to_app_ring_full + c.to_app_no_frame + c.to_app_no_app, 0);
    let (inc, outc) = h.graph.ports().get("s0").unwrap().counts();
    assert_eq!((inc.packets, inc.dropped), (n, 0));
    assert_eq!((outc.packets, outc.dropped), (n, 0));
    assert_eq!(h.drops("out", "tx_failed"), 0);
    wait_until("the app to detach", || !link_up(&h));
    assert_eq!(counters(&h).detaches, 1);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn garbage_in_the_rings_is_counted_and_traffic_resumes() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    let out = run_until_exit(&mut h, app(&["garbage", &path]));
    assert_eq!(out.trim(), "ok");
    let c = counters(&h);
    // Three bad offsets on each of the send and the receive-free ring.
    assert_eq!(c.invalid_offset, 6);
    assert_eq!(c.invalid_length, 2);
    // A frame sent twice in one batch, a receive frame the app never had.
    assert_eq!(c.invalid_frame_not_held, 2);
    assert!(c.invalid_ring_index >= 1);
    // The one valid frame among the garbage, then eight after the index was repaired.
    assert_eq!(c.from_app_packets, 9);
    assert_eq!(c.to_app_packets, 9);
    let (inc, _) = h.graph.ports().get("s0").unwrap().counts();
    assert_eq!(inc.packets, 9);
    // Every invalid descriptor counts as an incoming drop of the port.
    assert_eq!(inc.dropped, 6 + 2 + 2);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn a_killed_app_is_reclaimed_and_a_new_app_attaches() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    let mut c = app(&["hold", &path, "20"]);
    assert_eq!(run_until_line(&mut h, &mut c), "held 20");
    assert!(link_up(&h));
    c.kill().unwrap();
    c.wait().unwrap();
    wait_until("link down after the kill", || !link_up(&h));
    let s = counters(&h);
    assert_eq!(s.detaches, 1);
    assert_eq!(s.reclaimed_frames, 20);
    // Nothing of the daemon's packet pool is held on the app's behalf.
    assert_eq!(h.in_use(), 0);
    // Without an app PortOut drops and counts, and never waits.
    h.inject("out", 0, &vec![vec![0u8; 60]; 5]);
    assert_eq!(counters(&h).to_app_no_app, 5);
    assert_eq!(h.drops("out", "tx_failed"), 5);
    // A new app gets a fresh region with every frame.
    let out = run_until_exit(&mut h, app(&["roundtrip", &path, "300", "60"]));
    assert_eq!(out.trim(), "ok rx=300 tx=300");
    assert_eq!(counters(&h).attaches, 2);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn an_app_that_stops_consuming_never_stalls_the_pipeline() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    let mut c = app(&["hang", &path]);
    assert_eq!(run_until_line(&mut h, &mut c), "attached");
    wait_until("link up", || link_up(&h));
    // Other traffic in the same pipeline: a second chain through its own MACSwap.
    h.add(&mac_swap::CLASS, "other", &Value::Null).unwrap();
    let other = h.capture("other", 0);
    let frame = vec![0x11u8; 60];
    let t = Instant::now();
    for _ in 0..100 {
        h.inject("out", 0, &vec![frame.clone(); 32]);
        h.inject("other", 0, std::slice::from_ref(&frame));
    }
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the pipeline stalled"
    );
    assert_eq!(other.len(), 100);
    let s = counters(&h);
    assert_eq!(s.to_app_packets, 64, "the ring holds 64 frames");
    assert_eq!(s.to_app_ring_full, 3200 - 64);
    assert_eq!(h.drops("out", "tx_failed"), 3200 - 64);
    let (_, out) = h.graph.ports().get("s0").unwrap().counts();
    assert_eq!(out.packets, 64);
    c.kill().unwrap();
    c.wait().unwrap();
    wait_until("link down", || !link_up(&h));
    assert_eq!(counters(&h).reclaimed_frames, 64);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn random_words_in_every_ring_never_hurt_the_daemon() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    for seed in ["1", "77", "4242"] {
        let mut c = app(&["random", &path, seed]);
        let t = Instant::now();
        let status = loop {
            // Keep both directions busy: the app's rings are read while it scribbles.
            h.run_task("inc", 0);
            h.inject("out", 0, &vec![vec![0x22u8; 60]; 4]);
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "random app hung");
        };
        assert!(status.success());
        wait_until("detach", || !link_up(&h));
    }
    let s = counters(&h);
    assert_eq!(s.attaches, 3);
    assert!(
        s.invalid_offset + s.invalid_length + s.invalid_frame_not_held + s.invalid_ring_index > 0
    );
    assert_eq!(h.in_use(), 0);
    // A well-behaved app still gets every frame back afterwards.
    let out = run_until_exit(&mut h, app(&["roundtrip", &path, "500", "60"]));
    assert_eq!(out.trim(), "ok rx=500 tx=500");
}

#[test]
fn bad_arguments_are_refused_with_clear_errors() {
    let h = Harness::new();
    let mk = |arg: Value| {
        h.graph.ports().create(
            &DRIVER,
            PortParams {
                name: String::new(),
                num_inc_q: 0,
                num_out_q: 0,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &arg,
        )
    };
    let e = mk(Value::map()
        .with("path", temp_path())
        .with("ring_size", 100u64))
    .err()
    .unwrap();
    assert!(e.to_string().contains("power of two"), "{e}");
    let e = mk(Value::map().with("path", "/proc/version"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("not a socket"), "{e}");
    // A live slice's path is refused; once it is gone, its stale socket file is replaced.
    let path = temp_path();
    let first = mk(Value::map().with("path", path.as_str())).unwrap();
    let e = mk(Value::map().with("path", path.as_str())).err().unwrap();
    assert!(e.to_string().contains("in use"), "{e}");
    assert_eq!(
        slice_counters(first.port()).unwrap().attaches,
        0,
        "the probe must not attach"
    );
    let stale = temp_path();
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(std::path::Path::new(&stale).exists());
    mk(Value::map().with("path", stale.as_str())).unwrap();
    let e = mk(Value::map().with("bogus", 1u64)).err().unwrap();
    assert!(e.to_string().contains("bogus"), "{e}");
}

#[test]
fn zero_copy_round_trip_hands_the_apps_own_frames_back() {
    let path = temp_path();
    let mut h = pipeline(&path, 256);
    let n = 5000u64;
    let out = run_until_exit(&mut h, app(&["zerocopy", &path, &n.to_string(), "60"]));
    // Every frame came back swapped, at the very offset the app sent it from.
    assert_eq!(out.trim(), format!("ok rx={n} tx={n} same_frame={n}"));
    let c = counters(&h);
    assert_eq!((c.from_app_zero_copy, c.from_app_copied), (n, 0));
    assert_eq!((c.to_app_zero_copy, c.to_app_copied), (n, 0));
    assert_eq!((c.from_app_packets, c.to_app_packets), (n, n));
    assert_eq!(
        c.invalid_offset + c.invalid_length + c.invalid_frame_not_held + c.invalid_ring_index,
        0
    );
    // No buffer of the daemon's pool was used, none of the app's is left in the pipeline.
    assert_eq!(h.in_use(), 0);
    assert_eq!(gauge(&h, "pipeline_frames"), 0);
    wait_until("the app to detach", || !link_up(&h));
    // Its pool goes without the queues running again ...
    wait_until("its region to be released", || {
        counters(&h).regions_released == 1
    });
    assert_eq!(counters(&h).regions_deferred, 0);
    assert_eq!(gauge(&h, "retired_regions"), 0);
    // ... and the mapping once each queue has run since (they map the session's rings).
    assert_eq!(slice_mappings(256), 1);
    h.run_task("inc", 0);
    h.inject("out", 0, &[vec![0u8; 60]]);
    assert_eq!(slice_mappings(256), 0);
}

#[test]
fn packets_from_another_pool_are_copied_and_counted() {
    let path = temp_path();
    let mut h = with_port(&path, 64);
    h.add(&source::CLASS, "src", &Value::map().with("pkt_size", 60u64))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "s0"))
        .unwrap();
    h.connect("src", 0, "out", 0).unwrap();
    let k = 300;
    let mut c = app(&["copies", &path, &k.to_string()]);
    wait_until("link up", || link_up(&h));
    let t = Instant::now();
    let st = loop {
        h.run_task("src", 0);
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = c.kill();
            panic!("copies app did not finish");
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let out = c.wait_with_output().unwrap();
    assert!(st.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let got: u64 = line
        .strip_prefix("ok rx=")
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output '{line}'"));
    assert!(got >= k);
    assert_eq!(line, format!("ok rx={got} copy_frames={got}"));
    let s = counters(&h);
    assert_eq!(s.to_app_zero_copy, 0);
    assert_eq!(s.to_app_copied, s.to_app_packets);
    assert!(s.to_app_copied >= k);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn a_killed_apps_frames_stay_valid_in_the_pipeline_and_its_region_goes_after_them() {
    let path = temp_path();
    let mut h = with_port(&path, 128);
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "s0"))
        .unwrap();
    h.add(&queue::CLASS, "q", &Value::Null).unwrap();
    h.connect("inc", 0, "q", 0).unwrap();
    let parked = h.capture("q", 0);
    let n = 40u64;
    let mut c = app(&["send", &path, &n.to_string()]);
    assert_eq!(run_until_line(&mut h, &mut c), format!("sent {n}"));
    let t = Instant::now();
    while counters(&h).from_app_packets < n {
        assert!(t.elapsed() < Duration::from_secs(10), "frames not taken");
        h.run_task("inc", 0);
    }
    assert_eq!(counters(&h).from_app_zero_copy, n);
    assert_eq!(gauge(&h, "pipeline_frames"), n);
    assert_eq!(slice_mappings(128), 1);
    c.kill().unwrap();
    c.wait().unwrap();
    wait_until("link down after the kill", || !link_up(&h));
    // The queue still holds packets whose bytes are in the dead app's area: it stays mapped.
    h.run_task("inc", 0);
    std::thread::sleep(Duration::from_millis(300));
    let s = counters(&h);
    assert_eq!(
        (s.detaches, s.regions_deferred, s.regions_released),
        (1, 1, 0)
    );
    assert_eq!(gauge(&h, "retired_regions"), 1);
    assert_eq!(gauge(&h, "pipeline_frames"), n);
    assert_eq!(slice_mappings(128), 1);
    // They can still be forwarded (here to a capture, which frees them), bytes intact.
    for _ in 0..10 {
        h.run_task("q", 0);
    }
    let got = parked.take_data();
    assert_eq!(got.len() as u64, n);
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d[14..18], (i as u32).to_be_bytes(), "packet {i} changed");
        assert_eq!(d.len(), 60);
    }
    // Once the last one is freed the region goes, and with it the mapping.
    wait_until("the region to be released", || {
        counters(&h).regions_released == 1
    });
    assert_eq!(gauge(&h, "retired_regions"), 0);
    assert_eq!(gauge(&h, "pipeline_frames"), 0);
    assert_eq!(slice_mappings(128), 0);
    assert_eq!(h.in_use(), 0);
    // The next app gets a fresh region.
    h.add(&mac_swap::CLASS, "swap", &Value::Null).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "s0"))
        .unwrap();
    h.graph.disconnect("inc", 0).unwrap();
    h.connect("inc", 0, "swap", 0).unwrap();
    h.connect("swap", 0, "out", 0).unwrap();
    let out = run_until_exit(&mut h, app(&["zerocopy", &path, "300", "60"]));
    assert_eq!(out.trim(), "ok rx=300 tx=300 same_frame=300");
    assert_eq!(counters(&h).attaches, 2);
    assert_eq!(h.in_use(), 0);
}

#[test]
fn misusing_a_frame_received_without_a_copy_is_counted() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    let out = run_until_exit(&mut h, app(&["zcgarbage", &path]));
    assert_eq!(out.trim(), "ok");
    let c = counters(&h);
    // Sent again while held as a received frame; released at the wrong offset.
    assert_eq!(c.invalid_frame_not_held, 1);
    assert_eq!(c.invalid_offset, 1);
    assert_eq!((c.from_app_zero_copy, c.to_app_zero_copy), (9, 9));
    assert_eq!(h.in_use(), 0);
    assert_eq!(gauge(&h, "pipeline_frames"), 0);
}

#[test]
fn packets_longer_than_the_room_after_the_headroom_use_the_whole_frame() {
    let path = temp_path();
    let mut h = pipeline(&path, 64);
    // 4000 bytes do not fit after the 256 bytes of headroom: the library writes them from
    // the frame's start, and they still go round without a copy.
    let out = run_until_exit(&mut h, app(&["roundtrip", &path, "200", "4000"]));
    assert_eq!(out.trim(), "ok rx=200 tx=200");
    let c = counters(&h);
    assert_eq!((c.from_app_zero_copy, c.to_app_zero_copy), (200, 200));
    assert_eq!(c.to_app_bytes, 200 * 4000);
    assert_eq!(c.invalid_length + c.invalid_offset, 0);
    assert_eq!(h.in_use(), 0);
}

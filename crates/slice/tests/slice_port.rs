//! SlicePort with real external processes (the slice-app binary): a round trip through
//! PortInc → MACSwap → PortOut, garbage in the rings, a killed app, an app that stops
//! consuming. No root needed. Every loop is bounded in count and time.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::port::PortParams;
use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::slice_port::{slice_counters, DRIVER};
use bessemer_modules::io::{port_inc, port_out};
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
    let mut h = Harness::new();
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
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "s0"))
        .unwrap();
    h.add(&mac_swap::CLASS, "swap", &Value::Null).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "s0"))
        .unwrap();
    h.connect("inc", 0, "swap", 0).unwrap();
    h.connect("swap", 0, "out", 0).unwrap();
    h
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

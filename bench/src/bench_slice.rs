//! bench-slice-lib: packets per second between the daemon side of a SlicePort (its port
//! queues driven with a packet pool, as PortInc/PortOut do) and an application thread using
//! the slice library, in batches of 32, each direction on its own; both sides are pinned to
//! different cores when there are two. Each run reports Mpps per second of the daemon
//! thread's CPU time (per core: a busy shared machine does not count) and over wall time; the median of
//! `--runs` with min and max is printed, then one JSON line.
//!
//! Three cases (docs/slices.md, "Zero copy"):
//!
//! * app → daemon, zero copy: the app writes a 14-byte header in place and sends; each
//!   frame becomes a pipeline packet in place, which the daemon frees (the frame then goes
//!   back to the app's free-send ring).
//! * round trip, zero copy: as above, but the daemon sends each packet back to the slice,
//!   which hands the app its own frame by offset; the app receives and releases it. Each
//!   packet crosses both ways, so this is a lower bound for daemon → app zero copy alone
//!   (which cannot run alone: only the app's own frames go back without a copy).
//! * daemon → app, copy: the daemon allocates 60-byte packets from its pool, the port
//!   copies each into a copy frame (packets from any other port take this path).

#[path = "common.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bessemer_core::mem::PagePolicy;
use bessemer_core::port::{PortHandle, PortParams, PortTable};
use bessemer_core::{PacketBatch, PacketPool, Value};
use bessemer_slice::{Desc, Slice};
use common::{pin, thread_cpu_secs, Args, Base};

const PROG: &str = "bench-slice-lib";
const BATCH: usize = 32;
const LEN: usize = 60;

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// A SlicePort listening at a fresh path, with its pool.
fn make_port(ring: u64) -> (PacketPool, Arc<PortHandle>, String) {
    let pool = PacketPool::new("bench", 8192, PagePolicy::Auto).expect("pool");
    let ports = PortTable::new();
    let path = std::env::temp_dir()
        .join(format!("bench-slice-{}", std::process::id()))
        .to_string_lossy()
        .into_owned();
    let h = ports
        .create(
            bessemer_drivers::find("SlicePort").expect("SlicePort driver"),
            PortParams {
                name: "bench".into(),
                num_inc_q: 0,
                num_out_q: 0,
                size_inc_q: 0,
                size_out_q: 0,
                pool: pool.clone(),
            },
            &Value::map()
                .with("path", path.as_str())
                .with("ring_size", ring),
        )
        .expect("SlicePort");
    (pool, h, path)
}

/// What a run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// App → daemon, zero copy; the daemon frees the packets.
    FromApp,
    /// App → daemon → app, zero copy both ways.
    RoundTrip,
    /// Daemon → app, the daemon's pool packets copied into copy frames.
    ToAppCopy,
}

impl Case {
    fn counts_to_app(self) -> bool {
        self != Case::FromApp
    }
}

/// The app's part of one step: sends a batch written in place (not for ToAppCopy) and
/// receives and releases what came (not for FromApp); returns the frames received.
fn app_step(s: &mut Slice, d: &mut [Desc], case: Case) -> u64 {
    if case != Case::ToAppCopy {
        let k = s.alloc_tx(d);
        for x in &mut d[..k] {
            s.frame_mut(*x)[..14].copy_from_slice(&[0x02; 14]);
            x.len = LEN as u32;
        }
        let sent = s.send_batch(&d[..k]);
        s.free_tx(&d[sent..k]);
    }
    if case == Case::FromApp {
        return 0;
    }
    let k = s.recv_batch(d);
    s.release(&d[..k]);
    k as u64
}

/// The daemon's part of one step, as PortInc / PortOut drive the queues; returns the
/// packets it took from (FromApp) or handed to (otherwise) the slice.
fn daemon_step(
    case: Case,
    burst: usize,
    cache: &mut bessemer_core::PoolCache,
    batch: &mut PacketBatch,
    rxq: &mut Box<dyn bessemer_core::port::RxQueue>,
    txq: &mut Box<dyn bessemer_core::port::TxQueue>,
) -> u64 {
    let n = match case {
        Case::FromApp => rxq.recv(cache, batch, burst),
        Case::RoundTrip => {
            rxq.recv(cache, batch, burst);
            txq.send(cache, batch)
        }
        Case::ToAppCopy => {
            cache.alloc_bulk(batch, burst, LEN);
            txq.send(cache, batch)
        }
    };
    cache.free_bulk(batch);
    n as u64
}

/// One run with the daemon's and the app's work alternating on one thread (one core does
/// both sides): Mpps per second of that thread's CPU time.
fn run_one_core(secs: f64, case: Case, core: usize, ring: u64) -> f64 {
    pin(PROG, core);
    let (pool, h, path) = make_port(ring);
    let mut s = Slice::attach(&path).expect("attach");
    let t0 = Instant::now();
    while !h.port().link_status().link_up {
        assert!(t0.elapsed() < Duration::from_secs(5), "app did not attach");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut cache = pool.cache();
    let mut batch = PacketBatch::new();
    let (_rc, mut rxq) = h.claim_rx(0).expect("rx");
    let (_tc, mut txq) = h.claim_tx(0).expect("tx");
    let mut d = [Desc::default(); BATCH];
    let c0 = bessemer_drivers::slice_port::slice_counters(h.port()).expect("slice port");
    let mut step = || -> u64 {
        let got = app_step(&mut s, &mut d, case);
        let n = daemon_step(case, BATCH, &mut cache, &mut batch, &mut rxq, &mut txq);
        if case == Case::FromApp {
            n
        } else {
            got
        }
    };
    let (pkts, cpu) = common::run_timed(secs, &mut step);
    check_path(&h, case, &c0);
    pkts as f64 / cpu / 1e6
}

/// Stops the benchmark if a case did not take the path it is meant to measure.
fn check_path(
    h: &bessemer_core::port::PortHandle,
    case: Case,
    c0: &bessemer_slice::CounterSnapshot,
) {
    let c = bessemer_drivers::slice_port::slice_counters(h.port()).expect("slice port");
    let (zc, copied) = match case {
        Case::FromApp => (
            c.from_app_zero_copy - c0.from_app_zero_copy,
            c.from_app_copied - c0.from_app_copied,
        ),
        _ => (
            c.to_app_zero_copy - c0.to_app_zero_copy,
            c.to_app_copied - c0.to_app_copied,
        ),
    };
    let ok = match case {
        Case::ToAppCopy => zc == 0 && copied > 0,
        _ => copied == 0 && zc > 0,
    };
    assert!(
        ok,
        "{PROG}: wrong path: {zc} zero-copy and {copied} copied packets"
    );
}

/// What a two-core run measured: Mpps over wall time, per second of the daemon thread's
/// CPU time, and per second of the application thread's.
#[derive(Clone, Copy)]
struct TwoCore {
    wall: f64,
    daemon: f64,
    app: f64,
}

/// One run of `secs` of `case`, the app on its own thread and core, in batches of `batch`
/// (the daemon side moves at most a pipeline burst, 64, per call, as PortInc does).
fn run(secs: f64, case: Case, cores: (usize, usize), ring: u64, batch: usize) -> TwoCore {
    let (pool, h, path) = make_port(ring);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring_flag = Arc::new(AtomicBool::new(false));
    let app = {
        let (stop, path, measuring) = (stop.clone(), path.clone(), measuring_flag.clone());
        std::thread::spawn(move || {
            pin(PROG, cores.1);
            let mut s = Slice::attach(&path).expect("attach");
            let mut d = vec![Desc::default(); batch];
            let (mut cpu0, mut busy) = (0.0, false);
            while !stop.load(Ordering::Relaxed) {
                if !busy && measuring.load(Ordering::Relaxed) {
                    cpu0 = thread_cpu_secs();
                    busy = true;
                }
                for _ in 0..64 {
                    app_step(&mut s, &mut d, case);
                }
                if busy && !measuring.load(Ordering::Relaxed) {
                    break;
                }
            }
            let cpu = thread_cpu_secs() - cpu0;
            while !stop.load(Ordering::Relaxed) {
                app_step(&mut s, &mut d, case);
            }
            cpu
        })
    };
    pin(PROG, cores.0);
    let t0 = Instant::now();
    while !h.port().link_status().link_up {
        assert!(t0.elapsed() < Duration::from_secs(5), "app did not attach");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut cache = pool.cache();
    let (_, mut rxq) = h.claim_rx(0).expect("rx");
    let (_, mut txq) = h.claim_tx(0).expect("tx");
    let c00 = bessemer_drivers::slice_port::slice_counters(h.port()).expect("slice port");
    let burst = batch.min(bessemer_core::MAX_BURST);
    let mut pkts = PacketBatch::new();
    let mut step = || daemon_step(case, burst, &mut cache, &mut pkts, &mut rxq, &mut txq);
    // Warm-up, then the measured window.
    let w = Instant::now();
    while w.elapsed() < Duration::from_millis(50) {
        step();
    }
    measuring_flag.store(true, Ordering::Relaxed);
    let (c0, w0, cpu0) = (
        bessemer_slice_counts(&h, case.counts_to_app()),
        Instant::now(),
        thread_cpu_secs(),
    );
    while w0.elapsed().as_secs_f64() < secs {
        for _ in 0..64 {
            step();
        }
    }
    let el = w0.elapsed().as_secs_f64();
    let cpu = (thread_cpu_secs() - cpu0).max(1e-9);
    let c1 = bessemer_slice_counts(&h, case.counts_to_app());
    measuring_flag.store(false, Ordering::Relaxed);
    // The app stops its clock at the end of its current round of 64 steps.
    for _ in 0..200 {
        step();
    }
    stop.store(true, Ordering::Relaxed);
    // Let the app finish its loop (it never blocks: a full ring makes it skip).
    for _ in 0..1000 {
        if app.is_finished() {
            break;
        }
        step();
        std::thread::sleep(Duration::from_micros(100));
    }
    let app_cpu = app.join().expect("app thread").max(1e-9);
    check_path(&h, case, &c00);
    drop(rxq);
    drop(txq);
    let pkts = (c1 - c0) as f64;
    TwoCore {
        wall: pkts / el / 1e6,
        daemon: pkts / cpu / 1e6,
        app: pkts / app_cpu / 1e6,
    }
}

/// Packets the slice moved in the direction measured (the port's own counters).
fn bessemer_slice_counts(h: &bessemer_core::port::PortHandle, to_app: bool) -> u64 {
    let c = bessemer_drivers::slice_port::slice_counters(h.port()).expect("slice port");
    if to_app {
        c.to_app_packets
    } else {
        c.from_app_packets
    }
}

fn main() {
    let mut base = Base::new(5, 1.0);
    let mut args = Args::new(PROG);
    let mut ring = 1024u64;
    let mut sweep: Vec<usize> = vec![1, 2, 4, 8, 16, 32, 64, 128, 256];
    while let Some(a) = args.next_opt() {
        if args.base(&mut base, &a) {
            continue;
        }
        match a.as_str() {
            "--ring" => ring = args.value(&a).parse().expect("--ring N"),
            "--sweep" => {
                sweep = args
                    .value(&a)
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().expect("--sweep N,N,..."))
                    .collect()
            }
            "--help" | "-h" => {
                println!("{PROG} [--runs N] [--secs S] [--quick] [--ring N] [--sweep 1,2,..,256]");
                return;
            }
            _ => args.unknown(&a),
        }
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = (0, if ncpu > 1 { 1 } else { 0 });
    println!(
        "{PROG}: {} runs x {} s, batches of {BATCH}, {LEN}-byte packets, ring {ring}, daemon on core {} and app on core {}",
        base.runs, base.secs, cores.0, cores.1
    );
    println!(
        "{:<20} {:>16} {:>8} {:>8} {:>16} {:>12} {:>12}",
        "case", "Mpps, one core", "min", "max", "2 cores/daemon", "/app core", "(wall)"
    );
    let mut res = Vec::new();
    let cases = [
        ("app_to_daemon_zc", Case::FromApp),
        ("roundtrip_zc", Case::RoundTrip),
        ("daemon_to_app_copy", Case::ToAppCopy),
    ];
    for (name, case) in cases {
        let one: Vec<f64> = (0..base.runs)
            .map(|_| run_one_core(base.secs, case, cores.0, ring))
            .collect();
        let two: Vec<TwoCore> = (0..base.runs)
            .map(|_| run(base.secs, case, cores, ring, BATCH))
            .collect();
        let (m, lo, hi) = median(one);
        let (two_core, _, _) = median(two.iter().map(|r| r.daemon).collect());
        let (app_core, _, _) = median(two.iter().map(|r| r.app).collect());
        let (wall, _, _) = median(two.iter().map(|r| r.wall).collect());
        println!(
            "{name:<20} {m:>16.2} {lo:>8.2} {hi:>8.2} {two_core:>16.2} {app_core:>12.2} {wall:>12.2}"
        );
        res.push((name, m, lo, hi, two_core, app_core));
    }
    // The paper's batch-size sweep: app on its own core, daemon on another, app -> daemon
    // and the round trip, zero copy; Mpps per daemon core and per app core.
    let mut sweep_js = Vec::new();
    if !sweep.is_empty() {
        println!();
        println!(
            "batch sweep (two cores, one run of {} s each): {:>6} {:>14} {:>14} {:>14} {:>14}",
            base.secs, "batch", "from_app/dmn", "from_app/app", "roundtrip/dmn", "roundtrip/app"
        );
    }
    for &b in &sweep {
        let f = run(base.secs, Case::FromApp, cores, ring, b);
        let r = run(base.secs, Case::RoundTrip, cores, ring, b);
        println!(
            "{:>51} {:>14.2} {:>14.2} {:>14.2} {:>14.2}",
            b, f.daemon, f.app, r.daemon, r.app
        );
        sweep_js.push(format!(
            "{{\"batch\": {b}, \"from_app_daemon\": {:.2}, \"from_app_app\": {:.2}, \"roundtrip_daemon\": {:.2}, \"roundtrip_app\": {:.2}}}",
            f.daemon, f.app, r.daemon, r.app
        ));
    }
    let target = 20.0;
    // The target is for zero copy each way: app → daemon, and the round trip, which
    // bounds daemon → app from below.
    let (from, rt, copy) = (&res[0], &res[1], &res[2]);
    let met = from.1 >= target && rt.1 >= target;
    println!(
        "target >= {target} Mpps per core each way, zero copy: {}",
        if met { "met" } else { "not met" }
    );
    // Application and daemon on separate cores, app -> daemon, per core (the lower of the
    // daemon's and the application's); the round trip, each packet crossing both ways at
    // once, beside it.
    let two_core = from.4.min(from.5);
    let two_core_rt = rt.4.min(rt.5);
    println!(
        "two cores (app and daemon each on its own): app -> daemon {two_core:.2} Mpps per core (target >= {target}: {}); round trip {two_core_rt:.2} Mpps each way at once",
        if two_core >= target { "met" } else { "not met" }
    );
    println!(
        "{{\"bench\": \"slice_lib\", \"slice_lib_mpps\": {:.2}, \"slice_lib_to_app_mpps\": {:.2}, \"slice_lib_from_app_mpps\": {:.2}, \"slice_lib_to_app_copy_mpps\": {:.2}, \"zero_copy\": true, \"to_app_is_roundtrip\": true, \"to_app_min\": {:.2}, \"to_app_max\": {:.2}, \"from_app_min\": {:.2}, \"from_app_max\": {:.2}, \"to_app_copy_min\": {:.2}, \"to_app_copy_max\": {:.2}, \"two_core_to_app_mpps_per_daemon_core\": {:.2}, \"two_core_from_app_mpps_per_daemon_core\": {:.2}, \"two_core_to_app_copy_mpps_per_daemon_core\": {:.2}, \"slice_two_core_mpps\": {two_core:.2}, \"slice_two_core_roundtrip_mpps\": {two_core_rt:.2}, \"two_core_from_app_mpps_per_app_core\": {:.2}, \"two_core_roundtrip_mpps_per_app_core\": {:.2}, \"sweep\": [{}], \"batch\": {BATCH}, \"len\": {LEN}, \"ring\": {ring}, \"target_mpps\": {target}, \"met\": {met}}}",
        from.1.min(rt.1),
        rt.1,
        from.1,
        copy.1,
        rt.2,
        rt.3,
        from.2,
        from.3,
        copy.2,
        copy.3,
        rt.4,
        from.4,
        copy.4,
        from.5,
        rt.5,
        sweep_js.join(", ")
    );
}

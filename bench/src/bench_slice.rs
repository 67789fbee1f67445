//! bench-slice-lib: packets per second between the daemon side of a SlicePort (its port
//! queues driven with a packet pool, as PortInc/PortOut do) and an application thread using
//! the slice library, in batches of 32, each direction on its own; both sides are pinned to
//! different cores when there are two. Each run reports Mpps per second of the daemon
//! thread's CPU time (per core: a busy shared machine does not count) and over wall time; the median of
//! `--runs` with min and max is printed, then one JSON line.
//!
//! Daemon → app: the daemon allocates 60-byte packets, the port copies each into a slice
//! frame (the one copy: see docs/slices.md); the app receives and releases frames in place.
//! App → daemon: the app writes a 14-byte header in place and sends; the port copies each
//! frame into a pool packet, which the daemon frees.

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

/// One run with the daemon's and the app's work alternating on one thread (one core does
/// both sides): Mpps per second of that thread's CPU time.
fn run_one_core(secs: f64, to_app: bool, core: usize, ring: u64) -> f64 {
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
    let mut step = || -> u64 {
        if to_app {
            cache.alloc_bulk(&mut batch, BATCH, LEN);
            txq.send(&mut cache, &mut batch);
            cache.free_bulk(&mut batch);
            let k = s.recv_batch(&mut d);
            s.release(&d[..k]);
            k as u64
        } else {
            let k = s.alloc_tx(&mut d);
            for x in &mut d[..k] {
                s.frame_mut(*x)[..14].copy_from_slice(&[0x02; 14]);
                x.len = LEN as u32;
            }
            let sent = s.send_batch(&d[..k]);
            s.free_tx(&d[sent..k]);
            let got = rxq.recv(&mut cache, &mut batch, BATCH);
            cache.free_bulk(&mut batch);
            got as u64
        }
    };
    let (pkts, cpu) = common::run_timed(secs, &mut step);
    pkts as f64 / cpu / 1e6
}

/// One run of `secs` in direction `to_app`: (Mpps over wall time, Mpps per second of the
/// daemon thread's CPU time).
fn run(secs: f64, to_app: bool, cores: (usize, usize), ring: u64) -> (f64, f64) {
    let (pool, h, path) = make_port(ring);
    let stop = Arc::new(AtomicBool::new(false));
    let app = {
        let (stop, path) = (stop.clone(), path.clone());
        std::thread::spawn(move || {
            pin(PROG, cores.1);
            let mut s = Slice::attach(&path).expect("attach");
            let mut d = [Desc::default(); BATCH];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    if to_app {
                        let k = s.recv_batch(&mut d);
                        s.release(&d[..k]);
                    } else {
                        let k = s.alloc_tx(&mut d);
                        for x in &mut d[..k] {
                            s.frame_mut(*x)[..14].copy_from_slice(&[0x02; 14]);
                            x.len = LEN as u32;
                        }
                        let sent = s.send_batch(&d[..k]);
                        s.free_tx(&d[sent..k]);
                    }
                }
            }
        })
    };
    pin(PROG, cores.0);
    let t0 = Instant::now();
    while !h.port().link_status().link_up {
        assert!(t0.elapsed() < Duration::from_secs(5), "app did not attach");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut cache = pool.cache();
    let mut batch = PacketBatch::new();
    let (_, mut rxq) = h.claim_rx(0).expect("rx");
    let (_, mut txq) = h.claim_tx(0).expect("tx");
    let mut step = || -> u64 {
        if to_app {
            cache.alloc_bulk(&mut batch, BATCH, LEN);
            let sent = txq.send(&mut cache, &mut batch);
            cache.free_bulk(&mut batch);
            sent as u64
        } else {
            let got = rxq.recv(&mut cache, &mut batch, BATCH);
            cache.free_bulk(&mut batch);
            got as u64
        }
    };
    // Warm-up, then the measured window.
    let w = Instant::now();
    while w.elapsed() < Duration::from_millis(50) {
        step();
    }
    let (c0, w0, cpu0) = (
        bessemer_slice_counts(&h, to_app),
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
    let c1 = bessemer_slice_counts(&h, to_app);
    stop.store(true, Ordering::Relaxed);
    // Let the app finish its loop; in the to-app direction it must not block on a full ring.
    for _ in 0..1000 {
        if app.is_finished() {
            break;
        }
        if !to_app {
            step();
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    app.join().expect("app thread");
    drop(rxq);
    drop(txq);
    let pkts = (c1 - c0) as f64;
    (pkts / el / 1e6, pkts / cpu / 1e6)
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
    while let Some(a) = args.next_opt() {
        if args.base(&mut base, &a) {
            continue;
        }
        match a.as_str() {
            "--ring" => ring = args.value(&a).parse().expect("--ring N"),
            "--help" | "-h" => {
                println!("{PROG} [--runs N] [--secs S] [--quick] [--ring N]");
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
        "{:<16} {:>16} {:>8} {:>8} {:>16} {:>12}",
        "direction", "Mpps, one core", "min", "max", "Mpps, two cores", "(wall)"
    );
    let mut res = Vec::new();
    for (name, to_app) in [("daemon_to_app", true), ("app_to_daemon", false)] {
        let one: Vec<f64> = (0..base.runs)
            .map(|_| run_one_core(base.secs, to_app, cores.0, ring))
            .collect();
        let two: Vec<(f64, f64)> = (0..base.runs)
            .map(|_| run(base.secs, to_app, cores, ring))
            .collect();
        let (m, lo, hi) = median(one);
        let (two_core, _, _) = median(two.iter().map(|r| r.1).collect());
        let (wall, _, _) = median(two.iter().map(|r| r.0).collect());
        println!("{name:<16} {m:>16.2} {lo:>8.2} {hi:>8.2} {two_core:>16.2} {wall:>12.2}");
        res.push((name, m, lo, hi, two_core));
    }
    let target = 20.0;
    let met = res.iter().all(|r| r.1 >= target);
    println!(
        "target >= {target} Mpps per core each way: {}",
        if met { "met" } else { "not met" }
    );
    println!(
        "{{\"bench\": \"slice_lib\", \"slice_lib_mpps\": {:.2}, \"slice_lib_to_app_mpps\": {:.2}, \"slice_lib_from_app_mpps\": {:.2}, \"to_app_min\": {:.2}, \"to_app_max\": {:.2}, \"from_app_min\": {:.2}, \"from_app_max\": {:.2}, \"two_core_to_app_mpps_per_daemon_core\": {:.2}, \"two_core_from_app_mpps_per_daemon_core\": {:.2}, \"batch\": {BATCH}, \"len\": {LEN}, \"ring\": {ring}, \"target_mpps\": {target}, \"met\": {met}}}",
        res[0].1.min(res[1].1),
        res[0].1,
        res[1].1,
        res[0].2,
        res[0].3,
        res[1].2,
        res[1].3,
        res[0].4,
        res[1].4
    );
}

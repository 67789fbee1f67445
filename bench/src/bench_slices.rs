//! `make bench-slices`: the IPsec part of the multi-core benchmark (issue 11). ESPEncap and
//! ESPDecap in memory, per core: Mpps and Gbit/s for encryption and decryption at 64, 512 and
//! 1400-byte frames and IMIX, both cipher suites, one worker and two (a duplicated gateway:
//! one pipeline and one SA per worker), next to VPP's published anchor. The other parts of
//! the benchmark (duplication/chaining scaling, the slice library, AF_XDP slices
//! against pcap-mmap) are other programs: this one's JSON has their keys as null, and
//! bench/slices.sh runs them all and merges their JSON lines into one.
//!
//! Each case is Source -> Rewrite (the plain frame) -> ESPEncap -> Sink, or Source -> Replay
//! (pre-encrypted frames, sequence numbers 1..N) -> ESPDecap -> Sink, run by one thread
//! pinned to a core; the figure is packets per second of that thread's CPU time, so the
//! Source/Rewrite/Sink cost (tens of ns) is included, as it is in a real gateway's I/O.
//! Gbit/s counts the plain frame's bytes (the inner packet and its Ethernet header).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bessemer_core::graph::Pipeline;
use bessemer_core::mem::PagePolicy;
use bessemer_core::{Context, Instance, Module, ModuleClass, PacketBatch, PacketPool, Value};
use bessemer_modules::encap::esp::{Sa, ESP_HEADER_LEN, NEXT_HEADER_IPV4};

#[path = "common.rs"]
mod common;

const PROG: &str = "bench-slices";
/// VPP's published figure: 2.13 Mpps per core, IPsec ESP AES-GCM-128 tunnel, IMIX, on a
/// Xeon Gold 6130 (FD.io CSIT report).
const VPP_GCM_IMIX_MPPS: f64 = 2.13;
/// The target for ESP AES-GCM at 1400-byte frames.
const TARGET_GCM_1400_GBPS: f64 = 10.0;
/// Pre-encrypted frames the decryption cases cycle through (a multiple of the burst, 32, so
/// the window is reset between bursts, never inside one).
const REPLAY_FRAMES: usize = 2048;
/// IMIX: 7 × 64, 4 × 570, 1 × 1518 bytes (the classic simple IMIX).
const IMIX: [usize; 12] = [64, 64, 570, 64, 64, 570, 64, 64, 570, 64, 570, 1518];

fn gcm_sa(spi: u32) -> Value {
    Value::map()
        .with("spi", spi)
        .with("cipher", "aes-gcm-128")
        .with("key", (1..=20).collect::<Vec<u8>>())
        .with("local", "192.0.2.1")
        .with("peer", "192.0.2.2")
}

fn cbc_sa(spi: u32) -> Value {
    Value::map()
        .with("spi", spi)
        .with("cipher", "aes-cbc-128-hmac-sha1-96")
        .with("key", (1..=16).collect::<Vec<u8>>())
        .with("auth_key", (0x40..0x54).collect::<Vec<u8>>())
        .with("local", "192.0.2.1")
        .with("peer", "192.0.2.2")
}

/// An Ethernet + IPv4 + UDP frame of `size` bytes.
fn plain_frame(size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 1, 0, 1]);
    f[30..34].copy_from_slice(&[10, 2, 0, 1]);
    let c = bessemer_core::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&5678u16.to_be_bytes());
    f[38..40].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    f
}

/// The ESP tunnel frame of `plain` with sequence number `seq`, sealed by `sa`.
fn esp_frame(sa: &Sa, seq: u32, plain: &[u8]) -> Vec<u8> {
    let suite = sa.suite;
    let inner = &plain[14..];
    let pad = suite.pad_len(inner.len());
    let mut esp = Vec::new();
    esp.extend(sa.spi.to_be_bytes());
    esp.extend(seq.to_be_bytes());
    // Any IV will do for a benchmark; ESPEncap's own are the sequence number (GCM) or
    // random (CBC).
    esp.extend((seq as u128).to_be_bytes()[16 - suite.iv_len()..].iter());
    debug_assert_eq!(esp.len(), ESP_HEADER_LEN + suite.iv_len());
    esp.extend(inner);
    esp.extend((1..=pad as u8).collect::<Vec<u8>>());
    esp.push(pad as u8);
    esp.push(NEXT_HEADER_IPV4);
    esp.extend(vec![0u8; suite.icv_len()]);
    sa.seal(&mut esp);
    let total = (20 + esp.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 50, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = bessemer_core::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = plain[..14].to_vec();
    f.extend(ip);
    f.extend(esp);
    f
}

/// What the next Replay module is created with: its frames and its wrap flag.
type ReplayInit = (Vec<Vec<u8>>, Arc<AtomicBool>);

thread_local! {
    static NEXT_FRAMES: RefCell<Option<ReplayInit>> = const { RefCell::new(None) };
}

/// Writes the pre-encrypted frames into the packets in turn; raises `wrapped` when it starts
/// over, so the bench resets the decapsulator's window before the next burst.
struct Replay {
    frames: Vec<Vec<u8>>,
    pos: usize,
    wrapped: Arc<AtomicBool>,
}

impl Module for Replay {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        for p in batch.pkts_mut() {
            p.set_data(&self.frames[self.pos]);
            self.pos += 1;
            if self.pos == self.frames.len() {
                self.pos = 0;
                self.wrapped.store(true, Ordering::Relaxed);
            }
        }
        ctx.forward(0, batch);
    }
}

static REPLAY: ModuleClass = ModuleClass {
    name: "BenchReplay",
    name_template: "replay",
    help: "writes pre-encrypted ESP frames into packets (bench only)",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, _| {
        let (frames, wrapped) = NEXT_FRAMES
            .with(|c| c.borrow_mut().take())
            .expect("frames set before creating the replay module");
        Ok(Instance::Exclusive(Box::new(Replay {
            frames,
            pos: 0,
            wrapped,
        })))
    },
};

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Encrypt,
    Decrypt,
}

/// One measured case: a suite, a direction and frame sizes (one size, or the IMIX list).
#[derive(Clone)]
struct Case {
    cbc: bool,
    dir: Dir,
    sizes: Vec<usize>,
}

impl Case {
    fn sa(&self, spi: u32) -> Value {
        if self.cbc {
            cbc_sa(spi)
        } else {
            gcm_sa(spi)
        }
    }

    fn mean_bytes(&self) -> f64 {
        self.sizes.iter().sum::<usize>() as f64 / self.sizes.len() as f64
    }

    fn label(&self) -> String {
        let size = if self.sizes.len() > 1 {
            "imix".to_string()
        } else {
            self.sizes[0].to_string()
        };
        format!(
            "{} {} {}",
            if self.cbc { "cbc-sha1" } else { "gcm" },
            if self.dir == Dir::Encrypt {
                "encrypt"
            } else {
                "decrypt"
            },
            size
        )
    }
}

/// A built pipeline: its graph, a context and the source's task.
struct Bench {
    g: Pipeline,
    ctx: Context,
    task: bessemer_core::sched::TaskId,
    wrapped: Arc<AtomicBool>,
    sa: Value,
}

fn build(pool: &PacketPool, case: &Case, spi: u32) -> Bench {
    let class = |n: &str| bessemer_modules::find(n).unwrap_or_else(|| panic!("class {n}"));
    let mut g = Pipeline::new();
    let ctx = Context::new(0, pool);
    let (_, tasks) = g
        .add_module(
            class("Source"),
            Some("src"),
            &Value::map().with("pkt_size", 64),
        )
        .unwrap();
    let wrapped = Arc::new(AtomicBool::new(false));
    let sa = case.sa(spi);
    let plain: Vec<Vec<u8>> = case.sizes.iter().map(|&s| plain_frame(s)).collect();
    match case.dir {
        Dir::Encrypt => {
            let t = Value::List(plain.into_iter().map(Value::Bytes).collect());
            g.add_module(
                class("Rewrite"),
                Some("feed"),
                &Value::map().with("templates", t),
            )
            .unwrap();
            let arg = Value::map().with("sas", Value::List(vec![sa.clone()]));
            g.add_module(class("ESPEncap"), Some("esp"), &arg).unwrap();
        }
        Dir::Decrypt => {
            let s = Sa::parse(&sa, "bench", true).unwrap();
            let frames = (0..REPLAY_FRAMES)
                .map(|i| esp_frame(&s, i as u32 + 1, &plain[i % plain.len()]))
                .collect();
            NEXT_FRAMES.with(|c| *c.borrow_mut() = Some((frames, wrapped.clone())));
            g.add_module(&REPLAY, Some("feed"), &Value::Null).unwrap();
            let arg = Value::map().with("sas", Value::List(vec![sa.clone()]));
            g.add_module(class("ESPDecap"), Some("esp"), &arg).unwrap();
        }
    }
    g.add_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    g.connect("src", 0, "feed", 0).unwrap();
    g.connect("feed", 0, "esp", 0).unwrap();
    g.connect("esp", 0, "sink", 0).unwrap();
    Bench {
        g,
        ctx,
        task: tasks[0],
        wrapped,
        sa,
    }
}

/// Runs the case for `secs`; returns (packets, CPU seconds).
fn measure(b: &mut Bench, secs: f64, dir: Dir) -> (u64, f64) {
    let Bench {
        g,
        ctx,
        task,
        wrapped,
        sa,
    } = b;
    let spi = Value::map().with("spi", sa.get("spi").unwrap().clone());
    let step = || {
        let r = ctx.run_task(g, *task);
        if dir == Dir::Decrypt && wrapped.swap(false, Ordering::Relaxed) {
            // The frames start over at sequence number 1: a fresh SA has an empty window.
            g.command("esp", "delete_sa", &spi, ctx).unwrap();
            g.command("esp", "add_sa", sa, ctx).unwrap();
        }
        r.packets as u64
    };
    common::run_timed(secs, step)
}

fn drops(b: &Bench) -> u64 {
    b.g.drops_of("esp").unwrap().iter().map(|(_, n)| n).sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Mpps per run of `case` on `workers` threads (thread i pinned to core i, its own pool,
/// pipeline and SA): each run's figure is the sum over the threads of packets per CPU
/// second.
fn run_case(case: &Case, workers: usize, o: &common::Base) -> Vec<f64> {
    let mut runs = Vec::new();
    for _ in 0..o.runs {
        let total: f64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..workers)
                .map(|w| {
                    let case = case.clone();
                    let core = if workers == 1 { o.core } else { w };
                    let secs = o.secs;
                    s.spawn(move || {
                        common::pin(PROG, core);
                        let pool =
                            PacketPool::new("bench", 4096, PagePolicy::Auto).expect("packet pool");
                        let mut b = build(&pool, &case, 0x1000 + w as u32);
                        let (pkts, cpu) = measure(&mut b, secs, case.dir);
                        let d = drops(&b);
                        assert_eq!(d, 0, "{}: {d} packets dropped", case.label());
                        pkts as f64 / cpu / 1e6
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        runs.push(total);
    }
    runs
}

fn main() {
    let mut o = common::Base::new(5, 0.3);
    let mut workers = vec![1, 2];
    let mut a = common::Args::new(PROG);
    while let Some(opt) = a.next_opt() {
        if a.base(&mut o, &opt) {
            continue;
        }
        match opt.as_str() {
            "--one-worker" => workers = vec![1],
            "-h" | "--help" => {
                println!(
                    "usage: bench-slices [--runs N] [--secs S] [--core C] [--quick] [--one-worker]\n\
                     \n\
                     --runs N       runs per case (default 5; the median is reported, min..max beside it)\n\
                     --secs S       seconds per run (default 0.3)\n\
                     --core C       core of the one-worker cases (default: the last one)\n\
                     --quick        3 runs x 0.1 s\n\
                     --one-worker   skip the two-worker cases"
                );
                std::process::exit(0)
            }
            other => a.unknown(other),
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    workers.retain(|&w| w <= cores);

    let mut cases = Vec::new();
    for cbc in [false, true] {
        for dir in [Dir::Encrypt, Dir::Decrypt] {
            for size in [64, 512, 1400] {
                cases.push(Case {
                    cbc,
                    dir,
                    sizes: vec![size],
                });
            }
            cases.push(Case {
                cbc,
                dir,
                sizes: IMIX.to_vec(),
            });
        }
    }
    println!("# bench-slices (IPsec part): ESPEncap / ESPDecap in memory, Mpps per core = packets per CPU second of the worker thread");
    println!("# the machine's cores are shared with other jobs: expect noise (spread = min..max of {} runs)", o.runs);
    println!(
        "{:<24} {:>7} {:>9} {:>17} {:>9} {:>11}",
        "case", "workers", "Mpps", "spread", "Gbit/s", "Mpps/core"
    );
    let mut json: Vec<(String, String)> = vec![("\"bench\"".into(), "\"slices\"".into())];
    let mut per_core = std::collections::HashMap::new();
    for w in &workers {
        for c in &cases {
            // Two workers: only the headline cases (GCM at 1400 B and IMIX), to keep it short.
            if *w > 1 && (c.cbc || !(c.sizes == [1400] || c.sizes.len() > 1)) {
                continue;
            }
            let runs = run_case(c, *w, &o);
            let m = median(runs.clone());
            let lo = runs.iter().cloned().fold(f64::MAX, f64::min);
            let hi = runs.iter().cloned().fold(0.0, f64::max);
            let gbps = m * c.mean_bytes() * 8.0 / 1e3;
            println!(
                "{:<24} {:>7} {:>9.3} {:>8.3}..{:<8.3} {:>9.2} {:>11.3}",
                c.label(),
                w,
                m,
                lo,
                hi,
                gbps,
                m / *w as f64
            );
            let key = c.label().replace([' ', '-'], "_");
            let key = format!("esp_{key}_{w}w");
            json.push((format!("\"{key}_mpps\""), format!("{m:.3}")));
            json.push((format!("\"{key}_gbps\""), format!("{gbps:.2}")));
            per_core.insert((c.label(), *w), (m / *w as f64, gbps / *w as f64));
        }
    }
    let get = |l: &str, w: usize| per_core.get(&(l.to_string(), w)).copied();
    let (enc, dec) = (get("gcm encrypt 1400", 1), get("gcm decrypt 1400", 1));
    let headline = match (enc, dec) {
        (Some(e), Some(d)) => e.1.min(d.1),
        _ => f64::NAN,
    };
    let imix = get("gcm encrypt imix", 1).map_or(f64::NAN, |v| v.0);
    let imix_dec = get("gcm decrypt imix", 1).map_or(f64::NAN, |v| v.0);
    println!();
    println!(
        "ESP AES-GCM-128 at 1400 B, one core: {headline:.2} Gbit/s (the slower of encrypt and decrypt); target >= {TARGET_GCM_1400_GBPS} Gbit/s: {}",
        if headline >= TARGET_GCM_1400_GBPS { "met" } else { "NOT met" }
    );
    println!(
        "AES-GCM-128 IMIX per core: encrypt {imix:.2} Mpps, decrypt {imix_dec:.2} Mpps; VPP's published anchor {VPP_GCM_IMIX_MPPS} Mpps (Xeon Gold 6130, other hardware): ratio {:.2} / {:.2}",
        imix / VPP_GCM_IMIX_MPPS,
        imix_dec / VPP_GCM_IMIX_MPPS
    );
    let scaling = match (get("gcm encrypt 1400", 1), get("gcm encrypt 1400", 2)) {
        (Some(one), Some(two)) => format!("{:.2}", two.0 * 2.0 / one.0),
        _ => "null".into(),
    };
    if scaling != "null" {
        println!("two workers / one worker, GCM encrypt 1400 B: {scaling}x (both cores are shared with the rest of the machine)");
    }
    json.push(("\"esp_gcm_1400_gbps\"".into(), format!("{headline:.2}")));
    json.push((
        "\"esp_gcm_1400_target_met\"".into(),
        (headline >= TARGET_GCM_1400_GBPS).to_string(),
    ));
    json.push(("\"esp_gcm_imix_mpps\"".into(), format!("{imix:.3}")));
    json.push((
        "\"vpp_gcm_imix_mpps\"".into(),
        format!("{VPP_GCM_IMIX_MPPS}"),
    ));
    json.push((
        "\"esp_gcm_imix_vs_vpp\"".into(),
        format!("{:.2}", imix / VPP_GCM_IMIX_MPPS),
    ));
    json.push(("\"esp_2w_scaling\"".into(), scaling));
    for k in ["dup2_scaling", "slice_lib_mpps", "afxdp_vs_pcap_mmap"] {
        json.push((format!("\"{k}\""), "null".into()));
    }
    let body: Vec<String> = json.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    println!("{{{}}}", body.join(", "));
}

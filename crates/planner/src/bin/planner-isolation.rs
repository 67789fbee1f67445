//! Seed 003 §5.6.3's isolation experiment scaled to this machine (2 cores), on the veth
//! testbed: UDP echo clients of two classes, high-priority (HP) and best-effort (BE), talk
//! to one echo server through a 2-queue veth whose queues are steered by the planner's
//! configuration of the 82599 model. Receive queue 0 is processed on CPU 1 and queue 1 on
//! CPU 0 (`testbed::QueueCpus`: an XDP cpumap redirect by RX queue); the server has one
//! thread per CPU (SO_REUSEPORT with SO_INCOMING_CPU: a packet is served by the thread of
//! the CPU that received it). The HP clients run on CPU 1, the BE clients on CPU 0.
//!
//! - `balance`: the balancing policy spreads the flows over both queues, so BE work lands on
//!   the HP clients' CPU and HP flows may land on the BE CPU.
//! - `isolation` (k = 1): HP flows alone on queue 0 (CPU 1), BE flows on queue 1 (CPU 0).
//!
//! HP clients are closed-loop (one request in flight): latency percentiles and
//! transactions per second. BE clients keep 16 requests in flight each: they load the
//! machine. Needs root (namespaces, veth, BPF) and the testbed's BPF programs (clang).
//! Prints a table and ends with one JSON line. `--quick`: 2 runs of 2 s per policy instead
//! of 3 of 3 s; `--runs N` and `--seconds S` set them. `ISO_DEBUG=1` also prints, per run,
//! what each server thread served and the server namespace's UDP counters.
//!
//! SIGINT or SIGTERM stop the clients at the next check (at most about 100 ms), the
//! namespaces are removed (with the veths and the programs on them) and the process ends as
//! killed by the signal.

use bessemer_core::netns;
use bessemer_planner::interrupt;
use bessemer_planner::nic::{FlowSpec, Intel82599, NicModel, Sfc9020};
use bessemer_planner::pred::{Header, PROTO_UDP};
use bessemer_planner::search::{full_search, Balance, CostFn, FlowMapMode, Isolation};
use bessemer_planner::testbed::{tables, QueueCpus, Steering};
use clap::Parser;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::FromRawFd;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const PORT: u16 = 7000;
const HP_FLOWS: u16 = 2;
const BE_FLOWS: u16 = 8;
const BE_WINDOW: usize = 16;
const PAYLOAD: usize = 64;
/// Which CPU serves each RX queue (queue 0, the HP queue under isolation, on CPU 1).
const QUEUE_CPU: [usize; 2] = [1, 0];
const HP_CPU: usize = 1;
const BE_CPU: usize = 0;

/// What to run.
#[derive(Parser)]
#[command(
    name = "planner-isolation",
    version,
    about = "Seed 003's isolation experiment on the veth testbed: HP and BE UDP echo clients, the 82599 and SFC9020 models planned by the balancing and the isolation policy (root, clang, 2 CPUs)",
    after_help = "Makes two network namespaces (pisocPID, pisosPID) joined by a 2-queue veth and removes them when it ends, also on SIGINT or SIGTERM. Prints a table and ends with one JSON line."
)]
struct Args {
    /// Shorter: 2 runs of 2 s per model and policy instead of 3 of 3 s.
    #[arg(long)]
    quick: bool,
    /// Runs per model and policy, 1 to 100 (default 3, 2 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: Option<u32>,
    /// Seconds per run, 0.05 to 3600 (default 3, 2 with --quick); the timeline's phases
    /// last this long too, 2 s at most.
    #[arg(long, value_parser = seconds)]
    seconds: Option<f64>,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        Ok(_) => Err("seconds per run: 0.05 to 3600".into()),
        Err(_) => Err(format!("{s:?} is not a number of seconds")),
    }
}

fn sh(args: &[&str]) -> Result<String, String> {
    // A signal stops the setup between commands.
    interrupt::check()?;
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The two namespaces; the ones made are removed on drop (with the veth, which lives in
/// them, and the programs on it), after an error, a signal or a panic too.
struct Bed {
    cli: String,
    srv: String,
    made: Vec<String>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in self.made.drain(..) {
            match Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::piped())
                .output()
            {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!(
                    "planner-isolation: cannot remove namespace {ns}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => eprintln!("planner-isolation: cannot remove namespace {ns}: {e}"),
            }
        }
    }
}

fn bed() -> Result<Bed, String> {
    let pid = std::process::id();
    let mut b = Bed {
        cli: format!("pisoc{pid}"),
        srv: format!("pisos{pid}"),
        made: Vec::new(),
    };
    for ns in [b.cli.clone(), b.srv.clone()] {
        let ns = ns.as_str();
        sh(&["ip", "netns", "add", ns])?;
        b.made.push(ns.to_string());
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ])?;
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
    }
    sh(&[
        "ip",
        "-n",
        &b.cli,
        "link",
        "add",
        "ic",
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "is",
        "netns",
        &b.srv,
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
    ])?;
    for (ns, dev, addr) in [(&b.cli, "ic", CLIENT), (&b.srv, "is", SERVER)] {
        sh(&[
            "ip", "netns", "exec", ns, "ethtool", "-L", dev, "rx", "2", "tx", "2",
        ])?;
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            dev,
        ])?;
        sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
    }
    // Full checksums from the clients: a packet handed to another CPU through a cpumap
    // loses veth's "checksum partial, trust it" state, and the receiver would drop it.
    sh(&[
        "ip", "netns", "exec", &b.cli, "ethtool", "-K", "ic", "tx", "off",
    ])?;
    sh(&[
        "ip",
        "netns",
        "exec",
        &b.cli,
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        &SERVER.to_string(),
    ])?;
    Ok(b)
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity only touch it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn udp_in(ns: &str, addr: SocketAddrV4, incoming_cpu: Option<i32>) -> Result<UdpSocket, String> {
    netns::run_in(ns, || {
        let fd = netns::socket(libc::AF_INET, libc::SOCK_DGRAM, 0, "udp socket")?;
        use std::os::fd::{AsRawFd, IntoRawFd};
        let one = 1i32;
        if let Some(cpu) = incoming_cpu {
            bessemer_core::sockopt::setsockopt(
                &fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                &one,
                "SO_REUSEPORT",
            )?;
            bessemer_core::sockopt::setsockopt(
                &fd,
                libc::SOL_SOCKET,
                libc::SO_INCOMING_CPU,
                &cpu,
                "SO_INCOMING_CPU",
            )?;
        }
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: a valid sockaddr_in for the call.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if r < 0 {
            return Err(netns::os_error(&format!("bind {addr}")));
        }
        // SAFETY: a bound UDP socket we own.
        Ok(unsafe { UdpSocket::from_raw_fd(fd.into_raw_fd()) })
    })
    .map_err(|e| e.msg)
}

fn flows() -> Vec<FlowSpec> {
    let f = |port: u16, hp: bool| FlowSpec {
        header: Header::ipv4(
            PROTO_UDP,
            u32::from(CLIENT),
            u32::from(SERVER),
            port as u32,
            PORT as u32,
        ),
        hp,
        bw_mbps: 0,
    };
    (0..HP_FLOWS)
        .map(|i| f(5000 + i, true))
        .chain((0..BE_FLOWS).map(|i| f(6000 + i, false)))
        .collect()
}

#[derive(Default, Clone)]
struct RunResult {
    hp_rtts_us: Vec<f64>,
    hp_tps: f64,
    be_tps: f64,
    hp_lost: u64,
    /// HP requests served by the thread on the HP clients' CPU, of all HP requests served.
    hp_on_hp_cpu: f64,
}

fn run(bed: &Bed, secs: f64) -> Result<RunResult, String> {
    let all: Vec<u16> = (0..BE_FLOWS).collect();
    let mut r = run_phases(bed, secs, &[all], &mut |_| Ok(()))?;
    Ok(r.remove(0))
}

/// Runs the clients through phases of `secs` each: in phase i the BE clients of
/// `be_active[i]` send (the others are idle), HP clients run throughout. Between phases,
/// with the traffic still running, `change(i)` makes phase i's configuration (joins and
/// leaves are re-planned and applied live). One result per phase.
fn run_phases(
    bed: &Bed,
    secs: f64,
    be_active: &[Vec<u16>],
    change: &mut dyn FnMut(usize) -> Result<(), String>,
) -> Result<Vec<RunResult>, String> {
    let phases = be_active.len();
    let stop = AtomicBool::new(false);
    let phase = std::sync::atomic::AtomicUsize::new(0);
    let served = [[0u64; 2]; 2].map(|r| r.map(AtomicU64::new)); // [cpu][hp?]
    let be_done: Vec<AtomicU64> = (0..phases).map(|_| AtomicU64::new(0)).collect();
    let active: Vec<AtomicBool> = (0..BE_FLOWS)
        .map(|i| AtomicBool::new(be_active[0].contains(&i)))
        .collect();
    let servers: Vec<UdpSocket> = (0..2)
        .map(|cpu| udp_in(&bed.srv, SocketAddrV4::new(SERVER, PORT), Some(cpu)))
        .collect::<Result<_, _>>()?;
    let hp: Vec<UdpSocket> = (0..HP_FLOWS)
        .map(|i| udp_in(&bed.cli, SocketAddrV4::new(CLIENT, 5000 + i), None))
        .collect::<Result<_, _>>()?;
    let be: Vec<UdpSocket> = (0..BE_FLOWS)
        .map(|i| udp_in(&bed.cli, SocketAddrV4::new(CLIENT, 6000 + i), None))
        .collect::<Result<_, _>>()?;
    let dst = SocketAddrV4::new(SERVER, PORT);
    // Per phase: HP round trips, HP lost.
    let mut rtts: Vec<Vec<f64>> = vec![Vec::new(); phases];
    let mut lost = vec![0u64; phases];
    let mut took = vec![0f64; phases];
    let mut change_err = Ok(());
    std::thread::scope(|s| {
        for (cpu, sock) in servers.iter().enumerate() {
            let (stop, served) = (&stop, &served);
            s.spawn(move || {
                pin(cpu);
                sock.set_read_timeout(Some(Duration::from_millis(50))).ok();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let is_hp = from.port() < 6000;
                        served[cpu][is_hp as usize].fetch_add(1, Ordering::Relaxed);
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            });
        }
        let hp_threads: Vec<_> = hp
            .iter()
            .map(|sock| {
                let (stop, phase) = (&stop, &phase);
                s.spawn(move || {
                    pin(HP_CPU);
                    sock.set_read_timeout(Some(Duration::from_millis(100))).ok();
                    let (mut rtts, mut lost) = (vec![Vec::new(); phases], vec![0u64; phases]);
                    let mut buf = [0u8; 2048];
                    let mut req = [0u8; PAYLOAD];
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let ph = phase.load(Ordering::Relaxed);
                        seq += 1;
                        req[..8].copy_from_slice(&seq.to_ne_bytes());
                        let t = Instant::now();
                        if sock.send_to(&req, dst).is_err() {
                            lost[ph] += 1;
                            continue;
                        }
                        loop {
                            match sock.recv_from(&mut buf) {
                                Ok((n, _)) if n >= 8 && buf[..8] == seq.to_ne_bytes() => {
                                    rtts[ph].push(t.elapsed().as_secs_f64() * 1e6);
                                    break;
                                }
                                Ok(_) => continue, // a late reply to an earlier request
                                Err(_) => {
                                    // At the end the servers stop first: not a loss.
                                    if !stop.load(Ordering::Relaxed) {
                                        lost[ph] += 1;
                                    }
                                    break;
                                }
                            }
                        }
                    }
                    (rtts, lost)
                })
            })
            .collect();
        let be_threads: Vec<_> = be
            .iter()
            .enumerate()
            .map(|(i, sock)| {
                let (stop, phase, be_done, on) = (&stop, &phase, &be_done, &active[i]);
                s.spawn(move || {
                    pin(BE_CPU);
                    sock.set_read_timeout(Some(Duration::from_millis(50))).ok();
                    let req = [0u8; PAYLOAD];
                    let mut buf = [0u8; 2048];
                    let fill = |n: usize| {
                        for _ in 0..n {
                            let _ = sock.send_to(&req, dst);
                        }
                    };
                    let mut sending = false;
                    while !stop.load(Ordering::Relaxed) {
                        if !on.load(Ordering::Relaxed) {
                            // Idle (not joined yet, or left): let replies in flight drain.
                            sending = false;
                            let _ = sock.recv_from(&mut buf);
                            continue;
                        }
                        if !sending {
                            fill(BE_WINDOW);
                            sending = true;
                        }
                        match sock.recv_from(&mut buf) {
                            Ok(_) => {
                                be_done[phase.load(Ordering::Relaxed)]
                                    .fetch_add(1, Ordering::Relaxed);
                                fill(1);
                            }
                            Err(_) => fill(BE_WINDOW), // lost: refill the window
                        }
                    }
                })
            })
            .collect();
        for ph in 0..phases {
            let t = Instant::now();
            if ph > 0 {
                if let Err(e) = change(ph) {
                    change_err = Err(e);
                    break;
                }
                for (i, a) in active.iter().enumerate() {
                    a.store(be_active[ph].contains(&(i as u16)), Ordering::Relaxed);
                }
                phase.store(ph, Ordering::Relaxed);
            }
            if let Err(e) =
                interrupt::sleep(Duration::from_secs_f64(secs).saturating_sub(t.elapsed()))
            {
                change_err = Err(e);
                break;
            }
            took[ph] = t.elapsed().as_secs_f64();
        }
        stop.store(true, Ordering::Relaxed);
        for h in hp_threads {
            let (r, l) = h.join().expect("HP client");
            for ph in 0..phases {
                rtts[ph].extend_from_slice(&r[ph]);
                lost[ph] += l[ph];
            }
        }
        for h in be_threads {
            h.join().expect("BE client");
        }
    });
    change_err?;
    if std::env::var("ISO_DEBUG").is_ok() {
        let m: Vec<Vec<u64>> = served
            .iter()
            .map(|r| r.iter().map(|x| x.load(Ordering::Relaxed)).collect())
            .collect();
        eprintln!("served [cpu][be, hp]: {m:?}; HP lost {lost:?}");
        for cmd in [
            vec!["ip", "-n", &bed.srv, "-s", "link", "show", "is"],
            vec![
                "ip",
                "netns",
                "exec",
                &bed.srv,
                "nstat",
                "-az",
                "UdpInDatagrams",
                "UdpInErrors",
                "UdpInCsumErrors",
                "UdpNoPorts",
                "IpInReceives",
                "IpInHdrErrors",
                "IpInAddrErrors",
            ],
            vec!["ip", "netns", "exec", &bed.cli, "ethtool", "-k", "ic"],
        ] {
            eprintln!("{}", sh(&cmd).unwrap_or_else(|e| e));
        }
    }
    let hp_served: u64 = (0..2).map(|c| served[c][1].load(Ordering::Relaxed)).sum();
    let on_hp_cpu = served[HP_CPU][1].load(Ordering::Relaxed) as f64 / hp_served.max(1) as f64;
    Ok((0..phases)
        .map(|ph| RunResult {
            hp_tps: rtts[ph].len() as f64 / took[ph].max(1e-9),
            hp_rtts_us: std::mem::take(&mut rtts[ph]),
            be_tps: be_done[ph].load(Ordering::Relaxed) as f64 / took[ph].max(1e-9),
            hp_lost: lost[ph],
            hp_on_hp_cpu: on_hp_cpu,
        })
        .collect())
}

/// BE clients active in each phase of the timeline: 2, 3 join, 3 more join, 4 leave.
fn timeline_phases() -> Vec<Vec<u16>> {
    vec![
        (0..2).collect(),
        (0..5).collect(),
        (0..8).collect(),
        (4..8).collect(),
    ]
}

/// Seed 003 §5.6.4 scaled down: BE clients join and leave while the HP clients run; at each
/// change the planner adds or removes the flows incrementally (82599 model) and the new
/// configuration goes to the steering program with the traffic running. Prints a table per
/// policy and returns the figures for the JSON line.
fn timeline(bed: &Bed, steer: &Steering, secs: f64) -> Result<serde_json::Value, String> {
    let nic = Intel82599 { queues: 2 };
    let phases = timeline_phases();
    let all = flows();
    let hp: Vec<FlowSpec> = all.iter().filter(|f| f.hp).copied().collect();
    let be: Vec<FlowSpec> = all.iter().filter(|f| !f.hp).copied().collect();
    let policies: [(&str, Box<dyn CostFn>); 2] = [
        ("balance", Box::new(Balance)),
        ("isolation", Box::new(Isolation { k: 1 })),
    ];
    let mut out = serde_json::Map::new();
    println!();
    println!(
        "timeline (82599 model): BE clients join and leave while {HP_FLOWS} HP clients run; the planner adds and removes their flows incrementally and the configuration is applied live; {secs} s per phase"
    );
    println!("| policy | phase | BE clients | HP p50 µs | HP p99 µs | HP TPS | BE TPS | HP lost | re-plan ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, cost) in &policies {
        let first: Vec<FlowSpec> = hp
            .iter()
            .chain(phases[0].iter().map(|i| &be[*i as usize]))
            .copied()
            .collect();
        let mut p = full_search(&nic, cost.as_ref(), FlowMapMode::Incremental, &first, 100)
            .map_err(|e| e.to_string())?;
        // Planner flow id of each BE client that is in.
        let mut ids: std::collections::HashMap<u16, usize> = p
            .flows()
            .filter(|(_, f)| !f.hp)
            .map(|(id, f)| {
                (
                    (f.header.get(bessemer_planner::pred::Field::SrcPort) - 6000) as u16,
                    id,
                )
            })
            .collect();
        steer
            .apply(&tables(&nic, &p.cfg).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut replan_ms = vec![0f64; phases.len()];
        let rs = run_phases(bed, secs, &phases, &mut |ph| {
            let t = Instant::now();
            for c in &phases[ph - 1] {
                if !phases[ph].contains(c) {
                    let id = ids.remove(c).expect("client in");
                    p.remove_flow(id).map_err(|e| e.to_string())?;
                }
            }
            for c in &phases[ph] {
                if !ids.contains_key(c) {
                    let id = p.add_flow(be[*c as usize]).map_err(|e| e.to_string())?;
                    ids.insert(*c, id);
                }
            }
            let t2 = tables(&nic, &p.cfg).map_err(|e| e.to_string())?;
            replan_ms[ph] = t.elapsed().as_secs_f64() * 1e3;
            steer.apply(&t2).map_err(|e| e.to_string())
        })?;
        let mut rows = Vec::new();
        for (ph, r) in rs.iter().enumerate() {
            let (p50, p99) = (
                pct(&mut r.hp_rtts_us.clone(), 0.5),
                pct(&mut r.hp_rtts_us.clone(), 0.99),
            );
            println!(
                "| {name} | {ph} | {} | {p50:.0} | {p99:.0} | {:.0} | {:.0} | {} | {:.3} |",
                phases[ph].len(),
                r.hp_tps,
                r.be_tps,
                r.hp_lost,
                replan_ms[ph]
            );
            rows.push(serde_json::json!({
                "be_clients": phases[ph].len(),
                "hp_p50_us": (p50 * 10.0).round() / 10.0,
                "hp_p99_us": (p99 * 10.0).round() / 10.0,
                "hp_tps": r.hp_tps.round(),
                "be_tps": r.be_tps.round(),
                "hp_lost": r.hp_lost,
                "replan_ms": (replan_ms[ph] * 1000.0).round() / 1000.0,
            }));
        }
        out.insert(name.to_string(), serde_json::Value::Array(rows));
    }
    Ok(serde_json::Value::Object(out))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    pct(&mut v, 0.5)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = interrupt::install() {
        eprintln!("planner-isolation: {e}");
        return ExitCode::from(2);
    }
    let code = match experiment(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("planner-isolation: {e}");
            ExitCode::from(2)
        }
    };
    // Everything is cleaned up by now (the experiment's values have dropped).
    interrupt::exit_if_signalled();
    code
}

fn experiment(args: &Args) -> Result<(), String> {
    if let Some(why) = bessemer_planner::testbed::unavailable() {
        return Err(why);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (network namespaces, veth, BPF)".into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return Err(format!("needs 2 CPUs, this process may use {cpus}"));
    }
    let (reps, secs) = if args.quick { (2, 2.0) } else { (3, 3.0) };
    let reps = args.runs.unwrap_or(reps);
    let secs = args.seconds.unwrap_or(secs);
    let bed = bed()?;
    // The same policies on both models (the thesis's portability claim, measured).
    let models: [Box<dyn NicModel>; 2] = [
        Box::new(Intel82599 { queues: 2 }),
        Box::new(Sfc9020 { queues: 2 }),
    ];
    let fl = flows();
    let policies: [(&str, Box<dyn CostFn>); 2] = [
        ("balance", Box::new(Balance)),
        ("isolation", Box::new(Isolation { k: 1 })),
    ];
    let mut plans = Vec::new();
    for nic in &models {
        for (name, cost) in &policies {
            let p = full_search(
                nic.as_ref(),
                cost.as_ref(),
                FlowMapMode::Incremental,
                &fl,
                100,
            )
            .map_err(|e| e.to_string())?;
            let hp_q: Vec<String> = p
                .flows()
                .filter(|(_, f)| f.hp)
                .map(|(id, _)| format!("{:?}", p.qmap.flow_dest[id]))
                .collect();
            println!(
                "{} {name}: {:?}; HP flows on {}; per queue {:?} flows",
                nic.name(),
                p.verdict(),
                hp_q.join(", "),
                p.qmap.loads.iter().map(|l| l.flows).collect::<Vec<_>>()
            );
            plans.push((
                format!("{} {name}", nic.name()),
                tables(nic.as_ref(), &p.cfg).map_err(|e| e.to_string())?,
            ));
        }
    }
    // The queue decides the CPU, as with a queue per core on a NIC.
    let _cpus = QueueCpus::attach("is", &bed.srv, &QUEUE_CPU).map_err(|e| e.to_string())?;
    let steer = Steering::attach("ic", &bed.cli, false).map_err(|e| e.to_string())?;
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); plans.len()];
    for _ in 0..reps {
        // Alternate the policies, so a slow spell of the shared machine hits both.
        for (i, (_, t)) in plans.iter().enumerate() {
            steer.apply(t).map_err(|e| e.to_string())?;
            results[i].push(run(&bed, secs)?);
        }
    }
    let timeline = timeline(&bed, &steer, secs.min(2.0))?;
    steer.detach().map_err(|e| e.to_string())?;
    println!();
    println!(
        "isolation on the veth testbed: 82599 and SFC9020 models, 2 queues (Q0 -> CPU1, Q1 -> CPU0), {HP_FLOWS} HP clients on CPU1 (1 in flight), {BE_FLOWS} BE clients on CPU0 ({BE_WINDOW} in flight), {PAYLOAD}-byte UDP echo; median [min..max] of {reps} runs of {secs} s"
    );
    println!(
        "| model and policy | HP p50 µs | HP p99 µs | HP TPS | BE TPS | HP served on the HP CPU | HP lost |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for (i, (name, _)) in plans.iter().enumerate() {
        let rs = &results[i];
        let col = |f: &dyn Fn(&RunResult) -> f64| {
            let v: Vec<f64> = rs.iter().map(f).collect();
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
            (median(v), lo, hi)
        };
        let p50 = col(&|r| pct(&mut r.hp_rtts_us.clone(), 0.5));
        let p99 = col(&|r| pct(&mut r.hp_rtts_us.clone(), 0.99));
        let hp = col(&|r| r.hp_tps);
        let be = col(&|r| r.be_tps);
        let on = col(&|r| r.hp_on_hp_cpu * 100.0);
        let lost: u64 = rs.iter().map(|r| r.hp_lost).sum();
        println!(
            "| {name} | {:.0} [{:.0}..{:.0}] | {:.0} [{:.0}..{:.0}] | {:.0} [{:.0}..{:.0}] | {:.0} [{:.0}..{:.0}] | {:.0} % | {lost} |",
            p50.0, p50.1, p50.2, p99.0, p99.1, p99.2, hp.0, hp.1, hp.2, be.0, be.1, be.2, on.0
        );
        summary.push((p50.0, p99.0, hp.0, be.0));
    }
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut json = serde_json::json!({"bench": "planner-isolation"});
    for (m, pair) in summary.chunks(2).enumerate() {
        let (b, s) = (pair[0], pair[1]);
        let model = models[m].name();
        println!(
            "{model}: isolation vs balance: HP p50 latency x{:.2}, HP p99 x{:.2}, HP TPS x{:.2}, BE TPS x{:.2}",
            s.0 / b.0,
            s.1 / b.1,
            s.2 / b.2,
            s.3 / b.3
        );
        let figures = serde_json::json!({
            "isolation_hp_p50_us": {"balance": r3(b.0), "isolation": r3(s.0)},
            "isolation_hp_p99_us": {"balance": r3(b.1), "isolation": r3(s.1)},
            "isolation_hp_tps": {"balance": r3(b.2), "isolation": r3(s.2)},
            "isolation_be_tps": {"balance": r3(b.3), "isolation": r3(s.3)},
            "isolation_hp_p50_ratio": r3(s.0 / b.0),
            "isolation_hp_tps_ratio": r3(s.2 / b.2),
        });
        if m == 0 {
            // The 82599's figures keep the top-level keys of earlier runs.
            for (k, v) in figures.as_object().expect("object") {
                json[k] = v.clone();
            }
        } else {
            json[format!("isolation_{}", model.to_lowercase())] = figures;
        }
    }
    json["isolation_timeline"] = timeline;
    println!("{json}");
    Ok(())
}

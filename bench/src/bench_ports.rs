//! `make bench-ports` (one switch per call; `bench/ports.sh` builds the topology, starts the
//! external switches and calls this per switch): how many UDP frames per second a switch
//! forwards between two veth pairs, at what CPU, and with what round-trip latency.
//!
//! `bench-ports <mode> <gen_ns> <g0> <g1> <s1> <sink_ns> <s0> <seconds> [<switch_pid>]`
//!
//! Topology: `g0` (in `gen_ns`) —veth— `g1` [switch] `s1` —veth— `s0` (in `sink_ns`).
//!
//! * Generator: a two-instruction XDP program (`return XDP_TX`) run with
//!   `BPF_PROG_TEST_RUN` and `BPF_F_TEST_XDP_LIVE_FRAMES` as if received on `g0`, so every
//!   run of it transmits the frame out of `g0` towards the switch: no skb, no socket, no
//!   copy per frame. It runs on a thread pinned to core 0 inside `gen_ns`, one call per flow
//!   (8 flows: UDP source ports 1024..1031) of 65536 frames each, until the run ends.
//!   Where the kernel refuses live frames (found by one trial call; EPERM on some kernels,
//!   EINVAL before 5.18), the second generator sends the same frames instead: an AF_PACKET
//!   socket with a TPACKET_V2 TX ring and `PACKET_QDISC_BYPASS` (packet_gen.rs), on the same
//!   core, the reason printed once. `BENCH_GEN` (`xdp-live`, `afpacket`; default `auto`)
//!   picks one; the JSON line names the one used.
//! * Mode `generator`: no switch; `g0` and `s0` are the ends of a veth pair straight between
//!   the namespaces (`g1`, `s1` unused): the generator's own maximum rate into the sink.
//! * Sink: an XDP program on `s0` counts each frame in a per-CPU array and drops it.
//! * Switch, by `mode`: `afxdp` / `afpacket` — Bessemer with two AFXDPPorts / AFPacketPorts
//!   on `g1` and `s1`, PortInc -> PortOut both ways, one worker pinned to core 1; `em-user`
//!   / `em-offload` — Bessemer's classifying pipeline (ExactMatch on 1000 5-tuples, MACSwap,
//!   PortOut) in user space, or with the planner's XDP offload on (make bench-planner); `xdp` —
//!   the in-kernel upper bound: `bpf_redirect` programs on `g1` and `s1` sending each frame
//!   to the other; `bridge`, `ovs-afxdp`, `ovs-netdev` — set up by the caller (`switch_pid`:
//!   the process whose CPU time counts as the switch's).
//!   A veth only accepts XDP frames (the generator's) while its receive side has NAPI on,
//!   i.e. an XDP program attached; where the switch attaches none to `g1`, an `XDP_PASS`
//!   program is attached so the frames reach the stack as usual.
//! * Per frame size (60 and 1514 bytes, i.e. 64- and 1518-byte frames on a wire):
//!   `BENCH_REPS` (default 3) runs of 1 s warm-up and `seconds` measured; the median run
//!   (by the sink's rate) is reported, with the lowest and highest rate. Rates at the sink; CPU of the switch = all busy time
//!   of core 1 (where only the switch runs) plus the softirq time of core 0 (the switch
//!   side's veth receive runs in softirq on the sending core, the generator's). The sink's
//!   receive work runs in softirq on the core that sends to it (the switch's, or core 0 for
//!   the kernel switches) and is counted with it. A run during which any other process
//!   used more than 5 % of a core is discarded and repeated (at most twice more).
//! * Latency: 200 ICMP echo requests, one every 10 ms, from `gen_ns` to `sink_ns` through the
//!   switch (counter replaced by `XDP_PASS`), sent by a pinger pinned to core 0 that spins on
//!   its socket in between, so the measuring core never sleeps (a halted vCPU's wake-up
//!   would dominate); median and p99 round trip in microseconds.
//!
//! Prints one JSON line.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bessemer_core::engine::{Engine, EngineConfig};
use bessemer_core::mem::PagePolicy;
use bessemer_core::port::{PortDriver, PortParams};
use bessemer_core::{checksum, Error, Result, Value};
use bessemer_drivers::bpf::{self, XdpLink};
use bessemer_drivers::netns;

#[path = "netslice_fwd.rs"]
mod netslice_fwd;
mod packet_gen;
use netslice_fwd::{Api, Forwarder};

/// Frame lengths without FCS (64 and 1518 bytes on a wire).
const FRAMES: [usize; 2] = [60, 1514];
/// UDP source ports 1024.. : the fixed set of flows.
const FLOWS: u16 = 8;
/// Frames per BPF_PROG_TEST_RUN call.
const REPEAT: u32 = 1 << 18;
/// Frames per live-frames batch (the kernel's most).
const BATCH: u32 = 256;
/// Destination MAC of the generated frames (the bridge has a static entry for it).
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const GEN_CORE: usize = 0;
/// The switch's core unless the mode says otherwise (`<mode>@0`: the generator's core).
const SWITCH_CORE: usize = 1;
/// Longest a standalone forwarder runs (the whole call takes far less).
const FWD_LIMIT: Duration = Duration::from_secs(600);
/// A run is discarded when other processes used more than this share of one core.
const OTHER_LOAD_MAX: f64 = 0.05;
const PINGS: usize = 200;

fn frame(len: usize, sport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum = checksum::ipv4_header(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let udp_len = ip_len - 20;
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&5678u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0);
    f
}

fn err(what: impl std::fmt::Display) -> Error {
    Error::new(libc::EIO, what.to_string())
}

fn pin_self(core: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(netns::os_error("sched_setaffinity"));
        }
    }
    Ok(())
}

fn enter_netns(ns: &str) -> Result<()> {
    let f = std::fs::File::open(netns::path_of(ns)).map_err(|e| err(format!("{ns}: {e}")))?;
    // SAFETY: a valid namespace fd; affects the calling thread only.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(netns::os_error("setns"));
    }
    Ok(())
}

fn gettid() -> i32 {
    // SAFETY: plain syscall.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Which traffic generator sends the frames (`BENCH_GEN`; see [`choose_generator`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GenKind {
    /// The live-frames XDP program (`BPF_PROG_TEST_RUN`): the first choice.
    XdpLive,
    /// An AF_PACKET TX ring with `PACKET_QDISC_BYPASS` (packet_gen.rs): where the kernel
    /// refuses live frames.
    AfPacket,
}

impl GenKind {
    /// Its name in the JSON line and in `BENCH_GEN`.
    fn name(self) -> &'static str {
        match self {
            GenKind::XdpLive => "xdp-live",
            GenKind::AfPacket => "afpacket",
        }
    }
}

/// The generator to use: `BENCH_GEN` (`xdp-live` or `afpacket`) when set, otherwise
/// (`auto`, the default) the live-frames XDP generator if the kernel accepts one trial call
/// on `ifname` in `ns`, and the AF_PACKET one if not. The second value is why the first
/// choice was refused (printed once here; bench/ports.sh passes the choice on in
/// `BENCH_GEN`, so the other calls do not try again).
fn choose_generator(ns: &str, ifname: &str) -> Result<(GenKind, Option<String>)> {
    match std::env::var("BENCH_GEN").as_deref() {
        Ok("xdp-live") => return Ok((GenKind::XdpLive, None)),
        Ok("afpacket") => return Ok((GenKind::AfPacket, None)),
        Ok("auto") | Err(_) => {}
        Ok(other) => {
            return Err(err(format!(
                "BENCH_GEN={other}: not a generator (xdp-live, afpacket or auto)"
            )))
        }
    }
    let trial = netns::run_in(ns, || {
        let prog = bpf::load_xdp(&bpf::prog_tx_flows(u32::from(FLOWS)), "bench_gen")
            .map_err(|e| format!("cannot load the live-frames program: {}", e.msg))
            .map_err(err)?;
        let idx = netns::ifindex(ifname)?;
        bpf::xdp_live_frames(prog.as_raw_fd(), &frame(FRAMES[0], 1024), idx, 1, 1).map_err(|e| {
            err(format!(
                "the kernel refuses BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: {}",
                std::io::Error::from_raw_os_error(e.code)
            ))
        })
    });
    match trial {
        Ok(()) => Ok((GenKind::XdpLive, None)),
        Err(e) => {
            eprintln!(
                "bench-ports: generator: AF_PACKET TX ring with qdisc bypass on core 0, \
                 because {}",
                e.msg
            );
            Ok((GenKind::AfPacket, Some(e.msg)))
        }
    }
}

/// The generator: a thread pinned to core 0 in `ns`, sending `len`-byte frames of the 8
/// flows out of `ifname` until stopped.
struct Generator {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    tid: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Generator {
    fn start(kind: GenKind, ns: &str, ifname: &str, len: usize) -> Result<Generator> {
        let prog = match kind {
            GenKind::XdpLive => Some(bpf::load_xdp(
                &bpf::prog_tx_flows(u32::from(FLOWS)),
                "bench_gen",
            )?),
            GenKind::AfPacket => None,
        };
        let (stop, sent, tid) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (st, se, ti, ns, ifname) = (
            stop.clone(),
            sent.clone(),
            tid.clone(),
            ns.to_string(),
            ifname.to_string(),
        );
        let thread = std::thread::Builder::new()
            .name("bench-gen".into())
            .spawn(move || -> Result<()> {
                ti.store(gettid() as u64, Ordering::Relaxed);
                enter_netns(&ns)?;
                pin_self(GEN_CORE)?;
                let Some(prog) = prog else {
                    // The same frames as the live-frames program makes: source ports
                    // 1024..1024+FLOWS, one after the other.
                    let frames: Vec<Vec<u8>> = (0..FLOWS).map(|i| frame(len, 1024 + i)).collect();
                    let mut ring = packet_gen::TxRing::open(&ifname, &frames).map_err(err)?;
                    while !st.load(Ordering::Relaxed) {
                        let n = ring.send_burst().map_err(err)?;
                        se.fetch_add(n, Ordering::Relaxed);
                    }
                    return Ok(());
                };
                let idx = netns::ifindex(&ifname)?;
                // Park the program on a spare veth of the namespace (native mode), so that
                // it stays in the XDP dispatcher and no call waits for an RCU grace period.
                let parked = park(&ns, &prog);
                if parked.is_none() {
                    eprintln!("bench-ports: cannot park the generator program; slower generator");
                }
                let f = frame(len, 1024);
                while !st.load(Ordering::Relaxed) {
                    bpf::xdp_live_frames(prog.as_raw_fd(), &f, idx, REPEAT, BATCH)?;
                    se.fetch_add(u64::from(REPEAT), Ordering::Relaxed);
                }
                Ok(())
            })
            .map_err(err)?;
        Ok(Generator {
            stop,
            sent,
            tid,
            thread: Some(thread),
        })
    }

    fn finish(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("thread")
            .join()
            .unwrap_or_else(|_| Err(err("generator panicked")))
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Attaches `prog` to a new, otherwise unused veth pair (`gpark0`/`gpark1`) of namespace
/// `ns` (the calling thread's); removed when the guard drops. None if that fails (then every
/// generator call pays two RCU grace periods; the counts stay right).
struct Parked(Option<XdpLink>, String);

impl Drop for Parked {
    fn drop(&mut self) {
        self.0.take();
        let _ = Command::new("ip")
            .args(["-n", &self.1, "link", "del", "gpark0"])
            .status();
    }
}

fn park(ns: &str, prog: &OwnedFd) -> Option<Parked> {
    let ok = Command::new("ip")
        .args([
            "-n", ns, "link", "add", "gpark0", "type", "veth", "peer", "name", "gpark1",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return None;
    }
    let mut p = Parked(None, ns.to_string());
    let idx = netns::ifindex("gpark0").ok()?;
    let link = XdpLink::attach(prog.try_clone().ok()?, idx, "park").ok()?;
    p.0 = Some(link);
    Some(p)
}

/// What counts at the sink: the XDP counter on the sink interface, or (`BENCH_SINK=stats`,
/// a diagnostic) no program and the interface's `rx_packets`, which spares the switch's
/// core the copy veth makes to hand an skb to XDP (frames arriving as XDP frames, as the
/// `xdp` switch sends them, need a program there, so that mode ignores it).
enum Counter {
    Xdp { map: OwnedFd, _link: XdpLink },
    Stats { ns: String, ifname: String },
}

impl Counter {
    fn attach(ns: &str, ifname: &str, stats: bool) -> Result<Counter> {
        if stats {
            return Ok(Counter::Stats {
                ns: ns.to_string(),
                ifname: ifname.to_string(),
            });
        }
        netns::run_in(ns, || {
            let idx = netns::ifindex(ifname)?;
            let map = bpf::map_create(
                bpf::BPF_MAP_TYPE_PERCPU_ARRAY,
                4,
                8,
                1,
                "cannot create the counter map",
            )?;
            let prog = bpf::load_xdp(&bpf::prog_count_drop(map.as_raw_fd()), "bench_sink")?;
            let link = XdpLink::attach(prog, idx, "cannot attach the sink counter")?;
            Ok(Counter::Xdp { map, _link: link })
        })
    }

    fn count(&self) -> u64 {
        match self {
            Counter::Xdp { map, .. } => bpf::percpu_u64_sum(map.as_raw_fd(), 0).unwrap_or(0),
            Counter::Stats { ns, ifname } => ns_stat(ns, ifname, "rx_packets"),
        }
    }
}

fn attach_in(ns: &str, ifname: &str, prog: &[bpf::Insn], name: &str) -> Result<XdpLink> {
    netns::run_in(ns, || {
        let idx = netns::ifindex(ifname)?;
        let p = bpf::load_xdp(prog, name)?;
        XdpLink::attach(p, idx, &format!("cannot attach {name} to {ifname}"))
    })
}

fn ns_stat(ns: &str, ifname: &str, what: &str) -> u64 {
    Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{ifname}/statistics/{what}"))
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Per-CPU (busy, softirq, total) jiffies from /proc/stat.
fn cpu_times() -> HashMap<usize, (u64, u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cpu")?;
            let mut it = rest.split_whitespace();
            let cpu: usize = it.next()?.parse().ok()?;
            let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal
            let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v.get(7).copied().unwrap_or(0);
            let total = busy + v[3] + v[4];
            Some((cpu, (busy, v[6], total)))
        })
        .collect()
}

/// utime + stime (jiffies) of a process's threads, selected by `keep(tid, comm)`.
fn thread_time(pid: u32, keep: impl Fn(i32, &str) -> bool) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let tid: i32 = e.file_name().to_str()?.parse().ok()?;
        let s = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let (comm, rest) = stat_fields(&s)?;
        if !keep(tid, comm) {
            return None;
        }
        Some(rest[11].parse::<u64>().ok()? + rest[12].parse::<u64>().ok()?)
    })
    .sum()
}

/// (comm, fields after comm) of a /proc stat line.
fn stat_fields(s: &str) -> Option<(&str, Vec<&str>)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    Some((
        &s[open + 1..close],
        s[close + 1..].split_whitespace().collect(),
    ))
}

/// utime + stime of every process except ours, the switch's and the kernel's softirq and
/// NAPI threads (whose work is the benchmark's): other load on the machine.
fn other_time(switch_pid: u32) -> u64 {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        if pid == me || pid == switch_pid {
            return None;
        }
        let s = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let (comm, rest) = stat_fields(&s)?;
        if comm.starts_with("ksoftirqd") || comm.starts_with("napi/") {
            return None;
        }
        Some(rest[11].parse::<u64>().ok()? + rest[12].parse::<u64>().ok()?)
    })
    .sum()
}

fn clk_tck() -> f64 {
    // SAFETY: plain libc call.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// The switch as set up by this process (the caller sets up bridge and OVS).
enum Switch {
    None,
    Bessemer(Box<Engine>),
    Xdp(Vec<XdpLink>),
    /// A standalone forwarder of NetSlice's comparison (pcap, pcap-mmap, mmsg).
    Fwd(Forwarder),
}

fn port(e: &Engine, driver: &'static PortDriver, name: &str, ifname: &str) -> Result<()> {
    let mut arg = Value::map().with("ifname", ifname);
    if driver.name == "AFXDPPort" {
        arg = arg.with("ring_size", 2048u64);
    }
    let p = e.ports().create(
        driver,
        PortParams {
            name: name.into(),
            num_inc_q: 0,
            num_out_q: 0,
            size_inc_q: 0,
            size_out_q: 0,
            pool: e.pool().clone(),
        },
        &arg,
    )?;
    eprintln!("bench-ports: port {name}: {}", p.port().desc());
    Ok(())
}

/// `BENCH_IDLE_SLEEP_US`: the Bessemer switch's idle naps (`--idle-sleep-max-us`; 0, the
/// default, polls always).
fn idle_sleep_us() -> Result<u32> {
    match std::env::var("BENCH_IDLE_SLEEP_US") {
        Ok(v) => v
            .parse()
            .map_err(|_| err(format!("BENCH_IDLE_SLEEP_US={v}: not a number of µs"))),
        Err(_) => Ok(0),
    }
}

fn module(e: &mut Engine, class: &str, name: &str, arg: Value) -> Result<()> {
    let c = bessemer_modules::find(class).expect("module class");
    e.create_module(c, Some(name), &arg).map(|_| ())
}

/// Bessemer between `a` and `b`: PortInc -> PortOut both ways on one worker on `core`, each
/// PortInc receiving at most `burst` packets per poll (its `set_burst` command; None: the
/// batch capacity).
fn bessemer(
    driver: &'static PortDriver,
    a: &str,
    b: &str,
    core: usize,
    burst: Option<usize>,
) -> Result<Engine> {
    let mut e = Engine::new(EngineConfig {
        buffers: 32768,
        pages: PagePolicy::Auto,
        pin: true,
    })?;
    e.set_idle_sleep_max_us(idle_sleep_us()?)?;
    e.add_worker(0, core)?;
    port(&e, driver, "pa", a)?;
    port(&e, driver, "pb", b)?;
    for (from, to) in [("pa", "pb"), ("pb", "pa")] {
        let (inc, out) = (format!("inc_{from}"), format!("out_{to}"));
        module(&mut e, "PortInc", &inc, Value::map().with("port", from))?;
        if let Some(n) = burst {
            e.command(&inc, "set_burst", &Value::map().with("burst", n as u64))?;
        }
        module(&mut e, "PortOut", &out, Value::map().with("port", to))?;
        e.connect(&inc, 0, &out, 0)?;
        e.attach_task(&inc, 0, None, Some(0))?;
    }
    e.resume_all()?;
    Ok(e)
}

/// Flows the classifying pipeline's ExactMatch holds (the generator's 8 among them).
const EM_FLOWS: u16 = 1000;

/// `em-user` / `em-offload` (make bench-planner): the classifying pipeline of issue 16's
/// offload benchmark on AFXDPPorts: PortInc(pa) -> ExactMatch on the UDP/IPv4 5-tuple with
/// 1000 flows -> gate 0: MACSwap -> PortOut(pb); misses (gate 1: ARP, pings) -> PortOut(pb);
/// PortInc(pb) -> PortOut(pa). With `offload`, the planner's XDP offload is turned on for pa
/// (bessemer_daemon::offload, as the `offload` command does): the 5-tuple lookup, the MAC
/// swap and the forwarding run in the XDP program on `a`, XDP_REDIRECT to `b`.
fn bessemer_em(a: &str, b: &str, core: usize, offload: bool) -> Result<Engine> {
    let mut e = Engine::new(EngineConfig {
        buffers: 32768,
        pages: PagePolicy::Auto,
        pin: true,
    })?;
    e.set_idle_sleep_max_us(idle_sleep_us()?)?;
    e.add_worker(0, core)?;
    let driver = &bessemer_drivers::af_xdp_port::DRIVER;
    port(&e, driver, "pa", a)?;
    port(&e, driver, "pb", b)?;
    let field = |o: i64, n: i64| Value::map().with("offset", o).with("num_bytes", n);
    let fields = Value::List(vec![
        field(23, 1),
        field(26, 4),
        field(30, 4),
        field(34, 2),
        field(36, 2),
    ]);
    module(&mut e, "PortInc", "inc_pa", Value::map().with("port", "pa"))?;
    module(
        &mut e,
        "ExactMatch",
        "em",
        Value::map().with("fields", fields),
    )?;
    module(&mut e, "MACSwap", "swap", Value::map())?;
    module(&mut e, "PortOut", "out_pb", Value::map().with("port", "pb"))?;
    module(&mut e, "PortInc", "inc_pb", Value::map().with("port", "pb"))?;
    module(&mut e, "PortOut", "out_pa", Value::map().with("port", "pa"))?;
    e.connect("inc_pa", 0, "em", 0)?;
    e.connect("em", 0, "swap", 0)?;
    e.connect("swap", 0, "out_pb", 0)?;
    e.connect("em", 1, "out_pb", 0)?;
    e.connect("inc_pb", 0, "out_pa", 0)?;
    e.command("em", "set_default_gate", &Value::map().with("gate", 1u64))?;
    let bin = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
    for i in 0..EM_FLOWS {
        // The generator's flows are sports 1024..1024+FLOWS; the rest never match.
        let sport = 1024 + i;
        let rule = Value::map().with("gate", 0u64).with(
            "fields",
            Value::List(vec![
                bin(&[17]),
                bin(&[10, 99, 0, 1]),
                bin(&[10, 99, 0, 2]),
                bin(&sport.to_be_bytes()),
                bin(&5678u16.to_be_bytes()),
            ]),
        );
        e.command("em", "add", &rule)?;
    }
    for inc in ["inc_pa", "inc_pb"] {
        e.attach_task(inc, 0, None, Some(0))?;
    }
    if offload {
        let (_, plan) = bessemer_daemon::offload::command(&mut e, "pa", "on")?;
        eprintln!("bench-ports: {plan}");
    }
    e.resume_all()?;
    Ok(e)
}

struct Topo<'a> {
    gen_ns: &'a str,
    g0: &'a str,
    sink_ns: &'a str,
    s0: &'a str,
    switch_pid: u32,
    sink_stats: bool,
    gen: GenKind,
}

/// One measured run at `len`-byte frames: a JSON object.
/// `reps` measured runs at `len`-byte frames: the median one (by the sink's rate), with the
/// lowest and highest sink rate added.
fn measure_reps(t: &Topo, len: usize, secs: f64, reps: usize) -> Result<String> {
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        runs.push(measure(t, len, secs)?);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (lo, hi) = (runs[0].0, runs[runs.len() - 1].0);
    let mid = &runs[runs.len() / 2].1;
    Ok(format!(
        "{},\"reps\":{},\"sink_mpps_min\":{lo:.4},\"sink_mpps_max\":{hi:.4}}}",
        mid.trim_end_matches('}'),
        runs.len()
    ))
}

/// One measured run at `len`-byte frames: the sink's rate and a JSON object.
fn measure(t: &Topo, len: usize, secs: f64) -> Result<(f64, String)> {
    let counter = Counter::attach(t.sink_ns, t.s0, t.sink_stats)?;
    let tck = clk_tck();
    let mut tries = 0;
    loop {
        tries += 1;
        let gen = Generator::start(t.gen, t.gen_ns, t.g0, len)?;
        std::thread::sleep(Duration::from_secs(1));
        let gen_tid = gen.tid.load(Ordering::Relaxed) as i32;
        let me = std::process::id();
        let switch_threads = || {
            let own = thread_time(me, |_, comm| {
                comm.starts_with("bessemer-w") || comm == "bench-fwd"
            });
            let ext = if t.switch_pid != 0 {
                thread_time(t.switch_pid, |tid, _| tid != gen_tid)
            } else {
                0
            };
            own + ext
        };
        let snap = || {
            (
                Instant::now(),
                counter.count(),
                gen.sent.load(Ordering::Relaxed),
                ns_stat(t.gen_ns, t.g0, "tx_packets"),
                cpu_times(),
                switch_threads(),
                other_time(t.switch_pid),
            )
        };
        let a = snap();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let b = snap();
        gen.finish()?;
        let dt = (b.0 - a.0).as_secs_f64();
        let mpps = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt / 1e6;
        let share = |j: u64| j as f64 / tck / dt;
        let core = |c: usize, f: fn(&(u64, u64, u64)) -> u64| {
            let (x, y) = (a.4.get(&c), b.4.get(&c));
            match (x, y) {
                (Some(x), Some(y)) => (f(y) - f(x)) as f64 / (y.2 - x.2).max(1) as f64,
                _ => 0.0,
            }
        };
        let busy = |v: &(u64, u64, u64)| v.0;
        let soft = |v: &(u64, u64, u64)| v.1;
        let softirq = core(GEN_CORE, soft) + core(SWITCH_CORE, soft);
        // Everything on the switch's core, plus the softirq work on the generator's core
        // (the switch side's veth receive runs there).
        let cpu = core(SWITCH_CORE, busy) + core(GEN_CORE, soft);
        let threads = share(b.5 - a.5);
        let other = share(b.6.saturating_sub(a.6));
        let disturbed = other > OTHER_LOAD_MAX;
        if disturbed && tries < 3 {
            eprintln!(
                "bench-ports: run at {len} bytes disturbed (other processes used {:.0} % of a core); repeating",
                other * 100.0
            );
            continue;
        }
        let sink = mpps(a.1, b.1);
        return Ok((sink, format!(
            "{{\"frame_bytes\":{},\"seconds\":{dt:.2},\"offered_mpps\":{:.4},\"into_switch_mpps\":{:.4},\"sink_mpps\":{sink:.4},\"sink_gbps\":{:.3},\"cpu_switch_pct\":{:.1},\"switch_threads_pct\":{:.1},\"softirq_pct\":{:.1},\"core0_busy_pct\":{:.1},\"core1_busy_pct\":{:.1},\"other_load_pct\":{:.1},\"tries\":{tries},\"disturbed\":{disturbed}}}",
            len + 4,
            mpps(a.2, b.2),
            mpps(a.3, b.3),
            sink * (len + 4) as f64 * 8.0 / 1e3,
            cpu * 100.0,
            threads * 100.0,
            softirq * 100.0,
            core(GEN_CORE, busy) * 100.0,
            core(SWITCH_CORE, busy) * 100.0,
            other * 100.0,
        )));
    }
}

/// Round trips (µs) of `PINGS` pings from the generator to the sink namespace.
fn latency(t: &Topo, dst: &str) -> Result<(f64, f64, usize)> {
    // Both end interfaces get XDP_PASS: they then take XDP frames (the xdp switch's) too.
    let _a = attach_in(
        t.sink_ns,
        t.s0,
        &bpf::prog_verdict(bpf::XDP_PASS),
        "bench_pass",
    )?;
    let _b = attach_in(
        t.gen_ns,
        t.g0,
        &bpf::prog_verdict(bpf::XDP_PASS),
        "bench_pass",
    )?;
    let dst_ip: std::net::Ipv4Addr = dst.parse().map_err(|e| err(format!("{dst}: {e}")))?;
    let gen_ns = t.gen_ns.to_string();
    // On a thread of its own: it enters the generator's namespace and pins itself.
    let mut rtt = std::thread::spawn(move || busy_ping(&gen_ns, dst_ip, PINGS))
        .join()
        .map_err(|_| err("the pinger panicked"))??;
    if rtt.is_empty() {
        return Err(err("no ping replies through the switch"));
    }
    rtt.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| rtt[((rtt.len() as f64 * p).ceil() as usize).clamp(1, rtt.len()) - 1];
    Ok((q(0.5), q(0.99), rtt.len()))
}

/// Sends `n` ICMP echo requests to `dst` from namespace `ns`, one every 10 ms, on core 0,
/// spinning on a non-blocking socket in between, so the measuring core never sleeps (on a
/// VM, waking a halted vCPU takes tens of microseconds, more than the switch adds). Returns
/// the round trips in microseconds (lost requests are left out after 1 s).
fn busy_ping(ns: &str, dst: std::net::Ipv4Addr, n: usize) -> Result<Vec<f64>> {
    enter_netns(ns)?;
    pin_self(GEN_CORE)?;
    // SAFETY: plain socket call; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    };
    if fd < 0 {
        return Err(netns::os_error("raw ICMP socket"));
    }
    // SAFETY: a fresh fd we own.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: sockaddr_in is plain data.
    let mut to: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    to.sin_family = libc::AF_INET as u16;
    to.sin_addr.s_addr = u32::from(dst).to_be();
    let id = (std::process::id() & 0xffff) as u16;
    let mut rtts = Vec::with_capacity(n);
    let mut buf = [0u8; 2048];
    // Three unmeasured rounds first (ARP, caches).
    for seq in 0..(n + 3) as u16 {
        let mut req = vec![8u8, 0, 0, 0];
        req.extend_from_slice(&id.to_be_bytes());
        req.extend_from_slice(&seq.to_be_bytes());
        req.extend_from_slice(&[0x5a; 56]);
        let c = checksum::checksum(&req);
        req[2..4].copy_from_slice(&c.to_be_bytes());
        let start = Instant::now();
        // SAFETY: sends our buffer to a valid sockaddr_in.
        let sent = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
                &to as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if sent < 0 {
            return Err(netns::os_error("sending an ICMP echo request"));
        }
        let mut got = None;
        while got.is_none() && start.elapsed() < Duration::from_secs(1) {
            // SAFETY: receives into our buffer.
            let r = unsafe {
                libc::recv(
                    sock.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 28 {
                std::hint::spin_loop();
                continue;
            }
            let ihl = ((buf[0] & 0xf) as usize) * 4;
            let icmp = &buf[ihl.min(r as usize)..r as usize];
            if icmp.len() >= 8
                && icmp[0] == 0
                && icmp[4..6] == id.to_be_bytes()
                && icmp[6..8] == seq.to_be_bytes()
            {
                got = Some(start.elapsed());
            }
        }
        if let Some(d) = got {
            if seq >= 3 {
                rtts.push(d.as_secs_f64() * 1e6);
            }
        }
        while start.elapsed() < Duration::from_millis(10) {
            std::hint::spin_loop();
        }
    }
    Ok(rtts)
}

/// A mode argument: `<base>[:<batch>][@<core>]` (`mmsg:32@0`: recvmmsg/sendmmsg batches of
/// 32 on the generator's core).
struct ModeSpec<'a> {
    base: &'a str,
    batch: Option<usize>,
    core: usize,
}

impl<'a> ModeSpec<'a> {
    fn parse(mode: &'a str) -> Result<ModeSpec<'a>> {
        let (rest, core) = match mode.split_once('@') {
            Some((r, c)) => (
                r,
                c.parse::<usize>()
                    .ok()
                    .filter(|&c| c == GEN_CORE || c == SWITCH_CORE)
                    .ok_or_else(|| err(format!("mode '{mode}': core must be 0 or 1")))?,
            ),
            None => (mode, SWITCH_CORE),
        };
        let (base, batch) = match rest.split_once(':') {
            Some((b, n)) => (
                b,
                Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1024).contains(n))
                        .ok_or_else(|| err(format!("mode '{mode}': batch must be 1..=1024")))?,
                ),
            ),
            None => (rest, None),
        };
        if batch.is_some() && base != "mmsg" && base != "afxdp" {
            return Err(err(format!(
                "mode '{mode}': only mmsg and afxdp take a batch size"
            )));
        }
        if base == "afxdp" && batch.is_some_and(|b| b > bessemer_core::MAX_BURST) {
            return Err(err(format!(
                "mode '{mode}': afxdp's burst is at most the batch capacity, {}",
                bessemer_core::MAX_BURST
            )));
        }
        Ok(ModeSpec { base, batch, core })
    }
}

/// Frame lengths to measure: `BENCH_FRAME_BYTES` (wire sizes, e.g. "64" or "64,1518"), or
/// both of FRAMES.
fn frames() -> Result<Vec<usize>> {
    let Ok(v) = std::env::var("BENCH_FRAME_BYTES") else {
        return Ok(FRAMES.to_vec());
    };
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (64..=1518).contains(n))
                .map(|n| n - 4)
                .ok_or_else(|| {
                    err(format!(
                        "BENCH_FRAME_BYTES: '{x}' is not a size in 64..=1518"
                    ))
                })
        })
        .collect()
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn run(args: &[String]) -> Result<String> {
    let (mode, gen_ns, g0, g1, s1, sink_ns, s0, secs, pid) = match args {
        [m, gn, g0, g1, s1, sn, s0, secs, rest @ ..] if rest.len() <= 1 => (
            m.as_str(),
            gn.as_str(),
            g0.as_str(),
            g1.as_str(),
            s1.as_str(),
            sn.as_str(),
            s0.as_str(),
            secs.parse::<f64>().map_err(err)?,
            rest.first()
                .map_or(Ok(0), |p| p.parse::<u32>())
                .map_err(err)?,
        ),
        _ => {
            eprintln!(
                "usage: bench-ports <afxdp[:B]|em-user|em-offload|afpacket|xdp|bridge|kernel|ovs-afxdp|ovs-netdev|pcap|pcap-mmap|mmsg:B|direct|generator>[@CORE] <gen_ns> <g0> <g1> <s1> <sink_ns> <s0> <seconds> [switch_pid]"
            );
            std::process::exit(2);
        }
    };
    let spec = ModeSpec::parse(mode)?;
    if spec.base == "direct" {
        // Round trips over a veth pair straight between the namespaces (the caller made it,
        // 10.98.0.1 -> 10.98.0.2): the baseline the forwarders' added latency is taken from.
        let t = Topo {
            gen_ns,
            g0,
            sink_ns,
            s0,
            switch_pid: pid,
            sink_stats: false,
            // Not used: no frames are generated.
            gen: GenKind::XdpLive,
        };
        let (p50, p99, n) = latency(&t, "10.98.0.2")?;
        return Ok(format!(
            "{{\"mode\":\"{mode}\",\"runs\":[],\"rtt_p50_us\":{p50:.1},\"rtt_p99_us\":{p99:.1},\"pings\":{n}}}"
        ));
    }
    let (gen, gen_reason) = choose_generator(gen_ns, g0)?;
    let reps = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    if spec.base == "generator" {
        // The generator alone, into the sink over a veth pair straight between the
        // namespaces (the caller made it; `g0` and `s0` are its ends): its own maximum rate,
        // against which each switch's figure shows whether the generator or the switch
        // bounds it.
        let t = Topo {
            gen_ns,
            g0,
            sink_ns,
            s0,
            switch_pid: 0,
            sink_stats: false,
            gen,
        };
        let mut runs = Vec::new();
        for len in frames()? {
            runs.push(measure_reps(&t, len, secs, reps)?);
        }
        return Ok(format!(
            "{{\"mode\":\"generator\",\"generator\":\"{}\",\"generator_reason\":{},\"sink\":\"xdp\",\"runs\":[{}],\"pings\":0}}",
            gen.name(),
            gen_reason.map_or("null".to_string(), |r| json_string(&r)),
            runs.join(",")
        ));
    }
    let mut pass_g1 = None;
    let core = spec.core;
    let switch = match spec.base {
        "afxdp" => Switch::Bessemer(Box::new(bessemer(
            &bessemer_drivers::af_xdp_port::DRIVER,
            g1,
            s1,
            core,
            spec.batch,
        )?)),
        "afpacket" | "bridge" | "kernel" | "ovs-netdev" | "pcap" | "pcap-mmap" | "mmsg" => {
            pass_g1 = Some(attach_in(
                "",
                g1,
                &bpf::prog_verdict(bpf::XDP_PASS),
                "bench_pass",
            )?);
            let api = match spec.base {
                "pcap" => Some(Api::Pcap),
                "pcap-mmap" => Some(Api::PcapMmap),
                "mmsg" => Some(Api::Mmsg(spec.batch.unwrap_or(32))),
                _ => None,
            };
            if spec.base == "afpacket" {
                Switch::Bessemer(Box::new(bessemer(
                    &bessemer_drivers::af_packet_port::DRIVER,
                    g1,
                    s1,
                    core,
                    None,
                )?))
            } else if let Some(api) = api {
                Switch::Fwd(Forwarder::start(api, g1, s1, core, FWD_LIMIT).map_err(err)?)
            } else {
                Switch::None
            }
        }
        "xdp" => {
            let (i1, i2) = (netns::ifindex(g1)?, netns::ifindex(s1)?);
            Switch::Xdp(vec![
                attach_in("", g1, &bpf::prog_redirect(i2), "bench_redir")?,
                attach_in("", s1, &bpf::prog_redirect(i1), "bench_redir")?,
            ])
        }
        "em-user" | "em-offload" => Switch::Bessemer(Box::new(bessemer_em(
            g1,
            s1,
            core,
            spec.base == "em-offload",
        )?)),
        "ovs-afxdp" => Switch::None,
        other => return Err(err(format!("unknown mode '{other}'"))),
    };
    std::thread::sleep(Duration::from_millis(500));
    let t = Topo {
        gen_ns,
        g0,
        sink_ns,
        s0,
        switch_pid: pid,
        sink_stats: mode != "xdp" && std::env::var("BENCH_SINK").is_ok_and(|v| v == "stats"),
        gen,
    };
    let mut runs = Vec::new();
    for len in frames()? {
        runs.push(measure_reps(&t, len, secs, reps)?);
    }
    let (p50, p99, n) = match latency(&t, "10.99.0.2") {
        Ok(v) => v,
        Err(e) => {
            eprintln!("bench-ports: {mode}: latency: {}", e.msg);
            (-1.0, -1.0, 0)
        }
    };
    let fwd = match &switch {
        Switch::Fwd(f) => format!(",\"forwarder\":{}", f.stats.json()),
        _ => String::new(),
    };
    let line = format!(
        "{{\"mode\":\"{mode}\",\"base\":\"{}\",\"batch\":{},\"core\":{core},\"generator\":\"{}\",\"sink\":\"{}\",\"runs\":[{}],\"rtt_p50_us\":{p50:.1},\"rtt_p99_us\":{p99:.1},\"pings\":{n}{fwd}}}",
        spec.base,
        spec.batch.map_or("null".to_string(), |b| b.to_string()),
        gen.name(),
        if t.sink_stats { "rx_packets" } else { "xdp" },
        runs.join(",")
    );
    match switch {
        Switch::Bessemer(mut e) => {
            if spec.base == "em-offload" {
                let _ = bessemer_daemon::offload::command(&mut e, "pa", "off");
            }
            for m in ["inc_pa", "em", "swap", "out_pb", "inc_pb", "out_pa"] {
                let _ = e.destroy_module(m);
            }
            for p in ["pa", "pb"] {
                let _ = e.ports().destroy(p);
            }
        }
        Switch::Xdp(links) => drop(links),
        Switch::Fwd(f) => f.finish().map_err(err)?,
        Switch::None => {}
    }
    drop(pass_g1);
    Ok(line)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("bench-ports: {}", e.msg);
            std::process::exit(1);
        }
    }
}

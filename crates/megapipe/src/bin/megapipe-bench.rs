//! megapipe-bench: seed 002's RPC ping-pong (Fig 2.1/5.1, Table 5.1) on loopback over epoll
//! and MegaPipe variants, plus bessemer-kv vs memcached (memcaslap) and bessemer-httpd vs nginx
//! (wrk). `megapipe-bench all [--quick]` prints tables and one JSON line; `macro [--quick]`
//! runs only the memcached / nginx comparison.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use megapipe::apps::{self, Echo, Io, ServeConfig};
use megapipe::net;

/// The MegaPipe configuration the servers' `--io megapipe` uses (the headline figures).
const MEGAPIPE_VARIANT: &str = "mp+P+B+L+R";

/// The Table 5.1 ablation, in order, then multishot receive (+R, beyond the seeds).
const VARIANTS: [(&str, Io); 7] = [
    (
        "epoll-shared",
        Io::Epoll {
            shared_listener: true,
        },
    ),
    (
        "epoll-reuseport",
        Io::Epoll {
            shared_listener: false,
        },
    ),
    (
        "mp-base",
        Io::MegaPipe {
            partitioned: false,
            batch: 1,
            lightweight: false,
            multishot: false,
        },
    ),
    (
        "mp+P",
        Io::MegaPipe {
            partitioned: true,
            batch: 1,
            lightweight: false,
            multishot: false,
        },
    ),
    (
        "mp+P+B",
        Io::MegaPipe {
            partitioned: true,
            batch: 32,
            lightweight: false,
            multishot: false,
        },
    ),
    (
        "mp+P+B+L",
        Io::MegaPipe {
            partitioned: true,
            batch: 32,
            lightweight: true,
            multishot: false,
        },
    ),
    ("mp+P+B+L+R", Io::MEGAPIPE),
];

fn variant(name: &str) -> Io {
    VARIANTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, io)| *io)
        .unwrap_or_else(|| {
            eprintln!("unknown variant {name}");
            std::process::exit(2)
        })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => server(&args[1..]),
        Some("all") => all(args.iter().any(|a| a == "--quick")),
        Some("macro") => {
            let m = macro_part(args.iter().any(|a| a == "--quick"));
            println!("{{\"bench\": \"megapipe-macro\", {}}}", m.json());
        }
        Some("one") if args.len() == 6 => one(&args[1..]),
        _ => {
            eprintln!(
                "usage: megapipe-bench all [--quick] | macro [--quick] | one VARIANT SERVER_CPUS CLIENT_CPUS T BYTES | server VARIANT CPUS"
            );
            std::process::exit(2);
        }
    }
}

fn process_cpu_us() -> u64 {
    // SAFETY: rusage is plain data filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the kernel to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The echo server in its own process so its CPU time is its own: prints its address, then
/// answers each `stats` line on stdin with "cpu_us syscalls"; exits at EOF.
fn server(args: &[String]) {
    let io = variant(&args[0]);
    let cpus = apps::parse_cpus(&args[1]).unwrap();
    let s = apps::serve(
        Arc::new(Echo),
        ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            cpus,
            io,
        },
    )
    .unwrap();
    println!("{}", s.addr);
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        println!(
            "{} {}",
            process_cpu_us(),
            s.stats.syscalls.load(Ordering::Relaxed)
        );
        std::io::stdout().flush().unwrap();
    }
    s.shutdown();
}

struct ServerProc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl ServerProc {
    fn start(variant: &str, cpus: &str) -> ServerProc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["server", variant, cpus])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line.trim().parse().unwrap();
        ServerProc {
            child,
            stdin,
            stdout,
            addr,
        }
    }

    fn stats(&mut self) -> (u64, u64) {
        writeln!(self.stdin, "stats").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let mut it = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- RPC ping-pong client

struct Load {
    conns: usize,
    /// Transactions per connection; 0 = persistent.
    txns: u32,
    size: usize,
}

#[derive(Default)]
struct ClientOut {
    txns: u64,
    errors: u64,
    lat_ns: Vec<u32>,
}

struct CConn {
    fd: RawFd,
    connecting: bool,
    got: usize,
    done: u32,
    t0: Instant,
}

fn open_conn(ep: RawFd, addr: &SocketAddr, idx: usize) -> Option<CConn> {
    let SocketAddr::V4(a) = addr else { return None };
    // SAFETY: plain socket calls on a descriptor this function owns until it returns it.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return None;
        }
        let _ = net::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        libc::connect(
            fd,
            &sin as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        );
        let mut ev = libc::epoll_event {
            events: libc::EPOLLOUT as u32,
            u64: idx as u64,
        };
        libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
        Some(CConn {
            fd,
            connecting: true,
            got: 0,
            done: 0,
            t0: Instant::now(),
        })
    }
}

fn close_rst(fd: RawFd) {
    // RST avoids TIME_WAIT exhaustion of client ports, as the seeds' client did.
    let _ = net::set_linger_zero(fd);
    // SAFETY: closing a descriptor this client owns.
    unsafe { libc::close(fd) };
}

fn client_thread(
    addr: SocketAddr,
    cpu: usize,
    load: &Load,
    stop: &AtomicBool,
    measuring: &AtomicBool,
) -> ClientOut {
    net::pin_to_cpu(cpu).unwrap();
    let mut out = ClientOut::default();
    // SAFETY: plain syscalls on descriptors owned by this thread.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    let req = vec![0x61u8; load.size];
    let mut buf = vec![0u8; 65536.max(load.size)];
    let mut conns: Vec<Option<CConn>> = (0..load.conns).map(|i| open_conn(ep, &addr, i)).collect();
    let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    // SAFETY: `req` outlives the closure and is `req.len()` bytes; send only reads it.
    let send = |fd: RawFd| unsafe {
        libc::send(
            fd,
            req.as_ptr() as *const libc::c_void,
            req.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `events` holds `events.len()` writable epoll_event slots.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 10) };
        for ev in &events[..n.max(0) as usize] {
            let idx = ev.u64 as usize;
            let Some(c) = conns[idx].as_mut() else {
                continue;
            };
            let mut reopen = false;
            if ev.events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0
                && ev.events & libc::EPOLLIN as u32 == 0
            {
                reopen = true;
                out.errors += 1;
            } else if c.connecting {
                c.connecting = false;
                let mut e = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: idx as u64,
                };
                // SAFETY: `ep` and `c.fd` are descriptors this thread owns; `e` is a valid
                // epoll_event.
                unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, c.fd, &mut e) };
                c.t0 = Instant::now();
                if send(c.fd) != req.len() as isize {
                    reopen = true;
                    out.errors += 1;
                }
            } else {
                // SAFETY: `buf` is `buf.len()` writable bytes.
                let r =
                    unsafe { libc::read(c.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
                if r <= 0 {
                    if r == 0
                        || std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
                    {
                        reopen = true;
                        out.errors += 1;
                    }
                } else {
                    c.got += r as usize;
                    if c.got >= load.size {
                        c.got = 0;
                        c.done += 1;
                        if measuring.load(Ordering::Relaxed) {
                            out.txns += 1;
                            out.lat_ns
                                .push(c.t0.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                        }
                        if load.txns > 0 && c.done >= load.txns {
                            reopen = true;
                        } else {
                            c.t0 = Instant::now();
                            if send(c.fd) != req.len() as isize {
                                reopen = true;
                                out.errors += 1;
                            }
                        }
                    }
                }
            }
            if reopen {
                close_rst(c.fd);
                conns[idx] = open_conn(ep, &addr, idx);
            }
        }
    }
    for c in conns.into_iter().flatten() {
        close_rst(c.fd);
    }
    // SAFETY: `ep` is the epoll descriptor this function made; nothing uses it after this.
    unsafe { libc::close(ep) };
    out
}

struct RunResult {
    tps: f64,
    cpu_us_per_txn: f64,
    syscalls_per_txn: f64,
    p50_us: f64,
    p99_us: f64,
}

fn run_load(srv: &mut ServerProc, client_cpus: &[usize], load: &Load, secs: f64) -> RunResult {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = client_cpus
        .iter()
        .map(|&cpu| {
            let (stop, measuring) = (stop.clone(), measuring.clone());
            let addr = srv.addr;
            let load = Load {
                conns: load.conns,
                txns: load.txns,
                size: load.size,
            };
            std::thread::spawn(move || client_thread(addr, cpu, &load, &stop, &measuring))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (cpu0, sys0) = srv.stats();
    let t0 = Instant::now();
    measuring.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs_f64(secs));
    measuring.store(false, Ordering::SeqCst);
    let elapsed = t0.elapsed().as_secs_f64();
    let (cpu1, sys1) = srv.stats();
    stop.store(true, Ordering::SeqCst);
    let mut txns = 0;
    let mut lat = Vec::new();
    for t in threads {
        let o = t.join().unwrap();
        txns += o.txns;
        lat.extend(o.lat_ns);
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        if lat.is_empty() {
            0.0
        } else {
            lat[((lat.len() - 1) as f64 * p) as usize] as f64 / 1000.0
        }
    };
    let t = txns.max(1) as f64;
    RunResult {
        tps: txns as f64 / elapsed,
        cpu_us_per_txn: (cpu1 - cpu0) as f64 / t,
        syscalls_per_txn: (sys1 - sys0) as f64 / t,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> f64 {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    let mut s = v.to_vec();
    let m = median(&mut s);
    if m > 0.0 {
        (hi - lo) / m * 100.0
    } else {
        0.0
    }
}

/// Median of `reps` runs of every field; spread is (max-min)/median of tps in %.
fn measure(
    srv: &mut ServerProc,
    client_cpus: &[usize],
    load: &Load,
    secs: f64,
    reps: usize,
) -> (RunResult, f64) {
    let runs: Vec<RunResult> = (0..reps)
        .map(|_| run_load(srv, client_cpus, load, secs))
        .collect();
    let col = |f: fn(&RunResult) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        median(&mut v)
    };
    let tps: Vec<f64> = runs.iter().map(|r| r.tps).collect();
    (
        RunResult {
            tps: col(|r| r.tps),
            cpu_us_per_txn: col(|r| r.cpu_us_per_txn),
            syscalls_per_txn: col(|r| r.syscalls_per_txn),
            p50_us: col(|r| r.p50_us),
            p99_us: col(|r| r.p99_us),
        },
        spread(&tps),
    )
}

// ---------------------------------------------------------------- macro benchmarks

fn wait_port(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listening on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killer(Child);
impl Drop for Killer {
    fn drop(&mut self) {
        // SAFETY: signalling our own child; SIGTERM lets nginx and our servers exit cleanly.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bin(name: &str) -> std::path::PathBuf {
    std::env::current_exe().unwrap().with_file_name(name)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success())
}

/// memcaslap TPS against a server on `port` (client pinned to CPU 0).
fn memcaslap(port: u16, secs: u32, conc: u32) -> Option<f64> {
    let out = Command::new("taskset")
        .args([
            "-c",
            "0",
            "memcaslap",
            "-s",
            &format!("127.0.0.1:{port}"),
            "-t",
            &format!("{secs}s"),
            "-c",
            &conc.to_string(),
            "-T",
            "1",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.contains("TPS:"))?;
    line.split_whitespace()
        .skip_while(|w| *w != "TPS:")
        .nth(1)?
        .parse()
        .ok()
}

/// wrk requests/s against `url` (client pinned to CPU 0).
fn wrk(url: &str, secs: u32, conns: u32) -> Option<f64> {
    let out = Command::new("taskset")
        .args([
            "-c",
            "0",
            "wrk",
            "-t1",
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            url,
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        eprintln!("wrk reported errors for {url}:\n{text}");
    }
    let line = text.lines().find(|l| l.starts_with("Requests/sec:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user, system) used so far by process `pid` and all its descendants.
fn tree_cpu_secs(pid: u32) -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // (pid, ppid, utime ticks, stime ticks) of every process.
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // The command may hold spaces and parentheses: fields start after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        procs.push((p, num(1) as u32, num(11), num(12)));
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(procs.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    let (user, sys) = procs
        .iter()
        .filter(|p| tree.contains(&p.0))
        .fold((0, 0), |(u, s), p| (u + p.2, s + p.3));
    (user as f64 / hz, sys as f64 / hz)
}

/// A macro figure: the client's rate (median of the runs and its spread, %) and the server's
/// CPU time per operation (µs, median), which does not depend on whether the client or the
/// server was the bottleneck.
#[derive(Clone, Copy)]
struct MacroFigure {
    rate: f64,
    spread: f64,
    cpu_us_per_op: f64,
    /// The share of that CPU time spent in the kernel.
    sys_share: f64,
}

/// Runs `client` (ops/s over `secs`) `reps` times against the server process `pid`.
fn macro_runs(
    pid: u32,
    secs: u32,
    reps: usize,
    mut client: impl FnMut() -> Option<f64>,
) -> Option<MacroFigure> {
    let mut rates = Vec::new();
    let mut cpus = Vec::new();
    let (mut user, mut sys) = (0.0, 0.0);
    for _ in 0..reps {
        let c0 = tree_cpu_secs(pid);
        let Some(rate) = client() else { continue };
        let c1 = tree_cpu_secs(pid);
        rates.push(rate);
        let (u, s) = (c1.0 - c0.0, c1.1 - c0.1);
        user += u;
        sys += s;
        if rate > 0.0 {
            cpus.push((u + s) * 1e6 / (rate * secs as f64));
        }
    }
    if rates.is_empty() {
        return None;
    }
    let spread = spread(&rates);
    Some(MacroFigure {
        rate: median(&mut rates),
        spread,
        cpu_us_per_op: if cpus.is_empty() {
            0.0
        } else {
            median(&mut cpus)
        },
        sys_share: if user + sys > 0.0 {
            sys / (user + sys)
        } else {
            0.0
        },
    })
}

fn macro_kv(secs: u32, reps: usize) -> BTreeMap<String, MacroFigure> {
    let mut res = BTreeMap::new();
    if !have("memcaslap") || !have("memcached") {
        eprintln!("kv macro skipped: memcaslap/memcached missing (scripts/install-deps.sh --bench-megapipe)");
        return res;
    }
    for io in ["megapipe", "epoll"] {
        let port = free_port();
        let child = Command::new(bin("bessemer-kv"))
            .args(["--port", &port.to_string(), "--io", io, "--cpus", "1"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let _k = Killer(child);
        wait_port(format!("127.0.0.1:{port}").parse().unwrap());
        if let Some(r) = macro_runs(pid, secs, reps, || memcaslap(port, secs, 64)) {
            res.insert(format!("bessemer-kv/{io}"), r);
        }
    }
    let port = free_port();
    let child = Command::new("taskset")
        .args([
            "-c",
            "1",
            "memcached",
            "-u",
            "root",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-t",
            "1",
            "-m",
            "1024",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    let _k = Killer(child);
    wait_port(format!("127.0.0.1:{port}").parse().unwrap());
    if let Some(r) = macro_runs(pid, secs, reps, || memcaslap(port, secs, 64)) {
        res.insert("memcached".to_string(), r);
    }
    res
}

fn macro_http(secs: u32, reps: usize) -> BTreeMap<String, MacroFigure> {
    let mut res = BTreeMap::new();
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    if !have("wrk") || nginx.is_none() {
        eprintln!(
            "http macro skipped: wrk/nginx missing (scripts/install-deps.sh --bench-megapipe)"
        );
        return res;
    }
    let dir = std::env::temp_dir().join(format!("megapipe-bench-http-{}", std::process::id()));
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    // A small file, as the seeds' SpecWeb-like small-object case.
    std::fs::write(root.join("small.html"), vec![b'x'; 128]).unwrap();
    for io in ["megapipe", "epoll"] {
        let port = free_port();
        let child = Command::new(bin("bessemer-httpd"))
            .args([
                "--root",
                root.to_str().unwrap(),
                "--port",
                &port.to_string(),
                "--io",
                io,
                "--cpus",
                "1",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let _k = Killer(child);
        wait_port(format!("127.0.0.1:{port}").parse().unwrap());
        if let Some(r) = macro_runs(pid, secs, reps, || {
            wrk(&format!("http://127.0.0.1:{port}/small.html"), secs, 64)
        }) {
            res.insert(format!("bessemer-httpd/{io}"), r);
        }
    }
    let port = free_port();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\nworker_cpu_affinity 10;\nuser root;\ndaemon off;\nmaster_process on;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\nhttp {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; \
             server {{ listen 127.0.0.1:{port} reuseport; root {r}; }} }}\n",
            d = dir.display(),
            r = root.display()
        ),
    )
    .unwrap();
    let child = Command::new(nginx.unwrap())
        .args(["-c", conf.to_str().unwrap(), "-p", dir.to_str().unwrap()])
        .spawn()
        .unwrap();
    let pid = child.id();
    let k = Killer(child);
    wait_port(format!("127.0.0.1:{port}").parse().unwrap());
    if let Some(r) = macro_runs(pid, secs, reps, || {
        wrk(&format!("http://127.0.0.1:{port}/small.html"), secs, 64)
    }) {
        res.insert("nginx".to_string(), r);
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
    res
}

// ---------------------------------------------------------------- driver

/// One row: a variant on the given cores at T transactions per connection (0: persistent).
fn one(a: &[String]) {
    let client_cpus = apps::parse_cpus(&a[2]).unwrap();
    let (t, size): (u32, usize) = (a[3].parse().unwrap(), a[4].parse().unwrap());
    let mut srv = ServerProc::start(&a[0], &a[1]);
    let (r, sp) = measure(
        &mut srv,
        &client_cpus,
        &Load {
            conns: 64,
            txns: t,
            size,
        },
        1.0,
        3,
    );
    println!(
        "{} T={} {}B: {:.0} txn/s (spread {:.1}%), {:.2} us cpu/txn, {:.2} syscalls/txn, p50 {:.1} us, p99 {:.1} us",
        a[0], t, size, r.tps, sp, r.cpu_us_per_txn, r.syscalls_per_txn, r.p50_us, r.p99_us
    );
}

fn all(quick: bool) {
    let ncpu = net::online_cpus();
    let (secs, reps) = if quick { (0.7, 3) } else { (1.5, 3) };
    let ts: Vec<u32> = if quick {
        vec![1, 10, 128, 0]
    } else {
        vec![1, 2, 4, 8, 10, 16, 32, 64, 128, 0]
    };
    let sizes: Vec<usize> = if quick {
        vec![64, 4096]
    } else {
        vec![64, 256, 1024, 4096, 16384]
    };
    let conns = 64;
    let tname = |t: u32| {
        if t == 0 {
            "persist".to_string()
        } else {
            t.to_string()
        }
    };
    // Core split (the same for every server): "1-core" = server thread on CPU 1, client on CPU 0;
    // "2-core" = server threads on CPUs 0 and 1, a client thread beside each.
    let mut configs = vec![("1-core", "1", vec![0usize])];
    if ncpu >= 2 {
        configs.push(("2-core", "0,1", vec![0, 1]));
    }
    let started = Instant::now();
    println!("# megapipe-bench: RPC ping-pong on loopback, {conns} connections per client thread, 64 B messages, median of {reps} x {secs} s");
    println!("# cores: 1-core = server on CPU 1, client on CPU 0; 2-core = server on CPUs 0,1 with a client thread on each (shared)");
    println!(
        "{:<8} {:<16} {:>8} {:>12} {:>8} {:>10} {:>9} {:>9} {:>7}",
        "cores", "server", "T", "txn/s", "spread%", "cpu_us/txn", "sys/txn", "p50_us", "p99_us"
    );
    let mut table: BTreeMap<(String, String, u32), RunResult> = BTreeMap::new();
    for (cname, server_cpus, client_cpus) in &configs {
        for (vname, _) in VARIANTS {
            let mut srv = ServerProc::start(vname, server_cpus);
            for &t in &ts {
                let (r, sp) = measure(
                    &mut srv,
                    client_cpus,
                    &Load {
                        conns,
                        txns: t,
                        size: 64,
                    },
                    secs,
                    reps,
                );
                println!(
                    "{:<8} {:<16} {:>8} {:>12.0} {:>8.1} {:>10.2} {:>9.2} {:>9.1} {:>7.1}",
                    cname,
                    vname,
                    tname(t),
                    r.tps,
                    sp,
                    r.cpu_us_per_txn,
                    r.syscalls_per_txn,
                    r.p50_us,
                    r.p99_us
                );
                table.insert((cname.to_string(), vname.to_string(), t), r);
            }
        }
    }
    println!("\n# message-size sweep: 1-core, T=10, response = request size");
    println!(
        "{:<16} {:>8} {:>12} {:>10} {:>9}",
        "server", "bytes", "txn/s", "cpu_us/txn", "sys/txn"
    );
    let mut size_gain = Vec::new();
    for &s in &sizes {
        let mut best_epoll: f64 = 0.0;
        let mut mp = 0.0;
        for vname in [
            "epoll-shared",
            "epoll-reuseport",
            "mp+P+B+L",
            MEGAPIPE_VARIANT,
        ] {
            let mut srv = ServerProc::start(vname, "1");
            let (r, _) = measure(
                &mut srv,
                &[0],
                &Load {
                    conns,
                    txns: 10,
                    size: s,
                },
                secs,
                reps,
            );
            println!(
                "{:<16} {:>8} {:>12.0} {:>10.2} {:>9.2}",
                vname, s, r.tps, r.cpu_us_per_txn, r.syscalls_per_txn
            );
            if vname.starts_with("epoll") {
                best_epoll = best_epoll.max(r.tps);
            } else if vname == MEGAPIPE_VARIANT {
                mp = r.tps;
            }
        }
        size_gain.push((s, mp / best_epoll));
    }

    // Ratios against the best epoll variant (highest tps / lowest cpu per txn).
    let ratio_of = |mp_variant: &str, cores: &str, t: u32| -> (f64, f64) {
        let get = |v: &str| table.get(&(cores.to_string(), v.to_string(), t));
        let e: Vec<&RunResult> = ["epoll-shared", "epoll-reuseport"]
            .iter()
            .filter_map(|v| get(v))
            .collect();
        let mp = get(mp_variant);
        match (mp, e.is_empty()) {
            (Some(m), false) => {
                let best_tps = e.iter().map(|r| r.tps).fold(0.0, f64::max);
                let best_cpu = e.iter().map(|r| r.cpu_us_per_txn).fold(f64::MAX, f64::min);
                (m.tps / best_tps, m.cpu_us_per_txn / best_cpu)
            }
            _ => (0.0, 0.0),
        }
    };
    let ratio = |cores: &str, t: u32| ratio_of(MEGAPIPE_VARIANT, cores, t);
    let main_cfg = configs.last().unwrap().0;
    let (t1_tps_seeds, _) = ratio_of("mp+P+B+L", main_cfg, 1);
    let (_, t10_cpu_seeds) = ratio_of("mp+P+B+L", main_cfg, 10);
    let (t1_tps, t1_cpu) = ratio(main_cfg, 1);
    let (t10_tps, t10_cpu) = ratio(main_cfg, 10);
    let (t1_tps_1c, _) = ratio("1-core", 1);
    let (_, t10_cpu_1c) = ratio("1-core", 10);
    println!("\n# ablation at T=10 ({main_cfg}): gain in txn/s over epoll-shared");
    if let Some(base) = table.get(&(main_cfg.to_string(), "epoll-shared".to_string(), 10)) {
        for (vname, _) in VARIANTS {
            if let Some(r) = table.get(&(main_cfg.to_string(), vname.to_string(), 10)) {
                println!("{:<16} {:>+7.1}%", vname, (r.tps / base.tps - 1.0) * 100.0);
            }
        }
    }

    let m = macro_part(quick);
    let sizes_json: Vec<String> = size_gain
        .iter()
        .map(|(s, g)| format!("\"{s}\": {g:.3}"))
        .collect();
    println!(
        "\n# targets: t1 tps >= 1.5x best epoll: {}; t10 cpu/txn <= 0.70x: {}; kv >= 1.5x memcached: {}; http >= 1.3x nginx: {}",
        yes(t1_tps >= 1.5),
        yes(t10_cpu > 0.0 && t10_cpu <= 0.7),
        yes(m.kv_vs >= 1.5),
        yes(m.http_vs >= 1.3)
    );
    println!(
        "{{\"bench\": \"megapipe\", \"quick\": {quick}, \"cores\": \"{main_cfg}\", \"t1_tps_vs_best_epoll\": {t1_tps:.3}, \"t10_cpu_per_txn_vs_best_epoll\": {t10_cpu:.3}, \
         \"t1_cpu_per_txn_vs_best_epoll\": {t1_cpu:.3}, \"t10_tps_vs_best_epoll\": {t10_tps:.3}, \"t1_tps_vs_best_epoll_1core\": {t1_tps_1c:.3}, \
         \"t10_cpu_per_txn_vs_best_epoll_1core\": {t10_cpu_1c:.3}, \"t1_tps_vs_best_epoll_seeds_variant\": {t1_tps_seeds:.3}, \"t10_cpu_per_txn_vs_best_epoll_seeds_variant\": {t10_cpu_seeds:.3}, {}, \"size_tps_vs_best_epoll\": {{{}}}, \"seconds\": {:.0}}}",
        m.json(),
        sizes_json.join(", "),
        started.elapsed().as_secs_f64()
    );
}

/// The macro comparison's ratios: throughput (the client's rate) and server CPU per
/// operation, ours over the reference server's.
struct MacroRatios {
    kv_vs: f64,
    kv_epoll_vs: f64,
    kv_cpu_vs: f64,
    http_vs: f64,
    http_epoll_vs: f64,
    http_cpu_vs: f64,
}

impl MacroRatios {
    /// The JSON keys (no braces).
    fn json(&self) -> String {
        format!(
            "\"kv_vs_memcached\": {:.3}, \"kv_epoll_vs_memcached\": {:.3}, \"kv_cpu_per_op_vs_memcached\": {:.3}, \
             \"http_vs_nginx\": {:.3}, \"http_epoll_vs_nginx\": {:.3}, \"http_cpu_per_req_vs_nginx\": {:.3}",
            self.kv_vs,
            self.kv_epoll_vs,
            self.kv_cpu_vs,
            self.http_vs,
            self.http_epoll_vs,
            self.http_cpu_vs
        )
    }
}

/// bessemer-kv against memcached and bessemer-httpd against nginx: prints the table, returns
/// the ratios.
fn macro_part(quick: bool) -> MacroRatios {
    let (msecs, mreps) = if quick { (2, 3) } else { (4, 3) };
    println!(
        "\n# macro: 1 server core (CPU 1), client pinned to CPU 0; median of {mreps} x {msecs} s; \
         server cpu = user + system time of the server's processes per operation"
    );
    println!(
        "{:<24} {:>10} {:>8} {:>10} {:>6}",
        "server", "ops/s", "spread%", "cpu_us/op", "sys%"
    );
    let kv = macro_kv(msecs, mreps);
    let http = macro_http(msecs, mreps);
    for (figures, load) in [
        (&kv, "memcaslap, 64 conns, 90% get"),
        (&http, "wrk, 64 conns, 128 B file"),
    ] {
        for (k, f) in figures {
            println!(
                "{:<24} {:>10.0} {:>8.1} {:>10.2} {:>6.0}   ({load})",
                k,
                f.rate,
                f.spread,
                f.cpu_us_per_op,
                f.sys_share * 100.0
            );
        }
    }
    let r =
        |m: &BTreeMap<String, MacroFigure>, a: &str, b: &str, cpu: bool| match (m.get(a), m.get(b))
        {
            (Some(x), Some(y)) if !cpu && y.rate > 0.0 => x.rate / y.rate,
            (Some(x), Some(y)) if cpu && y.cpu_us_per_op > 0.0 => x.cpu_us_per_op / y.cpu_us_per_op,
            _ => 0.0,
        };
    let m = MacroRatios {
        kv_vs: r(&kv, "bessemer-kv/megapipe", "memcached", false),
        kv_epoll_vs: r(&kv, "bessemer-kv/epoll", "memcached", false),
        kv_cpu_vs: r(&kv, "bessemer-kv/megapipe", "memcached", true),
        http_vs: r(&http, "bessemer-httpd/megapipe", "nginx", false),
        http_epoll_vs: r(&http, "bessemer-httpd/epoll", "nginx", false),
        http_cpu_vs: r(&http, "bessemer-httpd/megapipe", "nginx", true),
    };
    println!(
        "# server cpu per operation, ours / reference: kv {:.2} (memcached), http {:.2} (nginx); \
         below 1 = less CPU per operation",
        m.kv_cpu_vs, m.http_cpu_vs
    );
    m
}

fn yes(b: bool) -> &'static str {
    if b {
        "met"
    } else {
        "not met"
    }
}

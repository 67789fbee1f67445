//! What the single-core benchmarks (bench-core, bench-modules) share, included by each with
//! `#[path]`: the command-line options they all take, pinning to a core and thread CPU time.

/// The options every single-core benchmark takes.
pub struct Base {
    /// Runs per case (`--runs N`; the median is reported).
    pub runs: usize,
    /// Seconds per run (`--secs S`).
    pub secs: f64,
    /// The core to pin to (`--core C`; default: the last one).
    pub core: usize,
    /// `--quick`: 3 runs × 0.1 s.
    pub quick: bool,
}

impl Base {
    /// `runs` runs of `secs` seconds on the last core, not quick.
    pub fn new(runs: usize, secs: f64) -> Base {
        Base {
            runs,
            secs,
            core: std::thread::available_parallelism()
                .map(|n| n.get() - 1)
                .unwrap_or(0),
            quick: false,
        }
    }
}

/// The command line of benchmark `prog`, read one option at a time.
pub struct Args {
    prog: &'static str,
    args: Vec<String>,
    i: usize,
}

impl Args {
    /// The process's arguments (after the program name).
    pub fn new(prog: &'static str) -> Args {
        Args {
            prog,
            args: std::env::args().skip(1).collect(),
            i: 0,
        }
    }

    /// The next option, if any.
    pub fn next_opt(&mut self) -> Option<String> {
        let a = self.args.get(self.i).cloned();
        self.i += 1;
        a
    }

    /// The value after option `opt`; exits (status 2) if there is none.
    pub fn value(&mut self, opt: &str) -> String {
        let v = self.args.get(self.i).cloned().unwrap_or_else(|| {
            eprintln!("{}: {opt} needs a value", self.prog);
            std::process::exit(2)
        });
        self.i += 1;
        v
    }

    /// Takes `opt` if it is one of [`Base`]'s (`--runs`, `--secs`, `--core`, `--quick`).
    pub fn base(&mut self, b: &mut Base, opt: &str) -> bool {
        match opt {
            "--runs" => b.runs = self.value(opt).parse().expect("--runs N"),
            "--secs" => b.secs = self.value(opt).parse().expect("--secs SECONDS"),
            "--core" => b.core = self.value(opt).parse().expect("--core N"),
            "--quick" => {
                b.quick = true;
                b.runs = 3;
                b.secs = 0.1;
            }
            _ => return false,
        }
        true
    }

    /// Exits (status 2) naming unknown option `opt`.
    pub fn unknown(&self, opt: &str) -> ! {
        eprintln!("{}: unknown option '{opt}' (see --help)", self.prog);
        std::process::exit(2)
    }
}

/// Pins this thread to `core`; if it cannot, says so (as `prog`) and goes on.
pub fn pin(prog: &str, core: usize) {
    // SAFETY: plain libc call on a zeroed cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("{prog}: cannot pin to core {core}; results will be noisier");
        }
    }
}

/// CPU time this thread has used, in seconds.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Runs `step` (packets done per call) for a short warm-up, then for `secs` of wall time;
/// returns the packets done and the seconds of this thread's CPU time they took (so time the
/// thread was not running, on a busy machine, counts in neither).
pub fn run_timed(secs: f64, mut step: impl FnMut() -> u64) -> (u64, f64) {
    let warm = std::time::Instant::now();
    while warm.elapsed() < std::time::Duration::from_millis(30) {
        step();
    }
    let (c0, w0) = (thread_cpu_secs(), std::time::Instant::now());
    let mut pkts = 0u64;
    while w0.elapsed().as_secs_f64() < secs {
        for _ in 0..256 {
            pkts += step();
        }
    }
    (pkts, (thread_cpu_secs() - c0).max(1e-9))
}

//! `make bench-modules`: what each module class costs per packet on one core.
//!
//! Each case runs Source -> Rewrite -> [Feed] -> [pre] -> CLASS -> [post] -> Sink and the same
//! pipeline without the class (the baseline), 60-byte packets unless the case's template says
//! otherwise (tagged, MPLS and VXLAN frames), on this thread, pinned, through the scheduler and
//! executor a worker uses. Feed is a bench-only module that writes the next record of a
//! precomputed stream of keys into each packet (so packets hit random table entries or spread
//! over flows and gates); `pre`/`post` are helper modules some classes need (a SetMetadata
//! writing what an encapsulation reads, a MetadataTest reading what a class writes). All of
//! them are in both pipelines, so the difference of the per-packet times is the class's own
//! cost. The class gets packets on input gate 0 and its first min(4, output gates) gates go to
//! the next module. Reports that cost in ns/packet and the Mpps it alone would allow, median of
//! several alternating runs, per packet entering the class. Ends with one JSON line.
//!
//! Tables: ExactMatch, L2Forward, IPLookup with 1, 1 000 and 1 000 000 entries; WildcardMatch,
//! ACL, BPF with 10, 100 and 1 000 rules. Every other class that processes packets has one case
//! (or one per mode) in a typical configuration; classes not measured are listed in `SKIPPED`.
//! Every case asserts its class dropped nothing.
//!
//! To add a class: add a function returning its `Case`s (in `tables.rs` for a class with a
//! table, or a `Case` in `others.rs`'s `other_cases`) and call it from `cases()`.

use std::cell::RefCell;
use std::time::Instant;

use bessemer_core::graph::Pipeline;
use bessemer_core::mem::PagePolicy;
use bessemer_core::sched::{ClassTree, Policy};
use bessemer_core::{tsc, Context, Instance, Module, ModuleClass, PacketBatch, PacketPool, Value};
use bessemer_modules::util::FastRng;

#[path = "../common.rs"]
mod common;
mod others;
mod tables;

use others::*;
use tables::*;

const PROG: &str = "bench-modules";

const PKT_SIZE: usize = 60;
/// Output gates the classes spread packets over (all connected to the sink).
const GATES: u64 = 4;

struct Opts {
    base: common::Base,
    full: bool,
    list: bool,
    filter: Option<String>,
    /// `--steps N`: run each pipeline N scheduler rounds once instead of timed runs (for
    /// callgrind: bench/profile_modules.sh).
    steps: Option<u64>,
}

/// Share of `--secs` a light case (no table) runs for, unless `--full`.
const LIGHT_SHARE: f64 = 0.6;

fn parse_opts() -> Opts {
    let mut o = Opts {
        base: common::Base::new(5, 0.25),
        full: false,
        list: false,
        filter: None,
        steps: None,
    };
    let mut a = common::Args::new(PROG);
    while let Some(opt) = a.next_opt() {
        if a.base(&mut o.base, &opt) {
            continue;
        }
        match opt.as_str() {
            "--only" => o.filter = Some(a.value(&opt)),
            "--full" => o.full = true,
            "--list" => o.list = true,
            "--steps" => o.steps = Some(a.value(&opt).parse().expect("--steps N")),
            "-h" | "--help" => {
                println!(
                    "usage: bench-modules [--runs N] [--secs S] [--core C] [--only SUBSTRING] [--quick] [--full] [--list]\n\
                     \n\
                     --runs N      alternating runs per case (default 5; the median is reported)\n\
                     --secs S      seconds per run of a table case (default 0.25); cases without a\n\
                     \x20             table run {LIGHT_SHARE} x S unless --full\n\
                     --core C      core to pin to (default: the last one)\n\
                     --only SUB    only the cases whose name contains SUB (e.g. --only ACL)\n\
                     --quick       3 runs x 0.1 s\n\
                     --full        every case runs for the full --secs\n\
                     --list        print the case names and exit\n\
                     --steps N     no timing: run each pipeline N scheduler rounds once and print\n\
                     \x20             the packet counts (bench/profile_modules.sh runs this under\n\
                     \x20             callgrind, for instructions per packet)"
                );
                std::process::exit(0)
            }
            other => a.unknown(other),
        }
    }
    o
}

// ---- the feed module -------------------------------------------------------------------

/// A stream of fixed-width records written at `offset` of successive packets.
struct Stream {
    offset: usize,
    width: usize,
    data: Vec<u8>,
}

thread_local! {
    static NEXT_STREAM: RefCell<Option<Stream>> = const { RefCell::new(None) };
}

struct Feed {
    s: Stream,
    pos: usize,
}

impl Module for Feed {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let (o, w) = (self.s.offset, self.s.width);
        for p in batch.pkts_mut() {
            if self.pos + w > self.s.data.len() {
                self.pos = 0;
            }
            p.data_mut()[o..o + w].copy_from_slice(&self.s.data[self.pos..self.pos + w]);
            self.pos += w;
        }
        ctx.forward(0, batch);
    }
}

static FEED: ModuleClass = ModuleClass {
    name: "BenchFeed",
    name_template: "feed",
    help: "writes precomputed key records into packets (bench only)",
    arg_type: "EmptyArg",
    arg_doc: &[],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: 1,
    create: |_, _| {
        let s = NEXT_STREAM
            .with(|c| c.borrow_mut().take())
            .expect("stream set before creating the feed");
        Ok(Instance::Exclusive(Box::new(Feed { s, pos: 0 })))
    },
};

// ---- cases -----------------------------------------------------------------------------

/// Adds a case's table entries to its module (named by the last argument).
type Setup = Box<dyn Fn(&mut Pipeline, &mut Context, &str)>;

/// A module put before or after the class in both pipelines (so the baseline has it too):
/// metadata writers a class reads, readers that make a class's metadata writes real.
type Stage = (&'static str, Value);

/// One measured configuration of a class.
struct Case {
    /// Row name, e.g. "ExactMatch 1000000 entries".
    name: String,
    /// JSON key prefix, e.g. "exact_match_1000000".
    key: String,
    class: &'static str,
    arg: Value,
    /// Adds the table's entries (module name given).
    setup: Setup,
    /// Keys written into packets (none: no Feed module in either pipeline).
    stream: Option<Stream>,
    /// Mpps the class must reach on its own (the brief's targets), if any.
    target: Option<f64>,
    /// The frame Rewrite writes into every packet (its length is the packet size).
    template: Vec<u8>,
    /// Modules between Feed and the class, and between the class and Sink.
    pre: Vec<Stage>,
    post: Vec<Stage>,
    /// Whether the class may drop packets (no case does: each picks traffic it passes).
    drops_allowed: bool,
    /// Shorter runs unless `--full` (classes whose cost does not depend on a table).
    light: bool,
    /// Footnote printed under the table.
    note: Option<String>,
}

impl Case {
    /// A light case: the default template, no stream, no table.
    fn new(
        name: impl Into<String>,
        key: impl Into<String>,
        class: &'static str,
        arg: Value,
    ) -> Case {
        Case {
            name: name.into(),
            key: key.into(),
            class,
            arg,
            setup: Box::new(|_, _, _| {}),
            stream: None,
            target: None,
            template: template(),
            pre: Vec::new(),
            post: Vec::new(),
            drops_allowed: false,
            light: true,
            note: None,
        }
    }

    /// The same, for a table case (full-length runs).
    fn table(name: String, key: String, class: &'static str, arg: Value) -> Case {
        Case {
            light: false,
            ..Case::new(name, key, class, arg)
        }
    }

    fn template(mut self, t: Vec<u8>) -> Case {
        self.template = t;
        self
    }

    fn stream(mut self, offset: usize, width: usize, data: Vec<u8>) -> Case {
        self.stream = Some(Stream {
            offset,
            width,
            data,
        });
        self
    }

    fn setup(mut self, f: impl Fn(&mut Pipeline, &mut Context, &str) + 'static) -> Case {
        self.setup = Box::new(f);
        self
    }

    fn target(mut self, t: Option<f64>) -> Case {
        self.target = t;
        self
    }

    fn pre(mut self, class: &'static str, arg: Value) -> Case {
        self.pre.push((class, arg));
        self
    }

    fn post(mut self, class: &'static str, arg: Value) -> Case {
        self.post.push((class, arg));
        self
    }

    fn note(mut self, n: &str) -> Case {
        self.note = Some(n.to_string());
        self
    }
}

/// An Ethernet/IPv4/UDP frame of PKT_SIZE bytes (valid lengths, so parsers accept it).
fn template() -> Vec<u8> {
    let mut f = vec![0u8; PKT_SIZE];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((PKT_SIZE - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&((PKT_SIZE - 34) as u16).to_be_bytes());
    f
}

/// The same frame as TCP (an ACK, no SYN, to port 443): 20-byte TCP header, 6 payload bytes.
fn tcp_template() -> Vec<u8> {
    let mut f = template();
    f[23] = 6;
    f[36..38].copy_from_slice(&443u16.to_be_bytes());
    f[38..42].copy_from_slice(&1000u32.to_be_bytes()); // seq
    f[42..46].copy_from_slice(&2000u32.to_be_bytes()); // ack
    f[46] = 0x50; // data offset 5
    f[47] = 0x10; // ACK
    f[48..50].copy_from_slice(&0xffffu16.to_be_bytes());
    f
}

/// The UDP frame with an 802.1Q tag (VID 100) after the MAC addresses: 64 bytes.
fn vlan_template() -> Vec<u8> {
    let t = template();
    let mut f = t[..12].to_vec();
    f.extend_from_slice(&[0x81, 0x00, 0x00, 100]);
    f.extend_from_slice(&t[12..]);
    f
}

/// The UDP frame's IPv4 packet under one MPLS label (bottom of stack): 64 bytes.
fn mpls_template() -> Vec<u8> {
    let t = template();
    let mut f = t[..12].to_vec();
    f.extend_from_slice(&[0x88, 0x47]);
    f.extend_from_slice(&((100u32 << 12) | 0x100 | 64).to_be_bytes());
    f.extend_from_slice(&t[14..]);
    f
}

/// The UDP frame inside outer Ethernet/IPv4/UDP(4789)/VXLAN (VNI 100) headers: 110 bytes.
fn vxlan_template() -> Vec<u8> {
    let inner = template();
    let mut f = vec![2, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 4, 0x08, 0x00];
    let ip_len = (20 + 8 + 8 + inner.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2]);
    f.extend_from_slice(&0xc000u16.to_be_bytes());
    f.extend_from_slice(&4789u16.to_be_bytes());
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 100, 0]);
    f.extend_from_slice(&inner);
    f
}

/// Every case, in the order printed. Other classes add their functions here.
fn cases() -> Vec<Box<dyn FnOnce() -> Vec<Case>>> {
    vec![
        Box::new(|| exact_match_cases(&[1, 1000, 1_000_000])),
        Box::new(|| l2_forward_cases(&[1, 1000, 1_000_000])),
        Box::new(|| ip_lookup_cases(&[1, 1000, 1_000_000])),
        Box::new(|| wildcard_match_cases(&[10, 100, 1000])),
        Box::new(|| acl_cases(&[10, 100, 1000])),
        Box::new(|| bpf_cases(&[10, 100, 1000])),
        Box::new(other_cases),
    ]
}

// ---- measurement -----------------------------------------------------------------------

struct Bench {
    g: Pipeline,
    ctx: Context,
    tree: ClassTree,
}

/// Output gates of a class connected to the sink: as many as it has, at most GATES.
fn gates_of(class: &ModuleClass) -> u16 {
    class.ogates.min(GATES as u16)
}

/// Source -> Rewrite -> [Feed] -> pre... -> [class] -> post... -> Sink. The class gets its
/// packets on input gate 0 and sends them out of its first `gates_of` output gates, all to
/// the next module's input gate 0.
fn build(pool: &PacketPool, case: &Case, with_class: bool, stream: Option<Stream>) -> Bench {
    let class = |n: &str| bessemer_modules::find(n).unwrap_or_else(|| panic!("class {n} missing"));
    let mut g = Pipeline::new();
    let mut ctx = Context::new(0, pool);
    let (_, tasks) = g
        .add_module(
            class("Source"),
            Some("src"),
            &Value::map().with("pkt_size", PKT_SIZE),
        )
        .unwrap();
    let rw = Value::map().with(
        "templates",
        Value::List(vec![Value::Bytes(case.template.clone())]),
    );
    g.add_module(class("Rewrite"), Some("rw"), &rw).unwrap();
    g.connect("src", 0, "rw", 0).unwrap();
    let mut tail = "rw".to_string();
    if let Some(stream) = stream {
        NEXT_STREAM.with(|c| *c.borrow_mut() = Some(stream));
        g.add_module(&FEED, Some("feed"), &Value::Null).unwrap();
        g.connect(&tail, 0, "feed", 0).unwrap();
        tail = "feed".into();
    }
    for (i, (c, arg)) in case.pre.iter().enumerate() {
        let name = format!("pre{i}");
        g.add_module(class(c), Some(&name), arg)
            .unwrap_or_else(|e| panic!("{}: {c}: {e:?}", case.name));
        g.connect(&tail, 0, &name, 0).unwrap();
        tail = name;
    }
    let post: Vec<String> = (0..case.post.len()).map(|i| format!("post{i}")).collect();
    for (name, (c, arg)) in post.iter().zip(&case.post) {
        g.add_module(class(c), Some(name), arg)
            .unwrap_or_else(|e| panic!("{}: {c}: {e:?}", case.name));
    }
    g.add_module(class("Sink"), Some("sink"), &Value::Null)
        .unwrap();
    let after = post.first().cloned().unwrap_or_else(|| "sink".into());
    if with_class {
        let cls = class(case.class);
        g.add_module(cls, Some("cls"), &case.arg)
            .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
        g.connect(&tail, 0, "cls", 0).unwrap();
        for gate in 0..gates_of(cls) {
            g.connect("cls", gate, &after, 0).unwrap();
        }
        (case.setup)(&mut g, &mut ctx, "cls");
    } else {
        g.connect(&tail, 0, &after, 0).unwrap();
    }
    for w in post.windows(2) {
        g.connect(&w[0], 0, &w[1], 0).unwrap();
    }
    if let Some(last) = post.last() {
        g.connect(last, 0, "sink", 0).unwrap();
    }
    let mut tree = ClassTree::new(0);
    tree.add_class("leaf", Policy::Leaf, None, 0, 1).unwrap();
    tree.attach_task("leaf", tasks[0]).unwrap();
    Bench { g, ctx, tree }
}

/// Runs the pipeline for `secs`; returns ns of thread CPU time per packet.
fn measure(b: &mut Bench, secs: f64) -> f64 {
    let Bench { g, ctx, tree } = b;
    let step = || {
        let mut n = 0u64;
        tree.schedule_once(&mut |t| {
            let r = ctx.run_task(g, t);
            n += r.packets as u64;
            r
        });
        n
    };
    let (pkts, cpu) = common::run_timed(secs, step);
    cpu * 1e9 / pkts.max(1) as f64
}

/// Runs the pipeline for `steps` scheduler rounds; returns the packets done. Two copies that
/// callgrind tells apart by name (`--toggle-collect` or inclusive cost): the pipeline without
/// the class and the one with it.
#[inline(never)]
fn steps_base(b: &mut Bench, steps: u64) -> u64 {
    // Different constants, so that the two bodies are not merged into one function.
    run_steps(b, steps) + std::hint::black_box(0)
}

#[inline(never)]
fn steps_class(b: &mut Bench, steps: u64) -> u64 {
    run_steps(b, steps) + std::hint::black_box(0) * 2
}

#[inline(always)]
fn run_steps(b: &mut Bench, steps: u64) -> u64 {
    let Bench { g, ctx, tree } = b;
    let mut n = 0u64;
    for _ in 0..steps {
        tree.schedule_once(&mut |t| {
            let r = ctx.run_task(g, t);
            n += r.packets as u64;
            r
        });
    }
    n
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

struct Row {
    name: String,
    key: String,
    base_ns: f64,
    total_ns: f64,
    class_ns: f64,
    spread: (f64, f64),
    target: Option<f64>,
    note: Option<String>,
}

/// Measures one case (None with `--steps`: it only ran the pipelines).
fn run_case(pool: &PacketPool, mut case: Case, o: &Opts) -> Option<Row> {
    let t0 = Instant::now();
    let copy = case.stream.as_ref().map(|st| Stream {
        offset: st.offset,
        width: st.width,
        data: st.data.clone(),
    });
    let mut base = build(pool, &case, false, copy);
    let stream = case.stream.take();
    let mut full = build(pool, &case, true, stream);
    let setup = t0.elapsed().as_secs_f64();
    if let Some(n) = o.steps {
        let pb = steps_base(&mut base, n);
        let pc = steps_class(&mut full, n);
        println!("{}: base {pb} packets, class {pc} packets", case.name);
        return None;
    }
    let secs = if case.light && !o.full {
        o.base.secs * LIGHT_SHARE
    } else {
        o.base.secs
    };
    // Alternating runs, so drift and neighbours' noise hit both pipelines alike.
    let (mut bs, mut fs, mut ds) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..o.base.runs {
        let b = measure(&mut base, secs);
        let f = measure(&mut full, secs);
        bs.push(b);
        fs.push(f);
        ds.push(f - b);
    }
    let drops: Vec<(String, u64)> = full
        .g
        .drops_of("cls")
        .unwrap()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(
        case.drops_allowed || drops.is_empty(),
        "{}: the class dropped packets: {drops:?}",
        case.name
    );
    let sink = full.g.igate_counts("sink", 0).unwrap().packets;
    assert!(sink > 0, "{}: nothing reached the sink", case.name);
    let cls = bessemer_modules::find(case.class).unwrap();
    let out: Vec<u64> = (0..gates_of(cls))
        .map(|g| full.g.ogate_counts("cls", g).unwrap().packets)
        .collect();
    let total = out.iter().sum::<u64>().max(1) as f64;
    let shares: Vec<String> = out
        .iter()
        .enumerate()
        .map(|(g, &n)| format!("{g}: {:.0}%", n as f64 * 100.0 / total))
        .collect();
    eprintln!(
        "# {}: set-up {setup:.1} s; output gates {}",
        case.name,
        shares.join(", ")
    );
    let (lo, hi) = (
        ds.iter().cloned().fold(f64::INFINITY, f64::min),
        ds.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    Some(Row {
        name: case.name,
        key: case.key,
        base_ns: median(bs),
        total_ns: median(fs),
        class_ns: median(ds),
        spread: (lo, hi),
        target: case.target,
        note: case.note,
    })
}

/// Classes with no case, and why (printed under the table).
const SKIPPED: &str =
    "not measured: Source, FlowGen, PortInc, QueueInc (packet sources: they are the \
     task), Sink, PortOut, QueueOut (packet sinks / port I/O), Queue, DRR (task-driven: packets \
     wait for another task), Dump (a side effect: prints packets), NoOP (no gates: a task that \
     processes no packets), ArpResponder (drops every non-ARP frame as not_arp, so its non-ARP \
     path is a drop, not a pass); measured in other benchmarks: GtpuParser, GtpuDecap, \
     GtpuEncap, Qos, Counter, SequentialUpdate (make bench-upf, the UPF pipeline), ESPEncap, \
     ESPDecap (make bench-slices); not measured yet: FlowMeasure, GtpuEcho, \
     GtpuPathMonitoring, IPFrag, IPDefrag (the UPF fork's measurement, echo, path-monitoring \
     and fragmentation side paths)";

/// The classes `SKIPPED` names (checked against the class list at the end of a run).
const SKIPPED_CLASSES: &[&str] = &[
    "Source",
    "FlowGen",
    "PortInc",
    "QueueInc",
    "Sink",
    "PortOut",
    "QueueOut",
    "Queue",
    "DRR",
    "Dump",
    "NoOP",
    "ArpResponder",
    "GtpuParser",
    "GtpuDecap",
    "GtpuEncap",
    "Qos",
    "Counter",
    "SequentialUpdate",
    "ESPEncap",
    "ESPDecap",
    "FlowMeasure",
    "GtpuEcho",
    "GtpuPathMonitoring",
    "IPFrag",
    "IPDefrag",
];

fn main() {
    let o = parse_opts();
    if o.list {
        for make in cases() {
            for case in make() {
                println!("{}", case.name);
            }
        }
        return;
    }
    common::pin(PROG, o.base.core);
    let ghz = tsc::hz() as f64 / 1e9;
    let pool = PacketPool::new("bench", 16384, PagePolicy::Auto).expect("packet pool");
    let light = if o.full { 1.0 } else { LIGHT_SHARE };
    println!(
        "# bench-modules: {PKT_SIZE}-byte packets unless named, TSC {ghz:.2} GHz, pinned to core {}, {} alternating runs x {:.2} s (cases without a table: x {:.2} s), pages: {}",
        o.base.core,
        o.base.runs,
        o.base.secs,
        o.base.secs * light,
        pool.page_kind()
    );
    println!("# class cost = ns/pkt of (Source->Rewrite->[Feed]->[pre]->CLASS->[post]->Sink) - (the same without CLASS); Mpps = 1000 / cost");
    println!("# the machine's 2 cores are shared with other jobs: expect noise (spread = min..max of the per-run differences)");
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>17} {:>9} {:>8} {:>6}",
        "case", "base ns", "total ns", "class ns", "spread ns", "Mpps", "target", "met"
    );
    let mut json: Vec<(String, String)> = vec![
        ("bench".into(), "\"modules\"".into()),
        ("pkt_size".into(), PKT_SIZE.to_string()),
        ("tsc_ghz".into(), format!("{ghz:.3}")),
    ];
    let mut all_met = true;
    let mut notes: Vec<String> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for make in cases() {
        for case in make() {
            seen.push(case.class);
            if let Some(f) = &o.filter {
                if !case.name.contains(f.as_str()) {
                    continue;
                }
            }
            let Some(r) = run_case(&pool, case, &o) else {
                continue;
            };
            let mpps = 1000.0 / r.class_ns.max(1e-3);
            let met = r.target.map(|t| mpps >= t);
            if met == Some(false) {
                all_met = false;
            }
            let mut name = r.name.clone();
            if let Some(n) = &r.note {
                let i = notes.iter().position(|x| x == n).unwrap_or_else(|| {
                    notes.push(n.clone());
                    notes.len() - 1
                });
                name = format!("{name} [{}]", i + 1);
            }
            println!(
                "{:<44} {:>9.2} {:>9.2} {:>9.2} {:>8.2}..{:<8.2} {:>9.1} {:>8} {:>6}",
                name,
                r.base_ns,
                r.total_ns,
                r.class_ns,
                r.spread.0,
                r.spread.1,
                mpps,
                r.target
                    .map(|t| format!(">={t:.0}"))
                    .unwrap_or_else(|| "-".into()),
                met.map(|m| if m { "yes" } else { "NO" }).unwrap_or("-"),
            );
            json.push((format!("{}_ns", r.key), format!("{:.3}", r.class_ns)));
            json.push((format!("{}_mpps", r.key), format!("{mpps:.2}")));
            json.push((
                format!("{}_baseline_ns", r.key),
                format!("{:.3}", r.base_ns),
            ));
            if let Some(m) = met {
                json.push((format!("{}_target_met", r.key), m.to_string()));
            }
        }
    }
    for (i, n) in notes.iter().enumerate() {
        println!("# [{}] {n}", i + 1);
    }
    println!("# costs below about 1 ns are within the noise: their Mpps only says 'negligible'");
    println!("# {SKIPPED}");
    for c in bessemer_modules::classes() {
        if !seen.contains(&c.name) && !SKIPPED_CLASSES.contains(&c.name) {
            println!(
                "# warning: class {} has no case and is not in SKIPPED",
                c.name
            );
        }
    }
    json.push(("all_targets_met".into(), all_met.to_string()));
    let body: Vec<String> = json.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    println!("{{{}}}", body.join(", "));
}

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
//! To add a class: add a function returning its `Case`s (or a `Case` in `other_cases`) and
//! call it from `cases()`.

use std::cell::RefCell;
use std::time::Instant;

use bessemer_core::graph::Pipeline;
use bessemer_core::mem::PagePolicy;
use bessemer_core::sched::{ClassTree, Policy};
use bessemer_core::{tsc, Context, Instance, Module, ModuleClass, PacketBatch, PacketPool, Value};
use bessemer_modules::util::FastRng;

#[path = "common.rs"]
mod common;

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

/// Number of key records in a stream: enough that the sequence does not sit in cache.
fn stream_len(entries: usize) -> usize {
    (entries * 4).clamp(1 << 16, 1 << 22)
}

fn exact_match_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            // A flow key: IPv4 src, dst and both UDP ports (12 bytes at offset 26).
            let mut rng = FastRng::new(0xE3 + n as u64);
            let keys: Vec<[u8; 12]> = (0..n)
                .map(|_| {
                    let mut k = [0u8; 12];
                    k[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                    k[8..].copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                    k
                })
                .collect();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                data.extend_from_slice(&keys[rng.below(n as u64) as usize]);
            }
            let field = |o: i64| Value::map().with("offset", o).with("num_bytes", 4);
            Case::table(
                format!("ExactMatch {n} entries"),
                format!("exact_match_{n}"),
                "ExactMatch",
                Value::map().with("fields", Value::List(vec![field(26), field(30), field(34)])),
            )
            .setup(move |g, ctx, m| {
                let mut rng = FastRng::new(7);
                for k in &keys {
                    let f = |b: &[u8]| Value::map().with("value_bin", b.to_vec());
                    let arg = Value::map().with("gate", rng.below(GATES)).with(
                        "fields",
                        Value::List(vec![f(&k[..4]), f(&k[4..8]), f(&k[8..])]),
                    );
                    g.command(m, "add", &arg, ctx).unwrap();
                }
            })
            .stream(26, 12, data)
            .target((n >= 1_000_000).then_some(25.0))
        })
        .collect()
}

fn l2_forward_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x12 + n as u64);
            let mut macs: Vec<[u8; 6]> = (0..n)
                .map(|_| {
                    let b = rng.next_u64().to_le_bytes();
                    [b[0] & 0xfe, b[1], b[2], b[3], b[4], b[5]]
                })
                .collect();
            macs.sort();
            macs.dedup();
            let m = macs.len();
            let mut data = Vec::with_capacity(stream_len(n) * 6);
            for _ in 0..stream_len(n) {
                data.extend_from_slice(&macs[rng.below(m as u64) as usize]);
            }
            // About half the slots used, as a sized table would be.
            let size = (n / 2).next_power_of_two().max(1);
            Case::table(
                format!("L2Forward {n} entries"),
                format!("l2_forward_{n}"),
                "L2Forward",
                Value::map().with("size", size).with("bucket", 4),
            )
            .setup(move |g, ctx, name| {
                let mut rng = FastRng::new(9);
                for chunk in macs.chunks(1024) {
                    let entries = chunk
                        .iter()
                        .map(|a| {
                            let s: Vec<String> = a.iter().map(|b| format!("{b:02x}")).collect();
                            Value::map()
                                .with("addr", s.join(":"))
                                .with("gate", rng.below(GATES))
                        })
                        .collect();
                    let arg = Value::map().with("entries", Value::List(entries));
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(0, 6, data)
        })
        .collect()
}

/// Prefix lengths roughly as in an Internet routing table: mostly /24, few beyond.
fn prefix_len(rng: &mut FastRng) -> u8 {
    match rng.below(100) {
        0 => 8 + rng.below(8) as u8,
        1..=3 => 16,
        4..=19 => 17 + rng.below(5) as u8,
        20..=29 => 22,
        30..=41 => 23,
        42..=96 => 24,
        _ => 25 + rng.below(8) as u8,
    }
}

fn ip_lookup_cases(sizes: &[usize]) -> Vec<Case> {
    sizes
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x1F + n as u64);
            let mut seen = std::collections::HashSet::new();
            let mut prefixes: Vec<(u32, u8)> = Vec::with_capacity(n);
            while prefixes.len() < n {
                let len = prefix_len(&mut rng);
                let p = (rng.next_u64() as u32) & (u32::MAX << (32 - len as u32));
                if seen.insert((p, len)) {
                    prefixes.push((p, len));
                }
            }
            // Destinations inside random prefixes (random host bits).
            let mut data = Vec::with_capacity(stream_len(n) * 4);
            for _ in 0..stream_len(n) {
                let (p, len) = prefixes[rng.below(n as u64) as usize];
                let host = (rng.next_u64() as u32) & !(u32::MAX << (32 - len as u32));
                data.extend_from_slice(&(p | host).to_be_bytes());
            }
            Case::table(
                format!("IPLookup {n} prefixes"),
                format!("ip_lookup_{n}"),
                "IPLookup",
                Value::map()
                    .with("max_rules", (n as u64).max(1024))
                    .with("max_tbl8s", ((n / 8) as u64).max(128)),
            )
            .setup(move |g, ctx, name| {
                let mut rng = FastRng::new(11);
                for &(p, len) in &prefixes {
                    let arg = Value::map()
                        .with("prefix", std::net::Ipv4Addr::from(p).to_string())
                        .with("prefix_len", len as u64)
                        .with("gate", rng.below(GATES));
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(30, 4, data)
            .target((n >= 1_000_000).then_some(30.0))
        })
        .collect()
}

fn wildcard_match_cases(rules: &[usize]) -> Vec<Case> {
    // Fields: protocol (1), IPv4 src (4), dst (4), UDP src port (2), dst port (2).
    // Ten masks: address prefixes of various lengths, with and without ports.
    let masks: [[u64; 5]; 10] = [
        [0, 0xffff_ff00, 0, 0, 0],
        [0, 0, 0xffff_ff00, 0, 0],
        [0, 0xffff_0000, 0xffff_0000, 0, 0],
        [0xff, 0, 0, 0, 0xffff],
        [0xff, 0xffff_ffff, 0xffff_ffff, 0xffff, 0xffff],
        [0, 0xff00_0000, 0, 0, 0],
        [0, 0, 0xffff_fff0, 0, 0xffff],
        [0xff, 0xffff_ff00, 0, 0xffff, 0],
        [0, 0, 0, 0xff00, 0],
        [0xff, 0, 0xffff_ffff, 0, 0],
    ];
    rules
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0x33 + n as u64);
            // Rule i uses mask i % 10: values random under the mask.
            let rule_vals: Vec<(usize, [u64; 5], i64, u64)> = (0..n)
                .map(|i| {
                    let m = masks[i % masks.len()];
                    let mut v = [0u64; 5];
                    for f in 0..5 {
                        v[f] = rng.next_u64() & m[f];
                    }
                    (i % masks.len(), v, rng.below(1000) as i64, rng.below(GATES))
                })
                .collect();
            // Packets: a random rule's values, random bits where its mask is zero. Bytes
            // 23..38 of the frame: proto, checksum (2), src, dst, ports.
            let mut data = Vec::with_capacity(stream_len(n) * 15);
            for _ in 0..stream_len(n) {
                let (mi, v, _, _) = rule_vals[rng.below(n as u64) as usize];
                let m = masks[mi];
                let mut rec = [0u8; 15];
                let fill = |rng: &mut FastRng, f: usize| v[f] | (rng.next_u64() & !m[f]);
                rec[0] = fill(&mut rng, 0) as u8;
                rec[3..7].copy_from_slice(&(fill(&mut rng, 1) as u32).to_be_bytes());
                rec[7..11].copy_from_slice(&(fill(&mut rng, 2) as u32).to_be_bytes());
                rec[11..13].copy_from_slice(&(fill(&mut rng, 3) as u16).to_be_bytes());
                rec[13..15].copy_from_slice(&(fill(&mut rng, 4) as u16).to_be_bytes());
                data.extend_from_slice(&rec);
            }
            let field = |o: i64, s: usize| Value::map().with("offset", o).with("num_bytes", s);
            let fd = |x: u64| Value::map().with("value_int", Value::Int(x as i64));
            Case::table(
                format!("WildcardMatch {n} rules / 10 masks"),
                format!("wildcard_match_{n}"),
                "WildcardMatch",
                Value::map().with(
                    "fields",
                    Value::List(vec![
                        field(23, 1),
                        field(26, 4),
                        field(30, 4),
                        field(34, 2),
                        field(36, 2),
                    ]),
                ),
            )
            .setup(move |g, ctx, name| {
                for (mi, v, prio, gate) in &rule_vals {
                    let arg = Value::map()
                        .with("gate", *gate)
                        .with("priority", *prio)
                        .with("values", Value::List(v.iter().map(|&x| fd(x)).collect()))
                        .with(
                            "masks",
                            Value::List(masks[*mi].iter().map(|&x| fd(x)).collect()),
                        );
                    g.command(name, "add", &arg, ctx).unwrap();
                }
            })
            .stream(23, 15, data)
            .target((n == 100).then_some(25.0))
        })
        .collect()
}

/// `a.b.c.d` of a host-order address.
fn ip4(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// A 12-byte record for offset 26: IPv4 source, destination, UDP source and destination port.
fn flow_rec(src: u32, dst: u32, sport: u16, dport: u16) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..4].copy_from_slice(&src.to_be_bytes());
    r[4..8].copy_from_slice(&dst.to_be_bytes());
    r[8..10].copy_from_slice(&sport.to_be_bytes());
    r[10..].copy_from_slice(&dport.to_be_bytes());
    r
}

fn acl_cases(rules: &[usize]) -> Vec<Case> {
    // Rule i: source 10.(i / 256).(i % 256).0/24, destination a random /16, destination port
    // 1024 + i, any source port; every fourth rule denies, the others allow. Each packet is
    // made for one allowing rule chosen uniformly at random (source inside its /24, destination
    // inside its /16, its port) and matches that rule only: the first-match scan reads on
    // average half the list before deciding, and no packet is dropped.
    rules
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0xAC + n as u64);
            let rs: Vec<(u32, u32, u16, bool)> = (0..n)
                .map(|i| {
                    let src = 0x0a00_0000 | ((i as u32) << 8);
                    let dst = (rng.next_u64() as u32) & 0xffff_0000;
                    (src, dst, 1024 + i as u16, i % 4 == 3)
                })
                .collect();
            let allow: Vec<usize> = (0..n).filter(|&i| !rs[i].3).collect();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                let (src, dst, dport, _) = rs[allow[rng.below(allow.len() as u64) as usize]];
                let h = rng.next_u64();
                data.extend_from_slice(&flow_rec(
                    src | (h as u32 & 0xff),
                    dst | ((h >> 8) as u32 & 0xffff),
                    1024 + (h >> 32) as u16 % 60000,
                    dport,
                ));
            }
            let list = rs
                .iter()
                .map(|&(src, dst, dport, drop)| {
                    Value::map()
                        .with("src_ip", format!("{}/24", ip4(src)))
                        .with("dst_ip", format!("{}/16", ip4(dst)))
                        .with("src_port", 0u64)
                        .with("dst_port", dport as u64)
                        .with("drop", drop)
                })
                .collect::<Vec<Value>>();
            Case::table(
                format!("ACL {n} rules"),
                format!("acl_{n}"),
                "ACL",
                Value::map().with("rules", list),
            )
            .stream(26, 12, data)
            .target((n == 1000).then_some(20.0))
            .note(
                "ACL, BPF: each packet matches one rule / filter, chosen uniformly at random \
                 (ACL: among the allowing ones; every fourth rule denies): on average half the \
                 list is scanned before the decision",
            )
        })
        .collect()
}

fn bpf_cases(filters: &[usize]) -> Vec<Case> {
    // Filter i (priority n - i, so evaluated in index order; gate random): `udp dst port
    // 1024+i` for even i, `src net 10.(i / 256).(i % 256).0/24 and udp` for odd i. Each packet
    // is made for one filter chosen uniformly at random and matches only it (port filters'
    // packets come from 172.16/12, net filters' packets go to ports 40000 and up): a packet
    // runs on average half the programs before its match. Compiling is set-up.
    filters
        .iter()
        .map(|&n| {
            let mut rng = FastRng::new(0xBF + n as u64);
            let list = (0..n)
                .map(|i| {
                    let f = if i.is_multiple_of(2) {
                        format!("udp dst port {}", 1024 + i)
                    } else {
                        format!("src net 10.{}.{}.0/24 and udp", i / 256, i % 256)
                    };
                    Value::map()
                        .with("priority", (n - i) as i64)
                        .with("filter", f)
                        .with("gate", rng.below(GATES))
                })
                .collect::<Vec<Value>>();
            let mut data = Vec::with_capacity(stream_len(n) * 12);
            for _ in 0..stream_len(n) {
                let i = rng.below(n as u64) as u32;
                let h = rng.next_u64();
                let dst = 0xc0a8_0000 | (h as u32 & 0xffff);
                let sport = 1024 + (h >> 16) as u16 % 60000;
                let rec = if i.is_multiple_of(2) {
                    let src = 0xac10_0000 | ((h >> 32) as u32 & 0x000f_ffff);
                    flow_rec(src, dst, sport, 1024 + i as u16)
                } else {
                    let src = 0x0a00_0000 | (i << 8) | ((h >> 32) as u32 & 0xff);
                    flow_rec(src, dst, sport, 40000 + (h >> 40) as u16 % 20000)
                };
                data.extend_from_slice(&rec);
            }
            Case::table(
                format!("BPF {n} filters"),
                format!("bpf_{n}"),
                "BPF",
                Value::map().with("filters", list),
            )
            .stream(26, 12, data)
            .target(match n {
                10 => Some(40.0),
                100 => Some(20.0),
                _ => None,
            })
            .note(
                "ACL, BPF: each packet matches one rule / filter, chosen uniformly at random \
                 (ACL: among the allowing ones; every fourth rule denies): on average half the \
                 list is scanned before the decision",
            )
        })
        .collect()
}

/// `count` records of `width` bytes, each filled by `f`.
fn records(
    seed: u64,
    count: usize,
    width: usize,
    mut f: impl FnMut(&mut FastRng, &mut [u8]),
) -> Vec<u8> {
    let mut rng = FastRng::new(seed);
    let mut data = vec![0u8; count * width];
    for rec in data.chunks_mut(width) {
        f(&mut rng, rec);
    }
    data
}

/// Random IPv4 5-tuple parts (offset 26: addresses and ports), one per packet.
fn random_flows(seed: u64) -> Vec<u8> {
    records(seed, 1 << 16, 12, |rng, r| {
        let (a, b) = (rng.next_u64(), rng.next_u64());
        r.copy_from_slice(&flow_rec(
            0x0a00_0000 | (a as u32 & 0x00ff_ffff),
            (a >> 32) as u32,
            1024 + b as u16 % 60000,
            1 + (b >> 16) as u16 % 1024,
        ));
    })
}

/// Output gates 0..GATES as a list argument.
fn gate_list(n: u64) -> Value {
    Value::List((0..n).map(|g| Value::Int(g as i64)).collect())
}

/// A MetadataTest argument reading (or writing) the named attributes.
fn md_test(mode: &str, attrs: &[(&str, i64)]) -> Value {
    Value::map().with(
        mode,
        Value::Map(
            attrs
                .iter()
                .map(|&(n, s)| (n.to_string(), Value::Int(s)))
                .collect(),
        ),
    )
}

/// A SetMetadata argument of constant attributes: (name, size, bytes).
fn set_md(attrs: &[(&str, usize, &[u8])]) -> Value {
    Value::map().with(
        "attrs",
        attrs
            .iter()
            .map(|&(n, size, v)| {
                Value::map()
                    .with("name", n)
                    .with("size", size)
                    .with("value_bin", v.to_vec())
            })
            .collect::<Vec<Value>>(),
    )
}

/// Footnote of the cases with metadata stages.
const METADATA_NOTE: &str = "metadata: the classes that read attributes (EtherEncap, IPEncap, \
     VXLANEncap, GenericEncap) come after a SetMetadata writing them, those that write attributes \
     (SetMetadata, IPEncap, VXLANEncap, VXLANDecap) before a MetadataTest reading them (else the \
     writes would be skipped); both stages are in the baseline too";

/// One case per class whose cost does not depend on a table, each in a typical configuration
/// (the `conf/modules/<class>.bess` samples'), with traffic it passes without drops.
fn other_cases() -> Vec<Case> {
    let mac1: &[u8] = &[2, 0, 0, 0, 0, 1];
    let mac2: &[u8] = &[2, 0, 0, 0, 0, 2];
    let nat_flows = 100_000usize;
    vec![
        // Basic.
        Case::new("Bypass", "bypass", "Bypass", Value::map()),
        Case::new("Merge", "merge", "Merge", Value::map()),
        Case::new(
            "Replicate to 2 gates",
            "replicate_2",
            "Replicate",
            Value::map().with("gates", gate_list(2)),
        )
        .note(
            "Replicate: per input packet; every packet leaves twice (gates 0 and 1), so the \
             cost includes one clone and a second packet freed by Sink",
        ),
        Case::new(
            "RoundRobin 4 gates, per packet",
            "round_robin_4",
            "RoundRobin",
            Value::map().with("gates", gate_list(GATES)),
        ),
        Case::new(
            "RandomSplit 4 gates, drop_rate 0",
            "random_split_4",
            "RandomSplit",
            Value::map()
                .with("drop_rate", 0.0)
                .with("gates", gate_list(GATES)),
        ),
        Case::new(
            "Split on 1 data byte (4 gates)",
            "split_4",
            "Split",
            Value::map().with("size", 1u64).with("offset", 42),
        )
        .stream(
            42,
            1,
            records(0x5b, 1 << 16, 1, |rng, r| r[0] = rng.below(GATES) as u8),
        ),
        Case::new(
            "WorkerSplit (worker 0 -> gate 0)",
            "worker_split",
            "WorkerSplit",
            Value::map(),
        ),
        Case::new(
            "MetadataTest (writes 2 attributes)",
            "metadata_test",
            "MetadataTest",
            md_test("write", &[("flow_id", 4), ("color", 1)]),
        ),
        Case::new("Buffer", "buffer", "Buffer", Value::map()),
        // Rewriting.
        Case::new(
            "Rewrite 4 templates",
            "rewrite_4",
            "Rewrite",
            Value::map().with(
                "templates",
                (0..4u8)
                    .map(|i| {
                        let mut t = template();
                        t[33] = 2 + i;
                        Value::Bytes(t)
                    })
                    .collect::<Vec<Value>>(),
            ),
        ),
        Case::new(
            "Update 2 fields",
            "update_2",
            "Update",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("offset", 26)
                        .with("size", 4u64)
                        .with("value", 0x0a00_0063u64),
                    Value::map()
                        .with("offset", 34)
                        .with("size", 2u64)
                        .with("value", 5000u64),
                ],
            ),
        ),
        Case::new(
            "RandomUpdate 2 fields",
            "random_update_2",
            "RandomUpdate",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("offset", 26)
                        .with("size", 4u64)
                        .with("min", 0x0a00_0000u64)
                        .with("max", 0x0aff_ffffu64),
                    Value::map()
                        .with("offset", 34)
                        .with("size", 2u64)
                        .with("min", 1024u64)
                        .with("max", 65535u64),
                ],
            ),
        ),
        Case::new(
            "SetMetadata 2 attrs (constant, from data)",
            "set_metadata_2",
            "SetMetadata",
            Value::map().with(
                "attrs",
                vec![
                    Value::map()
                        .with("name", "ether_src")
                        .with("size", 6u64)
                        .with("value_bin", mac1.to_vec()),
                    Value::map()
                        .with("name", "flow_src")
                        .with("size", 4u64)
                        .with("offset", 26),
                ],
            ),
        )
        .post(
            "MetadataTest",
            md_test("read", &[("ether_src", 6), ("flow_src", 4)]),
        )
        .note(METADATA_NOTE),
        Case::new("MACSwap", "mac_swap", "MACSwap", Value::map()),
        Case::new("IPSwap", "ip_swap", "IPSwap", Value::map()),
        Case::new("UpdateTTL", "update_ttl", "UpdateTTL", Value::map()),
        Case::new(
            "IPChecksum (compute)",
            "ip_checksum",
            "IPChecksum",
            Value::map(),
        ),
        Case::new(
            "L4Checksum (compute, UDP)",
            "l4_checksum",
            "L4Checksum",
            Value::map(),
        ),
        Case::new(
            format!("NAT int->ext, {nat_flows} flows"),
            format!("nat_{nat_flows}"),
            "NAT",
            Value::map().with(
                "ext_addrs",
                (1..=4u32)
                    .map(|i| {
                        Value::map().with("ext_addr", ip4(0xcb00_7100 | i)).with(
                            "port_ranges",
                            vec![Value::map().with("begin", 1024u64).with("end", 65535u64)],
                        )
                    })
                    .collect::<Vec<Value>>(),
            ),
        )
        .stream(26, 12, {
            let mut rng = FastRng::new(0x4a7);
            let flows: Vec<[u8; 12]> = (0..nat_flows)
                .map(|_| {
                    let (a, b) = (rng.next_u64(), rng.next_u64());
                    flow_rec(
                        0x0a00_0000 | (a as u32 & 0xffff),
                        0x0808_0000 | ((a >> 32) as u32 & 0xffff),
                        1024 + b as u16 % 60000,
                        if b >> 63 == 0 { 53 } else { 443 },
                    )
                })
                .collect();
            records(0x4a8, stream_len(nat_flows), 12, |rng, r| {
                r.copy_from_slice(&flows[rng.below(nat_flows as u64) as usize])
            })
        })
        .note(
            "NAT: packets on input 0 (internal -> external) from 100 000 flows (random internal \
             source address and port) over 4 external addresses; mappings are made in the \
             warm-up, so the runs measure lookups and rewrites",
        ),
        Case::new(
            "StaticNAT int->ext, one /16 pair",
            "static_nat",
            "StaticNAT",
            Value::map().with(
                "pairs",
                vec![Value::map()
                    .with(
                        "int_range",
                        Value::map()
                            .with("start", "10.0.0.0")
                            .with("end", "10.0.255.255"),
                    )
                    .with(
                        "ext_range",
                        Value::map()
                            .with("start", "198.18.0.0")
                            .with("end", "198.18.255.255"),
                    )],
            ),
        )
        .stream(
            26,
            4,
            records(0x5a7, 1 << 16, 4, |rng, r| {
                r.copy_from_slice(&(0x0a00_0000 | (rng.next_u64() as u32 & 0xffff)).to_be_bytes())
            }),
        ),
        // Timestamps.
        Case::new(
            "Timestamp (offset 42)",
            "timestamp",
            "Timestamp",
            Value::map().with("offset", 42),
        ),
        Case::new(
            "Measure (offset 42)",
            "measure",
            "Measure",
            Value::map().with("offset", 42),
        )
        .pre("Timestamp", Value::map().with("offset", 42))
        .note("Measure: after a Timestamp at the same offset (in the baseline too)"),
        // Encapsulation.
        Case::new("EtherEncap", "ether_encap", "EtherEncap", Value::map())
            .pre(
                "SetMetadata",
                set_md(&[
                    ("ether_src", 6, mac1),
                    ("ether_dst", 6, mac2),
                    ("ether_type", 2, &[0x08, 0x00]),
                ]),
            )
            .note(METADATA_NOTE),
        Case::new("IPEncap", "ip_encap", "IPEncap", Value::map())
            .pre(
                "SetMetadata",
                set_md(&[
                    ("ip_src", 4, &[10, 0, 0, 1]),
                    ("ip_dst", 4, &[10, 0, 0, 2]),
                    ("ip_proto", 1, &[17]),
                ]),
            )
            .post(
                "MetadataTest",
                md_test("read", &[("ip_nexthop", 4), ("ether_type", 2)]),
            )
            .note(METADATA_NOTE),
        Case::new(
            "VXLANEncap",
            "vxlan_encap",
            "VXLANEncap",
            Value::map().with("dstport", 4789u64),
        )
        .pre(
            "SetMetadata",
            set_md(&[
                ("tun_ip_src", 4, &[192, 168, 0, 1]),
                ("tun_ip_dst", 4, &[192, 168, 0, 2]),
                ("tun_id", 4, &[0, 0, 0, 100]),
            ]),
        )
        .post(
            "MetadataTest",
            md_test("read", &[("ip_src", 4), ("ip_dst", 4), ("ip_proto", 1)]),
        )
        .note(METADATA_NOTE),
        Case::new(
            "VXLANDecap (110-byte VXLAN frames)",
            "vxlan_decap",
            "VXLANDecap",
            Value::map(),
        )
        .template(vxlan_template())
        .post(
            "MetadataTest",
            md_test(
                "read",
                &[("tun_ip_src", 4), ("tun_ip_dst", 4), ("tun_id", 4)],
            ),
        )
        .note(METADATA_NOTE),
        Case::new(
            "GenericEncap 3 fields (8 bytes)",
            "generic_encap",
            "GenericEncap",
            Value::map().with(
                "fields",
                vec![
                    Value::map()
                        .with("size", 4u64)
                        .with("value", Value::map().with("value_int", 0xdead_beefu64)),
                    Value::map().with("size", 2u64).with("attribute", "foo"),
                    Value::map()
                        .with("size", 2u64)
                        .with("value", Value::map().with("value_int", 0x1234u64)),
                ],
            ),
        )
        .pre("SetMetadata", set_md(&[("foo", 2, &[0xab, 0xcd])]))
        .note(METADATA_NOTE),
        Case::new(
            "GenericDecap 14 bytes",
            "generic_decap",
            "GenericDecap",
            Value::map().with("bytes", 14u64),
        ),
        Case::new(
            "VLANPush",
            "vlan_push",
            "VLANPush",
            Value::map().with("tci", 100u64),
        ),
        Case::new(
            "VLANPop (64-byte tagged frames)",
            "vlan_pop",
            "VLANPop",
            Value::map(),
        )
        .template(vlan_template()),
        Case::new(
            "VLANSplit (64-byte tagged, VIDs 0-3)",
            "vlan_split",
            "VLANSplit",
            Value::map(),
        )
        .template(vlan_template())
        .stream(
            14,
            2,
            records(0x715, 1 << 16, 2, |rng, r| {
                r.copy_from_slice(&(rng.below(GATES) as u16).to_be_bytes())
            }),
        ),
        Case::new(
            "MPLSPop (64-byte MPLS frames)",
            "mpls_pop",
            "MPLSPop",
            Value::map().with("next_eth_type", 0x0800u64),
        )
        .template(mpls_template()),
        // Classification without a table.
        Case::new(
            "HashLB l2, 4 gates",
            "hash_lb_l2",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l2"),
        )
        .stream(
            0,
            12,
            records(0x4b2, 1 << 16, 12, |rng, r| {
                r[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                r[8..].copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                r[0] &= 0xfe;
                r[6] &= 0xfe;
            }),
        ),
        Case::new(
            "HashLB l3, 4 gates",
            "hash_lb_l3",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l3"),
        )
        .stream(26, 12, random_flows(0x4b3)),
        Case::new(
            "HashLB l4, 4 gates",
            "hash_lb_l4",
            "HashLB",
            Value::map()
                .with("gates", gate_list(GATES))
                .with("mode", "l4"),
        )
        .stream(26, 12, random_flows(0x4b4)),
        Case::new(
            "UrlFilter, UDP (not inspected)",
            "url_filter_udp",
            "UrlFilter",
            url_filter_arg(),
        )
        .stream(26, 12, random_flows(0x0f1)),
        Case::new(
            "UrlFilter, TCP of flows never seen",
            "url_filter_tcp",
            "UrlFilter",
            url_filter_arg(),
        )
        .template(tcp_template())
        .stream(26, 12, random_flows(0x0f2))
        .note(
            "UrlFilter: the non-HTTP paths on input 0: UDP (parsed, passed) and TCP ACKs of \
             flows whose SYN it never saw (parsed, one flow-table miss, passed)",
        ),
    ]
}

fn url_filter_arg() -> Value {
    Value::map().with(
        "blacklist",
        vec![Value::map()
            .with("host", "example.com")
            .with("path", "/secret")],
    )
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

//! `bessemer-planner`: shows a NIC model's PRG, runs a policy over a flow list and prints
//! the chosen configuration and the per-queue specialised pipelines (text or Graphviz).

use bessemer_planner::embed::{demo_pipeline, specialise};
use bessemer_planner::graph::{Dest, ModelError};
use bessemer_planner::nic::{configured_prg, FlowSpec, Intel82599, NicModel, Sfc9020, XdpPort};
use bessemer_planner::pred::{ip_str, proto_name, Header, PROTO_TCP, PROTO_UDP};
use bessemer_planner::search::{
    full_search_from, generate_flows, Balance, Bandwidth, CostFn, FlowMapMode, Isolation, Planner,
};
use bessemer_planner::testbed::{self, Steering};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bessemer-planner",
    about = "Dragonet-style NIC planner: PRG models, policies, per-queue pipelines"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a NIC model's unconfigured PRG (c-nodes and their configuration spaces).
    Show {
        #[command(flatten)]
        nic: NicArgs,
        /// Graphviz instead of text.
        #[arg(long)]
        dot: bool,
    },
    /// Run a policy over flows; print the configuration and the per-queue pipelines.
    Plan {
        #[command(flatten)]
        nic: NicArgs,
        #[command(flatten)]
        plan: PlanArgs,
        /// Graphviz (configured PRG and per-queue pipelines) instead of text.
        #[arg(long)]
        dot: bool,
        /// With --nic ethtool: print the ethtool commands that apply the plan (not run).
        #[arg(long)]
        ethtool_commands: bool,
    },
    /// Plan, then apply the configuration. With --nic ethtool, to the interface itself
    /// (RSS table, ntuple rules, TX queue rates; --channels first). With --nic 82599 or
    /// sfc9020, to a veth testbed: a TCX program on the sending veth end (--iface, --netns)
    /// steers each packet to the RX queue of the peer that the NIC would choose. Applying
    /// again updates it in place.
    Apply {
        #[command(flatten)]
        nic: NicArgs,
        #[command(flatten)]
        plan: PlanArgs,
        /// With --nic ethtool: set this many channels (queue pairs) before planning.
        #[arg(long)]
        channels: Option<u16>,
    },
    /// Undo apply: remove the testbed's steering program from a veth end, or with --nic
    /// ethtool delete the interface's ntuple rules, restore the driver's default RSS table
    /// and lift TX queue rates.
    Unapply {
        /// Interface (for the testbed, the sending veth end).
        #[arg(long)]
        iface: String,
        /// Its network namespace.
        #[arg(long)]
        netns: Option<String>,
        /// What apply configured: the testbed (default) or a NIC through ethtool.
        #[arg(long, value_enum, default_value = "testbed")]
        nic: UnapplyKind,
    },
}

/// What the search needs: the policy and the flows.
#[derive(Args)]
struct PlanArgs {
    /// Policy (cost function).
    #[arg(long, value_enum, default_value = "balance")]
    policy: Policy,
    /// Queues reserved for high-priority flows (isolation, bandwidth).
    #[arg(long, default_value_t = 1)]
    hp_queues: u16,
    /// Weight of high-priority bandwidth mismatch (bandwidth).
    #[arg(long, default_value_t = 10.0)]
    hp_penalty: f64,
    /// Flow file: lines "udp 10.0.0.1:1234 10.1.0.1:11211 [hp] [bw=MBPS]".
    #[arg(long, conflicts_with = "generate")]
    flows: Option<std::path::PathBuf>,
    /// Generate N flows instead (clients of one UDP server).
    #[arg(long)]
    generate: Option<usize>,
    /// With --generate: every Mth flow is high-priority (0: none).
    #[arg(long, default_value_t = 0)]
    hp_every: usize,
    /// With --generate: bandwidth each flow asks for, Mb/s.
    #[arg(long, default_value_t = 0)]
    bw: u32,
    /// With --generate: seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Moves the local search may make after the greedy pass.
    #[arg(long, default_value_t = 100)]
    local_moves: usize,
    /// Compute flow maps without incrementality (slow; for comparison).
    #[arg(long)]
    basic: bool,
    /// Turn RSS off: unmatched traffic stays on the default queue, so queues that only
    /// filters feed can be specialised.
    #[arg(long)]
    rss_off: bool,
}

#[derive(Args)]
struct NicArgs {
    /// NIC model.
    #[arg(long, value_enum, default_value = "82599")]
    nic: NicKind,
    /// RX queues.
    #[arg(long, default_value_t = 4)]
    queues: u16,
    /// Interface to read with ethtool (--nic ethtool); for apply, the sending veth end.
    #[arg(long)]
    iface: Option<String>,
    /// Network namespace of the interface.
    #[arg(long)]
    netns: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum NicKind {
    #[value(name = "82599")]
    I82599,
    Sfc9020,
    Xdp,
    Ethtool,
}

#[derive(Clone, Copy, ValueEnum)]
enum UnapplyKind {
    Testbed,
    Ethtool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Policy {
    Balance,
    Isolation,
    Bandwidth,
}

fn model(a: &NicArgs) -> Result<Box<dyn NicModel>, ModelError> {
    if a.queues == 0 || a.queues > 256 {
        return Err(ModelError::Input(format!(
            "--queues {}: 1 to 256",
            a.queues
        )));
    }
    Ok(match a.nic {
        NicKind::I82599 => Box::new(Intel82599 { queues: a.queues }),
        NicKind::Sfc9020 => Box::new(Sfc9020 { queues: a.queues }),
        NicKind::Xdp => Box::new(XdpPort {
            queues: a.queues,
            map_entries: 1024,
        }),
        NicKind::Ethtool => {
            let iface = a
                .iface
                .as_deref()
                .ok_or_else(|| ModelError::Input("--nic ethtool needs --iface".into()))?;
            Box::new(bessemer_planner::ethtool::read_interface(
                iface,
                a.netns.as_deref(),
            )?)
        }
    })
}

fn parse_endpoint(s: &str) -> Option<(u32, u32)> {
    let (ip, port) = s.rsplit_once(':')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let port: u16 = port.parse().ok()?;
    Some((u32::from(ip), port as u32))
}

/// Parses a flow file: "PROTO SRC:PORT DST:PORT [hp] [bw=MBPS]" per line, # comments.
fn parse_flows(path: &std::path::Path) -> Result<Vec<FlowSpec>, ModelError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ModelError::Input(format!("{}: {e}", path.display())))?;
    let mut flows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err =
            |what: String| ModelError::Input(format!("{} line {}: {what}", path.display(), n + 1));
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 3 {
            return Err(err(format!(
                "expected 'PROTO SRC:PORT DST:PORT', got {line:?}"
            )));
        }
        let proto = match words[0] {
            "udp" => PROTO_UDP,
            "tcp" => PROTO_TCP,
            p => return Err(err(format!("protocol {p:?} (udp or tcp)"))),
        };
        let (sip, sport) =
            parse_endpoint(words[1]).ok_or_else(|| err(format!("bad endpoint {:?}", words[1])))?;
        let (dip, dport) =
            parse_endpoint(words[2]).ok_or_else(|| err(format!("bad endpoint {:?}", words[2])))?;
        let mut f = FlowSpec {
            header: Header::ipv4(proto, sip, dip, sport, dport),
            hp: false,
            bw_mbps: 0,
        };
        for w in &words[3..] {
            if *w == "hp" {
                f.hp = true;
            } else if let Some(v) = w.strip_prefix("bw=") {
                f.bw_mbps = v.parse().map_err(|_| err(format!("bad bandwidth {v:?}")))?;
            } else {
                return Err(err(format!("unknown attribute {w:?} (hp, bw=MBPS)")));
            }
        }
        flows.push(f);
    }
    if flows.is_empty() {
        return Err(ModelError::Input(format!("{}: no flows", path.display())));
    }
    Ok(flows)
}

fn run(cli: Cli) -> Result<(), ModelError> {
    match cli.cmd {
        Cmd::Show { nic, dot } => {
            let m = model(&nic)?;
            let g = m.unconfigured();
            if dot {
                print!("{}", g.to_dot());
            } else {
                println!("NIC model {} ({} queues)", m.name(), m.queues());
                println!("configuration space:");
                for c in m.config_space() {
                    println!("  {c}");
                }
                print!("{}", g.to_text());
            }
        }
        Cmd::Plan {
            nic,
            plan,
            dot,
            ethtool_commands,
        } => {
            let m = model(&nic)?;
            let (flows, cost, mode) = search_inputs(&plan)?;
            let t = std::time::Instant::now();
            let p = search(m.as_ref(), cost.as_ref(), mode, &plan, &flows)?;
            let took = t.elapsed();
            let prg = configured_prg(m.as_ref(), &p.cfg)?;
            if ethtool_commands {
                let NicKind::Ethtool = nic.nic else {
                    return Err(ModelError::Input(
                        "--ethtool-commands needs --nic ethtool".into(),
                    ));
                };
                let caps = bessemer_planner::ethtool::read_interface(
                    nic.iface.as_deref().unwrap_or_default(),
                    nic.netns.as_deref(),
                )?;
                for c in bessemer_planner::ethtool::commands(&caps, &p.cfg)? {
                    println!("{c}");
                }
                return Ok(());
            }
            let mut services: Vec<(u32, u32, u32)> = flows
                .iter()
                .map(|f| {
                    let h = &f.header;
                    (
                        h.get(bessemer_planner::pred::Field::IpProto),
                        h.get(bessemer_planner::pred::Field::DstIp),
                        h.get(bessemer_planner::pred::Field::DstPort),
                    )
                })
                .collect();
            services.sort_unstable();
            services.dedup();
            let lpg = demo_pipeline(&services, &[(0x0a00_0000, 8), (0xc0a8_0000, 16)]);
            let queues = specialise(&prg, &lpg);
            if dot {
                let g = prg.to_dot();
                let mut s = g.trim_end().trim_end_matches('}').to_string();
                for q in &queues {
                    s.push_str(&q.pipeline.to_dot(
                        &format!("q{}", dest_index(q.dest)),
                        &format!("pipeline on {}", q.dest),
                    ));
                }
                s.push_str("}\n");
                print!("{s}");
                return Ok(());
            }
            println!(
                "NIC {} ({} queues), policy {}, {} flows, {:?} flow maps, search took {:.3} ms",
                m.name(),
                m.queues(),
                cost.name(),
                flows.len(),
                mode,
                took.as_secs_f64() * 1e3
            );
            println!(
                "verdict: {:?}; {} candidate changes scored, {} local-search moves",
                p.verdict(),
                p.stats.evaluations,
                p.stats.local_moves
            );
            println!("configuration ({} filters):", p.cfg.filters.len());
            for f in &p.cfg.filters {
                println!("  {f}");
            }
            if !p.cfg.rss.is_empty() {
                println!("  RSS: {}-entry indirection table", p.cfg.rss.len());
            }
            for (q, l) in p.cfg.limits.iter().enumerate() {
                if let Some(r) = l {
                    let how = if m.hw_rate_limiters() {
                        "hardware TX limiter"
                    } else {
                        "software token bucket"
                    };
                    println!("  Q{q}: rate limit {r} Mb/s ({how})");
                }
            }
            println!("flow map:");
            for (i, l) in p.qmap.loads.iter().enumerate() {
                println!(
                    "  Q{i}: {} flows ({} high-priority, {} best-effort), {} Mb/s requested",
                    l.flows, l.hp, l.be, l.bw
                );
            }
            if flows.len() <= 20 {
                for (id, f) in p.flows() {
                    let d = p.qmap.flow_dest[id]
                        .map(|d| d.to_string())
                        .unwrap_or_default();
                    println!(
                        "    {} {}:{} -> {}:{}{} => {d}",
                        proto_name(f.header.get(bessemer_planner::pred::Field::IpProto)),
                        ip_str(f.header.get(bessemer_planner::pred::Field::SrcIp)),
                        f.header.get(bessemer_planner::pred::Field::SrcPort),
                        ip_str(f.header.get(bessemer_planner::pred::Field::DstIp)),
                        f.header.get(bessemer_planner::pred::Field::DstPort),
                        if f.hp { " hp" } else { "" }
                    );
                }
            }
            println!("per-queue pipelines:");
            for q in &queues {
                let g = &q.guard;
                let shown: Vec<String> = g.terms.iter().take(2).map(|t| t.to_string()).collect();
                println!(
                    "queue {}: guarantee has {} term(s){}{}",
                    q.dest,
                    g.terms.len(),
                    if shown.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", shown.join(" | "))
                    },
                    if g.terms.len() > 2 { " | ..." } else { "" }
                );
                println!(
                    "  pruned: {} rules, {} modules removed{}",
                    q.stats.rules_removed,
                    q.stats.modules_removed,
                    if q.dest == Dest::Queue(0) {
                        " (default queue: never pruned)"
                    } else {
                        ""
                    }
                );
                print!("{}", q.pipeline.to_text());
            }
        }
        Cmd::Apply {
            nic,
            plan,
            channels,
        } => {
            if matches!(nic.nic, NicKind::Ethtool) {
                apply_ethtool(&nic, &plan, channels)?
            } else if channels.is_some() {
                return Err(ModelError::Input("--channels needs --nic ethtool".into()));
            } else {
                apply(&nic, &plan)?
            }
        }
        Cmd::Unapply {
            iface,
            netns,
            nic: UnapplyKind::Ethtool,
        } => {
            let done = bessemer_planner::ethtool::reset(&iface, netns.as_deref())?;
            if done.is_empty() {
                println!("{iface}: nothing to undo");
            }
            for d in done {
                println!("{iface}: {d}");
            }
        }
        Cmd::Unapply {
            iface,
            netns,
            nic: UnapplyKind::Testbed,
        } => {
            let ns = netns.as_deref().unwrap_or("");
            match Steering::find(&iface, ns)? {
                Some(s) => {
                    s.detach()?;
                    println!("{iface}: steering program detached");
                }
                None => {
                    return Err(ModelError::Input(format!(
                        "{iface} has no testbed steering program (nothing to unapply)"
                    )))
                }
            }
        }
    }
    Ok(())
}

type SearchInputs = (Vec<FlowSpec>, Box<dyn CostFn>, FlowMapMode);

fn search_inputs(a: &PlanArgs) -> Result<SearchInputs, ModelError> {
    let flows = match (&a.flows, a.generate) {
        (Some(p), _) => parse_flows(p)?,
        (None, Some(n)) if n > 0 && n <= 100_000 => generate_flows(n, a.seed, a.hp_every, a.bw),
        (None, Some(n)) => return Err(ModelError::Input(format!("--generate {n}: 1 to 100000"))),
        (None, None) => {
            return Err(ModelError::Input(
                "give --flows FILE or --generate N".into(),
            ))
        }
    };
    let cost: Box<dyn CostFn> = match a.policy {
        Policy::Balance => Box::new(Balance),
        Policy::Isolation => Box::new(Isolation { k: a.hp_queues }),
        Policy::Bandwidth => Box::new(Bandwidth {
            k: a.hp_queues,
            hp_penalty: a.hp_penalty,
        }),
    };
    let mode = if a.basic {
        FlowMapMode::Basic
    } else {
        FlowMapMode::Incremental
    };
    Ok((flows, cost, mode))
}

fn search<'a>(
    m: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    mode: FlowMapMode,
    a: &PlanArgs,
    flows: &[FlowSpec],
) -> Result<Planner<'a>, ModelError> {
    let mut initial = m.initial_config();
    if a.rss_off {
        initial.rss.clear();
    }
    full_search_from(m, cost, mode, initial, flows, a.local_moves)
}

/// `apply`: checks what can be checked before touching anything (the programs were built,
/// root, the interface and its queues), plans, then writes the configuration.
fn apply(nic: &NicArgs, plan: &PlanArgs) -> Result<(), ModelError> {
    if !matches!(nic.nic, NicKind::I82599 | NicKind::Sfc9020) {
        return Err(ModelError::Input(
            "apply emulates --nic 82599 or --nic sfc9020 on a veth testbed".into(),
        ));
    }
    let iface = nic
        .iface
        .as_deref()
        .ok_or_else(|| ModelError::Input("apply needs --iface (the sending veth end)".into()))?;
    let ns = nic.netns.as_deref().unwrap_or("");
    if let Some(why) = testbed::unavailable() {
        return Err(ModelError::Input(why));
    }
    let existing = Steering::find(iface, ns)?;
    let have = bessemer_planner::ethtool::read_interface(iface, nic.netns.as_deref())?.queues;
    if have < nic.queues {
        return Err(ModelError::Input(format!(
            "{iface} has {have} queue(s) in use, the plan needs {} (ethtool -L {iface} tx {} rx {} on both ends)",
            nic.queues, nic.queues, nic.queues
        )));
    }
    let m = model(nic)?;
    let (flows, cost, mode) = search_inputs(plan)?;
    let p = search(m.as_ref(), cost.as_ref(), mode, plan, &flows)?;
    let t = testbed::tables(m.as_ref(), &p.cfg)?;
    let (s, how) = match existing {
        Some(s) => (s, "updated"),
        None => (Steering::attach(iface, ns, true)?, "attached"),
    };
    s.apply(&t)?;
    println!(
        "{iface}: steering program {how} at TCX egress, emulating {} with {} queues",
        m.name(),
        m.queues()
    );
    println!(
        "  {} ordered filter(s), {}, RSS {}",
        t.ordered.len(),
        t.tables
            .iter()
            .map(|x| format!("{} in a hash table", x.entries.len()))
            .collect::<Vec<_>>()
            .join(", "),
        if t.rss.is_empty() {
            "off (unmatched: Q0)".to_string()
        } else {
            format!("over a {}-entry table", t.rss.len())
        }
    );
    println!("verdict: {:?}; flow map:", p.verdict());
    for (i, l) in p.qmap.loads.iter().enumerate() {
        println!(
            "  Q{i}: {} flows ({} high-priority, {} best-effort)",
            l.flows, l.hp, l.be
        );
    }
    println!(
        "remove it with: bessemer-planner unapply --iface {iface}{}",
        nic.netns
            .as_deref()
            .map(|n| format!(" --netns {n}"))
            .unwrap_or_default()
    );
    Ok(())
}

/// `apply --nic ethtool`: channels first (the queues the plan may use), then the plan
/// on the interface itself.
fn apply_ethtool(nic: &NicArgs, plan: &PlanArgs, channels: Option<u16>) -> Result<(), ModelError> {
    let iface = nic
        .iface
        .as_deref()
        .ok_or_else(|| ModelError::Input("--nic ethtool needs --iface".into()))?;
    let netns = nic.netns.as_deref();
    if let Some(n) = channels {
        if n == 0 || n > 256 {
            return Err(ModelError::Input(format!("--channels {n}: 1 to 256")));
        }
        bessemer_planner::ethtool::set_channels(iface, netns, n)?;
        println!("{iface}: {n} channels");
    }
    let caps = bessemer_planner::ethtool::read_interface(iface, netns)?;
    let (flows, cost, mode) = search_inputs(plan)?;
    let p = search(&caps, cost.as_ref(), mode, plan, &flows)?;
    let done = bessemer_planner::ethtool::apply(&caps, netns, &p.cfg)?;
    for s in &done.done {
        println!("{iface}: {s}");
    }
    if !done.removed.is_empty() {
        println!(
            "{iface}: earlier ntuple rules removed at locations {:?}",
            done.removed
        );
    }
    println!(
        "{iface}: {} with {} queues: {} ntuple rule(s), RSS {}, {} TX rate(s); verdict {:?}",
        caps.name(),
        caps.queues,
        p.cfg.filters.len(),
        if p.cfg.rss.is_empty() && caps.rss_size > 0 {
            "off (unmatched traffic to Q0)".to_string()
        } else if p.cfg.rss.is_empty() {
            "none (the driver reports no table)".to_string()
        } else {
            format!("over {} entries", p.cfg.rss.len())
        },
        p.cfg.limits.iter().flatten().count(),
        p.verdict()
    );
    for (i, l) in p.qmap.loads.iter().enumerate() {
        println!(
            "  Q{i}: {} flows ({} high-priority, {} best-effort)",
            l.flows, l.hp, l.be
        );
    }
    println!(
        "remove it with: bessemer-planner unapply --nic ethtool --iface {iface}{}",
        netns.map(|n| format!(" --netns {n}")).unwrap_or_default()
    );
    Ok(())
}

fn dest_index(d: Dest) -> String {
    match d {
        Dest::Queue(q) => q.to_string(),
        Dest::Drop => "drop".into(),
        Dest::Kernel => "kernel".into(),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bessemer-planner: {e}");
            ExitCode::from(2)
        }
    }
}

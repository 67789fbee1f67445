//! `bessemer-planner`: shows a NIC model's PRG, runs a policy over a flow list and prints
//! the chosen configuration and the per-queue specialised pipelines (text or Graphviz).
//! `apply` and `unapply` change an interface: on SIGINT or SIGTERM they stop before their
//! next step, undo what this run applied, and end as killed by the signal.

use bessemer_planner::graph::ModelError;
use bessemer_planner::interrupt;
use bessemer_planner::nic::NicModel;
use bessemer_planner::request::{self, SearchOptions};
use bessemer_planner::search::{CostFn, Planner};
use bessemer_planner::testbed::{self, Steering};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bessemer-planner",
    version,
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
    /// Weight of high-priority bandwidth mismatch (bandwidth), 0 or more.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
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

fn nic_name(k: NicKind) -> &'static str {
    match k {
        NicKind::I82599 => "82599",
        NicKind::Sfc9020 => "sfc9020",
        NicKind::Xdp => "xdp",
        NicKind::Ethtool => "ethtool",
    }
}

fn model(a: &NicArgs) -> Result<Box<dyn NicModel>, ModelError> {
    request::model(
        nic_name(a.nic),
        a.queues,
        a.iface.as_deref(),
        a.netns.as_deref(),
    )
}

fn run(cli: Cli) -> Result<(), ModelError> {
    match cli.cmd {
        Cmd::Show { nic, dot } => print!("{}", request::show(model(&nic)?.as_ref(), dot)),
        Cmd::Plan {
            nic,
            plan,
            dot,
            ethtool_commands,
        } => {
            let m = model(&nic)?;
            let (flows, cost, o) = search_inputs(&plan)?;
            let t = std::time::Instant::now();
            let p = request::search(m.as_ref(), cost.as_ref(), &flows, &o)?;
            let took = t.elapsed();
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
            let lpg = request::demo_for(&flows);
            if dot {
                print!("{}", request::plan_dot(m.as_ref(), &p, &lpg)?);
            } else {
                print!(
                    "{}",
                    request::plan_text(
                        m.as_ref(),
                        cost.as_ref(),
                        &p,
                        &flows,
                        &lpg,
                        took.as_secs_f64() * 1e3
                    )?
                );
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

type SearchInputs = (
    Vec<bessemer_planner::nic::FlowSpec>,
    Box<dyn CostFn>,
    SearchOptions,
);

fn search_inputs(a: &PlanArgs) -> Result<SearchInputs, ModelError> {
    let text = match &a.flows {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| ModelError::Input(format!("{}: {e}", p.display())))?,
        ),
        None => None,
    };
    let origin = a.flows.as_ref().map(|p| p.display().to_string());
    let flows = request::flows(
        text.as_deref().zip(origin.as_deref()),
        a.generate,
        a.seed,
        a.hp_every,
        a.bw,
    )?;
    let policy = match a.policy {
        Policy::Balance => "balance",
        Policy::Isolation => "isolation",
        Policy::Bandwidth => "bandwidth",
    };
    let cost = request::policy(policy, a.hp_queues, a.hp_penalty)?;
    let o = SearchOptions {
        local_moves: a.local_moves,
        basic: a.basic,
        rss_off: a.rss_off,
    };
    Ok((flows, cost, o))
}

fn search<'a>(
    m: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    o: &SearchOptions,
    flows: &[bessemer_planner::nic::FlowSpec],
) -> Result<Planner<'a>, ModelError> {
    request::search(m, cost, flows, o)
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
    let (flows, cost, o) = search_inputs(plan)?;
    let p = search(m.as_ref(), cost.as_ref(), &o, &flows)?;
    let t = testbed::tables(m.as_ref(), &p.cfg)?;
    // The search may take a while; nothing is on the interface yet.
    interrupt::check().map_err(ModelError::Input)?;
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
    let (flows, cost, o) = search_inputs(plan)?;
    let p = search(&caps, cost.as_ref(), &o, &flows)?;
    // ethtool::apply checks for a signal before each step and undoes what ran.
    interrupt::check().map_err(ModelError::Input)?;
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

fn main() -> ExitCode {
    bessemer_clidoc::generate_if_asked(Cli::command);
    let cli = Cli::parse();
    // Only the commands that change an interface hold signals back until they have undone
    // their work; show and plan die at once, as there is nothing to undo.
    if matches!(cli.cmd, Cmd::Apply { .. } | Cmd::Unapply { .. }) {
        if let Err(e) = interrupt::install() {
            eprintln!("bessemer-planner: {e}");
            return ExitCode::from(2);
        }
    }
    let code = match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bessemer-planner: {e}");
            ExitCode::from(2)
        }
    };
    interrupt::exit_if_signalled();
    code
}

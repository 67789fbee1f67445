//! One planning request as users give it (the `bessemer-planner` CLI, the daemon's `PlanNic`
//! call, scripts): which NIC model, which policy, which flows, which pipeline; and the
//! reports both print, so the CLI and the daemon answer the same way.

use crate::embed::{demo_pipeline, specialise, Lpg, QueuePipeline};
use crate::graph::{Dest, ModelError};
use crate::nic::{configured_prg, FlowSpec, Intel82599, NicModel, Sfc9020, XdpPort, I82599_QUEUES};
use crate::pred::{ip_str, proto_name, Field, Header, PROTO_TCP, PROTO_UDP};
use crate::search::{
    full_search_from, generate_flows, Balance, Bandwidth, CostFn, FlowMapMode, Isolation, Planner,
};
use std::fmt::Write as _;

/// NIC models by the names users give them.
pub const NIC_NAMES: &[&str] = &["82599", "sfc9020", "xdp", "ethtool"];
/// Policies by name.
pub const POLICY_NAMES: &[&str] = &["balance", "isolation", "bandwidth"];

/// Builds a NIC model: `ethtool` reads the interface (optionally in a namespace).
pub fn model(
    nic: &str,
    queues: u16,
    iface: Option<&str>,
    netns: Option<&str>,
) -> Result<Box<dyn NicModel>, ModelError> {
    if queues == 0 || queues > 256 {
        return Err(ModelError::Input(format!("--queues {queues}: 1 to 256")));
    }
    Ok(match nic {
        "82599" if queues > I82599_QUEUES => {
            return Err(ModelError::Input(format!(
                "--queues {queues}: the 82599 has {I82599_QUEUES} queues"
            )))
        }
        "82599" => Box::new(Intel82599 { queues }),
        "sfc9020" => Box::new(Sfc9020 { queues }),
        "xdp" => Box::new(XdpPort {
            queues,
            map_entries: 1024,
        }),
        "ethtool" => {
            let iface =
                iface.ok_or_else(|| ModelError::Input("--nic ethtool needs --iface".into()))?;
            Box::new(crate::ethtool::read_interface(iface, netns)?)
        }
        other => {
            return Err(ModelError::Input(format!(
                "unknown NIC model {other:?} (one of {})",
                NIC_NAMES.join(", ")
            )))
        }
    })
}

/// A policy (cost function) by name.
pub fn policy(name: &str, hp_queues: u16, hp_penalty: f64) -> Result<Box<dyn CostFn>, ModelError> {
    Ok(match name {
        "balance" => Box::new(Balance),
        "isolation" => Box::new(Isolation { k: hp_queues }),
        "bandwidth" => Box::new(Bandwidth {
            k: hp_queues,
            hp_penalty,
        }),
        other => {
            return Err(ModelError::Input(format!(
                "unknown policy {other:?} (one of {})",
                POLICY_NAMES.join(", ")
            )))
        }
    })
}

fn parse_endpoint(s: &str) -> Option<(u32, u32)> {
    let (ip, port) = s.rsplit_once(':')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let port: u16 = port.parse().ok()?;
    Some((u32::from(ip), port as u32))
}

/// Parses flows, one per line: "PROTO SRC:PORT DST:PORT [hp] [bw=MBPS]", `#` comments.
/// `origin` names the source in errors (a file name, "flows").
pub fn parse_flows(text: &str, origin: &str) -> Result<Vec<FlowSpec>, ModelError> {
    let mut flows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |what: String| ModelError::Input(format!("{origin} line {}: {what}", n + 1));
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
        return Err(ModelError::Input(format!("{origin}: no flows")));
    }
    Ok(flows)
}

/// Flows given or generated: exactly one of `lines` (parsed) or `generate` (N clients of
/// one UDP server, every `hp_every`th high-priority, each asking `bw` Mb/s).
pub fn flows(
    lines: Option<(&str, &str)>,
    generate: Option<usize>,
    seed: u64,
    hp_every: usize,
    bw: u32,
) -> Result<Vec<FlowSpec>, ModelError> {
    match (lines, generate) {
        (Some((text, origin)), None) => parse_flows(text, origin),
        (None, Some(n)) if n > 0 && n <= 100_000 => Ok(generate_flows(n, seed, hp_every, bw)),
        (None, Some(n)) => Err(ModelError::Input(format!("--generate {n}: 1 to 100000"))),
        (Some(_), Some(_)) => Err(ModelError::Input(
            "give flows or --generate N, not both".into(),
        )),
        (None, None) => Err(ModelError::Input(
            "give --flows FILE or --generate N".into(),
        )),
    }
}

/// How the search runs.
#[derive(Clone, Copy, Debug)]
pub struct SearchOptions {
    /// Moves the local search may make after the greedy pass.
    pub local_moves: usize,
    /// Flow maps without incrementality.
    pub basic: bool,
    /// RSS off: unmatched traffic stays on the default queue.
    pub rss_off: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            local_moves: 100,
            basic: false,
            rss_off: false,
        }
    }
}

impl SearchOptions {
    /// Incremental or basic flow maps.
    pub fn mode(&self) -> FlowMapMode {
        if self.basic {
            FlowMapMode::Basic
        } else {
            FlowMapMode::Incremental
        }
    }
}

/// Runs the policy's search over the flows.
pub fn search<'a>(
    m: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    flows: &[FlowSpec],
    o: &SearchOptions,
) -> Result<Planner<'a>, ModelError> {
    let mut initial = m.initial_config();
    if o.rss_off {
        initial.rss.clear();
    }
    full_search_from(m, cost, o.mode(), initial, flows, o.local_moves)
}

/// The demonstration pipeline for a flow list: one ExactMatch service per (protocol,
/// destination, port) of the flows, and routes for 10/8 and 192.168/16.
pub fn demo_for(flows: &[FlowSpec]) -> Lpg {
    let mut services: Vec<(u32, u32, u32)> = flows
        .iter()
        .map(|f| {
            let h = &f.header;
            (
                h.get(Field::IpProto),
                h.get(Field::DstIp),
                h.get(Field::DstPort),
            )
        })
        .collect();
    services.sort_unstable();
    services.dedup();
    demo_pipeline(&services, &[(0x0a00_0000, 8), (0xc0a8_0000, 16)])
}

/// A model's unconfigured PRG with its configuration space (text) or as Graphviz.
pub fn show(m: &dyn NicModel, dot: bool) -> String {
    let g = m.unconfigured();
    if dot {
        return g.to_dot();
    }
    let mut s = format!(
        "NIC model {} ({} queues)\nconfiguration space:\n",
        m.name(),
        m.queues()
    );
    for c in m.config_space() {
        let _ = writeln!(s, "  {c}");
    }
    s.push_str(&g.to_text());
    s
}

fn dest_index(d: Dest) -> String {
    match d {
        Dest::Queue(q) => q.to_string(),
        Dest::Drop => "drop".into(),
        Dest::Kernel => "kernel".into(),
    }
}

/// Most queue pipelines [`plan_dot`] draws; the rest are summarised in one node.
pub const DOT_QUEUE_CAP: usize = 8;

/// The configured PRG and each queue's pipeline, as one Graphviz graph, readable at any
/// size: ranked left to right, the NIC in one group (receive and transmit sides apart,
/// at most [`crate::graph::DOT_GROUP_CAP`] filters of a kind drawn), each receive queue
/// joined to its pipeline's group on the right, at most [`DOT_QUEUE_CAP`] pipelines drawn
/// and the rest counted in a summary node.
pub fn plan_dot(m: &dyn NicModel, p: &Planner, lpg: &Lpg) -> Result<String, ModelError> {
    use crate::graph::NodeKind;
    let prg = configured_prg(m, &p.cfg)?;
    let queues = specialise(&prg, lpg);
    let mut s = format!(
        "digraph \"{}\" {{\n  rankdir=LR;\n  newrank=true;\n  compound=true;\n  node [shape=box];\n",
        prg.name
    );
    let _ = write!(
        s,
        "  subgraph cluster_nic {{\n    label=\"NIC {} ({} queues), configured: {} filters\";\n{}  }}\n",
        m.name(),
        m.queues(),
        p.cfg.filters.len(),
        prg.to_dot_body("    ")
    );
    let sink_of = |d: Dest| {
        prg.nodes
            .iter()
            .position(|n| n.alive && matches!(n.kind, NodeKind::Sink(x) if x == d))
    };
    for (k, q) in queues.iter().enumerate() {
        let prefix = format!("q{}", dest_index(q.dest));
        if k == DOT_QUEUE_CAP {
            let more = queues.len() - DOT_QUEUE_CAP;
            let _ = writeln!(
                s,
                "  more_queues [label=\"... {more} more queue pipelines\\n(the text report lists them)\" style=\"dashed,filled\",fillcolor=lightyellow];"
            );
        }
        if k >= DOT_QUEUE_CAP {
            if let Some(x) = sink_of(q.dest) {
                let _ = writeln!(s, "  n{x} -> more_queues [style=dashed];");
            }
            continue;
        }
        s.push_str(
            &q.pipeline
                .to_dot(&prefix, &format!("pipeline on {}", q.dest)),
        );
        let entry = q.pipeline.root;
        if let (Some(x), true) = (
            sink_of(q.dest),
            q.pipeline.modules.get(entry).is_some_and(|m| m.is_some()),
        ) {
            let _ = writeln!(
                s,
                "  n{x} -> {prefix}_{entry} [style=dashed, lhead=cluster_{prefix}];"
            );
        }
    }
    s.push_str("}\n");
    Ok(s)
}

/// The plan as text: verdict, configuration, flow map and each queue's pruned pipeline.
/// `took_ms` is the search's time.
pub fn plan_text(
    m: &dyn NicModel,
    cost: &dyn CostFn,
    p: &Planner,
    flows: &[FlowSpec],
    lpg: &Lpg,
    took_ms: f64,
) -> Result<String, ModelError> {
    let prg = configured_prg(m, &p.cfg)?;
    let queues: Vec<QueuePipeline> = specialise(&prg, lpg);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "NIC {} ({} queues), policy {}, {} flows, {:?} flow maps, search took {took_ms:.3} ms",
        m.name(),
        m.queues(),
        cost.name(),
        flows.len(),
        p.mode(),
    );
    let _ = writeln!(
        s,
        "verdict: {:?}; {} candidate changes scored, {} local-search moves",
        p.verdict(),
        p.stats.evaluations,
        p.stats.local_moves
    );
    let _ = writeln!(s, "configuration ({} filters):", p.cfg.filters.len());
    for f in &p.cfg.filters {
        let _ = writeln!(s, "  {f}");
    }
    if !p.cfg.rss.is_empty() {
        let _ = writeln!(s, "  RSS: {}-entry indirection table", p.cfg.rss.len());
    }
    for (q, l) in p.cfg.limits.iter().enumerate() {
        if let Some(r) = l {
            let how = if m.hw_rate_limiters() {
                "hardware TX limiter"
            } else {
                "software token bucket"
            };
            let _ = writeln!(s, "  Q{q}: rate limit {r} Mb/s ({how})");
        }
    }
    let _ = writeln!(s, "flow map:");
    for (i, l) in p.qmap.loads.iter().enumerate() {
        let _ = writeln!(
            s,
            "  Q{i}: {} flows ({} high-priority, {} best-effort), {} Mb/s requested",
            l.flows, l.hp, l.be, l.bw
        );
    }
    if flows.len() <= 20 {
        for (id, f) in p.flows() {
            let d = p.qmap.flow_dest[id]
                .map(|d| d.to_string())
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "    {} {}:{} -> {}:{}{} => {d}",
                proto_name(f.header.get(Field::IpProto)),
                ip_str(f.header.get(Field::SrcIp)),
                f.header.get(Field::SrcPort),
                ip_str(f.header.get(Field::DstIp)),
                f.header.get(Field::DstPort),
                if f.hp { " hp" } else { "" }
            );
        }
    }
    let _ = writeln!(s, "per-queue pipelines:");
    for q in &queues {
        let g = &q.guard;
        let shown: Vec<String> = g.terms.iter().take(2).map(|t| t.to_string()).collect();
        let _ = writeln!(
            s,
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
        let _ = writeln!(
            s,
            "  pruned: {} rules, {} modules removed{}",
            q.stats.rules_removed,
            q.stats.modules_removed,
            if q.dest == Dest::Queue(0) {
                " (default queue: never pruned)"
            } else {
                ""
            }
        );
        s.push_str(&q.pipeline.to_text());
    }
    Ok(s)
}

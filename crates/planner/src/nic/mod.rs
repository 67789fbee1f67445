//! NIC models (seed 003 §3.3.4, §5.3, §6.5.1; seed note §8.2): each has an unconfigured PRG
//! with c-nodes, the expansion function of every c-node, the hardware constraints its oracle
//! respects, the oracle itself, and a semantic function (config, packet) -> destination that
//! is written independently of the graph so tests can check one against the other.

use crate::graph::{Dest, Graph, ModelError, Node, NodeId, NodeKind, NodeRef, Port, Subgraph};
use crate::pred::{Conj, Field, Header, Term, ETH_IPV4};
use std::fmt;

mod ethtool_nic;
mod intel82599;
mod sfc9020;
mod xdp;

pub use ethtool_nic::EthtoolNic;
pub use intel82599::{
    Intel82599, I82599_5T, I82599_FDIR, I82599_LINK_MBPS, I82599_QUEUES, I82599_RATE_MIN_MBPS,
};
pub use sfc9020::{Sfc9020, SFC_FILTERS, SFC_LINK_MBPS};
pub use xdp::XdpPort;

/// The five fields of a 5-tuple filter.
pub const FIVE: [Field; 5] = [
    Field::IpProto,
    Field::SrcIp,
    Field::DstIp,
    Field::SrcPort,
    Field::DstPort,
];

/// Which hardware table a filter lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterKind {
    /// 82599 5-tuple filter (ordered, per-field all-or-nothing masks, 128 of them).
    FiveTuple,
    /// 82599 Flow Director perfect filter (one global mask).
    FlowDirector,
    /// SFC9020 full-match filter.
    SfFull,
    /// SFC9020 wildcard filter (source address and port wildcarded).
    SfWild,
    /// Generic ethtool ntuple rule (ordered by location).
    Ntuple,
    /// Entry of the XDP program's exact 5-tuple map.
    XdpEntry,
}

impl FilterKind {
    /// Short name used in labels.
    pub fn short(self) -> &'static str {
        match self {
            FilterKind::FiveTuple => "5T",
            FilterKind::FlowDirector => "FDir",
            FilterKind::SfFull => "SFfull",
            FilterKind::SfWild => "SFwild",
            FilterKind::Ntuple => "ntuple",
            FilterKind::XdpEntry => "xdp",
        }
    }
}

/// One configured filter: which packets it matches and where it sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Table.
    pub kind: FilterKind,
    /// Match (over the 5-tuple fields).
    pub matcher: Conj,
    /// Destination.
    pub dest: Dest,
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({}) -> {}",
            self.kind.short(),
            self.matcher,
            self.dest
        )
    }
}

/// A NIC configuration: the values of all c-nodes. Filters are in priority order within
/// their table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NicConfig {
    /// Filters in priority order.
    pub filters: Vec<Filter>,
    /// RSS indirection table (empty: RSS off, everything unfiltered goes to Q0).
    pub rss: Vec<u16>,
    /// Per-queue rate limit in Mb/s (hardware TX limiter or software token bucket).
    pub limits: Vec<Option<u32>>,
}

/// One step the oracle can suggest.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Insert a filter at the end of its table.
    AddFilter(Filter),
    /// Rewrite a stale filter in place (a replacement, §5.4.5): same f-node, new predicate
    /// and destination. The planner offers these, not the oracles.
    Replace {
        /// Index of the stale filter in the configuration.
        index: usize,
        /// The filter it becomes (same table).
        filter: Filter,
    },
    /// Set a queue's rate limit.
    SetLimit {
        /// Queue.
        queue: u16,
        /// Rate in Mb/s, `None` = unlimited.
        mbps: Option<u32>,
    },
}

/// A configuration change: actions applied together (a filter plus a TX limiter, §6.5.1).
pub type Change = Vec<Action>;

/// A flow the planner places: an exact header plus attributes (seed 003 §3.5.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowSpec {
    /// A packet of the flow (5-tuple fixed).
    pub header: Header,
    /// High-priority class.
    pub hp: bool,
    /// Requested bandwidth in Mb/s (0: none).
    pub bw_mbps: u32,
}

impl fmt::Display for FlowSpec {
    /// The flow's 5-tuple as users write it: `udp 10.0.0.5:4000 -> 10.0.0.1:53`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::pred::{ip_str, proto_name};
        let h = &self.header;
        write!(
            f,
            "{} {}:{} -> {}:{}",
            proto_name(h.get(Field::IpProto)),
            ip_str(h.get(Field::SrcIp)),
            h.get(Field::SrcPort),
            ip_str(h.get(Field::DstIp)),
            h.get(Field::DstPort)
        )
    }
}

/// The matcher that fixes a flow's full 5-tuple.
pub fn exact_match(h: &Header) -> Conj {
    match_fields(h, &FIVE)
}

/// The matcher that fixes only `fields` of a header.
pub fn match_fields(h: &Header, fields: &[Field]) -> Conj {
    let mut c = Conj::TRUE;
    for f in fields {
        c.v[f.index()] = h.get(*f);
        c.m[f.index()] = f.full_mask();
    }
    c
}

/// What every NIC model provides.
pub trait NicModel: Send + Sync {
    /// Model name.
    fn name(&self) -> String;
    /// Number of RX queues.
    fn queues(&self) -> u16;
    /// True when rate limits are hardware TX limiters; false: software token buckets.
    fn hw_rate_limiters(&self) -> bool;
    /// The link's capacity in Mb/s (each direction), when the model knows it: what all
    /// flows' requested bandwidth together may not exceed.
    fn link_mbps(&self) -> Option<u32>;
    /// The rates a queue's limit may be set to, in Mb/s (inclusive). A software token bucket
    /// takes any rate from 1 Mb/s up to the link's; hardware limiters say what theirs take.
    fn rate_limit_range(&self) -> (u32, u32) {
        (1, self.link_mbps().unwrap_or(u32::MAX))
    }
    /// The configuration a NIC starts with: no filters, no limits, a 128-entry RSS table
    /// spread over every queue (the 82599's and the SFC9020's; other models override it).
    fn initial_config(&self) -> NicConfig {
        NicConfig {
            filters: vec![],
            rss: spread(self.queues(), 128),
            limits: vec![None; self.queues() as usize],
        }
    }
    /// The unconfigured PRG (with c-nodes).
    fn unconfigured(&self) -> Graph;
    /// Name of the c-node table a filter kind expands.
    fn table_of(&self, kind: FilterKind) -> Result<&'static str, ModelError>;
    /// Hardware constraints on a whole configuration.
    fn check(&self, cfg: &NicConfig) -> Result<(), ModelError>;
    /// Where the NIC sends a packet under a configuration (written from the datasheet
    /// semantics, not from the graph).
    fn semantic(&self, cfg: &NicConfig, h: &Header) -> Dest;
    /// Incremental changes worth considering for a new flow (the hardware oracle).
    fn oracle(&self, cfg: &NicConfig, flow: &FlowSpec) -> Vec<Change>;
    /// Text description of each c-node's configuration space.
    fn config_space(&self) -> Vec<String>;
}

/// Builds the common RX skeleton: RxIn -> L3 classifier -> filter-table c-nodes in order
/// -> RSS c-node -> OR:Qn -> RxQueue n; plus drop/kernel sinks and, for hardware limiters,
/// the TX side with one limiter c-node per queue.
pub fn skeleton(name: &str, queues: u16, tables: &[&str], tx_limiters: bool) -> Graph {
    let mut g = Graph::new(name);
    let sinks: Vec<NodeId> = (0..queues)
        .map(|q| {
            let mut n = Node::new(&format!("RxQueue{q}"), NodeKind::Sink(Dest::Queue(q)));
            n.software = true;
            g.add(n)
        })
        .collect();
    let ors: Vec<NodeId> = (0..queues)
        .map(|q| {
            g.add(Node::new(&format!("OR:Q{q}"), NodeKind::Or).port(Port::new(
                "true",
                Term::truth(),
                vec![sinks[q as usize]],
            )))
        })
        .collect();
    let drop = g.add(Node::new("Drop", NodeKind::Sink(Dest::Drop)));
    let mut dests = ors.clone();
    dests.push(drop);
    let rss = g.add(
        Node::new(
            "CRSS",
            NodeKind::Config {
                table: "rss".into(),
                default_port: 1,
            },
        )
        .port(Port::new("queues", Term::truth(), ors.clone()))
        .port(Port::new("default", Term::truth(), vec![ors[0]])),
    );
    let mut next = rss;
    for t in tables.iter().rev() {
        next = g.add(
            Node::new(
                &format!("C{t}"),
                NodeKind::Config {
                    table: (*t).into(),
                    default_port: 1,
                },
            )
            .port(Port::new("queues", Term::truth(), dests.clone()))
            .port(Port::new("default", Term::truth(), vec![next])),
        );
    }
    let ipv4 = Conj::eq(Field::EtherType, ETH_IPV4);
    let other = Port::new("other", Term::not(ipv4), vec![ors[0]]);
    let l3 = g.add(
        Node::new("EthClassifyL3_", NodeKind::F)
            .port(Port::new("ipv4", Term::of(ipv4), vec![next]))
            .port(other),
    );
    let root =
        g.add(Node::new("RxIn", NodeKind::F).port(Port::new("out", Term::truth(), vec![l3])));
    g.root = root;
    if tx_limiters {
        for q in 0..queues {
            let mut hw = Node::new(&format!("TxHWQueue{q}"), NodeKind::F);
            hw.ports.push(Port::new("out", Term::truth(), vec![]));
            let hw = g.add(hw);
            let c = g.add(
                Node::new(
                    &format!("CTxRateLimiter{q}"),
                    NodeKind::Config {
                        table: format!("txrl{q}"),
                        default_port: 0,
                    },
                )
                .port(Port::new("out", Term::truth(), vec![hw])),
            );
            let mut tx = Node::new(&format!("TxQueue{q}"), NodeKind::F).port(Port::new(
                "out",
                Term::truth(),
                vec![c],
            ));
            tx.software = true;
            g.add(tx);
        }
    }
    g
}

/// The node a filter's match port leads to for a destination (a successor of the table's
/// c-node, so the locality rule holds).
fn dest_node(g: &Graph, x: NodeId, d: Dest) -> Result<NodeId, ModelError> {
    let want = match d {
        Dest::Queue(q) => format!("OR:Q{q}"),
        Dest::Drop => "Drop".into(),
        Dest::Kernel => "Kernel".into(),
    };
    g.successors(x)
        .into_iter()
        .find(|&n| g.nodes[n].label == want)
        .ok_or_else(|| ModelError::Constraint(format!("{} cannot send to {d}", g.nodes[x].label)))
}

/// f_x of a recursive filter c-node: a filter f-node whose match port leads to the
/// destination and whose miss port leads to a fresh copy of the c-node (Fig. 5.1).
pub fn filter_subgraph(g: &Graph, x: NodeId, f: &Filter) -> Result<Subgraph, ModelError> {
    let cnode = &g.nodes[x];
    let target = dest_node(g, x, f.dest)?;
    let mut miss = Port::new("false", Term::not(f.matcher), vec![]);
    miss.polarity = false;
    let filter = Node::new(&format!("{}({})", f.kind.short(), f.matcher), NodeKind::F)
        .port(Port::new("true", Term::of(f.matcher), vec![]))
        .port(miss);
    let mut again = cnode.clone();
    again.alive = true;
    let again_targets: Vec<Vec<NodeRef>> = cnode
        .ports
        .iter()
        .map(|p| p.targets.iter().map(|t| NodeRef::Old(*t)).collect())
        .collect();
    for p in &mut again.ports {
        p.targets.clear();
    }
    Ok(Subgraph {
        nodes: vec![
            (
                filter,
                vec![vec![NodeRef::Old(target)], vec![NodeRef::New(1)]],
            ),
            (again, again_targets),
        ],
        entry: Some(NodeRef::New(0)),
    })
}

/// f_x of the RSS c-node: one f-node with a port per indirection-table entry, matching
/// the low bits of the hash (a (rsshash, entry, size-1) atom) and leading to OR:Q(table[i]).
pub fn rss_subgraph(g: &Graph, x: NodeId, table: &[u16]) -> Result<Subgraph, ModelError> {
    if table.is_empty() {
        return Ok(Subgraph {
            nodes: vec![],
            entry: Some(NodeRef::Old(dest_node(g, x, Dest::Queue(0))?)),
        });
    }
    if !table.len().is_power_of_two() || table.len() > 1 << 16 {
        return Err(ModelError::Constraint(format!(
            "RSS table of {} entries (a power of two up to 65536 is modelled)",
            table.len()
        )));
    }
    let mask = table.len() as u32 - 1;
    let mut node = Node::new(&format!("RSS[{}]", table.len()), NodeKind::F);
    let mut targets = Vec::new();
    for (i, q) in table.iter().enumerate() {
        node.ports.push(Port::new(
            &format!("e{i}"),
            Term::of(Conj::atom(Field::RssBucket, i as u32, mask)),
            vec![],
        ));
        targets.push(vec![NodeRef::Old(dest_node(g, x, Dest::Queue(*q))?)]);
    }
    Ok(Subgraph {
        nodes: vec![(node, targets)],
        entry: Some(NodeRef::New(0)),
    })
}

/// f_x of a TX rate-limiter c-node: a limiter f-node, or nothing (edges go straight on).
pub fn limiter_subgraph(g: &Graph, x: NodeId, mbps: Option<u32>) -> Subgraph {
    let out = g.nodes[x].ports[0].targets[0];
    match mbps {
        None => Subgraph {
            nodes: vec![],
            entry: Some(NodeRef::Old(out)),
        },
        Some(r) => {
            let mut n = Node::new(&format!("TxRateLimit_{r}Mbps"), NodeKind::F).port(Port::new(
                "out",
                Term::truth(),
                vec![],
            ));
            n.attrs.push(format!("TxRateLimit({r})"));
            Subgraph {
                nodes: vec![(n, vec![vec![NodeRef::Old(out)]])],
                entry: Some(NodeRef::New(0)),
            }
        }
    }
}

/// The configured PRG (C-PRG): the unconfigured PRG with every c-node value applied in
/// order (RSS, then filters in priority order, then hardware TX limiters). Filter c-nodes
/// stay (recursive c-nodes keep a fresh copy), which is what the incremental search
/// extends.
pub fn configured_prg(m: &dyn NicModel, cfg: &NicConfig) -> Result<Graph, ModelError> {
    m.check(cfg)?;
    let mut g = m.unconfigured();
    let rss = g
        .table("rss")
        .ok_or_else(|| ModelError::Constraint("model has no RSS c-node".into()))?;
    let sub = rss_subgraph(&g, rss, &cfg.rss)?;
    g.apply(rss, sub)?;
    for f in &cfg.filters {
        add_filter(m, &mut g, f)?;
    }
    if m.hw_rate_limiters() {
        for (q, l) in cfg.limits.iter().enumerate() {
            if let Some(x) = g.table(&format!("txrl{q}")) {
                let sub = limiter_subgraph(&g, x, *l);
                g.apply(x, sub)?;
            }
        }
    }
    Ok(g)
}

/// Expands a filter's table c-node with one more filter.
pub fn add_filter(
    m: &dyn NicModel,
    g: &mut Graph,
    f: &Filter,
) -> Result<crate::graph::Applied, ModelError> {
    let table = m.table_of(f.kind)?;
    let x = g
        .table(table)
        .ok_or_else(|| ModelError::Constraint(format!("no live c-node for table {table}")))?;
    let sub = filter_subgraph(g, x, f)?;
    g.apply(x, sub)
}

fn check_rss(cfg: &NicConfig, queues: u16, size: usize) -> Result<(), ModelError> {
    if !cfg.rss.is_empty() && cfg.rss.len() != size {
        return Err(ModelError::Constraint(format!(
            "RSS table has {} entries, the NIC has {size}",
            cfg.rss.len()
        )));
    }
    if let Some(q) = cfg.rss.iter().find(|q| **q >= queues) {
        return Err(ModelError::Constraint(format!(
            "RSS table names queue {q}, the NIC has {queues}"
        )));
    }
    Ok(())
}

fn check_dest(f: &Filter, queues: u16, allow_drop: bool) -> Result<(), ModelError> {
    match f.dest {
        Dest::Queue(q) if q < queues => Ok(()),
        Dest::Drop if allow_drop => Ok(()),
        d => Err(ModelError::Constraint(format!(
            "filter {f}: destination {d} not available"
        ))),
    }
}

fn only_five(f: &Filter) -> Result<(), ModelError> {
    for fld in [Field::EtherType, Field::RssBucket, Field::RxQueue] {
        if f.matcher.m[fld.index()] != 0 {
            return Err(ModelError::Constraint(format!(
                "filter {f} matches on {}, filters match on the 5-tuple only",
                fld.name()
            )));
        }
    }
    Ok(())
}

/// Per-queue rate limits: one per queue at most, each within what the queue's limiter (or
/// software token bucket) can be set to.
fn check_limits(m: &dyn NicModel, cfg: &NicConfig) -> Result<(), ModelError> {
    if cfg.limits.len() > m.queues() as usize {
        return Err(ModelError::Constraint(format!(
            "rate limits for {} queues, the NIC has {}",
            cfg.limits.len(),
            m.queues()
        )));
    }
    let (lo, hi) = m.rate_limit_range();
    for (q, l) in cfg.limits.iter().enumerate() {
        if let Some(r) = *l {
            if r < lo || r > hi {
                let what = if m.hw_rate_limiters() {
                    "TX rate limiter"
                } else {
                    "software token bucket"
                };
                return Err(ModelError::Constraint(format!(
                    "Q{q}: a {r} Mb/s rate limit is outside the {}'s per-queue {what} range, {lo} to {hi} Mb/s",
                    m.name()
                )));
            }
        }
    }
    Ok(())
}

fn spread(queues: u16, size: usize) -> Vec<u16> {
    (0..size).map(|i| (i % queues as usize) as u16).collect()
}

fn rss_lookup(cfg: &NicConfig, h: &Header) -> Dest {
    if cfg.rss.is_empty() {
        return Dest::Queue(0);
    }
    let i = h.get(Field::RssBucket) as usize & (cfg.rss.len() - 1);
    Dest::Queue(cfg.rss[i])
}

fn limit_changes(
    m: &dyn NicModel,
    cfg: &NicConfig,
    flow: &FlowSpec,
    q: u16,
    base: Change,
) -> Vec<Change> {
    if flow.bw_mbps == 0 {
        return vec![base];
    }
    // Fig. 6.6: the flow's rate on top of what the queue has, or the queue left as it is.
    // Only rates the limiter takes: a limit below its minimum is its minimum, and one above
    // its maximum (the link's rate) is the maximum. The current limit can hold the shares of
    // flows that left (removal is lazy), so the sum alone could pass the maximum.
    let (lo, hi) = m.rate_limit_range();
    let cur = cfg.limits.get(q as usize).copied().flatten().unwrap_or(0);
    let mut with = base.clone();
    with.push(Action::SetLimit {
        queue: q,
        mbps: Some(cur.saturating_add(flow.bw_mbps).clamp(lo, hi)),
    });
    vec![with, base]
}

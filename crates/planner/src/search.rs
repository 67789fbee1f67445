//! Policies and search (seed 003 ch. 5-6): cost functions over a flow map (Qmap) returning
//! reject / accept / OK with a score, the greedy per-flow search driven by the hardware
//! oracle (Alg. 2), incremental flow maps with c-nodes as barriers, lazy removal, and a
//! bounded local search after the greedy pass.

use crate::graph::{Dest, Graph, ModelError, NodeId};
use crate::nic::{
    add_filter, configured_prg, Action, Change, Filter, FilterKind, FlowSpec, NicConfig, NicModel,
    FIVE,
};

/// A cost function's verdict. Acceptable plans always rank before rejected ones; among
/// them the lower score wins.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Not acceptable.
    Reject(f64),
    /// Meets every requirement.
    Accept(f64),
    /// Partially meets them; keep improving.
    Ok(f64),
}

impl Verdict {
    /// Sort key: (rejected?, score).
    pub fn key(&self) -> (u8, f64) {
        match self {
            Verdict::Accept(s) | Verdict::Ok(s) => (0, *s),
            Verdict::Reject(s) => (1, *s),
        }
    }
    /// True when rejected.
    pub fn is_reject(&self) -> bool {
        matches!(self, Verdict::Reject(_))
    }
    /// True when a is strictly better than b.
    pub fn better(a: &Verdict, b: &Verdict) -> bool {
        let (ka, kb) = (a.key(), b.key());
        ka.0 < kb.0 || (ka.0 == kb.0 && ka.1 < kb.1 - 1e-12)
    }
}

/// Per-queue aggregate of a flow map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLoad {
    /// Flows.
    pub flows: u32,
    /// High-priority flows.
    pub hp: u32,
    /// Best-effort flows.
    pub be: u32,
    /// Requested bandwidth in Mb/s.
    pub bw: u64,
}

/// The flow map cost functions see: each flow's destination, per-queue aggregates and
/// per-queue rate limits. Hardware-agnostic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Qmap {
    /// Destination of each flow id (`None`: removed).
    pub flow_dest: Vec<Option<Dest>>,
    /// Aggregates per queue.
    pub loads: Vec<QueueLoad>,
    /// Rate limit per queue in Mb/s.
    pub limits: Vec<Option<u32>>,
    /// Flows sent somewhere other than a queue (drop, kernel).
    pub off_queue: u32,
}

impl Qmap {
    fn new(queues: u16, limits: Vec<Option<u32>>) -> Qmap {
        Qmap {
            flow_dest: Vec::new(),
            loads: vec![QueueLoad::default(); queues as usize],
            limits,
            off_queue: 0,
        }
    }
    fn account(&mut self, f: &FlowSpec, d: Dest, sign: i64) {
        match d {
            Dest::Queue(q) => {
                let l = &mut self.loads[q as usize];
                l.flows = (l.flows as i64 + sign) as u32;
                if f.hp {
                    l.hp = (l.hp as i64 + sign) as u32;
                } else {
                    l.be = (l.be as i64 + sign) as u32;
                }
                l.bw = (l.bw as i64 + sign * f.bw_mbps as i64) as u64;
            }
            _ => self.off_queue = (self.off_queue as i64 + sign) as u32,
        }
    }
    fn place(&mut self, id: usize, f: &FlowSpec, d: Dest) {
        if self.flow_dest.len() <= id {
            self.flow_dest.resize(id + 1, None);
        }
        if let Some(old) = self.flow_dest[id] {
            self.account(f, old, -1);
        }
        self.flow_dest[id] = Some(d);
        self.account(f, d, 1);
    }
    fn unplace(&mut self, id: usize, f: &FlowSpec) {
        if let Some(old) = self.flow_dest.get_mut(id).and_then(|d| d.take()) {
            self.account(f, old, -1);
        }
    }
}

/// A policy: a cost over the flow map.
pub trait CostFn: Send + Sync {
    /// Name.
    fn name(&self) -> String;
    /// Scores a flow map.
    fn cost(&self, q: &Qmap) -> Verdict;
    /// Refuses parameters that make no sense on a NIC with `queues` queues (checked when a
    /// planner is made, so a policy is never silently clamped into something else).
    fn check(&self, queues: u16) -> Result<(), ModelError> {
        let _ = queues;
        Ok(())
    }
}

/// Alg. 1's partition: the first `k` queues for the high-priority class, the rest (at
/// least one) for best effort.
fn check_partition(name: &str, k: u16, queues: u16) -> Result<(), ModelError> {
    if k == 0 || k >= queues {
        return Err(ModelError::Input(if queues < 2 {
            format!("{name}: needs at least 2 queues (high-priority and best-effort), the NIC has {queues}")
        } else {
            format!(
                "{name}: k, the queues reserved for high-priority flows (--hp-queues), must be 1 to {} on {queues} queues (the rest are best-effort)",
                queues - 1
            )
        }));
    }
    Ok(())
}

fn variance(counts: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = counts.collect();
    if v.is_empty() {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64
}

/// Load balancing: the variance of the number of flows per queue (§5.4.4).
#[derive(Clone, Debug)]
pub struct Balance;

impl CostFn for Balance {
    fn name(&self) -> String {
        "balance".into()
    }
    fn cost(&self, q: &Qmap) -> Verdict {
        Verdict::Ok(variance(q.loads.iter().map(|l| l.flows as f64)))
    }
}

/// Performance isolation (Alg. 1): high-priority flows only on the first `k` queues,
/// best-effort flows only on the others; each class balanced on its queues.
#[derive(Clone, Debug)]
pub struct Isolation {
    /// Queues reserved for the high-priority class.
    pub k: u16,
}

fn misplaced(q: &Qmap, k: usize) -> u32 {
    q.loads
        .iter()
        .enumerate()
        .map(|(i, l)| if i < k { l.be } else { l.hp })
        .sum()
}

impl CostFn for Isolation {
    fn name(&self) -> String {
        format!("isolation(k={})", self.k)
    }
    fn cost(&self, q: &Qmap) -> Verdict {
        let k = (self.k as usize).min(q.loads.len());
        let bad = misplaced(q, k);
        if bad > 0 {
            // Alg. 1 rejects with cost 1; counting the misplaced flows lets the greedy
            // search prefer the least bad plan when it has no acceptable one.
            return Verdict::Reject(bad as f64);
        }
        let hp = variance(q.loads[..k].iter().map(|l| l.hp as f64));
        let be = variance(q.loads[k..].iter().map(|l| l.be as f64));
        Verdict::Accept(hp + be)
    }
    fn check(&self, queues: u16) -> Result<(), ModelError> {
        check_partition(&self.name(), self.k, queues)
    }
}

/// Static bandwidth management (Alg. 3): isolation's partition, then the mismatch between
/// each queue's rate limit and the bandwidth its flows asked for, high priority weighted.
#[derive(Clone, Debug)]
pub struct Bandwidth {
    /// Queues reserved for the high-priority class.
    pub k: u16,
    /// Weight of the high-priority mismatch.
    pub hp_penalty: f64,
}

impl CostFn for Bandwidth {
    fn name(&self) -> String {
        format!("bandwidth(k={}, hp_penalty={})", self.k, self.hp_penalty)
    }
    fn cost(&self, q: &Qmap) -> Verdict {
        let k = (self.k as usize).min(q.loads.len());
        let bad = misplaced(q, k);
        if bad > 0 {
            return Verdict::Reject(bad as f64);
        }
        let diff = |i: usize| {
            q.limits.get(i).copied().flatten().unwrap_or(0) as f64 - q.loads[i].bw as f64
        };
        let hp: f64 = (0..k).map(diff).sum::<f64>().abs();
        let be: f64 = (k..q.loads.len()).map(diff).sum::<f64>().abs();
        Verdict::Accept(self.hp_penalty * hp + be)
    }
    fn check(&self, queues: u16) -> Result<(), ModelError> {
        check_partition(&self.name(), self.k, queues)?;
        // A negative weight would reward mismatch; NaN would make every score equal.
        if !self.hp_penalty.is_finite() || self.hp_penalty < 0.0 {
            return Err(ModelError::Input(format!(
                "{}: hp_penalty {} (--hp-penalty) must be a finite number, 0 or more",
                self.name(),
                self.hp_penalty
            )));
        }
        Ok(())
    }
}

/// "flows 1..4, 7" from 1-based positions in increasing order.
fn positions(p: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < p.len() {
        let mut j = i;
        while j + 1 < p.len() && p[j + 1] == p[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}..{}", p[i], p[j])
        } else {
            p[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// Refuses flows whose requested bandwidth the NIC's link cannot carry: a flow asking for
/// more than the link by itself, or all of them together asking for more. Flows are named
/// by their position in `flows` (from 1) and their 5-tuple. Models that do not know their
/// link's speed accept any demand.
pub fn check_demand(model: &dyn NicModel, flows: &[FlowSpec]) -> Result<(), ModelError> {
    let Some(link) = model.link_mbps() else {
        return Ok(());
    };
    let on = |l: u32| format!("the {}'s {l} Mb/s link", model.name());
    if let Some((i, f)) = flows.iter().enumerate().find(|(_, f)| f.bw_mbps > link) {
        return Err(ModelError::Input(format!(
            "flow {} ({f}) asks {} Mb/s, more than {}",
            i + 1,
            f.bw_mbps,
            on(link)
        )));
    }
    let asking: Vec<(usize, &FlowSpec)> = flows
        .iter()
        .enumerate()
        .filter(|(_, f)| f.bw_mbps > 0)
        .map(|(i, f)| (i + 1, f))
        .collect();
    let total: u64 = asking.iter().map(|(_, f)| f.bw_mbps as u64).sum();
    if total <= link as u64 {
        return Ok(());
    }
    const SHOWN: usize = 4;
    let mut listed: Vec<String> = asking
        .iter()
        .take(SHOWN)
        .map(|(i, f)| format!("{i} {f} ({} Mb/s)", f.bw_mbps))
        .collect();
    if asking.len() > SHOWN {
        listed.push(format!("and {} more", asking.len() - SHOWN));
    }
    let at: Vec<usize> = asking.iter().map(|(i, _)| *i).collect();
    Err(ModelError::Input(format!(
        "flows {} ask {total} Mb/s together, more than {}: {}",
        positions(&at),
        on(link),
        listed.join(", ")
    )))
}

/// How flow maps are computed during the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowMapMode {
    /// Every candidate re-traces every flow from the PRG's root.
    Basic,
    /// Flow maps are kept across steps; a change re-traces only the flows that passed the
    /// c-node it expands, and only up to the fresh c-node (a barrier).
    Incremental,
}

/// Counters of the search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Candidate changes scored.
    pub evaluations: u64,
    /// Flows placed without a change (oracle had nothing or nothing was better).
    pub unchanged: u64,
    /// Moves made by the local search.
    pub local_moves: u64,
    /// From-scratch rebuilds that flushed stale filters.
    pub rebuilds: u64,
}

/// The planner: a NIC model, a policy, the current configuration and PRG, the flows and
/// their map.
#[derive(Clone)]
pub struct Planner<'a> {
    model: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    mode: FlowMapMode,
    /// The configuration the planner started from (what a rebuild starts from again).
    initial: NicConfig,
    /// Current configuration.
    pub cfg: NicConfig,
    graph: Graph,
    flows: Vec<Option<FlowSpec>>,
    /// Index in `cfg.filters` of the filter a flow's change added, and its f-node.
    flow_filter: Vec<Option<(usize, NodeId)>>,
    /// Filters whose flow has left (lazy removal keeps them in the NIC).
    stale: Vec<bool>,
    /// The f-node of each filter.
    filter_node: Vec<NodeId>,
    /// The flow being added (the one a replacement affects).
    pending: Option<usize>,
    /// Flows that passed each c-node (indexed by node id; entries of removed flows are
    /// skipped when read).
    passed: Vec<Vec<usize>>,
    /// C-nodes each flow passed.
    flow_cnodes: Vec<Vec<NodeId>>,
    /// The flow map.
    pub qmap: Qmap,
    /// Counters.
    pub stats: SearchStats,
}

fn table_ok(g: &Graph, m: &dyn NicModel, kind: FilterKind) -> Option<NodeId> {
    m.table_of(kind).ok().and_then(|t| g.table(t))
}

impl<'a> Planner<'a> {
    /// A planner with the NIC's initial configuration and no flows.
    pub fn new(
        model: &'a dyn NicModel,
        cost: &'a dyn CostFn,
        mode: FlowMapMode,
    ) -> Result<Planner<'a>, ModelError> {
        Self::with_config(model, cost, mode, model.initial_config())
    }

    /// A planner starting from a given configuration (e.g. RSS off, so that unmatched
    /// traffic stays on the default queue and the other queues can be specialised).
    pub fn with_config(
        model: &'a dyn NicModel,
        cost: &'a dyn CostFn,
        mode: FlowMapMode,
        cfg: NicConfig,
    ) -> Result<Planner<'a>, ModelError> {
        cost.check(model.queues())?;
        let graph = configured_prg(model, &cfg)?;
        let qmap = Qmap::new(model.queues(), cfg.limits.clone());
        Ok(Planner {
            initial: cfg.clone(),
            model,
            cost,
            mode,
            cfg,
            graph,
            flows: Vec::new(),
            flow_filter: Vec::new(),
            stale: Vec::new(),
            filter_node: Vec::new(),
            pending: None,
            passed: Vec::new(),
            flow_cnodes: Vec::new(),
            qmap,
            stats: SearchStats::default(),
        })
    }

    /// How flow maps are computed.
    pub fn mode(&self) -> FlowMapMode {
        self.mode
    }

    /// The current configured PRG.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Live flows with their ids.
    pub fn flows(&self) -> impl Iterator<Item = (usize, &FlowSpec)> {
        self.flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (i, f)))
    }

    /// The current verdict.
    pub fn verdict(&self) -> Verdict {
        self.cost.cost(&self.qmap)
    }

    /// Filters whose flows have left.
    pub fn stale_filters(&self) -> usize {
        self.stale.iter().filter(|s| **s).count()
    }

    fn trace_register(&mut self, id: usize) -> Dest {
        let h = self.flows[id].expect("live flow").header;
        let mut seen = Vec::new();
        let d = self
            .graph
            .trace_from(&h, self.graph.root, |x| {
                seen.push(x);
                true
            })
            .unwrap_or(Dest::Queue(0));
        for &x in &seen {
            if self.passed.len() <= x {
                self.passed.resize(x + 1, Vec::new());
            }
            self.passed[x].push(id);
        }
        self.flow_cnodes[id] = seen;
        d
    }

    /// Adds a flow: places it where the NIC sends it now, then applies the oracle's best
    /// change for it (greedy step of Alg. 2). Returns the flow id.
    pub fn add_flow(&mut self, flow: FlowSpec) -> Result<usize, ModelError> {
        self.check_room(&flow)?;
        let id = self.flows.len();
        self.flows.push(Some(flow));
        self.flow_filter.push(None);
        self.flow_cnodes.push(Vec::new());
        let d = self.trace_register(id);
        self.qmap.place(id, &flow, d);
        let mut candidates = self.model.oracle(&self.cfg, &flow);
        candidates.extend(self.replacements(id, &flow));
        self.pending = Some(id);
        if candidates.is_empty() && self.stale_filters() > 0 {
            // Tables full of stale filters: flush them (from-scratch re-evaluation).
            self.rebuild()?;
            return Ok(self.flows.len() - 1);
        }
        let mut best: Option<(Verdict, usize)> = None;
        let base = self.cost.cost(&self.qmap);
        for (i, c) in candidates.iter().enumerate() {
            let Some(v) = self.evaluate(c) else { continue };
            if best.as_ref().is_none_or(|(b, _)| Verdict::better(&v, b)) {
                let perfect = matches!(v, Verdict::Accept(s) if s == 0.0);
                best = Some((v, i));
                if perfect {
                    break;
                }
            }
        }
        match best {
            Some((v, i)) if !Verdict::better(&base, &v) => {
                let change = candidates.swap_remove(i);
                self.commit(id, &change)?;
            }
            _ => self.stats.unchanged += 1,
        }
        self.pending = None;
        Ok(id)
    }

    /// Refuses a flow the link cannot carry beside the live flows (see [`check_demand`]);
    /// nothing changes then.
    fn check_room(&self, flow: &FlowSpec) -> Result<(), ModelError> {
        // A flow asking for nothing always fits (no walk over the live flows then).
        let (Some(link), true) = (self.model.link_mbps(), flow.bw_mbps > 0) else {
            return Ok(());
        };
        let (mut asking, mut before) = (0usize, 0u64);
        for (_, f) in self.flows().filter(|(_, f)| f.bw_mbps > 0) {
            asking += 1;
            before += f.bw_mbps as u64;
        }
        let total = before + flow.bw_mbps as u64;
        if total <= link as u64 {
            return Ok(());
        }
        Err(ModelError::Input(format!(
            "flow {flow} asks {} Mb/s; with the {before} Mb/s of the {asking} live flow(s) asking for bandwidth that is {total} Mb/s, more than the {}'s {link} Mb/s link",
            flow.bw_mbps,
            self.model.name()
        )))
    }

    /// Removes a flow lazily: its filter stays in the NIC, marked stale.
    pub fn remove_flow(&mut self, id: usize) -> Result<(), ModelError> {
        let Some(f) = self.flows.get_mut(id).and_then(|f| f.take()) else {
            return Err(ModelError::Input(format!("no flow {id}")));
        };
        self.qmap.unplace(id, &f);
        if let Some((fi, _)) = self.flow_filter[id].take() {
            self.stale[fi] = true;
        }
        Ok(())
    }

    /// Scores a change without keeping it.
    fn evaluate(&mut self, change: &Change) -> Option<Verdict> {
        self.stats.evaluations += 1;
        let mut applied = Vec::new();
        let mut moves: Vec<(usize, Dest)> = Vec::new();
        let mut limits = Vec::new();
        let mut rewritten: Vec<(usize, Filter)> = Vec::new();
        let mut ok = true;
        for a in change {
            match a {
                Action::AddFilter(f) => {
                    let Some(x) = table_ok(&self.graph, self.model, f.kind) else {
                        ok = false;
                        break;
                    };
                    let Ok(app) = add_filter(self.model, &mut self.graph, f) else {
                        ok = false;
                        break;
                    };
                    if self.mode == FlowMapMode::Incremental {
                        let entry = app.entry.expect("filter subgraphs have an entry");
                        let fresh = app.first + 1;
                        for &fid in self.passed.get(x).map(|v| v.as_slice()).unwrap_or(&[]) {
                            let Some(flow) = &self.flows[fid] else {
                                continue;
                            };
                            let mut hit_barrier = false;
                            let d = self.graph.trace_from(&flow.header, entry, |c| {
                                hit_barrier |= c == fresh;
                                !hit_barrier
                            });
                            // Reaching the fresh c-node means the flow goes on as before.
                            if !hit_barrier {
                                if let Some(d) = d {
                                    moves.push((fid, self.qmap.flow_dest[fid].expect("placed")));
                                    let flow = *flow;
                                    self.qmap.place(fid, &flow, d);
                                }
                            }
                        }
                    }
                    applied.push(app);
                }
                Action::SetLimit { queue, mbps } => {
                    let q = *queue as usize;
                    if q >= self.qmap.limits.len() {
                        ok = false;
                        break;
                    }
                    limits.push((q, self.qmap.limits[q]));
                    self.qmap.limits[q] = *mbps;
                }
                Action::Replace { index, filter } => {
                    let Some(old) = self.rewrite(*index, filter) else {
                        ok = false;
                        break;
                    };
                    rewritten.push((*index, old));
                    // Only the pending flow can change: the offer requires that no other
                    // live flow matches the old or the new exact key.
                    if let Some(fid) = self.pending {
                        let flow = self.flows[fid].expect("pending flow is live");
                        let d = self.graph.trace(&flow.header).unwrap_or(Dest::Queue(0));
                        moves.push((fid, self.qmap.flow_dest[fid].expect("placed")));
                        self.qmap.place(fid, &flow, d);
                    }
                }
            }
        }
        let verdict = if !ok {
            None
        } else if self.mode == FlowMapMode::Basic {
            let mut q = Qmap::new(self.model.queues(), self.qmap.limits.clone());
            for (id, f) in self.flows.iter().enumerate() {
                if let Some(f) = f {
                    let d = self.graph.trace(&f.header).unwrap_or(Dest::Queue(0));
                    q.place(id, f, d);
                }
            }
            Some(self.cost.cost(&q))
        } else {
            Some(self.cost.cost(&self.qmap))
        };
        for (fid, d) in moves.into_iter().rev() {
            let f = self.flows[fid].expect("live");
            self.qmap.place(fid, &f, d);
        }
        for (q, l) in limits.into_iter().rev() {
            self.qmap.limits[q] = l;
        }
        for (index, old) in rewritten.into_iter().rev() {
            self.rewrite(index, &old);
        }
        for app in applied.into_iter().rev() {
            self.graph.undo(app);
        }
        verdict
    }

    /// Applies a change for flow `id` for good.
    fn commit(&mut self, id: usize, change: &Change) -> Result<(), ModelError> {
        for a in change {
            match a {
                Action::AddFilter(f) => {
                    let x = table_ok(&self.graph, self.model, f.kind)
                        .ok_or_else(|| ModelError::Constraint(format!("no table for {f}")))?;
                    let app = add_filter(self.model, &mut self.graph, f)?;
                    let entry = app.entry.expect("filter subgraphs have an entry");
                    let fresh = app.first + 1;
                    self.cfg.filters.push(*f);
                    self.stale.push(false);
                    self.filter_node.push(app.first);
                    self.flow_filter[id] = Some((self.cfg.filters.len() - 1, app.first));
                    let affected: Vec<usize> = match self.mode {
                        FlowMapMode::Incremental => std::mem::take(&mut self.passed[x]),
                        FlowMapMode::Basic => (0..self.flows.len()).collect(),
                    };
                    if self.passed.len() <= fresh {
                        self.passed.resize(fresh + 1, Vec::new());
                    }
                    for fid in affected {
                        let Some(flow) = self.flows[fid] else {
                            continue;
                        };
                        if self.mode == FlowMapMode::Basic {
                            let d = self.graph.trace(&flow.header).unwrap_or(Dest::Queue(0));
                            self.qmap.place(fid, &flow, d);
                            continue;
                        }
                        let mut hit = false;
                        let d = self.graph.trace_from(&flow.header, entry, |c| {
                            hit |= c == fresh;
                            !hit
                        });
                        if hit {
                            // Still unmatched: it now passes the fresh c-node instead of x.
                            self.passed[fresh].push(fid);
                            for c in &mut self.flow_cnodes[fid] {
                                if *c == x {
                                    *c = fresh;
                                }
                            }
                        } else if let Some(d) = d {
                            // Matched: it no longer reaches x's fresh copy or the c-nodes
                            // after it; those before x it still passes.
                            let list = &mut self.flow_cnodes[fid];
                            let at = list.iter().position(|c| *c == x).unwrap_or(list.len());
                            let after: Vec<NodeId> = list.drain(at..).skip(1).collect();
                            for c in after {
                                self.passed[c].retain(|v| *v != fid);
                            }
                            self.qmap.place(fid, &flow, d);
                        }
                    }
                }
                Action::SetLimit { queue, mbps } => {
                    let q = *queue as usize;
                    if q >= self.cfg.limits.len() {
                        return Err(ModelError::Constraint(format!("no queue {q}")));
                    }
                    self.cfg.limits[q] = *mbps;
                    self.qmap.limits[q] = *mbps;
                }
                Action::Replace { index, filter } => {
                    self.rewrite(*index, filter).ok_or_else(|| {
                        ModelError::Constraint(format!("filter {index} cannot be replaced"))
                    })?;
                    self.stale[*index] = false;
                    self.flow_filter[id] = Some((*index, self.filter_node[*index]));
                    // Re-register the flow's path: it may now stop at the rewritten node.
                    for c in std::mem::take(&mut self.flow_cnodes[id]) {
                        self.passed[c].retain(|v| *v != id);
                    }
                    let d = self.trace_register(id);
                    let flow = self.flows[id].expect("live");
                    self.qmap.place(id, &flow, d);
                }
            }
        }
        Ok(())
    }

    /// Replacement offers for a new flow: the first stale exact filter of each table may be
    /// rewritten to match the flow exactly, on any queue — provided no live flow matches
    /// the old key or shares the new one, so only the new flow changes queue.
    fn replacements(&self, id: usize, flow: &FlowSpec) -> Vec<Change> {
        let key = crate::nic::exact_match(&flow.header);
        let mut out = Vec::new();
        let mut kinds_done: Vec<FilterKind> = Vec::new();
        for (i, f) in self.cfg.filters.iter().enumerate() {
            if !self.stale[i] || kinds_done.contains(&f.kind) || !f.matcher.is_exact_on(&FIVE) {
                continue;
            }
            let clash = self
                .flows()
                .any(|(fid, g)| f.matcher.eval(&g.header) || (fid != id && key.eval(&g.header)));
            if clash {
                continue;
            }
            kinds_done.push(f.kind);
            for q in 0..self.model.queues() {
                let filter = Filter {
                    kind: f.kind,
                    matcher: key,
                    dest: Dest::Queue(q),
                };
                let mut next = self.cfg.clone();
                next.filters[i] = filter;
                if self.model.check(&next).is_ok() {
                    out.push(vec![Action::Replace { index: i, filter }]);
                }
            }
        }
        out
    }

    /// Rewrites filter `index`'s f-node to `f` (predicates, match target, label) and the
    /// configuration; returns the filter it was. The match edge goes to OR:Q(dest), a
    /// successor of the original c-node, so the locality rule still holds.
    fn rewrite(&mut self, index: usize, f: &Filter) -> Option<Filter> {
        let node = *self.filter_node.get(index)?;
        let old = *self.cfg.filters.get(index)?;
        if old.kind != f.kind {
            return None;
        }
        let want = match f.dest {
            Dest::Queue(q) => format!("OR:Q{q}"),
            Dest::Drop => "Drop".into(),
            Dest::Kernel => "Kernel".into(),
        };
        let target = self
            .graph
            .nodes
            .iter()
            .position(|n| n.alive && n.label == want)?;
        let n = &mut self.graph.nodes[node];
        n.label = format!("{}({})", f.kind.short(), f.matcher);
        n.ports[0].pred = crate::pred::Term::of(f.matcher);
        n.ports[1].pred = crate::pred::Term::not(f.matcher);
        let prev = n.ports[0].targets[0];
        n.ports[0].targets[0] = target;
        self.graph.incoming[prev].retain(|e| *e != (node, 0));
        self.graph.incoming[target].push((node, 0));
        self.cfg.filters[index] = *f;
        Some(old)
    }

    /// Bounded local search after the greedy pass: moves a flow's own exact filter to
    /// another queue when that lowers the cost; at most `max_moves` moves.
    pub fn local_search(&mut self, max_moves: usize) -> usize {
        let mut moved = 0;
        let queues = self.model.queues();
        while moved < max_moves {
            let current = self.cost.cost(&self.qmap);
            let mut best: Option<(Verdict, usize, u16)> = None;
            for id in 0..self.flows.len() {
                let (Some(f), Some((fi, _))) = (self.flows[id], self.flow_filter[id]) else {
                    continue;
                };
                let filter = self.cfg.filters[fi];
                // Only filters that match exactly this flow move nothing else.
                if !filter.matcher.is_exact_on(&FIVE) {
                    continue;
                }
                let Some(old) = self.qmap.flow_dest[id] else {
                    continue;
                };
                for q in 0..queues {
                    if Dest::Queue(q) == old {
                        continue;
                    }
                    self.qmap.place(id, &f, Dest::Queue(q));
                    let v = self.cost.cost(&self.qmap);
                    self.qmap.place(id, &f, old);
                    self.stats.evaluations += 1;
                    if Verdict::better(&v, &current)
                        && best.as_ref().is_none_or(|(b, _, _)| Verdict::better(&v, b))
                    {
                        best = Some((v, id, q));
                    }
                }
            }
            let Some((_, id, q)) = best else { break };
            self.retarget(id, q);
            moved += 1;
        }
        self.stats.local_moves += moved as u64;
        moved
    }

    /// Points flow `id`'s filter at queue `q` (rewrites the f-node's match edge to OR:Qq,
    /// a successor of the original c-node, so the locality rule still holds).
    fn retarget(&mut self, id: usize, q: u16) {
        let (fi, node) = self.flow_filter[id].expect("flow has a filter");
        let f = self.flows[id].expect("live");
        self.cfg.filters[fi].dest = Dest::Queue(q);
        let label = format!("OR:Q{q}");
        if let Some(target) = self
            .graph
            .nodes
            .iter()
            .position(|n| n.alive && n.label == label)
        {
            let old = self.graph.nodes[node].ports[0].targets[0];
            self.graph.incoming[old].retain(|e| *e != (node, 0));
            self.graph.nodes[node].ports[0].targets[0] = target;
            self.graph.incoming[target].push((node, 0));
        }
        self.qmap.place(id, &f, Dest::Queue(q));
    }

    /// From-scratch re-evaluation: drops every filter and redoes the greedy search over the
    /// live flows (flushes stale filters). Flow ids are kept.
    pub fn rebuild(&mut self) -> Result<(), ModelError> {
        let live: Vec<(usize, FlowSpec)> = self.flows().map(|(i, f)| (i, *f)).collect();
        let mut fresh =
            Planner::with_config(self.model, self.cost, self.mode, self.initial.clone())?;
        let mut ids = vec![None; self.flows.len()];
        for (i, f) in &live {
            ids[*i] = Some(fresh.add_flow(*f)?);
        }
        // Map the fresh planner's dense ids back to ours.
        let mut qmap = Qmap::new(self.model.queues(), fresh.qmap.limits.clone());
        let mut flow_filter = vec![None; self.flows.len()];
        let mut flow_cnodes = vec![Vec::new(); self.flows.len()];
        let mut passed = vec![Vec::new(); fresh.passed.len()];
        for (old, new) in ids
            .iter()
            .enumerate()
            .filter_map(|(o, n)| n.map(|n| (o, n)))
        {
            let f = self.flows[old].expect("live");
            if let Some(d) = fresh.qmap.flow_dest[new] {
                qmap.place(old, &f, d);
            }
            flow_filter[old] = fresh.flow_filter[new];
            flow_cnodes[old] = fresh.flow_cnodes[new].clone();
            for &c in &flow_cnodes[old] {
                passed[c].push(old);
            }
        }
        self.cfg = fresh.cfg;
        self.graph = fresh.graph;
        self.stale = fresh.stale;
        self.filter_node = fresh.filter_node;
        self.qmap = qmap;
        self.flow_filter = flow_filter;
        self.flow_cnodes = flow_cnodes;
        self.passed = passed;
        self.stats.rebuilds += 1;
        self.stats.evaluations += fresh.stats.evaluations;
        Ok(())
    }
}

/// Full greedy search over a flow list (Alg. 2), then a bounded local search.
pub fn full_search<'a>(
    model: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    mode: FlowMapMode,
    flows: &[FlowSpec],
    local_moves: usize,
) -> Result<Planner<'a>, ModelError> {
    full_search_from(
        model,
        cost,
        mode,
        model.initial_config(),
        flows,
        local_moves,
    )
}

/// [`full_search`] from a given initial configuration.
pub fn full_search_from<'a>(
    model: &'a dyn NicModel,
    cost: &'a dyn CostFn,
    mode: FlowMapMode,
    initial: NicConfig,
    flows: &[FlowSpec],
    local_moves: usize,
) -> Result<Planner<'a>, ModelError> {
    let mut p = Planner::with_config(model, cost, mode, initial)?;
    check_demand(model, flows)?;
    // High-priority flows first: the flow-sorting function the thesis pairs with
    // isolation-style costs to avoid jumps.
    let mut order: Vec<&FlowSpec> = flows.iter().collect();
    order.sort_by_key(|f| !f.hp);
    for f in order {
        p.add_flow(*f)?;
    }
    p.local_search(local_moves);
    Ok(p)
}

/// Deterministic flows for tests, the CLI and the benchmark: `n` UDP clients of one
/// memcached-like server (distinct source address and port), every `hp_every`-th one
/// high-priority (0: none), each asking for `bw_mbps`.
pub fn generate_flows(n: usize, seed: u64, hp_every: usize, bw_mbps: u32) -> Vec<FlowSpec> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            // xorshift: spreads the source addresses over 10.0.0.0/16.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sip = 0x0a00_0000 | (x as u32 & 0xffff);
            let sport = 1024 + (i as u32 % 60000);
            FlowSpec {
                header: crate::pred::Header::ipv4(
                    crate::pred::PROTO_UDP,
                    sip,
                    0x0a01_0001,
                    sport,
                    11211,
                ),
                hp: hp_every > 0 && i % hp_every == 0,
                bw_mbps,
            }
        })
        .collect()
}

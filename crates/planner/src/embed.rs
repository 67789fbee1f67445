//! Embedding and specialisation (seed 003 §3.7, §4.2): the pipeline as a small LPG of
//! classification modules, each queue's copy pruned to what the queue's guarantee lets
//! reach it, and a guard that sends non-conforming packets to the full pipeline.

use crate::graph::{Dest, Graph, ModelError};
use crate::pred::{ip_str, Conj, Dnf, Field, Header, Term};
use std::fmt::Write as _;

/// A classification module's table.
#[derive(Clone, Debug, PartialEq)]
pub enum Classifier {
    /// Exact match on fields (like BESS ExactMatch): rules (values, gate); a duplicate key
    /// never matches (the first copy wins).
    ExactMatch {
        /// Fields of the key.
        fields: Vec<Field>,
        /// (key values, gate).
        rules: Vec<(Vec<u32>, usize)>,
    },
    /// Masked match with priorities (like WildcardMatch): the highest priority matching
    /// rule wins, ties by order.
    WildcardMatch {
        /// (matcher, priority, gate).
        rules: Vec<(Conj, i32, usize)>,
    },
    /// Longest-prefix match on the destination address (like IPLookup).
    IpLookup {
        /// (prefix, length, gate).
        routes: Vec<(u32, u8, usize)>,
    },
}

/// Where a gate leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Another module (index).
    Module(usize),
    /// An output of the pipeline (a port or an application).
    Out(String),
    /// Dropped.
    Drop,
}

/// One module of the LPG.
#[derive(Clone, Debug, PartialEq)]
pub struct LpgModule {
    /// Name.
    pub name: String,
    /// Table.
    pub classifier: Classifier,
    /// Gate of packets no rule matches.
    pub default_gate: usize,
    /// Gate targets.
    pub gates: Vec<Target>,
}

/// What the pipeline did with a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Left through an output.
    Out(String),
    /// Dropped by a module (its name).
    Drop(String),
}

/// A pipeline graph: modules (pruned ones are `None`) and the entry module.
#[derive(Clone, Debug, PartialEq)]
pub struct Lpg {
    /// Modules.
    pub modules: Vec<Option<LpgModule>>,
    /// Entry module.
    pub root: usize,
}

/// What pruning removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneStats {
    /// Rules removed.
    pub rules_removed: usize,
    /// Modules removed.
    pub modules_removed: usize,
}

const MAX_PATH_TERMS: usize = 64;
const MAX_DEFAULT_NEGATIONS: usize = 16;

impl Classifier {
    /// The rules as (matcher, gate) in evaluation order.
    pub fn ordered(&self) -> Vec<(Conj, usize)> {
        match self {
            Classifier::ExactMatch { fields, rules } => rules
                .iter()
                .map(|(vals, gate)| {
                    let mut c = Conj::TRUE;
                    for (f, v) in fields.iter().zip(vals) {
                        c.v[f.index()] = v & f.full_mask();
                        c.m[f.index()] = f.full_mask();
                    }
                    (c, *gate)
                })
                .collect(),
            Classifier::WildcardMatch { rules } => {
                let mut r: Vec<&(Conj, i32, usize)> = rules.iter().collect();
                r.sort_by_key(|(_, p, _)| std::cmp::Reverse(*p));
                r.into_iter().map(|(c, _, g)| (*c, *g)).collect()
            }
            Classifier::IpLookup { routes } => {
                let mut r: Vec<&(u32, u8, usize)> = routes.iter().collect();
                r.sort_by_key(|(_, len, _)| std::cmp::Reverse(*len));
                r.into_iter()
                    .map(|(p, len, g)| {
                        let m = if *len == 0 {
                            0
                        } else {
                            u32::MAX << (32 - *len as u32)
                        };
                        (Conj::atom(Field::DstIp, *p, m), *g)
                    })
                    .collect()
            }
        }
    }
    /// Number of rules.
    pub fn len(&self) -> usize {
        match self {
            Classifier::ExactMatch { rules, .. } => rules.len(),
            Classifier::WildcardMatch { rules } => rules.len(),
            Classifier::IpLookup { routes } => routes.len(),
        }
    }
    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Keeps only the rules (by position in the table) that `keep` accepts.
    fn retain(&mut self, keep: impl Fn(&Conj) -> bool) -> usize {
        let before = self.len();
        match self {
            Classifier::ExactMatch { .. } => {
                let ordered = self.ordered();
                if let Classifier::ExactMatch { rules, .. } = self {
                    let mut i = 0;
                    rules.retain(|_| {
                        i += 1;
                        keep(&ordered[i - 1].0)
                    });
                }
            }
            Classifier::WildcardMatch { rules } => rules.retain(|(c, _, _)| keep(c)),
            Classifier::IpLookup { routes } => routes.retain(|(p, len, _)| {
                let m = if *len == 0 {
                    0
                } else {
                    u32::MAX << (32 - *len as u32)
                };
                keep(&Conj::atom(Field::DstIp, *p, m))
            }),
        }
        before - self.len()
    }
}

impl LpgModule {
    /// The gate a packet leaves by.
    pub fn classify(&self, h: &Header) -> usize {
        self.classifier
            .ordered()
            .into_iter()
            .find(|(c, _)| c.eval(h))
            .map(|(_, g)| g)
            .unwrap_or(self.default_gate)
    }
}

impl Lpg {
    /// Checks gates, module references and that the graph is acyclic from the root.
    pub fn validate(&self) -> Result<(), ModelError> {
        let n = self.modules.len();
        let bad = |s: String| Err(ModelError::Input(s));
        if self.root >= n || self.modules[self.root].is_none() {
            return bad(format!("pipeline root {} is not a module", self.root));
        }
        for m in self.modules.iter().flatten() {
            let gates = m.gates.len();
            let mut used: Vec<usize> = m.classifier.ordered().iter().map(|(_, g)| *g).collect();
            used.push(m.default_gate);
            if let Some(g) = used.iter().find(|g| **g >= gates) {
                return bad(format!(
                    "module {}: gate {g} has no target ({gates} gates)",
                    m.name
                ));
            }
            if let Classifier::ExactMatch { fields, rules } = &m.classifier {
                if let Some((v, _)) = rules.iter().find(|(v, _)| v.len() != fields.len()) {
                    return bad(format!(
                        "module {}: rule has {} values for {} fields",
                        m.name,
                        v.len(),
                        fields.len()
                    ));
                }
            }
            for t in &m.gates {
                if let Target::Module(i) = t {
                    if *i >= n || self.modules[*i].is_none() {
                        return bad(format!(
                            "module {}: gate leads to missing module {i}",
                            m.name
                        ));
                    }
                }
            }
        }
        let back_to_root = self
            .modules
            .iter()
            .flatten()
            .any(|m| m.gates.contains(&Target::Module(self.root)));
        if back_to_root || self.topo().len() < self.reachable().iter().filter(|r| **r).count() {
            return bad("pipeline has a cycle".into());
        }
        Ok(())
    }

    fn reachable(&self) -> Vec<bool> {
        let mut seen = vec![false; self.modules.len()];
        let mut stack = vec![self.root];
        while let Some(i) = stack.pop() {
            if seen[i] {
                continue;
            }
            seen[i] = true;
            if let Some(m) = &self.modules[i] {
                for t in &m.gates {
                    if let Target::Module(j) = t {
                        if *j < seen.len() {
                            stack.push(*j);
                        }
                    }
                }
            }
        }
        seen
    }

    fn topo(&self) -> Vec<usize> {
        let seen = self.reachable();
        let n = self.modules.len();
        let mut indeg = vec![0usize; n];
        for i in (0..n).filter(|i| seen[*i]) {
            if let Some(m) = &self.modules[i] {
                for t in &m.gates {
                    if let Target::Module(j) = t {
                        indeg[*j] += 1;
                    }
                }
            }
        }
        let mut order = Vec::new();
        let mut ready = vec![self.root];
        while let Some(i) = ready.pop() {
            order.push(i);
            if let Some(m) = &self.modules[i] {
                for t in &m.gates {
                    if let Target::Module(j) = t {
                        // validate() rejects cycles; an edge back to the root is one.
                        if *j == self.root || indeg[*j] == 0 {
                            continue;
                        }
                        indeg[*j] -= 1;
                        if indeg[*j] == 0 {
                            ready.push(*j);
                        }
                    }
                }
            }
        }
        order
    }

    /// Runs a packet through the pipeline (bounded by the module count).
    pub fn run(&self, h: &Header) -> Outcome {
        let mut i = self.root;
        for _ in 0..=self.modules.len() {
            let Some(m) = self.modules.get(i).and_then(|m| m.as_ref()) else {
                return Outcome::Drop(format!("pruned module {i}"));
            };
            match &m.gates[m.classify(h)] {
                Target::Module(j) => i = *j,
                Target::Out(o) => return Outcome::Out(o.clone()),
                Target::Drop => return Outcome::Drop(m.name.clone()),
            }
        }
        Outcome::Drop("pipeline loop".into())
    }

    /// The copy of the pipeline that can serve packets satisfying `guarantee`: a rule is
    /// removed when (path predicate ∧ rule) is unsatisfiable — no packet reaching the
    /// module under the guarantee can match it, so the rule never fires — and modules no
    /// satisfiable path reaches are removed. Path predicates are weakened (never
    /// strengthened) when they grow, which only keeps more, so pruning stays sound.
    pub fn specialize(&self, guarantee: &Dnf) -> (Lpg, PruneStats) {
        let mut out = self.clone();
        let mut stats = PruneStats::default();
        let n = self.modules.len();
        let mut at: Vec<Dnf> = vec![Dnf::falsity(); n];
        at[self.root] = guarantee.clone();
        for i in self.topo() {
            let p = std::mem::take(&mut at[i]);
            if !p.maybe_sat() {
                if out.modules[i].take().is_some() {
                    stats.modules_removed += 1;
                }
                continue;
            }
            let Some(m) = out.modules[i].as_mut() else {
                continue;
            };
            let ordered = m.classifier.ordered();
            let mut reach_gate: Vec<Dnf> = vec![Dnf::falsity(); m.gates.len()];
            for (c, g) in &ordered {
                let t = p.and_term(&Term::of(*c));
                if t.maybe_sat() {
                    reach_gate[*g].or(&t);
                }
            }
            stats.rules_removed += m
                .classifier
                .retain(|c| p.and_term(&Term::of(*c)).maybe_sat());
            let default = if ordered.len() <= MAX_DEFAULT_NEGATIONS {
                p.and_term(&Term {
                    pos: Conj::TRUE,
                    neg: ordered.iter().map(|(c, _)| *c).collect(),
                })
            } else {
                p.clone()
            };
            reach_gate[m.default_gate].or(&default);
            for (g, t) in m.gates.iter().enumerate() {
                if let Target::Module(j) = t {
                    let mut d = std::mem::take(&mut reach_gate[g]);
                    d.terms.retain(|t| t.maybe_sat());
                    at[*j].or(&d);
                    if at[*j].terms.len() > MAX_PATH_TERMS {
                        at[*j] = Dnf::truth();
                    }
                }
            }
        }
        for (i, m) in out.modules.iter_mut().enumerate() {
            if m.is_some() && !self.reachable()[i] {
                *m = None;
                stats.modules_removed += 1;
            }
        }
        (out, stats)
    }

    /// Text listing of the modules and their rules.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (i, m) in self.modules.iter().enumerate() {
            let Some(m) = m else {
                let _ = writeln!(s, "  [{i}] (pruned)");
                continue;
            };
            let kind = match &m.classifier {
                Classifier::ExactMatch { .. } => "ExactMatch",
                Classifier::WildcardMatch { .. } => "WildcardMatch",
                Classifier::IpLookup { .. } => "IPLookup",
            };
            let _ = writeln!(s, "  [{i}] {} {kind}: {} rules", m.name, m.classifier.len());
            for (c, g) in m.classifier.ordered() {
                let _ = writeln!(s, "      {c} -> {}", self.target_name(&m.gates[g]));
            }
            let _ = writeln!(
                s,
                "      default -> {}",
                self.target_name(&m.gates[m.default_gate])
            );
        }
        s
    }

    fn target_name(&self, t: &Target) -> String {
        match t {
            Target::Module(j) => self.modules[*j]
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_else(|| format!("[{j}] (pruned)")),
            Target::Out(o) => format!("out:{o}"),
            Target::Drop => "drop".into(),
        }
    }

    /// Graphviz clusters of the pipeline (prefix keeps node names unique across queues).
    pub fn to_dot(&self, prefix: &str, label: &str) -> String {
        let mut s = format!("  subgraph cluster_{prefix} {{\n    label=\"{label}\";\n");
        for (i, m) in self.modules.iter().enumerate() {
            let Some(m) = m else { continue };
            let _ = writeln!(
                s,
                "    {prefix}_{i} [label=\"{}\\n{} rules\"];",
                m.name,
                m.classifier.len()
            );
            for (g, t) in m.gates.iter().enumerate() {
                let dst = match t {
                    Target::Module(j) if self.modules[*j].is_some() => format!("{prefix}_{j}"),
                    Target::Module(_) => continue,
                    Target::Out(o) => {
                        let id = format!(
                            "{prefix}_out_{}",
                            o.replace(|c: char| !c.is_alphanumeric(), "_")
                        );
                        let _ = writeln!(s, "    {id} [label=\"{o}\",shape=ellipse];");
                        id
                    }
                    Target::Drop => {
                        let _ = writeln!(s, "    {prefix}_drop [label=\"drop\",shape=ellipse];");
                        format!("{prefix}_drop")
                    }
                };
                let _ = writeln!(s, "    {prefix}_{i} -> {dst} [label=\"{g}\"];");
            }
        }
        s.push_str("  }\n");
        s
    }
}

/// One queue's pipeline: the guard (the queue's guarantee) and the pruned copy.
#[derive(Clone, Debug)]
pub struct QueuePipeline {
    /// The queue.
    pub dest: Dest,
    /// Guarantee predicate of the queue (checked per packet by the guard).
    pub guard: Dnf,
    /// The pruned pipeline (the full one on the default queue).
    pub pipeline: Lpg,
    /// What pruning removed.
    pub stats: PruneStats,
    /// Packets processed.
    pub packets: u64,
    /// Packets that failed the guard and went to the full pipeline.
    pub guard_misses: u64,
}

impl QueuePipeline {
    /// Processes a packet that arrived on this queue: the pruned pipeline when the guard
    /// holds, the full pipeline (counted) when it does not.
    pub fn process(&mut self, full: &Lpg, h: &Header) -> Outcome {
        self.packets += 1;
        if self.guard.eval(h) {
            self.pipeline.run(h)
        } else {
            self.guard_misses += 1;
            full.run(h)
        }
    }
}

/// Specialises the pipeline for every RX queue of a configured PRG. The default queue
/// (Q0) keeps the full pipeline: it takes overflow, fragments and what arrives while the
/// NIC is being reconfigured (§4.2).
pub fn specialise(prg: &Graph, lpg: &Lpg) -> Vec<QueuePipeline> {
    prg.guarantees()
        .into_iter()
        .filter(|(d, _)| matches!(d, Dest::Queue(_)))
        .map(|(dest, guard)| {
            let (pipeline, stats) = if dest == Dest::Queue(0) {
                (lpg.clone(), PruneStats::default())
            } else {
                lpg.specialize(&guard)
            };
            let guard = if dest == Dest::Queue(0) {
                Dnf::truth()
            } else {
                guard
            };
            QueuePipeline {
                dest,
                guard,
                pipeline,
                stats,
                packets: 0,
                guard_misses: 0,
            }
        })
        .collect()
}

/// A demonstration pipeline: a WildcardMatch on the destination port, an ExactMatch per
/// service (protocol, destination, port) and an IPLookup for the rest.
pub fn demo_pipeline(services: &[(u32, u32, u32)], routes: &[(u32, u8)]) -> Lpg {
    let mut ports: Vec<u32> = services.iter().map(|s| s.2).collect();
    ports.sort_unstable();
    ports.dedup();
    let wild = LpgModule {
        name: "by_port".into(),
        classifier: Classifier::WildcardMatch {
            rules: ports
                .iter()
                .map(|p| (Conj::eq(Field::DstPort, *p), 1, 0))
                .collect(),
        },
        default_gate: 1,
        gates: vec![Target::Module(1), Target::Module(2)],
    };
    let exact = LpgModule {
        name: "services".into(),
        classifier: Classifier::ExactMatch {
            fields: vec![Field::IpProto, Field::DstIp, Field::DstPort],
            rules: services
                .iter()
                .enumerate()
                .map(|(i, (p, d, port))| (vec![*p, *d, *port], i + 1))
                .collect(),
        },
        default_gate: 0,
        gates: std::iter::once(Target::Module(2))
            .chain(
                services
                    .iter()
                    .map(|(_, d, p)| Target::Out(format!("{}:{p}", ip_str(*d)))),
            )
            .collect(),
    };
    let lookup = LpgModule {
        name: "routes".into(),
        classifier: Classifier::IpLookup {
            routes: routes
                .iter()
                .enumerate()
                .map(|(i, (p, l))| (*p, *l, i + 1))
                .collect(),
        },
        default_gate: 0,
        gates: std::iter::once(Target::Drop)
            .chain(
                routes
                    .iter()
                    .map(|(p, l)| Target::Out(format!("route {}/{l}", ip_str(*p)))),
            )
            .collect(),
    };
    Lpg {
        modules: vec![Some(wild), Some(exact), Some(lookup)],
        root: 0,
    }
}

//! The dataflow model (seed 003 ch. 3): f-nodes with ported outputs, AND/OR o-nodes, c-nodes
//! that a configuration value replaces by a subgraph under the locality rule, and the
//! reasoning over it: path predicates, per-queue guarantees and flow tracing.

use crate::pred::{Dnf, Header, Term};
use std::collections::{HashMap, VecDeque};
use std::fmt::{self, Write as _};

/// Index of a node in a [`Graph`].
pub type NodeId = usize;

/// Where a packet ends up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dest {
    /// An RX queue (0 is the default queue).
    Queue(u16),
    /// Dropped by the NIC or the XDP program.
    Drop,
    /// Passed to the kernel stack (XDP_PASS).
    Kernel,
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Queue(q) => write!(f, "Q{q}"),
            Dest::Drop => write!(f, "drop"),
            Dest::Kernel => write!(f, "kernel"),
        }
    }
}

/// What a node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Function node: one input, exactly one enabled output port per packet.
    F,
    /// Logical operator node: T enabled iff any (OR) / all (AND) operands are true.
    Or,
    /// See [`NodeKind::Or`].
    And,
    /// Configuration node of a named table; `default_port` is what an unconfigured
    /// remainder does with a packet (pass it on), used when tracing through a barrier.
    Config {
        /// Table or variable name (the c-node's type).
        table: String,
        /// Port that unconfigured traffic takes.
        default_port: usize,
    },
    /// A sink: an RX queue, the drop sink or the kernel.
    Sink(Dest),
}

/// An output port: its predicate (the packets that enable it) and its edges.
#[derive(Clone, Debug)]
pub struct Port {
    /// Port name.
    pub name: String,
    /// Port predicate, relative to the node's input.
    pub pred: Term,
    /// Whether edges from this port are the operand's "true" edge for an o-node.
    pub polarity: bool,
    /// Successor nodes.
    pub targets: Vec<NodeId>,
}

impl Port {
    /// A port with a predicate and targets; polarity true.
    pub fn new(name: &str, pred: Term, targets: Vec<NodeId>) -> Port {
        Port {
            name: name.into(),
            pred,
            polarity: true,
            targets,
        }
    }
}

/// A node of a PRG or LPG.
#[derive(Clone, Debug)]
pub struct Node {
    /// Label (what the node computes).
    pub label: String,
    /// Kind.
    pub kind: NodeKind,
    /// Output ports.
    pub ports: Vec<Port>,
    /// Implemented in driver software rather than hardware (dashed in the thesis).
    pub software: bool,
    /// Free-form attributes (e.g. a rate limit).
    pub attrs: Vec<String>,
    /// False once a configuration replaced it.
    pub alive: bool,
}

impl Node {
    /// A node without ports.
    pub fn new(label: &str, kind: NodeKind) -> Node {
        Node {
            label: label.into(),
            kind,
            ports: Vec::new(),
            software: false,
            attrs: Vec::new(),
            alive: true,
        }
    }
    /// Adds a port (builder style).
    pub fn port(mut self, p: Port) -> Node {
        self.ports.push(p);
        self
    }
}

/// A reference from a subgraph Γ to a node: one of Γ's fresh nodes or an existing node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRef {
    /// The i-th node of Γ.
    New(usize),
    /// A node of G (must be a successor of the c-node).
    Old(NodeId),
}

/// Γ = f_x(c): the fresh nodes a configuration value puts in place of c-node x, and the node
/// that x's incoming edges now lead to (`None`: those edges are removed).
#[derive(Clone, Debug, Default)]
pub struct Subgraph {
    /// Fresh nodes; their ports' targets are indexes into `refs`.
    pub nodes: Vec<(Node, Vec<Vec<NodeRef>>)>,
    /// Where edges that entered x go.
    pub entry: Option<NodeRef>,
}

/// Model errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// A subgraph broke the locality rule.
    Locality(String),
    /// The node is not a (live) c-node.
    NotConfigNode(NodeId),
    /// A configuration the NIC cannot hold.
    Constraint(String),
    /// Bad input (file, interface, arguments).
    Input(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Locality(s) => write!(f, "locality rule violated: {s}"),
            ModelError::NotConfigNode(n) => write!(f, "node {n} is not a live c-node"),
            ModelError::Constraint(s) => write!(f, "configuration not supported by the NIC: {s}"),
            ModelError::Input(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for ModelError {}

/// What [`Graph::apply`] changed, so [`Graph::undo`] can restore it.
#[derive(Debug)]
pub struct Applied {
    /// The replaced c-node.
    pub cnode: NodeId,
    /// Id of Γ's first node (Γ occupies `first..first+len`).
    pub first: NodeId,
    /// Where x's incoming edges now lead.
    pub entry: Option<NodeId>,
    redirected: Vec<(NodeId, usize, usize)>,
    incoming_touched: Vec<NodeId>,
}

/// A dataflow graph (PRG or LPG). Nodes are never removed, only marked dead, so ids stay
/// stable.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Incoming edges of each node: (source, port index).
    pub incoming: Vec<Vec<(NodeId, usize)>>,
    /// Entry node (where packets come in).
    pub root: NodeId,
    /// Current (live) c-node of each recursive table, by table name.
    pub tables: Vec<(String, NodeId)>,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: &str) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }
    /// Adds a node (its port targets must already exist or be linked later).
    pub fn add(&mut self, n: Node) -> NodeId {
        let id = self.nodes.len();
        self.incoming.push(Vec::new());
        for (pi, p) in n.ports.iter().enumerate() {
            for &t in &p.targets {
                self.incoming[t].push((id, pi));
            }
        }
        if let NodeKind::Config { table, .. } = &n.kind {
            self.set_table(table.clone(), id);
        }
        self.nodes.push(n);
        id
    }
    /// Adds an edge from a port.
    pub fn link(&mut self, from: NodeId, port: usize, to: NodeId) {
        self.nodes[from].ports[port].targets.push(to);
        self.incoming[to].push((from, port));
    }
    fn set_table(&mut self, table: String, id: NodeId) {
        match self.tables.iter_mut().find(|(t, _)| *t == table) {
            Some(e) => e.1 = id,
            None => self.tables.push((table, id)),
        }
    }
    /// The live c-node of a table.
    pub fn table(&self, name: &str) -> Option<NodeId> {
        self.tables
            .iter()
            .find(|(t, _)| t == name)
            .map(|(_, id)| *id)
            .filter(|id| self.nodes[*id].alive)
    }
    /// The sink node of a destination.
    pub fn sink(&self, d: Dest) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.alive && n.kind == NodeKind::Sink(d))
    }
    /// Successors of x over all ports (O_x).
    pub fn successors(&self, x: NodeId) -> Vec<NodeId> {
        let mut s: Vec<NodeId> = self.nodes[x]
            .ports
            .iter()
            .flat_map(|p| p.targets.iter().copied())
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Applies Γ in place of c-node x (the thesis's formal definition): x and its edges go,
    /// Γ's fresh nodes and edges come. Every Γ edge must end in Γ or in O_x; edges into Γ
    /// come only from I_x (x's incoming edges, redirected to `entry`).
    pub fn apply(&mut self, x: NodeId, sub: Subgraph) -> Result<Applied, ModelError> {
        let Some(node) = self.nodes.get(x) else {
            return Err(ModelError::NotConfigNode(x));
        };
        if !node.alive || !matches!(node.kind, NodeKind::Config { .. }) {
            return Err(ModelError::NotConfigNode(x));
        }
        let outs = self.successors(x);
        let first = self.nodes.len();
        let resolve = |r: NodeRef| -> Result<NodeId, ModelError> {
            match r {
                NodeRef::New(i) if i < sub.nodes.len() => Ok(first + i),
                NodeRef::New(i) => Err(ModelError::Locality(format!(
                    "edge to fresh node {i} of a {}-node subgraph",
                    sub.nodes.len()
                ))),
                NodeRef::Old(o) if outs.binary_search(&o).is_ok() => Ok(o),
                NodeRef::Old(o) => Err(ModelError::Locality(format!(
                    "edge to node {o} ({}), which is not a successor of c-node {x} ({})",
                    self.nodes.get(o).map(|n| n.label.as_str()).unwrap_or("?"),
                    self.nodes[x].label
                ))),
            }
        };
        // Validate everything before changing anything.
        let mut resolved: Vec<(Node, Vec<Vec<NodeId>>)> = Vec::with_capacity(sub.nodes.len());
        for (n, targets) in &sub.nodes {
            if targets.len() != n.ports.len() {
                return Err(ModelError::Locality(format!(
                    "node {} has {} ports but {} target lists",
                    n.label,
                    n.ports.len(),
                    targets.len()
                )));
            }
            let mut ts = Vec::with_capacity(targets.len());
            for t in targets {
                ts.push(
                    t.iter()
                        .map(|r| resolve(*r))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            resolved.push((n.clone(), ts));
        }
        let entry = sub.entry.map(resolve).transpose()?;
        let mut incoming_touched = Vec::new();
        self.incoming.resize(first + resolved.len(), Vec::new());
        for (mut n, ts) in resolved {
            let id = self.nodes.len();
            for (pi, (p, t)) in n.ports.iter_mut().zip(ts).enumerate() {
                for &target in &t {
                    self.incoming[target].push((id, pi));
                    if target < first {
                        incoming_touched.push(target);
                    }
                }
                p.targets = t;
            }
            if let NodeKind::Config { table, .. } = &n.kind {
                self.set_table(table.clone(), id);
            }
            self.nodes.push(n);
        }
        // Redirect I_x's edges into x.
        let mut redirected = Vec::new();
        let ins = std::mem::take(&mut self.incoming[x]);
        for &(src, pi) in &ins {
            let targets = &mut self.nodes[src].ports[pi].targets;
            if let Some(k) = targets.iter().position(|&t| t == x) {
                match entry {
                    Some(e) => {
                        targets[k] = e;
                        self.incoming[e].push((src, pi));
                        if e < first {
                            incoming_touched.push(e);
                        }
                    }
                    None => {
                        targets.remove(k);
                    }
                }
                redirected.push((src, pi, k));
            }
        }
        self.incoming[x] = ins;
        self.nodes[x].alive = false;
        // x's outgoing edges are gone.
        for o in &outs {
            self.incoming[*o].retain(|&(s, _)| s != x);
        }
        incoming_touched.extend(outs.iter().copied());
        Ok(Applied {
            cnode: x,
            first,
            entry,
            redirected,
            incoming_touched,
        })
    }

    /// Reverts the most recent [`Graph::apply`] (applications must be undone in reverse order).
    pub fn undo(&mut self, a: Applied) {
        for &(src, pi, k) in a.redirected.iter().rev() {
            let targets = &mut self.nodes[src].ports[pi].targets;
            if a.entry.is_some() {
                targets[k] = a.cnode;
            } else {
                targets.insert(k, a.cnode);
            }
        }
        self.nodes.truncate(a.first);
        self.incoming.truncate(a.first);
        let mut touched = a.incoming_touched;
        touched.sort_unstable();
        touched.dedup();
        for t in touched {
            self.incoming[t].retain(|&(s, _)| s < a.first);
        }
        if let Some(e) = a.entry.filter(|e| *e < a.first) {
            let ins = self.incoming[a.cnode].clone();
            self.incoming[e].retain(|edge| !ins.contains(edge));
        }
        self.nodes[a.cnode].alive = true;
        for (pi, p) in self.nodes[a.cnode].ports.clone().iter().enumerate() {
            for &t in &p.targets {
                self.incoming[t].push((a.cnode, pi));
            }
        }
        let label = match &self.nodes[a.cnode].kind {
            NodeKind::Config { table, .. } => table.clone(),
            _ => unreachable!("apply only replaces c-nodes"),
        };
        self.set_table(label, a.cnode);
    }

    /// Nodes reachable from the root in topological order (the graph is a DAG).
    pub fn topo_order(&self) -> Vec<NodeId> {
        let n = self.nodes.len();
        let mut reach = vec![false; n];
        let mut stack = vec![self.root];
        while let Some(x) = stack.pop() {
            if reach[x] {
                continue;
            }
            reach[x] = true;
            stack.extend(self.nodes[x].ports.iter().flat_map(|p| p.targets.iter()));
        }
        let mut indeg = vec![0usize; n];
        for x in (0..n).filter(|&x| reach[x]) {
            for p in &self.nodes[x].ports {
                for &t in &p.targets {
                    indeg[t] += 1;
                }
            }
        }
        let mut q: VecDeque<NodeId> = VecDeque::from([self.root]);
        let mut order = Vec::new();
        while let Some(x) = q.pop_front() {
            order.push(x);
            for p in &self.nodes[x].ports {
                for &t in &p.targets {
                    indeg[t] -= 1;
                    if indeg[t] == 0 {
                        q.push_back(t);
                    }
                }
            }
        }
        order
    }

    /// Path predicates: for every node, the predicate of the packets that reach it (the
    /// disjunction over its incoming paths of the conjunction of the traversed ports'
    /// predicates). O-nodes: OR's true port is the disjunction of its true operands, AND's
    /// the conjunction; the false port the dual over false operands. C-nodes pass packets
    /// through their default port (an unconfigured remainder).
    pub fn path_predicates(&self) -> Vec<Dnf> {
        let order = self.topo_order();
        let mut at: Vec<Dnf> = vec![Dnf::falsity(); self.nodes.len()];
        // For o-nodes: incoming predicates split by polarity.
        let mut o_true: Vec<Vec<Dnf>> = vec![Vec::new(); self.nodes.len()];
        let mut o_false: Vec<Vec<Dnf>> = vec![Vec::new(); self.nodes.len()];
        at[self.root] = Dnf::truth();
        for &x in &order {
            let node = &self.nodes[x];
            let (pt, pf) = (
                std::mem::take(&mut o_true[x]),
                std::mem::take(&mut o_false[x]),
            );
            let mut o_reached = None;
            let port_preds: Vec<Dnf> = match &node.kind {
                NodeKind::Or | NodeKind::And => {
                    let combine = |v: &[Dnf], conj: bool| -> Dnf {
                        if v.is_empty() {
                            return Dnf::falsity();
                        }
                        let mut acc = v[0].clone();
                        for d in &v[1..] {
                            if conj {
                                acc = acc.and(d);
                            } else {
                                acc.or(d);
                            }
                        }
                        acc
                    };
                    let is_and = node.kind == NodeKind::And;
                    let t = combine(&pt, is_and);
                    let f = combine(&pf, !is_and);
                    o_reached = Some(t.clone());
                    node.ports
                        .iter()
                        .map(|p| if p.polarity { t.clone() } else { f.clone() })
                        .collect()
                }
                NodeKind::Config { default_port, .. } => node
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, _)| {
                        if i == *default_port {
                            at[x].clone()
                        } else {
                            Dnf::falsity()
                        }
                    })
                    .collect(),
                _ => node.ports.iter().map(|p| at[x].and_term(&p.pred)).collect(),
            };
            for (p, pred) in node.ports.iter().zip(port_preds) {
                for &t in &p.targets {
                    match self.nodes[t].kind {
                        NodeKind::Or | NodeKind::And => {
                            if p.polarity {
                                o_true[t].push(pred.clone());
                            } else {
                                o_false[t].push(pred.clone());
                            }
                        }
                        _ => at[t].or(&pred),
                    }
                }
            }
            // An o-node's own "reached" predicate is its true output.
            if let Some(t) = o_reached {
                at[x] = t;
            }
        }
        at
    }

    /// Guarantee predicate of every sink: what is true of every packet that reaches it.
    pub fn guarantees(&self) -> Vec<(Dest, Dnf)> {
        let at = self.path_predicates();
        let mut out: Vec<(Dest, Dnf)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n.kind {
                NodeKind::Sink(d) if n.alive => {
                    let mut p = at[i].clone();
                    p.simplify();
                    Some((d, p))
                }
                _ => None,
            })
            .collect();
        out.sort_by_key(|(d, _)| *d);
        out
    }

    /// Follows one concrete packet from `from` to its sink, calling `on_cnode` for every
    /// c-node it passes through (the barriers an incremental flow map must remember); the
    /// walk stops there when `on_cnode` returns false. `None` when it stopped, when the
    /// packet enables no port (a model bug) or when the walk exceeds the node count.
    pub fn trace_from(
        &self,
        h: &Header,
        from: NodeId,
        mut on_cnode: impl FnMut(NodeId) -> bool,
    ) -> Option<Dest> {
        let mut x = from;
        for _ in 0..=self.nodes.len() {
            let node = &self.nodes[x];
            let port = match &node.kind {
                NodeKind::Sink(d) => return Some(*d),
                NodeKind::Config { default_port, .. } => {
                    if !on_cnode(x) {
                        return None;
                    }
                    *default_port
                }
                // Along a single packet's path an OR reached by a true edge is true.
                NodeKind::Or => node.ports.iter().position(|p| p.polarity)?,
                // An AND depends on operands off this path: decide it from its predicate.
                NodeKind::And => {
                    let t = self.path_predicates()[x].eval(h);
                    node.ports.iter().position(|p| p.polarity == t)?
                }
                NodeKind::F => node.ports.iter().position(|p| p.pred.eval(h))?,
            };
            x = *node.ports[port].targets.first()?;
        }
        None
    }

    /// Follows a packet from the root.
    pub fn trace(&self, h: &Header) -> Option<Dest> {
        self.trace_from(h, self.root, |_| true)
    }

    /// Text listing of the live nodes reachable from the root, then the others.
    pub fn to_text(&self) -> String {
        let mut s = format!("graph {}\n", self.name);
        let order = self.topo_order();
        let mut seen = vec![false; self.nodes.len()];
        for &x in &order {
            seen[x] = true;
        }
        let rest = (0..self.nodes.len()).filter(|&x| !seen[x] && self.nodes[x].alive);
        for x in order.iter().copied().chain(rest) {
            let n = &self.nodes[x];
            let kind = match &n.kind {
                NodeKind::F => "node".to_string(),
                NodeKind::Or => "or".to_string(),
                NodeKind::And => "and".to_string(),
                NodeKind::Config { table, .. } => format!("config<{table}>"),
                NodeKind::Sink(d) => format!("sink<{d}>"),
            };
            let _ = write!(s, "  {kind} {} [#{x}]", n.label);
            if n.software {
                s.push_str(" attr software");
            }
            for a in &n.attrs {
                let _ = write!(s, " attr {a:?}");
            }
            s.push('\n');
            for p in &n.ports {
                let targets: Vec<&str> = p
                    .targets
                    .iter()
                    .map(|t| self.nodes[*t].label.as_str())
                    .collect();
                let _ = write!(s, "    port {}[{}]", p.name, targets.join(" "));
                if matches!(n.kind, NodeKind::F) {
                    let _ = write!(s, " semantics {{ {} }}", p.pred);
                }
                s.push('\n');
            }
        }
        s
    }

    /// Graphviz text: f-nodes white boxes (dashed when software), o-nodes grey, c-nodes
    /// turquoise, as in the thesis's figures; ranked left to right, with at most
    /// [`DOT_GROUP_CAP`] filters of one kind drawn (see [`Graph::to_dot_body`]).
    pub fn to_dot(&self) -> String {
        let mut s = format!(
            "digraph \"{}\" {{\n  rankdir=LR;\n  newrank=true;\n  node [shape=box];\n",
            self.name
        );
        s.push_str(&self.to_dot_body("  "));
        s.push_str("}\n");
        s
    }

    /// The nodes and edges of [`Graph::to_dot`], each line indented by `indent`. Readable
    /// at any size: the transmit side (nodes named `Tx...`) is drawn apart from the
    /// receive side; f-nodes of one kind (the label before its first parenthesis, e.g.
    /// `5T`) beyond the first [`DOT_GROUP_CAP`] are drawn as one summary node ("... N more
    /// 5T filters") taking over their edges, so a plan for many flows stays as wide as one
    /// for a few.
    pub fn to_dot_body(&self, indent: &str) -> String {
        let alive: Vec<usize> = (0..self.nodes.len())
            .filter(|&x| self.nodes[x].alive)
            .collect();
        // Kind of an f-node with a parenthesised argument, and how many of each.
        let kind = |n: &Node| -> Option<String> {
            match n.kind {
                NodeKind::F => n.label.split_once('(').map(|(k, _)| k.to_string()),
                _ => None,
            }
        };
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut total: HashMap<String, usize> = HashMap::new();
        for &x in &alive {
            if let Some(k) = kind(&self.nodes[x]) {
                *total.entry(k).or_default() += 1;
            }
        }
        // Where each node is drawn: itself, or its kind's summary node.
        let mut rep: HashMap<usize, String> = HashMap::new();
        let mut summaries: Vec<(String, String)> = Vec::new();
        for &x in &alive {
            let id = match kind(&self.nodes[x]) {
                Some(k) if total[&k] > DOT_GROUP_CAP + 1 => {
                    let i = seen.entry(k.clone()).or_default();
                    *i += 1;
                    if *i <= DOT_GROUP_CAP {
                        format!("n{x}")
                    } else {
                        let sid =
                            format!("more_{}", k.replace(|c: char| !c.is_alphanumeric(), "_"));
                        if *i == DOT_GROUP_CAP + 1 {
                            let more = total[&k] - DOT_GROUP_CAP;
                            summaries.push((
                                sid.clone(),
                                format!(
                                    "... {more} more {k} filters\\n(the text report lists them)"
                                ),
                            ));
                        }
                        sid
                    }
                }
                _ => format!("n{x}"),
            };
            rep.insert(x, id);
        }
        let mut rx = String::new();
        let mut tx = String::new();
        for &x in &alive {
            let n = &self.nodes[x];
            if rep[&x] != format!("n{x}") {
                continue;
            }
            let style = match &n.kind {
                NodeKind::F if n.software => "style=dashed".to_string(),
                NodeKind::F => String::new(),
                NodeKind::Or | NodeKind::And => "shape=ellipse,style=filled,fillcolor=grey".into(),
                NodeKind::Config { .. } => "style=filled,fillcolor=turquoise".into(),
                NodeKind::Sink(_) => "shape=doubleoctagon".into(),
            };
            let out = if n.label.starts_with("Tx") {
                &mut tx
            } else {
                &mut rx
            };
            // One condition per line: a filter's box is as wide as its longest field.
            let _ = writeln!(
                out,
                "{indent}  n{x} [label=\"{}\" {style}];",
                n.label
                    .replace('"', "'")
                    .replace(" & ", "\\n")
                    .replacen('(', "\\n(", 1)
            );
        }
        // The filters of one kind in one column: a chain of them grows down, not right.
        let mut kinds: Vec<&String> = total.keys().filter(|k| total[*k] > 1).collect();
        kinds.sort();
        for k in kinds {
            let mut ids: Vec<String> = alive
                .iter()
                .filter(|&&x| kind(&self.nodes[x]).as_ref() == Some(k))
                .map(|x| rep[x].clone())
                .collect();
            ids.dedup();
            let _ = writeln!(rx, "{indent}  {{ rank=same; {}; }}", ids.join("; "));
        }
        for (id, label) in &summaries {
            let _ = writeln!(
                rx,
                "{indent}  {id} [label=\"{label}\" style=\"dashed,filled\",fillcolor=lightyellow];"
            );
        }
        let mut edges = String::new();
        let mut drawn = std::collections::HashSet::new();
        for &x in &alive {
            for p in &self.nodes[x].ports {
                for t in &p.targets {
                    let (a, b) = (&rep[&x], rep.get(t).cloned().unwrap_or(format!("n{t}")));
                    if a == &b || !drawn.insert((a.clone(), b.clone(), p.name.clone())) {
                        continue;
                    }
                    let _ = writeln!(edges, "{indent}{a} -> {b} [label=\"{}\"];", p.name);
                }
            }
        }
        let mut s = String::new();
        if tx.is_empty() {
            s.push_str(&rx.replace(&format!("{indent}  "), indent));
        } else {
            let _ = write!(
                s,
                "{indent}subgraph cluster_rx {{\n{indent}  label=\"receive\";\n{rx}{indent}}}\n\
                 {indent}subgraph cluster_tx {{\n{indent}  label=\"transmit\";\n{tx}{indent}}}\n"
            );
        }
        s.push_str(&edges);
        s
    }
}

/// Most f-nodes of one kind (e.g. `5T` filters) [`Graph::to_dot`] draws; the rest become one
/// summary node.
pub const DOT_GROUP_CAP: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pred::{Conj, Field, PROTO_UDP};

    /// RxIn enables two boolean f-nodes; an AND of their true ports leads to Q1, its false
    /// output (an OR of the false edges) to Q0.
    fn and_graph() -> Graph {
        let mut g = Graph::new("and");
        let q0 = g.add(Node::new("Q0", NodeKind::Sink(Dest::Queue(0))));
        let q1 = g.add(Node::new("Q1", NodeKind::Sink(Dest::Queue(1))));
        let mut f = Port::new("false", Term::truth(), vec![q0]);
        f.polarity = false;
        let and = g.add(
            Node::new("AND", NodeKind::And)
                .port(Port::new("true", Term::truth(), vec![q1]))
                .port(f),
        );
        let boolean = |g: &mut Graph, name: &str, c: Conj| {
            let mut no = Port::new("false", Term::not(c), vec![and]);
            no.polarity = false;
            g.add(
                Node::new(name, NodeKind::F)
                    .port(Port::new("true", Term::of(c), vec![and]))
                    .port(no),
            )
        };
        let udp = boolean(&mut g, "IsUDP", Conj::eq(Field::IpProto, PROTO_UDP));
        let dns = boolean(&mut g, "Is53", Conj::eq(Field::DstPort, 53));
        g.root = g.add(Node::new("RxIn", NodeKind::F).port(Port::new(
            "out",
            Term::truth(),
            vec![udp, dns],
        )));
        g
    }

    #[test]
    fn and_o_node_semantics() {
        let g = and_graph();
        let guarantees = g.guarantees();
        let q1 = &guarantees
            .iter()
            .find(|(d, _)| *d == Dest::Queue(1))
            .unwrap()
            .1;
        let q0 = &guarantees
            .iter()
            .find(|(d, _)| *d == Dest::Queue(0))
            .unwrap()
            .1;
        for (proto, port, want) in [
            (PROTO_UDP, 53, 1),
            (PROTO_UDP, 54, 0),
            (6, 53, 0),
            (6, 80, 0),
        ] {
            let h = Header::ipv4(proto, 1, 2, 3, port);
            assert_eq!(g.trace(&h), Some(Dest::Queue(want)), "{h}");
            assert_eq!(q1.eval(&h), want == 1, "{h}");
            assert_eq!(q0.eval(&h), want == 0, "{h}");
        }
    }
}

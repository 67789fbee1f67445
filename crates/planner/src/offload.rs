//! Offload into XDP: which part of the pipeline downstream of an AF_XDP port the XDP program
//! (`crates/drivers/bpf/offload.bpf.c`) can do, and the contents of its maps.
//!
//! The XDP "NIC" here is the model's `XdpPort` made concrete: a byte-gather key (any
//! ExactMatch on packet fields, the IPv4 5-tuple included), a hash map of rules, and per
//! rule one action: drop, XDP_TX, XDP_REDIRECT through a devmap, or up to the port's AF_XDP
//! socket; optional MAC swap / destination-MAC rewrite first. The embedding is a walk from
//! the port's PortInc: a gate is offloaded when the chain behind it is made only of what the
//! program does (MACSwap, then PortOut to this port or to another AF_XDP port of the same
//! namespace, or Sink, or an unconnected gate, which drops); anything else, and any packet
//! the program is unsure of (too short for the key), goes up to user space, which runs the
//! full pipeline. So the offloaded pipeline and the user-space one agree on every packet by
//! construction, and the differential tests check it.
//!
//! [`OffloadState::sync`] turns a new plan into map operations against what is installed:
//! counter slots stay with their rule across syncs, so counters survive unrelated changes;
//! a removed rule's counts are retired into its chain's totals by the caller.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// Key bytes the program gathers, most.
pub const KEY_MAX: usize = 32;
/// Largest packet offset of a key byte (the program bounds offsets by 511).
pub const MAX_OFFSET: usize = 511;
/// Rules the kernel map holds.
pub const MAX_RULES: usize = 65536;
/// Counter slots: 0 = too short, up to user space; 1 = the default action; rules from 2.
pub const SLOT_SHORT: u32 = 0;
pub const SLOT_DEFAULT: u32 = 1;
const FIRST_RULE_SLOT: u32 = 2;
/// Devmap slots.
pub const MAX_DEVS: usize = 64;

/// What the program does with a packet (the C `enum kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Up to the AF_XDP socket: user space runs the pipeline.
    User,
    Drop,
    Tx,
    /// Redirect through devmap slot n.
    Redirect(u32),
}

/// The program's action for a rule or for a miss.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Action {
    pub kind: Kind,
    pub mac_swap: bool,
    pub set_dmac: Option<[u8; 6]>,
}

impl Action {
    pub fn user() -> Action {
        Action {
            kind: Kind::User,
            mac_swap: false,
            set_dmac: None,
        }
    }

    /// The C `struct action` with counter slot `counter`.
    pub fn to_bytes(&self, counter: u32) -> [u8; 16] {
        let mut b = [0u8; 16];
        let (kind, dev) = match self.kind {
            Kind::User => (0, 0),
            Kind::Drop => (1, 0),
            Kind::Tx => (2, 0),
            Kind::Redirect(d) => (3, d),
        };
        b[0] = kind;
        b[1] = u8::from(self.mac_swap) | if self.set_dmac.is_some() { 2 } else { 0 };
        if let Some(m) = self.set_dmac {
            b[2..8].copy_from_slice(&m);
        }
        b[8..12].copy_from_slice(&dev.to_ne_bytes());
        b[12..16].copy_from_slice(&counter.to_ne_bytes());
        b
    }
}

/// A field of an ExactMatch, as its `get_initial_arg` describes it.
#[derive(Clone, Debug)]
pub struct Field {
    /// Packet offset; None for a metadata attribute (not offloadable).
    pub offset: Option<usize>,
    pub size: usize,
    /// Per-byte mask (size bytes; all ones when none was given).
    pub mask: Vec<u8>,
}

/// A rule: its field values (each `size` bytes, already masked) and gate (None: drop).
#[derive(Clone, Debug)]
pub struct Rule {
    pub fields: Vec<Vec<u8>>,
    pub gate: Option<u16>,
}

/// The modules the planner understands; the rest is `Other`.
#[derive(Clone, Debug)]
pub enum Node {
    ExactMatch {
        fields: Vec<Field>,
        /// The fork's `values` (rewrites on a hit): not offloadable.
        has_values: bool,
        rules: Vec<Rule>,
        /// None: misses are dropped.
        default_gate: Option<u16>,
    },
    MacSwap,
    PortOut {
        port: String,
    },
    Sink,
    Other {
        class: String,
    },
}

/// A module of the pipeline: what it is and where each output gate leads.
#[derive(Clone, Debug)]
pub struct Module {
    pub class: String,
    pub node: Node,
    /// Output gate -> the module it is connected to.
    pub ogates: BTreeMap<u16, String>,
}

/// A port the pipeline may send to.
#[derive(Clone, Debug)]
pub struct PortInfo {
    pub driver: String,
    /// For AF_XDP ports: interface, its index and namespace.
    pub ifname: String,
    pub ifindex: u32,
    pub netns: String,
}

/// What the planner sees: the modules, the ports, and the ingress port's PortInc modules'
/// destinations.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub modules: HashMap<String, Module>,
    pub ports: HashMap<String, PortInfo>,
    /// The ingress port's name.
    pub port: String,
    /// The modules the port's PortInc modules feed (gate 0), one per PortInc.
    pub entries: Vec<String>,
}

/// Where an action's packets would have gone in user space: (module, output gate) pairs,
/// the last module with gate None (a PortOut or Sink, or the module whose gate is
/// unconnected).
pub type Chain = Vec<(String, Option<u16>)>;

/// How one gate (or the whole input, without a classifier) is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePlan {
    pub action: Action,
    pub chain: Chain,
    /// For `Kind::User`: why not offloaded.
    pub why: String,
    /// Text of the path, e.g. "macswap -> out1 (PortOut p1)".
    pub path: String,
}

/// The plan for one port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub port: String,
    /// The classifier module, if the port feeds one that is offloaded.
    pub classifier: Option<String>,
    /// Key layout: (packet offset, mask) per key byte.
    pub key: Vec<(u16, u8)>,
    /// Per classifier gate (u16::MAX: the rule-drop gate), its plan.
    pub gates: BTreeMap<u16, GatePlan>,
    /// What a miss does (the default gate, or everything when there is no classifier).
    pub default: GatePlan,
    /// Rules: key bytes (KEY_MAX) -> gate key in `gates`.
    pub rules: Vec<([u8; KEY_MAX], u16)>,
    /// Rules left to user space because the map is full.
    pub overflow: usize,
    /// Devmap slots: slot -> (port, ifindex, netns).
    pub devs: Vec<(String, u32, String)>,
    /// Why the plan offloads nothing, when it does not.
    pub none_why: Option<String>,
}

/// The gate key the plan uses for rules whose gate is DROP_GATE.
pub const DROP_RULE: u16 = u16::MAX;

fn user(why: impl Into<String>, chain: Chain, path: String) -> GatePlan {
    GatePlan {
        action: Action::user(),
        chain,
        why: why.into(),
        path,
    }
}

impl View {
    /// Follows the chain from `to` (the module a gate of `from` leads to; None: the gate is
    /// unconnected, which drops in BESS) and says what the program can do with it.
    fn follow(
        &self,
        from: (&str, u16),
        to: Option<&str>,
        devs: &mut Vec<(String, u32, String)>,
    ) -> GatePlan {
        let mut chain: Chain = vec![(from.0.to_string(), Some(from.1))];
        let mut path = Vec::new();
        let mut action = Action {
            kind: Kind::Drop,
            mac_swap: false,
            set_dmac: None,
        };
        let mut at = to.map(str::to_string);
        let ingress = self.ports.get(&self.port);
        // Chains are short; the bound keeps a cycle of MACSwaps from looping.
        for _ in 0..16 {
            let Some(name) = at.take() else {
                // Unconnected gate: user space drops the packet (deadend).
                chain.last_mut().expect("chain").1 = None;
                path.push("(unconnected gate)".to_string());
                let p = path.join(" -> ");
                return GatePlan {
                    action,
                    chain,
                    why: String::new(),
                    path: p,
                };
            };
            let Some(m) = self.modules.get(&name) else {
                return user(
                    format!("module '{name}' is unknown"),
                    chain,
                    path.join(" -> "),
                );
            };
            match &m.node {
                Node::MacSwap => {
                    path.push(format!("{name} (MACSwap)"));
                    chain.push((name.clone(), Some(0)));
                    action.mac_swap = !action.mac_swap;
                    at = m.ogates.get(&0).cloned();
                }
                Node::Sink => {
                    path.push(format!("{name} (Sink)"));
                    chain.push((name.clone(), None));
                    action.kind = Kind::Drop;
                    return GatePlan {
                        action,
                        chain,
                        why: String::new(),
                        path: path.join(" -> "),
                    };
                }
                Node::PortOut { port } => {
                    chain.push((name.clone(), None));
                    let out = self.ports.get(port);
                    let kind = if *port == self.port {
                        path.push(format!("{name} (PortOut {port})"));
                        Kind::Tx
                    } else if let (Some(o), Some(i)) = (out, ingress) {
                        if o.driver != "AFXDPPort" {
                            path.push(format!("{name} (PortOut {port})"));
                            return user(
                                format!("port '{port}' is a {}, not an AFXDPPort", o.driver),
                                chain,
                                path.join(" -> "),
                            );
                        }
                        if o.netns != i.netns {
                            path.push(format!("{name} (PortOut {port})"));
                            return user(
                                format!("port '{port}' is in another network namespace"),
                                chain,
                                path.join(" -> "),
                            );
                        }
                        let slot = match devs.iter().position(|d| d.0 == *port) {
                            Some(s) => s,
                            None if devs.len() < MAX_DEVS => {
                                devs.push((port.clone(), o.ifindex, o.netns.clone()));
                                devs.len() - 1
                            }
                            None => {
                                return user("the devmap is full", chain, path.join(" -> "));
                            }
                        };
                        path.push(format!("{name} (PortOut {port}, {})", o.ifname));
                        Kind::Redirect(slot as u32)
                    } else {
                        path.push(format!("{name} (PortOut {port})"));
                        return user(
                            format!("port '{port}' is unknown"),
                            chain,
                            path.join(" -> "),
                        );
                    };
                    action.kind = kind;
                    return GatePlan {
                        action,
                        chain,
                        why: String::new(),
                        path: path.join(" -> "),
                    };
                }
                Node::ExactMatch { .. } | Node::Other { .. } => {
                    path.push(format!("{name} ({})", m.class));
                    return user(
                        format!(
                            "{} '{name}' is not offloaded after the first module",
                            m.class
                        ),
                        chain,
                        path.join(" -> "),
                    );
                }
            }
        }
        user("the chain is too long (a loop?)", chain, path.join(" -> "))
    }

    /// The plan: what the program does for each packet arriving on the port.
    pub fn plan(&self) -> Plan {
        let mut plan = Plan {
            port: self.port.clone(),
            classifier: None,
            key: Vec::new(),
            gates: BTreeMap::new(),
            default: user("nothing offloaded", Vec::new(), String::new()),
            rules: Vec::new(),
            overflow: 0,
            devs: Vec::new(),
            none_why: None,
        };
        let mut entries = self.entries.clone();
        entries.sort();
        entries.dedup();
        let root = match entries.as_slice() {
            [] => {
                plan.none_why = Some(format!("no PortInc of port '{}' feeds a module", self.port));
                return plan;
            }
            [one] => one.clone(),
            _ => {
                plan.none_why = Some(format!(
                    "the PortInc modules of port '{}' feed different modules ({})",
                    self.port,
                    entries.join(", ")
                ));
                return plan;
            }
        };
        let Some(m) = self.modules.get(&root) else {
            plan.none_why = Some(format!("module '{root}' is unknown"));
            return plan;
        };
        let mut devs = Vec::new();
        match &m.node {
            Node::ExactMatch {
                fields,
                has_values,
                rules,
                default_gate,
            } => {
                if let Some(why) = key_problem(fields, *has_values) {
                    plan.none_why = Some(format!("ExactMatch '{root}': {why}"));
                    return plan;
                }
                plan.classifier = Some(root.clone());
                for f in fields {
                    let o = f.offset.expect("checked");
                    for j in 0..f.size {
                        plan.key.push(((o + j) as u16, f.mask[j]));
                    }
                }
                let gate_plan = |g: u16, devs: &mut Vec<(String, u32, String)>| {
                    if g == DROP_RULE {
                        GatePlan {
                            action: Action {
                                kind: Kind::Drop,
                                mac_swap: false,
                                set_dmac: None,
                            },
                            chain: vec![(root.clone(), None)],
                            why: String::new(),
                            path: "rule drop".into(),
                        }
                    } else {
                        self.follow((&root, g), m.ogates.get(&g).map(String::as_str), devs)
                    }
                };
                plan.default = match default_gate {
                    None => gate_plan(DROP_RULE, &mut devs),
                    Some(g) => gate_plan(*g, &mut devs),
                };
                for r in rules {
                    let g = r.gate.unwrap_or(DROP_RULE);
                    if let std::collections::btree_map::Entry::Vacant(e) = plan.gates.entry(g) {
                        e.insert(gate_plan(g, &mut devs));
                    }
                    if plan.rules.len() >= MAX_RULES {
                        plan.overflow += 1;
                        continue;
                    }
                    let mut key = [0u8; KEY_MAX];
                    let mut i = 0;
                    for (v, f) in r.fields.iter().zip(fields) {
                        for j in 0..f.size {
                            key[i] = v.get(j).copied().unwrap_or(0) & f.mask[j];
                            i += 1;
                        }
                    }
                    plan.rules.push((key, g));
                }
                if plan.overflow > 0 {
                    // A rule missing from the map must not take the default action.
                    plan.default = user(
                        format!("{} rules do not fit the kernel map", plan.overflow),
                        plan.default.chain.clone(),
                        plan.default.path.clone(),
                    );
                }
            }
            Node::MacSwap | Node::PortOut { .. } | Node::Sink => {
                // No classifier: every packet takes the chain from the port.
                let mut p = self.follow(("(port)", 0), Some(&root), &mut devs);
                p.chain.remove(0);
                plan.default = p;
            }
            Node::Other { class } => {
                plan.none_why = Some(format!(
                    "the port feeds {class} '{root}', which the XDP program cannot do"
                ));
                return plan;
            }
        }
        plan.devs = devs;
        plan
    }
}

/// Why an ExactMatch's key cannot be gathered by the program, if it cannot.
fn key_problem(fields: &[Field], has_values: bool) -> Option<String> {
    if has_values {
        return Some(
            "its rules write values (the fork's `values`), which stay in user space".into(),
        );
    }
    let mut n = 0;
    for (i, f) in fields.iter().enumerate() {
        let Some(o) = f.offset else {
            return Some(format!(
                "field {i} is a metadata attribute, not a packet field"
            ));
        };
        if o + f.size > MAX_OFFSET + 1 {
            return Some(format!("field {i} ends past packet offset {MAX_OFFSET}"));
        }
        if f.mask.len() != f.size {
            return Some(format!(
                "field {i}'s mask has {} bytes, not {}",
                f.mask.len(),
                f.size
            ));
        }
        n += f.size;
    }
    if n > KEY_MAX {
        return Some(format!(
            "its key has {n} bytes; the program gathers at most {KEY_MAX}"
        ));
    }
    None
}

impl Plan {
    /// Whether the program does anything but send packets up.
    pub fn offloads_anything(&self) -> bool {
        self.default.action.kind != Kind::User
            || self.gates.values().any(|g| g.action.kind != Kind::User)
    }

    /// The gate plan of a rule gate.
    pub fn gate(&self, g: u16) -> &GatePlan {
        &self.gates[&g]
    }

    /// Whether the key is the IPv4 5-tuple unmasked (proto at 23, addresses and ports at
    /// 26..37): the program then gathers it with constant offsets (layout 1).
    pub fn is_5tuple(&self) -> bool {
        self.key.len() == 13
            && self.key[0] == (23, 0xff)
            && self.key[1..]
                .iter()
                .enumerate()
                .all(|(i, k)| *k == (26 + i as u16, 0xff))
    }

    /// The C `struct config`.
    pub fn config_bytes(&self) -> [u8; 120] {
        let mut b = [0u8; 120];
        b[0..4].copy_from_slice(&(self.key.len() as u32).to_ne_bytes());
        b[4..8].copy_from_slice(&u32::from(self.is_5tuple()).to_ne_bytes());
        b[8..24].copy_from_slice(&self.default.action.to_bytes(SLOT_DEFAULT));
        for (i, (o, m)) in self.key.iter().enumerate() {
            b[24 + 2 * i..26 + 2 * i].copy_from_slice(&o.to_ne_bytes());
            b[88 + i] = *m;
        }
        b
    }

    /// One gate's chain and what the kernel does with it.
    fn describe(&self, p: &GatePlan) -> String {
        let what = match p.action.kind {
            Kind::User => format!("up to user space ({})", p.why),
            Kind::Drop => "XDP_DROP".into(),
            Kind::Tx => "XDP_TX".into(),
            Kind::Redirect(d) => format!(
                "XDP_REDIRECT to port '{}' (devmap slot {d})",
                self.devs.get(d as usize).map_or("?", |x| x.0.as_str())
            ),
        };
        let rw = if p.action.mac_swap && p.action.kind != Kind::User {
            " after a MAC swap"
        } else {
            ""
        };
        if p.path.is_empty() {
            format!("{what}{rw}")
        } else {
            format!("{} => {what}{rw}", p.path)
        }
    }

    /// A report for people.
    pub fn text(&self) -> String {
        let mut s = format!("offload plan for port '{}'\n", self.port);
        if let Some(why) = &self.none_why {
            let _ = writeln!(s, "  nothing offloaded: {why}");
            return s;
        }
        if let Some(c) = &self.classifier {
            let _ = writeln!(
                s,
                "  classifier: {c} (ExactMatch), key {} bytes gathered at packet offsets {}",
                self.key.len(),
                ranges(&self.key.iter().map(|k| k.0 as usize).collect::<Vec<_>>())
            );
            for (g, p) in &self.gates {
                let gname = if *g == DROP_RULE {
                    "drop".to_string()
                } else {
                    format!("gate {g}")
                };
                let n = self.rules.iter().filter(|r| r.1 == *g).count();
                let _ = writeln!(s, "  {gname} ({n} rule(s)): {}", self.describe(p));
            }
            let _ = writeln!(s, "  miss: {}", self.describe(&self.default));
            let _ = writeln!(
                s,
                "  rules in the kernel map: {}{}",
                self.rules.len(),
                if self.overflow > 0 {
                    format!(
                        " ({} more left to user space: the map is full)",
                        self.overflow
                    )
                } else {
                    String::new()
                }
            );
        } else {
            let _ = writeln!(
                s,
                "  no classifier: every packet: {}",
                self.describe(&self.default)
            );
        }
        let _ = writeln!(
            s,
            "  always in user space: packets too short for the key or a rewrite"
        );
        s
    }
}

/// "23,26..37" for a sorted-ish offset list.
fn ranges(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}..{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// One change to the program's maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOp {
    Config([u8; 120]),
    Dev {
        slot: u32,
        ifindex: u32,
        netns: String,
    },
    /// Zero a counter slot before a new rule takes it.
    ResetCounter(u32),
    Put {
        key: [u8; KEY_MAX],
        action: [u8; 16],
    },
    /// Remove a rule; the caller retires its counter slot's counts into `chain` first.
    Delete {
        key: [u8; KEY_MAX],
        slot: u32,
        chain: Chain,
    },
}

/// The chain the kernel's counts of `p` belong to: none when the packets go up to user
/// space, where the modules count them (adding them again would count them twice).
fn kernel_chain(p: &GatePlan) -> Chain {
    if p.action.kind == Kind::User {
        Vec::new()
    } else {
        p.chain.clone()
    }
}

/// What is installed in the maps, for incremental syncs.
#[derive(Clone, Debug, Default)]
pub struct OffloadState {
    /// Rule key -> (counter slot, action bytes, chain).
    rules: HashMap<[u8; KEY_MAX], (u32, [u8; 16], Chain)>,
    free: Vec<u32>,
    next: u32,
    config: Option<[u8; 120]>,
    devs: Vec<(String, u32, String)>,
    /// The default action's chain (slot SLOT_DEFAULT).
    default_chain: Chain,
}

impl OffloadState {
    pub fn new() -> OffloadState {
        OffloadState {
            next: FIRST_RULE_SLOT,
            ..OffloadState::default()
        }
    }

    /// The operations that turn what is installed into `plan`, in a safe order: devmap
    /// slots before rules that name them, deletions before puts (the map's capacity), the
    /// configuration last (it may turn the classifier on).
    pub fn sync(&mut self, plan: &Plan) -> Vec<MapOp> {
        let mut ops = Vec::new();
        for (slot, d) in plan.devs.iter().enumerate() {
            if self.devs.get(slot) != Some(d) {
                ops.push(MapOp::Dev {
                    slot: slot as u32,
                    ifindex: d.1,
                    netns: d.2.clone(),
                });
            }
        }
        self.devs = plan.devs.clone();
        let want: HashMap<[u8; KEY_MAX], u16> = plan.rules.iter().copied().collect();
        let mut gone: Vec<[u8; KEY_MAX]> = self
            .rules
            .keys()
            .filter(|k| !want.contains_key(*k))
            .copied()
            .collect();
        gone.sort();
        for k in gone {
            let (slot, _, chain) = self.rules.remove(&k).expect("present");
            ops.push(MapOp::Delete {
                key: k,
                slot,
                chain,
            });
            self.free.push(slot);
        }
        for (k, g) in &plan.rules {
            let gp = plan.gate(*g);
            let chain = kernel_chain(gp);
            match self.rules.get_mut(k) {
                Some((slot, bytes, old)) => {
                    let nb = gp.action.to_bytes(*slot);
                    if *bytes != nb || *old != chain {
                        *bytes = nb;
                        *old = chain;
                        ops.push(MapOp::Put {
                            key: *k,
                            action: nb,
                        });
                    }
                }
                None => {
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.next += 1;
                        self.next - 1
                    });
                    let nb = gp.action.to_bytes(slot);
                    ops.push(MapOp::ResetCounter(slot));
                    ops.push(MapOp::Put {
                        key: *k,
                        action: nb,
                    });
                    self.rules.insert(*k, (slot, nb, chain));
                }
            }
        }
        let cfg = plan.config_bytes();
        if self.config != Some(cfg) {
            ops.push(MapOp::Config(cfg));
            self.config = Some(cfg);
        }
        self.default_chain = kernel_chain(&plan.default);
        ops
    }

    /// Every counter slot in use with the chain its packets would have taken in user
    /// space: the default slot and each rule's. A slot whose packets go up to user space
    /// has an empty chain: the modules count those packets themselves.
    pub fn slots(&self) -> Vec<(u32, Chain)> {
        let mut v = vec![(SLOT_DEFAULT, self.default_chain.clone())];
        v.extend(self.rules.values().map(|(s, _, c)| (*s, c.clone())));
        v
    }

    /// Rules installed.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn five_tuple() -> Vec<Field> {
        [(23, 1), (26, 4), (30, 4), (34, 2), (36, 2)]
            .iter()
            .map(|&(o, n)| Field {
                offset: Some(o),
                size: n,
                mask: vec![0xff; n],
            })
            .collect()
    }

    fn rule(i: u8, gate: Option<u16>) -> Rule {
        Rule {
            fields: vec![
                vec![17],
                vec![10, 0, 0, i],
                vec![10, 0, 1, 1],
                vec![0x10, i],
                vec![0, 53],
            ],
            gate,
        }
    }

    fn module(class: &str, node: Node, ogates: &[(u16, &str)]) -> Module {
        Module {
            class: class.into(),
            node,
            ogates: ogates.iter().map(|(g, m)| (*g, m.to_string())).collect(),
        }
    }

    fn port(driver: &str, ifname: &str, ifindex: u32, netns: &str) -> PortInfo {
        PortInfo {
            driver: driver.into(),
            ifname: ifname.into(),
            ifindex,
            netns: netns.into(),
        }
    }

    /// p0 -> em: gate 0 -> swap -> out1 (p1), gate 1 -> sink, gate 2 -> nat (user), gate 3
    /// -> out0 (p0, TX), gate 4 unconnected, default gate 2.
    fn view(rules: Vec<Rule>) -> View {
        let mut v = View {
            port: "p0".into(),
            entries: vec!["em".into(), "em".into()],
            ..View::default()
        };
        v.ports
            .insert("p0".into(), port("AFXDPPort", "veth0", 7, ""));
        v.ports
            .insert("p1".into(), port("AFXDPPort", "veth1", 9, ""));
        v.ports
            .insert("pk".into(), port("AFPacketPort", "veth2", 11, ""));
        let em = Node::ExactMatch {
            fields: five_tuple(),
            has_values: false,
            rules,
            default_gate: Some(2),
        };
        for (n, m) in [
            (
                "em",
                module(
                    "ExactMatch",
                    em,
                    &[(0, "swap"), (1, "sink"), (2, "nat"), (3, "out0")],
                ),
            ),
            ("swap", module("MACSwap", Node::MacSwap, &[(0, "out1")])),
            (
                "out1",
                module("PortOut", Node::PortOut { port: "p1".into() }, &[]),
            ),
            (
                "out0",
                module("PortOut", Node::PortOut { port: "p0".into() }, &[]),
            ),
            ("sink", module("Sink", Node::Sink, &[])),
            (
                "nat",
                module(
                    "NAT",
                    Node::Other {
                        class: "NAT".into(),
                    },
                    &[(0, "out1")],
                ),
            ),
        ] {
            v.modules.insert(n.into(), m);
        }
        v
    }

    #[test]
    fn gates_get_the_actions_their_chains_allow() {
        let v = view(vec![
            rule(1, Some(0)),
            rule(2, Some(1)),
            rule(3, Some(2)),
            rule(4, Some(3)),
            rule(5, Some(4)),
            rule(6, None),
        ]);
        let p = v.plan();
        assert_eq!(p.none_why, None);
        assert_eq!(p.classifier.as_deref(), Some("em"));
        assert_eq!(p.key.len(), 13);
        assert_eq!(p.key[0], (23, 0xff));
        assert_eq!(p.key[1], (26, 0xff));
        let g0 = p.gate(0);
        assert_eq!(g0.action.kind, Kind::Redirect(0));
        assert!(g0.action.mac_swap);
        assert_eq!(
            g0.chain,
            vec![
                ("em".to_string(), Some(0)),
                ("swap".to_string(), Some(0)),
                ("out1".to_string(), None)
            ]
        );
        assert_eq!(p.devs, vec![("p1".to_string(), 9, String::new())]);
        assert_eq!(p.gate(1).action.kind, Kind::Drop);
        assert_eq!(p.gate(2).action.kind, Kind::User);
        assert!(p.gate(2).why.contains("NAT"), "{}", p.gate(2).why);
        assert_eq!(p.gate(3).action.kind, Kind::Tx);
        assert_eq!(p.gate(4).action.kind, Kind::Drop);
        assert_eq!(p.gate(4).chain, vec![("em".to_string(), None)]);
        assert_eq!(p.gate(DROP_RULE).action.kind, Kind::Drop);
        assert_eq!(p.default.action.kind, Kind::User);
        assert_eq!(p.rules.len(), 6);
        // Rule 1's key: proto, sip, dip, sport, dport, zero padding.
        assert_eq!(
            &p.rules[0].0[..14],
            &[17, 10, 0, 0, 1, 10, 0, 1, 1, 0x10, 1, 0, 53, 0]
        );
        let t = p.text();
        assert!(t.contains("XDP_REDIRECT"), "{t}");
        assert!(t.contains("23,26..37"), "{t}");
    }

    #[test]
    fn what_cannot_be_offloaded_says_why() {
        let mut v = view(vec![rule(1, Some(0))]);
        v.entries.push("swap".into());
        assert!(v.plan().none_why.unwrap().contains("different modules"));

        let mut v = view(vec![]);
        v.entries.clear();
        assert!(v.plan().none_why.unwrap().contains("no PortInc"));

        let mut v = view(vec![]);
        if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields[0].offset = None;
        }
        assert!(v.plan().none_why.unwrap().contains("metadata attribute"));

        let mut v = view(vec![]);
        if let Node::ExactMatch { has_values, .. } = &mut v.modules.get_mut("em").unwrap().node {
            *has_values = true;
        }
        assert!(v.plan().none_why.unwrap().contains("values"));

        let mut v = view(vec![]);
        if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields.push(Field {
                offset: Some(40),
                size: 8,
                mask: vec![0xff; 8],
            });
            fields.push(Field {
                offset: Some(48),
                size: 8,
                mask: vec![0xff; 8],
            });
            fields.push(Field {
                offset: Some(56),
                size: 8,
                mask: vec![0xff; 8],
            });
        }
        assert!(v.plan().none_why.unwrap().contains("37 bytes"));

        // A PortOut to a non-AF_XDP port, or to another namespace, stays in user space.
        let mut v = view(vec![rule(1, Some(0))]);
        v.modules.get_mut("out1").unwrap().node = Node::PortOut { port: "pk".into() };
        let p = v.plan();
        assert_eq!(p.gate(0).action.kind, Kind::User);
        assert!(p.gate(0).why.contains("AFPacketPort"), "{}", p.gate(0).why);
        let mut v = view(vec![rule(1, Some(0))]);
        v.ports.get_mut("p1").unwrap().netns = "other".into();
        assert!(v.plan().gate(0).why.contains("namespace"));
    }

    #[test]
    fn without_classifier_every_packet_takes_the_chain() {
        let mut v = view(vec![]);
        v.entries = vec!["swap".into()];
        let p = v.plan();
        assert!(p.key.is_empty());
        assert_eq!(p.default.action.kind, Kind::Redirect(0));
        assert!(p.default.action.mac_swap);
        assert_eq!(p.default.chain[0].0, "swap");
        assert_eq!(&p.config_bytes()[0..4], &0u32.to_ne_bytes());
        assert_eq!(p.config_bytes()[8], 3); // K_REDIRECT
    }

    #[test]
    fn masks_apply_to_keys_and_the_layout() {
        let mut v = view(vec![rule(0xff, Some(1))]);
        if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields[1].mask = vec![0xff, 0xff, 0xff, 0xf0];
        }
        let p = v.plan();
        assert_eq!(p.key[4], (29, 0xf0));
        assert_eq!(p.rules[0].0[4], 0xf0);
        let c = p.config_bytes();
        assert_eq!(&c[0..4], &13u32.to_ne_bytes());
        assert_eq!(&c[4..8], &0u32.to_ne_bytes()); // masked: the generic gather
        assert_eq!(
            &view(vec![]).plan().config_bytes()[4..8],
            &1u32.to_ne_bytes()
        );
        assert_eq!(&c[24 + 8..26 + 8], &29u16.to_ne_bytes());
        assert_eq!(c[88 + 4], 0xf0);
    }

    #[test]
    fn overflowing_rules_send_misses_up() {
        let rules: Vec<Rule> = (0..MAX_RULES + 3)
            .map(|i| Rule {
                fields: vec![
                    vec![17],
                    (i as u32).to_be_bytes().to_vec(),
                    vec![0; 4],
                    vec![0; 2],
                    vec![0; 2],
                ],
                gate: Some(1),
            })
            .collect();
        let mut v = view(rules);
        if let Node::ExactMatch { default_gate, .. } = &mut v.modules.get_mut("em").unwrap().node {
            *default_gate = Some(1);
        }
        let p = v.plan();
        assert_eq!(p.rules.len(), MAX_RULES);
        assert_eq!(p.overflow, 3);
        assert_eq!(p.default.action.kind, Kind::User);
    }

    #[test]
    fn sync_keeps_slots_and_sends_only_changes() {
        let mut st = OffloadState::new();
        let v = view(vec![rule(1, Some(0)), rule(2, Some(1))]);
        let ops = st.sync(&v.plan());
        let puts = ops
            .iter()
            .filter(|o| matches!(o, MapOp::Put { .. }))
            .count();
        assert_eq!(puts, 2);
        assert!(ops.iter().any(|o| matches!(
            o,
            MapOp::Dev {
                slot: 0,
                ifindex: 9,
                ..
            }
        )));
        assert!(matches!(ops.last(), Some(MapOp::Config(_))));
        let slot_of = |st: &OffloadState, i: u8| {
            let p = view(vec![rule(i, Some(0))]).plan();
            st.rules[&p.rules[0].0].0
        };
        let s1 = slot_of(&st, 1);
        let s2 = slot_of(&st, 2);
        assert_ne!(s1, s2);
        assert!(s1 >= FIRST_RULE_SLOT && s2 >= FIRST_RULE_SLOT);

        // The same plan again: nothing to do.
        assert!(st.sync(&v.plan()).is_empty());

        // Delete rule 1, add rule 3: rule 2 keeps its slot, rule 3 reuses rule 1's after
        // a reset, and the delete carries the chain its counts belong to.
        let v = view(vec![rule(2, Some(1)), rule(3, Some(0))]);
        let ops = st.sync(&v.plan());
        match &ops[0] {
            MapOp::Delete { slot, chain, .. } => {
                assert_eq!(*slot, s1);
                assert_eq!(chain[0], ("em".to_string(), Some(0)));
            }
            o => panic!("first op {o:?}"),
        }
        assert!(ops.contains(&MapOp::ResetCounter(s1)));
        assert_eq!(slot_of(&st, 2), s2);
        assert_eq!(slot_of(&st, 3), s1);
        assert_eq!(st.len(), 2);

        // A gate re-pointed: the rule's action is rewritten in place, same slot.
        let mut v = view(vec![rule(2, Some(1)), rule(3, Some(0))]);
        v.modules
            .get_mut("em")
            .unwrap()
            .ogates
            .insert(1, "out0".into());
        let ops = st.sync(&v.plan());
        assert_eq!(ops.len(), 1, "{ops:?}");
        match &ops[0] {
            MapOp::Put { action, .. } => {
                assert_eq!(action[0], 2); // K_TX
                assert_eq!(&action[12..16], &s2.to_ne_bytes());
            }
            o => panic!("{o:?}"),
        }

        // Clear: every rule deleted, the slots listed for retiring.
        let ops = st.sync(&view(vec![]).plan());
        assert_eq!(
            ops.iter()
                .filter(|o| matches!(o, MapOp::Delete { .. }))
                .count(),
            2
        );
        assert!(st.is_empty());
        assert_eq!(st.slots().len(), 1);
    }

    #[test]
    fn action_bytes_match_the_c_layout() {
        let a = Action {
            kind: Kind::Redirect(5),
            mac_swap: true,
            set_dmac: Some([1, 2, 3, 4, 5, 6]),
        };
        let b = a.to_bytes(77);
        assert_eq!(b[0], 3);
        assert_eq!(b[1], 3);
        assert_eq!(&b[2..8], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&b[8..12], &5u32.to_ne_bytes());
        assert_eq!(&b[12..16], &77u32.to_ne_bytes());
    }
}

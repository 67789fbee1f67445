//! Offload into XDP: which part of the pipeline downstream of an AF_XDP port the XDP program
//! (`crates/drivers/bpf/offload.bpf.c`) can do, and the contents of its maps.
//!
//! The XDP "NIC" here is the model's `XdpPort` made concrete: one classifier (an ExactMatch
//! by byte-gather key and hash map, an IPLookup by LPM trie on the IPv4 destination, a
//! WildcardMatch by tuple-space search over at most [`WM_MASKS`] masks, a VLANSplit by VID,
//! or a BPF module's classic BPF filters, at most [`CBPF_FILTERS`] of at most [`CBPF_INSNS`]
//! instructions, run by the program's interpreter in the module's order), and per rule one
//! action: drop, XDP_TX, XDP_REDIRECT through a devmap, or up to the port's AF_XDP socket,
//! after the chain's rewrites (MACSwap, Update, VLANPush, VLANPop, in order). The embedding
//! is a walk from the port's PortInc: a gate is offloaded when the chain behind it is made
//! only of what the program does (rewrites, then PortOut to this port or to another AF_XDP
//! port of the same namespace, or Sink, or an unconnected gate, which drops); anything else,
//! and any packet the program is unsure of (too short for the key or a rewrite, a frame
//! IPLookup would not route), goes up to user space, which runs the full pipeline. So the
//! offloaded pipeline and the user-space one agree on every packet by construction, and the
//! differential tests check it. One classifier deep: a classifier behind the first one
//! stays in user space (its gate goes up).
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
/// Rules each kernel map holds.
pub const MAX_RULES: usize = 65536;
/// Counter slots: 0 = too short (or unsure), up to user space; 1 = the default action;
/// rules from 2.
pub const SLOT_SHORT: u32 = 0;
pub const SLOT_DEFAULT: u32 = 1;
const FIRST_RULE_SLOT: u32 = 2;
/// Devmap slots.
pub const MAX_DEVS: usize = 64;
/// Distinct WildcardMatch masks the program searches (its bounded loop).
pub const WM_MASKS: usize = 8;
/// Operations of one rewrite program.
pub const PROG_OPS: usize = 24;
/// Rewrite program slots (slot 0 means none).
pub const PROG_SLOTS: usize = 256;
/// Bytes of the C `struct action`, `struct config`, `struct prog`.
pub const ACTION_BYTES: usize = 24;
pub const CONFIG_BYTES: usize = 404;
/// BPF filters the program runs, most (one bank of its `cbpf` map).
pub const CBPF_FILTERS: usize = 32;
/// Instructions of one BPF filter, most.
pub const CBPF_INSNS: usize = 256;
/// Bytes of the C `struct cbpf_prog`.
pub const CBPF_BYTES: usize = 8 + 8 * CBPF_INSNS;
pub const PROG_BYTES: usize = 4 + 12 * PROG_OPS;
/// The shortest frame a rewrite program runs on: every operation reads the Ethernet header
/// and, for VLANPop, a possible tag.
const PROG_MIN_LEN: usize = 18;
/// Largest Update offset the program writes at (the module's own limit).
const MAX_WRITE_OFFSET: usize = 4095;

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

/// One rewrite of a chain, as the program's `struct op` does it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    MacSwap,
    /// Update: these bytes at this offset; `need` is the module's shortest frame (the end of
    /// its furthest field: it drops shorter frames before writing any field).
    Write {
        offset: u16,
        bytes: Vec<u8>,
        need: u16,
    },
    /// VLANPush with this TCI.
    Push(u16),
    /// VLANPop.
    Pop,
}

/// The program's action for a rule or for a miss.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Action {
    pub kind: Kind,
    pub mac_swap: bool,
    pub set_dmac: Option<[u8; 6]>,
    /// Rewrites beyond MAC swaps, in chain order (MAC swaps included then); empty: the flags
    /// say it all.
    pub rewrite: Vec<Op>,
}

impl Action {
    /// Up to user space.
    pub fn user() -> Action {
        Action::of(Kind::User)
    }

    /// `kind` without rewrites.
    pub fn of(kind: Kind) -> Action {
        Action {
            kind,
            mac_swap: false,
            set_dmac: None,
            rewrite: Vec::new(),
        }
    }

    /// The C `struct action` with counter slot `counter`, rewrite program slot `prog` (0:
    /// none) and WildcardMatch priority `prio` (biased: unsigned order).
    pub fn to_bytes(&self, counter: u32, prog: u32, prio: u32) -> [u8; ACTION_BYTES] {
        let mut b = [0u8; ACTION_BYTES];
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
        b[16..20].copy_from_slice(&prog.to_ne_bytes());
        b[20..24].copy_from_slice(&prio.to_ne_bytes());
        b
    }
}

/// The shortest frame on which no operation of `ops` can fail, counted on the frame as it
/// arrives: each push lengthens it by 4, each pop shortens it by at most 4 (only a tagged
/// frame loses the tag, so assuming every pop does is the safe bound).
pub fn prog_min_len(ops: &[Op]) -> usize {
    let mut need = PROG_MIN_LEN as i64;
    let mut delta = 0i64;
    for op in ops {
        let at = match op {
            Op::Write { need, .. } => (*need as i64).max(PROG_MIN_LEN as i64),
            _ => PROG_MIN_LEN as i64,
        };
        need = need.max(at - delta);
        match op {
            Op::Push(_) => delta += 4,
            Op::Pop => delta -= 4,
            _ => {}
        }
    }
    need as usize
}

/// The C `struct prog` of `ops` (at most PROG_OPS operations).
pub fn prog_bytes(ops: &[Op]) -> [u8; PROG_BYTES] {
    let mut b = [0u8; PROG_BYTES];
    b[0..2].copy_from_slice(&(prog_min_len(ops) as u16).to_ne_bytes());
    b[2] = ops.len() as u8;
    b[3] = ops.iter().filter(|o| matches!(o, Op::Push(_))).count() as u8;
    for (i, op) in ops.iter().take(PROG_OPS).enumerate() {
        let o = &mut b[4 + 12 * i..16 + 12 * i];
        match op {
            Op::MacSwap => o[0] = 1,
            Op::Write { offset, bytes, .. } => {
                o[0] = 2;
                o[1] = bytes.len() as u8;
                o[2..4].copy_from_slice(&offset.to_ne_bytes());
                o[4..4 + bytes.len()].copy_from_slice(bytes);
            }
            Op::Push(tci) => {
                o[0] = 3;
                o[4..6].copy_from_slice(&tci.to_be_bytes());
            }
            Op::Pop => o[0] = 4,
        }
    }
    b
}

/// A field of an ExactMatch or WildcardMatch, as its `get_initial_arg` describes it.
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

/// A WildcardMatch rule: per field its value and mask bytes, priority and gate (None: drop).
#[derive(Clone, Debug)]
pub struct WildRule {
    pub values: Vec<Vec<u8>>,
    pub masks: Vec<Vec<u8>>,
    pub priority: i32,
    pub gate: Option<u16>,
}

/// A classic BPF instruction (`struct bpf_insn` of libpcap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// A BPF module's filter, as its `get_programs` reports it: expression, gate and program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpfFilter {
    pub expr: String,
    pub gate: u16,
    pub program: Vec<CbpfInsn>,
}

impl BpfFilter {
    /// The C `struct cbpf_prog` (at most CBPF_INSNS instructions).
    pub fn to_bytes(&self) -> Box<[u8; CBPF_BYTES]> {
        let mut b = Box::new([0u8; CBPF_BYTES]);
        let n = self.program.len().min(CBPF_INSNS);
        b[0..4].copy_from_slice(&(n as u32).to_ne_bytes());
        b[4..6].copy_from_slice(&self.gate.to_ne_bytes());
        for (i, insn) in self.program.iter().take(n).enumerate() {
            let o = &mut b[8 + 8 * i..16 + 8 * i];
            o[0..2].copy_from_slice(&insn.code.to_ne_bytes());
            o[2] = insn.jt;
            o[3] = insn.jf;
            o[4..8].copy_from_slice(&insn.k.to_ne_bytes());
        }
        b
    }
}

/// Whether the program's interpreter runs classic BPF opcode `code`: every instruction the
/// module's validator accepts (libpcap's set: loads absolute, indirect, of the length, of
/// scratch memory and the IP header length; stores; ALU; jumps; returns; tax/txa).
pub fn cbpf_supported(code: u16) -> bool {
    match code {
        // LD W/H/B ABS and IND, LEN, IMM, MEM; LDX LEN, IMM, MEM, MSH; ST, STX.
        0x20 | 0x28 | 0x30 | 0x40 | 0x48 | 0x50 | 0x80 | 0x00 | 0x60 => true,
        0x81 | 0x01 | 0x61 | 0xb1 | 0x02 | 0x03 => true,
        // ALU with k: add..xor (neg included); with X: all but neg.
        c if c & 0xff0f == 0x04 => c & 0xf0 <= 0xa0,
        c if c & 0xff0f == 0x0c => c & 0xf0 <= 0xa0 && c & 0xf0 != 0x80,
        // JA; JEQ, JGT, JGE, JSET with k or X.
        0x05 | 0x15 | 0x25 | 0x35 | 0x45 | 0x1d | 0x2d | 0x3d | 0x4d => true,
        // RET k, RET A; TAX, TXA.
        0x06 | 0x16 | 0x07 | 0x87 => true,
        _ => false,
    }
}

/// Why the program cannot run a BPF module's filters, if it cannot.
fn bpf_problem(filters: &[BpfFilter]) -> Option<String> {
    if filters.len() > CBPF_FILTERS {
        return Some(format!(
            "it has {} filters; the program runs at most {CBPF_FILTERS}",
            filters.len()
        ));
    }
    for f in filters {
        let n = f.program.len();
        if n == 0 || n > CBPF_INSNS {
            return Some(format!(
                "filter '{}' compiles to {n} instructions; the program runs 1 to {CBPF_INSNS}",
                f.expr
            ));
        }
        for (pc, i) in f.program.iter().enumerate() {
            if !cbpf_supported(i.code) {
                return Some(format!(
                    "filter '{}': instruction {:#06x} at {pc} is not one the program runs",
                    f.expr, i.code
                ));
            }
            // Jumps stay inside the program (the module's validator says so too): each
            // filter then ends within its length in steps, which bounds the program's loop.
            if i.code & 0x07 != 0x05 {
                continue;
            }
            let (a, b) = if i.code & 0xf0 == 0 {
                (i.k as usize, 0)
            } else {
                (i.jt as usize, i.jf as usize)
            };
            if pc + 1 + a.max(b) >= n {
                return Some(format!(
                    "filter '{}': instruction {pc} jumps out of the program",
                    f.expr
                ));
            }
        }
        if !matches!(f.program[n - 1].code, 0x06 | 0x16) {
            return Some(format!("filter '{}' does not end with a return", f.expr));
        }
        if f.gate as usize >= MAX_GATES {
            return Some(format!("filter '{}' has gate {}", f.expr, f.gate));
        }
    }
    None
}

/// Output gates of a module (BPF's gates are below this).
const MAX_GATES: usize = 8192;

/// An IPLookup route: prefix (host order), length 1..=32, gate (None: drop).
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub prefix: u32,
    pub len: u8,
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
    /// IPLookup: its routes (the /0 route is the default gate).
    IpLookup {
        routes: Vec<Route>,
        /// None: misses are dropped (no /0 route).
        default_gate: Option<u16>,
    },
    /// WildcardMatch: fields (masks all ones: each rule has its own) and rules.
    WildcardMatch {
        fields: Vec<Field>,
        /// The fork's `valuesv` (rewrites on a hit): not offloadable.
        has_values: bool,
        rules: Vec<WildRule>,
        default_gate: Option<u16>,
    },
    /// VLANSplit: gate = the outer tag's VID (0 untagged), the tag popped.
    VlanSplit,
    /// BPF: its filters in the order the module tries them (the first to match picks the
    /// gate; none: gate 0).
    Bpf {
        filters: Vec<BpfFilter>,
    },
    MacSwap,
    /// Update's fields: (offset, size, value written big-endian), in order.
    Update {
        fields: Vec<(usize, usize, u64)>,
    },
    VlanPush {
        tci: u16,
    },
    VlanPop,
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
    /// For a drop by the classifier itself: (module, drop reason) user space counts it
    /// under.
    pub drop: Option<(String, String)>,
}

/// The classifier the program runs (the C `config.cls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cls {
    /// ExactMatch, or no classifier when the key is empty.
    Exact,
    /// IPLookup: LPM trie on the IPv4 destination.
    Lpm,
    /// WildcardMatch: tuple-space search.
    Wild,
    /// VLANSplit: the VID as a 2-byte key in the ExactMatch map.
    Vlan,
    /// BPF: the filters' gate (first match, else 0) as a 2-byte key in the ExactMatch map.
    Bpf,
}

/// A map entry's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKey {
    /// ExactMatch: the gathered key (map `rules`).
    Exact([u8; KEY_MAX]),
    /// IPLookup: prefix and length (map `lpm`).
    Prefix { addr: u32, len: u8 },
    /// WildcardMatch: the mask's index and the masked key (map `wrules`).
    Masked { mask: u32, key: [u8; KEY_MAX] },
}

impl RuleKey {
    /// The map the key belongs to.
    pub fn map(&self) -> &'static str {
        match self {
            RuleKey::Exact(_) => "rules",
            RuleKey::Prefix { .. } => "lpm",
            RuleKey::Masked { .. } => "wrules",
        }
    }

    /// The key as the map stores it (the C `struct lpm_key`, `struct wild_key`).
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            RuleKey::Exact(k) => k.to_vec(),
            RuleKey::Prefix { addr, len } => {
                let mut b = (*len as u32).to_ne_bytes().to_vec();
                b.extend_from_slice(&addr.to_be_bytes());
                b
            }
            RuleKey::Masked { mask, key } => {
                let mut b = mask.to_ne_bytes().to_vec();
                b.extend_from_slice(key);
                b
            }
        }
    }
}

/// One rule of the plan: its key, gate key in `Plan::gates`, and WildcardMatch priority
/// (biased; 0 otherwise).
pub type PlanRule = (RuleKey, u16, u32);

/// The plan for one port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub port: String,
    /// The classifier module, if the port feeds one that is offloaded.
    pub classifier: Option<String>,
    /// Which classifier it is.
    pub cls: Cls,
    /// Key layout: (packet offset, mask) per key byte.
    pub key: Vec<(u16, u8)>,
    /// WildcardMatch: the distinct rule masks over the key, in the order they are searched.
    pub wmasks: Vec<[u8; KEY_MAX]>,
    /// BPF: the filters, in the order the module tries them.
    pub filters: Vec<BpfFilter>,
    /// Per classifier gate (u16::MAX: the rule-drop gate), its plan.
    pub gates: BTreeMap<u16, GatePlan>,
    /// What a miss does (the default gate, or everything when there is no classifier).
    pub default: GatePlan,
    pub rules: Vec<PlanRule>,
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
        drop: None,
    }
}

/// The WildcardMatch priority in the program's unsigned order.
pub fn biased(priority: i32) -> u32 {
    (priority as u32) ^ 0x8000_0000
}

impl View {
    /// Follows the chain from `to` (the module a gate of `from` leads to; None: the gate is
    /// unconnected, which drops in BESS) and says what the program can do with it.
    /// `pre`: rewrites the classifier itself does first (VLANSplit's pop).
    fn follow(
        &self,
        from: (&str, u16),
        to: Option<&str>,
        pre: &[Op],
        devs: &mut Vec<(String, u32, String)>,
    ) -> GatePlan {
        let mut chain: Chain = vec![(from.0.to_string(), Some(from.1))];
        let mut path = Vec::new();
        let mut action = Action::of(Kind::Drop);
        let mut ops: Vec<Op> = pre.to_vec();
        let mut at = to.map(str::to_string);
        let ingress = self.ports.get(&self.port);
        let done = |mut action: Action, ops: Vec<Op>, chain: Chain, path: String| {
            if ops.iter().any(|o| *o != Op::MacSwap) {
                if ops.len() > PROG_OPS {
                    return user(
                        format!(
                            "the chain's rewrites take {} operations; the program runs at most {PROG_OPS}",
                            ops.len()
                        ),
                        chain,
                        path,
                    );
                }
                if prog_min_len(&ops) > 0x1fff {
                    return user("the chain writes past the program's reach", chain, path);
                }
                action.mac_swap = false;
                action.rewrite = ops;
            }
            GatePlan {
                action,
                chain,
                why: String::new(),
                path,
                drop: None,
            }
        };
        // Chains are short; the bound keeps a cycle of rewrites from looping.
        for _ in 0..(PROG_OPS + 8) {
            let Some(name) = at.take() else {
                // Unconnected gate: user space drops the packet, counted as the module's
                // `deadend`.
                let last = chain.last_mut().expect("chain");
                last.1 = None;
                let module = last.0.clone();
                path.push("(unconnected gate)".to_string());
                let mut p = done(action, ops, chain, path.join(" -> "));
                if p.action.kind == Kind::Drop {
                    p.drop = Some((module, "deadend".into()));
                }
                return p;
            };
            let Some(m) = self.modules.get(&name) else {
                return user(
                    format!("module '{name}' is unknown"),
                    chain,
                    path.join(" -> "),
                );
            };
            let next = |ops: &mut Vec<Op>, new: Vec<Op>| {
                ops.extend(new);
                m.ogates.get(&0).cloned()
            };
            match &m.node {
                Node::MacSwap => {
                    path.push(format!("{name} (MACSwap)"));
                    chain.push((name.clone(), Some(0)));
                    action.mac_swap = !action.mac_swap;
                    at = next(&mut ops, vec![Op::MacSwap]);
                }
                Node::Update { fields } => {
                    path.push(format!("{name} (Update)"));
                    chain.push((name.clone(), Some(0)));
                    let need = fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
                    if fields
                        .iter()
                        .any(|f| f.0 > MAX_WRITE_OFFSET || f.1 > 8 || f.1 == 0)
                    {
                        return user(
                            format!("Update '{name}' has a field the program cannot write"),
                            chain,
                            path.join(" -> "),
                        );
                    }
                    let w = fields
                        .iter()
                        .map(|&(o, s, v)| Op::Write {
                            offset: o as u16,
                            bytes: v.to_be_bytes()[8 - s..].to_vec(),
                            need: need as u16,
                        })
                        .collect();
                    at = next(&mut ops, w);
                }
                Node::VlanPush { tci } => {
                    path.push(format!("{name} (VLANPush)"));
                    chain.push((name.clone(), Some(0)));
                    at = next(&mut ops, vec![Op::Push(*tci)]);
                }
                Node::VlanPop => {
                    path.push(format!("{name} (VLANPop)"));
                    chain.push((name.clone(), Some(0)));
                    at = next(&mut ops, vec![Op::Pop]);
                }
                Node::Sink => {
                    path.push(format!("{name} (Sink)"));
                    chain.push((name.clone(), None));
                    action.kind = Kind::Drop;
                    return done(action, ops, chain, path.join(" -> "));
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
                    return done(action, ops, chain, path.join(" -> "));
                }
                Node::ExactMatch { .. }
                | Node::IpLookup { .. }
                | Node::WildcardMatch { .. }
                | Node::VlanSplit
                | Node::Bpf { .. }
                | Node::Other { .. } => {
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
            cls: Cls::Exact,
            key: Vec::new(),
            wmasks: Vec::new(),
            filters: Vec::new(),
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
        let (rules, default_gate, no_match): (Vec<(RuleKey, Option<u16>, u32)>, _, _) =
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
                    plan.key = key_layout(fields);
                    let keys = rules
                        .iter()
                        .map(|r| {
                            let mut key = [0u8; KEY_MAX];
                            let mut i = 0;
                            for (v, f) in r.fields.iter().zip(fields) {
                                for j in 0..f.size {
                                    key[i] = v.get(j).copied().unwrap_or(0) & f.mask[j];
                                    i += 1;
                                }
                            }
                            (RuleKey::Exact(key), r.gate, 0)
                        })
                        .collect();
                    (keys, *default_gate, "no_match")
                }
                Node::IpLookup {
                    routes,
                    default_gate,
                } => {
                    plan.cls = Cls::Lpm;
                    let keys = routes
                        .iter()
                        .map(|r| {
                            (
                                RuleKey::Prefix {
                                    addr: r.prefix,
                                    len: r.len,
                                },
                                r.gate,
                                0,
                            )
                        })
                        .collect();
                    (keys, *default_gate, "no_match")
                }
                Node::WildcardMatch {
                    fields,
                    has_values,
                    rules,
                    default_gate,
                } => {
                    let masks: Vec<Vec<u8>> = fields.iter().map(|f| vec![0xff; f.size]).collect();
                    let full: Vec<Field> = fields
                        .iter()
                        .zip(masks)
                        .map(|(f, mask)| Field {
                            offset: f.offset,
                            size: f.size,
                            mask,
                        })
                        .collect();
                    if let Some(why) = key_problem(&full, *has_values) {
                        plan.none_why = Some(format!("WildcardMatch '{root}': {why}"));
                        return plan;
                    }
                    plan.cls = Cls::Wild;
                    plan.key = key_layout(&full);
                    match wild_rules(&full, rules) {
                        Ok((wmasks, keys)) => {
                            plan.wmasks = wmasks;
                            (keys, *default_gate, "no_match")
                        }
                        Err(why) => {
                            plan.none_why = Some(format!("WildcardMatch '{root}': {why}"));
                            plan.cls = Cls::Exact;
                            plan.key.clear();
                            return plan;
                        }
                    }
                }
                Node::VlanSplit => {
                    plan.cls = Cls::Vlan;
                    // One rule per connected gate a VID can name; the others are
                    // unconnected: the miss, dropped as `deadend`.
                    let keys = m
                        .ogates
                        .keys()
                        .filter(|g| **g < 4096)
                        .map(|g| {
                            let mut key = [0u8; KEY_MAX];
                            key[..2].copy_from_slice(&g.to_be_bytes());
                            (RuleKey::Exact(key), Some(*g), 0)
                        })
                        .collect();
                    (keys, None, "deadend")
                }
                Node::Bpf { filters } => {
                    if let Some(why) = bpf_problem(filters) {
                        plan.none_why = Some(format!("BPF '{root}': {why}"));
                        return plan;
                    }
                    plan.cls = Cls::Bpf;
                    plan.filters = filters.clone();
                    // One rule per gate a filter names; no match is gate 0, the default.
                    let mut gates: Vec<u16> = filters.iter().map(|f| f.gate).collect();
                    gates.sort();
                    gates.dedup();
                    let keys = gates
                        .into_iter()
                        .map(|g| {
                            let mut key = [0u8; KEY_MAX];
                            key[..2].copy_from_slice(&g.to_be_bytes());
                            (RuleKey::Exact(key), Some(g), 0)
                        })
                        .collect();
                    (keys, Some(0), "no_match")
                }
                Node::MacSwap
                | Node::Update { .. }
                | Node::VlanPush { .. }
                | Node::VlanPop
                | Node::PortOut { .. }
                | Node::Sink => {
                    // No classifier: every packet takes the chain from the port.
                    let mut p = self.follow(("(port)", 0), Some(&root), &[], &mut devs);
                    p.chain.remove(0);
                    plan.default = p;
                    plan.devs = devs;
                    return plan;
                }
                Node::Other { class } => {
                    plan.none_why = Some(format!(
                        "the port feeds {class} '{root}', which the XDP program cannot do"
                    ));
                    return plan;
                }
            };
        if plan.cls != Cls::Exact && rules.len() > MAX_RULES {
            // A route or rule missing from the map would not just miss: a shorter prefix or
            // a lower priority would match instead, so nothing of the table is offloaded.
            plan.none_why = Some(format!(
                "{} '{root}' has {} rules; the kernel map holds {MAX_RULES}",
                m.class,
                rules.len()
            ));
            plan.cls = Cls::Exact;
            plan.key.clear();
            plan.wmasks.clear();
            return plan;
        }
        plan.classifier = Some(root.clone());
        let pre = if plan.cls == Cls::Vlan {
            vec![Op::Pop]
        } else {
            Vec::new()
        };
        let gate_plan = |g: u16, devs: &mut Vec<(String, u32, String)>| {
            if g == DROP_RULE {
                GatePlan {
                    action: Action::of(Kind::Drop),
                    chain: vec![(root.clone(), None)],
                    why: String::new(),
                    path: "rule drop".into(),
                    drop: Some((root.clone(), "rule_drop".into())),
                }
            } else {
                self.follow((&root, g), m.ogates.get(&g).map(String::as_str), &pre, devs)
            }
        };
        plan.default = match default_gate {
            None => {
                let mut p = gate_plan(DROP_RULE, &mut devs);
                p.path = if plan.cls == Cls::Vlan {
                    "(unconnected gate)".into()
                } else {
                    "no default gate".into()
                };
                p.drop = Some((root.clone(), no_match.into()));
                p
            }
            Some(g) => gate_plan(g, &mut devs),
        };
        for (key, gate, prio) in rules {
            let g = gate.unwrap_or(DROP_RULE);
            if let std::collections::btree_map::Entry::Vacant(e) = plan.gates.entry(g) {
                e.insert(gate_plan(g, &mut devs));
            }
            if plan.rules.len() >= MAX_RULES {
                plan.overflow += 1;
                continue;
            }
            plan.rules.push((key, g, prio));
        }
        if plan.overflow > 0 {
            // A rule missing from the map must not take the default action.
            plan.default = user(
                format!("{} rules do not fit the kernel map", plan.overflow),
                plan.default.chain.clone(),
                plan.default.path.clone(),
            );
        }
        plan.devs = devs;
        plan
    }
}

/// Key layout of fields the program gathers: (packet offset, mask) per key byte.
fn key_layout(fields: &[Field]) -> Vec<(u16, u8)> {
    let mut key = Vec::new();
    for f in fields {
        let o = f.offset.expect("checked");
        for j in 0..f.size {
            key.push(((o + j) as u16, f.mask[j]));
        }
    }
    key
}

/// Most pairs of equal-priority rules under different masks checked for overlap.
const MAX_TIE_PAIRS: usize = 1 << 22;

/// WildcardMatch rules as the program's masks and map keys; or why they cannot be.
#[allow(clippy::type_complexity)]
fn wild_rules(
    fields: &[Field],
    rules: &[WildRule],
) -> Result<(Vec<[u8; KEY_MAX]>, Vec<(RuleKey, Option<u16>, u32)>), String> {
    let mut masks: Vec<[u8; KEY_MAX]> = Vec::new();
    let mut out = Vec::new();
    // (priority, mask index, masked key) for the tie check.
    let mut rows: Vec<(i32, usize, [u8; KEY_MAX])> = Vec::new();
    for r in rules {
        let (mut k, mut m) = ([0u8; KEY_MAX], [0u8; KEY_MAX]);
        let mut i = 0;
        for (fi, f) in fields.iter().enumerate() {
            for j in 0..f.size {
                let mb = r.masks.get(fi).and_then(|x| x.get(j)).copied().unwrap_or(0);
                let vb = r
                    .values
                    .get(fi)
                    .and_then(|x| x.get(j))
                    .copied()
                    .unwrap_or(0);
                m[i] = mb;
                k[i] = vb & mb;
                i += 1;
            }
        }
        let t = match masks.iter().position(|x| *x == m) {
            Some(t) => t,
            None => {
                masks.push(m);
                masks.len() - 1
            }
        };
        rows.push((r.priority, t, k));
        out.push((
            RuleKey::Masked {
                mask: t as u32,
                key: k,
            },
            r.gate,
            biased(r.priority),
        ));
    }
    if masks.len() > WM_MASKS {
        return Err(format!(
            "its rules have {} distinct masks; the program searches at most {WM_MASKS}",
            masks.len()
        ));
    }
    // Equal priorities under different masks: the module takes the rule of the mask added
    // later, an order its commands do not report. Refused when two such rules can match one
    // packet (their values agree under both masks).
    rows.sort_by_key(|r| r.0);
    let mut pairs = 0usize;
    for group in rows.chunk_by(|a, b| a.0 == b.0) {
        for (i, a) in group.iter().enumerate() {
            for b in &group[i + 1..] {
                if a.1 == b.1 {
                    continue;
                }
                pairs += 1;
                if pairs > MAX_TIE_PAIRS {
                    return Err("too many rules of equal priority to check for ties".into());
                }
                let (ma, mb) = (&masks[a.1], &masks[b.1]);
                if (0..KEY_MAX).all(|j| (a.2[j] ^ b.2[j]) & ma[j] & mb[j] == 0) {
                    return Err(format!(
                        "two rules of priority {} under different masks can match one packet; \
                         the module breaks the tie by the masks' creation order, which it does \
                         not report",
                        a.0
                    ));
                }
            }
        }
    }
    Ok((masks, out))
}
/// Why a classifier's key cannot be gathered by the program, if it cannot.
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

    /// The C `struct config`, the default action's rewrite program in slot `def_prog`.
    pub fn config_bytes(&self, def_prog: u32) -> [u8; CONFIG_BYTES] {
        let mut b = [0u8; CONFIG_BYTES];
        b[0..4].copy_from_slice(&(self.key.len() as u32).to_ne_bytes());
        b[4..8].copy_from_slice(&u32::from(self.is_5tuple()).to_ne_bytes());
        b[8..32].copy_from_slice(&self.default.action.to_bytes(SLOT_DEFAULT, def_prog, 0));
        for (i, (o, m)) in self.key.iter().enumerate() {
            b[32 + 2 * i..34 + 2 * i].copy_from_slice(&o.to_ne_bytes());
            b[96 + i] = *m;
        }
        let cls: u32 = match self.cls {
            Cls::Exact => 0,
            Cls::Lpm => 1,
            Cls::Wild => 2,
            Cls::Vlan => 3,
            Cls::Bpf => 4,
        };
        b[128..132].copy_from_slice(&cls.to_ne_bytes());
        b[392..396].copy_from_slice(&(self.filters.len() as u32).to_ne_bytes());
        b[396..400].copy_from_slice(&self.cbpf_steps().to_ne_bytes());
        b[132..136].copy_from_slice(&(self.wmasks.len() as u32).to_ne_bytes());
        for (t, mask) in self.wmasks.iter().take(WM_MASKS).enumerate() {
            b[136 + KEY_MAX * t..136 + KEY_MAX * (t + 1)].copy_from_slice(mask);
        }
        b
    }

    /// The interpreter's step bound: every filter runs at most its length in steps (jumps
    /// go forward), plus one to find it ended.
    pub fn cbpf_steps(&self) -> u32 {
        self.filters
            .iter()
            .map(|f| f.program.len() as u32 + 1)
            .sum::<u32>()
            + 1
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
        let rw = if p.action.kind == Kind::User {
            String::new()
        } else if !p.action.rewrite.is_empty() {
            format!(
                " after rewrites ({} operations; frames under {} bytes go up)",
                p.action.rewrite.len(),
                prog_min_len(&p.action.rewrite)
            )
        } else if p.action.mac_swap {
            " after a MAC swap".into()
        } else {
            String::new()
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
            let offs = ranges(&self.key.iter().map(|k| k.0 as usize).collect::<Vec<_>>());
            let _ = match self.cls {
                Cls::Exact => writeln!(
                    s,
                    "  classifier: {c} (ExactMatch), key {} bytes gathered at packet offsets {offs}",
                    self.key.len(),
                ),
                Cls::Lpm => writeln!(
                    s,
                    "  classifier: {c} (IPLookup), LPM trie on the IPv4 destination; frames \
                     IPLookup would not route (not IPv4, bad header) go up"
                ),
                Cls::Vlan => writeln!(
                    s,
                    "  classifier: {c} (VLANSplit), gate = the outer tag's VID (0 untagged), \
                     the tag popped"
                ),
                Cls::Bpf => writeln!(
                    s,
                    "  classifier: {c} (BPF), {} filter(s) of {} instruction(s) in all, run in \
                     the module's order by the program's classic BPF interpreter (at most \
                     {CBPF_FILTERS} filters of {CBPF_INSNS} instructions); gate = the first \
                     match, 0 without; multi-buffer frames go up",
                    self.filters.len(),
                    self.filters.iter().map(|f| f.program.len()).sum::<usize>()
                ),
                Cls::Wild => writeln!(
                    s,
                    "  classifier: {c} (WildcardMatch), key {} bytes at packet offsets {offs}, \
                     {} mask(s) searched",
                    self.key.len(),
                    self.wmasks.len()
                ),
            };
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
    Config([u8; CONFIG_BYTES]),
    /// Write rewrite program slot `slot` (the C `struct prog`).
    Prog {
        slot: u32,
        prog: [u8; PROG_BYTES],
    },
    Dev {
        slot: u32,
        ifindex: u32,
        netns: String,
    },
    /// Write BPF filter slot `slot` (the C `struct cbpf_prog`; the bank the configuration
    /// does not name yet).
    Filter {
        slot: u32,
        filter: Box<[u8; CBPF_BYTES]>,
    },
    /// Zero a counter slot before a new rule takes it.
    ResetCounter(u32),
    Put {
        key: RuleKey,
        action: [u8; ACTION_BYTES],
    },
    /// Remove a rule; the caller retires its counter slot's counts into `chain` (and the
    /// drop reason, if the rule's packets were dropped by the classifier) first.
    Delete {
        key: RuleKey,
        slot: u32,
        chain: Chain,
        drop: Option<(String, String)>,
    },
}

/// What the kernel's counts of `p` belong to: nothing when the packets go up to user space,
/// where the modules count them (adding them again would count them twice).
fn kernel_counted(p: &GatePlan) -> Counted {
    if p.action.kind == Kind::User {
        (Vec::new(), None)
    } else {
        (p.chain.clone(), p.drop.clone())
    }
}

/// What a counter slot's packets stand for: the chain they took and, for a drop by the
/// classifier, its (module, drop reason).
pub type Counted = (Chain, Option<(String, String)>);

/// Whether `p` needs a rewrite program that got no slot (its packets then go up, and the
/// modules count them).
fn progless(p: &GatePlan, progs: &HashMap<Vec<Op>, u32>) -> bool {
    p.action.kind != Kind::User
        && !p.action.rewrite.is_empty()
        && !progs.contains_key(&p.action.rewrite)
}

/// What is installed in the maps, for incremental syncs.
#[derive(Clone, Debug, Default)]
pub struct OffloadState {
    /// Rule key -> (counter slot, action bytes, what its packets count as).
    rules: HashMap<RuleKey, (u32, [u8; ACTION_BYTES], Counted)>,
    free: Vec<u32>,
    next: u32,
    config: Option<[u8; CONFIG_BYTES]>,
    devs: Vec<(String, u32, String)>,
    /// Rewrite programs installed: program -> slot (from 1).
    progs: HashMap<Vec<Op>, u32>,
    /// The default action's chain (slot SLOT_DEFAULT).
    default_counted: Counted,
    /// BPF filters installed, and the bank of `cbpf` that holds them.
    filters: Vec<BpfFilter>,
    bank: u32,
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
        // Rewrite programs keep their slots while in use; new ones take free slots before
        // any rule names them. A plan with more distinct programs than slots sends the rest
        // up (their actions become K_XSK below).
        let mut wanted: Vec<&Vec<Op>> = std::iter::once(&plan.default)
            .chain(plan.gates.values())
            .filter(|g| g.action.kind != Kind::User && !g.action.rewrite.is_empty())
            .map(|g| &g.action.rewrite)
            .collect();
        wanted.sort();
        wanted.dedup();
        // A slot freed here is not reused in the same sync: rules still naming it are only
        // rewritten after the new programs are in, and a packet must not see another
        // chain's program through them meanwhile.
        let mut used: Vec<u32> = self.progs.values().copied().collect();
        self.progs.retain(|p, _| wanted.contains(&p));
        for p in wanted {
            if self.progs.contains_key(p) {
                continue;
            }
            let Some(slot) = (1..PROG_SLOTS as u32).find(|s| !used.contains(s)) else {
                break;
            };
            used.push(slot);
            self.progs.insert(p.clone(), slot);
            ops.push(MapOp::Prog {
                slot,
                prog: prog_bytes(p),
            });
        }
        let progs = &self.progs;
        let bytes_of = |gp: &GatePlan, counter: u32, prio: u32| {
            if gp.action.rewrite.is_empty() || gp.action.kind == Kind::User {
                return gp.action.to_bytes(counter, 0, prio);
            }
            match progs.get(&gp.action.rewrite) {
                Some(s) => gp.action.to_bytes(counter, *s, prio),
                None => Action::user().to_bytes(counter, 0, prio),
            }
        };
        let want: HashMap<RuleKey, u16> = plan.rules.iter().map(|r| (r.0, r.1)).collect();
        let mut gone: Vec<RuleKey> = self
            .rules
            .keys()
            .filter(|k| !want.contains_key(*k))
            .copied()
            .collect();
        gone.sort();
        // BPF: the old filters run until the configuration names the new bank, and may
        // still pick a gate whose rule goes: its rule goes after the switch.
        let mut late = Vec::new();
        let dels = if plan.cls == Cls::Bpf {
            &mut late
        } else {
            &mut ops
        };
        for k in gone {
            let (slot, _, (chain, drop)) = self.rules.remove(&k).expect("present");
            dels.push(MapOp::Delete {
                key: k,
                slot,
                chain,
                drop,
            });
            self.free.push(slot);
        }
        for (k, g, prio) in &plan.rules {
            let gp = plan.gate(*g);
            let counted = if progless(gp, &self.progs) {
                (Vec::new(), None)
            } else {
                kernel_counted(gp)
            };
            match self.rules.get_mut(k) {
                Some((slot, bytes, old)) => {
                    let nb = bytes_of(gp, *slot, *prio);
                    if *bytes != nb || *old != counted {
                        *bytes = nb;
                        *old = counted;
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
                    let nb = bytes_of(gp, slot, *prio);
                    ops.push(MapOp::ResetCounter(slot));
                    ops.push(MapOp::Put {
                        key: *k,
                        action: nb,
                    });
                    self.rules.insert(*k, (slot, nb, counted));
                }
            }
        }
        let def_prog = if plan.default.action.rewrite.is_empty() {
            0
        } else {
            self.progs
                .get(&plan.default.action.rewrite)
                .copied()
                .unwrap_or(0)
        };
        if plan.cls == Cls::Bpf && plan.filters != self.filters {
            // The new filters go to the other bank; the configuration switches to it.
            self.bank ^= 1;
            for (i, f) in plan.filters.iter().enumerate() {
                ops.push(MapOp::Filter {
                    slot: self.bank * CBPF_FILTERS as u32 + i as u32,
                    filter: f.to_bytes(),
                });
            }
            self.filters = plan.filters.clone();
        }
        let mut cfg = plan.config_bytes(def_prog);
        cfg[400..404].copy_from_slice(&self.bank.to_ne_bytes());
        if def_prog == 0 && !plan.default.action.rewrite.is_empty() {
            // No program slot was left for it: the default goes up.
            cfg[8..32].copy_from_slice(&Action::user().to_bytes(SLOT_DEFAULT, 0, 0));
        }
        if self.config != Some(cfg) {
            ops.push(MapOp::Config(cfg));
            self.config = Some(cfg);
        }
        ops.extend(late);
        self.default_counted = if progless(&plan.default, &self.progs) {
            (Vec::new(), None)
        } else {
            kernel_counted(&plan.default)
        };
        ops
    }

    /// Every counter slot in use with the chain its packets would have taken in user
    /// space: the default slot and each rule's. A slot whose packets go up to user space
    /// has an empty chain: the modules count those packets themselves.
    pub fn slots(&self) -> Vec<(u32, Chain)> {
        self.counted()
            .into_iter()
            .map(|(s, (c, _))| (s, c))
            .collect()
    }

    /// As [`OffloadState::slots`], with the (module, drop reason) of slots whose packets
    /// the classifier dropped.
    pub fn counted(&self) -> Vec<(u32, Counted)> {
        let mut v = vec![(SLOT_DEFAULT, self.default_counted.clone())];
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
        assert_eq!(
            p.gate(4).drop,
            Some(("em".to_string(), "deadend".to_string()))
        );
        assert_eq!(p.gate(DROP_RULE).action.kind, Kind::Drop);
        assert_eq!(p.default.action.kind, Kind::User);
        assert_eq!(p.rules.len(), 6);
        // Rule 1's key: proto, sip, dip, sport, dport, zero padding.
        let RuleKey::Exact(k) = p.rules[0].0 else {
            panic!("{:?}", p.rules[0].0)
        };
        assert_eq!(&k[..14], &[17, 10, 0, 0, 1, 10, 0, 1, 1, 0x10, 1, 0, 53, 0]);
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
        assert_eq!(&p.config_bytes(0)[0..4], &0u32.to_ne_bytes());
        assert_eq!(p.config_bytes(0)[8], 3); // K_REDIRECT
    }

    #[test]
    fn masks_apply_to_keys_and_the_layout() {
        let mut v = view(vec![rule(0xff, Some(1))]);
        if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields[1].mask = vec![0xff, 0xff, 0xff, 0xf0];
        }
        let p = v.plan();
        assert_eq!(p.key[4], (29, 0xf0));
        assert!(matches!(p.rules[0].0, RuleKey::Exact(k) if k[4] == 0xf0));
        let c = p.config_bytes(0);
        assert_eq!(&c[0..4], &13u32.to_ne_bytes());
        assert_eq!(&c[4..8], &0u32.to_ne_bytes()); // masked: the generic gather
        assert_eq!(
            &view(vec![]).plan().config_bytes(0)[4..8],
            &1u32.to_ne_bytes()
        );
        assert_eq!(&c[32 + 8..34 + 8], &29u16.to_ne_bytes());
        assert_eq!(c[96 + 4], 0xf0);
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

    /// p0 -> `root` (the node given); gate 0 -> upd (Update) -> push (VLANPush) -> out1,
    /// gate 1 -> pop (VLANPop) -> swap -> out0, gate 2 -> nat (user).
    fn chain_view(root: Node, class: &str) -> View {
        let mut v = view(vec![]);
        v.entries = vec!["cls".into()];
        for (n, m) in [
            (
                "cls",
                module(class, root, &[(0, "upd"), (1, "pop"), (2, "nat")]),
            ),
            (
                "upd",
                module(
                    "Update",
                    Node::Update {
                        fields: vec![(30, 4, 0x0a00_0001), (100, 2, 7)],
                    },
                    &[(0, "push")],
                ),
            ),
            (
                "push",
                module("VLANPush", Node::VlanPush { tci: 0x0064 }, &[(0, "out1")]),
            ),
            ("pop", module("VLANPop", Node::VlanPop, &[(0, "swap")])),
            ("swap", module("MACSwap", Node::MacSwap, &[(0, "out0")])),
        ] {
            v.modules.insert(n.into(), m);
        }
        v
    }

    fn routes() -> Node {
        Node::IpLookup {
            routes: vec![
                Route {
                    prefix: 0x0a00_0000,
                    len: 8,
                    gate: Some(0),
                },
                Route {
                    prefix: 0x0a01_0000,
                    len: 16,
                    gate: Some(1),
                },
                Route {
                    prefix: 0x0a01_0200,
                    len: 24,
                    gate: None,
                },
            ],
            default_gate: None,
        }
    }

    #[test]
    fn ip_lookup_routes_become_lpm_entries_with_rewrite_chains() {
        let p = chain_view(routes(), "IPLookup").plan();
        assert_eq!(p.none_why, None);
        assert_eq!(p.cls, Cls::Lpm);
        assert!(p.key.is_empty());
        assert_eq!(p.rules.len(), 3);
        assert_eq!(
            p.rules[1].0,
            RuleKey::Prefix {
                addr: 0x0a01_0000,
                len: 16
            }
        );
        // struct lpm_key: prefixlen (host order), then the address in network order.
        assert_eq!(
            p.rules[1].0.bytes(),
            [16u32.to_ne_bytes().as_slice(), &[10, 1, 0, 0]].concat()
        );
        assert_eq!(p.rules[1].0.map(), "lpm");
        let g0 = p.gate(0);
        assert_eq!(g0.action.kind, Kind::Redirect(0));
        assert_eq!(
            g0.action.rewrite,
            vec![
                Op::Write {
                    offset: 30,
                    bytes: vec![10, 0, 0, 1],
                    need: 102
                },
                Op::Write {
                    offset: 100,
                    bytes: vec![0, 7],
                    need: 102
                },
                Op::Push(0x64)
            ]
        );
        assert_eq!(prog_min_len(&g0.action.rewrite), 102);
        let g1 = p.gate(1);
        assert_eq!(g1.action.kind, Kind::Tx);
        assert_eq!(g1.action.rewrite, vec![Op::Pop, Op::MacSwap]);
        assert!(!g1.action.mac_swap, "the swap is in the program");
        // After a pop of up to 4 bytes the swap still needs 18.
        assert_eq!(prog_min_len(&g1.action.rewrite), 22);
        assert_eq!(p.gate(DROP_RULE).action.kind, Kind::Drop);
        assert_eq!(
            p.gate(DROP_RULE).drop,
            Some(("cls".to_string(), "rule_drop".to_string()))
        );
        // No /0 route: a miss is IPLookup's no_match drop, done in the kernel.
        assert_eq!(p.default.action.kind, Kind::Drop);
        assert_eq!(
            p.default.drop,
            Some(("cls".to_string(), "no_match".to_string()))
        );
        let c = p.config_bytes(0);
        assert_eq!(&c[128..132], &1u32.to_ne_bytes());
        let t = p.text();
        assert!(t.contains("IPLookup"), "{t}");
        assert!(t.contains("after rewrites"), "{t}");
    }

    fn wild(rules: Vec<(u8, u8, i32, Option<u16>)>) -> Node {
        // One 4-byte field at 30 (IPv4 destination); rules (value of the first byte, mask of
        // the first byte, priority, gate).
        Node::WildcardMatch {
            fields: vec![Field {
                offset: Some(30),
                size: 4,
                mask: vec![0xff; 4],
            }],
            has_values: false,
            rules: rules
                .into_iter()
                .map(|(v, m, priority, gate)| WildRule {
                    values: vec![vec![v & m, 0, 0, 0]],
                    masks: vec![vec![m, 0, 0, 0]],
                    priority,
                    gate,
                })
                .collect(),
            default_gate: Some(2),
        }
    }

    #[test]
    fn wildcard_rules_go_to_one_tuple_per_mask() {
        let p = chain_view(
            wild(vec![
                (10, 0xff, 5, Some(0)),
                (11, 0xff, 5, Some(1)),
                (8, 0xf8, 7, None),
                (0, 0, -3, Some(1)),
            ]),
            "WildcardMatch",
        )
        .plan();
        assert_eq!(p.none_why, None);
        assert_eq!(p.cls, Cls::Wild);
        assert_eq!(p.key, vec![(30, 0xff), (31, 0xff), (32, 0xff), (33, 0xff)]);
        assert_eq!(p.wmasks.len(), 3);
        assert_eq!(p.wmasks[1][..4], [0xf8, 0, 0, 0]);
        let mut k = [0u8; KEY_MAX];
        k[0] = 8;
        assert_eq!(
            p.rules[2],
            (RuleKey::Masked { mask: 1, key: k }, DROP_RULE, biased(7))
        );
        assert_eq!(p.rules[3].2, biased(-3));
        assert!(biased(-3) < biased(5) && biased(5) < biased(7));
        assert_eq!(p.default.action.kind, Kind::User, "gate 2 is NAT");
        let c = p.config_bytes(0);
        assert_eq!(&c[128..132], &2u32.to_ne_bytes());
        assert_eq!(&c[132..136], &3u32.to_ne_bytes());
        assert_eq!(c[136 + 32], 0xf8);
        assert_eq!(p.rules[0].0.bytes().len(), 4 + KEY_MAX);
    }

    #[test]
    fn wildcard_tables_the_program_cannot_search_stay_in_user_space() {
        // Nine masks.
        let rules = (0..9)
            .map(|i| (0, (0xff00u16 >> i) as u8, i, Some(0)))
            .collect();
        let why = chain_view(wild(rules), "WildcardMatch")
            .plan()
            .none_why
            .unwrap();
        assert!(why.contains("9 distinct masks"), "{why}");

        // Equal priorities under different masks that can match one packet: the module's
        // tie order (mask creation) is not known to the planner.
        let why = chain_view(
            wild(vec![(10, 0xff, 5, Some(0)), (8, 0xf8, 5, Some(1))]),
            "WildcardMatch",
        )
        .plan()
        .none_why
        .unwrap();
        assert!(why.contains("priority 5"), "{why}");
        // Equal priorities that cannot overlap are fine.
        let p = chain_view(
            wild(vec![(10, 0xff, 5, Some(0)), (16, 0xf8, 5, Some(1))]),
            "WildcardMatch",
        )
        .plan();
        assert_eq!(p.none_why, None);

        // valuesv (rewrites on a hit) and metadata fields stay in user space.
        let mut n = wild(vec![]);
        if let Node::WildcardMatch { has_values, .. } = &mut n {
            *has_values = true;
        }
        let why = chain_view(n, "WildcardMatch").plan().none_why.unwrap();
        assert!(why.contains("values"), "{why}");
    }

    #[test]
    fn vlan_split_gates_are_vid_keys_with_the_pop_first() {
        let mut v = chain_view(Node::VlanSplit, "VLANSplit");
        v.modules
            .get_mut("cls")
            .unwrap()
            .ogates
            .insert(100, "swap".into());
        let p = v.plan();
        assert_eq!(p.none_why, None);
        assert_eq!(p.cls, Cls::Vlan);
        assert_eq!(&p.config_bytes(0)[128..132], &3u32.to_ne_bytes());
        // Gates 0, 1, 2 (nat), 100.
        assert_eq!(p.rules.len(), 4);
        let mut k = [0u8; KEY_MAX];
        k[1] = 100;
        assert!(p.rules.contains(&(RuleKey::Exact(k), 100, 0)));
        assert_eq!(p.gate(100).action.rewrite, vec![Op::Pop, Op::MacSwap]);
        assert_eq!(
            p.gate(1).action.rewrite,
            vec![Op::Pop, Op::Pop, Op::MacSwap]
        );
        assert_eq!(prog_min_len(&p.gate(1).action.rewrite), 26);
        assert_eq!(p.gate(2).action.kind, Kind::User);
        // Another VID: its gate is unconnected, a deadend drop.
        assert_eq!(p.default.action.kind, Kind::Drop);
        assert_eq!(
            p.default.drop,
            Some(("cls".to_string(), "deadend".to_string()))
        );
        assert!(p.text().contains("VLANSplit"));
    }

    /// A BPF filter compiled by libpcap, as the module's `get_programs` reports it.
    fn bpf_filter(expr: &str, gate: u16) -> BpfFilter {
        let program = bessemer_modules::classify::bpf::compile(expr)
            .unwrap()
            .iter()
            .map(|i| CbpfInsn {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        BpfFilter {
            expr: expr.into(),
            gate,
            program,
        }
    }

    #[test]
    fn bpf_filters_run_in_the_kernel_with_one_key_per_gate() {
        let filters = vec![
            bpf_filter("udp dst port 53", 1),
            bpf_filter("tcp[tcpflags] & tcp-syn != 0", 0),
            bpf_filter("vlan and udp", 2),
            bpf_filter("ip proto 47", 1),
            bpf_filter("len > 1000", 7),
        ];
        let v = chain_view(
            Node::Bpf {
                filters: filters.clone(),
            },
            "BPF",
        );
        let p = v.plan();
        assert_eq!(p.none_why, None, "{}", p.text());
        assert_eq!(p.cls, Cls::Bpf);
        assert_eq!(p.filters, filters);
        // Gates 0, 1, 2, 7: one key each; no match is gate 0, the default.
        let key = |g: u16| {
            let mut k = [0u8; KEY_MAX];
            k[..2].copy_from_slice(&g.to_be_bytes());
            RuleKey::Exact(k)
        };
        assert_eq!(p.rules.len(), 4);
        for g in [0u16, 1, 2, 7] {
            assert!(p.rules.contains(&(key(g), g, 0)), "{:?}", p.rules);
        }
        assert_eq!(p.default.chain[0], ("cls".to_string(), Some(0)));
        assert_eq!(p.gate(1).action.kind, Kind::Tx);
        assert_eq!(p.gate(2).action.kind, Kind::User);
        // Gate 7 is unconnected: dropped as the module's deadend.
        assert_eq!(p.gate(7).action.kind, Kind::Drop);
        assert_eq!(
            p.gate(7).drop,
            Some(("cls".to_string(), "deadend".to_string()))
        );
        let n: usize = filters.iter().map(|f| f.program.len()).sum();
        let c = p.config_bytes(0);
        assert_eq!(&c[128..132], &4u32.to_ne_bytes());
        assert_eq!(&c[392..396], &5u32.to_ne_bytes());
        assert_eq!(&c[396..400], &(n as u32 + 5 + 1).to_ne_bytes());
        let b = filters[0].to_bytes();
        assert_eq!(&b[0..4], &(filters[0].program.len() as u32).to_ne_bytes());
        assert_eq!(&b[4..6], &1u16.to_ne_bytes());
        assert_eq!(&b[8..10], &filters[0].program[0].code.to_ne_bytes());
        assert!(p.text().contains("(BPF), 5 filter(s)"), "{}", p.text());

        // Syncs: the filters go to the bank the configuration does not name, then the
        // configuration switches; unchanged filters are not rewritten.
        let mut st = OffloadState::new();
        let ops = st.sync(&p);
        let slots: Vec<u32> = ops
            .iter()
            .filter_map(|o| match o {
                MapOp::Filter { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        assert_eq!(slots, (32..37).collect::<Vec<_>>());
        let cfg_at = ops.iter().position(|o| matches!(o, MapOp::Config(_)));
        let MapOp::Config(c) = &ops[cfg_at.unwrap()] else {
            unreachable!()
        };
        assert_eq!(&c[400..404], &1u32.to_ne_bytes());
        assert!(ops
            .iter()
            .skip(cfg_at.unwrap())
            .all(|o| !matches!(o, MapOp::Filter { .. } | MapOp::Put { .. })));
        assert!(st.sync(&p).is_empty());
        // A filter deleted: the other bank, and gate 7's key goes after the switch.
        let mut fewer = filters.clone();
        fewer.pop();
        let p2 = chain_view(Node::Bpf { filters: fewer }, "BPF").plan();
        let ops = st.sync(&p2);
        let slots: Vec<u32> = ops
            .iter()
            .filter_map(|o| match o {
                MapOp::Filter { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        assert_eq!(slots, (0..4).collect::<Vec<_>>());
        let cfg_at = ops
            .iter()
            .position(|o| matches!(o, MapOp::Config(_)))
            .unwrap();
        let del_at = ops
            .iter()
            .position(|o| matches!(o, MapOp::Delete { key: k, .. } if *k == key(7)))
            .unwrap();
        assert!(del_at > cfg_at, "{ops:?}");
    }

    #[test]
    fn bpf_modules_beyond_the_programs_bounds_say_why() {
        let plan = |filters: Vec<BpfFilter>| chain_view(Node::Bpf { filters }, "BPF").plan();
        // No filters: everything leaves by gate 0, in the kernel too.
        let p = plan(vec![]);
        assert_eq!(p.none_why, None);
        assert!(p.rules.is_empty());
        assert_eq!(p.default.action.kind, Kind::Redirect(0));
        // 32 filters are run, 33 are not.
        let many = |n| (0..n).map(|i| bpf_filter("udp", i as u16 % 3)).collect();
        assert_eq!(plan(many(CBPF_FILTERS)).none_why, None);
        let p = plan(many(CBPF_FILTERS + 1));
        let why = p.none_why.clone().unwrap();
        assert!(why.contains("33 filters") && why.contains("32"), "{why}");
        assert!(!p.offloads_anything());
        assert!(p.text().contains("nothing offloaded"));
        // A program of more than 256 instructions.
        let mut long = bpf_filter("udp", 1);
        let ret = *long.program.last().unwrap();
        long.program = vec![ret; CBPF_INSNS + 1];
        let why = plan(vec![long]).none_why.unwrap();
        assert!(why.contains("257 instructions"), "{why}");
        // An instruction the interpreter does not run (a BPF extension load), a jump out
        // of the program, no final return.
        let mut ext = bpf_filter("udp", 1);
        ext.program[0].code = 0x20 | 0x40 | 0x80;
        let why = plan(vec![ext]).none_why.unwrap();
        assert!(why.contains("not one the program runs"), "{why}");
        let mut jump = bpf_filter("udp", 1);
        let j = jump.program.iter().position(|i| i.code == 0x15).unwrap();
        jump.program[j].jf = 250;
        let why = plan(vec![jump]).none_why.unwrap();
        assert!(why.contains("jumps out"), "{why}");
        let mut noret = bpf_filter("udp", 1);
        noret.program.push(CbpfInsn {
            code: 0x87,
            jt: 0,
            jf: 0,
            k: 0,
        });
        let why = plan(vec![noret]).none_why.unwrap();
        assert!(why.contains("does not end with a return"), "{why}");
        // Every opcode libpcap emits for these expressions is one the program runs.
        for e in [
            "udp dst port 53",
            "tcp and src net 10.0.0.0/8",
            "ip proto 47",
            "vlan and udp",
            "ip[8] < 5",
            "len > 1000",
            "ether host 02:00:00:00:00:01",
            "tcp[tcpflags] & tcp-syn != 0",
            "ip6 and tcp port 80",
            "icmp[icmptype] = icmp-echo",
            "ip[2:2] % 7 = 3 or ip[6:2] / 3 > 9 or ip[0] * 2 - 1 ^ 5 = ip[1] >> 1",
        ] {
            assert_eq!(plan(vec![bpf_filter(e, 1)]).none_why, None, "{e}");
        }
    }

    #[test]
    fn an_overflowing_lpm_or_wildcard_table_is_not_offloaded() {
        // A missing /32 would let its /8 match instead: the whole table stays up.
        let routes = (0..MAX_RULES as u32 + 1)
            .map(|i| Route {
                prefix: 0x0a00_0000 | i,
                len: 32,
                gate: Some(0),
            })
            .collect();
        let v = chain_view(
            Node::IpLookup {
                routes,
                default_gate: None,
            },
            "IPLookup",
        );
        let p = v.plan();
        let why = p.none_why.unwrap();
        assert!(why.contains("65537 rules"), "{why}");
        assert!(p.rules.is_empty() && p.classifier.is_none());
    }

    #[test]
    fn rewrite_chains_the_program_cannot_run_go_up() {
        // 25 operations: more than the program runs.
        let mut v = chain_view(routes(), "IPLookup");
        v.modules.get_mut("upd").unwrap().node = Node::Update {
            fields: (0..24).map(|i| (14 + i, 1, 0)).collect(),
        };
        let g = v.plan().gate(0).clone();
        assert_eq!(g.action.kind, Kind::User);
        assert!(g.why.contains("25 operations"), "{}", g.why);
        // A second classifier behind the first.
        let mut v = chain_view(routes(), "IPLookup");
        v.modules.get_mut("push").unwrap().node = wild(vec![]);
        let g = v.plan().gate(0).clone();
        assert_eq!(g.action.kind, Kind::User);
        assert!(g.why.contains("after the first module"), "{}", g.why);
    }

    #[test]
    fn rewrite_programs_get_stable_slots() {
        let mut st = OffloadState::new();
        let v = chain_view(routes(), "IPLookup");
        let ops = st.sync(&v.plan());
        let progs: Vec<_> = ops
            .iter()
            .filter_map(|o| match o {
                MapOp::Prog { slot, prog } => Some((*slot, *prog)),
                _ => None,
            })
            .collect();
        assert_eq!(progs.len(), 2);
        let first_put = ops
            .iter()
            .position(|o| matches!(o, MapOp::Put { .. }))
            .unwrap();
        let last_prog = ops
            .iter()
            .rposition(|o| matches!(o, MapOp::Prog { .. }))
            .unwrap();
        assert!(
            last_prog < first_put,
            "programs before the rules naming them"
        );
        // The /16 route (gate 1: pop, swap) names its program's slot.
        let p = v.plan();
        let pop = prog_bytes(&p.gate(1).action.rewrite);
        let slot = progs.iter().find(|x| x.1 == pop).unwrap().0;
        let put = ops
            .iter()
            .find_map(|o| match o {
                MapOp::Put {
                    key: RuleKey::Prefix { len: 16, .. },
                    action,
                } => Some(*action),
                _ => None,
            })
            .unwrap();
        assert_eq!(&put[16..20], &slot.to_ne_bytes());
        assert_eq!(pop[2], 2); // two operations
        assert_eq!(&pop[0..2], &22u16.to_ne_bytes());
        // Again: nothing to do. A changed TCI: one new program and the gate-0 rule moved.
        assert!(st.sync(&p).is_empty());
        let mut v = chain_view(routes(), "IPLookup");
        v.modules.get_mut("push").unwrap().node = Node::VlanPush { tci: 5 };
        let ops = st.sync(&v.plan());
        assert_eq!(
            ops.iter()
                .filter(|o| matches!(o, MapOp::Prog { .. }))
                .count(),
            1
        );
        assert_eq!(
            ops.iter()
                .filter(|o| matches!(o, MapOp::Put { .. }))
                .count(),
            1,
            "{ops:?}"
        );
    }

    #[test]
    fn chains_beyond_the_program_slots_go_up_and_are_not_counted_twice() {
        // 300 gates, each VLANPush with its own TCI: 255 programs fit.
        let mut v = view(vec![]);
        v.entries = vec!["vs".into()];
        let mut ogates = Vec::new();
        for g in 0..300u16 {
            let name = format!("push{g}");
            v.modules.insert(
                name.clone(),
                module("VLANPush", Node::VlanPush { tci: g }, &[(0, "out1")]),
            );
            ogates.push((g, name));
        }
        let og: Vec<(u16, &str)> = ogates.iter().map(|(g, n)| (*g, n.as_str())).collect();
        v.modules
            .insert("vs".into(), module("VLANSplit", Node::VlanSplit, &og));
        let p = v.plan();
        assert_eq!(p.rules.len(), 300);
        let mut st = OffloadState::new();
        let ops = st.sync(&p);
        let progs = ops
            .iter()
            .filter(|o| matches!(o, MapOp::Prog { .. }))
            .count();
        assert_eq!(progs, PROG_SLOTS - 1);
        let up = ops
            .iter()
            .filter(|o| matches!(o, MapOp::Put { action, .. } if action[0] == 0))
            .count();
        assert_eq!(up, 300 - (PROG_SLOTS - 1));
        let counted = st.counted();
        assert_eq!(
            counted.iter().filter(|(_, (c, _))| c.is_empty()).count(),
            300 - (PROG_SLOTS - 1),
            "the kernel counts only what it does"
        );
    }

    #[test]
    fn action_bytes_match_the_c_layout() {
        let a = Action {
            kind: Kind::Redirect(5),
            mac_swap: true,
            set_dmac: Some([1, 2, 3, 4, 5, 6]),
            rewrite: Vec::new(),
        };
        let b = a.to_bytes(77, 4, 9);
        assert_eq!(b[0], 3);
        assert_eq!(b[1], 3);
        assert_eq!(&b[2..8], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&b[8..12], &5u32.to_ne_bytes());
        assert_eq!(&b[12..16], &77u32.to_ne_bytes());
        assert_eq!(&b[16..20], &4u32.to_ne_bytes());
        assert_eq!(&b[20..24], &9u32.to_ne_bytes());
    }
}

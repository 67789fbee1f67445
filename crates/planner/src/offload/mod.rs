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
    /// The filters of a BPF module's `get_programs` answer (`filters: [{filter, gate,
    /// program: [{code, jt, jf, k}]}]`), in the order the module tries them; an error names
    /// the field that is missing or of the wrong type.
    pub fn list_from_answer(out: &bessemer_core::Value) -> Result<Vec<BpfFilter>, String> {
        use bessemer_core::Value;
        let list = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_list)
                .map(<[Value]>::to_vec)
                .ok_or_else(|| format!("get_programs: '{k}' is not a list"))
        };
        let int = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("get_programs: '{k}' is not an integer"))
        };
        list(out, "filters")?
            .iter()
            .map(|f| {
                let program = list(f, "program")?
                    .iter()
                    .map(|i| {
                        Ok(CbpfInsn {
                            code: int(i, "code")? as u16,
                            jt: int(i, "jt")? as u8,
                            jf: int(i, "jf")? as u8,
                            k: int(i, "k")? as u32,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok(BpfFilter {
                    expr: f
                        .get("filter")
                        .and_then(Value::as_str)
                        .ok_or("get_programs: 'filter' is not a string")?
                        .to_string(),
                    gate: int(f, "gate")? as u16,
                    program,
                })
            })
            .collect()
    }

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

mod plan;
mod sync;
#[cfg(test)]
mod tests;

pub use sync::{MapOp, OffloadState};

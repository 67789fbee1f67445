//! Planning: which gates of the pipeline behind the port the program handles, and how
//! (the walk over the view, key layouts, WildcardMatch tuples, the plan's report).

use super::*;

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

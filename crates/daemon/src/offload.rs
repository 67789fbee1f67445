//! The XDP offload of AFXDPPorts, driven by the planner (docs/planner.md "Offload into XDP").
//!
//! `Offload` (the extension service) turns it on per port: the daemon reads the pipeline
//! (modules, connections, the fed classifier's table through its own `get_initial_arg` /
//! `get_runtime_config` commands, a BPF module's filters through its `get_programs`, the Update and VLANPush modules behind it through theirs,
//! ports), the planner (`bessemer_planner::offload`) decides
//! which gates the XDP program handles and what its maps hold, and the program from
//! `bessemer_drivers::xdp_offload` takes the place of the port's redirect program on the
//! interface. After every change to the pipeline (module commands such as ExactMatch's
//! or BPF's add/delete/clear, connections, module or port destruction) the plan is recomputed and
//! only the difference is written to the maps. Packets the kernel handled are added back to
//! the modules' gate counters in `GetModuleInfo`, and packets it dropped to the drop reasons
//! user space would have counted them under (`rule_drop`, `no_match`, `deadend`), there and
//! in `ShowErrors`, so `show pipeline`/`show module`/`show errors` still count per module.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bessemer_core::module::MAX_GATES;
use bessemer_core::{Engine, Error, Result, Value};
use bessemer_drivers::af_xdp_port;
use bessemer_drivers::xdp_offload::XdpOffload;
use bessemer_planner::offload::{
    BpfFilter, Chain, Field, MapOp, Module, Node, OffloadState, Plan, PortInfo, Route, Rule, View,
    WildRule, SLOT_SHORT,
};

/// Kernel counts: per (module, ogate) of the chains, and per (module, drop reason).
pub type Counts = (
    HashMap<(String, Option<u16>), (u64, u64)>,
    HashMap<(String, String), u64>,
);

/// One port's offload.
struct Offload {
    /// The engine's pool base and the port's name (ports are named per engine).
    pool: usize,
    port: String,
    xdp: XdpOffload,
    state: OffloadState,
    plan: Plan,
    /// Counts of rules since deleted, by (module, ogate) of their chains and by (module,
    /// drop reason).
    retired: Counts,
    /// The last sync's error, shown by `show`.
    last_error: Option<String>,
}

static OFFLOADS: Mutex<Vec<Offload>> = Mutex::new(Vec::new());

fn pool_of(e: &Engine) -> usize {
    e.pool().region_base() as usize
}

/// The port a PortInc/PortOut/QueueInc/QueueOut serves: its description starts "<port>: ".
fn port_of_desc(desc: &str) -> String {
    desc.split(": ").next().unwrap_or("").to_string()
}

fn bytes_of(v: &Value, size: usize, what: &str) -> Result<Vec<u8>> {
    if let Some(b) = v.get("value_bin").and_then(Value::as_bytes) {
        return Ok(b.to_vec());
    }
    if let Some(i) = v.get("value_int").and_then(Value::as_i64) {
        // Big-endian for packet fields, as ExactMatch reads them.
        let b = (i as u64).to_be_bytes();
        return Ok(b[8 - size.min(8)..].to_vec());
    }
    Err(Error::invalid(format!(
        "{what}: neither value_bin nor value_int"
    )))
}

/// A table classifier's fields, from its `get_initial_arg`.
fn table_fields(init: &Value, name: &str) -> Result<Vec<Field>> {
    let empty: &[Value] = &[];
    let fdesc = init.get("fields").and_then(Value::as_list).unwrap_or(empty);
    let masks = init.get("masks").and_then(Value::as_list);
    let mut fields = Vec::new();
    for (i, f) in fdesc.iter().enumerate() {
        let size = f.get("num_bytes").and_then(Value::as_i64).unwrap_or(0) as usize;
        let offset = if f.get("attr_name").is_some() {
            None
        } else {
            Some(f.get("offset").and_then(Value::as_i64).unwrap_or(0) as usize)
        };
        let mask = match masks.and_then(|m| m.get(i)) {
            Some(m) => bytes_of(m, size, &format!("ExactMatch '{name}' mask {i}"))?,
            None => vec![0xff; size],
        };
        fields.push(Field { offset, size, mask });
    }
    Ok(fields)
}

/// A gate as the planner takes it: None for DROP_GATE.
fn gate_of(v: &Value, key: &str) -> Option<u16> {
    let g = v.get(key).and_then(Value::as_i64).unwrap_or(0);
    (g as u64 != MAX_GATES as u64).then_some(g as u16)
}

/// What the planner needs of an ExactMatch, through its own commands.
fn exact_match(e: &mut Engine, name: &str) -> Result<Node> {
    let init = e.command(name, "get_initial_arg", &Value::map())?;
    let rt = e.command(name, "get_runtime_config", &Value::map())?;
    let empty: &[Value] = &[];
    let fields = table_fields(&init, name)?;
    let drop = |g: i64| (g as u64 != MAX_GATES as u64).then_some(g as u16);
    let mut rules = Vec::new();
    let mut has_values = init.get("values").is_some();
    for r in rt.get("rules").and_then(Value::as_list).unwrap_or(empty) {
        if r.get("values").is_some() {
            has_values = true;
        }
        let vals = r.get("fields").and_then(Value::as_list).unwrap_or(empty);
        let mut fv = Vec::new();
        for (v, f) in vals.iter().zip(&fields) {
            fv.push(bytes_of(v, f.size, &format!("ExactMatch '{name}' rule"))?);
        }
        rules.push(Rule {
            fields: fv,
            gate: drop(r.get("gate").and_then(Value::as_i64).unwrap_or(0)),
        });
    }
    Ok(Node::ExactMatch {
        fields,
        has_values,
        rules,
        default_gate: drop(rt.get("default_gate").and_then(Value::as_i64).unwrap_or(0)),
    })
}

/// What the planner needs of a WildcardMatch, through its own commands.
fn wildcard_match(e: &mut Engine, name: &str) -> Result<Node> {
    let init = e.command(name, "get_initial_arg", &Value::map())?;
    let rt = e.command(name, "get_runtime_config", &Value::map())?;
    let empty: &[Value] = &[];
    let fields = table_fields(&init, name)?;
    let mut has_values = init.get("values").is_some();
    let mut rules = Vec::new();
    for r in rt.get("rules").and_then(Value::as_list).unwrap_or(empty) {
        if r.get("valuesv").is_some() {
            has_values = true;
        }
        let list = |k: &str| -> Result<Vec<Vec<u8>>> {
            let vals = r.get(k).and_then(Value::as_list).unwrap_or(empty);
            vals.iter()
                .zip(&fields)
                .map(|(v, f)| bytes_of(v, f.size, &format!("WildcardMatch '{name}' rule {k}")))
                .collect()
        };
        rules.push(WildRule {
            values: list("values")?,
            masks: list("masks")?,
            priority: r.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
            gate: gate_of(r, "gate"),
        });
    }
    Ok(Node::WildcardMatch {
        fields,
        has_values,
        rules,
        default_gate: gate_of(&rt, "default_gate"),
    })
}

/// What the planner needs of an IPLookup, through its `get_runtime_config`.
fn ip_lookup(e: &mut Engine, name: &str) -> Result<Node> {
    let rt = e.command(name, "get_runtime_config", &Value::map())?;
    let empty: &[Value] = &[];
    let mut routes = Vec::new();
    for r in rt.get("rules").and_then(Value::as_list).unwrap_or(empty) {
        let prefix: std::net::Ipv4Addr = r
            .get("prefix")
            .and_then(Value::as_str)
            .unwrap_or("")
            .parse()
            .map_err(|_| Error::invalid(format!("IPLookup '{name}': a route's prefix")))?;
        routes.push(Route {
            prefix: u32::from(prefix),
            len: r.get("prefix_len").and_then(Value::as_i64).unwrap_or(0) as u8,
            gate: gate_of(r, "gate"),
        });
    }
    Ok(Node::IpLookup {
        routes,
        default_gate: gate_of(&rt, "default_gate"),
    })
}

/// What the planner needs of a BPF module: its filters in the order it tries them, with
/// their compiled programs, through its `get_programs`.
fn bpf(e: &mut Engine, name: &str) -> Result<Node> {
    let out = e.command(name, "get_programs", &Value::map())?;
    let filters = BpfFilter::list_from_answer(&out)
        .map_err(|m| Error::invalid(format!("module '{name}': {m}")))?;
    Ok(Node::Bpf { filters })
}

/// Update's fields, through its `get_initial_arg`.
fn update(e: &mut Engine, name: &str) -> Result<Node> {
    let init = e.command(name, "get_initial_arg", &Value::map())?;
    let empty: &[Value] = &[];
    let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
    let fields = init
        .get("fields")
        .and_then(Value::as_list)
        .unwrap_or(empty)
        .iter()
        .map(|f| {
            (
                int(f, "offset") as usize,
                int(f, "size") as usize,
                int(f, "value") as u64,
            )
        })
        .collect();
    Ok(Node::Update { fields })
}

/// The pipeline as the offload sees it, from port `port`.
fn view(e: &mut Engine, port: &str) -> Result<View> {
    view_reading(e, port, false)
}

/// The pipeline behind port `port` with the tables of every classifier it reaches (the NIC
/// planner's LPG), not only of the one the port feeds.
pub(crate) fn pipeline_view(e: &mut Engine, port: &str) -> Result<View> {
    e.ports().get(port)?;
    view_reading(e, port, true)
}

/// `all_tables`: read every reachable classifier's table, else only the fed one's.
fn view_reading(e: &mut Engine, port: &str, all_tables: bool) -> Result<View> {
    let pool = e.pool().clone();
    let mut v = View {
        port: port.to_string(),
        ..View::default()
    };
    for h in e.ports().list() {
        let driver = h.driver().name.to_string();
        let info = match af_xdp_port::offload_target(&pool, h.name()) {
            Some(t) => PortInfo {
                driver,
                ifname: t.ifname.clone(),
                ifindex: t.ifindex,
                netns: t.netns.clone(),
            },
            None => PortInfo {
                driver,
                ifname: String::new(),
                ifindex: 0,
                netns: String::new(),
            },
        };
        v.ports.insert(h.name().to_string(), info);
    }
    let conns = e.graph().connections();
    let summaries = e.graph().modules();
    // Only the module the port feeds can be the offloaded classifier: the others' tables
    // are not read (each read pauses the workers).
    let fed: Vec<String> = summaries
        .iter()
        .filter(|m| matches!(m.mclass, "PortInc" | "QueueInc") && port_of_desc(&m.desc) == port)
        .filter_map(|m| {
            conns
                .iter()
                .find(|c| c.from == m.name && c.ogate == 0)
                .map(|c| c.to.clone())
        })
        .collect();
    // Update and VLANPush modules the fed ones reach: their settings are read too.
    let mut reach: Vec<String> = fed.clone();
    let mut i = 0;
    while i < reach.len() {
        let from = reach[i].clone();
        for c in conns.iter().filter(|c| c.from == from) {
            if !reach.contains(&c.to) {
                reach.push(c.to.clone());
            }
        }
        i += 1;
    }
    for m in &summaries {
        let mut ogates = BTreeMap::new();
        for c in conns.iter().filter(|c| c.from == m.name) {
            ogates.insert(c.ogate, c.to.clone());
        }
        let table = fed.contains(&m.name) || (all_tables && reach.contains(&m.name));
        let node = match m.mclass {
            "ExactMatch" if table => exact_match(e, &m.name)?,
            "WildcardMatch" if table => wildcard_match(e, &m.name)?,
            "IPLookup" if table => ip_lookup(e, &m.name)?,
            "BPF" if table => bpf(e, &m.name)?,
            "Update" if reach.contains(&m.name) => update(e, &m.name)?,
            "VLANPush" if reach.contains(&m.name) => {
                let v = e.command(&m.name, "get_initial_arg", &Value::map())?;
                Node::VlanPush {
                    tci: v.get("tci").and_then(Value::as_i64).unwrap_or(0) as u16,
                }
            }
            "VLANPop" => Node::VlanPop,
            "VLANSplit" => Node::VlanSplit,
            "MACSwap" => Node::MacSwap,
            "Sink" => Node::Sink,
            "PortOut" => Node::PortOut {
                port: port_of_desc(&m.desc),
            },
            c => Node::Other {
                class: c.to_string(),
            },
        };
        if matches!(m.mclass, "PortInc" | "QueueInc") && port_of_desc(&m.desc) == port {
            // A PortInc whose gate 0 leads nowhere drops everything (deadend): "(none)"
            // is no module, so the planner leaves the port alone.
            v.entries.push(
                ogates
                    .get(&0)
                    .cloned()
                    .unwrap_or_else(|| "(none)".to_string()),
            );
        }
        v.modules.insert(
            m.name.clone(),
            Module {
                class: m.mclass.to_string(),
                node,
                ogates,
            },
        );
    }
    Ok(v)
}

impl Offload {
    /// Recomputes the plan and writes the difference to the maps.
    fn sync(&mut self, e: &mut Engine) -> Result<()> {
        let plan = view(e, &self.port)?.plan();
        for op in self.state.sync(&plan) {
            match op {
                MapOp::Config(c) => self.xdp.set_config(&c)?,
                MapOp::Dev {
                    slot,
                    ifindex,
                    netns,
                } => self.xdp.set_dev(slot, ifindex, &netns)?,
                MapOp::ResetCounter(s) => self.xdp.reset_counter(s)?,
                MapOp::Prog { slot, prog } => self.xdp.set_prog(slot, &prog)?,
                MapOp::Filter { slot, filter } => self.xdp.set_filter(slot, &filter)?,
                MapOp::Put { key, action } => {
                    self.xdp.put_rule(key.map(), &key.bytes(), &action)?
                }
                MapOp::Delete {
                    key,
                    slot,
                    chain,
                    drop,
                } => {
                    self.xdp.delete_rule(key.map(), &key.bytes())?;
                    let (p, b) = self.xdp.counter(slot)?;
                    add_chain(&mut self.retired, &chain, &drop, p, b);
                }
            }
        }
        self.plan = plan;
        Ok(())
    }

    /// Packets and bytes the kernel handled per (module, ogate) of their chains, and
    /// packets it dropped per (module, drop reason).
    fn counts(&self) -> Counts {
        let mut out = self.retired.clone();
        for (slot, (chain, drop)) in self.state.counted() {
            let (p, b) = self.xdp.counter(slot).unwrap_or((0, 0));
            if p == 0 {
                continue;
            }
            add_chain(&mut out, &chain, &drop, p, b);
        }
        out
    }

    fn report(&self) -> String {
        let mut s = self.plan.text();
        if let Some(err) = &self.last_error {
            s += &format!("  last sync failed: {err}\n");
        }
        let (sp, _) = self.xdp.counter(SLOT_SHORT).unwrap_or((0, 0));
        s += &format!("  kernel counters: {sp} packets too short sent up\n");
        let (gates, drops) = self.counts();
        let mut c: Vec<_> = gates.into_iter().collect();
        c.sort();
        for ((m, g), (p, b)) in c {
            let gate = g.map_or(String::new(), |g| format!(" ogate {g}"));
            s += &format!("    {m}{gate}: {p} packets, {b} bytes in the kernel\n");
        }
        let mut d: Vec<_> = drops.into_iter().collect();
        d.sort();
        for ((m, why), p) in d {
            s += &format!("    {m} drop {why}: {p} packets in the kernel\n");
        }
        s
    }
}

fn add_chain(out: &mut Counts, chain: &Chain, drop: &Option<(String, String)>, p: u64, b: u64) {
    for hop in chain {
        let t = out.0.entry(hop.clone()).or_default();
        t.0 += p;
        t.1 += b;
    }
    if let Some(d) = drop {
        *out.1.entry(d.clone()).or_default() += p;
    }
}

/// Runs `action` ("on", "off", "show"/"") for `port`: whether the offload is on, and the
/// plan report.
pub fn command(e: &mut Engine, port: &str, action: &str) -> Result<(bool, String)> {
    let h = e.ports().get(port)?;
    if h.driver().name != "AFXDPPort" {
        return Err(Error::invalid(format!(
            "port '{port}' is a {}: the XDP offload needs an AFXDPPort",
            h.driver().name
        )));
    }
    let pool = pool_of(e);
    let mut all = OFFLOADS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|o| o.xdp.port_alive());
    let at = all.iter().position(|o| o.pool == pool && o.port == port);
    match (action, at) {
        ("on", Some(i)) => {
            let o = &mut all[i];
            o.sync(e)?;
            Ok((true, o.report()))
        }
        ("on", None) => {
            let target = af_xdp_port::offload_target(e.pool(), port).ok_or_else(|| {
                Error::not_found(format!("port '{port}' is not a live AFXDPPort"))
            })?;
            let mut o = Offload {
                pool,
                port: port.to_string(),
                xdp: XdpOffload::load(Some(&target))?,
                state: OffloadState::new(),
                plan: View::default().plan(),
                retired: Counts::default(),
                last_error: None,
            };
            // Maps first, then the program: it never runs on half-filled maps.
            o.sync(e)?;
            o.xdp.install()?;
            let r = o.report();
            all.push(o);
            Ok((true, r))
        }
        ("off", Some(i)) => {
            let mut o = all.remove(i);
            o.xdp.uninstall()?;
            Ok((false, format!("offload of port '{port}' is off\n")))
        }
        ("off", None) => Ok((false, format!("offload of port '{port}' is off\n"))),
        ("show" | "", Some(i)) => Ok((true, all[i].report())),
        ("show" | "", None) => {
            // What it would do, without doing it.
            let plan = view(e, port)?.plan();
            Ok((
                false,
                format!("(offload off; this is what 'on' would do)\n{}", plan.text()),
            ))
        }
        (a, _) => Err(Error::invalid(format!(
            "OffloadRequest.action: '{a}' is not one of on, off, show"
        ))),
    }
}

/// Re-plans every offload of this engine after a change to the pipeline; an offload whose
/// port is gone is dropped. Errors are kept for `show` and logged, not returned: the change
/// itself succeeded, and packets the maps do not cover still reach user space.
pub fn resync(e: &mut Engine) {
    let pool = pool_of(e);
    let mut all = OFFLOADS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|o| o.xdp.port_alive());
    for o in all.iter_mut().filter(|o| o.pool == pool) {
        if e.ports().get(&o.port).is_err() {
            continue;
        }
        match o.sync(e) {
            Ok(()) => o.last_error = None,
            Err(err) => {
                tracing::warn!(port = %o.port, "offload sync failed: {}", err.msg);
                o.last_error = Some(err.msg);
            }
        }
    }
    // Ports destroyed: their offloads go (the program left with the port's link).
    all.retain(|o| o.pool != pool || e.ports().get(&o.port).is_ok());
}

/// Whether any offload is on (so callers skip the work otherwise).
pub fn any() -> bool {
    !OFFLOADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_empty()
}

/// Packets and bytes the kernel handled for (module, ogate) (ogate None: the module itself,
/// as the last hop), and packets it dropped per (module, drop reason), over every offload of
/// this engine.
pub fn kernel_counts(e: &Engine) -> Counts {
    let pool = pool_of(e);
    let all = OFFLOADS.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Counts::default();
    for o in all.iter().filter(|o| o.pool == pool) {
        let (gates, drops) = o.counts();
        for (k, (p, b)) in gates {
            let t: &mut (u64, u64) = out.0.entry(k).or_default();
            t.0 += p;
            t.1 += b;
        }
        for (k, p) in drops {
            *out.1.entry(k).or_default() += p;
        }
    }
    out
}

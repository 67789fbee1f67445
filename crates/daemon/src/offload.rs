//! The XDP offload of AFXDPPorts, driven by the planner (docs/planner.md "Offload into XDP").
//!
//! `Offload` (the extension service) turns it on per port: the daemon reads the pipeline
//! (modules, connections, ExactMatch tables through their own `get_initial_arg` and
//! `get_runtime_config` commands, ports), the planner (`bessemer_planner::offload`) decides
//! which gates the XDP program handles and what its maps hold, and the program from
//! `bessemer_drivers::xdp_offload` takes the place of the port's redirect program on the
//! interface. After every change to the pipeline (module commands such as ExactMatch's
//! add/delete/clear, connections, module or port destruction) the plan is recomputed and
//! only the difference is written to the maps. Packets the kernel handled are added back to
//! the modules' gate counters in `GetModuleInfo`, so `show pipeline`/`show module` still
//! count per module.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bessemer_core::module::MAX_GATES;
use bessemer_core::{Engine, Error, Result, Value};
use bessemer_drivers::af_xdp_port;
use bessemer_drivers::xdp_offload::XdpOffload;
use bessemer_planner::offload::{
    Chain, Field, MapOp, Module, Node, OffloadState, Plan, PortInfo, Rule, View, SLOT_SHORT,
};

/// One port's offload.
struct Offload {
    /// The engine's pool base and the port's name (ports are named per engine).
    pool: usize,
    port: String,
    xdp: XdpOffload,
    state: OffloadState,
    plan: Plan,
    /// Counts of rules since deleted, by (module, ogate) of their chains.
    retired: HashMap<(String, Option<u16>), (u64, u64)>,
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

/// What the planner needs of an ExactMatch, through its own commands.
fn exact_match(e: &mut Engine, name: &str) -> Result<Node> {
    let init = e.command(name, "get_initial_arg", &Value::map())?;
    let rt = e.command(name, "get_runtime_config", &Value::map())?;
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

/// The pipeline as the planner sees it, from port `port`.
fn view(e: &mut Engine, port: &str) -> Result<View> {
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
    for m in &summaries {
        let mut ogates = BTreeMap::new();
        for c in conns.iter().filter(|c| c.from == m.name) {
            ogates.insert(c.ogate, c.to.clone());
        }
        let node = match m.mclass {
            "ExactMatch" if fed.contains(&m.name) => exact_match(e, &m.name)?,
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
                MapOp::Put { key, action } => self.xdp.put_rule(&key, &action)?,
                MapOp::Delete { key, slot, chain } => {
                    self.xdp.delete_rule(&key)?;
                    let (p, b) = self.xdp.counter(slot)?;
                    for hop in chain {
                        let t = self.retired.entry(hop).or_default();
                        t.0 += p;
                        t.1 += b;
                    }
                }
            }
        }
        self.plan = plan;
        Ok(())
    }

    /// Packets and bytes the kernel handled per (module, ogate) of their chains.
    fn counts(&self) -> HashMap<(String, Option<u16>), (u64, u64)> {
        let mut out = self.retired.clone();
        for (slot, chain) in self.state.slots() {
            let (p, b) = self.xdp.counter(slot).unwrap_or((0, 0));
            if p == 0 {
                continue;
            }
            add_chain(&mut out, &chain, p, b);
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
        let mut c: Vec<_> = self.counts().into_iter().collect();
        c.sort();
        for ((m, g), (p, b)) in c {
            let gate = g.map_or(String::new(), |g| format!(" ogate {g}"));
            s += &format!("    {m}{gate}: {p} packets, {b} bytes in the kernel\n");
        }
        s
    }
}

fn add_chain(out: &mut HashMap<(String, Option<u16>), (u64, u64)>, chain: &Chain, p: u64, b: u64) {
    for hop in chain {
        let t = out.entry(hop.clone()).or_default();
        t.0 += p;
        t.1 += b;
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
                retired: HashMap::new(),
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
/// as the last hop), over every offload of this engine.
pub fn kernel_counts(e: &Engine) -> HashMap<(String, Option<u16>), (u64, u64)> {
    let pool = pool_of(e);
    let all = OFFLOADS.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = HashMap::new();
    for o in all.iter().filter(|o| o.pool == pool) {
        for (k, (p, b)) in o.counts() {
            let t: &mut (u64, u64) = out.entry(k).or_default();
            t.0 += p;
            t.1 += b;
        }
    }
    out
}

//! What an operator sees: one consistent snapshot of every counter (modules, gates, drop
//! reasons, ports, workers, traffic classes, the packet pool), the drop rates derived from
//! successive snapshots, and the HTTP endpoints that serve them (`/metrics` for Prometheus,
//! the live web view). The `ShowErrors` RPC and `GetModuleInfo` read the same snapshot code.

pub mod http;
pub mod metrics;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bessemer_core::engine::WorkerState;
use bessemer_core::port::DirCounts;
use bessemer_core::Engine;
use serde::Serialize;

/// Every counter of the daemon at one instant.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Unix time of the snapshot, in seconds.
    pub time: f64,
    /// Modules in creation order.
    pub modules: Vec<ModuleStats>,
    /// Ports by name.
    pub ports: Vec<PortStats>,
    /// Workers by id.
    pub workers: Vec<WorkerStats>,
    /// Traffic classes of every worker, parents before children.
    pub tcs: Vec<TcStats>,
    /// The packet pool.
    pub pool: PoolStats,
}

/// A module's counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModuleStats {
    /// Instance name.
    pub name: String,
    /// Class name.
    pub mclass: String,
    /// The module's own one-line description.
    pub desc: String,
    /// Packets dropped, by reason, in the class's declared order (zero rows included).
    pub drops: Vec<DropStat>,
    /// Connected output gates.
    pub ogates: Vec<EdgeStats>,
    /// Runtime per worker that called it (`show runtime`; counted from the module's
    /// creation, not from a `clear runtime`).
    pub runtime: Vec<RuntimeStat>,
    /// The histograms it keeps (Measure: latency and jitter).
    pub histograms: Vec<HistogramStat>,
    /// The argument it was created with, as JSON (bytes as hex strings).
    pub arg: serde_json::Value,
}

/// A module argument as JSON: messages as objects, repeated fields as arrays, bytes as hex.
fn value_json(v: &bessemer_core::Value) -> serde_json::Value {
    use bessemer_core::Value as V;
    match v {
        V::Null => serde_json::Value::Null,
        V::Bool(b) => (*b).into(),
        V::Int(i) => (*i).into(),
        V::Float(f) => serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into),
        V::Str(s) => s.clone().into(),
        V::Bytes(b) => b
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
            .into(),
        V::List(l) => l.iter().map(value_json).collect::<Vec<_>>().into(),
        V::Map(m) => m
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

/// A module's histogram (`show latency`, Prometheus histograms): HDR-style buckets.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HistogramStat {
    /// "latency", "jitter".
    pub name: String,
    /// Upper bounds of the buckets in ns.
    pub bounds_ns: Vec<u64>,
    /// One count per bound, then those above the last.
    pub counts: Vec<u64>,
    /// Samples.
    pub count: u64,
    /// Their sum in ns.
    pub sum_ns: u64,
    /// (percentile, ns): 50, 90, 99, 99.9.
    pub percentiles: Vec<(f64, u64)>,
    /// Largest sample in ns.
    pub max_ns: u64,
}

/// The histograms `module` keeps (none for most classes).
pub fn histograms_of(e: &Engine, module: &str) -> Vec<bessemer_core::module::HistogramExport> {
    e.graph()
        .histograms()
        .into_iter()
        .find(|(n, _, _)| n == module)
        .map(|(_, _, h)| h)
        .unwrap_or_default()
}

/// One worker's calls of a module and their sampled cycles.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuntimeStat {
    /// Worker id.
    pub wid: usize,
    /// Calls (task runs and batches processed).
    pub calls: u64,
    /// Packets.
    pub packets: u64,
    /// Calls whose TSC cycles were measured.
    pub sampled_calls: u64,
    /// Their packets.
    pub sampled_packets: u64,
    /// Their cycles.
    pub sampled_cycles: u64,
    /// Sampled cycles per packet (None before a sampled call with packets).
    pub cycles_per_packet: Option<f64>,
}

/// Packets dropped under one reason.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DropStat {
    /// The reason's name.
    pub reason: String,
    /// Packets dropped so far.
    pub count: u64,
}

/// Counters of one connection (an output gate and where it leads).
#[derive(Clone, Debug, Default, Serialize)]
pub struct EdgeStats {
    /// Output gate.
    pub ogate: u16,
    /// Downstream module.
    pub to: String,
    /// Its input gate.
    pub igate: u16,
    /// Packets sent.
    pub packets: u64,
    /// Batches sent.
    pub batches: u64,
}

/// A port's per-queue counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PortStats {
    /// Port name.
    pub name: String,
    /// Driver (class) name.
    pub driver: String,
    /// Receive queues.
    pub rx: Vec<QueueStats>,
    /// Transmit queues.
    pub tx: Vec<QueueStats>,
    /// The link is up (the driver's own answer, as GetLinkStatus gives it).
    pub link_up: bool,
}

/// Counters of one port queue.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct QueueStats {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Packets dropped.
    pub dropped: u64,
}

impl From<DirCounts> for QueueStats {
    fn from(c: DirCounts) -> QueueStats {
        QueueStats {
            packets: c.packets,
            bytes: c.bytes,
            dropped: c.dropped,
        }
    }
}

/// A worker's state and time.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkerStats {
    /// Worker id.
    pub wid: usize,
    /// Core it is pinned to.
    pub core: usize,
    /// "running", "pausing", "paused" or "finished".
    pub state: String,
    /// Scheduler rounds.
    pub rounds: u64,
    /// Rounds in which nothing was runnable.
    pub idle_rounds: u64,
    /// Seconds spent inside tasks.
    pub busy_seconds: f64,
    /// Seconds running but outside tasks (scheduling, idle polling).
    pub idle_seconds: f64,
}

/// A traffic class's usage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TcStats {
    /// Worker the class lives on.
    pub wid: usize,
    /// Class name.
    pub name: String,
    /// Policy name.
    pub policy: String,
    /// Parent class ("" for a worker's root).
    pub parent: String,
    /// Times scheduled.
    pub count: u64,
    /// TSC cycles used.
    pub cycles: u64,
    /// Packets processed.
    pub packets: u64,
    /// Bits processed.
    pub bits: u64,
}

/// Occupancy of the packet pool.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolStats {
    /// Buffers in all.
    pub capacity: u64,
    /// Buffers free (shared list and worker caches).
    pub free: u64,
    /// Allocations that found no buffer.
    pub alloc_failures: u64,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A module's drop counters by reason, every declared reason included.
pub fn drops_of(e: &Engine, module: &str) -> bessemer_core::Result<Vec<DropStat>> {
    Ok(e.graph()
        .drops_of(module)?
        .into_iter()
        .map(|(reason, count)| DropStat { reason, count })
        .collect())
}

/// Reads every counter. Takes no pause: counters are read as the workers update them.
pub fn collect(e: &Engine) -> Snapshot {
    let g = e.graph();
    let mut edges: HashMap<String, Vec<EdgeStats>> = HashMap::new();
    for c in g.connections() {
        edges.entry(c.from).or_default().push(EdgeStats {
            ogate: c.ogate,
            to: c.to,
            igate: c.igate,
            packets: c.counts.packets,
            batches: c.counts.batches,
        });
    }
    let mut runtime: HashMap<String, Vec<RuntimeStat>> = g
        .runtime(false)
        .into_iter()
        .map(|m| {
            let rows = m
                .workers
                .iter()
                .map(|w| RuntimeStat {
                    wid: w.wid,
                    calls: w.calls,
                    packets: w.packets,
                    sampled_calls: w.sampled_calls,
                    sampled_packets: w.sampled_packets,
                    sampled_cycles: w.sampled_cycles,
                    cycles_per_packet: w.cycles_per_packet(),
                })
                .collect();
            (m.name, rows)
        })
        .collect();
    let mut hists: HashMap<String, Vec<HistogramStat>> = g
        .histograms()
        .into_iter()
        .map(|(name, _, hs)| {
            let v = hs
                .into_iter()
                .map(|h| HistogramStat {
                    name: h.name.to_string(),
                    bounds_ns: h.bounds_ns,
                    counts: h.counts,
                    count: h.count,
                    sum_ns: h.sum_ns,
                    percentiles: h.percentiles,
                    max_ns: h.max_ns,
                })
                .collect();
            (name, v)
        })
        .collect();
    let modules = g
        .modules()
        .into_iter()
        .map(|m| {
            let mut ogates = edges.remove(&m.name).unwrap_or_default();
            ogates.sort_by_key(|o| o.ogate);
            ModuleStats {
                drops: drops_of(e, &m.name).unwrap_or_default(),
                ogates,
                runtime: runtime.remove(&m.name).unwrap_or_default(),
                histograms: hists.remove(&m.name).unwrap_or_default(),
                arg: g.init_arg_of(&m.name).map(value_json).unwrap_or_default(),
                mclass: m.mclass.to_string(),
                desc: m.desc,
                name: m.name,
            }
        })
        .collect();
    let mut ports: Vec<PortStats> = e
        .ports()
        .list()
        .iter()
        .map(|p| {
            let (rx, tx) = p.queue_counts();
            PortStats {
                name: p.name().to_string(),
                driver: p.driver().name.to_string(),
                rx: rx.into_iter().map(Into::into).collect(),
                tx: tx.into_iter().map(Into::into).collect(),
                link_up: p.port().link_status().link_up,
            }
        })
        .collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let tcs: Vec<TcStats> = e
        .list_tcs()
        .into_iter()
        .map(|(wid, t)| TcStats {
            wid,
            policy: t.policy.name().to_string(),
            parent: t.parent.unwrap_or_default(),
            count: t.stats.count,
            cycles: t.stats.cycles,
            packets: t.stats.packets,
            bits: t.stats.bits,
            name: t.name,
        })
        .collect();
    let hz = bessemer_core::tsc::hz().max(1) as f64;
    let workers = e
        .list_workers()
        .into_iter()
        .map(|w| {
            // A worker's root class accumulates the cycles of every task it ran.
            let busy = tcs
                .iter()
                .filter(|t| t.wid == w.wid && t.parent.is_empty())
                .map(|t| t.cycles)
                .sum::<u64>();
            WorkerStats {
                wid: w.wid,
                core: w.core,
                state: match w.state {
                    WorkerState::Running => "running",
                    WorkerState::Pausing => "pausing",
                    WorkerState::Paused => "paused",
                    WorkerState::Finished => "finished",
                }
                .to_string(),
                rounds: w.rounds,
                idle_rounds: w.idle_rounds,
                busy_seconds: busy as f64 / hz,
                idle_seconds: w.run_cycles.saturating_sub(busy) as f64 / hz,
            }
        })
        .collect();
    let p = e.pool().stats();
    Snapshot {
        time: unix_now(),
        modules,
        ports,
        workers,
        tcs,
        pool: PoolStats {
            capacity: p.capacity as u64,
            free: p.free as u64,
            alloc_failures: p.alloc_failures,
        },
    }
}

/// Drop rates (packets per second) by module and reason, from the two latest snapshots the
/// sampler took.
#[derive(Default)]
pub struct DropRates {
    prev: Option<(Instant, HashMap<DropKey, u64>)>,
    rates: HashMap<DropKey, f64>,
}

/// A module name and one of its drop reasons.
type DropKey = (String, String);

impl DropRates {
    /// Folds in a new reading of the drop counters.
    pub fn update(&mut self, snap: &Snapshot) {
        let now = Instant::now();
        let cur: HashMap<DropKey, u64> = snap
            .modules
            .iter()
            .flat_map(|m| {
                m.drops
                    .iter()
                    .map(|d| ((m.name.clone(), d.reason.clone()), d.count))
            })
            .collect();
        if let Some((t, prev)) = &self.prev {
            let dt = now.duration_since(*t).as_secs_f64().max(1e-3);
            self.rates = cur
                .iter()
                .map(|(k, &c)| {
                    // A counter that went down was reset; its rate restarts from zero.
                    let d = c.saturating_sub(prev.get(k).copied().unwrap_or(0));
                    (k.clone(), d as f64 / dt)
                })
                .collect();
        }
        self.prev = Some((now, cur));
    }

    /// Packets per second dropped by `module` under `reason` over the last interval.
    pub fn rate(&self, module: &str, reason: &str) -> f64 {
        self.rates
            .get(&(module.to_string(), reason.to_string()))
            .copied()
            .unwrap_or(0.0)
    }
}

/// The engine as the control service shares it.
pub type SharedEngine = Arc<Mutex<Engine>>;

/// How often the sampler reads the counters for rates.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Reads the counters every [`SAMPLE_INTERVAL`] so that `show errors` can give rates
/// without making its caller wait a second.
pub fn spawn_sampler(engine: SharedEngine, rates: Arc<Mutex<DropRates>>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let e = engine.clone();
            let Ok(snap) = tokio::task::spawn_blocking(move || {
                collect(&e.lock().unwrap_or_else(|p| p.into_inner()))
            })
            .await
            else {
                continue;
            };
            rates
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .update(&snap);
        }
    });
}

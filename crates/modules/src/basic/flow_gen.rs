//! FlowGen: generates TCP-like flows from a packet template at a configured packet and flow
//! rate, each flow a SYN, data packets and a FIN with its own addresses and ports.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, InitContext, Instance, Module, ModuleClass,
    PacketBatch, Result, Value, MAX_BURST,
};

use crate::headers::{ip, tcp, udp, ETH_LEN, IPV4_MIN_LEN};
use crate::util::FastRng;

/// Largest template (BESS's MAX_TEMPLATE_SIZE).
pub const MAX_TEMPLATE_SIZE: usize = 1536;
/// Smallest template: Ethernet + IPv4 (no options) + TCP (no options), the fields FlowGen
/// writes.
pub const MIN_TEMPLATE_SIZE: usize = 54;
/// Size of SYN and FIN packets (Ethernet + IPv4 + TCP, padded to the Ethernet minimum).
const CONTROL_PKT_SIZE: usize = 60;
/// Per-packet overhead counted in the task's bits (BESS's: preamble, IFG, CRC).
const PKT_OVERHEAD: u64 = 24;
/// The Pareto tail beyond this quantile is cut off so the variance is finite (BESS's).
const PARETO_TAIL_LIMIT: f64 = 0.99;
/// Shape of the Pareto flow-size distribution (BESS's).
const PARETO_ALPHA: f64 = 1.3;
/// Port range used for both ports when no range is given (BESS randomises ports anyway).
const DEFAULT_PORT_RANGE: u32 = 20000;
const FIRST_SEQ: u32 = 12345;
/// Sequence number of flows that quick_rampup pretends were already running.
const RAMPUP_SEQ: u32 = 56789;

const TCP_SYN: u8 = 0x02;
const TCP_FIN: u8 = 0x01;
const TCP_ACK: u8 = 0x10;

// Offsets in the template, an Ethernet/IPv4/TCP frame without IP options (as BESS, the IHL
// is not looked at).
const OFF_IP_LEN: usize = ETH_LEN + ip::TOTAL_LEN;
const OFF_IP_SRC: usize = ETH_LEN + ip::SRC;
const OFF_IP_DST: usize = ETH_LEN + ip::DST;
const OFF_TCP: usize = ETH_LEN + IPV4_MIN_LEN;
const OFF_TCP_SPORT: usize = OFF_TCP + udp::SRC_PORT;
const OFF_TCP_DPORT: usize = OFF_TCP + udp::DST_PORT;
const OFF_TCP_SEQ: usize = OFF_TCP + tcp::SEQ;
const OFF_TCP_FLAGS: usize = OFF_TCP + tcp::FLAGS;
const _: () =
    assert!(OFF_IP_LEN == 16 && OFF_IP_SRC == 26 && OFF_TCP_SPORT == 34 && OFF_TCP_FLAGS == 47);

bessemer_core::drop_reasons! {
    /// Why FlowGen drops packets.
    pub enum FlowGenDrop {
        PoolExhausted = "pool_exhausted",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arrival {
    Uniform,
    Exponential,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Duration {
    Uniform,
    Pareto,
}

#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    packets_left: f64,
    first_pkt: bool,
    next_seq: u32,
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    src_port: [u8; 2],
    dst_port: [u8; 2],
}

#[cfg(test)]
thread_local! {
    /// Test clock (ns); when set, replaces the TSC.
    static TEST_NOW: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

fn now_ns(ctx: &mut Context) -> u64 {
    #[cfg(test)]
    if let Some(t) = TEST_NOW.with(|c| c.get()) {
        return t;
    }
    bessemer_core::tsc::cycles_to_ns(ctx.refresh_now())
}

fn pareto_variate(inv_alpha: f64, y: f64) -> f64 {
    (1.0 / (1.0 - y * PARETO_TAIL_LIMIT)).powf(inv_alpha)
}

/// A Pareto variate rescaled so the distribution's mean becomes `desired_mean` (min 1).
fn scaled_pareto_variate(inv_alpha: f64, mean: f64, desired_mean: f64, y: f64) -> f64 {
    1.0 + (pareto_variate(inv_alpha, y) - 1.0) / (mean - 1.0) * (desired_mean - 1.0)
}

/// The mean of the truncated Pareto distribution, by numeric integration over the quantile.
fn pareto_mean(inv_alpha: f64) -> f64 {
    const N: u32 = 1_000_000;
    let total: f64 = (0..=N)
        .map(|i| pareto_variate(inv_alpha, i as f64 / N as f64))
        .sum();
    total / (N + 1) as f64
}

/// The configuration a FlowGenArg sets.
#[derive(Clone, Debug)]
struct Config {
    templ: Vec<u8>,
    total_pps: f64,
    flow_rate: f64,
    flow_duration: f64,
    arrival: Arrival,
    duration: Duration,
}

/// Generates flows: a new flow starts every 1/`flow_rate` s (uniform) or after exponential
/// gaps; each sends about `pps / (flow_rate * flow_duration) * flow_duration` packets (fixed,
/// or Pareto-distributed with that mean) at `pps / (flow_rate * flow_duration)` packets per
/// second: first a 60-byte SYN, then template-sized ACK packets, the last with FIN. Each
/// flow's IPv4 addresses and TCP ports are the template's plus a random offset below the
/// corresponding range. Checksums are left as in the template (as BESS; add checksum modules
/// downstream if needed).
pub struct FlowGen {
    cfg: Config,
    quick_rampup: bool,
    ip_src_base: u32,
    ip_dst_base: u32,
    port_src_base: u16,
    port_dst_base: u16,
    ip_src_range: u32,
    ip_dst_range: u32,
    port_src_range: u32,
    port_dst_range: u32,
    burst: usize,
    // Derived from `cfg`.
    pareto_inv_alpha: f64,
    pareto_mean: f64,
    flow_pps: f64,
    flow_pkts: f64,
    flow_gap_ns: f64,
    pkt_gap_ns: u64,
    rng: FastRng,
    /// Pending packet events: (time in ns, tie-breaking sequence, flow slot).
    events: BinaryHeap<Reverse<(u64, u64, u32)>>,
    event_seq: u64,
    flows: Vec<Flow>,
    free: Vec<u32>,
    active_flows: u64,
    generated_flows: u64,
    started: bool,
}

fn parse_mode<T>(
    v: Option<&str>,
    field: &str,
    options: &[(&str, T)],
    default: Option<T>,
) -> Result<Option<T>>
where
    T: Copy,
{
    match v {
        None | Some("") => Ok(default),
        Some(s) => options
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, t)| Some(*t))
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                Error::invalid(format!(
                    "FlowGenArg.{field}: '{s}' must be one of {}",
                    names.join(", ")
                ))
            }),
    }
}

fn check_template(t: &[u8]) -> Result<Vec<u8>> {
    if !(MIN_TEMPLATE_SIZE..=MAX_TEMPLATE_SIZE).contains(&t.len()) {
        return Err(Error::invalid(format!(
            "FlowGenArg.template: {} bytes; must be {MIN_TEMPLATE_SIZE}..{MAX_TEMPLATE_SIZE} \
             (an Ethernet/IPv4/TCP frame)",
            t.len()
        )));
    }
    Ok(t.to_vec())
}

fn positive(v: Option<f64>, field: &str) -> Result<Option<f64>> {
    match v {
        Some(x) if x <= 0.0 => Err(Error::invalid(format!(
            "FlowGenArg.{field}: {x} must be positive"
        ))),
        _ => Ok(v),
    }
}

const ARRIVALS: &[(&str, Arrival)] = &[
    ("uniform", Arrival::Uniform),
    ("exponential", Arrival::Exponential),
];
const DURATIONS: &[(&str, Duration)] =
    &[("uniform", Duration::Uniform), ("pareto", Duration::Pareto)];

impl FlowGen {
    fn update_derived(&mut self) {
        self.pareto_inv_alpha = 1.0 / PARETO_ALPHA;
        if self.cfg.duration == Duration::Pareto && self.pareto_mean == 0.0 {
            self.pareto_mean = pareto_mean(self.pareto_inv_alpha);
        }
        let concurrent = self.cfg.flow_rate * self.cfg.flow_duration;
        self.flow_pps = self.cfg.total_pps / concurrent;
        self.flow_pkts = self.flow_pps * self.cfg.flow_duration;
        self.flow_gap_ns = 1e9 / self.cfg.flow_rate;
        // `as` saturates: an absurdly low rate just means "never again".
        self.pkt_gap_ns = (1e9 / self.flow_pps) as u64;
    }

    fn real(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn range(&mut self, n: u32) -> u32 {
        if n == 0 {
            0
        } else {
            self.rng.below(n as u64) as u32
        }
    }

    fn new_flow_pkts(&mut self) -> f64 {
        match self.cfg.duration {
            Duration::Uniform => self.flow_pkts,
            Duration::Pareto => {
                let y = self.real();
                scaled_pareto_variate(self.pareto_inv_alpha, self.pareto_mean, self.flow_pkts, y)
            }
        }
    }

    fn max_flow_pkts(&self) -> f64 {
        match self.cfg.duration {
            Duration::Uniform => self.flow_pkts,
            Duration::Pareto => {
                scaled_pareto_variate(self.pareto_inv_alpha, self.pareto_mean, self.flow_pkts, 1.0)
            }
        }
    }

    fn next_flow_arrival(&mut self) -> u64 {
        match self.cfg.arrival {
            Arrival::Uniform => self.flow_gap_ns as u64,
            Arrival::Exponential => {
                let u = 1.0 - self.real(); // (0, 1]
                (-u.ln() * self.flow_gap_ns) as u64
            }
        }
    }

    fn push_event(&mut self, t: u64, slot: u32) {
        self.event_seq += 1;
        self.events.push(Reverse((t, self.event_seq, slot)));
    }

    fn schedule_flow(&mut self, t: u64) -> u32 {
        let src_ip = self.ip_src_base.wrapping_add(self.range(self.ip_src_range));
        let dst_ip = self.ip_dst_base.wrapping_add(self.range(self.ip_dst_range));
        let src_port = self
            .port_src_base
            .wrapping_add(self.range(self.port_src_range) as u16);
        let dst_port = self
            .port_dst_base
            .wrapping_add(self.range(self.port_dst_range) as u16);
        // The random fraction makes the mean packet count come out right.
        let packets_left = self.new_flow_pkts() + self.real();
        let f = Flow {
            packets_left,
            first_pkt: true,
            next_seq: FIRST_SEQ,
            src_ip: src_ip.to_be_bytes(),
            dst_ip: dst_ip.to_be_bytes(),
            src_port: src_port.to_be_bytes(),
            dst_port: dst_port.to_be_bytes(),
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.flows[s as usize] = f;
                s
            }
            None => {
                self.flows.push(f);
                (self.flows.len() - 1) as u32
            }
        };
        self.active_flows += 1;
        self.generated_flows += 1;
        self.push_event(t, slot);
        slot
    }

    /// Starts the timeline at `now`: a first flow, plus (quick_rampup) the flows that would
    /// be running already in steady state, part-way through.
    fn populate_initial_flows(&mut self, now: u64) {
        self.schedule_flow(now);
        if !self.quick_rampup || self.flow_pps < 1.0 || self.cfg.flow_rate < 1.0 {
            return;
        }
        let past_origin = self.max_flow_pkts() / self.flow_pps;
        let step = 1.0 / self.cfg.flow_rate;
        let mut past = step;
        while past < past_origin {
            let pre_consumed = self.flow_pps * past;
            let flow_pkts = self.new_flow_pkts();
            if flow_pkts > pre_consumed {
                let jitter = (1e9 * self.real() / self.flow_pps) as u64;
                let s = self.schedule_flow(now + jitter) as usize;
                self.flows[s].first_pkt = false;
                self.flows[s].next_seq = RAMPUP_SEQ;
                self.flows[s].packets_left = flow_pkts - pre_consumed;
            }
            past += step;
        }
    }

    /// Fills `batch` with the packets due by `now`; returns how many could not be allocated.
    fn generate(&mut self, ctx: &mut Context, batch: &mut PacketBatch, now: u64) -> u64 {
        let mut failed = 0;
        while batch.len() < self.burst {
            let Some(&Reverse((t, _, slot))) = self.events.peek() else {
                break;
            };
            if now < t {
                break;
            }
            self.events.pop();
            let f = self.flows[slot as usize];
            if f.packets_left <= 0.0 {
                self.free.push(slot);
                self.active_flows -= 1;
                continue;
            }
            match self.fill_packet(ctx, &f) {
                // SAFETY: the loop stops at burst <= MAX_BURST.
                Some(p) => unsafe { batch.push_unchecked(p) },
                None => failed += 1,
            }
            let size = self.cfg.templ.len() as u32;
            let fl = &mut self.flows[slot as usize];
            fl.next_seq = fl.next_seq.wrapping_add(if fl.first_pkt {
                1
            } else {
                size - MIN_TEMPLATE_SIZE as u32
            });
            let first = fl.first_pkt;
            fl.first_pkt = false;
            fl.packets_left -= 1.0;
            if first {
                let next = t.saturating_add(self.next_flow_arrival());
                self.schedule_flow(next);
            }
            let next = t.saturating_add(self.pkt_gap_ns);
            self.push_event(next, slot);
        }
        failed
    }

    fn fill_packet(&self, ctx: &mut Context, f: &Flow) -> Option<bessemer_core::Packet> {
        let mut p = ctx.alloc(0)?;
        let templ = &self.cfg.templ;
        let control = f.first_pkt || f.packets_left <= 1.0;
        if control {
            // SYN and FIN carry no payload: the template's headers, IP length 40.
            let mut b = [0u8; CONTROL_PKT_SIZE];
            let n = templ.len().min(CONTROL_PKT_SIZE);
            b[..n].copy_from_slice(&templ[..n]);
            b[OFF_IP_LEN..OFF_IP_LEN + 2].copy_from_slice(&40u16.to_be_bytes());
            p.set_data(&b);
        } else {
            p.set_data(templ);
        }
        let mut flags = if f.first_pkt { TCP_SYN } else { TCP_ACK };
        if f.packets_left <= 1.0 {
            flags |= TCP_FIN;
        }
        let d = p.data_mut();
        d[OFF_IP_SRC..OFF_IP_SRC + 4].copy_from_slice(&f.src_ip);
        d[OFF_IP_DST..OFF_IP_DST + 4].copy_from_slice(&f.dst_ip);
        d[OFF_TCP_SPORT..OFF_TCP_SPORT + 2].copy_from_slice(&f.src_port);
        d[OFF_TCP_DPORT..OFF_TCP_DPORT + 2].copy_from_slice(&f.dst_port);
        d[OFF_TCP_SEQ..OFF_TCP_SEQ + 4].copy_from_slice(&f.next_seq.to_be_bytes());
        d[OFF_TCP_FLAGS] = flags;
        Some(p)
    }

    fn set_bases(&mut self) {
        let t = &self.cfg.templ;
        let be32 = |o: usize| u32::from_be_bytes([t[o], t[o + 1], t[o + 2], t[o + 3]]);
        self.ip_src_base = be32(OFF_IP_SRC);
        self.ip_dst_base = be32(OFF_IP_DST);
        self.port_src_base = u16::from_be_bytes([t[OFF_TCP_SPORT], t[OFF_TCP_SPORT + 1]]);
        self.port_dst_base = u16::from_be_bytes([t[OFF_TCP_DPORT], t[OFF_TCP_DPORT + 1]]);
    }

    /// The `update` command: changes only the fields given (non-zero / non-empty), as BESS.
    fn update(&mut self, arg: &Value) -> Result<()> {
        let mut a = Args::new(arg, "FlowGenArg")?;
        let templ = a.bytes("template")?.filter(|t| !t.is_empty());
        let pps = positive(a.float("pps")?.filter(|&x| x != 0.0), "pps")?;
        let rate = positive(a.float("flow_rate")?.filter(|&x| x != 0.0), "flow_rate")?;
        let dur = positive(
            a.float("flow_duration")?.filter(|&x| x != 0.0),
            "flow_duration",
        )?;
        let arrival = parse_mode(a.str("arrival")?, "arrival", ARRIVALS, None)?;
        let duration = parse_mode(a.str("duration")?, "duration", DURATIONS, None)?;
        // Accepted but, as in BESS, not changed by update.
        for f in [
            "quick_rampup",
            "ip_src_range",
            "ip_dst_range",
            "port_src_range",
            "port_dst_range",
        ] {
            let _ = a.any(f);
        }
        a.finish()?;
        let mut cfg = self.cfg.clone();
        if let Some(t) = templ {
            cfg.templ = check_template(t)?;
        }
        cfg.total_pps = pps.unwrap_or(cfg.total_pps);
        cfg.flow_rate = rate.unwrap_or(cfg.flow_rate);
        cfg.flow_duration = dur.unwrap_or(cfg.flow_duration);
        cfg.arrival = arrival.unwrap_or(cfg.arrival);
        cfg.duration = duration.unwrap_or(cfg.duration);
        if cfg.flow_rate > cfg.total_pps {
            return Err(Error::invalid(format!(
                "FlowGenArg.flow_rate: {} flows/s is more than pps {}",
                cfg.flow_rate, cfg.total_pps
            )));
        }
        self.cfg = cfg;
        self.update_derived();
        Ok(())
    }
}

impl FlowGen {
    /// The `update` command.
    fn cmd_update(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.update(arg)?;
        Ok(Value::Null)
    }

    /// The `set_burst` command.
    fn cmd_set_burst(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.burst = crate::util::parse_burst(arg, "FlowGenCommandSetBurstArg")?;
        Ok(Value::Null)
    }
}

impl Module for FlowGen {
    fn run_task(&mut self, ctx: &mut Context, _arg: u64) -> TaskResult {
        let now = now_ns(ctx);
        if !self.started {
            // The timeline starts at the first run, so a task attached late does not begin
            // with a burst of overdue packets (BESS starts it at init).
            self.started = true;
            self.populate_initial_flows(now);
        }
        let mut batch = PacketBatch::new();
        let failed = self.generate(ctx, &mut batch, now);
        if failed > 0 {
            ctx.count_drops(FlowGenDrop::PoolExhausted, failed);
        }
        let n = batch.len() as u64;
        ctx.forward(0, &mut batch);
        TaskResult {
            block: n == 0,
            packets: n as u32,
            bits: (self.cfg.templ.len() as u64 + PKT_OVERHEAD) * n * 8,
        }
    }

    fn desc(&self) -> String {
        format!("{} flows", self.active_flows)
    }

    fn info(&self) -> Value {
        Value::map()
            .with("active_flows", self.active_flows)
            .with("generated_flows", self.generated_flows)
            .with("pps", self.cfg.total_pps)
            .with("flow_rate", self.cfg.flow_rate)
            .with("flow_duration", self.cfg.flow_duration)
            .with("burst", self.burst)
    }
}

fn create(init: &mut InitContext, arg: &Value) -> Result<Instance> {
    let mut a = Args::new(arg, "FlowGenArg")?;
    let templ = a
        .bytes("template")?
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::invalid("FlowGenArg.template is required"))?;
    let templ = check_template(templ)?;
    // Absent or 0 takes BESS's defaults (BESS itself would run with 0 and misbehave).
    let pps = positive(a.float("pps")?.filter(|&x| x != 0.0), "pps")?.unwrap_or(1000.0);
    let rate = positive(a.float("flow_rate")?.filter(|&x| x != 0.0), "flow_rate")?.unwrap_or(10.0);
    let dur = positive(
        a.float("flow_duration")?.filter(|&x| x != 0.0),
        "flow_duration",
    )?
    .unwrap_or(10.0);
    let arrival = parse_mode(
        a.str("arrival")?,
        "arrival",
        ARRIVALS,
        Some(Arrival::Uniform),
    )?
    .expect("default");
    let duration = parse_mode(
        a.str("duration")?,
        "duration",
        DURATIONS,
        Some(Duration::Uniform),
    )?
    .expect("default");
    let quick_rampup = a.bool("quick_rampup")?.unwrap_or(false);
    let ip_src_range = a.uint("ip_src_range", u32::MAX as u64)?.unwrap_or(0) as u32;
    let ip_dst_range = a.uint("ip_dst_range", u32::MAX as u64)?.unwrap_or(0) as u32;
    let mut port_src_range = a.uint("port_src_range", 65535)?.unwrap_or(0) as u32;
    let mut port_dst_range = a.uint("port_dst_range", 65535)?.unwrap_or(0) as u32;
    a.finish()?;
    if ip_src_range == 0 && ip_dst_range == 0 && port_src_range == 0 && port_dst_range == 0 {
        port_src_range = DEFAULT_PORT_RANGE;
        port_dst_range = DEFAULT_PORT_RANGE;
    }
    init.register_task(0);
    let mut g = FlowGen {
        cfg: Config {
            templ,
            total_pps: pps,
            flow_rate: rate,
            flow_duration: dur,
            arrival,
            duration,
        },
        quick_rampup,
        ip_src_base: 0,
        ip_dst_base: 0,
        port_src_base: 0,
        port_dst_base: 0,
        ip_src_range,
        ip_dst_range,
        port_src_range,
        port_dst_range,
        burst: MAX_BURST,
        pareto_inv_alpha: 0.0,
        pareto_mean: 0.0,
        flow_pps: 0.0,
        flow_pkts: 0.0,
        flow_gap_ns: 0.0,
        pkt_gap_ns: 0,
        // BESS's fixed seed: runs are reproducible.
        rng: FastRng::new(0xBAAD_F00D_DEAD_BEEF),
        events: BinaryHeap::new(),
        event_seq: 0,
        flows: Vec::new(),
        free: Vec::new(),
        active_flows: 0,
        generated_flows: 0,
        started: false,
    };
    g.set_bases();
    g.update_derived();
    Ok(Instance::Exclusive(Box::new(g)))
}

/// The FlowGen class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "FlowGen",
    name_template: "flowgen",
    help: "generates TCP-like flows of packets from a template",
    arg_type: "FlowGenArg",
    arg_doc: &[
        "template: bytes — an Ethernet/IPv4/TCP frame (54..1536 bytes, no IP/TCP options); required",
        "pps: double — total packets per second (default 1000)",
        "flow_rate: double — new flows per second (default 10)",
        "flow_duration: double — mean flow duration in seconds (default 10)",
        "arrival: string — flow inter-arrival: 'uniform' (default) or 'exponential'",
        "duration: string — flow length: 'uniform' (default, fixed) or 'pareto' (alpha 1.3, same mean)",
        "quick_rampup: bool — start with the flows of the steady state already running",
        "ip_src_range, ip_dst_range: uint32 — per-flow offset below this added to the template's address",
        "port_src_range, port_dst_range: uint32 (0..65535) — the same for TCP ports; with all ranges 0 both port ranges are 20000",
    ],
    igates: 0,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "update",
            arg_type: "FlowGenArg",
            help: "changes template, pps, flow_rate, flow_duration, arrival, duration (others ignored)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive FlowGen, FlowGen::cmd_update),
        },
        CommandSpec {
            name: "set_burst",
            arg_type: "FlowGenCommandSetBurstArg",
            help: "packets per run at most (0..32)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive FlowGen, FlowGen::cmd_set_burst),
        },
    ],
    drop_reasons: FlowGenDrop::NAMES,
    max_workers: 1,
    create,
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::{CaptureHandle, Harness};
    use std::collections::HashMap;

    /// Ethernet/IPv4/TCP, 10.0.0.1:1000 -> 10.1.0.1:80, 100 bytes.
    fn template() -> Vec<u8> {
        let mut t = vec![0u8; 100];
        t[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        t[12..14].copy_from_slice(&[0x08, 0x00]);
        t[14] = 0x45;
        t[16..18].copy_from_slice(&86u16.to_be_bytes());
        t[22] = 64;
        t[23] = 6;
        t[26..30].copy_from_slice(&[10, 0, 0, 1]);
        t[30..34].copy_from_slice(&[10, 1, 0, 1]);
        t[34..36].copy_from_slice(&1000u16.to_be_bytes());
        t[36..38].copy_from_slice(&80u16.to_be_bytes());
        t[46] = 0x50;
        t[54..].fill(0xab);
        t
    }

    fn set_now(ns: u64) {
        TEST_NOW.with(|t| t.set(Some(ns)));
    }

    /// A harness at time 0 with a FlowGen "fg" made from `arg` (plus the template), and the
    /// capture of its output.
    fn flowgen(arg: Value) -> (Harness, CaptureHandle) {
        set_now(0);
        let mut h = Harness::new();
        h.add(&CLASS, "fg", &arg.with("template", template()))
            .unwrap();
        let c = h.capture("fg", 0);
        (h, c)
    }

    /// Runs the task every `step` ns from `from` to `to`; returns the packets generated.
    fn drive(h: &mut Harness, c: &CaptureHandle, from: u64, to: u64, step: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut t = from;
        while t < to {
            set_now(t);
            while !h.run_task("fg", 0).block {}
            out.extend(c.take_data());
            t += step;
        }
        out
    }

    type Tuple = ([u8; 4], [u8; 4], [u8; 2], [u8; 2]);

    fn tuple(p: &[u8]) -> Tuple {
        let a = |o: usize| [p[o], p[o + 1], p[o + 2], p[o + 3]];
        (a(26), a(30), [p[34], p[35]], [p[36], p[37]])
    }

    fn flags(p: &[u8]) -> u8 {
        p[47]
    }

    fn seq(p: &[u8]) -> u32 {
        u32::from_be_bytes([p[38], p[39], p[40], p[41]])
    }

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn one_flow_is_a_syn_data_packets_and_a_fin() {
        // 1 flow per second lasting 0.5 s at 10 pps: 5 packets (+1 for the random fraction).
        let (mut h, c) = flowgen(
            Value::map()
                .with("pps", 5.0)
                .with("flow_rate", 1.0)
                .with("flow_duration", 0.5)
                .with("ip_src_range", 1)
                .with("port_dst_range", 1),
        );
        let pkts = drive(&mut h, &c, 0, 900 * MS, MS);
        assert_eq!(pkts.len(), 6);
        let tpl = template();
        // SYN: the template's first 60 bytes with IP length 40, flags SYN, seq 12345.
        let mut syn = tpl[..60].to_vec();
        syn[16..18].copy_from_slice(&40u16.to_be_bytes());
        syn[47] = TCP_SYN;
        syn[38..42].copy_from_slice(&12345u32.to_be_bytes());
        let port = &pkts[0][34..36];
        syn[34..36].copy_from_slice(port);
        assert_eq!(pkts[0], syn);
        // Data: the whole template, ACK, seq advanced by 1 then by the 46-byte payload.
        for (i, p) in pkts[1..5].iter().enumerate() {
            let mut want = tpl.clone();
            want[34..36].copy_from_slice(port);
            want[47] = TCP_ACK;
            want[38..42].copy_from_slice(&(12346 + 46 * i as u32).to_be_bytes());
            assert_eq!(p, &want, "data packet {i}");
        }
        // FIN: 60 bytes, ACK|FIN.
        assert_eq!(pkts[5].len(), 60);
        assert_eq!(flags(&pkts[5]), TCP_ACK | TCP_FIN);
        assert_eq!(seq(&pkts[5]), 12346 + 46 * 4);
        assert!(pkts.iter().all(|p| tuple(p) == tuple(&pkts[0])));
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn uniform_flows_arrive_at_flow_rate_and_total_rate_is_pps() {
        // 100 concurrent flows of 10 pps, a new one every 100 ms.
        let (mut h, c) = flowgen(
            Value::map()
                .with("pps", 1000.0)
                .with("flow_rate", 10.0)
                .with("flow_duration", 10.0),
        );
        let warm = drive(&mut h, &c, 0, 10 * S, MS);
        let steady = drive(&mut h, &c, 10 * S, 20 * S, MS);
        // Flows start at 0, 0.1, 0.2, ...: 100 SYNs in each 10 s.
        let syns = |v: &[Vec<u8>]| v.iter().filter(|p| flags(p) == TCP_SYN).count();
        assert_eq!(syns(&warm), 100);
        assert_eq!(syns(&steady), 100);
        // Flow k sends 101 packets (100 + the random fraction, rounded up) at (k + j) x 100 ms,
        // j = 0..=100: exactly 101 packets fall in each 100 ms of the steady state.
        assert_eq!(steady.len(), 10_100);
        // Every finished flow sent one SYN, data and exactly one FIN, all with its 5-tuple.
        let mut per_flow: HashMap<Tuple, Vec<u8>> = HashMap::new();
        for p in warm.iter().chain(&steady) {
            per_flow.entry(tuple(p)).or_default().push(flags(p));
        }
        let finished: Vec<_> = per_flow
            .values()
            .filter(|f| f.contains(&(TCP_ACK | TCP_FIN)))
            .collect();
        assert!(finished.len() >= 95, "{}", finished.len());
        for f in finished {
            assert_eq!(f[0], TCP_SYN);
            assert_eq!(f.len(), 101);
            assert_eq!(f.iter().filter(|&&x| x & TCP_FIN != 0).count(), 1);
        }
        let active = h
            .graph
            .modules()
            .into_iter()
            .find(|m| m.name == "fg")
            .unwrap()
            .desc;
        // 200 flows started plus the one scheduled for 20 s, minus flows 0..=98 whose
        // after-last event (at (k + 101) x 100 ms) has passed.
        assert_eq!(active, "102 flows");
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn ports_and_addresses_stay_in_their_ranges() {
        let (mut h, c) = flowgen(
            Value::map()
                .with("pps", 1000.0)
                .with("flow_rate", 100.0)
                .with("flow_duration", 0.1)
                .with("ip_src_range", 4)
                .with("ip_dst_range", 2)
                .with("port_src_range", 3)
                .with("port_dst_range", 1),
        );
        let pkts = drive(&mut h, &c, 0, 2 * S, MS);
        let mut srcs = std::collections::BTreeSet::new();
        let mut sports = std::collections::BTreeSet::new();
        for p in &pkts {
            let (s, d, sp, dp) = tuple(p);
            srcs.insert(s[3]);
            sports.insert(u16::from_be_bytes(sp));
            assert!([1, 2].contains(&d[3]) && d[..3] == [10, 1, 0]);
            assert_eq!(u16::from_be_bytes(dp), 80);
        }
        assert_eq!(srcs.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(sports.into_iter().collect::<Vec<_>>(), [1000, 1001, 1002]);
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn exponential_arrivals_average_the_flow_rate() {
        let (mut h, c) = flowgen(
            Value::map()
                .with("pps", 200.0)
                .with("flow_rate", 100.0)
                .with("flow_duration", 0.01)
                .with("arrival", "exponential"),
        );
        let pkts = drive(&mut h, &c, 0, 10 * S, MS);
        let syns = pkts.iter().filter(|p| flags(p) == TCP_SYN).count();
        // 1000 expected; Poisson sd ~32.
        assert!((900..=1100).contains(&syns), "{syns}");
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn pareto_sizes_keep_the_mean() {
        let inv = 1.0 / PARETO_ALPHA;
        let mean = pareto_mean(inv);
        let n = 200_000;
        let total: f64 = (0..n)
            .map(|i| scaled_pareto_variate(inv, mean, 50.0, (i as f64 + 0.5) / n as f64))
            .sum();
        let avg = total / n as f64;
        assert!((avg - 50.0).abs() < 0.5, "{avg}");
        assert!(scaled_pareto_variate(inv, mean, 50.0, 0.0) == 1.0);
        // End to end: flows vary in length.
        let (mut h, c) = flowgen(
            Value::map()
                .with("pps", 1000.0)
                .with("flow_rate", 100.0)
                .with("flow_duration", 0.1)
                .with("duration", "pareto"),
        );
        let pkts = drive(&mut h, &c, 0, 3 * S, MS);
        let mut per_flow: HashMap<Tuple, usize> = HashMap::new();
        for p in &pkts {
            *per_flow.entry(tuple(p)).or_default() += 1;
        }
        let lens: std::collections::BTreeSet<usize> = per_flow.values().copied().collect();
        assert!(lens.len() > 5, "{lens:?}");
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn quick_rampup_starts_at_full_rate() {
        let arg = || {
            Value::map()
                .with("pps", 1000.0)
                .with("flow_rate", 10.0)
                .with("flow_duration", 10.0)
        };
        let (mut h, c) = flowgen(arg());
        let slow = drive(&mut h, &c, 0, S, MS).len();
        let (mut h2, c2) = flowgen(arg().with("quick_rampup", true));
        let fast = drive(&mut h2, &c2, 0, S, MS);
        // Without ramp-up: flows 1..10 at 10 pps for part of the second (~55 packets).
        assert!(slow < 100, "{slow}");
        assert!((900..=1100).contains(&fast.len()), "{}", fast.len());
        // Pre-existing flows start mid-stream: no SYN, sequence 56789.
        assert!(fast
            .iter()
            .any(|p| flags(p) == TCP_ACK && seq(p) == RAMPUP_SEQ));
        TEST_NOW.with(|t| t.set(None));
    }

    #[test]
    fn set_burst_update_and_argument_errors() {
        let (mut h, c) = flowgen(Value::map().with("pps", 1000.0).with("flow_rate", 10.0));
        h.command("fg", "set_burst", &Value::map().with("burst", 2))
            .unwrap();
        // Let a second of packets become due at once: runs return at most 2.
        drive(&mut h, &c, 0, 1, 1);
        set_now(2 * S);
        let r = h.run_task("fg", 0);
        assert_eq!(r.packets, 2);
        assert_eq!(r.bits, (100 + 24) * 2 * 8);
        c.take();
        let e = h
            .command(
                "fg",
                "set_burst",
                &Value::map().with("burst", bessemer_core::MAX_BURST + 1),
            )
            .unwrap_err();
        assert!(
            e.msg.contains("FlowGenCommandSetBurstArg.burst"),
            "{}",
            e.msg
        );
        let e = h
            .command("fg", "update", &Value::map().with("flow_rate", 5000.0))
            .unwrap_err();
        assert!(e.msg.contains("FlowGenArg.flow_rate"), "{}", e.msg);
        let e = h
            .command("fg", "update", &Value::map().with("arrival", "poisson"))
            .unwrap_err();
        assert!(e.msg.contains("FlowGenArg.arrival"), "{}", e.msg);
        h.command(
            "fg",
            "update",
            &Value::map().with("pps", 2000.0).with("ip_src_range", 5),
        )
        .unwrap();
        let info = h.graph.info_of("fg").unwrap();
        assert_eq!(info.get("pps"), Some(&Value::Float(2000.0)));

        let bad = [
            (Value::map(), "FlowGenArg.template"),
            (
                Value::map().with("template", vec![0u8; 40]),
                "FlowGenArg.template",
            ),
            (
                Value::map().with("template", vec![0u8; 1537]),
                "FlowGenArg.template",
            ),
            (
                Value::map().with("template", template()).with("pps", -1.0),
                "FlowGenArg.pps",
            ),
            (
                Value::map()
                    .with("template", template())
                    .with("duration", "zipf"),
                "FlowGenArg.duration",
            ),
            (
                Value::map()
                    .with("template", template())
                    .with("port_src_range", 70000),
                "FlowGenArg.port_src_range",
            ),
        ];
        for (i, (arg, want)) in bad.into_iter().enumerate() {
            let e = h.add(&CLASS, &format!("bad{i}"), &arg).unwrap_err();
            assert!(e.msg.contains(want), "{want}: {}", e.msg);
        }
        TEST_NOW.with(|t| t.set(None));
    }
}

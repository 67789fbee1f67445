//! `ShowErrors`: every module's drop counters by reason with their rates.

use std::collections::HashMap;

use bessemer_core::{Engine, Error, Result};

use super::{lookup_name, Reply};
use crate::bessemer::pb as ext;
use crate::observe::{drops_of, DropRates};
use crate::pb;

impl Reply for ext::ShowErrorsResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

/// A module's drop counts by reason with their rates; zero rows only if `include_zero`.
/// `module`'s drop counts by reason, with `kernel`'s (the XDP offload's drops by (module,
/// reason), `crate::offload::kernel_counts`) added: packets the kernel dropped count where
/// user space would have counted them.
pub(super) fn drop_counts(
    e: &Engine,
    module: &str,
    rates: &DropRates,
    include_zero: bool,
    kernel: &HashMap<(String, String), u64>,
) -> Result<Vec<ext::DropCount>> {
    Ok(drops_of(e, module)?
        .into_iter()
        .map(|mut d| {
            if let Some(p) = kernel.get(&(module.to_string(), d.reason.clone())) {
                d.count += p;
            }
            d
        })
        .filter(|d| include_zero || d.count > 0)
        .map(|d| ext::DropCount {
            rate: rates.rate(module, &d.reason),
            reason: d.reason,
            count: d.count,
        })
        .collect())
}

pub(super) fn show_errors(
    e: &Engine,
    rates: &DropRates,
    req: ext::ShowErrorsRequest,
) -> Result<ext::ShowErrorsResponse> {
    let names: Vec<String> = if req.modules.is_empty() {
        e.graph().modules().into_iter().map(|m| m.name).collect()
    } else {
        let mut v = Vec::with_capacity(req.modules.len());
        for n in &req.modules {
            let n = lookup_name(n, "module name")?;
            e.graph().class_of(&n)?;
            v.push(n);
        }
        v
    };
    let mut modules = Vec::new();
    let kernel = if crate::offload::any() {
        crate::offload::kernel_counts(e).1
    } else {
        HashMap::new()
    };
    for name in names {
        let drops = drop_counts(e, &name, rates, req.include_zero, &kernel)?;
        if drops.is_empty() {
            continue;
        }
        modules.push(ext::ModuleDrops {
            mclass: e.graph().class_of(&name)?.name.to_string(),
            name,
            drops,
        });
    }
    Ok(ext::ShowErrorsResponse {
        error: None,
        modules,
        timestamp: super::now(),
    })
}

impl Reply for ext::ShowRuntimeResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

/// `ShowRuntime`: every module's (or the named ones') runtime since the last clear; then,
/// with `clear`, starts the counts afresh.
pub(super) fn show_runtime(
    e: &mut Engine,
    req: ext::ShowRuntimeRequest,
) -> Result<ext::ShowRuntimeResponse> {
    let mut wanted = Vec::with_capacity(req.modules.len());
    for n in &req.modules {
        let n = lookup_name(n, "module name")?;
        e.graph().class_of(&n)?;
        wanted.push(n);
    }
    let modules = e
        .graph()
        .runtime(true)
        .into_iter()
        .filter(|m| wanted.is_empty() || wanted.contains(&m.name))
        .map(|m| ext::ModuleRuntime {
            name: m.name,
            mclass: m.mclass.to_string(),
            workers: m
                .workers
                .into_iter()
                .map(|w| ext::WorkerRuntime {
                    wid: w.wid as u64,
                    calls: w.calls,
                    packets: w.packets,
                    sampled_calls: w.sampled_calls,
                    sampled_packets: w.sampled_packets,
                    sampled_cycles: w.sampled_cycles,
                })
                .collect(),
        })
        .collect();
    let res = ext::ShowRuntimeResponse {
        error: None,
        enabled: e.graph().runtime_enabled(),
        modules,
        seconds: e.graph().runtime_secs(),
        tsc_hz: bessemer_core::tsc::hz(),
        sample_period: bessemer_core::exec::RT_PERIOD,
        timestamp: super::now(),
    };
    if req.clear {
        e.clear_runtime()?;
    }
    Ok(res)
}

impl Reply for ext::ShowLatencyResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

/// `ShowLatency`: the histograms module `req.module` keeps (none: an empty list).
pub(super) fn show_latency(
    e: &Engine,
    req: ext::ShowLatencyRequest,
) -> Result<ext::ShowLatencyResponse> {
    let name = super::need_name(&req.module, "module name")?;
    e.graph().class_of(&name)?;
    let histograms = crate::observe::histograms_of(e, &name)
        .into_iter()
        .map(|h| ext::LatencyHistogram {
            name: h.name.to_string(),
            bounds_ns: h.bounds_ns,
            counts: h.counts,
            count: h.count,
            sum_ns: h.sum_ns,
            above_range: h.above_range,
            resolution_ns: h.resolution_ns,
            min_ns: h.min_ns,
            max_ns: h.max_ns,
            percentiles: h
                .percentiles
                .into_iter()
                .map(|(percentile, value_ns)| ext::Percentile {
                    percentile,
                    value_ns,
                })
                .collect(),
        })
        .collect();
    Ok(ext::ShowLatencyResponse {
        error: None,
        histograms,
    })
}

impl Reply for ext::TraceAddResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

impl Reply for ext::ShowTraceResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

impl Reply for ext::TracePacketResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

/// The modules `trace add AT` captures at: the module `at`, or else the PortInc and
/// QueueInc modules reading port `at` (their description starts with the port's name).
fn trace_points(e: &Engine, at: &str) -> Result<Vec<String>> {
    if e.graph().class_of(at).is_ok() {
        return Ok(vec![at.to_string()]);
    }
    if e.ports().get(at).is_err() {
        return Err(Error::not_found(format!(
            "no module or port named '{at}' to trace at"
        )));
    }
    let mods: Vec<String> = e
        .graph()
        .modules()
        .into_iter()
        .filter(|m| {
            matches!(m.mclass, "PortInc" | "QueueInc") && m.desc.split(':').next() == Some(at)
        })
        .map(|m| m.name)
        .collect();
    if mods.is_empty() {
        return Err(Error::not_found(format!(
            "port '{at}' has no PortInc or QueueInc module reading it: nothing to trace at"
        )));
    }
    Ok(mods)
}

/// `TraceAdd`: arms (or adds to) the packet trace.
pub(super) fn trace_add(
    e: &mut Engine,
    req: ext::TraceAddRequest,
) -> Result<ext::TraceAddResponse> {
    let at = super::need_name(&req.at, "module or port name")?;
    let modules = trace_points(e, &at)?;
    e.trace_add(&modules, req.count)?;
    Ok(ext::TraceAddResponse {
        error: None,
        modules,
    })
}

fn trace_headers(s: Option<bessemer_core::trace::Summary>) -> Option<ext::TraceHeaders> {
    s.map(|s| ext::TraceHeaders {
        len: s.len as u64,
        headers: s.headers,
    })
}

fn packet_trace(p: bessemer_core::trace::PacketTrace) -> ext::PacketTrace {
    ext::PacketTrace {
        id: p.id,
        worker: if p.wid == usize::MAX {
            -1
        } else {
            p.wid as i64
        },
        truncated: p.truncated,
        hops: p
            .hops
            .into_iter()
            .map(|h| {
                let (end, end_detail) = h
                    .end
                    .as_ref()
                    .map(|e| e.parts())
                    .map_or((String::new(), String::new()), |(k, d)| (k.to_string(), d));
                ext::TraceHop {
                    module: h.module,
                    mclass: h.mclass.to_string(),
                    igate: h.igate.map_or(-1, i32::from),
                    ogates: h.ogates.into_iter().map(u32::from).collect(),
                    ns: h.ns,
                    before: trace_headers(h.before),
                    after: trace_headers(h.after),
                    metadata: h
                        .meta
                        .into_iter()
                        .map(|(name, value)| ext::TraceMetadata { name, value })
                        .collect(),
                    end,
                    end_detail,
                }
            })
            .collect(),
    }
}

/// `ShowTrace`: the packets traced so far, as records and as `show trace` prints them; with
/// `clear`, then removes the trace.
pub(super) fn show_trace(
    e: &mut Engine,
    req: ext::ShowTraceRequest,
) -> Result<ext::ShowTraceResponse> {
    let res = match e.trace_packets() {
        None => ext::ShowTraceResponse {
            text: "No packets in trace buffer\n".into(),
            ..Default::default()
        },
        Some((packets, points, remaining)) => ext::ShowTraceResponse {
            error: None,
            armed: true,
            text: if packets.is_empty() {
                "No packets in trace buffer\n".into()
            } else {
                bessemer_core::trace::render(&packets)
            },
            packets: packets.into_iter().map(packet_trace).collect(),
            points,
            remaining,
        },
    };
    if req.clear {
        e.trace_clear()?;
    }
    Ok(res)
}

/// Longest packet `TracePacket` takes (a jumbo frame).
const MAX_TRACE_PACKET_LEN: usize = 9_600;

/// `TracePacket`: one packet through the graph from a module, not sent (see
/// [`Engine::trace_packet`]).
pub(super) fn trace_packet(
    e: &mut Engine,
    req: ext::TracePacketRequest,
) -> Result<ext::TracePacketResponse> {
    let module = super::need_name(&req.module, "module name")?;
    e.graph().class_of(&module)?;
    if req.packet.len() < 14 || req.packet.len() > MAX_TRACE_PACKET_LEN {
        return Err(Error::invalid(format!(
            "the packet has {} bytes; a dry run takes 14 (an Ethernet header) to \
             {MAX_TRACE_PACKET_LEN}",
            req.packet.len()
        )));
    }
    let p = e.trace_packet(&module, &req.packet)?;
    Ok(ext::TracePacketResponse {
        error: None,
        text: bessemer_core::trace::render(std::slice::from_ref(&p)),
        packet: Some(packet_trace(p)),
    })
}

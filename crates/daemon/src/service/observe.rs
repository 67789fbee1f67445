//! `ShowErrors`: every module's drop counters by reason with their rates.

use std::collections::HashMap;

use bessemer_core::{Engine, Result};

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

//! `ShowErrors`: every module's drop counters by reason with their rates.

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
pub(super) fn drop_counts(
    e: &Engine,
    module: &str,
    rates: &DropRates,
    include_zero: bool,
) -> Result<Vec<ext::DropCount>> {
    Ok(drops_of(e, module)?
        .into_iter()
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
    for name in names {
        let drops = drop_counts(e, &name, rates, req.include_zero)?;
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

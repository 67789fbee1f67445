//! `PlanNic` (the extension service): the NIC planner of `bessemer_planner` served by the
//! daemon, answering as the `bessemer-planner` CLI does (`bessemer_planner::request`), so a
//! controller, the `bessemer` CLI and scripts reach it without a second tool. Given a port,
//! the pipeline specialised per queue is the one running behind it
//! (`bessemer_planner::pipeline`), not a demonstration.

use bessemer_core::{Engine, Error, Result};
use bessemer_planner::graph::ModelError;
use bessemer_planner::request::{self, SearchOptions};

use crate::bessemer::pb as ext;

fn invalid(e: ModelError) -> Error {
    Error::invalid(e.to_string())
}

fn or<T: PartialEq + Default>(v: T, default: T) -> T {
    if v == T::default() {
        default
    } else {
        v
    }
}

/// Answers one request: the model's PRG (`show`, `show-dot`) or a plan (`text`, `dot`,
/// `ethtool`: the commands that would apply it to the interface).
pub fn plan(e: &mut Engine, req: &ext::PlanNicRequest) -> Result<String> {
    let nic = or(req.nic.as_str(), "82599");
    let queues = u16::try_from(or(req.queues, 4))
        .map_err(|_| Error::invalid(format!("queues {}: 1 to 256", req.queues)))?;
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let (mut iface, mut netns) = (opt(&req.iface), opt(&req.netns));
    // The pipeline behind the port, read before planning so that a bad port or a pipeline
    // the planner cannot model is reported first.
    let view = match req.port.as_str() {
        "" => None,
        port => Some(crate::offload::pipeline_view(e, port)?),
    };
    if let (Some(v), "ethtool", None) = (&view, nic, &iface) {
        let info = &v.ports[&v.port];
        if info.ifname.is_empty() {
            return Err(Error::invalid(format!(
                "port '{}' ({}) has no interface to read; give iface",
                v.port, info.driver
            )));
        }
        iface = Some(info.ifname.clone());
        netns = opt(&info.netns);
    }
    let m = request::model(nic, queues, iface.as_deref(), netns.as_deref()).map_err(invalid)?;
    let format = or(req.format.as_str(), "text");
    match format {
        "show" => return Ok(request::show(m.as_ref(), false)),
        "show-dot" => return Ok(request::show(m.as_ref(), true)),
        "text" | "dot" | "ethtool" => {}
        other => {
            return Err(Error::invalid(format!(
                "format {other:?}: text, dot, show, show-dot or ethtool"
            )))
        }
    }
    let hp_queues = u16::try_from(or(req.hp_queues, 1))
        .map_err(|_| Error::invalid(format!("hp_queues {}", req.hp_queues)))?;
    let cost = request::policy(
        or(req.policy.as_str(), "balance"),
        hp_queues,
        or(req.hp_penalty, 10.0),
    )
    .map_err(invalid)?;
    let text = req.flows.join("\n");
    let given = (!req.flows.is_empty()).then_some((text.as_str(), "flows"));
    let generate = (req.generate > 0).then_some(req.generate as usize);
    let flows = request::flows(
        given,
        generate,
        or(req.seed, 1),
        req.hp_every as usize,
        req.bw,
    )
    .map_err(invalid)?;
    let o = SearchOptions {
        rss_off: req.rss_off,
        ..SearchOptions::default()
    };
    let t = std::time::Instant::now();
    let p = request::search(m.as_ref(), cost.as_ref(), &flows, &o).map_err(invalid)?;
    let took_ms = t.elapsed().as_secs_f64() * 1e3;
    if format == "ethtool" {
        if nic != "ethtool" {
            return Err(Error::invalid("format ethtool needs nic ethtool"));
        }
        let caps = bessemer_planner::ethtool::read_interface(
            iface.as_deref().unwrap_or_default(),
            netns.as_deref(),
        )
        .map_err(invalid)?;
        let cmds = bessemer_planner::ethtool::commands(&caps, &p.cfg).map_err(invalid)?;
        return Ok(cmds.iter().map(|c| format!("{c}\n")).collect());
    }
    let lpg = match &view {
        Some(v) => bessemer_planner::pipeline::lpg(v).map_err(invalid)?,
        None => request::demo_for(&flows),
    };
    if format == "dot" {
        request::plan_dot(m.as_ref(), &p, &lpg).map_err(invalid)
    } else {
        request::plan_text(m.as_ref(), cost.as_ref(), &p, &flows, &lpg, took_ms).map_err(invalid)
    }
}

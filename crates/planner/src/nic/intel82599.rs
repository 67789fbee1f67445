//! The Intel 82599 model.

use crate::graph::{Dest, Graph, ModelError};
use crate::pred::{Conj, Field, Header, ETH_IPV4};

use super::{
    check_dest, check_limits, check_rss, exact_match, limit_changes, match_fields, only_five,
    rss_lookup, skeleton, Action, Change, Filter, FilterKind, FlowSpec, NicConfig, NicModel, FIVE,
};

/// Intel 82599: 128 ordered 5-tuple filters, Flow Director perfect filters sharing one
/// global mask (used only once the 5-tuple filters are full), RSS with a 128-entry
/// indirection table, and per-TX-queue rate limiters.
#[derive(Clone, Debug)]
pub struct Intel82599 {
    /// RX queues in use.
    pub queues: u16,
}

/// 5-tuple filters of the 82599.
pub const I82599_5T: usize = 128;
/// Flow Director perfect-match filters of the 82599.
pub const I82599_FDIR: usize = 8192;
/// RX (and TX) queues of the 82599.
pub const I82599_QUEUES: u16 = 128;
/// The 82599's link: 10 GbE.
pub const I82599_LINK_MBPS: u32 = 10_000;
/// The lowest rate the 82599's per-queue TX rate limiter takes, Mb/s. Its register
/// (RTTBCNRC) holds the rate factor link speed / rate with a 10-bit integer part, so at
/// 10 Gb/s a queue can be limited to about 9.8 Mb/s at the least; the ixgbe driver refuses
/// rates below 10 Mb/s or above the link speed. The model's range: 10 to 10 000 Mb/s.
pub const I82599_RATE_MIN_MBPS: u32 = 10;

impl Intel82599 {
    /// The Flow Director masks the oracle offers for the first FDir filter (Fig. 5.2): the
    /// full 5-tuple, or protocol + destination.
    pub fn fdir_masks() -> [&'static [Field]; 2] {
        [&FIVE, &[Field::IpProto, Field::DstIp, Field::DstPort]]
    }
}

impl NicModel for Intel82599 {
    fn name(&self) -> String {
        "82599".into()
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn hw_rate_limiters(&self) -> bool {
        true
    }
    fn link_mbps(&self) -> Option<u32> {
        Some(I82599_LINK_MBPS)
    }
    fn rate_limit_range(&self) -> (u32, u32) {
        (I82599_RATE_MIN_MBPS, I82599_LINK_MBPS)
    }
    fn unconfigured(&self) -> Graph {
        skeleton("e10kPRG", self.queues, &["5tuple", "fdir"], true)
    }
    fn table_of(&self, kind: FilterKind) -> Result<&'static str, ModelError> {
        match kind {
            FilterKind::FiveTuple => Ok("5tuple"),
            FilterKind::FlowDirector => Ok("fdir"),
            k => Err(ModelError::Constraint(format!(
                "82599 has no {} filters",
                k.short()
            ))),
        }
    }
    fn check(&self, cfg: &NicConfig) -> Result<(), ModelError> {
        if self.queues > I82599_QUEUES {
            return Err(ModelError::Constraint(format!(
                "{} queues (the 82599 has {I82599_QUEUES})",
                self.queues
            )));
        }
        check_rss(cfg, self.queues, 128)?;
        check_limits(self, cfg)?;
        let (mut n5, mut nf, mut mask) = (0, 0, None);
        for f in &cfg.filters {
            only_five(f)?;
            check_dest(f, self.queues, false)?;
            match f.kind {
                FilterKind::FiveTuple => {
                    n5 += 1;
                    if FIVE.iter().any(|x| {
                        let m = f.matcher.m[x.index()];
                        m != 0 && m != x.full_mask()
                    }) {
                        return Err(ModelError::Constraint(format!(
                            "5-tuple filter {f}: each field is matched fully or not at all"
                        )));
                    }
                }
                FilterKind::FlowDirector => {
                    nf += 1;
                    match mask {
                        None => mask = Some(f.matcher.m),
                        Some(m) if m != f.matcher.m => {
                            return Err(ModelError::Constraint(format!(
                                "Flow Director filter {f}: all FDir filters share one global mask"
                            )))
                        }
                        _ => {}
                    }
                }
                _ => self.table_of(f.kind).map(|_| ())?,
            }
        }
        if n5 > I82599_5T || nf > I82599_FDIR {
            return Err(ModelError::Constraint(format!(
                "{n5} 5-tuple filters (max {I82599_5T}), {nf} FDir filters (max {I82599_FDIR})"
            )));
        }
        Ok(())
    }
    fn semantic(&self, cfg: &NicConfig, h: &Header) -> Dest {
        if h.get(Field::EtherType) != ETH_IPV4 {
            return Dest::Queue(0);
        }
        for kind in [FilterKind::FiveTuple, FilterKind::FlowDirector] {
            for f in cfg.filters.iter().filter(|f| f.kind == kind) {
                if f.matcher.eval(h) {
                    return f.dest;
                }
            }
        }
        rss_lookup(cfg, h)
    }
    fn oracle(&self, cfg: &NicConfig, flow: &FlowSpec) -> Vec<Change> {
        let n5 = cfg
            .filters
            .iter()
            .filter(|f| f.kind == FilterKind::FiveTuple)
            .count();
        let fdir: Vec<&Filter> = cfg
            .filters
            .iter()
            .filter(|f| f.kind == FilterKind::FlowDirector)
            .collect();
        let h = &flow.header;
        let mut matchers: Vec<(FilterKind, Conj)> = Vec::new();
        if n5 < I82599_5T {
            matchers.push((FilterKind::FiveTuple, exact_match(h)));
            matchers.push((
                FilterKind::FiveTuple,
                match_fields(h, &[Field::IpProto, Field::DstIp, Field::DstPort]),
            ));
        } else if fdir.len() < I82599_FDIR {
            match fdir.first() {
                Some(f0) => {
                    let mut c = exact_match(h);
                    for i in 0..c.m.len() {
                        c.m[i] = f0.matcher.m[i];
                        c.v[i] &= c.m[i];
                    }
                    if !fdir.iter().any(|f| f.matcher == c) {
                        matchers.push((FilterKind::FlowDirector, c));
                    }
                }
                None => {
                    for fs in Self::fdir_masks() {
                        matchers.push((FilterKind::FlowDirector, match_fields(h, fs)));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (kind, matcher) in matchers {
            for q in 0..self.queues {
                let base = vec![Action::AddFilter(Filter {
                    kind,
                    matcher,
                    dest: Dest::Queue(q),
                })];
                out.extend(limit_changes(self, cfg, flow, q, base));
            }
        }
        out
    }
    fn config_space(&self) -> Vec<String> {
        vec![
            format!("C5tuple: <,{I82599_5T}> (proto, sip, dip, sport, dport each exact or *, queue), ordered"),
            format!("Cfdir: <,{I82599_FDIR}> (masked 5-tuple, queue), one global mask for all entries"),
            "CRSS: 128-entry indirection table -> queue".into(),
            format!("CTxRateLimiterN: rate {I82599_RATE_MIN_MBPS} to {I82599_LINK_MBPS} Mb/s or none, per TX queue (link: {I82599_LINK_MBPS} Mb/s)"),
        ]
    }
}

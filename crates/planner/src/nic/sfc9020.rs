//! The Solarflare SFC9020 model.

use crate::graph::{Dest, Graph, ModelError};
use crate::pred::{Field, Header, ETH_IPV4};

use super::{
    check_dest, check_limits, check_rss, exact_match, limit_changes, match_fields, only_five,
    rss_lookup, skeleton, Action, Change, Filter, FilterKind, FlowSpec, NicConfig, NicModel, FIVE,
};

/// Solarflare SFC9020: full-match and wildcard filters (wildcards only on the source
/// address and port), the most specific filter winning, RSS, no hardware rate limiters.
#[derive(Clone, Debug)]
pub struct Sfc9020 {
    /// RX queues in use.
    pub queues: u16,
}

/// Filter entries of the SFC9020 model (the multiplicity of the public Dragonet PRG).
pub const SFC_FILTERS: usize = 4048;
/// The SFC9020's link: 10 GbE.
pub const SFC_LINK_MBPS: u32 = 10_000;

impl NicModel for Sfc9020 {
    fn name(&self) -> String {
        "sfc9020".into()
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn hw_rate_limiters(&self) -> bool {
        false
    }
    fn link_mbps(&self) -> Option<u32> {
        Some(SFC_LINK_MBPS)
    }
    fn unconfigured(&self) -> Graph {
        // The full table precedes the wildcard table: that chain order is "most specific
        // wins" (a packet both match goes by the full filter).
        skeleton("sfcPRG", self.queues, &["sffull", "sfwild"], false)
    }
    fn table_of(&self, kind: FilterKind) -> Result<&'static str, ModelError> {
        match kind {
            FilterKind::SfFull => Ok("sffull"),
            FilterKind::SfWild => Ok("sfwild"),
            k => Err(ModelError::Constraint(format!(
                "SFC9020 has no {} filters",
                k.short()
            ))),
        }
    }
    fn check(&self, cfg: &NicConfig) -> Result<(), ModelError> {
        check_rss(cfg, self.queues, 128)?;
        check_limits(self, cfg)?;
        if cfg.filters.len() > SFC_FILTERS {
            return Err(ModelError::Constraint(format!(
                "{} filters (max {SFC_FILTERS})",
                cfg.filters.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &cfg.filters {
            only_five(f)?;
            check_dest(f, self.queues, false)?;
            let ok = match f.kind {
                FilterKind::SfFull => f.matcher.is_exact_on(&FIVE),
                FilterKind::SfWild => {
                    f.matcher
                        .is_exact_on(&[Field::IpProto, Field::DstIp, Field::DstPort])
                        && f.matcher.m[Field::SrcIp.index()] == 0
                        && f.matcher.m[Field::SrcPort.index()] == 0
                }
                k => return self.table_of(k).map(|_| ()),
            };
            if !ok {
                return Err(ModelError::Constraint(format!(
                    "filter {f}: SFC9020 wildcards only the source address and port"
                )));
            }
            if !seen.insert((f.kind, f.matcher)) {
                return Err(ModelError::Constraint(format!("filter {f}: duplicate key")));
            }
        }
        Ok(())
    }
    fn semantic(&self, cfg: &NicConfig, h: &Header) -> Dest {
        if h.get(Field::EtherType) != ETH_IPV4 {
            return Dest::Queue(0);
        }
        // Hash-table lookups: the full key first, then the key without source.
        let full = exact_match(h);
        if let Some(f) = cfg
            .filters
            .iter()
            .find(|f| f.kind == FilterKind::SfFull && f.matcher == full)
        {
            return f.dest;
        }
        let wild = match_fields(h, &[Field::IpProto, Field::DstIp, Field::DstPort]);
        if let Some(f) = cfg
            .filters
            .iter()
            .find(|f| f.kind == FilterKind::SfWild && f.matcher == wild)
        {
            return f.dest;
        }
        rss_lookup(cfg, h)
    }
    fn oracle(&self, cfg: &NicConfig, flow: &FlowSpec) -> Vec<Change> {
        if cfg.filters.len() >= SFC_FILTERS {
            return vec![];
        }
        let h = &flow.header;
        let mut out = Vec::new();
        let full = exact_match(h);
        let wild = match_fields(h, &[Field::IpProto, Field::DstIp, Field::DstPort]);
        for (kind, matcher) in [(FilterKind::SfFull, full), (FilterKind::SfWild, wild)] {
            if cfg
                .filters
                .iter()
                .any(|f| f.kind == kind && f.matcher == matcher)
            {
                continue;
            }
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
            format!("Csffull: <,{SFC_FILTERS}> (proto, sip, dip, sport, dport exact, queue), hash table"),
            "Csfwild: same table, (proto, dip, dport exact; sip, sport wildcard), below full matches".into(),
            "CRSS: 128-entry indirection table -> queue".into(),
            format!("rate limits: none in hardware (software token bucket per queue, 1 to {SFC_LINK_MBPS} Mb/s; link: {SFC_LINK_MBPS} Mb/s)"),
        ]
    }
}

//! The generic NIC model described by its ethtool capabilities.

use crate::graph::{Dest, Graph, ModelError};
use crate::pred::{Field, Header, ETH_IPV4};

use super::{
    check_dest, check_limits, check_rss, exact_match, limit_changes, only_five, rss_lookup,
    skeleton, spread, Action, Change, Filter, FilterKind, FlowSpec, NicConfig, NicModel,
};

/// A generic NIC described by its ethtool capabilities: RSS plus ordered ntuple rules with
/// arbitrary masks, and per-TX-queue rate limiters where the driver takes `tx_maxrate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EthtoolNic {
    /// Interface name.
    pub iface: String,
    /// RX queues (channels).
    pub queues: u16,
    /// Indirection table size (0: no RSS table reported).
    pub rss_size: usize,
    /// ntuple filters on.
    pub ntuple: bool,
    /// ntuple rule slots assumed.
    pub ntuple_rules: usize,
    /// The driver sets per-TX-queue rates (sysfs `queues/tx-N/tx_maxrate`).
    pub tx_maxrate: bool,
    /// The link's speed in Mb/s (sysfs `speed`), when the driver reports one.
    pub link_mbps: Option<u32>,
}

impl NicModel for EthtoolNic {
    fn name(&self) -> String {
        format!("ethtool:{}", self.iface)
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn hw_rate_limiters(&self) -> bool {
        self.tx_maxrate
    }
    fn link_mbps(&self) -> Option<u32> {
        self.link_mbps
    }
    fn initial_config(&self) -> NicConfig {
        NicConfig {
            filters: vec![],
            rss: if self.rss_size > 0 {
                spread(self.queues, self.rss_size)
            } else {
                vec![]
            },
            limits: vec![None; self.queues as usize],
        }
    }
    fn unconfigured(&self) -> Graph {
        let tables: &[&str] = if self.ntuple { &["ntuple"] } else { &[] };
        skeleton(
            &format!("ethtoolPRG:{}", self.iface),
            self.queues,
            tables,
            self.tx_maxrate,
        )
    }
    fn table_of(&self, kind: FilterKind) -> Result<&'static str, ModelError> {
        match kind {
            FilterKind::Ntuple if self.ntuple => Ok("ntuple"),
            k => Err(ModelError::Constraint(format!(
                "{} has no {} filters (ntuple {})",
                self.iface,
                k.short(),
                if self.ntuple { "on" } else { "off" }
            ))),
        }
    }
    fn check(&self, cfg: &NicConfig) -> Result<(), ModelError> {
        check_rss(cfg, self.queues, self.rss_size)?;
        check_limits(self, cfg)?;
        if cfg.filters.len() > self.ntuple_rules {
            return Err(ModelError::Constraint(format!(
                "{} ntuple rules (max {})",
                cfg.filters.len(),
                self.ntuple_rules
            )));
        }
        for f in &cfg.filters {
            self.table_of(f.kind)?;
            only_five(f)?;
            check_dest(f, self.queues, true)?;
        }
        Ok(())
    }
    fn semantic(&self, cfg: &NicConfig, h: &Header) -> Dest {
        if h.get(Field::EtherType) != ETH_IPV4 {
            return Dest::Queue(0);
        }
        cfg.filters
            .iter()
            .find(|f| f.matcher.eval(h))
            .map(|f| f.dest)
            .unwrap_or_else(|| rss_lookup(cfg, h))
    }
    fn oracle(&self, cfg: &NicConfig, flow: &FlowSpec) -> Vec<Change> {
        if !self.ntuple || cfg.filters.len() >= self.ntuple_rules {
            return vec![];
        }
        let mut out = Vec::new();
        for q in 0..self.queues {
            let base = vec![Action::AddFilter(Filter {
                kind: FilterKind::Ntuple,
                matcher: exact_match(&flow.header),
                dest: Dest::Queue(q),
            })];
            if self.tx_maxrate {
                out.extend(limit_changes(self, cfg, flow, q, base));
            } else {
                out.push(base);
            }
        }
        out
    }
    fn config_space(&self) -> Vec<String> {
        vec![
            format!(
                "Cntuple: <,{}> (masked 5-tuple, queue or drop), ordered by location{}",
                self.ntuple_rules,
                if self.ntuple {
                    ""
                } else {
                    " (ntuple off: absent)"
                }
            ),
            format!("CRSS: {}-entry indirection table -> queue", self.rss_size),
            if self.tx_maxrate {
                let (lo, hi) = self.rate_limit_range();
                format!("CTxRate: per TX queue rate (tx_maxrate), {lo} to {hi} Mb/s")
            } else {
                "rate limits: none in hardware (the driver takes no tx_maxrate)".into()
            },
        ]
    }
}

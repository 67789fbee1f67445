//! The XDP (AF_XDP port) model.

use crate::graph::{Dest, Graph, ModelError, Node, NodeId, NodeKind, Port};
use crate::pred::{Conj, Field, Header, Term, ETH_IPV4};

use super::{
    check_limits, exact_match, only_five, Action, Change, Filter, FilterKind, FlowSpec, NicConfig,
    NicModel, FIVE,
};

/// XDP on Bessemer's AF_XDP port as a programmable NIC (seed note §8.2 `CXdpProg`): the
/// program is a fixed template (parse IPv4, look the 5-tuple up in a hash map, else redirect
/// to the XSK of the RX queue the packet came in on) and its configuration is the map.
#[derive(Clone, Debug)]
pub struct XdpPort {
    /// XSK sockets (one per queue).
    pub queues: u16,
    /// Capacity of the 5-tuple map.
    pub map_entries: usize,
}

impl NicModel for XdpPort {
    fn name(&self) -> String {
        "xdp".into()
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn hw_rate_limiters(&self) -> bool {
        false
    }
    /// The port's interface is not part of the model, so neither is its speed.
    fn link_mbps(&self) -> Option<u32> {
        None
    }
    fn initial_config(&self) -> NicConfig {
        NicConfig {
            filters: vec![],
            rss: vec![],
            limits: vec![None; self.queues as usize],
        }
    }
    fn unconfigured(&self) -> Graph {
        let mut g = Graph::new("xdpPRG");
        let sinks: Vec<NodeId> = (0..self.queues)
            .map(|q| {
                g.add(Node::new(
                    &format!("Xsk{q}"),
                    NodeKind::Sink(Dest::Queue(q)),
                ))
            })
            .collect();
        let ors: Vec<NodeId> = (0..self.queues)
            .map(|q| {
                g.add(Node::new(&format!("OR:Q{q}"), NodeKind::Or).port(Port::new(
                    "true",
                    Term::truth(),
                    vec![sinks[q as usize]],
                )))
            })
            .collect();
        let drop = g.add(Node::new("Drop", NodeKind::Sink(Dest::Drop)));
        let kernel = g.add(Node::new("Kernel", NodeKind::Sink(Dest::Kernel)));
        // The default action: XSK of the arrival queue; queues without an XSK pass.
        let mut by_rxq = Node::new("XskByRxQueue", NodeKind::F);
        let all: Vec<Conj> = (0..self.queues as u32)
            .map(|q| Conj::eq(Field::RxQueue, q))
            .collect();
        for q in 0..self.queues {
            by_rxq.ports.push(Port::new(
                &format!("rxq{q}"),
                Term::of(Conj::eq(Field::RxQueue, q as u32)),
                vec![ors[q as usize]],
            ));
        }
        by_rxq.ports.push(Port::new(
            "noxsk",
            Term {
                pos: Conj::TRUE,
                neg: all,
            },
            vec![kernel],
        ));
        let by_rxq = g.add(by_rxq);
        let mut dests = ors.clone();
        dests.extend([drop, kernel]);
        let map = g.add(
            Node::new(
                "CXdpMap",
                NodeKind::Config {
                    table: "xdpmap".into(),
                    default_port: 1,
                },
            )
            .port(Port::new("actions", Term::truth(), dests))
            .port(Port::new("default", Term::truth(), vec![by_rxq])),
        );
        // No RSS here (the underlying NIC already chose the queue): an RSS c-node with an
        // empty table keeps the common configured_prg path.
        g.add(
            Node::new(
                "CRSS",
                NodeKind::Config {
                    table: "rss".into(),
                    default_port: 0,
                },
            )
            .port(Port::new("queues", Term::truth(), vec![ors[0]])),
        );
        let ipv4 = Conj::eq(Field::EtherType, ETH_IPV4);
        let other = Port::new("other", Term::not(ipv4), vec![by_rxq]);
        let parse = g.add(
            Node::new("XdpParseIPv4", NodeKind::F)
                .port(Port::new("ipv4", Term::of(ipv4), vec![map]))
                .port(other),
        );
        g.root = g.add(Node::new("RxIn", NodeKind::F).port(Port::new(
            "out",
            Term::truth(),
            vec![parse],
        )));
        g
    }
    fn table_of(&self, kind: FilterKind) -> Result<&'static str, ModelError> {
        match kind {
            FilterKind::XdpEntry => Ok("xdpmap"),
            k => Err(ModelError::Constraint(format!(
                "the XDP port has no {} filters",
                k.short()
            ))),
        }
    }
    fn check(&self, cfg: &NicConfig) -> Result<(), ModelError> {
        if !cfg.rss.is_empty() {
            return Err(ModelError::Constraint(
                "the XDP port has no RSS table".into(),
            ));
        }
        check_limits(self, cfg)?;
        if cfg.filters.len() > self.map_entries {
            return Err(ModelError::Constraint(format!(
                "{} map entries (max {})",
                cfg.filters.len(),
                self.map_entries
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &cfg.filters {
            self.table_of(f.kind)?;
            only_five(f)?;
            if !f.matcher.is_exact_on(&FIVE) {
                return Err(ModelError::Constraint(format!(
                    "map entry {f}: keys are exact 5-tuples"
                )));
            }
            if !seen.insert(f.matcher) {
                return Err(ModelError::Constraint(format!(
                    "map entry {f}: duplicate key"
                )));
            }
            if let Dest::Queue(q) = f.dest {
                if q >= self.queues {
                    return Err(ModelError::Constraint(format!("map entry {f}: no XSK {q}")));
                }
            }
        }
        Ok(())
    }
    fn semantic(&self, cfg: &NicConfig, h: &Header) -> Dest {
        if h.get(Field::EtherType) == ETH_IPV4 {
            let key = exact_match(h);
            if let Some(f) = cfg.filters.iter().find(|f| f.matcher == key) {
                return f.dest;
            }
        }
        let q = h.get(Field::RxQueue);
        if q < self.queues as u32 {
            Dest::Queue(q as u16)
        } else {
            Dest::Kernel
        }
    }
    fn oracle(&self, cfg: &NicConfig, flow: &FlowSpec) -> Vec<Change> {
        let key = exact_match(&flow.header);
        if cfg.filters.len() >= self.map_entries || cfg.filters.iter().any(|f| f.matcher == key) {
            return vec![];
        }
        (0..self.queues)
            .map(|q| {
                vec![Action::AddFilter(Filter {
                    kind: FilterKind::XdpEntry,
                    matcher: key,
                    dest: Dest::Queue(q),
                })]
            })
            .collect()
    }
    fn config_space(&self) -> Vec<String> {
        vec![
            format!(
                "CXdpMap: BPF hash map <,{}> exact 5-tuple -> XSK n | XDP_DROP | XDP_PASS",
                self.map_entries
            ),
            "default: redirect to the XSK of the arrival queue (xskmap), XDP_PASS without one"
                .into(),
        ]
    }
}

//! The LPG of a running pipeline: the classifiers behind a port (the offload's [`View`],
//! which the daemon reads from the modules' own commands) as the embedding's [`Lpg`], so a
//! NIC plan specialises the pipeline the user actually runs rather than a demonstration.
//!
//! ExactMatch, WildcardMatch and IPLookup become LPG modules; any other module ends the
//! classification there and is an output named after it (a PortOut, a rewrite, a queue);
//! Sink, a drop gate and an unconnected gate drop. Fields are packet bytes, so only those
//! the planner's predicates name can be modelled: the EtherType (offset 12, 2 bytes), the
//! IPv4 protocol (23, 1), addresses (26 and 30, 4) and ports (34 and 36, 2) of an untagged
//! frame; anything else is an error that names the module and the field.

use crate::embed::{Classifier, Lpg, LpgModule, Target};
use crate::graph::ModelError;
use crate::offload::{Field as KeyField, Node, View};
use crate::pred::{Conj, Field};
use std::collections::HashMap;

/// The planner's field for packet bytes `offset..offset + size`.
fn field_at(offset: usize, size: usize) -> Option<Field> {
    Some(match (offset, size) {
        (12, 2) => Field::EtherType,
        (23, 1) => Field::IpProto,
        (26, 4) => Field::SrcIp,
        (30, 4) => Field::DstIp,
        (34, 2) => Field::SrcPort,
        (36, 2) => Field::DstPort,
        _ => return None,
    })
}

fn fields_of(name: &str, class: &str, keys: &[KeyField]) -> Result<Vec<Field>, ModelError> {
    keys.iter()
        .map(|k| {
            let off = k.offset.ok_or_else(|| {
                ModelError::Input(format!(
                    "{class} '{name}' matches a metadata attribute: the planner models packet fields only"
                ))
            })?;
            field_at(off, k.size).ok_or_else(|| {
                ModelError::Input(format!(
                    "{class} '{name}': the field at offset {off} ({} bytes) is none the planner models (EtherType at 12, protocol at 23, addresses at 26 and 30, ports at 34 and 36)",
                    k.size
                ))
            })
        })
        .collect()
}

fn be(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0u32, |a, b| (a << 8) | *b as u32)
}

/// Builds the LPG. Gate numbers of the modules are kept; one more gate per module stands
/// for "dropped" (a rule's drop gate, a missing default).
struct Builder<'a> {
    view: &'a View,
    index: HashMap<String, usize>,
    modules: Vec<Option<LpgModule>>,
}

impl Builder<'_> {
    fn is_classifier(&self, name: &str) -> bool {
        matches!(
            self.view.modules.get(name).map(|m| &m.node),
            Some(Node::ExactMatch { .. } | Node::WildcardMatch { .. } | Node::IpLookup { .. })
        )
    }

    /// The LPG index of classifier `name`, converting it (and what it reaches) first.
    fn module(&mut self, name: &str, depth: usize) -> Result<usize, ModelError> {
        if let Some(i) = self.index.get(name) {
            return Ok(*i);
        }
        if depth > 64 {
            return Err(ModelError::Input(format!(
                "the pipeline after the port is more than 64 classifiers deep at '{name}'"
            )));
        }
        let i = self.modules.len();
        self.index.insert(name.to_string(), i);
        self.modules.push(None);
        let m = &self.view.modules[name];
        let class = m.class.as_str();
        let (classifier, gates_used, default_gate) = match &m.node {
            Node::ExactMatch {
                fields,
                rules,
                default_gate,
                ..
            } => {
                let fs = fields_of(name, class, fields)?;
                let full = fields
                    .iter()
                    .zip(&fs)
                    .all(|(k, f)| be(&k.mask) & f.full_mask() == f.full_mask());
                let gates: Vec<Option<u16>> = rules.iter().map(|r| r.gate).collect();
                let c = if full {
                    Classifier::ExactMatch {
                        fields: fs.clone(),
                        rules: rules
                            .iter()
                            .map(|r| (r.fields.iter().map(|v| be(v)).collect(), 0))
                            .collect(),
                    }
                } else {
                    // Masked keys: a rule is a masked match; keys are unique after masking,
                    // so no two rules match one packet and priorities do not matter.
                    let mut ws = Vec::new();
                    for r in rules {
                        let mut c = Conj::TRUE;
                        for ((v, k), f) in r.fields.iter().zip(fields).zip(&fs) {
                            let mask = be(&k.mask) & f.full_mask();
                            c = c.with(*f, be(v) & mask, mask).ok_or_else(|| {
                                ModelError::Input(format!(
                                    "{class} '{name}': a rule matches nothing"
                                ))
                            })?;
                        }
                        ws.push((c, 0, 0));
                    }
                    Classifier::WildcardMatch { rules: ws }
                };
                (c, gates, *default_gate)
            }
            Node::WildcardMatch {
                fields,
                rules,
                default_gate,
                ..
            } => {
                let fs = fields_of(name, class, fields)?;
                let mut ws = Vec::new();
                for r in rules {
                    let mut c = Conj::TRUE;
                    for ((v, mk), f) in r.values.iter().zip(&r.masks).zip(&fs) {
                        let mask = be(mk) & f.full_mask();
                        c = c.with(*f, be(v) & mask, mask).ok_or_else(|| {
                            ModelError::Input(format!("{class} '{name}': a rule matches nothing"))
                        })?;
                    }
                    ws.push((c, r.priority, 0));
                }
                let gates = rules.iter().map(|r| r.gate).collect();
                (
                    Classifier::WildcardMatch { rules: ws },
                    gates,
                    *default_gate,
                )
            }
            Node::IpLookup {
                routes,
                default_gate,
            } => (
                Classifier::IpLookup {
                    routes: routes.iter().map(|r| (r.prefix, r.len, 0)).collect(),
                },
                routes.iter().map(|r| r.gate).collect(),
                *default_gate,
            ),
            _ => unreachable!("only classifiers are converted"),
        };
        let highest = gates_used
            .iter()
            .chain(std::iter::once(&default_gate))
            .flatten()
            .copied()
            .max()
            .map_or(0, |g| g as usize + 1);
        let dropped = highest; // the extra gate
        let gate_index = |g: Option<u16>| g.map_or(dropped, |g| g as usize);
        let mut classifier = classifier;
        match &mut classifier {
            Classifier::ExactMatch { rules, .. } => {
                for (r, g) in rules.iter_mut().zip(&gates_used) {
                    r.1 = gate_index(*g);
                }
            }
            Classifier::WildcardMatch { rules } => {
                for (r, g) in rules.iter_mut().zip(&gates_used) {
                    r.2 = gate_index(*g);
                }
            }
            Classifier::IpLookup { routes } => {
                for (r, g) in routes.iter_mut().zip(&gates_used) {
                    r.2 = gate_index(*g);
                }
            }
        }
        let mut gates = Vec::with_capacity(highest + 1);
        for g in 0..highest {
            gates.push(self.target(m.ogates.get(&(g as u16)).map(String::as_str), depth)?);
        }
        gates.push(Target::Drop);
        self.modules[i] = Some(LpgModule {
            name: name.to_string(),
            classifier,
            default_gate: gate_index(default_gate),
            gates,
        });
        Ok(i)
    }

    /// Where a gate connected to `to` leads.
    fn target(&mut self, to: Option<&str>, depth: usize) -> Result<Target, ModelError> {
        let Some(to) = to else {
            return Ok(Target::Drop);
        };
        if self.is_classifier(to) {
            return Ok(Target::Module(self.module(to, depth + 1)?));
        }
        Ok(
            match self.view.modules.get(to).map(|m| (&m.node, &m.class)) {
                Some((Node::Sink, _)) => Target::Drop,
                Some((Node::PortOut { port }, _)) => Target::Out(format!("{to} (PortOut {port})")),
                Some((_, class)) => Target::Out(format!("{to} ({class})")),
                None => Target::Drop,
            },
        )
    }
}

/// The LPG of the classifiers behind the view's port. The port's PortInc modules (one per
/// queue) must all feed one module, which must be a classifier.
pub fn lpg(view: &View) -> Result<Lpg, ModelError> {
    let port = &view.port;
    let first = view.entries.first().ok_or_else(|| {
        ModelError::Input(format!("port '{port}' has no PortInc: nothing to plan for"))
    })?;
    if view.entries.iter().any(|e| e != first) {
        return Err(ModelError::Input(format!(
            "port '{port}''s queues feed different modules ({}): one pipeline per port is planned",
            view.entries.join(", ")
        )));
    }
    let mut b = Builder {
        view,
        index: HashMap::new(),
        modules: Vec::new(),
    };
    if !b.is_classifier(first) {
        let what = view.modules.get(first).map_or("nothing".to_string(), |m| {
            format!("{} ({})", first, m.class)
        });
        return Err(ModelError::Input(format!(
            "port '{port}' feeds {what}: the planner specialises pipelines that start with ExactMatch, WildcardMatch or IPLookup"
        )));
    }
    let root = b.module(first, 0)?;
    let lpg = Lpg {
        modules: b.modules,
        root,
    };
    lpg.validate()?;
    Ok(lpg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Outcome;
    use crate::offload::{Module, Route, Rule, WildRule};
    use crate::pred::Header;

    fn key(o: usize, n: usize) -> KeyField {
        KeyField {
            offset: Some(o),
            size: n,
            mask: vec![0xff; n],
        }
    }

    fn module(class: &str, node: Node, ogates: &[(u16, &str)]) -> Module {
        Module {
            class: class.into(),
            node,
            ogates: ogates.iter().map(|(g, m)| (*g, m.to_string())).collect(),
        }
    }

    /// p0 -> wm (dport 53 -> em, dport 80 prio 5 -> rt, else drop) ; em (dst 10.0.1.1
    /// udp -> out, other keys: default gate 1 -> nat) ; rt (10/8 -> out, 192.168/16 drop,
    /// miss -> sink).
    fn view() -> View {
        let mut v = View {
            port: "p0".into(),
            entries: vec!["wm".into(), "wm".into()],
            ..View::default()
        };
        let wm = Node::WildcardMatch {
            fields: vec![key(23, 1), key(36, 2)],
            has_values: false,
            rules: vec![
                WildRule {
                    values: vec![vec![17], vec![0, 53]],
                    masks: vec![vec![0xff], vec![0xff, 0xff]],
                    priority: 10,
                    gate: Some(0),
                },
                WildRule {
                    values: vec![vec![0], vec![0, 80]],
                    masks: vec![vec![0], vec![0xff, 0xff]],
                    priority: 5,
                    gate: Some(2),
                },
            ],
            default_gate: None,
        };
        let em = Node::ExactMatch {
            fields: vec![key(23, 1), key(30, 4)],
            has_values: false,
            rules: vec![Rule {
                fields: vec![vec![17], vec![10, 0, 1, 1]],
                gate: Some(0),
            }],
            default_gate: Some(1),
        };
        let rt = Node::IpLookup {
            routes: vec![
                Route {
                    prefix: 0x0a00_0000,
                    len: 8,
                    gate: Some(0),
                },
                Route {
                    prefix: 0xc0a8_0000,
                    len: 16,
                    gate: None,
                },
            ],
            default_gate: Some(3),
        };
        for (n, m) in [
            ("wm", module("WildcardMatch", wm, &[(0, "em"), (2, "rt")])),
            ("em", module("ExactMatch", em, &[(0, "out"), (1, "nat")])),
            ("rt", module("IPLookup", rt, &[(0, "out"), (3, "sink")])),
            (
                "out",
                module("PortOut", Node::PortOut { port: "p1".into() }, &[]),
            ),
            (
                "nat",
                module(
                    "NAT",
                    Node::Other {
                        class: "NAT".into(),
                    },
                    &[],
                ),
            ),
            ("sink", module("Sink", Node::Sink, &[])),
        ] {
            v.modules.insert(n.into(), m);
        }
        v
    }

    fn run(l: &Lpg, proto: u32, dip: u32, dport: u32) -> Outcome {
        l.run(&Header::ipv4(proto, 0x0a00_0009, dip, 1000, dport))
    }

    #[test]
    fn the_pipeline_behind_a_port_becomes_its_lpg() {
        let l = lpg(&view()).unwrap();
        assert_eq!(l.modules.iter().flatten().count(), 3);
        let out = Outcome::Out("out (PortOut p1)".into());
        // wm -> em: the service's flow leaves by the PortOut, another address goes to NAT.
        assert_eq!(run(&l, 17, 0x0a00_0101, 53), out);
        assert_eq!(
            run(&l, 17, 0x0a00_0102, 53),
            Outcome::Out("nat (NAT)".into())
        );
        // wm -> rt: routed, dropped by a drop route, missed into the Sink.
        assert_eq!(run(&l, 6, 0x0a07_0000, 80), out);
        assert!(matches!(run(&l, 6, 0xc0a8_0101, 80), Outcome::Drop(m) if m == "rt"));
        assert!(matches!(run(&l, 6, 0x0808_0808, 80), Outcome::Drop(_)));
        // No rule and no default gate: dropped at wm.
        assert!(matches!(run(&l, 6, 0x0a00_0101, 22), Outcome::Drop(m) if m == "wm"));
    }

    #[test]
    fn what_cannot_be_modelled_is_named() {
        let mut v = view();
        if let Node::ExactMatch { fields, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields[1] = key(40, 4);
        }
        let e = lpg(&v).unwrap_err().to_string();
        assert!(
            e.contains("ExactMatch 'em'") && e.contains("offset 40"),
            "{e}"
        );

        let mut v = view();
        v.entries = vec!["wm".into(), "em".into()];
        let e = lpg(&v).unwrap_err().to_string();
        assert!(e.contains("feed different modules"), "{e}");

        let mut v = view();
        v.entries = vec!["nat".into()];
        let e = lpg(&v).unwrap_err().to_string();
        assert!(e.contains("feeds nat (NAT)"), "{e}");

        let mut v = view();
        v.entries.clear();
        assert!(lpg(&v).unwrap_err().to_string().contains("no PortInc"));

        // A loop back to the first classifier is refused by the LPG's own check.
        let mut v = view();
        v.modules
            .get_mut("em")
            .unwrap()
            .ogates
            .insert(1, "wm".into());
        assert!(lpg(&v).is_err());
    }

    #[test]
    fn masked_exact_match_keys_become_masked_rules() {
        let mut v = view();
        if let Node::ExactMatch { fields, rules, .. } = &mut v.modules.get_mut("em").unwrap().node {
            fields[1].mask = vec![0xff, 0xff, 0xff, 0];
            rules[0].fields[1] = vec![10, 0, 1, 0];
        }
        let l = lpg(&v).unwrap();
        let out = Outcome::Out("out (PortOut p1)".into());
        assert_eq!(run(&l, 17, 0x0a00_0107, 53), out);
        assert_eq!(
            run(&l, 17, 0x0a00_0207, 53),
            Outcome::Out("nat (NAT)".into())
        );
    }
}

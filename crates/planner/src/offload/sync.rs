//! Keeping the kernel in step: a new plan becomes map operations against what is
//! installed, counter slots staying with their rules.

use super::*;
use std::collections::HashMap;

/// One change to the program's maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOp {
    Config([u8; CONFIG_BYTES]),
    /// Write rewrite program slot `slot` (the C `struct prog`).
    Prog {
        slot: u32,
        prog: [u8; PROG_BYTES],
    },
    Dev {
        slot: u32,
        ifindex: u32,
        netns: String,
    },
    /// Write BPF filter slot `slot` (the C `struct cbpf_prog`; the bank the configuration
    /// does not name yet).
    Filter {
        slot: u32,
        filter: Box<[u8; CBPF_BYTES]>,
    },
    /// Zero a counter slot before a new rule takes it.
    ResetCounter(u32),
    Put {
        key: RuleKey,
        action: [u8; ACTION_BYTES],
    },
    /// Remove a rule; the caller retires its counter slot's counts into `chain` (and the
    /// drop reason, if the rule's packets were dropped by the classifier) first.
    Delete {
        key: RuleKey,
        slot: u32,
        chain: Chain,
        drop: Option<(String, String)>,
    },
}

/// What the kernel's counts of `p` belong to: nothing when the packets go up to user space,
/// where the modules count them (adding them again would count them twice).
fn kernel_counted(p: &GatePlan) -> Counted {
    if p.action.kind == Kind::User {
        (Vec::new(), None)
    } else {
        (p.chain.clone(), p.drop.clone())
    }
}

/// What a counter slot's packets stand for: the chain they took and, for a drop by the
/// classifier, its (module, drop reason).
pub type Counted = (Chain, Option<(String, String)>);

/// Whether `p` needs a rewrite program that got no slot (its packets then go up, and the
/// modules count them).
fn progless(p: &GatePlan, progs: &HashMap<Vec<Op>, u32>) -> bool {
    p.action.kind != Kind::User
        && !p.action.rewrite.is_empty()
        && !progs.contains_key(&p.action.rewrite)
}

/// What is installed in the maps, for incremental syncs.
#[derive(Clone, Debug, Default)]
pub struct OffloadState {
    /// Rule key -> (counter slot, action bytes, what its packets count as).
    pub(super) rules: HashMap<RuleKey, (u32, [u8; ACTION_BYTES], Counted)>,
    free: Vec<u32>,
    next: u32,
    config: Option<[u8; CONFIG_BYTES]>,
    devs: Vec<(String, u32, String)>,
    /// Rewrite programs installed: program -> slot (from 1).
    progs: HashMap<Vec<Op>, u32>,
    /// The default action's chain (slot SLOT_DEFAULT).
    default_counted: Counted,
    /// BPF filters installed, and the bank of `cbpf` that holds them.
    filters: Vec<BpfFilter>,
    bank: u32,
}

impl OffloadState {
    pub fn new() -> OffloadState {
        OffloadState {
            next: FIRST_RULE_SLOT,
            ..OffloadState::default()
        }
    }

    /// The operations that turn what is installed into `plan`, in a safe order: devmap
    /// slots before rules that name them, deletions before puts (the map's capacity), the
    /// configuration last (it may turn the classifier on).
    pub fn sync(&mut self, plan: &Plan) -> Vec<MapOp> {
        let mut ops = Vec::new();
        for (slot, d) in plan.devs.iter().enumerate() {
            if self.devs.get(slot) != Some(d) {
                ops.push(MapOp::Dev {
                    slot: slot as u32,
                    ifindex: d.1,
                    netns: d.2.clone(),
                });
            }
        }
        self.devs = plan.devs.clone();
        // Rewrite programs keep their slots while in use; new ones take free slots before
        // any rule names them. A plan with more distinct programs than slots sends the rest
        // up (their actions become K_XSK below).
        let mut wanted: Vec<&Vec<Op>> = std::iter::once(&plan.default)
            .chain(plan.gates.values())
            .filter(|g| g.action.kind != Kind::User && !g.action.rewrite.is_empty())
            .map(|g| &g.action.rewrite)
            .collect();
        wanted.sort();
        wanted.dedup();
        // A slot freed here is not reused in the same sync: rules still naming it are only
        // rewritten after the new programs are in, and a packet must not see another
        // chain's program through them meanwhile.
        let mut used: Vec<u32> = self.progs.values().copied().collect();
        self.progs.retain(|p, _| wanted.contains(&p));
        for p in wanted {
            if self.progs.contains_key(p) {
                continue;
            }
            let Some(slot) = (1..PROG_SLOTS as u32).find(|s| !used.contains(s)) else {
                break;
            };
            used.push(slot);
            self.progs.insert(p.clone(), slot);
            ops.push(MapOp::Prog {
                slot,
                prog: prog_bytes(p),
            });
        }
        let progs = &self.progs;
        let bytes_of = |gp: &GatePlan, counter: u32, prio: u32| {
            if gp.action.rewrite.is_empty() || gp.action.kind == Kind::User {
                return gp.action.to_bytes(counter, 0, prio);
            }
            match progs.get(&gp.action.rewrite) {
                Some(s) => gp.action.to_bytes(counter, *s, prio),
                None => Action::user().to_bytes(counter, 0, prio),
            }
        };
        let want: HashMap<RuleKey, u16> = plan.rules.iter().map(|r| (r.0, r.1)).collect();
        let mut gone: Vec<RuleKey> = self
            .rules
            .keys()
            .filter(|k| !want.contains_key(*k))
            .copied()
            .collect();
        gone.sort();
        // BPF: the old filters run until the configuration names the new bank, and may
        // still pick a gate whose rule goes: its rule goes after the switch.
        let mut late = Vec::new();
        let dels = if plan.cls == Cls::Bpf {
            &mut late
        } else {
            &mut ops
        };
        for k in gone {
            let (slot, _, (chain, drop)) = self.rules.remove(&k).expect("present");
            dels.push(MapOp::Delete {
                key: k,
                slot,
                chain,
                drop,
            });
            self.free.push(slot);
        }
        for (k, g, prio) in &plan.rules {
            let gp = plan.gate(*g);
            let counted = if progless(gp, &self.progs) {
                (Vec::new(), None)
            } else {
                kernel_counted(gp)
            };
            match self.rules.get_mut(k) {
                Some((slot, bytes, old)) => {
                    let nb = bytes_of(gp, *slot, *prio);
                    if *bytes != nb || *old != counted {
                        *bytes = nb;
                        *old = counted;
                        ops.push(MapOp::Put {
                            key: *k,
                            action: nb,
                        });
                    }
                }
                None => {
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.next += 1;
                        self.next - 1
                    });
                    let nb = bytes_of(gp, slot, *prio);
                    ops.push(MapOp::ResetCounter(slot));
                    ops.push(MapOp::Put {
                        key: *k,
                        action: nb,
                    });
                    self.rules.insert(*k, (slot, nb, counted));
                }
            }
        }
        let def_prog = if plan.default.action.rewrite.is_empty() {
            0
        } else {
            self.progs
                .get(&plan.default.action.rewrite)
                .copied()
                .unwrap_or(0)
        };
        if plan.cls == Cls::Bpf && plan.filters != self.filters {
            // The new filters go to the other bank; the configuration switches to it.
            self.bank ^= 1;
            for (i, f) in plan.filters.iter().enumerate() {
                ops.push(MapOp::Filter {
                    slot: self.bank * CBPF_FILTERS as u32 + i as u32,
                    filter: f.to_bytes(),
                });
            }
            self.filters = plan.filters.clone();
        }
        let mut cfg = plan.config_bytes(def_prog);
        cfg[400..404].copy_from_slice(&self.bank.to_ne_bytes());
        if def_prog == 0 && !plan.default.action.rewrite.is_empty() {
            // No program slot was left for it: the default goes up.
            cfg[8..32].copy_from_slice(&Action::user().to_bytes(SLOT_DEFAULT, 0, 0));
        }
        if self.config != Some(cfg) {
            ops.push(MapOp::Config(cfg));
            self.config = Some(cfg);
        }
        ops.extend(late);
        self.default_counted = if progless(&plan.default, &self.progs) {
            (Vec::new(), None)
        } else {
            kernel_counted(&plan.default)
        };
        ops
    }

    /// Every counter slot in use with the chain its packets would have taken in user
    /// space: the default slot and each rule's. A slot whose packets go up to user space
    /// has an empty chain: the modules count those packets themselves.
    pub fn slots(&self) -> Vec<(u32, Chain)> {
        self.counted()
            .into_iter()
            .map(|(s, (c, _))| (s, c))
            .collect()
    }

    /// As [`OffloadState::slots`], with the (module, drop reason) of slots whose packets
    /// the classifier dropped.
    pub fn counted(&self) -> Vec<(u32, Counted)> {
        let mut v = vec![(SLOT_DEFAULT, self.default_counted.clone())];
        v.extend(self.rules.values().map(|(s, _, c)| (*s, c.clone())));
        v
    }

    /// Rules installed.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

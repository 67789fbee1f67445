//! The check of the graph's bookkeeping against a computation from scratch (for tests).

use std::collections::{BTreeSet, HashMap};

use super::derive::Scratch;
use super::Pipeline;
use crate::metadata::{assign_offsets, AttrOffset, MetaModule};
use crate::sched::TaskId;

impl Pipeline {
    /// Checks the graph's bookkeeping and everything derived from it against a computation
    /// from scratch over the whole graph (metadata offsets and warnings, input-gate
    /// priorities, worker placement from `task_worker`, output gates' flags and pointers);
    /// names the first difference. For tests: it costs a whole-graph computation.
    #[doc(hidden)]
    pub fn verify(
        &self,
        task_worker: &dyn Fn(TaskId) -> Option<usize>,
    ) -> std::result::Result<(), String> {
        let ids: Vec<u32> = self.live_ids().collect();
        if ids.len() != self.by_name.len() {
            return Err(format!(
                "{} modules, {} names",
                ids.len(),
                self.by_name.len()
            ));
        }
        if matches!(self.nodes.last(), Some(None)) {
            return Err("the module list ends in an empty slot".into());
        }
        let empty: BTreeSet<u32> = (0..self.nodes.len() as u32)
            .filter(|&i| self.nodes[i as usize].is_none())
            .collect();
        if empty != self.free_nodes {
            return Err(format!("free slots {:?}, empty {empty:?}", self.free_nodes));
        }
        let empty: BTreeSet<u32> = (0..self.tasks.len() as u32)
            .filter(|&t| self.tasks[t as usize].is_none())
            .collect();
        if empty != self.free_tasks {
            return Err(format!("free tasks {:?}, empty {empty:?}", self.free_tasks));
        }
        let mut users: HashMap<String, BTreeSet<u32>> = HashMap::new();
        for &i in &ids {
            let n = self.node(i);
            if self.by_name.get(&n.name) != Some(&i) {
                return Err(format!("module '{}' is not named by slot {i}", n.name));
            }
            for t in &n.tasks {
                if self.task(*t).map(|e| e.module) != Some(i) {
                    return Err(format!("task {t:?} of '{}' is not its", n.name));
                }
            }
            for a in &n.attrs {
                users.entry(a.name.clone()).or_default().insert(i);
            }
            for (g, og) in n.ogates.iter().enumerate() {
                let Some(og) = og else { continue };
                let Some(d) = self.nodes.get(og.dst as usize).and_then(|d| d.as_ref()) else {
                    return Err(format!("gate {}:{g} leads to an empty slot", n.name));
                };
                if !d
                    .igates
                    .get(og.igate as usize)
                    .is_some_and(|u| u.contains(&(i, g as u16)))
                {
                    return Err(format!(
                        "gate {}:{g} is not among {}'s inputs",
                        n.name, d.name
                    ));
                }
                if !std::ptr::eq(og.dst_node, d) {
                    return Err(format!("gate {}:{g} points elsewhere", n.name));
                }
                if og.plain != (!n.multi && og.hooks.is_empty() && !og.track_bits) {
                    return Err(format!("gate {}:{g} has a stale fast-path flag", n.name));
                }
                if og.dst_prio != d.prio {
                    return Err(format!("gate {}:{g} has a stale priority", n.name));
                }
            }
            for (ig, ups) in n.igates.iter().enumerate() {
                for &(src, g) in ups {
                    let back = self
                        .nodes
                        .get(src as usize)
                        .and_then(|s| s.as_ref())
                        .and_then(|s| s.ogates.get(g as usize))
                        .and_then(|o| o.as_ref());
                    if !back.is_some_and(|o| o.dst == i && o.igate as usize == ig) {
                        return Err(format!("input {}:{ig} lists a gate that is not", n.name));
                    }
                }
            }
        }
        if users != self.attr_users {
            return Err("attribute users differ".into());
        }
        for (t, &h) in &self.name_hints {
            if let Some(i) = (0..h).find(|i| !self.by_name.contains_key(&format!("{t}{i}"))) {
                return Err(format!("'{t}{i}' is free below the name hint {h}"));
            }
        }
        for (t, e) in self.tasks.iter().enumerate() {
            if let Some(e) = e {
                if !self.nodes.get(e.module as usize).is_some_and(|n| {
                    n.as_ref()
                        .is_some_and(|n| n.tasks.contains(&TaskId(t as u32)))
                }) {
                    return Err(format!("task {t} belongs to no module"));
                }
            }
        }
        // Metadata over the whole graph at once.
        let index: HashMap<u32, usize> = ids.iter().enumerate().map(|(k, &i)| (i, k)).collect();
        let downstream: Vec<Vec<usize>> = ids
            .iter()
            .map(|&i| {
                self.node(i)
                    .ogates
                    .iter()
                    .flatten()
                    .map(|g| index[&g.dst])
                    .collect()
            })
            .collect();
        let metas: Vec<MetaModule> = ids
            .iter()
            .zip(&downstream)
            .map(|(&i, d)| MetaModule {
                name: self.node(i).name.clone(),
                attrs: self.node(i).attrs.clone(),
                downstream: d.clone(),
            })
            .collect();
        let a = assign_offsets(&metas).map_err(|e| e.to_string())?;
        for (k, &i) in ids.iter().enumerate() {
            let n = self.node(i);
            let want: &[AttrOffset] = if n.attrs.is_empty() {
                &[]
            } else {
                &a.offsets[k]
            };
            if n.offsets != want {
                return Err(format!(
                    "'{}': offsets {:?}, want {want:?}",
                    n.name, n.offsets
                ));
            }
        }
        if self.warnings() != a.warnings {
            return Err(format!(
                "warnings {:?}, want {:?}",
                self.warnings(),
                a.warnings
            ));
        }
        // Priorities by relaxation over each component, and worker placement.
        for comp in self.components_of(&ids, &mut Scratch::default()) {
            let local: HashMap<u32, usize> =
                comp.iter().enumerate().map(|(k, &i)| (i, k)).collect();
            let down: Vec<Vec<usize>> = comp
                .iter()
                .map(|&i| {
                    let n = self.node(i);
                    n.ogates.iter().flatten().map(|g| local[&g.dst]).collect()
                })
                .collect();
            let cap = comp.len() as u32;
            let mut dist = vec![0u32; comp.len()];
            for _ in 0..comp.len() {
                let mut changed = false;
                for (k, ds) in down.iter().enumerate() {
                    for &d in ds {
                        if d != k && dist[d] < dist[k] + 1 && dist[k] < cap {
                            dist[d] = dist[k] + 1;
                            changed = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
            for (k, &i) in comp.iter().enumerate() {
                if self.node(i).prio != dist[k] {
                    return Err(format!(
                        "'{}': priority {}, want {}",
                        self.node(i).name,
                        self.node(i).prio,
                        dist[k]
                    ));
                }
            }
        }
        let mut masks: HashMap<u32, u64> = HashMap::new();
        let (mut sc, mut walk) = (Scratch::default(), Vec::new());
        for (t, e) in self.tasks.iter().enumerate() {
            let Some(e) = e else { continue };
            let Some(w) = task_worker(TaskId(t as u32)) else {
                continue;
            };
            self.reach_into(e.module, true, &mut sc, &mut walk);
            for &m in &walk {
                *masks.entry(m).or_default() |= 1u64 << (w % 64);
            }
        }
        for &i in &ids {
            let n = self.node(i);
            let want = masks.get(&i).copied().unwrap_or(0);
            if n.workers != want || n.multi != (want.count_ones() > 1) {
                return Err(format!(
                    "'{}': workers {:#x}, want {want:#x}",
                    n.name, n.workers
                ));
            }
        }
        Ok(())
    }
}

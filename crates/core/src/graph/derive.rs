//! What is derived from the graph, per weakly connected component: metadata offsets and
//! warnings, input-gate priorities (longest paths), the output gates' fast-path flags and
//! destination pointers, reachability.

use super::{Node, Pipeline};
use crate::error::{Error, Result};
use crate::metadata::{assign_offsets, AttrOffset, MetaModule};

/// What [`Pipeline::settle`] computes for one component before writing it.
struct Derived {
    ids: Vec<u32>,
    offsets: Option<Vec<Vec<AttrOffset>>>,
    warnings: Vec<Vec<(String, String)>>,
    prio: Vec<u32>,
}

/// Per-slot scratch for walks over components, kept between changes so that a walk costs
/// what the component does (no per-walk clearing or hashing).
#[derive(Default)]
pub(super) struct Scratch {
    /// `mark[i] == epoch`: slot `i` was visited by the current walk.
    mark: Vec<u32>,
    epoch: u32,
    /// A module's index within the component being computed (valid for its members).
    pub(super) local: Vec<u32>,
}

impl Scratch {
    /// Starts a walk over a graph of `slots` slots.
    fn begin(&mut self, slots: usize) {
        if self.mark.len() < slots {
            self.mark.resize(slots, 0);
            self.local.resize(slots, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.fill(0);
            self.epoch = 1;
        }
    }

    /// Marks slot `i`; false if the current walk had already.
    fn visit(&mut self, i: u32) -> bool {
        let m = &mut self.mark[i as usize];
        if *m == self.epoch {
            return false;
        }
        *m = self.epoch;
        true
    }
}

/// Edges of one component by local index: module `k` feeds `to[at[k]..at[k + 1]]`.
struct Edges {
    at: Vec<usize>,
    to: Vec<usize>,
}

impl Edges {
    fn of(&self, k: usize) -> &[usize] {
        &self.to[self.at[k]..self.at[k + 1]]
    }

    fn len(&self) -> usize {
        self.at.len() - 1
    }
}

impl Pipeline {
    /// Recomputes every output gate's `plain` flag and destination pointer (after the node
    /// list moved in memory).
    pub(crate) fn refresh_gates(&mut self) {
        let ids: Vec<u32> = self.live_ids().collect();
        self.refresh_gates_of(&ids);
    }

    /// Recomputes the `plain` flag and destination pointer of the output gates of `ids` (after
    /// a change of their hooks, bit tracking, connections or worker placement).
    pub(super) fn refresh_gates_of(&mut self, ids: &[u32]) {
        let mut at: Vec<*const Node> = Vec::new();
        for &i in ids {
            let Some(n) = self.nodes[i as usize].as_ref() else {
                continue;
            };
            at.clear();
            at.extend(n.ogates.iter().flatten().map(|g| {
                self.nodes[g.dst as usize]
                    .as_ref()
                    .map_or(std::ptr::null(), |d| d as *const Node)
            }));
            let n = self.nodes[i as usize].as_mut().unwrap();
            let multi = n.multi;
            for (og, &p) in n.ogates.iter_mut().flatten().zip(&at) {
                og.plain = !multi && og.hooks.is_empty() && !og.track_bits;
                og.dst_node = p;
            }
        }
    }

    pub(super) fn live_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_some())
            .map(|(i, _)| i as u32)
    }

    /// The weakly connected components (modules joined by connections in either direction)
    /// containing the live modules among `seeds`, each sorted by slot.
    pub(super) fn components_of(&self, seeds: &[u32], sc: &mut Scratch) -> Vec<Vec<u32>> {
        sc.begin(self.nodes.len());
        let mut out = Vec::new();
        for &s in seeds {
            if self.nodes.get(s as usize).is_none_or(|n| n.is_none()) || !sc.visit(s) {
                continue;
            }
            let mut comp = vec![s];
            let mut k = 0;
            while k < comp.len() {
                let n = self.node(comp[k]);
                k += 1;
                let ups = n.igates.iter().flatten().map(|&(src, _)| src);
                let downs = n.ogates.iter().flatten().map(|g| g.dst);
                for j in ups.chain(downs) {
                    if sc.visit(j) {
                        comp.push(j);
                    }
                }
            }
            comp.sort_unstable();
            out.push(comp);
        }
        out
    }

    /// Numbers the members of a component (`sc.local`) and lists its edges by those numbers.
    fn edges(&self, ids: &[u32], sc: &mut Scratch) -> Edges {
        for (k, &i) in ids.iter().enumerate() {
            sc.local[i as usize] = k as u32;
        }
        let mut at = Vec::with_capacity(ids.len() + 1);
        let mut to = Vec::new();
        at.push(0);
        for &i in ids {
            let n = self.node(i);
            to.extend(
                n.ogates
                    .iter()
                    .flatten()
                    .map(|g| sc.local[g.dst as usize] as usize),
            );
            at.push(to.len());
        }
        Edges { at, to }
    }

    /// Recomputes derived state for the whole graph: input-gate priorities and metadata
    /// offsets (every change already keeps them current; see [`Pipeline::settle`]).
    pub fn recompute(&mut self) -> Result<()> {
        let ids: Vec<u32> = self.live_ids().collect();
        self.refresh_gates_of(&ids);
        self.settle(&ids)
    }

    /// Recomputes what is derived from the graph for the components containing `seeds` (the
    /// modules a change touched): metadata offsets and warnings, input-gate priorities, the
    /// output gates' flags; their worker placement is left to the next
    /// [`Pipeline::refresh_workers`]. A component's result is the one a whole-graph
    /// computation gives it, since nothing crosses components. On an error (attributes that
    /// do not fit) nothing is written.
    pub(super) fn settle(&mut self, seeds: &[u32]) -> Result<()> {
        let mut sc = std::mem::take(&mut self.scratch);
        let r = self.settle_with(seeds, &mut sc);
        self.scratch = sc;
        r
    }

    fn settle_with(&mut self, seeds: &[u32], sc: &mut Scratch) -> Result<()> {
        let comps = self.components_of(seeds, sc);
        let mut results = Vec::with_capacity(comps.len());
        for ids in comps {
            results.push(self.derive(ids, sc)?);
        }
        for mut d in results {
            for (k, &i) in d.ids.iter().enumerate() {
                // Components are disjoint: `local` still numbers this one's members.
                sc.local[i as usize] = k as u32;
            }
            for (k, &i) in d.ids.iter().enumerate() {
                let n = self.nodes[i as usize].as_mut().unwrap();
                match &d.offsets {
                    Some(o) => n.offsets.clone_from(&o[k]),
                    None => n.offsets.clear(),
                }
                for (_, w) in &d.warnings[k] {
                    if !n.warnings.iter().any(|(_, old)| old == w) {
                        tracing::warn!("{w}");
                    }
                }
                n.warnings = std::mem::take(&mut d.warnings[k]);
                n.prio = d.prio[k];
                for g in n.ogates.iter_mut().flatten() {
                    g.dst_prio = d.prio[sc.local[g.dst as usize] as usize];
                }
            }
            self.refresh_gates_of(&d.ids);
            self.recomputed += d.ids.len() as u64;
            self.workers_dirty.append(&mut d.ids);
        }
        if self.workers_dirty.len() > 2 * self.nodes.len() + 64 {
            // A graph nobody refreshes the workers of (tests build those): stay bounded.
            self.workers_dirty = self.live_ids().collect();
        }
        Ok(())
    }

    /// How many times a module's derived state (metadata, priority, gate flags, workers) has
    /// been recomputed so far: a change recomputes the modules of the components it touched,
    /// so what it adds does not grow with the rest of the graph. For tests.
    #[doc(hidden)]
    pub fn recomputed(&self) -> u64 {
        self.recomputed
    }

    /// Metadata offsets and warnings and input-gate priorities of one component (`ids`,
    /// sorted by slot), computed as for the whole graph.
    fn derive(&self, ids: Vec<u32>, sc: &mut Scratch) -> Result<Derived> {
        let edges = self.edges(&ids, sc);
        // Without any attribute in the component there is nothing to place or warn about.
        let any_attrs = ids.iter().any(|&i| !self.node(i).attrs.is_empty());
        let (offsets, warnings) = if any_attrs {
            let metas: Vec<MetaModule> = ids
                .iter()
                .enumerate()
                .map(|(k, &i)| {
                    let n = self.node(i);
                    MetaModule {
                        name: n.name.clone(),
                        attrs: n.attrs.clone(),
                        downstream: edges.of(k).to_vec(),
                    }
                })
                .collect();
            let a = assign_offsets(&metas).map_err(|e| Error::invalid(e.to_string()))?;
            let mut warnings = vec![Vec::new(); ids.len()];
            for ((m, attr), text) in a.warned.into_iter().zip(a.warnings) {
                warnings[m].push((attr, text));
            }
            (Some(a.offsets), warnings)
        } else {
            (None, vec![Vec::new(); ids.len()])
        };
        let prio = longest_paths(&edges);
        Ok(Derived {
            ids,
            offsets,
            warnings,
            prio,
        })
    }

    /// Metadata warnings of the current graph (e.g. attributes read without a writer), by
    /// attribute and then module.
    pub fn warnings(&self) -> Vec<String> {
        let mut all: Vec<(&str, u32, &str)> = self
            .live_ids()
            .flat_map(|i| {
                self.node(i)
                    .warnings
                    .iter()
                    .map(move |(a, w)| (a.as_str(), i, w.as_str()))
            })
            .collect();
        all.sort();
        all.into_iter().map(|(_, _, w)| w.to_string()).collect()
    }

    /// Modules reachable downstream of a module (including itself).
    pub fn reachable_from(&self, start: u32) -> Vec<u32> {
        self.reach(start, false)
    }

    /// Walks downstream. With `stop_at_buffers`, a module other than `start` that has both
    /// input gates and a task of its own (Queue, DRR: BESS's `propagate_workers_ = false`) is
    /// included but not expanded: its own task, not the caller's, runs what follows it.
    fn reach(&self, start: u32, stop_at_buffers: bool) -> Vec<u32> {
        let mut out = Vec::new();
        self.reach_into(start, stop_at_buffers, &mut Scratch::default(), &mut out);
        out
    }

    /// [`Pipeline::reach`] into `out`, marking visits in `sc`.
    pub(super) fn reach_into(
        &self,
        start: u32,
        stop_at_buffers: bool,
        sc: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        sc.begin(self.nodes.len());
        out.clear();
        sc.visit(start);
        out.push(start);
        let mut k = 0;
        while k < out.len() {
            let i = out[k];
            k += 1;
            let n = self.node(i);
            if stop_at_buffers && i != start && n.class.igates > 0 && !n.tasks.is_empty() {
                continue;
            }
            for g in n.ogates.iter().flatten() {
                if sc.visit(g.dst) {
                    out.push(g.dst);
                }
            }
        }
    }
}

/// Longest-path distance of each module of a component from the modules nothing feeds
/// (`downstream[k]`: the modules module `k` feeds, by index; self-loops ignored), which
/// orders pending batches so that batches for the same input gate meet before it runs
/// (BESS's igate priority). In a component with a loop, distances grow along the loop until
/// they reach the component's size, as an iterative relaxation bounded by it gives.
fn longest_paths(edges: &Edges) -> Vec<u32> {
    let n = edges.len();
    let mut dist = vec![0u32; n];
    // Kahn's order: exact for a loop-free component, in time linear in its size.
    let mut indeg = vec![0u32; n];
    for k in 0..n {
        for &d in edges.of(k) {
            if d != k {
                indeg[d] += 1;
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&k| indeg[k] == 0).collect();
    let mut done = 0;
    while let Some(k) = ready.pop() {
        done += 1;
        for &d in edges.of(k) {
            if d != k {
                dist[d] = dist[d].max(dist[k] + 1);
                indeg[d] -= 1;
                if indeg[d] == 0 {
                    ready.push(d);
                }
            }
        }
    }
    if done == n {
        return dist;
    }
    // A loop: relax edges in slot order until nothing changes, distances bounded by the
    // component's size (at most that many passes).
    dist.iter_mut().for_each(|d| *d = 0);
    let cap = n as u32;
    for _ in 0..n {
        let mut changed = false;
        for k in 0..n {
            for &d in edges.of(k) {
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
    dist
}

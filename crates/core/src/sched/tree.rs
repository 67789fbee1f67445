//! The class tree: its classes (`Kind`, `Hot`, `Cold`) and the operations that build and change it.

use std::collections::HashMap;

use super::bucket::Bucket;
use super::queue::{RankSet, Tourney, Wake, WakeQueue};
use super::{
    Policy, Resource, SchedError, TaskId, TcStats, BACKOFF_MAX_CYCLES, BACKOFF_MIN_CYCLES,
    MAX_CHILDREN, MAX_SHARE, NONE, ROOT, STRIDE1,
};
use crate::tsc::rdtsc;

/// Policy state of a class (children lists and per-policy scheduling state).
///
/// `repr(u8)`: the variant is a plain leading byte, so the per-level dispatch of a round is a
/// byte load and a jump, not the decoding of a niche in a `Vec`'s capacity (5 instructions
/// fewer per level, twice per level per round).
#[repr(u8)]
pub(super) enum Kind {
    Leaf,
    RoundRobin {
        children: Vec<u32>,
        cursor: u32,
        nrun: u32,
    },
    Priority {
        children: Vec<u32>,
        ready: RankSet,
    },
    WeightedFair {
        resource: Resource,
        children: Vec<u32>,
        ready: Tourney,
        vtime: u64,
    },
    RateLimit(Box<Bucket>),
}

impl Kind {
    fn new(policy: &Policy, now: u64) -> Kind {
        match *policy {
            Policy::Priority => Kind::Priority {
                children: Vec::new(),
                ready: RankSet::with_len(0),
            },
            Policy::WeightedFair { resource } => Kind::WeightedFair {
                resource,
                children: Vec::new(),
                ready: Tourney::new(),
                vtime: 0,
            },
            Policy::RoundRobin => Kind::RoundRobin {
                children: Vec::new(),
                cursor: NONE,
                nrun: 0,
            },
            Policy::RateLimit {
                resource,
                limit,
                max_burst,
            } => Kind::RateLimit(Box::new(Bucket::new(resource, limit, max_burst, now))),
            Policy::Leaf => Kind::Leaf,
        }
    }

    pub(super) fn policy(&self) -> Policy {
        match self {
            Kind::Leaf => Policy::Leaf,
            Kind::RoundRobin { .. } => Policy::RoundRobin,
            Kind::Priority { .. } => Policy::Priority,
            Kind::WeightedFair { resource, .. } => Policy::WeightedFair {
                resource: *resource,
            },
            Kind::RateLimit(b) => Policy::RateLimit {
                resource: b.resource,
                limit: b.limit,
                max_burst: b.max_burst,
            },
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Kind::Leaf => "leaf",
            Kind::RoundRobin { .. } => "round_robin",
            Kind::Priority { .. } => "priority",
            Kind::WeightedFair { .. } => "weighted_fair",
            Kind::RateLimit(_) => "rate_limit",
        }
    }

    pub(super) fn children(&self) -> &[u32] {
        match self {
            Kind::Leaf => &[],
            Kind::RoundRobin { children, .. }
            | Kind::Priority { children, .. }
            | Kind::WeightedFair { children, .. } => children,
            Kind::RateLimit(b) => {
                if b.child == NONE {
                    &[]
                } else {
                    std::slice::from_ref(&b.child)
                }
            }
        }
    }
}

/// The per-round state of a class: one cache line, so a round over thousands of leaves
/// touches one line per leaf.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub(super) struct Hot {
    pub(super) stats: TcStats,
    pub(super) parent: u32,
    /// The task of a leaf (valid if `has_task`).
    pub(super) task: u32,
    /// Bumped to invalidate pending wake-ups of this class.
    pub(super) wake_gen: u32,
    /// Round-robin ring links (under a round-robin parent).
    pub(super) prev: u32,
    pub(super) next: u32,
    /// Rank under a priority parent; stride under a weighted-fair parent.
    pub(super) aux: u32,
    pub(super) blocked: bool,
    pub(super) is_leaf: bool,
    pub(super) has_task: bool,
    pub(super) backing_off: bool,
    /// Consecutive idle runs (capped): the backoff is `BACKOFF_MIN_CYCLES << (idle - 1)`.
    pub(super) idle: u8,
}

pub(super) const MAX_IDLE: u8 =
    (BACKOFF_MAX_CYCLES / BACKOFF_MIN_CYCLES).trailing_zeros() as u8 + 1;

impl Hot {
    fn new(is_leaf: bool) -> Self {
        Hot {
            stats: TcStats::default(),
            parent: NONE,
            task: 0,
            wake_gen: 0,
            prev: NONE,
            next: NONE,
            aux: 0,
            blocked: true,
            is_leaf,
            has_task: false,
            backing_off: false,
            idle: 0,
        }
    }
}

/// Control-plane data of a class.
pub(super) struct Cold {
    pub(super) name: String,
    pub(super) priority: i32,
    pub(super) share: u32,
    /// Pass ahead of the weighted-fair parent's global pass when the class blocked.
    pub(super) remain: u64,
    pub(super) live: bool,
}

/// A worker's traffic-class tree and scheduler.
pub struct ClassTree {
    pub(super) hot: Vec<Hot>,
    pub(super) kinds: Vec<Kind>,
    pub(super) cold: Vec<Cold>,
    pub(super) free: Vec<u32>,
    pub(super) names: HashMap<String, u32>,
    pub(super) task_leaf: HashMap<TaskId, u32>,
    /// (wake TSC, class, class wake generation); stale entries are skipped.
    pub(super) wakeups: WakeQueue,
    /// Throttle entries set aside while waking idle leaves early (kept to reuse its memory).
    pub(super) set_aside: Vec<Wake>,
    pub(super) live: usize,
    /// TSC at the end of the last round that ran a task (0: read the clock afresh). A round
    /// starts where the previous one ended, so a busy round reads the TSC once, not twice
    /// (a read costs about 65 cycles on some machines: more than the rest of the round).
    pub(super) last_tsc: u64,
}

impl ClassTree {
    /// Creates a tree holding only the implicit round-robin root `!default_rr_<wid>`.
    pub fn new(wid: usize) -> Self {
        let mut t = ClassTree {
            hot: Vec::new(),
            kinds: Vec::new(),
            cold: Vec::new(),
            free: Vec::new(),
            names: HashMap::new(),
            task_leaf: HashMap::new(),
            wakeups: WakeQueue::default(),
            set_aside: Vec::new(),
            live: 0,
            last_tsc: 0,
        };
        let idx = t.alloc(
            format!("!default_rr_{wid}"),
            Kind::new(&Policy::RoundRobin, 0),
            0,
            1,
        );
        debug_assert_eq!(idx, ROOT);
        t
    }

    /// Name of the implicit root (`!default_rr_<wid>`).
    pub fn root_name(&self) -> String {
        self.cold[ROOT].name.clone()
    }

    /// Number of classes, the implicit root included.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True if the tree holds only the implicit root.
    pub fn is_empty(&self) -> bool {
        self.live <= 1
    }

    fn alloc(&mut self, name: String, kind: Kind, priority: i32, share: u32) -> usize {
        let hot = Hot::new(matches!(kind, Kind::Leaf));
        let cold = Cold {
            name: name.clone(),
            priority,
            share,
            remain: 0,
            live: true,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                let i = i as usize;
                let gen = self.hot[i].wake_gen.wrapping_add(1);
                self.hot[i] = hot;
                self.hot[i].wake_gen = gen;
                self.kinds[i] = kind;
                self.cold[i] = cold;
                i
            }
            None => {
                self.hot.push(hot);
                self.kinds.push(kind);
                self.cold.push(cold);
                self.hot.len() - 1
            }
        };
        self.names.insert(name, idx as u32);
        self.live += 1;
        idx
    }

    fn lookup(&self, name: &str) -> Result<usize, SchedError> {
        self.names
            .get(name)
            .map(|&i| i as usize)
            .ok_or_else(|| SchedError::NoSuchClass(name.to_string()))
    }

    fn parent_of(&self, parent: Option<&str>) -> Result<usize, SchedError> {
        match parent {
            None => Ok(ROOT),
            Some(p) => self.lookup(p),
        }
    }

    /// Checks that `child` (existing or not) may hang under `p` with these parameters.
    fn check_attach(
        &self,
        p: usize,
        child: Option<usize>,
        priority: i32,
        share: u32,
    ) -> Result<(), SchedError> {
        let kind = &self.kinds[p];
        let pname = || self.cold[p].name.clone();
        let children = kind.children();
        let already = child.is_some_and(|c| self.hot[c].parent == p as u32);
        match kind {
            Kind::Leaf => {
                return Err(SchedError::NotAParent {
                    name: pname(),
                    policy: "leaf",
                })
            }
            Kind::RateLimit(b) => {
                if b.child != NONE && !already {
                    return Err(SchedError::TooManyChildren { parent: pname() });
                }
            }
            Kind::Priority { .. } => {
                if children.iter().any(|&c| {
                    Some(c as usize) != child && self.cold[c as usize].priority == priority
                }) {
                    return Err(SchedError::DuplicatePriority {
                        parent: pname(),
                        priority,
                    });
                }
            }
            Kind::WeightedFair { .. } => {
                if share == 0 || share > MAX_SHARE {
                    return Err(SchedError::InvalidShare(share));
                }
            }
            Kind::RoundRobin { .. } => {}
        }
        if children.len() >= MAX_CHILDREN && !already {
            return Err(SchedError::TooManyChildren { parent: pname() });
        }
        Ok(())
    }

    /// Adds a class under `parent` (None: the implicit root). On error nothing changes.
    ///
    /// `priority` matters under a priority parent, `share` under a weighted-fair one. Names
    /// starting with '!' are reserved; the engine's per-task leaves (`!leaf_…`, policy
    /// leaf) are the one exception.
    pub fn add_class(
        &mut self,
        name: &str,
        policy: Policy,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<(), SchedError> {
        if name.is_empty()
            || (name.starts_with('!') && !(name.starts_with("!leaf_") && policy == Policy::Leaf))
        {
            return Err(SchedError::Reserved(name.to_string()));
        }
        if self.names.contains_key(name) {
            return Err(SchedError::NameTaken(name.to_string()));
        }
        let p = self.parent_of(parent)?;
        self.check_attach(p, None, priority, share)?;
        let kind = Kind::new(&policy, rdtsc());
        let idx = self.alloc(name.to_string(), kind, priority, share);
        self.link_child(p, idx);
        Ok(())
    }

    /// Makes `c` a child of `p` (already validated), joining the runnable set if runnable.
    fn link_child(&mut self, p: usize, c: usize) {
        let share = self.cold[c].share.clamp(1, MAX_SHARE) as u64;
        self.cold[c].remain = 0;
        let h = &mut self.hot[c];
        h.parent = p as u32;
        h.prev = NONE;
        h.next = NONE;
        h.aux = 0;
        let c32 = c as u32;
        match &mut self.kinds[p] {
            Kind::WeightedFair {
                children, ready, ..
            } => {
                children.push(c32);
                h.aux = ready.alloc(c32, (STRIDE1 / share) as u32);
            }
            Kind::RoundRobin { children, .. } | Kind::Priority { children, .. } => {
                children.push(c32)
            }
            Kind::RateLimit(b) => b.child = c32,
            Kind::Leaf => unreachable!("validated"),
        }
        if matches!(self.kinds[p], Kind::Priority { .. }) {
            self.rebuild_priority(p);
        } else if !self.hot[c].blocked {
            self.insert_runnable(p, c);
        }
        self.refresh(p);
    }

    /// Detaches `c` from its parent (leaving the runnable set first) and refreshes the parent.
    fn unlink_child(&mut self, c: usize) {
        let p = self.hot[c].parent as usize;
        if !self.hot[c].blocked {
            self.remove_runnable(p, c);
        }
        let c32 = c as u32;
        match &mut self.kinds[p] {
            Kind::WeightedFair {
                children, ready, ..
            } => {
                children.retain(|&x| x != c32);
                ready.release(self.hot[c].aux);
            }
            Kind::RoundRobin { children, .. } | Kind::Priority { children, .. } => {
                children.retain(|&x| x != c32)
            }
            Kind::RateLimit(b) => b.child = NONE,
            Kind::Leaf => {}
        }
        if matches!(self.kinds[p], Kind::Priority { .. }) {
            self.rebuild_priority(p);
        }
        self.hot[c].parent = NONE;
        self.refresh(p);
    }

    /// Re-sorts a priority class's children, renumbers their ranks and rebuilds its bitmap.
    fn rebuild_priority(&mut self, p: usize) {
        let Kind::Priority { children, ready } = &mut self.kinds[p] else {
            return;
        };
        children.sort_by_key(|&c| self.cold[c as usize].priority);
        *ready = RankSet::with_len(children.len());
        for (rank, &c) in children.iter().enumerate() {
            let h = &mut self.hot[c as usize];
            h.aux = rank as u32;
            if !h.blocked {
                ready.set(rank as u32);
            }
        }
    }

    /// Whether `n` should be runnable given its own state and its children's.
    pub(super) fn wants_to_run(&self, n: usize) -> bool {
        let h = &self.hot[n];
        if h.is_leaf {
            return h.has_task && !h.backing_off;
        }
        match &self.kinds[n] {
            Kind::Leaf => false,
            Kind::RoundRobin { nrun, .. } => *nrun > 0,
            Kind::Priority { ready, .. } => !ready.is_empty(),
            Kind::WeightedFair { ready, .. } => ready.nrun > 0,
            Kind::RateLimit(b) => {
                !b.throttled && b.child != NONE && !self.hot[b.child as usize].blocked
            }
        }
    }

    /// Re-evaluates `n`'s runnability and propagates any change towards the root.
    pub(super) fn refresh(&mut self, mut n: usize) {
        loop {
            let want = self.wants_to_run(n);
            if want != self.hot[n].blocked {
                return;
            }
            self.hot[n].blocked = !want;
            let p = self.hot[n].parent;
            if p == NONE {
                return;
            }
            let p = p as usize;
            if want {
                self.insert_runnable(p, n);
            } else {
                self.remove_runnable(p, n);
            }
            n = p;
        }
    }

    /// Adds the (now runnable) child `c` to `p`'s runnable set.
    fn insert_runnable(&mut self, p: usize, c: usize) {
        let hot = &mut self.hot;
        let c32 = c as u32;
        match &mut self.kinds[p] {
            Kind::RoundRobin { cursor, nrun, .. } => {
                if *nrun == 0 {
                    hot[c].prev = c32;
                    hot[c].next = c32;
                    *cursor = c32;
                } else {
                    // Just before the cursor: the end of the current cycle.
                    let cur = *cursor as usize;
                    let prev = hot[cur].prev;
                    hot[c].prev = prev;
                    hot[c].next = cur as u32;
                    hot[prev as usize].next = c32;
                    hot[cur].prev = c32;
                }
                *nrun += 1;
            }
            Kind::WeightedFair { ready, vtime, .. } => {
                ready.join(hot[c].aux as usize, self.cold[c].remain, vtime);
            }
            Kind::Priority { ready, .. } => ready.set(hot[c].aux),
            Kind::RateLimit(_) | Kind::Leaf => {}
        }
    }

    /// Removes the (now blocked) child `c` from `p`'s runnable set.
    fn remove_runnable(&mut self, p: usize, c: usize) {
        let hot = &mut self.hot;
        let c32 = c as u32;
        match &mut self.kinds[p] {
            Kind::RoundRobin { cursor, nrun, .. } => {
                let (prev, next) = (hot[c].prev, hot[c].next);
                if *nrun <= 1 {
                    *cursor = NONE;
                } else {
                    if *cursor == c32 {
                        *cursor = next;
                    }
                    hot[prev as usize].next = next;
                    hot[next as usize].prev = prev;
                }
                hot[c].prev = NONE;
                hot[c].next = NONE;
                *nrun = nrun.saturating_sub(1);
            }
            Kind::WeightedFair { ready, vtime, .. } => {
                self.cold[c].remain = ready.leave(hot[c].aux as usize, *vtime);
            }
            Kind::Priority { ready, .. } => ready.unset(hot[c].aux),
            Kind::RateLimit(_) | Kind::Leaf => {}
        }
    }

    /// Puts `task` in the leaf `leaf` (which must be empty); the leaf becomes runnable.
    pub fn attach_task(&mut self, leaf: &str, task: TaskId) -> Result<(), SchedError> {
        let idx = self.lookup(leaf)?;
        let h = &self.hot[idx];
        if !h.is_leaf {
            return Err(SchedError::NotALeaf(leaf.to_string()));
        }
        if h.has_task {
            return Err(SchedError::LeafBusy(leaf.to_string()));
        }
        if let Some(&other) = self.task_leaf.get(&task) {
            return Err(SchedError::TaskAttached {
                task,
                leaf: self.cold[other as usize].name.clone(),
            });
        }
        let h = &mut self.hot[idx];
        h.task = task.0;
        h.has_task = true;
        h.idle = 0;
        h.backing_off = false;
        self.task_leaf.insert(task, idx as u32);
        self.refresh(idx);
        Ok(())
    }

    /// Takes `task` out of its leaf; returns that leaf's name (None if not attached).
    pub fn detach_task(&mut self, task: TaskId) -> Option<String> {
        let idx = self.task_leaf.remove(&task)? as usize;
        let h = &mut self.hot[idx];
        h.wake_gen = h.wake_gen.wrapping_add(1);
        h.has_task = false;
        h.idle = 0;
        h.backing_off = false;
        self.refresh(idx);
        Some(self.cold[idx].name.clone())
    }

    /// Removes a class that has no children (and, for a leaf, no task).
    pub fn remove_class(&mut self, name: &str) -> Result<(), SchedError> {
        let idx = self.lookup(name)?;
        if idx == ROOT {
            return Err(SchedError::Reserved(name.to_string()));
        }
        if !self.kinds[idx].children().is_empty() {
            return Err(SchedError::HasChildren(name.to_string()));
        }
        if self.hot[idx].has_task {
            return Err(SchedError::LeafBusy(name.to_string()));
        }
        self.unlink_child(idx);
        let h = &mut self.hot[idx];
        h.blocked = true;
        h.wake_gen = h.wake_gen.wrapping_add(1);
        self.kinds[idx] = Kind::Leaf;
        let c = &mut self.cold[idx];
        c.live = false;
        let name = std::mem::take(&mut c.name);
        self.names.remove(&name);
        self.free.push(idx as u32);
        self.live -= 1;
        Ok(())
    }

    /// Changes a class's policy parameters (rate-limit limit/burst/resource, weighted-fair
    /// resource); the kind of policy cannot change.
    pub fn update_policy(&mut self, name: &str, policy: Policy) -> Result<(), SchedError> {
        let idx = self.lookup(name)?;
        if idx == ROOT {
            return Err(SchedError::Reserved(name.to_string()));
        }
        let now = rdtsc();
        let mut wake_at = None;
        match (&mut self.kinds[idx], policy) {
            (Kind::Leaf, Policy::Leaf)
            | (Kind::RoundRobin { .. }, Policy::RoundRobin)
            | (Kind::Priority { .. }, Policy::Priority) => return Ok(()),
            (Kind::WeightedFair { resource: r, .. }, Policy::WeightedFair { resource }) => {
                *r = resource;
                return Ok(());
            }
            (
                Kind::RateLimit(b),
                Policy::RateLimit {
                    resource,
                    limit,
                    max_burst,
                },
            ) => {
                if b.limit != 0 {
                    b.refill(now);
                }
                b.last = now;
                if b.resource != resource {
                    b.resource = resource;
                    b.tokens = 0;
                }
                b.configure(limit, max_burst);
                b.tokens = b.tokens.min(b.cap);
                b.throttled = false;
                if limit == 0 {
                    b.tokens = 0;
                } else if b.tokens < 0 {
                    b.throttled = true;
                    wake_at = Some(now.saturating_add(b.wait_cycles()));
                }
            }
            (k, _) => {
                return Err(SchedError::PolicyMismatch {
                    name: name.to_string(),
                    policy: k.name(),
                })
            }
        }
        // A rate limit changed: any pending throttle wake-up is superseded.
        let h = &mut self.hot[idx];
        h.wake_gen = h.wake_gen.wrapping_add(1);
        if let Some(at) = wake_at {
            self.wakeups.push(at, idx as u32, h.wake_gen);
        }
        self.refresh(idx);
        Ok(())
    }

    /// Moves a class under `parent` (None: the implicit root) with a new priority and share.
    pub fn set_parent(
        &mut self,
        name: &str,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<(), SchedError> {
        let idx = self.lookup(name)?;
        if idx == ROOT {
            return Err(SchedError::Reserved(name.to_string()));
        }
        let p = self.parent_of(parent)?;
        let mut a = p as u32;
        while a != NONE {
            if a as usize == idx {
                return Err(SchedError::Cycle {
                    name: name.to_string(),
                    parent: self.cold[p].name.clone(),
                });
            }
            a = self.hot[a as usize].parent;
        }
        self.check_attach(p, Some(idx), priority, share)?;
        self.unlink_child(idx);
        self.cold[idx].priority = priority;
        self.cold[idx].share = share;
        self.link_child(p, idx);
        Ok(())
    }
}

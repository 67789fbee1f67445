//! The per-worker hierarchical traffic-class scheduler (BESS §5.4, §5.5.4).
//!
//! A tree of classes, one policy per node: `priority` (lower number first), `weighted_fair`
//! (stride scheduling on count/cycle/packet/bit), `round_robin`, `rate_limit` (token bucket
//! with debt: a node that overdraws is pruned into a wake-up heap and grafted back when its
//! debt is repaid) and `leaf` (one task). Each round walks from the root to a runnable leaf,
//! runs its task, and accounts the usage from the leaf up to the root. Runnability is kept
//! incrementally (a count of runnable children per node), so a round costs O(depth), not
//! O(classes). Idle tasks back off exponentially.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::tsc::rdtsc;

/// Opaque task handle (the graph maps it to a module and argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId(pub u32);

/// What one task run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskResult {
    /// True when the task found no work.
    pub block: bool,
    /// Packets processed.
    pub packets: u32,
    /// Bits processed.
    pub bits: u64,
}

/// A resource a policy measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// Times scheduled.
    Count,
    /// TSC cycles used.
    Cycle,
    /// Packets processed.
    Packet,
    /// Bits processed.
    Bit,
}

impl Resource {
    /// BESS's name for the resource.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Count => "count",
            Resource::Cycle => "cycle",
            Resource::Packet => "packet",
            Resource::Bit => "bit",
        }
    }
}

impl std::str::FromStr for Resource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "count" => Resource::Count,
            "cycle" => Resource::Cycle,
            "packet" => Resource::Packet,
            "bit" => Resource::Bit,
            _ => {
                return Err(format!(
                    "unknown resource '{s}' (count, cycle, packet or bit)"
                ))
            }
        })
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A node's scheduling policy.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// Highest-priority runnable child (lowest number) first.
    Priority,
    /// Stride scheduling over children by share, measured in `resource`.
    WeightedFair {
        /// Resource shares are measured in.
        resource: Resource,
    },
    /// Children in turn.
    RoundRobin,
    /// Token bucket over one child.
    RateLimit {
        /// Resource limited.
        resource: Resource,
        /// Units per second (0 = unlimited).
        limit: u64,
        /// Largest accumulated allowance, in units (0 = one millisecond's worth).
        max_burst: u64,
    },
    /// Holds one task.
    Leaf,
}

impl Policy {
    /// BESS's policy name.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Priority => "priority",
            Policy::WeightedFair { .. } => "weighted_fair",
            Policy::RoundRobin => "round_robin",
            Policy::RateLimit { .. } => "rate_limit",
            Policy::Leaf => "leaf",
        }
    }
}

/// Cumulative usage of a class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcStats {
    /// Times scheduled.
    pub count: u64,
    /// Cycles used.
    pub cycles: u64,
    /// Packets processed.
    pub packets: u64,
    /// Bits processed.
    pub bits: u64,
}

/// A class as listed to controllers.
#[derive(Clone, Debug)]
pub struct TcInfo {
    /// Class name.
    pub name: String,
    /// Policy and parameters.
    pub policy: Policy,
    /// Parent class (None for the root).
    pub parent: Option<String>,
    /// Priority under a `priority` parent.
    pub priority: i32,
    /// Share under a `weighted_fair` parent.
    pub share: u32,
    /// Not runnable now (idle, throttled or no runnable child).
    pub blocked: bool,
    /// Task of a leaf.
    pub task: Option<TaskId>,
    /// Usage so far.
    pub stats: TcStats,
    /// Child names.
    pub children: Vec<String>,
}

/// Errors changing the tree (the tree is unchanged after any of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedError {
    /// The name is in use.
    NameTaken(String),
    /// No class has this name.
    NoSuchClass(String),
    /// The parent cannot have children (a leaf) or no more (a rate_limit with one).
    NotAParent {
        /// Parent name.
        name: String,
        /// Its policy.
        policy: &'static str,
    },
    /// Too many children.
    TooManyChildren {
        /// Parent name.
        parent: String,
    },
    /// Two children of a priority node with one priority.
    DuplicatePriority {
        /// Parent name.
        parent: String,
        /// The priority.
        priority: i32,
    },
    /// A share of 0.
    InvalidShare(u32),
    /// The class has children.
    HasChildren(String),
    /// The class is not a leaf.
    NotALeaf(String),
    /// The leaf has a task already.
    LeafBusy(String),
    /// The name is reserved (starts with '!', or is empty).
    Reserved(String),
}

impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchedError::NameTaken(n) => write!(f, "traffic class '{n}' already exists"),
            SchedError::NoSuchClass(n) => write!(f, "traffic class '{n}' does not exist"),
            SchedError::NotAParent { name, policy } => {
                write!(
                    f,
                    "traffic class '{name}' ({policy}) cannot take another child"
                )
            }
            SchedError::TooManyChildren { parent } => {
                write!(f, "traffic class '{parent}' has too many children")
            }
            SchedError::DuplicatePriority { parent, priority } => {
                write!(
                    f,
                    "traffic class '{parent}' already has a child with priority {priority}"
                )
            }
            SchedError::InvalidShare(s) => write!(f, "share {s} is invalid (must be at least 1)"),
            SchedError::HasChildren(n) => write!(f, "traffic class '{n}' still has children"),
            SchedError::NotALeaf(n) => write!(f, "traffic class '{n}' is not a leaf"),
            SchedError::LeafBusy(n) => write!(f, "leaf '{n}' already has a task"),
            SchedError::Reserved(n) => write!(f, "traffic class name '{n}' is reserved or empty"),
        }
    }
}

impl std::error::Error for SchedError {}

const MAX_CHILDREN: usize = 16384;
const STRIDE1: u128 = 1 << 20;
const QUANTUM: u128 = 1 << 10;
const WORK_SHIFT: u32 = 32;
const RATE_SHIFT: u32 = 20;
const BACKOFF_MIN_SHIFT: u32 = 10;
const BACKOFF_MAX_SHIFT: u32 = 16;

#[derive(Clone)]
struct Node {
    name: String,
    parent: Option<usize>,
    policy: Policy,
    priority: i32,
    share: u32,
    children: Vec<usize>,
    runnable: bool,
    n_runnable: usize,
    // leaf
    task: Option<TaskId>,
    idle_streak: u32,
    backing_off: bool,
    // rate_limit
    throttled: bool,
    tokens: i128,
    last_tsc: u64,
    rate: u128, // work units per cycle, fixed point with RATE_SHIFT fraction bits
    cap: i128,
    wake_gen: u64,
    // weighted_fair (as a child)
    pass: u64,
    stride: u64,
    in_heap: bool,
    // weighted_fair (as a parent)
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    vpass: u64,
    // round_robin (as a parent)
    rr_next: usize,
    stats: TcStats,
}

impl Node {
    fn new(name: &str, policy: Policy, parent: Option<usize>, priority: i32, share: u32) -> Node {
        Node {
            name: name.to_string(),
            parent,
            policy,
            priority,
            share,
            children: Vec::new(),
            runnable: false,
            n_runnable: 0,
            task: None,
            idle_streak: 0,
            backing_off: false,
            throttled: false,
            tokens: 0,
            last_tsc: 0,
            rate: 0,
            cap: 0,
            wake_gen: 0,
            pass: 0,
            stride: (STRIDE1 / share.max(1) as u128) as u64,
            in_heap: false,
            heap: BinaryHeap::new(),
            vpass: 0,
            rr_next: 0,
            stats: TcStats::default(),
        }
    }

    fn should_run(&self) -> bool {
        match self.policy {
            Policy::Leaf => self.task.is_some() && !self.backing_off,
            _ => self.n_runnable > 0 && !self.throttled,
        }
    }
}

fn consumed(resource: Resource, u: &TcStats) -> u64 {
    match resource {
        Resource::Count => u.count,
        Resource::Cycle => u.cycles,
        Resource::Packet => u.packets,
        Resource::Bit => u.bits,
    }
}

/// A worker's class tree.
#[derive(Clone)]
pub struct ClassTree {
    nodes: Vec<Option<Node>>,
    names: HashMap<String, usize>,
    root: usize,
    wakeups: BinaryHeap<Reverse<(u64, usize, u64)>>,
    path: Vec<usize>,
    hz: u64,
}

impl ClassTree {
    /// A tree with only the implicit root `!default_rr_<wid>`.
    pub fn new(wid: usize) -> Self {
        let name = format!("!default_rr_{wid}");
        let root = Node::new(&name, Policy::RoundRobin, None, 0, 1);
        let mut names = HashMap::new();
        names.insert(name, 0);
        ClassTree {
            nodes: vec![Some(root)],
            names,
            root: 0,
            wakeups: BinaryHeap::new(),
            path: Vec::with_capacity(16),
            hz: crate::tsc::hz(),
        }
    }

    fn n(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("live node")
    }

    fn nm(&mut self, i: usize) -> &mut Node {
        self.nodes[i].as_mut().expect("live node")
    }

    fn id(&self, name: &str) -> Result<usize, SchedError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| SchedError::NoSuchClass(name.to_string()))
    }

    /// Name of the implicit root.
    pub fn root_name(&self) -> String {
        self.n(self.root).name.clone()
    }

    /// Number of classes, including the implicit root.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True if only the implicit root exists.
    pub fn is_empty(&self) -> bool {
        self.names.len() == 1
    }

    fn check_parent(
        &self,
        p: usize,
        priority: i32,
        share: u32,
        ignore: Option<usize>,
    ) -> Result<(), SchedError> {
        let pn = self.n(p);
        let others = pn.children.iter().filter(|&&c| Some(c) != ignore);
        match pn.policy {
            Policy::Leaf => {
                return Err(SchedError::NotAParent {
                    name: pn.name.clone(),
                    policy: "leaf",
                });
            }
            Policy::RateLimit { .. } if others.clone().count() >= 1 => {
                return Err(SchedError::NotAParent {
                    name: pn.name.clone(),
                    policy: "rate_limit",
                });
            }
            Policy::Priority if others.clone().any(|&c| self.n(c).priority == priority) => {
                return Err(SchedError::DuplicatePriority {
                    parent: pn.name.clone(),
                    priority,
                });
            }
            Policy::WeightedFair { .. } if share == 0 => {
                return Err(SchedError::InvalidShare(share))
            }
            _ => {}
        }
        if pn.children.len() >= MAX_CHILDREN {
            return Err(SchedError::TooManyChildren {
                parent: pn.name.clone(),
            });
        }
        Ok(())
    }

    fn setup_rate(&mut self, i: usize) {
        let hz = self.hz as u128;
        let node = self.nm(i);
        if let Policy::RateLimit {
            limit, max_burst, ..
        } = node.policy
        {
            node.rate = ((limit as u128) << (WORK_SHIFT + RATE_SHIFT)) / hz.max(1);
            let burst = if max_burst == 0 {
                (limit / 1000).max(1)
            } else {
                max_burst
            };
            node.cap = (burst as i128) << WORK_SHIFT;
            node.tokens = node.tokens.min(node.cap);
            node.last_tsc = rdtsc();
        }
    }

    fn link(&mut self, i: usize, p: usize) {
        self.nm(i).parent = Some(p);
        let prio = self.n(i).priority;
        let pos = match self.n(p).policy {
            Policy::Priority => {
                let nodes = &self.nodes;
                self.n(p)
                    .children
                    .partition_point(|&c| nodes[c].as_ref().unwrap().priority < prio)
            }
            _ => self.n(p).children.len(),
        };
        self.nm(p).children.insert(pos, i);
        if self.n(i).runnable {
            self.n_runnable_changed(p, i, true);
        }
    }

    fn unlink(&mut self, i: usize) {
        let Some(p) = self.n(i).parent else { return };
        if self.n(i).runnable {
            self.n_runnable_changed(p, i, false);
        }
        self.nm(p).children.retain(|&c| c != i);
        self.nm(i).parent = None;
        self.nm(i).in_heap = false;
    }

    /// Adds a class under `parent` (None: the implicit root). Atomic on error.
    pub fn add_class(
        &mut self,
        name: &str,
        policy: Policy,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<(), SchedError> {
        if name.is_empty() || (name.starts_with('!') && !name.starts_with("!leaf_")) {
            return Err(SchedError::Reserved(name.to_string()));
        }
        if self.names.contains_key(name) {
            return Err(SchedError::NameTaken(name.to_string()));
        }
        let p = match parent {
            Some(p) => self.id(p)?,
            None => self.root,
        };
        self.check_parent(p, priority, share, None)?;
        let node = Node::new(name, policy, None, priority, share);
        let i = match self.nodes.iter().position(|n| n.is_none()) {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        self.names.insert(name.to_string(), i);
        self.setup_rate(i);
        self.link(i, p);
        Ok(())
    }

    /// Puts a task in a leaf.
    pub fn attach_task(&mut self, leaf: &str, task: TaskId) -> Result<(), SchedError> {
        let i = self.id(leaf)?;
        if self.n(i).policy != Policy::Leaf {
            return Err(SchedError::NotALeaf(leaf.to_string()));
        }
        if self.n(i).task.is_some() {
            return Err(SchedError::LeafBusy(leaf.to_string()));
        }
        let n = self.nm(i);
        n.task = Some(task);
        n.backing_off = false;
        n.idle_streak = 0;
        self.refresh(i);
        Ok(())
    }

    /// Removes a task from its leaf; returns the leaf's name.
    pub fn detach_task(&mut self, task: TaskId) -> Option<String> {
        let i = (0..self.nodes.len())
            .find(|&i| self.nodes[i].as_ref().is_some_and(|n| n.task == Some(task)))?;
        self.nm(i).task = None;
        self.refresh(i);
        Some(self.n(i).name.clone())
    }

    /// Removes a class without children (not the root).
    pub fn remove_class(&mut self, name: &str) -> Result<(), SchedError> {
        let i = self.id(name)?;
        if i == self.root {
            return Err(SchedError::Reserved(name.to_string()));
        }
        if !self.n(i).children.is_empty() {
            return Err(SchedError::HasChildren(name.to_string()));
        }
        self.unlink(i);
        self.names.remove(name);
        self.nodes[i] = None;
        Ok(())
    }

    /// Changes a class's policy parameters; the policy kind must stay the same.
    pub fn update_policy(&mut self, name: &str, policy: Policy) -> Result<(), SchedError> {
        let i = self.id(name)?;
        if std::mem::discriminant(&self.n(i).policy) != std::mem::discriminant(&policy) {
            return Err(SchedError::NotAParent {
                name: name.to_string(),
                policy: self.n(i).policy.name(),
            });
        }
        self.nm(i).policy = policy;
        self.setup_rate(i);
        Ok(())
    }

    /// Moves a class under another parent. Atomic on error; cycles are refused.
    pub fn set_parent(
        &mut self,
        name: &str,
        parent: Option<&str>,
        priority: i32,
        share: u32,
    ) -> Result<(), SchedError> {
        let i = self.id(name)?;
        let p = match parent {
            Some(p) => self.id(p)?,
            None => self.root,
        };
        let mut a = Some(p);
        while let Some(x) = a {
            if x == i {
                return Err(SchedError::NotAParent {
                    name: self.n(p).name.clone(),
                    policy: "descendant",
                });
            }
            a = self.n(x).parent;
        }
        self.check_parent(p, priority, share, Some(i))?;
        self.unlink(i);
        let n = self.nm(i);
        n.priority = priority;
        n.share = share.max(1);
        n.stride = (STRIDE1 / share.max(1) as u128) as u64;
        self.link(i, p);
        Ok(())
    }

    /// Recomputes node `i`'s runnability and propagates changes to the root.
    fn refresh(&mut self, mut i: usize) {
        loop {
            let want = self.n(i).should_run();
            if want == self.n(i).runnable {
                return;
            }
            self.nm(i).runnable = want;
            match self.n(i).parent {
                Some(p) => {
                    self.n_runnable_changed(p, i, want);
                    i = p;
                }
                None => return,
            }
        }
    }

    fn n_runnable_changed(&mut self, p: usize, child: usize, now_runnable: bool) {
        if now_runnable {
            self.nm(p).n_runnable += 1;
            if matches!(self.n(p).policy, Policy::WeightedFair { .. }) && !self.n(child).in_heap {
                let vpass = self.n(p).vpass;
                let c = self.nm(child);
                c.pass = c.pass.max(vpass);
                c.in_heap = true;
                let pass = c.pass;
                self.nm(p).heap.push(Reverse((pass, child)));
            }
        } else {
            self.nm(p).n_runnable -= 1;
        }
    }

    fn wake(&mut self, now: u64) {
        while let Some(&Reverse((t, i, gen))) = self.wakeups.peek() {
            if t > now {
                break;
            }
            self.wakeups.pop();
            let Some(n) = self.nodes.get_mut(i).and_then(|n| n.as_mut()) else {
                continue;
            };
            if n.wake_gen != gen {
                continue;
            }
            n.throttled = false;
            n.backing_off = false;
            self.refresh(i);
        }
    }

    fn pick_child(&mut self, p: usize) -> Option<usize> {
        match self.n(p).policy {
            Policy::Leaf => None,
            Policy::RateLimit { .. } => self
                .n(p)
                .children
                .first()
                .copied()
                .filter(|&c| self.n(c).runnable),
            Policy::Priority => self
                .n(p)
                .children
                .iter()
                .copied()
                .find(|&c| self.n(c).runnable),
            Policy::RoundRobin => {
                let len = self.n(p).children.len();
                let start = self.n(p).rr_next;
                for k in 0..len {
                    let idx = (start + k) % len;
                    let c = self.n(p).children[idx];
                    if self.n(c).runnable {
                        self.nm(p).rr_next = (idx + 1) % len;
                        return Some(c);
                    }
                }
                None
            }
            Policy::WeightedFair { .. } => loop {
                let &Reverse((pass, c)) = self.n(p).heap.peek()?;
                let live = self.nodes[c]
                    .as_ref()
                    .is_some_and(|n| n.parent == Some(p) && n.in_heap && n.pass == pass);
                if live && self.n(c).runnable {
                    return Some(c);
                }
                self.nm(p).heap.pop();
                if live {
                    self.nm(c).in_heap = false;
                }
            },
        }
    }

    /// Runs one round: wakes expired classes, picks a leaf, runs its task, accounts usage.
    /// Returns false when nothing was runnable.
    pub fn schedule_once(&mut self, run: &mut impl FnMut(TaskId) -> TaskResult) -> bool {
        let now = rdtsc();
        if self
            .wakeups
            .peek()
            .is_some_and(|Reverse((t, _, _))| *t <= now)
        {
            self.wake(now);
        }
        if !self.n(self.root).runnable {
            return false;
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut i = self.root;
        loop {
            path.push(i);
            if self.n(i).policy == Policy::Leaf {
                break;
            }
            match self.pick_child(i) {
                Some(c) => i = c,
                None => {
                    // Inconsistent runnability would be a bug; recover by refreshing.
                    self.path = path;
                    self.refresh(i);
                    return false;
                }
            }
        }
        let task = self.n(i).task.expect("runnable leaf has a task");
        let r = run(task);
        let end = rdtsc();
        let usage = TcStats {
            count: 1,
            cycles: end.wrapping_sub(now),
            packets: r.packets as u64,
            bits: r.bits,
        };
        self.account(&path, &usage, r.packets == 0, end);
        self.path = path;
        true
    }

    fn account(&mut self, path: &[usize], u: &TcStats, idle: bool, now: u64) {
        let leaf = *path.last().unwrap();
        {
            let l = self.nm(leaf);
            if idle {
                l.idle_streak = (l.idle_streak + 1).min(BACKOFF_MAX_SHIFT - BACKOFF_MIN_SHIFT + 1);
                l.backing_off = true;
                l.wake_gen += 1;
                let t = now + (1u64 << (BACKOFF_MIN_SHIFT + l.idle_streak - 1));
                let gen = l.wake_gen;
                self.wakeups.push(Reverse((t, leaf, gen)));
            } else {
                l.idle_streak = 0;
            }
        }
        for k in (0..path.len()).rev() {
            let i = path[k];
            let n = self.nm(i);
            n.stats.count += u.count;
            n.stats.cycles += u.cycles;
            n.stats.packets += u.packets;
            n.stats.bits += u.bits;
            if let Policy::RateLimit {
                resource, limit, ..
            } = n.policy
            {
                if limit > 0 {
                    let elapsed = now.saturating_sub(n.last_tsc) as u128;
                    n.last_tsc = now;
                    n.tokens = (n.tokens + ((elapsed * n.rate) >> RATE_SHIFT) as i128).min(n.cap);
                    n.tokens -= (consumed(resource, u) as i128) << WORK_SHIFT;
                    if n.tokens < 0 {
                        let wait = ((((-n.tokens) as u128) << RATE_SHIFT) / n.rate.max(1)) as u64;
                        n.throttled = true;
                        n.wake_gen += 1;
                        let gen = n.wake_gen;
                        self.wakeups.push(Reverse((now + wait.max(1), i, gen)));
                    }
                }
            }
            if k > 0 {
                let p = path[k - 1];
                if let Policy::WeightedFair { resource } = self.n(p).policy {
                    let c = self.nm(i);
                    let inc =
                        (c.stride as u128 * consumed(resource, u).max(1) as u128 / QUANTUM) as u64;
                    c.pass = c.pass.saturating_add(inc.max(1));
                    let pass = c.pass;
                    let pn = self.nm(p);
                    pn.vpass = pn.vpass.max(pass.saturating_sub(inc));
                    // Re-key the child in the parent's heap: pop its old entry, push the new.
                    if let Some(&Reverse((_, top))) = pn.heap.peek() {
                        if top == i {
                            pn.heap.pop();
                        }
                    }
                    pn.heap.push(Reverse((pass, i)));
                }
            }
        }
        // Runnability may have changed (backoff, throttling): refresh from the leaf up.
        for &i in path.iter().rev() {
            self.refresh(i);
        }
    }

    fn info_of(&self, i: usize) -> TcInfo {
        let n = self.n(i);
        TcInfo {
            name: n.name.clone(),
            policy: n.policy.clone(),
            parent: n.parent.map(|p| self.n(p).name.clone()),
            priority: n.priority,
            share: n.share,
            blocked: !n.runnable,
            task: n.task,
            stats: n.stats,
            children: n.children.iter().map(|&c| self.n(c).name.clone()).collect(),
        }
    }

    /// One class.
    pub fn info(&self, name: &str) -> Option<TcInfo> {
        self.names.get(name).map(|&i| self.info_of(i))
    }

    /// All classes, parents before children.
    pub fn list(&self) -> Vec<TcInfo> {
        let mut out = Vec::new();
        let mut stack = vec![self.root];
        while let Some(i) = stack.pop() {
            out.push(self.info_of(i));
            stack.extend(self.n(i).children.iter().rev());
        }
        out
    }

    /// Usage of one class.
    pub fn stats(&self, name: &str) -> Option<TcStats> {
        self.names.get(name).map(|&i| self.n(i).stats)
    }

    /// Zeroes all usage counters.
    pub fn reset_stats(&mut self) {
        for n in self.nodes.iter_mut().flatten() {
            n.stats = TcStats::default();
        }
    }

    /// Every (leaf, task) pair.
    pub fn tasks(&self) -> Vec<(String, TaskId)> {
        self.nodes
            .iter()
            .flatten()
            .filter_map(|n| n.task.map(|t| (n.name.clone(), t)))
            .collect()
    }
}

/// Average TSC cycles per `schedule_once` round with `leaves` busy leaves under one node of
/// `policy` ("round_robin", "weighted_fair" or "priority") and a no-op task.
pub fn bench_round_cost(policy: &str, leaves: usize, rounds: u64) -> f64 {
    let mut t = ClassTree::new(0);
    let pol = match policy {
        "weighted_fair" => Policy::WeightedFair {
            resource: Resource::Count,
        },
        "priority" => Policy::Priority,
        _ => Policy::RoundRobin,
    };
    t.add_class("top", pol, None, 0, 1).unwrap();
    for i in 0..leaves {
        let name = format!("l{i}");
        t.add_class(
            &name,
            Policy::Leaf,
            Some("top"),
            i as i32,
            1 + (i % 7) as u32,
        )
        .unwrap();
        t.attach_task(&name, TaskId(i as u32)).unwrap();
    }
    let mut run = |_t: TaskId| TaskResult {
        block: false,
        packets: 1,
        bits: 480,
    };
    for _ in 0..10_000 {
        t.schedule_once(&mut run);
    }
    let start = rdtsc();
    for _ in 0..rounds {
        t.schedule_once(&mut run);
    }
    (rdtsc() - start) as f64 / rounds as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap as Map;
    use std::time::{Duration, Instant};

    fn busy(bits: u64) -> impl FnMut(TaskId) -> TaskResult {
        move |_| TaskResult {
            block: false,
            packets: 1,
            bits,
        }
    }

    fn leaf(t: &mut ClassTree, name: &str, parent: Option<&str>, prio: i32, share: u32, task: u32) {
        t.add_class(name, Policy::Leaf, parent, prio, share)
            .unwrap();
        t.attach_task(name, TaskId(task)).unwrap();
    }

    fn counts(
        t: &mut ClassTree,
        rounds: usize,
        run: &mut impl FnMut(TaskId) -> TaskResult,
    ) -> Map<u32, u64> {
        let mut m = Map::new();
        for _ in 0..rounds {
            t.schedule_once(&mut |id| {
                *m.entry(id.0).or_insert(0) += 1;
                run(id)
            });
        }
        m
    }

    #[test]
    fn priority_picks_lowest_number_and_falls_back_when_idle() {
        let mut t = ClassTree::new(0);
        t.add_class("p", Policy::Priority, None, 0, 1).unwrap();
        leaf(&mut t, "hi", Some("p"), 1, 1, 1);
        leaf(&mut t, "lo", Some("p"), 5, 1, 2);
        let c = counts(&mut t, 1000, &mut busy(8));
        assert_eq!(c.get(&1), Some(&1000));
        assert_eq!(c.get(&2), None);
        // When "hi" has no work it backs off and "lo" runs meanwhile.
        let c = counts(&mut t, 2000, &mut |id: TaskId| TaskResult {
            block: id.0 == 1,
            packets: (id.0 != 1) as u32,
            bits: 0,
        });
        assert!(c[&2] > 1000, "{c:?}");
        assert!(c[&1] < 100, "idle task polled {} times", c[&1]);
    }

    #[test]
    fn round_robin_is_exact() {
        let mut t = ClassTree::new(0);
        t.add_class("rr", Policy::RoundRobin, None, 0, 1).unwrap();
        for i in 0..3 {
            leaf(&mut t, &format!("l{i}"), Some("rr"), 0, 1, i);
        }
        let c = counts(&mut t, 3000, &mut busy(8));
        for i in 0..3 {
            assert!((c[&i] as i64 - 1000).abs() <= 1, "{c:?}");
        }
    }

    #[test]
    fn weighted_fair_follows_shares() {
        let mut t = ClassTree::new(0);
        t.add_class(
            "wf",
            Policy::WeightedFair {
                resource: Resource::Count,
            },
            None,
            0,
            1,
        )
        .unwrap();
        for (i, s) in [1u32, 2, 4].iter().enumerate() {
            leaf(&mut t, &format!("l{i}"), Some("wf"), 0, *s, i as u32);
        }
        let c = counts(&mut t, 70_000, &mut busy(8));
        let r1 = c[&1] as f64 / c[&0] as f64;
        let r2 = c[&2] as f64 / c[&0] as f64;
        assert!((r1 - 2.0).abs() < 0.04 && (r2 - 4.0).abs() < 0.08, "{c:?}");
        // On bits: a child sending 3x the bits per run gets a third of the runs.
        let mut t = ClassTree::new(0);
        t.add_class(
            "wf",
            Policy::WeightedFair {
                resource: Resource::Bit,
            },
            None,
            0,
            1,
        )
        .unwrap();
        leaf(&mut t, "a", Some("wf"), 0, 1, 0);
        leaf(&mut t, "b", Some("wf"), 0, 1, 1);
        let mut bits = Map::new();
        for _ in 0..40_000 {
            t.schedule_once(&mut |id: TaskId| {
                let b = if id.0 == 0 { 300 } else { 100 };
                *bits.entry(id.0).or_insert(0u64) += b;
                TaskResult {
                    block: false,
                    packets: 1,
                    bits: b,
                }
            });
        }
        let r = bits[&0] as f64 / bits[&1] as f64;
        assert!((r - 1.0).abs() < 0.02, "bit shares {bits:?}");
    }

    #[test]
    fn a_returning_child_does_not_monopolise() {
        let mut t = ClassTree::new(0);
        t.add_class(
            "wf",
            Policy::WeightedFair {
                resource: Resource::Count,
            },
            None,
            0,
            1,
        )
        .unwrap();
        leaf(&mut t, "a", Some("wf"), 0, 1, 0);
        leaf(&mut t, "b", Some("wf"), 0, 1, 1);
        // b idle for a while, then busy again: afterwards the two alternate.
        counts(&mut t, 20_000, &mut |id: TaskId| TaskResult {
            block: id.0 == 1,
            packets: (id.0 == 0) as u32,
            bits: 0,
        });
        let deadline = Instant::now() + Duration::from_millis(50);
        while Instant::now() < deadline {
            t.schedule_once(&mut busy(8));
        }
        let c = counts(&mut t, 1000, &mut busy(8));
        assert!(c[&1] < 600 && c[&0] > 400, "{c:?}");
    }

    fn run_for(t: &mut ClassTree, d: Duration, run: &mut impl FnMut(TaskId) -> TaskResult) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            for _ in 0..256 {
                t.schedule_once(run);
            }
        }
    }

    fn rate(t: &ClassTree, name: &str, before: u64, secs: f64) -> f64 {
        (t.stats(name).unwrap().bits - before) as f64 / secs
    }

    #[test]
    fn rate_limit_is_accurate() {
        let mut t = ClassTree::new(0);
        t.add_class(
            "rl",
            Policy::RateLimit {
                resource: Resource::Bit,
                limit: 100_000_000,
                max_burst: 0,
            },
            None,
            0,
            1,
        )
        .unwrap();
        leaf(&mut t, "l", Some("rl"), 0, 1, 0);
        run_for(&mut t, Duration::from_millis(50), &mut busy(12_000));
        let b0 = t.stats("l").unwrap().bits;
        let t0 = Instant::now();
        run_for(&mut t, Duration::from_millis(500), &mut busy(12_000));
        let r = rate(&t, "l", b0, t0.elapsed().as_secs_f64());
        assert!((r / 1e8 - 1.0).abs() < 0.02, "{r} bps");
    }

    fn fig58(t: &mut ClassTree) {
        t.add_class(
            "root",
            Policy::WeightedFair {
                resource: Resource::Bit,
            },
            None,
            0,
            1,
        )
        .unwrap();
        for (vm, hi, lo, a, b) in [("vm1", "c1rl", "c2", 1, 2), ("vm2", "c3rl", "c4", 3, 4)] {
            let rl = format!("{vm}_limit");
            t.add_class(
                &rl,
                Policy::RateLimit {
                    resource: Resource::Bit,
                    limit: 5_000_000_000,
                    max_burst: 0,
                },
                Some("root"),
                0,
                1,
            )
            .unwrap();
            t.add_class(vm, Policy::Priority, Some(&rl), 0, 1).unwrap();
            t.add_class(
                hi,
                Policy::RateLimit {
                    resource: Resource::Bit,
                    limit: 1_000_000_000,
                    max_burst: 0,
                },
                Some(vm),
                0,
                1,
            )
            .unwrap();
            leaf(t, &format!("c{a}"), Some(hi), 0, 1, a);
            leaf(t, lo, Some(vm), 1, 1, b);
        }
    }

    #[test]
    fn figure_5_8_policy_delivers_each_class_its_rate() {
        let mut t = ClassTree::new(0);
        fig58(&mut t);
        let mut idle_c1 = false;
        let mut run = |id: TaskId| {
            if id.0 == 1 && idle_c1 {
                TaskResult {
                    block: true,
                    packets: 0,
                    bits: 0,
                }
            } else {
                TaskResult {
                    block: false,
                    packets: 1,
                    bits: 12_000,
                }
            }
        };
        run_for(&mut t, Duration::from_millis(100), &mut run);
        let names = ["c1", "c2", "c3", "c4"];
        let before: Vec<u64> = names.iter().map(|n| t.stats(n).unwrap().bits).collect();
        let t0 = Instant::now();
        run_for(&mut t, Duration::from_millis(800), &mut run);
        let secs = t0.elapsed().as_secs_f64();
        let gbps: Vec<f64> = names
            .iter()
            .zip(&before)
            .map(|(n, b)| rate(&t, n, *b, secs) / 1e9)
            .collect();
        for (g, want) in gbps.iter().zip([1.0, 4.0, 1.0, 4.0]) {
            assert!(
                (g - want).abs() / want < 0.05,
                "rates {gbps:?} Gbps, want 1/4/1/4"
            );
        }
        // Interactive traffic of VM1 stops: its background class takes VM1's whole 5 Gbps.
        idle_c1 = true;
        let mut run = |id: TaskId| {
            if id.0 == 1 && idle_c1 {
                TaskResult {
                    block: true,
                    packets: 0,
                    bits: 0,
                }
            } else {
                TaskResult {
                    block: false,
                    packets: 1,
                    bits: 12_000,
                }
            }
        };
        run_for(&mut t, Duration::from_millis(100), &mut run);
        let before: Vec<u64> = names.iter().map(|n| t.stats(n).unwrap().bits).collect();
        let t0 = Instant::now();
        run_for(&mut t, Duration::from_millis(800), &mut run);
        let secs = t0.elapsed().as_secs_f64();
        let gbps: Vec<f64> = names
            .iter()
            .zip(&before)
            .map(|(n, b)| rate(&t, n, *b, secs) / 1e9)
            .collect();
        assert!(gbps[0] < 0.01, "{gbps:?}");
        assert!((gbps[1] - 5.0).abs() / 5.0 < 0.05, "{gbps:?}");
        assert!(
            (gbps[2] - 1.0).abs() < 0.05 && (gbps[3] - 4.0).abs() / 4.0 < 0.05,
            "{gbps:?}"
        );
    }

    #[test]
    fn vms_share_fairly_under_a_common_limit() {
        let mut t = ClassTree::new(0);
        t.add_class(
            "cap",
            Policy::RateLimit {
                resource: Resource::Bit,
                limit: 6_000_000_000,
                max_burst: 0,
            },
            None,
            0,
            1,
        )
        .unwrap();
        t.add_class(
            "root",
            Policy::WeightedFair {
                resource: Resource::Bit,
            },
            Some("cap"),
            0,
            1,
        )
        .unwrap();
        leaf(&mut t, "vm1", Some("root"), 0, 1, 1);
        leaf(&mut t, "vm2", Some("root"), 0, 1, 2);
        run_for(&mut t, Duration::from_millis(100), &mut busy(12_000));
        let (a, b) = (t.stats("vm1").unwrap().bits, t.stats("vm2").unwrap().bits);
        let t0 = Instant::now();
        run_for(&mut t, Duration::from_millis(600), &mut busy(12_000));
        let secs = t0.elapsed().as_secs_f64();
        let (r1, r2) = (
            rate(&t, "vm1", a, secs) / 1e9,
            rate(&t, "vm2", b, secs) / 1e9,
        );
        assert!(
            (r1 - 3.0).abs() < 0.15 && (r2 - 3.0).abs() < 0.15,
            "{r1} {r2}"
        );
    }

    #[test]
    fn errors_leave_the_tree_unchanged() {
        let mut t = ClassTree::new(0);
        t.add_class("p", Policy::Priority, None, 0, 1).unwrap();
        leaf(&mut t, "a", Some("p"), 1, 1, 1);
        t.add_class(
            "rl",
            Policy::RateLimit {
                resource: Resource::Packet,
                limit: 10,
                max_burst: 0,
            },
            None,
            0,
            1,
        )
        .unwrap();
        leaf(&mut t, "b", Some("rl"), 0, 1, 2);
        let before = format!(
            "{:?}",
            t.list()
                .iter()
                .map(|i| (&i.name, &i.parent, &i.children))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            t.add_class("a", Policy::Leaf, None, 0, 1),
            Err(SchedError::NameTaken("a".into()))
        );
        assert_eq!(
            t.add_class("x", Policy::Leaf, Some("nope"), 0, 1),
            Err(SchedError::NoSuchClass("nope".into()))
        );
        assert!(matches!(
            t.add_class("x", Policy::Leaf, Some("a"), 0, 1),
            Err(SchedError::NotAParent { .. })
        ));
        assert!(matches!(
            t.add_class("x", Policy::Leaf, Some("rl"), 0, 1),
            Err(SchedError::NotAParent { .. })
        ));
        assert!(matches!(
            t.add_class("x", Policy::Leaf, Some("p"), 1, 1),
            Err(SchedError::DuplicatePriority { .. })
        ));
        assert_eq!(
            t.remove_class("p"),
            Err(SchedError::HasChildren("p".into()))
        );
        assert_eq!(
            t.add_class("!mine", Policy::Leaf, None, 0, 1),
            Err(SchedError::Reserved("!mine".into()))
        );
        assert_eq!(
            t.attach_task("p", TaskId(9)),
            Err(SchedError::NotALeaf("p".into()))
        );
        assert_eq!(
            t.attach_task("a", TaskId(9)),
            Err(SchedError::LeafBusy("a".into()))
        );
        assert!(t.set_parent("p", Some("a"), 0, 1).is_err());
        let after = format!(
            "{:?}",
            t.list()
                .iter()
                .map(|i| (&i.name, &i.parent, &i.children))
                .collect::<Vec<_>>()
        );
        assert_eq!(before, after);
        assert!(SchedError::DuplicatePriority {
            parent: "p".into(),
            priority: 1
        }
        .to_string()
        .contains("'p'"));
    }

    #[test]
    fn idle_tasks_back_off_and_come_back_promptly() {
        let mut t = ClassTree::new(0);
        t.add_class("rr", Policy::RoundRobin, None, 0, 1).unwrap();
        leaf(&mut t, "idle", Some("rr"), 0, 1, 0);
        leaf(&mut t, "busy", Some("rr"), 0, 1, 1);
        let mut has_work = false;
        let c = counts(&mut t, 20_000, &mut |id: TaskId| {
            let work = id.0 == 1 || has_work;
            TaskResult {
                block: !work,
                packets: work as u32,
                bits: 0,
            }
        });
        assert!(c[&0] < 2_000, "idle task polled {} of 20000 rounds", c[&0]);
        has_work = true;
        let start = Instant::now();
        let mut served = false;
        while start.elapsed() < Duration::from_millis(10) && !served {
            t.schedule_once(&mut |id: TaskId| {
                served |= id.0 == 0;
                TaskResult {
                    block: false,
                    packets: (id.0 == 1 || has_work) as u32,
                    bits: 0,
                }
            });
        }
        assert!(served, "backed-off task not served within 10 ms");
    }

    #[test]
    fn thousands_of_leaves_are_all_served() {
        for pol in [
            Policy::RoundRobin,
            Policy::WeightedFair {
                resource: Resource::Count,
            },
        ] {
            let mut t = ClassTree::new(0);
            t.add_class("top", pol.clone(), None, 0, 1).unwrap();
            for i in 0..4096u32 {
                leaf(&mut t, &format!("l{i}"), Some("top"), i as i32, 1, i);
            }
            let c = counts(&mut t, 3 * 4096, &mut busy(8));
            assert_eq!(c.len(), 4096, "{} served {} leaves", pol.name(), c.len());
        }
        let mut t = ClassTree::new(0);
        t.add_class("top", Policy::Priority, None, 0, 1).unwrap();
        for i in 0..4096u32 {
            leaf(&mut t, &format!("l{i}"), Some("top"), i as i32, 1, i);
        }
        // Only the highest-priority leaf has work: it alone is served.
        let c = counts(&mut t, 4096, &mut busy(8));
        assert_eq!(c.len(), 1);
        assert!(c.contains_key(&0));
    }

    #[test]
    fn detach_and_remove() {
        let mut t = ClassTree::new(3);
        assert_eq!(t.root_name(), "!default_rr_3");
        leaf(&mut t, "a", None, 0, 1, 7);
        assert_eq!(t.detach_task(TaskId(7)), Some("a".into()));
        assert!(!t.schedule_once(&mut busy(1)));
        t.remove_class("a").unwrap();
        assert!(t.is_empty());
    }

    #[test]
    #[ignore]
    fn print_round_costs() {
        for p in ["round_robin", "weighted_fair", "priority"] {
            let v: Vec<String> = [1, 16, 256, 4096]
                .iter()
                .map(|&n| format!("{:.1}", bench_round_cost(p, n, 1_000_000)))
                .collect();
            println!("{p}: {v:?}");
        }
    }
}

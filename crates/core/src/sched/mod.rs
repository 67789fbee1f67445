//! The per-worker hierarchical traffic-class scheduler (BESS's `TrafficClass` tree and
//! `Scheduler`; seed §5.4 / §5.5.4).
//!
//! A [`ClassTree`] is an arena of classes. Every non-leaf class has one policy that picks
//! which of its *runnable* children runs next; a leaf holds one task. A class is runnable
//! iff it is a leaf with a task that is not backing off, or a non-leaf that has a runnable
//! child and is not throttled. Runnability changes are propagated up the tree incrementally
//! (a blocked class leaves its parent's runnable set, an unblocked one rejoins it), so one
//! scheduling round costs O(depth × log(children)) and never allocates.
//!
//! * `priority`: the runnable child with the lowest priority number runs (BESS convention:
//!   lower number = higher priority). Runnable children are kept in a three-level bitmap
//!   over the priority-sorted child list, so the pick is O(1).
//! * `weighted_fair` on `count` | `cycle` | `packet` | `bit`: stride scheduling. stride =
//!   2^20 / share; after a child runs, its pass grows by stride × consumed / 2^10 (u128
//!   product). Runnable children are keyed by (pass, slot) and sit either in a tournament
//!   tree (lowest pass at the root, an update is log2(children) branch-free steps) or, if
//!   the key is larger than every key of a sorted FIFO, at that FIFO's end (O(1); with
//!   equal shares the child that ran always goes there); the lower of the two minima runs.
//!   Passes are rebased (lowered together) long before they could overflow. A child that
//!   blocks leaves the set keeping `remain = pass - global_pass` (its last increment; the
//!   global pass is the pass of the last child served) and rejoins at `min pass + remain`,
//!   so idle time is not banked as credit.
//! * `round_robin`: an intrusive circular list of runnable children with a cursor; a child
//!   that becomes runnable joins just before the cursor (the end of the current cycle).
//! * `rate_limit` on a resource, `limit` units/s (0 = unlimited), `max_burst` units: one
//!   child. A token bucket in work units (1 unit = 2^32 work units), refilled continuously
//!   from the TSC (exact u128 arithmetic) and capped at `max_burst`. A run may drive the
//!   bucket negative (debt); the class is then throttled ("pruned") until `now + debt /
//!   limit` through the tree's wake-up queue, then grafted back. With `max_burst == 0` the
//!   cap is the refill of [`DEFAULT_BURST_NS`] (20 ms of the limit). Tokens are only lost
//!   when they overflow the cap, i.e. when a class that wants to run is not served for
//!   that long: a worker descheduled by the OS for a few ms (one CFS slice on a shared
//!   host), and the backlog after such a stall, during which a round-robin parent serves
//!   each class once per cycle, so fast classes fall further behind before they catch up.
//!   Measured on a noisy 2-core VM with 1000 rate-limited classes (worker ~80% busy): a
//!   1 ms cap gave long-run accuracy 0.973-0.9994 for the worst class, 10 ms 0.998-0.9999,
//!   20 ms above 0.9998 in every run, even with 6 ms stalls. It is also the most a class
//!   can send at once after idling; set `max_burst` for tighter shaping.
//! * `leaf`: one task ([`TaskId`]); a leaf without a task is not runnable.
//!
//! Idle backoff: a run returning `block == true` with `packets == 0` means the task had
//! no work. Its leaf then backs off for [`BACKOFF_MIN_CYCLES`], doubling on each
//! consecutive idle run up to [`BACKOFF_MAX_CYCLES`], through the same wake-up queue; any
//! productive run resets the backoff. Backoff only makes idle tasks yield to busy ones: when
//! nothing else is runnable, the earliest backoff ends at once (no added latency at idle).
//!
//! Every tree has an implicit round-robin root `!default_rr_<wid>` that cannot be removed
//! or changed; classes added without a parent hang under it.

use std::fmt;
use std::str::FromStr;

mod bench;
mod bucket;
mod queue;
mod round;
mod stats;
#[cfg(test)]
mod tests;
mod tree;

pub use bench::bench_round_cost;
pub use tree::ClassTree;

/// Most children one class may have (BESS's limit).
pub const MAX_CHILDREN: usize = 16384;
/// First idle backoff of a leaf, in TSC cycles (it doubles on each consecutive idle run).
pub const BACKOFF_MIN_CYCLES: u64 = 1 << 10;
/// Longest idle backoff of a leaf, in TSC cycles.
pub const BACKOFF_MAX_CYCLES: u64 = 1 << 16;
/// With `max_burst == 0`, a rate limit may bank the refill of this many nanoseconds.
pub const DEFAULT_BURST_NS: u64 = 20_000_000;
/// Largest weighted-fair share (stride 2^20 / share must stay at least 1).
pub const MAX_SHARE: u32 = 1 << 20;

/// Most runs of one task a worker's round makes when its leaf is the only runnable one
/// under round-robin parents (see [`ClassTree::schedule_round`]).
pub const FUSED_RUNS: u64 = 16;
const NONE: u32 = u32::MAX;
const ROOT: usize = 0;
const STRIDE1: u64 = 1 << 20;
const PASS_SHIFT: u32 = 10;
const WORK_SHIFT: u32 = 32;
const MAX_PASS_INC: u64 = 1 << 46;

/// Opaque identifier of a task (a module's task, as numbered by the graph).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId(pub u32);

/// What one run of a task did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskResult {
    /// The task had nothing to do (with `packets == 0` its leaf backs off).
    pub block: bool,
    /// Packets processed by this run.
    pub packets: u32,
    /// Bits processed by this run.
    pub bits: u64,
}

/// What the runs of one task in a scheduling round reported (see
/// [`ClassTree::schedule_round`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunGroup {
    /// The runs that reported packets, summed (or the one run, whatever it reported).
    pub result: TaskResult,
    /// Runs summed in `result` (at least 1).
    pub runs: u64,
    /// A later run that reported no packets (or asked to block) and so ended the group:
    /// accounted on its own.
    pub idle_tail: Option<TaskResult>,
}

impl RunGroup {
    /// One run that did nothing and asks to block (a task that no longer exists).
    pub fn blocked() -> RunGroup {
        RunGroup {
            result: TaskResult {
                block: true,
                packets: 0,
                bits: 0,
            },
            runs: 1,
            idle_tail: None,
        }
    }

    /// Runs `run` once and, while each run reports packets, again, up to `max_runs` runs.
    #[inline(always)]
    pub fn collect(max_runs: u64, mut run: impl FnMut() -> TaskResult) -> RunGroup {
        let mut result = run();
        let mut runs = 1;
        let mut idle_tail = None;
        if result.packets != 0 && !result.block {
            while runs < max_runs {
                let next = run();
                if next.packets == 0 || next.block {
                    idle_tail = Some(next);
                    break;
                }
                runs += 1;
                result.packets += next.packets;
                result.bits += next.bits;
            }
        }
        RunGroup {
            result,
            runs,
            idle_tail,
        }
    }
}

/// A resource a policy measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// Number of runs.
    Count,
    /// TSC cycles spent in runs.
    Cycle,
    /// Packets reported by runs.
    Packet,
    /// Bits reported by runs.
    Bit,
}

impl Resource {
    /// The configuration name: "count", "cycle", "packet" or "bit".
    pub fn name(self) -> &'static str {
        match self {
            Resource::Count => "count",
            Resource::Cycle => "cycle",
            Resource::Packet => "packet",
            Resource::Bit => "bit",
        }
    }

    #[inline(always)]
    fn of(self, u: &Usage) -> u64 {
        match self {
            Resource::Count => 1,
            Resource::Cycle => u.cycles,
            Resource::Packet => u.packets,
            Resource::Bit => u.bits,
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Resource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "count" => Ok(Resource::Count),
            "cycle" => Ok(Resource::Cycle),
            "packet" => Ok(Resource::Packet),
            "bit" => Ok(Resource::Bit),
            _ => Err(format!(
                "unknown resource '{s}' (expected count, cycle, packet or bit)"
            )),
        }
    }
}

/// The policy of a traffic class.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// Strict priority: the runnable child with the lowest priority number runs.
    Priority,
    /// Stride scheduling by share on a resource.
    WeightedFair {
        /// What the shares divide.
        resource: Resource,
    },
    /// Runnable children take turns.
    RoundRobin,
    /// Token bucket on one child.
    RateLimit {
        /// What the limit counts.
        resource: Resource,
        /// Units per second; 0 = unlimited.
        limit: u64,
        /// Most units that may be banked; 0 = the refill of [`DEFAULT_BURST_NS`].
        max_burst: u64,
    },
    /// Holds one task.
    Leaf,
}

impl Policy {
    /// The configuration name: "priority", "weighted_fair", "round_robin", "rate_limit", "leaf".
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

/// Cumulative usage of a class (its own runs or its subtree's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcStats {
    /// Runs.
    pub count: u64,
    /// TSC cycles measured around the runs.
    pub cycles: u64,
    /// Packets reported.
    pub packets: u64,
    /// Bits reported.
    pub bits: u64,
}

impl TcStats {
    #[inline(always)]
    fn add(&mut self, u: &Usage) {
        self.count = self.count.wrapping_add(u.runs);
        self.cycles = self.cycles.wrapping_add(u.cycles);
        self.packets = self.packets.wrapping_add(u.packets);
        self.bits = self.bits.wrapping_add(u.bits);
    }
}

/// A snapshot of one traffic class.
#[derive(Clone, Debug)]
pub struct TcInfo {
    /// Class name.
    pub name: String,
    /// Its policy (with the parameters as configured).
    pub policy: Policy,
    /// Parent class (None for the implicit root).
    pub parent: Option<String>,
    /// Priority under a priority parent (lower = more important).
    pub priority: i32,
    /// Share under a weighted-fair parent.
    pub share: u32,
    /// Not runnable right now (no task, backing off, throttled, or no runnable child).
    pub blocked: bool,
    /// The task of a leaf.
    pub task: Option<TaskId>,
    /// Cumulative usage.
    pub stats: TcStats,
    /// Child class names (priority order under a priority class).
    pub children: Vec<String>,
}

/// Why a class-tree operation was refused (the tree is then unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedError {
    /// A class with this name exists.
    NameTaken(String),
    /// No class with this name.
    NoSuchClass(String),
    /// The class cannot have (more) children of this kind: it is a leaf.
    NotAParent {
        /// The would-be parent.
        name: String,
        /// Its policy name.
        policy: &'static str,
    },
    /// The parent is full (a rate limit has one child; others at most [`MAX_CHILDREN`]).
    TooManyChildren {
        /// The parent.
        parent: String,
    },
    /// A sibling under this priority parent already has this priority.
    DuplicatePriority {
        /// The priority parent.
        parent: String,
        /// The priority in use.
        priority: i32,
    },
    /// A weighted-fair share must be 1..=[`MAX_SHARE`] (1..=1024 recommended).
    InvalidShare(u32),
    /// The class still has children.
    HasChildren(String),
    /// The class is not a leaf.
    NotALeaf(String),
    /// The leaf holds a task.
    LeafBusy(String),
    /// Empty or reserved name ('!' prefix), or the implicit root.
    Reserved(String),
    /// The new parent is the class itself or one of its descendants.
    Cycle {
        /// The class being moved.
        name: String,
        /// The refused parent.
        parent: String,
    },
    /// `update_policy` cannot change the kind of policy.
    PolicyMismatch {
        /// The class.
        name: String,
        /// Its current policy name.
        policy: &'static str,
    },
    /// The task is already attached to a leaf.
    TaskAttached {
        /// The task.
        task: TaskId,
        /// The leaf holding it.
        leaf: String,
    },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::NameTaken(n) => write!(f, "traffic class '{n}' already exists"),
            SchedError::NoSuchClass(n) => write!(f, "traffic class '{n}' does not exist"),
            SchedError::NotAParent { name, policy } => {
                write!(
                    f,
                    "traffic class '{name}' is a {policy} and cannot have children"
                )
            }
            SchedError::TooManyChildren { parent } => write!(
                f,
                "traffic class '{parent}' cannot take another child \
                 (rate_limit takes one, other policies {MAX_CHILDREN})"
            ),
            SchedError::DuplicatePriority { parent, priority } => write!(
                f,
                "priority {priority} is already used by a child of '{parent}'"
            ),
            SchedError::InvalidShare(s) => write!(
                f,
                "invalid share {s}: must be 1..={MAX_SHARE} (1..=1024 recommended)"
            ),
            SchedError::HasChildren(n) => write!(f, "traffic class '{n}' still has children"),
            SchedError::NotALeaf(n) => write!(f, "traffic class '{n}' is not a leaf"),
            SchedError::LeafBusy(n) => write!(f, "leaf '{n}' holds a task"),
            SchedError::Reserved(n) => write!(
                f,
                "traffic class name '{n}' is reserved or invalid (names are non-empty, \
                 must not start with '!', and the implicit root cannot be changed)"
            ),
            SchedError::Cycle { name, parent } => write!(
                f,
                "cannot move traffic class '{name}' under '{parent}': that is '{name}' itself \
                 or one of its descendants"
            ),
            SchedError::PolicyMismatch { name, policy } => write!(
                f,
                "traffic class '{name}' is a {policy}; its policy kind cannot change"
            ),
            SchedError::TaskAttached { task, leaf } => {
                write!(f, "task {} is already attached to leaf '{leaf}'", task.0)
            }
        }
    }
}

impl std::error::Error for SchedError {}

// ---------------------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Usage {
    runs: u64,
    cycles: u64,
    packets: u64,
    bits: u64,
}

/// `v[i]` without a bounds check, for the per-round paths. Every index they use comes from
/// the tree's own links (parent, cursor, ring, runnable-set slots), which always name an
/// element: classes are never removed from the arrays, only marked free, and `check` in
/// the tests verifies the links after every operation. Debug builds check the bound.
#[inline(always)]
fn at<T>(v: &[T], i: usize) -> &T {
    debug_assert!(i < v.len(), "index {i} out of {}", v.len());
    // SAFETY: see above; the caller's index is an element of `v`.
    unsafe { v.get_unchecked(i) }
}

/// `&mut v[i]` without a bounds check (see [`at`]).
#[inline(always)]
fn at_mut<T>(v: &mut [T], i: usize) -> &mut T {
    debug_assert!(i < v.len(), "index {i} out of {}", v.len());
    // SAFETY: as for `at`.
    unsafe { v.get_unchecked_mut(i) }
}

#[inline(always)]
fn pass_inc(stride: u32, consumed: u64) -> u64 {
    let v = (stride as u128 * consumed as u128) >> PASS_SHIFT;
    if v > MAX_PASS_INC as u128 {
        MAX_PASS_INC
    } else {
        v as u64
    }
}

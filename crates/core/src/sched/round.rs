//! The scheduling round: waking, picking a leaf, running its task and accounting the usage.

use super::queue::{Wake, SLOT_MASK};
use super::tree::{ClassTree, Kind, MAX_IDLE};
use super::{
    at, at_mut, pass_inc, Resource, RunGroup, TaskId, TaskResult, Usage, BACKOFF_MIN_CYCLES, NONE,
    PASS_SHIFT, ROOT, WORK_SHIFT,
};
use crate::tsc::rdtsc;

impl ClassTree {
    /// Wakes every class whose backoff or throttle ended by `now`.
    #[inline(never)]
    fn wake(&mut self, now: u64) {
        while self.wakeups.next_at() <= now {
            let Wake { idx, gen, .. } = self.wakeups.pop();
            let i = idx as usize;
            if !self.cold[i].live || self.hot[i].wake_gen != gen {
                continue;
            }
            if self.hot[i].is_leaf {
                self.hot[i].backing_off = false;
            } else if let Kind::RateLimit(b) = &mut self.kinds[i] {
                b.throttled = false;
            } else {
                continue;
            }
            self.refresh(i);
        }
    }

    /// Nothing is runnable: ends idle backoffs early, earliest first, until something is.
    /// Backoff exists so idle tasks yield to busy ones; a worker with nothing else to do
    /// polls its idle tasks at once, so a packet reaching an idle port waits for no backoff
    /// (the worker spins either way). Rate-limit throttles run their course.
    #[cold]
    fn wake_idle_early(&mut self) {
        // Bounded per round so an idle round stays cheap: with more than this many throttles
        // queued ahead of every backoff, a backoff just runs its (short) course.
        let mut budget = 64;
        while self.hot[ROOT].blocked && self.wakeups.next_at() != u64::MAX && budget > 0 {
            budget -= 1;
            let w = self.wakeups.pop();
            let i = w.idx as usize;
            if !self.cold[i].live || self.hot[i].wake_gen != w.gen {
                continue;
            }
            if self.hot[i].is_leaf {
                self.hot[i].backing_off = false;
                self.refresh(i);
            } else {
                self.set_aside.push(w);
            }
        }
        while let Some(w) = self.set_aside.pop() {
            self.wakeups.push(w.at, w.idx, w.gen);
        }
    }

    /// One scheduling round: wakes expired backoffs/throttles, picks a leaf, runs its task
    /// and accounts the usage from the leaf up to the root. Returns false if nothing was
    /// runnable.
    #[inline]
    pub fn schedule_once(&mut self, run: &mut impl FnMut(TaskId) -> TaskResult) -> bool {
        self.schedule_round(&mut |t, max_runs| RunGroup::collect(max_runs, || run(t)), 1)
    }

    /// As [`ClassTree::schedule_once`], but a leaf that is the only runnable one under
    /// round-robin parents (no weighted-fair, priority or rate-limit class on its path, and
    /// no runnable sibling at any level) may run its task up to `max_runs` times in the
    /// round: `run(task, max)` runs it up to `max` times (1 unless the leaf is alone), as
    /// [`RunGroup::collect`] does, and reports the group. Picking again would choose the
    /// same leaf, so the walk down and the accounting up are made once for all the runs
    /// (and the caller may look the task up once). Usage is the same as that many rounds'
    /// (`count` counts runs); a run that reports no packets ends the group and is accounted
    /// on its own, so an idle task backs off as after a round of its own. A class woken
    /// meanwhile waits for the round's end (at most `max_runs` runs). The workers use this
    /// with [`FUSED_RUNS`](super::FUSED_RUNS).
    #[inline(always)]
    pub fn schedule_round(
        &mut self,
        run: &mut impl FnMut(TaskId, u64) -> RunGroup,
        max_runs: u64,
    ) -> bool {
        let mut t0 = self.last_tsc;
        if t0 == 0 || at(&self.hot, ROOT).blocked {
            t0 = rdtsc();
        }
        if self.wakeups.next_at() <= t0 {
            self.wake(t0);
        }
        if at(&self.hot, ROOT).blocked {
            self.wake_idle_early();
            if self.hot[ROOT].blocked {
                self.last_tsc = 0;
                return false;
            }
        }
        let (leaf, parent, alone) = self.pick();
        let task = TaskId(at(&self.hot, leaf).task);
        let g = run(task, if alone { max_runs } else { 1 });
        debug_assert!((1..=if alone { max_runs.max(1) } else { 1 }).contains(&g.runs));
        let t1 = rdtsc();
        self.account(leaf, parent, g.result, g.runs, t1.wrapping_sub(t0), t1);
        if let Some(tail) = g.idle_tail {
            // The run that ended the group is accounted on its own, as its own round would
            // be (an idle one backs its leaf off); its cycles are in the group's.
            self.account(leaf, parent, tail, 1, 0, t1);
        }
        self.last_tsc = t1;
        true
    }

    /// Forgets when the last round ended: the next round reads the clock afresh. Call it
    /// after a gap between rounds (a pause), so the gap is charged to no class.
    pub fn resync_clock(&mut self) {
        self.last_tsc = 0;
    }

    /// Walks from the root to the leaf each policy picks (the root must be runnable);
    /// returns the leaf, its parent, and whether it is alone: only round-robin classes
    /// above it, none with another runnable child.
    #[inline(always)]
    fn pick(&self) -> (usize, u32, bool) {
        let mut p = NONE;
        let mut n = ROOT;
        let mut alone = true;
        while !at(&self.hot, n).is_leaf {
            p = n as u32;
            n = match at(&self.kinds, n) {
                Kind::RoundRobin { cursor, nrun, .. } => {
                    alone &= *nrun == 1;
                    *cursor
                }
                Kind::WeightedFair { ready, .. } => {
                    alone = false;
                    ready.top_child()
                }
                Kind::Priority { children, ready } => {
                    alone = false;
                    *at(children, ready.first())
                }
                Kind::RateLimit(b) => {
                    alone = false;
                    b.child
                }
                Kind::Leaf => unreachable!("is_leaf"),
            } as usize;
        }
        debug_assert!(self.hot[n].has_task && !self.hot[n].blocked);
        (n, p, alone)
    }

    /// Accounts one run from `leaf` to the root; blocks classes along the path as needed.
    ///
    /// `parent` is the leaf's parent, known from the walk down: taking it from there rather
    /// than from the leaf's own record lets the parent's accounting start before that record
    /// (a cache miss when there are thousands of leaves) has arrived.
    #[inline(always)]
    fn account(
        &mut self,
        leaf: usize,
        parent: u32,
        r: TaskResult,
        runs: u64,
        cycles: u64,
        now: u64,
    ) {
        let u = Usage {
            runs,
            cycles,
            packets: r.packets as u64,
            bits: r.bits,
        };
        let hot = &mut self.hot[..];
        let kinds = &mut self.kinds[..];
        let cold = &mut self.cold[..];
        let wakeups = &mut self.wakeups;
        let h = at_mut(hot, leaf);
        h.stats.add(&u);
        if r.block && r.packets == 0 {
            h.idle = (h.idle + 1).min(MAX_IDLE);
            let backoff = BACKOFF_MIN_CYCLES << (h.idle - 1);
            h.backing_off = true;
            h.blocked = true;
            wakeups.push(now + backoff, leaf as u32, h.wake_gen);
        } else {
            h.idle = 0;
        }
        let mut c = leaf;
        let mut c_blocked = h.blocked;
        debug_assert_eq!(h.parent, parent);
        let mut p = parent;
        while p != NONE {
            let pi = p as usize;
            at_mut(hot, pi).stats.add(&u);
            let mut now_blocked = false;
            match at_mut(kinds, pi) {
                Kind::RoundRobin { cursor, nrun, .. } => {
                    debug_assert_eq!(*cursor as usize, c);
                    let hc = at(hot, c);
                    let (prev, next) = (hc.prev, hc.next);
                    if c_blocked {
                        *nrun -= 1;
                        if *nrun == 0 {
                            *cursor = NONE;
                            now_blocked = true;
                        } else {
                            at_mut(hot, prev as usize).next = next;
                            at_mut(hot, next as usize).prev = prev;
                            *cursor = next;
                        }
                        let hc = at_mut(hot, c);
                        hc.prev = NONE;
                        hc.next = NONE;
                    } else {
                        *cursor = next;
                    }
                }
                Kind::WeightedFair {
                    resource,
                    ready,
                    vtime,
                    ..
                } => {
                    // The child that ran holds the lowest key.
                    let key = ready.top_key();
                    let slot = (key & SLOT_MASK) as usize;
                    debug_assert_eq!(ready.child[slot] as usize, c);
                    let stride = *at(&ready.stride, slot);
                    // Counting runs (the usual resource) needs no multiplication.
                    let inc = if *resource == Resource::Count {
                        (stride >> PASS_SHIFT) as u64
                    } else {
                        pass_inc(stride, resource.of(&u))
                    };
                    ready.ran(key, inc, c_blocked, vtime);
                    if c_blocked {
                        at_mut(cold, c).remain = inc;
                        now_blocked = ready.nrun == 0;
                    }
                }
                Kind::Priority { ready, .. } => {
                    if c_blocked {
                        ready.unset(at(hot, c).aux);
                        now_blocked = ready.is_empty();
                    }
                }
                Kind::RateLimit(b) => {
                    if b.limit != 0 {
                        b.refill(now);
                        let consumed = b.resource.of(&u) as i128;
                        b.tokens -= consumed << WORK_SHIFT;
                        if b.tokens < 0 {
                            b.throttled = true;
                            let at = now.saturating_add(b.wait_cycles());
                            wakeups.push(at, p, hot[pi].wake_gen);
                        }
                    }
                    now_blocked = c_blocked || b.throttled;
                }
                Kind::Leaf => unreachable!("a leaf has no children"),
            }
            // Every class on the path was runnable (pick walks runnable classes only).
            let ph = at_mut(hot, pi);
            debug_assert!(!ph.blocked);
            if now_blocked {
                ph.blocked = true;
            }
            c_blocked = now_blocked;
            c = pi;
            p = ph.parent;
        }
    }
}

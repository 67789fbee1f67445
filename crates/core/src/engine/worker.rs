//! A worker thread: its scheduler loop (`worker_main`), the state it shares with the control
//! thread (`WorkerShared`, the graph cell, the pause protocol's requests and states), its idle
//! naps and its CPU pinning.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::exec::Context;
use crate::graph::Pipeline;
use crate::pool::PacketPool;
use crate::sched::{ClassTree, FUSED_RUNS};

pub(super) const REQ_RUN: u8 = 0;
pub(super) const REQ_PAUSE: u8 = 1;
pub(super) const REQ_STOP: u8 = 2;

pub(super) const ST_RUNNING: u8 = 0;
pub(super) const ST_PAUSED: u8 = 1;
pub(super) const ST_FINISHED: u8 = 2;

pub(super) struct GraphCell(pub(super) UnsafeCell<Pipeline>);
// SAFETY: see the engine's module comment; access is serialised by the pause protocol.
unsafe impl Sync for GraphCell {}
// SAFETY: the cell holds a `Pipeline`, which is `Send` (see graph.rs); moving the cell moves
// only that.
unsafe impl Send for GraphCell {}

pub(super) struct WorkerShared {
    /// What the control thread asks (checked by the worker every round, without the lock).
    pub(super) req: AtomicU8,
    pub(super) state: AtomicU8,
    /// True while the worker sits in its pause loop; written under this lock only. It also
    /// guards `clock`, so a reader sees run time that never goes backwards.
    pub(super) paused: Mutex<bool>,
    pub(super) clock: UnsafeCell<RunClock>,
    /// Wakes a paused worker.
    pub(super) cv: Condvar,
    /// Tells the control thread the worker has paused.
    pub(super) cv_ack: Condvar,
    pub(super) tree: UnsafeCell<ClassTree>,
    pub(super) rounds: AtomicU64,
    pub(super) idle_rounds: AtomicU64,
    /// Naps taken while idle (see [`Engine::set_idle_sleep_max_us`]).
    pub(super) naps: AtomicU64,
    /// Packets the worker's modules dropped ([`Context::dropped`], published every round).
    pub(super) silent_drops: AtomicU64,
}

/// TSC cycles a worker spent outside its pause loop.
#[derive(Clone, Copy, Default)]
pub(super) struct RunClock {
    /// Cycles of finished run periods.
    cycles: u64,
    /// TSC when the current run period began (0: paused).
    since: u64,
}

impl RunClock {
    fn total(&self, now: u64) -> u64 {
        match self.since {
            0 => self.cycles,
            s => self.cycles + now.saturating_sub(s),
        }
    }
}

// SAFETY: `tree` is touched by the control thread only while the worker is paused; `clock`
// only under the `paused` lock.
unsafe impl Sync for WorkerShared {}
// SAFETY: the fields are atomics, a mutex, a condvar and the `UnsafeCell<RunClock>` of plain
// integers; none is tied to the thread that made it.
unsafe impl Send for WorkerShared {}

impl WorkerShared {
    fn start_clock(&self) {
        let _g = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: under the `paused` lock.
        unsafe { (*self.clock.get()).since = crate::tsc::rdtsc().max(1) };
    }

    /// Ends the current run period. Caller holds the `paused` lock.
    unsafe fn stop_clock(&self) {
        let c = &mut *self.clock.get();
        c.cycles = c.total(crate::tsc::rdtsc());
        c.since = 0;
    }

    pub(super) fn run_cycles(&self) -> u64 {
        let _g = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: under the `paused` lock.
        unsafe { (*self.clock.get()).total(crate::tsc::rdtsc()) }
    }
}

/// How long a worker must have found no packet before it starts to nap, in nanoseconds.
const IDLE_BEFORE_NAP_NS: u64 = 1_000_000;
/// A worker's first nap, in µs (it doubles per idle round up to the maximum).
const FIRST_NAP_US: u32 = 8;

/// CPU ids present on the machine (`/sys/devices/system/cpu/present`, e.g. "0-3,8"), whatever
/// the daemon's own affinity mask: BESS's `is_cpu_present`.
fn present_cpus() -> Vec<usize> {
    let parse = |text: &str| -> Option<Vec<usize>> {
        let mut out = Vec::new();
        for part in text.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
                None => out.push(part.parse().ok()?),
            }
        }
        Some(out)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/present")
        .ok()
        .and_then(|t| parse(&t))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            // SAFETY: plain sysconf query.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            (0..n.max(1) as usize).collect()
        })
}

pub(super) fn check_core(core: usize) -> Result<()> {
    let cpus = present_cpus();
    if cpus.contains(&core) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "core {core} does not exist (this machine has cores {})",
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )))
}

fn pin_to(core: usize) -> std::io::Result<()> {
    // SAFETY: plain libc calls on a zeroed cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An idle worker's naps (see [`Engine::set_idle_sleep_max_us`]).
#[derive(Default)]
struct Napper {
    /// TSC of the first round of the current idle spell (0: not idle).
    idle_since: u64,
    /// The next nap, in µs (0: not napping yet).
    next_us: u32,
    /// Idle rounds to run before the next nap, so every task is polled between naps.
    polls_left: usize,
}

impl Napper {
    /// A round found packets: the idle spell is over.
    #[inline(always)]
    fn busy(&mut self) {
        self.idle_since = 0;
        self.next_us = 0;
        self.polls_left = 0;
    }

    /// A round found no packet; naps once the spell has lasted `IDLE_BEFORE_NAP_NS`, then
    /// after every `classes` idle rounds (the scheduler runs the idle task whose backoff
    /// ends first, so that many rounds poll every task once). Returns whether it slept.
    fn idle(&mut self, round: u64, max_us: u32, classes: usize) -> bool {
        if self.polls_left > 0 {
            self.polls_left -= 1;
            return false;
        }
        if self.next_us == 0 {
            // The clock is read every 64th idle round only: it costs more than a poll.
            if round & 63 != 0 {
                return false;
            }
            let now = crate::tsc::rdtsc();
            if self.idle_since == 0 {
                self.idle_since = now;
                return false;
            }
            if crate::tsc::cycles_to_ns(now.wrapping_sub(self.idle_since)) < IDLE_BEFORE_NAP_NS {
                return false;
            }
            self.next_us = FIRST_NAP_US;
            // Naps of a few µs need a timer slack below the default 50 µs.
            // SAFETY: prctl with plain integer arguments, for this thread only.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
        }
        let us = self.next_us.min(max_us);
        std::thread::sleep(Duration::from_micros(us as u64));
        self.next_us = us.saturating_mul(2).min(max_us);
        self.polls_left = classes;
        true
    }
}

pub(super) fn worker_main(
    wid: usize,
    core: usize,
    pin: bool,
    sh: Arc<WorkerShared>,
    graph: Arc<GraphCell>,
    pool: PacketPool,
    nap_max_us: Arc<AtomicU32>,
) {
    if pin {
        if let Err(e) = pin_to(core) {
            tracing::warn!(wid, core, "cannot pin worker: {e}");
        }
    }
    let mut ctx = Context::new(wid, &pool);
    sh.start_clock();
    let mut idle_streak = 0u32;
    let mut no_tasks = false;
    let mut round = 0u64;
    let mut napper = Napper::default();
    loop {
        match sh.req.load(Ordering::Acquire) {
            REQ_RUN => {}
            REQ_PAUSE => {
                ctx.release_cache();
                let mut paused = sh.paused.lock().unwrap();
                // SAFETY: `clock` is only touched under the `paused` lock.
                unsafe { sh.stop_clock() };
                sh.state.store(ST_PAUSED, Ordering::Release);
                *paused = true;
                sh.cv_ack.notify_all();
                while sh.req.load(Ordering::Acquire) == REQ_PAUSE {
                    paused = sh.cv.wait(paused).unwrap();
                }
                *paused = false;
                // SAFETY: as above; the control thread no longer touches the tree.
                unsafe {
                    (*sh.clock.get()).since = crate::tsc::rdtsc().max(1);
                    (*sh.tree.get()).resync_clock();
                }
                sh.state.store(ST_RUNNING, Ordering::Release);
                continue;
            }
            _ => break,
        }
        // SAFETY: the control thread mutates graph and tree only while we are paused.
        let (g, tree) = unsafe { (&*graph.0.get(), &mut *sh.tree.get()) };
        let mut packets = 0;
        let mut runs = 0u64;
        let ran = tree.schedule_round(
            &mut |t, max_runs| {
                let group = ctx.run_task_group(g, t, max_runs);
                // The last run's packets.
                packets = group.idle_tail.map_or(group.result.packets, |t| t.packets);
                runs += group.runs + group.idle_tail.is_some() as u64;
                group
            },
            FUSED_RUNS,
        );
        if packets > 0 {
            napper.busy();
        } else {
            let max = nap_max_us.load(Ordering::Relaxed);
            if max > 0 && napper.idle(round, max, tree.len()) {
                // The nap is nobody's run time: the next round reads the clock afresh.
                tree.resync_clock();
                sh.naps
                    .store(sh.naps.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        }
        // The cached clock is refreshed every 64 task runs (a round may make several).
        let next = round.wrapping_add(runs.max(1));
        if round & 63 == 0 || (round >> 6) != (next.wrapping_sub(1) >> 6) {
            ctx.refresh_now();
        }
        round = next;
        sh.rounds
            .store(sh.rounds.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // Published every round (a relaxed store of what the context counted), so a paused
        // worker's figure is final.
        sh.silent_drops.store(ctx.dropped(), Ordering::Relaxed);
        if !ran {
            sh.idle_rounds.store(
                sh.idle_rounds.load(Ordering::Relaxed) + 1,
                Ordering::Relaxed,
            );
            idle_streak = idle_streak.saturating_add(1);
            if idle_streak.is_multiple_of(1024) {
                no_tasks = tree.tasks().is_empty();
            }
            if no_tasks {
                // No task at all: nothing to poll, so give the core back until reconfigured.
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::hint::spin_loop();
            }
        } else {
            idle_streak = 0;
            no_tasks = false;
        }
    }
    ctx.release_cache();
    let _g = sh.paused.lock().unwrap();
    // SAFETY: under the `paused` lock.
    unsafe { sh.stop_clock() };
    sh.state.store(ST_FINISHED, Ordering::Release);
    sh.cv_ack.notify_all();
}

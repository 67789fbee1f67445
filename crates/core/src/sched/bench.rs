//! The cost of a scheduling round, for the benchmarks.

use super::{ClassTree, Policy, Resource, TaskId, TaskResult, MAX_CHILDREN};
use crate::tsc::{hz, rdtsc};

/// Average TSC cycles per `schedule_once` round with `leaves` always-busy trivial tasks
/// under one `policy` class ("round_robin", "weighted_fair" on count, or "priority");
/// NaN for another policy name.
///
/// Over the timed rounds only, the lower of the TSC span and the thread's CPU time at the
/// TSC rate: on a busy machine the span also counts time the thread was descheduled, which
/// its CPU time does not. (A caller's CPU time around this call would also count building
/// the tree, which for a priority class sorts the children at every added class: at 4 096
/// classes that outweighs two million rounds.)
pub fn bench_round_cost(policy: &str, leaves: usize, rounds: u64) -> f64 {
    let pol = match policy {
        "round_robin" => Policy::RoundRobin,
        "weighted_fair" => Policy::WeightedFair {
            resource: Resource::Count,
        },
        "priority" => Policy::Priority,
        _ => return f64::NAN,
    };
    let leaves = leaves.clamp(1, MAX_CHILDREN);
    let mut t = ClassTree::new(0);
    t.add_class("bench", pol, None, 0, 1).expect("bench class");
    for i in 0..leaves {
        let name = format!("bench_leaf{i}");
        t.add_class(&name, Policy::Leaf, Some("bench"), i as i32, 1)
            .expect("bench leaf");
        t.attach_task(&name, TaskId(i as u32)).expect("bench task");
    }
    let mut task = |_t: TaskId| TaskResult {
        block: false,
        packets: 32,
        bits: 32 * 64 * 8,
    };
    for _ in 0..rounds.min(100_000) {
        std::hint::black_box(t.schedule_once(&mut task));
    }
    let rounds = rounds.max(1);
    let hz = hz() as f64;
    let c0 = thread_cpu_ns();
    let t0 = rdtsc();
    for _ in 0..rounds {
        std::hint::black_box(t.schedule_once(&mut task));
    }
    let t1 = rdtsc();
    let cpu = thread_cpu_ns().saturating_sub(c0) as f64 * hz / 1e9;
    ((t1 - t0) as f64).min(cpu) / rounds as f64
}

/// This thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

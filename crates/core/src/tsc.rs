//! Time-stamp counter access and calibration.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reads the CPU time-stamp counter (monotonic, constant rate on all supported CPUs).
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC is in every x86_64 CPU and only reads the counter.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

static TSC_HZ: OnceLock<u64> = OnceLock::new();

/// TSC ticks per second, measured once against the monotonic clock (about 20 ms).
pub fn hz() -> u64 {
    *TSC_HZ.get_or_init(|| {
        #[cfg(not(target_arch = "x86_64"))]
        {
            1_000_000_000
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut best = 0u64;
            for _ in 0..3 {
                let t0 = Instant::now();
                let c0 = rdtsc();
                while t0.elapsed() < Duration::from_millis(10) {
                    std::hint::spin_loop();
                }
                let c1 = rdtsc();
                let ns = t0.elapsed().as_nanos() as u64;
                let est = (c1 - c0) as u128 * 1_000_000_000u128 / ns as u128;
                best = best.max(est as u64);
            }
            best
        }
    })
}

/// Converts TSC cycles to nanoseconds.
pub fn cycles_to_ns(cycles: u64) -> u64 {
    (cycles as u128 * 1_000_000_000u128 / hz() as u128) as u64
}

/// Converts nanoseconds to TSC cycles.
pub fn ns_to_cycles(ns: u64) -> u64 {
    (ns as u128 * hz() as u128 / 1_000_000_000u128) as u64
}

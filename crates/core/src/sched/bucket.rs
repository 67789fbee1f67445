//! The token bucket of a rate-limit class.

use super::{Resource, DEFAULT_BURST_NS, NONE, WORK_SHIFT};
use crate::tsc::hz;

/// Token-bucket state of a rate-limit class.
#[derive(Clone, Debug)]
pub(super) struct Bucket {
    pub(super) resource: Resource,
    pub(super) limit: u64,
    pub(super) max_burst: u64,
    pub(super) child: u32,
    /// Work units per TSC cycle, times 2^32.
    pub(super) rate: u128,
    /// TSC cycles per unit (for wake-up times only; the tokens are exact).
    pub(super) cycles_per_unit: f64,
    /// Most banked work units.
    pub(super) cap: i128,
    /// Banked work units (negative = debt).
    pub(super) tokens: i128,
    /// TSC of the last refill.
    pub(super) last: u64,
    pub(super) throttled: bool,
}

impl Bucket {
    pub(super) fn new(resource: Resource, limit: u64, max_burst: u64, now: u64) -> Self {
        let mut b = Bucket {
            resource,
            limit: 0,
            max_burst: 0,
            child: NONE,
            rate: 0,
            cycles_per_unit: 0.0,
            cap: 0,
            tokens: 0,
            last: now,
            throttled: false,
        };
        b.configure(limit, max_burst);
        b
    }

    pub(super) fn configure(&mut self, limit: u64, max_burst: u64) {
        self.limit = limit;
        self.max_burst = max_burst;
        let l = limit.min(1 << 62) as u128;
        let hz = hz().max(1);
        self.rate = (l << 64) / hz as u128;
        self.cycles_per_unit = if limit == 0 {
            0.0
        } else {
            hz as f64 / limit as f64
        };
        let burst_work: u128 = if max_burst == 0 {
            (l << WORK_SHIFT) * DEFAULT_BURST_NS as u128 / 1_000_000_000
        } else {
            (max_burst as u128) << WORK_SHIFT
        };
        self.cap = burst_work as i128;
    }

    /// Refills up to `now`, capped.
    #[inline]
    pub(super) fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.last);
        self.last = now;
        let add = if self.rate <= u64::MAX as u128 {
            // One 64 × 64 → 128-bit multiply: the usual case (limit below the TSC rate).
            ((elapsed as u128 * self.rate) >> WORK_SHIFT).min(1 << 100) as i128
        } else {
            match (elapsed as u128).checked_mul(self.rate) {
                Some(x) => (x >> WORK_SHIFT).min(1 << 100) as i128,
                None => 1 << 100,
            }
        };
        self.tokens = (self.tokens + add).min(self.cap);
    }

    /// TSC cycles until the debt is repaid (rounded up).
    #[inline]
    pub(super) fn wait_cycles(&self) -> u64 {
        let debt = (-self.tokens).max(0) as u128;
        // Two 64-bit halves: an i128 → f64 conversion would be a library call.
        let debt = ((debt >> 64) as u64 as f64 * 18_446_744_073_709_551_616.0 + debt as u64 as f64)
            * (1.0 / (1u64 << WORK_SHIFT) as f64);
        // Truncated, plus two: never early despite rounding (`ceil` would be a libm call).
        let w = debt * self.cycles_per_unit;
        if w < (1u64 << 62) as f64 {
            w as u64 + 2
        } else {
            1 << 62
        }
    }
}

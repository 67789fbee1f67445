//! The counters the workers write and the control thread reads.

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter read by the control thread, written by one worker ([`Counter::add`]) or several
/// ([`Counter::add_shared`]).
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (load + store: one writer per counter, so no locked instruction).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    /// Adds `n` with a locked instruction, for a counter several workers may update.
    #[inline(always)]
    pub fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds `n`: [`Counter::add_shared`] if `shared`, else [`Counter::add`].
    #[inline(always)]
    pub fn add_by(&self, n: u64, shared: bool) {
        if shared {
            self.add_shared(n)
        } else {
            self.add(n)
        }
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Sets to zero.
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

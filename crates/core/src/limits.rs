//! Limits shared across the core (kept in a leaf file, so that what uses them needs nothing
//! else: the module API reads the worker limit without depending on the engine).

/// Most workers (BESS's kMaxWorkers).
pub const MAX_WORKERS: usize = 64;

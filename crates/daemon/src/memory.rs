//! Giving freed heap memory back to the system. glibc's allocator keeps what a program
//! frees for reuse and returns it to the kernel only from the top of the heap, so after a
//! large table or a large argument is freed (a million ExactMatch rules: about 1.6 GB) the
//! daemon would keep that memory resident for good. The handlers that may free a lot
//! (destroying and resetting modules and ports, transactions, table commands, any request
//! larger than [`LARGE_REQUEST`]) call [`release_free_heap`] when they are done.

/// A request at least this large (its argument bytes) has its decoded form freed afterwards.
pub const LARGE_REQUEST: usize = 1 << 20;

/// Returns the heap's free pages to the kernel (glibc's `malloc_trim`); a no-op elsewhere.
/// It costs about a pass over the heap's free chunks: cheap for the daemon's usual heap.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

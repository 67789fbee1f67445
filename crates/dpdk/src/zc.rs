//! Zero copy between DPDK and Bessemer: mempools whose mbufs are laid over Bessemer's packet
//! frames (the shim's `bessemer_zc` mempool ops), so a device receives into and sends from
//! Bessemer's buffers. What a frame is, and how one is allocated and freed, is Bessemer's
//! business: a [`FrameSource`] answers for it.

use std::ffi::c_void;

use crate::DpdkError;

/// Where a zero-copy mempool's frames come from.
pub trait FrameSource: Send + Sync {
    /// Allocates `hdrs.len()` frames, all or none: where each one's mbuf header goes (64-byte
    /// aligned, 128 bytes in front of where its data should start; frames are aligned to
    /// their size) and its descriptor (returned to [`FrameSource::free`]).
    fn alloc(&self, hdrs: &mut [*mut u8], descs: &mut [*mut c_void]) -> bool;
    /// Frees frames DPDK is done with (their descriptors).
    fn free(&self, descs: &[*mut c_void]);
    /// Frames that could still be allocated.
    fn available(&self) -> usize;
    /// Bytes per frame.
    fn frame_size(&self) -> u32;
}

/// Bytes of a frame's headroom the mbuf header takes.
pub const MBUF_HEADER: usize = 128;
/// Headroom a packet needs to be sent without a copy: the header, placed 64-byte aligned.
pub const ZC_HEADROOM: usize = MBUF_HEADER + 64;

/// A DPDK mempool answered by a [`FrameSource`].
pub struct ZcMempool {
    mp: *mut c_void,
    /// The mempool's pool_config points here (a thin pointer to the fat one).
    _src: Box<Box<dyn FrameSource>>,
}

// SAFETY: the mempool is used by the threads DPDK's rules allow; the source is Sync.
unsafe impl Send for ZcMempool {}
// SAFETY: as for `Send`: `&ZcMempool` gives out only the mempool pointer (crate-internal)
// for DPDK's calls, whose allocations and frees land in the `Sync` frame source; neither
// field changes after construction.
unsafe impl Sync for ZcMempool {}

impl std::fmt::Debug for ZcMempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcMempool").field("mp", &self.mp).finish()
    }
}

impl ZcMempool {
    /// Makes a mempool named `name` (unique) of up to `n` mbufs over `src`'s frames, with a
    /// per-worker cache of `cache` mbufs (0: none; it pays for a TX queue's, whose driver
    /// frees one mbuf at a time).
    pub fn new(
        name: &str,
        src: Box<dyn FrameSource>,
        n: u32,
        cache: u32,
    ) -> Result<ZcMempool, DpdkError> {
        #[cfg(dpdk)]
        {
            let fs = src.frame_size();
            let src = Box::new(src);
            let ctx = &*src as *const Box<dyn FrameSource> as *mut c_void;
            let c = std::ffi::CString::new(name).unwrap_or_default();
            // SAFETY: ctx outlives the mempool (both are dropped together, mempool first).
            let mp = unsafe { crate::ffi::bsm_zc_mempool(c.as_ptr(), ctx, fs, n, cache) };
            if mp.is_null() {
                return Err(DpdkError {
                    errno: libc::ENOMEM,
                    msg: format!("zero-copy mempool '{name}' could not be made"),
                });
            }
            Ok(ZcMempool { mp, _src: src })
        }
        #[cfg(not(dpdk))]
        {
            let _ = (name, src, n, cache);
            Err(crate::available().unwrap_err())
        }
    }

    pub(crate) fn raw(&self) -> *mut c_void {
        self.mp
    }
}

impl Drop for ZcMempool {
    fn drop(&mut self) {
        #[cfg(dpdk)]
        // SAFETY: no device uses the mempool any more (its port is closed first).
        unsafe {
            crate::ffi::bsm_mempool_free(self.mp)
        };
    }
}

/// Whether zero copy can run here (the EAL uses IOVA as VA, the mbuf field is registered).
pub fn zero_copy_usable() -> bool {
    #[cfg(dpdk)]
    // SAFETY: plain DPDK query.
    return unsafe { crate::ffi::bsm_zc_usable() } != 0;
    #[cfg(not(dpdk))]
    false
}

#[cfg(dpdk)]
fn source<'a>(ctx: *mut c_void) -> &'a dyn FrameSource {
    // SAFETY: ctx is the pool_config ZcMempool::new gave the mempool: a live Box<dyn>.
    unsafe { &**(ctx as *const Box<dyn FrameSource>) }
}

#[cfg(dpdk)]
#[no_mangle]
extern "C" fn bsm_zc_alloc(
    ctx: *mut c_void,
    hdrs: *mut *mut u8,
    descs: *mut *mut c_void,
    n: u32,
) -> i32 {
    // SAFETY: the shim passes arrays of n slots.
    let (f, d) = unsafe {
        (
            std::slice::from_raw_parts_mut(hdrs, n as usize),
            std::slice::from_raw_parts_mut(descs, n as usize),
        )
    };
    if source(ctx).alloc(f, d) {
        0
    } else {
        -libc::ENOBUFS
    }
}

#[cfg(dpdk)]
#[no_mangle]
extern "C" fn bsm_zc_free(ctx: *mut c_void, descs: *const *mut c_void, n: u32) {
    // SAFETY: the shim passes an array of n descriptors.
    source(ctx).free(unsafe { std::slice::from_raw_parts(descs, n as usize) });
}

#[cfg(dpdk)]
#[no_mangle]
extern "C" fn bsm_zc_count(ctx: *mut c_void) -> u32 {
    source(ctx).available().min(u32::MAX as usize) as u32
}

#[cfg(dpdk)]
#[no_mangle]
extern "C" fn bsm_zc_frame_size(ctx: *mut c_void) -> u32 {
    source(ctx).frame_size()
}

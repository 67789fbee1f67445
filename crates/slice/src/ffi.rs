//! The C ABI (`include/slice.h`): an opaque `bslice` handle and batch calls mirroring
//! [`Slice`]. Every function tolerates a null handle (returns 0 / -1 / null).

use std::ffi::{c_char, c_int, CStr};
use std::time::Duration;

use crate::app::{AppCounters, Desc, Slice};

thread_local! {
    static LAST_ERROR: std::cell::RefCell<std::ffi::CString> = std::cell::RefCell::default();
}

fn set_error(e: impl std::fmt::Display) {
    let s = std::ffi::CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = s);
}

/// The message of the last failed `bslice_attach` on this thread ("" if none).
#[no_mangle]
pub extern "C" fn bslice_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Attaches to the slice at `path`, waiting up to `timeout_ms` for the daemon; null on
/// failure (see `bslice_last_error`).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn bslice_attach(path: *const c_char, timeout_ms: u32) -> *mut Slice {
    if path.is_null() {
        set_error("null path");
        return std::ptr::null_mut();
    }
    let Ok(p) = CStr::from_ptr(path).to_str() else {
        set_error("path is not UTF-8");
        return std::ptr::null_mut();
    };
    match Slice::attach_timeout(p, Duration::from_millis(timeout_ms as u64)) {
        Ok(s) => Box::into_raw(Box::new(s)),
        Err(e) => {
            set_error(e);
            std::ptr::null_mut()
        }
    }
}

/// Detaches (closes the socket and unmaps the region) and frees the handle.
///
/// # Safety
/// `s` came from `bslice_attach` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn bslice_detach(s: *mut Slice) {
    if !s.is_null() {
        drop(Box::from_raw(s));
    }
}

/// Receives up to `n` frames into `out`; returns how many.
///
/// # Safety
/// `s` is a live handle, `out` has room for `n` descriptors.
#[no_mangle]
pub unsafe extern "C" fn bslice_recv_batch(s: *mut Slice, out: *mut Desc, n: u32) -> u32 {
    let (Some(s), false) = (s.as_mut(), out.is_null()) else {
        return 0;
    };
    s.recv_batch(std::slice::from_raw_parts_mut(out, n as usize)) as u32
}

/// The first byte of the packet `d` names (valid while attached; writable up to its frame's
/// end).
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn bslice_frame(s: *mut Slice, d: Desc) -> *mut u8 {
    match s.as_mut() {
        Some(s) => s.frame_mut(d).as_mut_ptr(),
        None => std::ptr::null_mut(),
    }
}

/// Gives `n` received frames back to the daemon.
///
/// # Safety
/// `s` is a live handle, `ds` holds `n` descriptors.
#[no_mangle]
pub unsafe extern "C" fn bslice_release(s: *mut Slice, ds: *const Desc, n: u32) {
    if let (Some(s), false) = (s.as_mut(), ds.is_null()) {
        s.release(std::slice::from_raw_parts(ds, n as usize));
    }
}

/// Takes up to `n` empty send frames into `out` (after the headroom); returns how many.
///
/// # Safety
/// `s` is a live handle, `out` has room for `n` descriptors.
#[no_mangle]
pub unsafe extern "C" fn bslice_alloc_tx(s: *mut Slice, out: *mut Desc, n: u32) -> u32 {
    let (Some(s), false) = (s.as_mut(), out.is_null()) else {
        return 0;
    };
    s.alloc_tx(std::slice::from_raw_parts_mut(out, n as usize)) as u32
}

/// Queues `n` filled send frames; returns how many were queued (the rest stay the app's).
///
/// # Safety
/// `s` is a live handle, `ds` holds `n` descriptors.
#[no_mangle]
pub unsafe extern "C" fn bslice_send_batch(s: *mut Slice, ds: *const Desc, n: u32) -> u32 {
    let (Some(s), false) = (s.as_mut(), ds.is_null()) else {
        return 0;
    };
    s.send_batch(std::slice::from_raw_parts(ds, n as usize)) as u32
}

/// Returns unsent send frames to the app's spare list.
///
/// # Safety
/// `s` is a live handle, `ds` holds `n` descriptors.
#[no_mangle]
pub unsafe extern "C" fn bslice_free_tx(s: *mut Slice, ds: *const Desc, n: u32) {
    if let (Some(s), false) = (s.as_mut(), ds.is_null()) {
        s.free_tx(std::slice::from_raw_parts(ds, n as usize));
    }
}

/// Waits for a frame: spins `spin_us`, then sleeps on the eventfd up to `timeout_ms`
/// (negative: forever). 1 = ready, 0 = timed out, -1 = detached or error.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn bslice_wait(s: *mut Slice, spin_us: u32, timeout_ms: c_int) -> c_int {
    let Some(s) = s.as_mut() else { return -1 };
    let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
    match s.wait(Duration::from_micros(spin_us as u64), timeout) {
        Ok(true) => 1,
        Ok(false) => 0,
        Err(_) => -1,
    }
}

/// Frame size in bytes.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn bslice_frame_size(s: *const Slice) -> u32 {
    s.as_ref().map_or(0, |s| s.frame_size() as u32)
}

/// Copies the app's counters into `out`.
///
/// # Safety
/// `s` is a live handle, `out` points to writable memory for one struct.
#[no_mangle]
pub unsafe extern "C" fn bslice_counters(s: *const Slice, out: *mut AppCounters) {
    if let (Some(s), false) = (s.as_ref(), out.is_null()) {
        *out = s.counters();
    }
}

//! Socket options read and written as plain values, with errors naming the option.

use std::os::fd::AsRawFd;

use crate::error::os_error;
use crate::Result;

/// Sets socket option `opt` at `level` to `val`, or the OS error naming `what`.
pub fn setsockopt<T>(fd: &impl AsRawFd, level: i32, opt: i32, val: &T, what: &str) -> Result<()> {
    // SAFETY: val points at a live T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_error(what));
    }
    Ok(())
}

/// Reads a plain-data socket option (`T` must be valid when all-zero); None if it fails.
pub fn getsockopt<T: Copy>(fd: &impl AsRawFd, level: i32, opt: i32) -> Option<T> {
    // SAFETY: callers use plain C structs and integers, for which zero is valid.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: v is a writable T of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

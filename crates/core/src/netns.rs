//! Network namespaces: drivers open sockets and look up interfaces inside the namespace a
//! port names. A socket keeps the namespace it was created in, so only creation runs there.

use crate::{Error, Result};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use crate::error::{io_error, os_error};

/// The file of a namespace: a name made by `ip netns add` (under /var/run/netns) or a path.
pub fn path_of(netns: &str) -> String {
    if netns.contains('/') {
        netns.to_string()
    } else {
        format!("/var/run/netns/{netns}")
    }
}

/// Runs `f` in network namespace `netns` (empty: the daemon's own) and returns its result.
/// It runs on a short-lived thread, so the daemon's threads never change namespace.
pub fn run_in<T: Send>(netns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    if netns.is_empty() {
        return f();
    }
    let path = path_of(netns);
    let file = std::fs::File::open(&path)
        .map_err(|e| Error::not_found(format!("network namespace '{netns}' ({path}): {e}")))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: a valid namespace fd; setns affects only this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::new(
                    e.raw_os_error().unwrap_or(libc::EPERM),
                    format!("cannot enter network namespace '{netns}': {e}"),
                ));
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(Error::new(libc::EFAULT, "driver setup thread panicked")))
    })
}

/// The index of interface `ifname` in the current namespace, or an error naming it.
pub fn ifindex(ifname: &str) -> Result<u32> {
    let c = CString::new(ifname)
        .map_err(|_| Error::invalid(format!("interface name '{ifname}' contains NUL")))?;
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(Error::invalid(format!(
            "'{ifname}' is not a valid interface name (1..{} bytes)",
            libc::IFNAMSIZ - 1
        )));
    }
    // SAFETY: a valid NUL-terminated name.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(Error::not_found(format!("no interface named '{ifname}'")));
    }
    Ok(idx)
}

/// A socket created by `libc::socket`, or the OS error naming `what`.
pub fn socket(domain: i32, ty: i32, proto: i32, what: &str) -> Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(os_error(what));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

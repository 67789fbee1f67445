//! The C ABI (`include/megapipe.h`): thin wrappers over [`Channel`] returning 0 or -errno.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use crate::{net, Channel, Config, Error, Handle};

/// `struct mp_config` (NULL for defaults).
#[repr(C)]
pub struct MpConfig {
    /// CPU to pin the calling thread and channel to; -1 leaves it unpinned.
    pub cpu: i32,
    /// Batching threshold; 0 means the default 32.
    pub batch_threshold: u32,
    /// Receive buffers in the ring (power of two); 0 means 1024.
    pub buffers: u32,
    /// Bytes per receive buffer; 0 means 4096.
    pub buffer_size: u32,
}

/// `struct mp_event`.
#[repr(C)]
pub struct MpEvent {
    /// `enum mp_command`.
    pub command: u32,
    /// 0 on success, else the errno.
    pub error: i32,
    /// Handle the request was issued on.
    pub handle: u64,
    /// Its cookie.
    pub cookie: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// MP_ACCEPT: the new connection.
    pub new_handle: u64,
    /// MP_READ: the received bytes (valid until the next mp_dispatch); MP_WRITE/MP_WRITEV:
    /// the buffer (first iovec) that was written, so it can be freed.
    pub data: *const u8,
}

fn code(e: Error) -> i32 {
    -e.errno()
}

macro_rules! chan {
    ($ch:expr) => {
        // SAFETY: every caller is an `unsafe extern "C"` entry point whose contract makes
        // `$ch` a live channel from `mp_create` (a channel belongs to one thread, as in the
        // C API); NULL is refused here.
        match unsafe { $ch.as_mut() } {
            Some(c) => c,
            None => return -libc::EINVAL,
        }
    };
}

/// `mp_create`.
///
/// # Safety
/// `cfg` is NULL or points at a valid `struct mp_config`.
#[no_mangle]
pub unsafe extern "C" fn mp_create(cfg: *const MpConfig) -> *mut Channel {
    let mut c = Config::default();
    if let Some(u) = cfg.as_ref() {
        c.cpu = (u.cpu >= 0).then_some(u.cpu as usize);
        if u.batch_threshold > 0 {
            c.batch_threshold = u.batch_threshold as usize;
        }
        if u.buffers > 0 {
            c.buffers = u.buffers.min(32768) as u16;
        }
        if u.buffer_size > 0 {
            c.buffer_size = u.buffer_size as usize;
        }
    }
    match Channel::new(c) {
        Ok(ch) => Box::into_raw(Box::new(ch)),
        Err(_) => std::ptr::null_mut(),
    }
}

/// `mp_destroy`.
///
/// # Safety
/// `ch` came from `mp_create` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mp_destroy(ch: *mut Channel) {
    if !ch.is_null() {
        drop(Box::from_raw(ch));
    }
}

/// `mp_register`: the channel takes ownership of `fd`.
///
/// # Safety
/// `ch` is a live channel; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mp_register(
    ch: *mut Channel,
    fd: i32,
    cookie: u64,
    cpu_mask: u64,
    out: *mut u64,
) -> i32 {
    let c = chan!(ch);
    if fd < 0 || out.is_null() {
        return -libc::EBADF;
    }
    match c.register(OwnedFd::from_raw_fd(fd), cookie, cpu_mask) {
        Ok(h) => {
            *out = h.0;
            0
        }
        Err(e) => code(e),
    }
}

/// `mp_unregister`: `*fd_out` gets the regular descriptor back, or -1 for a lightweight one.
///
/// # Safety
/// `ch` is a live channel; `fd_out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mp_unregister(ch: *mut Channel, h: u64, fd_out: *mut i32) -> i32 {
    let c = chan!(ch);
    match c.unregister(Handle(h)) {
        Ok(fd) => {
            let raw = fd.map_or(-1, |f| f.into_raw_fd());
            if let Some(o) = fd_out.as_mut() {
                *o = raw;
            } else if raw >= 0 {
                libc::close(raw);
            }
            0
        }
        Err(e) => code(e),
    }
}

/// `mp_set_cookie`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_set_cookie(ch: *mut Channel, h: u64, cookie: u64) -> i32 {
    chan!(ch)
        .set_cookie(Handle(h), cookie)
        .map_or_else(code, |_| 0)
}

/// `mp_accept`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_accept(ch: *mut Channel, h: u64, count: u32, lightweight: i32) -> i32 {
    chan!(ch)
        .accept(Handle(h), count, lightweight != 0)
        .map_or_else(code, |_| 0)
}

/// `mp_read`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_read(ch: *mut Channel, h: u64, size: usize) -> i32 {
    chan!(ch).read(Handle(h), size).map_or_else(code, |_| 0)
}

/// `mp_read_multishot`: one armed read delivering every arrival (see `Channel::read_multishot`).
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_read_multishot(ch: *mut Channel, h: u64) -> i32 {
    chan!(ch).read_multishot(Handle(h)).map_or_else(code, |_| 0)
}

/// `mp_stop_reading`: disarms a multishot read (it ends with ECANCELED).
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_stop_reading(ch: *mut Channel, h: u64) -> i32 {
    chan!(ch).stop_reading(Handle(h)).map_or_else(code, |_| 0)
}

/// `mp_write`: `buf` must stay valid until the MP_WRITE event.
///
/// # Safety
/// `ch` is a live channel; `buf..buf+len` is readable until the completion.
#[no_mangle]
pub unsafe extern "C" fn mp_write(ch: *mut Channel, h: u64, buf: *const u8, len: usize) -> i32 {
    if buf.is_null() && len > 0 {
        return -libc::EFAULT;
    }
    chan!(ch)
        .write_raw(Handle(h), buf, len)
        .map_or_else(code, |_| 0)
}

/// `mp_writev`: the iovec array is copied; the buffers must stay valid until MP_WRITEV.
///
/// # Safety
/// `ch` is a live channel; `iov` holds `iovcnt` entries pointing at readable memory.
#[no_mangle]
pub unsafe extern "C" fn mp_writev(
    ch: *mut Channel,
    h: u64,
    iov: *const libc::iovec,
    iovcnt: i32,
) -> i32 {
    if iov.is_null() || iovcnt <= 0 || iovcnt > 1024 {
        return -libc::EINVAL;
    }
    let v = std::slice::from_raw_parts(iov, iovcnt as usize);
    chan!(ch).writev_raw(Handle(h), v).map_or_else(code, |_| 0)
}

/// `mp_disconnect`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_disconnect(ch: *mut Channel, h: u64) -> i32 {
    chan!(ch).disconnect(Handle(h)).map_or_else(code, |_| 0)
}

/// `mp_close`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_close(ch: *mut Channel, h: u64) -> i32 {
    chan!(ch).close(Handle(h)).map_or_else(code, |_| 0)
}

/// `mp_flush`.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_flush(ch: *mut Channel) -> i32 {
    chan!(ch).flush().map_or_else(code, |_| 0)
}

/// `mp_dispatch`: 1 with `*ev` filled, 0 when `timeout_ms` passed (-1 waits forever), or -errno.
///
/// # Safety
/// `ch` is a live channel; `ev` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mp_dispatch(ch: *mut Channel, timeout_ms: i32, ev: *mut MpEvent) -> i32 {
    let c = chan!(ch);
    let Some(out) = ev.as_mut() else {
        return -libc::EINVAL;
    };
    let t = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
    match c.dispatch(t) {
        Ok(Some(e)) => {
            let data = c.data(&e);
            *out = MpEvent {
                command: e.command as u32,
                error: e.result.err().map_or(0, |x| x.0),
                handle: e.handle.0,
                cookie: e.cookie,
                bytes: e.result.unwrap_or(0) as u64,
                new_handle: e.new_handle.map_or(0, |h| h.0),
                data: if data.is_empty() {
                    e.written as *const u8
                } else {
                    data.as_ptr()
                },
            };
            1
        }
        Ok(None) => 0,
        Err(e) => code(e),
    }
}

/// `mp_connect`: an asynchronous TCP connect; MP_CONNECT reports the outcome.
///
/// # Safety
/// `ch` is a live channel; `addr` holds `len` bytes of a sockaddr; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mp_connect(
    ch: *mut Channel,
    addr: *const libc::sockaddr,
    len: u32,
    cookie: u64,
    out: *mut u64,
) -> i32 {
    let c = chan!(ch);
    if addr.is_null()
        || out.is_null()
        || len as usize > std::mem::size_of::<libc::sockaddr_storage>()
    {
        return -libc::EINVAL;
    }
    let mut storage: libc::sockaddr_storage = std::mem::zeroed();
    std::ptr::copy_nonoverlapping(
        addr as *const u8,
        &mut storage as *mut _ as *mut u8,
        len as usize,
    );
    let Ok(sa) = net::from_raw(&storage) else {
        return -libc::EAFNOSUPPORT;
    };
    match c.connect(sa, cookie) {
        Ok(h) => {
            *out = h.0;
            0
        }
        Err(e) => code(e),
    }
}

/// `mp_to_fd`: the fallback from a lightweight handle to a regular descriptor; returns the fd
/// (still owned by the channel) or -errno.
///
/// # Safety
/// `ch` is a live channel.
#[no_mangle]
pub unsafe extern "C" fn mp_to_fd(ch: *mut Channel, h: u64) -> i32 {
    chan!(ch).to_regular_fd(Handle(h)).unwrap_or_else(code)
}

/// `mp_stats`: the channel's counters, in `struct mp_stats` order.
///
/// # Safety
/// `ch` is a live channel; `out` holds 11 `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mp_stats(ch: *mut Channel, out: *mut u64) -> i32 {
    let c = chan!(ch);
    if out.is_null() {
        return -libc::EINVAL;
    }
    let s = c.stats();
    let v = [
        s.handles_open,
        s.lightweight_open,
        s.ops_in_flight,
        s.buffers_out,
        s.syscalls,
        s.sqes,
        s.cqes,
        s.events,
        s.accepted,
        s.cancelled,
        s.reads_without_buffer,
    ];
    std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len());
    0
}

//! Socket helpers the channel and the servers share (plain libc calls, no io_uring).

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Turns a libc return value into an `io::Result`, reading errno on -1.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A socket address in the form the kernel takes.
pub(crate) struct RawAddr {
    pub storage: libc::sockaddr_storage,
    pub len: libc::socklen_t,
}

/// Converts a `SocketAddr` to a `sockaddr_storage`.
pub(crate) fn to_raw(addr: &SocketAddr) -> RawAddr {
    // SAFETY: sockaddr_storage is plain data; zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    RawAddr {
        storage,
        len: len as libc::socklen_t,
    }
}

/// Converts a kernel socket address back to a `SocketAddr`.
pub(crate) fn from_raw(storage: &libc::sockaddr_storage) -> io::Result<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: family says this is a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        f => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("address family {f} is not IPv4 or IPv6"),
        )),
    }
}

/// Sets an integer socket option.
pub fn set_int_opt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int on the stack that outlives the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const _ as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Reads an integer socket option.
pub fn get_int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val and len are valid for writes for the duration of the call.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut val as *mut _ as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(val)
}

/// The local address a socket is bound to.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: storage is plain data and len describes it.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` is writable and `len` holds its size, as getsockname requires.
    cvt(unsafe { libc::getsockname(fd, &mut storage as *mut _ as *mut libc::sockaddr, &mut len) })?;
    from_raw(&storage)
}

/// Whether `fd` is a listening socket (`SO_ACCEPTCONN`).
pub fn is_listening(fd: RawFd) -> bool {
    matches!(
        get_int_opt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN),
        Ok(1)
    )
}

/// Options for [`tcp_listener`].
#[derive(Clone, Copy, Debug)]
pub struct ListenOptions {
    /// Join (or start) a `SO_REUSEPORT` group so partitioned listeners can share the port.
    pub reuseport: bool,
    /// Steer connections whose SYN is processed on this CPU to this listener (`SO_INCOMING_CPU`).
    pub incoming_cpu: Option<usize>,
    /// Accept backlog.
    pub backlog: i32,
    /// Open the socket with `O_NONBLOCK` (epoll servers need it; io_uring does not).
    pub nonblocking: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            reuseport: true,
            incoming_cpu: None,
            backlog: 4096,
            nonblocking: false,
        }
    }
}

/// Creates a bound, listening TCP socket.
pub fn tcp_listener(addr: SocketAddr, opts: ListenOptions) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if opts.nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: plain syscall; the result is checked before it is wrapped.
    let fd = cvt(unsafe { libc::socket(family, ty, 0) })?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if opts.reuseport {
        set_int_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    if let Some(cpu) = opts.incoming_cpu {
        set_int_opt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            cpu as libc::c_int,
        )?;
    }
    let raw = to_raw(&addr);
    // SAFETY: raw holds a valid sockaddr of raw.len bytes.
    cvt(unsafe {
        libc::bind(
            fd,
            &raw.storage as *const _ as *const libc::sockaddr,
            raw.len,
        )
    })?;
    // SAFETY: plain syscall on the socket `owned` holds; no memory is passed.
    cvt(unsafe { libc::listen(fd, opts.backlog) })?;
    Ok(owned)
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(
            0,
            size_of::<libc::cpu_set_t>(),
            &set,
        ))?;
    }
    Ok(())
}

/// The number of CPUs this process may run on.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The process's `RLIMIT_NOFILE` as (soft, hard); `libc::RLIM_INFINITY` means unlimited.
pub fn nofile_limits() -> io::Result<(u64, u64)> {
    // SAFETY: rlimit is plain data, valid for the call.
    let mut lim: libc::rlimit = unsafe { zeroed() };
    // SAFETY: `lim` is a writable rlimit for the kernel to fill.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (to `fs.nr_open` when the hard limit is
/// unlimited, since no process may have more) and returns the soft limit now in force.
pub fn raise_nofile_limit() -> u64 {
    let Ok((soft, hard)) = nofile_limits() else {
        return 1024;
    };
    let want = if hard == libc::RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(soft)
    } else {
        hard
    };
    if soft >= want {
        return soft;
    }
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: hard,
    };
    // SAFETY: lim is valid for the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        want
    } else {
        soft
    }
}

/// Makes `close()` on this socket send a RST instead of a FIN (`SO_LINGER` {1, 0}).
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let lin = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: lin outlives the call and its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &lin as *const _ as *const libc::c_void,
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Creates an unconnected TCP socket for `addr`'s family.
pub(crate) fn tcp_socket_for(addr: &SocketAddr, nonblocking: bool) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: plain syscall; checked before wrapping.
    let fd = cvt(unsafe { libc::socket(family, ty, 0) })?;
    // SAFETY: `fd` was just returned by socket (cvt refused a negative one) and is owned by
    // nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Counts the open descriptors of this process (entries of /proc/self/fd).
pub fn count_open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

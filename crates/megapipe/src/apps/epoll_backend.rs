//! A server thread on epoll and non-blocking sockets (the comparison backend).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use super::{Flow, OutBuf, ServerStats, Service, MAX_PENDING_OUT};
use crate::net::{self, cvt};

struct Conn<C> {
    fd: OwnedFd,
    state: C,
    input: Vec<u8>,
    /// Response bytes the socket has not taken yet.
    out: Vec<u8>,
    close_after: bool,
    interest: u32,
}

const LISTENER_TAG: u64 = 1 << 63;

/// Runs until `stop` is set.
#[allow(clippy::too_many_arguments)]
pub fn run<S: Service>(
    service: &S,
    listener: OwnedFd,
    addr: SocketAddr,
    cpu: usize,
    shared_listener: bool,
    serve_orig: bool,
    stop: &AtomicBool,
    stats: &ServerStats,
    ready: Sender<io::Result<()>>,
) -> io::Result<()> {
    let setup = || -> io::Result<(OwnedFd, Vec<OwnedFd>)> {
        net::pin_to_cpu(cpu)?;
        // SAFETY: plain syscall, checked.
        let ep = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        let mut listeners = Vec::new();
        if shared_listener {
            listeners.push(listener.try_clone()?);
        } else {
            let opts = net::ListenOptions {
                incoming_cpu: Some(cpu),
                nonblocking: true,
                ..Default::default()
            };
            listeners.push(net::tcp_listener(addr, opts)?);
            if serve_orig {
                listeners.push(listener.try_clone()?);
            }
        }
        for (i, l) in listeners.iter().enumerate() {
            let flags = libc::EPOLLIN as u32
                | if shared_listener {
                    libc::EPOLLEXCLUSIVE as u32
                } else {
                    0
                };
            ctl(
                ep.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                l.as_raw_fd(),
                flags,
                LISTENER_TAG | i as u64,
            )?;
        }
        Ok((ep, listeners))
    };
    let (ep, listeners) = match setup() {
        Ok(v) => {
            let _ = ready.send(Ok(()));
            v
        }
        Err(e) => {
            let _ = ready.send(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    drop(listener);
    let epfd = ep.as_raw_fd();
    let mut conns: Vec<Option<Conn<S::Conn>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // SAFETY: epoll_event is plain data.
    let mut events: Vec<libc::epoll_event> = vec![unsafe { std::mem::zeroed() }; 256];
    let mut buf = vec![0u8; 16384];
    let mut out: Vec<OutBuf> = Vec::new();
    let mut syscalls = 0u64;
    while !stop.load(Ordering::Relaxed) {
        stats.syscalls.fetch_add(syscalls, Ordering::Relaxed);
        syscalls = 1;
        // SAFETY: events has room for its length.
        let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), events.len() as i32, 100) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            let (tag, bits) = (ev.u64, ev.events);
            if tag & LISTENER_TAG != 0 {
                let lfd = listeners[(tag & !LISTENER_TAG) as usize].as_raw_fd();
                loop {
                    syscalls += 1;
                    // SAFETY: plain syscall; a returned fd is wrapped at once.
                    let fd = unsafe {
                        libc::accept4(
                            lfd,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        )
                    };
                    if fd < 0 {
                        break;
                    }
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let idx = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    // SAFETY: `fd` (non-negative) was just returned by accept4 and is owned
                    // by nothing else.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    syscalls += 1;
                    if ctl(
                        epfd,
                        libc::EPOLL_CTL_ADD,
                        fd.as_raw_fd(),
                        libc::EPOLLIN as u32,
                        idx as u64,
                    )
                    .is_err()
                    {
                        free.push(idx);
                        continue;
                    }
                    conns[idx] = Some(Conn {
                        fd,
                        state: S::Conn::default(),
                        input: Vec::new(),
                        out: Vec::new(),
                        close_after: false,
                        interest: libc::EPOLLIN as u32,
                    });
                }
                continue;
            }
            let idx = tag as usize;
            let Some(c) = conns.get_mut(idx).and_then(|c| c.as_mut()) else {
                continue;
            };
            let mut close = false;
            if bits & libc::EPOLLOUT as u32 != 0 && !c.out.is_empty() {
                syscalls += 1;
                match write_some(c.fd.as_raw_fd(), &c.out) {
                    Ok(n) => {
                        c.out.drain(..n);
                    }
                    Err(_) => close = true,
                }
            }
            if !close
                && bits & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0
                && !c.close_after
                && c.interest & libc::EPOLLIN as u32 != 0
            {
                syscalls += 1;
                // SAFETY: buf is valid for its length.
                let r = unsafe {
                    libc::read(
                        c.fd.as_raw_fd(),
                        buf.as_mut_ptr() as *mut libc::c_void,
                        buf.len(),
                    )
                };
                if r > 0 {
                    c.input.extend_from_slice(&buf[..r as usize]);
                    let flow = service.process(&mut c.state, &mut c.input, &mut out);
                    if flow == Flow::Close {
                        stats.service_closes.fetch_add(1, Ordering::Relaxed);
                        c.close_after = true;
                    }
                    if !out.is_empty() {
                        if c.out.is_empty() {
                            syscalls += 1;
                            match writev_some(c.fd.as_raw_fd(), &out) {
                                Ok(sent) => keep_unsent(&mut c.out, &out, sent),
                                Err(_) => close = true,
                            }
                        } else {
                            keep_unsent(&mut c.out, &out, 0);
                        }
                        out.clear();
                    }
                } else if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
                {
                    close = true;
                }
            }
            if c.close_after && c.out.is_empty() {
                close = true;
            }
            if close {
                syscalls += 1;
                conns[idx] = None;
                free.push(idx);
                continue;
            }
            // Read only while the backlog is small; ask for EPOLLOUT while bytes wait.
            let mut want = 0;
            if !c.close_after && c.out.len() < MAX_PENDING_OUT {
                want |= libc::EPOLLIN as u32;
            }
            if !c.out.is_empty() {
                want |= libc::EPOLLOUT as u32;
            }
            if want != c.interest {
                syscalls += 1;
                let _ = ctl(
                    epfd,
                    libc::EPOLL_CTL_MOD,
                    c.fd.as_raw_fd(),
                    want,
                    idx as u64,
                );
                c.interest = want;
            }
        }
    }
    Ok(())
}

fn ctl(ep: RawFd, op: i32, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: ev outlives the call.
    cvt(unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) }).map(|_| ())
}

fn write_some(fd: RawFd, b: &[u8]) -> io::Result<usize> {
    // SAFETY: b is valid for its length; MSG_NOSIGNAL avoids SIGPIPE on a reset peer.
    let r = unsafe {
        libc::send(
            fd,
            b.as_ptr() as *const libc::c_void,
            b.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if r >= 0 {
        Ok(r as usize)
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            Ok(0)
        } else {
            Err(e)
        }
    }
}

fn writev_some(fd: RawFd, bufs: &[OutBuf]) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = bufs
        .iter()
        .map(|b| libc::iovec {
            iov_base: b.as_ref().as_ptr() as *mut libc::c_void,
            iov_len: b.as_ref().len(),
        })
        .collect();
    // SAFETY: msghdr is plain data; iov points at live buffers for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` names `iov.len()` iovecs in `iov`, each over a buffer of `bufs` that
    // outlives the call; the kernel only reads them.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if r >= 0 {
        Ok(r as usize)
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            Ok(0)
        } else {
            Err(e)
        }
    }
}

/// Copies the bytes of `bufs` past the first `sent` into `pending`.
fn keep_unsent(pending: &mut Vec<u8>, bufs: &[OutBuf], mut sent: usize) {
    for b in bufs {
        let b = b.as_ref();
        if sent >= b.len() {
            sent -= b.len();
        } else {
            pending.extend_from_slice(&b[sent..]);
            sent = 0;
        }
    }
}

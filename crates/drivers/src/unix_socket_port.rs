//! UnixSocketPort: BESS's packet exchange with a local process over a SOCK_SEQPACKET Unix
//! socket, one frame per message. The port listens at a path (a leading '@' makes it an
//! abstract name) and serves one client at a time; a small thread accepts clients and notices
//! when they leave, so the data path only ever does non-blocking recvmmsg/sendmmsg.
//!
//! The client socket always lives at one fixed descriptor number (`Shared::slot`): a new
//! client is `dup3`'d onto it and a departed one is replaced by a dead socket the same way,
//! so a queue that races with a (dis)connect talks to the old peer, the new one or the dead
//! socket, but never to an unrelated file that happened to reuse a closed descriptor.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bessemer_core::packet::DATA_CAPACITY;
use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PoolCache, Result, Value, MAX_BURST};

use crate::netns::os_error;

/// BESS's default idle polling interval (50 µs).
const DEFAULT_MIN_RX_INTERVAL_NS: u64 = 50_000;
/// What BESS sends a client when `confirm_connect` is set (pybess's test utilities expect
/// exactly these four bytes).
const CONFIRMATION: &[u8] = b"yes\0";
/// How long a departed client's unread messages stay readable before the port drops them.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// State shared by the port, its queues and the accept thread.
struct Shared {
    /// The client's socket, or `dead` while nobody is connected (fixed descriptor number).
    slot: OwnedFd,
    /// A socket whose peer is closed: recv sees end-of-file, send fails with EPIPE.
    dead: OwnedFd,
    connected: AtomicBool,
    connects: AtomicU64,
    rx_oversize: AtomicU64,
    /// Zero-length messages: no frame to forward (BESS skips them uncounted).
    rx_empty: AtomicU64,
}

impl Shared {
    fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }
}

/// A Unix socket port.
struct UnixSocketPort {
    shared: Arc<Shared>,
    /// Shown by `desc`.
    shown_path: String,
    /// A filesystem socket we bound, with its identity, removed on drop if still ours.
    bound_file: Option<(String, u64, u64)>,
    min_rx_interval: Duration,
    mac: [u8; 6],
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// Closed after the thread has stopped using it.
    _listen: OwnedFd,
}

fn args_error(msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("UnixSocketPortArg.path: {msg}"))
}

/// Builds the socket address; '@' at the start means the abstract namespace.
fn sockaddr(path: &str) -> Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let cap = a.sun_path.len();
    if path.as_bytes().contains(&0) {
        return Err(args_error(format!("'{path}' contains a NUL byte")));
    }
    let abstract_name = path.starts_with('@');
    // A filesystem path needs room for its terminating NUL; an abstract name does not.
    let max = if abstract_name { cap } else { cap - 1 };
    if path.len() > max {
        return Err(Error::new(
            libc::ENAMETOOLONG,
            format!(
                "UnixSocketPortArg.path: '{path}' is {} bytes; a Unix socket {} holds at most {max}",
                path.len(),
                if abstract_name { "abstract name" } else { "path" }
            ),
        ));
    }
    if abstract_name && path.len() == 1 {
        return Err(args_error("'@' alone is an empty abstract name"));
    }
    for (d, s) in a.sun_path.iter_mut().zip(path.bytes()) {
        *d = s as libc::c_char;
    }
    let mut len = std::mem::size_of::<libc::sa_family_t>() + path.len();
    if abstract_name {
        a.sun_path[0] = 0;
    } else {
        len += 1;
    }
    Ok((a, len as libc::socklen_t))
}

/// True if some socket is bound at filesystem path `addr`: a datagram connect to a stream
/// or seqpacket listener fails with EPROTOTYPE (in use) and to a stale file with
/// ECONNREFUSED, without disturbing the listener.
fn path_in_use(addr: &(libc::sockaddr_un, libc::socklen_t)) -> bool {
    let Ok(s) = crate::netns::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0, "probe") else {
        return true;
    };
    // SAFETY: a valid address of the given length.
    let r = unsafe {
        libc::connect(
            s.as_raw_fd(),
            &addr.0 as *const _ as *const libc::sockaddr,
            addr.1,
        )
    };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ECONNREFUSED)
}

fn bind(fd: RawFd, addr: &(libc::sockaddr_un, libc::socklen_t)) -> std::io::Result<()> {
    // SAFETY: a valid address of the given length.
    let r = unsafe { libc::bind(fd, &addr.0 as *const _ as *const libc::sockaddr, addr.1) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn in_use_error(path: &str) -> Error {
    Error::new(
        libc::EADDRINUSE,
        format!("Unix socket path '{path}' is already bound by another process or port"),
    )
}

/// Binds `fd` to `path`, replacing a stale socket file nobody listens on (but never any
/// other kind of file, nor a live socket).
fn bind_path(fd: RawFd, path: &str) -> Result<Option<(String, u64, u64)>> {
    let addr = sockaddr(path)?;
    let abstract_name = path.starts_with('@');
    match bind(fd, &addr) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
            if abstract_name {
                return Err(in_use_error(path));
            }
            match std::fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_socket() => {
                    return Err(Error::new(
                        libc::EEXIST,
                        format!("'{path}' exists and is not a socket; not replacing it"),
                    ))
                }
                _ => {}
            }
            if path_in_use(&addr) {
                return Err(in_use_error(path));
            }
            let _ = std::fs::remove_file(path);
            if let Err(e) = bind(fd, &addr) {
                return Err(if e.raw_os_error() == Some(libc::EADDRINUSE) {
                    in_use_error(path)
                } else {
                    Error::new(
                        e.raw_os_error().unwrap_or(libc::EIO),
                        format!("bind({path}): {e}"),
                    )
                });
            }
        }
        Err(e) => {
            return Err(Error::new(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("bind({path}): {e}"),
            ))
        }
    }
    if abstract_name {
        return Ok(None);
    }
    let m = std::fs::symlink_metadata(path)
        .map_err(|e| Error::new(libc::EIO, format!("stat({path}) after bind: {e}")))?;
    Ok(Some((path.to_string(), m.dev(), m.ino())))
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "UnixSocketPortArg")?;
    let path = a.str("path")?.unwrap_or("").to_string();
    let interval = a
        .int("min_rx_interval_ns", i64::MIN, i64::MAX)?
        .unwrap_or(0);
    let confirm = a.bool("confirm_connect")?.unwrap_or(false);
    a.finish()?;
    for (what, n) in [
        ("num_inc_q", params.num_inc_q),
        ("num_out_q", params.num_out_q),
    ] {
        if n > 1 {
            return Err(Error::invalid(format!(
                "{what} {n}: UnixSocketPort has one incoming and one outgoing queue"
            )));
        }
    }
    // BESS: 0 means the default, a negative value unthrottled polling.
    let min_rx_interval = Duration::from_nanos(match interval {
        i if i < 0 => 0,
        0 => DEFAULT_MIN_RX_INTERVAL_NS,
        i => i as u64,
    });
    let path = if path.is_empty() {
        format!("/tmp/bess_unix_{}", params.name)
    } else {
        path
    };

    let listen = crate::netns::socket(
        libc::AF_UNIX,
        libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK,
        0,
        "socket(AF_UNIX, SOCK_SEQPACKET)",
    )?;
    let bound_file = bind_path(listen.as_raw_fd(), &path)?;
    let unbind = |e: Error| {
        if let Some((p, _, _)) = &bound_file {
            let _ = std::fs::remove_file(p);
        }
        e
    };
    // SAFETY: a bound socket we own.
    if unsafe { libc::listen(listen.as_raw_fd(), 1) } != 0 {
        return Err(unbind(os_error(&format!("listen({path})"))));
    }
    let mut pair = [0; 2];
    // SAFETY: pair has room for two descriptors.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(unbind(os_error("socketpair(AF_UNIX)")));
    }
    // SAFETY: fresh descriptors we own; closing one end makes the other a dead socket.
    let dead = unsafe {
        drop(OwnedFd::from_raw_fd(pair[1]));
        OwnedFd::from_raw_fd(pair[0])
    };
    let slot = dead
        .try_clone()
        .map_err(|e| unbind(Error::new(libc::EMFILE, format!("dup: {e}"))))?;
    // SAFETY: plain syscall.
    let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if stop < 0 {
        return Err(unbind(os_error("eventfd")));
    }
    // SAFETY: a fresh descriptor we own.
    let stop = unsafe { OwnedFd::from_raw_fd(stop) };
    let shared = Arc::new(Shared {
        slot,
        dead,
        connected: AtomicBool::new(false),
        connects: AtomicU64::new(0),
        rx_oversize: AtomicU64::new(0),
        rx_empty: AtomicU64::new(0),
    });
    let acceptor = Acceptor {
        shared: shared.clone(),
        listen: listen.as_raw_fd(),
        stop: stop.as_raw_fd(),
        confirm,
        path: path.clone(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("unix:{}", params.name))
        .spawn(move || acceptor.run())
        .map_err(|e| unbind(Error::new(libc::EAGAIN, format!("accept thread: {e}"))))?;
    let mac = crate::name_mac(0, &params.name);
    Ok(NewPort {
        port: Box::new(UnixSocketPort {
            shared,
            shown_path: path,
            bound_file,
            min_rx_interval,
            mac,
            stop,
            thread: Some(thread),
            _listen: listen,
        }),
        num_inc_q: 1,
        num_out_q: 1,
    })
}

/// The accept thread: waits for a client when there is none, and for it to leave when
/// there is one.
struct Acceptor {
    shared: Arc<Shared>,
    listen: RawFd,
    stop: RawFd,
    confirm: bool,
    path: String,
}

impl Acceptor {
    fn run(self) {
        // Set while a departed client's last messages may still be read.
        let mut draining: Option<Instant> = None;
        loop {
            let connected = self.shared.connected();
            let slot = self.shared.slot.as_raw_fd();
            let mut fds = [
                libc::pollfd {
                    fd: self.stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
                // Further clients wait in the backlog while one is served.
                libc::pollfd {
                    fd: if connected { -1 } else { self.listen },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if connected && draining.is_none() {
                        slot
                    } else {
                        -1
                    },
                    events: libc::POLLRDHUP,
                    revents: 0,
                },
            ];
            let timeout = if draining.is_some() { 1 } else { -1 };
            // SAFETY: a valid array of pollfd.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                tracing::error!(path = %self.path, "unix port: poll failed: {}", std::io::Error::last_os_error());
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if fds[0].revents != 0 {
                return;
            }
            if let Some(since) = draining {
                if self.unread(slot) == 0 || since.elapsed() >= DRAIN_GRACE {
                    self.disconnect();
                    draining = None;
                }
                continue;
            }
            if fds[2].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                draining = Some(Instant::now());
                continue;
            }
            if fds[1].revents != 0 {
                self.accept();
            }
        }
    }

    /// Bytes the client sent that nobody has read yet.
    fn unread(&self, fd: RawFd) -> libc::c_int {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } != 0 {
            return 0;
        }
        n
    }

    fn accept(&self) {
        // SAFETY: plain syscall on our listening socket.
        let fd = unsafe {
            libc::accept4(
                self.listen,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EAGAIN)
                && e.raw_os_error() != Some(libc::ECONNABORTED)
            {
                // E.g. out of descriptors: the pending client stays queued, so do not spin.
                tracing::warn!(path = %self.path, "unix port: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            return;
        }
        // SAFETY: a fresh descriptor we own.
        let client = unsafe { OwnedFd::from_raw_fd(fd) };
        if self.confirm {
            // Written before the client becomes reachable through `slot`, so it is the first
            // message the client gets, and any send after it can reach the client.
            // SAFETY: a valid buffer.
            unsafe {
                libc::send(
                    client.as_raw_fd(),
                    CONFIRMATION.as_ptr() as *const libc::c_void,
                    CONFIRMATION.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
        }
        // SAFETY: both descriptors are open; dup3 replaces slot atomically.
        if unsafe {
            libc::dup3(
                client.as_raw_fd(),
                self.shared.slot.as_raw_fd(),
                libc::O_CLOEXEC,
            )
        } < 0
        {
            tracing::error!(path = %self.path, "unix port: dup3 failed: {}", std::io::Error::last_os_error());
            return;
        }
        drop(client);
        self.shared.connects.fetch_add(1, Ordering::Relaxed);
        self.shared.connected.store(true, Ordering::Release);
        tracing::debug!(path = %self.path, "unix port: client connected");
    }

    fn disconnect(&self) {
        self.shared.connected.store(false, Ordering::Release);
        // SAFETY: both descriptors are open; the old client socket closes with the swap.
        unsafe {
            libc::dup3(
                self.shared.dead.as_raw_fd(),
                self.shared.slot.as_raw_fd(),
                libc::O_CLOEXEC,
            )
        };
        tracing::debug!(path = %self.path, "unix port: client disconnected");
    }
}

impl Drop for UnixSocketPort {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: eventfd takes an 8-byte counter increment.
        unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((path, dev, ino)) = &self.bound_file {
            // Only our own socket file: another process may have replaced it since.
            if let Ok(m) = std::fs::symlink_metadata(path) {
                if m.dev() == *dev && m.ino() == *ino {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

impl Port for UnixSocketPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        if qid != 0 {
            return Err(Error::invalid(format!(
                "UnixSocketPort has one incoming queue; there is no queue {qid}"
            )));
        }
        Ok(Box::new(Rx {
            shared: self.shared.clone(),
            min_interval: self.min_rx_interval,
            idle_since: None,
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        if qid != 0 {
            return Err(Error::invalid(format!(
                "UnixSocketPort has one outgoing queue; there is no queue {qid}"
            )));
        }
        Ok(Box::new(Tx {
            shared: self.shared.clone(),
        }))
    }

    fn link_status(&self) -> LinkStatus {
        LinkStatus {
            speed_mbps: 0,
            full_duplex: true,
            autoneg: false,
            link_up: self.shared.connected(),
        }
    }

    fn conf(&self) -> PortConf {
        PortConf {
            mac_addr: self.mac,
            mtu: DATA_CAPACITY as u32,
            admin_up: true,
        }
    }

    fn driver_drops(&self) -> (u64, u64) {
        (
            self.shared.rx_oversize.load(Ordering::Relaxed)
                + self.shared.rx_empty.load(Ordering::Relaxed),
            0,
        )
    }

    fn desc(&self) -> String {
        format!(
            "{} ({}), {}, {} connect(s), {} oversize message(s) dropped, {} empty message(s) \
             dropped",
            self.shown_path,
            if self.bound_file.is_some() {
                "file"
            } else {
                "abstract"
            },
            if self.shared.connected() {
                "client connected"
            } else {
                "no client"
            },
            self.shared.connects.load(Ordering::Relaxed),
            self.shared.rx_oversize.load(Ordering::Relaxed),
            self.shared.rx_empty.load(Ordering::Relaxed),
        )
    }
}

/// The incoming queue.
struct Rx {
    shared: Arc<Shared>,
    min_interval: Duration,
    /// When the last poll found nothing (polls are throttled while idle, as in BESS).
    idle_since: Option<Instant>,
}

impl RxQueue for Rx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        if !self.shared.connected() {
            self.idle_since = None;
            return 0;
        }
        let now = Instant::now();
        if let Some(t) = self.idle_since {
            if now.duration_since(t) < self.min_interval {
                return 0;
            }
        }
        let n = max.min(batch.room());
        let base = batch.len();
        if n == 0 || cache.alloc_bulk(batch, n, DATA_CAPACITY) == 0 {
            return 0;
        }
        // SAFETY: plain-data arrays; all zeroes is valid.
        let mut iov: [libc::iovec; MAX_BURST] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_BURST] = unsafe { std::mem::zeroed() };
        for (i, p) in batch.pkts_mut()[base..].iter_mut().enumerate() {
            let d = p.data_mut();
            iov[i].iov_base = d.as_mut_ptr() as *mut libc::c_void;
            iov[i].iov_len = d.len();
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: n headers, each pointing at a live packet buffer of iov_len bytes.
        let r = unsafe {
            libc::recvmmsg(
                self.shared.slot.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = r.max(0) as usize;
        let mut oversize = 0;
        // Zero-length entries: empty messages, or, once the client has closed, end-of-file
        // markers (recvmmsg fills every remaining entry with one). The latter can only follow
        // the last message with bytes.
        let (mut zero, mut trailing_zero) = (0u64, 0u64);
        for (i, p) in batch.pkts_mut()[base..].iter_mut().enumerate() {
            let h = &hdrs[i];
            let len = if i >= got {
                0
            } else if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                oversize += 1;
                trailing_zero = 0;
                0
            } else {
                if h.msg_len == 0 {
                    zero += 1;
                    trailing_zero += 1;
                } else {
                    trailing_zero = 0;
                }
                h.msg_len as usize
            };
            p.set_len(len);
        }
        // Trailing zero-length entries from a client that has closed are taken as its end of
        // file (an empty message it sent just before closing is then not counted).
        let empty = if trailing_zero > 0 && peer_closed(self.shared.slot.as_raw_fd()) {
            zero - trailing_zero
        } else {
            zero
        };
        let mut unused = PacketBatch::new();
        let mut idx = 0;
        batch.split_off_if(&mut unused, |p| {
            let keep = idx < base || !p.is_empty();
            idx += 1;
            keep
        });
        cache.free_bulk(&mut unused);
        if oversize != 0 {
            self.shared
                .rx_oversize
                .fetch_add(oversize, Ordering::Relaxed);
        }
        if empty != 0 {
            self.shared.rx_empty.fetch_add(empty, Ordering::Relaxed);
        }
        let received = batch.len() - base;
        // Idle (the next poll waits `min_interval`) only when nothing at all was read: a
        // burst of dropped messages may have frames behind it.
        self.idle_since = if received == 0 && oversize == 0 && empty == 0 {
            Some(now)
        } else {
            None
        };
        received
    }
}

/// True if the client has closed its end (its remaining messages can still be read).
fn peer_closed(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0
}

/// The outgoing queue.
struct Tx {
    shared: Arc<Shared>,
}

impl TxQueue for Tx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let n = batch.len();
        // No `connected` check: sending to the dead socket fails cheaply (EPIPE), and a
        // client that got its confirmation must be reachable even before the flag is set.
        if n == 0 {
            return 0;
        }
        // SAFETY: plain-data arrays; all zeroes is valid.
        let mut iov: [libc::iovec; MAX_BURST] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_BURST] = unsafe { std::mem::zeroed() };
        for (i, p) in batch.pkts().iter().enumerate() {
            let d = p.data();
            iov[i].iov_base = d.as_ptr() as *mut libc::c_void;
            iov[i].iov_len = d.len();
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // MSG_NOSIGNAL: a departed client must fail the send, not kill the daemon.
        // SAFETY: n headers pointing at live packet data.
        let r = unsafe {
            libc::sendmmsg(
                self.shared.slot.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        let sent = r.max(0) as usize;
        if sent == 0 {
            return 0;
        }
        let mut done = PacketBatch::new();
        let mut idx = 0;
        batch.split_off_if(&mut done, |_| {
            idx += 1;
            idx > sent
        });
        cache.free_bulk(&mut done);
        sent
    }
}

/// The UnixSocketPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "UnixSocketPort",
    name_template: "unix_port",
    help: "packet exchange with a local process over a SOCK_SEQPACKET Unix socket (one client at a time)",
    arg_type: "UnixSocketPortArg",
    arg_doc: &[
        "path: string — socket path; '@name' is an abstract name (default /tmp/bess_unix_<port>)",
        "min_rx_interval_ns: int64 — least time between polls while idle (0: 50000; negative: no throttling)",
        "confirm_connect: bool — send \"yes\\0\" to each client once it is connected",
    ],
    create,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let (a, len) = sockaddr("@x").unwrap();
        assert_eq!(a.sun_path[0], 0);
        assert_eq!(a.sun_path[1], b'x' as libc::c_char);
        assert_eq!(len as usize, 2 + 2);
        let (_, len) = sockaddr("/a").unwrap();
        assert_eq!(len as usize, 2 + 3);
        let long = "/".repeat(108);
        let e = sockaddr(&long).unwrap_err();
        assert_eq!(e.code, libc::ENAMETOOLONG);
        assert!(e.msg.contains("at most 107"), "{}", e.msg);
        assert!(sockaddr(&format!("@{}", "a".repeat(107))).is_ok());
        assert!(sockaddr("@").is_err());
        assert!(sockaddr("a\0b").is_err());
    }
}

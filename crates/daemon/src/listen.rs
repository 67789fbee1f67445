//! Accepting connections on the daemon's listeners (the control port, `--metrics`, `--http`)
//! so that no peer can stop or wedge the daemon through them.
//!
//! A dataplane must never stop because of its control port. tonic's and axum's own accept
//! loops end (or spin) when `accept()` fails, e.g. with EMFILE once idle connections have
//! used up the descriptors, and an idle or half-open peer holds its descriptor for ever. Here:
//! - accept errors are logged (rate-limited) and retried after a short pause; the stream of
//!   connections never ends and never yields an error;
//! - every accepted TCP connection gets TCP_NODELAY (a gRPC answer over ~0.5 KB otherwise
//!   waits ~40 ms for Nagle and the peer's delayed ACK);
//! - connections are capped per listener: beyond the cap a connection is answered with a
//!   refusal that names the cause and closed. On the control port up to a quarter more are
//!   handed to the gRPC service marked [`ConnInfo::over_cap`], which fails their calls with
//!   RESOURCE_EXHAUSTED and the reason (a gRPC client shows it; a bare GOAWAY only reaches its
//!   log, and it reconnects at once); beyond those an HTTP/2 GOAWAY (or, under TLS, a plain
//!   close). The HTTP endpoints answer an HTTP/1 503;
//! - a connection must be established within [`Limits::first`] of its accept: the peer has
//!   sent bytes after the daemon's first bytes (a TLS client its Finished after the
//!   ServerHello, an HTTP/2 client its frames after the server's SETTINGS, an HTTP/1 client
//!   its second request), so a peer that says nothing, stalls in its TLS handshake or sends
//!   a request a byte at a time is closed then; once established, after [`Limits::idle`]
//!   without a byte read (a live gRPC client answers the server's keepalive pings well
//!   within it; a dead or half-open peer does not).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_stream::Stream;

/// What a listener allows: at most `max` connections at once, closed when idle.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most connections open at once.
    pub max: usize,
    /// Longest time from accept until the connection is established (see the module doc).
    pub first: Duration,
    /// Longest time without a byte read once established.
    pub idle: Duration,
}

/// How a connection beyond the cap is told why it is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// gRPC over plain HTTP/2: a quarter more connections are handed on marked over the cap
    /// (their calls fail with the reason); beyond those, a server preface and a GOAWAY whose
    /// debug data says why.
    Grpc,
    /// gRPC over TLS: the same, but beyond the quarter a plain close (nothing can be said
    /// before the handshake).
    GrpcTls,
    /// An HTTP/1.1 503 response.
    Http1,
}

/// How long a connection handed on over the cap may live: long enough for a TLS handshake and
/// the one call whose refusal tells the client why.
const OVER_CAP_LIMIT: Duration = Duration::from_secs(2);

/// The message a refused connection or call carries.
pub fn over_cap_message(label: Label, max: usize) -> String {
    format!(
        "bessemerd: too many connections to the {} ({max} open); try again later",
        label.0
    )
}

/// Which listener, for logs and refusals.
#[derive(Clone, Copy, Debug)]
pub struct Label(pub &'static str);

/// A log line allowance: at most `per_sec` lines a second; the lines held back are counted
/// and summarised in the next second that logs. One per kind of event, so a flood of one
/// kind cannot hide another.
pub struct LogBudget {
    per_sec: u64,
    /// (second since the epoch, lines logged in it, lines held back since the last summary)
    state: Mutex<(u64, u64, u64)>,
}

impl LogBudget {
    /// A budget of `per_sec` lines a second.
    pub const fn new(per_sec: u64) -> LogBudget {
        LogBudget {
            per_sec,
            state: Mutex::new((0, 0, 0)),
        }
    }

    /// True if a line may be logged now. When a new second opens after lines were held
    /// back, returns their number too (the caller logs the summary with its line).
    pub fn allow(&self) -> (bool, u64) {
        let sec = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (window, logged, held) = &mut *g;
        let mut summary = 0;
        if *window != sec {
            summary = std::mem::take(held);
            (*window, *logged) = (sec, 0);
        }
        if *logged < self.per_sec {
            *logged += 1;
            (true, summary)
        } else {
            *held += 1 + summary;
            (false, 0)
        }
    }
}

/// Text from a peer (names, paths, error messages quoting them) made safe to log: control
/// characters (newlines, escapes) are written as escapes, so a peer cannot forge log lines
/// or send terminal escape sequences to whoever reads the log.
pub fn log_safe(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Raises this process's soft limit on open descriptors to its hard limit (a daemon holding
/// many connections, ports and pools needs more than the usual 1 024). Returns the limit now
/// in force.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return r.rlim_max;
            }
        }
        r.rlim_cur
    }
}

/// The connection caps for a descriptor limit of `nofile`: the control port may hold a
/// quarter of the descriptors and each HTTP listener an eighth (and never more than
/// `control_max` and `http_max`), so connections can never take the descriptors the
/// dataplane needs (ports, pools, slices).
pub fn caps(nofile: u64, control_max: usize, http_max: usize) -> (usize, usize) {
    let quarter = (nofile / 4) as usize;
    let eighth = (nofile / 8) as usize;
    (control_max.min(quarter).max(1), http_max.min(eighth).max(1))
}

/// A listener whose accepted connections are guarded.
pub enum Accept {
    /// TCP.
    Tcp(TcpListener),
    /// Unix-domain stream socket.
    Unix(UnixListener),
}

/// An accepted connection: TCP or unix.
pub enum Conn {
    /// TCP, with TCP_NODELAY set.
    Tcp(TcpStream),
    /// Unix-domain.
    Unix(UnixStream),
}

static ACCEPT_ERRORS_LOG: LogBudget = LogBudget::new(1);
static REFUSED_LOG: LogBudget = LogBudget::new(1);

/// Connections refused for the cap, over all listeners (`bessemer_connections_refused_total`
/// in the metrics).
pub static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Accept errors (descriptors exhausted, ...) over all listeners
/// (`bessemer_accept_errors_total`).
pub static ACCEPT_ERRORS: AtomicU64 = AtomicU64::new(0);

fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

impl Accept {
    async fn accept(&self) -> io::Result<(Conn, String)> {
        match self {
            Accept::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // The control protocol is request/response: never wait for more data to send.
                let _ = s.set_nodelay(true);
                Ok((Conn::Tcp(s), peer.to_string()))
            }
            Accept::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Conn::Unix(s), "unix".to_string()))
            }
        }
    }

    /// The guarded connections of this listener, for ever: errors are logged and retried.
    pub fn incoming(
        self,
        label: Label,
        limits: Limits,
        refusal: Refusal,
    ) -> impl Stream<Item = io::Result<Guarded<Conn>>> {
        let slots = Arc::new(Semaphore::new(limits.max));
        let spare = match refusal {
            Refusal::Grpc | Refusal::GrpcTls => limits.max.div_ceil(4),
            Refusal::Http1 => 0,
        };
        let spare = Arc::new(Semaphore::new(spare));
        let over_cap = Limits {
            max: limits.max,
            first: OVER_CAP_LIMIT.min(limits.first),
            idle: OVER_CAP_LIMIT,
        };
        async_stream::stream! {
            loop {
                let (conn, peer) = match self.accept().await {
                    Ok(c) => c,
                    Err(e) if transient(&e) => continue,
                    Err(e) => {
                        // EMFILE, ENFILE, ENOBUFS, ENOMEM...: the listener stays; new
                        // connections wait in its backlog until descriptors are free.
                        ACCEPT_ERRORS.fetch_add(1, Ordering::Relaxed);
                        let (log, held) = ACCEPT_ERRORS_LOG.allow();
                        if log {
                            tracing::warn!(
                                listener = label.0,
                                held_back = held,
                                "cannot accept a connection: {e}; retrying in 100 ms"
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if let Ok(permit) = slots.clone().try_acquire_owned() {
                    yield Ok(Guarded::new(conn, permit, limits, false));
                    continue;
                }
                match spare.clone().try_acquire_owned() {
                    Ok(permit) => {
                        REFUSED.fetch_add(1, Ordering::Relaxed);
                        yield Ok(Guarded::new(conn, permit, over_cap, true));
                    }
                    Err(_) => {
                        REFUSED.fetch_add(1, Ordering::Relaxed);
                        let (log, held) = REFUSED_LOG.allow();
                        if log {
                            tracing::warn!(
                                listener = label.0,
                                %peer,
                                held_back = held,
                                "refusing a connection: {} connections are open (the most \
                                 this listener takes)",
                                limits.max
                            );
                        }
                        refuse(conn, refusal, label, limits.max);
                    }
                }
            }
        }
    }
}

/// Tells a connection beyond the cap why it is closed, without waiting for it, and closes it.
fn refuse(conn: Conn, how: Refusal, label: Label, max: usize) {
    let why = over_cap_message(label, max);
    let bytes = match how {
        Refusal::GrpcTls => Vec::new(),
        Refusal::Http1 => format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{why}\n",
            why.len() + 1
        )
        .into_bytes(),
        Refusal::Grpc => {
            // Server preface (an empty SETTINGS frame), then GOAWAY: last stream 0,
            // ENHANCE_YOUR_CALM (0xb), the reason as debug data.
            let mut b = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
            let len = 8 + why.len();
            b.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, 7, 0]);
            b.extend_from_slice(&[0, 0, 0, 0]);
            b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x0b]);
            b.extend_from_slice(why.as_bytes());
            b
        }
    };
    if !bytes.is_empty() {
        // Best effort: the socket buffer of a new connection takes these few bytes at once.
        let _ = match &conn {
            Conn::Tcp(s) => s.try_write(&bytes),
            Conn::Unix(s) => s.try_write(&bytes),
        };
    }
}

/// A connection that holds its slot under the listener's cap and fails its reads once the
/// peer has been silent too long.
pub struct Guarded<T> {
    inner: T,
    _slot: OwnedSemaphorePermit,
    limits: Limits,
    over_cap: bool,
    /// The daemon has written to the peer.
    wrote: bool,
    /// The peer has sent bytes after the daemon wrote: from now on only idleness closes it.
    established: bool,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Guarded<T> {
    fn new(inner: T, slot: OwnedSemaphorePermit, limits: Limits, over_cap: bool) -> Guarded<T> {
        Guarded {
            inner,
            _slot: slot,
            limits,
            over_cap,
            wrote: false,
            established: false,
            deadline: Box::pin(tokio::time::sleep(limits.first)),
        }
    }

    /// True if the connection came beyond the cap: its calls are to be refused.
    pub fn over_cap(&self) -> bool {
        self.over_cap
    }

    /// The connection itself.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Tcp(s) => s.is_write_vectored(),
            Conn::Unix(s) => s.is_write_vectored(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    // Before it is established the deadline stays where the accept put it,
                    // so a peer trickling bytes cannot hold the connection.
                    this.established |= this.wrote;
                    if this.established {
                        let at = tokio::time::Instant::now() + this.limits.idle;
                        this.deadline.as_mut().reset(at);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // ConnectionAborted, not TimedOut: tonic ends its whole accept loop on a TLS
            // handshake that fails with an error kind it does not expect.
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    if this.established {
                        "connection idle too long"
                    } else {
                        "connection not established within the handshake timeout"
                    },
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> Guarded<T> {
    fn note_write(&mut self, r: &Poll<io::Result<usize>>) {
        if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.wrote = true;
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_write(&r);
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_write(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What tonic learns of a connection (it puts it in every request's extensions).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The peer's address, if TCP.
    pub remote: Option<std::net::SocketAddr>,
    /// The refusal to answer every call with, for a connection beyond the cap.
    pub over_cap: Option<Arc<str>>,
}

impl tonic::transport::server::Connected for Guarded<Conn> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            remote: match &self.inner {
                Conn::Tcp(s) => s.peer_addr().ok(),
                Conn::Unix(_) => None,
            },
            over_cap: self
                .over_cap
                .then(|| Arc::from(over_cap_message(Label("control port"), self.limits.max))),
        }
    }
}

impl Guarded<Conn> {
    /// The peer's address, if TCP.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        match &self.inner {
            Conn::Tcp(s) => s.peer_addr().ok(),
            Conn::Unix(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_safe_escapes_control_characters_only() {
        assert_eq!(log_safe("plain name_1.x-2 é"), "plain name_1.x-2 é");
        assert_eq!(
            log_safe("a\n2026-12-07T06:00:00Z ERROR forged\u{1b}[31m"),
            "a\\n2026-12-07T06:00:00Z ERROR forged\\u{1b}[31m"
        );
    }

    #[test]
    fn a_log_budget_holds_back_and_then_summarises() {
        let b = LogBudget::new(2);
        assert_eq!(b.allow(), (true, 0));
        assert_eq!(b.allow(), (true, 0));
        assert_eq!(b.allow(), (false, 0));
        // A new second: the line is allowed and reports the one held back.
        b.state.lock().unwrap().0 -= 1;
        assert_eq!(b.allow(), (true, 1));
    }

    #[test]
    fn caps_leave_most_descriptors_to_the_dataplane() {
        assert_eq!(caps(1024, 512, 128), (256, 128));
        assert_eq!(caps(1 << 20, 512, 128), (512, 128));
        assert_eq!(caps(8, 512, 128), (2, 1));
    }
}

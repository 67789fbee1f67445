//! The channel: one io_uring per thread carrying batched requests and completion events.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::net;

/// Identifies a registered handle within its channel (slot in the low 32 bits, generation above).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Handle(pub u64);

impl Handle {
    fn new(slot: u32, gen: u32) -> Handle {
        Handle(((gen as u64) << 32) | slot as u64)
    }
    fn slot(self) -> u32 {
        self.0 as u32
    }
    fn gen(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// The request a completion event answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum Command {
    /// A new connection was accepted (`new_handle` holds it).
    Accept = 1,
    /// Bytes were received (0 bytes: the peer closed its side).
    Read = 2,
    /// A `write` completed.
    Write = 3,
    /// A `writev` completed.
    Writev = 4,
    /// A `disconnect` (shutdown of the sending side) completed.
    Disconnect = 5,
    /// A `close` completed; the handle is gone and this is its last event.
    Close = 6,
    /// A `connect` completed.
    Connect = 7,
}

/// An errno value carried by a failed completion.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({}: {})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.0))
    }
}

/// One completion event handed out by [`Channel::dispatch`].
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// Which request completed.
    pub command: Command,
    /// The handle the request was issued on.
    pub handle: Handle,
    /// The cookie registered with `handle`.
    pub cookie: u64,
    /// Bytes transferred, or the errno of the failure.
    pub result: std::result::Result<usize, Errno>,
    /// For `Accept`: the new connection's handle (cookie 0 until `set_cookie`).
    pub new_handle: Option<Handle>,
    buf: Option<u16>,
    /// For writes from caller-owned memory (C ABI): the buffer's address, so it can be freed.
    pub(crate) written: usize,
}

/// Errors returned synchronously by channel calls.
#[derive(Debug)]
pub enum Error {
    /// The handle was never issued by this channel, or it has been closed or unregistered.
    BadHandle(Handle),
    /// The handle is being closed; no new requests are accepted on it.
    Closing(Handle),
    /// A read asked for more bytes than a provided buffer holds.
    BufferTooSmall {
        /// Bytes asked for.
        asked: usize,
        /// Size of the channel's receive buffers.
        buffer_size: usize,
    },
    /// The request does not fit the handle (e.g. read on a listener, accept on a connection).
    WrongKind(&'static str),
    /// The handle still has requests in flight and the call needs it idle.
    Busy(Handle),
    /// The channel's core is not in the cpu_mask given to `register`.
    CpuMask {
        /// The channel's CPU.
        cpu: usize,
        /// The mask given.
        mask: u64,
    },
    /// An operating-system error.
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadHandle(h) => write!(f, "bad handle {:#x}: not open in this channel", h.0),
            Error::Closing(h) => write!(f, "handle {:#x} is closing", h.0),
            Error::BufferTooSmall { asked, buffer_size } => {
                write!(
                    f,
                    "read of {asked} bytes exceeds the receive buffer size {buffer_size}"
                )
            }
            Error::WrongKind(what) => write!(f, "wrong handle kind: {what}"),
            Error::Busy(h) => write!(f, "handle {:#x} has requests in flight", h.0),
            Error::CpuMask { cpu, mask } => {
                write!(
                    f,
                    "cpu_mask {mask:#x} does not include this channel's cpu {cpu}"
                )
            }
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl Error {
    /// The errno the C ABI returns for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::BadHandle(_) => libc::EBADF,
            Error::Closing(_) => libc::ESHUTDOWN,
            Error::BufferTooSmall { .. } => libc::EMSGSIZE,
            Error::WrongKind(_) => libc::EINVAL,
            Error::Busy(_) => libc::EBUSY,
            Error::CpuMask { .. } => libc::EINVAL,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// Result of channel calls.
pub type Result<T> = std::result::Result<T, Error>;

/// Channel settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Pin the creating thread to this CPU (the channel's core); `None` leaves it unpinned.
    pub cpu: Option<usize>,
    /// Flush queued requests to the kernel when this many are waiting (the seeds' default: 32).
    pub batch_threshold: usize,
    /// Submission queue entries.
    pub ring_entries: u32,
    /// Direct-descriptor table size (lightweight handles), capped below the process's
    /// descriptor limit. When it is full, keep-accepting listeners hand out regular
    /// descriptors until it is three quarters full again (see [`Stats::direct_table_full`]).
    pub direct_slots: u32,
    /// Receive buffers in the provided buffer ring (a power of two, at most 32768).
    pub buffers: u16,
    /// Bytes per receive buffer.
    pub buffer_size: usize,
    /// Arm reads as poll first instead of trying the receive at once
    /// (`IORING_RECVSEND_POLL_FIRST`): cheaper when the reply to a request is not there yet.
    pub poll_first_reads: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cpu: None,
            batch_threshold: 32,
            ring_entries: 1024,
            direct_slots: 4096,
            buffers: 1024,
            buffer_size: 4096,
            poll_first_reads: false,
        }
    }
}

/// Counters a channel keeps about itself (for leak checks and the benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Handles currently registered (listeners and connections).
    pub handles_open: u64,
    /// Of those, lightweight (direct-descriptor) handles.
    pub lightweight_open: u64,
    /// Requests submitted to the kernel whose completion has not arrived.
    pub ops_in_flight: u64,
    /// Receive buffers taken from the ring and not yet given back.
    pub buffers_out: u64,
    /// `io_uring_enter` system calls made.
    pub syscalls: u64,
    /// Submission entries handed to the kernel.
    pub sqes: u64,
    /// Completion entries reaped.
    pub cqes: u64,
    /// Events handed to the application.
    pub events: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Completions dropped because their handle was unregistered first.
    pub cancelled: u64,
    /// Reads that failed because the buffer ring was empty (ENOBUFS).
    pub reads_without_buffer: u64,
    /// Accepts that failed (each also an `Accept` event with the error), cancellations
    /// by `close` aside.
    pub accept_errors: u64,
    /// Lightweight accepts that found the direct-descriptor table full (`ENFILE`). The
    /// kernel closes the connection it was accepting; keep-accepting listeners then accept
    /// into regular descriptors until the table is three quarters full again.
    pub direct_table_full: u64,
    /// Connections a lightweight keep-accepting listener got as regular descriptors because
    /// the direct-descriptor table was full.
    pub accepted_regular_fallback: u64,
    /// Times a keep-accepting listener's multishot accept ended and the channel armed it
    /// again: at once after a full completion queue, a full direct-descriptor table or a
    /// switch between lightweight and regular descriptors; after [`ACCEPT_RETRY_PAUSE`]
    /// after any other error (e.g. `EMFILE`, `ENFILE`, `ENOMEM`).
    pub accept_rearms: u64,
}

/// How long a keep-accepting listener waits before accepting again after an error such as
/// `EMFILE` (the process's descriptor limit), `ENFILE` or `ENOMEM`. The connections wait in
/// the listen queue meanwhile; the pause keeps a listener whose accepts keep failing from
/// spinning.
pub const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// What a handle refers to.
enum Kind {
    /// A regular descriptor the channel owns.
    Fd(OwnedFd),
    /// A lightweight handle: an io_uring direct descriptor (no process fd).
    Direct(u32),
    /// A listener; `clone` is this channel's partitioned `SO_REUSEPORT` listener, if any.
    Listener {
        orig: OwnedFd,
        clone: Option<OwnedFd>,
    },
}

/// A write waiting for its turn on a handle (one write-side request in flight at a time).
enum Pending {
    Write(WriteData),
    Disconnect,
    Close,
}

/// Memory a send uses, kept alive until its completion arrives (the kernel reads `bufs` and
/// `iov` through `msg`, which is why they are held but never read here).
#[allow(dead_code)]
pub(crate) enum WriteData {
    Owned(Box<dyn AsRef<[u8]>>),
    Vectored {
        bufs: Vec<Box<dyn AsRef<[u8]>>>,
        iov: Vec<libc::iovec>,
        msg: Box<libc::msghdr>,
    },
    /// Caller-owned memory (C ABI): valid until the completion by contract.
    Raw {
        ptr: *const u8,
        len: usize,
    },
    RawVectored {
        iov: Vec<libc::iovec>,
        msg: Box<libc::msghdr>,
    },
}

impl WriteData {
    fn vectored(&self) -> bool {
        matches!(
            self,
            WriteData::Vectored { .. } | WriteData::RawVectored { .. }
        )
    }
}

struct HandleEntry {
    gen: u32,
    kind: Option<Kind>,
    cookie: u64,
    /// Ops of this handle submitted (or queued in the SQ) and not completed.
    in_flight: u32,
    read_in_flight: bool,
    /// The armed multishot read (its op index), if any.
    multishot_read: Option<u64>,
    /// `stop_reading` was asked: do not re-arm the multishot read.
    stop_requested: bool,
    reads: VecDeque<u32>,
    write_in_flight: bool,
    writes: VecDeque<Pending>,
    closing: bool,
    /// Close has been submitted; the Close event waits until in_flight drops to 0.
    close_submitted: bool,
    close_result: Option<std::result::Result<usize, Errno>>,
    /// Unregistered: remaining completions are dropped, not delivered.
    detached: bool,
    /// For a listener: the keep-accepting request (`accept(h, 0, ..)`).
    accept: Option<AcceptLoop>,
}

/// A listener's keep-accepting request, which the channel keeps armed until the listener
/// closes: a multishot accept is re-armed whenever it ends.
struct AcceptLoop {
    /// The caller asked for lightweight handles.
    lightweight: bool,
    /// The armed multishot accept: its op index and whether it makes direct descriptors.
    /// `None` while it waits out [`ACCEPT_RETRY_PAUSE`].
    armed: Option<(u64, bool)>,
    /// The armed accept is being cancelled to be re-armed in the other descriptor mode.
    switching: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OpKind {
    Accept { multishot: bool, lightweight: bool },
    Read,
    ReadMulti,
    Write,
    Disconnect,
    Close,
    Connect,
    Install,
}

struct Op {
    slot: u32,
    kind: OpKind,
    data: Option<WriteData>,
    addr: Option<Box<net::RawAddr>>,
}

/// The provided buffer ring: `count` buffers of `size` bytes the kernel picks from on receive.
struct BufRing {
    ring: *mut types::BufRingEntry,
    ring_bytes: usize,
    mem: Vec<u8>,
    size: usize,
    count: u16,
    tail: u16,
}

impl BufRing {
    const GROUP: u16 = 0;

    fn new(count: u16, size: usize) -> io::Result<BufRing> {
        if !count.is_power_of_two() || count > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("buffer count {count} must be a power of two <= 32768"),
            ));
        }
        let ring_bytes = count as usize * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: anonymous private mapping; checked for MAP_FAILED. The kernel needs the
        // ring page-aligned, which mmap guarantees.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(BufRing {
            ring: ptr as *mut types::BufRingEntry,
            ring_bytes,
            mem: vec![0u8; count as usize * size],
            size,
            count,
            tail: 0,
        })
    }

    /// Puts buffer `bid` back at the ring's tail (visible to the kernel after `publish`).
    fn give(&mut self, bid: u16) {
        let idx = (self.tail & (self.count - 1)) as usize;
        // SAFETY: idx < count, inside the mapping; the kernel only reads entries before tail.
        unsafe {
            let e = &mut *self.ring.add(idx);
            e.set_addr(self.mem.as_ptr().add(bid as usize * self.size) as u64);
            e.set_len(self.size as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&mut self) {
        // SAFETY: the tail field lives in the first entry of the mapping; the release store
        // orders the entry writes above before the kernel sees the new tail.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    fn data(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.size;
        &self.mem[start..start + len.min(self.size)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what new() mapped; the ring was unregistered (or the
        // io_uring closed) before this runs, see Channel's field order.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_bytes) };
    }
}

const CANCEL_TAG: u64 = u64::MAX;
/// `IORING_RECVSEND_POLL_FIRST` (include/uapi/linux/io_uring.h); the crate keeps `sys` private.
const RECVSEND_POLL_FIRST: u16 = 1;

/// A MegaPipe channel: one per thread, pinned to its core, multiplexing that thread's handles.
///
/// Not `Send`: io_uring is set up single-issuer, so only the creating thread may use it.
pub struct Channel {
    ring: IoUring,
    bufs: BufRing,
    cfg: Config,
    cpu: usize,
    handles: Vec<HandleEntry>,
    free_slots: Vec<u32>,
    ops: Vec<Option<Op>>,
    free_ops: Vec<u32>,
    events: VecDeque<Event>,
    /// Buffer of the read event handed out last; given back at the next dispatch.
    lent: Option<u16>,
    unsubmitted: usize,
    stats: Stats,
    install_result: Option<std::result::Result<RawFd, Errno>>,
    cq_buf: Vec<(u64, i32, u32)>,
    /// Submission entries that did not fit in the ring; they go to the kernel, in order,
    /// ahead of any later entry as the ring makes room. A request is never dropped for want
    /// of ring space.
    sq_backlog: VecDeque<squeue::Entry>,
    /// Size of the registered direct-descriptor table.
    direct_slots: u32,
    /// A lightweight accept found the direct-descriptor table full: keep-accepting listeners
    /// accept into regular descriptors until it is three quarters full again.
    direct_full: bool,
    /// Keep-accepting listeners (slot, generation) waiting out `ACCEPT_RETRY_PAUSE`, and when
    /// each may accept again.
    accept_retries: Vec<(u32, u32, Instant)>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Channel {
    /// `mp_create`: sets up the ring, the direct-descriptor table and the buffer ring, and pins
    /// the calling thread to `cfg.cpu`.
    pub fn new(cfg: Config) -> Result<Channel> {
        if let Some(cpu) = cfg.cpu {
            net::pin_to_cpu(cpu)?;
        }
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = cfg
            .cpu
            .unwrap_or_else(|| unsafe { libc::sched_getcpu() }.max(0) as usize);
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(cfg.ring_entries * 8)
            .build(cfg.ring_entries)?;
        let nofile = net::raise_nofile_limit();
        let slots = (cfg.direct_slots as u64).min(nofile.saturating_sub(64).max(64)) as u32;
        ring.submitter().register_files_sparse(slots)?;
        let mut bufs = BufRing::new(cfg.buffers, cfg.buffer_size)?;
        for bid in 0..cfg.buffers {
            bufs.give(bid);
        }
        bufs.publish();
        // SAFETY: the ring memory stays mapped for the channel's life (BufRing is dropped
        // after the IoUring field, which unregisters everything when its fd closes).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.ring as u64,
                cfg.buffers,
                BufRing::GROUP,
                0,
            )?;
        }
        Ok(Channel {
            ring,
            bufs,
            cpu,
            cfg,
            handles: Vec::new(),
            free_slots: Vec::new(),
            ops: Vec::new(),
            free_ops: Vec::new(),
            events: VecDeque::new(),
            lent: None,
            unsubmitted: 0,
            stats: Stats::default(),
            install_result: None,
            cq_buf: Vec::new(),
            sq_backlog: VecDeque::new(),
            direct_slots: slots,
            direct_full: false,
            accept_retries: Vec::new(),
            _not_send: std::marker::PhantomData,
        })
    }

    /// The CPU this channel serves.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Size of one receive buffer (the largest `read` allowed).
    pub fn buffer_size(&self) -> usize {
        self.cfg.buffer_size
    }

    /// The channel's counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Changes the batching threshold (1 submits every request at once).
    pub fn set_batch_threshold(&mut self, n: usize) {
        self.cfg.batch_threshold = n.max(1);
    }

    // ---- handle table ----

    fn alloc_handle(&mut self, kind: Kind, cookie: u64) -> Handle {
        if matches!(kind, Kind::Direct(_)) {
            self.stats.lightweight_open += 1;
        }
        self.stats.handles_open += 1;
        let entry = |gen| HandleEntry {
            gen,
            kind: Some(kind),
            cookie,
            in_flight: 0,
            read_in_flight: false,
            multishot_read: None,
            stop_requested: false,
            reads: VecDeque::new(),
            write_in_flight: false,
            writes: VecDeque::new(),
            closing: false,
            close_submitted: false,
            close_result: None,
            detached: false,
            accept: None,
        };
        if let Some(slot) = self.free_slots.pop() {
            let gen = self.handles[slot as usize].gen.wrapping_add(1);
            self.handles[slot as usize] = entry(gen);
            Handle::new(slot, gen)
        } else {
            let slot = self.handles.len() as u32;
            self.handles.push(entry(1));
            Handle::new(slot, 1)
        }
    }

    fn free_handle(&mut self, slot: u32) {
        let e = &mut self.handles[slot as usize];
        if let Some(kind) = e.kind.take() {
            if matches!(kind, Kind::Direct(_)) {
                self.stats.lightweight_open -= 1;
            }
            self.stats.handles_open -= 1;
            drop(kind);
        }
        e.gen = e.gen.wrapping_add(1);
        e.reads.clear();
        e.writes.clear();
        self.free_slots.push(slot);
    }

    fn entry(&self, h: Handle) -> Result<&HandleEntry> {
        match self.handles.get(h.slot() as usize) {
            Some(e) if e.gen == h.gen() && e.kind.is_some() && !e.detached => Ok(e),
            _ => Err(Error::BadHandle(h)),
        }
    }

    fn entry_open(&mut self, h: Handle) -> Result<&mut HandleEntry> {
        self.entry(h)?;
        let e = &mut self.handles[h.slot() as usize];
        if e.closing {
            return Err(Error::Closing(h));
        }
        Ok(e)
    }

    /// The cookie registered with `h`.
    pub fn cookie(&self, h: Handle) -> Result<u64> {
        Ok(self.entry(h)?.cookie)
    }

    /// Sets the cookie reported in `h`'s events (accepted handles start with 0).
    pub fn set_cookie(&mut self, h: Handle, cookie: u64) -> Result<()> {
        self.entry_open(h)?.cookie = cookie;
        Ok(())
    }

    /// Whether `h` is a lightweight (direct-descriptor) handle.
    pub fn is_lightweight(&self, h: Handle) -> Result<bool> {
        Ok(matches!(self.entry(h)?.kind, Some(Kind::Direct(_))))
    }

    /// The regular descriptor behind `h` (`None` for lightweight handles).
    pub fn raw_fd(&self, h: Handle) -> Result<Option<RawFd>> {
        Ok(match self.entry(h)?.kind.as_ref() {
            Some(Kind::Fd(fd)) => Some(fd.as_raw_fd()),
            Some(Kind::Listener { orig, clone }) => {
                Some(clone.as_ref().unwrap_or(orig).as_raw_fd())
            }
            _ => None,
        })
    }

    fn target(kind: &Kind) -> Target {
        match kind {
            Kind::Fd(fd) => Target::Fd(fd.as_raw_fd()),
            Kind::Direct(slot) => Target::Fixed(*slot),
            Kind::Listener { orig, clone } => {
                Target::Fd(clone.as_ref().unwrap_or(orig).as_raw_fd())
            }
        }
    }

    // ---- submission ----

    fn alloc_op(&mut self, op: Op) -> u64 {
        if let Some(i) = self.free_ops.pop() {
            self.ops[i as usize] = Some(op);
            i as u64
        } else {
            self.ops.push(Some(op));
            (self.ops.len() - 1) as u64
        }
    }

    /// Queues `sqe` for the kernel. It cannot fail: an entry the ring has no room for waits
    /// in `sq_backlog` and goes in first when the ring next has room.
    fn push_sqe(&mut self, sqe: squeue::Entry) {
        self.unsubmitted += 1;
        if self.sq_backlog.is_empty() {
            // SAFETY: every pointer in sqe refers to memory owned by an Op (or the buffer
            // ring) that lives until the op's completion is reaped.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                if self.unsubmitted >= self.cfg.batch_threshold {
                    self.flush_now();
                }
                return;
            }
        }
        self.sq_backlog.push_back(sqe);
        self.flush_now();
    }

    /// Submits now. The requests stay queued if the kernel refuses them for the moment; a
    /// lasting error shows at the next `dispatch`, whose wait submits them again.
    fn flush_now(&mut self) {
        let _ = self.submit(0);
    }

    /// Moves backlogged entries into the ring while it has room.
    fn fill_sq(&mut self) {
        if self.sq_backlog.is_empty() {
            return;
        }
        let mut sq = self.ring.submission();
        while let Some(sqe) = self.sq_backlog.front() {
            // SAFETY: as in push_sqe; the entries were built the same way.
            if unsafe { sq.push(sqe) }.is_err() {
                break;
            }
            self.sq_backlog.pop_front();
        }
    }

    /// Queues an op's request and returns the op's index (its user_data).
    fn submit_op(&mut self, op: Op, build: impl FnOnce(&Op) -> squeue::Entry) -> u64 {
        let slot = op.slot;
        let ud = self.alloc_op(op);
        let sqe = build(self.ops[ud as usize].as_ref().unwrap()).user_data(ud);
        if slot != u32::MAX {
            self.handles[slot as usize].in_flight += 1;
        }
        self.stats.ops_in_flight += 1;
        self.push_sqe(sqe);
        ud
    }

    /// Hands the queued entries (backlog first) to the kernel and waits for `want` completions.
    fn submit(&mut self, want: usize) -> Result<usize> {
        loop {
            self.fill_sq();
            let in_ring = self.unsubmitted.saturating_sub(self.sq_backlog.len());
            self.stats.sqes += in_ring as u64;
            self.unsubmitted -= in_ring;
            self.stats.syscalls += 1;
            // With entries still backlogged, wait for nothing: the loop submits them next.
            let backlogged = !self.sq_backlog.is_empty();
            let n = match self
                .ring
                .submitter()
                .submit_and_wait(if backlogged { 0 } else { want })
            {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && want == 0 => return Ok(0),
                Err(e) => return Err(e.into()),
            };
            // Stop when all is in, or when the kernel took nothing (it is out of room).
            if !backlogged || n == 0 {
                return Ok(n);
            }
        }
    }

    /// `mp_flush`: pushes queued requests to the kernel now.
    pub fn flush(&mut self) -> Result<()> {
        if self.unsubmitted > 0 {
            self.submit(0)?;
        }
        Ok(())
    }
}

mod completions;
mod requests;

use completions::*;

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

    // ---- registration ----

    /// `mp_register`: adds `fd` to the channel under `cookie`. The channel owns `fd` until
    /// `close` (closed) or `unregister` (handed back). A listening socket with a non-zero
    /// `cpu_mask` (which must include this channel's cpu) becomes a partitioned listener: the
    /// channel opens its own `SO_REUSEPORT` listener on the same address, steered to its cpu with
    /// `SO_INCOMING_CPU`, so connections whose SYN is processed on this core queue here only.
    pub fn register(&mut self, fd: OwnedFd, cookie: u64, cpu_mask: u64) -> Result<Handle> {
        let raw = fd.as_raw_fd();
        if net::is_listening(raw) {
            let clone = if cpu_mask != 0 {
                if self.cpu >= 64 || cpu_mask & (1u64 << self.cpu) == 0 {
                    return Err(Error::CpuMask {
                        cpu: self.cpu,
                        mask: cpu_mask,
                    });
                }
                let addr = net::local_addr(raw)?;
                let opts = net::ListenOptions {
                    reuseport: true,
                    incoming_cpu: Some(self.cpu),
                    ..Default::default()
                };
                Some(net::tcp_listener(addr, opts).map_err(|e| {
                    Error::Io(io::Error::new(
                        e.kind(),
                        format!(
                            "partitioned listener on {addr}: {e} (the registered socket needs SO_REUSEPORT)"
                        ),
                    ))
                })?)
            } else {
                None
            };
            return Ok(self.alloc_handle(Kind::Listener { orig: fd, clone }, cookie));
        }
        Ok(self.alloc_handle(Kind::Fd(fd), cookie))
    }

    /// `mp_unregister`: cancels `h`'s requests in the kernel and waits for them, dropping their
    /// completions (no event for `h` follows). Returns the regular descriptor to the caller; a
    /// lightweight handle is closed and `None` returned.
    pub fn unregister(&mut self, h: Handle) -> Result<Option<OwnedFd>> {
        self.entry(h)?;
        let slot = h.slot();
        {
            let e = &mut self.handles[slot as usize];
            e.detached = true;
            e.reads.clear();
            e.writes.clear();
        }
        // Events already reaped but not handed out are dropped too.
        let mut kept = VecDeque::with_capacity(self.events.len());
        for ev in self.events.drain(..) {
            if ev.handle == h {
                self.stats.cancelled += 1;
                if let Some(bid) = ev.buf {
                    self.bufs.give(bid);
                    self.stats.buffers_out -= 1;
                }
            } else {
                kept.push_back(ev);
            }
        }
        self.events = kept;
        self.bufs.publish();
        if self.handles[slot as usize].in_flight > 0 {
            let target = Self::target(self.handles[slot as usize].kind.as_ref().unwrap());
            self.push_cancel(target);
            while self.handles[slot as usize].in_flight > 0 {
                self.submit(1)?;
                self.reap();
            }
        }
        let kind = self.handles[slot as usize].kind.take();
        if matches!(kind, Some(Kind::Direct(_))) {
            self.stats.lightweight_open -= 1;
        }
        self.stats.handles_open -= 1;
        self.handles[slot as usize].detached = false;
        self.free_handle(slot);
        Ok(match kind {
            Some(Kind::Fd(fd)) => Some(fd),
            Some(Kind::Listener { orig, .. }) => Some(orig),
            Some(Kind::Direct(idx)) => {
                self.ring.submitter().register_files_update(idx, &[-1])?;
                None
            }
            None => None,
        })
    }

    fn push_cancel(&mut self, target: Target) {
        let builder = match target {
            Target::Fd(fd) => types::CancelBuilder::fd(types::Fd(fd)),
            Target::Fixed(i) => types::CancelBuilder::fd(types::Fixed(i)),
        }
        .all();
        let sqe = opcode::AsyncCancel2::new(builder)
            .build()
            .user_data(CANCEL_TAG);
        self.push_sqe(sqe);
    }

    /// Cancels the op with index `ud` and submits at once: the cancel names the op by index,
    /// and an index is reused as soon as its op's last completion is reaped, so a cancel
    /// left queued across a reap could hit a later op.
    fn cancel_op_now(&mut self, ud: u64) {
        let sqe = opcode::AsyncCancel::new(ud).build().user_data(CANCEL_TAG);
        self.push_sqe(sqe);
        self.flush_now();
    }

    // ---- requests ----

    /// `mp_accept`: accepts connections on listener `h`. `count == 0` keeps accepting until
    /// the handle closes: one multishot request, which the channel arms again whenever it
    /// ends (after [`ACCEPT_RETRY_PAUSE`] if it ended with an error such as `EMFILE`); a
    /// second call only changes `lightweight`. `count > 0` accepts exactly that many (each
    /// failure completes one of them). `lightweight` puts new connections in direct
    /// descriptors; while the direct-descriptor table is full, a keep-accepting listener
    /// accepts into regular descriptors instead.
    pub fn accept(&mut self, h: Handle, count: u32, lightweight: bool) -> Result<()> {
        let e = self.entry_open(h)?;
        let Some(Kind::Listener { orig, clone }) = e.kind.as_ref() else {
            return Err(Error::WrongKind("accept needs a listening handle"));
        };
        let fd = clone.as_ref().unwrap_or(orig).as_raw_fd();
        let slot = h.slot();
        if count == 0 {
            if let Some(acc) = e.accept.as_mut() {
                acc.lightweight = lightweight;
                self.sync_accept_modes();
            } else {
                e.accept = Some(AcceptLoop {
                    lightweight,
                    armed: None,
                    switching: false,
                });
                self.arm_accept(slot);
            }
            return Ok(());
        }
        for _ in 0..count {
            let op = Op {
                slot,
                kind: OpKind::Accept {
                    multishot: false,
                    lightweight,
                },
                data: None,
                addr: None,
            };
            self.submit_op(op, |_| {
                let mut a =
                    opcode::Accept::new(types::Fd(fd), std::ptr::null_mut(), std::ptr::null_mut());
                // Direct descriptors have no fd-table entry, so CLOEXEC is refused for them.
                if lightweight {
                    a = a.file_index(Some(types::DestinationSlot::auto_target()));
                } else {
                    a = a.flags(libc::SOCK_CLOEXEC);
                }
                a.build()
            });
        }
        Ok(())
    }

    /// Whether a keep-accepting listener that asked for `lightweight` handles gets them now.
    fn accept_mode(&self, lightweight: bool) -> bool {
        lightweight && !self.direct_full
    }

    /// Arms the keep-accepting listener in `slot` (if it is one, open, and not armed).
    fn arm_accept(&mut self, slot: u32) {
        let e = &self.handles[slot as usize];
        let (Some(Kind::Listener { orig, clone }), Some(acc)) =
            (e.kind.as_ref(), e.accept.as_ref())
        else {
            return;
        };
        if acc.armed.is_some() || e.closing || e.detached {
            return;
        }
        let fd = clone.as_ref().unwrap_or(orig).as_raw_fd();
        let lightweight = self.accept_mode(acc.lightweight);
        let op = Op {
            slot,
            kind: OpKind::Accept {
                multishot: true,
                lightweight,
            },
            data: None,
            addr: None,
        };
        let ud = self.submit_op(op, |_| {
            opcode::AcceptMulti::new(types::Fd(fd))
                .allocate_file_index(lightweight)
                .flags(if lightweight { 0 } else { libc::SOCK_CLOEXEC })
                .build()
        });
        if let Some(acc) = self.handles[slot as usize].accept.as_mut() {
            acc.armed = Some((ud, lightweight));
        }
    }

    /// Cancels every armed keep-accepting request whose descriptor mode is no longer the one
    /// wanted; each is armed again in the other mode when its cancellation completes.
    fn sync_accept_modes(&mut self) {
        for slot in 0..self.handles.len() {
            let e = &self.handles[slot];
            let Some(acc) = e.accept.as_ref() else {
                continue;
            };
            let Some((ud, lightweight)) = acc.armed else {
                continue;
            };
            if e.closing
                || e.detached
                || acc.switching
                || lightweight == self.accept_mode(acc.lightweight)
            {
                continue;
            }
            self.handles[slot].accept.as_mut().unwrap().switching = true;
            self.cancel_op_now(ud);
        }
    }

    /// A keep-accepting listener's multishot accept ended with `result`: arm it again, at
    /// once or after a pause.
    fn accept_ended(&mut self, slot: u32, result: std::result::Result<usize, Errno>) {
        let e = &mut self.handles[slot as usize];
        let gen = e.gen;
        let closing = e.closing || e.detached;
        let Some(acc) = e.accept.as_mut() else {
            return;
        };
        let was_lightweight = acc.armed.take().is_some_and(|(_, lw)| lw);
        let switching = std::mem::take(&mut acc.switching);
        if closing {
            return;
        }
        self.stats.accept_rearms += 1;
        let at_once = match result {
            // The kernel ends a multishot accept when the completion queue is full.
            Ok(_) => true,
            Err(Errno(libc::ECANCELED)) => switching,
            // The direct-descriptor table is full: regular descriptors from now on.
            Err(Errno(libc::ENFILE)) => was_lightweight,
            Err(_) => false,
        };
        if at_once {
            self.arm_accept(slot);
        } else {
            self.accept_retries
                .push((slot, gen, Instant::now() + ACCEPT_RETRY_PAUSE));
        }
    }

    /// Arms listeners whose pause is over, and returns to lightweight accepts once the
    /// direct-descriptor table has drained to three quarters.
    fn housekeeping(&mut self) {
        if self.direct_full && self.stats.lightweight_open <= self.direct_slots as u64 * 3 / 4 {
            self.direct_full = false;
            self.sync_accept_modes();
        }
        if self.accept_retries.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        self.accept_retries.retain(|&(slot, gen, at)| {
            if at <= now {
                due.push((slot, gen));
            }
            at > now
        });
        for (slot, gen) in due {
            if self.handles[slot as usize].gen == gen {
                self.arm_accept(slot);
            }
        }
    }

    /// `mp_read`: receives up to `size` bytes (0: a whole buffer) into a buffer the kernel takes
    /// from the channel's ring. Reads on one handle complete in the order issued.
    pub fn read(&mut self, h: Handle, size: usize) -> Result<()> {
        let bsize = self.cfg.buffer_size;
        if size > bsize {
            return Err(Error::BufferTooSmall {
                asked: size,
                buffer_size: bsize,
            });
        }
        let size = if size == 0 { bsize } else { size } as u32;
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("read on a listening handle"));
        }
        if e.read_in_flight {
            e.reads.push_back(size);
            return Ok(());
        }
        self.issue_read(h.slot(), size);
        Ok(())
    }

    /// A read that stays armed (multishot receive): one Read event per arrival of data, with
    /// no request per message, until the peer closes (a 0-byte event), an error, or
    /// [`Channel::stop_reading`] (an `ECANCELED` event); that event is its last. Beyond the
    /// seeds: it saves re-arming a receive for every request.
    pub fn read_multishot(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("read on a listening handle"));
        }
        if e.multishot_read.is_some() {
            return Ok(());
        }
        if e.read_in_flight {
            return Err(Error::Busy(h));
        }
        e.stop_requested = false;
        self.arm_multishot_read(h.slot());
        Ok(())
    }

    fn arm_multishot_read(&mut self, slot: u32) {
        let e = &mut self.handles[slot as usize];
        e.read_in_flight = true;
        let target = Self::target(e.kind.as_ref().unwrap());
        let op = Op {
            slot,
            kind: OpKind::ReadMulti,
            data: None,
            addr: None,
        };
        let ud = self.submit_op(op, |_| match target {
            Target::Fd(fd) => opcode::RecvMulti::new(types::Fd(fd), BufRing::GROUP).build(),
            Target::Fixed(i) => opcode::RecvMulti::new(types::Fixed(i), BufRing::GROUP).build(),
        });
        self.handles[slot as usize].multishot_read = Some(ud);
    }

    /// Disarms a multishot read; it ends with an `ECANCELED` Read event (data already on its
    /// way may still arrive before that). No-op without one.
    pub fn stop_reading(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        let Some(ud) = e.multishot_read else {
            return Ok(());
        };
        if e.stop_requested {
            return Ok(());
        }
        e.stop_requested = true;
        self.cancel_op_now(ud);
        Ok(())
    }

    fn issue_read(&mut self, slot: u32, size: u32) {
        let e = &mut self.handles[slot as usize];
        e.read_in_flight = true;
        let target = Self::target(e.kind.as_ref().unwrap());
        let op = Op {
            slot,
            kind: OpKind::Read,
            data: None,
            addr: None,
        };
        let ioprio = if self.cfg.poll_first_reads {
            RECVSEND_POLL_FIRST
        } else {
            0
        };
        self.submit_op(op, |_| {
            let b = match target {
                Target::Fd(fd) => opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), size),
                Target::Fixed(i) => opcode::Recv::new(types::Fixed(i), std::ptr::null_mut(), size),
            };
            b.buf_group(BufRing::GROUP)
                .ioprio(ioprio)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        });
    }

    /// `mp_write`: sends all of `buf`. The event reports `buf.len()` bytes, or fewer if the
    /// connection failed part-way (then the next request reports the error).
    pub fn write(&mut self, h: Handle, buf: impl AsRef<[u8]> + 'static) -> Result<()> {
        self.queue_write(h, WriteData::Owned(Box::new(buf)))
    }

    /// `mp_writev`: sends the buffers in order as one request (gather output).
    pub fn writev(&mut self, h: Handle, bufs: Vec<Box<dyn AsRef<[u8]>>>) -> Result<()> {
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| {
                let s = (**b).as_ref();
                libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                }
            })
            .collect();
        let msg = Self::msghdr(&iov);
        self.queue_write(h, WriteData::Vectored { bufs, iov, msg })
    }

    /// Like [`Channel::write`] on caller-owned memory (the C ABI).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unchanged until the Write event for it arrives.
    pub unsafe fn write_raw(&mut self, h: Handle, ptr: *const u8, len: usize) -> Result<()> {
        self.queue_write(h, WriteData::Raw { ptr, len })
    }

    /// Like [`Channel::writev`] on caller-owned memory (the C ABI); the iovec array is copied.
    ///
    /// # Safety
    /// Every buffer the iovecs point at must stay valid until the Writev event arrives.
    pub unsafe fn writev_raw(&mut self, h: Handle, iov: &[libc::iovec]) -> Result<()> {
        let iov = iov.to_vec();
        let msg = Self::msghdr(&iov);
        self.queue_write(h, WriteData::RawVectored { iov, msg })
    }

    fn msghdr(iov: &[libc::iovec]) -> Box<libc::msghdr> {
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        msg
    }

    fn queue_write(&mut self, h: Handle, data: WriteData) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("write on a listening handle"));
        }
        e.writes.push_back(Pending::Write(data));
        self.pump_writes(h.slot());
        Ok(())
    }

    /// `mp_disconnect`: shuts down the sending side once queued writes are sent (the peer sees
    /// EOF); the handle stays registered and readable.
    pub fn disconnect(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("disconnect on a listening handle"));
        }
        e.writes.push_back(Pending::Disconnect);
        self.pump_writes(h.slot());
        Ok(())
    }

    /// `mp_close`: after queued writes are sent, cancels outstanding reads and accepts (they
    /// complete with ECANCELED), closes the connection and frees the handle. The Close event is
    /// the handle's last.
    pub fn close(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        e.closing = true;
        e.writes.push_back(Pending::Close);
        self.pump_writes(h.slot());
        Ok(())
    }

    /// Starts the next write-side request of a handle if none is in flight.
    fn pump_writes(&mut self, slot: u32) {
        let e = &mut self.handles[slot as usize];
        if e.write_in_flight || e.detached {
            return;
        }
        let Some(next) = e.writes.pop_front() else {
            return;
        };
        let kind = e.kind.as_ref().unwrap();
        let target = Self::target(kind);
        match next {
            Pending::Write(data) => {
                e.write_in_flight = true;
                let op = Op {
                    slot,
                    kind: OpKind::Write,
                    data: Some(data),
                    addr: None,
                };
                self.submit_op(op, |op| {
                    let flags = libc::MSG_WAITALL | libc::MSG_NOSIGNAL;
                    match op.data.as_ref().unwrap() {
                        WriteData::Owned(b) => {
                            let s = (**b).as_ref();
                            send(target, s.as_ptr(), s.len(), flags)
                        }
                        WriteData::Raw { ptr, len } => send(target, *ptr, *len, flags),
                        WriteData::Vectored { msg, .. } | WriteData::RawVectored { msg, .. } => {
                            let m: *const libc::msghdr = &**msg;
                            match target {
                                Target::Fd(fd) => opcode::SendMsg::new(types::Fd(fd), m),
                                Target::Fixed(i) => opcode::SendMsg::new(types::Fixed(i), m),
                            }
                            .flags(flags as u32)
                            .build()
                        }
                    }
                });
            }
            Pending::Disconnect => {
                e.write_in_flight = true;
                let op = Op {
                    slot,
                    kind: OpKind::Disconnect,
                    data: None,
                    addr: None,
                };
                self.submit_op(op, |_| match target {
                    Target::Fd(fd) => opcode::Shutdown::new(types::Fd(fd), libc::SHUT_WR).build(),
                    Target::Fixed(i) => {
                        opcode::Shutdown::new(types::Fixed(i), libc::SHUT_WR).build()
                    }
                });
            }
            Pending::Close => {
                e.write_in_flight = true;
                e.close_submitted = true;
                if e.in_flight > 0 {
                    self.push_cancel(target);
                }
                let op = Op {
                    slot,
                    kind: OpKind::Close,
                    data: None,
                    addr: None,
                };
                match self.handles[slot as usize].kind.as_ref().unwrap() {
                    Kind::Fd(_) | Kind::Direct(_) => self.submit_op(op, |_| match target {
                        // The OwnedFd is forgotten when the Close completes; the kernel closes it.
                        Target::Fd(fd) => opcode::Close::new(types::Fd(fd)).build(),
                        Target::Fixed(i) => opcode::Close::new(types::Fixed(i)).build(),
                    }),
                    Kind::Listener { .. } => {
                        // Listeners are closed synchronously when the last op drains (their
                        // accept must be cancelled first); a Nop carries the ordering.
                        self.submit_op(op, |_| opcode::Nop::new().build())
                    }
                };
            }
        }
    }

    /// `mp_connect`: opens a regular TCP socket and connects it to `addr` asynchronously; the
    /// returned handle gets a Connect event.
    pub fn connect(&mut self, addr: SocketAddr, cookie: u64) -> Result<Handle> {
        let fd = net::tcp_socket_for(&addr, false)?;
        let raw = fd.as_raw_fd();
        let h = self.alloc_handle(Kind::Fd(fd), cookie);
        let op = Op {
            slot: h.slot(),
            kind: OpKind::Connect,
            data: None,
            addr: Some(Box::new(net::to_raw(&addr))),
        };
        self.submit_op(op, |op| {
            let a = op.addr.as_ref().unwrap();
            opcode::Connect::new(
                types::Fd(raw),
                &a.storage as *const _ as *const libc::sockaddr,
                a.len,
            )
            .build()
        });
        Ok(h)
    }

    /// Fallback from a lightweight handle to a regular descriptor (`IORING_OP_FIXED_FD_INSTALL`):
    /// the handle keeps its id and cookie but now uses the returned process descriptor, which
    /// the channel still owns (use `unregister` to take it). The handle must be idle.
    pub fn to_regular_fd(&mut self, h: Handle) -> Result<RawFd> {
        let e = self.entry_open(h)?;
        let idx = match e.kind {
            Some(Kind::Direct(idx)) => idx,
            Some(Kind::Fd(ref fd)) => return Ok(fd.as_raw_fd()),
            _ => return Err(Error::WrongKind("only connection handles convert")),
        };
        if e.in_flight > 0 || !e.writes.is_empty() || !e.reads.is_empty() {
            return Err(Error::Busy(h));
        }
        let op = Op {
            slot: h.slot(),
            kind: OpKind::Install,
            data: None,
            addr: None,
        };
        let ud = self.alloc_op(op);
        self.handles[h.slot() as usize].in_flight += 1;
        self.stats.ops_in_flight += 1;
        let sqe = opcode::FixedFdInstall::new(types::Fixed(idx), 0)
            .build()
            .user_data(ud);
        self.push_sqe(sqe);
        self.install_result = None;
        while self.handles[h.slot() as usize].in_flight > 0 {
            self.submit(1)?;
            self.reap();
        }
        match self.install_result.take() {
            Some(Ok(fd)) => {
                self.ring.submitter().register_files_update(idx, &[-1])?;
                // SAFETY: fd was just installed in our fd table for us alone.
                let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
                self.handles[h.slot() as usize].kind = Some(Kind::Fd(owned));
                self.stats.lightweight_open -= 1;
                Ok(fd)
            }
            Some(Err(errno)) => Err(Error::Io(io::Error::from_raw_os_error(errno.0))),
            None => Err(Error::Io(io::Error::other(
                "fixed fd install gave no completion",
            ))),
        }
    }

    // ---- completions ----

    /// `mp_dispatch`: hands out the next completion event. When none is queued it flushes the
    /// queued requests and fetches completions from the kernel in one batch, waiting up to
    /// `timeout` (`None`: forever; zero: not at all). `Ok(None)` means the timeout passed.
    /// The bytes of a Read event stay readable through [`Channel::data`] until the next call.
    /// Listeners pausing after a failed accept are armed again from here, so a channel must
    /// be dispatched to keep accepting.
    pub fn dispatch(&mut self, timeout: Option<Duration>) -> Result<Option<Event>> {
        if let Some(bid) = self.lent.take() {
            self.bufs.give(bid);
            self.bufs.publish();
            self.stats.buffers_out -= 1;
        }
        self.housekeeping();
        if self.events.is_empty() {
            self.reap();
        }
        if self.events.is_empty() {
            let deadline = timeout.map(|t| Instant::now() + t);
            loop {
                let now = Instant::now();
                let mut wait = deadline.map(|d| d.saturating_duration_since(now));
                // Wake for the first paused listener too.
                if let Some(at) = self.accept_retries.iter().map(|r| r.2).min() {
                    let until = at.saturating_duration_since(now);
                    wait = Some(wait.map_or(until, |w| w.min(until)));
                }
                self.wait(wait)?;
                self.reap();
                self.housekeeping();
                // Completions that make no event (cancellations) do not end the wait early.
                if !self.events.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
        let Some(ev) = self.events.pop_front() else {
            return Ok(None);
        };
        self.lent = ev.buf;
        self.stats.events += 1;
        Ok(Some(ev))
    }

    /// The received bytes of the Read event `ev` handed out by the last `dispatch`.
    pub fn data(&self, ev: &Event) -> &[u8] {
        match (ev.buf, ev.result) {
            (Some(bid), Ok(n)) if self.lent == Some(bid) => self.bufs.data(bid, n),
            _ => &[],
        }
    }

    /// An event loop: calls `f` with each event, and with `None` when `tick` passes without
    /// one (a chance to check for shutdown), until `f` returns `Break`.
    pub fn run(
        &mut self,
        tick: Duration,
        mut f: impl FnMut(&mut Channel, Option<Event>) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        loop {
            let ev = self.dispatch(Some(tick))?;
            if f(self, ev).is_break() {
                return Ok(());
            }
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Result<()> {
        if !self.sq_backlog.is_empty() {
            self.submit(0)?;
        }
        self.fill_sq();
        let in_ring = self.unsubmitted.saturating_sub(self.sq_backlog.len());
        self.stats.sqes += in_ring as u64;
        self.unsubmitted -= in_ring;
        self.stats.syscalls += 1;
        let r = match timeout {
            None => self.ring.submitter().submit_and_wait(1),
            Some(d) => {
                let ts = types::Timespec::from(d);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Moves every completion in the kernel's queue into the event queue.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cq_buf);
        cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        self.stats.cqes += cqes.len() as u64;
        for &(ud, res, flags) in &cqes {
            if ud != CANCEL_TAG {
                self.complete(ud, res, flags);
            }
        }
        cqes.clear();
        self.cq_buf = cqes;
        self.bufs.publish();
    }

    fn complete(&mut self, ud: u64, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let (slot, kind, vectored, written) = {
            let op = self.ops[ud as usize]
                .as_ref()
                .expect("completion for a freed op");
            let written = match op.data.as_ref() {
                Some(WriteData::Raw { ptr, .. }) => *ptr as usize,
                Some(WriteData::RawVectored { iov, .. }) => {
                    iov.first().map_or(0, |v| v.iov_base as usize)
                }
                _ => 0,
            };
            (
                op.slot,
                op.kind,
                op.data.as_ref().is_some_and(|d| d.vectored()),
                written,
            )
        };
        let keep_op = matches!(
            kind,
            OpKind::Accept {
                multishot: true,
                ..
            } | OpKind::ReadMulti
        ) && more;
        if !keep_op {
            self.ops[ud as usize] = None;
            self.free_ops.push(ud as u32);
            self.stats.ops_in_flight -= 1;
            self.handles[slot as usize].in_flight -= 1;
        }
        let result = if res >= 0 {
            Ok(res as usize)
        } else {
            Err(Errno(-res))
        };
        let buf = cqueue::buffer_select(flags);
        if buf.is_some() {
            self.stats.buffers_out += 1;
        }
        if res == -libc::ENOBUFS {
            self.stats.reads_without_buffer += 1;
        }
        let e = &self.handles[slot as usize];
        let handle = Handle::new(slot, e.gen);
        let cookie = e.cookie;
        if e.detached {
            self.stats.cancelled += 1;
            if let Some(bid) = buf {
                self.bufs.give(bid);
                self.stats.buffers_out -= 1;
            }
            if let (OpKind::Accept { lightweight, .. }, Ok(n)) = (kind, result) {
                self.discard_accepted(n, lightweight);
            }
            return;
        }
        let mut ev = Event {
            command: Command::Read,
            handle,
            cookie,
            result,
            new_handle: None,
            buf: None,
            written,
        };
        match kind {
            OpKind::Accept {
                multishot,
                lightweight,
            } => {
                ev.command = Command::Accept;
                let ended = multishot && !more;
                let e = &self.handles[slot as usize];
                let acc = e.accept.as_ref();
                // The end of an accept cancelled to switch descriptor modes is the channel's
                // own business: no event (a close meanwhile gets its ECANCELED as usual).
                let switched = ended
                    && acc.is_some_and(|a| a.switching)
                    && result == Err(Errno(libc::ECANCELED))
                    && !e.closing;
                let wants_lightweight = acc.is_some_and(|a| a.lightweight);
                let mut table_filled = false;
                match result {
                    Ok(n) => {
                        let k = if lightweight {
                            Kind::Direct(n as u32)
                        } else {
                            // SAFETY: the kernel installed this new descriptor for us alone.
                            Kind::Fd(unsafe {
                                <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n as RawFd)
                            })
                        };
                        self.stats.accepted += 1;
                        if multishot && !lightweight && wants_lightweight {
                            self.stats.accepted_regular_fallback += 1;
                        }
                        ev.new_handle = Some(self.alloc_handle(k, 0));
                        ev.result = Ok(0);
                    }
                    Err(Errno(libc::ECANCELED)) => {}
                    Err(Errno(errno)) => {
                        self.stats.accept_errors += 1;
                        if lightweight && errno == libc::ENFILE {
                            self.stats.direct_table_full += 1;
                            table_filled = !self.direct_full;
                            self.direct_full = true;
                        }
                    }
                }
                if !switched {
                    self.events.push_back(ev);
                }
                if ended {
                    self.accept_ended(slot, result);
                }
                if table_filled {
                    // Other listeners of this channel would find the table full as well.
                    self.sync_accept_modes();
                }
            }
            OpKind::ReadMulti => {
                ev.buf = buf;
                self.events.push_back(ev);
                if !more {
                    let e = &mut self.handles[slot as usize];
                    e.read_in_flight = false;
                    e.multishot_read = None;
                    // The kernel may end a multishot receive on its own (e.g. a full completion
                    // queue); only data-carrying ends are re-armed, so EOF and errors stay final.
                    let data = matches!(result, Ok(n) if n > 0);
                    if data && !e.closing && !e.stop_requested {
                        self.arm_multishot_read(slot);
                    } else {
                        if data && e.stop_requested {
                            // It ended on its own before stop_reading's cancel reached it;
                            // the caller still gets the ECANCELED event that ends a stopped
                            // read, as documented, and may wait for it to read again.
                            self.events.push_back(Event {
                                result: Err(Errno(libc::ECANCELED)),
                                buf: None,
                                written: 0,
                                ..ev
                            });
                        }
                        let e = &mut self.handles[slot as usize];
                        if !e.closing {
                            if let Some(size) = e.reads.pop_front() {
                                self.issue_read(slot, size);
                            }
                        }
                    }
                }
            }
            OpKind::Read => {
                ev.buf = buf;
                self.events.push_back(ev);
                let e = &mut self.handles[slot as usize];
                e.read_in_flight = false;
                if !e.closing {
                    if let Some(size) = e.reads.pop_front() {
                        self.issue_read(slot, size);
                    }
                }
            }
            OpKind::Write | OpKind::Disconnect => {
                ev.command = match kind {
                    OpKind::Disconnect => Command::Disconnect,
                    _ if vectored => Command::Writev,
                    _ => Command::Write,
                };
                self.events.push_back(ev);
                self.handles[slot as usize].write_in_flight = false;
                self.pump_writes(slot);
            }
            OpKind::Close => {
                let e = &mut self.handles[slot as usize];
                e.close_result = Some(result);
                match e.kind.take() {
                    // The kernel closed the descriptor already: forget it without closing.
                    Some(Kind::Fd(fd)) => {
                        let _ = fd.into_raw_fd();
                    }
                    Some(Kind::Direct(_)) => self.stats.lightweight_open -= 1,
                    other => drop(other),
                }
                self.stats.handles_open -= 1;
            }
            OpKind::Connect => {
                ev.command = Command::Connect;
                self.events.push_back(ev);
            }
            OpKind::Install => {
                self.install_result = Some(result.map(|n| n as RawFd));
            }
        }
        let e = &self.handles[slot as usize];
        if e.close_submitted && e.in_flight == 0 {
            if let Some(r) = e.close_result {
                self.events.push_back(Event {
                    command: Command::Close,
                    handle,
                    cookie,
                    result: r,
                    new_handle: None,
                    buf: None,
                    written: 0,
                });
                self.free_handle(slot);
            }
        }
    }

    fn discard_accepted(&mut self, n: usize, lightweight: bool) {
        if lightweight {
            let _ = self.ring.submitter().register_files_update(n as u32, &[-1]);
        } else {
            // SAFETY: a descriptor the kernel just gave us and nobody else knows.
            unsafe { libc::close(n as RawFd) };
        }
    }
}

#[derive(Clone, Copy)]
enum Target {
    Fd(RawFd),
    Fixed(u32),
}

fn send(target: Target, ptr: *const u8, len: usize, flags: i32) -> squeue::Entry {
    match target {
        Target::Fd(fd) => opcode::Send::new(types::Fd(fd), ptr, len as u32),
        Target::Fixed(i) => opcode::Send::new(types::Fixed(i), ptr, len as u32),
    }
    .flags(flags)
    .build()
}

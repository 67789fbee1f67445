//! The daemon's side of a slice: the listener that hands a fresh shared region to each app
//! that attaches, and the two ring ends the port's queues drive.
//!
//! Everything the app can write (its ring indices, the descriptors in its rings) is
//! validated before use; a bad value is counted under a named reason and skipped, so the
//! daemon never touches memory outside the region nor trusts a frame it did not hand out.
//! Each attach gets a new region: what a departed (or hung) app left behind is dropped with
//! the old one, so its frames are reclaimed at once however it left, except that the
//! mapping lives on while the daemon's packets still point into it (see [`SessionHooks`]).
//!
//! Frames move without a copy when the port's driver allows it: a send frame the app
//! filled may become a pipeline packet in place ([`Taken::Adopted`]), and such a frame may
//! come back to the app on its receive ring ([`ToApp::push_frame`]); when the pipeline is
//! done with it, the driver hands it back ([`FromApp::give_back`]) and it returns to the
//! app's free-send ring. Packets from elsewhere are still copied into the copy frames.

use std::any::Any;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::layout::{self, hdr, Consumer, Layout, Producer, RingId, RingPtrs};
use crate::sys::{self, Mapping};

macro_rules! counters {
    ($($(#[doc = $d:literal])+ $f:ident,)*) => {
        /// Per-slice counters (daemon side), kept across attaches.
        #[derive(Default, Debug)]
        pub struct SliceCounters { $($(#[doc = $d])+ pub $f: AtomicU64,)* }
        /// A snapshot of [`SliceCounters`].
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct CounterSnapshot { $($(#[doc = $d])+ pub $f: u64,)* }
        impl SliceCounters {
            /// Reads every counter.
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $($f: self.$f.load(Ordering::Relaxed),)* }
            }
        }
        impl CounterSnapshot {
            /// The counters' names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($f),)*];

            /// (name, value) pairs, in declaration order.
            pub fn named(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f),)*]
            }

            /// Sets the counter called `name` to `value`; false (and nothing set) if no
            /// counter has that name.
            pub fn set(&mut self, name: &str, value: u64) -> bool {
                match name {
                    $(stringify!($f) => self.$f = value,)*
                    _ => return false,
                }
                true
            }

            /// A snapshot of the named counters among `pairs` (a later pair for the same
            /// name wins; unknown names are ignored, counters not named are 0).
            pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
                let mut c = Self::default();
                for (name, value) in pairs {
                    c.set(name, value);
                }
                c
            }
        }
    };
}

counters! {
    /// Packets handed to the app.
    to_app_packets,
    /// Bytes handed to the app.
    to_app_bytes,
    /// Packets handed to the app without a copy (their frame was the app's own send frame).
    to_app_zero_copy,
    /// Packets handed to the app by copying them into a copy frame (from another pool).
    to_app_copied,
    /// Packets not handed over: the app's receive ring was full (it stopped consuming).
    to_app_ring_full,
    /// Packets not handed over: every daemon→app frame was still held by the app.
    to_app_no_frame,
    /// Packets not handed over: longer than a frame.
    to_app_too_long,
    /// Packets not handed over: no app attached.
    to_app_no_app,
    /// Packets taken from the app.
    from_app_packets,
    /// Bytes taken from the app.
    from_app_bytes,
    /// Packets taken from the app without a copy (the frame became a pipeline packet).
    from_app_zero_copy,
    /// Packets taken from the app by copying them into the daemon's pool.
    from_app_copied,
    /// Packets taken from the app but dropped: the daemon's packet pool was empty.
    from_app_no_pool_buffer,
    /// Descriptors with an offset outside the app's half of the packet area or not on a
    /// frame boundary.
    invalid_offset,
    /// Descriptors with a length of 0 or more than a frame.
    invalid_length,
    /// Descriptors naming a frame the app does not hold (a duplicate or a stale one).
    invalid_frame_not_held,
    /// Ring indices the app set beyond what the ring allows.
    invalid_ring_index,
    /// Apps that attached.
    attaches,
    /// Apps that left (closed the socket, exited or crashed).
    detaches,
    /// Frames the departed apps still held, reclaimed when they left.
    reclaimed_frames,
    /// Departed apps' regions kept mapped after they left because pipeline packets still
    /// pointed into them.
    regions_deferred,
    /// Departed apps' regions unmapped by the daemon after their last packet was freed.
    regions_released,
    /// Eventfd wake-ups sent to a sleeping app.
    wakeups,
}

/// Most descriptors taken from the app in one call.
const MAX_BATCH: usize = 64;

/// What the port's driver attaches to a session (its packet pool over the send frames).
pub type Ext = Arc<dyn Any + Send + Sync>;

/// The port driver's part in a session's life, called by the listener thread.
pub trait SessionHooks: Send + Sync {
    /// A new session, before the app sees it: what its ring ends carry ([`Session::ext`]).
    fn attach(&self, _s: &Session) -> Option<Ext> {
        None
    }
    /// The app left (or the port closes): what [`attach`](Self::attach) returned for it.
    fn detach(&self, _ext: Ext) {}
    /// About every 100 ms while the port lives.
    fn tick(&self) {}
}

/// One attached app's shared region.
pub struct Session {
    map: Arc<Mapping>,
    layout: Layout,
    rx_kick: OwnedFd,
    memfd: OwnedFd,
    /// Frames the app holds as received ones (kept by [`ToApp`], read when the app leaves).
    to_app_held: AtomicU32,
    ext: Mutex<Option<Ext>>,
}

impl Session {
    /// Creates a region for `ring_size` entries per ring: header written, every app→daemon
    /// frame already on the app's free ring.
    pub fn new(name: &str, ring_size: u32) -> io::Result<Session> {
        let layout =
            Layout::new(ring_size).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let memfd = sys::memfd(&format!("slice:{name}"), layout.region_len)?;
        let map = Mapping::new(memfd.as_raw_fd(), layout.region_len)?;
        let rx_kick = sys::eventfd()?;
        // SAFETY: the mapping is region_len bytes and nobody else sees it yet.
        unsafe {
            layout.write_header(map.base());
            let mut free = Producer::new(RingPtrs::new(map.base(), &layout, RingId::TxFree), 0);
            let _ = free.refresh();
            for i in 0..layout.frames_per_dir {
                free.push(layout::desc(
                    (layout.frames_per_dir + i) * layout.frame_size,
                    0,
                ));
            }
            free.publish();
        }
        Ok(Session {
            map: Arc::new(map),
            layout,
            rx_kick,
            memfd,
            to_app_held: AtomicU32::new(0),
            ext: Mutex::new(None),
        })
    }

    /// The region's geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The shared mapping (an owner to keep it mapped beyond the session).
    pub fn mapping(&self) -> Arc<Mapping> {
        self.map.clone()
    }

    /// First byte of the send frames (frame F of the packet area); `frames_per_dir` frames
    /// of `frame_size` bytes follow.
    pub fn send_frames(&self) -> *mut u8 {
        self.frame_ptr(self.layout.frames_per_dir)
    }

    /// What the driver's [`SessionHooks::attach`] gave this session.
    pub fn ext(&self) -> Option<Ext> {
        self.ext.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn ring(&self, id: RingId) -> RingPtrs {
        // SAFETY: the mapping lives as long as self, and the ring ends keep an Arc to self.
        unsafe { RingPtrs::new(self.map.base(), &self.layout, id) }
    }

    fn frame_ptr(&self, idx: u32) -> *mut u8 {
        // SAFETY: callers pass idx < 2 * frames_per_dir, inside the area.
        unsafe {
            self.map
                .base()
                .add(self.layout.area_off + idx as usize * self.layout.frame_size as usize)
        }
    }
}

/// Marks a frame the app does not hold as a received one.
const NOT_HELD: u32 = u32::MAX;

/// The daemon→app direction (driven by the port's outgoing queue).
pub struct ToApp {
    session: Arc<Session>,
    counters: Arc<SliceCounters>,
    rx: Producer,
    rx_free: Consumer,
    /// Copy frames the app does not hold.
    free: Vec<u32>,
    /// Per frame of the area: the offset handed to the app on the receive ring while it
    /// holds the frame, else NOT_HELD.
    held: Vec<u32>,
    /// Frames the app holds as received ones, of both halves: never more than a ring's
    /// worth, so its releases always fit the receive-free ring.
    nheld: u32,
}

/// Why a packet could not be handed to the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToAppError {
    /// The app's receive ring is full.
    RingFull,
    /// The app holds as many received frames as the ring has entries (or every copy
    /// frame).
    NoFrame,
    /// Longer than a frame.
    TooLong,
}

impl ToApp {
    /// The daemon→app end of `session`.
    pub fn new(session: Arc<Session>, counters: Arc<SliceCounters>) -> ToApp {
        let f = session.layout.frames_per_dir;
        ToApp {
            rx: Producer::new(session.ring(RingId::Rx), 0),
            rx_free: Consumer::new(session.ring(RingId::RxFree), 0),
            free: (0..f).rev().collect(),
            held: vec![NOT_HELD; 2 * f as usize],
            nheld: 0,
            session,
            counters,
        }
    }

    /// Takes back the frames the app returned (send frames that came to it without a copy
    /// are appended to `released`, as indices in the send half, for the driver to give
    /// back), then reads the free room of its ring. Returns how many packets may be pushed.
    pub fn begin(&mut self, released: &mut Vec<u32>) -> u32 {
        let c = &self.counters;
        if self.rx_free.refresh().is_err() {
            c.invalid_ring_index.fetch_add(1, Ordering::Relaxed);
        }
        let n = self.rx_free.avail();
        let l = &self.session.layout;
        let (f, fs) = (l.frames_per_dir, l.frame_size);
        for _ in 0..n {
            let (off, _) = layout::undesc(self.rx_free.pop());
            let idx = off / fs;
            match self.held.get(idx as usize) {
                // Exactly the offset handed out: the app is done with the frame.
                Some(&h) if h == off => {
                    self.held[idx as usize] = NOT_HELD;
                    self.nheld -= 1;
                    if idx < f {
                        self.free.push(idx);
                    } else {
                        released.push(idx - f);
                    }
                }
                Some(&NOT_HELD) if idx < f && off.is_multiple_of(fs) => {
                    c.invalid_frame_not_held.fetch_add(1, Ordering::Relaxed);
                }
                // Outside the area, inside a frame but not where its packet started, or a
                // send frame the app never received.
                _ => {
                    c.invalid_offset.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if n > 0 {
            self.rx_free.release();
            self.publish_held();
        }
        if self.rx.refresh().is_err() {
            c.invalid_ring_index.fetch_add(1, Ordering::Relaxed);
        }
        self.rx.room()
    }

    /// Free entries on the app's receive ring (as of `begin`).
    pub fn room(&self) -> u32 {
        self.rx.room()
    }

    /// Whether one more packet can be handed over now.
    pub fn ready(&self) -> Result<(), ToAppError> {
        if self.rx.room() == 0 {
            Err(ToAppError::RingFull)
        } else if self.nheld >= self.session.layout.frames_per_dir {
            Err(ToAppError::NoFrame)
        } else {
            Ok(())
        }
    }

    /// Copies one packet into a free copy frame and queues it (visible after `finish`).
    pub fn push(&mut self, data: &[u8]) -> Result<(), ToAppError> {
        let l = &self.session.layout;
        if data.len() > l.frame_size as usize {
            return Err(ToAppError::TooLong);
        }
        self.ready()?;
        let Some(i) = self.free.pop() else {
            return Err(ToAppError::NoFrame);
        };
        // SAFETY: i < frames_per_dir; the frame is ours (not held by the app); len fits.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.session.frame_ptr(i), data.len())
        };
        let off = i * l.frame_size;
        self.held[i as usize] = off;
        self.nheld += 1;
        self.rx.push(layout::desc(off, data.len() as u32));
        Ok(())
    }

    /// Queues send frame `frame` (an index in the send half, which the daemon holds: the
    /// driver took it from its pipeline packet), whose packet is `len` bytes at `off` in
    /// the frame, without a copy (visible after `finish`). Fails, changing nothing, as
    /// [`ready`](Self::ready) does.
    pub fn push_frame(&mut self, frame: u32, off: u32, len: u32) -> Result<(), ToAppError> {
        self.ready()?;
        let l = &self.session.layout;
        let idx = l.frames_per_dir + frame;
        debug_assert!(frame < l.frames_per_dir && off + len <= l.frame_size);
        debug_assert_eq!(self.held[idx as usize], NOT_HELD, "send frame given twice");
        let at = idx * l.frame_size + off;
        self.held[idx as usize] = at;
        self.nheld += 1;
        self.rx.push(layout::desc(at, len));
        Ok(())
    }

    fn publish_held(&self) {
        self.session
            .to_app_held
            .store(self.nheld, Ordering::Relaxed);
    }

    /// Publishes what was pushed and wakes the app if it sleeps.
    pub fn finish(&mut self, pushed: u32) {
        if pushed == 0 {
            return;
        }
        self.rx.publish();
        self.publish_held();
        // Pairs with the app's fence between setting APP_WAITING and re-checking the ring.
        fence(Ordering::SeqCst);
        // SAFETY: the header lies inside the mapping.
        let waiting = unsafe {
            (*self
                .session
                .map
                .base()
                .add(hdr::APP_WAITING)
                .cast::<AtomicU32>())
            .load(Ordering::Relaxed)
        };
        if waiting != 0 {
            sys::kick(self.session.rx_kick.as_raw_fd());
            self.counters.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The app→daemon direction (driven by the port's incoming queue).
pub struct FromApp {
    session: Arc<Session>,
    counters: Arc<SliceCounters>,
    tx: Consumer,
    tx_free: Producer,
    /// Per send frame: the app holds it (free to fill, filled, or on the send ring).
    held: Vec<bool>,
    /// Send frames given back while the app's free-send ring had no room.
    pending: Vec<u32>,
}

/// A packet the app sent, as [`FromApp::recv`] shows it to the driver.
pub struct SentFrame<'a> {
    /// The frame's index in the send half (0..frames_per_dir).
    pub frame: u32,
    /// Where the packet starts in the frame.
    pub offset: u32,
    /// The packet's bytes (the app may still write them; they are only bytes).
    pub data: &'a [u8],
}

/// What the driver did with a [`SentFrame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Copied out: the frame goes back to the app at once.
    Copied,
    /// Became a pipeline packet in place: the daemon holds the frame until the driver
    /// gives it back ([`FromApp::give_back`]) or hands it to the app on the receive ring.
    Adopted,
    /// Not kept (no buffer): the frame goes back to the app at once.
    Dropped,
}

impl FromApp {
    /// The app→daemon end of `session` (the app starts with every frame of its half).
    pub fn new(session: Arc<Session>, counters: Arc<SliceCounters>) -> FromApp {
        let f = session.layout.frames_per_dir;
        FromApp {
            tx: Consumer::new(session.ring(RingId::Tx), 0),
            tx_free: Producer::new(session.ring(RingId::TxFree), f),
            held: vec![true; f as usize],
            pending: Vec::new(),
            session,
            counters,
        }
    }

    /// Gives send frame `frame` (an index in the send half that the daemon holds: adopted,
    /// then freed by the pipeline or released by the app after it received it) back to the
    /// app; it goes onto the app's free-send ring with the next `recv`.
    pub fn give_back(&mut self, frame: u32) {
        match self.held.get(frame as usize) {
            Some(false) => self.pending.push(frame),
            // A daemon bug, not the app's doing; never hand a frame out twice.
            _ => debug_assert!(false, "send frame {frame} given back but not the daemon's"),
        }
    }

    /// Takes up to `max` packets the app sent, calling `take` with each one (see
    /// [`Taken`]); frames not adopted go back to the app at once. Returns how many `take`
    /// kept (copied or adopted).
    pub fn recv(&mut self, max: usize, mut take: impl FnMut(SentFrame<'_>) -> Taken) -> usize {
        let c = &self.counters;
        let l = self.session.layout;
        let (f, fs) = (l.frames_per_dir, l.frame_size);
        if self.tx_free.refresh().is_err() {
            c.invalid_ring_index.fetch_add(1, Ordering::Relaxed);
        }
        let mut pushed = false;
        while self.tx_free.room() > 0 {
            let Some(i) = self.pending.pop() else { break };
            self.held[i as usize] = true;
            self.tx_free.push(layout::desc((f + i) * fs, 0));
            pushed = true;
        }
        if self.tx.refresh().is_err() {
            c.invalid_ring_index.fetch_add(1, Ordering::Relaxed);
            if pushed {
                self.tx_free.publish();
            }
            return 0;
        }
        // Never take more than could be given back at once, so no frame is lost between
        // the rings.
        let n = (self.tx.avail() as usize)
            .min(max)
            .min(self.tx_free.room() as usize)
            .min(MAX_BATCH);
        let (mut kept, mut adopted) = (0, 0);
        let mut bytes = 0u64;
        // Frames go back after the batch, so a frame named twice in one batch is caught.
        let mut back = [0u32; MAX_BATCH];
        let mut nback = 0;
        for _ in 0..n {
            let (off, len) = layout::undesc(self.tx.pop());
            let in_frame = off % fs;
            let Some(slot) = l
                .frame_of(off, 0)
                .filter(|&i| i >= f && in_frame.is_multiple_of(layout::TX_ALIGN))
                .map(|i| i - f)
            else {
                c.invalid_offset.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if !self.held[slot as usize] {
                c.invalid_frame_not_held.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.held[slot as usize] = false;
            if len == 0 || len > fs - in_frame {
                c.invalid_length.fetch_add(1, Ordering::Relaxed);
                back[nback] = slot;
                nback += 1;
                continue;
            }
            // SAFETY: the packet lies inside send frame `slot` (checked above). The app
            // may scribble on it meanwhile: that changes the bytes, never our memory.
            let data = unsafe {
                std::slice::from_raw_parts(
                    self.session.frame_ptr(f + slot).add(in_frame as usize),
                    len as usize,
                )
            };
            let t = take(SentFrame {
                frame: slot,
                offset: in_frame,
                data,
            });
            match t {
                Taken::Adopted => adopted += 1,
                Taken::Copied => {}
                Taken::Dropped => {
                    c.from_app_no_pool_buffer.fetch_add(1, Ordering::Relaxed);
                    back[nback] = slot;
                    nback += 1;
                    continue;
                }
            }
            if t == Taken::Copied {
                back[nback] = slot;
                nback += 1;
            }
            kept += 1;
            bytes += len as u64;
        }
        for &slot in &back[..nback] {
            self.held[slot as usize] = true;
            self.tx_free.push(layout::desc((f + slot) * fs, 0));
        }
        if n > 0 {
            self.tx.release();
        }
        if n > 0 || pushed {
            self.tx_free.publish();
        }
        if kept > 0 {
            c.from_app_packets.fetch_add(kept as u64, Ordering::Relaxed);
            c.from_app_bytes.fetch_add(bytes, Ordering::Relaxed);
            c.from_app_zero_copy
                .fetch_add(adopted as u64, Ordering::Relaxed);
            c.from_app_copied
                .fetch_add((kept - adopted) as u64, Ordering::Relaxed);
        }
        kept
    }
}

/// The daemon's listener: one app at a time; each attach gets a fresh [`Session`].
pub struct Server {
    shared: Arc<ServerShared>,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    path: String,
    bound_file: bool,
}

/// What the listener thread and the port's queues share.
pub struct ServerShared {
    /// Per-slice counters.
    pub counters: Arc<SliceCounters>,
    session: Mutex<Option<Arc<Session>>>,
    generation: AtomicU64,
    attached: AtomicBool,
}

impl ServerShared {
    /// Bumped at every attach and detach: a queue whose cached number differs re-reads
    /// the session.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current session and its generation number.
    pub fn session(&self) -> (u64, Option<Arc<Session>>) {
        let s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        (self.generation(), s.clone())
    }

    /// True while an app is attached.
    pub fn attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    fn set(&self, s: Option<Arc<Session>>) {
        let mut cur = self.session.lock().unwrap_or_else(|p| p.into_inner());
        self.attached.store(s.is_some(), Ordering::Release);
        *cur = s;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

fn sockaddr(path: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: all zeroes is a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let abstract_name = path.starts_with('@');
    if path.is_empty() || path.as_bytes().contains(&0) || path.len() >= a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path '{path}' must be 1..{} bytes without NUL",
                a.sun_path.len() - 1
            ),
        ));
    }
    for (d, s) in a.sun_path.iter_mut().zip(path.bytes()) {
        *d = s as libc::c_char;
    }
    if abstract_name {
        a.sun_path[0] = 0;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + usize::from(!abstract_name);
    Ok((a, len as libc::socklen_t))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// True if a stream or seqpacket listener is bound at the address: a datagram connect to
/// one fails with EPROTOTYPE, to a stale file with ECONNREFUSED, and neither disturbs (or
/// queues a connection on) a live listener.
fn listener_alive(a: &libc::sockaddr_un, len: libc::socklen_t) -> bool {
    // SAFETY: plain syscalls; a valid address of length len.
    unsafe {
        let s = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return true;
        }
        let s = OwnedFd::from_raw_fd(s);
        let r = libc::connect(s.as_raw_fd(), (a as *const libc::sockaddr_un).cast(), len);
        r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ECONNREFUSED)
    }
}

/// Checks that `path` can name a Unix socket ('@' = abstract name): the error says why not.
pub fn check_socket_path(path: &str) -> io::Result<()> {
    sockaddr(path).map(|_| ())
}

/// Connects a SOCK_SEQPACKET socket to `path` ('@' = abstract name).
pub fn connect(path: &str) -> io::Result<OwnedFd> {
    let (a, len) = sockaddr(path)?;
    let s = seqpacket()?;
    // SAFETY: a valid address of length len.
    if unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("connect({path}): {e}")));
    }
    Ok(s)
}

/// Listens (SOCK_SEQPACKET) at `path` ('@' = abstract name). A stale socket file nobody
/// listens on is replaced; any other existing file is refused (`AlreadyExists`), and so is a
/// socket with a live listener (`AddrInUse`).
pub fn listen(path: &str) -> io::Result<OwnedFd> {
    let (a, len) = sockaddr(path)?;
    let abstract_name = path.starts_with('@');
    if !abstract_name {
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("'{path}' exists and is not a socket; not replacing it"),
                ));
            }
            if listener_alive(&a, len) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("socket '{path}' is in use by another listener"),
                ));
            }
            let _ = std::fs::remove_file(path);
        }
    }
    let listen = seqpacket()?;
    // SAFETY: valid address; plain syscalls on our socket.
    unsafe {
        if libc::bind(
            listen.as_raw_fd(),
            (&a as *const libc::sockaddr_un).cast(),
            len,
        ) != 0
        {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("bind({path}): {e}")));
        }
        if libc::listen(listen.as_raw_fd(), 4) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(listen)
}

impl Server {
    /// Listens at `path` ('@' = abstract name; a stale socket file nobody listens on is
    /// replaced, any other existing file refused) for apps, giving each a region with rings of
    /// `ring_size` entries.
    pub fn bind(name: &str, path: &str, ring_size: u32) -> io::Result<Server> {
        Self::bind_with(name, path, ring_size, Arc::default(), None)
    }

    /// As [`bind`](Self::bind), counting in `counters`, with the driver's `hooks` called at
    /// each attach, detach and tick.
    pub fn bind_with(
        name: &str,
        path: &str,
        ring_size: u32,
        counters: Arc<SliceCounters>,
        hooks: Option<Arc<dyn SessionHooks>>,
    ) -> io::Result<Server> {
        Layout::new(ring_size).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let listen = listen(path)?;
        let abstract_name = path.starts_with('@');
        let stop = sys::eventfd()?;
        let shared = Arc::new(ServerShared {
            counters,
            session: Mutex::new(None),
            generation: AtomicU64::new(0),
            attached: AtomicBool::new(false),
        });
        let t = Listener {
            shared: shared.clone(),
            listen,
            stop: stop.as_raw_fd(),
            name: name.to_string(),
            ring_size,
            hooks,
        };
        let thread = std::thread::Builder::new()
            .name(format!("slice:{name}"))
            .spawn(move || t.run())?;
        Ok(Server {
            shared,
            stop,
            thread: Some(thread),
            path: path.to_string(),
            bound_file: !abstract_name,
        })
    }

    /// State shared with the queues.
    pub fn shared(&self) -> &Arc<ServerShared> {
        &self.shared
    }

    /// The socket path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        sys::kick(self.stop.as_raw_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.bound_file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

struct Listener {
    shared: Arc<ServerShared>,
    listen: OwnedFd,
    stop: RawFd,
    name: String,
    ring_size: u32,
    hooks: Option<Arc<dyn SessionHooks>>,
}

/// How often the listener calls [`SessionHooks::tick`].
const TICK_MS: i32 = 100;

impl Listener {
    /// Waits on `fd` and the stop eventfd, ticking the hooks meanwhile; true if `fd` became
    /// ready (false: stop).
    fn wait(&self, fd: RawFd) -> bool {
        loop {
            let mut p = [
                libc::pollfd {
                    fd: self.stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let r = unsafe { libc::poll(p.as_mut_ptr(), 2, TICK_MS) };
            if r <= 0 {
                if let Some(h) = &self.hooks {
                    h.tick();
                }
                continue;
            }
            if p[0].revents != 0 {
                return false;
            }
            if p[1].revents != 0 {
                return true;
            }
        }
    }

    /// Hands the session's driver part back to the driver.
    fn detach(&self, session: &Session) {
        let ext = session.ext.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(h), Some(e)) = (&self.hooks, ext) {
            h.detach(e);
        }
    }

    fn run(self) {
        while self.wait(self.listen.as_raw_fd()) {
            // SAFETY: accept on our listening socket.
            let c = unsafe {
                libc::accept4(
                    self.listen.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                continue;
            }
            // SAFETY: fresh descriptor.
            let client = unsafe { OwnedFd::from_raw_fd(c) };
            let Ok(session) = Session::new(&self.name, self.ring_size) else {
                continue;
            };
            if let Some(h) = &self.hooks {
                *session.ext.lock().unwrap_or_else(|p| p.into_inner()) = h.attach(&session);
            }
            let mut hello = Vec::with_capacity(16);
            hello.extend_from_slice(&layout::MAGIC.to_le_bytes());
            hello.extend_from_slice(&(session.layout.region_len as u64).to_le_bytes());
            let fds = [session.memfd.as_raw_fd(), session.rx_kick.as_raw_fd()];
            if sys::send_fds(client.as_raw_fd(), &hello, &fds).is_err() {
                self.detach(&session);
                continue;
            }
            let session = Arc::new(session);
            let c = &self.shared.counters;
            c.attaches.fetch_add(1, Ordering::Relaxed);
            self.shared.set(Some(session.clone()));
            // The app never writes to the socket: readable means it closed (or died).
            let stopping = !self.wait(client.as_raw_fd());
            self.shared.set(None);
            c.detaches.fetch_add(1, Ordering::Relaxed);
            c.reclaimed_frames.fetch_add(
                session.to_app_held.load(Ordering::Relaxed) as u64,
                Ordering::Relaxed,
            );
            self.detach(&session);
            if stopping {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CounterSnapshot;

    #[test]
    fn counter_names_set_and_from_pairs_follow_the_one_declaration() {
        assert_eq!(CounterSnapshot::NAMES.len(), 23);
        assert_eq!(CounterSnapshot::NAMES[0], "to_app_packets");
        assert_eq!(CounterSnapshot::NAMES[22], "wakeups");
        let mut c = CounterSnapshot::default();
        for (i, n) in CounterSnapshot::NAMES.iter().enumerate() {
            assert!(c.set(n, i as u64 + 1));
        }
        assert!(!c.set("pipeline_frames", 9));
        let named = c.named();
        assert_eq!(
            named.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            CounterSnapshot::NAMES
        );
        assert!(named
            .iter()
            .enumerate()
            .all(|(i, &(_, v))| v == i as u64 + 1));
        assert_eq!(CounterSnapshot::from_pairs(named.iter().copied()), c);
        let d = CounterSnapshot::from_pairs([("wakeups", 1), ("nope", 5), ("wakeups", 2)]);
        assert_eq!(
            d,
            CounterSnapshot {
                wakeups: 2,
                ..Default::default()
            }
        );
    }
}

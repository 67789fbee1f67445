//! MemifPort: a memif interface (VPP's, DPDK's `net_memif`, libmemif's) as a port, in
//! either role. As a *server* the port listens on a Unix socket and takes one client for
//! its interface id; as a *client* it connects (and reconnects every second while the
//! server is away) and owns the shared memory. The link is up while connected.
//!
//! Packets are copied between the pipeline's buffers and the memif buffers, once each way
//! (memif's buffers belong to the client's region, and Bessemer's packet memory is not a
//! memfd a peer could map). Every descriptor and index the peer writes is checked before
//! use and a bad one is counted and skipped: the daemon never reads or writes outside the
//! regions, and a peer that stops consuming only makes PortOut drop (counted).
//!
//! A small control thread per port runs the handshake and notices disconnects; the queues
//! pick up a new connection at their next call (one atomic load per call when nothing
//! changed), and a departed connection's memory stays mapped until no queue uses it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bessemer_core::packet::LARGE_DATA_CAPACITY;
use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PoolCache, Result, Value};
use bessemer_slice::sys;

use crate::memif::{self, Channel, Config, Desc, Role, Session, DESC_FLAG_NEXT};

const MSG: &str = "bessemer.pb.MemifPortArg";
const DEFAULT_RING_SIZE: u32 = 1024;
const DEFAULT_BUFFER_SIZE: u32 = 2048;
/// How often a client tries to reach an absent server.
const RECONNECT: Duration = Duration::from_secs(1);

macro_rules! counters {
    ($($(#[doc = $d:literal])+ $f:ident,)*) => {
        /// Per-port counters, kept across connections.
        #[derive(Default)]
        struct Counters { $($(#[doc = $d])+ $f: AtomicU64,)* }
        impl Counters {
            /// (name, value) pairs in declaration order.
            fn named(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Connections established.
    connects,
    /// Connections ended (by either side).
    disconnects,
    /// Handshakes refused or failed (wrong id, secret or version, bad region or ring, timeout).
    handshake_errors,
    /// Packets received (copied in).
    rx_packets,
    /// Packets sent (copied out).
    tx_packets,
    /// Received descriptors naming memory outside the peer's regions, or a zero length.
    rx_bad_desc,
    /// Received packets longer than the largest pipeline buffer.
    rx_too_long,
    /// Received packets dropped because the daemon's pool was empty.
    rx_no_buffer,
    /// Ring indices the peer moved beyond what the ring holds (nothing consumed then).
    bad_ring_index,
    /// Packets PortOut could not send: the peer's ring had no free slot.
    tx_ring_full,
    /// Packets PortOut could not send: no peer connected.
    tx_no_peer,
    /// Packets PortOut could not send: the peer's buffer descriptor was bad.
    tx_bad_desc,
    /// Packets for an outgoing queue the peer has no ring for.
    tx_no_ring,
    /// Eventfd writes to a peer that asked to be interrupted.
    interrupts_sent,
}

/// State the port, its queues and the control thread share.
struct Shared {
    generation: AtomicU64,
    session: Mutex<Option<Arc<Session>>>,
    up: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn set(&self, s: Option<Arc<Session>>) {
        self.up.store(s.is_some(), Ordering::Release);
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = s;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn current(&self) -> (u64, Option<Arc<Session>>) {
        let s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        (self.generation.load(Ordering::Acquire), s.clone())
    }
}

struct MemifPort {
    shared: Arc<Shared>,
    cfg: Config,
    socket: String,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// A filesystem socket we bound (server), removed on drop.
    bound_file: bool,
    mac: [u8; 6],
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "MemifPortArg")?;
    let socket = a.str("socket")?.unwrap_or("").to_string();
    let role = a.str("role")?.unwrap_or("").to_string();
    let id = a.uint("id", u32::MAX as u64)?.unwrap_or(0) as u32;
    let ring_size = a
        .uint("ring_size", 1 << memif::MAX_LOG2_RING_SIZE)?
        .unwrap_or(0) as u32;
    let buffer_size = a.uint("buffer_size", 65_535)?.unwrap_or(0) as u32;
    let secret = a.str("secret")?.unwrap_or("").to_string();
    let interrupt = a.bool("interrupt")?.unwrap_or(false);
    a.finish()?;
    let role = match role.as_str() {
        "" | "server" | "master" => Role::Server,
        "client" | "slave" => Role::Client,
        r => {
            return Err(Error::invalid(format!(
                "MemifPortArg.role '{r}': 'server' or 'client'"
            )))
        }
    };
    let ring_size = if ring_size == 0 {
        DEFAULT_RING_SIZE
    } else {
        ring_size
    };
    if !ring_size.is_power_of_two() || ring_size < 2 {
        return Err(Error::invalid(format!(
            "MemifPortArg.ring_size {ring_size}: a power of two, 2..{}",
            1 << memif::MAX_LOG2_RING_SIZE
        )));
    }
    let buffer_size = if buffer_size == 0 {
        DEFAULT_BUFFER_SIZE
    } else {
        buffer_size
    };
    if buffer_size < 128 || buffer_size % 64 != 0 {
        return Err(Error::invalid(format!(
            "MemifPortArg.buffer_size {buffer_size}: a multiple of 64, at least 128"
        )));
    }
    if secret.len() > 23 {
        return Err(Error::invalid(
            "MemifPortArg.secret: at most 23 bytes (memif's field is 24 with its NUL)",
        ));
    }
    for (what, n) in [
        ("num_inc_q", params.num_inc_q),
        ("num_out_q", params.num_out_q),
    ] {
        if n > memif::MAX_QUEUES {
            return Err(Error::invalid(format!(
                "{what} {n}: a memif interface has at most {} queues each way",
                memif::MAX_QUEUES
            )));
        }
    }
    let socket = if socket.is_empty() {
        format!("/tmp/bessemer_memif_{}.sock", params.name)
    } else {
        socket
    };
    // A client retries its connection in the background: a path no socket can have is
    // refused here rather than retried for ever.
    bessemer_slice::daemon::check_socket_path(&socket)
        .map_err(|e| crate::socket_path_error("MemifPortArg.socket", e))?;
    let cfg = Config {
        role,
        id,
        app_name: format!("bessemer {}", env!("CARGO_PKG_VERSION")),
        if_name: params.name.clone(),
        secret,
        rx_queues: params.num_inc_q.max(1),
        tx_queues: params.num_out_q.max(1),
        log2_ring_size: ring_size.trailing_zeros() as u8,
        buffer_size,
        rx_interrupt: interrupt,
    };
    let listen = match role {
        Role::Server => Some(
            bessemer_slice::daemon::listen(&socket)
                .map_err(|e| crate::socket_path_error("MemifPortArg.socket", e))?,
        ),
        Role::Client => None,
    };
    let shared = Arc::new(Shared {
        generation: AtomicU64::new(0),
        session: Mutex::new(None),
        up: AtomicBool::new(false),
        counters: Counters::default(),
    });
    let stop = sys::eventfd().map_err(|e| Error::new(libc::EMFILE, e.to_string()))?;
    let ctl = Control {
        shared: shared.clone(),
        cfg: cfg.clone(),
        socket: socket.clone(),
        stop: stop.as_raw_fd(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("memif:{}", params.name))
        .spawn(move || match listen {
            Some(l) => ctl.serve(l),
            None => ctl.connect(),
        })
        .map_err(|e| Error::new(libc::EAGAIN, format!("memif control thread: {e}")))?;
    let mac = crate::name_mac(0xfe, &params.name);
    Ok(NewPort {
        port: Box::new(MemifPort {
            shared,
            bound_file: role == Role::Server && !socket.starts_with('@'),
            socket,
            cfg: cfg.clone(),
            stop,
            thread: Some(thread),
            mac,
        }),
        num_inc_q: cfg.rx_queues,
        num_out_q: cfg.tx_queues,
    })
}

impl Drop for MemifPort {
    fn drop(&mut self) {
        sys::kick(self.stop.as_raw_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.bound_file {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// The control thread: handshakes and disconnects.
struct Control {
    shared: Arc<Shared>,
    cfg: Config,
    socket: String,
    stop: RawFd,
}

impl Control {
    /// Waits until one of `fds` is readable, the stop eventfd fires (None) or `timeout` ends
    /// (Some(usize::MAX)); returns the index of a readable one.
    fn wait(&self, fds: &[RawFd], timeout: Option<Duration>) -> Option<usize> {
        let mut p: Vec<libc::pollfd> = std::iter::once(self.stop)
            .chain(fds.iter().copied())
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.map_or(-1, |t| t.as_millis() as i32);
        loop {
            // SAFETY: valid pollfds.
            let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if r <= 0 {
                return Some(usize::MAX);
            }
            if p[0].revents != 0 {
                return None;
            }
            return p[1..].iter().position(|x| x.revents != 0);
        }
    }

    fn established(&self, s: Session) {
        tracing::info!(
            port = %self.cfg.if_name,
            role = self.cfg.role.name(),
            peer = %s.peer_name,
            peer_if = %s.peer_if,
            rx_rings = s.rx.len(),
            tx_rings = s.tx.len(),
            "memif connected"
        );
        self.shared
            .counters
            .connects
            .fetch_add(1, Ordering::Relaxed);
        self.shared.set(Some(Arc::new(s)));
    }

    fn ended(&self, why: &str) {
        tracing::info!(port = %self.cfg.if_name, "memif disconnected: {why}");
        // Counted before the link goes down (as `connects` before it comes up): whoever sees
        // the link down also sees the disconnect counted (a test read 0 in between).
        self.shared
            .counters
            .disconnects
            .fetch_add(1, Ordering::Relaxed);
        self.shared.set(None);
    }

    fn failed(&self, ch: &Channel, e: &std::io::Error) {
        tracing::warn!(port = %self.cfg.if_name, "memif handshake failed: {e}");
        self.shared
            .counters
            .handshake_errors
            .fetch_add(1, Ordering::Relaxed);
        ch.disconnect(&e.to_string());
    }

    /// Why the peer's control socket became readable: a DISCONNECT, end of file, or junk.
    fn reason(ch: &Channel) -> String {
        match ch.recv(std::time::Instant::now()) {
            Ok((memif::Msg::Disconnect { reason, .. }, _)) => format!("peer: {reason}"),
            Ok((m, _)) => format!("unexpected {m:?} after connecting"),
            Err(e) => e.to_string(),
        }
    }

    fn serve(self, listen: OwnedFd) {
        let mut conn: Option<Channel> = None;
        loop {
            let mut fds = vec![listen.as_raw_fd()];
            if let Some(c) = &conn {
                fds.push(c.raw());
            }
            match self.wait(&fds, None) {
                None => break,
                Some(0) => {
                    let Some(ch) = memif::accept(listen.as_raw_fd()) else {
                        continue;
                    };
                    if conn.is_some() {
                        ch.disconnect("interface already connected");
                        continue;
                    }
                    match memif::serve(&ch, &self.cfg) {
                        Ok(s) => {
                            self.established(s);
                            conn = Some(ch);
                        }
                        Err(e) => self.failed(&ch, &e),
                    }
                }
                Some(1) => {
                    if let Some(ch) = conn.take() {
                        self.ended(&Self::reason(&ch));
                    }
                }
                Some(_) => {}
            }
        }
        if let Some(ch) = conn {
            ch.disconnect("interface deleted");
            self.shared.set(None);
        }
    }

    fn connect(self) {
        loop {
            let ch = match bessemer_slice::daemon::connect(&self.socket) {
                Ok(fd) => Channel::new(fd),
                Err(e) => {
                    tracing::debug!(port = %self.cfg.if_name, "memif server not reachable: {e}");
                    if self.wait(&[], Some(RECONNECT)).is_none() {
                        return;
                    }
                    continue;
                }
            };
            match memif::join(&ch, &self.cfg) {
                Ok(s) => self.established(s),
                Err(e) => {
                    self.failed(&ch, &e);
                    if self.wait(&[], Some(RECONNECT)).is_none() {
                        return;
                    }
                    continue;
                }
            }
            match self.wait(&[ch.raw()], None) {
                None => {
                    ch.disconnect("interface deleted");
                    self.shared.set(None);
                    return;
                }
                Some(_) => self.ended(&Self::reason(&ch)),
            }
            // A server going away and coming back: try again shortly.
            if self.wait(&[], Some(Duration::from_millis(100))).is_none() {
                return;
            }
        }
    }
}

impl Port for MemifPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        Ok(Box::new(MemifRx {
            shared: self.shared.clone(),
            qid,
            generation: u64::MAX,
            session: None,
            last: 0,
            head: 0,
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        Ok(Box::new(MemifTx {
            shared: self.shared.clone(),
            qid,
            generation: u64::MAX,
            session: None,
            slot: 0,
        }))
    }

    fn link_status(&self) -> LinkStatus {
        LinkStatus {
            speed_mbps: 0,
            full_duplex: true,
            autoneg: false,
            link_up: self.shared.up.load(Ordering::Acquire),
        }
    }

    fn conf(&self) -> PortConf {
        PortConf {
            mac_addr: self.mac,
            mtu: 1500,
            admin_up: true,
        }
    }

    fn driver_drops(&self) -> (u64, u64) {
        let c = &self.shared.counters;
        (
            c.rx_bad_desc.load(Ordering::Relaxed)
                + c.rx_too_long.load(Ordering::Relaxed)
                + c.rx_no_buffer.load(Ordering::Relaxed),
            0,
        )
    }

    fn desc(&self) -> String {
        let (_, s) = self.shared.current();
        let state = match &s {
            Some(s) => format!(
                "connected to '{}' ({}), {} rx / {} tx rings of {}",
                s.peer_if,
                s.peer_name,
                s.rx.len(),
                s.tx.len(),
                s.rx.first().map_or(0, |r| r.ring.size())
            ),
            None => "not connected".to_string(),
        };
        let mut d = format!(
            "memif {} {} id {} ({state}) copy ",
            self.cfg.role.name(),
            self.socket,
            self.cfg.id
        );
        d += &self
            .shared
            .counters
            .named()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        d
    }
}

/// Picks up a new connection (or its end) for a queue: one atomic load when nothing changed.
fn refresh(shared: &Shared, generation: &mut u64, session: &mut Option<Arc<Session>>) -> bool {
    if shared.generation.load(Ordering::Acquire) == *generation {
        return false;
    }
    let (g, s) = shared.current();
    *generation = g;
    *session = s;
    true
}

/// An incoming queue: the peer's packets on our receive ring `qid`.
struct MemifRx {
    shared: Arc<Shared>,
    qid: usize,
    generation: u64,
    session: Option<Arc<Session>>,
    /// Next slot to read (server: from the client's head; client: from the server's tail).
    last: u16,
    /// Client: the head we published (empty buffers handed to the server), kept privately.
    head: u16,
}

impl RxQueue for MemifRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        if refresh(&self.shared, &mut self.generation, &mut self.session) {
            // Both indices start at 0 (a DPDK server resets them when it connects); a
            // client hands the server its empty buffers at the end of this first call.
            self.last = 0;
            self.head = 0;
        }
        let Some(s) = &self.session else {
            return 0;
        };
        let Some(q) = s.rx.get(self.qid) else {
            return 0;
        };
        let ring = &q.ring;
        let size = ring.size();
        let c = &self.shared.counters;
        if let (Some(kick), false) = (&q.kick, ring.flags() & memif::RING_FLAG_MASK_INT != 0) {
            // Interrupt mode: consume the wake-up the peer wrote.
            sys::drain(kick.as_raw_fd());
        }
        let produced = match s.role {
            Role::Server => ring.head().load(Ordering::Acquire),
            Role::Client => ring.tail().load(Ordering::Acquire),
        };
        let mut avail = produced.wrapping_sub(self.last) as u32;
        if avail > size {
            c.bad_ring_index.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let max = max.min(batch.room());
        let mut got = 0;
        let mut cur = self.last;
        while avail > 0 && got < max {
            let d = ring.desc(cur);
            if d.flags & DESC_FLAG_NEXT == 0 {
                // The common case, one buffer: its descriptor read once, checked, copied.
                let slot = cur;
                cur = cur.wrapping_add(1);
                avail -= 1;
                let Some(ptr) = src(s, q, slot, d) else {
                    c.rx_bad_desc.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if d.length as usize > LARGE_DATA_CAPACITY {
                    c.rx_too_long.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Some(mut p) = cache.alloc_any(d.length as usize) else {
                    c.rx_no_buffer.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                // SAFETY: `ptr` has d.length bytes inside a mapping the session keeps; the
                // packet was allocated with exactly that length.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, p.data_mut().as_mut_ptr(), d.length as usize)
                };
                if let Err(p) = batch.push(p) {
                    cache.free(p);
                    break;
                }
                got += 1;
                continue;
            }
            // A chained packet: its descriptors up to one without NEXT.
            let mut total = 0usize;
            let mut bad = false;
            let mut n = 0u16;
            let mut partial = false;
            loop {
                let d = ring.desc(cur.wrapping_add(n));
                n += 1;
                match src(s, q, cur.wrapping_add(n - 1), d) {
                    Some(_) => total += d.length as usize,
                    None => bad = true,
                }
                if d.flags & DESC_FLAG_NEXT == 0 {
                    break;
                }
                if n as u32 == avail {
                    // The chain goes on past what the peer published: wait for the rest,
                    // unless it fills the whole ring (it can never end then).
                    partial = avail < size;
                    bad = true;
                    break;
                }
            }
            if partial {
                break;
            }
            let first = cur;
            cur = cur.wrapping_add(n);
            avail -= n as u32;
            if bad {
                c.rx_bad_desc.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if total > LARGE_DATA_CAPACITY {
                c.rx_too_long.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Some(mut p) = cache.alloc_any(total) else {
                c.rx_no_buffer.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let out = p.data_mut();
            let mut at = 0;
            for k in 0..n {
                let slot = first.wrapping_add(k);
                let d = ring.desc(slot);
                // Checked above; read again, so checked again (the peer may have changed it).
                let (Some(ptr), true) = (src(s, q, slot, d), at + d.length as usize <= total)
                else {
                    bad = true;
                    break;
                };
                // SAFETY: `ptr` has d.length bytes inside a mapping the session keeps;
                // `out[at..]` has room for them (checked just above).
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, out.as_mut_ptr().add(at), d.length as usize)
                };
                at += d.length as usize;
            }
            if bad || at != total {
                c.rx_bad_desc.fetch_add(1, Ordering::Relaxed);
                cache.free(p);
                continue;
            }
            if let Err(p) = batch.push(p) {
                cache.free(p);
                break;
            }
            got += 1;
        }
        self.last = cur;
        match s.role {
            // Consumed: the client may reuse those slots.
            Role::Server => ring.tail().store(cur, Ordering::Release),
            Role::Client => {
                // Every consumed buffer goes back to the server, with its length reset.
                let buffers = q.buffers.unwrap_or(0);
                let mut head = self.head;
                while head != cur.wrapping_add(size as u16) {
                    let i = head as u32 & (size - 1);
                    ring.set_desc(
                        head,
                        Desc {
                            flags: 0,
                            region: 0,
                            length: s.buffer_size,
                            offset: buffers + i * s.buffer_size,
                        },
                    );
                    head = head.wrapping_add(1);
                }
                if head != self.head {
                    self.head = head;
                    ring.head().store(head, Ordering::Release);
                }
            }
        }
        if got > 0 {
            c.rx_packets.fetch_add(got as u64, Ordering::Relaxed);
        }
        got
    }
}

/// Where descriptor `d` at `slot` points, if it is sane: a server takes the client's
/// region and offset (checked against the region); a client reads only the length and
/// uses its own private offset for the slot.
fn src(s: &Session, q: &memif::QueueRing, slot: u16, d: Desc) -> Option<*mut u8> {
    if d.length == 0 {
        return None;
    }
    match q.buffers {
        None => s.region_slice(d.region, d.offset, d.length),
        Some(b) => {
            if d.length > s.buffer_size {
                return None;
            }
            let i = slot as u32 & (q.ring.size() - 1);
            s.region_slice(0, b + i * s.buffer_size, d.length)
        }
    }
}

/// An outgoing queue: packets to the peer on our send ring `qid`.
struct MemifTx {
    shared: Arc<Shared>,
    qid: usize,
    generation: u64,
    session: Option<Arc<Session>>,
    /// Next slot to fill (server: our tail; client: our head), kept privately.
    slot: u16,
}

impl TxQueue for MemifTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        if refresh(&self.shared, &mut self.generation, &mut self.session) {
            self.slot = 0;
        }
        let n = batch.len();
        let c = &self.shared.counters;
        let Some(s) = &self.session else {
            c.tx_no_peer.fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        };
        let Some(q) = s.tx.get(self.qid) else {
            c.tx_no_ring.fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        };
        if n == 0 {
            return 0;
        }
        let ring = &q.ring;
        let size = ring.size();
        // Slots we may fill: server, up to the client's head; client, up to the server's
        // tail plus the ring's size.
        let free = match s.role {
            Role::Server => ring.head().load(Ordering::Acquire).wrapping_sub(self.slot) as u32,
            Role::Client => {
                let used = self.slot.wrapping_sub(ring.tail().load(Ordering::Acquire)) as u32;
                if used > size {
                    u32::MAX
                } else {
                    size - used
                }
            }
        };
        if free > size {
            c.bad_ring_index.fetch_add(1, Ordering::Relaxed);
            c.tx_ring_full.fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        }
        let mut free = free;
        let mut slot = self.slot;
        let mut sent = 0;
        let mut failed = None;
        for p in batch.pkts() {
            let data = p.data();
            // The packet's descriptors: as many buffers as it needs.
            let start = slot;
            let mut used = 0u32;
            let mut at = 0usize;
            let ok = loop {
                if used == free {
                    break Err(&c.tx_ring_full);
                }
                let here = slot.wrapping_add(used as u16);
                let (ptr, cap) = match q.buffers {
                    // Client: our own buffer for this slot.
                    Some(b) => {
                        let i = here as u32 & (size - 1);
                        let off = b + i * s.buffer_size;
                        (s.region_slice(0, off, s.buffer_size), s.buffer_size)
                    }
                    // Server: the buffer the client put in this slot, checked.
                    None => {
                        let d = ring.desc(here);
                        (s.region_slice(d.region, d.offset, d.length), d.length)
                    }
                };
                let Some(ptr) = ptr.filter(|_| cap > 0) else {
                    break Err(&c.tx_bad_desc);
                };
                let k = (data.len() - at).min(cap as usize);
                // SAFETY: `ptr` has `cap` >= k bytes inside the session's mapping.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(at), ptr, k) };
                at += k;
                used += 1;
                let more = at < data.len();
                ring.set_len_flags(here, k as u32, if more { DESC_FLAG_NEXT } else { 0 });
                if !more {
                    break Ok(());
                }
            };
            match ok {
                Ok(()) => {
                    slot = slot.wrapping_add(used as u16);
                    free -= used;
                    sent += 1;
                }
                Err(reason) => {
                    slot = start;
                    failed = Some(reason);
                    break;
                }
            }
        }
        self.slot = slot;
        match s.role {
            Role::Server => ring.tail().store(slot, Ordering::Release),
            Role::Client => ring.head().store(slot, Ordering::Release),
        }
        if sent > 0 && ring.flags() & memif::RING_FLAG_MASK_INT == 0 {
            if let Some(k) = &q.kick {
                sys::kick(k.as_raw_fd());
                c.interrupts_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(reason) = failed {
            // The caller drops what was not sent (PortOut's tx_failed); say why here too.
            reason.fetch_add((n - sent) as u64, Ordering::Relaxed);
        }
        c.tx_packets.fetch_add(sent as u64, Ordering::Relaxed);
        // Sent packets were copied: free them; the rest stay in the batch for the caller.
        let mut done = PacketBatch::new();
        let mut i = 0;
        batch.split_off_if(&mut done, |_| {
            i += 1;
            i > sent
        });
        cache.free_bulk(&mut done);
        sent
    }
}

/// The MemifPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "MemifPort",
    name_template: "memif_port",
    help: "a memif interface (VPP, DPDK net_memif, libmemif) as server or client over a Unix socket; link up while connected; packets copied once each way",
    arg_type: MSG,
    arg_doc: &[
        "socket: string — the control socket ('@name': abstract; default /tmp/bessemer_memif_<port>.sock)",
        "role: string — 'server' (listens; the default) or 'client' (connects, owns the shared memory)",
        "id: uint32 — interface id; both ends must agree (default 0)",
        "ring_size: uint32 — descriptors per ring (power of two, 2..16384; default 1024); a server accepts up to this",
        "buffer_size: uint32 — bytes per buffer in the regions a client creates (multiple of 64; default 2048); longer packets are chained",
        "secret: string — shared secret the client presents (at most 23 bytes)",
        "interrupt: bool — ask the peer to signal our receive rings (eventfd) instead of leaving them to polling",
    ],
    create,
};

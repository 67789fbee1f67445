//! memif, the shared memory packet interface of VPP, DPDK (`net_memif`) and libmemif: its
//! control messages, its rings and descriptors, and the two handshakes (server and client)
//! that set up one connection. The port ([`crate::memif_port`]) drives the rings.
//!
//! Protocol version 2.0. A connection joins one *server* (listens on a Unix socket) and one
//! *client* (connects to it). The client owns the memory: it creates the regions (memfds,
//! its first holding the rings and, in copy mode, the packet buffers), passes them with
//! `ADD_REGION`, and describes each ring with `ADD_RING` (with the ring's interrupt
//! eventfd). Rings are named by direction: C2S (client to server) and S2C (server to
//! client). On a C2S ring the client produces (`head`) and the server consumes (`tail`); on
//! an S2C ring the client hands the server empty buffers (`head`) and the server fills them
//! (`tail`). Each side writes only its own index; each ring's receiver sets
//! `MASK_INT` in the ring's flags when it polls, and a sender writes the eventfd after a
//! burst only when that flag is clear.
//!
//! Everything the peer can write is checked before use: message fields, region sizes and
//! seals (a region must be sealed against shrinking, else touching it could raise SIGBUS),
//! ring placement, ring indices and every descriptor's region, offset and length.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use bessemer_slice::sys::{self, Mapping};

/// Written into every ring header by the client.
pub const COOKIE: u32 = 0x03E3_1F20;
/// Protocol version 2.0 (major << 8 | minor).
pub const VERSION: u16 = 0x0200;
/// Every control message is exactly this long.
pub const MSG_SIZE: usize = 128;
/// Names in messages (NUL padded).
pub const NAME_SIZE: usize = 32;
/// Ring header: cookie, flags and head in the first cache line, tail in the second.
pub const RING_HEADER: usize = 128;
/// One descriptor: flags u16, region u16, length u32, offset u32, metadata u32.
pub const DESC_SIZE: usize = 16;
/// Ring flag: the receiver polls; senders need not write the eventfd.
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor flag: the packet continues in the next descriptor.
pub const DESC_FLAG_NEXT: u16 = 1;
/// ADD_RING flag: the ring carries packets from client to server.
pub const ADD_RING_FLAG_C2S: u16 = 1;
/// Largest ring we offer or accept (2^14 descriptors).
pub const MAX_LOG2_RING_SIZE: u8 = 14;
/// Regions a client may add.
pub const MAX_REGIONS: usize = 16;
/// Largest region accepted from a client.
pub const MAX_REGION_SIZE: u64 = 16 << 30;
/// Queue pairs either side may ask for.
pub const MAX_QUEUES: usize = 16;
/// Interface mode: Ethernet frames (the only one a port carries).
pub const MODE_ETHERNET: u8 = 0;

const T_ACK: u16 = 1;
const T_HELLO: u16 = 2;
const T_INIT: u16 = 3;
const T_ADD_REGION: u16 = 4;
const T_ADD_RING: u16 = 5;
const T_CONNECT: u16 = 6;
const T_CONNECTED: u16 = 7;
const T_DISCONNECT: u16 = 8;

/// The server's greeting: what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub name: String,
    pub min_version: u16,
    pub max_version: u16,
    /// Highest region index (regions - 1).
    pub max_region: u16,
    /// Highest S2C ring index.
    pub max_s2c_ring: u16,
    /// Highest C2S ring index.
    pub max_c2s_ring: u16,
    pub max_log2_ring_size: u8,
}

/// The client's request for one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Init {
    pub version: u16,
    pub id: u32,
    pub mode: u8,
    pub secret: String,
    pub name: String,
}

/// A ring the client set up in one of its regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddRing {
    pub c2s: bool,
    pub index: u16,
    pub region: u16,
    pub offset: u32,
    pub log2_ring_size: u8,
    pub private_hdr_size: u16,
}

/// A control message (128 bytes on the wire: type u16, then the packed body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Ack,
    Hello(Hello),
    Init(Init),
    AddRegion { index: u16, size: u64 },
    AddRing(AddRing),
    Connect { if_name: String },
    Connected { if_name: String },
    Disconnect { code: u32, reason: String },
}

fn put_str(b: &mut [u8], s: &str) {
    let n = s.len().min(b.len().saturating_sub(1));
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn get_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Msg {
    /// The 128 bytes on the wire.
    pub fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        let t = match self {
            Msg::Ack => T_ACK,
            Msg::Hello(h) => {
                put_str(&mut b[2..34], &h.name);
                b[34..36].copy_from_slice(&h.min_version.to_le_bytes());
                b[36..38].copy_from_slice(&h.max_version.to_le_bytes());
                b[38..40].copy_from_slice(&h.max_region.to_le_bytes());
                b[40..42].copy_from_slice(&h.max_s2c_ring.to_le_bytes());
                b[42..44].copy_from_slice(&h.max_c2s_ring.to_le_bytes());
                b[44] = h.max_log2_ring_size;
                T_HELLO
            }
            Msg::Init(i) => {
                b[2..4].copy_from_slice(&i.version.to_le_bytes());
                b[4..8].copy_from_slice(&i.id.to_le_bytes());
                b[8] = i.mode;
                put_str(&mut b[9..33], &i.secret);
                put_str(&mut b[33..65], &i.name);
                T_INIT
            }
            Msg::AddRegion { index, size } => {
                b[2..4].copy_from_slice(&index.to_le_bytes());
                b[4..12].copy_from_slice(&size.to_le_bytes());
                T_ADD_REGION
            }
            Msg::AddRing(r) => {
                let flags = if r.c2s { ADD_RING_FLAG_C2S } else { 0 };
                b[2..4].copy_from_slice(&flags.to_le_bytes());
                b[4..6].copy_from_slice(&r.index.to_le_bytes());
                b[6..8].copy_from_slice(&r.region.to_le_bytes());
                b[8..12].copy_from_slice(&r.offset.to_le_bytes());
                b[12] = r.log2_ring_size;
                b[13..15].copy_from_slice(&r.private_hdr_size.to_le_bytes());
                T_ADD_RING
            }
            Msg::Connect { if_name } => {
                put_str(&mut b[2..34], if_name);
                T_CONNECT
            }
            Msg::Connected { if_name } => {
                put_str(&mut b[2..34], if_name);
                T_CONNECTED
            }
            Msg::Disconnect { code, reason } => {
                b[2..6].copy_from_slice(&code.to_le_bytes());
                put_str(&mut b[6..102], reason);
                T_DISCONNECT
            }
        };
        b[..2].copy_from_slice(&t.to_le_bytes());
        b
    }

    /// Parses one message; the error names what was wrong.
    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        if b.len() < MSG_SIZE {
            return Err(format!(
                "control message of {} bytes (memif's are {MSG_SIZE})",
                b.len()
            ));
        }
        Ok(match u16_at(b, 0) {
            T_ACK => Msg::Ack,
            T_HELLO => Msg::Hello(Hello {
                name: get_str(&b[2..34]),
                min_version: u16_at(b, 34),
                max_version: u16_at(b, 36),
                max_region: u16_at(b, 38),
                max_s2c_ring: u16_at(b, 40),
                max_c2s_ring: u16_at(b, 42),
                max_log2_ring_size: b[44],
            }),
            T_INIT => Msg::Init(Init {
                version: u16_at(b, 2),
                id: u32_at(b, 4),
                mode: b[8],
                secret: get_str(&b[9..33]),
                name: get_str(&b[33..65]),
            }),
            T_ADD_REGION => Msg::AddRegion {
                index: u16_at(b, 2),
                size: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
            },
            T_ADD_RING => Msg::AddRing(AddRing {
                c2s: u16_at(b, 2) & ADD_RING_FLAG_C2S != 0,
                index: u16_at(b, 4),
                region: u16_at(b, 6),
                offset: u32_at(b, 8),
                log2_ring_size: b[12],
                private_hdr_size: u16_at(b, 13),
            }),
            T_CONNECT => Msg::Connect {
                if_name: get_str(&b[2..34]),
            },
            T_CONNECTED => Msg::Connected {
                if_name: get_str(&b[2..34]),
            },
            T_DISCONNECT => Msg::Disconnect {
                code: u32_at(b, 2),
                reason: get_str(&b[6..102]),
            },
            t => return Err(format!("unknown control message type {t}")),
        })
    }
}

/// The control socket of one connection.
pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    /// Wraps a connected SOCK_SEQPACKET socket.
    pub fn new(fd: OwnedFd) -> Channel {
        Channel { fd }
    }

    /// The socket (to poll on).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends one message, with one descriptor attached when given.
    pub fn send(&self, m: &Msg, fd: Option<RawFd>) -> io::Result<()> {
        let b = m.encode();
        if let Some(fd) = fd {
            return sys::send_fds(self.raw(), &b, &[fd]);
        }
        // SAFETY: 128 valid bytes; MSG_NOSIGNAL so a gone peer is an error, not a signal.
        let r = unsafe { libc::send(self.raw(), b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one message (and a descriptor if one came with it), waiting until `deadline`.
    pub fn recv(&self, deadline: Instant) -> io::Result<(Msg, Option<OwnedFd>)> {
        let left = deadline.saturating_duration_since(Instant::now());
        if !sys::poll_in(self.raw(), left.as_millis().min(i32::MAX as u128) as i32)? {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not answer in time",
            ));
        }
        let mut b = [0u8; MSG_SIZE];
        let (n, mut fds) = sys::recv_fds(self.raw(), &mut b)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the control socket",
            ));
        }
        let m = Msg::decode(&b[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        // At most one descriptor belongs to a message; extra ones are closed here.
        let fd = if fds.is_empty() {
            None
        } else {
            Some(fds.swap_remove(0))
        };
        Ok((m, fd))
    }

    /// Tells the peer why the connection ends (best effort: it may be gone already).
    pub fn disconnect(&self, reason: &str) {
        let _ = self.send(
            &Msg::Disconnect {
                code: 0,
                reason: reason.to_string(),
            },
            None,
        );
    }
}

/// A buffer descriptor as read from (or written to) a ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Desc {
    pub flags: u16,
    pub region: u16,
    pub length: u32,
    pub offset: u32,
}

/// One ring in shared memory. Only its indices are accessed atomically; the peer may write
/// anything into it at any time, so every value read is checked by the caller.
#[derive(Clone, Copy)]
pub struct Ring {
    base: *mut u8,
    size: u32,
}

// SAFETY: a ring is shared memory by design; the protocol orders access (each index has
// one writer) and every read value is validated.
unsafe impl Send for Ring {}
// SAFETY: as Send.
unsafe impl Sync for Ring {}

impl Ring {
    /// Bytes a ring of `size` descriptors takes.
    pub fn bytes(size: u32) -> usize {
        RING_HEADER + DESC_SIZE * size as usize
    }

    /// # Safety
    /// `base` must be 8-byte aligned and point to [`Ring::bytes`]`(size)` bytes of a mapping
    /// that outlives every use of the ring; `size` a power of two <= 2^15.
    pub unsafe fn new(base: *mut u8, size: u32) -> Ring {
        Ring { base, size }
    }

    /// Descriptors in the ring.
    pub fn size(&self) -> u32 {
        self.size
    }

    fn index(&self, at: usize) -> &AtomicU16 {
        // SAFETY: `at` is 6 or 64, inside the header; 2-byte aligned (base is 8-aligned).
        unsafe { &*self.base.add(at).cast::<AtomicU16>() }
    }

    /// The producer index of the client (C2S: packets; S2C: empty buffers).
    pub fn head(&self) -> &AtomicU16 {
        self.index(6)
    }

    /// The server's index (C2S: consumed; S2C: filled).
    pub fn tail(&self) -> &AtomicU16 {
        self.index(64)
    }

    /// The ring's cookie.
    pub fn cookie(&self) -> u32 {
        // SAFETY: offset 0 of the header, 4-aligned.
        unsafe { std::ptr::read_volatile(self.base.cast::<u32>()) }
    }

    /// The ring's flags.
    pub fn flags(&self) -> u16 {
        // SAFETY: offset 4 of the header, 2-aligned.
        unsafe { std::ptr::read_volatile(self.base.add(4).cast::<u16>()) }
    }

    /// Sets the ring's flags (its receiver does).
    pub fn set_flags(&self, f: u16) {
        // SAFETY: as flags.
        unsafe { std::ptr::write_volatile(self.base.add(4).cast::<u16>(), f) }
    }

    fn desc_ptr(&self, slot: u16) -> *mut u8 {
        let i = slot as usize & (self.size as usize - 1);
        // SAFETY: i < size: inside the ring's descriptors.
        unsafe { self.base.add(RING_HEADER + i * DESC_SIZE) }
    }

    /// Reads descriptor `slot` (modulo the ring size).
    pub fn desc(&self, slot: u16) -> Desc {
        let p = self.desc_ptr(slot);
        // SAFETY: a descriptor inside the ring, its fields naturally aligned.
        unsafe {
            Desc {
                flags: std::ptr::read_volatile(p.cast::<u16>()),
                region: std::ptr::read_volatile(p.add(2).cast::<u16>()),
                length: std::ptr::read_volatile(p.add(4).cast::<u32>()),
                offset: std::ptr::read_volatile(p.add(8).cast::<u32>()),
            }
        }
    }

    /// Writes descriptor `slot` (metadata left as it is).
    pub fn set_desc(&self, slot: u16, d: Desc) {
        let p = self.desc_ptr(slot);
        // SAFETY: as desc.
        unsafe {
            std::ptr::write_volatile(p.cast::<u16>(), d.flags);
            std::ptr::write_volatile(p.add(2).cast::<u16>(), d.region);
            std::ptr::write_volatile(p.add(4).cast::<u32>(), d.length);
            std::ptr::write_volatile(p.add(8).cast::<u32>(), d.offset);
        }
    }

    /// Writes only the length and flags of descriptor `slot`.
    pub fn set_len_flags(&self, slot: u16, length: u32, flags: u16) {
        let p = self.desc_ptr(slot);
        // SAFETY: as desc.
        unsafe {
            std::ptr::write_volatile(p.cast::<u16>(), flags);
            std::ptr::write_volatile(p.add(4).cast::<u32>(), length);
        }
    }

    /// Initialises the header (client side, before the server sees the ring).
    pub fn init(&self, flags: u16) {
        // SAFETY: the header's first 8 bytes, aligned.
        unsafe { std::ptr::write_volatile(self.base.cast::<u32>(), COOKIE) };
        self.set_flags(flags);
        self.head().store(0, Ordering::Relaxed);
        self.tail().store(0, Ordering::Relaxed);
    }
}

/// Which end of the connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// What our end asks for.
#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    /// Interface id (a server serves only this id).
    pub id: u32,
    /// Our application name (in HELLO / INIT) and interface name (CONNECT / CONNECTED).
    pub app_name: String,
    pub if_name: String,
    /// Shared secret; empty: none.
    pub secret: String,
    /// Queues we receive on and send on.
    pub rx_queues: usize,
    pub tx_queues: usize,
    /// Ring size we create (client) or accept at most (server), as log2.
    pub log2_ring_size: u8,
    /// Buffer size of the regions we create (client).
    pub buffer_size: u32,
    /// Ask the peer to signal our receive rings (interrupt mode) instead of polling them.
    pub rx_interrupt: bool,
}

/// One ring of a connection as a queue sees it.
pub struct QueueRing {
    pub ring: Ring,
    /// The ring's eventfd: written to wake its receiver when that one asked for interrupts.
    pub kick: Option<OwnedFd>,
    /// Client role: offset in region 0 of this ring's first buffer (slot i's buffer is at
    /// `buffers + i * buffer_size`), kept privately so a server can never redirect our
    /// writes. None for a server, which takes the client's descriptors (checked).
    pub buffers: Option<u32>,
}

/// An established connection: the mapped regions and the rings of each direction, named
/// from our side (`rx`: we receive on it; `tx`: we send on it).
pub struct Session {
    pub role: Role,
    regions: Vec<Mapping>,
    pub rx: Vec<QueueRing>,
    pub tx: Vec<QueueRing>,
    pub buffer_size: u32,
    pub peer_name: String,
    pub peer_if: String,
    /// The memfd we created (client): kept so the server's mapping has a source.
    _memfd: Option<OwnedFd>,
}

impl Session {
    /// Region `r`'s bytes `[offset, offset + len)`, if they lie inside it.
    pub fn region_slice(&self, r: u16, offset: u32, len: u32) -> Option<*mut u8> {
        let m = self.regions.get(r as usize)?;
        let end = offset as usize + len as usize;
        if end > m.len() {
            return None;
        }
        // SAFETY: offset + len <= the mapping's length.
        Some(unsafe { m.base().add(offset as usize) })
    }

    /// Regions mapped.
    pub fn regions(&self) -> usize {
        self.regions.len()
    }
}

fn protocol(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn expect_ack(ch: &Channel, deadline: Instant) -> io::Result<()> {
    match ch.recv(deadline)? {
        (Msg::Ack, _) => Ok(()),
        (Msg::Disconnect { reason, .. }, _) => Err(protocol(format!("peer refused: {reason}"))),
        (m, _) => Err(protocol(format!("expected ACK, got {m:?}"))),
    }
}

/// How long a handshake may take in all.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

fn check_seals(fd: RawFd, index: u16) -> io::Result<()> {
    // SAFETY: plain fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(protocol(format!(
            "region {index} is not a memfd sealed against shrinking (F_SEAL_SHRINK): \
             mapping it could crash the daemon"
        )));
    }
    Ok(())
}

fn file_size(fd: RawFd) -> io::Result<u64> {
    // SAFETY: zeroed stat is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// The server's side of a handshake on a freshly accepted connection: HELLO, then the
/// client's INIT, regions, rings and CONNECT, each checked; answers CONNECTED.
pub fn serve(ch: &Channel, cfg: &Config) -> io::Result<Session> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    ch.send(
        &Msg::Hello(Hello {
            name: cfg.app_name.clone(),
            min_version: VERSION,
            max_version: VERSION,
            max_region: (MAX_REGIONS - 1) as u16,
            max_s2c_ring: (cfg.tx_queues.max(1) - 1) as u16,
            max_c2s_ring: (cfg.rx_queues.max(1) - 1) as u16,
            max_log2_ring_size: cfg.log2_ring_size,
        }),
        None,
    )?;
    let init = match ch.recv(deadline)? {
        (Msg::Init(i), _) => i,
        (m, _) => return Err(protocol(format!("expected INIT, got {m:?}"))),
    };
    if init.version != VERSION {
        return Err(protocol(format!(
            "memif version {}.{} (this side speaks 2.0)",
            init.version >> 8,
            init.version & 0xff
        )));
    }
    if init.id != cfg.id {
        return Err(protocol(format!(
            "no interface with id {} here (this port is id {})",
            init.id, cfg.id
        )));
    }
    if init.mode != MODE_ETHERNET {
        return Err(protocol(format!(
            "interface mode {} (only ethernet is served)",
            init.mode
        )));
    }
    if init.secret != cfg.secret {
        return Err(protocol("wrong secret"));
    }
    ch.send(&Msg::Ack, None)?;
    let mut regions: Vec<Mapping> = Vec::new();
    let mut rings: Vec<(AddRing, Option<OwnedFd>)> = Vec::new();
    let peer_if = loop {
        match ch.recv(deadline)? {
            (Msg::AddRegion { index, size }, fd) => {
                let fd = fd.ok_or_else(|| protocol("ADD_REGION without a descriptor"))?;
                if index as usize != regions.len() || regions.len() >= MAX_REGIONS {
                    return Err(protocol(format!(
                        "region index {index} (expected {}, at most {MAX_REGIONS} regions)",
                        regions.len()
                    )));
                }
                if size == 0 || size > MAX_REGION_SIZE {
                    return Err(protocol(format!("region {index} of {size} bytes")));
                }
                check_seals(fd.as_raw_fd(), index)?;
                if file_size(fd.as_raw_fd())? < size {
                    return Err(protocol(format!(
                        "region {index}: the file is smaller than the {size} bytes announced"
                    )));
                }
                regions.push(Mapping::new(fd.as_raw_fd(), size as usize)?);
            }
            (Msg::AddRing(r), fd) => {
                if rings.len() >= 2 * MAX_QUEUES {
                    return Err(protocol("too many rings"));
                }
                rings.push((r, fd));
            }
            (Msg::Connect { if_name }, _) => break if_name,
            (Msg::Disconnect { reason, .. }, _) => {
                return Err(protocol(format!("client gave up: {reason}")))
            }
            (m, _) => return Err(protocol(format!("unexpected {m:?} during the handshake"))),
        }
        ch.send(&Msg::Ack, None)?;
    };
    let mut rx: Vec<Option<QueueRing>> = (0..cfg.rx_queues).map(|_| None).collect();
    let mut tx: Vec<Option<QueueRing>> = (0..cfg.tx_queues).map(|_| None).collect();
    let mut size = None;
    for (r, fd) in rings {
        if r.log2_ring_size == 0 || r.log2_ring_size > cfg.log2_ring_size {
            return Err(protocol(format!(
                "ring of 2^{} descriptors (this side accepts 2^1..2^{})",
                r.log2_ring_size, cfg.log2_ring_size
            )));
        }
        let n = 1u32 << r.log2_ring_size;
        if *size.get_or_insert(n) != n {
            return Err(protocol("rings of different sizes"));
        }
        if r.private_hdr_size != 0 {
            return Err(protocol("private headers are not supported"));
        }
        let m = regions
            .get(r.region as usize)
            .ok_or_else(|| protocol(format!("ring in region {} (not added)", r.region)))?;
        let end = r.offset as usize + Ring::bytes(n);
        if r.offset % 8 != 0 || end > m.len() {
            return Err(protocol(format!(
                "ring at offset {} of region {} does not fit it",
                r.offset, r.region
            )));
        }
        // SAFETY: 8-aligned and inside the mapping, which the session keeps.
        let ring = unsafe { Ring::new(m.base().add(r.offset as usize), n) };
        if ring.cookie() != COOKIE {
            return Err(protocol(format!("ring {} has a wrong cookie", r.index)));
        }
        // Our receive rings are the client's C2S ones.
        let list = if r.c2s { &mut rx } else { &mut tx };
        let slot = list.get_mut(r.index as usize).ok_or_else(|| {
            protocol(format!(
                "{} ring index {} (this side offered {})",
                if r.c2s { "C2S" } else { "S2C" },
                r.index,
                if r.c2s { cfg.rx_queues } else { cfg.tx_queues }
            ))
        })?;
        if slot.is_some() {
            return Err(protocol(format!("ring {} added twice", r.index)));
        }
        if r.c2s {
            ring.set_flags(if cfg.rx_interrupt {
                0
            } else {
                RING_FLAG_MASK_INT
            });
        }
        *slot = Some(QueueRing {
            ring,
            kick: fd,
            buffers: None,
        });
    }
    // The client may ask for fewer rings than offered; it must have one each way.
    let rx: Vec<QueueRing> = rx.into_iter().map_while(|r| r).collect();
    let tx: Vec<QueueRing> = tx.into_iter().map_while(|r| r).collect();
    if rx.is_empty() || tx.is_empty() {
        return Err(protocol("a connection needs at least one ring each way"));
    }
    ch.send(
        &Msg::Connected {
            if_name: cfg.if_name.clone(),
        },
        None,
    )?;
    Ok(Session {
        role: Role::Server,
        regions,
        rx,
        tx,
        buffer_size: 0,
        peer_name: init.name,
        peer_if,
        _memfd: None,
    })
}

/// The client's side: reads HELLO, creates one region with every ring and buffer, and
/// sends INIT, ADD_REGION, ADD_RING for each ring, CONNECT; waits for CONNECTED.
pub fn join(ch: &Channel, cfg: &Config) -> io::Result<Session> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let hello = match ch.recv(deadline)? {
        (Msg::Hello(h), _) => h,
        (Msg::Disconnect { reason, .. }, _) => {
            return Err(protocol(format!("server refused: {reason}")))
        }
        (m, _) => return Err(protocol(format!("expected HELLO, got {m:?}"))),
    };
    if !(hello.min_version..=hello.max_version).contains(&VERSION) {
        return Err(protocol(format!(
            "server speaks memif {:#x}..{:#x}, this side 2.0",
            hello.min_version, hello.max_version
        )));
    }
    let n_c2s = cfg.tx_queues.clamp(1, hello.max_c2s_ring as usize + 1);
    let n_s2c = cfg.rx_queues.clamp(1, hello.max_s2c_ring as usize + 1);
    let log2 = cfg.log2_ring_size.min(hello.max_log2_ring_size).max(1);
    let size = 1u32 << log2;
    let ring_bytes = Ring::bytes(size);
    let rings_len = (n_c2s + n_s2c) * ring_bytes;
    let bsize = cfg.buffer_size as usize;
    let region_len = rings_len + (n_c2s + n_s2c) * size as usize * bsize;
    if region_len > u32::MAX as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("rings and buffers need {region_len} bytes, more than memif's 4 GiB offsets"),
        ));
    }
    let memfd = sys::memfd("memif_region_0", region_len)?;
    let map = Mapping::new(memfd.as_raw_fd(), region_len)?;
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    let mut kicks = Vec::new();
    for i in 0..n_c2s + n_s2c {
        let c2s = i < n_c2s;
        // SAFETY: ring i lies at i * ring_bytes (a multiple of 16) inside the new mapping.
        let ring = unsafe { Ring::new(map.base().add(i * ring_bytes), size) };
        let buffers = (rings_len + i * size as usize * bsize) as u32;
        let rx_flags = if cfg.rx_interrupt {
            0
        } else {
            RING_FLAG_MASK_INT
        };
        ring.init(if c2s { 0 } else { rx_flags });
        for s in 0..size {
            ring.set_desc(
                s as u16,
                Desc {
                    flags: 0,
                    region: 0,
                    length: cfg.buffer_size,
                    offset: buffers + s * cfg.buffer_size,
                },
            );
        }
        let kick = sys::eventfd()?;
        kicks.push((
            c2s,
            (if c2s { i } else { i - n_c2s }) as u16,
            kick.as_raw_fd(),
        ));
        let q = QueueRing {
            ring,
            kick: Some(kick),
            buffers: Some(buffers),
        };
        if c2s {
            tx.push(q);
        } else {
            rx.push(q);
        }
    }
    ch.send(
        &Msg::Init(Init {
            version: VERSION,
            id: cfg.id,
            mode: MODE_ETHERNET,
            secret: cfg.secret.clone(),
            name: cfg.app_name.clone(),
        }),
        None,
    )?;
    expect_ack(ch, deadline)?;
    ch.send(
        &Msg::AddRegion {
            index: 0,
            size: region_len as u64,
        },
        Some(memfd.as_raw_fd()),
    )?;
    expect_ack(ch, deadline)?;
    for (k, (c2s, index, fd)) in kicks.into_iter().enumerate() {
        ch.send(
            &Msg::AddRing(AddRing {
                c2s,
                index,
                region: 0,
                offset: (k * ring_bytes) as u32,
                log2_ring_size: log2,
                private_hdr_size: 0,
            }),
            Some(fd),
        )?;
        expect_ack(ch, deadline)?;
    }
    ch.send(
        &Msg::Connect {
            if_name: cfg.if_name.clone(),
        },
        None,
    )?;
    let peer_if = match ch.recv(deadline)? {
        (Msg::Connected { if_name }, _) => if_name,
        (Msg::Disconnect { reason, .. }, _) => {
            return Err(protocol(format!("server refused: {reason}")))
        }
        (m, _) => return Err(protocol(format!("expected CONNECTED, got {m:?}"))),
    };
    Ok(Session {
        role: Role::Client,
        regions: vec![map],
        rx,
        tx,
        buffer_size: cfg.buffer_size,
        peer_name: hello.name,
        peer_if,
        _memfd: Some(memfd),
    })
}

/// Accepts one connection on a listening socket (non-blocking: None if none is pending).
pub fn accept(listen: RawFd) -> Option<Channel> {
    // SAFETY: accept on a listening socket we own.
    let c = unsafe {
        libc::accept4(
            listen,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if c < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(c) };
    // The handshake waits with poll; the socket itself may block again.
    // SAFETY: fcntl on our descriptor.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Some(Channel::new(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_at_memifs_offsets() {
        let h = Msg::Hello(Hello {
            name: "DPDK 22.11".into(),
            min_version: VERSION,
            max_version: VERSION,
            max_region: 255,
            max_s2c_ring: 3,
            max_c2s_ring: 1,
            max_log2_ring_size: 14,
        });
        let b = h.encode();
        assert_eq!(&b[..2], &[2, 0]);
        assert_eq!(&b[2..12], b"DPDK 22.11");
        assert_eq!(u16_at(&b, 40), 3, "max S2C ring index after max_region");
        assert_eq!(b[44], 14);
        assert_eq!(Msg::decode(&b).unwrap(), h);
        let r = Msg::AddRing(AddRing {
            c2s: true,
            index: 1,
            region: 0,
            offset: 4224,
            log2_ring_size: 10,
            private_hdr_size: 0,
        });
        let b = r.encode();
        assert_eq!(u16_at(&b, 2), 1);
        assert_eq!(u32_at(&b, 8), 4224);
        assert_eq!(b[12], 10);
        assert_eq!(Msg::decode(&b).unwrap(), r);
        let i = Msg::Init(Init {
            version: VERSION,
            id: 7,
            mode: 0,
            secret: "s3cret".into(),
            name: "app".into(),
        });
        let b = i.encode();
        assert_eq!(u32_at(&b, 4), 7);
        assert_eq!(&b[9..15], b"s3cret");
        assert_eq!(&b[33..36], b"app");
        assert_eq!(Msg::decode(&b).unwrap(), i);
        for m in [
            Msg::Ack,
            Msg::AddRegion {
                index: 2,
                size: 1 << 33,
            },
            Msg::Connect {
                if_name: "memif0".into(),
            },
            Msg::Connected {
                if_name: "x".into(),
            },
            Msg::Disconnect {
                code: 5,
                reason: "bye".into(),
            },
        ] {
            assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
        }
        // Names longer than the field are cut, never overflow.
        let long = Msg::Connect {
            if_name: "n".repeat(100),
        };
        assert_eq!(
            Msg::decode(&long.encode()).unwrap(),
            Msg::Connect {
                if_name: "n".repeat(NAME_SIZE - 1)
            }
        );
    }

    #[test]
    fn bad_messages_are_named() {
        assert!(Msg::decode(&[0u8; 10]).unwrap_err().contains("10 bytes"));
        let mut b = [0u8; MSG_SIZE];
        b[0] = 99;
        assert!(Msg::decode(&b).unwrap_err().contains("type 99"));
    }
}

//! Ports: BESS's port model. A port has numbered incoming (RX) and outgoing (TX) queues; a
//! driver (AF_XDP, AF_PACKET, TAP, pcap file, Unix socket) creates it from its argument
//! message. The I/O modules (`PortInc`, `PortOut`, `QueueInc`, `QueueOut`) each claim the
//! queues they use and own them, so a queue is only ever touched by one module on one
//! worker: drivers need no locks on the data path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::batch::PacketBatch;
use crate::counter::Counter;
use crate::error::{Error, Result};
use crate::pool::{PacketPool, PoolCache};
use crate::value::Value;

/// Most queues a port may have in each direction (BESS's MAX_QUEUES_PER_DIR).
pub const MAX_QUEUES: usize = 128;
/// Largest ring size a port may be asked for.
pub const MAX_RING_SIZE: usize = 1 << 20;

/// Counters of one queue; only the queue's owner writes them.
#[derive(Default)]
pub struct QueueStats {
    /// Packets received or sent.
    pub packets: Counter,
    /// Bytes received or sent.
    pub bytes: Counter,
    /// Packets dropped (a full TX ring, a link that is down, ...).
    pub dropped: Counter,
}

/// A snapshot of one direction's counters summed over its queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCounts {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Dropped packets.
    pub dropped: u64,
}

/// Link state as `GetLinkStatus` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStatus {
    /// Speed in Mbit/s (0 if unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
    /// Autonegotiated.
    pub autoneg: bool,
    /// Carrier present and interface up.
    pub link_up: bool,
}

/// Settable port configuration (`SetPortConf` / `GetPortConf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortConf {
    /// MAC address.
    pub mac_addr: [u8; 6],
    /// MTU in bytes.
    pub mtu: u32,
    /// Administratively up.
    pub admin_up: bool,
}

/// One receive queue, owned by one module.
pub trait RxQueue: Send {
    /// Receives up to `max` packets (at most `batch.room()`), allocating buffers from
    /// `cache` (or, zero-copy, handing over frames the kernel filled), and appends them to
    /// `batch`. Returns how many it appended. Never blocks.
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize;
}

/// One transmit queue, owned by one module.
pub trait TxQueue: Send {
    /// Sends packets from the front of `batch`, removing those it sent (it frees them, or
    /// keeps them until the hardware/kernel is done). Packets it could not send stay in
    /// `batch`, in order; the caller drops and counts them. Returns how many were sent.
    /// Never blocks.
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize;
}

/// A port instance made by a driver.
pub trait Port: Send + Sync {
    /// Opens receive queue `qid` (the caller, [`PortHandle::claim_rx`], guarantees that
    /// nobody else holds it).
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>>;
    /// Opens transmit queue `qid` (exclusively, as `rx_queue`).
    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>>;
    /// Current link state.
    fn link_status(&self) -> LinkStatus;
    /// Current configuration.
    fn conf(&self) -> PortConf;
    /// Changes the configuration; drivers that cannot answer ENOTSUP naming the field.
    fn set_conf(&self, conf: &PortConf) -> Result<()> {
        let _ = conf;
        Err(Error::unsupported(
            "this driver's configuration cannot be changed",
        ))
    }
    /// Drops the driver saw itself (e.g. the kernel's ring overflows): (incoming, outgoing).
    fn driver_drops(&self) -> (u64, u64) {
        (0, 0)
    }
    /// One line for `show port` (interface, mode: "zero-copy", "copy", offloads set, ...).
    fn desc(&self) -> String {
        String::new()
    }
}

/// What a driver's constructor gets besides its argument message.
pub struct PortParams {
    /// The port's name.
    pub name: String,
    /// Incoming queues requested (0 = the driver's default).
    pub num_inc_q: usize,
    /// Outgoing queues requested (0 = the driver's default).
    pub num_out_q: usize,
    /// Incoming ring size requested (0 = the driver's default).
    pub size_inc_q: usize,
    /// Outgoing ring size requested (0 = the driver's default).
    pub size_out_q: usize,
    /// The packet pool: buffers come from here (for AF_XDP, the pool's frame region is the
    /// UMEM).
    pub pool: PacketPool,
}

/// What a driver's constructor returns.
pub struct NewPort {
    /// The port.
    pub port: Box<dyn Port>,
    /// Incoming queues it has.
    pub num_inc_q: usize,
    /// Outgoing queues it has.
    pub num_out_q: usize,
}

/// A port driver (BESS's `ADD_DRIVER`): a name, help, argument message and constructor.
pub struct PortDriver {
    /// Driver name, e.g. "UnixSocketPort".
    pub name: &'static str,
    /// Template for automatic port names (e.g. "unix_port" -> unix_port0).
    pub name_template: &'static str,
    /// Help text (`show driver`).
    pub help: &'static str,
    /// Argument message type, e.g. "UnixSocketPortArg" or "bessemer.pb.AFXDPPortArg".
    pub arg_type: &'static str,
    /// Documentation of the argument fields, one line each.
    pub arg_doc: &'static [&'static str],
    /// Creates a port.
    pub create: fn(&PortParams, &Value) -> Result<NewPort>,
}

impl std::fmt::Debug for PortDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortDriver")
            .field("name", &self.name)
            .finish()
    }
}

impl PortDriver {
    /// Help text in the format `show driver` prints.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} — {}\n  argument: {}\n",
            self.name, self.help, self.arg_type
        );
        for line in self.arg_doc {
            s += &format!("    {line}\n");
        }
        s
    }
}

/// A created port with its counters and queue claims; shared by the port table and the
/// modules that use it.
pub struct PortHandle {
    name: String,
    driver: &'static PortDriver,
    port: Box<dyn Port>,
    inc: Box<[QueueStats]>,
    out: Box<[QueueStats]>,
    rx_claimed: Box<[AtomicBool]>,
    tx_claimed: Box<[AtomicBool]>,
    users: AtomicUsize,
}

/// An exclusive claim on one queue; released when dropped (with the module that holds it).
pub struct QueueClaim {
    handle: Arc<PortHandle>,
    rx: bool,
    qid: usize,
}

impl QueueClaim {
    /// The port.
    pub fn port(&self) -> &Arc<PortHandle> {
        &self.handle
    }

    /// The queue number.
    pub fn qid(&self) -> usize {
        self.qid
    }

    /// This queue's counters.
    pub fn stats(&self) -> &QueueStats {
        if self.rx {
            &self.handle.inc[self.qid]
        } else {
            &self.handle.out[self.qid]
        }
    }
}

impl Drop for QueueClaim {
    fn drop(&mut self) {
        let flags = if self.rx {
            &self.handle.rx_claimed
        } else {
            &self.handle.tx_claimed
        };
        flags[self.qid].store(false, Ordering::Release);
        self.handle.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PortHandle {
    /// The port's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its driver.
    pub fn driver(&self) -> &'static PortDriver {
        self.driver
    }

    /// The driver's port object.
    pub fn port(&self) -> &dyn Port {
        &*self.port
    }

    /// Number of incoming queues.
    pub fn num_inc_q(&self) -> usize {
        self.inc.len()
    }

    /// Number of outgoing queues.
    pub fn num_out_q(&self) -> usize {
        self.out.len()
    }

    /// Queue claims held (by modules).
    pub fn users(&self) -> usize {
        self.users.load(Ordering::Acquire)
    }

    fn claim(self: &Arc<Self>, rx: bool, qid: usize) -> Result<QueueClaim> {
        let (flags, dir) = if rx {
            (&self.rx_claimed, "incoming")
        } else {
            (&self.tx_claimed, "outgoing")
        };
        if qid >= flags.len() {
            return Err(Error::invalid(format!(
                "port '{}' has {} {dir} queue(s); there is no queue {qid}",
                self.name,
                flags.len()
            )));
        }
        if flags[qid].swap(true, Ordering::AcqRel) {
            return Err(Error::busy(format!(
                "{dir} queue {qid} of port '{}' is already used by another module",
                self.name
            )));
        }
        self.users.fetch_add(1, Ordering::AcqRel);
        Ok(QueueClaim {
            handle: self.clone(),
            rx,
            qid,
        })
    }

    /// Claims and opens incoming queue `qid`.
    pub fn claim_rx(self: &Arc<Self>, qid: usize) -> Result<(QueueClaim, Box<dyn RxQueue>)> {
        let c = self.claim(true, qid)?;
        let q = self.port.rx_queue(qid)?;
        Ok((c, q))
    }

    /// Claims and opens outgoing queue `qid`.
    pub fn claim_tx(self: &Arc<Self>, qid: usize) -> Result<(QueueClaim, Box<dyn TxQueue>)> {
        let c = self.claim(false, qid)?;
        let q = self.port.tx_queue(qid)?;
        Ok((c, q))
    }

    fn sum(stats: &[QueueStats]) -> DirCounts {
        let mut c = DirCounts::default();
        for q in stats {
            c.packets += q.packets.get();
            c.bytes += q.bytes.get();
            c.dropped += q.dropped.get();
        }
        c
    }

    /// Counters of the incoming and outgoing directions (driver drops included).
    pub fn counts(&self) -> (DirCounts, DirCounts) {
        let (di, dout) = self.port.driver_drops();
        let mut inc = Self::sum(&self.inc);
        let mut out = Self::sum(&self.out);
        inc.dropped += di;
        out.dropped += dout;
        (inc, out)
    }

    /// Per-queue counters: (incoming, outgoing).
    pub fn queue_counts(&self) -> (Vec<DirCounts>, Vec<DirCounts>) {
        let each = |s: &[QueueStats]| {
            s.iter()
                .map(|q| DirCounts {
                    packets: q.packets.get(),
                    bytes: q.bytes.get(),
                    dropped: q.dropped.get(),
                })
                .collect()
        };
        (each(&self.inc), each(&self.out))
    }
}

/// The ports of an engine, by name. Cloning shares the table.
#[derive(Clone, Default)]
pub struct PortTable {
    ports: Arc<RwLock<BTreeMap<String, Arc<PortHandle>>>>,
}

impl PortTable {
    /// An empty table.
    pub fn new() -> PortTable {
        PortTable::default()
    }

    /// Creates a port with `driver` (name: `params.name`, or the driver's template plus the
    /// lowest free number). Fails, changing nothing, if the name is taken or the driver
    /// refuses.
    pub fn create(
        &self,
        driver: &'static PortDriver,
        mut params: PortParams,
        arg: &Value,
    ) -> Result<Arc<PortHandle>> {
        for (what, n, max) in [
            ("num_inc_q", params.num_inc_q, MAX_QUEUES),
            ("num_out_q", params.num_out_q, MAX_QUEUES),
            ("size_inc_q", params.size_inc_q, MAX_RING_SIZE),
            ("size_out_q", params.size_out_q, MAX_RING_SIZE),
        ] {
            if n > max {
                return Err(Error::invalid(format!(
                    "{what} {n} is out of range (at most {max})"
                )));
            }
        }
        let mut ports = self.ports.write().unwrap_or_else(|p| p.into_inner());
        if params.name.is_empty() {
            params.name = (0..)
                .map(|i| format!("{}{i}", driver.name_template))
                .find(|n| !ports.contains_key(n))
                .expect("a free name");
        } else if let Some(why) = crate::names::name_problem(&params.name) {
            return Err(Error::invalid(format!("port name: {why}")));
        } else if ports.contains_key(&params.name) {
            return Err(Error::exists(format!(
                "port '{}' already exists",
                params.name
            )));
        }
        let made = (driver.create)(&params, arg)?;
        let stats = |n: usize| (0..n).map(|_| QueueStats::default()).collect();
        let flags = |n: usize| (0..n).map(|_| AtomicBool::new(false)).collect();
        let h = Arc::new(PortHandle {
            name: params.name.clone(),
            driver,
            port: made.port,
            inc: stats(made.num_inc_q),
            out: stats(made.num_out_q),
            rx_claimed: flags(made.num_inc_q),
            tx_claimed: flags(made.num_out_q),
            users: AtomicUsize::new(0),
        });
        ports.insert(params.name, h.clone());
        Ok(h)
    }

    /// Looks a port up by name.
    pub fn get(&self, name: &str) -> Result<Arc<PortHandle>> {
        self.ports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no port named '{name}'")))
    }

    /// Every port, by name.
    pub fn list(&self) -> Vec<Arc<PortHandle>> {
        self.ports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Destroys a port; refused while a module uses one of its queues.
    pub fn destroy(&self, name: &str) -> Result<()> {
        let mut ports = self.ports.write().unwrap_or_else(|p| p.into_inner());
        let h = ports
            .get(name)
            .ok_or_else(|| Error::not_found(format!("no port named '{name}'")))?;
        if h.users() > 0 {
            return Err(Error::busy(format!(
                "port '{name}' is in use by {} module queue(s); destroy those modules first",
                h.users()
            )));
        }
        ports.remove(name);
        Ok(())
    }

    /// Destroys every port no module uses; returns the names of those still in use.
    pub fn reset(&self) -> Vec<String> {
        let mut ports = self.ports.write().unwrap_or_else(|p| p.into_inner());
        ports.retain(|_, h| h.users() > 0);
        ports.keys().cloned().collect()
    }
}

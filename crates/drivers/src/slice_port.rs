//! SlicePort: a slice (one queue pair) shared with an external application through the
//! bessemer-slice library. The port listens at a Unix socket path; an app that attaches gets
//! a fresh memfd region with descriptor rings and a packet area (docs/slices.md). The link
//! is up while an app is attached. Whatever the app does, the data path never blocks: a full
//! ring or an app that holds every frame makes PortOut drop (counted by reason here and as
//! PortOut's `tx_failed`), garbage in the rings is counted and skipped, and an app that
//! leaves or dies takes its region with it (its frames are reclaimed, the link goes down)
//! and the next app starts afresh.
//!
//! One copy per packet remains, in the daemon: the pipeline's packets live in the daemon's
//! packet pool, whose region also holds the packet descriptors and every other port's
//! packets, so mapping it into an untrusted process would let the process corrupt the
//! daemon. The daemon copies each packet between its pool and the slice's packet area; the
//! app reads and writes the slice's frames in place.

use std::sync::Arc;

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PoolCache, Result, Value};
use bessemer_slice::daemon::{FromApp, Server, ServerShared, ToApp, ToAppError};
use std::sync::atomic::Ordering;

const MSG: &str = "bessemer.pb.SlicePortArg";
/// Default entries per ring (and frames per direction).
const DEFAULT_RING_SIZE: u32 = 1024;

struct SlicePort {
    server: Server,
    ring_size: u32,
    mac: [u8; 6],
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "SlicePortArg")?;
    let path = a.str("path")?.unwrap_or("").to_string();
    let ring_size = a
        .uint("ring_size", bessemer_slice::layout::MAX_RING_SIZE as u64)?
        .unwrap_or(0) as u32;
    a.finish()?;
    for (what, n) in [
        ("num_inc_q", params.num_inc_q),
        ("num_out_q", params.num_out_q),
    ] {
        if n > 1 {
            return Err(Error::invalid(format!(
                "{what} {n}: a SlicePort has one incoming and one outgoing queue (one slice)"
            )));
        }
    }
    let ring_size = if ring_size == 0 {
        DEFAULT_RING_SIZE
    } else {
        ring_size
    };
    let path = if path.is_empty() {
        format!("/tmp/bessemer_slice_{}", params.name)
    } else {
        path
    };
    let server = Server::bind(&params.name, &path, ring_size).map_err(|e| {
        let code = e.raw_os_error().unwrap_or(match e.kind() {
            std::io::ErrorKind::AlreadyExists => libc::EEXIST,
            std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
            _ => libc::EINVAL,
        });
        Error::new(code, format!("SlicePortArg: {e}"))
    })?;
    let mut mac = [0x02, 0x51, 0, 0, 0, 0];
    let h = params.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    mac[2..].copy_from_slice(&h.to_be_bytes()[..4]);
    Ok(NewPort {
        port: Box::new(SlicePort {
            server,
            ring_size,
            mac,
        }),
        num_inc_q: 1,
        num_out_q: 1,
    })
}

impl SlicePort {
    fn shared(&self) -> &Arc<ServerShared> {
        self.server.shared()
    }
}

impl Port for SlicePort {
    fn rx_queue(&self, _qid: usize) -> Result<Box<dyn RxQueue>> {
        Ok(Box::new(SliceRx {
            shared: self.shared().clone(),
            generation: u64::MAX,
            end: None,
        }))
    }

    fn tx_queue(&self, _qid: usize) -> Result<Box<dyn TxQueue>> {
        Ok(Box::new(SliceTx {
            shared: self.shared().clone(),
            generation: u64::MAX,
            end: None,
        }))
    }

    fn link_status(&self) -> LinkStatus {
        LinkStatus {
            speed_mbps: 0,
            full_duplex: true,
            autoneg: false,
            link_up: self.shared().attached(),
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
        let c = self.shared().counters.snapshot();
        (
            c.from_app_no_pool_buffer
                + c.invalid_offset
                + c.invalid_length
                + c.invalid_frame_not_held,
            0,
        )
    }

    fn desc(&self) -> String {
        let c = self.shared().counters.snapshot();
        let mut s = format!(
            "slice {} ring {} ({}) ",
            self.server.path(),
            self.ring_size,
            if self.shared().attached() {
                "app attached"
            } else {
                "no app"
            }
        );
        s += &c
            .named()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        s
    }
}

/// Counters of the slice behind a SlicePort (None if `port` is not a SlicePort).
pub fn slice_counters(port: &dyn Port) -> Option<bessemer_slice::CounterSnapshot> {
    // The counters are printed by `desc`; parse them back so no downcast is needed.
    let d = port.desc();
    if !d.starts_with("slice ") {
        return None;
    }
    let mut c = bessemer_slice::CounterSnapshot::default();
    let kv: std::collections::HashMap<&str, u64> = d
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    macro_rules! take {
        ($($f:ident),*) => { $(c.$f = kv.get(stringify!($f)).copied().unwrap_or(0);)* };
    }
    take!(
        to_app_packets,
        to_app_bytes,
        to_app_ring_full,
        to_app_no_frame,
        to_app_too_long,
        to_app_no_app,
        from_app_packets,
        from_app_bytes,
        from_app_no_pool_buffer,
        invalid_offset,
        invalid_length,
        invalid_frame_not_held,
        invalid_ring_index,
        attaches,
        detaches,
        reclaimed_frames,
        wakeups
    );
    Some(c)
}

/// The incoming queue: packets the app sent.
struct SliceRx {
    shared: Arc<ServerShared>,
    generation: u64,
    end: Option<FromApp>,
}

impl RxQueue for SliceRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        // One atomic load per call; the lock is taken only when an app came or went.
        if self.shared.generation() != self.generation {
            let (g, s) = self.shared.session();
            self.generation = g;
            self.end = s.map(|s| FromApp::new(s, self.shared.counters.clone()));
        }
        let Some(end) = &mut self.end else { return 0 };
        end.recv(max.min(batch.room()), |data| {
            let Some(mut p) = cache.alloc_any(data.len()) else {
                return false;
            };
            p.data_mut().copy_from_slice(data);
            if let Err(p) = batch.push(p) {
                cache.free(p);
                return false;
            }
            true
        })
    }
}

/// The outgoing queue: packets for the app.
struct SliceTx {
    shared: Arc<ServerShared>,
    generation: u64,
    end: Option<ToApp>,
}

impl TxQueue for SliceTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        if self.shared.generation() != self.generation {
            let (g, s) = self.shared.session();
            self.generation = g;
            self.end = s.map(|s| ToApp::new(s, self.shared.counters.clone()));
        }
        let n = batch.len();
        let c = &self.shared.counters;
        let Some(end) = &mut self.end else {
            c.to_app_no_app.fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        };
        if n == 0 {
            return 0;
        }
        end.begin();
        let mut sent = 0;
        let mut bytes = 0u64;
        let mut failed = None;
        for p in batch.pkts() {
            match end.push(p.data()) {
                Ok(()) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        end.finish(sent as u32);
        c.to_app_packets.fetch_add(sent as u64, Ordering::Relaxed);
        c.to_app_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(e) = failed {
            // The caller drops everything from the first packet that did not fit.
            let reason = match e {
                ToAppError::RingFull => &c.to_app_ring_full,
                ToAppError::NoFrame => &c.to_app_no_frame,
                ToAppError::TooLong => &c.to_app_too_long,
            };
            reason.fetch_add((n - sent) as u64, Ordering::Relaxed);
        }
        if sent > 0 {
            let mut done = PacketBatch::new();
            let mut idx = 0;
            batch.split_off_if(&mut done, |_| {
                idx += 1;
                idx > sent
            });
            cache.free_bulk(&mut done);
        }
        sent
    }
}

/// The SlicePort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "SlicePort",
    name_template: "slice_port",
    help: "a slice: shared-memory rings and packet area for one external application (bessemer-slice library; link up while it is attached)",
    arg_type: MSG,
    arg_doc: &[
        "path: string — Unix socket the application attaches to; '@name' is an abstract name (default /tmp/bessemer_slice_<port>)",
        "ring_size: uint32 — descriptors per ring and frames per direction (power of two, 64..32768; default 1024)",
    ],
    create,
};

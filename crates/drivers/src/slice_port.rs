//! SlicePort: a slice (one queue pair) shared with an external application through the
//! bessemer-slice library. The port listens at a Unix socket path; an app that attaches gets
//! a fresh memfd region with descriptor rings and a packet area (docs/slices.md). The link
//! is up while an app is attached. Whatever the app does, the data path never blocks: a full
//! ring or an app that holds every frame makes PortOut drop (counted by reason here and as
//! PortOut's `tx_failed`), garbage in the rings is counted and skipped, and an app that
//! leaves or dies takes its region with it (its frames are reclaimed, the link goes down)
//! and the next app starts afresh.
//!
//! Zero copy both ways. Each session gets a *lent* packet pool (bessemer_core::pool) whose
//! frames are the app's send frames in the shared area and whose descriptors (refcount,
//! pool id, length, metadata) stay in daemon-private memory: a frame the app sends becomes a
//! pipeline packet by filling its private descriptor (after the slice library checked the
//! offset and length against the area), and a packet of that pool that reaches PortOut of
//! the same slice goes back to the app by offset. A freed one waits on the pool until the
//! incoming queue puts it back on the app's free-send ring. Packets of any other pool are
//! copied into a copy frame as before; both cases are counted.
//!
//! Lifetime: the pool holds the mapping. When the app leaves, its pool is retired here and
//! kept until no pipeline packet points into it any more (and no queue still holds it),
//! then dropped, which unmaps the area; the next app gets a new region and a new pool. The
//! app can still write into frames it handed over: that changes those packets' bytes only,
//! as the length, offset and everything else the daemon relies on are private.

use std::sync::{Arc, Mutex, Weak};

use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PacketPool, PoolCache, Result, Value};
use bessemer_slice::daemon::{
    Ext, FromApp, Server, ServerShared, Session, SessionHooks, SliceCounters, Taken, ToApp,
    ToAppError,
};
use std::sync::atomic::Ordering;

const MSG: &str = "bessemer.pb.SlicePortArg";
/// Default entries per ring (and frames per direction).
const DEFAULT_RING_SIZE: u32 = 1024;

struct SlicePort {
    server: Server,
    hooks: Arc<Hooks>,
    ring_size: u32,
    mac: [u8; 6],
}

/// A session's packet pool over the app's send frames (what the session's ends carry).
struct SlicePool {
    pool: PacketPool,
}

/// Pools whose ports are gone while pipeline packets still pointed into them: kept here
/// until those are freed (any port's tick drops them then).
static ORPHANS: Mutex<Vec<Arc<SlicePool>>> = Mutex::new(Vec::new());

/// Drops a retired pool if no packet of it lives (unmapping its frames unless a queue
/// still maps the session); gives it back otherwise.
fn release(p: Arc<SlicePool>) -> Option<Arc<SlicePool>> {
    if p.pool.live() > 0 {
        return Some(p);
    }
    // Queues hold the pool weakly and upgrade it for one call at a time: taking it out of
    // its Arc succeeds only while no call has it, and then none ever will again, so the
    // live count read after that is final.
    match Arc::try_unwrap(p) {
        Ok(inner) if inner.pool.live() == 0 => None,
        Ok(inner) => Some(Arc::new(inner)),
        Err(p) => Some(p),
    }
}

/// Drops the idle pools of `list`; returns how many.
fn release_idle(list: &mut Vec<Arc<SlicePool>>) -> usize {
    let before = list.len();
    *list = std::mem::take(list)
        .into_iter()
        .filter_map(release)
        .collect();
    before - list.len()
}

/// The driver's part in the port's sessions: makes each one's pool, retires it when the
/// app leaves and drops it once idle.
struct Hooks {
    name: String,
    counters: Arc<SliceCounters>,
    retired: Mutex<Vec<Arc<SlicePool>>>,
}

impl Hooks {
    /// Drops every retired pool that is idle, unmapping its area.
    fn reap(&self) {
        let released = release_idle(&mut self.retired.lock().unwrap_or_else(|p| p.into_inner()));
        if released > 0 {
            self.counters
                .regions_released
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        if let Ok(mut o) = ORPHANS.try_lock() {
            release_idle(&mut o);
        }
    }

    /// Retired regions still mapped, and the pipeline packets that point into them.
    fn retired_state(&self) -> (usize, usize) {
        let r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        (r.len(), r.iter().map(|p| p.pool.live()).sum())
    }
}

impl SessionHooks for Hooks {
    fn attach(&self, s: &Session) -> Option<Ext> {
        let l = s.layout();
        let n = l.frames_per_dir as usize;
        let fs = l.frame_size as usize;
        // SAFETY: the send frames are n frames of fs bytes (page aligned: the area and the
        // frame size are) inside the mapping the pool keeps as its owner.
        let pool = unsafe {
            PacketPool::lent(
                &format!("slice_{}", self.name),
                n,
                fs,
                s.send_frames(),
                n * fs,
                s.mapping(),
            )
        };
        match pool {
            Ok(pool) => Some(Arc::new(SlicePool { pool }) as Ext),
            Err(e) => {
                // The session still works, copying both ways.
                tracing::warn!(port = %self.name, "slice without zero copy: {e}");
                None
            }
        }
    }

    fn detach(&self, ext: Ext) {
        let Ok(p) = ext.downcast::<SlicePool>() else {
            return;
        };
        if p.pool.live() > 0 {
            self.counters
                .regions_deferred
                .fetch_add(1, Ordering::Relaxed);
        }
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(p);
        self.reap();
    }

    fn tick(&self) {
        self.reap();
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        // The port is going; packets that still point into a departed app's area keep it
        // mapped until they are freed.
        let mut busy = std::mem::take(self.retired.get_mut().unwrap_or_else(|p| p.into_inner()));
        release_idle(&mut busy);
        if !busy.is_empty() {
            ORPHANS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(busy);
        }
    }
}

fn pool_of(s: &Session) -> Option<Arc<SlicePool>> {
    s.ext().and_then(|e| e.downcast::<SlicePool>().ok())
}

/// What a queue keeps of its session's pool: weakly, so a departed app's pool can go as
/// soon as its last packet is freed, whether or not the queue runs again.
fn weak_pool_of(s: &Session) -> Option<Weak<SlicePool>> {
    pool_of(s).map(|p| Arc::downgrade(&p))
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
    let counters: Arc<SliceCounters> = Arc::default();
    let hooks = Arc::new(Hooks {
        name: params.name.clone(),
        counters: counters.clone(),
        retired: Mutex::new(Vec::new()),
    });
    let server = Server::bind_with(
        &params.name,
        &path,
        ring_size,
        counters,
        Some(hooks.clone() as Arc<dyn SessionHooks>),
    )
    .map_err(|e| crate::socket_path_error("SlicePortArg", e))?;
    let mac = crate::name_mac(0x51, &params.name);
    Ok(NewPort {
        port: Box::new(SlicePort {
            server,
            hooks,
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
            released: Vec::new(),
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
        // Gauges: the app's frames now pipeline packets, and departed apps' regions still
        // mapped for theirs.
        let current = self
            .shared()
            .session()
            .1
            .and_then(|s| pool_of(&s))
            .map_or(0, |p| p.pool.live());
        let (retired, live) = self.hooks.retired_state();
        s += &format!(
            " pipeline_frames={} retired_regions={retired}",
            current + live
        );
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
    Some(bessemer_slice::CounterSnapshot::from_pairs(
        d.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse().ok()?))),
    ))
}

/// The incoming queue: packets the app sent.
struct SliceRx {
    shared: Arc<ServerShared>,
    generation: u64,
    end: Option<(FromApp, Option<Weak<SlicePool>>)>,
}

impl RxQueue for SliceRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        // One atomic load per call; the lock is taken only when an app came or went.
        if self.shared.generation() != self.generation {
            let (g, s) = self.shared.session();
            self.generation = g;
            self.end = s.map(|s| {
                let zc = weak_pool_of(&s);
                (FromApp::new(s, self.shared.counters.clone()), zc)
            });
        }
        let Some((end, zc)) = &mut self.end else {
            return 0;
        };
        let max = max.min(batch.room());
        let zc = match zc {
            None => None,
            Some(w) => match w.upgrade() {
                Some(zc) => Some(zc),
                // The app left and its pool is gone: the generation moves on shortly.
                None => return 0,
            },
        };
        let Some(zc) = zc else {
            // No pool of its own (see Hooks::attach): copy into the daemon's pool.
            return end.recv(max, |f| {
                let Some(mut p) = cache.alloc_any(f.data.len()) else {
                    return Taken::Dropped;
                };
                p.data_mut().copy_from_slice(f.data);
                if let Err(p) = batch.push(p) {
                    cache.free(p);
                    return Taken::Dropped;
                }
                Taken::Copied
            });
        };
        // Frames the pipeline freed go back on the app's free-send ring first.
        zc.pool.take_returned(usize::MAX, |i| end.give_back(i));
        end.recv(max, |f| {
            // SAFETY: the frame was the app's until `recv` took it for us: no packet, free
            // list or other adoption holds it. Offset and length were checked against it.
            let Some(p) = (unsafe { zc.pool.adopt(f.frame, f.offset as usize, f.data.len()) })
            else {
                return Taken::Dropped;
            };
            match batch.push(p) {
                Ok(()) => Taken::Adopted,
                Err(p) => {
                    // Not reached (max ≤ room); the frame goes back to the app unused.
                    let _ = zc.pool.lend(p);
                    Taken::Dropped
                }
            }
        })
    }
}

/// The outgoing queue: packets for the app.
struct SliceTx {
    shared: Arc<ServerShared>,
    generation: u64,
    end: Option<(ToApp, Option<Weak<SlicePool>>)>,
    /// Send frames the app received without a copy and released (scratch).
    released: Vec<u32>,
}

impl TxQueue for SliceTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        if self.shared.generation() != self.generation {
            let (g, s) = self.shared.session();
            self.generation = g;
            self.end = s.map(|s| {
                let zc = weak_pool_of(&s);
                (ToApp::new(s, self.shared.counters.clone()), zc)
            });
        }
        let n = batch.len();
        let c = &self.shared.counters;
        let Some((end, zc)) = &mut self.end else {
            c.to_app_no_app.fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        };
        if n == 0 {
            return 0;
        }
        // Held for this call only; None once a departed app's pool is gone.
        let zc = zc.as_ref().and_then(Weak::upgrade);
        let zc: Option<&SlicePool> = zc.as_deref();
        self.released.clear();
        end.begin(&mut self.released);
        if let (Some(zc), false) = (zc, self.released.is_empty()) {
            // SAFETY: each frame was lent to the app (by `lend` below) and named once by
            // `begin`, which checked the app held it.
            unsafe { zc.pool.give_back(&self.released) };
        }
        let zc_id = zc.map(|z| z.pool.id());
        let mut all = PacketBatch::new();
        all.append(batch);
        let mut done = PacketBatch::new();
        let (mut sent, mut zero_copy) = (0usize, 0u64);
        let mut bytes = 0u64;
        let mut failed = None;
        for p in all.drain() {
            if failed.is_some() {
                // SAFETY: `batch` was emptied above and gets back at most what it held.
                unsafe { batch.push_unchecked(p) };
                continue;
            }
            let p = match (zc, zc_id) {
                // The app's own frame goes back by offset, when nobody else holds it.
                (Some(zc), Some(id)) if p.pool_id() == id => {
                    if let Err(e) = end.ready() {
                        failed = Some(e);
                        // SAFETY: as above.
                        unsafe { batch.push_unchecked(p) };
                        continue;
                    }
                    match zc.pool.lend(p) {
                        Ok((frame, off, len)) => {
                            let r = end.push_frame(frame, off as u32, len as u32);
                            debug_assert!(r.is_ok(), "ready() said there was room");
                            sent += 1;
                            zero_copy += 1;
                            bytes += len as u64;
                            continue;
                        }
                        Err(p) => p,
                    }
                }
                _ => p,
            };
            match end.push(p.data()) {
                Ok(()) => {
                    sent += 1;
                    bytes += p.len() as u64;
                    // SAFETY: `done` holds at most what `batch` held.
                    unsafe { done.push_unchecked(p) };
                }
                Err(e) => {
                    failed = Some(e);
                    // SAFETY: as above.
                    unsafe { batch.push_unchecked(p) };
                }
            }
        }
        end.finish(sent as u32);
        c.to_app_packets.fetch_add(sent as u64, Ordering::Relaxed);
        c.to_app_bytes.fetch_add(bytes, Ordering::Relaxed);
        c.to_app_zero_copy.fetch_add(zero_copy, Ordering::Relaxed);
        c.to_app_copied
            .fetch_add(sent as u64 - zero_copy, Ordering::Relaxed);
        if let Some(e) = failed {
            // The caller drops everything from the first packet that did not fit.
            let reason = match e {
                ToAppError::RingFull => &c.to_app_ring_full,
                ToAppError::NoFrame => &c.to_app_no_frame,
                ToAppError::TooLong => &c.to_app_too_long,
            };
            reason.fetch_add((n - sent) as u64, Ordering::Relaxed);
        }
        cache.free_bulk(&mut done);
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

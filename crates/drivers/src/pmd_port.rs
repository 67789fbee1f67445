//! PMDPort: BESS's DPDK port driver, for the two DPDK virtual devices that put a Linux
//! interface behind a port, which is how BESS scripts and the 5G UPF use kernel interfaces:
//!
//! * `vdev="net_af_xdp<N>,iface=IF,start_queue=Q,queue_count=C"` is served by [`AFXDPPort`]
//!   (interface queue `Q + i` for port queue `i`);
//! * `vdev="net_af_packet<N>,iface=IF,qpairs=C"` (also spelt `eth_af_packet<N>`) by
//!   [`AFPacketPort`].
//!
//! As with DPDK, the port has the queues the request asks for (`num_inc_q`, `num_out_q`,
//! 1 when 0), and a device refuses more than it has (`queue_count`, `qpairs`; 1 by default).
//! A malformed vdev string is answered with EINVAL naming what is wrong.
//!
//! Everything else a PMDPort can name (`port_id`, `pci`, every other vdev: `net_null`,
//! `net_ring`, `net_tap`, `net_memif`, `net_vhost`, `virtio_user`, `net_pcap`, a NIC's PMD)
//! goes to DPDK itself (crate `bessemer-dpdk`; the EAL starts on the first such port, with
//! the daemon's `--dpdk-args`). `bessemerd --dpdk-vdevs` sends the two kernel vdevs to
//! DPDK's own PMDs too. Packets are copied between DPDK's buffers and Bessemer's (one copy
//! each way, counted per port in `show port`).
//!
//! [`AFXDPPort`]: crate::af_xdp_port
//! [`AFPacketPort`]: crate::af_packet_port

use bessemer_core::port::{NewPort, PortDriver, PortParams};
use bessemer_core::{Args, Error, Result, Value};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bessemer_core::batch::PacketBatch;
use bessemer_core::pool::PoolCache;
use bessemer_core::port::{LinkStatus, Port, PortConf, RxQueue, TxQueue};
use std::ffi::c_void;
use std::sync::atomic::AtomicPtr;
use std::sync::Mutex;

use bessemer_core::packet::Packet;
use bessemer_core::pool::PacketPool;
use bessemer_dpdk::{
    DevSpec, EthPort, FrameSource, PortSetup, RxBurst, ZcMempool, ZeroCopy, RX_BURST, ZC_HEADROOM,
};

use crate::{af_packet_port, af_xdp_port};

/// `bessemerd --dpdk-vdevs`: net_af_xdp / net_af_packet vdevs go to DPDK's own PMDs.
static KERNEL_VDEVS_TO_DPDK: AtomicBool = AtomicBool::new(false);

/// `bessemerd --dpdk-copy`: DPDK ports copy packets instead of sharing frames.
static DPDK_COPY: AtomicBool = AtomicBool::new(false);

/// Makes DPDK ports copy between DPDK's buffers and Bessemer's instead of laying DPDK's
/// mbufs over Bessemer's frames (for drivers that cannot take external memory).
pub fn set_dpdk_copy(on: bool) {
    DPDK_COPY.store(on, Ordering::Relaxed);
}

/// Sends the kernel-interface vdevs (`net_af_xdp`, `net_af_packet`) to DPDK's own PMDs
/// instead of Bessemer's AFXDPPort / AFPacketPort (which are faster on veth).
pub fn set_kernel_vdevs_to_dpdk(on: bool) {
    KERNEL_VDEVS_TO_DPDK.store(on, Ordering::Relaxed);
}

const MSG: &str = "PMDPortArg";

/// What Bessemer serves, for error messages.
const SUPPORTED: &str = "Bessemer serves natively only vdev=\"net_af_xdp<N>,iface=IF[,start_queue=Q][,queue_count=C]\" \
     and vdev=\"net_af_packet<N>,iface=IF[,qpairs=C]\" (kernel interfaces through AF_XDP or AF_PACKET)";

/// The PMDPort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "PMDPort",
    name_template: "pmd_port",
    help: "BESS's DPDK port: a NIC (port_id, pci) or a DPDK virtual device (vdev) through DPDK; the net_af_xdp and net_af_packet vdevs by AFXDPPort and AFPacketPort unless bessemerd runs with --dpdk-vdevs",
    arg_type: MSG,
    arg_doc: &[
        "vdev: string — a DPDK virtual device (net_null0, net_ring0, net_tap0,iface=T, net_memif0,role=server,socket=P, ...); \"net_af_xdp<N>,iface=IF[,start_queue=Q][,queue_count=C][,force_copy=0|1]\" and \"net_af_packet<N>,iface=IF[,qpairs=C]\" are served natively",
        "port_id: uint64 — a port DPDK probed at start (see --dpdk-args); pci: string — a PCI address (0000:3b:00.0) bound to vfio-pci",
        "num_inc_q/num_out_q (CreatePort) — queues (default 1), at most the device's queue_count/qpairs",
        "promiscuous_mode: bool — put the interface in promiscuous mode (AF_PACKET)",
        "loopback, socket_id, hwcksum: accepted and ignored (no effect on these devices)",
        "vlan_offload_rx_strip/filter/qinq: the device's VLAN offloads (ENOTSUP where it has none); flow_profiles: not available (ENOTSUP)",
    ],
    create,
};

/// A parsed vdev string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vdev {
    /// `net_af_xdp`: an AF_XDP socket per queue.
    AfXdp {
        /// The interface.
        iface: String,
        /// Its first queue.
        start_queue: u32,
        /// How many queues the device has.
        queue_count: u32,
        /// Copy mode forced.
        force_copy: bool,
        /// Busy polling budget (0: off).
        busy_budget: u32,
    },
    /// `net_af_packet`: AF_PACKET sockets joined by a fanout group.
    AfPacket {
        /// The interface.
        iface: String,
        /// How many queue pairs the device has.
        qpairs: u32,
    },
}

fn bad(vdev: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{MSG}.vdev '{vdev}': {what}"))
}

fn number(vdev: &str, key: &str, v: &str, min: u64, max: u64) -> Result<u64> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            vdev,
            format!("{key}={v}: expected a whole number in {min}..={max}"),
        )),
    }
}

fn flag(vdev: &str, key: &str, v: &str) -> Result<bool> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(bad(vdev, format!("{key}={v}: expected 0 or 1"))),
    }
}

/// The device kind a vdev name starts with (DPDK names a vdev by its driver name plus any
/// suffix, e.g. `net_af_xdp0`).
fn kind_of(name: &str) -> Option<&'static str> {
    // Longest first: no kind is a prefix of another one listed after it.
    ["net_af_packet", "eth_af_packet", "net_af_xdp"]
        .into_iter()
        .find(|k| name.starts_with(k))
}

/// Parses a DPDK vdev string of a kind Bessemer serves.
pub fn parse_vdev(vdev: &str) -> Result<Vdev> {
    if vdev.trim().is_empty() {
        return Err(Error::invalid(format!("{MSG}.vdev is empty; {SUPPORTED}")));
    }
    let mut parts = vdev.split(',');
    let name = parts.next().unwrap_or_default();
    let Some(kind) = kind_of(name) else {
        return Err(Error::unsupported(format!(
            "{MSG}.vdev '{vdev}': DPDK virtual device '{name}' is not available: {SUPPORTED}"
        )));
    };
    let mut kv: Vec<(&str, &str)> = Vec::new();
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            return Err(bad(
                vdev,
                if p.is_empty() {
                    "an empty option (two commas in a row, or a trailing comma)".to_string()
                } else {
                    format!("option '{p}' is not key=value")
                },
            ));
        };
        if k.is_empty() || v.is_empty() {
            return Err(bad(vdev, format!("option '{p}' has an empty key or value")));
        }
        if kv.iter().any(|(k2, _)| *k2 == k) {
            return Err(bad(vdev, format!("option '{k}' is given twice")));
        }
        kv.push((k, v));
    }
    let iface = kv
        .iter()
        .find(|(k, _)| *k == "iface")
        .map(|(_, v)| v.to_string())
        .ok_or_else(|| bad(vdev, "iface=<interface> is required"))?;
    if iface.len() >= libc::IFNAMSIZ {
        return Err(bad(
            vdev,
            format!(
                "iface={iface}: interface names have at most {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    if kind == "net_af_xdp" {
        let (mut start_queue, mut queue_count, mut force_copy, mut busy_budget) = (0, 1, false, 0);
        for (k, v) in kv {
            match k {
                "iface" => {}
                "start_queue" => start_queue = number(vdev, k, v, 0, u32::MAX as u64)? as u32,
                "queue_count" => queue_count = number(vdev, k, v, 1, 1024)? as u32,
                "force_copy" => force_copy = flag(vdev, k, v)?,
                // Performance knobs of DPDK's driver with no counterpart here.
                "shared_umem" => {
                    flag(vdev, k, v)?;
                }
                "busy_budget" => busy_budget = number(vdev, k, v, 0, u16::MAX as u64)? as u32,
                "xdp_prog" | "use_cni" | "use_pinned_map" | "uds_path" | "dp_path" => {
                    return Err(Error::unsupported(format!(
                        "{MSG}.vdev '{vdev}': option '{k}' (a custom XDP program or the AF_XDP device plugin) is not available: Bessemer's net_af_xdp loads its own XDP program"
                    )))
                }
                _ => {
                    return Err(bad(
                        vdev,
                        format!("unknown net_af_xdp option '{k}' (options: iface, start_queue, queue_count, force_copy, shared_umem, busy_budget)"),
                    ))
                }
            }
        }
        return Ok(Vdev::AfXdp {
            iface,
            start_queue,
            queue_count,
            force_copy,
            busy_budget,
        });
    }
    let mut qpairs = 1;
    for (k, v) in kv {
        match k {
            "iface" => {}
            "qpairs" => qpairs = number(vdev, k, v, 1, 1024)? as u32,
            // Ring geometry and the qdisc bypass of DPDK's driver: AFPacketPort sizes its own
            // rings and always sends through the qdisc layer.
            "blocksz" | "framesz" | "framecnt" => {
                number(vdev, k, v, 1, u32::MAX as u64)?;
            }
            "qdisc_bypass" => {
                flag(vdev, k, v)?;
            }
            "fanout_mode" => {
                if !["hash", "lb", "cpu", "rollover", "rnd", "qm"].contains(&v) {
                    return Err(bad(
                        vdev,
                        format!("fanout_mode={v}: expected hash, lb, cpu, rollover, rnd or qm"),
                    ));
                }
            }
            _ => {
                return Err(bad(
                    vdev,
                    format!("unknown net_af_packet option '{k}' (options: iface, qpairs, blocksz, framesz, framecnt, qdisc_bypass, fanout_mode)"),
                ))
            }
        }
    }
    Ok(Vdev::AfPacket { iface, qpairs })
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, MSG)?;
    let _loopback = a.bool("loopback")?;
    let port_id = a.uint("port_id", u64::MAX)?;
    let pci = a.str("pci")?;
    let vdev = a.str("vdev")?;
    let vlan: Vec<&str> = [
        "vlan_offload_rx_strip",
        "vlan_offload_rx_filter",
        "vlan_offload_rx_qinq",
    ]
    .into_iter()
    .filter_map(|k| match a.bool(k) {
        Ok(Some(true)) => Some(Ok(k)),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
    .collect::<Result<_>>()?;
    let _socket_id = a.int("socket_id", i32::MIN as i64, i32::MAX as i64)?;
    let promiscuous = a.bool("promiscuous_mode")?.unwrap_or(false);
    let _hwcksum = a.bool("hwcksum")?;
    let flow_profiles = a.list("flow_profiles")?.len();
    a.finish()?;
    let spec = match (port_id, pci, vdev) {
        (_, _, Some(v)) => {
            let native = kind_of(v.split(',').next().unwrap_or_default()).is_some()
                && !KERNEL_VDEVS_TO_DPDK.load(Ordering::Relaxed);
            if native {
                None
            } else if v.trim().is_empty() {
                return Err(Error::invalid(format!("{MSG}.vdev is empty")));
            } else {
                Some(DevSpec::Vdev(v.to_string()))
            }
        }
        (Some(id), _, _) => Some(DevSpec::PortId(u16::try_from(id).map_err(|_| {
            Error::invalid(format!("{MSG}.port_id={id}: DPDK port ids are below 65536"))
        })?)),
        (_, Some(p), _) => Some(DevSpec::Pci(p.to_string())),
        _ => {
            return Err(Error::invalid(format!(
                "{MSG}: no port specified (port_id, pci or vdev)"
            )))
        }
    };
    if let Some(spec) = spec {
        if flow_profiles > 0 {
            return Err(Error::unsupported(format!(
                "{MSG}.flow_profiles: flow steering rules (rte_flow) are not available in Bessemer's PMDPort yet"
            )));
        }
        let setup = PortSetup {
            rx_queues: params.num_inc_q.max(1).min(u16::MAX as usize) as u16,
            tx_queues: params.num_out_q.max(1).min(u16::MAX as usize) as u16,
            rx_desc: ring_size(params.size_inc_q, "size_inc_q")?,
            tx_desc: ring_size(params.size_out_q, "size_out_q")?,
            rss: true,
            vlan_strip: vlan.contains(&"vlan_offload_rx_strip"),
            vlan_filter: vlan.contains(&"vlan_offload_rx_filter"),
            vlan_qinq: vlan.contains(&"vlan_offload_rx_qinq"),
            loopback: _loopback.unwrap_or(false) as u32,
        };
        return dpdk_create(params, spec, &setup, promiscuous);
    }
    let vdev = vdev.unwrap_or_default();
    let dev = parse_vdev(vdev)?;
    if let Some(k) = vlan.first() {
        return Err(Error::unsupported(format!(
            "{MSG}.{k}: VLAN offloads need a DPDK NIC; the '{vdev}' device has none"
        )));
    }
    if flow_profiles > 0 {
        return Err(Error::unsupported(format!(
            "{MSG}.flow_profiles: flow steering rules need a DPDK NIC; the '{vdev}' device has none"
        )));
    }
    let nin = params.num_inc_q.max(1);
    let nout = params.num_out_q.max(1);
    let (limit, what) = match &dev {
        Vdev::AfXdp { queue_count, .. } => (*queue_count, "queue_count"),
        Vdev::AfPacket { qpairs, .. } => (*qpairs, "qpairs"),
    };
    for (q, n) in [("num_inc_q", nin), ("num_out_q", nout)] {
        if n > limit as usize {
            return Err(Error::invalid(format!(
                "{q} {n} is more than the device has: vdev '{vdev}' has {what}={limit}"
            )));
        }
    }
    let inner = PortParams {
        name: params.name.clone(),
        num_inc_q: nin,
        num_out_q: nout,
        size_inc_q: params.size_inc_q,
        size_out_q: params.size_out_q,
        pool: params.pool.clone(),
    };
    match dev {
        Vdev::AfXdp {
            iface,
            start_queue,
            force_copy,
            busy_budget,
            ..
        } => {
            if promiscuous {
                return Err(Error::unsupported(format!(
                    "{MSG}.promiscuous_mode: not available with net_af_xdp in Bessemer (set it on the interface, or use net_af_packet)"
                )));
            }
            let arg = Value::map()
                .with("ifname", iface)
                .with("qid", start_queue as u64)
                .with("copy", force_copy)
                .with("busy_budget", busy_budget as u64);
            (af_xdp_port::DRIVER.create)(&inner, &arg)
        }
        Vdev::AfPacket { iface, .. } => {
            let arg = Value::map()
                .with("ifname", iface)
                .with("promiscuous", promiscuous);
            (af_packet_port::DRIVER.create)(&inner, &arg)
        }
    }
}

fn ring_size(n: usize, what: &str) -> Result<u16> {
    match n {
        0 => Ok(1024),
        1..=32768 => Ok(n as u16),
        _ => Err(Error::invalid(format!(
            "{what} {n}: a DPDK queue has at most 32768 descriptors"
        ))),
    }
}

fn dpdk_err(e: bessemer_dpdk::DpdkError) -> Error {
    Error::new(e.errno, format!("{MSG}: {}", e.msg))
}

/// Bessemer's pool as the frames of a zero-copy mempool (one per queue). DPDK allocates and
/// frees through it inside the bursts of the queue's owner, whose cache is lent for the
/// burst (`worker`); at device start and close, on the control thread, `ctl` serves.
/// Frees during a burst (a driver frees sent mbufs one at a time) only collect the
/// descriptors in `pending`; the burst's end frees them into the lent cache in bulk.
struct PoolFrames {
    pool: PacketPool,
    worker: AtomicPtr<PoolCache>,
    ctl: Mutex<PoolCache>,
    pending: std::cell::UnsafeCell<PacketBatch>,
}

// SAFETY: `pending` is touched only by the thread that lent its cache (`worker` non-null),
// for the length of its burst; everything else is Sync.
unsafe impl Sync for PoolFrames {}

impl PoolFrames {
    fn new(pool: &PacketPool) -> Arc<PoolFrames> {
        Arc::new(PoolFrames {
            pool: pool.clone(),
            worker: AtomicPtr::new(std::ptr::null_mut()),
            ctl: Mutex::new(pool.cache()),
            pending: std::cell::UnsafeCell::new(PacketBatch::new()),
        })
    }

    fn with_cache<R>(&self, f: impl FnOnce(&mut PoolCache) -> R) -> R {
        let w = self.worker.load(Ordering::Relaxed);
        if w.is_null() {
            f(&mut self.ctl.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            // SAFETY: set by the queue's owner for the length of a burst on its own thread,
            // from the cache it holds exclusively and does not touch during the burst.
            f(unsafe { &mut *w })
        }
    }

    /// Frees packets DPDK is done with: collected while a burst runs, else at once.
    fn free(&self, descs: &[*mut c_void]) {
        let w = self.worker.load(Ordering::Relaxed);
        if w.is_null() {
            let mut cache = self.ctl.lock().unwrap_or_else(|p| p.into_inner());
            for d in descs {
                // SAFETY: DPDK hands back a descriptor it got from alloc or tx_zc, once.
                cache.free(unsafe { Packet::from_raw(*d as *mut _) });
            }
            return;
        }
        // SAFETY: the lending thread is the caller (see `pending`).
        let pending = unsafe { &mut *self.pending.get() };
        // SAFETY: as above (the cache is the lent one).
        let cache = unsafe { &mut *w };
        for d in descs {
            // SAFETY: DPDK hands back a descriptor it got from alloc or tx_zc, once.
            if let Err(p) = pending.push(unsafe { Packet::from_raw(*d as *mut _) }) {
                cache.free_bulk(pending);
                // SAFETY: the batch was just emptied.
                unsafe { pending.push_unchecked(p) };
            }
        }
    }

    /// Lends `cache` to the bursts of this queue until the guard goes, which frees what
    /// the bursts collected into it.
    fn lend<'a>(&'a self, cache: &'a mut PoolCache) -> impl Drop + 'a {
        self.worker.store(cache, Ordering::Relaxed);
        struct Back<'b>(&'b PoolFrames);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                let w = self.0.worker.swap(std::ptr::null_mut(), Ordering::Relaxed);
                // SAFETY: the lending thread, at the end of its burst.
                let pending = unsafe { &mut *self.0.pending.get() };
                if !pending.is_empty() {
                    // SAFETY: w is the cache lent by this thread (non-null while lent).
                    unsafe { &mut *w }.free_bulk(pending);
                }
            }
        }
        Back(self)
    }
}

/// The mempool's view of a queue's frames.
struct QueueFrames(Arc<PoolFrames>);

impl FrameSource for QueueFrames {
    fn alloc(&self, hdrs: &mut [*mut u8], descs: &mut [*mut c_void]) -> bool {
        let n = hdrs.len().min(descs.len());
        self.0.with_cache(|cache| {
            let mut got = PacketBatch::new();
            for at in (0..n).step_by(bessemer_core::batch::MAX_BURST) {
                let k = (n - at).min(bessemer_core::batch::MAX_BURST);
                if cache.alloc_bulk(&mut got, k, 0) != k {
                    // All or nothing: give back what earlier rounds took.
                    for d in &descs[..at] {
                        // SAFETY: allocated above, never handed out.
                        cache.free(unsafe { Packet::from_raw(*d as *mut _) });
                    }
                    return false;
                }
                for (i, p) in got.drain().enumerate() {
                    // The header goes 256 bytes in front of the packet's home data offset
                    // (where DPDK's default headroom of 128 then puts the data): staggered
                    // by frame like Bessemer's own data offsets.
                    // SAFETY: a fresh packet's data starts at its home offset, >= 256 bytes
                    // into its frame.
                    hdrs[at + i] =
                        unsafe { p.data().as_ptr().sub(2 * bessemer_dpdk::MBUF_HEADER) as *mut u8 };
                    descs[at + i] = p.into_raw() as *mut c_void;
                }
            }
            true
        })
    }

    fn free(&self, descs: &[*mut c_void]) {
        self.0.free(descs)
    }

    fn available(&self) -> usize {
        self.0.pool.free_count()
    }

    fn frame_size(&self) -> u32 {
        self.0.pool.frame_size() as u32
    }
}

/// Counters of what crossed between DPDK's buffers and Bessemer's.
#[derive(Default)]
struct Copies {
    rx_zero_copy: AtomicU64,
    tx_zero_copy: AtomicU64,
    rx_copied: AtomicU64,
    tx_copied: AtomicU64,
    /// Received packets with no Bessemer buffer for them (pool empty or too long).
    rx_no_buffer: AtomicU64,
    /// Transmit bursts that found no DPDK buffers.
    tx_no_mbuf: AtomicU64,
}

/// A PMDPort on a DPDK device.
struct DpdkPort {
    eth: Arc<EthPort>,
    copies: Arc<Copies>,
    nrx: usize,
    ntx: usize,
    /// Zero copy: each queue's frames (empty: copy mode).
    rx_frames: Vec<Arc<PoolFrames>>,
    tx_frames: Vec<Arc<PoolFrames>>,
    /// Packets of this pool go out without a copy (its memory is the one registered).
    pool_id: u16,
}

fn dpdk_create(
    params: &PortParams,
    spec: DevSpec,
    setup: &PortSetup,
    promiscuous: bool,
) -> Result<NewPort> {
    let _ = promiscuous; // the shim enables promiscuous mode wherever the device has it
    let mut eth = EthPort::open(&spec).map_err(dpdk_err)?;
    // virtio-user hands its vhost backend only DPDK's own memory (the memory table it
    // shares by file descriptor): Bessemer's frames are not in it, so that device copies.
    let needs_dpdk_memory = ["net_virtio_user"].contains(&eth.info().driver.as_str());
    let zero_copy = bessemer_dpdk::zero_copy_usable()
        && !DPDK_COPY.load(Ordering::Relaxed)
        && !needs_dpdk_memory;
    let (mut rx_frames, mut tx_frames) = (Vec::new(), Vec::new());
    let zc = if zero_copy {
        let mut zc = ZeroCopy {
            rx: Vec::new(),
            tx: Vec::new(),
            regions: vec![(params.pool.region_base(), params.pool.region_len())],
        };
        for (dir, n, frames, pools) in [
            ("rx", setup.rx_queues, &mut rx_frames, &mut zc.rx),
            ("tx", setup.tx_queues, &mut tx_frames, &mut zc.tx),
        ] {
            for q in 0..n {
                let f = PoolFrames::new(&params.pool);
                let name = format!("bsm{}{dir}{q}", eth.id());
                // A cache for TX queues only (see ZcMempool::new): measured with make bench-pmd.
                let cache = if dir == "tx" { 64 } else { 0 };
                let mp = ZcMempool::new(&name, Box::new(QueueFrames(f.clone())), 8192, cache)
                    .map_err(dpdk_err)?;
                frames.push(f);
                pools.push(mp);
            }
        }
        Some(zc)
    } else {
        None
    };
    eth.setup(setup, zc).map_err(dpdk_err)?;
    tracing::info!(
        "PMDPort {}: DPDK port {} '{}' ({}), {} RX / {} TX queues",
        params.name,
        eth.id(),
        eth.info().name,
        eth.info().driver,
        setup.rx_queues,
        setup.tx_queues
    );
    Ok(NewPort {
        num_inc_q: setup.rx_queues as usize,
        num_out_q: setup.tx_queues as usize,
        port: Box::new(DpdkPort {
            eth: Arc::new(eth),
            copies: Arc::default(),
            nrx: setup.rx_queues as usize,
            ntx: setup.tx_queues as usize,
            rx_frames,
            tx_frames,
            pool_id: params.pool.id(),
        }),
    })
}

struct DpdkRxQ {
    eth: Arc<EthPort>,
    copies: Arc<Copies>,
    q: u16,
    burst: RxBurst,
    frames: Option<Arc<PoolFrames>>,
}

impl DpdkRxQ {
    fn recv_zero_copy(
        &mut self,
        frames: &PoolFrames,
        cache: &mut PoolCache,
        batch: &mut PacketBatch,
        want: usize,
    ) -> usize {
        let k = {
            let _lent = frames.lend(cache);
            self.eth.rx_burst_zc(self.q, &mut self.burst, want)
        };
        if k == 0 {
            return 0;
        }
        let start = batch.len();
        let mut dst = [std::ptr::null_mut::<u8>(); RX_BURST];
        let (mut zc, mut copied, mut missing) = (0u64, 0u64, 0u64);
        for (i, d) in dst.iter_mut().enumerate().take(k) {
            let desc = self.burst.descs[i];
            if !desc.is_null() {
                // SAFETY: the frame arrived in one of Bessemer's mbufs: its packet is ours.
                let mut p = unsafe { Packet::from_raw(desc as *mut _) };
                // The frame's start: its data pointer less its data offset, as the
                // descriptor last had them (the device only wrote bytes inside the frame).
                let base = p.data().as_ptr() as usize - p.data_offset();
                let off = self.burst.datas[i] as usize - base;
                if p.set_data_bounds(off, self.burst.lens[i] as usize) {
                    // SAFETY: at most `want` <= batch.room() packets are pushed.
                    unsafe { batch.push_unchecked(p) };
                    zc += 1;
                } else {
                    cache.free(p);
                    missing += 1;
                }
                continue;
            }
            match cache.alloc_any(self.burst.lens[i] as usize) {
                Some(mut p) => {
                    *d = p.data_mut().as_mut_ptr();
                    // SAFETY: as above.
                    unsafe { batch.push_unchecked(p) };
                    copied += 1;
                }
                None => missing += 1,
            }
        }
        EthPort::rx_copy_rest(&mut self.burst, &dst[..k]);
        let c = &self.copies;
        if zc > 0 {
            c.rx_zero_copy.fetch_add(zc, Ordering::Relaxed);
        }
        if copied > 0 {
            c.rx_copied.fetch_add(copied, Ordering::Relaxed);
        }
        if missing > 0 {
            c.rx_no_buffer.fetch_add(missing, Ordering::Relaxed);
        }
        batch.len() - start
    }
}

impl RxQueue for DpdkRxQ {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let want = max.min(batch.room()).min(RX_BURST);
        // Taken out for the call and put back: no reference count touched per burst.
        if let Some(frames) = self.frames.take() {
            let got = self.recv_zero_copy(&frames, cache, batch, want);
            self.frames = Some(frames);
            return got;
        }
        let k = self.eth.rx_burst(self.q, &mut self.burst, want);
        if k == 0 {
            return 0;
        }
        let mut dst = [std::ptr::null_mut::<u8>(); RX_BURST];
        let start = batch.len();
        let mut missing = 0;
        for (i, d) in dst.iter_mut().enumerate().take(k) {
            match cache.alloc_any(self.burst.lens[i] as usize) {
                Some(mut p) => {
                    *d = p.data_mut().as_mut_ptr();
                    // SAFETY: at most `want` <= batch.room() packets are pushed.
                    unsafe { batch.push_unchecked(p) };
                }
                None => missing += 1,
            }
        }
        EthPort::rx_copy_out(&mut self.burst, &dst[..k]);
        let got = batch.len() - start;
        self.copies
            .rx_copied
            .fetch_add(got as u64, Ordering::Relaxed);
        if missing > 0 {
            self.copies
                .rx_no_buffer
                .fetch_add(missing, Ordering::Relaxed);
        }
        got
    }
}

struct DpdkTxQ {
    eth: Arc<EthPort>,
    copies: Arc<Copies>,
    q: u16,
    frames: Option<Arc<PoolFrames>>,
    pool_id: u16,
}

impl DpdkTxQ {
    /// A packet that can leave in its own frame: held once (the mbuf header is written into
    /// its frame), of the registered pool, with the header's room in front of its data.
    fn zero_copy_ok(&self, p: &Packet) -> bool {
        !p.is_shared() && p.pool_id() == self.pool_id && p.data_offset() >= ZC_HEADROOM
    }

    /// Sends the leading packets that can go without a copy; returns how many went.
    fn send_zero_copy(
        &mut self,
        frames: &PoolFrames,
        cache: &mut PoolCache,
        batch: &mut PacketBatch,
    ) -> usize {
        let mut datas = [std::ptr::null_mut::<u8>(); RX_BURST];
        let mut lens = [0u32; RX_BURST];
        let mut descs = [std::ptr::null_mut::<c_void>(); RX_BURST];
        let mut n = 0;
        for p in batch.pkts().iter().take(RX_BURST) {
            if !self.zero_copy_ok(p) {
                break;
            }
            datas[n] = p.data().as_ptr() as *mut u8;
            lens[n] = p.len() as u32;
            descs[n] = p.as_ptr() as *mut c_void;
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        let sent = {
            let _lent = frames.lend(cache);
            self.eth.tx_zc(self.q, &datas[..n], &lens[..n], &descs[..n])
        };
        if sent > 0 {
            let mut rest = PacketBatch::new();
            for (k, p) in batch.drain().enumerate() {
                if k < sent {
                    // DPDK holds the packet now and frees it through the queue's frames.
                    let _ = p.into_raw();
                } else {
                    // SAFETY: at most MAX_BURST packets.
                    unsafe { rest.push_unchecked(p) };
                }
            }
            batch.append(&mut rest);
            self.copies
                .tx_zero_copy
                .fetch_add(sent as u64, Ordering::Relaxed);
        }
        sent
    }

    /// Sends the leading packets that need a copy: with `zero_copy`, the run up to the first
    /// that can go in its own frame; without, all of them.
    fn send_copy(
        &mut self,
        cache: &mut PoolCache,
        batch: &mut PacketBatch,
        zero_copy: bool,
    ) -> usize {
        let n = if zero_copy {
            batch
                .pkts()
                .iter()
                .take(RX_BURST)
                .take_while(|p| !self.zero_copy_ok(p))
                .count()
        } else {
            batch.len().min(RX_BURST)
        };
        if n == 0 {
            return 0;
        }
        let mut src = [std::ptr::null::<u8>(); RX_BURST];
        let mut lens = [0u32; RX_BURST];
        for (i, p) in batch.pkts().iter().take(n).enumerate() {
            let d = p.data();
            src[i] = d.as_ptr();
            lens[i] = d.len() as u32;
        }
        let mut nombuf = 0;
        let sent = self.eth.tx_copy(self.q, &src[..n], &lens[..n], &mut nombuf);
        if nombuf > 0 {
            self.copies.tx_no_mbuf.fetch_add(nombuf, Ordering::Relaxed);
        }
        if sent == 0 {
            return 0;
        }
        let mut rest = PacketBatch::new();
        let mut gone = PacketBatch::new();
        for (k, p) in batch.drain().enumerate() {
            // SAFETY: at most MAX_BURST packets in each.
            unsafe {
                if k < sent {
                    gone.push_unchecked(p)
                } else {
                    rest.push_unchecked(p)
                }
            };
        }
        cache.free_bulk(&mut gone);
        batch.append(&mut rest);
        self.copies
            .tx_copied
            .fetch_add(sent as u64, Ordering::Relaxed);
        sent
    }
}

impl TxQueue for DpdkTxQ {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        // Taken out for the bursts and put back: no reference count touched per call.
        let Some(frames) = self.frames.take() else {
            return self.send_copy(cache, batch, false);
        };
        // Runs of packets that can go in their own frames and runs that need a copy, in
        // order, until the device takes no more.
        let mut sent = 0;
        while !batch.is_empty() {
            let want = batch.len();
            let k = match self.send_zero_copy(&frames, cache, batch) {
                0 => self.send_copy(cache, batch, true),
                k => k,
            };
            sent += k;
            if k == 0 || batch.len() == want {
                break;
            }
        }
        self.frames = Some(frames);
        sent
    }
}

impl Port for DpdkPort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        if qid >= self.nrx {
            return Err(Error::invalid(format!(
                "no RX queue {qid} (the port has {})",
                self.nrx
            )));
        }
        Ok(Box::new(DpdkRxQ {
            eth: self.eth.clone(),
            copies: self.copies.clone(),
            q: qid as u16,
            burst: RxBurst::default(),
            frames: self.rx_frames.get(qid).cloned(),
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        if qid >= self.ntx {
            return Err(Error::invalid(format!(
                "no TX queue {qid} (the port has {})",
                self.ntx
            )));
        }
        Ok(Box::new(DpdkTxQ {
            eth: self.eth.clone(),
            copies: self.copies.clone(),
            q: qid as u16,
            frames: self.tx_frames.get(qid).cloned(),
            pool_id: self.pool_id,
        }))
    }

    fn link_status(&self) -> LinkStatus {
        let l = self.eth.link();
        LinkStatus {
            speed_mbps: l.speed_mbps,
            full_duplex: l.full_duplex,
            autoneg: l.autoneg,
            link_up: l.up,
        }
    }

    fn conf(&self) -> PortConf {
        PortConf {
            mac_addr: self.eth.mac(),
            mtu: self.eth.mtu(),
            admin_up: self.eth.link().up,
        }
    }

    fn set_conf(&self, conf: &PortConf) -> Result<()> {
        let now = self.conf();
        if conf.mac_addr != now.mac_addr {
            self.eth.set_mac(conf.mac_addr).map_err(dpdk_err)?;
        }
        if conf.mtu != now.mtu && conf.mtu != 0 {
            self.eth.set_mtu(conf.mtu).map_err(dpdk_err)?;
        }
        if conf.admin_up != now.admin_up {
            self.eth.set_link(conf.admin_up).map_err(dpdk_err)?;
        }
        Ok(())
    }

    fn driver_drops(&self) -> (u64, u64) {
        let s = self.eth.stats();
        (
            s.imissed + s.ierrors + s.rx_nombuf + self.copies.rx_no_buffer.load(Ordering::Relaxed),
            s.oerrors,
        )
    }

    fn desc(&self) -> String {
        let i = self.eth.info();
        let s = self.eth.stats();
        let c = &self.copies;
        format!(
            "DPDK port {} '{}' ({}), {}: zero-copy rx {} tx {}, copied rx {} tx {}; device rx {} tx {} imissed {} ierrors {} oerrors {} rx_nombuf {}; no buffer rx {} tx {}",
            self.eth.id(),
            i.name,
            i.driver,
            if self.eth.zero_copy() { "zero copy" } else { "copy mode" },
            c.rx_zero_copy.load(Ordering::Relaxed),
            c.tx_zero_copy.load(Ordering::Relaxed),
            c.rx_copied.load(Ordering::Relaxed),
            c.tx_copied.load(Ordering::Relaxed),
            s.ipackets,
            s.opackets,
            s.imissed,
            s.ierrors,
            s.oerrors,
            s.rx_nombuf,
            c.rx_no_buffer.load(Ordering::Relaxed),
            c.tx_no_mbuf.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_upf_forms() {
        assert_eq!(
            parse_vdev("net_af_xdp0,iface=eth1,start_queue=0,queue_count=4").unwrap(),
            Vdev::AfXdp {
                iface: "eth1".into(),
                start_queue: 0,
                queue_count: 4,
                force_copy: false,
                busy_budget: 0
            }
        );
        assert_eq!(
            parse_vdev("net_af_packet1,iface=veth0,qpairs=2").unwrap(),
            Vdev::AfPacket {
                iface: "veth0".into(),
                qpairs: 2
            }
        );
        assert_eq!(
            parse_vdev(
                "eth_af_packet,iface=x,blocksz=4096,framesz=2048,framecnt=512,qdisc_bypass=1"
            )
            .unwrap(),
            Vdev::AfPacket {
                iface: "x".into(),
                qpairs: 1
            }
        );
    }

    #[test]
    fn malformed_strings_name_the_problem() {
        for (v, want) in [
            ("net_af_xdp0", "iface=<interface> is required"),
            ("net_af_xdp0,iface", "'iface' is not key=value"),
            ("net_af_xdp0,iface=", "empty key or value"),
            ("net_af_xdp0,iface=a,,queue_count=1", "empty option"),
            ("net_af_xdp0,iface=a,queue_count=0", "queue_count=0"),
            ("net_af_xdp0,iface=a,queue_count=two", "queue_count=two"),
            ("net_af_xdp0,iface=a,iface=b", "'iface' is given twice"),
            (
                "net_af_xdp0,iface=a,qpairs=2",
                "unknown net_af_xdp option 'qpairs'",
            ),
            (
                "net_af_packet0,iface=a,queue_count=2",
                "unknown net_af_packet option",
            ),
            (
                "net_af_packet0,iface=a,qdisc_bypass=yes",
                "qdisc_bypass=yes",
            ),
            ("net_af_packet0,iface=abcdefghijklmnop", "at most 15 bytes"),
        ] {
            let e = parse_vdev(v).unwrap_err();
            assert_eq!(e.code, libc::EINVAL, "{v}: {}", e.msg);
            assert!(e.msg.contains(want), "{v}: {}", e.msg);
        }
        for v in [
            "net_pcap0,iface=a",
            "net_tap0,iface=x",
            "virtio_user0,path=/x",
        ] {
            let e = parse_vdev(v).unwrap_err();
            assert_eq!(e.code, libc::ENOTSUP, "{v}: {}", e.msg);
            assert!(e.msg.contains("net_af_xdp") && e.msg.contains("net_af_packet"));
        }
        let e = parse_vdev("net_af_xdp0,iface=a,xdp_prog=/p.o").unwrap_err();
        assert_eq!(e.code, libc::ENOTSUP, "{}", e.msg);
    }
}

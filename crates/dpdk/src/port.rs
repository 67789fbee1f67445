//! One DPDK ethdev port: found or probed from BESS's `port_id` / `pci` / `vdev`, set up,
//! started, and closed (and its device detached, if Bessemer attached it) when dropped.

use crate::DpdkError;

/// How a PMDPort names its device (BESS's three forms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DevSpec {
    /// A port DPDK already has (probed at EAL start, e.g. through `-a` in `--dpdk-args`).
    PortId(u16),
    /// A PCI device, `0000:3b:00.0` or `3b:00.0`, bound to vfio-pci / uio (or a
    /// bifurcated driver such as mlx5).
    Pci(String),
    /// A virtual device string, `net_null0`, `net_ring0`, `net_tap0,iface=t0`, ...
    Vdev(String),
}

/// What the device says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    /// The PMD's name (`net_null`, `net_ice`, ...).
    pub driver: String,
    /// The ethdev name (the vdev name or PCI address).
    pub name: String,
    /// Most receive queues.
    pub max_rx_queues: u16,
    /// Most transmit queues.
    pub max_tx_queues: u16,
    /// RX offloads it has (DPDK's bits).
    pub rx_offload_capa: u64,
    /// RSS hash types it has (0: no RSS).
    pub rss_offloads: u64,
    /// NUMA socket (-1: any).
    pub socket: i32,
}

/// How to set a port up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSetup {
    /// Receive queues.
    pub rx_queues: u16,
    /// Transmit queues.
    pub tx_queues: u16,
    /// Receive descriptors per queue (0: the device's default).
    pub rx_desc: u16,
    /// Transmit descriptors per queue (0: the device's default).
    pub tx_desc: u16,
    /// Spread flows over the receive queues by RSS (where the device has it).
    pub rss: bool,
    /// VLAN offloads (BESS's `vlan_offload_rx_strip`, `_filter`, `_qinq`).
    pub vlan_strip: bool,
    /// See `vlan_strip`.
    pub vlan_filter: bool,
    /// See `vlan_strip`.
    pub vlan_qinq: bool,
    /// The device's loopback mode (BESS's `loopback`: 1 = internal loopback).
    pub loopback: u32,
}

impl Default for PortSetup {
    fn default() -> Self {
        PortSetup {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            rss: true,
            vlan_strip: false,
            vlan_filter: false,
            vlan_qinq: false,
            loopback: 0,
        }
    }
}

/// The device's own counters (`rte_eth_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets the device dropped for want of room in its receive rings.
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Receive buffer allocation failures.
    pub rx_nombuf: u64,
    /// Per receive queue packets (the first 16 queues, as DPDK keeps them).
    pub q_ipackets: Vec<u64>,
    /// Per transmit queue packets.
    pub q_opackets: Vec<u64>,
}

/// Link state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Mbit/s (0: unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
    /// Autonegotiated.
    pub autoneg: bool,
    /// Up.
    pub up: bool,
}

/// Most packets one receive burst takes.
pub const RX_BURST: usize = 64;

/// The DPDK buffers of one receive burst, between [`EthPort::rx_burst`] and
/// [`EthPort::rx_copy_out`].
pub struct RxBurst {
    m: [*mut std::ffi::c_void; RX_BURST],
    /// Each packet's length.
    pub lens: [u32; RX_BURST],
    /// Zero copy: the packet's Bessemer descriptor (null: copy it), and its first byte.
    pub descs: [*mut std::ffi::c_void; RX_BURST],
    /// See `descs`.
    pub datas: [*mut u8; RX_BURST],
    n: usize,
}

impl Default for RxBurst {
    fn default() -> Self {
        RxBurst {
            m: [std::ptr::null_mut(); RX_BURST],
            lens: [0; RX_BURST],
            descs: [std::ptr::null_mut(); RX_BURST],
            datas: [std::ptr::null_mut(); RX_BURST],
            n: 0,
        }
    }
}

// SAFETY: the mbufs of a burst belong to the queue's one owner, which moves with it.
unsafe impl Send for RxBurst {}

/// An open ethdev port.
#[derive(Debug)]
pub struct EthPort {
    id: u16,
    /// Detach the device on close (Bessemer attached it).
    attached: bool,
    info: PortInfo,
    /// Zero copy: each RX queue's mempool, each TX queue's (dropped after the close).
    zc_rx: Vec<crate::ZcMempool>,
    zc_tx: Vec<crate::ZcMempool>,
}

/// Zero copy for [`EthPort::setup`]: one mempool per RX and per TX queue, and the memory
/// region their frames are in (registered with DPDK for the device's DMA).
#[derive(Debug)]
pub struct ZeroCopy {
    /// One per RX queue.
    pub rx: Vec<crate::ZcMempool>,
    /// One per TX queue.
    pub tx: Vec<crate::ZcMempool>,
    /// Regions (start, length) the frames come from.
    pub regions: Vec<(*mut u8, usize)>,
}

#[cfg(dpdk)]
fn err(r: i32, what: impl std::fmt::Display) -> DpdkError {
    let log = crate::recent_log();
    let tail: Vec<&String> = log.iter().rev().take(3).collect::<Vec<_>>();
    let tail: Vec<&str> = tail.into_iter().rev().map(|s| s.trim()).collect();
    DpdkError {
        errno: r.abs().max(1),
        msg: format!(
            "{what}: {}{}",
            crate::ffi::strerror(r),
            if tail.is_empty() {
                String::new()
            } else {
                format!(" (DPDK: {})", tail.join(" | "))
            }
        ),
    }
}

/// DPDK ports an [`EthPort`] holds: a second one on the same device is refused (EBUSY)
/// instead of reconfiguring it under the first.
static IN_USE: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

#[cfg(dpdk)]
thread_local! {
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Registers the calling thread with DPDK once (per-lcore mempool caches).
#[cfg(dpdk)]
#[inline]
fn register_thread() {
    REGISTERED.with(|r| {
        if !r.get() {
            // SAFETY: plain DPDK call; failure (no free lcore) only means no cache.
            unsafe { crate::ffi::bsm_thread_register() };
            r.set(true);
        }
    });
}

impl EthPort {
    /// The DPDK port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// What the device says about itself.
    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    /// Finds or probes the device (starting the EAL first if needed).
    #[cfg(not(dpdk))]
    pub fn open(_spec: &DevSpec) -> Result<EthPort, DpdkError> {
        crate::available()?;
        unreachable!()
    }

    /// Finds or probes the device (starting the EAL first if needed).
    #[cfg(dpdk)]
    pub fn open(spec: &DevSpec) -> Result<EthPort, DpdkError> {
        use crate::ffi;
        use std::ffi::CString;
        crate::ensure_eal()?;
        let by_name = |name: &str| -> Option<u16> {
            let c = CString::new(name).ok()?;
            let mut id = 0u16;
            // SAFETY: c is a valid C string, id a valid out pointer.
            (unsafe { ffi::bsm_port_by_name(c.as_ptr(), &mut id) } == 0).then_some(id)
        };
        let cstring = |s: &str| {
            CString::new(s).map_err(|_| DpdkError {
                errno: libc::EINVAL,
                msg: format!("'{s}' has a NUL byte"),
            })
        };
        let (id, attached) = match spec {
            DevSpec::PortId(id) => {
                // SAFETY: a constant.
                let max = unsafe { ffi::bsm_max_ethports() };
                if *id as u32 >= max {
                    // As BESS: an id beyond DPDK's table is EINVAL, one without a device ENODEV.
                    return Err(DpdkError {
                        errno: libc::EINVAL,
                        msg: format!("Invalid port id {id} (DPDK has at most {max} ports)"),
                    });
                }
                // SAFETY: plain DPDK call.
                if unsafe { ffi::bsm_port_valid(*id) } == 0 {
                    return Err(DpdkError {
                        errno: libc::ENODEV,
                        msg: format!(
                            "DPDK has no port {id} (ports are the devices DPDK probed at start: \
                             bind a NIC to vfio-pci and name it with pci=, or pass -a ADDR in --dpdk-args)"
                        ),
                    });
                }
                (*id, false)
            }
            DevSpec::Pci(addr) => {
                let full = if addr.matches(':').count() == 1 {
                    format!("0000:{addr}")
                } else {
                    addr.clone()
                };
                if let Some(id) = by_name(&full) {
                    (id, false)
                } else {
                    let c = cstring(&full)?;
                    // SAFETY: c is a valid C string.
                    let r = unsafe { ffi::bsm_dev_probe(c.as_ptr()) };
                    if r < 0 {
                        return Err(err(r, format!("PCI device '{full}' could not be probed (is it bound to vfio-pci?)")));
                    }
                    let id = by_name(&full).ok_or_else(|| DpdkError {
                        errno: libc::ENODEV,
                        msg: format!("PCI device '{full}' was probed but is not an ethernet port"),
                    })?;
                    (id, true)
                }
            }
            DevSpec::Vdev(devargs) => {
                let name = devargs.split(',').next().unwrap_or_default().to_string();
                if by_name(&name).is_some() {
                    return Err(DpdkError {
                        errno: libc::EEXIST,
                        msg: format!("DPDK device '{name}' exists already (another port uses it)"),
                    });
                }
                let c = cstring(devargs)?;
                // SAFETY: c is a valid C string.
                let r = unsafe { ffi::bsm_dev_probe(c.as_ptr()) };
                if r < 0 {
                    return Err(err(r, format!("vdev '{devargs}' could not be probed")));
                }
                let id = by_name(&name).ok_or_else(|| DpdkError {
                    errno: libc::ENODEV,
                    msg: format!(
                        "vdev '{devargs}' was probed but made no ethernet port named '{name}'"
                    ),
                })?;
                (id, true)
            }
        };
        {
            let mut in_use = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
            if in_use.contains(&id) {
                return Err(DpdkError {
                    errno: libc::EBUSY,
                    msg: format!("DPDK port {id} is in use by another port"),
                });
            }
            in_use.push(id);
        }
        // SAFETY: a zeroed PortInfoC is valid (plain numbers and chars).
        let mut pi: ffi::PortInfoC = unsafe { std::mem::zeroed() };
        // SAFETY: pi is a valid out pointer of the C struct's layout.
        let r = unsafe { ffi::bsm_port_info(id, &mut pi) };
        let port = EthPort {
            id,
            attached,
            zc_rx: Vec::new(),
            zc_tx: Vec::new(),
            info: PortInfo {
                driver: ffi::cstr(&pi.driver),
                name: ffi::cstr(&pi.name),
                max_rx_queues: pi.max_rx_queues,
                max_tx_queues: pi.max_tx_queues,
                rx_offload_capa: pi.rx_offload_capa,
                rss_offloads: pi.flow_type_rss_offloads,
                socket: pi.socket,
            },
        };
        if r < 0 {
            return Err(err(r, format!("port {id}: rte_eth_dev_info_get")));
        }
        Ok(port)
    }

    /// Configures the queues and offloads and starts the port.
    #[cfg(not(dpdk))]
    pub fn setup(&mut self, _s: &PortSetup, _zc: Option<ZeroCopy>) -> Result<(), DpdkError> {
        crate::available()
    }

    /// Configures the queues and offloads and starts the port.
    #[cfg(dpdk)]
    /// With `zc`, the RX queues receive into its mempools' frames and [`EthPort::tx_zc`]
    /// sends without copying.
    pub fn setup(&mut self, s: &PortSetup, zc: Option<ZeroCopy>) -> Result<(), DpdkError> {
        use crate::ffi;
        let i = &self.info;
        let dev = format!("'{}' ({})", i.name, i.driver);
        for (what, n, max) in [
            ("num_inc_q", s.rx_queues, i.max_rx_queues),
            ("num_out_q", s.tx_queues, i.max_tx_queues),
        ] {
            if n > max {
                return Err(DpdkError {
                    errno: libc::EINVAL,
                    msg: format!("{what} {n} is more than the device has: {dev} has {max}"),
                });
            }
        }
        // SAFETY: plain DPDK constants.
        let caps = unsafe {
            [
                (
                    s.vlan_strip,
                    ffi::bsm_offload_vlan_strip(),
                    "vlan_offload_rx_strip",
                ),
                (
                    s.vlan_filter,
                    ffi::bsm_offload_vlan_filter(),
                    "vlan_offload_rx_filter",
                ),
                (s.vlan_qinq, ffi::bsm_offload_qinq(), "vlan_offload_rx_qinq"),
            ]
        };
        for (on, bit, name) in caps {
            if on && i.rx_offload_capa & bit == 0 {
                return Err(DpdkError {
                    errno: libc::ENOTSUP,
                    msg: format!("{name}: {dev} has no such offload"),
                });
            }
        }
        let c = ffi::PortConfC {
            nrxq: s.rx_queues.max(1),
            ntxq: s.tx_queues.max(1),
            rxd: s.rx_desc,
            txd: s.tx_desc,
            rss: s.rss as u8,
            vlan_strip: s.vlan_strip as u8,
            vlan_filter: s.vlan_filter as u8,
            vlan_qinq: s.vlan_qinq as u8,
            loopback: s.loopback,
            mbufs: 8192,
        };
        let mut rx_pools: Vec<*mut std::ffi::c_void> = Vec::new();
        if let Some(zc) = zc {
            for (base, len) in &zc.regions {
                // SAFETY: the region is mapped memory that outlives the port.
                let r = unsafe { ffi::bsm_zc_register(*base as *mut _, *len, self.id) };
                if r < 0 {
                    return Err(err(
                        r,
                        format!("{dev}: registering Bessemer's packet memory"),
                    ));
                }
            }
            rx_pools = zc.rx.iter().map(|m| m.raw()).collect();
            rx_pools.resize(c.nrxq as usize, std::ptr::null_mut());
            self.zc_rx = zc.rx;
            self.zc_tx = zc.tx;
        }
        let mut stage: *const std::os::raw::c_char = std::ptr::null();
        let pools = if rx_pools.is_empty() {
            std::ptr::null()
        } else {
            rx_pools.as_ptr()
        };
        // SAFETY: c, pools (nrxq entries or null) and stage are valid for the call.
        let r = unsafe { ffi::bsm_port_setup(self.id, &c, pools, &mut stage) };
        if r < 0 {
            let stage = if stage.is_null() {
                String::new()
            } else {
                // SAFETY: stage points at one of the shim's static strings.
                unsafe { std::ffi::CStr::from_ptr(stage) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(err(r, format!("{dev}: {stage}")));
        }
        Ok(())
    }

    /// Receives up to `min(n, 64)` packets from queue `q`: their DPDK buffers into `mbufs`,
    /// their lengths into `lens`. Returns how many arrived; the caller must hand every one
    /// to [`EthPort::rx_copy_out`].
    #[cfg(dpdk)]
    #[inline]
    pub fn rx_burst(&self, q: u16, mbufs: &mut RxBurst, n: usize) -> usize {
        register_thread();
        let n = n.min(RX_BURST) as u16;
        // SAFETY: both arrays have RX_BURST slots.
        let k = unsafe {
            crate::ffi::bsm_rx_burst(self.id, q, mbufs.m.as_mut_ptr(), mbufs.lens.as_mut_ptr(), n)
        };
        mbufs.n = k as usize;
        k as usize
    }

    /// Copies the packets of the last [`EthPort::rx_burst`] to `dst[i]` (each with room for
    /// `mbufs.lens[i]` bytes; a null pointer drops that packet) and frees the DPDK buffers.
    #[cfg(dpdk)]
    #[inline]
    pub fn rx_copy_out(mbufs: &mut RxBurst, dst: &[*mut u8]) {
        assert!(dst.len() >= mbufs.n);
        // SAFETY: m[..n] are live mbufs of the last burst; dst[i] has room for lens[i].
        unsafe { crate::ffi::bsm_rx_copy_out(mbufs.m.as_ptr(), dst.as_ptr(), mbufs.n as u16) };
        mbufs.n = 0;
    }

    /// Whether [`EthPort::setup`] set the port up for zero copy.
    pub fn zero_copy(&self) -> bool {
        !self.zc_rx.is_empty()
    }

    /// As [`EthPort::rx_burst`], and marks the packets that arrived in Bessemer's own frames
    /// (`mbufs.descs[i]` non-null; they are the caller's now, never to be copied or freed
    /// through DPDK); the rest go through [`EthPort::rx_copy_rest`].
    #[cfg(dpdk)]
    #[inline]
    pub fn rx_burst_zc(&self, q: u16, mbufs: &mut RxBurst, n: usize) -> usize {
        register_thread();
        let n = n.min(RX_BURST) as u16;
        // SAFETY: every array has RX_BURST slots.
        let k = unsafe {
            crate::ffi::bsm_rx_burst_zc(
                self.id,
                q,
                mbufs.m.as_mut_ptr(),
                mbufs.lens.as_mut_ptr(),
                mbufs.descs.as_mut_ptr(),
                mbufs.datas.as_mut_ptr(),
                n,
            )
        };
        mbufs.n = k as usize;
        k as usize
    }

    /// After [`EthPort::rx_burst_zc`]: copies each packet that did not arrive in a Bessemer
    /// frame to `dst[i]` (null drops it) and frees its DPDK buffer; zero-copy ones are
    /// left alone.
    #[cfg(dpdk)]
    #[inline]
    pub fn rx_copy_rest(mbufs: &mut RxBurst, dst: &[*mut u8]) {
        let mut m = [std::ptr::null_mut(); RX_BURST];
        let mut d = [std::ptr::null_mut::<u8>(); RX_BURST];
        let mut k = 0;
        for (i, &to) in dst.iter().enumerate().take(mbufs.n) {
            if mbufs.descs[i].is_null() {
                m[k] = mbufs.m[i];
                d[k] = to;
                k += 1;
            }
        }
        if k > 0 {
            // SAFETY: m[..k] are live mbufs of the burst not handed over; d[i] has room.
            unsafe { crate::ffi::bsm_rx_copy_out(m.as_ptr(), d.as_ptr(), k as u16) };
        }
        mbufs.n = 0;
    }

    /// Sends packets in their own frames: first bytes (each with at least
    /// [`crate::ZC_HEADROOM`] bytes of its frame in front), lengths and descriptors. Returns
    /// how many the device took (a prefix): those belong to DPDK now and come back through
    /// the TX queue's [`crate::FrameSource::free`]; the rest are untouched.
    #[cfg(dpdk)]
    #[inline]
    pub fn tx_zc(
        &self,
        q: u16,
        datas: &[*mut u8],
        lens: &[u32],
        descs: &[*mut std::ffi::c_void],
    ) -> usize {
        register_thread();
        let n = datas.len().min(lens.len()).min(descs.len()).min(64);
        let Some(mp) = self.zc_tx.get(q as usize) else {
            return 0;
        };
        // SAFETY: the arrays hold n entries describing frames the caller owns.
        unsafe {
            crate::ffi::bsm_tx_zc(
                self.id,
                q,
                mp.raw(),
                datas.as_ptr(),
                lens.as_ptr(),
                descs.as_ptr(),
                n as u16,
            ) as usize
        }
    }

    /// Copies `src[i]` (`lens[i]` bytes) into DPDK buffers and sends them on queue `q`.
    /// Returns how many the device took (a prefix); `nombuf` counts bursts that found no
    /// buffers.
    #[cfg(dpdk)]
    #[inline]
    pub fn tx_copy(&self, q: u16, src: &[*const u8], lens: &[u32], nombuf: &mut u64) -> usize {
        register_thread();
        let n = src.len().min(lens.len()).min(64) as u16;
        // SAFETY: src holds n pointers to lens[i] readable bytes each.
        unsafe {
            crate::ffi::bsm_tx_copy(self.id, q, src.as_ptr(), lens.as_ptr(), n, nombuf) as usize
        }
    }

    /// Largest packet a DPDK buffer holds (what `tx_copy` can send).
    pub fn buffer_room() -> u32 {
        #[cfg(dpdk)]
        // SAFETY: a constant.
        return unsafe { crate::ffi::bsm_mbuf_room() };
        #[cfg(not(dpdk))]
        0
    }

    /// The device's counters.
    pub fn stats(&self) -> PortStats {
        #[cfg(dpdk)]
        {
            let mut s = crate::ffi::StatsC::default();
            // SAFETY: s is a valid out pointer of the C struct's layout.
            if unsafe { crate::ffi::bsm_stats(self.id, &mut s) } < 0 {
                return PortStats::default();
            }
            PortStats {
                ipackets: s.ipackets,
                opackets: s.opackets,
                ibytes: s.ibytes,
                obytes: s.obytes,
                imissed: s.imissed,
                ierrors: s.ierrors,
                oerrors: s.oerrors,
                rx_nombuf: s.rx_nombuf,
                q_ipackets: s.q_ipackets.to_vec(),
                q_opackets: s.q_opackets.to_vec(),
            }
        }
        #[cfg(not(dpdk))]
        PortStats::default()
    }

    /// The link's state (without waiting for autonegotiation).
    pub fn link(&self) -> LinkState {
        #[cfg(dpdk)]
        {
            let (mut speed, mut fd, mut an, mut up) = (0u32, 0, 0, 0);
            // SAFETY: valid out pointers.
            if unsafe { crate::ffi::bsm_link(self.id, &mut speed, &mut fd, &mut an, &mut up) } == 0
            {
                return LinkState {
                    speed_mbps: speed,
                    full_duplex: fd != 0,
                    autoneg: an != 0,
                    up: up != 0,
                };
            }
        }
        LinkState::default()
    }

    /// The MAC address.
    pub fn mac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        #[cfg(dpdk)]
        // SAFETY: m has 6 bytes.
        unsafe {
            crate::ffi::bsm_mac(self.id, m.as_mut_ptr());
        }
        m
    }

    /// The MTU (0 if the device does not say).
    pub fn mtu(&self) -> u32 {
        let mut m = 0u16;
        #[cfg(dpdk)]
        // SAFETY: valid out pointer.
        unsafe {
            crate::ffi::bsm_mtu(self.id, &mut m);
        }
        m as u32
    }

    /// Sets the MAC address.
    pub fn set_mac(&self, mac: [u8; 6]) -> Result<(), DpdkError> {
        #[cfg(dpdk)]
        {
            // SAFETY: mac has 6 bytes.
            let r = unsafe { crate::ffi::bsm_set_mac(self.id, mac.as_ptr()) };
            if r < 0 {
                return Err(err(
                    r,
                    format!("'{}': setting the MAC address", self.info.name),
                ));
            }
            Ok(())
        }
        #[cfg(not(dpdk))]
        {
            let _ = mac;
            crate::available()
        }
    }

    /// Sets the MTU.
    pub fn set_mtu(&self, mtu: u32) -> Result<(), DpdkError> {
        #[cfg(dpdk)]
        {
            let m = u16::try_from(mtu).map_err(|_| DpdkError {
                errno: libc::EINVAL,
                msg: format!("MTU {mtu} is out of range (at most 65535)"),
            })?;
            // SAFETY: plain DPDK call.
            let r = unsafe { crate::ffi::bsm_set_mtu(self.id, m) };
            if r < 0 {
                return Err(err(
                    r,
                    format!("'{}': setting the MTU to {mtu}", self.info.name),
                ));
            }
            Ok(())
        }
        #[cfg(not(dpdk))]
        {
            let _ = mtu;
            crate::available()
        }
    }

    /// Sets the link administratively up or down.
    pub fn set_link(&self, up: bool) -> Result<(), DpdkError> {
        #[cfg(dpdk)]
        {
            // SAFETY: plain DPDK call.
            let r = unsafe { crate::ffi::bsm_set_link(self.id, up as i32) };
            if r < 0 {
                return Err(err(
                    r,
                    format!(
                        "'{}': setting the link {}",
                        self.info.name,
                        if up { "up" } else { "down" }
                    ),
                ));
            }
            Ok(())
        }
        #[cfg(not(dpdk))]
        {
            let _ = up;
            crate::available()
        }
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        IN_USE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != self.id);
        #[cfg(dpdk)]
        {
            // SAFETY: the port is ours; its queues are released (they borrow the port).
            let r = unsafe { crate::ffi::bsm_port_close(self.id, self.attached as i32) };
            if r < 0 {
                tracing::warn!(
                    "closing DPDK port {} ({}): {}",
                    self.id,
                    self.info.name,
                    crate::ffi::strerror(r)
                );
            }
        }
        let _ = self.attached;
    }
}

/// Without DPDK no [`EthPort`] can be opened ([`EthPort::open`] answers why), so its bursts
/// are never called; they exist so the callers build the same way.
#[cfg(not(dpdk))]
#[allow(missing_docs)]
impl EthPort {
    pub fn rx_burst(&self, _q: u16, _mbufs: &mut RxBurst, _n: usize) -> usize {
        0
    }
    pub fn rx_copy_out(_mbufs: &mut RxBurst, _dst: &[*mut u8]) {}
    pub fn rx_burst_zc(&self, _q: u16, _mbufs: &mut RxBurst, _n: usize) -> usize {
        0
    }
    pub fn rx_copy_rest(_mbufs: &mut RxBurst, _dst: &[*mut u8]) {}
    pub fn tx_zc(
        &self,
        _q: u16,
        _datas: &[*mut u8],
        _lens: &[u32],
        _descs: &[*mut std::ffi::c_void],
    ) -> usize {
        0
    }
    pub fn tx_copy(&self, _q: u16, _src: &[*const u8], _lens: &[u32], _nombuf: &mut u64) -> usize {
        0
    }
}

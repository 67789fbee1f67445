//! DPDK for Bessemer's `PMDPort`: the Environment Abstraction Layer started inside the
//! daemon on first use (so a daemon that never names a DPDK device never pays for it),
//! ethdev ports probed from BESS's three ways of naming one (`port_id`, `pci`, `vdev`),
//! their queues, counters, link state and configuration, and the receive / transmit
//! bursts.
//!
//! DPDK comes from Debian's `libdpdk-dev` through pkg-config at build time. Where it was
//! absent, [`available`] says so and every call answers with that reason.
//!
//! Thread safety: the EAL starts once, under a lock. A port's control calls (stats, link,
//! configuration) are DPDK's thread-safe ethdev calls; its queues are each used by one
//! thread at a time, as DPDK requires (Bessemer's queue claims guarantee it).

// Without DPDK (cfg(not(dpdk))) the burst paths are compiled out and their helpers unused.
#![cfg_attr(not(dpdk), allow(dead_code, unused_mut))]

mod eal;
mod port;
mod zc;

pub use eal::{eal_args, ensure_eal, recent_log, set_eal_args};
pub use port::{
    DevSpec, EthPort, LinkState, PortInfo, PortSetup, PortStats, RxBurst, ZeroCopy, RX_BURST,
};
pub use zc::{zero_copy_usable, FrameSource, ZcMempool, MBUF_HEADER, ZC_HEADROOM};

/// Why a DPDK call failed: an errno and a message with DPDK's own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkError {
    /// A positive errno (EINVAL, ENODEV, ENOTSUP, ...).
    pub errno: i32,
    /// What failed and why.
    pub msg: String,
}

impl std::fmt::Display for DpdkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for DpdkError {}

/// Ok when this build has DPDK; otherwise why not (the package to install).
pub fn available() -> Result<(), DpdkError> {
    #[cfg(dpdk)]
    {
        Ok(())
    }
    #[cfg(not(dpdk))]
    {
        Err(DpdkError {
            errno: libc::ENOTSUP,
            msg: format!(
                "this bessemerd was built without DPDK ({}); install libdpdk-dev and rebuild",
                option_env!("BESSEMER_DPDK_UNAVAILABLE").unwrap_or("unknown reason")
            ),
        })
    }
}

#[cfg(dpdk)]
pub(crate) mod ffi {
    use std::os::raw::{c_char, c_int};

    #[repr(C)]
    pub struct PortInfoC {
        pub driver: [c_char; 64],
        pub name: [c_char; 64],
        pub max_rx_queues: u16,
        pub max_tx_queues: u16,
        pub rx_offload_capa: u64,
        pub flow_type_rss_offloads: u64,
        pub socket: i32,
        pub min_rx_bufsize: u32,
        pub max_rx_pktlen: u32,
    }

    #[repr(C)]
    pub struct PortConfC {
        pub nrxq: u16,
        pub ntxq: u16,
        pub rxd: u16,
        pub txd: u16,
        pub rss: u8,
        pub vlan_strip: u8,
        pub vlan_filter: u8,
        pub vlan_qinq: u8,
        pub loopback: u32,
        pub mbufs: u32,
    }

    pub const QUEUE_STAT_CNTRS: usize = 16;

    #[repr(C)]
    #[derive(Default)]
    pub struct StatsC {
        pub ipackets: u64,
        pub opackets: u64,
        pub ibytes: u64,
        pub obytes: u64,
        pub imissed: u64,
        pub ierrors: u64,
        pub oerrors: u64,
        pub rx_nombuf: u64,
        pub q_ipackets: [u64; QUEUE_STAT_CNTRS],
        pub q_opackets: [u64; QUEUE_STAT_CNTRS],
        pub q_errors: [u64; QUEUE_STAT_CNTRS],
    }

    extern "C" {
        pub fn bsm_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn bsm_thread_register() -> c_int;
        pub fn bsm_strerror(e: c_int) -> *const c_char;
        pub fn bsm_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
        pub fn bsm_dev_probe(devargs: *const c_char) -> c_int;
        pub fn bsm_port_valid(port: u16) -> c_int;
        pub fn bsm_max_ethports() -> u32;
        pub fn bsm_port_info(port: u16, out: *mut PortInfoC) -> c_int;
        pub fn bsm_offload_vlan_strip() -> u64;
        pub fn bsm_offload_vlan_filter() -> u64;
        pub fn bsm_offload_qinq() -> u64;
        pub fn bsm_port_setup(
            port: u16,
            c: *const PortConfC,
            rx_pools: *const *mut std::ffi::c_void,
            stage: *mut *const c_char,
        ) -> c_int;
        pub fn bsm_zc_usable() -> c_int;
        pub fn bsm_zc_mempool(
            name: *const c_char,
            ctx: *mut std::ffi::c_void,
            frame_size: u32,
            n: u32,
            cache: u32,
        ) -> *mut std::ffi::c_void;
        pub fn bsm_mempool_free(mp: *mut std::ffi::c_void);
        pub fn bsm_zc_register(addr: *mut std::ffi::c_void, len: usize, port: u16) -> c_int;
        pub fn bsm_rx_burst_zc(
            port: u16,
            q: u16,
            m: *mut *mut std::ffi::c_void,
            lens: *mut u32,
            descs: *mut *mut std::ffi::c_void,
            datas: *mut *mut u8,
            n: u16,
        ) -> u16;
        pub fn bsm_tx_zc(
            port: u16,
            q: u16,
            mp: *mut std::ffi::c_void,
            datas: *const *mut u8,
            lens: *const u32,
            descs: *const *mut std::ffi::c_void,
            n: u16,
        ) -> u16;
        pub fn bsm_port_close(port: u16, remove: c_int) -> c_int;
        pub fn bsm_rx_burst(
            port: u16,
            q: u16,
            m: *mut *mut std::ffi::c_void,
            lens: *mut u32,
            n: u16,
        ) -> u16;
        pub fn bsm_rx_copy_out(m: *const *mut std::ffi::c_void, dst: *const *mut u8, k: u16);
        pub fn bsm_tx_copy(
            port: u16,
            q: u16,
            src: *const *const u8,
            lens: *const u32,
            n: u16,
            nombuf: *mut u64,
        ) -> u16;
        pub fn bsm_mbuf_room() -> u32;
        pub fn bsm_stats(port: u16, out: *mut StatsC) -> c_int;
        pub fn bsm_link(
            port: u16,
            speed: *mut u32,
            full_duplex: *mut c_int,
            autoneg: *mut c_int,
            up: *mut c_int,
        ) -> c_int;
        pub fn bsm_mac(port: u16, mac: *mut u8) -> c_int;
        pub fn bsm_set_mac(port: u16, mac: *const u8) -> c_int;
        pub fn bsm_mtu(port: u16, mtu: *mut u16) -> c_int;
        pub fn bsm_set_mtu(port: u16, mtu: u16) -> c_int;
        pub fn bsm_set_link(port: u16, up: c_int) -> c_int;
    }

    /// DPDK's words for a (negative or positive) errno.
    pub fn strerror(e: c_int) -> String {
        // SAFETY: rte_strerror returns a pointer to a static or thread-local string.
        unsafe { std::ffi::CStr::from_ptr(bsm_strerror(e)) }
            .to_string_lossy()
            .into_owned()
    }

    /// A NUL-terminated C char array as a String.
    pub fn cstr(a: &[c_char]) -> String {
        let bytes: Vec<u8> = a
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

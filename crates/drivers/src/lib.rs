//! Bessemer port drivers: one file per driver, each a static [`PortDriver`], registered in
//! [`drivers`]. A driver turns its argument message into a [`bessemer_core::port::Port`]
//! whose queues the I/O modules (PortInc, PortOut, QueueInc, QueueOut) own.

pub mod af_packet_port;
pub mod af_xdp_port;
pub mod ifctl;
pub mod memif;
pub mod memif_port;
pub mod partial_csum;
pub mod pcap_file_port;
pub mod pcap_port;
pub mod pmd_port;
pub mod slice_port;
pub mod unix_socket_port;
pub mod vnet;
pub mod vport;
pub mod xdp_desc;
pub mod xdp_offload;

// The bpf(2) layer and the ELF loader, in their own crate (`bessemer-bpf`), which the planner
// uses too.
pub use bessemer_bpf::{bpf, bpf_elf, testbed_prog};
/// Network namespaces (in the core, which the planner shares without the drivers).
pub use bessemer_core::netns;

use bessemer_core::port::PortDriver;

/// Every driver, sorted by name (adding a driver = one file + one line here).
pub fn drivers() -> &'static [&'static PortDriver] {
    static DRIVERS: &[&PortDriver] = &[
        &af_packet_port::DRIVER,
        &af_xdp_port::DRIVER,
        &memif_port::DRIVER,
        &pcap_port::DRIVER,
        &pmd_port::DRIVER,
        &pcap_file_port::DRIVER,
        &slice_port::DRIVER,
        &unix_socket_port::DRIVER,
        &vport::DRIVER,
    ];
    DRIVERS
}

/// A locally administered MAC address for a port without hardware: `02:<tag>:` and four
/// bytes of an FNV-1a hash of the port's name (stable across restarts, distinct per name).
pub(crate) fn name_mac(tag: u8, name: &str) -> [u8; 6] {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut mac = [0x02, tag, 0, 0, 0, 0];
    mac[2..].copy_from_slice(&h.to_be_bytes()[..4]);
    mac
}

/// An error binding a socket path, with the errno a BESS client expects (EEXIST for a file
/// that is not a socket, EADDRINUSE for a live listener), naming the argument.
pub(crate) fn socket_path_error(arg: &str, e: std::io::Error) -> bessemer_core::Error {
    let code = e.raw_os_error().unwrap_or(match e.kind() {
        std::io::ErrorKind::AlreadyExists => libc::EEXIST,
        std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
        _ => libc::EINVAL,
    });
    bessemer_core::Error::new(code, format!("{arg}: {e}"))
}

/// Looks up a driver by name.
pub fn find(name: &str) -> Option<&'static PortDriver> {
    drivers().iter().copied().find(|d| d.name == name)
}

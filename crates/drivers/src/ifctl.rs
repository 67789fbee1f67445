//! Interface control for the drivers on Linux interfaces: `ifreq` ioctls (flags, MAC, MTU,
//! admin up/down), link status from the flags and ethtool, ethtool get/set helpers, and
//! socket options.
//!
//! An ioctl acts in the network namespace of the socket it goes through, so a driver passes
//! a control socket it made inside the interface's namespace (see [`crate::netns`]).
//! Calls return the bare OS error; the driver words the error, naming its interface.

use std::io;
use std::os::fd::AsRawFd;

use bessemer_core::port::{LinkStatus, PortConf};
use bessemer_core::{Error, Result};

// ---- ifreq ioctls ----

/// An all-zero `ifreq` naming interface `name` (cut to `IFNAMSIZ - 1` bytes).
pub fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    r
}

/// Runs ioctl `req` with `r` (an `ifreq` the request reads and writes) on `fd`.
pub fn ioctl(fd: &impl AsRawFd, req: libc::Ioctl, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: r is a valid ifreq for the interface requests callers make.
    if unsafe { libc::ioctl(fd.as_raw_fd(), req as _, r as *mut libc::ifreq) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The interface flags (`IFF_*`, SIOCGIFFLAGS).
pub fn flags(fd: &impl AsRawFd, name: &str) -> io::Result<i32> {
    let mut r = ifreq(name);
    ioctl(fd, libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags.
    Ok(unsafe { r.ifr_ifru.ifru_flags } as u16 as i32)
}

/// Sets the interface flags (SIOCSIFFLAGS).
pub fn set_flags(fd: &impl AsRawFd, name: &str, flags: i32) -> io::Result<()> {
    let mut r = ifreq(name);
    r.ifr_ifru.ifru_flags = flags as libc::c_short;
    ioctl(fd, libc::SIOCSIFFLAGS, &mut r)
}

/// `flags` with IFF_UP set (`up`) or cleared.
pub fn with_up(flags: i32, up: bool) -> i32 {
    if up {
        flags | libc::IFF_UP
    } else {
        flags & !libc::IFF_UP
    }
}

/// Whether `flags` say administratively up (IFF_UP).
pub fn is_up(flags: i32) -> bool {
    flags & libc::IFF_UP != 0
}

/// Whether `flags` say the link is up: administratively up (IFF_UP) with carrier (IFF_RUNNING).
pub fn is_link_up(flags: i32) -> bool {
    flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0
}

/// The interface's MAC address (SIOCGIFHWADDR).
pub fn mac(fd: &impl AsRawFd, name: &str) -> io::Result<[u8; 6]> {
    let mut r = ifreq(name);
    ioctl(fd, libc::SIOCGIFHWADDR, &mut r)?;
    // SAFETY: SIOCGIFHWADDR filled ifru_hwaddr.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// Sets the interface's (Ethernet) MAC address (SIOCSIFHWADDR).
pub fn set_mac(fd: &impl AsRawFd, name: &str, mac: [u8; 6]) -> io::Result<()> {
    let mut r = ifreq(name);
    // SAFETY: plain data; all-zero is a valid sockaddr.
    let mut sa: libc::sockaddr = unsafe { std::mem::zeroed() };
    sa.sa_family = libc::ARPHRD_ETHER;
    for (d, s) in sa.sa_data.iter_mut().zip(mac) {
        *d = s as libc::c_char;
    }
    r.ifr_ifru.ifru_hwaddr = sa;
    ioctl(fd, libc::SIOCSIFHWADDR, &mut r)
}

/// The interface's MTU (SIOCGIFMTU).
pub fn mtu(fd: &impl AsRawFd, name: &str) -> io::Result<u32> {
    let mut r = ifreq(name);
    ioctl(fd, libc::SIOCGIFMTU, &mut r)?;
    // SAFETY: SIOCGIFMTU filled ifru_mtu.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as u32)
}

/// Sets the interface's MTU (SIOCSIFMTU).
pub fn set_mtu(fd: &impl AsRawFd, name: &str, mtu: u32) -> io::Result<()> {
    let mut r = ifreq(name);
    r.ifr_ifru.ifru_mtu = mtu as i32;
    ioctl(fd, libc::SIOCSIFMTU, &mut r)
}

// ---- port configuration and link status ----

/// The interface's MAC, MTU and admin state; what cannot be read stays zero (false).
pub fn conf(fd: &impl AsRawFd, name: &str) -> PortConf {
    PortConf {
        mac_addr: mac(fd, name).unwrap_or_default(),
        mtu: mtu(fd, name).unwrap_or(0),
        admin_up: flags(fd, name).is_ok_and(is_up),
    }
}

/// One step of [`set_conf`], named to the caller's error function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Setting the MTU (the new value).
    Mtu(u32),
    /// Setting the MAC address.
    Mac,
    /// Reading the flags before changing the admin state.
    ReadFlags,
    /// Setting the admin state (up/down).
    AdminUp,
}

/// Changes what differs between `new` and `old` (the current [`conf`]): the MTU, then the MAC,
/// then the admin state; a zero MTU and an all-zero MAC mean "leave as is". The first failure
/// is `fail(step, OS error)`.
pub fn set_conf(
    fd: &impl AsRawFd,
    name: &str,
    old: &PortConf,
    new: &PortConf,
    fail: impl Fn(Step, io::Error) -> Error,
) -> Result<()> {
    if new.mtu != 0 && new.mtu != old.mtu {
        set_mtu(fd, name, new.mtu).map_err(|e| fail(Step::Mtu(new.mtu), e))?;
    }
    if new.mac_addr != [0; 6] && new.mac_addr != old.mac_addr {
        set_mac(fd, name, new.mac_addr).map_err(|e| fail(Step::Mac, e))?;
    }
    if new.admin_up != old.admin_up {
        let fl = flags(fd, name).map_err(|e| fail(Step::ReadFlags, e))?;
        set_flags(fd, name, with_up(fl, new.admin_up)).map_err(|e| fail(Step::AdminUp, e))?;
    }
    Ok(())
}

/// The link status: up from the flags ([`is_link_up`]; down if they cannot be read), speed,
/// duplex and autoneg from ETHTOOL_GSET (zero/false if it fails; unknown speed is 0).
pub fn link_status(fd: &impl AsRawFd, name: &str) -> LinkStatus {
    let mut st = LinkStatus {
        link_up: flags(fd, name).is_ok_and(is_link_up),
        ..LinkStatus::default()
    };
    let mut c = EthtoolCmd {
        cmd: ETHTOOL_GSET,
        ..EthtoolCmd::default()
    };
    if ethtool(fd, name, &mut c).is_ok() {
        let speed = (c.speed as u32) | ((c.speed_hi as u32) << 16);
        // SPEED_UNKNOWN (-1) in 32 bits, or in the 16-bit field of old drivers.
        if speed != u32::MAX && speed != 0xffff {
            st.speed_mbps = speed;
        }
        st.full_duplex = c.duplex == 1;
        st.autoneg = c.autoneg == 1;
    }
    st
}

// ---- ethtool ----

/// ETHTOOL_GSET: read the legacy link settings ([`EthtoolCmd`]).
pub const ETHTOOL_GSET: u32 = 0x1;
/// ETHTOOL_GCHANNELS: read the queue (channel) counts.
pub const ETHTOOL_GCHANNELS: u32 = 0x3c;
/// ETHTOOL_GFLAGS: read the ETH_FLAG_* offload flags.
pub const ETHTOOL_GFLAGS: u32 = 0x25;
/// ETHTOOL_SFLAGS: set the ETH_FLAG_* offload flags.
pub const ETHTOOL_SFLAGS: u32 = 0x26;
/// ETHTOOL_GGRO: read whether GRO is on.
pub const ETHTOOL_GGRO: u32 = 0x2b;
/// ETHTOOL_SGRO: turn GRO on or off.
pub const ETHTOOL_SGRO: u32 = 0x2c;
/// ETH_FLAG_LRO: large receive offload, in the ETHTOOL_GFLAGS value.
pub const ETH_FLAG_LRO: u32 = 1 << 15;

/// `struct ethtool_cmd`, ETHTOOL_GSET's answer (legacy, but every driver still serves it).
#[repr(C)]
#[derive(Default)]
pub struct EthtoolCmd {
    /// The command (ETHTOOL_GSET).
    pub cmd: u32,
    /// Supported features.
    pub supported: u32,
    /// Advertised features.
    pub advertising: u32,
    /// Speed in Mbit/s, low 16 bits.
    pub speed: u16,
    /// DUPLEX_HALF (0) or DUPLEX_FULL (1).
    pub duplex: u8,
    /// Connector type.
    pub port: u8,
    /// PHY address.
    pub phy_address: u8,
    /// Transceiver type.
    pub transceiver: u8,
    /// AUTONEG_DISABLE (0) or AUTONEG_ENABLE (1).
    pub autoneg: u8,
    /// MDIO protocols supported.
    pub mdio_support: u8,
    /// Unused.
    pub maxtxpkt: u32,
    /// Unused.
    pub maxrxpkt: u32,
    /// Speed in Mbit/s, high 16 bits.
    pub speed_hi: u16,
    /// MDI(-X) status.
    pub eth_tp_mdix: u8,
    /// MDI(-X) control.
    pub eth_tp_mdix_ctrl: u8,
    /// Link partner's advertised features.
    pub lp_advertising: u32,
    /// Reserved.
    pub reserved: [u32; 2],
}

/// `struct ethtool_value`: a command and one 32-bit value.
#[repr(C)]
#[derive(Default)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Runs SIOCETHTOOL on interface `name` with `data`, an ethtool struct starting with its
/// command word.
pub fn ethtool<T>(fd: &impl AsRawFd, name: &str, data: &mut T) -> io::Result<()> {
    let mut r = ifreq(name);
    r.ifr_ifru.ifru_data = data as *mut T as *mut libc::c_char;
    ioctl(fd, libc::SIOCETHTOOL, &mut r)
}

/// The value an ethtool get command (`struct ethtool_value`) answers, if it succeeds.
pub fn ethtool_get(fd: &impl AsRawFd, name: &str, cmd: u32) -> Option<u32> {
    let mut v = EthtoolValue { cmd, data: 0 };
    ethtool(fd, name, &mut v).ok().map(|_| v.data)
}

/// Runs an ethtool set command with value `data`; true if it succeeded.
pub fn ethtool_set(fd: &impl AsRawFd, name: &str, cmd: u32, data: u32) -> bool {
    let mut v = EthtoolValue { cmd, data };
    ethtool(fd, name, &mut v).is_ok()
}

/// ETHTOOL_GDRVINFO: read the driver's name and version.
pub const ETHTOOL_GDRVINFO: u32 = 0x3;

/// `struct ethtool_drvinfo`, ETHTOOL_GDRVINFO's answer.
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    rest: [u8; 160],
}

/// The name of the interface's driver ("veth", "mlx5_core", ...), if it says.
pub fn driver_name(fd: &impl AsRawFd, name: &str) -> Option<String> {
    let mut d = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 160],
    };
    ethtool(fd, name, &mut d).ok()?;
    let end = d.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&d.driver[..end]).into_owned())
}

// ---- socket options ----

pub use bessemer_core::sockopt::{getsockopt, setsockopt};

//! Bessemer port drivers: one file per driver, each a static [`PortDriver`], registered in
//! [`drivers`]. A driver turns its argument message into a [`bessemer_core::port::Port`]
//! whose queues the I/O modules (PortInc, PortOut, QueueInc, QueueOut) own.

pub mod af_xdp_port;
pub mod netns;

use bessemer_core::port::PortDriver;

/// Every driver, sorted by name (adding a driver = one file + one line here).
pub fn drivers() -> &'static [&'static PortDriver] {
    static DRIVERS: &[&PortDriver] = &[&af_xdp_port::DRIVER];
    DRIVERS
}

/// Looks up a driver by name.
pub fn find(name: &str) -> Option<&'static PortDriver> {
    drivers().iter().copied().find(|d| d.name == name)
}

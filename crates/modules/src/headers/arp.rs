//! ARP (Ethernet/IPv4): field offsets and the packet view.

use super::*;

/// Hardware type.
pub const HTYPE: usize = 0;
/// Protocol type.
pub const PTYPE: usize = 2;
/// Hardware address length.
pub const HLEN: usize = 4;
/// Protocol address length.
pub const PLEN: usize = 5;
/// Operation.
pub const OPER: usize = 6;
/// Sender hardware address.
pub const SHA: usize = 8;
/// Sender protocol address.
pub const SPA: usize = 14;
/// Target hardware address.
pub const THA: usize = 18;
/// Target protocol address.
pub const TPA: usize = 24;
/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;
/// Operation code of a request.
pub const OPER_REQUEST: u16 = 1;
/// Operation code of a reply.
pub const OPER_REPLY: u16 = 2;

/// Why a buffer is not an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpError {
    /// Shorter than the ARP header, or than the addresses its lengths announce.
    Truncated,
    /// Not Ethernet hardware addresses with IPv4 protocol addresses.
    Unsupported,
}

/// An Ethernet/IPv4 ARP packet checked once by [`ArpView::new_checked`].
#[derive(Clone, Copy, Debug)]
pub struct ArpView<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpView<T> {
    /// Checks that `buf` holds the fixed ARP header and the addresses its lengths announce
    /// (else `Truncated`), then that those are Ethernet and IPv4 addresses (else
    /// `Unsupported`).
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, ArpError> {
        let b = buf.as_ref();
        if b.len() < arp::SHA {
            return Err(ArpError::Truncated);
        }
        let (hl, pl) = (b[arp::HLEN] as usize, b[arp::PLEN] as usize);
        if b.len() < arp::SHA + 2 * (hl + pl) {
            return Err(ArpError::Truncated);
        }
        if rd16(b, arp::HTYPE) != 1 || rd16(b, arp::PTYPE) != ETHERTYPE_IPV4 || hl != 6 || pl != 4 {
            return Err(ArpError::Unsupported);
        }
        Ok(ArpView { buf })
    }
}

fields!(ArpView {
    /// Operation (1 request, 2 reply).
    operation, set_operation: u16 = arp::OPER;
    /// Sender hardware address.
    sha, set_sha: [u8; 6] = arp::SHA;
    /// Sender protocol address.
    spa, set_spa: [u8; 4] = arp::SPA;
    /// Target hardware address.
    tha, set_tha: [u8; 6] = arp::THA;
    /// Target protocol address.
    tpa, set_tpa: [u8; 4] = arp::TPA;
});

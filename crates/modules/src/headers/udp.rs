//! UDP: field offsets and the header view, and the ports view TCP, UDP and SCTP share.

use super::*;

/// Source port.
pub const SRC_PORT: usize = 0;
/// Destination port.
pub const DST_PORT: usize = 2;
/// Length (header + payload).
pub const LEN: usize = 4;
/// Checksum.
pub const CSUM: usize = 6;
/// Header length.
pub const HEADER_LEN: usize = 8;

min_len_view!(
    /// The ports shared by TCP, UDP and SCTP headers (their first 4 bytes), length checked
    /// once by [`PortsView::new_checked`].
    PortsView,
    4,
    "L4 ports"
);

fields!(PortsView {
    /// Source port.
    src_port, set_src_port: u16 = udp::SRC_PORT;
    /// Destination port.
    dst_port, set_dst_port: u16 = udp::DST_PORT;
});

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortsView<T> {
    /// Swaps the source and destination ports (the checksum stays valid).
    #[inline]
    pub fn swap_ports(&mut self) {
        let (sp, dp) = self.buf.as_mut()[..4].split_at_mut(2);
        sp.swap_with_slice(dp);
    }
}

min_len_view!(
    /// A UDP datagram whose header length (8 bytes) was checked once by
    /// [`UdpView::new_checked`].
    UdpView,
    udp::HEADER_LEN,
    "UDP header"
);

fields!(UdpView {
    /// Source port.
    src_port, set_src_port: u16 = udp::SRC_PORT;
    /// Destination port.
    dst_port, set_dst_port: u16 = udp::DST_PORT;
    /// Length field (header + payload).
    length, set_length: u16 = udp::LEN;
    /// Checksum field.
    checksum, set_checksum: u16 = udp::CSUM;
});

impl<T: AsRef<[u8]>> UdpView<T> {
    /// What follows the header, to the end of the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[udp::HEADER_LEN..]
    }
    /// True if the length field is at least 8 and within the buffer.
    #[inline]
    pub fn length_ok(&self) -> bool {
        let len = self.length() as usize;
        (udp::HEADER_LEN..=self.buf.as_ref().len()).contains(&len)
    }
    /// True if the checksum over the datagram as its length field says, with the pseudo
    /// header sum `pseudo` (addresses and protocol), verifies; false if the length field is
    /// not [`length_ok`](Self::length_ok). A zero checksum (none computed) is not special here.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        if !self.length_ok() {
            return false;
        }
        let len = self.length() as usize;
        crate::checksum::verify_l4(pseudo + len as u64, &self.buf.as_ref()[..len])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpView<T> {
    /// Computes the checksum over the datagram as its length field says, with the pseudo
    /// header sum `pseudo` (addresses and protocol, see [`crate::checksum::pseudo_v4`]), and
    /// writes it (0 sent as 0xffff); false (nothing written) if the length field is not
    /// [`length_ok`](Self::length_ok).
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u64) -> bool {
        if !self.length_ok() {
            return false;
        }
        let len = self.length() as usize;
        let pseudo = pseudo + len as u64;
        let seg = &mut self.buf.as_mut()[..len];
        let c = crate::checksum::udp_wire(crate::checksum::l4(pseudo, seg, udp::CSUM));
        wr16(seg, udp::CSUM, c);
        true
    }
    /// Adds a checksum `increment` to the checksum (a zero checksum, none computed, stays
    /// zero; see [`crate::checksum::apply_l4_at`]).
    #[inline]
    pub fn apply_checksum_increment(&mut self, increment: u64) {
        let p = crate::checksum::PROTO_UDP;
        crate::checksum::apply_l4_at(self.buf.as_mut(), udp::CSUM, p, increment);
    }
}

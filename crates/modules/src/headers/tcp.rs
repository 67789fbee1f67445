//! TCP: field offsets and the header view.

use super::*;

/// Sequence number.
pub const SEQ: usize = 4;
/// Acknowledgment number.
pub const ACK: usize = 8;
/// Data offset (high nibble, in 32-bit words).
pub const DATA_OFF: usize = 12;
/// Flags.
pub const FLAGS: usize = 13;
/// Window.
pub const WINDOW: usize = 14;
/// Checksum.
pub const CSUM: usize = 16;
/// Header length without options.
pub const HEADER_LEN: usize = 20;

min_len_view!(
    /// A TCP segment (the whole buffer) whose header length without options (20 bytes) was
    /// checked once by [`TcpView::new_checked`].
    TcpView,
    tcp::HEADER_LEN,
    "TCP segment"
);

fields!(TcpView {
    /// Source port.
    src_port, set_src_port: u16 = udp::SRC_PORT;
    /// Destination port.
    dst_port, set_dst_port: u16 = udp::DST_PORT;
    /// Sequence number.
    seq_number, set_seq_number: u32 = tcp::SEQ;
    /// Acknowledgment number.
    ack_number, set_ack_number: u32 = tcp::ACK;
    /// The flags byte (CWR, ECE, URG, ACK, PSH, RST, SYN, FIN).
    flags, set_flags: u8 = tcp::FLAGS;
    /// Checksum field.
    checksum, set_checksum: u16 = tcp::CSUM;
});

impl<T: AsRef<[u8]>> TcpView<T> {
    /// Header length from the data offset field (options included; below 20 for a bad
    /// header).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[tcp::DATA_OFF] >> 4) as usize * 4
    }
    /// What follows the header and its options, or None if the data offset is below 5 or
    /// past the buffer.
    #[inline]
    pub fn payload(&self) -> Option<&[u8]> {
        payload_after(self.buf.as_ref(), self.header_len())
    }
    /// True if the checksum over the whole buffer (the segment), with the pseudo header sum
    /// `pseudo` (addresses and protocol), verifies.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        let len = self.buf.as_ref().len();
        let pseudo = pseudo + (len >> 16) as u64 + (len & 0xffff) as u64;
        crate::checksum::verify_l4(pseudo, self.buf.as_ref())
    }
}

/// The bytes of a TCP segment `b` after its header of `hl` bytes, None for a header below 20
/// bytes or past `b`.
#[inline]
pub(super) fn payload_after(b: &[u8], hl: usize) -> Option<&[u8]> {
    if hl < tcp::HEADER_LEN {
        return None;
    }
    b.get(hl..)
}

impl<'a> TcpView<&'a [u8]> {
    /// [`payload`](Self::payload), borrowed for as long as the buffer.
    #[inline]
    pub fn into_payload(self) -> Option<&'a [u8]> {
        payload_after(self.buf, self.header_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpView<T> {
    /// Sets the data offset to `len` bytes (a multiple of 4), the reserved bits to zero.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buf.as_mut()[tcp::DATA_OFF] = ((len / 4) as u8) << 4;
    }
    /// Computes the checksum over the whole buffer (the segment) with the pseudo header sum
    /// `pseudo` (addresses and protocol, see [`crate::checksum::pseudo_v4`]) and writes it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let len = self.buf.as_ref().len();
        let pseudo = pseudo + (len >> 16) as u64 + (len & 0xffff) as u64;
        let c = crate::checksum::l4(pseudo, self.buf.as_ref(), tcp::CSUM);
        self.set_checksum(c);
    }
    /// Adds a checksum `increment` to the checksum.
    #[inline]
    pub fn apply_checksum_increment(&mut self, increment: u64) {
        let p = crate::checksum::PROTO_TCP;
        crate::checksum::apply_l4_at(self.buf.as_mut(), tcp::CSUM, p, increment);
    }
}

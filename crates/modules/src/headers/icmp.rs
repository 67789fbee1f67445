//! ICMP: field offsets and the header view.

use super::*;

/// Type.
pub const TYPE: usize = 0;
/// Checksum.
pub const CSUM: usize = 2;
/// Identifier (query messages).
pub const IDENT: usize = 4;
/// Header length of a query message.
pub const HEADER_LEN: usize = 8;

min_len_view!(
    /// An ICMP message whose 8-byte header was checked once by [`IcmpView::new_checked`].
    IcmpView,
    icmp::HEADER_LEN,
    "ICMP header"
);

fields!(IcmpView {
    /// Type.
    msg_type, set_msg_type: u8 = icmp::TYPE;
    /// Checksum field.
    checksum, set_checksum: u16 = icmp::CSUM;
    /// Identifier (of a query message).
    ident, set_ident: u16 = icmp::IDENT;
});

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpView<T> {
    /// Sets the identifier, updating the checksum incrementally (ICMP has no pseudo header).
    #[inline]
    pub fn rewrite_ident(&mut self, id: u16) {
        let c = crate::checksum::update16(self.checksum(), self.ident(), id);
        self.set_ident(id);
        self.set_checksum(c);
    }
}

//! VXLAN: field offsets and the header view.

use super::*;

/// Flags (the I flag: the VNI is valid).
pub const FLAGS: usize = 0;
/// VNI (24 bits) followed by a reserved byte.
pub const VNI: usize = 4;
/// Header length.
pub const HEADER_LEN: usize = 8;
/// The I flag.
pub const FLAG_I: u8 = 0x08;

min_len_view!(
    /// A VXLAN header whose length (8 bytes) was checked once by [`VxlanView::new_checked`].
    VxlanView,
    vxlan::HEADER_LEN,
    "VXLAN header"
);

fields!(VxlanView {
    /// The flags byte.
    flags, set_flags: u8 = vxlan::FLAGS;
});

impl<T: AsRef<[u8]>> VxlanView<T> {
    /// The 24-bit VNI.
    #[inline]
    pub fn vni(&self) -> u32 {
        u32::get(self.buf.as_ref(), vxlan::VNI) >> 8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanView<T> {
    /// Writes a header with the I flag set, reserved fields zero and `vni`'s low 24 bits.
    #[inline]
    pub fn fill(&mut self, vni: u32) {
        let b = self.buf.as_mut();
        b[..vxlan::HEADER_LEN].fill(0);
        b[vxlan::FLAGS] = vxlan::FLAG_I;
        (vni << 8).put(b, vxlan::VNI);
    }
}

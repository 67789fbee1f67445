//! Ethernet: field offsets, the header view, VLAN tags and the frame-level helpers (finding
//! the L3 header behind tags, removing and pushing tags).

use super::*;
use bessemer_core::Packet;

/// Destination MAC address.
pub const DST: usize = 0;
/// Source MAC address.
pub const SRC: usize = 6;
/// EtherType (or the TPID of an outer VLAN tag).
pub const TYPE: usize = super::ETH_TYPE_OFF;

min_len_view!(
    /// An Ethernet frame (untagged header: MAC addresses and EtherType) whose length was
    /// checked once, by [`EthernetView::new_checked`]; its accessors cannot read out of
    /// bounds.
    EthernetView,
    ETH_LEN,
    "Ethernet header"
);

fields!(EthernetView {
    /// Destination MAC address.
    dst, set_dst: [u8; 6] = eth::DST;
    /// Source MAC address.
    src, set_src: [u8; 6] = eth::SRC;
    /// EtherType (or the TPID of an outer VLAN tag).
    ethertype, set_ethertype: u16 = eth::TYPE;
});

impl<T: AsRef<[u8]>> EthernetView<T> {
    /// Both MAC addresses (destination then source, 12 bytes).
    #[inline]
    pub fn addrs(&self) -> &[u8] {
        &self.buf.as_ref()[eth::DST..eth::TYPE]
    }
    /// What follows the Ethernet header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETH_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetView<T> {
    /// Swaps the source and destination MAC addresses.
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (dst, rest) = self.buf.as_mut().split_at_mut(eth::SRC);
        dst.swap_with_slice(&mut rest[..6]);
    }
    /// What follows the Ethernet header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ETH_LEN..]
    }
}

/// Where the L3 header starts after the VLAN tags BESS's checksum modules skip: at most one
/// 802.1ad tag, which must be followed by one 802.1Q tag, or a single 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// The L3 header's offset and EtherType.
    At(usize, u16),
    /// The frame ends inside the Ethernet header or a tag.
    TooShort,
    /// A tag stack BESS does not look into (802.1ad not followed by 802.1Q).
    OtherTags,
}

/// Finds the L3 header of a frame that may carry VLAN tags (see [`L3`]).
#[inline]
pub fn l3_after_tags(d: &[u8]) -> L3 {
    let Some(mut t) = ethertype(d) else {
        return L3::TooShort;
    };
    let mut off = ETH_LEN;
    let read = |off: usize| {
        d.get(off + 2..off + 4)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    if t == ETHERTYPE_QINQ {
        let Some(inner) = read(off) else {
            return L3::TooShort;
        };
        off += VLAN_LEN;
        if inner != ETHERTYPE_VLAN {
            return L3::OtherTags;
        }
        t = inner;
    }
    if t == ETHERTYPE_VLAN {
        let Some(inner) = read(off) else {
            return L3::TooShort;
        };
        off += VLAN_LEN;
        t = inner;
    }
    L3::At(off, t)
}

/// The outer VLAN tag of a frame, as VLANPop and VLANSplit see it: an 802.1Q or 802.1ad TPID
/// right after the MAC addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterTag {
    /// No tag: the EtherType is neither 802.1Q nor 802.1ad.
    Untagged,
    /// A tag with this TCI (PCP, DEI, VID), followed by at least the inner EtherType.
    Tagged(u16),
    /// Shorter than an Ethernet header, or a tag without its TCI and the inner EtherType.
    TooShort,
}

/// Reads the outer VLAN tag of `d` (see [`OuterTag`]).
#[inline]
pub fn outer_tag(d: &[u8]) -> OuterTag {
    match ethertype(d) {
        None => OuterTag::TooShort,
        Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ) if d.len() < ETH_LEN + VLAN_LEN => OuterTag::TooShort,
        Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ) => OuterTag::Tagged(rd16(d, ETH_LEN)),
        Some(_) => OuterTag::Untagged,
    }
}

/// Removes the outer VLAN tag of `p` (which [`outer_tag`] found `Tagged`), moving the MAC
/// addresses up over it.
#[inline]
pub fn strip_outer_tag(p: &mut Packet) {
    let ok = remove_after_macs(p, VLAN_LEN, None);
    debug_assert!(ok, "outer_tag checked the length");
}

/// Removes the `n` bytes that follow the MAC addresses of `p` (a VLAN tag, an MPLS label
/// with the EtherType before it) by moving the addresses up over them, then sets the
/// shortened frame's EtherType to `ethertype` if given (else it is the 2 bytes that followed
/// the removed ones). False, with `p` unchanged, if `p` is shorter than an Ethernet header
/// and `n` more bytes.
#[inline]
pub fn remove_after_macs(p: &mut Packet, n: usize, ethertype: Option<u16>) -> bool {
    if p.len() < ETH_LEN + n {
        return false;
    }
    p.data_mut().copy_within(..eth::TYPE, n);
    let ok = p.adj(n);
    debug_assert!(ok, "the length was checked");
    if let Some(t) = ethertype {
        wr16(p.data_mut(), eth::TYPE, t);
    }
    true
}

/// Inserts a VLAN tag (`tpid`, then `tci`) after the MAC addresses of `p`, which holds an
/// Ethernet header (callers check it with [`EthernetView`]). False, with `p` unchanged, if
/// `p` has no headroom for it.
#[inline]
pub fn push_tag(p: &mut Packet, tpid: u16, tci: u16) -> bool {
    debug_assert!(p.len() >= ETH_LEN, "callers check the Ethernet header");
    if p.prepend(VLAN_LEN).is_none() {
        return false;
    }
    let d = p.data_mut();
    d.copy_within(VLAN_LEN..VLAN_LEN + eth::TYPE, 0);
    wr16(d, eth::TYPE, tpid);
    wr16(d, ETH_LEN, tci);
    true
}

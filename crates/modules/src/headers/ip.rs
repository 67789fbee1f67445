//! IPv4: field offsets, the header views and the helpers finding and writing a header in a
//! frame.

use super::*;

/// Version (high nibble) and IHL (low nibble).
pub const VER_IHL: usize = 0;
/// Type of service (DSCP and ECN).
pub const TOS: usize = 1;
/// Total length.
pub const TOTAL_LEN: usize = 2;
/// Identification.
pub const IDENT: usize = 4;
/// Flags (high 3 bits) and fragment offset.
pub const FLAGS_FRAG: usize = 6;
/// Time to live.
pub const TTL: usize = 8;
/// Protocol.
pub const PROTO: usize = 9;
/// Checksum.
pub const CSUM: usize = 10;
/// Source address.
pub const SRC: usize = 12;
/// Destination address.
pub const DST: usize = 16;

/// An IPv4 packet (from its header to the end of the frame, padding included) whose header
/// was validated once by [`Ipv4View::new_checked`]: version 4, IHL ≥ 5, total length ≥ the
/// header length, header and total length within the buffer. Its accessors cannot read out
/// of bounds.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4View<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4View<T> {
    /// Validates the IPv4 header at the start of `buf` (see [`Ipv4View`]): `TooShort` below
    /// 20 bytes, then `BadHeader` for a version other than 4, an IHL below 5 or a total
    /// length below the header length, then `TooShort` if the header or the total length
    /// runs past `buf`.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, Ipv4Error> {
        let b = buf.as_ref();
        if b.len() < IPV4_MIN_LEN {
            return Err(Ipv4Error::TooShort);
        }
        let ihl = (b[ip::VER_IHL] & 0x0f) as usize * 4;
        if b[ip::VER_IHL] >> 4 != 4 || ihl < IPV4_MIN_LEN {
            return Err(Ipv4Error::BadHeader);
        }
        let total = rd16(b, ip::TOTAL_LEN) as usize;
        if total < ihl {
            return Err(Ipv4Error::BadHeader);
        }
        if b.len() < ihl || b.len() < total {
            return Err(Ipv4Error::TooShort);
        }
        Ok(Ipv4View { buf })
    }
    /// The buffer the view was made from.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }
    /// Header length in bytes (IHL × 4, options included).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[ip::VER_IHL] & 0x0f) as usize * 4
    }
    /// Total length from the header (header + payload, frame padding excluded).
    #[inline]
    pub fn total_len(&self) -> usize {
        rd16(self.buf.as_ref(), ip::TOTAL_LEN) as usize
    }
    /// Length of the payload (the L4 segment).
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.total_len() - self.header_len()
    }
    /// Fragment offset (in 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        rd16(self.buf.as_ref(), ip::FLAGS_FRAG) & 0x1fff
    }
    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        rd16(self.buf.as_ref(), ip::FLAGS_FRAG) & 0x2000 != 0
    }
    /// True for any fragment (first, middle or last).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// True if the L4 header is present (unfragmented packet or first fragment).
    #[inline]
    pub fn has_l4_header(&self) -> bool {
        self.frag_offset() == 0
    }
    /// The header, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buf.as_ref()[..self.header_len()]
    }
    /// True if the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        crate::checksum::verify_ipv4_header(self.header())
    }
    /// The payload as the total length says (frame padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len()..self.total_len()]
    }
    /// The source or destination address.
    #[inline]
    pub fn addr(&self, f: AddrField) -> u32 {
        u32::get(self.buf.as_ref(), f.off())
    }
    /// Offset in the payload of the TCP or UDP checksum, for a packet carrying its L4
    /// header (unfragmented or first fragment); None for other protocols and later
    /// fragments.
    #[inline]
    fn l4_checksum_off(&self) -> Option<usize> {
        match self.protocol() {
            crate::checksum::PROTO_TCP if self.has_l4_header() => Some(tcp::CSUM),
            crate::checksum::PROTO_UDP if self.has_l4_header() => Some(udp::CSUM),
            _ => None,
        }
    }
}

fields!(Ipv4View {
    /// Identification.
    ident, set_ident: u16 = ip::IDENT;
    /// Time to live.
    ttl, set_ttl: u8 = ip::TTL;
    /// Protocol field.
    protocol, set_protocol: u8 = ip::PROTO;
    /// Header checksum field.
    checksum, set_checksum: u16 = ip::CSUM;
    /// Source address.
    src, set_src: u32 = ip::SRC;
    /// Destination address.
    dst, set_dst: u32 = ip::DST;
    /// Source address as bytes.
    src_bytes, set_src_bytes: [u8; 4] = ip::SRC;
    /// Destination address as bytes.
    dst_bytes, set_dst_bytes: [u8; 4] = ip::DST;
});

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4View<T> {
    /// Sets the source or destination address (the checksums are left as they are).
    #[inline]
    pub fn set_addr(&mut self, f: AddrField, a: u32) {
        a.put(self.buf.as_mut(), f.off());
    }
    /// Swaps the source and destination addresses (the checksums stay valid).
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (src, dst) = self.buf.as_mut()[ip::SRC..ip::DST + 4].split_at_mut(4);
        src.swap_with_slice(dst);
    }
    /// Decrements the TTL by one, updating the header checksum incrementally (RFC 1624); the
    /// caller has checked that the TTL is above 0.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        // TTL shares a 16-bit checksum word with the protocol byte.
        let old = rd16(self.buf.as_ref(), ip::TTL);
        let new = old - 0x100;
        self.set_ttl(self.ttl() - 1);
        let hc = crate::checksum::update16(self.checksum(), old, new);
        self.set_checksum(hc);
    }
    /// Adds a checksum `increment` (see [`crate::checksum::increment32`]) to the header
    /// checksum.
    #[inline]
    pub fn apply_checksum_increment(&mut self, increment: u64) {
        crate::checksum::apply_at(self.buf.as_mut(), ip::CSUM, increment);
    }
    /// Computes the header checksum and writes it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        let c = crate::checksum::ipv4_header(self.header());
        self.set_checksum(c);
    }
    /// The payload as the total length says, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.buf.as_mut()[h..t]
    }
    /// Sets address `f` to `new`, updating the header checksum and, for a TCP or UDP packet
    /// carrying its L4 header, the L4 checksum incrementally (the whole datagram's checksum
    /// in a first fragment stays right; a zero UDP checksum stays zero). `Truncated`, with
    /// nothing written, if the payload ends before the L4 checksum field.
    #[inline]
    pub fn rewrite_addr(&mut self, f: AddrField, new: u32) -> Result<(), Truncated> {
        let l4_csum = self.l4_checksum_off();
        if l4_csum.is_some_and(|c| c + 2 > self.payload_len()) {
            return Err(Truncated);
        }
        let inc = crate::checksum::increment32(self.addr(f), new);
        self.set_addr(f, new);
        self.apply_checksum_increment(inc);
        if let Some(c) = l4_csum {
            let proto = self.protocol();
            crate::checksum::apply_l4_at(self.payload_mut(), c, proto, inc);
        }
        Ok(())
    }
}

impl<'a> Ipv4View<&'a [u8]> {
    /// The payload as the total length says, borrowed for as long as the buffer.
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &self.buf[h..t]
    }
}

/// Which address field of an IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrField {
    /// The source address.
    Src,
    /// The destination address.
    Dst,
}

impl AddrField {
    #[inline(always)]
    fn off(self) -> usize {
        match self {
            AddrField::Src => ip::SRC,
            AddrField::Dst => ip::DST,
        }
    }
}

/// An IPv4 header alone (options included) whose version, IHL and length were checked once
/// by [`Ipv4Header::new_checked`]; unlike [`Ipv4View`], the total length is not looked at (the
/// checksum modules, as BESS's, only read the header).
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Header<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Header<T> {
    /// Checks the header at the start of `buf`: `TooShort` if `buf` is empty, `BadHeader` for
    /// a version other than 4 or an IHL below 5, `TooShort` if `buf` ends inside the header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, Ipv4Error> {
        let b = buf.as_ref();
        let Some(&vihl) = b.first() else {
            return Err(Ipv4Error::TooShort);
        };
        let hlen = (vihl & 0x0f) as usize * 4;
        if vihl >> 4 != 4 || hlen < IPV4_MIN_LEN {
            return Err(Ipv4Error::BadHeader);
        }
        if b.len() < hlen {
            return Err(Ipv4Error::TooShort);
        }
        Ok(Ipv4Header { buf })
    }
    /// Header length in bytes (IHL × 4, options included).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[ip::VER_IHL] & 0x0f) as usize * 4
    }
    /// True if the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        crate::checksum::verify_ipv4_header(&self.buf.as_ref()[..self.header_len()])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Header<T> {
    /// Computes the header checksum and writes it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        let hlen = self.header_len();
        let h = &mut self.buf.as_mut()[..hlen];
        let c = crate::checksum::ipv4_header(h);
        wr16(h, ip::CSUM, c);
    }
}

/// The 20 fixed bytes of an IPv4 header, checked once by [`Ipv4Fixed::new_checked`]: present,
/// version 4 and IHL ≥ 5. Neither the options nor the total length are looked at (DRR reads
/// flows as leniently as BESS).
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Fixed<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Fixed<T> {
    /// `TooShort` if `buf` is shorter than 20 bytes, `BadHeader` for a version other than 4
    /// or an IHL below 5.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, Ipv4Error> {
        let b = buf.as_ref();
        if b.len() < IPV4_MIN_LEN {
            return Err(Ipv4Error::TooShort);
        }
        let ihl = (b[ip::VER_IHL] & 0x0f) as usize * 4;
        if b[ip::VER_IHL] >> 4 != 4 || ihl < IPV4_MIN_LEN {
            return Err(Ipv4Error::BadHeader);
        }
        Ok(Ipv4Fixed { buf })
    }
    /// Header length from the IHL (the options may extend past the buffer).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buf.as_ref()[ip::VER_IHL] & 0x0f) as usize * 4
    }
    /// Fragment offset (in 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        rd16(self.buf.as_ref(), ip::FLAGS_FRAG) & 0x1fff
    }
    /// What follows the header and its options in the buffer (total length not applied), or
    /// None if the options extend past it.
    #[inline]
    pub fn after_header(&self) -> Option<&[u8]> {
        self.buf.as_ref().get(self.header_len()..)
    }
}

fields!(Ipv4Fixed {
    /// Protocol field.
    protocol, set_protocol: u8 = ip::PROTO;
    /// Source address as bytes.
    src_bytes, set_src_bytes: [u8; 4] = ip::SRC;
    /// Destination address as bytes.
    dst_bytes, set_dst_bytes: [u8; 4] = ip::DST;
});

/// The IP version nibble of the L3 header starting `l3`, None if `l3` is empty.
#[inline]
pub fn ip_version(l3: &[u8]) -> Option<u8> {
    l3.first().map(|b| b >> 4)
}

/// The IPv4 packet of an untagged Ethernet frame: `NotIpv4` for another EtherType,
/// `TooShort` for a frame shorter than an Ethernet header, else as [`Ipv4View::new_checked`].
#[inline]
pub fn ipv4_in_frame(d: &[u8]) -> Result<Ipv4View<&[u8]>, Ipv4Error> {
    match EthernetView::new_checked(d)?.ethertype() {
        ETHERTYPE_IPV4 => Ipv4View::new_checked(&d[ETH_LEN..]),
        _ => Err(Ipv4Error::NotIpv4),
    }
}

/// [`ipv4_in_frame`], writable.
#[inline]
pub fn ipv4_in_frame_mut(d: &mut [u8]) -> Result<Ipv4View<&mut [u8]>, Ipv4Error> {
    match EthernetView::new_checked(&*d)?.ethertype() {
        ETHERTYPE_IPV4 => Ipv4View::new_checked(&mut d[ETH_LEN..]),
        _ => Err(Ipv4Error::NotIpv4),
    }
}

/// Length of an IPv4 header without options.
pub const IPV4_MIN_LEN: usize = 20;

/// Writes an IPv4 header without options into `h[..20]` (TOS 0, identification 0) with total
/// length `total`, the flags/fragment-offset word `flags_frag`, `ttl`, `proto`, `src` and
/// `dst`, and its checksum.
#[inline]
pub fn put_ipv4_header(
    h: &mut [u8],
    total: u16,
    flags_frag: u16,
    ttl: u8,
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
) {
    let h = &mut h[..IPV4_MIN_LEN];
    h[ip::VER_IHL] = 0x45;
    h[ip::TOS] = 0;
    wr16(h, ip::TOTAL_LEN, total);
    wr16(h, ip::IDENT, 0);
    wr16(h, ip::FLAGS_FRAG, flags_frag);
    h[ip::TTL] = ttl;
    h[ip::PROTO] = proto;
    wr16(h, ip::CSUM, 0);
    h[ip::SRC..ip::SRC + 4].copy_from_slice(&src);
    h[ip::DST..ip::DST + 4].copy_from_slice(&dst);
    let c = crate::checksum::ipv4_header(h);
    wr16(h, ip::CSUM, c);
}

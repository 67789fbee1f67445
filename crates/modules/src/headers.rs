//! Header layout, checks and views shared by module classes: Ethernet, VLAN tags, IPv4, UDP,
//! TCP, ICMP, ARP and VXLAN.
//!
//! A view (`EthernetView`, `Ipv4View`, `UdpView`, ...) wraps a buffer (`&[u8]`, `&mut [u8]` or
//! anything `AsRef<[u8]>` / `AsMut<[u8]>`); its `new_checked` constructor validates the
//! lengths (and, for IPv4, the version, IHL and total length) once, so its field accessors
//! cannot read out of bounds. Field offsets are the named constants of the `eth`, `ip`,
//! `udp`, `tcp`, `icmp`, `arp` and `vxlan` modules here; classes read and write header fields
//! only through the views (or the few frame-level helpers below), never at raw offsets.

use bessemer_core::Packet;

/// Length of an untagged Ethernet header.
pub const ETH_LEN: usize = 14;
/// Offset of the EtherType (or the TPID of an outer VLAN tag) in an Ethernet frame.
pub const ETH_TYPE_OFF: usize = 12;
/// Length of one 802.1Q / 802.1ad tag.
pub const VLAN_LEN: usize = 4;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of an 802.1Q (VLAN) tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ service) tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of SCTP.
pub const PROTO_SCTP: u8 = 132;

/// Field offsets inside an Ethernet header.
pub mod eth {
    /// Destination MAC address.
    pub const DST: usize = 0;
    /// Source MAC address.
    pub const SRC: usize = 6;
    /// EtherType (or the TPID of an outer VLAN tag).
    pub const TYPE: usize = super::ETH_TYPE_OFF;
}

/// Field offsets inside an IPv4 header.
pub mod ip {
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
}

/// Field offsets inside a UDP header (the ports are also those of TCP and SCTP).
pub mod udp {
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
}

/// Field offsets inside a TCP header.
pub mod tcp {
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
}

/// Field offsets inside an ARP packet for Ethernet and IPv4.
pub mod arp {
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
}

/// Field offsets inside an ICMP header (query messages: echo, timestamp, information).
pub mod icmp {
    /// Type.
    pub const TYPE: usize = 0;
    /// Checksum.
    pub const CSUM: usize = 2;
    /// Identifier (query messages).
    pub const IDENT: usize = 4;
    /// Header length of a query message.
    pub const HEADER_LEN: usize = 8;
}

/// Field offsets inside a VXLAN header (RFC 7348).
pub mod vxlan {
    /// Flags (the I flag: the VNI is valid).
    pub const FLAGS: usize = 0;
    /// VNI (24 bits) followed by a reserved byte.
    pub const VNI: usize = 4;
    /// Header length.
    pub const HEADER_LEN: usize = 8;
    /// The I flag.
    pub const FLAG_I: u8 = 0x08;
}

bessemer_core::drop_reasons! {
    /// Why a frame is not a usable IPv4 packet; also the drop reasons (with their printed
    /// names) the IPv4 rewriters share, embedded first in their own reason enums.
    pub enum Ipv4Error {
        /// Shorter than the headers (or the IPv4 total length) say.
        TooShort = "too_short",
        /// The EtherType is not IPv4.
        NotIpv4 = "not_ipv4",
        /// Version is not 4, IHL below 5, or total length below the header length.
        BadHeader = "bad_ip_header",
    }
}

/// The EtherType of an untagged frame, or None if it is shorter than an Ethernet header.
#[inline]
fn ethertype(d: &[u8]) -> Option<u16> {
    d.get(ETH_TYPE_OFF..ETH_LEN)
        .map(|t| u16::from_be_bytes([t[0], t[1]]))
}

/// A buffer shorter than the header a view reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated;

impl From<Truncated> for Ipv4Error {
    fn from(_: Truncated) -> Ipv4Error {
        Ipv4Error::TooShort
    }
}

/// A header field type: read and written big-endian at an offset the view's check covers.
trait Field: Sized {
    fn get(b: &[u8], off: usize) -> Self;
    fn put(self, b: &mut [u8], off: usize);
}

impl Field for u8 {
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> u8 {
        b[off]
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        b[off] = self;
    }
}

impl Field for u16 {
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> u16 {
        u16::from_be_bytes([b[off], b[off + 1]])
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        b[off..off + 2].copy_from_slice(&self.to_be_bytes());
    }
}

impl Field for u32 {
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> u32 {
        u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        b[off..off + 4].copy_from_slice(&self.to_be_bytes());
    }
}

impl<const N: usize> Field for [u8; N] {
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[off..off + N]);
        a
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        b[off..off + N].copy_from_slice(&self);
    }
}

#[inline(always)]
fn rd16(b: &[u8], off: usize) -> u16 {
    u16::get(b, off)
}

#[inline(always)]
fn wr16(b: &mut [u8], off: usize, v: u16) {
    v.put(b, off)
}

/// Declares a view type over a buffer `T` with a `new_checked` constructor refusing buffers
/// shorter than `$min` bytes, and `into_inner`.
macro_rules! min_len_view {
    ($(#[$doc:meta])* $view:ident, $min:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $view<T> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            #[doc = concat!("A view of the ", $what, " at the start of `buf`, or `Truncated` if ")]
            #[doc = concat!("`buf` is shorter than `", stringify!($min), "` bytes.")]
            #[inline]
            pub fn new_checked(buf: T) -> Result<Self, Truncated> {
                if buf.as_ref().len() < $min {
                    return Err(Truncated);
                }
                Ok($view { buf })
            }
            /// The buffer the view was made from.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buf
            }
        }
    };
}

/// Declares field accessors of a view: for each field a getter (`AsRef<[u8]>`) and a setter
/// (`AsMut<[u8]>`) at a named offset, which the view's checked constructor covers.
macro_rules! fields {
    ($view:ident { $($(#[$doc:meta])* $get:ident, $set:ident: $ty:ty = $off:expr;)* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as Field>::get(self.buf.as_ref(), $off)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets [`", stringify!($get), "`](Self::", stringify!($get), ")")]
                #[doc = "(no checksum is updated)."]
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    Field::put(v, self.buf.as_mut(), $off)
                }
            )*
        }
    };
}

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
fn payload_after(b: &[u8], hl: usize) -> Option<&[u8]> {
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

/// Test helpers: hex literals and an independent checksum reference.
#[cfg(test)]
pub mod test_util {
    /// Bytes from a hex string (whitespace ignored).
    pub fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// True if the IPv4 header at `off` and its TCP/UDP/ICMP checksum verify, using smoltcp's
    /// implementation (independent of `crate::checksum`).
    pub fn checksums_ok(frame: &[u8], off: usize) -> bool {
        use smoltcp::wire::{
            Icmpv4Packet, IpAddress, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket,
        };
        let ip = Ipv4Packet::new_checked(&frame[off..]).unwrap();
        if !ip.verify_checksum() {
            return false;
        }
        if ip.frag_offset() != 0 || ip.more_frags() {
            return true;
        }
        let (s, d) = (
            IpAddress::Ipv4(ip.src_addr()),
            IpAddress::Ipv4(ip.dst_addr()),
        );
        let pl = &ip.payload()[..ip.total_len() as usize - ip.header_len() as usize];
        match ip.next_header() {
            IpProtocol::Udp => UdpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
            IpProtocol::Tcp => TcpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
            IpProtocol::Icmp => Icmpv4Packet::new_checked(pl).unwrap().verify_checksum(),
            _ => true,
        }
    }

    /// Batches of [`mutated_ipv4`] frames from `(clean, [(kind, x)])` pairs: a clean batch's
    /// frames are unchanged or keep their header form (kinds 2-5 may leave them plain), so
    /// that a fast path for all-plain batches runs often.
    pub fn mutated_ipv4_batches(batches: &[(bool, Vec<(u8, u8)>)]) -> Vec<Vec<Vec<u8>>> {
        batches
            .iter()
            .map(|(clean, b)| {
                b.iter()
                    .map(|&(k, x)| {
                        let k = if *clean && !(2..=5).contains(&k) {
                            k | 8
                        } else {
                            k
                        };
                        mutated_ipv4(k, x)
                    })
                    .collect()
            })
            .collect()
    }

    /// A 60-byte Ethernet/IPv4 frame (UDP to port 53, TTL 64, valid header checksum) with
    /// one change chosen by `kind` (0..8; none from 8 on) and `x`, for fast-path tests: a
    /// header field changed or the frame cut short (some stay plain IPv4, see
    /// `crate::util::plain_ipv4`).
    pub fn mutated_ipv4(kind: u8, x: u8) -> Vec<u8> {
        let mut d = hex("02000000 00020200 00000001 08004500 002e0001 40004011 00000a00 00010a00 000204d2 0035001a 0000");
        d.resize(60, 0);
        d[33] = x;
        match kind {
            0 => d.truncate(x as usize % 60),
            1 => d[12 + x as usize % 12] = x,
            2 => d[22] = x % 4,
            3 => d[23] = [1, 6, 17, 47][x as usize % 4],
            4 => d[20..22].copy_from_slice(&[x & 0x3f, x]),
            5 => d[16..18].copy_from_slice(&[0, x % 64]),
            6 => d[14] = 0x40 | (x % 16),
            7 => d.truncate(34 + x as usize % 26),
            _ => {}
        }
        if d.len() >= 34 {
            d[24..26].fill(0);
            let c = crate::checksum::ipv4_header(&d[14..34]);
            d[24..26].copy_from_slice(&c.to_be_bytes());
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::{checksums_ok, hex};
    use super::*;

    // A UDP/IPv4 frame (10.0.0.1:1234 → 192.168.1.9:53, TTL 64, payload "abc") with valid
    // checksums.
    const UDP: &str = "02000000 00020200 00000001 08004500 001f0001 40004011 6f1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    // A TCP/IPv4 SYN behind a 4-byte IP option, with valid checksums.
    const TCP: &str = "02000000 00020200 00000001 08004600 002c0001 40004006 6c180a00 0001c0a8 01090101 01009c40 01bb0000 00010000 00005002 04004234 0000";
    // An ARP request: who has 10.0.0.2, tell 10.0.0.1 (02:00:00:00:00:01).
    const ARP: &str = "ffffffffffff 020000000001 0806 0001 0800 06 04 0001 020000000001 0a000001 000000000000 0a000002";

    #[test]
    fn truncated_buffers_are_refused_at_every_length() {
        let udp = hex(UDP);
        let tcp = hex(TCP);
        let arp = hex(ARP);
        for n in 0..ETH_LEN {
            assert_eq!(EthernetView::new_checked(&udp[..n]).err(), Some(Truncated));
            assert_eq!(ipv4_in_frame(&udp[..n]).err(), Some(Ipv4Error::TooShort));
        }
        for n in 0..udp.len() - ETH_LEN {
            // Below the header, or below the total length.
            assert_eq!(
                Ipv4View::new_checked(&udp[ETH_LEN..ETH_LEN + n]).err(),
                Some(Ipv4Error::TooShort),
                "{n}"
            );
        }
        let opt = &tcp[ETH_LEN..];
        for n in IPV4_MIN_LEN..24 {
            // The 4-byte option is cut.
            assert_eq!(
                Ipv4View::new_checked(&opt[..n]).err(),
                Some(Ipv4Error::TooShort)
            );
        }
        let seg = &udp[ETH_LEN + IPV4_MIN_LEN..];
        for n in 0..4 {
            assert!(PortsView::new_checked(&seg[..n]).is_err());
        }
        for n in 0..udp::HEADER_LEN {
            assert!(UdpView::new_checked(&seg[..n]).is_err());
        }
        let seg = &tcp[ETH_LEN + 24..];
        for n in 0..tcp::HEADER_LEN {
            assert!(TcpView::new_checked(&seg[..n]).is_err());
        }
        let a = &arp[ETH_LEN..];
        for n in 0..arp::LEN {
            assert_eq!(
                ArpView::new_checked(&a[..n]).err(),
                Some(ArpError::Truncated)
            );
        }
        assert!(EthernetView::new_checked(&udp[..ETH_LEN]).is_ok());
        assert!(Ipv4View::new_checked(&udp[ETH_LEN..]).is_ok());
        assert!(UdpView::new_checked(&udp[ETH_LEN + 20..ETH_LEN + 28]).is_ok());
        assert!(TcpView::new_checked(&tcp[ETH_LEN + 24..ETH_LEN + 44]).is_ok());
        assert!(ArpView::new_checked(&a[..arp::LEN]).is_ok());
    }

    #[test]
    fn bad_headers_are_refused_by_reason() {
        let udp = hex(UDP);
        let mut v = udp.clone();
        v[12] = 0x86;
        assert_eq!(ipv4_in_frame(&v).err(), Some(Ipv4Error::NotIpv4));
        for (i, b, want) in [
            (14, 0x65, Ipv4Error::BadHeader), // version 6
            (14, 0x44, Ipv4Error::BadHeader), // IHL 4
            (17, 0x13, Ipv4Error::BadHeader), // total length 19 < 20
            (17, 0x20, Ipv4Error::TooShort),  // total length past the frame
            (14, 0x4f, Ipv4Error::BadHeader), // IHL 15: header longer than the total length
        ] {
            let mut v = udp.clone();
            v[i] = b;
            assert_eq!(ipv4_in_frame(&v).err(), Some(want), "byte {i} = {b:#x}");
        }
        let mut a = hex(ARP);
        a[ETH_LEN + 1] = 6; // hardware type 6
        assert_eq!(
            ArpView::new_checked(&a[ETH_LEN..]).err(),
            Some(ArpError::Unsupported)
        );
        let mut a = hex(ARP);
        a[ETH_LEN + 4] = 0; // no hardware addresses: long enough, but not Ethernet
        assert_eq!(
            ArpView::new_checked(&a[ETH_LEN..]).err(),
            Some(ArpError::Unsupported)
        );
    }

    #[test]
    fn getters_read_the_fields_of_literal_packets() {
        let udp = hex(UDP);
        let e = EthernetView::new_checked(&udp[..]).unwrap();
        assert_eq!(e.dst(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(e.src(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(e.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(e.addrs(), &udp[..12]);
        let ip = ipv4_in_frame(&udp).unwrap();
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.total_len(), 31);
        assert_eq!(ip.protocol(), crate::checksum::PROTO_UDP);
        assert_eq!(ip.ttl(), 64);
        assert_eq!(ip.src(), 0x0a00_0001);
        assert_eq!(ip.dst_bytes(), [192, 168, 1, 9]);
        assert_eq!(ip.checksum(), 0x6f1b);
        assert!(ip.verify_checksum());
        assert!(!ip.is_fragment() && ip.has_l4_header());
        let u = UdpView::new_checked(ip.payload()).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.length()), (1234, 53, 11));
        assert_eq!(u.checksum(), 0x6abc);
        assert_eq!(u.payload(), b"abc");

        let tcp = hex(TCP);
        let ip = ipv4_in_frame(&tcp).unwrap();
        assert_eq!(ip.header_len(), 24);
        assert_eq!(ip.payload_len(), 20);
        let t = TcpView::new_checked(ip.payload()).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (40000, 443));
        assert_eq!(t.checksum(), 0x4234);

        let a = hex(ARP);
        let p = ArpView::new_checked(&a[ETH_LEN..]).unwrap();
        assert_eq!(p.operation(), arp::OPER_REQUEST);
        assert_eq!(p.sha(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.spa(), [10, 0, 0, 1]);
        assert_eq!(p.tha(), [0; 6]);
        assert_eq!(p.tpa(), [10, 0, 0, 2]);
    }

    #[test]
    fn setters_round_trip() {
        let mut f = hex(UDP);
        let mut e = EthernetView::new_checked(&mut f[..]).unwrap();
        e.set_dst([1, 2, 3, 4, 5, 6]);
        e.set_src([7, 8, 9, 10, 11, 12]);
        e.swap_addrs();
        assert_eq!(e.dst(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(e.src(), [1, 2, 3, 4, 5, 6]);
        e.set_ethertype(ETHERTYPE_ARP);
        assert_eq!(e.ethertype(), ETHERTYPE_ARP);

        let mut f = hex(UDP);
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        ip.set_ttl(7);
        ip.set_src(0x0102_0304);
        ip.set_dst(0x0506_0708);
        ip.set_checksum(0xbeef);
        assert_eq!(
            (ip.ttl(), ip.src(), ip.dst()),
            (7, 0x0102_0304, 0x0506_0708)
        );
        assert_eq!(ip.checksum(), 0xbeef);
        ip.swap_addrs();
        assert_eq!((ip.src(), ip.dst()), (0x0506_0708, 0x0102_0304));
        let mut p = PortsView::new_checked(ip.payload_mut()).unwrap();
        p.set_src_port(1);
        p.set_dst_port(2);
        p.swap_ports();
        assert_eq!((p.src_port(), p.dst_port()), (2, 1));
        let mut u = UdpView::new_checked(ip.payload_mut()).unwrap();
        u.set_length(9);
        u.set_checksum(0x1234);
        assert_eq!((u.length(), u.checksum()), (9, 0x1234));

        let mut a = hex(ARP);
        let mut p = ArpView::new_checked(&mut a[ETH_LEN..]).unwrap();
        p.set_operation(arp::OPER_REPLY);
        p.set_sha([1; 6]);
        p.set_spa([2; 4]);
        p.set_tha([3; 6]);
        p.set_tpa([4; 4]);
        assert_eq!(p.operation(), arp::OPER_REPLY);
        assert_eq!(
            (p.sha(), p.spa(), p.tha(), p.tpa()),
            ([1; 6], [2; 4], [3; 6], [4; 4])
        );
    }

    #[test]
    fn checksums_match_literal_packets() {
        // Zeroed checksums are filled back to the literal values.
        let want = hex(UDP);
        let mut f = want.clone();
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        ip.set_checksum(0);
        ip.fill_checksum();
        let pseudo = crate::checksum::pseudo_v4(ip.src_bytes(), ip.dst_bytes(), ip.protocol(), 0);
        let mut u = UdpView::new_checked(ip.payload_mut()).unwrap();
        u.set_checksum(0);
        assert!(u.fill_checksum(pseudo));
        assert_eq!(f, want);

        let want = hex(TCP);
        let mut f = want.clone();
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        ip.set_checksum(0);
        ip.fill_checksum();
        let pseudo = crate::checksum::pseudo_v4(ip.src_bytes(), ip.dst_bytes(), ip.protocol(), 0);
        let mut t = TcpView::new_checked(ip.payload_mut()).unwrap();
        t.set_checksum(0);
        t.fill_checksum(pseudo);
        assert_eq!(f, want);

        // TTL 64 → 63 with the incremental update: the literal TTL-63 packet.
        let mut f = hex(UDP);
        ipv4_in_frame_mut(&mut f).unwrap().decrement_ttl();
        assert_eq!(
            f,
            hex("02000000 00020200 00000001 08004500 001f0001 40003f11 701b0a00 0001c0a8 010904d2 0035000b 6abc6162 63")
        );
        assert!(checksums_ok(&f, ETH_LEN));

        // A UDP length field past the segment is refused.
        let mut f = hex(UDP);
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        let mut u = UdpView::new_checked(ip.payload_mut()).unwrap();
        u.set_length(12);
        assert!(!u.fill_checksum(0));
        u.set_length(7);
        assert!(!u.fill_checksum(0));
    }

    // An ICMP echo request (id 7, seq 1, "ping") from 10.0.0.1 to 192.168.1.9.
    const ICMP: &str = "02000000 00020200 00000001 08004500 00200001 40004001 6f2a0a00 0001c0a8 01090800 19270007 00017069 6e67";
    // A VXLAN packet (VNI 0x123456) carrying a 14-byte inner Ethernet header.
    const VXLAN_HDR: &str = "08000000 12345600";

    #[test]
    fn more_views_refuse_every_truncated_length() {
        let icmp = hex(ICMP);
        let seg = &icmp[ETH_LEN + IPV4_MIN_LEN..];
        for n in 0..icmp::HEADER_LEN {
            assert!(IcmpView::new_checked(&seg[..n]).is_err());
        }
        let vx = hex(VXLAN_HDR);
        for n in 0..vxlan::HEADER_LEN {
            assert!(VxlanView::new_checked(&vx[..n]).is_err());
        }
        let tcp = hex(TCP); // IHL 6
        let l3 = &tcp[ETH_LEN..];
        for n in 0..IPV4_MIN_LEN {
            assert_eq!(
                Ipv4Fixed::new_checked(&l3[..n]).err(),
                Some(Ipv4Error::TooShort)
            );
        }
        // The fixed view does not need the options; the header view does.
        let fixed = Ipv4Fixed::new_checked(&l3[..IPV4_MIN_LEN]).unwrap();
        assert_eq!(fixed.header_len(), 24);
        assert!(fixed.after_header().is_none());
        assert_eq!(fixed.protocol(), crate::checksum::PROTO_TCP);
        assert_eq!(fixed.src_bytes(), [10, 0, 0, 1]);
        for n in 0..24 {
            assert_eq!(
                Ipv4Header::new_checked(&l3[..n]).err(),
                Some(Ipv4Error::TooShort),
                "{n}"
            );
        }
        assert!(Ipv4Header::new_checked(&l3[..24])
            .unwrap()
            .verify_checksum());
        // Ipv4Header checks the version before the length, as IPChecksum always did.
        assert_eq!(
            Ipv4Header::new_checked(&[0x65u8][..]).err(),
            Some(Ipv4Error::BadHeader)
        );
        assert_eq!(
            Ipv4Fixed::new_checked(&[0x44u8; 20][..]).err(),
            Some(Ipv4Error::BadHeader)
        );
    }

    #[test]
    fn icmp_vxlan_and_header_views_round_trip() {
        let mut f = hex(ICMP);
        let want_csum;
        {
            let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
            let mut i = IcmpView::new_checked(ip.payload_mut()).unwrap();
            assert_eq!((i.msg_type(), i.ident(), i.checksum()), (8, 7, 0x1927));
            i.rewrite_ident(0x1234);
            assert_eq!(i.ident(), 0x1234);
            want_csum = i.checksum();
        }
        assert!(checksums_ok(&f, ETH_LEN));
        assert_ne!(want_csum, 0x1927);

        let vx = hex(VXLAN_HDR);
        let v = VxlanView::new_checked(&vx[..]).unwrap();
        assert_eq!((v.flags(), v.vni()), (vxlan::FLAG_I, 0x123456));
        let mut out = [0xffu8; 8];
        VxlanView::new_checked(&mut out[..])
            .unwrap()
            .fill(0xab_123456);
        assert_eq!(out.to_vec(), vx);

        let mut f = hex(UDP);
        let mut h = Ipv4Header::new_checked(&mut f[ETH_LEN..]).unwrap();
        assert_eq!(h.header_len(), 20);
        assert!(h.verify_checksum());
        let mut g = hex(UDP);
        g[ETH_LEN + ip::CSUM] ^= 0xff;
        assert!(!Ipv4Header::new_checked(&g[ETH_LEN..])
            .unwrap()
            .verify_checksum());
        h.fill_checksum();
        assert_eq!(f, hex(UDP));
    }

    #[test]
    fn rewrite_addr_keeps_both_checksums_and_refuses_a_cut_l4_header() {
        for lit in [UDP, TCP] {
            let mut f = hex(lit);
            let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
            ip.rewrite_addr(AddrField::Src, 0xcb00_7101).unwrap();
            ip.rewrite_addr(AddrField::Dst, 0x0808_0808).unwrap();
            assert_eq!((ip.src(), ip.dst()), (0xcb00_7101, 0x0808_0808));
            assert!(checksums_ok(&f, ETH_LEN), "{lit}");
        }
        // A zero UDP checksum (none computed) stays zero.
        let mut f = hex(UDP);
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        UdpView::new_checked(ip.payload_mut())
            .unwrap()
            .set_checksum(0);
        ip.rewrite_addr(AddrField::Src, 1).unwrap();
        assert_eq!(UdpView::new_checked(ip.payload()).unwrap().checksum(), 0);
        // TCP cut before the end of its checksum field: nothing written.
        let t = hex("02000000 00020200 00000001 08004500 00250001 40004006 00000a00 0001c0a8 01099c40 01bb0000 00010000 00005002 040000");
        let mut f = t.clone();
        let mut ip = ipv4_in_frame_mut(&mut f).unwrap();
        assert_eq!(ip.payload_len(), 17);
        assert_eq!(ip.rewrite_addr(AddrField::Src, 1), Err(Truncated));
        assert_eq!(f, t);
    }

    #[test]
    fn tags_are_pushed_and_removed_after_the_macs() {
        let frame = hex(UDP);
        let pool =
            bessemer_core::PacketPool::new("views", 8, bessemer_core::mem::PagePolicy::Plain)
                .unwrap();
        let mut cache = pool.cache();
        let mut p = cache.alloc(0).unwrap();
        assert!(p.set_data(&frame));
        assert!(push_tag(&mut p, ETHERTYPE_VLAN, 0x2064));
        let tagged = p.data().to_vec();
        assert_eq!(&tagged[..12], &frame[..12]);
        assert_eq!(&tagged[12..16], &[0x81, 0x00, 0x20, 0x64]);
        assert_eq!(&tagged[16..], &frame[12..]);
        assert_eq!(outer_tag(&tagged), OuterTag::Tagged(0x2064));
        strip_outer_tag(&mut p);
        assert_eq!(p.data(), &frame[..]);
        // An MPLS-like 4-byte shim with a new EtherType.
        assert!(push_tag(&mut p, 0x8847, 0x0001));
        assert!(remove_after_macs(&mut p, VLAN_LEN, Some(ETHERTYPE_ARP)));
        assert_eq!(
            EthernetView::new_checked(p.data()).unwrap().ethertype(),
            ETHERTYPE_ARP
        );
        let mut short = cache.alloc(0).unwrap();
        assert!(short.set_data(&frame[..ETH_LEN + 3]));
        assert!(!remove_after_macs(&mut short, VLAN_LEN, None));
        assert_eq!(short.data(), &frame[..ETH_LEN + 3]);
        cache.free(p);
        cache.free(short);
    }
}

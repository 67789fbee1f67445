//! Ethernet, VLAN and IPv4 header layout and checks shared by module classes. Lengths are
//! validated once with smoltcp's checked views; afterwards the classes read and write fields
//! at the offsets this module returns, all inside the validated range.

use bessemer_core::Packet;
use smoltcp::wire::Ipv4Packet;

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

/// Offsets inside an IPv4 header.
pub mod ip {
    /// Time to live.
    pub const TTL: usize = 8;
    /// Checksum.
    pub const CSUM: usize = 10;
    /// Source address.
    pub const SRC: usize = 12;
    /// Destination address.
    pub const DST: usize = 16;
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

/// A validated IPv4 packet inside a frame.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Info {
    /// Offset of the IPv4 header in the frame.
    pub off: usize,
    /// Header length in bytes (IHL × 4, options included).
    pub hlen: usize,
    /// Total length from the header (header + payload, frame padding excluded).
    pub total: usize,
    /// Protocol field.
    pub proto: u8,
    /// Fragment offset (in 8-byte units).
    pub frag_offset: u16,
    /// More-fragments flag.
    pub more_frags: bool,
}

impl Ipv4Info {
    /// Offset of the L4 header in the frame.
    #[inline]
    pub fn l4(&self) -> usize {
        self.off + self.hlen
    }
    /// Length of the L4 segment (IPv4 payload).
    #[inline]
    pub fn l4_len(&self) -> usize {
        self.total - self.hlen
    }
    /// True for any fragment (first, middle or last).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }
    /// True if the L4 header is present (unfragmented packet or first fragment).
    #[inline]
    pub fn has_l4_header(&self) -> bool {
        self.frag_offset == 0
    }
}

/// The EtherType of an untagged frame, or None if it is shorter than an Ethernet header.
#[inline]
pub fn ethertype(d: &[u8]) -> Option<u16> {
    d.get(ETH_TYPE_OFF..ETH_LEN)
        .map(|t| u16::from_be_bytes([t[0], t[1]]))
}

/// Validates the IPv4 header at `off` (the version, IHL, total length within the frame).
#[inline]
pub fn ipv4_at(d: &[u8], off: usize) -> Result<Ipv4Info, Ipv4Error> {
    let Some(buf) = d.get(off..) else {
        return Err(Ipv4Error::TooShort);
    };
    if buf.len() < 20 {
        return Err(Ipv4Error::TooShort);
    }
    let ihl = (buf[0] & 0x0f) as usize * 4;
    if buf[0] >> 4 != 4 || ihl < 20 {
        return Err(Ipv4Error::BadHeader);
    }
    let total = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    if total < ihl {
        return Err(Ipv4Error::BadHeader);
    }
    let p = Ipv4Packet::new_checked(buf).map_err(|_| Ipv4Error::TooShort)?;
    Ok(Ipv4Info {
        off,
        hlen: p.header_len() as usize,
        total: p.total_len() as usize,
        proto: p.next_header().into(),
        frag_offset: p.frag_offset() / 8,
        more_frags: p.more_frags(),
    })
}

/// Validates an untagged Ethernet frame carrying IPv4.
#[inline]
pub fn eth_ipv4(d: &[u8]) -> Result<Ipv4Info, Ipv4Error> {
    match ethertype(d) {
        None => Err(Ipv4Error::TooShort),
        Some(ETHERTYPE_IPV4) => ipv4_at(d, ETH_LEN),
        Some(_) => Err(Ipv4Error::NotIpv4),
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

/// Reads a big-endian u16 at `off` (callers have validated the range).
#[inline]
pub fn be16(d: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([d[off], d[off + 1]])
}

/// Reads a big-endian u32 at `off` (callers have validated the range).
#[inline]
pub fn be32(d: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([d[off], d[off + 1], d[off + 2], d[off + 3]])
}

/// Writes a big-endian u16 at `off`.
#[inline]
pub fn put16(d: &mut [u8], off: usize, v: u16) {
    d[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32 at `off`.
#[inline]
pub fn put32(d: &mut [u8], off: usize, v: u32) {
    d[off..off + 4].copy_from_slice(&v.to_be_bytes());
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
        Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ) => OuterTag::Tagged(be16(d, ETH_LEN)),
        Some(_) => OuterTag::Untagged,
    }
}

/// Removes the outer VLAN tag of `p` (which [`outer_tag`] found `Tagged`), moving the MAC
/// addresses up over it.
#[inline]
pub fn strip_outer_tag(p: &mut Packet) {
    p.data_mut().copy_within(0..ETH_TYPE_OFF, VLAN_LEN);
    let ok = p.adj(VLAN_LEN);
    debug_assert!(ok, "outer_tag checked the length");
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
    h[0] = 0x45;
    h[1] = 0;
    put16(h, 2, total);
    put16(h, 4, 0);
    put16(h, 6, flags_frag);
    h[ip::TTL] = ttl;
    h[9] = proto;
    put16(h, ip::CSUM, 0);
    h[ip::SRC..ip::SRC + 4].copy_from_slice(&src);
    h[ip::DST..ip::DST + 4].copy_from_slice(&dst);
    let c = crate::checksum::ipv4_header(h);
    put16(h, ip::CSUM, c);
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
}

//! Header layout, checks and views shared by module classes: Ethernet, VLAN tags, IPv4, UDP,
//! TCP, ICMP, ARP and VXLAN.
//!
//! A view (`EthernetView`, `Ipv4View`, `UdpView`, ...) wraps a buffer (`&[u8]`, `&mut [u8]` or
//! anything `AsRef<[u8]>` / `AsMut<[u8]>`); its `new_checked` constructor validates the
//! lengths (and, for IPv4, the version, IHL and total length) once, so its field accessors
//! cannot read out of bounds. One file per protocol (`eth`, `ip`, `udp`, `tcp`, `icmp`, `arp`,
//! `vxlan`) holds its field offsets as named constants, its views and its frame-level
//! helpers; the views are re-exported here. Classes read and write header fields only through
//! the views (or the frame-level helpers), never at raw offsets.

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

pub mod arp;
pub mod eth;
pub mod icmp;
pub mod ip;
pub mod tcp;
pub mod udp;
pub mod vxlan;

pub use arp::{ArpError, ArpView};
pub use eth::{
    l3_after_tags, outer_tag, push_tag, remove_after_macs, strip_outer_tag, EthernetView, OuterTag,
    L3,
};
pub use icmp::IcmpView;
pub use ip::{
    ip_version, ipv4_in_frame, ipv4_in_frame_mut, put_ipv4_header, AddrField, Ipv4Fixed,
    Ipv4Header, Ipv4View, IPV4_MIN_LEN,
};
pub use tcp::TcpView;
pub use udp::{PortsView, UdpView};
pub use vxlan::VxlanView;

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

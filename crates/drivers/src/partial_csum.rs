//! Completing TCP/UDP checksums that a local sender left to "hardware".
//!
//! A host stack with checksum offload (a veth's default) hands its driver packets whose L4
//! checksum field holds only the pseudo-header sum (`CHECKSUM_PARTIAL`); on a veth the peer
//! receives them like that and trusts the skb's flag. A frame that leaves through XDP or
//! AF_XDP loses the flag, so a switch forwarding it must finish the checksum or the far end
//! drops the packet. AF_PACKET says which frames are partial (virtio-net header); AF_XDP
//! does not, so [`complete`] recognises them: the field equals the folded pseudo-header sum
//! and the checksum does not verify. For a complete packet only the first test runs (a
//! comparison, no pass over the payload) and it fails 65535 times in 65536.

use bessemer_core::checksum::{self, PROTO_TCP, PROTO_UDP, TCP_CSUM_OFFSET, UDP_CSUM_OFFSET};

/// Offset of the IP header after the Ethernet header and any VLAN tags, and the ethertype.
pub fn l3_of(f: &[u8]) -> Option<(usize, u16)> {
    if f.len() < 14 {
        return None;
    }
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    while et == 0x8100 || et == 0x88a8 {
        if f.len() < l3 + 4 {
            return None;
        }
        et = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]);
        l3 += 4;
    }
    Some((l3, et))
}

/// Completes the TCP or UDP checksum of Ethernet frame `f` if it holds only the pseudo-header
/// sum; true if it did. Fragments, IPv6 extension headers and other protocols are left alone.
#[inline]
pub fn complete(f: &mut [u8]) -> bool {
    let Some((l3, et)) = l3_of(f) else {
        return false;
    };
    let (l4, end, proto, pseudo) = match et {
        0x0800 => {
            if f.len() < l3 + 20 {
                return false;
            }
            let ihl = ((f[l3] & 0xf) as usize) * 4;
            let total = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) as usize;
            let frag = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff;
            if ihl < 20 || total < ihl || frag != 0 || l3 + total > f.len() {
                return false;
            }
            let proto = f[l3 + 9];
            let src = f[l3 + 12..l3 + 16].try_into().unwrap();
            let dst = f[l3 + 16..l3 + 20].try_into().unwrap();
            let len = (total - ihl) as u32;
            (
                l3 + ihl,
                l3 + total,
                proto,
                checksum::pseudo_v4(src, dst, proto, len),
            )
        }
        0x86dd => {
            if f.len() < l3 + 40 {
                return false;
            }
            let plen = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize;
            if l3 + 40 + plen > f.len() {
                return false;
            }
            let proto = f[l3 + 6];
            let src = f[l3 + 8..l3 + 24].try_into().unwrap();
            let dst = f[l3 + 24..l3 + 40].try_into().unwrap();
            (
                l3 + 40,
                l3 + 40 + plen,
                proto,
                checksum::pseudo_v6(src, dst, proto, plen as u32),
            )
        }
        _ => return false,
    };
    let off = match proto {
        PROTO_TCP if end >= l4 + 20 => TCP_CSUM_OFFSET,
        PROTO_UDP if end >= l4 + 8 => UDP_CSUM_OFFSET,
        _ => return false,
    };
    let at = l4 + off;
    let field = u16::from_be_bytes([f[at], f[at + 1]]);
    if field != checksum::fold(pseudo) || checksum::verify_l4(pseudo, &f[l4..end]) {
        return false;
    }
    // The field already carries the pseudo-header's share of the sum.
    let mut c = !checksum::fold(checksum::sum(&f[l4..end]));
    if proto == PROTO_UDP {
        c = checksum::udp_wire(c);
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + `proto` frame with a complete L4 checksum, and its L4 offset.
    fn v4(proto: u8, payload: &[u8], vlan: bool) -> (Vec<u8>, usize) {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        if vlan {
            f.extend_from_slice(&[0x81, 0, 0, 7]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let l4len = if proto == PROTO_TCP { 20 } else { 8 } + payload.len();
        let total = (20 + l4len) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let l4 = f.len();
        if proto == PROTO_TCP {
            f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18]);
            f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        } else {
            f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
            f.extend_from_slice(&(l4len as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
        f.extend_from_slice(payload);
        let ph = checksum::pseudo_v4([10, 0, 0, 1], [10, 0, 0, 2], proto, l4len as u32);
        let off = if proto == PROTO_TCP { 16 } else { 6 };
        let mut c = checksum::l4(ph, &f[l4..], off);
        if proto == PROTO_UDP {
            c = checksum::udp_wire(c);
        }
        f[l4 + off..l4 + off + 2].copy_from_slice(&c.to_be_bytes());
        (f, l4)
    }

    /// The frame as a sender with checksum offload hands it over: the pseudo-header sum.
    fn partial(f: &[u8], l4: usize, proto: u8) -> Vec<u8> {
        let mut p = f.to_vec();
        let off = if proto == PROTO_TCP { 16 } else { 6 };
        let l4len = (p.len() - l4) as u32;
        let ph = checksum::pseudo_v4([10, 0, 0, 1], [10, 0, 0, 2], proto, l4len);
        p[l4 + off..l4 + off + 2].copy_from_slice(&checksum::fold(ph).to_be_bytes());
        p
    }

    #[test]
    fn partial_tcp_and_udp_are_completed_byte_for_byte() {
        for proto in [PROTO_TCP, PROTO_UDP] {
            for vlan in [false, true] {
                for n in [0usize, 1, 7, 1400] {
                    let payload: Vec<u8> = (0..n).map(|i| (i * 31 + 5) as u8).collect();
                    let (good, l4) = v4(proto, &payload, vlan);
                    let mut p = partial(&good, l4, proto);
                    assert_ne!(p, good);
                    assert!(complete(&mut p), "proto {proto} vlan {vlan} len {n}");
                    assert_eq!(p, good, "proto {proto} vlan {vlan} len {n}");
                    // A complete frame is left as it is.
                    let mut again = good.clone();
                    assert!(!complete(&mut again));
                    assert_eq!(again, good);
                }
            }
        }
    }

    #[test]
    fn ipv6_partial_tcp_is_completed() {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let payload = b"bessemer over ipv6";
        let l4len = 20 + payload.len();
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4len as u16).to_be_bytes());
        f.extend_from_slice(&[PROTO_TCP, 64]);
        let (src, dst) = ([0x20; 16], [0x21; 16]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        let l4 = f.len();
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        let ph = checksum::pseudo_v6(&src, &dst, PROTO_TCP, l4len as u32);
        let c = checksum::l4(ph, &f[l4..], 16);
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        let good = f.clone();
        f[l4 + 16..l4 + 18].copy_from_slice(&checksum::fold(ph).to_be_bytes());
        assert!(complete(&mut f));
        assert_eq!(f, good);
    }

    #[test]
    fn other_frames_are_left_alone() {
        let (good, l4) = v4(PROTO_UDP, b"abc", false);
        // Ethernet padding after the IP packet is not summed.
        let mut padded = partial(&good, l4, PROTO_UDP);
        padded.extend_from_slice(&[0xee; 10]);
        assert!(complete(&mut padded));
        assert_eq!(&padded[..good.len()], &good[..]);
        // A fragment, a truncated packet, ICMP, ARP and runts are not touched.
        let mut frag = partial(&good, l4, PROTO_UDP);
        frag[20] = 0x20;
        let before = frag.clone();
        assert!(!complete(&mut frag));
        assert_eq!(frag, before);
        let mut cut = partial(&good, l4, PROTO_UDP);
        cut.truncate(cut.len() - 1);
        assert!(!complete(&mut cut));
        let mut icmp = good.clone();
        icmp[23] = 1;
        assert!(!complete(&mut icmp));
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!complete(&mut arp));
        assert!(!complete(&mut [0u8; 10]));
        // A frame whose checksum is wrong in another way stays wrong (it is not ours to fix).
        let mut bad = good.clone();
        bad[l4 + 6] ^= 0x55;
        let before = bad.clone();
        assert!(!complete(&mut bad));
        assert_eq!(bad, before);
    }

    proptest::proptest! {
        /// Any bytes: no panic, and a frame it leaves alone is unchanged.
        #[test]
        fn arbitrary_frames_never_panic(mut f in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let before = f.clone();
            if !complete(&mut f) {
                proptest::prop_assert_eq!(f, before);
            }
        }

        /// Any TCP or UDP frame made partial is completed back to the original, and a
        /// complete one is never touched.
        #[test]
        fn partial_frames_complete_to_the_original(
            tcp in proptest::prelude::any::<bool>(),
            vlan in proptest::prelude::any::<bool>(),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let proto = if tcp { PROTO_TCP } else { PROTO_UDP };
            let (good, l4) = v4(proto, &payload, vlan);
            let mut p = partial(&good, l4, proto);
            complete(&mut p);
            proptest::prop_assert_eq!(&p, &good);
            let mut g = good.clone();
            proptest::prop_assert!(!complete(&mut g));
        }
    }
}

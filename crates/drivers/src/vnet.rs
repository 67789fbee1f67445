//! virtio-net headers: the offload description Linux gives with each frame on AF_PACKET
//! sockets (PACKET_VNET_HDR) and taps (IFF_VNET_HDR), and what the drivers do with it:
//! finish partial checksums and cut TCP (IPv4/IPv6) and UDP (GSO_UDP_L4) super-frames into
//! wire-size segments in software.

use bessemer_core::packet::LARGE_DATA_CAPACITY;
use bessemer_core::{checksum, Packet, PacketBatch, PoolCache};

use crate::partial_csum::l3_of;

/// Length of the legacy `virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;
/// `flags`: the L4 checksum is partial (pseudo-header sum at csum_start + csum_offset).
pub const VNET_NEEDS_CSUM: u8 = 1;
/// `gso_type` values: none, TCP/IPv4, TCP/IPv6, UDP (segmentation), and the ECN bit.
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

/// The offload information of one frame.
#[derive(Clone, Copy)]
pub struct Vnet {
    /// VNET_NEEDS_CSUM or 0.
    pub flags: u8,
    /// GSO_* (with GSO_ECN possibly set).
    pub gso_type: u8,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts (the L4 header).
    pub csum_start: u16,
    /// Offset of the checksum field from csum_start.
    pub csum_offset: u16,
}

impl Vnet {
    /// Reads a header (native byte order, as packet sockets and taps give it).
    pub fn parse(b: &[u8]) -> Vnet {
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Vnet {
            flags: b[0],
            gso_type: b[1],
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }

    /// Finishes a partial checksum in frame `d` (VNET_NEEDS_CSUM); false if the offsets do
    /// not fit the frame. The field holds the pseudo-header sum, so summing from
    /// csum_start with it in place gives the full sum.
    pub fn finish_csum(&self, d: &mut [u8]) -> bool {
        if self.flags & VNET_NEEDS_CSUM == 0 {
            return true;
        }
        let (s, o) = (self.csum_start as usize, self.csum_offset as usize);
        if s + o + 2 > d.len() {
            return false;
        }
        let c = !checksum::fold(checksum::sum(&d[s..]));
        put16(d, s + o, checksum::udp_wire(c));
        true
    }
}

/// The offload description of a plain TCP frame too big for one buffer (a full-size
/// segment on a jumbo-MTU link), so it can be cut into smaller segments.
pub fn oversized_tcp(f: &[u8]) -> Option<Vnet> {
    let (l3, et) = l3_of(f)?;
    let (l4, gso_type) = match et {
        0x0800 if f.len() >= l3 + 20 => {
            let frag = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff;
            if f[l3 + 9] != 6 || frag != 0 {
                return None;
            }
            (l3 + ((f[l3] & 0xf) as usize) * 4, GSO_TCPV4)
        }
        0x86dd if f.len() >= l3 + 40 && f[l3 + 6] == 6 => (l3 + 40, GSO_TCPV6),
        _ => return None,
    };
    Some(Vnet {
        flags: 0,
        gso_type,
        gso_size: u16::MAX,
        csum_start: l4 as u16,
        csum_offset: 16,
    })
}

/// A parsed super-frame: where its headers are and how to cut it.
pub struct Gso {
    l3: usize,
    l4: usize,
    /// Header bytes copied into every segment.
    pub hlen: usize,
    /// Payload bytes per segment.
    pub mss: usize,
    v4: bool,
    tcp: bool,
}

impl Gso {
    /// `cap`: the most bytes one segment may have (the largest buffer there is).
    pub fn parse(f: &[u8], v: Vnet, cap: usize) -> Option<Gso> {
        let (l3, et) = l3_of(f)?;
        let v4 = match et {
            0x0800 => true,
            0x86dd => false,
            _ => return None,
        };
        let tcp = v.gso_type & !GSO_ECN != GSO_UDP_L4;
        let l4 = v.csum_start as usize;
        if l4 < l3 + if v4 { 20 } else { 40 } || l4 + 20 > f.len() {
            return None;
        }
        // The IPv4 header (its IHL) must end where the header says L4 starts: `build`
        // checksums it in every segment (found by the vnet_frames fuzz target).
        if v4 && l3 + ((f[l3] & 0xf) as usize) * 4 != l4 {
            return None;
        }
        let hlen = if tcp {
            l4 + ((f[l4 + 12] >> 4) as usize) * 4
        } else {
            l4 + 8
        };
        if hlen > f.len() || (tcp && hlen < l4 + 20) || hlen + 64 > cap {
            return None;
        }
        let room = cap - hlen;
        // TCP may be cut finer than the sender did; UDP datagram boundaries must stay.
        if v.gso_size == 0 || (!tcp && v.gso_size as usize > room) {
            return None;
        }
        let mss = (v.gso_size as usize).min(room);
        Some(Gso {
            l3,
            l4,
            hlen,
            mss,
            v4,
            tcp,
        })
    }

    /// Writes segment `off..off+n` of the payload with fixed-up headers into `d`.
    pub fn build(&self, d: &mut [u8], f: &[u8], off: usize, n: usize) {
        let (l3, l4, h) = (self.l3, self.l4, self.hlen);
        d[..h].copy_from_slice(&f[..h]);
        d[h..h + n].copy_from_slice(&f[h + off..h + off + n]);
        let first = off == 0;
        let last = h + off + n == f.len();
        let idx = (off / self.mss) as u16;
        let l4len = h - l4 + n;
        if self.v4 {
            let ihl = ((d[l3] & 0xf) as usize) * 4;
            put16(d, l3 + 2, (h - l3 + n) as u16);
            let id = u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]).wrapping_add(idx);
            put16(d, l3 + 4, id);
            put16(d, l3 + 10, 0);
            put16(d, l3 + 10, checksum::checksum(&d[l3..l3 + ihl]));
        } else {
            put16(d, l3 + 4, (h - l3 - 40 + n) as u16);
        }
        let proto = if self.tcp {
            checksum::PROTO_TCP
        } else {
            checksum::PROTO_UDP
        };
        let pseudo = if self.v4 {
            let a = |at: usize| -> [u8; 4] { d[at..at + 4].try_into().unwrap() };
            checksum::pseudo_v4(a(l3 + 12), a(l3 + 16), proto, l4len as u32)
        } else {
            let a = |at: usize| -> [u8; 16] { d[at..at + 16].try_into().unwrap() };
            checksum::pseudo_v6(&a(l3 + 8), &a(l3 + 24), proto, l4len as u32)
        };
        let csum_at = if self.tcp {
            let seq = u32::from_be_bytes([d[l4 + 4], d[l4 + 5], d[l4 + 6], d[l4 + 7]])
                .wrapping_add(off as u32);
            d[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            if !last {
                d[l4 + 13] &= !0x09; // FIN, PSH only on the last segment
            }
            if !first {
                d[l4 + 13] &= !0x80; // CWR only on the first
            }
            l4 + 16
        } else {
            put16(d, l4 + 4, l4len as u16);
            l4 + 6
        };
        put16(d, csum_at, 0);
        let c = !checksum::fold(pseudo + checksum::sum(&d[l4..h + n]));
        put16(d, csum_at, checksum::udp_wire(c));
    }
}

/// Writes `v` big-endian at `at`.
#[inline]
pub fn put16(d: &mut [u8], at: usize, v: u16) {
    d[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// The most bytes a segment may have: a large-frame buffer when the pool has them, else
/// the worker's buffer.
pub fn segment_capacity(cache: &PoolCache) -> usize {
    if cache.pool().large().is_some() {
        LARGE_DATA_CAPACITY
    } else {
        cache.data_capacity()
    }
}

/// Appends the segments of super-frame `f` (cut as `g` says) from payload offset `*seg` on,
/// each passed through `each` (e.g. to put a VLAN tag back); advances `*seg`. False when the
/// batch reached `max` or the pool is empty first: call again with the same `*seg`.
pub fn segment_into(
    cache: &mut PoolCache,
    batch: &mut PacketBatch,
    max: usize,
    f: &[u8],
    g: &Gso,
    seg: &mut usize,
    mut each: impl FnMut(&mut Packet),
) -> bool {
    let total = f.len() - g.hlen;
    while *seg < total {
        if batch.len() >= max {
            return false;
        }
        let off = *seg;
        let n = g.mss.min(total - off);
        let Some(mut p) = cache.alloc_any(g.hlen + n) else {
            return false;
        };
        g.build(p.data_mut(), f, off, n);
        each(&mut p);
        // SAFETY: batch.len() < max <= MAX_BURST.
        unsafe { batch.push_unchecked(p) };
        *seg += n;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::packet::DATA_CAPACITY;

    fn reference(b: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in b.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            s += w as u32;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn checksum_matches_bytewise_reference() {
        let mut x = 0x12345678u32;
        for len in 0..300 {
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let ours = checksum::fold(checksum::sum(&b));
            let r = reference(&b);
            // 0 and 0xffff are the same number in ones' complement.
            assert!(
                ours == r || (ours, r) == (0xffff, 0) || (ours, r) == (0, 0xffff),
                "len {len}"
            );
        }
    }

    /// A TCP/IPv4 super-frame of `payload` bytes as the kernel hands it over.
    fn superframe(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        put16(&mut f, 16, (20 + 20 + payload) as u16);
        put16(&mut f, 18, 100);
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[38..42].copy_from_slice(&1000u32.to_be_bytes());
        f[46] = 0x50;
        f[47] = 0x19; // FIN PSH ACK
        for (i, b) in f[54..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    /// The header the kernel gives a TCP/IPv4 super-frame from [`superframe`].
    fn tcp4_gso() -> Vnet {
        Vnet {
            flags: VNET_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        }
    }

    #[test]
    fn an_ipv4_header_length_that_disagrees_with_csum_start_is_refused() {
        // IHL 15 (60 bytes) where csum_start says the TCP header starts after 20: cutting
        // it used to checksum the IPv4 header past the segment's end (a panic).
        let mut f = superframe(3000);
        let v = tcp4_gso();
        f[14] = 0x4f;
        assert!(Gso::parse(&f, v, DATA_CAPACITY).is_none());
        f[14] = 0x44; // IHL 4: shorter than an IPv4 header
        assert!(Gso::parse(&f, v, DATA_CAPACITY).is_none());
        f[14] = 0x45;
        assert!(Gso::parse(&f, v, DATA_CAPACITY).is_some());
    }

    #[test]
    fn tcp_superframe_is_cut_into_valid_segments() {
        let f = superframe(5000);
        let v = tcp4_gso();
        let g = Gso::parse(&f, v, DATA_CAPACITY).unwrap();
        assert_eq!((g.hlen, g.mss), (54, 1448));
        let mut off = 0;
        let mut payload = Vec::new();
        let mut i = 0u16;
        while off < 5000 {
            let n = g.mss.min(5000 - off);
            let mut d = vec![0u8; 54 + n];
            g.build(&mut d, &f, off, n);
            // IP header and TCP checksums verify (sum over them folds to 0xffff).
            assert_eq!(checksum::fold(checksum::sum(&d[14..34])), 0xffff);
            let mut ps = d[26..34].to_vec();
            ps.extend_from_slice(&[0, 6]);
            ps.extend_from_slice(&((20 + n) as u16).to_be_bytes());
            assert_eq!(
                checksum::fold(checksum::sum(&ps) + checksum::sum(&d[34..])),
                0xffff
            );
            assert_eq!(u16::from_be_bytes([d[16], d[17]]) as usize, 40 + n);
            assert_eq!(u16::from_be_bytes([d[18], d[19]]), 100 + i);
            let seq = u32::from_be_bytes([d[38], d[39], d[40], d[41]]);
            assert_eq!(seq as usize, 1000 + off);
            let last = off + n == 5000;
            assert_eq!(d[47], if last { 0x19 } else { 0x10 });
            payload.extend_from_slice(&d[54..]);
            off += n;
            i += 1;
        }
        assert_eq!(payload, f[54..]);
        assert_eq!(i, 4);
    }

    #[test]
    fn udp_ipv6_superframe_is_cut_into_valid_datagrams() {
        let payload = 2500;
        let mut f = vec![0u8; 14 + 40 + 8 + payload];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        put16(&mut f, 18, (8 + payload) as u16);
        f[20] = 17;
        f[21] = 64;
        f[22..38].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f[38..54].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        put16(&mut f, 54, 4000);
        put16(&mut f, 56, 5000);
        put16(&mut f, 58, (8 + payload) as u16);
        for (i, b) in f[62..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let v = Vnet {
            flags: VNET_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            gso_size: 1000,
            csum_start: 54,
            csum_offset: 6,
        };
        let g = Gso::parse(&f, v, DATA_CAPACITY).unwrap();
        assert_eq!((g.hlen, g.mss), (62, 1000));
        let (mut off, mut payload_out) = (0, Vec::new());
        while off < payload {
            let n = g.mss.min(payload - off);
            let mut d = vec![0u8; 62 + n];
            g.build(&mut d, &f, off, n);
            assert_eq!(u16::from_be_bytes([d[18], d[19]]) as usize, 8 + n);
            assert_eq!(u16::from_be_bytes([d[58], d[59]]) as usize, 8 + n);
            // RFC 8200 pseudo-header: addresses, 32-bit length, 3 zero bytes, next header.
            let mut ps = d[22..54].to_vec();
            ps.extend_from_slice(&((8 + n) as u32).to_be_bytes());
            ps.extend_from_slice(&[0, 0, 0, 17]);
            assert_eq!(
                checksum::fold(checksum::sum(&ps) + checksum::sum(&d[54..])),
                0xffff
            );
            assert_ne!(
                [d[60], d[61]],
                [0, 0],
                "UDP sends a zero checksum as 0xffff"
            );
            payload_out.extend_from_slice(&d[62..]);
            off += n;
        }
        assert_eq!(payload_out, f[62..]);
    }

    #[test]
    fn jumbo_tcp_is_cut_and_oversized_udp_gso_refused() {
        let f = superframe(8000);
        let v = oversized_tcp(&f).expect("a plain TCP/IPv4 frame");
        let g = Gso::parse(&f, v, DATA_CAPACITY).unwrap();
        assert_eq!((g.hlen, g.mss), (54, DATA_CAPACITY - 54));
        // An IPv4 fragment is not cut.
        let mut frag = f.clone();
        frag[20] = 0x20; // MF
        assert!(oversized_tcp(&frag).is_none());
        // UDP datagram boundaries may not move: a segment size beyond a buffer is refused.
        let mut u = f.clone();
        u[23] = 17;
        let big = Vnet {
            flags: VNET_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            gso_size: 4000,
            csum_start: 34,
            csum_offset: 6,
        };
        assert!(Gso::parse(&u, big, DATA_CAPACITY).is_none());
        // With large buffers, both keep the sender's segment size.
        assert_eq!(Gso::parse(&u, big, LARGE_DATA_CAPACITY).unwrap().mss, 4000);
        let jumbo = Vnet {
            gso_size: 8948,
            ..v
        };
        assert_eq!(
            Gso::parse(&f, jumbo, LARGE_DATA_CAPACITY).unwrap().mss,
            8948
        );
        let ok = Vnet {
            gso_size: 1000,
            ..big
        };
        assert_eq!(Gso::parse(&u, ok, DATA_CAPACITY).unwrap().mss, 1000);
    }
}

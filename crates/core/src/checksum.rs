//! Internet checksum (RFC 1071) helpers shared by module classes and drivers: full
//! computation, incremental update (RFC 1624), the IPv4 header checksum and the TCP/UDP
//! checksum with the IPv4 or IPv6 pseudo-header.
//!
//! Partial sums are kept unfolded in a `u64` so long buffers and several pieces (pseudo-header,
//! header, payload) can be added before one final fold. All 16-bit words are big-endian, as on
//! the wire; a trailing odd byte is padded with zero.

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// Offset of the checksum field in a TCP header.
pub const TCP_CSUM_OFFSET: usize = 16;
/// Offset of the checksum field in a UDP header.
pub const UDP_CSUM_OFFSET: usize = 6;
/// Offset of the checksum field in an IPv4 header.
pub const IPV4_CSUM_OFFSET: usize = 10;

/// Ones'-complement sum of `data` as big-endian 16-bit words, to be added to other sums
/// and folded with [`fold`] (the value is at most 0xffff, folded already).
#[inline]
pub fn sum(data: &[u8]) -> u64 {
    // Summed as native-order words and swapped once at the end: the ones'-complement sum
    // commutes with swapping the bytes of every word (RFC 1071 §2(B)), and 2^16 = 1 modulo
    // 0xffff, so a 32- or 64-bit word adds as its 16-bit pieces. Folding keeps the value
    // modulo 0xffff and zero only for all-zero data, so the swapped fold is the big-endian
    // sum's fold.
    let s = if data.len() == 20 {
        // An IPv4 header without options: three loads.
        let t = u32::from_ne_bytes(data[16..20].try_into().unwrap()) as u128;
        let acc = word(data, 0) as u128 + word(data, 8) as u128 + t;
        add_carry(acc as u64, (acc >> 64) as u64)
    } else {
        native_sum(data)
    };
    u16::from_be(fold(s)) as u64
}

/// Shortest data summed with AVX2: below it the call and the tail cost what the wider adds
/// save (a 94-byte UDP datagram took more instructions than 64-bit adds do).
#[cfg(target_arch = "x86_64")]
const AVX2_MIN_LEN: usize = 256;

/// The 8 bytes of `d` at `i` as a native-order word.
#[inline(always)]
fn word(d: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(d[i..i + 8].try_into().unwrap())
}

/// The sum of `data` as native-order 64-bit words (the last 0..7 bytes zero-padded), with
/// end-around carries: congruent modulo 0xffff to the sum of its little-endian 16-bit words
/// and zero only for all-zero data. Word boundaries stay at even offsets, so an odd last
/// byte is the high byte of its big-endian word, as RFC 1071 pads it.
fn native_sum(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= AVX2_MIN_LEN && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { native_sum_avx2(data) };
    }
    native_sum_words(data)
}

/// [`native_sum`] with 64-bit adds: an add and an add-with-carry per 8 bytes into a u128.
#[inline(always)]
fn native_sum_words(data: &[u8]) -> u64 {
    let n = data.len();
    if n < 8 {
        return short_sum(data);
    }
    let mut acc: u128 = 0;
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        acc += word(b, 0) as u128;
        acc += word(b, 8) as u128;
        acc += word(b, 16) as u128;
        acc += word(b, 24) as u128;
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        acc += word(w, 0) as u128;
    }
    // The last 0..7 bytes without a byte loop: an odd last byte (at an even offset: the low
    // byte of its little-endian word) on its own, then the even rest from the 8 bytes that
    // end there, shifted down past the bytes already summed (an even number of bytes: a
    // multiple of 16 bits, which keeps every byte's place in its word).
    let r = words.remainder().len();
    if r != 0 {
        let odd = n & 1;
        if odd != 0 {
            acc += data[n - 1] as u128;
        }
        let even = r - odd;
        if even != 0 {
            acc += (word(data, n - odd - 8) >> ((8 - even) * 8)) as u128;
        }
    }
    add_carry(acc as u64, (acc >> 64) as u64)
}

/// [`native_sum`] of fewer than 8 bytes.
#[inline(always)]
fn short_sum(data: &[u8]) -> u64 {
    let mut t = 0u64;
    if data.len() >= 4 {
        t += u32::from_ne_bytes(data[..4].try_into().unwrap()) as u64;
    }
    // The last 0..3 bytes, built in a register: a copy into a zeroed array was a memcpy
    // call whose byte stores the load then waited for (no store forwarding).
    let r = &data[data.len() & 4..];
    let b = |i: usize| r.get(i).copied().unwrap_or(0);
    t + u32::from_ne_bytes([b(0), b(1), b(2), 0]) as u64
}

/// `a + b` with the carry out added back in (ones'-complement addition of 64-bit words).
#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, c) = a.overflowing_add(b);
    // No second carry: with a carry out, s is at most 2^64 - 2.
    s + c as u64
}

/// [`native_sum`] 32 bytes at a time: each 4-byte word widened into a 64-bit lane, so no
/// lane can carry (under 2^32 words per lane for any data shorter than 16 GiB).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn native_sum_avx2(data: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let (mut a, mut b) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let mut blocks = data.chunks_exact(32);
    for c in &mut blocks {
        let p = c.as_ptr() as *const __m128i;
        // SAFETY: two 16-byte loads inside the 32-byte block.
        a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(_mm_loadu_si128(p)));
        b = _mm256_add_epi64(b, _mm256_cvtepu32_epi64(_mm_loadu_si128(p.add(1))));
    }
    let mut rest = blocks.remainder();
    if rest.len() >= 16 {
        // SAFETY: 16 bytes inside `rest`.
        a = _mm256_add_epi64(
            a,
            _mm256_cvtepu32_epi64(_mm_loadu_si128(rest.as_ptr() as _)),
        );
        rest = &rest[16..];
    }
    let s = _mm256_add_epi64(a, b);
    let x = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    let v = (_mm_cvtsi128_si64(x) as u64) + (_mm_extract_epi64(x, 1) as u64);
    add_carry(v, native_sum_words(rest))
}

/// Folds an unfolded sum to 16 bits with end-around carry (not complemented): the value
/// modulo 0xffff, as 0 only for 0 (a non-zero multiple of 0xffff folds to 0xffff).
#[inline]
pub fn fold(s: u64) -> u16 {
    // Two end-around-carry additions, without the loop's data-dependent branches.
    let (x, c) = (s as u32).overflowing_add((s >> 32) as u32);
    let x = x + c as u32;
    let (y, c) = (x as u16).overflowing_add((x >> 16) as u16);
    y + c as u16
}

/// The Internet checksum of `data` (complement of the folded sum).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// True if `data`, checksum field included, sums to all ones (a valid checksum).
#[inline]
pub fn verify(data: &[u8]) -> bool {
    fold(sum(data)) == 0xffff
}

/// Sum of `data` as if the 16-bit word at `skip` (the checksum field) were zero.
#[inline]
fn sum_skipping(data: &[u8], skip: usize) -> u64 {
    let field = data
        .get(skip..skip + 2)
        .map_or(0, |w| u16::from_be_bytes([w[0], w[1]]) as u64);
    // Adding the complement of the field cancels it in ones'-complement arithmetic.
    sum(data) + (!field & 0xffff)
}

/// The checksum of an IPv4 header `hdr` (all IHL×4 bytes, options included), computed with
/// its checksum field taken as zero.
#[inline]
pub fn ipv4_header(hdr: &[u8]) -> u16 {
    !fold(sum_skipping(hdr, IPV4_CSUM_OFFSET))
}

/// True if the IPv4 header `hdr` (IHL×4 bytes) carries a correct checksum.
#[inline]
pub fn verify_ipv4_header(hdr: &[u8]) -> bool {
    verify(hdr)
}

/// Unfolded sum of the IPv4 pseudo-header for an L4 segment of `len` bytes.
#[inline]
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u32) -> u64 {
    let (s, d) = (
        u32::from_be_bytes(src) as u64,
        u32::from_be_bytes(dst) as u64,
    );
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + proto as u64 + len as u64
}

/// Unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1) for an upper-layer packet of `len`
/// bytes.
#[inline]
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, len: u32) -> u64 {
    sum(src) + sum(dst) + (len >> 16) as u64 + (len & 0xffff) as u64 + next_header as u64
}

/// The TCP or UDP checksum of `segment` (header and payload) given its pseudo-header sum,
/// computed with the checksum field at `csum_offset` taken as zero. For UDP a result of zero
/// must be sent as 0xffff (see [`udp_wire`]).
#[inline]
pub fn l4(pseudo: u64, segment: &[u8], csum_offset: usize) -> u16 {
    !fold(pseudo + sum_skipping(segment, csum_offset))
}

/// True if `segment` (checksum field included) is correct under the pseudo-header sum.
#[inline]
pub fn verify_l4(pseudo: u64, segment: &[u8]) -> bool {
    fold(pseudo + sum(segment)) == 0xffff
}

/// The value to write in a UDP checksum field: zero means "no checksum" (RFC 768), so a
/// computed zero is sent as its other ones'-complement representation.
#[inline]
pub fn udp_wire(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// The checksum increment for a 16-bit field changing from `old` to `new` (RFC 1624 eqn. 3:
/// ~m + m'), to be applied with [`apply`]; increments of several fields add up.
#[inline]
pub fn increment16(old: u16, new: u16) -> u64 {
    (!old) as u64 + new as u64
}

/// The checksum increment for a 32-bit field (e.g. an IPv4 address) changing.
#[inline]
pub fn increment32(old: u32, new: u32) -> u64 {
    increment16((old >> 16) as u16, (new >> 16) as u16) + increment16(old as u16, new as u16)
}

/// The checksum increment for a field of even length changing from `old` to `new`.
#[inline]
pub fn increment_bytes(old: &[u8], new: &[u8]) -> u64 {
    debug_assert_eq!(old.len(), new.len());
    // ~m summed word by word equals (0xffff × words) − sum(m).
    let words = old.len().div_ceil(2) as u64;
    let old_sum = fold(sum(old)) as u64;
    (0xffff * words - old_sum) + sum(new)
}

/// Applies an increment to checksum `hc` (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')).
#[inline]
pub fn apply(hc: u16, increment: u64) -> u16 {
    !fold((!hc) as u64 + increment)
}

/// `hc` updated for a 16-bit field changing from `old` to `new` (RFC 1624 eqn. 3).
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    apply(hc, increment16(old, new))
}

/// `hc` updated for a 32-bit field changing from `old` to `new`.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    apply(hc, increment32(old, new))
}

/// Applies `increment` to the checksum stored big-endian at `d[off..off + 2]`.
#[inline]
pub fn apply_at(d: &mut [u8], off: usize, increment: u64) {
    let hc = u16::from_be_bytes([d[off], d[off + 1]]);
    d[off..off + 2].copy_from_slice(&apply(hc, increment).to_be_bytes());
}

/// Applies `increment` to the TCP (`proto` [`PROTO_TCP`]) or UDP checksum stored at
/// `d[off..off + 2]`. A zero UDP checksum means the sender computed none and stays zero; an
/// updated UDP checksum is written as [`udp_wire`] says.
#[inline]
pub fn apply_l4_at(d: &mut [u8], off: usize, proto: u8, increment: u64) {
    let hc = u16::from_be_bytes([d[off], d[off + 1]]);
    let new = if proto == PROTO_TCP {
        apply(hc, increment)
    } else if hc != 0 {
        udp_wire(apply(hc, increment))
    } else {
        return;
    };
    d[off..off + 2].copy_from_slice(&new.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Independent reference: RFC 1071's straightforward 16-bit loop.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        let mut i = 0;
        while i < data.len() {
            let hi = data[i] as u32;
            let lo = if i + 1 < data.len() {
                data[i + 1] as u32
            } else {
                0
            };
            s += (hi << 8) | lo;
            s = (s & 0xffff) + (s >> 16);
            i += 2;
        }
        !(s as u16)
    }

    #[test]
    fn rfc1071_example_and_ipv4_header() {
        // RFC 1071 §3 example bytes: sum 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
        // A well-known IPv4 header (checksum 0xb861).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(verify_ipv4_header(&h));
        assert_eq!(ipv4_header(&h), 0xb861);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(ipv4_header(&h), 0xb861);
        assert!(!verify_ipv4_header(&h));
    }

    #[test]
    fn udp_ipv4_and_ipv6_match_smoltcp() {
        use smoltcp::wire::{IpAddress, UdpPacket};
        let mut seg = vec![
            0x30, 0x39, 0x00, 0x35, 0x00, 0x0d, 0, 0, b'h', b'e', b'l', b'l', b'o',
        ];
        let (s4, d4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let c = udp_wire(l4(pseudo_v4(s4, d4, PROTO_UDP, 13), &seg, UDP_CSUM_OFFSET));
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        let p = UdpPacket::new_checked(&seg[..]).unwrap();
        assert!(p.verify_checksum(&IpAddress::v4(10, 0, 0, 1), &IpAddress::v4(10, 0, 0, 2)));
        assert!(verify_l4(pseudo_v4(s4, d4, PROTO_UDP, 13), &seg));

        let s6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let d6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let c = udp_wire(l4(
            pseudo_v6(&s6, &d6, PROTO_UDP, 13),
            &seg,
            UDP_CSUM_OFFSET,
        ));
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        let p = UdpPacket::new_checked(&seg[..]).unwrap();
        let a = IpAddress::Ipv6(smoltcp::wire::Ipv6Address::from(s6));
        let b = IpAddress::Ipv6(smoltcp::wire::Ipv6Address::from(d6));
        assert!(p.verify_checksum(&a, &b));
        assert!(verify_l4(pseudo_v6(&s6, &d6, PROTO_UDP, 13), &seg));
    }

    #[test]
    fn in_place_updates_keep_a_zero_udp_checksum() {
        // A header with a correct checksum at 0..2, a field at 2..4 changing 0x1234 -> 0xabcd.
        let mut d = [0u8, 0, 0x12, 0x34, 0x56, 0x78];
        let c = checksum(&d);
        d[0..2].copy_from_slice(&c.to_be_bytes());
        d[2..4].copy_from_slice(&[0xab, 0xcd]);
        let inc = increment16(0x1234, 0xabcd);
        let mut tcp = d;
        apply_at(&mut d, 0, inc);
        assert!(verify(&d));
        apply_l4_at(&mut tcp, 0, PROTO_TCP, inc);
        assert_eq!(tcp, d);
        let mut udp = tcp;
        udp[0..2].copy_from_slice(&c.to_be_bytes());
        apply_l4_at(&mut udp, 0, PROTO_UDP, inc);
        assert_eq!(udp, d);
        udp[0..2].fill(0);
        apply_l4_at(&mut udp, 0, PROTO_UDP, inc);
        assert_eq!(udp[0..2], [0, 0]);
    }

    /// The folding loop `fold` replaced: end-around carries until 16 bits are left.
    fn fold_by_loop(mut s: u64) -> u16 {
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn fold_agrees_with_the_loop_at_the_edges() {
        for s in [
            0,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0xffff_ffff,
            0x1_0000_0000,
            0xffff_fffe_0001,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(fold(s), fold_by_loop(s), "{s:#x}");
        }
    }

    proptest! {
        #[test]
        fn fold_agrees_with_the_loop(s in any::<u64>(), shift in 0u32..64) {
            prop_assert_eq!(fold(s >> shift), fold_by_loop(s >> shift));
        }

        /// The pseudo-header sum folds as the sum of its bytes as 16-bit words does.
        #[test]
        fn pseudo_v4_folds_as_its_bytes(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
                                        proto in any::<u8>(), len in any::<u16>()) {
            let mut b = src.to_vec();
            b.extend_from_slice(&dst);
            b.extend_from_slice(&[0, proto]);
            b.extend_from_slice(&len.to_be_bytes());
            prop_assert_eq!(fold(pseudo_v4(src, dst, proto, len as u32)), !reference(&b));
        }

        /// Long data (the vector path) of every length and alignment, all-ones and all-zero
        /// data among it, sums as the scalar words do.
        #[test]
        fn long_sums_match_reference(
            data in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(0xffu8), any::<u8>()], 0..600),
            start in 0usize..40,
            fill in prop_oneof![Just(None), Just(Some(0u8)), Just(Some(0xffu8))],
        ) {
            let mut data = data;
            if let Some(f) = fill {
                data.iter_mut().for_each(|b| *b = f);
            }
            let d = &data[start.min(data.len())..];
            prop_assert_eq!(checksum(d), reference(d));
            prop_assert_eq!(u16::from_be(fold(native_sum(d))) as u64, sum(d));
            prop_assert_eq!(fold(native_sum_words(d)), fold(native_sum(d)));
        }
    }

    proptest! {
        #[test]
        fn sum_matches_reference(
            data in proptest::collection::vec(any::<u8>(), 0..200),
            start in 0usize..8,
        ) {
            // Any length and any alignment of the first byte.
            let d = &data[start.min(data.len())..];
            prop_assert_eq!(checksum(d), reference(d));
        }

        /// Sums of pieces add up as the sum of the whole (pieces of even length), also for
        /// all-zero and all-ones data, where a folded zero and 0xffff differ.
        #[test]
        fn sums_of_pieces_add_up(
            data in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(0xffu8), any::<u8>()], 0..200),
            cut in 0usize..100,
        ) {
            let cut = (cut * 2).min(data.len() & !1);
            let (a, b) = data.split_at(cut);
            prop_assert_eq!(!fold(sum(a) + sum(b)), reference(&data));
        }

        #[test]
        fn incremental_update_equals_recomputation(
            mut data in proptest::collection::vec(any::<u8>(), 4..64),
            pos in 0usize..30,
            new16 in any::<u16>(),
            new32 in any::<u32>(),
        ) {
            // Packets with a checksum word at 0..2, a 16-bit field and a 32-bit field.
            let n = data.len() & !1;
            data.truncate(n);
            data[0] = 0;
            data[1] = 0;
            let c = checksum(&data);
            data[0..2].copy_from_slice(&c.to_be_bytes());
            let p = 2 + (pos * 2) % (n - 2).max(2);
            if p + 2 <= n {
                let old = u16::from_be_bytes([data[p], data[p + 1]]);
                data[p..p + 2].copy_from_slice(&new16.to_be_bytes());
                let hc = update16(u16::from_be_bytes([data[0], data[1]]), old, new16);
                data[0..2].copy_from_slice(&hc.to_be_bytes());
                prop_assert!(verify(&data));
            }
            if p + 4 <= n {
                let old = u32::from_be_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]]);
                data[p..p + 4].copy_from_slice(&new32.to_be_bytes());
                let hc = update32(u16::from_be_bytes([data[0], data[1]]), old, new32);
                data[0..2].copy_from_slice(&hc.to_be_bytes());
                prop_assert!(verify(&data));
                let old_b = data[p..p + 4].to_vec();
                let new_b = [1u8, 2, 3, 4];
                data[p..p + 4].copy_from_slice(&new_b);
                let hc = apply(u16::from_be_bytes([data[0], data[1]]), increment_bytes(&old_b, &new_b));
                data[0..2].copy_from_slice(&hc.to_be_bytes());
                prop_assert!(verify(&data));
            }
        }
    }
}

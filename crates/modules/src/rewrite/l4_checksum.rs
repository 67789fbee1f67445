//! L4Checksum: computes (or verifies) TCP and UDP checksums over IPv4 and IPv6.
use super::headers::{checksum_desc, parse_checksum_arg, CHECKSUM_HW_DOC};
use crate::checksum::{self, PROTO_TCP, PROTO_UDP};
use crate::headers::{
    l3_after_tags, Ipv4Error, Ipv4View, TcpView, UdpView, ETHERTYPE_IPV4, ETHERTYPE_IPV6, L3,
};
use crate::util::{process_each, Verdict};
use bessemer_core::{Context, Instance, Module, ModuleClass, PacketBatch};
use smoltcp::wire::Ipv6Packet;

bessemer_core::drop_reasons! {
    /// Why L4Checksum drops packets.
    pub enum L4ChecksumDrop {
        TooShort = "too_short",
        BadIpHeader = "bad_ip_header",
        BadUdpLength = "bad_udp_length",
    }
}
/// Gate for packets whose checksum is correct or was written, and packets not checked.
const FORWARD_GATE: u16 = 0;
/// Gate for TCP/UDP packets whose checksum is wrong (verify mode).
const FAIL_GATE: u16 = 1;

/// Writes correct TCP/UDP checksums, or in verify mode sorts packets by whether theirs is
/// correct. Packets it does not check (other protocols, IP fragments, IPv6 extension
/// headers, non-IP frames) pass unchanged on gate 0.
pub struct L4Checksum {
    verify: bool,
}

impl L4Checksum {
    /// Computes or verifies the checksum of the TCP or UDP segment `seg` (as the IP header's
    /// lengths say) with the pseudo header sum `pseudo` (addresses and protocol).
    fn segment(&self, seg: &mut [u8], proto: u8, pseudo: u64, v6: bool) -> Verdict<L4ChecksumDrop> {
        if proto == PROTO_TCP {
            let Ok(mut tcp) = TcpView::new_checked(seg) else {
                return Verdict::Drop(L4ChecksumDrop::TooShort);
            };
            if self.verify {
                let ok = tcp.verify_checksum(pseudo);
                return Verdict::Gate(if ok { FORWARD_GATE } else { FAIL_GATE });
            }
            tcp.fill_checksum(pseudo);
            return Verdict::Gate(FORWARD_GATE);
        }
        let Ok(mut udp) = UdpView::new_checked(seg) else {
            return Verdict::Drop(L4ChecksumDrop::TooShort);
        };
        // The UDP checksum covers the datagram as its length field says.
        if !udp.length_ok() {
            return Verdict::Drop(L4ChecksumDrop::BadUdpLength);
        }
        if self.verify {
            let ok = if udp.checksum() == 0 {
                // "No checksum" is allowed over IPv4 only (RFC 768, RFC 8200 §8.1).
                !v6
            } else {
                udp.verify_checksum(pseudo)
            };
            Verdict::Gate(if ok { FORWARD_GATE } else { FAIL_GATE })
        } else {
            udp.fill_checksum(pseudo);
            Verdict::Gate(FORWARD_GATE)
        }
    }

    fn one(&self, d: &mut [u8]) -> Verdict<L4ChecksumDrop> {
        let (off, ethertype) = match l3_after_tags(d) {
            L3::TooShort => return Verdict::Drop(L4ChecksumDrop::TooShort),
            L3::OtherTags => return Verdict::Gate(FORWARD_GATE),
            L3::At(off, t) => (off, t),
        };
        match ethertype {
            ETHERTYPE_IPV4 => {
                let mut ip = match Ipv4View::new_checked(&mut d[off..]) {
                    Ok(ip) => ip,
                    Err(Ipv4Error::BadHeader) => return Verdict::Drop(L4ChecksumDrop::BadIpHeader),
                    Err(_) => return Verdict::Drop(L4ChecksumDrop::TooShort),
                };
                let proto = ip.protocol();
                // A fragment's checksum covers the reassembled datagram: not checkable here.
                if ip.is_fragment() || (proto != PROTO_TCP && proto != PROTO_UDP) {
                    return Verdict::Gate(FORWARD_GATE);
                }
                let pseudo = checksum::pseudo_v4(ip.src_bytes(), ip.dst_bytes(), proto, 0);
                self.segment(ip.payload_mut(), proto, pseudo, false)
            }
            ETHERTYPE_IPV6 => {
                let Ok(mut p) = Ipv6Packet::new_checked(&mut d[off..]) else {
                    return Verdict::Drop(L4ChecksumDrop::TooShort);
                };
                if p.version() != 6 {
                    return Verdict::Drop(L4ChecksumDrop::BadIpHeader);
                }
                let nh: u8 = p.next_header().into();
                if nh != PROTO_TCP && nh != PROTO_UDP {
                    // Extension headers are not walked (BESS does not look at IPv6 at all).
                    return Verdict::Gate(FORWARD_GATE);
                }
                let pseudo =
                    checksum::pseudo_v6(&p.src_addr().octets(), &p.dst_addr().octets(), nh, 0);
                self.segment(p.payload_mut(), nh, pseudo, true)
            }
            _ => Verdict::Gate(FORWARD_GATE),
        }
    }
}

/// Big-endian 16 bits at `d[i..i + 2]`.
#[inline(always)]
fn be16(d: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([d[i], d[i + 1]])
}

impl L4Checksum {
    /// The usual frame, done without the general parsing: untagged IPv4 without options,
    /// not a fragment, carrying UDP whose length field fits the datagram. None for anything
    /// else (bad headers included), which [`L4Checksum::one`] then sorts out.
    #[inline(always)]
    fn udp4(&self, d: &mut [u8]) -> Option<Verdict<L4ChecksumDrop>> {
        const IP: usize = 14;
        const UDP: usize = IP + 20;
        if d.len() < UDP + 8 || be16(d, 12) != ETHERTYPE_IPV4 || d[IP] != 0x45 {
            return None;
        }
        let total = be16(d, IP + 2) as usize;
        // A fragment (more-fragments flag or an offset) is not checked: the general path.
        let frag = be16(d, IP + 6) & 0x3fff;
        if d[IP + 9] != PROTO_UDP || frag != 0 || total < 28 || total > d.len() - IP {
            return None;
        }
        let len = be16(d, UDP + 4) as usize;
        if len < 8 || len > total - 20 {
            return None;
        }
        let src: [u8; 4] = d[IP + 12..IP + 16].try_into().unwrap();
        let dst: [u8; 4] = d[IP + 16..IP + 20].try_into().unwrap();
        let pseudo = checksum::pseudo_v4(src, dst, PROTO_UDP, len as u32);
        let seg = &mut d[UDP..UDP + len];
        if self.verify {
            // A zero checksum means none was computed: allowed over IPv4.
            let ok = be16(seg, 6) == 0 || checksum::verify_l4(pseudo, seg);
            return Some(Verdict::Gate(if ok { FORWARD_GATE } else { FAIL_GATE }));
        }
        let c = checksum::udp_wire(checksum::l4(pseudo, seg, checksum::UDP_CSUM_OFFSET));
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        Some(Verdict::Gate(FORWARD_GATE))
    }
}

impl Module for L4Checksum {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| {
            let d = p.data_mut();
            match self.udp4(d) {
                Some(r) => r,
                None => self.one(d),
            }
        });
    }

    fn desc(&self) -> String {
        checksum_desc(self.verify)
    }
}

/// The L4Checksum class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "L4Checksum",
    name_template: "l4_checksum",
    help: "recomputes the TCP/UDP checksum over IPv4 and IPv6",
    arg_type: "L4ChecksumArg",
    arg_doc: &[
        "verify: bool — check instead of compute: correct checksums leave on gate 0, wrong ones on gate 1; packets not checked (not TCP/UDP, fragments, IPv6 extension headers) always leave on gate 0",
        CHECKSUM_HW_DOC,
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: L4ChecksumDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let verify = parse_checksum_arg(arg, "L4ChecksumArg")?;
        Ok(Instance::Exclusive(Box::new(L4Checksum { verify })))
    },
};

#[cfg(test)]
mod tests {
    use super::super::headers::test_util::{assert_hw_done_in_software, sort_frames};
    use super::*;
    use crate::headers::test_util::hex;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;
    use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket, UdpPacket};

    const U4: &str = "02000000 00020200 00000001 08004500 00210001 40004011 26c90a00 00010a00 000204d2 0050000d a2dd6865 6c6c6f";
    const U40: &str = "02000000 00020200 00000001 08004500 00210001 40004011 26c90a00 00010a00 000204d2 0050000d 00006865 6c6c6f";
    const T4: &str = "02000000 00020200 00000001 08004600 00310001 40004006 91bf0a00 00010a00 00029404 00009c40 01bb0000 00010000 00005002 0400001c 00006461 746121";
    const T40: &str = "02000000 00020200 00000001 08004600 00310001 40004006 91bf0a00 00010a00 00029404 00009c40 01bb0000 00010000 00005002 04000000 00006461 746121";
    const U4V: &str = "02000000 00020200 00000001 81000005 08004500 00210001 40004011 26c90a00 00010a00 000204d2 0050000d a2dd6865 6c6c6f";
    const U4V0: &str = "02000000 00020200 00000001 81000005 08004500 00210001 40004011 26c90a00 00010a00 000204d2 0050000d 00006865 6c6c6f";
    const U6: &str = "02000000 00020200 00000001 86dd6000 0000000b 11402001 0db80000 00000000 00000000 00012001 0db80000 00000000 00000000 000214e9 0035000b f80e7636 21";
    const U60: &str = "02000000 00020200 00000001 86dd6000 0000000b 11402001 0db80000 00000000 00000000 00012001 0db80000 00000000 00000000 000214e9 0035000b 00007636 21";
    const T6: &str = "02000000 00020200 00000001 86dd6000 00000014 06402001 0db80000 00000000 00000000 00012001 0db80000 00000000 00000000 000203e8 00160000 00010000 00005002 04004c6f 0000";
    const T60: &str = "02000000 00020200 00000001 86dd6000 00000014 06402001 0db80000 00000000 00000000 00012001 0db80000 00000000 00000000 000203e8 00160000 00010000 00005002 04000000 0000";
    const U4BAD: &str = "02000000 00020200 00000001 08004500 00210001 40004011 26c90a00 00010a00 000204d2 0050000d add26865 6c6c6f";
    const T4BAD: &str = "02000000 00020200 00000001 08004600 00310001 40004006 91bf0a00 00010a00 00029404 00009c40 01bb0000 00010000 00005002 0400001d 00006461 746121";
    const U6BAD: &str = "02000000 00020200 00000001 86dd6000 0000000b 11402001 0db80000 00000000 00000000 00012001 0db80000 00000000 00000000 000214e9 0035000b f7017636 21";
    const ICMP: &str = "02000000 00020200 00000001 08004500 001c0001 40004001 26de0a00 00010a00 00020800 f7fd0001 0001";
    const FRAG0: &str = "02000000 00020200 00000001 08004500 00210001 20004011 46c90a00 00010a00 000204d2 0050000d 00006865 6c6c6f";

    /// Independent check with smoltcp's TCP/UDP checksum code.
    fn l4_ok(f: &[u8]) -> bool {
        let (off, t) = if f[12] == 0x81 {
            (18, f[16])
        } else {
            (14, f[12])
        };
        if t == 0x86 {
            let p = Ipv6Packet::new_checked(&f[off..]).unwrap();
            let (s, d) = (IpAddress::Ipv6(p.src_addr()), IpAddress::Ipv6(p.dst_addr()));
            let pl = p.payload();
            return match u8::from(p.next_header()) {
                6 => TcpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
                _ => UdpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
            };
        }
        let p = Ipv4Packet::new_checked(&f[off..]).unwrap();
        let (s, d) = (IpAddress::Ipv4(p.src_addr()), IpAddress::Ipv4(p.dst_addr()));
        let pl = p.payload();
        match u8::from(p.next_header()) {
            6 => TcpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
            _ => UdpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d),
        }
    }

    #[test]
    fn computes_tcp_udp_checksums_v4_v6_tagged_and_padded() {
        let mut h = Harness::new();
        h.add(&CLASS, "c", &Value::Null).unwrap();
        let c0 = h.capture("c", 0);
        let mut padded = hex(U40);
        padded.resize(60, 0xee);
        let mut padded_want = hex(U4);
        padded_want.resize(60, 0xee);
        let mut input = [U40, T40, U4V0, U60, T60, U4BAD, T4BAD].map(hex).to_vec();
        input.push(padded);
        h.inject("c", 0, &input);
        let got = c0.take_data();
        let mut want = [U4, T4, U4V, U6, T6, U4, T4].map(hex).to_vec();
        want.push(padded_want);
        assert_eq!(got, want);
        for f in &got {
            assert!(l4_ok(f));
        }
        // Not checked: passed unchanged.
        h.inject("c", 0, &[hex(ICMP), hex(FRAG0)]);
        assert_eq!(c0.take_data(), [ICMP, FRAG0].map(hex));
    }

    #[test]
    fn verify_mode_sorts_by_checksum() {
        let input = [
            U4, U4BAD, T4, T4BAD, U4V, U40, U6, U6BAD, U60, T6, T60, ICMP, FRAG0,
        ];
        let (pass, fail) = sort_frames(&CLASS, &Value::map().with("verify", true), &input);
        // IPv4 UDP with checksum 0 means "none" and passes; over IPv6 it is invalid.
        assert_eq!(pass, [U4, T4, U4V, U40, U6, T6, ICMP, FRAG0].map(hex));
        assert_eq!(fail, [U4BAD, T4BAD, U6BAD, U60, T60].map(hex));
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "c", &Value::Null).unwrap();
        let c0 = h.capture("c", 0);
        let mut udp_len_big = hex(U40);
        udp_len_big[14 + 20 + 5] = 0x40;
        let mut udp_len_small = hex(U40);
        udp_len_small[14 + 20 + 5] = 0x04;
        let mut tcp_cut = hex(T40);
        tcp_cut[17] = 0x24; // IPv4 total length: 24 + 12 bytes of TCP
        tcp_cut.truncate(14 + 24 + 12);
        let mut v6_cut = hex(U60);
        v6_cut.truncate(14 + 40 + 4);
        let mut ihl = hex(U40);
        ihl[14] = 0x41;
        h.inject(
            "c",
            0,
            &[
                udp_len_big,
                udp_len_small,
                tcp_cut,
                v6_cut,
                ihl,
                hex("0200"),
            ],
        );
        assert!(c0.is_empty());
        assert_eq!(h.drops("c", "bad_udp_length"), 2);
        assert_eq!(h.drops("c", "too_short"), 3);
        assert_eq!(h.drops("c", "bad_ip_header"), 1);
    }

    #[test]
    fn hw_is_accepted_and_computed_in_software() {
        assert_hw_done_in_software(
            &CLASS,
            &[U40, T40, U60],
            &[U4, T4, U6],
            &[U4, T4, U6],
            U4BAD,
        );
    }
}

#[cfg(test)]
mod fast_path {
    use super::*;
    use proptest::prelude::*;

    /// An untagged IPv4/UDP frame of `payload` with header bytes overwritten by `edits`
    /// (offset, value): the usual frame, and all the near misses of the fast path.
    fn frame(payload: &[u8], edits: &[(usize, u8)], pad: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        let total = 28 + payload.len();
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
        ]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let ul = 8 + payload.len();
        f.extend_from_slice(&[
            0x12,
            0x34,
            0x08,
            0x68,
            (ul >> 8) as u8,
            ul as u8,
            0xab,
            0xcd,
        ]);
        f.extend_from_slice(payload);
        f.resize(f.len() + pad, 0x5a);
        for &(o, v) in edits {
            if o < f.len() {
                f[o] = v;
            }
        }
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Whatever the frame, the fast path gives the verdict and the bytes the general
        /// path gives (or leaves the frame to it).
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            payload in proptest::collection::vec(any::<u8>(), 0..120),
            edits in proptest::collection::vec(
                (prop::sample::select(vec![12usize, 13, 14, 16, 17, 20, 21, 23, 38, 39, 40, 41]), any::<u8>()),
                0..3),
            pad in 0usize..6,
            total_delta in -10i32..10,
            len_delta in -10i32..10,
            len_small in proptest::option::of(0u16..12),
            verify in any::<bool>(),
        ) {
            let m = L4Checksum { verify };
            let mut f = frame(&payload, &edits, pad);
            // Lengths near the edges as often as anywhere.
            for (at, delta) in [(16usize, total_delta), (38, len_delta)] {
                let v = (be16(&f, at) as i32 + delta).clamp(0, 0xffff) as u16;
                f[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            if let Some(l) = len_small {
                f[38..40].copy_from_slice(&l.to_be_bytes());
            }
            let (mut a, mut b) = (f.clone(), f);
            let fast = m.udp4(&mut a);
            let general = m.one(&mut b);
            if let Some(v) = fast {
                prop_assert_eq!(v, general);
                prop_assert_eq!(a, b);
            }
        }
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;
    use proptest::prelude::*;
    use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket, UdpPacket};

    /// An untagged or 802.1Q-tagged IPv4/IPv6 TCP/UDP frame with a garbage L4 checksum.
    fn frame(v6: bool, tcp: bool, vlan: bool, garbage: u16, payload: &[u8]) -> (Vec<u8>, usize) {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        let l3 = f.len() + 2;
        let hdr = if tcp { 20 } else { 8 };
        let seg = hdr + payload.len();
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(seg as u16).to_be_bytes());
            f.push(if tcp { 6 } else { 17 });
            f.push(64);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&((20 + seg) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 1, 0, 0, 64, if tcp { 6 } else { 17 }, 0, 0]);
            f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
            Ipv4Packet::new_unchecked(&mut f[l3..]).fill_checksum();
        }
        let mut s = vec![0u8; hdr];
        s[0..4].copy_from_slice(&[0x12, 0x34, 0x00, 0x50]);
        if tcp {
            s[12] = 0x50;
            s[16..18].copy_from_slice(&garbage.to_be_bytes());
        } else {
            s[4..6].copy_from_slice(&(seg as u16).to_be_bytes());
            s[6..8].copy_from_slice(&garbage.to_be_bytes());
        }
        f.extend_from_slice(&s);
        f.extend_from_slice(payload);
        (f, l3)
    }

    fn smoltcp_ok(f: &[u8], l3: usize, v6: bool, tcp: bool) -> bool {
        let (s, d, pl) = if v6 {
            let p = Ipv6Packet::new_checked(&f[l3..]).unwrap();
            (
                IpAddress::Ipv6(p.src_addr()),
                IpAddress::Ipv6(p.dst_addr()),
                &f[l3 + 40..],
            )
        } else {
            let p = Ipv4Packet::new_checked(&f[l3..]).unwrap();
            (
                IpAddress::Ipv4(p.src_addr()),
                IpAddress::Ipv4(p.dst_addr()),
                &f[l3 + 20..],
            )
        };
        if tcp {
            TcpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d)
        } else {
            UdpPacket::new_checked(pl).unwrap().verify_checksum(&s, &d)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the checksum field held, compute mode writes one smoltcp accepts, and
        /// verify mode then passes the packet on gate 0 — and fails it once a byte changes.
        #[test]
        fn compute_then_verify(
            v6 in any::<bool>(),
            tcp in any::<bool>(),
            vlan in any::<bool>(),
            garbage in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 1..80),
            flip in any::<prop::sample::Index>(),
        ) {
            let (f, l3) = frame(v6, tcp, vlan, garbage, &payload);
            let mut h = Harness::new();
            h.add(&CLASS, "c", &Value::Null).unwrap();
            h.add(&CLASS, "v", &Value::map().with("verify", true)).unwrap();
            h.connect("c", 0, "v", 0).unwrap();
            let good = h.capture("v", 0);
            let bad = h.capture("v", 1);
            h.inject("c", 0, &[f]);
            let out = good.take_data();
            prop_assert_eq!(out.len(), 1);
            prop_assert!(smoltcp_ok(&out[0], l3, v6, tcp));
            let mut broken = out[0].clone();
            let i = broken.len() - payload.len() + flip.index(payload.len());
            broken[i] ^= 0x01;
            h.inject("v", 0, &[broken]);
            prop_assert_eq!(bad.len(), 1);
        }
    }
}

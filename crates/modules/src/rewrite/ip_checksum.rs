//! IPChecksum: computes (or verifies) the IPv4 header checksum.
use super::headers::{checksum_desc, parse_checksum_arg, CHECKSUM_HW_DOC};
use crate::checksum;
use crate::headers::{l3_after_tags, Ipv4Error, Ipv4Header, ETHERTYPE_IPV4, L3};
use crate::util::{process_each, Verdict};
use bessemer_core::{Context, Instance, Module, ModuleClass, PacketBatch};

bessemer_core::drop_reasons! {
    /// Why IPChecksum drops packets.
    pub enum IpChecksumDrop {
        TooShort = "too_short",
        BadIpHeader = "bad_ip_header",
    }
}
/// Gate for packets whose checksum is correct, or that are not IPv4.
const FORWARD_GATE: u16 = 0;
/// Gate for IPv4 packets whose checksum is wrong (verify mode).
const FAIL_GATE: u16 = 1;

/// Writes correct IPv4 header checksums, or in verify mode sorts packets by whether theirs
/// is correct. Looks past one 802.1Q tag or an 802.1ad + 802.1Q pair, as BESS.
pub struct IpChecksum {
    verify: bool,
}

impl IpChecksum {
    fn one(&self, d: &mut [u8]) -> Verdict<IpChecksumDrop> {
        let off = match l3_after_tags(d) {
            L3::TooShort => return Verdict::Drop(IpChecksumDrop::TooShort),
            L3::OtherTags => return Verdict::Gate(FORWARD_GATE),
            L3::At(off, ETHERTYPE_IPV4) => off,
            L3::At(..) => return Verdict::Gate(FORWARD_GATE),
        };
        let mut hdr = match Ipv4Header::new_checked(&mut d[off..]) {
            Ok(h) => h,
            Err(Ipv4Error::BadHeader) => return Verdict::Drop(IpChecksumDrop::BadIpHeader),
            Err(_) => return Verdict::Drop(IpChecksumDrop::TooShort),
        };
        if self.verify {
            if hdr.verify_checksum() {
                Verdict::Gate(FORWARD_GATE)
            } else {
                Verdict::Gate(FAIL_GATE)
            }
        } else {
            hdr.fill_checksum();
            Verdict::Gate(FORWARD_GATE)
        }
    }
}

impl IpChecksum {
    /// The usual frame, done without the general parsing: untagged IPv4 without options.
    /// None for anything else, which [`IpChecksum::one`] then sorts out.
    #[inline(always)]
    fn plain(&self, d: &mut [u8]) -> Option<Verdict<IpChecksumDrop>> {
        if d.len() < 34 || d[12..14] != [0x08, 0x00] || d[14] != 0x45 {
            return None;
        }
        let hdr: &mut [u8; 20] = (&mut d[14..34]).try_into().unwrap();
        if self.verify {
            let ok = checksum::verify_ipv4_header(hdr);
            return Some(Verdict::Gate(if ok { FORWARD_GATE } else { FAIL_GATE }));
        }
        let c = checksum::ipv4_header(hdr);
        hdr[checksum::IPV4_CSUM_OFFSET..checksum::IPV4_CSUM_OFFSET + 2]
            .copy_from_slice(&c.to_be_bytes());
        Some(Verdict::Gate(FORWARD_GATE))
    }
}

impl Module for IpChecksum {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| {
            let d = p.data_mut();
            match self.plain(d) {
                Some(r) => r,
                None => self.one(d),
            }
        });
    }

    fn desc(&self) -> String {
        checksum_desc(self.verify)
    }
}

/// The IPChecksum class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPChecksum",
    name_template: "ip_checksum",
    help: "recomputes the IPv4 checksum",
    arg_type: "IPChecksumArg",
    arg_doc: &[
        "verify: bool — check instead of compute: correct checksums (and non-IPv4 frames) leave on gate 0, wrong ones on gate 1",
        CHECKSUM_HW_DOC,
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: IpChecksumDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let verify = parse_checksum_arg(arg, "IPChecksumArg")?;
        Ok(Instance::Exclusive(Box::new(IpChecksum { verify })))
    },
};

#[cfg(test)]
mod tests {
    use super::super::headers::test_util::{assert_hw_done_in_software, sort_frames};
    use super::*;
    use crate::headers::test_util::hex;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    const GOOD: &str = "02000000 00020200 00000001 08004500 001e0001 40004011 26cc0a00 00010a00 000204d2 0050000a 7e4c6869";
    const GOOD0: &str = "02000000 00020200 00000001 08004500 001e0001 40004011 00000a00 00010a00 000204d2 0050000a 7e4c6869";
    const VLAN: &str = "02000000 00020200 00000001 81000005 08004500 001e0001 40004011 26cc0a00 00010a00 000204d2 0050000a 7e4c6869";
    const VLAN0: &str = "02000000 00020200 00000001 81000005 08004500 001e0001 40004011 00000a00 00010a00 000204d2 0050000a 7e4c6869";
    const QINQ: &str = "02000000 00020200 00000001 88a80007 81000005 08004500 001e0001 40004011 26cc0a00 00010a00 000204d2 0050000a 7e4c6869";
    const QINQ0: &str = "02000000 00020200 00000001 88a80007 81000005 08004500 001e0001 40004011 00000a00 00010a00 000204d2 0050000a 7e4c6869";
    const OPT: &str = "02000000 00020200 00000001 08004600 002c0001 40004006 91c40a00 00010a00 00029404 00000001 00020000 00010000 00005002 040097dc 0000";
    const OPT0: &str = "02000000 00020200 00000001 08004600 002c0001 40004006 00000a00 00010a00 00029404 00000001 00020000 00010000 00005002 040097dc 0000";
    const BAD: &str = "02000000 00020200 00000001 08004500 001e0001 40004011 34f80a00 00010a00 000204d2 0050000a 7e4c6869";
    /// 802.1ad directly followed by IPv4: BESS does not look inside.
    const QOTHER0: &str = "02000000 00020200 00000001 88a80007 08004500 001e0001 40004011 00000a00 00010a00 000204d2 0050000a 7e4c6869";
    const ARP: &str = "ffffffff ffff0200 00000001 08060001 08000604 00010200 00000001 0a000001 00000000 00000a00 0002";

    fn verified(f: &[u8], off: usize) -> bool {
        smoltcp::wire::Ipv4Packet::new_checked(&f[off..])
            .unwrap()
            .verify_checksum()
    }

    #[test]
    fn computes_checksums_behind_tags_and_options() {
        let mut h = Harness::new();
        h.add(&CLASS, "c", &Value::Null).unwrap();
        let c0 = h.capture("c", 0);
        let c1 = h.capture("c", 1);
        let input = [GOOD0, VLAN0, QINQ0, OPT0, BAD, QOTHER0, ARP].map(hex);
        h.inject("c", 0, &input);
        let got = c0.take_data();
        assert_eq!(got, [GOOD, VLAN, QINQ, OPT, GOOD, QOTHER0, ARP].map(hex));
        for (f, off) in got.iter().zip([14, 18, 22, 14, 14]) {
            assert!(verified(f, off));
        }
        assert!(c1.is_empty());
    }

    #[test]
    fn verify_mode_sorts_by_checksum() {
        let input = [GOOD, BAD, VLAN, QINQ0, OPT, GOOD0, QOTHER0, ARP];
        let (pass, fail) = sort_frames(&CLASS, &Value::map().with("verify", true), &input);
        assert_eq!(pass, [GOOD, VLAN, OPT, QOTHER0, ARP].map(hex));
        assert_eq!(fail, [BAD, QINQ0, GOOD0].map(hex));
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "c", &Value::Null).unwrap();
        let c0 = h.capture("c", 0);
        let mut cut = hex(OPT0);
        cut.truncate(14 + 22);
        let mut ihl = hex(GOOD0);
        ihl[14] = 0x44;
        let mut v6 = hex(GOOD0);
        v6[14] = 0x65;
        h.inject(
            "c",
            0,
            &[
                hex("02000000 00020200 000000"),
                hex("02000000 00020200 00000001 8100"),
                cut,
                ihl,
                v6,
            ],
        );
        assert!(c0.is_empty());
        assert_eq!(h.drops("c", "too_short"), 3);
        assert_eq!(h.drops("c", "bad_ip_header"), 2);
        let e = h
            .add(&CLASS, "x", &Value::map().with("verify", "yes"))
            .unwrap_err();
        assert!(e.msg.contains("IPChecksumArg.verify"), "{}", e.msg);
    }

    #[test]
    fn hw_is_accepted_and_computed_in_software() {
        assert_hw_done_in_software(
            &CLASS,
            &[GOOD0, VLAN0, BAD],
            &[GOOD, VLAN, GOOD],
            &[GOOD, VLAN, GOOD],
            BAD,
        );
    }
}

#[cfg(test)]
mod fast_path {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Whatever the frame, the fast path gives the verdict and the bytes the general
        /// path gives (or leaves the frame to it).
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            mut f in proptest::collection::vec(any::<u8>(), 30..70),
            ethertype in prop::sample::select(vec![[0x08u8, 0x00], [0x81, 0x00], [0x86, 0xdd]]),
            vihl in prop::sample::select(vec![0x45u8, 0x46, 0x44, 0x55]),
            fix in any::<bool>(),
            verify in any::<bool>(),
        ) {
            f[12..14].copy_from_slice(&ethertype);
            f[14] = vihl;
            if fix && f.len() >= 34 {
                let c = checksum::ipv4_header(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            let m = IpChecksum { verify };
            let (mut a, mut b) = (f.clone(), f);
            let fast = m.plain(&mut a);
            let general = m.one(&mut b);
            if let Some(v) = fast {
                prop_assert_eq!(v, general);
                prop_assert_eq!(a, b);
            }
        }
    }
}

//! UpdateTTL: decrements the IPv4 TTL, updating the header checksum incrementally.
use crate::headers::{ipv4_in_frame_mut, Ipv4Error};
use crate::util::{plain_ipv4, process_each, Verdict};
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

bessemer_core::drop_reasons! {
    /// Why UpdateTTL drops: the IPv4 header errors, then an expiring TTL.
    pub enum UpdateTtlDrop {
        Ipv4(Ipv4Error),
        /// TTL 0 or 1 on arrival.
        TtlExpired = "ttl_expired",
    }
}

/// Decrements the TTL of IPv4 packets; packets arriving with TTL 0 or 1 are dropped (as BESS:
/// they would leave with TTL 0).
pub struct UpdateTtl;

impl Module for UpdateTtl {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        // The common batch: every frame plain IPv4 (20-byte header) with a TTL above 1. The
        // test reads only; then each TTL is decremented without the general path's checks
        // and the batch leaves whole, as the general path would send it.
        let fast = batch.pkts().iter().fold(true, |ok, p| {
            ok & (plain_ipv4(p.data()) && p.data()[22] > 1)
        });
        if fast {
            for p in batch.pkts_mut() {
                decrement_ttl(p.data_mut());
            }
            return ctx.forward(0, batch);
        }
        Self::general(ctx, batch);
    }
}

/// Decrements the TTL of plain IPv4 frame `d` (see [`plain_ipv4`]), whose TTL is above 1,
/// updating the header checksum incrementally as [`crate::headers::Ipv4View::decrement_ttl`].
#[inline(always)]
fn decrement_ttl(d: &mut [u8]) {
    // TTL shares a 16-bit checksum word with the protocol byte.
    let old = u16::from_be_bytes([d[22], d[23]]);
    d[22] -= 1;
    let hc = u16::from_be_bytes([d[24], d[25]]);
    let hc = crate::checksum::update16(hc, old, old - 0x100);
    d[24..26].copy_from_slice(&hc.to_be_bytes());
}

impl UpdateTtl {
    /// Any batch, packet by packet.
    fn general(ctx: &mut Context, batch: &mut PacketBatch) {
        process_each(ctx, batch, |p| {
            let mut ip = match ipv4_in_frame_mut(p.data_mut()) {
                Ok(ip) => ip,
                Err(e) => return Verdict::Drop(e.into()),
            };
            if ip.ttl() <= 1 {
                return Verdict::Drop(UpdateTtlDrop::TtlExpired);
            }
            ip.decrement_ttl();
            Verdict::Gate(0)
        });
    }
}

/// The UpdateTTL class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "UpdateTTL",
    name_template: "update_ttl",
    help: "decreases the IP TTL field by 1",
    arg_type: "EmptyArg",
    arg_doc: &["(no fields)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: UpdateTtlDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(UpdateTtl)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::{checksums_ok, hex};
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    const TTL64: &str = "02000000 00020200 00000001 08004500 001f0001 40004011 6f1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL63: &str = "02000000 00020200 00000001 08004500 001f0001 40003f11 701b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL2: &str = "02000000 00020200 00000001 08004500 001f0001 40000211 ad1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL1: &str = "02000000 00020200 00000001 08004500 001f0001 40000111 ae1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL0: &str = "02000000 00020200 00000001 08004500 001f0001 40000011 af1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL255: &str = "02000000 00020200 00000001 08004500 001f0001 4000ff11 b01a0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const TTL254: &str = "02000000 00020200 00000001 08004500 001f0001 4000fe11 b11a0a00 0001c0a8 010904d2 0035000b 6abc6162 63";
    const OPT63: &str = "02000000 00020200 00000001 08004600 00230001 40003f11 6d160a00 0001c0a8 01090101 010004d2 0035000b 6abc6162 63";
    const OPT62: &str = "02000000 00020200 00000001 08004600 00230001 40003e11 6e160a00 0001c0a8 01090101 010004d2 0035000b 6abc6162 63";

    #[test]
    fn decrements_ttl_with_valid_checksum_and_drops_expired() {
        let mut h = Harness::new();
        h.add(&CLASS, "t", &Value::Null).unwrap();
        let c = h.capture("t", 0);
        h.inject(
            "t",
            0,
            &[
                hex(TTL64),
                hex(TTL2),
                hex(TTL1),
                hex(TTL0),
                hex(TTL255),
                hex(OPT63),
            ],
        );
        let got = c.take_data();
        assert_eq!(got, vec![hex(TTL63), hex(TTL1), hex(TTL254), hex(OPT62)]);
        for g in &got {
            assert!(checksums_ok(g, 14));
        }
        assert_eq!(h.drops("t", "ttl_expired"), 2);
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "t", &Value::Null).unwrap();
        let c = h.capture("t", 0);
        let mut cut = hex(TTL64);
        cut.truncate(30);
        let mut vlan = hex(TTL64);
        vlan[12] = 0x81;
        let mut ihl = hex(TTL64);
        ihl[14] = 0x43;
        h.inject("t", 0, &[cut, vlan, ihl, vec![0; 10]]);
        assert!(c.is_empty());
        assert_eq!(h.drops("t", "too_short"), 2);
        assert_eq!(h.drops("t", "not_ipv4"), 1);
        assert_eq!(h.drops("t", "bad_ip_header"), 1);
    }

    /// UpdateTtl through its general path only: the reference for the batch fast path.
    struct General;

    impl Module for General {
        fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
            UpdateTtl::general(ctx, batch);
        }
    }

    static GENERAL: ModuleClass = ModuleClass {
        name: "UpdateTtlGeneral",
        create: |_, _| Ok(Instance::Exclusive(Box::new(General))),
        ..CLASS
    };

    fn through(class: &'static ModuleClass, batches: &[Vec<Vec<u8>>]) -> (Vec<Vec<u8>>, Vec<u64>) {
        let mut h = Harness::new();
        h.add(class, "m", &Value::map()).unwrap();
        let c = h.capture("m", 0);
        let mut out = Vec::new();
        for b in batches {
            h.inject("m", 0, b);
            out.extend(c.take_data());
        }
        let drops = UpdateTtlDrop::NAMES
            .iter()
            .map(|r| h.drops("m", r))
            .collect();
        assert_eq!(h.in_use(), 0);
        (out, drops)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Batches of plain IPv4 frames, some with one field changed or cut short: the
        /// batch fast path sends and drops exactly what the general path does.
        #[test]
        fn fast_path_matches_the_general_path(
            batches in proptest::collection::vec(
                (
                    proptest::prelude::any::<bool>(),
                    proptest::collection::vec((0u8..16, proptest::prelude::any::<u8>()), 1..=bessemer_core::MAX_BURST),
                ),
                1..4,
            ),
        ) {
            let frames = crate::headers::test_util::mutated_ipv4_batches(&batches);
            proptest::prop_assert_eq!(through(&CLASS, &frames), through(&GENERAL, &frames));
        }
    }
}

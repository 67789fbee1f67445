//! UpdateTTL: decrements the IPv4 TTL, updating the header checksum incrementally.
use crate::headers::{ipv4_in_frame_mut, Ipv4Error};
use crate::util::{process_each, Verdict};
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
}

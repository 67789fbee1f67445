//! IPSwap: swaps the IPv4 source and destination addresses, and the TCP/UDP ports.
use crate::checksum::{PROTO_TCP, PROTO_UDP};
use crate::headers::{ipv4_in_frame_mut, Ipv4Error, PortsView};
use crate::util::{plain_ipv4, process_each, Verdict};
use bessemer_core::{Args, Context, Instance, Module, ModuleClass, PacketBatch};

/// Swaps addresses (and TCP/UDP ports) of IPv4 packets. Both swaps leave the IPv4 and L4
/// checksums valid: the ones'-complement sum does not depend on the order of the words.
pub struct IpSwap;

impl Module for IpSwap {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        // The common batch: every frame plain IPv4 (20-byte header) whose ports, where it
        // has them, lie inside its total length. The test reads only; then each frame is
        // swapped without the general path's checks and the batch leaves whole, as the
        // general path would send it.
        let fast = batch.pkts().iter().fold(true, |ok, p| {
            let d = p.data();
            ok & (plain_ipv4(d) && (!has_ports(d) || u16::from_be_bytes([d[16], d[17]]) >= 24))
        });
        if fast {
            for p in batch.pkts_mut() {
                swap(p.data_mut());
            }
            return ctx.forward(0, batch);
        }
        Self::general(ctx, batch);
    }
}

/// True when plain IPv4 frame `d` (see [`plain_ipv4`]) is TCP or UDP and not a later
/// fragment: where the general path swaps ports.
#[inline(always)]
fn has_ports(d: &[u8]) -> bool {
    (d[23] == PROTO_TCP || d[23] == PROTO_UDP) && u16::from_be_bytes([d[20], d[21]]) & 0x1fff == 0
}

/// Swaps the addresses of plain IPv4 frame `d`, and its ports where [`has_ports`] (which
/// the caller checked lie inside the total length, so inside `d`).
#[inline(always)]
fn swap(d: &mut [u8]) {
    let h: &mut [u8; 38] = match d.get_mut(..38) {
        Some(h) => h.try_into().unwrap(),
        // A frame shorter than 38 bytes has no ports inside its total length.
        None => {
            let (src, dst) = d[26..34].split_at_mut(4);
            return src.swap_with_slice(dst);
        }
    };
    let addrs = u64::from_ne_bytes(h[26..34].try_into().unwrap());
    h[26..34].copy_from_slice(&addrs.rotate_left(32).to_ne_bytes());
    if has_ports(h) {
        let ports = u32::from_ne_bytes(h[34..38].try_into().unwrap());
        h[34..38].copy_from_slice(&ports.rotate_left(16).to_ne_bytes());
    }
}

impl IpSwap {
    /// Any batch, packet by packet.
    fn general(ctx: &mut Context, batch: &mut PacketBatch) {
        process_each(ctx, batch, |p| {
            let mut ip = match ipv4_in_frame_mut(p.data_mut()) {
                Ok(ip) => ip,
                Err(e) => return Verdict::Drop(e),
            };
            let proto = ip.protocol();
            // Later fragments carry no L4 header: only the addresses are swapped (as for
            // ICMP and other protocols).
            let has_ports = (proto == PROTO_TCP || proto == PROTO_UDP) && ip.has_l4_header();
            if has_ports {
                match PortsView::new_checked(ip.payload_mut()) {
                    Ok(mut ports) => ports.swap_ports(),
                    Err(e) => return Verdict::Drop(e.into()),
                }
            }
            ip.swap_addrs();
            Verdict::Gate(0)
        });
    }
}

/// The IPSwap class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPSwap",
    name_template: "ipswap",
    help: "swaps source/destination IP addresses and L4 ports",
    arg_type: "EmptyArg",
    arg_doc: &["(no fields)"],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: Ipv4Error::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(IpSwap)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::{checksums_ok, hex};
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn swaps_addresses_and_ports_keeping_checksums() {
        let cases = [
            // UDP
            ("02000000 00020200 00000001 08004500 001f0001 40004011 6f1b0a00 0001c0a8 010904d2 0035000b 6abc6162 63",
             "02000000 00020200 00000001 08004500 001f0001 40004011 6f1bc0a8 01090a00 00010035 04d2000b 6abc6162 63"),
            // TCP behind a 4-byte IP option (IHL 6)
            ("02000000 00020200 00000001 08004600 002c0001 40004006 6c180a00 0001c0a8 01090101 01009c40 01bb0000 00010000 00005002 04004234 0000",
             "02000000 00020200 00000001 08004600 002c0001 40004006 6c18c0a8 01090a00 00010101 010001bb 9c400000 00010000 00005002 04004234 0000"),
            // ICMP: addresses only
            ("02000000 00020200 00000001 08004500 00200001 40004001 6f2a0a00 0001c0a8 01090800 19270007 00017069 6e67",
             "02000000 00020200 00000001 08004500 00200001 40004001 6f2ac0a8 01090a00 00010800 19270007 00017069 6e67"),
            // A later UDP fragment: no L4 header, addresses only
            ("02000000 00020200 00000001 08004500 001c0001 00014011 af1d0a00 0001c0a8 01091122 33445566 7788",
             "02000000 00020200 00000001 08004500 001c0001 00014011 af1dc0a8 01090a00 00011122 33445566 7788"),
        ];
        let mut h = Harness::new();
        h.add(&CLASS, "s", &Value::Null).unwrap();
        let c = h.capture("s", 0);
        let mut padded = hex(cases[0].0);
        padded.resize(60, 0);
        let mut padded_want = hex(cases[0].1);
        padded_want.resize(60, 0);
        let mut input: Vec<Vec<u8>> = cases.iter().map(|(i, _)| hex(i)).collect();
        input.push(padded);
        h.inject("s", 0, &input);
        let got = c.take_data();
        let mut want: Vec<Vec<u8>> = cases.iter().map(|(_, o)| hex(o)).collect();
        want.push(padded_want);
        assert_eq!(got, want);
        for g in &got {
            assert!(checksums_ok(g, 14));
        }
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "s", &Value::Null).unwrap();
        let c = h.capture("s", 0);
        let eth = "02000000 00020200 00000001";
        h.inject(
            "s",
            0,
            &[
                hex("0200000000020200"),                       // too short for Ethernet
                hex(&format!("{eth} 0800 4500001f")),          // IPv4 header cut
                hex(&format!("{eth} 86dd 60000000 00000000")), // IPv6
                hex(&format!(
                    "{eth} 0800 4400001c 00010000 40110000 0a000001 c0a80109 11223344"
                )), // IHL 4
                hex(&format!(
                    "{eth} 0800 4500 0064 00010000 40110000 0a000001 c0a80109 11223344"
                )), // total length past the frame
                hex(&format!(
                    "{eth} 0800 45000016 00010000 40110000 0a000001 c0a80109 1122"
                )), // UDP without room for ports
            ],
        );
        assert!(c.is_empty());
        assert_eq!(h.drops("s", "too_short"), 4);
        assert_eq!(h.drops("s", "not_ipv4"), 1);
        assert_eq!(h.drops("s", "bad_ip_header"), 1);
    }

    /// IpSwap through its general path only: the reference for the batch fast path.
    struct General;

    impl Module for General {
        fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
            IpSwap::general(ctx, batch);
        }
    }

    static GENERAL: ModuleClass = ModuleClass {
        name: "IpSwapGeneral",
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
        let drops = Ipv4Error::NAMES.iter().map(|r| h.drops("m", r)).collect();
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

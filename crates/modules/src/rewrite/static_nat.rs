//! StaticNAT: one-to-one translation between internal and external address ranges.
//!
//! Input gate 0 carries internal → external traffic (source addresses rewritten), which
//! leaves on output gate 1; input gate 1 carries external → internal traffic (destination
//! addresses rewritten), which leaves on output gate 0, as BESS. Packets whose address is in
//! no range pass untranslated on the same gates.
use super::headers::{ipv4_string, nat_commands, parse_ipv4};
use crate::headers::{ipv4_in_frame_mut, AddrField, Ipv4Error};
use crate::util::{parse_list, process_each, Verdict};
use bessemer_core::{
    Args, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

#[derive(Clone, Copy, Debug)]
struct Pair {
    int: u32,
    ext: u32,
    size: u32,
}

/// The static NAT.
pub struct StaticNat {
    pairs: Vec<Pair>,
}

impl StaticNat {
    fn one(&self, d: &mut [u8], outbound: bool) -> Verdict<Ipv4Error> {
        let gate = if outbound { 1 } else { 0 };
        let mut ip = match ipv4_in_frame_mut(d) {
            Ok(ip) => ip,
            Err(e) => return Verdict::Drop(e),
        };
        let field = if outbound {
            AddrField::Src
        } else {
            AddrField::Dst
        };
        let old = ip.addr(field);
        let Some(new) = self.pairs.iter().find_map(|p| {
            let (from, to) = if outbound {
                (p.int, p.ext)
            } else {
                (p.ext, p.int)
            };
            (old.wrapping_sub(from) < p.size).then(|| to + (old - from))
        }) else {
            return Verdict::Gate(gate);
        };
        // Later fragments carry no L4 header; the first one carries the checksum of the
        // whole datagram, which the incremental update keeps right.
        match ip.rewrite_addr(field, new) {
            Ok(()) => Verdict::Gate(gate),
            Err(e) => Verdict::Drop(e.into()),
        }
    }

    fn initial_arg(&self) -> Value {
        let range = |start: u32, size: u32| {
            Value::map()
                .with("start", ipv4_string(start))
                .with("end", ipv4_string(start + size - 1))
        };
        Value::map().with(
            "pairs",
            Value::List(
                self.pairs
                    .iter()
                    .map(|p| {
                        Value::map()
                            .with("int_range", range(p.int, p.size))
                            .with("ext_range", range(p.ext, p.size))
                    })
                    .collect(),
            ),
        )
    }
}

fn parse_range(v: Option<&Value>, m: &str) -> Result<(u32, u32)> {
    let v = v.ok_or_else(|| Error::invalid(format!("{m} is required")))?;
    let mut a = Args::new(v, m)?;
    let start = a.str("start")?.unwrap_or("");
    let end = a.str("end")?.unwrap_or("");
    a.finish()?;
    let start = parse_ipv4(start, &format!("{m}.start"))?;
    let end = parse_ipv4(end, &format!("{m}.end"))?;
    if start > end {
        return Err(Error::invalid(format!(
            "{m}: start {} is above end {}",
            ipv4_string(start),
            ipv4_string(end)
        )));
    }
    if end == u32::MAX {
        return Err(Error::invalid(format!(
            "{m}.end: cannot map the broadcast address"
        )));
    }
    Ok((start, end))
}

fn parse(arg: &Value) -> Result<Vec<Pair>> {
    parse_list(arg, "StaticNATArg", "pairs", |p, m| {
        let mut a = Args::new(p, m)?;
        let int = parse_range(a.message("int_range")?, &format!("{m}.int_range"))?;
        let ext = parse_range(a.message("ext_range")?, &format!("{m}.ext_range"))?;
        a.finish()?;
        if int.1 - int.0 != ext.1 - ext.0 {
            return Err(Error::invalid(format!(
                "{m}: internal and external address ranges differ in size"
            )));
        }
        Ok(Pair {
            int: int.0,
            ext: ext.0,
            size: int.1 - int.0 + 1,
        })
    })
}

impl Module for StaticNat {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        process_each(ctx, batch, |p| self.one(p.data_mut(), igate == 0));
    }

    fn desc(&self) -> String {
        format!("{} pairs", self.pairs.len())
    }
}

/// The StaticNAT class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "StaticNAT",
    name_template: "static_nat",
    help: "Static network address translator",
    arg_type: "StaticNATArg",
    arg_doc: &[
        "pairs: [{int_range: {start: string, end: string}, ext_range: {start: string, end: string}}] — equal-sized inclusive IPv4 ranges mapped one to one (first matching pair wins)",
        "gates: input 0 = internal→external (source rewritten, out of gate 1), input 1 = external→internal (destination rewritten, out of gate 0); unmatched packets pass unchanged",
    ],
    igates: 2,
    ogates: 2,
    commands: nat_commands!(StaticNat, "StaticNATArg"),
    drop_reasons: Ipv4Error::NAMES,
    max_workers: 1,
    create: |_, arg| {
        let pairs = parse(arg)?;
        Ok(Instance::Exclusive(Box::new(StaticNat { pairs })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::{checksums_ok, hex};
    use bessemer_core::testing::Harness;

    const UDP_F: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bb0a00 00050808 080804d2 00350009 6fc071";
    const UDP_F_X: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 eeb9cb00 71050808 080804d2 00350009 3dbf71";
    const TCP_R: &str = "02000000 00020200 00000001 08004500 00290001 40004006 edf50808 0808cb00 71c801bb 15b30000 00010000 00005002 0400cf99 000078";
    const TCP_R_X: &str = "02000000 00020200 00000001 08004500 00290001 40004006 1ff70808 08080a00 00c801bb 15b30000 00010000 00005002 0400019b 000078";
    const ICMP_F: &str = "02000000 00020200 00000001 08004500 00200001 40004001 20c60a00 00070808 08080800 19250009 00017069 6e67";
    const ICMP_F_X: &str = "02000000 00020200 00000001 08004500 00200001 40004001 eec4cb00 71070808 08080800 19250009 00017069 6e67";
    const UNMATCHED: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 6a16c0a8 00010808 08080001 00020009 be1f71";
    const NOCSUM_F: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bb0a00 00050808 080804d2 00350009 000071";
    const NOCSUM_F_X: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 eeb9cb00 71050808 080804d2 00350009 000071";
    const FIRST_FRAG: &str = "02000000 00020200 00000001 08004500 001d0001 20004011 40bb0a00 00050808 080804d2 00350009 6fc071";
    const FIRST_FRAG_X: &str = "02000000 00020200 00000001 08004500 001d0001 20004011 0ebacb00 71050808 080804d2 00350009 3dbf71";
    const LATER_FRAG: &str = "02000000 00020200 00000001 08004500 001c0001 00014011 60bb0a00 00050808 08081122 33445566 7788";
    const LATER_FRAG_X: &str = "02000000 00020200 00000001 08004500 001c0001 00014011 2ebacb00 71050808 08081122 33445566 7788";
    const SECOND_PAIR: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 7eaeac10 00010808 08080001 00020009 d2b771";
    const SECOND_PAIR_X: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 0081c633 640b0808 08080001 00020009 548a71";

    fn pair(i: (&str, &str), e: (&str, &str)) -> Value {
        Value::map()
            .with(
                "int_range",
                Value::map().with("start", i.0).with("end", i.1),
            )
            .with(
                "ext_range",
                Value::map().with("start", e.0).with("end", e.1),
            )
    }

    fn arg() -> Value {
        Value::map().with(
            "pairs",
            Value::List(vec![
                pair(("10.0.0.0", "10.0.0.255"), ("203.0.113.0", "203.0.113.255")),
                pair(
                    ("172.16.0.0", "172.16.0.9"),
                    ("198.51.100.10", "198.51.100.19"),
                ),
            ]),
        )
    }

    #[test]
    fn translates_both_directions_byte_exact() {
        let mut h = Harness::new();
        h.add(&CLASS, "s", &arg()).unwrap();
        let back = h.capture("s", 0);
        let out = h.capture("s", 1);
        let fwd_in = [
            UDP_F,
            ICMP_F,
            UNMATCHED,
            NOCSUM_F,
            FIRST_FRAG,
            LATER_FRAG,
            SECOND_PAIR,
        ];
        h.inject("s", 0, &fwd_in.map(hex));
        let got = out.take_data();
        let fwd_want = [
            UDP_F_X,
            ICMP_F_X,
            UNMATCHED,
            NOCSUM_F_X,
            FIRST_FRAG_X,
            LATER_FRAG_X,
            SECOND_PAIR_X,
        ];
        assert_eq!(got, fwd_want.map(hex));
        h.inject("s", 1, &[hex(TCP_R), hex(UNMATCHED)]);
        let got_back = back.take_data();
        assert_eq!(got_back, [TCP_R_X, UNMATCHED].map(hex));
        for f in got.iter().chain(&got_back) {
            assert!(checksums_ok(f, 14));
        }
        assert!(out.is_empty() && back.is_empty());
    }

    #[test]
    fn reply_path_restores_the_packet() {
        // Outbound through a, reflected by IPSwap, back in through b (same pairs), reflected
        // again: the original bytes, checksums included.
        use super::super::ip_swap;
        let mut h = Harness::new();
        h.add(&CLASS, "a", &arg()).unwrap();
        h.add(&CLASS, "b", &arg()).unwrap();
        h.add(&ip_swap::CLASS, "x1", &Value::Null).unwrap();
        h.add(&ip_swap::CLASS, "x2", &Value::Null).unwrap();
        h.connect("a", 1, "x1", 0).unwrap();
        h.connect("x1", 0, "b", 1).unwrap();
        h.connect("b", 0, "x2", 0).unwrap();
        let c = h.capture("x2", 0);
        h.inject("a", 0, &[hex(UDP_F), hex(FIRST_FRAG), hex(SECOND_PAIR)]);
        assert_eq!(
            c.take_data(),
            [UDP_F, FIRST_FRAG, SECOND_PAIR].map(hex).to_vec()
        );
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "s", &arg()).unwrap();
        let out = h.capture("s", 1);
        let mut tcp_cut = hex(TCP_R_X);
        tcp_cut[17] = 0x14 + 16; // total length: header + 16 bytes of TCP, no checksum field
        tcp_cut.truncate(14 + 20 + 16);
        // Swap to an outbound packet from a mapped address.
        tcp_cut[26..30].copy_from_slice(&[10, 0, 0, 200]);
        h.inject(
            "s",
            0,
            &[tcp_cut, hex("02000000 00020200 00000001 86dd"), hex("0200")],
        );
        assert!(out.is_empty());
        assert_eq!(h.drops("s", "too_short"), 2);
        assert_eq!(h.drops("s", "not_ipv4"), 1);
    }

    #[test]
    fn arguments_and_initial_arg() {
        let mut h = Harness::new();
        let bad = |p: Value| Value::map().with("pairs", Value::List(vec![p]));
        let e = h
            .add(
                &CLASS,
                "a",
                &bad(pair(("10.0.0.9", "10.0.0.1"), ("1.0.0.1", "1.0.0.9"))),
            )
            .unwrap_err();
        assert!(e.msg.contains("pairs[0].int_range"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "b",
                &bad(pair(("10.0.0.1", "10.0.0.2"), ("1.0.0.1", "1.0.0.9"))),
            )
            .unwrap_err();
        assert!(
            e.msg.contains("pairs[0]: internal and external"),
            "{}",
            e.msg
        );
        let e = h
            .add(
                &CLASS,
                "c",
                &bad(pair(("10.0.0.1", "10.0.0.2"), ("1.0.0.1", "x"))),
            )
            .unwrap_err();
        assert!(e.msg.contains("pairs[0].ext_range.end"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "d",
                &bad(pair(
                    ("10.0.0.1", "10.0.0.1"),
                    ("255.255.255.255", "255.255.255.255"),
                )),
            )
            .unwrap_err();
        assert!(e.msg.contains("broadcast"), "{}", e.msg);
        h.add(&CLASS, "s", &arg()).unwrap();
        assert_eq!(
            h.command("s", "get_initial_arg", &Value::Null).unwrap(),
            arg()
        );
    }
}

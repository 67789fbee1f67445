//! ArpResponder: answers ARP requests for configured IPv4 → MAC entries.
use std::collections::HashMap;

use super::headers::{ipv4_string, parse_ipv4, parse_mac};
use crate::headers::{arp, ArpError, ArpView, EthernetView, ETHERTYPE_ARP};
use crate::util::{process_each, Verdict};
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

bessemer_core::drop_reasons! {
    /// Why ArpResponder drops packets.
    pub enum ArpResponderDrop {
        TooShort = "too_short",
        NotArp = "not_arp",
        Unsupported = "unsupported",
        ArpReply = "arp_reply",
        NoEntry = "no_entry",
    }
}

/// Hashes an IPv4 address key by one multiply (SipHash, the default, cost more than the
/// rest of a request's handling): the product's high half folded onto its low half, so that
/// both the table's index (low bits) and its tag (top bits) depend on every address bit.
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = x as u64;
    }
}

type Entries = HashMap<u32, [u8; 6], std::hash::BuildHasherDefault<AddrHasher>>;

/// Offsets inside an Ethernet/IPv4 ARP packet.
pub struct ArpResponder {
    entries: Entries,
}

impl ArpResponder {
    fn one(&self, d: &mut [u8]) -> Verdict<ArpResponderDrop> {
        let mut eth = match EthernetView::new_checked(d) {
            Err(_) => return Verdict::Drop(ArpResponderDrop::TooShort),
            Ok(eth) if eth.ethertype() != ETHERTYPE_ARP => {
                return Verdict::Drop(ArpResponderDrop::NotArp)
            }
            Ok(eth) => eth,
        };
        let request_src = eth.src();
        let mut arp = match ArpView::new_checked(eth.payload_mut()) {
            Ok(arp) => arp,
            Err(ArpError::Truncated) => return Verdict::Drop(ArpResponderDrop::TooShort),
            Err(ArpError::Unsupported) => return Verdict::Drop(ArpResponderDrop::Unsupported),
        };
        match arp.operation() {
            arp::OPER_REQUEST => {}
            arp::OPER_REPLY => return Verdict::Drop(ArpResponderDrop::ArpReply),
            _ => return Verdict::Drop(ArpResponderDrop::Unsupported),
        }
        let target_ip = arp.tpa();
        let Some(&mac) = self.entries.get(&u32::from_be_bytes(target_ip)) else {
            return Verdict::Drop(ArpResponderDrop::NoEntry);
        };
        // The request becomes the reply in place, from the entry's MAC: as BESS's
        // arp_responder.cc, the frame goes back to the request's Ethernet source and the ARP
        // target is the request's ARP sender.
        let (sha, spa) = (arp.sha(), arp.spa());
        arp.set_operation(arp::OPER_REPLY);
        arp.set_sha(mac);
        arp.set_spa(target_ip);
        arp.set_tha(sha);
        arp.set_tpa(spa);
        eth.set_dst(request_src);
        eth.set_src(mac);
        Verdict::Gate(0)
    }

    fn add(&mut self, arg: &Value) -> Result<()> {
        let mut a = Args::new(arg, "ArpResponderArg")?;
        let ip = a.str("ip")?.unwrap_or("");
        let mac = a.str("mac_addr")?.unwrap_or("");
        a.finish()?;
        if ip.is_empty() {
            return Err(Error::invalid("ArpResponderArg.ip: IP address is missing"));
        }
        let ip = parse_ipv4(ip, "ArpResponderArg.ip")?;
        let mac = parse_mac(mac, "ArpResponderArg.mac_addr")?;
        self.entries.insert(ip, mac);
        Ok(())
    }
}

impl ArpResponder {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.add(arg).map(|_| Value::Null)
    }
}

impl Module for ArpResponder {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| self.one(p.data_mut()));
    }

    fn desc(&self) -> String {
        format!("{} entries", self.entries.len())
    }

    fn info(&self) -> Value {
        let mut e: Vec<_> = self.entries.iter().collect();
        e.sort();
        Value::map().with(
            "entries",
            Value::List(
                e.into_iter()
                    .map(|(ip, m)| {
                        let mac = bessemer_core::mac::format_mac(m);
                        Value::map()
                            .with("ip", ipv4_string(*ip))
                            .with("mac_addr", mac)
                    })
                    .collect(),
            ),
        )
    }
}

/// The ArpResponder class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "ArpResponder",
    name_template: "arp_responder",
    help: "Respond to ARP requests and learns new MAC's",
    arg_type: "EmptyArg",
    arg_doc: &[
        "(no fields; entries are added with the add command: ip: string, mac_addr: string \"aa:bb:cc:dd:ee:ff\")",
    ],
    igates: 1,
    ogates: 1,
    commands: &[CommandSpec {
        name: "add",
        arg_type: "ArpResponderArg",
        help: "answers requests for ip with mac_addr (replaces an existing entry)",
        mt_safe: false,
        reply_type: "EmptyArg",
        mutates: true,
        handler: handler!(Exclusive ArpResponder, ArpResponder::cmd_add),
    }],
    drop_reasons: ArpResponderDrop::NAMES,
    max_workers: 1,
    create: |_, arg| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(ArpResponder {
            entries: Entries::default(),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::hex;
    use bessemer_core::testing::Harness;
    use smoltcp::wire::{ArpOperation, ArpPacket};

    const REQ: &str = "ffffffff ffff0200 000000aa 08060001 08000604 00010200 000000aa 0a000002 00000000 00000a00 00010000 00000000 00000000 00000000 00000000";
    const REP: &str = "02000000 00aa5254 00123456 08060001 08000604 00025254 00123456 0a000001 02000000 00aa0a00 00020000 00000000 00000000 00000000 00000000";
    const REQ9: &str = "ffffffff ffff0200 000000aa 08060001 08000604 00010200 000000aa 0a000002 00000000 00000a00 0009";

    fn entry(ip: &str, mac: &str) -> Value {
        Value::map().with("ip", ip).with("mac_addr", mac)
    }

    #[test]
    fn answers_known_addresses_and_drops_the_rest() {
        let mut h = Harness::new();
        h.add(&CLASS, "a", &Value::Null).unwrap();
        h.command("a", "add", &entry("10.0.0.1", "52:54:00:12:34:56"))
            .unwrap();
        let c = h.capture("a", 0);
        let mut other_op = hex(REQ);
        other_op[21] = 3; // RARP request
        let mut not_eth = hex(REQ);
        not_eth[15] = 6; // IEEE 802 hardware
        h.inject(
            "a",
            0,
            &[
                hex(REQ),
                hex(REQ9),
                hex(REP),
                other_op,
                not_eth,
                hex("02000000 00020200 00000001 0800 4500"),
                hex("ffffffff ffff0200 000000aa 0806 0001 0800 0604 0001"),
                hex("ffffffff ffff"),
            ],
        );
        let got = c.take_data();
        assert_eq!(got, vec![hex(REP)]);
        for (reason, n) in [
            ("no_entry", 1),
            ("arp_reply", 1),
            ("unsupported", 2),
            ("not_arp", 1),
            ("too_short", 2),
        ] {
            assert_eq!(h.drops("a", reason), n, "{reason}");
        }
        // smoltcp reads the reply back as a well-formed ARP reply.
        let p = ArpPacket::new_checked(&got[0][14..]).unwrap();
        assert_eq!(p.operation(), ArpOperation::Reply);
        assert_eq!(p.source_protocol_addr(), &[10, 0, 0, 1]);
    }

    #[test]
    fn reply_goes_to_the_ethernet_source_not_the_arp_sender() {
        let mut h = Harness::new();
        h.add(&CLASS, "a", &Value::Null).unwrap();
        h.command("a", "add", &entry("10.0.0.1", "52:54:00:12:34:56"))
            .unwrap();
        let c = h.capture("a", 0);
        // Ethernet source 02:00:00:00:00:bb (a proxy), ARP sender 02:00:00:00:00:aa.
        let req = "ffffffff ffff0200 000000bb 08060001 08000604 00010200 000000aa 0a000002 00000000 00000a00 00010000 00000000 00000000 00000000 00000000";
        let rep = "02000000 00bb5254 00123456 08060001 08000604 00025254 00123456 0a000001 02000000 00aa0a00 00020000 00000000 00000000 00000000 00000000";
        h.inject("a", 0, &[hex(req)]);
        assert_eq!(c.take_data(), vec![hex(rep)]);
    }

    #[test]
    fn add_replaces_entries_and_checks_arguments() {
        let mut h = Harness::new();
        h.add(&CLASS, "a", &Value::Null).unwrap();
        h.command("a", "add", &entry("10.0.0.1", "02:00:00:00:00:01"))
            .unwrap();
        h.command("a", "add", &entry("10.0.0.1", "52:54:00:12:34:56"))
            .unwrap();
        let c = h.capture("a", 0);
        h.inject("a", 0, &[hex(REQ)]);
        assert_eq!(c.take_data(), vec![hex(REP)]);
        let e = h
            .command("a", "add", &entry("", "02:00:00:00:00:01"))
            .unwrap_err();
        assert!(e.msg.contains("ArpResponderArg.ip"), "{}", e.msg);
        let e = h
            .command("a", "add", &entry("10.0.0.300", "02:00:00:00:00:01"))
            .unwrap_err();
        assert!(e.msg.contains("ArpResponderArg.ip"), "{}", e.msg);
        let e = h
            .command("a", "add", &entry("10.0.0.3", "02:00:00:00:01"))
            .unwrap_err();
        assert!(e.msg.contains("ArpResponderArg.mac_addr"), "{}", e.msg);
        let e = h
            .command("a", "add", &entry("10.0.0.3", "02:00:00:00:00:0g"))
            .unwrap_err();
        assert!(e.msg.contains("ArpResponderArg.mac_addr"), "{}", e.msg);
        // Octets are hex digits only: no sign.
        let e = h
            .command("a", "add", &entry("10.0.0.3", "+2:00:00:00:00:01"))
            .unwrap_err();
        assert!(e.msg.contains("ArpResponderArg.mac_addr"), "{}", e.msg);
        assert_eq!(
            h.graph.info_of("a").unwrap(),
            Value::map().with(
                "entries",
                Value::List(vec![entry("10.0.0.1", "52:54:00:12:34:56")])
            )
        );
    }
}

//! ACL: a first-match IPv4 access list over source/destination prefixes and ports.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value,
};

use super::acl_index::{AclIndex, IndexRule};

/// Most rules an ACL holds: a bound on the memory its commands can take.
pub const MAX_ACL_RULES: usize = 1 << 20;
use crate::checksum::{PROTO_TCP, PROTO_UDP};
use crate::headers::{ipv4_in_frame, Ipv4Error, PortsView, PROTO_SCTP};
use crate::util::{parse_list, process_each, Verdict};

bessemer_core::drop_reasons! {
    /// Why ACL drops packets.
    pub enum AclDrop {
        /// The first matching rule drops.
        Denied = "denied",
        /// No rule matched.
        NoMatch = "no_match",
        /// As [`Ipv4Error::TooShort`] (or the L4 ports cut off).
        TooShort = "too_short",
        /// As [`Ipv4Error::NotIpv4`].
        NotIpv4 = "not_ipv4",
        /// As [`Ipv4Error::BadHeader`].
        BadIpHeader = "bad_ip_header",
    }
}

impl From<Ipv4Error> for AclDrop {
    #[inline(always)]
    fn from(e: Ipv4Error) -> AclDrop {
        match e {
            Ipv4Error::TooShort => AclDrop::TooShort,
            Ipv4Error::NotIpv4 => AclDrop::NotIpv4,
            Ipv4Error::BadHeader => AclDrop::BadIpHeader,
        }
    }
}

/// An IPv4 prefix; the empty string in a rule is 0.0.0.0/0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prefix {
    net: u32,
    mask: u32,
}

impl Prefix {
    /// Parses "a.b.c.d/len", "a.b.c.d" (a /32) or "" (any address); host bits are ignored.
    pub(crate) fn parse(s: &str) -> Option<Prefix> {
        let s = s.trim();
        if s.is_empty() {
            return Some(Prefix { net: 0, mask: 0 });
        }
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, l.parse::<u32>().ok().filter(|&l| l <= 32)?),
            None => (s, 32),
        };
        let addr: std::net::Ipv4Addr = addr.parse().ok()?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Some(Prefix {
            net: u32::from(addr) & mask,
            mask,
        })
    }
}

/// One rule: all given fields must match (port 0 = any port).
#[derive(Clone, Debug)]
struct Rule {
    src: Prefix,
    dst: Prefix,
    src_port: u16,
    dst_port: u16,
    drop: bool,
}

/// What ACL reads from a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuple {
    pub(crate) src: u32,
    pub(crate) dst: u32,
    pub(crate) proto: u8,
    /// Source and destination port: TCP, UDP and SCTP packets that are not later fragments.
    pub(crate) ports: Option<(u16, u16)>,
}

/// Why a frame has no IPv4 tuple.
pub(crate) type ParseError = Ipv4Error;

/// Reads the IPv4 tuple of an untagged Ethernet frame through checked views.
pub(crate) fn parse_tuple(d: &[u8]) -> std::result::Result<Tuple, ParseError> {
    let ip = ipv4_in_frame(d)?;
    let proto = ip.protocol();
    let has_ports = matches!(proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP) && ip.has_l4_header();
    let ports = if has_ports {
        // The L4 header as far as the IPv4 total length goes.
        let l4 = PortsView::new_checked(ip.payload())?;
        Some((l4.src_port(), l4.dst_port()))
    } else {
        None
    };
    Ok(Tuple {
        src: ip.src(),
        dst: ip.dst(),
        proto,
        ports,
    })
}

impl Rule {
    fn index_rule(&self) -> IndexRule {
        IndexRule {
            src: (self.src.net, self.src.mask),
            dst: (self.dst.net, self.dst.mask),
            src_port: self.src_port,
            dst_port: self.dst_port,
        }
    }
}

/// First matching rule decides: allow → gate 0, drop → dropped as `denied`; no rule matches
/// → dropped as `no_match`.
pub struct Acl {
    rules: Vec<Rule>,
    /// The rules by shape (tuple-space search), so a lookup does not scan them all.
    index: AclIndex,
}

fn parse_rules(arg: &Value, msg: &str) -> Result<Vec<Rule>> {
    parse_list(arg, msg, "rules", |r, m| {
        let mut a = Args::new(r, m)?;
        let mut prefix = |key: &str| -> Result<Prefix> {
            let s = a.str(key)?.unwrap_or("");
            Prefix::parse(s).ok_or_else(|| {
                Error::invalid(format!(
                    "{m}.{key}: '{s}' is not an IPv4 prefix (a.b.c.d/len, a.b.c.d or empty)"
                ))
            })
        };
        let src = prefix("src_ip")?;
        let dst = prefix("dst_ip")?;
        let src_port = a.uint("src_port", 65535)?.unwrap_or(0) as u16;
        let dst_port = a.uint("dst_port", 65535)?.unwrap_or(0) as u16;
        let established = a.bool("established")?.unwrap_or(false);
        let drop = a.bool("drop")?.unwrap_or(false);
        a.finish()?;
        if established {
            return Err(Error::unsupported(format!(
                "{m}.established: connection state is not tracked (BESS ignores this field)"
            )));
        }
        Ok(Rule {
            src,
            dst,
            src_port,
            dst_port,
            drop,
        })
    })
}

impl Acl {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let new = parse_rules(arg, "ACLArg")?;
        self.append(new)?;
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.rules.clear();
        self.index.clear();
        Ok(Value::Null)
    }

    /// Adds rules at the end; none if they would take the table past [`MAX_ACL_RULES`].
    fn append(&mut self, new: Vec<Rule>) -> Result<()> {
        if self.rules.len() + new.len() > MAX_ACL_RULES {
            return Err(Error::new(
                libc::ENOSPC,
                format!(
                    "ACLArg.rules: at most {MAX_ACL_RULES} rules (has {}, adding {})",
                    self.rules.len(),
                    new.len()
                ),
            ));
        }
        for r in new {
            self.index.push(&r.index_rule());
            self.rules.push(r);
        }
        Ok(())
    }
}

impl Module for Acl {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, |p| {
            let t = match parse_tuple(p.data()) {
                Ok(t) => t,
                Err(reason) => return Verdict::Drop(AclDrop::from(reason)),
            };
            match self.index.lookup(t.src, t.dst, t.ports) {
                Some(i) if !self.rules[i as usize].drop => Verdict::Gate(0),
                Some(_) => Verdict::Drop(AclDrop::Denied),
                None => Verdict::Drop(AclDrop::NoMatch),
            }
        });
    }

    fn desc(&self) -> String {
        format!("{} rules", self.rules.len())
    }
}

/// The ACL class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "ACL",
    name_template: "acl",
    help: "ACL module from NetBricks",
    arg_type: "ACLArg",
    arg_doc: &[
        "rules: [{src_ip: string, dst_ip: string, src_port: uint32, dst_port: uint32, established: bool, drop: bool}]",
        "  prefixes as a.b.c.d/len (empty = any); port 0 = any; the first matching rule decides:",
        "  drop=false forwards on gate 0, drop=true drops (denied); no match drops (no_match).",
        "  Ports are those of TCP/UDP/SCTP first fragments; other packets match only port-less rules.",
        "  established=true is rejected (not tracked). Non-IPv4 and malformed frames are dropped.",
    ],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "ACLArg",
            help: "appends rules (after the existing ones)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Acl, Acl::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all rules",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive Acl, Acl::cmd_clear),
        },
    ],
    drop_reasons: AclDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let mut acl = Acl {
            rules: Vec::new(),
            index: AclIndex::new(),
        };
        acl.append(parse_rules(arg, "ACLArg")?)?;
        Ok(Instance::Exclusive(Box::new(acl)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use proptest::prelude::*;

    /// An untagged IPv4 frame with `opts` option bytes and `l4` after the header.
    fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, opts: &[u8], l4: &[u8]) -> Vec<u8> {
        let ihl = 20 + opts.len();
        let total = (ihl + l4.len()) as u16;
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.push(0x40 | (ihl / 4) as u8);
        f.push(0);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1]);
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(opts);
        f.extend_from_slice(l4);
        f
    }

    fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut l4 = sport.to_be_bytes().to_vec();
        l4.extend_from_slice(&dport.to_be_bytes());
        l4.extend_from_slice(&[0, 8, 0, 0]);
        ipv4(src, dst, 17, 0, &[], &l4)
    }

    fn rule(src: &str, dst: &str, sport: u32, dport: u32, drop: bool) -> Value {
        Value::map()
            .with("src_ip", src)
            .with("dst_ip", dst)
            .with("src_port", sport)
            .with("dst_port", dport)
            .with("drop", drop)
    }

    fn rules(r: Vec<Value>) -> Value {
        Value::map().with("rules", Value::List(r))
    }

    #[test]
    fn first_match_decides_and_drops_are_counted_apart() {
        let mut h = Harness::new();
        h.add(
            &CLASS,
            "acl",
            &rules(vec![
                rule("10.0.0.0/8", "", 0, 53, true),
                rule("10.0.0.0/8", "192.168.1.0/24", 0, 0, false),
                rule("", "", 7, 0, false),
            ]),
        )
        .unwrap();
        let out = h.capture("acl", 0);
        let allowed1 = udp([10, 1, 2, 3], [192, 168, 1, 9], 1000, 80);
        let denied = udp([10, 1, 2, 3], [192, 168, 1, 9], 1000, 53);
        let allowed2 = udp([172, 16, 0, 1], [8, 8, 8, 8], 7, 1);
        let nomatch = udp([172, 16, 0, 1], [8, 8, 8, 8], 8, 1);
        h.inject(
            "acl",
            0,
            &[allowed1.clone(), denied, allowed2.clone(), nomatch],
        );
        assert_eq!(out.take_data(), vec![allowed1, allowed2]);
        assert_eq!(h.drops("acl", "denied"), 1);
        assert_eq!(h.drops("acl", "no_match"), 1);
        // clear: nothing matches any more; add appends after existing rules.
        h.command("acl", "clear", &Value::map()).unwrap();
        let p = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
        h.inject("acl", 0, std::slice::from_ref(&p));
        assert_eq!(h.drops("acl", "no_match"), 2);
        h.command("acl", "add", &rules(vec![rule("1.1.1.1", "", 0, 0, false)]))
            .unwrap();
        h.inject("acl", 0, std::slice::from_ref(&p));
        assert_eq!(out.take_data(), vec![p]);
    }

    #[test]
    fn options_fragments_and_non_port_protocols() {
        let mut h = Harness::new();
        h.add(
            &CLASS,
            "acl",
            &rules(vec![
                rule("", "", 0, 80, false),
                rule("9.9.9.9/32", "", 0, 0, false),
            ]),
        )
        .unwrap();
        let out = h.capture("acl", 0);
        // IP options: ports are found after the longer header.
        let tcp_l4 = [
            0x30, 0x39, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0,
        ];
        let with_opts = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 6, 0, &[1, 1, 1, 0], &tcp_l4);
        // A later fragment has no ports: only the port-less rule can match it.
        let frag_other = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 6, 0x0010, &[], &tcp_l4);
        let frag_nine = ipv4([9, 9, 9, 9], [2, 2, 2, 2], 6, 0x0010, &[], &tcp_l4);
        // ICMP echo: its type/code are not ports.
        let icmp = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            0,
            &[],
            &[0, 80, 0, 80, 0, 0, 0, 0],
        );
        h.inject(
            "acl",
            0,
            &[with_opts.clone(), frag_other, frag_nine.clone(), icmp],
        );
        assert_eq!(out.take_data(), vec![with_opts, frag_nine]);
        assert_eq!(h.drops("acl", "no_match"), 2);
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut h = Harness::new();
        h.add(&CLASS, "acl", &rules(vec![rule("", "", 0, 0, false)]))
            .unwrap();
        let out = h.capture("acl", 0);
        let good = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
        let mut bad_ihl = good.clone();
        bad_ihl[14] = 0x44;
        let mut bad_version = good.clone();
        bad_version[14] = 0x65;
        let mut total_below_ihl = good.clone();
        total_below_ihl[16..18].copy_from_slice(&[0, 19]);
        let mut truncated = good.clone();
        truncated.truncate(good.len() - 2); // total length now exceeds the frame
        let ports_cut = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, &[], &[0, 1]);
        let mut arp = good[..12].to_vec();
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let mut v6 = good[..12].to_vec();
        v6.extend_from_slice(&[0x86, 0xdd, 0x60]);
        v6.extend_from_slice(&[0u8; 39]);
        let mut vlan = good[..12].to_vec();
        vlan.extend_from_slice(&[0x81, 0x00, 0, 5]);
        vlan.extend_from_slice(&good[12..]);
        // Ethernet padding after the IP packet is fine.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0u8; 18]);
        h.inject(
            "acl",
            0,
            &[
                vec![],
                good[..13].to_vec(),
                good[..20].to_vec(),
                bad_ihl,
                bad_version,
                total_below_ihl,
                truncated,
                ports_cut,
                arp,
                v6,
                vlan,
                padded.clone(),
            ],
        );
        assert_eq!(h.drops("acl", "too_short"), 5);
        assert_eq!(h.drops("acl", "bad_ip_header"), 3);
        assert_eq!(h.drops("acl", "not_ipv4"), 3);
        assert_eq!(out.take_data(), vec![padded]);
    }

    #[test]
    fn bad_rules_name_the_field() {
        let mut h = Harness::new();
        for (r, want) in [
            (rule("10.0.0.0/33", "", 0, 0, false), "rules[0].src_ip"),
            (rule("", "10.0.0", 0, 0, false), "rules[0].dst_ip"),
            (rule("", "", 70000, 0, false), "rules[0].src_port"),
            (
                rule("", "", 0, 0, false).with("established", true),
                "rules[0].established",
            ),
            (
                rule("", "", 0, 0, false).with("action", 1),
                "rules[0]: unknown field 'action'",
            ),
        ] {
            let e = h.add(&CLASS, "a", &rules(vec![r])).unwrap_err();
            assert!(e.msg.contains(want), "{want}: {}", e.msg);
        }
        h.add(&CLASS, "b", &rules(vec![])).unwrap();
        let e = h
            .command("b", "add", &rules(vec![rule("x", "", 0, 0, false)]))
            .unwrap_err();
        assert!(e.msg.contains("ACLArg.rules[0].src_ip"), "{}", e.msg);
    }

    /// The reference: a plain linear scan over rules written as (addr, len) prefixes.
    #[derive(Clone, Debug)]
    struct RefRule {
        src: ([u8; 4], u32),
        dst: ([u8; 4], u32),
        sport: u16,
        dport: u16,
        drop: bool,
    }

    fn in_prefix(ip: [u8; 4], (net, len): ([u8; 4], u32)) -> bool {
        (0..len as usize).all(|bit| {
            let (byte, shift) = (bit / 8, 7 - bit % 8);
            (ip[byte] >> shift) & 1 == (net[byte] >> shift) & 1
        })
    }

    fn reference(rules: &[RefRule], p: &RefPkt) -> Option<bool> {
        rules
            .iter()
            .find(|r| {
                in_prefix(p.src, r.src)
                    && in_prefix(p.dst, r.dst)
                    && (r.sport == 0 || p.udp && r.sport == p.sport)
                    && (r.dport == 0 || p.udp && r.dport == p.dport)
            })
            .map(|r| !r.drop)
    }

    #[derive(Clone, Debug)]
    struct RefPkt {
        src: [u8; 4],
        dst: [u8; 4],
        udp: bool,
        sport: u16,
        dport: u16,
    }

    fn addr() -> impl Strategy<Value = [u8; 4]> {
        (0u8..3, 0u8..3, any::<u8>(), any::<u8>()).prop_map(|(a, b, c, d)| [10 + a, b, c, d])
    }

    fn port() -> impl Strategy<Value = u16> {
        prop_oneof![Just(0u16), 1u16..4]
    }

    fn ref_rule() -> impl Strategy<Value = RefRule> {
        (
            addr(),
            0u32..=32,
            addr(),
            0u32..=32,
            port(),
            port(),
            any::<bool>(),
        )
            .prop_map(|(s, sl, d, dl, sport, dport, drop)| RefRule {
                src: (s, sl),
                dst: (d, dl),
                sport,
                dport,
                drop,
            })
    }

    fn ref_pkt() -> impl Strategy<Value = RefPkt> {
        (addr(), addr(), any::<bool>(), 1u16..4, 1u16..4).prop_map(
            |(src, dst, udp, sport, dport)| RefPkt {
                src,
                dst,
                udp,
                sport,
                dport,
            },
        )
    }

    fn to_value(r: &RefRule) -> Value {
        let p = |(a, l): ([u8; 4], u32)| {
            if l == 0 && a[3] % 2 == 0 {
                String::new()
            } else {
                format!("{}.{}.{}.{}/{l}", a[0], a[1], a[2], a[3])
            }
        };
        rule(&p(r.src), &p(r.dst), r.sport as u32, r.dport as u32, r.drop)
    }

    fn to_bytes(p: &RefPkt) -> Vec<u8> {
        if p.udp {
            udp(p.src, p.dst, p.sport, p.dport)
        } else {
            ipv4(p.src, p.dst, 1, 0, &[], &[8, 0, 0, 0, 0, 1, 0, 1])
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_linear_reference(
            rs in proptest::collection::vec(ref_rule(), 0..12),
            ps in proptest::collection::vec(ref_pkt(), 1..64),
        ) {
            let mut h = Harness::new();
            h.add(&CLASS, "acl", &rules(rs.iter().map(to_value).collect())).unwrap();
            let out = h.capture("acl", 0);
            let bytes: Vec<_> = ps.iter().map(to_bytes).collect();
            h.inject("acl", 0, &bytes);
            let verdicts: Vec<_> = ps.iter().map(|p| reference(&rs, p)).collect();
            let want: Vec<_> = bytes
                .iter()
                .zip(&verdicts)
                .filter(|(_, v)| **v == Some(true))
                .map(|(b, _)| b.clone())
                .collect();
            prop_assert_eq!(out.take_data(), want);
            let denied = verdicts.iter().filter(|v| **v == Some(false)).count() as u64;
            let none = verdicts.iter().filter(|v| v.is_none()).count() as u64;
            prop_assert_eq!(h.drops("acl", "denied"), denied);
            prop_assert_eq!(h.drops("acl", "no_match"), none);
        }
    }
}

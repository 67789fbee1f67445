//! IPLookup: longest-prefix match of the IPv4 destination address, DIR-24-8 style (as DPDK's
//! rte_lpm that BESS uses): a 2^24-entry first-level table indexed by the top 24 address
//! bits, and 256-entry second-level groups for prefixes longer than /24.
use std::collections::HashMap;
use std::net::Ipv4Addr;

use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value, MAX_BURST,
};
use smoltcp::wire::{EthernetFrame, EthernetProtocol, Ipv4Packet};

use super::table::{check_gate, prefetch, DROP_GATE};
use bessemer_core::module::MAX_GATES;

bessemer_core::drop_reasons! {
    /// Why IPLookup drops packets.
    pub enum IpLookupDrop {
        NoMatch = "no_match",
        TooShort = "too_short",
        NotIpv4 = "not_ipv4",
        BadHeader = "bad_ipv4_header",
        Rule = "rule_drop",
    }
}

const VALID: u32 = 1 << 31;
const EXT: u32 = 1 << 30;
const DEPTH_SHIFT: u32 = 24;
const PAYLOAD: u32 = (1 << 24) - 1;
const TBL24_SIZE: usize = 1 << 24;
/// Largest `max_rules` / `max_tbl8s` accepted (rte_lpm's limits are of this order).
const MAX_LIMIT: u64 = 1 << 24;

#[inline(always)]
fn entry(depth: u32, gate: u16) -> u32 {
    VALID | depth << DEPTH_SHIFT | gate as u32
}

#[inline(always)]
fn depth(e: u32) -> u32 {
    (e >> DEPTH_SHIFT) & 0x3f
}

/// The DIR-24-8 table and the rule list it is derived from.
pub struct Lpm {
    tbl24: Vec<u32>,
    tbl8: Vec<u32>,
    free_groups: Vec<u32>,
    groups_used: usize,
    max_groups: usize,
    max_rules: usize,
    rules: HashMap<(u32, u8), u16>,
}

impl Lpm {
    /// An empty table holding at most `max_rules` prefixes and `max_groups` /24 groups
    /// split by longer prefixes.
    pub fn new(max_rules: usize, max_groups: usize) -> Lpm {
        Lpm {
            tbl24: super::table::zeroed_table(TBL24_SIZE, 0u32),
            tbl8: Vec::new(),
            free_groups: Vec::new(),
            groups_used: 0,
            max_groups,
            max_rules,
            rules: HashMap::new(),
        }
    }

    /// Number of prefixes (excluding /0).
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when no prefix is stored.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn alloc_group(&mut self, fill: u32) -> Option<u32> {
        let g = match self.free_groups.pop() {
            Some(g) => g,
            None => {
                if self.groups_used >= self.max_groups {
                    return None;
                }
                self.tbl8.resize(self.tbl8.len() + 256, 0);
                (self.tbl8.len() / 256 - 1) as u32
            }
        };
        self.groups_used += 1;
        let base = g as usize * 256;
        self.tbl8[base..base + 256].fill(fill);
        Some(g)
    }

    /// Adds (or updates) `prefix/len` -> `gate`; `len` is 1..=32.
    pub fn add(&mut self, prefix: u32, len: u8, gate: u16) -> Result<()> {
        let exists = self.rules.contains_key(&(prefix, len));
        if !exists && self.rules.len() >= self.max_rules {
            return Err(Error::new(
                libc::ENOSPC,
                format!("rule table full ({} rules, see max_rules)", self.max_rules),
            ));
        }
        let d = len as u32;
        if len > 24 {
            // The prefix lives in a second-level group: its /24 entry must extend to one.
            let i = (prefix >> 8) as usize;
            let e = self.tbl24[i];
            if e & EXT == 0 {
                let Some(g) = self.alloc_group(e) else {
                    return Err(Error::new(
                        libc::ENOSPC,
                        format!(
                            "no free second-level group ({} in use, see max_tbl8s)",
                            self.groups_used
                        ),
                    ));
                };
                self.tbl24[i] = VALID | EXT | g;
            }
        }
        self.set_covered(prefix, len, entry(d, gate), |e| {
            e & VALID == 0 || depth(e) <= d
        });
        self.rules.insert((prefix, len), gate);
        Ok(())
    }

    /// Sets to `new` every entry `prefix/len` covers that `pick` selects: for len <= 24 its
    /// tbl24 entries and, where one extends to a group, all of that group's entries; for a
    /// longer prefix its range in the group its /24 entry extends to (which must exist).
    fn set_covered(&mut self, prefix: u32, len: u8, new: u32, pick: impl Fn(u32) -> bool) {
        let set = |x: &mut u32| {
            if pick(*x) {
                *x = new;
            }
        };
        if len <= 24 {
            let base = (prefix >> 8) as usize;
            for i in base..base + (1usize << (24 - len)) {
                let e = self.tbl24[i];
                if e & EXT != 0 {
                    let g = (e & PAYLOAD) as usize * 256;
                    self.tbl8[g..g + 256].iter_mut().for_each(set);
                } else {
                    set(&mut self.tbl24[i]);
                }
            }
        } else {
            let g = (self.tbl24[(prefix >> 8) as usize] & PAYLOAD) as usize;
            let lo = g * 256 + (prefix & 0xff) as usize;
            self.tbl8[lo..lo + (1usize << (32 - len))]
                .iter_mut()
                .for_each(set);
        }
    }

    /// Removes `prefix/len`; false if it was not there.
    pub fn delete(&mut self, prefix: u32, len: u8) -> bool {
        if self.rules.remove(&(prefix, len)).is_none() {
            return false;
        }
        // Entries this rule owns (its depth, inside its range) fall back to the longest
        // shorter rule covering it.
        let repl = (1..len)
            .rev()
            .find_map(|l| {
                let p = prefix & mask(l);
                self.rules.get(&(p, l)).map(|&g| entry(l as u32, g))
            })
            .unwrap_or(0);
        let d = len as u32;
        self.set_covered(prefix, len, repl, |e| e & VALID != 0 && depth(e) == d);
        if len > 24 {
            let i = (prefix >> 8) as usize;
            let g = (self.tbl24[i] & PAYLOAD) as usize;
            // No prefix longer than /24 left in this group: fold it back into tbl24.
            let grp = &self.tbl8[g * 256..g * 256 + 256];
            if grp.iter().all(|&x| x & VALID == 0 || depth(x) <= 24) {
                self.tbl24[i] = grp[0];
                self.free_groups.push(g as u32);
                self.groups_used -= 1;
            }
        }
        true
    }

    /// Removes every prefix.
    pub fn clear(&mut self) {
        // A fresh zeroed allocation is lazily mapped: cheaper than rewriting 64 MiB.
        self.tbl24 = super::table::zeroed_table(TBL24_SIZE, 0u32);
        self.tbl8 = Vec::new();
        self.free_groups.clear();
        self.groups_used = 0;
        self.rules.clear();
    }

    /// The gate for `addr`, if a prefix covers it.
    #[inline(always)]
    pub fn lookup(&self, addr: u32) -> Option<u16> {
        let mut e = self.tbl24[(addr >> 8) as usize];
        if e & EXT != 0 {
            e = self.tbl8[(e & PAYLOAD) as usize * 256 + (addr & 0xff) as usize];
        }
        (e & VALID != 0).then_some(e as u16)
    }
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

/// Longest-prefix-match router on the IPv4 destination address.
pub struct IPLookup {
    lpm: Lpm,
    default_gate: u16,
}

fn parse_prefix(a: &mut Args, what: &str) -> Result<(u32, u8)> {
    let p = a
        .str("prefix")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::invalid(format!("{what}.prefix is missing")))?;
    let addr: Ipv4Addr = p
        .parse()
        .map_err(|_| Error::invalid(format!("{what}.prefix: invalid IP prefix '{p}'")))?;
    let len = a.uint("prefix_len", 32)?.unwrap_or(0) as u8;
    let addr = u32::from(addr);
    if addr & !mask(len) != 0 {
        return Err(Error::invalid(format!(
            "{what}.prefix: {p}/{len} has bits set beyond the prefix length"
        )));
    }
    Ok((addr, len))
}

impl IPLookup {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "IPLookupCommandAddArg";
        let mut a = Args::new(arg, what)?;
        let (prefix, len) = parse_prefix(&mut a, what)?;
        let gate = check_gate(a.uint("gate", u64::MAX)?, &format!("{what}.gate"))?;
        a.finish()?;
        if len == 0 {
            self.default_gate = gate;
        } else {
            self.lpm.add(prefix, len, gate)?;
        }
        Ok(Value::Null)
    }

    /// The `delete` command.
    fn cmd_delete(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "IPLookupCommandDeleteArg";
        let mut a = Args::new(arg, what)?;
        let (prefix, len) = parse_prefix(&mut a, what)?;
        a.finish()?;
        if len == 0 {
            self.default_gate = DROP_GATE;
        } else if !self.lpm.delete(prefix, len) {
            return Err(Error::not_found(format!(
                "{what}: no rule for {}/{len}",
                Ipv4Addr::from(prefix)
            )));
        }
        Ok(Value::Null)
    }

    /// The `get_runtime_config` command: the routes (prefix, prefix_len, gate; sorted) and
    /// the default gate (the XDP offload reads them to fill its LPM trie).
    fn cmd_get_runtime_config(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        let mut routes: Vec<_> = self
            .lpm
            .rules
            .iter()
            .map(|(&(p, l), &g)| (p, l, g))
            .collect();
        routes.sort_unstable();
        let rules = routes
            .into_iter()
            .map(|(p, l, g)| {
                Value::map()
                    .with("prefix", Ipv4Addr::from(p).to_string())
                    .with("prefix_len", l as u64)
                    .with("gate", g as u64)
            })
            .collect();
        Ok(Value::map()
            .with("rules", Value::List(rules))
            .with("default_gate", self.default_gate as u64))
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.lpm.clear();
        Ok(Value::Null)
    }
}

/// The full parse of frame `d`: its IPv4 destination, or why it is dropped. (`process_batch`
/// tests the common case, a 20-byte IPv4 header whose total length fits the frame, without
/// it; every other frame comes here.)
fn classify(d: &[u8]) -> std::result::Result<u32, IpLookupDrop> {
    match EthernetFrame::new_checked(d) {
        Err(_) => Err(IpLookupDrop::TooShort),
        Ok(f) if f.ethertype() != EthernetProtocol::Ipv4 => Err(IpLookupDrop::NotIpv4),
        Ok(f) => match Ipv4Packet::new_checked(f.payload()) {
            Err(_) => {
                // Truncated (shorter than a header, or than its total length) versus
                // inconsistent (bad IHL).
                let pl = f.payload();
                let total = pl.get(2..4).map(|b| u16::from_be_bytes([b[0], b[1]]));
                match total {
                    Some(t) if pl.len() >= 20 && t as usize <= pl.len() => {
                        Err(IpLookupDrop::BadHeader)
                    }
                    _ => Err(IpLookupDrop::TooShort),
                }
            }
            Ok(ip) if ip.version() != 4 => Err(IpLookupDrop::NotIpv4),
            Ok(ip) => Ok(u32::from(ip.dst_addr())),
        },
    }
}

/// What pass 1 reads in place of a frame too short for its Ethernet and IPv4 headers: bytes
/// that fail the plain-IPv4 tests.
static NOT_PLAIN: [u8; 64] = [0; 64];

impl Module for IPLookup {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = batch.len();
        let tbl24 = &self.lpm.tbl24[..TBL24_SIZE];
        // Pass 1: each packet's destination, if its headers take the common form (see
        // `plain_ipv4_dst`; the same tests, without a branch per packet); its first-level
        // entry is prefetched (a table of 64 MiB: a big table misses the cache, and a
        // batch's misses then overlap).
        let mut addrs = [0u32; MAX_BURST];
        let mut plain = true;
        for (a, p) in addrs.iter_mut().zip(batch.pkts()) {
            let d = p.data();
            let len = d.len();
            // A frame too short to hold the fields is read from NOT_PLAIN instead (and fails
            // the tests), so that no read goes past its end.
            let at = if len >= 34 {
                d.as_ptr()
            } else {
                NOT_PLAIN.as_ptr()
            };
            // SAFETY: `at` has at least 34 readable bytes; unaligned reads.
            let (w12, tl, dst) = unsafe {
                (
                    at.add(12).cast::<u32>().read_unaligned(),
                    u16::from_be(at.add(16).cast::<u16>().read_unaligned()),
                    u32::from_be(at.add(30).cast::<u32>().read_unaligned()),
                )
            };
            // Ethernet type 08 00 and version/IHL 45 (bytes 12..15, little-endian here),
            // and 20 <= total length <= len - 14 as one unsigned compare.
            plain &= (w12 & 0x00ff_ffff) == 0x0045_0008
                && (tl as usize).wrapping_sub(20) <= len.wrapping_sub(34);
            *a = dst;
            prefetch(&tbl24[(dst >> 8) as usize]);
        }
        // Pass 2: the lookups. A second-level entry is read where the first level says so
        // (prefixes longer than /24: rare); a first-level entry is the answer otherwise.
        let def = self.default_gate;
        let mut gates = [0u16; MAX_BURST];
        // Gates are below DROP_GATE (2^13) but DROP_GATE itself: OR-ing them all shows
        // whether any packet is dropped (and the highest gate's bit).
        let mut any = 0u16;
        // Bits where some gate differs from the first one.
        let mut differ = 0u16;
        let first = {
            let e = tbl24[(addrs[0] >> 8) as usize];
            if e & (VALID | EXT) == VALID {
                e as u16
            } else {
                self.lpm.lookup(addrs[0]).unwrap_or(def)
            }
        };
        for (g, &a) in gates[..n].iter_mut().zip(&addrs[..n]) {
            let mut e = tbl24[(a >> 8) as usize];
            if e & EXT != 0 {
                e = self.lpm.tbl8[(e & PAYLOAD) as usize * 256 + (a & 0xff) as usize];
            }
            *g = if e & VALID != 0 { e as u16 } else { def };
            any |= *g;
            differ |= *g ^ first;
        }
        const _: () = assert!(DROP_GATE.is_power_of_two() && DROP_GATE == MAX_GATES);
        if plain && any & DROP_GATE == 0 {
            if differ == 0 {
                return ctx.forward(first, batch);
            }
            return crate::gates::split_routed(ctx, batch, &gates, any);
        }
        // Some packet is not plain IPv4, or is dropped: each is decided on its own.
        let mut status = [None; MAX_BURST];
        for (i, p) in batch.pkts().iter().enumerate() {
            let a = match classify(p.data()) {
                Ok(a) => a,
                Err(r) => {
                    status[i] = Some(r);
                    continue;
                }
            };
            match self.lpm.lookup(a) {
                Some(g) if g == DROP_GATE => status[i] = Some(IpLookupDrop::Rule),
                Some(g) => gates[i] = g,
                None if def == DROP_GATE => status[i] = Some(IpLookupDrop::NoMatch),
                None => gates[i] = def,
            }
        }
        super::table::split(ctx, batch, &gates, &status);
    }

    fn desc(&self) -> String {
        format!("{} rules", self.lpm.len())
    }
}

/// The IPLookup class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPLookup",
    name_template: "ip_lookup",
    help: "performs Longest Prefix Match on IPv4 packets",
    arg_type: "IPLookupArg",
    arg_doc: &[
        "max_rules: uint32 — most prefixes held (default 1024)",
        "max_tbl8s: uint32 — most /24 blocks split by prefixes longer than /24 (default 128)",
        "routes Ethernet/IPv4 frames on the destination address; prefix_len 0 sets the default gate (initially none: dropped, counted no_match)",
        "frames that are not IPv4 (IPv6, ARP, VLAN-tagged), truncated or with a bad IPv4 header are dropped and counted",
    ],
    igates: 1,
    ogates: bessemer_core::module::MAX_GATES,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "IPLookupCommandAddArg",
            help: "adds (or updates) prefix/prefix_len -> gate (8192 = drop; /0 = default gate)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "IPLookupCommandDeleteArg",
            help: "removes prefix/prefix_len (/0 resets the default gate to drop)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all prefixes (the default gate stays)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_clear),
        },
        CommandSpec {
            name: "get_runtime_config",
            arg_type: "EmptyArg",
            help: "the routes (prefix, prefix_len, gate) and the default gate",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: false,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_get_runtime_config),
        },
    ],
    drop_reasons: IpLookupDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let what = "IPLookupArg";
        let mut a = Args::new(arg, what)?;
        let max_rules = a.uint("max_rules", MAX_LIMIT)?.filter(|&v| v > 0).unwrap_or(1024);
        let max_tbl8s = a.uint("max_tbl8s", MAX_LIMIT)?.filter(|&v| v > 0).unwrap_or(128);
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(IPLookup {
            lpm: Lpm::new(max_rules as usize, max_tbl8s as usize),
            default_gate: DROP_GATE,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use proptest::prelude::*;

    fn route(prefix: &str, len: u64, gate: u64) -> Value {
        Value::map()
            .with("prefix", prefix)
            .with("prefix_len", len)
            .with("gate", gate)
    }

    /// A 60-byte Ethernet/IPv4/UDP frame to `dst`.
    fn frame(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[12] = 0x08;
        p[14] = 0x45;
        p[16..18].copy_from_slice(&46u16.to_be_bytes());
        p[22] = 64;
        p[23] = 17;
        p[26..30].copy_from_slice(&[192, 168, 0, 1]);
        p[30..34].copy_from_slice(&dst);
        p
    }

    #[test]
    fn routes_by_longest_prefix_with_default_and_drops() {
        let mut h = Harness::new();
        h.add(&CLASS, "ip", &Value::map()).unwrap();
        let c: Vec<_> = (0..4).map(|g| h.capture("ip", g)).collect();
        h.command("ip", "add", &route("10.0.0.0", 8, 1)).unwrap();
        h.command("ip", "add", &route("10.1.0.0", 16, 2)).unwrap();
        h.command("ip", "add", &route("10.1.2.128", 25, 3)).unwrap();
        let (a, b, x, y) = (
            frame([10, 9, 9, 9]),
            frame([10, 1, 2, 3]),
            frame([10, 1, 2, 200]),
            frame([11, 0, 0, 1]),
        );
        h.inject("ip", 0, &[a.clone(), b.clone(), x.clone(), y.clone()]);
        assert_eq!(c[1].take_data(), vec![a.clone()]);
        assert_eq!(c[2].take_data(), vec![b.clone()]);
        assert_eq!(c[3].take_data(), vec![x.clone()]);
        assert_eq!(h.drops("ip", "no_match"), 1);
        // /0 is the default gate.
        h.command("ip", "add", &route("0.0.0.0", 0, 0)).unwrap();
        h.command("ip", "delete", &route_del("10.1.2.128", 25))
            .unwrap();
        h.inject("ip", 0, &[x.clone(), y.clone()]);
        assert_eq!(c[2].take_data(), vec![x.clone()]);
        assert_eq!(c[0].take_data(), vec![y.clone()]);
        // Malformed frames are dropped under their reasons.
        let mut v6 = frame([10, 0, 0, 1]);
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut bad_ihl = frame([10, 0, 0, 1]);
        bad_ihl[14] = 0x43;
        let mut v5 = frame([10, 0, 0, 1]);
        v5[14] = 0x55;
        h.inject(
            "ip",
            0,
            &[
                v6,
                a[..30].to_vec(),
                bad_ihl,
                v5,
                vec![0u8; 10],
                a[..50].to_vec(),
            ],
        );
        assert_eq!(h.drops("ip", "not_ipv4"), 2);
        assert_eq!(h.drops("ip", "too_short"), 3);
        assert_eq!(h.drops("ip", "bad_ipv4_header"), 1);
        h.command("ip", "add", &route("10.9.0.0", 16, 8192))
            .unwrap();
        h.inject("ip", 0, std::slice::from_ref(&a));
        assert_eq!(h.drops("ip", "rule_drop"), 1);
        h.command("ip", "clear", &Value::map()).unwrap();
        h.inject("ip", 0, std::slice::from_ref(&b));
        assert_eq!(c[0].take_data(), vec![b]);
        h.command("ip", "delete", &route_del("0.0.0.0", 0)).unwrap();
        h.inject("ip", 0, std::slice::from_ref(&a));
        assert_eq!(h.drops("ip", "no_match"), 2);
    }

    #[test]
    fn runtime_config_lists_routes_and_the_default_gate() {
        let mut h = Harness::new();
        h.add(&CLASS, "ip", &Value::map()).unwrap();
        h.command("ip", "add", &route("10.1.0.0", 16, 2)).unwrap();
        h.command("ip", "add", &route("10.0.0.0", 8, 8192)).unwrap();
        let rt = h
            .command("ip", "get_runtime_config", &Value::map())
            .unwrap();
        assert_eq!(rt.get("default_gate").and_then(Value::as_i64), Some(8192));
        let rules = rt.get("rules").and_then(Value::as_list).unwrap();
        let got: Vec<_> = rules
            .iter()
            .map(|r| {
                (
                    r.get("prefix").and_then(Value::as_str).unwrap().to_string(),
                    r.get("prefix_len").and_then(Value::as_i64).unwrap(),
                    r.get("gate").and_then(Value::as_i64).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![("10.0.0.0".into(), 8, 8192), ("10.1.0.0".into(), 16, 2)]
        );
        h.command("ip", "add", &route("0.0.0.0", 0, 3)).unwrap();
        let rt = h
            .command("ip", "get_runtime_config", &Value::map())
            .unwrap();
        assert_eq!(rt.get("default_gate").and_then(Value::as_i64), Some(3));
    }

    fn route_del(prefix: &str, len: u64) -> Value {
        Value::map().with("prefix", prefix).with("prefix_len", len)
    }

    #[test]
    fn argument_errors_and_limits() {
        let mut h = Harness::new();
        h.add(
            &CLASS,
            "ip",
            &Value::map().with("max_rules", 2).with("max_tbl8s", 1),
        )
        .unwrap();
        let e = h
            .command("ip", "add", &route("10.0.0.1", 8, 0))
            .unwrap_err();
        assert!(e.msg.contains("prefix"), "{}", e.msg);
        let e = h.command("ip", "add", &route("10.0.0", 8, 0)).unwrap_err();
        assert!(e.msg.contains("prefix"), "{}", e.msg);
        let e = h
            .command("ip", "add", &route("10.0.0.0", 33, 0))
            .unwrap_err();
        assert!(e.msg.contains("prefix_len"), "{}", e.msg);
        let e = h
            .command("ip", "add", &route("10.0.0.0", 8, 9000))
            .unwrap_err();
        assert!(e.msg.contains("gate"), "{}", e.msg);
        h.command("ip", "add", &route("10.0.0.0", 32, 0)).unwrap();
        let e = h
            .command("ip", "add", &route("10.0.1.0", 32, 0))
            .unwrap_err();
        assert!(e.msg.contains("max_tbl8s"), "{}", e.msg);
        h.command("ip", "add", &route("10.0.0.0", 8, 0)).unwrap();
        let e = h
            .command("ip", "add", &route("11.0.0.0", 8, 0))
            .unwrap_err();
        assert!(e.msg.contains("max_rules"), "{}", e.msg);
        let e = h
            .command("ip", "delete", &route_del("12.0.0.0", 8))
            .unwrap_err();
        assert_eq!(e.code, Error::not_found("").code);
        let e = h
            .add(&CLASS, "x", &Value::map().with("max_rules", -1))
            .unwrap_err();
        assert!(e.msg.contains("max_rules"), "{}", e.msg);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn agrees_with_a_linear_scan(
            rules in proptest::collection::vec((any::<u32>(), 4u8..=32, 0u16..6), 1..40),
            dels in proptest::collection::vec(any::<prop::sample::Index>(), 0..15),
            addrs in proptest::collection::vec((any::<u32>(), any::<prop::sample::Index>(), 0u8..3), 1..100),
        ) {
            let mut lpm = Lpm::new(1000, 1000);
            let mut reference: Vec<(u32, u8, u16)> = Vec::new();
            for &(p, l, g) in &rules {
                let p = p & mask(l);
                lpm.add(p, l, g).unwrap();
                reference.retain(|r| (r.0, r.1) != (p, l));
                reference.push((p, l, g));
            }
            for d in &dels {
                let (p, l, _) = rules[d.index(rules.len())];
                let p = p & mask(l);
                let had = reference.iter().any(|r| (r.0, r.1) == (p, l));
                prop_assert_eq!(lpm.delete(p, l), had);
                reference.retain(|r| (r.0, r.1) != (p, l));
            }
            for &(a, pick, mode) in &addrs {
                // Random addresses, or addresses inside (and just past) a rule's range.
                let a = match mode {
                    0 => a,
                    _ => {
                        let (p, l, _) = rules[pick.index(rules.len())];
                        let p = p & mask(l);
                        if mode == 1 { p | (a & !mask(l)) } else { (p | !mask(l)).wrapping_add(1) }
                    }
                };
                let want = reference
                    .iter()
                    .filter(|r| a & mask(r.1) == r.0)
                    .max_by_key(|r| r.1)
                    .map(|r| r.2);
                prop_assert_eq!(lpm.lookup(a), want, "address {}", Ipv4Addr::from(a));
            }
            // Deleting everything folds every group back.
            for (p, l, _) in reference.clone() {
                prop_assert!(lpm.delete(p, l));
            }
            prop_assert_eq!(lpm.groups_used, 0);
            prop_assert!(lpm.tbl24.iter().all(|&e| e == 0));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn module_agrees_with_a_linear_scan(
            rules in proptest::collection::vec((any::<u32>(), 0u8..=32, 0u16..5), 1..25),
            dels in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
            addrs in proptest::collection::vec((any::<u32>(), any::<prop::sample::Index>(), any::<bool>()), 1..100),
        ) {
            // Through commands and packets; gate 4 is the default (set by a /0 rule or not).
            let mut h = Harness::new();
            h.add(&CLASS, "ip", &Value::map()).unwrap();
            let caps: Vec<_> = (0..5).map(|g| h.capture("ip", g)).collect();
            let mut reference: Vec<(u32, u8, u16)> = Vec::new();
            let mut default = None;
            for &(p, l, g) in &rules {
                let p = p & mask(l);
                h.command("ip", "add", &route(&Ipv4Addr::from(p).to_string(), l as u64, g as u64)).unwrap();
                if l == 0 {
                    default = Some(g);
                    continue;
                }
                reference.retain(|r| (r.0, r.1) != (p, l));
                reference.push((p, l, g));
            }
            for d in &dels {
                let (p, l, _) = rules[d.index(rules.len())];
                let p = p & mask(l);
                let r = h.command("ip", "delete", &route_del(&Ipv4Addr::from(p).to_string(), l as u64));
                if l == 0 {
                    default = None;
                    continue;
                }
                let had = reference.iter().any(|r| (r.0, r.1) == (p, l));
                prop_assert_eq!(r.is_ok(), had);
                reference.retain(|r| (r.0, r.1) != (p, l));
            }
            let mut want = vec![Vec::new(); 5];
            let mut pkts = Vec::new();
            let mut dropped = 0;
            for &(a, pick, inside) in &addrs {
                let a = if inside {
                    let (p, l, _) = rules[pick.index(rules.len())];
                    (p & mask(l)) | (a & !mask(l))
                } else {
                    a
                };
                let p = frame(a.to_be_bytes());
                let g = reference
                    .iter()
                    .filter(|r| a & mask(r.1) == r.0)
                    .max_by_key(|r| r.1)
                    .map(|r| r.2)
                    .or(default);
                match g {
                    Some(g) => want[g as usize].push(p.clone()),
                    None => dropped += 1,
                }
                pkts.push(p);
            }
            h.inject("ip", 0, &pkts);
            for g in 0..5 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone());
            }
            prop_assert_eq!(h.drops("ip", "no_match"), dropped);
        }
    }

    #[test]
    fn module_routes_like_the_table() {
        // The module path (parsing, prefetch passes, gate split) against direct lookups.
        let mut h = Harness::new();
        h.add(&CLASS, "ip", &Value::map()).unwrap();
        let c: Vec<_> = (0..3).map(|g| h.capture("ip", g)).collect();
        h.command("ip", "add", &route("0.0.0.0", 0, 2)).unwrap();
        h.command("ip", "add", &route("128.0.0.0", 1, 1)).unwrap();
        h.command("ip", "add", &route("200.1.2.3", 32, 0)).unwrap();
        let dsts: Vec<[u8; 4]> = (0..70u32)
            .map(|i| (i.wrapping_mul(0x9E37_79B9) ^ if i % 7 == 0 { 0 } else { 1 }).to_be_bytes())
            .chain([[200, 1, 2, 3]])
            .collect();
        let pkts: Vec<Vec<u8>> = dsts.iter().map(|d| frame(*d)).collect();
        h.inject("ip", 0, &pkts);
        let mut want = vec![Vec::new(); 3];
        for (d, p) in dsts.iter().zip(&pkts) {
            let g = if *d == [200, 1, 2, 3] {
                0
            } else if d[0] >= 128 {
                1
            } else {
                2
            };
            want[g].push(p.clone());
        }
        for g in 0..3 {
            assert_eq!(c[g].take_data(), want[g]);
        }
    }

    /// The drop reason (as the class names it) or IPv4 destination of frame `d`, written from
    /// the definitions (Ethernet II, IPv4 header checks) independently of the module.
    fn reference_parse(d: &[u8]) -> std::result::Result<u32, &'static str> {
        if d.len() < 14 {
            return Err("too_short");
        }
        if d[12..14] != [0x08, 0x00] {
            return Err("not_ipv4");
        }
        let ip = &d[14..];
        if ip.len() < 20 {
            return Err("too_short");
        }
        let ihl = (ip[0] & 0x0f) as usize * 4;
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        let consistent = ihl >= 20 && ip.len() >= ihl && ihl <= total && total <= ip.len();
        if !consistent {
            // Inconsistent header fields in a frame holding its total length: a bad header;
            // otherwise the frame is cut short.
            return Err(if total <= ip.len() {
                "bad_ipv4_header"
            } else {
                "too_short"
            });
        }
        if ip[0] >> 4 != 4 {
            return Err("not_ipv4");
        }
        Ok(u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]))
    }

    /// `frame(dst)` changed as `kind` says: most kinds leave a routable frame (options,
    /// padding), the others break one header field or cut the frame.
    fn mutated(dst: u32, kind: u8, x: u8) -> Vec<u8> {
        let mut p = frame(dst.to_be_bytes());
        match kind {
            0..=5 => {}
            6 => p.truncate(x as usize % 34), // shorter than the headers
            7 => p[12..14].copy_from_slice(&[0x86, 0xdd]), // IPv6
            8 => p[12..14].copy_from_slice(&[0x81, 0x00]), // VLAN tag
            9 => p[14] = 0x40 | (x % 16),     // any IHL
            10 => p[14] = (x & 0xf0) | 5,     // any version
            11 => p[16..18].copy_from_slice(&(x as u16).to_be_bytes()), // total length
            12 => p.truncate(34 + x as usize % 12), // cut inside the UDP header
            13 => {
                // A 24-byte header (options): routable, not the common form.
                p[14] = 0x46;
                p.splice(34..34, [1, 1, 1, 1]);
                p[16..18].copy_from_slice(&50u16.to_be_bytes());
            }
            _ => p.extend(std::iter::repeat_n(0, x as usize)), // Ethernet padding
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every path of `process_batch` (the common one, the gathering split for gates below
        /// 8, `emit` beyond, one gate for the whole batch, the per-packet path for drops and
        /// other frames) routes and drops as the reference parse and a linear scan say, keeps
        /// each gate's packets in order, and leaks no buffer.
        #[test]
        fn batches_route_as_the_reference(
            rules in proptest::collection::vec((any::<u32>(), 1u8..=32, 0u16..14), 0..30),
            default in proptest::option::of(0u16..3),
            batches in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec(
                    (any::<u32>(), any::<prop::sample::Index>(), any::<bool>(), 0u8..16, any::<u8>()),
                    0..=MAX_BURST)),
                1..5),
        ) {
            // Gate 13 stands for DROP_GATE.
            let gate_of = |g: u16| if g == 13 { DROP_GATE } else { g };
            let mut h = Harness::new();
            h.add(&CLASS, "ip", &Value::map()).unwrap();
            let caps: Vec<_> = (0..13).map(|g| h.capture("ip", g)).collect();
            let mut reference: Vec<(u32, u8, u16)> = Vec::new();
            for &(p, l, g) in &rules {
                let p = p & mask(l);
                h.command("ip", "add", &route(&Ipv4Addr::from(p).to_string(), l as u64,
                                              gate_of(g) as u64)).unwrap();
                reference.retain(|r| (r.0, r.1) != (p, l));
                reference.push((p, l, gate_of(g)));
            }
            if let Some(g) = default {
                h.command("ip", "add", &route("0.0.0.0", 0, g as u64)).unwrap();
            }
            let mut want = vec![Vec::new(); 13];
            let mut drops = std::collections::HashMap::<&str, u64>::new();
            for (clean, batch) in &batches {
                let mut pkts = Vec::new();
                for &(a, pick, inside, kind, x) in batch {
                    // A clean batch holds common frames only (the whole-batch paths).
                    let kind = if *clean { 0 } else { kind };
                    let a = match (inside, rules.is_empty()) {
                        (true, false) => {
                            let (p, l, _) = rules[pick.index(rules.len())];
                            (p & mask(l)) | (a & !mask(l))
                        }
                        _ => a,
                    };
                    let p = mutated(a, kind, x);
                    let verdict = reference_parse(&p).and_then(|dst| {
                        let g = reference
                            .iter()
                            .filter(|r| dst & mask(r.1) == r.0)
                            .max_by_key(|r| r.1)
                            .map(|r| r.2);
                        match (g, default) {
                            (Some(DROP_GATE), _) => Err("rule_drop"),
                            (Some(g), _) | (None, Some(g)) => Ok(g),
                            (None, None) => Err("no_match"),
                        }
                    });
                    match verdict {
                        Ok(g) => want[g as usize].push(p.clone()),
                        Err(r) => *drops.entry(r).or_default() += 1,
                    }
                    pkts.push(p);
                }
                h.inject("ip", 0, &pkts);
            }
            for g in 0..13 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone(), "gate {}", g);
            }
            for r in ["no_match", "too_short", "not_ipv4", "bad_ipv4_header", "rule_drop"] {
                prop_assert_eq!(h.drops("ip", r), drops.get(r).copied().unwrap_or(0), "{}", r);
            }
            prop_assert_eq!(h.in_use(), 0);
        }
    }

    #[test]
    fn gates_sharing_a_next_module_get_packets_in_emit_order() {
        // Gates 0, 1 and 2 all lead to one capture: the batches reach it in the order
        // `Context::emit` sends them (the gate seen first, last), as before the gathering
        // split.
        let mut h = Harness::new();
        h.add(&CLASS, "ip", &Value::map()).unwrap();
        let c = h.capture("ip", 0);
        h.connect("ip", 1, "cap_ip_0", 0).unwrap();
        h.connect("ip", 2, "cap_ip_0", 0).unwrap();
        for g in 0..3u8 {
            h.command("ip", "add", &route(&format!("10.{g}.0.0"), 16, g as u64))
                .unwrap();
        }
        let pkts: Vec<Vec<u8>> = [(1, 1), (0, 2), (1, 3), (2, 4), (0, 5)]
            .iter()
            .map(|&(g, i)| frame([10, g, 0, i]))
            .collect();
        h.inject("ip", 0, &pkts);
        let got: Vec<u8> = c.take_data().iter().map(|p| p[33]).collect();
        assert_eq!(got, vec![4, 2, 5, 1, 3]);
    }

    /// `n` distinct prefixes with an Internet table's length mix (mostly /24, a few longer).
    fn internet_table(n: usize, seed: u64) -> Vec<(u32, u8)> {
        let mut rng = crate::util::FastRng::new(seed);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let len = match rng.below(1000) {
                0..=5 => 8 + rng.below(8) as u8,
                6..=19 => 16,
                20..=151 => 17 + rng.below(5) as u8,
                152..=261 => 22,
                262..=361 => 23,
                362..=996 => 24,
                _ => 25 + rng.below(8) as u8,
            };
            let p = (rng.next_u64() as u32) & mask(len);
            if seen.insert((p, len)) {
                out.push((p, len));
            }
        }
        out
    }

    #[test]
    fn a_large_table_agrees_with_a_per_length_reference() {
        // 200 000 prefixes, a tenth deleted again, against a reference that tries every
        // length from /32 down in a hash map: random addresses and addresses inside (and
        // just past) prefixes, through the table and through the module in full batches.
        let table = internet_table(200_000, 42);
        let mut lpm = Lpm::new(table.len(), 1 << 16);
        let mut by_len: Vec<HashMap<u32, u16>> = vec![HashMap::new(); 33];
        for (i, &(p, l)) in table.iter().enumerate() {
            let g = (i % 7) as u16;
            lpm.add(p, l, g).unwrap();
            by_len[l as usize].insert(p, g);
        }
        for &(p, l) in table.iter().step_by(10) {
            assert!(lpm.delete(p, l));
            by_len[l as usize].remove(&p);
        }
        let want = |a: u32| {
            (1..=32u8)
                .rev()
                .find_map(|l| by_len[l as usize].get(&(a & mask(l))).copied())
        };
        let mut rng = crate::util::FastRng::new(7);
        let mut addrs = Vec::new();
        for i in 0..60_000 {
            let r = rng.next_u64() as u32;
            let a = match i % 3 {
                0 => r,
                1 => {
                    let (p, l) = table[rng.below(table.len() as u64) as usize];
                    p | (r & !mask(l))
                }
                _ => {
                    let (p, l) = table[rng.below(table.len() as u64) as usize];
                    (p | !mask(l)).wrapping_add(1)
                }
            };
            assert_eq!(lpm.lookup(a), want(a), "address {}", Ipv4Addr::from(a));
            addrs.push(a);
        }
        // The same through the module: the table's rules, default gate 7.
        let mut h = Harness::new();
        h.add(
            &CLASS,
            "ip",
            &Value::map()
                .with("max_rules", 300_000)
                .with("max_tbl8s", 1 << 16),
        )
        .unwrap();
        let caps: Vec<_> = (0..8).map(|g| h.capture("ip", g)).collect();
        for (i, &(p, l)) in table.iter().enumerate() {
            if i % 10 != 0 {
                h.command(
                    "ip",
                    "add",
                    &route(&Ipv4Addr::from(p).to_string(), l as u64, (i % 7) as u64),
                )
                .unwrap();
            }
        }
        h.command("ip", "add", &route("0.0.0.0", 0, 7)).unwrap();
        let mut expect = vec![Vec::new(); 8];
        for chunk in addrs[..8192].chunks(MAX_BURST) {
            let pkts: Vec<Vec<u8>> = chunk.iter().map(|a| frame(a.to_be_bytes())).collect();
            for (a, p) in chunk.iter().zip(&pkts) {
                expect[want(*a).unwrap_or(7) as usize].push(p.clone());
            }
            h.inject("ip", 0, &pkts);
        }
        for g in 0..8 {
            assert_eq!(caps[g].take_data(), expect[g], "gate {g}");
        }
    }
}

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

impl Module for IPLookup {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = batch.len();
        let mut addrs = [0u32; MAX_BURST];
        let mut status = [None; MAX_BURST]; // None: routable, else the drop reason
        for (i, p) in batch.pkts().iter().enumerate() {
            let s = match EthernetFrame::new_checked(p.data()) {
                Err(_) => Some(IpLookupDrop::TooShort),
                Ok(f) if f.ethertype() != EthernetProtocol::Ipv4 => Some(IpLookupDrop::NotIpv4),
                Ok(f) => match Ipv4Packet::new_checked(f.payload()) {
                    Err(_) => {
                        // Truncated (shorter than a header, or than its total length)
                        // versus inconsistent (bad IHL).
                        let pl = f.payload();
                        let total = pl.get(2..4).map(|b| u16::from_be_bytes([b[0], b[1]]));
                        match total {
                            Some(t) if pl.len() >= 20 && t as usize <= pl.len() => {
                                Some(IpLookupDrop::BadHeader)
                            }
                            _ => Some(IpLookupDrop::TooShort),
                        }
                    }
                    Ok(ip) if ip.version() != 4 => Some(IpLookupDrop::NotIpv4),
                    Ok(ip) => {
                        addrs[i] = u32::from(ip.dst_addr());
                        prefetch(&self.lpm.tbl24[(addrs[i] >> 8) as usize]);
                        None
                    }
                },
            };
            status[i] = s;
        }
        // Second level: prefetch the group entries before reading them.
        for i in 0..n {
            if status[i].is_none() {
                let e = self.lpm.tbl24[(addrs[i] >> 8) as usize];
                if e & EXT != 0 {
                    let j = (e & PAYLOAD) as usize * 256 + (addrs[i] & 0xff) as usize;
                    prefetch(self.lpm.tbl8.as_ptr().wrapping_add(j));
                }
            }
        }
        let def = self.default_gate;
        let mut gates = [0u16; MAX_BURST];
        for i in 0..n {
            if status[i].is_none() {
                match self.lpm.lookup(addrs[i]) {
                    Some(g) if g == DROP_GATE => status[i] = Some(IpLookupDrop::Rule),
                    Some(g) => gates[i] = g,
                    None if def == DROP_GATE => status[i] = Some(IpLookupDrop::NoMatch),
                    None => gates[i] = def,
                }
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
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "IPLookupCommandDeleteArg",
            help: "removes prefix/prefix_len (/0 resets the default gate to drop)",
            mt_safe: false,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "removes all prefixes (the default gate stays)",
            mt_safe: false,
            handler: handler!(Exclusive IPLookup, IPLookup::cmd_clear),
        },
        CommandSpec {
            name: "get_runtime_config",
            arg_type: "EmptyArg",
            help: "the routes (prefix, prefix_len, gate) and the default gate",
            mt_safe: false,
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
}

//! NAT: BESS's dynamic network address and port translator (RFC 4787 behaviour).
//!
//! Input gate 0 carries internal → external traffic, which leaves on output gate 1; input
//! gate 1 carries external → internal traffic, which leaves on output gate 0 (as BESS).
//!
//! An internal endpoint (address, TCP/UDP port or ICMP query identifier, protocol) is mapped to
//! one external endpoint, whatever the destination (endpoint-independent mapping, as BESS):
//! the external address is chosen by a hash of the internal address (so an internal host
//! always appears as the same external address) and the port from that address's port ranges,
//! starting at a random port and probing linearly. Privileged ports (1..1023) map to privileged
//! ports. Only outbound packets refresh a mapping; a mapping idle for longer than the timeout
//! (BESS's 300 s) no longer admits inbound packets, and its port is reclaimed when a new
//! mapping needs it (BESS's lazy reclaim).
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::headers::{ipv4_string, nat_commands, parse_ipv4};
use crate::checksum::{self, PROTO_TCP, PROTO_UDP};
use crate::headers::{
    ipv4_in_frame_mut, AddrField, IcmpView, Ipv4Error, Ipv4View, TcpView, UdpView, PROTO_ICMP,
};
use crate::util::FastRng;
use crate::util::{process_each, Verdict};
use bessemer_core::{
    Args, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result, Value,
};

bessemer_core::drop_reasons! {
    /// Why NAT drops: the IPv4 header errors, then the translation's own.
    pub enum NatDrop {
        Ipv4(Ipv4Error),
        /// An IPv4 fragment (not translated, as BESS).
        Fragment = "fragment",
        /// Not TCP, UDP or an ICMP query.
        Unsupported = "unsupported_protocol",
        /// Inbound packet with no live mapping.
        NoMapping = "no_mapping",
        /// No free external port for a new flow.
        NoFreePort = "no_free_port",
        /// Outbound TCP/UDP flow from port 0.
        ZeroPort = "zero_port",
    }
}

const DROP_TOO_SHORT: NatDrop = NatDrop::Ipv4(Ipv4Error::TooShort);

/// How long an idle mapping lives (BESS's kTimeOutNs, RFC 4787 REQ-5-c).
pub const TIMEOUT_NS: u64 = 300 * 1_000_000_000;
/// Ports probed per range when looking for a free one (BESS's kMaxTrials).
pub const MAX_TRIALS: u32 = 128;

/// ICMP query types carrying an identifier: echo reply/request, timestamp request/reply,
/// information request/reply.
fn icmp_query(t: u8) -> bool {
    matches!(t, 0 | 8 | 13 | 14 | 15 | 16)
}

/// An endpoint packed as address << 32 | port << 16 | protocol.
type Key = u64;

fn key(addr: u32, port: u16, proto: u8) -> Key {
    (addr as u64) << 32 | (port as u64) << 16 | proto as u64
}

fn key_addr(k: Key) -> u32 {
    (k >> 32) as u32
}

fn key_port(k: Key) -> u16 {
    (k >> 16) as u16
}

/// A multiplicative hasher for the packed endpoint keys (std's SipHash is needlessly slow
/// for 8-byte keys the module itself builds).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

type Map<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

#[derive(Clone, Copy, Debug)]
struct Forward {
    ext: Key,
    last_refresh: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct PortRange {
    begin: u32,
    /// Exclusive.
    end: u32,
    suspended: bool,
}

#[derive(Clone, Debug)]
struct ExtAddr {
    addr: u32,
    ranges: Vec<PortRange>,
    /// True if the ranges were defaulted (not given in the argument).
    default_range: bool,
}

/// The dynamic NAT.
pub struct Nat {
    ext: Vec<ExtAddr>,
    fwd: Map<Forward>,
    rev: Map<Key>,
    rng: FastRng,
    timeout: u64,
}

#[cfg(test)]
thread_local! {
    /// Test-only clock offset (TSC cycles) added to the packet time.
    static CLOCK_OFFSET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Advances the clock NAT instances on this thread see (tests only).
#[cfg(test)]
pub fn advance_clock_ns(ns: u64) {
    let c = bessemer_core::tsc::ns_to_cycles(ns);
    CLOCK_OFFSET.with(|o| o.set(o.get() + c));
}

#[inline]
fn now(ctx: &Context) -> u64 {
    #[cfg(test)]
    {
        ctx.now() + CLOCK_OFFSET.with(|o| o.get())
    }
    #[cfg(not(test))]
    {
        ctx.now()
    }
}

/// What a packet's L4 header says.
struct Flow {
    proto: u8,
    /// The port (or ICMP identifier) of the translated endpoint.
    port: u16,
}

impl Nat {
    fn ext_for(&self, int_addr: u32) -> usize {
        // A fixed hash so an internal address always gets the same external address
        // (RFC 4787 REQ-2).
        let h = (int_addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (h % self.ext.len() as u64) as usize
    }

    fn expired(&self, f: &Forward, now: u64) -> bool {
        now.saturating_sub(f.last_refresh) > self.timeout
    }

    /// Allocates an external endpoint for `int`; None if no port is free.
    fn create(&mut self, int: Key, now: u64) -> Option<Key> {
        let proto = int as u8;
        let port = key_port(int);
        let e = self.ext_for(key_addr(int));
        let ext_addr = self.ext[e].addr;
        for ri in 0..self.ext[e].ranges.len() {
            let r = self.ext[e].ranges[ri];
            if r.suspended {
                continue;
            }
            let (lo, hi) = if proto == PROTO_ICMP {
                (r.begin, r.end)
            } else if port >= 1024 {
                (r.begin.max(1024), r.end)
            } else {
                // Privileged ports map to privileged ports (RFC 4787 REQ-5-a).
                (r.begin.max(1), r.end.min(1024))
            };
            if lo >= hi {
                continue;
            }
            let span = hi - lo;
            let start = self.rng.below(span as u64) as u32;
            for t in 0..span.min(MAX_TRIALS) {
                let p = lo + (start + t) % span;
                let ext = key(ext_addr, p as u16, proto);
                match self.rev.get(&ext) {
                    None => {}
                    Some(&old_int) => {
                        let live = self
                            .fwd
                            .get(&old_int)
                            .is_some_and(|f| !self.expired(f, now));
                        if live {
                            continue;
                        }
                        self.fwd.remove(&old_int);
                        self.rev.remove(&ext);
                    }
                }
                self.rev.insert(ext, int);
                self.fwd.insert(
                    int,
                    Forward {
                        ext,
                        last_refresh: now,
                    },
                );
                return Some(ext);
            }
        }
        None
    }

    /// Checks the frame and reads the port (or ICMP identifier) of the translated endpoint
    /// (the source's outbound, the destination's inbound); Err is a drop reason.
    fn classify(
        d: &mut [u8],
        field: AddrField,
    ) -> std::result::Result<(Ipv4View<&mut [u8]>, Flow), NatDrop> {
        let ip = ipv4_in_frame_mut(d).map_err(NatDrop::from)?;
        if ip.is_fragment() {
            return Err(NatDrop::Fragment);
        }
        let proto = ip.protocol();
        let port = match proto {
            PROTO_TCP => {
                let t = TcpView::new_checked(ip.payload()).map_err(|_| DROP_TOO_SHORT)?;
                match field {
                    AddrField::Src => t.src_port(),
                    AddrField::Dst => t.dst_port(),
                }
            }
            PROTO_UDP => {
                let u = UdpView::new_checked(ip.payload()).map_err(|_| DROP_TOO_SHORT)?;
                match field {
                    AddrField::Src => u.src_port(),
                    AddrField::Dst => u.dst_port(),
                }
            }
            PROTO_ICMP => {
                let i = IcmpView::new_checked(ip.payload()).map_err(|_| DROP_TOO_SHORT)?;
                if !icmp_query(i.msg_type()) {
                    return Err(NatDrop::Unsupported);
                }
                i.ident()
            }
            _ => return Err(NatDrop::Unsupported),
        };
        Ok((ip, Flow { proto, port }))
    }

    /// Rewrites address `field` and the endpoint's port/identifier of `ip` (as `classify`
    /// checked it) to `to`, fixing checksums incrementally.
    fn stamp(mut ip: Ipv4View<&mut [u8]>, field: AddrField, flow: &Flow, to: Key) {
        let (old_addr, new_addr) = (ip.addr(field), key_addr(to));
        let new_port = key_port(to);
        ip.set_addr(field, new_addr);
        let l3_inc = checksum::increment32(old_addr, new_addr);
        ip.apply_checksum_increment(l3_inc);
        let l4_inc = l3_inc + checksum::increment16(flow.port, new_port);
        // The L4 header lengths were checked by classify: these views are always made.
        let seg = ip.payload_mut();
        match flow.proto {
            PROTO_TCP => {
                if let Ok(mut t) = TcpView::new_checked(seg) {
                    match field {
                        AddrField::Src => t.set_src_port(new_port),
                        AddrField::Dst => t.set_dst_port(new_port),
                    }
                    t.apply_checksum_increment(l4_inc);
                }
            }
            PROTO_UDP => {
                if let Ok(mut u) = UdpView::new_checked(seg) {
                    match field {
                        AddrField::Src => u.set_src_port(new_port),
                        AddrField::Dst => u.set_dst_port(new_port),
                    }
                    u.apply_checksum_increment(l4_inc);
                }
            }
            _ => {
                // ICMP has no pseudo-header: only the identifier changed.
                if let Ok(mut i) = IcmpView::new_checked(seg) {
                    i.rewrite_ident(new_port);
                }
            }
        }
    }

    fn outbound(&mut self, d: &mut [u8], now: u64) -> Verdict<NatDrop> {
        let (ip, flow) = match Self::classify(d, AddrField::Src) {
            Ok(x) => x,
            Err(r) => return Verdict::Drop(r),
        };
        let int = key(ip.src(), flow.port, flow.proto);
        let ext = match self.fwd.get_mut(&int) {
            Some(f) => {
                // Only outbound packets refresh (RFC 4787 REQ-6).
                f.last_refresh = now;
                f.ext
            }
            None => {
                if flow.proto != PROTO_ICMP && key_port(int) == 0 {
                    return Verdict::Drop(NatDrop::ZeroPort);
                }
                match self.create(int, now) {
                    Some(ext) => ext,
                    None => return Verdict::Drop(NatDrop::NoFreePort),
                }
            }
        };
        Self::stamp(ip, AddrField::Src, &flow, ext);
        Verdict::Gate(1)
    }

    fn inbound(&mut self, d: &mut [u8], now: u64) -> Verdict<NatDrop> {
        let (ip, flow) = match Self::classify(d, AddrField::Dst) {
            Ok(x) => x,
            Err(r) => return Verdict::Drop(r),
        };
        let ext = key(ip.dst(), flow.port, flow.proto);
        let Some(&int) = self.rev.get(&ext) else {
            return Verdict::Drop(NatDrop::NoMapping);
        };
        match self.fwd.get(&int) {
            Some(f) if f.ext == ext && !self.expired(f, now) => {}
            _ => return Verdict::Drop(NatDrop::NoMapping),
        }
        Self::stamp(ip, AddrField::Dst, &flow, int);
        Verdict::Gate(0)
    }

    fn initial_arg(&self) -> Value {
        let addrs = self
            .ext
            .iter()
            .map(|e| {
                let mut v = Value::map().with("ext_addr", ipv4_string(e.addr));
                if !e.default_range {
                    let ranges = e
                        .ranges
                        .iter()
                        .map(|r| {
                            Value::map()
                                .with("begin", r.begin)
                                .with("end", r.end)
                                .with("suspended", r.suspended)
                        })
                        .collect::<Vec<_>>();
                    v = v.with("port_ranges", Value::List(ranges));
                }
                v
            })
            .collect::<Vec<_>>();
        Value::map().with("ext_addrs", Value::List(addrs))
    }
}

fn parse(arg: &Value) -> Result<Vec<ExtAddr>> {
    let mut a = Args::new(arg, "NATArg")?;
    let list = a.list("ext_addrs")?;
    a.finish()?;
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let m = format!("NATArg.ext_addrs[{i}]");
        let mut a = Args::new(e, &m)?;
        let addr = a
            .str("ext_addr")?
            .ok_or_else(|| Error::invalid(format!("{m}.ext_addr is required")))?;
        let addr = parse_ipv4(addr, &format!("{m}.ext_addr"))?;
        let mut ranges = Vec::new();
        for (j, r) in a.list("port_ranges")?.iter().enumerate() {
            let rm = format!("{m}.port_ranges[{j}]");
            let mut ra = Args::new(r, &rm)?;
            let begin = ra.uint("begin", 65535)?.unwrap_or(0) as u32;
            let end = ra.uint("end", 65535)?.unwrap_or(0) as u32;
            let suspended = ra.bool("suspended")?.unwrap_or(false);
            ra.finish()?;
            if begin >= end {
                return Err(Error::invalid(format!(
                    "{rm}: begin ({begin}) must be below end ({end})"
                )));
            }
            ranges.push(PortRange {
                begin,
                end,
                suspended,
            });
        }
        a.finish()?;
        let default_range = ranges.is_empty();
        if default_range {
            ranges.push(PortRange {
                begin: 0,
                end: 65536,
                suspended: false,
            });
        }
        if out.iter().any(|x: &ExtAddr| x.addr == addr) {
            return Err(Error::invalid(format!(
                "{m}.ext_addr: {} is listed twice",
                ipv4_string(addr)
            )));
        }
        out.push(ExtAddr {
            addr,
            ranges,
            default_range,
        });
    }
    if out.is_empty() {
        return Err(Error::invalid(
            "NATArg.ext_addrs: at least one external IP address must be specified",
        ));
    }
    // Sorted so the address chosen for an internal host does not depend on argument order.
    out.sort_by_key(|e| e.addr);
    Ok(out)
}

impl Module for Nat {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        let now = now(ctx);
        process_each(ctx, batch, |p| {
            if igate == 0 {
                self.outbound(p.data_mut(), now)
            } else {
                self.inbound(p.data_mut(), now)
            }
        });
    }

    fn desc(&self) -> String {
        format!("{} entries", self.fwd.len())
    }

    fn info(&self) -> Value {
        Value::map().with("entries", self.fwd.len())
    }
}

/// The NAT class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "NAT",
    name_template: "nat",
    help: "Dynamic Network address/port translator",
    arg_type: "NATArg",
    arg_doc: &[
        "ext_addrs: [{ext_addr: string, port_ranges: [{begin: uint32, end: uint32, suspended: bool}]}] — external IPv4 addresses and the port (or ICMP identifier) ranges [begin, end) to allocate from (all ports when none given; suspended ranges are not allocated from)",
        "gates: input 0 = internal→external (out of gate 1), input 1 = external→internal (out of gate 0); TCP, UDP and ICMP queries; mappings idle 300 s expire",
    ],
    igates: 2,
    ogates: 2,
    commands: nat_commands!(Nat, "NATArg"),
    drop_reasons: NatDrop::NAMES,
    max_workers: 2,
    create: |_, arg| {
        let ext = parse(arg)?;
        Ok(Instance::Exclusive(Box::new(Nat {
            ext,
            fwd: Map::with_capacity_and_hasher(4096, Default::default()),
            rev: Map::with_capacity_and_hasher(4096, Default::default()),
            rng: FastRng::from_tsc(),
            timeout: bessemer_core::tsc::ns_to_cycles(TIMEOUT_NS),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    fn be16(d: &[u8], off: usize) -> u16 {
        u16::from_be_bytes([d[off], d[off + 1]])
    }
    use crate::headers::test_util::{checksums_ok, hex};
    use bessemer_core::testing::Harness;

    const UDP_OUT: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bf0a00 00010808 080804d2 00350009 6fc471";
    const UDP_OUT_X: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 eebdcb00 71010808 08081388 00350009 2f0d71";
    const UDP_IN: &str = "02000000 00010200 00000002 08004500 001d0001 40004011 eebd0808 0808cb00 71010035 13880009 2e0d72";
    const UDP_IN_X: &str = "02000000 00010200 00000002 08004500 001d0001 40004011 20bf0808 08080a00 00010035 04d20009 6ec472";
    const TCP_OUT: &str = "02000000 00020200 00000001 08004500 00290001 40004006 2ecc0a00 00010101 01019c40 01bb0000 00010000 00005002 040089e2 000078";
    const TCP_OUT_X: &str = "02000000 00020200 00000001 08004500 00290001 40004006 fccacb00 71010101 01011388 01bb0000 00010000 00005002 0400e099 000078";
    const TCP_IN: &str = "02000000 00010200 00000002 08004500 00290001 40004006 fcca0101 0101cb00 710101bb 13880000 00010000 00005002 0400e099 000078";
    const TCP_IN_X: &str = "02000000 00010200 00000002 08004500 00290001 40004006 2ecc0101 01010a00 000101bb 9c400000 00010000 00005002 040089e2 000078";
    const ICMP_OUT: &str = "02000000 00020200 00000001 08004500 00200001 40004001 20cc0a00 00010808 08080800 19270007 00017069 6e67";
    const ICMP_OUT_X: &str = "02000000 00020200 00000001 08004500 00200001 40004001 eecacb00 71010808 08080800 05a61388 00017069 6e67";
    const ICMP_IN: &str = "02000000 00010200 00000002 08004500 00200001 40004001 eeca0808 0808cb00 71010000 0da61388 00017069 6e67";
    const ICMP_IN_X: &str = "02000000 00010200 00000002 08004500 00200001 40004001 20cc0808 08080a00 00010000 21270007 00017069 6e67";
    const UDP_NOCSUM_OUT: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bf0a00 00010808 080804d2 00350009 00007a";
    const UDP_NOCSUM_OUT_X: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 eebdcb00 71010808 08081388 00350009 00007a";
    const UDP_OTHER_HOST: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20be0a00 00020808 080804d2 00350009 6fc371";
    const UDP_PRIV: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bf0a00 00010808 08080035 00350009 746171";
    const UDP_IN_UNKNOWN: &str = "02000000 00010200 00000002 08004500 001d0001 40004011 eebd0808 0808cb00 71010035 13890009 2e0c72";
    const UDP_ZERO_PORT: &str = "02000000 00020200 00000001 08004500 001d0001 40004011 20bf0a00 00010808 08080000 00350009 749671";
    const ICMP_UNREACH: &str = "02000000 00020200 00000001 08004500 00200001 40004001 20cc0a00 00010808 08080300 0c0f0000 00007878 7878";
    const GRE: &str =
        "02000000 00020200 00000001 08004500 00180001 4000402f 20a60a00 00010808 08080000 0800";
    const FRAG: &str = "02000000 00020200 00000001 08004500 001d0001 20004011 40bf0a00 00010808 080804d2 00350009 6fc471";

    fn arg(addrs: &[(&str, &[(u32, u32)])]) -> Value {
        Value::map().with(
            "ext_addrs",
            Value::List(
                addrs
                    .iter()
                    .map(|(a, ranges)| {
                        let mut v = Value::map().with("ext_addr", *a);
                        if !ranges.is_empty() {
                            v = v.with(
                                "port_ranges",
                                Value::List(
                                    ranges
                                        .iter()
                                        .map(|&(b, e)| Value::map().with("begin", b).with("end", e))
                                        .collect(),
                                ),
                            );
                        }
                        v
                    })
                    .collect(),
            ),
        )
    }

    struct Nat2 {
        h: Harness,
        out: bessemer_core::testing::CaptureHandle,
        back: bessemer_core::testing::CaptureHandle,
    }

    fn nat(a: &Value) -> Nat2 {
        let mut h = Harness::new();
        h.add(&CLASS, "n", a).unwrap();
        let back = h.capture("n", 0);
        let out = h.capture("n", 1);
        Nat2 { h, out, back }
    }

    #[test]
    fn translates_tcp_udp_icmp_both_ways_byte_exact() {
        let mut n = nat(&arg(&[("203.0.113.1", &[(5000, 5001)])]));
        n.h.inject(
            "n",
            0,
            &[
                hex(UDP_OUT),
                hex(TCP_OUT),
                hex(ICMP_OUT),
                hex(UDP_NOCSUM_OUT),
            ],
        );
        let got = n.out.take_data();
        assert_eq!(
            got,
            vec![
                hex(UDP_OUT_X),
                hex(TCP_OUT_X),
                hex(ICMP_OUT_X),
                hex(UDP_NOCSUM_OUT_X)
            ]
        );
        n.h.inject("n", 1, &[hex(UDP_IN), hex(TCP_IN), hex(ICMP_IN)]);
        let back = n.back.take_data();
        assert_eq!(back, vec![hex(UDP_IN_X), hex(TCP_IN_X), hex(ICMP_IN_X)]);
        for f in got.iter().chain(&back) {
            assert!(checksums_ok(f, 14));
        }
        assert!(n.out.is_empty() && n.back.is_empty());
        assert_eq!(
            n.h.graph.info_of("n").unwrap(),
            Value::map().with("entries", 3usize)
        );
    }

    #[test]
    fn drops_by_reason() {
        let mut n = nat(&arg(&[("203.0.113.1", &[(5000, 5001)])]));
        n.h.inject("n", 0, &[hex(UDP_OUT)]);
        assert_eq!(n.out.take_data(), vec![hex(UDP_OUT_X)]);
        n.h.inject(
            "n",
            0,
            &[
                hex(UDP_OTHER_HOST), // the only unprivileged UDP port is taken
                hex(UDP_PRIV),       // no privileged port in the pool
                hex(UDP_ZERO_PORT),
                hex(ICMP_UNREACH),
                hex(GRE),
                hex(FRAG),
                hex("02000000 00020200 00000001 0806 0001"),
                hex("02000000 00020200 00000001 0800 4500001d"),
                hex("02000000 00020200 00000001 0800 4f00001d"),
            ],
        );
        n.h.inject("n", 1, &[hex(UDP_IN_UNKNOWN), hex(TCP_IN)]);
        assert!(n.out.is_empty() && n.back.is_empty());
        for (reason, count) in [
            ("no_free_port", 2),
            ("zero_port", 1),
            ("unsupported_protocol", 2),
            ("fragment", 1),
            ("not_ipv4", 1),
            ("too_short", 2),
            ("bad_ip_header", 0),
            ("no_mapping", 2),
        ] {
            assert_eq!(n.h.drops("n", reason), count, "{reason}");
        }
    }

    /// A UDP frame with checksums filled by smoltcp (independent of `crate::checksum`).
    fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        use smoltcp::wire::{IpAddress, Ipv4Packet, UdpPacket};
        let mut f = hex("02000000 00020200 00000001 0800 4500 0024 0001 4000 4011 0000");
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&hex("0010 0000 6869 6869 6869 6869"));
        let (s, d) = (
            IpAddress::from(std::net::Ipv4Addr::from(src)),
            IpAddress::from(std::net::Ipv4Addr::from(dst)),
        );
        UdpPacket::new_checked(&mut f[34..])
            .unwrap()
            .fill_checksum(&s, &d);
        Ipv4Packet::new_checked(&mut f[14..])
            .unwrap()
            .fill_checksum();
        f
    }

    fn src_of(f: &[u8]) -> ([u8; 4], u16) {
        (f[26..30].try_into().unwrap(), be16(f, 34))
    }

    #[test]
    fn idle_mappings_expire_and_their_ports_are_reclaimed() {
        let mut n = nat(&arg(&[("198.51.100.7", &[(6000, 6002)])]));
        let peer = [192, 0, 2, 1];
        let (a, b, c) = ([10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]);
        n.h.inject(
            "n",
            0,
            &[
                udp(a, peer, 1111, 53),
                udp(b, peer, 2222, 53),
                udp(c, peer, 3333, 53),
            ],
        );
        let got = n.out.take_data();
        assert_eq!(got.len(), 2, "pool of two ports");
        assert_eq!(n.h.drops("n", "no_free_port"), 1);
        let (pa, pb) = (src_of(&got[0]).1, src_of(&got[1]).1);
        assert_ne!(pa, pb);
        assert!((6000..6002).contains(&pa) && (6000..6002).contains(&pb));

        // a stays active, b goes idle.
        advance_clock_ns(200_000_000_000);
        n.h.inject("n", 0, &[udp(a, peer, 1111, 53)]);
        assert_eq!(src_of(&n.out.take_data()[0]).1, pa);
        advance_clock_ns(200_000_000_000);

        // b's mapping is past the timeout: it no longer admits inbound packets...
        let ext = [198, 51, 100, 7];
        n.h.inject("n", 1, &[udp(peer, ext, 53, pb)]);
        assert!(n.back.is_empty());
        assert_eq!(n.h.drops("n", "no_mapping"), 1);
        // ...and c gets its port, while a keeps its own.
        n.h.inject("n", 0, &[udp(c, peer, 3333, 53)]);
        let got = n.out.take_data();
        assert_eq!(src_of(&got[0]), (ext, pb));
        n.h.inject("n", 1, &[udp(peer, ext, 53, pb), udp(peer, ext, 53, pa)]);
        let back = n.back.take_data();
        assert_eq!(back, vec![udp(peer, c, 53, 3333), udp(peer, a, 53, 1111)]);
    }

    #[test]
    fn many_flows_stay_consistent_both_ways() {
        let mut n = nat(&arg(&[("198.51.100.1", &[]), ("198.51.100.2", &[])]));
        let peer = [192, 0, 2, 9];
        let mut flows = Vec::new();
        for i in 0..200u32 {
            let host = [10, 1, (i / 50) as u8, (i % 50) as u8 + 1];
            flows.push((host, 1024 + (i as u16 * 7) % 3000));
        }
        let pkts: Vec<_> = flows.iter().map(|&(h, p)| udp(h, peer, p, 443)).collect();
        n.h.inject("n", 0, &pkts);
        let out = n.out.take_data();
        assert_eq!(out.len(), flows.len());
        let mut seen = std::collections::HashSet::new();
        let mut host_ext = std::collections::HashMap::new();
        for (f, &(host, _)) in out.iter().zip(&flows) {
            assert!(checksums_ok(f, 14));
            let (ext, port) = src_of(f);
            assert!(ext == [198, 51, 100, 1] || ext == [198, 51, 100, 2]);
            assert!(port >= 1024);
            assert!(seen.insert((ext, port)), "external endpoint reused");
            assert_eq!(
                *host_ext.entry(host).or_insert(ext),
                ext,
                "one external address per host"
            );
        }
        // The same flows again map to the same endpoints.
        n.h.inject("n", 0, &pkts);
        assert_eq!(n.out.take_data(), out);
        // Replies come back to the right internal endpoints with valid checksums.
        let replies: Vec<_> = out
            .iter()
            .map(|f| {
                let (ext, port) = src_of(f);
                udp(peer, ext, 443, port)
            })
            .collect();
        n.h.inject("n", 1, &replies);
        let back = n.back.take_data();
        let want: Vec<_> = flows.iter().map(|&(h, p)| udp(peer, h, 443, p)).collect();
        assert_eq!(back, want);
    }

    #[test]
    fn arguments_and_commands() {
        let mut h = Harness::new();
        let e = h.add(&CLASS, "a", &Value::map()).unwrap_err();
        assert!(e.msg.contains("NATArg.ext_addrs"), "{}", e.msg);
        let e = h.add(&CLASS, "b", &arg(&[("1.2.3.256", &[])])).unwrap_err();
        assert!(e.msg.contains("NATArg.ext_addrs[0].ext_addr"), "{}", e.msg);
        let e = h
            .add(&CLASS, "c", &arg(&[("1.2.3.4", &[(10, 10)])]))
            .unwrap_err();
        assert!(
            e.msg.contains("NATArg.ext_addrs[0].port_ranges[0]"),
            "{}",
            e.msg
        );
        let e = h
            .add(&CLASS, "d", &arg(&[("1.2.3.4", &[(1, 70000)])]))
            .unwrap_err();
        assert!(e.msg.contains("port_ranges[0].end"), "{}", e.msg);
        h.add(
            &CLASS,
            "n",
            &arg(&[("5.6.7.8", &[(100, 200)]), ("1.2.3.4", &[])]),
        )
        .unwrap();
        let got = h.command("n", "get_initial_arg", &Value::Null).unwrap();
        let want = Value::map().with(
            "ext_addrs",
            Value::List(vec![
                Value::map().with("ext_addr", "1.2.3.4"),
                Value::map().with("ext_addr", "5.6.7.8").with(
                    "port_ranges",
                    Value::List(vec![Value::map()
                        .with("begin", 100u32)
                        .with("end", 200u32)
                        .with("suspended", false)]),
                ),
            ]),
        );
        assert_eq!(got, want);
        assert!(h.command("n", "set_runtime_config", &Value::Null).is_ok());
    }

    #[test]
    fn suspended_ranges_are_not_allocated() {
        let a = Value::map().with(
            "ext_addrs",
            Value::List(vec![Value::map().with("ext_addr", "203.0.113.1").with(
                "port_ranges",
                Value::List(vec![
                    Value::map()
                        .with("begin", 4000)
                        .with("end", 4001)
                        .with("suspended", true),
                    Value::map().with("begin", 5000).with("end", 5001),
                ]),
            )]),
        );
        let mut n = nat(&a);
        n.h.inject("n", 0, &[hex(UDP_OUT)]);
        assert_eq!(n.out.take_data(), vec![hex(UDP_OUT_X)]);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    fn be16(d: &[u8], off: usize) -> u16 {
        u16::from_be_bytes([d[off], d[off + 1]])
    }
    use crate::headers::test_util::checksums_ok;
    use bessemer_core::testing::Harness;
    use proptest::prelude::*;
    use smoltcp::wire::{Icmpv4Packet, IpAddress, Ipv4Packet, TcpPacket, UdpPacket};

    /// An Ethernet/IPv4 frame with TCP, UDP or ICMP echo, checksums filled by smoltcp.
    fn frame(proto: u8, src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let l4_hdr = match proto {
            PROTO_TCP => 20,
            _ => 8,
        };
        let total = 20 + l4_hdr + payload.len();
        let mut f = vec![0u8; 14 + total];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        let l4 = 34;
        f[l4 + l4_hdr..].copy_from_slice(payload);
        let (s, d) = (
            IpAddress::from(std::net::Ipv4Addr::from(src)),
            IpAddress::from(std::net::Ipv4Addr::from(dst)),
        );
        match proto {
            PROTO_TCP => {
                f[l4..l4 + 2].copy_from_slice(&sp.to_be_bytes());
                f[l4 + 2..l4 + 4].copy_from_slice(&dp.to_be_bytes());
                f[l4 + 12] = 0x50;
                TcpPacket::new_unchecked(&mut f[l4..]).fill_checksum(&s, &d);
            }
            PROTO_UDP => {
                f[l4..l4 + 2].copy_from_slice(&sp.to_be_bytes());
                f[l4 + 2..l4 + 4].copy_from_slice(&dp.to_be_bytes());
                let ulen = (8 + payload.len()) as u16;
                f[l4 + 4..l4 + 6].copy_from_slice(&ulen.to_be_bytes());
                UdpPacket::new_unchecked(&mut f[l4..]).fill_checksum(&s, &d);
            }
            _ => {
                f[l4] = if dp == 0 { 0 } else { 8 };
                f[l4 + 4..l4 + 6].copy_from_slice(&sp.to_be_bytes());
                Icmpv4Packet::new_unchecked(&mut f[l4..]).fill_checksum();
            }
        }
        Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any TCP/UDP/ICMP echo packet translated out and its reply translated back in keep
        /// valid checksums (checked by smoltcp), and the reply reaches the original endpoint
        /// byte for byte.
        #[test]
        fn translation_keeps_checksums_and_round_trips(
            proto in prop_oneof![Just(PROTO_TCP), Just(PROTO_UDP), Just(PROTO_ICMP)],
            src in any::<[u8; 4]>(),
            peer in any::<[u8; 4]>(),
            ext in any::<[u8; 4]>(),
            sport in 1u16..,
            dport in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut h = Harness::new();
            let a = Value::map().with(
                "ext_addrs",
                Value::List(vec![Value::map().with("ext_addr", std::net::Ipv4Addr::from(ext).to_string())]),
            );
            h.add(&CLASS, "n", &a).unwrap();
            let back = h.capture("n", 0);
            let out = h.capture("n", 1);
            // For ICMP, `dport` != 0 picks an echo request and the reply is an echo reply.
            let dp = if proto == PROTO_ICMP { 1 } else { dport };
            h.inject("n", 0, &[frame(proto, src, peer, sport, dp, &payload)]);
            let o = out.take_data();
            prop_assert_eq!(o.len(), 1);
            prop_assert!(checksums_ok(&o[0], 14));
            prop_assert_eq!(&o[0][26..30], &ext[..]);
            let port_off = if proto == PROTO_ICMP { 38 } else { 34 };
            let ext_port = be16(&o[0], port_off);
            if proto != PROTO_ICMP {
                prop_assert_eq!(ext_port >= 1024, sport >= 1024);
            }
            let reply = if proto == PROTO_ICMP {
                frame(proto, peer, ext, ext_port, 0, &payload)
            } else {
                frame(proto, peer, ext, dport, ext_port, &payload)
            };
            h.inject("n", 1, &[reply]);
            let b = back.take_data();
            let want = if proto == PROTO_ICMP {
                frame(proto, peer, src, sport, 0, &payload)
            } else {
                frame(proto, peer, src, dport, sport, &payload)
            };
            prop_assert_eq!(b, vec![want]);
        }
    }
}

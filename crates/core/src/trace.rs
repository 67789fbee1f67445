//! Packet trace (VPP's `trace add` / `show trace`, OVS's `ofproto/trace`): the path of a few
//! packets through the graph, module by module, with their headers before and after each.
//!
//! A [`Tracer`] is armed on the pipeline ([`crate::Engine::trace_add`]) with capture points
//! (module names) and a packet count. While one is set the workers run their task groups
//! through the traced variant of the runner (`exec.rs`, `Context::drain` with `TRACE`); with
//! none set they run exactly the code they ran before tracing existed: the one flag test per
//! task group that selects runtime sampling now also selects tracing (`Pipeline::slow`).
//!
//! A traced packet is known by its descriptor address (a clone shares it, so a clone's copy is
//! followed too; a module that copies a packet into a new buffer ends its trace). Before each
//! module call the batch is scanned for traced packets (and, at a capture point, untraced ones
//! are taken while the count lasts); after the call each is looked for in the outputs: the
//! gates it left by, its headers there and the metadata the module wrote. A traced packet in
//! no output ended at the module: dropped (the reasons whose counters rose during the call),
//! sent to a port, queued, or consumed.
//!
//! Memory is bounded: at most [`MAX_TRACE_PACKETS`] packets are kept until `clear trace`, each
//! with at most [`MAX_TRACE_HOPS`] module records, each of at most [`MAX_LAYERS`] header lines.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Most packets one trace keeps (a `trace add` asking for more is refused).
pub const MAX_TRACE_PACKETS: u32 = 500;
/// Most module records kept per packet (a packet circling a loop is cut there).
pub const MAX_TRACE_HOPS: usize = 32;
/// Most header layers decoded per summary.
pub const MAX_LAYERS: usize = 8;

/// A packet's length and its decoded headers, one line per layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Bytes.
    pub len: usize,
    /// One line per header, outermost first (e.g. "IPv4 10.0.0.1 > 10.0.0.2 ttl 64 ...").
    pub headers: Vec<String>,
}

/// How a packet's path ended at a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Dropped; the reasons whose counters rose during the call (one, unless several
    /// packets of the batch were dropped for different reasons).
    Drop(Vec<String>),
    /// Handed to a port's transmit queue by an output module (the port, from its description).
    Output(String),
    /// Held by a queueing module (Queue, DRR, Buffer): it continues when dequeued.
    Queued,
    /// Freed or kept by the module without a drop (a Sink, a module holding it).
    Consumed,
    /// Dry run: the module would have sent it to a port, or held it; it was not run.
    DryRunStop(String),
}

impl End {
    /// (kind, detail) as the RPC reports them.
    pub fn parts(&self) -> (&'static str, String) {
        match self {
            End::Drop(r) => ("drop", r.join(", ")),
            End::Output(p) => ("output", p.clone()),
            End::Queued => ("queue", String::new()),
            End::Consumed => ("consumed", String::new()),
            End::DryRunStop(d) => ("dry_run_stop", d.clone()),
        }
    }

    /// The text `show trace` prints.
    pub fn text(&self) -> String {
        match self {
            End::Drop(r) => format!("dropped: {}", r.join(" or ")),
            End::Output(p) => format!("sent to port {p}"),
            End::Queued => "queued (continues when dequeued)".into(),
            End::Consumed => "consumed (freed or kept, not dropped)".into(),
            End::DryRunStop(d) => format!("dry run: {d}; not run"),
        }
    }
}

/// What one module did to one traced packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    /// Module name.
    pub module: String,
    /// Its class.
    pub mclass: &'static str,
    /// Input gate, or None for a packet its task produced.
    pub igate: Option<u16>,
    /// Output gates it left by (more than one: clones sharing the buffer); empty if it ended.
    pub ogates: Vec<u16>,
    /// Nanoseconds since the trace was armed.
    pub ns: u64,
    /// Headers as the module got it (None for a packet its task produced).
    pub before: Option<Summary>,
    /// Headers as it left (None if it ended here).
    pub after: Option<Summary>,
    /// Metadata attributes the module writes, with their values as the packet left:
    /// (name, hex value).
    pub meta: Vec<(String, String)>,
    /// Where it ended, if it did here.
    pub end: Option<End>,
}

/// One traced packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketTrace {
    /// 1, 2, ... in capture order.
    pub id: u32,
    /// Worker that captured it (`usize::MAX`: the control thread, a dry run).
    pub wid: usize,
    /// Module records, in order.
    pub hops: Vec<Hop>,
    /// More module records than [`MAX_TRACE_HOPS`] were cut.
    pub truncated: bool,
}

pub(crate) struct TraceState {
    /// Capture points: module names.
    pub(crate) points: Vec<String>,
    /// Packets still to capture.
    pub(crate) remaining: u32,
    /// Traced packets in flight: descriptor address -> index in `packets`.
    pub(crate) live: HashMap<usize, usize>,
    pub(crate) packets: Vec<PacketTrace>,
}

/// A trace: its capture points, what is left to capture and the records (see the module doc).
pub struct Tracer {
    pub(crate) state: Mutex<TraceState>,
    /// Capturing or following: packets left to capture or traced packets in flight. When
    /// false the runner skips the traced path (a finished trace costs a load per group).
    pub(crate) active: AtomicBool,
    pub(crate) dry_run: bool,
    /// Mirrors of `live.len()` and `remaining`, and a number that changes whenever the
    /// capture points do (unique across tracers), so that a traced module call that can
    /// match nothing returns without taking the lock (workers cache the points by it).
    pub(crate) live_n: AtomicUsize,
    pub(crate) left: AtomicU32,
    pub(crate) points_gen: AtomicU64,
    start: Instant,
}

/// Source of `Tracer::points_gen` values.
static POINTS_GEN: AtomicU64 = AtomicU64::new(1);

impl Tracer {
    /// A trace capturing the next `count` packets entering any of `points`.
    pub fn new(points: Vec<String>, count: u32) -> Tracer {
        Tracer::with(points, count, false)
    }

    pub(crate) fn with(points: Vec<String>, count: u32, dry_run: bool) -> Tracer {
        Tracer {
            state: Mutex::new(TraceState {
                points,
                remaining: count.min(MAX_TRACE_PACKETS),
                live: HashMap::new(),
                packets: Vec::new(),
            }),
            active: AtomicBool::new(count > 0),
            dry_run,
            live_n: AtomicUsize::new(0),
            left: AtomicU32::new(count.min(MAX_TRACE_PACKETS)),
            points_gen: AtomicU64::new(POINTS_GEN.fetch_add(1, Ordering::Relaxed)),
            start: Instant::now(),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, TraceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `points` and `count` more packets to capture (up to the cap of packets kept).
    pub(crate) fn add(&self, points: Vec<String>, count: u32) {
        let mut s = self.lock();
        for p in points {
            if !s.points.contains(&p) {
                s.points.push(p);
            }
        }
        let room = MAX_TRACE_PACKETS.saturating_sub(s.packets.len() as u32);
        s.remaining = (s.remaining + count).min(room);
        self.points_gen.store(
            POINTS_GEN.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        self.sync(&s);
    }

    /// Updates the lock-free mirrors of `s` (call before releasing the lock).
    pub(crate) fn sync(&self, s: &TraceState) {
        self.live_n.store(s.live.len(), Ordering::Relaxed);
        self.left.store(s.remaining, Ordering::Relaxed);
        self.active
            .store(s.remaining > 0 || !s.live.is_empty(), Ordering::Relaxed);
    }

    #[inline(always)]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub(crate) fn ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The packets traced so far.
    pub fn packets(&self) -> Vec<PacketTrace> {
        self.lock().packets.clone()
    }

    /// Capture points and packets still to capture.
    pub fn pending(&self) -> (Vec<String>, u32) {
        let s = self.lock();
        (s.points.clone(), s.remaining)
    }
}

impl TraceState {
    /// Starts a packet's record; returns its index (None: the cap is reached).
    pub(crate) fn capture(&mut self, wid: usize, addr: usize) -> Option<usize> {
        if self.remaining == 0 || self.packets.len() >= MAX_TRACE_PACKETS as usize {
            return None;
        }
        self.remaining -= 1;
        let i = self.packets.len();
        self.packets.push(PacketTrace {
            id: i as u32 + 1,
            wid,
            hops: Vec::new(),
            truncated: false,
        });
        self.live.insert(addr, i);
        Some(i)
    }

    /// Appends a hop to packet `i` (or marks it truncated); returns whether it was kept.
    pub(crate) fn push_hop(&mut self, i: usize, hop: Hop) -> bool {
        let p = &mut self.packets[i];
        if p.hops.len() >= MAX_TRACE_HOPS {
            p.truncated = true;
            return false;
        }
        p.hops.push(hop);
        true
    }
}

/// Formats traced packets as `show trace` prints them (VPP's layout: one block per packet,
/// one entry per module with the time since the trace was armed).
pub fn render(packets: &[PacketTrace]) -> String {
    let mut s = String::new();
    for p in packets {
        s += &format!(
            "Packet {}{}\n\n",
            p.id,
            if p.wid == usize::MAX {
                " (dry run)".to_string()
            } else {
                format!(" (worker {})", p.wid)
            }
        );
        let mut prev: Option<&Hop> = None;
        for h in &p.hops {
            let us = h.ns / 1_000;
            let (sec, us) = (us / 1_000_000, us % 1_000_000);
            let t = format!(
                "{:02}:{:02}:{:02}:{us:06}",
                sec / 3600,
                sec / 60 % 60,
                sec % 60
            );
            let gin = h
                .igate
                .map_or("task".to_string(), |g| format!("in gate {g}"));
            let gout = if h.ogates.is_empty() {
                String::new()
            } else {
                format!(
                    " -> out gate {}",
                    h.ogates
                        .iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            s += &format!("{t}: {} ({}) {gin}{gout}\n", h.module, h.mclass);
            let headers = |s: &mut String, what: &str, x: &Summary| {
                *s += &format!("  {what}: len {}\n", x.len);
                for l in &x.headers {
                    *s += &format!("    {l}\n");
                }
            };
            if let Some(b) = &h.before {
                match prev {
                    // As the previous module left it: not repeated.
                    Some(q) if q.after.as_ref() == Some(b) => {
                        s += &format!("  before: len {}, as {} left it\n", b.len, q.module)
                    }
                    _ => headers(&mut s, "before", b),
                }
            }
            if let Some(a) = &h.after {
                if h.before.as_ref() == Some(a) {
                    s += &format!("  after: len {}, unchanged\n", a.len);
                } else {
                    headers(&mut s, "after", a);
                }
            }
            for (k, v) in &h.meta {
                s += &format!("  metadata {k} = {v}\n");
            }
            if let Some(e) = &h.end {
                s += &format!("  {}\n", e.text());
            }
            prev = Some(h);
        }
        if p.truncated {
            s += &format!("  (more than {MAX_TRACE_HOPS} modules: cut)\n");
        }
        if p.hops.last().is_some_and(|h| h.end.is_none()) {
            s += "  (in flight)\n";
        }
        s += "\n";
    }
    s
}

fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

enum Next {
    Eth,
    Ether(u16),
    Ip(u8),
    L4(u8),
    Done,
}

/// Decodes a packet's headers: Ethernet, VLAN (802.1Q/802.1ad), MPLS, IPv4, IPv6, UDP, TCP,
/// ICMP, GTP-U (UDP 2152, with its extension headers and the inner IP packet), VXLAN (UDP
/// 4789, with the inner Ethernet frame) and ESP; one line per layer, at most [`MAX_LAYERS`].
pub fn summarize(data: &[u8]) -> Summary {
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut next = Next::Eth;
    while out.len() < MAX_LAYERS {
        let b = &data[at.min(data.len())..];
        next = match next {
            Next::Eth => {
                if b.len() < 14 {
                    out.push(format!("truncated Ethernet header ({} bytes)", b.len()));
                    break;
                }
                let t = be16(b, 12).unwrap_or(0);
                out.push(format!(
                    "ETH {} > {} type 0x{t:04x}",
                    mac(&b[6..12]),
                    mac(&b[..6])
                ));
                at += 14;
                Next::Ether(t)
            }
            Next::Ether(t) => match t {
                0x8100 | 0x88a8 => {
                    let (Some(tci), Some(inner)) = (be16(b, 0), be16(b, 2)) else {
                        out.push("truncated VLAN tag".into());
                        break;
                    };
                    out.push(format!(
                        "VLAN {} vid {} pcp {} type 0x{inner:04x}",
                        if t == 0x8100 { "802.1Q" } else { "802.1ad" },
                        tci & 0xfff,
                        tci >> 13
                    ));
                    at += 4;
                    Next::Ether(inner)
                }
                0x8847 | 0x8848 => {
                    let mut labels = Vec::new();
                    let mut bottom = false;
                    while !bottom && labels.len() < 8 {
                        let Some(w) = be32(data, at) else { break };
                        labels.push(format!("{} ttl {}", w >> 12, w & 0xff));
                        bottom = w & 0x100 != 0;
                        at += 4;
                    }
                    out.push(format!("MPLS {}", labels.join(", ")));
                    if !bottom {
                        break;
                    }
                    match data.get(at).map(|v| v >> 4) {
                        Some(4) => Next::Ether(0x0800),
                        Some(6) => Next::Ether(0x86dd),
                        _ => Next::Done,
                    }
                }
                0x0800 => {
                    if b.len() < 20 || b[0] >> 4 != 4 {
                        out.push("truncated or bad IPv4 header".into());
                        break;
                    }
                    let ihl = (b[0] & 0xf) as usize * 4;
                    let frag = be16(b, 6).unwrap_or(0);
                    let mut l = format!(
                        "IPv4 {} > {} proto {} ttl {} len {} id {}",
                        std::net::Ipv4Addr::new(b[12], b[13], b[14], b[15]),
                        std::net::Ipv4Addr::new(b[16], b[17], b[18], b[19]),
                        b[9],
                        b[8],
                        be16(b, 2).unwrap_or(0),
                        be16(b, 4).unwrap_or(0),
                    );
                    if b[1] != 0 {
                        l += &format!(" tos 0x{:02x}", b[1]);
                    }
                    if frag & 0x3fff != 0 {
                        l += &format!(" frag off {} mf {}", (frag & 0x1fff) * 8, frag >> 13 & 1);
                    }
                    out.push(l);
                    at += ihl.max(20);
                    if frag & 0x1fff != 0 {
                        Next::Done
                    } else {
                        Next::Ip(b[9])
                    }
                }
                0x86dd => {
                    if b.len() < 40 || b[0] >> 4 != 6 {
                        out.push("truncated or bad IPv6 header".into());
                        break;
                    }
                    let a = |o: usize| {
                        let x: [u8; 16] = b[o..o + 16].try_into().unwrap();
                        std::net::Ipv6Addr::from(x)
                    };
                    out.push(format!(
                        "IPv6 {} > {} next {} hlim {} plen {}",
                        a(8),
                        a(24),
                        b[6],
                        b[7],
                        be16(b, 4).unwrap_or(0)
                    ));
                    at += 40;
                    Next::Ip(b[6])
                }
                0x0806 => {
                    out.push(format!("ARP op {}", be16(b, 6).unwrap_or(0)));
                    Next::Done
                }
                _ => Next::Done,
            },
            Next::Ip(p) => match p {
                17 | 6 | 1 | 58 => Next::L4(p),
                50 => {
                    let (Some(spi), Some(seq)) = (be32(b, 0), be32(b, 4)) else {
                        out.push("truncated ESP header".into());
                        break;
                    };
                    out.push(format!("ESP spi 0x{spi:08x} seq {seq}"));
                    Next::Done
                }
                _ => Next::Done,
            },
            Next::L4(p) => match p {
                17 => {
                    let (Some(sp), Some(dp), Some(len)) = (be16(b, 0), be16(b, 2), be16(b, 4))
                    else {
                        out.push("truncated UDP header".into());
                        break;
                    };
                    out.push(format!("UDP {sp} > {dp} len {len}"));
                    at += 8;
                    let b = &data[at.min(data.len())..];
                    if dp == 2152 || sp == 2152 {
                        if b.len() < 8 {
                            out.push("truncated GTP-U header".into());
                            break;
                        }
                        let flags = b[0];
                        let mut l = format!(
                            "GTP-U type {} teid 0x{:08x} len {}",
                            b[1],
                            be32(b, 4).unwrap_or(0),
                            be16(b, 2).unwrap_or(0)
                        );
                        at += 8;
                        if flags & 0x07 != 0 {
                            // Sequence number, N-PDU number, next extension header type.
                            let mut ext = b.get(11).copied().unwrap_or(0);
                            at += 4;
                            let mut n = 0;
                            while ext != 0 && n < 4 {
                                let len = data.get(at).copied().unwrap_or(0) as usize * 4;
                                if len == 0 || at + len > data.len() {
                                    break;
                                }
                                if ext == 0x85 {
                                    l += &format!(" pdu-session qfi {}", data[at + 2] & 0x3f);
                                } else {
                                    l += &format!(" ext 0x{ext:02x}");
                                }
                                ext = data[at + len - 1];
                                at += len;
                                n += 1;
                            }
                        }
                        out.push(l);
                        if b[1] != 255 {
                            break;
                        }
                        match data.get(at).map(|v| v >> 4) {
                            Some(4) => Next::Ether(0x0800),
                            Some(6) => Next::Ether(0x86dd),
                            _ => Next::Done,
                        }
                    } else if dp == 4789 {
                        if b.len() < 8 {
                            out.push("truncated VXLAN header".into());
                            break;
                        }
                        out.push(format!("VXLAN vni {}", be32(b, 4).unwrap_or(0) >> 8));
                        at += 8;
                        Next::Eth
                    } else {
                        Next::Done
                    }
                }
                6 => {
                    if b.len() < 20 {
                        out.push("truncated TCP header".into());
                        break;
                    }
                    let f = b[13];
                    let names: String = [
                        (0x02, 'S'),
                        (0x10, '.'),
                        (0x01, 'F'),
                        (0x04, 'R'),
                        (0x08, 'P'),
                        (0x20, 'U'),
                    ]
                    .iter()
                    .filter(|(m, _)| f & m != 0)
                    .map(|&(_, c)| c)
                    .collect();
                    out.push(format!(
                        "TCP {} > {} flags [{names}] seq {} ack {}",
                        be16(b, 0).unwrap_or(0),
                        be16(b, 2).unwrap_or(0),
                        be32(b, 4).unwrap_or(0),
                        be32(b, 8).unwrap_or(0)
                    ));
                    Next::Done
                }
                _ => {
                    if b.len() < 4 {
                        out.push("truncated ICMP header".into());
                        break;
                    }
                    out.push(format!(
                        "{} type {} code {}",
                        if p == 1 { "ICMP" } else { "ICMPv6" },
                        b[0],
                        b[1]
                    ));
                    Next::Done
                }
            },
            Next::Done => break,
        };
    }
    Summary {
        len: data.len(),
        headers: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_gtpu_in_ipv4_with_qfi_and_inner_tcp() {
        let mut p = vec![0u8; 12];
        p.extend([0x08, 0x00]);
        // Outer IPv4, UDP 2152, GTP-U with a PDU session container (QFI 9).
        let mut ip = vec![
            0x45, 0, 0, 100, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend([0x08, 0x68, 0x08, 0x68, 0, 80, 0, 0]);
        ip.extend([0x34, 255, 0, 60, 0, 0, 0, 7, 0, 0, 0, 0x85, 1, 0x10, 9, 0]);
        ip.extend([
            0x45, 0, 0, 40, 0, 0, 0, 0, 63, 6, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
        ]);
        ip.extend([
            0, 80, 1, 187, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0, 0, 0, 0, 0, 0,
        ]);
        p.extend(ip);
        let s = summarize(&p);
        assert_eq!(s.headers.len(), 6, "{s:?}");
        assert!(s.headers[1].starts_with("IPv4 10.0.0.1 > 10.0.0.2 proto 17 ttl 64"));
        assert_eq!(s.headers[2], "UDP 2152 > 2152 len 80");
        assert_eq!(
            s.headers[3],
            "GTP-U type 255 teid 0x00000007 len 60 pdu-session qfi 9"
        );
        assert!(s.headers[4].starts_with("IPv4 1.1.1.1 > 2.2.2.2 proto 6 ttl 63"));
        assert_eq!(s.headers[5], "TCP 80 > 443 flags [S.] seq 1 ack 0");
    }

    #[test]
    fn decodes_vlan_mpls_vxlan_ipv6_esp_and_truncation() {
        let mut p = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0x20, 0x0a, 0x88, 0x47,
        ];
        p.extend([0, 0x01, 0x01, 0x40]); // label 16, bottom of stack, ttl 64
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 50, 255];
        v6.extend([0u8; 15]);
        v6.push(1);
        v6.extend([0u8; 15]);
        v6.push(2);
        v6.extend([0, 0, 0, 5, 0, 0, 0, 9]);
        p.extend(v6);
        let s = summarize(&p);
        assert_eq!(s.headers[1], "VLAN 802.1Q vid 10 pcp 1 type 0x8847");
        assert_eq!(s.headers[2], "MPLS 16 ttl 64");
        assert_eq!(s.headers[3], "IPv6 ::1 > ::2 next 50 hlim 255 plen 8");
        assert_eq!(s.headers[4], "ESP spi 0x00000005 seq 9");
        assert_eq!(
            summarize(&p[..10]).headers,
            ["truncated Ethernet header (10 bytes)"]
        );
        // VXLAN: UDP to 4789, then an inner Ethernet frame.
        let mut q = vec![0u8; 12];
        q.extend([
            0x08, 0x00, 0x45, 0, 0, 50, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ]);
        q.extend([0x30, 0x39, 0x12, 0xb5, 0, 30, 0, 0, 8, 0, 0, 0, 0, 0, 42, 0]);
        q.extend([0u8; 12]);
        q.extend([0x86, 0xdd]);
        let s = summarize(&q);
        assert_eq!(s.headers[3], "VXLAN vni 42");
        assert!(s.headers[4].starts_with("ETH "), "{s:?}");
        assert_eq!(s.headers[5], "truncated or bad IPv6 header");
    }
}

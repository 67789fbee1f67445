//! UrlFilter: ends HTTP connections whose request (Host header and path) is blacklisted,
//! reassembling the request across TCP segments.
//!
//! Gate 0 in/out carries traffic from the inside to the outside, gate 1 the reverse (passed
//! through unchanged). When a request on gate 0 matches, the packet is dropped, the flow is
//! blocked for 10 seconds, and, as BESS does, a TCP RST goes on towards the server (gate 0)
//! while an HTTP 403 and a RST go back to the client (gate 1).
use std::collections::HashMap;

use crate::checksum;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value, MAX_BURST,
};

use crate::checksum::PROTO_TCP;
use crate::headers::{
    ipv4_in_frame, put_ipv4_header, tcp, EthernetView, Ipv4Error, Ipv4View, TcpView,
    ETHERTYPE_IPV4, ETH_LEN, IPV4_MIN_LEN,
};
use crate::util::parse_list;

bessemer_core::drop_reasons! {
    /// Why UrlFilter drops packets.
    pub enum UrlFilterDrop {
        Blocked = "blocked",
        TooShort = "too_short",
        BadIpHeader = "bad_ip_header",
        Fragment = "fragment",
        BadTcpHeader = "bad_tcp_header",
    }
}

/// How long a matched flow stays blocked (BESS's TIME_OUT_NS).
pub const BLOCK_NS: u64 = 10_000_000_000;
/// A tracked flow idle this long may be evicted when the table is full.
pub const IDLE_NS: u64 = 60_000_000_000;
/// Most flows tracked at once; further connections pass untracked until some end.
pub const MAX_FLOWS: usize = 16384;
/// Request bytes kept per flow; the request line and headers must fit in them.
pub const MAX_REQUEST: usize = 4096;
/// Most out-of-order holes remembered per flow (later segments beyond them are ignored).
const MAX_SEGMENTS: usize = 8;

/// BESS's 403 response body (sic).
pub const HTTP_403_BODY: &[u8] = b"HTTP/1.1 403 Bad Forbidden\r\nConnection: Closed\r\n\r\n";

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// A flow as BESS keys it: IPv4 addresses and TCP ports, one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FlowKey {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
}

impl std::hash::Hash for FlowKey {
    /// Two words for [`SeededMix`](crate::hash::SeededMix).
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64((self.src as u64) << 32 | self.dst as u64);
        h.write_u64((self.sport as u64) << 16 | self.dport as u64);
    }
}

/// Reassembly state of one client → server byte stream, and its block deadline.
struct Flow {
    init_seq: u32,
    buf: Vec<u8>,
    /// Received byte ranges [start, end) relative to `init_seq`, sorted and disjoint.
    segs: Vec<(u32, u32)>,
    blocked_until: Option<u64>,
    last_seen: u64,
}

impl Flow {
    fn reset(&mut self, init_seq: u32, now: u64) {
        self.init_seq = init_seq;
        self.segs.clear();
        self.blocked_until = None;
        self.last_seen = now;
    }

    /// Bytes received in order from the start of the stream.
    fn contiguous(&self) -> &[u8] {
        match self.segs.first() {
            Some(&(0, end)) => &self.buf[..end as usize],
            _ => &[],
        }
    }

    /// Stores segment data at its stream offset (clipped to MAX_REQUEST); false when the
    /// sequence number is before the stream start (BESS passes such packets).
    fn insert(&mut self, seq: u32, data: &[u8]) -> bool {
        let off = seq.wrapping_sub(self.init_seq);
        if (off as i32) < 0 {
            return false;
        }
        let start = off as usize;
        if data.is_empty() || start >= MAX_REQUEST {
            return true;
        }
        let end = (start + data.len()).min(MAX_REQUEST);
        self.buf[start..end].copy_from_slice(&data[..end - start]);
        let (mut s, mut e) = (start as u32, end as u32);
        // Merge with every range that overlaps or touches [s, e).
        let mut i = 0;
        while i < self.segs.len() {
            let (a, b) = self.segs[i];
            if b < s || a > e {
                i += 1;
                continue;
            }
            s = s.min(a);
            e = e.max(b);
            self.segs.remove(i);
        }
        if self.segs.len() < MAX_SEGMENTS {
            let at = self.segs.partition_point(|&(a, _)| a < s);
            self.segs.insert(at, (s, e));
        }
        true
    }
}

/// Whether `host` (any case) has a blacklisted path that `path` starts with; no allocation.
fn blacklisted(list: &HashMap<Vec<u8>, Vec<Vec<u8>>>, host: &[u8], path: &[u8]) -> bool {
    let mut lower = [0u8; 256];
    let Some(l) = lower.get_mut(..host.len()) else {
        return false;
    };
    l.copy_from_slice(host);
    l.make_ascii_lowercase();
    list.get(&l[..])
        .is_some_and(|paths| paths.iter().any(|p| path.starts_with(p)))
}

/// The request line's target and the Host header value of a complete-enough request head.
fn parse_request(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut lines = buf.split_inclusive(|&b| b == b'\n');
    let first = lines.next().filter(|l| l.ends_with(b"\n"))?;
    let mut parts = trim(first).split(|&b| b == b' ').filter(|p| !p.is_empty());
    let (_method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if !version.starts_with(b"HTTP/") || parts.next().is_some() {
        return None;
    }
    for line in lines {
        if !line.ends_with(b"\n") {
            break; // an incomplete header line
        }
        let line = trim(line);
        if line.is_empty() {
            break; // end of the head
        }
        if let Some(colon) = line.iter().position(|&b| b == b':') {
            if line[..colon].eq_ignore_ascii_case(b"host") {
                return Some((target, trim(&line[colon + 1..])));
            }
        }
    }
    None
}

fn trim(s: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = s.iter().position(|b| !ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !ws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

/// The parts of a client packet the filter uses.
struct Seg<'a> {
    key: FlowKey,
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &'a [u8],
}

/// What to do with one packet arriving on gate 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Pass,
    Drop(UrlFilterDrop),
    /// Drop it and answer: the request matched the blacklist.
    Block,
}

/// Inlined: returned through memory from a call, the segment's fields (stored piece by
/// piece) were read back in wider loads that store forwarding cannot serve.
#[inline(always)]
fn parse_seg(d: &[u8]) -> std::result::Result<Option<Seg<'_>>, UrlFilterDrop> {
    let Ok(eth) = EthernetView::new_checked(d) else {
        return Err(UrlFilterDrop::TooShort);
    };
    let ip = match ipv4_in_frame(d) {
        Ok(ip) => ip,
        Err(Ipv4Error::NotIpv4) => return Ok(None),
        Err(Ipv4Error::TooShort) => return Err(UrlFilterDrop::TooShort),
        Err(Ipv4Error::BadHeader) => return Err(UrlFilterDrop::BadIpHeader),
    };
    if ip.protocol() != PROTO_TCP {
        return Ok(None);
    }
    if ip.is_fragment() {
        return Err(UrlFilterDrop::Fragment);
    }
    let (src, dst) = (ip.src(), ip.dst());
    let tcp = TcpView::new_checked(ip.into_payload()).map_err(|_| UrlFilterDrop::TooShort)?;
    if tcp.header_len() < tcp::HEADER_LEN {
        return Err(UrlFilterDrop::BadTcpHeader);
    }
    // Past this, only a header cut short (options past the segment) remains.
    let (sport, dport) = (tcp.src_port(), tcp.dst_port());
    let (seq, ack, flags) = (tcp.seq_number(), tcp.ack_number(), tcp.flags());
    let payload = tcp.into_payload().ok_or(UrlFilterDrop::TooShort)?;
    Ok(Some(Seg {
        key: FlowKey {
            src,
            dst,
            sport,
            dport,
        },
        eth_dst: eth.dst(),
        eth_src: eth.src(),
        seq,
        ack,
        flags,
        payload,
    }))
}

/// Blacklist and flow table.
pub struct UrlFilter {
    /// Lower-case host → blacklisted path prefixes.
    blacklist: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// The entries as given (host, path), sorted, for get_runtime_config.
    rules: std::collections::BTreeSet<(String, String)>,
    flows: HashMap<FlowKey, Flow, crate::hash::SeededMix>,
    spare: Vec<Vec<u8>>,
    block_cycles: u64,
    idle_cycles: u64,
    untracked: u64,
}

impl UrlFilter {
    fn new(block_cycles: u64, idle_cycles: u64) -> UrlFilter {
        UrlFilter {
            blacklist: HashMap::new(),
            rules: std::collections::BTreeSet::new(),
            flows: HashMap::with_capacity_and_hasher(MAX_FLOWS, Default::default()),
            spare: Vec::new(),
            block_cycles,
            idle_cycles,
            untracked: 0,
        }
    }

    fn add(&mut self, arg: &Value, msg: &str) -> Result<()> {
        let new = parse_list(arg, msg, "blacklist", |u, m| {
            let mut a = Args::new(u, m)?;
            let host = a.str("host")?.unwrap_or("").trim();
            let path = a.str("path")?.unwrap_or("");
            a.finish()?;
            if host.is_empty() || host.len() > 255 {
                return Err(Error::invalid(format!(
                    "{m}.host: '{host}' must be a host name of 1..255 characters"
                )));
            }
            Ok((host.to_string(), path.to_string()))
        })?;
        for (h, p) in new {
            if self.rules.insert((h.clone(), p.clone())) {
                self.blacklist
                    .entry(h.to_ascii_lowercase().into_bytes())
                    .or_default()
                    .push(p.into_bytes());
            }
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.blacklist.clear();
        self.rules.clear();
    }

    /// The UrlFilterConfig: every entry, sorted by host, then path (as BESS lists them).
    fn runtime_config(&self) -> Value {
        let list = self
            .rules
            .iter()
            .map(|(h, p)| {
                Value::map()
                    .with("host", h.as_str())
                    .with("path", p.as_str())
            })
            .collect();
        Value::map().with("blacklist", Value::List(list))
    }

    fn release(&mut self, key: &FlowKey) {
        if let Some(f) = self.flows.remove(key) {
            self.spare.push(f.buf);
        }
    }

    /// Makes room for one flow: drops idle flows and expired blocks when the table is full.
    fn make_room(&mut self, now: u64) -> bool {
        if self.flows.len() < MAX_FLOWS {
            return true;
        }
        let idle = self.idle_cycles;
        let mut freed = Vec::new();
        self.flows.retain(|_, f| {
            let stale = match f.blocked_until {
                Some(t) => now >= t,
                None => now.saturating_sub(f.last_seen) >= idle,
            };
            if stale {
                freed.push(std::mem::take(&mut f.buf));
            }
            !stale
        });
        self.spare.extend(freed);
        self.flows.len() < MAX_FLOWS
    }

    /// Decides for one client packet at time `now` (TSC cycles).
    fn classify(&mut self, seg: &Seg, now: u64) -> Decision {
        let key = seg.key;
        if let Some(f) = self.flows.get(&key) {
            match f.blocked_until {
                Some(t) if now < t => return Decision::Drop(UrlFilterDrop::Blocked),
                Some(_) => self.release(&key),
                None => {}
            }
        }
        if seg.flags & TCP_SYN != 0 {
            // A (re)starting connection: the stream begins after the SYN; SYN data is ignored.
            let init = seg.seq.wrapping_add(1);
            if let Some(f) = self.flows.get_mut(&key) {
                f.reset(init, now);
            } else if self.make_room(now) {
                let buf = self.spare.pop().unwrap_or_else(|| vec![0u8; MAX_REQUEST]);
                self.flows.insert(
                    key,
                    Flow {
                        init_seq: init,
                        buf,
                        segs: Vec::with_capacity(MAX_SEGMENTS),
                        blocked_until: None,
                        last_seen: now,
                    },
                );
            } else {
                self.untracked += 1;
            }
            return Decision::Pass;
        }
        // No SYN seen: BESS cannot reconstruct the stream and passes the packet.
        let Some(f) = self.flows.get_mut(&key) else {
            return Decision::Pass;
        };
        f.last_seen = now;
        if !f.insert(seg.seq, seg.payload) {
            return Decision::Pass;
        }
        let matched = parse_request(f.contiguous())
            .is_some_and(|(path, host)| blacklisted(&self.blacklist, host, path));
        if matched {
            f.blocked_until = Some(now.saturating_add(self.block_cycles));
            f.segs.clear();
            return Decision::Block;
        }
        if seg.flags & (TCP_FIN | TCP_RST) != 0 {
            self.release(&key);
        }
        Decision::Pass
    }
}

/// Header fields of a generated TCP packet.
struct Reply {
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    /// IPv4 identification: BESS uses 1 for the 403 and 2 for the RSTs.
    ip_id: u16,
}

/// Writes Ethernet + IPv4 (no options, TTL 64) + TCP (no options, window 0) + `body` into
/// `out`, with both checksums, as BESS's packet template does; None if `out` is not exactly
/// that long.
fn build_reply(r: &Reply, body: &[u8], out: &mut [u8]) -> Option<()> {
    let tcp_len = tcp::HEADER_LEN + body.len();
    if out.len() != ETH_LEN + IPV4_MIN_LEN + tcp_len {
        return None;
    }
    let mut eth = EthernetView::new_checked(&mut *out).ok()?;
    eth.set_dst(r.eth_dst);
    eth.set_src(r.eth_src);
    eth.set_ethertype(ETHERTYPE_IPV4);
    let (src, dst) = (r.src.to_be_bytes(), r.dst.to_be_bytes());
    let total = (IPV4_MIN_LEN + tcp_len) as u16;
    put_ipv4_header(eth.payload_mut(), total, 0, 64, PROTO_TCP, src, dst);
    let mut ip = Ipv4View::new_checked(eth.payload_mut()).ok()?;
    ip.set_ident(r.ip_id);
    ip.fill_checksum();
    let seg = ip.payload_mut();
    seg[..tcp::HEADER_LEN].fill(0);
    seg[tcp::HEADER_LEN..].copy_from_slice(body);
    let mut t = TcpView::new_checked(seg).ok()?;
    t.set_src_port(r.sport);
    t.set_dst_port(r.dport);
    t.set_seq_number(r.seq);
    t.set_ack_number(r.ack);
    t.set_header_len(tcp::HEADER_LEN);
    t.set_flags(r.flags);
    t.fill_checksum(checksum::pseudo_v4(src, dst, PROTO_TCP, 0));
    Some(())
}

impl UrlFilter {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        self.add(arg, "UrlFilterArg")?;
        Ok(Value::Null)
    }

    /// The `clear` command.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        self.clear();
        Ok(Value::Null)
    }

    /// The `get_initial_arg` command.
    fn cmd_get_initial_arg(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        // As BESS: empty, the blacklist being runtime configuration.
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Value::map())
    }

    /// The `get_runtime_config` command.
    fn cmd_get_runtime_config(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(self.runtime_config())
    }

    /// The `set_runtime_config` command.
    fn cmd_set_runtime_config(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        // Checked whole before anything changes.
        let mut fresh = UrlFilter::new(self.block_cycles, self.idle_cycles);
        fresh.add(arg, "UrlFilterConfig")?;
        self.blacklist = fresh.blacklist;
        self.rules = fresh.rules;
        Ok(Value::Null)
    }
}

impl Module for UrlFilter {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, igate: u16) {
        if igate == 1 {
            return ctx.forward(1, batch);
        }
        let now = ctx.refresh_now();
        // Decide for the whole batch first (each packet classified once: it moves its
        // flow's state); a batch that all passes, the usual case, is forwarded whole
        // rather than packet by packet.
        let mut decisions = [Decision::Pass; MAX_BURST];
        let mut all_pass = true;
        for (i, pkt) in batch.pkts().iter().enumerate() {
            let d = match parse_seg(pkt.data()) {
                Ok(Some(seg)) => self.classify(&seg, now),
                Ok(None) => Decision::Pass,
                Err(reason) => Decision::Drop(reason),
            };
            all_pass &= d == Decision::Pass;
            decisions[i] = d;
        }
        if all_pass {
            return ctx.forward(0, batch);
        }
        for (pkt, decision) in batch.drain().zip(decisions) {
            match decision {
                Decision::Pass => ctx.emit(0, pkt),
                Decision::Drop(r) => ctx.drop_packet(pkt, r),
                Decision::Block => {
                    // Parsed before, the same bytes: a segment.
                    let Ok(Some(seg)) = parse_seg(pkt.data()) else {
                        unreachable!("a blocked packet parsed as a TCP segment");
                    };
                    let k = seg.key;
                    let to_server = Reply {
                        eth_dst: seg.eth_dst,
                        eth_src: seg.eth_src,
                        src: k.src,
                        dst: k.dst,
                        sport: k.sport,
                        dport: k.dport,
                        seq: seg.seq,
                        ack: seg.ack,
                        flags: TCP_RST | TCP_ACK,
                        ip_id: 2,
                    };
                    let forbidden = Reply {
                        eth_dst: seg.eth_src,
                        eth_src: seg.eth_dst,
                        src: k.dst,
                        dst: k.src,
                        sport: k.dport,
                        dport: k.sport,
                        seq: seg.ack,
                        ack: seg.seq,
                        flags: TCP_ACK,
                        ip_id: 1,
                    };
                    let to_client = Reply {
                        seq: seg.ack.wrapping_add(HTTP_403_BODY.len() as u32),
                        flags: TCP_RST | TCP_ACK,
                        ip_id: 2,
                        ..forbidden
                    };
                    ctx.drop_packet(pkt, UrlFilterDrop::Blocked);
                    for (gate, r, body) in [
                        (0, &to_server, &[][..]),
                        (1, &forbidden, HTTP_403_BODY),
                        (1, &to_client, &[][..]),
                    ] {
                        // Without buffers the answer is skipped; the block still holds.
                        let len = ETH_LEN + IPV4_MIN_LEN + tcp::HEADER_LEN + body.len();
                        if let Some(mut p) = ctx.alloc(len) {
                            match build_reply(r, body, p.data_mut()) {
                                Some(()) => ctx.emit(gate, p),
                                None => ctx.free(p),
                            }
                        }
                    }
                }
            }
        }
    }

    fn desc(&self) -> String {
        format!(
            "{} hosts, {} flows tracked, {} untracked (table full)",
            self.blacklist.len(),
            self.flows.len(),
            self.untracked
        )
    }

    fn deinit(&mut self, _ctx: &mut Context) {
        self.flows.clear();
    }
}

/// The UrlFilter class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "UrlFilter",
    name_template: "url-filter",
    help: "Filter HTTP connection",
    arg_type: "UrlFilterArg",
    arg_doc: &[
        "blacklist: [{host: string, path: string}] — a request whose Host header equals host",
        "  (case-insensitive) and whose path starts with path is blocked (empty path: whole host)",
        "  in/out gate 0: client → server traffic, inspected; gate 1: server → client, passed.",
        "  A match drops the packet, blocks the flow for 10 s, sends a RST on gate 0 and an",
        "  HTTP 403 plus a RST on gate 1 (IPv4 id 1 for the 403, 2 for the RSTs, as BESS).",
        "  Streams are reassembled from the SYN on (first 4 KiB).",
    ],
    igates: 2,
    ogates: 2,
    commands: &[
        CommandSpec {
            name: "get_initial_arg",
            arg_type: "EmptyArg",
            help: "returns an empty UrlFilterArg (the blacklist is runtime configuration)",
            mt_safe: true,
            reply_type: "UrlFilterArg",
            mutates: false,
            handler: handler!(Exclusive UrlFilter, UrlFilter::cmd_get_initial_arg),
        },
        CommandSpec {
            name: "get_runtime_config",
            arg_type: "EmptyArg",
            help: "returns a UrlFilterConfig: every blacklist entry, sorted by host then path",
            mt_safe: true,
            reply_type: "UrlFilterConfig",
            mutates: false,
            handler: handler!(Exclusive UrlFilter, UrlFilter::cmd_get_runtime_config),
        },
        CommandSpec {
            name: "set_runtime_config",
            arg_type: "UrlFilterConfig",
            help: "replaces the blacklist",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive UrlFilter, UrlFilter::cmd_set_runtime_config),
        },
        CommandSpec {
            name: "add",
            arg_type: "UrlFilterArg",
            help: "adds blacklist entries",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive UrlFilter, UrlFilter::cmd_add),
        },
        CommandSpec {
            name: "clear",
            arg_type: "EmptyArg",
            help: "empties the blacklist",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive UrlFilter, UrlFilter::cmd_clear),
        },
    ],
    drop_reasons: UrlFilterDrop::NAMES,
    max_workers: 1,
    create: |_, arg| {
        let mut u = UrlFilter::new(
            bessemer_core::tsc::ns_to_cycles(BLOCK_NS),
            bessemer_core::tsc::ns_to_cycles(IDLE_NS),
        );
        u.add(arg, "UrlFilterArg")?;
        Ok(Instance::Exclusive(Box::new(u)))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_util::hex;
    use bessemer_core::testing::{CaptureHandle, Harness};

    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
    const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];
    const REQ: &[u8] = b"GET /secret/page HTTP/1.1\r\nHost: example.com\r\n\r\n";

    /// A client → server TCP segment 10.0.0.1:sport → 93.184.216.34:80.
    fn seg_from(sport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = SERVER_MAC.to_vec();
        f.extend_from_slice(&CLIENT_MAC);
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0x00]);
        f.extend_from_slice(&((40 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 93, 184, 216, 34]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&80u16.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&ack.to_be_bytes());
        f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn seg(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        seg_from(40000, seq, 5000, flags, payload)
    }

    fn blacklist(entries: &[(&str, &str)]) -> Value {
        Value::map().with(
            "blacklist",
            Value::List(
                entries
                    .iter()
                    .map(|(h, p)| Value::map().with("host", *h).with("path", *p))
                    .collect(),
            ),
        )
    }

    fn setup(entries: &[(&str, &str)]) -> (Harness, CaptureHandle, CaptureHandle) {
        let mut h = Harness::new();
        h.add(&CLASS, "uf", &blacklist(entries)).unwrap();
        let (g0, g1) = (h.capture("uf", 0), h.capture("uf", 1));
        (h, g0, g1)
    }

    const PSH_ACK: u8 = 0x18;

    #[test]
    fn a_blacklisted_request_is_dropped_and_answered_byte_for_byte() {
        let (mut h, g0, g1) = setup(&[("example.com", "/secret")]);
        let syn = seg(1000, TCP_SYN, &[]);
        let ack = seg(1001, TCP_ACK, &[]);
        let get = seg(1001, PSH_ACK, REQ);
        h.inject("uf", 0, &[syn.clone(), ack.clone(), get]);
        // RST to the server, after the packets that passed.
        let rst_server = hex(
            "02000000000b02000000000a0800450000280002000040063af30a0000015db8d822\
                              9c400050000003e90000138850140000bbf30000",
        );
        assert_eq!(g0.take_data(), vec![syn, ack, rst_server]);
        let mut forbidden = hex(
            "02000000000a02000000000b08004500005a0001000040063ac25db8d8220a000001\
                                 00509c4000001388000003e950100000bf200000",
        );
        forbidden.extend_from_slice(HTTP_403_BODY);
        let rst_client = hex(
            "02000000000a02000000000b0800450000280002000040063af35db8d8220a000001\
                              00509c40000013ba000003e950140000bbc10000",
        );
        assert_eq!(g1.take_data(), vec![forbidden, rst_client]);
        assert_eq!(h.drops("uf", "blocked"), 1);
        // The flow stays blocked (retransmission, FIN); another flow is unaffected.
        h.inject("uf", 0, &[seg(1001, PSH_ACK, REQ), seg(1050, 0x11, &[])]);
        assert_eq!(h.drops("uf", "blocked"), 3);
        let other = seg_from(40001, 7, 1, TCP_ACK, b"xyz");
        h.inject("uf", 0, std::slice::from_ref(&other));
        assert_eq!(g0.take_data(), vec![other]);
        assert!(g1.is_empty());
    }

    #[test]
    fn runtime_config_round_trips_to_a_fresh_module() {
        let (mut h, g0, g1) = setup(&[
            ("example.com", "/secret"),
            ("Another.org", "/"),
            ("example.com", "/admin"),
        ]);
        assert_eq!(
            h.command("uf", "get_initial_arg", &Value::map()).unwrap(),
            Value::map()
        );
        let cfg = h
            .command("uf", "get_runtime_config", &Value::map())
            .unwrap();
        // Sorted by host, then path; hosts as given.
        assert_eq!(
            cfg,
            blacklist(&[
                ("Another.org", "/"),
                ("example.com", "/admin"),
                ("example.com", "/secret"),
            ])
        );
        let run = |h: &mut Harness| {
            h.inject("uf", 0, &[seg(1000, TCP_SYN, &[]), seg(1001, PSH_ACK, REQ)]);
        };
        run(&mut h);
        let (a0, a1) = (g0.take_data(), g1.take_data());
        assert_eq!(a1.len(), 2, "blocked: 403 and RST to the client");
        let mut fresh = Harness::new();
        fresh.add(&CLASS, "uf", &Value::map()).unwrap();
        let (f0, f1) = (fresh.capture("uf", 0), fresh.capture("uf", 1));
        fresh.command("uf", "set_runtime_config", &cfg).unwrap();
        assert_eq!(
            fresh
                .command("uf", "get_runtime_config", &Value::map())
                .unwrap(),
            cfg
        );
        run(&mut fresh);
        assert_eq!(f0.take_data(), a0);
        assert_eq!(f1.take_data(), a1);
        // set_runtime_config replaces: an empty config passes everything.
        fresh
            .command("uf", "set_runtime_config", &Value::map())
            .unwrap();
        fresh.inject(
            "uf",
            0,
            &[
                seg_from(40002, 5000, 0, TCP_SYN, &[]),
                seg_from(40002, 5001, 0, PSH_ACK, REQ),
            ],
        );
        let bad = Value::map().with(
            "blacklist",
            Value::List(vec![Value::map().with("host", "")]),
        );
        assert!(fresh.command("uf", "set_runtime_config", &bad).is_err());
        assert_eq!(
            fresh
                .command("uf", "get_runtime_config", &Value::map())
                .unwrap(),
            blacklist(&[])
        );
        assert_eq!(
            f0.len(),
            2,
            "the request passes once the blacklist is empty"
        );
        assert!(f1.is_empty());
    }

    #[test]
    fn requests_are_reassembled_across_segments_in_any_order() {
        let (mut h, g0, g1) = setup(&[("Example.COM", "/secret")]);
        let (a, b) = REQ.split_at(30); // "...\r\nHo" | "st: example.com..."
        let first = seg(1001, PSH_ACK, a);
        h.inject("uf", 0, &[seg(1000, TCP_SYN, &[]), first.clone()]);
        assert_eq!(g0.take_data().len(), 2, "half a request passes");
        h.inject("uf", 0, &[seg(1001 + 30, PSH_ACK, b)]);
        assert_eq!(h.drops("uf", "blocked"), 1);
        assert_eq!(g0.take_data().len(), 1, "the RST");
        assert_eq!(g1.take_data().len(), 2);
        // Out of order: the tail first passes, the head completes the request.
        let tail = seg_from(40002, 2001 + 30, 9, PSH_ACK, b);
        let head = seg_from(40002, 2001, 9, PSH_ACK, a);
        h.inject("uf", 0, &[seg_from(40002, 2000, 0, TCP_SYN, &[]), tail]);
        assert_eq!(g0.take_data().len(), 2);
        h.inject("uf", 0, &[head]);
        assert_eq!(h.drops("uf", "blocked"), 2);
    }

    #[test]
    fn other_paths_hosts_and_untracked_flows_pass() {
        let (mut h, g0, g1) = setup(&[("example.com", "/secret"), ("ads.test", "")]);
        let ok_path = b"GET /public HTTP/1.1\r\nHost: example.com\r\n\r\n";
        let ok_host = b"GET /secret HTTP/1.1\r\nHost: example.org\r\n\r\n";
        let pkts = vec![
            seg(1000, TCP_SYN, &[]),
            seg(1001, PSH_ACK, ok_path),
            // FIN ends tracking: a later request without a new SYN is not inspected.
            seg(1001 + ok_path.len() as u32, 0x11, &[]),
            seg(1001, PSH_ACK, REQ),
            seg_from(40003, 10, 0, TCP_SYN, &[]),
            seg_from(40003, 11, 0, PSH_ACK, ok_host),
            // No SYN was seen for this flow (BESS passes it too).
            seg_from(40004, 11, 0, PSH_ACK, REQ),
            // Sequence before the stream start.
            seg_from(40003, 5, 0, PSH_ACK, REQ),
        ];
        h.inject("uf", 0, &pkts);
        assert_eq!(g0.take_data(), pkts);
        assert_eq!(h.drops("uf", "blocked"), 0);
        // An empty path blocks the whole host; the Host header name is case-insensitive.
        let ads = b"POST /x HTTP/1.0\r\nUser-Agent: t\r\nhOsT:  ADS.test \r\n\r\n";
        h.inject(
            "uf",
            0,
            &[
                seg_from(40005, 1, 0, TCP_SYN, &[]),
                seg_from(40005, 2, 0, PSH_ACK, ads),
            ],
        );
        assert_eq!(h.drops("uf", "blocked"), 1);
        assert_eq!(g1.take_data().len(), 2);
        // clear empties the blacklist.
        h.command("uf", "clear", &Value::map()).unwrap();
        g0.take_data();
        let again = [
            seg_from(40006, 1, 0, TCP_SYN, &[]),
            seg_from(40006, 2, 0, PSH_ACK, ads),
        ];
        h.inject("uf", 0, &again);
        assert_eq!(g0.take_data().len(), 2);
    }

    #[test]
    fn reverse_traffic_and_non_tcp_pass_malformed_frames_drop() {
        let (mut h, g0, g1) = setup(&[("example.com", "")]);
        let reply = seg(5000, PSH_ACK, b"HTTP/1.1 200 OK\r\n\r\n");
        h.inject("uf", 1, std::slice::from_ref(&reply));
        assert_eq!(g1.take_data(), vec![reply]);
        let mut udp = seg(1, 0, REQ);
        udp[23] = 17;
        let mut arp = seg(1, 0, &[])[..12].to_vec();
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let mut v6 = arp.clone();
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        h.inject("uf", 0, &[udp.clone(), arp.clone(), v6.clone()]);
        assert_eq!(g0.take_data(), vec![udp, arp, v6]);
        let good = seg(1001, PSH_ACK, REQ);
        let mut bad_ihl = good.clone();
        bad_ihl[14] = 0x43;
        let mut frag = good.clone();
        frag[20] = 0x20; // more fragments
        let mut later_frag = good.clone();
        later_frag[20..22].copy_from_slice(&[0, 8]);
        let mut tcp_cut = good[..14 + 20 + 12].to_vec();
        tcp_cut[16..18].copy_from_slice(&32u16.to_be_bytes());
        let mut bad_doff = good.clone();
        bad_doff[46] = 0x40; // TCP header length 16
        h.inject(
            "uf",
            0,
            &[
                vec![],
                good[..10].to_vec(),
                good[..30].to_vec(),
                bad_ihl,
                frag,
                later_frag,
                tcp_cut,
                bad_doff,
            ],
        );
        assert_eq!(h.drops("uf", "too_short"), 4);
        assert_eq!(h.drops("uf", "bad_ip_header"), 1);
        assert_eq!(h.drops("uf", "fragment"), 2);
        assert_eq!(h.drops("uf", "bad_tcp_header"), 1);
        assert!(g0.is_empty() && g1.is_empty());
    }

    #[test]
    fn blocks_expire_and_idle_flows_make_room() {
        let mut u = UrlFilter::new(100, 1000);
        u.add(&blacklist(&[("example.com", "/")]), "UrlFilterArg")
            .unwrap();
        let syn = seg(1000, TCP_SYN, &[]);
        let get = seg(1001, PSH_ACK, REQ);
        let v = |u: &mut UrlFilter, p: &[u8], now| u.classify(&parse_seg(p).unwrap().unwrap(), now);
        assert_eq!(v(&mut u, &syn, 0), Decision::Pass);
        assert_eq!(v(&mut u, &get, 10), Decision::Block);
        assert_eq!(v(&mut u, &get, 109), Decision::Drop(UrlFilterDrop::Blocked));
        // After the block the record is gone: without a new SYN the flow passes.
        assert_eq!(v(&mut u, &get, 110), Decision::Pass);
        assert_eq!(v(&mut u, &syn, 111), Decision::Pass);
        assert_eq!(v(&mut u, &get, 112), Decision::Block);
        // Fill the table; idle flows are evicted for a new one, busy ones are not.
        let mut u = UrlFilter::new(100, 1000);
        for i in 0..MAX_FLOWS as u32 {
            let mut key_syn = syn.clone();
            key_syn[26..30].copy_from_slice(&i.to_be_bytes());
            assert_eq!(v(&mut u, &key_syn, 0), Decision::Pass);
        }
        assert_eq!(u.flows.len(), MAX_FLOWS);
        let late = seg_from(1, 1, 0, TCP_SYN, &[]);
        assert_eq!(v(&mut u, &late, 500), Decision::Pass);
        assert_eq!((u.untracked, u.flows.len()), (1, MAX_FLOWS));
        assert_eq!(v(&mut u, &late, 1000), Decision::Pass);
        assert_eq!(u.flows.len(), 1, "idle flows evicted, the new one tracked");
    }

    #[test]
    fn request_parser() {
        let p = |s: &[u8]| parse_request(s).map(|(a, b)| (a.to_vec(), b.to_vec()));
        assert_eq!(
            p(REQ),
            Some((b"/secret/page".to_vec(), b"example.com".to_vec()))
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: a\r\n"),
            Some((b"/".to_vec(), b"a".to_vec()))
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\nHost: a"),
            None,
            "header line incomplete"
        );
        assert_eq!(
            p(b"GET / HTTP/1.1\r\n\r\nHost: a\r\n"),
            None,
            "host in the body"
        );
        assert_eq!(p(b"GET /\r\nHost: a\r\n"), None, "no version");
        assert_eq!(p(b"garbage\r\nHost: a\r\n"), None);
        assert_eq!(
            p(b"GET / HTTP/1.1\nX-Host: b\nHost:c\n"),
            Some((b"/".to_vec(), b"c".to_vec()))
        );
    }

    #[test]
    fn argument_errors_name_the_field() {
        let mut h = Harness::new();
        let e = h.add(&CLASS, "a", &blacklist(&[("", "/x")])).unwrap_err();
        assert!(e.msg.contains("blacklist[0].host"), "{}", e.msg);
        let bad = Value::map().with(
            "blacklist",
            Value::List(vec![Value::map().with("host", "a").with("url", "/")]),
        );
        let e = h.add(&CLASS, "b", &bad).unwrap_err();
        assert!(
            e.msg.contains("blacklist[0]: unknown field 'url'"),
            "{}",
            e.msg
        );
        h.add(&CLASS, "c", &blacklist(&[])).unwrap();
        let e = h
            .command("c", "add", &blacklist(&[("ok", "/"), ("", "")]))
            .unwrap_err();
        assert!(
            e.msg.contains("UrlFilterArg.blacklist[1].host"),
            "{}",
            e.msg
        );
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// However the request is cut into segments and in whatever order they arrive, the
        /// flow is blocked by exactly the segment that completes the in-order bytes up to the
        /// end of the Host line, and every later segment is dropped.
        #[test]
        fn reassembly_blocks_exactly_when_the_host_line_is_complete(
            cuts in proptest::collection::btree_set(1usize..REQ.len(), 0..7),
            order in Just(()).prop_perturb(|_, mut rng| {
                let mut v: Vec<usize> = (0..8).collect();
                for i in (1..v.len()).rev() {
                    v.swap(i, (rng.next_u32() as usize) % (i + 1));
                }
                v
            }),
        ) {
            let mut bounds = vec![0];
            bounds.extend(cuts.iter().copied());
            bounds.push(REQ.len());
            let pieces: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
            let order: Vec<usize> = order.into_iter().filter(|&i| i < pieces.len()).collect();
            let host_end = REQ.windows(2).enumerate().skip(30).find(|(_, w)| w == b"\r\n").unwrap().0 + 2;
            let mut u = UrlFilter::new(1000, 1000);
            u.add(&blacklist(&[("example.com", "/secret")]), "UrlFilterArg").unwrap();
            let syn = seg(1000, TCP_SYN, &[]);
            prop_assert_eq!(u.classify(&parse_seg(&syn).unwrap().unwrap(), 0), Decision::Pass);
            let mut have = vec![false; REQ.len()];
            let mut blocked = false;
            for &i in &order {
                let (a, b) = pieces[i];
                let p = seg(1001 + a as u32, PSH_ACK, &REQ[a..b]);
                let got = u.classify(&parse_seg(&p).unwrap().unwrap(), 1);
                have[a..b].iter_mut().for_each(|h| *h = true);
                let prefix = have.iter().take_while(|&&h| h).count();
                let want = if blocked {
                    Decision::Drop(UrlFilterDrop::Blocked)
                } else if prefix >= host_end {
                    blocked = true;
                    Decision::Block
                } else {
                    Decision::Pass
                };
                prop_assert_eq!(got, want, "piece {:?} of {:?}", pieces[i], pieces);
            }
            prop_assert!(blocked);
        }
    }
}

//! IPFrag (omec-project fork): fragments IPv4 packets larger than the Ethernet MTU.
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, Packet, PacketBatch,
    Result, Value,
};

use crate::headers::{ip, Ipv4Error, Ipv4View, ETHERTYPE_IPV4, ETH_LEN};

const GATE_FAIL: u16 = 0;
const GATE_FORWARD: u16 = 1;
/// The Ethernet CRC, counted in the MTU as the fork counts it.
const CRC_LEN: usize = 4;
/// The smallest Ethernet frame (CRC included): the MTU must exceed it.
const ETHER_MIN_LEN: i64 = 64;
/// Don't-fragment and more-fragments flags (in the flags/offset word).
const DF: u16 = 0x4000;
const MF: u16 = 0x2000;

/// Why IPFrag drops packets: an IPv4 frame that needs fragmenting but whose header is
/// broken.
pub type IpFragDrop = Ipv4Error;

/// The options of a header that every fragment after the first carries (RFC 791: those
/// with the copied flag), padded to a multiple of 4 bytes with End of Option List.
fn copied_options(opts: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            t => {
                let len = opts.get(i + 1).map_or(0, |&l| l as usize);
                if len < 2 || i + len > opts.len() {
                    break;
                }
                if t & 0x80 != 0 {
                    out.extend_from_slice(&opts[i..i + len]);
                }
                i += len;
            }
        }
    }
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

/// How an IPv4 packet (header + payload, no padding) is cut into packets of at most
/// `max` bytes: each fragment's header and the range of the original payload it carries.
/// None when it cannot be (DF set, or a header leaving no room for 8 bytes of payload).
pub fn plan(pkt: &[u8], hlen: usize, max: usize) -> Option<Vec<(Vec<u8>, std::ops::Range<usize>)>> {
    let flags = u16::from_be_bytes([pkt[ip::FLAGS_FRAG], pkt[ip::FLAGS_FRAG + 1]]);
    if flags & DF != 0 {
        return None;
    }
    let first_hdr = &pkt[..hlen];
    let mut later_hdr = first_hdr[..20].to_vec();
    later_hdr.extend(copied_options(&first_hdr[20..]));
    let payload = pkt.len() - hlen;
    let base = (flags & 0x1fff) as usize * 8;
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload {
        let hdr = if at == 0 { first_hdr } else { &later_hdr[..] };
        let room = max.checked_sub(hdr.len())? / 8 * 8;
        if room == 0 {
            return None;
        }
        let end = (at + room).min(payload);
        let mut h = hdr.to_vec();
        h[0] = 0x40 | (h.len() / 4) as u8;
        let total = (h.len() + end - at) as u16;
        h[ip::TOTAL_LEN..ip::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
        let more = end < payload || flags & MF != 0;
        let off = ((base + at) / 8) as u16 | if more { MF } else { 0 };
        h[ip::FLAGS_FRAG..ip::FLAGS_FRAG + 2].copy_from_slice(&off.to_be_bytes());
        h[ip::CSUM..ip::CSUM + 2].fill(0);
        let c = crate::checksum::ipv4_header(&h);
        h[ip::CSUM..ip::CSUM + 2].copy_from_slice(&c.to_be_bytes());
        out.push((h, hlen + at..hlen + end));
        at = end;
    }
    Some(out)
}

/// Cuts IPv4 frames longer than `mtu - 4` (the MTU counts the Ethernet CRC, as the fork)
/// into fragments that fit, each with the original Ethernet header, a recomputed IPv4
/// checksum and the packet's metadata; they leave by gate 1 with every frame that fits.
/// Frames that need cutting but carry DF (or could not be cut) leave by gate 0, as the fork.
pub struct IpFrag {
    mtu: i64,
}

enum Outcome {
    Fits,
    /// Only Ethernet padding made the frame long: cut to this length, it fits.
    Trim(usize),
    Cannot,
    Drop(IpFragDrop),
    Pieces(Vec<Packet>),
}

impl IpFrag {
    fn max_frame(&self) -> usize {
        self.mtu as usize - CRC_LEN
    }

    fn cut(&self, ctx: &mut Context, p: &Packet) -> Outcome {
        let d = p.data();
        if d.len() <= self.max_frame() || d.get(12..14) != Some(&ETHERTYPE_IPV4.to_be_bytes()[..]) {
            return Outcome::Fits;
        }
        let ip = match Ipv4View::new_checked(&d[ETH_LEN..]) {
            Ok(ip) => ip,
            Err(e) => return Outcome::Drop(e),
        };
        let pkt = &d[ETH_LEN..ETH_LEN + ip.total_len()];
        if pkt.len() + ETH_LEN <= self.max_frame() {
            return Outcome::Trim(ETH_LEN + pkt.len());
        }
        let Some(plan) = plan(pkt, ip.header_len(), self.max_frame() - ETH_LEN) else {
            return Outcome::Cannot;
        };
        let mut pieces = Vec::with_capacity(plan.len());
        for (h, r) in plan {
            let len = ETH_LEN + h.len() + r.len();
            let Some(mut f) = ctx.alloc(len) else {
                // Out of buffers: the fork sends the packet to gate 0 when DPDK cannot
                // fragment it, allocation failures included.
                for f in pieces {
                    ctx.free(f);
                }
                return Outcome::Cannot;
            };
            *f.metadata_mut() = *p.metadata();
            let fd = f.data_mut();
            fd[..ETH_LEN].copy_from_slice(&d[..ETH_LEN]);
            fd[ETH_LEN..ETH_LEN + h.len()].copy_from_slice(&h);
            fd[ETH_LEN + h.len()..].copy_from_slice(&pkt[r]);
            pieces.push(f);
        }
        Outcome::Pieces(pieces)
    }

    /// The `get_eth_mtu` command: the MTU, as an IPFragArg.
    fn cmd_get_eth_mtu(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Value::map().with("mtu", self.mtu))
    }
}

impl Module for IpFrag {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        for mut p in batch.drain() {
            match self.cut(ctx, &p) {
                Outcome::Fits => ctx.emit(GATE_FORWARD, p),
                Outcome::Cannot => ctx.emit(GATE_FAIL, p),
                Outcome::Drop(r) => ctx.drop_packet(p, r),
                Outcome::Trim(len) => {
                    p.set_len(len);
                    ctx.emit(GATE_FORWARD, p);
                }
                Outcome::Pieces(v) => {
                    for f in v {
                        ctx.emit(GATE_FORWARD, f);
                    }
                    ctx.free(p);
                }
            }
        }
    }

    fn desc(&self) -> String {
        format!("mtu {}", self.mtu)
    }
}

/// The IPFrag class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "IPFrag",
    name_template: "ip_frag",
    help: "IPv4 Fragmentation module",
    arg_type: "IPFragArg",
    arg_doc: &[
        "mtu: int32 — Ethernet MTU, CRC included (above 64): longer IPv4 frames are fragmented",
        "gate 1 frames that fit and fragments, gate 0 frames that need fragmenting but carry DF",
    ],
    igates: 1,
    ogates: 2,
    commands: &[CommandSpec {
        name: "get_eth_mtu",
        arg_type: "EmptyArg",
        help: "the MTU (an IPFragArg)",
        mt_safe: true,
        reply_type: "IPFragArg",
        mutates: false,
        handler: handler!(Exclusive IpFrag, IpFrag::cmd_get_eth_mtu),
    }],
    drop_reasons: IpFragDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "IPFragArg")?;
        let mtu = a.int("mtu", i32::MIN as i64, i32::MAX as i64)?.unwrap_or(0);
        a.finish()?;
        if mtu <= ETHER_MIN_LEN {
            return Err(Error::invalid("Invalid MTU size!"));
        }
        Ok(Instance::Exclusive(Box::new(IpFrag { mtu })))
    },
};

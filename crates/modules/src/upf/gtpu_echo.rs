//! GtpuEcho (omec-project fork): turns a GTP-U Echo Request into its Echo Response, in place.
use bessemer_core::{
    Args, Context, Error, Instance, Module, ModuleClass, Packet, PacketBatch, Value,
};

use crate::headers::{udp, ETH_LEN};
use crate::upf::gtpu::{self, GtpuError};
use crate::util::{process_each, Verdict};

const GATE_FAIL: u16 = 0;
const GATE_FORWARD: u16 = 1;
/// The Recovery IE: type and restart counter.
const RECOVERY_LEN: usize = 2;

bessemer_core::drop_reasons! {
    /// Why GtpuEcho drops packets.
    pub enum GtpuEchoDrop {
        Gtpu(GtpuError),
        /// A GTP-U message other than an Echo Request.
        NotEchoRequest = "not_echo_request",
    }
}

/// Answers GTP-U Echo Requests: message type Echo Response with a Recovery IE (restart
/// counter 0) after the request's contents, IPv4 addresses and UDP ports swapped, lengths
/// grown by the IE and both checksums zeroed (MACSwap, L4Checksum and IPChecksum follow in
/// `up4.bess`). The IE goes into Ethernet padding when there is room, else the packet grows;
/// a packet that cannot grow goes out of gate 0, answers out of gate 1.
pub struct GtpuEcho {
    /// The fork requires it (non-zero) and keeps it, unused.
    _s1u_sgw_ip: u32,
}

/// Where an Echo Request's headers are and how long each is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    ip_total: usize,
    udp_off: usize,
    udp_len: usize,
    gtp_off: usize,
    gtp_len: usize,
}

impl Request {
    /// Where the Recovery IE goes: the end of the GTP-U message (and of the IP packet).
    fn end(&self) -> usize {
        self.gtp_off + gtpu::HEADER_LEN + self.gtp_len
    }
}

/// The usual request read straight from the bytes: untagged IPv4 without options, not a
/// fragment, UDP to 2152 filling the IP packet, a GTP-U Echo Request without extension
/// headers filling the datagram. None for anything else, which [`parsed_request`] then
/// sorts out; for the frames it accepts, every check of the full parse holds, so the
/// verdicts are the same (property test below). The full parse cost three times BESS's
/// cycles for this class.
#[inline(always)]
fn plain_request(d: &[u8]) -> Option<Request> {
    const UDP: usize = ETH_LEN + 20;
    const GTP: usize = UDP + 8;
    let h = d.get(..GTP + gtpu::HEADER_LEN)?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]) as usize;
    let (total, udp_len, gtp_len) = (be16(16), be16(38), be16(44));
    let flags = h[GTP] & (gtpu::FLAG_E | gtpu::FLAG_S | gtpu::FLAG_PN);
    let plain = h[12..14] == [0x08, 0x00]
        && h[ETH_LEN] == 0x45
        && total <= d.len() - ETH_LEN
        && be16(20) & 0x3fff == 0
        && h[23] == crate::checksum::PROTO_UDP
        && be16(36) == gtpu::PORT as usize
        && h[GTP] & 0xf0 == gtpu::VERSION_PT
        && h[GTP + 1] == gtpu::MSG_ECHO_REQUEST
        // The message fills the datagram and the datagram the packet (what `answer`
        // requires), which also makes every length the full parse checks consistent.
        && udp_len == 8 + gtpu::HEADER_LEN + gtp_len
        && total == 20 + udp_len
        && total + RECOVERY_LEN <= u16::MAX as usize
        // Optional fields (4 bytes) but no extension header.
        && flags & gtpu::FLAG_E == 0
        && (flags == 0 || gtp_len >= gtpu::OPT_LEN);
    plain.then_some(Request {
        ip_total: total,
        udp_off: UDP,
        udp_len,
        gtp_off: GTP,
        gtp_len,
    })
}

/// The request of any frame the full parse accepts, or why it is not one to answer.
fn parsed_request(d: &[u8]) -> Result<Request, GtpuEchoDrop> {
    let t = gtpu::parse(d)?;
    if t.msg_type != gtpu::MSG_ECHO_REQUEST {
        return Err(GtpuEchoDrop::NotEchoRequest);
    }
    // The response grows every length by the IE: the message must fill the UDP datagram
    // and the datagram the IP packet, or the grown lengths would be wrong.
    let ip_end = ETH_LEN + t.ip_total;
    if t.end() != t.udp_off + t.udp_len || t.udp_off + t.udp_len != ip_end {
        return Err(GtpuError::BadLength.into());
    }
    if t.ip_total + RECOVERY_LEN > u16::MAX as usize {
        return Err(GtpuError::BadLength.into());
    }
    Ok(Request {
        ip_total: t.ip_total,
        udp_off: t.udp_off,
        udp_len: t.udp_len,
        gtp_off: t.gtp_off,
        gtp_len: t.gtp_len,
    })
}

fn answer(p: &mut Packet) -> Verdict<GtpuEchoDrop> {
    // Two copies of `respond`: the short path's with its header offsets constant.
    if let Some(t) = plain_request(p.data()) {
        return respond(p, t);
    }
    match parsed_request(p.data()) {
        Ok(t) => respond(p, t),
        Err(e) => Verdict::Drop(e),
    }
}

/// Turns the request `t` into its response.
#[inline(always)]
fn respond(p: &mut Packet, t: Request) -> Verdict<GtpuEchoDrop> {
    let ie = t.end();
    if p.len() < ie + RECOVERY_LEN && p.append(ie + RECOVERY_LEN - p.len()).is_none() {
        return Verdict::Gate(GATE_FAIL);
    }
    let d = p.data_mut();
    d[ie] = gtpu::IE_RECOVERY;
    d[ie + 1] = 0;
    let g = t.gtp_off;
    d[g + 1] = gtpu::MSG_ECHO_RESPONSE;
    d[g + 2..g + 4].copy_from_slice(&((t.gtp_len + RECOVERY_LEN) as u16).to_be_bytes());
    let ip = ETH_LEN;
    d[ip + 2..ip + 4].copy_from_slice(&((t.ip_total + RECOVERY_LEN) as u16).to_be_bytes());
    d[ip + 10..ip + 12].fill(0);
    let (src, dst) = d[ip + 12..ip + 20].split_at_mut(4);
    src.swap_with_slice(dst);
    let u = t.udp_off;
    let (sp, dp) = d[u..u + 4].split_at_mut(2);
    sp.swap_with_slice(dp);
    d[u + udp::LEN..u + udp::LEN + 2]
        .copy_from_slice(&((t.udp_len + RECOVERY_LEN) as u16).to_be_bytes());
    d[u + udp::CSUM..u + udp::CSUM + 2].fill(0);
    Verdict::Gate(GATE_FORWARD)
}

impl Module for GtpuEcho {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        process_each(ctx, batch, answer);
    }
}

/// The GtpuEcho class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GtpuEcho",
    name_template: "gtpu_echo",
    help: "first version of gtpu echo module",
    arg_type: "GtpuEchoArg",
    arg_doc: &[
        "s1u_sgw_ip: uint32 — the UPF's access address (required, non-zero; unused, as the fork)",
        "gate 1 echo responses, gate 0 requests that could not grow",
    ],
    igates: 1,
    ogates: 2,
    commands: &[],
    drop_reasons: GtpuEchoDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg: &Value| {
        let mut a = Args::new(arg, "GtpuEchoArg")?;
        let ip = a.uint("s1u_sgw_ip", u32::MAX as u64)?.unwrap_or(0) as u32;
        a.finish()?;
        if ip == 0 {
            return Err(Error::invalid("Invalid S1U SGW IP address!"));
        }
        Ok(Instance::Exclusive(Box::new(GtpuEcho { _s1u_sgw_ip: ip })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Echo Request as gNBs send it: Ethernet, IPv4 without options, UDP to 2152, a
    /// GTP-U header with a sequence number (12 bytes), nothing after it.
    fn request() -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f[34..36].copy_from_slice(&2152u16.to_be_bytes());
        f[36..38].copy_from_slice(&2152u16.to_be_bytes());
        f[38..40].copy_from_slice(&20u16.to_be_bytes());
        f[42] = gtpu::VERSION_PT | gtpu::FLAG_S;
        f[43] = gtpu::MSG_ECHO_REQUEST;
        f[44..46].copy_from_slice(&4u16.to_be_bytes());
        f[50..52].copy_from_slice(&7u16.to_be_bytes());
        f
    }

    #[test]
    fn a_usual_request_takes_the_short_path() {
        let f = request();
        let r = plain_request(&f).expect("short path");
        assert_eq!(Ok(r), parsed_request(&f));
        assert_eq!(r.end(), 54);
        // Without the sequence number too.
        let mut g = f[..50].to_vec();
        g[42] = gtpu::VERSION_PT;
        g[16..18].copy_from_slice(&36u16.to_be_bytes());
        g[38..40].copy_from_slice(&16u16.to_be_bytes());
        g[44..46].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(plain_request(&g).map(|r| r.end()), Some(50));
        assert_eq!(
            plain_request(&g).ok_or(()),
            parsed_request(&g).map_err(|_| ())
        );
    }

    proptest! {
        /// Whatever the short path accepts, the full parse accepts with the same lengths
        /// (and the frames it declines still get the full parse's verdict in `answer`).
        #[test]
        fn the_short_path_agrees_with_the_full_parse(
            edits in proptest::collection::vec((12usize..54, any::<u8>(), 0u8..4), 0..4),
            len in prop_oneof![Just(54usize), Just(60usize), 0usize..70],
        ) {
            let mut f = request();
            gtpu::test_frames::mutate(&mut f, &edits);
            f.resize(len, 0xee);
            if let Some(r) = plain_request(&f) {
                prop_assert_eq!(Ok(r), parsed_request(&f));
            }
        }
    }
}

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

fn answer(p: &mut Packet) -> Verdict<GtpuEchoDrop> {
    let t = match gtpu::parse(p.data()) {
        Ok(t) => t,
        Err(e) => return Verdict::Drop(e.into()),
    };
    if t.msg_type != gtpu::MSG_ECHO_REQUEST {
        return Verdict::Drop(GtpuEchoDrop::NotEchoRequest);
    }
    // The response grows every length by the IE: the message must fill the UDP datagram
    // and the datagram the IP packet, or the grown lengths would be wrong.
    let ip_end = ETH_LEN + t.ip_total;
    if t.end() != t.udp_off + t.udp_len || t.udp_off + t.udp_len != ip_end {
        return Verdict::Drop(GtpuError::BadLength.into());
    }
    if t.ip_total + RECOVERY_LEN > u16::MAX as usize {
        return Verdict::Drop(GtpuError::BadLength.into());
    }
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

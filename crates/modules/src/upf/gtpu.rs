//! GTP-U (3GPP TS 29.281) parsing the UPF classes share: the outer IPv4/UDP headers of a
//! tunnel packet, the GTP-U header with its optional fields and extension-header chain, each
//! byte read only after its bounds were checked.

use crate::checksum::PROTO_UDP;
use crate::headers::{ipv4_in_frame, udp, Ipv4Error, UdpView, ETH_LEN};

/// The UDP port of GTP-U.
pub const PORT: u16 = 2152;
/// The mandatory GTP-U header: flags, message type, length, TEID.
pub const HEADER_LEN: usize = 8;
/// The optional fields present when any of E, S or PN is set: sequence number, N-PDU
/// number and the next extension header type.
pub const OPT_LEN: usize = 4;
/// Version 1 with protocol type GTP (PT = 1), in the top four bits of the flags byte.
pub const VERSION_PT: u8 = 0x30;
/// Extension header flag.
pub const FLAG_E: u8 = 0x04;
/// Sequence number flag.
pub const FLAG_S: u8 = 0x02;
/// N-PDU number flag.
pub const FLAG_PN: u8 = 0x01;
/// Echo Request.
pub const MSG_ECHO_REQUEST: u8 = 1;
/// Echo Response.
pub const MSG_ECHO_RESPONSE: u8 = 2;
/// Error Indication.
pub const MSG_ERROR_INDICATION: u8 = 26;
/// Supported Extension Headers Notification.
pub const MSG_SUPPORTED_EXT: u8 = 31;
/// End Marker.
pub const MSG_END_MARKER: u8 = 254;
/// G-PDU: a tunnelled user packet.
pub const MSG_GPDU: u8 = 255;
/// The PDU Session Container extension header type (TS 38.415).
pub const EXT_PDU_SESSION: u8 = 0x85;
/// The Recovery information element type.
pub const IE_RECOVERY: u8 = 14;

bessemer_core::drop_reasons! {
    /// Why a frame is not a well-formed GTP-U packet over IPv4/UDP; embedded first in the
    /// drop reasons of the classes that parse GTP-U.
    pub enum GtpuError {
        // Outer Ethernet/IPv4 errors; `too_short` also counts truncated UDP and GTP-U
        // headers.
        Ipv4(Ipv4Error),
        /// IPv4 but not UDP to port 2152.
        NotGtpu = "not_gtpu",
        /// An outer IPv4 fragment (reassemble first: IPDefrag).
        Fragment = "fragment",
        /// GTP version other than 1 or protocol type GTP' (PT = 0).
        BadVersion = "gtpu_bad_version",
        /// UDP or GTP-U length field inconsistent with the packet.
        BadLength = "gtpu_bad_length",
        /// An extension header of length 0 or running past the message.
        BadExtension = "gtpu_bad_extension",
        /// A message type TS 29.281 does not define for GTP-U.
        UnknownType = "gtpu_unknown_type",
    }
}

/// Where the headers of a GTP-U frame are and what they carry (offsets from the frame start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// IPv4 header length (options included).
    pub ip_hlen: usize,
    /// IPv4 total length.
    pub ip_total: usize,
    /// Outer source address, as on the wire.
    pub src: [u8; 4],
    /// Outer destination address, as on the wire.
    pub dst: [u8; 4],
    /// Offset of the UDP header.
    pub udp_off: usize,
    /// UDP length field.
    pub udp_len: usize,
    /// Offset of the GTP-U header.
    pub gtp_off: usize,
    /// GTP-U header length: mandatory part, optional fields and extension headers.
    pub gtp_hlen: usize,
    /// GTP-U length field (everything after the mandatory 8 bytes).
    pub gtp_len: usize,
    /// Message type.
    pub msg_type: u8,
    /// TEID, as on the wire.
    pub teid: [u8; 4],
    /// QFI of a PDU Session Container extension header, if the packet has one.
    pub qfi: Option<u8>,
}

impl Tunnel {
    /// Offset of the T-PDU (the inner packet of a G-PDU, or a message's information
    /// elements).
    pub fn payload_off(&self) -> usize {
        self.gtp_off + self.gtp_hlen
    }
    /// Offset just past the GTP-U message as its length field says.
    pub fn end(&self) -> usize {
        self.gtp_off + HEADER_LEN + self.gtp_len
    }
}

fn known_type(t: u8) -> bool {
    matches!(
        t,
        MSG_ECHO_REQUEST
            | MSG_ECHO_RESPONSE
            | MSG_ERROR_INDICATION
            | MSG_SUPPORTED_EXT
            | MSG_END_MARKER
            | MSG_GPDU
    )
}

/// What a GTP-U header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header length: mandatory part, optional fields and extension headers.
    pub hlen: usize,
    /// Length field (everything after the mandatory 8 bytes).
    pub len: usize,
    /// Message type.
    pub msg_type: u8,
    /// TEID, as on the wire.
    pub teid: [u8; 4],
    /// QFI of a PDU Session Container extension header, if there is one.
    pub qfi: Option<u8>,
}

/// Parses a GTP-U message `g` (from its first header byte to the end of the UDP payload as
/// the UDP length says).
///
/// Inlined, and the TEID copied as one 4-byte move: returned through memory from a call,
/// the TEID's four byte stores were read back as one 4-byte load, which cannot be forwarded
/// from them and waited for the stores to retire (half of GtpuEcho's time in a profile).
#[inline(always)]
pub fn parse_header(g: &[u8]) -> Result<Header, GtpuError> {
    let Some(h) = g.get(..HEADER_LEN) else {
        return Err(Ipv4Error::TooShort.into());
    };
    if h[0] & 0xf0 != VERSION_PT {
        return Err(GtpuError::BadVersion);
    }
    let msg_type = h[1];
    let len = u16::from_be_bytes([h[2], h[3]]) as usize;
    let teid: [u8; 4] = h[4..8].try_into().unwrap();
    let end = HEADER_LEN + len;
    if end > g.len() {
        return Err(GtpuError::BadLength);
    }
    if !known_type(msg_type) {
        return Err(GtpuError::UnknownType);
    }
    let flags = h[0];
    if flags & (FLAG_E | FLAG_S | FLAG_PN) == 0 {
        return Ok(Header {
            hlen: HEADER_LEN,
            len,
            msg_type,
            teid,
            qfi: None,
        });
    }
    let mut pos = HEADER_LEN + OPT_LEN;
    if pos > end {
        return Err(GtpuError::BadLength);
    }
    if flags & FLAG_E == 0 {
        return Ok(Header {
            hlen: pos,
            len,
            msg_type,
            teid,
            qfi: None,
        });
    }
    let mut next = g[pos - 1];
    let mut qfi = None;
    // Each extension header: a length byte in 4-octet units, its content, and the next
    // type in its last byte; the chain ends at next type 0.
    while next != 0 {
        if pos >= end {
            return Err(GtpuError::BadExtension);
        }
        let units = g[pos] as usize;
        let ext_end = pos + 4 * units;
        if units == 0 || ext_end > end {
            return Err(GtpuError::BadExtension);
        }
        if next == EXT_PDU_SESSION {
            qfi = Some(g[pos + 2] & 0x3f);
        }
        next = g[ext_end - 1];
        pos = ext_end;
    }
    Ok(Header {
        hlen: pos,
        len,
        msg_type,
        teid,
        qfi,
    })
}

/// Parses an untagged Ethernet/IPv4/UDP/GTP-U frame.
#[inline]
pub fn parse(d: &[u8]) -> Result<Tunnel, GtpuError> {
    let ip = ipv4_in_frame(d)?;
    if ip.protocol() != PROTO_UDP {
        return Err(GtpuError::NotGtpu);
    }
    if ip.is_fragment() {
        return Err(GtpuError::Fragment);
    }
    let l4 = ip.payload();
    let u = UdpView::new_checked(l4).map_err(|_| Ipv4Error::TooShort)?;
    if u.dst_port() != PORT {
        return Err(GtpuError::NotGtpu);
    }
    if !u.length_ok() {
        return Err(GtpuError::BadLength);
    }
    let udp_len = u.length() as usize;
    let g = parse_header(&l4[udp::HEADER_LEN..udp_len])?;
    let udp_off = ETH_LEN + ip.header_len();
    Ok(Tunnel {
        ip_hlen: ip.header_len(),
        ip_total: ip.total_len(),
        src: ip.src_bytes(),
        dst: ip.dst_bytes(),
        udp_off,
        udp_len,
        gtp_off: udp_off + udp::HEADER_LEN,
        gtp_hlen: g.hlen,
        gtp_len: g.len,
        msg_type: g.msg_type,
        teid: g.teid,
        qfi: g.qfi,
    })
}

/// Bytes from the IPv4 header to the inner packet of the common G-PDU: IPv4 without
/// options, UDP, the 8-byte GTP-U header without optional fields.
pub const PLAIN_OUTER: usize = 20 + 8 + HEADER_LEN;

/// Where the inner packet of a G-PDU of one of the common shapes starts, counted from the
/// IPv4 header (`PLAIN_OUTER` plus the GTP-U header's optional part), when [`parse`]
/// accepts the frame; None for any other frame. The shapes: IPv4 without options, UDP to
/// 2152, and a GTP-U header of 8 bytes, of 12 (sequence number, N-PDU number or next
/// extension type present, no extension header), or of 16 with one 4-byte extension header
/// ending the chain (5G's uplink: the PDU Session Container). Every check `parse` makes is
/// read straight from the bytes for these shapes; callers take the full parse for anything
/// else (None), so their verdicts are the same.
#[inline(always)]
pub fn plain_gpdu_outer(d: &[u8]) -> Option<usize> {
    let h = d.get(..ETH_LEN + PLAIN_OUTER)?;
    let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]) as usize;
    let total = be16(16);
    let udp_len = be16(38);
    let gtp_len = be16(44);
    let plain = h[12..14] == [0x08, 0x00]
        && h[14] == 0x45
        && d.len() - ETH_LEN >= total
        && be16(20) & 0x3fff == 0
        && h[23] == PROTO_UDP
        && be16(36) == PORT as usize
        && udp_len >= 8 + HEADER_LEN
        && total >= 20 + udp_len
        && h[42] & 0xf0 == VERSION_PT
        && h[43] == MSG_GPDU
        && HEADER_LEN + gtp_len <= udp_len - 8;
    if !plain {
        return None;
    }
    let flags = h[42] & (FLAG_E | FLAG_S | FLAG_PN);
    if flags == 0 {
        return Some(PLAIN_OUTER);
    }
    // The optional fields (4 bytes), then perhaps one extension header: its length in
    // 4-byte units (1) and, in its last byte, the next type (0: the chain ends).
    let x = d.get(ETH_LEN + PLAIN_OUTER..ETH_LEN + PLAIN_OUTER + 8)?;
    if gtp_len < OPT_LEN {
        return None;
    }
    if flags & FLAG_E == 0 || x[3] == 0 {
        return Some(PLAIN_OUTER + OPT_LEN);
    }
    if x[4] != 1 || x[7] != 0 || gtp_len < OPT_LEN + 4 {
        return None;
    }
    Some(PLAIN_OUTER + OPT_LEN + 4)
}

/// Frames the GTP-U short-path property tests share.
#[cfg(test)]
pub(crate) mod test_frames {
    /// A plain G-PDU with `inner` bytes of zeroed payload: Ethernet, IPv4 without options,
    /// UDP from and to 2152, GTP-U without optional fields, every length consistent.
    pub(crate) fn plain_gpdu(inner: usize) -> Vec<u8> {
        let mut f = vec![0u8; 50 + inner];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(36 + inner as u16).to_be_bytes());
        f[23] = 17;
        f[34..36].copy_from_slice(&2152u16.to_be_bytes());
        f[36..38].copy_from_slice(&2152u16.to_be_bytes());
        f[38..40].copy_from_slice(&(16 + inner as u16).to_be_bytes());
        f[42] = 0x30;
        f[43] = 0xff;
        f[44..46].copy_from_slice(&(inner as u16).to_be_bytes());
        f
    }

    /// A 5G uplink G-PDU: as [`plain_gpdu`], with the optional fields and one PDU Session
    /// Container extension header (QFI 9) before the `inner` bytes.
    pub(crate) fn psc_gpdu(inner: usize) -> Vec<u8> {
        let mut f = plain_gpdu(inner + 8);
        f[42] = 0x34;
        f[53] = super::EXT_PDU_SESSION;
        f[54..58].copy_from_slice(&[1, 0x10, 9, 0]);
        f
    }

    /// Applies `(offset, value, kind)` edits: kind 0 sets the byte, 1 and 2 step it up or
    /// down (small changes keep lengths near the edges that matter), 3 flips one bit.
    pub(crate) fn mutate(f: &mut [u8], edits: &[(usize, u8, u8)]) {
        for &(at, v, kind) in edits {
            f[at] = match kind {
                0 => v,
                1 => f[at].wrapping_add(1),
                2 => f[at].wrapping_sub(1),
                _ => f[at] ^ (1 << (v % 8)),
            };
        }
    }
}

//! Capture file formats: classic pcap (microsecond timestamps, Ethernet link type), what
//! tcpdump, Wireshark and tcpreplay read, written by the `TcpDump` gate hook and the pcap
//! port; and pcapng (one section, one Ethernet interface, enhanced packet blocks), written by
//! the `PcapNg` gate hook. [`read`] takes both, and what other tools write: either byte order,
//! nanosecond timestamps.

use std::time::{SystemTime, UNIX_EPOCH};

/// Magic number of a microsecond-resolution pcap file, written in host byte order.
pub const MAGIC_USEC: u32 = 0xa1b2_c3d4;
/// Link type of Ethernet frames (DLT_EN10MB).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Largest frame we record.
pub const SNAPLEN: u32 = 65_535;
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Size of each record's header.
pub const RECORD_HEADER_LEN: usize = 16;

/// The 24-byte pcap file header.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC_USEC.to_ne_bytes());
    h[4..6].copy_from_slice(&2u16.to_ne_bytes());
    h[6..8].copy_from_slice(&4u16.to_ne_bytes());
    // thiszone and sigfigs stay 0.
    h[16..20].copy_from_slice(&SNAPLEN.to_ne_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
    h
}

/// A record header for a frame of `orig_len` bytes of which `caplen` are stored.
pub fn record_header(ts: Timestamp, caplen: u32, orig_len: u32) -> [u8; RECORD_HEADER_LEN] {
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&ts.sec.to_ne_bytes());
    h[4..8].copy_from_slice(&ts.usec.to_ne_bytes());
    h[8..12].copy_from_slice(&caplen.to_ne_bytes());
    h[12..16].copy_from_slice(&orig_len.to_ne_bytes());
    h
}

/// A wall-clock time in pcap's resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    pub sec: u32,
    /// Microseconds within the second.
    pub usec: u32,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Timestamp {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp {
            sec: d.as_secs() as u32,
            usec: d.subsec_micros(),
        }
    }
}

/// One record parsed back from a pcap byte stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// When it was captured.
    pub ts: Timestamp,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// The stored bytes.
    pub data: Vec<u8>,
}

/// Parses a whole pcap byte stream written by this module (host byte order, microseconds).
pub fn parse(bytes: &[u8]) -> Result<Vec<Record>, String> {
    if bytes.len() < FILE_HEADER_LEN {
        return Err(format!(
            "{} bytes is too short for a pcap header",
            bytes.len()
        ));
    }
    let word = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    if word(bytes, 0) != MAGIC_USEC {
        return Err(format!("bad pcap magic {:#x}", word(bytes, 0)));
    }
    let mut out = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at < bytes.len() {
        if bytes.len() - at < RECORD_HEADER_LEN {
            return Err(format!("truncated record header at byte {at}"));
        }
        let caplen = word(bytes, at + 8) as usize;
        let start = at + RECORD_HEADER_LEN;
        if bytes.len() - start < caplen {
            return Err(format!("truncated record at byte {at}"));
        }
        out.push(Record {
            ts: Timestamp {
                sec: word(bytes, at),
                usec: word(bytes, at + 4),
            },
            orig_len: word(bytes, at + 12),
            data: bytes[start..start + caplen].to_vec(),
        });
        at = start + caplen;
    }
    Ok(out)
}

/// Type of a pcapng Interface Description Block.
const PCAPNG_IDB: u32 = 1;
/// Type of a pcapng Enhanced Packet Block.
const PCAPNG_EPB: u32 = 6;
/// Snapshot length the `PcapNg` hook announces in its interface description (BESS's value).
pub const PCAPNG_SNAPLEN: u32 = 1518;
/// Size of an Enhanced Packet Block's header (type, length, interface, timestamp, lengths).
pub const PCAPNG_EPB_HEADER_LEN: usize = 28;
/// Size of an Enhanced Packet Block's trailer (its length again).
pub const PCAPNG_EPB_TRAILER_LEN: usize = 4;

/// The start of a pcapng stream in host byte order: a Section Header Block of unknown length
/// and one Interface Description Block for Ethernet with microsecond timestamps (the default
/// resolution), snapshot length `snaplen`.
pub fn pcapng_header(snaplen: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(48);
    // Section Header Block: type, length, byte-order magic, version 1.0, section length -1.
    h.extend_from_slice(&PCAPNG_SHB.to_ne_bytes());
    h.extend_from_slice(&28u32.to_ne_bytes());
    h.extend_from_slice(&PCAPNG_BOM.to_ne_bytes());
    h.extend_from_slice(&1u16.to_ne_bytes());
    h.extend_from_slice(&0u16.to_ne_bytes());
    h.extend_from_slice(&(-1i64).to_ne_bytes());
    h.extend_from_slice(&28u32.to_ne_bytes());
    // Interface Description Block: link type, reserved, snapshot length.
    h.extend_from_slice(&PCAPNG_IDB.to_ne_bytes());
    h.extend_from_slice(&20u32.to_ne_bytes());
    h.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_ne_bytes());
    h.extend_from_slice(&0u16.to_ne_bytes());
    h.extend_from_slice(&snaplen.to_ne_bytes());
    h.extend_from_slice(&20u32.to_ne_bytes());
    h
}

/// Padding after `caplen` stored bytes to the next multiple of four.
pub fn pcapng_padding(caplen: usize) -> usize {
    caplen.next_multiple_of(4) - caplen
}

/// The header of an Enhanced Packet Block (interface 0, microseconds since the epoch) for a
/// frame of `orig_len` bytes of which `caplen` are stored. The block goes on with the stored
/// bytes, [`pcapng_padding`] zero bytes and [`pcapng_epb_trailer`].
pub fn pcapng_epb_header(ts: Timestamp, caplen: u32, orig_len: u32) -> [u8; PCAPNG_EPB_HEADER_LEN] {
    let total = pcapng_block_len(caplen);
    let units = ts.sec as u64 * 1_000_000 + ts.usec as u64;
    let mut h = [0u8; PCAPNG_EPB_HEADER_LEN];
    h[0..4].copy_from_slice(&PCAPNG_EPB.to_ne_bytes());
    h[4..8].copy_from_slice(&total.to_ne_bytes());
    // Interface 0.
    h[12..16].copy_from_slice(&((units >> 32) as u32).to_ne_bytes());
    h[16..20].copy_from_slice(&(units as u32).to_ne_bytes());
    h[20..24].copy_from_slice(&caplen.to_ne_bytes());
    h[24..28].copy_from_slice(&orig_len.to_ne_bytes());
    h
}

/// The last four bytes of an Enhanced Packet Block storing `caplen` bytes.
pub fn pcapng_epb_trailer(caplen: u32) -> [u8; PCAPNG_EPB_TRAILER_LEN] {
    pcapng_block_len(caplen).to_ne_bytes()
}

fn pcapng_block_len(caplen: u32) -> u32 {
    (PCAPNG_EPB_HEADER_LEN
        + PCAPNG_EPB_TRAILER_LEN
        + caplen as usize
        + pcapng_padding(caplen as usize)) as u32
}

/// Magic number of a nanosecond-resolution pcap file.
pub const MAGIC_NSEC: u32 = 0xa1b2_3c4d;
/// Type of a pcapng Section Header Block (also the file's first four bytes).
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
/// pcapng's byte-order magic inside a Section Header Block.
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
/// Larger records are taken as a sign of a corrupt file rather than allocated.
const MAX_CAPLEN: usize = 256 * 1024;

/// One frame of a capture file, as [`read`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// Link type of the interface it was captured on (1: Ethernet).
    pub linktype: u32,
    /// Where its stored bytes are in the file.
    pub data: std::ops::Range<usize>,
    /// Byte offset of its record (for error messages).
    pub offset: usize,
}

/// What is wrong with a capture file, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// Byte offset of the header or record at fault.
    pub offset: usize,
    /// What is wrong.
    pub msg: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.msg)
    }
}

fn bad(offset: usize, msg: impl Into<String>) -> FormatError {
    FormatError {
        offset,
        msg: msg.into(),
    }
}

/// Reads words in a file's byte order.
#[derive(Clone, Copy)]
struct Order {
    big: bool,
}

impl Order {
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let w: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if self.big {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    }
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let w: [u8; 2] = b[at..at + 2].try_into().unwrap();
        if self.big {
            u16::from_be_bytes(w)
        } else {
            u16::from_le_bytes(w)
        }
    }
}

/// Parses a whole capture: classic pcap (either byte order, micro- or nanosecond
/// timestamps) or pcapng (Enhanced and Simple Packet Blocks; other blocks are skipped).
pub fn read(bytes: &[u8]) -> Result<Vec<Frame>, FormatError> {
    if bytes.len() < 4 {
        return Err(bad(
            0,
            format!("{} bytes is too short for a capture file", bytes.len()),
        ));
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let (order, nsec) = match magic {
        PCAPNG_SHB => return read_pcapng(bytes),
        MAGIC_USEC => (Order { big: false }, false),
        MAGIC_NSEC => (Order { big: false }, true),
        m if m.swap_bytes() == MAGIC_USEC => (Order { big: true }, false),
        m if m.swap_bytes() == MAGIC_NSEC => (Order { big: true }, true),
        m => {
            return Err(bad(
                0,
                format!("bad magic {m:#010x}: not a pcap or pcapng file"),
            ))
        }
    };
    if bytes.len() < FILE_HEADER_LEN {
        return Err(bad(0, "truncated pcap file header"));
    }
    let linktype = order.u32(bytes, 20) & 0xffff;
    let mut out = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at < bytes.len() {
        if bytes.len() - at < RECORD_HEADER_LEN {
            return Err(bad(
                at,
                format!(
                    "truncated record header ({} of {RECORD_HEADER_LEN} bytes)",
                    bytes.len() - at
                ),
            ));
        }
        let sec = order.u32(bytes, at) as u64;
        let frac = order.u32(bytes, at + 4) as u64;
        let caplen = order.u32(bytes, at + 8) as usize;
        let orig_len = order.u32(bytes, at + 12);
        if caplen > MAX_CAPLEN {
            return Err(bad(at, format!("record length {caplen} is implausible")));
        }
        let start = at + RECORD_HEADER_LEN;
        if bytes.len() - start < caplen {
            return Err(bad(
                at,
                format!(
                    "truncated record ({} of {caplen} bytes)",
                    bytes.len() - start
                ),
            ));
        }
        out.push(Frame {
            ts_ns: sec * 1_000_000_000 + if nsec { frac } else { frac * 1000 },
            orig_len,
            linktype,
            data: start..start + caplen,
            offset: at,
        });
        at = start + caplen;
    }
    Ok(out)
}

/// An interface of a pcapng section: link type and timestamp unit.
struct Iface {
    linktype: u32,
    snaplen: u32,
    /// Units per second: 10^exp, or 2^exp when `pow2`.
    exp: u32,
    pow2: bool,
}

impl Iface {
    fn ns(&self, units: u64) -> u64 {
        let u = units as u128;
        let ns = if self.pow2 {
            (u * 1_000_000_000) >> self.exp.min(127)
        } else if self.exp <= 9 {
            u * 10u128.pow(9 - self.exp)
        } else {
            u / 10u128.pow(self.exp.min(38) - 9)
        };
        ns.min(u64::MAX as u128) as u64
    }
}

fn read_pcapng(bytes: &[u8]) -> Result<Vec<Frame>, FormatError> {
    let mut out = Vec::new();
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut order = Order { big: false };
    let mut at = 0;
    while at < bytes.len() {
        if bytes.len() - at < 12 {
            return Err(bad(at, "truncated pcapng block header"));
        }
        if u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) == PCAPNG_SHB {
            // Each section states its own byte order.
            let bom = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            order = match bom {
                PCAPNG_BOM => Order { big: false },
                b if b.swap_bytes() == PCAPNG_BOM => Order { big: true },
                b => return Err(bad(at, format!("bad pcapng byte-order magic {b:#010x}"))),
            };
            ifaces.clear();
        }
        let ty = order.u32(bytes, at);
        let len = order.u32(bytes, at + 4) as usize;
        if len < 12 || !len.is_multiple_of(4) {
            return Err(bad(at, format!("bad pcapng block length {len}")));
        }
        if bytes.len() - at < len {
            return Err(bad(
                at,
                format!(
                    "truncated pcapng block ({} of {len} bytes)",
                    bytes.len() - at
                ),
            ));
        }
        if order.u32(bytes, at + len - 4) as usize != len {
            return Err(bad(at, "pcapng block lengths at its start and end differ"));
        }
        let body = &bytes[at + 8..at + len - 4];
        match ty {
            1 => {
                if body.len() < 8 {
                    return Err(bad(at, "truncated interface description block"));
                }
                let mut iface = Iface {
                    linktype: order.u16(body, 0) as u32,
                    snaplen: order.u32(body, 4),
                    exp: 6,
                    pow2: false,
                };
                let mut o = 8;
                while body.len() - o >= 4 {
                    let code = order.u16(body, o);
                    let olen = order.u16(body, o + 2) as usize;
                    if code == 0 || body.len() - o - 4 < olen {
                        break;
                    }
                    if code == 9 && olen >= 1 {
                        let v = body[o + 4];
                        iface.pow2 = v & 0x80 != 0;
                        iface.exp = (v & 0x7f) as u32;
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                ifaces.push(iface);
            }
            6 => {
                if body.len() < 20 {
                    return Err(bad(at, "truncated enhanced packet block"));
                }
                let id = order.u32(body, 0) as usize;
                let iface = ifaces.get(id).ok_or_else(|| {
                    bad(
                        at,
                        format!("packet names interface {id}, which is not described"),
                    )
                })?;
                let units = ((order.u32(body, 4) as u64) << 32) | order.u32(body, 8) as u64;
                let caplen = order.u32(body, 12) as usize;
                if caplen > body.len() - 20 {
                    return Err(bad(at, format!("packet length {caplen} exceeds its block")));
                }
                let start = at + 8 + 20;
                out.push(Frame {
                    ts_ns: iface.ns(units),
                    orig_len: order.u32(body, 16),
                    linktype: iface.linktype,
                    data: start..start + caplen,
                    offset: at,
                });
            }
            3 => {
                let iface = ifaces
                    .first()
                    .ok_or_else(|| bad(at, "simple packet block before any interface"))?;
                if body.len() < 4 {
                    return Err(bad(at, "truncated simple packet block"));
                }
                let orig_len = order.u32(body, 0);
                let mut caplen = (orig_len as usize).min(body.len() - 4);
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                let start = at + 12;
                out.push(Frame {
                    ts_ns: 0,
                    orig_len,
                    linktype: iface.linktype,
                    data: start..start + caplen,
                    offset: at,
                });
            }
            _ => {}
        }
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic pcap file in the given byte order and resolution.
    fn classic(big: bool, nsec: bool, recs: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let w = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let h = |v: u16| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut f = Vec::new();
        f.extend_from_slice(&w(if nsec { MAGIC_NSEC } else { MAGIC_USEC }));
        f.extend_from_slice(&h(2));
        f.extend_from_slice(&h(4));
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&w(65535));
        f.extend_from_slice(&w(1));
        for (sec, frac, data) in recs {
            for v in [*sec, *frac, data.len() as u32, data.len() as u32 + 4] {
                f.extend_from_slice(&w(v));
            }
            f.extend_from_slice(data);
        }
        f
    }

    #[test]
    fn reads_both_byte_orders_and_resolutions() {
        for big in [false, true] {
            for nsec in [false, true] {
                let f = classic(big, nsec, &[(1, 5, &[1, 2, 3]), (2, 0, &[4; 60])]);
                let frames = read(&f).unwrap();
                assert_eq!(frames.len(), 2);
                let unit = if nsec { 1 } else { 1000 };
                assert_eq!(frames[0].ts_ns, 1_000_000_000 + 5 * unit);
                assert_eq!(frames[1].ts_ns, 2_000_000_000);
                assert_eq!(&f[frames[0].data.clone()], &[1, 2, 3]);
                assert_eq!(frames[0].orig_len, 7);
                assert_eq!(frames[1].data.len(), 60);
                assert_eq!(frames[1].linktype, LINKTYPE_ETHERNET);
                assert_eq!(frames[1].offset, 24 + 16 + 3);
            }
        }
        // What this module writes is readable too.
        let mut f = file_header().to_vec();
        f.extend_from_slice(&record_header(Timestamp { sec: 3, usec: 4 }, 2, 2));
        f.extend_from_slice(&[9, 9]);
        assert_eq!(read(&f).unwrap()[0].ts_ns, 3_000_004_000);
    }

    #[test]
    fn malformed_files_name_the_offset() {
        let e = read(&[0x12, 0x34, 0x56, 0x78, 0, 0]).unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.msg.contains("magic"), "{e}");
        let f = classic(false, false, &[(1, 0, &[1; 10]), (1, 1, &[2; 10])]);
        let e = read(&f[..f.len() - 1]).unwrap_err();
        assert_eq!(e.offset, 24 + 26);
        assert!(e.to_string().contains("truncated record"), "{e}");
        let e = read(&f[..24 + 26 + 5]).unwrap_err();
        assert_eq!(e.offset, 50);
        assert!(e.msg.contains("truncated record header"), "{e}");
        assert!(read(&f[..10]).unwrap_err().msg.contains("file header"));
    }

    fn block(ty: u32, body: &[u8]) -> Vec<u8> {
        let len = 12 + body.len().div_ceil(4) * 4;
        let mut b = ty.to_le_bytes().to_vec();
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b
    }

    #[test]
    fn reads_pcapng() {
        let mut shb = PCAPNG_BOM.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut idb = vec![1, 0, 0, 0];
        idb.extend_from_slice(&0u32.to_le_bytes());
        // if_tsresol = 9 (nanoseconds), then end of options.
        idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        let ts: u64 = 5_000_000_123;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&5u32.to_le_bytes());
        epb.extend_from_slice(&64u32.to_le_bytes());
        epb.extend_from_slice(&[1, 2, 3, 4, 5]);
        let mut spb = 3u32.to_le_bytes().to_vec();
        spb.extend_from_slice(&[7, 8, 9]);
        let mut f = block(PCAPNG_SHB, &shb);
        f.extend(block(1, &idb));
        f.extend(block(5, &[0; 8])); // statistics: skipped
        f.extend(block(6, &epb));
        f.extend(block(3, &spb));
        let frames = read(&f).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].ts_ns, ts);
        assert_eq!(&f[frames[0].data.clone()], &[1, 2, 3, 4, 5]);
        assert_eq!(frames[0].orig_len, 64);
        assert_eq!(&f[frames[1].data.clone()], &[7, 8, 9]);
        let e = read(&f[..f.len() - 2]).unwrap_err();
        assert!(e.msg.contains("truncated"), "{e}");
    }

    #[test]
    fn header_and_records_round_trip() {
        let mut f = file_header().to_vec();
        let ts = Timestamp { sec: 7, usec: 9 };
        f.extend_from_slice(&record_header(ts, 3, 60));
        f.extend_from_slice(&[1, 2, 3]);
        let recs = parse(&f).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].ts, ts);
        assert_eq!(recs[0].orig_len, 60);
        assert_eq!(recs[0].data, vec![1, 2, 3]);
        assert!(parse(&f[..f.len() - 1]).unwrap_err().contains("truncated"));
        assert!(parse(&[0u8; 24]).unwrap_err().contains("magic"));
    }

    #[test]
    fn pcapng_written_here_reads_back() {
        let mut f = pcapng_header(PCAPNG_SNAPLEN);
        let ts = Timestamp {
            sec: 1_700_000_000,
            usec: 123_456,
        };
        let frames: [&[u8]; 3] = [&[1u8; 60], &[2u8; 61], &[]];
        for d in frames {
            f.extend_from_slice(&pcapng_epb_header(ts, d.len() as u32, d.len() as u32 + 4));
            f.extend_from_slice(d);
            f.extend(std::iter::repeat_n(0u8, pcapng_padding(d.len())));
            f.extend_from_slice(&pcapng_epb_trailer(d.len() as u32));
        }
        assert_eq!(&f[0..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
        let got = read(&f).unwrap();
        assert_eq!(got.len(), 3);
        for (g, d) in got.iter().zip(frames) {
            assert_eq!(&f[g.data.clone()], d);
            assert_eq!(g.orig_len as usize, d.len() + 4);
            assert_eq!(g.linktype, LINKTYPE_ETHERNET);
            assert_eq!(g.ts_ns, 1_700_000_000_123_456_000);
        }
        // Blocks are whole multiples of four bytes.
        assert_eq!(f.len() % 4, 0);
    }
}

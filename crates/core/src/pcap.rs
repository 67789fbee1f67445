//! The classic pcap file format (microsecond timestamps, Ethernet link type): what tcpdump,
//! Wireshark and tcpreplay read. Used by the `tcpdump` gate hook and the pcap port.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

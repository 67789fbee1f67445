//! Timestamp: marks packets with the current time (paired with Measure).
use crate::headers::{udp, ETH_LEN, IPV4_MIN_LEN};
use bessemer_core::{
    tsc, AccessMode, Args, AttrSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch,
};

/// Marker written before the timestamp so Measure recognises marked packets (BESS's
/// `Timestamp::kMarker`, stored little-endian as BESS does on x86).
pub const MARKER: u32 = 0x54C5_BE55;
/// Default offset: after Ethernet, IPv4 and UDP headers (14 + 20 + 8 bytes), as BESS.
pub const DEFAULT_OFFSET: usize = ETH_LEN + IPV4_MIN_LEN + udp::HEADER_LEN;
const _: () = assert!(DEFAULT_OFFSET == 42);
/// Bytes the mark takes: 4-byte marker, 8-byte nanosecond time.
pub const MARK_SIZE: usize = 12;

/// Writes (marker, time in ns) at `offset` in the packet, or the time into an attribute.
/// As BESS's timestamp.cc: a packet whose data ends inside the mark is lengthened (into its
/// tailroom) to hold it; one with no tailroom for that, or shorter than `offset`, passes
/// unchanged.
pub struct Timestamp {
    offset: Option<usize>,
}

/// Nanoseconds since an arbitrary epoch, from the TSC.
#[inline]
pub fn now_ns(tsc_now: u64) -> u64 {
    tsc::cycles_to_ns(tsc_now)
}

impl Module for Timestamp {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let t = now_ns(ctx.refresh_now());
        match self.offset {
            Some(off) => {
                let mut mark = [0u8; MARK_SIZE];
                mark[..4].copy_from_slice(&MARKER.to_le_bytes());
                mark[4..].copy_from_slice(&t.to_le_bytes());
                for p in batch.pkts_mut() {
                    let len = p.len();
                    if len < off {
                        continue;
                    }
                    if len < off + MARK_SIZE && p.append(off + MARK_SIZE - len).is_none() {
                        continue;
                    }
                    p.data_mut()[off..off + MARK_SIZE].copy_from_slice(&mark);
                }
            }
            None => {
                let a = ctx.attr(0);
                for p in batch.pkts_mut() {
                    p.set_attr(a, &t.to_le_bytes());
                }
            }
        }
        ctx.forward(0, batch);
    }

    fn desc(&self) -> String {
        match self.offset {
            Some(o) => format!("offset {o}"),
            None => "attribute".into(),
        }
    }
}

/// Parses the oneof (offset | attr_name) shared by Timestamp and Measure.
pub fn parse_place(
    a: &mut Args,
    init: &mut bessemer_core::InitContext,
    mode: AccessMode,
    msg: &str,
) -> bessemer_core::Result<Option<usize>> {
    let offset = a.int("offset", 0, 4095)?;
    let attr = a.str("attr_name")?.filter(|s| !s.is_empty());
    match (offset, attr) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "{msg}: offset and attr_name are exclusive"
        ))),
        (_, Some(name)) => {
            init.add_attr(AttrSpec {
                name: name.to_string(),
                size: 8,
                mode,
            })?;
            Ok(None)
        }
        (o, None) => Ok(Some(o.map(|o| o as usize).unwrap_or(DEFAULT_OFFSET))),
    }
}

/// The Timestamp class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Timestamp",
    name_template: "timestamp",
    help: "marks current time to packets (paired with Measure module)",
    arg_type: "TimestampArg",
    arg_doc: &[
        "offset: uint64 — packet offset of the 12-byte mark (4-byte marker 0x54c5be55, 8-byte ns time; default 42, after Ethernet/IPv4/UDP)",
        "a packet ending inside the mark grows to hold it (if it has tailroom); one shorter than offset passes unchanged",
        "attr_name: string — or: an 8-byte metadata attribute to hold the time",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "TimestampArg")?;
        let offset = parse_place(&mut a, init, AccessMode::Write, "TimestampArg")?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(Timestamp { offset })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use bessemer_core::Value;

    #[test]
    fn marks_packets_and_grows_those_ending_inside_the_mark() {
        let mut h = Harness::new();
        h.add(&CLASS, "ts", &Value::map().with("offset", 2))
            .unwrap();
        let c = h.capture("ts", 0);
        h.inject("ts", 0, &[vec![7u8; 20], vec![7u8; 10], vec![7u8; 1]]);
        let got = c.take_data();
        assert_eq!(&got[0][..2], &[7, 7]);
        assert_eq!(&got[0][2..6], &[0x55, 0xbe, 0xc5, 0x54]);
        let t = u64::from_le_bytes(got[0][6..14].try_into().unwrap());
        assert!(t > 0 && t <= now_ns(tsc::rdtsc()));
        assert_eq!(&got[0][14..], &[7u8; 6]);
        // 10 bytes: the data ended inside the mark, so it grew to offset + 12 = 14 bytes.
        assert_eq!(got[1].len(), 14);
        assert_eq!(&got[1][..2], &[7, 7]);
        assert_eq!(&got[1][2..6], &[0x55, 0xbe, 0xc5, 0x54]);
        // Shorter than the offset: unchanged.
        assert_eq!(got[2], vec![7u8; 1]);
        assert_eq!(h.in_use(), 0);
        assert!(h
            .add(
                &CLASS,
                "x",
                &Value::map().with("offset", 1).with("attr_name", "t")
            )
            .is_err());
    }

    #[test]
    fn default_offset_is_after_ethernet_ipv4_udp() {
        let mut h = Harness::new();
        h.add(&CLASS, "ts", &Value::map()).unwrap();
        let c = h.capture("ts", 0);
        h.inject("ts", 0, &[vec![0u8; 60], vec![0u8; 42]]);
        let got = c.take_data();
        assert_eq!(&got[0][42..46], &[0x55, 0xbe, 0xc5, 0x54]);
        assert_eq!(got[0].len(), 60);
        assert_eq!(got[1].len(), 54);
        assert_eq!(&got[1][42..46], &[0x55, 0xbe, 0xc5, 0x54]);
    }
}

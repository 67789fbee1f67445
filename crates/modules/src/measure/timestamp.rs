//! Timestamp: marks packets with the current time (paired with Measure).
use bessemer_core::{
    tsc, AccessMode, Args, AttrSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch,
};

/// Marker written before the timestamp so Measure recognises marked packets (BESS's
/// `Timestamp::kMarker`, stored little-endian as BESS does on x86).
pub const MARKER: u32 = 0x54C5_BE55;
/// Bytes the mark takes: 4-byte marker, 8-byte nanosecond time.
pub const MARK_SIZE: usize = 12;
/// The metadata attribute holding the time when no offset is given (the omec fork's default).
pub const DEFAULT_ATTR: &str = "timestamp";

/// Where Timestamp keeps the time and Measure finds it: TimestampArg's / MeasureArg's oneof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// A 12-byte mark (marker, time) at this packet offset.
    Offset(usize),
    /// The class's first metadata attribute (8 bytes, native order).
    Attr,
}

/// Writes the current time into the `timestamp` attribute (or the one `attr_name` names), or,
/// when an `offset` is given, a mark (marker, time in ns) at that offset in the packet. As the
/// omec fork's timestamp.cc: a packet whose data ends inside the mark is lengthened (into its
/// tailroom) to hold it; one with no tailroom for that, or shorter than `offset`, passes
/// unchanged.
pub struct Timestamp {
    place: Place,
}

/// Nanoseconds since an arbitrary epoch, from the TSC.
#[inline]
pub fn now_ns(tsc_now: u64) -> u64 {
    tsc::cycles_to_ns(tsc_now)
}

/// The time of the mark at `offset` in `data`, if one is there.
#[inline]
pub fn mark_at(data: &[u8], offset: usize) -> Option<u64> {
    match data.get(offset..offset + MARK_SIZE) {
        Some(m) if m[..4] == MARKER.to_le_bytes() => {
            Some(u64::from_le_bytes(m[4..].try_into().unwrap()))
        }
        _ => None,
    }
}

impl Module for Timestamp {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let t = now_ns(ctx.refresh_now());
        match self.place {
            Place::Offset(off) => {
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
            Place::Attr => {
                let a = ctx.attr(0);
                for p in batch.pkts_mut() {
                    p.set_attr(a, &t.to_le_bytes());
                }
            }
        }
        ctx.forward(0, batch);
    }

    fn desc(&self) -> String {
        match self.place {
            Place::Offset(o) => format!("offset {o}"),
            Place::Attr => "attribute".into(),
        }
    }
}

/// Parses the oneof (offset | attr_name) shared by Timestamp and Measure as the omec fork
/// does: a non-zero `offset` puts the mark in the packet; otherwise the time is in the
/// attribute `attr_name`, `timestamp` when none is named.
pub fn parse_place(
    a: &mut Args,
    init: &mut bessemer_core::InitContext,
    mode: AccessMode,
    msg: &str,
) -> bessemer_core::Result<Place> {
    let offset = a.int("offset", 0, 4095)?.filter(|&o| o != 0);
    let attr = a.str("attr_name")?.filter(|s| !s.is_empty());
    match (offset, attr) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "{msg}: offset and attr_name are exclusive"
        ))),
        (Some(o), None) => Ok(Place::Offset(o as usize)),
        (None, name) => {
            init.add_attr(AttrSpec {
                name: name.unwrap_or(DEFAULT_ATTR).to_string(),
                size: 8,
                mode,
            })?;
            Ok(Place::Attr)
        }
    }
}

/// The Timestamp class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "Timestamp",
    name_template: "timestamp",
    help: "marks current time to packets (paired with Measure module)",
    arg_type: "TimestampArg",
    arg_doc: &[
        "attr_name: string — the 8-byte metadata attribute to hold the time in ns (default: timestamp)",
        "offset: uint64 — or, when not 0: the packet offset of a 12-byte mark instead (4-byte marker 0x54c5be55, 8-byte ns time)",
        "a packet ending inside the mark grows to hold it (if it has tailroom); one shorter than offset passes unchanged",
    ],
    igates: 1,
    ogates: 1,
    commands: &[],
    drop_reasons: &[],
    max_workers: bessemer_core::ALL_WORKERS,
    create: |init, arg| {
        let mut a = Args::new(arg, "TimestampArg")?;
        let place = parse_place(&mut a, init, AccessMode::Write, "TimestampArg")?;
        a.finish()?;
        Ok(Instance::Exclusive(Box::new(Timestamp { place })))
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
    fn without_an_offset_the_time_goes_into_the_timestamp_attribute_and_the_packet_is_untouched() {
        // The omec fork's default (the UPF's `Timestamp()` before GtpuParser): a mark at
        // offset 42 would overwrite the GTP-U header of every uplink packet.
        let mut h = Harness::new();
        h.add(&CLASS, "ts", &Value::map()).unwrap();
        assert_eq!(h.desc("ts"), "attribute");
        h.add(&super::super::measure::CLASS, "m", &Value::map())
            .unwrap();
        h.connect("ts", 0, "m", 0).unwrap();
        let c = h.capture("m", 0);
        let frame: Vec<u8> = (0..60u8).collect();
        h.inject("ts", 0, &vec![frame.clone(); 3]);
        assert_eq!(c.take_data(), vec![frame; 3], "the packets are not written");
        let s = h.command("m", "get_summary", &Value::map()).unwrap();
        let lat = s.get("latency").unwrap();
        assert_eq!(
            lat.get("count").unwrap().as_i64(),
            Some(3),
            "read from the attribute"
        );
        // offset 0 is "not given", as the fork reads it.
        h.add(&CLASS, "ts0", &Value::map().with("offset", 0))
            .unwrap();
        assert_eq!(h.desc("ts0"), "attribute");
        assert_eq!(h.in_use(), 0);
    }
}

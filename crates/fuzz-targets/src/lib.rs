//! Bessemer's fuzz targets, as plain functions of arbitrary bytes. Each panics on a broken
//! invariant (a crash, a leaked buffer, a packet neither emitted nor counted), which is what
//! the fuzzer reports. `fuzz/` wraps them for cargo-fuzz (`make fuzz`); `tests/corpus.rs`
//! runs every saved input through them in `make test`.

use bessemer_core::testing::Harness;
use bessemer_core::{ModuleClass, Value};

/// Names of the targets, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/`.
pub const TARGETS: &[&str] = &["module_frames", "pcap_read", "module_args"];

/// Runs target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "module_frames" => module_frames(data),
        "pcap_read" => pcap_read(data),
        "module_args" => module_args(data),
        other => panic!("no fuzz target {other}"),
    }
}

/// Classes fed packets: every class with an input gate, except the port and queue I/O
/// classes (they move packets to ports, whose own tests cover them).
fn packet_classes() -> Vec<&'static ModuleClass> {
    bessemer_modules::classes()
        .iter()
        .copied()
        .filter(|c| {
            c.igates > 0 && !matches!(c.name, "PortOut" | "QueueOut" | "PortInc" | "QueueInc")
        })
        .collect()
}

/// Classes that hold packets (queues, reassembly), make new ones (copies, fragments,
/// replies) or end them by design (Sink), so that packets out + drops need not equal packets
/// in for them.
const HOLD_OR_CREATE: &[&str] = &[
    "Queue",
    "Buffer",
    "DRR",
    "IPDefrag",
    "IPFrag",
    "Replicate",
    "GtpuEcho",
    "ArpResponder",
    "GtpuPathMonitoring",
    "Sink",
];

/// Splits fuzz input into frames: a 2-byte big-endian length (mod 2 048) before each.
fn frames(mut rest: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while rest.len() >= 2 && out.len() < 256 {
        let n = (u16::from_be_bytes([rest[0], rest[1]]) as usize % 2048).min(rest.len() - 2);
        out.push(rest[2..2 + n].to_vec());
        rest = &rest[2 + n..];
    }
    out
}

/// One module class (chosen by the first byte) fed arbitrary frames on input gate 0: it must
/// not panic, every buffer must come back (the harness checks when dropped), and for a class
/// that neither holds nor makes packets every frame must leave by a gate or be counted under
/// a named drop reason.
pub fn module_frames(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let classes = packet_classes();
    let class = classes[pick as usize % classes.len()];
    let frames = frames(rest);
    let mut h = Harness::new();
    let arg = bessemer_modules::samples::minimal_arg(class.name, "p");
    let Ok(m) = h.add(class, "m", &arg) else {
        return;
    };
    let caps: Vec<_> = (0..class.ogates.min(8)).map(|g| h.capture(&m, g)).collect();
    h.inject(&m, 0, &frames);
    let out: usize = caps.iter().map(|c| c.take().len()).sum();
    let dropped = h.graph.total_drops(&m).expect("module exists") as usize;
    if !HOLD_OR_CREATE.contains(&class.name) {
        assert_eq!(
            out + dropped,
            frames.len(),
            "{}: {} frames in, {out} out, {dropped} dropped",
            class.name,
            frames.len()
        );
    }
}

/// The pcap / pcapng reader on arbitrary bytes: an error or frames, never a panic, and
/// every frame's bytes within the input.
pub fn pcap_read(data: &[u8]) {
    if let Ok(frames) = bessemer_core::pcap::read(data) {
        let total: usize = frames.iter().map(|f| f.data.len()).sum();
        assert!(total <= data.len(), "frames hold more bytes than the file");
    }
}

/// Arbitrary `Any` payloads for every class's argument message (picked by the first byte):
/// decoding answers a value or an error, never a panic; creating the class from a decoded
/// value answers a module or an error, never a panic.
pub fn module_args(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let classes = bessemer_modules::classes();
    let class = classes[pick as usize % classes.len()];
    if matches!(class.name, "PortInc" | "PortOut" | "QueueInc" | "QueueOut") {
        return;
    }
    let any = prost_types::Any {
        type_url: format!("type.googleapis.com/bess.pb.{}", class.arg_type),
        value: rest.to_vec(),
    };
    let Ok(v) = bessemer_daemon::convert::any_to_value(Some(&any), Some(class.arg_type), "fuzz")
    else {
        return;
    };
    let mut h = Harness::new();
    let _ = h.add(class, "m", &v);
    let _: Value = v;
}

//! Bessemer's fuzz targets, as plain functions of arbitrary bytes. Each panics on a broken
//! invariant (a crash, a leaked buffer, a packet neither emitted nor counted), which is what
//! the fuzzer reports. `fuzz/` wraps them for cargo-fuzz (`make fuzz`); `tests/corpus.rs`
//! runs every saved input through them in `make test`.

mod apps;
mod control;
mod graph;
pub mod input;
mod ports;
mod slice;

pub use apps::megapipe_apps;
pub use control::{control_sequence, http_endpoints};
pub use graph::{module_graph, module_tables, upf_consts};
pub use ports::port_rx;
pub use slice::slice_port;

use std::collections::HashSet;

use bessemer_core::mem::PagePolicy;
use bessemer_core::packet::{FRAME_SHIFT, FRAME_SIZE};
use bessemer_core::testing::Harness;
use bessemer_core::{ModuleClass, PacketBatch, PacketPool, Value, MAX_BURST};
use bessemer_drivers::partial_csum;
use bessemer_drivers::vnet::{self, Gso, Vnet, GSO_ECN, GSO_NONE, VNET_HDR_LEN};
use bessemer_drivers::xdp_desc::{self, HeldFrames};

/// Names of the targets, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/`.
pub const TARGETS: &[&str] = &[
    "module_frames",
    "pcap_read",
    "module_args",
    "module_commands",
    "vnet_frames",
    "xdp_descriptors",
    "module_graph",
    "module_tables",
    "slice_port",
    "port_rx",
    "http_endpoints",
    "megapipe_apps",
    "control_sequence",
];

/// Removes the files this process's targets left in the temporary directory (the served
/// root of `megapipe_apps`, the capture files of `control_sequence`); for the end of a
/// replay (a fuzzing process just leaves its few).
pub fn cleanup() {
    let pid = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // bessemer-fuzz-<what>-<pid>[-...|.pcap]
        let ours = name.starts_with("bessemer-fuzz-")
            && name.split(['-', '.']).nth(3).is_some_and(|p| p == pid);
        if ours {
            let p = e.path();
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
    }
}

/// Runs target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "module_frames" => module_frames(data),
        "pcap_read" => pcap_read(data),
        "module_args" => module_args(data),
        "module_commands" => module_commands(data),
        "vnet_frames" => vnet_frames(data),
        "xdp_descriptors" => xdp_descriptors(data),
        "module_graph" => module_graph(data),
        "module_tables" => module_tables(data),
        "slice_port" => slice_port(data),
        "port_rx" => port_rx(data),
        "http_endpoints" => http_endpoints(data),
        "megapipe_apps" => megapipe_apps(data),
        "control_sequence" => control_sequence(data),
        other => panic!("no fuzz target {other}"),
    }
}

/// Classes fed packets: every class with an input gate, except the port and queue I/O
/// classes (they move packets to ports, whose own tests cover them).
pub(crate) fn packet_classes() -> Vec<&'static ModuleClass> {
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
    let frames = input::frames(rest);
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

/// Classes whose commands `module_commands` runs: every class with a command, except the
/// port and queue I/O classes (they need a port).
fn command_classes() -> Vec<&'static ModuleClass> {
    bessemer_modules::classes()
        .iter()
        .copied()
        .filter(|c| {
            !c.commands.is_empty()
                && !matches!(c.name, "PortOut" | "QueueOut" | "PortInc" | "QueueInc")
        })
        .collect()
}

/// Arbitrary `Any` payloads for every command of every class (class by the first byte,
/// command by the second), on a module created with the class's smallest argument, through
/// what the daemon does with a ModuleCommand: decode the payload against the command's
/// argument type, run the handler, encode the result as the command's response message.
/// Each step answers a value or an error, never a panic. Up to four commands run on the
/// same module, so a command meets state an earlier one left.
pub fn module_commands(data: &[u8]) {
    let classes = command_classes();
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let class = classes[pick as usize % classes.len()];
    let mut h = Harness::new();
    let arg = bessemer_modules::samples::minimal_arg(class.name, "p");
    if h.add(class, "m", &arg).is_err() {
        return;
    }
    for _ in 0..4 {
        // A command: its index, a 2-byte payload length, the payload.
        let [c, hi, lo, tail @ ..] = rest else {
            return;
        };
        let n = (u16::from_be_bytes([*hi, *lo]) as usize).min(tail.len());
        let (payload, next) = tail.split_at(n);
        rest = next;
        let spec = &class.commands[*c as usize % class.commands.len()];
        let any = prost_types::Any {
            type_url: format!("type.googleapis.com/bess.pb.{}", spec.arg_type),
            value: payload.to_vec(),
        };
        let Ok(v) = bessemer_daemon::convert::any_to_value(Some(&any), Some(spec.arg_type), "fuzz")
        else {
            continue;
        };
        let Ok(out) = h.command("m", spec.name, &v) else {
            continue;
        };
        let ty = bessemer_daemon::convert::response_type(spec);
        let _ = bessemer_daemon::convert::value_to_any(&ty, &out);
    }
}

thread_local! {
    /// A pool per thread for the driver targets (making one per input costs more than the
    /// target itself); every input leaves it with every buffer free, which they assert.
    static DRIVER_POOL: PacketPool =
        PacketPool::new("fuzz", 256, PagePolicy::Plain).expect("a 256-buffer pool");
}

/// A virtio-net header (the first 10 bytes) and a frame (the rest), as AF_PACKET and taps
/// hand them over, through what AFPacketPort and VPort do with them: finish a partial
/// checksum (the frame keeps its length), recognise and finish a partial checksum with no
/// header (once finished, a frame is not "partial" again) and cut a super-frame into
/// segments: every segment fits a buffer, their payloads add up to the frame's, and every
/// buffer comes back.
pub fn vnet_frames(data: &[u8]) {
    if data.len() < VNET_HDR_LEN {
        return;
    }
    let v = Vnet::parse(&data[..VNET_HDR_LEN]);
    let frame = &data[VNET_HDR_LEN..];

    let mut f = frame.to_vec();
    let _ = v.finish_csum(&mut f);
    assert_eq!(
        f.len(),
        frame.len(),
        "finish_csum changed the frame's length"
    );

    let mut f = frame.to_vec();
    if partial_csum::complete(&mut f) {
        assert!(
            !partial_csum::complete(&mut f.clone()),
            "a completed checksum is recognised as partial again"
        );
    }
    assert_eq!(f.len(), frame.len());

    let how = if v.gso_type & !GSO_ECN == GSO_NONE {
        vnet::oversized_tcp(frame)
    } else {
        Some(v)
    };
    let Some(how) = how else {
        return;
    };
    DRIVER_POOL.with(|pool| {
        let mut cache = pool.cache();
        let cap = cache.data_capacity();
        let Some(g) = Gso::parse(frame, how, cap) else {
            return;
        };
        assert!(g.hlen <= frame.len() && g.mss > 0 && g.hlen + g.mss <= cap);
        let total = frame.len() - g.hlen;
        let mut seg = 0;
        let mut payload = 0;
        let mut segments = 0;
        let mut batch = PacketBatch::new();
        for _ in 0..=total {
            let done = vnet::segment_into(
                &mut cache,
                &mut batch,
                MAX_BURST,
                frame,
                &g,
                &mut seg,
                |_| {},
            );
            for p in batch.drain() {
                assert!(
                    p.len() > g.hlen && p.len() <= cap,
                    "a segment of {} bytes",
                    p.len()
                );
                payload += p.len() - g.hlen;
                segments += 1;
                cache.free(p);
            }
            if done {
                break;
            }
        }
        assert_eq!(
            payload, total,
            "segments carry {payload} of {total} payload bytes"
        );
        assert_eq!(segments, total.div_ceil(g.mss));
        drop(cache);
        assert_eq!(
            pool.free_count(),
            pool.capacity(),
            "a segment buffer leaked"
        );
    });
}

/// Arbitrary AF_XDP ring contents against a UMEM of 256 frames, some lent to the kernel
/// (the first byte says how many), some held by the graph: each 13-byte record is an RX or
/// completion descriptor (its first byte says which, and whether the address is raw or
/// built from a frame index and an offset), taken back by `xdp_desc` as the socket code
/// does. A descriptor answers a packet or a counted refusal; a packet's bytes lie inside
/// the frame it names, which was lent and is taken once; no frame the graph holds is
/// taken; at the end every buffer is back in the pool (no leak, no double free).
pub fn xdp_descriptors(data: &[u8]) {
    let Some((&lend, rest)) = data.split_first() else {
        return;
    };
    DRIVER_POOL.with(|pool| {
        let mut cache = pool.cache();
        let nframes = pool.capacity();
        let mut held = HeldFrames::new(nframes);
        let mut lent = HashSet::new();
        for _ in 0..lend % 128 {
            let p = cache.alloc(0).expect("a free buffer");
            held.set(p.frame_index());
            lent.insert(p.frame_index());
            let _ = p.into_raw();
        }
        let graph: Vec<_> = (0..16).filter_map(|_| cache.alloc(60)).collect();
        let base = pool.region_base() as usize;
        let (mut taken, mut refused) = (0usize, 0usize);
        let records = rest.chunks_exact(13);
        let count = records.len();
        for r in records {
            let raw = u64::from_le_bytes(r[1..9].try_into().unwrap());
            let len = u32::from_le_bytes(r[9..13].try_into().unwrap());
            let addr = if r[0] & 2 == 0 {
                raw
            } else {
                // A frame index near the UMEM's size and an offset inside a frame.
                ((raw >> 16) % (nframes as u64 + 2)) << FRAME_SHIFT
                    | (raw & (FRAME_SIZE as u64 - 1))
            };
            let got = if r[0] & 1 == 0 {
                xdp_desc::take_rx(pool, &mut held, &mut cache, addr, len)
            } else {
                xdp_desc::take_completed(pool, &mut held, addr)
            };
            match got {
                Ok(p) => {
                    let frame = p.frame_index();
                    assert!(lent.remove(&frame), "frame {frame} taken but not lent");
                    let start = p.data().as_ptr() as usize;
                    let frame_start = base + (frame as usize) * FRAME_SIZE;
                    assert!(start >= frame_start && start + p.len() <= frame_start + FRAME_SIZE);
                    assert!(start + p.len() <= base + pool.region_len());
                    taken += 1;
                    cache.free(p);
                }
                Err(xdp_desc::BadDesc::PastFrame) => {
                    // Refused, and its frame freed: the kernel had given it back.
                    lent.remove(&((addr >> FRAME_SHIFT) as u32));
                    refused += 1;
                }
                Err(_) => refused += 1,
            }
        }
        assert_eq!(
            taken + refused,
            count,
            "a descriptor neither taken nor counted"
        );
        assert_eq!(
            held.frames().collect::<HashSet<_>>(),
            lent,
            "lent frames out of step"
        );
        for idx in held.frames() {
            // SAFETY: lent and never taken back: ours, as when a socket closes.
            let p = unsafe { pool.packet_at((idx as u64) << FRAME_SHIFT) }.expect("in the pool");
            cache.free(p);
        }
        for p in graph {
            cache.free(p);
        }
        drop(cache);
        assert_eq!(pool.free_count(), nframes, "buffers lost or freed twice");
    });
}

//! The smoke run of every fuzz target inside `make test`: every saved input in
//! `fuzz/corpus/<target>/` (where `make fuzz` keeps what it finds), then seeds built here
//! and a few thousand pseudo-random inputs (fixed seed, so a failure repeats).

use std::path::Path;

use bessemer_fuzz_targets::{cleanup, run, TARGETS};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect()
}

/// A frame for `module_frames`: a 2-byte length, then the bytes.
fn framed(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&(f.len() as u16).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

fn udp_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 42];
    f[12] = 0x08;
    f[14] = 0x45;
    let total = (28 + payload.len()) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[34..36].copy_from_slice(&2152u16.to_be_bytes());
    f[36..38].copy_from_slice(&2152u16.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "module_frames" => {
            let gtpu = [0x30, 0xff, 0, 8, 0, 0, 0, 1, 0x45, 0, 0, 8, 0, 0, 0, 0];
            let frames = vec![
                udp_frame(&gtpu),
                udp_frame(&[]),
                vec![0u8; 14],
                vec![0xff; 60],
                Vec::new(),
                udp_frame(&[0x32, 0x01, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0]),
            ];
            (0..=255u8)
                .map(|c| {
                    let mut v = vec![c];
                    v.extend(framed(&frames));
                    v
                })
                .collect()
        }
        "pcap_read" => {
            let mut classic = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
            classic.extend([0u8; 8]);
            classic.extend(65535u32.to_le_bytes());
            classic.extend(1u32.to_le_bytes());
            classic.extend([0u8; 8]);
            classic.extend(4u32.to_le_bytes());
            classic.extend(1000u32.to_le_bytes());
            classic.extend([1, 2, 3, 4]);
            let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a];
            ng.extend([1, 0, 0, 0]);
            ng.extend([0xff; 8]);
            ng.extend(28u32.to_le_bytes());
            vec![classic, ng, Vec::new(), vec![0xa1, 0xb2, 0xc3, 0xd4]]
        }
        "module_commands" => {
            // Every command of every class with an empty payload, then with a small one.
            let mut out = Vec::new();
            for class in 0..=255u8 {
                for cmd in 0..8u8 {
                    out.push(vec![class, cmd, 0, 0]);
                    out.push(vec![class, cmd, 0, 4, 0x08, 0x01, 0x10, 0x01]);
                }
            }
            out
        }
        "vnet_frames" => vnet_seeds(),
        "xdp_descriptors" => {
            // 64 frames lent; descriptors for frames around them, good and bad lengths.
            let mut v = vec![64u8];
            for f in 0..80u64 {
                for (kind, len) in [(2u8, 60u32), (2, 5000), (3, 0), (0, 60)] {
                    v.push(kind);
                    v.extend(((f << 16) | 256).to_le_bytes());
                    v.extend(len.to_le_bytes());
                }
            }
            vec![v, vec![255], vec![0, 2]]
        }
        "module_args" => (0..=255u8)
            .map(|c| vec![c, 0x08, 0x01, 0x10, 0x01])
            .collect(),
        // The other targets' seeds are real frames, requests and programs written to
        // fuzz/corpus/ by fuzz/gen_corpus.py.
        _ => Vec::new(),
    }
}

/// Pseudo-random inputs per target: fewer for the targets whose inputs are programs (a
/// random one does little) and which cost milliseconds each (ports, threads, engines).
fn random_count(target: &str) -> usize {
    match target {
        "module_graph" | "module_tables" | "slice_port" | "port_rx" | "control_sequence" => 100,
        "http_endpoints" | "megapipe_apps" => 500,
        _ => 2000,
    }
}

/// virtio-net headers (native byte order) in front of TCP/UDP super-frames over IPv4 and
/// IPv6, partial checksums, and a frame with no header.
fn vnet_seeds() -> Vec<Vec<u8>> {
    let hdr = |flags: u8, gso: u8, size: u16, start: u16, off: u16| {
        let mut h = vec![flags, gso, 0, 0];
        for x in [size, start, off] {
            h.extend(x.to_ne_bytes());
        }
        h
    };
    let l4 = |proto: u8, payload: usize| {
        let mut t = if proto == 6 {
            let mut t = vec![0u8; 20];
            t[12] = 5 << 4;
            t
        } else {
            vec![0u8; 8]
        };
        t.extend((0..payload).map(|i| i as u8));
        t
    };
    let v4 = |proto: u8, payload: usize| {
        let t = l4(proto, payload);
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&((20 + t.len()) as u16).to_be_bytes());
        f.extend(ip);
        f.extend(t);
        f
    };
    let v6 = |proto: u8, payload: usize| {
        let t = l4(proto, payload);
        let mut f = vec![0u8; 14];
        f[12] = 0x86;
        f[13] = 0xdd;
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, proto, 64];
        ip[4..6].copy_from_slice(&(t.len() as u16).to_be_bytes());
        ip.extend([0xfe; 32]);
        f.extend(ip);
        f.extend(t);
        f
    };
    let seed = |h: Vec<u8>, f: Vec<u8>| [h, f].concat();
    vec![
        seed(hdr(1, 1, 1000, 34, 16), v4(6, 5000)),
        seed(hdr(1, 1, 1, 34, 16), v4(6, 300)),
        seed(hdr(1, 4, 1200, 54, 16), v6(6, 4000)),
        seed(hdr(1, 5, 500, 34, 6), v4(17, 2000)),
        seed(hdr(1, 5, 500, 54, 6), v6(17, 1500)),
        seed(hdr(1, 0, 0, 34, 6), v4(17, 100)),
        seed(hdr(0, 0, 0, 0, 0), v4(6, 3000)),
        seed(hdr(1, 0x81, 1400, 34, 16), v4(6, 3000)),
        seed(hdr(1, 1, 1000, 65535, 65535), v4(6, 100)),
        hdr(1, 1, 0, 0, 0),
    ]
}

/// xorshift64*: a fixed sequence, so a failing input is found again.
fn random_inputs(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    (0..n)
        .map(|_| {
            let len = (next() % 300) as usize;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect()
}

#[test]
fn every_fuzz_target_survives_its_corpus_seeds_and_random_inputs() {
    // The targets' temporary files go when the test ends, passed or not.
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            cleanup();
        }
    }
    let _cleanup = Cleanup;
    // FUZZ_TARGETS="a b" replays only those (all by default).
    let only = std::env::var("FUZZ_TARGETS").unwrap_or_default();
    for (i, target) in TARGETS.iter().enumerate() {
        if !only.is_empty() && !only.split_whitespace().any(|t| t == *target) {
            continue;
        }
        let t0 = std::time::Instant::now();
        let mut inputs = corpus(target);
        let saved = inputs.len();
        inputs.extend(seeds(target));
        inputs.extend(random_inputs(
            random_count(target),
            0x9e37_79b9_7f4a_7c15 ^ i as u64,
        ));
        for input in &inputs {
            run(target, input);
        }
        eprintln!(
            "{target}: {} inputs ({saved} from fuzz/corpus) in {:.1} s",
            inputs.len(),
            t0.elapsed().as_secs_f64()
        );
    }
}

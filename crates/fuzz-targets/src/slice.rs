//! `slice_port`: a SlicePort driven by an application in the same process that does what
//! the input says, well-behaved or not (garbage descriptors, scribbled ring indices, frames
//! released twice or never, detaching while the pipeline holds its frames), against the
//! port's two queues driven directly (packets kept, sent back to the app without a copy,
//! copied in from the daemon's pool, freed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::port::PortParams;
use bessemer_core::testing::Harness;
use bessemer_core::{Packet, PacketBatch, Value};
use bessemer_drivers::slice_port::{slice_counters, DRIVER};
use bessemer_slice::layout::{self, RingId};
use bessemer_slice::{Desc, Slice};

use crate::input::Input;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most 5 s) until the port's link is `up` (an app attached) or down.
fn wait_link(h: &Harness, up: bool) {
    let port = h.graph.ports().get("s0").expect("port s0");
    let t = Instant::now();
    while port.port().link_status().link_up != up {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "slice link not {} within 5 s",
            if up { "up" } else { "down" }
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Attaches an app (its wait for the hello survives libFuzzer's timeout alarm: found here,
/// fixed in the slice library).
fn attach(h: &Harness, path: &str) -> Slice {
    let s = Slice::attach_timeout(path, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("attach to the slice port: {e}"));
    wait_link(h, true);
    s
}

/// A SlicePort with 64-entry rings and an app, then up to 64 operations, each picked by one
/// byte:
///
/// * app: send frames by copy; push raw descriptors on its send or release ring; overwrite
///   one of its ring indices; receive and release everything; receive and keep; release
///   what it kept (twice, if the input says so); take send frames and queue them with
///   offsets and lengths from the input; detach and attach again;
/// * daemon: receive into the held packets; send held packets back (the app's own frames
///   go back without a copy); send fresh packets from the daemon's pool (any length);
///   free held packets.
///
/// Checked: nothing panics (the slice library's debug checks included); every send answers
/// sent + unsent = offered with the unsent left in the batch; the port's counters agree
/// with what its queues returned; every daemon buffer comes back.
pub fn slice_port(data: &[u8]) {
    let mut i = Input::new(data);
    let h = Harness::new();
    let path = format!(
        "@bessemer-fuzz-slice-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    h.graph
        .ports()
        .create(
            &DRIVER,
            PortParams {
                name: "s0".into(),
                num_inc_q: 0,
                num_out_q: 0,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &Value::map()
                .with("path", path.as_str())
                .with("ring_size", 64u64),
        )
        .expect("SlicePort");
    let handle = h.graph.ports().get("s0").expect("port s0");
    let mut rx = handle.port().rx_queue(0).expect("rx queue");
    let mut tx = handle.port().tx_queue(0).expect("tx queue");
    let mut cache = h.pool.cache();
    let mut app = Some(attach(&h, &path));
    let mut kept: Vec<Desc> = Vec::new();
    let mut held: Vec<Packet> = Vec::new();
    let (mut received, mut sent) = (0u64, 0u64);
    for _ in 0..64 {
        if i.is_empty() {
            break;
        }
        let op = i.u8();
        let n = 1 + (i.u8() % 64) as usize;
        match op % 12 {
            0 => {
                if let Some(a) = app.as_mut() {
                    let frames: Vec<&[u8]> = (0..n % 8 + 1).filter_map(|_| i.frame()).collect();
                    a.send_copy(&frames);
                }
            }
            1 | 2 => {
                let words: Vec<u64> = (0..n % 8 + 1)
                    .map(|_| u64::from(i.u32()) << 32 | u64::from(i.u32()))
                    .collect();
                if let Some(a) = app.as_mut() {
                    let ring = if op % 12 == 1 {
                        RingId::Tx
                    } else {
                        RingId::RxFree
                    };
                    a.push_raw(ring, &words);
                }
            }
            3 => {
                let ring = [RingId::Rx, RingId::RxFree, RingId::Tx, RingId::TxFree][(n / 16) % 4];
                let v = i.u32();
                if let Some(a) = app.as_mut() {
                    a.scribble_index(ring, v);
                }
            }
            4 | 5 => {
                if let Some(a) = app.as_mut() {
                    let mut ds = vec![Desc::default(); n];
                    let got = a.recv_batch(&mut ds);
                    for d in &ds[..got] {
                        // Reading is what an app does; the bytes are whatever they are.
                        let _ = a.data(*d).iter().fold(0u8, |x, b| x ^ b);
                    }
                    if op % 12 == 4 {
                        a.release(&ds[..got]);
                    } else {
                        kept.extend_from_slice(&ds[..got]);
                    }
                }
            }
            6 => {
                let k = n.min(kept.len());
                let twice = i.u8() & 1 == 1;
                if let Some(a) = app.as_mut() {
                    let some: Vec<Desc> = kept.drain(..k).collect();
                    a.release(&some);
                    if twice {
                        a.release(&some);
                    }
                }
            }
            7 => {
                let mut b = PacketBatch::new();
                let got = rx.recv(&mut cache, &mut b, n);
                assert_eq!(got, b.len(), "recv appended {} but said {got}", b.len());
                received += got as u64;
                held.extend(b.drain());
            }
            8 | 9 => {
                let mut b = PacketBatch::new();
                if op % 12 == 8 {
                    for p in held.drain(..n.min(held.len())) {
                        assert!(b.push(p).is_ok(), "batch has room");
                    }
                } else {
                    for _ in 0..n % 8 + 1 {
                        let len = i.u16() as usize % 5000;
                        let Some(mut p) = cache.alloc_any(len) else {
                            break;
                        };
                        let fill = i.u8();
                        p.data_mut().fill(fill);
                        if let Err(p) = b.push(p) {
                            cache.free(p);
                        }
                    }
                }
                let offered = b.len();
                let s = tx.send(&mut cache, &mut b);
                assert_eq!(s + b.len(), offered, "send lost packets");
                sent += s as u64;
                // What did not fit is dropped, as PortOut does.
                cache.free_bulk(&mut b);
            }
            10 => {
                for p in held.drain(..n.min(held.len())) {
                    cache.free(p);
                }
            }
            _ => {
                if op & 0x80 != 0 {
                    // Detach (the pipeline may hold the app's frames) and attach again.
                    if app.take().is_some() {
                        kept.clear();
                        wait_link(&h, false);
                    }
                    app = Some(attach(&h, &path));
                } else if let Some(a) = app.as_mut() {
                    let mut ds = vec![Desc::default(); n % 8 + 1];
                    let got = a.alloc_tx(&mut ds);
                    for d in &mut ds[..got] {
                        let shift = i.u16() as u32;
                        d.offset = d.offset.wrapping_add(shift) & !(layout::TX_ALIGN - 1);
                        d.len = u32::from(i.u16()) % (layout::FRAME_SIZE + 64);
                    }
                    let q = a.send_batch(&ds[..got]);
                    a.free_tx(&ds[q..got]);
                }
            }
        }
    }
    let c = slice_counters(handle.port()).expect("slice counters");
    assert_eq!(c.from_app_packets, received, "from_app_packets");
    assert_eq!(c.to_app_packets, sent, "to_app_packets");
    let _ = handle.port().desc();
    let _ = handle.port().driver_drops();
    for p in held {
        cache.free(p);
    }
    drop(app);
    drop(rx);
    drop(tx);
    cache.flush_all();
    drop(cache);
    drop(handle);
    h.graph.ports().destroy("s0").expect("destroy s0");
}

//! slice-app: an external application on a slice, used by the tests and as an example.
//!
//! ```text
//! slice-app roundtrip PATH N SIZE   send N frames, expect them back with MACs swapped
//! slice-app garbage PATH            write invalid descriptors and indices, then round-trip 8
//! slice-app hang PATH               attach and never consume
//! slice-app hold PATH K             round-trip K frames but keep (never release) them
//! slice-app echo PATH               return every frame received, until the daemon leaves
//! slice-app random PATH SEED        write random words into every ring and index (2000 rounds)
//! slice-app zerocopy PATH N SIZE    as roundtrip, writing in place, and count the frames that
//!                                   come back in the very frame they were sent in
//! slice-app copies PATH N           receive N frames, check each is in a copy frame
//! slice-app send PATH N             send frames 0..N once, print "sent N", then hold on
//! slice-app zcgarbage PATH          misuse a frame received without a copy, then round-trip 8
//! ```
//! Prints "ok ..." and exits 0 on success; prints the problem and exits 1 otherwise.

use std::io::Write;
use std::time::{Duration, Instant};

use bessemer_slice::layout::{desc, RingId};
use bessemer_slice::{Desc, Slice};

fn die(msg: String) -> ! {
    eprintln!("slice-app: {msg}");
    std::process::exit(1)
}

fn frame(i: usize, size: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&(i as u32).to_be_bytes());
    f
}

fn swapped(f: &[u8]) -> Vec<u8> {
    let mut s = f.to_vec();
    s[..6].copy_from_slice(&f[6..12]);
    s[6..12].copy_from_slice(&f[..6]);
    s
}

/// Sends frames `first..first+n` and checks each comes back swapped, within 20 s. Keeps the
/// received frames (without releasing them) if `keep`.
fn roundtrip(s: &mut Slice, first: usize, n: usize, size: usize, keep: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut next_send = first;
    let mut next_recv = first;
    let mut got = [Desc::default(); 32];
    while next_recv < first + n {
        if Instant::now() > deadline {
            die(format!(
                "timed out: sent {}, received {}",
                next_send - first,
                next_recv - first
            ));
        }
        if next_send < first + n {
            let k = (first + n - next_send).min(32);
            let frames: Vec<Vec<u8>> = (next_send..next_send + k).map(|i| frame(i, size)).collect();
            let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            next_send += s.send_copy(&refs);
        }
        let _ = s.wait(Duration::from_micros(50), Some(Duration::from_millis(10)));
        let r = s.recv_batch(&mut got);
        for d in &got[..r] {
            let want = swapped(&frame(next_recv, size));
            if s.data(*d) != want.as_slice() {
                die(format!("frame {next_recv} came back wrong"));
            }
            next_recv += 1;
        }
        if !keep {
            s.release(&got[..r]);
        }
    }
}

/// Sends frames `first..first+n` written in place and checks each comes back swapped,
/// within 20 s; returns how many came back at the very offset they were sent from.
fn roundtrip_in_place(s: &mut Slice, first: usize, n: usize, size: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut next_send, mut next_recv, mut same) = (first, first, 0);
    let mut sent_at = std::collections::VecDeque::new();
    let mut d = [Desc::default(); 32];
    while next_recv < first + n {
        if Instant::now() > deadline {
            die(format!(
                "timed out: sent {}, received {}",
                next_send - first,
                next_recv - first
            ));
        }
        if next_send < first + n {
            let want = (first + n - next_send).min(32);
            let k = s.alloc_tx(&mut d[..want]);
            for (j, x) in d[..k].iter_mut().enumerate() {
                let f = frame(next_send + j, size);
                s.frame_mut(*x)[..size].copy_from_slice(&f);
                x.len = size as u32;
            }
            let q = s.send_batch(&d[..k]);
            s.free_tx(&d[q..k]);
            sent_at.extend(d[..q].iter().map(|x| x.offset));
            next_send += q;
        }
        let _ = s.wait(Duration::from_micros(50), Some(Duration::from_millis(10)));
        let r = s.recv_batch(&mut d);
        for x in &d[..r] {
            if s.data(*x) != swapped(&frame(next_recv, size)).as_slice() {
                die(format!("frame {next_recv} came back wrong"));
            }
            if sent_at.pop_front() == Some(x.offset) {
                same += 1;
            }
            next_recv += 1;
        }
        s.release(&d[..r]);
    }
    same
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        die("usage: slice-app roundtrip|garbage|hang|hold|echo PATH [N [SIZE]]".into());
    }
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let mut s = Slice::attach(&args[2]).unwrap_or_else(|e| die(format!("attach: {e}")));
    let out = std::io::stdout();
    match args[1].as_str() {
        "roundtrip" => {
            let (n, size) = (num(3, 1000), num(4, 60));
            roundtrip(&mut s, 0, n, size, false);
            let c = s.counters();
            println!("ok rx={} tx={}", c.rx_packets, c.tx_packets);
        }
        "garbage" => {
            let fs = s.frame_size() as u32;
            let f = s.ring_size() as u32;
            // Returned receive frames: outside the area, unaligned, the other half, not held.
            s.push_raw(
                RingId::RxFree,
                &[
                    desc(0xffff_f000, 0),
                    desc(1, 0),
                    desc(f * fs, 0),
                    desc(5 * fs, 0),
                ],
            );
            let mut t = [Desc::default(); 3];
            if s.alloc_tx(&mut t) != 3 {
                die("no send frames".into());
            }
            let (a, b, c) = (t[0].offset, t[1].offset, t[2].offset);
            s.frame_mut(t[2])[..60].copy_from_slice(&frame(0, 60));
            s.push_raw(
                RingId::Tx,
                &[
                    desc(0xffff_f000, 60), // outside the area
                    desc(f * fs + 1, 60),  // not on a frame boundary
                    desc(0, 60),           // a daemon→app frame
                    desc(a, 0),            // empty
                    desc(b, 5000),         // longer than a frame
                    desc(c, 60),           // valid
                    desc(c, 60),           // the same frame again
                ],
            );
            // Wait for the valid one to come back, then break the send ring's index.
            let mut got = [Desc::default(); 32];
            let t0 = Instant::now();
            let mut n = 0;
            while n == 0 {
                if t0.elapsed() > Duration::from_secs(20) {
                    die("the valid frame did not come back".into());
                }
                let _ = s.wait(Duration::ZERO, Some(Duration::from_millis(10)));
                n = s.recv_batch(&mut got);
            }
            s.release(&got[..n]);
            s.scribble_index(RingId::Tx, 0x8000_0000);
            std::thread::sleep(Duration::from_millis(300));
            // The next send publishes the real index again: traffic resumes.
            roundtrip(&mut s, 1, 8, 60, false);
            println!("ok");
        }
        "hang" => {
            println!("attached");
            let _ = out.lock().flush();
            std::thread::sleep(Duration::from_secs(60));
        }
        "hold" => {
            let k = num(3, 10);
            roundtrip(&mut s, 0, k, 60, true);
            println!("held {k}");
            let _ = out.lock().flush();
            std::thread::sleep(Duration::from_secs(60));
        }
        "echo" => {
            let mut got = [Desc::default(); 32];
            loop {
                match s.wait(Duration::from_micros(100), Some(Duration::from_millis(100))) {
                    Err(_) => break,
                    Ok(false) => continue,
                    Ok(true) => {}
                }
                let n = s.recv_batch(&mut got);
                let frames: Vec<Vec<u8>> = got[..n].iter().map(|d| s.data(*d).to_vec()).collect();
                s.release(&got[..n]);
                let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
                s.send_copy(&refs);
            }
            println!("ok");
        }
        "random" => {
            // xorshift64: reproducible garbage from the seed, no dependency.
            let mut x: u64 = num(3, 1) as u64 | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut got = [Desc::default(); 32];
            for round in 0..2000 {
                let words: Vec<u64> = (0..8).map(|_| next()).collect();
                let ring = if round % 2 == 0 {
                    RingId::Tx
                } else {
                    RingId::RxFree
                };
                s.push_raw(ring, &words);
                if round % 7 == 0 {
                    let r = match next() % 4 {
                        0 => RingId::Rx,
                        1 => RingId::RxFree,
                        2 => RingId::Tx,
                        _ => RingId::TxFree,
                    };
                    s.scribble_index(r, next() as u32);
                }
                let n = s.recv_batch(&mut got);
                s.release(&got[..n]);
                if round % 100 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            println!("ok");
        }
        "zerocopy" => {
            let (n, size) = (num(3, 1000), num(4, 60));
            let same = roundtrip_in_place(&mut s, 0, n, size);
            let c = s.counters();
            println!(
                "ok rx={} tx={} same_frame={same}",
                c.rx_packets, c.tx_packets
            );
        }
        "copies" => {
            let n = num(3, 100);
            let copy_half = (s.ring_size() * s.frame_size()) as u32;
            let deadline = Instant::now() + Duration::from_secs(20);
            let (mut got, mut in_copy_frames) = (0, 0);
            let mut d = [Desc::default(); 32];
            while got < n {
                if Instant::now() > deadline {
                    die(format!("timed out after {got} frames"));
                }
                let _ = s.wait(Duration::from_micros(50), Some(Duration::from_millis(10)));
                let r = s.recv_batch(&mut d);
                in_copy_frames += d[..r].iter().filter(|x| x.offset < copy_half).count();
                got += r;
                s.release(&d[..r]);
            }
            println!("ok rx={got} copy_frames={in_copy_frames}");
        }
        "send" => {
            let n = num(3, 10);
            let mut d = vec![Desc::default(); n];
            if s.alloc_tx(&mut d) != n {
                die("not enough send frames".into());
            }
            for (i, x) in d.iter_mut().enumerate() {
                s.frame_mut(*x)[..60].copy_from_slice(&frame(i, 60));
                x.len = 60;
            }
            if s.send_batch(&d) != n {
                die("send ring full".into());
            }
            println!("sent {n}");
            let _ = out.lock().flush();
            std::thread::sleep(Duration::from_secs(60));
        }
        "zcgarbage" => {
            // One frame there and back without a copy.
            let mut d = [Desc::default(); 1];
            if s.alloc_tx(&mut d) != 1 {
                die("no send frame".into());
            }
            s.frame_mut(d[0])[..60].copy_from_slice(&frame(0, 60));
            d[0].len = 60;
            if s.send_batch(&d) != 1 {
                die("send ring full".into());
            }
            let t0 = Instant::now();
            let mut got = [Desc::default(); 1];
            while s.recv_batch(&mut got) == 0 {
                if t0.elapsed() > Duration::from_secs(20) {
                    die("the frame did not come back".into());
                }
                let _ = s.wait(Duration::ZERO, Some(Duration::from_millis(10)));
            }
            let g = got[0];
            // Send it again while holding it as a received frame, release it at the wrong
            // offset, then properly.
            s.push_raw(RingId::Tx, &[desc(g.offset, 60)]);
            s.push_raw(RingId::RxFree, &[desc(g.offset + 64, 0)]);
            std::thread::sleep(Duration::from_millis(200));
            s.release(&got);
            roundtrip(&mut s, 1, 8, 60, false);
            println!("ok");
        }
        m => die(format!("unknown mode '{m}'")),
    }
}

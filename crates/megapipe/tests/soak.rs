//! Many short connections through one channel leave no handle, buffer or descriptor behind.
//! `MEGAPIPE_SOAK_CONNS` sets the count (make test: 5 000; make soak-megapipe: 100 000).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use megapipe::net::{self, ListenOptions};
use megapipe::{Channel, Command, Config};

#[test]
fn short_connections_leak_nothing() {
    let total: usize = std::env::var("MEGAPIPE_SOAK_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let clients = 4;
    let fds_before = net::count_open_fds();
    let mut ch = Channel::new(Config::default()).unwrap();
    let lfd = net::tcp_listener("127.0.0.1:0".parse().unwrap(), ListenOptions::default()).unwrap();
    let addr = net::local_addr(lfd.as_raw_fd()).unwrap();
    let l = ch.register(lfd, 0, 0).unwrap();
    ch.accept(l, 0, true).unwrap();
    let per = total / clients;
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                for i in 0..per {
                    let mut c = TcpStream::connect(addr).unwrap();
                    let msg = (i as u64).to_le_bytes();
                    c.write_all(&msg).unwrap();
                    let mut back = [0u8; 8];
                    c.read_exact(&mut back).unwrap();
                    assert_eq!(back, msg);
                    // RST instead of FIN keeps 100 000 connections clear of TIME_WAIT.
                    net::set_linger_zero(c.as_raw_fd()).unwrap();
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut closed = 0;
    while closed < per * clients {
        assert!(
            Instant::now() < deadline,
            "soak did not finish in 600 s ({closed} closed)"
        );
        let Some(ev) = ch.dispatch(Some(Duration::from_millis(100))).unwrap() else {
            continue;
        };
        match ev.command {
            Command::Accept => ch.read(ev.new_handle.unwrap(), 0).unwrap(),
            Command::Read => match ev.result {
                Ok(n) if n > 0 => {
                    let data = ch.data(&ev).to_vec();
                    ch.write(ev.handle, data).unwrap();
                    ch.read(ev.handle, 0).unwrap();
                }
                _ => ch.close(ev.handle).unwrap(),
            },
            Command::Write => {}
            Command::Close => closed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    ch.dispatch(Some(Duration::ZERO)).unwrap();
    let s = ch.stats();
    assert_eq!(s.accepted as usize, per * clients);
    assert_eq!(s.handles_open, 1, "only the listener is left: {s:?}");
    assert_eq!(s.lightweight_open, 0);
    assert_eq!(
        s.ops_in_flight, 1,
        "only the multishot accept is left: {s:?}"
    );
    assert_eq!(s.buffers_out, 0);
    assert!(
        s.syscalls < s.sqes,
        "batching: fewer syscalls than requests ({s:?})"
    );
    ch.close(l).unwrap();
    while ch
        .dispatch(Some(Duration::from_millis(100)))
        .unwrap()
        .map(|e| e.command)
        != Some(Command::Close)
    {}
    assert_eq!(ch.stats().handles_open, 0);
    drop(ch);
    assert_eq!(net::count_open_fds(), fds_before, "descriptors leaked");
    println!("soak: {} connections, {:?}", per * clients, s);
}

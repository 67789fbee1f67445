//! Every channel call and event kind on loopback, with real TCP peers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use megapipe::net::{self, ListenOptions};
use megapipe::{Channel, Command, Config, Error, Event, Handle};

fn listener() -> (OwnedFd, SocketAddr) {
    let fd = net::tcp_listener("127.0.0.1:0".parse().unwrap(), ListenOptions::default()).unwrap();
    let addr = net::local_addr(fd.as_raw_fd()).unwrap();
    (fd, addr)
}

/// The next event, failing the test if none comes within 10 s.
fn next(ch: &mut Channel) -> Event {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(ev) = ch.dispatch(Some(Duration::from_millis(100))).unwrap() {
            return ev;
        }
        assert!(Instant::now() < deadline, "no event within 10 s");
    }
}

fn next_for(ch: &mut Channel, h: Handle) -> Event {
    loop {
        let ev = next(ch);
        if ev.handle == h {
            return ev;
        }
    }
}

fn accept_one(
    ch: &mut Channel,
    l: Handle,
    lightweight: bool,
    addr: SocketAddr,
) -> (Handle, TcpStream) {
    ch.accept(l, 1, lightweight).unwrap();
    let client = TcpStream::connect(addr).unwrap();
    let ev = next(ch);
    assert_eq!(ev.command, Command::Accept);
    assert_eq!(ev.handle, l);
    assert_eq!(ev.cookie, 7);
    (
        ev.new_handle
            .unwrap_or_else(|| panic!("accept gives a handle: {ev:?}")),
        client,
    )
}

fn round_trip(lightweight: bool) {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, lightweight, addr);
    assert_eq!(ch.is_lightweight(h).unwrap(), lightweight);
    assert_eq!(ch.stats().lightweight_open, lightweight as u64);
    ch.set_cookie(h, 99).unwrap();

    ch.read(h, 0).unwrap();
    client.write_all(b"hello").unwrap();
    let ev = next(&mut ch);
    assert_eq!(
        (ev.command, ev.cookie, ev.result),
        (Command::Read, 99, Ok(5))
    );
    assert_eq!(ch.data(&ev), b"hello");

    ch.write(h, b"world").unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Write, Ok(5)));
    let mut buf = [0u8; 5];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"world");

    ch.writev(h, vec![Box::new(b"ab".to_vec()), Box::new(&b"cd"[..])])
        .unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Writev, Ok(4)));
    let mut buf = [0u8; 4];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"abcd");

    ch.disconnect(h).unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Disconnect, Ok(0)));
    assert_eq!(
        client.read(&mut buf).unwrap(),
        0,
        "peer sees EOF after disconnect"
    );

    // Peer close shows as a 0-byte read.
    drop(client);
    ch.read(h, 0).unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Read, Ok(0)));

    ch.close(h).unwrap();
    let ev = next(&mut ch);
    assert_eq!(
        (ev.command, ev.handle, ev.result),
        (Command::Close, h, Ok(0))
    );
    assert!(
        matches!(ch.read(h, 0), Err(Error::BadHandle(_))),
        "closed handle is bad"
    );

    ch.close(l).unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.handle), (Command::Close, l));
    ch.dispatch(Some(Duration::ZERO)).unwrap();
    let s = ch.stats();
    assert_eq!(
        (
            s.handles_open,
            s.lightweight_open,
            s.ops_in_flight,
            s.buffers_out
        ),
        (0, 0, 0, 0)
    );
    assert!(s.syscalls > 0 && s.sqes >= 8 && s.accepted == 1);
}

#[test]
fn regular_handle_round_trip() {
    round_trip(false);
}

#[test]
fn lightweight_handle_round_trip() {
    round_trip(true);
}

#[test]
fn accept_count_accepts_exactly_that_many_and_multishot_keeps_going() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    ch.accept(l, 2, true).unwrap();
    let clients: Vec<_> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for _ in 0..2 {
        assert_eq!(next(&mut ch).command, Command::Accept);
    }
    ch.flush().unwrap();
    assert_eq!(ch.stats().ops_in_flight, 0, "no accept left after count");
    assert_eq!(ch.stats().accepted, 2);
    // A multishot accept picks up the queued third connection and later ones.
    ch.accept(l, 0, false).unwrap();
    let more: Vec<_> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for _ in 0..5 {
        assert_eq!(next(&mut ch).command, Command::Accept);
    }
    assert_eq!(ch.stats().accepted, 7);
    assert_eq!(
        ch.stats().ops_in_flight,
        1,
        "the multishot accept stays armed"
    );
    drop((clients, more));
}

#[test]
fn errors_bad_handle_closing_handle_buffer_too_small_wrong_kind() {
    let mut ch = Channel::new(Config {
        buffer_size: 1024,
        ..Config::default()
    })
    .unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    assert!(matches!(
        ch.read(Handle(0xdead_0000_0042), 0),
        Err(Error::BadHandle(_))
    ));
    assert!(matches!(ch.read(l, 0), Err(Error::WrongKind(_))));
    assert!(matches!(ch.write(l, vec![1u8]), Err(Error::WrongKind(_))));
    let (h, _client) = accept_one(&mut ch, l, true, addr);
    assert!(matches!(ch.accept(h, 1, true), Err(Error::WrongKind(_))));
    match ch.read(h, 4096) {
        Err(
            e @ Error::BufferTooSmall {
                asked: 4096,
                buffer_size: 1024,
            },
        ) => {
            assert!(e
                .to_string()
                .contains("exceeds the receive buffer size 1024"));
            assert_eq!(e.errno(), libc::EMSGSIZE);
        }
        other => panic!("expected BufferTooSmall, got {other:?}"),
    }
    ch.close(h).unwrap();
    assert!(
        matches!(ch.write(h, vec![1u8]), Err(Error::Closing(_))),
        "closing handle refuses requests"
    );
    assert_eq!(next(&mut ch).command, Command::Close);
    assert!(matches!(ch.write(h, vec![1u8]), Err(Error::BadHandle(_))));
    assert!(matches!(ch.close(h), Err(Error::BadHandle(_))));
    assert_eq!(Error::BadHandle(h).errno(), libc::EBADF);
    // A cpu_mask without this channel's core is refused.
    let (lfd2, _) = listener();
    let cpu = ch.cpu();
    let other_mask = !(1u64 << cpu);
    assert!(matches!(
        ch.register(lfd2, 1, other_mask),
        Err(Error::CpuMask { .. })
    ));
}

#[test]
fn short_reads_return_what_is_there_in_order() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, true, addr);
    client.write_all(b"0123456789").unwrap();
    for _ in 0..3 {
        ch.read(h, 4).unwrap();
    }
    let mut got = Vec::new();
    let mut sizes = Vec::new();
    while got.len() < 10 {
        let ev = next_for(&mut ch, h);
        assert_eq!(ev.command, Command::Read);
        sizes.push(ev.result.unwrap());
        got.extend_from_slice(ch.data(&ev));
    }
    assert_eq!(
        got, b"0123456789",
        "reads on one handle complete in issue order"
    );
    assert!(
        sizes.iter().all(|&n| n <= 4),
        "no read returns more than asked: {sizes:?}"
    );
}

#[test]
fn writes_complete_whole_even_when_larger_than_the_socket_buffer() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, false, addr);
    let len = 16 << 20;
    let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let expect = payload.clone();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; len];
        client.read_exact(&mut got).unwrap();
        got == expect
    });
    ch.write(h, payload).unwrap();
    ch.write(h, b"tail").unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Write, Ok(len)));
    let ev = next(&mut ch);
    assert_eq!(
        (ev.command, ev.result),
        (Command::Write, Ok(4)),
        "writes complete in order"
    );
    assert!(reader.join().unwrap(), "peer got every byte in order");
}

#[test]
fn peer_reset_mid_transfer_fails_the_write_and_the_read() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, true, addr);
    let len = 32 << 20;
    ch.write(h, vec![0x55u8; len]).unwrap();
    ch.flush().unwrap();
    // The peer takes a little, then resets.
    let mut some = [0u8; 4096];
    client.read_exact(&mut some).unwrap();
    net::set_linger_zero(client.as_raw_fd()).unwrap();
    drop(client);
    let ev = next(&mut ch);
    assert_eq!(ev.command, Command::Write);
    match ev.result {
        Ok(n) => assert!(
            n < len,
            "a reset write reports the bytes sent before it: {n}"
        ),
        Err(e) => assert!([libc::ECONNRESET, libc::EPIPE].contains(&e.0), "{e:?}"),
    }
    ch.read(h, 0).unwrap();
    let ev = next(&mut ch);
    assert_eq!(ev.command, Command::Read);
    assert!(
        matches!(ev.result, Ok(0) | Err(_)),
        "read after reset: {:?}",
        ev.result
    );
    ch.close(h).unwrap();
    assert_eq!(next(&mut ch).command, Command::Close);
}

#[test]
fn unregister_cancels_pending_requests_and_returns_the_fd() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, false, addr);
    ch.read(h, 0).unwrap();
    ch.read(h, 0).unwrap();
    ch.flush().unwrap();
    assert!(ch.stats().ops_in_flight >= 1);
    let fd = ch
        .unregister(h)
        .unwrap()
        .expect("regular handle gives its fd back");
    let s = ch.stats();
    assert_eq!(s.ops_in_flight, 0, "pending read was cancelled");
    assert!(s.cancelled >= 1);
    assert!(
        ch.dispatch(Some(Duration::ZERO)).unwrap().is_none(),
        "no event after unregister"
    );
    assert!(matches!(ch.read(h, 0), Err(Error::BadHandle(_))));
    // The descriptor still works with ordinary calls.
    let mut s = TcpStream::from(fd);
    s.write_all(b"still mine").unwrap();
    let mut buf = [0u8; 10];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"still mine");

    // A lightweight handle is closed by unregister: the peer sees EOF.
    let (h2, mut client2) = accept_one(&mut ch, l, true, addr);
    ch.read(h2, 0).unwrap();
    assert!(ch.unregister(h2).unwrap().is_none());
    assert_eq!(client2.read(&mut buf).unwrap(), 0);
    // The listener gives back its original descriptor, still listening.
    let lfd = ch.unregister(l).unwrap().unwrap();
    assert!(net::is_listening(lfd.as_raw_fd()));
    assert_eq!(ch.stats().handles_open, 0);
}

#[test]
fn lightweight_handle_falls_back_to_a_regular_fd() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, true, addr);
    assert_eq!(ch.raw_fd(h).unwrap(), None);
    let fd = ch.to_regular_fd(h).unwrap();
    assert!(!ch.is_lightweight(h).unwrap());
    assert_eq!(
        net::local_addr(fd).unwrap(),
        addr,
        "ordinary syscalls work on it"
    );
    assert_eq!(ch.stats().lightweight_open, 0);
    ch.write(h, b"via fd").unwrap();
    assert_eq!(next(&mut ch).result, Ok(6));
    let mut buf = [0u8; 6];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"via fd");
    // Busy handles refuse conversion.
    let (h2, _c2) = accept_one(&mut ch, l, true, addr);
    ch.read(h2, 0).unwrap();
    assert!(matches!(ch.to_regular_fd(h2), Err(Error::Busy(_))));
}

#[test]
fn connect_then_write() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let mut ch = Channel::new(Config::default()).unwrap();
    let h = ch.connect(addr, 5).unwrap();
    let ev = next(&mut ch);
    assert_eq!(
        (ev.command, ev.handle, ev.cookie, ev.result),
        (Command::Connect, h, 5, Ok(0))
    );
    ch.write(h, b"ping").unwrap();
    assert_eq!(next(&mut ch).result, Ok(4));
    let (mut s, _) = server.accept().unwrap();
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    // A refused connect reports ECONNREFUSED.
    drop(server);
    let h = ch.connect(addr, 6).unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.handle), (Command::Connect, h));
    assert_eq!(ev.result.unwrap_err().0, libc::ECONNREFUSED);
}

#[test]
fn batching_flushes_at_threshold_on_flush_and_when_dispatch_runs_dry() {
    let mut ch = Channel::new(Config {
        batch_threshold: 4,
        ..Config::default()
    })
    .unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    ch.accept(l, 5, true).unwrap();
    let mut clients: Vec<_> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let hs: Vec<Handle> = (0..5).map(|_| next(&mut ch).new_handle.unwrap()).collect();
    let base = ch.stats();
    for h in &hs[..3] {
        ch.read(*h, 0).unwrap();
    }
    assert_eq!(
        ch.stats().syscalls,
        base.syscalls,
        "below the threshold nothing is submitted"
    );
    ch.read(hs[3], 0).unwrap();
    let s = ch.stats();
    assert_eq!(
        (s.syscalls, s.sqes),
        (base.syscalls + 1, base.sqes + 4),
        "one syscall for 4 requests"
    );
    ch.read(hs[4], 0).unwrap();
    ch.flush().unwrap();
    assert_eq!(
        ch.stats().syscalls,
        base.syscalls + 2,
        "mp_flush submits at once"
    );
    ch.flush().unwrap();
    assert_eq!(
        ch.stats().syscalls,
        base.syscalls + 2,
        "an empty flush makes no syscall"
    );
    for c in clients.iter_mut() {
        c.write_all(b"x").unwrap();
    }
    for _ in 0..5 {
        assert_eq!(next(&mut ch).command, Command::Read);
    }
    // A write queued while no completion is left goes out with the dispatch that waits.
    let before = ch.stats().syscalls;
    ch.write(hs[0], b"y").unwrap();
    assert_eq!(next(&mut ch).command, Command::Write);
    assert!(ch.stats().syscalls - before <= 2);
    let mut b = [0u8; 1];
    clients[0].read_exact(&mut b).unwrap();
}

/// Connections whose SYN is processed on core i land on the channel of core i.
#[test]
fn partitioned_listener_keeps_connections_on_the_owning_core() {
    let cpus = net::online_cpus().min(2);
    let (lfd, addr) = listener();
    let per_cpu = 20;
    let (done_tx, done_rx) = mpsc::channel::<(usize, Vec<(u16, i32)>)>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut servers = Vec::new();
    for cpu in 0..cpus {
        let fd = lfd.try_clone().unwrap();
        let done_tx = done_tx.clone();
        let ready_tx = ready_tx.clone();
        servers.push(std::thread::spawn(move || {
            let mut ch = Channel::new(Config {
                cpu: Some(cpu),
                ..Config::default()
            })
            .unwrap();
            let l = ch.register(fd, 1, 1 << cpu).unwrap();
            ch.accept(l, 0, false).unwrap();
            ch.flush().unwrap();
            ready_tx.send(()).unwrap();
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen.len() < per_cpu && Instant::now() < deadline {
                if let Some(ev) = ch.dispatch(Some(Duration::from_millis(50))).unwrap() {
                    if ev.command == Command::Accept {
                        let h = ev.new_handle.unwrap();
                        let fd = ch.raw_fd(h).unwrap().unwrap();
                        // SAFETY: borrowed only for the getpeername/getsockopt below.
                        let s = unsafe { TcpStream::from_raw_fd(fd) };
                        let port = s.peer_addr().unwrap().port();
                        std::mem::forget(s);
                        let incoming =
                            net::get_int_opt(fd, libc::SOL_SOCKET, libc::SO_INCOMING_CPU).unwrap();
                        seen.push((port, incoming));
                    }
                }
            }
            done_tx.send((cpu, seen)).unwrap();
        }));
    }
    for _ in 0..cpus {
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let mut clients = Vec::new();
    let mut port_cpu = std::collections::HashMap::new();
    for cpu in 0..cpus {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            net::pin_to_cpu(cpu).unwrap();
            let conns: Vec<_> = (0..per_cpu)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            tx.send(conns).unwrap();
        });
        for c in rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            port_cpu.insert(c.local_addr().unwrap().port(), cpu);
            clients.push(c);
        }
    }
    drop(done_tx);
    let mut total = 0;
    for (cpu, seen) in done_rx.iter() {
        assert_eq!(
            seen.len(),
            per_cpu,
            "core {cpu} accepted its {per_cpu} connections"
        );
        for (port, incoming) in seen {
            assert_eq!(
                port_cpu[&port], cpu,
                "connection from core {} landed on core {cpu}",
                port_cpu[&port]
            );
            assert_eq!(
                incoming, cpu as i32,
                "SO_INCOMING_CPU of an accepted socket"
            );
            total += 1;
        }
    }
    assert_eq!(total, per_cpu * cpus);
    for s in servers {
        s.join().unwrap();
    }
}

#[test]
fn run_loop_echoes_until_break() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    ch.accept(l, 0, true).unwrap();
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"echo me").unwrap();
        let mut buf = [0u8; 7];
        c.read_exact(&mut buf).unwrap();
        buf
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    ch.run(Duration::from_millis(50), |ch, ev| {
        let Some(ev) = ev else {
            return if Instant::now() > deadline {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            };
        };
        match ev.command {
            Command::Accept => ch.read(ev.new_handle.unwrap(), 0).unwrap(),
            Command::Read => {
                let data = ch.data(&ev).to_vec();
                ch.write(ev.handle, data).unwrap();
            }
            Command::Write => return std::ops::ControlFlow::Break(()),
            _ => {}
        }
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(&client.join().unwrap(), b"echo me");
}

#[test]
fn an_empty_buffer_ring_fails_reads_with_enobufs_until_buffers_return() {
    let mut ch = Channel::new(Config {
        buffers: 2,
        ..Config::default()
    })
    .unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    ch.accept(l, 4, true).unwrap();
    let mut clients: Vec<_> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let hs: Vec<Handle> = (0..4).map(|_| next(&mut ch).new_handle.unwrap()).collect();
    for c in clients.iter_mut() {
        c.write_all(b"data").unwrap();
    }
    for h in &hs {
        ch.read(*h, 0).unwrap();
    }
    let mut ok = 0;
    let mut nobufs = Vec::new();
    for _ in 0..4 {
        let ev = next(&mut ch);
        match ev.result {
            Ok(4) => ok += 1,
            Err(e) if e.0 == libc::ENOBUFS => nobufs.push(ev.handle),
            other => panic!("unexpected read result {other:?}"),
        }
    }
    assert_eq!((ok, nobufs.len()), (2, 2), "two buffers, four reads");
    assert_eq!(ch.stats().reads_without_buffer, 2);
    // Dispatching gave the buffers back: the retried reads succeed.
    for h in &nobufs {
        ch.read(*h, 0).unwrap();
    }
    for _ in 0..2 {
        let ev = next(&mut ch);
        assert_eq!(ev.result, Ok(4));
        assert_eq!(ch.data(&ev), b"data");
    }
}

#[test]
fn multishot_read_delivers_every_arrival_until_stopped_or_eof() {
    let mut ch = Channel::new(Config::default()).unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let (h, mut client) = accept_one(&mut ch, l, true, addr);
    ch.read_multishot(h).unwrap();
    ch.read_multishot(h).unwrap();
    assert!(
        matches!(ch.read(h, 0), Ok(())),
        "a one-shot read queues behind it"
    );
    let mut got = Vec::new();
    for chunk in [&b"one"[..], b"two", b"three"] {
        client.write_all(chunk).unwrap();
        let ev = next(&mut ch);
        assert_eq!(ev.command, Command::Read);
        got.extend_from_slice(ch.data(&ev));
        assert!(got.ends_with(chunk));
    }
    assert_eq!(got, b"onetwothree", "one request, three arrivals");
    ch.stop_reading(h).unwrap();
    let ev = next(&mut ch);
    assert_eq!(
        ev.result.unwrap_err().0,
        libc::ECANCELED,
        "stop ends it with ECANCELED"
    );
    // The queued one-shot read now runs.
    client.write_all(b"four").unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.result, ch.data(&ev)), (Ok(4), &b"four"[..]));
    // Re-armed, it ends at EOF with a 0-byte event.
    ch.read_multishot(h).unwrap();
    drop(client);
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Read, Ok(0)));
    ch.dispatch(Some(Duration::ZERO)).unwrap();
    let s = ch.stats();
    assert_eq!(
        (s.ops_in_flight, s.buffers_out),
        (0, 0),
        "nothing left in flight"
    );
}

/// Clients whose connection the server side has closed (EOF or reset seen without blocking).
fn closed_clients(clients: &[TcpStream]) -> usize {
    let mut buf = [0u8; 1];
    clients
        .iter()
        .filter(|c| {
            c.set_nonblocking(true).unwrap();
            let closed = match (&**c).read(&mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            };
            c.set_nonblocking(false).unwrap();
            closed
        })
        .count()
}

/// Echoes one message through `h` (read, then write back).
fn echo_through(ch: &mut Channel, h: Handle, client: &mut TcpStream) {
    ch.read(h, 0).unwrap();
    client.write_all(b"ping").unwrap();
    let ev = next_for(ch, h);
    assert_eq!((ev.command, ev.result), (Command::Read, Ok(4)));
    let data = ch.data(&ev).to_vec();
    ch.write(h, data).unwrap();
    assert_eq!(next_for(ch, h).result, Ok(4));
    let mut buf = [0u8; 4];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
}

/// A keep-accepting listener whose direct-descriptor table fills goes on accepting into
/// regular descriptors, and back into lightweight ones once the table has drained.
#[test]
fn a_full_direct_descriptor_table_falls_back_to_regular_descriptors_and_back() {
    let slots = 8;
    let mut ch = Channel::new(Config {
        direct_slots: slots,
        ..Config::default()
    })
    .unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    ch.accept(l, 0, true).unwrap();
    let n = 20;
    let mut clients: Vec<_> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut handles = Vec::new();
    let mut errors = Vec::new();
    while handles.len() + errors.len() < n {
        let ev = next(&mut ch);
        assert_eq!((ev.command, ev.handle), (Command::Accept, l), "{ev:?}");
        match ev.new_handle {
            Some(h) => handles.push(h),
            None => errors.push(ev.result.unwrap_err().0),
        }
    }
    assert_eq!(errors, [libc::ENFILE], "one accept finds the table full");
    let lightweight: Vec<bool> = handles
        .iter()
        .map(|&h| ch.is_lightweight(h).unwrap())
        .collect();
    let full = slots as usize;
    assert!(
        lightweight[..full].iter().all(|&lw| lw) && lightweight[full..].iter().all(|&lw| !lw),
        "{slots} lightweight, then regular: {lightweight:?}"
    );
    // The kernel closed the connection it was accepting when the table was full.
    let deadline = Instant::now() + Duration::from_secs(5);
    while closed_clients(&clients) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(closed_clients(&clients), 1, "exactly one connection lost");
    let lost = clients
        .iter()
        .position(|c| closed_clients(std::slice::from_ref(c)) == 1)
        .unwrap();
    clients.remove(lost);
    // Both kinds serve; clients are in accept order.
    echo_through(&mut ch, handles[0], &mut clients[0]);
    echo_through(&mut ch, handles[n - 2], &mut clients[n - 2]);

    // Drained to three quarters (here: empty), the listener goes back to lightweight
    // handles; the switch itself makes no event.
    for &h in &handles[..full] {
        ch.close(h).unwrap();
    }
    let mut closed = 0;
    while closed < full {
        let ev = next(&mut ch);
        assert_eq!(ev.command, Command::Close, "{ev:?}");
        closed += 1;
    }
    assert!(ch
        .dispatch(Some(Duration::from_millis(100)))
        .unwrap()
        .is_none());
    let mut c = TcpStream::connect(addr).unwrap();
    let ev = next(&mut ch);
    assert_eq!((ev.command, ev.result), (Command::Accept, Ok(0)), "{ev:?}");
    let h = ev.new_handle.unwrap();
    assert!(ch.is_lightweight(h).unwrap(), "lightweight again");
    echo_through(&mut ch, h, &mut c);
}

/// More requests than the submission ring holds, queued before any is submitted, all run.
#[test]
fn requests_beyond_the_submission_ring_all_complete() {
    let mut ch = Channel::new(Config {
        ring_entries: 4,
        batch_threshold: 1000,
        ..Config::default()
    })
    .unwrap();
    let (lfd, addr) = listener();
    let l = ch.register(lfd, 7, 0).unwrap();
    let n = 24;
    ch.accept(l, n as u32, true).unwrap();
    let mut clients: Vec<_> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let hs: Vec<Handle> = (0..n).map(|_| next(&mut ch).new_handle.unwrap()).collect();
    for &h in &hs {
        ch.read(h, 0).unwrap();
        ch.write(h, b"hi").unwrap();
    }
    for c in clients.iter_mut() {
        c.write_all(b"x").unwrap();
    }
    let (mut reads, mut writes) = (0, 0);
    while reads + writes < 2 * n {
        match next(&mut ch).command {
            Command::Read => reads += 1,
            Command::Write => writes += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    for c in clients.iter_mut() {
        let mut buf = [0u8; 2];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
    }
    assert_eq!(ch.stats().ops_in_flight, 0);
}

//! The guarded accept loop (`bessemer_daemon::listen`): a connection beyond the cap is told
//! why it is closed, silent and idle peers are closed. Each test makes its own listener on
//! loopback. (Descriptor exhaustion: `listen_nofile.rs`.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bessemer_daemon::listen::{Accept, Label, Limits, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;

fn limits(max: usize, first_ms: u64, idle_ms: u64) -> Limits {
    Limits {
        max,
        first: Duration::from_millis(first_ms),
        idle: Duration::from_millis(idle_ms),
    }
}

async fn listener() -> (tokio::net::TcpListener, std::net::SocketAddr) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

#[tokio::test(flavor = "current_thread")]
async fn connections_beyond_the_cap_are_marked_then_told_why_and_closed() {
    let (l, addr) = listener().await;
    let mut incoming = std::pin::pin!(Accept::Tcp(l).incoming(
        Label("control port"),
        limits(4, 5000, 5000),
        Refusal::Grpc
    ));
    let mut clients: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut taken = Vec::new();
    for _ in 0..4 {
        let c = incoming.next().await.unwrap().unwrap();
        assert!(!c.over_cap());
        taken.push(c);
    }
    // A quarter more are handed on marked: the service answers their calls with the reason.
    clients.push(TcpStream::connect(addr).unwrap());
    let marked = incoming.next().await.unwrap().unwrap();
    assert!(marked.over_cap());
    // Beyond those: an HTTP/2 preface and a GOAWAY naming the cause, then a close.
    let mut c6 = TcpStream::connect(addr).unwrap();
    let more = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
    assert!(more.is_err(), "the sixth connection is not handed on");
    c6.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = c6.read_to_end(&mut got);
    // An HTTP/2 SETTINGS frame, then GOAWAY (type 7) with ENHANCE_YOUR_CALM and the reason.
    assert_eq!(&got[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    assert_eq!(got[9 + 3], 7, "a GOAWAY frame");
    assert_eq!(&got[9 + 9 + 4..9 + 9 + 8], &[0, 0, 0, 0x0b]);
    let why = String::from_utf8_lossy(&got[9 + 9 + 8..]);
    assert!(
        why.contains("too many connections to the control port (4 open)"),
        "{why}"
    );
    // A slot freed: the next connection is handed on, unmarked.
    taken.pop();
    clients.remove(0);
    let _c7 = TcpStream::connect(addr).unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await;
    assert!(matches!(next, Ok(Some(Ok(ref c))) if !c.over_cap()));
}

#[tokio::test(flavor = "current_thread")]
async fn http1_listeners_refuse_with_a_503() {
    let (l, addr) = listener().await;
    let mut incoming = std::pin::pin!(Accept::Tcp(l).incoming(
        Label("HTTP endpoints"),
        limits(1, 5000, 5000),
        Refusal::Http1
    ));
    let _c1 = TcpStream::connect(addr).unwrap();
    let _a1 = incoming.next().await.unwrap().unwrap();
    let mut c2 = TcpStream::connect(addr).unwrap();
    let _ = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
    c2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = String::new();
    let _ = c2.read_to_string(&mut got);
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(
        got.contains("too many connections to the HTTP endpoints"),
        "{got}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_silent_peer_and_an_idle_one_are_closed() {
    let (l, addr) = listener().await;
    let mut incoming =
        std::pin::pin!(Accept::Tcp(l).incoming(Label("test"), limits(10, 200, 400), Refusal::Grpc));
    // Connects and says nothing: the first read fails after the first-bytes limit.
    let _silent = TcpStream::connect(addr).unwrap();
    let mut a = incoming.next().await.unwrap().unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), a.read(&mut buf)).await;
    let e = r.expect("closed within the limit").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionAborted);
    assert!(t.elapsed() >= Duration::from_millis(200));
    // Trickles bytes without ever answering the server: closed at the handshake limit too.
    let mut trickler = TcpStream::connect(addr).unwrap();
    let mut c = incoming.next().await.unwrap().unwrap();
    let t = Instant::now();
    let e = loop {
        trickler.write_all(b"x").unwrap();
        match tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await {
            Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Ok(Err(e)) => break e,
            Err(_) => panic!("not closed"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a trickle keeps it open"
        );
    };
    assert!(e.to_string().contains("not established"), "{e}");
    // Established (the server wrote, the peer answered), then quiet: reads succeed, then fail
    // after the idle limit.
    let mut talker = TcpStream::connect(addr).unwrap();
    let mut b = incoming.next().await.unwrap().unwrap();
    b.write_all(b"hi").await.unwrap();
    talker.write_all(b"hello").unwrap();
    let n = b.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"hello");
    tokio::time::sleep(Duration::from_millis(300)).await;
    talker.write_all(b"again").unwrap();
    let n = b.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"again", "past the handshake limit: established");
    let e = tokio::time::timeout(Duration::from_secs(5), b.read(&mut buf))
        .await
        .expect("closed within the limit")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionAborted);
    assert!(e.to_string().contains("idle"), "{e}");
}

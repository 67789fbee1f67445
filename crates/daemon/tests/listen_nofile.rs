//! The guarded accept loop (`bessemer_daemon::listen`) when the process runs out of
//! descriptors: accept() fails with EMFILE, the loop pauses and retries, and never ends. The
//! test lowers this process's own RLIMIT_NOFILE, so it is alone in its binary.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bessemer_daemon::listen::{Accept, Label, Limits, Refusal, ACCEPT_ERRORS};
use tokio_stream::StreamExt;

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn set_nofile(soft: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to locals.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = soft.min(r.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn running_out_of_descriptors_pauses_accepting_and_never_ends_it() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let mut incoming = std::pin::pin!(Accept::Tcp(l).incoming(
        Label("test"),
        Limits {
            max: 1000,
            first: Duration::from_secs(5),
            idle: Duration::from_secs(5),
        },
        Refusal::Grpc
    ));
    // Clients made now, while descriptors are free; the kernel queues their connections.
    let clients: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let errors_before = ACCEPT_ERRORS.load(Ordering::Relaxed);
    // No descriptor left for accept(): a low limit, and every descriptor below it taken.
    let saved = open_fds() + 64;
    set_nofile(open_fds() + 16);
    let mut fillers = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        fillers.push(f);
        assert!(fillers.len() < 100, "the limit did not take");
    }
    let r = tokio::time::timeout(Duration::from_millis(500), incoming.next()).await;
    assert!(r.is_err(), "nothing can be accepted without a descriptor");
    assert!(
        ACCEPT_ERRORS.load(Ordering::Relaxed) > errors_before,
        "the EMFILE was counted"
    );
    // Descriptors come back: the queued connections are accepted; the stream did not end.
    drop(fillers);
    set_nofile(saved.max(1024));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < clients.len() && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), incoming.next()).await {
            Ok(Some(Ok(c))) => got.push(c),
            Ok(other) => panic!("the accept stream ended or failed: {:?}", other.is_some()),
            Err(_) => {}
        }
    }
    assert_eq!(got.len(), clients.len(), "every queued connection accepted");
}

//! UnixSocketPort: a client socket made by the test exchanges frames with PortInc/PortOut.
//! No root needed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bessemer_core::testing::Harness;

mod common;
use bessemer_core::Value;
use bessemer_drivers::unix_socket_port::DRIVER;
use bessemer_modules::io::{port_inc, port_out};
use common::{create_port, frames, link_up, wait_until};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh socket path in the temp directory.
fn temp_path() -> String {
    let p = std::env::temp_dir().join(format!(
        "bessemer-unix-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    p.to_string_lossy().into_owned()
}

fn abstract_name() -> String {
    format!(
        "@bessemer-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A SOCK_SEQPACKET client, as a local process would use the port.
struct Client(OwnedFd);

impl Client {
    fn connect(path: &str) -> std::io::Result<Client> {
        // SAFETY: plain syscalls; the address is built within sun_path's bounds.
        unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let fd = OwnedFd::from_raw_fd(fd);
            let tv = libc::timeval {
                tv_sec: 5,
                tv_usec: 0,
            };
            for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    &tv as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                );
            }
            let mut a: libc::sockaddr_un = std::mem::zeroed();
            a.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, s) in a.sun_path.iter_mut().zip(path.bytes()) {
                *d = s as libc::c_char;
            }
            let mut len = 2 + path.len();
            if path.starts_with('@') {
                a.sun_path[0] = 0;
            } else {
                len += 1;
            }
            if libc::connect(
                fd.as_raw_fd(),
                &a as *const _ as *const libc::sockaddr,
                len as libc::socklen_t,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Client(fd))
        }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: a valid buffer.
        let r = unsafe {
            libc::send(
                self.0.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        assert_eq!(
            r,
            frame.len() as isize,
            "{}",
            std::io::Error::last_os_error()
        );
    }

    /// One message (blocking up to the 5 s receive timeout).
    fn recv(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 65536];
        // SAFETY: a valid buffer.
        let r = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        assert!(r >= 0, "recv: {}", std::io::Error::last_os_error());
        buf.truncate(r as usize);
        buf
    }
}

/// Polls PortInc until `n` packets were captured (or 5 s pass).
fn receive(h: &mut Harness, cap: &bessemer_core::testing::CaptureHandle, n: usize) {
    let t = Instant::now();
    while cap.len() < n && t.elapsed() < Duration::from_secs(5) {
        h.run_task("inc", 0);
    }
}

#[test]
fn client_frames_reach_port_inc_byte_for_byte() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    assert!(!link_up(&h, "p0"), "link up without a client");
    // Nothing to receive while nobody is connected.
    assert_eq!(h.run_task("inc", 0).packets, 0);

    let c = Client::connect(&path).unwrap();
    wait_until("the client to be accepted", || link_up(&h, "p0"));
    let sent = frames(&[60, 1514, 2880, 64]);
    for f in &sent {
        c.send(f);
    }
    receive(&mut h, &cap, sent.len());
    assert_eq!(cap.take_data(), sent);
    let (inc, _) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!(inc.packets, 4);
    assert_eq!(inc.bytes, (60 + 1514 + 2880 + 64) as u64);
    assert_eq!(inc.dropped, 0);
}

#[test]
fn port_out_frames_reach_client_byte_for_byte() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    let c = Client::connect(&path).unwrap();
    wait_until("the client to be accepted", || link_up(&h, "p0"));
    let sent = frames(&[60, 128, 1514, 42]);
    h.inject("out", 0, &sent);
    for f in &sent {
        assert_eq!(&c.recv(), f);
    }
    let (_, out) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!(out.packets, 4);
    assert_eq!(out.bytes, (60 + 128 + 1514 + 42) as u64);
    assert_eq!(out.dropped, 0);
    assert_eq!(h.drops("out", "tx_failed"), 0);
}

#[test]
fn abstract_name_with_confirm_connect() {
    let mut h = Harness::new();
    let name = abstract_name();
    create(
        &h,
        "p0",
        &Value::map()
            .with("path", name.as_str())
            .with("confirm_connect", true)
            .with("min_rx_interval_ns", -1),
    )
    .unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&name).unwrap();
    // BESS's confirmation: the client's first message, once the port took the connection.
    assert_eq!(c.recv(), b"yes\0");
    wait_until("link up", || link_up(&h, "p0"));
    let f = frames(&[100]);
    c.send(&f[0]);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.take_data(), f);
    h.inject("out", 0, &f);
    assert_eq!(c.recv(), f[0]);
    let desc = h.graph.ports().get("p0").unwrap().port().desc();
    assert!(
        desc.contains("abstract") && desc.contains("client connected"),
        "{desc}"
    );
}

#[test]
fn disconnect_takes_link_down_and_a_new_client_can_connect() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);

    let c = Client::connect(&path).unwrap();
    wait_until("the first client", || link_up(&h, "p0"));
    let f = frames(&[60, 61]);
    c.send(&f[0]);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.take_data(), vec![f[0].clone()]);
    drop(c);
    wait_until("link down after the client left", || !link_up(&h, "p0"));

    // While nobody is connected, sends fail and are counted.
    h.inject("out", 0, &f);
    assert_eq!(h.drops("out", "tx_failed"), 2);

    let c2 = Client::connect(&path).unwrap();
    wait_until("the second client", || link_up(&h, "p0"));
    c2.send(&f[1]);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.take_data(), vec![f[1].clone()]);
    h.inject("out", 0, &f[..1]);
    assert_eq!(c2.recv(), f[0]);
    let (inc, out) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!((inc.packets, out.packets, out.dropped), (2, 1, 2));
    assert!(h
        .graph
        .ports()
        .get("p0")
        .unwrap()
        .port()
        .desc()
        .contains("2 connect(s)"));
}

#[test]
fn frames_sent_just_before_the_client_leaves_are_still_received() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&path).unwrap();
    wait_until("the client", || link_up(&h, "p0"));
    let sent = frames(&[60, 70, 80]);
    for f in &sent {
        c.send(f);
    }
    drop(c);
    receive(&mut h, &cap, 3);
    assert_eq!(cap.take_data(), sent);
    wait_until("link down", || !link_up(&h, "p0"));
}

#[test]
fn without_a_client_port_out_drops_count_as_tx_failed() {
    let mut h = Harness::new();
    create(&h, "p0", &Value::map().with("path", temp_path().as_str())).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    h.inject("out", 0, &frames(&[60, 60, 60, 60]));
    assert_eq!(h.drops("out", "tx_failed"), 4);
    let (_, out) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!((out.packets, out.bytes, out.dropped), (0, 0, 4));
}

#[test]
fn oversize_messages_are_dropped_and_counted() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&path).unwrap();
    wait_until("the client", || link_up(&h, "p0"));
    let f = frames(&[4000, 60]);
    c.send(&f[0]);
    c.send(&f[1]);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.take_data(), vec![f[1].clone()]);
    let (inc, _) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!((inc.packets, inc.dropped), (1, 1));
}

#[test]
fn empty_messages_are_dropped_and_counted() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&path).unwrap();
    wait_until("the client", || link_up(&h, "p0"));
    let f = frames(&[60, 70, 80]);
    c.send(&f[0]);
    c.send(&[]);
    c.send(&[]);
    c.send(&f[1]);
    c.send(&[]);
    c.send(&f[2]);
    receive(&mut h, &cap, 3);
    assert_eq!(cap.take_data(), f);
    let port = h.graph.ports().get("p0").unwrap();
    let (inc, _) = port.counts();
    assert_eq!(
        (inc.packets, inc.dropped),
        (3, 3),
        "the three empty messages"
    );
    let desc = port.port().desc();
    assert!(desc.contains("3 empty message(s) dropped"), "{desc}");
    // The client leaving is no empty message.
    drop(c);
    wait_until("link down", || {
        h.run_task("inc", 0);
        !link_up(&h, "p0")
    });
    assert_eq!(port.counts().0.dropped, 3);
}

#[test]
fn a_run_of_empty_messages_does_not_hold_back_the_frame_behind_it() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&path).unwrap();
    wait_until("the client", || link_up(&h, "p0"));
    let empties = 100;
    for _ in 0..empties {
        c.send(&[]);
    }
    let f = frames(&[60]);
    c.send(&f[0]);
    // Each poll reads up to a burst of messages; one that read only empty messages must not
    // make the next poll wait out the idle interval.
    let polls = empties / bessemer_core::MAX_BURST + 2;
    for _ in 0..polls {
        h.run_task("inc", 0);
    }
    assert_eq!(cap.take_data(), f, "after {polls} polls");
    let (inc, _) = h.graph.ports().get("p0").unwrap().counts();
    assert_eq!((inc.packets, inc.dropped), (1, empties as u64));
}

#[test]
fn bad_paths_are_refused_with_clear_errors() {
    let h = Harness::new();
    let long = format!("/tmp/{}", "x".repeat(120));
    let e = create(&h, "a", &Value::map().with("path", long.as_str()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::ENAMETOOLONG);
    assert!(
        e.msg.contains("path") && e.msg.contains("at most 107"),
        "{}",
        e.msg
    );

    let e = create(&h, "b", &Value::map().with("path", "/nonexistent-dir/sock"))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::ENOENT);
    assert!(e.msg.contains("/nonexistent-dir/sock"), "{}", e.msg);

    // A path another port (or process) listens on.
    let path = temp_path();
    create(&h, "c", &Value::map().with("path", path.as_str())).unwrap();
    let e = create(&h, "d", &Value::map().with("path", path.as_str()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::EADDRINUSE);
    assert!(e.msg.contains(&path), "{}", e.msg);
    let name = abstract_name();
    create(&h, "e", &Value::map().with("path", name.as_str())).unwrap();
    let e = create(&h, "f", &Value::map().with("path", name.as_str()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::EADDRINUSE);
    assert!(e.msg.contains(&name), "{}", e.msg);

    // An ordinary file is never replaced.
    let file = temp_path();
    std::fs::write(&file, b"keep me").unwrap();
    let e = create(&h, "g", &Value::map().with("path", file.as_str()))
        .err()
        .unwrap();
    assert_eq!(e.code, libc::EEXIST);
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    std::fs::remove_file(&file).unwrap();

    let e = create(&h, "h", &Value::map().with("bogus", 1))
        .err()
        .unwrap();
    assert!(e.msg.contains("bogus"), "{}", e.msg);
}

#[test]
fn socket_file_is_removed_with_the_port_and_stale_files_are_replaced() {
    let h = Harness::new();
    let path = temp_path();
    // A stale socket file (its listener is gone) does not block the port.
    {
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(l);
    }
    assert!(std::path::Path::new(&path).exists());
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    assert!(Client::connect(&path).is_ok());
    h.graph.ports().destroy("p0").unwrap();
    assert!(
        !std::path::Path::new(&path).exists(),
        "socket file left behind"
    );
}

#[test]
fn a_second_client_waits_until_the_first_leaves() {
    let mut h = Harness::new();
    let path = temp_path();
    create(&h, "p0", &Value::map().with("path", path.as_str())).unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let first = Client::connect(&path).unwrap();
    wait_until("the first client", || link_up(&h, "p0"));
    // Queued in the listen backlog: its frame is read only once it is served.
    let second = Client::connect(&path).unwrap();
    let f = frames(&[60, 70]);
    second.send(&f[1]);
    h.inject("out", 0, &f[..1]);
    assert_eq!(first.recv(), f[0]);
    for _ in 0..100 {
        h.run_task("inc", 0);
    }
    assert!(cap.is_empty(), "the waiting client's frame was read");
    drop(first);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.take_data(), vec![f[1].clone()]);
    h.inject("out", 0, &f[..1]);
    assert_eq!(second.recv(), f[0]);
}

#[test]
fn idle_polling_is_throttled_by_min_rx_interval() {
    let mut h = Harness::new();
    let path = temp_path();
    create(
        &h,
        "p0",
        &Value::map()
            .with("path", path.as_str())
            .with("min_rx_interval_ns", 1_000_000_000),
    )
    .unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "p0"))
        .unwrap();
    let cap = h.capture("inc", 0);
    let c = Client::connect(&path).unwrap();
    wait_until("the client", || link_up(&h, "p0"));
    // An empty poll starts the idle interval: the frame sent next waits for it to pass.
    let t = Instant::now();
    assert_eq!(h.run_task("inc", 0).packets, 0);
    c.send(&frames(&[60])[0]);
    assert_eq!(h.run_task("inc", 0).packets, 0);
    receive(&mut h, &cap, 1);
    assert_eq!(cap.len(), 1);
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn default_path_is_bess_style_and_removed_with_the_port() {
    let h = Harness::new();
    let name = format!(
        "dflt{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let p = create(&h, &name, &Value::Null).unwrap();
    let path = format!("/tmp/bess_unix_{name}");
    assert!(p.port().desc().starts_with(&path), "{}", p.port().desc());
    assert!(Client::connect(&path).is_ok());
    drop(p);
    h.graph.ports().destroy(&name).unwrap();
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn an_idle_worker_naps_and_still_echoes_every_frame() {
    use bessemer_core::mem::PagePolicy;
    use bessemer_core::{Engine, EngineConfig};
    let mut e = Engine::new(EngineConfig {
        buffers: 1024,
        pages: PagePolicy::Plain,
        pin: false,
    })
    .unwrap();
    assert!(e.set_idle_sleep_max_us(20_000).is_err(), "beyond 10 ms");
    e.set_idle_sleep_max_us(500).unwrap();
    let path = temp_path();
    let params = bessemer_core::port::PortParams {
        name: "p0".into(),
        num_inc_q: 0,
        num_out_q: 0,
        size_inc_q: 0,
        size_out_q: 0,
        pool: e.pool().clone(),
    };
    e.ports()
        .create(&DRIVER, params, &Value::map().with("path", path.as_str()))
        .unwrap();
    e.add_worker(0, 0).unwrap();
    let class = |n: &str| bessemer_modules::find(n).unwrap();
    let port = Value::map().with("port", "p0");
    e.create_module(class("PortInc"), Some("inc"), &port)
        .unwrap();
    e.create_module(class("PortOut"), Some("out"), &port)
        .unwrap();
    e.connect("inc", 0, "out", 0).unwrap();
    e.attach_task("inc", 0, None, Some(0)).unwrap();
    e.resume_all().unwrap();
    let c = Client::connect(&path).unwrap();
    let naps = |e: &Engine| e.list_workers()[0].naps;
    for (i, frame) in frames(&[60, 200, 1514]).iter().enumerate() {
        // Idle for more than the 1 ms threshold: the worker naps before each frame.
        let before = naps(&e);
        wait_until("the idle worker to nap", || naps(&e) > before + 2);
        c.send(frame);
        assert_eq!(&c.recv(), frame, "frame {i} echoed after a nap");
    }
    // Back to polling only: no more naps once the setting is 0.
    e.set_idle_sleep_max_us(0).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let settled = naps(&e);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(naps(&e), settled, "naps with the setting at 0");
    drop(c);
    e.destroy_module("inc").unwrap();
    e.destroy_module("out").unwrap();
    e.ports().destroy("p0").unwrap();
    assert_eq!(e.pool().free_count(), e.pool().capacity());
}

fn create(
    h: &Harness,
    name: &str,
    arg: &Value,
) -> bessemer_core::Result<std::sync::Arc<bessemer_core::port::PortHandle>> {
    create_port(h, &DRIVER, name, arg)
}

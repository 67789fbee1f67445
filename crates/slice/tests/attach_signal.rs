//! An application attaching to a slice port whose daemon has not answered yet waits the whole
//! timeout even when a signal interrupts the wait (poll returns EINTR): before, the first
//! signal ended the wait and attach reported "another app is attached". Alone in its binary:
//! it installs a signal handler for the process.

use std::time::{Duration, Instant};

use bessemer_slice::Slice;

extern "C" fn ignore(_: libc::c_int) {}

/// A SOCK_SEQPACKET listener on an abstract unix name (what a slice port listens on), which
/// never accepts.
fn listen_abstract(name: &str) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a fresh descriptor and a zeroed, filled-in address.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut a: libc::sockaddr_un = std::mem::zeroed();
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in a.sun_path[1..].iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&a as *const libc::sockaddr_un).cast(), len),
            0
        );
        assert_eq!(libc::listen(fd, 4), 0);
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }
}

#[test]
fn a_signal_during_attach_does_not_cut_the_wait_short() {
    // A listener that accepts nothing and says nothing: no hello ever comes.
    let name = format!("bessemer-attach-signal-{}", std::process::id());
    let _listener = listen_abstract(&name);
    let path = format!("@{name}");
    // SAFETY: a no-op handler without SA_RESTART, so the signal interrupts poll().
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    // SAFETY: this thread's id, to signal it from another thread.
    let me = unsafe { libc::pthread_self() };
    let kicker = std::thread::spawn(move || {
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(150));
            // SAFETY: the test thread is alive until the join below.
            unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
        }
    });
    let t = Instant::now();
    let timeout = Duration::from_millis(1200);
    let e = match Slice::attach_timeout(&path, timeout) {
        Err(e) => e,
        Ok(_) => panic!("attached to a port that never answered"),
    };
    let took = t.elapsed();
    kicker.join().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(took >= timeout, "gave up after {took:?} of {timeout:?}");
}

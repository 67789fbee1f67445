//! SIGINT and SIGTERM for the planner's tools that change the system (namespaces, veths,
//! XDP and TCX programs, ethtool rules). The handler only records the signal; the tool's
//! main path sees it at its next check ([`check`], [`sleep`]), returns an error the normal
//! way, so its cleanup (drops, undo steps) runs as after any other error, and then ends as
//! killed by that signal ([`exit_if_signalled`]). A second signal ends the process at
//! once, for a cleanup that hangs.
//!
//! Nothing is recorded until [`install`] is called, so library users (the daemon) are not
//! affected.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The first SIGINT or SIGTERM received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Records SIGINT and SIGTERM from now on, instead of dying at once.
pub fn install() -> Result<(), String> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the action only does async-signal-safe things: an atomic swap and _exit.
        unsafe {
            signal_hook_registry::register(sig, move || {
                if RECEIVED.swap(sig, Ordering::SeqCst) != 0 {
                    libc::_exit(128 + sig);
                }
            })
        }
        .map_err(|e| format!("cannot handle {}: {e}", name(sig)))?;
    }
    Ok(())
}

/// The signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// "SIGINT", "SIGTERM".
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// The error a tool returns when it stops for a signal.
pub fn message(sig: i32) -> String {
    format!("interrupted by {}", name(sig))
}

/// `Err("interrupted by SIGTERM")` once a signal was received.
pub fn check() -> Result<(), String> {
    match received() {
        Some(s) => Err(message(s)),
        None => Ok(()),
    }
}

/// Sleeps for `d`, in slices of at most 50 ms so that a signal ends the wait early (with
/// [`check`]'s error).
pub fn sleep(d: Duration) -> Result<(), String> {
    let end = Instant::now() + d;
    loop {
        check()?;
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Once the tool has cleaned up: if a signal was received, ends the process as killed by
/// it (the default action, so a calling shell sees the signal, not an exit status).
pub fn exit_if_signalled() {
    let Some(sig) = received() else {
        return;
    };
    // SAFETY: restoring the default action and raising the signal have no preconditions.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    // Only reached if the signal is blocked.
    std::process::exit(128 + sig);
}

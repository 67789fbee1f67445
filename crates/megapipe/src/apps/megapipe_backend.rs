//! A server thread on one MegaPipe channel.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::{Flow, ServerStats, Service, MAX_PENDING_OUT};
use crate::{Channel, Command, Config};

/// Which MegaPipe techniques the thread uses.
pub struct Options {
    /// Register the listener with this thread's cpu_mask.
    pub partitioned: bool,
    /// Batching threshold.
    pub batch: usize,
    /// Accept into lightweight handles.
    pub lightweight: bool,
    /// Also accept on the original listener (cores without a channel).
    pub serve_orig: bool,
    /// Receive with one multishot read per connection instead of a read per request.
    pub multishot: bool,
}

struct Conn<C> {
    handle: crate::Handle,
    state: C,
    input: Vec<u8>,
    writes: VecDeque<usize>,
    pending_out: usize,
    reading: bool,
    closing: bool,
}

const LISTENER: u64 = u64::MAX;

/// Reports failed accepts on stderr, each errno at most once per `EVERY` in a row: a listener at the descriptor
/// limit fails once per `ACCEPT_RETRY_PAUSE`, and the channel keeps accepting by itself.
struct AcceptErrorLog {
    cpu: usize,
    last: Option<Instant>,
    /// The errno reported last.
    last_errno: Option<i32>,
    /// Failures since the last report.
    failed: u64,
    /// `Stats::direct_table_full` at the last report.
    table_full_seen: u64,
}

impl AcceptErrorLog {
    const EVERY: Duration = Duration::from_secs(1);

    fn failed(&mut self, errno: crate::Errno, stats: &crate::Stats) {
        self.failed += 1;
        // A new kind of failure is reported at once, a repeated one once per EVERY.
        if self.last_errno == Some(errno.0) && self.last.is_some_and(|t| t.elapsed() < Self::EVERY)
        {
            return;
        }
        self.last_errno = Some(errno.0);
        let what = if errno.0 == libc::ENFILE && stats.direct_table_full > self.table_full_seen {
            format!(
                "the direct-descriptor table is full ({} lightweight handles open): that \
                 connection was closed; new ones get regular descriptors until it drains",
                stats.lightweight_open
            )
        } else {
            format!(
                "{errno}; accepting again in {:?}",
                crate::channel::ACCEPT_RETRY_PAUSE
            )
        };
        eprintln!(
            "megapipe server (cpu {}): accept failed: {what} ({} failed accepts since the last report)",
            self.cpu, self.failed
        );
        self.last = Some(Instant::now());
        self.failed = 0;
        self.table_full_seen = stats.direct_table_full;
    }
}

/// Runs until `stop` is set.
pub fn run<S: Service>(
    service: &S,
    listener: OwnedFd,
    cpu: usize,
    opts: Options,
    stop: &AtomicBool,
    stats: &ServerStats,
    ready: Sender<std::io::Result<()>>,
) -> crate::Result<()> {
    let setup = || -> crate::Result<Channel> {
        let mut ch = Channel::new(Config {
            cpu: Some(cpu),
            batch_threshold: opts.batch,
            ..Config::default()
        })?;
        if opts.partitioned {
            let orig = if opts.serve_orig {
                Some(listener.try_clone()?)
            } else {
                None
            };
            let l = ch.register(listener.try_clone()?, LISTENER, 1u64 << cpu)?;
            ch.accept(l, 0, opts.lightweight)?;
            if let Some(orig) = orig {
                let l = ch.register(orig, LISTENER, 0)?;
                ch.accept(l, 0, opts.lightweight)?;
            }
        } else {
            let l = ch.register(listener.try_clone()?, LISTENER, 0)?;
            ch.accept(l, 0, opts.lightweight)?;
        }
        ch.flush()?;
        Ok(ch)
    };
    let mut ch = match setup() {
        Ok(ch) => {
            let _ = ready.send(Ok(()));
            ch
        }
        Err(e) => {
            let _ = ready.send(Err(std::io::Error::other(e.to_string())));
            return Err(e);
        }
    };
    drop(listener);
    let mut conns: Vec<Option<Conn<S::Conn>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    let mut last_syscalls = 0;
    let mut accept_log = AcceptErrorLog {
        cpu,
        last: None,
        last_errno: None,
        failed: 0,
        table_full_seen: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        let s = ch.stats().syscalls;
        stats
            .syscalls
            .fetch_add(s - last_syscalls, Ordering::Relaxed);
        last_syscalls = s;
        let Some(ev) = ch.dispatch(Some(Duration::from_millis(100)))? else {
            continue;
        };
        match ev.command {
            Command::Accept => {
                let Some(h) = ev.new_handle else {
                    if let Err(errno) = ev.result {
                        if errno.0 != libc::ECANCELED {
                            accept_log.failed(errno, &ch.stats());
                        }
                    }
                    continue;
                };
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let idx = free.pop().unwrap_or_else(|| {
                    conns.push(None);
                    conns.len() - 1
                });
                conns[idx] = Some(Conn {
                    handle: h,
                    state: S::Conn::default(),
                    input: Vec::new(),
                    writes: VecDeque::new(),
                    pending_out: 0,
                    reading: true,
                    closing: false,
                });
                ch.set_cookie(h, idx as u64)?;
                start_read(&mut ch, h, opts.multishot)?;
            }
            Command::Read => {
                let idx = ev.cookie as usize;
                let Some(c) = conns.get_mut(idx).and_then(|c| c.as_mut()) else {
                    continue;
                };
                // A multishot read keeps going after data; its last event is EOF or an error.
                let data = matches!(ev.result, Ok(n) if n > 0);
                if !(opts.multishot && data) {
                    c.reading = false;
                }
                if c.closing {
                    continue;
                }
                match ev.result {
                    Ok(n) if n > 0 => {
                        c.input.extend_from_slice(ch.data(&ev));
                        let flow = service.process(&mut c.state, &mut c.input, &mut out);
                        if !out.is_empty() {
                            let len: usize = out.iter().map(|b| b.as_ref().len()).sum();
                            c.writes.push_back(len);
                            c.pending_out += len;
                            if out.len() == 1 {
                                ch.write(c.handle, out.pop().unwrap())?;
                            } else {
                                let bufs = out
                                    .drain(..)
                                    .map(|b| Box::new(b) as Box<dyn AsRef<[u8]>>)
                                    .collect();
                                ch.writev(c.handle, bufs)?;
                            }
                        }
                        if flow == Flow::Close {
                            stats.service_closes.fetch_add(1, Ordering::Relaxed);
                            c.closing = true;
                            ch.close(c.handle)?;
                        } else if c.pending_out >= MAX_PENDING_OUT {
                            if opts.multishot {
                                ch.stop_reading(c.handle)?;
                            }
                        } else if !opts.multishot {
                            c.reading = true;
                            ch.read(c.handle, 0)?;
                        }
                    }
                    // A multishot read stopped for back-pressure: resumed when writes drain.
                    Err(crate::Errno(libc::ECANCELED)) if opts.multishot => {}
                    // The buffer ring ran dry for a moment (buffers come back as events are
                    // handed out): try again rather than drop the connection.
                    Err(crate::Errno(libc::ENOBUFS)) => {
                        c.reading = true;
                        start_read(&mut ch, c.handle, opts.multishot)?;
                    }
                    _ => {
                        c.closing = true;
                        ch.close(c.handle)?;
                    }
                }
            }
            Command::Write | Command::Writev => {
                let idx = ev.cookie as usize;
                let Some(c) = conns.get_mut(idx).and_then(|c| c.as_mut()) else {
                    continue;
                };
                let asked = c.writes.pop_front().unwrap_or(0);
                c.pending_out -= asked.min(c.pending_out);
                if c.closing {
                    continue;
                }
                if ev.result != Ok(asked) {
                    stats.service_closes.fetch_add(1, Ordering::Relaxed);
                    c.closing = true;
                    ch.close(c.handle)?;
                } else if !c.reading && c.pending_out < MAX_PENDING_OUT {
                    c.reading = true;
                    start_read(&mut ch, c.handle, opts.multishot)?;
                }
            }
            Command::Close => {
                if ev.cookie != LISTENER {
                    let idx = ev.cookie as usize;
                    if conns.get(idx).is_some_and(|c| c.is_some()) {
                        conns[idx] = None;
                        free.push(idx);
                    }
                }
            }
            Command::Disconnect | Command::Connect => {}
        }
    }
    Ok(())
}

fn start_read(ch: &mut Channel, h: crate::Handle, multishot: bool) -> crate::Result<()> {
    if multishot {
        ch.read_multishot(h)
    } else {
        ch.read(h, 0)
    }
}

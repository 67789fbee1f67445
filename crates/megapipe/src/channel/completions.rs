//! Reaping completions into events, as [`Channel`] methods.

use super::*;

impl Channel {
    // ---- completions ----

    /// `mp_dispatch`: hands out the next completion event. When none is queued it flushes the
    /// queued requests and fetches completions from the kernel in one batch, waiting up to
    /// `timeout` (`None`: forever; zero: not at all). `Ok(None)` means the timeout passed.
    /// The bytes of a Read event stay readable through [`Channel::data`] until the next call.
    /// Listeners pausing after a failed accept are armed again from here, so a channel must
    /// be dispatched to keep accepting.
    pub fn dispatch(&mut self, timeout: Option<Duration>) -> Result<Option<Event>> {
        if let Some(bid) = self.lent.take() {
            self.bufs.give(bid);
            self.bufs.publish();
            self.stats.buffers_out -= 1;
        }
        self.housekeeping();
        if self.events.is_empty() {
            self.reap();
        }
        if self.events.is_empty() {
            let deadline = timeout.map(|t| Instant::now() + t);
            loop {
                let now = Instant::now();
                let mut wait = deadline.map(|d| d.saturating_duration_since(now));
                // Wake for the first paused listener too.
                if let Some(at) = self.accept_retries.iter().map(|r| r.2).min() {
                    let until = at.saturating_duration_since(now);
                    wait = Some(wait.map_or(until, |w| w.min(until)));
                }
                self.wait(wait)?;
                self.reap();
                self.housekeeping();
                // Completions that make no event (cancellations) do not end the wait early.
                if !self.events.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
        let Some(ev) = self.events.pop_front() else {
            return Ok(None);
        };
        self.lent = ev.buf;
        self.stats.events += 1;
        Ok(Some(ev))
    }

    /// The received bytes of the Read event `ev` handed out by the last `dispatch`.
    pub fn data(&self, ev: &Event) -> &[u8] {
        match (ev.buf, ev.result) {
            (Some(bid), Ok(n)) if self.lent == Some(bid) => self.bufs.data(bid, n),
            _ => &[],
        }
    }

    /// An event loop: calls `f` with each event, and with `None` when `tick` passes without
    /// one (a chance to check for shutdown), until `f` returns `Break`.
    pub fn run(
        &mut self,
        tick: Duration,
        mut f: impl FnMut(&mut Channel, Option<Event>) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        loop {
            let ev = self.dispatch(Some(tick))?;
            if f(self, ev).is_break() {
                return Ok(());
            }
        }
    }

    pub(super) fn wait(&mut self, timeout: Option<Duration>) -> Result<()> {
        if !self.sq_backlog.is_empty() {
            self.submit(0)?;
        }
        self.fill_sq();
        let in_ring = self.unsubmitted.saturating_sub(self.sq_backlog.len());
        self.stats.sqes += in_ring as u64;
        self.unsubmitted -= in_ring;
        self.stats.syscalls += 1;
        let r = match timeout {
            None => self.ring.submitter().submit_and_wait(1),
            Some(d) => {
                let ts = types::Timespec::from(d);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Moves every completion in the kernel's queue into the event queue.
    pub(super) fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cq_buf);
        cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        self.stats.cqes += cqes.len() as u64;
        for &(ud, res, flags) in &cqes {
            if ud != CANCEL_TAG {
                self.complete(ud, res, flags);
            }
        }
        cqes.clear();
        self.cq_buf = cqes;
        self.bufs.publish();
    }

    pub(super) fn complete(&mut self, ud: u64, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let (slot, kind, vectored, written) = {
            let op = self.ops[ud as usize]
                .as_ref()
                .expect("completion for a freed op");
            let written = match op.data.as_ref() {
                Some(WriteData::Raw { ptr, .. }) => *ptr as usize,
                Some(WriteData::RawVectored { iov, .. }) => {
                    iov.first().map_or(0, |v| v.iov_base as usize)
                }
                _ => 0,
            };
            (
                op.slot,
                op.kind,
                op.data.as_ref().is_some_and(|d| d.vectored()),
                written,
            )
        };
        let keep_op = matches!(
            kind,
            OpKind::Accept {
                multishot: true,
                ..
            } | OpKind::ReadMulti
        ) && more;
        if !keep_op {
            self.ops[ud as usize] = None;
            self.free_ops.push(ud as u32);
            self.stats.ops_in_flight -= 1;
            self.handles[slot as usize].in_flight -= 1;
        }
        let result = if res >= 0 {
            Ok(res as usize)
        } else {
            Err(Errno(-res))
        };
        let buf = cqueue::buffer_select(flags);
        if buf.is_some() {
            self.stats.buffers_out += 1;
        }
        if res == -libc::ENOBUFS {
            self.stats.reads_without_buffer += 1;
        }
        let e = &self.handles[slot as usize];
        let handle = Handle::new(slot, e.gen);
        let cookie = e.cookie;
        if e.detached {
            self.stats.cancelled += 1;
            if let Some(bid) = buf {
                self.bufs.give(bid);
                self.stats.buffers_out -= 1;
            }
            if let (OpKind::Accept { lightweight, .. }, Ok(n)) = (kind, result) {
                self.discard_accepted(n, lightweight);
            }
            return;
        }
        let mut ev = Event {
            command: Command::Read,
            handle,
            cookie,
            result,
            new_handle: None,
            buf: None,
            written,
        };
        match kind {
            OpKind::Accept {
                multishot,
                lightweight,
            } => {
                ev.command = Command::Accept;
                let ended = multishot && !more;
                let e = &self.handles[slot as usize];
                let acc = e.accept.as_ref();
                // The end of an accept cancelled to switch descriptor modes is the channel's
                // own business: no event (a close meanwhile gets its ECANCELED as usual).
                let switched = ended
                    && acc.is_some_and(|a| a.switching)
                    && result == Err(Errno(libc::ECANCELED))
                    && !e.closing;
                let wants_lightweight = acc.is_some_and(|a| a.lightweight);
                let mut table_filled = false;
                match result {
                    Ok(n) => {
                        let k = if lightweight {
                            Kind::Direct(n as u32)
                        } else {
                            // SAFETY: the kernel installed this new descriptor for us alone.
                            Kind::Fd(unsafe {
                                <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n as RawFd)
                            })
                        };
                        self.stats.accepted += 1;
                        if multishot && !lightweight && wants_lightweight {
                            self.stats.accepted_regular_fallback += 1;
                        }
                        ev.new_handle = Some(self.alloc_handle(k, 0));
                        ev.result = Ok(0);
                    }
                    Err(Errno(libc::ECANCELED)) => {}
                    Err(Errno(errno)) => {
                        self.stats.accept_errors += 1;
                        if lightweight && errno == libc::ENFILE {
                            self.stats.direct_table_full += 1;
                            table_filled = !self.direct_full;
                            self.direct_full = true;
                        }
                    }
                }
                if !switched {
                    self.events.push_back(ev);
                }
                if ended {
                    self.accept_ended(slot, result);
                }
                if table_filled {
                    // Other listeners of this channel would find the table full as well.
                    self.sync_accept_modes();
                }
            }
            OpKind::ReadMulti => {
                ev.buf = buf;
                self.events.push_back(ev);
                if !more {
                    let e = &mut self.handles[slot as usize];
                    e.read_in_flight = false;
                    e.multishot_read = None;
                    // The kernel may end a multishot receive on its own (e.g. a full completion
                    // queue); only data-carrying ends are re-armed, so EOF and errors stay final.
                    let data = matches!(result, Ok(n) if n > 0);
                    if data && !e.closing && !e.stop_requested {
                        self.arm_multishot_read(slot);
                    } else {
                        if data && e.stop_requested {
                            // It ended on its own before stop_reading's cancel reached it;
                            // the caller still gets the ECANCELED event that ends a stopped
                            // read, as documented, and may wait for it to read again.
                            self.events.push_back(Event {
                                result: Err(Errno(libc::ECANCELED)),
                                buf: None,
                                written: 0,
                                ..ev
                            });
                        }
                        let e = &mut self.handles[slot as usize];
                        if !e.closing {
                            if let Some(size) = e.reads.pop_front() {
                                self.issue_read(slot, size);
                            }
                        }
                    }
                }
            }
            OpKind::Read => {
                ev.buf = buf;
                self.events.push_back(ev);
                let e = &mut self.handles[slot as usize];
                e.read_in_flight = false;
                if !e.closing {
                    if let Some(size) = e.reads.pop_front() {
                        self.issue_read(slot, size);
                    }
                }
            }
            OpKind::Write | OpKind::Disconnect => {
                ev.command = match kind {
                    OpKind::Disconnect => Command::Disconnect,
                    _ if vectored => Command::Writev,
                    _ => Command::Write,
                };
                self.events.push_back(ev);
                self.handles[slot as usize].write_in_flight = false;
                self.pump_writes(slot);
            }
            OpKind::Close => {
                let e = &mut self.handles[slot as usize];
                e.close_result = Some(result);
                match e.kind.take() {
                    // The kernel closed the descriptor already: forget it without closing.
                    Some(Kind::Fd(fd)) => {
                        let _ = fd.into_raw_fd();
                    }
                    Some(Kind::Direct(_)) => self.stats.lightweight_open -= 1,
                    other => drop(other),
                }
                self.stats.handles_open -= 1;
            }
            OpKind::Connect => {
                ev.command = Command::Connect;
                self.events.push_back(ev);
            }
            OpKind::Install => {
                self.install_result = Some(result.map(|n| n as RawFd));
            }
        }
        let e = &self.handles[slot as usize];
        if e.close_submitted && e.in_flight == 0 {
            if let Some(r) = e.close_result {
                self.events.push_back(Event {
                    command: Command::Close,
                    handle,
                    cookie,
                    result: r,
                    new_handle: None,
                    buf: None,
                    written: 0,
                });
                self.free_handle(slot);
            }
        }
    }

    pub(super) fn discard_accepted(&mut self, n: usize, lightweight: bool) {
        if lightweight {
            let _ = self.ring.submitter().register_files_update(n as u32, &[-1]);
        } else {
            // SAFETY: a descriptor the kernel just gave us and nobody else knows.
            unsafe { libc::close(n as RawFd) };
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Target {
    Fd(RawFd),
    Fixed(u32),
}

pub(super) fn send(target: Target, ptr: *const u8, len: usize, flags: i32) -> squeue::Entry {
    match target {
        Target::Fd(fd) => opcode::Send::new(types::Fd(fd), ptr, len as u32),
        Target::Fixed(i) => opcode::Send::new(types::Fixed(i), ptr, len as u32),
    }
    .flags(flags)
    .build()
}

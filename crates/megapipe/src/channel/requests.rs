//! Registering descriptors and the requests on them (accept, read, write, close), as
//! [`Channel`] methods.

use super::*;

impl Channel {
    // ---- registration ----

    /// `mp_register`: adds `fd` to the channel under `cookie`. The channel owns `fd` until
    /// `close` (closed) or `unregister` (handed back). A listening socket with a non-zero
    /// `cpu_mask` (which must include this channel's cpu) becomes a partitioned listener: the
    /// channel opens its own `SO_REUSEPORT` listener on the same address, steered to its cpu with
    /// `SO_INCOMING_CPU`, so connections whose SYN is processed on this core queue here only.
    pub fn register(&mut self, fd: OwnedFd, cookie: u64, cpu_mask: u64) -> Result<Handle> {
        let raw = fd.as_raw_fd();
        if net::is_listening(raw) {
            let clone = if cpu_mask != 0 {
                if self.cpu >= 64 || cpu_mask & (1u64 << self.cpu) == 0 {
                    return Err(Error::CpuMask {
                        cpu: self.cpu,
                        mask: cpu_mask,
                    });
                }
                let addr = net::local_addr(raw)?;
                let opts = net::ListenOptions {
                    reuseport: true,
                    incoming_cpu: Some(self.cpu),
                    ..Default::default()
                };
                Some(net::tcp_listener(addr, opts).map_err(|e| {
                    Error::Io(io::Error::new(
                        e.kind(),
                        format!(
                            "partitioned listener on {addr}: {e} (the registered socket needs SO_REUSEPORT)"
                        ),
                    ))
                })?)
            } else {
                None
            };
            return Ok(self.alloc_handle(Kind::Listener { orig: fd, clone }, cookie));
        }
        Ok(self.alloc_handle(Kind::Fd(fd), cookie))
    }

    /// `mp_unregister`: cancels `h`'s requests in the kernel and waits for them, dropping their
    /// completions (no event for `h` follows). Returns the regular descriptor to the caller; a
    /// lightweight handle is closed and `None` returned.
    pub fn unregister(&mut self, h: Handle) -> Result<Option<OwnedFd>> {
        self.entry(h)?;
        let slot = h.slot();
        {
            let e = &mut self.handles[slot as usize];
            e.detached = true;
            e.reads.clear();
            e.writes.clear();
        }
        // Events already reaped but not handed out are dropped too.
        let mut kept = VecDeque::with_capacity(self.events.len());
        for ev in self.events.drain(..) {
            if ev.handle == h {
                self.stats.cancelled += 1;
                if let Some(bid) = ev.buf {
                    self.bufs.give(bid);
                    self.stats.buffers_out -= 1;
                }
            } else {
                kept.push_back(ev);
            }
        }
        self.events = kept;
        self.bufs.publish();
        if self.handles[slot as usize].in_flight > 0 {
            let target = Self::target(self.handles[slot as usize].kind.as_ref().unwrap());
            self.push_cancel(target);
            while self.handles[slot as usize].in_flight > 0 {
                self.submit(1)?;
                self.reap();
            }
        }
        let kind = self.handles[slot as usize].kind.take();
        if matches!(kind, Some(Kind::Direct(_))) {
            self.stats.lightweight_open -= 1;
        }
        self.stats.handles_open -= 1;
        self.handles[slot as usize].detached = false;
        self.free_handle(slot);
        Ok(match kind {
            Some(Kind::Fd(fd)) => Some(fd),
            Some(Kind::Listener { orig, .. }) => Some(orig),
            Some(Kind::Direct(idx)) => {
                self.ring.submitter().register_files_update(idx, &[-1])?;
                None
            }
            None => None,
        })
    }

    pub(super) fn push_cancel(&mut self, target: Target) {
        let builder = match target {
            Target::Fd(fd) => types::CancelBuilder::fd(types::Fd(fd)),
            Target::Fixed(i) => types::CancelBuilder::fd(types::Fixed(i)),
        }
        .all();
        let sqe = opcode::AsyncCancel2::new(builder)
            .build()
            .user_data(CANCEL_TAG);
        self.push_sqe(sqe);
    }

    /// Cancels the op with index `ud` and submits at once: the cancel names the op by index,
    /// and an index is reused as soon as its op's last completion is reaped, so a cancel
    /// left queued across a reap could hit a later op.
    pub(super) fn cancel_op_now(&mut self, ud: u64) {
        let sqe = opcode::AsyncCancel::new(ud).build().user_data(CANCEL_TAG);
        self.push_sqe(sqe);
        self.flush_now();
    }

    // ---- requests ----

    /// `mp_accept`: accepts connections on listener `h`. `count == 0` keeps accepting until
    /// the handle closes: one multishot request, which the channel arms again whenever it
    /// ends (after [`ACCEPT_RETRY_PAUSE`] if it ended with an error such as `EMFILE`); a
    /// second call only changes `lightweight`. `count > 0` accepts exactly that many (each
    /// failure completes one of them). `lightweight` puts new connections in direct
    /// descriptors; while the direct-descriptor table is full, a keep-accepting listener
    /// accepts into regular descriptors instead.
    pub fn accept(&mut self, h: Handle, count: u32, lightweight: bool) -> Result<()> {
        let e = self.entry_open(h)?;
        let Some(Kind::Listener { orig, clone }) = e.kind.as_ref() else {
            return Err(Error::WrongKind("accept needs a listening handle"));
        };
        let fd = clone.as_ref().unwrap_or(orig).as_raw_fd();
        let slot = h.slot();
        if count == 0 {
            if let Some(acc) = e.accept.as_mut() {
                acc.lightweight = lightweight;
                self.sync_accept_modes();
            } else {
                e.accept = Some(AcceptLoop {
                    lightweight,
                    armed: None,
                    switching: false,
                });
                self.arm_accept(slot);
            }
            return Ok(());
        }
        for _ in 0..count {
            let op = Op {
                slot,
                kind: OpKind::Accept {
                    multishot: false,
                    lightweight,
                },
                data: None,
                addr: None,
            };
            self.submit_op(op, |_| {
                let mut a =
                    opcode::Accept::new(types::Fd(fd), std::ptr::null_mut(), std::ptr::null_mut());
                // Direct descriptors have no fd-table entry, so CLOEXEC is refused for them.
                if lightweight {
                    a = a.file_index(Some(types::DestinationSlot::auto_target()));
                } else {
                    a = a.flags(libc::SOCK_CLOEXEC);
                }
                a.build()
            });
        }
        Ok(())
    }

    /// Whether a keep-accepting listener that asked for `lightweight` handles gets them now.
    pub(super) fn accept_mode(&self, lightweight: bool) -> bool {
        lightweight && !self.direct_full
    }

    /// Arms the keep-accepting listener in `slot` (if it is one, open, and not armed).
    pub(super) fn arm_accept(&mut self, slot: u32) {
        let e = &self.handles[slot as usize];
        let (Some(Kind::Listener { orig, clone }), Some(acc)) =
            (e.kind.as_ref(), e.accept.as_ref())
        else {
            return;
        };
        if acc.armed.is_some() || e.closing || e.detached {
            return;
        }
        let fd = clone.as_ref().unwrap_or(orig).as_raw_fd();
        let lightweight = self.accept_mode(acc.lightweight);
        let op = Op {
            slot,
            kind: OpKind::Accept {
                multishot: true,
                lightweight,
            },
            data: None,
            addr: None,
        };
        let ud = self.submit_op(op, |_| {
            opcode::AcceptMulti::new(types::Fd(fd))
                .allocate_file_index(lightweight)
                .flags(if lightweight { 0 } else { libc::SOCK_CLOEXEC })
                .build()
        });
        if let Some(acc) = self.handles[slot as usize].accept.as_mut() {
            acc.armed = Some((ud, lightweight));
        }
    }

    /// Cancels every armed keep-accepting request whose descriptor mode is no longer the one
    /// wanted; each is armed again in the other mode when its cancellation completes.
    pub(super) fn sync_accept_modes(&mut self) {
        for slot in 0..self.handles.len() {
            let e = &self.handles[slot];
            let Some(acc) = e.accept.as_ref() else {
                continue;
            };
            let Some((ud, lightweight)) = acc.armed else {
                continue;
            };
            if e.closing
                || e.detached
                || acc.switching
                || lightweight == self.accept_mode(acc.lightweight)
            {
                continue;
            }
            self.handles[slot].accept.as_mut().unwrap().switching = true;
            self.cancel_op_now(ud);
        }
    }

    /// A keep-accepting listener's multishot accept ended with `result`: arm it again, at
    /// once or after a pause.
    pub(super) fn accept_ended(&mut self, slot: u32, result: std::result::Result<usize, Errno>) {
        let e = &mut self.handles[slot as usize];
        let gen = e.gen;
        let closing = e.closing || e.detached;
        let Some(acc) = e.accept.as_mut() else {
            return;
        };
        let was_lightweight = acc.armed.take().is_some_and(|(_, lw)| lw);
        let switching = std::mem::take(&mut acc.switching);
        if closing {
            return;
        }
        self.stats.accept_rearms += 1;
        let at_once = match result {
            // The kernel ends a multishot accept when the completion queue is full.
            Ok(_) => true,
            Err(Errno(libc::ECANCELED)) => switching,
            // The direct-descriptor table is full: regular descriptors from now on.
            Err(Errno(libc::ENFILE)) => was_lightweight,
            Err(_) => false,
        };
        if at_once {
            self.arm_accept(slot);
        } else {
            self.accept_retries
                .push((slot, gen, Instant::now() + ACCEPT_RETRY_PAUSE));
        }
    }

    /// Arms listeners whose pause is over, and returns to lightweight accepts once the
    /// direct-descriptor table has drained to three quarters.
    pub(super) fn housekeeping(&mut self) {
        if self.direct_full && self.stats.lightweight_open <= self.direct_slots as u64 * 3 / 4 {
            self.direct_full = false;
            self.sync_accept_modes();
        }
        if self.accept_retries.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        self.accept_retries.retain(|&(slot, gen, at)| {
            if at <= now {
                due.push((slot, gen));
            }
            at > now
        });
        for (slot, gen) in due {
            if self.handles[slot as usize].gen == gen {
                self.arm_accept(slot);
            }
        }
    }

    /// `mp_read`: receives up to `size` bytes (0: a whole buffer) into a buffer the kernel takes
    /// from the channel's ring. Reads on one handle complete in the order issued.
    pub fn read(&mut self, h: Handle, size: usize) -> Result<()> {
        let bsize = self.cfg.buffer_size;
        if size > bsize {
            return Err(Error::BufferTooSmall {
                asked: size,
                buffer_size: bsize,
            });
        }
        let size = if size == 0 { bsize } else { size } as u32;
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("read on a listening handle"));
        }
        if e.read_in_flight {
            e.reads.push_back(size);
            return Ok(());
        }
        self.issue_read(h.slot(), size);
        Ok(())
    }

    /// A read that stays armed (multishot receive): one Read event per arrival of data, with
    /// no request per message, until the peer closes (a 0-byte event), an error, or
    /// [`Channel::stop_reading`] (an `ECANCELED` event); that event is its last. Beyond the
    /// seeds: it saves re-arming a receive for every request.
    pub fn read_multishot(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("read on a listening handle"));
        }
        if e.multishot_read.is_some() {
            return Ok(());
        }
        if e.read_in_flight {
            return Err(Error::Busy(h));
        }
        e.stop_requested = false;
        self.arm_multishot_read(h.slot());
        Ok(())
    }

    pub(super) fn arm_multishot_read(&mut self, slot: u32) {
        let e = &mut self.handles[slot as usize];
        e.read_in_flight = true;
        let target = Self::target(e.kind.as_ref().unwrap());
        let op = Op {
            slot,
            kind: OpKind::ReadMulti,
            data: None,
            addr: None,
        };
        let ud = self.submit_op(op, |_| match target {
            Target::Fd(fd) => opcode::RecvMulti::new(types::Fd(fd), BufRing::GROUP).build(),
            Target::Fixed(i) => opcode::RecvMulti::new(types::Fixed(i), BufRing::GROUP).build(),
        });
        self.handles[slot as usize].multishot_read = Some(ud);
    }

    /// Disarms a multishot read; it ends with an `ECANCELED` Read event (data already on its
    /// way may still arrive before that). No-op without one.
    pub fn stop_reading(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        let Some(ud) = e.multishot_read else {
            return Ok(());
        };
        if e.stop_requested {
            return Ok(());
        }
        e.stop_requested = true;
        self.cancel_op_now(ud);
        Ok(())
    }

    pub(super) fn issue_read(&mut self, slot: u32, size: u32) {
        let e = &mut self.handles[slot as usize];
        e.read_in_flight = true;
        let target = Self::target(e.kind.as_ref().unwrap());
        let op = Op {
            slot,
            kind: OpKind::Read,
            data: None,
            addr: None,
        };
        let ioprio = if self.cfg.poll_first_reads {
            RECVSEND_POLL_FIRST
        } else {
            0
        };
        self.submit_op(op, |_| {
            let b = match target {
                Target::Fd(fd) => opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), size),
                Target::Fixed(i) => opcode::Recv::new(types::Fixed(i), std::ptr::null_mut(), size),
            };
            b.buf_group(BufRing::GROUP)
                .ioprio(ioprio)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        });
    }

    /// `mp_write`: sends all of `buf`. The event reports `buf.len()` bytes, or fewer if the
    /// connection failed part-way (then the next request reports the error).
    pub fn write(&mut self, h: Handle, buf: impl AsRef<[u8]> + 'static) -> Result<()> {
        self.queue_write(h, WriteData::Owned(Box::new(buf)))
    }

    /// `mp_writev`: sends the buffers in order as one request (gather output).
    pub fn writev(&mut self, h: Handle, bufs: Vec<Box<dyn AsRef<[u8]>>>) -> Result<()> {
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| {
                let s = (**b).as_ref();
                libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                }
            })
            .collect();
        let msg = Self::msghdr(&iov);
        self.queue_write(h, WriteData::Vectored { bufs, iov, msg })
    }

    /// Like [`Channel::write`] on caller-owned memory (the C ABI).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unchanged until the Write event for it arrives.
    pub unsafe fn write_raw(&mut self, h: Handle, ptr: *const u8, len: usize) -> Result<()> {
        self.queue_write(h, WriteData::Raw { ptr, len })
    }

    /// Like [`Channel::writev`] on caller-owned memory (the C ABI); the iovec array is copied.
    ///
    /// # Safety
    /// Every buffer the iovecs point at must stay valid until the Writev event arrives.
    pub unsafe fn writev_raw(&mut self, h: Handle, iov: &[libc::iovec]) -> Result<()> {
        let iov = iov.to_vec();
        let msg = Self::msghdr(&iov);
        self.queue_write(h, WriteData::RawVectored { iov, msg })
    }

    pub(super) fn msghdr(iov: &[libc::iovec]) -> Box<libc::msghdr> {
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        msg
    }

    pub(super) fn queue_write(&mut self, h: Handle, data: WriteData) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("write on a listening handle"));
        }
        e.writes.push_back(Pending::Write(data));
        self.pump_writes(h.slot());
        Ok(())
    }

    /// `mp_disconnect`: shuts down the sending side once queued writes are sent (the peer sees
    /// EOF); the handle stays registered and readable.
    pub fn disconnect(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        if matches!(e.kind, Some(Kind::Listener { .. })) {
            return Err(Error::WrongKind("disconnect on a listening handle"));
        }
        e.writes.push_back(Pending::Disconnect);
        self.pump_writes(h.slot());
        Ok(())
    }

    /// `mp_close`: after queued writes are sent, cancels outstanding reads and accepts (they
    /// complete with ECANCELED), closes the connection and frees the handle. The Close event is
    /// the handle's last.
    pub fn close(&mut self, h: Handle) -> Result<()> {
        let e = self.entry_open(h)?;
        e.closing = true;
        e.writes.push_back(Pending::Close);
        self.pump_writes(h.slot());
        Ok(())
    }

    /// Starts the next write-side request of a handle if none is in flight.
    pub(super) fn pump_writes(&mut self, slot: u32) {
        let e = &mut self.handles[slot as usize];
        if e.write_in_flight || e.detached {
            return;
        }
        let Some(next) = e.writes.pop_front() else {
            return;
        };
        let kind = e.kind.as_ref().unwrap();
        let target = Self::target(kind);
        match next {
            Pending::Write(data) => {
                e.write_in_flight = true;
                let op = Op {
                    slot,
                    kind: OpKind::Write,
                    data: Some(data),
                    addr: None,
                };
                self.submit_op(op, |op| {
                    let flags = libc::MSG_WAITALL | libc::MSG_NOSIGNAL;
                    match op.data.as_ref().unwrap() {
                        WriteData::Owned(b) => {
                            let s = (**b).as_ref();
                            send(target, s.as_ptr(), s.len(), flags)
                        }
                        WriteData::Raw { ptr, len } => send(target, *ptr, *len, flags),
                        WriteData::Vectored { msg, .. } | WriteData::RawVectored { msg, .. } => {
                            let m: *const libc::msghdr = &**msg;
                            match target {
                                Target::Fd(fd) => opcode::SendMsg::new(types::Fd(fd), m),
                                Target::Fixed(i) => opcode::SendMsg::new(types::Fixed(i), m),
                            }
                            .flags(flags as u32)
                            .build()
                        }
                    }
                });
            }
            Pending::Disconnect => {
                e.write_in_flight = true;
                let op = Op {
                    slot,
                    kind: OpKind::Disconnect,
                    data: None,
                    addr: None,
                };
                self.submit_op(op, |_| match target {
                    Target::Fd(fd) => opcode::Shutdown::new(types::Fd(fd), libc::SHUT_WR).build(),
                    Target::Fixed(i) => {
                        opcode::Shutdown::new(types::Fixed(i), libc::SHUT_WR).build()
                    }
                });
            }
            Pending::Close => {
                e.write_in_flight = true;
                e.close_submitted = true;
                if e.in_flight > 0 {
                    self.push_cancel(target);
                }
                let op = Op {
                    slot,
                    kind: OpKind::Close,
                    data: None,
                    addr: None,
                };
                match self.handles[slot as usize].kind.as_ref().unwrap() {
                    Kind::Fd(_) | Kind::Direct(_) => self.submit_op(op, |_| match target {
                        // The OwnedFd is forgotten when the Close completes; the kernel closes it.
                        Target::Fd(fd) => opcode::Close::new(types::Fd(fd)).build(),
                        Target::Fixed(i) => opcode::Close::new(types::Fixed(i)).build(),
                    }),
                    Kind::Listener { .. } => {
                        // Listeners are closed synchronously when the last op drains (their
                        // accept must be cancelled first); a Nop carries the ordering.
                        self.submit_op(op, |_| opcode::Nop::new().build())
                    }
                };
            }
        }
    }

    /// `mp_connect`: opens a regular TCP socket and connects it to `addr` asynchronously; the
    /// returned handle gets a Connect event.
    pub fn connect(&mut self, addr: SocketAddr, cookie: u64) -> Result<Handle> {
        let fd = net::tcp_socket_for(&addr, false)?;
        let raw = fd.as_raw_fd();
        let h = self.alloc_handle(Kind::Fd(fd), cookie);
        let op = Op {
            slot: h.slot(),
            kind: OpKind::Connect,
            data: None,
            addr: Some(Box::new(net::to_raw(&addr))),
        };
        self.submit_op(op, |op| {
            let a = op.addr.as_ref().unwrap();
            opcode::Connect::new(
                types::Fd(raw),
                &a.storage as *const _ as *const libc::sockaddr,
                a.len,
            )
            .build()
        });
        Ok(h)
    }

    /// Fallback from a lightweight handle to a regular descriptor (`IORING_OP_FIXED_FD_INSTALL`):
    /// the handle keeps its id and cookie but now uses the returned process descriptor, which
    /// the channel still owns (use `unregister` to take it). The handle must be idle.
    pub fn to_regular_fd(&mut self, h: Handle) -> Result<RawFd> {
        let e = self.entry_open(h)?;
        let idx = match e.kind {
            Some(Kind::Direct(idx)) => idx,
            Some(Kind::Fd(ref fd)) => return Ok(fd.as_raw_fd()),
            _ => return Err(Error::WrongKind("only connection handles convert")),
        };
        if e.in_flight > 0 || !e.writes.is_empty() || !e.reads.is_empty() {
            return Err(Error::Busy(h));
        }
        let op = Op {
            slot: h.slot(),
            kind: OpKind::Install,
            data: None,
            addr: None,
        };
        let ud = self.alloc_op(op);
        self.handles[h.slot() as usize].in_flight += 1;
        self.stats.ops_in_flight += 1;
        let sqe = opcode::FixedFdInstall::new(types::Fixed(idx), 0)
            .build()
            .user_data(ud);
        self.push_sqe(sqe);
        self.install_result = None;
        while self.handles[h.slot() as usize].in_flight > 0 {
            self.submit(1)?;
            self.reap();
        }
        match self.install_result.take() {
            Some(Ok(fd)) => {
                self.ring.submitter().register_files_update(idx, &[-1])?;
                // SAFETY: fd was just installed in our fd table for us alone.
                let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
                self.handles[h.slot() as usize].kind = Some(Kind::Fd(owned));
                self.stats.lightweight_open -= 1;
                Ok(fd)
            }
            Some(Err(errno)) => Err(Error::Io(io::Error::from_raw_os_error(errno.0))),
            None => Err(Error::Io(io::Error::other(
                "fixed fd install gave no completion",
            ))),
        }
    }
}

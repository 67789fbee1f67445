//! The port's receive and transmit queues over the sockets.

use super::*;

pub(super) struct XskRx {
    pub(super) x: Arc<Xsk>,
}

impl Drop for XskRx {
    fn drop(&mut self) {
        self.x.rx_open.store(false, Ordering::Release);
    }
}

impl XskRx {
    /// Tops the fill ring up with fresh frames, a burst at a time.
    #[inline]
    pub(super) fn refill(&mut self, cache: &mut PoolCache) {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the RX side.
        let s = unsafe { &mut *x.rxs.get() };
        let mut room = x.fill.size - s.fill_prod.wrapping_sub(s.fill_cons);
        if room < MAX_BURST as u32 {
            s.fill_cons = x.fill.cons().load(Ordering::Acquire);
            room = x.fill.size - s.fill_prod.wrapping_sub(s.fill_cons);
            if room < MAX_BURST as u32 {
                return;
            }
        }
        if cache.pool().id() != x.pool.id() {
            return;
        }
        let mut tmp = PacketBatch::new();
        let start = s.fill_prod;
        while room >= MAX_BURST as u32 && cache.alloc_bulk(&mut tmp, MAX_BURST, 0) != 0 {
            for p in tmp.drain() {
                let idx = p.frame_index();
                // SAFETY: the slot is free (room counted it); the frame goes to the kernel.
                unsafe { *x.fill.addr(s.fill_prod) = (idx as u64) << FRAME_SHIFT };
                s.held.set(idx);
                s.fill_prod = s.fill_prod.wrapping_add(1);
                let _ = p.into_raw();
            }
            room -= MAX_BURST as u32;
        }
        if s.fill_prod != start {
            x.fill.prod().store(s.fill_prod, Ordering::Release);
            if x.fill.needs_wakeup() {
                // SAFETY: a wake-up call with no buffer.
                unsafe {
                    libc::recvfrom(
                        x.fd,
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            }
        }
    }
}

/// A packet that came in several descriptors (multi-buffer), starting `start` descriptors
/// past the consumer: gathered into one buffer (the fragments' frames are freed), or None if
/// the kernel has not published all of it yet. Returns the packet (None: dropped and
/// counted, no buffer that large) and the descriptors it used.
pub(super) fn gather(
    x: &Xsk,
    s: &mut RxSide,
    cache: &mut PoolCache,
    start: usize,
    avail: usize,
) -> Option<(Option<bessemer_core::Packet>, usize)> {
    let desc = |j: usize| {
        // SAFETY: entries up to the producer index are filled (the caller's acquire).
        unsafe { std::ptr::read(x.rx.xdesc(s.rx_cons.wrapping_add(j as u32))) }
    };
    let mut n = 0;
    let mut total = 0;
    loop {
        if start + n >= avail {
            return None;
        }
        let d = desc(start + n);
        total += d.len as usize;
        n += 1;
        if d.options & XDP_PKT_CONTD == 0 {
            break;
        }
    }
    let mut out = cache.alloc_any(total);
    let mut at = 0;
    let mut invalid = false;
    for j in start..start + n {
        let d = desc(j);
        match xdp_desc::take_rx(&x.pool, &mut s.held, cache, d.addr, d.len) {
            Ok(f) => {
                if let Some(o) = out.as_mut() {
                    o.data_mut()[at..at + f.len()].copy_from_slice(f.data());
                }
                at += f.len();
                cache.free(f);
            }
            Err(_) => invalid = true,
        }
    }
    if invalid {
        // One bad fragment spoils the packet: what came with it is dropped with it.
        if let Some(o) = out.take() {
            cache.free(o);
        }
        x.rx_invalid.fetch_add(1, Ordering::Relaxed);
    } else if out.is_none() {
        x.rx_dropped.fetch_add(1, Ordering::Relaxed);
    }
    Some((out, n))
}

impl RxQueue for XskRx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the RX side.
        let s = unsafe { &mut *x.rxs.get() };
        let avail = x.rx.prod().load(Ordering::Acquire).wrapping_sub(s.rx_cons) as usize;
        let want = max.min(batch.room());
        let mut used = 0;
        let mut got = 0;
        while got < want && used < avail {
            // SAFETY: entries up to the producer index are filled (acquire above).
            let d = unsafe { std::ptr::read(x.rx.xdesc(s.rx_cons.wrapping_add(used as u32))) };
            if d.options & XDP_PKT_CONTD != 0 {
                let Some((p, n)) = gather(x, s, cache, used, avail) else {
                    break;
                };
                used += n;
                if let Some(mut p) = p {
                    if x.partial_csums {
                        partial_csum::complete(p.data_mut());
                    }
                    // SAFETY: got < want <= batch.room() at entry.
                    unsafe { batch.push_unchecked(p) };
                    got += 1;
                }
                continue;
            }
            used += 1;
            let Ok(mut p) = xdp_desc::take_rx(&x.pool, &mut s.held, cache, d.addr, d.len) else {
                x.rx_invalid.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if x.partial_csums {
                partial_csum::complete(p.data_mut());
            }
            // SAFETY: got < want <= batch.room() at entry.
            unsafe { batch.push_unchecked(p) };
            got += 1;
        }
        if used > 0 {
            s.rx_cons = s.rx_cons.wrapping_add(used as u32);
            x.rx.cons().store(s.rx_cons, Ordering::Release);
        }
        self.refill(cache);
        self.x.retry_tx_backlog();
        if got == 0 && self.x.busy_poll {
            // SAFETY: a receive call with no buffer: it only runs the busy poll.
            unsafe {
                libc::recvfrom(
                    self.x.fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        got
    }
}

pub(super) struct XskTx {
    pub(super) x: Arc<Xsk>,
}

impl Drop for XskTx {
    fn drop(&mut self) {
        self.x.tx_open.store(false, Ordering::Release);
    }
}

impl XskTx {
    /// Frees the frames the kernel has finished sending.
    #[inline]
    pub(super) fn reap(&mut self, cache: &mut PoolCache) {
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the TX side.
        let s = unsafe { &mut *x.txs.get() };
        let prod = x.comp.prod().load(Ordering::Acquire);
        if prod == s.comp_cons {
            return;
        }
        let mut tmp = PacketBatch::new();
        while s.comp_cons != prod {
            // SAFETY: entries up to the producer index are filled.
            let addr = unsafe { *x.comp.addr(s.comp_cons) };
            s.comp_cons = s.comp_cons.wrapping_add(1);
            match xdp_desc::take_completed(&x.pool, &mut s.held, addr) {
                Ok(p) => {
                    // SAFETY: the batch is flushed whenever it is full.
                    unsafe { tmp.push_unchecked(p) };
                    if tmp.is_full() {
                        cache.free_bulk(&mut tmp);
                    }
                }
                Err(_) => {
                    x.comp_invalid.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        x.comp.cons().store(prod, Ordering::Release);
        cache.free_bulk(&mut tmp);
    }
}

impl TxQueue for XskTx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        self.reap(cache);
        let x = &*self.x;
        // SAFETY: this queue object is the only user of the TX side.
        let s = unsafe { &mut *x.txs.get() };
        let mut room = x.tx.size - s.tx_prod.wrapping_sub(s.tx_cons);
        if (room as usize) < batch.len() {
            s.tx_cons = x.tx.cons().load(Ordering::Acquire);
            room = x.tx.size - s.tx_prod.wrapping_sub(s.tx_cons);
        }
        let ours = x.pool.id();
        let can_copy = cache.pool().id() == ours;
        let mut rest = PacketBatch::new();
        let mut sent = 0;
        for p in batch.drain() {
            let len = p.len();
            if room == 0 || !rest.is_empty() || len == 0 {
                // SAFETY: rest holds at most the batch's own packets.
                unsafe { rest.push_unchecked(p) };
                continue;
            }
            if len > UMEM_DATA {
                // A jumbo packet: copied into a chain of UMEM frames.
                let k = len.div_ceil(UMEM_DATA);
                if !x.sg {
                    // Never sendable on this socket: dropped here, counted by the port.
                    x.tx_dropped.fetch_add(1, Ordering::Relaxed);
                    cache.free(p);
                    continue;
                }
                let mut chain = PacketBatch::new();
                if !can_copy || k > room as usize || cache.alloc_bulk(&mut chain, k, 0) != k {
                    // SAFETY: as above.
                    unsafe { rest.push_unchecked(p) };
                    continue;
                }
                for (i, (mut q, part)) in chain.drain().zip(p.data().chunks(UMEM_DATA)).enumerate()
                {
                    q.set_data_bounds(HEADROOM, part.len());
                    q.data_mut().copy_from_slice(part);
                    let idx = q.frame_index();
                    // SAFETY: the slot is free (room counted k of them).
                    unsafe {
                        x.tx.xdesc(s.tx_prod).write(libc::xdp_desc {
                            addr: ((idx as u64) << FRAME_SHIFT) + HEADROOM as u64,
                            len: part.len() as u32,
                            options: if i + 1 < k { XDP_PKT_CONTD } else { 0 },
                        })
                    };
                    s.held.set(idx);
                    let _ = q.into_raw();
                    s.tx_prod = s.tx_prod.wrapping_add(1);
                }
                cache.free(p);
                room -= k as u32;
                sent += 1;
                continue;
            }
            // A frame of another pool is not in the UMEM, and a shared frame might be on
            // another ring too: both go out as a copy in a fresh frame.
            let p = if p.pool_id() == ours && !p.is_shared() {
                p
            } else if can_copy {
                match cache.alloc(0) {
                    Some(mut q) => {
                        // Up to a whole UMEM frame after the headroom (a jumbo frame from
                        // another port may fill more than a fresh buffer's data area).
                        q.set_data_bounds(HEADROOM, len);
                        q.data_mut().copy_from_slice(p.data());
                        cache.free(p);
                        q
                    }
                    None => {
                        // SAFETY: as above.
                        unsafe { rest.push_unchecked(p) };
                        continue;
                    }
                }
            } else {
                // SAFETY: as above.
                unsafe { rest.push_unchecked(p) };
                continue;
            };
            let idx = p.frame_index();
            // SAFETY: the slot is free (room counted it).
            unsafe {
                x.tx.xdesc(s.tx_prod).write(libc::xdp_desc {
                    addr: ((idx as u64) << FRAME_SHIFT) + p.data_offset() as u64,
                    len: len as u32,
                    options: 0,
                })
            };
            s.held.set(idx);
            let _ = p.into_raw();
            s.tx_prod = s.tx_prod.wrapping_add(1);
            room -= 1;
            sent += 1;
        }
        batch.append(&mut rest);
        if sent > 0 {
            x.tx.prod().store(s.tx_prod, Ordering::Release);
        }
        if x.tx.needs_wakeup() && s.tx_prod != x.tx.cons().load(Ordering::Relaxed) {
            x.kick_tx(s.tx_prod);
        }
        sent
    }
}

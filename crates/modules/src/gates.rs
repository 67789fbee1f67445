//! Sending a batch's packets out of per-packet output gates faster than one
//! `Context::emit` per packet, in the same order: classes that compute every packet's gate
//! first (IPLookup, RoundRobin) hand the gates to [`split_routed`].
use bessemer_core::{Context, PacketBatch, MAX_BURST};

/// Sends packet i of `batch` out of gate `gates[i]`: every gate is routable (below
/// DROP_GATE), not all the same, and `any` is all of them OR-ed. With gates below
/// [`FEW_GATES`], each gate's packets are gathered into a new batch of their own, in order,
/// one gate at a time (from a bit mask of the packets bound to it), and the batches leave in
/// the order `Context::emit` would send them (the gate seen first leaves last); otherwise
/// packet by packet through `emit`. Gathering one gate at a time costs fewer cycles than
/// `emit`'s per-packet staging (1.5-3 per packet less at 2 and 4 gates, `make bench-core`'s
/// `ip_lookup_10k_60`): each gate's packets are found with a few vector compares for the
/// whole batch, and a packet is one load and one store.
#[inline(always)]
pub fn split_routed(
    ctx: &mut Context,
    batch: &mut PacketBatch,
    gates: &[u16; MAX_BURST],
    any: u16,
) {
    if any as usize >= FEW_GATES {
        for (p, &g) in batch.drain().zip(gates) {
            ctx.emit(g, p);
        }
        return;
    }
    let n = batch.len();
    // The packets, moved out of the input batch (which is left empty).
    let mut pkts: [std::mem::MaybeUninit<bessemer_core::Packet>; MAX_BURST] =
        [const { std::mem::MaybeUninit::uninit() }; MAX_BURST];
    for (slot, p) in pkts.iter_mut().zip(batch.drain()) {
        slot.write(p);
    }
    // Per gate: the packets bound to it, and where the first one is.
    let live = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    // Gates 0..top may occur: every gate is within `any`'s highest bit.
    let top = 1usize << (16 - any.leading_zeros());
    let mut order = [(0u32, 0u16, 0u64); FEW_GATES];
    let mut k = 0;
    for g in 0..top {
        let m = gate_mask(gates, g as u16) & live;
        if m != 0 {
            order[k] = (m.trailing_zeros(), g as u16, m);
            k += 1;
        }
    }
    // `emit` stages each gate's packets and sends the batches when the module returns, the
    // gate it saw last first.
    order[..k].sort_unstable_by_key(|o| std::cmp::Reverse(o.0));
    match k {
        2 => gather::<2>(ctx, &pkts, &order),
        3 => gather::<3>(ctx, &pkts, &order),
        4 => gather::<4>(ctx, &pkts, &order),
        _ => {
            for &(_, g, mut m) in &order[..k] {
                let mut b = ctx.new_batch();
                let out = &mut *b;
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    // SAFETY: packet i was written above and is moved out once (each bit of
                    // each mask stands for one packet, in one mask only); a batch has room
                    // for all.
                    unsafe { out.push_unchecked(pkts[i].assume_init_read()) };
                }
                ctx.send(g, b);
            }
        }
    }
}

/// `split_routed`'s gathering for exactly K gates: one packet for each gate in turn, so
/// that the K batches' fills (each a chain through its packet count in memory) overlap
/// (0.4-0.6 cycles a packet less than one gate after the other at 4 gates).
#[inline(always)]
fn gather<const K: usize>(
    ctx: &mut Context,
    pkts: &[std::mem::MaybeUninit<bessemer_core::Packet>; MAX_BURST],
    order: &[(u32, u16, u64); FEW_GATES],
) {
    let mut masks: [u64; K] = std::array::from_fn(|j| order[j].2);
    let mut outs: [Box<PacketBatch>; K] = std::array::from_fn(|_| ctx.new_batch());
    while masks.iter().any(|&m| m != 0) {
        for (m, out) in masks.iter_mut().zip(outs.iter_mut()) {
            if *m != 0 {
                let i = m.trailing_zeros() as usize;
                *m &= *m - 1;
                // SAFETY: as in `split_routed`.
                unsafe { out.push_unchecked(pkts[i].assume_init_read()) };
            }
        }
    }
    for (j, b) in outs.into_iter().enumerate() {
        ctx.send(order[j].1, b);
    }
}

/// Gates below this go through `split_routed`'s gathering.
pub const FEW_GATES: usize = 8;

/// Bit i set where `gates[i] == g` (all MAX_BURST entries).
#[inline(always)]
fn gate_mask(gates: &[u16; MAX_BURST], g: u16) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let mut m = 0u64;
        // SAFETY: SSE2 is part of x86-64; the loads read inside `gates` (16 lanes a step).
        unsafe {
            let want = _mm_set1_epi16(g as i16);
            let p = gates.as_ptr().cast::<__m128i>();
            for c in 0..MAX_BURST / 16 {
                let a = _mm_cmpeq_epi16(_mm_loadu_si128(p.add(2 * c)), want);
                let b = _mm_cmpeq_epi16(_mm_loadu_si128(p.add(2 * c + 1)), want);
                let bits = _mm_movemask_epi8(_mm_packs_epi16(a, b)) as u32 as u64;
                m |= bits << (16 * c);
            }
        }
        m
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        gates
            .iter()
            .enumerate()
            .fold(0u64, |m, (i, &x)| m | ((x == g) as u64) << i)
    }
}

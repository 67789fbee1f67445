//! Small helpers shared by module classes.

/// A fast xorshift64* generator for per-packet randomness (not cryptographic).
#[derive(Clone, Debug)]
pub struct FastRng(u64);

impl FastRng {
    /// A generator seeded from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> FastRng {
        FastRng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// A generator seeded from the TSC.
    pub fn from_tsc() -> FastRng {
        FastRng::new(bessemer_core::tsc::rdtsc() | 1)
    }

    /// Next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform value in `0..n` (n > 0), by multiply-shift.
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
}

use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::TaskResult;
use bessemer_core::{AccessMode, AttrSpec, DropReason, Error, InitContext, Result, Value};

/// What a task run that found nothing to do returns (its leaf may back off).
pub const IDLE: TaskResult = TaskResult {
    block: true,
    packets: 0,
    bits: 0,
};

/// Parses a `set_burst` command's argument (`<Class>CommandSetBurstArg.burst`): 0..MAX_BURST,
/// absent meaning 0, as every BESS class with the command takes it (0 switches the task's
/// packets off: scripts stop a Source that way).
pub fn parse_burst(arg: &Value, msg: &str) -> Result<usize> {
    let mut a = bessemer_core::Args::new(arg, msg)?;
    let b = a.uint("burst", u64::MAX)?.unwrap_or(0);
    a.finish()?;
    if b > bessemer_core::batch::MAX_BURST as u64 {
        return Err(Error::invalid(format!(
            "{msg}.burst: burst size must be [0,{}], not {b}",
            bessemer_core::batch::MAX_BURST
        )));
    }
    Ok(b as usize)
}

/// Parses a repeated `gates` field: each an output gate id below MAX_GATES.
pub fn parse_gates(list: &[Value], msg: &str, allow_empty: bool) -> Result<Vec<u16>> {
    if list.is_empty() && !allow_empty {
        return Err(Error::invalid(format!(
            "{msg}.gates: at least one gate is required"
        )));
    }
    list.iter()
        .map(|v| match v.as_i64() {
            Some(g) if (0..MAX_GATES as i64).contains(&g) => Ok(g as u16),
            _ => Err(Error::invalid(format!(
                "{msg}.gates: {v:?} is not an output gate (0..{MAX_GATES})"
            ))),
        })
        .collect()
}

/// Parses argument message `msg` whose one field is the repeated message `key`: checks `msg`
/// has no other field, then parses every entry with `each` (given the entry and its name for
/// errors, `{msg}.{key}[i]`) in order, stopping at the first error.
pub fn parse_list<T>(
    arg: &Value,
    msg: &str,
    key: &str,
    mut each: impl FnMut(&Value, &str) -> Result<T>,
) -> Result<Vec<T>> {
    let mut a = bessemer_core::Args::new(arg, msg)?;
    let list = a.list(key)?;
    a.finish()?;
    list.iter()
        .enumerate()
        .map(|(i, v)| each(v, &format!("{msg}.{key}[{i}]")))
        .collect()
}

/// A list value of gate ids (for info/desc output).
pub fn gates_value(gates: &[u16]) -> Value {
    Value::List(gates.iter().map(|&g| Value::Int(g as i64)).collect())
}

/// Declares the metadata attributes a class reads or writes: (name, size in bytes, access), in
/// the order of their attribute ids.
pub fn add_attrs(init: &mut InitContext, attrs: &[(&str, usize, AccessMode)]) -> Result<()> {
    for &(name, size, mode) in attrs {
        init.add_attr(AttrSpec {
            name: name.to_string(),
            size,
            mode,
        })?;
    }
    Ok(())
}

/// What happens to one packet of a batch: out of an output gate, or dropped under one of the
/// class's drop reasons `R`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<R> {
    /// Sent out of this output gate.
    Gate(u16),
    /// Dropped under this reason.
    Drop(R),
}

/// The per-packet iteration of a class that decides each packet on its own: runs `f` on
/// every packet of `batch` in order (it may rewrite the packet, grow or shrink it), then sends
/// each packet as the verdict `f` returned for it says (see [`send_each`]: a batch whose
/// packets all go out of one gate is forwarded whole, no copy).
#[inline(always)]
pub fn process_each<R: DropReason + PartialEq>(
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
    mut f: impl FnMut(&mut bessemer_core::Packet) -> Verdict<R>,
) {
    let mut v = [Verdict::Gate(0); bessemer_core::MAX_BURST];
    // Whether every verdict so far is the first one's gate, kept as they come so that the
    // usual batch (all out of one gate) is forwarded whole without a second pass.
    let mut same = true;
    for (i, p) in batch.pkts_mut().iter_mut().enumerate() {
        v[i] = f(p);
        same &= v[i] == v[0];
    }
    if let (true, Verdict::Gate(g), false) = (same, v[0], batch.is_empty()) {
        return ctx.forward(g, batch);
    }
    send_each(ctx, batch, |i| v[i]);
}

/// True when frame `d` is plain IPv4: Ethernet type 0x0800 and an IPv4 header of 20 bytes
/// (version 4, IHL 5) whose total length is at least 20 and fits the frame. These are the
/// frames for which [`crate::headers::ipv4_in_frame`] succeeds with a 20-byte header, so a
/// class may handle a batch of them without its general checks; bytes 0..34 are in `d`.
#[inline(always)]
pub fn plain_ipv4(d: &[u8]) -> bool {
    if d.len() < 34 {
        return false;
    }
    let tl = u16::from_be_bytes([d[16], d[17]]) as usize;
    // 20 <= total length <= len - 14 as one unsigned compare.
    d[12] == 0x08 && d[13] == 0x00 && d[14] == 0x45 && tl.wrapping_sub(20) <= d.len() - 34
}

/// Sends packet i of `batch` as `verdict(i)` says, for classes that computed the verdicts
/// beforehand (in several passes over the batch); the others use [`process_each`]. A batch
/// whose packets all go out of one gate is forwarded whole (no per-packet emit), which is the
/// common case; otherwise each packet is emitted or dropped in order.
#[inline(always)]
pub fn send_each<R: DropReason + PartialEq>(
    ctx: &mut bessemer_core::Context,
    batch: &mut bessemer_core::PacketBatch,
    verdict: impl Fn(usize) -> Verdict<R>,
) {
    let n = batch.len();
    if n == 0 {
        return;
    }
    if let Verdict::Gate(g) = verdict(0) {
        if (1..n).all(|i| verdict(i) == Verdict::Gate(g)) {
            return ctx.forward(g, batch);
        }
    }
    for (i, p) in batch.drain().enumerate() {
        match verdict(i) {
            Verdict::Gate(g) => ctx.emit(g, p),
            Verdict::Drop(r) => ctx.drop_packet(p, r),
        }
    }
}

/// Copies `src` into `dst` (of the same length) without a call to `memcpy` for the short
/// run-time lengths classes copy per packet (header fields, attribute values, small
/// headers): two overlapping unaligned loads and stores cover any length from W to 2W in one
/// step, 16-byte steps up to 64 bytes; longer copies go to `copy_from_slice`. A `memcpy` call
/// per packet and field cost more than the rest of such classes (perf: 36-45 % of the
/// worker in GenericEncap and SetMetadata).
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_small: lengths differ");
    if n > 64 {
        dst.copy_from_slice(src);
        return;
    }
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    // SAFETY: every access below lies in [0, n) of both slices (n checked per branch); the
    // two slices are distinct borrows, so they do not overlap; unaligned reads and writes.
    unsafe {
        macro_rules! two {
            ($t:ty, $w:expr) => {{
                let a = s.cast::<$t>().read_unaligned();
                let b = s.add(n - $w).cast::<$t>().read_unaligned();
                d.cast::<$t>().write_unaligned(a);
                d.add(n - $w).cast::<$t>().write_unaligned(b);
            }};
        }
        if n >= 16 {
            let mut i = 0;
            while i + 16 < n {
                d.add(i)
                    .cast::<u128>()
                    .write_unaligned(s.add(i).cast::<u128>().read_unaligned());
                i += 16;
            }
            d.add(n - 16)
                .cast::<u128>()
                .write_unaligned(s.add(n - 16).cast::<u128>().read_unaligned());
        } else if n >= 8 {
            two!(u64, 8)
        } else if n >= 4 {
            two!(u32, 4)
        } else if n >= 2 {
            two!(u16, 2)
        } else if n == 1 {
            *d = *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_small;
    use proptest::prelude::*;

    proptest! {
        /// Every length 0..=100 (each branch and its edges), any bytes: the copy is exact and
        /// touches nothing around it.
        #[test]
        fn copy_small_copies_exactly(src in proptest::collection::vec(any::<u8>(), 0..=100)) {
            let n = src.len();
            let mut buf = vec![0x5au8; n + 32];
            copy_small(&mut buf[16..16 + n], &src);
            prop_assert_eq!(&buf[16..16 + n], &src[..]);
            prop_assert!(buf[..16].iter().chain(&buf[16 + n..]).all(|&b| b == 0x5a));
        }
    }
}

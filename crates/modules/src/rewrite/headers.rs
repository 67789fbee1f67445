//! Per-packet verdicts and argument parsing shared by this kind's classes (the header layout
//! and checks are in [`crate::headers`]).

use bessemer_core::{Context, DropReason, PacketBatch, MAX_BURST};

pub use crate::util::Verdict;

/// Per-packet verdicts of one batch, filled while the batch is processed in place.
pub type Verdicts<R> = [Verdict<R>; MAX_BURST];

/// Sends every packet of `batch` as `v` says; a batch whose packets all go out of one gate is
/// forwarded whole (no per-packet emit).
#[inline]
pub fn dispatch<R: DropReason + PartialEq>(
    ctx: &mut Context,
    batch: &mut PacketBatch,
    v: &Verdicts<R>,
) {
    crate::util::send_each(ctx, batch, |i| v[i]);
}

/// Runs `f` on the bytes of every packet of `batch`, then sends each packet as the verdict `f`
/// returned for it says (see [`dispatch`]).
#[inline(always)]
pub fn process_each<R: DropReason + PartialEq>(
    ctx: &mut Context,
    batch: &mut PacketBatch,
    mut f: impl FnMut(&mut [u8]) -> Verdict<R>,
) {
    let mut v = [Verdict::Gate(0); MAX_BURST];
    for (i, p) in batch.pkts_mut().iter_mut().enumerate() {
        v[i] = f(p.data_mut());
    }
    dispatch(ctx, batch, &v);
}

/// Splits off the packets of `batch` shorter than `min_len`, runs `f` on the rest, then drops
/// the short ones under `reason` and forwards the rest out of gate 0.
#[inline(always)]
pub fn on_long_enough(
    ctx: &mut Context,
    batch: &mut PacketBatch,
    min_len: usize,
    reason: impl DropReason,
    f: impl FnOnce(&mut Context, &mut PacketBatch),
) {
    let mut short = PacketBatch::new();
    batch.split_off_if(&mut short, |p| p.len() >= min_len);
    f(ctx, batch);
    ctx.drop_batch(&mut short, reason);
    ctx.forward(0, batch);
}

/// Parses a dotted-quad IPv4 address for argument `field` of message `msg`.
pub fn parse_ipv4(s: &str, field: &str) -> bessemer_core::Result<u32> {
    s.parse::<std::net::Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| bessemer_core::Error::invalid(format!("{field}: invalid IPv4 address '{s}'")))
}

/// Formats an IPv4 address.
pub fn ipv4_string(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// Parses a MAC address "aa:bb:cc:dd:ee:ff" for argument `field`.
pub fn parse_mac(s: &str, field: &str) -> bessemer_core::Result<[u8; 6]> {
    bessemer_core::mac::parse_mac(s)
        .ok_or_else(|| bessemer_core::Error::invalid(format!("{field}: invalid MAC address '{s}'")))
}

/// Checks that a command argument is an empty message (`EmptyArg`).
pub fn check_empty(arg: &bessemer_core::Value) -> bessemer_core::Result<()> {
    bessemer_core::Args::new(arg, "EmptyArg")?.finish()
}

/// The runtime-configuration commands of a class with no runtime configuration (the NAT
/// classes, as in BESS): `get_runtime_config` answers an empty message and
/// `set_runtime_config` accepts one.
pub fn no_runtime_config(
    arg: &bessemer_core::Value,
) -> bessemer_core::Result<bessemer_core::Value> {
    check_empty(arg)?;
    Ok(bessemer_core::Value::map())
}

//! Argument parsing shared by this kind's classes (the header layout, views and checks are in
//! [`crate::headers`], the per-packet iteration in [`crate::util`]).

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

/// Parses the argument IPChecksum and L4Checksum share (message `msg`): whether to verify
/// checksums instead of computing them (`verify`, default false). The omec-project fork's
/// `hw` (NIC checksum offload) is accepted and ignored: there is none here; checksums are
/// computed (or verified) in software either way.
pub fn parse_checksum_arg(arg: &bessemer_core::Value, msg: &str) -> bessemer_core::Result<bool> {
    let mut a = bessemer_core::Args::new(arg, msg)?;
    let verify = a.bool("verify")?.unwrap_or(false);
    let _hw = a.bool("hw")?.unwrap_or(false);
    a.finish()?;
    Ok(verify)
}

/// The documentation line of the checksum classes' `hw` argument.
pub const CHECKSUM_HW_DOC: &str = "hw: bool — (omec-project fork) use NIC checksum offload: accepted, but checksums are always computed or verified in software here";

/// The `desc` of a checksum class: its mode, "verify" or "compute".
pub fn checksum_desc(verify: bool) -> String {
    if verify { "verify" } else { "compute" }.to_string()
}

/// The command table of the NAT classes (NAT, StaticNAT, as in BESS): `get_initial_arg`
/// answers the `$arg` message the module was created with (its `initial_arg()`), and the
/// runtime-configuration commands are those of a class with none ([`no_runtime_config`]).
macro_rules! nat_commands {
    ($module:ident, $arg:literal) => {
        &[
            bessemer_core::CommandSpec {
                name: "get_initial_arg",
                arg_type: "EmptyArg",
                help: concat!("returns the ", $arg, " the module was created with"),
                mt_safe: true,
                reply_type: $arg,
                mutates: false,
                handler: bessemer_core::handler!(Exclusive $module, |m, _, arg| {
                    $crate::rewrite::headers::check_empty(arg)?;
                    Ok(m.initial_arg())
                }),
            },
            $crate::rewrite::headers::nat_commands!(@no_config $module, "get_runtime_config",
                "returns the runtime configuration (empty)", false),
            $crate::rewrite::headers::nat_commands!(@no_config $module, "set_runtime_config",
                "sets the runtime configuration (nothing to set)", true),
        ]
    };
    // A runtime-configuration command of a class with none: takes and answers EmptyArg.
    (@no_config $module:ident, $name:literal, $help:literal, $mutates:literal) => {
        bessemer_core::CommandSpec {
            name: $name,
            arg_type: "EmptyArg",
            help: $help,
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: $mutates,
            handler: bessemer_core::handler!(Exclusive $module, |_, _, arg| {
                $crate::rewrite::headers::no_runtime_config(arg)
            }),
        }
    };
}
pub(crate) use nat_commands;

/// Test helpers shared by this kind's classes.
#[cfg(test)]
pub mod test_util {
    use crate::headers::test_util::hex;
    use bessemer_core::testing::Harness;
    use bessemer_core::{ModuleClass, Value};

    /// Runs the `frames` (hex) through a module of checksum class `class` made from `arg`;
    /// returns what left by gate 0 (correct or written) and by gate 1 (wrong, verify mode).
    pub fn sort_frames(
        class: &'static ModuleClass,
        arg: &Value,
        frames: &[&str],
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut h = Harness::new();
        h.add(class, "c", arg).unwrap();
        let (c0, c1) = (h.capture("c", 0), h.capture("c", 1));
        h.inject("c", 0, &frames.iter().map(|f| hex(f)).collect::<Vec<_>>());
        (c0.take_data(), c1.take_data())
    }

    /// Checks that checksum class `class` accepts `hw: true` and still works in software: in
    /// compute mode the `unfilled` frames (hex) come out of gate 0 as `filled`; in verify mode
    /// the `good` frames leave by gate 0 and the `bad` one by gate 1.
    pub fn assert_hw_done_in_software(
        class: &'static ModuleClass,
        unfilled: &[&str],
        filled: &[&str],
        good: &[&str],
        bad: &str,
    ) {
        let hexes = |frames: &[&str]| frames.iter().map(|f| hex(f)).collect::<Vec<_>>();
        let (computed, _) = sort_frames(class, &Value::map().with("hw", true), unfilled);
        assert_eq!(computed, hexes(filled));
        let input = [good, &[bad]].concat();
        let verify = Value::map().with("hw", true).with("verify", true);
        let (pass, fail) = sort_frames(class, &verify, &input);
        assert_eq!(pass, hexes(good));
        assert_eq!(fail, vec![hex(bad)]);
    }
}

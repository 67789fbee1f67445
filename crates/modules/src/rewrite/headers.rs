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

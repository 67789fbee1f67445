//! The planner's veth-testbed programs (`bpf/testbed.bpf.c`: TCX steering on the sender's
//! veth end, a per-flow, per-RX-queue XDP counter on the receiver's), as clang built them.
//! `bessemer_planner::testbed` loads them with [`crate::bpf_elf`] and fills their maps.

/// The clang-built object (empty when clang was missing at build time).
pub static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/testbed.bpf.o"));

/// Why the testbed programs cannot be used in this build, if they cannot.
pub fn unavailable() -> Option<String> {
    if let Some(why) = option_env!("BESSEMER_TESTBED_UNAVAILABLE") {
        return Some(format!("veth testbed unavailable: {why}"));
    }
    if OBJECT.is_empty() {
        return Some("veth testbed unavailable: the program was not built (clang missing; install the 'clang' package and rebuild)".into());
    }
    None
}

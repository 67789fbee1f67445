//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.
//!
//! Sets `cfg(bpf_clang)` when clang is there: the bpf crate then builds the veth
//! testbed's BPF programs, and the testbed tests run (without clang they are reported as
//! ignored; if clang is there but the programs still are not built, they fail and say why).

use std::process::Command;

fn main() {
    root_cfg();
    println!("cargo::rustc-check-cfg=cfg(bpf_clang)");
    println!("cargo:rerun-if-env-changed=BESSEMER_CLANG");
    let clang = std::env::var("BESSEMER_CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-changed=/usr/bin/{clang}");
    if Command::new(&clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("cargo:rustc-cfg=bpf_clang");
    }
}

include!("../../build-support/root_cfg.rs");

//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.
//!
//! Compiles the BPF programs (`bpf/offload.bpf.c`, the XDP offload; `bpf/testbed.bpf.c`, the
//! planner's veth testbed) with clang into OUT_DIR and sets `cfg(bpf_clang)`. Without clang
//! the crate still builds: the objects are empty, their users answer with an error naming
//! the package to install (`BESSEMER_OFFLOAD_UNAVAILABLE`, `BESSEMER_TESTBED_UNAVAILABLE`),
//! and tests needing them are reported as ignored.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    root_cfg();
    println!("cargo::rustc-check-cfg=cfg(bpf_clang)");
    offload_program();
}

fn offload_program() {
    println!("cargo:rerun-if-env-changed=BESSEMER_CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let clang = std::env::var("BESSEMER_CLANG").unwrap_or_else(|_| "clang".into());
    // Installing clang later should rebuild with the programs: watch where it would appear.
    println!("cargo:rerun-if-changed=/usr/bin/{clang}");
    // Each object with the variable that says why it is missing (read by the code that
    // loads it); cfg(bpf_clang) only when every program was built.
    let mut all = true;
    for (src, obj, env) in [
        (
            "bpf/offload.bpf.c",
            "offload.bpf.o",
            "BESSEMER_OFFLOAD_UNAVAILABLE",
        ),
        (
            "bpf/testbed.bpf.c",
            "testbed.bpf.o",
            "BESSEMER_TESTBED_UNAVAILABLE",
        ),
    ] {
        if let Some(why) = compile(&clang, src, obj) {
            all = false;
            println!("cargo:warning=BPF program {src} unavailable: {why}");
            println!("cargo:rustc-env={env}={why}");
        }
    }
    if all {
        println!("cargo:rustc-cfg=bpf_clang");
    }
}

/// Compiles `src` into OUT_DIR/`obj`; on failure writes an empty object and says why.
fn compile(clang: &str, src: &str, obj: &str) -> Option<String> {
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=bpf/bessemer_bpf.h");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join(obj);
    let result = Command::new(clang)
        .args(["-O2", "-Wall", "-target", "bpf", "-c", src, "-o"])
        .arg(&out)
        .output();
    let why = match result {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "clang failed to compile {src}: {}",
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")
        )),
        Err(e) => Some(format!(
            "'{clang}' is not installed ({e}); install the 'clang' package (scripts/install-deps.sh) and rebuild"
        )),
    };
    if why.is_some() {
        std::fs::write(&out, b"").expect("write the empty BPF object");
    }
    why
}

include!("../../build-support/root_cfg.rs");

//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.
//!
//! Compiles the XDP offload program (`bpf/offload.bpf.c`) with clang into OUT_DIR and sets
//! `cfg(bpf_clang)`. Without clang the crate still builds: the object is empty, the offload
//! answers with an error naming the package to install (`BESSEMER_OFFLOAD_UNAVAILABLE`), and
//! tests needing it are reported as ignored.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(root)");
    println!("cargo::rustc-check-cfg=cfg(bpf_clang)");
    println!("cargo:rerun-if-env-changed=USER");
    let uid0 = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().take(2).eq(["Uid:", "0"]))
        })
        .unwrap_or(false);
    if uid0 {
        println!("cargo:rustc-cfg=root");
    }
    offload_program();
}

fn offload_program() {
    let src = "bpf/offload.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=BESSEMER_CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let clang = std::env::var("BESSEMER_CLANG").unwrap_or_else(|_| "clang".into());
    // Installing clang later should rebuild with the program: watch where it would appear.
    println!("cargo:rerun-if-changed=/usr/bin/{clang}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("offload.bpf.o");
    let result = Command::new(&clang)
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
    match why {
        None => println!("cargo:rustc-cfg=bpf_clang"),
        Some(why) => {
            println!("cargo:warning=XDP offload unavailable: {why}");
            std::fs::write(&out, b"").expect("write the empty offload object");
            println!("cargo:rustc-env=BESSEMER_OFFLOAD_UNAVAILABLE={why}");
        }
    }
}

//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.
//!
//! Compiles the XDP offload program (`bpf/offload.bpf.c`, with the header shared with
//! `crates/bpf`'s programs) with clang into OUT_DIR and sets `cfg(bpf_clang)`. Without clang
//! the crate still builds: the object is empty, its user answers with an error naming the
//! package to install (`BESSEMER_OFFLOAD_UNAVAILABLE`), and tests needing it are reported as
//! ignored.

fn main() {
    root_cfg();
    println!("cargo::rustc-check-cfg=cfg(bpf_clang)");
    let clang = bpf_clang();
    match compile_bpf(&clang, "bpf/offload.bpf.c", "offload.bpf.o", "../bpf/bpf") {
        Some(why) => {
            println!("cargo:warning=BPF program bpf/offload.bpf.c unavailable: {why}");
            println!("cargo:rustc-env=BESSEMER_OFFLOAD_UNAVAILABLE={why}");
        }
        None => println!("cargo:rustc-cfg=bpf_clang"),
    }
}

include!("../../build-support/root_cfg.rs");
include!("../../build-support/bpf_program.rs");

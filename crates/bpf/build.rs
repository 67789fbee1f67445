//! Compiles the planner's veth-testbed programs (`bpf/testbed.bpf.c`) with clang into
//! OUT_DIR. Without clang the crate still builds: the object is empty and
//! `testbed_prog::unavailable` names the package to install (`BESSEMER_TESTBED_UNAVAILABLE`).

fn main() {
    let clang = bpf_clang();
    if let Some(why) = compile_bpf(&clang, "bpf/testbed.bpf.c", "testbed.bpf.o", "bpf") {
        println!("cargo:warning=BPF program bpf/testbed.bpf.c unavailable: {why}");
        println!("cargo:rustc-env=BESSEMER_TESTBED_UNAVAILABLE={why}");
    }
}

include!("../../build-support/bpf_program.rs");

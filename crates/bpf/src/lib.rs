//! Loading eBPF/XDP programs into the kernel without libbpf: [`bpf`], the few bpf(2) calls
//! Bessemer makes (maps, hand-assembled programs, XDP and TCX links, `BPF_PROG_TEST_RUN`),
//! and [`bpf_elf`], a loader for the clang-built programs; and [`testbed_prog`], the planner's
//! veth-testbed programs, built from `bpf/testbed.bpf.c` by `build.rs`. The drivers
//! (AFXDPPort, the XDP offload), the planner's veth testbed and the port benchmark use it; the
//! drivers crate re-exports the modules (`bessemer_drivers::bpf`, ...), so the planner needs
//! only this crate, not the drivers.

pub mod bpf;
pub mod bpf_elf;
pub mod testbed_prog;

// Included by the build scripts of the crates with root-only tests (`include!`): one
// definition of when they run.

/// Declares `cfg(root)` and sets it when the build runs as root: tests that need root
/// (namespaces, veths, DPDK's EAL) are then run, and reported as ignored with the reason
/// otherwise, never as passed.
fn root_cfg() {
    println!("cargo::rustc-check-cfg=cfg(root)");
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
}

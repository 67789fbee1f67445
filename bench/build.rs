//! Sets `cfg(root)` when the tests are built by root: tests that need network namespaces and
//! veths are then run, and reported as ignored (with the reason) otherwise, never as passed.

fn main() {
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

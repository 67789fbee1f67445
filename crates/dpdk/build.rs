//! Finds Debian's DPDK (`libdpdk-dev`) with pkg-config and compiles the C shim against it,
//! setting `cfg(dpdk)`. Without it the crate still builds: every call answers that DPDK
//! was not there at build time, naming the package to install
//! (`BESSEMER_DPDK_UNAVAILABLE`), and the tests needing it are reported as ignored.

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(dpdk)");
    root_cfg();
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=BESSEMER_NO_DPDK");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    // Installing libdpdk-dev later should rebuild with DPDK: watch where its .pc appears.
    println!("cargo:rerun-if-changed=/usr/lib/x86_64-linux-gnu/pkgconfig/libdpdk.pc");
    if std::env::var_os("BESSEMER_NO_DPDK").is_some() {
        unavailable("built with BESSEMER_NO_DPDK set");
        return;
    }
    let cflags = match pkg_config(&["--cflags", "libdpdk"]) {
        Ok(f) => f,
        Err(why) => {
            unavailable(&why);
            return;
        }
    };
    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(false);
    let mut it = cflags.split_whitespace();
    while let Some(f) = it.next() {
        if let Some(dir) = f.strip_prefix("-I") {
            build.include(dir);
        } else if f == "-include" {
            if let Some(h) = it.next() {
                build.flag("-include").flag(h);
            }
        } else if f.starts_with("-march") {
            // DPDK's headers are built for this; the shim only wraps calls.
            build.flag(f);
        }
    }
    if let Err(e) = build.try_compile("bessemer_dpdk_shim") {
        unavailable(&format!("the DPDK shim did not compile: {e}"));
        return;
    }
    // Only the libraries the shim calls (pkg-config --libs lists all of DPDK's).
    if let Ok(libs) = pkg_config(&["--libs-only-L", "libdpdk"]) {
        for l in libs.split_whitespace() {
            if let Some(dir) = l.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
    }
    for lib in [
        "rte_ethdev",
        "rte_mbuf",
        "rte_mempool",
        "rte_ring",
        "rte_eal",
    ] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rustc-cfg=dpdk");
}

fn unavailable(why: &str) {
    println!("cargo:warning=DPDK unavailable, PMDPort will answer with the reason: {why}");
    println!("cargo:rustc-env=BESSEMER_DPDK_UNAVAILABLE={why}");
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config")
        .args(args)
        .output()
        .map_err(|e| {
            format!("pkg-config could not run ({e}); install pkg-config and libdpdk-dev")
        })?;
    if !out.status.success() {
        return Err("pkg-config finds no libdpdk: install libdpdk-dev (make deps does)".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

include!("../../build-support/root_cfg.rs");

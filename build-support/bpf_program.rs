// Included by the build scripts that compile BPF programs (crates/bpf, crates/drivers).

/// Compiles `src` (with `include` on the header path) into OUT_DIR/`obj`; on failure writes
/// an empty object and says why.
fn compile_bpf(clang: &str, src: &str, obj: &str, include: &str) -> Option<String> {
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed={include}/bessemer_bpf.h");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join(obj);
    let result = std::process::Command::new(clang)
        .args(["-O2", "-Wall", "-target", "bpf", "-I", include, "-c", src, "-o"])
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

/// The clang to use (`BESSEMER_CLANG`, else `clang`), with the rerun triggers that make a
/// later install of clang rebuild the programs.
fn bpf_clang() -> String {
    println!("cargo:rerun-if-env-changed=BESSEMER_CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let clang = std::env::var("BESSEMER_CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-changed=/usr/bin/{clang}");
    clang
}

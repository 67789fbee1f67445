//! Compiles the BESS protocol (`proto/bess`) with protox, as the daemon's build does, but
//! generates only the tonic clients: the controller talks to bessemerd, it serves nothing.
//! The encoded descriptor set is kept for prost-reflect, which turns a pipeline's JSON
//! arguments into the daemon's argument messages.

use std::path::PathBuf;

const FILES: &[&str] = &[
    "error.proto",
    "util_msg.proto",
    "bess_msg.proto",
    "module_msg.proto",
    "ports/port_msg.proto",
    "ext/bessemer_ports.proto",
    "ext/bessemer_observe.proto",
    "ext/bessemer_service.proto",
    "ext/bessemer_esp.proto",
    "plugins/sample_plugin/supdate_msg.proto",
    "service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cfg(root)` when built by root, as in the daemon's build: root-only tests run then.
    root_cfg();
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto/bess");
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::Compiler::new([&root])?
        .include_imports(true)
        .include_source_info(false)
        .open_files(FILES)?
        .file_descriptor_set();
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("bess_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}

include!("../../build-support/root_cfg.rs");

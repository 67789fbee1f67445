//! Compiles `proto/bess/*.proto` (and Bessemer's own `proto/bess/ext/*.proto`, and the
//! messages of the BESS plugins whose classes are built in, `proto/bess/plugins/`) with protox
//! (no system `protoc`), generates the prost messages and the tonic client and server from the
//! descriptor set, and keeps the encoded descriptor set in OUT_DIR for prost-reflect (`Any` <->
//! `Value` conversion).

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
    // `cfg(root)` when built by root: root-only tests run, and are reported as ignored (with
    // the reason) otherwise, never as passed.
    root_cfg();
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto/bess");
    println!("cargo:rerun-if-changed={}", root.display());
    for f in FILES {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
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
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

include!("../../build-support/root_cfg.rs");

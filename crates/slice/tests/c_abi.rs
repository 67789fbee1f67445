//! The C ABI: examples/slice_roundtrip.c is compiled against include/slice.h and the
//! cdylib, then run as the external application of a SlicePort pipeline.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bessemer_core::port::PortParams;
use bessemer_core::testing::Harness;
use bessemer_core::Value;
use bessemer_drivers::slice_port::{slice_counters, DRIVER};
use bessemer_modules::io::{port_inc, port_out};
use bessemer_modules::rewrite::mac_swap;

/// Where the cdylib is: `cargo test` puts it beside this test binary (target/<profile>/deps);
/// a `cargo build` of the crate puts it in target/<profile>.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    if deps.join("libbessemer_slice.so").exists() {
        deps
    } else {
        deps.parent().unwrap().to_path_buf()
    }
}

#[test]
fn c_example_round_trips_through_slice_port() {
    let dir = target_dir();
    let lib = dir.join("libbessemer_slice.so");
    assert!(lib.exists(), "{} was not built", lib.display());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("slice_roundtrip_{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-O2", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("examples/slice_roundtrip.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&dir)
        .arg("-lbessemer_slice")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling the C example failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let path = std::env::temp_dir()
        .join(format!("bessemer-slice-c-{}", std::process::id()))
        .to_string_lossy()
        .into_owned();
    let mut h = Harness::new();
    h.graph
        .ports()
        .create(
            &DRIVER,
            PortParams {
                name: "s0".into(),
                num_inc_q: 0,
                num_out_q: 0,
                size_inc_q: 0,
                size_out_q: 0,
                pool: h.pool.clone(),
            },
            &Value::map().with("path", path.as_str()),
        )
        .unwrap();
    h.add(&port_inc::CLASS, "inc", &Value::map().with("port", "s0"))
        .unwrap();
    h.add(&mac_swap::CLASS, "swap", &Value::Null).unwrap();
    h.add(&port_out::CLASS, "out", &Value::map().with("port", "s0"))
        .unwrap();
    h.connect("inc", 0, "swap", 0).unwrap();
    h.connect("swap", 0, "out", 0).unwrap();

    let mut child = Command::new(&exe)
        .args([path.as_str(), "2000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        h.run_task("inc", 0);
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the C example did not finish within 30 s");
        }
    };
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&exe);
    assert!(
        status.success(),
        "C example failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok 2000 rx=2000 tx=2000 same=2000"
    );
    let c = slice_counters(h.graph.ports().get("s0").unwrap().port()).unwrap();
    assert_eq!((c.from_app_packets, c.to_app_packets), (2000, 2000));
    assert_eq!((c.from_app_zero_copy, c.to_app_zero_copy), (2000, 2000));
    assert_eq!(h.in_use(), 0);
}

//! The C ABI: megapipe.h and examples/c/echo.c compile with cc against libmegapipe.so and the
//! echo server works.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn c_echo_example_compiles_and_echoes() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // cargo test builds the cdylib next to this test binary, in target/<profile>/deps.
    let lib_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        lib_dir.join("libmegapipe.so").exists(),
        "libmegapipe.so not built in {}",
        lib_dir.display()
    );
    let exe = std::env::temp_dir().join(format!("megapipe-echo-{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("examples/c/echo.c"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lmegapipe", "-o"])
        .arg(&exe)
        .output()
        .expect("cc (scripts/install-deps.sh installs gcc)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(&exe)
        .arg("3")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let port: u16 = line.trim().strip_prefix("port ").unwrap().parse().unwrap();
    for i in 0..3 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let msg = format!("hello megapipe {i}");
        c.write_all(msg.as_bytes()).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg.as_bytes());
    }
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let _ = std::fs::remove_file(&exe);
    assert!(status.success(), "echo exited {status}");
    assert_eq!(rest.trim(), "closed 3 handles_open 1 buffers_out 0");
}

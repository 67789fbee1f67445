//! `megapipe_apps`: the protocol parsers of MegaPipe's servers, the memcached text protocol
//! (`apps::kv`) and HTTP/1.1 static files (`apps::http`), on arbitrary byte streams.

use std::path::PathBuf;
use std::sync::OnceLock;

use megapipe::apps::http::StaticFiles;
use megapipe::apps::kv::Kv;
use megapipe::apps::{Flow, OutBuf, Service};

use crate::input::Input;

/// Bytes of a file outside the served root: no response may contain them.
const SECRET: &[u8] = b"bessemer-fuzz-secret-7f3a";

/// A served root (made once per process): index.html, a.txt, big.bin (9 000 bytes),
/// sub/index.html, and a secret file beside the root.
fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("bessemer-fuzz-www-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).expect("make the served root");
        std::fs::write(base.join("secret"), SECRET).expect("write the secret");
        std::fs::write(root.join("index.html"), b"<h1>index</h1>").expect("write");
        std::fs::write(root.join("a.txt"), b"hello").expect("write");
        std::fs::write(root.join("big.bin"), vec![0x5a; 9000]).expect("write");
        std::fs::write(root.join("sub/index.html"), b"<p>sub</p>").expect("write");
        root
    })
}

/// Feeds `stream` to a fresh connection of `svc` in chunks of the sizes `sizes` gives
/// (cycled), as a server would after each read; returns the bytes sent back and whether
/// the service closed. Stops at the first Close, as the servers do.
fn run<S: Service>(svc: &S, stream: &[u8], sizes: &[usize]) -> (Vec<u8>, bool) {
    let mut conn = S::Conn::default();
    let mut input = Vec::new();
    let mut out: Vec<OutBuf> = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    let mut closed = false;
    while pos < stream.len() {
        let n = sizes[k % sizes.len()].clamp(1, stream.len() - pos);
        k += 1;
        input.extend_from_slice(&stream[pos..pos + n]);
        pos += n;
        if svc.process(&mut conn, &mut input, &mut out) == Flow::Close {
            closed = true;
            break;
        }
    }
    let bytes = out
        .iter()
        .flat_map(|b| b.as_ref().iter().copied())
        .collect();
    (bytes, closed)
}

/// The first byte picks the service (even: kv, odd: httpd), the next eight give chunk
/// sizes (1..256 bytes, cycled), the rest is the byte stream a client sends. The stream
/// goes to one connection whole and to another in those chunks. Checked: nothing panics;
/// both answer the same bytes and close alike (a protocol parser must not depend on how
/// TCP cut the stream; a time-dependent difference, an item expiring or `stats` uptime
/// moving between the two runs, is ruled out by running both once more); no HTTP response
/// carries a file from outside the served root.
pub fn megapipe_apps(data: &[u8]) {
    let mut i = Input::new(data);
    let which = i.u8();
    let sizes: Vec<usize> = (0..8).map(|_| 1 + i.u8() as usize).collect();
    let stream = i.rest();
    let whole = [usize::MAX];
    let compare = |a: (Vec<u8>, bool), b: (Vec<u8>, bool)| a == b;
    if which & 1 == 0 {
        let runs = || {
            (
                run(&Kv::default(), stream, &whole),
                run(&Kv::default(), stream, &sizes),
            )
        };
        let (a, b) = runs();
        if !compare(a, b) {
            let (a, b) = runs();
            assert_eq!(
                String::from_utf8_lossy(&a.0),
                String::from_utf8_lossy(&b.0),
                "kv: the whole stream and its chunks answered differently"
            );
            assert_eq!(a.1, b.1, "kv: one run closed, the other did not");
        }
    } else {
        let files = StaticFiles::new(root().clone());
        let a = run(&files, stream, &whole);
        let b = run(&StaticFiles::new(root().clone()), stream, &sizes);
        for out in [&a.0, &b.0] {
            assert!(
                !out.windows(SECRET.len()).any(|w| w == SECRET),
                "httpd served a file outside its root"
            );
        }
        assert_eq!(
            String::from_utf8_lossy(&a.0),
            String::from_utf8_lossy(&b.0),
            "httpd: the whole stream and its chunks answered differently"
        );
        assert_eq!(a.1, b.1, "httpd: one run closed, the other did not");
    }
}

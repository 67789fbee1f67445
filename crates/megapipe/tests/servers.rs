//! bessemer-kv and bessemer-httpd on both backends, driven by a raw memcached client and curl.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BACKENDS: [&str; 2] = ["megapipe", "epoll"];

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(bin: &str, args: &[&str]) -> Server {
        let mut child = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split_whitespace()
            .find_map(|w| w.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Server { child, addr }
    }

    fn kv(io: &str) -> Server {
        Server::start(
            env!("CARGO_BIN_EXE_bessemer-kv"),
            &["--port", "0", "--io", io],
        )
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends SIGTERM and checks the server exits cleanly.
    fn stop(mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "server exit after SIGTERM: {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `req` and reads until the reply ends with `end`.
fn ask(s: &mut TcpStream, req: &[u8], end: &[u8]) -> String {
    s.write_all(req).unwrap();
    read_until(s, end)
}

fn read_until(s: &mut TcpStream, end: &[u8]) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

#[test]
fn kv_speaks_the_memcached_text_protocol() {
    for io in BACKENDS {
        let srv = Server::kv(io);
        let mut c = srv.connect();
        assert_eq!(
            ask(&mut c, b"set foo 5 0 3\r\nbar\r\n", b"\r\n"),
            "STORED\r\n",
            "{io}"
        );
        assert_eq!(
            ask(&mut c, b"get foo\r\n", b"END\r\n"),
            "VALUE foo 5 3\r\nbar\r\nEND\r\n"
        );
        assert_eq!(
            ask(&mut c, b"get nope foo\r\n", b"END\r\n"),
            "VALUE foo 5 3\r\nbar\r\nEND\r\n"
        );
        let gets = ask(&mut c, b"gets foo\r\n", b"END\r\n");
        let cas: u64 = gets.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(
            ask(&mut c, b"add foo 0 0 1\r\nx\r\n", b"\r\n"),
            "NOT_STORED\r\n"
        );
        assert_eq!(
            ask(&mut c, b"add new 0 0 1\r\nx\r\n", b"\r\n"),
            "STORED\r\n"
        );
        assert_eq!(
            ask(&mut c, b"replace gone 0 0 1\r\nx\r\n", b"\r\n"),
            "NOT_STORED\r\n"
        );
        assert_eq!(
            ask(
                &mut c,
                format!("cas foo 0 0 3 {}\r\nbaz\r\n", cas + 1000).as_bytes(),
                b"\r\n"
            ),
            "EXISTS\r\n"
        );
        assert_eq!(
            ask(
                &mut c,
                format!("cas foo 0 0 3 {cas}\r\nbaz\r\n").as_bytes(),
                b"\r\n"
            ),
            "STORED\r\n"
        );
        assert_eq!(
            ask(&mut c, b"replace foo 1 0 2\r\nqq\r\n", b"\r\n"),
            "STORED\r\n"
        );
        assert_eq!(
            ask(&mut c, b"get foo\r\n", b"END\r\n"),
            "VALUE foo 1 2\r\nqq\r\nEND\r\n"
        );
        assert_eq!(
            ask(&mut c, b"set n 0 0 2\r\n10\r\nincr n 5\r\n", b"15\r\n"),
            "STORED\r\n15\r\n",
            "pipelined"
        );
        assert_eq!(ask(&mut c, b"decr n 100\r\n", b"\r\n"), "0\r\n");
        assert_eq!(
            ask(&mut c, b"incr foo 1\r\n", b"\r\n"),
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
        assert_eq!(ask(&mut c, b"incr none 1\r\n", b"\r\n"), "NOT_FOUND\r\n");
        assert_eq!(ask(&mut c, b"delete foo\r\n", b"\r\n"), "DELETED\r\n");
        assert_eq!(ask(&mut c, b"delete foo\r\n", b"\r\n"), "NOT_FOUND\r\n");
        assert_eq!(
            ask(&mut c, b"set q 0 0 1 noreply\r\nz\r\nget q\r\n", b"END\r\n"),
            "VALUE q 0 1\r\nz\r\nEND\r\n"
        );
        assert!(ask(&mut c, b"version\r\n", b"\r\n").starts_with("VERSION bessemer-kv"));
        let stats = ask(&mut c, b"stats\r\n", b"END\r\n");
        assert!(stats.contains("STAT curr_items 3\r\n"), "{stats}");
        assert!(stats.contains("STAT get_hits"), "{stats}");
        assert_eq!(ask(&mut c, b"flush_all\r\n", b"\r\n"), "OK\r\n");
        assert_eq!(ask(&mut c, b"get q\r\n", b"END\r\n"), "END\r\n");
        // A large value crosses many receive buffers.
        let big = vec![b'v'; 300_000];
        let mut req = b"set big 0 0 300000\r\n".to_vec();
        req.extend_from_slice(&big);
        req.extend_from_slice(b"\r\n");
        assert_eq!(ask(&mut c, &req, b"\r\n"), "STORED\r\n");
        let got = ask(&mut c, b"get big\r\n", b"END\r\n");
        assert_eq!(got.len(), "VALUE big 0 300000\r\n".len() + 300_000 + 7);
        c.write_all(b"quit\r\n").unwrap();
        assert_closed(&mut c);
        srv.stop();
    }
}

#[test]
fn kv_rejects_bad_input_without_stalling_others() {
    for io in BACKENDS {
        let srv = Server::kv(io);
        let mut c = srv.connect();
        let long_key = "k".repeat(251);
        assert_eq!(
            ask(&mut c, format!("get {long_key}\r\n").as_bytes(), b"\r\n"),
            "CLIENT_ERROR bad command line format\r\n",
            "{io}"
        );
        assert_eq!(
            ask(&mut c, b"set x 0 0 notanumber\r\n", b"\r\n"),
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(ask(&mut c, b"bogus\r\n", b"\r\n"), "ERROR\r\n");
        assert_eq!(
            ask(&mut c, b"set x 0 0 1\r\nabc\r\n", b"\r\n"),
            "CLIENT_ERROR bad data chunk\r\n"
        );
        assert_closed(&mut c);
        // Too large a value is refused and its data skipped; the connection goes on.
        let mut c = srv.connect();
        let mut req = format!("set huge 0 0 {}\r\n", 2 << 20).into_bytes();
        req.extend(std::iter::repeat_n(b'h', 2 << 20));
        req.extend_from_slice(b"\r\nget huge\r\n");
        assert_eq!(
            ask(&mut c, &req, b"END\r\n"),
            "SERVER_ERROR object too large for cache\r\nEND\r\n"
        );
        // A 1 MiB line gets an error and the connection is closed.
        let mut c2 = srv.connect();
        let mut line = vec![b'g'; 1 << 20];
        line.extend_from_slice(b"\r\n");
        let _ = c2.write_all(&line);
        assert_eq!(
            read_until(&mut c2, b"\r\n"),
            "CLIENT_ERROR line too long\r\n"
        );
        assert_closed(&mut c2);
        // A client that asks for far more than it reads does not stall anyone else.
        let mut value = b"set v 0 0 500000\r\n".to_vec();
        value.extend(std::iter::repeat_n(b'x', 500_000));
        value.extend_from_slice(b"\r\n");
        assert_eq!(ask(&mut c, &value, b"\r\n"), "STORED\r\n");
        let mut hog = srv.connect();
        hog.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        for _ in 0..400 {
            if hog.write_all(b"get v\r\n").is_err() {
                break;
            }
        }
        for i in 0..50 {
            assert_eq!(
                ask(
                    &mut c,
                    format!("set k{i} 0 0 1\r\n1\r\nget k{i}\r\n").as_bytes(),
                    b"END\r\n"
                ),
                format!("STORED\r\nVALUE k{i} 0 1\r\n1\r\nEND\r\n")
            );
        }
        drop(hog);
        srv.stop();
    }
}

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn httpd_serves_files_to_curl_and_handles_bad_requests() {
    let root = std::env::temp_dir().join(format!("bessemer-httpd-test-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("index.html"), "<h1>home</h1>\n").unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("sub/big.bin"), &big).unwrap();
    for io in BACKENDS {
        let srv = Server::start(
            env!("CARGO_BIN_EXE_bessemer-httpd"),
            &["--root", root.to_str().unwrap(), "--port", "0", "--io", io],
        );
        let base = format!("http://{}", srv.addr);
        let (body, _) = curl(&[&format!("{base}/")]);
        assert_eq!(body, "<h1>home</h1>\n", "{io}");
        let (head, _) = curl(&["-I", &format!("{base}/index.html")]);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("Content-Length: 14\r\n") && head.contains("Content-Type: text/html\r\n"),
            "{head}"
        );
        let out = root.join(format!("got-{io}"));
        let (_, verbose) = curl(&[
            "-v",
            "-o",
            out.to_str().unwrap(),
            &format!("{base}/sub/big.bin"),
            "-o",
            "/dev/null",
            &format!("{base}/index.html"),
        ]);
        assert_eq!(std::fs::read(&out).unwrap(), big);
        assert!(
            verbose.contains("Re-using existing connection")
                || verbose.contains("Reusing existing"),
            "keep-alive: {verbose}"
        );
        let (code, _) = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{base}/missing"),
        ]);
        assert_eq!(code, "404");
        let (code, _) = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "-d",
            "x=1",
            &format!("{base}/"),
        ]);
        assert_eq!(code, "405");
        let (code, _) = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--path-as-is",
            &format!("{base}/../etc/passwd"),
        ]);
        assert_eq!(code, "404");

        // Pipelining: two requests in one write, two responses in order on one connection.
        let mut c = srv.connect();
        let both = ask(
            &mut c,
            b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
            b"404 Not Found\n",
        );
        let first = both.find("200 OK").unwrap();
        let second = both.find("404 Not Found").unwrap();
        assert!(first < second && both.contains("<h1>home</h1>"), "{both}");
        // Malformed request line: 400 and close.
        let r = ask(&mut c, b"NONSENSE\r\n\r\n", b"400 Bad Request\n");
        assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{r}");
        assert_closed(&mut c);
        // A 1 MiB request line: 414 and close.
        let mut c = srv.connect();
        let mut line = b"GET /".to_vec();
        line.extend(std::iter::repeat_n(b'a', 1 << 20));
        let _ = c.write_all(&line);
        let r = read_until(&mut c, b"414 URI Too Long\n");
        assert!(r.starts_with("HTTP/1.1 414"), "{r}");
        // A client that never reads does not stall others.
        let mut hog = srv.connect();
        hog.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        for _ in 0..2000 {
            if hog
                .write_all(b"GET /sub/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                .is_err()
            {
                break;
            }
        }
        for _ in 0..20 {
            let (body, _) = curl(&[&format!("{base}/index.html")]);
            assert_eq!(body, "<h1>home</h1>\n");
        }
        drop(hog);
        srv.stop();
    }
    let _ = std::fs::remove_dir_all(&root);
}

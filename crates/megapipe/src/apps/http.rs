//! HTTP/1.1 static files: GET and HEAD, keep-alive, pipelining, header and body sent with one
//! writev, Content-Length; 400/404/405/414/431 for bad requests, 503 when a file cannot be
//! opened for want of descriptors or memory.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::{push_bytes, Flow, OutBuf, Service};

/// Longest request line.
pub const MAX_REQUEST_LINE: usize = 8192;
/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16384;

/// Serves files under a root directory. File contents are cached in memory on first use
/// (restart to see changed files), as the servers in the comparison serve from page cache.
pub struct StaticFiles {
    root: PathBuf,
    cache: RwLock<HashMap<String, Arc<[u8]>>>,
}

impl StaticFiles {
    /// Serves `root`.
    pub fn new(root: impl Into<PathBuf>) -> StaticFiles {
        StaticFiles {
            root: root.into(),
            cache: RwLock::new(HashMap::new()),
        }
    }

    fn lookup(&self, path: &str) -> Lookup {
        if let Some(b) = self.cache.read().unwrap().get(path) {
            return Lookup::Found(b.clone());
        }
        let rel = Path::new(path.trim_start_matches('/'));
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Lookup::NotFound;
        }
        let mut full = self.root.join(rel);
        if full.is_dir() {
            full.push("index.html");
        }
        let data: Arc<[u8]> = match std::fs::read(&full) {
            Ok(d) => d.into(),
            // Out of descriptors or memory: the file may well exist; the client may retry.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
                ) =>
            {
                return Lookup::Unavailable
            }
            Err(_) => return Lookup::NotFound,
        };
        self.cache
            .write()
            .unwrap()
            .insert(path.to_string(), data.clone());
        Lookup::Found(data)
    }
}

/// What a path names.
enum Lookup {
    Found(Arc<[u8]>),
    NotFound,
    /// The server could not open it for now (e.g. at its descriptor limit).
    Unavailable,
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" | "htm" => "text/html",
        "txt" => "text/plain",
        "css" => "text/css",
        "js" => "application/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn status_response(out: &mut Vec<OutBuf>, code: u16, reason: &str, extra: &str, keep_alive: bool) {
    let body = format!("{code} {reason}\n");
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nServer: bessemer-httpd\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}Connection: {}\r\n\r\n{body}",
        body.len(),
        if keep_alive { "keep-alive" } else { "close" }
    );
    push_bytes(out, head.as_bytes());
}

impl Service for StaticFiles {
    type Conn = ();

    fn process(&self, _: &mut (), input: &mut Vec<u8>, out: &mut Vec<OutBuf>) -> Flow {
        let mut pos = 0;
        let flow = loop {
            let rest = &input[pos..];
            // The request line's length is judged first, the same whether the head arrived
            // whole or in pieces (the answer must not depend on how the stream was cut).
            let line_len = rest.windows(2).position(|w| w == b"\r\n");
            if line_len.unwrap_or(rest.len()) > MAX_REQUEST_LINE {
                status_response(out, 414, "URI Too Long", "", false);
                break Flow::Close;
            }
            let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
                if rest.len() > MAX_HEAD {
                    status_response(out, 431, "Request Header Fields Too Large", "", false);
                    break Flow::Close;
                }
                break Flow::Continue;
            };
            if end > MAX_HEAD {
                status_response(out, 431, "Request Header Fields Too Large", "", false);
                break Flow::Close;
            }
            let Ok(head) = std::str::from_utf8(&rest[..end]) else {
                status_response(out, 400, "Bad Request", "", false);
                break Flow::Close;
            };
            pos += end + 4;
            let mut lines = head.split("\r\n");
            let request_line = lines.next().unwrap_or("");
            let parts: Vec<&str> = request_line.split(' ').collect();
            let [method, target, version] = parts[..] else {
                status_response(out, 400, "Bad Request", "", false);
                break Flow::Close;
            };
            let http11 = match version {
                "HTTP/1.1" => true,
                "HTTP/1.0" => false,
                _ => {
                    status_response(out, 400, "Bad Request", "", false);
                    break Flow::Close;
                }
            };
            let mut keep_alive = http11;
            let mut has_body = false;
            let mut bad_header = false;
            for h in lines {
                let Some((name, value)) = h.split_once(':') else {
                    bad_header = true;
                    break;
                };
                let value = value.trim();
                if name.eq_ignore_ascii_case("connection") {
                    if value.eq_ignore_ascii_case("close") {
                        keep_alive = false;
                    } else if value.eq_ignore_ascii_case("keep-alive") {
                        keep_alive = true;
                    }
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    || (name.eq_ignore_ascii_case("content-length") && value != "0")
                {
                    has_body = true;
                }
            }
            if bad_header {
                status_response(out, 400, "Bad Request", "", false);
                break Flow::Close;
            }
            if method != "GET" && method != "HEAD" {
                // A body we do not read would be taken for the next request: close.
                status_response(
                    out,
                    405,
                    "Method Not Allowed",
                    "Allow: GET, HEAD\r\n",
                    false,
                );
                break Flow::Close;
            }
            if has_body {
                status_response(out, 400, "Bad Request", "", false);
                break Flow::Close;
            }
            let path = target.split('?').next().unwrap_or("");
            let Some(path) = percent_decode(path).filter(|p| p.starts_with('/')) else {
                status_response(out, 400, "Bad Request", "", keep_alive);
                if keep_alive {
                    continue;
                }
                break Flow::Close;
            };
            match self.lookup(&path) {
                Lookup::Found(body) => {
                    let ct = if path.ends_with('/') {
                        "text/html"
                    } else {
                        content_type(&path)
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nServer: bessemer-httpd\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
                        body.len(),
                        if keep_alive { "keep-alive" } else { "close" }
                    );
                    push_bytes(out, head.as_bytes());
                    if method == "GET" {
                        out.push(OutBuf::Shared(body));
                    }
                }
                Lookup::NotFound => status_response(out, 404, "Not Found", "", keep_alive),
                Lookup::Unavailable => status_response(
                    out,
                    503,
                    "Service Unavailable",
                    "Retry-After: 1\r\n",
                    keep_alive,
                ),
            }
            if !keep_alive {
                break Flow::Close;
            }
        };
        input.drain(..pos);
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let svc = StaticFiles::new("/nonexistent-bessemer-root");
        let (mut input, mut out, mut closed) = (Vec::new(), Vec::new(), false);
        for c in chunks {
            input.extend_from_slice(c);
            if svc.process(&mut (), &mut input, &mut out) == Flow::Close {
                closed = true;
                break;
            }
        }
        let bytes = out.iter().flat_map(|b| b.as_ref().to_vec()).collect();
        (bytes, closed)
    }

    #[test]
    fn an_over_long_request_line_gets_414_however_the_stream_is_cut() {
        // Found by fuzzing: whole, the line went to the parser (400, or no answer while the
        // head was incomplete); in pieces it got 414.
        let mut line = b"GET /".to_vec();
        line.extend(std::iter::repeat_n(b'a', 12_000));
        line.push(0xff);
        line.extend_from_slice(b" HTTP/1.1\r\n");
        for tail in [&b"\r\n"[..], &b"Host: x\r\n"[..]] {
            let mut whole = line.clone();
            whole.extend_from_slice(tail);
            let one = answer(&[&whole]);
            let pieces: Vec<&[u8]> = whole.chunks(5000).collect();
            let many = answer(&pieces);
            assert_eq!(one, many);
            assert!(one.1, "closed");
            assert!(
                one.0.starts_with(b"HTTP/1.1 414 "),
                "{}",
                String::from_utf8_lossy(&one.0)
            );
        }
    }
}

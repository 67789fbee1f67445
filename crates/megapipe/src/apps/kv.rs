//! The memcached text protocol (get/gets/set/add/replace/cas/delete/incr/decr/flush_all/
//! version/stats/quit) over a sharded in-memory store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{push_bytes, Flow, OutBuf, Service};

/// Longest key memcached accepts.
pub const MAX_KEY: usize = 250;
/// Longest command line (memcached's limit is of this order); longer lines get an error and
/// the connection is closed, as the rest of the line cannot be trusted.
pub const MAX_LINE: usize = 2048;
/// Largest value (memcached's default item size limit).
pub const MAX_VALUE: usize = 1 << 20;

struct Item {
    flags: u32,
    /// Absolute expiry in unix seconds, 0 for never.
    expires: u64,
    cas: u64,
    data: Arc<[u8]>,
}

/// The store and its counters, shared by every connection and thread.
pub struct Kv {
    shards: Vec<Mutex<HashMap<Vec<u8>, Item>>>,
    cas: AtomicU64,
    started: u64,
    gets: AtomicU64,
    hits: AtomicU64,
    sets: AtomicU64,
    conns: AtomicU64,
}

impl Default for Kv {
    fn default() -> Self {
        Kv {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
            cas: AtomicU64::new(1),
            started: now(),
            gets: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            sets: AtomicU64::new(0),
            conns: AtomicU64::new(0),
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A `set`-family command waiting for its data block.
struct PendingStore {
    cmd: Store,
    key: Vec<u8>,
    flags: u32,
    expires: u64,
    bytes: usize,
    cas: u64,
    noreply: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    Set,
    Add,
    Replace,
    Cas,
    Append,
    Prepend,
}

/// Per-connection protocol state.
#[derive(Default)]
pub struct KvConn {
    pending: Option<PendingStore>,
    /// Bytes of an oversized data block still to discard.
    skip: usize,
    counted: bool,
}

impl Kv {
    fn shard(&self, key: &[u8]) -> &Mutex<HashMap<Vec<u8>, Item>> {
        // FNV-1a: cheap and good enough to spread keys over shards.
        let mut h: u64 = 0xcbf29ce484222325;
        for &b in key {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        &self.shards[(h as usize) % self.shards.len()]
    }

    fn expiry(exptime: i64) -> u64 {
        // memcached: 0 never; up to 30 days relative; larger is an absolute unix time;
        // negative means already expired.
        if exptime == 0 {
            0
        } else if exptime < 0 {
            1
        } else if exptime <= 60 * 60 * 24 * 30 {
            now() + exptime as u64
        } else {
            exptime as u64
        }
    }

    fn live(item: &Item) -> bool {
        item.expires == 0 || item.expires > now()
    }

    fn get(&self, keys: &[&[u8]], with_cas: bool, out: &mut Vec<OutBuf>) {
        for key in keys {
            self.gets.fetch_add(1, Ordering::Relaxed);
            let found = {
                let shard = self.shard(key).lock().unwrap();
                shard
                    .get(*key)
                    .filter(|i| Self::live(i))
                    .map(|i| (i.flags, i.cas, i.data.clone()))
            };
            if let Some((flags, cas, data)) = found {
                self.hits.fetch_add(1, Ordering::Relaxed);
                let mut head = Vec::with_capacity(key.len() + 40);
                head.extend_from_slice(b"VALUE ");
                head.extend_from_slice(key);
                if with_cas {
                    head.extend_from_slice(format!(" {flags} {} {cas}\r\n", data.len()).as_bytes());
                } else {
                    head.extend_from_slice(format!(" {flags} {}\r\n", data.len()).as_bytes());
                }
                push_bytes(out, &head);
                if data.len() > 4096 {
                    out.push(OutBuf::Shared(data));
                } else {
                    push_bytes(out, &data);
                }
                push_bytes(out, b"\r\n");
            }
        }
        push_bytes(out, b"END\r\n");
    }

    fn store(&self, p: PendingStore, data: &[u8]) -> &'static [u8] {
        self.sets.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(&p.key).lock().unwrap();
        let existing = shard.get(&p.key).filter(|i| Self::live(i));
        let ok = match p.cmd {
            Store::Set => true,
            Store::Add => existing.is_none(),
            Store::Replace | Store::Append | Store::Prepend => existing.is_some(),
            Store::Cas => match existing {
                None => return b"NOT_FOUND\r\n",
                Some(i) if i.cas != p.cas => return b"EXISTS\r\n",
                Some(_) => true,
            },
        };
        if !ok {
            return b"NOT_STORED\r\n";
        }
        let cas = self.cas.fetch_add(1, Ordering::Relaxed);
        let (flags, expires, data): (u32, u64, Arc<[u8]>) = match (p.cmd, existing) {
            (Store::Append, Some(i)) => (i.flags, i.expires, [&i.data[..], data].concat().into()),
            (Store::Prepend, Some(i)) => (i.flags, i.expires, [data, &i.data[..]].concat().into()),
            _ => (p.flags, p.expires, data.into()),
        };
        shard.insert(
            p.key,
            Item {
                flags,
                expires,
                cas,
                data,
            },
        );
        b"STORED\r\n"
    }

    fn delete(&self, key: &[u8]) -> &'static [u8] {
        let mut shard = self.shard(key).lock().unwrap();
        match shard.remove(key) {
            Some(i) if Self::live(&i) => b"DELETED\r\n",
            _ => b"NOT_FOUND\r\n",
        }
    }

    fn incr(&self, key: &[u8], delta: u64, up: bool) -> Vec<u8> {
        let mut shard = self.shard(key).lock().unwrap();
        let Some(item) = shard.get_mut(key).filter(|i| Self::live(i)) else {
            return b"NOT_FOUND\r\n".to_vec();
        };
        let cur = std::str::from_utf8(&item.data)
            .ok()
            .and_then(|s| s.trim_end().parse::<u64>().ok());
        let Some(cur) = cur else {
            return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_vec();
        };
        let new = if up {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        item.data = new.to_string().into_bytes().into();
        item.cas = self.cas.fetch_add(1, Ordering::Relaxed);
        format!("{new}\r\n").into_bytes()
    }

    fn stats(&self) -> Vec<u8> {
        let items: usize = self.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        let mut s = String::new();
        let mut stat = |k: &str, v: String| s.push_str(&format!("STAT {k} {v}\r\n"));
        stat("pid", std::process::id().to_string());
        stat("uptime", (now() - self.started).to_string());
        stat("version", env!("CARGO_PKG_VERSION").to_string());
        stat("curr_items", items.to_string());
        stat(
            "total_connections",
            self.conns.load(Ordering::Relaxed).to_string(),
        );
        stat("cmd_get", self.gets.load(Ordering::Relaxed).to_string());
        stat("cmd_set", self.sets.load(Ordering::Relaxed).to_string());
        stat("get_hits", self.hits.load(Ordering::Relaxed).to_string());
        stat(
            "get_misses",
            (self.gets.load(Ordering::Relaxed) - self.hits.load(Ordering::Relaxed)).to_string(),
        );
        s.push_str("END\r\n");
        s.into_bytes()
    }

    /// Handles one command line (without its line end).
    fn command(&self, conn: &mut KvConn, line: &[u8], out: &mut Vec<OutBuf>) -> Flow {
        let toks: Vec<&[u8]> = line
            .split(|b| *b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        let Some(&cmd) = toks.first() else {
            push_bytes(out, b"ERROR\r\n");
            return Flow::Continue;
        };
        const FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
        let num = |t: &[u8]| {
            std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
        };
        let unum = |t: &[u8]| {
            std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
        };
        let key_ok = |k: &[u8]| k.len() <= MAX_KEY && k.iter().all(|b| *b > b' ' && *b != 0x7f);
        match cmd {
            b"get" | b"gets" => {
                let keys = &toks[1..];
                if keys.is_empty() || !keys.iter().all(|k| key_ok(k)) {
                    push_bytes(out, FORMAT);
                } else {
                    self.get(keys, cmd == b"gets", out);
                }
            }
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                let is_cas = cmd == b"cas";
                let need = if is_cas { 6 } else { 5 };
                if toks.len() < need || toks.len() > need + 1 || !key_ok(toks[1]) {
                    push_bytes(out, FORMAT);
                    return Flow::Continue;
                }
                let (Some(flags), Some(exptime), Some(bytes)) =
                    (unum(toks[2]), num(toks[3]), num(toks[4]))
                else {
                    push_bytes(out, FORMAT);
                    return Flow::Continue;
                };
                let cas = if is_cas { unum(toks[5]) } else { Some(0) };
                if bytes < 0 || flags > u32::MAX as u64 || cas.is_none() {
                    push_bytes(out, FORMAT);
                    return Flow::Continue;
                }
                let noreply = toks.len() == need + 1 && toks[need] == b"noreply";
                let bytes = bytes as usize;
                if bytes > MAX_VALUE {
                    push_bytes(out, b"SERVER_ERROR object too large for cache\r\n");
                    conn.skip = bytes + 2;
                    return Flow::Continue;
                }
                let store = match cmd {
                    b"set" => Store::Set,
                    b"add" => Store::Add,
                    b"replace" => Store::Replace,
                    b"append" => Store::Append,
                    b"prepend" => Store::Prepend,
                    _ => Store::Cas,
                };
                conn.pending = Some(PendingStore {
                    cmd: store,
                    key: toks[1].to_vec(),
                    flags: flags as u32,
                    expires: Self::expiry(exptime),
                    bytes,
                    cas: cas.unwrap_or(0),
                    noreply,
                });
            }
            b"delete" => {
                if toks.len() < 2 || toks.len() > 3 || !key_ok(toks[1]) {
                    push_bytes(out, FORMAT);
                } else {
                    let r = self.delete(toks[1]);
                    if toks.get(2) != Some(&&b"noreply"[..]) {
                        push_bytes(out, r);
                    }
                }
            }
            b"incr" | b"decr" => {
                let delta = toks.get(2).and_then(|t| unum(t));
                if toks.len() < 3 || toks.len() > 4 || !key_ok(toks[1]) {
                    push_bytes(out, FORMAT);
                } else if let Some(delta) = delta {
                    let r = self.incr(toks[1], delta, cmd == b"incr");
                    if toks.get(3) != Some(&&b"noreply"[..]) {
                        push_bytes(out, &r);
                    }
                } else {
                    push_bytes(out, b"CLIENT_ERROR invalid numeric delta argument\r\n");
                }
            }
            b"flush_all" => {
                for s in &self.shards {
                    s.lock().unwrap().clear();
                }
                if toks.last() != Some(&&b"noreply"[..]) {
                    push_bytes(out, b"OK\r\n");
                }
            }
            b"version" => push_bytes(
                out,
                concat!("VERSION bessemer-kv ", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes(),
            ),
            b"stats" => push_bytes(out, &self.stats()),
            b"quit" => return Flow::Close,
            _ => push_bytes(out, b"ERROR\r\n"),
        }
        Flow::Continue
    }
}

impl Service for Kv {
    type Conn = KvConn;

    fn process(&self, conn: &mut KvConn, input: &mut Vec<u8>, out: &mut Vec<OutBuf>) -> Flow {
        if !conn.counted {
            conn.counted = true;
            self.conns.fetch_add(1, Ordering::Relaxed);
        }
        let mut pos = 0;
        let flow = loop {
            if conn.skip > 0 {
                let n = conn.skip.min(input.len() - pos);
                conn.skip -= n;
                pos += n;
                if conn.skip > 0 {
                    break Flow::Continue;
                }
            }
            if let Some(p) = conn.pending.as_ref() {
                let need = p.bytes + 2;
                if input.len() - pos < need {
                    break Flow::Continue;
                }
                let block = &input[pos..pos + need];
                let p = conn.pending.take().unwrap();
                pos += need;
                if &block[p.bytes..] != b"\r\n" {
                    push_bytes(out, b"CLIENT_ERROR bad data chunk\r\n");
                    break Flow::Close;
                }
                let noreply = p.noreply;
                let r = self.store(p, &block[..block.len() - 2]);
                if !noreply {
                    push_bytes(out, r);
                }
                continue;
            }
            let rest = &input[pos..];
            let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                if rest.len() > MAX_LINE {
                    push_bytes(out, b"CLIENT_ERROR line too long\r\n");
                    break Flow::Close;
                }
                break Flow::Continue;
            };
            if nl > MAX_LINE {
                push_bytes(out, b"CLIENT_ERROR line too long\r\n");
                break Flow::Close;
            }
            let line_end = if nl > 0 && rest[nl - 1] == b'\r' {
                nl - 1
            } else {
                nl
            };
            let line = rest[..line_end].to_vec();
            pos += nl + 1;
            if self.command(conn, &line, out) == Flow::Close {
                break Flow::Close;
            }
        };
        input.drain(..pos);
        flow
    }
}

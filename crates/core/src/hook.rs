//! Gate hooks (BESS's `GateHook`): observers that see every batch crossing a gate, installed
//! and removed at run time (`tcpdump`, `track`). A gate without hooks pays one length check.

use crate::batch::PacketBatch;
use crate::error::{Error, Result};
use crate::pcap;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Something called with each batch that crosses a gate, before the next module runs.
pub trait GateHook: Send + Sync + 'static {
    /// The hook class name, e.g. "tcpdump".
    fn class_name(&self) -> &'static str;
    /// Sees a batch (read-only).
    fn on_batch(&self, batch: &PacketBatch);
    /// A one-line status for listings.
    fn desc(&self) -> String {
        String::new()
    }
}

/// A hook installed under a name on one gate.
#[derive(Clone)]
pub struct NamedHook {
    /// The instance name (unique per gate).
    pub name: String,
    /// The hook.
    pub hook: Arc<dyn GateHook>,
}

/// Which side of a module a gate is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateDir {
    /// An input gate.
    In,
    /// An output gate.
    Out,
}

/// One installed hook, for listings.
#[derive(Clone, Debug)]
pub struct HookPlace {
    /// The module.
    pub module: String,
    /// Input or output gate.
    pub dir: GateDir,
    /// The gate number.
    pub gate: u16,
    /// The hook instance name.
    pub name: String,
    /// The hook class.
    pub class: &'static str,
}

/// Runs the hooks of a gate on a batch.
#[inline(always)]
pub(crate) fn run_hooks(hooks: &[NamedHook], batch: &PacketBatch) {
    for h in hooks {
        h.hook.on_batch(batch);
    }
}

/// Writes every packet crossing the gate to a named pipe in pcap format (BESS's `tcpdump`
/// hook, read by `tcpdump -r FIFO`). Writes never block the worker: a packet the pipe has no
/// room for is skipped and counted, and a reader that goes away detaches the hook's output.
pub struct TcpdumpHook {
    path: String,
    fd: AtomicI32,
    /// Held while writing (records stay whole when several workers share the hook); when no
    /// FIFO is open, when to try opening it again (never, once the reader went away).
    retry: Mutex<Retry>,
    written: AtomicU64,
    skipped: AtomicU64,
}

/// When a hook without an open FIFO tries to open it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// At the next batch.
    Now,
    /// At the first batch after this time (a deferred FIFO without a reader yet).
    At(Instant),
    /// Never: the reader went away.
    Never,
}

/// Largest record written in one piece: pipe writes up to PIPE_BUF bytes are atomic, so a
/// reader never sees half a record.
const MAX_RECORD: usize = libc::PIPE_BUF;

impl TcpdumpHook {
    /// Opens `fifo` for writing. With `defer`, a FIFO that has no reader yet is opened later
    /// (retried at most once a millisecond); without it that is an error.
    pub fn open(fifo: &str, defer: bool) -> Result<TcpdumpHook> {
        let h = TcpdumpHook {
            path: fifo.to_string(),
            fd: AtomicI32::new(-1),
            retry: Mutex::new(Retry::Now),
            written: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        };
        match h.try_open() {
            Ok(()) => Ok(h),
            Err(e) if defer && e.code == libc::ENXIO => Ok(h),
            Err(e) => Err(e),
        }
    }

    fn try_open(&self) -> Result<()> {
        let c = CString::new(self.path.as_bytes())
            .map_err(|_| Error::invalid(format!("fifo path '{}' contains NUL", self.path)))?;
        // SAFETY: a valid NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            let code = err.raw_os_error().unwrap_or(libc::EIO);
            let why = if code == libc::ENXIO {
                "no reader has it open".to_string()
            } else {
                err.to_string()
            };
            return Err(Error::new(
                code,
                format!("cannot open fifo '{}': {why}", self.path),
            ));
        }
        let hdr = pcap::file_header();
        // SAFETY: fd is open; hdr is a live buffer.
        let n = unsafe { libc::write(fd, hdr.as_ptr().cast(), hdr.len()) };
        if n != hdr.len() as isize {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Err(Error::new(
                libc::EIO,
                format!("cannot write the pcap header to '{}'", self.path),
            ));
        }
        self.fd.store(fd, Ordering::Release);
        Ok(())
    }

    /// Packets written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Packets not written (pipe full or no reader).
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    fn close(&self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: fd was ours and is no longer published.
            unsafe { libc::close(fd) };
        }
    }
}

impl Drop for TcpdumpHook {
    fn drop(&mut self) {
        self.close();
    }
}

impl GateHook for TcpdumpHook {
    fn class_name(&self) -> &'static str {
        "tcpdump"
    }

    fn on_batch(&self, batch: &PacketBatch) {
        let mut retry = self.retry.lock().unwrap_or_else(|p| p.into_inner());
        if self.fd.load(Ordering::Acquire) < 0 {
            let now = Instant::now();
            let due = match *retry {
                Retry::Now => true,
                Retry::At(t) => now >= t,
                Retry::Never => false,
            };
            if !due || self.try_open().is_err() {
                if *retry != Retry::Never {
                    *retry = Retry::At(now + std::time::Duration::from_millis(1));
                }
                self.skipped
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                return;
            }
        }
        let fd = self.fd.load(Ordering::Acquire);
        let ts = pcap::Timestamp::now();
        for (i, p) in batch.pkts().iter().enumerate() {
            let data = p.data();
            let cap = data.len().min(MAX_RECORD - pcap::RECORD_HEADER_LEN);
            let hdr = pcap::record_header(ts, cap as u32, data.len() as u32);
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr() as *mut libc::c_void,
                    iov_len: hdr.len(),
                },
                libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void,
                    iov_len: cap,
                },
            ];
            let len = hdr.len() + cap;
            // SAFETY: fd is open while we hold the lock; both buffers live across the call.
            let n = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
            if n == len as isize {
                self.written.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.skipped.fetch_add(1, Ordering::Relaxed);
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
                // The reader is gone: stop writing (the hook stays until removed).
                self.close();
                self.skipped
                    .fetch_add((batch.len() - i - 1) as u64, Ordering::Relaxed);
                *retry = Retry::Never;
                return;
            }
        }
    }

    fn desc(&self) -> String {
        format!(
            "fifo={} written={} skipped={}",
            self.path,
            self.written(),
            self.skipped()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PacketPool;
    use std::io::Read;

    fn mkfifo(path: &std::path::Path) {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn tcpdump_hook_writes_pcap_records_to_a_fifo() {
        let dir = std::env::temp_dir().join(format!("bessemer-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("t.fifo");
        let _ = std::fs::remove_file(&fifo);
        mkfifo(&fifo);
        let fs = fifo.to_str().unwrap().to_string();
        let e = TcpdumpHook::open(&fs, false).err().unwrap();
        assert_eq!(e.code, libc::ENXIO, "{}", e.msg);
        assert!(e.msg.contains("no reader"), "{}", e.msg);
        // Reader first (non-blocking open), then the hook.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblock()
            .open(&fifo)
            .unwrap();
        let hook = TcpdumpHook::open(&fs, false).unwrap();
        let pool = PacketPool::new("hooktest", 64, crate::mem::PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut b = PacketBatch::new();
        assert_eq!(cache.alloc_bulk(&mut b, 3, 60), 3);
        for (i, p) in b.pkts_mut().iter_mut().enumerate() {
            p.data_mut().fill(i as u8 + 1);
        }
        hook.on_batch(&b);
        assert_eq!(hook.written(), 3);
        let mut bytes = Vec::new();
        let _ = reader.read_to_end(&mut bytes);
        let recs = pcap::parse(&bytes).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2].data, vec![3u8; 60]);
        assert_eq!(recs[2].orig_len, 60);
        cache.free_bulk(&mut b);
        drop(reader);
        // Reader gone: writes stop without an error or a signal.
        assert_eq!(cache.alloc_bulk(&mut b, 2, 60), 2);
        hook.on_batch(&b);
        assert_eq!(hook.skipped(), 2);
        cache.free_bulk(&mut b);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    trait NonBlock {
        fn custom_flags_nonblock(&mut self) -> &mut Self;
    }
    impl NonBlock for std::fs::OpenOptions {
        fn custom_flags_nonblock(&mut self) -> &mut Self {
            use std::os::unix::fs::OpenOptionsExt;
            self.custom_flags(libc::O_NONBLOCK)
        }
    }
}

//! Gate hooks (BESS's `GateHook`): observers that see every batch crossing a gate, installed
//! and removed at run time (BESS's classes `Track`, `TcpDump`, `PcapNg`). A gate without hooks
//! pays one length check.

use crate::batch::PacketBatch;
use crate::error::{Error, Result};
use crate::pcap;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Something called with each batch that crosses a gate, before the next module runs.
pub trait GateHook: Send + Sync + 'static {
    /// The hook class name, e.g. "TcpDump".
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

/// BESS's `Track` hook. Packet and batch counts are kept on every connected output gate
/// whether or not it has one (BESS installs a `Track` on each at connect time); this marker
/// stands for a hook a client enabled, and the gate counts bytes while one with `bits` is on.
pub struct TrackHook {
    /// Whether it asked for byte counting (`TrackArg.bits`).
    pub bits: bool,
}

impl GateHook for TrackHook {
    fn class_name(&self) -> &'static str {
        "Track"
    }

    fn on_batch(&self, _batch: &PacketBatch) {}

    fn desc(&self) -> String {
        format!("bits={}", self.bits)
    }
}

/// The file format a [`CaptureHook`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap (BESS's `TcpDump` hook, read by `tcpdump -r FIFO`).
    Pcap,
    /// pcapng: a section header, one Ethernet interface, enhanced packet blocks (BESS's
    /// `PcapNg` hook, read by `tshark -r FIFO`).
    Pcapng,
}

/// Writes every packet crossing the gate to a named pipe, in pcap or pcapng format. Writes
/// never block the worker: a packet the pipe has no room for is skipped and counted, and a
/// reader that goes away detaches the hook's output (or, with `reconnect`, the next reader
/// that opens the FIFO gets a new header and the packets from then on).
pub struct CaptureHook {
    path: String,
    format: CaptureFormat,
    reconnect: bool,
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
    /// At the first batch after this time (a deferred FIFO without a reader yet, or a
    /// reconnecting hook whose reader went away).
    At(Instant),
    /// Never: the reader went away (and the hook does not reconnect).
    Never,
}

/// Largest record written in one piece: pipe writes up to PIPE_BUF bytes are atomic, so a
/// reader never sees half a record.
const MAX_RECORD: usize = libc::PIPE_BUF;

impl CaptureHook {
    /// Opens `fifo` for writing `format`. With `defer`, a FIFO that has no reader yet is
    /// opened later (retried at most once a millisecond); without it that is an error. With
    /// `reconnect`, a FIFO whose reader went away is reopened the same way (BESS's
    /// `TcpdumpArg.reconnect`).
    pub fn open(
        fifo: &str,
        format: CaptureFormat,
        defer: bool,
        reconnect: bool,
    ) -> Result<CaptureHook> {
        let h = CaptureHook {
            path: fifo.to_string(),
            format,
            reconnect,
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
        let hdr = match self.format {
            CaptureFormat::Pcap => pcap::file_header().to_vec(),
            CaptureFormat::Pcapng => pcap::pcapng_header(pcap::PCAPNG_SNAPLEN),
        };
        // SAFETY: fd is open; hdr is a live buffer.
        let n = unsafe { libc::write(fd, hdr.as_ptr().cast(), hdr.len()) };
        if n != hdr.len() as isize {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Err(Error::new(
                libc::EIO,
                format!("cannot write the capture header to '{}'", self.path),
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

impl Drop for CaptureHook {
    fn drop(&mut self) {
        self.close();
    }
}

impl GateHook for CaptureHook {
    fn class_name(&self) -> &'static str {
        match self.format {
            CaptureFormat::Pcap => "TcpDump",
            CaptureFormat::Pcapng => "PcapNg",
        }
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
            let zeros = [0u8; 4];
            let (n, len) = match self.format {
                CaptureFormat::Pcap => {
                    let cap = data.len().min(MAX_RECORD - pcap::RECORD_HEADER_LEN);
                    let hdr = pcap::record_header(ts, cap as u32, data.len() as u32);
                    let iov = [iovec(&hdr), iovec(&data[..cap])];
                    // SAFETY: fd is open while we hold the lock; the buffers live across
                    // the call.
                    let n = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as i32) };
                    (n, hdr.len() + cap)
                }
                CaptureFormat::Pcapng => {
                    let room =
                        MAX_RECORD - pcap::PCAPNG_EPB_HEADER_LEN - pcap::PCAPNG_EPB_TRAILER_LEN - 3;
                    let cap = data.len().min(room);
                    let hdr = pcap::pcapng_epb_header(ts, cap as u32, data.len() as u32);
                    let pad = &zeros[..pcap::pcapng_padding(cap)];
                    let trailer = pcap::pcapng_epb_trailer(cap as u32);
                    let iov = [
                        iovec(&hdr),
                        iovec(&data[..cap]),
                        iovec(pad),
                        iovec(&trailer),
                    ];
                    // SAFETY: as above.
                    let n = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as i32) };
                    (n, hdr.len() + cap + pad.len() + trailer.len())
                }
            };
            if n == len as isize {
                self.written.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.skipped.fetch_add(1, Ordering::Relaxed);
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
                // The reader is gone: stop writing (the hook stays until removed), or wait
                // for the next one.
                self.close();
                self.skipped
                    .fetch_add((batch.len() - i - 1) as u64, Ordering::Relaxed);
                *retry = if self.reconnect {
                    Retry::At(Instant::now() + std::time::Duration::from_millis(1))
                } else {
                    Retry::Never
                };
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

/// An iovec over a byte slice (writev only reads through it).
fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
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
        let e = CaptureHook::open(&fs, CaptureFormat::Pcap, false, false)
            .err()
            .unwrap();
        assert_eq!(e.code, libc::ENXIO, "{}", e.msg);
        assert!(e.msg.contains("no reader"), "{}", e.msg);
        // Reader first (non-blocking open), then the hook.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblock()
            .open(&fifo)
            .unwrap();
        let hook = CaptureHook::open(&fs, CaptureFormat::Pcap, false, false).unwrap();
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

    #[test]
    fn pcapng_hook_writes_blocks_our_reader_takes() {
        let dir = std::env::temp_dir().join(format!("bessemer-hookng-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("n.fifo");
        let _ = std::fs::remove_file(&fifo);
        mkfifo(&fifo);
        let fs = fifo.to_str().unwrap().to_string();
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblock()
            .open(&fifo)
            .unwrap();
        let hook = CaptureHook::open(&fs, CaptureFormat::Pcapng, false, false).unwrap();
        assert_eq!(hook.class_name(), "PcapNg");
        let pool = PacketPool::new("hookngtest", 64, crate::mem::PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut b = PacketBatch::new();
        // Lengths that need 0..3 bytes of padding.
        assert_eq!(cache.alloc_bulk(&mut b, 4, 60), 4);
        for (i, p) in b.pkts_mut().iter_mut().enumerate() {
            assert!(p.set_len(60 + i));
            p.data_mut().fill(i as u8 + 1);
        }
        hook.on_batch(&b);
        assert_eq!(hook.written(), 4);
        let mut bytes = Vec::new();
        let _ = reader.read_to_end(&mut bytes);
        let frames = pcap::read(&bytes).unwrap();
        assert_eq!(frames.len(), 4);
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(bytes[f.data.clone()], vec![i as u8 + 1; 60 + i]);
            assert_eq!(f.orig_len as usize, 60 + i);
        }
        cache.free_bulk(&mut b);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reconnecting_hook_serves_the_next_reader_with_a_new_header() {
        let dir = std::env::temp_dir().join(format!("bessemer-hookrc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("r.fifo");
        let _ = std::fs::remove_file(&fifo);
        mkfifo(&fifo);
        let fs = fifo.to_str().unwrap().to_string();
        let open_reader = || {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags_nonblock()
                .open(&fifo)
                .unwrap()
        };
        let pool = PacketPool::new("hookrctest", 64, crate::mem::PagePolicy::Plain).unwrap();
        let mut cache = pool.cache();
        let mut b = PacketBatch::new();
        assert_eq!(cache.alloc_bulk(&mut b, 2, 60), 2);
        for (reconnect, want_second) in [(true, 2), (false, 0)] {
            let reader = open_reader();
            let hook = CaptureHook::open(&fs, CaptureFormat::Pcap, false, reconnect).unwrap();
            hook.on_batch(&b);
            drop(reader);
            // The write that meets the closed pipe detaches the FIFO.
            hook.on_batch(&b);
            let mut second = open_reader();
            std::thread::sleep(std::time::Duration::from_millis(5));
            hook.on_batch(&b);
            let mut bytes = Vec::new();
            let _ = second.read_to_end(&mut bytes);
            if want_second == 0 {
                assert!(bytes.is_empty(), "a non-reconnecting hook wrote again");
            } else {
                let recs = pcap::parse(&bytes).unwrap();
                assert_eq!(recs.len(), want_second);
            }
        }
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

//! PcapFilePort: a capture file as the incoming queue and another as the outgoing queue, for
//! tests and replays. The input file is read whole when the port is created (so receiving
//! does no I/O) and replayed once, or in a loop, as fast as possible or at its recorded
//! pace; what the port sends is appended to the output file, one write per batch.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bessemer_core::packet::{DATA_CAPACITY, LARGE_DATA_CAPACITY};
use bessemer_core::pcap;
use bessemer_core::port::{
    LinkStatus, NewPort, Port, PortConf, PortDriver, PortParams, RxQueue, TxQueue,
};
use bessemer_core::{Args, Error, PacketBatch, PoolCache, Result, Value, MAX_BURST};

/// Largest input file read (it is held in memory).
const MAX_FILE: u64 = 1 << 30;

/// The frames of the input file.
struct RxData {
    path: String,
    bytes: Vec<u8>,
    frames: Vec<pcap::Frame>,
    /// Each frame's time after the first one's, never decreasing.
    rel_ns: Vec<u64>,
    looping: bool,
    timing: bool,
}

/// Replay progress, written by the queue and shown by `desc`.
#[derive(Default)]
struct RxProgress {
    /// Frames sent in the current pass.
    pos: AtomicU64,
    /// Completed passes.
    passes: AtomicU64,
    /// Frames cut to the buffer size.
    truncated: AtomicU64,
    done: AtomicBool,
}

/// The output file.
struct TxFile {
    path: String,
    file: File,
    errors: AtomicU64,
}

/// A pcap file port.
struct PcapFilePort {
    rx: Option<(Arc<RxData>, Arc<RxProgress>)>,
    tx: Option<Arc<TxFile>>,
    mac: [u8; 6],
}

fn io_error(field: &str, path: &str, what: &str, e: &std::io::Error) -> Error {
    Error::new(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("PcapFilePortArg.{field}: cannot {what} '{path}': {e}"),
    )
}

fn load(path: &str, looping: bool, timing: bool) -> Result<RxData> {
    let meta = std::fs::metadata(path).map_err(|e| io_error("rx_file", path, "open", &e))?;
    if !meta.is_file() {
        return Err(Error::invalid(format!(
            "PcapFilePortArg.rx_file: '{path}' is not a regular file"
        )));
    }
    if meta.len() > MAX_FILE {
        return Err(Error::new(
            libc::EFBIG,
            format!(
                "PcapFilePortArg.rx_file: '{path}' is {} bytes; PcapFilePort reads files of at most 1 GiB",
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| io_error("rx_file", path, "read", &e))?;
    let frames = pcap::read(&bytes).map_err(|e| {
        Error::invalid(format!(
            "PcapFilePortArg.rx_file: '{path}' is malformed {e}"
        ))
    })?;
    if let Some(f) = frames
        .iter()
        .find(|f| f.linktype != pcap::LINKTYPE_ETHERNET)
    {
        return Err(Error::invalid(format!(
            "PcapFilePortArg.rx_file: '{path}': the frame at byte {} has link type {}; PcapFilePort replays Ethernet (1) only",
            f.offset, f.linktype
        )));
    }
    let first = frames.first().map(|f| f.ts_ns).unwrap_or(0);
    let mut last = 0;
    let rel_ns = frames
        .iter()
        .map(|f| {
            last = f.ts_ns.saturating_sub(first).max(last);
            last
        })
        .collect();
    Ok(RxData {
        path: path.to_string(),
        bytes,
        frames,
        rel_ns,
        looping,
        timing,
    })
}

fn create(params: &PortParams, arg: &Value) -> Result<NewPort> {
    let mut a = Args::new(arg, "bessemer.pb.PcapFilePortArg")?;
    let rx_file = a.str("rx_file")?.unwrap_or("").to_string();
    let tx_file = a.str("tx_file")?.unwrap_or("").to_string();
    let looping = a.bool("repeat")?.unwrap_or(false);
    let timing = a.bool("timing")?.unwrap_or(false);
    a.finish()?;
    if rx_file.is_empty() && tx_file.is_empty() {
        return Err(Error::invalid(
            "PcapFilePortArg: give rx_file (to receive), tx_file (to send) or both",
        ));
    }
    for (what, n, file) in [
        ("num_inc_q", params.num_inc_q, "rx_file"),
        ("num_out_q", params.num_out_q, "tx_file"),
    ] {
        if n > 1 {
            return Err(Error::invalid(format!(
                "{what} {n}: PcapFilePort has at most one queue per direction (one per {file})"
            )));
        }
    }
    let rx = if rx_file.is_empty() {
        None
    } else {
        let data = load(&rx_file, looping, timing)?;
        let progress = RxProgress::default();
        if data.frames.is_empty() {
            progress.done.store(true, Ordering::Relaxed);
        }
        Some((Arc::new(data), Arc::new(progress)))
    };
    let tx = if tx_file.is_empty() {
        None
    } else {
        let mut file =
            File::create(&tx_file).map_err(|e| io_error("tx_file", &tx_file, "create", &e))?;
        file.write_all(&pcap::file_header())
            .map_err(|e| io_error("tx_file", &tx_file, "write", &e))?;
        Some(Arc::new(TxFile {
            path: tx_file,
            file,
            errors: AtomicU64::new(0),
        }))
    };
    let mac = crate::name_mac(0, &params.name);
    Ok(NewPort {
        num_inc_q: rx.is_some() as usize,
        num_out_q: tx.is_some() as usize,
        port: Box::new(PcapFilePort { rx, tx, mac }),
    })
}

impl Port for PcapFilePort {
    fn rx_queue(&self, qid: usize) -> Result<Box<dyn RxQueue>> {
        let Some((data, progress)) = self.rx.as_ref().filter(|_| qid == 0) else {
            return Err(Error::invalid(format!(
                "PcapFilePort has no incoming queue {qid}"
            )));
        };
        // A queue opened again (a new PortInc) carries on where the last one stopped.
        Ok(Box::new(Rx {
            data: data.clone(),
            progress: progress.clone(),
            pos: progress.pos.load(Ordering::Relaxed) as usize,
            passes: progress.passes.load(Ordering::Relaxed),
            pass_start: None,
        }))
    }

    fn tx_queue(&self, qid: usize) -> Result<Box<dyn TxQueue>> {
        let Some(file) = self.tx.as_ref().filter(|_| qid == 0) else {
            return Err(Error::invalid(format!(
                "PcapFilePort has no outgoing queue {qid}"
            )));
        };
        Ok(Box::new(Tx {
            file: file.clone(),
            buf: Vec::with_capacity(MAX_BURST * (pcap::RECORD_HEADER_LEN + DATA_CAPACITY)),
            warned: false,
        }))
    }

    fn link_status(&self) -> LinkStatus {
        LinkStatus {
            speed_mbps: 0,
            full_duplex: true,
            autoneg: false,
            link_up: true,
        }
    }

    fn conf(&self) -> PortConf {
        PortConf {
            mac_addr: self.mac,
            mtu: LARGE_DATA_CAPACITY as u32,
            admin_up: true,
        }
    }

    fn desc(&self) -> String {
        let mut parts = Vec::new();
        if let Some((d, p)) = &self.rx {
            let mut s = format!(
                "rx: {} {}/{} packets",
                d.path,
                p.pos.load(Ordering::Relaxed),
                d.frames.len()
            );
            if d.looping {
                s += &format!(", pass {}", p.passes.load(Ordering::Relaxed) + 1);
            }
            if p.done.load(Ordering::Relaxed) {
                s += ", done";
            }
            if d.timing {
                s += ", recorded timing";
            }
            let t = p.truncated.load(Ordering::Relaxed);
            if t != 0 {
                s += &format!(", {t} truncated to {LARGE_DATA_CAPACITY} bytes");
            }
            parts.push(s);
        }
        if let Some(t) = &self.tx {
            let mut s = format!("tx: {}", t.path);
            let e = t.errors.load(Ordering::Relaxed);
            if e != 0 {
                s += &format!(", {e} failed write(s)");
            }
            parts.push(s);
        }
        parts.join("; ")
    }
}

/// The incoming queue: replays the file's frames.
struct Rx {
    data: Arc<RxData>,
    progress: Arc<RxProgress>,
    pos: usize,
    passes: u64,
    /// When the current pass started (timing mode), set by its first frame.
    pass_start: Option<Instant>,
}

impl RxQueue for Rx {
    fn recv(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch, max: usize) -> usize {
        let d = &*self.data;
        let total = d.frames.len();
        let n = max.min(batch.room());
        let now = if d.timing { Some(Instant::now()) } else { None };
        let mut got = 0;
        let mut truncated = 0;
        while got < n {
            if self.pos == total {
                if !d.looping || total == 0 {
                    break;
                }
                self.pos = 0;
                self.passes += 1;
                // The next pass starts right after the last frame of this one.
                if let Some(s) = self.pass_start {
                    self.pass_start = Some(s + Duration::from_nanos(d.rel_ns[total - 1]));
                }
            }
            if let Some(now) = now {
                let start = *self.pass_start.get_or_insert(now);
                if now.saturating_duration_since(start) < Duration::from_nanos(d.rel_ns[self.pos]) {
                    break;
                }
            }
            let f = &d.frames[self.pos];
            let stored = &d.bytes[f.data.clone()];
            let len = stored.len().min(LARGE_DATA_CAPACITY);
            let Some(mut p) = cache.alloc_any(len) else {
                break;
            };
            p.data_mut().copy_from_slice(&stored[..len]);
            if len < stored.len() {
                truncated += 1;
            }
            if let Err(p) = batch.push(p) {
                cache.free(p);
                break;
            }
            self.pos += 1;
            got += 1;
        }
        let p = &self.progress;
        p.pos.store(self.pos as u64, Ordering::Relaxed);
        p.passes.store(self.passes, Ordering::Relaxed);
        if truncated != 0 {
            p.truncated.fetch_add(truncated, Ordering::Relaxed);
        }
        if self.pos == total && !d.looping {
            p.done.store(true, Ordering::Relaxed);
        }
        got
    }
}

/// The outgoing queue: appends records to the file.
struct Tx {
    file: Arc<TxFile>,
    /// One batch of records, written with one call (capacity reserved up front).
    buf: Vec<u8>,
    warned: bool,
}

impl TxQueue for Tx {
    fn send(&mut self, cache: &mut PoolCache, batch: &mut PacketBatch) -> usize {
        let n = batch.len();
        if n == 0 {
            return 0;
        }
        let ts = pcap::Timestamp::now();
        self.buf.clear();
        for p in batch.pkts() {
            let len = p.len() as u32;
            self.buf
                .extend_from_slice(&pcap::record_header(ts, len, len));
            self.buf.extend_from_slice(p.data());
        }
        if let Err(e) = (&self.file.file).write_all(&self.buf) {
            // The packets stay in the batch: the caller counts them as tx_failed.
            self.file.errors.fetch_add(1, Ordering::Relaxed);
            if !self.warned {
                self.warned = true;
                tracing::warn!(file = %self.file.path, "PcapFilePort: write failed: {e}");
            }
            return 0;
        }
        cache.free_bulk(batch);
        n
    }
}

/// The PcapFilePort driver.
pub static DRIVER: PortDriver = PortDriver {
    name: "PcapFilePort",
    name_template: "pcap_file",
    help: "replays a pcap/pcapng file as incoming packets and writes outgoing packets to a pcap file",
    arg_type: "bessemer.pb.PcapFilePortArg",
    arg_doc: &[
        "rx_file: string — capture to replay (pcap in either byte order, µs or ns, or pcapng; Ethernet; at most 1 GiB); empty: no incoming queue",
        "tx_file: string — pcap file to write (replaced); empty: no outgoing queue",
        "repeat: bool — replay rx_file forever (default: once, then nothing more is received)",
        "timing: bool — replay at the recorded inter-packet times (default: as fast as possible)",
    ],
    create,
};

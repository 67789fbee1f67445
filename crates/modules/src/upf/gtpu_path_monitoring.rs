//! GtpuPathMonitoring (omec-project fork): sends a GTP-U Echo Request to every monitored
//! gNB and measures the path latency (half the round trip) from their Echo Responses.
use std::collections::{BTreeMap, HashMap};

use bessemer_core::{
    handler, Args, CommandSpec, Context, Instance, Module, ModuleClass, Packet, PacketBatch,
    Result, Value,
};

use crate::headers::{ip, ETH_LEN};
use crate::measure::timestamp::now_ns;
use crate::upf::gtpu::{self, GtpuError};

bessemer_core::drop_reasons! {
    /// Why GtpuPathMonitoring drops packets.
    pub enum GtpuPathMonitoringDrop {
        Gtpu(GtpuError),
        /// No gNB is monitored (the fork's way of turning the module off).
        NoGnb = "no_gnb",
        /// An Echo Response: measured, then consumed (as the fork).
        Response = "echo_response",
        /// An Echo Response no request of ours is waiting for.
        UnknownResponse = "unknown_response",
        /// A GTP-U message other than an echo.
        NotEcho = "not_echo",
        /// An echo without the sequence number field (the S flag; TS 29.281 requires it).
        NoSequence = "no_sequence",
    }
}

/// Latency of one gNB path, in ns (the fork's `Values`).
#[derive(Clone, Copy, Debug)]
struct Latency {
    count: u64,
    min: u64,
    mean: u64,
    max: u64,
}

impl Latency {
    const EMPTY: Latency = Latency {
        count: 0,
        min: u64::MAX,
        mean: 0,
        max: 0,
    };

    fn add(&mut self, lat: u64) {
        self.count += 1;
        self.min = self.min.min(lat);
        self.max = self.max.max(lat);
        // A running mean in integers, as the fork keeps it.
        if lat > self.mean {
            self.mean += (lat - self.mean) / self.count;
        } else {
            self.mean -= (self.mean - lat) / self.count;
        }
    }
}

/// Each Echo Request arriving (a template from a generator) gets the next sequence number
/// and leaves as one copy per monitored gNB (IPv4 destination the gNB; checksums left to
/// the modules that follow); each Echo Response is matched by (source, sequence number) to
/// its request and half its round trip recorded for that gNB, then dropped. One worker.
pub struct GtpuPathMonitoring {
    /// Monitored gNBs (host-order addresses) and how many times each was added.
    gnbs: BTreeMap<u32, u32>,
    /// When each request went to each gNB, by sequence number (ns).
    sent: HashMap<u32, HashMap<u16, u64>>,
    latency: BTreeMap<u32, Latency>,
    seq: u16,
}

fn gnb_ip(arg: &Value) -> Result<u32> {
    let mut a = Args::new(arg, "GtpuPathMonitoringCommandAddDeleteArg")?;
    let ip = a.uint("gnb_ip", u32::MAX as u64)?.unwrap_or(0) as u32;
    a.finish()?;
    Ok(ip)
}

impl GtpuPathMonitoring {
    fn clear(&mut self) {
        self.gnbs.clear();
        self.sent.clear();
        self.latency.clear();
        self.seq = 0;
    }

    /// The `add` command: monitors a gNB (adding one twice needs two deletes).
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        *self.gnbs.entry(gnb_ip(arg)?).or_insert(0) += 1;
        Ok(Value::Null)
    }

    /// The `delete` command (deleting an unknown gNB succeeds, as the fork).
    fn cmd_delete(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let ip = gnb_ip(arg)?;
        if let Some(n) = self.gnbs.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.gnbs.remove(&ip);
            }
        }
        Ok(Value::Null)
    }

    /// The `clear` command: forgets gNBs, requests and latencies.
    fn cmd_clear(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        Args::new(arg, "GtpuPathMonitoringCommandClearArg")?.finish()?;
        self.clear();
        Ok(Value::Null)
    }

    /// The `read` command: latency per gNB, reset after if `clear`.
    fn cmd_read(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let mut a = Args::new(arg, "GtpuPathMonitoringCommandReadArg")?;
        let clear = a.bool("clear")?.unwrap_or(false);
        a.finish()?;
        let stats: Vec<Value> = self
            .latency
            .iter()
            .map(|(&ip, l)| {
                Value::map()
                    .with("gnb_ip", ip)
                    .with("count", l.count)
                    .with("latency_min", l.min)
                    .with("latency_mean", l.mean)
                    .with("latency_max", l.max)
            })
            .collect();
        if clear {
            self.latency.values_mut().for_each(|l| *l = Latency::EMPTY);
        }
        Ok(Value::map().with("statistics", stats))
    }

    fn handle(&mut self, ctx: &mut Context, mut p: Packet, now: u64) {
        use GtpuPathMonitoringDrop as D;
        if self.gnbs.is_empty() {
            return ctx.drop_packet(p, D::NoGnb);
        }
        let t = match gtpu::parse(p.data()) {
            Ok(t) => t,
            Err(e) => return ctx.drop_packet(p, D::Gtpu(e)),
        };
        let is_echo = matches!(t.msg_type, gtpu::MSG_ECHO_REQUEST | gtpu::MSG_ECHO_RESPONSE);
        if !is_echo {
            return ctx.drop_packet(p, D::NotEcho);
        }
        if t.gtp_hlen == gtpu::HEADER_LEN || p.data()[t.gtp_off] & gtpu::FLAG_S == 0 {
            return ctx.drop_packet(p, D::NoSequence);
        }
        let seq_at = t.gtp_off + gtpu::HEADER_LEN;
        if t.msg_type == gtpu::MSG_ECHO_RESPONSE {
            let gnb = u32::from_be_bytes(t.src);
            let seq = u16::from_be_bytes([p.data()[seq_at], p.data()[seq_at + 1]]);
            let Some(sent) = self.sent.get_mut(&gnb).and_then(|m| m.remove(&seq)) else {
                return ctx.drop_packet(p, D::UnknownResponse);
            };
            let lat = now.saturating_sub(sent) / 2;
            self.latency.entry(gnb).or_insert(Latency::EMPTY).add(lat);
            return ctx.drop_packet(p, D::Response);
        }
        p.data_mut()[seq_at..seq_at + 2].copy_from_slice(&self.seq.to_be_bytes());
        for &gnb in self.gnbs.keys() {
            // Out of buffers: this gNB misses one probe (nothing is waited for).
            let Some(mut c) = ctx.alloc(p.len()) else {
                continue;
            };
            *c.metadata_mut() = *p.metadata();
            c.data_mut().copy_from_slice(p.data());
            c.data_mut()[ETH_LEN + ip::DST..ETH_LEN + ip::DST + 4]
                .copy_from_slice(&gnb.to_be_bytes());
            self.sent.entry(gnb).or_default().insert(self.seq, now);
            ctx.emit(0, c);
        }
        self.seq = self.seq.wrapping_add(1);
        // The template became its copies (the fork leaves it unaccounted for).
        ctx.free(p);
    }
}

impl Module for GtpuPathMonitoring {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let now = now_ns(ctx.refresh_now());
        for p in batch.drain() {
            self.handle(ctx, p, now);
        }
    }

    fn desc(&self) -> String {
        format!("{} gNBs", self.gnbs.len())
    }
}

/// The GtpuPathMonitoring class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "GtpuPathMonitoring",
    name_template: "gtpu_path_monitoring",
    help: "Gtpu path monitoring module",
    arg_type: "EmptyArg",
    arg_doc: &["(no fields) — gNBs are added with the add command"],
    igates: 1,
    ogates: 1,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "GtpuPathMonitoringCommandAddDeleteArg",
            help: "monitors a gNB (gnb_ip, host order)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive GtpuPathMonitoring, GtpuPathMonitoring::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "GtpuPathMonitoringCommandAddDeleteArg",
            help: "stops monitoring a gNB",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive GtpuPathMonitoring, GtpuPathMonitoring::cmd_delete),
        },
        CommandSpec {
            name: "clear",
            arg_type: "GtpuPathMonitoringCommandClearArg",
            help: "forgets gNBs and latencies",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive GtpuPathMonitoring, GtpuPathMonitoring::cmd_clear),
        },
        CommandSpec {
            name: "read",
            arg_type: "GtpuPathMonitoringCommandReadArg",
            help: "latency per gNB (a GtpuPathMonitoringCommandReadResponse)",
            mt_safe: true,
            reply_type: "GtpuPathMonitoringCommandReadResponse",
            mutates: false,
            handler: handler!(Exclusive GtpuPathMonitoring, GtpuPathMonitoring::cmd_read),
        },
    ],
    drop_reasons: GtpuPathMonitoringDrop::NAMES,
    max_workers: 1,
    create: |_, arg: &Value| {
        Args::new(arg, "EmptyArg")?.finish()?;
        Ok(Instance::Exclusive(Box::new(GtpuPathMonitoring {
            gnbs: BTreeMap::new(),
            sent: HashMap::new(),
            latency: BTreeMap::new(),
            seq: 0,
        })))
    },
};

//! HashLB: spreads packets over gates by a hash of L2, L3 or L4 header fields, so every
//! packet of a flow leaves by the same gate.
use std::sync::RwLock;

use bessemer_core::module::MAX_GATES;
use bessemer_core::sched::TaskResult;
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, ModuleClass, PacketBatch, Result,
    SharedModule, Value,
};

use crate::hash::crc32c;
use crate::headers::{eth, ip, ETH_LEN, IPV4_MIN_LEN};
use crate::util::{gates_value, process_each, Verdict, IDLE};

/// Most gates one HashLB spreads over (BESS's MAX_HLB_GATES).
pub const MAX_HLB_GATES: usize = 16384;
/// A gate id that drops the packet instead (BESS's DROP_GATE, which `gates` may name).
pub const DROP_GATE: u16 = MAX_GATES;

bessemer_core::drop_reasons! {
    /// Why HashLB drops packets.
    pub enum HashLbDrop {
        DropGate = "drop_gate",
    }
}

/// Which header bytes feed the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Destination and source MAC (frame bytes 0..12).
    L2,
    /// IPv4 source and destination address (bytes 26..34, untagged frame).
    L3,
    /// The L3 bytes, the two ports (bytes 34..38, no IP options) and the IP protocol.
    L4,
}

impl Mode {
    fn parse(s: Option<&str>, msg: &str) -> Result<Mode> {
        match s.unwrap_or("l4") {
            "l2" => Ok(Mode::L2),
            "l3" => Ok(Mode::L3),
            "l4" => Ok(Mode::L4),
            other => Err(Error::invalid(format!(
                "{msg}.mode: '{other}' is not an LB mode (available: l2, l3, l4)"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::L2 => "l2",
            Mode::L3 => "l3",
            Mode::L4 => "l4",
        }
    }
}

/// Offset of the IPv4 source and destination addresses in an untagged frame.
const ADDRS: usize = ETH_LEN + ip::SRC;
/// Offset of the L4 ports in an untagged frame with an IPv4 header without options.
const PORTS: usize = ETH_LEN + IPV4_MIN_LEN;

/// `N` bytes of `d` from `off`; bytes beyond the end of a short frame read as zero.
#[inline(always)]
fn bytes_at<const N: usize>(d: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = d.get(off..off + N) {
        out.copy_from_slice(s);
    } else if off < d.len() {
        out[..d.len() - off].copy_from_slice(&d[off..]);
    }
    out
}

/// The flow hash of one frame, over the same bytes BESS reads at fixed offsets (untagged
/// Ethernet, IPv4 without options). Unlike BESS, the L4 mode mixes in only the protocol byte
/// (BESS's 4-byte read at offset 23 also takes the IP checksum, which varies within a flow).
#[inline(always)]
fn flow_hash(mode: Mode, d: &[u8]) -> u32 {
    match mode {
        // The two MAC addresses (the last 4 bytes of the source seed the CRC).
        Mode::L2 => {
            let init = u32::from_le_bytes(bytes_at::<4>(d, eth::SRC + 2));
            crc32c(init, &bytes_at::<8>(d, eth::DST))
        }
        // The IPv4 addresses.
        Mode::L3 => crc32c(0, &bytes_at::<8>(d, ADDRS)),
        // The addresses, the protocol and the L4 ports.
        Mode::L4 => {
            let ports = u32::from_le_bytes(bytes_at::<4>(d, PORTS));
            let proto = bytes_at::<1>(d, ETH_LEN + ip::PROTO)[0] as u32;
            crc32c(ports ^ proto, &bytes_at::<8>(d, ADDRS))
        }
    }
}

/// Maps a 32-bit hash onto `0..n` by its high bits (BESS's hash_range: hash / 2^32 * n).
#[inline(always)]
fn hash_range(h: u32, n: usize) -> usize {
    ((h as u64 * n as u64) >> 32) as usize
}

/// Sends each packet to `gates[hash_range(flow_hash)]`. Several workers may run one
/// instance (as in BESS), so the configuration sits behind a lock taken once per batch.
pub struct HashLB {
    cfg: RwLock<Config>,
}

struct Config {
    gates: Vec<u16>,
    mode: Mode,
}

fn parse_gates(list: &[Value], msg: &str) -> Result<Vec<u16>> {
    if list.is_empty() {
        return Err(Error::invalid(format!(
            "{msg}.gates: at least one gate is required"
        )));
    }
    if list.len() > MAX_HLB_GATES {
        return Err(Error::invalid(format!(
            "{msg}.gates: no more than {MAX_HLB_GATES} gates"
        )));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_i64() {
            Some(g) if (0..=DROP_GATE as i64).contains(&g) => Ok(g as u16),
            _ => Err(Error::invalid(format!(
                "{msg}.gates[{i}]: {v:?} is not an output gate (0..{MAX_GATES}, or {DROP_GATE} to drop)"
            ))),
        })
        .collect()
}

fn reject_fields(a: &mut Args, msg: &str) -> Result<()> {
    if !a.list("fields")?.is_empty() {
        return Err(Error::unsupported(format!(
            "{msg}.fields: hashing on arbitrary fields is not supported; use mode l2, l3 or l4"
        )));
    }
    Ok(())
}

impl HashLB {
    /// The `set_mode` command.
    fn cmd_set_mode(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let msg = "HashLBCommandSetModeArg";
        let mut a = Args::new(arg, msg)?;
        let mode = Mode::parse(a.str("mode")?, msg)?;
        reject_fields(&mut a, msg)?;
        a.finish()?;
        self.cfg.write().unwrap_or_else(|e| e.into_inner()).mode = mode;
        Ok(Value::Null)
    }

    /// The `set_gates` command.
    fn cmd_set_gates(&self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let msg = "HashLBCommandSetGatesArg";
        let mut a = Args::new(arg, msg)?;
        let gates = parse_gates(a.list("gates")?, msg)?;
        a.finish()?;
        self.cfg.write().unwrap_or_else(|e| e.into_inner()).gates = gates;
        Ok(Value::Null)
    }
}

impl SharedModule for HashLB {
    fn process_batch(&self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let cfg = self.cfg.read().unwrap_or_else(|e| e.into_inner());
        let (mode, gates) = (cfg.mode, &cfg.gates);
        process_each(ctx, batch, |p| {
            match gates[hash_range(flow_hash(mode, p.data()), gates.len())] {
                DROP_GATE => Verdict::Drop(HashLbDrop::DropGate),
                g => Verdict::Gate(g),
            }
        });
    }

    fn run_task(&self, _ctx: &mut Context, _arg: u64) -> TaskResult {
        IDLE
    }

    fn desc(&self) -> String {
        let cfg = self.cfg.read().unwrap_or_else(|e| e.into_inner());
        format!("{} gates, mode {}", cfg.gates.len(), cfg.mode.name())
    }

    fn info(&self) -> Value {
        let cfg = self.cfg.read().unwrap_or_else(|e| e.into_inner());
        Value::map()
            .with("mode", cfg.mode.name())
            .with("gates", gates_value(&cfg.gates))
    }
}

/// The HashLB class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "HashLB",
    name_template: "hash_lb",
    help: "splits packets on a flow basis with L2/L3/L4 header fields",
    arg_type: "HashLBArg",
    arg_doc: &[
        "gates: [int64] — output gates to spread over (required; 8192 = drop)",
        "mode: string — l2 (MAC addresses), l3 (IPv4 addresses) or l4 (addresses, ports, protocol; default)",
        "fields: [Field] — not supported (must be empty)",
        "  offsets are fixed: untagged Ethernet, IPv4 without options; bytes past a short frame hash as zero",
    ],
    igates: 1,
    ogates: MAX_GATES,
    commands: &[
        CommandSpec {
            name: "set_mode",
            arg_type: "HashLBCommandSetModeArg",
            help: "changes the mode (l2, l3, l4)",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared HashLB, HashLB::cmd_set_mode),
        },
        CommandSpec {
            name: "set_gates",
            arg_type: "HashLBCommandSetGatesArg",
            help: "replaces the gate list",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Shared HashLB, HashLB::cmd_set_gates),
        },
    ],
    drop_reasons: HashLbDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let msg = "HashLBArg";
        let mut a = Args::new(arg, msg)?;
        let gates = parse_gates(a.list("gates")?, msg)?;
        let mode = Mode::parse(a.str("mode")?, msg)?;
        reject_fields(&mut a, msg)?;
        a.finish()?;
        Ok(Instance::Shared(Box::new(HashLB {
            cfg: RwLock::new(Config { gates, mode }),
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::{CaptureHandle, Harness};

    /// Ethernet + IPv4 (no options) + 4 port bytes; `id` and `csum` vary within a flow.
    fn frame(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16, id: u16) -> Vec<u8> {
        let mut f = vec![
            0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00, // Ethernet
            0x45, 0, 0, 24, // version/IHL, TOS, total length
        ];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&[0, 0, 64, proto]);
        f.extend_from_slice(&id.wrapping_mul(7).to_be_bytes()); // "checksum"
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f
    }

    fn gates(g: &[i64]) -> Value {
        Value::List(g.iter().map(|&x| Value::Int(x)).collect())
    }

    fn setup(h: &mut Harness, arg: Value, n: u16) -> Vec<CaptureHandle> {
        h.add(&CLASS, "lb", &arg).unwrap();
        (0..n).map(|g| h.capture("lb", g)).collect()
    }

    fn gate_of(caps: &[CaptureHandle]) -> Vec<usize> {
        caps.iter()
            .enumerate()
            .flat_map(|(g, c)| std::iter::repeat_n(g, c.take().len()))
            .collect()
    }

    #[test]
    fn l4_keeps_a_flow_on_one_gate_and_spreads_flows() {
        let mut h = Harness::new();
        let caps = setup(&mut h, Value::map().with("gates", gates(&[0, 1, 2, 3])), 4);
        // One flow, packets differing in IP id and checksum: one gate, bytes unchanged.
        let pkts: Vec<_> = (0..20)
            .map(|i| frame([10, 0, 0, 1], [10, 0, 0, 2], 6, 1234, 80, i))
            .collect();
        h.inject("lb", 0, &pkts);
        let mut seen = 0;
        for c in &caps {
            let got = c.take_data();
            if !got.is_empty() {
                assert_eq!(got, pkts, "the whole flow on one gate, in order, unchanged");
                seen += 1;
            }
        }
        assert_eq!(seen, 1);
        // Many flows: every gate gets some, and the gate is the documented function.
        let flows: Vec<_> = (0..400u16)
            .map(|p| frame([10, 0, 0, 1], [10, 0, 0, 2], 17, 1000 + p, 53, 0))
            .collect();
        h.inject("lb", 0, &flows);
        let mut counts = [0usize; 4];
        for (g, c) in caps.iter().enumerate() {
            for d in c.take_data() {
                assert_eq!(hash_range(flow_hash(Mode::L4, &d), 4), g);
                counts[g] += 1;
            }
        }
        assert!(counts.iter().all(|&n| n > 50), "{counts:?}");
    }

    #[test]
    fn modes_hash_the_documented_bytes() {
        let mut h = Harness::new();
        let caps = setup(
            &mut h,
            Value::map()
                .with("gates", gates(&(0..16).collect::<Vec<_>>()))
                .with("mode", "l3"),
            16,
        );
        // l3: ports and protocol do not matter, addresses do.
        let a: Vec<_> = (0..50u16)
            .map(|p| frame([1, 2, 3, 4], [5, 6, 7, 8], (p % 3) as u8, p, p * 3, p))
            .collect();
        h.inject("lb", 0, &a);
        let g = gate_of(&caps);
        assert!(g.iter().all(|&x| x == g[0]), "{g:?}");
        // l2: only the MAC addresses matter.
        h.command("lb", "set_mode", &Value::map().with("mode", "l2"))
            .unwrap();
        let b: Vec<_> = (0..50u8)
            .map(|i| frame([i, 2, 3, 4], [5, i, 7, 8], 6, 1, 2, 0))
            .collect();
        h.inject("lb", 0, &b);
        let g = gate_of(&caps);
        assert_eq!(g.len(), 50);
        assert!(g.iter().all(|&x| x == g[0]), "{g:?}");
        let mut c = b[0].clone();
        c[5] ^= 0xff;
        assert_ne!(flow_hash(Mode::L2, &c), flow_hash(Mode::L2, &b[0]));
    }

    #[test]
    fn short_and_non_ip_frames_pass_and_drop_gate_drops() {
        let mut h = Harness::new();
        let caps = setup(&mut h, Value::map().with("gates", gates(&[5])), 6);
        // Short frames, ARP, IPv6: BESS hashes whatever is there; all go to the one gate.
        let arp = {
            let mut f = vec![0xffu8; 6];
            f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
            f.extend_from_slice(&[0u8; 28]);
            f
        };
        let v6 = {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 17, 64]);
            f.extend_from_slice(&[0xab; 32]);
            f
        };
        let pkts = vec![vec![], vec![1, 2, 3], arp, v6];
        h.inject("lb", 0, &pkts);
        assert_eq!(caps[5].take_data(), pkts);
        h.command(
            "lb",
            "set_gates",
            &Value::map().with("gates", gates(&[8192])),
        )
        .unwrap();
        h.inject("lb", 0, &[frame([1, 1, 1, 1], [2, 2, 2, 2], 6, 1, 2, 3)]);
        assert_eq!(h.drops("lb", "drop_gate"), 1);
        assert!(caps.iter().all(|c| c.is_empty()));
    }

    #[test]
    fn argument_errors_name_the_field() {
        let mut h = Harness::new();
        let e = h.add(&CLASS, "a", &Value::map()).unwrap_err();
        assert!(e.msg.contains("HashLBArg.gates"), "{}", e.msg);
        let e = h
            .add(
                &CLASS,
                "b",
                &Value::map().with("gates", gates(&[0])).with("mode", "l7"),
            )
            .unwrap_err();
        assert!(
            e.msg.contains("HashLBArg.mode") && e.msg.contains("l7"),
            "{}",
            e.msg
        );
        let e = h
            .add(&CLASS, "c", &Value::map().with("gates", gates(&[0, 9000])))
            .unwrap_err();
        assert!(e.msg.contains("gates[1]"), "{}", e.msg);
        h.add(&CLASS, "d", &Value::map().with("gates", gates(&[0])))
            .unwrap();
        let e = h
            .command("d", "set_gates", &Value::map().with("gates", gates(&[])))
            .unwrap_err();
        assert!(
            e.msg.contains("HashLBCommandSetGatesArg.gates"),
            "{}",
            e.msg
        );
        let e = h
            .command("d", "set_mode", &Value::map().with("mode", "l9"))
            .unwrap_err();
        assert!(e.msg.contains("HashLBCommandSetModeArg.mode"), "{}", e.msg);
        let f = Value::List(vec![Value::map().with("offset", 0).with("num_bytes", 2)]);
        let e = h
            .command("d", "set_mode", &Value::map().with("fields", f))
            .unwrap_err();
        assert!(e.msg.contains("fields"), "{}", e.msg);
    }
}

//! L2Forward: sends each frame to the gate of its destination MAC address, looked up in a
//! bucketed cuckoo hash table (each address has two candidate buckets of `bucket` slots).
use crate::util::{parse_list, Verdict};
use bessemer_core::{
    handler, Args, CommandSpec, Context, Error, Instance, Module, ModuleClass, PacketBatch, Result,
    Value, MAX_BURST,
};

use super::table::{check_gate, prefetch, TableDrop, DROP_GATE};
use crate::headers::ETH_LEN;

const OCC: u64 = 1 << 63;
const ADDR: u64 = (1 << 48) - 1;
const GATE_SHIFT: u32 = 48;
/// Largest `size` (BESS's MAX_TABLE_SIZE).
pub const MAX_TABLE_SIZE: i64 = 1 << 26;
/// Largest `bucket` (BESS's MAX_BUCKET_SIZE).
pub const MAX_BUCKET_SIZE: i64 = 4;
/// Most buckets a displacement search visits before an insert gives up.
const MAX_SEARCH: usize = 512;

/// The MAC table: `size` buckets of `bucket` slots, each slot one word (occupied bit,
/// 15-bit gate, 48-bit address), so a bucket of 4 is half a cache line.
pub struct MacTable {
    slots: Vec<u64>,
    size_mask: usize,
    size_power: u32,
    bucket: usize,
    count: usize,
}

impl MacTable {
    /// An empty table; `size` and `bucket` are powers of two.
    pub fn new(size: usize, bucket: usize) -> MacTable {
        MacTable {
            slots: super::table::zeroed_table(size * bucket, 0u64),
            size_mask: size - 1,
            size_power: size.trailing_zeros(),
            bucket,
            count: 0,
        }
    }

    /// The two candidate buckets of `addr`. As BESS's l2_forward.cc: the hash is CRC-32C of
    /// the address's 8 little-endian bytes (`rte_hash_crc_8byte(addr, 0)`), the primary
    /// bucket its low bits, the alternate the primary XOR a tag from the hash's high bits
    /// times 0x5bd1e995. (BESS masks the alternate to the lower half of the table; here it
    /// spans the whole table, so this table holds every address set BESS's does.)
    #[inline(always)]
    fn buckets(&self, addr: u64) -> (usize, usize) {
        let h = crate::hash::crc32c(0, &addr.to_le_bytes());
        let p = h as usize & self.size_mask;
        let tag = ((h >> self.size_power) as u64 + 1).wrapping_mul(0x5bd1_e995);
        (p, (p ^ tag as usize) & self.size_mask)
    }

    #[inline(always)]
    fn find_in(&self, b: usize, addr: u64) -> Option<usize> {
        let s = &self.slots[b * self.bucket..(b + 1) * self.bucket];
        s.iter()
            .position(|&e| e & (OCC | ADDR) == OCC | addr)
            .map(|i| b * self.bucket + i)
    }

    fn find(&self, addr: u64) -> Option<usize> {
        let (p, a) = self.buckets(addr);
        self.find_in(p, addr).or_else(|| self.find_in(a, addr))
    }

    /// The gate for `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: u64) -> Option<u16> {
        self.lookup_in(self.buckets(addr), addr)
    }

    /// The gate for `addr`, whose two buckets (from [`Self::buckets`]) the caller already
    /// has: the batch path hashes each address once, for its prefetch and its lookup.
    #[inline(always)]
    pub fn lookup_in(&self, (b1, b2): (usize, usize), addr: u64) -> Option<u16> {
        self.find_in(b1, addr)
            .or_else(|| self.find_in(b2, addr))
            .map(|i| ((self.slots[i] >> GATE_SHIFT) & 0x7fff) as u16)
    }

    /// Number of addresses stored.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn free_slot(&self, b: usize) -> Option<usize> {
        (b * self.bucket..(b + 1) * self.bucket).find(|&i| self.slots[i] & OCC == 0)
    }

    /// Adds `addr` -> `gate`.
    pub fn add(&mut self, addr: u64, gate: u16) -> Result<()> {
        if self.find(addr).is_some() {
            return Err(Error::exists(format!(
                "MAC address '{}' already exist",
                mac_string(addr)
            )));
        }
        let new = OCC | (gate as u64) << GATE_SHIFT | addr;
        let (p, a) = self.buckets(addr);
        // Breadth-first search for a chain of moves that frees a slot in p or a.
        // Node: (bucket, parent node, slot of the parent bucket whose entry moves here).
        let mut nodes: Vec<(usize, usize, usize)> = vec![(p, usize::MAX, 0), (a, usize::MAX, 0)];
        let mut k = 0;
        while k < nodes.len() && k < MAX_SEARCH {
            let b = nodes[k].0;
            if let Some(free) = self.free_slot(b) {
                // Walk back to the root, moving each entry into the slot freed below it.
                let (mut node, mut hole) = (k, free);
                while nodes[node].1 != usize::MAX {
                    let (_, parent, from) = nodes[node];
                    self.slots[hole] = self.slots[from];
                    hole = from;
                    node = parent;
                }
                self.slots[hole] = new;
                self.count += 1;
                return Ok(());
            }
            for i in b * self.bucket..(b + 1) * self.bucket {
                let (ep, ea) = self.buckets(self.slots[i] & ADDR);
                let other = if ep == b { ea } else { ep };
                if other != b {
                    nodes.push((other, k, i));
                }
            }
            k += 1;
        }
        Err(Error::no_mem("Not enough space"))
    }

    /// Removes `addr`; false if absent.
    pub fn delete(&mut self, addr: u64) -> bool {
        match self.find(addr) {
            Some(i) => {
                self.slots[i] = 0;
                self.count -= 1;
                true
            }
            None => false,
        }
    }
}

/// Parses "aa:bb:cc:dd:ee:ff" (1-2 hex digits per byte, as BESS) into the table's address word.
fn parse_mac(s: &str) -> Option<u64> {
    let mac = bessemer_core::mac::parse_mac(s)?;
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&mac);
    Some(u64::from_le_bytes(b))
}

fn mac_string(addr: u64) -> String {
    let b = addr.to_le_bytes();
    bessemer_core::mac::format_mac(&[b[0], b[1], b[2], b[3], b[4], b[5]])
}

fn mac_arg(v: &Value, what: &str) -> Result<u64> {
    let s = v
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::invalid(format!("{what}: expected a MAC address string")))?;
    parse_mac(s).ok_or_else(|| Error::invalid(format!("{what}: {s} is not a proper mac address")))
}

/// Destination-MAC forwarding table.
pub struct L2Forward {
    table: MacTable,
    default_gate: u16,
}

impl L2Forward {
    /// The `add` command.
    fn cmd_add(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let parsed = parse_list(arg, "L2ForwardCommandAddArg", "entries", |e, w| {
            let mut ea = Args::new(e, w)?;
            let addr = ea
                .any("addr")
                .ok_or_else(|| Error::invalid(format!("{w}.addr is required")))?;
            let addr = mac_arg(addr, &format!("{w}.addr"))?;
            let gate = ea.int("gate", 0, DROP_GATE as i64)?.unwrap_or(0) as u64;
            let gate = check_gate(Some(gate), &format!("{w}.gate"))?;
            ea.finish()?;
            Ok((addr, gate))
        })?;
        // All or nothing: undo this call's additions on the first failure.
        for (k, &(addr, gate)) in parsed.iter().enumerate() {
            if let Err(e) = self.table.add(addr, gate) {
                for &(done, _) in &parsed[..k] {
                    self.table.delete(done);
                }
                return Err(e);
            }
        }
        Ok(Value::Null)
    }

    /// The `delete` command.
    fn cmd_delete(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "L2ForwardCommandDeleteArg";
        let mut a = Args::new(arg, what)?;
        let addrs = a.list("addrs")?;
        a.finish()?;
        let mut parsed = Vec::new();
        for (i, v) in addrs.iter().enumerate() {
            let addr = mac_arg(v, &format!("{what}.addrs[{i}]"))?;
            if self.table.find(addr).is_none() {
                return Err(Error::not_found(format!(
                    "MAC address '{}' does not exist",
                    mac_string(addr)
                )));
            }
            parsed.push(addr);
        }
        for addr in parsed {
            self.table.delete(addr);
        }
        Ok(Value::Null)
    }

    /// The `set_default_gate` command.
    fn cmd_set_default_gate(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "L2ForwardCommandSetDefaultGateArg";
        let mut a = Args::new(arg, what)?;
        let g = a.int("gate", 0, DROP_GATE as i64)?.unwrap_or(0) as u64;
        a.finish()?;
        self.default_gate = check_gate(Some(g), &format!("{what}.gate"))?;
        Ok(Value::Null)
    }

    /// The `lookup` command.
    fn cmd_lookup(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "L2ForwardCommandLookupArg";
        let mut a = Args::new(arg, what)?;
        let addrs = a.list("addrs")?;
        a.finish()?;
        let mut gates = Vec::new();
        for (i, v) in addrs.iter().enumerate() {
            let addr = mac_arg(v, &format!("{what}.addrs[{i}]"))?;
            let g = self.table.lookup(addr).ok_or_else(|| {
                Error::not_found(format!("MAC address '{}' does not exist", mac_string(addr)))
            })?;
            gates.push(Value::Int(g as i64));
        }
        Ok(Value::map().with("gates", Value::List(gates)))
    }

    /// The `populate` command.
    fn cmd_populate(&mut self, _ctx: &mut Context, arg: &Value) -> Result<Value> {
        let what = "L2ForwardCommandPopulateArg";
        let mut a = Args::new(arg, what)?;
        let base = a
            .any("base")
            .ok_or_else(|| Error::invalid(format!("{what}.base is required")))?;
        let base = mac_arg(base, &format!("{what}.base"))?;
        let count = a
            .int("count", 0, MAX_TABLE_SIZE * MAX_BUCKET_SIZE)?
            .unwrap_or(0);
        let gate_count = a
            .int("gate_count", 1, DROP_GATE as i64)?
            .ok_or_else(|| Error::invalid(format!("{what}.gate_count is required (1..8192)")))?;
        a.finish()?;
        // Consecutive addresses counting up from base (as a 48-bit big-endian
        // number); like BESS, entries that do not fit or exist are skipped.
        let mut be = u64::from_be_bytes({
            let b = base.to_le_bytes();
            [0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]
        });
        for i in 0..count {
            let b = be.to_be_bytes();
            let addr = u64::from_le_bytes([b[2], b[3], b[4], b[5], b[6], b[7], 0, 0]);
            let _ = self.table.add(addr, (i % gate_count) as u16);
            be = (be + 1) & ADDR;
        }
        Ok(Value::Null)
    }
}

impl Module for L2Forward {
    fn process_batch(&mut self, ctx: &mut Context, batch: &mut PacketBatch, _igate: u16) {
        let n = batch.len();
        let mut addrs = [0u64; MAX_BURST];
        let mut buckets = [(0usize, 0usize); MAX_BURST];
        let mut short = 0u64;
        for (i, p) in batch.pkts().iter().enumerate() {
            // Checked once here: the destination MAC is the first 6 bytes of the header.
            match p.data().get(..ETH_LEN) {
                Some(h) => {
                    let w = u64::from_le_bytes(h[..8].try_into().unwrap()) & ADDR;
                    addrs[i] = w;
                    let (b1, b2) = self.table.buckets(w);
                    buckets[i] = (b1, b2);
                    let bk = self.table.bucket;
                    prefetch(self.table.slots.as_ptr().wrapping_add(b1 * bk));
                    prefetch(self.table.slots.as_ptr().wrapping_add(b2 * bk));
                }
                None => short |= 1 << i,
            }
        }
        let def = self.default_gate;
        let mut gates = [0u16; MAX_BURST];
        let mut hit = 0u64;
        for i in 0..n {
            gates[i] = if short >> i & 1 == 1 {
                def
            } else {
                match self.table.lookup_in(buckets[i], addrs[i]) {
                    Some(g) => {
                        hit |= 1 << i;
                        g
                    }
                    None => def,
                }
            };
        }
        crate::util::send_each(ctx, batch, |i| match gates[i] {
            DROP_GATE if short >> i & 1 == 1 => Verdict::Drop(TableDrop::TooShort),
            DROP_GATE if hit >> i & 1 == 1 => Verdict::Drop(TableDrop::Rule),
            DROP_GATE => Verdict::Drop(TableDrop::NoMatch),
            g => Verdict::Gate(g),
        });
    }

    fn desc(&self) -> String {
        format!("{} entries", self.table.len())
    }
}

/// The L2Forward class.
pub static CLASS: ModuleClass = ModuleClass {
    name: "L2Forward",
    name_template: "l2_forward",
    help: "classifies packets with destination MAC address",
    arg_type: "L2ForwardArg",
    arg_doc: &[
        "size: int64 — number of buckets, a power of two up to 2^26 (default 1024)",
        "bucket: int64 — slots per bucket, 1, 2 or 4 (default 4); the table holds up to size x bucket addresses",
        "unknown destinations (broadcast too, unless added) go to the default gate (initially none: dropped, counted no_match)",
    ],
    igates: 1,
    ogates: bessemer_core::module::MAX_GATES,
    commands: &[
        CommandSpec {
            name: "add",
            arg_type: "L2ForwardCommandAddArg",
            help: "adds entries {addr, gate}; fails (adding none) if one exists or does not fit",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive L2Forward, L2Forward::cmd_add),
        },
        CommandSpec {
            name: "delete",
            arg_type: "L2ForwardCommandDeleteArg",
            help: "removes addresses; fails (removing none) if one is absent",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive L2Forward, L2Forward::cmd_delete),
        },
        CommandSpec {
            name: "set_default_gate",
            arg_type: "L2ForwardCommandSetDefaultGateArg",
            help: "sets the gate for unknown destinations (8192 = drop)",
            mt_safe: true,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive L2Forward, L2Forward::cmd_set_default_gate),
        },
        CommandSpec {
            name: "lookup",
            arg_type: "L2ForwardCommandLookupArg",
            help: "returns the gate of each address (error if one is absent)",
            mt_safe: true,
            reply_type: "L2ForwardCommandLookupResponse",
            mutates: false,
            handler: handler!(Exclusive L2Forward, L2Forward::cmd_lookup),
        },
        CommandSpec {
            name: "populate",
            arg_type: "L2ForwardCommandPopulateArg",
            help: "adds count consecutive addresses from base, gates round robin over gate_count",
            mt_safe: false,
            reply_type: "EmptyArg",
            mutates: true,
            handler: handler!(Exclusive L2Forward, L2Forward::cmd_populate),
        },
    ],
    drop_reasons: TableDrop::NAMES,
    max_workers: bessemer_core::ALL_WORKERS,
    create: |_, arg| {
        let what = "L2ForwardArg";
        let mut a = Args::new(arg, what)?;
        let size = a.int("size", 0, MAX_TABLE_SIZE)?.filter(|&s| s != 0).unwrap_or(1024);
        let bucket = a.int("bucket", 0, MAX_BUCKET_SIZE)?.filter(|&b| b != 0).unwrap_or(4);
        a.finish()?;
        if !(size as u64).is_power_of_two() {
            return Err(Error::invalid(format!("{what}.size: {size} is not a power of two")));
        }
        if !(bucket as u64).is_power_of_two() {
            return Err(Error::invalid(format!("{what}.bucket: {bucket} is not a power of two")));
        }
        Ok(Instance::Exclusive(Box::new(L2Forward {
            table: MacTable::new(size as usize, bucket as usize),
            default_gate: DROP_GATE,
        })))
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use bessemer_core::testing::Harness;
    use proptest::prelude::*;

    fn entries(e: &[(&str, i64)]) -> Value {
        Value::map().with(
            "entries",
            Value::List(
                e.iter()
                    .map(|(a, g)| Value::map().with("addr", *a).with("gate", *g))
                    .collect(),
            ),
        )
    }
    fn addrs(a: &[&str]) -> Value {
        Value::map().with(
            "addrs",
            Value::List(a.iter().map(|s| Value::from(*s)).collect()),
        )
    }
    fn frame(dst: [u8; 6]) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[..6].copy_from_slice(&dst);
        p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        p[12] = 0x08;
        p
    }

    #[test]
    fn forwards_by_destination_mac() {
        let mut h = Harness::new();
        h.add(&CLASS, "l2", &Value::map()).unwrap();
        let c: Vec<_> = (0..4).map(|g| h.capture("l2", g)).collect();
        h.command(
            "l2",
            "add",
            &entries(&[("02:00:00:00:00:01", 1), ("02:00:00:00:00:02", 2)]),
        )
        .unwrap();
        let (a, b, bc) = (
            frame([2, 0, 0, 0, 0, 1]),
            frame([2, 0, 0, 0, 0, 2]),
            frame([0xff; 6]),
        );
        h.inject(
            "l2",
            0,
            &[a.clone(), b.clone(), bc.clone(), a[..13].to_vec()],
        );
        assert_eq!(c[1].take_data(), vec![a.clone()]);
        assert_eq!(c[2].take_data(), vec![b.clone()]);
        // Broadcast has no special meaning (as in BESS): unknown, so dropped.
        assert_eq!(h.drops("l2", "no_match"), 1);
        assert_eq!(h.drops("l2", "too_short"), 1);
        h.command("l2", "set_default_gate", &Value::map().with("gate", 3))
            .unwrap();
        h.command("l2", "add", &entries(&[("ff:ff:ff:ff:ff:ff", 0)]))
            .unwrap();
        h.inject("l2", 0, &[bc.clone(), frame([2, 0, 0, 0, 0, 3])]);
        assert_eq!(c[0].take_data(), vec![bc]);
        assert_eq!(c[3].take_data(), vec![frame([2, 0, 0, 0, 0, 3])]);
        let r = h
            .command(
                "l2",
                "lookup",
                &addrs(&["02:00:00:00:00:02", "ff:ff:ff:ff:ff:ff"]),
            )
            .unwrap();
        assert_eq!(
            r,
            Value::map().with("gates", Value::List(vec![Value::Int(2), Value::Int(0)]))
        );
        h.command("l2", "delete", &addrs(&["02:00:00:00:00:02"]))
            .unwrap();
        h.inject("l2", 0, std::slice::from_ref(&b));
        assert_eq!(c[3].take_data(), vec![b]);
        h.command("l2", "add", &entries(&[("02:00:00:00:00:01", 8192)]))
            .unwrap_err();
        h.command("l2", "delete", &addrs(&["2:0:0:0:0:1"])).unwrap();
        h.command("l2", "add", &entries(&[("02:00:00:00:00:01", 8192)]))
            .unwrap();
        h.inject("l2", 0, std::slice::from_ref(&a));
        assert_eq!(h.drops("l2", "rule_drop"), 1);
    }

    #[test]
    fn commands_check_arguments_and_are_all_or_nothing() {
        let mut h = Harness::new();
        let e = h
            .add(&CLASS, "a", &Value::map().with("size", 1000))
            .unwrap_err();
        assert!(e.msg.contains("size"), "{}", e.msg);
        let e = h
            .add(&CLASS, "b", &Value::map().with("bucket", 8))
            .unwrap_err();
        assert!(e.msg.contains("bucket"), "{}", e.msg);
        h.add(
            &CLASS,
            "l2",
            &Value::map().with("size", 2).with("bucket", 2),
        )
        .unwrap();
        let e = h
            .command(
                "l2",
                "add",
                &entries(&[("02:00:00:00:00:01", 1), ("zz", 1)]),
            )
            .unwrap_err();
        assert!(e.msg.contains("entries[1].addr"), "{}", e.msg);
        let e = h
            .command("l2", "add", &entries(&[("02:00:00:00:00:01", 9000)]))
            .unwrap_err();
        assert!(e.msg.contains("entries[0].gate"), "{}", e.msg);
        // The table holds 4: a fifth fails and the call adds nothing.
        h.command(
            "l2",
            "add",
            &entries(&[
                ("02:00:00:00:00:01", 1),
                ("02:00:00:00:00:02", 1),
                ("02:00:00:00:00:03", 1),
            ]),
        )
        .unwrap();
        let e = h
            .command(
                "l2",
                "add",
                &entries(&[("02:00:00:00:00:04", 1), ("02:00:00:00:00:05", 1)]),
            )
            .unwrap_err();
        assert_eq!(e.code, Error::no_mem("").code);
        h.command("l2", "lookup", &addrs(&["02:00:00:00:00:04"]))
            .unwrap_err();
        let e = h
            .command(
                "l2",
                "delete",
                &addrs(&["02:00:00:00:00:01", "02:00:00:00:00:09"]),
            )
            .unwrap_err();
        assert_eq!(e.code, Error::not_found("").code);
        h.command("l2", "lookup", &addrs(&["02:00:00:00:00:01"]))
            .unwrap();
        // populate: consecutive addresses, gates round robin.
        h.add(&CLASS, "p", &Value::map()).unwrap();
        h.command(
            "p",
            "populate",
            &Value::map()
                .with("base", "02:00:00:00:00:fe")
                .with("count", 4)
                .with("gate_count", 3),
        )
        .unwrap();
        let r = h
            .command(
                "p",
                "lookup",
                &addrs(&[
                    "02:00:00:00:00:fe",
                    "02:00:00:00:00:ff",
                    "02:00:00:00:01:00",
                    "02:00:00:00:01:01",
                ]),
            )
            .unwrap();
        assert_eq!(
            r,
            Value::map().with("gates", Value::List([0, 1, 2, 0].map(Value::Int).to_vec()))
        );
        let e = h
            .command(
                "p",
                "populate",
                &Value::map()
                    .with("base", "02:00:00:00:00:00")
                    .with("count", 1),
            )
            .unwrap_err();
        assert!(e.msg.contains("gate_count"), "{}", e.msg);
    }

    #[test]
    fn displacement_fills_the_table_to_high_load() {
        // 95% of size x bucket slots, random addresses: every insert finds room.
        let mut t = MacTable::new(1024, 4);
        let mut x: u64 = 0x1234_5678;
        let mut added = Vec::new();
        for _ in 0..3891 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x & ADDR;
            if t.find(a).is_none() {
                t.add(a, (a % 7) as u16).unwrap();
                added.push(a);
            }
        }
        assert!(t.len() > 3880);
        for a in added {
            assert_eq!(t.lookup(a), Some((a % 7) as u16));
        }
    }

    /// How many of `addrs`, added in order, BESS's table of `size` x `bucket` accepts (a
    /// model of l2_forward.cc's l2_add_entry: a free slot in the primary bucket, else one
    /// entry of it moved to a free slot of its alternate bucket, else ENOMEM).
    fn bess_accepts(size: usize, bucket: usize, addrs: &[u64]) -> usize {
        let pow = size.trailing_zeros();
        let hash = |a: u64| crate::hash::crc32c(0, &a.to_le_bytes());
        let idx = |h: u32| h as usize & (size - 1);
        let alt = |h: u32, i: usize| {
            let tag = ((h >> pow) as u64 + 1).wrapping_mul(0x5bd1_e995);
            ((i as u64 ^ tag) & ((1u64 << (pow - 1)) - 1)) as usize
        };
        let mut t: Vec<Option<u64>> = vec![None; size * bucket];
        let mut accepted = 0;
        for &a in addrs {
            let h = hash(a);
            let i1 = idx(h);
            let i2 = alt(h, i1);
            let present =
                (0..bucket).any(|j| t[i1 * bucket + j] == Some(a) || t[i2 * bucket + j] == Some(a));
            if present {
                continue;
            }
            if let Some(j) = (0..bucket).find(|&j| t[i1 * bucket + j].is_none()) {
                t[i1 * bucket + j] = Some(a);
                accepted += 1;
                continue;
            }
            let mut placed = false;
            'moves: for j in 0..bucket {
                let e = t[i1 * bucket + j].unwrap();
                let he = hash(e);
                let v1 = idx(he);
                let v2 = alt(he, v1);
                if v1 == v2 || i1 == v2 {
                    break;
                }
                for k in 0..bucket {
                    if t[v2 * bucket + k].is_none() {
                        t[v2 * bucket + k] = Some(e);
                        // BESS then writes the new entry into slot 0 of the primary bucket.
                        t[i1 * bucket] = Some(a);
                        placed = true;
                        break 'moves;
                    }
                }
            }
            if placed {
                accepted += 1;
            }
        }
        accepted
    }

    fn sequential(n: usize) -> Vec<u64> {
        (0..n as u64)
            .map(|i| {
                let b = (0x0200_0000_0000u64 + i).to_be_bytes();
                u64::from_le_bytes([b[2], b[3], b[4], b[5], b[6], b[7], 0, 0])
            })
            .collect()
    }

    #[test]
    fn sequential_macs_fit_at_least_as_well_as_in_bess() {
        // BESS's default table (size 1024, bucket 4): thousands of sequential addresses.
        let addrs = sequential(4096);
        let bess = bess_accepts(1024, 4, &addrs);
        let mut t = MacTable::new(1024, 4);
        let ours = addrs.iter().filter(|&&a| t.add(a, 1).is_ok()).count();
        assert!(bess >= 2000, "model: BESS takes {bess}");
        assert!(ours >= bess, "we take {ours}, BESS {bess}");
        // And the first 3500 all fit, each found again.
        let mut t = MacTable::new(1024, 4);
        for (i, &a) in addrs[..3500].iter().enumerate() {
            t.add(a, (i % 100) as u16).unwrap();
        }
        for (i, &a) in addrs[..3500].iter().enumerate() {
            assert_eq!(t.lookup(a), Some((i % 100) as u16));
        }
    }

    #[test]
    fn populate_of_thousands_of_sequential_macs_forwards_each() {
        let mut h = Harness::new();
        h.add(&CLASS, "l2", &Value::map()).unwrap();
        h.command(
            "l2",
            "populate",
            &Value::map()
                .with("base", "02:00:00:00:00:00")
                .with("count", 3000)
                .with("gate_count", 3),
        )
        .unwrap();
        let caps: Vec<_> = (0..3u16).map(|g| h.capture("l2", g)).collect();
        // Frames to 02:00:00:00:0b:b7 (the last populated, 2999) and every 97th before it.
        let picks: Vec<u64> = (0..3000u64).step_by(97).chain([2999]).collect();
        let frames: Vec<Vec<u8>> = picks
            .iter()
            .map(|&i| {
                let b = (0x0200_0000_0000u64 + i).to_be_bytes();
                frame([b[2], b[3], b[4], b[5], b[6], b[7]])
            })
            .collect();
        h.inject("l2", 0, &frames);
        for (g, c) in caps.iter().enumerate() {
            let want: Vec<Vec<u8>> = picks
                .iter()
                .zip(&frames)
                .filter(|(&i, _)| i % 3 == g as u64)
                .map(|(_, f)| f.clone())
                .collect();
            assert_eq!(c.take_data(), want, "gate {g}");
        }
        assert_eq!(h.drops("l2", "no_match"), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn agrees_with_a_linear_scan(
            bits in 0u32..6,
            ops in proptest::collection::vec((any::<[u8; 6]>(), 0u16..4, any::<bool>()), 0..120),
            pkts in proptest::collection::vec((any::<[u8; 6]>(), any::<prop::sample::Index>(), any::<bool>()), 1..80),
        ) {
            // Small tables so buckets fill and displacement and "no space" happen; addresses
            // from a small pool so adds collide with existing ones and deletes hit.
            let mut h = Harness::new();
            h.add(&CLASS, "l2", &Value::map().with("size", 1i64 << bits).with("bucket", 2)).unwrap();
            h.command("l2", "set_default_gate", &Value::map().with("gate", 9)).unwrap();
            let caps: Vec<_> = (0..10).map(|g| h.capture("l2", g)).collect();
            let mut reference: Vec<([u8; 6], u16)> = Vec::new();
            let mut seen: Vec<[u8; 6]> = Vec::new();
            let mac = |m: [u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
            for (m, g, del) in &ops {
                let m = if *del && !seen.is_empty() { seen[m[0] as usize % seen.len()] } else { [m[0] & 0x3f, 0, 0, 0, 0, m[5] & 1] };
                seen.push(m);
                let has = reference.iter().any(|r| r.0 == m);
                if *del {
                    let r = h.command("l2", "delete", &addrs(&[&mac(m)]));
                    prop_assert_eq!(r.is_ok(), has);
                    reference.retain(|r| r.0 != m);
                } else {
                    let r = h.command("l2", "add", &entries(&[(&mac(m), *g as i64)]));
                    if has {
                        prop_assert!(r.is_err());
                    } else if r.is_ok() {
                        reference.push((m, *g));
                    } else {
                        // A refusal must leave the table as it was (checked by the packets
                        // below); an empty table never refuses.
                        prop_assert!(!reference.is_empty());
                    }
                }
            }
            let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 10];
            let mut input = Vec::new();
            for (m, pick, known) in &pkts {
                let m = if *known && !seen.is_empty() { seen[pick.index(seen.len())] } else { *m };
                let p = frame(m);
                let g = reference.iter().find(|r| r.0 == m).map(|r| r.1).unwrap_or(9);
                want[g as usize].push(p.clone());
                input.push(p);
            }
            h.inject("l2", 0, &input);
            for g in 0..10 {
                prop_assert_eq!(caps[g].take_data(), want[g].clone());
            }
        }
    }
}

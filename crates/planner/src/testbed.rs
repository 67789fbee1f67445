//! The veth testbed (docs/planner.md "The veth testbed"): a multi-queue veth pair made to
//! behave like the 82599's or the SFC9020's receive filters, so that the queue the model
//! predicts can be compared with the queue a packet really arrives on.
//!
//! - **Steering** ([`Steering`]): `bessemer_tbsteer` of `crates/bpf/bpf/testbed.bpf.c`,
//!   at TCX egress of the sender's veth end, evaluates a NIC configuration held in its maps
//!   and sets `skb->queue_mapping` so that the packet arrives on the chosen RX queue of the
//!   peer. [`tables`] turns a model configuration into those maps; [`Steering::apply`]
//!   writes them without a window in which a packet sees half a configuration.
//! - **Counting** ([`QueueCounter`]): `bessemer_tbcount`, XDP on the receiving end, counts
//!   each flow's packets per RX queue (`rx_queue_index`).
//! - **The veth rule** ([`VETH_QUEUE_MAPPING_OFFSET`]): measured by the `testbed` test.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use bessemer_bpf::testbed_prog;
use bessemer_bpf::{bpf, bpf_elf};
use bessemer_core::netns;

use crate::graph::{Dest, ModelError};
use crate::nic::{FilterKind, NicConfig, NicModel, FIVE};
use crate::pred::{Conj, Field, Header, ETH_IPV4, PROTO_TCP, PROTO_UDP, RSS_KEY};

/// On veth, a packet whose `skb->queue_mapping` is N (1..=queues) when it leaves the TCX
/// egress hook arrives on the peer's RX queue N − 1; 0 means "not set", and the kernel then
/// picks a queue by flow hash. Why: the stack reads a non-zero queue_mapping as a recorded
/// RX queue plus one (`skb_record_rx_queue`) when it picks the TX queue (`skb_tx_hash`), and
/// veth delivers TX queue i to the peer's RX queue i. Measured on Linux 6.18 by the
/// `testbed` test (`veth_queue_mapping_rule`), which fails if it ever changes. The one place
/// the rule lives: the steering program adds this to the queue it chose.
pub const VETH_QUEUE_MAPPING_OFFSET: u16 = 1;
/// Ordered filters the program evaluates (the 82599's 5-tuple filters).
pub const ORDERED_MAX: usize = 128;
/// Hash tables the program looks up after them.
pub const TABLES_MAX: usize = 2;
/// Largest RSS indirection table.
pub const RSS_MAX: usize = 128;
/// Hash-table entries per configuration (the map holds two configurations).
pub const HASHED_MAX: usize = 10240;
/// Queues the counter tells apart (`struct counts`).
pub const COUNTER_QUEUES: usize = 16;
/// The steering program's name in the kernel (how [`Steering::find`] recognises it).
pub const STEER_NAME: &str = "bessemer_tbstr";
/// How long [`Steering::apply`] waits after switching before it deletes the old
/// configuration: a packet that read the old generation finishes its lookups first (a
/// program run takes microseconds).
pub const GRACE: Duration = Duration::from_millis(10);

const DEST_DROP: u32 = 0xffff;
const F_ON: u32 = 1;
const F_RAW: u32 = 2;
const F_RSS: u32 = 4;
// Byte sizes of the C structs (testbed.bpf.c asserts the same).
const CONFIG_BYTES: usize = 352;
const ORDERED_BYTES: usize = 40;
const HKEY_BYTES: usize = 24;
const COUNTS_BYTES: usize = 8 * COUNTER_QUEUES;

/// A packet's fields as the programs see them (`struct tuple`): protocol, a pad byte, the
/// EtherType (the counter's; zero in steering keys), addresses and ports in network order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuple(pub [u8; 16]);

impl Tuple {
    fn put(&mut self, f: Field, v: u32) {
        let b = &mut self.0;
        match f {
            Field::IpProto => b[0] = v as u8,
            Field::SrcIp => b[4..8].copy_from_slice(&v.to_be_bytes()),
            Field::DstIp => b[8..12].copy_from_slice(&v.to_be_bytes()),
            Field::SrcPort => b[12..14].copy_from_slice(&(v as u16).to_be_bytes()),
            Field::DstPort => b[14..16].copy_from_slice(&(v as u16).to_be_bytes()),
            _ => {}
        }
    }

    /// The value and mask tuples of a filter over the 5-tuple.
    pub fn of_conj(c: &Conj) -> (Tuple, Tuple) {
        let (mut v, mut m) = (Tuple::default(), Tuple::default());
        for f in FIVE {
            v.put(f, c.v[f.index()] & c.m[f.index()]);
            m.put(f, c.m[f.index()]);
        }
        (v, m)
    }

    /// What the steering program parses from a packet with header `h` (IPv4 only).
    pub fn steering(h: &Header) -> Tuple {
        let h = wire(h);
        let mut t = Tuple::default();
        for f in FIVE {
            t.put(f, h.get(f));
        }
        t
    }

    /// The counter's key for a packet with header `h`: the steering tuple plus the
    /// EtherType; a frame that is not IPv4 is keyed by its EtherType alone.
    pub fn counter_key(h: &Header) -> Tuple {
        let eth = h.get(Field::EtherType) as u16;
        let mut t = if eth as u32 == ETH_IPV4 {
            Tuple::steering(h)
        } else {
            Tuple::default()
        };
        t.0[2..4].copy_from_slice(&eth.to_be_bytes());
        t
    }

    fn and(&self, m: &Tuple) -> Tuple {
        let mut r = *self;
        for (a, b) in r.0.iter_mut().zip(m.0) {
            *a &= b;
        }
        r
    }
}

/// The header of the packet the wire carries for `h`: a protocol other than TCP or UDP has
/// no ports (the programs read them as 0), and the RSS hash follows. The testbed's flows
/// are such headers; the model's fidelity holds for them.
pub fn wire(h: &Header) -> Header {
    let mut w = *h;
    let p = w.get(Field::IpProto);
    if w.get(Field::EtherType) == ETH_IPV4 && p != PROTO_TCP && p != PROTO_UDP {
        w.set(Field::SrcPort, 0);
        w.set(Field::DstPort, 0);
    }
    w.set(Field::RxQueue, 0);
    w.recompute_rss();
    w
}

/// One hash table of the steering program: the mask applied to a packet's tuple, and the
/// masked tuples it holds with their queues (or [`Dest::Drop`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HashTable {
    /// Mask of the table (82599 Flow Director: its global mask).
    pub mask: Tuple,
    /// Masked key -> destination; the first filter of a key wins, as in the model.
    pub entries: Vec<(Tuple, Dest)>,
}

/// A configuration as the steering program holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    /// Ordered filters, first match wins: (value, mask, destination).
    pub ordered: Vec<(Tuple, Tuple, Dest)>,
    /// Hash tables, looked up in order after the ordered filters.
    pub tables: Vec<HashTable>,
    /// RSS indirection table (empty: unmatched packets go to queue 0).
    pub rss: Vec<u16>,
}

/// The steering program's tables for configuration `cfg` of `model` (the 82599 or the
/// SFC9020), after `model.check`:
/// - 82599: its 5-tuple filters in order, then one table under Flow Director's global mask;
/// - SFC9020: no ordered filters, a full-match table, then a wildcard table (proto, dip,
///   dport): the most specific filter wins;
/// - then RSS over the indirection table.
pub fn tables(model: &dyn NicModel, cfg: &NicConfig) -> Result<Tables, ModelError> {
    model.check(cfg)?;
    let mut t = Tables {
        rss: cfg.rss.clone(),
        ..Tables::default()
    };
    if t.rss.len() > RSS_MAX || !(t.rss.is_empty() || t.rss.len().is_power_of_two()) {
        return Err(ModelError::Constraint(format!(
            "the testbed holds an RSS table of up to {RSS_MAX} entries, a power of two; not {}",
            t.rss.len()
        )));
    }
    let table = |kind: FilterKind, mask: Option<Conj>| -> Option<HashTable> {
        let mut first = cfg.filters.iter().filter(|f| f.kind == kind).peekable();
        let mask = Tuple::of_conj(&mask.or_else(|| first.peek().map(|f| f.matcher))?).1;
        let mut entries: Vec<(Tuple, Dest)> = Vec::new();
        for f in first {
            let (v, _) = Tuple::of_conj(&f.matcher);
            if !entries.iter().any(|(k, _)| *k == v) {
                entries.push((v, f.dest));
            }
        }
        Some(HashTable { mask, entries })
    };
    match model.name().as_str() {
        "82599" => {
            for f in cfg
                .filters
                .iter()
                .filter(|f| f.kind == FilterKind::FiveTuple)
            {
                let (v, m) = Tuple::of_conj(&f.matcher);
                t.ordered.push((v, m, f.dest));
            }
            t.tables.extend(table(FilterKind::FlowDirector, None));
        }
        "sfc9020" => {
            let full = crate::nic::match_fields(&Header::default(), &FIVE);
            let wild = crate::nic::match_fields(
                &Header::default(),
                &[Field::IpProto, Field::DstIp, Field::DstPort],
            );
            t.tables.extend(table(FilterKind::SfFull, Some(full)));
            t.tables.extend(table(FilterKind::SfWild, Some(wild)));
        }
        other => {
            return Err(ModelError::Input(format!(
                "the veth testbed emulates the 82599 and the SFC9020, not '{other}'"
            )))
        }
    }
    if t.ordered.len() > ORDERED_MAX {
        return Err(ModelError::Constraint(format!(
            "{} ordered filters (the testbed holds {ORDERED_MAX})",
            t.ordered.len()
        )));
    }
    let n: usize = t.tables.iter().map(|x| x.entries.len()).sum();
    if n > HASHED_MAX {
        return Err(ModelError::Constraint(format!(
            "{n} hash-table filters (the testbed holds {HASHED_MAX})"
        )));
    }
    let all = t
        .ordered
        .iter()
        .map(|o| o.2)
        .chain(t.tables.iter().flat_map(|x| x.entries.iter().map(|e| e.1)));
    for d in all {
        if let Dest::Kernel = d {
            return Err(ModelError::Constraint(
                "the testbed steers to queues or drops; it has no 'kernel' destination".into(),
            ));
        }
    }
    Ok(t)
}

/// What the steering program does with a packet of header `h` under `t`: its logic in
/// Rust, step for step, so tests can check [`tables`] against the model without root.
pub fn emulate(t: &Tables, h: &Header) -> Dest {
    let h = wire(h);
    if h.get(Field::EtherType) != ETH_IPV4 {
        return Dest::Queue(0);
    }
    let tu = Tuple::steering(&h);
    if let Some(o) = t.ordered.iter().find(|o| tu.and(&o.1) == o.0) {
        return o.2;
    }
    for x in &t.tables {
        let k = tu.and(&x.mask);
        if let Some(e) = x.entries.iter().find(|e| e.0 == k) {
            return e.1;
        }
    }
    if t.rss.is_empty() {
        return Dest::Queue(0);
    }
    let hash = crate::pred::toeplitz(&tu.0[4..16]);
    Dest::Queue(t.rss[(hash & 0xffff) as usize & (t.rss.len() - 1)])
}

fn dest_word(d: Dest) -> u32 {
    match d {
        Dest::Queue(q) => q as u32,
        _ => DEST_DROP,
    }
}

fn config_bytes(t: &Tables, flags: u32, raw: u16) -> Vec<u8> {
    let mut b = vec![0u8; CONFIG_BYTES];
    let mut flags = flags;
    if !t.rss.is_empty() {
        flags |= F_RSS;
    }
    b[0..4].copy_from_slice(&flags.to_ne_bytes());
    b[4..6].copy_from_slice(&VETH_QUEUE_MAPPING_OFFSET.to_ne_bytes());
    b[6..8].copy_from_slice(&raw.to_ne_bytes());
    b[8..12].copy_from_slice(&(t.ordered.len() as u32).to_ne_bytes());
    b[12..16].copy_from_slice(&(t.tables.len() as u32).to_ne_bytes());
    for (i, x) in t.tables.iter().enumerate() {
        b[16 + 16 * i..32 + 16 * i].copy_from_slice(&x.mask.0);
    }
    let mask = t.rss.len().max(1) as u32 - 1;
    b[48..52].copy_from_slice(&mask.to_ne_bytes());
    b[52..92].copy_from_slice(&RSS_KEY);
    for (i, q) in t.rss.iter().enumerate() {
        b[92 + 2 * i..94 + 2 * i].copy_from_slice(&q.to_ne_bytes());
    }
    b
}

fn hkey(gen: u32, table: u32, t: &Tuple) -> [u8; HKEY_BYTES] {
    let mut k = [0u8; HKEY_BYTES];
    k[0..16].copy_from_slice(&t.0);
    k[16..20].copy_from_slice(&(gen << 8 | table).to_ne_bytes());
    k
}

fn sys(e: bessemer_core::Error) -> ModelError {
    ModelError::Input(e.msg)
}

/// Why the testbed cannot be used in this build (its BPF programs were not built), if so.
pub fn unavailable() -> Option<String> {
    testbed_prog::unavailable()
}

fn object() -> Result<bpf_elf::Object, ModelError> {
    if let Some(why) = testbed_prog::unavailable() {
        return Err(ModelError::Input(why));
    }
    bpf_elf::Object::parse(testbed_prog::OBJECT).map_err(sys)
}

fn ifindex_in(iface: &str, ns: &str) -> Result<u32, ModelError> {
    netns::run_in(ns, || netns::ifindex(iface)).map_err(|e| {
        let where_ = if ns.is_empty() || e.msg.contains("network namespace") {
            String::new()
        } else {
            format!(" in network namespace '{ns}'")
        };
        ModelError::Input(format!("{}{where_}", e.msg))
    })
}

fn not_root(what: &str) -> Option<ModelError> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then(|| {
        ModelError::Input(format!(
            "{what} needs root (BPF programs on an interface: CAP_BPF and CAP_NET_ADMIN)"
        ))
    })
}

/// The steering program on one interface: loaded and attached by [`Steering::attach`], or
/// found again on the interface by [`Steering::find`].
pub struct Steering {
    iface: String,
    netns: String,
    ifindex: u32,
    prog: OwnedFd,
    maps: HashMap<String, OwnedFd>,
    /// The BPF link when attached with one (detached when this value drops); `None` when
    /// attached without a link (it stays until [`Steering::detach`]).
    link: Option<OwnedFd>,
}

impl Steering {
    /// Loads the steering program and attaches it at TCX egress of `iface` in network
    /// namespace `netns` ("" for this one), behind any programs already there. It leaves
    /// packets alone until [`Steering::apply`]. With `persistent`, it is attached without a
    /// link and stays after this process exits (the CLI's `apply`); otherwise dropping the
    /// value detaches it (tests: nothing outlives a failure).
    pub fn attach(iface: &str, netns: &str, persistent: bool) -> Result<Steering, ModelError> {
        let obj = object()?;
        if let Some(e) = not_root("the veth testbed") {
            return Err(e);
        }
        let ifindex = ifindex_in(iface, netns)?;
        if Steering::find(iface, netns)?.is_some() {
            return Err(ModelError::Input(format!(
                "{iface} already has the testbed's steering program (unapply it first)"
            )));
        }
        let loaded = bpf_elf::load(
            &obj,
            "tc",
            STEER_NAME,
            bpf::BPF_PROG_TYPE_SCHED_CLS,
            0,
            &[],
            0,
        )
        .map_err(sys)?;
        let (prog, maps) = loaded.into_parts();
        let maps: HashMap<String, OwnedFd> = maps.into_iter().collect();
        let pfd = prog.as_raw_fd();
        let what = format!("cannot attach the steering program at TCX egress of {iface}");
        let link = netns::run_in(netns, || {
            if persistent {
                bpf::tcx_attach(pfd, ifindex, bpf::BPF_TCX_EGRESS, &what).map(|_| None)
            } else {
                bpf::link_tcx(pfd, ifindex, bpf::BPF_TCX_EGRESS, &what).map(Some)
            }
        })
        .map_err(sys)?;
        Ok(Steering {
            iface: iface.into(),
            netns: netns.into(),
            ifindex,
            prog,
            maps,
            link,
        })
    }

    /// The steering program on `iface` if it has one (attached by another process too).
    pub fn find(iface: &str, netns: &str) -> Result<Option<Steering>, ModelError> {
        if let Some(e) = not_root("the veth testbed") {
            return Err(e);
        }
        let ifindex = ifindex_in(iface, netns)?;
        let ids =
            netns::run_in(netns, || bpf::tcx_query(ifindex, bpf::BPF_TCX_EGRESS)).map_err(sys)?;
        for id in ids {
            let prog = bpf::prog_by_id(id).map_err(sys)?;
            let (name, map_ids) = bpf::prog_info(prog.as_raw_fd()).map_err(sys)?;
            if name != STEER_NAME {
                continue;
            }
            let mut maps = HashMap::new();
            for m in map_ids {
                let fd = bpf::map_by_id(m).map_err(sys)?;
                maps.insert(bpf::map_name(fd.as_raw_fd()).map_err(sys)?, fd);
            }
            return Ok(Some(Steering {
                iface: iface.into(),
                netns: netns.into(),
                ifindex,
                prog,
                maps,
                link: None,
            }));
        }
        Ok(None)
    }

    fn map(&self, name: &str) -> Result<RawFd, ModelError> {
        self.maps
            .get(name)
            .map(|f| f.as_raw_fd())
            .ok_or_else(|| ModelError::Input(format!("the steering program has no map '{name}'")))
    }

    fn active(&self) -> Result<u32, ModelError> {
        let mut v = [0u8; 4];
        bpf::map_lookup(self.map("active")?, &0u32.to_ne_bytes(), &mut v).map_err(sys)?;
        Ok(u32::from_ne_bytes(v) & 1)
    }

    /// The hash-table keys of generation `gen`.
    fn hashed_keys(&self, gen: u32) -> Result<Vec<Vec<u8>>, ModelError> {
        let keys =
            bpf::map_keys(self.map("hashed")?, HKEY_BYTES, 2 * HASHED_MAX + 64).map_err(sys)?;
        Ok(keys
            .into_iter()
            .filter(|k| u32::from_ne_bytes(k[16..20].try_into().expect("4")) >> 8 == gen)
            .collect())
    }

    /// Writes `t` and switches to it. No packet sees a mix of the old and the new
    /// configuration, and none is dropped on the way (unless `t` drops it):
    /// 1. the new configuration goes into the generation not in use (leftovers of an
    ///    interrupted apply are removed from it first): ordered filters, hash-table entries,
    ///    then its `config` entry;
    /// 2. one store to `active` switches packets to it;
    /// 3. after [`GRACE`], the old generation's hash-table entries are deleted.
    pub fn apply(&self, t: &Tables) -> Result<(), ModelError> {
        self.write(t, F_ON, 0)
    }

    /// Sets `skb->queue_mapping = raw` on every packet (how the veth rule is measured).
    pub fn apply_raw(&self, raw: u16) -> Result<(), ModelError> {
        self.write(&Tables::default(), F_ON | F_RAW, raw)
    }

    fn write(&self, t: &Tables, flags: u32, raw: u16) -> Result<(), ModelError> {
        let old = self.active()?;
        let new = 1 - old;
        let hashed = self.map("hashed")?;
        let e = |what: &str| format!("cannot write the steering program's {what}");
        for k in self.hashed_keys(new)? {
            bpf::map_delete(hashed, &k).map_err(sys)?;
        }
        let ordered = self.map("ordered")?;
        for (i, (v, m, d)) in t.ordered.iter().enumerate() {
            let mut b = [0u8; ORDERED_BYTES];
            b[0..16].copy_from_slice(&v.0);
            b[16..32].copy_from_slice(&m.0);
            b[32..36].copy_from_slice(&dest_word(*d).to_ne_bytes());
            let slot = new * ORDERED_MAX as u32 + i as u32;
            bpf::map_update(ordered, &slot.to_ne_bytes(), &b, &e("ordered filters"))
                .map_err(sys)?;
        }
        for (i, x) in t.tables.iter().enumerate() {
            for (k, d) in &x.entries {
                bpf::map_update(
                    hashed,
                    &hkey(new, i as u32, k),
                    &dest_word(*d).to_ne_bytes(),
                    &e("hash tables (full?)"),
                )
                .map_err(sys)?;
            }
        }
        bpf::map_update(
            self.map("config")?,
            &new.to_ne_bytes(),
            &config_bytes(t, flags, raw),
            &e("configuration"),
        )
        .map_err(sys)?;
        bpf::map_update(
            self.map("active")?,
            &0u32.to_ne_bytes(),
            &new.to_ne_bytes(),
            &e("active generation"),
        )
        .map_err(sys)?;
        std::thread::sleep(GRACE);
        for k in self.hashed_keys(old)? {
            bpf::map_delete(hashed, &k).map_err(sys)?;
        }
        Ok(())
    }

    /// Stops steering (packets keep the queue the kernel picks) without detaching.
    pub fn off(&self) -> Result<(), ModelError> {
        self.write(&Tables::default(), 0, 0)
    }

    /// Detaches the program: the veth picks its queues as before.
    pub fn detach(mut self) -> Result<(), ModelError> {
        match self.link.take() {
            Some(link) => {
                bpf::link_detach(&link);
                Ok(())
            }
            None => {
                let (pfd, ifindex) = (self.prog.as_raw_fd(), self.ifindex);
                let what = format!("cannot detach the steering program from {}", self.iface);
                netns::run_in(&self.netns, || {
                    bpf::tcx_detach(pfd, ifindex, bpf::BPF_TCX_EGRESS, &what)
                })
                .map_err(sys)
            }
        }
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        if let Some(link) = &self.link {
            bpf::link_detach(link);
        }
    }
}

/// The counter on the receiving end: each flow's packets per RX queue.
pub struct QueueCounter {
    map: OwnedFd,
    _link: bpf::XdpLink,
}

impl QueueCounter {
    /// Loads the counter and attaches it (native XDP) to `iface` in namespace `netns`.
    /// It drops what it counts; dropping the value detaches it.
    pub fn attach(iface: &str, netns: &str) -> Result<QueueCounter, ModelError> {
        let obj = object()?;
        if let Some(e) = not_root("the veth testbed's counter") {
            return Err(e);
        }
        let ifindex = ifindex_in(iface, netns)?;
        let loaded = bpf_elf::load(
            &obj,
            "xdp",
            "bessemer_tbcnt",
            bpf::BPF_PROG_TYPE_XDP,
            bpf::BPF_XDP,
            &[],
            0,
        )
        .map_err(sys)?;
        let (prog, maps) = loaded.into_parts();
        let map = maps
            .into_iter()
            .find(|(n, _)| n == "flows")
            .map(|(_, f)| f)
            .ok_or_else(|| ModelError::Input("the counter has no map 'flows'".into()))?;
        let what = format!("cannot attach the queue counter to {iface}");
        let link =
            netns::run_in(netns, || bpf::XdpLink::attach(prog, ifindex, &what)).map_err(sys)?;
        Ok(QueueCounter { map, _link: link })
    }

    /// Packets per RX queue of every flow seen (queues beyond the last slot count in it).
    pub fn read(&self) -> Result<HashMap<Tuple, [u64; COUNTER_QUEUES]>, ModelError> {
        let fd = self.map.as_raw_fd();
        let mut out = HashMap::new();
        for k in bpf::map_keys(fd, 16, 1 << 16).map_err(sys)? {
            let mut v = [0u8; COUNTS_BYTES];
            if bpf::map_lookup(fd, &k, &mut v).map_err(sys)? {
                let mut c = [0u64; COUNTER_QUEUES];
                for (i, x) in c.iter_mut().enumerate() {
                    *x = u64::from_ne_bytes(v[8 * i..8 * i + 8].try_into().expect("8"));
                }
                out.insert(Tuple(k.try_into().expect("16")), c);
            }
        }
        Ok(out)
    }

    /// Forgets every flow.
    pub fn clear(&self) -> Result<(), ModelError> {
        let fd = self.map.as_raw_fd();
        for k in bpf::map_keys(fd, 16, 1 << 16).map_err(sys)? {
            bpf::map_delete(fd, &k).map_err(sys)?;
        }
        Ok(())
    }
}

/// On the receiving end: each RX queue's packets are processed on a CPU of its own, as on a
/// NIC with a queue per core (veth processes a packet on the sender's CPU). An XDP program
/// hands them over through a cpumap; the CPU's kernel thread then runs the stack for them.
pub struct QueueCpus {
    _maps: Vec<(String, OwnedFd)>,
    _link: bpf::XdpLink,
}

impl QueueCpus {
    /// Attaches to `iface` in `netns`: RX queue q is processed on CPU `queue_cpu[q]`.
    pub fn attach(iface: &str, netns: &str, queue_cpu: &[usize]) -> Result<QueueCpus, ModelError> {
        let obj = object()?;
        if let Some(e) = not_root("the veth testbed's queue-to-CPU program") {
            return Err(e);
        }
        let ifindex = ifindex_in(iface, netns)?;
        let loaded = bpf_elf::load(
            &obj,
            "xdp/cpu",
            "bessemer_tbcpu",
            bpf::BPF_PROG_TYPE_XDP,
            bpf::BPF_XDP,
            &[],
            0,
        )
        .map_err(sys)?;
        let (prog, maps) = loaded.into_parts();
        let fd = |name: &str| {
            maps.iter()
                .find(|(n, _)| n == name)
                .map(|(_, f)| f.as_raw_fd())
                .ok_or_else(|| ModelError::Input(format!("no map '{name}'")))
        };
        for (q, cpu) in queue_cpu.iter().enumerate() {
            // struct bpf_cpumap_val: queue size, no program.
            let mut v = [0u8; 8];
            v[0..4].copy_from_slice(&2048u32.to_ne_bytes());
            bpf::map_update(
                fd("cpus")?,
                &(*cpu as u32).to_ne_bytes(),
                &v,
                "cannot fill the cpumap",
            )
            .map_err(sys)?;
            bpf::map_update(
                fd("qcpu")?,
                &(q as u32).to_ne_bytes(),
                &(*cpu as u32).to_ne_bytes(),
                "cannot map a queue to a CPU",
            )
            .map_err(sys)?;
        }
        let what = format!("cannot attach the queue-to-CPU program to {iface}");
        let link =
            netns::run_in(netns, || bpf::XdpLink::attach(prog, ifindex, &what)).map_err(sys)?;
        Ok(QueueCpus {
            _maps: maps,
            _link: link,
        })
    }
}

/// An Ethernet frame carrying a packet of header `h` from `src` to `dst` (MACs), with
/// `payload` bytes after the headers: IPv4 with a UDP or TCP header (other protocols: no
/// L4 header), or, for another EtherType, just the payload.
pub fn frame(h: &Header, src: [u8; 6], dst: [u8; 6], payload: usize) -> Vec<u8> {
    let h = wire(h);
    let eth = h.get(Field::EtherType) as u16;
    let mut f = Vec::with_capacity(64 + payload);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&eth.to_be_bytes());
    if eth as u32 != ETH_IPV4 {
        f.resize(f.len() + payload.max(46), 0);
        return f;
    }
    let proto = h.get(Field::IpProto);
    let l4 = match proto {
        PROTO_UDP => 8,
        PROTO_TCP => 20,
        _ => 0,
    };
    let total = (20 + l4 + payload) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = proto as u8;
    ip[12..16].copy_from_slice(&h.get(Field::SrcIp).to_be_bytes());
    ip[16..20].copy_from_slice(&h.get(Field::DstIp).to_be_bytes());
    let sum = ip
        .chunks(2)
        .fold(0u32, |s, c| s + u16::from_be_bytes([c[0], c[1]]) as u32);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let sport = (h.get(Field::SrcPort) as u16).to_be_bytes();
    let dport = (h.get(Field::DstPort) as u16).to_be_bytes();
    match proto {
        PROTO_UDP => {
            f.extend_from_slice(&sport);
            f.extend_from_slice(&dport);
            f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]); // no checksum
        }
        PROTO_TCP => {
            f.extend_from_slice(&sport);
            f.extend_from_slice(&dport);
            f.extend_from_slice(&[0; 8]); // sequence and acknowledgement numbers
            f.extend_from_slice(&[0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]); // SYN, window
        }
        _ => {}
    }
    f.resize(f.len() + payload, 0);
    f
}

/// A raw AF_PACKET socket bound to an interface: sends whole frames out of it.
pub struct Sender {
    fd: OwnedFd,
    ifindex: u32,
}

impl Sender {
    /// Opens the socket on `iface` in namespace `netns`.
    pub fn open(iface: &str, netns: &str) -> Result<Sender, ModelError> {
        let ifindex = ifindex_in(iface, netns)?;
        let fd = netns::run_in(netns, || {
            netns::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                0,
                "cannot open a packet socket",
            )
        })
        .map_err(sys)?;
        Ok(Sender { fd, ifindex })
    }

    /// Sends one frame.
    pub fn send(&self, frame: &[u8]) -> Result<(), ModelError> {
        // SAFETY: sockaddr_ll is plain data; zero is a valid value.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = self.ifindex as i32;
        sa.sll_halen = 6;
        sa.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: the frame and the address are valid for the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(sys(netns::os_error("cannot send a frame")));
        }
        Ok(())
    }
}

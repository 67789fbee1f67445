//! The veth testbed: the steering program's tables agree with each NIC model's semantic
//! function (in Rust, no root); on a real 4-queue veth pair, the veth queue_mapping rule,
//! and model fidelity measured: for random configurations and flows of the 82599 and the
//! SFC9020, the queue the model predicts is the queue each packet arrives on.

mod common;

use bessemer_planner::graph::Dest;
use bessemer_planner::nic::{Intel82599, NicConfig, NicModel, Sfc9020};
use bessemer_planner::pred::{Field, Header};
use bessemer_planner::search::{full_search, generate_flows, Balance, FlowMapMode};
use bessemer_planner::testbed::{emulate, tables, wire};
use proptest::prelude::*;

/// The EtherType the tests use for frames that are not IPv4 (local experimental, which no
/// stack in the test's namespaces sends).
const OTHER_ETH: u32 = 0x88b5;

fn not_ipv6(mut h: Header) -> Header {
    if h.get(Field::EtherType) != 0x0800 {
        h.set(Field::EtherType, OTHER_ETH);
        h.recompute_rss();
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The program's logic (emulated in Rust) over `tables(cfg)` is the 82599's semantics.
    #[test]
    fn steering_tables_are_the_82599_semantics(
        cfg in common::config_82599(4),
        hs in prop::collection::vec(common::header(), 1..40),
    ) {
        let m = Intel82599 { queues: 4 };
        let t = tables(&m, &cfg).unwrap();
        for h in hs {
            let h = wire(&h);
            prop_assert_eq!(emulate(&t, &h), m.semantic(&cfg, &h), "{}", h);
        }
    }

    /// The same for the SFC9020 (full-match, then wildcard filters, then RSS).
    #[test]
    fn steering_tables_are_the_sfc9020_semantics(
        cfg in common::config_sfc(4),
        hs in prop::collection::vec(common::header(), 1..40),
    ) {
        let m = Sfc9020 { queues: 4 };
        let t = tables(&m, &cfg).unwrap();
        for h in hs {
            let h = wire(&h);
            prop_assert_eq!(emulate(&t, &h), m.semantic(&cfg, &h), "{}", h);
        }
    }
}

#[test]
fn tables_of_a_searched_configuration_and_refusals() {
    // A plan that fills the 82599's 128 5-tuple filters and goes on in Flow Director.
    let m = Intel82599 { queues: 4 };
    let flows = generate_flows(300, 3, 0, 0);
    let p = full_search(&m, &Balance, FlowMapMode::Incremental, &flows, 0).unwrap();
    let t = tables(&m, &p.cfg).unwrap();
    assert_eq!(t.ordered.len(), 128);
    assert_eq!(t.tables.len(), 1);
    for f in &flows {
        assert_eq!(emulate(&t, &f.header), m.semantic(&p.cfg, &f.header));
    }
    // Other models are not emulated; configurations the NIC cannot hold are refused.
    let x = bessemer_planner::nic::XdpPort {
        queues: 4,
        map_entries: 8,
    };
    let e = tables(&x, &x.initial_config()).unwrap_err();
    assert!(e.to_string().contains("82599 and the SFC9020"), "{e}");
    let bad = NicConfig {
        rss: vec![9; 128],
        ..m.initial_config()
    };
    assert!(tables(&m, &bad).is_err());
}

#[cfg(all(root, bpf_clang))]
mod veth {
    use super::*;
    use bessemer_planner::testbed::{frame, QueueCounter, Sender, Tuple};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::HashMap;
    use std::process::Command;
    use std::time::{Duration, Instant};

    pub const QUEUES: u16 = 4;
    const PACKETS_PER_FLOW: u64 = 2;

    fn sh(args: &[&str]) -> String {
        let out = Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
        assert!(
            out.status.success(),
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A namespace removed on drop (also when the test fails).
    pub struct Netns(pub String);

    impl Netns {
        fn new(prefix: &str) -> Netns {
            // Unique per test too: the tests of this file run in parallel in one process.
            static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let ns = Netns(format!("{prefix}{}x{seq}", std::process::id()));
            let _ = Command::new("ip")
                .args(["netns", "del", &ns.0])
                .stderr(std::process::Stdio::null())
                .status();
            sh(&["ip", "netns", "add", &ns.0]);
            // No IPv6 router solicitations or DAD frames among the counted ones.
            for k in ["all", "default"] {
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    &ns.0,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ]);
            }
            ns
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    /// A sender namespace with `ts` and a receiver namespace with `tr`, a veth pair of
    /// [`QUEUES`] queues each way, all of them in use.
    pub struct Bed {
        pub s: Netns,
        pub r: Netns,
    }

    impl Bed {
        pub fn new() -> Bed {
            let s = Netns::new("tbs");
            let r = Netns::new("tbr");
            let q = QUEUES.to_string();
            sh(&[
                "ip",
                "-n",
                &s.0,
                "link",
                "add",
                "ts",
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                "tr",
                "netns",
                &r.0,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ]);
            for (ns, dev) in [(&s.0, "ts"), (&r.0, "tr")] {
                // veth uses one queue pair unless asked for more.
                sh(&[
                    "ip", "netns", "exec", ns, "ethtool", "-L", dev, "rx", &q, "tx", &q,
                ]);
                sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            }
            Bed { s, r }
        }
    }

    /// Sends `flows` (PACKETS_PER_FLOW each) and returns, per counter key, the packets
    /// per RX queue; waits (at most 5 s) until the counter has them all.
    pub fn run_flows(
        bed: &Bed,
        tx: &Sender,
        counter: &QueueCounter,
        flows: &[Header],
    ) -> HashMap<Tuple, [u64; 16]> {
        counter.clear().unwrap();
        let src = [0x02, 0, 0, 0, 0, 1];
        let dst = [0x02, 0, 0, 0, 0, 2];
        for h in flows {
            let f = frame(h, src, dst, 18);
            for _ in 0..PACKETS_PER_FLOW {
                tx.send(&f).unwrap();
            }
        }
        let want = flows.len() as u64 * PACKETS_PER_FLOW;
        let t = Instant::now();
        loop {
            let seen = counter.read().unwrap();
            let n: u64 = seen.values().flat_map(|c| c.iter()).sum();
            if n >= want {
                assert_eq!(n, want, "more packets than sent: {seen:?}");
                return seen;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{n} of {want} packets counted on {} after 5 s",
                bed.r.0
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `n` random flows from the common pools (which make filters match often), with
    /// distinct keys, plus frames that are not IPv4.
    pub fn random_flows(runner: &mut TestRunner, n: usize) -> Vec<Header> {
        let mut out: Vec<Header> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..n * 4 {
            if out.len() >= n {
                break;
            }
            let h = wire(&not_ipv6(
                common::header().new_tree(runner).unwrap().current(),
            ));
            if seen.insert(Tuple::counter_key(&h)) {
                out.push(h);
            }
        }
        out
    }
}

/// On veth, skb->queue_mapping N (1..=4) set at TCX egress arrives on the peer's RX queue
/// N − 1 (VETH_QUEUE_MAPPING_OFFSET); 0 leaves the choice to the kernel's flow hash.
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn veth_queue_mapping_rule() {
    #[cfg(all(root, bpf_clang))]
    {
        use bessemer_planner::testbed::{
            QueueCounter, Sender, Steering, VETH_QUEUE_MAPPING_OFFSET,
        };
        use proptest::test_runner::TestRunner;
        let bed = veth::Bed::new();
        let counter = QueueCounter::attach("tr", &bed.r.0).unwrap();
        let steer = Steering::attach("ts", &bed.s.0, false).unwrap();
        let tx = Sender::open("ts", &bed.s.0).unwrap();
        let mut runner = TestRunner::deterministic();
        let flows = veth::random_flows(&mut runner, 32);
        for raw in 0..=veth::QUEUES + 1 {
            steer.apply_raw(raw).unwrap();
            let seen = veth::run_flows(&bed, &tx, &counter, &flows);
            let mut per_queue = [0u64; 16];
            for c in seen.values() {
                for (q, n) in c.iter().enumerate() {
                    per_queue[q] += n;
                }
            }
            eprintln!(
                "queue_mapping {raw}: packets per RX queue {:?}",
                &per_queue[..veth::QUEUES as usize]
            );
            if (VETH_QUEUE_MAPPING_OFFSET..veth::QUEUES + VETH_QUEUE_MAPPING_OFFSET).contains(&raw)
            {
                let q = (raw - VETH_QUEUE_MAPPING_OFFSET) as usize;
                let total: u64 = per_queue.iter().sum();
                assert_eq!(
                    per_queue[q], total,
                    "queue_mapping {raw} should land on RX queue {q}: {per_queue:?}"
                );
            }
        }
        steer.detach().unwrap();
    }
}

/// Model fidelity on the testbed: for random configurations (and searched ones that fill
/// the tables) and random flows, every packet arrives on the queue the model predicts.
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn model_fidelity_on_veth() {
    #[cfg(all(root, bpf_clang))]
    {
        use bessemer_planner::testbed::{QueueCounter, Sender, Steering, Tuple};
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::TestRunner;
        const RANDOM_CONFIGS: usize = 25;
        const FLOWS: usize = 48;
        let bed = veth::Bed::new();
        let counter = QueueCounter::attach("tr", &bed.r.0).unwrap();
        let steer = Steering::attach("ts", &bed.s.0, false).unwrap();
        let tx = Sender::open("ts", &bed.s.0).unwrap();
        let mut runner = TestRunner::deterministic();
        let i82599 = Intel82599 {
            queues: veth::QUEUES,
        };
        let sfc = Sfc9020 {
            queues: veth::QUEUES,
        };
        let models: [(&dyn NicModel, _); 2] = [
            (&i82599, common::config_82599(veth::QUEUES).boxed()),
            (&sfc, common::config_sfc(veth::QUEUES).boxed()),
        ];
        let (mut checked, mut agreed, mut configs) = (0usize, 0usize, 0usize);
        for (m, strategy) in models {
            let mut cases: Vec<(NicConfig, Vec<Header>)> = Vec::new();
            for _ in 0..RANDOM_CONFIGS {
                let mut cfg = strategy.new_tree(&mut runner).unwrap().current();
                // Now and then RSS off: unmatched packets on queue 0.
                if cases.len() % 5 == 4 {
                    cfg.rss.clear();
                }
                cases.push((cfg, veth::random_flows(&mut runner, FLOWS)));
            }
            // Searched configurations: full tables (82599: 128 5-tuple filters, then Flow
            // Director), with the planned flows and random ones.
            for seed in 1..=2 {
                let flows = generate_flows(200, seed, 0, 0);
                let p = full_search(m, &Balance, FlowMapMode::Incremental, &flows, 0).unwrap();
                let mut hs: Vec<Header> = flows.iter().map(|f| f.header).collect();
                hs.extend(veth::random_flows(&mut runner, 16));
                cases.push((p.cfg.clone(), hs));
            }
            for (cfg, flows) in cases {
                let t = tables(m, &cfg).unwrap();
                // Each round rewrites the tables of the last: the update path every time.
                steer.apply(&t).unwrap();
                let seen = veth::run_flows(&bed, &tx, &counter, &flows);
                configs += 1;
                for h in &flows {
                    let want = m.semantic(&cfg, h);
                    let Dest::Queue(q) = want else {
                        panic!("{} sends {h} to {want}: not a queue", m.name())
                    };
                    let c = seen
                        .get(&Tuple::counter_key(h))
                        .unwrap_or_else(|| panic!("{h}: never counted"));
                    checked += 1;
                    let total: u64 = c.iter().sum();
                    if c[q as usize] == total {
                        agreed += 1;
                    } else {
                        eprintln!(
                            "{}: {h} predicted on Q{q}, arrived per queue {:?}",
                            m.name(),
                            &c[..veth::QUEUES as usize]
                        );
                    }
                }
            }
        }
        eprintln!(
            "model fidelity on veth: {agreed}/{checked} flows on the predicted queue over {configs} configurations"
        );
        assert_eq!(agreed, checked, "model fidelity on veth");
        // The control: without steering, the kernel's own choice disagrees with the model
        // for some flow, so the agreement above is the program's doing.
        steer.off().unwrap();
        let (cfg, flows) = (
            common::config_82599(veth::QUEUES)
                .new_tree(&mut runner)
                .unwrap()
                .current(),
            veth::random_flows(&mut runner, FLOWS),
        );
        let seen = veth::run_flows(&bed, &tx, &counter, &flows);
        let off_agreed = flows
            .iter()
            .filter(|h| {
                let Dest::Queue(q) = i82599.semantic(&cfg, h) else {
                    return false;
                };
                let c = &seen[&Tuple::counter_key(h)];
                c[q as usize] == c.iter().sum::<u64>()
            })
            .count();
        eprintln!(
            "steering off: {off_agreed}/{} flows on the predicted queue",
            flows.len()
        );
        assert!(
            off_agreed < flows.len(),
            "the control agreed: the check sees nothing"
        );
        steer.detach().unwrap();
    }
}

/// Reconfiguration under load: while a thread sends, the configuration switches back and
/// forth between two random ones. Every packet arrives (none dropped) and on the queue one
/// of the two configurations gives its flow (none sees a mix).
#[test]
#[cfg_attr(not(root), ignore = "needs root: network namespaces and veths")]
#[cfg_attr(
    all(root, not(bpf_clang)),
    ignore = "needs clang to build the testbed's BPF programs (install the 'clang' package)"
)]
fn reconfiguration_under_load() {
    #[cfg(all(root, bpf_clang))]
    {
        use bessemer_planner::testbed::{frame, QueueCounter, Sender, Steering, Tuple};
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::TestRunner;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::time::{Duration, Instant};
        const SWITCHES: usize = 40;
        let bed = veth::Bed::new();
        let counter = QueueCounter::attach("tr", &bed.r.0).unwrap();
        let steer = Steering::attach("ts", &bed.s.0, false).unwrap();
        let tx = Sender::open("ts", &bed.s.0).unwrap();
        let mut runner = TestRunner::deterministic();
        let m = Intel82599 {
            queues: veth::QUEUES,
        };
        let strat = common::config_82599(veth::QUEUES);
        let a = strat.new_tree(&mut runner).unwrap().current();
        let b = strat.new_tree(&mut runner).unwrap().current();
        let (ta, tb) = (tables(&m, &a).unwrap(), tables(&m, &b).unwrap());
        let flows = veth::random_flows(&mut runner, 32);
        let moved = flows
            .iter()
            .filter(|h| m.semantic(&a, h) != m.semantic(&b, h))
            .count();
        assert!(moved > 0, "the two configurations place every flow alike");
        let frames: Vec<Vec<u8>> = flows
            .iter()
            .map(|h| frame(h, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 18))
            .collect();
        steer.apply(&ta).unwrap();
        counter.clear().unwrap();
        let stop = AtomicBool::new(false);
        let sent = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Bounded: stops when told, or after 20 s whatever happens.
                let t = Instant::now();
                while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(20) {
                    for f in &frames {
                        tx.send(f).unwrap();
                    }
                    sent.fetch_add(frames.len() as u64, Ordering::Relaxed);
                }
            });
            for i in 0..SWITCHES {
                steer.apply(if i % 2 == 0 { &tb } else { &ta }).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let want = sent.load(Ordering::Relaxed);
        let t = Instant::now();
        let seen = loop {
            let seen = counter.read().unwrap();
            let n: u64 = seen.values().flat_map(|c| c.iter()).sum();
            if n >= want || t.elapsed() > Duration::from_secs(5) {
                assert_eq!(n, want, "packets counted vs sent");
                break seen;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for h in &flows {
            let allowed = [m.semantic(&a, h), m.semantic(&b, h)];
            let c = &seen[&Tuple::counter_key(h)];
            for (q, n) in c.iter().enumerate() {
                assert!(
                    *n == 0 || allowed.contains(&Dest::Queue(q as u16)),
                    "{h}: {n} packets on Q{q}, the configurations give {allowed:?}"
                );
            }
        }
        eprintln!(
            "{want} packets of {} flows ({moved} change queue) over {SWITCHES} switches, none lost or mis-steered",
            flows.len()
        );
        steer.detach().unwrap();
    }
}

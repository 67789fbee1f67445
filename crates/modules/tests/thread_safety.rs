//! Every class's thread-safety declarations, as BESS makes them: `ModuleClass::max_workers` is
//! BESS's `max_allowed_workers_` (how many workers may run one instance; a placement beyond it
//! is what CheckSchedulingConstraints reports, and pybess's `resume_all` refuses with
//! `ConstraintError`), and `CommandSpec::mt_safe` BESS's `Command::THREAD_SAFE`.
//!
//! Where each value comes from:
//! * omec-project/bess (the fork the UPF runs on, the specification):
//!   `core/modules/<file>.h` / `.cc` — `max_allowed_workers_` set in the class's
//!   constructor (`Worker::kMaxWorkers`, 64, shown here as `ALL`; WorkerSplit's
//!   `kNumOGates` is `Worker::kMaxWorkers` too; NAT sets 2), otherwise `Module`'s default
//!   of 1 (`core/module.h`); the flags are the `Command::THREAD_SAFE` / `THREAD_UNSAFE` of
//!   each entry of the class's `cmds` table in the `.cc`.
//! * SequentialUpdate: the fork's `sample_plugin/modules/sequential_update.{h,cc}`.
//! * ESPEncap, ESPDecap: Bessemer's own (no BESS has them): one worker, every command
//!   needs the workers paused.
//!
//! Every class the fork has is in the fork's tree, so upstream NetSys/bess is not needed.

use bessemer_core::ALL_WORKERS as ALL;

/// (class, BESS's `max_allowed_workers_`, where it is set).
const WORKERS: &[(&str, u32, &str)] = &[
    ("ACL", ALL, "acl.h"),
    ("ArpResponder", 1, "arp_responder.h (default)"),
    ("BPF", ALL, "bpf.h"),
    ("Buffer", 1, "buffer.h (default)"),
    ("Bypass", ALL, "bypass.h"),
    ("Counter", ALL, "counter.h"),
    ("DRR", ALL, "drr.cc, DRR::DRR()"),
    ("Dump", 1, "dump.h (default)"),
    ("ESPDecap", 1, "Bessemer's own class"),
    ("ESPEncap", 1, "Bessemer's own class"),
    ("EtherEncap", ALL, "ether_encap.h"),
    ("ExactMatch", ALL, "exact_match.h"),
    ("FlowGen", 1, "flowgen.h (default)"),
    ("FlowMeasure", 1, "flow_measure.h (set to 1)"),
    ("GenericDecap", ALL, "generic_decap.h"),
    ("GenericEncap", ALL, "generic_encap.h"),
    ("GtpuDecap", ALL, "gtpu_decap.h"),
    ("GtpuEcho", ALL, "gtpu_echo.h"),
    ("GtpuEncap", ALL, "gtpu_encap.h"),
    ("GtpuParser", ALL, "gtpu_parser.h"),
    ("GtpuPathMonitoring", 1, "gtpu_path_monitoring.h (set to 1)"),
    ("HashLB", ALL, "hash_lb.h"),
    ("IPChecksum", ALL, "ip_checksum.h"),
    ("IPDefrag", ALL, "ip_defrag.h"),
    ("IPEncap", ALL, "ip_encap.h"),
    ("IPFrag", ALL, "ip_frag.h"),
    ("IPLookup", ALL, "ip_lookup.h"),
    ("IPSwap", ALL, "ipswap.h"),
    ("L2Forward", ALL, "l2_forward.h"),
    ("L4Checksum", ALL, "l4_checksum.h"),
    ("MACSwap", ALL, "macswap.h"),
    ("MPLSPop", ALL, "mpls_pop.cc, MPLSPop::MPLSPop()"),
    ("Measure", ALL, "measure.h"),
    ("Merge", ALL, "merge.h"),
    ("MetadataTest", ALL, "mttest.h"),
    ("NAT", 2, "nat.h"),
    ("NoOP", 1, "noop.h (default)"),
    ("PortInc", ALL, "port_inc.h"),
    ("PortOut", ALL, "port_out.h"),
    ("Qos", ALL, "qos.h"),
    ("Queue", ALL, "queue.h"),
    ("QueueInc", 1, "queue_inc.h (default)"),
    ("QueueOut", 1, "queue_out.h (default)"),
    ("RandomSplit", ALL, "random_split.h"),
    ("RandomUpdate", ALL, "random_update.h"),
    ("Replicate", ALL, "replicate.h"),
    ("Rewrite", ALL, "rewrite.h"),
    ("RoundRobin", 1, "round_robin.h (default)"),
    (
        "SequentialUpdate",
        1,
        "sample_plugin sequential_update.h (default)",
    ),
    ("SetMetadata", ALL, "set_metadata.h"),
    ("Sink", ALL, "sink.h"),
    ("Source", 1, "source.h (default)"),
    ("Split", ALL, "split.h"),
    ("StaticNAT", 1, "static_nat.h (default)"),
    ("Timestamp", ALL, "timestamp.h"),
    ("Update", ALL, "update.h"),
    ("UpdateTTL", ALL, "update_ttl.h"),
    ("UrlFilter", 1, "url_filter.h (default)"),
    ("VLANPop", ALL, "vlan_pop.h"),
    ("VLANPush", ALL, "vlan_push.h"),
    ("VLANSplit", ALL, "vlan_split.h"),
    ("VXLANDecap", ALL, "vxlan_decap.h"),
    ("VXLANEncap", ALL, "vxlan_encap.h"),
    ("WildcardMatch", ALL, "wildcard_match.h"),
    ("WorkerSplit", ALL, "worker_split.h (kNumOGates)"),
];

/// (class, command, `THREAD_SAFE`), from each class's `cmds` table in its `.cc`; classes
/// without commands are absent.
const COMMANDS: &[(&str, &str, bool)] = &[
    ("ACL", "add", false),
    ("ACL", "clear", false),
    ("ArpResponder", "add", false),
    ("BPF", "add", false),
    ("BPF", "delete", false),
    ("BPF", "clear", false),
    ("BPF", "get_initial_arg", true),
    ("Counter", "add", true),
    ("Counter", "removeAll", true),
    ("Counter", "remove", true),
    ("DRR", "set_quantum_size", false),
    ("DRR", "set_max_flow_queue_size", false),
    ("Dump", "set_interval", false),
    ("ExactMatch", "get_initial_arg", true),
    ("ExactMatch", "get_runtime_config", true),
    ("ExactMatch", "set_runtime_config", false),
    ("ExactMatch", "add", true),
    ("ExactMatch", "delete", true),
    ("ExactMatch", "clear", true),
    ("ExactMatch", "set_default_gate", true),
    ("FlowGen", "update", false),
    ("FlowGen", "set_burst", true),
    ("FlowMeasure", "read", true),
    ("FlowMeasure", "flip", true),
    ("GtpuPathMonitoring", "add", true),
    ("GtpuPathMonitoring", "delete", true),
    ("GtpuPathMonitoring", "clear", true),
    ("GtpuPathMonitoring", "read", true),
    ("HashLB", "set_mode", false),
    ("HashLB", "set_gates", false),
    ("IPFrag", "get_eth_mtu", true),
    ("IPLookup", "add", false),
    ("IPLookup", "delete", false),
    ("IPLookup", "clear", false),
    ("L2Forward", "add", false),
    ("L2Forward", "delete", false),
    ("L2Forward", "set_default_gate", true),
    ("L2Forward", "lookup", true),
    ("L2Forward", "populate", false),
    ("MPLSPop", "set", false),
    ("Measure", "get_summary", true),
    ("Measure", "clear", true),
    ("NAT", "get_initial_arg", true),
    ("NAT", "get_runtime_config", true),
    ("NAT", "set_runtime_config", true),
    ("PortInc", "set_burst", true),
    ("Qos", "add", true),
    ("Qos", "delete", true),
    ("Qos", "clear", true),
    ("Qos", "set_default_gate", true),
    ("Queue", "set_burst", true),
    ("Queue", "set_size", false),
    ("Queue", "get_status", true),
    ("QueueInc", "set_burst", true),
    ("RandomSplit", "set_droprate", false),
    ("RandomSplit", "set_gates", false),
    ("RandomUpdate", "add", false),
    ("RandomUpdate", "clear", false),
    ("Replicate", "set_gates", false),
    ("Rewrite", "add", false),
    ("Rewrite", "clear", false),
    ("RoundRobin", "set_mode", false),
    ("RoundRobin", "set_gates", false),
    ("SequentialUpdate", "add", false),
    ("SequentialUpdate", "clear", false),
    ("Source", "set_pkt_size", true),
    ("Source", "set_burst", true),
    ("StaticNAT", "get_initial_arg", true),
    ("StaticNAT", "get_runtime_config", true),
    ("StaticNAT", "set_runtime_config", true),
    ("Update", "add", false),
    ("Update", "clear", false),
    ("UrlFilter", "get_initial_arg", true),
    ("UrlFilter", "get_runtime_config", true),
    ("UrlFilter", "set_runtime_config", false),
    ("UrlFilter", "add", false),
    ("UrlFilter", "clear", false),
    ("VLANPush", "set_tci", false),
    ("WildcardMatch", "get_initial_arg", true),
    ("WildcardMatch", "get_runtime_config", true),
    ("WildcardMatch", "set_runtime_config", false),
    ("WildcardMatch", "add", true),
    ("WildcardMatch", "delete", true),
    ("WildcardMatch", "clear", true),
    ("WildcardMatch", "set_default_gate", true),
    ("WorkerSplit", "reset", false),
];

/// Commands only Bessemer has (no BESS declaration to follow), with their own flag: read
/// commands the XDP offload uses (docs/compat.md), and ESP's.
const OWN_COMMANDS: &[(&str, &str, bool)] = &[
    ("BPF", "get_programs", true),
    ("IPLookup", "get_runtime_config", false),
    ("Update", "get_initial_arg", false),
    ("VLANPush", "get_initial_arg", false),
    ("ESPDecap", "add_sa", false),
    ("ESPDecap", "delete_sa", false),
    ("ESPDecap", "clear", false),
    ("ESPDecap", "get_stats", false),
    ("ESPEncap", "add_sa", false),
    ("ESPEncap", "delete_sa", false),
    ("ESPEncap", "clear", false),
    ("ESPEncap", "get_stats", false),
];

/// Commands the fork's tables declare that Bessemer does not have yet (docs/compat.md lists
/// them): checked to be absent, so that adding one brings it into `COMMANDS`.
const MISSING_COMMANDS: &[(&str, &str)] = &[
    ("PortInc", "get_initial_arg"),
    ("PortOut", "get_initial_arg"),
    ("Queue", "get_initial_arg"),
    ("Queue", "get_runtime_config"),
    ("Queue", "set_runtime_config"),
    ("SetMetadata", "get_initial_arg"),
];

#[test]
fn every_class_allows_as_many_workers_as_bess() {
    let classes = bessemer_modules::classes();
    let mut wrong = Vec::new();
    for c in classes {
        match WORKERS.iter().find(|(n, _, _)| *n == c.name) {
            None => wrong.push(format!("{}: not in the table", c.name)),
            Some((_, want, from)) if c.max_workers != *want => wrong.push(format!(
                "{}: max_workers {} but BESS allows {want} ({from})",
                c.name, c.max_workers
            )),
            Some(_) => {}
        }
    }
    for (n, _, _) in WORKERS {
        if !classes.iter().any(|c| c.name == *n) {
            wrong.push(format!("{n}: in the table but no such class"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_command_is_thread_safe_exactly_where_bess_says() {
    let mut wrong = Vec::new();
    for c in bessemer_modules::classes() {
        for cmd in c.commands {
            let want = COMMANDS
                .iter()
                .chain(OWN_COMMANDS)
                .find(|(cl, n, _)| *cl == c.name && *n == cmd.name)
                .map(|e| e.2);
            match want {
                None => wrong.push(format!("{}.{}: not in the table", c.name, cmd.name)),
                Some(w) if w != cmd.mt_safe => wrong.push(format!(
                    "{}.{}: mt_safe {} but BESS says {}",
                    c.name,
                    cmd.name,
                    cmd.mt_safe,
                    if w { "THREAD_SAFE" } else { "THREAD_UNSAFE" }
                )),
                Some(_) => {}
            }
        }
    }
    for (cl, n, _) in COMMANDS.iter().chain(OWN_COMMANDS) {
        let has = bessemer_modules::find(cl).is_some_and(|c| c.command(n).is_some());
        if !has {
            wrong.push(format!(
                "{cl}.{n}: in the table but the class has no such command"
            ));
        }
    }
    for (cl, n) in MISSING_COMMANDS {
        if bessemer_modules::find(cl).is_some_and(|c| c.command(n).is_some()) {
            wrong.push(format!("{cl}.{n}: now exists; move it into COMMANDS"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn show_mclass_states_the_worker_limit() {
    let text = |n: &str| bessemer_modules::find(n).unwrap().describe();
    assert!(text("PortInc").contains("workers: any number"));
    assert!(text("NAT").contains("workers: up to 2"));
    assert!(text("StaticNAT").contains("workers: one"));
}

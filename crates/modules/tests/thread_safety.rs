//! The thread-safety declarations BESS clients see: `ModuleClass.mt_safe` is BESS's
//! `max_allowed_workers_` (many workers vs one) and `CommandSpec.mt_safe` BESS's
//! `Command::THREAD_SAFE`. Pinned for a representative set so a regression shows.

fn class(n: &str) -> &'static bessemer_core::ModuleClass {
    bessemer_modules::find(n).unwrap_or_else(|| panic!("no class {n}"))
}

#[test]
fn classes_declare_bess_worker_limits() {
    // BESS sets max_allowed_workers_ = Worker::kMaxWorkers for these.
    for n in [
        "Sink",
        "Bypass",
        "Merge",
        "EtherEncap",
        "IPLookup",
        "ExactMatch",
        "WildcardMatch",
        "L2Forward",
        "Replicate",
        "Queue",
        "Measure",
        "Timestamp",
        "BPF",
        "ACL",
        "HashLB",
        "GenericDecap",
        "WorkerSplit",
    ] {
        assert!(class(n).mt_safe, "{n} allows many workers in BESS");
    }
    // BESS leaves the default of one worker for these.
    for n in [
        "NAT",
        "Source",
        "PortInc",
        "QueueInc",
        "RoundRobin",
        "UrlFilter",
        "ArpResponder",
        "Buffer",
        "DRR",
        "FlowGen",
    ] {
        assert!(!class(n).mt_safe, "{n} allows one worker in BESS");
    }
}

#[test]
fn commands_declare_bess_thread_safety() {
    let safe = |c: &str, cmd: &str| {
        class(c)
            .command(cmd)
            .unwrap_or_else(|| panic!("{c} has no command {cmd}"))
            .mt_safe
    };
    for (c, cmd, want) in [
        ("ExactMatch", "get_initial_arg", true),
        ("ExactMatch", "get_runtime_config", true),
        ("ExactMatch", "set_runtime_config", false),
        ("ExactMatch", "add", false),
        ("ExactMatch", "delete", false),
        ("ExactMatch", "clear", false),
        ("ExactMatch", "set_default_gate", true),
        ("WildcardMatch", "get_runtime_config", true),
        ("WildcardMatch", "add", false),
        ("L2Forward", "lookup", true),
        ("L2Forward", "add", false),
        ("Measure", "get_summary", true),
        ("Queue", "set_burst", true),
        ("Queue", "set_size", false),
        ("Source", "set_burst", true),
        ("Replicate", "set_gates", true),
        ("HashLB", "set_gates", false),
        ("UrlFilter", "get_runtime_config", true),
        ("UrlFilter", "set_runtime_config", false),
        ("UrlFilter", "add", false),
        ("NAT", "get_initial_arg", true),
        ("IPLookup", "add", false),
        ("VLANPush", "set_tci", false),
    ] {
        assert_eq!(safe(c, cmd), want, "{c}.{cmd}");
    }
}

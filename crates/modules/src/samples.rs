//! The smallest valid argument of each module class, for tests and fuzzing that create
//! every class.

use bessemer_core::Value;

fn field(offset: i64, num_bytes: i64) -> Value {
    Value::map()
        .with("offset", offset)
        .with("num_bytes", num_bytes)
}

/// The smallest valid argument of `class` (an empty message where that is valid). The I/O
/// classes name port `port` (PortInc, PortOut) or `q` (QueueInc, QueueOut); each instance
/// of one needs its own queue.
pub fn minimal_arg(class: &str, port: &str) -> Value {
    let gates = || Value::map().with("gates", Value::List(vec![Value::Int(0)]));
    match class {
        // One AES-GCM SA (SPI 256, all-zero test key) so frames reach the crypto.
        "ESPEncap" | "ESPDecap" => {
            let sa = Value::map()
                .with("spi", 256u32)
                .with("key", vec![0u8; 20])
                .with("local", "192.0.2.1")
                .with("peer", "192.0.2.2");
            Value::map().with("sas", Value::List(vec![sa]))
        }
        "ExactMatch" | "WildcardMatch" => {
            Value::map().with("fields", Value::List(vec![field(26, 4)]))
        }
        "Counter" => Value::map().with("name_id", "c").with("total", 1),
        "FlowGen" => Value::map().with("template", vec![0u8; 60]),
        "FlowMeasure" => Value::map()
            .with("flag_attr_name", "f")
            .with("leader", true),
        "GtpuEcho" => Value::map().with("s1u_sgw_ip", 1),
        "HashLB" | "RandomSplit" | "RoundRobin" => gates(),
        "IPDefrag" => Value::map().with("num_flows", 1),
        "IPFrag" => Value::map().with("mtu", 1518),
        "NAT" => Value::map().with(
            "ext_addrs",
            Value::List(vec![Value::map().with("ext_addr", "203.0.113.1")]),
        ),
        "PortInc" | "PortOut" => Value::map().with("port", port),
        "QueueInc" | "QueueOut" => Value::map().with("port", "q").with("qid", 0),
        "Split" => Value::map().with("size", 1).with("attribute", "a"),
        _ => Value::map(),
    }
}

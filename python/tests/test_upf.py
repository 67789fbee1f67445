"""The omec-project fork's UPF messages through the Python client against a real daemon:
the arguments pack (QosArg, QosCommandAddArg with its optional deduct_len) and the typed
answers unpack (IPFragArg, FlowMeasureReadResponse, FlowMeasureFlipResponse)."""

import time

from .conftest import ogate_packets


def test_qos_messages_pack(bess):
    bess.create_module(
        "Qos",
        "q",
        {
            "fields": [{"offset": 30, "num_bytes": 4}],
            "values": [{"attr_name": "qfi", "num_bytes": 1}],
            "entries": 16,
        },
    )
    rule = {
        "gate": 0,
        "cir": 1000,
        "pir": 2000,
        "cbs": 100,
        "pbs": 200,
        "ebs": 0,
        "deduct_len": 0,
        "fields": [{"value_bin": bytes.fromhex("0a000002")}],
        "values": [{"value_int": 9}],
    }
    bess.run_module_command("q", "add", "QosCommandAddArg", rule)
    bess.run_module_command("q", "set_default_gate", "QosCommandSetDefaultGateArg", {"gate": 5})
    bess.run_module_command(
        "q", "delete", "QosCommandDeleteArg", {"fields": [{"value_bin": bytes.fromhex("0a000002")}]}
    )
    bess.run_module_command("q", "clear", "EmptyArg")


def test_typed_answers_unpack(bess):
    assert bess.create_module("IPFrag", "frag", {"mtu": 1518}) == "frag"
    assert bess.run_module_command("frag", "get_eth_mtu", "EmptyArg").mtu == 1518
    bess.create_module("Source", "src", {"pkt_size": 60})
    bess.create_module(
        "SetMetadata",
        "meta",
        {
            "attrs": [
                {"name": "fseid", "size": 8, "value_bin": (7).to_bytes(8, "little")},
                {"name": "pdr_id", "size": 4, "value_bin": (3).to_bytes(4, "little")},
            ]
        },
    )
    bess.create_module("Timestamp", "ts", {"attr_name": "timestamp"})
    bess.create_module("FlowMeasure", "fm", {"flag_attr_name": "flag", "leader": True})
    bess.create_module("Sink", "sink")
    for a, b in [("src", "meta"), ("meta", "ts"), ("ts", "fm"), ("fm", "sink")]:
        bess.connect_modules(a, b)
    bess.add_worker(0, 0)
    bess.resume_all()
    deadline = time.monotonic() + 10
    while ogate_packets(bess, "fm") < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    bess.pause_all()
    flip = bess.run_module_command("fm", "flip", "FlowMeasureCommandFlipArg")
    assert flip.old_flag == 1
    read = bess.run_module_command(
        "fm",
        "read",
        "FlowMeasureCommandReadArg",
        {"flag_to_read": 1, "latency_percentiles": [50.0, 99.0], "jitter_percentiles": [50.0]},
    )
    assert [(s.fseid, s.pdr) for s in read.statistics] == [(7, 3)]
    stat = read.statistics[0]
    assert stat.total_packets >= 100
    assert stat.total_bytes == 60 * stat.total_packets
    assert stat.latency.count == stat.total_packets
    assert len(stat.latency.percentile_values_ns) == 2
    assert stat.latency.resolution_ns == 1000

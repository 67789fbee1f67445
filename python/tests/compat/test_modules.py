"""Module arguments as pybess (and the UPF's pybess) packs them, module commands, module
semantics BESS scripts rely on, gate hooks by BESS's class names, PMDPort's answer."""

from __future__ import annotations

import errno
import os
import time

import pytest
from google.protobuf import any_pb2

from .conftest import ogate_pkts, wait_pkts
from .pybess_shim import BESS

UDP_TEMPLATE = bytes.fromhex(
    # Ethernet 02:00:00:00:00:02 <- 02:00:00:00:00:01, IPv4
    "020000000002"
    "020000000001"
    "0800"
    # IPv4 10.0.0.1 -> 10.0.0.2, UDP, 46 bytes
    "4500002e00010000401166bb0a0000010a000002"
    # UDP 1234 -> 5678, 26 bytes, no checksum, 18 bytes of payload
    "04d2162e001a0000" + "00" * 18
)


# --- 6. arguments as pybess sends them -------------------------------------------------


def test_mplspop_takes_the_empty_arg_pybess_sends(pybess):
    """pybess packs `<mclass>Arg`; BESS's MPLSPop has no `MPLSPopArg`, so EmptyArg goes."""
    req_type = getattr(pybess.module_pb, "MPLSPopArg", pybess.module_msg.EmptyArg)
    assert req_type is pybess.module_msg.EmptyArg
    assert pybess.create_module("MPLSPop", "mp").name == "mp"


def test_omec_argument_fields_are_accepted(omec_pybess):
    b = omec_pybess
    fields = [{"offset": 26, "num_bytes": 4}]
    assert b.create_module("ExactMatch", "em", {"fields": fields, "entries": 1024}).name == "em"
    assert b.create_module("WildcardMatch", "wm", {"fields": fields, "entries": 1024}).name
    assert b.create_module("IPChecksum", "ipc", {"hw": True}).name == "ipc"
    assert b.create_module("L4Checksum", "l4c", {"hw": True}).name == "l4c"
    # The packed Any is the one omec's pybess sends: same type URL, field 5 / 3 / 2 set.
    a = any_pb2.Any()
    a.Pack(b.module_pb.ExactMatchArg(entries=1024))
    assert a.type_url == "type.googleapis.com/bess.pb.ExactMatchArg"


def test_command_arguments_of_another_type_are_taken_as_empty(pybess):
    """BESS unpacks a command's Any into the declared type and ignores a mismatch (the
    argument is then empty): the UPF's agent sends `ExactMatchCommandClearArg` etc. for
    `clear`, whatever `GetMclassInfo` declares."""
    fields = [{"offset": 30, "num_bytes": 4}]
    pybess.create_module("ExactMatch", "em", {"fields": fields})
    pybess.create_module("WildcardMatch", "wm", {"fields": fields})
    pybess.create_module("IPLookup", "ipl")
    pybess.create_module("BPF", "bpf")
    for name, arg_type in (
        ("em", "ExactMatchCommandClearArg"),
        ("wm", "WildcardMatchCommandClearArg"),
        ("ipl", "IPLookupCommandClearArg"),
        ("bpf", "BPFCommandClearArg"),
    ):
        pybess.run_module_command(name, "clear", arg_type, {})


# --- 7. commands -----------------------------------------------------------------------


def test_get_initial_arg_returns_the_creation_argument(pybess):
    bl = [{"host": "example.com", "path": "/bad"}]
    pybess.create_module("UrlFilter", "uf", {"blacklist": bl})
    got = pybess.run_module_command("uf", "get_initial_arg", "EmptyArg", {})
    assert type(got).__name__ == "UrlFilterArg"
    # As BESS's url_filter.cc: empty, the blacklist is returned as runtime configuration.
    assert list(got.blacklist) == []
    cfg = pybess.run_module_command("uf", "get_runtime_config", "EmptyArg", {})
    assert [(u.host, u.path) for u in cfg.blacklist] == [("example.com", "/bad")]
    pybess.create_module("ExactMatch", "em", {"fields": [{"offset": 30, "num_bytes": 4}]})
    got = pybess.run_module_command("em", "get_initial_arg", "EmptyArg", {})
    assert type(got).__name__ == "ExactMatchArg"
    assert [(f.offset, f.num_bytes) for f in got.fields] == [(30, 4)]


def test_runtime_config_round_trips(pybess):
    # UrlFilter
    pybess.create_module("UrlFilter", "uf")
    cfg = {"blacklist": [{"host": "a.example", "path": "/x"}]}
    pybess.run_module_command("uf", "set_runtime_config", "UrlFilterConfig", cfg)
    got = pybess.run_module_command("uf", "get_runtime_config", "EmptyArg", {})
    assert type(got).__name__ == "UrlFilterConfig"
    assert [(u.host, u.path) for u in got.blacklist] == [("a.example", "/x")]
    # ExactMatch
    pybess.create_module("ExactMatch", "em", {"fields": [{"offset": 30, "num_bytes": 4}]})
    rule = {"gate": 1, "fields": [{"value_bin": bytes([10, 0, 0, 2])}]}
    cfg = {"default_gate": 2, "rules": [rule]}
    pybess.run_module_command("em", "set_runtime_config", "ExactMatchConfig", cfg)
    got = pybess.run_module_command("em", "get_runtime_config", "EmptyArg", {})
    assert type(got).__name__ == "ExactMatchConfig"
    assert got.default_gate == 2
    assert [(r.gate, r.fields[0].value_bin) for r in got.rules] == [(1, bytes([10, 0, 0, 2]))]
    # WildcardMatch
    pybess.create_module("WildcardMatch", "wm", {"fields": [{"offset": 30, "num_bytes": 4}]})
    rule = {
        "gate": 1,
        "priority": 5,
        "values": [{"value_bin": bytes([10, 0, 0, 0])}],
        "masks": [{"value_bin": bytes([255, 0, 0, 0])}],
    }
    cfg = {"default_gate": 3, "rules": [rule]}
    pybess.run_module_command("wm", "set_runtime_config", "WildcardMatchConfig", cfg)
    got = pybess.run_module_command("wm", "get_runtime_config", "EmptyArg", {})
    assert type(got).__name__ == "WildcardMatchConfig"
    assert got.default_gate == 3 and len(got.rules) == 1
    assert (got.rules[0].gate, got.rules[0].priority) == (1, 5)


# --- 8. module semantics ---------------------------------------------------------------


def test_measure_counts_every_packet(pybess):
    pybess.create_module("Source", "src", {"pkt_size": 60})
    pybess.create_module("Measure", "m")  # no Timestamp upstream: still counted
    pybess.create_module("Sink", "snk")
    pybess.connect_modules("src", "m")
    pybess.connect_modules("m", "snk")
    pybess.resume_all()
    wait_pkts(pybess, "m", at_least=1000)
    pybess.pause_all()
    passed = ogate_pkts(pybess, "m")
    summary = pybess.run_module_command("m", "get_summary", "MeasureCommandGetSummaryArg", {})
    assert type(summary).__name__ == "MeasureCommandGetSummaryResponse"
    assert summary.packets == passed > 0
    assert summary.bits > 0 and summary.timestamp > 0


def test_arp_responder_answers_to_the_requesters_ethernet_source(pybess):
    scapy = pytest.importorskip("scapy.all")
    asker = "02:aa:bb:cc:dd:01"
    req = scapy.Ether(src=asker, dst="ff:ff:ff:ff:ff:ff") / scapy.ARP(
        op=1, hwsrc=asker, psrc="10.0.0.1", pdst="10.0.0.254"
    )
    pybess.create_module("Source", "src", {"pkt_size": 60})
    pybess.create_module("Rewrite", "rw", {"templates": [bytes(req)]})
    pybess.create_module("ArpResponder", "arp")
    pybess.run_module_command(
        "arp", "add", "ArpResponderArg", {"ip": "10.0.0.254", "mac_addr": "02:00:00:00:00:fe"}
    )
    # ExactMatch on the Ethernet destination: the requester's MAC -> gate 1, other -> 0.
    pybess.create_module("ExactMatch", "dst", {"fields": [{"offset": 0, "num_bytes": 6}]})
    pybess.run_module_command(
        "dst",
        "add",
        "ExactMatchCommandAddArg",
        {"gate": 1, "fields": [{"value_bin": bytes.fromhex(asker.replace(":", ""))}]},
    )
    pybess.run_module_command(
        "dst", "set_default_gate", "ExactMatchCommandSetDefaultGateArg", {"gate": 0}
    )
    pybess.create_module("Sink", "to_asker")
    pybess.create_module("Sink", "elsewhere")
    pybess.connect_modules("src", "rw")
    pybess.connect_modules("rw", "arp")
    pybess.connect_modules("arp", "dst")
    pybess.connect_modules("dst", "to_asker", 1, 0)
    pybess.connect_modules("dst", "elsewhere", 0, 0)
    pybess.resume_all()
    assert wait_pkts(pybess, "dst", 1, at_least=100) >= 100
    assert ogate_pkts(pybess, "dst", 0) == 0


def test_l2forward_takes_3000_sequential_macs_at_the_default_size(pybess):
    pybess.create_module("L2Forward", "l2")  # BESS's default size and bucket
    entries = [
        {"addr": f"02:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}", "gate": i % 4} for i in range(3000)
    ]
    pybess.run_module_command("l2", "add", "L2ForwardCommandAddArg", {"entries": entries})
    addrs = [e["addr"] for e in entries[::500]]
    got = pybess.run_module_command("l2", "lookup", "L2ForwardCommandLookupArg", {"addrs": addrs})
    assert list(got.gates) == [e["gate"] for e in entries[::500]]


# --- 9. Replicate gives each branch its own packet -------------------------------------


@pytest.mark.parametrize("lookup_gate", [0, 1])
def test_replicate_branches_do_not_share_packets(pybess, lookup_gate):
    decap_gate = 1 - lookup_gate
    pybess.create_module("Source", "src", {"pkt_size": len(UDP_TEMPLATE)})
    pybess.create_module("Rewrite", "rw", {"templates": [UDP_TEMPLATE]})
    pybess.create_module("Replicate", "rep", {"gates": [0, 1]})
    pybess.create_module("IPLookup", "ipl")
    pybess.run_module_command(
        "ipl", "add", "IPLookupCommandAddArg", {"prefix": "0.0.0.0", "prefix_len": 0, "gate": 0}
    )
    pybess.create_module("GenericDecap", "decap", {"bytes": 14})
    pybess.create_module("Sink", "lookup_sink")
    pybess.create_module("Sink", "decap_sink")
    pybess.connect_modules("src", "rw")
    pybess.connect_modules("rw", "rep")
    pybess.connect_modules("rep", "ipl", lookup_gate, 0)
    pybess.connect_modules("rep", "decap", decap_gate, 0)
    pybess.connect_modules("ipl", "lookup_sink")
    pybess.connect_modules("decap", "decap_sink")
    pybess.resume_all()
    wait_pkts(pybess, "ipl", at_least=1000)
    pybess.pause_all()
    sent = ogate_pkts(pybess, "rw")
    assert sent > 0
    assert ogate_pkts(pybess, "rep", lookup_gate) == sent
    assert ogate_pkts(pybess, "ipl") == sent, "IPLookup saw decapsulated packets"
    assert ogate_pkts(pybess, "decap") == sent


# --- 10. gate hooks by BESS's names ----------------------------------------------------


def _src_sink(b: BESS) -> None:
    b.create_module("Source", "src", {"pkt_size": 60})
    b.create_module("Sink", "snk")
    b.connect_modules("src", "snk")


def test_gate_hook_classes_have_bess_names(pybess):
    names = set(pybess.list_gatehook_classes().names)
    assert {"Track", "TcpDump", "PcapNg"} <= names
    for n in ("Track", "TcpDump", "PcapNg"):
        assert pybess.get_gatehook_class_info(n).name == n


def test_track_by_bess_name_counts_bytes(pybess):
    _src_sink(pybess)
    pybess.track_gate(True, "", "src", bits=True)
    hooks = [(h.class_name, h.module_name) for h in pybess.list_gatehooks().hooks]
    assert ("Track", "src") in hooks
    pybess.resume_all()
    wait_pkts(pybess, "src", at_least=100)
    og = pybess.get_module_info("src").ogates[0]
    assert og.pkts > 0 and og.bytes > 0 and og.timestamp > 0
    pybess.pause_all()
    pybess.track_gate(False, "", "src")
    assert not [h for h in pybess.list_gatehooks().hooks if h.class_name == "Track"]


def _fifo_reader(path):
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def _read_some(fd, want: int, timeout: float = 10) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while len(data) < want and time.monotonic() < deadline:
        try:
            data += os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.02)
    return data


def test_tcpdump_by_bess_name_writes_pcap(pybess, tmp_path):
    _src_sink(pybess)
    fd = _fifo_reader(tmp_path / "p")
    try:
        pybess.tcpdump_gate(True, "", "src", fifo=str(tmp_path / "p"))
        pybess.resume_all()
        data = _read_some(fd, 24 + 16 + 60)
    finally:
        pybess.pause_all()
        pybess.tcpdump_gate(False, "", "src")
        os.close(fd)
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1")


def test_pcapng_by_bess_name_writes_pcapng(pybess, tmp_path):
    _src_sink(pybess)
    fd = _fifo_reader(tmp_path / "p")
    try:
        pybess.pcapng_gate(True, "", "src", fifo=str(tmp_path / "p"))
        pybess.resume_all()
        data = _read_some(fd, 64)
    finally:
        pybess.pause_all()
        pybess.pcapng_gate(False, "", "src")
        os.close(fd)
    assert data[:4] == b"\x0a\x0d\x0d\x0a"  # section header block


def test_lowercase_hook_names_still_work(pybess, tmp_path):
    _src_sink(pybess)
    pybess._configure_gate_hook("track", "", "src", pybess.bess_msg.TrackArg(), True, "out", -1)
    fd = _fifo_reader(tmp_path / "p")
    try:
        arg = pybess.bess_msg.TcpdumpArg(fifo=str(tmp_path / "p"))
        pybess._configure_gate_hook("tcpdump", "", "src", arg, True, "out", 0)
        pybess.resume_all()
        assert _read_some(fd, 24)
    finally:
        pybess.pause_all()
        os.close(fd)
    assert wait_pkts(pybess, "src") > 0


# --- 12. PMDPort -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "code", "needle"),
    [
        ({"port_id": 0}, errno.ENODEV, "DPDK has no port 0"),
        ({"pci": "0000:00:1f.7"}, None, "0000:00:1f.7"),
    ],
)
def test_pmdport_without_a_device_is_refused_naming_it(pybess, arg, code, needle):
    """BESS answers a port_id no device has with ENODEV (the UPF's scan_dpdk_ports stops
    there); a PCI address nothing is bound to is refused naming it."""
    with pytest.raises(BESS.Error) as e:
        pybess.create_port("PMDPort", "pmd", arg)
    if "without DPDK" in e.value.errmsg:
        pytest.skip(e.value.errmsg)
    if code is not None:
        assert e.value.code == code, e.value.errmsg
    assert needle in e.value.errmsg
    assert "pmd" not in [p.name for p in pybess.list_ports().ports]

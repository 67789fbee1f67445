"""Duplicated pipelines (bessemer.multicore): copies per worker, commands on every copy,
refusals, the CLI command, and (root) a 2-queue veth pair carrying many flows through a
pipeline duplicated on two workers, each flow in order and every counter adding up."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import time
import uuid

import pytest

from bessemer import cli
from bessemer.client import BESS
from bessemer.script import ScriptError, run_script

from .conftest import ROOT, ROOT_ONLY, ogate_packets, sh


def _leaves_by_worker(b: BESS) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for status in b.list_tcs():
        tc = getattr(status, "class")
        if tc.leaf_module_name:
            out.setdefault(tc.wid, set()).add(tc.leaf_module_name)
    return out


def _wait_for(cond, secs: float = 10) -> bool:
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_script_duplicates_over_sources_and_commands_reach_every_copy(bess, tmp_path):
    script = tmp_path / "dup.bess"
    script.write_text(
        "bess.add_worker(0, 0)\n"
        "bess.add_worker(1, 1)\n"
        "dup = duplicate('src::Source(pkt_size=60) -> ttl::Bypass() -> "
        "m::Measure() -> Sink()', workers=[0, 1], name='fw')\n"
        "src.set_burst(burst=8)\n"
    )
    scope = run_script(script, bess)
    names = {m.name: m.mclass for m in bess.list_modules()}
    assert names == {
        "src@w0": "Source",
        "ttl@w0": "Bypass",
        "m@w0": "Measure",
        "fw.0@w0": "Sink",
        "src@w1": "Source",
        "ttl@w1": "Bypass",
        "m@w1": "Measure",
        "fw.0@w1": "Sink",
    }
    assert _leaves_by_worker(bess) == {0: {"src@w0"}, 1: {"src@w1"}}
    # Each copy runs its own worker only: nothing to report.
    assert list(bess.check_scheduling_constraints().modules) == []
    assert _wait_for(lambda: all(ogate_packets(bess, f"m@w{w}") > 0 for w in (0, 1)))
    # A command on the template name ran on both copies (set_burst above); get_summary
    # answers once per copy.
    summaries = scope["m"].get_summary()
    assert len(summaries) == 2
    assert [m.name for m in scope["dup"].m] == ["m@w0", "m@w1"]


def test_shared_module_referenced_by_the_template_is_reported(daemon, tmp_path, capsys):
    bess = daemon.client
    script = tmp_path / "shared.bess"
    script.write_text(
        "bess.add_worker(0, 0)\n"
        "bess.add_worker(1, 1)\n"
        "shared::RoundRobin(gates=[0]) -> Sink()\n"
        "duplicate('Source() -> shared', workers=[0, 1], name='s')\n"
    )
    run_script(script, bess)
    r = bess.check_scheduling_constraints()
    # RoundRobin allows one worker; both copies' sources reach it.
    assert [m.name for m in r.modules] == ["shared"]
    assert r.fatal
    # The CLI names the module, its workers and the fix.
    cli.execute(["--port", str(daemon.port), "check", "constraints"])
    out = "".join(capsys.readouterr())
    assert "module shared is run by workers 0, 1" in out and "put a Queue in front" in out


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("duplicate('Sink()', workers=[0, 7])", "worker(s) [7] do not exist"),
        ("duplicate('Sink()', workers=[0, 0])", "distinct"),
        ("duplicate('Bypass()', workers=[0], port='nope')", "no port named 'nope'"),
        ("duplicate('Sink() -> Sink()', workers=[0])", "output gate"),
        ("duplicate('x = 1', workers=[0])", "must end with a module expression"),
    ],
)
def test_bad_duplicates_are_refused_naming_the_problem(bess, tmp_path, line, expect):
    script = tmp_path / "bad.bess"
    script.write_text(f"bess.add_worker(0, 0)\n{line}\n")
    with pytest.raises(ScriptError) as err:
        run_script(script, bess)
    assert expect in str(err.value)
    assert ":2:" in str(err.value)


def test_port_with_too_few_queues_is_refused(bess, tmp_path):
    bess.add_worker(0, 0)
    bess.add_worker(1, 1)
    empty = tmp_path / "empty.pcap"  # a pcap header and no packets
    empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    bess.create_port("PcapFilePort", "pf", {"rx_file": str(empty)})
    with pytest.raises(BESS.Error) as err:
        bess.duplicate("Bypass()", [0, 1], port="pf")
    assert "has 1 incoming queue(s), one per worker is needed (2)" in err.value.errmsg


def test_cli_duplicate_and_command_on_every_copy(daemon, capsys):
    b = daemon.client
    b.add_worker(0, 0)
    b.add_worker(1, 1)
    base = ["--port", str(daemon.port)]
    tmpl = "q::Queue(size=64) -> Sink()"
    assert cli.execute([*base, "duplicate", tmpl, "--workers", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "worker 0: q@w0, dup.0@w0" in out and "worker 1: q@w1, dup.0@w1" in out
    assert _leaves_by_worker(b) == {0: {"q@w0"}, 1: {"q@w1"}}
    argv = [*base, "command", "module", "q", "get_status", "QueueCommandGetStatusArg"]
    assert cli.execute(argv) == 0
    out = capsys.readouterr().out
    assert out.count("size: 64") == 2 and "q@w0:" in out and "q@w1:" in out


# --- a 2-queue veth pair, many flows, two workers (root) --------------------------------

NS_PROGRAM = r"""
import json, os, socket, struct, sys, time
ifname, nflows, per_flow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MAGIC = b"BSMCDUP!"
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
rx.bind((ifname, 0))
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
rx.settimeout(0.2)
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind((ifname, 0))
mine = bytes.fromhex(open(f"/sys/class/net/{ifname}/address").read().strip().replace(":", ""))
peer = bytes.fromhex("02aabbccdd01")

def csum(b):
    s = sum(struct.unpack("!10H", b))
    s = (s & 0xFFFF) + (s >> 16)
    return (~((s & 0xFFFF) + (s >> 16))) & 0xFFFF

def frame(flow, seq):
    payload = MAGIC + struct.pack("!II", flow, seq) + bytes(18)
    udp = struct.pack("!HHHH", 10000 + flow, 9, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     bytes([10, 9, flow >> 8, flow & 255]), bytes([10, 8, 0, 1]))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return peer + mine + b"\x08\x00" + ip + udp

sent = 0
for seq in range(per_flow):
    for flow in range(nflows):
        tx.send(frame(flow, seq))
        sent += 1
    time.sleep(0.002)
got = {}
deadline = time.monotonic() + 10
while sent > sum(len(v) for v in got.values()) and time.monotonic() < deadline:
    try:
        data, addr = rx.recvfrom(2048)
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    i = data.find(MAGIC)
    if i < 0:
        continue
    flow, seq = struct.unpack("!II", data[i + 8 : i + 16])
    # MACSwap turned the frame around: it is addressed to us, from the peer MAC we used.
    if data[:6] != mine or data[6:12] != peer:
        continue
    got.setdefault(flow, []).append(seq)
print(json.dumps({"sent": sent, "got": {str(k): v for k, v in got.items()}}))
"""


@pytest.fixture()
def two_queue_veth():
    """A veth pair with 2 queues each way: one end in the root namespace (the daemon's),
    the other in a fresh namespace; removed afterwards."""
    if shutil.which("ethtool") is None:
        pytest.skip("needs ethtool (apt-get install ethtool; scripts/install-deps.sh does)")
    tag = uuid.uuid4().hex[:6]
    ns, sw, host = f"mcq{tag}", f"mcs{tag}", f"mch{tag}"
    assert sh("ip", "netns", "add", ns).returncode == 0
    try:
        r = sh(
            "ip", "link", "add", sw, "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
            "peer", "name", host, "numtxqueues", "2", "numrxqueues", "2", "netns", ns,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        # veth takes its channel count from ethtool -L (combined channels are not offered).
        channels = ("-L", "rx", "2", "tx", "2")
        for cmd in (
            ["ethtool", channels[0], sw, *channels[1:]],
            ["ip", "netns", "exec", ns, "ethtool", channels[0], host, *channels[1:]],
        ):
            r = sh(*cmd)
            assert r.returncode == 0 or "unmodified" in r.stderr, r.stderr
        with open(f"/proc/sys/net/ipv6/conf/{sw}/disable_ipv6", "w") as f:
            f.write("1")
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{host}.disable_ipv6=1")
        for cmd in (("-n", ns, "link", "set", host, "up"), ("link", "set", sw, "up")):
            r = sh("ip", *cmd)
            assert r.returncode == 0, r.stderr
        yield ns, sw, host
    finally:
        sh("ip", "link", "del", sw)
        sh("ip", "netns", "del", ns)


@ROOT_ONLY
def test_flows_over_two_queues_on_two_workers_keep_order_and_counts_add_up(bess, two_queue_veth):
    ns, sw, host = two_queue_veth
    b = bess
    b.add_worker(0, 0)
    b.add_worker(1, 1)
    # AF_PACKET's fanout hash spreads flows over the two incoming queues (RSS's role).
    b.create_port("AFPacketPort", "p", {"ifname": sw}, num_inc_q=2, num_out_q=2)
    b.pause_all()
    dup = b.duplicate("sw::MACSwap() -> c::Bypass()", [0, 1], port="p")
    b.resume_all()
    assert [m.name for m in dup.sw] == ["sw@w0", "sw@w1"]
    assert _leaves_by_worker(b) == {0: {"dup.in@w0"}, 1: {"dup.in@w1"}}
    assert list(b.check_scheduling_constraints().modules) == []

    nflows, per_flow = 64, 40
    got = _send_flows(ns, host, nflows, per_flow)
    # Every flow's packets came back in the order they were sent, none lost.
    for flow in range(nflows):
        assert got.get(flow) == list(range(per_flow)), f"flow {flow}: {got.get(flow)}"

    # Counters: each copy saw only its own queue's packets; the sums add up exactly.
    def copies(name: str) -> list[int]:
        return [ogate_packets(b, f"{name}@w{w}") for w in (0, 1)]

    ins, swaps, byp = copies("dup.in"), copies("sw"), copies("c")
    assert min(ins) > 0, f"the flow hash used one queue only: {ins}"
    assert ins == swaps == byp
    total = nflows * per_flow
    assert _wait_for(lambda: sum(copies("dup.in")) >= total)
    stats = b.get_port_stats("p")
    ins = copies("dup.in")
    assert stats.inc.packets == sum(ins)
    assert stats.out.packets + stats.out.dropped == sum(ins)
    assert stats.out.dropped == 0


def _send_flows(ns: str, host: str, nflows: int, per_flow: int) -> dict[int, list[int]]:
    r = subprocess.run(
        ["ip", "netns", "exec", ns, "python3", "-c", NS_PROGRAM, host, str(nflows), str(per_flow)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["sent"] == nflows * per_flow
    return {int(k): v for k, v in res["got"].items()}


@ROOT_ONLY
@pytest.mark.parametrize("sample", ["multicore/duplicated", "samples/chained"])
def test_figure_5_9_samples_over_a_veth_keep_every_flow_in_order(bess, two_queue_veth, sample):
    ns, sw, host = two_queue_veth
    run_script(ROOT / "conf" / f"{sample}.bess", bess, env={"IFACE": sw})
    assert list(bess.check_scheduling_constraints().modules) == []
    got = _send_flows(ns, host, 32, 30)
    for flow in range(32):
        assert got.get(flow) == list(range(30)), f"flow {flow}: {got.get(flow)}"

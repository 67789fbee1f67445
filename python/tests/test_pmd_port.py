"""PMDPort through DPDK, on DPDK's virtual devices (no NIC, no hugepages): net_null and
net_ring through the daemon, a pcap replay looped through net_ring arriving intact, net_tap
answering the kernel, and bad arguments answered with DPDK's own reason, the daemon unharmed.
Needs a bessemerd built with DPDK (libdpdk-dev); skipped with the reason where it is not."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import struct
import subprocess
import time

import pytest

from bessemer.client import BESS
from bessemer.script import run_script

from .conftest import ROOT, ROOT_ONLY, in_ns, ogate_packets, running_daemon, sh, switch
from .test_cli import cli
from .test_ports import TCP_CLIENT, TCP_SERVER, _pcap_frames


def _dpdk_or_skip(b: BESS) -> None:
    try:
        b.create_port("PMDPort", "probe", {"vdev": "net_null9"})
    except BESS.Error as e:
        if "built without DPDK" in str(e):
            pytest.skip(str(e))
        raise
    b.destroy_port("probe")


def _buffers_in_use(b: BESS) -> int:
    r = b._call("DumpMempool", b._msg("bess_msg", "DumpMempoolRequest", {"socket": -1}))
    return sum(x.mp_in_use_count for x in r.dumps)


def _wait(pred, secs: float = 10.0) -> bool:
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_net_null_sample_receives_and_sends(daemon):
    b = daemon.client
    _dpdk_or_skip(b)
    run_script(ROOT / "conf" / "ports" / "pmd_null.bess", b, {})
    (port,) = b.list_ports()
    assert port.driver == "PMDPort"
    assert _wait(lambda: b.get_port_stats(port.name).out.packets > 10_000)
    st = b.get_port_stats(port.name)
    assert st.inc.packets > 10_000 and st.out.packets > 10_000
    inc = [m.name for m in b.list_modules() if m.mclass == "PortInc"][0]
    assert ogate_packets(b, inc) > 0
    assert b.get_link_status(port.name).link_up
    # `show port` names the device and says how packets crossed: here all in Bessemer's own
    # frames (DPDK's mbufs laid over them), none copied.
    r = cli(daemon.port, "show", "port")
    assert r.returncode == 0, r.stderr
    m = re.search(
        r"'net_null0' \(net_null\), zero copy: zero-copy rx (\d+) tx (\d+), "
        r"copied rx (\d+) tx (\d+)",
        r.stdout,
    )
    assert m, r.stdout
    zrx, ztx, crx, ctx = map(int, m.groups())
    assert zrx > 10_000 and ztx > 10_000 and crx == ctx == 0, r.stdout
    # Torn down, every buffer is back in the pool (none left with DPDK).
    b.pause_all()
    b.reset_all()
    assert _wait(lambda: _buffers_in_use(b) == 0), _buffers_in_use(b)


def test_copy_mode_copies_and_counts(tmp_path):
    with running_daemon(tmp_path, "--dpdk-copy") as d:
        b = d.client
        _dpdk_or_skip(b)
        run_script(ROOT / "conf" / "ports" / "pmd_null.bess", b, {})
        (port,) = b.list_ports()
        assert _wait(lambda: b.get_port_stats(port.name).out.packets > 1_000)
        (line,) = b.show_port_details().ports
        m = re.search(
            r"copy mode: zero-copy rx (\d+) tx (\d+), copied rx (\d+) tx (\d+)", line.details
        )
        assert m, line.details
        zrx, ztx, crx, ctx = map(int, m.groups())
        assert zrx == ztx == 0 and crx > 1_000 and ctx > 1_000, line.details
        b.pause_all()
        b.reset_all()
        assert _wait(lambda: _buffers_in_use(b) == 0), _buffers_in_use(b)


def test_pcap_replay_looped_through_net_ring_arrives_intact(daemon, tmp_path):
    """PcapFilePort -> PMDPort(net_ring) -> (DPDK's ring) -> PMDPort -> PcapFilePort: every
    frame of the capture comes out byte for byte, in order."""
    b = daemon.client
    _dpdk_or_skip(b)
    out = tmp_path / "out.pcap"
    src = ROOT / "conf" / "ports" / "sample.pcap"
    b.create_port("PcapFilePort", "cap", {"rx_file": str(src), "tx_file": str(out)})
    b.create_port("PMDPort", "ring", {"vdev": "net_ring0"})
    for m, cls, arg in [
        ("from_cap", "PortInc", {"port": "cap"}),
        ("to_ring", "PortOut", {"port": "ring"}),
        ("from_ring", "PortInc", {"port": "ring"}),
        ("to_cap", "PortOut", {"port": "cap"}),
    ]:
        b.create_module(cls, m, arg)
    b.connect_modules("from_cap", "to_ring")
    b.connect_modules("from_ring", "to_cap")
    b.resume_all()
    want = _pcap_frames(src)
    assert _wait(lambda: out.exists() and len(_pcap_frames(out)) >= len(want))
    assert _pcap_frames(out) == want
    st = b.get_port_stats("ring")
    assert st.inc.packets == st.out.packets == len(want)
    # The capture's frames went into the ring in their own buffers and came back in them.
    ring = [p for p in b.show_port_details(["ring"]).ports][0].details
    assert f"zero-copy rx {len(want)} tx {len(want)}, copied rx 0 tx 0" in ring, ring


def test_bad_arguments_get_dpdks_reason_and_the_daemon_keeps_running(daemon):
    b = daemon.client
    _dpdk_or_skip(b)
    cases = [
        ({"vdev": "net_nosuchpmd0"}, "net_nosuchpmd0"),
        ({"vdev": "net_null1,nosuchoption=1"}, "could not be probed"),
        ({"port_id": 7}, "DPDK has no port 7"),
        ({"port_id": 99}, "Invalid port id 99"),
        ({"pci": "0000:ff:1f.7"}, "0000:ff:1f.7"),
    ]
    for arg, want in cases:
        with pytest.raises(BESS.Error) as e:
            b.create_port("PMDPort", "", arg)
        assert want in str(e.value), (arg, str(e.value))
    with pytest.raises(BESS.Error) as e:
        b.create_port("PMDPort", "", {"vdev": "net_ring1"}, num_inc_q=100)
    assert "num_inc_q 100 is more than the device has" in str(e.value)
    # A vdev in use by one port is refused to a second one by name.
    b.create_port("PMDPort", "n0", {"vdev": "net_null3"})
    with pytest.raises(BESS.Error) as e:
        b.create_port("PMDPort", "n1", {"vdev": "net_null3"})
    assert "exists already" in str(e.value)
    # Nothing was left behind by the failures: the same devices can be made now.
    b.create_port("PMDPort", "r1", {"vdev": "net_ring1"})
    assert sorted(p.name for p in b.list_ports()) == ["n0", "r1"]
    b.get_version()


def test_a_port_in_use_is_not_destroyed_and_its_device_is_free_after(daemon):
    b = daemon.client
    _dpdk_or_skip(b)
    b.create_port("PMDPort", "p", {"vdev": "net_null4"})
    b.create_module("PortInc", "pi", {"port": "p"})
    b.create_module("Sink", "sink")
    b.connect_modules("pi", "sink")
    b.resume_all()
    assert _wait(lambda: b.get_port_stats("p").inc.packets > 0)
    with pytest.raises(BESS.Error):
        b.destroy_port("p")
    b.pause_all()
    b.destroy_module("pi")
    b.destroy_port("p")
    b.create_port("PMDPort", "p", {"vdev": "net_null4"})
    assert [p.name for p in b.list_ports()] == ["p"]


@ROOT_ONLY
def test_net_tap_answers_the_kernel_through_the_pipeline(daemon, two_namespaces):
    """DPDK's TAP PMD makes a kernel interface; moved into a namespace of the test's own, the
    kernel's ARP requests reach the pipeline (PortInc -> ArpResponder -> PortOut) and its
    answer reaches the kernel's neighbour table."""
    b = daemon.client
    _dpdk_or_skip(b)
    ns, _ = two_namespaces
    b.create_port("PMDPort", "tap", {"vdev": "net_tap0,iface=bsmtap0"})
    r = sh("ip", "link", "set", "bsmtap0", "netns", ns)
    assert r.returncode == 0, r.stderr
    for cmd in (
        ["ip", "addr", "add", "10.79.0.1/24", "dev", "bsmtap0"],
        ["ip", "link", "set", "bsmtap0", "up"],
    ):
        r = in_ns(ns, *cmd)
        assert r.returncode == 0, r.stderr
    b.create_module("PortInc", "pi", {"port": "tap"})
    b.create_module("ArpResponder", "arp")
    b.run_module_command(
        "arp", "add", "ArpResponderArg", {"ip": "10.79.0.2", "mac_addr": "02:00:00:79:00:02"}
    )
    b.create_module("PortOut", "po", {"port": "tap"})
    b.connect_modules("pi", "arp")
    b.connect_modules("arp", "po")
    b.resume_all()
    in_ns(ns, "ping", "-c", "2", "-i", "0.3", "-W", "1", "10.79.0.2")
    neigh = in_ns(ns, "ip", "neigh", "show", "10.79.0.2").stdout
    assert "02:00:00:79:00:02" in neigh, neigh
    st = b.get_port_stats("tap")
    assert st.inc.packets > 0 and st.out.packets > 0
    # The kernel interface removed under the running port: the daemon keeps answering, the
    # port's counters stay readable, and it is destroyed cleanly.
    r = in_ns(ns, "ip", "link", "del", "bsmtap0")
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)
    b.get_version()
    b.get_port_stats("tap")
    b.pause_all()
    b.reset_all()
    assert b.list_ports() == []


def _stream_between(tx: BESS, tx_port: str, rx: BESS, rx_port: str, least: int) -> None:
    """Source -> PortOut(tx_port) on one daemon, PortInc(rx_port) -> Sink on the other: more
    than `least` packets arrive, and once the sender stops, every packet it sent."""
    tx.create_module("Source", "src", {"pkt_size": 60})
    tx.create_module("PortOut", "out", {"port": tx_port})
    tx.connect_modules("src", "out")
    rx.create_module("PortInc", "inc", {"port": rx_port})
    rx.create_module("Sink", "sink")
    rx.connect_modules("inc", "sink")
    rx.resume_all()
    tx.resume_all()
    assert _wait(lambda: rx.get_port_stats(rx_port).inc.packets > least)
    tx.pause_all()
    sent = tx.get_port_stats(tx_port).out.packets
    assert _wait(lambda: rx.get_port_stats(rx_port).inc.packets == sent, 5), (
        sent,
        rx.get_port_stats(rx_port).inc.packets,
    )


def test_two_daemons_over_net_memif(tmp_path):
    """Two bessemerds joined by DPDK's memif (one server, one client on one socket): what
    one sends the other receives, counted on both sides."""
    sock = str(tmp_path / "memif.sock")
    with running_daemon(tmp_path) as a, running_daemon(tmp_path) as z:
        _dpdk_or_skip(a.client)
        a.client.create_port("PMDPort", "m", {"vdev": f"net_memif0,role=server,socket={sock}"})
        z.client.create_port("PMDPort", "m", {"vdev": f"net_memif0,role=client,socket={sock}"})
        assert _wait(lambda: z.client.get_link_status("m").link_up), "memif did not connect"
        _stream_between(a.client, "m", z.client, "m", least=10_000)


def test_net_pcap_replays_a_capture_and_writes_what_it_is_sent(daemon, tmp_path):
    b = daemon.client
    _dpdk_or_skip(b)
    src = ROOT / "conf" / "ports" / "sample.pcap"
    out = tmp_path / "out.pcap"
    b.create_port("PMDPort", "pc", {"vdev": f"net_pcap0,rx_pcap={src},tx_pcap={out}"})
    b.create_module("PortInc", "inc", {"port": "pc"})
    b.create_module("PortOut", "out", {"port": "pc"})
    b.connect_modules("inc", "out")
    b.resume_all()
    want = _pcap_frames(src)
    assert _wait(lambda: b.get_port_stats("pc").out.packets >= len(want))
    b.pause_all()
    b.reset_all()  # the device is closed and its file flushed
    # DPDK writes nanosecond timestamps (magic a1b23c4d); the records are as classic pcap's.
    data = out.read_bytes()
    assert struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D)
    got, at = [], 24
    while at < len(data):
        n = struct.unpack("<I", data[at + 8 : at + 12])[0]
        got.append(data[at + 16 : at + 16 + n])
        at += 16 + n
    assert got == want


def test_link_down_and_up_through_set_port_conf(daemon):
    b = daemon.client
    _dpdk_or_skip(b)
    b.create_port("PMDPort", "r", {"vdev": "net_ring2"})
    assert b.get_link_status("r").link_up

    def set_up(up: bool) -> None:
        conf = b._call("GetPortConf", b._msg("bess_msg", "GetPortConfRequest", {"name": "r"}))
        req = b._msg("bess_msg", "SetPortConfRequest", {"name": "r"})
        req.conf.CopyFrom(conf.conf)
        req.conf.admin_up = up
        b._call("SetPortConf", req)

    set_up(False)
    assert not b.get_link_status("r").link_up
    set_up(True)
    assert b.get_link_status("r").link_up


def test_virtio_user_to_vhost_between_two_daemons(tmp_path):
    """What a VM sees: one bessemerd serves a vhost-user socket (net_vhost), another attaches
    to it as the guest's driver (virtio_user). virtio-user can only hand the backend DPDK's
    own memory, so that side copies (said in show port); the vhost side receives in place."""
    sock = str(tmp_path / "vhost.sock")
    with running_daemon(tmp_path) as host, running_daemon(tmp_path) as guest:
        _dpdk_or_skip(host.client)
        host.client.create_port("PMDPort", "v", {"vdev": f"net_vhost0,iface={sock},queues=1"})
        guest.client.create_port("PMDPort", "u", {"vdev": f"virtio_user0,path={sock},queues=1"})
        assert _wait(lambda: host.client.get_link_status("v").link_up), "vhost link down"
        _stream_between(guest.client, "u", host.client, "v", least=5_000)
        (u,) = guest.client.show_port_details().ports
        assert "(net_virtio_user), copy mode" in u.details, u.details
        (v,) = host.client.show_port_details().ports
        assert "(net_vhost), zero copy" in v.details, v.details


@ROOT_ONLY
def test_flows_spread_over_queues_and_workers(daemon, two_namespaces):
    """A two-queue PMDPort on DPDK's TAP PMD (a multi-queue TAP interface, the kernel
    spreading flows over its queues by their hash), one QueueInc per queue on its own
    worker: many UDP flows from the kernel reach both queues and both workers."""
    b = daemon.client
    _dpdk_or_skip(b)
    ns, _ = two_namespaces
    b.create_port("PMDPort", "mq", {"vdev": "net_tap1,iface=bsmtapq"}, num_inc_q=2, num_out_q=2)
    r = sh("ip", "link", "set", "bsmtapq", "netns", ns)
    assert r.returncode == 0, r.stderr
    for cmd in (
        ["ip", "addr", "add", "10.78.0.1/24", "dev", "bsmtapq"],
        ["ip", "link", "set", "bsmtapq", "up"],
        ["ip", "neigh", "add", "10.78.0.2", "lladdr", "02:00:00:78:00:02", "dev", "bsmtapq"],
    ):
        r = in_ns(ns, *cmd)
        assert r.returncode == 0, r.stderr
    for q in (0, 1):
        b.add_worker(q, q)
        b.create_module("QueueInc", f"q{q}", {"port": "mq", "qid": q})
        b.create_module("Sink", f"sink{q}")
        b.connect_modules(f"q{q}", f"sink{q}")
        b.attach_task(f"q{q}", wid=q)
    b.resume_all()
    send = (
        "import socket\n"
        "for sport in range(20000, 20256):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.bind(('10.78.0.1', sport))\n"
        "    for _ in range(4): s.sendto(b'x' * 64, ('10.78.0.2', 9))\n"
        "    s.close()\n"
    )
    r = in_ns(ns, "python3", "-c", send)
    assert r.returncode == 0, r.stderr
    assert _wait(lambda: ogate_packets(b, "q0") + ogate_packets(b, "q1") >= 1024)
    per_queue = [ogate_packets(b, "q0"), ogate_packets(b, "q1")]
    assert min(per_queue) > 0, per_queue


@ROOT_ONLY
def test_two_tap_hosts_ping_and_move_tcp_through_the_switch(daemon, two_namespaces):
    """Two kernel hosts behind DPDK's TAP PMD (one TAP interface in each of two namespaces
    of the test's), switched by PortInc -> PortOut both ways: ping, ARP and a 2 MiB TCP
    transfer arriving intact (sha256)."""
    b = daemon.client
    _dpdk_or_skip(b)
    hosts = list(
        zip(two_namespaces, ("bsmtapa", "bsmtapb"), ("10.76.0.1", "10.76.0.2"), strict=True)
    )
    for i, (ns, ifname, ip) in enumerate(hosts):
        b.create_port("PMDPort", f"t{i}", {"vdev": f"net_tap{5 + i},iface={ifname}"})
        r = sh("ip", "link", "set", ifname, "netns", ns)
        assert r.returncode == 0, r.stderr
        for cmd in (
            ["ip", "addr", "add", f"{ip}/24", "dev", ifname],
            ["ip", "link", "set", ifname, "up"],
        ):
            r = in_ns(ns, *cmd)
            assert r.returncode == 0, r.stderr
    switch(b, "t0", "t1")
    (ns_a, _, _), (ns_b, _, ip_b) = hosts
    ping = in_ns(ns_a, "ping", "-c", "3", "-i", "0.2", "-W", "2", ip_b)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    chunk, times = os.urandom(1024).hex(), 2048
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns_b, "python3", "-c", TCP_SERVER, ip_b],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        c = in_ns(ns_a, "python3", "-c", TCP_CLIENT, ip_b, chunk, str(times), timeout=60)
        assert c.returncode == 0, c.stderr
        out, _ = server.communicate(timeout=60)
    finally:
        server.kill()
    n, digest = out.split()
    expect = bytes.fromhex(chunk) * times
    assert int(n) == len(expect) and digest == hashlib.sha256(expect).hexdigest()


OMEC_PYBESS_SCRIPT = """
import errno, json, sys, time
sys.path.insert(0, sys.argv[1])
from pybess.bess import BESS
b = BESS()
b.connect(grpc_url="127.0.0.1:" + sys.argv[2])
b.create_port("PMDPort", "p", {"vdev": "net_null0", "num_inc_q": 1, "num_out_q": 1})
b.create_module("PortInc", "inc", {"port": "p"})
b.create_module("Sink", "sink", {})
b.connect_modules("inc", "sink")
b.resume_all()
time.sleep(0.5)
b.pause_all()
out = {"ports": [(p.name, p.driver) for p in b.list_ports().ports],
       "inc": b.get_port_stats("p").inc.packets}
# The UPF's scan_dpdk_ports walks port_id 0, 1, ... until the answer is ENODEV; net_null0
# above is port 0 (held: EBUSY), port 1 has no device; 99 is beyond DPDK's table (EINVAL).
for i in (0, 1, 99):
    try:
        b.create_port("PMDPort", "q", {"port_id": i})
        out[f"port_id_{i}"] = 0
    except BESS.Error as e:
        out[f"port_id_{i}"] = e.code
print(json.dumps(out))
"""


def test_omecs_own_pybess_makes_and_reads_a_pmdport(daemon):
    """omec's pybess (what bessctl and the UPF's scripts use) creates a PMDPort on a DPDK
    vdev, reads its counters, and meets bessd's answers for port ids: ENODEV where there is no
    device (what the UPF's port scan stops at), EINVAL beyond DPDK's table."""
    _dpdk_or_skip(daemon.client)
    from .omec import peers

    try:
        cache = peers()
    except RuntimeError as e:
        pytest.skip(str(e))
    r = subprocess.run(
        [str(cache / "venv" / "bin" / "python"), "-c", OMEC_PYBESS_SCRIPT, str(cache / "bess"),
         str(daemon.port)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ports"] == [["p", "PMDPort"]]
    assert out["inc"] > 1000
    assert (out["port_id_0"], out["port_id_1"], out["port_id_99"]) == (
        errno.EBUSY,
        errno.ENODEV,
        errno.EINVAL,
    )

"""Ports through the daemon, end to end: hosts in network namespaces talking across the
switch, pcap replay, Unix-socket injection, and bad input. Namespace tests need root; each
makes and removes its own namespaces."""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import subprocess
import time

import pytest

from bessemer.client import BESS
from bessemer.script import run_script

from .conftest import ROOT, ROOT_ONLY, in_ns, switch
from .test_cli import cli

TCP_SERVER = """
import hashlib, socket, sys
s = socket.socket(); s.bind((sys.argv[1], 5001)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(65536)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest())
"""

TCP_CLIENT = """
import socket, sys, time
data = bytes.fromhex(sys.argv[2]) * int(sys.argv[3])
for _ in range(50):
    try:
        s = socket.create_connection((sys.argv[1], 5001), timeout=20); break
    except OSError:
        time.sleep(0.1)
s.sendall(data); s.close()
"""


@ROOT_ONLY
def test_two_hosts_talk_across_vports(daemon, two_namespaces):
    """VPorts (TAP) in two namespaces joined by the switch: ping, ARP, TCP, counters."""
    ns_a, ns_b = two_namespaces
    b = daemon.client
    pa = b.create_port(
        "VPort", "pa", {"ifname": "eth_a", "netns": ns_a, "ip_addrs": ["10.77.0.1/24"]}
    )
    b.create_port("VPort", "pb", {"ifname": "eth_b", "netns": ns_b, "ip_addrs": ["10.77.0.2/24"]})
    assert len(pa.mac_addr) == 17
    switch(b, "pa", "pb")
    ping = in_ns(ns_a, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    ping = in_ns(ns_b, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.77.0.1")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert "10.77.0.2" in in_ns(ns_a, "ip", "neigh").stdout  # ARP resolved across

    # A TCP transfer arrives intact (sha256 of every byte).
    chunk, times = os.urandom(1024).hex(), 2048
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns_b, "python3", "-c", TCP_SERVER, "10.77.0.2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        c = in_ns(ns_a, "python3", "-c", TCP_CLIENT, "10.77.0.2", chunk, str(times), timeout=60)
        assert c.returncode == 0, c.stderr
        out, _ = server.communicate(timeout=60)
    finally:
        server.kill()
    n, digest = out.split()
    expect = bytes.fromhex(chunk) * times
    assert int(n) == len(expect) and digest == hashlib.sha256(expect).hexdigest()

    st = b.get_port_stats("pa")
    assert st.inc.packets > 0 and st.out.packets > 0
    show = cli(daemon.port, "show", "port", "pa", "pb")
    assert show.returncode == 0 and "VPort" in show.stdout
    link = b.get_link_status("pa")
    assert link.link_up
    # In use: refused; after the modules go, the port (and its interface) goes.
    with pytest.raises(BESS.Error) as e:
        b.destroy_port("pa")
    assert "in use" in e.value.errmsg
    b.reset_all()
    assert b.list_ports() == []
    assert "eth_a" not in in_ns(ns_a, "ip", "link").stdout


@ROOT_ONLY
def test_port_errors_name_the_problem(daemon):
    b = daemon.client
    cases = [
        ("VPort", {"netns": "no_such_ns_xyz"}, "no_such_ns_xyz"),
        ("NoSuchDriver", {}, "NoSuchDriver"),
        ("PMDPort", {"port_id": 70000}, "below 65536"),
        ("UnixSocketPort", {"path": "/nonexistent-dir/x.sock"}, "/nonexistent-dir"),
        ("PcapFilePort", {"rx_file": "/nonexistent.pcap"}, "/nonexistent.pcap"),
    ]
    for driver, arg, needle in cases:
        with pytest.raises(BESS.Error) as e:
            b.create_port(driver, "", arg)
        assert needle in e.value.errmsg, (driver, e.value.errmsg)
    r = cli(daemon.port, "add", "port", "VPort", "v0", "{'netns': 'no_such_ns_xyz'}")
    assert r.returncode == 1 and "no_such_ns_xyz" in r.stderr
    with pytest.raises(BESS.Error) as e:
        b.create_module("PortInc", "pi", {"port": "ghost"})
    assert "ghost" in e.value.errmsg
    assert b.list_ports() == [] and b.list_modules() == []
    drivers = cli(daemon.port, "show", "driver").stdout
    for d in ("PcapFilePort", "UnixSocketPort", "VPort"):
        assert d in drivers


def _pcap_frames(path) -> list[bytes]:
    data = open(path, "rb").read()
    assert struct.unpack("<I", data[:4])[0] == 0xA1B2C3D4
    out, at = [], 24
    while at < len(data):
        n = struct.unpack("<I", data[at + 8 : at + 12])[0]
        out.append(data[at + 16 : at + 16 + n])
        at += 16 + n
    return out


def test_pcap_replay_through_the_daemon_matches(daemon, tmp_path):
    out = tmp_path / "out.pcap"
    run_script(ROOT / "conf" / "ports" / "pcap_replay.bess", daemon.client, {"OUT": str(out)})
    want = _pcap_frames(ROOT / "conf" / "ports" / "sample.pcap")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if out.exists() and len(_pcap_frames(out)) >= len(want):
            break
        time.sleep(0.05)
    assert _pcap_frames(out) == want
    (port,) = daemon.client.list_ports()
    st = daemon.client.get_port_stats(port.name)
    assert st.inc.packets == len(want) == st.out.packets


def test_unix_socket_port_round_trip(daemon, tmp_path):
    """Frames a client sends come back to it through PortInc -> MACSwap -> PortOut."""
    path = str(tmp_path / "u.sock")
    b = daemon.client
    b.create_port("UnixSocketPort", "u", {"path": path})
    b.create_module("PortInc", "pi", {"port": "u"})
    b.create_module("MACSwap", "sw")
    b.create_module("PortOut", "po", {"port": "u"})
    b.connect_modules("pi", "sw")
    b.connect_modules("sw", "po")
    b.resume_all()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    c.connect(path)
    frames = [bytes([1] * 6 + [2] * 6) + bytes([0x08, 0x00]) + os.urandom(46 + i) for i in range(5)]
    for f in frames:
        c.send(f)
    got = [c.recv(4096) for _ in frames]
    c.close()
    assert got == [f[6:12] + f[0:6] + f[12:] for f in frames]
    # The worker counts a sent batch after the send returns, so the client may read its
    # frames just before the counter moves: wait for it (bounded).
    deadline = time.monotonic() + 5
    st = b.get_port_stats("u")
    while st.out.packets < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
        st = b.get_port_stats("u")
    assert st.inc.packets == 5 and st.out.packets == 5

"""conf/upf/upf.bess on real interfaces, end to end: a gNB namespace sends GTP-U for several
sessions to the UPF's N3 port (AFPacketPort on a veth), the N6 namespace receives the inner
packets intact, its replies come back to the gNB encapsulated with each session's TEID, an
Echo Request is answered, a deleted session's traffic stops, and a TCP connection from a UE
behind a user-space gNB (a TUN interface and a GTP-U relay) to a host on N6 carries 2 MiB
each way intact. The sessions are installed by conf/upf/sessions.py (a PFCP agent's calls).
Root only; the test makes and removes its own namespaces and interfaces."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import uuid

import pytest
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from bessemer.script import run_script

from .conftest import (
    ROOT,
    ROOT_ONLY,
    link_mac,
    ogate_packets,
    send_and_capture,
    sh,
    veth_to_namespace,
)

pytestmark = ROOT_ONLY

SESSIONS = 4
N3_IP, GNB_IP, APP_IP = "198.18.0.1", "198.18.0.2", "6.6.6.6"
UL_TEID, DL_TEID = 0x100, 0x8000000


def _exchange(
    ns_tx: str, if_tx: str, frames: list[bytes], ns_rx: str, if_rx: str, offset: int, want: bytes
) -> list[bytes]:
    """Sends `frames` on `if_tx` in `ns_tx`; returns the frames `if_rx` in `ns_rx` received
    holding `want` at `offset` (at most len(frames), waiting at most 3 s)."""
    return send_and_capture((ns_tx, if_tx), frames, (ns_rx, if_rx), want, (offset,), 3)


def _ue(i: int) -> str:
    return f"16.0.0.{1 + i}"


@pytest.fixture()
def upf(daemon, two_namespaces):
    """The UPF on two veth pairs: access (N3) to the gNB namespace, core (N6) to the data
    network's; sessions 0..SESSIONS-1 installed by conf/upf/sessions.py."""
    gnb_ns, dn_ns = two_namespaces
    tag = uuid.uuid4().hex[:6]
    sw = {"access": f"ua{tag}", "core": f"uc{tag}"}
    host = {"access": f"ga{tag}", "core": f"dc{tag}"}
    ns = {"access": gnb_ns, "core": dn_ns}
    b = daemon.client
    try:
        for side in ("access", "core"):
            veth_to_namespace(sw[side], host[side], ns[side])
        env = {
            "UPF_MODE": "af_packet",
            "UPF_ACCESS_IF": sw["access"],
            "UPF_CORE_IF": sw["core"],
            "UPF_ACCESS_NH_MAC": link_mac(gnb_ns, host["access"]),
            "UPF_CORE_NH_MAC": link_mac(dn_ns, host["core"]),
        }
        run_script(ROOT / "conf" / "upf" / "upf.bess", b, env)
        r = _sessions(daemon.port, "--sessions", str(SESSIONS), "add")
        assert r.returncode == 0, r.stderr
        yield {"b": b, "port": daemon.port, "ns": ns, "host": host, "sw": sw}
    finally:
        try:
            b.reset_all()
        except Exception:  # noqa: BLE001 - cleanup goes on whatever the daemon says
            pass
        for name in sw.values():
            sh("ip", "link", "del", name)


def _sessions(port: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    return subprocess.run(
        [sys.executable, str(ROOT / "conf" / "upf" / "sessions.py"), "--port", str(port), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _uplink(u, i: int, marker: bytes) -> tuple[bytes, bytes]:
    """Session i's G-PDU from the gNB and the inner packet in it."""
    inner = IP(src=_ue(i), dst=APP_IP) / UDP(sport=10001, dport=10002) / Raw(marker)
    outer = Ether(
        src=link_mac(u["ns"]["access"], u["host"]["access"]), dst=link_mac(None, u["sw"]["access"])
    )
    outer = outer / IP(src=GNB_IP, dst=N3_IP) / UDP(sport=2152, dport=2152)
    return bytes(outer / GTP_U_Header(teid=UL_TEID + i, gtp_type=255) / inner), bytes(inner)


def _send_up(u, frames: list[bytes], marker: bytes) -> list[bytes]:
    return _exchange(
        u["ns"]["access"],
        u["host"]["access"],
        frames,
        u["ns"]["core"],
        u["host"]["core"],
        42,
        marker,
    )


def test_uplink_downlink_echo_and_delete(upf):
    u = upf
    # Uplink: each session's inner packet reaches N6 intact behind the next hop's header.
    marker = b"UL-" + uuid.uuid4().hex[:8].encode()
    sent = [_uplink(u, i, marker + bytes([i])) for i in range(SESSIONS)]
    got = _send_up(u, [f for f, _ in sent], marker)
    assert sorted(g[14:] for g in got) == sorted(inner for _, inner in sent)
    assert all(
        g[:6] == bytes.fromhex(link_mac(u["ns"]["core"], u["host"]["core"]).replace(":", ""))
        for g in got
    )

    # Downlink: the data network's replies come back to the gNB in GTP-U with each
    # session's downlink TEID, the inner packet intact.
    marker = b"DL-" + uuid.uuid4().hex[:8].encode()
    replies = {}
    for i in range(SESSIONS):
        pkt = IP(src=APP_IP, dst=_ue(i)) / UDP(sport=10002, dport=10001) / Raw(marker + bytes([i]))
        replies[i] = bytes(pkt)
    dn_mac = link_mac(u["ns"]["core"], u["host"]["core"])
    frames = [
        bytes(Ether(src=dn_mac, dst=link_mac(None, u["sw"]["core"])) / IP(r))
        for r in replies.values()
    ]
    got = _exchange(
        u["ns"]["core"],
        u["host"]["core"],
        frames,
        u["ns"]["access"],
        u["host"]["access"],
        78,
        marker,
    )
    assert len(got) == SESSIONS
    for g in got:
        pkt = Ether(g)
        assert pkt[IP].src == N3_IP and pkt[IP].dst == GNB_IP and pkt[UDP].dport == 2152
        gtp = pkt[GTP_U_Header]
        i = g[-1]
        assert gtp.teid == DL_TEID + i
        assert bytes(gtp.payload) == replies[i]

    # An Echo Request is answered with an Echo Response of the same sequence number.
    echo = Ether(
        src=link_mac(u["ns"]["access"], u["host"]["access"]), dst=link_mac(None, u["sw"]["access"])
    )
    echo = echo / IP(src=GNB_IP, dst=N3_IP) / UDP(sport=2152, dport=2152)
    echo = bytes(echo / GTP_U_Header(gtp_type=1, S=1, seq=0x4242, teid=0))
    # GTP-U message type 2 (Echo Response) at offset 43.
    got = _exchange(
        u["ns"]["access"],
        u["host"]["access"],
        [echo],
        u["ns"]["access"],
        u["host"]["access"],
        43,
        b"\x02",
    )
    assert len(got) == 1
    resp = Ether(got[0])
    assert resp[IP].src == N3_IP and resp[IP].dst == GNB_IP
    assert resp[GTP_U_Header].seq == 0x4242

    # A deleted session's uplink stops; the others' still flows.
    r = _sessions(u["port"], "--first", "0", "--sessions", "1", "delete")
    assert r.returncode == 0, r.stderr
    marker = b"DX-" + uuid.uuid4().hex[:8].encode()
    sent = [_uplink(u, i, marker + bytes([i])) for i in range(2)]
    got = _send_up(u, [f for f, _ in sent], marker)
    assert [g[14:] for g in got] == [sent[1][1]]


# A gNB in user space: a TUN interface holding the UE's address, whose packets go to the
# UPF's N3 address in GTP-U with the session's uplink TEID; G-PDUs with the downlink TEID
# come back out of the TUN. Runs inside the gNB namespace for at most SECS seconds.
GNB_RELAY = r"""
import fcntl, os, select, socket, struct, subprocess, sys, time
ue, gnb_ip, n3_ip, ul_teid, dl_teid, secs = sys.argv[1:7]
ul_teid, dl_teid, secs = int(ul_teid), int(dl_teid), float(secs)
tun = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(tun, 0x400454CA, struct.pack("16sH", b"ue0", 0x0001 | 0x1000))  # TUN, NO_PI
for cmd in (["link", "set", "ue0", "mtu", "1400", "up"], ["addr", "add", ue + "/32", "dev", "ue0"],
            ["route", "add", sys.argv[7], "dev", "ue0", "src", ue]):
    subprocess.run(["ip", *cmd], check=True)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((gnb_ip, 2152))
print("ready", flush=True)
up = down = bad = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    r, _, _ = select.select([tun, u], [], [], 0.2)
    if tun in r:
        inner = os.read(tun, 65535)
        u.sendto(struct.pack("!BBHI", 0x30, 255, len(inner), ul_teid) + inner, (n3_ip, 2152))
        up += 1
    if u in r:
        data = u.recv(65535)
        flags, kind, length, teid = struct.unpack("!BBHI", data[:8])
        if kind != 255 or teid != dl_teid or flags & 0x07 or length != len(data) - 8:
            bad += 1
            continue
        os.write(tun, data[8:])
        down += 1
print(f"relayed {up} up {down} down {bad} bad", flush=True)
"""

# The data network's host: accepts one connection, reads until the peer closes its side,
# sends everything back and closes.
DN_SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001))
s.listen(1)
s.settimeout(float(sys.argv[2]))
print("ready", flush=True)
c, _ = s.accept()
c.settimeout(float(sys.argv[2]))
got = bytearray()
while True:
    b = c.recv(65536)
    if not b:
        break
    got += b
c.sendall(got)
c.close()
print(len(got), flush=True)
"""

# The UE's application: sends N random bytes, reads the echo; prints what it checked.
TCP_CLIENT = r"""
import hashlib, os, socket, sys
data = os.urandom(int(sys.argv[3]))
c = socket.create_connection((sys.argv[2], 5001), timeout=20, source_address=(sys.argv[1], 0))
c.sendall(data)
c.shutdown(socket.SHUT_WR)
back = bytearray()
while True:
    b = c.recv(65536)
    if not b:
        break
    back += b
print(hashlib.sha256(data).hexdigest(), len(data))
print(hashlib.sha256(back).hexdigest(), len(back))
"""


def _ready(proc: subprocess.Popen, what: str) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    if not ready or proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise AssertionError(f"{what} did not start: {proc.communicate()[1]}")


def test_tcp_transfer_through_the_tunnel(upf):
    """A TCP connection from a UE behind a user-space gNB to a host on N6 carries 2 MiB both
    ways through the UPF's GTP-U tunnel intact (checked by SHA-256 at both ends)."""
    u = upf
    gnb, dn = u["ns"]["access"], u["ns"]["core"]
    ga, dc = u["host"]["access"], u["host"]["core"]
    sw_access, sw_core = link_mac(None, u["sw"]["access"]), link_mac(None, u["sw"]["core"])
    ue = _ue(0)
    for cmd in (
        ("-n", gnb, "addr", "add", f"{GNB_IP}/24", "dev", ga),
        ("-n", gnb, "neigh", "replace", N3_IP, "lladdr", sw_access, "dev", ga),
        ("-n", dn, "link", "set", dc, "mtu", "1400"),
        ("-n", dn, "addr", "add", f"{APP_IP}/32", "dev", dc),
        ("-n", dn, "route", "add", "16.0.0.0/8", "dev", dc, "src", APP_IP),
        ("-n", dn, "neigh", "replace", ue, "lladdr", sw_core, "dev", dc),
    ):
        r = sh("ip", *cmd)
        assert r.returncode == 0, (cmd, r.stderr)
    procs = []
    try:
        relay = subprocess.Popen(
            ["ip", "netns", "exec", gnb, sys.executable, "-c", GNB_RELAY, ue, GNB_IP, N3_IP]
            + [str(UL_TEID), str(DL_TEID), "40", f"{APP_IP}/32"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(relay)
        _ready(relay, "the gNB relay")
        server = subprocess.Popen(
            ["ip", "netns", "exec", dn, sys.executable, "-c", DN_SERVER, APP_IP, "30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(server)
        _ready(server, "the N6 server")
        client = subprocess.run(
            ["ip", "netns", "exec", gnb, sys.executable, "-c", TCP_CLIENT, ue, APP_IP]
            + [str(2 << 20)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stderr
        sent, echoed = client.stdout.split("\n")[:2]
        assert sent.endswith(f" {2 << 20}")
        assert echoed == sent, "the bytes that came back differ from those sent"
        out, _ = server.communicate(timeout=10)
        assert out.split()[-1] == str(2 << 20), "the N6 host read other bytes than sent"
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # Both directions crossed the UPF as GTP-U: decapsulated uplink, encapsulated downlink.
    assert ogate_packets(u["b"], "gtpuDecap") > 100
    assert ogate_packets(u["b"], "gtpuEncap", 1) > 100

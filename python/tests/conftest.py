"""Shared fixtures: a real bessemerd on a free loopback port, per test; network namespaces
and the helpers the port tests share."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from bessemer.client import BESS

ROOT = Path(__file__).resolve().parents[2]


def daemon_binary() -> Path:
    """The bessemerd to test: $BESSEMERD, or the debug build (built if missing)."""
    env = os.environ.get("BESSEMERD")
    if env:
        return Path(env)
    path = ROOT / "target" / "debug" / "bessemerd"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-daemon"], cwd=ROOT, check=True, timeout=900
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ogate_packets(b: BESS, name: str, gate: int = 0) -> int:
    """Packets that left output gate `gate` of module `name`."""
    for og in b.get_module_info(name).ogates:
        if og.ogate == gate:
            return og.pkts
    return 0


@dataclass
class Daemon:
    """A running daemon: its port, a connected client and its log file."""

    port: int
    client: BESS
    log: Path
    proc: subprocess.Popen


@contextlib.contextmanager
def running_daemon(tmp_path: Path, *extra: str, wrap: tuple[str, ...] = (), client=None):
    """A bessemerd on a free loopback port with `extra` options, stopped afterwards; `wrap`
    is a command line it runs under (e.g. `prlimit --nofile=256:256`), `client(port)` makes
    the client (default: plain, 5 s timeout)."""
    port = free_port()
    log = tmp_path / f"bessemerd-{port}.log"
    args = [*wrap, str(daemon_binary()), "--port", str(port), "--no-pin", "--no-hugepages"]
    args += ["--buffers", "8192", "--log-file", str(log), *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client_of, client = client, None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client = client_of(port) if client_of else BESS(port=port, timeout=5)
                client.get_version()
                break
            except BESS.Error:
                if client:
                    client.close()
                    client = None
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield Daemon(port, client, log, proc)
    finally:
        if client:
            client.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture()
def daemon(tmp_path):
    with running_daemon(tmp_path) as d:
        yield d


@pytest.fixture()
def bess(daemon):
    return daemon.client


ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2"
)


def sh(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def in_ns(ns: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *args, timeout=timeout)


@pytest.fixture()
def two_namespaces():
    """Two fresh network namespaces (loopback up), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    names = [f"bsa{tag}", f"bsb{tag}"]
    try:
        for n in names:
            assert sh("ip", "netns", "add", n).returncode == 0
            sh("ip", "-n", n, "link", "set", "lo", "up")
        yield names
    finally:
        for n in names:
            sh("ip", "netns", "del", n)


def switch(bess: BESS, a: str, b: str) -> None:
    """PortInc(a) -> PortOut(b) and back, workers resumed."""
    bess.create_module("PortInc", "in_a", {"port": a})
    bess.create_module("PortOut", "out_b", {"port": b})
    bess.create_module("PortInc", "in_b", {"port": b})
    bess.create_module("PortOut", "out_a", {"port": a})
    bess.connect_modules("in_a", "out_b")
    bess.connect_modules("in_b", "out_a")
    bess.resume_all()


def link_mac(ns: str | None, ifname: str) -> str:
    """The MAC address of `ifname` in namespace `ns` (None: this one)."""
    where = ("-n", ns) if ns else ()
    r = sh("ip", *where, "-j", "link", "show", "dev", ifname)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)[0]["address"]


def veth_to_namespace(
    sw: str, host: str, ns: str, addr: str | None = None, mtu: int | None = None
) -> None:
    """A veth pair whose end `sw` stays here (the switch's end: up, no addresses, IPv6 off so
    the root namespace sends no ND or MLD through the switch) and whose end `host` goes into
    namespace `ns` (up, with address `addr` if given); `mtu` on both ends if given. The
    caller deletes `sw` (which deletes both ends)."""
    r = sh("ip", "link", "add", sw, "type", "veth", "peer", "name", host, "netns", ns)
    assert r.returncode == 0, r.stderr
    with open(f"/proc/sys/net/ipv6/conf/{sw}/disable_ipv6", "w") as f:
        f.write("1")
    cmds = []
    if mtu:
        cmds += [
            ("link", "set", sw, "mtu", str(mtu)),
            ("-n", ns, "link", "set", host, "mtu", str(mtu)),
        ]
    if addr:
        cmds.append(("-n", ns, "addr", "add", addr, "dev", host))
    cmds += [("-n", ns, "link", "set", host, "up"), ("link", "set", sw, "up")]
    for cmd in cmds:
        r = sh("ip", *cmd)
        assert r.returncode == 0, r.stderr


# Receives up to COUNT frames holding WANT (hex) at one of OFFSETS (comma-separated) on
# IFNAME for at most SECS seconds, and prints them in hex; frames the interface sent itself
# are skipped. The kernel hands AF_PACKET a received frame with its VLAN tag taken out
# (PACKET_AUXDATA carries it); the tag is put back so frames compare as they were on the wire.
RECEIVER = r"""
import socket, struct, sys, time
ifname, want = sys.argv[1], bytes.fromhex(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
count, secs = int(sys.argv[4]), float(sys.argv[5])
SOL_PACKET, PACKET_AUXDATA, VLAN_VALID, TPID_VALID = 263, 8, 0x10, 0x40
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.bind((ifname, 0))
print("ready", flush=True)
got, end = [], time.monotonic() + secs
while len(got) < count and time.monotonic() < end:
    s.settimeout(max(0.01, end - time.monotonic()))
    try:
        data, anc, flags, addr = s.recvmsg(65536, socket.CMSG_SPACE(32))
    except OSError:
        break
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    for level, kind, val in anc:
        if level == SOL_PACKET and kind == PACKET_AUXDATA:
            status, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", val[:20])
            if status & VLAN_VALID:
                tpid = tpid if status & TPID_VALID else 0x8100
                data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
    if any(data[o:o + len(want)] == want for o in offsets):
        got.append(data.hex())
print("\n".join(got), flush=True)
"""

# Sends the frames given in hex, one a line on stdin, on IFNAME through an AF_PACKET socket.
SENDER = r"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for line in sys.stdin.read().split():
    s.send(bytes.fromhex(line))
"""


def send_and_capture(
    tx: tuple[str, str],
    frames: list[bytes],
    rx: tuple[str, str],
    want: bytes,
    offsets: tuple[int, ...],
    secs: float,
) -> list[bytes]:
    """Sends `frames` on interface tx[1] in namespace tx[0]; answers the frames interface
    rx[1] in namespace rx[0] received holding `want` at one of `offsets` (at most
    len(frames), waiting at most `secs` seconds)."""
    cmd = ["ip", "netns", "exec", rx[0], sys.executable, "-c", RECEIVER, rx[1], want.hex()]
    cmd += [",".join(map(str, offsets)), str(len(frames)), str(secs)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        if not ready or proc.stdout.readline().strip() != "ready":
            proc.kill()
            raise AssertionError(f"no receiver on {rx[1]}: {proc.communicate()[1]}")
        sent = subprocess.run(
            ["ip", "netns", "exec", tx[0], sys.executable, "-c", SENDER, tx[1]],
            input="\n".join(f.hex() for f in frames),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=secs + 10)
        assert proc.returncode == 0, err
    finally:
        proc.kill()
        proc.wait()
    return [bytes.fromhex(line) for line in out.split()]

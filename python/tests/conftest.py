"""Shared fixtures: a real bessemerd on a free loopback port, per test; network namespaces
and the helpers the port tests share."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
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
def running_daemon(tmp_path: Path, *extra: str):
    """A bessemerd on a free loopback port with `extra` options, stopped afterwards."""
    port = free_port()
    log = tmp_path / f"bessemerd-{port}.log"
    args = [str(daemon_binary()), "--port", str(port), "--no-pin", "--no-hugepages"]
    args += ["--buffers", "8192", "--log-file", str(log), *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client = BESS(port=port, timeout=5)
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

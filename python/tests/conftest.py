"""Shared fixtures: a real bessemerd on a free loopback port, per test."""

from __future__ import annotations

import os
import socket
import subprocess
import time
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


@pytest.fixture()
def daemon(tmp_path):
    port = free_port()
    log = tmp_path / "bessemerd.log"
    args = [str(daemon_binary()), "--port", str(port), "--no-pin", "--no-hugepages"]
    args += ["--buffers", "8192", "--log-file", str(log)]
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
def bess(daemon):
    return daemon.client

"""The Python client against a real bessemerd started on a free loopback port."""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bessemer.client import BESS

ROOT = Path(__file__).resolve().parents[2]


def _daemon_binary() -> Path:
    env = os.environ.get("BESSEMERD")
    if env:
        return Path(env)
    path = ROOT / "target" / "debug" / "bessemerd"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-daemon"], cwd=ROOT, check=True, timeout=900
        )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def bess(tmp_path):
    port = _free_port()
    args = [str(_daemon_binary()), "--port", str(port), "--no-pin", "--no-hugepages"]
    args += ["--buffers", "4096", "--log-file", str(tmp_path / "bessemerd.log")]
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
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield client
    finally:
        if client:
            client.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _ogate_packets(b: BESS, name: str, gate: int = 0) -> int:
    for og in b.get_module_info(name).ogates:
        if og.ogate == gate:
            return og.pkts
    return 0


def test_pipeline_runs_and_counts(bess):
    assert "Source" in bess.list_mclasses()
    assert bess.create_module("Source", "src", {"pkt_size": 60}) == "src"
    bess.create_module("Queue", "q", {"size": 256})
    assert bess.create_module("Sink") == "sink0"
    bess.connect_modules("src", "q")
    bess.connect_modules("q", "sink0")
    bess.add_worker(0, 0)
    bess.resume_all()
    deadline = time.monotonic() + 10
    while _ogate_packets(bess, "q") < 1000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ogate_packets(bess, "q") >= 1000
    status = bess.run_module_command("q", "get_status", "QueueCommandGetStatusArg")
    assert int(status["size"]) == 256
    assert int(status["enqueued"]) >= int(status["dequeued"]) > 0
    names = {m.name: m.mclass for m in bess.list_modules()}
    assert names == {"src": "Source", "q": "Queue", "sink0": "Sink"}


def test_errors_name_the_problem(bess):
    with pytest.raises(BESS.Error) as e:
        bess.create_module("NoSuchClass", "x")
    assert e.value.code != 0 and "NoSuchClass" in e.value.errmsg
    bess.create_module("Sink", "sink")
    with pytest.raises(BESS.Error) as e:
        bess.create_module("Sink", "sink")
    assert "already exists" in e.value.errmsg
    bess.create_module("Source", "src")
    with pytest.raises(BESS.Error) as e:
        bess.connect_modules("src", "sink", ogate=3)
    assert "out of range" in e.value.errmsg
    with pytest.raises(BESS.Error) as e:
        bess.run_module_command("src", "explode", "EmptyArg")
    assert "explode" in e.value.errmsg
    # The daemon is still serving and nothing changed.
    assert {m.name for m in bess.list_modules()} == {"sink", "src"}
    assert bess.get_version()

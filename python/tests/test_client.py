"""The Python client against a real bessemerd started on a free loopback port."""

import os
import time

import pytest

from bessemer.client import BESS

from .conftest import ogate_packets as _ogate_packets


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
    assert status.size == 256
    assert status.enqueued >= status.dequeued > 0
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


def test_arguments_keep_bytes_and_name_bad_fields(bess, tmp_path):
    # Bytes go to the daemon as they are (not base64-decoded, as json_format would).
    tmpl = bytes(range(60))
    bess.create_module("Source", "src", {"pkt_size": 60})
    bess.create_module("Rewrite", "rw", {"templates": [tmpl]})
    bess.create_module("Queue", "q", {"size": 64})
    bess.connect_modules("src", "rw")
    bess.connect_modules("rw", "q")
    with pytest.raises(BESS.Error) as e:
        bess.create_module("Rewrite", "rw2", {"templatez": [tmpl]})
    assert "templatez" in e.value.errmsg and "templates" in e.value.errmsg
    with pytest.raises(BESS.Error) as e:
        bess.create_module("Source", "s2", {"pkt_size": "sixty"})
    assert "SourceArg.pkt_size" in e.value.errmsg
    with pytest.raises(BESS.Error) as e:
        bess.create_module("Rewrite", "rw3", {"templates": tmpl})
    assert "expected a list" in e.value.errmsg
    # Watch rw's output through a tcpdump hook: every packet is the template, byte for byte.
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        bess.tcpdump(True, "rw", fifo=str(fifo))
        bess.resume_all()
        data = b""
        deadline = time.monotonic() + 10
        while len(data) < 24 + 3 * 76 and time.monotonic() < deadline:
            try:
                data += os.read(reader, 65536)
            except BlockingIOError:
                time.sleep(0.02)
        bess.pause_all()
    finally:
        os.close(reader)
    first = data[24 + 16 : 24 + 16 + 60]
    assert first == tmpl

"""The `bessemer` command line, driven as a user would (subprocesses), against real daemons."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, daemon_binary, free_port, ogate_packets

CONF = ROOT / "conf" / "source_queue_sink.bess"


def cli(port: int, *args: str, stdin: str | None = None, timeout: float = 60):
    env = {**os.environ, "BESSEMERD": str(daemon_binary())}
    return subprocess.run(
        [sys.executable, "-m", "bessemer.cli", "--port", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env=env,
    )


def test_daemon_start_stop_and_second_instance_refused():
    port = free_port()
    r = cli(port, "daemon", "start", "--no-hugepages", "--no-pin", "--buffers", "4096")
    try:
        assert r.returncode == 0, r.stderr
        assert "started (pid" in r.stdout and str(port) in r.stdout
        again = cli(port, "daemon", "start", "--no-hugepages")
        assert again.returncode == 1 and "already listens" in again.stderr
        st = cli(port, "show", "status")
        assert st.returncode == 0 and "workers:  0" in st.stdout and "modules:  0" in st.stdout
        assert "bessemer" in cli(port, "show", "version").stdout
    finally:
        stop = cli(port, "daemon", "stop")
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stderr
    gone = cli(port, "show", "status")
    assert gone.returncode == 1 and "cannot talk to the daemon" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_bad_daemon_options_are_reported():
    port = free_port()
    r = cli(port, "daemon", "start", "--no-such-option")
    assert r.returncode == 1 and "exited with status" in r.stderr and "no-such-option" in r.stderr


def test_run_show_and_monitor_a_pipeline(daemon, tmp_path):
    p = daemon.port
    r = cli(p, "run", str(CONF), "SIZE=100")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 10
    while ogate_packets(daemon.client, "q") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    pipe = cli(p, "show", "pipeline").stdout
    assert "src :: Source" in pipe and "q :: Queue" in pipe
    assert ":0 --(" in pipe and "--> 0:q" in pipe and "--> 0:sink0" in pipe
    mod = cli(p, "show", "module", "q").stdout
    assert mod.startswith("q :: Queue") and "<- src:0" in mod and "-> 0:sink0" in mod
    dot = tmp_path / "g.dot"
    assert cli(p, "show", "pipeline", "--dot", str(dot)).returncode == 0
    text = dot.read_text()
    assert text.startswith("digraph pipeline {") and '"src" -> "q"' in text
    assert "worker 0:" in cli(p, "show", "tc").stdout
    assert "running" in cli(p, "show", "worker").stdout
    assert cli(p, "check", "constraints").stdout.strip() == "constraints: OK"
    status = cli(p, "command", "module", "q", "get_status", "QueueCommandGetStatusArg").stdout
    assert "size: 1024" in status and "enqueued:" in status
    mclass = cli(p, "show", "mclass", "Queue").stdout
    assert "QueueArg" in mclass and "get_status" in mclass

    mon = cli(p, "monitor", "pipeline", "--interval", "0.3", "--seconds", "1.0")
    assert mon.returncode == 0, mon.stderr
    frames = [f for f in mon.stdout.split("(Ctrl-C to stop)") if "src:0 -> 0:q" in f]
    assert len(frames) >= 2
    rate = frames[-1].split("src:0 -> 0:q")[1].split()[0]
    assert rate[-1] in "kMG" or float(rate) > 0, mon.stdout
    tc = cli(p, "monitor", "tc", "--interval", "0.3", "--seconds", "0.7").stdout
    assert "!leaf_src:0" in tc


def test_add_delete_and_errors_name_the_problem(daemon):
    p = daemon.port
    assert cli(p, "add", "module", "Source", "s", "{'pkt_size': 64}").stdout.strip() == "s"
    assert cli(p, "add", "module", "Sink", "").stdout.strip() == "sink0"
    assert cli(p, "add", "connection", "s", "sink0").returncode == 0
    cases = [
        (("add", "module", "NoSuchClass", "x"), "NoSuchClass"),
        (("add", "module", "Source", "y", "{'pkt_size': 'big'}"), "pkt_size"),
        (("add", "module", "Source", "z", "[1, 2]"), "expected a dict"),
        (("add", "module", "Source", "z", "{oops"), "not a Python literal"),
        (("add", "connection", "s", "sink0", "5"), "out of range"),
        (("delete", "module", "nosuch"), "nosuch"),
        (("command", "module", "s", "explode", "EmptyArg"), "explode"),
        (("add", "port", "NoDriver", "p0"), "NoDriver"),
        (("show", "module", "ghost"), "ghost"),
    ]
    for args, needle in cases:
        r = cli(p, *args)
        assert r.returncode == 1, (args, r.stdout)
        assert needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    bad = cli(p, "show", "nothing")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    # Nothing changed: the valid pipeline is still there, the daemon still serves.
    assert {m.name for m in daemon.client.list_modules()} == {"s", "sink0"}
    assert cli(p, "delete", "connection", "s", "0").returncode == 0
    assert cli(p, "delete", "module", "s").returncode == 0
    assert {m.name for m in daemon.client.list_modules()} == {"sink0"}
    # Adding the Source resumed the workers, which placed its task on a worker 0 launched on
    # demand (as bessctl's resume does in BESS), so worker 0 exists already.
    r = cli(p, "add", "worker", "0", "0")
    assert r.returncode == 1 and "already exists" in r.stderr
    assert cli(p, "add", "worker", "1", "0").returncode == 0
    assert cli(p, "delete", "worker", "1").returncode == 0
    assert cli(p, "delete", "worker", "0").returncode == 0
    assert daemon.client.list_workers() == []


def test_check_constraints_names_module_and_workers(daemon):
    b, p = daemon.client, daemon.port
    b.add_worker(0, 0)
    b.add_worker(1, 1 % (os.cpu_count() or 1))
    # src0 (worker 0) and src1 (worker 1) both reach rr, whose class allows one worker; the
    # Queue in front of sink hands rr's packets to its own task, so sink is not reached by two.
    b.create_module("RoundRobin", "rr", {"gates": [0]})
    b.create_module("Queue", "q")
    b.create_module("Sink", "sink")
    b.connect_modules("rr", "q")
    b.connect_modules("q", "sink")
    for i in (0, 1):
        b.create_module("Source", f"src{i}")
        b.connect_modules(f"src{i}", "rr")
        b.attach_task(f"src{i}", wid=i)
    b.attach_task("q", wid=0)
    r = cli(p, "check", "constraints")
    assert r.returncode == 1, r.stdout
    assert "(fatal)" in r.stderr
    assert "module rr is run by workers 0, 1" in r.stderr, r.stderr
    assert "Queue in front" in r.stderr
    assert "module q" not in r.stderr and "module sink" not in r.stderr
    b.attach_task("src1", wid=0)
    ok = cli(p, "check", "constraints")
    assert ok.returncode == 0 and "constraints: OK" in ok.stdout


def test_every_command_has_help():
    top = cli(1, "--help")
    assert top.returncode == 0
    for word in (
        "daemon",
        "run",
        "add",
        "delete",
        "command",
        "show",
        "check",
        "monitor",
        "tcpdump",
        "shell",
    ):
        assert word in top.stdout
    for args in (
        ("show", "--help"),
        ("monitor", "pipeline", "--help"),
        ("tcpdump", "--help"),
        ("add", "module", "--help"),
        ("daemon", "start", "--help"),
    ):
        r = cli(1, *args)
        assert r.returncode == 0 and "usage: bessemer" in r.stdout, args


def _pcap_records(path) -> list[bytes]:
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic == 0xA1B2C3D4, hex(magic)
    out, at = [], 24
    while at < len(data):
        caplen = struct.unpack("<I", data[at + 8 : at + 12])[0]
        out.append(data[at + 16 : at + 16 + caplen])
        at += 16 + caplen
    return out


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
def test_tcpdump_captures_a_gate(daemon, tmp_path):
    p = daemon.port
    assert cli(p, "run", str(CONF), "SIZE=80").returncode == 0
    out = tmp_path / "cap.pcap"
    r = cli(p, "tcpdump", "q", "out", "0", "-c", "5", "-w", str(out), timeout=60)
    assert r.returncode == 0, r.stderr
    recs = _pcap_records(out)
    assert len(recs) == 5 and all(len(x) == 80 for x in recs)
    r = cli(p, "tcpdump", "q", "in", "0", "-c", "3", "-n", "-e", timeout=60)
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 3, r.stdout
    # The hook is gone once tcpdump ends; the pipeline still runs.
    assert daemon.client.list_gatehooks() == []
    r = cli(p, "tcpdump", "nosuch")
    assert r.returncode == 1 and "nosuch" in r.stderr


def test_shell_runs_commands_from_stdin(daemon):
    script = "show version\nadd module Sink s1\nshow module s1\nbogus words\nshow module\nquit\n"
    r = cli(daemon.port, "shell", stdin=script)
    assert r.returncode == 0
    assert "bessemer" in r.stdout and "s1 :: Sink" in r.stdout
    assert "invalid choice" in r.stderr

"""The `bessemer` command line, driven as a user would (subprocesses), against real daemons."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
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


def test_version_with_and_without_a_daemon(daemon):
    import bessemer

    r = cli(free_port(), "--version")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"bessemer {bessemer.__version__}"
    assert lines[1].endswith(": none answers"), r.stdout
    r = cli(daemon.port, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"bessemer {bessemer.__version__}",
        f"daemon at localhost:{daemon.port}: {daemon.client.get_version()}",
    ]


def test_unix_socket_daemon_start_use_and_stop(tmp_path):
    sock = tmp_path / "bessemer.sock"
    unix = ("--unix", str(sock))
    # --port 1: nothing listens there, so every answer below came over the socket.
    r = cli(1, *unix, "daemon", "start", "--no-hugepages", "--no-pin", "--buffers", "4096")
    pid = int(r.stdout.split("(pid ")[1].split(")")[0]) if "(pid " in r.stdout else None
    try:
        assert r.returncode == 0, r.stderr
        assert f"on unix:{sock}" in r.stdout
        again = cli(1, *unix, "daemon", "start", "--no-hugepages")
        assert again.returncode == 1 and f"already listens on unix:{sock}" in again.stderr
        assert cli(1, *unix, "add", "module", "Sink", "s").stdout.strip() == "s"
        st = cli(1, *unix, "show", "status")
        assert st.returncode == 0 and "modules:  1" in st.stdout, st.stderr
        # The same socket as a unix: address, and from the shell's `daemon connect`.
        assert "s :: Sink" in cli(1, "--host", f"unix:{sock}", "show", "module").stdout
        sh = cli(1, "shell", stdin=f"daemon connect unix:{sock}\nshow module s\n")
        assert f"at unix:{sock}" in sh.stdout and "s :: Sink" in sh.stdout, sh.stderr
        stop = cli(1, *unix, "daemon", "stop")
        assert stop.returncode == 0 and f"daemon on unix:{sock} stopped" in stop.stdout
        pid = None
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    gone = cli(1, *unix, "show", "status")
    assert gone.returncode == 1 and f"cannot talk to the daemon at unix:{sock}" in gone.stderr


def test_duplicate_errors_say_what_to_type(daemon, tmp_path):
    b, p = daemon.client, daemon.port
    r = cli(p, "duplicate", "UpdateTTL()", "--workers", "5")
    assert r.returncode == 1, r.stdout
    assert "no worker 5" in r.stderr and "'bessemer add worker WID CORE'" in r.stderr
    assert "bess.add_worker" not in r.stderr
    b.add_worker(0, 0)
    b.add_worker(1, 1 % (os.cpu_count() or 1))
    b.create_port("UnixSocketPort", "u", {"path": str(tmp_path / "u.sock")})
    r = cli(p, "duplicate", "UpdateTTL()", "--workers", "0,1", "--port", "u")
    assert r.returncode == 1, r.stdout
    assert "port 'u' has 1 incoming queue(s)" in r.stderr and "'bessemer add port" in r.stderr
    assert "'num_inc_q': 2, 'num_out_q': 2" in r.stderr
    # A template naming something that does not exist: an error, not a traceback.
    r = cli(p, "duplicate", "nosuch -> Sink()", "--workers", "0")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "template: NameError" in r.stderr and "nosuch" in r.stderr
    assert [m.name for m in b.list_modules()] == []


def test_measure_percentiles_are_labelled(daemon):
    b, p = daemon.client, daemon.port
    for mclass, name in (("Source", "src"), ("Timestamp", "ts"), ("Measure", "m")):
        b.create_module(mclass, name)
    b.create_module("Sink", "sink")
    b.connect_modules("src", "ts")
    b.connect_modules("ts", "m")
    b.connect_modules("m", "sink")
    b.resume_all()
    deadline = time.monotonic() + 10
    while ogate_packets(b, "m") < 1000 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.pause_all()
    arg = {"latency_percentiles": [50, 99, 99.9], "jitter_percentiles": [90]}
    want = b.run_module_command("m", "get_summary", "MeasureCommandGetSummaryArg", arg)
    assert want.latency.count > 0
    r = cli(p, "command", "module", "m", "get_summary", "MeasureCommandGetSummaryArg", repr(arg))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()

    def percentiles(section: str) -> list[str]:
        at = lines.index(f"{section}:")
        at = lines.index("  percentile_values_ns:", at)
        out = []
        for line in lines[at + 1 :]:
            if not line.startswith("    "):
                break
            out.append(line.strip())
        return out

    assert percentiles("latency") == [
        f"{q}: {v}"
        for q, v in zip(("p50", "p99", "p99.9"), want.latency.percentile_values_ns, strict=True)
    ]
    assert percentiles("jitter") == [f"p90: {want.jitter.percentile_values_ns[0]}"]


def test_shell_completes_classes_options_and_files(daemon, tmp_path, monkeypatch):
    import readline

    from bessemer import cli as cli_module
    from bessemer.shell import Shell

    b = daemon.client
    session = cli_module.Session("localhost", daemon.port)
    try:
        sh = Shell(session, cli_module._parser, cli_module.execute)
        assert sh.matches("add mod") == ["module "]
        assert sh.matches("add module ") == sorted(c + " " for c in b.list_mclasses())
        assert sh.matches("add module Sou") == ["Source "]
        b.create_module("Queue", "q")
        assert sh.matches("command module ") == ["q "]
        assert "get_status " in sh.matches("command module q ")
        assert sh.matches("command module q get_status ") == ["QueueCommandGetStatusArg "]
        assert sh.matches("add port ") == sorted(d + " " for d in b.list_drivers())
        # Option names, and an option's choices.
        assert sh.matches("monitor pipeline --") == [
            "--help ",
            "--interval ",
            "--no-bits ",
            "--seconds ",
        ]
        assert sh.matches("show errors --sort r") == ["rate ", "reason "]
        assert sh.matches("tcpdump q ") == ["in ", "out "]
        # File names after run (and for options that take a file); a folder ends in '/'.
        files = tmp_path / "files"
        (files / "sub").mkdir(parents=True)
        (files / "one.bess").write_text("Sink()\n")
        assert sh.matches(f"run {files}/") == [f"{files}/one.bess ", f"{files}/sub/"]
        assert sh.matches(f"run {files}/o") == [f"{files}/one.bess "]
        assert sh.matches(f"show pipeline --dot {files}/s") == [f"{files}/sub/"]
        assert sh.matches(f"run {files}/one.bess ") == []
        assert sh.matches('run "unclosed') == []
        # readline's entry point, as readline calls it.
        line = "add module Sou"
        monkeypatch.setattr(readline, "get_line_buffer", lambda: line)
        monkeypatch.setattr(readline, "get_endidx", lambda: len(line))
        assert sh.complete("Sou", 0) == "Source " and sh.complete("Sou", 1) is None
    finally:
        session.close()

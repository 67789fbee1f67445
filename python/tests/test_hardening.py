"""Resource limits at the control plane: a client cannot flood the daemon's log with refused
requests, a control port reachable beyond this host is called out at start, allocations
past a bound get an error naming it, and a flood of requests neither starves the workers
nor grows memory; and transactions (splices drop nothing, a failed one changes nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, running_daemon


def test_refused_requests_flood_is_summarised_not_logged_one_by_one(tmp_path):
    with running_daemon(tmp_path) as d:
        start = time.monotonic()
        for _ in range(500):
            try:
                d.client.destroy_module("no_such_module")
            except d.client.Error as exc:
                assert exc.code == 2
        took = time.monotonic() - start
        # One more refusal in a later second makes the daemon summarise the last window.
        time.sleep(1.1)
        try:
            d.client.destroy_module("no_such_module")
        except d.client.Error:
            pass
        d.client.get_version()  # the daemon still answers
    log = d.log.read_text()
    logged = log.count("no_such_module")
    seconds = int(took) + 2
    assert 0 < logged <= 20 * seconds + 1, f"{logged} refusals logged in {took:.1f} s"
    # The first line of a later second says how many were held back.
    assert re.search(r"held_back=[1-9]", log), log[-2000:]


def test_a_control_port_beyond_loopback_is_warned_about(tmp_path):
    with running_daemon(tmp_path, "--bind", "0.0.0.0", "--insecure-remote") as d:
        d.client.get_version()
    assert "no authentication" in d.log.read_text()
    with running_daemon(tmp_path) as d:
        d.client.get_version()
    assert "no authentication" not in d.log.read_text()


def _drops(b) -> dict:
    return {(m.name, d.reason): d.count for m in b.show_errors().modules for d in m.drops}


def test_splices_in_transactions_drop_nothing_under_traffic(bess):
    bess.create_module("Source", "src", {"pkt_size": 60})
    bess.create_module("Sink", "sink")
    bess.connect_modules("src", "sink")
    bess.resume_all()
    for i in range(40):
        # Splice bp<i> in between src and sink, then out again, under traffic.
        with bess.transaction() as tx:
            bess.create_module("Bypass", f"bp{i}")
            bess.disconnect_modules("src", 0)
            bess.connect_modules("src", f"bp{i}")
            bess.connect_modules(f"bp{i}", "sink")
        assert tx.results[0].name == f"bp{i}"
        with bess.transaction():
            bess.disconnect_modules("src", 0)
            bess.destroy_module(f"bp{i}")
            bess.connect_modules("src", "sink")
    # The last connection is new (its counters start at 0): wait for it to carry packets.
    deadline = time.monotonic() + 10
    while bess.get_module_info("sink").igates[0].pkts == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    bess.pause_all()
    assert _drops(bess) == {}, "packets were dropped during the splices"
    assert [m.name for m in bess.list_modules()] == ["src", "sink"]
    info = bess.get_module_info("sink")
    assert info.igates[0].pkts > 0


def test_a_failed_transaction_changes_nothing_and_names_the_change(bess):
    bess.create_module("Source", "src", {"pkt_size": 60})
    bess.create_module("Bypass", "bp")
    bess.create_module("Sink", "sink")
    bess.connect_modules("src", "bp")
    bess.connect_modules("bp", "sink")
    em_field = {"offset": 30, "num_bytes": 4}
    with pytest.raises(bess.Error) as exc:
        with bess.transaction():
            bess.create_module("ExactMatch", "em", {"fields": [em_field]})
            bess.disconnect_modules("bp", 0)
            bess.connect_modules("bp", "em")
            bess.destroy_module("sink")
            bess.connect_modules("em", "missing")
    assert exc.value.code == 2
    assert "change 5" in exc.value.errmsg and "missing" in exc.value.errmsg
    assert [m.name for m in bess.list_modules()] == ["src", "bp", "sink"]
    assert [(o.ogate, o.name) for o in bess.get_module_info("bp").ogates] == [(0, "sink")]
    # A command to a module created in the same transaction, and its result.
    with bess.transaction() as tx:
        bess.create_module("ExactMatch", "em", {"fields": [em_field]})
        bess.run_module_command(
            "em",
            "add",
            "ExactMatchCommandAddArg",
            {"gate": 0, "fields": [{"value_bin": b"\x0a\x00\x00\x01"}]},
        )
        bess.run_module_command("em", "get_runtime_config", "EmptyArg")
    assert len(tx.results) == 3 and tx.results[2].data.type_url.endswith("ExactMatchConfig")
    # Names are required inside, and transactions do not nest.
    with pytest.raises(bess.Error, match="give each new module a name"):
        with bess.transaction():
            bess.create_module("Bypass")
    with pytest.raises(bess.Error, match="already open"):
        with bess.transaction():
            with bess.transaction():
                pass


def test_cli_splice_and_unsplice_rewire_a_live_path(daemon):
    from bessemer import cli

    b = daemon.client
    b.create_module("Source", "src", {"pkt_size": 60})
    b.create_module("Sink", "sink")
    b.connect_modules("src", "sink")
    b.resume_all()
    port = ["--port", str(daemon.port)]
    for _ in range(10):
        assert cli.main([*port, "splice", "src", "0", "bp", "Bypass"]) == 0
        assert [(o.ogate, o.name) for o in b.get_module_info("src").ogates] == [(0, "bp")]
        assert [(o.ogate, o.name) for o in b.get_module_info("bp").ogates] == [(0, "sink")]
        assert cli.main([*port, "unsplice", "bp"]) == 0
        assert [m.name for m in b.list_modules()] == ["src", "sink"]
    b.pause_all()
    assert _drops(b) == {}
    assert cli.main([*port, "splice", "sink", "0", "x", "Bypass"]) == 1
    assert cli.main([*port, "unsplice", "src"]) == 1


def test_allocation_limits_answer_an_error_naming_the_limit(bess):
    # A table capacity beyond the class's bound.
    with pytest.raises(bess.Error) as exc:
        bess.create_module(
            "ExactMatch", "em", {"fields": [{"offset": 26, "num_bytes": 4}], "entries": 1 << 23}
        )
    assert exc.value.code == 22 and "entries" in exc.value.errmsg
    assert "4194304" in exc.value.errmsg
    # A full table names its capacity.
    bess.create_module(
        "ExactMatch", "em", {"fields": [{"offset": 26, "num_bytes": 4}], "entries": 1}
    )
    add = "ExactMatchCommandAddArg"
    bess.run_module_command("em", "add", add, {"gate": 0, "fields": [{"value_bin": b"\0\0\0\1"}]})
    with pytest.raises(bess.Error) as exc:
        bess.run_module_command(
            "em", "add", add, {"gate": 0, "fields": [{"value_bin": b"\0\0\0\2"}]}
        )
    assert exc.value.code == 28 and "table is full (1 entries" in exc.value.errmsg
    # More modules than the daemon holds, in one transaction: refused whole, ENOMEM.
    with pytest.raises(bess.Error) as exc:
        with bess.transaction():
            for i in range(65_537):
                bess.create_module("Bypass", f"b{i}")
    assert exc.value.code == 12 and "at most 65536 modules" in exc.value.errmsg
    assert [m.name for m in bess.list_modules()] == ["em"]
    # A queue larger than its bound.
    with pytest.raises(bess.Error) as exc:
        bess.create_module("Queue", "q", {"size": 1 << 21})
    assert exc.value.code == 22 and "1048576" in exc.value.errmsg


# Sends cheap and refused requests as fast as it can for SECS seconds over its own channel;
# prints how many it sent.
FLOODER = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from bessemer.client import BESS
b = BESS(port=int(sys.argv[1]), timeout=10)
n, end = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for call in (b.get_version, b.list_modules, lambda: b.get_module_info("sink")):
        call()
        n += 1
    try:
        b.destroy_module("no_such_module")
    except BESS.Error:
        pass
    n += 1
print(n)
"""


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_a_request_flood_neither_starves_the_workers_nor_grows_memory(daemon):
    """Four clients flood the daemon with requests for 4 s while a worker forwards
    Source -> Sink: the sink keeps receiving during the flood, every client's requests were
    answered, and the daemon's RSS grew by less than 32 MiB."""
    b = daemon.client
    b.create_module("Source", "src", {"pkt_size": 60})
    b.create_module("Sink", "sink")
    b.connect_modules("src", "sink")
    b.resume_all()
    time.sleep(0.5)
    rss_before = _rss(daemon.proc.pid)
    secs = 4
    clients = [
        subprocess.Popen(
            [sys.executable, "-c", FLOODER, str(daemon.port), str(secs), str(ROOT / "python")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        time.sleep(1)
        counts = []
        for _ in range(2):  # packets forwarded in two windows inside the flood
            start = b.get_module_info("sink").igates[0].pkts
            time.sleep(1)
            counts.append(b.get_module_info("sink").igates[0].pkts - start)
        sent = []
        for c in clients:
            out, err = c.communicate(timeout=secs + 30)
            assert c.returncode == 0, err
            sent.append(int(out.split()[-1]))
    finally:
        for c in clients:
            c.kill()
            c.wait()
    rss_after = _rss(daemon.proc.pid)
    rate = sum(sent) / secs
    print(f"\nflood: {sum(sent)} requests in {secs} s from 4 clients ({rate:.0f}/s)")
    print(
        f"sink packets a second during it: {counts}; "
        f"RSS {rss_before >> 20} -> {rss_after >> 20} MiB"
    )
    assert all(n > 0 for n in sent)
    assert all(c > 0 for c in counts), f"the worker stalled during the flood: {counts}"
    assert rss_after - rss_before < 32 << 20
    assert b.get_version()

"""Running .bess scripts against a real bessemerd (the `bess` fixture of test_client)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bessemer.script import ScriptError, run_script

from .conftest import ROOT
from .conftest import ogate_packets as _ogate_packets


def test_sample_script_builds_and_runs_the_pipeline(bess):
    scope = run_script(ROOT / "conf" / "source_queue_sink.bess", bess, {"SIZE": "128"})
    assert repr(scope["q"]) == "<Queue q>"
    assert {m.name: m.mclass for m in bess.list_modules()} == {
        "src": "Source",
        "q": "Queue",
        "sink0": "Sink",
    }
    deadline = time.monotonic() + 10
    while _ogate_packets(bess, "q") < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ogate_packets(bess, "q") >= 100
    assert scope["src"].set_pkt_size(pkt_size=64).ByteSize() == 0


def test_errors_point_at_the_script_line(bess, tmp_path):
    bad = tmp_path / "bad.bess"
    bad.write_text("a::Source()\nb::Sink()\n\na:7 -> b\n")
    with pytest.raises(ScriptError) as e:
        run_script(bad, bess)
    assert str(e.value).startswith(f"{bad}:4:") and "out of range" in str(e.value)
    bad.write_text("x::Sink()\nx.explode()\n")
    with pytest.raises(ScriptError, match=r":2: AttributeError: Sink 'x' has no command 'explode'"):
        run_script(bad, bess)
    # The failed scripts left what they built running (worker 0 runs a's task), not paused.
    workers = bess.list_workers()
    assert workers and all(w.running for w in workers)
    bad.write_text("y = $UNSET_VAR_FOR_TEST\n")
    with pytest.raises(ScriptError, match="UNSET_VAR_FOR_TEST"):
        run_script(bad, bess)


def test_cli_run_reports_a_missing_daemon(tmp_path):
    script = Path(tmp_path / "s.bess")
    script.write_text("Sink()\n")
    r = subprocess.run(
        [sys.executable, "-m", "bessemer.cli", "--port", "1", "run", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "cannot talk to the daemon" in r.stderr


def test_traffic_classes_from_a_script_limit_the_rate(bess):
    run_script(ROOT / "conf" / "rate_limit.bess", bess, {"PPS": "2000"})
    classes = {getattr(c, "class").name: c for c in bess.list_tcs()}
    assert {"limited", "fair"} <= set(classes)
    assert classes["!leaf_slow:0"].parent == "limited"
    # (Before attach_task moved it, the source ran unlimited: count from now on.)
    s0, f0 = _ogate_packets(bess, "slow"), _ogate_packets(bess, "fast")
    time.sleep(1.0)
    slow = _ogate_packets(bess, "slow") - s0
    fast = _ogate_packets(bess, "fast") - f0
    # About 2000 packets in about a second, far below the best-effort source.
    assert 0 < slow < 20_000 < fast

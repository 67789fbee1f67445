"""Every sample script in conf/ runs unchanged against a real daemon and moves packets."""

from __future__ import annotations

import re
import time

import pytest

from bessemer.script import run_script

from .conftest import ROOT

SCRIPTS = sorted((ROOT / "conf").rglob("*.bess"))


def _packets_out(bess) -> int:
    total = 0
    for m in bess.list_modules():
        total += sum(og.pkts for og in bess.get_module_info(m.name).ogates)
    return total


def test_there_are_sample_scripts():
    assert len(SCRIPTS) >= 2


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(s.relative_to(ROOT)) for s in SCRIPTS])
def test_sample_script_runs_and_moves_packets(bess, script):
    # A sample that only moves packets with another process attached says so on a line
    # "# needs a peer: ..." and is driven with that peer by its own test.
    peer = re.search(r"^# needs a peer: (.*)$", script.read_text(), re.M)
    if peer:
        pytest.skip(f"needs a peer ({peer.group(1)})")
    run_script(script, bess)
    assert bess.list_modules(), "the script created no module"
    assert any(w.running for w in bess.list_workers())
    deadline = time.monotonic() + 10
    while _packets_out(bess) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _packets_out(bess) > 0, "no packet left any module"
    assert bess.check_scheduling_constraints().modules == []
    _shows_declared_drop_reasons(bess)


CORE_REASONS = ["deadend", "unhandled", "hop_limit"]


def _shows_declared_drop_reasons(bess) -> None:
    """ShowErrors (zero rows included) lists for every module exactly the reasons its class
    declares (its help) and the core's: with the samples covering every class, every class's
    reasons are shown."""
    errors = bess.show_errors(include_zero=True)
    shown = {m.name: [d.reason for d in m.drops] for m in errors.modules}
    for m in bess.list_modules():
        found = re.search(r"drop reasons: (.*)", bess.get_mclass_info(m.mclass).help)
        declared = found.group(1).split(", ") if found else []
        assert shown[m.name] == declared + CORE_REASONS, m.mclass
        info = {d.reason: d.count for d in bess.get_module_info(m.name).drops}
        assert list(info) == shown[m.name], m.name


def test_the_samples_use_every_module_class(bess):
    """Each class the daemon has is built by at least one script in conf/ (so the test above
    runs it); a new class without a sample fails here."""
    text = "\n".join(s.read_text() for s in SCRIPTS)
    missing = [c for c in bess.list_mclasses() if f"{c}(" not in text]
    assert missing == [], f"no script in conf/ creates {missing}"

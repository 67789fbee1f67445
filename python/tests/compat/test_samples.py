"""The sample scripts in conf/samples/ (written after the features BESS's shipped samples and
samples/tc/ scripts exercise) run to the end and move packets, both through Bessemer's CLI
(`bessemer run`) and through a bessctl-like runner on the pybess shim."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ..conftest import ROOT
from .conftest import tcs_by_name
from .pybess_shim import BESS
from .shim_runner import run_file

SAMPLES = sorted((ROOT / "conf" / "samples").glob("*.bess"))
IDS = [s.stem for s in SAMPLES]


def _total_pkts(b: BESS) -> int:
    return sum(og.pkts for m in b.list_modules().modules for og in b.get_module_info(m.name).ogates)


def _check_running(b: BESS, sample) -> None:
    workers = b.list_workers().workers_status
    assert workers and any(w.running for w in workers), "no worker runs"
    before = _total_pkts(b)
    deadline = time.monotonic() + 10
    while _total_pkts(b) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _total_pkts(b) > before, "the gate counters do not grow"
    r = b.check_scheduling_constraints()
    assert not r.fatal and list(r.modules) == []
    EXPECT.get(sample.stem, lambda b: None)(b)


def _tc_tree(b: BESS) -> None:
    tcs = tcs_by_name(b)
    assert tcs["capped"].parent == "top" and tcs["fair"].parent == "others"
    assert tcs["!leaf_big:0"].parent == "fair"
    assert getattr(tcs["!leaf_big:0"], "class").share == 3


def _two_workers(b: BESS) -> None:
    tcs = tcs_by_name(b)
    assert getattr(tcs["!leaf_a:0"], "class").wid == 0
    assert getattr(tcs["!leaf_b:0"], "class").wid == 1
    assert tcs["!leaf_q:0"].parent == "drain"


def _no_worker(b: BESS) -> None:
    assert [w.wid for w in b.list_workers().workers_status] == [0]
    assert tcs_by_name(b)["!leaf_a:0"].parent == "slow"


def _rate_limits(b: BESS) -> None:
    rl = getattr(tcs_by_name(b)["by_packet"], "class")
    assert dict(rl.max_burst) == {"packet": 64}


EXPECT = {
    "tc_tree": _tc_tree,
    "two_workers": _two_workers,
    "no_worker": _no_worker,
    "rate_limits": _rate_limits,
}


def test_there_are_samples_for_the_main_features():
    text = "\n".join(s.read_text() for s in SAMPLES)
    for idiom in (
        "$",  # $VAR!'default'
        "::",  # name::Class(...)
        ":1 -> 1:",  # gates on both sides
        "policy='priority'",
        "policy='weighted_fair'",
        "policy='round_robin'",
        "policy='rate_limit'",
        "max_burst=",
        "bess.add_worker(",
        "attach_task(wid=",
        "wid=1",
        "update_tc_params",
    ):
        assert idiom in text, idiom


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_sample_runs_with_bessemer_cli(daemon, pybess, sample):
    r = subprocess.run(
        [sys.executable, "-m", "bessemer.cli", "--port", str(daemon.port), "run", str(sample)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    _check_running(pybess, sample)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_sample_runs_with_pybess_runner(pybess, sample):
    run_file(sample, pybess)
    _check_running(pybess, sample)

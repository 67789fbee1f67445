"""Names, worker 0 on demand, orphan tasks, thread-safety checks and cores, as BESS
(`core/bessctl.cc`, `core/worker.cc`) does them, driven through pybess's requests."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from .conftest import ogate_pkts, tcs_by_name, wait_pkts
from .pybess_shim import BESS

# --- 1. names --------------------------------------------------------------------------


def test_any_non_empty_module_name_is_accepted(pybess):
    """BESS only requires a module name to be non-empty and unused."""
    for name in ("my-mod.1", "soc_3_2026-11-24-10-00", "1starts-with-digit", "a:b/c"):
        assert pybess.create_module("Sink", name).name == name
    assert {m.name for m in pybess.list_modules().modules} >= {"my-mod.1", "a:b/c"}
    assert pybess.get_module_info("my-mod.1").mclass == "Sink"


def test_empty_module_name_is_generated_and_duplicates_are_eexist(pybess):
    first = pybess.create_module("Sink").name
    second = pybess.create_module("Sink").name
    assert first and second and first != second
    pybess.create_module("Sink", "dup")
    with pytest.raises(BESS.Error) as e:
        pybess.create_module("Sink", "dup")
    assert e.value.code == errno.EEXIST


def test_any_non_empty_port_name_is_accepted(pybess, tmp_path):
    """A port named like the UPF names its sockets (`soc_<n>_<date>`)."""
    name = "soc_3_2026-11-24-10-00"
    path = str(tmp_path / "s")
    r = pybess.create_port("UnixSocketPort", name, {"path": path})
    assert r.name == name
    assert name in [p.name for p in pybess.list_ports().ports]
    with pytest.raises(BESS.Error) as e:
        pybess.create_port("UnixSocketPort", name, {"path": str(tmp_path / "t")})
    assert e.value.code == errno.EEXIST
    auto = pybess.create_port("UnixSocketPort", "", {"path": str(tmp_path / "u")})
    assert auto.name and auto.name != name


def test_any_non_empty_tc_name_but_not_reserved_ones(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("tc-a.1:x", "round_robin", wid=0)
    assert "tc-a.1:x" in tcs_by_name(pybess)
    with pytest.raises(BESS.Error) as e:
        pybess.add_tc("!mine", "round_robin", wid=0)
    assert e.value.code == errno.EINVAL
    with pytest.raises(BESS.Error) as e:
        pybess.add_tc("", "round_robin", wid=0)
    assert e.value.code == errno.EINVAL
    # BESS answers a taken TC name with EINVAL ("Name '...' already exists").
    with pytest.raises(BESS.Error) as e:
        pybess.add_tc("tc-a.1:x", "round_robin", wid=0)
    assert e.value.code == errno.EINVAL


# --- 2. DisconnectModules --------------------------------------------------------------


def test_disconnecting_an_unconnected_gate_succeeds(pybess):
    pybess.create_module("Source", "src")
    pybess.create_module("Sink", "snk")
    pybess.disconnect_modules("src", 0)  # never connected: no error, as in BESS
    pybess.connect_modules("src", "snk")
    pybess.disconnect_modules("src", 0)
    pybess.disconnect_modules("src", 0)  # twice: still no error
    assert pybess.get_module_info("src").ogates == []


# --- 3. worker 0 on demand -------------------------------------------------------------


@pytest.mark.parametrize("wid", [-1, 0])
def test_add_tc_without_workers_starts_worker_0(pybess, wid):
    assert list(pybess.list_workers().workers_status) == []
    pybess.add_tc("rr", "round_robin", wid=wid)
    assert [w.wid for w in pybess.list_workers().workers_status] == [0]


@pytest.mark.parametrize("wid", [-1, 0])
def test_attach_task_without_workers_starts_worker_0(pybess, wid):
    pybess.create_module("Source", "src")
    pybess.create_module("Sink", "snk")
    pybess.connect_modules("src", "snk")
    pybess.attach_task("src", wid=wid)
    assert [w.wid for w in pybess.list_workers().workers_status] == [0]
    pybess.resume_all()
    assert wait_pkts(pybess, "src") > 0


def test_add_tc_on_a_missing_worker_is_einval(pybess):
    with pytest.raises(BESS.Error) as e:
        pybess.add_tc("t3", "round_robin", wid=3)
    assert e.value.code == errno.EINVAL


def test_a_script_without_add_worker_runs(pybess):
    pybess.pause_all()
    pybess.create_module("Source", "src")
    pybess.create_module("Sink", "snk")
    pybess.connect_modules("src", "snk")
    pybess.resume_all()
    assert wait_pkts(pybess, "src") > 0
    workers = pybess.list_workers().workers_status
    assert [w.wid for w in workers] == [0] and workers[0].running


# --- 4. orphan tasks -------------------------------------------------------------------


def _leaf_wid(b: BESS, module: str) -> int | None:
    c = tcs_by_name(b).get(f"!leaf_{module}:0")
    return None if c is None else getattr(c, "class").wid


def test_new_tasks_are_orphans_until_resume_all(pybess):
    pybess.add_worker(0, 0)
    pybess.add_worker(1, 1 % (os.cpu_count() or 1))
    pybess.create_module("Sink", "snk")
    for i in range(4):
        pybess.create_module("Source", f"src{i}")
        pybess.connect_modules(f"src{i}", "snk", 0, 0)
    time.sleep(0.3)
    # No worker runs the tasks yet: they are on no worker's tree.
    assert all(_leaf_wid(pybess, f"src{i}") not in (0, 1) for i in range(4))
    assert all(ogate_pkts(pybess, f"src{i}") == 0 for i in range(4))
    pybess.pause_all()
    pybess.resume_all()
    # attach_orphans gives each orphan the next active worker, round-robin.
    wids = [_leaf_wid(pybess, f"src{i}") for i in range(4)]
    assert sorted(wids) == [0, 0, 1, 1], wids
    assert all(wait_pkts(pybess, f"src{i}") > 0 for i in range(4))


def test_attach_task_to_worker_1(pybess):
    pybess.add_worker(0, 0)
    pybess.add_worker(1, 1 % (os.cpu_count() or 1))
    pybess.create_module("Source", "src")
    pybess.create_module("Sink", "snk")
    pybess.connect_modules("src", "snk")
    pybess.pause_all()
    pybess.attach_task("src", wid=1)
    pybess.resume_all()
    leaf = tcs_by_name(pybess, 1)["!leaf_src:0"]
    assert getattr(leaf, "class").wid == 1
    assert getattr(leaf, "class").policy == "leaf"
    assert "!leaf_src:0" not in tcs_by_name(pybess, 0)
    assert wait_pkts(pybess, "src") > 0


# --- 5. thread safety ------------------------------------------------------------------


def _two_sources_into(b: BESS, mclass: str, arg: dict | None = None) -> None:
    b.add_worker(0, 0)
    b.add_worker(1, 1 % (os.cpu_count() or 1))
    b.pause_all()
    b.create_module(mclass, "shared", arg)
    if mclass != "Sink":
        b.create_module("Sink", "snk")
        b.connect_modules("shared", "snk")
    for i in (0, 1):
        b.create_module("Source", f"src{i}")
        b.connect_modules(f"src{i}", "shared")
        b.attach_task(f"src{i}", wid=i)  # not refused, as in BESS


@pytest.mark.parametrize(
    "mclass,arg",
    [
        ("UrlFilter", None),
        ("RoundRobin", {"gates": [0]}),
        # BESS's test_nat_negative: the fork's NAT allows two workers, StaticNAT one.
        ("StaticNAT", None),
    ],
)
def test_single_worker_class_fed_by_two_workers_is_a_fatal_violation(pybess, mclass, arg):
    _two_sources_into(pybess, mclass, arg)
    r = pybess.check_scheduling_constraints()
    assert [m.name for m in r.modules] == ["shared"]
    assert r.fatal is True
    with pytest.raises(BESS.ConstraintError):
        pybess.resume_all()  # pybess checks first and raises on a fatal violation


@pytest.mark.parametrize(
    "mclass,arg",
    [
        ("Sink", None),
        ("Bypass", None),
        ("Merge", None),
        ("Measure", None),
        ("ExactMatch", {"fields": [{"offset": 26, "num_bytes": 4}]}),
        ("NAT", {"ext_addrs": [{"ext_addr": "192.0.2.1"}]}),  # two workers allowed
    ],
)
def test_classes_safe_on_every_worker_are_no_violation(pybess, mclass, arg):
    _two_sources_into(pybess, mclass, arg)
    r = pybess.check_scheduling_constraints()
    assert list(r.modules) == [] and not r.fatal
    assert pybess.resume_all() is False
    assert all(wait_pkts(pybess, f"src{i}") > 0 for i in (0, 1))


# --- 11. cores by their real ids -------------------------------------------------------


def _online_cpus() -> list[int]:
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def test_add_worker_takes_any_online_cpu_id(pybess):
    cpus = _online_cpus()
    for wid, cpu in enumerate(cpus[:8]):
        pybess.add_worker(wid, cpu)
    got = {w.wid: w.core for w in pybess.list_workers().workers_status}
    assert got == dict(enumerate(cpus[:8]))


def test_add_worker_on_a_missing_core_is_einval(pybess):
    missing = max(_online_cpus()) + 1
    for core in (missing, 100_000):
        with pytest.raises(BESS.Error) as e:
            pybess.add_worker(0, core)
        assert e.value.code == errno.EINVAL
    assert list(pybess.list_workers().workers_status) == []

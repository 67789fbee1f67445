"""Fixtures of the compatibility suite: a pybess-shaped client on a real bessemerd."""

from __future__ import annotations

import time

import pytest

from .pybess_shim import BESS


def connect(port: int, omec: bool = False) -> BESS:
    b = BESS(omec=omec)
    b.connect(f"localhost:{port}")
    return b


@pytest.fixture()
def pybess(daemon):
    """pybess's BESS class (the shim) connected to a fresh daemon."""
    b = connect(daemon.port)
    yield b
    b.disconnect()


@pytest.fixture()
def omec_pybess(daemon):
    """The same, with omec-project's argument messages (what the UPF's pybess sends)."""
    b = connect(daemon.port, omec=True)
    yield b
    b.disconnect()


def ogate_pkts(b: BESS, name: str, gate: int = 0) -> int:
    """Packets counted on output gate `gate` of `name` (GetModuleInfo ogates[].pkts)."""
    for og in b.get_module_info(name).ogates:
        if og.ogate == gate:
            return og.pkts
    return 0


def wait_pkts(b: BESS, name: str, gate: int = 0, at_least: int = 1, timeout: float = 10) -> int:
    """Waits until `name`'s output gate has counted `at_least` packets; returns the count."""
    deadline = time.monotonic() + timeout
    n = ogate_pkts(b, name, gate)
    while n < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
        n = ogate_pkts(b, name, gate)
    return n


def tcs_by_name(b: BESS, wid: int = -1) -> dict:
    """ListTcs's classes by name: name -> TrafficClassStatus."""
    return {getattr(c, "class").name: c for c in b.list_tcs(wid).classes_status}

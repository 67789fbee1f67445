"""The slice library's Python binding against a real bessemerd SlicePort."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from bessemer.slice import Slice, SliceError, library_path

from .conftest import ROOT


@pytest.fixture(scope="module", autouse=True)
def slice_library():
    """Builds libbessemer_slice.so if missing (as conftest builds the daemon)."""
    try:
        library_path()
    except SliceError:
        subprocess.run(
            ["cargo", "build", "-q", "-p", "bessemer-slice"], cwd=ROOT, check=True, timeout=900
        )


def _pipeline(b, path: str) -> None:
    b.create_port("SlicePort", "s0", {"path": path, "ring_size": 256})
    b.create_module("PortInc", "pi", {"port": "s0"})
    b.create_module("MACSwap", "sw")
    b.create_module("PortOut", "po", {"port": "s0"})
    b.connect_modules("pi", "sw")
    b.connect_modules("sw", "po")
    b.resume_all()


def test_python_app_round_trip_through_slice_port(daemon, tmp_path):
    """Frames sent from Python come back MAC-swapped; the port counts every one."""
    path = str(tmp_path / "s.sock")
    b = daemon.client
    _pipeline(b, path)
    frames = [bytes([1] * 6 + [2] * 6 + [0x08, 0x00]) + os.urandom(46 + i) for i in range(200)]
    got: list[bytes] = []
    with Slice.attach(path) as s:
        # The daemon marks the link up once it has handled the attach; under load that can
        # trail the application's side of the handshake by a moment (bounded: 5 s).
        deadline = time.monotonic() + 5
        while not b.get_link_status("s0").link_up and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.get_link_status("s0").link_up
        sent = 0
        deadline = time.monotonic() + 20
        while len(got) < len(frames) and time.monotonic() < deadline:
            if sent < len(frames):
                sent += s.send_batch(frames[sent : sent + 32])
            if s.wait(spin_us=50, timeout_ms=10):
                got += s.recv_batch()
        c = s.counters()
    assert got == [f[6:12] + f[0:6] + f[12:] for f in frames]
    assert c["rx_packets"] == c["tx_packets"] == 200
    deadline = time.monotonic() + 5
    while b.get_link_status("s0").link_up and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not b.get_link_status("s0").link_up
    st = b.get_port_stats("s0")
    assert st.inc.packets == 200 and st.out.packets == 200 and st.inc.dropped == 0


def test_python_frames_up_to_a_whole_frame_round_trip(daemon, tmp_path):
    """Frames longer than the room after the send headroom go from the frame's start."""
    path = str(tmp_path / "big.sock")
    b = daemon.client
    _pipeline(b, path)
    frames = [
        bytes([1] * 6 + [2] * 6 + [0x08, 0x00]) + os.urandom(n - 14) for n in (60, 3840, 4000, 4096)
    ]
    got: list[bytes] = []
    with Slice.attach(path) as s:
        assert s.frame_size == 4096
        sent = 0
        deadline = time.monotonic() + 20
        while len(got) < len(frames) and time.monotonic() < deadline:
            if sent < len(frames):
                sent += s.send_batch(frames[sent:])
            if s.wait(spin_us=50, timeout_ms=10):
                got += s.recv_batch()
    assert got == [f[6:12] + f[0:6] + f[12:] for f in frames]


def test_attach_to_a_missing_slice_names_the_path(tmp_path):
    path = str(tmp_path / "nothing.sock")
    with pytest.raises(SliceError, match="nothing.sock"):
        Slice.attach(path, timeout_ms=100)

"""Resource limits at the control plane: a client cannot flood the daemon's log with refused
requests, and a control port reachable beyond this host is called out at start."""

from __future__ import annotations

import time

from .conftest import running_daemon


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
    assert "refused requests not logged" in log


def test_a_control_port_beyond_loopback_is_warned_about(tmp_path):
    with running_daemon(tmp_path, "--bind", "0.0.0.0") as d:
        d.client.get_version()
    assert "no authentication" in d.log.read_text()
    with running_daemon(tmp_path) as d:
        d.client.get_version()
    assert "no authentication" not in d.log.read_text()

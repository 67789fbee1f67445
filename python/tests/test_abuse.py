"""What hostile or careless peers do to bessemerd's listeners, kept closed: connection floods
past the descriptor limit (control port and HTTP endpoints) with the dataplane forwarding
throughout and new clients served afterwards, silent and half-open (TLS) connections, hostile
names, and answers that must not wait for Nagle. Loopback only; seconds each."""

from __future__ import annotations

import re
import shutil
import socket
import statistics
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from bessemer.client import BESS

from .conftest import running_daemon

PRLIMIT = shutil.which("prlimit")


def _forwarded(b: BESS) -> int:
    return sum(g.pkts for g in b.get_module_info("sink").igates)


def _source_to_sink(b: BESS) -> None:
    b.create_module("Source", "src", {"pkt_size": 60})
    b.create_module("Sink", "sink", {})
    b.connect_modules("src", "sink")
    b.resume_all()


def _flood(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)
    return out


def _closed_by_peer(s: socket.socket, wait: float) -> bool:
    """True if the peer closed `s` (EOF or reset) within `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _log_lines(log: Path, text: str) -> int:
    return log.read_text(errors="replace").count(text)


@pytest.mark.skipif(PRLIMIT is None, reason="needs prlimit (util-linux)")
def test_a_connection_flood_past_the_descriptor_limit_never_stops_the_daemon(tmp_path):
    """256 descriptors: the control port takes 64 connections, each HTTP listener (metrics,
    web view) 32; 300 idle connections to each are refused beyond that, with the cause, while
    the pipeline keeps forwarding; once they close, new clients are served."""
    metrics, view = _free_port(), _free_port()
    with running_daemon(
        tmp_path,
        "--metrics",
        f"127.0.0.1:{metrics}",
        "--http",
        f"127.0.0.1:{view}",
        wrap=(PRLIMIT, "--nofile=256:256"),
    ) as d:
        b = d.client
        _source_to_sink(b)
        before = _forwarded(b)
        control = _flood(d.port, 300)
        http = _flood(metrics, 300) + _flood(view, 300)
        time.sleep(1)
        assert d.proc.poll() is None, "the daemon is running"
        # The client connected before the flood keeps its connection and its answers.
        during = _forwarded(b)
        assert during > before
        # Over the cap: a new gRPC client (its own connection) is told why. (The flood's
        # connections beyond the cap were closed after 2 s, so there is room to say it.)
        time.sleep(2)
        err = _fresh_get_version(d.port)
        assert "RESOURCE_EXHAUSTED" in err and "too many connections to the control port" in err, (
            err
        )
        # An HTTP client over the cap gets a 503 naming the cause.
        with socket.create_connection(("127.0.0.1", metrics), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            s.settimeout(5)
            head = s.recv(4096).decode(errors="replace")
        assert head.startswith("HTTP/1.1 503"), head
        assert "too many connections to the HTTP endpoints" in head
        for s in control + http:
            s.close()
        # Descriptors and slots come back: new clients are served, the dataplane never stopped.
        deadline = time.monotonic() + 10
        while (err := _fresh_get_version(d.port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert err == "", err
        assert _forwarded(b) > during
        page = _http_get(metrics, "/metrics")
        assert page.startswith("HTTP/1.1 200")
        refused = re.search(r"^bessemer_connections_refused_total (\d+)", page, re.M)
        assert refused and int(refused.group(1)) > 0, page[-2000:]
        assert _http_get(view, "/api/snapshot").startswith("HTTP/1.1 200")
        assert d.proc.poll() is None
        # The refusals are logged, rate-limited (about one line a second).
        assert 1 <= _log_lines(d.log, "refusing a connection") <= 20


def _fresh_get_version(port: int) -> str:
    """GetVersion over a connection of its own (gRPC shares connections between channels to
    the same address unless told not to); "" if served, else the error."""
    from bessemer import pb

    m = pb.load()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        m["service_grpc"].BESSControlStub(ch).GetVersion(m["bess_msg"].EmptyRequest(), timeout=5)
        return ""
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    finally:
        ch.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_get(port: int, path: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        s.settimeout(5)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode(errors="replace")


@pytest.mark.skipif(PRLIMIT is None, reason="needs prlimit (util-linux)")
def test_the_daemon_raises_its_own_descriptor_limit(tmp_path):
    with running_daemon(tmp_path, wrap=(PRLIMIT, "--nofile=1024:4096")) as d:
        text = d.log.read_text()
        assert re.search(r"nofile=4096\b", text), text
        assert re.search(r"control_max=512\b", text), text


def test_silent_connections_are_closed_and_the_daemon_serves_on(tmp_path):
    """Peers that connect and say nothing (to the control port and the HTTP endpoints) are
    closed after --handshake-timeout; a client that has spoken and idles is kept while it
    answers the daemon's keepalive pings."""
    metrics = _free_port()
    with running_daemon(
        tmp_path, "--handshake-timeout", "1", "--metrics", f"127.0.0.1:{metrics}"
    ) as d:
        silent = _flood(d.port, 20) + _flood(metrics, 20)
        t = time.monotonic()
        assert all(_closed_by_peer(s, 5) for s in silent)
        assert time.monotonic() - t < 8
        for s in silent:
            s.close()
        # The fixture's client connected before and answered pings: still served.
        assert d.client.get_version()
        assert d.proc.poll() is None


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_half_open_tls_handshakes_are_closed(tmp_path):
    """TLS + token control port: connections that stall in the handshake (nothing sent, or a
    partial ClientHello) are closed after --handshake-timeout; a real client is served."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    san = "subjectAltName=IP:127.0.0.1,DNS:localhost"
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
        "-keyout", "key.pem", "-out", "cert.pem", "-addext", san)  # fmt: skip
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    with running_daemon(
        tmp_path,
        "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem"),
        "--token-file", str(token), "--handshake-timeout", "1",
        client=lambda port: BESS(
            port=port, timeout=5, tls_ca=str(tmp_path / "cert.pem"),
            token="0123456789abcdef0123456789abcdef",
        ),
    ) as d:  # fmt: skip
        stalled = _flood(d.port, 30)
        # Half of them start a ClientHello record (type 22, TLS 1.0, 512 bytes) and stop.
        for s in stalled[::2]:
            s.sendall(bytes([22, 3, 1, 2, 0, 1, 0, 1, 252]) + b"\x03\x03")
        assert all(_closed_by_peer(s, 6) for s in stalled)
        for s in stalled:
            s.close()
        assert d.client.get_version()
        assert d.proc.poll() is None


def test_hostile_names_are_refused_and_never_forge_log_lines(daemon):
    b = daemon.client
    forged = "x\n2026-12-07T06:00:00.000000Z ERROR bessemer: forged line"
    for bad in (forged, "a\x1b[31mred", "tab\there"):
        with pytest.raises(BESS.Error) as e:
            b.create_module("Sink", bad, {})
        assert e.value.code == 22 and "control character" in e.value.errmsg, e.value.errmsg
    with pytest.raises(BESS.Error):
        b.destroy_port(forged)
    with pytest.raises(BESS.Error):
        b.create_port("UnixSocketPort", forged, {"path": "/nonexistent/x"})
    assert [m.name for m in b.list_modules()] == []
    lines = daemon.log.read_text().splitlines()
    assert not any(line.startswith("2026-12-07T06:00:00") for line in lines)
    assert "\x1b" not in daemon.log.read_text()
    assert any("\\n2026-12-07T06:00:00" in line for line in lines), "logged, escaped"


def test_large_answers_do_not_wait_for_nagle(daemon):
    """A ~6 KB answer used to wait ~40 ms for the client's delayed ACK (no TCP_NODELAY)."""
    b = daemon.client
    b.create_module("WildcardMatch", "wm", {"fields": [{"offset": 26, "num_bytes": 4}] * 8})
    for i in range(64):
        b.run_module_command(
            "wm", "add", "WildcardMatchCommandAddArg",
            {"gate": i, "priority": i,
             "values": [{"value_bin": bytes([i, 0, 0, 1])}] * 8,
             "masks": [{"value_bin": b"\xff\xff\xff\xff"}] * 8},
        )  # fmt: skip
    times = []
    for _ in range(15):
        t = time.perf_counter()
        r = b.run_module_command("wm", "get_runtime_config", "EmptyArg", {})
        times.append(time.perf_counter() - t)
        assert len(r.rules) == 64
    assert statistics.median(times) < 0.025, times

"""Control-plane security: a control port beyond loopback needs TLS and a credential (a
client certificate or a bearer token); a client in another network namespace is refused
without them and accepted with them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import ROOT, ROOT_ONLY, daemon_binary, free_port, sh

pytestmark = [
    ROOT_ONLY,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl"),
]


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _pki(d: Path, ip: str) -> None:
    """A CA, a server certificate for `ip` and a client certificate, all signed by the CA."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    for name, ext in (
        ("server", f"subjectAltName=IP:{ip}"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=d)  # fmt: skip


@pytest.fixture()
def netns_link():
    """A namespace joined to this one by a veth pair: (namespace, our address, its address)."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"bsec{tag}", f"vsh{tag}", f"vsn{tag}"
    octet = int(tag[:2], 16)
    here, there = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        assert sh("ip", "netns", "add", ns).returncode == 0
        assert (
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if).returncode == 0
        )
        assert sh("ip", "link", "set", ns_if, "netns", ns).returncode == 0
        sh("ip", "addr", "add", f"{here}/24", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", ns, "addr", "add", f"{there}/24", "dev", ns_if)
        sh("ip", "-n", ns, "link", "set", ns_if, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns, here, there
    finally:
        sh("ip", "link", "del", host_if)
        sh("ip", "netns", "del", ns)


def _start(tmp: Path, ip: str, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = tmp / f"d{port}.log"
    args = [str(daemon_binary()), "--bind", ip, "--port", str(port), "--no-hugepages"]
    args += ["--buffers", "1024", "--log-file", str(log), *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex((ip, port)) == 0:
                return proc, port
        time.sleep(0.1)
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _client(ns: str, ip: str, port: int, **kw) -> str:
    """Calls GetVersion from inside `ns`; returns 'ok <version>' or the error."""
    code = (
        "import sys; from bessemer.client import BESS\n"
        f"b = BESS({ip!r}, {port}, timeout=5, **{kw!r})\n"
        "try:\n    print('ok', b.get_version())\n"
        "except BESS.Error as e:\n    print('error', e.errmsg)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    return (r.stdout + r.stderr).strip()


def test_a_plain_control_port_beyond_loopback_is_refused_at_start(tmp_path, netns_link):
    _, here, _ = netns_link
    proc, _ = _start(tmp_path, here)
    assert proc.wait(timeout=30) == 1
    assert "without TLS and a credential" in proc.stderr.read()
    # Accepting the risk explicitly is possible, and warned about.
    proc, port = _start(tmp_path, here, "--insecure-remote")
    try:
        assert proc.poll() is None
    finally:
        _stop(proc)


def test_tls_with_a_token_admits_only_clients_that_present_it(tmp_path, netns_link):
    ns, here, _ = netns_link
    _pki(tmp_path, here)
    token = uuid.uuid4().hex + uuid.uuid4().hex
    (tmp_path / "token").write_text(token + "\n")
    proc, port = _start(
        tmp_path,
        here,
        "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key"),
        "--token-file", str(tmp_path / "token"),
    )  # fmt: skip
    try:
        assert proc.poll() is None, proc.stderr.read()
        ca = str(tmp_path / "ca.pem")
        assert _client(ns, here, port, tls_ca=ca, token=token).startswith("ok bessemer")
        out = _client(ns, here, port, tls_ca=ca)
        assert out.startswith("error") and "UNAUTHENTICATED" in out, out
        out = _client(ns, here, port, tls_ca=ca, token="x" * 64)
        assert out.startswith("error") and "UNAUTHENTICATED" in out, out
        # A plain (non-TLS) client gets nothing at all.
        assert _client(ns, here, port, token=token).startswith("error")
    finally:
        _stop(proc)


def test_tls_with_client_certificates_admits_only_certified_clients(tmp_path, netns_link):
    ns, here, _ = netns_link
    _pki(tmp_path, here)
    proc, port = _start(
        tmp_path,
        here,
        "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key"),
        "--tls-client-ca", str(tmp_path / "ca.pem"),
    )  # fmt: skip
    try:
        assert proc.poll() is None, proc.stderr.read()
        ca, cert, key = (str(tmp_path / f) for f in ("ca.pem", "client.pem", "client.key"))
        assert _client(ns, here, port, tls_ca=ca, cert=cert, key=key).startswith("ok")
        assert _client(ns, here, port, tls_ca=ca).startswith("error")
    finally:
        _stop(proc)


def test_a_short_token_is_refused(tmp_path):
    (tmp_path / "token").write_text("short\n")
    p = subprocess.run(
        [str(daemon_binary()), "--port", str(free_port()), "--no-hugepages",
         "--token-file", str(tmp_path / "token")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert p.returncode == 1 and "shorter than 16" in p.stderr


def _http_status(ns: str, url: str, token: str | None) -> str:
    code = (
        "import urllib.request, urllib.error\n"
        f"r = urllib.request.Request({url!r})\n"
        + (f"r.add_header('Authorization', 'Bearer {token}')\n" if token else "")
        + "try:\n    print(urllib.request.urlopen(r, timeout=5).status)\n"
        "except urllib.error.HTTPError as e:\n    print(e.code)\n"
    )
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return (r.stdout + r.stderr).strip()


def test_http_endpoints_beyond_loopback_need_the_token_too(tmp_path, netns_link):
    ns, here, there = netns_link
    token = uuid.uuid4().hex
    (tmp_path / "token").write_text(token + "\n")
    hport = free_port()
    proc, _ = _start(
        tmp_path,
        "127.0.0.1",
        "--http", f"0.0.0.0:{hport}", "--http-allow", f"{there}/32",
        "--token-file", str(tmp_path / "token"),
    )  # fmt: skip
    try:
        assert proc.poll() is None, proc.stderr.read()
        url = f"http://{here}:{hport}/api/snapshot"
        assert _http_status(ns, url, None) == "401"
        assert _http_status(ns, url, "y" * 32) == "401"
        assert _http_status(ns, url, token) == "200"
    finally:
        _stop(proc)


def test_refused_http_requests_cannot_flood_the_log(tmp_path, netns_link):
    """A peer that is not admitted and asks in a loop: every request gets its 403, the log
    gets about five lines a second with the number held back (it got one per request)."""
    ns, here, there = netns_link
    hport = free_port()
    proc, _ = _start(tmp_path, "127.0.0.1", "--metrics", f"0.0.0.0:{hport}")
    try:
        assert proc.poll() is None, proc.stderr.read()
        code = (
            "import http.client, sys\n"
            "codes = []\n"
            f"c = http.client.HTTPConnection({here!r}, {hport}, timeout=5)\n"
            "for _ in range(400):\n"
            "    c.request('GET', '/metrics')\n"
            "    r = c.getresponse(); r.read(); codes.append(r.status)\n"
            "print(sorted(set(codes)))\n"
        )
        t = time.monotonic()
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        took = time.monotonic() - t
        assert r.stdout.strip() == "[403]", r.stdout + r.stderr
        log = next(tmp_path.glob("d*.log")).read_text()
        lines = log.count("HTTP request refused")
        assert 1 <= lines <= 5 * (int(took) + 2), (lines, took)
        assert "held_back" in log
    finally:
        _stop(proc)

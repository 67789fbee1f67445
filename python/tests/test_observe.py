"""What an operator sees: `show errors`, drops in GetModuleInfo and `show module`, Prometheus
`/metrics` (checked by promtool, scraped by a real Prometheus), the live web view (in headless
Chromium), who may reach the HTTP endpoints, and progress of long CLI operations."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from scapy.all import ARP, IP, UDP, Ether, wrpcap

from bessemer import cli
from bessemer.script import run_script

from .conftest import ROOT, free_port, ogate_packets, running_daemon

CORE_REASONS = ["deadend", "unhandled", "hop_limit"]


def _cli(port: int, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--port", str(port), *argv])
    return code, out.getvalue(), err.getvalue()


def _until(pred, seconds: float = 20.0, step: float = 0.1):
    deadline = time.monotonic() + seconds
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


def _templates() -> dict[str, bytes]:
    pad = b"x" * 18
    return {
        "ttl1": bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", ttl=1) / UDP() / pad),
        "udp": bytes(Ether() / IP(src="10.0.0.1", dst="10.9.9.9") / UDP(dport=53) / pad),
        "arp": bytes(Ether() / ARP() / pad),
        "short": bytes(Ether())[:12],
        "bad_ihl": bytes(Ether() / IP(ihl=3) / UDP() / pad),
    }


# Each branch Source -> Rewrite(template) -> module -> Sink drops every packet under one
# named reason of the module's class.
BRANCHES = [
    ("ttl", "UpdateTTL", None, "ttl1", "ttl_expired"),
    ("lookup", "IPLookup", None, "udp", "no_match"),
    ("ttl_arp", "UpdateTTL", None, "arp", "not_ipv4"),
    ("cksum_short", "IPChecksum", {"verify": True}, "short", "too_short"),
    ("cksum_ihl", "IPChecksum", {"verify": True}, "bad_ihl", "bad_ip_header"),
    ("vxlan", "VXLANDecap", None, "arp", "not_vxlan"),
    ("em", "ExactMatch", {"fields": [{"offset": 30, "num_bytes": 4}]}, "udp", "no_match"),
    ("wm", "WildcardMatch", {"fields": [{"offset": 30, "num_bytes": 4}]}, "udp", "no_match"),
    ("l2", "L2Forward", None, "udp", "no_match"),
    ("split", "RandomSplit", {"drop_rate": 1.0, "gates": [0]}, "udp", "random_drop"),
    ("arp_resp", "ArpResponder", None, "udp", "not_arp"),
    ("ipswap", "IPSwap", None, "arp", "not_ipv4"),
    ("snat", "StaticNAT", None, "arp", "not_ipv4"),
    ("macswap", "MACSwap", None, "short", "too_short"),
    ("vlanpop", "VLANPop", None, "short", "too_short"),
    ("decap", "GenericDecap", {"bytes": 14}, "short", "too_short"),
]
EXPECTED = [(name, reason) for name, _, _, _, reason in BRANCHES] + [("dead", "deadend")]


def _dropping_pipeline(b) -> None:
    """One branch per entry of BRANCHES, and a Bypass whose output leads nowhere."""
    tmpl = _templates()
    for name, mclass, arg, t, _ in BRANCHES:
        b.create_module("Source", f"src_{name}", {"pkt_size": len(tmpl[t])})
        b.create_module("Rewrite", f"rw_{name}", {"templates": [tmpl[t]]})
        b.create_module(mclass, name, arg)
        b.create_module("Sink", f"sink_{name}")
        b.connect_modules(f"src_{name}", f"rw_{name}")
        b.connect_modules(f"rw_{name}", name)
        b.connect_modules(name, f"sink_{name}")
    b.create_module("Source", "src_dead", {"pkt_size": 60})
    b.create_module("Bypass", "dead")
    b.connect_modules("src_dead", "dead")
    b.resume_all()


def _rows(resp) -> dict[tuple[str, str], tuple[int, float]]:
    return {(m.name, d.reason): (d.count, d.rate) for m in resp.modules for d in m.drops}


def test_show_errors_names_each_reason_with_counts_and_rates(daemon):
    b = daemon.client
    _dropping_pipeline(b)
    # Rates come from the daemon's once-a-second sampler: two samples under traffic.
    rows = _until(
        lambda: (
            (r := _rows(b.show_errors())) and all(r.get(k, (0, 0.0))[1] > 0 for k in EXPECTED) and r
        ),
        seconds=15,
    )
    assert rows, f"no rate for every expected reason: {_rows(b.show_errors())}"
    assert set(rows) == set(EXPECTED), "only reasons that dropped are listed by default"

    b.pause_all()
    resp = b.show_errors()
    for name, reason in EXPECTED:
        info = {d.reason: d.count for d in b.get_module_info(name).drops}
        count = _rows(resp)[(name, reason)][0]
        # Same counter, read the same way, while nothing runs.
        assert info[reason] == count > 0
        # Every packet the module received was dropped under that one reason.
        upstream = "src_dead" if name == "dead" else f"rw_{name}"
        assert ogate_packets(b, upstream) == count
    assert b.get_module_info("dead").deadends == _rows(resp)[("dead", "deadend")][0]

    every = _rows(b.show_errors(include_zero=True))
    assert every[("ttl", "hop_limit")] == (0, 0.0)
    assert ("src_ttl", "pool_exhausted") in every
    only = b.show_errors(["ttl", "dead"])
    assert [m.name for m in only.modules] == ["ttl", "dead"]
    with pytest.raises(b.Error) as exc:
        b.show_errors(["nope"])
    assert exc.value.code == 2 and "nope" in exc.value.errmsg


def test_show_errors_and_show_module_in_the_cli(daemon):
    b = daemon.client
    _dropping_pipeline(b)
    assert _until(lambda: all(_rows(b.show_errors()).get(k) for k in EXPECTED))
    b.pause_all()
    code, out, _ = _cli(daemon.port, "show", "errors")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["module/port", "class", "reason", "packets", "per", "s"]
    body = [ln.split() for ln in lines[2:] if ln and not ln.startswith("total")]
    assert {(r[0], r[2]) for r in body} == set(EXPECTED)
    counts = [int(r[3]) for r in body]
    assert counts == sorted(counts, reverse=True), "default order: most drops first"
    assert f"total: {sum(counts):,}" in out.replace(",", ",")
    _, out, _ = _cli(daemon.port, "show", "errors", "--sort", "module")
    names = [ln.split()[0] for ln in out.splitlines()[2:] if ln and not ln.startswith("total")]
    assert names == sorted(names)
    _, out, _ = _cli(daemon.port, "show", "errors", "--all", "ttl")
    assert {ln.split()[2] for ln in out.splitlines()[2:-1]} == {
        "too_short",
        "not_ipv4",
        "bad_ip_header",
        "ttl_expired",
        *CORE_REASONS,
    }
    code, _, err = _cli(daemon.port, "show", "errors", "nope")
    assert code == 1 and "nope" in err
    _, out, _ = _cli(daemon.port, "show", "module", "ttl")
    expired = {d.reason: d.count for d in b.get_module_info("ttl").drops}["ttl_expired"]
    assert f"ttl_expired {expired:,}" in out


def _get(url: str, timeout: float = 5) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def _demo(b) -> None:
    run_script(ROOT / "conf" / "demo.bess", b)


def test_metrics_pass_promtool_and_a_real_prometheus_scrapes_them(tmp_path):
    for tool in ("promtool", "prometheus"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing (apt-get install -y prometheus)")
    mport = free_port()
    with running_daemon(tmp_path, "--metrics", f"127.0.0.1:{mport}") as d:
        _demo(d.client)
        assert _until(lambda: ogate_packets(d.client, "src") > 0)
        status, ctype, text = _get(f"http://127.0.0.1:{mport}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr
        documented = (ROOT / "docs" / "observability.md").read_text()
        for name in re.findall(r"^# TYPE (\w+)", text, re.M):
            assert f"`{name}`" in documented, f"{name} is not in docs/observability.md"
        for series in (
            'bessemer_gate_packets_total{igate="0",module="src",next="rewrite0",ogate="0"}',
            'bessemer_module_drops_total{class="Queue",module="queue0",reason="queue_full"}',
            'bessemer_worker_cpu_seconds_total{core="0",state="busy",worker="0"}',
            'bessemer_tc_packets_total{policy="leaf",tc="!leaf_src:0",worker="0"}',
            'bessemer_pool_buffers{state="free"}',
        ):
            assert series in text, series
        # Only /metrics is served on a metrics-only address.
        assert _get(f"http://127.0.0.1:{mport}/")[0] == 404

        pport = free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: bessemer\n    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]\n"
        )
        log = (tmp_path / "prometheus.log").open("w")
        prom = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{pport}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def query(q: str):
                url = f"http://127.0.0.1:{pport}/api/v1/query?query={urllib.request.quote(q)}"
                try:
                    status, _, body = _get(url, timeout=2)
                except OSError:
                    return None
                if status != 200:
                    return None
                return json.loads(body)["data"]["result"]

            up = _until(lambda: (r := query('up{job="bessemer"}')) and r[0]["value"][1] == "1", 40)
            assert up, (tmp_path / "prometheus.log").read_text()[-2000:]
            rate = _until(
                lambda: (
                    (r := query('rate(bessemer_gate_packets_total{module="src"}[5s])'))
                    and float(r[0]["value"][1]) > 0
                ),
                40,
            )
            assert rate, "Prometheus saw no packet rate"
            # Every query of the Grafana dashboard in docs/ is valid PromQL over our series.
            dash = json.loads((ROOT / "docs" / "grafana" / "bessemer-dashboard.json").read_text())
            for p in dash["panels"]:
                for t in p["targets"]:
                    expr = t["expr"].replace("$__rate_interval", "5s").replace("$instance", ".*")
                    for name in re.findall(r"bessemer_\w+", expr):
                        assert f"`{name}`" in documented, f"{p['title']}: no series {name}"
                    assert query(expr) is not None, f"{p['title']}: Prometheus refused {expr}"
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
            log.close()


def _local_ipv4() -> str | None:
    """A non-loopback IPv4 address of this host, if it has one."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else None


def test_http_endpoints_answer_loopback_only_unless_allowed(tmp_path):
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is missing (apt-get install -y iproute2)")
    ip = _local_ipv4()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address to connect from")
    port = free_port()
    with running_daemon(tmp_path, "--metrics", f"0.0.0.0:{port}", "--http", f"0.0.0.0:{port}"):
        # Connecting to our own global address makes it the peer's address too.
        status, _, body = _get(f"http://{ip}:{port}/metrics")
        assert status == 403 and ip in body and "--http-allow" in body
        assert _get(f"http://{ip}:{port}/api/snapshot")[0] == 403
        assert _get(f"http://127.0.0.1:{port}/metrics")[0] == 200
        assert _get(f"http://127.0.0.1:{port}/")[0] == 200
    port = free_port()
    with running_daemon(tmp_path, "--http", f"0.0.0.0:{port}", "--http-allow", f"{ip}/32"):
        status, _, body = _get(f"http://{ip}:{port}/api/snapshot")
        assert status == 200 and "modules" in json.loads(body)
        # The view alone: no /metrics on this address.
        assert _get(f"http://127.0.0.1:{port}/metrics")[0] == 404


def test_http_options_with_bad_values_are_refused(tmp_path):
    from .conftest import daemon_binary

    for args, needle in (
        (["--http-allow", "ten"], "'ten'"),
        (["--metrics", "localhost"], "--metrics"),
    ):
        p = subprocess.run(
            [str(daemon_binary()), "--port", str(free_port()), "--no-hugepages", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert p.returncode != 0 and needle in p.stderr, p.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        p = subprocess.run(
            [
                str(daemon_binary()),
                "--port",
                str(free_port()),
                "--no-hugepages",
                "--metrics",
                f"127.0.0.1:{taken}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert p.returncode == 1 and "address already in use" in p.stderr, p.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_web_view_draws_every_module_and_its_rates_change(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    port = free_port()
    with running_daemon(tmp_path, "--http", f"127.0.0.1:{port}") as d:
        _demo(d.client)
        names = sorted(m.name for m in d.client.list_modules())
        with sync_api.sync_playwright() as pw:
            br = pw.chromium.launch(executable_path=browser, args=["--no-sandbox"])
            try:
                page = br.new_page(viewport={"width": 1400, "height": 700})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector("g.module", timeout=15000)
                drawn = sorted(t.text_content() for t in page.query_selector_all("g.module .name"))
                assert drawn == names
                for n in names:
                    box = page.query_selector(f'g.module[data-name="{n}"]').bounding_box()
                    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 1400, n
                    assert box["y"] >= 0 and box["y"] + box["height"] <= 700, n

                def rate(edge: str) -> str:
                    return page.query_selector(f'text.rate[data-edge="{edge}"]').text_content()

                # The first frame has no earlier sample; later ones show the live rate.
                live = _until(lambda: not rate("src:0").startswith("0 "), 10)
                assert live, rate("src:0")
                assert re.fullmatch(r"[\d.]+ [kMG]?pps", rate("src:0"))
                first = page.screenshot(path=str(tmp_path / "view1.png"))
                d.client.pause_all()
                stopped = _until(lambda: rate("src:0") == "0 pps", 10)
                assert stopped, f"rate still {rate('src:0')} after traffic stopped"
                second = page.screenshot(path=str(tmp_path / "view2.png"))
                assert first != second, "the view did not change when traffic stopped"
                # A module's details show the argument it was created with.
                page.click('g.module[data-name="rr"]')
                page.wait_for_selector('pre.arg[data-arg="rr"]', timeout=5000)
                arg = json.loads(page.text_content('pre.arg[data-arg="rr"]'))
                assert arg == {"gates": [0, 1]}, arg
                assert page.text_content("#error") == ""
            finally:
                br.close()


def test_replay_shows_progress_and_removes_what_it_made(daemon, tmp_path, monkeypatch):
    pcap = tmp_path / "r.pcap"
    wrpcap(str(pcap), [Ether() / IP() / UDP() / (b"x" * 20)] * 3000)
    monkeypatch.setenv("BESSEMER_PROGRESS", "1")
    code, out, err = _cli(daemon.port, "replay", str(pcap), "--name", "rp")
    assert code == 0, err
    assert f"replayed 3,000/3,000 packets from {pcap}" in out
    assert re.search(r"replay r\.pcap: [\d,]+/3,000 packets \(\d+%\)", err), err
    assert "replay r.pcap: 3,000/3,000 packets (100%)" in err
    assert daemon.client.list_ports() == [] and daemon.client.list_modules() == []
    code, _, err = _cli(daemon.port, "replay", str(tmp_path / "missing.pcap"))
    assert code == 1 and "no such file" in err


def test_script_progress_counts_requests(daemon, tmp_path, monkeypatch):
    def table(name: str):
        script = tmp_path / f"{name}.bess"
        script.write_text(
            f"{name}::ExactMatch(fields=[{{'offset': 30, 'num_bytes': 4}}])\n"
            "for i in range(400):\n"
            f"    {name}.add(fields=[{{'value_bin': i.to_bytes(4, 'big')}}], gate=0)\n"
        )
        return script

    script = table("table")
    monkeypatch.setenv("BESSEMER_PROGRESS", "1")
    code, _, err = _cli(daemon.port, "run", str(script))
    assert code == 0, err
    counts = [int(n.replace(",", "")) for n in re.findall(r"table\.bess: ([\d,]+) requests", err)]
    assert counts and counts[-1] >= 400, err
    monkeypatch.setenv("BESSEMER_PROGRESS", "0")
    code, _, err = _cli(daemon.port, "run", str(table("quiet")))
    assert code == 0 and "requests" not in err, err


def test_show_errors_lists_port_drops_under_the_port(daemon, tmp_path):
    b = daemon.client
    path = str(tmp_path / "up.sock")
    b.create_port("UnixSocketPort", "up", {"path": path})
    b.create_module("PortInc", "up_in", {"port": "up"})
    b.create_module("Sink", "sink")
    b.connect_modules("up_in", "sink")
    b.resume_all()
    # Messages longer than a packet buffer: the port drops each on receipt (inc.dropped),
    # and no module ever sees them.
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    try:
        c.connect(path)
        for _ in range(10):
            c.send(b"x" * 20000)
        assert _until(lambda: b.get_port_stats("up").inc.dropped >= 10, 10)
    finally:
        c.close()
    b.pause_all()
    assert b.get_port_stats("up").inc.dropped == 10

    def rows(out: str) -> list[list[str]]:
        return [ln.split() for ln in out.splitlines()[2:] if ln and not ln.startswith("total")]

    code, out, err = _cli(daemon.port, "show", "errors")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["module/port", "class", "reason", "packets", "per", "s"]
    assert ["up", "UnixSocketPort", "rx_dropped", "10", "-"] in rows(out)
    assert out.rstrip().endswith("total: 10"), out
    code, out, _ = _cli(daemon.port, "show", "errors", "up")
    assert rows(out) == [["up", "UnixSocketPort", "rx_dropped", "10", "-"]]
    code, out, _ = _cli(daemon.port, "show", "errors", "--all", "--sort", "reason", "up")
    assert rows(out) == [
        ["up", "UnixSocketPort", "rx_dropped", "10", "-"],
        ["up", "UnixSocketPort", "tx_dropped", "0", "-"],
    ]
    code, _, err = _cli(daemon.port, "show", "errors", "up", "nope")
    assert code == 1 and "nope" in err


class _FastClock:
    """The `time` module as a busy client sees it: its monotonic clock runs `factor` times
    faster than the daemon's (its own stalls stretch every interval it measures)."""

    def __init__(self, factor: float):
        self.factor, self.start = factor, time.monotonic()

    def monotonic(self) -> float:
        return self.start + (time.monotonic() - self.start) * self.factor

    def __getattr__(self, name: str):
        return getattr(time, name)


def _number(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1], 1)
    return float(text.rstrip("kMG").replace(",", "")) * scale


def _last_frame_rows(out: str) -> dict[str, list[str]]:
    """The last frame of a monitor's output: its rows by first word."""
    frames = out.split("(Ctrl-C to stop)")
    assert len(frames) >= 3, out
    lines = frames[-1].strip().splitlines()[2:]
    return {ln.split()[0]: ln.split() for ln in lines if ln.strip()}


PPS = 20000


def test_monitor_rates_come_from_the_daemons_timestamps(daemon, tmp_path, monkeypatch):
    b = daemon.client
    # A Source held to PPS packets/s by a rate-limit class, sending into a port with no
    # client (every packet a tx drop): every rate below is about PPS, whatever the client.
    b.add_worker(0, 0)
    b.add_tc("lim", wid=0, policy="rate_limit", resource="packet", limit={"packet": PPS})
    b.create_port("UnixSocketPort", "u", {"path": str(tmp_path / "u.sock")})
    b.create_module("Source", "src", {"pkt_size": 100})
    b.create_module("PortOut", "out", {"port": "u"})
    b.connect_modules("src", "out")
    b.attach_task("src", parent="lim")
    b.resume_all()
    assert _until(lambda: b.get_port_stats("u").out.dropped > 0, 10)
    # The client's clock runs 20 times fast: an interval of 0.4 s looks like 8 s to it, so
    # a rate over the client's clock would be 20 times too low. (--seconds is paced by the
    # same clock: 24 s of it is 1.2 s.)
    monkeypatch.setattr(cli, "time", _FastClock(20))
    run = ("--interval", "0.4", "--seconds", "24")

    code, out, err = _cli(daemon.port, "monitor", "pipeline", *run)
    assert code == 0, err
    row = _last_frame_rows(out)["src:0"]
    assert row[:3] == ["src:0", "->", "0:out"]
    pps, bps = _number(row[3]), _number(row[4])
    assert PPS / 3 < pps < PPS * 3, out
    # bits/s is filled (a Track hook counts bytes while the monitor runs, then goes).
    assert bps == pytest.approx(pps * 100 * 8, rel=0.02), out
    assert b.list_gatehooks() == []

    code, out, err = _cli(daemon.port, "monitor", "tc", *run)
    assert code == 0, err
    rows = _last_frame_rows(out)
    # The class and its only task run the same packets: about PPS each.
    for name in ("lim", "!leaf_src:0"):
        assert PPS / 3 < _number(rows[name][3]) < PPS * 3, out

    code, out, err = _cli(daemon.port, "monitor", "port", *run)
    assert code == 0, err
    tx_drops = _number(_last_frame_rows(out)["u"][6])
    assert PPS / 3 < tx_drops < PPS * 3, out


def test_replay_progress_rate_comes_from_the_daemons_timestamps(daemon, tmp_path, monkeypatch):
    from bessemer import progress

    # 2,000 packets recorded 1 ms apart, replayed at their recorded times: 1,000 packets/s.
    frames = [Ether() / IP() / UDP() / (b"x" * 20) for _ in range(2000)]
    for i, f in enumerate(frames):
        f.time = 1_700_000_000 + i / 1000
    pcap = tmp_path / "timed.pcap"
    wrpcap(str(pcap), frames)
    monkeypatch.setenv("BESSEMER_PROGRESS", "1")
    # The client's clock runs 20 times fast (see _FastClock): a rate over it is 20 times low.
    clock = _FastClock(20)
    monkeypatch.setattr(cli, "time", clock)
    monkeypatch.setattr(progress, "time", clock)
    code, out, err = _cli(daemon.port, "replay", str(pcap), "--timing", "--idle", "60")
    assert code == 0, err
    assert "replayed 2,000/2,000 packets" in out
    rates = []
    for m in re.finditer(r"packets \((\d+)%\), ([\d.]+) (k?)/s", err):
        if 10 <= int(m.group(1)) < 100:  # under way: past the start, not yet done
            rates.append(float(m.group(2)) * (1000 if m.group(3) else 1))
    assert rates, err
    assert 1000 / 3 < rates[-1] < 1000 * 3, err


def test_health_and_readiness_endpoints_and_the_alert_rules(tmp_path):
    """/healthz and /readyz answer on the HTTP listeners; the build and process metrics are
    served; the alerting rules load and fire on the series they should (promtool)."""
    mport = free_port()
    with running_daemon(tmp_path, "--metrics", f"127.0.0.1:{mport}") as d:
        assert _get(f"http://127.0.0.1:{mport}/healthz")[::2] == (200, "ok\n")
        assert _get(f"http://127.0.0.1:{mport}/readyz")[::2] == (200, "ready\n")
        d.client.create_port("UnixSocketPort", "up", {"path": str(tmp_path / "u.sock")})
        _, _, text = _get(f"http://127.0.0.1:{mport}/metrics")
        assert re.search(r'^bessemer_build_info\{target="\w+",version="[\d.]+"\} 1$', text, re.M)
        assert re.search(
            r'^bessemer_port_link_up\{driver="UnixSocketPort",port="up"\} 0$', text, re.M
        )
        fds = int(re.search(r"^process_open_fds (\d+)", text, re.M).group(1))
        assert 5 < fds < int(re.search(r"^process_max_fds (\d+)", text, re.M).group(1))
        assert float(re.search(r"^process_resident_memory_bytes (\S+)", text, re.M).group(1)) > 1e6
    if shutil.which("promtool") is None:
        pytest.skip("promtool is missing (apt-get install -y prometheus)")
    rules = ROOT / "docs" / "grafana"
    for args in (
        ["check", "rules", "bessemer-alerts.yml"],
        ["test", "rules", "bessemer-alerts.test.yml"],
    ):
        r = subprocess.run(
            ["promtool", *args], cwd=rules, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stdout + r.stderr


def test_show_runtime_counts_a_pcap_file_exactly_and_clears(daemon, tmp_path):
    b = daemon.client
    n = 1000
    path = tmp_path / "in.pcap"
    wrpcap(str(path), [Ether() / IP(dst="10.0.0.2") / UDP(dport=53) for _ in range(n)])
    b.create_port("PcapFilePort", "file", {"rx_file": str(path)})
    b.create_module("PortInc", "pin", {"port": "file"})
    b.create_module("Bypass", "bp")
    b.create_module("Sink", "sink")
    b.connect_modules("pin", "bp")
    b.connect_modules("bp", "sink")
    b.resume_all()
    assert _until(lambda: ogate_packets(b, "bp") == n, 20), ogate_packets(b, "bp")
    b.pause_all()
    resp = b.show_runtime()
    assert resp.enabled and resp.tsc_hz > 0 and resp.seconds > 0
    rows = {m.name: m for m in resp.modules}
    assert [m.name for m in resp.modules] == ["pin", "bp", "sink"]
    pin, bp, sink = (rows[k].workers for k in ("pin", "bp", "sink"))
    assert [w.wid for w in pin] == [0] and [w.wid for w in bp] == [0]
    # PortInc's runs: every packet of the file, in at least ceil(n / 64) runs (and empty
    # polls after the file ended).
    assert pin[0].packets == n and pin[0].calls >= -(-n // 64)
    batches = next(g.cnt for g in b.get_module_info("pin").ogates if g.ogate == 0)
    for w in (bp[0], sink[0]):
        assert (w.calls, w.packets) == (batches, n)
        # The first run that brought packets was timed.
        assert w.sampled_calls >= 1 and w.sampled_packets >= 1 and w.sampled_cycles > 0
    assert rows["bp"].mclass == "Bypass" and rows["sink"].mclass == "Sink"

    code, out, err = _cli(daemon.port, "show", "runtime")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("time ") and "1 run in 512 timed" in lines[0]
    assert "worker 0" in lines
    header = lines[lines.index("worker 0") + 1].split()
    assert header == [
        "module",
        "class",
        "calls",
        "packets",
        "pkts/call",
        "cycles/pkt",
        "cycles/call",
        "sampled",
    ]
    table = {ln.split()[0]: ln.split() for ln in lines[lines.index("worker 0") + 3 :] if ln}
    assert table["bp"][:4] == ["bp", "Bypass", f"{batches:,}", f"{n:,}"]
    assert float(table["bp"][4]) == pytest.approx(n / batches, abs=0.01)
    assert float(table["bp"][5].replace(",", "")) > 0
    assert table["pin"][3] == f"{n:,}"
    code, out, _ = _cli(daemon.port, "show", "runtime", "bp")
    assert [ln.split()[0] for ln in out.splitlines()[5:] if ln] == ["bp"]
    code, _, err = _cli(daemon.port, "show", "runtime", "nope")
    assert code == 1 and "nope" in err

    # clear runtime: nothing ran since (paused); the gate counters other views read go on.
    code, _, err = _cli(daemon.port, "clear", "runtime")
    assert code == 0, err
    assert all(not m.workers for m in b.show_runtime().modules)
    assert ogate_packets(b, "bp") == n
    code, out, _ = _cli(daemon.port, "show", "runtime")
    assert out.splitlines()[-1] == "no module has run since"


def test_show_latency_prints_labelled_percentiles_a_histogram_and_exports_it(tmp_path):
    mport = free_port()
    with running_daemon(tmp_path, "--metrics", f"127.0.0.1:{mport}") as d:
        b = d.client
        b.create_module("Source", "src", {"pkt_size": 80})
        b.create_module("Timestamp", "ts")
        b.create_module("Measure", "m")
        b.create_module("Sink", "sink")
        b.connect_modules("src", "ts")
        b.connect_modules("ts", "m")
        b.connect_modules("m", "sink")
        b.resume_all()
        assert _until(lambda: ogate_packets(b, "m") > 10_000)
        b.pause_all()
        resp = b.show_latency("m")
        assert [h.name for h in resp.histograms] == ["latency", "jitter"]
        lat = resp.histograms[0]
        assert lat.count > 0 and sum(lat.counts) == lat.count
        assert len(lat.counts) == len(lat.bounds_ns) + 1
        assert list(lat.bounds_ns) == sorted(lat.bounds_ns) and lat.bounds_ns[0] == 100
        assert [p.percentile for p in lat.percentiles] == [50, 90, 99, 99.9]
        values = [p.value_ns for p in lat.percentiles]
        assert values == sorted(values) and values[-1] <= lat.max_ns
        assert lat.resolution_ns == 100
        # The summary BESS's get_summary gives agrees: same histogram, same percentiles.
        s = b.run_module_command(
            "m",
            "get_summary",
            "MeasureCommandGetSummaryArg",
            {"latency_percentiles": [50.0, 90.0, 99.0, 99.9]},
        )
        assert s.latency.count == lat.count
        assert list(s.latency.percentile_values_ns) == values

        code, out, err = _cli(d.port, "show", "latency", "m")
        assert code == 0, err
        first = out.splitlines()[0]
        assert first.startswith(f"latency of m (Measure): {lat.count:,} samples"), first
        labels = out.splitlines()[1].split()
        for k in ("p50", "p90", "p99", "p99.9", "max", "avg"):
            assert k in labels, labels
        bars = [ln for ln in out.splitlines() if " | " in ln]
        assert bars and any("#" in ln for ln in bars)
        assert bars[-1].rstrip().endswith("%)") and "(100.0%)" in out
        assert "jitter of m (Measure)" in out
        code, out, _ = _cli(d.port, "show", "latency", "src")
        assert code == 0 and out.strip() == "src keeps no histogram"
        code, _, err = _cli(d.port, "show", "latency", "nope")
        assert code == 1 and "nope" in err

        _, _, text = _get(f"http://127.0.0.1:{mport}/metrics")
        assert "# TYPE bessemer_module_latency_seconds histogram" in text
        assert (
            f'bessemer_module_latency_seconds_count{{class="Measure",module="m"}} {lat.count}'
            in text
        )
        assert (
            'bessemer_module_latency_seconds_bucket{class="Measure",module="m",le="+Inf"}' in text
        )
        assert (
            'bessemer_module_jitter_seconds_bucket{class="Measure",module="m",le="0.0000001"}'
            in text
        )
        documented = (ROOT / "docs" / "observability.md").read_text()
        for name in re.findall(r"^# TYPE (\w+)", text, re.M):
            assert f"`{name}`" in documented, f"{name} is not in docs/observability.md"
        if shutil.which("promtool"):
            check = subprocess.run(
                ["promtool", "check", "metrics"],
                input=text,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert check.returncode == 0, check.stdout + check.stderr

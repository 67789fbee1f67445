"""The web view with a real pipeline loaded: omec's UPF (`bessctl run up4` in sim mode, 67
modules, with pfcpiface's simulated sessions so that traffic crosses it), looked at by
headless Chromium at 1 280 x 800: screenshots, and the DOM (`--dump-dom`) with the page's own
self-check (`#selfcheck`: every module drawn or in a drawn group, the smallest box and name
text at fit-to-screen, tables cut off, what a search found). And FlowMeasure's histograms in
/metrics. The UPF tests need root (network and PID namespaces) and the peers that
scripts/omec-peers.sh builds; the Chromium ones need chromium; each skips with its reason.

Set BESSEMER_SCREENSHOTS=DIR to keep the screenshots there (docs/img's are made so)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bessemer.script import run_script

from .conftest import ROOT, free_port, ogate_packets, running_daemon

SIZE = (1280, 800)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browse(url: str, ns: str | None, screenshot: Path | None = None) -> str:
    """Headless Chromium at 1280x800 on `url` (in network namespace `ns`, if given): a
    screenshot into `screenshot`, else the DOM after the page has run for 5 s of virtual time
    (several snapshots, so rates are live)."""
    with tempfile.TemporaryDirectory(prefix="bessemer-chromium-") as profile:
        args = [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", f"--window-size={SIZE[0]},{SIZE[1]}",
            "--virtual-time-budget=5000",
        ]  # fmt: skip
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        prefix = ["ip", "netns", "exec", ns] if ns else []
        r = subprocess.run(
            [*prefix, *args, url], capture_output=True, text=True, timeout=120, check=False
        )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


class _Dom(HTMLParser):
    """The self-check's attributes and the drawn nodes (`g.node`) with theirs."""

    def __init__(self, text: str):
        super().__init__()
        self.check: dict[str, str] = {}
        self.nodes: list[dict[str, str]] = []
        self.hists: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if a.get("id") == "selfcheck":
            self.check = {k[5:]: v for k, v in a.items() if k.startswith("data-")}
        elif tag == "g" and "node" in a.get("class", "").split():
            self.nodes.append(a)
        elif tag == "svg" and "data-hist" in a:
            self.hists.append(a["data-hist"])


def _shoot(name: str, url: str, ns: str | None, tmp: Path) -> Path:
    path = tmp / name
    _browse(url, ns, path)
    assert path.exists() and _png_size(path) == SIZE, f"{path}: {_png_size(path)}"
    keep = os.environ.get("BESSEMER_SCREENSHOTS")
    if keep:
        shutil.copy(path, Path(keep) / name)
    return path


# ---- the UPF ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upf_view(tmp_path_factory):
    """omec's up4.bess in sim mode on a bessemerd serving the web view, with 300 simulated
    sessions so that both directions pass; yields (Upf, the view's URL, module names)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("needs root, iproute2 and unshare (network and PID namespaces)")
    if _chromium() is None:
        pytest.skip("chromium is missing (apt-get install -y chromium)")
    from .omec import peers, upf_host
    from .test_omec_upf import ACCESS_IP, CORE_IP, sim_conf

    try:
        cache = peers()
    except RuntimeError as e:
        pytest.skip(str(e))
    tmp = tmp_path_factory.mktemp("upfview")
    port = free_port()
    u = upf_host(
        cache, tmp, sim_conf(cache, tmp), ACCESS_IP, CORE_IP, extra=("--http", f"127.0.0.1:{port}")
    )
    try:
        r = u.bessctl("run", "up4")
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
        r = u.pfcpiface("-simulate", "create")
        assert r.returncode == 0, r.stdout + r.stderr
        names = sorted(u.probe("modules")["modules"])
        assert len(names) == 67
        time.sleep(1)
        yield u, f"http://127.0.0.1:{port}/", names
    finally:
        u.close()


def test_fit_to_screen_shows_all_67_modules_readably(upf_view, tmp_path):
    u, url, names = upf_view
    dom = _Dom(_browse(url, u.ns))
    c = dom.check
    assert c, "no #selfcheck in the page"
    # Every module is drawn, or inside a drawn (collapsed) group or folded into its module.
    assert int(c["modules"]) == 67 and int(c["represented"]) == 67, c
    drawn = sorted(m for n in dom.nodes for m in n["data-members"].split())
    assert drawn == names
    # At fit-to-screen every box is inside the panel and readable: boxes at least 120 x 40
    # px, module names at least 10 px tall.
    assert int(c["fit-inside"]) == int(c["nodes"]) == len(dom.nodes), c
    assert float(c["fit-min-box-w"]) >= 120 and float(c["fit-min-box-h"]) >= 40, c
    assert float(c["fit-name-text"]) >= 10 and float(c["fit-scale"]) >= 0.75, c
    # Groups: the UPF's two ports (in and out), its access and core sides, and chains.
    labels = {n.get("data-id") for n in dom.nodes}
    for want in ("g:prefix:access:0", "g:prefix:core:0", "g:chain:linkMerge"):
        assert want in labels, sorted(labels)
    # No table of the side panel (ports, workers, traffic classes, drops, runtime) is cut off.
    assert c["cut-tables"] == "", c
    _shoot("webview-upf.png", url, u.ns, tmp_path)


def test_search_opens_the_group_and_centers_the_module(upf_view, tmp_path):
    u, url, _ = upf_view
    dom = _Dom(_browse(url + "?find=pdrlookup", u.ns))
    c = dom.check
    assert c["found"] == "pdrLookup" and c["found-node"] == "pdrLookup", c
    assert c["found-inside"] == "1", c
    node = next(n for n in dom.nodes if n.get("data-id") == "pdrLookup")
    assert "found" in node["class"].split() and "selected" in node["class"].split()
    assert "chain:linkMerge" not in c["collapsed"].split(), "its chain is opened"
    assert _Dom(_browse(url + "?find=noSuchModule", u.ns)).check["found"] == ""
    _shoot("webview-upf-search.png", url + "?find=pdrLookup", u.ns, tmp_path)


def test_details_plot_a_measure_latency_histogram(upf_view, tmp_path):
    u, url, _ = upf_view
    target = f"{u.core}_measure"
    text = _browse(url + f"?find={target}", u.ns)
    dom = _Dom(text)
    assert dom.check["selected"] == target
    assert dom.hists == ["latency", "jitter"], dom.hists
    details = text[text.index('id="details"') :]
    assert f"<h3>{target}</h3>" in details and "class Measure" in details
    assert re.search(r"latency: [\d,]+ samples · p50 ", details), details[:2000]
    assert "Drops by reason" in details and "Runtime" in details
    _shoot("webview-upf-details.png", url + f"?find={target}", u.ns, tmp_path)


def test_expanded_every_module_has_its_own_box(upf_view, tmp_path):
    u, url, names = upf_view
    dom = _Dom(_browse(url + "?expand=all", u.ns))
    assert int(dom.check["nodes"]) == 67 and dom.check["collapsed"] == "", dom.check
    assert sorted(n["data-name"] for n in dom.nodes) == names
    # All of it still fits in the panel (small: zoom in to read it).
    assert int(dom.check["fit-inside"]) == 67, dom.check
    _shoot("webview-upf-expanded.png", url + "?expand=all", u.ns, tmp_path)


# ---- small pipelines, no root ------------------------------------------------------------


def _need_chromium() -> None:
    if _chromium() is None:
        pytest.skip("chromium is missing (apt-get install -y chromium)")


def test_duplicate_copies_collapse_into_one_group_per_worker(tmp_path):
    _need_chromium()
    port = free_port()
    with running_daemon(tmp_path, "--http", f"127.0.0.1:{port}") as d:
        script = tmp_path / "dup.bess"
        script.write_text(
            "bess.add_worker(0, 0)\n"
            "bess.add_worker(1, 1)\n"
            "duplicate('src::Source(pkt_size=60) -> ttl::Bypass() -> m::Measure() -> Sink()', "
            "workers=[0, 1], name='fw')\n"
        )
        run_script(script, d.client)
        dom = _Dom(_browse(f"http://127.0.0.1:{port}/?collapse=all", None))
    groups = {n["data-id"]: sorted(n["data-members"].split()) for n in dom.nodes}
    assert groups == {
        f"g:copy@w{w}": sorted(f"{m}@w{w}" for m in ("src", "ttl", "m", "fw.0")) for w in (0, 1)
    }
    assert dom.check["represented"] == dom.check["modules"] == "8"


def test_pan_zoom_fit_details_search_and_groups_by_hand(tmp_path):
    _need_chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    port = free_port()
    with running_daemon(tmp_path, "--http", f"127.0.0.1:{port}") as d:
        run_script(ROOT / "conf" / "demo.bess", d.client)
        with sync_api.sync_playwright() as pw:
            br = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
            try:
                page = br.new_page(viewport={"width": SIZE[0], "height": SIZE[1]})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector("g.node")

                def sc(key: str) -> str:
                    return page.get_attribute("#selfcheck", f"data-{key}") or ""

                def moved() -> tuple[float, ...]:
                    t = page.get_attribute("#viewport", "transform")
                    return tuple(float(x) for x in re.findall(r"-?[\d.]+", t))

                fit = float(sc("scale"))
                page.click("#zoomin")
                assert float(sc("scale")) == pytest.approx(fit * 1.25, rel=1e-2)
                page.click("#zoomout")
                assert float(sc("scale")) == pytest.approx(fit, rel=1e-2)
                g = page.query_selector("#graph").bounding_box()
                cx, cy = g["x"] + g["width"] / 2, g["y"] + g["height"] / 2
                page.mouse.move(cx, cy)
                page.mouse.wheel(0, -400)
                page.wait_for_function(f"Number(selfcheck.dataset.scale) > {fit * 1.1}")
                x0, y0, _ = moved()
                page.mouse.move(cx + 5, cy + 5)
                page.mouse.down()
                page.mouse.move(cx + 125, cy + 65, steps=6)
                page.mouse.up()
                x1, y1, _ = moved()
                assert (x1 - x0, y1 - y0) == (pytest.approx(120, abs=2), pytest.approx(60, abs=2))
                page.click("#fit")
                assert float(sc("scale")) == pytest.approx(fit, rel=1e-2)
                # A click on a module opens its details; Measure's histogram is plotted.
                page.click('g.node[data-id="measure"]')
                page.wait_for_selector("#details h3")
                assert page.text_content("#details h3") == "measure"
                assert "class Measure" in page.text_content("#details")
                page.wait_for_selector('#details svg.hist[data-hist="latency"] rect', timeout=10000)
                # The search box, with Enter.
                page.fill("#search", "QUEUE")
                page.press("#search", "Enter")
                assert sc("found") == "queue0" and sc("found-inside") == "1"
                # Collapse folds the chain src -> ... -> rr; a double-click opens it again.
                page.click("#collapse")
                assert page.query_selector('g.node[data-id="g:chain:src"]') is not None
                before = int(sc("nodes"))
                page.dblclick('g.node[data-id="g:chain:src"]')
                assert int(sc("nodes")) > before
                assert page.query_selector('g.node[data-id="rr"]') is not None
                assert page.text_content("#error") == ""
            finally:
                br.close()


# ---- FlowMeasure in /metrics --------------------------------------------------------------


def test_flow_measure_histograms_are_prometheus_histograms(tmp_path):
    mport = free_port()
    with running_daemon(tmp_path, "--metrics", f"127.0.0.1:{mport}") as d:
        b = d.client
        b.create_module("Source", "src", {"pkt_size": 80})
        b.create_module(
            "SetMetadata",
            "sess",
            {
                "attrs": [
                    {"name": "fseid", "size": 8, "value_int": 7},
                    {"name": "pdr_id", "size": 4, "value_int": 3},
                ]
            },
        )
        b.create_module("Timestamp", "ts", {"attr_name": "timestamp"})
        b.create_module("FlowMeasure", "fm", {"flag_attr_name": "flag", "leader": True})
        b.create_module("Sink", "sink")
        for a, z in (("src", "sess"), ("sess", "ts"), ("ts", "fm"), ("fm", "sink")):
            b.connect_modules(a, z)
        b.resume_all()
        deadline = time.monotonic() + 20
        while ogate_packets(b, "fm") < 5000 and time.monotonic() < deadline:
            time.sleep(0.1)
        b.pause_all()
        resp = b.show_latency("fm")
        assert [h.name for h in resp.histograms] == ["latency", "jitter"]
        assert resp.histograms[0].count > 0 and resp.histograms[0].resolution_ns == 1000
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            text = r.read().decode()
    lab = 'class="FlowMeasure",module="fm"'
    for h in ("latency", "jitter"):
        name = f"bessemer_module_{h}_seconds"
        buckets = re.findall(rf'^{name}_bucket{{{lab},le="([^"]+)"}} (\d+)$', text, re.M)
        assert buckets, f"no {name} buckets for fm in\n{text[:3000]}"
        # The sessions' 1 us buckets, HDR-style: 1 us, 1.5 us, 2 us, 3 us ... past 10 ms.
        bounds = [b for b, _ in buckets]
        assert bounds[:4] == ["0.000001", "0.0000015", "0.000002", "0.000003"], bounds
        assert bounds[-2:] == ["0.016384", "+Inf"], bounds
        counts = [int(c) for _, c in buckets]
        assert counts == sorted(counts), "cumulative"
        count = int(re.search(rf"^{name}_count{{{lab}}} (\d+)$", text, re.M).group(1))
        assert counts[-1] == count > 0
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr

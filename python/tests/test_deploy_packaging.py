"""Packaging (issue 32): one version everywhere, every binary's --version, man pages and
completions generated from the commands' own definitions, the systemd unit (verified by
systemd, its hardening scored, and its user and capabilities enough to run a port), and the
Debian package's contents. The package's own tests need it built (`make test-deploy` builds
it first); without it they are skipped with the reason."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from .conftest import ROOT, ROOT_ONLY, sh

PROFILE_DIR = ROOT / "target" / os.environ.get("BESSEMER_PACKAGE_PROFILE", "debug")
RUST_BINS = [
    "bessemerd",
    "bessemer-controller",
    "bessemer-planner",
    "bessemer-demo",
    "bessemer-httpd",
    "bessemer-kv",
]


def version() -> str:
    return tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]


def test_one_version_everywhere():
    v = version()
    from bessemer import __version__

    assert __version__ == v
    changelog = (ROOT / "debian/changelog").read_text().splitlines()[0]
    assert changelog.startswith(f"bessemer ({v})"), changelog
    chart = (ROOT / "deploy/helm/bessemer/Chart.yaml").read_text()
    assert re.search(rf'^appVersion: "{re.escape(v)}"$', chart, re.M), chart
    releases = re.findall(
        r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$", (ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert releases and releases[0] == v, (
        f"CHANGELOG.md's newest release is {releases[:1]}, not {v}"
    )
    lic = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause License" in lic and "Neither the name of the copyright holder" in lic
    assert (
        tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["license"]
        == "BSD-3-Clause"
    )


def built(name: str) -> Path:
    p = PROFILE_DIR / name
    if not p.exists():
        pytest.skip(f"{p} is not built (make bins PROFILE=debug)")
    return p


@pytest.mark.parametrize("name", RUST_BINS)
def test_every_binary_reports_its_version(name):
    r = subprocess.run([str(built(name)), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{name} {version()}"


def test_python_cli_reports_its_version():
    cli = Path(sys.executable).parent / "bessemer"
    r = subprocess.run(
        [str(cli), "--port", "1", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT / "python",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"bessemer {version()}"


@pytest.fixture(scope="module")
def clidoc(tmp_path_factory):
    for b in RUST_BINS:
        built(b)
    out = tmp_path_factory.mktemp("clidoc")
    py = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin/python"
    r = subprocess.run(
        [
            str(ROOT / "scripts/gen-clidoc.sh"),
            str(PROFILE_DIR),
            str(out),
            str(py if py.exists() else "python3"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_man_pages_carry_each_commands_own_options(clidoc):
    if shutil.which("man") is None:
        pytest.skip("man is not installed")
    expect = {
        "bessemerd": ["--metrics", "--token-file", "--idle-sleep-max-us"],
        "bessemer-controller": ["run", "crd"],
        "bessemer-planner": ["show"],
        "bessemer": ["daemon start", "--token-file"],
    }
    for name, words in expect.items():
        page = clidoc / "man/man1" / f"{name}.1.gz"
        r = subprocess.run(
            ["man", "-l", "-P", "cat", str(page)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "MANWIDTH": "120", "LC_ALL": "C.UTF-8"},
        )
        assert r.returncode == 0, r.stderr
        text = r.stdout.replace("‐", "-")
        for w in words:
            assert w in text, f"{name}(1) lacks {w!r}:\n{text[:1500]}"
        assert version() in text
    # Reproducible: the same command gives the same bytes.
    again = subprocess.run(
        ["gzip", "-dc", str(clidoc / "man/man1/bessemerd.1.gz")], capture_output=True
    ).stdout
    assert (
        again
        == subprocess.run(
            ["gzip", "-dc", str(clidoc / "man/man1/bessemerd.1.gz")], capture_output=True
        ).stdout
    )


def test_bash_completions_complete(clidoc):
    # bash loads each script and completes a real command line with it.
    for name, line, want in [
        ("bessemerd", "bessemerd --met", "--metrics"),
        ("bessemer-controller", "bessemer-controller ", "run"),
        ("bessemer", "bessemer dae", "daemon"),
    ]:
        script = clidoc / "completions/bash" / name
        words = line.split(" ")
        prog = f"""
source {script}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE={line!r}; COMP_POINT={len(line)}
fn=$(complete -p {name} | sed -E 's/.*-F ([^ ]+).*/\\1/')
$fn {name} {words[-1]!r} {words[-2]!r}
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
        r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
        assert want in r.stdout.split(), f"{name}: {line!r} -> {r.stdout!r} {r.stderr}"
    for sh_ in ("zsh", "fish"):
        for name in ["bessemerd", "bessemer"]:
            f = clidoc / "completions" / sh_ / (f"_{name}" if sh_ == "zsh" else f"{name}.fish")
            assert f.stat().st_size > 200, f
        if shutil.which(sh_):
            for f in (clidoc / "completions" / sh_).iterdir():
                r = subprocess.run([sh_, "-n", str(f)], capture_output=True, text=True)
                assert r.returncode == 0, f"{f}: {r.stderr}"


def unit_for(binary: Path, tmp: Path) -> Path:
    unit = tmp / "bessemerd.service"
    unit.write_text(
        (ROOT / "deploy/systemd/bessemerd.service")
        .read_text()
        .replace("/usr/bin/bessemerd", str(binary))
    )
    return unit


def unit_settings() -> dict[str, str]:
    out = {}
    for line in (ROOT / "deploy/systemd/bessemerd.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v
    return out


def test_systemd_unit_verifies_and_is_hardened(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = unit_for(built("bessemerd"), tmp_path)
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for bessemerd.service: ([\d.]+) (\w+)", r.stdout)
    assert m, r.stdout[-500:] + r.stderr
    print(f"systemd-analyze security: {m.group(1)} {m.group(2)}")
    assert float(m.group(1)) <= 3.0, r.stdout  # "OK" in systemd's words; 10 is unconfined
    s = unit_settings()
    assert s["LimitNOFILE"] == "1048576" and s["LimitMEMLOCK"] == "infinity"
    assert s["Restart"] == "on-failure" and s["User"] == "bessemer"
    assert "$BESSEMERD_OPTS" in s["ExecStart"]
    dropin = (ROOT / "deploy/systemd/bessemerd-options.conf").read_text()
    assert 'Environment="BESSEMERD_OPTS=' in dropin


@ROOT_ONLY
def test_unit_user_and_capabilities_are_enough_to_run_a_port(tmp_path):
    """systemd's User= and AmbientCapabilities= as setpriv applies them: bessemerd as an
    unprivileged user with exactly the unit's capabilities serves, opens an AF_PACKET port on
    a veth and forwards (a ping crosses it); without NET_RAW the port is refused."""
    binary = built("bessemerd")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    caps = unit_settings()["AmbientCapabilities"].split()
    capset = ",".join("+" + c.removeprefix("CAP_").lower() for c in caps)
    tag = uuid.uuid4().hex[:5]
    sw, ha, hb = f"bpu{tag}", f"bpa{tag}", f"bpb{tag}"
    from .conftest import free_port

    try:
        for ns in (sw, ha, hb):
            assert sh("ip", "netns", "add", ns).returncode == 0
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i, h in enumerate((ha, hb)):
            assert (
                sh(
                    "ip",
                    "-n",
                    sw,
                    "link",
                    "add",
                    f"s{i}",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "h0",
                    "netns",
                    h,
                ).returncode
                == 0
            )
            sh("ip", "-n", h, "addr", "add", f"10.252.0.{i + 1}/24", "dev", "h0")
            sh("ip", "-n", h, "link", "set", "h0", "up")
            sh("ip", "-n", sw, "link", "set", f"s{i}", "up")
        port = free_port()

        def run(capset_: str) -> subprocess.Popen:
            return subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    sw,
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    f"--inh-caps=-all,{capset_}",
                    f"--ambient-caps=-all,{capset_}",
                    f"--bounding-set=-all,{capset_}",
                    str(binary),
                    "--port",
                    str(port),
                    "--no-hugepages",
                    "--no-pin",
                    "--buffers",
                    "4096",
                    "--idle-sleep-max-us",
                    "1000",
                ],
                stderr=subprocess.PIPE,
                text=True,
            )

        def probe() -> subprocess.CompletedProcess:
            return subprocess.run(
                ["ip", "netns", "exec", sw, sys.executable, "-c", PROBE, str(port), "s0", "s1"],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT / "python",
            )

        p = run(capset)
        try:
            r = probe()
            assert r.returncode == 0, r.stdout + r.stderr
            ping = sh("ip", "netns", "exec", ha, "ping", "-c", "2", "-W", "2", "10.252.0.2")
            assert ping.returncode == 0, ping.stdout
        finally:
            p.terminate()
            p.wait(10)
        # Without NET_RAW the AF_PACKET port is refused by the kernel, and bessemerd says so.
        p = run(",".join(c for c in capset.split(",") if c != "+net_raw"))
        try:
            r = probe()
            assert r.returncode == 3 and "refused" in r.stdout, r.stdout + r.stderr
        finally:
            p.terminate()
            p.wait(10)
    finally:
        for ns in (sw, ha, hb):
            sh("ip", "netns", "del", ns)


# Connects (retrying while the daemon starts), makes AFPacketPorts on two veths and a
# switch between them; exits non-zero with the daemon's error if refused.
PROBE = r"""
import sys, time
from bessemer.client import BESS
port, a, b = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for _ in range(100):
    try:
        c = BESS("127.0.0.1", port, timeout=2); c.get_version(); break
    except Exception:
        time.sleep(0.1)
try:
    c.create_port("AFPacketPort", "pa", {"ifname": a})
    c.create_port("AFPacketPort", "pb", {"ifname": b})
except BESS.Error as e:
    print("refused:", e); sys.exit(3)
for x, y in (("pa", "pb"), ("pb", "pa")):
    c.create_module("PortInc", "in_" + x, {"port": x})
    c.create_module("PortOut", "out_" + y, {"port": y})
    c.connect_modules("in_" + x, "out_" + y)
c.resume_all()
print("switching")
"""


def deb_path() -> Path:
    p = ROOT / "target/deb" / f"bessemer_{version()}_amd64.deb"
    if not p.exists():
        pytest.skip(f"{p} is not built (make deb PROFILE=debug)")
    return p


def test_debian_package_contents():
    deb = deb_path()
    info = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True).stdout
    assert f"Version: {version()}" in info and "Package: bessemer" in info
    assert re.search(r"^Depends: .*python3", info, re.M), info
    files = set(
        subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True).stdout.split()
    )
    files = {f.lstrip(".") for f in files if f.startswith("./")}
    want = {
        "/usr/bin/bessemerd",
        "/usr/bin/bessemer",
        "/usr/bin/bessemer-controller",
        "/lib/systemd/system/bessemerd.service",
        "/usr/lib/sysusers.d/bessemer.conf",
        "/usr/share/man/man1/bessemerd.1.gz",
        "/usr/share/man/man1/bessemer.1.gz",
        "/usr/share/bash-completion/completions/bessemerd",
        "/usr/share/zsh/vendor-completions/_bessemer",
        "/usr/share/fish/vendor_completions.d/bessemer.fish",
        "/usr/share/doc/bessemer/copyright",
        "/usr/share/doc/bessemer/LICENSE",
        "/usr/share/doc/bessemer/examples/bessemerd-options.conf",
        "/usr/share/bessemer/conf/demo.bess",
        "/usr/lib/bessemer/python/bessemer/cli.py",
    }
    assert want <= files, sorted(want - files)
    ctl = subprocess.run(
        ["dpkg-deb", "-I", str(deb), "postinst"], capture_output=True, text=True
    ).stdout
    assert "systemd-sysusers" in ctl and "deb-systemd-helper" in ctl, ctl
    size = deb.stat().st_size
    print(f"{deb.name}: {size / 2**20:.1f} MiB")


def test_make_install_under_a_prefix(tmp_path):
    """`make install-files PREFIX=...` (what `make install` does after building) lays out
    binaries, the CLI with its dependencies, man pages, completions and a unit pointing at
    the prefix; the installed commands run from there."""
    for b in RUST_BINS:
        built(b)
    prefix = tmp_path / "opt"
    r = subprocess.run(
        ["make", "-s", "install-files", f"PROFILE={PROFILE_DIR.name}", f"PREFIX={prefix}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for rel in [
        "bin/bessemerd",
        "bin/bessemer",
        "share/man/man1/bessemerd.1.gz",
        "share/bash-completion/completions/bessemer",
        "lib/sysusers.d/bessemer.conf",
        "share/doc/bessemer/LICENSE",
        "share/bessemer/conf/upf/upf.bess",
    ]:
        assert (prefix / rel).exists(), rel
    unit = (prefix / "lib/systemd/system/bessemerd.service").read_text()
    assert f"ExecStart={prefix}/bin/bessemerd " in unit
    out = subprocess.run(
        [str(prefix / "bin/bessemerd"), "--version"], capture_output=True, text=True
    ).stdout
    assert out.strip() == f"bessemerd {version()}"
    # The launcher uses the installed package, not the source tree, with the system python3.
    r = subprocess.run(
        [str(prefix / "bin/bessemer"), "--port", "1", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert r.returncode == 0 and r.stdout.startswith(f"bessemer {version()}"), r.stdout + r.stderr

"""The package as a user installs it: a wheel and an sdist built from python/, installed into
a fresh virtualenv outside the source tree, whose `bessemer` command runs from a directory
outside the tree against a real daemon.

The build works on a copy of python/ and proto/ (same layout, so nothing is written into the
tree) with one .proto file added that no hand-kept list names, as another proto package
added to proto/bess would be. pip fetches the dependencies from PyPI (or its cache); when
PyPI cannot be reached the test is skipped, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT, free_port, running_daemon

# Signs in pip's output that it could not reach the package index (not a packaging fault).
OFFLINE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Could not fetch URL",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
)

# A proto package of its own in a subfolder, as BESS's sample plugin's (the client does not
# use it; it must be shipped and compiled beside the others without breaking them).
PLUGIN_PROTO = """syntax = "proto3";

package sample.supdate.pb;

message SequentialUpdateCommandClearArg {}

message SequentialUpdateArg {
  message Field {
    int64 offset = 1;
    uint64 size = 2;
    uint64 min = 3;
    uint64 max = 4;
  }
  repeated Field fields = 1;
}
"""
PLUGIN = "plugins/sample_plugin/supdate_msg.proto"


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 300):
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _pip(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    r = _run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args, "--timeout", "30"],
        cwd=cwd,
    )
    if r.returncode != 0:
        out = r.stdout + r.stderr
        if any(m in out for m in OFFLINE):
            pytest.skip(f"PyPI cannot be reached (pip {args[0]}): {out.strip().splitlines()[-1]}")
        raise AssertionError(f"pip {' '.join(args)} failed:\n{out[-3000:]}")
    return r


def _source_copy(dest: Path) -> Path:
    """python/ and proto/ copied into `dest` (symlinks kept as links), with the sample
    plugin's proto (written if the tree lacks it); returns the copy's python/."""
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache")
    shutil.copytree(ROOT / "python", dest / "python", symlinks=True, ignore=junk)
    shutil.copytree(ROOT / "proto", dest / "proto", symlinks=True)
    plugin = dest / "proto" / "bess" / PLUGIN
    if not plugin.exists():
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text(PLUGIN_PROTO)
    return dest / "python"


def _protos(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.proto")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtualenv outside the tree with the wheel installed: (its bin/, the copied
    source's python/, a work directory outside the tree)."""
    base = tmp_path_factory.mktemp("install")
    src = _source_copy(base / "src")
    dist = base / "dist"
    _pip(Path(sys.executable), "wheel", "--no-deps", "-w", str(dist), str(src), cwd=base)
    wheels = list(dist.glob("bessemer-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as z:
        shipped = {n.removeprefix("bessemer/proto/") for n in z.namelist() if n.endswith(".proto")}
    # Every .proto of proto/bess (the plugin's too), at the same relative paths.
    assert shipped == _protos(src.parent / "proto" / "bess")
    env_dir = base / "venv"
    r = _run([sys.executable, "-m", "venv", str(env_dir)], cwd=base)
    assert r.returncode == 0, r.stderr
    _pip(env_dir / "bin" / "python", "install", str(wheels[0]), cwd=base)
    work = base / "work"
    work.mkdir()
    return env_dir / "bin", src, work


def _bessemer(bin_dir: Path, work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BESSEMER_PROTO_DIR")}
    # A fresh compile cache: the .proto files must come from the installed package.
    env["XDG_CACHE_HOME"] = str(work / "cache")
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return _run([str(bin_dir / "bessemer"), *args], cwd=work, env=env, timeout=120)


def _commands_work(bin_dir: Path, work: Path, tmp_path: Path) -> None:
    script = work / "tiny.bess"
    script.write_text("src::Source(pkt_size=int($SIZE!'60')) -> Sink()\n")
    with running_daemon(tmp_path) as d:
        p = ("--port", str(d.port))
        r = _bessemer(bin_dir, work, *p, "show", "status")
        assert r.returncode == 0 and "modules:  0" in r.stdout, r.stdout + r.stderr
        r = _bessemer(bin_dir, work, *p, "show", "mclass", "Source")
        assert r.returncode == 0 and "SourceArg" in r.stdout, r.stdout + r.stderr
        r = _bessemer(bin_dir, work, *p, "run", "tiny.bess", "SIZE=80")
        assert r.returncode == 0, r.stderr
        r = _bessemer(bin_dir, work, *p, "show", "module", "src")
        assert r.returncode == 0 and r.stdout.startswith("src :: Source"), r.stdout + r.stderr
        assert {m.name for m in d.client.list_modules()} == {"src", "sink0"}
        r = _bessemer(bin_dir, work, *p, "--version")
        assert r.returncode == 0 and d.client.get_version() in r.stdout, r.stdout + r.stderr


def test_installed_wheel_works_outside_the_tree(venv, tmp_path):
    bin_dir, src, work = venv
    # The installed package is what runs: not the tree's copy.
    where = _run(
        [str(bin_dir / "python"), "-c", "import bessemer.pb as p; print(p.proto_dir())"],
        cwd=work,
    )
    assert where.returncode == 0, where.stderr
    proto = Path(where.stdout.strip())
    assert "site-packages" in proto.parts and not proto.is_symlink()
    assert PLUGIN in _protos(proto)
    r = _bessemer(bin_dir, work, "--port", str(free_port()), "--version")
    assert r.returncode == 0, r.stderr
    version = _run(
        [str(bin_dir / "python"), "-c", "import bessemer; print(bessemer.__version__)"], work
    )
    assert r.stdout.splitlines()[0] == f"bessemer {version.stdout.strip()}"
    _commands_work(bin_dir, work, tmp_path)
    # The plugin's messages were compiled with the rest and load as their own package.
    load = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "from bessemer import pb; pb.load(); import importlib; "
            "m = importlib.import_module('plugins.sample_plugin.supdate_msg_pb2'); "
            "print(m.SequentialUpdateArg.DESCRIPTOR.full_name)",
        ],
        cwd=work,
        env={**os.environ, "XDG_CACHE_HOME": str(work / "cache")},
    )
    assert load.stdout.strip() == "sample.supdate.pb.SequentialUpdateArg", load.stderr


def test_installed_sdist_works_outside_the_tree(venv, tmp_path):
    bin_dir, src, work = venv
    try:
        from setuptools import build_meta  # noqa: F401
    except ImportError:
        pytest.skip("setuptools is not installed here, so no sdist can be built")
    dist = tmp_path / "sdist"
    r = _run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; "
            "print(build_meta.build_sdist(sys.argv[1]))",
            str(dist),
        ],
        cwd=src,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    sdist = dist / r.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as t:
        # Names below the sdist's top folder (bessemer-VERSION/).
        members = {m.name.split("/", 1)[1]: m for m in t.getmembers() if "/" in m.name}
    shipped = {
        n.removeprefix("bessemer/proto/")
        for n, m in members.items()
        if n.endswith(".proto") and m.isfile()
    }
    assert shipped == _protos(src.parent / "proto" / "bess")
    _pip(bin_dir / "python", "install", "--force-reinstall", "--no-deps", str(sdist), cwd=work)
    _commands_work(bin_dir, work, tmp_path)

"""BESS's protocol messages and gRPC stubs, generated from the `.proto` files on first use.

The package ships every `.proto` file of the repository's `proto/bess` in `bessemer/proto`
(in the source tree a link to `proto/bess`; in a wheel or sdist a copy), so an installed
package needs nothing from the tree. `$BESSEMER_PROTO_DIR` overrides the folder. The files
are compiled with the protoc bundled in `grpcio-tools` into a per-user cache directory keyed
by their contents, so no generated code is checked in and no system `protoc` is needed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

# What the client imports, by short name; every other file is compiled too (a plugin's
# messages, say) but only imported by whoever wants it.
_MODULES = {
    "bess_msg": "bess_msg_pb2",
    "module_msg": "module_msg_pb2",
    "port_msg": "ports.port_msg_pb2",
    "ext_port_msg": "ext.bessemer_ports_pb2",
    "ext_observe": "ext.bessemer_observe_pb2",
    "ext_service": "ext.bessemer_service_pb2",
    "ext_service_grpc": "ext.bessemer_service_pb2_grpc",
    "ext_module_msg": "ext.bessemer_esp_pb2",
    "service": "service_pb2",
    "service_grpc": "service_pb2_grpc",
}


def proto_dir() -> Path:
    """The folder holding BESS's `.proto` files (`service.proto`, `ports/`, `ext/`, ...)."""
    env = os.environ.get("BESSEMER_PROTO_DIR")
    if env:
        # Either that folder itself or its parent (the repository's `proto`).
        path = Path(env)
        return path / "bess" if (path / "bess" / "service.proto").exists() else path
    return Path(__file__).resolve().parent / "proto"


def proto_files(src: Path | None = None) -> list[Path]:
    """Every `.proto` file under `src` (default: proto_dir()), relative to it, sorted."""
    src = src or proto_dir()
    return sorted(p.relative_to(src) for p in src.rglob("*.proto"))


def _generate(src: Path, files: list[Path], out: Path) -> None:
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "grpcio-tools is missing; install it with 'pip install grpcio grpcio-tools'"
        ) from exc
    include = str(Path(protoc.__file__).parent / "_proto")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Compiled beside the cache entry and renamed into place, so a process that finds the
    # entry finds it whole (two first uses at once each compile; one rename wins).
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        # BESS's files import each other relative to the folder ("error.proto").
        args = ["protoc", f"-I{src}", f"-I{include}", f"--python_out={tmp}"]
        args += [f"--grpc_python_out={tmp}", *(str(src / f) for f in files)]
        if protoc.main(args) != 0:
            raise RuntimeError(f"compiling the BESS .proto files in {src} failed")
        try:
            tmp.rename(out)
        except OSError:
            if not (out / "service_pb2_grpc.py").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load() -> dict[str, ModuleType]:
    """Returns the generated modules by short name (bess_msg, module_msg, service_grpc...)."""
    src = proto_dir()
    files = proto_files(src) if src.is_dir() else []
    if Path("service.proto") not in files:
        raise RuntimeError(
            f"BESS .proto files not found in {src}: reinstall the bessemer package, or set "
            "BESSEMER_PROTO_DIR to a folder holding them"
        )
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.as_posix().encode() + b"\0")
        digest.update((src / f).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    out = cache / "bessemer" / "pb" / digest.hexdigest()[:16]
    if not (out / "service_pb2_grpc.py").exists():
        _generate(src, files, out)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return {k: importlib.import_module(v) for k, v in _MODULES.items()}

"""BESS's protocol messages and gRPC stubs, generated from `proto/bess` on first use.

The `.proto` files live in the repository's `proto/bess` (or `$BESSEMER_PROTO_DIR`); they
are compiled with the protoc bundled in `grpcio-tools` into a per-user cache directory, so
no generated code is checked in and no system `protoc` is needed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

_FILES = [
    "error.proto",
    "util_msg.proto",
    "bess_msg.proto",
    "module_msg.proto",
    "ports/port_msg.proto",
    "ext/bessemer_ports.proto",
    "ext/bessemer_observe.proto",
    "ext/bessemer_service.proto",
    "ext/bessemer_esp.proto",
    "service.proto",
]


def proto_dir() -> Path:
    """Directory holding `bess/*.proto` (the parent of `bess`)."""
    env = os.environ.get("BESSEMER_PROTO_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "proto"


def _generate(out: Path) -> None:
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "grpcio-tools is missing; install it with 'pip install grpcio grpcio-tools'"
        ) from exc
    src = proto_dir()
    if not (src / "bess" / "service.proto").exists():
        raise RuntimeError(f"BESS .proto files not found under {src}; set BESSEMER_PROTO_DIR")
    out.mkdir(parents=True, exist_ok=True)
    include = str(Path(protoc.__file__).parent / "_proto")
    # BESS's files import each other relative to the bess/ folder ("error.proto").
    root = src / "bess"
    args = [
        "protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
    ]
    args += [str(root / f) for f in _FILES]
    if protoc.main(args) != 0:
        raise RuntimeError("compiling the BESS .proto files failed")


def load() -> dict[str, ModuleType]:
    """Returns the generated modules by short name (bess_msg, module_msg, service_grpc...)."""
    src = proto_dir()
    digest = hashlib.sha256()
    for f in _FILES:
        digest.update((src / "bess" / f).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    out = cache / "bessemer" / "pb" / digest.hexdigest()[:16]
    if not (out / "service_pb2_grpc.py").exists():
        _generate(out)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    names = {
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
    return {k: importlib.import_module(v) for k, v in names.items()}

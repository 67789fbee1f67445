#!/usr/bin/env python3
"""The daemon's memory around one large request: starts BESSEMERD (argument 1; default the
release build), sends one ExactMatch `set_runtime_config` of N rules (argument 2; default
1 000 000, a 12 MB request), samples the daemon's RSS every 50 ms, destroys the module, and
prints RSS at start, at the peak, after the request and after the destroy, then one JSON
line. Used for the figures in docs/reliability.md (Limits: memory of large requests)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from bessemer.client import BESS


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(
            int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:")
        )


def main() -> int:
    binary = (
        sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/bessemerd")
    )
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        binary,
        "--port",
        str(port),
        "--no-pin",
        "--no-hugepages",
        "--buffers",
        "8192",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                b = BESS(port=port, timeout=600)
                b.get_version()
                break
            except BESS.Error:
                time.sleep(0.1)
        out = {"rules": n, "start_mib": rss_mib(proc.pid)}
        b.create_module(
            "ExactMatch", "em", {"fields": [{"offset": 26, "num_bytes": 4}]}
        )
        cfg = b._pb["module_msg"].ExactMatchConfig(default_gate=0)
        for i in range(n):
            r = cfg.rules.add()
            r.gate = 1
            r.fields.add().value_bin = i.to_bytes(4, "big")
        req = b._pb["bess_msg"].CommandRequest(name="em", cmd="set_runtime_config")
        req.arg.Pack(cfg)
        out["request_bytes"] = req.ByteSize()
        peak, done = [0], threading.Event()

        def watch() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_mib(proc.pid))
                time.sleep(0.05)

        t = threading.Thread(target=watch)
        t.start()
        start = time.monotonic()
        b._call("ModuleCommand", req)
        out["seconds"] = round(time.monotonic() - start, 1)
        done.set()
        t.join()
        out["peak_mib"] = peak[0]
        out["after_request_mib"] = rss_mib(proc.pid)
        b.destroy_module("em")
        time.sleep(0.5)
        out["after_destroy_mib"] = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    print(f"{'':<24}{'MiB':>8}")
    for k in ("start_mib", "peak_mib", "after_request_mib", "after_destroy_mib"):
        print(f"{k:<24}{out[k]:>8}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

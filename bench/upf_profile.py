#!/usr/bin/env python3
"""Instructions per packet of omec's own `conf/up4.bess`, by module class, counted by
callgrind (exact and repeatable whatever else the machine does).

Starts bessemerd under `valgrind --tool=callgrind` (instrumentation off while the pipeline is
built and `pfcpiface -simulate create` installs the sessions, as `bench/upf_real.py` sets them
up: sim mode, 128-byte packets, `measure_upf` as shipped), then for each direction: runs the
workers for a warm-up with instrumentation off, pauses them, zeroes the counts, runs them for
`--seconds` with instrumentation on, pauses them and dumps. Only the worker thread's counts are
read (`--separate-threads`: the one with the most instructions). A module's cost is what its
`process_batch` / `run_task` calls cost, callees included (the runner is not recursive, so a
call is the module's own work: its lookups, writes, gate counts); "runner, scheduler" is the
rest of the worker thread (the batch runner, the scheduler, pause checks). Divided by the
packets leaving the UPF (executeFAR's gates 0 and 1, as `upf_real.py` counts them).

Usage (root, namespaces): bench/upf_profile.py [--sessions N] [--seconds S] [--json]
(BESSEMERD names the daemon; default target/release/bessemerd)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import upf_real
from tests.omec import peers, upf_host

MODULE_CALL = re.compile(
    r"^<(?:[\w:]+::)?(\w+)(?:<.*>)? as bessemer_core::module::(?:Shared)?Module>::"
    r"(?:process_batch|run_task)$"
)


def per_class(path: str) -> tuple[dict[str, int], int]:
    """(instructions by module class, from the call edges into its `process_batch` and
    `run_task`; the thread's total instructions) of one callgrind dump file."""
    names: dict[str, str] = {}
    by_class: dict[str, int] = {}
    total = 0
    callee = None
    after_calls = False
    with open(path) as f:
        for line in f:
            if after_calls:
                after_calls = False
                if callee:
                    m = MODULE_CALL.match(callee)
                    if m:
                        by_class[m.group(1)] = by_class.get(m.group(1), 0) + int(line.split()[-1])
                continue
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
                continue
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(3) is not None:
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "cfn":
                    callee = names.get(m.group(2))
                continue
            if line.startswith("calls="):
                after_calls = True
    return by_class, total


def callgrind(pid: int, *args: str) -> None:
    r = subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {r.stdout}{r.stderr}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=20.0, help="instrumented seconds per run")
    ap.add_argument("--directions", default="uplink,downlink")
    ap.add_argument("--json", action="store_true", help="also print one UP4_PROFILE_JSON line")
    ap.add_argument("--keep", help="copy each direction's worker dump here (cg.DIRECTION)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("upf_profile: needs root (namespaces)", file=sys.stderr)
        return 1
    daemon = os.environ.get("BESSEMERD", str(ROOT / "target" / "release" / "bessemerd"))
    cache = peers()
    results: dict[str, tuple[dict[str, float], float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="upf-profile-") as tmp_s:
        tmp = Path(tmp_s)
        out = tmp / "cg"
        out.mkdir()
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
               f"--callgrind-out-file={out}/cg.%p",
               daemon, "--port", "10514", "--no-hugepages", "--buffers", "16384",
               "--log-file", str(tmp / "bessemerd.log")]  # fmt: skip
        u = upf_host(cache, tmp, upf_real.config(cache, tmp, args.sessions),
                     "198.18.0.1/24", "198.19.0.1/24", command=cmd)  # fmt: skip
        try:
            r = u.bessctl("run", "up4", timeout=1800)
            if r.returncode != 0 or "Error" in r.stdout + r.stderr:
                raise RuntimeError(f"bessctl run up4 failed:\n{r.stdout}\n{r.stderr}")
            r = u.pfcpiface("-simulate", "create", timeout=3600)
            if r.returncode != 0:
                raise RuntimeError(f"pfcpiface -simulate create failed:\n{r.stdout[-2000:]}")
            d = upf_real.Daemon("bessemer", u)
            pid = d.pid
            for direction in args.directions.split(","):
                d.direction(direction)
                u.probe("resume")
                time.sleep(2)
                u.probe("pause")
                for f in glob.glob(f"{out}/cg.*"):
                    os.unlink(f)
                callgrind(pid, "-i", "on")
                callgrind(pid, "-z")
                p0 = d.passed()
                u.probe("resume")
                time.sleep(args.seconds)
                u.probe("pause")
                p1 = d.passed()
                callgrind(pid, "-d")
                callgrind(pid, "-i", "off")
                best = None
                for f in glob.glob(f"{out}/cg.*"):
                    classes, total = per_class(f)
                    if best is None or total > best[1]:
                        best = (classes, total, f)
                assert best is not None, "no callgrind dump"
                pkts = p1 - p0
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(best[2], Path(args.keep) / f"cg.{direction}")
                results[direction] = ({k: v / pkts for k, v in best[0].items()}, best[1] / pkts,
                                      pkts)  # fmt: skip
        finally:
            u.close()
    report(results, args.sessions)
    if args.json:
        print("UP4_PROFILE_JSON " + json.dumps(
            {d: {"total": round(t, 1), "packets": n, "classes": {k: round(v, 1) for k, v in c.items()}}
             for d, (c, t, n) in results.items()}))  # fmt: skip
    return 0


def report(results: dict, sessions: int) -> None:
    dirs = list(results)
    print(f"# up4.bess on bessemerd, {sessions} sessions, 128 B: callgrind instructions per "
          "packet leaving the UPF, by module class (worker thread)")
    classes: dict[str, float] = {}
    for c, _, _ in results.values():
        for k, v in c.items():
            classes[k] = max(classes.get(k, 0.0), v)
    print(f"{'class':<22}" + "".join(f"{d:>10}" for d in dirs))
    for k in sorted(classes, key=lambda k: -classes[k]):
        if classes[k] < 0.5:
            continue
        print(f"{k:<22}" + "".join(f"{results[d][0].get(k, 0.0):>10.1f}" for d in dirs))
    print(f"{'runner, scheduler':<22}" + "".join(
        f"{results[d][1] - sum(results[d][0].values()):>10.1f}" for d in dirs))  # fmt: skip
    print(f"{'total':<22}" + "".join(f"{results[d][1]:>10.1f}" for d in dirs))
    print(f"{'(packets)':<22}" + "".join(f"{results[d][2]:>10}" for d in dirs))


if __name__ == "__main__":
    sys.exit(main())

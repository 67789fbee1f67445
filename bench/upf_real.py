#!/usr/bin/env python3
"""`make bench-upf`, part 1: the SD-Core UPF's own pipeline (omec's `conf/up4.bess`, sim
mode, run unchanged by omec's bessctl) on bessemerd and on the real omec bessd, in the same
run, driven the same way.

For each session count, each daemon gets its own network namespace with the UPF's two
interfaces, `bessctl run up4` with the shipped configuration (sim mode; `max_sessions` and
the generator's `total_flows` set to the session count, 128-byte packets, `measure_upf` as
shipped, the slice policer raised to 1 Tbit/s so the CPU is the bound) and `pfcpiface
-simulate create` installing the sessions (timed: the install time). Both workers run on
the same core (up4.bess puts worker 0 on the first CPU of the process); while one daemon is
measured the other's workers are paused. Directions: uplink only, downlink only and both (a
Source switched off with `set_burst 0`, as scripts do). A figure is the packets leaving the
UPF (forwarded by the FAR, both directions) per second of the worker thread's CPU time
(/proc/PID/task/TID/schedstat), over `--seconds` after a warm-up; runs alternate BESS,
Bessemer, BESS, ... `--reps` times; the median is reported with the spread (min..max) and
the worker's CPU share (runs below 0.95 marked `!`). Prints a table, then one JSON line.

Where bessd has not been built (scripts/build-bessd.sh), says so and measures Bessemer
alone ("BESS not measured"). Root only."""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from tests.omec import Upf, peers, refused_rules, shipped_config, upf_host

DIRECTIONS = ("uplink", "downlink", "both")


def bessd_path() -> Path | None:
    """The real bessd with the sample plugin built in, if scripts/build-bessd.sh made it."""
    r = subprocess.run(
        [str(ROOT / "scripts" / "build-bessd.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        return None
    return Path(r.stdout.strip().splitlines()[-1])


def config(cache: Path, tmp: Path, sessions: int) -> dict:
    conf = copy.deepcopy(shipped_config(cache))
    conf["mode"] = "sim"
    conf["sim"]["max_sessions"] = sessions
    conf["sim"]["total_flows"] = sessions
    conf["sim"]["pkt_size"] = 128
    conf["notify_sockaddr"] = str(tmp / "notifycp")
    conf["endmarker_sockaddr"] = str(tmp / "pfcpport")
    # The slice policer raised so that the CPU bounds the figure (issue: "slice policer
    # raised"); 1 Tbit/s each way with a burst to match.
    conf["slice_rate_limit_config"] = {
        "n6_bps": 10**12,
        "n6_burst_bytes": 10**9,
        "n3_bps": 10**12,
        "n3_burst_bytes": 10**9,
    }
    return conf


class Daemon:
    def __init__(self, name: str, upf: Upf):
        self.name = name
        self.upf = upf
        self.install_s = 0.0

    @property
    def pid(self) -> int:
        return self.upf.daemon.pid

    def threads_cpu_ns(self) -> dict[int, int]:
        out = {}
        for t in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                out[int(t.name)] = int((t / "schedstat").read_text().split()[0])
            except (OSError, ValueError):
                pass
        return out

    def passed(self) -> int:
        """Packets the FAR forwarded (executeFAR's gates 0, downlink, and 1, uplink): what
        leaves the UPF. (BESS counts output gates, not input gates, by default.)"""
        got = self.upf.probe("ogates:executeFAR")["ogates:executeFAR"]
        return int(got.get("0", 0)) + int(got.get("1", 0))

    def direction(self, d: str) -> None:
        u = self.upf
        up = 64 if d in ("uplink", "both") else 0
        down = 64 if d in ("downlink", "both") else 0
        u.probe(f"burst:{u.access}_source={up}", f"burst:{u.core}_source={down}")


def start(
    name: str, cache: Path, tmp: Path, sessions: int, command: list[str] | None
) -> Daemon:
    tmp.mkdir(parents=True, exist_ok=True)
    u = upf_host(cache, tmp, config(cache, tmp, sessions), "198.18.0.1/24", "198.19.0.1/24",
                 command=command)  # fmt: skip
    d = Daemon(name, u)
    r = u.bessctl("run", "up4", timeout=600)
    if r.returncode != 0 or "Error" in r.stdout + r.stderr:
        u.close()
        raise RuntimeError(f"{name}: bessctl run up4 failed:\n{r.stdout}\n{r.stderr}")
    t = time.monotonic()
    r = u.pfcpiface("-simulate", "create", timeout=3600)
    d.install_s = time.monotonic() - t
    if r.returncode != 0:
        u.close()
        raise RuntimeError(f"{name}: pfcpiface -simulate create failed:\n{r.stdout[-2000:]}")
    # The agent logs a rule the daemon refused and goes on (exit status 0): a figure measured
    # with sessions missing would count the generator's packets that find no PDR as cheap
    # drops. Refuse to measure such a run.
    errors = refused_rules(r)
    if errors:
        u.close()
        raise RuntimeError(
            f"{name}: pfcpiface logged {len(errors)} errors installing {sessions} sessions; "
            f"the first: {errors[0][:400]}"
        )
    u.probe("pause")
    return d


def measure(d: Daemon, direction: str, seconds: float) -> tuple[float, float]:
    """(Mpps per second of worker CPU, the worker's CPU share)."""
    d.direction(direction)
    d.upf.probe("resume")
    time.sleep(0.5)
    c0, p0, t0 = d.threads_cpu_ns(), d.passed(), time.monotonic()
    time.sleep(seconds)
    c1, p1, t1 = d.threads_cpu_ns(), d.passed(), time.monotonic()
    d.upf.probe("pause")
    # The worker is the thread that ran: the one with the most CPU time over the window.
    busy = max(c1[t] - c0.get(t, 0) for t in c1)
    return (p1 - p0) / (busy / 1e9) / 1e6, busy / 1e9 / (t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="5000,50000", help="session counts (comma-separated)")
    ap.add_argument("--reps", type=int, default=3, help="alternated runs per daemon")
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--quick", action="store_true", help="5 000 sessions, 1 run of 1 s")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench-upf: the real-script part needs root (namespaces)", file=sys.stderr)
        return 1
    if args.quick:
        args.sessions, args.reps, args.seconds = "5000", 1, 1.0
    counts = [int(x) for x in args.sessions.split(",")]
    cache = peers()
    bessd = bessd_path()
    if bessd is None:
        print("# BESS not measured: the real bessd is not built. Build it once with "
              "scripts/build-bessd.sh (about 10 minutes; cached outside the tree).")  # fmt: skip
    results: dict = {}
    installs: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-upf-") as tmp:
        for n in counts:
            daemons: list[Daemon] = []
            try:
                if bessd:
                    cmd = [str(bessd), "-f", "-p", "10514", "-m", "0", "-buffers", "262144"]
                    daemons.append(start("bess", cache, Path(tmp) / f"bess{n}", n, cmd))
                daemons.append(start("bessemer", cache, Path(tmp) / f"bessemer{n}", n, None))
                for d in daemons:
                    installs[(d.name, n)] = d.install_s
                for rep in range(args.reps):
                    order = daemons if rep % 2 == 0 else daemons[::-1]
                    for d in order:
                        for direction in DIRECTIONS:
                            mpps, share = measure(d, direction, args.seconds)
                            results.setdefault((d.name, n, direction), []).append((mpps, share))
            finally:
                for d in daemons:
                    d.upf.close()
    report(results, installs, counts, bessd is not None)
    return 0


def report(results: dict, installs: dict, counts: list[int], with_bess: bool) -> None:
    print("# up4.bess (omec's own script, sim mode, 128 B), Mpps per second of worker CPU;")
    print("# median of alternated runs [min..max], worker CPU share; ! = share below 0.95")
    print(f"{'sessions':>8}  {'direction':<9}  {'BESS':>20}  {'Bessemer':>20}  {'ratio':>6}")
    out: dict = {}

    def cell(name: str, n: int, d: str) -> tuple[str, float | None]:
        runs = results.get((name, n, d))
        if not runs:
            return "not measured", None
        m = statistics.median(r[0] for r in runs)
        lo, hi = min(r[0] for r in runs), max(r[0] for r in runs)
        share = min(r[1] for r in runs)
        mark = "!" if share < 0.95 else " "
        return f"{m:5.2f} [{lo:.2f}..{hi:.2f}]{mark}{share:.2f}", m

    for n in counts:
        for d in DIRECTIONS:
            bs, b = cell("bess", n, d)
            ms, m = cell("bessemer", n, d)
            ratio = f"{m / b:6.2f}" if b and m else "     -"
            print(f"{n:>8}  {d:<9}  {bs:>20}  {ms:>20}  {ratio}")
            out[f"up4_{d}_{n}_mpps"] = round(m, 3) if m else None
            if b:
                out[f"up4_{d}_{n}_bess_mpps"] = round(b, 3)
                out[f"up4_vs_bess_{d}_{n}"] = round(m / b, 3) if m else None
    for n in counts:
        b, m = installs.get(("bess", n)), installs.get(("bessemer", n))
        line = f"# install {n} sessions (pfcpiface -simulate create): Bessemer {m:.1f} s"
        if b:
            line += f", BESS {b:.1f} s, ratio (BESS / Bessemer) {b / m:.2f}"
        else:
            line += ", BESS not measured"
        print(line)
        out[f"install_{n}_s"] = round(m, 2)
        if b:
            out[f"install_{n}_bess_s"] = round(b, 2)
            out[f"install_vs_bess_{n}"] = round(b / m, 2)
    # The headline keys (5 000 sessions).
    for d in DIRECTIONS:
        out[f"up4_{d}_5000_mpps"] = out.get(f"up4_{d}_5000_mpps")
        out[f"up4_vs_bess_{d}"] = out.get(f"up4_vs_bess_{d}_5000") if with_bess else None
    out["install_5000_s"] = out.get("install_5000_s")
    out["install_vs_bess"] = out.get("install_vs_bess_5000") if with_bess else None
    out["bess_measured"] = with_bess
    print("UP4_JSON " + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())

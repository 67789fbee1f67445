"""`make bench-pmd`: PMDPort over DPDK, Bessemer against the real bessd, per core.

Both daemons get the same pipelines on DPDK's virtual devices (no NIC, no hugepages: bessd
with -m 0, bessemerd with --no-hugepages), worker 0 on the same core, built by BESS's own
pybess, and are measured in alternated runs as `make bench-vs-bess` does (bench/vs_bess.py:
packets per second of the worker thread's CPU time; the worker's CPU share printed, runs
below 0.95 marked; median of --runs with the spread):

  null_rx   PMDPort(vdev=net_null0): PortInc -> Sink (net_null makes 64-byte frames)
  null_tx   Source(60 B) -> PortOut(PMDPort net_null0) (net_null swallows them)
  ring_fwd  two net_ring ports seeded with one ring's worth of frames, then
            PortInc(ring0) -> PortOut(ring1) and PortInc(ring1) -> PortOut(ring0): every
            packet counted was received from one DPDK port and sent to another

  memif     two bessemerds over DPDK's memif (server: Source -> PortOut, client: PortInc ->
            Sink), each worker on its own core: packets received per second of the
            receiving worker's CPU (Bessemer only; --no-memif skips it)

Each figure includes the daemon's packet-buffer handling: BESS's mbufs are its packets;
Bessemer copies between DPDK's buffers and its own (its `show port` counts the copies).

Usage (as root; bench/vs_bess.sh finds bessd, builds bessemerd and starts this with
VS_BESS_DRIVER=bench/pmd.py):
  python pmd.py --bessd PATH --pybess DIR --bessemerd PATH [--runs 5] [--secs 1.0]
Ends with one JSON line ("bench": "pmd").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memif import build_pair, measure_rx
from memif import setup_worker as _reset
from vs_bess import bessemer_daemon, load_avg, make_daemons, measure


def _task(b, module: str, tc: str) -> None:
    b.add_tc(tc, policy="round_robin", wid=0)
    b.attach_task(module, parent=tc)


def build_null_rx(b, core: int) -> list:
    _reset(b, core)
    b.create_port("PMDPort", "p0", {"vdev": "net_null0"})
    b.create_module("PortInc", "inc", {"port": "p0"})
    b.create_module("Sink", "sink", {})
    b.connect_modules("inc", "sink", 0, 0)
    _task(b, "inc", "tc0")
    return ["tc0"]


def build_null_tx(b, core: int) -> list:
    _reset(b, core)
    b.create_port("PMDPort", "p0", {"vdev": "net_null0"})
    b.create_module("Source", "src", {"pkt_size": 60})
    b.create_module("PortOut", "out", {"port": "p0"})
    b.connect_modules("src", "out", 0, 0)
    _task(b, "src", "tc0")
    return ["tc0"]


def build_ring_fwd(b, core: int) -> list:
    _reset(b, core)
    b.create_port("PMDPort", "r0", {"vdev": "net_ring0"})
    b.create_port("PMDPort", "r1", {"vdev": "net_ring1"})
    # Seed: a Source fills ring0 (its PortOut drops what does not fit), then goes.
    b.create_module("Source", "seed", {"pkt_size": 60})
    b.create_module("PortOut", "seed_out", {"port": "r0"})
    b.connect_modules("seed", "seed_out", 0, 0)
    _task(b, "seed", "seed_tc")
    b.resume_all()
    time.sleep(0.2)
    b.pause_all()
    b.destroy_module("seed")
    b.destroy_module("seed_out")
    for a, z in (("r0", "r1"), ("r1", "r0")):
        b.create_module("PortInc", f"in_{a}", {"port": a})
        b.create_module("PortOut", f"out_{z}", {"port": z})
        b.connect_modules(f"in_{a}", f"out_{z}", 0, 0)
    _task(b, "in_r0", "tc0")
    _task(b, "in_r1", "tc1")
    return ["tc0", "tc1"]


ROWS = [
    ("null_rx", "PMDPort net_null: PortInc -> Sink", build_null_rx),
    ("null_tx", "PMDPort net_null: Source -> PortOut", build_null_tx),
    ("ring_fwd", "PMDPort net_ring x2: PortInc -> PortOut", build_ring_fwd),
]


def measure_memif(o, tmp: str, BESS) -> dict:
    """Two bessemerds joined by net_memif, each with its worker on its own core (bench/memif.py's
    `dpdk_ours` pair, 60-byte frames)."""
    tx = bessemer_daemon(o, "memif-tx", o.port + 2, tmp, BESS)
    rx = bessemer_daemon(o, "memif-rx", o.port + 3, tmp, BESS)
    try:
        tx.start()
        rx.start()
        build_pair("dpdk_ours", tx, rx, f"{tmp}/memif.sock", 60)
        runs = [measure_rx(tx, rx, o.secs, o.warm) for _ in range(o.runs)]
        return {
            "mpps": statistics.median(r.mpps for r in runs),
            "min": min(r.mpps for r in runs),
            "max": max(r.mpps for r in runs),
            "share": min(r.share for r in runs),
        }
    finally:
        for d in (tx, rx):
            d.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bessd", required=True)
    ap.add_argument("--pybess", required=True)
    ap.add_argument("--bessemerd")
    ap.add_argument("--daemons", default="bess,bessemer")
    ap.add_argument("--core", type=int, default=(os.cpu_count() or 1) - 1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--secs", type=float, default=1.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--quick", action="store_true", help="2 runs x 0.5 s")
    ap.add_argument("--no-memif", action="store_true", help="skip the memif row")
    ap.add_argument("--port", type=int, default=10630)
    o = ap.parse_args()
    if o.quick:
        o.runs, o.secs, o.warm = 2, 0.5, 0.2
    sys.path.insert(0, o.pybess)
    from pybess.bess import BESS

    tmp = tempfile.mkdtemp(prefix="bench-pmd-")
    which = o.daemons.split(",")
    daemons = make_daemons(o, which, tmp, BESS)
    print(
        f"# bench-pmd: {', '.join(d.name for d in daemons)}; worker 0 on core {o.core}; "
        f"{o.runs} alternated runs x {o.secs:.2f} s; load average {load_avg()}; "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; logs in {tmp}"
    )
    results: dict = {}
    try:
        for d in daemons:
            d.start()
        for key, title, build in ROWS:
            runs: dict = {d.name: [] for d in daemons}
            try:
                tcs = {}
                for d in daemons:
                    tcs[d.name] = build(d.b, o.core)
                for i in range(o.runs):
                    for d in daemons if i % 2 == 0 else daemons[::-1]:
                        runs[d.name].append(
                            measure(
                                d, tcs[d.name], o.secs, o.warm * (2 if i == 0 else 1)
                            )
                        )
            except Exception as e:  # noqa: BLE001 - reported as the row's result
                why = str(e)
                for d in daemons:
                    crash = d.recover()
                    if crash:
                        why = f"{d.name} exited: {crash}"
                results[key] = {"error": why}
                print(f"{key:<10} not measured: {why[:300]}", flush=True)
                continue
            results[key] = {
                n: {
                    "mpps": statistics.median(r.mpps for r in rs),
                    "min": min(r.mpps for r in rs),
                    "max": max(r.mpps for r in rs),
                    "share": min(r.share for r in rs),
                }
                for n, rs in runs.items()
            }
            print(f"{key:<10} measured", flush=True)
    finally:
        for d in daemons:
            d.stop()
    memif = None
    if "bessemer" in which and not o.no_memif:
        try:
            memif = measure_memif(o, tmp, BESS)
        except Exception as e:  # noqa: BLE001 - reported as the row's result
            print(f"memif      not measured: {str(e)[:300]}")
    names = [d.name for d in daemons]
    both = names == ["BESS", "Bessemer"]
    print()
    hdr = f"{'row':<10} {'pipeline':<42}"
    for n in names:
        hdr += f" {n + ' Mpps':>13} {'spread':>12} {'cpu':>5}"
    if both:
        hdr += f" {'ratio':>6}"
    print(hdr)
    js: dict = {"bench": "pmd"}
    for key, title, _ in ROWS:
        x = results.get(key, {"error": "no result"})
        if "error" in x:
            print(f"{key:<10} {title:<42} not measured: {x['error'][:100]}")
            continue
        line = f"{key:<10} {title:<42}"
        for n in names:
            y = x[n]
            line += f" {y['mpps']:13.2f} {y['min']:5.1f}..{y['max']:<5.1f} {y['share']:5.2f}"
            if y["share"] < 0.95:
                line += "!"
        if "Bessemer" in names:
            js[f"{key}_mpps"] = round(x["Bessemer"]["mpps"], 2)
        if "BESS" in names:
            js[f"{key}_bess_mpps"] = round(x["BESS"]["mpps"], 2)
        if both:
            ratio = (
                x["Bessemer"]["mpps"] / x["BESS"]["mpps"] if x["BESS"]["mpps"] else 0.0
            )
            line += f" {ratio:6.2f}"
            js[f"{key}_mpps_vs_bess"] = round(ratio, 3)
        print(line)
    if memif:
        print(
            f"{'memif':<10} {'bessemerd -> bessemerd over net_memif':<42} Bessemer "
            f"{memif['mpps']:.2f} Mpps per receiving core ({memif['min']:.1f}..{memif['max']:.1f},"
            f" cpu {memif['share']:.2f})"
        )
        js["memif_mpps"] = round(memif["mpps"], 2)
    if "BESS" not in names:
        print("BESS not measured")
    js["bess_measured"] = "BESS" in names
    js["runs"] = o.runs
    js["secs"] = o.secs
    js["load_avg"] = load_avg()
    print(json.dumps(js))
    return 0


if __name__ == "__main__":
    sys.exit(main())

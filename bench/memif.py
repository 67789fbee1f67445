"""`make bench-memif` (a part of `make bench-slices`): Bessemer's MemifPort against DPDK's own
net_memif, each on the same pair of daemons.

Each pair is two daemons of one kind joined over one memif socket: the server runs
Source -> PortOut(memif), the client PortInc(memif) -> Sink, each worker on its own core (the
sender on core 0, the receiver on core 1). The figure is packets the receiver took per
second of its worker's CPU (the worker polls, so that is about one core), median of --runs
alternated runs with the spread; 60-byte and 1500-byte frames.

  bessemer      bessemerd MemifPort  <->  bessemerd MemifPort
  dpdk_bess     bessd PMDPort(net_memif)  <->  bessd PMDPort(net_memif): DPDK's memif in
                the real BESS (needs bessd built: make bench-vs-bess builds it once)
  dpdk_ours     bessemerd PMDPort(net_memif)  <->  the same (DPDK's memif in bessemerd)

`memif_vs_dpdk_memif` = bessemer / dpdk_bess at 60 bytes (bessemer / dpdk_ours where bessd is
not built, said so in the JSON line).

Usage (root): bench/vs_bess.sh finds bessd and pybess and starts this with
VS_BESS_DRIVER=bench/memif.py; without bessd: python memif.py --pybess DIR --bessemerd PATH.
Ends with one JSON line ("bench": "memif").
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
from vs_bess import Daemon, Run, bessemer_daemon, load_avg


def setup_worker(b, core: int) -> None:
    """An empty daemon with worker 0 on `core`, paused."""
    b.pause_all()
    b.reset_all()
    b.add_worker(0, core)
    b.pause_all()


def _task(b, module: str) -> None:
    b.add_tc("tc0", policy="round_robin", wid=0)
    b.attach_task(module, parent="tc0")


def _ports(kind: str, sock: str) -> tuple:
    """(driver, server arg, client arg) for a pair kind."""
    if kind == "bessemer":
        return (
            "MemifPort",
            {"socket": sock, "role": "server"},
            {"socket": sock, "role": "client"},
        )
    vdev = f"net_memif0,socket={sock},socket-abstract=no,role="
    return "PMDPort", {"vdev": vdev + "server"}, {"vdev": vdev + "client"}


def _create_memif_port(b, arg: dict) -> None:
    """BESS's pybess knows only BESS's drivers' messages: MemifPortArg (two string fields)
    is encoded here, as protobuf does, and sent through pybess's own request call."""

    def field(n: int, s: str) -> bytes:
        data = s.encode()
        assert len(data) < 128
        return bytes([n << 3 | 2, len(data)]) + data

    from pybess.builtin_pb import bess_msg_pb2

    req = bess_msg_pb2.CreatePortRequest(name="m", driver="MemifPort")
    req.arg.type_url = "type.googleapis.com/bessemer.pb.MemifPortArg"
    req.arg.value = field(1, arg["socket"]) + field(2, arg["role"])
    b._request("CreatePort", req)


def build_pair(kind: str, tx: Daemon, rx: Daemon, sock: str, size: int) -> None:
    driver, srv, cli = _ports(kind, sock)
    setup_worker(tx.b, 0)
    setup_worker(rx.b, 1)
    for d, arg in ((tx, srv), (rx, cli)):
        if driver == "MemifPort":
            _create_memif_port(d.b, arg)
        else:
            d.b.create_port(driver, "m", arg)
    tx.b.create_module("Source", "src", {"pkt_size": size})
    tx.b.create_module("PortOut", "out", {"port": "m"})
    tx.b.connect_modules("src", "out", 0, 0)
    _task(tx.b, "src")
    rx.b.create_module("PortInc", "inc", {"port": "m"})
    rx.b.create_module("Sink", "sink", {})
    rx.b.connect_modules("inc", "sink", 0, 0)
    _task(rx.b, "inc")
    deadline = time.monotonic() + 10
    while not rx.b.get_link_status("m").link_up:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind}: memif did not connect")
        time.sleep(0.05)


def measure_rx(tx: Daemon, rx: Daemon, secs: float, warm: float) -> Run:
    rx.b.resume_all()
    tx.b.resume_all()
    time.sleep(warm)
    p0, c0, w0 = rx.tc_packets("tc0"), rx.threads(), time.monotonic()
    time.sleep(secs)
    p1, c1, w1 = rx.tc_packets("tc0"), rx.threads(), time.monotonic()
    tx.b.pause_all()
    rx.b.pause_all()
    d = {t: c1[t] - c0.get(t, 0) for t in c1}
    cpu = max(max(d.values()), 1) / 1e9
    return Run((p1 - p0) / cpu / 1e6, cpu / (w1 - w0), p1 - p0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bessd")
    ap.add_argument("--pybess", required=True)
    ap.add_argument("--bessemerd", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--secs", type=float, default=1.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument("--quick", action="store_true", help="2 runs x 0.5 s")
    ap.add_argument("--port", type=int, default=10650)
    ap.add_argument("--sizes", default="60,1500")
    o = ap.parse_args()
    if o.quick:
        o.runs, o.secs, o.warm = 2, 0.5, 0.2
    sys.path.insert(0, o.pybess)
    from pybess.bess import BESS

    tmp = tempfile.mkdtemp(prefix="bench-memif-")
    pairs: dict = {}
    port = o.port
    for kind in ("bessemer", "dpdk_bess", "dpdk_ours"):
        if kind == "dpdk_bess":
            if not o.bessd:
                continue
            mk = []
            for i, core in ((0, 0), (1, 1)):
                cmd = [o.bessd, "-f", "-p", str(port + i), "-m", "0", "-c", str(core)]
                cmd += ["-i", f"{tmp}/bessd{i}.pid"]
                mk.append(
                    Daemon(f"bessd{i}", cmd, port + i, f"{tmp}/bessd{i}.log", BESS)
                )
        else:
            mk = [bessemer_daemon(o, f"{kind}{i}", port + i, tmp, BESS) for i in (0, 1)]
        port += 2
        pairs[kind] = mk
    sizes = [int(s) for s in o.sizes.split(",")]
    print(
        f"# bench-memif: pairs {', '.join(pairs)}; sender on core 0, receiver on core 1; "
        f"{o.runs} alternated runs x {o.secs:.2f} s; load average {load_avg()}; "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; logs in {tmp}"
    )
    if not o.bessd:
        print(
            "BESS not measured (bessd is not built; make bench-vs-bess builds it once)"
        )
    results: dict = {}
    try:
        for ds in pairs.values():
            for d in ds:
                d.start()
        for size in sizes:
            runs: dict = {k: [] for k in pairs}
            errors: dict = {}
            for k, (tx, rx) in pairs.items():
                try:
                    build_pair(k, tx, rx, f"{tmp}/{k}-{size}.sock", size)
                except Exception as e:  # noqa: BLE001 - reported as the row's result
                    errors[k] = str(e)[:200]
            order = [k for k in pairs if k not in errors]
            for i in range(o.runs):
                for k in order if i % 2 == 0 else order[::-1]:
                    tx, rx = pairs[k]
                    runs[k].append(
                        measure_rx(tx, rx, o.secs, o.warm * (2 if i == 0 else 1))
                    )
            for k in pairs:
                if k in errors:
                    results[(k, size)] = {"error": errors[k]}
                else:
                    rs = runs[k]
                    results[(k, size)] = {
                        "mpps": statistics.median(r.mpps for r in rs),
                        "min": min(r.mpps for r in rs),
                        "max": max(r.mpps for r in rs),
                        "share": min(r.share for r in rs),
                    }
    finally:
        for ds in pairs.values():
            for d in ds:
                d.stop()
    print()
    print(
        f"{'pair':<10} {'size':>5} {'Mpps/rx core':>13} {'spread':>12} {'cpu':>5} {'vs DPDK':>8}"
    )
    js: dict = {"bench": "memif"}
    peer = "dpdk_bess" if "dpdk_bess" in pairs else "dpdk_ours"
    for size in sizes:
        base = results.get((peer, size), {})
        for k in pairs:
            x = results[(k, size)]
            if "error" in x:
                print(f"{k:<10} {size:>5} not measured: {x['error']}")
                continue
            ratio = ""
            if k == "bessemer" and base.get("mpps"):
                r = x["mpps"] / base["mpps"]
                ratio = f"{r:8.2f}"
                js[f"memif_vs_dpdk_memif_{size}"] = round(r, 3)
            print(
                f"{k:<10} {size:>5} {x['mpps']:13.2f} {x['min']:5.2f}..{x['max']:<6.2f}"
                f"{x['share']:5.2f}{'!' if x['share'] < 0.95 else ' '}{ratio}"
            )
            js[f"{k}_{size}_mpps"] = round(x["mpps"], 2)
    if f"memif_vs_dpdk_memif_{sizes[0]}" in js:
        js["memif_vs_dpdk_memif"] = js[f"memif_vs_dpdk_memif_{sizes[0]}"]
    js["dpdk_peer"] = "bessd" if peer == "dpdk_bess" else "bessemerd PMDPort"
    js["bess_measured"] = "dpdk_bess" in pairs
    js["runs"] = o.runs
    js["secs"] = o.secs
    js["load_avg"] = load_avg()
    print(json.dumps(js))
    return 0


if __name__ == "__main__":
    sys.exit(main())

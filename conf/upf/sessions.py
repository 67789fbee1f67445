"""Installs and removes UPF sessions on the pipeline of conf/upf/upf.bess with the
ModuleCommand calls a PFCP agent (omec-project/upf's pfcpiface) makes, and reads the
statistics the agent reads (FlowMeasure flip and read, Measure get_summary, path monitoring,
GetPortStats).

    python conf/upf/sessions.py --port 10514 --sessions 1000 add
    python conf/upf/sessions.py --sessions 10 delete      # sessions 0..9
    python conf/upf/sessions.py clear                     # every PDR, FAR and QER
    python conf/upf/sessions.py stats

As the agent does when it starts, `add` first clears every table (unless --keep).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))

import rules
import sim
from bessemer.client import BESS

PERCENTILES = [50.0, 90.0, 99.0]
FLOW_MEASURES = ("preQosFlowMeasure", "postDLQosFlowMeasure", "postULQosFlowMeasure")


def _try(what: str, call):
    try:
        return call()
    except BESS.Error as exc:
        print(f"{what}: {exc.errmsg}")
        return None


def stats(bess: BESS, show: int) -> None:
    """Prints what the agent's metrics collector reads."""
    modules = {m.name for m in bess.list_modules()}
    for port in bess.list_ports():
        s = bess.get_port_stats(port.name)
        print(
            f"port {port.name}: rx {s.inc.packets} pkts {s.inc.bytes} B drop {s.inc.dropped}, "
            f"tx {s.out.packets} pkts {s.out.bytes} B drop {s.out.dropped}"
        )
    for iface in ("access", "core"):
        name = iface + "_measure"
        if name not in modules:
            continue
        arg = {
            "clear": True,
            "latency_percentiles": PERCENTILES,
            "jitter_percentiles": PERCENTILES,
        }
        r = _try(
            name,
            lambda n=name, a=arg: bess.run_module_command(
                n, "get_summary", "MeasureCommandGetSummaryArg", a
            ),
        )
        if r is not None:
            lat = list(r.latency.percentile_values_ns)
            print(f"{name}: {r.packets} pkts, latency p50/p90/p99 {lat} ns")
    if all(m in modules for m in FLOW_MEASURES):
        flip = bess.run_module_command(
            FLOW_MEASURES[0], "flip", "FlowMeasureCommandFlipArg"
        )
        arg = {
            "flag_to_read": flip.old_flag,
            "clear": True,
            "latency_percentiles": PERCENTILES,
            "jitter_percentiles": PERCENTILES,
        }
        for name in FLOW_MEASURES:
            r = bess.run_module_command(name, "read", "FlowMeasureCommandReadArg", arg)
            total = sum(s.total_packets for s in r.statistics)
            print(f"{name}: {len(r.statistics)} (fseid, pdr) pairs, {total} pkts")
            for s in list(r.statistics)[:show]:
                lat = list(s.latency.percentile_values_ns)
                print(
                    f"  fseid {s.fseid} pdr {s.pdr}: {s.total_packets} pkts, latency {lat} ns"
                )
    if "gtpuPathMonitoring" in modules:
        r = bess.run_module_command(
            "gtpuPathMonitoring",
            "read",
            "GtpuPathMonitoringCommandReadArg",
            {"clear": False},
        )
        for s in r.statistics:
            print(
                f"gNB {sim.int2ip(s.gnb_ip)}: {s.count} echoes, "
                f"mean {s.latency_mean} ns"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=10514)
    p.add_argument("--sessions", type=int, default=64, help="sessions 0..K-1")
    p.add_argument("--first", type=int, default=0, help="first session number")
    p.add_argument(
        "--mbr-kbps", type=int, default=0, help="meter each session (0: unmetered)"
    )
    p.add_argument(
        "--keep", action="store_true", help="add without clearing the tables first"
    )
    p.add_argument("--gnb", action="append", default=[], help="a gNB to monitor (echo)")
    p.add_argument("--show", type=int, default=4, help="sessions shown by stats")
    p.add_argument("action", choices=["add", "delete", "clear", "stats"])
    a = p.parse_args(argv)
    bess = BESS(a.host, a.port)
    plan = rules.Plan()
    span = range(a.first, a.first + a.sessions)
    t0 = time.monotonic()
    if a.action == "add":
        if not a.keep:
            rules.clear_all(bess)
        for i in span:
            rules.add_session(bess, plan, i, a.mbr_kbps)
        for gnb in a.gnb or [plan.gnb_ip]:
            bess.run_module_command(
                "gtpuPathMonitoring",
                "add",
                "GtpuPathMonitoringCommandAddDeleteArg",
                {"gnb_ip": sim.ip2int(gnb)},
            )
    elif a.action == "delete":
        for i in span:
            rules.delete_session(bess, plan, i)
    elif a.action == "clear":
        rules.clear_all(bess)
    else:
        stats(bess, a.show)
        return 0
    n = len(span) if a.action != "clear" else 0
    print(f"{a.action}: {n} sessions in {time.monotonic() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

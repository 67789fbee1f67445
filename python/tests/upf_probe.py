"""Reads a daemon's state for the omec UPF tests, from inside the test's network namespace
(the daemon, bessctl and pfcpiface run there; the test runs this with `ip netns exec`).

    python upf_probe.py PORT REQUEST...   prints one JSON object

Requests: `desc:MODULE` (GetModuleInfo's desc), `ogates:MODULE` ({gate: packets}),
`igates:MODULE` (packets in), `drops:MODULE` ({reason: count}), `modules` (names and
classes), `measure:MODULE` (Measure's get_summary), `rules:MODULE` (get_runtime_config's
rules, ExactMatch/WildcardMatch), `ports` (names and drivers); and, for benchmarks,
`burst:MODULE=N` (a Source's set_burst), `pause`, `resume` (all workers). Works against
bessemerd and the real bessd alike (one BESS protocol)."""

from __future__ import annotations

import json
import sys

from google.protobuf.json_format import MessageToDict

from bessemer.client import BESS


def main() -> None:
    b = BESS(port=int(sys.argv[1]), timeout=20)
    out: dict = {}
    for req in sys.argv[2:]:
        kind, _, name = req.partition(":")
        if kind == "modules":
            out[req] = {m.name: m.mclass for m in b.list_modules()}
        elif kind == "ports":
            out[req] = {p.name: p.driver for p in b.list_ports()}
        elif kind == "desc":
            out[req] = b.get_module_info(name).desc
        elif kind == "ogates":
            out[req] = {g.ogate: g.pkts for g in b.get_module_info(name).ogates}
        elif kind == "igates":
            out[req] = sum(g.pkts for g in b.get_module_info(name).igates)
        elif kind == "drops":
            out[req] = {d.reason: d.count for d in b.get_module_info(name).drops}
        elif kind == "burst":
            mod, _, n = name.partition("=")
            b.run_module_command(mod, "set_burst", "SourceCommandSetBurstArg", {"burst": int(n)})
            out[req] = int(n)
        elif kind == "pause":
            b.pause_all()
            out[req] = True
        elif kind == "resume":
            b.resume_all()
            out[req] = True
        elif kind == "measure":
            r = b.run_module_command(name, "get_summary", "MeasureCommandGetSummaryArg", {})
            out[req] = MessageToDict(r, preserving_proto_field_name=True)
        elif kind == "rules":
            r = b.run_module_command(name, "get_runtime_config", "EmptyArg", {})
            out[req] = MessageToDict(r, preserving_proto_field_name=True).get("rules", [])
        else:
            raise SystemExit(f"upf_probe: unknown request {req!r}")
    b.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

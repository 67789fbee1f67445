"""Text (and Graphviz) renderings of the daemon's state for the CLI."""

from __future__ import annotations

from typing import Any


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3f}{unit}"
    return f"{x:.0f}"


def message(msg, arg: dict[str, Any] | None = None) -> str:
    """A protobuf message (a command's result) as indented `key: value` lines; `arg` is the
    command's argument, which says what some results are (percentiles)."""
    from google.protobuf import json_format

    d = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    if arg:
        _label_percentiles(d, arg)
    return value(d) if d else "(no result)"


def _percentile_label(q: Any) -> str:
    try:
        return f"p{float(q):g}"
    except (TypeError, ValueError):
        return f"p{q}"


def _label_percentiles(d: Any, arg: dict[str, Any]) -> None:
    """Measure's get_summary and FlowMeasure's read answer a histogram's percentiles as a
    bare list in the order asked (`latency_percentiles`, `jitter_percentiles`): each value
    is labelled with its percentile (`p50`, `p99`, `p99.9`), wherever the histogram is."""
    if isinstance(d, list):
        for x in d:
            _label_percentiles(x, arg)
        return
    if not isinstance(d, dict):
        return
    for key, x in d.items():
        asked = arg.get(f"{key}_percentiles") if isinstance(x, dict) else None
        vals = x.get("percentile_values_ns") if isinstance(x, dict) else None
        if isinstance(asked, (list, tuple)) and isinstance(vals, list) and len(vals) == len(asked):
            x["percentile_values_ns"] = {
                _percentile_label(q): v for q, v in zip(asked, vals, strict=True)
            }
        else:
            _label_percentiles(x, arg)


def value(v: Any, indent: int = 0) -> str:
    """A command result (dict/list) as indented `key: value` lines."""
    pad = "  " * indent
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{k}:\n{value(x, indent + 1)}")
            else:
                out.append(f"{pad}{k}: {x}")
        return "\n".join(out)
    if isinstance(v, list):
        return "\n".join(
            f"{pad}-\n{value(x, indent + 1)}" if isinstance(x, (dict, list)) else f"{pad}- {x}"
            for x in v
        )
    return f"{pad}{v}"


def workers(ws) -> str:
    if not ws:
        return "no workers"
    rows = [
        [w.wid, w.core, "running" if w.running else "paused", w.num_tcs, w.silent_drops] for w in ws
    ]
    return _table(["worker", "core", "state", "classes", "silent drops"], rows)


def _tc(c):
    return getattr(c, "class")


def tcs(classes) -> str:
    """Traffic classes as an indented tree per worker."""
    if not classes:
        return "no traffic classes"
    by_parent: dict[tuple[int, str], list] = {}
    for c in classes:
        by_parent.setdefault((_tc(c).wid, c.parent), []).append(_tc(c))
    lines: list[str] = []

    def walk(wid: int, parent: str, depth: int) -> None:
        for t in by_parent.get((wid, parent), []):
            extra = []
            if t.policy == "priority" or t.HasField("priority"):
                extra.append(f"priority={t.priority}")
            if t.HasField("share"):
                extra.append(f"share={t.share}")
            if t.resource:
                extra.append(f"resource={t.resource}")
            for k, v in t.limit.items():
                extra.append(f"limit.{k}={v}")
            if t.leaf_module_name:
                extra.append(f"task={t.leaf_module_name}:{t.leaf_module_taskid}")
            if t.blocked:
                extra.append("blocked")
            lines.append("  " * depth + f"{t.name} ({t.policy}) " + " ".join(extra))
            walk(wid, t.name, depth + 1)

    for wid in sorted({_tc(c).wid for c in classes}):
        lines.append(f"worker {wid}:")
        walk(wid, "", 1)
    return "\n".join(lines)


def _edges(infos: dict) -> list[tuple[str, int, str, int, int, int]]:
    out = []
    for name, info in infos.items():
        for og in info.ogates:
            out.append((name, og.ogate, og.name, og.igate, og.pkts, og.bytes))
    return sorted(out)


def pipeline(mods, infos: dict) -> str:
    """The graph in topological order, each module with its outgoing edges and counters."""
    if not mods:
        return "no modules"
    classes = {m.name: m.mclass for m in mods}
    edges = _edges(infos)
    indeg = {m.name: 0 for m in mods}
    for _, _, dst, _, _, _ in edges:
        indeg[dst] = indeg.get(dst, 0) + 1
    order, ready = [], sorted(n for n, d in indeg.items() if d == 0)
    seen = set()
    while ready:
        n = ready.pop(0)
        if n in seen:
            continue
        seen.add(n)
        order.append(n)
        for src, _, dst, _, _, _ in edges:
            if src == n:
                indeg[dst] -= 1
                if indeg[dst] <= 0 and dst not in seen:
                    ready.append(dst)
    order += sorted(n for n in classes if n not in seen)  # cycles
    lines = []
    for n in order:
        desc = next((m.desc for m in mods if m.name == n), "")
        lines.append(f"+-- {n} :: {classes[n]}" + (f"  [{desc}]" if desc else ""))
        for src, og, dst, ig, pkts, nbytes in edges:
            if src == n:
                count = f"{pkts:,} pkts" + (f", {nbytes:,} bytes" if nbytes else "")
                lines.append(f"|     :{og} --({count})--> {ig}:{dst}")
    return "\n".join(lines)


def dot(mods, infos: dict) -> str:
    """The graph as Graphviz DOT, edges labelled with packet counts."""
    lines = ["digraph pipeline {", "  rankdir=LR;", "  node [shape=box];"]
    for m in mods:
        lines.append(f'  "{m.name}" [label="{m.name}\\n{m.mclass}"];')
    for src, og, dst, ig, pkts, _ in _edges(infos):
        lines.append(f'  "{src}" -> "{dst}" [label="{og}:{ig}\\n{pkts} pkts"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def module(info) -> str:
    lines = [f"{info.name} :: {info.mclass}" + (f"  ({info.desc})" if info.desc else "")]
    for ig in info.igates:
        ups = ", ".join(f"{o.name}:{o.ogate}" for o in ig.ogates)
        lines.append(f"  input  {ig.igate}: {ig.pkts:,} pkts, {ig.cnt:,} batches  <- {ups}")
    for og in info.ogates:
        hooks = " ".join(f"[{h.class_name}]" for h in og.gatehooks)
        lines.append(
            f"  output {og.ogate}: {og.pkts:,} pkts, {og.cnt:,} batches, {og.bytes:,} bytes"
            f"  -> {og.igate}:{og.name} {hooks}".rstrip()
        )
    drops = list(getattr(info, "drops", []))
    if drops:
        # Bessemer names every reason its class drops for; BESS reports deadends only.
        shown = ", ".join(f"{d.reason} {d.count:,}" for d in drops)
        lines.append(f"  drops: {shown}")
    elif info.deadends:
        lines.append(f"  deadends: {info.deadends:,}")
    for a in info.metadata:
        lines.append(f"  metadata {a.name} ({a.size} B, {a.mode}) at offset {a.offset}")
    return "\n".join(lines)


ERRORS_SORT = ("count", "rate", "module", "reason")


def errors(resp, sort: str = "count", ports=()) -> str:
    """`show errors`: one row per module and drop reason, like VPP's, and one per port and
    direction that dropped (`ports`: (port, driver, reason, count) tuples; a port's drops
    have no daemon-side rate, so `per s` is '-')."""
    rows: list[list[Any]] = [
        [m.name, m.mclass, d.reason, d.count, d.rate]
        for m in (resp.modules if resp is not None else [])
        for d in m.drops
    ]
    rows += [[name, driver, reason, count, None] for name, driver, reason, count in ports]
    if not rows:
        return "no packets dropped"
    key = {
        "count": lambda r: (-r[3], r[0], r[2]),
        "rate": lambda r: (r[4] is None, -(r[4] or 0.0), r[0], r[2]),
        "module": lambda r: (r[0], r[2]),
        "reason": lambda r: (r[2], r[0]),
    }[sort]
    rows.sort(key=key)
    total = sum(r[3] for r in rows)
    for r in rows:
        r[4] = "-" if r[4] is None else f"{r[4]:,.1f}"
    headers = ["module/port", "class", "reason", "packets", "per s"]
    return _table(headers, rows) + f"\ntotal: {total:,}"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def runtime(resp) -> str:
    """`show runtime`, as VPP's: per worker, one row per module it called: calls, packets,
    packets per call, and the sampled TSC cycles per packet and per call."""
    hz = resp.tsc_hz or 1
    head = f"time {resp.seconds:,.1f} s since cleared"
    if resp.enabled:
        head += (
            f"; cycles from sampled calls (about 1 run in {resp.sample_period} timed, "
            f"TSC {hz / 1e9:.2f} GHz)"
        )
    else:
        head += (
            "; runtime sampling is off (bessemerd --no-runtime): only batches given to "
            "modules are counted, no task runs, no cycles"
        )
    by_worker: dict[int, list[list[Any]]] = {}
    for m in resp.modules:
        for w in m.workers:
            per_call = w.packets / w.calls if w.calls else None
            cpp = w.sampled_cycles / w.sampled_packets if w.sampled_packets else None
            cpc = w.sampled_cycles / w.sampled_calls if w.sampled_calls else None
            by_worker.setdefault(w.wid, []).append(
                [
                    m.name,
                    m.mclass,
                    f"{w.calls:,}",
                    f"{w.packets:,}",
                    _num(per_call, 2),
                    _num(cpp),
                    _num(cpc),
                    f"{w.sampled_calls:,}",
                ]
            )
    if not by_worker:
        return head + "\nno module has run since"
    headers = ["module", "class", "calls", "packets", "pkts/call", "cycles/pkt"]
    headers += ["cycles/call", "sampled"]
    parts = [head]
    for wid in sorted(by_worker):
        parts.append(f"\nworker {wid}\n" + _table(headers, by_worker[wid]))
    return "\n".join(parts)


def _ns(v: float) -> str:
    """A duration in ns with a readable unit."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} ns"


def _pct_label(p: float) -> str:
    return f"p{p:g}"


def latency(module: str, mclass: str, resp, width: int = 40) -> str:
    """`show latency`: per histogram, labelled percentiles and max, then one bar per
    bucket (empty buckets at either end left out)."""
    parts = []
    for h in resp.histograms:
        head = f"{h.name} of {module} ({mclass}): {h.count:,} samples"
        head += f", resolution {_ns(h.resolution_ns)}"
        if h.above_range:
            head += f", {h.above_range:,} above the range"
        if not h.count:
            parts.append(head + "\n  no samples")
            continue
        cells = [f"{_pct_label(p.percentile)} {_ns(p.value_ns)}" for p in h.percentiles]
        cells.append(f"max {_ns(h.max_ns)}")
        cells.append(f"avg {_ns(h.sum_ns / h.count)}")
        lines = [head, "  " + "   ".join(cells)]
        counts = list(h.counts)
        nz = [i for i, c in enumerate(counts) if c]
        lo, hi = nz[0], nz[-1]
        top = max(counts)
        labels = [f"<= {_ns(b)}" for b in h.bounds_ns] + [f"> {_ns(h.bounds_ns[-1])}"]
        lw = max(len(labels[i]) for i in range(lo, hi + 1))
        cum = sum(counts[:lo])
        for i in range(lo, hi + 1):
            c = counts[i]
            cum += c
            bar = "#" * max(1 if c else 0, round(c / top * width))
            lines.append(f"  {labels[i]:>{lw}} | {bar:<{width}} {c:,} ({cum / h.count * 100:.1f}%)")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) if parts else f"{module} keeps no histogram"


def ports(ps, stats: dict) -> str:
    if not ps:
        return "no ports"
    rows = []
    for p in ps:
        st = stats[p.name]
        rows.append(
            [
                p.name,
                p.driver,
                p.mac_addr,
                f"{p.num_inc_q}/{p.num_out_q}",
                st.inc.packets,
                st.inc.dropped,
                st.out.packets,
                st.out.dropped,
            ]
        )
    return _table(
        ["port", "driver", "mac", "queues in/out", "rx pkts", "rx drop", "tx pkts", "tx drop"], rows
    )


def hooks(hs) -> str:
    if not hs:
        return "no gate hooks"
    rows = []
    for h in hs:
        side = h.WhichOneof("gate")
        rows.append([h.module_name, side, getattr(h, side), h.class_name, h.hook_name])
    return _table(["module", "gate", "#", "class", "name"], rows)


def status(version: str, ws, mods, ps, classes, hs) -> str:
    running = sum(1 for w in ws if w.running)
    return "\n".join(
        [
            f"daemon:   {version}",
            f"workers:  {len(ws)} ({running} running)"
            + "".join(f"\n  worker {w.wid} on core {w.core}" for w in ws),
            f"modules:  {len(mods)}",
            f"ports:    {len(ps)}",
            f"classes:  {len(classes)}",
            f"hooks:    {len(hs)}",
        ]
    )


def edge_counters(infos: dict, hook: str = "") -> dict:
    """Per connection, keyed by (src, ogate, dst, igate): the daemon's timestamp of the
    gate's counters, packets, bytes, and whether the gate counts bytes (Track hook `hook`
    on it, or bytes counted already)."""
    out = {}
    for name, info in infos.items():
        for og in info.ogates:
            counting = og.bytes > 0 or bool(hook) and any(h.hook_name == hook for h in og.gatehooks)
            out[(name, og.ogate, og.name, og.igate)] = (og.timestamp, og.pkts, og.bytes, counting)
    return out


def per_second(t0: float, t1: float, delta: int | float) -> float | None:
    """A counter's change per second between two samples, over the timestamps the daemon
    put beside them (as bessctl computes it); None when it cannot be known (no time between
    them, or a counter that went back: reset or re-created)."""
    if t1 <= t0 or delta < 0:
        return None
    return delta / (t1 - t0)


def _rate(r: float | None, scale: float = 1) -> str:
    return "-" if r is None else _si(r * scale)


def edge_rates(prev: dict, cur: dict) -> str:
    """`monitor pipeline`: packets and bits per second on each connection. A gate whose
    timestamp is 0 keeps no counters (BESS without a Track hook): '?'; a connection new
    since the last sample, or a gate that counts no bytes: '-'."""
    rows = []
    for key in sorted(cur):
        t1, p1, b1, counting = cur[key]
        s, og, d, ig = key
        if t1 == 0:
            pps = bps = "?"
        elif key not in prev:
            pps = bps = "-"
        else:
            t0, p0, b0, _ = prev[key]
            pps = _rate(per_second(t0, t1, p1 - p0))
            bps = _rate(per_second(t0, t1, b1 - b0), 8) if counting else "-"
        rows.append([f"{s}:{og} -> {ig}:{d}", pps, bps, f"{p1:,}"])
    if not rows:
        return "no connections"
    return _table(["connection", "pkts/s", "bits/s", "total pkts"], rows)


def _rates(prev: dict, cur: dict, key: str, columns) -> str:
    """One row per name in `cur` (messages with the daemon's `timestamp`): the name, then
    each (header, counter, scale) column as the counter's change per second of the daemon's
    clock (times `scale`); '-' for a name new since the last sample."""
    rows = []
    for name in sorted(cur):
        b, a = cur[name], prev.get(name)
        rows.append(
            [name]
            + [
                "-"
                if a is None
                else _rate(per_second(a.timestamp, b.timestamp, get(b) - get(a)), k)
                for _, get, k in columns
            ]
        )
    return _table([key] + [h for h, _, _ in columns], rows)


def port_rates(prev: dict, cur: dict) -> str:
    if not cur:
        return "no ports"
    columns = [
        ("rx pkts/s", lambda s: s.inc.packets, 1),
        ("rx bits/s", lambda s: s.inc.bytes, 8),
        ("rx drop/s", lambda s: s.inc.dropped, 1),
        ("tx pkts/s", lambda s: s.out.packets, 1),
        ("tx bits/s", lambda s: s.out.bytes, 8),
        ("tx drop/s", lambda s: s.out.dropped, 1),
    ]
    return _rates(prev, cur, "port", columns)


def tc_rates(prev: dict, cur: dict) -> str:
    if not cur:
        return "no traffic classes"
    columns = [
        ("runs/s", lambda s: s.count, 1),
        ("cycles/s", lambda s: s.cycles, 1),
        ("pkts/s", lambda s: s.packets, 1),
        ("bits/s", lambda s: s.bits, 1),
    ]
    return _rates(prev, cur, "class", columns)

"""`make bench-vs-bess`: the real omec bessd and bessemerd, daemon to daemon, per core.

One client (BESS's own pybess, which speaks to both daemons) builds the same pipeline on
each daemon (worker 0 on the same core in both), then alternates between them: resume one,
let it warm up, read its counters for --secs, pause it; then the other; --runs times. A
figure is packets per second of the worker thread's CPU time (/proc/PID/task/TID/schedstat;
the worker is the daemon's thread that ran most in the run), so time the worker lost to
other load on this shared machine counts in neither; the worker's CPU share (CPU time over
wall time) is printed and runs below 0.95 are marked. Packets are those the pipeline's
counted task processed in the run (its traffic class's packet counter, which both daemons
keep whatever else is configured: no hook is added to the measured path). After the runs,
a Track hook on the Sink's input counts what arrived, so that a pipeline one daemon drops
and the other passes shows up (the `delivered` column: packets at the Sink per packet
counted).

Every row is Source -> [front-end stages] -> CLASS -> [after] -> Sink. The front end (the
same pipeline without the class; measured once per distinct front end) gives the class's
own cost in cycles per packet: row minus front end, at the TSC rate.

Usage (as root; bench/vs_bess.sh finds bessd and builds bessemerd first):
  python vs_bess.py --bessd PATH --pybess DIR --bessemerd PATH [--runs 3] [--secs 1.0]
                    [--rows SUBSTR,...] [--quick] [--daemons bess,bessemer] [--json-out F]
Ends with one JSON line ("bench": "vs_bess").
"""

from __future__ import annotations

import argparse
import fnmatch
import ipaddress
import json
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# ---- frames --------------------------------------------------------------------------------

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


def csum(data: bytes) -> int:
    """The Internet checksum of `data`."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4(a: str | int) -> bytes:
    return ipaddress.IPv4Address(a).packed


def ipv4(
    proto: int,
    payload: bytes,
    src: str = "10.0.0.1",
    dst: str = "10.0.0.2",
    ttl: int = 64,
    ident: int = 1,
    frag: int = 0,
) -> bytes:
    """An IPv4 header (valid checksum) and `payload`."""
    h = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(payload),
        ident,
        frag,
        ttl,
        proto,
        0,
        ip4(src),
        ip4(dst),
    )
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def eth(
    payload: bytes, ethertype: int = 0x0800, dst: bytes = MAC_B, src: bytes = MAC_A
) -> bytes:
    return dst + src + struct.pack("!H", ethertype) + payload


def pad(frame: bytes, size: int) -> bytes:
    return frame + bytes(max(0, size - len(frame)))


def udp_frame(
    size: int = 60,
    src: str = "10.0.0.1",
    dst: str = "10.0.0.2",
    sport: int = 1234,
    dport: int = 53,
) -> bytes:
    """Ethernet/IPv4/UDP of `size` bytes (lengths and the IPv4 checksum valid)."""
    plen = size - 14 - 20 - 8
    udp = struct.pack("!HHHH", sport, dport, 8 + plen, 0) + bytes(plen)
    return eth(ipv4(17, udp, src, dst))


def tcp_frame(
    size: int = 60,
    flags: int = 0x10,
    payload: bytes = b"",
    sport: int = 40000,
    dport: int = 80,
    seq: int = 1000,
    src: str = "10.0.0.1",
    dst: str = "93.184.216.34",
) -> bytes:
    tcp = (
        struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 0x50, flags, 0xFFFF, 0, 0)
        + payload
    )
    return pad(eth(ipv4(6, tcp, src, dst)), size)


def vlan_frame(vid: int = 100) -> bytes:
    t = udp_frame(60)
    return t[:12] + struct.pack("!HH", 0x8100, vid) + t[12:]


def mpls_frame() -> bytes:
    t = udp_frame(60)
    return t[:12] + struct.pack("!HI", 0x8847, (100 << 12) | 0x100 | 64) + t[14:]


def vxlan_frame() -> bytes:
    inner = udp_frame(60)
    vx = struct.pack("!II", 0x08000000, 100 << 8) + inner
    return eth(
        ipv4(
            17,
            struct.pack("!HHHH", 49152, 4789, 8 + len(vx), 0) + vx,
            "192.168.0.1",
            "192.168.0.2",
        )
    )


def gtpu_frame() -> bytes:
    """A G-PDU (TEID 0x11223344, PDU session container, QFI 9) carrying udp_frame's IPv4."""
    inner = udp_frame(60)[14:]
    inner = inner[:20] + inner[20:28] + b"\xca\xfe\xba\xbe"  # 32-byte inner packet
    inner = ipv4(17, inner[20:], "10.0.0.1", "8.8.8.8")
    ext = bytes([0x01, 0x00, 0x09, 0x00])  # PSC: length 1, DL PDU type 0, QFI 9, next 0
    gtp = struct.pack("!BBHI", 0x34, 0xFF, 4 + len(ext) + len(inner), 0x11223344)
    gtp += struct.pack("!HBB", 0, 0, 0x85) + ext + inner
    return eth(
        ipv4(
            17,
            struct.pack("!HHHH", 2152, 2152, 8 + len(gtp), 0) + gtp,
            "192.168.0.1",
            "192.168.0.2",
        )
    )


def gtpu_echo_frame() -> bytes:
    gtp = struct.pack("!BBHI", 0x32, 1, 4, 0) + struct.pack("!HBB", 7, 0, 0)
    return eth(
        ipv4(
            17,
            struct.pack("!HHHH", 40000, 2152, 8 + len(gtp), 0) + gtp,
            "192.168.0.1",
            "192.168.0.2",
        )
    )


def arp_request() -> bytes:
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + MAC_A + ip4("10.0.0.2") + bytes(6)
    arp += ip4("10.0.0.1")
    return pad(eth(arp, 0x0806, dst=b"\xff" * 6), 60)


def u32(x: int) -> bytes:
    return struct.pack("!I", x)


# ---- pipelines -----------------------------------------------------------------------------


@dataclass
class Stage:
    """One module of a row: class, argument, commands run after creating it (name, arg type,
    arg), output gates connected to the next stage (0..gates-1), whether it has a task."""

    cls: str
    arg: dict = field(default_factory=dict)
    cmds: list = field(default_factory=list)
    gates: int = 1
    task: bool = False
    # Not on the packet path (a task-only module such as NoOP): created and its task
    # attached, never connected.
    detached: bool = False
    # Bulk commands (name, arg type, a function making the list of args), sent pipelined:
    # big tables, made only when the row is built.
    bulk: list = field(default_factory=list)

    def sig(self) -> str:
        return json.dumps(
            [
                self.cls,
                self.arg,
                self.cmds,
                self.gates,
                self.task,
                [(b[0], b[1], id(b[2])) for b in self.bulk],
            ],
            default=repr,
        )


@dataclass
class Row:
    key: str
    title: str
    cls: str
    stages: list  # Source first; the class is stages[at]
    at: int | None = (
        None  # index of the class in stages (None: the row has no front end)
    )
    count: int = 0  # stage whose task's packets are counted
    front: str | None = (
        None  # key of the row to subtract instead of the derived front end
    )
    group: str = "class"
    note: str = ""
    big: bool = False  # skipped by --quick / --no-big
    # False where the two daemons' classes do different work on these packets (the ratio
    # is printed but not counted in worst_ratio).
    comparable: bool = True
    warm: float | None = None


def src(size: int = 60, burst: int | None = None) -> Stage:
    cmds = (
        []
        if burst is None
        else [("set_burst", "SourceCommandSetBurstArg", {"burst": burst})]
    )
    return Stage("Source", {"pkt_size": size}, cmds, task=True)


def rw(*templates: bytes) -> Stage:
    return Stage("Rewrite", {"templates": list(templates)})


def ru(offset: int, size: int, lo: int, hi: int) -> Stage:
    return Stage(
        "RandomUpdate",
        {"fields": [{"offset": offset, "size": size, "min": lo, "max": hi}]},
    )


def setmd(*attrs: tuple) -> Stage:
    return Stage(
        "SetMetadata",
        {"attrs": [{"name": n, "size": s, "value_bin": v} for n, s, v in attrs]},
    )


def front(template: bytes | None = None, *more: Stage, size: int | None = None) -> list:
    """Source -> Rewrite(template) -> more."""
    t = template if template is not None else udp_frame(60)
    return [src(size or len(t)), rw(t), *more]


def row(
    key: str,
    title: str,
    stages: list,
    cls_stage: Stage,
    after: list | None = None,
    **kw,
) -> Row:
    at = len(stages)
    return Row(
        key, title, cls_stage.cls, [*stages, cls_stage, *(after or [])], at=at, **kw
    )


GATES4 = [0, 1, 2, 3]


def core_rows() -> list:
    """The issue's rows (bench-core's cases and the classifier rows it quotes)."""
    ip_base = 0x0A000000
    r = [
        Row("src_sink", "Source -> Sink", "Source", [src()], group="core"),
        Row(
            "src_sink_burst1",
            "Source (burst 1) -> Sink",
            "Source",
            [src(burst=1)],
            group="core",
        ),
        row(
            "rewrite",
            "Source -> Rewrite -> Sink",
            [src()],
            rw(udp_frame(60)),
            group="core",
        ),
    ]
    for n in (1, 8, 32):
        r.append(
            Row(
                f"chain{n}",
                f"Source -> {n} x Bypass -> Sink",
                "Bypass",
                [src()] + [Stage("Bypass") for _ in range(n)],
                at=1,
                group="core",
                front="src_sink",
            )
        )
    # Classifier rows: Rewrite -> RandomUpdate (destination address) -> CLASS, 4 gates.
    r.append(
        row(
            "random_update",
            "Rewrite -> RandomUpdate (dst IP) -> Sink",
            front(),
            ru(30, 4, ip_base, ip_base + 999),
            group="core",
        )
    )
    r.append(
        exact_match_row(1000, "...-> ExactMatch 1 000 rules (dst IP)", group="core")
    )
    r.append(
        ip_lookup_row(
            "ip_lookup_10k",
            "...-> IPLookup 10 000 routes (256 /16 + 9 744 /24)",
            routes_10k,
            10000,
            ip_base,
            ip_base + 0xFFFFFF,
            group="core",
        )
    )
    r.append(wildcard_row("wildcard_match_100", 100, 4, group="core"))
    return r


def routes_10k() -> list:
    """256 /16 (all of 10/8) and 9 744 distinct /24 inside it; gates 0..3 in turn."""
    rng = random.Random(10000)
    routes = [(0x0A000000 | (i << 16), 16) for i in range(256)]
    s24 = rng.sample(range(1 << 16), 9744)
    routes += [(0x0A000000 | (i << 8), 24) for i in s24]
    return routes


def routes_internet(n: int, seed: int = 900) -> list:
    """`n` distinct prefixes with an Internet table's length mix (about 60 % /24, 10 % /23,
    11 % /22, 15 % /17-/21, 2 % /16, a few shorter and a few hundred longer than /24), over
    unicast space (1.0.0.0 - 223.255.255.255)."""
    rng = random.Random(seed)
    # (length, weight per 1000); longer-than-/24 host routes are rare in BGP.
    mix = [
        (8, 0.02),
        (9, 0.02),
        (10, 0.05),
        (11, 0.15),
        (12, 0.4),
        (13, 0.8),
        (14, 1.5),
        (15, 2.5),
        (16, 14.0),
        (17, 8.0),
        (18, 14.0),
        (19, 26.0),
        (20, 40.0),
        (21, 44.0),
        (22, 110.0),
        (23, 100.0),
        (24, 637.0),
        (25, 0.2),
        (26, 0.2),
        (27, 0.1),
        (28, 0.1),
        (29, 0.1),
        (30, 0.1),
        (32, 0.2),
    ]
    lens = [m[0] for m in mix]
    weights = [m[1] for m in mix]
    seen: set = set()
    out = []
    while len(out) < n:
        ln = rng.choices(lens, weights)[0]
        a = rng.randrange(0x01000000, 0xE0000000)
        p = a & ((0xFFFFFFFF << (32 - ln)) & 0xFFFFFFFF)
        if (p, ln) not in seen:
            seen.add((p, ln))
            out.append((p, ln))
    return out


def ip_lookup_row(
    key: str,
    title: str,
    routes: Callable[[], list],
    n: int,
    lo: int,
    hi: int,
    gates: int = 4,
    **kw,
) -> Row:
    """IPLookup with the `n` routes `routes()` makes (gate i % gates) and a default route to
    gate 0 (none dropped); destinations uniform in lo..hi."""
    # Room for every route, and for a /24 block split by longer prefixes per 64 routes
    # (about 20 times what the Internet mix needs).
    arg = {"max_rules": max(1024, n + 16), "max_tbl8s": max(128, n // 64)}
    st = Stage("IPLookup", arg, gates=gates)

    def adds() -> list:
        out = [
            {
                "prefix": str(ipaddress.IPv4Address(p)),
                "prefix_len": ln,
                "gate": i % gates,
            }
            for i, (p, ln) in enumerate(routes())
        ]
        out.append({"prefix": "0.0.0.0", "prefix_len": 0, "gate": 0})
        return out

    st.bulk = [("add", "IPLookupCommandAddArg", adds)]
    return row(key, title, front(None, ru(30, 4, lo, hi)), st, big=n > 100000, **kw)


def wildcard_row(key: str, rules: int, masks: int, **kw) -> Row:
    """WildcardMatch on the destination address and UDP destination port: `rules` rules over
    `masks` masks (/24, /16, /32 + port, /8, ... of the address, with and without the port),
    values inside 10/8 (where the packets go) but for the /8 rules; default gate 0."""
    rng = random.Random(rules * 7 + masks)
    mask_set = [
        (0xFFFFFF00, 0),
        (0xFFFF0000, 0),
        (0xFFFFFFFF, 0xFFFF),
        (0xFF000000, 0),
        (0xFFFF0000, 0xFFFF),
        (0xFFFFFF00, 0xFFFF),
        (0xFFFFFFF0, 0),
        (0xFFF00000, 0),
    ]
    st = Stage(
        "WildcardMatch",
        {"fields": [{"offset": 30, "num_bytes": 4}, {"offset": 36, "num_bytes": 2}]},
        gates=4,
        cmds=[
            ("set_default_gate", "WildcardMatchCommandSetDefaultGateArg", {"gate": 0})
        ],
    )
    adds = []
    seen = set()
    i = 0
    while len(adds) < rules:
        am, pm = mask_set[i % masks]
        i += 1
        # Inside 10/8 (where the packets go), except /8 rules: other first octets.
        v = (0x0A000000 | rng.randrange(1 << 24)) & am
        if am == 0xFF000000:
            v = rng.randrange(256) << 24
        pv = 53 & pm
        if (am, pm, v, pv) in seen:
            continue
        seen.add((am, pm, v, pv))
        adds.append(
            {
                "gate": len(adds) % 4,
                "priority": rng.randrange(1000),
                "values": [{"value_int": v}, {"value_int": pv}],
                "masks": [{"value_int": am}, {"value_int": pm}],
            }
        )
    st.bulk = [("add", "WildcardMatchCommandAddArg", lambda: adds)]
    return row(
        key,
        f"...-> WildcardMatch {rules} rules, {masks} masks",
        front(None, ru(30, 4, 0x0A000000, 0x0AFFFFFF)),
        st,
        **kw,
    )


def exact_match_row(n: int, title: str | None = None, **kw) -> Row:
    """ExactMatch on the destination address, `n` entries (10.0.0.0 + i -> gate i % 4),
    random destinations among them."""
    base = 0x0A000000
    em = Stage("ExactMatch", {"fields": [{"offset": 30, "num_bytes": 4}]}, gates=4)
    em.bulk = [
        (
            "add",
            "ExactMatchCommandAddArg",
            lambda: [
                {"gate": i % 4, "fields": [{"value_bin": u32(base + i)}]}
                for i in range(n)
            ],
        )
    ]
    return row(
        f"exact_match_{label(n)}",
        title or f"...-> ExactMatch {n:,} entries (dst IP)",
        front(None, ru(30, 4, base, base + n - 1)),
        em,
        big=n > 100000,
        **kw,
    )


def l2_forward_row(n: int) -> Row:
    size = 1 << max(4, (n * 2 - 1).bit_length())
    st = Stage("L2Forward", {"size": size, "bucket": 4}, gates=4)

    def adds() -> list:
        entries = [
            {
                "addr": ":".join(f"{b:02x}" for b in (b"\x02\x00" + u32(i))),
                "gate": i % 4,
            }
            for i in range(n)
        ]
        return [{"entries": entries[i : i + 2048]} for i in range(0, n, 2048)]

    st.bulk = [("add", "L2ForwardCommandAddArg", adds)]
    return row(
        f"l2_forward_{label(n)}",
        f"...-> L2Forward {n:,} entries (dst MAC)",
        front(None, ru(2, 4, 0, n - 1)),
        st,
        big=n > 100000,
    )


def acl_row(n: int) -> Row:
    """Rule i: source 10.x.y.0/24 (i-th), any destination, destination port 53; every fourth
    drops... none of the packets' sources: packets come from the allowing rules' /24s, so the
    first-match scan reads on average half the list."""
    rules = []
    for i in range(n):
        rules.append(
            {
                "src_ip": f"10.{(i >> 8) & 255}.{i & 255}.0/24",
                "dst_ip": "0.0.0.0/0",
                "src_port": 0,
                "dst_port": 53,
                "drop": False,
            }
        )
    st = Stage("ACL", {"rules": rules})
    # Sources over the rules' /24s: 10.0.0.0 .. 10.(n-1 >> 8).(n-1 & 255).255.
    return row(
        f"acl_{label(n)}",
        f"...-> ACL {n:,} rules (first match)",
        front(None, ru(26, 4, 0x0A000000, 0x0A000000 + n * 256 - 1)),
        st,
    )


def bpf_row(n: int) -> Row:
    filters = []
    for i in range(n):
        f = (
            f"udp dst port {1024 + i}"
            if i % 2 == 0
            else f"src net 10.{(i >> 8) & 255}.{i & 255}.0/24 and udp"
        )
        filters.append({"priority": n - i, "filter": f, "gate": i % 4})
    # Destination ports over the even filters' ports; odd filters never match (their
    # sources are elsewhere): every filter up to the match is run.
    st = Stage("BPF", {"filters": filters}, gates=4)
    return row(
        f"bpf_{label(n)}",
        f"...-> BPF {n} filters",
        front(udp_frame(60, src="172.16.0.1"), ru(36, 2, 1024, 1024 + max(1, n) - 1)),
        st,
    )


def label(n: int) -> str:
    for unit, d in (("m", 1000000), ("k", 1000)):
        if n >= d and n % d == 0:
            return f"{n // d}{unit}"
    return str(n)


def class_rows(quick: bool) -> list:
    """One pipeline per class BESS ships that runs in memory, tables from 10 to 1 M."""
    rows: list = []
    add = rows.append
    # Basic.
    add(row("bypass", "Bypass", front(), Stage("Bypass")))
    add(row("merge", "Merge", front(), Stage("Merge")))
    add(
        row(
            "noop_task",
            "Source -> Sink, NoOP task beside",
            [src()],
            Stage("NoOP", task=True, detached=True),
            front="src_sink",
            note="NoOP: a task that does nothing, run every round beside the Source",
        )
    )
    add(
        row(
            "replicate_2",
            "Replicate to 2 gates",
            front(),
            Stage("Replicate", {"gates": [0, 1]}, gates=2),
        )
    )
    add(
        row(
            "round_robin_4",
            "RoundRobin 4 gates",
            front(),
            Stage("RoundRobin", {"gates": GATES4, "mode": "packet"}, gates=4),
        )
    )
    add(
        row(
            "random_split_4",
            "RandomSplit 4 gates",
            front(),
            Stage("RandomSplit", {"drop_rate": 0.0, "gates": GATES4}, gates=4),
        )
    )
    add(
        row(
            "split_4",
            "Split on a data byte (4 gates)",
            front(None, ru(42, 1, 0, 3)),
            Stage("Split", {"size": 1, "offset": 42}, gates=4),
        )
    )
    add(row("worker_split", "WorkerSplit", front(), Stage("WorkerSplit")))
    add(row("buffer", "Buffer", front(), Stage("Buffer")))
    add(
        row(
            "metadata_test",
            "MetadataTest (write 2 attrs)",
            front(),
            Stage("MetadataTest", {"write": {"flow_id": 4, "color": 1}}),
        )
    )
    # Sources.
    flowgen_tmpl = tcp_frame(60)
    add(
        Row(
            "flowgen",
            "FlowGen -> Sink",
            "FlowGen",
            [
                Stage(
                    "FlowGen",
                    {
                        "template": flowgen_tmpl,
                        # More than either makes (CPU-bound), 10 000 concurrent flows.
                        "pps": 1e8,
                        "flow_rate": 1e5,
                        "flow_duration": 0.1,
                        "arrival": "uniform",
                        "duration": "uniform",
                        "quick_rampup": True,
                    },
                    task=True,
                )
            ],
            at=0,
            front="src_sink",
            note="FlowGen: a source; its cost against Source's (Source -> Sink)",
        )
    )
    # Rewriting.
    add(
        row(
            "rewrite_4",
            "Rewrite 4 templates",
            front(),
            rw(*[udp_frame(60, dst=f"10.0.0.{2 + i}") for i in range(4)]),
        )
    )
    add(
        row(
            "update_2",
            "Update 2 fields",
            front(),
            Stage(
                "Update",
                {
                    "fields": [
                        {"offset": 26, "size": 4, "value": 0x0A000063},
                        {"offset": 34, "size": 2, "value": 5000},
                    ]
                },
            ),
        )
    )
    add(
        row(
            "random_update_2",
            "RandomUpdate 2 fields",
            front(),
            Stage(
                "RandomUpdate",
                {
                    "fields": [
                        {"offset": 26, "size": 4, "min": 0x0A000000, "max": 0x0AFFFFFF},
                        {"offset": 34, "size": 2, "min": 1024, "max": 65535},
                    ]
                },
            ),
        )
    )
    add(
        row(
            "sequential_update_2",
            "SequentialUpdate 2 fields (sample plugin)",
            front(),
            Stage(
                "SequentialUpdate",
                {
                    "fields": [
                        {"offset": 26, "size": 4, "min": 0x0A000000, "max": 0x0AFFFFFF},
                        {"offset": 34, "size": 2, "min": 1024, "max": 65535},
                    ]
                },
            ),
        )
    )
    add(
        row(
            "set_metadata_2",
            "SetMetadata 2 attrs (constant, from data)",
            front(),
            Stage(
                "SetMetadata",
                {
                    "attrs": [
                        {"name": "ether_src", "size": 6, "value_bin": MAC_A},
                        {"name": "flow_src", "size": 4, "offset": 26},
                    ]
                },
            ),
            [Stage("MetadataTest", {"read": {"ether_src": 6, "flow_src": 4}})],
        )
    )
    add(row("mac_swap", "MACSwap", front(), Stage("MACSwap")))
    add(row("ip_swap", "IPSwap", front(), Stage("IPSwap")))
    add(row("update_ttl", "UpdateTTL", front(), Stage("UpdateTTL")))
    add(row("ip_checksum", "IPChecksum (compute)", front(), Stage("IPChecksum")))
    add(
        row(
            "ip_checksum_verify",
            "IPChecksum (verify)",
            front(),
            Stage("IPChecksum", {"verify": True}, gates=2),
        )
    )
    add(row("l4_checksum", "L4Checksum (compute, UDP)", front(), Stage("L4Checksum")))
    add(
        row(
            "l4_checksum_tcp",
            "L4Checksum (compute, TCP)",
            front(tcp_frame(60)),
            Stage("L4Checksum"),
        )
    )
    add(
        row(
            "arp_responder",
            "ArpResponder (requests, 1 address)",
            front(arp_request()),
            Stage(
                "ArpResponder",
                cmds=[
                    (
                        "add",
                        "ArpResponderArg",
                        {"ip": "10.0.0.1", "mac_addr": "52:54:00:12:34:56"},
                    )
                ],
            ),
        )
    )
    # NAT with established flows: internal traffic from n flows (source ports).
    for n in (1000, 60000):
        add(
            row(
                f"nat_{label(n)}",
                f"NAT int->ext, {n:,} established flows",
                front(None, ru(34, 2, 1024, 1024 + n - 1)),
                Stage(
                    "NAT",
                    {
                        "ext_addrs": [
                            {
                                "ext_addr": "203.0.113.1",
                                "port_ranges": [{"begin": 1024, "end": 65535}],
                            }
                        ]
                    },
                    gates=2,
                ),
                warm=1.0,
                note="NAT: flows differ in source port; mappings are made during warm-up",
            )
        )
    add(
        row(
            "static_nat",
            "StaticNAT int->ext, one /16 pair",
            front(None, ru(26, 4, 0x0A000000, 0x0A00FFFF)),
            Stage(
                "StaticNAT",
                {
                    "pairs": [
                        {
                            "int_range": {"start": "10.0.0.0", "end": "10.0.255.255"},
                            "ext_range": {
                                "start": "198.18.0.0",
                                "end": "198.18.255.255",
                            },
                        }
                    ]
                },
                gates=2,
            ),
        )
    )
    # Timestamps.
    add(
        row(
            "timestamp",
            "Timestamp (offset 42)",
            front(),
            Stage("Timestamp", {"offset": 42}),
        )
    )
    add(
        row(
            "measure",
            "Measure after Timestamp (offset 42)",
            front(None, Stage("Timestamp", {"offset": 42})),
            Stage("Measure", {"offset": 42}),
        )
    )
    # Encapsulation / decapsulation.
    md_eth = setmd(
        ("ether_src", 6, MAC_A), ("ether_dst", 6, MAC_B), ("ether_type", 2, b"\x08\x00")
    )
    add(row("ether_encap", "EtherEncap", front(None, md_eth), Stage("EtherEncap")))
    md_ip = setmd(
        ("ip_src", 4, ip4("10.0.0.1")),
        ("ip_dst", 4, ip4("10.0.0.2")),
        ("ip_proto", 1, b"\x11"),
    )
    add(
        row(
            "ip_encap",
            "IPEncap",
            front(None, md_ip),
            Stage("IPEncap"),
            [Stage("MetadataTest", {"read": {"ip_nexthop": 4, "ether_type": 2}})],
        )
    )
    md_vx = setmd(
        ("tun_ip_src", 4, ip4("192.168.0.1")),
        ("tun_ip_dst", 4, ip4("192.168.0.2")),
        ("tun_id", 4, u32(100)),
    )
    add(
        row(
            "vxlan_encap",
            "VXLANEncap",
            front(None, md_vx),
            Stage("VXLANEncap", {"dstport": 4789}),
            [
                Stage(
                    "MetadataTest", {"read": {"ip_src": 4, "ip_dst": 4, "ip_proto": 1}}
                )
            ],
        )
    )
    add(
        row(
            "vxlan_decap",
            "VXLANDecap (110-byte frames)",
            front(vxlan_frame()),
            Stage("VXLANDecap"),
            [
                Stage(
                    "MetadataTest",
                    {"read": {"tun_ip_src": 4, "tun_ip_dst": 4, "tun_id": 4}},
                )
            ],
        )
    )
    add(
        row(
            "generic_encap",
            "GenericEncap 3 fields (8 bytes)",
            front(None, setmd(("foo", 2, b"\xab\xcd"))),
            Stage(
                "GenericEncap",
                {
                    "fields": [
                        {"size": 4, "value": {"value_int": 0xDEADBEEF}},
                        {"size": 2, "attribute": "foo"},
                        {"size": 2, "value": {"value_int": 0x1234}},
                    ]
                },
            ),
        )
    )
    add(
        row(
            "generic_decap",
            "GenericDecap 14 bytes",
            front(),
            Stage("GenericDecap", {"bytes": 14}),
        )
    )
    add(row("vlan_push", "VLANPush", front(), Stage("VLANPush", {"tci": 100})))
    add(
        row(
            "vlan_pop",
            "VLANPop (64-byte tagged)",
            front(vlan_frame()),
            Stage("VLANPop"),
        )
    )
    add(
        row(
            "vlan_split",
            "VLANSplit (tagged, VIDs 0-3)",
            front(vlan_frame(), ru(14, 2, 0, 3)),
            Stage("VLANSplit", gates=4),
        )
    )
    add(
        row("mpls_pop", "MPLSPop (64-byte MPLS)", front(mpls_frame()), Stage("MPLSPop"))
    )
    # Load balancing without a table.
    for mode in ("l2", "l3", "l4"):
        add(
            row(
                f"hash_lb_{mode}",
                f"HashLB {mode}, 4 gates",
                front(None, ru(26, 4, 0x0A000000, 0x0AFFFFFF), ru(34, 2, 1024, 65535)),
                Stage("HashLB", {"gates": GATES4, "mode": mode}, gates=4),
            )
        )
    # Queues and schedulers: packets counted as they leave the queue's task.
    add(
        Row(
            "queue",
            "Queue (Source -> Queue, its task -> Sink)",
            "Queue",
            [*front(), Stage("Queue", {"size": 4096}, task=True)],
            at=2,
            count=2,
            note="Queue, DRR: packets counted as the queue's task sends them",
        )
    )
    drr = Stage(
        "DRR",
        {"num_flows": 4096, "quantum": 1500, "max_flow_queue_size": 4096},
        task=True,
    )
    add(
        Row(
            "drr_1k",
            "DRR, 1 000 flows (src port)",
            "DRR",
            [*front(None, ru(34, 2, 1024, 2023)), drr],
            at=3,
            count=3,
        )
    )
    # Measurement.
    add(row("dump", "Dump (interval 1 s)", front(), Stage("Dump", {"interval": 1.0})))
    # The omec classes.
    add(
        row(
            "counter",
            "Counter (metadata id, 1 of 1 000 counters)",
            front(None, setmd(("ctr_id", 4, struct.pack("<I", 7)))),
            Stage(
                "Counter",
                {"name_id": "ctr_id", "check_exist": True, "total": 1000},
                cmds=[("add", "CounterAddArg", {"ctr_id": 7})],
            ),
        )
    )
    fm_md = setmd(
        ("fseid", 8, struct.pack("<Q", 7)), ("pdr_id", 4, struct.pack("<I", 3))
    )
    add(
        row(
            "flow_measure",
            "FlowMeasure (leader)",
            front(None, fm_md, Stage("Timestamp", {"attr_name": "timestamp"})),
            Stage(
                "FlowMeasure",
                {
                    "flag_attr_name": "flow_measure_flag",
                    "leader": True,
                    "entries": 1 << 16,
                },
            ),
        )
    )
    gtp = gtpu_frame()
    add(
        row(
            "gtpu_decap",
            f"GtpuDecap ({len(gtp)}-byte G-PDU)",
            front(gtp),
            Stage("GtpuDecap"),
        )
    )
    add(
        row(
            "gtpu_parser",
            "GtpuParser (G-PDU)",
            front(gtp),
            Stage("GtpuParser", gates=2),
        )
    )
    md_gtp = setmd(
        ("action", 1, b"\x00"),
        ("qfi", 1, b"\x09"),
        ("tunnel_out_src_ip4addr", 4, struct.pack("<I", 0xC0A80002)),
        ("tunnel_out_dst_ip4addr", 4, struct.pack("<I", 0xC0A80001)),
        ("tunnel_out_teid", 4, struct.pack("<I", 0x11223344)),
        ("tunnel_out_udp_port", 2, struct.pack("<H", 2152)),
    )
    add(
        row(
            "gtpu_encap",
            "GtpuEncap (PSC)",
            front(None, md_gtp),
            Stage("GtpuEncap", {"add_psc": True}, gates=2),
        )
    )
    add(
        row(
            "gtpu_echo",
            "GtpuEcho (echo requests)",
            front(gtpu_echo_frame()),
            Stage("GtpuEcho", {"s1u_sgw_ip": 0xC0A80002}, gates=2),
        )
    )
    add(
        row(
            "gtpu_path_monitoring",
            "GtpuPathMonitoring (echo requests to 2 gNBs)",
            front(gtpu_echo_frame()),
            Stage(
                "GtpuPathMonitoring",
                cmds=[
                    (
                        "add",
                        "GtpuPathMonitoringCommandAddDeleteArg",
                        {"gnb_ip": 0xC0A80001},
                    ),
                    (
                        "add",
                        "GtpuPathMonitoringCommandAddDeleteArg",
                        {"gnb_ip": 0xC0A80003},
                    ),
                ],
            ),
            note="GtpuPathMonitoring: each request leaves once per gNB (a copy each); BESS's "
            "keeps each request (neither sent nor freed) and aborts when its pool runs dry",
        )
    )
    add(
        row(
            "ip_frag",
            "IPFrag 1014 B -> MTU 518 (3 fragments)",
            front(pad(eth(ipv4(17, bytes(980))), 1014)),
            Stage("IPFrag", {"mtu": 518}, gates=2),
            comparable=False,
            note="IPFrag: not comparable in memory: BESS's IPFrag fragments only packets whose "
            "packet type a NIC set (RTE_ETH_IS_IPV4_HDR), so from a Source it passes them "
            "whole; Bessemer's cost is per packet entering it (three leave)",
        )
    )
    # Two fragments of one 1014-byte datagram (same identification), alternately: every
    # second packet completes a datagram.
    whole = ipv4(17, bytes(980), ident=7)
    frag1 = eth(ipv4(17, whole[20:516], ident=7, frag=0x2000))
    frag2 = eth(ipv4(17, whole[516:], ident=7, frag=496 // 8))
    add(
        row(
            "ip_defrag",
            "IPDefrag of 2-fragment datagrams",
            [src(len(frag1)), rw(frag1, frag2)],
            Stage("IPDefrag", {"num_flows": 1024, "numa": -1}, gates=2),
            note="IPDefrag: per fragment entering it (one datagram leaves per two)",
        )
    )
    for n in (10, 1000, 100000):
        q = Stage(
            "Qos",
            {
                "fields": [{"offset": 30, "num_bytes": 4}],
                "values": [{"attr_name": "qfi", "num_bytes": 1}],
            },
            gates=5,
            cmds=[("set_default_gate", "QosCommandSetDefaultGateArg", {"gate": 4})],
        )
        # Gate 0: metered (green -> gate 1, yellow 2, red 3); rates never exceeded.
        q.bulk = [
            (
                "add",
                "QosCommandAddArg",
                lambda n=n: [
                    {
                        "gate": 0,
                        "cir": 10**12,
                        "pir": 10**12,
                        "cbs": 10**9,
                        "pbs": 10**9,
                        "ebs": 10**9,
                        "deduct_len": 14,
                        "fields": [{"value_bin": u32(0x0A000000 + i)}],
                        "values": [{"value_int": 9}],
                    }
                    for i in range(n)
                ],
            )
        ]
        add(
            row(
                f"qos_{label(n)}",
                f"Qos {n:,} metered entries (dst IP, all green)",
                front(None, ru(30, 4, 0x0A000000, 0x0A000000 + n - 1)),
                q,
                [Stage("MetadataTest", {"read": {"qfi": 1}})],
            )
        )
    # Classifiers with tables.
    for n in (10, 100000) + (() if quick else (1000000,)):
        add(exact_match_row(n))
    for n in (10, 1000, 100000) + (() if quick else (1000000,)):
        add(l2_forward_row(n))
    add(
        ip_lookup_row(
            "ip_lookup_10k_1gate",
            "...-> IPLookup 10 000 routes, all to gate 0",
            routes_10k,
            10000,
            0x0A000000,
            0x0AFFFFFF,
            gates=1,
        )
    )
    add(
        ip_lookup_row(
            "ip_lookup_10",
            "...-> IPLookup 10 routes",
            lambda: [(0x0A000000 | (i << 20), 12) for i in range(10)],
            10,
            0x0A000000,
            0x0AFFFFFF,
        )
    )
    if not quick:
        add(
            ip_lookup_row(
                "ip_lookup_900k",
                "...-> IPLookup 900 000 routes (Internet mix), random destinations",
                lambda: routes_internet(900000),
                900000,
                0x01000000,
                0xDFFFFFFF,
            )
        )
    add(wildcard_row("wildcard_match_10", 10, 1))
    add(wildcard_row("wildcard_match_1k", 1000, 8))
    for n in (10, 100, 1000):
        add(acl_row(n))
    for n in (1, 10, 100):
        add(bpf_row(n))
    # UrlFilter: SYN then HTTP GET of one flow (each pair: flow made, request analyzed,
    # allowed, flow dropped), host not on the list.
    get = b"GET /index.html HTTP/1.1\r\nHost: www.allowed.example\r\nUser-Agent: bench\r\n\r\n"
    syn = tcp_frame(60, flags=0x02, seq=1000)
    req = tcp_frame(0, flags=0x18, seq=1001, payload=get)
    for n in (10, 1000):
        bl = [{"host": f"blocked{i}.example", "path": "/"} for i in range(n)]
        add(
            row(
                f"url_filter_{label(n)}",
                f"UrlFilter {n:,} entries, SYN + GET (allowed)",
                [src(len(req)), rw(syn, req)],
                Stage("UrlFilter", {"blacklist": bl}, gates=2),
                note="UrlFilter: alternating SYN and HTTP GET of one allowed flow",
            )
        )
    add(
        row(
            "url_filter_unknown",
            "UrlFilter, TCP of flows never seen",
            front(tcp_frame(60), ru(34, 2, 1024, 65535)),
            Stage(
                "UrlFilter",
                {"blacklist": [{"host": "example.com", "path": "/"}]},
                gates=2,
            ),
        )
    )
    return rows


# Classes BESS ships that need a port (a NIC, a vport, a pcap file): not an in-memory pipeline.
NOT_IN_MEMORY = [
    ("PortInc", "reads a port"),
    ("PortOut", "writes a port"),
    ("QueueInc", "reads a port queue"),
    ("QueueOut", "writes a port queue"),
]


# ---- daemons -------------------------------------------------------------------------------


class Daemon:
    """One daemon process and a pybess client connected to it."""

    def __init__(self, name: str, cmd: list, port: int, log: str, BESS):
        self.name, self.cmd, self.port, self.log = name, cmd, port, log
        self.proc: subprocess.Popen | None = None
        self.b = BESS()
        self.BESS = BESS

    def start(self, timeout: float = 120.0) -> None:
        self.log_at = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        logf = open(self.log, "ab")  # noqa: SIM115 - the daemon writes it until it exits
        self.proc = subprocess.Popen(
            self.cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}): {tail(self.log)}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} did not listen on {self.port}: {tail(self.log)}"
                )
            time.sleep(0.2)
        # gRPC may still remember a failed connection to this port (a daemon restarted after
        # a crash) and report it at once: try again until the deadline.
        while True:
            try:
                self.b.connect(grpc_url=f"127.0.0.1:{self.port}")
                self.b.get_version()
                return
            except Exception:  # noqa: BLE001 - retried, then raised
                if time.monotonic() > deadline:
                    raise
                self.b.disconnect()
                self.b = self.BESS()
                time.sleep(1.0)

    def recover(self) -> str | None:
        """After a failed row: starts the daemon again if it exited (returns why it did, from
        its log) or reconnects if the connection broke."""
        if self.b.is_connected() and self.proc.poll() is None:
            return None
        # A broken connection: the daemon may be dying (writing its stack dump); give it
        # time, then make sure it is gone.
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        why = None
        if self.proc.poll() is not None:
            why = crash_reason(self.log, self.log_at, self.proc.returncode)
        else:
            why = "stopped answering; killed"
            self.proc.kill()
            self.proc.wait(timeout=10)
        try:
            self.b.disconnect()
        except Exception:  # noqa: BLE001 - replacing it anyway
            pass
        self.b = self.BESS()
        self.start()
        return why

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.b.pause_all()
            self.b.reset_all()
        except Exception:  # noqa: BLE001 - stopping anyway
            pass
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    # -- building --

    def build(self, rw: Row, core: int) -> None:
        """Creates the row's modules, connects them in order (each module's first `gates`
        output gates to the next one's input 0; the last one's to the Sink), runs their
        commands (tables filled after connecting: some classes check gates), and attaches
        each task to its own traffic class in worker 0 (`tc<i>`)."""
        b = self.b
        b.pause_all()
        b.reset_all()
        b.add_worker(0, core)
        b.pause_all()
        names = [f"m{i}_{st.cls.lower()}" for i, st in enumerate(rw.stages)]
        for name, st in zip(names, rw.stages, strict=True):
            b.create_module(st.cls, name, st.arg)
        b.create_module("Sink", "sink", {})
        path = [
            (n, st) for n, st in zip(names, rw.stages, strict=True) if not st.detached
        ]
        for i, (name, st) in enumerate(path):
            nxt = path[i + 1][0] if i + 1 < len(path) else "sink"
            for g in range(st.gates):
                b.connect_modules(name, nxt, g, 0)
        for name, st in zip(names, rw.stages, strict=True):
            for cmd, argtype, arg in st.cmds:
                b.run_module_command(name, cmd, argtype, arg)
            for cmd, argtype, make in st.bulk:
                self.bulk(name, cmd, argtype, make())
        for i, st in enumerate(rw.stages):
            if st.task:
                b.add_tc(f"tc{i}", policy="round_robin", wid=0)
                b.attach_task(names[i], parent=f"tc{i}")
        self.names = [n for n, _ in path]
        self.last_gates = path[-1][1].gates

    def bulk(
        self, name: str, cmd: str, argtype: str, args: list, window: int = 256
    ) -> None:
        """Runs `cmd` once per argument with up to `window` requests in flight (big tables)."""
        from pybess import protobuf_to_dict as pb_conv
        from pybess.builtin_pb import bess_msg_pb2 as bess_msg

        module_pb = sys.modules["pybess.bess"].module_pb
        mtype = getattr(module_pb, argtype)
        inflight: list = []

        errors: list = []

        def check(fut):
            resp = fut.result()
            if resp.error.code != 0 and not errors:
                errors.append(f"{self.name}: {name}.{cmd}: {resp.error.errmsg}")

        # Every request is waited for, failed or not: abandoning them in flight would reset
        # their streams, and servers close a connection that resets too many.
        for arg in args:
            if errors:
                break
            req = bess_msg.CommandRequest(name=name, cmd=cmd)
            req.arg.Pack(pb_conv.dict_to_protobuf(mtype, arg))
            inflight.append(self.b.stub.ModuleCommand.future(req))
            if len(inflight) >= window:
                for f in inflight[: window // 2]:
                    check(f)
                del inflight[: window // 2]
        for f in inflight:
            check(f)
        if errors:
            raise RuntimeError(errors[0])

    def tc_packets(self, tc: str) -> int:
        return self.b.get_tc_stats(tc).packets

    def threads(self) -> dict:
        """CPU nanoseconds each thread of the daemon has run."""
        out = {}
        base = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/schedstat") as f:
                    out[tid] = int(f.read().split()[0])
            except OSError:
                pass
        return out


def crash_reason(log: str, at: int, code: int) -> str:
    """The fatal log line and the innermost frame bessd's stack dump names, if any, from what
    the daemon wrote to `log` since offset `at`."""
    with open(log, "rb") as f:
        f.seek(at)
        text = f.read().decode(errors="replace")
    fatal = [
        ln for ln in text.splitlines() if ln.startswith(("F20", "\x1b[0;31mF20", "E20"))
    ]
    frame = re.search(r"\(0\): \S*\(_ZN(\d+)(\w+?)(\d+)(\w+?)E", text)
    where = f" in {frame.group(2)}::{frame.group(4)}" if frame else ""
    last = fatal[-1].split("] ", 1)[-1] if fatal else f"status {code}"
    return f"{last}{where}"


def tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Run:
    mpps: float
    share: float
    packets: int


def measure(d: Daemon, tc: str | list, secs: float, warm: float) -> Run:
    """Packets of traffic class `tc` (or the sum over a list of them) per second of the
    worker's CPU in one run, and the worker's CPU share."""
    tcs = [tc] if isinstance(tc, str) else tc
    d.b.resume_all(check=False)
    time.sleep(warm)
    p0 = sum(d.tc_packets(t) for t in tcs)
    c0, w0 = d.threads(), time.monotonic()
    time.sleep(secs)
    p1 = sum(d.tc_packets(t) for t in tcs)
    c1, w1 = d.threads(), time.monotonic()
    d.b.pause_all()
    deltas = {t: c1[t] - c0.get(t, 0) for t in c1}
    worker = max(deltas, key=deltas.get)
    cpu = max(deltas[worker], 1) / 1e9
    return Run((p1 - p0) / cpu / 1e6, cpu / (w1 - w0), p1 - p0)


def delivered(d: Daemon, tc: str, secs: float = 0.3) -> float:
    """Packets arriving at the Sink per packet the counted task processed: a Track hook on
    the output gates feeding the Sink (the last module's), for this check only."""
    last, gates = d.names[-1], d.last_gates

    def at_sink() -> int:
        info = d.b.get_module_info(last)
        return sum(g.pkts for g in info.ogates if g.ogate < gates)

    d.b.track_gate(True, "", last, direction="out", gate=-1)
    try:
        s0, p0 = at_sink(), d.tc_packets(tc)
        d.b.resume_all(check=False)
        time.sleep(secs)
        d.b.pause_all()
        s1, p1 = at_sink(), d.tc_packets(tc)
    finally:
        d.b.track_gate(False, "", last, direction="out", gate=-1)
    return (s1 - s0) / max(1, p1 - p0)


# ---- main ----------------------------------------------------------------------------------


def tsc_hz() -> float:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    return 2.3e9


def load_avg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def bessemer_daemon(o, name: str, port: int, tmp: str, BESS) -> Daemon:
    """A bessemerd on `port` as the benchmarks run it (no hugepages, 65 536 buffers)."""
    cmd = [o.bessemerd, "--port", str(port), "--no-hugepages", "--buffers", "65536"]
    return Daemon(
        name, [*cmd, "--log-level", "warn"], port, f"{tmp}/{name.lower()}d.log", BESS
    )


def make_daemons(o, which: list, tmp: str, BESS) -> list:
    """bessd on o.port (no hugepages, worker core o.core) and bessemerd on o.port + 1, as
    `which` names them."""
    daemons: list = []
    if "bess" in which:
        # -i: its own pid file (the default one admits one bessd per machine).
        cmd = [o.bessd, "-f", "-p", str(o.port), "-m", "0", "-c", str(o.core)]
        cmd += ["-i", f"{tmp}/bessd.pid"]
        daemons.append(Daemon("BESS", cmd, o.port, f"{tmp}/bessd.log", BESS))
    if "bessemer" in which:
        daemons.append(bessemer_daemon(o, "Bessemer", o.port + 1, tmp, BESS))
    return daemons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bessd", required=True)
    ap.add_argument("--pybess", required=True, help="directory holding pybess/")
    ap.add_argument("--bessemerd")
    ap.add_argument("--daemons", default="bess,bessemer")
    ap.add_argument("--core", type=int, default=(os.cpu_count() or 1) - 1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=float, default=1.0)
    ap.add_argument("--warm", type=float, default=0.3)
    ap.add_argument(
        "--rows", default="", help="comma-separated row keys or patterns (ip_*)"
    )
    ap.add_argument("--core-only", action="store_true", help="only the issue's rows")
    ap.add_argument(
        "--quick", action="store_true", help="2 runs x 0.5 s, no 1 M tables"
    )
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--port", type=int, default=10610)
    ap.add_argument("--json-out", help="also write the JSON line here")
    ap.add_argument("--markdown", help="also write the table here, in Markdown")
    o = ap.parse_args()
    if o.quick:
        o.runs, o.secs, o.warm = min(o.runs, 2), 0.5, 0.2
    rows = core_rows() + ([] if o.core_only else class_rows(o.quick))
    dup = {r.key for r in rows if sum(1 for x in rows if x.key == r.key) > 1}
    assert not dup, f"row keys used twice: {dup}"
    if o.rows:
        want = [w for w in o.rows.split(",") if w]
        keep = [r for r in rows if any(fnmatch.fnmatchcase(r.key, w) for w in want)]
        # Rows named as fronts of kept rows are measured too.
        need = {r.front for r in keep if r.front}
        rows = [r for r in rows if r in keep or r.key in need]
    if o.list:
        for r in rows:
            print(f"{r.key:<24} {r.cls:<18} {r.title}")
        for cls, why in NOT_IN_MEMORY:
            print(f"{'-':<24} {cls:<18} not measured: {why}")
        return 0
    sys.path.insert(0, o.pybess)
    from pybess.bess import BESS

    hz = tsc_hz()
    which = o.daemons.split(",")
    tmp = tempfile.mkdtemp(prefix="vs-bess-")
    daemons = make_daemons(o, which, tmp, BESS)
    print(
        f"# bench-vs-bess: {', '.join(d.name for d in daemons)}; worker 0 on core {o.core}; "
        f"{o.runs} alternated runs x {o.secs:.2f} s (warm-up {o.warm:.2f} s); TSC "
        f"{hz / 1e9:.2f} GHz; load average {load_avg()}; {time.strftime('%Y-%m-%d %H:%M %Z')}"
    )
    print(f"# logs in {tmp}")
    results: dict = {}
    try:
        for d in daemons:
            d.start()
        results = run_rows(rows, daemons, o, hz)
    finally:
        for d in daemons:
            d.stop()
    report(rows, daemons, results, o, hz)
    return 0


def fronts_of(rows: list) -> tuple:
    """The front ends to measure (a row's pipeline without its class) and, per row, the key
    of its front end: a row whose pipeline is exactly that one when there is one (e.g.
    Source -> Rewrite -> Sink), else a front-end row made for it (shared by every row with
    the same front end)."""

    def sig(stages: list, count: int) -> str:
        return "|".join(s.sig() for s in stages) + f"#{count}"

    by_sig = {sig(r.stages, r.count): r.key for r in rows}
    keys = {r.key for r in rows}
    fronts: dict = {}
    of: dict = {}
    for r in rows:
        if r.front or r.at is None:
            of[r.key] = r.front if r.front in keys else None
            continue
        stages = r.stages[: r.at] + r.stages[r.at + 1 :]
        count = r.count - 1 if r.count > r.at else (0 if r.count == r.at else r.count)
        s = sig(stages, count)
        if s not in by_sig:
            k = f"front:{r.key}"
            by_sig[s] = k
            fronts[k] = Row(
                k, f"front end of {r.key}", "", stages, count=count, group="front"
            )
        of[r.key] = by_sig[s]
    return fronts, of


def run_rows(rows: list, daemons: list, o, hz: float) -> dict:
    fronts, of = fronts_of(rows)
    order: list = []
    row_keys = {r.key for r in rows}
    for r in rows:
        f = of.get(r.key)
        if f and f not in row_keys and f not in [x.key for x in order]:
            order.append(fronts[f])
        order.append(r)
    results: dict = {"_front_of": of}
    for r in order:
        results[r.key] = measure_row(r, daemons, o, hz)
    return results


def measure_row(r: Row, daemons: list, o, hz: float) -> dict:
    """Builds `r` on every daemon, then the alternated runs and the delivery check. A row a
    daemon refuses, or one that makes a daemon exit, is reported with the reason (the daemon
    is started again for the next rows)."""
    t0 = time.monotonic()
    res: dict = {}
    tc = f"tc{r.count}"
    warm = r.warm if r.warm is not None else o.warm
    runs: dict = {d.name: [] for d in daemons}
    try:
        for d in daemons:
            d.build(r, o.core)
        for i in range(o.runs):
            order = daemons if i % 2 == 0 else daemons[::-1]
            for d in order:
                runs[d.name].append(measure(d, tc, o.secs, warm if i == 0 else o.warm))
        delivery = {d.name: delivered(d, tc) for d in daemons}
    except Exception as e:  # noqa: BLE001 - reported as the row's result
        why = str(e)
        for d in daemons:
            crash = d.recover()
            if crash:
                why = f"{d.name} exited: {crash}"
        print(f"{r.key:<24} not measured: {why[:300]}", flush=True)
        return {"error": why}
    for d in daemons:
        rs = runs[d.name]
        med = statistics.median(x.mpps for x in rs)
        res[d.name] = {
            "mpps": med,
            "min": min(x.mpps for x in rs),
            "max": max(x.mpps for x in rs),
            "share": min(x.share for x in rs),
            "low_share": sum(1 for x in rs if x.share < 0.95),
            "delivered": delivery[d.name],
            "cycles": hz / (med * 1e6) if med > 0 else float("inf"),
        }
    res["secs"] = time.monotonic() - t0
    line = f"{r.key:<24}"
    for d in daemons:
        x = res[d.name]
        line += f" {d.name} {x['mpps']:7.2f} ({x['min']:.1f}..{x['max']:.1f}, cpu {x['share']:.2f})"
    print(line + f"  [{res['secs']:.0f} s]", flush=True)
    return res


def report(rows: list, daemons: list, results: dict, o, hz: float) -> None:
    """The table (and with --markdown, the same as a Markdown table), the front ends, the
    notes, and the JSON line."""
    names = [d.name for d in daemons]
    both = len(names) == 2
    of = results.get("_front_of", {})
    print()
    hdr = f"{'row':<24} {'class':<18}"
    for n in names:
        hdr += f" {n + ' Mpps':>13} {'spread':>13}"
    if both:
        hdr += f" {'ratio':>6} {'class cyc/pkt B / S':>20} {'delivered':>10}"
    print(hdr)
    md = [
        "| row | class | BESS Mpps | Bessemer Mpps | ratio | class cycles/pkt BESS / Bessemer | |",
        "|---|---|---|---|---|---|---|",
    ]
    js: dict = {"bench": "vs_bess"}
    ratios = []
    measured_classes = set()
    slow_classes = set()
    low_share = 0
    for r in rows:
        x = results.get(r.key)
        if not x or "error" in x:
            err = (x or {}).get("error", "no result")[:80]
            print(f"{r.key:<24} {r.cls:<18} not measured: {err}")
            md.append(f"| {r.key} | {r.cls} | not measured: {err} | | | | |")
            continue
        line = f"{r.key:<24} {r.cls:<18}"
        mark = ""
        for n in names:
            y = x[n]
            line += f" {y['mpps']:13.2f} {y['min']:6.1f}..{y['max']:<6.1f}"
            if y["low_share"]:
                mark += f" !cpu({n} {y['share']:.2f})"
                low_share += 1
        if not both:
            for n in names:
                js[f"{r.key}_{n.lower()}_mpps"] = round(x[n]["mpps"], 2)
            print(line + mark)
            continue
        b, s = x["BESS"], x["Bessemer"]
        ratio = s["mpps"] / b["mpps"] if b["mpps"] > 0 else float("nan")
        fk = of.get(r.key)
        fx = results.get(fk) if fk else None
        cyc = f"{'-':>20}"
        cyc_md = "-"
        if fx and "error" not in fx:
            cb = b["cycles"] - fx["BESS"]["cycles"]
            cs = s["cycles"] - fx["Bessemer"]["cycles"]
            cyc = f"{cb:8.2f} / {cs:<8.2f}"
            cyc_md = f"{cb:.1f} / {cs:.1f}"
            js[f"{r.key}_class_cycles_bess"] = round(cb, 2)
            js[f"{r.key}_class_cycles_bessemer"] = round(cs, 2)
        line += f" {ratio:6.2f} {cyc:>20} {b['delivered']:4.2f}/{s['delivered']:<4.2f}"
        if abs(b["delivered"] - s["delivered"]) > 0.05 * max(b["delivered"], 0.01):
            mark += " !delivered-differs"
        if not r.comparable:
            mark += " !not-comparable"
        else:
            ratios.append((ratio, r.key))
            measured_classes.add(r.cls)
            if ratio < 1.5:
                slow_classes.add(r.cls)
        js[f"{r.key}_ratio"] = round(ratio, 3)
        js[f"{r.key}_bess_mpps"] = round(b["mpps"], 2)
        js[f"{r.key}_bessemer_mpps"] = round(s["mpps"], 2)
        print(line + mark)
        flags = mark.replace("!", "").strip()
        md.append(
            f"| {r.key} | {r.cls} | {b['mpps']:.1f} | {s['mpps']:.1f} | {ratio:.2f} | "
            f"{cyc_md} | {flags} |"
        )
    fronts = [
        (k, v)
        for k, v in results.items()
        if k.startswith("front:") and "error" not in v
    ]
    if fronts and both:
        print("\nfront ends (the rows without their class), Mpps BESS / Bessemer:")
        for k, v in fronts:
            print(
                f"  {k[6:]:<24} {v['BESS']['mpps']:8.2f} / {v['Bessemer']['mpps']:.2f}"
            )
    notes = sorted({r.note for r in rows if r.note})
    if notes:
        print("\nnotes:")
        for n in notes:
            print(f"  {n}")
    if both:
        worst = min(ratios) if ratios else (float("nan"), "")
        faster = measured_classes - slow_classes
        js["worst_ratio"] = round(worst[0], 3)
        js["worst_row"] = worst[1]
        js["classes_measured"] = len(measured_classes)
        js["classes_faster"] = len(faster)
        print(
            f"\nworst ratio {worst[0]:.2f} ({worst[1]}); classes measured "
            f"{len(measured_classes)}, at least 1.5x in every row: {len(faster)}; "
            f"rows with a run below 0.95 of a core: {low_share}"
        )
        below = sorted(x for x in ratios if x[0] < 1.5)
        if below:
            print("rows below 1.5x: " + ", ".join(f"{k} {v:.2f}" for v, k in below))
        if o.markdown:
            with open(o.markdown, "w") as f:
                f.write("\n".join(md) + "\n")
    js["bess_measured"] = "BESS" in names
    js["runs"] = o.runs
    js["secs"] = o.secs
    js["load_avg"] = load_avg()
    js["tsc_ghz"] = round(hz / 1e9, 3)
    line = json.dumps(js)
    if o.json_out:
        with open(o.json_out, "w") as f:
            f.write(line + "\n")
    print(line)


if __name__ == "__main__":
    sys.exit(main())

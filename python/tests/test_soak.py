"""The soak: UDP traffic from one network namespace to another through a multi-module
pipeline (PortInc -> ExactMatch -> WildcardMatch -> PortOut over AFPacketPorts on veths)
while a controller changes the daemon every 100 ms: splices a module in and out of the
live path in transactions, adds and deletes table rules, creates and destroys ports
(AFPacketPort and AFXDPPort), modules and connections, adds and removes a worker and a
traffic class, and sends hostile requests (unknown classes, bad names, wrong and garbage
argument payloads up to 4 MiB, impossible connections, unknown commands).

At the end: the daemon is alive; the packet pool's free count is where it started; for
every module, packets in = packets out + counted drops, and the packets the first port
received = what the last port sent + every counted drop (so the splices lost nothing); the
daemon's RSS grew less than RSS_GROWTH_BOUND after a warm-up; no request took longer than
REQUEST_BOUND; every hostile request was refused with an error code. `SOAK_SECS` sets the
duration (default 60; `make soak` runs 600). Root only (namespaces, veths)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest
from google.protobuf import any_pb2

from bessemer.client import BESS

from .conftest import ROOT_ONLY, free_port, link_mac, running_daemon, sh, veth_to_namespace

pytestmark = [ROOT_ONLY, pytest.mark.soak]

SOAK_SECS = float(os.environ.get("SOAK_SECS", "60"))
TICK = 0.1  # seconds between two control actions
RATE = 4000  # frames per second the traffic generator aims at
# What the soak asserts.
RSS_GROWTH_BOUND = 16 << 20
# RSS is first read after this long: every kind of change has run a few times by then (the
# allocator's arenas and the first AF_XDP UMEM are set up), so what grows after it grows with
# time.
WARMUP_SECS = min(15.0, SOAK_SECS / 4)
# Seconds. The slowest requests are port creation and destruction, which pause the workers
# (busy-polling threads: on a machine with fewer free cores than threads, pausing them
# waits for the scheduler); the client waits up to CLIENT_TIMEOUT, so a slow request is
# measured and reported rather than cut off.
REQUEST_BOUND = 10.0
CLIENT_TIMEOUT = 60.0
MARKER = b"SOAK"

# Sends 60-byte UDP frames on IFNAME for SECS seconds at RATE frames/s: 8 of 10 to
# 10.0.0.2:9 (ExactMatch and WildcardMatch rules forward them), 1 to port 10 (no
# ExactMatch rule: a dead end), 1 to 10.0.0.3:9 (no WildcardMatch rule: a dead end);
# prints the number sent.
GENERATOR = r"""
import socket, struct, sys, time
ifname, src, dst = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
secs, rate = float(sys.argv[4]), int(sys.argv[5])
def frame(ip_dst, dport):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, ip_dst]))
    udp = struct.pack("!HHHH", 40000, dport, 26, 0)
    return dst + src + b"\x08\x00" + ip + udp + b"SOAK" + bytes(14)
kinds = [frame(2, 9)] * 8 + [frame(2, 10), frame(3, 9)]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
sent, start, burst = 0, time.monotonic(), 20
while (now := time.monotonic()) - start < secs:
    due = int((now - start) * rate)
    while sent < due:
        try:
            s.send(kinds[sent % 10])
        except OSError:
            time.sleep(0.001)
            continue
        sent += 1
    time.sleep(burst / rate)
print(sent, flush=True)
"""

# Counts frames carrying MARKER after the UDP header on IFNAME for SECS seconds.
COUNTER = r"""
import socket, sys, time
ifname, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
s.bind((ifname, 0))
print("ready", flush=True)
n, end = 0, time.monotonic() + secs
while time.monotonic() < end:
    s.settimeout(max(0.01, end - time.monotonic()))
    try:
        data, addr = s.recvfrom(2048)
    except OSError:
        continue
    if addr[2] != socket.PACKET_OUTGOING and data[42:46] == b"SOAK":
        n += 1
print(n, flush=True)
"""


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def pool_free(http_port: int) -> tuple[int, int]:
    """(free, capacity) of the daemon's packet pool, from /api/snapshot."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/snapshot", timeout=10) as r:
        pool = json.load(r)["pool"]
    return pool["free"], pool["capacity"]


@dataclass
class Controller:
    """Times every request; counts changes made and hostile requests refused."""

    b: BESS
    slowest: tuple[float, str] = (0.0, "")
    changes: int = 0
    refused: Counter = field(default_factory=Counter)

    def call(self, what: str, fn, *args, **kw):
        start = time.monotonic()
        try:
            return fn(*args, **kw)
        finally:
            took = time.monotonic() - start
            if took > self.slowest[0]:
                self.slowest = (took, what)

    def change(self, what: str, fn, *args, **kw):
        out = self.call(what, fn, *args, **kw)
        self.changes += 1
        return out

    def hostile(self, what: str, fn, *args, **kw) -> None:
        """A request that must be refused with an errno (not crash the daemon or hang)."""
        try:
            self.call(what, fn, *args, **kw)
        except BESS.Error as exc:
            assert exc.code > 0, f"{what}: {exc.errmsg}"
            self.refused[exc.code] += 1
            return
        raise AssertionError(f"hostile request accepted: {what}")


def raw_any(type_name: str, value: bytes) -> any_pb2.Any:
    return any_pb2.Any(type_url=f"type.googleapis.com/bess.pb.{type_name}", value=value)


def raw_create(b: BESS, mclass: str, name: str, arg: any_pb2.Any):
    req = b._pb["bess_msg"].CreateModuleRequest(name=name, mclass=mclass)
    req.arg.CopyFrom(arg)
    return b._call("CreateModule", req)


def raw_command(b: BESS, name: str, cmd: str, arg: any_pb2.Any):
    req = b._pb["bess_msg"].CommandRequest(name=name, cmd=cmd)
    req.arg.CopyFrom(arg)
    return b._call("ModuleCommand", req)


def hostile_requests(c: Controller, rng: random.Random, i: int) -> None:
    """One of the hostile requests, by turn."""
    b = c.b
    garbage = rng.randbytes(rng.choice([1, 64, 4096, 65536]))
    cases = [
        ("unknown class", lambda: b.create_module("NoSuchClass", f"h{i}")),
        ("name too long", lambda: b.create_module("Bypass", "n" * 5000)),
        ("name taken", lambda: b.create_module("Bypass", "em")),
        ("empty port name", lambda: b.destroy_port("")),
        (
            "wrong arg type",
            lambda: raw_create(b, "ExactMatch", f"h{i}", b.pack("SourceArg", {"pkt_size": 60})),
        ),
        (
            "garbage arg",
            lambda: raw_create(b, "WildcardMatch", f"h{i}", raw_any("WildcardMatchArg", garbage)),
        ),
        (
            "4 MiB garbage arg",
            lambda: raw_create(
                b, "ExactMatch", f"h{i}", raw_any("ExactMatchArg", rng.randbytes(4 << 20))
            ),
        ),
        ("connect to nothing", lambda: b.connect_modules("em", "no_such_module", 3)),
        ("gate out of range", lambda: b.connect_modules("em", "wm", 70000)),
        ("from a module without gates", lambda: b.connect_modules("out", "em")),
        ("taken gate", lambda: b.connect_modules("em", "wm", 1)),
        ("unknown command", lambda: b.run_module_command("em", "explode", "EmptyArg")),
        (
            "garbage command arg",
            lambda: raw_command(b, "wm", "add", raw_any("WildcardMatchCommandAddArg", garbage)),
        ),
        (
            "rule of the wrong size",
            lambda: b.run_module_command(
                "em",
                "add",
                "ExactMatchCommandAddArg",
                {"gate": 1, "fields": [{"value_bin": b"\x01"}]},
            ),
        ),
        ("command to nothing", lambda: b.run_module_command("nobody", "clear", "EmptyArg")),
        ("destroy a port in use", lambda: b.destroy_port("pa")),
        ("worker id out of range", lambda: b.add_worker(100000, 0)),
        ("unknown policy", lambda: b.add_tc(f"h{i}", "no_such_policy", wid=0)),
        ("unknown driver", lambda: b.create_port("NoSuchPort", f"h{i}")),
        (
            "port on no interface",
            lambda: b.create_port("AFPacketPort", f"h{i}", {"ifname": "nonexistent0"}),
        ),
    ]
    what, fn = cases[i % len(cases)]
    c.hostile(what, fn)


def ogate_packets(b: BESS, name: str, gate: int) -> int:
    return sum(g.pkts for g in b.get_module_info(name).ogates if g.ogate == gate)


@dataclass
class Retired:
    """Packets counted on connections a splice replaced (a connection's counters go with
    it, as in BESS): read with the workers paused just before the transaction, so each
    module's balance can still be checked at the end."""

    out: Counter = field(default_factory=Counter)  # by module: packets sent on them
    into: Counter = field(default_factory=Counter)  # by module: packets received on them
    modules_checked: int = 0


def splice(b: BESS, name: str, r: Retired) -> None:
    """Bypass `name` between wm:1 and out, in one transaction (no packet lost)."""
    b.pause_all()
    n = ogate_packets(b, "wm", 1)
    with b.transaction():
        b.create_module("Bypass", name)
        b.disconnect_modules("wm", 1)
        b.connect_modules("wm", name, 1)
        b.connect_modules(name, "out")
    r.out["wm"] += n
    r.into["out"] += n
    b.resume_all()


def unsplice(b: BESS, name: str, r: Retired) -> None:
    """Takes `name` out from between wm:1 and out again; its own balance is checked first."""
    b.pause_all()
    into, out = ogate_packets(b, "wm", 1), ogate_packets(b, name, 0)
    dropped = sum(d.count for m in b.show_errors([name]).modules for d in m.drops)
    assert into == out + dropped, f"{name}: {into} in, {out} out, {dropped} dropped"
    with b.transaction():
        b.disconnect_modules("wm", 1)
        b.destroy_module(name)
        b.connect_modules("wm", "out", 1)
    r.out["wm"] += into
    r.into["out"] += out
    r.modules_checked += 1
    b.resume_all()


def module_balance(b: BESS) -> tuple[dict, dict]:
    """Per module (in, out, drops) from GetModuleInfo and ShowErrors; drops by (module,
    reason)."""
    drops = {
        (m.name, d.reason): d.count
        for m in b.show_errors(include_zero=False).modules
        for d in m.drops
    }
    rows = {}
    for m in b.list_modules():
        info = b.get_module_info(m.name)
        pin = sum(g.pkts for g in info.igates)
        pout = sum(g.pkts for g in info.ogates)
        rows[m.name] = (m.mclass, pin, pout, sum(v for (n, _), v in drops.items() if n == m.name))
    return rows, drops


@pytest.fixture()
def soak_daemon(tmp_path):
    http = free_port()
    with running_daemon(tmp_path, "--http", f"127.0.0.1:{http}") as d:
        yield d, http


def test_soak_reconfiguration_under_traffic(soak_daemon, two_namespaces):
    d, http = soak_daemon
    b, pid = BESS(port=d.port, timeout=CLIENT_TIMEOUT), d.proc.pid
    ns_a, ns_b = two_namespaces
    tag = uuid.uuid4().hex[:6]
    sw = {"a": f"ka{tag}", "b": f"kb{tag}", "c": f"kc{tag}"}
    host = {"a": f"ha{tag}", "b": f"hb{tag}", "c": f"hc{tag}"}
    rng = random.Random(14)
    free_start, capacity = pool_free(http)
    procs: list[subprocess.Popen] = []
    try:
        for n in (ns_a, ns_b):
            sh("ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        for k, n in (("a", ns_a), ("b", ns_b), ("c", ns_b)):
            veth_to_namespace(sw[k], host[k], n)

        b.add_worker(0, 0)
        b.create_port("AFPacketPort", "pa", {"ifname": sw["a"]})
        b.create_port("AFPacketPort", "pb", {"ifname": sw["b"]})
        b.create_module("PortInc", "in", {"port": "pa"})
        b.create_module("ExactMatch", "em", {"fields": [{"offset": 36, "num_bytes": 2}]})
        b.create_module("WildcardMatch", "wm", {"fields": [{"offset": 30, "num_bytes": 4}]})
        b.create_module("PortOut", "out", {"port": "pb"})
        b.connect_modules("in", "em")
        b.connect_modules("em", "wm", 1)
        b.connect_modules("wm", "out", 1)
        b.run_module_command(
            "em",
            "add",
            "ExactMatchCommandAddArg",
            {"gate": 1, "fields": [{"value_bin": b"\x00\x09"}]},
        )
        b.run_module_command(
            "em", "set_default_gate", "ExactMatchCommandSetDefaultGateArg", {"gate": 0}
        )
        b.run_module_command(
            "wm",
            "add",
            "WildcardMatchCommandAddArg",
            {
                "gate": 1,
                "priority": 1,
                "values": [{"value_bin": bytes([10, 0, 0, 2])}],
                "masks": [{"value_bin": b"\xff\xff\xff\xff"}],
            },
        )
        b.run_module_command(
            "wm", "set_default_gate", "WildcardMatchCommandSetDefaultGateArg", {"gate": 0}
        )
        b.resume_all()

        counter = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns_b,
                sys.executable,
                "-c",
                COUNTER,
                host["b"],
                str(SOAK_SECS + 8),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(counter)
        assert counter.stdout.readline().strip() == "ready", counter.stderr.read()
        src_mac = link_mac(ns_a, host["a"]).replace(":", "")
        dst_mac = link_mac(ns_b, host["b"]).replace(":", "")
        gen = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns_a,
                sys.executable,
                "-c",
                GENERATOR,
                host["a"],
                src_mac,
                dst_mac,
            ]
            + [str(SOAK_SECS), str(RATE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(gen)
        time.sleep(1)
        rss_setup = rss_bytes(pid)
        rss_start = None

        c = Controller(b)
        retired = Retired()
        spliced = extra_port = extra_mods = worker = None
        em_rule = wm_rule = None
        start = time.monotonic()
        tick = 0
        while time.monotonic() - start < SOAK_SECS - 3:
            t0 = time.monotonic()
            step = tick % 8
            if step == 0:  # splice a Bypass between wm and out, or take it out: no loss
                if spliced is None:
                    spliced = f"bp{tick}"
                    c.change("splice", splice, b, spliced, retired)
                else:
                    c.change("unsplice", unsplice, b, spliced, retired)
                    spliced = None
            elif step == 1:  # an ExactMatch rule traffic does not hit, added or deleted
                if em_rule is None:
                    em_rule = (1000 + tick % 5000).to_bytes(2, "big")
                    c.change(
                        "em add",
                        b.run_module_command,
                        "em",
                        "add",
                        "ExactMatchCommandAddArg",
                        {"gate": 1, "fields": [{"value_bin": em_rule}]},
                    )
                else:
                    c.change(
                        "em delete",
                        b.run_module_command,
                        "em",
                        "delete",
                        "ExactMatchCommandDeleteArg",
                        {"fields": [{"value_bin": em_rule}]},
                    )
                    em_rule = None
            elif step == 2:  # a WildcardMatch rule, added or deleted
                if wm_rule is None:
                    wm_rule = bytes([192, 168, tick % 256, 0])
                    c.change(
                        "wm add",
                        b.run_module_command,
                        "wm",
                        "add",
                        "WildcardMatchCommandAddArg",
                        {
                            "gate": 1,
                            "priority": 2,
                            "values": [{"value_bin": wm_rule}],
                            "masks": [{"value_bin": b"\xff\xff\xff\x00"}],
                        },
                    )
                else:
                    c.change(
                        "wm delete",
                        b.run_module_command,
                        "wm",
                        "delete",
                        "WildcardMatchCommandDeleteArg",
                        {
                            "values": [{"value_bin": wm_rule}],
                            "masks": [{"value_bin": b"\xff\xff\xff\x00"}],
                        },
                    )
                    wm_rule = None
            elif step == 3:  # a port created (AF_PACKET or AF_XDP, by turn) or destroyed
                if extra_port is None:
                    driver = ("AFPacketPort", "AFXDPPort")[(tick // 16) % 2]
                    extra_port = f"pc{tick}"
                    c.change(
                        f"create {driver}", b.create_port, driver, extra_port, {"ifname": sw["c"]}
                    )
                else:
                    c.change("destroy port", b.destroy_port, extra_port)
                    extra_port = None
            elif step == 4:  # two modules and a connection, made or removed
                if extra_mods is None:
                    extra_mods = (f"x{tick}", f"y{tick}")
                    c.change("create module", b.create_module, "Bypass", extra_mods[0])
                    c.change("create module", b.create_module, "Bypass", extra_mods[1])
                    c.change("connect", b.connect_modules, *extra_mods)
                else:
                    c.change("disconnect", b.disconnect_modules, extra_mods[0])
                    for m in extra_mods:
                        c.change("destroy module", b.destroy_module, m)
                    extra_mods = None
            elif step == 5:  # worker 1 and a traffic class on it, added or removed
                if worker is None:
                    worker = f"tc{tick}"
                    c.change("add worker", b.add_worker, 1, 0)
                    c.change("add tc", b.add_tc, worker, "round_robin", wid=1)
                else:
                    c.change("reset tcs", b.reset_tcs)
                    c.change("destroy worker", b.destroy_worker, 1)
                    worker = None
            else:  # hostile requests
                hostile_requests(c, rng, tick)
                hostile_requests(c, rng, tick + 7)
            tick += 1
            if rss_start is None and time.monotonic() - start > WARMUP_SECS:
                rss_start = rss_bytes(pid)
            time.sleep(max(0.0, TICK - (time.monotonic() - t0)))
        elapsed = time.monotonic() - start

        # Undo what is left, wait for the generator, let the last frames drain.
        if spliced:
            unsplice(b, spliced, retired)
        if extra_port:
            b.destroy_port(extra_port)
        if extra_mods:
            for m in extra_mods:
                b.destroy_module(m)
        if worker:
            b.reset_tcs()
            b.destroy_worker(1)
        sent_out, err = gen.communicate(timeout=SOAK_SECS + 30)
        assert gen.returncode == 0, err
        sent = int(sent_out.split()[-1])
        time.sleep(1)
        rss_end = rss_bytes(pid)
        b.pause_all()
        rows, drops = module_balance(b)
        pa, pb = b.get_port_stats("pa"), b.get_port_stats("pb")
        received_out, err = counter.communicate(timeout=30)
        assert counter.returncode == 0, err
        received = int(received_out.split()[-1])

        b.resume_all()
        b.reset_all()
        b.reset_ports()
        free_end, _ = pool_free(http)
        assert b.get_version() and d.proc.poll() is None, "the daemon died"
    finally:
        for p in procs:
            p.kill()
            p.wait()
        try:
            b.reset_all()
            b.reset_ports()
        except BESS.Error:
            pass
        for name in sw.values():
            sh("ip", "link", "del", name)
        b.close()

    total_drops = sum(drops.values())
    figures = {
        "soak_seconds": round(elapsed, 1),
        "reconfigurations": c.changes,
        "hostile_requests_refused": sum(c.refused.values()),
        "refused_by_errno": dict(sorted(c.refused.items())),
        "frames_sent": sent,
        "port_in_packets": pa.inc.packets,
        "port_out_packets": pb.out.packets,
        "frames_received": received,
        "drops_by_reason": {f"{m}/{r}": n for (m, r), n in sorted(drops.items())},
        "spliced_modules_balanced": retired.modules_checked,
        "pool_buffers_leaked": free_start - free_end,
        "pool_capacity": capacity,
        "rss_warmup_growth_bytes": rss_start - rss_setup,
        "rss_growth_bytes": rss_end - rss_start,
        "slowest_request_seconds": round(c.slowest[0], 3),
        "slowest_request": c.slowest[1],
    }
    print("\nsoak figures: " + json.dumps(figures))

    assert free_end == free_start, f"{free_start - free_end} packet buffers leaked"
    for name, (mclass, pin, pout, ndrop) in rows.items():
        pin += retired.into[name]
        pout += retired.out[name]
        if mclass == "PortInc":
            pin = pa.inc.packets
        if mclass == "PortOut":
            pout = pb.out.packets
        assert pin == pout + ndrop, f"{name}: {pin} in, {pout} out, {ndrop} dropped"
    assert pa.inc.packets == pb.out.packets + total_drops, "packets lost without a count"
    assert pa.inc.packets > 0 and pb.out.packets > 0 and received > 0
    assert received <= pb.out.packets and pa.inc.packets <= sent
    assert drops.get(("em", "deadend"), 0) > 0 and drops.get(("wm", "deadend"), 0) > 0
    assert c.changes >= SOAK_SECS * 3, f"only {c.changes} changes in {elapsed:.0f} s"
    assert rss_end - rss_start < RSS_GROWTH_BOUND, f"RSS grew by {rss_end - rss_start} bytes"
    assert c.slowest[0] < REQUEST_BOUND, f"{c.slowest[1]} took {c.slowest[0]:.2f} s"

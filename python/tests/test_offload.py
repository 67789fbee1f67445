"""XDP offload of an AFXDPPort's pipeline (docs/planner.md "Offload into XDP"), end to end:
host A —veth— AFXDPPort pa | ExactMatch on the 5-tuple | AFXDPPort pb —veth— host B.

em's gates: 0 -> MACSwap -> PortOut(pb) (kernel: XDP_REDIRECT with MAC swap), 1 -> Sink
(XDP_DROP), 2 (default) -> Bypass -> PortOut(pb) (user space: Bypass is not offloadable),
3 -> PortOut(pa) (XDP_TX back to A), and a rule-drop. The same frames (matching flows, near
misses, truncated and random ones) are sent with the offload off, then on: B and A must
receive the same frames, and em's gate counters must move by the same amounts. Rule
changes made while the offload is on are followed by the kernel maps. Host A's veth end has
an XDP_PASS program so that XDP_TX frames reach it (a veth peer quirk, see XDP_PASS_HOLDER).
Needs root and a bessemerd built with clang (the offload's own error says so otherwise, and
the test is skipped with that reason)."""

from __future__ import annotations

import random
import select
import subprocess
import sys
import uuid

import pytest

from bessemer.client import BESS

from .conftest import RECEIVER, ROOT_ONLY, in_ns, send_and_capture, sh
from .test_cli import cli

pytestmark = ROOT_ONLY

MARK = bytes.fromhex("02bebe00ffee")  # every test frame's source MAC
DST = bytes.fromhex("02aaaaaaaa02")
FIELDS = [(23, 1), (26, 4), (30, 4), (34, 2), (36, 2)]


def udp_frame(sip: int, sport: int, length: int) -> bytes:
    f = bytearray(max(length, 42))
    f[0:6], f[6:12], f[12:14] = DST, MARK, b"\x08\x00"
    f[14], f[22], f[23] = 0x45, 64, 17
    f[16:18] = (len(f) - 14).to_bytes(2, "big")
    f[26:30] = bytes([10, 0, 0, sip])
    f[30:34] = bytes([10, 1, 0, 1])
    f[34:36] = sport.to_bytes(2, "big")
    f[36:38] = (53).to_bytes(2, "big")
    return bytes(f[:length])


def rule(sip: int, sport: int, gate: int) -> dict:
    vals = [bytes([17]), bytes([10, 0, 0, sip]), bytes([10, 1, 0, 1])]
    vals += [sport.to_bytes(2, "big"), (53).to_bytes(2, "big")]
    return {"gate": gate, "fields": [{"value_bin": v} for v in vals]}


DROP_GATE = 8192


@pytest.fixture()
def offload_net(daemon, two_namespaces):
    """The two hosts (IPv6 off, GRO on so a veth accepts XDP_TX/XDP_REDIRECT frames), the
    switch ports and the pipeline; removed afterwards."""
    b: BESS = daemon.client
    tag = uuid.uuid4().hex[:8]
    ns = tuple(two_namespaces)
    hosts, sws = (f"ha{tag}", f"hb{tag}"), (f"sa{tag}", f"sb{tag}")
    holder = None
    try:
        for i in range(2):
            for k in ("all", "default"):
                in_ns(ns[i], "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1")
            peer = ("peer", "name", hosts[i], "netns", ns[i])
            r = sh("ip", "link", "add", sws[i], "type", "veth", *peer)
            assert r.returncode == 0, r.stderr
            with open(f"/proc/sys/net/ipv6/conf/{sws[i]}/disable_ipv6", "w") as f:
                f.write("1")
            # A veth takes XDP_TX / XDP_REDIRECT frames only with NAPI on at the peer.
            in_ns(ns[i], "ethtool", "-K", hosts[i], "gro", "on")
            assert sh("ip", "-n", ns[i], "link", "set", hosts[i], "up").returncode == 0
            assert sh("ip", "link", "set", sws[i], "up").returncode == 0
            b.create_port("AFXDPPort", ("pa", "pb")[i], {"ifname": sws[i]})
        b.create_module("PortInc", "in_a", {"port": "pa"})
        fields = [{"offset": o, "num_bytes": n} for o, n in FIELDS]
        b.create_module("ExactMatch", "em", {"fields": fields})
        b.create_module("MACSwap", "swap", {})
        b.create_module("PortOut", "out_b", {"port": "pb"})
        b.create_module("Sink", "sink", {})
        b.create_module("Bypass", "slow", {})
        b.create_module("PortOut", "out_a", {"port": "pa"})
        for m1, og, m2 in [
            ("in_a", 0, "em"),
            ("em", 0, "swap"),
            ("swap", 0, "out_b"),
            ("em", 1, "sink"),
            ("em", 2, "slow"),
            ("slow", 0, "out_b"),
            ("em", 3, "out_a"),
        ]:
            b.connect_modules(m1, m2, og)
        b.run_module_command(
            "em", "set_default_gate", "ExactMatchCommandSetDefaultGateArg", {"gate": 2}
        )
        holder = subprocess.Popen(
            ["ip", "netns", "exec", ns[0], sys.executable, "-c", XDP_PASS_HOLDER, hosts[0]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([holder.stdout], [], [], 10)
        assert ready and holder.stdout.readline().strip() == "ready", holder.stderr.read()
        b.resume_all()
        yield b, ns, hosts, sws
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        try:
            b.reset_all()
        except BESS.Error:
            pass
        for sw in sws:
            sh("ip", "link", "del", sw)


def em_gates(b: BESS) -> dict[int, int]:
    return {og.ogate: og.pkts for og in b.get_module_info("em").ogates}


# Sends the frames given in hex on stdin on IFNAME, a few at a time: a veth's receive ring
# holds 256 frames, and a burst of all of them at once would lose some by timing alone.
PACED_SENDER = r"""
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for i, line in enumerate(sys.stdin.read().split()):
    s.send(bytes.fromhex(line))
    if i % 8 == 7:
        time.sleep(0.002)
"""


# Attaches `return XDP_PASS;` to IFNAME (native mode, through a BPF link) and keeps it there
# until stdin closes. A veth flushes XDP_TX frames to its peer only when the peer has an XDP
# program (veth_xdp_flush), so host A needs one to see what the offload sends back.
XDP_PASS_HOLDER = r"""
import ctypes, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
NR_BPF = 321
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(bytes(attr), 128)
    r = libc.syscall(NR_BPF, cmd, buf, 128)
    if r < 0:
        raise OSError(ctypes.get_errno(), f"bpf({cmd})")
    return r
insns = struct.pack("<BBhi", 0xB7, 0, 0, 2) + struct.pack("<BBhi", 0x95, 0, 0, 0)
ibuf, lic = ctypes.create_string_buffer(insns), ctypes.create_string_buffer(b"GPL")
attr = bytearray(128)
struct.pack_into("<IIQQ", attr, 0, 6, 2, ctypes.addressof(ibuf), ctypes.addressof(lic))
struct.pack_into("<I", attr, 68, 37)
prog = bpf(5, attr)
attr = bytearray(128)
struct.pack_into("<IIII", attr, 0, prog, socket.if_nametoindex(sys.argv[1]), 37, 4)
link = bpf(28, attr)
print("ready", flush=True)
sys.stdin.read()
"""


def both_sides(ns, hosts, frames, secs: float) -> tuple[list[bytes], list[bytes]]:
    """Sends `frames` from A; the frames B received and the frames that came back to A
    (XDP_TX or PortOut(pa)), each sorted."""
    procs = []
    try:
        for i, offsets in ((1, "0,6"), (0, "6")):
            cmd = ["ip", "netns", "exec", ns[i], sys.executable, "-c", RECEIVER, hosts[i]]
            cmd += [MARK.hex(), offsets, str(len(frames)), str(secs)]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(p)
            ready, _, _ = select.select([p.stdout], [], [], 10)
            assert ready and p.stdout.readline().strip() == "ready", f"no receiver on {hosts[i]}"
        sent = subprocess.run(
            ["ip", "netns", "exec", ns[0], sys.executable, "-c", PACED_SENDER, hosts[0]],
            input="\n".join(f.hex() for f in frames),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        got = []
        for p in procs:
            out, err = p.communicate(timeout=secs + 10)
            assert p.returncode == 0, err
            got.append(sorted(bytes.fromhex(x) for x in out.split()))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return got[0], got[1]


def test_offloaded_and_user_space_pipelines_agree(offload_net):
    b, ns, hosts, sws = offload_net
    rng = random.Random(16)
    flows = [(i % 250, 2000 + i) for i in range(60)]
    gates = [0, 0, 0, 1, 2, 3, DROP_GATE]
    for n, (sip, sport) in enumerate(flows):
        b.run_module_command(
            "em", "add", "ExactMatchCommandAddArg", rule(sip, sport, gates[n % len(gates)])
        )

    frames = []
    for n in range(300):
        sip, sport = rng.choice(flows)
        kind = n % 5
        if kind <= 1:
            frames.append(udp_frame(sip, sport, rng.randrange(60, 600)))
        elif kind == 2:
            frames.append(udp_frame(sip, sport + 1000, 64))  # a near miss: default gate
        elif kind == 3:
            frames.append(udp_frame(sip, sport, rng.randrange(14, 42)))  # truncated
        else:
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(2, 100)))
            frames.append(DST + MARK + b"\x08\x00" + body)  # random after the header

    # User space.
    g0 = em_gates(b)
    user_b, user_a = both_sides(ns, hosts, frames, 5)
    g1 = em_gates(b)
    try:
        plan = b.offload("pa", "on")
    except BESS.Error as exc:
        if "XDP offload unavailable" in exc.errmsg:
            pytest.skip(exc.errmsg)  # bessemerd built without clang: the error names it
        raise
    if not plan.enabled:
        pytest.fail(plan.plan)
    assert "XDP_REDIRECT" in plan.plan and "XDP_DROP" in plan.plan, plan.plan
    assert "user space (Bypass 'slow'" in plan.plan, plan.plan
    off_b, off_a = both_sides(ns, hosts, frames, 5)
    g2 = em_gates(b)
    user_delta = {g: g1[g] - g0.get(g, 0) for g in g1}
    off_delta = {g: g2[g] - g1.get(g, 0) for g in g2}
    assert user_delta == off_delta, (user_delta, off_delta, b.offload("pa").plan)
    missing = [f.hex() for f in user_b if f not in off_b]
    extra = [f.hex() for f in off_b if f not in user_b]
    assert off_b == user_b, (len(off_b), len(user_b), missing[:5], extra[:5])
    assert off_a == user_a, (len(off_a), len(user_a), sh("ethtool", "-S", sws[0]).stdout)
    assert user_b and user_a and user_delta.get(1) and user_delta.get(3)
    # The kernel did the work it was given.
    report = b.offload("pa", "show").plan
    assert "packets" in report and "em ogate 0" in report, report

    # Rule changes follow: gate-0 flow moved to the Sink, then deleted (default gate).
    sip, sport = flows[0]
    b.run_module_command("em", "add", "ExactMatchCommandAddArg", rule(sip, sport, 1))
    one = [udp_frame(sip, sport, 100)] * 5
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 2)
    assert got == []
    v = {"fields": rule(sip, sport, 0)["fields"]}
    b.run_module_command("em", "delete", "ExactMatchCommandDeleteArg", v)
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 3)
    assert got == one  # default gate: Bypass in user space, unchanged
    b.run_module_command("em", "clear", "EmptyArg")
    assert "rules in the kernel map: 0" in b.offload("pa").plan

    off = b.offload("pa", "off")
    assert not off.enabled


def test_offload_refuses_what_it_cannot_do(daemon, offload_net):
    b, _, _, _ = offload_net
    with pytest.raises(BESS.Error, match="no port named|does not exist|not found"):
        b.offload("nosuchport", "on")
    b.create_port("PcapFilePort", "pcap", {"tx_file": "/dev/null"})
    with pytest.raises(BESS.Error, match="PcapFilePort: the XDP offload needs an AFXDPPort"):
        b.offload("pcap", "on")
    with pytest.raises(BESS.Error, match="not one of on, off, show"):
        b.offload("pa", "sideways")
    # 'show' without 'on' says what it would do and does nothing.
    r = b.offload("pa", "show")
    assert not r.enabled and "would do" in r.plan
    # The same through the CLI.
    r = cli(daemon.port, "offload", "pa")
    assert r.returncode == 0 and "classifier: em (ExactMatch)" in r.stdout, r.stderr
    r = cli(daemon.port, "offload", "pcap", "on")
    assert r.returncode != 0 and "needs an AFXDPPort" in r.stderr, (r.stdout, r.stderr)


def ip_frame(dst: bytes, length: int) -> bytes:
    f = bytearray(udp_frame(1, 3000, max(length, 42)))
    f[30:34] = dst
    return bytes(f[:length])


def rt_state(b: BESS) -> tuple[dict[int, int], dict[str, int]]:
    info = b.get_module_info("rt")
    return {og.ogate: og.pkts for og in info.ogates}, {d.reason: d.count for d in info.drops}


def user_then_offloaded(b: BESS, ns, hosts, frames, state):
    """Sends `frames` from A with the offload off, then on (skipped when this daemon has no
    offload); both runs must give B the same frames and move every gate and drop counter
    by the same amounts. Returns the plan's text, those gate and drop moves, and B's frames."""

    def delta(new, old):
        return {k: v - old.get(k, 0) for k, v in new.items() if v - old.get(k, 0)}

    g0, d0 = state(b)
    user_b, _ = both_sides(ns, hosts, frames, 5)
    g1, d1 = state(b)
    try:
        plan = b.offload("pa", "on")
    except BESS.Error as exc:
        if "XDP offload unavailable" in exc.errmsg:
            pytest.skip(exc.errmsg)
        raise
    assert plan.enabled, plan.plan
    off_b, _ = both_sides(ns, hosts, frames, 5)
    g2, d2 = state(b)
    assert delta(g1, g0) == delta(g2, g1), (g0, g1, g2, b.offload("pa").plan)
    assert delta(d1, d0) == delta(d2, d1), (d0, d1, d2, b.offload("pa").plan)
    assert off_b == user_b, (len(off_b), len(user_b))
    return plan.plan, delta(g1, g0), delta(d1, d0), user_b


def test_ip_lookup_with_update_offloaded_agrees_and_follows_commands(offload_net):
    """in_a -> rt (IPLookup): 10.1.0.0/16 -> upd (Update: destination MAC) -> out_b,
    10.1.2.0/24 -> drop, 10.2.0.0/16 -> sink, no /0 route (misses: no_match). The same
    frames with the offload off, then on: B receives the same frames, and rt's gate counters
    and drop reasons (rule_drop, no_match, not_ipv4, too_short) move by the same amounts.
    A route added by `add` with the offload on reaches the kernel, and `delete` removes it."""
    b, ns, hosts, _ = offload_net
    b.pause_all()
    b.disconnect_modules("in_a", 0)
    b.create_module("IPLookup", "rt", {})
    upd = {"fields": [{"offset": 0, "size": 6, "value": int.from_bytes(DST, "big")}]}
    b.create_module("Update", "upd", upd)
    for m1, og, m2 in [("in_a", 0, "rt"), ("rt", 0, "upd"), ("upd", 0, "out_b"), ("rt", 1, "sink")]:
        b.connect_modules(m1, m2, og)
    for prefix, plen, gate in [
        ("10.1.0.0", 16, 0),
        ("10.1.2.0", 24, DROP_GATE),
        ("10.2.0.0", 16, 1),
    ]:
        b.run_module_command(
            "rt",
            "add",
            "IPLookupCommandAddArg",
            {"prefix": prefix, "prefix_len": plen, "gate": gate},
        )
    b.resume_all()

    rng = random.Random(1616)
    dsts = [bytes([10, 1, 0, 9]), bytes([10, 1, 2, 3]), bytes([10, 2, 7, 7]), bytes([11, 0, 0, 1])]
    frames = []
    for n in range(200):
        f = ip_frame(rng.choice(dsts), rng.randrange(60, 400))
        kind = n % 8
        if kind == 5:
            f = f[:12] + b"\x86\xdd" + f[14:]  # not IPv4: up, not_ipv4
        elif kind == 6:
            f = f[: rng.randrange(14, 34)]  # truncated: up, too_short
        frames.append(f)

    plan, gates, drops, user_b = user_then_offloaded(b, ns, hosts, frames, rt_state)
    assert "classifier: rt (IPLookup)" in plan, plan
    assert "after rewrites" in plan and "XDP_DROP" in plan, plan
    assert user_b and all(d in drops for d in ("rule_drop", "no_match", "not_ipv4"))
    report = b.offload("pa").plan
    assert "rt ogate 0" in report and "rt drop no_match" in report, report
    # ShowErrors counts the kernel's drops too.
    shown = {d.reason: d.count for m in b.show_errors(["rt"]).modules for d in m.drops}
    assert shown == {k: v for k, v in rt_state(b)[1].items() if v}, shown

    # 11.0.0.1 has no route (no_match); a route added now sends it to B from the kernel.
    one = [ip_frame(bytes([11, 0, 0, 1]), 100)] * 5
    route = {"prefix": "11.0.0.0", "prefix_len": 8}
    b.run_module_command("rt", "add", "IPLookupCommandAddArg", {**route, "gate": 0})
    _, before = rt_state(b)
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 3)
    assert len(got) == 5 and all(f[:6] == DST for f in got), got
    assert "gate 0 (2 rule(s))" in b.offload("pa").plan, b.offload("pa").plan
    b.run_module_command("rt", "delete", "IPLookupCommandDeleteArg", route)
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 2)
    assert got == []
    _, after = rt_state(b)
    assert after["no_match"] - before["no_match"] == 5, (before, after)
    assert "gate 0 (1 rule(s))" in b.offload("pa").plan
    assert not b.offload("pa", "off").enabled


def wm_rule(ethertype: int, dst: bytes, dst_mask: bytes, priority: int, gate: int) -> dict:
    vals = [ethertype.to_bytes(2, "big"), bytes(a & m for a, m in zip(dst, dst_mask, strict=True))]
    masks = [b"\xff\xff", dst_mask]
    return {
        "gate": gate,
        "priority": priority,
        "values": [{"value_bin": v} for v in vals],
        "masks": [{"value_bin": m} for m in masks],
    }


def wm_state(b: BESS) -> tuple[dict[int, int], dict[str, int]]:
    info = b.get_module_info("wm")
    return {og.ogate: og.pkts for og in info.ogates}, {d.reason: d.count for d in info.drops}


def test_wildcard_match_with_vlan_pop_offloaded_agrees_and_follows_commands(offload_net):
    """in_a -> wm (WildcardMatch on EtherType and IPv4 destination): 10.1/16 -> upd (Update)
    -> out_b at priority 10, 10.1.2/24 drop at 20, 802.1Q frames -> pop (VLANPop) -> out_b
    at 5, 10.2/16 -> sink at 7, misses dropped (no_match). The same frames with the offload
    off, then on: B receives the same frames, and wm's gate counters and drop reasons move
    by the same amounts. A rule added by `add` with the offload on reaches the kernel, and
    `delete` removes it."""
    b, ns, hosts, _ = offload_net
    b.pause_all()
    b.disconnect_modules("in_a", 0)
    fields = [{"offset": 12, "num_bytes": 2}, {"offset": 30, "num_bytes": 4}]
    b.create_module("WildcardMatch", "wm", {"fields": fields})
    upd = {"fields": [{"offset": 0, "size": 6, "value": int.from_bytes(DST, "big")}]}
    b.create_module("Update", "upd", upd)
    b.create_module("VLANPop", "pop", {})
    links = [("in_a", 0, "wm"), ("wm", 0, "upd"), ("upd", 0, "out_b")]
    links += [("wm", 1, "pop"), ("pop", 0, "out_b"), ("wm", 2, "sink")]
    for m1, og, m2 in links:
        b.connect_modules(m1, m2, og)
    any_dst, m16, m24 = bytes(4), b"\xff\xff\x00\x00", b"\xff\xff\xff\x00"
    for r in [
        wm_rule(0x0800, bytes([10, 1, 0, 0]), m16, 10, 0),
        wm_rule(0x0800, bytes([10, 1, 2, 0]), m24, 20, DROP_GATE),
        wm_rule(0x8100, any_dst, any_dst, 5, 1),
        wm_rule(0x0800, bytes([10, 2, 0, 0]), m16, 7, 2),
    ]:
        b.run_module_command("wm", "add", "WildcardMatchCommandAddArg", r)
    b.resume_all()

    rng = random.Random(1717)
    dsts = [bytes([10, 1, 0, 9]), bytes([10, 1, 2, 3]), bytes([10, 2, 7, 7]), bytes([11, 0, 0, 1])]
    frames = []
    for n in range(200):
        f = ip_frame(rng.choice(dsts), rng.randrange(60, 400))
        kind = n % 6
        if kind == 4:
            f = f[:12] + b"\x81\x00\x00\x64" + f[12:]  # 802.1Q: popped, then to B
        elif kind == 5:
            f = f[: rng.randrange(14, 34)]  # too short for the key: up, default (drop)
        frames.append(f)

    plan, gates, drops, user_b = user_then_offloaded(b, ns, hosts, frames, wm_state)
    assert "classifier: wm (WildcardMatch)" in plan, plan
    assert "3 mask(s)" in plan, plan
    assert user_b and all(gates.get(g) for g in (0, 1, 2)), gates
    assert all(drops.get(r) for r in ("rule_drop", "no_match")), drops
    report = b.offload("pa").plan
    assert "wm ogate 1" in report and "wm drop rule_drop" in report, report

    # 11.0.0.1 matches no rule; a rule added now sends it to B from the kernel.
    one = [ip_frame(bytes([11, 0, 0, 1]), 100)] * 5
    new = wm_rule(0x0800, bytes([11, 0, 0, 0]), b"\xff\x00\x00\x00", 30, 0)
    b.run_module_command("wm", "add", "WildcardMatchCommandAddArg", new)
    assert "4 mask(s)" in b.offload("pa").plan
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 3)
    assert len(got) == 5 and all(f[:6] == DST for f in got), got
    _, before = wm_state(b)
    gone = {k: new[k] for k in ("values", "masks")}
    b.run_module_command("wm", "delete", "WildcardMatchCommandDeleteArg", gone)
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 2)
    assert got == []
    _, after = wm_state(b)
    assert after["no_match"] - before["no_match"] == 5, (before, after)
    assert "3 mask(s)" in b.offload("pa").plan
    assert not b.offload("pa", "off").enabled


def bpf_state(b: BESS) -> tuple[dict[int, int], dict[str, int]]:
    info = b.get_module_info("bpf")
    return {og.ogate: og.pkts for og in info.ogates}, {d.reason: d.count for d in info.drops}


def l4_frame(proto: int, dport: int, length: int) -> bytes:
    f = bytearray(udp_frame(1, 3000, max(length, 42)))
    f[23] = proto
    f[36:38] = dport.to_bytes(2, "big")
    return bytes(f[:length])


def test_bpf_offloaded_agrees_and_follows_commands(offload_net):
    """in_a -> bpf (BPF): `udp dst port 53` (priority 10) -> upd (Update: destination MAC)
    -> out_b, `tcp` (5) -> sink, `ip proto 47` (5) -> slow (Bypass, user space) -> out_b,
    `len > 500` (1) -> gate 3, unconnected (deadend); no match: gate 0. The same frames with
    the offload off, then on: B receives the same frames, and bpf's gate counters and drops
    move by the same amounts. Filters added and deleted by command with the offload on
    reach the kernel; get_programs answers over gRPC."""
    b, ns, hosts, _ = offload_net
    b.pause_all()
    b.disconnect_modules("in_a", 0)
    filters = [
        {"priority": 10, "filter": "udp dst port 53", "gate": 0},
        {"priority": 5, "filter": "tcp", "gate": 1},
        {"priority": 5, "filter": "ip proto 47", "gate": 2},
        {"priority": 1, "filter": "len > 500", "gate": 3},
    ]
    b.create_module("BPF", "bpf", {"filters": filters})
    upd = {"fields": [{"offset": 0, "size": 6, "value": int.from_bytes(DST, "big")}]}
    b.create_module("Update", "upd", upd)
    links = [("in_a", 0, "bpf"), ("bpf", 0, "upd"), ("upd", 0, "out_b")]
    links += [("bpf", 1, "sink"), ("bpf", 2, "slow")]
    for m1, og, m2 in links:
        b.connect_modules(m1, m2, og)
    b.resume_all()
    progs = b.run_module_command("bpf", "get_programs", "EmptyArg", {})
    assert [f.filter for f in progs.filters] == [f["filter"] for f in filters], progs
    assert all(len(f.program) > 1 for f in progs.filters), progs

    rng = random.Random(1818)
    frames = []
    for n in range(200):
        kind = n % 7
        proto, dport = [(17, 53), (17, 80), (6, 53), (47, 0), (17, 53), (17, 4789), (6, 80)][kind]
        f = l4_frame(proto, dport, rng.randrange(60, 700))
        if n % 11 == 3:
            f = f[: rng.randrange(14, 40)]  # truncated: loads past the end do not match
        frames.append(f)

    plan, gates, drops, user_b = user_then_offloaded(b, ns, hosts, frames, bpf_state)
    assert "classifier: bpf (BPF), 4 filter(s)" in plan, plan
    assert "user space (Bypass 'slow'" in plan, plan
    assert user_b and all(gates.get(g) for g in (0, 1, 2)), gates
    assert drops.get("deadend"), drops  # gate 3, unconnected
    report = b.offload("pa").plan
    assert "bpf ogate 0" in report and "bpf drop deadend" in report, report

    # A DNS query of 100 bytes goes to B from the kernel; a filter added now sends it to
    # the Sink, and its deletion back to B.
    one = [l4_frame(17, 53, 100)] * 5
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 3)
    assert len(got) == 5 and all(f[:6] == DST for f in got), got
    new = {"priority": 20, "filter": "udp and len < 200", "gate": 1}
    b.run_module_command("bpf", "add", "BPFArg", {"filters": [new]})
    assert "5 filter(s)" in b.offload("pa").plan
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 2)
    assert got == []
    b.run_module_command("bpf", "delete", "BPFArg", {"filters": [new]})
    got = send_and_capture((ns[0], hosts[0]), one, (ns[1], hosts[1]), MARK, (0, 6), 3)
    assert len(got) == 5, got
    b.run_module_command("bpf", "clear", "EmptyArg", {})
    assert "0 filter(s)" in b.offload("pa").plan
    assert not b.offload("pa", "off").enabled

"""GTP-U end to end through the SD-Core UPF's own pipeline on bessemerd, over interfaces:
omec's `bessctl run up4` in `af_packet` mode (its `ports.py` makes the access and core ports
as PMDPort `net_af_packet` vdevs over veths), its `route_control.py` filling the routes from
the kernel's tables, its agent `pfcpiface` installing sessions that `pfcpsim` (playing the
SMF) creates over PFCP. A scapy gNB sends GTP-U for those sessions: the data network
receives the inner packets intact; its answers come back to the gNB encapsulated with the
session's TEID and QFI (PDU Session Container, `gtppsc` on); echo requests are answered; a
modified session's new tunnel is used; a deleted session's packets stop and are counted.
Root only; every host is a namespace the test makes."""

from __future__ import annotations

import copy
import shutil
import time

import pytest
from scapy.contrib.gtp import GTP_U_Header, GTPEchoRequest, GTPHeader, GTPPDUSessionContainer
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from .conftest import ROOT_ONLY, link_mac, send_and_capture, sh
from .omec import Upf, peers, shipped_config, upf_host

pytestmark = [
    ROOT_ONLY,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]

N3, GNB_LINK, GNB, GNB2 = "198.18.0.1", "198.18.0.2", "11.1.1.129", "11.1.1.130"
N6, DN_LINK, APP = "198.19.0.1", "198.19.0.2", "6.6.6.6"
SESSIONS, BASE, STEP, QFI = 4, 2, 10, 9


def ue(k: int) -> str:
    return f"17.0.0.{k + 1}"


def ul_teid(k: int) -> int:
    """pfcpsim's uplink TEID of session k (its session index)."""
    return BASE + STEP * k


@pytest.fixture(scope="module")
def cache():
    try:
        return peers()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture()
def upf(cache, tmp_path):
    conf = copy.deepcopy(shipped_config(cache))
    conf["mode"] = "af_packet"
    conf["gtppsc"] = True
    conf["notify_sockaddr"] = str(tmp_path / "notifycp")
    conf["endmarker_sockaddr"] = str(tmp_path / "pfcpport")
    u = upf_host(cache, tmp_path, conf, None, None)
    try:
        gnb = u.neighbour("gnb", f"{N3}/24", f"{GNB_LINK}/24", upf_if=u.access)
        dn = u.neighbour("dn", f"{N6}/24", f"{DN_LINK}/24", upf_if=u.core)
        smf = u.neighbour("smf", "10.99.0.1/24", "10.99.0.2/24")
        # The gNB's N3 addresses sit behind its link address, the application server behind
        # the data network's; the UE pool is routed back through the UPF's core side.
        for a in (GNB, GNB2):
            sh("ip", "-n", gnb, "addr", "add", f"{a}/32", "dev", "eth0")
        sh("ip", "-n", u.ns, "route", "add", "11.1.1.0/24", "via", GNB_LINK)
        sh("ip", "-n", dn, "addr", "add", f"{APP}/32", "dev", "eth0")
        sh("ip", "-n", u.ns, "route", "add", "6.6.6.0/24", "via", DN_LINK)
        sh("ip", "-n", dn, "route", "add", "17.0.0.0/24", "via", N6)
        u.write_conf()
        r = u.bessctl("run", "up4")
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, (
            f"bessctl run up4:\n{r.stdout}\n{r.stderr}\n{u.log.read_text()[-3000:]}"
        )
        # omec's routing controller, as its deployment runs it beside the daemon (pybess on
        # PYTHONPATH, as in omec's image).
        u.spawn(
            str(u.cache / "venv" / "bin" / "python"),
            str(u.cache / "bess" / "bessctl" / "conf" / "route_control.py"),
            "-i", u.access, u.core,
            log="route_control.log", cwd=u.cache / "bess",
            env={"PYTHONPATH": str(u.cache / "bess")},
        )  # fmt: skip
        u.start_n4(smf, N3, "10.99.0.1")
        yield u, gnb, dn, smf
    finally:
        u.close()


def _routes_ready(u: Upf, seconds: float = 30) -> None:
    """Waits until route_control has resolved both next hops into the port's routes."""
    deadline = time.monotonic() + seconds
    while True:
        mods = u.probe("modules")["modules"]
        updates = [m for m, c in mods.items() if c == "Update" and "DstMAC" in m]
        if len(updates) >= 2:
            return
        assert time.monotonic() < deadline, (u.tmp / "route_control.log").read_text()[-3000:]
        time.sleep(0.3)


def _uplink(u: Upf, gnb: str, k: int, payload: bytes) -> bytes:
    mac = link_mac(u.ns, u.access)
    pkt = (
        Ether(dst=mac, src=link_mac(gnb, "eth0"))
        / IP(src=GNB, dst=N3)
        / UDP(sport=2152, dport=2152)
        / GTP_U_Header(teid=ul_teid(k))
        / IP(src=ue(k), dst=APP)
        / UDP(sport=4000 + k, dport=5001)
        / Raw(payload)
    )
    return bytes(pkt)


def _downlink(u: Upf, dn: str, k: int, payload: bytes) -> bytes:
    pkt = (
        Ether(dst=link_mac(u.ns, u.core), src=link_mac(dn, "eth0"))
        / IP(src=APP, dst=ue(k))
        / UDP(sport=5001, dport=4000 + k)
        / Raw(payload)
    )
    return bytes(pkt)


def _inner(frame: bytes):
    return IP(frame[14:])


def test_gtpu_end_to_end_through_up4_with_pfcpsim_sessions(upf):
    u, gnb, dn, smf = upf
    u.pfcpctl(smf, "session", "create", "--count", str(SESSIONS), "--baseID", str(BASE),
              "--ue-pool", "17.0.0.0/24", "--gnb-addr", GNB, "--qfi", str(QFI))  # fmt: skip
    _routes_ready(u)
    # Uplink: G-PDUs of every session reach the data network decapsulated, payload intact.
    frames = [_uplink(u, gnb, k, b"UL%02d" % k + bytes(range(40))) for k in range(SESSIONS)]
    got = send_and_capture((gnb, "eth0"), frames, (dn, "eth0"), b"UL", (42,), 5)
    assert len(got) == SESSIONS, (u.tmp / "bessemerd.log").read_text()[-2000:]
    for k in range(SESSIONS):
        [f] = [g for g in got if g[42:46] == b"UL%02d" % k]
        ip = _inner(f)
        assert (ip.src, ip.dst, ip[UDP].sport) == (ue(k), APP, 4000 + k)
        assert bytes(ip[UDP].payload) == b"UL%02d" % k + bytes(range(40))
    # Downlink: pfcpsim creates the downlink FAR as "drop" until the session is modified.
    dl = [_downlink(u, dn, k, b"DL%02d" % k + bytes(30)) for k in range(SESSIONS)]
    got = send_and_capture((dn, "eth0"), dl, (gnb, "eth0"), b"DL", (42 + 16, 42 + 16 + 8), 2)
    assert got == []
    assert u.probe("igates:farDrop")["igates:farDrop"] >= SESSIONS
    # Modified: the downlink FAR forwards into a tunnel to the gNB (TEID = index + 1).
    u.pfcpctl(smf, "session", "modify", "--count", str(SESSIONS), "--baseID", str(BASE),
              "--gnb-addr", GNB)  # fmt: skip
    _expect_downlink(u, dn, gnb, GNB)
    # Modified again to another gNB address: the new tunnel is used.
    u.pfcpctl(smf, "session", "modify", "--count", str(SESSIONS), "--baseID", str(BASE),
              "--gnb-addr", GNB2)  # fmt: skip
    _expect_downlink(u, dn, gnb, GNB2)
    # An Echo Request to the N3 address is answered with an Echo Response.
    echo = (
        Ether(dst=link_mac(u.ns, u.access), src=link_mac(gnb, "eth0"))
        / IP(src=GNB, dst=N3)
        / UDP(sport=2152, dport=2152)
        / GTPHeader(seq=7, S=1)
        / GTPEchoRequest()
    )
    got = send_and_capture((gnb, "eth0"), [bytes(echo)], (gnb, "eth0"), b"\x32\x02", (42,), 3)
    assert len(got) == 1 and IP(got[0][14:]).src == N3
    # Deleted: uplink stops, counted where the PDR lookup misses.
    miss = u.probe("igates:pdrLookupFail")["igates:pdrLookupFail"]
    u.pfcpctl(smf, "session", "delete", "--count", str(SESSIONS), "--baseID", str(BASE))
    assert u.tables() == dict.fromkeys(u.tables(), 0)
    got = send_and_capture((gnb, "eth0"), frames, (dn, "eth0"), b"UL", (42,), 2)
    assert got == []
    assert u.probe("igates:pdrLookupFail")["igates:pdrLookupFail"] >= miss + SESSIONS


def _expect_downlink(u: Upf, dn: str, gnb: str, gnb_addr: str) -> None:
    """Downlink of every session arrives at the gNB in a G-PDU to `gnb_addr` with the
    session's downlink TEID and a PDU Session Container carrying the QFI."""
    tag = b"D" + gnb_addr.encode()[-1:]
    dl = [_downlink(u, dn, k, tag + b"%02d" % k + bytes(30)) for k in range(SESSIONS)]
    deadline = time.monotonic() + 10
    while True:
        # G-PDU with the E flag and a PSC: 12 + 4 bytes of GTP-U before the inner packet.
        got = send_and_capture((dn, "eth0"), dl, (gnb, "eth0"), tag, (14 + 20 + 8 + 16 + 28,), 2)
        if len(got) == SESSIONS or time.monotonic() > deadline:
            break
    assert len(got) == SESSIONS, (u.tmp / "pfcpiface.log").read_text()[-2000:]
    for f in got:
        outer = Ether(f)
        assert outer[IP].dst == gnb_addr and outer[IP].src == N3
        gtp = outer[GTP_U_Header]
        inner = IP(bytes(gtp[GTPPDUSessionContainer].payload))
        k = int(bytes(inner[UDP].payload)[2:4])
        assert gtp.teid == ul_teid(k) + 1
        assert gtp[GTPPDUSessionContainer].QFI == QFI
        assert (inner.src, inner.dst) == (APP, ue(k))
        assert bytes(inner[UDP].payload) == tag + b"%02d" % k + bytes(30)

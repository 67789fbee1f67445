"""The SD-Core UPF on bessemerd, with its own pieces unchanged: omec's `bessctl run up4`
(`conf/up4.bess` with `ports.py`, `sim.py`, omec's pybess and the sample plugin's stubs) in sim
mode, its agent `pfcpiface` installing and removing simulated sessions, and the full N4 path
(pfcpsim -> PFCP -> pfcpiface -> bessemerd). The tables are read back after each step as BESS
reports them (each table's `desc`: "N fields, M rules"). Root only (network and PID
namespaces); the peers are built by scripts/omec-peers.sh into a cache outside the tree, and
the tests are skipped, with the build's reason, where that cannot be done."""

from __future__ import annotations

import copy
import shutil
import time

import pytest

from .conftest import ROOT_ONLY
from .omec import Upf, peers, refused_rules, shipped_config, upf_host

pytestmark = [
    ROOT_ONLY,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]

ACCESS_IP, CORE_IP = "198.18.0.1/24", "198.19.0.1/24"
SESSIONS = 300
# Per simulated session pfcpiface installs 4 PDRs (uplink and downlink, N6 and N9), 3 FARs,
# 4 application QER rules (2 QERs x 2 directions) and 2 session QER rules.
SIM_TABLES = {
    "pdrLookup": 4 * SESSIONS,
    "farLookup": 3 * SESSIONS,
    "appQERLookup": 4 * SESSIONS,
    "sessionQERLookup": 2 * SESSIONS,
}


@pytest.fixture(scope="module")
def cache():
    try:
        return peers()
    except RuntimeError as e:
        pytest.skip(str(e))


def sim_conf(cache, tmp_path, sessions: int = SESSIONS) -> dict:
    """The shipped configuration with what an operator sets for sim mode (and this test's own
    unix socket paths, so that tests never share /tmp/notifycp)."""
    conf = copy.deepcopy(shipped_config(cache))
    conf["mode"] = "sim"
    conf["sim"]["max_sessions"] = sessions
    conf["notify_sockaddr"] = str(tmp_path / "notifycp")
    conf["endmarker_sockaddr"] = str(tmp_path / "pfcpport")
    return conf


@pytest.fixture()
def sim_upf(cache, tmp_path):
    u = upf_host(cache, tmp_path, sim_conf(cache, tmp_path), ACCESS_IP, CORE_IP)
    try:
        r = u.bessctl("run", "up4")
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, (
            f"bessctl run up4 failed:\n{r.stdout}\n{r.stderr}\n{u.log.read_text()[-3000:]}"
        )
        yield u
    finally:
        u.close()


def _passed(u: Upf) -> tuple[int, int]:
    """Packets out of the UPF so far: (uplink at the core side, downlink at the access side)."""
    got = u.probe(f"igates:{u.core}_out", f"igates:{u.access}_out")
    return got[f"igates:{u.core}_out"], got[f"igates:{u.access}_out"]


def _wait_passing(u: Upf, rising: bool, seconds: float = 10) -> tuple[int, int]:
    """Waits until both directions pass packets (rising) or neither does; returns the
    counts taken over the last half second."""
    deadline = time.monotonic() + seconds
    while True:
        a = _passed(u)
        time.sleep(0.5)
        b = _passed(u)
        moving = (b[0] > a[0], b[1] > a[1])
        if moving == (rising, rising) or time.monotonic() > deadline:
            return b[0] - a[0], b[1] - a[1]


def test_bessctl_runs_up4_unchanged_in_sim_mode(sim_upf):
    u = sim_upf
    mods = u.probe("modules")["modules"]
    # The pipeline BESS builds from the same script and configuration: 67 modules.
    assert len(mods) == 67, sorted(mods)
    assert mods["pktParse"] == "GtpuParser" and mods[f"{u.access}_update"] == "SequentialUpdate"
    assert mods[f"{u.access}_timestamp"] == "Timestamp" and mods[f"{u.core}_measure"] == "Measure"
    # Both generators run and every packet parses (measure_upf as shipped: Timestamp keeps
    # the time in metadata, the GTP-U header is untouched); with no session, all miss.
    time.sleep(1)
    got = u.probe("ogates:pktParse", "drops:pktParse", "igates:pdrLookupFail", "igates:badPkts")
    assert int(got["ogates:pktParse"]["1"]) > 1000
    assert got["drops:pktParse"] == {} or sum(got["drops:pktParse"].values()) == 0
    assert got["igates:badPkts"] == 0
    assert got["igates:pdrLookupFail"] > 1000
    assert _passed(u) == (0, 0)
    # bessctl's own view works against it too.
    r = u.bessctl("show", "module", "pdrLookup")
    assert r.returncode == 0 and "WildcardMatch" in r.stdout, r.stdout + r.stderr


def test_shipped_table_sizes_hold_their_sessions(cache, tmp_path):
    """upf.jsonc sizes its tables for 50 000 sessions with `pdrLookup: 50000` ("50K per
    unique tuple, we send 4 unique PDR patterns"): WildcardMatch's `entries` bounds each
    mask's table, not the whole. The shipped sizes scaled to this test's sessions must hold
    every rule, and every generated packet must find its session."""
    conf = sim_conf(cache, tmp_path)
    shipped = shipped_config(cache)["table_sizes"]
    conf["table_sizes"] = {k: v * SESSIONS // 50_000 for k, v in shipped.items()}
    conf["sim"]["total_flows"] = SESSIONS  # the generator's flows: one per session
    assert conf["table_sizes"]["pdrLookup"] == SESSIONS
    u = upf_host(cache, tmp_path, conf, ACCESS_IP, CORE_IP)
    try:
        r = u.bessctl("run", "up4")
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
        r = u.pfcpiface("-simulate", "create")
        errors = refused_rules(r)
        assert r.returncode == 0 and not errors, errors[:3]
        assert u.tables() == SIM_TABLES
        up, down = _wait_passing(u, rising=True)
        assert up > 0 and down > 0
        before = u.probe("igates:pdrLookupFail")["igates:pdrLookupFail"]
        time.sleep(0.5)
        assert u.probe("igates:pdrLookupFail")["igates:pdrLookupFail"] == before, (
            "a generated packet found no PDR"
        )
    finally:
        u.close()


def test_pfcpiface_simulated_sessions_create_then_delete(sim_upf):
    u = sim_upf
    r = u.pfcpiface("-simulate", "create")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "timed out" not in r.stdout + r.stderr and "context canceled" not in r.stdout
    assert u.tables() == SIM_TABLES
    up, down = _wait_passing(u, rising=True)
    assert up > 0 and down > 0, "both directions pass once sessions exist"
    # Uplink leaves decapsulated, downlink encapsulated (GtpuEncap's gate 1), and measure_upf
    # measures latency from the Timestamp at the input.
    got = u.probe("ogates:gtpuDecap", "ogates:gtpuEncap", f"measure:{u.core}_measure")
    assert int(got["ogates:gtpuDecap"]["0"]) > 0 and int(got["ogates:gtpuEncap"]["1"]) > 0
    assert int(got[f"measure:{u.core}_measure"]["latency"]["count"]) > 0
    r = u.pfcpiface("-simulate", "delete")
    assert r.returncode == 0, r.stdout + r.stderr
    assert u.tables() == {
        "pdrLookup": 0,
        "farLookup": 0,
        "appQERLookup": 0,
        "sessionQERLookup": 0,
    }
    assert _wait_passing(u, rising=False) == (0, 0), "deleted sessions pass nothing"


def test_n4_with_pfcpsim_associate_create_modify_delete(sim_upf):
    """pfcpsim plays the SMF: PFCP association and sessions over UDP to pfcpiface, which
    installs them into bessemerd. Its F-SEIDs are random 64-bit numbers (uint64 value_int)."""
    u = sim_upf
    n = 100
    smf = u.neighbour("smf", "10.99.0.1/24", "10.99.0.2/24")
    u.start_n4(smf, ACCESS_IP.split("/")[0], "10.99.0.1")
    u.pfcpctl(smf, "session", "create", "--count", str(n), "--baseID", "2", "--ue-pool",
              "17.0.0.0/24", "--gnb-addr", "198.18.0.2")  # fmt: skip
    # Per session: 2 PDRs, 2 FARs, 4 application QER rules, 2 session QER rules (what real
    # BESS holds after the same steps).
    want = {"pdrLookup": 2, "farLookup": 2, "appQERLookup": 4, "sessionQERLookup": 2}
    assert _eventually(u, {k: v * n for k, v in want.items()}), _logs(u)
    u.pfcpctl(smf, "session", "modify", "--count", str(n), "--baseID", "2", "--gnb-addr",
              "198.18.0.3")  # fmt: skip
    assert _eventually(u, {k: v * n for k, v in want.items()}), _logs(u)
    u.pfcpctl(smf, "session", "delete", "--count", str(n), "--baseID", "2")
    assert _eventually(u, dict.fromkeys(want, 0)), _logs(u)
    u.pfcpctl(smf, "service", "disassociate")
    log = (u.tmp / "pfcpiface.log").read_text()
    assert "does not fit" not in log and "no rule with these values" not in log, log[-3000:]


def _eventually(u: Upf, want: dict[str, int], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        got = u.tables()
        if got == want:
            return True
        if time.monotonic() > deadline:
            print("tables:", got, "want:", want)
            return False
        time.sleep(0.3)


def _logs(u: Upf) -> str:
    out = []
    for name in ("pfcpiface.log", "pfcpsim.log", "bessemerd.log"):
        p = u.tmp / name
        if p.exists():
            out.append(f"--- {name}\n{p.read_text()[-3000:]}")
    return "\n".join(out)


def test_the_shipped_configurations_optional_features_run(cache, tmp_path):
    """What upf.jsonc offers beyond the plain sim run, all on at once: N9 traffic from the
    core side (sim.core = n9), checksum offload requested (hwcksum: computed in software
    here), the PDU Session Container (gtppsc), flow measurement (measure_flow: FlowMeasure),
    IPv4 reassembly and fragmentation (max_ip_defrag_flows, ip_frag_with_eth_mtu), GTP-U path
    monitoring, and the shipped slice meter and notification sockets. (`ddp` only changes a
    DPDK port's flow profiles (rte_flow profiles are refused by name, see compat.md).)"""
    conf = sim_conf(cache, tmp_path, sessions=50)
    conf.update(
        hwcksum=True,
        gtppsc=True,
        measure_flow=True,
        max_ip_defrag_flows="1000",
        ip_frag_with_eth_mtu="1518",
        enable_gtpu_path_monitoring=True,
    )
    conf["sim"]["core"] = "n9"
    u = upf_host(cache, tmp_path, conf, ACCESS_IP, CORE_IP)
    try:
        r = u.bessctl("run", "up4")
        assert r.returncode == 0 and "Error" not in r.stdout + r.stderr, r.stdout + r.stderr
        mods = u.probe("modules")["modules"]
        for name, cls in {
            "preQosFlowMeasure": "FlowMeasure",
            "sliceMeter": "Qos",
            f"{u.access}IP4Defrag": "IPDefrag",
            f"{u.core}IP4Frag": "IPFrag",
            "gtpuPathMonitoring": "GtpuPathMonitoring",
            "farNotifyCP": "PortOut",
        }.items():
            assert mods.get(name) == cls, (name, mods.get(name))
        r = u.pfcpiface("-simulate", "create")
        assert r.returncode == 0, r.stdout + r.stderr
        up, down = _wait_passing(u, rising=True)
        assert up > 0 and down > 0
    finally:
        u.close()

"""The ModuleCommand calls a PFCP agent (omec-project/upf's pfcpiface, `bess.go`) makes on
the pipeline of conf/upf/upf.bess, for sessions numbered 0, 1, ...

Field orders and encodings follow the agent: every value is a `value_int`; the PDR key is
(src_iface, tunnel_ipv4_dst, teid, src_ip, dst_ip, src_port, dst_port, ip_proto) with a
mask each, its values (pdr_id, fseid, ctr_id, qer_id, far_id); the FAR key (far_id, fseid)
with values (action, tunnel_out_type, tunnel src, tunnel dst, teid, udp port); the
application QER key (src_iface, qer_id, fseid) with value qfi and the session QER key
(src_iface, fseid), both added for the access and the core side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

try:
    from . import sim
except ImportError:  # loaded by path from upf.bess or run as a script
    import sim  # type: ignore[no-redef]

ACCESS = 1
CORE = 2
FAR_FORWARD_D = 0
FAR_FORWARD_U = 1
FAR_DROP = 2
FAR_NOTIFY = 4
# Qos gates the agent uses: 0 meters (colours leave by 1..3), 5 drops, 6 passes unmetered.
QER_GATE_METER = 0
QER_GATE_STATUS_DROP = 5
QER_GATE_UNMETER = 6
UL_FAR_ID = 1
DL_FAR_ID = 2
QER_ID = 1
QFI = 9
U32 = 0xFFFFFFFF
PRECEDENCE = 2
# The agent's priority: MaxUint32 - precedence (BESS keeps it in a C++ int: -1 - precedence).
PRIORITY = U32 - PRECEDENCE

PDR = "pdrLookup"
FAR = "farLookup"
APP_QER = "appQERLookup"
SESSION_QER = "sessionQERLookup"


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass
class Plan:
    """Addresses and numbering shared by the pipeline script, its generator and the control
    script (each can be changed by an environment variable of the same name)."""

    n3_ip: str = _env("UPF_N3_IP", "198.18.0.1")
    gnb_ip: str = _env("UPF_GNB_IP", "198.18.0.2")
    n9_ip: str = _env("UPF_N9_IP", "198.19.0.1")
    peer_upf_ip: str = _env("UPF_PEER_UPF_IP", "198.19.0.2")
    app_ip: str = _env("UPF_APP_IP", "6.6.6.6")
    ue_start: str = _env("UPF_UE_START", "16.0.0.1")
    ul_teid_start: int = int(_env("UPF_UL_TEID", "0x100"), 0)
    dl_teid_start: int = int(_env("UPF_DL_TEID", "0x8000000"), 0)
    n9_teid_start: int = int(_env("UPF_N9_TEID", "0x4000000"), 0)
    core: str = _env("UPF_CORE", "n6")  # 'n6' (Internet) or 'n9' (another UPF)

    def ue(self, i: int) -> int:
        """Session i's UE address (host order)."""
        return sim.ip2int(self.ue_start) + i


def _ints(*values: int) -> list:
    return [{"value_int": v} for v in values]


def _far_key(far_id: int, fseid: int) -> list:
    return _ints(far_id, fseid)


def pdr_rules(plan: Plan, i: int) -> list:
    """The uplink and downlink PDR of session i: (key values, masks, gate, priority, valuesv)."""
    fseid = i + 1
    ul = (
        _ints(
            ACCESS,
            sim.ip2int(plan.n3_ip),
            plan.ul_teid_start + i,
            plan.ue(i),
            0,
            0,
            0,
            0,
        ),
        _ints(0xFF, U32, U32, U32, 0, 0, 0, 0),
        1,  # needDecap
        PRIORITY,
        _ints(2 * i + 1, fseid, i, QER_ID, UL_FAR_ID),
    )
    if plan.core == "n9":
        dl_key = _ints(
            CORE, sim.ip2int(plan.n9_ip), plan.n9_teid_start + i, 0, plan.ue(i), 0, 0, 0
        )
        dl_mask = _ints(0xFF, U32, U32, 0, U32, 0, 0, 0)
        dl_gate = 1
    else:
        dl_key = _ints(CORE, 0, 0, 0, plan.ue(i), 0, 0, 0)
        dl_mask = _ints(0xFF, 0, 0, 0, U32, 0, 0, 0)
        dl_gate = 0
    dl = (
        dl_key,
        dl_mask,
        dl_gate,
        PRIORITY,
        _ints(2 * i + 2, fseid, i, QER_ID, DL_FAR_ID),
    )
    return [ul, dl]


def far_rules(plan: Plan, i: int) -> list:
    """The uplink and downlink FAR of session i: (gate = tunnel type, key fields, values)."""
    fseid = i + 1
    if plan.core == "n9":
        ul_tunnel = (1, sim.ip2int(plan.n9_ip), sim.ip2int(plan.peer_upf_ip))
        ul_teid = plan.n9_teid_start + i
    else:
        ul_tunnel = (0, 0, 0)
        ul_teid = 0
    ul_port = sim.GTPU_PORT if ul_tunnel[0] else 0
    ul = (
        ul_tunnel[0],
        _far_key(UL_FAR_ID, fseid),
        _ints(FAR_FORWARD_U, *ul_tunnel, ul_teid, ul_port),
    )
    dl = (
        1,
        _far_key(DL_FAR_ID, fseid),
        _ints(
            FAR_FORWARD_D,
            1,
            sim.ip2int(plan.n3_ip),
            sim.ip2int(plan.gnb_ip),
            plan.dl_teid_start + i,
            sim.GTPU_PORT,
        ),
    )
    return [ul, dl]


def qer_meter(mbr_kbps: int) -> dict:
    """The agent's meter arguments for an MBR in kbit/s (GBR 0), bursts its 32-MTU default."""
    if not mbr_kbps:
        return {
            "gate": QER_GATE_UNMETER,
            "cir": 0,
            "pir": 0,
            "cbs": 0,
            "pbs": 0,
            "ebs": 0,
        }
    burst = 32 * 1514
    cir = 1
    pir = max(mbr_kbps * 1000 // 8, cir)
    return {
        "gate": QER_GATE_METER,
        "cir": cir,
        "pir": pir,
        "cbs": burst,
        "pbs": burst,
        "ebs": burst,
    }


def add_session(bess, plan: Plan, i: int, mbr_kbps: int = 0) -> None:
    """Installs session i as the agent does for a Session Establishment: PDRs, FARs, QERs."""
    for values, masks, gate, prio, valuesv in pdr_rules(plan, i):
        bess.run_module_command(
            PDR,
            "add",
            "WildcardMatchCommandAddArg",
            {
                "gate": gate,
                "priority": prio,
                "values": values,
                "masks": masks,
                "valuesv": valuesv,
            },
        )
    for gate, fields, values in far_rules(plan, i):
        bess.run_module_command(
            FAR,
            "add",
            "ExactMatchCommandAddArg",
            {"gate": gate, "fields": fields, "values": values},
        )
    meter = qer_meter(mbr_kbps)
    for iface in (ACCESS, CORE):
        bess.run_module_command(
            APP_QER,
            "add",
            "QosCommandAddArg",
            {**meter, "fields": _ints(iface, QER_ID, i + 1), "values": _ints(QFI)},
        )
        bess.run_module_command(
            SESSION_QER,
            "add",
            "QosCommandAddArg",
            {**meter, "fields": _ints(iface, i + 1)},
        )


def delete_session(bess, plan: Plan, i: int) -> None:
    """Removes session i as the agent does for a Session Deletion."""
    for values, masks, _gate, _prio, _valuesv in pdr_rules(plan, i):
        bess.run_module_command(
            PDR,
            "delete",
            "WildcardMatchCommandDeleteArg",
            {"values": values, "masks": masks},
        )
    for _gate, fields, _values in far_rules(plan, i):
        bess.run_module_command(
            FAR, "delete", "ExactMatchCommandDeleteArg", {"fields": fields}
        )
    for iface in (ACCESS, CORE):
        bess.run_module_command(
            APP_QER,
            "delete",
            "QosCommandDeleteArg",
            {"fields": _ints(iface, QER_ID, i + 1)},
        )
        bess.run_module_command(
            SESSION_QER,
            "delete",
            "QosCommandDeleteArg",
            {"fields": _ints(iface, i + 1)},
        )


def clear_all(bess) -> None:
    """Empties the PDR, FAR and QER tables, as the agent does when it starts."""
    bess.run_module_command(PDR, "clear", "WildcardMatchCommandClearArg")
    bess.run_module_command(FAR, "clear", "ExactMatchCommandClearArg")
    bess.run_module_command(APP_QER, "clear", "QosCommandClearArg")
    bess.run_module_command(SESSION_QER, "clear", "QosCommandClearArg")

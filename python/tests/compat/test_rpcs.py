"""Every RPC of `bess.pb.BESSControl`, sent exactly as pybess sends it: a good request (the
reply's fields) and bad ones (BESS's error codes from `core/bessctl.cc`).

Where Bessemer deliberately answers differently, the test asserts Bessemer's answer and
says why; docs/compat.md lists those differences.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from .conftest import tcs_by_name, wait_pkts
from .pybess_shim import BESS

ROOT = Path(__file__).resolve().parents[3]


def _code(fn, *args, **kwargs) -> int:
    """The error code a request is refused with (0: accepted)."""
    try:
        fn(*args, **kwargs)
    except BESS.Error as e:
        assert e.errmsg, "an error without a message"
        return e.code
    return 0


def _pipeline(b: BESS, src: str = "src", sink: str = "snk") -> None:
    b.create_module("Source", src)
    b.create_module("Sink", sink)
    b.connect_modules(src, sink)


def test_the_service_has_48_rpcs_and_this_file_tests_each():
    text = (ROOT / "proto" / "bess" / "service.proto").read_text()
    rpcs = re.findall(r"rpc\s+(\w+)\s*\(", text)
    assert len(rpcs) == 48
    here = Path(__file__).read_text()
    missing = [r for r in rpcs if f"def test_{_snake(r)}(" not in here]
    assert missing == []


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --- daemon ----------------------------------------------------------------------------


def test_get_version(pybess):
    r = pybess.get_version()
    assert r.error.code == 0 and r.version


def test_reset_all(pybess, tmp_path):
    _pipeline(pybess)
    pybess.create_port("UnixSocketPort", "p", {"path": str(tmp_path / "s")})
    pybess.add_worker(0, 0)
    pybess.add_tc("rr", "round_robin", wid=0)
    pybess.resume_all()
    # BESS pauses the workers itself (WorkerPauser): no EBUSY while they run.
    pybess.reset_all()
    assert list(pybess.list_modules().modules) == []
    assert list(pybess.list_ports().ports) == []
    assert list(pybess.list_workers().workers_status) == []
    assert list(pybess.list_tcs().classes_status) == []


def test_kill_bess(daemon, pybess):
    _pipeline(pybess)
    pybess.kill()
    assert daemon.proc.wait(timeout=20) == 0


def test_import_plugin(pybess):
    """Deliberately different: Bessemer does not load BESS's C++ plugins (shared objects
    built against BESS's headers); it answers ENOTSUP where BESS answers -1 for a path it
    cannot load."""
    assert _code(pybess.import_plugin, "/nonexistent/plugin.so") == errno.ENOTSUP


def test_unload_plugin(pybess):
    """Deliberately different, as ImportPlugin: ENOTSUP instead of BESS's -1."""
    assert _code(pybess.unload_plugin, "/nonexistent/plugin.so") == errno.ENOTSUP


def test_list_plugins(pybess):
    r = pybess.list_plugins()
    assert r.error.code == 0 and list(r.paths) == []


def test_dump_mempool(pybess):
    r = pybess.dump_mempool()  # pybess's default socket -1: every socket
    assert len(r.dumps) >= 1
    d = r.dumps[0]
    assert d.socket == 0 and d.initialized and d.mp_size > 0
    assert d.mp_available_count + d.mp_in_use_count == d.mp_size


# --- workers ---------------------------------------------------------------------------


def test_pause_all(pybess):
    pybess.add_worker(0, 0)
    pybess.resume_all()
    pybess.pause_all()
    assert [w.running for w in pybess.list_workers().workers_status] == [False]
    pybess.pause_all()  # again: no error


def test_resume_all(pybess):
    _pipeline(pybess)
    pybess.add_worker(0, 0)
    pybess.pause_all()
    assert pybess.resume_all() is False  # pybess returns "violations found"
    assert [w.running for w in pybess.list_workers().workers_status] == [True]
    assert wait_pkts(pybess, "src") > 0


def test_pause_worker(pybess):
    pybess.add_worker(0, 0)
    pybess.add_worker(1, 0)
    pybess.resume_all()
    pybess.pause_worker(1)
    state = {w.wid: w.running for w in pybess.list_workers().workers_status}
    assert state == {0: True, 1: False}
    # BESS pauses only a worker that exists and runs; any other id is no error.
    assert _code(pybess.pause_worker, 1) == 0
    assert _code(pybess.pause_worker, 5) == 0


def test_resume_worker(pybess):
    pybess.add_worker(0, 0)
    pybess.pause_all()
    pybess.resume_worker(0)
    assert [w.running for w in pybess.list_workers().workers_status] == [True]
    assert _code(pybess.resume_worker, 0) == 0  # already running
    assert _code(pybess.resume_worker, 5) == 0  # no such worker: nothing to do


def test_reset_workers(pybess):
    pybess.add_worker(0, 0)
    pybess.add_worker(1, 0)
    pybess.reset_workers()
    assert list(pybess.list_workers().workers_status) == []


def test_list_workers(pybess):
    assert list(pybess.list_workers().workers_status) == []
    pybess.add_worker(3, 0)
    (w,) = pybess.list_workers().workers_status
    assert (w.wid, w.core) == (3, 0)
    assert w.num_tcs >= 0 and w.silent_drops == 0
    assert w.running in (True, False)


def test_add_worker(pybess):
    pybess.add_worker(0, 0)
    assert _code(pybess.add_worker, 0, 0) == errno.EEXIST
    assert _code(pybess.add_worker, 64, 0) == errno.EINVAL  # wid >= kMaxWorkers
    assert _code(pybess.add_worker, 1, 0, "bogus") == errno.EINVAL
    assert [w.wid for w in pybess.list_workers().workers_status] == [0]


def test_destroy_worker(pybess):
    pybess.add_worker(0, 0)
    pybess.add_worker(1, 0)
    pybess.destroy_worker(1)
    assert [w.wid for w in pybess.list_workers().workers_status] == [0]
    assert _code(pybess.destroy_worker, 1) == errno.ENOENT
    assert _code(pybess.destroy_worker, 64) == errno.EINVAL
    _pipeline(pybess)
    pybess.pause_all()
    pybess.attach_task("src", wid=0)
    pybess.resume_all()
    assert _code(pybess.destroy_worker, 0) == errno.EBUSY  # worker 0 has a task


# --- traffic classes -------------------------------------------------------------------


def test_reset_tcs(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("rr", "round_robin", wid=0)
    pybess.add_tc("child", "priority", parent="rr")
    pybess.pause_all()
    pybess.reset_tcs()
    names = set(tcs_by_name(pybess))
    assert not {"rr", "child"} & names


def test_list_tcs(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("wf", "weighted_fair", wid=0, resource="packet")
    pybess.add_tc(
        "rl",
        "rate_limit",
        parent="wf",
        share=3,
        resource="bit",
        limit={"bit": 1_000_000},
        max_burst={"bit": 1000},
    )
    pybess.add_tc("pr", "priority", parent="wf", share=5)
    _pipeline(pybess)
    pybess.attach_task("src", parent="rl")
    pybess.resume_all()  # orphans are placed on their workers
    tcs = tcs_by_name(pybess)
    wf, rl, leaf = (getattr(tcs[n], "class") for n in ("wf", "rl", "!leaf_src:0"))
    assert (wf.policy, wf.wid) == ("weighted_fair", 0)
    assert tcs["rl"].parent == "wf" and rl.policy == "rate_limit" and rl.share == 3
    assert dict(rl.limit) == {"bit": 1_000_000} and dict(rl.max_burst) == {"bit": 1000}
    assert getattr(tcs["pr"], "class").share == 5
    assert tcs["!leaf_src:0"].parent == "rl" and leaf.policy == "leaf"
    assert (leaf.leaf_module_name, leaf.leaf_module_taskid) == ("src", 0)
    assert set(tcs_by_name(pybess, 0)) == set(tcs)
    assert _code(pybess.list_tcs, 64) == errno.EINVAL


def test_check_scheduling_constraints(pybess):
    r = pybess.check_scheduling_constraints()
    assert r.error.code == 0 and not r.fatal
    assert list(r.violations) == [] and list(r.modules) == []
    _pipeline(pybess)
    pybess.add_worker(0, 0)
    r = pybess.check_scheduling_constraints()
    assert list(r.modules) == [] and not r.fatal


def test_add_tc(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("pr", "priority", wid=0)
    pybess.add_tc("hi", "round_robin", parent="pr", priority=1)
    pybess.add_tc("wf", "weighted_fair", parent="pr", priority=2, resource="cycle")
    pybess.add_tc(
        "rl", "rate_limit", parent="wf", share=1, resource="packet", limit={"packet": 1000}
    )
    assert {"pr", "hi", "wf", "rl"} <= set(tcs_by_name(pybess))
    E = errno
    assert _code(pybess.add_tc, "x1", "fifo", wid=0) == E.EINVAL  # unknown policy
    assert _code(pybess.add_tc, "x2", "leaf", wid=0) == E.EINVAL
    assert _code(pybess.add_tc, "x3", "weighted_fair", wid=0, resource="bogus") == E.EINVAL
    assert _code(pybess.add_tc, "x4", "rate_limit", wid=0) == E.EINVAL  # no resource
    assert _code(pybess.add_tc, "x5", "round_robin", parent="nope") == E.ENOENT
    assert _code(pybess.add_tc, "x6", "round_robin", wid=0, parent="pr", priority=3) == E.EINVAL
    assert _code(pybess.add_tc, "x7", "round_robin", parent="pr") == E.EINVAL  # no priority
    assert _code(pybess.add_tc, "x8", "round_robin", parent="wf") == E.EINVAL  # no share
    assert _code(pybess.add_tc, "x9", "round_robin", wid=64) == E.EINVAL
    assert not {f"x{i}" for i in range(1, 10)} & set(tcs_by_name(pybess))


def test_update_tc_params(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("rl", "rate_limit", wid=0, resource="packet", limit={"packet": 1000})
    pybess.update_tc_params(
        "rl", resource="packet", limit={"packet": 5000}, max_burst={"packet": 64}
    )
    rl = getattr(tcs_by_name(pybess)["rl"], "class")
    assert dict(rl.limit) == {"packet": 5000} and dict(rl.max_burst) == {"packet": 64}
    pybess.add_tc("rr", "round_robin", wid=0)
    assert _code(pybess.update_tc_params, "rr", resource="packet") == errno.EINVAL
    assert _code(pybess.update_tc_params, "nope", resource="packet") == errno.ENOENT
    assert _code(pybess.update_tc_params, "rl", resource="bogus") == errno.EINVAL


def test_update_tc_parent(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("rr", "round_robin", wid=0)
    _pipeline(pybess)
    pybess.attach_task("src", parent="rr")  # UpdateTcParent with leaf_module_name
    assert tcs_by_name(pybess)["!leaf_src:0"].parent == "rr"
    assert _code(pybess.attach_task, "nope", parent="rr") == errno.ENOENT
    assert _code(pybess.attach_task, "src", parent="rr", module_taskid=1) == errno.ENOENT
    assert _code(pybess.attach_task, "src", parent="rr", module_taskid=1000) == errno.EINVAL
    assert _code(pybess.attach_task, "src", parent="nope") == errno.ENOENT
    assert _code(pybess.attach_task, "src", parent="rr", wid=0) == errno.EINVAL  # both
    req = pybess.bess_msg.UpdateTcParentRequest()  # neither a name nor a module
    assert _code(pybess._request, "UpdateTcParent", req) == errno.EINVAL


def test_get_tc_stats(pybess):
    pybess.add_worker(0, 0)
    pybess.add_tc("rr", "round_robin", wid=0)
    _pipeline(pybess)
    pybess.attach_task("src", parent="rr")
    pybess.resume_all()
    wait_pkts(pybess, "src", at_least=1000)
    r = pybess.get_tc_stats("rr")
    assert r.timestamp > 0 and r.count > 0 and r.packets > 0 and r.bits > 0
    assert r.cycles >= 0
    assert _code(pybess.get_tc_stats, "") == errno.EINVAL
    assert _code(pybess.get_tc_stats, "nope") == errno.ENOENT


# --- ports -----------------------------------------------------------------------------


def test_list_drivers(pybess):
    names = set(pybess.list_drivers().driver_names)
    assert {"PCAPPort", "UnixSocketPort", "VPort"} <= names


def test_get_driver_info(pybess):
    r = pybess.get_driver_info("UnixSocketPort")
    assert r.name == "UnixSocketPort" and r.help
    assert _code(pybess.get_driver_info, "") == errno.EINVAL
    assert _code(pybess.get_driver_info, "NoSuchPort") == errno.ENOENT


def test_reset_ports(pybess, tmp_path):
    pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    pybess.create_port("UnixSocketPort", "p2", {"path": str(tmp_path / "b")})
    pybess.reset_ports()
    assert list(pybess.list_ports().ports) == []


def test_list_ports(pybess, tmp_path):
    r = pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    (p,) = pybess.list_ports().ports
    assert (p.name, p.driver, p.mac_addr) == ("p1", "UnixSocketPort", r.mac_addr)
    assert p.num_inc_q == 1 and p.num_out_q == 1


def test_create_port(pybess, tmp_path):
    r = pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    assert r.name == "p1" and re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", r.mac_addr)
    assert _code(pybess.create_port, "", "p2") == errno.EINVAL  # no driver
    assert _code(pybess.create_port, "NoSuchPort", "p3") == errno.ENOENT
    assert (
        _code(pybess.create_port, "UnixSocketPort", "p1", {"path": str(tmp_path / "b")})
        == errno.EEXIST
    )
    assert (
        _code(
            pybess.create_port,
            "UnixSocketPort",
            "p4",
            {"path": str(tmp_path / "c"), "num_inc_q": 100_000},
        )
        == errno.EINVAL
    )
    assert [p.name for p in pybess.list_ports().ports] == ["p1"]


def test_destroy_port(pybess, tmp_path):
    pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    pybess.destroy_port("p1")
    assert list(pybess.list_ports().ports) == []
    assert _code(pybess.destroy_port, "") == errno.EINVAL
    assert _code(pybess.destroy_port, "p1") == errno.ENOENT


def test_set_port_conf(pybess, tmp_path):
    pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    # pybess sends its defaults for what is not given: MAC 00:...:00 ("keep"), MTU 0, up.
    code = _code(pybess.set_port_config, "p1", {})
    assert code in (0, errno.ENOTSUP)  # BESS: ENOTSUP from drivers without UpdateConf
    assert _code(pybess.set_port_config, "", {}) == errno.EINVAL
    assert _code(pybess.set_port_config, "nope", {}) == errno.ENOENT
    assert _code(pybess.set_port_config, "p1", {"mac_addr": "not-a-mac"}) == errno.EINVAL


def test_get_port_conf(pybess, tmp_path):
    r = pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    conf = pybess.get_port_config("p1").conf
    assert conf.mac_addr == r.mac_addr
    assert _code(pybess.get_port_config, "") == errno.EINVAL
    assert _code(pybess.get_port_config, "nope") == errno.ENOENT


def test_get_port_stats(pybess, tmp_path):
    pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    r = pybess.get_port_stats("p1")
    assert r.timestamp > 0
    assert (r.inc.packets, r.inc.bytes, r.out.packets, r.out.bytes) == (0, 0, 0, 0)
    assert _code(pybess.get_port_stats, "nope") == errno.ENOENT


def test_get_link_status(pybess, tmp_path):
    pybess.create_port("UnixSocketPort", "p1", {"path": str(tmp_path / "a")})
    r = pybess.get_link_status("p1")
    assert r.error.code == 0 and r.link_up in (True, False)
    assert _code(pybess.get_link_status, "nope") == errno.ENOENT


# --- modules ---------------------------------------------------------------------------

BESS_CLASSES = {
    "ACL", "ArpResponder", "BPF", "Buffer", "Bypass", "DRR", "Dump", "EtherEncap",
    "ExactMatch", "FlowGen", "GenericDecap", "GenericEncap", "HashLB", "IPChecksum",
    "IPEncap", "IPLookup", "IPSwap", "L2Forward", "L4Checksum", "MACSwap", "MPLSPop",
    "Measure", "Merge", "MetadataTest", "NAT", "NoOP", "PortInc", "PortOut", "Queue",
    "QueueInc", "QueueOut", "RandomSplit", "RandomUpdate", "Replicate", "Rewrite",
    "RoundRobin", "SetMetadata", "Sink", "Source", "Split", "StaticNAT", "Timestamp",
    "Update", "UpdateTTL", "UrlFilter", "VLANPop", "VLANPush", "VLANSplit", "VXLANDecap",
    "VXLANEncap", "WildcardMatch", "WorkerSplit",
}  # fmt: skip


def test_list_mclass(pybess):
    names = list(pybess.list_mclasses().names)
    assert BESS_CLASSES <= set(names)
    assert len(names) == len(set(names))


def test_get_mclass_info(pybess):
    r = pybess.get_mclass_info("Queue")
    assert r.name == "Queue" and r.help
    assert len(r.cmds) == len(r.cmd_args)
    assert dict(zip(r.cmds, r.cmd_args, strict=True))["get_status"] == "QueueCommandGetStatusArg"
    assert _code(pybess.get_mclass_info, "") == errno.EINVAL
    assert _code(pybess.get_mclass_info, "NoSuchClass") == errno.ENOENT


def test_reset_modules(pybess):
    _pipeline(pybess)
    pybess.reset_modules()
    assert list(pybess.list_modules().modules) == []


def test_list_modules(pybess):
    pybess.create_module("Source", "src", {"pkt_size": 60})
    (m,) = pybess.list_modules().modules
    assert (m.name, m.mclass) == ("src", "Source")
    assert isinstance(m.desc, str)


def test_create_module(pybess):
    r = pybess.create_module("Queue", "q", {"size": 64})
    assert r.error.code == 0 and r.name == "q"
    assert _code(pybess.create_module, "", "x") == errno.EINVAL  # no mclass
    assert _code(pybess.create_module, "NoSuchClass", "x") == errno.ENOENT
    assert _code(pybess.create_module, "Queue", "q") == errno.EEXIST
    assert _code(pybess.create_module, "Queue", "q2", {"size": 3}) == errno.EINVAL
    assert [m.name for m in pybess.list_modules().modules] == ["q"]


def test_destroy_module(pybess):
    _pipeline(pybess)
    pybess.destroy_module("snk")
    assert [m.name for m in pybess.list_modules().modules] == ["src"]
    assert pybess.get_module_info("src").ogates == []
    assert _code(pybess.destroy_module, "") == errno.EINVAL
    assert _code(pybess.destroy_module, "snk") == errno.ENOENT


def test_get_module_info(pybess):
    _pipeline(pybess)
    r = pybess.get_module_info("snk")
    assert (r.name, r.mclass) == ("snk", "Sink")
    (ig,) = r.igates
    assert ig.igate == 0 and [(o.name, o.ogate) for o in ig.ogates] == [("src", 0)]
    (og,) = pybess.get_module_info("src").ogates
    assert (og.ogate, og.name, og.igate) == (0, "snk", 0)
    assert _code(pybess.get_module_info, "") == errno.EINVAL
    assert _code(pybess.get_module_info, "nope") == errno.ENOENT


def test_connect_modules(pybess):
    pybess.create_module("Source", "src")
    pybess.create_module("Sink", "snk")
    pybess.create_module("Sink", "snk2")
    assert _code(pybess.connect_modules, "nope", "snk") == errno.ENOENT
    assert _code(pybess.connect_modules, "src", "nope") == errno.ENOENT
    assert _code(pybess.connect_modules, "src", "snk", 1, 0) == errno.EINVAL  # 1 ogate
    assert _code(pybess.connect_modules, "snk", "src") == errno.EINVAL  # Sink has none
    pybess.connect_modules("src", "snk")
    assert _code(pybess.connect_modules, "src", "snk2") == errno.EBUSY  # taken
    assert [o.name for o in pybess.get_module_info("src").ogates] == ["snk"]


def test_disconnect_modules(pybess):
    _pipeline(pybess)
    pybess.disconnect_modules("src", 0)
    assert pybess.get_module_info("src").ogates == []
    assert _code(pybess.disconnect_modules, "", 0) == errno.EINVAL
    assert _code(pybess.disconnect_modules, "nope", 0) == errno.ENOENT
    assert _code(pybess.disconnect_modules, "src", 1) == errno.EINVAL  # Source has 1 ogate


def test_module_command(pybess):
    pybess.create_module("Source", "src")
    r = pybess.run_module_command("src", "set_burst", "SourceCommandSetBurstArg", {"burst": 8})
    # BESS answers no data and pybess returns the CommandResponse; Bessemer answers an
    # EmptyArg, which pybess unpacks and returns (docs/compat.md).
    assert type(r).__name__ in ("CommandResponse", "EmptyArg")
    assert _code(pybess.run_module_command, "", "set_burst", "EmptyArg", {}) == errno.EINVAL
    assert _code(pybess.run_module_command, "nope", "set_burst", "EmptyArg", {}) == errno.ENOENT
    assert _code(pybess.run_module_command, "src", "explode", "EmptyArg", {}) == errno.ENOTSUP


# --- gate hooks ------------------------------------------------------------------------


def test_list_gate_hook_class(pybess):
    names = list(pybess.list_gatehook_classes().names)
    assert names and len(names) == len(set(names))


def test_get_gate_hook_class_info(pybess):
    first = pybess.list_gatehook_classes().names[0]
    r = pybess.get_gatehook_class_info(first)
    assert r.name == first and r.help and len(r.cmds) == len(r.cmd_args)
    assert _code(pybess.get_gatehook_class_info, "") == errno.EINVAL
    assert _code(pybess.get_gatehook_class_info, "NoSuchHook") == errno.ENOENT


def test_configure_gate_hook(pybess):
    _pipeline(pybess)
    track = pybess.bess_msg.TrackArg()
    r = pybess._configure_gate_hook("track", "", "src", track, True, "out", 0)
    assert r.error.code == 0 and r.name
    assert _code(pybess._configure_gate_hook, "NoSuchHook", "", "src", track, True) == errno.ENOENT
    assert _code(pybess._configure_gate_hook, "track", "", "nope", track, True) == errno.ENOENT
    # Enabling on an output gate that does not exist: ENOENT in BESS.
    assert (
        _code(pybess._configure_gate_hook, "track", "", "src", track, True, "out", 5)
        == errno.ENOENT
    )


def test_list_gate_hooks(pybess, tmp_path):
    _pipeline(pybess)
    pybess._configure_gate_hook("track", "", "src", pybess.bess_msg.TrackArg(), True, "out", 0)
    hooks = [h for h in pybess.list_gatehooks().hooks if h.module_name == "src"]
    assert hooks and all(h.WhichOneof("gate") == "ogate" and h.ogate == 0 for h in hooks)
    assert all(h.class_name and h.hook_name for h in hooks)


def test_gate_hook_command(pybess):
    """pybess names the hook by `hook_name` only (no class). Deliberately different for
    now: Bessemer's hooks have no commands (BESS's Track has `reset`), so a command on an
    installed hook may be EINVAL naming the command; unknown module or hook → ENOENT."""
    _pipeline(pybess)
    pybess._configure_gate_hook("track", "", "src", pybess.bess_msg.TrackArg(), True, "out", 0)
    name = [h.hook_name for h in pybess.list_gatehooks().hooks if h.module_name == "src"][0]
    run = pybess.run_gatehook_command
    assert _code(run, name, "src", "out", 0, "reset", "EmptyArg", {}) in (0, errno.EINVAL)
    assert _code(run, name, "nope", "out", 0, "reset", "EmptyArg", {}) == errno.ENOENT
    assert _code(run, "no_such_hook", "src", "out", 0, "reset", "EmptyArg", {}) == errno.ENOENT


def test_configure_resume_hook(pybess):
    """Deliberately different for now: Bessemer has no resume hooks and answers ENOTSUP
    (BESS: ENOENT for an unknown hook, and its `check_constraints` hook)."""
    empty = pybess.module_msg.EmptyArg()
    assert _code(pybess.configure_resume_hook, "check_constraints", empty) == errno.ENOTSUP

"""A pybess-shaped client for the compatibility tests.

It builds every request the way pybess's `BESS` class (NetSys/bess `pybess/bess.py`) does:
the same request message, the same fields set, the same defaults, arguments packed in a
`google.protobuf.Any` typed `bess.pb.<Class>Arg` (or `bess.pb.EmptyArg` when no such message
exists), and errors raised from `response.error.code != 0`. Replies are returned as the raw
response messages, as pybess returns them. Written for these tests from pybess's documented
behaviour; only the generated `bess.pb` stubs of the `bessemer` package are reused.

`omec=True` makes the argument messages the ones omec-project's BESS fork (the 5G UPF's
pybess) compiles: `ExactMatchArg.entries`, `WildcardMatchArg.entries`, `IPChecksumArg.hw`...
(field numbers from shared/omec-protocol.md), so the tests send what the UPF sends.
"""

from __future__ import annotations

import errno
import os
import re
from types import SimpleNamespace
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from bessemer import pb

DEF_PORT = 10514


def _constraints_to_list(constraint: int) -> list[int]:
    """The socket numbers set in a constraint bit mask (pybess prints them)."""
    return [i for i in range(constraint.bit_length()) if constraint >> i & 1]


# --- omec's variants of a few argument messages ------------------------------------------

# (message, [(number, name, type, label, type_name)]) with FieldDescriptorProto constants.
_F = descriptor_pb2.FieldDescriptorProto
_REP, _OPT = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
_OMEC_MESSAGES = [
    (
        "ExactMatchArg",
        [
            (1, "fields", _F.TYPE_MESSAGE, _REP, ".bess.pb.Field"),
            (2, "masks", _F.TYPE_MESSAGE, _REP, ".bess.pb.FieldData"),
            (3, "values", _F.TYPE_MESSAGE, _REP, ".bess.pb.Field"),
            (4, "masksv", _F.TYPE_MESSAGE, _REP, ".bess.pb.FieldData"),
            (5, "entries", _F.TYPE_UINT64, _OPT, None),
        ],
    ),
    (
        "WildcardMatchArg",
        [
            (1, "fields", _F.TYPE_MESSAGE, _REP, ".bess.pb.Field"),
            (2, "values", _F.TYPE_MESSAGE, _REP, ".bess.pb.Field"),
            (3, "entries", _F.TYPE_UINT64, _OPT, None),
        ],
    ),
    (
        "IPChecksumArg",
        [(1, "verify", _F.TYPE_BOOL, _OPT, None), (2, "hw", _F.TYPE_BOOL, _OPT, None)],
    ),
    (
        "L4ChecksumArg",
        [(1, "verify", _F.TYPE_BOOL, _OPT, None), (2, "hw", _F.TYPE_BOOL, _OPT, None)],
    ),
]


def _omec_classes(util_msg_file) -> dict[str, type]:
    """Message classes named bess.pb.<X>Arg with omec's fields, in a private pool (so the
    type URL is the one omec's pybess packs)."""
    pool = descriptor_pool.DescriptorPool()
    util = descriptor_pb2.FileDescriptorProto()
    util_msg_file.CopyToProto(util)
    pool.Add(util)
    f = descriptor_pb2.FileDescriptorProto(
        name="omec_module_msg_for_tests.proto",
        package="bess.pb",
        syntax="proto3",
        dependency=[util.name],
    )
    for name, fields in _OMEC_MESSAGES:
        m = f.message_type.add(name=name)
        for number, fname, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
    pool.Add(f)
    out = {}
    for name, _ in _OMEC_MESSAGES:
        desc = pool.FindMessageTypeByName(f"bess.pb.{name}")
        out[name] = message_factory.GetMessageClass(desc)
    return out


# --- dict -> message, as pybess's protobuf_to_dict.dict_to_protobuf ----------------------


def _is_repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == field.LABEL_REPEATED


def dict_to_protobuf(cls, values: dict[str, Any] | None):
    """A `cls` message from a dict: nested dicts are messages, lists repeated fields, dicts
    on map fields maps; an unknown key raises KeyError (pybess turns it into APIError)."""
    msg = cls()
    _fill(msg, values or {})
    return msg


def _fill(msg, values: dict[str, Any]) -> None:
    for key, value in values.items():
        field = msg.DESCRIPTOR.fields_by_name.get(key)
        if field is None:
            raise KeyError(f"{msg.DESCRIPTOR.full_name} has no field '{key}'")
        target = getattr(msg, key)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            vfield = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if vfield.message_type is not None:
                    _fill(target[k], v)
                else:
                    target[k] = v
        elif _is_repeated(field):
            for item in value:
                if field.message_type is not None:
                    _fill(target.add(), item)
                else:
                    target.append(item)
        elif field.message_type is not None:
            _fill(target, value)
        else:
            setattr(msg, key, value)


class _Namespace(SimpleNamespace):
    """pybess's `module_pb` / `port_msg`: message classes ending in Arg, Config, Response."""

    @classmethod
    def of(cls, modules, extra: dict[str, type] | None = None):
        ns = cls()
        for mod in modules:
            for name in mod.DESCRIPTOR.message_types_by_name:
                if re.search(r"(?:Arg|Config|Response)$", name):
                    setattr(ns, name, getattr(mod, name))
        for name, c in (extra or {}).items():
            setattr(ns, name, c)
        return ns


class BESS:
    """pybess's BESS class, request for request."""

    class Error(Exception):
        """The daemon refused a request (pybess: BESS.Error(code, errmsg, **info))."""

        def __init__(self, code: int, errmsg: str, **kwargs):
            super().__init__(code, errmsg)
            self.code = code
            self.errmsg = errmsg
            self.info = kwargs

        def __str__(self) -> str:
            name = errno.errorcode.get(self.code, "<unknown>")
            return f"errno={self.code} ({name}: {os.strerror(self.code)}), {self.errmsg}"

    class RPCError(Exception):
        """The gRPC call itself failed."""

    class APIError(Exception):
        """Misuse of this class (unknown argument type, bad field...)."""

    class ConstraintError(Exception):
        """CheckSchedulingConstraints reported a fatal violation."""

    DEF_PORT = DEF_PORT

    def __init__(self, omec: bool = False):
        self._pb = pb.load()
        self.bess_msg = self._pb["bess_msg"]
        self.module_msg = self._pb["module_msg"]
        extra = _omec_classes(self._pb["module_msg"].DESCRIPTOR.dependencies[0]) if omec else {}
        # pybess imports every *_msg_pb2 but bess_msg for module arguments, and the ports/
        # folder for driver arguments.
        # Bessemer's own module classes (ESPEncap, ESPDecap) have their messages in
        # ext/bessemer_esp.proto, package bess.pb: a pybess built from these protos has them.
        self.module_pb = _Namespace.of([self._pb["module_msg"], self._pb["ext_module_msg"]], extra)
        self.port_msg = _Namespace.of([self._pb["port_msg"], self._pb["ext_port_msg"]])
        self.channel = None
        self.stub = None
        self.peer = None
        self.debug = False

    # --- connection ---------------------------------------------------------------------

    def connect(self, grpc_url: str = f"localhost:{DEF_PORT}", timeout: float = 10.0) -> None:
        self.peer = grpc_url
        self.channel = grpc.insecure_channel(grpc_url)
        grpc.channel_ready_future(self.channel).result(timeout=timeout)
        self.stub = self._pb["service_grpc"].BESSControlStub(self.channel)

    def disconnect(self) -> None:
        if self.channel is not None:
            self.channel.close()
        self.channel = self.stub = None

    def is_connected(self) -> bool:
        return self.stub is not None

    def _request(self, name: str, req_pb=None):
        if self.stub is None:
            raise self.APIError("BESS daemon not connected")
        if req_pb is None:
            req_pb = self.bess_msg.EmptyRequest()
        try:
            response = getattr(self.stub, name)(req_pb, timeout=30)
        except grpc.RpcError as e:
            raise self.RPCError(str(e)) from None
        # As pybess: a reply whose error code is not 0 raises, with a default message.
        if response.error.code != 0:
            errmsg = response.error.errmsg or "(error message is not given)"
            raise self.Error(response.error.code, errmsg, query=name)
        return response

    # --- daemon -------------------------------------------------------------------------

    def kill(self):
        response = self._request("KillBess")
        self.disconnect()
        return response

    def get_version(self):
        return self._request("GetVersion")

    def reset_all(self):
        return self._request("ResetAll")

    def pause_all(self):
        return self._request("PauseAll")

    def pause_worker(self, wid):
        request = self.bess_msg.PauseWorkerRequest()
        request.wid = wid
        return self._request("PauseWorker", request)

    def check_constraints(self):
        """pybess: reports violations, raises ConstraintError when one is fatal."""
        response = self.check_scheduling_constraints()
        error = bool(response.violations) or bool(response.modules)
        if response.fatal:
            raise self.ConstraintError("Fatal violation of scheduling constraints")
        return error

    def uncheck_resume_all(self):
        return self._request("ResumeAll")

    def check_resume_all(self):
        ret = self.check_constraints()
        self.uncheck_resume_all()
        return ret

    def resume_all(self, check=True):
        # pybess checks the constraints first by default and does not resume on a fatal one.
        if check:
            return self.check_resume_all()
        return self.uncheck_resume_all()

    def resume_worker(self, wid):
        request = self.bess_msg.ResumeWorkerRequest()
        request.wid = wid
        return self._request("ResumeWorker", request)

    def check_scheduling_constraints(self):
        return self._request("CheckSchedulingConstraints")

    def import_plugin(self, path):
        request = self.bess_msg.ImportPluginRequest()
        request.path = path
        return self._request("ImportPlugin", request)

    def unload_plugin(self, path):
        request = self.bess_msg.UnloadPluginRequest()
        request.path = path
        return self._request("UnloadPlugin", request)

    def list_plugins(self):
        return self._request("ListPlugins")

    def dump_mempool(self, socket=-1):
        request = self.bess_msg.DumpMempoolRequest()
        request.socket = socket
        return self._request("DumpMempool", request)

    # --- ports --------------------------------------------------------------------------

    def list_drivers(self):
        return self._request("ListDrivers")

    def get_driver_info(self, name):
        request = self.bess_msg.GetDriverInfoRequest()
        request.driver_name = name
        return self._request("GetDriverInfo", request)

    def reset_ports(self):
        return self._request("ResetPorts")

    def list_ports(self):
        return self._request("ListPorts")

    def create_port(self, driver, name=None, arg=None):
        arg = dict(arg or {})
        request = self.bess_msg.CreatePortRequest()
        request.name = name or ""
        request.driver = driver
        # pybess takes the queue fields out of the driver's argument dict.
        request.num_inc_q = arg.pop("num_inc_q", 0)
        request.num_out_q = arg.pop("num_out_q", 0)
        request.size_inc_q = arg.pop("size_inc_q", 0)
        request.size_out_q = arg.pop("size_out_q", 0)
        message_type = getattr(self.port_msg, driver + "Arg", self.module_msg.EmptyArg)
        request.arg.Pack(self._to_pb(message_type, arg))
        return self._request("CreatePort", request)

    def destroy_port(self, name):
        request = self.bess_msg.DestroyPortRequest()
        request.name = name
        return self._request("DestroyPort", request)

    def set_port_config(self, name, arg):
        arg = dict(arg)
        request = self.bess_msg.SetPortConfRequest()
        request.name = name
        # pybess's defaults: "no update" MAC and MTU, admin up.
        request.conf.mac_addr = arg.pop("mac_addr", "00:00:00:00:00:00")
        request.conf.mtu = arg.pop("mtu", 0)
        request.conf.admin_up = arg.pop("admin_up", True)
        return self._request("SetPortConf", request)

    def get_port_config(self, name):
        request = self.bess_msg.GetPortConfRequest()
        request.name = name
        return self._request("GetPortConf", request)

    def get_port_stats(self, name):
        request = self.bess_msg.GetPortStatsRequest()
        request.name = name
        return self._request("GetPortStats", request)

    def get_link_status(self, name):
        request = self.bess_msg.GetLinkStatusRequest()
        request.name = name
        return self._request("GetLinkStatus", request)

    # --- modules ------------------------------------------------------------------------

    def list_mclasses(self):
        return self._request("ListMclass")

    def list_modules(self):
        return self._request("ListModules")

    def get_mclass_info(self, name):
        request = self.bess_msg.GetMclassInfoRequest()
        request.name = name
        return self._request("GetMclassInfo", request)

    def reset_modules(self):
        return self._request("ResetModules")

    def create_module(self, mclass, name=None, arg=None):
        request = self.bess_msg.CreateModuleRequest()
        request.name = name or ""
        request.mclass = mclass
        # pybess: <mclass>Arg if the class has one by exactly that name, else EmptyArg.
        message_type = getattr(self.module_pb, mclass + "Arg", self.module_msg.EmptyArg)
        request.arg.Pack(self._to_pb(message_type, arg or {}))
        return self._request("CreateModule", request)

    def destroy_module(self, name):
        request = self.bess_msg.DestroyModuleRequest()
        request.name = name
        return self._request("DestroyModule", request)

    def get_module_info(self, name):
        request = self.bess_msg.GetModuleInfoRequest()
        request.name = name
        return self._request("GetModuleInfo", request)

    def connect_modules(self, m1, m2, ogate=0, igate=0, skip_default_hooks=False):
        request = self.bess_msg.ConnectModulesRequest()
        request.m1 = m1
        request.m2 = m2
        request.ogate = ogate
        request.igate = igate
        request.skip_default_hooks = skip_default_hooks
        return self._request("ConnectModules", request)

    def disconnect_modules(self, name, ogate=0):
        request = self.bess_msg.DisconnectModulesRequest()
        request.name = name
        request.ogate = ogate
        return self._request("DisconnectModules", request)

    def _to_pb(self, message_type, arg):
        try:
            return dict_to_protobuf(message_type, arg)
        except (KeyError, ValueError, TypeError) as e:
            raise self.APIError(e) from None

    def _unpack_data(self, response):
        # pybess: the reply's Any is unpacked as the module_pb message named by the last
        # component of its type URL, EmptyArg if there is none; no data: the response.
        if response.HasField("data"):
            type_name = response.data.type_url.split(".")[-1]
            result = getattr(self.module_pb, type_name, self.module_msg.EmptyArg)()
            response.data.Unpack(result)
            return result
        return response

    def run_module_command(self, name, cmd, arg_type, arg):
        request = self.bess_msg.CommandRequest()
        request.name = name
        request.cmd = cmd
        try:
            message_type = getattr(self.module_pb, arg_type)
        except AttributeError:
            raise self.APIError(f'Unknown arg "{arg_type}"') from None
        request.arg.Pack(self._to_pb(message_type, arg))
        return self._unpack_data(self._request("ModuleCommand", request))

    # --- gate hooks ---------------------------------------------------------------------

    def list_gatehook_classes(self):
        return self._request("ListGateHookClass")

    def list_gatehooks(self):
        return self._request("ListGateHooks")

    def get_gatehook_class_info(self, name):
        request = self.bess_msg.GetGateHookClassInfoRequest()
        request.name = name
        return self._request("GetGateHookClassInfo", request)

    def run_gatehook_command(self, name, mod, direction, gate, cmd, arg_type, arg):
        request = self.bess_msg.GateHookCommandRequest()
        request.hook.hook_name = name
        request.hook.module_name = mod
        if direction == "in":
            request.hook.igate = gate
        elif direction == "out" or direction is None:
            request.hook.ogate = gate
        else:
            raise self.APIError('direction must be either "out" or "in"')
        request.cmd = cmd
        try:
            message_type = getattr(self.module_pb, arg_type)
        except AttributeError:
            raise self.APIError(f'Unknown arg "{arg_type}"') from None
        request.hook.arg.Pack(self._to_pb(message_type, arg))
        return self._unpack_data(self._request("GateHookCommand", request))

    def _configure_gate_hook(
        self, hook_class, hook_name, module, arg, enable=None, direction=None, gate=None
    ):
        # pybess's defaults: every gate (-1), output side, disable.
        gate = -1 if gate is None else gate
        direction = direction or "out"
        request = self.bess_msg.ConfigureGateHookRequest()
        request.hook.class_name = hook_class
        request.hook.hook_name = hook_name
        request.hook.module_name = module
        request.enable = bool(enable)
        if direction == "in":
            request.hook.igate = gate
        elif direction == "out":
            request.hook.ogate = gate
        else:
            raise self.APIError('direction must be either "out" or "in"')
        request.hook.arg.Pack(arg)
        return self._request("ConfigureGateHook", request)

    def configure_resume_hook(self, name, arg, enable=True):
        request = self.bess_msg.ConfigureResumeHookRequest()
        request.hook_name = name
        request.enable = True if enable is None else enable
        request.arg.Pack(arg)
        return self._request("ConfigureResumeHook", request)

    def tcpdump_gate(self, enable, name, m, direction="out", gate=0, fifo=None):
        arg = self.bess_msg.TcpdumpArg()
        if fifo is not None:
            arg.fifo = fifo
        return self._configure_gate_hook("TcpDump", name, m, arg, enable, direction, gate)

    def track_gate(self, enable, name, m, bits=False, direction="out", gate=-1):
        arg = self.bess_msg.TrackArg()
        arg.bits = bits
        return self._configure_gate_hook("Track", name, m, arg, enable, direction, gate)

    def pcapng_gate(self, enable, name, m, direction="out", gate=0, fifo=None):
        arg = self.bess_msg.PcapngArg()
        if fifo is not None:
            arg.fifo = fifo
        return self._configure_gate_hook("PcapNg", name, m, arg, enable, direction, gate)

    # bessctl's `track`/`tcpdump`/`pcapng` commands call the *_gate methods with an empty
    # hook name; these are the shorter spellings older pybess had.
    def track_module(self, m, enable, bits=False, direction="out", gate=-1):
        return self.track_gate(enable, "", m, bits, direction, gate)

    def tcpdump(self, enable, m, direction="out", gate=0, fifo=None):
        return self.tcpdump_gate(enable, "", m, direction, gate, fifo)

    def pcapng(self, enable, m, direction="out", gate=0, fifo=None):
        return self.pcapng_gate(enable, "", m, direction, gate, fifo)

    # --- workers and traffic classes ----------------------------------------------------

    def list_workers(self):
        return self._request("ListWorkers")

    def add_worker(self, wid, core, scheduler=None):
        request = self.bess_msg.AddWorkerRequest()
        request.wid = wid
        request.core = core
        request.scheduler = scheduler or ""
        return self._request("AddWorker", request)

    def destroy_worker(self, wid):
        request = self.bess_msg.DestroyWorkerRequest()
        request.wid = wid
        return self._request("DestroyWorker", request)

    def reset_workers(self):
        return self._request("ResetWorkers")

    def list_tcs(self, wid=-1):
        request = self.bess_msg.ListTcsRequest()
        request.wid = wid
        return self._request("ListTcs", request)

    def reset_tcs(self):
        return self._request("ResetTcs")

    def add_tc(
        self,
        name,
        policy,
        wid=-1,
        parent="",
        resource=None,
        priority=None,
        share=None,
        limit=None,
        max_burst=None,
        leaf_module_name=None,
        leaf_module_taskid=None,
    ):
        request = self.bess_msg.AddTcRequest()
        class_ = getattr(request, "class")
        class_.parent = parent
        class_.name = name
        class_.wid = wid
        class_.policy = policy
        # Optional fields are set only when given, as pybess does (priority/share are a oneof).
        if priority is not None:
            class_.priority = priority
        if share is not None:
            class_.share = share
        if resource is not None:
            class_.resource = resource
        for k, v in (limit or {}).items():
            class_.limit[k] = v
        for k, v in (max_burst or {}).items():
            class_.max_burst[k] = v
        if leaf_module_name is not None:
            class_.leaf_module_name = leaf_module_name
        if leaf_module_taskid is not None:
            class_.leaf_module_taskid = leaf_module_taskid
        return self._request("AddTc", request)

    def update_tc_params(
        self,
        name,
        resource=None,
        limit=None,
        max_burst=None,
        leaf_module_name=None,
        leaf_module_taskid=0,
    ):
        request = self.bess_msg.UpdateTcParamsRequest()
        class_ = getattr(request, "class")
        class_.name = name
        if resource is not None:
            class_.resource = resource
        for k, v in (limit or {}).items():
            class_.limit[k] = v
        for k, v in (max_burst or {}).items():
            class_.max_burst[k] = v
        if leaf_module_name is not None:
            class_.leaf_module_name = leaf_module_name
        if leaf_module_taskid is not None:
            class_.leaf_module_taskid = leaf_module_taskid
        return self._request("UpdateTcParams", request)

    def attach_task(
        self, module_name, parent="", wid=-1, module_taskid=0, priority=None, share=None
    ):
        # pybess sends UpdateTcParent with the leaf's module and task id, parent and wid.
        request = self.bess_msg.UpdateTcParentRequest()
        class_ = getattr(request, "class")
        class_.leaf_module_name = module_name
        class_.leaf_module_taskid = module_taskid
        class_.parent = parent
        class_.wid = wid
        if priority is not None:
            class_.priority = priority
        if share is not None:
            class_.share = share
        return self._request("UpdateTcParent", request)

    attach_module = attach_task  # pybess's deprecated alias

    def get_tc_stats(self, name):
        request = self.bess_msg.GetTcStatsRequest()
        request.name = name
        return self._request("GetTcStats", request)

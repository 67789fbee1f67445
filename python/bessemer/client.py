"""A client for BESS's gRPC control protocol, as spoken by `bessemerd` (and by BESS).

Method names follow pybess's `BESS` class: `create_module`, `connect_modules`,
`run_module_command`, `add_worker`, `resume_all`, ... Arguments are plain dicts with the
field names of BESS's `<Class>Arg` messages. A failed request raises `BESS.Error` with the
daemon's errno code and message.
"""

from __future__ import annotations

import contextlib
from typing import Any

import grpc
from google.protobuf import any_pb2

from . import pb
from ._errors import Error as _Error

DEFAULT_PORT = 10514

_QUEUE_FIELDS = ("num_inc_q", "num_out_q", "size_inc_q", "size_out_q")


def grpc_target(host: str = "localhost", port: int = DEFAULT_PORT, unix: str | None = None) -> str:
    """The gRPC target of a daemon: `unix:PATH` for a unix-domain socket (`unix`, or a
    `host` already written so), else `HOST:PORT` (an IPv6 address in brackets)."""
    if unix:
        return f"unix:{unix}"
    if host.startswith("unix:"):
        return host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def split_queue_args(arg: dict[str, Any]) -> tuple[dict[str, Any], int, int, int, int]:
    """Separates CreatePortRequest's queue fields (given beside a driver's own arguments, as
    in `PMDPort(port_id=0, num_inc_q=2)`) from the driver argument: returns the driver
    argument, then num_inc_q, num_out_q, size_inc_q, size_out_q (0: the driver's default)."""
    rest = {k: v for k, v in arg.items() if k not in _QUEUE_FIELDS}
    return (rest, *(arg.get(k, 0) for k in _QUEUE_FIELDS))


def _scalar(field, value: Any, where: str) -> Any:
    if field.type == field.TYPE_STRING and not isinstance(value, str) and hasattr(value, "name"):
        return value.name  # a Port or Module object where its name is expected
    if field.type == field.TYPE_BYTES and isinstance(value, str):
        return value.encode()
    if field.enum_type is not None and isinstance(value, str):
        try:
            return field.enum_type.values_by_name[value].number
        except KeyError:
            raise BESS.Error(22, f"{where}: {value!r} is not a {field.enum_type.name}") from None
    return value


def _repeated(field) -> bool:
    # protobuf >= 5.28 has is_repeated; older versions only the label.
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == field.LABEL_REPEATED


def fill(msg, fields: dict[str, Any], where: str = "") -> None:
    """Sets `msg`'s fields from a dict the way pybess does (bytes stay bytes, nested dicts
    and lists become messages and repeated fields); errors name the field."""
    where = where or msg.DESCRIPTOR.name
    if not isinstance(fields, dict):
        raise BESS.Error(22, f"{where}: expected a dict of fields, got {fields!r:.60}")
    for key, value in fields.items():
        field = msg.DESCRIPTOR.fields_by_name.get(key)
        path = f"{where}.{key}"
        if field is None:
            known = ", ".join(msg.DESCRIPTOR.fields_by_name) or "none"
            raise BESS.Error(22, f"{where} has no field '{key}' (fields: {known})")
        try:
            target = getattr(msg, key)
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            if is_map:
                vfield = field.message_type.fields_by_name["value"]
                for k, v in value.items():
                    if vfield.message_type is not None:
                        fill(target[k], v, f"{path}[{k!r}]")
                    else:
                        target[k] = _scalar(vfield, v, f"{path}[{k!r}]")
            elif _repeated(field):
                if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
                    raise BESS.Error(22, f"{path}: expected a list, got {value!r:.60}")
                for i, item in enumerate(value):
                    if field.message_type is not None:
                        fill(target.add(), item, f"{path}[{i}]")
                    else:
                        target.append(_scalar(field, item, f"{path}[{i}]"))
            elif field.message_type is not None:
                fill(target, value, path)
            else:
                setattr(msg, key, _scalar(field, value, path))
        except (TypeError, ValueError) as exc:
            raise BESS.Error(22, f"{path}: {exc}") from None


class Transaction:
    """An open `BESS.transaction()`: `results` holds, after it is applied, one entry per
    change (`name` for a created module, `data` for a command's response)."""

    def __init__(self):
        self.results: list = []


class BESS:
    """A connection to one daemon."""

    Error = _Error

    def __init__(
        self,
        host: str = "localhost",
        port: int = DEFAULT_PORT,
        timeout: float = 10.0,
        tls_ca: str | None = None,
        token: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        unix: str | None = None,
    ):
        """`unix` (a socket path, as `bessemerd --unix PATH`) connects there instead of to
        `host`:`port`; so does a `host` written `unix:PATH`. `tls_ca` (a PEM file) connects
        over TLS, trusting that CA; `cert` and `key` (PEM files) present a client
        certificate; `token` is sent as a bearer token with every call. Without them the
        channel is plain, as BESS's."""
        self.target = grpc_target(host, port, unix)
        # gRPC sends a unix socket's path as the HTTP/2 authority, which bessemerd's HTTP/2
        # server refuses as malformed (the request is reset); name the local host instead.
        options = (
            [("grpc.default_authority", "localhost")] if self.target.startswith("unix:") else []
        )
        self._pb = pb.load()
        self.timeout = timeout
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        if tls_ca or cert:

            def pem(path: str | None) -> bytes | None:
                return open(path, "rb").read() if path else None

            creds = grpc.ssl_channel_credentials(
                root_certificates=pem(tls_ca),
                private_key=pem(key),
                certificate_chain=pem(cert),
            )
            self.channel = grpc.secure_channel(self.target, creds, options)
        else:
            self.channel = grpc.insecure_channel(self.target, options)
        self.stub = self._pb["service_grpc"].BESSControlStub(self.channel)
        self.ext_stub = self._pb["ext_service_grpc"].BessemerControlStub(self.channel)
        # Called after every request (progress reports count them).
        self.on_request = None
        # Changes queued by an open `transaction()` (None: none open).
        self._tx: list | None = None

    def close(self) -> None:
        """Closes the channel."""
        self.channel.close()

    def _msg(self, module: str, name: str, fields: dict[str, Any] | None = None):
        msg = getattr(self._pb[module], name)()
        fill(msg, fields or {})
        return msg

    # The changes a transaction groups, by RPC: the TransactionOp field each goes in.
    _TX_FIELDS = {
        "CreateModule": "create_module",
        "DestroyModule": "destroy_module",
        "ConnectModules": "connect_modules",
        "DisconnectModules": "disconnect_modules",
        "ModuleCommand": "module_command",
    }

    def _queue(self, rpc: str, request):
        """Queues a change in the open transaction; answers what the call returns meanwhile."""
        op = self._pb["ext_service"].TransactionOp()
        getattr(op, self._TX_FIELDS[rpc]).CopyFrom(request)
        if rpc == "CreateModule" and not request.name:
            raise BESS.Error(22, "inside a transaction, give each new module a name")
        self._tx.append(op)
        if rpc == "CreateModule":
            return self._pb["bess_msg"].CreateModuleResponse(name=request.name)
        if rpc == "ModuleCommand":
            return self._pb["bess_msg"].CommandResponse()
        return self._pb["bess_msg"].EmptyResponse()

    @contextlib.contextmanager
    def transaction(self):
        """Groups the module changes made inside (create, destroy, connect, disconnect,
        commands) into one request that bessemerd applies under one pause, all or nothing:
        a splice drops no packet, and a change that fails leaves the graph as it was (the
        error names the change). Commands' results are in `tx.results` afterwards. Other
        calls inside run at once. Bessemer's own RPC: BESS has no transactions.

            with bess.transaction() as tx:
                bess.create_module("Bypass", "bp")
                bess.disconnect_modules("src", 0)
                bess.connect_modules("src", "bp")
                bess.connect_modules("bp", "sink")
        """
        if self._tx is not None:
            raise BESS.Error(22, "a transaction is already open")
        self._tx = []
        tx = Transaction()
        try:
            yield tx
        except BaseException:
            self._tx = None
            raise
        ops, self._tx = self._tx, None
        if ops:
            req = self._pb["ext_service"].TransactionRequest(ops=ops)
            tx.results = list(self._call("Transaction", req, self.ext_stub).results)

    def _call(self, rpc: str, request, stub=None):
        if self._tx is not None and rpc in self._TX_FIELDS:
            return self._queue(rpc, request)
        try:
            resp = getattr(stub or self.stub, rpc)(
                request, timeout=self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise BESS.Error(-1, f"{rpc}: {exc.code().name}: {exc.details()}") from None
        if self.on_request is not None:
            self.on_request()
        if resp.HasField("error") and resp.error.code != 0:
            raise BESS.Error(resp.error.code, resp.error.errmsg)
        return resp

    def _empty(self):
        return self._pb["bess_msg"].EmptyRequest()

    def _arg_class(self, type_name: str):
        """The message class of an argument type: BESS's module and port messages, then
        Bessemer's own (`bessemer.pb`); BESS spells a few differently from their class
        (MPLSPop takes MplsPopArg), so case is ignored as a last resort."""
        short = type_name.rsplit(".", 1)[-1]
        mods = [
            self._pb[m]
            for m in ("module_msg", "port_msg", "ext_port_msg", "ext_module_msg", "bess_msg")
        ]
        for m in mods:
            if hasattr(m, short):
                return getattr(m, short)
        for m in mods:
            for n in m.DESCRIPTOR.message_types_by_name:
                if n.lower() == short.lower():
                    return getattr(m, n)
        return None

    def pack(self, type_name: str, fields: dict[str, Any] | None) -> any_pb2.Any:
        """Packs `fields` as the argument message `type_name` in an Any.

        An unknown type with no fields packs as an empty Any, so the daemon names the
        problem (e.g. an unknown module class); with fields it is refused here.
        """
        a = any_pb2.Any()
        cls = self._arg_class(type_name)
        if cls is None:
            if fields:
                raise BESS.Error(22, f"unknown argument message type '{type_name}'")
            return a
        msg = cls()
        fill(msg, fields or {})
        a.Pack(msg)
        return a

    def get_version(self) -> str:
        """The daemon's version string."""
        return self._call("GetVersion", self._empty()).version

    def reset_all(self) -> None:
        """Destroys modules, traffic classes and workers."""
        self._call("ResetAll", self._empty())

    def pause_all(self) -> None:
        """Pauses every worker."""
        self._call("PauseAll", self._empty())

    def resume_all(self) -> None:
        """Resumes every worker (starting worker 0 on core 0 if tasks exist and none does)."""
        self._call("ResumeAll", self._empty())

    def add_worker(self, wid: int, core: int, scheduler: str = "") -> None:
        """Starts worker `wid` pinned to `core`."""
        req = self._msg(
            "bess_msg", "AddWorkerRequest", {"wid": wid, "core": core, "scheduler": scheduler}
        )
        self._call("AddWorker", req)

    def list_workers(self):
        """The workers' status messages."""
        return list(self._call("ListWorkers", self._empty()).workers_status)

    def duplicate(self, template, workers, port=None, out_port=None, name: str = "dup"):
        """One copy of `template` per worker, worker i on queue pair i of `port` (Bessemer's
        own: see `bessemer.multicore.duplicate` and docs/multicore.md)."""
        from .multicore import duplicate

        return duplicate(self, template, workers, port, out_port, name)

    def list_mclasses(self) -> list[str]:
        """Names of the module classes."""
        return list(self._call("ListMclass", self._empty()).names)

    def create_module(self, mclass: str, name: str = "", arg: dict[str, Any] | None = None) -> str:
        """Creates a module of `mclass` with a `<mclass>Arg` built from `arg`; returns its name."""
        req = self._pb["bess_msg"].CreateModuleRequest(name=name, mclass=mclass)
        req.arg.CopyFrom(self.pack(f"{mclass}Arg", arg))
        return self._call("CreateModule", req).name

    def destroy_module(self, name: str) -> None:
        """Destroys a module."""
        self._call("DestroyModule", self._msg("bess_msg", "DestroyModuleRequest", {"name": name}))

    def list_modules(self):
        """The modules (name, mclass, desc)."""
        return list(self._call("ListModules", self._empty()).modules)

    def get_module_info(self, name: str):
        """Gates, counters and metadata of one module."""
        return self._call(
            "GetModuleInfo", self._msg("bess_msg", "GetModuleInfoRequest", {"name": name})
        )

    def show_errors(self, modules: list[str] | None = None, include_zero: bool = False):
        """Drop counters by module and reason, with rates (Bessemer's own RPC; BESS lacks it)."""
        req = self._msg(
            "ext_observe",
            "ShowErrorsRequest",
            {"modules": list(modules or []), "include_zero": include_zero},
        )
        return self._ext_call("ShowErrors", req)

    def show_runtime(self, modules: list[str] | None = None, clear: bool = False):
        """Per module and worker: calls, packets and sampled TSC cycles since the last clear
        (VPP's `show runtime`); `clear=True` then starts them afresh (Bessemer's own RPC)."""
        req = self._msg(
            "ext_observe",
            "ShowRuntimeRequest",
            {"modules": list(modules or []), "clear": clear},
        )
        return self._ext_call("ShowRuntime", req)

    def show_latency(self, module: str):
        """The histograms module `module` keeps (Measure: latency and jitter): HDR-style
        buckets, count, sum, labelled percentiles (Bessemer's own RPC)."""
        req = self._msg("ext_observe", "ShowLatencyRequest", {"module": module})
        return self._ext_call("ShowLatency", req)

    def trace_add(self, at: str, count: int):
        """Traces the next `count` packets entering module `at`, or port `at` (its PortInc and
        QueueInc modules), as VPP's `trace add`; the response names the modules armed
        (Bessemer's own RPC)."""
        req = self._msg("ext_observe", "TraceAddRequest", {"at": at, "count": count})
        return self._ext_call("TraceAdd", req)

    def show_trace(self, clear: bool = False):
        """The packets traced so far, as records and as text (`show trace`); `clear=True`
        then removes the trace and its records (`clear trace`) (Bessemer's own RPC)."""
        req = self._msg("ext_observe", "ShowTraceRequest", {"clear": clear})
        return self._ext_call("ShowTrace", req)

    def trace_packet(self, module: str, packet: bytes):
        """Runs one packet (bytes from Ethernet on) through the graph from `module` without
        sending it (OVS's `ofproto/trace`) and returns its trace (Bessemer's own RPC)."""
        req = self._msg(
            "ext_observe", "TracePacketRequest", {"module": module, "packet": bytes(packet)}
        )
        return self._ext_call("TracePacket", req)

    def offload(self, port: str, action: str = "show"):
        """XDP offload of the pipeline downstream of AFXDPPort `port`: action "on", "off" or
        "show"; the response has `enabled` and the planner's `plan` (Bessemer's own RPC)."""
        req = self._msg("ext_service", "OffloadRequest", {"port": port, "action": action})
        return self._ext_call("Offload", req)

    def plan_nic(
        self,
        nic: str = "82599",
        flows: list[str] | None = None,
        generate: int = 0,
        policy: str = "balance",
        fmt: str = "text",
        **opts,
    ) -> str:
        """The NIC planner (Bessemer's own RPC): `fmt` "show"/"show-dot" gives the model's
        PRG; "text"/"dot" the configuration `policy` chooses for `flows` (lines like
        "udp 10.0.0.1:1234 10.1.0.1:53 [hp] [bw=MBPS]") or `generate` N flows, with each
        queue's pipeline; "ethtool" the commands that would apply it. Other options are
        PlanNicRequest's fields (queues, iface, netns, hp_queues, hp_penalty, hp_every, bw,
        seed, rss_off)."""
        req = self._msg(
            "ext_service",
            "PlanNicRequest",
            {
                "nic": nic,
                "flows": list(flows or []),
                "generate": generate,
                "policy": policy,
                "format": fmt,
                **opts,
            },
        )
        return self._ext_call("PlanNic", req).text

    def show_port_details(self, ports: list[str] | None = None):
        """Each port's driver-level details in one line (device, mode, the driver's own
        counters); Bessemer's own RPC."""
        req = self._msg("ext_service", "ShowPortDetailsRequest", {"ports": list(ports or [])})
        return self._ext_call("ShowPortDetails", req)

    def _ext_call(self, name: str, req):
        """A call of Bessemer's own service; BESS answers UNIMPLEMENTED, said plainly."""
        try:
            return self._call(name, req, self.ext_stub)
        except BESS.Error as exc:
            if "UNIMPLEMENTED" in exc.errmsg:
                raise BESS.Error(
                    95, f"this daemon has no {name} (BESS itself lacks it; bessemerd has it)"
                ) from None
            raise

    def connect_modules(self, m1: str, m2: str, ogate: int = 0, igate: int = 0) -> None:
        """Connects output gate `ogate` of `m1` to input gate `igate` of `m2`."""
        req = self._msg(
            "bess_msg",
            "ConnectModulesRequest",
            {"m1": m1, "m2": m2, "ogate": ogate, "igate": igate},
        )
        self._call("ConnectModules", req)

    def disconnect_modules(self, name: str, ogate: int = 0) -> None:
        """Disconnects an output gate."""
        req = self._msg("bess_msg", "DisconnectModulesRequest", {"name": name, "ogate": ogate})
        self._call("DisconnectModules", req)

    def run_module_command(
        self, name: str, cmd: str, arg_type: str, arg: dict[str, Any] | None = None
    ):
        """Runs a module command; returns the response message (an `EmptyArg` when the
        command answers nothing), as pybess does: `q.get_status().enqueued`."""
        req = self._pb["bess_msg"].CommandRequest(name=name, cmd=cmd)
        req.arg.CopyFrom(self.pack(arg_type, arg))
        resp = self._call("ModuleCommand", req)
        empty = self._pb["module_msg"].EmptyArg()
        if not resp.HasField("data") or not resp.data.type_url:
            return empty
        type_name = resp.data.type_url.rsplit(".", 1)[-1]
        for module in ("module_msg", "bess_msg", "port_msg", "ext_module_msg"):
            cls = getattr(self._pb[module], type_name, None)
            if cls is not None:
                msg = cls()
                resp.data.Unpack(msg)
                return msg
        return empty

    def get_mclass_info(self, mclass: str):
        """Help, command names and command argument types of a module class."""
        req = self._msg("bess_msg", "GetMclassInfoRequest", {"name": mclass})
        return self._call("GetMclassInfo", req)

    # --- workers -------------------------------------------------------------------------

    def destroy_worker(self, wid: int) -> None:
        """Stops and removes worker `wid`."""
        self._call("DestroyWorker", self._msg("bess_msg", "DestroyWorkerRequest", {"wid": wid}))

    def pause_worker(self, wid: int) -> None:
        """Pauses one worker."""
        self._call("PauseWorker", self._msg("bess_msg", "PauseWorkerRequest", {"wid": wid}))

    def resume_worker(self, wid: int) -> None:
        """Resumes one worker."""
        self._call("ResumeWorker", self._msg("bess_msg", "ResumeWorkerRequest", {"wid": wid}))

    def reset_workers(self) -> None:
        """Removes every worker."""
        self._call("ResetWorkers", self._empty())

    def kill(self) -> None:
        """Stops the daemon (KillBess)."""
        self._call("KillBess", self._empty())

    def reset_modules(self) -> None:
        """Destroys every module."""
        self._call("ResetModules", self._empty())

    # --- traffic classes ---------------------------------------------------------------

    def add_tc(
        self,
        name: str,
        policy: str,
        wid: int = -1,
        parent: str = "",
        resource: str | None = None,
        priority: int | None = None,
        share: int | None = None,
        limit: dict[str, int] | None = None,
        max_burst: dict[str, int] | None = None,
    ) -> None:
        """Adds a traffic class (BESS's add_tc)."""
        tc: dict[str, Any] = {"name": name, "policy": policy, "wid": wid, "parent": parent}
        for key, value in (
            ("resource", resource),
            ("priority", priority),
            ("share", share),
            ("limit", limit),
            ("max_burst", max_burst),
        ):
            if value is not None:
                tc[key] = value
        self._call("AddTc", self._msg("bess_msg", "AddTcRequest", {"class": tc}))

    def update_tc_params(
        self,
        name: str,
        resource: str | None = None,
        limit: dict[str, int] | None = None,
        max_burst: dict[str, int] | None = None,
    ) -> None:
        """Changes a class's resource, limit or burst."""
        tc: dict[str, Any] = {"name": name}
        for key, value in (("resource", resource), ("limit", limit), ("max_burst", max_burst)):
            if value is not None:
                tc[key] = value
        self._call("UpdateTcParams", self._msg("bess_msg", "UpdateTcParamsRequest", {"class": tc}))

    def attach_task(
        self,
        module_name: str,
        parent: str = "",
        wid: int = -1,
        module_taskid: int = 0,
        priority: int | None = None,
        share: int | None = None,
    ) -> None:
        """Moves a module's task under class `parent` or onto worker `wid`."""
        tc: dict[str, Any] = {
            "leaf_module_name": module_name,
            "leaf_module_taskid": module_taskid,
            "parent": parent,
            "wid": wid,
        }
        if priority is not None:
            tc["priority"] = priority
        if share is not None:
            tc["share"] = share
        self._call("UpdateTcParent", self._msg("bess_msg", "UpdateTcParentRequest", {"class": tc}))

    def list_tcs(self, wid: int = -1):
        """Traffic classes (all workers when wid is -1)."""
        req = self._msg("bess_msg", "ListTcsRequest", {"wid": wid})
        return list(self._call("ListTcs", req).classes_status)

    def get_tc_stats(self, name: str):
        """Counters of one traffic class."""
        return self._call("GetTcStats", self._msg("bess_msg", "GetTcStatsRequest", {"name": name}))

    def reset_tcs(self) -> None:
        """Removes every traffic class that has no task under it."""
        self._call("ResetTcs", self._empty())

    def check_scheduling_constraints(self):
        """Modules that several workers could run at once, and other violations."""
        return self._call("CheckSchedulingConstraints", self._empty())

    # --- ports and drivers ---------------------------------------------------------------

    def list_drivers(self) -> list[str]:
        """Names of the port drivers."""
        return list(self._call("ListDrivers", self._empty()).driver_names)

    def get_driver_info(self, name: str):
        """Help text and commands of a port driver."""
        req = self._msg("bess_msg", "GetDriverInfoRequest", {"driver_name": name})
        return self._call("GetDriverInfo", req)

    def list_ports(self):
        """The ports."""
        return list(self._call("ListPorts", self._empty()).ports)

    def create_port(
        self,
        driver: str,
        name: str = "",
        arg: dict[str, Any] | None = None,
        num_inc_q: int = 0,
        num_out_q: int = 0,
        size_inc_q: int = 0,
        size_out_q: int = 0,
    ):
        """Creates a port of `driver` with a `<driver>Arg` built from `arg`; returns the
        response (`name`, `mac_addr`)."""
        req = self._msg(
            "bess_msg",
            "CreatePortRequest",
            {
                "name": name,
                "driver": driver,
                "num_inc_q": num_inc_q,
                "num_out_q": num_out_q,
                "size_inc_q": size_inc_q,
                "size_out_q": size_out_q,
            },
        )
        req.arg.CopyFrom(self.pack(f"{driver}Arg", arg))
        return self._call("CreatePort", req)

    def get_link_status(self, name: str):
        """Speed, duplex and whether the port's link is up."""
        req = self._msg("bess_msg", "GetLinkStatusRequest", {"name": name})
        return self._call("GetLinkStatus", req)

    def reset_ports(self) -> None:
        """Destroys every port (refused while modules use one)."""
        self._call("ResetPorts", self._empty())

    def destroy_port(self, name: str) -> None:
        """Destroys a port."""
        self._call("DestroyPort", self._msg("bess_msg", "DestroyPortRequest", {"name": name}))

    def get_port_stats(self, name: str):
        """Packet, byte and drop counters of a port."""
        return self._call(
            "GetPortStats", self._msg("bess_msg", "GetPortStatsRequest", {"name": name})
        )

    # --- gate hooks ----------------------------------------------------------------------

    def list_gatehook_classes(self) -> list[str]:
        """Names of the gate hook classes."""
        return list(self._call("ListGateHookClass", self._empty()).names)

    def list_gatehooks(self):
        """Installed gate hooks."""
        return list(self._call("ListGateHooks", self._empty()).hooks)

    def configure_gatehook(
        self,
        class_name: str,
        module: str,
        enable: bool,
        direction: str = "out",
        gate: int = -1,
        arg_type: str = "",
        arg: dict[str, Any] | None = None,
        hook_name: str = "",
    ) -> str:
        """Installs (enable) or removes a gate hook; returns the hook's name."""
        if direction not in ("in", "out"):
            raise BESS.Error(22, f"direction must be 'in' or 'out', not {direction!r}")
        req = self._pb["bess_msg"].ConfigureGateHookRequest(enable=enable)
        req.hook.class_name = class_name
        req.hook.hook_name = hook_name
        req.hook.module_name = module
        if direction == "in":
            req.hook.igate = gate
        else:
            req.hook.ogate = gate
        if arg_type:
            a = any_pb2.Any()
            a.Pack(self._msg("bess_msg", arg_type, arg))
            req.hook.arg.CopyFrom(a)
        return self._call("ConfigureGateHook", req).name

    def track_module(
        self, m: str, enable: bool, bits: bool = False, direction: str = "out", gate: int = -1
    ) -> None:
        """Turns byte counting on or off for a module's gates, or every module's when `m` is
        empty (pybess's track_module)."""
        names = [m] if m else [x.name for x in self.list_modules()]
        for name in names:
            try:
                self.configure_gatehook(
                    "track", name, enable, direction, gate, "TrackArg", {"bits": bits}
                )
            except BESS.Error as exc:
                # With every module, those without connected gates have nothing to track.
                if m or exc.code != 2:
                    raise

    def tcpdump(
        self,
        enable: bool,
        m: str,
        direction: str = "out",
        gate: int = 0,
        fifo: str = "",
        defer: bool = False,
    ) -> None:
        """Starts or stops copying a gate's packets to a FIFO in pcap format."""
        arg = {"fifo": fifo, "defer": defer} if enable else None
        self.configure_gatehook(
            "tcpdump", m, enable, direction, gate, "TcpdumpArg" if enable else "", arg
        )

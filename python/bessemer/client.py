"""A client for BESS's gRPC control protocol, as spoken by `bessemerd` (and by BESS).

Method names follow pybess's `BESS` class: `create_module`, `connect_modules`,
`run_module_command`, `add_worker`, `resume_all`, ... Arguments are plain dicts with the
field names of BESS's `<Class>Arg` messages. A failed request raises `BESS.Error` with the
daemon's errno code and message.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, json_format

from . import pb

DEFAULT_PORT = 10514


class BESS:
    """A connection to one daemon."""

    class Error(Exception):
        """The daemon refused a request: `code` is an errno, `errmsg` says why."""

        def __init__(self, code: int, errmsg: str):
            super().__init__(f"{errmsg} (errno {code})")
            self.code = code
            self.errmsg = errmsg

    def __init__(self, host: str = "localhost", port: int = DEFAULT_PORT, timeout: float = 10.0):
        self._pb = pb.load()
        self.timeout = timeout
        self.channel = grpc.insecure_channel(f"{host}:{port}")
        self.stub = self._pb["service_grpc"].BESSControlStub(self.channel)

    def close(self) -> None:
        """Closes the channel."""
        self.channel.close()

    def _msg(self, module: str, name: str, fields: dict[str, Any] | None = None):
        cls = getattr(self._pb[module], name)
        return json_format.ParseDict(fields or {}, cls(), ignore_unknown_fields=False)

    def _call(self, rpc: str, request):
        try:
            resp = getattr(self.stub, rpc)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise BESS.Error(-1, f"{rpc}: {exc.code().name}: {exc.details()}") from None
        if resp.HasField("error") and resp.error.code != 0:
            raise BESS.Error(resp.error.code, resp.error.errmsg)
        return resp

    def _empty(self):
        return self._pb["bess_msg"].EmptyRequest()

    def pack(self, type_name: str, fields: dict[str, Any] | None) -> any_pb2.Any:
        """Packs `fields` as a `bess.pb.<type_name>` message in an Any.

        An unknown type with no fields packs as an empty Any, so the daemon names the
        problem (e.g. an unknown module class); with fields it is refused here.
        """
        a = any_pb2.Any()
        if not hasattr(self._pb["module_msg"], type_name):
            if fields:
                raise BESS.Error(22, f"unknown argument message type 'bess.pb.{type_name}'")
            return a
        try:
            a.Pack(self._msg("module_msg", type_name, fields))
        except json_format.ParseError as exc:
            raise BESS.Error(22, f"{type_name}: {exc}") from None
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
        """Runs a module command; returns the response `data` as a dict (or {})."""
        req = self._pb["bess_msg"].CommandRequest(name=name, cmd=cmd)
        req.arg.CopyFrom(self.pack(arg_type, arg))
        resp = self._call("ModuleCommand", req)
        if not resp.HasField("data") or not resp.data.type_url:
            return {}
        type_name = resp.data.type_url.rsplit(".", 1)[-1]
        for module in ("module_msg", "bess_msg", "port_msg"):
            cls = getattr(self._pb[module], type_name, None)
            if cls is not None:
                msg = cls()
                resp.data.Unpack(msg)
                return json_format.MessageToDict(msg, preserving_proto_field_name=True)
        return {}

    def get_mclass_info(self, mclass: str):
        """Help, command names and command argument types of a module class."""
        req = self._msg("bess_msg", "GetMclassInfoRequest", {"name": mclass})
        return self._call("GetMclassInfo", req)

"""A bessctl-like `.bess` runner on the pybess shim, for the compatibility tests.

It runs a script the way bessctl's `run file` does (NetSys/bess `bessctl/commands.py` and
`pybess/module.py`): every module class and port driver the daemon lists is a callable,
`bess` is pybess's BESS object, module commands are methods built from GetMclassInfo,
module and port objects given as arguments become their names, workers are paused while the
script runs and `bess.resume_all()` (which checks the scheduling constraints first) runs at
the end. Only the syntax translation (`a -> b`, `name::Class()`, `$VAR!'x'`) is borrowed from
`bessemer.sugar`; everything the script sends goes through the shim.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from bessemer.sugar import translate

from .pybess_shim import BESS


class ConfError(Exception):
    """A script asked for something missing (bessctl's ConfError)."""


class Module:
    """pybess's Module: created in the daemon on construction."""

    bess: BESS  # set on each generated class

    def __init__(self, **kwargs):
        name = kwargs.pop("name", None)
        self.mclass = type(self).__name__
        ret = self.bess.create_module(self.mclass, name, _names(kwargs))
        self.name = ret.name
        info = self.bess.get_mclass_info(self.mclass)
        assert len(info.cmds) == len(info.cmd_args)
        for cmd, arg_type in zip(info.cmds, info.cmd_args, strict=True):
            setattr(self, cmd, self._command(cmd, arg_type))
        self.ogate: int | None = None
        self.igate: int | None = None

    def _command(self, cmd: str, arg_type: str):
        def run(**kwargs):
            return self.bess.run_module_command(self.name, cmd, arg_type, kwargs)

        return run

    def __str__(self) -> str:
        return f"{self.name}::{self.mclass}"

    def __mul__(self, ogate: int) -> Module:
        assert isinstance(ogate, int) and self.ogate is None
        ret = copy.copy(self)
        ret.ogate = ogate
        return ret

    def __rmul__(self, igate: int) -> Module:
        assert isinstance(igate, int) and self.igate is None
        ret = copy.copy(self)
        ret.igate = igate
        return ret

    # bessctl's sugar turns `a -> b` into `a + b`; Bessemer's into `a >> b`.
    def __add__(self, next_mod: Module) -> Module:
        return self.connect(next_mod, self.ogate or 0, next_mod.igate or 0)

    __rshift__ = __add__

    def connect(self, next_mod: Module, ogate: int = 0, igate: int = 0) -> Module:
        self.bess.connect_modules(self.name, next_mod.name, ogate, igate)
        return next_mod

    def attach_task(self, parent="", wid=-1, module_taskid=0, priority=None, share=None):
        return self.bess.attach_task(self.name, parent, wid, module_taskid, priority, share)


class Port:
    """pybess's Port: created in the daemon on construction."""

    bess: BESS

    def __init__(self, **kwargs):
        name = kwargs.pop("name", None)
        self.driver = type(self).__name__
        ret = self.bess.create_port(self.driver, name, _names(kwargs))
        self.name, self.mac_addr = ret.name, ret.mac_addr

    def get_port_stats(self):
        return self.bess.get_port_stats(self.name)


def _names(kwargs: dict[str, Any]) -> dict[str, Any]:
    # bessctl's _choose_arg: a Module or Port argument is sent as its name.
    return {k: v.name if isinstance(v, (Module, Port)) else v for k, v in kwargs.items()}


def run_file(path: str | os.PathLike, bess: BESS, env: dict[str, str] | None = None) -> dict:
    """Runs a `.bess` script as bessctl's `run file` does; returns its globals."""
    path = str(path)
    environ = {**os.environ, **(env or {})}

    def bess_env(key, default=None):
        if key in environ:
            return environ[key]
        if default is None:
            raise ConfError(f"Environment variable {key!r} is required")
        return default

    scope: dict[str, Any] = {"bess": bess, "ConfError": ConfError, "__bess_env__": bess_env}
    scope["__file__"] = path
    for name in bess.list_mclasses().names:
        scope[name] = type(str(name), (Module,), {"bess": bess})
    for name in bess.list_drivers().driver_names:
        scope[name] = type(str(name), (Port,), {"bess": bess})
    code = compile(translate(Path(path).read_text(), path), path, "exec")
    bess.pause_all()
    try:
        exec(code, scope)
    finally:
        bess.resume_all()
    return scope

"""Running `.bess` scripts: module objects with BESS's call shapes over a `BESS` client.

In a script, every module class is a callable (`Source(pkt_size=60)`), modules connect with
`a -> b` / `a:1 -> 0:b`, module commands are methods (`rw.add(templates=[...])`), and
`bess` is the client (`bess.add_worker(0, 0)`, `bess.resume_all()`). Errors are reported
at the script's own file and line.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path
from typing import Any

from . import multicore
from .client import BESS, split_queue_args
from .progress import Progress
from .sugar import SugarError, translate


class ScriptError(Exception):
    """A script failed; the message starts with `file:line:`."""


class Module:
    """A module created in the daemon."""

    def __init__(self, bess: BESS, mclass: str, name: str, commands: dict[str, str]):
        self.bess = bess
        self.mclass = mclass
        self.name = name
        self._commands = commands

    def __repr__(self) -> str:
        return f"<{self.mclass} {self.name}>"

    def __mul__(self, ogate: int) -> Gate:
        return Gate(self, ogate=ogate)

    def __rmul__(self, igate: int) -> Gate:
        return Gate(self, igate=igate)

    def __rshift__(self, other: Any) -> Module:
        return Gate(self, ogate=0) >> other

    def connect(self, next_mod: Module, ogate: int = 0, igate: int = 0) -> Module:
        """Connects output gate `ogate` of this module to input gate `igate` of `next_mod`."""
        self.bess.connect_modules(self.name, next_mod.name, ogate, igate)
        return next_mod

    def attach_task(
        self,
        parent: str = "",
        wid: int = -1,
        module_taskid: int = 0,
        priority: int | None = None,
        share: int | None = None,
    ) -> None:
        """Moves this module's task under traffic class `parent` or onto worker `wid`."""
        self.bess.attach_task(self.name, parent, wid, module_taskid, priority, share)

    def __getattr__(self, cmd: str):
        if cmd.startswith("_") or cmd not in self._commands:
            known = ", ".join(sorted(self._commands)) or "none"
            raise AttributeError(
                f"{self.mclass} '{self.name}' has no command '{cmd}' (commands: {known})"
            )
        arg_type = self._commands[cmd]

        def command(**arg):
            return self.bess.run_module_command(self.name, cmd, arg_type, arg)

        return command


class Gate:
    """One side of a connection: a module with an output or input gate number."""

    def __init__(self, module: Module, ogate: int | None = None, igate: int | None = None):
        if not isinstance(module, Module):
            raise TypeError(f"gates belong to modules, not {module!r}")
        self.module, self.ogate, self.igate = module, ogate, igate

    def __rmul__(self, igate: int) -> Gate:
        return Gate(self.module, self.ogate, igate)

    def __mul__(self, ogate: int) -> Gate:
        # `0:m::Bypass():1` / `1:m:1`: the input gate came first, now the output gate.
        return Gate(self.module, ogate, self.igate)

    def __rshift__(self, other: Any) -> Module | Gate:
        dst = other if isinstance(other, Gate) else Gate(other, igate=0)
        self.module.bess.connect_modules(
            self.module.name, dst.module.name, self.ogate or 0, dst.igate or 0
        )
        # A chain goes on from the output gate the destination named (`-> 1:m:1 -> x`).
        return dst.module if dst.ogate is None else Gate(dst.module, ogate=dst.ogate)


def _factory(bess: BESS, mclass: str):
    info = bess.get_mclass_info(mclass)
    commands = dict(zip(info.cmds, info.cmd_args, strict=False))

    def create(name: str = "", **arg) -> Module:
        created = bess.create_module(mclass, name, arg)
        return Module(bess, mclass, created, commands)

    create.__name__ = mclass
    create.__doc__ = info.help
    return create


class Port:
    """A port created in the daemon (`p = PMDPort(...)`; `PortInc(port=p.name)`)."""

    def __init__(self, bess: BESS, driver: str, name: str, mac_addr: str):
        self.bess, self.driver, self.name, self.mac_addr = bess, driver, name, mac_addr

    def __repr__(self) -> str:
        return f"<{self.driver} {self.name}>"

    def get_port_stats(self):
        """The port's counters."""
        return self.bess.get_port_stats(self.name)


def _port_factory(bess: BESS, driver: str):
    def create(name: str = "", **arg) -> Port:
        r = bess.create_port(driver, name, *split_queue_args(arg))
        return Port(bess, driver, r.name, r.mac_addr)

    create.__name__ = driver
    return create


def _duplicate_in(bess: BESS, scope: dict[str, Any]):
    """The script's `duplicate(template, workers=[...], port=p)` (see `multicore.duplicate`):
    afterwards each template module's name is bound to the group of its copies, so a
    command on it runs on every copy."""

    def duplicate(template, workers, port=None, out_port=None, name: str = "dup"):
        factories = {k: scope[k] for k in bess.list_mclasses()}
        dup = multicore.duplicate(
            bess, template, workers, port, out_port, name, factories=factories, scope=scope
        )
        for key, group in dup.groups().items():
            if key.isidentifier():
                scope[key] = group
        return dup

    return duplicate


def _env_lookup(env: dict[str, str]):
    def lookup(key: str, *default):
        if key in env:
            return env[key]
        if default:
            return default[0]
        raise ScriptError(f"environment variable '{key}' is not set and has no default")

    return lookup


def run_script(path: str | os.PathLike, bess: BESS, env: dict[str, str] | None = None) -> dict:
    """Runs a `.bess` file against `bess`; returns the script's variables."""
    path = str(path)
    source = Path(path).read_text()
    try:
        code = compile(translate(source, path), path, "exec")
    except SugarError as exc:
        raise ScriptError(f"{path}:{exc.lineno}: {exc.msg}") from None
    except SyntaxError as exc:
        raise ScriptError(f"{path}:{exc.lineno}: {exc.msg}") from None
    scope: dict[str, Any] = {
        "__file__": path,
        "bess": bess,
        "__bess_env__": _env_lookup({**os.environ, **(env or {})}),
    }
    for mclass in bess.list_mclasses():
        scope[mclass] = _factory(bess, mclass)
    for driver in bess.list_drivers():
        scope[driver] = _port_factory(bess, driver)
    scope["duplicate"] = _duplicate_in(bess, scope)
    # As bessctl does: workers pause while the script changes the pipeline, and everything
    # runs once it is done (a worker 0 is started if the script made none).
    progress = Progress(Path(path).name, "requests")
    outer = bess.on_request
    bess.on_request = progress.update
    bess.pause_all()
    try:
        exec(code, scope)
        bess.resume_all()
    except Exception as exc:
        progress.finish()
        line = next(
            (
                f.lineno
                for f in reversed(traceback.extract_tb(exc.__traceback__))
                if f.filename == path
            ),
            0,
        )
        msg = exc.errmsg if isinstance(exc, BESS.Error) else str(exc)
        # A failed script leaves running what it built so far, not paused workers.
        with contextlib.suppress(BESS.Error):
            bess.resume_all()
        raise ScriptError(f"{path}:{line}: {type(exc).__name__}: {msg}") from None
    finally:
        bess.on_request = outer
    progress.finish()
    return scope

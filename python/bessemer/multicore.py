"""Duplicating a pipeline over workers (BESS's multi-core placement, seed 000 §5.5.6).

`duplicate` builds one copy of a template pipeline per worker. With a multi-queue `port`,
copy i runs `QueueInc(port, qid=i) -> template -> QueueOut(port, qid=i)` on worker i: the
port's flow hash (RSS; AF_PACKET's fanout hash on veth) decides which copy sees a flow, and
each flow stays on one queue, one worker and one copy, so its order is kept. Without a
port the template brings its own task modules (`Source() -> ... -> Sink()`), and every task
of copy i is placed on worker i.

Copies are named `<name>@w<wid>`: `ttl::UpdateTTL()` in the template becomes `ttl@w0`,
`ttl@w1`, ...; a module the template does not name becomes `<dup>.<k>@w<wid>`. Every
module a template creates is per-worker (its tables, counters and state belong to its
copy); a command on the template name (`ttl.cmd(...)` in a script, `bessemer command module
ttl ...` on the CLI) runs on every copy. A module that already exists and that the template
only references (a variable of the script) is shared by every copy: `check constraints`
then reports it if its class does not allow several workers.

The core of it lives here, in the script layer, because it is a composition of existing
operations (create, connect, attach_task) that the daemon already makes atomic: each copy
is created and connected in one Transaction, and its tasks are attached only once it is
complete, so no packet reaches a half-built copy.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import Error as _Error

if TYPE_CHECKING:
    from .client import BESS

SUFFIX = "@w"


def copy_name(name: str, wid: int) -> str:
    """The name of worker `wid`'s copy of template module `name`."""
    return f"{name}{SUFFIX}{wid}"


def copies_of(bess: BESS, name: str) -> list[str]:
    """Names of the existing copies of template module `name` (`name@w0`, ...), by worker."""
    prefix = name + SUFFIX
    found = [m.name for m in bess.list_modules() if m.name.startswith(prefix)]
    wids = sorted(int(n[len(prefix) :]) for n in found if n[len(prefix) :].isdigit())
    return [copy_name(name, w) for w in wids]


class ModuleGroup:
    """Every copy of one template module: a command runs on each copy, in worker order, and
    returns the list of their results."""

    def __init__(self, name: str, modules: list):
        self.name = name
        self.modules = modules

    def __repr__(self) -> str:
        return f"<copies of {self.name}: {', '.join(m.name for m in self.modules)}>"

    def __iter__(self):
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def __getitem__(self, i: int):
        return self.modules[i]

    def __getattr__(self, cmd: str):
        if cmd.startswith("_"):
            raise AttributeError(cmd)
        each = [getattr(m, cmd) for m in self.modules]

        def command(**arg):
            return [c(**arg) for c in each]

        return command


class Duplicate:
    """What `duplicate` built: `copies[i]` maps template names to worker i's modules;
    `dup.<template name>` is the ModuleGroup of that module's copies."""

    def __init__(self, name: str, workers: list[int]):
        self.name = name
        self.workers = workers
        self.copies: list[dict[str, Any]] = []

    def group(self, name: str) -> ModuleGroup:
        """Every copy of template module `name`."""
        if not self.copies or name not in self.copies[0]:
            known = ", ".join(sorted(self.copies[0])) if self.copies else "none"
            raise KeyError(f"duplicate '{self.name}' has no module '{name}' (modules: {known})")
        return ModuleGroup(name, [c[name] for c in self.copies])

    def groups(self) -> dict[str, ModuleGroup]:
        """Every template module's copies, by template name."""
        return {n: self.group(n) for n in (self.copies[0] if self.copies else {})}

    def __getattr__(self, name: str) -> ModuleGroup:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.group(name)
        except KeyError as exc:
            raise AttributeError(str(exc)) from None


class MissingWorkers(_Error):
    """Some of the workers asked for do not exist (`missing`); the message says how to add
    them from Python, a front end may say it its own way."""

    def __init__(self, missing: list[int]):
        super().__init__(
            22,
            f"duplicate: worker(s) {missing} do not exist; add them first "
            f"(bess.add_worker(WID, CORE))",
        )
        self.missing = missing


class TooFewQueues(_Error):
    """`port` has `have` queues in direction `what` ("incoming" or "outgoing"), fewer than
    the `need` workers; the message says how to fix it from Python."""

    def __init__(self, port: str, what: str, have: int, need: int):
        super().__init__(
            22,
            f"duplicate: port '{port}' has {have} {what} queue(s), one per worker is needed "
            f"({need}); create it with num_inc_q/num_out_q={need}",
        )
        self.port, self.what, self.have, self.need = port, what, have, need


def _queues(bess: BESS, port: str) -> tuple[int, int]:
    for p in bess.list_ports():
        if p.name == port:
            return p.num_inc_q, p.num_out_q
    raise _Error(2, f"duplicate: no port named '{port}'")


def duplicate(
    bess: BESS,
    template: str | Callable,
    workers: list[int],
    port: str | Any = None,
    out_port: str | Any = None,
    name: str = "dup",
    factories: dict[str, Callable] | None = None,
    scope: dict[str, Any] | None = None,
) -> Duplicate:
    """Builds one copy of `template` per worker in `workers` (each must exist).

    `template` is `.bess` text (`"ttl::UpdateTTL() -> MACSwap()"`; its last expression is
    the copy's exit) or a function `f(entry)` that gets the copy's QueueInc (or None without
    a port) and returns the copy's exit module. With `port`, worker `workers[i]` owns
    incoming and outgoing queue i of `port` (`out_port`: send to that port's queue i
    instead); the port needs at least `len(workers)` queues each way. `factories` maps
    class names to module factories (the script's); `scope` holds the script's variables,
    which a text template may reference (shared modules)."""
    from .script import Module, _factory
    from .sugar import translate

    workers = [int(w) for w in workers]
    if not workers or len(set(workers)) != len(workers):
        raise _Error(22, f"duplicate: workers must be distinct and non-empty, not {workers}")
    have = {w.wid for w in bess.list_workers()}
    missing = [w for w in workers if w not in have]
    if missing:
        raise MissingWorkers(missing)
    port = getattr(port, "name", port)
    out_port = getattr(out_port, "name", out_port) or port
    if port:
        nin, _ = _queues(bess, port)
        _, nout = _queues(bess, out_port)
        for what, p, n in (("incoming", port, nin), ("outgoing", out_port, nout)):
            if n < len(workers):
                raise TooFewQueues(p, what, n, len(workers))
    if factories is None:
        factories = {m: _factory(bess, m) for m in bess.list_mclasses()}
    code = None
    if isinstance(template, str):
        tree = ast.parse(translate(template, f"<duplicate {name}>"))
        if not tree.body or not isinstance(tree.body[-1], ast.Expr):
            raise _Error(22, "duplicate: the template must end with a module expression")
        # The last expression is the copy's exit: bind it so it can be found after exec.
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name("__dup_exit__", ast.Store())], value=last.value), last
        )
        ast.fix_missing_locations(tree)
        code = compile(tree, f"<duplicate {name}>", "exec")

    dup_name = name
    dup = Duplicate(name, workers)
    for i, wid in enumerate(workers):
        made: dict[str, Module] = {}
        counter = [0]

        def renamed(mclass: str, create=None, wid=wid, made=made, counter=counter):
            create = create or factories[mclass]

            def make(name: str = "", **arg):
                if name:
                    key = name
                else:
                    key = f"{dup_name}.{counter[0]}"
                    counter[0] += 1
                if key in made:
                    raise _Error(17, f"duplicate: template names '{key}' twice")
                m = create(copy_name(key, wid), **arg)
                made[key] = m
                return m

            return make

        local: dict[str, Any] = dict(scope or {})
        local["bess"] = bess
        local.setdefault("__bess_env__", lambda key, *d: d[0] if d else "")
        for mclass, create in factories.items():
            local[mclass] = renamed(mclass, create)
        with bess.transaction():
            entry = None
            if port:
                entry = local["QueueInc"](f"{dup_name}.in", port=port, qid=i)
            if code is not None:
                exec(code, local)
                exit_ = local.get("__dup_exit__")
            else:
                exit_ = template(entry) if port else template(None)
            first = next((m for m in made.values() if m is not entry), None)
            if port:
                if first is None:
                    raise _Error(22, "duplicate: the template creates no module")
                entry.connect(first)
                if not isinstance(exit_, Module):
                    raise _Error(22, "duplicate: the template's last expression must be a module")
                out = local["QueueOut"](f"{dup_name}.out", port=out_port, qid=i)
                exit_.connect(out)
        dup.copies.append(made)
        # Tasks are attached once the copy is complete (they are orphans until then).
        for m in made.values():
            try:
                bess.attach_task(m.name, wid=wid)
            except _Error as exc:
                if exc.code != 2:  # ENOENT: the module has no task
                    raise
    return dup

"""`bessemer`: the command line, with bessctl's vocabulary.

    bessemer daemon start|stop|reset|connect     bessemer run FILE [VAR=VALUE ...]
    bessemer add worker|module|connection|port   bessemer delete worker|module|connection|port
    bessemer command module NAME CMD ARGTYPE [ARG]
    bessemer show status|version|worker|tc|pipeline|port|module|mclass|driver|gatehook
    bessemer check constraints                   bessemer monitor pipeline|port|tc
    bessemer tcpdump MODULE [in|out] [GATE] [tcpdump options]
    bessemer shell      (or no command at all: an interactive shell)
    bessemer --version  (this client's version, and the daemon's if one answers)

`--unix PATH` talks to a daemon listening on a unix-domain socket (`bessemerd --unix PATH`).

Every command has `--help`. Arguments written as Python literals (`"{'pkt_size': 60}"`) are
module or command arguments, as in bessctl.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import __version__, multicore, render
from .client import BESS, DEFAULT_PORT, split_queue_args
from .progress import Progress
from .script import ScriptError, run_script


class CliError(Exception):
    """A command failed for a reason the user can fix; printed without a traceback."""


class Session:
    """The daemon a command talks to; connects lazily, so `daemon start` works without one."""

    def __init__(self, host: str, port: int, unix: str | None = None, **security):
        self.host, self.port, self.unix = host, port, unix
        if not unix and host.startswith("unix:"):
            self.unix = host.removeprefix("unix:")
        # TLS and token options for BESS(): tls_ca, cert, key, token.
        self.security = security
        self._bess: BESS | None = None

    @property
    def address(self) -> str:
        """Where the daemon is, as the user would write it: HOST:PORT or unix:PATH."""
        return f"unix:{self.unix}" if self.unix else f"{self.host}:{self.port}"

    def connect(self, timeout: float = 10) -> BESS:
        """A new client of the daemon that answered GetVersion (CliError if none did)."""
        bess = BESS(self.host, self.port, timeout=timeout, unix=self.unix, **self.security)
        try:
            bess.get_version()
        except BESS.Error as exc:
            bess.close()
            why = "nothing answers there" if "UNAVAILABLE" in exc.errmsg else exc.errmsg
            raise CliError(
                f"cannot talk to the daemon at {self.address}: {why}\n"
                "  (start one with 'bessemer daemon start')"
            ) from None
        return bess

    @property
    def bess(self) -> BESS:
        if self._bess is None:
            self._bess = self.connect()
        return self._bess

    def close(self) -> None:
        if self._bess is not None:
            self._bess.close()
            self._bess = None

    def reconnect(self, host: str, port: int, unix: str | None = None) -> None:
        self.close()
        self.host, self.port, self.unix = host, port, unix


def _literal(text: str | None, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise CliError(f"{what}: {text!r} is not a Python literal ({exc})") from None
    if not isinstance(value, dict):
        raise CliError(f"{what}: expected a dict such as \"{{'size': 1024}}\", got {text!r}")
    return value


# --- daemon ------------------------------------------------------------------------------


def _find_daemon() -> str:
    """$BESSEMERD, else the source tree's build when this package runs from the tree, else
    `bessemerd` on PATH (an installed package has no tree around it)."""
    env = os.environ.get("BESSEMERD")
    if env:
        return env
    root = Path(__file__).resolve().parents[2]
    if (root / "Cargo.toml").exists():
        for build in ("release", "debug"):
            path = root / "target" / build / "bessemerd"
            if path.exists():
                return str(path)
    found = shutil.which("bessemerd")
    if found:
        return found
    raise CliError(
        "bessemerd not found: put it on PATH or set $BESSEMERD to its path "
        "(in the source tree, 'make build' builds it)"
    )


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def _listening(s: Session) -> bool:
    """Whether something accepts connections where the session's daemon would be."""
    if not s.unix:
        return _port_open(s.host, s.port)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(0.5)
        try:
            c.connect(s.unix)
        except OSError:
            return False
    return True


START_TIMEOUT = 30


def daemon_start(s: Session, args) -> None:
    if _listening(s):
        raise CliError(f"a daemon already listens on {s.address} ('bessemer daemon stop')")
    listen = ["--unix", s.unix] if s.unix else ["--port", str(s.port)]
    cmd = [_find_daemon(), *listen, *args.options]
    tag = f"unix-{Path(s.unix).name}" if s.unix else str(s.port)
    log = Path(tempfile.gettempdir()) / f"bessemerd-{tag}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise CliError(
                f"bessemerd exited with status {proc.returncode}:\n  " + "\n  ".join(tail)
            )
        try:
            version = s.bess.get_version()
            break
        except CliError:
            if time.monotonic() > deadline:
                proc.terminate()
                raise CliError(
                    f"bessemerd did not answer within {START_TIMEOUT} s; log: {log}"
                ) from None
            time.sleep(0.1)
    print(f"{version} started (pid {proc.pid}) on {s.address}; log: {log}")


def daemon_stop(s: Session, args) -> None:
    s.bess.kill()
    s.close()
    deadline = time.monotonic() + args.timeout
    while _listening(s):
        if time.monotonic() > deadline:
            raise CliError(f"the daemon on {s.address} did not stop within {args.timeout} s")
        time.sleep(0.1)
    print(f"daemon on {s.address} stopped")


def daemon_reset(s: Session, _args) -> None:
    s.bess.reset_all()
    print("reset: modules, ports, traffic classes and workers removed")


def daemon_connect(s: Session, args) -> None:
    if args.address.startswith("unix:"):
        s.reconnect(s.host, s.port, args.address.removeprefix("unix:"))
    else:
        host, _, port = args.address.rpartition(":")
        if not host:
            host, port = args.address, str(DEFAULT_PORT)
        try:
            s.reconnect(host, int(port))
        except ValueError:
            raise CliError(f"'{args.address}' is not HOST[:PORT] or unix:PATH") from None
    print(f"connected to {s.bess.get_version()} at {s.address}")


# --- run, add, delete, command -----------------------------------------------------------


def run_file(s: Session, args) -> None:
    env = {}
    for kv in args.vars:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise CliError(f"'{kv}' is not VAR=VALUE")
        env[key] = value
    try:
        run_script(args.file, s.bess, env)
    except (ScriptError, OSError) as exc:
        raise CliError(str(exc)) from None


def _pcap_packets(path: str) -> int | None:
    """Packets in a pcap or pcapng file (None if scapy cannot read it)."""
    try:
        from scapy.utils import RawPcapReader

        with RawPcapReader(path) as r:
            return sum(1 for _ in r)
    except Exception:  # noqa: BLE001 - any unreadable file: the daemon names the problem
        return None


def replay(s: Session, args) -> None:
    """Replays a pcap file into the pipeline through a PcapFilePort, with progress, and
    removes what it created when the file is done."""
    path = os.path.abspath(args.file)
    if not os.path.isfile(path):
        raise CliError(f"no such file: {args.file}")
    total = _pcap_packets(path)
    port = args.name or f"replay{os.getpid()}"
    made: list[str] = []
    with _changing(s):
        s.bess.create_port("PcapFilePort", port, {"rx_file": path, "timing": args.timing})
        try:
            inc = s.bess.create_module("PortInc", f"{port}_inc", {"port": port})
            made.append(inc)
            to, _, gate = (args.to or "").partition(":")
            if not to:
                to = s.bess.create_module("Sink", f"{port}_sink")
                made.append(to)
            s.bess.connect_modules(inc, to, 0, int(gate or 0))
        except BESS.Error:
            for m in reversed(made):
                s.bess.destroy_module(m)
            s.bess.destroy_port(port)
            raise
    progress = Progress(f"replay {os.path.basename(path)}", "packets", total)
    start = time.monotonic()
    last, still_since = -1, time.monotonic()
    try:
        while True:
            st = s.bess.get_port_stats(port)
            done = st.inc.packets
            # The rate over the daemon's timestamps (the client's clock only paces this loop).
            progress.update(done=done, at=st.timestamp)
            now = time.monotonic()
            if done != last:
                last, still_since = done, now
            if total is not None and done >= total:
                break
            # A file scapy cannot count ends when the port stops delivering.
            if now - still_since > args.idle:
                break
            if args.seconds and now - start > args.seconds:
                break
            time.sleep(0.05)
    finally:
        progress.finish()
        if not args.keep:
            with _changing(s):
                for m in reversed(made):
                    s.bess.destroy_module(m)
                s.bess.destroy_port(port)
    secs = time.monotonic() - start
    of = f"/{total:,}" if total is not None else ""
    print(f"replayed {last:,}{of} packets from {args.file} in {secs:.1f} s")


@contextlib.contextmanager
def _changing(s: Session):
    """As bessctl: workers pause while the pipeline changes and resume afterwards, which also
    places the new modules' tasks (they are orphans until then, as in BESS)."""
    s.bess.pause_all()
    try:
        yield
    finally:
        s.bess.resume_all()


def add_worker(s: Session, args) -> None:
    with _changing(s):
        s.bess.add_worker(args.wid, args.core, args.scheduler)


def add_module(s: Session, args) -> None:
    with _changing(s):
        name = s.bess.create_module(args.mclass, args.name, _literal(args.arg, "module argument"))
    print(name)


def splice(s: Session, args) -> None:
    """Inserts NAME between FROM:OGATE and what it feeds, in one transaction (no packet is
    dropped while the path is rewired)."""
    down = [o for o in s.bess.get_module_info(args.m1).ogates if o.ogate == args.ogate]
    if not down:
        raise CliError(f"output gate {args.ogate} of '{args.m1}' is not connected")
    with s.bess.transaction():
        if args.mclass:
            s.bess.create_module(args.mclass, args.name, _literal(args.arg, "module argument"))
        s.bess.disconnect_modules(args.m1, args.ogate)
        s.bess.connect_modules(args.m1, args.name, args.ogate, 0)
        s.bess.connect_modules(args.name, down[0].name, 0, down[0].igate)
    if args.mclass:
        # Places the new module's tasks, as `add module` does.
        s.bess.resume_all()
    print(f"{args.m1}:{args.ogate} -> {args.name} -> {down[0].igate}:{down[0].name}")


def unsplice(s: Session, args) -> None:
    """Removes NAME from its path, joining its one upstream gate to what its gate 0 feeds, in
    one transaction; destroys it unless --keep."""
    info = s.bess.get_module_info(args.name)
    ups = [(o.name, o.ogate) for ig in info.igates for o in ig.ogates]
    outs = [o for o in info.ogates if o.ogate == 0]
    if len(ups) != 1 or not outs:
        raise CliError(
            f"'{args.name}' must have exactly one upstream connection and output gate 0 "
            f"connected (has {len(ups)} upstream, gate 0 {'connected' if outs else 'free'})"
        )
    (m1, ogate), down = ups[0], outs[0]
    with s.bess.transaction():
        s.bess.disconnect_modules(m1, ogate)
        if args.keep:
            s.bess.disconnect_modules(args.name, 0)
        else:
            s.bess.destroy_module(args.name)
        s.bess.connect_modules(m1, down.name, ogate, down.igate)
    print(f"{m1}:{ogate} -> {down.igate}:{down.name}")


def add_connection(s: Session, args) -> None:
    with _changing(s):
        s.bess.connect_modules(args.m1, args.m2, args.ogate, args.igate)


def add_port(s: Session, args) -> None:
    arg = _literal(args.arg, "port argument")
    print(s.bess.create_port(args.driver, args.name, *split_queue_args(arg)).name)


def delete_worker(s: Session, args) -> None:
    s.bess.destroy_worker(args.wid)


def delete_module(s: Session, args) -> None:
    with _changing(s):
        s.bess.destroy_module(args.name)


def delete_connection(s: Session, args) -> None:
    with _changing(s):
        s.bess.disconnect_modules(args.name, args.ogate)


def delete_port(s: Session, args) -> None:
    s.bess.destroy_port(args.name)


def command_module(s: Session, args) -> None:
    arg = _literal(args.arg, "command argument")
    names = [args.name]
    if args.name not in {m.name for m in s.bess.list_modules()}:
        # A duplicated pipeline's template name: the command runs on every copy.
        names = multicore.copies_of(s.bess, args.name) or names
    for name in names:
        out = s.bess.run_module_command(name, args.cmd, args.arg_type, arg)
        if len(names) > 1:
            print(f"{name}:")
        print(render.message(out, arg))


def duplicate(s: Session, args) -> None:
    """One copy of TEMPLATE per worker (multicore.duplicate), as a script's duplicate()."""
    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        raise CliError(
            f"--workers: a comma-separated list of worker ids, not {args.workers!r}"
        ) from None
    with _changing(s):
        try:
            dup = multicore.duplicate(
                s.bess, args.template, workers, args.dup_port, args.out_port, args.name
            )
        except multicore.MissingWorkers as exc:
            wids = ", ".join(str(w) for w in exc.missing)
            raise CliError(
                f"duplicate: no worker {wids}; add each first with 'bessemer add worker WID CORE'"
            ) from None
        except multicore.TooFewQueues as exc:
            n = exc.need
            raise CliError(
                f"duplicate: port '{exc.port}' has {exc.have} {exc.what} queue(s), one per "
                f"worker is needed ({n}); create it with them, e.g. 'bessemer add port "
                f"DRIVER NAME \"{{..., 'num_inc_q': {n}, 'num_out_q': {n}}}\"'"
            ) from None
        except SyntaxError as exc:
            raise CliError(f"template: {exc.msg}") from None
        except BESS.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - the template is user code: say what failed
            raise CliError(f"template: {type(exc).__name__}: {exc}") from None
    for wid, copy in zip(dup.workers, dup.copies, strict=True):
        print(f"worker {wid}: {', '.join(m.name for m in copy.values())}")


# --- show, check -------------------------------------------------------------------------


def show_version(s: Session, _args) -> None:
    print(s.bess.get_version())


def print_versions(s: Session) -> None:
    """`--version`: this client's version, then the daemon's when one answers (without a
    daemon the client's version is still printed, and the exit status is 0)."""
    print(f"bessemer {__version__}")
    try:
        bess = s.connect(timeout=3)
    except CliError:
        print(f"daemon at {s.address}: none answers")
        return
    except Exception as exc:  # noqa: BLE001 - the client's version stands on its own
        print(f"daemon at {s.address}: not asked ({exc})")
        return
    try:
        print(f"daemon at {s.address}: {bess.get_version()}")
    except BESS.Error as exc:
        print(f"daemon at {s.address}: {exc.errmsg}")
    finally:
        bess.close()


def show_status(s: Session, _args) -> None:
    b = s.bess
    print(
        render.status(
            b.get_version(),
            b.list_workers(),
            b.list_modules(),
            b.list_ports(),
            b.list_tcs(),
            b.list_gatehooks(),
        )
    )


def show_worker(s: Session, args) -> None:
    workers = [w for w in s.bess.list_workers() if args.wid is None or w.wid == args.wid]
    if args.wid is not None and not workers:
        raise CliError(f"no worker {args.wid}")
    print(render.workers(workers))


def show_tc(s: Session, args) -> None:
    print(render.tcs(s.bess.list_tcs(-1 if args.wid is None else args.wid)))


def _pipeline(b: BESS) -> tuple[list, dict]:
    mods = b.list_modules()
    return mods, {m.name: b.get_module_info(m.name) for m in mods}


def show_pipeline(s: Session, args) -> None:
    mods, infos = _pipeline(s.bess)
    if args.dot:
        text = render.dot(mods, infos)
        if args.dot == "-":
            print(text, end="")
        else:
            Path(args.dot).write_text(text)
            print(f"wrote {args.dot} ({len(mods)} modules); render: dot -Tpng {args.dot} -o x.png")
        return
    print(render.pipeline(mods, infos))


def show_module(s: Session, args) -> None:
    names = args.names or [m.name for m in s.bess.list_modules()]
    print("\n".join(render.module(s.bess.get_module_info(n)) for n in names) or "no modules")


def offload(s: Session, args) -> None:
    resp = s.bess.offload(args.port_name, args.action)
    print(resp.plan, end="" if resp.plan.endswith("\n") else "\n")


def plan_nic(s: Session, args) -> None:
    flows: list[str] = []
    if args.flows:
        try:
            with open(args.flows, encoding="utf-8") as f:
                flows = f.read().splitlines()
        except OSError as exc:
            raise CliError(f"{args.flows}: {exc.strerror}") from None
    fmt = args.format
    if args.action == "show":
        fmt = "show-dot" if args.dot else "show"
    elif args.dot:
        fmt = "dot"
    opts = {
        k: v
        for k, v in (
            ("queues", args.queues),
            ("iface", args.iface),
            ("netns", args.netns),
            ("hp_queues", args.hp_queues),
            ("hp_every", args.hp_every),
            ("bw", args.bw),
            ("seed", args.seed),
            ("rss_off", args.rss_off),
            ("port", args.for_port),
        )
        if v
    }
    text = s.bess.plan_nic(args.nic, flows, args.generate or 0, args.policy, fmt, **opts)
    print(text, end="" if text.endswith("\n") else "\n")


def show_errors(s: Session, args) -> None:
    """Modules' drops by reason (ShowErrors) and ports' drops (GetPortStats), a port's
    under its own name; NAMES may be modules or ports."""
    b = s.bess
    ports = {p.name: p.driver for p in b.list_ports()}
    names = list(args.names)
    if names:
        modules = {m.name for m in b.list_modules()}
        unknown = [n for n in names if n not in ports and n not in modules]
        if unknown:
            raise CliError(f"no module or port named {', '.join(unknown)}")
        mod_names = [n for n in names if n in modules]
        port_names = [n for n in names if n in ports]
    else:
        mod_names, port_names = [], sorted(ports)
    resp = b.show_errors(mod_names, include_zero=args.all) if mod_names or not names else None
    port_drops = []
    for name in port_names:
        st = b.get_port_stats(name)
        for reason, count in (("rx_dropped", st.inc.dropped), ("tx_dropped", st.out.dropped)):
            if count or args.all:
                port_drops.append((name, ports[name], reason, count))
    print(render.errors(resp, args.sort, port_drops))


def show_runtime(s: Session, args) -> None:
    """Per module and worker: calls, packets, packets per call and sampled cycles per
    packet (ShowRuntime), as VPP's `show runtime`."""
    print(render.runtime(s.bess.show_runtime(list(args.names))))


def show_latency(s: Session, args) -> None:
    """A Measure's latency and jitter: labelled percentiles and a terminal histogram
    (ShowLatency)."""
    resp = s.bess.show_latency(args.module)
    mclass = next((m.mclass for m in s.bess.list_modules() if m.name == args.module), "?")
    print(render.latency(args.module, mclass, resp))


def clear_runtime(s: Session, _args) -> None:
    """Start `show runtime`'s counts afresh (VPP's `clear runtime`)."""
    s.bess.show_runtime(clear=True)


def trace_add(s: Session, args) -> None:
    """Trace the next N packets entering a module or port (TraceAdd), as VPP's `trace add`."""
    if not 1 <= args.count <= 500:
        raise CliError(f"N must be 1..500 packets, not {args.count}")
    resp = s.bess.trace_add(args.at, args.count)
    print(f"tracing the next {args.count} packets entering {', '.join(resp.modules)}")


def show_trace(s: Session, _args) -> None:
    """The packets traced, module by module (ShowTrace), as VPP's `show trace`."""
    resp = s.bess.show_trace()
    text = resp.text.rstrip("\n")
    if resp.armed and resp.remaining:
        text += f"\n({resp.remaining} more packet(s) to capture entering {', '.join(resp.points)})"
    print(text)


def clear_trace(s: Session, _args) -> None:
    """Remove the trace and its records (VPP's `clear trace`)."""
    s.bess.show_trace(clear=True)


def packet_bytes(text: str) -> bytes:
    """A packet given as hex (spaces and colons allowed, an optional 0x) or as a scapy
    expression such as "Ether()/IP(dst='10.0.0.2')/UDP()" (evaluated here, with scapy's
    names, as bessctl evaluates its Python arguments)."""
    t = text.strip()
    digits = re.sub(r"[\s:]", "", t[2:] if t.lower().startswith("0x") else t)
    if digits and re.fullmatch(r"[0-9a-fA-F]+", digits):
        if len(digits) % 2:
            raise CliError(f"bad hex: odd number of digits ({len(digits)}); each byte takes two")
        return bytes.fromhex(digits)
    if t.lower().startswith("0x"):
        bad = next((i, c) for i, c in enumerate(digits) if c not in string.hexdigits)
        raise CliError(f"bad hex: {bad[1]!r} at digit {bad[0]} is not a hex digit")
    try:
        import scapy.all as scapy  # slow to import: only when needed
    except ImportError as exc:
        raise CliError(
            f"{t!r} is not hex, and scapy is not installed to read it as a scapy expression"
        ) from exc
    names = {k: getattr(scapy, k) for k in dir(scapy) if not k.startswith("_")}
    try:
        pkt = eval(t, names)  # the user's own expression, run on their own machine
        return bytes(pkt)
    except Exception as exc:
        raise CliError(f"{t!r} is neither hex nor a scapy expression: {exc}") from exc


def trace_packet(s: Session, args) -> None:
    """Run one packet through the pipeline from MODULE without sending it (TracePacket),
    as OVS's `ofproto/trace`; print its trace."""
    resp = s.bess.trace_packet(args.module, packet_bytes(" ".join(args.packet)))
    print(resp.text.rstrip("\n"))


def show_mclass(s: Session, args) -> None:
    names = args.names or s.bess.list_mclasses()
    print("\n".join(s.bess.get_mclass_info(n).help for n in names))


def show_port(s: Session, args) -> None:
    ports = [p for p in s.bess.list_ports() if not args.names or p.name in args.names]
    missing = set(args.names) - {p.name for p in ports}
    if missing:
        raise CliError(f"no port named {', '.join(sorted(missing))}")
    print(render.ports(ports, {p.name: s.bess.get_port_stats(p.name) for p in ports}))
    try:
        details = s.bess.show_port_details([p.name for p in ports]).ports
    except BESS.Error:
        details = []  # BESS has no such RPC: its table is all there is
    lines = [f"  {d.name}: {d.details}" for d in details if d.details]
    if lines:
        print("details:")
        print("\n".join(lines))


def show_driver(s: Session, args) -> None:
    names = args.names or s.bess.list_drivers()
    if not names:
        print("no port drivers")
    for n in names:
        print(s.bess.get_driver_info(n).help.rstrip())


def show_gatehook(s: Session, _args) -> None:
    print(render.hooks(s.bess.list_gatehooks()))


def _workers_reaching(s: Session, module: str) -> list[int]:
    """Workers whose tasks reach `module`: walk upstream from it, collecting the workers of
    the task leaves found, and stop at a module with both input gates and a task of its own
    (a Queue: its own task, not the upstream ones, runs what follows it)."""
    task_wids: dict[str, set[int]] = {}
    for st in s.bess.list_tcs():
        c = getattr(st, "class")
        if c.policy == "leaf" and c.leaf_module_name:
            task_wids.setdefault(c.leaf_module_name, set()).add(c.wid)
    wids: set[int] = set(task_wids.get(module, ()))
    seen, todo = {module}, [module]
    while todo:
        info = s.bess.get_module_info(todo.pop())
        for ig in info.igates:
            for og in ig.ogates:
                up = og.name
                if up in seen:
                    continue
                seen.add(up)
                wids |= task_wids.get(up, set())
                buffer = up in task_wids and len(s.bess.get_module_info(up).igates) > 0
                if not buffer:
                    todo.append(up)
    return sorted(wids)


def check_constraints(s: Session, _args) -> None:
    r = s.bess.check_scheduling_constraints()
    if not r.violations and not r.modules:
        print("constraints: OK")
        return
    lines = [f"class {v.name}: constraint {v.constraint}" for v in r.violations]
    for m in r.modules:
        wids = ", ".join(str(w) for w in _workers_reaching(s, m.name)) or "?"
        lines.append(
            f"module {m.name} is run by workers {wids}, more than its class allows "
            "('show mclass' gives the limit); attach the tasks that reach it to fewer "
            "workers, or put a Queue in front of it"
        )
    raise CliError(
        "constraint violations" + (" (fatal)" if r.fatal else "") + ":\n  " + "\n  ".join(lines)
    )


# --- monitor ----------------------------------------------------------------------------


def _monitor(args, sample, draw) -> None:
    """Samples every `interval` s and redraws in place (a plain log when not a terminal).

    Rates divide each counter's change by the change of the timestamp the daemon put beside
    it, as bessctl does: the client's clock only paces the samples (a slow or busy client
    would otherwise show rates its pauses made up)."""
    tty = sys.stdout.isatty()
    prev = sample()
    end = time.monotonic() + args.seconds if args.seconds else None
    try:
        while end is None or time.monotonic() < end:
            time.sleep(args.interval)
            cur = sample()
            frame = draw(prev, cur)
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J")
            sys.stdout.write(time.strftime("%H:%M:%S") + "  (Ctrl-C to stop)\n" + frame + "\n")
            sys.stdout.flush()
            prev = cur
    except KeyboardInterrupt:
        print()


def monitor_pipeline(s: Session, args) -> None:
    b = s.bess
    # Gates count bytes only while a Track hook with `bits` is on them (BESS's `track`):
    # one of our own, on every connected output gate, for as long as the monitor runs.
    hook = "" if args.no_bits else f"monitor{os.getpid()}"
    if hook:
        try:
            b.configure_gatehook("track", "", True, "out", -1, "TrackArg", {"bits": True}, hook)
        except BESS.Error:
            hook = ""  # nothing connected yet, or a daemon that refuses: bits/s stays '-'

    def sample():
        return render.edge_counters(_pipeline(b)[1], hook)

    try:
        _monitor(args, sample, render.edge_rates)
    finally:
        if hook:
            with contextlib.suppress(BESS.Error):
                b.configure_gatehook("track", "", False, "out", -1, hook_name=hook)


def _stats(get, names: list[str]) -> dict:
    """{name: get(name)} for each name still there (one may go between listing and asking)."""
    out = {}
    for n in names:
        try:
            out[n] = get(n)
        except BESS.Error as exc:
            if exc.code != 2:  # ENOENT: gone meanwhile
                raise
    return out


def monitor_port(s: Session, args) -> None:
    b = s.bess

    def sample():
        return _stats(b.get_port_stats, [p.name for p in b.list_ports()])

    _monitor(args, sample, render.port_rates)


def monitor_tc(s: Session, args) -> None:
    b = s.bess

    def sample():
        return _stats(b.get_tc_stats, [getattr(c, "class").name for c in b.list_tcs()])

    _monitor(args, sample, render.tc_rates)


# --- tcpdump ----------------------------------------------------------------------------


def tcpdump(s: Session, args) -> None:
    exe = shutil.which("tcpdump")
    if exe is None:
        raise CliError("tcpdump is not installed; install it with 'apt-get install -y tcpdump'")
    b = s.bess
    b.get_module_info(args.module)  # names an unknown module before anything starts
    tmp = Path(tempfile.mkdtemp(prefix="bessemer-tcpdump-"))
    fifo = tmp / "pipe"
    os.mkfifo(fifo, 0o600)
    proc = subprocess.Popen([exe, "-r", str(fifo), *args.options])
    installed = False
    try:
        # tcpdump opens the FIFO for reading shortly after it starts; until then the daemon
        # cannot open the writing end (ENXIO), so retry for a while.
        deadline = time.monotonic() + 10
        while True:
            try:
                b.tcpdump(True, args.module, args.direction, args.gate, str(fifo))
                installed = True
                break
            except BESS.Error as exc:
                if exc.code != 6 or time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    finally:
        if installed:
            with contextlib.suppress(BESS.Error):
                b.tcpdump(False, args.module, args.direction, args.gate)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


# --- the parser ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bessemer",
        description="Drive a Bessemer (or BESS) daemon: bessctl's commands.",
        exit_on_error=False,
    )
    p.add_argument(
        "--version",
        action="store_true",
        help="print this client's version, and the daemon's if one answers",
    )
    p.add_argument("--host", default="localhost", help="daemon address (default localhost)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"daemon port ({DEFAULT_PORT})")
    p.add_argument(
        "--unix",
        metavar="PATH",
        help="talk to the daemon on this unix-domain socket (bessemerd --unix PATH) instead "
        "of HOST:PORT; --host unix:PATH does the same",
    )
    p.add_argument("--tls-ca", metavar="PEM", help="connect over TLS, trusting this CA")
    p.add_argument("--cert", metavar="PEM", help="client certificate (with --key)")
    p.add_argument("--key", metavar="PEM", help="client certificate's key")
    p.add_argument(
        "--token-file", metavar="FILE", help="send the bearer token in FILE's first line"
    )
    top = p.add_subparsers(dest="command", metavar="COMMAND")

    def group(name: str, help_text: str):
        g = top.add_parser(name, help=help_text, description=help_text, exit_on_error=False)
        return g.add_subparsers(dest="what", metavar="WHAT", required=True)

    def cmd(sub, name: str, func, help_text: str):
        c = sub.add_parser(name, help=help_text, description=help_text, exit_on_error=False)
        c.set_defaults(func=func)
        return c

    d = group("daemon", "start, stop, reset or connect to a daemon")
    c = cmd(d, "start", daemon_start, "start bessemerd in the background")
    c.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help="bessemerd options (e.g. --no-hugepages --buffers 65536)",
    )
    c = cmd(d, "stop", daemon_stop, "stop the daemon (KillBess)")
    c.add_argument("--timeout", type=float, default=30, help="seconds to wait for it (30)")
    cmd(d, "reset", daemon_reset, "remove every module, port, traffic class and worker")
    c = cmd(d, "connect", daemon_connect, "talk to the daemon at HOST[:PORT] from now on")
    c.add_argument("address", help="HOST[:PORT], or unix:PATH for a unix-domain socket")

    c = top.add_parser(
        "run", help="run a .bess script", description="run a .bess script", exit_on_error=False
    )
    c.set_defaults(func=run_file)
    c.add_argument("file", help="script to run")
    c.add_argument("vars", nargs="*", metavar="VAR=VALUE", help="values for $VAR in the script")

    a = group("add", "add a worker, module, connection or port")
    c = cmd(a, "worker", add_worker, "add worker WID pinned to CORE")
    c.add_argument("wid", type=int)
    c.add_argument("core", type=int)
    c.add_argument("scheduler", nargs="?", default="", help="scheduler type (default: BESS's)")
    c = cmd(a, "module", add_module, "create a module: CLASS NAME [ARG]")
    c.add_argument("mclass", metavar="CLASS")
    c.add_argument("name", help="instance name ('' for the class's default)")
    c.add_argument("arg", nargs="?", help="argument as a Python dict, e.g. \"{'pkt_size': 60}\"")
    c = cmd(a, "connection", add_connection, "connect M1 [OGATE] to [IGATE] M2")
    c.add_argument("m1")
    c.add_argument("m2")
    c.add_argument("ogate", type=int, nargs="?", default=0)
    c.add_argument("igate", type=int, nargs="?", default=0)
    c = cmd(a, "port", add_port, "create a port: DRIVER NAME [ARG]")
    c.add_argument("driver")
    c.add_argument("name")
    c.add_argument("arg", nargs="?", help="driver argument as a Python dict")

    dl = group("delete", "delete a worker, module, connection or port")
    cmd(dl, "worker", delete_worker, "stop and remove worker WID").add_argument("wid", type=int)
    cmd(dl, "module", delete_module, "destroy module NAME").add_argument("name")
    c = cmd(dl, "connection", delete_connection, "disconnect output gate OGATE of NAME")
    c.add_argument("name")
    c.add_argument("ogate", type=int, nargs="?", default=0)
    cmd(dl, "port", delete_port, "destroy port NAME").add_argument("name")

    cm = group("command", "run a module command")
    c = cmd(cm, "module", command_module, "run command CMD of module NAME")
    c.add_argument("name")
    c.add_argument("cmd")
    c.add_argument(
        "arg_type", metavar="ARGTYPE", help="argument message, e.g. QueueCommandGetStatusArg"
    )
    c.add_argument("arg", nargs="?", help="argument as a Python dict")

    sh = group("show", "show the daemon's state")
    cmd(sh, "status", show_status, "workers, modules, ports, classes and hooks at a glance")
    cmd(sh, "version", show_version, "the daemon's version")
    cmd(sh, "worker", show_worker, "workers").add_argument("wid", type=int, nargs="?")
    cmd(sh, "tc", show_tc, "traffic classes as a tree per worker").add_argument(
        "wid", type=int, nargs="?"
    )
    c = cmd(sh, "pipeline", show_pipeline, "the module graph with per-edge counters")
    c.add_argument("--dot", metavar="FILE", help="write Graphviz DOT to FILE ('-': stdout)")
    cmd(sh, "module", show_module, "modules: gates, counters, metadata").add_argument(
        "names", nargs="*"
    )
    c = cmd(
        sh,
        "errors",
        show_errors,
        "packets dropped, by module and named reason, with rates, and by port",
    )
    c.add_argument("names", nargs="*", help="only these modules or ports")
    c.add_argument("--all", action="store_true", help="also reasons that dropped nothing")
    c.add_argument(
        "--sort",
        choices=render.ERRORS_SORT,
        default="count",
        help="row order (count: largest first)",
    )
    cmd(
        sh,
        "runtime",
        show_runtime,
        "per module and worker: calls, packets, packets per call, cycles per packet",
    ).add_argument("names", nargs="*", help="only these modules")
    cmd(
        sh,
        "latency",
        show_latency,
        "a Measure's latency and jitter: p50, p90, p99, p99.9, max and a histogram",
    ).add_argument("module")
    cmd(sh, "trace", show_trace, "the packets traced (trace add), module by module")
    cmd(sh, "mclass", show_mclass, "module classes: arguments and commands").add_argument(
        "names", nargs="*"
    )
    cmd(sh, "port", show_port, "ports and their counters").add_argument("names", nargs="*")
    cmd(sh, "driver", show_driver, "port drivers").add_argument("names", nargs="*")
    cmd(sh, "gatehook", show_gatehook, "installed gate hooks")

    cl = group("clear", "start counters afresh")
    cmd(cl, "runtime", clear_runtime, "start show runtime's counts afresh")
    cmd(cl, "trace", clear_trace, "remove the packet trace and its records")

    tr = group("trace", "trace packets through the pipeline (VPP's trace, OVS's ofproto/trace)")
    c = cmd(tr, "add", trace_add, "trace the next N packets entering a module or port")
    c.add_argument(
        "at",
        metavar="PORT|MODULE",
        help="a module, or a port (the PortInc and QueueInc modules reading it)",
    )
    c.add_argument("count", metavar="N", type=int, help="packets to capture (1..500)")
    c = cmd(
        tr,
        "packet",
        trace_packet,
        "run one packet from MODULE through the pipeline without sending it",
    )
    c.add_argument(
        "module",
        metavar="MODULE",
        help="where the packet enters (one without input gates, e.g. a PortInc: as its output)",
    )
    c.add_argument(
        "packet",
        nargs="+",
        metavar="HEX|SCAPY-EXPR",
        help="the packet from Ethernet on: hex bytes, or a scapy expression such as "
        "\"Ether()/IP(dst='10.0.0.2')/UDP()\"",
    )

    ck = group("check", "check the configuration")
    cmd(ck, "constraints", check_constraints, "modules reachable from more than one worker")

    mo = group("monitor", "live rates, refreshed in place until Ctrl-C")
    for name, func, text in (
        ("pipeline", monitor_pipeline, "packets and bits per second on every connection"),
        ("port", monitor_port, "per-port packet, byte and drop rates"),
        ("tc", monitor_tc, "per-traffic-class rates"),
    ):
        c = cmd(mo, name, func, text)
        c.add_argument("--interval", type=float, default=1.0, help="seconds between samples (1)")
        c.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
        if name == "pipeline":
            c.add_argument(
                "--no-bits",
                action="store_true",
                help="leave the gates alone: no Track hook, so no bits/s",
            )

    c = top.add_parser(
        "splice",
        help="insert a module into a live path without dropping packets",
        description="Insert module NAME (created if CLASS is given) between output gate "
        "OGATE of M1 and the module it feeds, in one transaction: no packet is dropped.",
        exit_on_error=False,
    )
    c.add_argument("m1")
    c.add_argument("ogate", type=int)
    c.add_argument("name")
    c.add_argument("mclass", nargs="?")
    c.add_argument("arg", nargs="?")
    c.set_defaults(func=splice)
    c = top.add_parser(
        "unsplice",
        help="take a module out of a live path without dropping packets",
        description="Join NAME's upstream gate to what NAME's gate 0 feeds and destroy NAME "
        "(--keep: leave it unconnected), in one transaction.",
        exit_on_error=False,
    )
    c.add_argument("name")
    c.add_argument("--keep", action="store_true", help="disconnect NAME but do not destroy it")
    c.set_defaults(func=unsplice)

    c = top.add_parser(
        "offload",
        help="offload the pipeline after an AFXDPPort into its XDP program",
        description="Turn the XDP offload of AFXDPPort PORT on or off, or show the plan: "
        "which of the pipeline's gates the kernel handles (drop, XDP_TX, XDP_REDIRECT, MAC "
        "swap) and which stay in user space, with the kernel's counters (docs/planner.md).",
        exit_on_error=False,
    )
    c.add_argument("port_name", metavar="PORT")
    c.add_argument("action", nargs="?", default="show", choices=["on", "off", "show"])
    c.set_defaults(func=offload)

    c = top.add_parser(
        "plan-nic",
        help="the NIC planner: a model's PRG, or the configuration a policy chooses",
        description="show: a NIC model's PRG and configuration space. plan: run a policy "
        "over flows (--flows FILE, lines like 'udp 10.0.0.1:1234 10.1.0.1:53 [hp] "
        "[bw=MBPS]', or --generate N) and print the chosen configuration, the flow map and "
        "each queue's specialised pipeline (--dot: Graphviz; --format ethtool: the ethtool "
        "commands that would apply it). docs/planner.md.",
        exit_on_error=False,
    )
    c.add_argument("action", choices=["show", "plan"])
    c.add_argument("--nic", default="82599", choices=["82599", "sfc9020", "xdp", "ethtool"])
    c.add_argument("--queues", type=int, default=0, help="RX queues (default 4)")
    c.add_argument("--iface", default="", help="--nic ethtool: the interface")
    c.add_argument("--netns", default="", help="--nic ethtool: its network namespace")
    c.add_argument("--policy", default="balance", choices=["balance", "isolation", "bandwidth"])
    c.add_argument("--hp-queues", type=int, default=0, help="queues for high-priority flows")
    c.add_argument("--flows", help="flow file")
    c.add_argument("--generate", type=int, help="generate N flows instead")
    c.add_argument("--hp-every", type=int, default=0, help="with --generate: every Mth is hp")
    c.add_argument("--bw", type=int, default=0, help="with --generate: Mb/s per flow")
    c.add_argument("--seed", type=int, default=0, help="with --generate: seed")
    c.add_argument("--rss-off", action="store_true", help="unmatched traffic stays on Q0")
    c.add_argument(
        "--for-port",
        default="",
        help="specialise the pipeline running behind this port (else a demonstration one); "
        "with --nic ethtool and no --iface, read the port's interface",
    )
    c.add_argument("--dot", action="store_true", help="Graphviz instead of text")
    c.add_argument("--format", default="text", choices=["text", "ethtool"])
    c.set_defaults(func=plan_nic)

    c = top.add_parser(
        "duplicate",
        help="copy a pipeline onto several workers, one queue pair each",
        description='Build one copy of TEMPLATE (.bess text, e.g. "ttl::UpdateTTL() -> '
        "MACSwap()\") per worker: with --port, worker i's copy runs QueueInc(qid=i) -> "
        "TEMPLATE -> QueueOut(qid=i); without, the template brings its own tasks. Copies are "
        "named NAME@wWID; `command module NAME ...` runs on every copy.",
        exit_on_error=False,
    )
    c.add_argument("template")
    c.add_argument("--workers", required=True, help="worker ids, e.g. 0,1 (each must exist)")
    c.add_argument("--port", dest="dup_port", help="a port with one queue pair per worker")
    c.add_argument("--out-port", help="send to this port's queue i instead of --port's")
    c.add_argument("--name", default="dup", help="prefix of unnamed copies (dup)")
    c.set_defaults(func=duplicate)

    c = top.add_parser(
        "replay",
        help="replay a pcap file into the pipeline, with progress",
        description="Replay a pcap or pcapng file through a PcapFilePort into MODULE[:IGATE] "
        "(a Sink if none), showing progress; the port and modules it made are removed when "
        "the file is done.",
        exit_on_error=False,
    )
    c.add_argument("file")
    c.add_argument("--to", metavar="MODULE[:IGATE]", help="where the packets go (default: a Sink)")
    c.add_argument("--name", help="port name (default: replay<pid>)")
    c.add_argument("--timing", action="store_true", help="keep the recorded inter-packet times")
    c.add_argument("--keep", action="store_true", help="leave the port and modules in place")
    c.add_argument("--idle", type=float, default=3.0, help="stop after this many idle seconds (3)")
    c.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    c.set_defaults(func=replay)

    c = top.add_parser(
        "tcpdump",
        help="capture a gate's packets with tcpdump",
        description="Copy packets crossing a module's gate to tcpdump; any further "
        "arguments go to tcpdump (e.g. -c 10 -w out.pcap -n udp).",
        exit_on_error=False,
    )
    c.set_defaults(func=tcpdump)
    c.add_argument("module")
    c.add_argument("direction", nargs="?", choices=("in", "out"), default="out")
    c.add_argument("gate", nargs="?", type=int, default=0)
    c.add_argument("options", nargs=argparse.REMAINDER, help="tcpdump options")

    c = top.add_parser("shell", help="interactive shell (the default)", exit_on_error=False)
    c.set_defaults(func=None)
    return p


def _passthrough(argv: list[str], args) -> None:
    """Options meant for bessemerd or tcpdump are taken verbatim from the command line
    (argparse would mistake them for ours)."""
    if args.command == "daemon":
        args.options = argv[argv.index("start") + 1 :]
        return
    rest = argv[argv.index("tcpdump") + 1 :]
    i = 1
    if len(rest) > i and rest[i] in ("in", "out"):
        i += 1
    if len(rest) > i and rest[i].isdigit():
        i += 1
    args.options = rest[i:]


def execute(argv: list[str], session: Session | None = None) -> int:
    """Parses and runs one command line; returns the exit status."""
    p = _parser()
    try:
        args, extra = p.parse_known_args(argv)
        if hasattr(args, "options"):
            _passthrough(argv, args)
        elif extra:
            raise argparse.ArgumentError(None, f"unrecognized arguments: {' '.join(extra)}")
    except argparse.ArgumentError as exc:
        print(f"bessemer: {exc}", file=sys.stderr)
        return 2
    own = session is None
    token = None
    if getattr(args, "token_file", None):
        try:
            with open(args.token_file) as f:
                token = f.readline().strip()
        except OSError as exc:
            print(f"bessemer: cannot read the token file: {exc}", file=sys.stderr)
            return 2
    security = {"tls_ca": args.tls_ca, "cert": args.cert, "key": args.key, "token": token}
    s = session or Session(args.host, args.port, args.unix, **security)
    try:
        if args.version:
            print_versions(s)
            return 0
        if getattr(args, "func", None) is None:
            if args.command == "shell" or args.command is None:
                from .shell import Shell

                Shell(s, _parser, execute).run()
                return 0
            p.print_help()
            return 2
        args.func(s, args)
        return 0
    except CliError as exc:
        print(f"bessemer: {exc}", file=sys.stderr)
        return 1
    except BESS.Error as exc:
        print(f"bessemer: {exc.errmsg}", file=sys.stderr)
        return 1
    finally:
        if own:
            s.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    try:
        return execute(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help and usage errors from argparse
        return int(exc.code or 0)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

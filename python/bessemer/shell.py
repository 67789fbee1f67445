"""The interactive shell: the CLI's commands at a prompt, with history and tab completion."""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .client import BESS

HISTORY = Path(os.environ.get("BESSEMER_HISTORY", Path.home() / ".bessemer_history"))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The words a parser takes next as subcommands ({} for a command's own parser)."""
    for action in parser._actions:  # argparse has no public API for this
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# What a command's positional argument names, by (command words..., argparse dest): the
# shell completes it from the daemon (module, mclass, port, driver names; a module's
# commands and their argument types) or from the file system.
KINDS = {
    ("add", "module", "mclass"): "mclass",
    ("add", "port", "driver"): "driver",
    ("add", "connection", "m1"): "module",
    ("add", "connection", "m2"): "module",
    ("delete", "module", "name"): "module",
    ("delete", "connection", "name"): "module",
    ("delete", "port", "name"): "port",
    ("command", "module", "name"): "module",
    ("command", "module", "cmd"): "cmd",
    ("command", "module", "arg_type"): "cmd_arg",
    ("show", "module", "names"): "module",
    ("show", "errors", "names"): "module_or_port",
    ("show", "mclass", "names"): "mclass",
    ("show", "port", "names"): "port",
    ("show", "driver", "names"): "driver",
    ("tcpdump", "module"): "module",
    ("splice", "m1"): "module",
    ("splice", "mclass"): "mclass",
    ("unsplice", "name"): "module",
    ("offload", "port_name"): "port",
    ("run", "file"): "file",
    ("replay", "file"): "file",
}

# Options whose value is a file.
FILE_OPTIONS = {"dot", "flows", "tls_ca", "cert", "key", "token_file"}


def _files(text: str) -> list[str]:
    """Paths starting with `text` (`~` kept as typed); a folder ends in '/' so completion
    can go on into it, a file in ' '."""
    base = os.path.expanduser(text)
    out = []
    for path in sorted(glob.glob(glob.escape(base) + "*")):
        shown = text + path[len(base) :]
        out.append(shown + "/" if os.path.isdir(path) else shown + " ")
    return out


class Shell:
    """A read-eval-print loop over the CLI's commands, sharing one connection: `make_parser`
    builds the CLI's parser (for completion) and `execute(argv, session)` runs one command
    line (the CLI passes its own, so this module does not import the CLI back)."""

    def __init__(
        self,
        session,
        make_parser: Callable[[], argparse.ArgumentParser],
        execute: Callable[[list[str], Any], int],
    ):
        self.session = session
        self.parser = make_parser()
        self.execute = execute
        self._matches: list[str] = []

    def _names(self, kind: str, words: list[str]) -> list[str]:
        """Names of `kind` from the daemon; `words` are the command's arguments so far."""
        try:
            b = self.session.bess
            if kind == "module":
                return [m.name for m in b.list_modules()]
            if kind == "mclass":
                return b.list_mclasses()
            if kind == "port":
                return [p.name for p in b.list_ports()]
            if kind == "driver":
                return b.list_drivers()
            if kind == "module_or_port":
                return [m.name for m in b.list_modules()] + [p.name for p in b.list_ports()]
            if kind in ("cmd", "cmd_arg") and words:
                info = b.get_mclass_info(b.get_module_info(words[0]).mclass)
                if kind == "cmd":
                    return list(info.cmds)
                args = dict(zip(info.cmds, info.cmd_args, strict=False))
                return [args[words[1]]] if len(words) > 1 and words[1] in args else []
        except Exception:  # completion must never raise into readline
            return []
        return []

    def matches(self, line: str) -> list[str]:
        """Completions of the last word of `line` (the text before the cursor), each ending
        in a space unless more may follow (a folder)."""
        try:
            words = shlex.split(line)
        except ValueError:  # an open quote: nothing sensible to offer
            return []
        text = "" if not line or line[-1].isspace() or not words else words.pop()
        if words and words[0] == "help":
            words = words[1:]
        parser, path = self.parser, []
        while words and _subcommands(parser):
            sub = _subcommands(parser).get(words[0])
            if sub is None:
                return []
            parser = sub
            path.append(words.pop(0))
        subs = _subcommands(parser)
        if subs:
            options = [w for w in subs if w != "shell"]
            if not path:
                options += ["help", "quit", "exit"]
            if text.startswith("-"):
                options = self._option_names(parser)
            return sorted(o + " " for o in options if o.startswith(text))
        return [m for m in self._argument(parser, tuple(path), words, text) if m.startswith(text)]

    @staticmethod
    def _option_names(parser: argparse.ArgumentParser) -> list[str]:
        return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]

    def _argument(self, parser, path: tuple[str, ...], words: list[str], text: str) -> list[str]:
        """Completions for the argument after `words` of the command `path`."""
        options = {o: a for a in parser._actions for o in a.option_strings}
        positionals = [a for a in parser._actions if not a.option_strings]
        given: list[str] = []
        pending = None  # an option still waiting for its value
        for w in words:
            if pending is not None:
                pending = None
            elif w in options:
                pending = options[w] if options[w].nargs != 0 else None
            else:
                given.append(w)
        if pending is not None:
            action = pending
        elif text.startswith("-"):
            return sorted(o + " " for o in self._option_names(parser))
        else:
            action, left = None, len(given)
            for a in positionals:
                if a.nargs == argparse.REMAINDER:
                    return []
                if a.nargs in ("*", "+") or left == 0:
                    action = a
                    break
                left -= 1
            if action is None:
                return []
        if action.choices:
            return sorted(f"{c} " for c in action.choices)
        kind = "file" if action.dest in FILE_OPTIONS else KINDS.get((*path, action.dest))
        if kind == "file":
            return _files(text)
        return sorted(n + " " for n in self._names(kind, given)) if kind else []

    def complete(self, text: str, state: int) -> str | None:
        """readline's completer: the `state`th completion of the word before the cursor."""
        import readline

        if state == 0:
            line = readline.get_line_buffer()[: readline.get_endidx()]
            try:
                self._matches = self.matches(line)
            except Exception:  # completion must never raise into readline
                self._matches = []
        return self._matches[state] if state < len(self._matches) else None

    def run(self) -> None:
        interactive = sys.stdin.isatty()
        if interactive:
            try:
                import readline

                with contextlib.suppress(OSError):
                    readline.read_history_file(HISTORY)
                readline.set_completer(self.complete)
                readline.set_completer_delims(" \t")
                readline.parse_and_bind("tab: complete")
            except ImportError:
                readline = None
            print("Type 'help' for commands, Tab to complete, Ctrl-D to leave.")
        try:
            while True:
                try:
                    line = input(self._prompt() if interactive else "")
                except EOFError:
                    break
                except KeyboardInterrupt:
                    print()
                    continue
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line in ("quit", "exit"):
                    break
                try:
                    argv = shlex.split(line)
                except ValueError as exc:
                    print(f"bessemer: {exc}", file=sys.stderr)
                    continue
                if argv[0] == "help":
                    argv = [*argv[1:], "--help"]
                try:
                    self.execute(argv, self.session)
                except SystemExit:
                    pass  # argparse printed help or a usage error
        finally:
            if interactive and "readline" in sys.modules:
                import readline

                with contextlib.suppress(OSError):
                    readline.write_history_file(HISTORY)

    def _prompt(self) -> str:
        try:
            self.session.bess.get_version()
            return f"{self.session.address} $ "
        except (BESS.Error, Exception):
            return "<disconnected> $ "

"""The interactive shell: the CLI's commands at a prompt, with history and tab completion."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from .client import BESS

HISTORY = Path(os.environ.get("BESSEMER_HISTORY", Path.home() / ".bessemer_history"))


def _words(parser: argparse.ArgumentParser) -> dict[str, dict]:
    """The command tree of an argparse parser: {word: {subword: {...}}}."""
    tree: dict[str, dict] = {}
    for action in parser._actions:  # argparse has no public API for this
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                tree[name] = _words(sub)
    return tree


class Shell:
    """A read-eval-print loop over `bessemer.cli.execute`, sharing one connection."""

    def __init__(self, session, make_parser: Callable[[], argparse.ArgumentParser]):
        self.session = session
        self.tree = _words(make_parser())
        self.tree.pop("shell", None)
        self.tree.update({"help": {}, "quit": {}, "exit": {}})

    def _names(self, kind: str) -> list[str]:
        try:
            b = self.session.bess
            if kind == "module":
                return [m.name for m in b.list_modules()]
            if kind == "mclass":
                return b.list_mclasses()
            if kind == "port":
                return [p.name for p in b.list_ports()]
        except Exception:  # completion must never raise into readline
            return []
        return []

    def complete(self, text: str, state: int) -> str | None:
        import readline

        line = readline.get_line_buffer()[: readline.get_endidx()]
        words = shlex.split(line) if line.strip() else []
        if line and not line.endswith(" ") and words:
            words = words[:-1]
        node = self.tree
        for w in words:
            node = node.get(w, {})
        options = list(node)
        if not options and words:
            kind = {"tcpdump": "module", "module": "module", "mclass": "mclass", "port": "port"}
            if words[-1] in kind or (words[0] == "tcpdump" and len(words) == 1):
                options = self._names(kind.get(words[-1], "module"))
            elif words[0] in ("command", "add") and len(words) >= 2 and words[1] == "module":
                options = self._names("module" if words[0] == "command" else "mclass")
        matches = sorted(o + " " for o in options if o.startswith(text))
        return matches[state] if state < len(matches) else None

    def run(self) -> None:
        from .cli import execute

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
                    execute(argv, self.session)
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
            return f"{self.session.host}:{self.session.port} $ "
        except (BESS.Error, Exception):
            return "<disconnected> $ "

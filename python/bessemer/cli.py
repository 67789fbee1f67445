"""`bessemer`: the command line (so far: `run FILE [VAR=VALUE ...]`)."""

from __future__ import annotations

import argparse
import sys

from .client import BESS, DEFAULT_PORT
from .script import ScriptError, run_script


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="bessemer", description="Drive a Bessemer (or BESS) daemon.")
    p.add_argument("--host", default="localhost", help="daemon address (default localhost)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"daemon port (default {DEFAULT_PORT})"
    )
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a .bess script")
    run.add_argument("file", help="script to run")
    run.add_argument("vars", nargs="*", metavar="VAR=VALUE", help="values for $VAR in the script")
    args = p.parse_args(argv)
    env = {}
    for kv in args.vars:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            p.error(f"'{kv}' is not VAR=VALUE")
        env[key] = value
    bess = BESS(args.host, args.port)
    try:
        bess.get_version()
        run_script(args.file, bess, env)
    except BESS.Error as exc:
        print(
            f"bessemer: cannot talk to the daemon at {args.host}:{args.port}: {exc.errmsg}",
            file=sys.stderr,
        )
        return 1
    except (ScriptError, OSError) as exc:
        print(f"bessemer: {exc}", file=sys.stderr)
        return 1
    finally:
        bess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The bessemer command (Bessemer's Python CLI), installed with its pinned dependencies in
@LIB@/python by `make install` (see docs/deploy.md)."""

import os
import sys

sys.path.insert(0, "@LIB@/python")
if "XDG_CACHE_HOME" not in os.environ and not os.access(os.path.expanduser("~"), os.W_OK):
    # A service user without a writable home: use the BESS protocol modules compiled when the
    # package was made instead of compiling them into ~/.cache.
    os.environ["XDG_CACHE_HOME"] = "@LIB@/cache"

from bessemer.cli import main

sys.exit(main())

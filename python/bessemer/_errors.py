"""The daemon's refusal, `BESS.Error`, in a private module of its own: `client` and
`multicore` both need it, and neither then imports the other to get it."""

from __future__ import annotations


class Error(Exception):
    """The daemon refused a request: `code` is an errno, `errmsg` says why."""

    def __init__(self, code: int, errmsg: str):
        super().__init__(f"{errmsg} (errno {code})")
        self.code = code
        self.errmsg = errmsg


# Named where it is used from, as it always was: tracebacks and reprs say
# `bessemer.client.BESS.Error`.
Error.__module__ = "bessemer.client"
Error.__qualname__ = "BESS.Error"
Error.__init__.__qualname__ = "BESS.Error.__init__"

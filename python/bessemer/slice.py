"""Python binding of the slice library (ctypes over libbessemer_slice.so): attach to a
SlicePort of bessemerd and exchange frames through its shared-memory rings.

    from bessemer.slice import Slice
    with Slice.attach("/tmp/bessemer_slice_s0") as s:
        s.send_batch([frame1, frame2])
        if s.wait(timeout_ms=100):
            frames = s.recv_batch()

Frames cross the Python boundary as ``bytes`` (one copy into or out of the shared frame);
the C and Rust interfaces read and write frames in place.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


class SliceError(OSError):
    """Attaching failed, or the daemon left."""


class _Desc(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint32), ("len", ctypes.c_uint32)]


class _Counters(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64)
        for n in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_invalid", "sleeps")
    ]


def library_path() -> Path:
    """The shared library: $BESSEMER_SLICE_LIB, else the workspace's release or debug build."""
    env = os.environ.get("BESSEMER_SLICE_LIB")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        p = _ROOT / "target" / profile / "libbessemer_slice.so"
        if p.exists():
            return p
    raise SliceError(
        "libbessemer_slice.so not found: build it with 'cargo build -p bessemer-slice' "
        "or set BESSEMER_SLICE_LIB"
    )


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(str(library_path()))
    P, D, U = ctypes.c_void_p, ctypes.POINTER(_Desc), ctypes.c_uint32
    sig = {
        "bslice_attach": ([ctypes.c_char_p, U], P),
        "bslice_last_error": ([], ctypes.c_char_p),
        "bslice_detach": ([P], None),
        "bslice_recv_batch": ([P, D, U], U),
        "bslice_frame": ([P, _Desc], ctypes.POINTER(ctypes.c_uint8)),
        "bslice_release": ([P, D, U], None),
        "bslice_alloc_tx": ([P, D, U], U),
        "bslice_send_batch": ([P, D, U], U),
        "bslice_free_tx": ([P, D, U], None),
        "bslice_wait": ([P, U, ctypes.c_int], ctypes.c_int),
        "bslice_frame_size": ([P], U),
        "bslice_counters": ([P, ctypes.POINTER(_Counters)], None),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    _lib = lib
    return lib


class Slice:
    """An attached slice; use as a context manager or call ``close``."""

    def __init__(self, handle: int, lib):
        self._h = handle
        self._lib = lib
        self.frame_size = lib.bslice_frame_size(handle)

    @classmethod
    def attach(cls, path: str, timeout_ms: int = 5000) -> Slice:
        """Attaches to the SlicePort listening at ``path``."""
        lib = _load()
        h = lib.bslice_attach(path.encode(), timeout_ms)
        if not h:
            raise SliceError(lib.bslice_last_error().decode())
        return cls(h, lib)

    def _handle(self) -> int:
        if not self._h:
            raise SliceError("slice is closed")
        return self._h

    def recv_batch(self, max_frames: int = 32) -> list[bytes]:
        """Receives up to ``max_frames`` frames (copied out; the frames are given back)."""
        h = self._handle()
        ds = (_Desc * max_frames)()
        n = self._lib.bslice_recv_batch(h, ds, max_frames)
        out = [ctypes.string_at(self._lib.bslice_frame(h, ds[i]), ds[i].len) for i in range(n)]
        self._lib.bslice_release(h, ds, n)
        return out

    def send_batch(self, frames: list[bytes]) -> int:
        """Copies ``frames`` into send frames and queues them; returns how many were queued."""
        h = self._handle()
        k = len(frames)
        ds = (_Desc * max(k, 1))()
        n = self._lib.bslice_alloc_tx(h, ds, k)
        for i in range(n):
            data = frames[i][: self.frame_size]
            if len(data) > ds[i].len:
                # Too long for the place after the headroom: from the frame's start.
                ds[i].offset -= ds[i].offset % self.frame_size
            ctypes.memmove(self._lib.bslice_frame(h, ds[i]), data, len(data))
            ds[i].len = len(data)
        sent = self._lib.bslice_send_batch(h, ds, n)
        if sent < n:
            rest = (_Desc * (n - sent))(*ds[sent:n])
            self._lib.bslice_free_tx(h, rest, n - sent)
        return sent

    def wait(self, spin_us: int = 0, timeout_ms: int = -1) -> bool:
        """Waits for a frame (busy-polls ``spin_us``, then sleeps on the eventfd)."""
        r = self._lib.bslice_wait(self._handle(), spin_us, timeout_ms)
        if r < 0:
            raise SliceError("the daemon closed the slice")
        return r == 1

    def counters(self) -> dict[str, int]:
        """The application's own counters."""
        c = _Counters()
        self._lib.bslice_counters(self._handle(), ctypes.byref(c))
        return {n: getattr(c, n) for n, _ in _Counters._fields_}

    def close(self) -> None:
        """Detaches (the daemon reclaims every frame this app held)."""
        if self._h:
            self._lib.bslice_detach(self._h)
            self._h = None

    def __enter__(self) -> Slice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

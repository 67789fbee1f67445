"""A one-line progress report for long CLI operations (scripts that build large tables,
pcap replays), redrawn in place on a terminal.

Shown on stderr when it is a terminal, or when `BESSEMER_PROGRESS=1`; never when
`BESSEMER_PROGRESS=0`. Without a terminal the line is printed once per update interval
instead of redrawn.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def _forced() -> bool | None:
    v = os.environ.get("BESSEMER_PROGRESS")
    return None if v is None else v not in ("", "0")


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _rate(r: float) -> str:
    if r >= 1e6:
        return f"{r / 1e6:.2f} M/s"
    if r >= 1e3:
        return f"{r / 1e3:.1f} k/s"
    return f"{r:.0f}/s"


class Progress:
    """Counts work done (of `total`, if known) and reports it at most every `interval` s."""

    def __init__(
        self,
        label: str,
        unit: str,
        total: int | None = None,
        interval: float = 0.25,
        stream: TextIO | None = None,
        delay: float = 0.5,
    ):
        self.label, self.unit, self.total = label, unit, total
        self.stream = stream or sys.stderr
        forced = _forced()
        self.tty = self.stream.isatty()
        self.enabled = self.tty if forced is None else forced
        # Asked for explicitly: shown from the first update, however short the operation.
        self.interval, self.delay = interval, (0.0 if forced else delay)
        self.done = 0
        self.start = time.monotonic()
        # With counts the daemon timestamps (`update(at=...)`): the first and the latest
        # (timestamp, count), so the rate is over the daemon's clock, not the client's.
        self._first: tuple[float, int] | None = None
        self._latest: tuple[float, int] | None = None
        self._last_draw = 0.0
        self._drawn = False

    def line(self) -> str:
        """The progress text for the current count."""
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate: float | None = self.done / elapsed
        if self._first is not None and self._latest is not None:
            (t0, n0), (t1, n1) = self._first, self._latest
            rate = (n1 - n0) / (t1 - t0) if t1 > t0 else None
        text = f"{self.label}: {_count(self.done)}"
        if self.total:
            pct = 100.0 * self.done / self.total
            text += f"/{_count(self.total)} {self.unit} ({pct:.0f}%)"
            if rate and self.done < self.total:
                text += f", {_rate(rate)}, {(self.total - self.done) / rate:.0f} s left"
            elif rate is not None:
                text += f", {_rate(rate)}"
        elif rate is not None:
            text += f" {self.unit}, {_rate(rate)}"
        else:
            text += f" {self.unit}"
        return text + f", {elapsed:.1f} s"

    def update(self, done: int | None = None, step: int = 1, at: float | None = None) -> None:
        """Sets (or advances by `step`) the count; redraws if due. `at` is the daemon's
        timestamp of a count the daemon keeps: the rate is then taken over those
        timestamps (none is shown until two differ)."""
        self.done = done if done is not None else self.done + step
        if at is not None:
            self._latest = (at, self.done)
            if self._first is None:
                self._first = self._latest
        if not self.enabled:
            return
        now = time.monotonic()
        # Short operations stay silent: the line appears only once one has taken `delay`.
        if now - self.start < self.delay or now - self._last_draw < self.interval:
            return
        self._last_draw = now
        self._draw()

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        """Prints the final count if a line was shown (so the last state stays visible)."""
        if self.enabled and self._drawn:
            self._draw()
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()

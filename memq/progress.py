"""Progress of long operations: a bar with rate and time left on a terminal, plain lines
otherwise (logs, CI), at most one every few seconds."""

from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_INTERVAL_S = 5.0
"""Seconds between plain progress lines when the output is not a terminal."""


class Progress:
    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last_draw = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        interval = 0.1 if self.tty else PLAIN_INTERVAL_S
        if now - self._last_draw >= interval:
            self._draw(now)

    def finish(self) -> None:
        self._draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _draw(self, now: float) -> None:
        self._last_draw = now
        line = self.render(now - self.started)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def render(self, elapsed: float) -> str:
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if not self.total:
            return f"{self.label}: {self.done} ({rate:,.0f}/s)"
        share = min(1.0, self.done / self.total)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        bar = "#" * int(share * 30)
        eta = f"{left:,.0f}s left" if left != float("inf") else "--"
        return (f"{self.label} [{bar:<30}] {self.done}/{self.total} {share:6.1%} "
                f"{rate:,.0f}/s {eta}")

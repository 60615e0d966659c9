"""The campaign's one refreshed status line (on a terminal only: a log gets the final summary)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Progress", "Totals", "clock"]


@dataclass(frozen=True)
class Totals:
    """What the workers counted so far."""

    workers: int
    programs: int
    steps: int
    failures: int
    known: int


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Rewrites one line of ``stream`` (default stderr) in place; silent when ``quiet`` or when the
    stream is not a terminal."""

    def __init__(self, budget: float, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.budget = budget
        self.on = not quiet and self.stream.isatty()
        self._width = 0

    @staticmethod
    def line(elapsed: float, budget: float, totals: Totals) -> str:
        rate = totals.steps / elapsed if elapsed > 0 else 0.0
        return (f"campaign {clock(elapsed)}/{clock(budget)}  workers {totals.workers}  "
                f"programs {totals.programs}  steps {totals.steps} ({rate:.1f}/s)  "
                f"failures {totals.failures}  known {totals.known}")

    def show(self, elapsed: float, totals: Totals) -> None:
        if not self.on:
            return
        text = self.line(elapsed, self.budget, totals)
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def done(self) -> None:
        if self.on and self._width:
            self.stream.write("\n")
            self.stream.flush()

"""How long Hypothesis may shrink a failure.

Hypothesis shrinks a failing program for at most ``MAX_SHRINKING_SECONDS`` (300 s), a constant of
its engine and not a setting. One replay of a program costs from a second (in-process) to minutes
(a real server through HTTP), so a run that must end in bounded time, such as a fault hunt or a
campaign's worker, lowers it: Hypothesis then stops with the smallest failure found so far and
replays that one as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import engine as _engine

__all__ = ["shrink_budget"]


SLOW_SHRINKING = "WARNING: Hypothesis has spent more than five minutes working to shrink"
"""How Hypothesis's report starts when its shrink time limit ends shrinking."""


@contextmanager
def shrink_budget(seconds: float | None) -> Iterator[None]:
    """Within the block, shrinking a failure stops after ``seconds`` (None: Hypothesis's own limit).

    When the budget ends shrinking, the report says so in one line, instead of Hypothesis's warning
    that it spent five minutes and asks to be told (which is not what happened)."""
    if seconds is None:
        yield
        return
    if not (hasattr(_engine, "MAX_SHRINKING_SECONDS") and hasattr(_engine, "report")):
        raise RuntimeError("Hypothesis's engine changed: stateful.shrinking.shrink_budget needs updating")
    previous, _engine.MAX_SHRINKING_SECONDS = _engine.MAX_SHRINKING_SECONDS, seconds
    original_report = _engine.report

    def report(value: object) -> None:
        if isinstance(value, str) and value.startswith(SLOW_SHRINKING):
            value = (f"stateful: shrinking stopped at the shrink budget of {seconds:g} s; the failing program "
                     "shown is the smallest found by then")
        original_report(value)

    _engine.report = report
    try:
        yield
    finally:
        _engine.MAX_SHRINKING_SECONDS = previous
        _engine.report = original_report

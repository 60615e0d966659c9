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
def shrink_budget(seconds: float | None, shrinks: int | None = None) -> Iterator[None]:
    """Within the block, shrinking a failure stops after ``seconds`` (None: Hypothesis's own limit)
    or after ``shrinks`` successful shrinks (None: Hypothesis's own 500), whichever comes first.

    A budget in shrinks gives the same shrunk program however loaded the machine is (the shrinker
    is deterministic when the test is): a budget in seconds alone stops earlier, at a longer program,
    on a busy machine. When the time budget ends shrinking, the report says so in one line, instead
    of Hypothesis's warning that it spent five minutes and asks to be told (not what happened)."""
    if seconds is None and shrinks is None:
        yield
        return
    if not all(hasattr(_engine, name) for name in ("MAX_SHRINKING_SECONDS", "MAX_SHRINKS", "report")):
        raise RuntimeError("Hypothesis's engine changed: stateful.shrinking.shrink_budget needs updating")
    previous = _engine.MAX_SHRINKING_SECONDS, _engine.MAX_SHRINKS
    if seconds is not None:
        _engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    if shrinks is not None:
        _engine.MAX_SHRINKS = shrinks
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
        _engine.MAX_SHRINKING_SECONDS, _engine.MAX_SHRINKS = previous
        _engine.report = original_report

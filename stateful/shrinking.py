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


@contextmanager
def shrink_budget(seconds: float | None) -> Iterator[None]:
    """Within the block, shrinking a failure stops after ``seconds`` (None: Hypothesis's own limit)."""
    if seconds is None:
        yield
        return
    if not hasattr(_engine, "MAX_SHRINKING_SECONDS"):
        raise RuntimeError("Hypothesis renamed MAX_SHRINKING_SECONDS: --shrink-budget needs updating")
    previous, _engine.MAX_SHRINKING_SECONDS = _engine.MAX_SHRINKING_SECONDS, seconds
    try:
        yield
    finally:
        _engine.MAX_SHRINKING_SECONDS = previous

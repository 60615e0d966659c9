"""Searching a server whose answers are not a function of the program.

Hypothesis keeps a record of every program it ran (its ``DataTree``: the choices each one drew, and
how it ended) and assumes that one sequence of choices always draws the same way. A state machine
draws as it goes, so its draws follow the server's answers: a race that fails one run and not the
next ends one program earlier than another that began the same way; a launch that a racing server
refused leaves one pair fewer to pick from. Against such a server Hypothesis raises
``FlakyStrategyDefinition`` (or ``FlakyReplay``) and ends the whole search, with whatever it was
shrinking. (The 5 of 13 searches of a 20-minute campaign against omnigent 0.19.1 that ended so had
another cause, the gate's own way of ending a search: :class:`stateful.campaign.gate.EndSearch`.)

A campaign wants the search to go on: within :func:`tolerate_other_answers`, a program that goes
otherwise than the record of an earlier one stops being recorded from where it differs (the record
keeps the first run), and the search goes on. What that costs is what the record is for: Hypothesis
may generate that program's continuation again, and a shrink candidate that the record predicts is
not run. A failure is still replayed before it is reported (a ``Flaky`` that does not fail again is
settled as before, :func:`stateful.pipeline.settle`).

``pytest stateful/`` goes on the same way and says so in its summary (``stateful: test_sessions: N
program(s) went otherwise ...``): Hypothesis's own error blamed the strategies ("Is your data
generation depending on external state?"), where the server's answers are the external state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis.errors import FlakyReplay, FlakyStrategyDefinition
from hypothesis.internal.conjecture import datatree as _datatree

__all__ = ["NOTED", "Differed", "described", "tolerate_other_answers"]

NOTED: list[str] = []
"""What the ``pytest stateful/`` runs of this process noted of such programs (its terminal summary
shows them: a green run against a racing server says so)."""


@dataclass
class Differed:
    """How many programs went otherwise than an earlier one that began the same way, and the first
    such difference as Hypothesis described it (what it would have raised)."""

    programs: int = 0
    first: str | None = None

    def note(self) -> str | None:
        """One line for a campaign's notes, or None if every program drew as recorded."""
        if not self.programs:
            return None
        return (f"{self.programs} program(s) went otherwise than an earlier one that began the same way "
                f"(the server answered otherwise), recorded up to where it differed; first: {self.first}")


def described(problem: BaseException) -> str:
    """What Hypothesis said of a search it ended, in one line: its detail and notes, not its headline."""
    lines = [line.strip() for line in str(problem).splitlines() if line.strip()]
    lines += [str(note) for note in getattr(problem, "__notes__", ())]
    detail = [line for line in lines if not line.startswith(("Inconsistent data generation", "Inconsistent results"))]
    return " / ".join(detail or lines)[:300]


class _TolerantObserver(_datatree.TreeRecordingObserver):
    """Records a program as Hypothesis does, until it goes otherwise than the record; from there on,
    records nothing more of it."""

    differed: Differed

    def __init__(self, tree: Any) -> None:
        super().__init__(tree)
        self._detached = False

    def _differs(self, problem: BaseException) -> None:
        self._detached = True
        self.differed.programs += 1
        if self.differed.first is None:
            self.differed.first = described(problem)

    def draw_value(self, *args: Any, **kwargs: Any) -> None:
        if self._detached:
            return
        try:
            super().draw_value(*args, **kwargs)
        except FlakyStrategyDefinition as problem:
            self._differs(problem)

    def kill_branch(self) -> None:
        if self._detached:
            return
        try:
            super().kill_branch()
        except FlakyStrategyDefinition as problem:
            self._differs(problem)

    def conclude_test(self, *args: Any, **kwargs: Any) -> None:
        if self._detached or (self._current_node is self._root and self._index_in_current_node == 0):
            # nothing drawn: not a program but a search's end (stateful.campaign.gate.EndSearch, raised
            # before the program drew): nothing to record, nothing that went otherwise
            return
        try:
            super().conclude_test(*args, **kwargs)
        except (FlakyStrategyDefinition, FlakyReplay) as problem:
            self._differs(problem)


@contextmanager
def tolerate_other_answers() -> Iterator[Differed]:
    """Within the block, Hypothesis's searches record a program only as far as it goes as recorded
    (see the module's docstring); the yielded :class:`Differed` counts those that went otherwise."""
    for name in ("TreeRecordingObserver", "DataTree"):
        if not hasattr(_datatree, name):
            raise RuntimeError("Hypothesis's engine changed: stateful.tolerance needs updating")
    differed = Differed()
    observer = type("TolerantObserver", (_TolerantObserver,), {"differed": differed})
    original = _datatree.DataTree.new_observer

    def new_observer(tree: Any) -> _datatree.TreeRecordingObserver:
        return observer(tree)

    _datatree.DataTree.new_observer = new_observer  # type: ignore[method-assign]
    try:
        yield differed
    finally:
        _datatree.DataTree.new_observer = original  # type: ignore[method-assign]

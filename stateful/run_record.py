"""The machine's own record of a run: the steps it ran, and what a failure that never came back reports.

Hypothesis prints a program's steps only for its final replay of a shrunk failure. A violation that
ten replays could not reproduce has no final replay: Hypothesis's notes then hold an empty program
(``state = SessionsMachine()``, ``state.teardown()``), and nobody could act on what was seen. So the
machine keeps its own record while it runs (every rule and invariant call, printed as Hypothesis
prints a step: ``pairs_0 = state.start(name='main', terminal='bash')``), and its teardown attaches
that record, with the run's transcript and the last screens, to the violation that ended the run.

The record holds the drawn arguments only (a server's outputs go to the transcript, quoted). It is
shown in reports (each step as it ran), and where Hypothesis left no program (it stopped at a replay of
a race that went otherwise) ``minimize.reproduced`` replays it, each line checked by
``repro.check_step`` first, as every line that is run or written as code is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis.stateful import INITIALIZE_RULE_MARKER, INVARIANT_MARKER, RULE_MARKER

__all__ = ["RunRecord", "attach", "record_of", "recorded", "unreproduced_report"]

M = TypeVar("M", bound=type)

RECORD_ATTRIBUTE = "stateful_run_record"
"""The attribute of a violation that holds the :class:`RunRecord` of the run it ended."""
TRANSCRIPT_LINES = 300
"""The most transcript lines a report shows (the last ones: the failure is at the end)."""
SCREEN_LINES = 40
"""The most lines of each last screen a report shows (its last ones)."""


@dataclass(frozen=True)
class RunRecord:
    """What one run of the machine did, as the machine saw it."""

    steps: tuple[str, ...]
    """Each rule and invariant call, in order, as Hypothesis prints a step (the failing one included)."""
    transcript: tuple[str, ...]
    """The turns and their outputs (each output quoted), as the notes of a final replay show them."""
    screens: tuple[tuple[str, str], ...]
    """(pair, the last screen a read of it returned), in the order the pairs were last read."""


def recorded(machine: M) -> M:
    """Make every rule and invariant of ``machine`` (a RuleBasedStateMachine class whose instances
    have a ``steps`` list) append its call to ``self.steps`` before it runs, so that a step that
    raises is recorded too. A rule that returns a bundle value gets its name (``pairs_0 = ``) once
    Hypothesis has named it (see ``TerminalMachine._add_results_to_targets``)."""
    for name in dir(machine):
        function = getattr(machine, name)
        for marker in (RULE_MARKER, INITIALIZE_RULE_MARKER, INVARIANT_MARKER):
            decorated = getattr(function, marker, None)
            if decorated is not None:
                step = _recording(function)
                setattr(step, marker, dataclasses.replace(decorated, function=step))
                setattr(machine, name, step)
    return machine


def _recording(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def step(self: Any, *values: Any, **arguments: Any) -> Any:
        printed = [self._pretty_print(value) for value in values]
        printed += [f"{key}={self._pretty_print(value)}" for key, value in arguments.items()]
        self.steps.append(f"state.{function.__name__}({', '.join(printed)})")
        return function(self, *values, **arguments)

    return step


def attach(error: BaseException, record: RunRecord) -> None:
    """Keep ``record`` on ``error`` (the violation that ended the run), unless it has one (a replay's)."""
    if getattr(error, RECORD_ATTRIBUTE, None) is None:
        setattr(error, RECORD_ATTRIBUTE, record)


def record_of(error: BaseException) -> RunRecord | None:
    found: RunRecord | None = getattr(error, RECORD_ATTRIBUTE, None)
    return found


def unreproduced_report(violation: BaseException, tries: int, outcomes: Sequence[str]) -> str:
    """A violation seen once that ``tries`` replays (and resumed searches) did not break again,
    reported whole: a first line that says so, the violation, the program as it ran, its transcript
    and the last screens. Outputs and screens are shown quoted or behind ``| ``."""
    record = record_of(violation)
    lines = [f"stateful: seen once, not reproduced in {tries} replays: {_first_line(violation)}",
             f"(the tries: {'; '.join(outcomes) or 'none'})", "",
             f"{type(violation).__name__}: {violation}", ""]
    if record is None:
        return "\n".join([*lines, "(the run that saw it left no record of its steps)"])
    lines += ["The program as it ran (the last step raised the violation):", *(f"  {s}" for s in record.steps), ""]
    shown = record.transcript[-TRANSCRIPT_LINES:]
    skipped = len(record.transcript) - len(shown)
    lines += ["Its transcript (the turns and their outputs):",
              *([f"  ... {skipped} earlier lines"] if skipped else []), *(f"  {t}" for t in shown)]
    for pair, screen in record.screens:
        rows = screen.splitlines()[-SCREEN_LINES:]
        lines += ["", f"The last screen read of {pair}:", *(f"  | {row}" for row in rows)]
    return "\n".join(lines)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

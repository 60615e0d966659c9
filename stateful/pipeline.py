"""One pipeline from what a search raised to a finding's report: the pytest run
(``stateful/test_machine.py``) and every campaign worker (:mod:`stateful.campaign.worker`) both go
through it, so a failure is replayed, shortened, written and reported the same way in either.

::

    what Hypothesis raised
      -> settle()   a Flaky one (a race Hypothesis could not replay) is replayed until it fails again
                    (minimize.reproduced); one that never does is reported whole ("seen once ...")
      -> shorten()  steps Hypothesis's shrinking left, dropped where the failure does not need them
                    (minimize.shorter_failure): contract violations only
      -> write()    the machine repro (repro.write_repro) and, where the target's kind can replay it
                    without the tester, the plain seed-style repro (plain.write_plain_repro)
      -> report()   the failure's first line, its program (Hypothesis's notes), what became of it

Only a contract violation is shortened and written as a regression test: a failure of the target
(a hang, a server that broke or cannot be reached) is reported as what it is, and a replay of it
would test the server's health, not the contract.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis.errors import Flaky

from stateful import clauses
from stateful.clauses import clause_of
from stateful.minimize import reproduced, shorter_failure, unreproduced_report, violations_in
from stateful.plain import DEFAULT_CONFTEST, NoPlainForm, write_plain_repro
from stateful.repro import reported_program, write_repro
from stateful.targets import registry
from stateful.targets.base import Target

__all__ = ["NOT_REPRODUCED", "NOT_WRITTEN", "Settled", "Written", "report", "settle", "shorten", "write"]

NOT_WRITTEN = ("stateful: a failure of the target, not a contract violation: "
               "no regression test was written")
NOT_REPRODUCED = ("stateful: no regression test was written: the program did not break the contract again "
                  "(the run fails all the same: the violation was seen)")


@dataclass(frozen=True)
class Settled:
    """What a search's failure is once a race has been given its replays."""

    failure: BaseException
    """The failure to go on with: a replay's that broke a clause again, or what the search raised."""
    unreproduced: str | None = None
    """For a violation that no replay broke again: its whole report (a failure all the same, with
    no regression test); None otherwise."""


def settle(machine: type, raised: BaseException, hypothesis_settings: settings | None = None,
           deadline: float | None = None) -> Settled:
    """``raised`` as it is, unless it is one of Hypothesis's ``Flaky`` errors (a replay went otherwise
    than the run it replayed): then a replay that broke a clause again, or, if none did, ``raised``
    with the report of the violation it holds, seen once (``unreproduced`` stays None when it holds
    no violation: a flaw of the search, not a finding). No replay starts after ``deadline``."""
    if not isinstance(raised, Flaky):
        return Settled(raised)
    behind = {key for violation in violations_in(raised) for key in clauses.behind_of(violation)}
    with clauses.going_past(behind):  # a violation met past known ones is replayed past them too
        again = reproduced(machine, raised, hypothesis_settings=hypothesis_settings, deadline=deadline)
    if again is not raised:
        return Settled(again)
    return Settled(raised, unreproduced_report(raised))


def shorten(machine: type, failure: BaseException, deadline: float | None = None,
            allowed: Sequence[str] | None = None) -> BaseException:
    """A contract violation with the steps dropped that it does not need (anything else as it is).
    ``allowed``: the clauses a replay goes on past (a campaign's ``--allow``), so that a shorter
    program counts only if it fails by itself and not through another finding's resynchronisation;
    None: the clauses known as they are (``pytest stateful/ --allow``). A failure its program met only
    past known violations (``behind``) is replayed past those too (and no others)."""
    if clause_of(failure) is None or (deadline is not None and time.time() >= deadline):
        return failure
    if allowed is not None:
        clauses.know(allowed)
    try:
        with clauses.going_past(clauses.behind_of(failure)):
            return shorter_failure(machine, failure, deadline=deadline)
    finally:
        if allowed is not None:
            clauses.know()


@dataclass(frozen=True)
class Written:
    """The regression tests written for a failure."""

    repro: Path | None = None
    """The machine repro (replays the program on the machine), or None."""
    plain: Path | None = None
    """The plain seed-style repro (the server's team can drop it into their own suite), or None."""
    no_plain: str | None = None
    """Why there is no plain repro, where the target's kind could have one."""

    def outcome(self) -> list[str]:
        """What became of the failure, one ``stateful:`` line each (the end of a pytest report)."""
        if self.repro is None:
            return ["stateful: no regression test was written (--repro-dir '')"]
        lines = [f"stateful: this program is now a regression test: {self.repro}"]
        if self.plain is not None:
            lines.append(f"stateful: and as a plain seed-style test: {self.plain}")
        elif self.no_plain is not None:
            lines.append(f"stateful: no plain repro was written: {self.no_plain}")
        return lines


def write(machine: type, target: Target, failure: BaseException, repro_dir: Path | None,
          plain_conftest: str = DEFAULT_CONFTEST, deadline: float | None = None) -> Written:
    """The repros of a contract violation whose program Hypothesis (or a replay) reported, in
    ``repro_dir`` (None: none are written). The plain one is written where the target's kind can
    replay it without the tester, while there is time (``deadline``)."""
    if repro_dir is None or clause_of(failure) is None or not reported_program(failure):
        return Written()
    repro = write_repro(repro_dir, target.name, failure)
    kind = registry.KINDS.get(target.name)
    if kind is None or not kind.plain_repros:  # (a target of no registered kind: a test's fake)
        return Written(repro)
    if deadline is not None and time.time() >= deadline:
        return Written(repro, no_plain="the budget ended before it was written")
    if clauses.behind_of(failure):  # its machine repro goes on past them; a plain test's checks cannot
        return Written(repro, no_plain=f"its program meets it only past {', '.join(clauses.behind_of(failure))}, "
                                       "which a plain test cannot step over (the machine repro does)")
    try:
        return Written(repro, write_plain_repro(repro_dir, machine, target, failure, plain_conftest))
    except NoPlainForm as why:
        return Written(repro, no_plain=str(why))


def report(failure: BaseException, *outcome: str) -> str:
    """The failure as a run reports it: its first line (the clause, the call, what was expected and
    what came back), the program that led to it (Hypothesis's notes) and what became of it, without
    the Python traceback (which shows the tester's internals, not the server's fault)."""
    notes = [str(note) for note in getattr(failure, "__notes__", ())]
    return "\n".join([f"{type(failure).__name__}: {failure}", *notes, *outcome])

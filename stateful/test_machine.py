"""`pytest stateful/`: the state machine, once per target, with the loaded Hypothesis profile."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from stateful.machine import MachineConfig, TerminalMachine
from stateful.minimize import reproduced, shorter_failure, unreproduced_report
from stateful.plain import DEFAULT_CONFTEST, NoPlainForm, write_plain_repro
from stateful.repro import reported_program, write_repro
from stateful.shrinking import shrink_budget
from stateful.targets.base import Target, TargetError

NOT_WRITTEN = ("stateful: a failure of the target, not a contract violation: "
               "no regression test was written")
NOT_REPRODUCED = ("stateful: no regression test was written: the program did not break the contract again "
                  "(the run fails all the same: the violation was seen)")


class DirectMachine(TerminalMachine):
    """The machine against the reference tools in-process (its own registry)."""


class SessionsMachine(TerminalMachine):
    """The machine against a contract server over HTTP (the embedded stack, or --server-url)."""


def _run(machine: type[TerminalMachine], target: Target, config: MachineConfig, repro_dir: Path | None,
         shrink_seconds: float | None = None, plain_conftest: str = DEFAULT_CONFTEST) -> None:
    """Run the machine; report a failure as its first plain line (the clause, the call, what was
    expected and what came back), the program that led to it, and what became of it, without the
    Python traceback (which shows the tester's internals, not the server's fault).

    Only a contract violation (an AssertionError that is not a TargetError) is also written as a
    regression test (stateful/repro.py): a failure of the target (a hang, a server that broke or
    cannot be reached) is reported as what it is, and a replay of it would test the server's health,
    not the contract. A violation Hypothesis could not replay (``Flaky``) is replayed until it fails
    again (``minimize.reproduced``); one that never does fails the run all the same, reported whole
    (``minimize.unreproduced_report``: "seen once, not reproduced in N replays" first), with no
    regression test. Anything else (an error of the tester itself) propagates with its traceback."""
    machine.bind(target, config)
    unreproduced: str | None = None
    try:
        with shrink_budget(shrink_seconds):  # a resumed search (see reproduced) shrinks within it too
            try:
                run_state_machine_as_test(machine, settings=settings())
            except Flaky as flaky:  # a replay went otherwise than the run it replayed: a race, replayed until it fails again
                again = reproduced(machine, flaky, hypothesis_settings=settings())
                if again is not flaky:
                    raise again from None
                unreproduced = unreproduced_report(flaky)  # seen once: still a failure, reported whole
                if unreproduced is None:
                    raise
    except TargetError as failure:
        report = failure_report(failure, NOT_WRITTEN)  # failed below, outside the handler: no chained report
    except AssertionError as caught:
        failure = shorter_failure(machine, caught)  # steps Hypothesis's shrinking left, dropped if they can be
        outcome = "stateful: no regression test was written (--repro-dir '')"
        if repro_dir is not None and reported_program(failure):
            outcome = f"stateful: this program is now a regression test: {write_repro(repro_dir, target.name, failure)}"
            if target.name == "sessions":
                outcome += "\n" + plain_outcome(machine, target, failure, repro_dir, plain_conftest)
        report = failure_report(failure, outcome)
    else:
        if unreproduced is None:
            return
        report = f"{unreproduced}\n{NOT_REPRODUCED}"
    pytest.fail(report, pytrace=False)


def plain_outcome(machine: type[TerminalMachine], target: Target, failure: BaseException, repro_dir: Path,
                  conftest: str) -> str:
    """Write the plain repro too (a seed-style test for the server's own suite); one line saying
    where, or why there is none."""
    try:
        return f"stateful: and as a plain seed-style test: {write_plain_repro(repro_dir, machine, target, failure, conftest)}"
    except NoPlainForm as why:
        return f"stateful: no plain repro was written: {why}"


def failure_report(failure: BaseException, outcome: str) -> str:
    """The failure, the program that led to it (Hypothesis's notes), and what became of it."""
    notes = [str(note) for note in getattr(failure, "__notes__", ())]
    return "\n".join([f"{type(failure).__name__}: {failure}", *notes, outcome])


def test_direct(direct_target: Target, machine_config: MachineConfig, repro_dir: Path | None,
                shrink_seconds: float | None) -> None:
    _run(DirectMachine, direct_target, machine_config, repro_dir, shrink_seconds)


def test_sessions(sessions_target: Target, machine_config: MachineConfig, repro_dir: Path | None,
                  shrink_seconds: float | None, plain_conftest: str) -> None:
    _run(SessionsMachine, sessions_target, machine_config, repro_dir, shrink_seconds, plain_conftest)


# run_state_machine_as_test is Hypothesis's own runner; marking the pytest functions lets the
# hypothesis plugin collect their statistics (--hypothesis-show-statistics shows the event() labels),
# as it does for RuleBasedStateMachine.TestCase.runTest.
test_direct.is_hypothesis_test = True  # type: ignore[attr-defined]
test_sessions.is_hypothesis_test = True  # type: ignore[attr-defined]

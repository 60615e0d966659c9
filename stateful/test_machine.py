"""`pytest stateful/`: the state machine, once per target, with the loaded Hypothesis profile."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from stateful.machine import MachineConfig, TerminalMachine
from stateful.repro import reported_program, write_repro
from stateful.targets.base import Target, TargetError

NOT_WRITTEN = ("stateful: a failure of the target, not a contract violation: "
               "no regression test was written")


class DirectMachine(TerminalMachine):
    """The machine against the reference tools in-process (its own registry)."""


class SessionsMachine(TerminalMachine):
    """The machine against a contract server over HTTP (the embedded stack, or --server-url)."""


def _run(machine: type[TerminalMachine], target: Target, config: MachineConfig, repro_dir: Path | None) -> None:
    """Run the machine. Only a contract violation (an AssertionError that is not a TargetError) is
    also written as a regression test (stateful/repro.py): a failure of the target (a hang, a server
    that broke or cannot be reached) is reported as what it is, and a replay of it would test the
    server's health, not the contract."""
    machine.bind(target, config)
    try:
        run_state_machine_as_test(machine, settings=settings())
    except TargetError as failure:
        report = target_failure_report(failure)  # failed below, outside the handler: no chained report
    except AssertionError as failure:
        if repro_dir is not None and reported_program(failure):
            path = write_repro(repro_dir, target.name, failure)
            failure.add_note(f"stateful: this program is now a regression test: {path}")
        raise
    else:
        return
    pytest.fail(report, pytrace=False)


def target_failure_report(failure: TargetError) -> str:
    """The failure, the program that led to it (Hypothesis's notes), and that nothing was written;
    without a traceback, which would show the HTTP client's internals, not the server's fault."""
    notes = [str(note) for note in getattr(failure, "__notes__", ())]
    return "\n".join([f"{type(failure).__name__}: {failure}", *notes, NOT_WRITTEN])


def test_direct(direct_target: Target, machine_config: MachineConfig, repro_dir: Path | None) -> None:
    _run(DirectMachine, direct_target, machine_config, repro_dir)


def test_sessions(sessions_target: Target, machine_config: MachineConfig, repro_dir: Path | None) -> None:
    _run(SessionsMachine, sessions_target, machine_config, repro_dir)


# run_state_machine_as_test is Hypothesis's own runner; marking the pytest functions lets the
# hypothesis plugin collect their statistics (--hypothesis-show-statistics shows the event() labels),
# as it does for RuleBasedStateMachine.TestCase.runTest.
test_direct.is_hypothesis_test = True  # type: ignore[attr-defined]
test_sessions.is_hypothesis_test = True  # type: ignore[attr-defined]

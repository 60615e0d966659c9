"""`pytest stateful/`: the state machine, once per target, with the loaded Hypothesis profile."""

from __future__ import annotations

from pathlib import Path

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from stateful.machine import MachineConfig, TerminalMachine
from stateful.repro import reported_program, write_repro
from stateful.targets.base import Target


class DirectMachine(TerminalMachine):
    """The machine against the reference tools in-process (its own registry)."""


class SessionsMachine(TerminalMachine):
    """The machine against a contract server over HTTP (the embedded stack, or --server-url)."""


def _run(machine: type[TerminalMachine], target: Target, config: MachineConfig, repro_dir: Path | None) -> None:
    """Run the machine; on a shrunk failure, also write it as a regression test (stateful/repro.py)."""
    machine.bind(target, config)
    try:
        run_state_machine_as_test(machine, settings=settings())
    except Exception as failure:
        if repro_dir is not None and reported_program(failure):
            path = write_repro(repro_dir, target.name, failure)
            failure.add_note(f"stateful: this program is now a regression test: {path}")
        raise


def test_direct(direct_target: Target, machine_config: MachineConfig, repro_dir: Path | None) -> None:
    _run(DirectMachine, direct_target, machine_config, repro_dir)


def test_sessions(sessions_target: Target, machine_config: MachineConfig, repro_dir: Path | None) -> None:
    _run(SessionsMachine, sessions_target, machine_config, repro_dir)


# run_state_machine_as_test is Hypothesis's own runner; marking the pytest functions lets the
# hypothesis plugin collect their statistics (--hypothesis-show-statistics shows the event() labels),
# as it does for RuleBasedStateMachine.TestCase.runTest.
test_direct.is_hypothesis_test = True  # type: ignore[attr-defined]
test_sessions.is_hypothesis_test = True  # type: ignore[attr-defined]

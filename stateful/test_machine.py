"""`pytest stateful/`: the state machine, once per kind of target (stateful.targets.registry: test_direct,
test_sessions, ...), with the
loaded Hypothesis profile; a failure goes through the one pipeline the campaigns use too
(stateful.pipeline)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from stateful import pipeline, tolerance
from stateful.machine import MachineConfig, TerminalMachine
from stateful.plain import DEFAULT_CONFTEST
from stateful.shrinking import shrink_budget
from stateful.targets import registry
from stateful.targets.base import Target, TargetError

if TYPE_CHECKING:  # imported by the conftest before collection (importing it here would be too late)
    from stateful.pytest_machine import MachineTargets


def run_machine(machine: type[TerminalMachine], target: Target, config: MachineConfig, repro_dir: Path | None,
                shrink_seconds: float | None = None, plain_conftest: str = DEFAULT_CONFTEST) -> None:
    """Run the machine; fail the test with the pipeline's report of its failure (:mod:`stateful.pipeline`).

    A violation Hypothesis could not replay (``Flaky``) that no replay broke again fails the run all
    the same, reported whole ("seen once, not reproduced in N replays" first), with no regression
    test. Anything that is neither a contract violation nor a failure of the target (an error of the
    tester itself) propagates with its traceback."""
    machine.bind(target, config)
    # a resumed search (see minimize.reproduced) shrinks within the budget too; a program that draws
    # otherwise than an earlier one with the same start (a racing server) is noted, not an error
    with shrink_budget(shrink_seconds), tolerance.tolerate_other_answers() as differed:
        try:
            run_state_machine_as_test(machine, settings=settings())
            return
        except Exception as raised:  # noqa: BLE001 - sorted below (an interrupt is no failure: it propagates)
            settled = pipeline.settle(machine, raised, hypothesis_settings=settings())
        finally:
            if differed.note():
                tolerance.NOTED.append(f"{target.name}: {differed.note()}")
    failure = settled.failure
    if settled.unreproduced is not None:
        report = f"{settled.unreproduced}\n{pipeline.NOT_REPRODUCED}"
    elif isinstance(failure, TargetError):
        report = pipeline.report(failure, pipeline.NOT_WRITTEN)
    elif isinstance(failure, AssertionError):
        failure = pipeline.shorten(machine, failure)
        report = pipeline.report(failure, *pipeline.write(machine, target, failure, repro_dir, plain_conftest).outcome())
    else:
        raise failure
    pytest.fail(report, pytrace=False)


def _machine_test(kind: str) -> Callable[..., None]:
    """The test of the kind ``kind``: ``test_<kind>``."""

    def test(machine_targets: MachineTargets, machine_config: MachineConfig, repro_dir: Path | None,
             shrink_seconds: float | None, plain_conftest: str) -> None:
        target = machine_targets.get(kind)
        run_machine(registry.kind(kind).machine, target, machine_config, repro_dir, shrink_seconds, plain_conftest)

    test.__name__ = test.__qualname__ = f"test_{kind}"
    test.__doc__ = f"The machine against {registry.kind(kind).summary}."
    # run_state_machine_as_test is Hypothesis's own runner; marking the pytest function lets the
    # hypothesis plugin collect its statistics (--hypothesis-show-statistics shows the event() labels),
    # as it does for RuleBasedStateMachine.TestCase.runTest. (One function per kind, not a parametrized
    # one: the plugin gives a parametrized test a database key through its ``hypothesis`` attribute.)
    test.is_hypothesis_test = True  # type: ignore[attr-defined]
    return test


for _kind in registry.KINDS:  # test_direct, test_sessions, ...: one per kind of the registry
    globals()[f"test_{_kind}"] = _machine_test(_kind)

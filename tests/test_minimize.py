"""The shrink pass after Hypothesis's (stateful/minimize.py): whole steps dropped, same clause."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from stateful import minimize, run_record
from stateful.clauses import clause_of
from stateful.machine import MachineConfig, TerminalMachine
from stateful.minimize import (
    PreconditionUnmet,
    drop_steps,
    invariants_of,
    replay_program,
    reproduced,
    rule_groups,
    shorter_failure,
)
from stateful.reference import faults
from stateful.repro import reported_program

PROGRAM = [
    "state = SomeMachine()",
    "pairs_0 = state.start(terminal='bash', name='main')",
    "state.live_pairs_have_private_servers()",
    "state.list_every_agent()",
    "state.live_pairs_have_private_servers()",
    "pairs_1 = state.launch(agent=0, copies=1, deco=Decoration(), name='x', terminal='sh')",
    "state.live_pairs_have_private_servers()",
    "state.list_every_agent()",
    "state.live_pairs_have_private_servers()",
    "state.read_bad_scrollback(pair=pairs_1, value=True)",
    "state.live_pairs_have_private_servers()",
    "state.teardown()",
]


INVARIANTS = invariants_of(TerminalMachine)


def test_rule_groups_keep_each_rule_with_its_invariant_checks() -> None:
    assert INVARIANTS == {"live_pairs_have_private_servers"}
    groups = rule_groups(PROGRAM, INVARIANTS)
    assert [g[0].split("(")[0] for g in groups] == [
        "pairs_0 = state.start", "state.list_every_agent", "pairs_1 = state.launch", "state.list_every_agent",
        "state.read_bad_scrollback"]
    assert all(g[1:] == ["state.live_pairs_have_private_servers()"] for g in groups)


def test_drop_steps_keeps_what_the_failure_needs_and_what_later_steps_use() -> None:
    """The failure needs the read; the read uses pairs_1, so its launch stays; the first step stays."""
    tried: list[list[str]] = []

    def still_fails(program: list[str]) -> bool:
        tried.append(program)
        return any("read_bad_scrollback" in line for line in program)

    shorter = drop_steps(PROGRAM, still_fails, max_replays=20, invariants=INVARIANTS)
    assert [line for line in shorter if "live_pairs" not in line] == [
        PROGRAM[0], PROGRAM[1], PROGRAM[5], PROGRAM[9], "state.teardown()"]
    assert all(program[0] == PROGRAM[0] and program[-1] == "state.teardown()" for program in tried)
    assert not any(PROGRAM[5] not in program for program in tried)  # pairs_1's launch is never tried without


def test_drop_steps_tries_the_failing_steps_slice_first() -> None:
    """Against a slow server each replay costs seconds: the slice (first step, the failing step and
    the launch of the pair it names) is the first guess, and when it fails the same way it is the
    one replay needed before the single-step pass confirms nothing more can go."""
    tried: list[list[str]] = []

    def still_fails(program: list[str]) -> bool:
        tried.append(program)
        return any("read_bad_scrollback" in line for line in program)

    drop_steps(PROGRAM, still_fails, max_replays=20, invariants=INVARIANTS)
    assert [line for line in tried[0] if "live_pairs" not in line] == [
        PROGRAM[0], PROGRAM[1], PROGRAM[5], PROGRAM[9], "state.teardown()"]


def test_drop_steps_drops_long_runs_of_steps_in_few_replays() -> None:
    """A failure that needs two steps among forty: runs of steps go first, halving, so it takes far
    fewer replays than one per step (the pass's default budget is three per step)."""
    filler = [f"state.list_terminals(agent={i}, deco=Decoration())" for i in range(40)]
    program = ["state = SomeMachine()", "pairs_0 = state.start(terminal='bash', name='main')", *filler[:20],
               "state.scroll(index=0)", *filler[20:], "state.read(pair=pairs_0, scrollback=1)", "state.teardown()"]
    calls: list[list[str]] = []

    def still_fails(candidate: list[str]) -> bool:
        calls.append(candidate)
        return "state.scroll(index=0)" in candidate and "state.read(pair=pairs_0, scrollback=1)" in candidate

    shorter = drop_steps(program, still_fails, max_replays=3 * 43, invariants=INVARIANTS)
    assert shorter == [program[0], program[1], "state.scroll(index=0)", "state.read(pair=pairs_0, scrollback=1)",
                       "state.teardown()"]
    assert len(calls) < 43, len(calls)


def test_drop_steps_stops_at_its_replay_budget() -> None:
    calls: list[int] = []
    drop_steps(PROGRAM, lambda program: calls.append(1) is None and False, max_replays=2, invariants=INVARIANTS)
    assert len(calls) == 2


@contextmanager
def machine_with_fault(fault: str) -> Iterator[type[TerminalMachine]]:
    """A machine bound to a fresh in-process target with ``fault`` on."""
    from stateful.targets.direct import DirectTarget

    with faults.activated(fault):
        target = DirectTarget()
        try:
            machine = type("MinimizeMachine", (TerminalMachine,), {})
            machine.bind(target, MachineConfig(poll_deadline=10))
            yield machine
        finally:
            target.close()


@pytest.fixture
def faulty_direct_machine() -> Iterator[type[TerminalMachine]]:
    """A machine bound to a fresh in-process target with the scrollback-bool fault on."""
    with machine_with_fault("scrollback-bool") as machine:
        yield machine


def test_shorter_failure_drops_the_steps_the_failure_does_not_need(faulty_direct_machine: type[TerminalMachine]) -> None:
    """A real replay on real terminals: the program fails without the extra steps too, so they go,
    and the failure that comes back names the same clause and holds the shorter program."""
    program = [line.replace("SomeMachine", "MinimizeMachine") for line in PROGRAM]
    failure = replay_program(faulty_direct_machine, program)
    assert failure is not None and clause_of(failure) == "read.scrollback-type"
    # the notes hold the program as Hypothesis reports one: up to the failing step, then teardown
    assert reported_program(failure) == program[:10] + ["state.teardown()"]

    shorter = shorter_failure(faulty_direct_machine, failure)
    assert clause_of(shorter) == "read.scrollback-type"
    steps = [line for line in reported_program(shorter) if "live_pairs" not in line]
    assert steps == [program[0], program[1], program[5], program[9], "state.teardown()"]
    assert any("2 of the 5 steps" in str(note) for note in shorter.__notes__)


def test_a_replay_never_runs_a_step_whose_precondition_fails(faulty_direct_machine: type[TerminalMachine]) -> None:
    """Dropping ``another_agent`` would leave ``delete_agent`` deleting the only session: a program
    Hypothesis could never have run. The replay refuses it (so the pass keeps the step)."""
    name = faulty_direct_machine.__name__
    whole = [f"state = {name}()", "pairs_0 = state.start(terminal='bash', name='main')",
             "state.another_agent(same_pair=False)", "state.delete_agent(agent=1)", "state.teardown()"]
    assert replay_program(faulty_direct_machine, whole) is None
    without = [line for line in whole if "another_agent" not in line]
    refused = replay_program(faulty_direct_machine, without)
    assert isinstance(refused, PreconditionUnmet)
    assert "delete_agent" in str(refused)


def final_replay_passed(machine: type[TerminalMachine]) -> tuple[BaseException, BaseException]:
    """A real failure of ``PROGRAM`` and the ``FlakyFailure`` Hypothesis raises when its final replay of
    that program passed: the failure among its exceptions, the program in its notes."""
    from hypothesis.errors import FlakyFailure

    program = [line.replace("SomeMachine", "MinimizeMachine") for line in PROGRAM]
    first = replay_program(machine, program)
    assert first is not None
    flaky = FlakyFailure("Failed on the first call but did not on a subsequent one", [first])
    for line in program:
        flaky.add_note(line)
    return first, flaky


def test_reproduced_replays_a_race_that_hypothesis_final_replay_missed(
        faulty_direct_machine: type[TerminalMachine]) -> None:
    """A FlakyFailure (Hypothesis's final replay of the shrunk program passed) holds the program in
    its notes and the first failure among its exceptions: the program is replayed until it breaks
    that clause again, and that failure comes back (a race shows when the timing lets it)."""
    from hypothesis.errors import FlakyFailure

    first, flaky = final_replay_passed(faulty_direct_machine)
    again = reproduced(faulty_direct_machine, flaky, tries=2)
    assert clause_of(again) == "read.scrollback-type" and again is not first
    assert any("final replay of this program passed" in str(note) for note in again.__notes__)
    other = FlakyFailure("flaky", [AssertionError("not a contract violation")])
    assert reproduced(faulty_direct_machine, other) is other  # nothing to replay for: returned as it was
    assert reproduced(faulty_direct_machine, first) is first  # not flaky: untouched


def test_reproduced_inside_the_handler_of_the_flaky_takes_the_replay_that_failed(
        faulty_direct_machine: type[TerminalMachine]) -> None:
    """The callers (``pytest stateful/``, a campaign's worker) settle a ``Flaky`` inside the ``except``
    that caught it, so Python chains it as the ``__context__`` of whatever a replay raises: that chain
    is not the replay's own race. Before, every replay that failed again looked flaky itself and the
    program was replayed until the tries ran out (omnigent: "not reproduced in 20 replays", 7 of which
    had failed for the clause)."""
    from hypothesis.errors import FlakyFailure

    first, flaky = final_replay_passed(faulty_direct_machine)
    try:
        raise flaky
    except FlakyFailure as caught:
        again = reproduced(faulty_direct_machine, caught, tries=2)
    assert clause_of(again) == "read.scrollback-type" and again is not first
    assert not hasattr(again, "stateful_reproduce_tries")
    assert any("replay 1 after it failed again" in str(note) for note in again.__notes__)


def test_a_replay_fills_the_bundles_so_concurrent_runs_as_it_did(faulty_direct_machine: type[TerminalMachine]) -> None:
    """``concurrent`` needs a non-empty ``pairs`` bundle; a replay binds ``pairs_0`` by exec, so it
    must also put the value in the bundle, or every program with a concurrent step would be refused
    (and neither shrunk by the step-dropping pass nor replayed for a race)."""
    name = faulty_direct_machine.__name__
    program = [f"state = {name}()", "pairs_0 = state.start(terminal='bash', name='main')",
               "pairs_1 = state.launch(agent=0, copies=1, deco=Decoration(), name='x', terminal='sh')",
               "state.concurrent(ops=['read', 'list'], refs=[pairs_0, pairs_1])",
               "state.read_bad_scrollback(pair=pairs_1, value=True)", "state.teardown()"]
    failure = replay_program(faulty_direct_machine, program)
    assert not isinstance(failure, PreconditionUnmet), failure
    assert failure is not None and clause_of(failure) == "read.scrollback-type"
    assert reported_program(failure) == program


def test_reproduced_takes_apart_a_flaky_strategy_definition(faulty_direct_machine: type[TerminalMachine]) -> None:
    """Hypothesis's FlakyStrategyDefinition (a replay drew other choices than the run it replayed)
    holds the violation in its context, and the program, if any, in its notes: the program is
    replayed until that clause shows again. Nested in a FlakyFailure, the same."""
    from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition

    program = [line.replace("SomeMachine", "MinimizeMachine") for line in PROGRAM]
    first = replay_program(faulty_direct_machine, program)
    assert first is not None and clause_of(first) == "read.scrollback-type"
    drew = FlakyStrategyDefinition("Inconsistent data generation! The second run drew more data than the first run.")
    drew.__context__ = first
    for line in program:
        drew.add_note(line)
    again = reproduced(faulty_direct_machine, drew, tries=2)
    assert clause_of(again) == "read.scrollback-type" and again is not first
    assert reported_program(again) == program[:10] + ["state.teardown()"]
    nested = FlakyFailure("Inconsistent results from replaying a test case!", [first, drew])
    assert clause_of(reproduced(faulty_direct_machine, nested, tries=2)) == "read.scrollback-type"
    alone = FlakyStrategyDefinition("Inconsistent data generation!")  # no violation anywhere: nothing to replay for
    assert reproduced(faulty_direct_machine, alone) is alone


def test_reproduced_resumes_hypothesis_from_a_run_with_no_reported_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """When Hypothesis stops in its search or shrinking (a replay went otherwise than the run it
    replayed: FlakyFailure(violation, FlakyStrategyDefinition)), no program is in any notes: the run
    that failed is given back to Hypothesis (its choices, from its traceback) and shrunk on from there;
    what comes back is a real run's violation with the program Hypothesis reports.

    A violation of the search's runs comes with its whole traceback (the final replay's is trimmed of
    Hypothesis's frames unless HYPOTHESIS_NO_TRACEBACK_TRIM is set, as here) and no program in its notes."""
    monkeypatch.setenv("HYPOTHESIS_NO_TRACEBACK_TRIM", "1")
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
    from hypothesis.stateful import run_state_machine_as_test

    from stateful.shrinking import shrink_budget

    quick = settings(max_examples=5, stateful_step_count=4, derandomize=True, deadline=None, database=None,
                     phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    with machine_with_fault("list-sorted") as machine:  # found by the first program's first step
        with pytest.raises(AssertionError) as caught:
            run_state_machine_as_test(machine, settings=quick)
        violation = caught.value
        clause = clause_of(violation)
        assert clause in ("list.baseline", "list.order"), violation
        violation.__notes__ = []  # as a violation of the search's runs comes: no program printed
        setattr(violation, run_record.RECORD_ATTRIBUTE, None)  # nor a record of it (else that is replayed first)
        flaky = FlakyFailure("Inconsistent results from replaying a test case!",
                             [violation, FlakyStrategyDefinition("The second run drew more data than the first run.")])
        with shrink_budget(60, 5):
            again = reproduced(machine, flaky, tries=2, hypothesis_settings=quick)
        assert again is not violation and not isinstance(again, FlakyFailure), again
        assert clause_of(again) == clause
        steps = reported_program(again)
        assert steps[0] == "state = MinimizeMachine()" and "state.start(" in steps[1], steps
        assert any("resumed search 1 after it failed again" in str(note) for note in again.__notes__)
        bare = FlakyFailure("flaky", [AssertionError("not a contract violation")])
        assert reproduced(machine, bare) is bare


def test_reproduced_replays_the_recorded_program_when_hypothesis_reported_none() -> None:
    """Hypothesis stopped in its search or shrinking (a replay of a race went otherwise than the run
    it replayed, so it drew other choices): no program is in the notes and resuming Hypothesis meets
    the same flakiness. The violation's own record of the program as it ran is replayed step by step
    instead, outside Hypothesis, until it breaks the clause again (the outputs-completion-order hunt
    of a CI run ended with ten resumed searches, each a FlakyStrategyDefinition, and no program)."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
    from hypothesis.stateful import run_state_machine_as_test

    quick = settings(max_examples=60, stateful_step_count=6, derandomize=True, deadline=None, database=None,
                     phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    with machine_with_fault("scrollback-bool") as machine:
        with pytest.raises(AssertionError) as caught:
            run_state_machine_as_test(machine, settings=quick)
        violation = caught.value
        record = run_record.record_of(violation)
        assert record is not None and record.steps, "the machine's teardown attaches what the run did"
        violation.__notes__ = []  # as a violation of the search's runs comes: no program printed
        violation.__traceback__ = None  # and no choices to resume Hypothesis from: only the record is left
        flaky = FlakyFailure("Inconsistent results from replaying a test case!",
                             [violation, FlakyStrategyDefinition("Inconsistent data generation!")])
        again = reproduced(machine, flaky, tries=2)
        assert again is not violation and clause_of(again) == "read.scrollback-type", again
        assert any("replay 1 after it failed again" in str(note) for note in again.__notes__), again.__notes__
        assert reported_program(again) == [f"state = {machine.__name__}()", *record.steps, "state.teardown()"]
        hostile = type(violation)("a record holding a line that is no step")  # never run, never written
        run_record.attach(hostile, run_record.RunRecord((*record.steps, "state.teardown(open('x', 'w').close())"), (), ()))
        assert clause_of(hostile) == "read.scrollback-type"
        assert minimize._recorded_program(machine, hostile, {"read.scrollback-type"}) == []


def test_reproduced_resumes_from_the_earlier_failing_runs_of_the_search() -> None:
    """A flaky failure whose own violation does not fail again (or has no run to resume from) is
    resumed from the smallest failing runs the search met (recorded by the machine's teardown with
    failing_run): what comes back is a real run's violation of one of their clauses."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.errors import FlakyStrategyDefinition
    from hypothesis.stateful import run_state_machine_as_test

    from stateful.minimize import FailingRun, failing_run
    from stateful.shrinking import shrink_budget

    quick = settings(max_examples=5, stateful_step_count=4, derandomize=True, deadline=None, database=None,
                     phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    runs: list[FailingRun] = []
    with machine_with_fault("list-sorted") as machine:

        class Recording(machine):  # type: ignore[misc, valid-type]
            def teardown(self) -> None:
                run = failing_run()
                if run is not None:
                    runs.append(run)
                super().teardown()

        Recording.__name__ = machine.__name__
        with pytest.raises(AssertionError) as caught:
            run_state_machine_as_test(Recording, settings=quick)
        clause = clause_of(caught.value)
        assert runs and {run.clause for run in runs} == {clause} and all(run.choices for run in runs), runs
        drew = FlakyStrategyDefinition("The second run stopped drawing earlier than the first run.")
        drew.__context__ = AssertionError("not a contract violation")  # nothing of its own to replay
        with shrink_budget(60, 5):
            again = reproduced(Recording, drew, tries=2, hypothesis_settings=quick, earlier=runs)
        assert clause_of(again) == clause, again
        assert any("resumed search 1 after it failed again" in str(note) for note in again.__notes__)
        assert "state.start(" in reported_program(again)[1]
        assert reproduced(Recording, drew, tries=2, hypothesis_settings=quick) is drew  # no earlier runs: as it was
        assert any("nothing to replay" in str(note) for note in drew.__notes__)

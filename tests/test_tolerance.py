"""A search goes on past programs that go otherwise than an earlier one that began the same way
(stateful.tolerance): what a racing server does to a campaign's searches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from stateful.tolerance import tolerate_other_answers

RUN_SETTINGS = settings(max_examples=60, stateful_step_count=6, database=None, derandomize=True,
                        phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def answering_otherwise() -> type[RuleBasedStateMachine]:
    """A machine whose second rule is enabled by the "server's answer": every other program, as a
    racing server might refuse a launch every other time."""
    answers = iter(range(10**6))

    class Answering(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.answered = next(answers) % 2 == 0

        @rule(n=st.integers(0, 3))
        def always(self, n: int) -> None:
            pass

        @precondition(lambda self: self.answered)
        @rule(n=st.integers(0, 3))
        def when_answered(self, n: int) -> None:
            pass

    return Answering


def test_a_search_on_a_server_that_answers_otherwise_ends_early_in_hypothesis() -> None:
    """The problem (without the tolerance): Hypothesis ends the search."""
    with pytest.raises(FlakyStrategyDefinition):
        run_state_machine_as_test(answering_otherwise(), settings=RUN_SETTINGS)


def test_within_the_tolerance_the_search_goes_on_and_counts_what_went_otherwise() -> None:
    with tolerate_other_answers() as differed:
        run_state_machine_as_test(answering_otherwise(), settings=RUN_SETTINGS)
    assert differed.programs > 0
    note = differed.note()
    assert note is not None and f"{differed.programs} program(s) went otherwise" in note
    assert differed.first and "Inconsistent" not in differed.first  # Hypothesis's detail, not its headline


def test_a_failure_is_still_found_and_the_tolerance_ends_with_its_block() -> None:
    """Tolerating other answers hides no failure: one that every program meets is still raised."""
    machine = answering_otherwise()

    class Failing(machine):  # type: ignore[valid-type, misc]
        @rule()
        def fail(self) -> None:
            raise AssertionError("a contract violation")

    with tolerate_other_answers(), pytest.raises(AssertionError, match="a contract violation"):
        run_state_machine_as_test(Failing, settings=settings(RUN_SETTINGS, phases=[Phase.generate, Phase.shrink]))
    with pytest.raises(FlakyStrategyDefinition):  # the engine is as it was
        run_state_machine_as_test(answering_otherwise(), settings=RUN_SETTINGS)


def test_a_test_case_that_drew_nothing_is_a_searchs_end_not_a_program_that_went_otherwise() -> None:
    """A campaign ends a search from within its next program before it draws (EndSearch); Hypothesis
    concludes that test case when it observes test cases. Without this, every search of a campaign
    run with --observe noted one program that "stopped drawing earlier"."""
    from hypothesis.internal.conjecture.data import Status
    from hypothesis.internal.conjecture.datatree import DataTree

    with tolerate_other_answers() as differed:
        tree = DataTree()
        first = tree.new_observer()
        first.draw_integer(3, was_forced=False, constraints={"min_value": 0, "max_value": 9, "weights": None,
                                                             "shrink_towards": 0})
        first.conclude_test(Status.VALID, None)
        tree.new_observer().conclude_test(Status.VALID, None)  # drew nothing
        assert differed.programs == 0
        shorter = tree.new_observer()
        shorter.draw_integer(3, was_forced=False, constraints={"min_value": 0, "max_value": 9, "weights": None,
                                                               "shrink_towards": 0})
        shorter.draw_boolean(True, was_forced=False, constraints={"p": 0.5})  # the first run drew no more
        assert differed.programs == 1

"""An agent session's conversation stays under the machine's budget (issue 27): every model call
carries it whole, and a model API refuses a request past its size, so a program that lets it grow
is one a correct server cannot run. A call refused for its size is the tester's error."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from hypothesis.stateful import run_state_machine_as_test

from stateful import conversation, meter
from stateful.bench_machine import _ci
from stateful.campaign.gate import failure_key
from stateful.machine import TerminalMachine
from stateful.model import Call
from stateful.targets.base import ConversationTooLarge, TargetError
from stateful.targets.registry import open_target
from stateful.targets.sessions import HttpSession, SessionsTarget
from stateful.world import LIST

SMALL_BUDGET = 1_000_000
CI_PROGRAMS = 10
"""The first 10 ci programs hold the largest reads of the ci set: without a budget one of their
sessions sends the model a request of 2.4 MB (docs/benchmarks.md)."""


def test_a_big_read_is_drawn_small_once_the_conversation_is_large() -> None:
    budget = 4_000_000
    assert conversation.read_scrollback(10_000, budget // 4, budget) == 10_000  # not large yet
    small = conversation.read_scrollback(10_000, budget // 4 + 1, budget)
    assert 0 <= small <= conversation.SMALL_SCROLLBACK
    assert conversation.read_scrollback(2**31, budget, budget) <= conversation.SMALL_SCROLLBACK
    for drawn in (..., 0, 300, -1, True, 1.5, "10", None):  # small, absent or not a scrollback: as drawn
        assert conversation.read_scrollback(drawn, budget, budget) is drawn


def test_a_turn_counts_every_call_and_output_escaped_as_on_the_wire() -> None:
    screen = "é" * 1000  # one UTF-8 character of 2 bytes, escaped to 6 bytes ("\u00e9") in the output's JSON
    output = json.dumps({"screen": screen})  # as the reference tools write it
    size = conversation.turn_bytes([[Call("sys_terminal_read", '{"terminal": "bash"}')]], [[output]])
    assert size > 7 * 1000  # the output's backslashes escaped again in the request: 7 bytes a character
    assert conversation.turn_bytes([], []) > 0  # the user message and the reply


@pytest.fixture(scope="module")
def ci_run() -> Iterator[tuple[meter.Meter, int, str]]:
    """The first ci programs against the embedded stack with the budget forced below what they
    reach: the meter's totals, how many sessions the machine moved on from, and the failure (none
    expected)."""
    hypothesis_settings, config = _ci(CI_PROGRAMS)
    config = dataclasses.replace(config, conversation_budget=SMALL_BUDGET)
    moved = [0]

    class CountedMachine(TerminalMachine):
        def _move_on_from_spent_sessions(self) -> None:
            opened = self.world.opened
            super()._move_on_from_spent_sessions()
            moved[0] += self.world.opened - opened

    failure = ""
    with open_target("sessions") as target:
        CountedMachine.bind(target, config)
        with meter.metering() as totals:
            try:
                run_state_machine_as_test(CountedMachine, settings=hypothesis_settings)
            except Exception as exc:  # noqa: BLE001 - reported by the test that asserts there is none
                failure = f"{type(exc).__name__}: {exc}"[:3000]
    yield totals, moved[0], failure


@pytest.mark.proof
def test_ci_programs_stay_under_a_small_budget_by_moving_on_to_fresh_sessions(
        ci_run: tuple[meter.Meter, int, str]) -> None:
    totals, moved, failure = ci_run
    assert failure == ""
    counted = totals.largest["conversation (count)"]
    # How far the programs' sessions grow depends on how many reads their waits take (load): where none
    # came near the budget, moving on was not due (spent() is unit-tested below); where one did, it moved.
    assert moved > 0 or counted <= SMALL_BUDGET // 2, f"a session reached {counted} bytes and was never replaced"
    largest = totals.largest["model request"]
    assert 0 < largest <= SMALL_BUDGET, f"the mock received a model request of {largest} bytes; {totals.largest}"


@pytest.mark.proof
def test_the_machine_counts_at_least_what_the_server_sends(ci_run: tuple[meter.Meter, int, str]) -> None:
    """The count is an upper bound of the real requests (the mock measures their bodies)."""
    totals, _, _ = ci_run
    assert totals.largest["model request"] <= totals.largest["conversation (count)"]


@pytest.mark.parametrize("error, status, raised, key", [
    ("request body larger than 33554432 bytes", 400, ConversationTooLarge, "error:ConversationTooLarge"),
    ("the model broke", 500, TargetError, "target:TargetError"),
])
def test_a_call_refused_for_its_size_is_a_tester_error_in_one_line(
        monkeypatch: pytest.MonkeyPatch, error: str, status: int, raised: type[Exception], key: str) -> None:
    """The mock refuses the turn's first model call; only a refusal for size is the tester's."""
    configure = HttpSession._configure

    def refusing(self: HttpSession, tag: str, responses: list[dict[str, object]]) -> None:
        configure(self, tag, [{"error": error, "status_code": status}])

    monkeypatch.setattr(HttpSession, "_configure", refusing)
    with open_target("sessions") as target:
        assert isinstance(target, SessionsTarget) and target.carries_conversation
        session = target.open_session()
        with pytest.raises(raised) as failed:
            session.run_turn([[Call(LIST, "{}")]], step_timeout=30)
        session.delete()
    assert type(failed.value) is raised
    assert failure_key(failed.value) == key
    message = str(failed.value)
    assert "\n" not in message and len(message) < 700
    if raised is ConversationTooLarge:
        assert "larger than 33554432 bytes" in message and "a tester error, not a server failure" in message


def test_a_session_is_spent_past_half_its_budget_or_two_largest_turns_from_it() -> None:
    budget = 1_000_000
    assert not conversation.spent(budget // 2, 0, budget)
    assert conversation.spent(budget // 2 + 1, 0, budget)  # past half
    assert not conversation.spent(300_000, 200_000, budget)
    assert conversation.spent(300_000, 360_000, budget)  # two more turns as large as the largest would pass it
    assert not conversation.over(budget - 100, 100, budget)
    assert conversation.over(budget - 100, 101, budget)

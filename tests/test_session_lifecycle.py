"""How the sessions target opens and deletes agent sessions against a slow server.

Registering a session is three round trips one after the other, and a program's teardown deletes
each of its sessions (a walk of its last items, then the DELETE). The target registers the next
session ahead, beside the tester's work, and deletes a program's sessions at once
(docs/benchmarks.md). These tests pin down that a session handed out ahead is a good one, that what
registering it raised is not lost, that nothing registered ahead is left on the server, and that
the DELETEs run at the same time and each one's failure reaches the teardown.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from stateful import machine as machine_module
from stateful.clauses import ContractViolation
from stateful.machine import TerminalMachine
from stateful.model import EventView
from stateful.reference.stack import EmbeddedStack
from stateful.targets.base import AgentSession, ServerError, Step, TargetError
from stateful.targets.sessions import SessionsTarget


class FailingRegistrations(httpx.BaseTransport):
    """Plain HTTP, but the registrations (multipart ``POST /v1/sessions``) numbered in ``fail`` answer 500."""

    def __init__(self, fail: set[int]) -> None:
        self._real = httpx.HTTPTransport()
        self._fail = fail
        self.registrations = 0
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/sessions":
            with self._lock:
                self.registrations += 1
                number = self.registrations
            if number in self._fail:
                return httpx.Response(500, text=f"registration {number} broke", request=request)
        return self._real.handle_request(request)

    def close(self) -> None:
        self._real.close()


def test_the_next_session_is_registered_ahead_and_left_nowhere() -> None:
    transport = FailingRegistrations(set())
    with EmbeddedStack(latency=0.03) as stack:
        target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id, transport=transport)
        try:
            first = target.open_session()
            second = target.open_session()
            assert first.session_id != second.session_id
            for session in (first, second):  # each is a session of its own agent, bound to the runner
                assert stack.service.get(session.session_id).runner_id == stack.runner_id
            first.delete()
            second.delete()
        finally:
            target.close()
        assert transport.registrations == 3  # two handed out, one ahead, which closing the target deleted
        assert stack.service.list_sessions(None, 100) == []


def test_what_registering_ahead_raised_is_raised_when_that_session_is_asked_for() -> None:
    transport = FailingRegistrations({2})  # the first session is fine; the one registered ahead breaks
    with EmbeddedStack() as stack:
        target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id, transport=transport)
        try:
            first = target.open_session()
            with pytest.raises(ServerError) as broke:
                target.open_session()
            assert "registration 2 broke" in str(broke.value)
            third = target.open_session()  # registered now, as nothing was ahead: it works
            assert third.session_id != first.session_id
            first.delete()
            third.delete()
        finally:
            target.close()


class Deleting(AgentSession):
    """A session whose DELETE waits until every session of the teardown is deleting (so they must be
    deleted at once), then fails as told."""

    def __init__(self, together: threading.Barrier, failure: Exception | None = None) -> None:
        self.label = "fake"
        self._together, self._failure = together, failure

    def run_turn(self, steps: list[Step], *, step_timeout: float) -> list[list[str]]:  # type: ignore[override]
        raise AssertionError("not used")

    def events(self) -> list[EventView]:
        return []

    def delete(self) -> None:
        self._together.wait()
        if self._failure is not None:
            raise self._failure


def test_a_programs_sessions_are_deleted_at_once_and_each_failure_is_returned() -> None:
    target = SessionsTarget("http://127.0.0.1:9", "http://127.0.0.1:9", "r1")  # nothing is sent
    try:
        together = threading.Barrier(3, timeout=30)  # one after another, the first would wait alone
        violation = ContractViolation("items.pagination: lost an item")
        refused = RuntimeError("DELETE answered 404")
        failures: list[Any] = target.delete_sessions(
            [Deleting(together), Deleting(together, violation), Deleting(together, refused)])
        assert failures == [None, violation, refused]
    finally:
        target.close()


def teardown_after(deleted: Sequence[Exception | None], monkeypatch: pytest.MonkeyPatch, *, busy: bool = False) -> None:
    """The machine's teardown after a program whose sessions' DELETEs ended as ``deleted`` says."""
    monkeypatch.setattr(machine_module, "event", lambda _: None)  # (outside a Hypothesis test)
    machine = TerminalMachine.__new__(TerminalMachine)  # only what teardown reads
    machine.target = SimpleNamespace(delete_sessions=lambda sessions: list(deleted))  # type: ignore[misc]
    machine.world = SimpleNamespace(live=[SimpleNamespace(index=i, session=None) for i in range(len(deleted))],
                                    busy=busy)
    machine.rules_run = 0
    machine.teardown()


def test_a_delete_error_that_is_neither_a_violation_nor_the_targets_is_reported_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    odd = KeyError("last_id")
    with pytest.raises(KeyError) as raised:
        teardown_after([None, odd], monkeypatch)
    assert raised.value is odd
    assert raised.value.__notes__ == ["raised by the teardown's DELETEs: deleting agent 1: KeyError: 'last_id'"]


def test_a_teardown_reports_every_delete_error_beside_the_one_it_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TargetError) as target:
        teardown_after([ValueError("not JSON"), ServerError("DELETE", "/v1/sessions/s", 502, "bad gateway")], monkeypatch)
    assert "deleting agent 0: ValueError: not JSON; deleting agent 1: ServerError: " in str(target.value)
    lost = ContractViolation("items.pagination: lost an item")
    with pytest.raises(ContractViolation) as violation:
        teardown_after([OSError("reset"), lost], monkeypatch)
    assert violation.value is lost
    assert violation.value.__notes__ == ["the teardown's other DELETEs failed too: deleting agent 0: OSError: reset"]


"""How the sessions target waits for a turn of a slow server: overlapped polls, walks beside the turn.

Against a server whose round trip is about a turn's length, the target polls with several requests
in flight (each the new items and the snapshot) from the moment it posts the turn, and walks the
items in small pages while the turn runs (docs/benchmarks.md). These tests pin down that nothing
of it changes what a turn returns or what is checked, and that no request is left unjudged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, cast

import httpx
import pytest

from stateful import meter
from stateful.clauses import ContractViolation
from stateful.model import Call
from stateful.reference.stack import EmbeddedStack
from stateful.targets.base import ServerError
from stateful.targets import sessions
from stateful.targets.items import ItemLog
from stateful.targets.sessions import PAGE_CHECK_EVERY, HttpSession, SessionsTarget


def call(tool: str, **arguments: Any) -> Call:
    return Call(tool, json.dumps(arguments))


def test_a_slow_server_is_polled_overlapped_and_every_turn_returns_its_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    # A turn of the stack (30-300 ms idle) is short beside its 200-ms round trips, so it is polled
    # overlapped; on a busy machine a turn can take four round trips, and the next one would be polled
    # one request at a time. The overlapped polling is what is tested here, not the choice: every turn
    # counts as short (the choice is SLOW_TURN's, whatever the machine's load).
    monkeypatch.setattr(sessions, "SLOW_TURN", 10**6)
    with EmbeddedStack(latency=0.2) as stack:
        target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id)
        try:
            session = target.open_session()
            with meter.metering() as totals:
                launched = session.run_turn([[call("sys_terminal_launch", terminal="sh", session="a")]],
                                            step_timeout=30)
                assert json.loads(launched[0][0])["status"] in ("launched", "already_running")
                turns = 1
                for n in range(PAGE_CHECK_EVERY + 2):  # a walk of the items beside a turn, too
                    marker = f"mark{n}x"
                    out = session.run_turn([[call("sys_terminal_send", terminal="sh", session="a",
                                                  text=f"echo {marker}\n")],
                                            [call("sys_terminal_list")]], step_timeout=30)
                    turns += 1
                    assert json.loads(out[1][0])[0]["session"] == "a"
            # the first turn of a target is polled one request at a time (its round trip unknown), and
            # maybe the second (the first took the post, a poll and the snapshot one after the other)
            assert session.overlapped_turns >= turns - 2
            assert totals.counts["http snapshot poll"] > turns  # paired with each poll, several in flight
            assert totals.counts["http message post"] == turns
            session.delete()
            assert not session._strays  # every poll answered and judged before the session went
        finally:
            target.close()


def test_polls_that_read_the_same_items_again_must_agree() -> None:
    log = ItemLog(cast(SessionsTarget, None), "s1")
    log.items = [{"id": "i1"}, {"id": "i2"}]
    log.merge("i1", [{"id": "i2"}, {"id": "i3"}])  # sent before i2 was merged: reads it again
    log.merge("i2", [{"id": "i3"}, {"id": "i4"}])
    log.merge("i4", [])
    assert [i["id"] for i in log.items] == ["i1", "i2", "i3", "i4"]
    with pytest.raises(ContractViolation) as disagree:
        log.merge("i2", [{"id": "i4"}, {"id": "i5"}])  # lost i3
    assert disagree.value.clause == "items.pagination"
    assert [i["id"] for i in log.items] == ["i1", "i2", "i3", "i4"]


def test_a_poll_that_failed_after_its_turn_ended_is_reported_not_lost() -> None:
    session = HttpSession(cast(SessionsTarget, None), "s1", "m")
    broke: Future[Any] = Future()
    broke.set_exception(ServerError("GET", "http://x/v1/sessions/s1", 500, "boom"))
    pending: Future[Any] = Future()
    session._strays = [pending, broke]
    with pytest.raises(ServerError):
        session._settle_strays(wait=False)
    assert session._strays == [pending]  # still in flight: kept for later
    threading.Timer(0.05, pending.set_result, args=([],)).start()
    session._settle_strays(wait=True)
    assert session._strays == []


class SlowTransport(httpx.BaseTransport):
    """Plain HTTP; with ``lose`` set, a page of items after a cursor leaves out its first item."""

    def __init__(self) -> None:
        self._real = httpx.HTTPTransport()
        self.lose = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._real.handle_request(request)
        if self.lose.is_set() and request.url.path.endswith("/items") and "after" in request.url.params:
            body = json.loads(response.read())
            if len(body["data"]) > 1 and request.url.params.get("limit") != "1000":
                body["data"] = body["data"][1:]
                body["first_id"] = body["data"][0]["id"]
                return httpx.Response(200, json=body, request=request)
        return response

    def close(self) -> None:
        self._real.close()


@contextmanager
def two_turns_run(first: list[Call]) -> Iterator[tuple[EmbeddedStack, SlowTransport, HttpSession]]:
    """A session of a stack at 30 ms that has run two turns (``first``, then a list, each), the
    second of which walked the first's items from the start (nothing lost there: no ``after``)."""
    transport = SlowTransport()
    with EmbeddedStack(latency=0.03) as stack:
        target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id, transport=transport)
        try:
            session = target.open_session()
            for _ in range(2):
                session.run_turn([first, [call("sys_terminal_list")]], step_timeout=30)
            yield stack, transport, session
        finally:  # (the stack ends whatever is left of the session)
            target.close()


def test_a_walk_beside_a_turn_still_finds_pages_that_are_not_exact() -> None:
    """A walk's violation is raised at a later turn if the walk has ended by then, at the latest by
    the DELETE, which waits for every request still in flight (on a busy machine ci14 saw it at a
    turn, with later walks and polls still running: those are the DELETE's to settle)."""
    with two_turns_run([call("sys_terminal_list")]) as (_, transport, session):
        transport.lose.set()  # small pages lose an item from here on; pages of 1000 do not
        lost: list[ContractViolation] = []
        try:
            for _ in range(PAGE_CHECK_EVERY + 1):
                session.run_turn([[call("sys_terminal_list")]], step_timeout=30)
        except ContractViolation as at_a_turn:
            lost.append(at_a_turn)
        try:
            session.delete()
        except ContractViolation as at_the_delete:  # a walk that ended after the last turn
            lost.append(at_the_delete)
        assert lost and {v.clause for v in lost} == {"items.pagination"}
        assert not session._strays  # the DELETE left nothing in flight, whatever it raised


def test_a_session_whose_last_walk_fails_is_deleted_all_the_same() -> None:
    with two_turns_run([call("sys_terminal_launch", terminal="sh", session="a")]) as (stack, transport, session):
        transport.lose.set()  # the last walk, after an item id, loses one
        with pytest.raises(ContractViolation) as lost:
            session.delete()
        assert lost.value.clause == "items.pagination"
        assert session.session_id not in {s["id"] for s in stack.service.list_sessions(None, 100)}
        assert stack.registry.list(session.session_id) == []  # its terminal went with it


class ShortPages(httpx.BaseTransport):
    """Plain HTTP; with ``cap``, a page of items holds at most 2 (a server may cap its pages: §2.7 asks
    only that following ``after=last_id`` while ``has_more`` yields every item once, in order)."""

    def __init__(self, cap: bool) -> None:
        self._real = httpx.HTTPTransport()
        self._cap = cap

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        limit = request.url.params.get("limit")
        if self._cap and request.url.path.endswith("/items") and limit is not None and int(limit) > 2:
            request = httpx.Request(request.method, request.url.copy_set_param("limit", "2"), headers=request.headers)
        return self._real.handle_request(request)

    def close(self) -> None:
        self._real.close()


@pytest.mark.parametrize("cap", [False, True], ids=["pages-as-asked", "shorter-pages"])
def test_a_walks_pages_are_asked_at_once_and_a_page_that_differs_is_walked_again_one_by_one(
        cap: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    one_by_one: list[int] = []
    walk = ItemLog.walk

    def counted(self: ItemLog, after: str | None, sizes: Any, enough: int | None = None,
                beside: bool = False) -> Any:
        if enough is not None:  # the walk one page after the other (the items' own fetch has no ``enough``)
            one_by_one.append(enough)
        return walk(self, after, sizes, enough, beside)

    monkeypatch.setattr(ItemLog, "walk", counted)
    with EmbeddedStack(latency=0.03) as stack:
        target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id, transport=ShortPages(cap))
        try:
            session = target.open_session()
            for _ in range(PAGE_CHECK_EVERY + 2):  # two walks beside turns, then the last before DELETE
                out = session.run_turn([[call("sys_terminal_list")], [call("sys_terminal_list")]], step_timeout=30)
                assert json.loads(out[1][0]) == []
            session.delete()  # no violation either way: shorter pages are exact too
        finally:
            target.close()
    # as asked, each walk's planned pages were the walk; shorter, each walk was walked again to decide
    assert len(one_by_one) == (3 if cap else 0)

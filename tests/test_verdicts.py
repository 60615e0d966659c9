"""Verdicts of absence ("never showed", "never removed", "never recorded", "never ended") on a slow
server or a busy machine (issue 22).

Each kind of verdict is tried twice: with a probe slower than its deadline, where what it waits for
does come within the deadline (the server's time), which must not be reported; and with what it
waits for truly absent, which must still be reported, on evidence taken late enough (at least two
looks, the last begun after the deadline). The fakes answer from the time a look *began*: a slow
answer is an answer about the moment it was asked, as a busy server's or machine's would be. What
they wait for is never "fast enough by luck": it is there, for the server, before the deadline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import httpx
import pytest

from stateful import after_turn, client, driving, plain_checks
from stateful.clauses import clause_of
from stateful.model import Call, EventView, Life
from stateful.reference.stack import EmbeddedStack
from stateful.targets.base import StepTimeout
from stateful.targets import sessions
from stateful.targets.sessions import SessionsTarget
from stateful.waiting import LOOKS, Wait
from stateful.world import LAUNCH, LIST, PairRef, Shell, Typed, World
from test_after_turn import SOCKET, FakeSession, call, launched, outside_hypothesis, world_with  # noqa: F401 (a fixture)

PANE = 24
DEADLINE = 0.3
"""The poll deadline of these worlds (seconds)."""
SLOW = 0.5
"""How long a slow look takes: longer than the deadline."""


class SlowSession(FakeSession):
    """A fake session whose turns take ``delay`` seconds, each answered as of the moment it began
    (``answer(call, began)``, ``began`` in seconds since the session's ``clock`` was set)."""

    def __init__(self, answer: Callable[[Call, float], Any], delay: float = 0.0) -> None:
        super().__init__(lambda c: answer(c, time.monotonic() - self.clock))
        self.delay = delay
        self.clock = time.monotonic()
        self.turns_began: list[float] = []

    def run_turn(self, steps: Sequence[Sequence[Call]], *, step_timeout: float) -> list[list[str]]:
        self.turns_began.append(time.monotonic() - self.clock)
        outputs = super().run_turn(steps, step_timeout=step_timeout)  # the answer is about this moment
        time.sleep(self.delay)  # ... and arrives late (a slow server or a busy machine)
        return outputs


def screen(*rows: str) -> dict[str, Any]:
    text = "".join(f"{row}\n" for row in rows) + "\n" * (PANE - len(rows))
    return {"terminal": "bash:a", "screen": text, "scrollback_lines": 9000}


def launched_world(answer: Callable[[Call, float], Any], delay: float = 0.0,
                   poll_deadline: float = DEADLINE) -> tuple[World, Any, SlowSession]:
    """A world with bash:a launched on a fake session (the launch answered at once)."""
    session = SlowSession(lambda c, t: launched("bash", "a") if c.tool == LAUNCH else answer(c, t))
    world, agent = world_with(session)
    world.cfg = replace(world.cfg, poll_deadline=poll_deadline)
    session.recorded.append(EventView("session.resource.created", "terminal_bash_a", "bash", "a"))
    after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")]])
    world.recent_turns.clear()  # the launch's turn was quick: the slowness is the slow reads' own
    session.delay = delay
    session.clock = time.monotonic()  # the command's output is due from here on
    return world, agent, session


# -- the one rule --------------------------------------------------------------------------------------

def test_a_wait_is_over_only_at_its_second_look_begun_after_the_deadline() -> None:
    wait = Wait(0.0)
    first = wait.look()
    wait.looked(first)
    assert not wait.over(first)  # one look is never enough, whenever it began
    second = wait.look()
    assert wait.over(second) and wait.looks == LOOKS


def test_a_wait_grows_with_the_measured_slowness_and_its_own_slow_looks() -> None:
    assert Wait(1.0, lambda: 0.4).deadline - Wait(1.0).deadline == pytest.approx(0.4, abs=0.05)
    assert Wait(1.0, lambda: 9.0).deadline - Wait(1.0).deadline == pytest.approx(1.0, abs=0.05)  # at most double
    wait = Wait(1.0)
    began = wait.look()
    time.sleep(0.2)  # a slow look
    wait.looked(began)
    assert wait.deadline - wait.started >= 1.2


def test_eventually_grows_with_the_runs_recent_turns() -> None:
    world, _ = world_with(FakeSession(lambda c: {}))
    world.timed_turn(0.2)  # the run's turns take 0.2 s: the wait grows by as much
    value, polls = world.eventually("nothing", lambda: None, within=0.1)
    assert value is None and polls >= 1
    assert world.last_wait is not None and world.last_wait.waited > 0.3


# -- "never showed" (the machine's reads) ---------------------------------------------------------------

def test_output_due_within_the_deadline_is_not_reported_missing_when_each_read_takes_longer() -> None:
    """The false alarm of issue 22: one read, slower than the deadline, taken as proof."""
    world, agent, session = launched_world(
        lambda c, t: screen("$ echo MK", "MK", "$") if t >= DEADLINE else screen("$ echo MK"), delay=SLOW)
    found = driving.poll_screen(world, agent, PairRef(0, "bash", "a"), lambda s: "\nMK\n" in s, "marker MK",
                                typed=Typed("echo MK", ("echo MK",)))
    assert "\nMK\n" in found
    assert len(session.turns_began) >= 2


def test_output_that_never_shows_is_still_reported_after_reads_begun_late_enough() -> None:
    world, agent, session = launched_world(lambda c, t: screen("$ echo MK"), delay=SLOW)
    with pytest.raises(AssertionError) as failure:
        driving.poll_screen(world, agent, PairRef(0, "bash", "a"), lambda s: "\nMK\n" in s, "marker MK")
    assert clause_of(failure.value) == "read.output-shows"
    assert len(session.turns_began) >= LOOKS and session.turns_began[-1] > DEADLINE
    assert "the last begun after its deadline" in str(failure.value)


# -- "never removed" (a pair whose process exited) ---------------------------------------------------------

def exited_world(removed_after: float | None, turn: float) -> tuple[World, Any, SlowSession]:
    """bash:a launched, then its shell exited (its processes seen gone): ``list`` shows it until
    ``removed_after`` seconds (None: for ever); each turn takes ``turn`` seconds."""
    state: dict[str, Any] = {}

    def answer(c: Call, t: float) -> Any:
        if removed_after is not None and t >= removed_after:
            state["removed"] = True
            return []
        return [{"terminal": "bash", "session": "a", "command": "bash", "running": False, "has_os_env": True,
                 "tmux_socket": SOCKET}]

    world, agent, session = launched_world(answer, delay=turn, poll_deadline=2.0)
    pair = agent.model.pair("bash", "a")
    agent.shells[pair.instance].exited = True
    agent.model = agent.model._with_pair(replace(pair, life=Life.EXITING))
    original = session.events

    def events() -> list[EventView]:  # the exit's deleted event, once the pair is removed
        return original() + ([EventView("session.resource.deleted", "terminal_bash_a", "bash", "a")]
                             if state.get("removed") else [])

    session.events = events  # type: ignore[method-assign]
    world.timed_turn(turn)  # the run has measured its slow turns
    return world, agent, session


def await_removal(world: World, agent: Any) -> None:
    driving.await_exit(world, agent, PairRef(0, "bash", "a"),
                       lambda: agent.model.pair("bash", "a") is None, [call(LIST)],
                       "bash:'a' of agent 0 to be removed", "list.exit-removed", True)


def test_a_removal_a_slow_run_sees_late_is_not_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server removes the pair 0.5 s after the exit, its bound being 0.3 s here, while each of
    the run's turns takes 0.4 s: the bound grows with the measured slowness (0.6 s)."""
    monkeypatch.setattr(driving, "EXIT_REMOVAL", DEADLINE)
    world, agent, session = exited_world(removed_after=0.5, turn=0.4)
    await_removal(world, agent)
    assert agent.model.pair("bash", "a") is None
    assert len(session.turns_began) >= 2


def test_a_pair_never_removed_after_its_exit_is_still_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driving, "EXIT_REMOVAL", DEADLINE)
    world, agent, session = exited_world(removed_after=None, turn=0.4)
    with pytest.raises(AssertionError) as failure:
        await_removal(world, agent)
    assert clause_of(failure.value) == "list.exit-removed"
    assert "seen gone (look" in str(failure.value)
    assert len(session.turns_began) >= 2 and session.turns_began[-1] > 2 * DEADLINE


# -- "never recorded" (resource events polled for) -----------------------------------------------------------

class PolledEvents(SlowSession):
    """Resource events that the target does not record with the calls: each look at them takes
    ``delay`` seconds, and the created event shows from ``shows_at`` seconds on (None: never)."""

    def __init__(self, shows_at: float | None, delay: float) -> None:
        super().__init__(lambda c, t: launched("bash", "a"))
        self.shows_at, self.look_delay = shows_at, delay
        self.looks_began: list[float] = []

    def events(self) -> list[EventView]:
        began = time.monotonic() - self.clock
        self.looks_began.append(began)
        time.sleep(self.look_delay)
        if self.shows_at is not None and began >= self.shows_at:
            return [EventView("session.resource.created", "terminal_bash_a", "bash", "a")]
        return []


def launch_with_polled_events(session: PolledEvents) -> None:
    world, agent = world_with(session)
    world.target.events_with_calls = False  # type: ignore[misc]
    world.cfg = replace(world.cfg, poll_deadline=DEADLINE)
    session.clock = time.monotonic()
    after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")]])


def test_an_event_recorded_within_the_deadline_is_not_reported_missing_when_each_look_is_slow() -> None:
    """The first look (the check's own, slow) starts the wait: the event is recorded within the
    deadline from there, and the wait's next look, begun before it, answers late."""
    session = PolledEvents(shows_at=SLOW + DEADLINE / 2, delay=SLOW)
    launch_with_polled_events(session)
    assert len(session.looks_began) >= 2


def test_an_event_never_recorded_is_still_reported() -> None:
    session = PolledEvents(shows_at=None, delay=SLOW)
    with pytest.raises(AssertionError) as failure:
        launch_with_polled_events(session)
    assert clause_of(failure.value) == "events.recorded"
    assert len(session.looks_began) >= LOOKS + 1 and session.looks_began[-1] > DEADLINE


# -- "never went" (a deleted session's processes, from the probe) -------------------------------------------

class SlowProbe:
    """Ground truth whose every look takes ``delay`` seconds; the terminal is gone from ``gone_at``."""

    def __init__(self, gone_at: float | None, delay: float) -> None:
        self.clock = time.monotonic()
        self.gone_at, self.delay = gone_at, delay
        self.looks_began: list[float] = []

    def _alive(self) -> bool:
        began = time.monotonic() - self.clock
        self.looks_began.append(began)
        time.sleep(self.delay)
        return self.gone_at is None or began < self.gone_at

    def server_alive(self, socket: str) -> bool:
        return self._alive()

    def leftovers(self, processes: Any) -> list[Any]:
        return []


def await_gone_after_delete(probe: SlowProbe) -> None:
    world, agent, _ = launched_world(lambda c, t: {})
    world.probe = probe  # type: ignore[assignment]
    number = agent.model.pair("bash", "a").instance
    after_turn.await_gone(world, agent, number, Shell(socket="/s"))


def test_processes_gone_within_the_deadline_are_not_reported_left_when_the_probe_is_slow() -> None:
    probe = SlowProbe(gone_at=DEADLINE, delay=SLOW)
    await_gone_after_delete(probe)
    assert len(probe.looks_began) >= 2


def test_processes_left_after_a_delete_are_still_reported() -> None:
    probe = SlowProbe(gone_at=None, delay=SLOW)
    with pytest.raises(AssertionError) as failure:
        await_gone_after_delete(probe)
    assert clause_of(failure.value) == "session.delete"
    assert len(probe.looks_began) >= LOOKS and probe.looks_began[-1] > DEADLINE


# -- "never ended" (a turn's end, over HTTP) ------------------------------------------------------------------

class Delayed(httpx.BaseTransport):
    """Carries requests to the embedded stack; ``change(request, response, n)`` may hold an answer
    back (after it was made: an answer about an earlier moment, arriving late) or rewrite it (``n``:
    how many items answers came before)."""

    def __init__(self, change: Callable[[httpx.Request, httpx.Response, int], httpx.Response]) -> None:
        self.inner = httpx.HTTPTransport()
        self.change = change
        self.items_answers = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        if request.method == "GET" and request.url.path.endswith("/items"):
            self.items_answers += 1
            return self.change(request, response, self.items_answers - 1)
        if request.method == "GET" and request.url.path.count("/") == 3:  # the snapshot
            return self.change(request, response, -1)
        return response

    def close(self) -> None:
        self.inner.close()


def rewritten(request: httpx.Request, response: httpx.Response, body: Any) -> httpx.Response:
    return httpx.Response(response.status_code, json=body, request=request)


def items_kept(request: httpx.Request, response: httpx.Response, keep: Callable[[dict[str, Any]], bool]) -> httpx.Response:
    """An items page with only the items ``keep`` keeps (its first_id and last_id naming its ends)."""
    body = response.json()
    data = [i for i in body["data"] if keep(i)]
    return rewritten(request, response, {**body, "data": data, "first_id": data[0]["id"] if data else None,
                                         "last_id": data[-1]["id"] if data else None})


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with EmbeddedStack() as running:
        yield running


def one_turn(stack: EmbeddedStack, change: Callable[[httpx.Request, httpx.Response, int], httpx.Response],
             step_timeout: float) -> list[list[str]]:
    target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id, transport=Delayed(change))
    try:
        session = target.open_session()
        try:
            return session.run_turn([[call(LIST)]], step_timeout=step_timeout)
        finally:
            target.delete_sessions([session])
    finally:
        target.close()


STEP = 1.5


def test_a_turn_is_not_reported_hung_when_its_first_poll_answers_after_the_step_timeout(
        stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "SNAPSHOT_EVERY", 60.0)  # the turn is followed through its items alone

    def late_first(request: httpx.Request, response: httpx.Response, n: int) -> httpx.Response:
        if n == 0:
            time.sleep(2 * STEP)  # the answer (made at once, before the turn could end) arrives late
        return response

    outputs = one_turn(stack, late_first, STEP)
    assert json.loads(outputs[0][0]) == []


def test_a_turn_that_never_ends_is_still_reported_hung(stack: EmbeddedStack) -> None:
    def never_ends(request: httpx.Request, response: httpx.Response, n: int) -> httpx.Response:
        if n < 0:
            return rewritten(request, response, {**response.json(), "status": "running", "responses": {}})
        return items_kept(request, response, lambda i: i.get("type") == "message" and i.get("role") == "user")

    began = time.monotonic()
    with pytest.raises(StepTimeout):
        one_turn(stack, never_ends, STEP)
    assert time.monotonic() - began >= STEP


# -- §2.6: the items once more after the end ----------------------------------------------------------------

def hidden_until_seen_ended() -> Callable[[httpx.Request, httpx.Response, int], httpx.Response]:
    """A server that says the turn ended before its last items show: the outputs and the reply
    are missing from every items answer until two answers after a snapshot said it ended."""
    seen: dict[str, int] = {}

    def change(request: httpx.Request, response: httpx.Response, n: int) -> httpx.Response:
        if n < 0:
            if response.json().get("status") == "idle":
                seen.setdefault("ended", 0)
            return response
        if "ended" in seen and seen["ended"] >= 2:
            return response
        if "ended" in seen:
            seen["ended"] += 1
        return items_kept(request, response, lambda i: i.get("type") not in ("function_call_output", "message")
                          or i.get("role") == "user")

    return change


def test_a_turns_outputs_that_show_just_after_its_end_are_fetched_again(stack: EmbeddedStack) -> None:
    outputs = one_turn(stack, hidden_until_seen_ended(), 30)
    assert json.loads(outputs[0][0]) == []


def test_outputs_never_recorded_are_still_reported(stack: EmbeddedStack) -> None:
    def no_outputs(request: httpx.Request, response: httpx.Response, n: int) -> httpx.Response:
        if n < 0:
            return response
        return items_kept(request, response, lambda i: i.get("type") != "function_call_output")

    with pytest.raises(AssertionError) as failure:
        one_turn(stack, no_outputs, 30)
    assert clause_of(failure.value) == "items.calls"


def test_poll_session_until_terminal_fetches_once_more_after_the_end() -> None:
    """A server whose status says the turn ended (its per-turn ``responses``) before its reply shows."""
    snapshots = iter([
        {"status": "idle", "responses": {"r1": {"status": "completed"}},
         "items": [{"type": "message", "role": "user", "id": "m1", "response_id": "r1", "data": {}}]},
        {"status": "idle", "responses": {"r1": {"status": "completed"}},
         "items": [{"type": "message", "role": "user", "id": "m1", "response_id": "r1", "data": {}},
                   {"type": "message", "role": "assistant", "id": "m2", "response_id": "r1",
                    "data": {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]}}]},
    ])
    http = httpx.Client(base_url="http://fake", transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=next(snapshots))))
    outcome = client.poll_session_until_terminal(http, session_id="s", response_id="r1", timeout=5)
    assert outcome["status"] == "completed" and outcome["output"] == "done"


def test_a_turn_poll_times_out_only_after_a_probe_begun_after_the_timeout() -> None:
    looks: list[float] = []
    start = time.monotonic()

    def slow_never() -> tuple[bool, Any]:
        looks.append(time.monotonic() - start)
        time.sleep(SLOW)
        return False, "running"

    with pytest.raises(client.TurnTimeout):
        client._poll("a turn", slow_never, DEADLINE)
    assert len(looks) >= LOOKS and looks[-1] > DEADLINE


# -- the plain repros' waits ----------------------------------------------------------------------------

def test_a_plain_repros_wait_looks_again_after_a_slow_look() -> None:
    start = time.monotonic()
    looks: list[float] = []
    for _ in plain_checks.polled(DEADLINE, interval=0.01):
        looks.append(time.monotonic() - start)
        time.sleep(SLOW)  # a look slower than the deadline
        if looks[-1] >= DEADLINE:  # what it waits for shows from the deadline on
            break
    else:
        pytest.fail("the wait ended without a look begun after the deadline")
    assert len(looks) == 2


def test_a_plain_repros_wait_ends_when_nothing_shows() -> None:
    start = time.monotonic()
    looks = [time.monotonic() - start for _ in plain_checks.polled(DEADLINE, interval=0.01)]
    assert len(looks) >= LOOKS and looks[-1] > DEADLINE

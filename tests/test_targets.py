"""The direct target and the probe (stateful/targets): turns, concurrency, events, ground truth."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

from stateful.model import Call
from stateful.targets.base import ServerError, StepTimeout, TargetError
from stateful.targets.direct import DirectTarget
from stateful.targets.probe import Probe


def call(tool: str, **args: object) -> Call:
    return Call(f"sys_terminal_{tool}", json.dumps(args))


@pytest.fixture
def target() -> Iterator[DirectTarget]:
    t = DirectTarget()
    try:
        yield t
    finally:
        t.close()


def test_a_turn_runs_steps_in_order_and_calls_of_a_step_together(target: DirectTarget) -> None:
    session = target.open_session()
    first = json.loads(session.run_turn([[call("list")]], step_timeout=30)[0][0])
    assert [(e["terminal"], e["session"]) for e in first] == [("tui", "main")]  # the server-made baseline
    outs = session.run_turn([[call("launch", terminal="bash", session="x")] * 3, [call("list")]], step_timeout=30)
    statuses = sorted(json.loads(o)["status"] for o in outs[0])
    assert statuses == ["already_running", "already_running", "launched"]
    assert [e["session"] for e in json.loads(outs[1][0])] == ["main", "x"]
    kinds = [(e.event_type, e.terminal, e.session) for e in session.events()]
    assert ("session.resource.created", "bash", "x") in kinds
    session.delete()


def test_probe_sees_the_server_and_proves_it_gone(target: DirectTarget) -> None:
    probe = Probe()
    session = target.open_session()
    socket = json.loads(session.run_turn([[call("launch", terminal="sh", session="p")]], step_timeout=30)[0][0])["tmux_socket"]
    assert probe.applicable(socket)
    view = probe.view(socket)
    assert view.alive and view.panes and view.server in view.members
    session.run_turn([[call("close", terminal="sh", session="p")]], step_timeout=30)
    deadline = time.monotonic() + 10
    while probe.leftovers(view.members) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not probe.server_alive(socket)
    assert probe.leftovers(view.members) == []
    assert not probe.applicable("remote-host:/tmp/x.sock")
    session.delete()


def test_a_hang_report_names_the_step_the_place_and_the_panes() -> None:
    hang = StepTimeout(2, [call("read", terminal="bash", session="x")], 60, "http://127.0.0.1:1",
                       detail="1 of 1 calls still running", panes={"bash:x": "$ sleep 1000\n"})
    text = str(hang)
    assert "step 2" in text and "http://127.0.0.1:1" in text and "| $ sleep 1000" in text


# -- the sessions target's per-step timeout ---------------------------------------------------------

SLOW_S = 2.0
"""How long a call marked ``slow`` takes (a slow tool, not a synchronisation)."""


@pytest.fixture
def gated_stack() -> Iterator[tuple[object, threading.Event]]:
    """The embedded stack whose tools take ``SLOW_S`` for a call with the extra key ``slow`` and
    block until the test ends for one with the key ``hang`` (both keys are ignored otherwise)."""
    from stateful.reference.stack import EmbeddedStack, ToolBackend, real_tool_backend

    release = threading.Event()

    def backend(on_event: Callable[[Any], None]) -> ToolBackend:
        real = real_tool_backend(on_event)

        def bind(session_id: str, terminals: Mapping[str, Any]) -> Callable[[str, str], str]:
            run = real.bind(session_id, terminals)

            def gated(name: str, arguments: str) -> str:
                keys = json.loads(arguments)
                if "hang" in keys:
                    release.wait(timeout=120)
                elif "slow" in keys:
                    release.wait(timeout=SLOW_S)
                return run(name, arguments)

            return gated

        return ToolBackend(registry=real.registry, bind=bind, schemas=real.schemas)

    with EmbeddedStack(backend=backend) as stack:
        try:
            yield stack, release
        finally:
            release.set()


def test_the_sessions_timeout_is_per_step_and_a_hang_names_its_step(
        gated_stack: tuple[Any, threading.Event]) -> None:
    from stateful.targets.sessions import SessionsTarget

    stack, release = gated_stack
    target = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id)
    try:
        session = target.open_session()
        # three steps of SLOW_S each: the turn takes longer than one step's timeout, no step does
        slow = [[call("list", slow=True)]] * 3
        outs = session.run_turn(slow, step_timeout=SLOW_S + 3)
        assert [json.loads(step[0]) for step in outs] == [[], [], []]
        with pytest.raises(StepTimeout) as hang:
            session.run_turn([[call("list")], [call("list", hang=True)], [call("list")]], step_timeout=2)
        assert hang.value.step_index == 1 and hang.value.calls == [call("list", hang=True)]
        assert stack.server_url in str(hang.value) and "HANG: step 1" in str(hang.value)
        release.set()  # the stuck tool returns: the interrupted turn ends, the session can go
        session.delete()
    finally:
        target.close()


def test_recorded_arguments_must_be_the_ones_sent() -> None:
    from stateful.http_surface import same_arguments

    sent = '{"terminal": "bash", "session": "a", "x": NaN}'
    assert same_arguments(sent, '{"session":"a","terminal":"bash","x":NaN}')  # re-serialised: the same
    assert not same_arguments(sent, '{"terminal": "bash", "session": "b", "x": NaN}')
    assert not same_arguments(sent, '{"terminal": "bash", "session": "a"}')
    assert not same_arguments(sent, None) and not same_arguments(sent, "{")
    assert same_arguments("{", "{}") and same_arguments("[]", "[]")  # not an object: the harness decides
    assert not same_arguments("{", None)


# -- the sessions target's failures that are not contract violations --------------------------------

class BreakingTransport(httpx.BaseTransport):
    """Plain HTTP until ``broken`` is set; then every GET of a session snapshot answers 500 ``boom``."""

    def __init__(self, broken: threading.Event) -> None:
        self._real = httpx.HTTPTransport()
        self._broken = broken

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        snapshot = request.method == "GET" and path.startswith("/v1/sessions/") and path.count("/") == 3
        if self._broken.is_set() and snapshot:
            return httpx.Response(500, text="Internal Server Error: boom", request=request)
        return self._real.handle_request(request)

    def close(self) -> None:
        self._real.close()


def test_a_5xx_mid_run_is_a_server_error_naming_the_request(contract_target: tuple[str, str, str]) -> None:
    from stateful.targets.sessions import SessionsTarget

    server, mock, runner = contract_target
    broken = threading.Event()
    target = SessionsTarget(server, mock, runner, transport=BreakingTransport(broken))
    try:
        session = target.open_session()
        assert json.loads(session.run_turn([[call("list")]], step_timeout=30)[0][0]) == []
        broken.set()
        with pytest.raises(ServerError) as failure:
            session.run_turn([[call("list")]], step_timeout=30)
        text = str(failure.value)
        assert text.startswith(f"the server broke: GET {server}/v1/sessions/{session.label} answered HTTP 500: "
                               "'Internal Server Error: boom'")
        assert "not a contract violation" in text and "\n" not in text
        broken.clear()
        session.delete()
    finally:
        target.close()


def test_a_server_that_went_away_is_one_line_with_the_url() -> None:
    from stateful.targets.sessions import SessionsTarget

    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    target = SessionsTarget(url, url, "r1")
    try:
        with pytest.raises(TargetError) as failure:
            target.open_session()
    finally:
        target.close()
    assert not isinstance(failure.value, AssertionError)
    assert str(failure.value).startswith(f"cannot reach the server: POST {url}/v1/sessions: ")
    assert failure.value.__suppress_context__ and failure.value.__cause__ is None  # httpx's chain is not shown

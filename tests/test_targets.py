"""The direct target and the probe (stateful/targets): turns, concurrency, events, ground truth."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from stateful.model import Call
from stateful.targets.base import StepTimeout
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

"""Scripted scenarios of an agent server's own suite, over HTTP, against real tmux (CONTRACT §6).

Written only against the §6 helpers and fixtures (the plugin is loaded by ``tests/conftest.py``), so
they run unchanged against an external contract server (``pytest tests/test_e2e_scenarios.py
--server-url ... --mock-llm-url ... --runner-id ...``). Output that appears asynchronously is awaited by polling through further turns
(each turn one ``read``) until a generous deadline: a sleep is never the synchronisation.
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from stateful.e2e import (
    configure_mock_llm,
    create_runner_bound_session,
    poll_session_until_terminal,
    register_inline_agent,
    send_user_message_to_session,
    session_items,
    tool_outputs,
    unique_name,
)
from stateful.model import resource_base_id
from stateful.waiting import Wait

TURN_TIMEOUT = 60.0
"""Per turn; omnigent's first turn may take 25 s on a loaded 2-core machine (CONTRACT §4)."""
OUTPUT_DEADLINE = 15.0
"""How long output may take to show on the screen before a scenario gives up."""


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"call_id": f"call_{uuid.uuid4().hex[:12]}", "name": name, "arguments": json.dumps(arguments)}]}


class Agent:
    """One session of a freshly registered agent, driven turn by turn through the mock's queue."""

    def __init__(self, client: httpx.Client, mock_url: str, runner_id: str, harness: str, model: str) -> None:
        self.client, self.mock_url, self.model = client, mock_url, model
        name = register_inline_agent(
            client, name=unique_name("terminal-seq"), harness=harness, model=model, profile="",
            prompt="You are a terminal test assistant.", mock_llm_base_url=f"{mock_url}/v1",
        )
        self.session_id = create_runner_bound_session(client, agent_name=name, runner_id=runner_id)

    def turn(self, *calls: dict[str, Any], text: str = "done") -> list[Any]:
        """Run one turn making ``calls`` in order; the parsed tool outputs, in order."""
        configure_mock_llm(self.mock_url, [*calls, {"text": text}], key=self.model)
        response_id = send_user_message_to_session(self.client, session_id=self.session_id, content=f"turn {uuid.uuid4().hex[:6]}")
        outcome = poll_session_until_terminal(
            self.client, session_id=self.session_id, response_id=response_id, timeout=TURN_TIMEOUT
        )
        assert outcome["status"] == "completed", outcome
        assert outcome["output"] == text
        return [item["parsed"] for item in tool_outputs(self.client, self.session_id, response_id)]

    def read_until(self, terminal: str, session: str, found: Callable[[str], bool], what: str) -> str:
        """Read (one turn per read) until ``found(screen)``; the screen that showed it."""
        wait = Wait(OUTPUT_DEADLINE)  # "did not show" rests on two reads at least, the last begun after the deadline
        screen = ""
        while True:
            began = wait.look()
            (result,) = self.turn(tool_call("sys_terminal_read", terminal=terminal, session=session))
            wait.looked(began)
            assert "error" not in result, result
            screen = result["screen"]
            if found(screen):
                return screen
            assert not wait.over(began), f"{what} did not show within {OUTPUT_DEADLINE} s:\n{screen}"


@pytest.fixture
def agent(http_client: httpx.Client, mock_llm_server_url: str, live_runner_id: str, harness_name: str, model_name: str) -> Agent:
    return Agent(http_client, mock_llm_server_url, live_runner_id, harness_name, model_name)


def view_entries(client: httpx.Client, session_id: str, terminal: str, session: str) -> list[dict[str, Any]]:
    """The ``/resources/terminals`` entries of one pair. §2.8 leaves an entry's shape open: this stack
    names the pair (``terminal``, ``session``), omnigent gives a resource object whose ``id`` is the
    pair's resource id (§2.4; the names used here never collide, so it is the base id)."""
    rid = resource_base_id(terminal, session)
    data = client.get(f"/v1/sessions/{session_id}/resources/terminals").json()["data"]
    return [r for r in data if (r.get("terminal"), r.get("session")) == (terminal, session)
            or rid in (r.get("id"), r.get("resource_id"))]


def marker_command() -> tuple[str, str]:
    """A command whose output proves it ran: the typed line does not contain what it prints."""
    token = uuid.uuid4().hex[:12]
    return f"echo MK_$((6*7))_{token}", f"MK_42_{token}"


def test_launch_send_echo_and_read_it_back(agent: Agent) -> None:
    command, expected = marker_command()
    launched, sent, first_read = agent.turn(
        tool_call("sys_terminal_launch", terminal="bash", session="s1"),
        tool_call("sys_terminal_send", terminal="bash", session="s1", text=command),
        tool_call("sys_terminal_read", terminal="bash", session="s1"),
    )
    assert launched["status"] == "launched" and launched["terminal"] == "bash" and launched["session"] == "s1"
    assert launched["has_os_env"] is True and launched["tmux_socket"]
    assert sent == {"status": "sent"}
    assert first_read["terminal"] == "bash:s1"
    if expected not in first_read["screen"]:
        agent.read_until("bash", "s1", lambda screen: expected in screen, expected)
    agent.turn(tool_call("sys_terminal_close", terminal="bash", session="s1"))


def test_full_workflow_launch_send_read_list_close_list(agent: Agent, http_client: httpx.Client) -> None:
    command, expected = marker_command()
    (baseline,) = agent.turn(tool_call("sys_terminal_list"))
    baseline_pairs = {(row["terminal"], row["session"]) for row in baseline}
    launched, sent, _, listed = agent.turn(
        tool_call("sys_terminal_launch", terminal="bash", session="work"),
        tool_call("sys_terminal_send", terminal="bash", session="work", text=command),
        tool_call("sys_terminal_read", terminal="bash", session="work"),
        tool_call("sys_terminal_list"),
    )
    assert launched["status"] == "launched" and sent == {"status": "sent"}
    agent.read_until("bash", "work", lambda screen: expected in screen, expected)
    rows = [row for row in listed if (row["terminal"], row["session"]) == ("bash", "work")]
    assert len(rows) == 1
    assert rows[0]["running"] is True and "bash" in rows[0]["command"]  # §1 leaves its exact text open
    assert rows[0]["tmux_socket"] == launched["tmux_socket"] and rows[0]["has_os_env"] is True
    assert len(view_entries(http_client, agent.session_id, "bash", "work")) == 1

    closed, after = agent.turn(
        tool_call("sys_terminal_close", terminal="bash", session="work"),
        tool_call("sys_terminal_list"),
    )
    assert closed == {"terminal": "bash", "session": "work", "status": "closed"}
    assert {(row["terminal"], row["session"]) for row in after} == baseline_pairs
    (again,) = agent.turn(tool_call("sys_terminal_close", terminal="bash", session="work"))
    assert again["status"] == "not_found"
    events = [i for i in session_items(http_client, agent.session_id) if i["type"] == "resource_event"]
    ours = [e for e in events if e["resource_id"] == "terminal_bash_work"]
    assert [e["event_type"] for e in ours] == ["session.resource.created", "session.resource.deleted"]
    assert ours[0]["resource_type"] == "terminal"


def test_interactive_python_driven_by_two_sends(agent: Agent) -> None:
    left, right = random.randint(1000, 9999), random.randint(1000, 9999)
    launched, sent = agent.turn(
        tool_call("sys_terminal_launch", terminal="bash", session="py"),
        tool_call("sys_terminal_send", terminal="bash", session="py", text="python3 -q"),
    )
    assert launched["status"] == "launched" and sent == {"status": "sent"}
    # A REPL flushes its input when it starts: wait for its prompt before typing (CONTRACT §1).
    # Screen rows come without trailing blanks, so the prompt ">>> " shows as ">>>".
    agent.read_until("bash", "py", lambda screen: re.search(r"^>>>", screen, re.M) is not None, "the >>> prompt")
    (sent,) = agent.turn(tool_call("sys_terminal_send", terminal="bash", session="py", text=f"{left} * {right}"))
    assert sent == {"status": "sent"}
    expected = str(left * right)
    agent.read_until("bash", "py", lambda screen: re.search(rf"^{expected}$", screen, re.M) is not None, expected)
    agent.turn(
        tool_call("sys_terminal_send", terminal="bash", session="py", text="exit()"),
        tool_call("sys_terminal_close", terminal="bash", session="py"),
    )


def test_sessions_cannot_see_each_others_terminals(
    http_client: httpx.Client, mock_llm_server_url: str, live_runner_id: str, harness_name: str
) -> None:
    owner = Agent(http_client, mock_llm_server_url, live_runner_id, harness_name, unique_name("mock-owner"))
    other = Agent(http_client, mock_llm_server_url, live_runner_id, harness_name, unique_name("mock-other"))
    (launched,) = owner.turn(tool_call("sys_terminal_launch", terminal="bash", session="private"))
    assert launched["status"] == "launched"
    listed, read, sent, closed = other.turn(
        tool_call("sys_terminal_list"),
        tool_call("sys_terminal_read", terminal="bash", session="private"),
        tool_call("sys_terminal_send", terminal="bash", session="private", text="echo intruder"),
        tool_call("sys_terminal_close", terminal="bash", session="private"),
    )
    assert ("bash", "private") not in {(row["terminal"], row["session"]) for row in listed}
    assert read == {"error": "terminal 'bash:private' not found or not running"}
    assert sent == {"error": "terminal 'bash:private' not found or not running"}
    assert closed["status"] == "not_found"
    # The other session's launch of the same pair is its own terminal, on its own tmux server.
    (own,) = other.turn(tool_call("sys_terminal_launch", terminal="bash", session="private"))
    assert own["status"] == "launched" and own["tmux_socket"] != launched["tmux_socket"]
    assert len(view_entries(http_client, other.session_id, "bash", "private")) == 1
    (still,) = owner.turn(tool_call("sys_terminal_list"))
    assert [r["tmux_socket"] for r in still if r["session"] == "private"] == [launched["tmux_socket"]]
    for agent in (owner, other):
        agent.turn(tool_call("sys_terminal_close", terminal="bash", session="private"))


def test_terminals_outlive_turns_and_several_calls_run_in_one_reply(agent: Agent) -> None:
    launches = {
        "tool_calls": [
            {"call_id": f"l{i}", "name": "sys_terminal_launch", "arguments": json.dumps({"terminal": "bash", "session": "same"})}
            for i in range(3)
        ]
    }
    configure_mock_llm(agent.mock_url, [launches, {"text": "done"}], key=agent.model)
    response_id = send_user_message_to_session(agent.client, session_id=agent.session_id, content="launch three")
    assert poll_session_until_terminal(agent.client, session_id=agent.session_id, response_id=response_id, timeout=TURN_TIMEOUT)["status"] == "completed"
    results = [item["parsed"] for item in tool_outputs(agent.client, agent.session_id, response_id)]
    assert sorted(r["status"] for r in results) == ["already_running", "already_running", "launched"]
    assert len({r["tmux_socket"] for r in results}) == 1
    (listed,) = agent.turn(tool_call("sys_terminal_list"))  # a later turn still sees it
    assert [(r["session"], r["running"]) for r in listed if r["session"] == "same"] == [("same", True)]
    agent.turn(tool_call("sys_terminal_close", terminal="bash", session="same"))


# -- nothing leaks (embedded stack only) --------------------------------------------------------------
def _processes_mentioning(fragment: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def _wait_gone(socket_path: str) -> list[str]:
    import time

    wait = Wait(OUTPUT_DEADLINE)  # what is left is only reported after a look begun after the deadline
    while True:
        began = wait.look()
        left = _processes_mentioning(os.path.dirname(socket_path))
        wait.looked(began)
        if not left or wait.over(began):
            return left
        time.sleep(0.05)


def test_delete_and_stack_shutdown_leave_no_tmux_process() -> None:
    from stateful.reference.stack import EmbeddedStack

    with EmbeddedStack() as stack, httpx.Client(base_url=stack.server_url, headers={"Origin": "omnigent://internal"}, timeout=30) as client:
        kept = Agent(client, stack.mock_llm_url, stack.runner_id, "openai-agents", unique_name("mock-kept"))
        deleted = Agent(client, stack.mock_llm_url, stack.runner_id, "openai-agents", unique_name("mock-del"))
        (first,) = kept.turn(tool_call("sys_terminal_launch", terminal="bash", session="a"))
        launched, _ = deleted.turn(
            tool_call("sys_terminal_launch", terminal="bash", session="b"),
            tool_call("sys_terminal_send", terminal="bash", session="b", text="sleep 300 &"),
        )
        assert _processes_mentioning(os.path.dirname(launched["tmux_socket"]))
        assert client.delete(f"/v1/sessions/{deleted.session_id}").status_code == 200
        assert _wait_gone(launched["tmux_socket"]) == []
        assert _processes_mentioning(os.path.dirname(first["tmux_socket"]))  # the other session's lives on
    assert _wait_gone(first["tmux_socket"]) == []
    assert not os.path.exists(first["tmux_socket"])

"""The sessions API (CONTRACT §2) over HTTP, with a fake tool backend so only the plumbing is tested.

Terminal behaviour through HTTP (real tmux) is in ``test_e2e_scenarios.py``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest
import yaml

from stateful.e2e import (
    HEADERS,
    agent_spec_yaml,
    configure_mock_llm,
    create_runner_bound_session,
    poll_session_until_terminal,
    register_inline_agent,
    send_user_message_to_session,
    session_items,
    unique_name,
    turn_items,
    turn_outcome,
)
from stateful.reference import faults
from stateful.reference.agent import LoopSettings
from stateful.reference.bundle import build_bundle
from stateful.reference.stack import EmbeddedStack, ToolBackend

DEADLINE = 15.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeRegistry:
    """Stands in for TerminalRegistry: remembers sessions' 'terminals' and emits resource events."""

    def __init__(self, on_event: Callable[[Any], None]) -> None:
        self.on_event = on_event
        self.closed_sessions: list[str] = []
        self.shut_down = False
        self.broken: set[str] = set()
        """Sessions whose listing fails with an unexpected exception (a bug inside the server)."""

    def list(self, session_id: str) -> list[Any]:
        if session_id in self.broken:
            raise RuntimeError(f"internal detail of {session_id}: /secret/path")
        return []

    def close_session(self, session_id: str) -> int:
        self.closed_sessions.append(session_id)
        return 0

    def shutdown(self) -> None:
        self.shut_down = True


class _Event:
    def __init__(self, session_id: str, event_type: str, name: str) -> None:
        self.session_id, self.event_type = session_id, event_type
        self.resource_id = f"terminal_{name}"
        self.resource = {"terminal": name, "session": "s", "tmux_socket": "/nowhere", "command": "bash"}


def fake_backend(on_event: Callable[[Any], None]) -> ToolBackend:
    registry = FakeRegistry(on_event)
    meeting = threading.Barrier(2, timeout=DEADLINE)

    def bind(session_id: str, terminals: Mapping[str, Any]) -> Callable[[str, str], str]:
        def run(name: str, arguments: str) -> str:
            if name == "emit":
                on_event(_Event(session_id, "session.resource.created", "bash"))
            if name == "meet":  # returns only when two sessions' calls run at the same time
                try:
                    meeting.wait()
                except threading.BrokenBarrierError:
                    return json.dumps({"met": False})
                return json.dumps({"met": True})
            return json.dumps({"tool": name, "arguments": arguments, "declared": sorted(terminals)})

        return run

    schemas = [{"type": "function", "name": n, "description": n, "parameters": {"type": "object"}} for n in ("echo", "emit", "meet")]
    return ToolBackend(registry=registry, bind=bind, schemas=schemas)


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with EmbeddedStack(backend=fake_backend, settings=LoopSettings(max_model_calls=8)) as running:
        yield running


@pytest.fixture
def client(stack: EmbeddedStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.server_url, headers=HEADERS, timeout=30.0) as http:
        yield http


def new_session(client: httpx.Client, stack: EmbeddedStack, model: str) -> str:
    name = register_inline_agent(
        client, name=unique_name("agent"), harness="openai-agents", model=model, profile="",
        prompt="You are a test agent.", mock_llm_base_url=f"{stack.mock_llm_url}/v1",
    )
    return create_runner_bound_session(client, agent_name=name, runner_id=stack.runner_id)


def run_turn(client: httpx.Client, session_id: str, text: str = "go") -> dict[str, Any]:
    response_id = send_user_message_to_session(client, session_id=session_id, content=text)
    return poll_session_until_terminal(client, session_id=session_id, response_id=response_id, timeout=DEADLINE)


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def call(name: str, call_id: str, arguments: str = "{}") -> dict[str, Any]:
    return {"call_id": call_id, "name": name, "arguments": arguments}


# -- the happy paths ------------------------------------------------------------------------------
def test_health_and_runner(client: httpx.Client, stack: EmbeddedStack) -> None:
    assert client.get("/health").status_code == 200
    assert client.get(f"/v1/runners/{stack.runner_id}/status").json()["online"] is True
    reply = client.get("/v1/runners/runner_nope/status")
    assert reply.status_code == 404 and "runner_nope" in reply.json()["error"]


@pytest.mark.parametrize("given", ["http://127.0.0.1:9/v1", "http://127.0.0.1:9", "http://127.0.0.1:9/v1/", "http://h/x"])
def test_the_agent_spec_holds_the_mock_base_url_as_given(given: str) -> None:
    """CONTRACT §6: ``mock_llm_base_url`` goes into ``executor.auth.base_url`` as given, no ``/v1``
    added or stripped (a helper that added it let repros pass here and fail in omnigent's suite)."""
    text = agent_spec_yaml(name="a", harness="openai-agents", model="m", prompt="p", mock_llm_base_url=given)
    assert yaml.safe_load(text)["executor"]["auth"]["base_url"] == given


def test_registration_listing_and_sessions(client: httpx.Client, stack: EmbeddedStack) -> None:
    name = unique_name("reg")
    text = agent_spec_yaml(name=name, harness="openai-agents", model="m", prompt="p",
                           mock_llm_base_url=f"{stack.mock_llm_url}/v1")
    reply = client.post("/v1/sessions", data={"metadata": "{}"}, files={"bundle": ("b.tar.gz", build_bundle(name, text))})
    assert reply.status_code == 201
    body = reply.json()
    assert body["agent_name"] == name and body["session_id"] and body["agent_id"]
    listed = client.get("/v1/sessions", params={"agent_name": name, "limit": 1}).json()["data"]
    assert [row["id"] for row in listed] == [body["session_id"]] and listed[0]["agent_id"] == body["agent_id"]
    created = client.post("/v1/sessions", json={"agent_id": body["agent_id"]})
    assert created.status_code == 201 and created.json()["id"] != body["session_id"]
    newest = client.get("/v1/sessions", params={"agent_name": name, "limit": 1}).json()["data"]
    assert newest[0]["id"] == created.json()["id"]
    patched = client.patch(f"/v1/sessions/{created.json()['id']}", json={"runner_id": stack.runner_id})
    assert patched.status_code == 200 and patched.json()["runner_id"] == stack.runner_id
    snapshot = client.get(f"/v1/sessions/{created.json()['id']}").json()
    assert snapshot["status"] == "idle" and snapshot["items"] == [] and snapshot["last_task_error"] is None


def test_turn_items_snapshot_and_flat_items(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("echo", "e1", '{"x": 1}')]}, {"text": "all done"}], key=model)
    session_id = new_session(client, stack, model)
    outcome = run_turn(client, session_id)
    assert outcome["status"] == "completed" and outcome["output"] == "all done" and outcome["error"] is None
    snapshot = client.get(f"/v1/sessions/{session_id}").json()
    assert snapshot["status"] == "idle"
    nested = snapshot["items"]
    assert [i["type"] for i in nested] == ["message", "function_call", "function_call_output", "message"]
    assert nested[0]["data"]["role"] == "user" and nested[0]["response_id"] == outcome["id"]
    assert nested[1]["data"] == {"name": "echo", "arguments": '{"x": 1}', "call_id": "e1"}
    flat = session_items(client, session_id)
    assert [i["id"] for i in flat] == [i["id"] for i in nested]
    assert flat[2]["call_id"] == "e1" and json.loads(flat[2]["output"])["tool"] == "echo"
    assert all({"id", "response_id", "type", "status", "created_at"} <= set(i) for i in flat)
    assert all(i["response_id"] == outcome["id"] for i in flat)


def test_resource_events_become_items(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("emit", "r1")]}, {"text": "ok"}], key=model)
    session_id = new_session(client, stack, model)
    assert run_turn(client, session_id)["status"] == "completed"
    events = [i for i in session_items(client, session_id) if i["type"] == "resource_event"]
    assert len(events) == 1
    assert events[0]["event_type"] == "session.resource.created" and events[0]["resource_type"] == "terminal"
    assert events[0]["resource_id"] == "terminal_bash" and events[0]["resource"]["terminal"] == "bash"


def test_turns_of_one_session_queue_in_order(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(
        stack.mock_llm_url,
        [{"text": "first", "block": True}, {"tool_calls": [call("echo", "q1")]}, {"text": "second"}],
        key=model,
    )
    session_id = new_session(client, stack, model)
    first = send_user_message_to_session(client, session_id=session_id, content="one")
    wait_for(lambda: httpx.get(f"{stack.mock_llm_url}/gate/pending").json()["pending"], "the first turn to block")
    queued = client.post(
        f"/v1/sessions/{session_id}/events",
        json={"type": "message", "data": {"role": "user", "content": [{"type": "input_text", "text": "two"}]}},
    )
    assert queued.status_code == 202 and queued.json()["queued"] is True
    snapshot = client.get(f"/v1/sessions/{session_id}").json()
    assert snapshot["status"] == "running"
    assert queued.json()["item_id"] not in [i["id"] for i in snapshot["items"]]  # not started yet
    httpx.post(f"{stack.mock_llm_url}/gate/release").raise_for_status()
    assert poll_session_until_terminal(client, session_id=session_id, response_id=first, timeout=DEADLINE)["output"] == "first"
    wait_for(lambda: client.get(f"/v1/sessions/{session_id}").json()["status"] == "idle", "the queued turn")
    texts = [
        "".join(part["text"] for part in item["content"])
        for item in session_items(client, session_id) if item["type"] == "message"
    ]
    assert texts == ["one", "first", "two", "second"]


def test_sessions_run_in_parallel(client: httpx.Client, stack: EmbeddedStack) -> None:
    sessions = []
    for _ in range(2):
        model = unique_name("m")
        configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("meet", "m")]}, {"text": "ok"}], key=model)
        sessions.append(new_session(client, stack, model))
    ids = [send_user_message_to_session(client, session_id=s, content="go") for s in sessions]
    for session_id, response_id in zip(sessions, ids):
        outcome = poll_session_until_terminal(client, session_id=session_id, response_id=response_id, timeout=DEADLINE)
        assert outcome["status"] == "completed"
        output = [i for i in session_items(client, session_id) if i["type"] == "function_call_output"]
        assert json.loads(output[0]["output"]) == {"met": True}


def test_items_pagination_is_exact_over_1000_items(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    replies = [{"tool_calls": [call("echo", f"p{r}_{i}") for i in range(100)]} for r in range(6)] + [{"text": "done"}]
    configure_mock_llm(stack.mock_llm_url, replies, key=model)
    session_id = new_session(client, stack, model)
    assert run_turn(client, session_id)["status"] == "completed"
    everything = client.get(f"/v1/sessions/{session_id}").json()["items"]
    ids = [item["id"] for item in everything]
    assert len(ids) == 1 + 6 * 200 + 1 and len(set(ids)) == len(ids)

    def walk(order: str, limit: int, cursor: str) -> list[str]:
        seen: list[str] = []
        params: dict[str, Any] = {"order": order, "limit": limit}
        while True:
            page = client.get(f"/v1/sessions/{session_id}/items", params=params).json()
            assert page["object"] == "list"
            got = [item["id"] for item in page["data"]]
            assert len(got) <= limit and (page["first_id"], page["last_id"]) == ((got[0], got[-1]) if got else (None, None))
            seen.extend(got)
            if not page["has_more"]:
                return seen
            params[cursor] = got[-1] if cursor == "after" else got[0]

    assert walk("asc", 1000, "after") == ids
    assert walk("desc", 1000, "after") == ids[::-1]
    assert walk("asc", 7, "after") == ids
    assert walk("desc", 333, "after") == ids[::-1]
    tail = client.get(f"/v1/sessions/{session_id}/items", params={"order": "asc", "limit": 5, "before": ids[10]}).json()
    assert [i["id"] for i in tail["data"]] == ids[5:10] and tail["has_more"] is True
    between = client.get(f"/v1/sessions/{session_id}/items", params={"order": "asc", "limit": 1000, "after": ids[3], "before": ids[9]}).json()
    assert [i["id"] for i in between["data"]] == ids[4:9] and between["has_more"] is False
    desc_before = client.get(f"/v1/sessions/{session_id}/items", params={"order": "desc", "limit": 3, "before": ids[100]}).json()
    assert [i["id"] for i in desc_before["data"]] == [ids[103], ids[102], ids[101]]


def test_items_page_gap_fault_loses_items(client: httpx.Client, stack: EmbeddedStack) -> None:
    """The planted fault is live in this module (the state machine must be able to catch it)."""
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("echo", f"g{i}") for i in range(5)]}, {"text": "x"}], key=model)
    session_id = new_session(client, stack, model)
    run_turn(client, session_id)
    complete = [item["id"] for item in session_items(client, session_id, page_size=3)]
    with faults.activated("items-page-gap"):
        gappy = [item["id"] for item in session_items(client, session_id, page_size=3)]
    assert len(complete) == 12 and len(gappy) < len(complete) and set(gappy) < set(complete)


# -- turn failures ---------------------------------------------------------------------------------
def test_model_error_fails_the_turn(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"error": "upstream exploded", "status_code": 500}, {"text": "later"}], key=model)
    session_id = new_session(client, stack, model)
    outcome = run_turn(client, session_id)
    assert outcome["status"] == "failed"
    assert outcome["error"]["code"] == "model_error" and "upstream exploded" in outcome["error"]["message"]
    snapshot = client.get(f"/v1/sessions/{session_id}").json()
    assert snapshot["status"] == "failed" and snapshot["last_task_error"] == outcome["error"]
    # The session recovers: the next turn runs and clears the error.
    assert run_turn(client, session_id)["output"] == "later"
    assert client.get(f"/v1/sessions/{session_id}").json()["last_task_error"] is None


def test_runaway_loop_is_cut_off(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("echo", f"r{i}")]} for i in range(20)], key=model)
    session_id = new_session(client, stack, model)
    outcome = run_turn(client, session_id)
    assert outcome["status"] == "failed" and outcome["error"]["code"] == "max_model_calls"
    assert "8 model calls" in outcome["error"]["message"]
    assert len(httpx.get(f"{stack.mock_llm_url}/mock/requests", params={"key": model}).json()["requests"]) == 8


def test_interrupt_stops_a_running_turn(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"text": "held", "block": True}, {"text": "next"}], key=model)
    session_id = new_session(client, stack, model)
    response_id = send_user_message_to_session(client, session_id=session_id, content="go")
    wait_for(lambda: httpx.get(f"{stack.mock_llm_url}/gate/pending").json()["pending"], "the model call to block")
    reply = client.post(f"/v1/sessions/{session_id}/events", json={"type": "interrupt"})
    assert reply.status_code == 202
    outcome = poll_session_until_terminal(client, session_id=session_id, response_id=response_id, timeout=DEADLINE)
    assert outcome["status"] == "failed" and outcome["error"]["code"] == "interrupted"
    httpx.post(f"{stack.mock_llm_url}/gate/release")
    assert run_turn(client, session_id)["output"] == "next"
    # Nothing of the abandoned reply reached the history.
    assert "held" not in json.dumps(session_items(client, session_id))


def test_delete_closes_terminals_and_forgets_the_session(client: httpx.Client, stack: EmbeddedStack) -> None:
    session_id = new_session(client, stack, unique_name("m"))
    reply = client.delete(f"/v1/sessions/{session_id}")
    assert reply.status_code == 200 and reply.json()["deleted"] is True
    assert session_id in stack.registry.closed_sessions
    assert client.get(f"/v1/sessions/{session_id}").status_code == 404


def test_each_session_binds_its_own_tools(client: httpx.Client, stack: EmbeddedStack) -> None:
    model = unique_name("m")
    configure_mock_llm(stack.mock_llm_url, [{"tool_calls": [call("echo", "d")]}, {"text": "ok"}], key=model)
    session_id = new_session(client, stack, model)
    run_turn(client, session_id)
    output = [i for i in session_items(client, session_id) if i["type"] == "function_call_output"][0]
    assert json.loads(output["output"])["declared"] == ["bash"]


# -- bad requests: 4xx with a JSON error, never a 500, never a hang -------------------------------
def targz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


GOOD_YAML = b"name: x\nexecutor: {model: m, auth: {base_url: 'http://127.0.0.1:9/v1'}}\nterminals: {bash: {command: bash}}\n"

BAD_BUNDLES: dict[str, bytes] = {
    "not-gzip": b"plain bytes",
    "gzip-not-tar": gzip.compress(b"this is not a tar archive" * 40),
    "truncated-gzip": targz({"x.yaml": GOOD_YAML})[:30],
    "no-yaml": targz({"readme.txt": b"hi"}),
    "two-yamls": targz({"a.yaml": GOOD_YAML, "b.yaml": GOOD_YAML}),
    "bad-yaml": targz({"x.yaml": b"name: [unclosed"}),
    "yaml-list": targz({"x.yaml": b"- 1\n- 2\n"}),
    "empty-spec": targz({"x.yaml": b""}),
    "no-model": targz({"x.yaml": b"name: x\nexecutor: {auth: {base_url: 'http://h/v1'}}\n"}),
    "bad-terminal": targz({"x.yaml": b"name: x\nexecutor: {model: m, auth: {base_url: 'http://h/v1'}}\nterminals: {bash: {command: 5}}\n"}),
    "bad-scrollback": targz({"x.yaml": b"name: x\nexecutor: {model: m, auth: {base_url: 'http://h/v1'}}\nterminals: {bash: {command: bash, scrollback: -1}}\n"}),
    "not-utf8": targz({"x.yaml": b"name: \xff\xfe"}),
    "bomb": gzip.compress(b"\0" * (9 * 1024 * 1024)),
    "deep-yaml": targz({"x.yaml": b"a: " + b"[" * 20_000 + b"]" * 20_000}),
    "alias-loop": targz({"x.yaml": b"name: &n [*n]\nexecutor: {model: m, auth: {base_url: 'http://h/v1'}}\n"}),
    "symlink-only": b"",  # replaced below
}


def _symlink_bundle() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("x.yaml")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        archive.addfile(info)
    return buffer.getvalue()


BAD_BUNDLES["symlink-only"] = _symlink_bundle()


@pytest.mark.parametrize("bundle", list(BAD_BUNDLES.values()), ids=list(BAD_BUNDLES))
def test_bad_bundles_are_rejected_clearly(client: httpx.Client, bundle: bytes) -> None:
    reply = client.post("/v1/sessions", data={"metadata": "{}"}, files={"bundle": ("b.tar.gz", bundle)})
    assert reply.status_code == 400, reply.text
    assert isinstance(reply.json()["error"], str) and len(reply.json()["error"]) > 10


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"data": {"metadata": "{}"}}, 415),  # no file part: httpx sends a urlencoded form
        ({"data": {"metadata": "{}"}, "files": {"other": ("o", b"x")}}, 400),  # multipart, no bundle
        ({"data": {"metadata": "{"}, "files": {"bundle": ("b", targz({"x.yaml": GOOD_YAML}))}}, 400),
        ({"data": {"metadata": "[]"}, "files": {"bundle": ("b", targz({"x.yaml": GOOD_YAML}))}}, 400),
        ({"data": {"metadata": "{}", "bundle": "not a file part"}, "files": {"o": ("o", b"x")}}, 400),
        ({"content": b"--xx\r\ngarbage", "headers": {"content-type": "multipart/form-data; boundary=xx"}}, 400),
        ({"content": b"whatever", "headers": {"content-type": "multipart/form-data"}}, 400),
        ({"content": b"a=b", "headers": {"content-type": "application/x-www-form-urlencoded"}}, 415),
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
        ({"content": b"[" * 100_000 + b"]" * 100_000, "headers": {"content-type": "application/json"}}, 400),
        ({"content": b"\xff\xfe{}", "headers": {"content-type": "application/json"}}, 400),
        ({"content": b"null", "headers": {"content-type": "application/json"}}, 400),
        ({"content": b"{}", "headers": {"content-type": "text/plain"}}, 415),
        ({"content": b'{"agent_id": "agent_unknown"}'}, 415),  # JSON, but not declared JSON: a web form could send it
        ({"data": {"metadata": "[" * 50_000}, "files": {"bundle": ("b", targz({"x.yaml": GOOD_YAML}))}}, 400),
        ({"json": ["agent_id"]}, 400),
        ({"json": {"agent_id": 5}}, 400),
        ({"json": {}}, 400),
        ({"json": {"agent_id": "agent_unknown"}}, 404),
    ],
)
def test_bad_session_creation(client: httpx.Client, kwargs: dict[str, Any], status: int) -> None:
    reply = client.post("/v1/sessions", **kwargs)
    assert reply.status_code == status, reply.text
    assert isinstance(reply.json()["error"], str)


def test_oversized_bodies_are_refused(client: httpx.Client) -> None:
    big = b"x" * (8 * 1024 * 1024 + 1)
    reply = client.post("/v1/sessions", content=big, headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "larger" in reply.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
        for _ in range(9):
            yield b"y" * (1024 * 1024)

    reply = client.post("/v1/sessions", content=chunks(), headers={"content-type": "application/json"})
    assert reply.status_code == 413
    reply = client.post("/v1/sessions", files={"bundle": ("b", big)}, data={"metadata": "{}"})
    assert reply.status_code == 413


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/sessions/conv_missing", None),
        ("PATCH", "/v1/sessions/conv_missing", {"runner_id": "r"}),
        ("DELETE", "/v1/sessions/conv_missing", None),
        ("POST", "/v1/sessions/conv_missing/events", {"type": "interrupt"}),
        ("GET", "/v1/sessions/conv_missing/items", None),
        ("GET", "/v1/sessions/conv_missing/resources/terminals", None),
        ("GET", "/v1/nothing/here", None),
    ],
)
def test_unknown_ids_are_404(client: httpx.Client, method: str, path: str, body: Any) -> None:
    reply = client.request(method, path, json=body)
    assert reply.status_code == 404 and isinstance(reply.json()["error"], str)


@pytest.fixture(scope="module")
def idle_session(stack: EmbeddedStack) -> str:
    with httpx.Client(base_url=stack.server_url, headers=HEADERS) as http:
        return new_session(http, stack, unique_name("m"))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"type": "dance"},
        {"type": "message"},
        {"type": "message", "data": "hello"},
        {"type": "message", "data": {"role": "assistant", "content": "x"}},
        {"type": "message", "data": {"role": "user", "content": 42}},
        {"type": "message", "data": {"role": "user", "content": []}},
        {"type": "message", "data": {"role": "user", "content": [{"type": "input_text"}]}},
        {"type": "message", "data": {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}},
        [],
        "text",
    ],
)
def test_bad_events(client: httpx.Client, idle_session: str, body: Any) -> None:
    reply = client.post(f"/v1/sessions/{idle_session}/events", json=body)
    assert reply.status_code == 400 and isinstance(reply.json()["error"], str)


@pytest.mark.parametrize(
    "params",
    [{"order": "sideways"}, {"limit": 0}, {"limit": 1001}, {"limit": "ten"}, {"after": "msg_unknown"}, {"before": "x"}],
)
def test_bad_item_queries(client: httpx.Client, idle_session: str, params: dict[str, Any]) -> None:
    reply = client.get(f"/v1/sessions/{idle_session}/items", params=params)
    assert reply.status_code in (400, 404) and isinstance(reply.json()["error"], str)


@pytest.mark.parametrize("body", [{"runner_id": 7}, {"runner_id": ""}, {}, {"runner_id": "runner_other"}])
def test_bad_runner_binding(client: httpx.Client, idle_session: str, body: Any) -> None:
    reply = client.patch(f"/v1/sessions/{idle_session}", json=body)
    assert reply.status_code in (400, 404) and isinstance(reply.json()["error"], str)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_json_routes_take_only_a_body_declared_json(client: httpx.Client, idle_session: str,
                                                    content_type: str | None) -> None:
    """A web page may send any of these to a loopback server without asking (a "simple" request)."""
    headers = {} if content_type is None else {"content-type": content_type}
    for method, path, body in [("POST", f"/v1/sessions/{idle_session}/events", {"type": "interrupt"}),
                               ("PATCH", f"/v1/sessions/{idle_session}", {"runner_id": "r"})]:
        reply = client.request(method, path, content=json.dumps(body).encode(), headers=headers)
        assert reply.status_code == 415, reply.text
        assert "Content-Type: application/json" in reply.json()["error"]
    declared = client.post(f"/v1/sessions/{idle_session}/events", json={"type": "interrupt"},
                           headers={"content-type": "Application/JSON; charset=utf-8"})
    assert declared.status_code == 202, declared.text


def test_a_loopback_server_answers_only_to_loopback_names(stack: EmbeddedStack) -> None:
    """DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends its own Host."""
    for url in (stack.server_url, stack.mock_llm_url):
        port = httpx.URL(url).port
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", "127.0.0.1", ""):
            reply = httpx.get(f"{url}/health", headers={"Host": host})
            assert reply.status_code == 403, (url, host)
            assert "DNS rebinding" in reply.json()["error"]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LocalHost:{port}"):
            assert httpx.get(f"{url}/health", headers={"Host": host}).status_code == 200, (url, host)


def test_a_server_bound_to_another_loopback_address_answers_to_it() -> None:
    with EmbeddedStack(host="127.0.0.2", backend=fake_backend) as other:
        assert other.server_url.startswith("http://127.0.0.2:")
        assert httpx.get(f"{other.server_url}/health").status_code == 200
        assert httpx.get(f"{other.server_url}/health", headers={"Host": "evil.example"}).status_code == 403


def test_an_unexpected_error_is_logged_and_answered_without_its_details(
    stack: EmbeddedStack, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = new_session(client, stack, unique_name("m"))
    stack.registry.broken.add(session_id)
    with caplog.at_level("ERROR", logger="stateful.reference.server"):
        reply = client.get(f"/v1/sessions/{session_id}/resources/terminals")
    assert reply.status_code == 500
    assert reply.json() == {"error": "internal error (the server logged it)"}
    logged = [r for r in caplog.records if r.name == "stateful.reference.server"]
    assert logged and logged[0].exc_info is not None and "/secret/path" in str(logged[0].exc_info[1])


def test_wrong_method_is_a_json_405(client: httpx.Client) -> None:
    reply = client.put("/v1/sessions")
    assert reply.status_code == 405 and reply.json()["error"]


# -- authentication ---------------------------------------------------------------------------------
def test_token_is_required_when_configured() -> None:
    with EmbeddedStack(backend=fake_backend, token="s3cret") as secured:
        with httpx.Client(base_url=secured.server_url, headers=HEADERS) as http:
            assert http.get("/health").status_code == 200  # liveness stays open
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                reply = http.get("/v1/sessions", headers=headers)
                assert reply.status_code == 401 and "token" in reply.json()["error"]
            ok = http.get("/v1/sessions", headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200


def test_non_loopback_bind_requires_a_token() -> None:
    with pytest.raises(ValueError, match="requires a token"):
        EmbeddedStack(host="0.0.0.0", backend=fake_backend)


# -- python -m stateful serve ----------------------------------------------------------------------------
def _serve(*args: str, tmpdir: str | None = None, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, **({"TMPDIR": tmpdir} if tmpdir else {}), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "stateful", "serve", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


@pytest.mark.parametrize(
    "args",
    [["--port", "abc"], ["--port", "70000"], ["--host", "0.0.0.0"], ["--bogus"], [], ["--max-model-calls", "0"]],
    ids=["port-not-number", "port-range", "public-without-token", "unknown-option", "no-command", "max-calls-zero"],
)
def test_serve_bad_options_exit_2(args: list[str]) -> None:
    command = [sys.executable, "-m", "stateful"] + (["serve", *args] if args else [])
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == "" and "error" in done.stderr.lower()


def test_serve_prints_one_line_and_stops_on_sigterm() -> None:
    process = _serve()
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        info = json.loads(line)
        assert set(info) == {"server_url", "mock_llm_url", "runner_id"}
        assert httpx.get(f"{info['server_url']}/health").status_code == 200
        assert httpx.get(f"{info['server_url']}/v1/runners/{info['runner_id']}/status").json()["online"] is True
        assert httpx.post(f"{info['mock_llm_url']}/mock/reset").status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert process.stdout.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_takes_its_token_from_the_environment_out_of_the_process_list() -> None:
    process = _serve(env={"STATEFUL_SERVER_TOKEN": "s3cret-from-env"})
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        with open(f"/proc/{process.pid}/cmdline", "rb") as handle:
            assert b"s3cret" not in handle.read()
        url = f"{info['server_url']}/v1/runners/{info['runner_id']}/status"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer s3cret-from-env"}).json()["online"] is True
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_closes_its_terminals_on_sigint(terminal_leak_guard: str, terminal_pids: Callable[[str], list[int]]) -> None:
    """The terminals of a served stack live under the run's leak-guarded temp root."""
    process = _serve(tmpdir=terminal_leak_guard)
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        with httpx.Client(base_url=info["server_url"], headers=HEADERS, timeout=30) as http:
            model = unique_name("m")
            launch = call("sys_terminal_launch", "l", json.dumps({"terminal": "bash", "session": "s"}))
            configure_mock_llm(info["mock_llm_url"], [{"tool_calls": [launch]}, {"text": "ok"}], key=model)
            name = register_inline_agent(
                http, name=unique_name("served"), harness="openai-agents", model=model, profile="",
                prompt="p", mock_llm_base_url=f"{info['mock_llm_url']}/v1",
            )
            session_id = create_runner_bound_session(http, agent_name=name, runner_id=info["runner_id"])
            assert run_turn(http, session_id)["status"] == "completed"
            output = [i for i in session_items(http, session_id) if i["type"] == "function_call_output"][0]
            socket_path = json.loads(output["output"])["tmux_socket"]
        assert socket_path.startswith(terminal_leak_guard) and terminal_pids(socket_path)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert terminal_pids(socket_path) == [] and not os.path.exists(socket_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- the e2e plugin against an external server ------------------------------------------------------
def test_e2e_options_must_come_together() -> None:
    from stateful.e2e import external_target

    class Config:
        def __init__(self, **values: str | None) -> None:
            self.values = values

        def getoption(self, name: str, default: Any = None) -> Any:
            return self.values.get(name, default)

    assert external_target(Config()) is None
    assert external_target(Config(**{"--server-url": "http://a/", "--mock-llm-url": "http://b", "--runner-id": "r"})) == (
        "http://a", "http://b", "r"
    )
    with pytest.raises(pytest.UsageError, match="go together"):
        external_target(Config(**{"--server-url": "http://a"}))


def test_scenarios_run_unchanged_against_an_external_server(terminal_leak_guard: str) -> None:
    """``--server-url/--mock-llm-url/--runner-id`` point the §6 fixtures at a server started elsewhere."""
    process = _serve(tmpdir=terminal_leak_guard)
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        done = subprocess.run(
            [
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "tests/test_e2e_scenarios.py", "-k", "not leave_no_tmux",
                "--server-url", info["server_url"], "--mock-llm-url", info["mock_llm_url"],
                "--runner-id", info["runner_id"],
            ],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "5 passed" in done.stdout
        # The sessions were made on the external server, not on a stack of the inner run.
        listed = httpx.get(f"{info['server_url']}/v1/sessions", params={"limit": 100}, headers=HEADERS).json()["data"]
        assert len(listed) >= 5
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


# -- which items belong to a turn (servers tag them differently) --------------------------------------


def _msg(role: str, rid: str, text: str = "") -> dict[str, Any]:
    return {"type": "message", "response_id": rid, "data": {"role": role, "content": text}}


def test_turn_items_tagged_with_the_turn_id_as_this_stack_does() -> None:
    items = [_msg("user", "r1"), {"type": "function_call_output", "response_id": "r1", "call_id": "a"},
             _msg("user", "r2"),  # queued while r1 still runs
             _msg("assistant", "r1", "done 1"), _msg("assistant", "r2", "done 2")]
    assert turn_items(items, "r1") == [items[0], items[1], items[3]]
    assert turn_items(items, "r2") == [items[2], items[4]]
    assert turn_outcome({"status": "idle", "items": items}, "r1")["output"] == "done 1"


def test_turn_items_tagged_with_another_id_as_omnigent_does() -> None:
    # omnigent: the user message carries turn_<hex>, what the turn produces carries resp_<hex>
    items = [_msg("user", "turn_1"), {"type": "function_call", "response_id": "resp_1", "call_id": "a"},
             {"type": "function_call_output", "response_id": "resp_1", "call_id": "a"},
             _msg("assistant", "resp_1", "one"), _msg("user", "turn_2"), _msg("assistant", "resp_2", "two")]
    assert turn_items(items, "turn_1") == items[:4]
    assert turn_outcome({"status": "idle", "items": items}, "turn_1") == {
        "id": "turn_1", "status": "completed", "output": "one", "error": None}
    assert turn_outcome({"status": "idle", "items": items}, "turn_2")["output"] == "two"
    assert turn_outcome({"status": "running", "items": items[:3]}, "turn_1") is None
    assert turn_outcome({"status": "idle", "items": items[:1]}, "turn_1") is None  # not started yet
    assert turn_items(items, "turn_9") == []

"""A server team's e2e conftest, written from CONTRACT §6 (and the routes of §2) alone.

It imports nothing of this project: ``tests/test_faults.py`` copies it as ``tests/e2e/conftest.py``
into an empty directory beside a plain repro, the layout omnigent's suite has, and runs that repro
with ``stateful`` made unimportable. A plain repro that passes there against a correct server and
fails against a faulty one runs in a server's suite as it is. So nothing here follows this project's
own helpers (``stateful.e2e``) where §6 leaves a choice: ``register_inline_agent`` writes
``mock_llm_base_url`` into ``executor.auth.base_url`` exactly as given, and ``extra_config`` replaces
top-level keys of the spec (no deep merge).

The server under test is started by the caller, which names it in the environment:
``CONTRACT_SERVER_URL``, ``CONTRACT_MOCK_LLM_URL`` (the mock's root, without ``/v1``) and
``CONTRACT_RUNNER_ID``. Every wait is bounded.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

HEADERS = {"Origin": "omnigent://internal"}
SETUP_TIMEOUT = 60.0
POLL_INTERVAL = 0.05


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--profile", action="store", default="", help="the model profile (the mock needs none)")


def _environment(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: this conftest tests the server that the environment names")
    return value.rstrip("/")


def _poll(what: str, probe: Any, timeout: float) -> Any:
    """``probe()`` -> (done, value) until done; an AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        done, value = probe()
        if done:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}; last: {value!r}"
        time.sleep(POLL_INTERVAL)


# -- helpers (§6) --------------------------------------------------------------------------------------

def configure_mock_llm(mock_url: str, responses: list[dict[str, Any]], *, key: str) -> dict[str, Any]:
    reply = httpx.post(f"{mock_url}/mock/configure", json={"key": key, "responses": responses}, timeout=30)
    assert reply.status_code == 200, f"configuring the mock: HTTP {reply.status_code} {reply.text}"
    return reply.json()


def register_inline_agent(client: httpx.Client, *, name: str, harness: str, model: str, profile: str, prompt: str,
                          mock_llm_base_url: str, extra_config: dict[str, Any] | None = None) -> str:
    spec: dict[str, Any] = {
        "name": name,
        "prompt": prompt,
        "executor": {"harness": harness, "model": model,
                     "auth": {"type": "api_key", "api_key": "mock-key", "base_url": mock_llm_base_url}},
        "os_env": {"type": "caller_process", "cwd": ".", "sandbox": {"type": "none"}},
        "terminals": {"bash": {"command": "bash", "os_env": {"type": "caller_process", "sandbox": {"type": "none"}}}},
    }
    spec.update(extra_config or {})
    text = json.dumps(spec).encode()  # JSON is YAML
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w:gz") as tar:
        member = tarfile.TarInfo(f"{name}.yaml")
        member.size = len(text)
        tar.addfile(member, io.BytesIO(text))
    reply = client.post("/v1/sessions", data={"metadata": "{}"},
                        files={"bundle": (f"{name}.tar.gz", bundle.getvalue(), "application/gzip")})
    assert reply.status_code == 201, f"registering {name}: HTTP {reply.status_code} {reply.text}"
    return str(reply.json()["agent_name"])


def create_runner_bound_session(client: httpx.Client, *, agent_name: str, runner_id: str) -> str:
    listed = client.get("/v1/sessions", params={"agent_name": agent_name, "limit": 1})
    assert listed.status_code == 200 and listed.json()["data"], f"listing {agent_name}: {listed.text}"
    created = client.post("/v1/sessions", json={"agent_id": listed.json()["data"][0]["agent_id"]})
    assert created.status_code == 201, f"creating a session: HTTP {created.status_code} {created.text}"
    session_id = str(created.json()["id"])
    _poll(f"runner {runner_id} online",
          lambda: (client.get(f"/v1/runners/{runner_id}/status").json().get("online") is True, None), SETUP_TIMEOUT)
    bound = client.patch(f"/v1/sessions/{session_id}", json={"runner_id": runner_id})
    assert bound.status_code == 200, f"binding the runner: HTTP {bound.status_code} {bound.text}"
    return session_id


def send_user_message_to_session(client: httpx.Client, *, session_id: str, content: str) -> str:
    body = {"type": "message", "data": {"role": "user", "content": [{"type": "input_text", "text": content}]}}
    reply = client.post(f"/v1/sessions/{session_id}/events", json=body)
    assert reply.status_code == 202, f"sending a message: HTTP {reply.status_code} {reply.text}"
    item_id = reply.json()["item_id"]

    def response_id() -> tuple[bool, Any]:
        items = client.get(f"/v1/sessions/{session_id}").json()["items"]
        found = [i.get("response_id") for i in items if i.get("id") == item_id]
        return bool(found and found[0]), found

    return str(_poll(f"message {item_id} to carry its response_id", response_id, SETUP_TIMEOUT)[0])


def poll_session_until_terminal(client: httpx.Client, *, session_id: str, response_id: str,
                                timeout: float) -> dict[str, Any]:
    """The turn has ended once the session is ``failed``, or ``idle`` with an assistant message after
    the turn's user message (so the turn did start), §2.6."""

    def ended() -> tuple[bool, Any]:
        snapshot = client.get(f"/v1/sessions/{session_id}").json()
        items = snapshot["items"]
        starts = [n for n, i in enumerate(items) if i.get("response_id") == response_id
                  and i.get("type") == "message" and i["data"].get("role") == "user"]
        replies = [i for i in items[starts[0] + 1:] if i.get("type") == "message"] if starts else []
        replies = replies[:next((n for n, i in enumerate(replies) if i["data"].get("role") == "user"), len(replies))]
        output = "".join(part.get("text", "") for i in replies[-1:] for part in i["data"].get("content") or [])
        if snapshot["status"] == "failed":
            return True, {"id": response_id, "status": "failed", "output": output, "error": snapshot["last_task_error"]}
        if snapshot["status"] == "idle" and replies:
            return True, {"id": response_id, "status": "completed", "output": output, "error": None}
        return False, snapshot["status"]

    return dict(_poll(f"turn {response_id} to end", ended, timeout))


# -- fixtures (§6) -------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def live_server() -> str:
    return _environment("CONTRACT_SERVER_URL")


@pytest.fixture(scope="session")
def mock_llm_server_url() -> str:
    return _environment("CONTRACT_MOCK_LLM_URL")


@pytest.fixture(scope="session")
def live_runner_id() -> str:
    return _environment("CONTRACT_RUNNER_ID")


@pytest.fixture
def http_client(live_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server, headers=HEADERS, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def harness_name() -> str:
    return "openai-agents"


@pytest.fixture
def model_name() -> str:
    return f"mock-model-{uuid.uuid4().hex[:10]}"

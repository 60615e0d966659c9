"""A client of a contract server's sessions API and its mock LLM: the seed-style helpers of CONTRACT §6
(register an agent, bind a session to a runner, queue the model's replies, send a message, poll a
turn until it ends, read its items and tool outputs) and :func:`preflight`, which checks a server
before anything runs against it.

The sessions target (:mod:`stateful.targets.sessions`), the benchmarks and the plain repros use them;
:mod:`stateful.e2e` adds the pytest fixtures and options around them. Nothing here imports pytest.

Every wait here is a bounded poll: a helper that runs out of time raises :class:`TurnTimeout` (an
``AssertionError``) naming what it waited for and the last state it saw.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import yaml

from stateful import meter
from stateful.plain_checks import walk_items
from stateful.reference.bundle import build_bundle
from stateful.waiting import Wait

__all__ = ["agent_spec_yaml", "await_runner_online", "configure_mock_llm", "create_runner_bound_session",
           "HARNESS", "HEADERS", "ORIGIN", "POLL_INTERVAL", "poll_session_until_terminal", "preflight",
           "PREFLIGHT_TIMEOUT", "register_inline_agent", "RUNNER_WAIT", "send_user_message_to_session",
           "session_items", "SETUP_TIMEOUT", "tool_outputs", "transport_failure", "turn_items",
           "turn_outcome", "TurnTimeout", "unique_name"]

ORIGIN = "omnigent://internal"
HEADERS = {"Origin": ORIGIN}
HARNESS = "openai-agents"
POLL_INTERVAL = 0.05
SETUP_TIMEOUT = 60.0
"""Longest wait for a step of setting a session up (a runner coming online, a message's response id):
omnigent's first turn alone may take 25 s on a loaded machine (CONTRACT §4)."""


class TurnTimeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited and what was last seen."""


# -- helpers --------------------------------------------------------------------------------------
_mock_client: httpx.Client | None = None
_mock_client_lock = threading.Lock()


def _mock_http() -> httpx.Client:
    """One shared client for the mock: creating an ``httpx.Client`` costs ~20 ms (its SSL context),
    more than a whole scripted turn. httpx clients are thread-safe."""
    global _mock_client
    with _mock_client_lock:
        if _mock_client is None:
            _mock_client = httpx.Client(timeout=10.0)
        return _mock_client


def configure_mock_llm(
    mock_url: str, responses: list[dict[str, Any]], *, key: str = "default", match: str | None = None
) -> dict[str, Any]:
    """Replace the mock's queue ``key`` with ``responses`` (one entry per model call)."""
    body: dict[str, Any] = {"key": key, "responses": responses}
    if match is not None:
        body["match"] = match
    reply = _mock_http().post(f"{mock_url.rstrip('/')}/mock/configure", json=body)
    reply.raise_for_status()
    return reply.json()


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def agent_spec_yaml(
    *, name: str, harness: str, model: str, prompt: str, mock_llm_base_url: str,
    extra_config: Mapping[str, Any] | None = None,
) -> str:
    """The §3 agent spec with a ``bash`` terminal; ``extra_config`` is deep-merged over it.

    ``mock_llm_base_url`` becomes ``executor.auth.base_url`` as given, nothing added or stripped
    (CONTRACT §6): callers pass the mock's ``/v1`` URL (``f"{mock_llm_server_url}/v1"``), as omnigent's
    own tests do. A helper that appended ``/v1`` itself let a test that passed the root URL pass here
    and fail (its agent calling ``<mock>/responses``, a 404) in a suite whose helper follows §6.

    The shell skips the user's rc files (``--norc --noprofile``): a test's terminal must not depend on
    what the machine's ``~/.bashrc`` does (here it runs ``pyenv init``, whose lock file, left behind by
    a shell closed mid-startup, stalls every later shell for a minute).
    """
    spec: dict[str, Any] = {
        "name": name,
        "prompt": prompt,
        "executor": {
            "harness": harness,
            "model": model,
            "auth": {"type": "api_key", "api_key": "mock-key", "base_url": mock_llm_base_url},
        },
        "os_env": {"type": "caller_process", "cwd": ".", "sandbox": {"type": "none"}},
        "terminals": {
            "bash": {
                "command": "bash",
                "args": ["--norc", "--noprofile"],
                "os_env": {"type": "caller_process", "sandbox": {"type": "none"}},
            }
        },
    }
    if extra_config:
        spec = _merge(spec, extra_config)
    return yaml.safe_dump(spec, sort_keys=False)


def register_inline_agent(
    client: httpx.Client,
    *,
    name: str,
    harness: str,
    model: str,
    profile: str,
    prompt: str,
    mock_llm_base_url: str,
    extra_config: Mapping[str, Any] | None = None,
) -> str:
    """Register an agent from an inline spec (multipart: metadata + gzip-tar bundle); its name.
    ``mock_llm_base_url`` is written as given (the mock's ``/v1`` URL: see :func:`agent_spec_yaml`)."""
    del profile  # omnigent routes real models through a profile; the mock needs none
    text = agent_spec_yaml(
        name=name, harness=harness, model=model, prompt=prompt,
        mock_llm_base_url=mock_llm_base_url, extra_config=extra_config,
    )
    reply = client.post(
        "/v1/sessions",
        data={"metadata": "{}"},
        files={"bundle": (f"{name}.tar.gz", build_bundle(name, text), "application/gzip")},
        headers=HEADERS,
    )
    assert reply.status_code == 201, f"registering {name!r}: HTTP {reply.status_code} {reply.text}"
    return str(reply.json().get("agent_name", name))


def _poll(what: str, probe: Any, timeout: float) -> Any:
    """Probe until done; intervals grow from 2 ms to ``POLL_INTERVAL`` (fast turns answer fast). A
    time-out is a verdict that the thing never happened: it rests on two probes at least, the last
    begun after ``timeout`` (:class:`stateful.waiting.Wait`; a slow probe never uses the time up alone)."""
    wait = Wait(timeout)
    interval = 0.002
    last: Any = None
    while True:
        began = wait.look()
        done, last = probe()
        wait.looked(began)
        if done:
            return last
        if wait.over(began):
            raise TurnTimeout(f"timed out after {timeout} s waiting for {what} ({wait.looks} probes, the last "
                              f"begun {wait.waited:.1f} s in); last seen: {last!r}"[:4000])
        meter.sleep(interval, "turn-end poll")
        interval = min(interval * 2, POLL_INTERVAL)


def await_runner_online(client: httpx.Client, runner_id: str, timeout: float | None = None) -> None:
    """Wait (bounded: ``SETUP_TIMEOUT`` by default) until ``GET /v1/runners/<id>/status`` says online;
    :class:`TurnTimeout` with the last answer if it never does."""

    def runner_online() -> tuple[bool, Any]:
        reply = client.get(f"/v1/runners/{runner_id}/status", headers=HEADERS)
        return reply.status_code == 200 and reply.json().get("online") is True, f"HTTP {reply.status_code} {reply.text[:300]}"

    _poll(f"runner {runner_id} to be online", runner_online, SETUP_TIMEOUT if timeout is None else timeout)


def create_runner_bound_session(client: httpx.Client, *, agent_name: str, runner_id: str) -> str:
    """A new session of ``agent_name``, bound to ``runner_id`` once that runner is online; its id."""
    listing = client.get("/v1/sessions", params={"agent_name": agent_name, "limit": 1}, headers=HEADERS)
    listing.raise_for_status()
    rows = listing.json().get("data") or []
    assert rows, f"no session of agent {agent_name!r} is listed"
    agent_id = rows[0]["agent_id"]

    await_runner_online(client, runner_id)
    created = client.post("/v1/sessions", json={"agent_id": agent_id}, headers=HEADERS)
    assert created.status_code in (200, 201), f"creating a session: HTTP {created.status_code} {created.text}"
    session_id = str(created.json()["id"])
    bound = client.patch(f"/v1/sessions/{session_id}", json={"runner_id": runner_id}, headers=HEADERS)
    assert bound.status_code == 200, f"binding the runner: HTTP {bound.status_code} {bound.text}"
    return session_id


def send_user_message_to_session(client: httpx.Client, *, session_id: str, content: str) -> str:
    """Post a user message; the ``response_id`` of the turn it starts (or is queued for)."""
    body = {
        "type": "message",
        "data": {"role": "user", "content": [{"type": "input_text", "text": content}]},
    }
    reply = client.post(f"/v1/sessions/{session_id}/events", json=body, headers=HEADERS)
    assert reply.status_code == 202, f"sending a message: HTTP {reply.status_code} {reply.text}"
    accepted = reply.json()
    if isinstance(accepted.get("response_id"), str) and accepted["response_id"]:
        return accepted["response_id"]  # a server may say it at once (this stack does)
    item_id = accepted["item_id"]

    def recorded() -> tuple[bool, Any]:
        snapshot = client.get(f"/v1/sessions/{session_id}", headers=HEADERS)
        snapshot.raise_for_status()
        for item in snapshot.json().get("items") or []:
            if item.get("id") == item_id and item.get("response_id"):
                return True, str(item["response_id"])
        return False, snapshot.json().get("status")

    return str(_poll(f"message {item_id} to carry a response_id", recorded, SETUP_TIMEOUT))


def _text_of(item: Mapping[str, Any]) -> str:
    data = item.get("data") if isinstance(item.get("data"), Mapping) else item
    content = data.get("content")
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") for part in content or [] if isinstance(part, Mapping)
    )


def _role(item: Mapping[str, Any]) -> Any:
    data = item.get("data") if isinstance(item.get("data"), Mapping) else item
    return data.get("role")


def turn_items(items: Sequence[Mapping[str, Any]], response_id: str) -> list[Mapping[str, Any]]:
    """The items of the turn ``response_id`` (snapshot-nested or flat items, oldest first).

    The contract only says the turn's user message carries ``response_id`` (§2.6). This stack tags
    every item of the turn with it; omnigent tags the items the turn produces (calls, outputs, the
    reply) with an id of its own. So a turn's items are those tagged with ``response_id`` and those
    that follow its user message up to the next user message, unless tagged with another turn's id.
    """
    users = {n for n, i in enumerate(items) if i.get("type") == "message" and _role(i) == "user"}
    other_turns = {items[n].get("response_id") for n in users} - {response_id}
    start = min((n for n in users if items[n].get("response_id") == response_id), default=None)
    window: set[int] = set()
    if start is not None:
        for n in range(start + 1, len(items)):
            if n in users:
                break
            if items[n].get("response_id") not in other_turns:
                window.add(n)
    return [i for n, i in enumerate(items) if n in window or i.get("response_id") == response_id]


def turn_outcome(snapshot: Mapping[str, Any], response_id: str) -> dict[str, Any] | None:
    """The turn's outcome as far as a snapshot shows it, or None while it has not ended.

    A turn has ended when its user message is present and the session is no longer running (idle and
    an assistant reply among the turn's items, see :func:`turn_items`: completed; failed: failed). A server may add ``responses`` (per-turn outcomes; this stack does),
    which also settles turns that a queued turn has already followed.
    """
    items = turn_items(snapshot.get("items") or [], response_id)
    assistant = [i for i in items if i.get("type") == "message" and _role(i) == "assistant"]
    output = _text_of(assistant[-1]) if assistant else ""
    known = (snapshot.get("responses") or {}).get(response_id)
    if isinstance(known, Mapping) and known.get("status") in ("completed", "failed"):
        return {"id": response_id, "status": known["status"], "output": output, "error": known.get("error")}
    if not items or snapshot.get("status") in ("running", "waiting"):
        return None
    if snapshot.get("status") == "failed":
        return {"id": response_id, "status": "failed", "output": output, "error": snapshot.get("last_task_error")}
    if not assistant:  # idle, but the turn has not replied yet: it may not have started
        return None
    return {"id": response_id, "status": "completed", "output": output, "error": None}


def poll_session_until_terminal(
    client: httpx.Client, *, session_id: str, response_id: str, timeout: float
) -> dict[str, Any]:
    """Poll the session until the turn ``response_id`` ends: ``{"id", "status", "output", "error"}``."""

    def ended() -> tuple[bool, Any]:
        reply = client.get(f"/v1/sessions/{session_id}", headers=HEADERS)
        reply.raise_for_status()
        snapshot = reply.json()
        outcome = turn_outcome(snapshot, response_id)
        return outcome is not None, outcome or {"status": snapshot.get("status")}

    outcome = dict(_poll(f"turn {response_id} of {session_id} to end", ended, timeout))
    if not outcome["output"]:  # §2.6: the turn's last items (its reply) may show just after its end
        again = ended()[1]
        if again.get("status") == outcome["status"]:
            outcome = dict(again)
    return outcome


def session_items(client: httpx.Client, session_id: str, *, page_size: int = 1000) -> list[dict[str, Any]]:
    """Every item of a session, oldest first, following the pages (flat items); a server whose pages
    would never end fails the walk with a message naming it (:func:`plain_checks.walk_items`)."""

    def page(params: dict[str, Any]) -> Any:
        reply = client.get(f"/v1/sessions/{session_id}/items", params=params, headers=HEADERS)
        reply.raise_for_status()
        return reply.json()

    return walk_items(page, page_size)


def tool_outputs(client: httpx.Client, session_id: str, response_id: str | None = None) -> list[dict[str, Any]]:
    """The ``function_call_output`` items (optionally of one turn), oldest first, outputs parsed."""
    outputs = []
    items = session_items(client, session_id)
    for item in items if response_id is None else turn_items(items, response_id):
        if item.get("type") == "function_call_output":
            try:
                parsed = json.loads(item["output"])
            except (TypeError, ValueError):
                parsed = item["output"]
            outputs.append({**item, "parsed": parsed})
    return outputs


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


PREFLIGHT_TIMEOUT = 5.0
"""Seconds a preflight request may take (to connect, and to answer)."""
RUNNER_WAIT = 15.0
"""Seconds the preflight waits for the runner to say it is online."""


def transport_failure(exc: httpx.HTTPError) -> str:
    """What went wrong below HTTP, in words (an httpx timeout's own text is often empty)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "no connection within the timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer within the timeout"
    return str(exc) or type(exc).__name__


def _probe(client: httpx.Client, url: str, what: str) -> tuple[httpx.Response | None, str]:
    """GET ``url``: the reply, or None and one line saying why there is none."""
    try:
        return client.get(url), ""
    except httpx.HTTPError as exc:
        return None, f"{what} at {url} cannot be reached: {transport_failure(exc)}"


def _answers_200(client: httpx.Client, url: str, what: str) -> str | None:
    reply, problem = _probe(client, url, what)
    if reply is not None and reply.status_code != 200:
        problem = f"{what} at {url} answered HTTP {reply.status_code}: {reply.text[:200]!r}"
    return problem or None


def _runner_online(client: httpx.Client, server_url: str, runner_id: str, wait: float) -> str | None:
    url = f"{server_url}/v1/runners/{runner_id}/status"
    waiting = Wait(wait)  # "not online" rests on two answers at least, the last asked for after the wait
    while True:
        began = waiting.look()
        reply, problem = _probe(client, url, "the runner's status")
        waiting.looked(began)
        if reply is not None:
            online = reply.status_code == 200 and _json_or_none(reply).get("online") is True
            if online:
                return None
            problem = (f"runner {runner_id!r} is not online: {url} answered HTTP {reply.status_code} "
                       f"{reply.text[:200]!r} for {wait:.0f} s")
        if waiting.over(began):
            return problem
        time.sleep(0.2)


def _json_or_none(reply: httpx.Response) -> dict[str, Any]:
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def preflight(server_url: str, mock_llm_url: str, runner_id: str, *, runner_wait: float = RUNNER_WAIT) -> str | None:
    """None when an external target can be tested, else ONE line naming the URL and what failed.

    Checked before the first test, because a server that is not running (or not healthy, or whose
    runner or mock LLM is missing) is not something the tests can find out about: every test would
    fail for the same reason, the machine would shrink and report that as a program.
    """
    with httpx.Client(headers=HEADERS, timeout=PREFLIGHT_TIMEOUT) as client:
        return (_answers_200(client, f"{server_url}/health", "the server")
                or _answers_200(client, f"{mock_llm_url}/gate/pending", "the mock LLM")
                or _runner_online(client, server_url, runner_id, runner_wait))

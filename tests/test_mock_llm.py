"""The mock LLM (CONTRACT §5), checked through the official ``openai`` client and plain HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from stateful.reference.mock_llm import MockState, user_input_text
from stateful.reference.stack import MockLLMServer

DEADLINE = 15.0


@pytest.fixture(scope="module")
def mock_server() -> Iterator[MockLLMServer]:
    with MockLLMServer() as server:
        yield server


@pytest.fixture
def mock(mock_server: MockLLMServer) -> Iterator[MockLLMServer]:
    httpx.post(f"{mock_server.url}/mock/reset").raise_for_status()
    yield mock_server


@pytest.fixture
def client(mock: MockLLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{mock.url}/v1", api_key="mock-key", max_retries=0, timeout=30)


def configure(mock: MockLLMServer, key: str, responses: list[dict], match: str | None = None) -> dict:
    body: dict = {"key": key, "responses": responses}
    if match is not None:
        body["match"] = match
    reply = httpx.post(f"{mock.url}/mock/configure", json=body)
    reply.raise_for_status()
    return reply.json()


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


TOOL_REPLY = {
    "tool_calls": [
        {"call_id": "c1", "name": "sys_terminal_launch", "arguments": '{"terminal": "bash", "session": "s"}'},
        {"call_id": "c2", "name": "sys_terminal_list", "arguments": "{}"},
    ]
}


def test_configure_answers_count(mock: MockLLMServer) -> None:
    assert configure(mock, "k", [{"text": "a"}, {"text": "b"}]) == {"configured": True, "key": "k", "count": 2}


def test_plain_json_text_and_tool_calls(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "m1", [TOOL_REPLY, {"text": "done"}])
    first = client.responses.create(model="m1", input="go")
    assert [item.type for item in first.output] == ["function_call", "function_call"]
    call = first.output[0]
    assert (call.call_id, call.name, call.status) == ("c1", "sys_terminal_launch", "completed")
    assert json.loads(call.arguments) == {"terminal": "bash", "session": "s"}
    assert call.id and call.id != call.call_id
    second = client.responses.create(model="m1", input="go")
    assert second.output[0].type == "message" and second.output_text == "done"


@pytest.mark.parametrize("entry", [TOOL_REPLY, {"text": "streamed text"}, {"text": ""}])
def test_streaming_raw_events(mock: MockLLMServer, client: openai.OpenAI, entry: dict) -> None:
    configure(mock, "m2", [entry])
    events = list(client.responses.create(model="m2", input="go", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    numbers = [event.sequence_number for event in events]
    assert numbers == sorted(set(numbers))
    done = [event.item for event in events if event.type == "response.output_item.done"]
    added = [event.item for event in events if event.type == "response.output_item.added"]
    assert len(done) == len(added) == len(events[-1].response.output)
    assert [item.id for item in done] == [item.id for item in events[-1].response.output]
    if "text" in entry:
        assert events[-1].response.output_text == entry["text"]
    else:
        assert [item.call_id for item in done] == ["c1", "c2"]


@pytest.mark.parametrize("entry", [TOOL_REPLY, {"text": "through the helper"}])
def test_streaming_helper_accumulates(mock: MockLLMServer, client: openai.OpenAI, entry: dict) -> None:
    """The client's strict accumulator (``responses.stream``) checks item identities end to end."""
    configure(mock, "m3", [entry])
    with client.responses.stream(model="m3", input="go") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    if "text" in entry:
        assert final.output_text == entry["text"]
    else:
        assert [item.arguments for item in final.output] == [c["arguments"] for c in entry["tool_calls"]]


def test_error_entry_raises_status_error(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "m4", [{"error": "rate limited", "status_code": 429}, {"text": "after"}])
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m4", input="x")
    assert caught.value.status_code == 429 and "rate limited" in caught.value.message
    assert client.responses.create(model="m4", input="x").output_text == "after"


def test_error_entry_while_streaming(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "m4s", [{"error": "down", "status_code": 503}])
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="m4s", input="x", stream=True)


def test_exhausted_queue_uses_fallback_then_default_text(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "m5", [{"text": "one"}])
    assert client.responses.create(model="m5", input="x").output_text == "one"
    assert client.responses.create(model="m5", input="x").output_text == "Mock LLM response"
    httpx.post(f"{mock.url}/mock/set_fallback", json={"key": "m5", "text": "fallback!"}).raise_for_status()
    assert client.responses.create(model="m5", input="x").output_text == "fallback!"
    # A fallback survives a reset (as omnigent's does); the queue does not.
    httpx.post(f"{mock.url}/mock/reset").raise_for_status()
    assert client.responses.create(model="m5", input="x").output_text == "fallback!"


def test_routing_match_then_model_then_default(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "default", [{"text": "from default"}])
    configure(mock, "modelq", [{"text": "from model"}])
    configure(mock, "short", [{"text": "from short"}], match="tok")
    configure(mock, "long", [{"text": "from long"}], match="tok-longer")
    assert client.responses.create(model="modelq", input="nothing here").output_text == "from model"
    assert client.responses.create(model="unknown", input="nothing").output_text == "from default"
    assert client.responses.create(model="modelq", input="say tok-longer please").output_text == "from long"
    assert client.responses.create(model="modelq", input="say tok please").output_text == "from short"


def test_match_uses_only_user_text(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "mt", [{"text": "matched"}], match="zebra")
    reply = client.responses.create(
        model="other",
        instructions="zebra in the prompt does not count",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "zebra in a tool output"},
        ],
    )
    assert reply.output_text == "Mock LLM response"
    assert user_input_text({"input": [{"role": "user", "content": "zebra"}]}) == "zebra"


def test_requests_are_recorded_by_key(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "rk", [{"text": "a"}, {"text": "b"}])
    client.responses.create(model="rk", input="first")
    client.responses.create(model="elsewhere", input="second")
    recorded = httpx.get(f"{mock.url}/mock/requests", params={"key": "rk"}).json()["requests"]
    assert [body["input"] for body in recorded] == ["first"]
    everything = httpx.get(f"{mock.url}/mock/requests").json()["requests"]
    assert [body["input"] for body in everything] == ["first", "second"]


def test_block_holds_reply_until_release(mock: MockLLMServer, client: openai.OpenAI) -> None:
    configure(mock, "gk", [{"text": "held", "block": True}])
    assert httpx.get(f"{mock.url}/gate/pending").json() == {"pending": False}
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("text", client.responses.create(model="gk", input="x").output_text)
    )
    worker.start()
    wait_until(lambda: httpx.get(f"{mock.url}/gate/pending").json()["pending"], "the gate to hold")
    assert "text" not in result
    assert httpx.post(f"{mock.url}/gate/release").json() == {"released": True}
    worker.join(DEADLINE)
    assert result == {"text": "held"}
    assert httpx.get(f"{mock.url}/gate/pending").json() == {"pending": False}
    assert httpx.post(f"{mock.url}/gate/release").json() == {"released": False}


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"key": "", "responses": []},
        {"key": "k", "responses": "nope"},
        {"key": "k", "responses": [{}]},
        {"key": "k", "responses": [{"text": 3}]},
        {"key": "k", "responses": [{"tool_calls": []}]},
        {"key": "k", "responses": [{"tool_calls": [{"arguments": "{}"}]}]},
        {"key": "k", "responses": [{"error": "x", "status_code": 200}]},
        {"key": "k", "responses": [{"text": "x", "block": "yes"}]},
        {"key": "k", "responses": [], "match": 5},
    ],
)
def test_bad_configure_is_a_clear_400(mock: MockLLMServer, body: object) -> None:
    reply = httpx.post(f"{mock.url}/mock/configure", json=body)
    assert reply.status_code == 400
    assert isinstance(reply.json()["error"], str) and reply.json()["error"]


def test_bad_responses_body_is_a_400(mock: MockLLMServer) -> None:
    declared = {"content-type": "application/json"}
    reply = httpx.post(f"{mock.url}/v1/responses", content=b"{not json", headers=declared)
    assert reply.status_code == 400 and "JSON" in reply.json()["error"]["message"]
    reply = httpx.post(f"{mock.url}/v1/responses", json=[1, 2])
    assert reply.status_code == 400
    reply = httpx.post(f"{mock.url}/v1/responses", content=b"[" * 100_000 + b"]" * 100_000, headers=declared)
    assert reply.status_code == 400
    reply = httpx.post(f"{mock.url}/mock/configure", content=b"[" * 100_000, headers=declared)
    assert reply.status_code == 400


@pytest.mark.parametrize("path", ["/v1/responses", "/mock/configure", "/mock/set_fallback"])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_must_be_declared_json(mock: MockLLMServer, path: str, content_type: str | None) -> None:
    """A web page may POST these content types to loopback without asking: they would script the model."""
    body = json.dumps({"key": "k", "responses": [{"text": "planted"}], "text": "planted", "model": "k"}).encode()
    reply = httpx.post(f"{mock.url}{path}", content=body, headers={} if content_type is None else {"content-type": content_type})
    assert reply.status_code == 415, reply.text
    error = reply.json()["error"]
    assert "Content-Type: application/json" in (error["message"] if isinstance(error, dict) else error)
    assert mock.state.requests() == []  # no model call was taken
    answer = httpx.post(f"{mock.url}/v1/responses", json={"model": "k", "input": "hi"}).json()
    assert "planted" not in json.dumps(answer)  # nothing was queued, no fallback set


def test_state_is_thread_safe() -> None:
    """Many threads drawing from one queue get every entry exactly once."""
    state = MockState()
    state.configure("k", [{"text": str(i)} for i in range(400)])
    seen: list[str] = []
    lock = threading.Lock()

    def draw() -> None:
        for _ in range(50):
            _, entry = state.take({"model": "k", "input": "x"})
            with lock:
                seen.append(entry.text or "")

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen, key=int) == [str(i) for i in range(400)]
    assert len(state.requests("k")) == 400


def test_request_record_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies repeat the whole conversation: the record keeps the newest within a byte budget."""
    from stateful.reference import mock_llm

    monkeypatch.setattr(mock_llm, "RECORD_BUDGET_BYTES", 1000)
    state = MockState()
    for i in range(10):
        state.take({"model": "k", "input": str(i)}, size=400)
    assert [body["input"] for body in state.requests("k")] == ["8", "9"]

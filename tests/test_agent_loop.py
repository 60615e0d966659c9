"""The agent loop (CONTRACT §4) in-process: fake models and fake tools, plus the real client on the mock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest

from stateful.reference.agent import (
    LoopSettings,
    ModelError,
    ModelReply,
    OpenAIModel,
    TurnControl,
    TurnResult,
    run_turn,
)
from stateful.reference.stack import MockLLMServer
from stateful.reference.wire import FunctionCall

DEADLINE = 15.0
SCHEMAS = [{"type": "function", "name": "echo", "description": "echo", "parameters": {"type": "object"}}]


def calls(*names: str, prefix: str = "c") -> tuple[FunctionCall, ...]:
    return tuple(FunctionCall(call_id=f"{prefix}{i}", name=n, arguments=json.dumps({"i": i})) for i, n in enumerate(names))


class ScriptedModel:
    """Answers from a list of replies; records what it was sent."""

    def __init__(self, replies: Sequence[ModelReply | Exception]) -> None:
        self.replies = list(replies)
        self.seen: list[list[Mapping[str, Any]]] = []

    def __call__(self, conversation: Sequence[Mapping[str, Any]]) -> ModelReply:
        self.seen.append(list(conversation))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def text(value: str) -> ModelReply:
    return ModelReply(calls=(), texts=(value,))


def drive(model: Any, run_tool: Any, *, control: TurnControl | None = None, max_calls: int = 200) -> tuple[TurnResult, list[tuple[str, dict]], list[dict]]:
    recorded: list[tuple[str, dict]] = []
    conversation: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "go"}]
    result = run_turn(
        model=model,
        conversation=conversation,
        run_tool=run_tool,
        record=lambda kind, fields: recorded.append((kind, fields)),
        control=control or TurnControl(),
        max_model_calls=max_calls,
    )
    return result, recorded, conversation


def test_text_reply_ends_the_turn() -> None:
    result, recorded, conversation = drive(ScriptedModel([text("hello")]), lambda n, a: "{}")
    assert result == TurnResult("completed", output="hello")
    assert recorded == [("message", {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]})]
    assert conversation[-1]["role"] == "assistant"


def test_one_call_per_reply_runs_in_order_and_outputs_are_verbatim() -> None:
    order: list[str] = []

    def tool(name: str, arguments: str) -> str:
        order.append(name)
        return '{"odd":   "spacing", "name": "%s"}' % name

    replies = [ModelReply(calls=calls(n, prefix=n), texts=()) for n in ("a", "b", "c")] + [text("done")]
    model = ScriptedModel(replies)
    result, recorded, conversation = drive(model, tool)
    assert result.status == "completed" and order == ["a", "b", "c"]
    kinds = [kind for kind, _ in recorded]
    assert kinds == ["function_call", "function_call_output"] * 3 + ["message"]
    assert recorded[1][1] == {"call_id": "a0", "output": '{"odd":   "spacing", "name": "a"}'}
    # The model saw the whole conversation so far, calls and outputs included.
    last_input = model.seen[-1]
    assert [item["type"] for item in last_input] == ["message"] + ["function_call", "function_call_output"] * 3
    assert conversation[-1]["type"] == "message"


def test_several_calls_in_one_reply_run_concurrently() -> None:
    barrier = threading.Barrier(4, timeout=DEADLINE)

    def tool(name: str, arguments: str) -> str:
        barrier.wait()  # passes only if all four calls are running at the same time
        return json.dumps({"ok": name})

    model = ScriptedModel([ModelReply(calls=calls("w", "x", "y", "z"), texts=()), text("done")])
    result, recorded, _ = drive(model, tool)
    assert result.status == "completed"
    kinds = [kind for kind, _ in recorded]
    assert kinds == ["function_call"] * 4 + ["function_call_output"] * 4 + ["message"]
    assert [fields["output"] for kind, fields in recorded if kind == "function_call_output"] == [
        json.dumps({"ok": n}) for n in "wxyz"
    ]


def test_tool_exception_becomes_an_error_output() -> None:
    def tool(name: str, arguments: str) -> str:
        raise RuntimeError("kaboom")

    result, recorded, _ = drive(ScriptedModel([ModelReply(calls=calls("t"), texts=()), text("ok")]), tool)
    assert result.status == "completed"
    assert "kaboom" in json.loads(recorded[1][1]["output"])["error"]


def test_model_error_fails_the_turn() -> None:
    result, recorded, _ = drive(ScriptedModel([ModelError("model_error", "HTTP 500: boom")]), lambda n, a: "{}")
    assert result == TurnResult("failed", error={"code": "model_error", "message": "HTTP 500: boom"})
    assert recorded == []


def test_runaway_loop_is_cut_off() -> None:
    class Forever:
        count = 0

        def __call__(self, conversation: Sequence[Mapping[str, Any]]) -> ModelReply:
            self.count += 1
            return ModelReply(calls=calls("again"), texts=())

    model = Forever()
    result, recorded, _ = drive(model, lambda n, a: "{}", max_calls=7)
    assert result.status == "failed" and result.error is not None
    assert result.error["code"] == "max_model_calls" and "7 model calls" in result.error["message"]
    assert model.count == 7 and len(recorded) == 14


def test_interrupt_abandons_a_model_call_in_flight() -> None:
    release = threading.Event()

    def stuck(conversation: Sequence[Mapping[str, Any]]) -> ModelReply:
        release.wait(DEADLINE)
        return text("too late")

    control = TurnControl()
    threading.Timer(0.2, control.cancel).start()
    started = time.monotonic()
    result, recorded, _ = drive(stuck, lambda n, a: "{}", control=control)
    release.set()
    assert result.status == "interrupted" and result.error == {"code": "interrupted", "message": "the turn was interrupted"}
    assert time.monotonic() - started < DEADLINE / 2
    assert recorded == []


def test_interrupt_lets_running_tool_calls_finish_then_stops() -> None:
    control = TurnControl()

    def tool(name: str, arguments: str) -> str:
        control.cancel()
        return '{"status": "sent"}'

    model = ScriptedModel([ModelReply(calls=calls("t"), texts=()), text("never")])
    result, recorded, conversation = drive(model, tool, control=control)
    assert result.status == "interrupted"
    assert [kind for kind, _ in recorded] == ["function_call", "function_call_output"]
    assert len(model.seen) == 1  # no further model call after the interrupt
    assert conversation[-1]["type"] == "function_call_output"  # history stays consistent


# -- the real openai client against the mock ----------------------------------------------------
@pytest.fixture(scope="module")
def mock() -> Iterator[MockLLMServer]:
    with MockLLMServer() as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_model_round_trip(mock: MockLLMServer, stream: bool) -> None:
    key = f"loop-{stream}"
    mock.state.configure(
        key,
        [
            {"tool_calls": [{"call_id": "k1", "name": "echo", "arguments": '{"a": 1}'},
                            {"call_id": "k2", "name": "echo", "arguments": "{}"}]},
            {"text": "finished"},
        ],
    )
    model = OpenAIModel(
        base_url=f"{mock.url}/v1", api_key="mock-key", model=key, instructions="be brief",
        tools=SCHEMAS, settings=LoopSettings(stream=stream),
    )
    try:
        result, recorded, _ = drive(model, lambda n, a: json.dumps({"echo": a}))
    finally:
        model.close()
    assert result == TurnResult("completed", output="finished")
    sent = httpx.get(f"{mock.url}/mock/requests", params={"key": key}).json()["requests"]
    assert len(sent) == 2
    assert sent[0]["tools"] == SCHEMAS and sent[0]["instructions"] == "be brief" and sent[0]["model"] == key
    assert [item["type"] for item in sent[1]["input"]] == [
        "message", "function_call", "function_call", "function_call_output", "function_call_output",
    ]
    assert sent[1]["input"][3] == {"type": "function_call_output", "call_id": "k1", "output": '{"echo": "{\\"a\\": 1}"}'}
    assert bool(sent[0].get("stream")) is stream


def test_openai_model_error_entry_fails_without_retry(mock: MockLLMServer) -> None:
    mock.state.configure("loop-err", [{"error": "overloaded", "status_code": 500}, {"text": "would be a retry"}])
    model = OpenAIModel(
        base_url=f"{mock.url}/v1", api_key="mock-key", model="loop-err", instructions="",
        tools=SCHEMAS, settings=LoopSettings(),
    )
    try:
        result, _, _ = drive(model, lambda n, a: "{}")
    finally:
        model.close()
    assert result.status == "failed" and result.error is not None
    assert result.error["code"] == "model_error" and "500" in result.error["message"] and "overloaded" in result.error["message"]
    assert len(mock.state.requests("loop-err")) == 1  # max_retries=0: one entry per failed turn


def test_unreachable_model_fails_the_turn() -> None:
    model = OpenAIModel(
        base_url="http://127.0.0.1:9/v1", api_key="k", model="m", instructions="",
        tools=SCHEMAS, settings=LoopSettings(timeout=5),
    )
    try:
        result, _, _ = drive(model, lambda n, a: "{}")
    finally:
        model.close()
    assert result.status == "failed" and result.error is not None
    assert result.error["code"] == "model_unreachable"

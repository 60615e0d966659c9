"""The agent loop (CONTRACT §4): model call, tool calls, model call, ... until a text reply.

The model is reached through the official ``openai`` client (Responses API), exactly as a real agent
server's harness reaches it, so the reference stack exercises the same wire format as omnigent. The loop
knows nothing about HTTP sessions or tmux: it gets the conversation, a function that runs one tool call,
and a function that records an item, which keeps it testable with a fake tool.

Choices worth knowing:

- ``max_retries`` defaults to 0: every model call takes exactly one entry of the mock's queue, so a
  scripted ``{"error": ...}`` entry fails the turn at once (the contract allows retries, and each retry
  would take the next entry; scripted tests are easier to write without them).
- A turn is cut off after ``max_model_calls`` model calls without a text reply (default 200), so a
  model that keeps calling tools cannot run forever.
- Several calls in one reply run concurrently, one thread each; their items are recorded in the
  reply's order (all ``function_call`` items first, then the outputs), so histories are deterministic.
- An interrupt abandons a model call in flight at once (the call finishes, unobserved, in its own
  thread) and stops after tool calls in flight, which are bounded, have finished and been recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import openai

from stateful import meter
from stateful.reference import faults
from stateful.reference.wire import FunctionCall

ToolRunner = Callable[[str, str], str]
"""Runs one tool call: ``(name, arguments JSON text) -> the tool's JSON string``."""

Recorder = Callable[[str, dict[str, Any]], None]
"""Records one session item: ``(type, type-specific fields)``."""


@dataclass(frozen=True)
class LoopSettings:
    max_model_calls: int = 200
    max_retries: int = 0
    timeout: float = 120.0
    """Seconds one model call may take (a held mock reply counts)."""
    stream: bool = False
    """Ask for Server-Sent Events instead of one JSON body (both are part of the contract)."""


@dataclass(frozen=True)
class ModelReply:
    calls: tuple[FunctionCall, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class TurnResult:
    status: Literal["completed", "failed", "interrupted"]
    output: str = ""
    error: dict[str, str] | None = None


class ModelError(Exception):
    """A model call that did not give a usable reply; ``code`` classifies it for ``last_task_error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TurnControl:
    """Interrupt flag of one turn, plus the wake-up that lets the loop stop waiting for the model."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._condition:
            self._cancelled = True
            self._condition.notify_all()

    def run_interruptibly(self, work: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``work`` in its own thread; ``(True, result)``, or ``(False, None)`` if interrupted first.

        An exception raised by ``work`` is re-raised here.
        """
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["value"] = work()
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc
            with self._condition:
                outcome["done"] = True
                self._condition.notify_all()

        threading.Thread(target=target, name="model-call", daemon=True).start()
        with self._condition:
            self._condition.wait_for(lambda: "done" in outcome or self._cancelled)
            if self._cancelled:
                return False, None
        if "error" in outcome:
            raise outcome["error"]
        return True, outcome.get("value")


class OpenAIModel:
    """One agent's model endpoint, called with the official client (thread-safe, reused across turns)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        instructions: str,
        tools: Sequence[Mapping[str, Any]],
        settings: LoopSettings,
    ) -> None:
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=settings.max_retries,
            timeout=settings.timeout,
        )
        self._model = model
        self._instructions = instructions
        self._tools = [dict(tool) for tool in tools]
        self._stream = settings.stream

    def close(self) -> None:
        self._client.close()

    def __call__(self, conversation: Sequence[Mapping[str, Any]]) -> ModelReply:
        # ``input`` and ``tools`` go through ``extra_body``: the client's typed-parameter transform
        # walks every nested TypedDict and costs ~0.4 ms per conversation item (30 ms for the tool
        # schemas alone, 0.5 s at 1,000 items) for a body that is already plain JSON. The request
        # on the wire is the same.
        arguments: dict[str, Any] = {
            "model": self._model,
            "extra_body": {"input": list(conversation), "tools": self._tools},
        }
        if self._instructions:
            arguments["instructions"] = self._instructions
        try:
            if self._stream:
                response = None
                for event in self._client.responses.create(**arguments, stream=True):
                    if event.type == "response.completed":
                        response = event.response
                    elif event.type in ("response.failed", "response.incomplete", "error"):
                        raise ModelError("model_error", f"the model stream ended with {event.type}")
                if response is None:
                    raise ModelError("bad_model_reply", "the model stream ended without response.completed")
            else:
                with meter.timed("server model call"):
                    response = self._client.responses.create(**arguments)
        except openai.APIStatusError as exc:
            raise ModelError("model_error", f"model call failed with HTTP {exc.status_code}: {exc.message}") from None
        except openai.APITimeoutError:
            raise ModelError("model_timeout", "model call timed out") from None
        except openai.APIConnectionError as exc:
            raise ModelError("model_unreachable", f"cannot reach the model: {exc}") from None
        except openai.OpenAIError as exc:
            raise ModelError("model_error", f"model call failed: {exc}") from None
        return parse_reply(response.output or [])


def parse_reply(output: Sequence[Any]) -> ModelReply:
    """Function calls and assistant texts of a reply; anything else is ignored (e.g. reasoning)."""
    calls: list[FunctionCall] = []
    texts: list[str] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "function_call":
            calls.append(FunctionCall(call_id=item.call_id, name=item.name, arguments=item.arguments or ""))
        elif kind == "message":
            texts.append(
                "".join(
                    getattr(part, "text", "") or ""
                    for part in (item.content or [])
                    if getattr(part, "type", None) == "output_text"
                )
            )
    if not calls and not texts:
        raise ModelError("bad_model_reply", "the model reply held neither a message nor a function call")
    return ModelReply(calls=tuple(calls), texts=tuple(texts))


def _run_tool(run_tool: ToolRunner, call: FunctionCall) -> str:
    try:
        with meter.timed("server tool call"):
            output = run_tool(call.name, call.arguments)
    except Exception as exc:  # a tool must answer with JSON, never take the turn down
        return json.dumps({"error": f"internal error in {call.name}: {exc}"})
    return output if isinstance(output, str) else json.dumps(output)


def run_tool_calls(run_tool: ToolRunner, calls: Sequence[FunctionCall]) -> list[str]:
    """Outputs in call order; several calls run concurrently, one thread each."""
    if len(calls) == 1:
        return [_run_tool(run_tool, calls[0])]
    outputs: list[str] = [""] * len(calls)
    completed: list[str] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        outputs[index] = _run_tool(run_tool, calls[index])
        with lock:
            completed.append(outputs[index])

    threads = [
        threading.Thread(target=work, args=(i,), name=f"tool-{call.name}", daemon=True)
        for i, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if faults.enabled("outputs-completion-order"):
        # Planted fault: the outputs gathered as the calls completed (as ``as_completed`` hands them
        # out) and then paired with the call ids by position, so a fast call's output lands on a
        # slower call issued before it.
        return completed
    return outputs


def run_turn(
    *,
    model: Callable[[Sequence[Mapping[str, Any]]], ModelReply],
    conversation: list[dict[str, Any]],
    run_tool: ToolRunner,
    record: Recorder,
    control: TurnControl,
    max_model_calls: int = 200,
) -> TurnResult:
    """Drive one turn; ``conversation`` (already ending with the user's message) grows in place."""
    for _ in range(max_model_calls):
        if control.cancelled:
            return _interrupted()
        snapshot = list(conversation)
        try:
            finished, reply = control.run_interruptibly(lambda: model(snapshot))
        except ModelError as exc:
            return TurnResult("failed", error={"code": exc.code, "message": exc.message})
        except Exception as exc:  # a bug in the client or the loop: fail the turn, say what it was
            return TurnResult("failed", error={"code": "internal_error", "message": repr(exc)})
        if not finished:
            return _interrupted()
        for text in reply.texts:
            item = {"role": "assistant", "content": [{"type": "output_text", "text": text}]}
            conversation.append({"type": "message", **item})
            record("message", item)
        if not reply.calls:
            return TurnResult("completed", output=reply.texts[-1] if reply.texts else "")
        for call in reply.calls:
            fields = {"name": call.name, "arguments": call.arguments, "call_id": call.call_id}
            conversation.append({"type": "function_call", **fields})
            record("function_call", fields)
        outputs = run_tool_calls(run_tool, reply.calls)
        for call, output in zip(reply.calls, outputs):
            fields = {"call_id": call.call_id, "output": output}
            conversation.append({"type": "function_call_output", **fields})
            record("function_call_output", fields)
    return TurnResult(
        "failed",
        error={
            "code": "max_model_calls",
            "message": f"the turn was cut off after {max_model_calls} model calls without a text reply",
        },
    )


def _interrupted() -> TurnResult:
    return TurnResult("interrupted", error={"code": "interrupted", "message": "the turn was interrupted"})

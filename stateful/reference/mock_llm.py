"""The mock LLM (CONTRACT §5): an OpenAI Responses API endpoint that answers from scripted queues.

Agent servers' own suites drive their tools through a mock model whose queue of replies makes the agent
call the tools in a fixed order; this module is that model for the reference stack, and the same HTTP
surface (``/mock/configure``, ``/gate/release``, ...) that omnigent's mock offers, so scripted tests run
unchanged against either.

Replies are shaped exactly as the real API shapes them (``Response`` objects with ``message`` and
``function_call`` output items; SSE streams of ``response.*`` events with rising ``sequence_number``)
so that the official ``openai`` client parses both forms, including its strict streaming accumulator.

All state lives in :class:`MockState`, guarded by one lock so that it may also be scripted in-process
from other threads; gates are asyncio events owned by the loop that serves the blocked request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from stateful import meter
from stateful.reference.guards import is_json
from stateful.reference.wire import FunctionCall

DEFAULT_KEY = "default"
DEFAULT_TEXT = "Mock LLM response"
MAX_BODY_BYTES = 32 * 1024 * 1024
"""Conversations grow with every tool output; this only stops absurd bodies, not long sessions."""
RECORD_BUDGET_BYTES = 64 * 1024 * 1024
"""Recorded request bodies kept (oldest dropped first): each body repeats the whole conversation, so
a long session would otherwise grow the record quadratically."""


class ConfigError(ValueError):
    """A ``/mock/configure`` body that cannot be queued; the message says which entry is wrong.
    ``status``: the HTTP status that answers it (415 for a body that is not declared JSON)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Entry:
    """One scripted reply: text, tool calls or an HTTP error; optionally held until a gate release."""

    text: str | None = None
    tool_calls: tuple[FunctionCall, ...] = ()
    error: str | None = None
    status_code: int = 500
    block: bool = False
    delay: float = 0.0


FALLBACK_ENTRY = Entry(text=DEFAULT_TEXT)


def parse_entry(raw: Any, index: int) -> Entry:
    """Validate one queue entry; a scripting mistake is reported instead of silently answered."""
    where = f"responses[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be an object")
    block = raw.get("block", False)
    if not isinstance(block, bool):
        raise ConfigError(f"{where}.block must be true or false")
    delay = raw.get("delay", 0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 600:
        raise ConfigError(f"{where}.delay must be a number of seconds between 0 and 600")
    if raw.get("error") is not None:
        status = raw.get("status_code", 500)
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ConfigError(f"{where}.status_code must be an HTTP error status (400-599)")
        return Entry(error=str(raw["error"]), status_code=status, block=block, delay=float(delay))
    if raw.get("tool_calls") is not None:
        calls = raw["tool_calls"]
        if not isinstance(calls, list) or not calls:
            raise ConfigError(f"{where}.tool_calls must be a non-empty list")
        parsed: list[FunctionCall] = []
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
                raise ConfigError(f"{where}.tool_calls[{j}] must be an object with a non-empty 'name'")
            arguments = call.get("arguments", "{}")
            if not isinstance(arguments, str):
                # A convenience for test writers; the model's arguments are always JSON text.
                arguments = json.dumps(arguments)
            call_id = call.get("call_id") or f"call_{uuid.uuid4().hex[:16]}"
            parsed.append(FunctionCall(call_id=str(call_id), name=call["name"], arguments=arguments))
        return Entry(tool_calls=tuple(parsed), block=block, delay=float(delay))
    if "text" in raw:
        if not isinstance(raw["text"], str):
            raise ConfigError(f"{where}.text must be a string")
        return Entry(text=raw["text"], block=block, delay=float(delay))
    raise ConfigError(f"{where} needs one of 'text', 'tool_calls' or 'error'")


def user_input_text(body: Mapping[str, Any]) -> str:
    """The text the user typed, across every user item of ``input``.

    Only user content counts (not instructions or tool outputs), so a match token routes on what a
    test itself sent, never on incidental words in a prompt or a terminal screen.
    """
    parts: list[str] = []

    def collect(content: Any) -> None:
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, Mapping):
            if isinstance(content.get("text"), str):
                parts.append(content["text"])
        elif isinstance(content, list):
            for block in content:
                collect(block)

    raw = body.get("input")
    if isinstance(raw, str):
        parts.append(raw)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping) and item.get("role") == "user":
                collect(item.get("content"))
    return " ".join(parts)


@dataclass
class _Gate:
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event
    key: str


@dataclass
class _Queue:
    entries: deque[Entry] = field(default_factory=deque)
    match: str | None = None


class MockState:
    """Keyed reply queues, fallbacks, recorded requests and pending gates. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._fallbacks: dict[str, str] = {}
        self._requests: deque[tuple[str, dict[str, Any], int]] = deque()
        self._recorded_bytes = 0
        self._gates: deque[_Gate] = deque()

    # -- scripting -------------------------------------------------------------------------------
    def configure(self, key: str, responses: Sequence[Any], match: str | None = None) -> int:
        """Replace ``key``'s queue; returns how many entries it now holds."""
        entries = deque(parse_entry(raw, i) for i, raw in enumerate(responses))
        with self._lock:
            self._queues[key] = _Queue(entries=entries, match=match or None)
            return len(entries)

    def set_fallback(self, key: str, text: str) -> None:
        with self._lock:
            self._fallbacks[key] = text

    def reset(self) -> None:
        """Forget queues and recorded requests, and let every held reply go.

        Fallbacks survive, as in omnigent's mock: they serve session-long callers across tests.
        """
        with self._lock:
            self._queues.clear()
            self._requests.clear()
            self._recorded_bytes = 0
            gates, self._gates = list(self._gates), deque()
        for gate in gates:
            _open(gate)

    def requests(self, key: str | None = None) -> list[dict[str, Any]]:
        """Recorded request bodies, oldest first: all, or those routed to (or naming) ``key``."""
        with self._lock:
            return [
                body
                for routed, body, _ in self._requests
                if key is None or routed == key or body.get("model") == key
            ]

    # -- gates -----------------------------------------------------------------------------------
    def pending(self) -> bool:
        with self._lock:
            return bool(self._gates)

    def release(self) -> bool:
        """Let the oldest held reply go; False when nothing was held."""
        with self._lock:
            gate = self._gates.popleft() if self._gates else None
        if gate is None:
            return False
        _open(gate)
        return True

    def release_all(self) -> int:
        with self._lock:
            gates, self._gates = list(self._gates), deque()
        for gate in gates:
            _open(gate)
        return len(gates)

    async def hold(self, key: str) -> None:
        """Wait until :meth:`release` (or reset/shutdown) lets this reply go."""
        gate = _Gate(loop=asyncio.get_running_loop(), event=asyncio.Event(), key=key)
        with self._lock:
            self._gates.append(gate)
        try:
            await gate.event.wait()
        finally:
            with self._lock:
                if gate in self._gates:
                    self._gates.remove(gate)

    # -- serving ---------------------------------------------------------------------------------
    def route(self, body: Mapping[str, Any]) -> str:
        """Queue choice: a match token in the user's text (longest, then rightmost), else the
        request's model if it names a queue or fallback, else ``default``. Caller holds the lock."""
        text = user_input_text(body)
        best: tuple[int, int] | None = None
        chosen: str | None = None
        if text:
            for key, queue in self._queues.items():
                if queue.match:
                    position = text.rfind(queue.match)
                    score = (len(queue.match), position)
                    if position >= 0 and (best is None or score > best):
                        best, chosen = score, key
        if chosen is not None:
            return chosen
        model = body.get("model")
        if isinstance(model, str) and (model in self._queues or model in self._fallbacks):
            return model
        return DEFAULT_KEY

    def take(self, body: dict[str, Any], size: int = 0) -> tuple[str, Entry]:
        """Record the request (``size``: its bytes) and pop the entry that answers it (one entry
        per model call)."""
        with self._lock:
            key = self.route(body)
            self._requests.append((key, body, size))
            self._recorded_bytes += size
            while self._recorded_bytes > RECORD_BUDGET_BYTES and len(self._requests) > 1:
                self._recorded_bytes -= self._requests.popleft()[2]
            queue = self._queues.get(key)
            if queue is not None and queue.entries:
                return key, queue.entries.popleft()
            fallback = self._fallbacks.get(key)
            return key, (Entry(text=fallback) if fallback is not None else FALLBACK_ENTRY)


def _open(gate: _Gate) -> None:
    try:
        gate.loop.call_soon_threadsafe(gate.event.set)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


# -- Responses API shapes ------------------------------------------------------------------------
def _output_items(entry: Entry) -> list[dict[str, Any]]:
    if entry.tool_calls:
        return [
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
            for call in entry.tool_calls
        ]
    return [
        {
            "type": "message",
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": entry.text or "", "annotations": []}],
        }
    ]


def build_response(entry: Entry, model: str) -> dict[str, Any]:
    """A completed ``Response`` object as ``POST /v1/responses`` returns it."""
    output = _output_items(entry)
    words = max(1, len((entry.text or "").split()))
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": words,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 10 + words,
        },
    }


def sse_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The event sequence of a streamed reply, ids consistent between added/done/completed."""
    created = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": created}]
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append({"type": "response.content_part.added", **common, "part": part})
            if text:
                events.append(
                    {"type": "response.output_text.delta", **common, "delta": text, "logprobs": []}
                )
            events.append({"type": "response.output_text.done", **common, "text": text, "logprobs": []})
            events.append(
                {"type": "response.content_part.done", **common, "part": {**part, "text": text}}
            )
        else:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                }
            )
            common = {"item_id": item["id"], "output_index": index}
            if item["arguments"]:
                events.append(
                    {"type": "response.function_call_arguments.delta", **common, "delta": item["arguments"]}
                )
            events.append(
                {"type": "response.function_call_arguments.done", **common, "arguments": item["arguments"]}
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def _api_error(message: str, status: int, kind: str = "invalid_request_error") -> JSONResponse:
    """Errors in the OpenAI shape, so the client raises its typed ``APIStatusError`` with the text."""
    return JSONResponse({"error": {"message": message, "type": kind, "code": None, "param": None}}, status)


def _plain_error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status)


async def _json_body(request: Request) -> Any:
    """The request's JSON body, or a :class:`ConfigError` that says why it is not usable.

    The raw size is left in ``request.state.body_size`` (the request record's budget counts it). A body
    not declared ``Content-Type: application/json`` is refused (a web page's form could send it)."""
    if not is_json(request.headers.get("content-type")):
        declared = request.headers.get("content-type")
        raise ConfigError(f"{request.url.path} takes a JSON body with Content-Type: application/json "
                          f"(got {declared or 'no Content-Type'})", 415)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ConfigError(f"request body larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ConfigError(f"request body larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    request.state.body_size = len(raw)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError("body is not usable JSON: nested too deeply") from None


async def _json_object(request: Request, what: str = "the body") -> dict[str, Any]:
    """The request's JSON body, which must be an object (else a :class:`ConfigError`, 400)."""
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise ConfigError(f"{what} must be a JSON object")
    return body


def create_mock_llm_app(state: MockState | None = None) -> Starlette:
    """The mock LLM as a Starlette app; ``app.state.mock`` is its :class:`MockState`."""
    mock = state or MockState()

    async def responses(request: Request) -> Response:
        try:
            body = await _json_object(request, "the request body")
        except ConfigError as exc:
            return _api_error(str(exc), exc.status)
        meter.largest("model request", request.state.body_size)
        key, entry = mock.take(body, request.state.body_size)
        if entry.delay:
            await asyncio.sleep(entry.delay)
        if entry.block:
            await mock.hold(key)
        if entry.error is not None:
            return _api_error(entry.error, entry.status_code, "mock_error")
        model = body.get("model") if isinstance(body.get("model"), str) else "mock-model"
        response = build_response(entry, model)
        if body.get("stream") is True:
            events = sse_events(response)

            async def stream() -> AsyncIterator[bytes]:
                for event in events:
                    yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

            return StreamingResponse(stream(), media_type="text/event-stream")
        return JSONResponse(response)

    async def configure(request: Request) -> Response:
        try:
            body = await _json_object(request)
            key = body.get("key", DEFAULT_KEY)
            if not isinstance(key, str) or not key:
                raise ConfigError("'key' must be a non-empty string")
            match = body.get("match")
            if match is not None and (not isinstance(match, str) or not match):
                raise ConfigError("'match' must be a non-empty string if provided")
            entries = body.get("responses")
            if not isinstance(entries, list):
                raise ConfigError("'responses' must be a list")
            count = mock.configure(key, entries, match)
        except ConfigError as exc:
            return _plain_error(str(exc), exc.status)
        return JSONResponse({"configured": True, "key": key, "count": count})

    async def set_fallback(request: Request) -> Response:
        try:
            body = await _json_object(request)
        except ConfigError as exc:
            return _plain_error(str(exc), exc.status)
        key, text = body.get("key", DEFAULT_KEY), body.get("text")
        if not isinstance(key, str) or not key or not isinstance(text, str):
            return _plain_error("expected {'key': non-empty string, 'text': string}")
        mock.set_fallback(key, text)
        return JSONResponse({"configured": True, "key": key})

    async def reset(_: Request) -> Response:
        mock.reset()
        return JSONResponse({"reset": True})

    async def requests(request: Request) -> Response:
        return JSONResponse({"requests": mock.requests(request.query_params.get("key"))})

    async def gate_pending(_: Request) -> Response:
        return JSONResponse({"pending": mock.pending()})

    async def gate_release(_: Request) -> Response:
        return JSONResponse({"released": mock.release()})

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": []})

    async def health(_: Request) -> Response:
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/mock/configure", configure, methods=["POST"]),
            Route("/mock/set_fallback", set_fallback, methods=["POST"]),
            Route("/mock/reset", reset, methods=["POST"]),
            Route("/mock/requests", requests, methods=["GET"]),
            Route("/gate/pending", gate_pending, methods=["GET"]),
            Route("/gate/release", gate_release, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    app.state.mock = mock
    return app

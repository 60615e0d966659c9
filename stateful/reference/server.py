"""The sessions API (CONTRACT §2) as a Starlette app: validation and routing, nothing more.

Every request is checked here and answered with a JSON ``{"error": "..."}`` that says what is wrong
(4xx), so that a malformed body, an unknown id or a wrong JSON type is never a 500 and never a hang;
the state itself lives in :class:`~stateful.reference.sessions.SessionService`.

Calls that may block (closing terminals, listing them through the registry) run in the thread pool,
never on the event loop. ``Origin`` is accepted and ignored. When a token is configured (a non-loopback
bind requires one), every route but ``GET /health`` needs ``Authorization: Bearer <token>``. On
loopback, a request must name the server by a loopback ``Host``, and JSON routes take only
``Content-Type: application/json`` (415 otherwise): no web page can drive it
(:mod:`stateful.reference.guards`). An unexpected exception is logged whole and answered with a
generic 500: its text is the server's business, not the client's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from stateful.reference.bundle import BundleError, parse_bundle
from stateful.reference.guards import LoopbackHostOnly, is_json
from stateful.reference.sessions import Invalid, NotFound, SessionService

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_ITEMS_LIMIT = 1000


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, refused (413) as soon as it passes ``limit``, declared or not."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("invalid Content-Length header")
        if int(declared) > limit:
            raise BadRequest(f"request body larger than {limit} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"request body larger than {limit} bytes", 413)
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # later form()/json() parse this copy instead of the spent stream
    return body


async def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON object body; 415 unless it is declared ``application/json``."""
    if not is_json(request.headers.get("content-type")):
        declared = request.headers.get("content-type")
        raise BadRequest(f"{request.method} {request.url.path} takes a JSON body with Content-Type: application/json "
                         f"(got {declared or 'no Content-Type'})", 415)
    body = await read_body(request)
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("body is not usable JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise BadRequest("body must be a JSON object")
    return value


def _string_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"'{name}' must be a non-empty string")
    return value


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer between {low} and {high}") from None
    if not low <= value <= high:
        raise BadRequest(f"'{name}' must be an integer between {low} and {high}")
    return value


def message_content(data: Any) -> list[dict[str, Any]]:
    """The user's content parts of a ``message`` event, normalised to ``input_text`` parts."""
    if not isinstance(data, dict):
        raise BadRequest("'data' must be an object with 'role' and 'content'")
    role = data.get("role", "user")
    if role != "user":
        raise BadRequest("'data.role' must be 'user'")
    content = data.get("content")
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list) or not content:
        raise BadRequest("'data.content' must be a string or a non-empty list of input_text parts")
    parts = []
    for index, part in enumerate(content):
        if (
            not isinstance(part, dict)
            or part.get("type") not in ("input_text", "text")
            or not isinstance(part.get("text"), str)
        ):
            raise BadRequest(
                f"'data.content[{index}]' must be {{\"type\": \"input_text\", \"text\": <string>}}"
            )
        parts.append({"type": "input_text", "text": part["text"]})
    return parts


class BearerAuth:
    """Requires ``Authorization: Bearer <token>`` on every route but ``/health``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") != "/health":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = error("missing or invalid bearer token (Authorization: Bearer <token>)", 401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    """Turns the service's and the validators' exceptions into 4xx JSON answers."""

    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except BadRequest as exc:
            return error(exc.message, exc.status)
        except NotFound as exc:
            return error(str(exc), 404)
        except Invalid as exc:
            return error(str(exc), 409)
        except BundleError as exc:
            return error(str(exc), 400)

    return wrapper


class Delayed:
    """Every HTTP response of the wrapped app comes ``seconds`` later: a slow server (a real one
    answers in 40 ms to 1.5 s) to benchmark, test and tune the tester against without installing one."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(self.seconds)
        await self.app(scope, receive, send)


def create_sessions_app(
    service: SessionService, *, token: str | None = None, latency: float = 0.0, loopback: bool = True
) -> ASGIApp:
    """The sessions API over ``service``; wrapped in :class:`BearerAuth` when ``token`` is set, in
    :class:`~stateful.reference.guards.LoopbackHostOnly` when it is served on ``loopback``, and in
    :class:`Delayed` when ``latency`` (seconds added to every response) is positive."""

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def create(request: Request) -> Response:
        content_type = request.headers.get("content-type", "").lower()
        if content_type.startswith("multipart/form-data"):
            return await register(request)
        if is_json(content_type):
            body = await json_object(request)
            session = service.create_session(_string_field(body, "agent_id"))
            return JSONResponse(session.summary(), 201)
        raise BadRequest(
            "POST /v1/sessions takes multipart/form-data (metadata, bundle) or JSON {'agent_id'}", 415
        )

    async def register(request: Request) -> Response:
        await read_body(request)
        try:
            form = await request.form(max_files=4, max_fields=16, max_part_size=MAX_BODY_BYTES)
        except HTTPException as exc:
            raise BadRequest(f"malformed multipart body: {exc.detail}") from None
        except Exception as exc:  # python-multipart raises several types for broken input
            raise BadRequest(f"malformed multipart body: {exc}") from None
        try:
            metadata = form.get("metadata")
            if isinstance(metadata, UploadFile):
                metadata = (await metadata.read()).decode("utf-8", "replace")
            if metadata is not None:
                try:
                    parsed = json.loads(metadata)
                except json.JSONDecodeError as exc:
                    raise BadRequest(f"'metadata' is not valid JSON: {exc}") from None
                except RecursionError:
                    raise BadRequest("'metadata' is nested too deeply") from None
                if not isinstance(parsed, dict):
                    raise BadRequest("'metadata' must be a JSON object")
            bundle = form.get("bundle")
            if not isinstance(bundle, UploadFile):
                raise BadRequest("multipart field 'bundle' (a .tar.gz file) is missing")
            data = await bundle.read()
        finally:
            await form.close()
        spec = await run_in_threadpool(parse_bundle, data)
        agent = service.register_agent(spec)
        session = service.create_session(agent.id)
        return JSONResponse(
            {"session_id": session.id, "agent_id": agent.id, "agent_name": agent.name, "id": session.id},
            201,
        )

    async def list_sessions(request: Request) -> Response:
        limit = _int_param(request, "limit", 20, 1, MAX_ITEMS_LIMIT)
        data = service.list_sessions(request.query_params.get("agent_name"), limit)
        return JSONResponse({"object": "list", "data": data})

    async def get_session(request: Request) -> Response:
        return JSONResponse(service.snapshot(request.path_params["session_id"]))

    async def patch_session(request: Request) -> Response:
        body = await json_object(request)
        session_id = request.path_params["session_id"]
        service.get(session_id)
        session = service.bind_runner(session_id, _string_field(body, "runner_id"))
        return JSONResponse(session.summary())

    async def delete_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        service.get(session_id)
        closed = await run_in_threadpool(service.delete_session, session_id)
        return JSONResponse({"id": session_id, "deleted": True, "closed_terminals": closed})

    async def post_event(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        body = await json_object(request)
        service.get(session_id)
        kind = body.get("type")
        if kind == "message":
            turn = service.post_message(session_id, message_content(body.get("data")))
            return JSONResponse(
                {"queued": True, "item_id": turn.item_id, "response_id": turn.response_id}, 202
            )
        if kind == "interrupt":
            return JSONResponse({"interrupted": service.interrupt(session_id)}, 202)
        raise BadRequest("'type' must be 'message' or 'interrupt'")

    async def list_items(request: Request) -> Response:
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise BadRequest("'order' must be 'asc' or 'desc'")
        limit = _int_param(request, "limit", 20, 1, MAX_ITEMS_LIMIT)
        page = service.items_page(
            request.path_params["session_id"],
            order=order,
            limit=limit,
            after=request.query_params.get("after") or None,
            before=request.query_params.get("before") or None,
        )
        return JSONResponse(
            {
                "object": "list",
                "data": page.data,
                "first_id": page.first_id,
                "last_id": page.last_id,
                "has_more": page.has_more,
            }
        )

    async def terminals(request: Request) -> Response:
        data = await run_in_threadpool(service.terminals, request.path_params["session_id"])
        return JSONResponse({"object": "list", "data": data})

    async def runner_status(request: Request) -> Response:
        runner_id = request.path_params["runner_id"]
        if runner_id != service.runner_id:
            raise NotFound(f"unknown runner {runner_id!r}")
        return JSONResponse({"id": runner_id, "online": True})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error(str(exc.detail), exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error("internal error (the server logged it)", 500)

    def route(path: str, handler: Handler, methods: list[str]) -> Route:
        return Route(path, _guarded(handler), methods=methods)

    app = Starlette(
        routes=[
            route("/health", health, ["GET"]),
            route("/v1/sessions", create, ["POST"]),
            route("/v1/sessions", list_sessions, ["GET"]),
            route("/v1/sessions/{session_id}", get_session, ["GET"]),
            route("/v1/sessions/{session_id}", patch_session, ["PATCH"]),
            route("/v1/sessions/{session_id}", delete_session, ["DELETE"]),
            route("/v1/sessions/{session_id}/events", post_event, ["POST"]),
            route("/v1/sessions/{session_id}/items", list_items, ["GET"]),
            route("/v1/sessions/{session_id}/resources/terminals", terminals, ["GET"]),
            route("/v1/runners/{runner_id}/status", runner_status, ["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )
    app.state.service = service
    guarded: ASGIApp = BearerAuth(app, token) if token else app
    guarded = LoopbackHostOnly(guarded) if loopback else guarded
    return Delayed(guarded, latency) if latency > 0 else guarded

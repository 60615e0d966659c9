"""Agents, sessions, their items and their turns: the state behind the sessions API (CONTRACT §2, §4).

Kept apart from the HTTP layer (``server.py``) so that routing and validation stay thin, and so the
same state can be driven in-process by tests. Tools are reached through one function per session
(``ToolBinder``), so the service only routes to ``tools.py``/``registry.py`` and never re-implements
what they do.

Concurrency: one lock per session guards its items, status and turn queue; turns of one session run
one at a time in a worker thread that exists only while turns are queued; sessions run in parallel.
A turn that follows a queued one starts in the same critical section that ends the previous one, so a
session never shows ``idle`` between queued turns.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from stateful.reference import faults
from stateful.reference.agent import (
    LoopSettings,
    ModelReply,
    OpenAIModel,
    TurnControl,
    TurnResult,
    run_turn,
)
from stateful.reference.spec import AgentSpec, TerminalSpec

_Known = TypeVar("_Known")

ToolRunner = Callable[[str, str], str]
ToolBinder = Callable[[str, Mapping[str, TerminalSpec]], ToolRunner]
"""``(session_id, declared terminals) -> run(name, arguments)``: the session's view of the tools."""
ModelFactory = Callable[[AgentSpec], Callable[[Sequence[Mapping[str, Any]]], ModelReply]]


class Registry(Protocol):
    """What the service needs of ``TerminalRegistry`` (architecture.md)."""

    def list(self, session_id: str) -> Sequence[Any]: ...
    def close_session(self, session_id: str) -> int: ...


class NotFound(LookupError):
    """An unknown agent, session, runner or item id; the message names it."""


class Invalid(ValueError):
    """A request that is well-formed JSON but cannot be honoured; the message says why."""


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class Agent:
    id: str
    name: str
    spec: AgentSpec
    created_at: int


@dataclass
class _Item:
    id: str
    type: str
    response_id: str | None
    created_at: int
    fields: dict[str, Any]
    status: str = "completed"

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "response_id": self.response_id, "type": self.type, "status": self.status,
                "created_at": self.created_at}

    def flat(self) -> dict[str, Any]:
        return {**self._head(), **self.fields}

    def nested(self) -> dict[str, Any]:
        return {**self._head(), "data": dict(self.fields)}


@dataclass
class _Turn:
    item_id: str
    response_id: str
    content: list[dict[str, Any]]
    control: TurnControl = field(default_factory=TurnControl)


@dataclass
class Page:
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class Session:
    """One conversation: items, status, turn queue and the tool runner bound to its terminals."""

    def __init__(self, *, session_id: str, agent: Agent, run_tool: ToolRunner) -> None:
        self.id = session_id
        self.agent = agent
        self.created_at = int(time.time())
        self.runner_id: str | None = None
        self.status = "idle"
        self.last_task_error: dict[str, str] | None = None
        self.run_tool = run_tool
        self.deleted = False
        self.lock = threading.RLock()
        self.items: list[_Item] = []
        self.positions: dict[str, int] = {}
        self.conversation: list[dict[str, Any]] = []
        self.queue: deque[_Turn] = deque()
        self.current: _Turn | None = None
        self.worker: threading.Thread | None = None
        self.outcomes: dict[str, dict[str, Any]] = {}

    # Caller holds self.lock for everything below.
    def add_item(self, item_type: str, fields: dict[str, Any], *, item_id: str | None = None,
                 response_id: str | None = None) -> _Item:
        item = _Item(
            id=item_id or _new_id(_PREFIXES.get(item_type, "item")),
            type=item_type,
            response_id=response_id if response_id is not None else (
                self.current.response_id if self.current else None
            ),
            created_at=int(time.time()),
            fields=fields,
        )
        self.positions[item.id] = len(self.items)
        self.items.append(item)
        return item

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "session",
            "agent_id": self.agent.id,
            "agent_name": self.agent.name,
            "status": self.status,
            "runner_id": self.runner_id,
            "created_at": self.created_at,
        }


_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "resource_event": "evt",
}


class SessionService:
    """All agents and sessions of one server, and the threads that run their turns."""

    def __init__(
        self,
        *,
        registry: Registry,
        bind_tools: ToolBinder,
        tool_schemas: Sequence[Mapping[str, Any]],
        runner_id: str,
        settings: LoopSettings | None = None,
        model_factory: ModelFactory | None = None,
    ) -> None:
        self.registry = registry
        self.runner_id = runner_id
        self.settings = settings or LoopSettings()
        self._bind_tools = bind_tools
        self._tool_schemas = [dict(schema) for schema in tool_schemas]
        self._model_factory = model_factory or self._openai_model
        self._models: dict[tuple[str, str, str, str], Any] = {}
        self._lock = threading.Lock()
        self._agents: dict[str, Agent] = {}
        self._sessions: dict[str, Session] = {}
        self._views: dict[str, dict[str, dict[str, Any]]] = {}
        """Planted fault "view-keeps-closed" only: every terminal resource each session's view showed."""
        self._closed = False

    # -- agents and sessions -------------------------------------------------------------------
    def register_agent(self, spec: AgentSpec) -> Agent:
        agent = Agent(id=_new_id("agent"), name=spec.name, spec=spec, created_at=int(time.time()))
        with self._lock:
            self._agents[agent.id] = agent
        return agent

    def create_session(self, agent_id: str) -> Session:
        agent = self._known(self._agents, agent_id, "agent_id")
        with self._lock:
            if self._closed:
                raise Invalid("the server is shutting down")
        session_id = _new_id("conv")
        run_tool = self._bind_tools(session_id, agent.spec.terminals)
        session = Session(session_id=session_id, agent=agent, run_tool=run_tool)
        with self._lock:
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        return self._known(self._sessions, session_id, "session")

    def _known(self, table: Mapping[str, _Known], key: str, what: str) -> _Known:
        """``table[key]``, looked up under the lock; an unknown key is the API's 404."""
        with self._lock:
            value = table.get(key)
        if value is None:
            raise NotFound(f"unknown {what} {key!r}")
        return value

    def list_sessions(self, agent_name: str | None, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            sessions = [
                s for s in self._sessions.values() if agent_name is None or s.agent.name == agent_name
            ]
        sessions.reverse()  # newest first: dict order is creation order
        return [s.summary() for s in sessions[:limit]]

    def bind_runner(self, session_id: str, runner_id: str) -> Session:
        session = self.get(session_id)
        if runner_id != self.runner_id:
            raise NotFound(f"unknown runner {runner_id!r}")
        with session.lock:
            session.runner_id = runner_id
        return session

    # -- snapshots and items --------------------------------------------------------------------
    def snapshot(self, session_id: str) -> dict[str, Any]:
        session = self.get(session_id)
        with session.lock:
            return {
                **session.summary(),
                "last_task_error": session.last_task_error,
                "items": [item.nested() for item in session.items],
                "responses": {rid: dict(outcome) for rid, outcome in session.outcomes.items()},
            }

    def items_page(
        self, session_id: str, *, order: str, limit: int, after: str | None, before: str | None
    ) -> Page:
        """One exact page: items strictly between the cursors, in ``order``.

        With only ``before``, the page is the ``limit`` items nearest to it (has_more: more beyond).
        """
        session = self.get(session_id)
        with session.lock:
            items = session.items if order == "asc" else session.items[::-1]
            positions = {item.id: i for i, item in enumerate(items)}
            for name, cursor in (("after", after), ("before", before)):
                if cursor is not None and cursor not in positions:
                    raise NotFound(f"unknown item id {cursor!r} in '{name}'")
            low = positions[after] + 1 if after is not None else 0
            high = positions[before] if before is not None else len(items)
            window = items[low:high] if low < high else []
            if before is not None and after is None:
                page = window[max(0, len(window) - limit):]
            else:
                page = window[:limit]
            has_more = len(window) > len(page)
            data = [item.flat() for item in page]
        first_id = data[0]["id"] if data else None
        last_id = data[-1]["id"] if data else None
        if faults.enabled("items-page-gap") and has_more and len(data) > 1:
            data = data[:-1]
        return Page(data=data, first_id=first_id, last_id=last_id, has_more=has_more)

    def record_resource_event(
        self, session_id: str, event_type: str, resource_id: str, resource: Mapping[str, Any]
    ) -> None:
        """Registry ``on_event`` target: a ``resource_event`` item in the session's history."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return
        with session.lock:
            session.add_item(
                "resource_event",
                {
                    "event_type": event_type,
                    "resource_id": resource_id,
                    "resource_type": "terminal",
                    "resource": dict(resource),
                },
            )

    def terminals(self, session_id: str) -> list[dict[str, Any]]:
        """The session's running terminals as resources (a second view of list's running rows)."""
        self.get(session_id)
        resources = []
        for info in self.registry.list(session_id):
            if not getattr(info, "running", False):
                continue
            resources.append(
                {
                    "id": info.resource_id,
                    "object": "resource",
                    "type": "terminal",
                    "resource_type": "terminal",
                    "terminal": info.terminal,
                    "session": info.session,
                    "command": info.command,
                    "running": True,
                    "has_os_env": info.has_os_env,
                    "tmux_socket": info.tmux_socket,
                }
            )
        if faults.enabled("view-keeps-closed"):
            # Planted fault: the view is a cache that adds what it sees and never drops a terminal.
            seen = self._views.setdefault(session_id, {})
            seen.update((r["id"], r) for r in resources)
            return list(seen.values())
        return resources

    # -- turns ----------------------------------------------------------------------------------
    def post_message(self, session_id: str, content: list[dict[str, Any]]) -> _Turn:
        """Queue a user message; it starts a turn now if none is running."""
        session = self.get(session_id)
        turn = _Turn(item_id=_new_id("msg"), response_id=_new_id("resp"), content=content)
        with session.lock:
            if session.deleted or self._closed:
                raise Invalid("the session is closed")
            session.queue.append(turn)
            if session.worker is None:
                first = self._start_next(session)
                assert first is not None
                session.worker = threading.Thread(
                    target=self._work, args=(session, first), name=f"turns-{session.id}", daemon=True
                )
                session.worker.start()
        return turn

    def interrupt(self, session_id: str) -> bool:
        """Stop the running turn (queued turns stay queued); False when nothing was running."""
        session = self.get(session_id)
        with session.lock:
            if session.current is None:
                return False
            session.current.control.cancel()
            return True

    def _start_next(self, session: Session) -> _Turn | None:
        """Begin the next queued turn (caller holds the session lock)."""
        if not session.queue or session.deleted:
            session.queue.clear()
            return None
        turn = session.queue.popleft()
        session.current = turn
        session.status = "running"
        session.last_task_error = None
        session.outcomes[turn.response_id] = {"status": "running", "error": None}
        fields = {"role": "user", "content": turn.content}
        session.add_item("message", fields, item_id=turn.item_id, response_id=turn.response_id)
        session.conversation.append({"type": "message", **fields})
        return turn

    def _work(self, session: Session, turn: _Turn | None) -> None:
        while turn is not None:
            result = self._run(session, turn)
            with session.lock:
                session.current = None
                if result.status == "completed":
                    session.status = "idle"
                    session.outcomes[turn.response_id] = {"status": "completed", "error": None}
                else:
                    session.status = "failed"
                    session.last_task_error = result.error
                    session.outcomes[turn.response_id] = {"status": "failed", "error": result.error}
                turn = self._start_next(session)
                if turn is None:
                    session.worker = None

    def _run(self, session: Session, turn: _Turn) -> TurnResult:
        def record(item_type: str, fields: dict[str, Any]) -> None:
            with session.lock:
                session.add_item(item_type, fields, response_id=turn.response_id)

        try:
            model = self._model_for(session.agent.spec)
            return run_turn(
                model=model,
                conversation=session.conversation,
                run_tool=session.run_tool,
                record=record,
                control=turn.control,
                max_model_calls=self.settings.max_model_calls,
            )
        except Exception as exc:  # never leave a session "running" because of a bug
            return TurnResult("failed", error={"code": "internal_error", "message": repr(exc)})

    def _model_for(self, spec: AgentSpec) -> Callable[[Sequence[Mapping[str, Any]]], ModelReply]:
        key = (spec.base_url, spec.api_key, spec.model, spec.prompt)
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = self._model_factory(spec)
        return model

    def _openai_model(self, spec: AgentSpec) -> OpenAIModel:
        return OpenAIModel(
            base_url=spec.base_url,
            api_key=spec.api_key,
            model=spec.model,
            instructions=spec.prompt,
            tools=self._tool_schemas,
            settings=self.settings,
        )

    # -- closing --------------------------------------------------------------------------------
    def delete_session(self, session_id: str, *, timeout: float = 15.0) -> int:
        """Stop the session's turns, close its terminals and forget it; returns terminals closed."""
        session = self.get(session_id)
        worker = self._stop(session)
        if worker is not None:
            worker.join(timeout)
        closed = self.registry.close_session(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)
        return closed

    def _stop(self, session: Session) -> threading.Thread | None:
        with session.lock:
            session.deleted = True
            session.queue.clear()
            if session.current is not None:
                session.current.control.cancel()
            return session.worker

    def close(self, *, timeout: float = 15.0) -> None:
        """Interrupt every turn and wait (bounded) for the turn threads; terminals are the
        registry's to close (``shutdown``), after this returns."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
            models = list(self._models.values())
        workers = [w for w in (self._stop(s) for s in sessions) if w is not None]
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for model in models:
            closer = getattr(model, "close", None)
            if closer is not None:
                closer()

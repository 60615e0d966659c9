"""One interface for every system the machine can test (execution only: no model, no checks).

A :class:`Target` opens agent sessions. An :class:`AgentSession` runs a *turn*: a list of steps, each
step the list of tool calls that the model issues in ONE reply (so the calls of a step run
concurrently, the steps one after the other). It returns every call's output string, untouched, and
exposes what else a client can observe: the session's resource events so far, its
``/resources/terminals`` view (``None`` where the target has none), and delete.

Keeping execution behind this interface is what lets the same rules, model and checks run in-process
(:mod:`stateful.targets.direct`) and over HTTP against any contract server
(:mod:`stateful.targets.sessions`).
"""

from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stateful.model import Call, EventView

__all__ = ["SESSIONS_API", "Server", "Call", "EventView", "Step", "AgentSession", "Target", "StepTimeout", "TargetError", "ServerError",
           "ConversationTooLarge"]

Step = Sequence[Call]
"""The calls of one model reply (they run concurrently)."""


class TargetError(RuntimeError):
    """The target could not run a turn for a reason outside the tools (no answer, a 5xx, a failed
    turn, a hang). Not a contract violation: reported as what it is, never written as a repro."""


class ConversationTooLarge(RuntimeError):
    """A turn failed because the model refused a call for its size: the tester let the session's
    conversation grow past what the model accepts (``conversation_budget``). The tester's error, not
    the server's: never a :class:`TargetError`, never a repro; its message is one line."""


class ServerError(TargetError):
    """The server answered a request with a 5xx status: it broke. A finding of its own kind, reported
    with the request; not a contract violation (a replay would test the server's health, not the
    tools), so it is never written as a repro."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        self.method, self.url, self.status, self.body = method, url, status, body
        excerpt = " ".join(body.split())[:300]
        super().__init__(f"the server broke: {method} {url} answered HTTP {status}: {excerpt!r} "
                         "(a server failure, not a contract violation)")


@dataclass
class StepTimeout(TargetError):
    """A step did not finish within the per-step timeout: reported as a hang, never retried."""

    step_index: int
    calls: Sequence[Call]
    timeout: float
    where: str
    """The target's address (URL, or "in-process registry")."""
    detail: str = ""
    panes: dict[str, str] = field(default_factory=dict)
    """Pane contents of the terminals involved (filled in by the machine through the probe)."""

    def __str__(self) -> str:
        lines = [f"HANG: step {self.step_index} did not finish within {self.timeout:.0f} s on {self.where}",
                 f"  calls: {list(self.calls)!r}"]
        if self.detail:
            lines.append(f"  {self.detail}")
        for name, text in self.panes.items():
            lines.append(f"  pane {name}:\n" + "\n".join("    | " + row for row in text.rstrip("\n").split("\n")))
        return "\n".join(lines)


class AgentSession(abc.ABC):
    """One agent session (conversation) on a target."""

    label: str
    """Short name for reports (session id)."""

    @abc.abstractmethod
    def run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        """Run the steps as one turn; return outputs[step][call]. Raise :class:`StepTimeout` on a hang."""

    @abc.abstractmethod
    def events(self) -> list[EventView]:
        """All resource events of this session so far, in the order the target recorded them."""

    def terminals_view(self) -> list[Mapping[str, Any]] | None:
        """The ``/resources/terminals`` entries, or None where the target has no such view."""
        return None

    @abc.abstractmethod
    def delete(self) -> None:
        """Delete the session: the server closes all of its terminals."""


SESSIONS_API = "sessions-api"
"""What a target observes when it reaches the server through the sessions API (CONTRACT §2): each turn's
items and their pages, the answers' statuses, the ``/resources/terminals`` view. Its failures can be
replayed as plain seed-style tests (CONTRACT §6)."""


@dataclass(frozen=True)
class Server:
    """A running contract server and its mock LLM, as CONTRACT §6 names them."""

    server_url: str
    mock_llm_url: str
    runner_id: str


class Target(abc.ABC):
    """A system under test. A kind of target is its class plus one line in
    :data:`stateful.targets.registry.KINDS`; everything opens it through :meth:`opened`."""

    name: str
    where: str
    """Address for reports."""
    observes: frozenset[str] = frozenset()
    """What it observes besides the tools' outputs (:data:`SESSIONS_API`): what a run can judge there."""
    declared: Mapping[str, str]
    """Declared terminal name -> command line, as the agent spec declares them."""
    carries_conversation: bool = False
    """Whether every model call of a turn carries the agent session's whole conversation (a server's
    agent loop, which a model API refuses past its size); the in-process target has no model."""
    events_with_calls: bool = False
    """Whether the target records a launch's created event and a close's deleted event before the
    call returns (the in-process registry does). Elsewhere they are polled for: §2.4 gives no bound."""

    takes_server: bool = False
    """It can reach a server given by URL (``--server-url``); else it runs its own system."""

    @classmethod
    def opened(cls, server: Server | None, latency: float) -> AbstractContextManager[Target]:
        """A target reaching ``server`` (None: one of its own, on the reference stack, whose server
        answers ``latency`` seconds late), closed with everything it started on exit. Every kind of
        the registry has it (a test's fake target, built by hand, need not)."""
        raise NotImplementedError(f"{cls.__name__} is opened by hand, not as a kind of target")

    @abc.abstractmethod
    def open_session(self) -> AgentSession:
        ...

    def delete_sessions(self, sessions: Sequence[AgentSession]) -> list[Exception | None]:
        """DELETE each of ``sessions`` (a program's teardown): what each raised, None where it went.
        One after another here; a target whose DELETE is a few round trips sends them at once."""
        failures: list[Exception | None] = []
        for session in sessions:
            try:
                session.delete()
            except Exception as exc:  # keep cleaning the others
                failures.append(exc)
            else:
                failures.append(None)
        return failures

    def close(self) -> None:  # noqa: B027 - optional
        """Release what the target holds (threads, clients)."""

"""The in-process target: the reference tools called directly on a registry this target owns.

No HTTP, no model harness: the fastest way to search the tools' own behaviour, and the one that
isolates a bug to the tools/registry when the sessions target fails too. A step with several calls
runs them in threads released together by a barrier, as a server runs the calls of one reply.

Like omnigent's runner (which adds ``tui:main``), each session gets one terminal that the "server"
made itself under an undeclared name, so the machine can check that such a pair is never
addressable and that the first list is treated as a baseline.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import uuid
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from stateful import meter
from stateful.model import Call, EventView
from stateful.reference.registry import ResourceEvent, TerminalRegistry
from stateful.reference.spec import TerminalSpec
from stateful.reference.tools import ToolContext, call_tool
from stateful.targets.base import AgentSession, Server, Step, StepTimeout, Target

__all__ = ["DirectTarget", "DECLARED_SPECS", "SERVER_MADE"]

BASHRC = str(Path(__file__).with_name("bashrc"))
"""The ``bash`` terminal's rc file: a realistic prompt, without the machine's own ~/.bashrc."""
DECLARED_SPECS: dict[str, TerminalSpec] = {
    "bash": TerminalSpec(name="bash", command="bash", args=("--noprofile", "--rcfile", BASHRC)),
    "sh": TerminalSpec(name="sh", command="bash", args=("--norc", "--noprofile")),
}
SERVER_MADE = TerminalSpec(name="tui", command="bash", args=("--norc", "--noprofile"))
"""An undeclared terminal the target starts in every session before the agent's first call."""


class DirectSession(AgentSession):
    def __init__(self, target: DirectTarget, session_id: str) -> None:
        self._target = target
        self.session_id = session_id
        self.label = session_id
        self._context = ToolContext(target.registry, session_id, DECLARED_SPECS)

    def run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        with meter.timed("terminal direct turn"):
            return [self._run_step(i, step, step_timeout) for i, step in enumerate(steps)]

    def _run_step(self, index: int, step: Step, timeout: float) -> list[str]:
        """One thread per call (a daemon: a hung call cannot block the test run's exit)."""
        barrier = threading.Barrier(len(step))
        futures: list[cf.Future[str]] = [cf.Future() for _ in step]

        def run(call: Call, future: cf.Future[str]) -> None:
            try:
                barrier.wait(timeout=timeout)
            except threading.BrokenBarrierError:
                pass
            try:
                future.set_result(call_tool(call.tool, call.arguments, self._context))
            except BaseException as exc:  # reported by the machine as the step's failure
                future.set_exception(exc)

        for call, future in zip(step, futures):
            threading.Thread(target=run, args=(call, future), name="direct-call", daemon=True).start()
        done, pending = cf.wait(futures, timeout=timeout)
        if pending:
            raise StepTimeout(index, list(step), timeout, self._target.where,
                              detail=f"{len(pending)} of {len(step)} calls still running")
        return [f.result() for f in futures]

    def events(self) -> list[EventView]:
        with self._target.lock:
            events = list(self._target.events.get(self.session_id, ()))
        return [EventView(e.event_type, e.resource_id, e.resource.get("terminal"), e.resource.get("session"))
                for e in events]

    def delete(self) -> None:
        self._target.registry.close_session(self.session_id)


class DirectTarget(Target):
    name = "direct"
    where = "in-process reference registry"
    events_with_calls = True
    """The registry emits a launch's and a close's event inside the call (its on_event callback)."""

    def __init__(self, *, server_made: bool = True) -> None:
        self.declared: Mapping[str, str] = {n: s.command_line for n, s in DECLARED_SPECS.items()}
        self.lock = threading.Lock()
        self.events: dict[str, list[ResourceEvent]] = {}
        self.registry = TerminalRegistry(on_event=self._record)
        self._server_made = server_made

    def _record(self, event: ResourceEvent) -> None:
        with self.lock:
            self.events.setdefault(event.session_id, []).append(event)

    @classmethod
    @contextmanager
    def opened(cls, server: Server | None, latency: float) -> Iterator[DirectTarget]:
        """The reference tools in-process: no server to reach, nothing that answers late."""
        if server is not None:
            raise ValueError("the direct target runs the reference tools in-process: it takes no server")
        direct = cls()
        try:
            yield direct
        finally:
            direct.close()

    def open_session(self) -> DirectSession:
        session_id = f"direct-{uuid.uuid4().hex[:12]}"
        if self._server_made:
            self.registry.launch(session_id, SERVER_MADE, "main")
        return DirectSession(self, session_id)

    def close(self) -> None:
        self.registry.shutdown()

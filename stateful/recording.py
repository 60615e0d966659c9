"""What the sessions target did, turn by turn, while a shrunk program is replayed once more.

A plain repro (``stateful.plain``) must script each turn's tool calls verbatim and know what came
back, but the machine's report only holds the program's rule calls (``state.launch(...)``), not the
calls they made. So the program is replayed with a :class:`Recorder` set on the target
(``SessionsTarget.recorder``), which notes each operation the machine made through it: a session
opened (with the terminals the agent declared), a turn's steps and outputs, a look at the resource
events or ``/resources/terminals``, a DELETE. Each operation carries the program step that made it.

Pure data, no I/O: the target calls it, :mod:`stateful.plain` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stateful.model import Call

__all__ = ["Op", "Recorder"]


@dataclass
class Op:
    """One operation of the machine on the target."""

    kind: str
    """"open" | "turn" | "view" | "events" | "delete"."""
    session_id: str
    step: tuple[int, str]
    """(number, line) of the program step that made it (0, "" before the first)."""
    steps: list[list[Call]] = field(default_factory=list)
    """A turn's calls, one list per model reply."""
    outputs: list[list[str]] | None = None
    """A turn's outputs (None while it runs, or if it failed before they were read)."""
    terminals: Mapping[str, Any] | None = None
    """An "open": the terminals block the agent spec declared (as registered)."""
    data: Any = None
    """A "view": the ``data`` list the server answered; an "events": the session's ``resource_event``
    items as the target held them then."""


class Recorder:
    """Collects :class:`Op` s in order; ``step`` is set by whoever replays the program."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.step: tuple[int, str] = (0, "")

    def opened(self, session_id: str, terminals: Mapping[str, Any]) -> None:
        self.ops.append(Op("open", session_id, self.step, terminals=dict(terminals)))

    def turn(self, session_id: str, steps: Sequence[Sequence[Call]]) -> Op:
        op = Op("turn", session_id, self.step, steps=[list(s) for s in steps])
        self.ops.append(op)
        return op

    def view(self, session_id: str, data: Any) -> None:
        self.ops.append(Op("view", session_id, self.step, data=data))

    def events(self, session_id: str) -> Op:
        """A look at the events; the caller sets ``data`` once it has them."""
        op = Op("events", session_id, self.step)
        self.ops.append(op)
        return op

    def deleted(self, session_id: str) -> None:
        self.ops.append(Op("delete", session_id, self.step))

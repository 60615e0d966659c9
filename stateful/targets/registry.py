"""Every kind of target the tester drives, in one table: adding a target is its own module (a
:class:`~stateful.targets.base.Target` with its ``name``, what it ``observes`` and how it is
``opened``) plus one line in :data:`KINDS`.

A kind names what the pytest run (``--target``), the campaigns (``campaign --target``), the benchmarks,
the fault proofs and the repros (``repro_machine(TARGET, ...)``) all mean by it; each of them opens its
targets here (:func:`open_target`), never by importing a target module itself. What a kind's target
observes decides what a run can judge there (a clause no program could observe on it is "not
exercised", with why) and whether a failure can also be written as a plain, seed-style test for the
server's own suite (CONTRACT §6: the sessions API and a mock LLM's queue). Each kind has its machine
class, named after it (``SessionsMachine``): the name a reported program starts with.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from stateful.machine import TerminalMachine
from stateful.targets.base import SESSIONS_API, Server, Target
from stateful.targets.direct import DirectTarget
from stateful.targets.sessions import SessionsTarget

__all__ = ["KINDS", "DirectMachine", "Server", "SessionsMachine", "TargetKind", "UnknownTarget", "kind", "open_target"]


@dataclass(frozen=True)
class TargetKind:
    """One kind of target: its class, a line saying what it is, and the machine class its programs
    print as (made here, ``<Name>Machine``)."""

    name: str
    summary: str
    """One line for ``--help`` and the docs."""
    target: type[Target]
    machine: type[TerminalMachine] = field(init=False)

    def __post_init__(self) -> None:
        machine = type(f"{self.name.title()}Machine", (TerminalMachine,),
                       {"__doc__": f"The machine against {self.summary}.", "__module__": __name__})
        object.__setattr__(self, "machine", machine)
        globals()[machine.__name__] = machine  # importable by name, as a repro's program prints it

    @property
    def takes_server(self) -> bool:
        """It can reach a server given by URL (``--server-url``)."""
        return self.target.takes_server

    @property
    def plain_repros(self) -> bool:
        """A failure on it can also be written as a plain seed-style test (CONTRACT §6)."""
        return SESSIONS_API in self.target.observes


KINDS: dict[str, TargetKind] = {kind.name: kind for kind in (
    TargetKind("direct", "the reference tools in-process (no HTTP, no agent loop)", DirectTarget),
    TargetKind("sessions", "a contract server through its sessions API and a mock LLM's queue", SessionsTarget),
)}
"""The kinds of target, by name, in the order runs take them."""

DirectMachine: type[TerminalMachine] = KINDS["direct"].machine
SessionsMachine: type[TerminalMachine] = KINDS["sessions"].machine


class UnknownTarget(ValueError):
    """A target name no kind has (one line, naming the known ones)."""


def kind(name: str) -> TargetKind:
    """The kind named ``name``; :class:`UnknownTarget` otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownTarget(f"unknown target {name!r}; known: {', '.join(KINDS)}") from None


def open_target(name: str, server: Server | None = None, latency: float = 0.0) -> AbstractContextManager[Target]:
    """A target of kind ``name`` reaching ``server`` (None: its own, on the reference stack, whose
    sessions API answers ``latency`` seconds late), closed with everything it started on exit."""
    return kind(name).target.opened(server, latency)

"""Counters and timers for the ``machine`` benchmark: where the time of a step goes.

The helpers that wait (HTTP requests of the sessions target, the mock's configure, polling sleeps,
the in-process target's tool calls, the probe's tmux and /proc reads) and the reference stack's agent
loop (model calls, tool calls) report here. Off by default: every hook is one test of a module
global (``ACTIVE is None``), so the machine and the fault hunts pay nothing measurable; the benchmark
switches it on with :func:`metering` around a run and reads the totals.

Kinds are strings grouped by their prefix: ``http <what>`` (the tester's thread blocked on a request
to the sessions API), ``mock configure``, ``sleep <where>`` (a polling sleep), ``terminal <what>``
(the tester's thread waiting on tmux or a tool in process) and ``server <what>`` (work the embedded
stack did in its own threads, which overlaps the tester's waits and is counted for requests per turn,
not for the division of a step's time).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

__all__ = ["ACTIVE", "Meter", "metering", "timed", "beside", "waited", "received", "largest", "sleep", "http_kind"]


@dataclass
class Meter:
    """Totals per kind: seconds spent and how many times."""

    seconds: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    """Bytes of response bodies per kind (HTTP only: what a poll costs besides its round trip)."""
    largest: Counter[str] = field(default_factory=Counter)
    """The largest size seen per kind (bytes): a model request's body, an agent session's conversation."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, seconds: float, count: int = 1) -> None:
        with self._lock:  # the stack's threads report too
            self.seconds[kind] += seconds
            self.counts[kind] += count


ACTIVE: Meter | None = None
"""The meter being filled, or None (off: the hooks cost one global lookup)."""

_thread = threading.local()


@contextmanager
def metering() -> Iterator[Meter]:
    """Switch metering on for the block; the meter holds the totals afterwards."""
    global ACTIVE
    previous, ACTIVE = ACTIVE, Meter()
    try:
        yield ACTIVE
    finally:
        ACTIVE = previous


@contextmanager
def timed(kind: str, *, count: int = 1) -> Iterator[None]:
    """Time the block as ``kind`` (nothing when metering is off). In a block run :func:`beside` the
    tester's thread it is counted with no seconds; ``count=0``: seconds only (see :func:`waited`)."""
    meter = ACTIVE
    if meter is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        meter.add(kind, 0.0 if getattr(_thread, "beside", False) else time.perf_counter() - started, count)


@contextmanager
def beside() -> Iterator[None]:
    """The block runs beside the tester's thread (a request sent in parallel with another): what it
    times is counted, but its seconds are not the tester's waiting (see :func:`waited`)."""
    _thread.beside = True
    try:
        yield
    finally:
        _thread.beside = False


def waited(kind: str) -> AbstractContextManager[None]:
    """Time the block as seconds of ``kind`` without counting one more of it: the tester's thread
    waiting for the rest of a request sent :func:`beside` it."""
    return timed(kind, count=0)


def received(kind: str, size: int) -> None:
    """Count ``size`` bytes of a response body as ``kind`` (nothing when metering is off)."""
    meter = ACTIVE
    if meter is not None:
        with meter._lock:
            meter.received[kind] += size


def largest(kind: str, size: int) -> None:
    """Keep ``size`` as ``kind``'s largest if it is (nothing when metering is off)."""
    meter = ACTIVE
    if meter is not None:
        with meter._lock:
            meter.largest[kind] = max(meter.largest[kind], size)


def sleep(seconds: float, where: str) -> None:
    """``time.sleep`` of a polling loop, counted as ``sleep <where>`` when metering is on."""
    meter = ACTIVE
    if meter is None:
        time.sleep(seconds)
        return
    started = time.perf_counter()
    time.sleep(seconds)
    meter.add(f"sleep {where}", time.perf_counter() - started)


def http_kind(method: str, path: str) -> str:
    """What a sessions-API request is for, from its method and path (for requests per turn)."""
    parts = [p for p in path.split("/") if p]
    if method == "GET" and len(parts) == 4 and parts[:2] == ["v1", "sessions"] and parts[3] == "items":
        return "http items page"
    if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "sessions"]:
        return "http snapshot poll"
    if method == "POST" and len(parts) == 4 and parts[3] == "events":
        return "http message post"
    if method == "GET" and parts[-2:] == ["resources", "terminals"]:
        return "http terminals view"
    return "http setup/other"

"""A fresh target of either kind on the reference stack, closed (stack and terminals included) on
exit: what the fault hunts and the machine benchmark each run their programs against."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from stateful.targets.base import Target

__all__ = ["fresh_target"]


@contextmanager
def fresh_target(kind: str, latency: float = 0.0) -> Iterator[Target]:
    """``direct`` (the in-process registry) or ``sessions`` (an embedded stack whose sessions API
    answers ``latency`` seconds late)."""
    if kind == "direct":
        from stateful.targets.direct import DirectTarget

        direct = DirectTarget()
        try:
            yield direct
        finally:
            direct.close()
        return
    from stateful.reference.stack import EmbeddedStack
    from stateful.targets.sessions import SessionsTarget

    with EmbeddedStack(latency=latency) as stack:
        sessions = SessionsTarget(stack.server_url, stack.mock_llm_url, stack.runner_id)
        try:
            yield sessions
        finally:
            sessions.close()

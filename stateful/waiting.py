"""When a wait for an "eventually" may end in a verdict of absence ("never showed", "never ran",
"never removed", "never recorded").

Such a verdict is only as good as its last observation: one that began before the deadline may have
been answered from an earlier state, however long it took to come back (a busy machine, a slow
server). So a wait is over only at a look that *began* after its deadline, and not before it made
``LOOKS`` looks; and its deadline grows with the slowness measured (the caller's recent turns or
round trips, and the longest look of the wait itself): the contract's times are about the server,
not about the tester's scheduler. Every polling loop of the tester (:meth:`stateful.world.World.eventually`,
an exit's removal, a turn's end, the items after it) decides with a :class:`Wait`; a plain repro,
which imports nothing of this package, carries the same rule in its own text (``stateful.plain``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LOOKS", "Wait"]

LOOKS = 2
"""Fewest observations a verdict of absence rests on: one more than the first, which a slow first
answer (a busy machine) may have taken before anything could show."""


class Wait:
    """One wait: when it began, its looks, and when it is over. Its deadline is ``within`` seconds from
    its start plus the slowness measured (``slowness()``, e.g. the run's recent turns, and the longest
    look of this wait; together at most ``within`` more): a server or machine that is measurably slow
    gets that much longer. It is over only at a look that *began* after that deadline, and not before
    ``least`` looks (``looks``: those the caller made already)."""

    def __init__(self, within: float, slowness: Callable[[], float] | None = None, *,
                 looks: int = 0, least: int = LOOKS) -> None:
        self.within = within
        self.slowness = slowness
        self.started = time.monotonic()
        self.looks = looks
        self.least = least
        self.longest = 0.0
        """Seconds the longest look of this wait took."""
        self.last_began = self.started

    def look(self) -> float:
        """A look begins now: the time it began (give it to :meth:`looked` and :meth:`over`)."""
        self.looks += 1
        self.last_began = time.monotonic()
        return self.last_began

    def looked(self, began: float) -> None:
        """The look begun at ``began`` has its answer (how long it took counts as slowness)."""
        self.longest = max(self.longest, time.monotonic() - began)

    @property
    def deadline(self) -> float:
        slow = max(self.longest, self.slowness() if self.slowness is not None else 0.0)
        return self.started + self.within + min(slow, self.within)

    def over(self, began: float) -> bool:
        """Whether the look begun at ``began`` ends the wait: it began after the deadline, and enough
        looks were made."""
        return self.looks >= self.least and began > self.deadline

    @property
    def waited(self) -> float:
        """Seconds from the wait's start to the start of its last look."""
        return self.last_began - self.started

"""The items of one agent session as the sessions target reads them (CONTRACT §2.7): the log it holds,
the new items fetched after the last one held, and the walks in small pages that check pagination.

Items are records: each is fetched once and kept, so a poll asks only for what follows the last item
held (one page of 1000, usually one request; the session's snapshot would carry the whole history).

Pagination must be exact (§2.7), and a gap would otherwise show up as a missing tool output far from
its cause: every item is walked once more in small, varying page sizes (``after=last_id`` while
``has_more``) and compared with what the large pages gave (:meth:`ItemLog.small_page_walk`). The
sessions target decides when a walk runs (beside a turn, before the DELETE); the checks of what the
pages say are in :mod:`stateful.http_surface`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

from stateful import http_surface
from stateful.client import _role

if TYPE_CHECKING:
    from stateful.targets.sessions import SessionsTarget

__all__ = ["ItemLog", "PAGE_SIZES"]

PAGE_SIZES = (7, 2, 1000, 3, 1)
"""Page sizes cycled by the walks in small pages (small ones make many pages)."""
LARGE_PAGE = 1000
"""The page size of the items' own fetch (usually one request for everything new)."""
MAX_PAGES = 100_000
"""Pages one walk follows at most: a server whose ``has_more`` never ends must not hold the run."""

Item = dict[str, Any]


def _as_planned(data: list[Item], more: bool, ids: list[Any], *, last: bool) -> bool:
    """Whether a page of a walk holds the ids planned for it (and, but for the last, says
    ``has_more``). The last may also hold items recorded since the walk was planned, after them."""
    got = [i.get("id") for i in data]
    return got[: len(ids)] == ids if last else got == ids and more


class ItemLog:
    """The items of one session held so far, and the reads that add to them or check their pages."""

    def __init__(self, target: SessionsTarget, session_id: str) -> None:
        self._t = target
        self.path = f"/v1/sessions/{session_id}/items"
        self.items: list[Item] = []
        self._walks = itertools.count()
        self.walked = 0
        """How many of ``items`` the small-page walks have covered (see :meth:`small_page_walk`)."""

    # -- reading ----------------------------------------------------------------------------------
    def after(self, cursor: str | None) -> list[Item]:
        """The items after ``cursor`` (all, if None), in pages of 1000; the round trip measured (the
        target's ``rtt``: whether a server is slow)."""
        began = time.monotonic()
        items = self.walk(cursor, itertools.repeat(LARGE_PAGE))
        self._t.rtt = time.monotonic() - began
        return items

    def fetch_new(self) -> None:
        """Fetch the items after the last one held (usually one request) and hold them."""
        self.items.extend(self.after(self.last_id()))

    def last_id(self) -> str | None:
        return self.items[-1].get("id") if self.items else None

    def merge(self, cursor: str | None, page: list[Item]) -> None:
        """Add the items a poll read after ``cursor`` to those held. A poll sent before others were
        merged reads some of them again: they must be the same items, in the same order (§2.7)."""
        start = 0
        if cursor is not None:
            start = next(n + 1 for n in range(len(self.items) - 1, -1, -1) if self.items[n].get("id") == cursor)
        held = [i.get("id") for i in self.items[start:]]
        http_surface.reads_agree(cursor, [i.get("id") for i in page[: len(held)]], held)
        self.items.extend(page[len(held):])

    # -- what the items say -----------------------------------------------------------------------
    def replied(self, began: int) -> bool:
        """Whether a turn's final text reply is among the items held from index ``began`` on."""
        return any(i.get("type") == "message" and _role(i) == "assistant" for i in self.items[began:])

    def with_output(self) -> set[Any]:
        """The call ids that have a ``function_call_output`` item."""
        return {i.get("call_id") for i in self.items if i.get("type") == "function_call_output"}

    def of_type(self, kind: str) -> list[Item]:
        return [item for item in self.items if item.get("type") == kind]

    # -- pages --------------------------------------------------------------------------------------
    def walk(self, after: str | None, sizes: Iterator[int], enough: int | None = None,
             beside: bool = False) -> list[Item]:
        """Every item after ``after`` (all, if None), following ``after=last_id`` while ``has_more``
        with page sizes from ``sizes`` (or until it holds ``enough`` of them: a walk beside a turn
        leaves that turn's items to the next walk)."""
        items: list[Item] = []
        cursor = after
        for _ in range(MAX_PAGES):
            params: dict[str, Any] = {"order": "asc", "limit": next(sizes)}
            if cursor is not None:
                params["after"] = cursor
            data, more = self.page(params, beside)
            items.extend(data)
            if data:
                cursor = data[-1]["id"]
            if not more or (enough is not None and len(items) >= enough):
                break
            http_surface.no_empty_page_says_more(data, more, params)
        return items

    def page(self, params: dict[str, Any], beside: bool = False) -> tuple[list[Item], bool]:
        """One page of items and whether it says ``has_more`` (its shape judged by
        :func:`stateful.http_surface.page_of_items`)."""
        return http_surface.page_of_items(self._t.get_json(self.path, **params), params, beside=beside)

    def small_page_walk(self) -> Callable[[], None]:
        """A walk of every item held now after the last one walked, in small pages, compared with
        what the pages of 1000 gave: pagination must be exact (§2.7) at any size of the session.
        It runs beside a turn or another walk: items are records, so the walk reads the same pages
        whenever it runs (items recorded meanwhile may only follow).

        Its pages are requested at once, each after the id that the page before it must end with:
        where every answer is the page planned, they are the requests and answers of a walk that
        follows ``last_id`` one page after the other, in one round trip instead of one per page.
        Where one is not (a server may answer a shorter page, or a broken one another), that walk,
        one page after the other, decides."""
        start = self.items[self.walked - 1]["id"] if self.walked else None
        listed = [i.get("id") for i in self.items[self.walked:]]
        self.walked = len(self.items)
        first = next(self._walks) % len(PAGE_SIZES)
        sizes = PAGE_SIZES[first:] + PAGE_SIZES[:first]  # its own: walks may overlap
        plan: list[tuple[dict[str, Any], list[Any]]] = []  # each page's request and the ids it must hold
        at, size = 0, itertools.cycle(sizes)
        while at < len(listed):
            params: dict[str, Any] = {"order": "asc", "limit": next(size)}
            after = listed[at - 1] if at else start
            if after is not None:
                params["after"] = after
            plan.append((params, listed[at:at + params["limit"]]))
            at += params["limit"]

        def walk() -> None:
            pages: list[futures.Future[tuple[list[Item], bool]]] = [
                self._t.page(self.page, params, True) for params, _ in plan]
            answers = [answer.result() for answer in pages]
            if all(_as_planned(data, more, ids, last=n == len(plan) - 1)
                   for n, ((data, more), (_, ids)) in enumerate(zip(answers, plan))):
                return
            paged = self.walk(start, itertools.cycle(sizes), enough=len(listed), beside=True)
            http_surface.walk_is_exact([i.get("id") for i in paged], listed)

        return walk

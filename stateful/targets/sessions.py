"""The HTTP target: any server that speaks the sessions API (CONTRACT §2) with a mock LLM (§5).

Each agent session registers its own agent (a unique name, its own model name = its own mock-LLM
queue key, two declared terminals), binds the session to the runner, and runs a turn by configuring
its queue with one ``tool_calls`` reply per step plus a final text reply, posting a user message and
waiting until the turn ends. Outputs are read from ``/items`` by ``call_id``.

Waiting for a turn costs round trips, which is what a slow server makes expensive (docs/benchmarks.md,
the ``machine`` section). There are two ways, chosen per turn:

* One request at a time (:meth:`HttpSession._await_turn`; a fast server, or one whose turns are long
  beside its round trips: a real server's 0.4-1.5 s). The target polls ``/items`` after the last item
  it holds (one page, only the new items: the snapshot carries the whole history, 100-600 kB per poll
  late in a ci program), keeps what it gets (items are records: each is fetched once) and reads the
  snapshot, whose status says how the turn ended (§2.6), once the turn's final text reply is among
  them (and every ``SNAPSHOT_EVERY`` seconds before that, for a turn that fails without a reply; if
  that snapshot says it ended, the items are fetched once more, §2.6, and for a completed turn again
  until its reply shows, up to ``REPLY_SHOWS``). A hang is reported only from a poll sent after the
  step's deadline (:class:`stateful.waiting.Wait`'s rule). Polls are spaced from start to
  start, from 2 ms up to 10 ms (a fifth of the turn's time so far once that is longer, up to 100 ms),
  so a slow answer is not followed by a sleep as well; once an items poll takes ``PAIR_RTT`` or more
  with no time left between polls, each fetches the snapshot beside it.
* Overlapped (:meth:`HttpSession._overlapped_turn`; a server whose round trip is about a turn's
  length, ``SLOW_TURN``): from the moment the post is sent, up to ``OVERLAP`` polls are in flight,
  each the new items and the snapshot at once, and their answers are judged in the order they were
  sent, the same way. The turn's end is seen about one round trip after the post instead of three.

Requests beside the tester's own run in the target's side threads (httpx's ``Client`` may be shared
by threads). Nothing they raise is lost: the tester waits for them before it judges the turn, and
polls still in flight when a turn has ended are settled (their errors raised) at the next turn and
before the session's DELETE.

Pagination must be exact (§2.7): every item is walked once more in small pages
(:mod:`stateful.targets.items`, which holds a session's items): the first turn's items beside the
second turn, then every ``PAGE_CHECK_EVERY`` turns the items recorded since the last walk, beside the
turn that follows (items are records: the walk reads the same pages whenever it runs), and before the
session's DELETE the rest. A walk is not waited for at the end of its turn: it takes about three
round trips, longer than a slow server's turn, and like a poll still in flight it is settled (its
error raised) at the next turn and before the DELETE. Resource events are the session's
``resource_event`` items.

This module transports and records: what each answer must be is judged in :mod:`stateful.http_surface`.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import httpx

from stateful.client import (
    HARNESS,
    HEADERS,
    TurnTimeout,
    agent_spec_yaml,
    await_runner_online,
    configure_mock_llm,
    send_user_message_to_session,
    transport_failure,
    turn_outcome,
    unique_name,
)
from stateful import http_surface, meter
from stateful.model import EventView
from stateful.recording import Recorder
from stateful.reference.bundle import build_bundle
from stateful.targets.base import (SESSIONS_API, AgentSession, Server, ConversationTooLarge, ServerError, Step, StepTimeout, Target,
                                   TargetError)
from stateful.targets.direct import BASHRC
from stateful.targets.items import ItemLog
from stateful.waiting import Wait

__all__ = ["SessionsTarget", "SH_TERMINAL"]

BASH_TERMINAL = {"command": "bash", "args": ["--noprofile", "--rcfile", BASHRC]}
"""The ``bash`` terminal with the project's rc file (on a remote server a missing file is only warned
about by bash, which then starts without one)."""
SH_TERMINAL = {"command": "bash", "args": ["--norc", "--noprofile"],
               "os_env": {"type": "caller_process", "sandbox": {"type": "none"}}}
"""The second declared terminal: bash without rc files (the first, ``bash``, reads them)."""
TERMINALS = {"bash": BASH_TERMINAL, "sh": SH_TERMINAL}
"""The ``terminals`` block merged over the agent spec's (a plain repro registers the same)."""
PAGE_CHECK_EVERY = 8
"""Turns between two walks of the items in small pages (every item is walked once; a walk costs about
three requests however many items it covers, so batching turns saves round trips). On the first 10 ci
programs at 40 ms: 5.43 requests per turn with 4, 4.81 with 8, 4.32 with a walk only on the first turn
and before DELETE (docs/benchmarks.md); 8 keeps a gap within a few turns of its cause."""
SNAPSHOT_EVERY = 0.5
"""Seconds between snapshots of a running turn whose final reply has not shown in its items."""
POLL_FIRST, POLL_MAX = 0.002, 0.01
"""Interval between two polls of a running turn (start to start): doubling from the first to the max."""
PAIR_RTT = 0.02
"""An items poll that took this long, and at least the interval between two polls, marks a slow
server (every poll is a round trip, one after the other): its next polls fetch the snapshot beside
the items, in parallel, which saves the snapshot's own round trip at the end of each turn. Against a
fast one (the embedded stack: 2-5 ms) the snapshot stays one per turn: it carries the whole session
(70-600 kB), which both sides would parse for nothing on every poll."""
OVERLAP = 3
"""Polls in flight at once against a slow server (each the new items and the snapshot), sent a
third of a round trip apart from the post on: a turn's end is seen at most that late. (On the first
10 ci programs at 40 ms: 2 in flight took 47.1 s, 3 45.2 s, 4 44.5 s for a third more snapshots;
each snapshot costs the server the whole session, which a real server would pay for.)"""
SLOW_TURN = 4
"""A server whose last turn took less than this many round trips (post to end seen) is slow for the
tester: it is polled overlapped (``OVERLAP``). A turn of a real server (0.4-1.5 s) is long beside
its round trips, and is polled one request at a time: overlapped, it would be met with several
times the requests for a gain of one round trip in ten or more."""
SIDE_THREADS = 2 * OVERLAP + 2
"""Requests sent beside the tester's own at most at once: the polls, the post, a walk of the items."""
PAGE_THREADS = 8
"""Pages of the walks requested at most at once (a walk of a few turns' items is 2-4 pages)."""
POOLS = (("spare", 1), ("beside", SIDE_THREADS), ("page", PAGE_THREADS))
"""The target's thread pools and their sizes: the next session's registration (which runs the
runner's status check beside it), requests beside the tester's own (a walk among them, which waits
for its pages) and the walks' pages (which wait for nothing). Closing the target ends them in this
order, each after those that may wait for it."""
REPLY_SHOWS = 2.0
"""Seconds a completed turn's final reply is waited for among its items once the snapshot said it ended
(§2.6; the contract gives no bound: the tester's own, in the manner of the server's other bounds)."""
POLL_SHARE, POLL_LATE = 0.2, 0.1
"""A turn that has run for a while is polled every ``POLL_SHARE`` of its time so far, up to ``POLL_LATE``
seconds: its end is seen at most 20 % late, and a real server's turn of 0.4-1.5 s is not met with 25
requests (which, on one box, took CPU from the turn itself)."""


TOO_LARGE = re.compile(r"larger than \d+ bytes|HTTP 413|request entity too large|context.length", re.IGNORECASE)
"""What a turn's error says when the model refused a call for its size (see :func:`refused_for_size`)."""

T = TypeVar("T")


def refused_for_size(error: Any) -> bool:
    """Whether a failed turn's ``last_task_error`` says the model refused a call for its size: the
    project's mock LLM ("request body larger than N bytes"), HTTP 413, a model's context length."""
    return bool(TOO_LARGE.search(json.dumps(error))) if error else False


def one_line(error: Any) -> str:
    """A ``last_task_error`` in one line of at most 300 characters."""
    text = " ".join(str(error.get("message") if isinstance(error, Mapping) else error).split())
    return text if len(text) <= 300 else text[:290] + "..."


def unreachable(request: httpx.Request, exc: httpx.HTTPError) -> TargetError:
    """A request that got no answer, in one line with its URL (httpx's own chain is ~140 lines)."""
    return TargetError(f"cannot reach the server: {request.method} {request.url}: {transport_failure(exc)} "
                       "(a failure of the target, not a contract violation)")


class GuardedTransport(httpx.BaseTransport):
    """The transport of every request the target sends to the server: a 5xx answer raises
    :class:`ServerError` (the server broke) and a request without an answer (refused, reset, timed
    out) raises :class:`TargetError` in one line, so neither looks like a contract violation."""

    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self._inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            kind = meter.http_kind(request.method, request.url.path)
            with meter.timed(kind):
                response = self._inner.handle_request(request)
                meter.received(kind, len(response.read()))  # read anyway: here, within the timing
        except httpx.TransportError as exc:
            raise unreachable(request, exc) from None
        if response.status_code >= 500:
            response.close()
            raise ServerError(request.method, str(request.url), response.status_code, response.text)
        return response

    def close(self) -> None:
        self._inner.close()


def _steps_done(ids: list[list[str]], have: set[Any]) -> int:
    """How many leading steps have an output for every call id (``have``: the call ids with one)."""
    return next((s for s, cids in enumerate(ids) if any(c not in have for c in cids)), len(ids))


class HttpSession(AgentSession):
    """One agent session of the sessions API: its turns run through the mock LLM's queue and awaited
    by polling its items (:class:`~stateful.targets.items.ItemLog`), its events, views and DELETE."""

    def __init__(self, target: SessionsTarget, session_id: str, model: str) -> None:
        self._t = target
        self.session_id = session_id
        self.label = session_id
        self._model = model
        self._turns = itertools.count(1)
        self.log = ItemLog(target, session_id)
        self._turns_unwalked = 0
        self._fresh = False
        """The items were fetched after the last turn ended and nothing has read them since."""
        self._last_turn = 0.0
        """Seconds the last turn took, from its post to its end seen (``SLOW_TURN``)."""
        self.overlapped_turns = 0
        """How many turns :meth:`_overlapped_turn` awaited (the rest: :meth:`_await_turn`)."""
        self._strays: list[futures.Future[Any]] = []
        """Requests beside the tester's own that nothing waits for yet: the walks of the items, and
        the polls of a turn that had ended before they answered (see :meth:`_settle_strays`)."""

    def _walk_beside(self) -> None:
        """Walk the items not yet walked in small pages, beside what follows (a stray)."""
        self._turns_unwalked = 0
        self._strays.append(self._t.beside(self.log.small_page_walk()))

    # -- turns ------------------------------------------------------------------------------------
    def run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        recorded = self._t.recorder.turn(self.session_id, steps) if self._t.recorder else None
        result = self._run_turn(steps, step_timeout=step_timeout)
        if recorded is not None:
            recorded.outputs = result
        return result

    def _run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        tag = f"{next(self._turns)}-{secrets.token_hex(3)}"
        ids = [[f"call_{tag}_{s}_{i}" for i in range(len(step))] for s, step in enumerate(steps)]
        responses: list[dict[str, Any]] = [
            {"tool_calls": [{"call_id": cid, "name": c.tool, "arguments": c.arguments} for cid, c in zip(cids, step)]}
            for cids, step in zip(ids, steps)
        ]
        responses.append({"text": f"turn {tag} done"})
        self._settle_strays(wait=False)
        if self.log.items and (self.log.walked == 0 or self._turns_unwalked >= PAGE_CHECK_EVERY):
            self._walk_beside()  # the last turns' items, beside this one
        self._configure(tag, responses)
        sent = time.monotonic()
        if self._t.rtt >= PAIR_RTT and self._last_turn < SLOW_TURN * self._t.rtt:
            self.overlapped_turns += 1
            outcome = self._overlapped_turn(steps, ids, tag, step_timeout)
        else:
            outcome = self._await_turn(steps, ids, self._post(tag), step_timeout)
        self._last_turn = time.monotonic() - sent
        self._fresh = True
        self._turns_unwalked += 1
        if outcome.get("status") != "completed":
            have = self.log.with_output()
            done = sum(1 for cids in ids for c in cids if c in have)
            if refused_for_size(outcome.get("error")):
                raise ConversationTooLarge(
                    f"turn {tag} on {self._t.where}: the model refused a call for its size "
                    f"({one_line(outcome.get('error'))}): the tester let this session's conversation grow past "
                    "what the model accepts (a tester error, not a server failure; see --conversation-budget)")
            raise TargetError(f"turn {tag} on {self._t.where} ended {outcome.get('status')}: "
                              f"{outcome.get('error')!r} ({done} of {sum(map(len, ids))} calls have outputs)")
        return http_surface.call_outputs(ids, steps, self.log.items)

    def _configure(self, tag: str, responses: list[dict[str, Any]]) -> None:
        """Queue the turn's replies at the mock LLM (§5)."""
        try:
            with meter.timed("mock configure"):
                configure_mock_llm(self._t.mock_llm_url, responses, key=self._model)
        except httpx.HTTPStatusError as exc:  # the mock LLM's own client is not guarded
            if exc.response.status_code >= 500:
                raise ServerError(exc.request.method, str(exc.request.url), exc.response.status_code,
                                  exc.response.text) from None
            raise TargetError(f"configuring the mock LLM for turn {tag}: {exc}") from None
        except httpx.TransportError as exc:
            raise unreachable(exc.request, exc) from None

    def _post(self, tag: str) -> str:
        """Post the turn's user message (§2.5); the turn's ``response_id``."""
        try:
            response_id = send_user_message_to_session(self._t.client, session_id=self.session_id,
                                                       content=f"turn {tag}")
        except (httpx.HTTPError, AssertionError) as exc:  # an answer, but not the one §2.5 fixes
            refused = f"starting turn {tag} on {self._t.where}: {exc}"
        else:
            return response_id
        http_surface.refused(refused)  # raised out here: a violation never carries another exception as its context

    def _await_turn(self, steps: Sequence[Step], ids: list[list[str]], response_id: str,
                    step_timeout: float) -> dict[str, Any]:
        """Poll the new items until the turn's final reply is among them, then the snapshot for how
        the turn ended (against a slow server, beside each poll; see the module's doc). The timeout
        is per step: each step that finishes (all of its calls have outputs) gives the next one
        ``step_timeout`` seconds, and a step that does not finish within that time is reported as a
        hang."""
        began, started = len(self.log.items), time.monotonic()
        finished, deadline = 0, started + step_timeout
        interval, snapshot_at, last = POLL_FIRST, time.monotonic() + SNAPSHOT_EVERY, "no snapshot yet"
        while True:
            polled = time.monotonic()
            outcome: dict[str, Any] | None = None
            if self._t.rtt >= max(PAIR_RTT, interval):  # a slow server: the snapshot in the same round trip
                outcome, last = self._fetch_new_and_outcome(response_id)
                snapshot_at = time.monotonic() + SNAPSHOT_EVERY
            else:
                self.log.fetch_new()
            replied = self.log.replied(began)
            if outcome is None and (replied or time.monotonic() >= snapshot_at):
                outcome, last = self._outcome(response_id)
                snapshot_at = time.monotonic() + SNAPSHOT_EVERY
            if outcome is not None:
                if not replied:  # it ended after the items' answer was made: the rest of its items
                    self._fetch_after_end(began, outcome)
                return outcome
            finished, deadline, expired = self._advance(ids, finished, deadline, step_timeout, polled)
            if expired:
                raise self._hang(steps, ids, step_timeout, f"timed out waiting for turn {response_id} to end; {last}")
            meter.sleep(max(0.0, interval - (time.monotonic() - polled)), "turn-end poll")
            interval = max(min(2 * interval, POLL_MAX), min((time.monotonic() - started) * POLL_SHARE, POLL_LATE))

    def _overlapped_turn(self, steps: Sequence[Step], ids: list[list[str]], tag: str,
                         step_timeout: float) -> dict[str, Any]:
        """Post the turn and poll it with up to ``OVERLAP`` polls in flight, each fetching the new
        items and the snapshot at once, from the moment the post is sent: against a server whose
        round trip is about a turn's length, the end is then seen about one round trip after the post
        instead of three (post, items, snapshot). Each answer is judged in the order the polls were
        sent, as :meth:`_await_turn` judges one; the polls still in flight when the turn has ended are
        settled later (:meth:`_settle_strays`)."""
        began, started = len(self.log.items), time.monotonic()
        finished, deadline = 0, started + step_timeout
        post = self._t.beside(self._post, tag)
        response_id: str | None = None
        posted = False
        polls: deque[tuple[float, str | None, futures.Future[list[dict[str, Any]]], futures.Future[Any]]] = deque()
        next_at, last = started + self._t.rtt / OVERLAP, "no snapshot yet"
        observed = started  # when the newest poll judged was sent
        try:
            while True:
                now = time.monotonic()
                if now >= next_at and len(polls) < OVERLAP:
                    cursor = self.log.last_id()
                    polls.append((now, cursor, self._t.beside(self.log.after, cursor),
                                  self._t.beside(self._snapshot)))
                    next_at = now + max(self._t.rtt / OVERLAP, min((now - started) * POLL_SHARE, POLL_LATE))
                head = [post] if response_id is None else list(polls[0][2:]) if polls else []
                if not head:  # every poll sent so far has been judged
                    meter.sleep(max(0.0, next_at - now), "turn-end poll")
                    continue
                with meter.waited("http message post" if response_id is None else "http items page"):
                    futures.wait(head, timeout=max(0.0, next_at - now) if len(polls) < OVERLAP else None)
                if response_id is None:
                    if not post.done():
                        continue
                    posted = True
                    response_id = post.result()
                while polls and all(f.done() for f in polls[0][2:]):
                    observed, cursor, items, snapshot = polls.popleft()
                    self.log.merge(cursor, items.result())
                    outcome, last = self._judged(snapshot.result(), response_id)
                    if outcome is not None:
                        if not self.log.replied(began):
                            self._fetch_after_end(began, outcome)  # it ended after the items' answer was made
                        return outcome
                finished, deadline, expired = self._advance(ids, finished, deadline, step_timeout, observed)
                if expired:
                    raise self._hang(steps, ids, step_timeout,
                                     f"timed out waiting for turn {response_id or tag} to end; {last}")
        finally:  # whatever ended the turn: what is still in flight is answered later
            self._strays += [f for poll in polls for f in poll[2:]] + ([] if posted else [post])

    def _fetch_after_end(self, began: int, outcome: Mapping[str, Any]) -> None:
        """The items once more, after the snapshot said the turn ended (§2.6: nothing promises that a
        turn's last items are visible at the instant its status first reads ``idle``). A completed turn
        whose reply is still not among them (``began``: the index of its first item) is fetched again
        until it shows, or until a :class:`~stateful.waiting.Wait` of ``REPLY_SHOWS`` seconds (grown
        with the server's round trip) is over: the outputs still missing then are judged
        (``items.calls``) on evidence taken late enough."""
        wait = Wait(REPLY_SHOWS, lambda: self._t.rtt)
        while True:
            looked = wait.look()
            self.log.fetch_new()
            wait.looked(looked)
            if outcome.get("status") != "completed" or self.log.replied(began) or wait.over(looked):
                return
            meter.sleep(max(0.0, min(0.05 * wait.looks, 0.5) - (time.monotonic() - looked)), "turn-end poll")

    def _settle_strays(self, *, wait: bool) -> None:
        """The walks and the polls that a turn's end left in flight: raise what one of them raised (a
        server error or a violation is reported a step or so late, never lost); with ``wait``, wait
        for them all first."""
        if wait:
            with meter.waited("http items page"):
                futures.wait(self._strays)
        done = [f for f in self._strays if f.done()]
        self._strays = [f for f in self._strays if not f.done()]
        for future in done:
            future.result()

    def _advance(self, ids: list[list[str]], finished: int, deadline: float,
                 step_timeout: float, observed: float) -> tuple[int, float, bool]:
        """The steps finished now (all of their calls have outputs), the deadline, whether it has
        passed: each step that finishes gives the next one ``step_timeout`` seconds. ``observed``:
        when the newest poll judged was sent; a hang is a verdict of absence, so only a poll sent
        after the deadline can prove it (one sent before may have been answered from an earlier
        state, however late its answer came)."""
        now_finished = _steps_done(ids, self.log.with_output())
        if now_finished > finished:
            return now_finished, time.monotonic() + step_timeout, False
        return finished, deadline, observed >= deadline

    def _fetch_new_and_outcome(self, response_id: str) -> tuple[dict[str, Any] | None, str]:
        """The new items (:meth:`ItemLog.fetch_new`) and :meth:`_outcome` at once, the snapshot in the target's side thread.
        Their answers may be made in either order; the caller fetches the items once more when the
        snapshot says the turn ended and its reply was not among them."""
        pending = self._t.beside(self._outcome, response_id)
        try:
            self.log.fetch_new()
        finally:  # the snapshot is waited for even when the items failed: nothing runs on unseen
            with meter.waited("http snapshot poll"):
                futures.wait([pending])
        return pending.result()

    def _outcome(self, response_id: str) -> tuple[dict[str, Any] | None, str]:
        """How the turn ended as the snapshot shows it (§2.6; None while it runs), and what it said."""
        return self._judged(self._snapshot(), response_id)

    def _snapshot(self) -> Any:
        return self._t.get_json(f"/v1/sessions/{self.session_id}")

    def _judged(self, snapshot: Any, response_id: str) -> tuple[dict[str, Any] | None, str]:
        """:meth:`_outcome` of a snapshot already fetched."""
        snapshot = http_surface.json_object(snapshot, f"GET /v1/sessions/{self.session_id}")
        return turn_outcome(snapshot, response_id), f"last status seen: {snapshot.get('status')!r}"

    def _hang(self, steps: Sequence[Step], ids: list[list[str]], timeout: float, detail: str) -> StepTimeout:
        """Which step hangs (the first with a call lacking its output), and stop the turn."""
        pending = 0
        try:
            self.log.fetch_new()
            pending = _steps_done(ids, self.log.with_output())
            self._t.client.post(f"/v1/sessions/{self.session_id}/events", json={"type": "interrupt"})
        except Exception as exc:  # the report matters more than this detail
            detail += f" (while inspecting the hang: {exc})"
        if pending == len(steps):
            # Every call has its output: what did not end is the turn itself (its final text reply).
            detail = ("every call of the turn has its output, but the turn did not end after the model's "
                      f"final text reply; {detail}")
        calls = list(steps[pending]) if pending < len(steps) else []
        return StepTimeout(pending, calls, timeout, self._t.where, detail=f"session {self.session_id}: {detail}"[:2000])

    def events(self) -> list[EventView]:
        recorded = self._t.recorder.events(self.session_id) if self._t.recorder else None
        if not self._fresh:  # right after a turn, the items fetched at its end are this moment's
            self.log.fetch_new()
        self._fresh = False
        items = self.log.of_type("resource_event")
        if recorded is not None:
            recorded.data = items
        views = []
        for item in items:
            resource = item.get("resource") if isinstance(item.get("resource"), Mapping) else {}
            terminal, session = resource.get("terminal"), resource.get("session")
            views.append(EventView(str(item.get("event_type")), str(item.get("resource_id")),
                                   terminal if isinstance(terminal, str) else None,
                                   session if isinstance(session, str) else None))
        return views

    def terminals_view(self) -> list[Mapping[str, Any]] | None:
        body = self._t.get_json(f"/v1/sessions/{self.session_id}/resources/terminals")
        if self._t.recorder:
            self._t.recorder.view(self.session_id, body.get("data") if isinstance(body, Mapping) else None)
        return http_surface.terminals_data(body)

    def delete(self) -> None:
        if self._t.recorder:
            self._t.recorder.deleted(self.session_id)
        if self.log.walked < len(self.log.items):  # the last turns' items, beside the walk still in flight
            self._walk_beside()
        try:
            self._settle_strays(wait=True)
        except Exception as failed:  # a walk or a poll failed: the terminals go all the same, that failure is reported
            try:
                reply = self._t.client.delete(f"/v1/sessions/{self.session_id}")
            except Exception as exc:  # noqa: BLE001 - reported with the failure that is raised
                failed.add_note(f"and the DELETE of session {self.session_id} failed too: {type(exc).__name__}: {exc}")
            else:
                if reply.status_code not in (200, 202, 204):
                    failed.add_note(f"and the DELETE of session {self.session_id} answered HTTP {reply.status_code} "
                                    f"{reply.text[:300]}")
            raise
        reply = self._t.client.delete(f"/v1/sessions/{self.session_id}")
        http_surface.answered(reply, (200, 202, 204), f"DELETE session {self.session_id}", limit=300)


class SessionsTarget(Target):
    name = "sessions"
    observes = frozenset({SESSIONS_API})
    takes_server = True
    carries_conversation = True

    def __init__(self, server_url: str, mock_llm_url: str, runner_id: str, *,
                 transport: httpx.BaseTransport | None = None) -> None:
        """``transport``: what carries the requests under the guard (default: plain HTTP)."""
        self.where = server_url
        self.mock_llm_url = mock_llm_url
        self.runner_id = runner_id
        self.client = httpx.Client(base_url=server_url, headers=HEADERS, timeout=60.0,
                                   transport=GuardedTransport(transport))
        self.declared: Mapping[str, str] = {"bash": f"bash --noprofile --rcfile {BASHRC}",
                                            "sh": "bash --norc --noprofile"}
        self.recorder: Recorder | None = None
        """Notes every operation while set (a plain repro's replay, ``stateful.plain``)."""
        self._pools: dict[str, futures.ThreadPoolExecutor] = {}
        """The thread pools of ``POOLS`` made so far (each when first used)."""
        self._pools_lock = threading.Lock()
        self._spare: futures.Future[HttpSession] | None = None
        """The next session, registered ahead (see :meth:`open_session`)."""
        self.rtt = 0.0
        """Seconds the last poll of the new items took (``PAIR_RTT``, ``SLOW_TURN``)."""

    def get_json(self, path: str, **params: Any) -> Any:
        """The JSON of a GET that §2 says answers 200 (a 5xx is a ServerError, raised by the transport)."""
        reply = self.client.get(path, params=params or None)
        http_surface.answered(reply, (200,), f"GET {path} {params}")
        return reply.json()

    def page(self, call: Callable[..., T], *args: Any) -> futures.Future[T]:
        """Run ``call(*args)``, one page of a walk, in the target's page threads: a walk (itself run
        :meth:`beside`) waits for its pages, which wait for nothing, so they have threads of their own."""
        return self._submit("page", call, *args)

    def beside(self, call: Callable[..., T], *args: Any) -> futures.Future[T]:
        """Run ``call(*args)`` in the target's side thread, beside the caller's next request (the
        client is shared: httpx's ``Client`` may be used from several threads)."""
        return self._submit("beside", call, *args)

    def _submit(self, pool: str, call: Callable[..., T], *args: Any) -> futures.Future[T]:
        """Run ``call(*args)`` in the pool named ``pool`` (``POOLS``), made when first used; its
        requests are counted by the meter, but their seconds are not the tester's waiting."""
        with self._pools_lock:
            executor = self._pools.get(pool)
            if executor is None:
                executor = self._pools[pool] = futures.ThreadPoolExecutor(
                    max_workers=dict(POOLS)[pool], thread_name_prefix=f"sessions-{pool}")
        return executor.submit(self._metered_beside, call, *args)

    @staticmethod
    def _metered_beside(call: Callable[..., T], *args: Any) -> T:
        with meter.beside():
            return call(*args)

    @classmethod
    @contextmanager
    def opened(cls, server: Server | None, latency: float) -> Iterator[SessionsTarget]:
        """A target reaching ``server``, or an embedded reference stack of its own (stopped on exit)."""
        with ExitStack() as stack:
            if server is None:
                from stateful.reference.stack import EmbeddedStack

                embedded = stack.enter_context(EmbeddedStack(latency=latency))
                server = Server(embedded.server_url, embedded.mock_llm_url, embedded.runner_id)
            sessions = cls(server.server_url, server.mock_llm_url, server.runner_id)
            stack.callback(sessions.close)
            yield sessions

    def open_session(self) -> HttpSession:
        """A new agent session. Registering one takes three round trips one after the other (the
        agent, the binding to the runner, the runner's status beside the first), so the next one
        is registered ahead, in a side thread (the spare), while the tester goes on: a program's
        sessions, and the next program's first, are then ready when asked for. What registering the
        spare raised is raised here, when it is asked for."""
        spare, self._spare = self._spare, None
        if spare is None:
            session = self._register()
        else:
            with meter.waited("http setup/other"):
                futures.wait([spare])
            session = spare.result()
        self._spare = self._submit("spare", self._register)
        if self.recorder:
            self.recorder.opened(session.session_id, TERMINALS)
        return session

    def delete_sessions(self, sessions: Sequence[AgentSession]) -> list[Exception | None]:
        """DELETE the sessions at once, each in its own thread: each is a walk of its last items and
        the DELETE, a few round trips. A recorded replay (a plain repro's) keeps them in order."""
        if self.recorder is not None or len(sessions) < 2:
            return super().delete_sessions(sessions)
        one = super().delete_sessions
        with futures.ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="sessions-delete") as pool:
            deleting = [pool.submit(self._metered_beside, one, [session]) for session in sessions]
            with meter.waited("http setup/other"):
                futures.wait(deleting)
        return [done.result()[0] for done in deleting]

    def _register(self) -> HttpSession:
        """Register an agent of its own (a unique name and model name), which makes a session of it,
        and bind that to the runner (CONTRACT §2, items 1 and 4)."""
        name = unique_name("stateful")
        model = unique_name("stateful-model")
        text = agent_spec_yaml(name=name, harness=HARNESS, model=model, prompt="You are a terminal test assistant.",
                               mock_llm_base_url=f"{self.mock_llm_url}/v1", extra_config={"terminals": TERMINALS})
        online = self.beside(await_runner_online, self.client, self.runner_id)  # while the agent registers
        try:
            reply = self.client.post("/v1/sessions", data={"metadata": "{}"}, files={
                "bundle": (f"{name}.tar.gz", build_bundle(name, text), "application/gzip")})
        finally:
            with meter.waited("http setup/other"):
                futures.wait([online])
        http_surface.answered(reply, (201,), f"registering agent {name}")
        session_id = str(reply.json()["session_id"])
        try:
            online.result()
        except TurnTimeout as exc:
            raise TargetError(f"{self.where}: {exc}") from None
        bound = self.client.patch(f"/v1/sessions/{session_id}", json={"runner_id": self.runner_id})
        http_surface.answered(bound, (200,), f"binding session {session_id} to runner", limit=300)
        return HttpSession(self, session_id, model)

    def close(self) -> None:
        """DELETE the spare session (if it was registered) and end the side threads and the client."""
        spare, self._spare = self._spare, None
        if spare is not None:
            try:
                spare.result().delete()
            except Exception:  # noqa: BLE001 - it never ran a turn; what failed has no program to report to
                pass
        for name, _ in POOLS:
            if name in self._pools:
                self._pools[name].shutdown(wait=True)
        self.client.close()

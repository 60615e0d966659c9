"""The checks a plain repro carries in its own text: resource events, tmux and /proc ground truth.

A plain repro (``stateful.plain``) imports nothing of this package, so the few checks that are more
than one expression are copied into it verbatim (:func:`source`, by ``inspect.getsource``): each
function here uses only the stdlib, takes plain data (items as the sessions API returns them,
socket paths, pids) and names no other function of this package but the ones :data:`NEEDS` lists.
The writer runs the same functions on what it recorded (:func:`events_problem` on the events the
machine saw), so what a repro asserts is what was proved to fail.

Ground truth is read the way a server's team can read it without this package: ``tmux -S SOCKET
list-panes`` (a read-only command: it never starts a server) and ``/proc/<pid>/stat``.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import time
from collections import Counter
from typing import Any

__all__ = ["NEEDS", "events_problem", "history_size", "leftovers", "polled", "source", "terminal_processes",
           "walk_items"]


def polled(within: float, least: int = 2, interval: float = 0.2) -> Any:
    """Yield once per look (the loop's body looks, and breaks once what it waits for shows) until a
    verdict that it never showed is due: ``least`` looks made, the last of which *began* more than
    ``within`` seconds after the first, plus the longest look (at most ``within`` more: a slow
    server or machine gets that much longer). A look begun earlier may have been answered from an
    earlier state however late its answer came, so a slow look never uses the time up alone. The
    pauses run from start to start. The tester's own waits follow the same rule."""
    start, looks, longest = time.monotonic(), 0, 0.0
    while True:
        began = time.monotonic()
        looks += 1
        yield looks
        longest = max(longest, time.monotonic() - began)
        if looks >= least and began > start + within + min(longest, within):
            return
        time.sleep(max(0.0, interval - (time.monotonic() - began)))


def resource_id_fits(rid: Any, pair: Any) -> bool:
    """Whether ``rid`` is the resource id of ``pair`` (terminal, session): ``terminal_<safe(name)>_<safe(key)>``,
    perhaps with ``_n`` (n >= 2) appended (CONTRACT §2.4)."""
    def safe(value: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", value).strip("_") or "resource"
    m = re.fullmatch(re.escape(f"terminal_{safe(pair[0])}_{safe(pair[1])}") + r"(?:_(\d+))?", str(rid))
    return m is not None and (m.group(1) is None or int(m.group(1)) >= 2)


def events_problem(events: list[Any], launched: list[Any], ended: list[Any], base: list[Any]) -> str | None:
    """What breaks CONTRACT §2.4 in one session's ``resource_event`` items (in order), as
    ``"<clause>: <what>"``, or None. ``launched``: the (terminal, session) of every launch that said
    ``launched`` (one per process); ``ended``: one per such process that was closed (or exited and
    was removed); ``base``: the server's own pairs (their events are not the client's). Call it when
    no exit is pending: then every event is fixed, whatever order the server recorded them in."""
    created_type, deleted_type = "session.resource.created", "session.resource.deleted"

    def names(event: Any) -> Any:
        resource = event.get("resource") if isinstance(event.get("resource"), dict) else {}
        pair = (resource.get("terminal"), resource.get("session"))
        return pair if all(isinstance(n, str) for n in pair) else None

    base = [tuple(p) for p in base]
    ours = [e for e in events if names(e) not in base
            and not (names(e) is None and any(resource_id_fits(e.get("resource_id"), p) for p in base))]
    unknown = [e.get("event_type") for e in ours if e.get("event_type") not in (created_type, deleted_type)]
    if unknown:
        return f"events.recorded: a resource event of unknown type {unknown[0]!r}"
    created = [e for e in ours if e.get("event_type") == created_type]
    deleted = [e for e in ours if e.get("event_type") == deleted_type]
    shown = [(e.get("event_type", "").rsplit(".", 1)[-1], e.get("resource_id"), names(e)) for e in ours]
    if len(created) != len(launched) or len(deleted) != len(ended):
        return (f"events.recorded: {len(created)} created and {len(deleted)} deleted events, but {len(launched)} "
                f"launches said 'launched' and {len(ended)} of those terminals were closed (one event each): {shown}")
    if all(names(e) is not None for e in ours):
        for kind, got, want in (("created", created, launched), ("deleted", deleted, ended)):
            if Counter(map(names, got)) != Counter(map(tuple, want)):
                return f"events.recorded: the {kind} events name {sorted(map(names, got))}, expected {sorted(map(tuple, want))}"
    for e in created:
        if not any(resource_id_fits(e.get("resource_id"), p) for p in ([names(e)] if names(e) else launched)):
            return f"events.ids: resource id {e.get('resource_id')!r} is not terminal_<safe(name)>_<safe(key)>[_n]: {shown}"
    live = Counter(e.get("resource_id") for e in created)
    live.subtract(e.get("resource_id") for e in deleted)
    if any(n < 0 for n in live.values()):
        return f"events.recorded: a deleted event names an id no created event has: {shown}"
    shared = sorted(str(rid) for rid, n in live.items() if n > 1)
    if shared:
        return (f"events.unique-ids: resource id {shared[0]!r} is the id of {live[shared[0]]} live terminals "
                f"(ids must be unique among a session's live terminals): {shown}")
    return None


def view_problem(entries: list[Any], running: list[Any], base: list[Any]) -> str | None:
    """What breaks CONTRACT §2.8 in ``/resources/terminals`` (its ``data``), or None: it shows each running
    pair once and nothing else but the server's own (``base``, which it may show or not). An entry names
    its pair by ``terminal``/``session``, else by its resource id (§2.8 leaves the entry's shape open),
    which names any running pair whose id it fits and that no entry named yet."""
    running, base = [tuple(p) for p in running], [tuple(p) for p in base]
    shown: list[Any] = []
    for entry in entries:
        pair = (entry.get("terminal"), entry.get("session"))
        if not all(isinstance(n, str) for n in pair):
            rid = entry.get("id", entry.get("resource_id"))
            pair = next((p for p in running if resource_id_fits(rid, p) and p not in shown), None) or next(
                (p for p in [*running, *base] if resource_id_fits(rid, p)), ("?", str(rid)))
        if pair in base and pair not in running:
            continue
        if pair not in running or pair in shown:
            return f"/resources/terminals shows {pair} ({'twice' if pair in shown else 'not running'}): {entries}"
        shown.append(pair)
    if sorted(shown) != sorted(running):
        return f"/resources/terminals shows {sorted(shown)}; running: {sorted(running)}"
    return None


def _stat(pid: int) -> Any:
    """(name, state, ppid, session id, start time) of a process from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return raw[raw.find("(") + 1:raw.rfind(")")], fields[0], int(fields[1]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _tmux(socket: str, *args: str) -> Any:
    """A read-only tmux command on the private server at ``socket`` (it never starts one)."""
    return subprocess.run(["tmux", "-f", "/dev/null", "-S", socket, *args], capture_output=True, text=True,
                          timeout=30, check=False)


def terminal_processes(socket: str) -> Any:
    """Every process of the terminal whose private tmux server listens at ``socket``: the server,
    its panes' processes, their descendants and their sessions' members, as (pid, start time, name)
    (a recycled pid is then never taken for the same process); None if no server with a pane answers."""
    if not os.path.exists(socket):
        return None
    run = _tmux(socket, "list-panes", "-a", "-F", "#{pid} #{pane_pid}")
    rows = [line.split() for line in run.stdout.splitlines() if len(line.split()) == 2]
    if run.returncode != 0 or not rows:
        return None
    table = {int(p): st for p in os.listdir("/proc") if p.isdigit() and (st := _stat(int(p))) is not None}
    server, panes = {int(r[0]) for r in rows}, {int(r[1]) for r in rows}
    sessions = {table[p][3] for p in panes if p in table}
    found = set(panes)
    grew = True
    while grew:
        more = {p for p, st in table.items() if p not in found and p not in server and (st[2] in found or st[3] in sessions)}
        found |= more
        grew = bool(more)
    return sorted((p, table[p][4], table[p][0]) for p in found | server if p in table)


def leftovers(socket: str, processes: list[Any]) -> str:
    """What of a terminal is still there ('' if nothing): its tmux server answering at ``socket``,
    and those of ``processes`` (from :func:`terminal_processes`) still running (a zombie has ended)."""
    alive = os.path.exists(socket) and _tmux(socket, "list-panes", "-a").returncode == 0
    left = [f"{name}[{pid}]" for pid, start, name in processes
            if (st := _stat(pid)) is not None and st[4] == start and st[1] not in ("Z", "X")]
    return " and ".join(([f"its tmux server at {socket} still runs"] if alive else [])
                        + ([f"processes {left} are left"] if left else []))


def history_size(socket: str) -> Any:
    """How many lines of history the terminal's one pane holds (tmux's ``#{history_size}``), or None."""
    run = _tmux(socket, "list-panes", "-a", "-F", "#{history_size}") if os.path.exists(socket) else None
    lines = run.stdout.split() if run is not None and run.returncode == 0 else []
    return int(lines[0]) if len(lines) == 1 and lines[0].isdigit() else None


def walk_items(fetch: Any, limit: int, max_pages: int = 10_000) -> list[Any]:
    """Every item of a session, oldest first: ``fetch(params)`` returns one page of
    ``GET /v1/sessions/{id}/items`` (its JSON), and the walk follows ``after=last_id`` while the page
    says ``has_more`` (§2.7). The walk is bounded, so that a misbehaving server fails it with a message
    naming the misbehaviour (an AssertionError) instead of holding it for ever: a page that says
    ``has_more`` but holds no item or names no ``last_id``, a ``last_id`` already followed (the next
    page would come round again), or ``has_more`` still said after ``max_pages`` pages."""
    items: list[Any] = []
    followed: set[Any] = set()
    params: dict[str, Any] = {"order": "asc", "limit": limit}
    for number in range(1, max_pages + 1):
        body = fetch(params)
        items += body["data"]
        if not body.get("has_more"):
            return items
        where = f"items walk: page {number} (limit {limit}, after {params.get('after')!r}) says has_more"
        last = body.get("last_id")
        assert body["data"] and last is not None, (
            f"{where} but {'holds no item' if not body['data'] else 'names no last_id'}: the server's pages "
            "would never end (§2.7: following after=last_id while has_more yields every item once)")
        assert last not in followed, (
            f"{where} with last_id {last!r}, which the walk already followed: the server's pages go round in "
            "a circle (§2.7: following after=last_id while has_more yields every item once)")
        followed.add(last)
        params["after"] = last
    raise AssertionError(f"items walk: the server still says has_more after {max_pages} pages of {limit} items "
                         f"({len(items)} items): the walk gives up")


NEEDS: dict[str, tuple[str, ...]] = {
    "walk": ("walk_items",),
    "view": ("resource_id_fits", "view_problem"),
    "events": ("resource_id_fits", "events_problem"),
    "probe": ("_stat", "_tmux", "terminal_processes", "leftovers"),
    "rows": ("_tmux", "history_size"),
}
"""The functions a repro copies for each kind of check, in an order that defines what each uses."""


def source(kinds: set[str]) -> str:
    """The text of the functions that checks of ``kinds`` (keys of :data:`NEEDS`) use, each once, after
    :func:`polled`, which every repro's waits use."""
    names = list(dict.fromkeys(["polled", *(n for kind in NEEDS if kind in kinds for n in NEEDS[kind])]))
    return "\n\n".join(inspect.getsource(globals()[n]) for n in names)

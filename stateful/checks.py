"""Checks on what terminals show, and on the second views of state: pure functions, no I/O.

Markers are designed so that the proof is the command's *output*, never the echoed command line:
``echo -E MK_$((6*7))_<uid>`` prints ``MK_42_<uid>``, which the typed line does not contain; the
payload check prints ``H_<md5 of the payload>_<uid>``, computed locally. Every uid is unique, so a
marker found in the screen of a pair it was not typed into proves a leak between pairs.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "new_uid",
    "shell_marker",
    "python_marker",
    "shell_payload",
    "python_payload",
    "tokens_in",
    "has_token",
    "prompt_follows",
    "last_row",
    "view_problem",
]

_RUN = secrets.token_hex(2)
_COUNTER = itertools.count(1)
_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:(?:MK|RP)_42|H_[0-9a-f]{32})_(u[0-9a-z]+)(?![0-9a-z])")


def new_uid() -> str:
    """A marker id unique in this process (and, by the run tag, across processes)."""
    return f"u{next(_COUNTER):x}z{_RUN}"


def shell_marker(uid: str, *, semicolon: bool = False) -> tuple[str, str]:
    """(command, expected token) for a shell. ``set +H`` first: no history expansion of later ``!``."""
    return f"set +H; echo -E MK_$((6*7))_{uid}" + (";" if semicolon else ""), f"MK_42_{uid}"


def python_marker(uid: str) -> tuple[str, str]:
    return f"print('RP_'+str(6*7)+'_{uid}')", f"RP_42_{uid}"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


SHELL_PAYLOAD_PREFIX = "echo H_$(printf %s "
PYTHON_PAYLOAD_PREFIX = "print('H_'+__import__('hashlib').md5("


def shell_payload(uid: str, payload: str) -> tuple[str, str]:
    """(command, token): the shell prints the md5 of the payload exactly as it was typed."""
    return (f"{SHELL_PAYLOAD_PREFIX}{shlex.quote(payload)} | md5sum | cut -c1-32)_{uid}",
            f"H_{_md5(payload)}_{uid}")


def python_payload(uid: str, payload: str) -> tuple[str, str]:
    return (f"{PYTHON_PAYLOAD_PREFIX}{payload!r}.encode()).hexdigest()+'_{uid}')",
            f"H_{_md5(payload)}_{uid}")


def payload_end(mode: str, payload: str) -> int:
    """Index just after the payload's literal in the command of :func:`shell_payload` (mode
    "shell") or :func:`python_payload`."""
    if mode == "shell":
        return len(SHELL_PAYLOAD_PREFIX) + len(shlex.quote(payload))
    return len(PYTHON_PAYLOAD_PREFIX) + len(repr(payload))


def tokens_in(screen: str) -> list[tuple[str, str]]:
    """Every (token, uid) a screen shows."""
    return [(m.group(0), m.group(1)) for m in _TOKEN.finditer(screen)]


def has_token(screen: str, token: str) -> bool:
    return any(t == token for t, _ in tokens_in(screen))


def _rows(screen: str) -> list[str]:
    return screen.split("\n")


def prompt_follows(screen: str, token: str) -> bool:
    """Whether a non-blank row (the program's next prompt) follows the last row showing ``token``."""
    rows = _rows(screen)
    at = max((i for i, row in enumerate(rows) if token in row), default=None)
    return at is not None and any(row.strip() for row in rows[at + 1:])


def last_row(screen: str) -> str:
    """The last non-blank row, right-stripped ('' for a blank screen)."""
    for row in reversed(_rows(screen)):
        if row.strip():
            return row.rstrip()
    return ""


def _interrupt_row(row: str) -> bool:
    return "^C" in row or row.strip() == "KeyboardInterrupt"


def interrupts(screen: str) -> int:
    """Rows that show an interrupt (bash echoes ``^C``, Python prints ``KeyboardInterrupt``)."""
    return sum(1 for row in _rows(screen) if _interrupt_row(row))


def prompt_after_interrupt(screen: str, before: int) -> bool:
    """A new interrupt row (more than ``before``) shows, and a prompt row follows the last one."""
    rows = _rows(screen)
    marks = [i for i, row in enumerate(rows) if _interrupt_row(row)]
    if len(marks) <= before:
        return False
    return any(row.strip() and not _interrupt_row(row) for row in rows[marks[-1] + 1:])


def rows_after(screen: str, needle: str) -> list[str]:
    """Rows after the last row that equals ``needle`` once right-stripped (None if absent)."""
    rows = [r.rstrip() for r in _rows(screen)]
    at = max((i for i, r in enumerate(rows) if r == needle), default=None)
    return [] if at is None else rows[at + 1:]


def view_problem(view: Sequence[Mapping[str, Any]], running: Iterable[tuple[str, str]],
                 ids: Mapping[tuple[str, str], str], optional: Iterable[tuple[str, str]] = ()) -> str | None:
    """Whether ``/resources/terminals`` disagrees with list's running pairs (None if it agrees).

    Entries name their pair by ``terminal``/``session`` where they carry them, else by resource id.
    ``optional`` pairs (the server's own, from the baseline) may or may not be shown.
    """
    skip = set(optional)
    want = set(running)
    got: set[tuple[str, str]] = set()
    by_id = {rid: key for key, rid in ids.items()}
    for entry in view:
        if not isinstance(entry, Mapping):
            return f"a /resources/terminals entry is not an object: {entry!r}"
        if isinstance(entry.get("terminal"), str) and isinstance(entry.get("session"), str):
            key = (entry["terminal"], entry["session"])
        else:
            rid = entry.get("id", entry.get("resource_id"))
            if rid not in by_id and not skip:
                return f"/resources/terminals shows an unknown resource {entry!r}"
            if rid not in by_id:
                continue  # an id we never saw created: the server's own terminal (baseline)
            key = by_id[rid]
        if key in skip:
            continue
        if key in got:
            return f"/resources/terminals shows {key} twice"
        got.add(key)
        rid = entry.get("id", entry.get("resource_id"))
        if key in ids and isinstance(rid, str) and rid != ids[key]:
            return f"/resources/terminals gives {key} id {rid!r}, its created event said {ids[key]!r}"
    if got != want:
        return (f"/resources/terminals shows {sorted(got)}, list's running pairs are {sorted(want)}")
    return None

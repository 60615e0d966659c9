"""A failure's cause: the input its program needs to fail, part of the failure's identity.

Two failures of one clause are two findings when their causes differ (a ``;`` lost at the end of a
text and a long text cut short both break ``send.text-literal``, and are two bugs). A violation names
the causes it can see in the call that broke the clause (:data:`CAUSES`: the steering triggers of
:mod:`stateful.steering` and more); a campaign names a finding by its clause and its *primary*
cause, the first of :data:`CAUSES` (most specific first) it names. A violation is an already-known
finding when it names that finding's cause (or, for a finding with no cause, when it names none).

Pure: no I/O; the checks that raise violations compute causes from what they hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from stateful import steering

__all__ = ["CAUSES", "KEY_SEPARATOR", "LONG_TEXT", "BIG_SCROLLBACK", "call_causes", "finding_key", "known_by",
           "ordered", "primary", "split_key", "text_causes"]

LONG_TEXT = 4096
"""Bytes over which a text is "long": the kernel's line discipline and tmux's own limits live there."""
BIG_SCROLLBACK = 1000
"""A scrollback over this is "big" (a server may cap what it captures)."""

CAUSES: dict[str, str] = {
    "long-text": f"a typed text over {LONG_TEXT // 1024} KiB",
    "big-scrollback": f"a read with a scrollback over {BIG_SCROLLBACK} that a read of {BIG_SCROLLBACK} does "
                      "not need (the same read with less scrollback was exact)",
    "semicolon-edge": steering.TRIGGERS["semicolon-edge"],
    "dash-edge": steering.TRIGGERS["dash-edge"],
    "non-ascii": "a typed text holding characters outside ASCII",
    "bool-scrollback": steering.TRIGGERS["bool-scrollback"],
    "launch-copies": steering.TRIGGERS["launch-copies"],
    "server-terminals": steering.TRIGGERS["server-terminals"],
    "output-keys": steering.TRIGGERS["output-keys"],
    "several-calls": "several calls in one model reply",
    "exited-pair": "a call on a pair whose process was told to exit or is known dead",
}
"""Every cause a violation can name, most specific first (the order picks a finding's primary cause):
what the call itself carries (its text, its scrollback, the pairs it names) before the context it ran
in (other calls in its reply, a pair that exited), so that one bug met in a busier program keeps its
name: a boolean scrollback read beside another call is still ``@bool-scrollback``."""

KEY_SEPARATOR = "@"


def text_causes(texts: Iterable[str]) -> tuple[str, ...]:
    """The causes in a text that did not arrive as written (its chunks, as typed)."""
    chunks = list(texts)
    found = set(steering.text_triggers(chunks))
    whole = "".join(chunks)
    if len(whole.encode("utf-8", "surrogatepass")) > LONG_TEXT:
        found.add("long-text")
    if not whole.isascii():
        found.add("non-ascii")
    return ordered(found)


def call_causes(clause: str, tool: str, arguments: str, output: str | None = None) -> tuple[str, ...]:
    """The causes one call that broke ``clause`` names: its steering triggers (``output``: what it
    answered, see :func:`stateful.steering.call_triggers`), and what its text holds."""
    found = set(steering.call_triggers(clause, tool, arguments, output))
    try:
        args = json.loads(arguments)
    except ValueError:
        args = None
    if clause.startswith("send.") and isinstance(args, dict) and isinstance(args.get("text"), str):
        found.update(text_causes([args["text"]]))
    return ordered(found)


def ordered(causes: Iterable[str]) -> tuple[str, ...]:
    """``causes`` in :data:`CAUSES` order (unknown names dropped)."""
    given = set(causes)
    return tuple(c for c in CAUSES if c in given)


def primary(causes: Iterable[str]) -> str | None:
    """The cause that names a finding: the most specific one named (None: no cause)."""
    named = ordered(causes)
    return named[0] if named else None


def finding_key(clause: str, causes: Iterable[str]) -> str:
    """``clause`` alone, or ``clause@cause`` (its primary cause): a finding's identity."""
    cause = primary(causes)
    return f"{clause}{KEY_SEPARATOR}{cause}" if cause else clause


def split_key(key: str) -> tuple[str, str | None]:
    """``(clause, cause)`` of a finding's key (cause None: the finding names none)."""
    clause, _, cause = key.partition(KEY_SEPARATOR)
    return clause, cause or None


def known_by(clause: str, causes: Iterable[str], keys: Iterable[str]) -> str | None:
    """The key among ``keys`` that a violation of ``clause`` naming ``causes`` is (None: a new
    finding): one of the clause's findings whose cause it names, or, if it names none, the clause's
    finding with no cause."""
    named = set(causes)
    for key in sorted(keys):
        known_clause, cause = split_key(key)
        if known_clause == clause and (cause in named if cause else not named):
            return key
    return None

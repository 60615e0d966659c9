"""Steering: what a campaign stops generating once the failure it provokes is known.

A campaign ends a program at a violation of a clause it already knows (claimed, or allowed as a
known deviation). Against a server with a deviation that nearly every program meets early (omnigent
drops the ``;`` at the end of every typed chunk), that ends most programs after a few steps, and the
rarer rules hardly ever run: the search stalls on what it already found. So a violation names its
*trigger* where one input provokes it (a typed chunk ending in ``;``, the server's own terminal, a
boolean scrollback), and once the campaign knows the violation, its next searches stop drawing that
input. A person exploring a server does the same by hand: mask the bug you know, look for the next.

Steering only ever narrows what the strategies *draw* (a search's avoided set is fixed when it
starts, so its programs replay and shrink the same way), and what it changes at run time is part
of a drawn value (:class:`stateful.strategies.SendPlan` carries the edges its cuts avoid): a
printed program or repro says everything it does. ``pytest stateful/`` never steers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

__all__ = ["OUTPUT_FIELDS", "TRIGGERS", "avoid", "avoided", "avoided_edges", "call_triggers", "text_triggers"]

TRIGGERS: dict[str, str] = {
    "semicolon-edge": "typed text whose chunk ends in `;` (marker(semicolon=True), a cut right after a `;`, "
                      "a `;` in a text long enough for a server to split)",
    "dash-edge": "typed text whose chunk starts with `-` (a cut right before a `-`, a `-` in a text long "
                 "enough for a server to split)",
    "server-terminals": "calls on the server's own terminals (rule server_made)",
    "bool-scrollback": "true or false as read's scrollback",
    "launch-copies": "several launches of one pair in one reply (launch with copies > 1)",
    "output-keys": "an extra argument key that §1 uses only in outputs and errors (`error`, `status`, ...): "
                   "omnigent answers a call whose arguments hold `error` with the arguments themselves",
}
"""Every trigger a violation can name, with what the strategies stop drawing once it is avoided."""

EDGE_CHARACTERS = {"semicolon-edge": ";", "dash-edge": "-"}

OUTPUT_FIELDS = frozenset({"tmux_socket", "has_os_env", "status", "screen", "scrollback_lines", "command", "running",
                           "error"})
"""The field names §1 uses in outputs and errors and in no tool's arguments: as an extra argument key,
one of them can make a server take the arguments for an answer (``output-keys``)."""

SPLIT_SIZE = 512
"""A text at least this long may be split by the server into chunks of its own (omnigent types 1024
characters per ``send-keys``): any ``;`` or ``-`` in it may end or start one of them."""

_avoided: frozenset[str] = frozenset()


def avoid(triggers: Iterable[str]) -> None:
    """Set what the strategies avoid from now on (a campaign worker, before each search)."""
    global _avoided
    _avoided = frozenset(t for t in triggers if t in TRIGGERS)


def avoided(trigger: str) -> bool:
    return trigger in _avoided


def avoided_edges() -> frozenset[str]:
    """The characters a typed chunk may not end (``;``) or start (``-``) with, as avoided now."""
    return frozenset(c for t, c in EDGE_CHARACTERS.items() if t in _avoided)


def text_triggers(texts: Iterable[str]) -> tuple[str, ...]:
    """The edge triggers in the chunks of a text that did not arrive as written (or was refused)."""
    found = set()
    for text in texts:
        long = len(text) >= SPLIT_SIZE
        if text.endswith(";") or (long and ";" in text):
            found.add("semicolon-edge")
        if text.startswith("-") or (long and "-" in text):
            found.add("dash-edge")
    return tuple(sorted(found))


def call_triggers(clause: str, tool: str, arguments: str, output: str | None = None) -> tuple[str, ...]:
    """The trigger a violation of ``clause`` by one call names (none where no input provoked it).
    Given the call's ``output``, ``output-keys`` is named only where the output shows one of those
    argument keys with the argument's value (the arguments taken for the answer): an already_running
    with a new socket, or a list that shows another session's row, is no doing of an extra key."""
    if clause == "scope.server-terminals":
        return ("server-terminals",)
    try:
        args = json.loads(arguments)
    except ValueError:
        return ()
    if not isinstance(args, dict):
        return ()
    found: list[str] = []
    if clause == "read.scrollback-type" and isinstance(args.get("scrollback"), bool):
        found.append("bool-scrollback")
    if clause in ("send.sent", "send.text-literal") and tool == "sys_terminal_send" and isinstance(args.get("text"), str):
        found += text_triggers([args["text"]])
    if OUTPUT_FIELDS & set(args) and (output is None or _echoes(args, output)):
        found.append("output-keys")
    return tuple(found)


def _echoes(args: dict[str, object], output: str) -> bool:
    """Whether ``output`` holds one of the arguments' output-only keys with the argument's value."""
    try:
        value = json.loads(output)
    except ValueError:
        return False
    return isinstance(value, dict) and any(key in value and value[key] == args[key] for key in OUTPUT_FIELDS & set(args))

"""Planted faults: switches that make the reference stack wrong in one realistic way each.

They exist to prove that the state machine finds bugs (``tests/test_faults.py``). All are off unless
named in the ``STATEFUL_FAULTS`` environment variable (comma-separated) when this module is first
imported; tests may also switch them with :func:`activated`. When off, a check costs one frozenset
lookup.

Beside them, *variants*: switches that make the reference stack take another path the contract
allows (``STATEFUL_VARIANTS=a,b``, or :func:`activated` too), so that the tester is exercised
against servers that differ from the reference where the contract leaves room. A variant is no
bug: the machine must stay green with it on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

FAULTS: dict[str, str] = {
    "prefix-match": "a pair is looked up by session-name prefix when the exact name is not registered",
    "closed-still-listed": "close answers 'closed' but the pair stays listed, as not running",
    "cross-session": "terminals are keyed by (terminal, session) only: two agent sessions share pairs",
    "long-text-cut": "send types only the first 16 KiB of a long text",
    "scrollback-ignored": "read ignores 'scrollback' and shows only the visible rows",
    "close-event-lost": "close records no session.resource.deleted event",
    "items-page-gap": "items pagination loses the last item of every page that has more after it",
    "double-launch": "concurrent launches of one pair each start a process and say 'launched'; the last wins",
    "trailing-semicolon": "a text ending in ';' is passed to tmux unescaped, which drops the ';'",
    "keys-default-none": "an absent 'keys' presses no key instead of Enter",
    "scrollback-bool": "read accepts a boolean 'scrollback' as an integer",
    "close-leaks-server": "close forgets the pair without killing its tmux server",
    "resource-id-collision": "resource ids are not disambiguated among live terminals",
    "exit-not-reaped": "the exit watcher never removes a pair whose process exited",
    "list-sorted": "list returns pairs sorted by name instead of in launch order",
    "extra-key-rejected": "a tool rejects an argument key it does not know",
    "read-history-short": "a read with history shows one history line fewer than it should",
    "scrollback-capped": "a read with a scrollback over 1000 shows no history at all",
    "view-keeps-closed": "/resources/terminals keeps showing a terminal after it was closed",
    "delete-keeps-terminals": "DELETE of an agent session leaves its terminals running (until the next DELETE)",
    "outputs-completion-order": "the outputs of concurrent calls are paired with call ids in the order they completed",
    "sibling-deletes-swapped": "the deleted events of two live id siblings carry each other's resource id",
    "read-last-row-dropped": "every read loses the screen's last row (an off-by-one in the captured range)",
    "exit-by-shared-id": "exits are handled through a table keyed by resource id: of two live pairs that share "
                         "one (with resource-id-collision on), the second to exit is never removed (omnigent 0.19.1)",
    "list-every-session": "list shows the terminals of every agent session on the server, not the caller's alone "
                          "(a fresh session's first list shows other sessions' pairs)",
    "list-row-twice": "list shows its first row twice (a join that repeats the first pair)",
    "list-not-running": "list shows every pair with running false, live ones included",
    "launch-new-socket": "an already_running launch reports a tmux_socket path made anew, not the pair's",
    "read-row-added": "every read shows one blank row more than the pane holds (a capture one row too long)",
    "send-last-char-lost": "send types every text but its last character",
    "shared-pane": "a launch in an agent session whose terminal already runs there attaches to that pane "
                   "instead of starting its own (tmux sessions named after the terminal alone)",
}

VARIANTS: dict[str, str] = {
    "unnamed-resources": "resource events leave the pair (terminal, session) out of 'resource': only the "
                         "resource id names it (§2.4 leaves the content of 'resource' open)",
}


def _from_environment(variable: str, known: dict[str, str], kind: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in os.environ.get(variable, "").split(",") if n.strip())
    unknown = sorted(names - known.keys())
    if unknown:
        raise SystemExit(
            f"{variable} names unknown {kind} {unknown}; known: {sorted(known)}"
        )
    return names


ACTIVE: frozenset[str] = (_from_environment("STATEFUL_FAULTS", FAULTS, "faults")
                          | _from_environment("STATEFUL_VARIANTS", VARIANTS, "variants"))


def enabled(name: str) -> bool:
    """Whether the planted fault or variant ``name`` is switched on (a typo here is a programming error)."""
    return name in ACTIVE


@contextmanager
def activated(*names: str) -> Iterator[None]:
    """Switch faults on for the duration of a block (tests only; not thread-safe by design)."""
    global ACTIVE
    unknown = sorted(set(names) - FAULTS.keys() - VARIANTS.keys())
    if unknown:
        raise ValueError(f"unknown faults or variants {unknown}")
    previous = ACTIVE
    ACTIVE = previous | frozenset(names)
    try:
        yield
    finally:
        ACTIVE = previous

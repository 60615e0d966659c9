"""How large an agent session's conversation grows, and what the machine draws once it is large.

Every model call of a turn carries the session's whole conversation (CONTRACT §4): each turn's user
message, a ``function_call`` and a ``function_call_output`` item per tool call, the assistant's text
reply, all of them since the session began. The tool outputs are the bulk: a read with a large
scrollback is up to ~700 kB of screen, escaped twice on the wire (once in the tool's JSON string,
again in the request's). A model API refuses a request past its size (the project's mock LLM at
32 MiB, a real model's context sooner), and a turn whose model call is refused fails: a program that
lets one session's conversation grow without bound is a program a correct server cannot run.

So the machine counts each turn's share itself, from the calls it made and the outputs it got
(:func:`turn_bytes`, an upper bound of what a server sends), and keeps every session under its budget
(``MachineConfig.conversation_budget``): past a quarter of it, big reads are drawn small
(:func:`read_scrollback`); near it (past half, or within two of the program's largest turns), after
the rule, the session is deleted and a fresh one takes its place (:func:`spent`); a turn that may take it past the budget (as large as the program's largest
so far) ends the program as invalid (:func:`over`), never as a failure. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stateful.model import Call

__all__ = ["DEFAULT_BUDGET", "REQUEST_BASE", "SMALL_SCROLLBACK", "turn_bytes", "large", "spent", "over",
           "read_scrollback"]

DEFAULT_BUDGET = 4_000_000
"""Bytes of conversation per agent session (a few MB: far under the mock LLM's 32 MiB, and the size
of a long real session's context)."""
REQUEST_BASE = 16_000
"""Bytes of every model request besides the conversation: the model's name, the instructions and the
five tools' schemas (about 4 kB in the reference stack; a server may send more)."""
ITEM_FIELDS = 200
"""Bytes per conversation item for the fields a server may add to what the tester knows (ids,
status, role, a ``response_id``); the tester's own ids (``call_...``) are counted in full besides."""
CALL_ID = "call_000-000000_00_00"
"""As long as the call ids the sessions target gives (``call_<turn>-<hex>_<step>_<call>``)."""
TURN_TEXT = "turn 000-000000 done"
"""As long as a turn's user message and its final reply (``turn <tag>``, ``turn <tag> done``)."""
SMALL_SCROLLBACK = 300
"""The largest scrollback a read draws once the conversation is large (the drawn ``integers(0, 300)``)."""


def _item(fields: Mapping[str, Any]) -> int:
    """An item's bytes in a request body: ``json.dumps`` escapes every non-ASCII character (up to 12
    bytes for one that UTF-8 writes in 4), so no client's encoding of the same item is larger."""
    return len(json.dumps(fields)) + ITEM_FIELDS


def turn_bytes(steps: Sequence[Sequence[Call]], outputs: Sequence[Sequence[str]]) -> int:
    """What a turn adds to its session's conversation: its user message, each call and its output,
    the final text reply."""
    text = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TURN_TEXT}]}
    size = 2 * _item(text)
    for step, outs in zip(steps, outputs):
        for call, out in zip(step, outs):
            size += _item({"type": "function_call", "name": call.tool, "arguments": call.arguments, "call_id": CALL_ID})
            size += _item({"type": "function_call_output", "call_id": CALL_ID, "output": out})
    return size


def large(conversation: int, budget: int) -> bool:
    """Past a quarter of the budget: big reads are drawn small from now on."""
    return conversation > budget // 4


def spent(conversation: int, largest_turn: int, budget: int) -> bool:
    """After a rule: past half of the budget, or two of the program's largest turns so far from it,
    the session makes way for a fresh one (what is left is the margin of the next rule: a command's
    reads while it waits for its output)."""
    return conversation > budget // 2 or conversation + 2 * largest_turn > budget


def over(conversation: int, largest_turn: int, budget: int) -> bool:
    """Before a turn: one more of the program's largest turns so far would pass the budget, so the
    turn does not start (the program ends, as invalid)."""
    return conversation + largest_turn > budget


def read_scrollback(drawn: Any, conversation: int, budget: int) -> Any:
    """The scrollback a read rule sends: what it drew, but a big one drawn small (modulo
    ``SMALL_SCROLLBACK + 1``) once the conversation is large. A value that is no valid scrollback
    (the read is an argument error, a short answer) is sent as drawn."""
    if (type(drawn) is int and drawn > SMALL_SCROLLBACK and large(conversation, budget)):
        return drawn % (SMALL_SCROLLBACK + 1)
    return drawn

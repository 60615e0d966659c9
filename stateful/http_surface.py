"""The checks of the server's HTTP surface (CONTRACT §2): statuses, snapshots, pages of items, the call
items of a turn, the terminals view. Pure functions of answers already read: no I/O.

The sessions target (:mod:`stateful.targets.sessions`) transports and records; each answer it reads is
judged here, so that every clause of the HTTP surface has one home (docs/architecture.md, "Adding a
check"). A 5xx is not judged here: the target's transport raises it as a ``ServerError`` (the server
broke, not a clause).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

import httpx

from stateful.clauses import deviate, fail
from stateful.targets.base import Step

__all__ = [
    "answered",
    "call_outputs",
    "json_object",
    "no_empty_page_says_more",
    "page_of_items",
    "reads_agree",
    "refused",
    "same_arguments",
    "terminals_data",
    "walk_is_exact",
]

_NOT_JSON = object()


def _json_or_not(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


def answered(reply: httpx.Response, expected: Collection[int], what: str, *, limit: int = 500) -> None:
    """A request whose answer §2 fixes got one of the ``expected`` statuses (``api.status``)."""
    if reply.status_code not in expected:
        fail("api.status", f"{what}: HTTP {reply.status_code} {reply.text[:limit]}")


def refused(what: str) -> NoReturn:
    """A request answered, but not as §2 fixes (what was wrong already in ``what``)."""
    fail("api.status", what)


def json_object(body: Any, what: str) -> Mapping[str, Any]:
    """An answer that §2 says is a JSON object (a session's snapshot)."""
    if not isinstance(body, Mapping):
        fail("api.status", f"{what}: not a JSON object: {body!r}"[:800])
    return body


def page_of_items(page: Any, params: Mapping[str, Any], *, beside: bool) -> tuple[list[dict[str, Any]], bool]:
    """One page of items, its own shape checked (§2.7), and whether it says ``has_more``. A page of a
    walk ``beside`` the items the machine judges may deviate past a known violation (ends that are not
    its ends); one that is no page never."""
    data = page.get("data") if isinstance(page, Mapping) else None
    if not isinstance(data, list):
        fail("items.pagination", f"GET items: 'data' is not a list: {page!r}"[:800])
    if data and (page.get("last_id") != data[-1].get("id") or page.get("first_id") != data[0].get("id")):
        (deviate if beside else fail)("items.pagination",
                                      f"GET items {dict(params)}: first_id/last_id do not name the page's ends")
    return data, bool(page.get("has_more"))


def no_empty_page_says_more(data: Sequence[Any], more: bool, params: Mapping[str, Any]) -> None:
    """A walk that follows ``has_more`` must move: an empty page that says there is more never ends."""
    if more and not data:
        fail("items.pagination", f"GET items {dict(params)}: an empty page says has_more")


def reads_agree(cursor: str | None, again: Sequence[Any], held: Sequence[Any]) -> None:
    """Two reads of the items after ``cursor`` (their ids) give the same items, in order: items are
    records (§2.7)."""
    if list(again) != list(held[: len(again)]):
        fail("items.pagination", f"two reads of the items after {cursor!r} disagree: {list(again[:5])} then "
                                 f"{list(held[:5])} (items are records: each read must give the same ones, in order)")


def walk_is_exact(paged: Sequence[Any], listed: Sequence[Any]) -> None:
    """The ids a walk in small pages gave (``paged``) begin with those the pages of 1000 gave
    (``listed``; items recorded meanwhile, an exit's event, may follow). The items the machine judges
    came in pages of 1000: past a known deviation of the small pages, the program goes on with those."""
    if list(paged[: len(listed)]) == list(listed):
        return
    lost = [i for i in listed if i not in paged]
    duplicates = len(paged) - len(set(paged))
    deviate("items.pagination",
            "items pagination is not exact (following after=last_id while has_more must yield every "
            f"item once, in order): {len(paged)} items in small pages vs {len(listed)} in pages of 1000; "
            f"first lost: {lost[:3]}, duplicates: {duplicates}")


def same_arguments(sent: str, recorded: Any) -> bool:
    """Whether a ``function_call`` item records the arguments the model sent (§2.7, §4).

    A server may re-serialise them, so JSON objects are compared as values (canonical dumps, so that
    ``NaN`` equals itself); what is not a JSON object (malformed, an array) may be recorded as the
    harness saw fit (§1: it may turn it into ``{}``), as long as it is a string.
    """
    if not isinstance(recorded, str):
        return False
    value = _json_or_not(sent)
    if not isinstance(value, dict):
        return True
    again = _json_or_not(recorded)
    return isinstance(again, dict) and json.dumps(value, sort_keys=True) == json.dumps(again, sort_keys=True)


def call_outputs(ids: Sequence[Sequence[str]], steps: Sequence[Step],
                 items: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Each call's output, step by step, from a completed turn's items (§2.7, ``items.calls``): every
    call (by its ``call_id``) has exactly one ``function_call`` item naming its tool with the arguments
    the model sent, and exactly one ``function_call_output`` item with a string output."""
    outputs: dict[Any, list[Any]] = {}
    calls: dict[Any, list[Any]] = {}
    arguments: dict[Any, Any] = {}
    for item in items:
        if item.get("type") == "function_call_output":
            outputs.setdefault(item.get("call_id"), []).append(item.get("output"))
        elif item.get("type") == "function_call":
            calls.setdefault(item.get("call_id"), []).append(item.get("name"))
            arguments[item.get("call_id")] = item.get("arguments")
    result: list[list[str]] = []
    for cids, step in zip(ids, steps):
        row = []
        for cid, call in zip(cids, step):
            got = outputs.get(cid, [])
            if len(got) != 1 or not isinstance(got[0], str):
                fail("items.calls", f"call {call!r} (call_id {cid}) has {len(got)} function_call_output "
                                    "items with a string output; expected exactly one")
            if calls.get(cid) != [call.tool]:
                fail("items.calls", f"call_id {cid}: function_call items {calls.get(cid)!r}, "
                                    f"expected one naming {call.tool!r}")
            if not same_arguments(call.arguments, arguments.get(cid)):
                fail("items.calls", f"call_id {cid}: the function_call item records arguments "
                                    f"{arguments.get(cid)!r}, but the model sent {call.arguments!r}")
            row.append(got[0])
        result.append(row)
    return result


def terminals_data(body: Any) -> list[Mapping[str, Any]]:
    """The rows of ``/resources/terminals`` (§2.8): its ``data`` is a list."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        fail("view.terminals", f"/resources/terminals: 'data' is not a list: {body!r}"[:800])
    return data

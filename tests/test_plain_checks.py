"""The checks plain repros carry in their own text (``stateful.plain_checks``), on plain data.

The repros that use them are replayed against faulty and correct stacks by tests/test_faults.py;
here what needs no server: what :func:`events_problem` says about a session's resource events, that the
items walk is bounded, and that the copied functions run on their own (no name of this package in them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from stateful import plain_checks
from stateful.e2e import session_items
from stateful.plain_checks import events_problem, walk_items

MAIN, PADDED, TUI = ("sh", "main"), ("sh", " main "), ("tui", "main")


def event(kind: str, rid: str, pair: tuple[str, str] | None) -> dict[str, Any]:
    resource = {"terminal": pair[0], "session": pair[1]} if pair else {"id": rid}
    return {"type": "resource_event", "event_type": f"session.resource.{kind}", "resource_id": rid,
            "resource_type": "terminal", "resource": resource}


def test_disambiguated_ids_of_two_live_siblings_pass_and_a_shared_one_breaks_unique_ids() -> None:
    fine = [event("created", "terminal_sh_main", MAIN), event("created", "terminal_sh_main_2", PADDED)]
    assert events_problem(fine, [MAIN, PADDED], [], []) is None
    shared = [event("created", "terminal_sh_main", MAIN), event("created", "terminal_sh_main", PADDED)]
    assert (events_problem(shared, [MAIN, PADDED], [], []) or "").startswith(
        "events.unique-ids: resource id 'terminal_sh_main' is the id of 2 live terminals")


def test_an_id_may_come_back_once_its_terminal_is_deleted_whatever_the_order_of_the_events() -> None:
    relaunched = [event("created", "terminal_sh_main", MAIN), event("created", "terminal_sh_main", MAIN),
                  event("deleted", "terminal_sh_main", MAIN)]
    assert events_problem(relaunched, [MAIN, MAIN], [MAIN], []) is None


def test_a_close_without_its_deleted_event_breaks_recorded() -> None:
    events = [event("created", "terminal_sh_main", MAIN)]
    assert (events_problem(events, [MAIN], [MAIN], []) or "").startswith(
        "events.recorded: 1 created and 0 deleted events, but 1 launches")
    assert (events_problem([*events, event("deleted", "terminal_sh_main", PADDED)], [MAIN], [MAIN], []) or "").startswith(
        "events.recorded: the deleted events name")


def test_ids_must_follow_the_names_and_the_servers_own_terminals_are_left_out() -> None:
    assert (events_problem([event("created", "term_main", MAIN)], [MAIN], [], []) or "").startswith("events.ids:")
    assert (events_problem([event("created", "terminal_sh_main_1", MAIN)], [MAIN], [], []) or "").startswith(
        "events.ids:")
    own = [event("created", "terminal_tui_main", TUI), event("created", "terminal_sh_main", MAIN)]
    assert events_problem(own, [MAIN], [], [TUI]) is None


def test_events_without_names_are_matched_by_their_ids() -> None:
    """A server whose ``resource`` does not name the pair: ids alone still show a shared one."""
    shared = [event("created", "terminal_sh_main", None), event("created", "terminal_sh_main", None)]
    assert (events_problem(shared, [MAIN, PADDED], [], []) or "").startswith("events.unique-ids:")
    own = [event("created", "terminal_tui_main", None), event("created", "terminal_sh_main", None)]
    assert events_problem(own, [MAIN], [], [TUI]) is None


def test_the_copied_functions_run_without_this_package(tmp_path: Any) -> None:
    """What a repro copies defines every name it uses from the stdlib imports the repro makes."""
    text = "from __future__ import annotations\nimport os\nimport re\nimport subprocess\n" \
           "from collections import Counter\nfrom typing import Any\n\n" + plain_checks.source({"walk", "events", "probe", "rows"})
    assert "stateful" not in text
    scope: dict[str, Any] = {}
    exec(compile(text, "repro", "exec"), scope)  # noqa: S102 - our own text
    shared = [event("created", "terminal_sh_main", MAIN), event("created", "terminal_sh_main", PADDED)]
    assert scope["events_problem"](shared, [MAIN, PADDED], [], []).startswith("events.unique-ids:")
    missing = str(tmp_path / "no.sock")
    assert scope["terminal_processes"](missing) is None and scope["history_size"](missing) is None
    assert scope["leftovers"](missing, []) == ""
    assert scope["walk_items"](Pages([[{"id": "a"}], [{"id": "b"}]]), 1) == [{"id": "a"}, {"id": "b"}]


class Pages:
    """A server's items pages as ``walk_items`` fetches them: page ``n`` of ``pages`` for the n-th request
    (``has_more`` on every page but the last unless ``more`` says otherwise); the requests are kept."""

    def __init__(self, pages: list[list[dict[str, Any]]], more: bool | None = None) -> None:
        self.pages, self.more, self.asked = pages, more, []

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(dict(params))
        number = min(len(self.asked), len(self.pages)) - 1
        data = self.pages[number]
        more = number < len(self.pages) - 1 if self.more is None else self.more
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": more}


def test_the_walk_follows_last_id_while_has_more() -> None:
    pages = Pages([[{"id": "a"}, {"id": "b"}], [{"id": "c"}]])
    assert [i["id"] for i in walk_items(pages, 2)] == ["a", "b", "c"]
    assert pages.asked == [{"order": "asc", "limit": 2}, {"order": "asc", "limit": 2, "after": "b"}]


def test_an_empty_page_that_says_has_more_ends_the_walk_with_a_message_naming_it() -> None:
    pages = Pages([[{"id": "a"}], []], more=True)
    with pytest.raises(AssertionError, match=r"items walk: page 2 \(limit 1, after 'a'\) says has_more but holds "
                                             r"no item: the server's pages would never end"):
        walk_items(pages, 1)
    assert len(pages.asked) == 2


def test_pages_that_come_round_again_end_the_walk_with_a_message_naming_it() -> None:
    pages = Pages([[{"id": "a"}], [{"id": "b"}], [{"id": "a"}]], more=True)  # then [a] for ever
    with pytest.raises(AssertionError, match=r"page 3 \(limit 1, after 'b'\) says has_more with last_id 'a', "
                                             r"which the walk already followed: the server's pages go round"):
        walk_items(pages, 1)
    assert len(pages.asked) == 3


def test_a_walk_that_never_ends_is_bounded_by_its_page_cap() -> None:
    endless = Pages([[{"id": str(n)}] for n in range(50)], more=True)
    with pytest.raises(AssertionError, match=r"items walk: the server still says has_more after 20 pages of 1 items "
                                             r"\(20 items\): the walk gives up"):
        walk_items(endless, 1, max_pages=20)
    assert len(endless.asked) == 20


def test_the_e2e_helpers_walk_is_bounded_the_same_way() -> None:
    def server(request: httpx.Request) -> httpx.Response:
        after = request.url.params.get("after")
        data = [] if after else [{"id": "a"}]
        return httpx.Response(200, json={"object": "list", "data": data, "first_id": None, "last_id": "a",
                                         "has_more": True})

    with httpx.Client(transport=httpx.MockTransport(server), base_url="http://server") as client:
        with pytest.raises(AssertionError, match=r"items walk: page 2 \(limit 1000, after 'a'\) says has_more but "
                                                 r"holds no item"):
            session_items(client, "s1")


def test_a_plain_view_check_names_entries_by_id_where_they_carry_no_pair() -> None:
    """omnigent 0.19.1's /resources/terminals entries carry ``name``, ``id`` and ``metadata``, no top-level
    ``terminal``/``session``: a plain repro's view check read every entry as (None, None) and failed with
    view.terminals on any server like it (a close.not-found repro of a campaign, 2026-12-07)."""
    from stateful.plain_checks import view_problem

    shared = [{"id": "terminal_bash_a_b", "name": "bash:a'b"}, {"id": "terminal_bash_a_b", "name": "bash:a'b!"},
              {"id": "terminal_tui_main", "name": "tui:main"}]
    running = [("bash", "a'b"), ("bash", "a'b!")]
    assert view_problem(shared, running, [("tui", "main")]) is None
    assert view_problem(shared[:1], running, []) is not None  # one running pair not shown
    assert "twice" in str(view_problem([*shared[:2], shared[0]], running, []))
    assert "not running" in str(view_problem([{"id": "terminal_bash_gone"}], [], []))
    assert view_problem([{"terminal": "bash", "session": "a'b"}], [("bash", "a'b")], []) is None

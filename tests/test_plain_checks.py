"""The checks plain repros carry in their own text (``stateful.plain_checks``), on plain data.

The repros that use them are replayed against faulty and correct stacks by tests/test_faults.py;
here what needs no server: what :func:`events_problem` says about a session's resource events, and
that the copied functions run on their own (no name of this package in them)."""

from __future__ import annotations

from typing import Any

from stateful import plain_checks
from stateful.plain_checks import events_problem

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
           "from collections import Counter\nfrom typing import Any\n\n" + plain_checks.source({"events", "probe", "rows"})
    assert "stateful" not in text
    scope: dict[str, Any] = {}
    exec(compile(text, "repro", "exec"), scope)  # noqa: S102 - our own text
    shared = [event("created", "terminal_sh_main", MAIN), event("created", "terminal_sh_main", PADDED)]
    assert scope["events_problem"](shared, [MAIN, PADDED], [], []).startswith("events.unique-ids:")
    missing = str(tmp_path / "no.sock")
    assert scope["terminal_processes"](missing) is None and scope["history_size"](missing) is None
    assert scope["leftovers"](missing, []) == ""

"""The matching of resource events to launches (``stateful.model.reconcile_events``) where the
server leaves the pair out of ``resource`` (§2.4 leaves its content open): id siblings (``'%1'`` and
``'_%1_'``, both ``terminal_bash_1`` before disambiguation) launched in one reply may hold their ids
either way round, and every assignment the events allow is kept until an event rules it out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import pytest

from stateful.model import (
    Call,
    ContractViolation,
    EventView,
    Ledger,
    Life,
    SessionModel,
    judge,
    judge_step,
    reconcile_events,
)

A, B = "%1", "_%1_"
"""Id siblings: both give ``terminal_bash_1``; while both live, one of them has ``terminal_bash_1_2``."""
BASE, SECOND = "terminal_bash_1", "terminal_bash_1_2"
CREATED, DELETED = "session.resource.created", "session.resource.deleted"


def call(tool: str, **args: str) -> Call:
    return Call(f"sys_terminal_{tool}", json.dumps(args))


def launch_together(model: SessionModel, *sessions: str) -> SessionModel:
    """One reply that launches ``sessions`` of ``bash`` concurrently (each says ``launched``)."""
    calls = [call("launch", terminal="bash", session=s) for s in sessions]
    outputs = [json.dumps({"terminal": "bash", "session": s, "tmux_socket": f"/s/{s}", "has_os_env": True,
                           "status": "launched"}) for s in sessions]
    return judge_step(model, calls, outputs)[-1].model


def close(model: SessionModel, session: str) -> SessionModel:
    return judge(model, call("close", terminal="bash", session=session),
                 json.dumps({"terminal": "bash", "session": session, "status": "closed"})).model


def created(rid: str, session: str | None = None) -> EventView:
    return EventView(CREATED, rid, "bash" if session is not None else None, session)


def deleted(rid: str, session: str | None = None) -> EventView:
    return EventView(DELETED, rid, "bash" if session is not None else None, session)


def turns(*steps: tuple[SessionModel, Sequence[EventView]]) -> Ledger:
    """Reconcile the events after each turn (each model is the one after that turn; the events are
    the new ones of the turn), as ``after_turn.events_recorded`` does; returns the last ledger."""
    ledger, seen = Ledger(), []
    for model, new in steps:
        seen += new
        rec = reconcile_events(model, ledger, seen)
        assert not rec.missing, rec.missing
        ledger = rec.ledger
    return ledger


SIBLINGS = launch_together(SessionModel(declared=("bash",)), A, B)


@pytest.mark.parametrize("first", [BASE, SECOND])
@pytest.mark.parametrize("closed", [A, B])
@pytest.mark.parametrize("rid", [BASE, SECOND])
def test_siblings_launched_together_may_hold_either_id(first: str, closed: str, rid: str) -> None:
    """Whichever of the two was served first, and whichever is closed first: the deleted event of
    either id is some assignment's (the old matcher gave the first created event to the first
    launch, and called ``deleted terminal_bash_1_2`` for a closed ``'%1'`` a deleted event of the
    live ``'_%1_'``)."""
    other = BASE if first == SECOND else SECOND
    after_close = close(SIBLINGS, closed)
    ledger = turns((SIBLINGS, [created(first), created(other)]), (after_close, [deleted(rid)]))
    survivor = SIBLINGS.pair(*("bash", B if closed == A else A))
    assert survivor is not None
    # narrowed: the pair still alive holds the other id, in the one assignment left
    assert len(ledger.assignments) == 1
    assert ledger.id_of(survivor.instance) == (SECOND if rid == BASE else BASE)
    # ... so its own deleted event must name that id, and one naming the closed pair's id is a duplicate
    both_closed = close(after_close, B if closed == A else A)
    turns((SIBLINGS, [created(first), created(other)]), (after_close, [deleted(rid)]),
          (both_closed, [deleted(SECOND if rid == BASE else BASE)]))
    with pytest.raises(ContractViolation, match="events.recorded: deleted event .* matches no live created"):
        turns((SIBLINGS, [created(first), created(other)]), (after_close, [deleted(rid)]),
              (both_closed, [deleted(rid)]))


def test_both_assignments_are_kept_until_an_event_decides() -> None:
    ledger = turns((SIBLINGS, [created(BASE), created(SECOND)]))
    assert len(ledger.assignments) == 2
    assert ledger.id_of(SIBLINGS.pair("bash", A).instance) is None  # not known yet
    closed_together = close(close(SIBLINGS, A), B)
    ledger = turns((SIBLINGS, [created(BASE), created(SECOND)]), (closed_together, [deleted(SECOND), deleted(BASE)]))
    assert len(ledger.assignments) == 1  # both done: the assignments no longer differ


def test_a_deleted_event_of_a_live_pair_is_still_a_violation_when_the_order_is_fixed() -> None:
    """Launched in two replies, the siblings' ids are fixed (the first had no sibling when it got its
    id): a deleted event naming the live one's id for a close of the other is the server's fault
    (what the planted fault sibling-deletes-swapped does)."""
    first = launch_together(SessionModel(declared=("bash",)), A)
    both = launch_together(first, B)
    after_close = close(both, A)
    with pytest.raises(ContractViolation, match=r"events.recorded: .*which is alive"):
        turns((first, [created(BASE)]), (both, [created(SECOND)]), (after_close, [deleted(SECOND)]))
    turns((first, [created(BASE)]), (both, [created(SECOND)]), (after_close, [deleted(BASE)]))


def test_a_named_pair_decides_the_assignment() -> None:
    """A server that names the pair in ``resource`` fixes it: the name is used, never overruled."""
    after_close = close(SIBLINGS, A)
    named = [created(SECOND, A), created(BASE, B)]
    turns((SIBLINGS, named), (after_close, [deleted(SECOND)]))
    turns((SIBLINGS, named), (after_close, [deleted(SECOND, A)]))
    with pytest.raises(ContractViolation, match="which is alive"):
        turns((SIBLINGS, named), (after_close, [deleted(BASE)]))
    with pytest.raises(ContractViolation, match="matches no live created"):
        turns((SIBLINGS, named), (after_close, [deleted(BASE, A)]))


def test_ids_that_no_assignment_allows_are_violations() -> None:
    with pytest.raises(ContractViolation, match="events.unique-ids"):
        turns((SIBLINGS, [created(BASE), created(BASE)]))
    with pytest.raises(ContractViolation, match="events.ids"):
        turns((SIBLINGS, [created(BASE), created(SECOND), created("terminal_bash_1_3")]))
    with pytest.raises(ContractViolation, match="events.ids"):
        turns((SIBLINGS, [created("terminal_bash_2")]))


def test_an_exiting_sibling_keeps_both_assignments_open_until_the_deleted_events_decide() -> None:
    """``'%1'`` told to exit may be dead or alive; ``'_%1_'`` closed: a deleted event of either id
    fits some assignment, and what is still required follows the assignment that needs least."""
    pair = SIBLINGS.pair("bash", A)
    assert pair is not None
    exiting = SIBLINGS._with_pair(replace(pair, life=Life.EXITING))
    after_close = close(exiting, B)
    events = [created(BASE), created(SECOND), deleted(SECOND)]
    rec = reconcile_events(after_close, Ledger(), events)
    assert not rec.missing  # '_%1_' = terminal_bash_1_2, deleted; '%1' may still run
    assert len(rec.ledger.assignments) == 2  # or '%1' exited (terminal_bash_1_2) and '_%1_''s event is due
    assert rec.pending == {SIBLINGS.pair("bash", B).instance}
    done = reconcile_events(after_close, rec.ledger, [*events, deleted(BASE)])
    assert not done.missing and len(done.ledger.assignments) == 1



def test_names_that_name_no_launched_pair_are_not_relied_on() -> None:
    """§2.4 leaves ``resource`` open: a ``session`` key holding the agent session's id, or a
    ``terminal`` alone, names no pair, and the event is matched by its id as an unnamed one."""
    after_close = close(SIBLINGS, A)
    odd = [EventView(CREATED, BASE, "bash", "sess_123"), EventView(CREATED, SECOND, "bash:%1", None)]
    turns((SIBLINGS, odd), (after_close, [EventView(DELETED, SECOND, "bash", "sess_123")]))
    with pytest.raises(ContractViolation, match="events.ids"):
        turns((SIBLINGS, [EventView(CREATED, "terminal_bash_x", "bash", "x")]))

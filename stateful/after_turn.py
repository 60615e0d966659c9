"""Every check the machine makes after a turn, in the order it makes them.

A turn is one user message: the model's replies (steps) each make one or more tool calls. After the
target has run it, :func:`run_turn` checks, in this order:

1. each step's outputs against the model (:func:`judge_outputs`: exact values, lists, tolerance
   where the contract says "may"; a call on a pair this session never launched that finds one is
   told apart as a scope or name-matching violation);
2. each call, in :data:`AFTER_CALL` order: the machine's bookkeeping of the panes it now knows of,
   markers never shown in another pair's screen, and the exact rows of a read;
3. the turn as a whole, in :data:`AFTER_TURN` order: private tmux servers, resource events, and
   ground truth (tmux and /proc) for pairs launched or closed.

Each check is a function of the turn's :class:`TurnContext` (and, for per-call checks, the call and
its judgement), so it can be unit-tested with a fake agent session. The view check and the waits
after a DELETE are here too: rules call them after the turns that can break them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import event, note, reject

from stateful import causes, checks, conversation, meter
from stateful.clauses import deviate, fail, tolerated
from stateful.model import (
    HELD_WITH,
    NAMED_KEYS,
    PANE_ROWS,
    TOLERABLE,
    Call,
    ContractViolation,
    Judgement,
    Life,
    Reconciled,
    addressed_pair,
    describe,
    judge_step,
    pair_name,
    reconcile_events,
    resource_id_fits,
)
from stateful.targets.base import SESSIONS_API, StepTimeout
from stateful.world import DECLARED, LIST, READ, SEND, Agent, Shell, World, clip, exercised

__all__ = ["TurnContext", "AFTER_CALL", "AFTER_TURN", "run_turn", "count_conversation", "check_view", "await_gone"]

NOT_FOUND_CLAUSES = frozenset({"launch.one-launched", "send.not-found", "read.not-found", "close.not-found"})
"""Clauses a call on a pair that is not registered breaks when the server finds some other pair."""

History = dict[tuple[str, str], tuple[str, int]]
"""(terminal, session) -> (its socket, the lines of history its pane holds), for idle panes."""


@dataclass
class TurnContext:
    """One turn as the checks see it."""

    world: World
    agent: Agent
    number: int
    steps: Sequence[Sequence[Call]]
    outputs: Sequence[Sequence[str]]
    history: History
    """See :func:`history_before`."""
    ended_before: frozenset[int]
    """Instances the model knew to be ended before the turn (so the turn's closes are the rest)."""
    judged: list[list[Judgement]] = field(default_factory=list)


CallCheck = Callable[[TurnContext, Call, Judgement], None]
TurnCheck = Callable[[TurnContext], None]


def run_turn(world: World, agent: Agent, steps: Sequence[Sequence[Call]]) -> list[list[Judgement]]:
    """Run one turn on the target, then every check below in order; return each call's judgement."""
    world.turns += 1
    world.busy = True
    number = world.turns
    if world.budgeted and conversation.over(agent.conversation, world.largest_turn, world.cfg.conversation_budget):
        # The machine moves a session on before this (stateful.conversation): a rule that got here
        # read more than the margin. Its program is one a model API may refuse: not run further.
        event("program: ended at the conversation budget")
        note(f"agent {agent.index}: conversation {agent.conversation} bytes, the largest turn {world.largest_turn}, "
             f"budget {world.cfg.conversation_budget}: the program ends here (invalid)")
        reject()
    ended_before = agent.model.ended
    history = history_before(world, agent, steps)
    began = time.monotonic()
    try:
        outputs = agent.session.run_turn(steps, step_timeout=world.cfg.step_timeout)
    except StepTimeout as hang:
        world.transcript.add(number, agent.index, steps, None)
        hang.panes = world.panes(agent)
        raise
    world.timed_turn(time.monotonic() - began)
    world.transcript.add(number, agent.index, steps, outputs)
    count_conversation(world, agent, steps, outputs)
    ctx = TurnContext(world, agent, number, steps, outputs, history, ended_before)
    for index in range(len(steps)):
        judgements = judge_outputs(ctx, index)
        for call, judgement in zip(steps[index], judgements):
            for check in AFTER_CALL:
                check(ctx, call, judgement)
        ctx.judged.append(judgements)
    for turn_check in AFTER_TURN:
        turn_check(ctx)
    return ctx.judged


def count_conversation(world: World, agent: Agent, steps: Sequence[Sequence[Call]],
                       outputs: Sequence[Sequence[str]]) -> None:
    """Add what the turn put into the session's conversation (where the target has one)."""
    if world.budgeted:
        added = conversation.turn_bytes(steps, outputs)
        agent.conversation += added
        world.largest_turn = max(world.largest_turn, added)
        world.largest_conversation = max(world.largest_conversation, agent.conversation)
        meter.largest("conversation (count)", agent.conversation)
        meter.largest("turn (count)", added)


# -- 1. the outputs against the model -------------------------------------------------------------

def judge_outputs(ctx: TurnContext, index: int) -> list[Judgement]:
    """Step ``index``'s outputs against the model (:func:`stateful.model.judge_step`); the model
    moves on to the state they imply."""
    calls, outs = ctx.steps[index], ctx.outputs[index]
    known = tolerated(TOLERABLE)  # what the model may go past: each noted one is held to deviate() below
    if ctx.agent.model.tolerated != known:
        ctx.agent.model = replace(ctx.agent.model, tolerated=known)
    try:
        judgements = judge_step(ctx.agent.model, calls, outs)
    except ContractViolation as exc:
        failure: ContractViolation | None = exc
    else:
        failure = None
    if failure is not None:  # raised out here: a violation never carries another as its context
        where = f"  where: turn {ctx.number}, step {index} of agent {ctx.agent.index} on {ctx.world.target.where}"
        scope = scope_problem(ctx, calls, outs) if failure.clause in NOT_FOUND_CLAUSES else None
        if scope is not None:
            fail(scope[0], scope[1], *str(failure).split("\n"), where)
        failure.args = (f"{failure}\n{where}",)
        raise failure
    for call, output, judgement in zip(calls, outs, judgements):
        for clause, why in judgement.noted:  # a known deviation, or the failure it would have been
            # a list's rows are the server's state, not its arguments' doing: they name no cause of the
            # call (an extra key of a list that showed another session's row is not a second finding)
            named = () if call.tool == LIST else causes.call_causes(clause, call.tool, call.arguments, output)
            deviate(clause, f"{call!r} -> {clip(output)}: {why}",
                    f"  where: turn {ctx.number}, step {index} of agent {ctx.agent.index} on {ctx.world.target.where}",
                    causes=named)
    if judgements:
        ctx.agent.model = judgements[0].model
    for judgement in judgements:
        event(judgement.label)
        exercised(judgement.clause, *HELD_WITH.get(judgement.clause, ()), "output.json")  # judge() parsed it first
    if len(calls) > 1:
        exercised("step.concurrent")  # some order of the concurrent calls explained their outputs
    if any(extra_keys(call) for call in calls):
        exercised("args.extra-keys")  # the outputs were judged as if the extra keys were not there
    return judgements


def scope_problem(ctx: TurnContext, calls: Sequence[Call], outputs: Sequence[str]) -> tuple[str, str] | None:
    """Why a call on a pair this session never launched found a terminal (it must not): another
    session's pair of that name (the session scope), or this session's pair of a near name
    (names matched like tmux targets). None if neither explains it."""
    agent = ctx.agent
    for call, output in zip(calls, outputs):
        try:
            args, value = json.loads(call.arguments), json.loads(output)
        except ValueError:
            continue
        if not (isinstance(args, dict) and isinstance(value, dict) and call.tool != LIST):
            continue
        terminal, session = args.get("terminal"), args.get("session")
        if terminal not in DECLARED or not isinstance(session, str) or agent.model.pair(terminal, session):
            continue
        if not (value.get("status") in ("already_running", "sent", "closed") or "screen" in value):
            continue
        for other in ctx.world.live:
            if other is not agent and other.model.pair(terminal, session) is not None:
                return "scope.session", (f"{call!r} -> {clip(output)}: agent {agent.index} never launched "
                                         f"{pair_name(terminal, session)}, but agent {other.index}'s pair of that name "
                                         "answered: a session never sees another session's terminals")
        for p in agent.model.alive():
            if p.terminal == terminal and checks.near_names(p.session, session):
                return "scope.names-exact", (f"{call!r} -> {clip(output)}: {pair_name(terminal, session)} was never "
                                             f"launched, but the live {pair_name(p.terminal, p.session)} answered: "
                                             "names are exact keys, never matched like tmux targets")
    return None


# -- 2. each call -----------------------------------------------------------------------------------

def track_shells(ctx: TurnContext, call: Call, judgement: Judgement) -> None:
    """Bookkeeping, not a check: a pane for every instance the model now knows of."""
    for pair in ctx.agent.model.pairs:
        if pair.instance not in ctx.agent.shells:
            ctx.agent.shells[pair.instance] = Shell(socket=pair.socket)


def extra_keys(call: Call) -> set[str]:
    """The keys of a call's arguments that its tool does not name (every tool must ignore them)."""
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return set()
    return set(args) - NAMED_KEYS.get(call.tool, set(args)) if isinstance(args, dict) else set()


def screen_isolation(ctx: TurnContext, call: Call, judgement: Judgement) -> None:
    """A marker typed into one pair never shows in the screen of another (of any session)."""
    if call.tool != READ or not (isinstance(judgement.value, dict) and "screen" in judgement.value):
        return
    args = json.loads(call.arguments)
    terminal, session = args["terminal"], args["session"]
    owner = (ctx.agent.index, terminal, session)
    for token, uid in checks.tokens_in(judgement.value["screen"]):
        other = ctx.world.owners.get(uid)
        if other is not None and other != owner:
            deviate("screen.isolation",
                 f"{call!r}: the screen of {pair_name(terminal, session)} (agent {ctx.agent.index}) shows {token}, "
                 f"which was typed into {pair_name(other[1], other[2])} of agent {other[0]}")
    exercised("screen.isolation")


def history_before(world: World, agent: Agent, steps: Sequence[Sequence[Call]]) -> History:
    """For every pair a read of the turn addresses whose program sits idle at its prompt (and
    that the turn types nothing into): its socket and how many lines of history its pane holds
    (probe). Nothing is printed there meanwhile, so the read's rows are exactly known: the check
    never depends on how fast output arrives."""
    typed_into = {addressed_pair(c) for step in steps for c in step if c.tool == SEND}
    found: History = {}
    for call in (c for step in steps for c in step if c.tool == READ):
        key = addressed_pair(call)
        pair = agent.model.pair(*key) if key is not None else None
        shell = agent.shells.get(pair.instance) if pair is not None else None
        if (pair is None or pair.life is not Life.ALIVE or shell is None or not shell.ready
                or key in typed_into or key in found or not world.probe_on(pair.socket)):
            continue
        size = world.probe.history_size(pair.socket)
        if size is not None:
            found[pair.key] = (pair.socket, size)
    return found


def rows_exact(ctx: TurnContext, call: Call, judgement: Judgement) -> None:
    """§1 read: a read holds exactly min(N, H) + 24 rows, H being the lines of history the pane
    holds (checked where H is known: see :func:`history_before`; the probe reads it again after the
    turn, and a pane that changed after all is not judged)."""
    value = judgement.value
    if call.tool != READ or not (isinstance(value, dict) and isinstance(value.get("screen"), str)):
        return
    if any(clause == "read.rows-exact" for clause, _ in judgement.noted):
        return  # outside 24 .. N + 24: the judge noted it already (no second note, no read of 1000 to tell a cause)
    key = addressed_pair(call)
    if key not in ctx.history:
        return
    socket, held = ctx.history[key]
    if ctx.world.probe.history_size(socket) != held:
        event("read: rows not judged (the pane changed)")
        return
    lines, rows = value["scrollback_lines"], value["screen"].count("\n")
    expected = min(lines, held) + PANE_ROWS
    if rows != expected:
        smaller: list[tuple[Call, int]] = []  # the same read with a scrollback of 1000, where one was made
        deviate("read.rows-exact", _rows_headline(call, rows, held, lines),
                causes=scrollback_cause(ctx, call, lines, socket, held, rows, smaller))
        # A known deviation: the read's screen is used as it is. A capped big read hides whatever else
        # the rows hold: the read of 1000 made to tell its cause is judged too (fetched another way).
        for again, again_rows in smaller:
            if again_rows != min(causes.BIG_SCROLLBACK, held) + PANE_ROWS:
                deviate("read.rows-exact", _rows_headline(again, again_rows, held, causes.BIG_SCROLLBACK))
        return
    event("read: rows exact")
    exercised("read.rows-exact")


def _look_again(ctx: TurnContext, steps: Sequence[Sequence[Call]]) -> list[list[str]]:
    """A turn a check makes to look once more (not judged by the checks: it is no step of the
    program), still counted where every turn is: the run's turns, the transcript, and the agent
    session's conversation, which it grows like any other (the conversation budget)."""
    world = ctx.world
    world.turns += 1
    outputs = ctx.agent.session.run_turn(steps, step_timeout=world.cfg.step_timeout)
    world.transcript.add(world.turns, ctx.agent.index, steps, outputs)
    count_conversation(world, ctx.agent, steps, outputs)
    return outputs


def _rows_headline(call: Call, rows: int, held: int, lines: Any) -> str:
    return (f"{call!r} -> {rows} rows: the pane holds {held} lines of history (tmux), so a read with scrollback "
            f"{lines} holds min(N, H) + {PANE_ROWS} = {min(lines, held) + PANE_ROWS} rows")


def scrollback_cause(ctx: TurnContext, call: Call, lines: Any, socket: str, held: int, rows: int,
                     smaller: list[tuple[Call, int]]) -> tuple[str, ...]:
    """``("big-scrollback",)`` when a read with a scrollback over :data:`causes.BIG_SCROLLBACK` broke
    the exact rows and the same read with that much scrollback (asked once more, the pane unchanged)
    does not break them the same way (exact, or off by another count): the size is what this failure
    needs. Otherwise no cause: it fails the same whatever the size. ``smaller`` gets that read and
    its rows where the pane was unchanged."""
    if not isinstance(lines, int) or lines <= causes.BIG_SCROLLBACK:
        return ()
    again = Call(READ, json.dumps({**json.loads(call.arguments), "scrollback": causes.BIG_SCROLLBACK}))
    outputs = _look_again(ctx, [[again]])
    try:
        screen = json.loads(outputs[0][0])["screen"]
    except (ValueError, LookupError, TypeError):
        return ()
    if ctx.world.probe.history_size(socket) != held or not isinstance(screen, str):
        return ()
    smaller.append((again, screen.count("\n")))
    missing = min(lines, held) + PANE_ROWS - rows
    missing_smaller = min(causes.BIG_SCROLLBACK, held) + PANE_ROWS - screen.count("\n")
    return ("big-scrollback",) if missing_smaller != missing else ()


AFTER_CALL: tuple[CallCheck, ...] = (track_shells, screen_isolation, rows_exact)
"""The per-call checks, in order."""


# -- 3. the turn --------------------------------------------------------------------------------------

def private_servers(ctx: TurnContext) -> None:
    """§1 launch: every live pair of every session has a tmux server of its own."""
    check_private_servers(ctx.world)


def check_private_servers(world: World) -> None:
    seen: dict[str, str] = {}
    for agent in world.live:
        for p in agent.model.alive():
            name = f"{pair_name(p.terminal, p.session)} of agent {agent.index}"
            if p.socket in seen:
                fail("launch.private-server", f"{name} and {seen[p.socket]} share tmux_socket {p.socket!r}: "
                                              "each terminal has its own private server")
            seen[p.socket] = name
    if len(seen) > 1:
        exercised("launch.private-server")


def events_recorded(ctx: TurnContext) -> None:
    """§2.4: every launch and close (and exit) recorded its event. Polled for, where the target
    does not record them within the call; an exit's deleted event is always polled for."""
    agent, world = ctx.agent, ctx.world
    last: list[Reconciled] = []

    def complete() -> Reconciled | None:
        last[:] = [reconcile_events(agent.model, agent.ledger, agent.session.events())]
        return None if last[0].missing else last[0]

    exited = {n for n, shell in agent.shells.items() if shell.exited}
    rec = complete()
    at_once = world.target.events_with_calls and not last[0].pending & exited
    if rec is None and not at_once:
        rec, _ = world.eventually("events", complete, tried=True)
    for clause_id, why in last[0].noted:  # known violations the events went past (model.TOLERABLE)
        deviate(clause_id, why)
    if rec is None:
        when = "once the calls returned" if at_once else f"after {world.waited()}"
        fail("events.recorded", f"resource events missing {when} (agent {agent.index}): {list(last[0].missing)}",
             f"  model: {describe(agent.model)}")
    agent.ledger = rec.ledger
    for label in rec.labels:
        event(label)
        exercised("events.recorded", "events.ids", "events.unique-ids")


def ground_truth(ctx: TurnContext) -> None:
    """tmux and /proc: a new live pair has a running server with a pane; a closed one left nothing
    once close returned."""
    agent, world = ctx.agent, ctx.world
    for p in agent.model.alive():
        shell = agent.shells[p.instance]
        if not shell.processes and world.probe_on(p.socket):
            view = world.probe.view(p.socket)
            if not view.alive or not view.panes:
                fail("launch.server-runs", f"launch said {pair_name(p.terminal, p.session)} runs at {p.socket}, "
                                           "but no tmux server with a pane answers there")
            shell.processes = view.members
            exercised("launch.server-runs")
    for number in sorted(agent.model.ended - ctx.ended_before):
        ended = agent.shells.get(number)
        if ended is None or ended.exited or not ended.processes or not world.probe_on(ended.socket):
            continue
        await_gone(world, agent, number, ended, at_once=True)  # a live pair that was closed


def coverage(ctx: TurnContext) -> None:
    """Not a check: the sessions target checks every turn's items and their pagination as it reads them,
    and the status and shape of every answer of the sessions API it reads them from."""
    if SESSIONS_API in ctx.world.target.observes:
        exercised("items.pagination", "items.calls", "api.status")


AFTER_TURN: tuple[TurnCheck, ...] = (private_servers, events_recorded, ground_truth, coverage)
"""The per-turn checks, in order."""


# -- checks the rules call after the turns that can break them ------------------------------------------

def check_view(world: World, agent: Agent) -> None:
    """``/resources/terminals`` agrees with list's running pairs (only when all pairs are certain)."""
    if any(p.life is not Life.ALIVE for p in agent.model.pairs):
        return
    view = agent.session.terminals_view()
    if view is None:
        return
    baseline = agent.model.baseline
    problems = [checks.view_problem(view, [p.key for p in agent.model.alive()], ids, baseline,
                                    lambda rid: any(resource_id_fits(rid, t, s) for t, s in baseline))
                for ids in _live_ids(agent)]
    if None not in problems:  # the view agrees with no assignment of the events to the pairs
        deviate("view.terminals", f"agent {agent.index}: {problems[0]}")
        return  # a known deviation: the second view is not part of the model's state
    event("view: agrees with list")
    exercised("view.terminals")


def _live_ids(agent: Agent) -> list[dict[tuple[str, str], str]]:
    """Each live pair's resource id, in every assignment of the events that the ledger still allows
    (id siblings launched together may hold their ids either way round)."""
    every = []
    for assignment in agent.ledger.assignments:
        ids = {}
        for number, rid in assignment.live:
            inst = agent.model.instances[number]
            pair = agent.model.pair(inst.terminal, inst.session)
            if pair is not None and pair.instance == number:
                ids[(inst.terminal, inst.session)] = rid
        every.append(ids)
    return every


def await_gone(world: World, agent: Agent, number: int, shell: Shell, *, at_once: bool = False) -> None:
    """Ground truth after a close (``at_once``: §1 says that once close returns, the server and
    every process are gone, so nothing is waited for) or a DELETE (which the contract gives no
    such bound: polled until the poll deadline)."""
    inst = agent.model.instances[number]
    state: dict[str, Any] = {}

    def gone() -> bool | None:
        state["alive"] = world.probe.server_alive(shell.socket)
        state["left"] = world.probe.leftovers(shell.processes)
        return True if not state["alive"] and not state["left"] else None

    done = gone() if at_once else world.eventually("probe: gone after DELETE", gone)[0]
    if done is None:
        alive, left = state["alive"], state["left"]
        what = ("its tmux server at " + shell.socket + " still runs" if alive else "") + \
            (" and " if alive and left else "") + (f"processes {left} are left" if left else "")
        if at_once:
            deviate("close.nothing-left", f"{pair_name(inst.terminal, inst.session)} (agent {agent.index}) was "
                                          f"closed, but once close returned {what}")
        else:
            deviate("session.delete", f"{pair_name(inst.terminal, inst.session)} (agent {agent.index}): its session "
                                      f"was deleted, but {world.waited()} later {what}")
        return  # known: what is left is the server's (the model has the pair closed, as the server said)
    exercised("close.nothing-left" if at_once else "session.delete")

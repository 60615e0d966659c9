"""What a plain repro asserts: the recorded turns of a shrunk program, judged again offline.

A plain repro (``stateful.plain``) scripts the calls the machine made and asserts what the contract
fixes about each output. What it fixes depends on the state of the session, which only the model
knows: so the pure model (``stateful.model``) is replayed here over the recorded calls and outputs
(no I/O), and for each call the contract's answer is found by asking the model which of the answers
the contract names it accepts (:func:`expectation`): one exact answer becomes ``out == ...``,
several (the contract says "may") become ``out in [...]``, launches and reads become the fields the
contract fixes (a launch's socket is whatever the server chose, remembered in ``sock`` for later
``already_running`` and list checks). The step that broke the contract gets the assertion of the
broken clause, computed from the model *before* it (so it fails against the buggy server and holds
against a correct one); a clause without a plain form raises :class:`NoPlainForm`.

Every check is a Python expression over ``out`` (the parsed output), ``sock`` (the agent's sockets)
and ``base`` (what its first list showed): :func:`holds` evaluates one against the recorded values,
which is how a writer proves that the setup checks hold and the final one fails on what was seen.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from stateful import causes, checks, plain_checks
from stateful.clauses import ContractViolation
from stateful.model import (
    PANE_ROWS, Call, ERR_KEYS, ERR_MALFORMED, ERR_NOT_OBJECT, ERR_SCROLLBACK, ERR_SESSION, ERR_TERMINAL, ERR_TEXT, Life,
    SENT, SessionModel, addressed_pair, err_gone, err_not_found, err_unknown_terminal, initial_model, judge,
    judge_step,
)
from stateful.recording import Op

__all__ = ["Check", "NoPlainForm", "Plan", "Block", "plan", "holds", "expected_token"]

DECLARED = ("bash", "sh")
LAUNCH, SEND, READ, LIST, CLOSE = (f"sys_terminal_{t}" for t in ("launch", "send", "read", "list", "close"))
MARKER_CLAUSES = frozenset({"send.text-literal", "read.output-shows", "send.keys"})
"""Clauses the machine finds by reading a pane until a marker shows (polled)."""
SCOPE_CLAUSES = frozenset({"scope.session", "scope.names-exact"})
NOT_FOUND_CLAUSES = frozenset({"launch.one-launched", "send.not-found", "read.not-found", "close.not-found"})
EVENT_CLAUSES = frozenset({"events.recorded", "events.ids", "events.unique-ids"})
"""Clauses the machine finds in a session's resource events (a plain repro reads its items)."""
PROBE_CLAUSES = frozenset({"launch.server-runs", "close.nothing-left", "session.delete"})
"""Clauses the machine finds by asking tmux and /proc about a terminal's processes (a plain repro
notes them after each launch with ``tmux -S SOCKET list-panes`` and /proc, and looks again later)."""
_UID = re.compile(r"_(u[0-9a-z]+z[0-9a-z]+)")
_NEW_SOCKET = "\0a socket no launch has returned"


class NoPlainForm(Exception):
    """The failure cannot be written as a plain repro (the message says why)."""


@dataclass(frozen=True)
class Check:
    """One assertion: ``expr`` holds for the output; a failure names ``clause``."""

    expr: str
    clause: str
    then: str = ""
    """A statement run after the assertion (remembering a launch's socket)."""
    calls: tuple[int, ...] = ()
    """A check of concurrent calls together: the calls (of its step) whose outputs ``out`` lists,
    in the order issued. Empty: ``out`` is the one call's output."""


@dataclass
class Block:
    """One part of the repro, in order."""

    kind: str
    """"open" (a new agent session), "turn", "poll" (a turn repeated until its checks hold),
    "pagination", "view" or "events" (checks beyond outputs), "delete", "capture" (note the
    processes of new live pairs: their tmux server answers), "gone" (those of closed pairs are
    gone), "rows" (a turn whose reads are held to min(N, H) + 24 rows, H from tmux)."""
    agent: int
    step: tuple[int, str]
    steps: list[list[Call]] = field(default_factory=list)
    checks: dict[tuple[int, int], list[Check]] = field(default_factory=dict)
    """(step, call) -> its checks."""
    first_list: bool = False
    """The agent's first turn: its list is the baseline."""
    final: bool = False
    expected: list[tuple[str, str]] = field(default_factory=list)
    """A "view": the pairs it must show (besides the baseline)."""
    repeats: int = 0
    """A "poll": how many times the machine ran the turn."""
    launched: list[tuple[str, str]] = field(default_factory=list)
    """An "events": every launch that said ``launched`` (one pair per process)."""
    ended: list[tuple[str, str]] = field(default_factory=list)
    """An "events": one pair per launched process that was closed (or exited and was removed)."""
    held: list[tuple[str, str]] = field(default_factory=list)
    """A "rows": the pairs whose history size is read (tmux) before and after the turn."""


@dataclass
class Plan:
    clause: str
    terminals: dict[str, Any]
    blocks: list[Block]
    agents: int


def holds(check: Check, out: Any, sock: dict[tuple[str, str], str], base: list[tuple[str, str]]) -> bool:
    """Whether ``check`` holds for a recorded output (the repro evaluates the same expression)."""
    evaluated, value = _evaluated(check, out, sock, base)
    return evaluated and bool(value)


def fails(check: Check, out: Any, sock: dict[tuple[str, str], str], base: list[tuple[str, str]]) -> bool:
    """Whether ``check`` is false for a recorded output *as an assertion*: its expression evaluates
    (a repro whose assertion raises, e.g. for a socket no assertion before it remembered, is an
    error, not a failure for the clause) and is false."""
    evaluated, value = _evaluated(check, out, sock, base)
    return evaluated and not value


def _evaluated(check: Check, out: Any, sock: dict[tuple[str, str], str], base: list[tuple[str, str]]) -> tuple[bool, Any]:
    """(whether ``check``'s expression evaluated without raising, its value)."""
    try:
        return True, eval(check.expr, {"out": out, "sock": sock, "base": base})  # noqa: S307 - our own text
    except Exception:
        return False, None


def outputs_of(check: Check, c: int, outs: Sequence[Any]) -> Any:
    """What ``out`` is for ``check`` of call ``c`` in a step whose parsed outputs are ``outs``."""
    return [outs[i] for i in check.calls] if check.calls else outs[c]


def expected_token(text: str) -> str | None:
    """The marker a command the machine typed prints (``stateful.checks``), from the command itself."""
    uids = _UID.findall(text)
    if not uids:
        return None
    uid = uids[-1]
    if f"MK_$((6*7))_{uid}" in text:
        return f"MK_42_{uid}"
    if f"'RP_'+str(6*7)+'_{uid}'" in text:
        return f"RP_42_{uid}"
    try:
        if text.startswith(checks.SHELL_PAYLOAD_PREFIX):
            _, payload = checks.shell_payload(uid, shlex.split(text)[3])
            return payload
        suffix = f".encode()).hexdigest()+'_{uid}')"
        if text.startswith(checks.PYTHON_PAYLOAD_PREFIX) and text.endswith(suffix):
            literal = ast.literal_eval(text[len(checks.PYTHON_PAYLOAD_PREFIX):-len(suffix)])
            return checks.python_payload(uid, literal)[1]
    except (ValueError, IndexError, SyntaxError):
        return None
    return None


def _args(call: Call) -> Any:
    try:
        return json.loads(call.arguments)
    except ValueError:
        return None


def _accepts(model: SessionModel, call: Call, value: Any) -> bool:
    try:
        judge(model, call, json.dumps(value))
    except ContractViolation:
        return False
    return True


def expectation(model: SessionModel, call: Call, clause: str) -> list[Check]:
    """What the contract fixes about ``call``'s output in ``model`` (before it); [] if nothing
    this writer can state (a read's screen, a list while an exit is pending)."""
    args = _args(call)
    pair = addressed_pair(call)
    if call.tool == LIST:
        return _list_expectation(model, clause)
    t, s = pair if pair is not None else ("", "")
    candidates: list[Any] = [ERR_NOT_OBJECT, ERR_MALFORMED, ERR_TERMINAL, ERR_SESSION, ERR_TEXT, ERR_KEYS,
                             ERR_SCROLLBACK, SENT]
    if pair is not None:
        candidates += [err_not_found(t, s), err_gone(t, s), *err_unknown_terminal(t, DECLARED),
                       {"terminal": t, "session": s, "status": "closed"},
                       {"terminal": t, "session": s, "status": "not_found"}]
        known = model.pair(t, s)
        for status in ("launched", "already_running"):
            socket = known.socket if known is not None and status == "already_running" else _NEW_SOCKET
            candidates.append({"terminal": t, "session": s, "tmux_socket": socket, "has_os_env": True, "status": status})
    accepted = [c for c in candidates if _accepts(model, call, c)]
    launches = [c for c in accepted if isinstance(c, dict) and "tmux_socket" in c]
    plain = [c for c in accepted if c not in launches]
    key = repr((t, s))
    if launches and not plain and len(launches) == 1:
        status = launches[0]["status"]
        if status == "launched":
            return [Check(_launched_expr("out", t, s), clause, then=f"sock[{key}] = out['tmux_socket']")]
        return [Check(_running_expr("out", t, s), clause)]
    if len(launches) == 2 and not plain and known is not None:
        # an exit pending: a new process (launched) or the old one's socket (already_running), never
        # already_running with another socket (omnigent 0.19.1's finding 9)
        return [Check(f"{_running_expr('out', t, s)} or ({_launched_expr('out', t, s)})", clause,
                      then=f"sock[{key}] = out['tmux_socket']")]
    if launches:
        return []  # a launch output or an error: this writer states no such choice
    if len(plain) == 1:
        return [Check(f"out == {plain[0]!r}", clause)]
    if plain and (call.tool != READ or (pair is not None and model.pair(t, s) is None)):
        # (a read of a pair this session never launched shows no screen: one of its errors it is)
        return [Check(f"out in {plain!r}", clause)]
    if call.tool == READ and pair is not None and isinstance(args, dict) and not plain:
        known = model.pair(t, s)
        if known is not None and known.life is Life.ALIVE and t in DECLARED:
            return [Check(f"isinstance(out, dict) and out.get('terminal') == {t + ':' + s!r} "
                          "and isinstance(out.get('screen'), str)", clause)]
    return []


def _list_expectation(model: SessionModel, clause: str) -> list[Check]:
    if any(p.life is not Life.ALIVE for p in model.pairs):
        return []  # an exited pair may be listed running, not running, or not at all
    pairs = sorted(model.pairs, key=lambda p: min(p.order))
    if len({min(p.order) for p in pairs}) != len(pairs) or any(len(p.order) > 1 for p in pairs):
        return []  # concurrent launches: their order is the server's
    rows = ", ".join(f"({p.terminal!r}, {p.session!r}, True, sock[{p.key!r}])" for p in pairs)
    return [Check("isinstance(out, list) and all(isinstance(e, dict) for e in out) and "
                  "[(e.get('terminal'), e.get('session')) for e in out[:len(base)]] == base and "
                  f"[(e.get('terminal'), e.get('session'), e.get('running'), e.get('tmux_socket')) for e in out[len(base):]] "
                  f"== [{rows}]", clause)]


def _running_expr(o: str, terminal: str, session: str) -> str:
    """``o`` (a name) is a launch output that says ``already_running`` with the socket remembered."""
    return (f"{o} == dict(terminal={terminal!r}, session={session!r}, tmux_socket=sock[{(terminal, session)!r}], "
            "has_os_env=True, status='already_running')")


def _launched_expr(o: str, terminal: str, session: str) -> str:
    """``o`` (a name) is a launch output that says ``launched``, with a socket."""
    return (f"isinstance({o}, dict) and {o} == dict(terminal={terminal!r}, session={session!r}, "
            f"tmux_socket={o}.get('tmux_socket'), has_os_env=True, status='launched') "
            f"and isinstance({o}['tmux_socket'], str) and {o}['tmux_socket']")


def step_checks(model: SessionModel, calls: Sequence[Call], clauses: Sequence[str]) -> dict[int, list[Check]]:
    """What the contract fixes about the outputs of one step (one model reply, whose calls run
    concurrently) **whatever order the server ran them in**: call -> its checks, from ``model``
    (the state before the step). ``clauses``: each call's clause (the one its judgement named).

    Calls on distinct pairs commute, so each such call is checked on its own, as if it ran first.
    Concurrent launches of one pair (``launch`` with ``copies``) are checked together
    (:func:`_concurrent_launches`): which of them says ``launched`` is the server's choice. Nothing is
    asserted about a list that runs with other calls (it may see them before or after), about the
    calls of a step holding such a list, nor about other calls of one pair in one step."""
    found: dict[int, list[Check]] = {}
    if len(calls) == 1:
        found[0] = expectation(model, calls[0], clauses[0])
        return found
    if any(c.tool == LIST for c in calls):
        return found
    pairs = [addressed_pair(c) for c in calls]
    for c, call in enumerate(calls):
        group = [i for i, p in enumerate(pairs) if p is not None and p == pairs[c]] or [c]
        if group[0] != c:
            continue  # checked with the first of its pair
        if len(group) == 1:
            found[c] = expectation(model, call, clauses[c])
        else:
            found.update(_concurrent_launches(model, calls, group, [clauses[i] for i in group]))
    return found


def _concurrent_launches(model: SessionModel, calls: Sequence[Call], group: list[int],
                         clauses: Sequence[str]) -> dict[int, list[Check]]:
    """The checks of the same launch issued several times at once (CONTRACT §1: one process starts;
    exactly one says ``launched``, the others ``already_running`` with its socket; which one is the
    server's choice). A launch that would not start a process (the pair runs, or an error) leaves
    the state as it was, so each copy gets the answer it would get alone. Other calls of one pair in
    one step get no check."""
    if any(calls[i].tool != LAUNCH or calls[i].arguments != calls[group[0]].arguments for i in group):
        return {}
    alone = expectation(model, calls[group[0]], clauses[0])
    if not (len(alone) == 1 and alone[0].then):  # no "launched" expected: every copy answers alike
        return {i: alone for i in group}
    t, s = addressed_pair(calls[group[0]]) or ("", "")
    key = repr((t, s))
    launched = _launched_expr("o", t, s)
    fresh = {"terminal": t, "session": s, "tmux_socket": _NEW_SOCKET, "has_os_env": True, "status": "launched"}
    clause = judge(model, calls[group[0]], json.dumps(fresh)).clause  # launch.one-launched, or .relaunch
    together = tuple(group)
    return {group[0]: [
        Check(f"any({launched} for o in out)", clause, calls=together,
              then=f"sock[{key}] = next(o for o in out if {launched})['tmux_socket']"),
        Check(f"sum(o == dict(terminal={t!r}, session={s!r}, tmux_socket=sock[{key}], has_os_env=True, "
              f"status='already_running') for o in out) == {len(group) - 1}", "launch.already-running", calls=together),
    ]}


@dataclass
class _Agent:
    index: int
    model: SessionModel | None = None
    sock: dict[tuple[str, str], str] = field(default_factory=dict)
    base: list[tuple[str, str]] = field(default_factory=list)
    typed: dict[tuple[str, str], str] = field(default_factory=dict)
    """Pair -> the text its last sends typed (for the marker it prints)."""
    before: SessionModel | None = None
    """The model before the last turn."""
    captured: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Instance -> its pair, for the live pairs whose processes the repro noted (``capture``)."""


def _parsed(output: str) -> Any:
    try:
        return json.loads(output)
    except ValueError:
        return output


def _same_turn(a: Op, b: Op) -> bool:
    return a.kind == b.kind == "turn" and a.session_id == b.session_id and a.steps == b.steps


def plan(ops: Sequence[Op], clause: str) -> Plan:
    """The repro's blocks for the recorded ``ops`` of a program that broke ``clause``."""
    ops = list(ops)
    while ops and ops[-1].kind == "delete" and (clause != "session.delete" or ops[-1].step[1] == "state.teardown()"):
        ops.pop()  # the machine's cleanup after the failure (it deletes every session)
    agents: dict[str, _Agent] = {}
    blocks: list[Block] = []
    terminals: dict[str, Any] = {}
    final: Block | None = None
    i = 0
    while i < len(ops) and final is None:
        op = ops[i]
        if op.kind == "open":
            agents[op.session_id] = _Agent(len(agents))
            terminals = dict(op.terminals or {})
            blocks.append(Block("open", agents[op.session_id].index, op.step))
            i += 1
            continue
        agent = agents.get(op.session_id)
        if agent is None:
            raise NoPlainForm(f"an operation on session {op.session_id} that was never opened")
        last = i == len(ops) - 1
        if op.kind == "view":  # the machine looks only while every pair is certain: checked each time
            assert agent.model is not None
            block = Block("view", agent.index, op.step, final=last and clause == "view.terminals",
                          expected=[p.key for p in agent.model.alive()])
            blocks.append(block)
            final = block if block.final else None
            i += 1
            continue
        if op.kind == "events":
            if last and clause == "items.pagination":
                final = Block("pagination", agent.index, op.step, final=True)
                blocks.append(final)
            elif last and clause in EVENT_CLAUSES:
                final = _events_final(agent, op, clause)
                blocks.append(final)
            i += 1
            continue
        if op.kind == "delete":
            block = Block("delete", agent.index, op.step, final=last and clause == "session.delete")
            if block.final:
                assert agent.model is not None
                block.expected = [p.key for p in agent.model.alive() if p.instance in agent.captured]
                if not block.expected:
                    raise NoPlainForm("the deleted session had no live terminal whose processes were noted")
                final = block
            blocks.append(block)
            i += 1
            continue
        # a turn, possibly repeated (the machine polling for an "eventually")
        j, run = i, [op]
        for m in range(i + 1, len(ops)):  # the checks' looks at the events between repeats do not part them
            if ops[m].kind == "events" and ops[m].session_id == op.session_id:
                continue
            if not (_same_turn(ops[m], op) and ops[m].outputs is not None):
                break
            j = m
            run.append(ops[m])
        if op.outputs is None:  # the turn broke the contract before its outputs were read
            if clause != "items.pagination":
                raise NoPlainForm(f"turn of step {op.step[0]} failed ({clause}) before its outputs were read")
            blocks.append(Block("turn", agent.index, op.step, steps=op.steps, first_list=agent.model is None))
            final = Block("pagination", agent.index, op.step, final=True)
            blocks.append(final)
            break
        block, broke = _turn(agent, run, clause, is_last=j == len(ops) - 1)
        blocks.append(block)
        if broke:
            final = block
        else:  # the checks after a turn that need more than its outputs
            after = _after_turn(agent, block, run[-1], clause,
                                last=_is_last(ops[j + 1:], run[-1], clause))
            blocks += after
            final = block if block.final else next((b for b in after if b.final), None)
        i = j + 1
    if final is None and clause in MARKER_CLAUSES:
        final = _marker_final(blocks, agents, clause)
    if final is None:
        raise NoPlainForm(f"the recorded turns show no step that breaks {clause} in a way a plain test can assert "
                          "(the machine found it by a check with no plain form yet)")
    return Plan(clause, terminals, blocks[: blocks.index(final) + 1], len(agents))


def _is_last(after: Sequence[Op], turn: Op, clause: str) -> bool:
    """Whether ``turn`` is the program's last: only looks at the events follow it, or, for the rows
    clause, the one read the rows check made right after it to tell the failure's cause
    (``after_turn.scrollback_cause``: the same read of the same pair with a scrollback of 1000, in the
    same step), which is no step of the program."""
    rest = [o for o in after if o.kind != "events"]
    if not rest:
        return True
    if clause != "read.rows-exact" or len(rest) != 1 or rest[0].kind != "turn" or rest[0].step != turn.step:
        return False
    calls = [c for step in rest[0].steps for c in step]
    if len(calls) != 1 or calls[0].tool != READ or (_args(calls[0]) or {}).get("scrollback") != causes.BIG_SCROLLBACK:
        return False
    big = [c for step in turn.steps for c in step if c.tool == READ and addressed_pair(c) == addressed_pair(calls[0])
           and isinstance(s := (_args(c) or {}).get("scrollback"), int) and s > causes.BIG_SCROLLBACK]
    return bool(big)


def _turn(agent: _Agent, run: list[Op], clause: str, *, is_last: bool) -> tuple[Block, bool]:
    """The block of a turn (``run``: the turn and its identical repeats); whether it broke ``clause``."""
    op = run[-1]
    outputs = op.outputs or []
    block = Block("poll" if len(run) > 1 else "turn", agent.index, run[0].step, steps=op.steps, repeats=len(run))
    agent.before = agent.model
    if agent.model is None:  # the session's first list: the baseline
        block.first_list = True
        try:
            agent.model = initial_model(DECLARED, outputs[0][0])
        except ContractViolation as exc:
            block.checks[(0, 0)] = [Check("isinstance(out, list)", exc.clause)]
            block.final = True
            return block, True
        agent.base = list(agent.model.baseline)
        return block, False
    for s, (calls, outs) in enumerate(zip(op.steps, outputs)):
        model = agent.model
        for call in calls:
            if call.tool == SEND and (_args(call) or {}).get("text") == "exit" and (pair := addressed_pair(call)):
                known = model.pair(*pair)
                if known is not None and known.life is Life.ALIVE:
                    model = model._with_pair(replace(known, life=Life.EXITING))
        try:
            judged = judge_step(model, calls, outs)
        except ContractViolation as exc:
            broken = clause if (exc.clause in NOT_FOUND_CLAUSES and clause in SCOPE_CLAUSES) else exc.clause
            if broken != clause:
                raise NoPlainForm(f"offline, the recorded outputs break {exc.clause}, not {clause}") from None
            _final_checks(block, agent, model, s, calls, outs, clause)
            block.final = True
            return block, True
        values = [_parsed(o) for o in outs]
        for c, candidates in step_checks(model, calls, [j.clause or clause for j in judged]).items():
            found = []
            for k in candidates:  # in order: a launch's check remembers the socket the next ones use
                out = outputs_of(k, c, values)
                if holds(k, out, agent.sock, agent.base):
                    found.append(k)
                    if k.then:
                        exec(k.then, {"out": out, "sock": agent.sock})  # noqa: S102 - our own text
            if calls[c].tool == READ and block.kind == "poll":
                found += _token_checks(agent, calls[c], outs[c])
            if calls[c].tool == LIST and block.kind == "poll" and (settled := _settled_list(model, values[c])):
                found.append(settled)
            block.checks[(s, c)] = found
        for call in calls:
            if call.tool == SEND and (pair := addressed_pair(call)):
                text = (_args(call) or {}).get("text")
                agent.typed[pair] = agent.typed.get(pair, "") + (text if isinstance(text, str) else "")
                if (_args(call) or {}).get("keys", "Enter") != "":
                    agent.typed[pair] = agent.typed[pair].rstrip("\n") + "\n"
        agent.model = judged[0].model if judged else model
    return block, False


def _settled_list(model: SessionModel, out: Any) -> Check | None:
    """What a list the machine polled showed when it stopped polling: its rows (pair and running),
    which the repro waits for too. Without it, a list polled until an exited pair was removed has no
    check that holds only at the end (the model allows the pair shown or gone while it exits), and
    the repro would go on at once: under load, before the removal its next steps count on."""
    if not isinstance(out, list) or not all(isinstance(e, dict) for e in out):
        return None
    rows = [(e.get("terminal"), e.get("session"), e.get("running")) for e in out]
    exiting = any(p.life is Life.EXITING for p in model.pairs)
    return Check(f"[(e.get('terminal'), e.get('session'), e.get('running')) for e in out] == {rows!r}",
                 "list.exit-removed" if exiting else "list.registered")


def _after_turn(agent: _Agent, block: Block, op: Op, clause: str, *, last: bool) -> list[Block]:
    """The blocks after a turn's for the ground-truth clauses: the processes of the pairs that now
    live noted (their server must answer: ``launch.server-runs``), and after the last turn the
    broken clause's check: the processes of the pairs it closed gone at once (``close.nothing-left``),
    or its reads' rows exact (``read.rows-exact``: the turn itself becomes a "rows" block)."""
    model, before = agent.model, agent.before
    if model is None or before is None:
        return []
    found: list[Block] = []
    if clause in PROBE_CLAUSES:
        new = [p for p in model.alive() if p.instance not in agent.captured]
        if new:
            found.append(Block("capture", agent.index, block.step, expected=[p.key for p in new],
                               final=last and clause == "launch.server-runs"))
            agent.captured.update((p.instance, p.key) for p in new)
    if last and clause == "close.nothing-left":
        alive_before = {p.instance for p in before.alive()}
        closed = [agent.captured[n] for n in sorted(model.ended - before.ended) if n in agent.captured and n in alive_before]
        if not closed:
            raise NoPlainForm("the last turn closed no live terminal whose processes were noted")
        found.append(Block("gone", agent.index, block.step, expected=closed, final=True))
    if last and clause == "read.rows-exact":
        _rows_checks(agent, block, op, before)
    return found


def _rows_checks(agent: _Agent, block: Block, op: Op, before: SessionModel) -> None:
    """Make the last turn a "rows" block: each read it made of a pair that was alive before it and
    that the turn typed nothing into is held to exactly min(N, H) + 24 rows, H read from tmux before
    and after the turn (the same both times: the pane held still)."""
    typed_into = {addressed_pair(c) for step in block.steps for c in step if c.tool == SEND}
    alive = {p.key for p in before.alive()}
    outputs = op.outputs or []
    for s, calls in enumerate(block.steps):
        for c, call in enumerate(calls):
            pair = addressed_pair(call)
            value = _parsed(outputs[s][c]) if s < len(outputs) and c < len(outputs[s]) else None
            if (call.tool != READ or pair is None or pair not in alive or pair in typed_into
                    or not isinstance(value, dict) or not isinstance(value.get("screen"), str)):
                continue
            rows = Check(f"out['screen'].count('\\n') == min(out['scrollback_lines'], held[{pair!r}]) + {PANE_ROWS}",
                         "read.rows-exact")
            block.checks[(s, c)] = [*block.checks.get((s, c), []), rows]
            if pair not in block.held:
                block.held.append(pair)
    if not block.held:
        raise NoPlainForm("the last turn made no read of an idle live pair")
    block.kind, block.final = "rows", True


def _events_final(agent: _Agent, op: Op, clause: str) -> Block:
    """The resource events of the session against every launch and close of the model (which must
    know every pair's fate: no exit pending), proved to break ``clause`` on the events recorded."""
    model = agent.model
    if model is None or model.maybe_ended():
        raise NoPlainForm(f"{clause}: an exit was pending, so which events must exist is not fixed")
    launched = [(i.terminal, i.session) for i in model.instances]
    ended = [(model.instances[n].terminal, model.instances[n].session) for n in sorted(model.ended)]
    problem = plain_checks.events_problem(list(op.data or []), launched, ended, agent.base)
    if problem is None or problem.split(":")[0] != clause:
        raise NoPlainForm(f"the recorded resource events do not break {clause} for a plain check: {problem}"[:400])
    return Block("events", agent.index, op.step, final=True, launched=launched, ended=ended)


def _token_checks(agent: _Agent, call: Call, output: str) -> list[Check]:
    """A polled read: the markers it finally showed that this repro typed into the pair."""
    pair = addressed_pair(call)
    value = _parsed(output)
    if pair is None or not isinstance(value, dict) or not isinstance(value.get("screen"), str):
        return []
    typed = agent.typed.get(pair, "")
    tokens = sorted({t for t, uid in checks.tokens_in(value["screen"]) if uid in typed})
    return [Check(f"{t!r} in out['screen']", "read.output-shows") for t in tokens]


def _final_checks(block: Block, agent: _Agent, model: SessionModel, s: int, calls: Sequence[Call],
                  outs: Sequence[str], clause: str) -> None:
    """The assertion of the broken clause on the step that broke it: the first of the step's checks
    (:func:`step_checks`: what holds whatever order a correct server ran the calls in) that is false
    on the recorded outputs, after those it needs (a launch's that remembers the socket)."""
    values = [_parsed(o) for o in outs]
    sock = dict(agent.sock)
    for c, candidates in step_checks(model, calls, [clause] * len(calls)).items():
        kept: list[Check] = []
        for k in candidates:
            out = outputs_of(k, c, values)
            if fails(k, out, sock, agent.base):
                block.checks[(s, c)] = [*kept, replace(k, clause=clause)]
                return
            if not holds(k, out, sock, agent.base):
                break  # it raises on what was recorded: no assertion to state
            kept.append(k)
            if k.then:
                exec(k.then, {"out": out, "sock": sock})  # noqa: S102 - our own text
    raise NoPlainForm(f"no assertion this writer can state fails on the recorded outputs for {clause}")


def _marker_final(blocks: list[Block], agents: dict[str, _Agent], clause: str) -> Block | None:
    """A marker that never showed (or showed wrong): poll the pair's reads until the marker the
    command prints shows, as the machine did."""
    for block in reversed(blocks):
        if block.kind not in ("turn", "poll"):
            continue
        reads = [(s, c, call) for s, step in enumerate(block.steps) for c, call in enumerate(step) if call.tool == READ]
        if not reads:
            return None
        s, c, call = reads[-1]
        agent = next(a for a in agents.values() if a.index == block.agent)
        pair = addressed_pair(call)
        token = expected_token(agent.typed.get(pair, "").rstrip("\n").split("\n")[-1]) if pair else None
        if token is None:
            token = expected_token(agent.typed.get(pair, "")) if pair else None
        if token is None:
            return None
        final = Block("poll", block.agent, block.step, steps=[[call]], final=True, repeats=max(block.repeats, 1),
                      checks={(0, 0): [Check(f"{token!r} in out['screen']", clause)]})
        if block.kind == "poll":
            blocks[blocks.index(block)] = final
        else:
            blocks.append(final)
        return final
    return None

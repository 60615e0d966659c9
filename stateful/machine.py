"""The state machine: rules that drive a target to the contract's edges, checks right after each step.

Layers (as in Schemathesis's stateful runner, generation is apart from execution and checks):

* generation: :mod:`stateful.strategies` draws every rule argument up front (never from answers);
* execution: a :class:`~stateful.targets.base.Target` runs a turn of steps and returns raw outputs;
* checks: :func:`stateful.model.judge_step` (exact outputs, list, tolerance where the contract says
  "may"), then screens (markers), resource events, the ``/resources/terminals`` view and the probe
  (tmux and /proc ground truth), each right after the turn that could break it.

What the model cannot know (what the program in a pane is doing) is tracked here per launched
instance (:class:`Shell`): shell or Python REPL, whether ``set +H`` ran, whether the program is known
to sit at its prompt. Eventual properties are polled with a generous deadline; nothing is typed into a
REPL before its prompt shows; a line over 4 KiB is only typed while the program is known to read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from stateful import checks, meter
from stateful import strategies as gen
from stateful.clauses import fail
from stateful.model import (
    Call,
    ContractViolation,
    Judgement,
    Ledger,
    Life,
    PANE_ROWS,
    PairState,
    Reconciled,
    addressed_pair,
    SessionModel,
    UnsupportedServer,
    describe,
    initial_model,
    judge_step,
    pair_name,
    reconcile_events,
    resource_id_fits,
)
from stateful.targets.base import AgentSession, StepTimeout, Target, TargetError
from stateful.targets.probe import Probe, ProcRef

__all__ = ["MachineConfig", "PairRef", "TerminalMachine", "DECLARED"]

T = TypeVar("T")

DECLARED = ("bash", "sh")
"""The terminals every target declares (both run bash; ``sh`` without rc files)."""
LAUNCH, SEND, READ, LIST, CLOSE = (f"sys_terminal_{t}" for t in ("launch", "send", "read", "list", "close"))
LONG_LINE = 3500
"""Bytes above which a line is only typed while the program is known to be reading (kernel: 4095)."""
PICK = st.integers(0, 7)
"""One of the pairs a rule applies to, as an index modulo their number (see ``_eligible``)."""
AGENT = st.integers(0, 2)
"""An agent session, as an index modulo the number open."""
NOT_FOUND_CLAUSES = frozenset({"launch.one-launched", "send.not-found", "read.not-found", "close.not-found"})
"""Clauses a call on a pair that is not registered breaks when the server finds some other pair."""
EXIT_REMOVAL = 2.0
"""§1 list: a pair whose process exited is removed by the server within 2 s."""
EXIT_MARGIN = 1.0
"""Added to EXIT_REMOVAL: the time this side takes to notice the exit and to list again."""
HISTORY_ROWS = 8000
"""Rows of output per instance under which every old marker must still be found in the history
(the terminals' history limit is the contract's default, 10000)."""


@dataclass(frozen=True)
class MachineConfig:
    step_timeout: float = 60.0
    """Longest time one step (one model reply's calls) may take before it is reported as a hang."""
    poll_deadline: float = 15.0
    """Longest wait for an eventual property (output shows, an exited pair is removed, ...)."""
    big_scrollback: int = 9000
    max_agents: int = 3
    probe: bool = True


@dataclass(frozen=True)
class PairRef(gen.OneLine):
    """A pair name in one agent session (a Bundle value; the pair may since be closed or gone)."""

    agent: int
    terminal: str
    session: str

    def __repr__(self) -> str:
        return f"PairRef({self.agent}, {self.terminal!r}, {self.session!r})"

    def __str__(self) -> str:
        """How messages print a pair: ``bash:'main' of agent 0``."""
        return f"{pair_name(self.terminal, self.session)} of agent {self.agent}"


@dataclass(frozen=True)
class Typed:
    """A command the machine typed, for failure messages: the text, how the sends split it, and
    the marker id it ends in (None for a plain command such as ``exit``)."""

    text: str
    chunks: tuple[str, ...]
    uid: str | None = None


@dataclass
class Shell:
    """What the machine knows about the program in one launched instance's pane."""

    mode: str = "shell"
    """"shell" or "python" (a REPL started in the shell)."""
    configured: bool = False
    """``set +H`` ran (the shell's history expansion would otherwise rewrite ``!`` in payloads)."""
    ready: bool = False
    """The program was seen at its prompt, and nothing was typed since."""
    markers: list[tuple[str, int]] = field(default_factory=list)
    """(token, row estimate when it was printed) of every marker seen in this pane."""
    rows: int = 0
    """Estimate of the rows printed so far (for what the history must still hold)."""
    processes: tuple[ProcRef, ...] = ()
    socket: str = ""
    exited: bool = False


@dataclass
class Agent:
    index: int
    session: AgentSession
    model: SessionModel
    ledger: Ledger = field(default_factory=Ledger)
    shells: dict[int, Shell] = field(default_factory=dict)


def _call(tool: str, args: dict[str, Any], deco: gen.Decoration = gen.Decoration()) -> Call:
    return Call(tool, gen.encode(args, deco))


def _pair_args(ref: PairRef, **more: Any) -> dict[str, Any]:
    return {"terminal": ref.terminal, "session": ref.session, **more}


def _exercised(*clauses: str) -> None:
    """Record that a check of these clauses ran and held (``--hypothesis-show-statistics`` lists
    them as ``clause: <id>``: which clauses a run exercised)."""
    for clause in clauses:
        if clause:
            event(f"clause: {clause}")


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"...<{len(text)} chars>"


def _bucket(n: int) -> str:
    return str(n) if n < 2 else "2-5" if n <= 5 else ">5"


class Transcript:
    """What a failing program's report shows of each turn (Hypothesis notes, printed for the final
    replay only): the calls and their outputs. While the machine polls, a turn that repeats the
    previous one exactly (the same calls, the same outputs) is counted instead of printed, and the
    count becomes one line ("... the same turn x 35 more, no change")."""

    def __init__(self) -> None:
        self.folding = False
        self._last: tuple[Any, ...] | None = None
        self._repeats = 0

    def add(self, number: int, agent: int, steps: Sequence[Sequence[Call]],
            outputs: Sequence[Sequence[str]] | None) -> None:
        calls = " | ".join(" & ".join(map(repr, step)) for step in steps)
        key = (agent, calls, None if outputs is None else tuple(map(tuple, outputs)))
        if self.folding and key == self._last:
            self._repeats += 1
            return
        self.flush()
        self._last = key
        note(f"turn {number} (agent {agent}): {calls}")
        for step, outs in zip(steps, outputs or ()):
            for call, out in zip(step, outs):
                note(f"  {call!r} -> {out[:300]}{'...' if len(out) > 300 else ''}")

    def flush(self) -> None:
        if self._repeats:
            note(f"  ... the same turn x {self._repeats} more, no change")
        self._repeats = 0


class TerminalMachine(RuleBasedStateMachine):
    """Drives one target; subclasses bind it (see :meth:`bind`)."""

    target: ClassVar[Target | None] = None
    config: ClassVar[MachineConfig] = MachineConfig()

    pairs = Bundle("pairs")

    @classmethod
    def bind(cls, target: Target, config: MachineConfig) -> None:
        missing = set(DECLARED) - set(target.declared)
        if missing:
            raise ValueError(f"target {target.name} does not declare {sorted(missing)}")
        cls.target = target
        cls.config = config

    def __init__(self) -> None:
        super().__init__()
        assert self.target is not None, "bind() the machine to a target first"
        self.cfg = self.config
        self.probe = Probe()
        self.probing: bool | None = None if self.cfg.probe else False
        self.live: list[Agent] = []
        self.turns = 0
        self.busy = False
        """A rule is running: teardown after a failure only cleans up (it must not mask the failure)."""
        self.rules_run = 0
        self.owners: dict[str, tuple[int, str, str]] = {}
        """Marker uid -> the (agent, terminal, session) it was typed into."""
        self._transcript = Transcript()

    # -- running turns and checking them -----------------------------------------------------------

    def _turn(self, agent: Agent, steps: Sequence[Sequence[Call]]) -> list[list[Judgement]]:
        """Run one turn, then check every step in order, then events, views and ground truth."""
        self.turns += 1
        self.busy = True
        n = self.turns
        before_ended = agent.model.ended
        history = self._history_before(agent, steps)
        try:
            outputs = agent.session.run_turn(steps, step_timeout=self.cfg.step_timeout)
        except StepTimeout as hang:
            self._transcript.add(n, agent.index, steps, None)
            hang.panes = self._panes(agent)
            raise
        self._transcript.add(n, agent.index, steps, outputs)
        judged: list[list[Judgement]] = []
        for i, (calls, outs) in enumerate(zip(steps, outputs)):
            try:
                js = judge_step(agent.model, calls, outs)
            except ContractViolation as exc:
                failure: ContractViolation | None = exc
            else:
                failure = None
            if failure is not None:  # raised out here: a violation never carries another as its context
                where = f"  where: turn {n}, step {i} of agent {agent.index} on {self.target.where}"
                scope = self._scope_problem(agent, calls, outs) if failure.clause in NOT_FOUND_CLAUSES else None
                if scope is not None:
                    fail(scope[0], scope[1], *str(failure).split("\n"), where)
                failure.args = (f"{failure}\n{where}",)
                raise failure
            if js:
                agent.model = js[0].model
            for c, j in zip(calls, js):
                event(j.label)
                _exercised(j.clause)
                self._after_call(agent, c, j)
                self._check_rows(c, j, history)
            judged.append(js)
        self._check_sockets()
        self._check_events(agent)
        self._check_probe(agent, before_ended)
        if self.target.name == "sessions":
            _exercised("items.pagination", "items.calls")
        return judged

    def _history_before(self, agent: Agent, steps: Sequence[Sequence[Call]]) -> dict[tuple[str, str], tuple[str, int]]:
        """For every pair a read of the turn addresses whose program sits idle at its prompt (and
        that the turn types nothing into): its socket and how many lines of history its pane holds
        (probe). Nothing is printed there meanwhile, so the read's rows are exactly known: the check
        never depends on how fast output arrives."""
        typed_into = {addressed_pair(c) for step in steps for c in step if c.tool == SEND}
        found: dict[tuple[str, str], tuple[str, int]] = {}
        for call in (c for step in steps for c in step if c.tool == READ):
            key = addressed_pair(call)
            pair = agent.model.pair(*key) if key is not None else None
            shell = agent.shells.get(pair.instance) if pair is not None else None
            if (pair is None or pair.life is not Life.ALIVE or shell is None or not shell.ready
                    or key in typed_into or key in found or not self._probe_on(pair.socket)):
                continue
            size = self.probe.history_size(pair.socket)
            if size is not None:
                found[pair.key] = (pair.socket, size)
        return found

    def _check_rows(self, call: Call, j: Judgement, history: dict[tuple[str, str], tuple[str, int]]) -> None:
        """§1 read: a read holds exactly min(N, H) + 24 rows, H being the lines of history the pane
        holds (checked where H is known: see ``_history_before``; the probe reads it again after the
        turn, and a pane that changed after all is not judged)."""
        if call.tool != READ or not (isinstance(j.value, dict) and isinstance(j.value.get("screen"), str)):
            return
        key = addressed_pair(call)
        if key not in history:
            return
        socket, held = history[key]
        if self.probe.history_size(socket) != held:
            event("read: rows not judged (the pane changed)")
            return
        lines, rows = j.value["scrollback_lines"], j.value["screen"].count("\n")
        expected = min(lines, held) + PANE_ROWS
        if rows != expected:
            fail("read.rows-exact", f"{call!r} -> {rows} rows: the pane holds {held} lines of history (tmux), so a "
                                    f"read with scrollback {lines} holds min(N, H) + {PANE_ROWS} = {expected} rows")
        event("read: rows exact")
        _exercised("read.rows-exact")

    def _scope_problem(self, agent: Agent, calls: Sequence[Call], outputs: Sequence[str]) -> tuple[str, str] | None:
        """Why a call on a pair this session never launched found a terminal (it must not): another
        session's pair of that name (the session scope), or this session's pair of a near name
        (names matched like tmux targets). None if neither explains it."""
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
            for other in self.live:
                if other is not agent and other.model.pair(terminal, session) is not None:
                    return "scope.session", (f"{call!r} -> {_clip(output)}: agent {agent.index} never launched "
                                             f"{pair_name(terminal, session)}, but agent {other.index}'s pair of that name "
                                             "answered: a session never sees another session's terminals")
            for p in agent.model.alive():
                if p.terminal == terminal and checks.near_names(p.session, session):
                    return "scope.names-exact", (f"{call!r} -> {_clip(output)}: {pair_name(terminal, session)} was never "
                                                 f"launched, but the live {pair_name(p.terminal, p.session)} answered: "
                                                 "names are exact keys, never matched like tmux targets")
        return None

    def _eventually(self, probe: Callable[[], T | None], within: float | None = None) -> tuple[T | None, int]:
        """Call ``probe`` until it gives a value (not None) or ``within`` seconds (default: the poll
        deadline) pass; return the value (None on time-out) and how many more attempts the first
        one took. Turns run by the probe that show nothing new are folded into one line of the report."""
        deadline = time.monotonic() + (self.cfg.poll_deadline if within is None else within)
        polls = 0
        self._transcript.folding = True
        try:
            while True:
                began = time.monotonic()
                value = probe()
                if value is not None or time.monotonic() > deadline:
                    return value, polls
                polls += 1  # the interval runs from start to start: a slow probe is not followed by a sleep too
                meter.sleep(max(0.0, min(0.05 * polls, 0.5) - (time.monotonic() - began)), "eventually")
        finally:
            self._transcript.folding = False
            self._transcript.flush()

    def _after_call(self, agent: Agent, call: Call, j: Judgement) -> None:
        """Per-call bookkeeping and screen checks (markers never leak between pairs)."""
        for pair in agent.model.pairs:
            if pair.instance not in agent.shells:
                agent.shells[pair.instance] = Shell(socket=pair.socket)
        if call.tool == READ and isinstance(j.value, dict) and "screen" in j.value:
            args = json.loads(call.arguments)
            terminal, session = args["terminal"], args["session"]
            owner = (agent.index, terminal, session)
            for token, uid in checks.tokens_in(j.value["screen"]):
                other = self.owners.get(uid)
                if other is not None and other != owner:
                    fail("screen.isolation",
                         f"{call!r}: the screen of {pair_name(terminal, session)} (agent {agent.index}) shows {token}, "
                         f"which was typed into {pair_name(other[1], other[2])} of agent {other[0]}")

    def _check_sockets(self) -> None:
        seen: dict[str, str] = {}
        for agent in self.live:
            for p in agent.model.alive():
                name = f"{pair_name(p.terminal, p.session)} of agent {agent.index}"
                if p.socket in seen:
                    fail("launch.private-server", f"{name} and {seen[p.socket]} share tmux_socket {p.socket!r}: "
                                                  "each terminal has its own private server")
                seen[p.socket] = name

    def _check_events(self, agent: Agent) -> None:
        """§2.4: every launch and close (and exit) recorded its event. Polled for, where the target
        does not record them within the call; an exit's deleted event is always polled for."""
        last: list[Reconciled] = []

        def complete() -> Reconciled | None:
            last[:] = [reconcile_events(agent.model, agent.ledger, agent.session.events())]
            return None if last[0].missing else last[0]

        exited = {n for n, shell in agent.shells.items() if shell.exited}
        rec, polls = complete(), 0
        at_once = self.target.events_with_calls and not last[0].pending & exited
        if rec is None and not at_once:
            rec, polls = self._eventually(complete)
        if rec is None:
            when = "once the calls returned" if at_once else f"after {self.cfg.poll_deadline:.0f} s"
            fail("events.recorded", f"resource events missing {when} (agent {agent.index}): {list(last[0].missing)}",
                 f"  model: {describe(agent.model)}")
        agent.ledger = rec.ledger
        for label in rec.labels:
            event(label)
            _exercised("events.recorded", "events.ids", "events.unique-ids")
        if polls:
            event("events: arrived after polling")

    def _check_view(self, agent: Agent) -> None:
        """``/resources/terminals`` agrees with list's running pairs (only when all pairs are certain)."""
        if any(p.life is not Life.ALIVE for p in agent.model.pairs):
            return
        view = agent.session.terminals_view()
        if view is None:
            return
        ids = {}
        for number, rid in agent.ledger.created:
            inst = agent.model.instances[number]
            pair = agent.model.pair(inst.terminal, inst.session)
            if pair is not None and pair.instance == number:
                ids[(inst.terminal, inst.session)] = rid
        baseline = agent.model.baseline
        problem = checks.view_problem(view, [p.key for p in agent.model.alive()], ids, baseline,
                                      lambda rid: any(resource_id_fits(rid, t, s) for t, s in baseline))
        if problem:
            fail("view.terminals", f"agent {agent.index}: {problem}")
        event("view: agrees with list")
        _exercised("view.terminals")

    def _probe_on(self, socket: str) -> bool:
        if self.probing is None:
            self.probing = self.probe.applicable(socket)
            event("probe: " + ("on" if self.probing else "off (sockets are not on this machine)"))
        return bool(self.probing)

    def _check_probe(self, agent: Agent, before_ended: frozenset[int]) -> None:
        """Ground truth: a new live pair has a running server with a pane; a closed one left nothing."""
        for p in agent.model.alive():
            shell = agent.shells[p.instance]
            if not shell.processes and self._probe_on(p.socket):
                view = self.probe.view(p.socket)
                if not view.alive or not view.panes:
                    fail("launch.server-runs", f"launch said {pair_name(p.terminal, p.session)} runs at {p.socket}, "
                                               "but no tmux server with a pane answers there")
                shell.processes = view.members
        for number in sorted(agent.model.ended - before_ended):
            shell = agent.shells.get(number)
            if shell is None or shell.exited or not shell.processes or not self._probe_on(shell.socket):
                continue
            self._await_gone(agent, number, shell, at_once=True)  # a live pair that was closed

    def _await_gone(self, agent: Agent, number: int, shell: Shell, *, at_once: bool = False) -> None:
        """Ground truth after a close (``at_once``: §1 says that once close returns, the server and
        every process are gone, so nothing is waited for) or a DELETE (which the contract gives no
        such bound: polled until the poll deadline)."""
        inst = agent.model.instances[number]
        state: dict[str, Any] = {}

        def gone() -> bool | None:
            state["alive"] = self.probe.server_alive(shell.socket)
            state["left"] = self.probe.leftovers(shell.processes)
            return True if not state["alive"] and not state["left"] else None

        done, polls = (gone(), 0) if at_once else self._eventually(gone)
        if done is None:
            alive, left = state["alive"], state["left"]
            what = ("its tmux server at " + shell.socket + " still runs" if alive else "") + \
                (" and " if alive and left else "") + (f"processes {left} are left" if left else "")
            if at_once:
                fail("close.nothing-left", f"{pair_name(inst.terminal, inst.session)} (agent {agent.index}) was "
                                           f"closed, but once close returned {what}")
            fail("session.delete", f"{pair_name(inst.terminal, inst.session)} (agent {agent.index}): its session was "
                                   f"deleted, but {self.cfg.poll_deadline:.0f} s later {what}")
        event("probe: nothing left after close" + (" (after a wait)" if polls else ""))
        _exercised("close.nothing-left" if at_once else "session.delete")

    def _panes(self, agent: Agent) -> dict[str, str]:
        panes = {}
        for p in agent.model.pairs:
            if self._probe_on(p.socket):
                panes[f"{p.terminal}:{p.session}"] = self.probe.capture(p.socket)
        return panes

    # -- helpers --------------------------------------------------------------------------------

    def _agent(self, index: int) -> Agent:
        """Agent ``index`` modulo the agents open (rules draw an index before knowing how many)."""
        return self.live[index % len(self.live)]

    def _pair(self, ref: PairRef) -> tuple[Agent, PairState | None, Shell | None]:
        agent = self._agent(ref.agent)
        pair = agent.model.pair(ref.terminal, ref.session) if ref.terminal in agent.model.declared else None
        shell = agent.shells.get(pair.instance) if pair is not None else None
        return agent, pair, shell

    def _read(self, ref: PairRef, scrollback: int | None = None) -> Call:
        args = _pair_args(ref) if scrollback is None else _pair_args(ref, scrollback=scrollback)
        return _call(READ, args)

    def _list_step(self) -> list[Call]:
        return [_call(LIST, {})]

    def _poll_screen(self, agent: Agent, ref: PairRef, done: Callable[[str], bool], what: str,
                     first: Judgement | None = None, typed: Typed | None = None) -> str:
        """Read the pair (large scrollback) until ``done(screen)``; bounded by the poll deadline.

        On time-out the failure says what the screen shows about ``typed`` (the command whose effect
        was awaited): a text that did not arrive as written, a line never submitted, or output
        that never showed."""
        pending: list[Any] = [first.value] if first is not None else []  # a read made with the sends
        screens: list[str] = []  # the last screen seen

        def shown() -> str | None:
            value = pending.pop() if pending else \
                self._turn(agent, [[self._read(ref, self.cfg.big_scrollback)]])[0][0].value
            if not (isinstance(value, dict) and isinstance(value.get("screen"), str)):
                fail("read.output-shows", f"waiting for {what} in {ref}: the read failed: {value!r}")
            screens[:] = [value["screen"]]
            return value["screen"] if done(value["screen"]) else None

        screen, polls = self._eventually(shown)
        if screen is not None:
            event(f"read: {what.split(' ')[0]} shown after {_bucket(polls)} polls")
            _exercised("read.output-shows", "send.text-literal" if typed is not None and typed.uid else "")
            return screen
        tail = "\n".join(f"    | {row}" for row in screens[0].rstrip("\n").split("\n")[-30:])
        clause, cause = "read.output-shows", "it never showed"
        if typed is not None:
            clause, cause = checks.diagnose_typed(screens[0], typed.text, typed.chunks, typed.uid)
        fail(clause, f"{what} not shown in {ref} within {self.cfg.poll_deadline:.0f} s ({polls + 1} reads): {cause}",
             "  last screen (tail):", tail)

    def _type(self, agent: Agent, ref: PairRef, sends: Sequence[dict[str, Any]], deco: gen.Decoration,
              *, read_after: bool = True) -> Judgement | None:
        """Type (several sends in one turn, one per step), then optionally read in the same turn."""
        steps = [[_call(SEND, _pair_args(ref, **s), deco)] for s in sends]
        if read_after:
            steps.append([self._read(ref, self.cfg.big_scrollback)])
        judged = self._turn(agent, steps)
        for js in judged[: len(sends)]:
            if js[0].value != {"status": "sent"}:
                return None
        return judged[-1][0] if read_after else None

    def _run_command(self, agent: Agent, ref: PairRef, shell: Shell, cmd: str, token: str,
                     plan: gen.SendPlan, deco: gen.Decoration, what: str) -> None:
        """Type ``cmd`` per ``plan``; the output ``token`` must show, followed by a prompt."""
        sends = gen.split_command(cmd, plan)
        event(f"type: {len(sends)} sends, finish {plan.finish}")
        shell.ready = False
        first = self._type(agent, ref, sends, deco)
        if first is None:
            fail("send.sent", f"typing into the live {ref} failed (see the outputs above)")
        uid = token.rsplit("_", 1)[1]
        self.owners[uid] = (agent.index, ref.terminal, ref.session)
        typed = Typed(cmd, tuple(str(s.get("text") or "") for s in sends), uid)

        plain = cmd.isascii() and cmd.isprintable()

        def done(screen: str) -> bool:
            for other, other_uid in checks.tokens_in(screen):
                if other_uid == uid and other != token:
                    # The program answered, with another digest: the text did not arrive as written.
                    echo = checks.typed_echo(screen, cmd, uid)
                    difference = checks.text_difference(cmd, echo[0], typed.chunks) if echo else None
                    fail("send.text-literal",
                         f"{ref}: the program computed {other} for the text typed, expected {token}: the text did "
                         f"not arrive as written" + (f": {difference}" if difference else "")
                         + f" ({len(cmd)} characters typed in {len(sends)} sends)")
            if checks.has_token(screen, token):
                return checks.prompt_follows(screen, token)
            if plain:
                # A one-line printable ASCII command is echoed exactly as typed (by the terminal or
                # the line editor), and its output comes before anything else. So an echo that
                # lost or changed characters, with the program gone on past it, is final: the
                # output will never come (no need to wait out the deadline).
                echo = checks.typed_echo(screen, cmd, uid, by_uid_only=True)  # this command's echo, no other
                if echo is not None and echo[1] and not cmd.startswith(echo[0]):
                    difference = checks.text_difference(cmd, echo[0], typed.chunks)
                    fail("send.text-literal", f"{what} output {token} will not show in {ref}: the text did not arrive "
                                              f"as written: {difference}; the program went on without it",
                         "  screen (tail):", *(f"    | {row}" for row in screen.rstrip("\n").split("\n")[-8:]))
            return False

        self._poll_screen(agent, ref, done, f"{what} output {token}", first, typed)
        shell.rows += 2 * (len(cmd) // 70 + 2) + cmd.count("\n") * 2
        shell.markers.append((token, shell.rows))
        shell.ready = True
        if shell.mode == "shell":
            shell.configured = shell.configured or cmd.startswith("set +H")

    def _sync(self, agent: Agent, ref: PairRef, shell: Shell) -> None:
        """A plain marker: the program is at its prompt afterwards (and, in a shell, ``set +H`` ran)."""
        uid = checks.new_uid()
        cmd, token = checks.shell_marker(uid) if shell.mode == "shell" else checks.python_marker(uid)
        self._run_command(agent, ref, shell, cmd, token, gen.SendPlan(), gen.Decoration(), "sync")

    def _eligible(self, mode: str, terminal: str | None = None) -> list[PairRef]:
        """Live pairs whose program is in ``mode`` (a deterministic function of the rules run so far)."""
        refs = []
        for a in self.live:
            for p in a.model.alive():
                shell = a.shells.get(p.instance)
                if shell is not None and shell.mode == mode and terminal in (None, p.terminal):
                    refs.append(PairRef(a.index, p.terminal, p.session))
        return refs

    def _live_refs(self) -> list[PairRef]:
        """Every live pair of every agent session, in a deterministic order."""
        return [PairRef(a.index, p.terminal, p.session) for a in self.live for p in a.model.alive()]

    def _pick(self, index: int, mode: str, terminal: str | None = None) -> PairRef:
        refs = self._eligible(mode, terminal)
        return refs[index % len(refs)]

    def _live_shell(self, ref: PairRef) -> tuple[Agent, PairState, Shell] | None:
        agent, pair, shell = self._pair(ref)
        if pair is None or pair.life is not Life.ALIVE or shell is None:
            return None
        return agent, pair, shell

    # -- rules: agent sessions --------------------------------------------------------------------

    def _open_agent(self) -> int:
        assert self.target is not None
        session = self.target.open_session()
        index = len(self.live)
        first = session.run_turn([self._list_step()], step_timeout=self.cfg.step_timeout)[0][0]
        note(f"agent {index} = session {session.label}; first list -> {first[:300]}")
        launched_elsewhere = {p.socket: str(PairRef(a.index, p.terminal, p.session)) for a in self.live for p in a.model.pairs}
        try:
            model = initial_model(DECLARED, first, launched_elsewhere)
        except UnsupportedServer as exc:
            raise TargetError(f"{self.target.where}: {exc}") from None
        agent = Agent(index, session, model)
        self.live.append(agent)
        event(f"agent: baseline of {len(model.baseline)} server-made pairs")
        return index

    @initialize(target=pairs, terminal=st.sampled_from(DECLARED), name=gen.session_names())
    def start(self, terminal: str, name: str) -> PairRef:
        """Open the first agent session and launch a first pair (so that pair rules can run at once)."""
        self._open_agent()
        self._turn(self.live[0], [[_call(LAUNCH, {"terminal": terminal, "session": name})], self._list_step()])
        return PairRef(0, terminal, name)

    @precondition(lambda self: len(self.live) < self.cfg.max_agents)
    @rule(same_pair=st.booleans())
    def another_agent(self, same_pair: bool) -> None:
        """Several agent sessions at once: each has its own terminals (``same_pair``: launch there
        the names of the first session's first pair, which must start a new process)."""
        index = self._open_agent()
        first = self.live[0].model.pairs
        if same_pair and first:
            args = {"terminal": first[0].terminal, "session": first[0].session}
            self._turn(self.live[index], [[_call(LAUNCH, args)], self._list_step()])

    @rule()
    def list_every_agent(self) -> None:
        """List every agent session's terminals (and compare its /resources/terminals view)."""
        for a in self.live:
            self._turn(a, [self._list_step()])
            self._check_view(a)

    # -- rules: launch ------------------------------------------------------------------------------

    @rule(target=pairs, agent=AGENT, terminal=st.sampled_from(DECLARED), name=gen.session_names(),
          copies=st.sampled_from((1, 1, 1, 2, 3, 4)), deco=gen.decorations())
    def launch(self, agent: int, terminal: str, name: str, copies: int, deco: gen.Decoration) -> PairRef:
        """Launch a pair; ``copies`` > 1 issues that many launches in ONE reply (one process must start)."""
        a = self._agent(agent)
        call = _call(LAUNCH, {"terminal": terminal, "session": name}, deco)
        js = self._turn(a, [[call] * copies, self._list_step()])[0]
        statuses = sorted(j.value.get("status", "error") for j in js if isinstance(j.value, dict))
        if copies > 1:
            event(f"launch: {copies} concurrent -> {statuses.count('launched')} launched")
        return PairRef(a.index, terminal, name)

    @rule(pair=pairs, deco=gen.decorations())
    def launch_again(self, pair: PairRef, deco: gen.Decoration) -> None:
        """Launch a known pair again: already_running if it lives, launched if it was closed or exited."""
        a = self._agent(pair.agent)
        self._turn(a, [[_call(LAUNCH, _pair_args(pair), deco)], self._list_step()])

    # -- rules: typing ------------------------------------------------------------------------------

    @rule(pair=pairs, plan=gen.send_plans(), semicolon=st.booleans(), deco=gen.decorations())
    def marker(self, pair: PairRef, plan: gen.SendPlan, semicolon: bool, deco: gen.Decoration) -> None:
        """Echo a unique marker, typed in chunks; it must show in this pair (and never elsewhere)."""
        live = self._live_shell(pair)
        if live is None:
            a = self._agent(pair.agent)
            self._type(a, pair, [{"text": "echo not-running"}], deco, read_after=False)
            return
        a, _, shell = live
        uid = checks.new_uid()
        if shell.mode == "shell":
            cmd, token = checks.shell_marker(uid, semicolon=semicolon)
        else:
            cmd, token = checks.python_marker(uid)
        self._run_command(a, pair, shell, cmd, token, plan, deco, "marker")

    @rule(pair=pairs, payload=gen.payloads(), plan=gen.send_plans(), deco=gen.decorations())
    def payload(self, pair: PairRef, payload: str, plan: gen.SendPlan, deco: gen.Decoration) -> None:
        """Type a text through the program; its md5, computed by the program, proves it arrived intact."""
        self._payload(pair, payload, plan, deco)

    @rule(pair=pairs, long=gen.long_payloads(), plan=gen.send_plans())
    def long_payload(self, pair: PairRef, long: gen.LongText, plan: gen.SendPlan) -> None:
        """A text over 16 KiB (typed only while the program is known to be reading)."""
        self._payload(pair, long.text, plan, gen.Decoration())

    def _payload(self, pair: PairRef, payload: str, plan: gen.SendPlan, deco: gen.Decoration) -> None:
        live = self._live_shell(pair)
        if live is None:
            self._type(self._agent(pair.agent), pair, [{"text": payload[:200]}], deco, read_after=False)
            return
        a, _, shell = live
        uid = checks.new_uid()
        if shell.mode == "shell":
            cmd, token = checks.shell_payload(uid, payload)
        else:
            cmd, token = checks.python_payload(uid, payload)
        long_line = max(len(line.encode()) for line in cmd.split("\n")) > LONG_LINE
        if (shell.mode == "shell" and not shell.configured) or (long_line and not shell.ready):
            self._sync(a, pair, shell)
        if long_line:
            # A line typed while the program is between reads goes through the kernel's canonical
            # line editing and is cut at 4095 bytes: such a line is typed at a prompt (the program
            # reads it as it comes), in two sends split right after the payload's literal, so that
            # a server that loses part of a long text still lets the command finish (and the wrong
            # digest shows at once instead of a command waiting for its closing quote).
            end = checks.payload_end(shell.mode, payload)
            plan = replace(plan, cuts=(gen.Cut(False, end - 1),))
            event("payload: long line")
        self._run_command(a, pair, shell, cmd, token, plan, deco, "payload")

    @rule(pair=pairs, keys=gen.key_presses(), with_text=st.sampled_from(("absent", "empty", "null")))
    def press_keys(self, pair: PairRef, keys: str | None, with_text: str) -> None:
        """Keys only (absent = Enter); an unknown key name may be typed literally: the line is cleared."""
        a, p, shell = self._pair(pair)
        args: dict[str, Any] = {} if keys is None else {"keys": keys}
        if with_text != "absent":
            args["text"] = "" if with_text == "empty" else None
        sends = [args]
        if keys is not None and keys in gen.UNKNOWN_KEYS:
            sends.append({"keys": "C-u"})
        live = self._live_shell(pair)
        interrupting = live is not None and keys is not None and "C-c" in keys.split()
        before = 0
        if interrupting:
            before = checks.interrupts(self._turn(a, [[self._read(pair, self.cfg.big_scrollback)]])[0][0].value["screen"])
        self._type(a, pair, sends, gen.Decoration(), read_after=False)
        if shell is not None:
            shell.ready = False
            shell.rows += 2
        if interrupting:
            # bash eats a key typed while it handles the interrupt: wait for its new prompt.
            self._poll_screen(a, pair, lambda s: checks.prompt_after_interrupt(s, before), "prompt after C-c")

    # -- rules: reading and listing -----------------------------------------------------------------

    @rule(pair=pairs, scrollback=gen.scrollbacks(), deco=gen.decorations())
    def read(self, pair: PairRef, scrollback: Any, deco: gen.Decoration) -> None:
        args = _pair_args(pair) if scrollback is ... else _pair_args(pair, scrollback=scrollback)
        self._turn(self._agent(pair.agent), [[_call(READ, args, deco)]])

    @rule(pair=pairs, value=st.one_of(st.booleans(), st.sampled_from(gen.INVALID_SCROLLBACK)))
    def read_bad_scrollback(self, pair: PairRef, value: Any) -> None:
        """A scrollback that is not a non-negative integer (booleans first: JSON true is no integer)."""
        self._turn(self._agent(pair.agent), [[_call(READ, _pair_args(pair, scrollback=value))]])

    @rule(agent=AGENT, deco=gen.decorations())
    def list_terminals(self, agent: int, deco: gen.Decoration) -> None:
        a = self._agent(agent)
        self._turn(a, [[_call(LIST, {}, deco)]])
        self._check_view(a)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK)
    def scroll(self, index: int) -> None:
        """Print more than a screen: old markers leave the visible rows but stay in the history."""
        pair = self._pick(index, "shell")
        live = self._live_shell(pair)
        if live is None or live[2].mode != "shell":
            event("scroll: not a live shell")
            return
        a, _, shell = live
        old = list(shell.markers)
        uid = checks.new_uid()
        cmd, token = checks.shell_marker(uid)
        self._run_command(a, pair, shell, f"seq -f 'SC%g' 1 60; {cmd.removeprefix('set +H; ')}", token,
                          gen.SendPlan(), gen.Decoration(), "scroll")
        shell.rows += 62
        visible = self._turn(a, [[self._read(pair, 0)]])[0][0].value["screen"]
        if not checks.has_token(visible, token):
            fail("read.visible", f"read with scrollback 0 of {pair} lacks the last output {token}")
        for tok, _ in old:
            if checks.has_token(visible, tok):
                fail("read.visible", f"read with scrollback 0 of {pair} shows {tok}, printed 60+ lines earlier")
        full = self._turn(a, [[self._read(pair, self.cfg.big_scrollback)]])[0][0].value["screen"]
        for tok, at in old:
            if shell.rows - at < HISTORY_ROWS and not checks.has_token(full, tok):
                fail("read.history", f"read with scrollback {self.cfg.big_scrollback} of {pair} lacks {tok}, "
                                        "which scrolled out of the visible rows: the history must still hold it")
        event(f"scroll: {min(len(old), 3)}{'+' if len(old) > 3 else ''} old markers found in the history")
        _exercised("read.visible", "read.history" if old else "")

    # -- rules: ending terminals --------------------------------------------------------------------

    @rule(pair=pairs, deco=gen.decorations())
    def close(self, pair: PairRef, deco: gen.Decoration) -> None:
        a = self._agent(pair.agent)
        self._turn(a, [[_call(CLOSE, _pair_args(pair), deco)], self._list_step()])
        self._check_view(a)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK, window=st.lists(st.sampled_from(("list", "read", "send", "close")), max_size=3),
          relaunch=st.sampled_from(("no", "after-removal", "quick")))
    def exit_shell(self, index: int, window: list[str], relaunch: str) -> None:
        """``exit`` in the shell: until the server notices, list/send/read/close may see it either way;
        then it must be removed (polled); then, optionally, launched again.

        Where the probe sees the terminal's processes, the window's calls come once they are gone:
        what a server answers then does not depend on how fast the shell ran ``exit``, so a program
        gives the same outcome on every replay (one that found a bug finds it again)."""
        pair = self._pick(index, "shell")
        live = self._live_shell(pair)
        if live is None or live[2].mode != "shell":
            event("exit: not a live shell")
            return
        a, p, shell = live
        # Exiting from now on: the exit (and its deleted event) may happen before the send returns.
        shell.exited = True
        a.model = a.model._with_pair(replace(p, life=Life.EXITING))
        self._type(a, pair, [{"text": "exit"}], gen.Decoration(), read_after=False)
        died: bool | None = None  # unknown where the probe cannot see the processes
        if shell.processes and self._probe_on(shell.socket):
            died = bool(self._eventually(lambda: True if not self.probe.leftovers(shell.processes) else None)[0])
        steps: list[list[Call]] = []
        for what in window:
            steps.append({"list": self._list_step(), "read": [self._read(pair)],
                          "send": [_call(SEND, _pair_args(pair, text="", keys=""))],
                          "close": [_call(CLOSE, _pair_args(pair))]}[what])
        if steps:
            self._turn(a, steps)
        if relaunch == "quick":
            self._await_exit(a, pair, lambda: (q := a.model.pair(pair.terminal, pair.session)) is None or q.life is Life.DEAD,
                             [self._read(pair)], f"{pair} to be reported dead", "read.dead", died)
        else:
            self._await_exit(a, pair, lambda: a.model.pair(pair.terminal, pair.session) is None,
                             self._list_step(), f"{pair} to be removed from list after its exit", "list.exit-removed", died)
        if relaunch != "no":
            js = self._turn(a, [[_call(LAUNCH, _pair_args(pair))], self._list_step()])
            if js[0][0].value.get("status") != "launched":
                fail("launch.relaunch", f"launch after exit of {pair} did not start a new process: {js[0][0].value}")

    def _await_exit(self, agent: Agent, ref: PairRef, done: Callable[[], bool], step: list[Call], what: str,
                    clause: str, died: bool | None) -> None:
        """Run ``step`` until ``done()`` after an ``exit`` was typed into ``ref``.

        Where the probe sees the terminal's processes, the contract's own bound applies: once they
        are gone, the server removes the pair within 2 s (waited for with a margin for this loop's
        own latency, not the whole poll deadline). On time-out, what the pane shows tells an ``exit``
        that never ran (the keys) from one that ran (the exit watcher)."""
        # ``died``: whether the probe saw the processes gone (None: it cannot see them)
        within = None if died is None else EXIT_REMOVAL + EXIT_MARGIN if died else 0.0  # never exited: look once

        def settled() -> bool | None:
            if not done():
                self._turn(agent, [step])
            return True if done() else None

        ok, polls = self._eventually(settled, within)
        if ok is None:
            cause = ""
            pane = self._panes(agent).get(f"{ref.terminal}:{ref.session}")
            if within:
                cause = (f"its processes had exited, and {within:.0f} s later (the contract gives the server 2 s) "
                         "it is still there")
            elif pane is not None:
                diagnosed, cause = checks.diagnose_typed(pane, "exit", ("exit",), None)
                if diagnosed == "send.keys":
                    clause = diagnosed
                elif diagnosed == "read.output-shows":
                    cause = "`exit` ran (the pane shows it), but the server did not notice the exit"
            fail(clause, f"timed out waiting for {what}" + (f": {cause}" if cause else ""),
                 f"  model: {describe(agent.model)}")
        event(f"exit: settled after {_bucket(polls)} polls")
        _exercised(clause)

    # -- rules: an interactive program ---------------------------------------------------------------

    @precondition(lambda self: bool(self._eligible("shell", "bash")))
    @rule(index=PICK)
    def repl_start(self, index: int) -> None:
        """Start python3 in a bash pair; type nothing until its ``>>>`` prompt shows."""
        pair = self._pick(index, "shell", "bash")
        live = self._live_shell(pair)
        if live is None or live[2].mode != "shell" or pair.terminal != "bash":
            event("repl: not a live bash shell")
            return
        a, p, shell = live
        self._type(a, pair, [{"text": "python3 -q"}], gen.Decoration(), read_after=False)
        shell.ready = False
        self._poll_screen(a, pair, lambda s: checks.last_row(s) == ">>>", "python prompt",
                          typed=Typed("python3 -q", ("python3 -q",)))
        shell.mode, shell.ready = "python", True
        shell.rows += 2
        if shell.processes and self.probing:
            view = self.probe.view(p.socket)
            shell.processes = tuple(sorted(set(shell.processes) | set(view.members), key=lambda r: r.pid))
        uid = checks.new_uid()
        cmd, token = checks.python_marker(uid)
        self._run_command(a, pair, shell, cmd, token, gen.SendPlan(), gen.Decoration(), "repl")

    @precondition(lambda self: bool(self._eligible("python")))
    @rule(index=PICK)
    def repl_exit(self, index: int) -> None:
        """``exit()``: wait for the shell's prompt (a REPL may swallow type-ahead), then a marker."""
        pair = self._pick(index, "python")
        live = self._live_shell(pair)
        if live is None or live[2].mode != "python":
            event("repl: no REPL running")
            return
        a, _, shell = live
        self._type(a, pair, [{"text": "exit()"}], gen.Decoration(), read_after=False)
        self._poll_screen(a, pair, lambda s: any(r.strip() for r in checks.rows_after(s, ">>> exit()")),
                          "shell prompt after exit()", typed=Typed("exit()", ("exit()",)))
        shell.mode, shell.ready = "shell", False
        self._sync(a, pair, shell)

    # -- rules: argument errors and what is not addressable --------------------------------------------

    @rule(pair=pairs, bad=gen.bad_calls())
    def bad_arguments(self, pair: PairRef, bad: gen.BadCall) -> None:
        a = self._agent(pair.agent)
        self._turn(a, [[Call(bad.tool, gen.bad_arguments(bad, pair.terminal, pair.session))]])

    @rule(agent=AGENT, terminal=st.one_of(st.sampled_from(DECLARED), gen.undeclared_terminals()),
          name=gen.session_names(), tool=st.sampled_from((SEND, READ, CLOSE, LAUNCH)), deco=gen.decorations())
    def unknown_pair(self, agent: int, terminal: str, name: str, tool: str, deco: gen.Decoration) -> None:
        """A call on a pair that may never have been launched (or an undeclared terminal)."""
        a = self._agent(agent)
        if tool == LAUNCH and terminal in DECLARED:
            tool = READ
        args = {"terminal": terminal, "session": name}
        if tool == SEND:
            args.update(text="", keys="")
        self._turn(a, [[_call(tool, args, deco)]])

    @rule(pair=pairs, variant=st.sampled_from(("prefix", "extended", "swapcase", "padded", "other-terminal")),
          tool=st.sampled_from((SEND, READ, CLOSE, LAUNCH)))
    def near_name(self, pair: PairRef, variant: str, tool: str) -> None:
        """A name next to a known one (a prefix, an extension, another case, spaces, the other
        terminal): names are exact dictionary keys, never matched like tmux targets."""
        name, terminal = pair.session, pair.terminal
        if variant == "prefix":
            name = name[:-1] or name + name
        elif variant == "extended":
            name = name + "x"
        elif variant == "swapcase":
            name = name.swapcase() if name.swapcase() != name else name + "A"
        elif variant == "padded":
            name = f" {name} "
        else:
            terminal = next(t for t in DECLARED if t != terminal)
        ref = PairRef(pair.agent, terminal, name)
        args = _pair_args(ref, text="", keys="") if tool == SEND else _pair_args(ref)
        a = self._agent(pair.agent)
        self._turn(a, [[_call(tool, args)], self._list_step()] if tool in (LAUNCH, CLOSE) else [[_call(tool, args)]])

    @rule(agent=AGENT, tool=st.sampled_from((SEND, READ, CLOSE, LAUNCH)))
    def server_made(self, agent: int, tool: str) -> None:
        """The server's own terminals (the baseline) are never addressable; list keeps showing them."""
        a = self._agent(agent)
        terminal, session = a.model.baseline[0] if a.model.baseline else ("tui", "main")
        args = {"terminal": terminal, "session": session}
        if tool == SEND:
            args.update(text="", keys="")
        self._turn(a, [[_call(tool, args)], self._list_step()])

    @rule(pair=pairs, other=AGENT, tool=st.sampled_from((SEND, READ, CLOSE)))
    def other_agent(self, pair: PairRef, other: int, tool: str) -> None:
        """A pair's names used in another agent session: that session has its own terminals."""
        a = self._agent(other)
        args = _pair_args(pair, text="", keys="") if tool == SEND else _pair_args(pair)
        self._turn(a, [[_call(tool, args)]])

    @precondition(lambda self: bool(self._live_refs()) and (len(self.live) > 1 or len(self.live) < self.cfg.max_agents))
    @rule(target=pairs, index=PICK, other=AGENT, tool=st.sampled_from((LAUNCH, SEND, READ, CLOSE)))
    def cross_session(self, index: int, other: int, tool: str) -> PairRef:
        """A LIVE pair's names used from another agent session (opened here if there is none): that
        session must not see, type into, read or close it, and a launch there starts its own process."""
        live = self._live_refs()
        ref = live[index % len(live)]
        if len(self.live) < 2:
            self._open_agent()
        others = [a for a in self.live if a.index != ref.agent]
        a = others[other % len(others)]
        args = _pair_args(ref, text="", keys="") if tool == SEND else _pair_args(ref)
        self._turn(a, [[_call(tool, args)], self._list_step()] if tool in (LAUNCH, CLOSE) else [[_call(tool, args)]])
        event(f"cross-session: {tool.removeprefix('sys_terminal_')} of a live pair of another session")
        return PairRef(a.index, ref.terminal, ref.session)

    @precondition(lambda self: bool(self._live_refs()))
    @rule(target=pairs, index=PICK, how=st.sampled_from(gen.ID_SIBLINGS), deco=gen.decorations())
    def id_sibling(self, index: int, how: str, deco: gen.Decoration) -> PairRef:
        """Launch, next to a live pair, a pair whose key gives the same resource id (``"x"`` and
        ``" x "``): both live at once, so the server must disambiguate (§2.4, checked on the events
        and the /resources/terminals view)."""
        live = self._live_refs()
        ref = live[index % len(live)]
        sibling = PairRef(ref.agent, ref.terminal, gen.id_sibling(ref.session, how))
        a = self._agent(ref.agent)
        self._turn(a, [[_call(LAUNCH, _pair_args(sibling), deco)], self._list_step()])
        self._check_view(a)
        event(f"id sibling: {how}")
        return sibling

    @precondition(lambda self: bool(self.bundle("pairs")))
    @rule(refs=st.lists(pairs, min_size=2, max_size=4), ops=gen.concurrency())
    def concurrent(self, refs: list[PairRef], ops: Sequence[str]) -> None:
        """Calls on distinct pairs of one agent in ONE reply: some sequential order must explain them."""
        agent = refs[0].agent
        chosen: dict[tuple[str, str], str] = {}
        for ref, op in zip(refs, ops):
            if ref.agent == agent and (ref.terminal, ref.session) not in chosen:
                chosen[(ref.terminal, ref.session)] = op
        step: list[Call] = []
        for (terminal, session), op in chosen.items():
            ref = PairRef(agent, terminal, session)
            step.append({"read": self._read(ref, 10), "list": _call(LIST, {}),
                         "close": _call(CLOSE, _pair_args(ref)), "launch": _call(LAUNCH, _pair_args(ref)),
                         "send-nothing": _call(SEND, _pair_args(ref, text="", keys=""))}[op])
        event(f"concurrent: {len(step)} calls")
        self._turn(self._agent(agent), [step, self._list_step()])

    # -- invariants and teardown ------------------------------------------------------------------------

    @invariant()
    def live_pairs_have_private_servers(self) -> None:
        """Runs after every rule that returned: so the rule is over (see ``busy``)."""
        self._check_sockets()
        self.busy = False
        self.rules_run += 1

    def teardown(self) -> None:
        """Close everything (checked), delete the sessions, and prove nothing is left (probe).

        Odd-numbered agent sessions are not closed pair by pair: their DELETE must close them (§2.9).
        After a failed rule this only cleans up, so that the rule's failure is the one reported.
        """
        event(f"program: {self.rules_run // 10 * 10}+ rules")
        if self.busy:
            self._cleanup()
            return
        try:
            for a in self.live:
                if a.index % 2 == 0 and a.model.pairs:
                    step = [_call(CLOSE, _pair_args(PairRef(a.index, p.terminal, p.session))) for p in a.model.pairs]
                    self._turn(a, [step, self._list_step()])
                    if a.model.pairs:
                        fail("list.registered", f"agent {a.index}: pairs left after closing all: {describe(a.model)}")
        except BaseException:
            self._cleanup()
            raise
        errors = []
        target_failed = False
        for a in self.live:
            try:
                a.session.delete()
            except ContractViolation:  # a check the session ran before its DELETE (its last items' pages)
                self._cleanup()
                raise
            except Exception as exc:  # report, but keep cleaning the others
                errors.append(f"deleting agent {a.index}: {exc}")
                target_failed = target_failed or isinstance(exc, TargetError)
            if a.index % 2 == 1:
                event(f"teardown: DELETE closes {min(len(a.model.pairs), 3)} pairs")
        for a in self.live:
            for number, shell in a.shells.items():
                if shell.processes and self.probing and not shell.exited:
                    self._await_gone(a, number, shell, at_once=a.index % 2 == 0)
        if errors:  # a server that broke or went away is no contract violation (never a repro)
            raise (TargetError if target_failed else AssertionError)("; ".join(errors))

    def _cleanup(self) -> None:
        for a in self.live:
            try:
                a.session.delete()
            except Exception:
                pass


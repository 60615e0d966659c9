"""What one run of the machine knows besides the model, and the means it observes with.

The pure model (:mod:`stateful.model`) knows what every call must answer. It cannot know what the
program in a pane is doing, which agent sessions are open, which marker was typed where, or what
tmux and /proc say: that is kept here, per run, in a :class:`World`, and shared by the after-turn
checks (:mod:`stateful.after_turn`), the code that drives shells and REPLs (:mod:`stateful.driving`)
and the rules (:mod:`stateful.machine`).

:meth:`World.eventually` is the one polling loop: every "eventually" of the contract is waited for
through it, with the run's poll deadline (or a tighter bound the contract gives).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import event, note

from stateful import meter
from stateful import strategies as gen
from stateful.conversation import DEFAULT_BUDGET, REQUEST_BASE
from stateful.model import Call, Ledger, SessionModel, pair_name
from stateful.targets.base import AgentSession, Target
from stateful.targets.probe import Probe, ProcRef
from stateful.waiting import Wait

__all__ = [
    "DECLARED", "LAUNCH", "SEND", "READ", "LIST", "CLOSE", "LOST", "MachineConfig", "PairRef", "Typed", "Shell", "Agent",
    "World", "Transcript", "tool_call", "pair_args", "read_call", "list_step", "exercised", "clip", "quoted", "bucket",
]

T = TypeVar("T")

DECLARED = ("bash", "sh")
"""The terminals every target declares (both run bash; ``sh`` without rc files)."""
LAUNCH, SEND, READ, LIST, CLOSE = (f"sys_terminal_{t}" for t in ("launch", "send", "read", "list", "close"))


@dataclass(frozen=True)
class MachineConfig:
    step_timeout: float = 60.0
    """Longest time one step (one model reply's calls) may take before it is reported as a hang."""
    poll_deadline: float = 15.0
    """Longest wait for an eventual property (output shows, an exited pair is removed, ...)."""
    big_scrollback: int = 9000
    max_agents: int = 3
    probe: bool = True
    conversation_budget: int = DEFAULT_BUDGET
    """Bytes an agent session's conversation may reach (every model call carries it whole): the
    machine keeps each session under it (:mod:`stateful.conversation`). Targets without a model
    (the in-process one) have no conversation."""


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
    """"shell", "python" (a REPL started in the shell) or :data:`LOST` (nothing more is typed into it)."""
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


LOST = "lost"
"""The mode of a program whose state the machine can no longer know: a resync's own marker did not
arrive as written (a known deviation that every text meets). No rule types into it."""


@dataclass
class Agent:
    """One open agent session: its model, its resource-event ledger, the programs in its panes."""

    index: int
    session: AgentSession
    model: SessionModel
    ledger: Ledger = field(default_factory=Ledger)
    shells: dict[int, Shell] = field(default_factory=dict)
    conversation: int = REQUEST_BASE
    """Bytes of the session's model requests so far, as the machine counts them
    (:func:`stateful.conversation.turn_bytes`): the size of the next one, before its turn adds to it."""


def tool_call(tool: str, args: dict[str, Any], deco: gen.Decoration = gen.Decoration()) -> Call:
    """A call of ``tool``; the decoration's keys that ``tool`` names are left out (an extra key is
    one the tool does not name)."""
    for key, _ in gen.extra_keys(deco, tool):
        if key in gen.CONTRACT_VOCABULARY:
            event(f"extra key: a field name of the contract ({'argument' if key in gen.NAMED_KEYS else 'output'})")
    return Call(tool, gen.encode(args, deco, tool))


def pair_args(ref: PairRef, **more: Any) -> dict[str, Any]:
    return {"terminal": ref.terminal, "session": ref.session, **more}


def read_call(ref: PairRef, scrollback: int | None = None) -> Call:
    return tool_call(READ, pair_args(ref) if scrollback is None else pair_args(ref, scrollback=scrollback))


def list_step() -> list[Call]:
    return [tool_call(LIST, {})]


def exercised(*clauses: str) -> None:
    """Record that a check of these clauses ran and held (``--hypothesis-show-statistics`` lists
    them as ``clause: <id>``: which clauses a run exercised)."""
    for clause in clauses:
        if clause:
            event(f"clause: {clause}")


def clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"...<{len(text)} chars>"


def quoted(output: str, limit: int = 300) -> str:
    """What a server printed, as a note or a report shows it: a Python string literal (its first
    ``limit`` characters), never raw lines. A raw output could hold a line shaped like a program step
    (``state.x(...)``), which the notes' reader would take for one (see ``repro.reported_program``)."""
    return repr(output[:limit]) + (f"...<{len(output)} chars>" if len(output) > limit else "")


def bucket(n: int) -> str:
    return str(n) if n < 2 else "2-5" if n <= 5 else ">5"


class Transcript:
    """What a failing program's report shows of each turn (Hypothesis notes, printed for the final
    replay only): the calls and their outputs (quoted). While the machine polls, a turn that repeats the
    previous one exactly (the same calls, the same outputs) is counted instead of printed, and the
    count becomes one line ("... the same turn x 35 more, no change").

    The same lines are kept in ``lines`` (and each pair's last screen a read returned in ``screens``)
    on every run, not only the final replay: a violation that never comes back is reported with them
    (see :mod:`stateful.run_record`)."""

    def __init__(self) -> None:
        self.folding = False
        self._last: tuple[Any, ...] | None = None
        self._repeats = 0
        self.lines: list[str] = []
        self.screens: dict[str, str] = {}
        """"bash:'main' of agent 0" -> the last screen a read of that pair returned (latest read last)."""

    def add(self, number: int, agent: int, steps: Sequence[Sequence[Call]],
            outputs: Sequence[Sequence[str]] | None) -> None:
        calls = " | ".join(" & ".join(map(repr, step)) for step in steps)
        key = (agent, calls, None if outputs is None else tuple(map(tuple, outputs)))
        for step, outs in zip(steps, outputs or ()):
            for call, out in zip(step, outs):
                self._screen(agent, call, out)
        if self.folding and key == self._last:
            self._repeats += 1
            return
        self.flush()
        self._last = key
        self.add_line(f"turn {number} (agent {agent}): {calls}")
        for step, outs in zip(steps, outputs or ()):
            for call, out in zip(step, outs):
                self.add_line(f"  {call!r} -> {quoted(out)}")

    def flush(self) -> None:
        if self._repeats:
            self.add_line(f"  ... the same turn x {self._repeats} more, no change")
        self._repeats = 0

    def add_line(self, line: str) -> None:
        """A line of the report (a note) that is also kept in ``lines``."""
        self.lines.append(line)
        note(line)

    def _screen(self, agent: int, call: Call, output: str) -> None:
        if call.tool != READ:
            return
        try:
            args, value = json.loads(call.arguments), json.loads(output)
        except ValueError:
            return
        if isinstance(args, dict) and isinstance(value, dict) and isinstance(value.get("screen"), str):
            pair = f"{pair_name(str(args.get('terminal')), str(args.get('session')))} of agent {agent}"
            self.screens.pop(pair, None)
            self.screens[pair] = value["screen"]


RECENT_TURNS = 8
"""How many of the last turns' durations measure the run's slowness (:meth:`World.slowness`)."""


class World:
    """One run's state outside the model, and its means of observation."""

    def __init__(self, target: Target, config: MachineConfig) -> None:
        self.target = target
        self.cfg = config
        self.probe = Probe()
        self.probing: bool | None = None if config.probe else False
        """Whether the probe can see the terminals' sockets (None: not known before the first launch)."""
        self.live: list[Agent] = []
        """The open agent sessions (a deleted one leaves this list)."""
        self.opened = 0
        """Agent sessions opened so far (the next one's index)."""
        self.turns = 0
        self.busy = False
        """A rule is running (set by every turn, cleared by the machine's invariant after each rule):
        teardown after a failure only cleans up, so that the rule's failure is the one reported."""
        self.owners: dict[str, tuple[int, str, str]] = {}
        """Marker uid -> the (agent, terminal, session) it was typed into."""
        self.transcript = Transcript()
        self.recent_turns: deque[float] = deque(maxlen=RECENT_TURNS)
        """Seconds the last turns took (:meth:`timed_turn`)."""
        self.last_wait: Wait | None = None
        """The last wait of :meth:`eventually` (how long it waited, how many looks: for a verdict's message)."""
        self.largest_turn = 0
        """Bytes the program's largest turn so far added to its session's conversation (what the next
        one may add: :mod:`stateful.conversation`)."""
        self.largest_conversation = 0
        """Bytes the program's largest agent session conversation reached (the machine's own count, an
        upper bound of the model request: a campaign reports the largest, issue 27)."""

    @property
    def budgeted(self) -> bool:
        """Whether the target's turns carry a conversation to a model, which the machine keeps under
        ``conversation_budget``."""
        return self.target.carries_conversation

    def probe_on(self, socket: str) -> bool:
        """Whether ground truth is available (decided once, from the first socket a launch named)."""
        if self.probing is None:
            self.probing = self.probe.applicable(socket)
            event("probe: " + ("on" if self.probing else "off (sockets are not on this machine)"))
        return bool(self.probing)

    def eventually(self, what: str, probe: Callable[[], T | None],
                   within: float | None = None, *, tried: bool = False) -> tuple[T | None, int]:
        """Call ``probe`` until it gives a value (not None) or the wait is over; return the value (None
        on time-out) and how many more attempts the first one took. The pauses grow from 50 ms to
        500 ms, start to start: quick where the answer is quick, and the deadline, not the pause,
        bounds the wait. Turns run by the probe that show nothing new are folded into one line of the
        report; ``what`` names the wait in the run's statistics. ``tried``: the caller made the first
        attempt already, right before (the loop pauses before it asks again).

        A time-out is a verdict of absence ("never showed", "never removed"), so it rests on
        evidence taken late enough (a :class:`stateful.waiting.Wait`): at least ``LOOKS`` attempts, the last
        of which *began* after ``within`` seconds (default: the poll deadline) plus the measured
        slowness (:meth:`slowness`, and the longest attempt of this wait). A slow probe or a busy
        machine makes the wait longer, never shorter: the contract's times are the server's."""
        wait = Wait(self.cfg.poll_deadline if within is None else within, self.slowness, looks=1 if tried else 0)
        value: T | None = None
        self.transcript.folding = True
        try:
            if tried:
                meter.sleep(0.05, "eventually")
            while True:
                began = wait.look()
                value = probe()
                wait.looked(began)
                if value is not None or wait.over(began):
                    break
                # the interval runs from start to start: a slow probe is not followed by a sleep too
                meter.sleep(max(0.0, min(0.05 * wait.looks, 0.5) - (time.monotonic() - began)), "eventually")
        finally:
            self.transcript.folding = False
            self.transcript.flush()
        polls = wait.looks - 1
        self.last_wait = wait
        event(f"{what}: " + (f"after {bucket(polls)} polls" if value is not None else "timed out"))
        return value, polls

    def waited(self) -> str:
        """How long the last wait of :meth:`eventually` looked, in words (a verdict of absence says so)."""
        wait = self.last_wait
        if wait is None:
            return f"{self.cfg.poll_deadline:.0f} s"
        return f"{wait.waited:.1f} s ({wait.looks} looks, the last begun after its deadline)"

    def timed_turn(self, seconds: float) -> None:
        """Note how long a turn took (post to end seen, or the call on an in-process target): the
        server's and the machine's slowness as the run measures it (:meth:`slowness`)."""
        self.recent_turns.append(seconds)

    def slowness(self) -> float:
        """Seconds the waits for an "eventually" grow by: the longest of the last ``RECENT_TURNS``
        turns (a server or machine that is slow now takes that much longer to show anything, and a
        probe's own turn takes that long to see it)."""
        return max(self.recent_turns, default=0.0)

    def panes(self, agent: Agent) -> dict[str, str]:
        """What tmux shows in each of the agent's panes (for a hang's report)."""
        return {f"{p.terminal}:{p.session}": self.probe.capture(p.socket)
                for p in agent.model.pairs if self.probe_on(p.socket)}

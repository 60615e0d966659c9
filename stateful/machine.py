"""The state machine: rules that drive a target to the contract's edges, and how they pick pairs.

Layers (as in Schemathesis's stateful runner, generation is apart from execution and checks):

* generation: :mod:`stateful.strategies` draws every rule argument up front (never from answers);
* execution: a :class:`~stateful.targets.base.Target` runs a turn of steps and returns raw outputs;
* checks: :mod:`stateful.after_turn` holds every check made after a turn, in order (outputs against
  :mod:`stateful.model`, screens, rows, private servers, events, ground truth), and the view and
  DELETE checks the rules call after the turns that can break them;
* driving the programs in the panes (typing into a shell or a REPL, waiting for what it prints):
  :mod:`stateful.driving`; what a run knows besides the model: :mod:`stateful.world`.

A rule here only decides what to do: which session, which pair, which calls in which turn.
Indices a rule draws (``AGENT``, ``PICK``) select modulo how many there are, so any of them can be
picked whatever the config allows; a pair whose session was deleted is addressed from another one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from stateful import checks, clauses, conversation, run_record
from stateful import driving, steering
from stateful import strategies as gen
from stateful.after_turn import await_gone, check_private_servers, check_view, count_conversation, run_turn
from stateful.clauses import deviate, fail, tolerated
from stateful.model import TOLERABLE, Call, ContractViolation, Judgement, Life, PairState, first_list
from stateful.run_record import recorded
from stateful.targets.base import Target, TargetError
from stateful.world import (
    LOST,
    CLOSE,
    DECLARED,
    LAUNCH,
    LIST,
    READ,
    SEND,
    Agent,
    MachineConfig,
    PairRef,
    Shell,
    Typed,
    World,
    exercised,
    list_step,
    pair_args,
    quoted,
    read_call,
    tool_call,
)

__all__ = ["MachineConfig", "PairRef", "TerminalMachine", "DECLARED", "Typed"]

LONG_LINE = 3500
"""Bytes above which a line is only typed while the program is known to be reading (kernel: 4095)."""
INDEX = st.integers(0, 255)
"""One of several things (an agent session, a pair a rule applies to), as an index modulo their
number: any of up to 256 can be picked, however many the config allows and the run has made."""
AGENT = INDEX
PICK = INDEX
HISTORY_ROWS = 8000
"""Rows of output per instance under which every old marker must still be found in the history
(the terminals' history limit is the contract's default, 10000)."""


@recorded
class TerminalMachine(RuleBasedStateMachine):
    """Drives one target; subclasses bind it (see :meth:`bind`). Every rule and invariant it runs is
    recorded in ``steps`` (:func:`stateful.run_record.recorded`)."""

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
        self.world = World(self.target, self.config)
        clauses.program_started()  # what this program goes on past is its own (a failure names it)
        self.rules_run = 0
        self.steps: list[str] = []
        """Each rule and invariant call so far, as Hypothesis prints a step (see :mod:`stateful.run_record`)."""

    def _add_results_to_targets(self, targets: Any, results: Any) -> None:
        """Hypothesis names a rule's result (``pairs_0``) here, after the rule returned: the recorded
        step gets its name, as Hypothesis prints it (``pairs_0 = state.launch(...)``)."""
        super()._add_results_to_targets(targets, results)
        names = self._last_names(len(targets) * len(results))
        if self.steps and names:
            self.steps[-1] = " = ".join(names) + " = " + self.steps[-1]

    @property
    def live(self) -> list[Agent]:
        return self.world.live

    def _turn(self, agent: Agent, steps: Sequence[Sequence[Call]]) -> list[list[Judgement]]:
        return run_turn(self.world, agent, steps)

    # -- selection ------------------------------------------------------------------------------------

    def _agent(self, index: int) -> Agent:
        """An open agent session, by a drawn index modulo how many are open."""
        return self.live[index % len(self.live)]

    def _agent_of(self, ref: PairRef) -> Agent:
        """The session a pair was named in; if that session was deleted, an open one (by index)."""
        for agent in self.live:
            if agent.index == ref.agent:
                return agent
        return self._agent(ref.agent)

    def _at(self, ref: PairRef) -> PairRef:
        """``ref`` as addressed now: in the session :meth:`_agent_of` picks (what messages print)."""
        return replace(ref, agent=self._agent_of(ref).index)

    def _pair(self, ref: PairRef) -> tuple[Agent, PairState | None, Shell | None]:
        agent = self._agent_of(ref)
        pair = agent.model.pair(ref.terminal, ref.session) if ref.terminal in agent.model.declared else None
        shell = agent.shells.get(pair.instance) if pair is not None else None
        return agent, pair, shell

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

    def _pick(self, index: int, mode: str, terminal: str | None = None) -> tuple[PairRef, Agent, PairState, Shell]:
        """An eligible pair (rules that use it have a precondition that there is one), with its
        session, state and program."""
        refs = self._eligible(mode, terminal)
        ref = refs[index % len(refs)]
        live = self._live_shell(ref)
        assert live is not None, f"{ref} was eligible, so it is live"
        return (ref, *live)

    def _live_shell(self, ref: PairRef) -> tuple[Agent, PairState, Shell] | None:
        """The pair's session, state and program, if it is live and its program can be typed into
        (not :data:`LOST`: rules then type only what needs no marker, judged by its output)."""
        agent, pair, shell = self._pair(ref)
        if pair is None or pair.life is not Life.ALIVE or shell is None or shell.mode == LOST:
            return None
        return agent, pair, shell

    # -- rules: agent sessions --------------------------------------------------------------------

    def _open_agent(self) -> Agent:
        assert self.target is not None
        session = self.target.open_session()
        index = self.world.opened
        self.world.opened += 1
        self.world.busy = True
        first = session.run_turn([list_step()], step_timeout=self.cfg.step_timeout)[0][0]
        self.world.transcript.add_line(f"agent {index} = session {session.label}; first list -> {quoted(first)}")
        launched_elsewhere = {p.socket: str(PairRef(a.index, p.terminal, p.session)) for a in self.live for p in a.model.pairs}
        judged = first_list(DECLARED, first, launched_elsewhere, tolerated(TOLERABLE))
        for clause_id, why in judged.noted:  # another session's rows: known, so left out (model.first_list)
            deviate(clause_id, f"{list_step()[0]!r} -> {quoted(first)[:160]}: {why}",
                    f"  where: the first list of agent {index} on {self.target.where}")
        model = judged.model
        agent = Agent(index, session, model)
        count_conversation(self.world, agent, [list_step()], [[first]])
        self.live.append(agent)
        event(f"agent: baseline of {len(model.baseline)} server-made pairs")
        return agent

    @initialize(target=pairs, terminal=st.sampled_from(DECLARED), name=gen.session_names())
    def start(self, terminal: str, name: str) -> PairRef:
        """Open the first agent session and launch a first pair (so that pair rules can run at once)."""
        agent = self._open_agent()
        self._turn(agent, [[tool_call(LAUNCH, {"terminal": terminal, "session": name})], list_step()])
        return PairRef(agent.index, terminal, name)

    @precondition(lambda self: len(self.live) < self.cfg.max_agents)
    @rule(same_pair=st.booleans())
    def another_agent(self, same_pair: bool) -> None:
        """Several agent sessions at once: each has its own terminals (``same_pair``: launch there
        the names of the first open session's first pair, which must start a new process)."""
        agent = self._open_agent()
        first = self.live[0].model.pairs
        if same_pair and first:
            args = {"terminal": first[0].terminal, "session": first[0].session}
            self._turn(agent, [[tool_call(LAUNCH, args)], list_step()])

    @rule()
    def list_every_agent(self) -> None:
        """List every agent session's terminals (and compare its /resources/terminals view)."""
        for a in self.live:
            self._turn(a, [list_step()])
            check_view(self.world, a)

    @rule(agent=AGENT)
    def close_all(self, agent: int) -> None:
        """Close every pair of a session in ONE reply (each close answers on its own; list is then
        empty but for the baseline; every closed terminal's processes are gone at once)."""
        a = self._agent(agent)
        if not a.model.pairs:
            event("close all: nothing to close")
            return
        step = [tool_call(CLOSE, pair_args(PairRef(a.index, p.terminal, p.session))) for p in a.model.pairs]
        event(f"close all: {min(len(step), 3)}{'+' if len(step) > 3 else ''} pairs")
        self._turn(a, [step, list_step()])
        check_view(self.world, a)

    @precondition(lambda self: len(self.live) > 1)
    @rule(agent=AGENT)
    def delete_agent(self, agent: int) -> None:
        """DELETE an agent session (§2.9): the server closes all of its terminals, so every process
        of every pair it still had is gone (polled: the contract gives DELETE no bound)."""
        self._delete(self._agent(agent))

    def _delete(self, a: Agent) -> None:
        self.world.busy = True
        a.session.delete()
        self.live.remove(a)
        event(f"delete: closes {min(len(a.model.alive()), 3)}{'+' if len(a.model.alive()) > 3 else ''} live pairs")
        for number, shell in a.shells.items():
            if shell.processes and self.world.probing and not shell.exited:
                await_gone(self.world, a, number, shell)
        exercised("session.delete")

    # -- rules: launch ------------------------------------------------------------------------------

    @rule(target=pairs, agent=AGENT, terminal=st.sampled_from(DECLARED), name=gen.session_names(),
          copies=gen.launch_copies(), deco=gen.decorations())
    def launch(self, agent: int, terminal: str, name: str, copies: int, deco: gen.Decoration) -> PairRef:
        """Launch a pair; ``copies`` > 1 issues that many launches in ONE reply (one process must start)."""
        a = self._agent(agent)
        call = tool_call(LAUNCH, {"terminal": terminal, "session": name}, deco)
        js = self._turn(a, [[call] * copies, list_step()])[0]
        statuses = sorted(j.value.get("status", "error") for j in js if isinstance(j.value, dict))
        if copies > 1:
            event(f"launch: {copies} concurrent -> {statuses.count('launched')} launched")
        return PairRef(a.index, terminal, name)

    @rule(pair=pairs, deco=gen.decorations())
    def launch_again(self, pair: PairRef, deco: gen.Decoration) -> None:
        """Launch a known pair again: already_running if it lives, launched if it was closed or exited."""
        self._turn(self._agent_of(pair), [[tool_call(LAUNCH, pair_args(pair), deco)], list_step()])

    # -- rules: typing ------------------------------------------------------------------------------

    @rule(pair=pairs, plan=gen.send_plans(), semicolon=gen.marker_semicolons(), deco=gen.decorations())
    def marker(self, pair: PairRef, plan: gen.SendPlan, semicolon: bool, deco: gen.Decoration) -> None:
        """Echo a unique marker, typed in chunks; it must show in this pair (and never elsewhere)."""
        live = self._live_shell(pair)
        if live is None:
            driving.type_sends(self.world, self._agent_of(pair), pair, [{"text": "echo not-running"}], deco,
                               read_after=False)
            return
        a, _, shell = live
        uid = checks.new_uid()
        if shell.mode == "shell":
            cmd, token = checks.shell_marker(uid, semicolon=semicolon)
        else:
            cmd, token = checks.python_marker(uid)
        driving.run_command(self.world, a, self._at(pair), shell, cmd, token, plan, deco, "marker")

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
            driving.type_sends(self.world, self._agent_of(pair), pair, [{"text": payload[:200]}], deco,
                               read_after=False)
            return
        a, _, shell = live
        ref = self._at(pair)
        for kind in gen.text_kinds(payload):
            event(f"payload: {kind}")
        uid = checks.new_uid()
        if shell.mode == "shell":
            cmd, token = checks.shell_payload(uid, payload)
        else:
            cmd, token = checks.python_payload(uid, payload)
        long_line = max(len(line.encode()) for line in cmd.split("\n")) > LONG_LINE
        if (shell.mode == "shell" and not shell.configured) or (long_line and not shell.ready):
            driving.sync(self.world, a, ref, shell)
        if long_line:
            # A line typed while the program is between reads goes through the kernel's canonical
            # line editing and is cut at 4095 bytes: such a line is typed at a prompt (the program
            # reads it as it comes), in two sends split right after the payload's literal, so that
            # a server that loses part of a long text still lets the command finish (and the wrong
            # digest shows at once instead of a command waiting for its closing quote).
            end = checks.payload_end(shell.mode, payload)
            plan = replace(plan, cuts=(gen.Cut(False, end - 1),))
            event("payload: long line")
        driving.run_command(self.world, a, ref, shell, cmd, token, plan, deco, "payload")

    @rule(pair=pairs, keys=gen.key_presses(), with_text=st.sampled_from(("absent", "empty", "null")))
    def press_keys(self, pair: PairRef, keys: str | None, with_text: str) -> None:
        """Keys only (absent = Enter); an unknown key name may be typed literally: the line is cleared."""
        a, _, shell = self._pair(pair)
        ref = self._at(pair)
        args: dict[str, Any] = {} if keys is None else {"keys": keys}
        if with_text != "absent":
            args["text"] = "" if with_text == "empty" else None
        sends = [args]
        if keys is not None and keys in gen.UNKNOWN_KEYS:
            sends.append({"keys": "C-u"})
        interrupting = self._live_shell(pair) is not None and keys is not None and "C-c" in keys.split()
        before = 0
        if interrupting:
            before = checks.interrupts(self._turn(a, [[read_call(ref, self.cfg.big_scrollback)]])[0][0].value["screen"])
        driving.type_sends(self.world, a, ref, sends, gen.Decoration(), read_after=False)
        if shell is not None:
            shell.ready = False
            shell.rows += 2
        if interrupting:
            # bash eats a key typed while it handles the interrupt: wait for its new prompt.
            driving.poll_screen(self.world, a, ref, lambda s: checks.prompt_after_interrupt(s, before),
                                "prompt after C-c")

    # -- rules: what real terminal tools break on -------------------------------------------------------

    @rule(target=pairs, agent=AGENT, terminal=st.sampled_from(DECLARED), name=gen.session_names(),
          deco=gen.decorations())
    def launch_typing(self, agent: int, terminal: str, name: str, deco: gen.Decoration) -> PairRef:
        """Launch a pair and type into it in the same reply's next call, before its shell can have
        printed a prompt (type-ahead). A pair that runs (or may still run) is only launched again."""
        a = self._agent(agent)
        ref = PairRef(a.index, terminal, name)
        pair = a.model.pair(terminal, name)
        if pair is None or pair.life is Life.DEAD:
            driving.launch_and_type(self.world, a, ref, deco)
        else:
            event("launch then type: the pair runs already")
            self._turn(a, [[tool_call(LAUNCH, pair_args(ref), deco)], list_step()])
        return ref

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK, opener=st.sampled_from(sorted(driving.UNFINISHED)), plan=gen.send_plans(), deco=gen.decorations())
    def unfinished(self, index: int, opener: str, plan: gen.SendPlan, deco: gen.Decoration) -> None:
        """A command the shell waits to see finished (a quote or a heredoc left open), then its end."""
        pair, a, _, shell = self._pick(index, "shell")
        driving.finish_unfinished(self.world, a, pair, shell, opener, plan, deco)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK)
    def flood(self, index: int) -> None:
        """A program that prints 2 MB as fast as it can; the shell's prompt must come back."""
        pair, a, _, shell = self._pick(index, "shell")
        driving.flood(self.world, a, pair, shell)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK, program=st.sampled_from(sorted(driving.FULL_SCREEN)))
    def full_screen(self, index: int, program: str) -> None:
        """A pager or an editor (where installed): shown, left, then the shell's prompt again."""
        pair, a, _, shell = self._pick(index, "shell")
        driving.full_screen(self.world, a, pair, shell, program)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK, payload=gen.payloads(), plan=gen.send_plans())
    def c_locale(self, index: int, payload: str, plan: gen.SendPlan) -> None:
        """A text printed back by a program under the C locale, then its md5 as typed."""
        pair, a, _, shell = self._pick(index, "shell")
        driving.c_locale_payload(self.world, a, pair, shell, payload, plan)

    # -- rules: reading and listing -----------------------------------------------------------------

    @rule(pair=pairs, scrollback=gen.scrollbacks(), deco=gen.decorations())
    def read(self, pair: PairRef, scrollback: Any, deco: gen.Decoration) -> None:
        """A read; a big scrollback is drawn small once the session's conversation is large (every
        model call carries each screen read so far: :mod:`stateful.conversation`)."""
        a = self._agent_of(pair)
        if self.world.budgeted:
            sent = conversation.read_scrollback(scrollback, a.conversation, self.cfg.conversation_budget)
            if sent != scrollback:
                event("read: big scrollback drawn small (the conversation is large)")
            scrollback = sent
        args = pair_args(pair) if scrollback is ... else pair_args(pair, scrollback=scrollback)
        self._turn(a, [[tool_call(READ, args, deco)]])

    @rule(pair=pairs, value=gen.bad_scrollbacks())
    def read_bad_scrollback(self, pair: PairRef, value: Any) -> None:
        """A scrollback that is not a non-negative integer (booleans first: JSON true is no integer)."""
        self._turn(self._agent_of(pair), [[tool_call(READ, pair_args(pair, scrollback=value))]])

    @rule(agent=AGENT, deco=gen.decorations())
    def list_terminals(self, agent: int, deco: gen.Decoration) -> None:
        a = self._agent(agent)
        self._turn(a, [[tool_call(LIST, {}, deco)]])
        check_view(self.world, a)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK)
    def scroll(self, index: int) -> None:
        """Print more than a screen: old markers leave the visible rows but stay in the history."""
        pair, a, _, shell = self._pick(index, "shell")
        old = list(shell.markers)
        uid = checks.new_uid()
        cmd, token = checks.shell_marker(uid)
        driving.run_command(self.world, a, pair, shell, f"seq -f 'SC%g' 1 60; {cmd.removeprefix('set +H; ')}",
                            token, gen.SendPlan(), gen.Decoration(), "scroll")
        shell.rows += 62
        visible = self._turn(a, [[read_call(pair, 0)]])[0][0].value["screen"]
        if not checks.has_token(visible, token):
            deviate("read.visible", f"read with scrollback 0 of {pair} lacks the last output {token}")
        for tok, _ in old:
            if checks.has_token(visible, tok):
                deviate("read.visible", f"read with scrollback 0 of {pair} shows {tok}, printed 60+ lines earlier")
        gone_past = clauses.deviations().gone_past("read.rows-exact")
        full = self._turn(a, [[read_call(pair, self.cfg.big_scrollback)]])[0][0].value["screen"]
        if clauses.deviations().gone_past("read.rows-exact") > gone_past:
            # the read's rows were a known deviation: the history it lacks is that one, not judged twice
            event("scroll: history not judged (the read's rows were a known deviation)")
            exercised("read.visible")
            return
        for tok, at in old:
            if shell.rows - at < HISTORY_ROWS and not checks.has_token(full, tok):
                deviate("read.history", f"read with scrollback {self.cfg.big_scrollback} of {pair} lacks {tok}, "
                                     "which scrolled out of the visible rows: the history must still hold it")
        event(f"scroll: {min(len(old), 3)}{'+' if len(old) > 3 else ''} old markers found in the history")
        exercised("read.visible", "read.history" if old else "")

    # -- rules: ending terminals --------------------------------------------------------------------

    @rule(pair=pairs, deco=gen.decorations())
    def close(self, pair: PairRef, deco: gen.Decoration) -> None:
        a = self._agent_of(pair)
        self._turn(a, [[tool_call(CLOSE, pair_args(pair), deco)], list_step()])
        check_view(self.world, a)

    @precondition(lambda self: bool(self._eligible("shell")))
    @rule(index=PICK, window=st.lists(st.sampled_from(("list", "read", "send", "close", "launch")), max_size=3),
          relaunch=st.sampled_from(("no", "after-removal", "quick")), how=st.sampled_from(sorted(driving.EXITS)))
    def exit_shell(self, index: int, window: list[str], relaunch: str, how: str = "exit") -> None:
        """The shell ends (``how``: ``exit``, ``set -e`` then a failing command, ``exec true``): until
        the server notices, list/send/read/close may see it either way; then it must be removed
        (polled); then, optionally, launched again.

        Where the probe sees the terminal's processes, the window's calls come once they are gone:
        what a server answers then does not depend on how fast the shell ran ``exit``, so a program
        gives the same outcome on every replay (one that found a bug finds it again). A ``launch`` in the
        window is a relaunch before the server may have noticed the exit (omnigent 0.19.1 notices it once
        a second, and a launch before then says ``already_running`` with a new ``tmux_socket``: finding 9
        of docs/omnigent.md); launched anew, the pair is not awaited or relaunched after the window."""
        pair, a, p, shell = self._pick(index, "shell")
        self._type_exit(pair, a, p, how)
        died = self._processes_gone(shell)
        steps: list[list[Call]] = []
        for what in window:
            steps.append({"list": list_step(), "read": [read_call(pair)],
                          "send": [tool_call(SEND, pair_args(pair, text="", keys=""))],
                          "close": [tool_call(CLOSE, pair_args(pair))],
                          "launch": [tool_call(LAUNCH, pair_args(pair))]}[what])
        if steps:
            self._turn(a, steps)
        now = a.model.pair(pair.terminal, pair.session)
        if now is not None and now.life is Life.ALIVE:
            event("exit: launched again within the exit window")
            return
        if relaunch == "quick":
            exited = driving.await_exit(
                self.world, a, pair, lambda: (q := a.model.pair(pair.terminal, pair.session)) is None or q.life is Life.DEAD,
                [read_call(pair)], f"{pair} to be reported dead", "read.dead", died, driving.EXITS[how])
        else:
            exited = driving.await_exit(self.world, a, pair, lambda: a.model.pair(pair.terminal, pair.session) is None,
                                        list_step(), f"{pair} to be removed from list after its exit",
                                        "list.exit-removed", died, driving.EXITS[how])
        if relaunch != "no" and exited:
            js = self._turn(a, [[tool_call(LAUNCH, pair_args(pair))], list_step()])
            if js[0][0].value.get("status") != "launched":
                fail("launch.relaunch", f"launch after exit of {pair} did not start a new process: {js[0][0].value}")

    @precondition(lambda self: any(len(self._shells_of(a)) > 1 for a in self.live))
    @rule(agent=AGENT, how=st.sampled_from(sorted(driving.EXITS)))
    def exit_several(self, agent: int, how: str) -> None:
        """Every shell of one agent session ends, one right after another (a session with at least two):
        each must then be removed. A server that handles exits through something two pairs can share
        (omnigent 0.19.1: a table keyed by resource id, which id siblings share) loses one of them."""
        candidates = [a for a in self.live if len(self._shells_of(a)) > 1]
        a = candidates[agent % len(candidates)]
        exiting = [(ref, *live) for ref in self._shells_of(a) if (live := self._live_shell(ref)) is not None]
        event(f"exit: {min(len(exiting), 3)}{'+' if len(exiting) > 3 else ''} shells of one session")
        for ref, _, p, _ in exiting:
            self._type_exit(ref, a, p, how)
        for ref, _, _, shell in exiting:
            died = self._processes_gone(shell)
            driving.await_exit(self.world, a, ref, lambda ref=ref: a.model.pair(ref.terminal, ref.session) is None,
                               list_step(), f"{ref} to be removed from list after its exit", "list.exit-removed", died,
                               driving.EXITS[how])

    def _shells_of(self, a: Agent) -> list[PairRef]:
        """The live pairs of agent session ``a`` whose program is a shell at its prompt."""
        return [ref for ref in self._eligible("shell") if ref.agent == a.index]

    def _type_exit(self, pair: PairRef, a: Agent, p: PairState, how: str) -> None:
        """Type what ends ``pair``'s shell (``how``); exiting from then on: the exit (and its deleted
        event) may happen before the send returns."""
        a.shells[p.instance].exited = True
        a.model = a.model._with_pair(replace(p, life=Life.EXITING))
        event(f"exit: {how}")
        driving.type_sends(self.world, a, pair, driving.exit_sends(how), gen.Decoration(), read_after=False)

    def _processes_gone(self, shell: Shell) -> bool | None:
        """Whether the shell's processes were seen gone (polled); None where the probe cannot see them."""
        if not (shell.processes and self.world.probe_on(shell.socket)):
            return None
        gone = self.world.eventually("exit: processes gone",
                                     lambda: True if not self.world.probe.leftovers(shell.processes) else None)
        return bool(gone[0])

    # -- rules: an interactive program ---------------------------------------------------------------

    @precondition(lambda self: bool(self._eligible("shell", "bash")))
    @rule(index=PICK)
    def repl_start(self, index: int) -> None:
        """Start python3 in a bash pair; type nothing until its ``>>>`` prompt shows."""
        pair, a, _, shell = self._pick(index, "shell", "bash")
        driving.start_repl(self.world, a, pair, shell)

    @precondition(lambda self: bool(self._eligible("python")))
    @rule(index=PICK)
    def repl_exit(self, index: int) -> None:
        """``exit()``: wait for the shell's prompt (a REPL may swallow type-ahead), then a marker."""
        pair, a, _, shell = self._pick(index, "python")
        driving.leave_repl(self.world, a, pair, shell)

    # -- rules: argument errors and what is not addressable --------------------------------------------

    @rule(pair=pairs, bad=gen.bad_calls())
    def bad_arguments(self, pair: PairRef, bad: gen.BadCall) -> None:
        self._turn(self._agent_of(pair), [[Call(bad.tool, gen.bad_arguments(bad, pair.terminal, pair.session))]])

    @rule(agent=AGENT, terminal=st.one_of(st.sampled_from(DECLARED), gen.undeclared_terminals()),
          name=gen.session_names(), tool=st.sampled_from((SEND, READ, CLOSE, LAUNCH)), deco=gen.decorations())
    def unknown_pair(self, agent: int, terminal: str, name: str, tool: str, deco: gen.Decoration) -> None:
        """A call on a pair that may never have been launched (or an undeclared terminal); a launch
        of a declared one launches it (what the model expects either way: it knows the pairs)."""
        a = self._agent(agent)
        args = {"terminal": terminal, "session": name}
        if tool == SEND:
            args.update(text="", keys="")
        self._turn(a, [[tool_call(tool, args, deco)], list_step()] if tool in (LAUNCH, CLOSE)
                   else [[tool_call(tool, args, deco)]])

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
        args = pair_args(ref, text="", keys="") if tool == SEND else pair_args(ref)
        a = self._agent_of(pair)
        self._turn(a, [[tool_call(tool, args)], list_step()] if tool in (LAUNCH, CLOSE) else [[tool_call(tool, args)]])
        exercised("scope.names-exact")

    @precondition(lambda self: not steering.avoided("server-terminals"))
    @rule(agent=AGENT, tool=st.sampled_from((SEND, READ, CLOSE, LAUNCH)))
    def server_made(self, agent: int, tool: str) -> None:
        """The server's own terminals (the baseline) are never addressable; list keeps showing them."""
        a = self._agent(agent)
        terminal, session = a.model.baseline[0] if a.model.baseline else ("tui", "main")
        args = {"terminal": terminal, "session": session}
        if tool == SEND:
            args.update(text="", keys="")
        self._turn(a, [[tool_call(tool, args)], list_step()])
        exercised("scope.server-terminals")

    @rule(pair=pairs, other=AGENT, tool=st.sampled_from((SEND, READ, CLOSE)))
    def other_agent(self, pair: PairRef, other: int, tool: str) -> None:
        """A pair's names used in another agent session: that session has its own terminals."""
        args = pair_args(pair, text="", keys="") if tool == SEND else pair_args(pair)
        self._turn(self._agent(other), [[tool_call(tool, args)]])
        exercised("scope.session")

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
        args = pair_args(ref, text="", keys="") if tool == SEND else pair_args(ref)
        self._turn(a, [[tool_call(tool, args)], list_step()] if tool in (LAUNCH, CLOSE) else [[tool_call(tool, args)]])
        event(f"cross-session: {tool.removeprefix('sys_terminal_')} of a live pair of another session")
        exercised("scope.session")
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
        a = self._agent_of(ref)
        self._turn(a, [[tool_call(LAUNCH, pair_args(sibling), deco)], list_step()])
        check_view(self.world, a)
        event(f"id sibling: {how}")
        return sibling

    @precondition(lambda self: bool(self.bundle("pairs")))
    @rule(refs=st.lists(pairs, min_size=2, max_size=4), ops=gen.concurrency())
    def concurrent(self, refs: list[PairRef], ops: Sequence[str]) -> None:
        """Calls on distinct pairs of one agent in ONE reply: some sequential order must explain them."""
        a = self._agent_of(refs[0])
        chosen: dict[tuple[str, str], str] = {}
        for ref, op in zip(refs, ops):
            if self._agent_of(ref) is a and (ref.terminal, ref.session) not in chosen:
                chosen[(ref.terminal, ref.session)] = op
        step: list[Call] = []
        for (terminal, session), op in chosen.items():
            ref = PairRef(a.index, terminal, session)
            step.append({"read": read_call(ref, 10), "list": tool_call(LIST, {}),
                         "close": tool_call(CLOSE, pair_args(ref)), "launch": tool_call(LAUNCH, pair_args(ref)),
                         "send-nothing": tool_call(SEND, pair_args(ref, text="", keys=""))}[op])
        event(f"concurrent: {len(step)} calls")
        self._turn(a, [step, list_step()])

    # -- invariants and teardown ------------------------------------------------------------------------

    @invariant()
    def live_pairs_have_private_servers(self) -> None:
        """Runs after every rule that returned: so the rule is over (see ``World.busy``). Then a
        session whose conversation is near its budget makes way for a fresh one."""
        check_private_servers(self.world)
        self._move_on_from_spent_sessions()
        self.world.busy = False
        self.rules_run += 1

    def _move_on_from_spent_sessions(self) -> None:
        """DELETE every agent session whose conversation is near its budget, and open a fresh
        one in its place: every model call carries the whole conversation, and a program must stay
        one that a correct server (and its model API) can run (:mod:`stateful.conversation`). Its
        pairs' names then address the open sessions, as after ``delete_agent``; the DELETE is checked
        as there (every process of its terminals gone)."""
        if not self.world.budgeted:
            return
        budget = self.cfg.conversation_budget
        for a in [a for a in self.live if conversation.spent(a.conversation, self.world.largest_turn, budget)]:
            self.world.transcript.add_line(
                f"agent {a.index}: conversation {a.conversation} bytes (the largest turn {self.world.largest_turn}), "
                f"near its budget ({budget}): deleted, a fresh session takes its place")
            event("agent: moved on to a fresh session (conversation budget)")
            self._delete(a)
            self._open_agent()

    def teardown(self) -> None:
        """Only cleans up: DELETE every open agent session (bulk closes and DELETE are checked by
        the ``close_all`` and ``delete_agent`` rules, like any other step, and shrink like them).

        After a program that passed, a violation found by a check the target runs before a DELETE
        (the sessions target's last walk of the items' pages) is reported, and a server that fails
        the DELETE is a failure of the target (never a repro); any other error of a DELETE (the
        tester's own, an unexpected answer) is raised as it is, with a note naming the agent and every
        other DELETE's error: a teardown drops nothing. After a failed rule nothing but that rule's
        failure is reported."""
        event(f"program: {self.rules_run // 10 * 10}+ rules")
        ending = sys.exc_info()[1]
        if ending is not None:  # the violation (or error) ending this run keeps what the run did
            transcript = self.world.transcript
            transcript.flush()
            run_record.attach(ending, run_record.RunRecord(tuple(self.steps), tuple(transcript.lines),
                                                           tuple(transcript.screens.items())))
        errors, target_failed = [], False
        violation: ContractViolation | None = None
        unexpected: Exception | None = None
        deleted = self.target.delete_sessions([a.session for a in self.live]) if self.target and self.live else []
        for a, exc in zip(self.live, deleted):
            if isinstance(exc, ContractViolation):  # a check the target runs before a DELETE (the items' pages)
                violation = violation or exc
            elif exc is not None:
                errors.append(f"deleting agent {a.index}: {type(exc).__name__}: {exc}")
                target_failed = target_failed or isinstance(exc, TargetError)
                if unexpected is None and not isinstance(exc, TargetError):
                    unexpected = exc
        if self.world.busy:
            return
        if violation is not None:
            if errors:
                violation.add_note(f"the teardown's other DELETEs failed too: {'; '.join(errors)}")
            raise violation
        if target_failed:
            raise TargetError("; ".join(errors))
        if unexpected is not None:
            unexpected.add_note(f"raised by the teardown's DELETEs: {'; '.join(errors)}")
            raise unexpected

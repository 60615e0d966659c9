"""Driving the programs in the panes: typing commands into a shell or a Python REPL and waiting,
through reads, for what they print.

A command is typed as one or more sends (how a model would split it, :func:`stateful.strategies.split_command`)
and ends in a marker: output the program computes (``MK_42_<uid>``, or the md5 of a payload), so that
the marker's showing proves the text arrived as written and ran. Nothing is typed into a REPL before
its prompt shows; a line over 4 KiB is only typed while the program is known to read. When the
awaited output never shows, the failure says what the screen shows about the text typed
(:func:`stateful.checks.diagnose_typed`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import event

from stateful import causes, checks, steering
from stateful import strategies as gen
from stateful.after_turn import run_turn
from stateful.clauses import deviate, fail
from stateful.model import Judgement, describe
from stateful.waiting import Wait
from stateful.world import (
    LAUNCH,
    LOST,
    SEND,
    Agent,
    PairRef,
    Shell,
    Typed,
    World,
    exercised,
    pair_args,
    read_call,
    tool_call,
)

__all__ = ["type_sends", "run_command", "sync", "resync", "poll_screen", "start_repl", "leave_repl", "await_exit",
           "UNFINISHED", "finish_unfinished", "FLOOD", "flood", "launch_and_type", "FULL_SCREEN", "full_screen",
           "c_locale_payload", "EXITS", "exit_sends"]

EXIT_REMOVAL = 2.0
"""§1 list: a pair whose process exited is removed by the server within 2 s."""


def type_sends(world: World, agent: Agent, ref: PairRef, sends: Sequence[dict[str, Any]], deco: gen.Decoration,
               *, read_after: bool = True) -> Judgement | None:
    """Type (several sends in one turn, one per step), then optionally read in the same turn; the
    read's judgement, or None if a send was not ``sent`` (or nothing was read)."""
    steps = [[tool_call(SEND, pair_args(ref, **s), deco)] for s in sends]
    if read_after:
        steps.append([read_call(ref, world.cfg.big_scrollback)])
    judged = run_turn(world, agent, steps)
    for js in judged[: len(sends)]:
        if js[0].value != {"status": "sent"}:
            return None
    return judged[-1][0] if read_after else None


def poll_screen(world: World, agent: Agent, ref: PairRef, done: Callable[[str], bool], what: str,
                first: Judgement | None = None, typed: Typed | None = None, *, may_go_on: bool = False,
                echo_kept: bool = True) -> str | None:
    """Read the pair (large scrollback) until ``done(screen)``; bounded by the poll deadline.

    On time-out the failure says what the screen shows about ``typed`` (the command whose effect
    was awaited): a text that did not arrive as written, a line never submitted, or output
    that never showed. With ``may_go_on``, a text that did not arrive as written, a deviation the
    run knows, is noted and None returned: the caller resynchronises the program. ``echo_kept``
    False: the command prints more than the history holds, so a screen can still show a line never
    submitted (its whole echo on the last row) but can no longer tell a text that did not arrive."""
    pending: list[Any] = [first.value] if first is not None else []  # a read made with the sends
    screens: list[str] = []  # the last screen seen

    def shown() -> str | None:
        value = pending.pop() if pending else \
            run_turn(world, agent, [[read_call(ref, world.cfg.big_scrollback)]])[0][0].value
        if not (isinstance(value, dict) and isinstance(value.get("screen"), str)):
            fail("read.output-shows", f"waiting for {what} in {ref}: the read failed: {value!r}")
        screens[:] = [value["screen"]]
        return value["screen"] if done(value["screen"]) else None

    screen, _ = world.eventually(f"read: {what.split(' ')[0]} shown", shown)
    if screen is not None:
        ran = typed is not None and bool(typed.uid)  # its marker's output: typed as written, and submitted
        exercised("read.output-shows", "send.text-literal" if ran else "", "send.keys" if ran else "")
        return screen
    tail = "\n".join(f"    | {row}" for row in screens[0].rstrip("\n").split("\n")[-30:])
    clause, cause = "read.output-shows", "it never showed"
    if typed is not None:
        clause, cause = checks.diagnose_typed(screens[0], typed.text, typed.chunks, typed.uid)
        if checks.typed_echo(screens[0], typed.text, typed.uid) is None and world.cfg.big_scrollback > causes.BIG_SCROLLBACK:
            # The screen does not show the command at all: a server whose big reads show less than they
            # should (a capped scrollback) would hide it. Looked for once more with a smaller one, so the
            # diagnosis rests on what the pane holds, not on another deviation of the reads.
            again = run_turn(world, agent, [[read_call(ref, causes.BIG_SCROLLBACK)]])[0][0].value
            if isinstance(again, dict) and isinstance(again.get("screen"), str) \
                    and checks.typed_echo(again["screen"], typed.text, typed.uid) is not None:
                screens[0] = again["screen"]
                clause, cause = checks.diagnose_typed(screens[0], typed.text, typed.chunks, typed.uid)
        tail = "\n".join(f"    | {row}" for row in screens[0].rstrip("\n").split("\n")[-30:])
        if not echo_kept and clause == "send.text-literal":
            clause, cause = "read.output-shows", ("it never showed (the command prints more than the history "
                                                  "holds: what remains of its echo tells nothing of the text)")
    named = causes.text_causes(typed.chunks) if typed is not None and clause == "send.text-literal" else ()
    triggers = tuple(c for c in named if c in steering.TRIGGERS)
    if may_go_on and clause == "send.text-literal":
        deviate(clause, f"{what} not shown in {ref} within {world.waited()}: {cause}",
                "  last screen (tail):", tail, triggers=triggers, causes=named)
        return None
    fail(clause, f"{what} not shown in {ref} within {world.waited()}: {cause}",
         "  last screen (tail):", tail, triggers=triggers, causes=named)


def run_command(world: World, agent: Agent, ref: PairRef, shell: Shell, cmd: str, token: str,
                plan: gen.SendPlan, deco: gen.Decoration, what: str, *, echo_kept: bool = True,
                resync_if_lost: bool = True) -> None:
    """Type ``cmd`` per ``plan``; the output ``token`` must show, followed by a prompt.

    ``echo_kept`` False: the command prints more than the history holds, so its echo is gone from
    every screen and no screen can tell a text that did not arrive (a time-out then says only that
    the output never showed, never that the text was cut). ``resync_if_lost`` False (a plain marker,
    :func:`sync`): a text that did not arrive leaves the program :data:`LOST` instead of
    resynchronising it (with yet another marker)."""
    sends = gen.split_command(cmd, plan)
    event(f"type: {len(sends)} sends, finish {plan.finish}")
    shell.ready = False
    first = type_sends(world, agent, ref, sends, deco)
    if first is None:
        fail("send.sent", f"typing into the live {ref} failed (see the outputs above)",
             triggers=steering.text_triggers(str(s.get("text") or "") for s in sends),
             causes=causes.text_causes(str(s.get("text") or "") for s in sends))
    uid = token.rsplit("_", 1)[1]
    world.owners[uid] = (agent.index, ref.terminal, ref.session)
    typed = Typed(cmd, tuple(str(s.get("text") or "") for s in sends), uid)

    plain = echo_kept and cmd.isascii() and cmd.isprintable()
    named = causes.text_causes(typed.chunks)
    lost: list[bool] = []  # a known deviation: the text did not arrive, and the run goes on

    def done(screen: str) -> bool:
        for other, other_uid in checks.tokens_in(screen):
            if other_uid == uid and other != token:
                # The program answered, with another digest: the text did not arrive as written.
                echo = checks.typed_echo(screen, cmd, uid)
                difference = checks.text_difference(cmd, echo[0], typed.chunks) if echo else None
                deviate("send.text-literal",
                        f"{ref}: the program computed {other} for the text typed, expected {token}: the text did "
                        f"not arrive as written" + (f": {difference}" if difference else "")
                        + f" ({len(cmd)} characters typed in {len(sends)} sends)",
                        triggers=steering.text_triggers(typed.chunks), causes=named)
                lost.append(True)
                return True
        if checks.has_token(screen, token):
            return checks.prompt_follows(screen, token)
        cut = checks.cut_tokens(screen, uid)
        if cut:
            # The command ran and printed its marker short of the id's end: the text lost its last
            # characters, and the output will never come whole (no need to wait out the deadline).
            return will_not_show(screen, f"the command ran but printed {cut[-1]}: the text did not arrive as "
                                         "written (its end was lost)")
        if plain:
            # A one-line printable ASCII command is echoed exactly as typed (by the terminal or
            # the line editor), and its output comes before anything else. So an echo that
            # lost or changed characters, with the program gone on past it, is final: the
            # output will never come (no need to wait out the deadline).
            echo = checks.typed_echo(screen, cmd, uid, by_uid_only=True)  # this command's echo, no other
            if echo is not None and echo[1] and not cmd.startswith(echo[0]):
                difference = checks.text_difference(cmd, echo[0], typed.chunks)
                return will_not_show(screen, f"the text did not arrive as written: {difference}; the program went on "
                                             "without it")
        return False

    def will_not_show(screen: str, why: str) -> bool:
        """What a screen shows says the output will never come: a known deviation, noted (else it fails)."""
        deviate("send.text-literal", f"{what} output {token} will not show in {ref}: {why}",
                "  screen (tail):", *(f"    | {row}" for row in screen.rstrip("\n").split("\n")[-8:]),
                triggers=steering.text_triggers(typed.chunks), causes=named)
        lost.append(True)
        return True

    if poll_screen(world, agent, ref, done, f"{what} output {token}", first, typed, may_go_on=True,
                   echo_kept=echo_kept) is None or lost:
        if not resync_if_lost:
            # A resync's own plain marker did not arrive as written either (a server that loses
            # something of every text): what the program waits for can no longer be known. Nothing
            # more is typed into it; every check that needs no typing (reads, lists, close, the
            # ground truth) goes on.
            event("send: the program's state is lost (its resync's marker did not arrive as written)")
            shell.mode, shell.ready = LOST, False
            return
        resync(world, agent, ref, shell)
        return
    shell.rows += 2 * (len(cmd) // 70 + 2) + cmd.count("\n") * 2
    shell.markers.append((token, shell.rows))
    shell.ready = True
    if shell.mode == "shell":
        shell.configured = shell.configured or cmd.startswith("set +H")


def sync(world: World, agent: Agent, ref: PairRef, shell: Shell) -> None:
    """A plain marker: the program is at its prompt afterwards (and, in a shell, ``set +H`` ran)."""
    uid = checks.new_uid()
    cmd, token = checks.shell_marker(uid) if shell.mode == "shell" else checks.python_marker(uid)
    run_command(world, agent, ref, shell, cmd, token, gen.SendPlan(), gen.Decoration(), "sync", resync_if_lost=False)


def resync(world: World, agent: Agent, ref: PairRef, shell: Shell) -> None:
    """After a text that did not arrive as written (a known deviation), the program's state is
    unknown: interrupt whatever it waits for (an unclosed quote, a half-typed command), wait for the
    prompt that follows the interrupt, then a plain marker (:func:`sync`)."""
    event("send: resynchronised after a known deviation")
    before = checks.interrupts(run_turn(world, agent, [[read_call(ref, world.cfg.big_scrollback)]])[0][0].value["screen"])
    type_sends(world, agent, ref, [{"keys": "C-c"}], gen.Decoration(), read_after=False)
    shell.ready = False
    shell.rows += 2
    poll_screen(world, agent, ref, lambda s: checks.prompt_after_interrupt(s, before), "prompt after C-c")
    sync(world, agent, ref, shell)


def start_repl(world: World, agent: Agent, ref: PairRef, shell: Shell) -> None:
    """Start python3 in a bash pane; type nothing until its ``>>>`` prompt shows, then a marker.
    The REPL's process joins those the probe must see gone after a close."""
    type_sends(world, agent, ref, [{"text": "python3 -q"}], gen.Decoration(), read_after=False)
    shell.ready = False
    poll_screen(world, agent, ref, lambda s: checks.last_row(s) == ">>>", "python prompt",
                typed=Typed("python3 -q", ("python3 -q",)))
    shell.mode, shell.ready = "python", True
    shell.rows += 2
    if shell.processes and world.probing:
        view = world.probe.view(shell.socket)
        shell.processes = tuple(sorted(set(shell.processes) | set(view.members), key=lambda r: r.pid))
    uid = checks.new_uid()
    cmd, token = checks.python_marker(uid)
    run_command(world, agent, ref, shell, cmd, token, gen.SendPlan(), gen.Decoration(), "repl")


def leave_repl(world: World, agent: Agent, ref: PairRef, shell: Shell) -> None:
    """``exit()``: wait for the shell's prompt (a REPL may swallow type-ahead), then a marker."""
    type_sends(world, agent, ref, [{"text": "exit()"}], gen.Decoration(), read_after=False)
    poll_screen(world, agent, ref, lambda s: any(r.strip() for r in checks.rows_after(s, ">>> exit()")),
                "shell prompt after exit()", typed=Typed("exit()", ("exit()",)))
    shell.mode, shell.ready = "shell", False
    sync(world, agent, ref, shell)


def await_exit(world: World, agent: Agent, ref: PairRef, done: Callable[[], bool], step: list[Any], what: str,
               clause: str, died: bool | None, typed: tuple[str, ...] = ("exit",)) -> bool:
    """Run ``step`` until ``done()`` after an ``exit`` was typed into ``ref``: True once it is; False
    where the exit's own text did not arrive as written (a known deviation: the program goes on, the
    pair still exiting in the model).

    Where the probe saw the terminal's processes gone (``died``; None where it cannot see them),
    the contract's own bound applies: a step *begun* more than 2 s after they were seen gone (so
    more than 2 s after they died), and not the first since, must find the pair removed; where the
    run's turns are measurably slow, the 2 s grow by that much (:class:`stateful.waiting.Wait`: the
    contract's times are the server's, not the tester's scheduler's). A step begun earlier may
    still see it however long the step takes (a slow server's turn of 3 s is no violation). On
    time-out, what the pane shows tells an ``exit`` that never ran (the keys) from one that ran
    (the exit watcher)."""
    removal = Wait(EXIT_REMOVAL, world.slowness)  # the processes were seen gone just before this
    within = 0.0 if died is False else None  # never exited: look (twice); else bounded by the poll deadline
    late: list[float] = []

    def settled() -> bool | None:
        if done():
            return True
        began = removal.look()
        run_turn(world, agent, [step])
        removal.looked(began)
        if done():
            return True
        if died and removal.over(began):
            late.append(began - removal.started)
            return False
        return None

    ok, _ = world.eventually("exit: settled", settled, within)
    if not ok:
        cause = ""
        pane = world.panes(agent).get(f"{ref.terminal}:{ref.session}")
        if late:
            cause = (f"its processes had exited, and a step begun {late[0]:.1f} s after they were seen gone "
                     f"(look {removal.looks} since) still shows it (the contract gives the server {EXIT_REMOVAL:.0f} s, "
                     f"this run waited {removal.deadline - removal.started:.1f} s: its turns take up to "
                     f"{world.slowness():.1f} s)")
        elif pane is not None and died is not True:
            diagnosed, cause = checks.diagnose_typed(pane, typed[-1], typed, None)
            if diagnosed == "send.text-literal":
                # The exit never ran: its text did not arrive. Known, the program goes on: the pair stays
                # exiting in the model (alive or not, as far as the contract lets a client know), and
                # nothing more is typed into its program, whose state is unknown.
                deviate(diagnosed, f"timed out waiting for {what}: {cause}", f"  model: {describe(agent.model)}",
                        triggers=steering.text_triggers(typed), causes=causes.text_causes(typed))
                pair = agent.model.pair(ref.terminal, ref.session)
                shell = agent.shells.get(pair.instance) if pair is not None else None
                if shell is not None:
                    shell.mode, shell.ready = LOST, False
                return False
            if diagnosed == "send.keys":
                clause = diagnosed
            elif diagnosed == "read.output-shows":
                cause = f"`{'; '.join(typed)}` ran (the pane shows it), but the server did not notice the exit"
        fail(clause, f"timed out waiting for {what}" + (f": {cause}" if cause else ""),
             f"  model: {describe(agent.model)}")
    exercised(clause)
    return True


# -- what real terminal tools break on (issue 23) --------------------------------------------------

UNFINISHED: dict[str, tuple[str, str]] = {
    "single-quote": ("echo 'UF1", "UF2'"),
    "double-quote": ('echo "UF1', 'UF2"'),
    "heredoc": ("cat <<'UF_END'", "UF2\nUF_END"),
    "backslash": ("echo UF1 \\", "UF2"),
}
"""Commands typed in two parts: the first leaves the shell waiting for more (a quote or a heredoc
left open, a line ending in a backslash), the second finishes it."""


def finish_unfinished(world: World, agent: Agent, ref: PairRef, shell: Shell, opener: str,
                      plan: gen.SendPlan, deco: gen.Decoration) -> None:
    """Type a command the shell cannot run yet and read (the shell now shows its continuation prompt,
    not its prompt: nothing waits for one, a prompt that never comes is no server bug), then finish
    it, with a marker after it on a line of its own: the marker must show, then a prompt."""
    first, rest = UNFINISHED[opener]
    shell.ready = False
    type_sends(world, agent, ref, [{"text": first}], deco)
    shell.rows += 2
    event(f"unfinished: {opener}")
    uid = checks.new_uid()
    marker, token = checks.shell_marker(uid)
    run_command(world, agent, ref, shell, f"{rest}\n{marker}", token, plan, deco, "unfinished")


FLOOD = "yes | head -c 2000000"
"""A program that prints 2 MB (a million rows) as fast as it can."""
FLOOD_ROWS = 1_000_000


def flood(world: World, agent: Agent, ref: PairRef, shell: Shell) -> None:
    """Print a million rows at once; the marker after them must show, then a prompt (what scrolled
    out is beyond the history: no old marker is required there any more)."""
    uid = checks.new_uid()
    marker, token = checks.shell_marker(uid)
    run_command(world, agent, ref, shell, marker.replace("; ", f"; {FLOOD}; ", 1), token, gen.SendPlan(),
                gen.Decoration(), "flood", echo_kept=False)
    shell.rows += FLOOD_ROWS


def launch_and_type(world: World, agent: Agent, ref: PairRef, deco: gen.Decoration) -> None:
    """Launch a pair that is not running and, in the same turn, type a marker at once: before the
    shell can have printed its first prompt (§1: type-ahead may be echoed, it is not lost). The
    marker is a short line (a line over 4095 bytes typed before the program reads may be cut)."""
    uid = checks.new_uid()
    cmd, token = checks.shell_marker(uid)
    judged = run_turn(world, agent, [[tool_call(LAUNCH, pair_args(ref), deco)], [tool_call(SEND, pair_args(ref, text=cmd))]])
    if judged[1][0].value != {"status": "sent"}:
        fail("send.sent", f"typing into {ref} right after its launch failed (see the outputs above)")
    pair = agent.model.pair(ref.terminal, ref.session)
    shell = agent.shells.get(pair.instance) if pair is not None else None
    assert shell is not None, f"{ref} was launched, so the run knows its program"
    world.owners[uid] = (agent.index, ref.terminal, ref.session)
    poll_screen(world, agent, ref, lambda s: checks.has_token(s, token) and checks.prompt_follows(s, token),
                f"type-ahead output {token}", typed=Typed(cmd, (cmd,), uid))
    shell.rows += 4
    shell.markers.append((token, shell.rows))
    shell.ready = shell.configured = True


FULL_SCREEN: dict[str, tuple[str, Callable[[list[str]], bool], tuple[dict[str, Any], ...]]] = {
    "less": ("seq -f 'PG%g' 1 300 | less",
             lambda rows: "PG1" in rows and (rows[-1] == ":" or rows[-1].endswith("(END)")),
             ({"text": "q", "keys": ""},)),
    "man": ("MANPAGER=less PAGER=less man ls", lambda rows: "Manual page" in rows[-1], ({"text": "q", "keys": ""},)),
    "vi": ("vi -u NONE", lambda rows: rows.count("~") >= 3, ({"keys": "Escape"}, {"text": ":q!"})),
}
"""Full-screen programs: the command that starts one, what its screen shows (the rows, right-stripped,
blank ones at the end left out) and the sends that leave it. ``man`` is told its pager (less's
prompt is what shows it), so that a host whose man pages to ``cat`` is not taken for a hang."""


def full_screen(world: World, agent: Agent, ref: PairRef, shell: Shell, program: str) -> None:
    """Start a pager or editor, wait until it shows, leave it, wait for the shell's prompt, then a
    marker. Where the program is not installed (or has nothing to show: ``man`` without pages) the
    command's status runs a marker of its own instead, and nothing is left."""
    start, shows, leave = FULL_SCREEN[program]
    uid = checks.new_uid()
    token = f"MK_42_{uid}"
    cmd = f"set +H; {start} || echo -E MK_$((6*7))_{uid}"
    world.owners[uid] = (agent.index, ref.terminal, ref.session)
    shell.ready = False
    type_sends(world, agent, ref, [{"text": cmd}], gen.Decoration(), read_after=False)
    shell.rows += 3

    def rows(screen: str) -> list[str]:
        return [r.rstrip() for r in screen.rstrip().split("\n")]

    screen = poll_screen(world, agent, ref, lambda s: shows(rows(s)) or checks.has_token(s, token),
                         f"{program} or its absence ({token})", typed=Typed(cmd, (cmd,), uid))
    if checks.has_token(screen, token):
        event(f"full screen: {program} absent")
    else:
        event(f"full screen: {program} shown and left")
        type_sends(world, agent, ref, leave, gen.Decoration(), read_after=False)
        # the command's echo may wrap inside its marker id, or end exactly at the pane's width
        poll_screen(world, agent, ref, lambda s: not shows(rows(s)) and checks.text_follows(s, uid),
                    f"the shell's prompt after leaving {program}",
                    typed=Typed(leave[-1].get("text") or "", tuple(str(s.get("text") or "") for s in leave)))
    sync(world, agent, ref, shell)


def c_locale_payload(world: World, agent: Agent, ref: PairRef, shell: Shell, payload: str, plan: gen.SendPlan) -> None:
    """A text printed back by a program running under the C locale (bytes it does not decode), then
    its md5 as typed: the digest must show, then a prompt."""
    uid = checks.new_uid()
    cmd, token = checks.shell_payload(uid, payload)
    event("payload: printed back under LC_ALL=C")
    run_command(world, agent, ref, shell, f"set +H; LC_ALL=C printf '%s\\n' {shlex.quote(payload)}; {cmd}", token,
                plan, gen.Decoration(), "c-locale")
    shell.rows += payload.count("\n") + len(payload) // 70 + 1


EXITS: dict[str, tuple[str, ...]] = {
    "exit": ("exit",),
    "set-e": ("set -e", "false"),
    "exec": ("exec true",),
}
"""Ways a shell ends: ``exit``; ``set -e`` then a failing command (the shell exits on its own: an
exit nobody typed); ``exec`` of a program that exits at once."""


def exit_sends(how: str) -> list[dict[str, Any]]:
    """The sends that end the shell ``how`` (one command per send, each with Enter)."""
    return [{"text": text} for text in EXITS[how]]

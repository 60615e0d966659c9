"""Issue 23's inputs that real terminal tools break on, each replayed as a short program on the
correct direct target (it must pass), and the million-row flood with Enter never pressed (a
planted fault): the failure must point at the keys, not at output that never showed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stateful.clauses import clause_of
from stateful.machine import MachineConfig, TerminalMachine
from stateful.minimize import replay_program
from stateful.reference import faults
from stateful.targets.registry import open_target

START = "pairs_0 = state.start(terminal='bash', name='main')"
PLAN = "SendPlan(cuts=(), finish='default')"
DECO = "Decoration()"


@pytest.fixture
def direct_machine() -> Iterator[type[TerminalMachine]]:
    with open_target("direct") as target:
        machine = type("InputsReplay", (TerminalMachine,), {})
        machine.bind(target, MachineConfig())
        yield machine


@pytest.mark.parametrize("steps", [
    ["state.flood(index=0)", "state.read(pair=pairs_0, scrollback=0, deco=" + DECO + ")"],
    ["state.full_screen(index=0, program='less')", "state.full_screen(index=0, program='vi')"],
    *[[f"state.unfinished(index=0, opener={opener!r}, plan={PLAN}, deco={DECO})"]
      for opener in ("single-quote", "double-quote", "heredoc", "backslash")],
    [f"state.c_locale(index=0, payload='é\\u200b\\u202e', plan={PLAN})"],
    [f"pairs_1 = state.launch_typing(agent=0, terminal='bash', name='ahead', deco={DECO})"],
    ["state.exit_shell(index=0, window=[], relaunch='after-removal', how='set-e')"],
    # launched again at once, the moment its processes are gone (before a server may have noticed the exit)
    ["state.exit_shell(index=0, window=['launch'], relaunch='no', how='exit')", "state.read(pair=pairs_0, scrollback=0, deco=" + DECO + ")"],
    ["state.exit_shell(index=0, window=['launch', 'launch', 'read'], relaunch='quick', how='exit')"],
    ["state.exit_shell(index=0, window=['close', 'launch'], relaunch='after-removal', how='exec')"],
    ["state.exit_shell(index=0, window=['launch', 'close'], relaunch='after-removal', how='exit')"],
], ids=["flood", "pager-and-editor", "single-quote", "double-quote", "heredoc", "backslash", "c-locale",
        "type-ahead", "set-e", "relaunch-in-window", "relaunch-twice-in-window", "close-then-launch-in-window",
        "launch-then-close-in-window"])
def test_each_new_input_passes_on_the_correct_stack(direct_machine: type[TerminalMachine], steps: list[str]) -> None:
    failure = replay_program(direct_machine, [START, *steps])
    assert failure is None, f"{type(failure).__name__}: {failure}"


def test_a_flood_never_submitted_points_at_the_keys(direct_machine: type[TerminalMachine]) -> None:
    """A run of CI saw this program reported as output that never showed (`read.output-shows`): the
    flood's echo is judged as no text, but a line never submitted still shows whole on the last row."""
    with faults.activated("keys-default-none"):
        failure = replay_program(direct_machine, [START, "state.flood(index=0)"])
    assert failure is not None and clause_of(failure) == "send.keys", f"{type(failure).__name__}: {failure}"

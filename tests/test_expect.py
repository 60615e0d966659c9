"""Plain repros of concurrent calls, offline: the writer's text run on scripted outputs.

A plain repro (``stateful.plain``) is written from a recorded program (``stateful.expect`` judges the
recorded turns again). Here the recordings are made up, the repro is rendered as the writer renders
it, and its test function is run with a fake ``Agent`` whose turns return scripted outputs instead of
asking a server: the outputs of the buggy server (the repro must fail for the clause, by an
assertion, not by an error in the repro) and those of a correct server in every order its
concurrent calls may complete in (the repro must pass). CONTRACT §1: concurrent launches of one pair
start one process, exactly one says ``launched`` and the others ``already_running`` with its socket.
tests/test_faults.py proves the same on the embedded stack (``double-launch``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from stateful.expect import Check, fails, holds, plan
from stateful.model import Call
from stateful.plain import render
from stateful.recording import Op

SID = "s-1"
LAUNCH, LIST, READ = "sys_terminal_launch", "sys_terminal_list", "sys_terminal_read"
MAIN = json.dumps({"terminal": "bash", "session": "main"})
X = json.dumps({"terminal": "bash", "session": "x"})


def launch(session: str, socket: str, status: str) -> str:
    return json.dumps({"terminal": "bash", "session": session, "tmux_socket": socket, "has_os_env": True,
                       "status": status})


def listed(*rows: tuple[str, str]) -> str:
    return json.dumps([{"terminal": "bash", "session": s, "command": "bash", "running": True, "has_os_env": True,
                        "tmux_socket": sock} for s, sock in rows])


def turn(step: tuple[int, str], calls: list[list[Call]], outputs: list[list[str]]) -> Op:
    return Op("turn", SID, step, steps=calls, outputs=outputs)


START = (1, "pairs_0 = state.start(terminal='bash', name='main')")
COPIES = (2, "state.launch(agent=0, copies=2, terminal='bash', name='x', deco=...)")
AGAIN = (3, "state.launch_again(pair=pairs_1, deco=...)")


def opening() -> list[Op]:
    """The first agent session, its baseline, and a pair ``main`` launched at /s/main."""
    return [Op("open", SID, START, terminals={"bash": {"command": "bash"}}),
            turn(START, [[Call(LIST, "{}")]], [["[]"]]),
            turn(START, [[Call(LAUNCH, MAIN)], [Call(LIST, "{}")]],
                 [[launch("main", "/s/main", "launched")], [listed(("main", "/s/main"))]])]


def copies(first: str, second: str, socket: str = "/s/x", other: str = "/s/x") -> Op:
    """launch(copies=2) of ``x``: the two answers, then a list."""
    return turn(COPIES, [[Call(LAUNCH, X), Call(LAUNCH, X)], [Call(LIST, "{}")]],
                [[launch("x", socket, first), launch("x", other, second)],
                 [listed(("main", "/s/main"), ("x", socket))]])


class ScriptedAgent:
    """The repro's Agent, its turns answered from ``script`` (one list of outputs per step)."""

    def __init__(self, script: Iterator[list[list[str]]], *_: Any) -> None:
        self.script = script

    def turn(self, steps: list) -> list:
        outputs = next(self.script)
        assert [len(s) for s in outputs] == [len(s) for s in steps], (steps, outputs)
        return [[json.loads(o) for o in step] for step in outputs]


def run_repro(text: str, script: list[list[list[str]]]) -> None:
    """Run the rendered repro's test function on ``script`` (every turn's outputs, in order)."""
    namespace: dict[str, Any] = {"__name__": "plain_repro_under_test"}
    exec(compile(text, "<plain repro>", "exec"), namespace)  # noqa: S102 - the writer's own output
    turns = iter(script)
    namespace["Agent"] = lambda *args: ScriptedAgent(turns, *args)
    test = next(v for k, v in namespace.items() if k.startswith("test_") and callable(v))
    test(None, "runner", "harness", "model", "http://mock")
    assert next(turns, None) is None, "the repro did not run every turn"


def written(ops: list[Op], clause: str, program: list[str]) -> str:
    return render(plan(ops, clause), program, AssertionError(f"{clause}: made up"), "tests.e2e.conftest",
                  "http://test", "test_made_up_0123456789.py")


def outputs(ops: list[Op]) -> list[list[list[str]]]:
    return [op.outputs for op in ops if op.kind == "turn"]


def failure(text: str, script: list[list[list[str]]]) -> str:
    """The message of the assertion the repro fails with (an error of another kind propagates)."""
    with pytest.raises(AssertionError) as caught:
        run_repro(text, script)
    return str(caught.value)


def test_two_concurrent_launches_that_both_say_launched_fail_for_the_clause_whichever_order() -> None:
    ops = [*opening(), copies("launched", "launched", "/s/x1", "/s/x2")]
    text = written(ops, "launch.already-running", [START[1], COPIES[1]])
    assert "outs[0][0:2]" in text  # both launches are checked together
    recorded = outputs(ops)
    assert failure(text, recorded).startswith("launch.already-running: step 2, 2 concurrent launch(")
    fine = recorded[:2]
    for first, second in (("launched", "already_running"), ("already_running", "launched")):
        run_repro(text, [*fine, copies(first, second).outputs])  # a correct server, either order
    both_running = [*fine, copies("already_running", "already_running").outputs]
    assert failure(text, both_running).startswith("launch.one-launched: step 2, 2 concurrent launch(")
    other_socket = [*fine, copies("launched", "already_running", "/s/x", "/s/elsewhere").outputs]
    assert failure(text, other_socket).startswith("launch.already-running: step 2")


@pytest.mark.parametrize("launched_first", [True, False], ids=["launched-first", "launched-second"])
def test_the_socket_of_concurrent_launches_is_remembered_for_the_checks_after_them(launched_first: bool) -> None:
    """The repro of the campaign's program: a pair launched by concurrent copies, then a launch the
    server wrongly answers ``launched``: the final assertion compares with the socket the copies
    returned (it raised KeyError when the first copy's answer was not asserted)."""
    order = ("launched", "already_running") if launched_first else ("already_running", "launched")
    again = turn(AGAIN, [[Call(LAUNCH, X)], [Call(LIST, "{}")]],
                 [[launch("x", "/s/x-new", "launched")], [listed(("main", "/s/main"), ("x", "/s/x-new"))]])
    ops = [*opening(), copies(*order), again]
    text = written(ops, "launch.already-running", [START[1], COPIES[1], AGAIN[1]])
    recorded = outputs(ops)
    assert failure(text, recorded).startswith("launch.already-running: step 3, launch(")
    swapped = copies(*reversed(order)).outputs
    correct = [[launch("x", "/s/x", "already_running")], [listed(("main", "/s/main"), ("x", "/s/x"))]]
    run_repro(text, [*recorded[:2], swapped, correct])
    # the list after the copies is asserted too, with the socket they returned
    wrong_list = [swapped[0], [listed(("main", "/s/main"), ("x", "/s/other"))]]
    assert failure(text, [*recorded[:2], wrong_list, correct]).startswith("list.registered: step 2")


def test_an_assertion_that_raises_is_not_taken_for_one_that_fails() -> None:
    """The final assertion must fail on the recorded outputs by being false: one that raises (a
    socket no assertion before it remembered) would make the repro an error, not a failure."""
    check = Check("out == sock[('bash', 'x')]", "launch.already-running")
    assert fails(check, "/s/x1", {("bash", "x"): "/s/x2"}, []) and not holds(check, "/s/x1", {("bash", "x"): "/s/x2"}, [])
    assert not fails(check, "/s/x1", {}, []) and not holds(check, "/s/x1", {}, [])


def test_a_list_polled_until_an_exited_pair_went_is_polled_so_by_the_repro_too() -> None:
    """The machine polls list after a shell's ``exit`` until the pair is removed; the model allows it
    shown or gone meanwhile, so no check of the list held only at the end and the repro went on at
    once (under load, before the removal: a correct server then failed its view check). The repro
    now polls until the list shows what the machine's last poll showed."""
    send = "sys_terminal_send"
    exit_shell = (2, "state.exit_shell(index=0, relaunch='no', window=[])")
    later = (3, "state.list_every_agent()")
    exiting = json.dumps([{"terminal": "bash", "session": "main", "command": "bash", "running": False,
                           "has_os_env": True, "tmux_socket": "/s/main"}])
    ops = [*opening(),
           turn(exit_shell, [[Call(send, json.dumps({"terminal": "bash", "session": "main", "text": "exit"}))]],
                [[json.dumps({"status": "sent"})]]),
           turn(exit_shell, [[Call(LIST, "{}")]], [[exiting]]),
           turn(exit_shell, [[Call(LIST, "{}")]], [["[]"]]),
           Op("view", SID, later, data=[{"terminal": "bash", "session": "main", "running": True}])]
    poll = next(b for b in plan(ops, "view.terminals").blocks if b.kind == "poll")
    [settled] = poll.checks[(0, 0)]
    assert settled.clause == "list.exit-removed"
    assert holds(settled, [], {}, []) and not holds(settled, json.loads(exiting), {}, [])
    text = written(ops, "view.terminals", [START[1], exit_shell[1], later[1]])
    assert f"        if all([(lambda out: {settled.expr})(outs[0][0])]):\n            break" in text
    assert "    for _ in polled(POLL_DEADLINE):" in text  # two turns at least, the last begun after the deadline


def test_a_launch_while_an_exit_is_pending_is_asserted_either_way_a_correct_server_answers() -> None:
    """A launch right after the shell's ``exit`` (the exit window's ``launch``): a correct server says
    ``launched`` (it saw the exit) or ``already_running`` with the old socket (not yet); omnigent 0.19.1
    says ``already_running`` with a new socket (docs/omnigent.md, finding 9), which the repro fails on.
    Before, the writer stated nothing for such a launch and the campaign's finding had no plain repro."""
    send = "sys_terminal_send"
    window = (2, "state.exit_shell(index=0, relaunch='no', window=['launch'])")
    ops = [*opening(),
           turn(window, [[Call(send, json.dumps({"terminal": "bash", "session": "main", "text": "exit"}))]],
                [[json.dumps({"status": "sent"})]]),
           turn(window, [[Call(LAUNCH, MAIN)]], [[launch("main", "/s/new", "already_running")]])]
    text = written(ops, "launch.socket-kept", [START[1], window[1]])
    recorded = outputs(ops)
    assert failure(text, recorded).startswith("launch.socket-kept: step 2, launch(")
    for answer in (launch("main", "/s/main", "already_running"), launch("main", "/s/new", "launched")):
        run_repro(text, [*recorded[:-1], [[answer]]])


def test_a_read_of_a_pair_not_launched_here_is_asserted_to_be_one_of_its_errors() -> None:
    """A read of a pair this session never launched can show no screen: a correct server answers one
    of the errors the model accepts (here two: a ``scrollback`` of null is malformed, the pair is not
    found). omnigent echoes arguments that hold an ``error`` key (the error-key bug,
    ``read.not-found@output-keys``), which had no plain repro: for a read with more than one acceptable
    answer the writer stated nothing, as if a screen could be one."""
    other = (2, "state.read(pair=pairs_1, scrollback=None, deco=...)")
    args = {"terminal": "bash", "session": "other", "error": [1], "scrollback": None}
    ops = [*opening(), turn(other, [[Call(READ, json.dumps(args))]], [[json.dumps(args)]])]
    text = written(ops, "read.not-found", [START[1], other[1]])
    recorded = outputs(ops)
    assert failure(text, recorded).startswith("read.not-found: step 2, read(")
    for correct in ({"error": "terminal 'bash:other' not found or not running"},
                    {"error": "'scrollback' must be a non-negative integer"}):
        run_repro(text, [*recorded[:-1], [[json.dumps(correct)]]])
    screen = json.dumps({"terminal": "bash:other", "screen": "$ "})
    assert failure(text, [*recorded[:-1], [[screen]]]).startswith("read.not-found: step 2, read(")


def test_a_rows_repro_holds_the_big_read_not_the_read_that_told_its_cause() -> None:
    """Issue 23: the rows check of a read with a scrollback over 1000 reads once more with 1000 to tell
    the failure's cause, in the same program step. That read is no step of the program: the repro's
    rows block is the big read's turn (a CI run wrote the read of 1000 as the failing step, and the
    repro passed against the faulty server)."""
    scroll = (2, "state.scroll(index=0)")
    big, of_1000 = (Call(READ, json.dumps({"terminal": "bash", "session": "main", "scrollback": n})) for n in (9000, 1000))
    shown = [json.dumps({"terminal": "bash:main", "screen": "\n" * 24, "scrollback_lines": n}) for n in (9000, 1000)]
    visible = Call(READ, json.dumps({"terminal": "bash", "session": "main", "scrollback": 0}))
    shown_visible = json.dumps({"terminal": "bash:main", "screen": "\n" * 24, "scrollback_lines": 0})
    # as the scroll rule makes them: a read of the visible rows first, then the big read (the step's
    # earlier read-only turns are no cause-telling read: the first of them is not the last turn)
    ops = [*opening(), turn(scroll, [[visible]], [[shown_visible]]), turn(scroll, [[big]], [[shown[0]]]),
           turn(scroll, [[of_1000]], [[shown[1]]])]
    blocks = plan(ops, "read.rows-exact").blocks
    final = blocks[-1]
    assert final.kind == "rows" and final.final and final.steps == [[big]] and blocks[-2].steps == [[visible]]
    assert all(of_1000 not in step for b in blocks for step in b.steps)

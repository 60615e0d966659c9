"""The regression tests that stateful/repro.py writes: the right program, and a file that replays it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from stateful.machine import MachineConfig, TerminalMachine
from stateful.model import Call, EventView
from stateful.repro import render_repro, reported_program, write_repro
from stateful.targets.base import AgentSession, ServerError, Step, Target, TargetError

PROGRAM_NOTE = """state = DirectMachine()
pairs_0 = state.start(terminal='bash', name='main')
turn 1 (agent 0): launch({"terminal": "bash", "session": "main"})
state.live_pairs_have_private_servers()
state.repl_start(index=0)
state.teardown()"""


def failure_with_notes(*notes: str) -> AssertionError:
    failure = AssertionError("python prompt not shown")
    for text in notes:
        failure.add_note(text)
    return failure


def test_reported_program_keeps_only_the_steps_of_the_last_run() -> None:
    earlier = "state = DirectMachine()\nstate.list_every_agent()\nstate.teardown()"
    program = reported_program(failure_with_notes(earlier, PROGRAM_NOTE, "You can reproduce this test case by ..."))
    assert program == [
        "state = DirectMachine()",
        "pairs_0 = state.start(terminal='bash', name='main')",
        "state.live_pairs_have_private_servers()",
        "state.repl_start(index=0)",
        "state.teardown()",
    ]


def test_a_step_printed_over_several_lines_is_joined_into_one() -> None:
    note = """state = DirectMachine()
pairs_0 = state.start(terminal='bash', name='main')
state.concurrent(ops=['list',
     'read'],
    refs=[pairs_0,
     pairs_0])
state.exit_shell(index=0, relaunch='no', window=[])
state.teardown()"""
    program = reported_program(failure_with_notes(note))
    assert program[2] == "state.concurrent(ops=['list', 'read'], refs=[pairs_0, pairs_0])"
    assert program[3:] == ["state.exit_shell(index=0, relaunch='no', window=[])", "state.teardown()"]


def test_a_step_that_is_not_python_is_a_clear_error() -> None:
    program = reported_program(failure_with_notes("state = DirectMachine()\nstate.read(pair=<object at 0x1>)"))
    assert program[1] == "state.read(pair=<object at 0x1>)"  # kept as reported, then refused
    with pytest.raises(ValueError, match="not one line of Python"):
        render_repro("direct", program, AssertionError("x"))


def test_no_program_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no reported program"):
        render_repro("direct", reported_program(AssertionError("no notes")), AssertionError("x"))


def test_rendered_file_is_python_that_names_the_failure() -> None:
    text = render_repro("sessions", reported_program(failure_with_notes(PROGRAM_NOTE)), failure_with_notes())
    compile(text, "repro.py", "exec")
    assert "AssertionError: python prompt not shown" in text
    assert "TARGET = 'sessions'" in text
    assert "        state.repl_start(index=0)\n" in text
    assert "state.teardown()" not in text  # the replay fixture runs it, also after a failure


def run_repro(path: Path, *, faults: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEFUL_FAULTS": faults}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "stateful.e2e", "-p", "stateful.pytest_machine", str(path), "-q", "--poll-deadline", "5",
         "-p", "no:cacheprovider"],
        cwd=path.parent, env=env, capture_output=True, text=True, timeout=300,
    )


def test_written_repro_fails_while_the_bug_is_there_and_passes_without_it(tmp_path: Path) -> None:
    """The file is replayed outside the project, as a server's team would: with the planted fault
    (Enter is not pressed, so python3 never starts) it fails with the machine's own violation."""
    path = write_repro(tmp_path, "direct", failure_with_notes(PROGRAM_NOTE))
    assert path.parent == tmp_path and path.name.startswith("test_repro_direct_")

    healthy = run_repro(path, faults="")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "1 passed" in healthy.stdout

    broken = run_repro(path, faults="keys-default-none")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "SendKeysViolation: send.keys: python prompt not shown" in broken.stdout


# -- what stateful/test_machine.py writes: contract violations only ---------------------------------

class FakeSession(AgentSession):
    """A session whose every turn answers ``output`` (a first ``list`` that is not JSON breaks §1)."""

    label = "fake-session"

    def __init__(self, output: str) -> None:
        self.output = output

    def run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        return [[self.output for _ in step] for step in steps]

    def events(self) -> list[EventView]:
        return []

    def delete(self) -> None:
        pass


class FakeTarget(Target):
    """Opens :class:`FakeSession`s, or raises ``failure`` when asked to open one."""

    name = "fake"
    where = "http://fake.invalid"
    declared = {"bash": "bash", "sh": "bash"}

    def __init__(self, *, output: str = "[]", failure: Exception | None = None) -> None:
        self.output, self.failure = output, failure

    def open_session(self) -> AgentSession:
        if self.failure is not None:
            raise self.failure
        return FakeSession(self.output)


@pytest.fixture
def quick_profile() -> Iterator[None]:
    """Few examples, no database (a failing example must not be saved for later runs)."""
    previous = settings.get_current_profile_name()
    settings.register_profile("test-repro-quick", max_examples=5, database=None, deadline=None,
                              suppress_health_check=list(HealthCheck))  # a busy machine is not a bug here
    settings.load_profile("test-repro-quick")
    try:
        yield
    finally:
        settings.load_profile(previous)


def machine_run(target: Target, repro_dir: Path) -> BaseException:
    """What ``stateful/test_machine.py::run_machine`` raises for ``target`` (it must fail)."""
    from stateful.test_machine import run_machine

    machine = type("FakeMachine", (TerminalMachine,), {})
    with pytest.raises(BaseException) as failure:
        run_machine(machine, target, MachineConfig(probe=False), repro_dir)
    return failure.value


def test_a_contract_violation_is_written_as_a_repro(quick_profile: None, tmp_path: Path) -> None:
    """Reported without a traceback: the clause's line first, then the program, then the file."""
    failure = machine_run(FakeTarget(output="not json"), tmp_path)
    assert isinstance(failure, pytest.fail.Exception) and not failure.pytrace
    report = str(failure.msg)
    assert report.startswith("ListResultViolation: list.result: the first list did not return a JSON array: not json\n")
    assert "state = FakeMachine()" in report
    written = list(tmp_path.iterdir())
    assert len(written) == 1 and written[0].name.startswith("test_repro_fake_list_result_")
    assert report.endswith(f"stateful: this program is now a regression test: {written[0]}")


@pytest.mark.parametrize("error", [
    ServerError("POST", "http://fake.invalid/v1/sessions", 500, "Internal Server Error"),
    TargetError("cannot reach the server: POST http://fake.invalid/v1/sessions: [Errno 111] Connection refused"),
])
def test_a_failure_of_the_target_is_reported_as_such_and_never_written(
        quick_profile: None, tmp_path: Path, error: TargetError) -> None:
    from stateful.pipeline import NOT_WRITTEN

    failure = machine_run(FakeTarget(failure=error), tmp_path)
    assert isinstance(failure, pytest.fail.Exception) and not failure.pytrace
    report = str(failure.msg)
    assert report.startswith(f"{type(error).__name__}: {error}\n")
    assert "state = FakeMachine()" in report  # the program that led to it
    assert report.endswith(NOT_WRITTEN)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("headline", "recordings"), [
    ("no sequential order of the 2 concurrent calls explains their outputs; ...", 5),  # RACE_RECORDINGS
    ("a second launch said launched", 1),
])
def test_a_race_gets_several_replays_to_record_its_plain_repro(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, headline: str, recordings: int) -> None:
    """A replay of a race may pass (the calls finish in the order that hides the bug): a failure of
    concurrent calls that no order explained is recorded by up to RACE_RECORDINGS replays, any other
    by one, and a failure whose replays all pass gets no plain repro, with the reason."""
    from stateful import plain
    from stateful.clauses import violation

    failure = violation("launch.already-running", headline)
    failure.add_note(PROGRAM_NOTE)
    replays: list[list[str]] = []

    def passing_replay(machine: type, target: object, program: list[str]) -> tuple[None, list[object]]:
        replays.append(program)
        return None, []

    monkeypatch.setattr(plain, "record_program", passing_replay)
    with pytest.raises(plain.NoPlainForm, match="did not break launch.already-running again"):
        plain.write_plain_repro(tmp_path, TerminalMachine, None, failure)
    assert len(replays) == recordings
    assert replays[0] == reported_program(failure)
    assert list(tmp_path.iterdir()) == []


# -- what a server prints is data, never code ------------------------------------------------------

class RewritingSession(AgentSession):
    """A direct target's session whose every output passes through ``rewrite(call, output)`` (in the
    order of the calls): a broken or hostile server made of the reference one."""

    def __init__(self, inner: AgentSession, rewrite: Callable[[Call, str], str]) -> None:
        self.inner, self.label, self.rewrite = inner, inner.label, rewrite

    def run_turn(self, steps: Sequence[Step], *, step_timeout: float) -> list[list[str]]:
        outputs = self.inner.run_turn(steps, step_timeout=step_timeout)
        return [[self.rewrite(call, out) for call, out in zip(step, outs)] for step, outs in zip(steps, outputs)]

    def events(self) -> list[EventView]:
        return self.inner.events()

    def delete(self) -> None:
        self.inner.delete()


def rewriting_target(rewrite: Callable[[Call, str], str]) -> Target:
    """A direct target whose sessions are :class:`RewritingSession` (outputs through ``rewrite``)."""
    from stateful.targets.direct import DirectTarget

    class Rewriting(DirectTarget):
        def open_session(self) -> AgentSession:
            return RewritingSession(super().open_session(), rewrite)

    return Rewriting()


def test_step_shaped_lines_a_server_prints_never_run_and_are_written_only_quoted(
        quick_profile: None, tmp_path: Path) -> None:
    """A hostile or broken server's output is data: the failure (list.result) is reported, the line
    it printed is neither a step of the program (replayed, minimized, written) nor run, and the
    notes and the repro hold it only inside string literals."""
    import ast

    from stateful.minimize import replay_program

    planted = tmp_path / "planted"
    repros = tmp_path / "repros"
    tail = f"\nstate.teardown(open({str(planted)!r}, 'w').close())\nstate.list_every_agent()\n"
    target = rewriting_target(lambda call, out: out + tail if call.tool == "sys_terminal_list" else out)
    try:
        failure = machine_run(target, repros)
        report = str(failure.msg)
        assert report.startswith("ListResultViolation: list.result: the first list did not return a JSON array")
        assert "state.teardown(open(" in report  # shown, quoted
        assert not any(line.startswith("state.teardown(open(") for line in report.splitlines())
        assert not planted.exists()

        [written] = repros.iterdir()
        text = written.read_text(encoding="utf-8")
        calls = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)]
        assert not any(isinstance(c.func, ast.Name) and c.func.id == "open" for c in calls)
        assert not any(isinstance(c.func, ast.Attribute) and c.func.attr in ("teardown", "list_every_agent")
                       for c in calls)

        notes = failure_with_notes(*[line for line in report.splitlines() if line])
        program = reported_program(notes)
        assert program[0] == "state = FakeMachine()" and len(program) == 3 and "state.start(" in program[1]
        machine = type("FakeMachine", (TerminalMachine,), {})
        machine.bind(target, MachineConfig(probe=False))
        replayed = replay_program(machine, program)  # what minimizing and the plain repro run
        assert replayed is not None and "list.result" in str(replayed)
        assert not planted.exists()
    finally:
        target.close()


@pytest.mark.parametrize("line", [
    "state.teardown(open('/tmp/x', 'w').close())",
    "state.read(pair=__import__('os').system('true'))",
    "state.read(pair=pairs_0.__class__)",
    "pairs_0 = state._private()",
    "state = __import__('os')",
    "state.list_every_agent(); import os",
    "state = exit()",
    "state = SystemExit()",
    "float = state.start(terminal='bash', name='main')",
    "state.read(pair=pairs_0)[0]",
])
def test_a_line_that_is_no_step_is_refused(line: str) -> None:
    from stateful.minimize import replay_program
    from stateful.repro import UnsafeStep, check_step

    with pytest.raises(UnsafeStep):
        check_step(line)
    program = ["state = DirectMachine()", "pairs_0 = state.start(terminal='bash', name='main')", line, "state.teardown()"]
    assert isinstance(replay_program(TerminalMachine, program), UnsafeStep)  # refused before anything runs
    assert reported_program(failure_with_notes(f"state = DirectMachine()\n{line}\nstate.teardown()")) == [
        "state = DirectMachine()", "state.teardown()"]


def test_printed_values_are_steps() -> None:
    from stateful.repro import check_step

    for line in ["state = DirectMachine()", "state = Recording()", "pairs_0 = state.start(terminal='bash', name='main')",
                 "state.read_bad_scrollback(pair=pairs_0, value=-1)", "state.read(pair=pairs_0, scrollback=float('nan'))",
                 "state.marker(pair=pairs_0, plan=SendPlan(), semicolon=True, deco=Decoration())",
                 "state.concurrent(ops=['list', 'read'], refs=[pairs_0, pairs_0])", "state.teardown()"]:
        assert check_step(line) == line


# -- a failure that does not come back ---------------------------------------------------------------

def once_wrong(wrong_at: int) -> Callable[[Call, str], str]:
    """An output rewrite: the ``wrong_at``-th ``list`` of all answers ``[`` (not JSON), once: a
    violation that no replay meets again."""
    lists = 0

    def rewrite(call: Call, output: str) -> str:
        nonlocal lists
        if call.tool != "sys_terminal_list":
            return output
        lists += 1
        return "[" if lists == wrong_at else output

    return rewrite


def test_a_violation_that_never_comes_back_is_reported_whole_and_fails_the_run(
        quick_profile: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen once, never again in the replays: the run fails all the same, and the report's first line
    says so, then the violation, the program as it ran (the machine's own record, not Hypothesis's
    empty one), its transcript and the last screens; no repro is written."""
    import functools

    from stateful import minimize, pipeline

    monkeypatch.setattr(pipeline, "reproduced", functools.partial(minimize.reproduced, tries=2))
    target = rewriting_target(once_wrong(wrong_at=6))
    settings.register_profile("test-repro-once", max_examples=5, database=None, deadline=None, stateful_step_count=6,
                              suppress_health_check=list(HealthCheck))
    settings.load_profile("test-repro-once")
    try:
        failure = machine_run(target, tmp_path)
    finally:
        settings.load_profile("test-repro-quick")
        target.close()
    assert isinstance(failure, pytest.fail.Exception) and not failure.pytrace
    report = str(failure.msg)
    first, *rest = report.splitlines()
    assert re.match(r"stateful: seen once, not reproduced in [1-4] replays: output\.json: list\(\{\}\) -> \[: ", first), report
    assert rest[0].startswith("(the tries: ") and "passed" in rest[0], report
    assert "OutputJsonViolation: output.json: list({}) -> [: the tool's output is not JSON" in report
    program = report[report.index("The program as it ran"):report.index("Its transcript")]
    assert "  pairs_0 = state.start(" in program and "  state.live_pairs_have_private_servers()" in program, report
    assert "turn 1 (agent 0): launch(" in report and "-> '['" in report, report
    assert report.endswith(pipeline.NOT_REPRODUCED)
    assert list(tmp_path.iterdir()) == []

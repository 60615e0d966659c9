"""An interrupted or killed run leaves nothing behind (``stateful.workers``).

The fault hunts run as workers in sessions of their own, out of reach of any signal sent to pytest.
Here a real ``pytest tests/test_faults.py`` with two quick hunts is interrupted once a worker and its
terminals run, by SIGTERM (what ``timeout`` and CI runners send) or SIGINT sent to pytest alone;
within seconds pytest must have exited through its interrupt path, no process of that run may be left
(workers, reapers, tmux servers, shells) and its temp root must be gone. Two small workers show the rest
of the module: a worker follows a run that was SIGKILLed, and a worker that ignores SIGTERM is
SIGKILLed after the grace.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TypeVar

import pytest

from stateful import workers
from stateful.reference.tmux import ProcessRef
from stateful.workers import processes
from polling import poll as _poll

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
HUNTS = ("list-sorted", "prefix-match")
"""Two of the quickest hunts."""
STARTUP_DEADLINE = 90.0
"""Longest wait for the interrupted run's workers and terminals to appear (a loaded 2-core box)."""
END_DEADLINE = 20.0
"""Longest an interrupted run may take, from the signal, to leave nothing behind."""
RUN_PYTEST = ("import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "sys.exit(pytest.main(sys.argv[1:]))")
"""``python -m pytest`` with SIGINT as a foreground job gets it, even when this run was started with
SIGINT ignored (a background job of a non-interactive shell): an ignored signal survives exec."""


def _processes_naming(marker: str) -> dict[int, list[str]]:
    """pid -> argv of the live processes whose command line or environment names ``marker``."""
    needle = os.fsencode(marker)
    found = {}
    for pid, cmdline, environ in processes():
        ref = ProcessRef.of(pid)
        if (needle in cmdline or needle in environ) and ref is not None and ref.alive():
            found[pid] = [os.fsdecode(a) for a in cmdline.split(b"\0") if a]
    return found


def _hunt_with_terminals(marker: str) -> dict[int, list[str]]:
    """The run's processes once a hunt worker, its reaper and a tmux server run, else {} (both hunts
    start at once, but list-sorted may be over within seconds)."""
    found = _processes_naming(marker)
    argvs = [a for a in found.values() if a]
    hunts = [a for a in argvs if len(a) > 2 and a[1].endswith("tests/test_faults.py") and a[2] in HUNTS]
    reapers = [a for a in argvs if a[1:3] == ["-m", "stateful.reference.reaper"]]
    servers = [a for a in argvs if os.path.basename(a[0]) == "tmux"]
    return found if hunts and reapers and servers else {}


def _kill_all_naming(marker: str) -> None:
    """Cleanup after a failure: SIGKILL what is left of the run (all of it started by this test)."""
    for pid in _processes_naming(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """The ``TMPDIR`` of the run under test: its path marks every process of that run. It is short (a
    tmux socket path must fit in 107 bytes), under the leak guard's root. Whatever is left of the run
    after the test is killed."""
    directory = Path(tempfile.mkdtemp(prefix="run-"))
    try:
        yield directory
    finally:
        _kill_all_naming(str(directory))
        _poll(lambda: not _processes_naming(str(directory)), 10.0, "the run's processes to be killed")
        shutil.rmtree(directory, ignore_errors=True)


def _ready(run: subprocess.Popen[bytes], marker: str, log: Path) -> dict[int, list[str]]:
    """:func:`_hunt_with_terminals`, or AssertionError with the run's output if the run is over."""
    if run.poll() is not None:
        raise AssertionError(f"the run exited {run.returncode} before it was interrupted:\n"
                             + log.read_text(errors="replace"))
    return _hunt_with_terminals(marker)


def _left_after(marker: str, deadline: float) -> dict[int, list[str]]:
    """Bounded polling until no process names ``marker`` or ``deadline`` (monotonic) passes: what is left."""
    while (left := _processes_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupted_run_ends_its_hunts_and_removes_its_temp_root(
    signum: int, run_dir: Path, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    log = tmp_path / "pytest.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STATEFUL_"))}
    env["TMPDIR"] = str(run_dir)
    with open(log, "wb") as sink:
        run = subprocess.Popen(
            [sys.executable, "-c", RUN_PYTEST, "tests/test_faults.py", "-q", "-k", " or ".join(HUNTS)],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _poll(lambda: _ready(run, str(run_dir), log), STARTUP_DEADLINE, "a hunt worker and its terminals")
        temp_roots = list(run_dir.glob("stateful-tests-*"))
        assert len(temp_roots) == 1, temp_roots

        os.kill(run.pid, signum)  # pytest alone, as `timeout` or a CI runner does
        sent = time.monotonic()
        try:
            code = run.wait(END_DEADLINE)
        except subprocess.TimeoutExpired:
            os.kill(run.pid, signal.SIGABRT)  # pytest's faulthandler then prints every thread's stack
            run.wait(10)
            raise AssertionError(f"pytest still ran {END_DEADLINE} s after {signal.Signals(signum).name}:\n"
                                 + log.read_text(errors="replace")) from None
        left = _left_after(str(run_dir), sent + END_DEADLINE)
        record_property("seconds_to_clean", round(time.monotonic() - sent, 1))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    output = log.read_text(errors="replace")
    assert code == pytest.ExitCode.INTERRUPTED, f"pytest exited {code}, not through its interrupt path:\n{output}"
    assert not left, f"left of the run {END_DEADLINE} s after {signal.Signals(signum).name}: {left}"
    assert not temp_roots[0].exists(), (
        f"the temp root is still there, holding {os.listdir(temp_roots[0])}:\n{output}")
    assert "outlived the test run" not in output, output


WORKER = ("import sys, time; from stateful import workers; workers.follow_parent(); "
          "print('ready', flush=True); time.sleep(600)")
"""A worker that only waits to be ended."""


def test_worker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """The run is SIGKILLed (no cleanup at all): its worker notices the lifeline's end and exits."""
    parent_code = (
        "import sys, time; from stateful import workers; "
        f"w = workers.start_worker([sys.executable, '-c', {WORKER!r}]); "
        "print(w.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE,
                              start_new_session=True)
    worker: ProcessRef | None = None
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        assert parent.stdout.readline() == b"ready\n"  # the worker inherited the parent's stdout
        worker = ProcessRef.of(worker_pid)
        assert worker is not None and worker.alive()
        os.kill(parent.pid, signal.SIGKILL)
        _poll(lambda: not worker.alive(), 10.0, "the worker to follow its killed parent")
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
        if worker is not None and worker.alive():
            worker.signal(signal.SIGKILL)


def test_worker_ignoring_sigterm_is_killed_after_the_grace() -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)")
    worker = workers.start_worker([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert worker.proc.stdout is not None and worker.proc.stdout.readline() == b"ready\n"
        started = time.monotonic()
        assert worker.end(grace=0.5) == -signal.SIGKILL
        assert time.monotonic() - started < 5.0
    finally:
        if worker.proc.poll() is None:
            worker.signal_group(signal.SIGKILL)
            worker.wait()
        assert worker.proc.stdout is not None
        worker.proc.stdout.close()


MINIMIZING_RUN = '''
import sys, threading
from hypothesis.stateful import invariant
from stateful import minimize, workers
from stateful.machine import MachineConfig, TerminalMachine
from stateful.targets.direct import DirectTarget

workers.interrupt_on_signals()  # as the root conftest installs it in every run
minimizing = False


class MinimizeMachine(TerminalMachine):
    @invariant()
    def live_pairs_have_private_servers(self):
        if minimizing:  # a replay of the minimizing pass, with its terminals: it waits for the signal
            print("in a replay", flush=True)
            threading.Event().wait()
        super().live_pairs_have_private_servers()


target = DirectTarget()
try:
    MinimizeMachine.bind(target, MachineConfig(poll_deadline=10))
    failure = minimize.replay_program(MinimizeMachine, sys.argv[1:])
    assert failure is not None, "the planted fault did not fail the program"
    minimizing = True
    minimize.shorter_failure(MinimizeMachine, failure)
    print("minimized", flush=True)
finally:
    target.close()
'''
"""A run that minimizes a failure of the scrollback-bool fault (stateful.minimize.shorter_failure);
each of its replays says "in a replay" once its first step ran, then waits until a signal ends it."""
FAILING_PROGRAM = [
    "state = MinimizeMachine()",
    "pairs_0 = state.start(terminal='bash', name='main')",
    *["state.list_every_agent()", "state.live_pairs_have_private_servers()"] * 3,
    "pairs_1 = state.launch(agent=0, copies=1, deco=Decoration(), name='x', terminal='sh')",
    "state.live_pairs_have_private_servers()",
    *["state.list_every_agent()", "state.live_pairs_have_private_servers()"] * 3,
    "state.read_bad_scrollback(pair=pairs_1, value=True)",
    "state.teardown()",
]
MINIMIZE_END = 15.0
"""Longest a run interrupted while it minimizes a failure may take to end, from the signal."""


def test_sigterm_while_a_failure_is_minimized_ends_the_run_and_leaves_nothing(run_dir: Path, tmp_path: Path) -> None:
    """A signal during a failing program's replay is no "replay that failed": it ends the run at once
    (through its cleanup: the target's terminals and reaper are gone too), never a run that only
    SIGKILL can stop because its one interrupt was swallowed and the next ones are ignored."""
    log = tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STATEFUL_"))}
    env.update(TMPDIR=str(run_dir), STATEFUL_FAULTS="scrollback-bool")
    with open(log, "wb") as sink:
        run = subprocess.Popen([sys.executable, "-c", MINIMIZING_RUN, *FAILING_PROGRAM], cwd=ROOT, env=env,
                               stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def replaying_with_terminals() -> bool | None:
            if run.poll() is not None:
                raise AssertionError(f"the run exited {run.returncode} first:\n{log.read_text(errors='replace')}")
            servers = [a for a in _processes_naming(str(run_dir)).values() if a and os.path.basename(a[0]) == "tmux"]
            return True if "in a replay" in log.read_text(errors="replace") and servers else None

        _poll(replaying_with_terminals, STARTUP_DEADLINE, "a replay of the minimizing pass, with its terminals")
        os.kill(run.pid, signal.SIGTERM)
        sent = time.monotonic()
        try:
            code = run.wait(MINIMIZE_END)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run still ran {MINIMIZE_END} s after SIGTERM:\n"
                                 + log.read_text(errors="replace")) from None
        left = _left_after(str(run_dir), sent + MINIMIZE_END)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    output = log.read_text(errors="replace")
    assert code != 0 and "KeyboardInterrupt: interrupted by SIGTERM" in output, output
    assert "\nminimized\n" not in output, output
    assert not left, f"left of the run {MINIMIZE_END} s after SIGTERM: {left}"


def _interrupted(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt("interrupted by SIGTERM")


def test_an_interrupt_in_any_replay_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replays of the minimizing pass, of the plain repro's recording and of the benchmark's
    programs catch what a program raised (a failure, judged later), never an interrupt."""
    from contextlib import nullcontext

    from stateful import bench_machine, minimize, plain
    from stateful.machine import TerminalMachine

    program = ["state = DirectMachine()", "pairs_0 = state.start(terminal='bash', name='main')", "state.teardown()"]
    monkeypatch.setattr(minimize, "run_once", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        minimize.replay_program(TerminalMachine, program)
    monkeypatch.setattr(plain, "run_once", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        plain.record_program(TerminalMachine, SimpleNamespace(recorder=None), program)
    monkeypatch.setattr(bench_machine, "run_state_machine_as_test", _interrupted)
    monkeypatch.setattr(bench_machine, "_target", lambda kind, latency: nullcontext(SimpleNamespace()))
    monkeypatch.setattr(TerminalMachine, "bind", classmethod(lambda cls, target, config: None))
    with pytest.raises(KeyboardInterrupt):
        bench_machine.run_programs("direct", 0.0, 1, "interrupted")

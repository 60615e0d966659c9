"""Proof that the state machine finds bugs: each planted fault is found, shrunk, and named.

For every fault of ``stateful/reference/faults.py`` a *hunt* switches that one fault on
(``faults.activated``), builds a fresh target while it is on (the in-process registry for registry,
tools and tmux faults; the embedded HTTP stack for faults of the sessions API), runs the state machine
on it with the ``ci`` profile of ``hypothesis.ini`` (its Hypothesis settings and MachineConfig, as
``stateful/conftest.py`` loads them) and ``database=None`` (hunts never read or write the example
database in ``.hypothesis/``), then tears the target down with the fault off again. The test of that fault asserts:

* **found**: the run failed (``run_state_machine_as_test`` raised after shrinking);
* **for the right reason**: the final, shrunk failure is the ``ContractViolation`` of the contract
  clause that the fault breaks (its ``clause`` id, ``stateful/clauses.py``); a hang (``StepTimeout``),
  a target error, a crash or an inconsistent replay does not count;
* **shrunk**: the minimal program is short. Steps are counted in what Hypothesis reports for its final
  replay of the minimal failure: with ``is_final`` set it reports every executed rule as a line
  ``[name = ]state.<rule>(...)`` (and ``state.<invariant>()``/``state.teardown()`` lines) and
  attaches them to the raised exception as notes; ``stateful.repro.reported_program`` picks out the
  program, and a step is a line naming a rule or initialize rule of the machine (Hypothesis's own
  rule markers), so invariant checks, teardown and the machine's ``note()`` lines never count.

Two things keep the file within its time budget (docs/faults.md has the measurements):

* **a shrink budget in shrinks**: Hypothesis shrinks until no pass makes progress, for up to 500
  successful shrinks or 300 s (constants of its engine, not settings), and one replay of a program
  costs 0.2-10 s on real tmux. A hunt stops shrinking after ``SHRINKS`` successful shrinks
  (``stateful.shrinking.shrink_budget``): Hypothesis then replays the smallest failure found so far
  as usual. A count, not a time: the ci programs are deterministic, so the shrunk program is the same
  on an idle and on a busy machine (a budget in seconds stopped at 12-19 steps instead of 2 with both
  cores busy). 300 s stays as a safety net. The Hypothesis settings are the ``ci`` profile's.
* **parallel hunts**: hunts mostly wait for terminals, so ``WORKERS`` of them run at once, each in its
  own interpreter (``python tests/test_faults.py FAULT TARGET BUDGET OUT``): a fault switched on in one can
  never reach another. Their terminals live under the session's leak-guarded temp root (``TMPDIR``),
  and a hunt's whole process group is ended if it outlives ``HUNT_TIMEOUT``, and when the test run
  ends, is interrupted (SIGINT, or SIGTERM as ``timeout`` and CI runners send) or is killed
  (``stateful.workers``; ``tests/test_interrupt.py`` shows it).
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import faulthandler
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER, run_state_machine_as_test

from stateful import profiles, workers
from stateful.bench_http import serve_process
from stateful.clauses import CLAUSES, clause_of
from stateful.machine import MachineConfig, TerminalMachine
from stateful.reference import faults
from stateful.minimize import FailingRun, failing_run, replay_program, reproduced, shorter_failure
from stateful.plain import NoPlainForm, write_plain_repro
from stateful.replay import clause_in, run_repro
from stateful.repro import reported_program
from stateful.shrinking import shrink_budget
from stateful.targets.base import StepTimeout
from stateful.targets.registry import open_target

ROOT = Path(__file__).resolve().parent.parent
SHRINKS = 6
"""Successful shrinks a hunt allows (Hypothesis's own limit is 500): the budget that decides how far a
failure is shrunk, the same however busy the machine is (the hunts' programs are deterministic). Six
leave every hunt at 1-4 steps, as 25 did, after ``stateful.minimize`` drops the steps left, in a
fraction of the time (docs/faults.md, "Six shrinks")."""
SHRINK_BUDGET = 300
"""Seconds of shrinking a hunt allows at most (Hypothesis's own limit): only a safety net, never the
budget that decides (one measured in seconds gives longer programs on a busier machine)."""
WORKERS = 5
"""Hunts run at once."""
HUNT_TIMEOUT = 900.0
"""Longest a hunt may take (its process group is ended then)."""
STACKS_BEFORE_TIMEOUT = 20.0
"""Seconds before ``HUNT_TIMEOUT`` at which a hunt still running dumps its threads' stacks to its log."""
REPRODUCE_BY = 540.0
"""Seconds into a hunt after which no replay or resumed search of a race starts (``minimize.reproduced``)."""
SHORTER_BY = 720.0
"""Seconds into a hunt after which the step-dropping pass replays nothing more (the plain repro comes after)."""


def _ci_profile() -> tuple[settings, MachineConfig]:
    """The ``ci`` profile as ``pytest stateful/`` loads it, with no example database (reading the
    profiles registers them with Hypothesis; none is loaded, so other tests are unaffected)."""
    config = profiles.machine_config("ci")
    return settings(settings.get_profile("ci"), database=None), config


CI_SETTINGS, CI_MACHINE = _ci_profile()

RULES = frozenset(
    name
    for name in dir(TerminalMachine)
    if getattr(getattr(TerminalMachine, name, None), RULE_MARKER, None) is not None
    or getattr(getattr(TerminalMachine, name, None), INITIALIZE_RULE_MARKER, None) is not None
)
"""The machine's rule and initialize-rule names: what counts as a step of a reported program."""
STEP_NAME = re.compile(r"^(?:[\w, ]+ = )*state\.(\w+)\(")


# -- one hunt -----------------------------------------------------------------------------------


@dataclass
class Hunt:
    """What one machine run against a (possibly faulty) target produced; JSON-serialisable."""

    found: bool = False
    error_type: str = ""
    assertion: bool = False
    """The failure is an AssertionError (ContractViolation is one) and not a StepTimeout."""
    message: str = ""
    clause: str = ""
    """The clause id the failure names ('' for what is not a contract violation)."""
    program: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What this project's passes did to the failure (its ``stateful:`` notes: a race replayed or a
    search resumed until it failed again, steps dropped)."""
    seconds: float = 0.0
    first_failure: float | None = None
    """Seconds until the first failing program ended (the rest is shrinking and the final replay)."""
    examples: int = 0
    """Programs run in all (shrinking included)."""
    plain: str = ""
    """Sessions target: the plain repro written for the failure (its path), or why none was."""
    plain_verdicts: dict[str, list[str]] = field(default_factory=dict)
    """Sessions target: the plain repro (recorded by a replay that failed again, up to ``PLAIN_TRIES`` times
    for a race) replayed ("faulty": with the fault on, "correct": without),
    each ``[status, clause or reason]`` (``stateful.replay``)."""
    plain_replays: int = 0
    """Replays of the plain repro with the fault on until it failed (one but for a race)."""


def hunt(kind: str, names: tuple[str, ...] = (), hypothesis_settings: settings = CI_SETTINGS,
         config: MachineConfig = CI_MACHINE, budget: float = SHRINK_BUDGET, shrinks: int = SHRINKS,
         plain_dir: Path | None = None, tries: int = 1) -> Hunt:
    """Run the machine on a ``kind`` target built and driven with the faults ``names`` switched on;
    with ``plain_dir``, a contract violation found on the sessions target is also written there as
    a plain repro (recorded with the fault still on), as ``pytest stateful/`` does. ``tries``: replays of
    each shorter program the step-dropping pass tries (more than one for a race)."""
    start, started = time.monotonic(), time.time()
    result = Hunt()

    class FaultHunt(TerminalMachine):
        """The machine itself; it also notes when the first failing program ended (a rule still
        running at teardown, or a failing teardown)."""

        def teardown(self) -> None:
            result.examples += 1
            failed = self.world.busy  # a rule was still running: it failed
            run = failing_run()
            if run is not None:
                failing_runs.append(run)
            try:
                super().teardown()
            except BaseException:
                failed = True
                raise
            finally:
                if failed and result.first_failure is None:
                    result.first_failure = round(time.monotonic() - start, 1)

    failing_runs: list[FailingRun] = []
    """The runs a contract violation ended: what a race that Hypothesis took for a flaw is resumed from."""
    error: BaseException | None = None
    with shrink_budget(budget, shrinks):
        with ExitStack() as cleanup:
            with faults.activated(*names):
                target = cleanup.enter_context(open_target(kind))
                FaultHunt.bind(target, config)
                try:
                    run_state_machine_as_test(FaultHunt, settings=hypothesis_settings)
                except Exception as exc:  # judged by the test
                    error = exc
                if error is not None:  # with the fault still on: a race replayed until it shows again (if
                    # Hypothesis's final replay missed it), then the steps Hypothesis left, dropped if they can be
                    error = shorter_failure(FaultHunt, reproduced(FaultHunt, error, hypothesis_settings=hypothesis_settings,
                                                                  earlier=failing_runs, deadline=started + REPRODUCE_BY),
                                            tries=tries, deadline=started + SHORTER_BY)
                if error is not None and plain_dir is not None and kind == "sessions" and clause_of(error):
                    result.plain = _plain(plain_dir, FaultHunt, target, error,
                                          tries=PLAIN_TRIES if tries > 1 else 1)
            # the target is torn down here, with the faults switched off again
    return _judged(result, error, start)


def _plain(directory: Path, machine: type, target: Any, error: BaseException, tries: int = 1) -> str:
    """The path of the plain repro written for ``error`` (recorded by up to ``tries`` replays: more than
    one for a race), or why none was."""
    try:
        return str(write_plain_repro(directory, machine, target, error, tries=tries))
    except NoPlainForm as why:
        return f"none: {why}"


def replay(fault: str, program: tuple[str, ...], plain_dir: Path, config: MachineConfig = CI_MACHINE) -> Hunt:
    """Replay a known short ``program`` once on a fresh sessions target with ``fault`` switched on
    (no search, no shrinking: seconds, where a hunt on that target costs minutes), and write the
    plain repro of the failure it raises, recorded with the fault still on."""
    start = time.monotonic()
    result = Hunt(examples=1)

    class FaultReplay(TerminalMachine):
        """The machine itself, bound to this replay's target."""

    error: BaseException | None = None
    with ExitStack() as cleanup, faults.activated(fault):  # the target is torn down after the fault is off
        target = cleanup.enter_context(open_target("sessions"))
        FaultReplay.bind(target, config)
        error = replay_program(FaultReplay, program)
        if error is not None and clause_of(error):
            result.plain = _plain(plain_dir, FaultReplay, target, error)
    return _judged(result, error, start)


def _judged(result: Hunt, error: BaseException | None, start: float) -> Hunt:
    """``result`` with what the failure ``error`` (None: the run passed) says, and the time since ``start``."""
    result.seconds = round(time.monotonic() - start, 1)
    if error is not None:
        result.found = True
        result.error_type = type(error).__name__
        result.assertion = isinstance(error, AssertionError) and not isinstance(error, StepTimeout)
        result.message = str(error)
        result.clause = clause_of(error) or ""
        result.program = reported_program(error)
        result.notes = [str(n) for n in getattr(error, "__notes__", ()) if str(n).startswith("stateful:")]
        result.steps = [m.group(1) for line in result.program
                        if (m := STEP_NAME.match(line)) and m.group(1) in RULES]
    return result


# -- the faults and what the machine must say about them -----------------------------------------


@dataclass(frozen=True)
class Plant:
    fault: str
    target: str
    """``direct`` (registry, tools, tmux) or ``sessions`` (the HTTP stack)."""
    clauses: tuple[str, ...]
    """The clause ids (``python -m stateful clauses``) the final failure may name: the clause the
    fault breaks (two where one bug shows through either of two clauses, e.g. a list that is both
    out of order and not led by the baseline)."""
    max_steps: int = 8
    """Upper bound on the rules of the shrunk program."""
    budget: int = SHRINK_BUDGET
    """Seconds of shrinking at most (a safety net: ``shrinks`` is what bounds a hunt's shrinking)."""
    shrinks: int = SHRINKS
    """Successful shrinks of Hypothesis's (the pass after it, ``stateful.minimize``, drops the steps
    left)."""
    says: str = ""
    """Words the failure's message must hold, where the clause alone does not tell the finding (a race
    that pairs outputs with the wrong calls breaks the clause of whichever call got another's output)."""
    tries: int = 1
    """Replays of each shorter program in the step-dropping pass (``stateful.minimize.shorter_failure``):
    more than one for a race, whose program fails only when the timing lets it."""
    program: tuple[str, ...] = ()
    """Target ``replay`` only: the known short program that the sessions target replays (no hunt)."""
    variants: tuple[str, ...] = ()
    """Variants of the reference stack (``faults.VARIANTS``: other behaviours the contract allows)
    switched on beside the fault: where the fault shows only on a server that takes that path."""

    @property
    def key(self) -> str:
        """The plant's hunt (or replay) among the Hunter's: a fault hunted on one target may be replayed
        on another."""
        return f"{self.fault}@{self.target}" if self.target == "replay" else self.fault


SWAPPED_OUTPUT_CLAUSES = ("step.concurrent", "close.closed", "close.not-found", "list.result", "read.result",
                          "launch.result", "launch.already-running", "launch.one-launched", "send.sent")
"""What a concurrent call's output that went to another call of the same reply breaks: the clause of
the call it landed on (a list's array on a close, a close's names on another close, ...)."""

PLANTS = [  # longest hunts first (they start first: the pool ends together, not on one long hunt started last),
    # by the walls of ci29's hunts (the run's summary lists them: `fault hunts, wall seconds, longest first`)
    Plant("prefix-match", "direct", ("scope.names-exact",)),
    Plant("outputs-completion-order", "sessions", SWAPPED_OUTPUT_CLAUSES, says="no sequential order of the",
          tries=3),
    Plant("view-keeps-closed", "sessions", ("view.terminals",)),
    Plant("trailing-semicolon", "direct", ("send.text-literal",)),
    Plant("long-text-cut", "direct", ("send.text-literal",)),
    Plant("closed-still-listed", "direct", ("list.registered",)),
    Plant("close-event-lost", "direct", ("events.recorded",)),
    Plant("close-leaks-server", "direct", ("close.nothing-left",)),
    Plant("keys-default-none", "direct", ("send.keys",)),
    Plant("delete-keeps-terminals", "direct", ("session.delete",)),
    Plant("exit-not-reaped", "direct", ("list.exit-removed",)),
    Plant("read-history-short", "direct", ("read.rows-exact",)),
    Plant("double-launch", "direct", ("launch.already-running",)),
    Plant("scrollback-bool", "direct", ("read.scrollback-type",)),
    # or read.output-shows: the prompt after a command's output lands on the dropped row, so it never shows (ci25:
    # (start, flood), after exit_several moved the derandomised draws; campaigns C2-C5 report both, docs/faults.md)
    Plant("read-last-row-dropped", "direct", ("read.result", "read.rows-exact", "read.output-shows")),
    Plant("sibling-deletes-swapped", "direct", ("events.recorded",), variants=("unnamed-resources",)),
    Plant("cross-session", "direct", ("scope.session",)),
    Plant("resource-id-collision", "direct", ("events.unique-ids",)),
    Plant("shared-pane", "direct", ("launch.private-server", "screen.isolation")),
    Plant("scrollback-capped", "direct", ("read.rows-exact", "read.history")),
    Plant("items-page-gap", "sessions", ("items.pagination",)),
    Plant("scrollback-ignored", "direct", ("read.rows-exact", "read.history")),
    Plant("extra-key-rejected", "direct", ("args.extra-keys",)),
    Plant("list-sorted", "direct", ("list.order", "list.baseline")),
    # pervasive shapes (issue 38): met by nearly every program, each found at once
    Plant("list-every-session", "direct", ("scope.session",)),
    Plant("list-row-twice", "direct", ("list.unique",)),
    Plant("list-not-running", "direct", ("list.running",)),
    Plant("launch-new-socket", "direct", ("launch.socket-kept",)),
    Plant("read-row-added", "direct", ("read.rows-exact",)),
    Plant("send-last-char-lost", "direct", ("send.text-literal", "read.output-shows")),
]
GAPS: dict[str, tuple[str, str, str]] = {
    "exit-by-shared-id": ("direct", "list.exit-removed",
                          "it shows only with resource-id-collision on and past its events.unique-ids, which a hunt "
                          "never goes past: tests/test_behind.py finds it behind that one, and a campaign with both "
                          "on reports it (docs/faults.md)"),
}
"""Faults the machine does not find with the ci profile: out of the suite, not hidden (docs/faults.md).
Each is ``fault: (target, clause, why)``; hunt one by hand with
``python tests/test_faults.py FAULT TARGET BUDGET OUT.json`` (then read OUT.json)."""

SESSIONS_PLANTS = [p for p in PLANTS if p.target == "sessions"]
"""The faults of the HTTP stack: their failures are also written as plain repros."""
REPLAYED = ("view-keeps-closed", "items-page-gap")
"""The sessions faults whose plain repros ``python -m stateful replay`` judges (the first switched on)."""
PLAIN_TRIES = 20
"""Replays of a race's plain repro with its fault on until it fails (it fails when the timing lets it; 5 were
not always enough: a close_all of two pairs passed 5 plain replays in a row), and recording replays of it."""

_DECO = "Decoration(extra=(), ensure_ascii=False, spaced=False, shuffle=0)"
PLAIN_REPLAYS = [
    Plant("resource-id-collision", "replay", ("events.unique-ids",), program=(
        "pairs_0 = state.start(terminal='sh', name='main')",
        f"pairs_1 = state.id_sibling(index=0, how='padded', deco={_DECO})")),
    Plant("close-event-lost", "replay", ("events.recorded",), program=(
        "pairs_0 = state.start(terminal='sh', name='main')", f"state.close(pair=pairs_0, deco={_DECO})")),
    Plant("close-leaks-server", "replay", ("close.nothing-left",), program=(
        "pairs_0 = state.start(terminal='sh', name='main')", f"state.close(pair=pairs_0, deco={_DECO})")),
    Plant("delete-keeps-terminals", "replay", ("session.delete",), program=(
        "pairs_0 = state.start(terminal='sh', name='main')", "state.another_agent(same_pair=False)",
        "state.delete_agent(agent=0)")),
    Plant("scrollback-ignored", "replay", ("read.rows-exact",), program=(
        "pairs_0 = state.start(terminal='bash', name='main')", "state.scroll(index=0)")),
    Plant("read-history-short", "replay", ("read.rows-exact",), program=(
        "pairs_0 = state.start(terminal='bash', name='main')", "state.scroll(index=0)")),
    Plant("scrollback-capped", "replay", ("read.rows-exact",), program=(
        "pairs_0 = state.start(terminal='bash', name='main')", "state.scroll(index=0)")),
    Plant("double-launch", "replay", ("launch.already-running",), program=(
        "pairs_0 = state.start(terminal='sh', name='main')",
        f"pairs_1 = state.launch(agent=0, copies=2, deco={_DECO}, name='x', terminal='sh')")),
]
"""Faults hunted on the direct target whose clauses (resource events, tmux and /proc ground truth,
concurrent launches) have a plain form: each one's program as its hunt shrinks it, replayed on the
sessions target with the fault on, which writes its plain repro (a hunt there would cost minutes of
the suite's time). ``double-launch``: the repro checks the concurrent launches together, so it
passes whichever of them a correct server answers ``launched``."""

CONTROL = Plant("", "direct", ())
"""No fault: the same hunt must pass (a few programs; the full ci run is `pytest stateful/`)."""
CONTROL_EXAMPLES = 5


# -- running hunts in parallel --------------------------------------------------------------------


class Hunter:
    """Runs every hunt in its own interpreter, ``WORKERS`` at a time, from the moment it is created.

    Each hunt is a :mod:`stateful.workers` worker: :meth:`close` (the ``hunter`` fixture's finalizer,
    which also runs when the test run is interrupted by SIGINT or SIGTERM) ends every hunt still
    running, and a hunt whose test run was killed outright ends itself."""

    def __init__(self, temp_root: str, workdir: Path, plants: list[Plant] | None = None) -> None:
        self._temp_root = temp_root
        self._workdir = workdir
        self._workers: dict[str, workers.Worker] = {}
        self._closing = False
        self.walls: dict[str, float] = {}
        """Wall-clock seconds of each hunt or replay that ended, by name (the run's summary lists them,
        longest first: what ``PLANTS``'s order follows)."""
        self._lock = threading.Lock()
        """Orders the start of a hunt against :meth:`close`: none starts once closing began."""
        self._pool = cf.ThreadPoolExecutor(WORKERS, thread_name_prefix="fault-hunt")
        chosen = [*PLANTS, *PLAIN_REPLAYS, CONTROL] if plants is None else plants
        self._futures = {p.key: self._pool.submit(self._run, p) for p in chosen}

    def result(self, key: str) -> tuple[Hunt, float, str]:
        """(the hunt or replay of ``Plant.key``, its wall-clock seconds, the tail of its log)."""
        return self._futures[key].result()

    def _run(self, plant: Plant) -> tuple[Hunt, float, str]:
        name = plant.key or "control"
        out, log = self._workdir / f"{name}.json", self._workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k not in ("STATEFUL_FAULTS", "STATEFUL_VARIANTS")}
        env["TMPDIR"] = self._temp_root
        started = time.monotonic()
        with open(log, "wb") as sink:
            with self._lock:
                if self._closing:
                    return Hunt(message="not run: the test session is ending"), 0.0, ""
                worker = workers.start_worker(
                    [sys.executable, __file__, plant.fault or "-", plant.target, str(plant.budget), str(out)],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                )
                self._workers[name] = worker
            try:
                worker.wait(timeout=HUNT_TIMEOUT)
            except subprocess.TimeoutExpired:
                worker.end()  # its terminals' tmux servers are then ended by its reaper
        wall = time.monotonic() - started
        self.walls[name] = wall
        tail = log.read_text(errors="replace")[-8000:]  # room for a timed-out hunt's stacks
        code = worker.proc.returncode
        if code != 0 or not out.exists():
            return Hunt(error_type="HuntCrashed", message=f"hunt exited {code} after {wall:.0f} s"), wall, tail
        return Hunt(**json.loads(out.read_text())), wall, tail

    def close(self) -> None:
        """Cancel the hunts not started yet and end the running ones (all at once)."""
        with self._lock:
            self._closing = True
            running = list(self._workers.values())
        for future in self._futures.values():
            future.cancel()
        workers.end_all(running)
        self._pool.shutdown(wait=True)


def wanted_hunts(items: Sequence[pytest.Item]) -> list[Plant]:
    """The hunts that the selected tests need (``-k`` picks fewer), replays last (they are short)."""
    names = {item.originalname for item in items if isinstance(item, pytest.Function)}
    wanted = {item.callspec.params["plant"].key for item in items
              if isinstance(item, pytest.Function)
              and item.originalname in ("test_machine_finds_fault", "test_plain_repro_of_a_sessions_fault")}
    if "test_replay_says_which_plain_repros_are_fixed" in names:
        wanted |= {p.key for p in SESSIONS_PLANTS if p.fault in REPLAYED}
    if "test_control_without_fault_passes" in names:
        wanted.add(CONTROL.key)
    if "test_plain_repro_runs_under_a_section6_conftest" in names:
        wanted.add(SECTION6_PLANT)
    return [p for p in [*PLANTS, *PLAIN_REPLAYS, CONTROL] if p.key in wanted]


@contextmanager
def hunting(items: Sequence[pytest.Item], temp_root: str, workdir: Path) -> Iterator[Hunter]:
    """Every hunt the selected tests need, started at once; ended (each still running) on exit. The
    ``hunter`` fixture (tests/conftest.py) opens it at the start of the run, so that the other proofs
    run while the hunts do."""
    running = Hunter(temp_root, workdir, wanted_hunts(items))
    try:
        yield running
    finally:
        running.close()


# -- the tests ------------------------------------------------------------------------------------


def test_every_fault_is_hunted_or_a_known_gap() -> None:
    hunted = [p.fault for p in PLANTS]
    assert sorted(hunted + list(GAPS)) == sorted(faults.FAULTS) and not set(hunted) & set(GAPS)
    unknown = [c for p in [*PLANTS, *PLAIN_REPLAYS] for c in p.clauses if c not in CLAUSES]
    assert not unknown, f"plants name clauses that stateful/clauses.py does not define: {unknown}"
    hunted_for = {p.fault: set(p.clauses) for p in PLANTS}
    odd = [p.key for p in PLAIN_REPLAYS if not set(p.clauses) <= hunted_for.get(p.fault, set())]
    assert not odd, f"replayed faults whose hunts do not accept the clauses their replays break: {odd}"


@pytest.mark.proof
@pytest.mark.parametrize("plant", PLANTS, ids=lambda p: p.fault)
def test_machine_finds_fault(plant: Plant, hunter: Hunter, record_property: Any) -> None:
    result, wall, log = hunter.result(plant.key)
    for key, value in asdict(result).items():
        if key not in ("message", "program"):
            record_property(key, value)
    record_property("wall", round(wall, 1))
    shown = f"{result.error_type}: {result.message}\nprogram:\n" + "\n".join([*result.program, *result.notes])
    assert result.found, f"the machine did not find {plant.fault} in {result.examples} programs\n{log}"
    assert result.assertion, f"{plant.fault}: the failure is not a contract check's:\n{shown}\n{log}"
    assert result.clause in plant.clauses, (
        f"{plant.fault}: the failure names clause {result.clause!r}, not the broken one {plant.clauses}:\n{shown}")
    assert plant.says in result.message, f"{plant.fault}: the failure does not say {plant.says!r}:\n{shown}"
    assert 1 <= len(result.steps) <= plant.max_steps, (
        f"{plant.fault}: the shrunk program has {len(result.steps)} steps (at most {plant.max_steps}):\n{shown}")


def stateful_imports(source: str) -> list[str]:
    """The modules of package ``stateful`` that a Python source imports (parsed, not searched)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [n for n in names if n == "stateful" or n.startswith("stateful.")]
    return found


@pytest.mark.proof
@pytest.mark.parametrize("plant", [*SESSIONS_PLANTS, *PLAIN_REPLAYS], ids=lambda p: p.key)
def test_plain_repro_of_a_sessions_fault(plant: Plant, hunter: Hunter) -> None:
    """The hunt (or, for a fault hunted on the direct target, the replay of its short program on the
    sessions target) wrote the failure as a plain seed-style test too: it imports nothing of this
    project (only the §6 names, from tests.e2e.conftest), fails against the faulty stack for the
    fault's clause and passes against the correct one (replayed by the hunt, with and without the fault)."""
    result, _wall, log = hunter.result(plant.key)
    assert result.clause in plant.clauses, f"{plant.key}: {result.error_type}: {result.message}\n{log}"
    assert result.plain.endswith(".py"), f"{plant.key}: no plain repro: {result.plain}\n{log}"
    path = Path(result.plain)
    clause = result.clause.replace(".", "_").replace("-", "_")
    assert re.fullmatch(rf"test_{clause}_[0-9a-f]{{10}}\.py", path.name), path.name
    source = path.read_text(encoding="utf-8")
    assert stateful_imports(source) == [], source
    tree = ast.parse(source)
    helpers = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "tests.e2e.conftest" for a in node.names}
    assert {"register_inline_agent", "configure_mock_llm", "send_user_message_to_session",
            "poll_session_until_terminal", "http_client", "model_name"} <= helpers
    assert "# step " in source and result.clause in source
    faulty, correct = result.plain_verdicts.get("faulty"), result.plain_verdicts.get("correct")
    assert faulty is not None and faulty[0] == "STILL FAILING" and faulty[1] in plant.clauses, (faulty, source)
    assert correct == ["FIXED", ""], (correct, source)


@pytest.mark.proof
def test_replay_says_which_plain_repros_are_fixed(hunter: Hunter, tmp_path: Path) -> None:
    """``python -m stateful replay DIR --prune`` on the plain repros of two sessions faults with one
    of them switched on: that one STILL FAILING for its clause, the other FIXED (and deleted)."""
    on, off = (next(p for p in SESSIONS_PLANTS if p.fault == name) for name in REPLAYED)
    written = {p.fault: Path(hunter.result(p.key)[0].plain) for p in (on, off)}
    assert all(path.suffix == ".py" for path in written.values()), written
    for path in written.values():
        shutil.copy(path, tmp_path / path.name)
    env = {**{k: v for k, v in os.environ.items() if k != "STATEFUL_FAULTS"}, "STATEFUL_FAULTS": on.fault}
    run = subprocess.run([sys.executable, "-m", "stateful", "replay", str(tmp_path), "--prune"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    failing = tmp_path / written[on.fault].name
    fixed = tmp_path / written[off.fault].name
    assert any(line.startswith(f"STILL FAILING  {failing}: {on.clauses[0]} (") for line in lines), lines
    assert any(line.startswith(f"FIXED          {fixed} (") for line in lines), lines
    assert lines[-1] == "replay: 2 repros: 1 fixed, 1 still failing, 0 skipped, 0 errors; deleted the 1 fixed", lines
    assert failing.exists() and not fixed.exists()


SECTION6_PLANT = "resource-id-collision@replay"
"""The plain repro run under a conftest of a server team's: a short replay, and a repro that checks outputs and
resource events and fails at once with the fault on (close-event-lost's waits 15 s for the missing event)."""
SECTION6_CONFTEST = Path(__file__).with_name("section6_conftest.py")
"""A §6 conftest written without this project (copied into a server-like suite as tests/e2e/conftest.py)."""
SECTION6_PYTEST = "import sys; sys.modules['stateful'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
"""pytest with this project made unimportable: the suite gets nothing from it, not even by a stray import."""
SECTION6_TIMEOUT = 300.0
"""Longest one run of the repro in that suite may take (its turns are bounded by the repro's own timeouts)."""


@pytest.mark.proof
def test_plain_repro_runs_under_a_section6_conftest(hunter: Hunter, terminal_leak_guard: str, tmp_path: Path) -> None:
    """A plain repro dropped as it is into a suite that has only a §6 conftest of its own (which writes
    ``mock_llm_base_url`` as given: the repro must pass the mock's ``/v1`` URL itself) fails against a
    served stack with the fault on, for the fault's clause, and passes against one without it."""
    plant = next(p for p in PLAIN_REPLAYS if p.key == SECTION6_PLANT)
    result, _wall, log = hunter.result(plant.key)
    assert result.plain.endswith(".py"), f"{plant.key}: no plain repro: {result.plain}\n{log}"
    suite = tmp_path / "suite"
    (suite / "tests" / "e2e").mkdir(parents=True)
    for package in ("tests", "tests/e2e"):
        (suite / package / "__init__.py").write_text("", encoding="utf-8")
    shutil.copy(SECTION6_CONFTEST, suite / "tests" / "e2e" / "conftest.py")
    repro = Path(shutil.copy(result.plain, suite / "tests" / "e2e"))
    (suite / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # the suite's root: no conftest above it
    plain_env = {k: v for k, v in os.environ.items() if k not in ("STATEFUL_FAULTS", "PYTHONPATH")}

    def run_in_suite(fault: str) -> subprocess.CompletedProcess[str]:
        """The repro run in the suite against a stack of its own, served with ``fault`` on ('': none)."""
        served = {**plain_env, "TMPDIR": terminal_leak_guard, "STATEFUL_FAULTS": fault}
        with serve_process(env=served) as (server, mock, runner):
            return subprocess.run(
                [sys.executable, "-c", SECTION6_PYTEST, "-q", "-p", "no:cacheprovider", str(repro.relative_to(suite))],
                cwd=suite, capture_output=True, text=True, timeout=SECTION6_TIMEOUT,
                env={**plain_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CONTRACT_SERVER_URL": server,
                     "CONTRACT_MOCK_LLM_URL": mock, "CONTRACT_RUNNER_ID": runner})

    with cf.ThreadPoolExecutor(2, thread_name_prefix="section6") as pool:  # the two at once: each mostly waits
        runs = dict(zip(("faulty", "correct"), pool.map(run_in_suite, (plant.fault, ""))))
    shown = {name: f"exit {run.returncode}\n{run.stdout[-6000:]}{run.stderr[-2000:]}" for name, run in runs.items()}
    faulty, correct = runs["faulty"], runs["correct"]
    assert faulty.returncode == 1 and "1 failed" in faulty.stdout, shown["faulty"]
    assert clause_in(faulty.stdout) in plant.clauses, shown["faulty"]
    assert correct.returncode == 0 and "1 passed" in correct.stdout, shown["correct"]


@pytest.mark.proof
def test_control_without_fault_passes(hunter: Hunter) -> None:
    result, _wall, log = hunter.result(CONTROL.key)
    assert not result.found, f"{result.error_type}: {result.message}\n" + "\n".join(result.program) + log
    assert result.examples >= CONTROL_EXAMPLES


def _main(fault: str, kind: str, budget: str, out: str) -> None:
    """One hunt in this interpreter (what Hunter runs); the result goes to ``out`` as JSON."""
    tries = 1  # replays of each shorter program, and of the plain repro with the fault on: more for a race
    if fault == "-":
        result = hunt(kind, (), settings(CI_SETTINGS, max_examples=CONTROL_EXAMPLES))
    elif kind == "replay":
        plant = next(p for p in PLAIN_REPLAYS if p.fault == fault)
        result = replay(fault, plant.program, Path(out).parent / "plain" / fault)
    else:
        plant = next(p for p in PLANTS if p.fault == fault)
        result = hunt(kind, (fault, *plant.variants), budget=float(budget), shrinks=plant.shrinks, plain_dir=Path(out).parent / "plain",
                      tries=plant.tries)
        tries = plant.tries
    if result.plain.endswith(".py"):  # replayed here, in parallel with the other hunts
        env = {k: v for k, v in os.environ.items() if k != "STATEFUL_FAULTS"}
        for name, faulty in (("faulty", True), ("correct", False)):
            # a race's repro fails when the timing lets it: replayed with the fault on until it does (a few
            # times at most); without the fault, once
            for _ in range(PLAIN_TRIES if faulty and tries > 1 else 1):
                verdict = run_repro(Path(result.plain), env={**env, "STATEFUL_FAULTS": fault} if faulty else env)
                result.plain_replays += 1 if faulty else 0
                if verdict.status != "FIXED":
                    break
            result.plain_verdicts[name] = [verdict.status, verdict.detail]
    Path(out).write_text(json.dumps(asdict(result)), encoding="utf-8")


if __name__ == "__main__":
    workers.follow_parent()  # a hunt ends with its test run, even one that was killed outright
    # a hunt that is about to be ended at HUNT_TIMEOUT first writes where each of its threads is (to its
    # log, which the failing test shows): a hang and a slow hunt then read differently
    faulthandler.dump_traceback_later(HUNT_TIMEOUT - STACKS_BEFORE_TIMEOUT)
    _main(*sys.argv[1:5])

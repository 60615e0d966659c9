"""A shrink pass after Hypothesis's: drop whole steps of the reported program.

Hypothesis shrinks the choices a program was drawn from; deleting a step in the middle of a long
program is one of many passes, each attempt a full replay, and on real terminals (or through HTTP)
it often runs out of budget with steps left that have nothing to do with the failure. This pass
works on the program as Hypothesis reports it (one line of Python per step, as the repro files
replay it): it tries the program's slice first (the failing step and what made its pairs), then
without runs of steps, then without each step, latest first, and keeps a shorter program when it
still fails with the same clause. A step whose bundle value (``pairs_3 = state.launch(...)``) a
later step uses is kept. Each attempt is one replay; their number is bounded, and so the result is the
same on a busy machine as on an idle one.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, note, seed, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
from hypothesis.errors import Flaky
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.stateful import INVARIANT_MARKER, RULE_MARKER, run_state_machine_as_test

from stateful import repro, run_record
from stateful.clauses import clause_of
from stateful.shrinking import shrink_budget

__all__ = ["FailingRun", "PreconditionUnmet", "drop_steps", "failing_run", "invariants_of", "replay_program", "reproduced", "rule_groups", "run_once", "shorter_failure",
           "unreproduced_report", "violations_in"]

REPRODUCE_TRIES = 10
"""Replays of a program whose failure Hypothesis's final replay did not reproduce (see :func:`reproduced`)."""
EARLIER_RUNS = 3
"""The smallest failing runs of a search that :func:`reproduced` gives back to Hypothesis besides the failure's own."""
LATE_REPLAYS = 3
"""Replays of a program :func:`reproduced` still tries after its deadline (a resumed search may end
there, with the program of its final replay)."""
RESUME_SHRINK_SECONDS = 150.0
"""Most seconds a resumed search of :func:`reproduced` shrinks when it has a deadline (half the time left, at most)."""

_TRIES = "stateful_reproduce_tries"
"""The attribute in which :func:`reproduced` leaves, on a failure it could not break again, what each try gave."""
_DEFINES = re.compile(r"^([\w, ]+) = state\.")
_RULE = re.compile(r"^(?:[\w, ]+ = )?state\.(\w+)\(")


class PreconditionUnmet(Exception):
    """A replayed step whose rule's precondition does not hold (the program without some earlier
    step is not one Hypothesis could have run, so it proves nothing)."""
_NAME = re.compile(r"\b[A-Za-z_]\w*_\d+\b")


def invariants_of(machine: type) -> frozenset[str]:
    """The names of a machine's invariants (Hypothesis prints their checks as ``state.name()``)."""
    return frozenset(name for name in dir(machine) if hasattr(getattr(machine, name, None), INVARIANT_MARKER))


def rule_groups(program: Sequence[str], invariants: Collection[str]) -> list[list[str]]:
    """The reported program as steps: each rule's line with the invariant checks that follow it.
    The ``state = ...()`` line and ``state.teardown()`` are left out (a replay adds them)."""
    checks = {f"state.{name}()" for name in invariants}
    groups: list[list[str]] = []
    for line in program:
        if line.startswith("state = ") or line == "state.teardown()":
            continue
        if groups and line in checks:
            groups[-1].append(line)
        else:
            groups.append([line])
    return groups


def _defined(group: list[str]) -> set[str]:
    match = _DEFINES.match(group[0])
    return {name.strip() for name in match.group(1).split(",")} if match else set()


def drop_steps(program: Sequence[str], still_fails: Callable[[list[str]], bool], max_replays: int,
               invariants: Collection[str]) -> list[str]:
    """The shortest program found by dropping steps (never the first, which opens the first agent
    session) while ``still_fails``; at most ``max_replays`` calls of it.

    Against a slow server a replay costs seconds to minutes, so the cheap guesses come first: the
    program's slice (the failing last step, the steps that made the pairs it names, and the first),
    then that slice plus every step naming those pairs; then runs of steps, halving their length
    down to single steps, latest first (a failure usually needs a few steps among many)."""
    head = [line for line in program if line.startswith("state = ")][:1]
    groups = rule_groups(program, invariants)
    replays = 0

    def fails(candidate: list[list[str]]) -> bool:
        nonlocal replays
        replays += 1
        return still_fails(head + [line for group in candidate for line in group] + ["state.teardown()"])

    for kept in _slices(groups):
        if replays >= max_replays:
            break
        if len(kept) < len(groups) and fails([groups[i] for i in kept]):
            groups = [groups[i] for i in kept]
            break
    size = max(1, len(groups) // 2)
    while replays < max_replays:
        changed = False
        end = len(groups)
        while end > 1 and replays < max_replays:
            start = max(1, end - size)
            rest = groups[:start] + groups[end:]
            if _unused_later(groups[start:end], groups[end:]) and fails(rest):
                groups = rest
                changed = True
            end = start
        if size == 1 and not changed:
            break
        size = max(1, size // 2)
    return head + [line for group in groups for line in group] + ["state.teardown()"]


def _unused_later(dropped: list[list[str]], later: list[list[str]]) -> bool:
    """Whether no step of ``later`` uses a bundle value (``pairs_3``) a step of ``dropped`` made."""
    used = {name for group in later for line in group for name in _NAME.findall(line)}
    return not any(_defined(group) & used for group in dropped)


def _slices(groups: list[list[str]]) -> list[list[int]]:
    """Indexes of the steps to keep, smallest guess first: the first step, the last (failing) one and
    the steps that made the bundle values it uses, transitively; then also every step naming them."""
    if len(groups) < 3:
        return []
    makers = {name: i for i, group in enumerate(groups) for name in _defined(group)}
    kept = {0, len(groups) - 1}
    names: set[str] = set()
    todo = [len(groups) - 1]
    while todo:
        for name in _NAME.findall(" ".join(groups[todo.pop()])):
            if name in makers and name not in names:
                names.add(name)
                if makers[name] not in kept:
                    kept.add(makers[name])
                    todo.append(makers[name])
    touching = kept | {i for i, group in enumerate(groups) if names & set(_NAME.findall(" ".join(group)))}
    return [sorted(kept)] + ([sorted(touching)] if touching != kept else [])


def run_once(machine: type, program: Callable[[Any], None]) -> None:
    """Run ``program(state)`` once on a fresh ``machine`` (bound to its target), then its teardown.
    Inside a one-example Hypothesis test, because the rules record ``note()``/``event()``, which only
    exist there; an explicit example, so it runs once (a generated one that fails runs twice), and
    its notes come with the failure it raises."""

    @settings(database=None, phases=[Phase.explicit], deadline=None, suppress_health_check=list(HealthCheck))
    @example(None)
    @given(st.none())
    def once(_: None) -> None:
        state = machine()
        try:
            program(state)
        finally:
            note("state.teardown()")
            state.teardown()

    try:
        once()
    except BaseException as failure:
        notes = getattr(failure, "__notes__", [])
        notes[:] = [n for n in notes if not str(n).startswith("Failing explicit example")]
        raise


def replay_program(machine: type, program: Sequence[str]) -> BaseException | None:
    """Run a reported program once on a fresh ``machine`` (bound to its target); the failure it
    raised, or None. Each step's line is noted after it ran, as Hypothesis reports a program, so the
    failure's notes hold the program (``repro.reported_program`` reads it back). A line that is no
    step (``repro.check_step``: only a server's output could have made it) is refused before anything
    runs: the ``UnsafeStep`` is returned, a failure of no clause."""
    namespace = {name: getattr(repro, name) for name in repro.__all__}
    try:
        checked = [repro.check_step(line) for line in program]
    except repro.UnsafeStep as unsafe:  # nothing of it runs: a failure, of no clause
        return unsafe
    steps = [line for line in checked if not line.startswith("state = ") and line != "state.teardown()"]

    def run(state: Any) -> None:
        note(f"state = {type(state).__name__}()")
        scope = dict(namespace, state=state)
        for line in steps:
            unmet = _unmet_precondition(state, line)
            if unmet:
                raise PreconditionUnmet(f"{line}: the precondition of {unmet} does not hold")
            try:
                exec(line, scope)  # noqa: S102 - a step (repro.check_step: one rule call, printed values)
            finally:
                note(line)
            _fill_bundles(state, line, scope)

    try:
        run_once(machine, run)
    except Exception as failure:  # noqa: BLE001 - judged by the caller (an interrupt ends the run: it propagates)
        return failure
    return None


def _fill_bundles(state: Any, line: str, scope: dict[str, Any]) -> None:
    """Put what a replayed step returned into its rule's bundles, as Hypothesis does when it runs the
    rule (exec of ``pairs_0 = state.start(...)`` only binds the name): a later rule whose
    precondition asks for a non-empty bundle (``concurrent``) then runs as it did."""
    match, defined = _RULE.match(line), _DEFINES.match(line)
    rule = getattr(getattr(type(state), match.group(1), None), RULE_MARKER, None) if match else None
    if rule is None or not defined or not rule.targets:
        return
    values = [scope[name.strip()] for name in defined.group(1).split(",") if name.strip() in scope]
    for target in rule.targets:
        state.bundle(target if isinstance(target, str) else target.name).extend(values)


def _unmet_precondition(state: Any, line: str) -> str | None:
    """The name of the rule ``line`` calls if one of its preconditions is false for ``state``."""
    match = _RULE.match(line)
    method = getattr(type(state), match.group(1), None) if match else None
    rule = getattr(method, RULE_MARKER, None)
    preconditions = rule.preconditions if rule is not None else ()
    if any(not holds(state) for holds in preconditions):
        return match.group(1) if match else None
    return None


def shorter_failure(machine: type, failure: BaseException, max_replays: int | None = None,
                    deadline: float | None = None, tries: int = 1) -> BaseException:
    """``failure`` (a contract violation whose notes hold the program that raised it), or the failure
    of a shorter program that breaks the same clause, found by :func:`drop_steps` with replays of
    ``machine`` (bound to the target that failed; at most 3 per step (times ``tries``) by default, and none after
    ``deadline``, a ``time.time()``: a campaign's budget includes this pass); the same finding,
    clause and cause (:mod:`stateful.causes`). Its notes say how
    many steps were dropped. With ``tries`` > 1 (a race, which fails when the timing lets it) a
    shorter program counts as failing when one of up to ``tries`` replays of it breaks the clause
    (each is one replay of ``max_replays``)."""
    clause = clause_of(failure)
    program = repro.reported_program(failure)
    invariants = invariants_of(machine)
    groups = rule_groups(program, invariants)
    if not clause or len(groups) <= 2:
        return failure
    found: list[BaseException] = []

    budget = [3 * len(groups) * tries if max_replays is None else max_replays]

    def check(candidate: list[str]) -> bool:
        for _ in range(tries):
            if budget[0] <= 0 or (deadline is not None and time.time() >= deadline):
                return False
            budget[0] -= 1
            replayed = replay_program(machine, candidate)
            # the same finding: its clause and its cause (a shorter program that breaks the clause by
            # another cause is another finding, stateful/causes.py)
            if replayed is not None and clause_of(replayed) == clause and \
                    getattr(replayed, "key", None) == getattr(failure, "key", None):
                found[:] = [replayed]
                return True
            if isinstance(replayed, PreconditionUnmet):
                return False  # not a program Hypothesis could have run: no timing makes it one
        return False

    shorter = drop_steps(program, check, budget[0], invariants)
    if not found:
        return failure
    dropped = len(groups) - len(rule_groups(shorter, invariants))
    found[0].add_note(f"stateful: {dropped} of the {len(groups)} steps Hypothesis's shrinking left were dropped "
                      "(each replayed without it, failing the same way)")
    return found[0]


@dataclass(frozen=True)
class FailingRun:
    """A run of Hypothesis's search or shrinking that a contract violation ended: its clause and the
    choices it was drawn from (what :func:`reproduced` can give back to Hypothesis)."""

    clause: str
    choices: tuple[Any, ...]


def failing_run() -> FailingRun | None:
    """In a machine's ``teardown`` (Hypothesis calls it while the run's failure propagates): the run,
    if a contract violation is ending it."""
    error = sys.exc_info()[1]
    clause = clause_of(error) if error is not None else None
    if clause is None:
        return None
    return FailingRun(clause, tuple(current_build_context().data.choices))


def reproduced(machine: type, failure: BaseException, tries: int = REPRODUCE_TRIES,
               hypothesis_settings: settings | None = None, earlier: Sequence[FailingRun] = (),
               deadline: float | None = None) -> BaseException:
    """A failure of ``failure``'s program that breaks a clause again, where ``failure`` is one of
    Hypothesis's ``Flaky`` errors: its final replay of the shrunk program did not fail again
    (``FlakyFailure``), or a replay during its search or shrinking drew other choices than the run
    it replayed (``FlakyStrategyDefinition``, alone or inside a ``FlakyFailure``). A race fails only
    when the timing lets it (two concurrent calls that finish in either order: a server that pairs
    outputs with calls in completion order gets them right half of the time), and Hypothesis ends at
    the first replay that went otherwise. The clauses are those of every violation in ``failure``
    (nested groups, causes and contexts included):

    * the program Hypothesis reported in the notes (its final replay's) is replayed step by step on
      ``machine`` (bound to the target that failed), up to ``tries`` times;
    * without one (Hypothesis stopped in its search or shrinking, before any final replay): the program
      as the run that raised the violation ran it (the machine's own record,
      :mod:`stateful.run_record`; the shortest such run), replayed the same way. A replay of a program
      is immune to what ends Hypothesis's own replays of a race (a run that goes otherwise than the
      one it replays draws other choices: ``FlakyStrategyDefinition``);
    * without either, or if no replay failed again: the choices of the run that failed (read from its traceback) and of the
      ``EARLIER_RUNS`` smallest ``earlier`` failing runs of the search (:func:`failing_run`) are given
      back to Hypothesis as saved examples and Hypothesis replays them and shrinks on from the first
      that fails, with ``hypothesis_settings`` (the settings of the run that failed; the loaded
      profile's by default) and no generation, up to ``tries`` times. Should that stop at a race
      again, the next try goes on from what it got to.

    No resumed search starts after ``deadline`` (a ``time.time()``), and one shrinks for half the time
    left at most (``RESUME_SHRINK_SECONDS`` at most); after it, up to ``LATE_REPLAYS`` replays of a program.
    The first replay of the program that breaks one of those clauses, or the first contract violation a
    resumed search ends with (Hypothesis's own result: it shrinks from the runs that failed, and reports
    what it got to), is returned, with a note
    saying how it came: always a real replay's. Anything else, or no such replay, is returned as it
    was, with a note saying what the tries gave."""
    if not _is_flaky(failure):
        return failure
    clauses = _clauses(failure)
    runs = sorted({run.choices: run for run in earlier}.values(), key=lambda run: len(run.choices))[:EARLIER_RUNS]
    wanted = clauses | {run.clause for run in runs}
    program, choices = _program(failure) or _recorded_program(machine, failure, clauses), _choices(failure, clauses)
    corpus = ([choices] if choices is not None else []) + [run.choices for run in runs]
    outcomes: list[str] = []
    replays = resumes = 0
    # what a replay raises inside the caller's ``except`` has ``failure`` chained as its context: only
    # the replay's own parts tell whether it met the race again
    chained = _parts(failure)
    while len(outcomes) < 2 * tries:
        left = None if deadline is None else deadline - time.time()
        late = left is not None and left <= 0
        if late and not (program and replays < min(tries, LATE_REPLAYS)):
            outcomes.append("deadline")
            break
        if program and replays < tries:
            replays += 1
            replayed, how, count = replay_program(machine, program), "replay", replays
        elif corpus and resumes < tries:
            resumes += 1
            seconds = None if left is None else min(left / 2, RESUME_SHRINK_SECONDS)  # time left to replay what it gives
            replayed, how, count = _resume(machine, corpus, hypothesis_settings, seconds), "resumed search", resumes
        else:
            break
        outcomes.append(f"{how}: " + ("passed" if replayed is None else
                                      f"{type(replayed).__name__} {clause_of(replayed) or ''}".strip()))
        if replayed is None:
            continue
        if _is_flaky(replayed, beyond=chained) and _clauses(replayed):  # the resumed shrinking met the race again:
            wanted |= _clauses(replayed)
            if _program(replayed):  # go on from where it got to
                program, replays, clauses = _program(replayed), 0, clauses | _clauses(replayed)
            more = _choices(replayed, _clauses(replayed))
            corpus = [more, *corpus] if more is not None else corpus
            continue
        if clause_of(replayed) in clauses or (how == "resumed search" and clause_of(replayed) is not None):
            first = ("Hypothesis's final replay of this program passed" if _program(failure)
                     else "Hypothesis stopped at a replay that went otherwise than the run it replayed")
            replayed.add_note(f"stateful: {first}; {how} {count} after it failed again "
                              "(a race: it fails when the timing lets it)")
            return replayed
    failure.add_note(f"stateful: {len(outcomes)} tries did not break {', '.join(sorted(wanted)) or 'a clause'} again "
                     f"({'; '.join(outcomes) or 'nothing to replay: no program, no run'})")
    setattr(failure, _TRIES, tuple(outcomes))
    return failure


def unreproduced_report(failure: BaseException) -> str | None:
    """The report of a violation :func:`reproduced` saw in ``failure`` (a ``Flaky``) and could not break
    again (see :func:`stateful.run_record.unreproduced_report`: its first line says so, then the
    violation, the program as it ran, its transcript and last screens); None if ``failure`` holds no
    violation or was never given to :func:`reproduced`. It is a failure all the same: it was seen."""
    outcomes: tuple[str, ...] | None = getattr(failure, _TRIES, None)
    violations = violations_in(failure)
    if outcomes is None or not violations:
        return None
    recorded = [error for error in violations if (record := run_record.record_of(error)) is not None and record.steps]
    tries = sum(1 for outcome in outcomes if outcome != "deadline")
    return run_record.unreproduced_report((recorded or violations)[0], tries, outcomes)


def _parts(failure: BaseException, beyond: Sequence[BaseException] = ()) -> list[BaseException]:
    """``failure`` and every exception within it: a group's, causes and contexts (each once), never
    going into those of ``beyond`` (another failure's parts, chained to this one as its context)."""
    seen: list[BaseException] = []
    todo = [failure]
    while todo:
        error = todo.pop(0)
        if any(error is s for s in seen) or any(error is b for b in beyond):
            continue
        seen.append(error)
        todo += list(getattr(error, "exceptions", ()))
        todo += [e for e in (error.__cause__, error.__context__) if e is not None]
    return seen


def violations_in(failure: BaseException) -> list[BaseException]:
    """The contract violations in ``failure`` or anywhere within it (see :func:`_parts`)."""
    return [error for error in _parts(failure) if clause_of(error) is not None]


def _is_flaky(failure: BaseException, beyond: Sequence[BaseException] = ()) -> bool:
    return any(isinstance(error, Flaky) for error in _parts(failure, beyond))


def _clauses(failure: BaseException) -> set[str]:
    return {c for error in _parts(failure) if (c := clause_of(error)) is not None}


def _program(failure: BaseException) -> list[str]:
    """The first program reported in the notes of ``failure`` or an exception within it."""
    return next((program for error in _parts(failure) if (program := repro.reported_program(error))), [])


def _recorded_program(machine: type, failure: BaseException, clauses: Collection[str]) -> list[str]:
    """The shortest program that a run raising a violation of ``clauses`` within ``failure`` ran, as
    the machine recorded it (:mod:`stateful.run_record`), with the ``state = ...()`` and
    ``state.teardown()`` lines a reported program has; [] if none has a record. The recorded steps are
    printed from the drawn arguments (never from a server's output), and each is checked by
    :func:`repro.check_step` all the same: a record holding any other line is not replayed."""
    programs: list[list[str]] = []
    for error in _parts(failure):
        record = run_record.record_of(error)
        if clause_of(error) not in clauses or record is None or not record.steps:
            continue
        try:
            programs.append([repro.check_step(step) for step in record.steps])
        except repro.UnsafeStep:
            continue
    if not programs:
        return []
    return [f"state = {machine.__name__}()", *min(programs, key=len), "state.teardown()"]


def _choices(failure: BaseException, clauses: Collection[str]) -> tuple[Any, ...] | None:
    """The choices of the Hypothesis run that raised a violation of ``clauses`` within ``failure``:
    the run's data, found among the locals of the frames its traceback went through."""
    for error in _parts(failure):
        if clause_of(error) not in clauses:
            continue
        tb = error.__traceback__
        while tb is not None:
            for value in tb.tb_frame.f_locals.values():
                if isinstance(value, ConjectureData):
                    return tuple(value.choices)
            tb = tb.tb_next
    return None


class _Resume(InMemoryExampleDatabase):
    """An example database that holds saved examples, as secondary ones for every key (a primary
    one would be replayed and not shrunk again)."""

    def __init__(self, corpus: Sequence[Sequence[Any]]) -> None:
        super().__init__()
        self._saved = [choices_to_bytes(choices) for choices in corpus]

    def fetch(self, key: bytes) -> Iterable[bytes]:
        if key.endswith(b".secondary"):
            yield from self._saved
        yield from super().fetch(key)


def _resume(machine: type, corpus: Sequence[Sequence[Any]], hypothesis_settings: settings | None,
            seconds: float | None = None) -> BaseException | None:
    """Hypothesis run on ``machine`` from the saved examples ``corpus`` (replayed, smallest first, until
    one fails, then shrunk for ``seconds`` at most; no generation); what it raised, or None."""
    resumed = seed(0)(type(machine.__name__, (machine,), {}))
    options = settings(hypothesis_settings or settings(), derandomize=False, database=_Resume(corpus),
                       phases=[Phase.reuse, Phase.shrink])
    try:
        with shrink_budget(None if seconds is None else max(seconds, 10.0)):
            run_state_machine_as_test(resumed, settings=options)
    except Exception as failure:  # noqa: BLE001 - judged by the caller
        return failure
    return None

"""In a worker: what becomes of a program that meets a failure the campaign already knows.

The machine raises every violation as it always does (``stateful.clauses.fail``). The gate sits
around Hypothesis's inner test of one program (``test.hypothesis.inner_test``, which Hypothesis lets
plugins replace) and looks at what escaped it, once the machine's teardown has run:

* a clause the campaign allows (``--allow``, ``--deviations``): counted as known, and the program
  ends as *invalid* (``hypothesis.reject()``), so Hypothesis neither shrinks nor reports it and goes
  on with the next program;
* a failure another worker claimed, or this worker reported in an earlier run: counted, invalid;
* a new one: claimed (``seen.claim``) and let through, so Hypothesis shrinks it as usual.

Once a failure is known (allowed, or reported by the worker that claimed it), the inputs that
provoked it (the violation's ``triggers``) are noted for the campaign: the workers' next searches
stop drawing them (:mod:`stateful.steering`).

A failure's identity is its clause and its cause (:mod:`stateful.causes`): a violation of a claimed
clause that names none of the causes of that clause's findings is a new finding, claimed as
``clause@cause``. While its worker shrinks a finding, a violation of the same clause whose cause is
no other finding's is the same one (the shrinker may find that it needs less, or another input); the
worker names it again by its shrunk program's cause.

It cannot sit inside ``clauses.fail``: the model judges concurrent calls by trying orders and
catching the violations of the orders that do not explain the outputs, so a violation raised there
is not yet a failure. Only what leaves the program is. What a check can go on past is decided
inside the program (``clauses.deviate``): before each program the gate tells it what the campaign
knows (``clauses.know``: the allowed clauses and the findings claimed by others), and after it counts
the deviations the program went on past, as if each had ended a program.

The gate also counts what the campaign reports: programs, steps (rules run), the programs in which
each ``event()`` label (``clause: <id>`` among them) occurred, and it ends a search at its deadline.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import reject
from hypothesis.control import current_build_context
from hypothesis.errors import HypothesisException
from hypothesis.internal.reflection import function_digest

from stateful import clauses
from stateful.campaign import seen
from stateful.causes import known_by, split_key
from stateful.clauses import ContractViolation, clause_of
from stateful.targets.base import TargetError

__all__ = ["BudgetSpent", "Gate", "Resteer", "failure_key", "first_line"]


STEP_CHARS = 2000
MAX_STEPS_KEPT = 80
"""What a claim keeps of the program that found it (the last steps, each cut to ``STEP_CHARS``)."""


class EndSearch(BaseException):
    """Ends a search from within its next program, before the program draws anything (a BaseException,
    so that Hypothesis does not take it for a failure of the program and shrink it).

    Hypothesis concludes the interrupted test case as a program that drew nothing: its record of the
    search took that for one that "stopped drawing earlier than the first run" and raised
    ``FlakyStrategyDefinition`` over it (every search that ended so was reported "ended early"), and it
    was saved in the example database as the empty program. Now the record skips a test case that drew
    nothing (:mod:`stateful.tolerance`), the database drops the empty program
    (:class:`stateful.campaign.database.ProgramsOnly`) and ``--observe`` does not write it
    (:mod:`stateful.observe`). Making it a ``bdb.BdbQuit`` instead (Hypothesis stops at once and records
    nothing) was tried: the joined killed-mid-shrink proof then failed in ci30 and ci31, so it is not
    used until that is understood."""


class BudgetSpent(EndSearch):
    """The campaign's deadline passed before a program started: ends the search."""


class Resteer(EndSearch):
    """A failure became known since this search started and named its trigger: ends the search, so
    that the next one, with a new seed, stops drawing that input (what a search draws is fixed when
    it starts)."""


def failure_key(error: BaseException) -> str:
    """What tells failures apart: the clause of a contract violation and its primary cause
    (``clause@cause``, or the clause alone: :mod:`stateful.causes`); for a failure of the target
    (a hang, a server that broke) or of the tester, ``target:<type>`` or ``error:<type>``."""
    if isinstance(error, ContractViolation) and clause_of(error):
        return error.key
    kind = "target" if isinstance(error, TargetError) else "error"
    return f"{kind}:{type(error).__name__}"


def first_line(error: BaseException) -> str:
    """The failure's first plain line (a violation's starts with its clause id)."""
    text = str(error).strip().split("\n", 1)[0]
    return text if clause_of(error) else f"{type(error).__name__}: {text}"


def program_labels(events: Iterable[object]) -> list[str]:
    """The coverage labels among a program's Hypothesis events: the machine's own (``clause: ...``,
    ``read: ...``: they start in lower case), not those Hypothesis records about its own drawing
    ("Retried draw from <strategy repr> ...", "Draw for ... had to be retried", "Aborted test ..."),
    which say nothing about what the program exercised."""
    return [str(label) for label in events if str(label)[:1].islower()]


def _final_replay() -> bool:
    """Whether Hypothesis is replaying the minimal failing program once more, to report it."""
    try:
        return bool(current_build_context().is_final)
    except Exception:  # no build context: not inside Hypothesis
        return False


@dataclass
class Gate:
    """One worker's gate (see the module docstring). Not thread-safe: one program at a time."""

    seen_dir: seen.Where
    """Where the campaign's claims live (a directory, or a campaign joined in Redis)."""
    allowed: frozenset[str]
    worker: int
    started: float
    """Wall-clock time the campaign started (``first_seen_s`` counts from it)."""
    deadline: float
    """Wall-clock time after which no new program starts."""
    on_program: Callable[[], None] = lambda: None
    """Called after every program (the worker saves its counts)."""
    programs: int = 0
    steps: int = 0
    searched: list[int] = field(default_factory=lambda: [0, 0, 0])
    """``[programs, steps, programs that ended at their first step]`` of the programs the search drew
    (not Hypothesis's shrink candidates of a failure, which are short by design): what tells whether
    the search went on past what it knows (a pervasive bug that ends every program shows as 1 step a
    program)."""
    coverage: Counter[str] = field(default_factory=Counter)
    deep: Counter[str] = field(default_factory=Counter)
    """The coverage of the programs that went on past their first step (a clause held only at the first
    step of programs that then ended is no pass: ``stateful.campaign.verdicts``)."""
    known: Counter[str] = field(default_factory=Counter)
    repeats: Counter[str] = field(default_factory=Counter)
    """Failures already claimed, met again (by key), whether they ended a program or it went on past them."""
    largest_conversation: int = 0
    """Bytes the largest agent session conversation of this worker's programs reached (the machine's count)."""
    examples: dict[str, str] = field(default_factory=dict)
    """The first line of the first known deviation a program went on past, by clause (allowed) or key."""
    done: set[str] = field(default_factory=set)
    """Keys this worker reported in earlier runs."""
    run_claims: set[str] = field(default_factory=set)
    """Keys this worker claimed in the current run (Hypothesis is shrinking them)."""
    ignored: frozenset[str] = frozenset()
    machine: Any = None
    steer: bool = True
    """Note the triggers of known failures, so that later searches avoid them (``--no-steering``: not)."""
    steered: frozenset[str] = frozenset()
    """The triggers the current search avoids (set by the worker when it starts)."""
    going_on: frozenset[str] = frozenset()
    """The findings the current search's programs go on past (set by the worker when it starts:
    fixed, so that a program replays the same way; a search ends once others are known)."""
    resteer: bool = True
    """End the search once a known failure's trigger is not in ``steered`` (not in a search that
    replays the example database first: ending it would skip the failures saved after the first)."""
    given_back: bool = False
    """The search ended because a finding it went on past was given back (its claimer died or was
    interrupted): the next search replays the example database first, where the failure was saved
    when it was found, so that it is met again at once rather than when a search happens on it."""

    def new_run(self) -> None:
        self.done |= self.run_claims
        self.run_claims = set()

    @property
    def shrinking(self) -> bool:
        """This run found a failure: Hypothesis shrinks it now, and every replay must be judged the
        same way (the ignored set is no longer refreshed, the deadline is the shrink budget's)."""
        return bool(self.run_claims)

    def install(self, test: Any, machine: type) -> None:
        """Put the gate around the inner test of ``test`` (from ``get_state_machine_test`` with
        :meth:`factory`), keeping the example database's key that of ``machine`` itself, as
        ``run_state_machine_as_test(machine)`` derives it: so a campaign replays what ``pytest
        stateful/`` saved, and the other way round."""
        inner = test.hypothesis.inner_test
        guarded = self._guard(inner)
        guarded._hypothesis_internal_add_digest = function_digest(machine)  # type: ignore[attr-defined]
        test.hypothesis.inner_test = guarded

    def factory(self, machine: type) -> Callable[[], Any]:
        """A machine factory that lets the gate see the program's machine (its steps)."""

        def make() -> Any:
            self.machine = machine()
            return self.machine

        return make

    def _guard(self, inner: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(inner)
        def run_state_machine(*args: Any, **kwargs: Any) -> None:
            if not self.shrinking:
                if time.time() >= self.deadline:
                    raise BudgetSpent()
                self.ignored = seen.claimed(self.seen_dir) | self.done
                if self.steer and self.resteer and not seen.avoided(self.seen_dir) <= self.steered:
                    raise Resteer()
                if self.resteer and self.others() != self.going_on:
                    self.given_back = bool(self.going_on - self.others())
                    # A new finding is known: the next search goes on past it. Or one this search goes
                    # on past was given back (its claimer died, or ended without a report): the next
                    # search fails on it again, to claim and shrink it (ci16: a search that went on past
                    # it until the deadline left it reported unshrunk).
                    raise Resteer()
            self.machine = None
            searching = not self.shrinking
            clauses.know(self.allowed, self.going_on - self.run_claims)
            try:
                inner(*args, **kwargs)
            except HypothesisException:
                raise
            except Exception as error:
                if self._ignores(error):
                    if self.shrinking and _final_replay():
                        # The final replay of the failure this search shrinks met a known one instead
                        # (a racing server: a row, a timing). Rejected, Hypothesis would end the
                        # search with "Unreliable assumption" and lose the claim (issue 38: 119 searches
                        # ended so); passed, it raises a Flaky holding the claimed failure, which the
                        # worker replays until it fails again (pipeline.settle).
                        return
                    reject()
                raise
            finally:
                self._count_deviations()
                self._account(searching)
        return run_state_machine

    def others(self) -> frozenset[str]:
        """The findings known to this program: claimed by others, or reported by this worker before
        (not those it shrinks now: those must fail)."""
        return (self.ignored | self.done) - self.run_claims

    def _ignores(self, error: BaseException) -> bool:
        key = failure_key(error)
        clause, _ = split_key(key)
        if clause in self.allowed:
            self.known[clause] += 1
            self.steer_away(error)
            return True
        match = known_by(clause, getattr(error, "causes", ()), self.others())
        if match is not None:
            self.repeats[match] += 1
            if match in self.done:  # reported (another worker's report steered when it was made)
                self.steer_away(error, match)
            return True
        if key in self.run_claims or clause in {split_key(k)[0] for k in self.run_claims}:
            return False  # the finding this search shrinks (its cause may change while it does)
        if self.shrinking:
            # Another clause, met by a program the shrinker made from this search's finding: let
            # through, Hypothesis's shrinker would slip to it and the finding it shrinks would be
            # given back unreported (ci12: claimed again 18 s later). Left for a later search.
            return True
        if not seen.claim(self.seen_dir, key, self._claim_info(error)):
            # claimed by another worker, which may still give it back (its shrunk program may name
            # another cause, or fail no more): only its report steers
            self.repeats[key] += 1
            return True
        self.run_claims.add(key)
        return False

    def _count_deviations(self) -> None:
        """The known deviations the program went on past (``clauses.deviate``), counted as known
        (allowed) or met again (claimed), each clause's first kept as its example."""
        met = clauses.deviations()
        for key, count in met.met.items():
            (self.known if key in self.allowed else self.repeats)[key] += count
            example = met.examples[key]
            self.examples.setdefault(key, first_line(example))
            if key in self.allowed or key in self.done:  # a claim not yet reported steers nothing
                self.steer_away(example, None if key in self.allowed else key)
        clauses.know()

    def steer_away(self, error: BaseException, finding: str | None = None) -> None:
        """From the next search on, no worker draws the input that provoked ``error``, a failure the
        campaign knows (allowed, or claimed and reported: a claim given back does not steer). For a
        known ``finding`` (a key), only its own cause: a long text cut short names the ``;`` it
        holds too, and steering away from that would hide the bug that drops a final ``;``."""
        if not self.steer:
            return
        triggers = tuple(getattr(error, "triggers", ()))
        if finding is not None:
            cause = split_key(finding)[1]
            triggers = tuple(t for t in triggers if t == cause)
        seen.avoid(self.seen_dir, triggers)

    def _claim_info(self, error: BaseException) -> dict[str, Any]:
        """What the claim stores; ``program`` counts this worker's programs, this one included (1:
        its first program, e.g. a failure the example database replayed)."""
        clause, cause = split_key(failure_key(error))
        return {"worker": self.worker, "clause": clause, "cause": cause,
                "first_seen_s": round(time.time() - self.started, 1),
                "message": first_line(error), "steps_found": self._steps(), "program": self.programs + 1,
                "as_found": self._program_as_found()}

    def _program_as_found(self) -> list[str]:
        """The program's steps as Hypothesis prints them (each cut to ``STEP_CHARS``): what the report
        shows of a finding that was never shrunk (the budget ended first), to replay it by hand."""
        steps = list(getattr(self.machine, "steps", ()) or ())
        return [step if len(step) <= STEP_CHARS else step[:STEP_CHARS] + "...<cut>" for step in steps[-MAX_STEPS_KEPT:]]

    def _steps(self) -> int:
        """Rules the program ran (a rule that raised counts: it ran)."""
        machine = self.machine
        if machine is None:
            return 0
        busy = getattr(getattr(machine, "world", None), "busy", False)  # the rule that raised (World.busy)
        return int(getattr(machine, "rules_run", 0)) + (1 if busy else 0)

    def _account(self, searching: bool = True) -> None:
        steps = self._steps()
        self.programs += 1
        self.steps += steps
        if searching:
            self.searched[0] += 1
            self.searched[1] += steps
            self.searched[2] += steps <= 1
        world = getattr(self.machine, "world", None)
        self.largest_conversation = max(self.largest_conversation, getattr(world, "largest_conversation", 0))
        try:
            labels = current_build_context().data.events
        except Exception:  # no build context: nothing to count
            labels = {}
        self.coverage.update(program_labels(labels))
        if steps > 1:
            self.deep.update(program_labels(labels))
        self.on_program()

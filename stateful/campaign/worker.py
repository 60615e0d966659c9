"""One search of a campaign: ``python -m stateful.campaign.worker RUN_DIR INDEX``.

The driver starts each worker with ``stateful.workers.start_worker`` (its own session, a lifeline)
and a ``config.json`` in ``RUN_DIR``. The worker opens its own target (for the embedded stack: its
own stack, so workers never share a server's state or a planted fault's damage), then runs
Hypothesis searches of the machine, one after another, each with a new seed, until the deadline:

* a search that finds new failures (see :mod:`stateful.campaign.gate`) ends as a search always
  does: Hypothesis shrinks them (within the shrink budget, never past the deadline), replays and
  raises them; each is then shortened by ``stateful.minimize``, written as a repro and recorded;
* a search that finds nothing new ends after ``max_examples`` programs, and the next one starts.

Only worker 0's first search replays the example database (Hypothesis's ``reuse`` phase), and any
search after one that a given-back finding ended (its claimer died or was interrupted: the database
holds the failure as it was found, so it is met again at once). A replay that does not fail is
deleted from the database, and a replay of a failure claimed meanwhile by another worker is exactly
that.

What it found and counted is written to ``RUN_DIR/worker-INDEX.json`` (atomically, after every
program), which the driver reads for the progress line and the report.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky, HypothesisException, Unsatisfiable
from hypothesis.stateful import get_state_machine_test

from stateful import clauses, pipeline, steering
from stateful.causes import split_key
from stateful.campaign import seen
from stateful.campaign.database import open_db
from stateful.campaign.gate import BudgetSpent, Gate, Resteer, failure_key, first_line
from stateful.observe import observing
from stateful.shrinking import shrink_budget
from stateful.tolerance import described, tolerate_other_answers
from stateful.workers import follow_parent, interrupt_on_signals

__all__ = ["WorkerConfig", "main", "state_path"]

PROFILE = "campaign"
SAVE_EVERY = 0.5
"""Seconds between two saves of the worker's counts (and after every search)."""
SERIES_POINTS = 1000
"""The most points a worker's timestamped series keeps (thinned by half beyond, its last point kept)."""


@dataclass(frozen=True)
class WorkerConfig:
    """What the driver tells every worker (``RUN_DIR/config.json``)."""

    target: str                      # "direct" | "sessions"
    external: list[str] | None       # [server_url, mock_llm_url, runner_id], or None: an embedded stack
    stack_latency: float             # seconds
    allowed: list[str]
    started: float                   # wall clock
    deadline: float                  # wall clock
    shrink_budget: float             # seconds
    repro_dir: str | None
    db: str
    step_timeout: float | None = None
    poll_deadline: float | None = None
    max_examples: int | None = None
    steps_per_program: int | None = None
    steer: bool = True               # later searches avoid the triggers of known failures (stateful.steering)
    conversation_budget: int | None = None   # bytes; None: the campaign profile's
    observe: str | None = None       # a directory for Hypothesis's observations (stateful.observe), or None
    join: dict[str, str] | None = None  # a campaign in Redis (url, campaign, owner, host): claims live there

    @classmethod
    def load(cls, run_dir: Path) -> WorkerConfig:
        return cls(**json.loads((run_dir / "config.json").read_text(encoding="utf-8")))


def state_path(run_dir: Path, index: int) -> Path:
    return run_dir / f"worker-{index}.json"


class Worker:
    """One worker's searches and what they found."""

    def __init__(self, run_dir: Path, index: int, config: WorkerConfig) -> None:
        self.run_dir, self.index, self.config = run_dir, index, config
        self.failures: list[dict[str, Any]] = []
        self.searches: list[int] = []
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.finished = False
        self._saved = 0.0
        self.series: list[list[float]] = []
        """``[seconds since the campaign started, programs, steps]`` at each save (the report's timeline)."""
        self.gate = Gate(seen_dir=seen.open_seen(run_dir / "seen", config.join), allowed=frozenset(config.allowed),
                         worker=index,
                         started=config.started, deadline=config.deadline, on_program=self.save_soon,
                         steer=config.steer)

    # -- what the driver reads -------------------------------------------------------------------

    def save_soon(self) -> None:
        if time.monotonic() - self._saved >= SAVE_EVERY:
            self.save()

    def save(self) -> None:
        g = self.gate
        self.series.append([round(time.time() - self.config.started, 1), g.programs, g.steps])
        if len(self.series) > SERIES_POINTS:  # every other point: the series spans the whole budget, bounded
            last, self.series = self.series[-1], self.series[::2]
            if self.series[-1] is not last:
                self.series.append(last)
        state = {"worker": self.index, "programs": g.programs, "steps": g.steps, "searched": list(g.searched),
                 "largest_conversation": g.largest_conversation, "coverage": dict(g.coverage), "deep": dict(g.deep),
                 "known": dict(g.known), "repeats": dict(g.repeats), "examples": g.examples, "failures": self.failures,
                 "seeds": self.searches, "errors": self.errors, "notes": self.notes, "finished": self.finished,
                 "series": self.series}
        path = state_path(self.run_dir, self.index)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, path)
        self._saved = time.monotonic()

    # -- searching ---------------------------------------------------------------------------------

    def run(self, machine: type, target: Any) -> None:
        """Searches until the deadline (or an interrupt)."""
        base = settings.get_profile(PROFILE)
        database = open_db(self.config.db)
        first = True
        while time.time() < self.config.deadline:
            phases = [Phase.generate, Phase.shrink]
            if (first and self.index == 0) or self.gate.given_back:
                # The example database replayed first, as a search of its own: its saved failures are
                # met at once, and it ends when they are replayed. Such a search cannot end early when a
                # failure becomes known (it would skip the failures saved after the first); with a
                # generate phase too, it went on rejecting a pervasive failure found meanwhile by another
                # worker until the deadline (issue 38: 87 % of the programs of a 2-worker campaign ended
                # at their first step). The next search generates, and goes on past what is known.
                phases = [Phase.reuse, Phase.shrink]
            first = self.gate.given_back = False
            changes: dict[str, Any] = {}
            if self.config.max_examples:
                changes["max_examples"] = self.config.max_examples
            if self.config.steps_per_program:
                changes["stateful_step_count"] = self.config.steps_per_program
            # One new failure per search: Hypothesis stops generating at it and gives it the whole shrink
            # budget (with several, it shrinks them all within one budget, then each waits for the
            # others' replays; against a slow server that took minutes per failure). The next search,
            # with a new seed, finds the others.
            run_settings = settings(base, database=database, phases=phases, report_multiple_bugs=False,
                                    suppress_health_check=list(HealthCheck), **changes)
            seed = random.SystemRandom().getrandbits(64)
            self.searches.append(seed)
            if not self.search(machine, target, run_settings, seed):
                break
        self.finished = True
        self.save()

    def search(self, machine: type, target: Any, run_settings: settings, seed: int) -> bool:
        """One Hypothesis search with ``seed``; False once the deadline ended it."""
        # fixed for the whole search, so that its programs replay and shrink the same way
        self.gate.steered = seen.avoided(self.gate.seen_dir) if self.config.steer else frozenset()
        self.gate.resteer = Phase.reuse not in (run_settings.phases or ())
        self.gate.going_on = seen.claimed(self.gate.seen_dir) | self.gate.done
        steering.avoid(self.gate.steered)
        test = get_state_machine_test(self.gate.factory(machine), settings=run_settings)
        test._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
        self.gate.install(test, machine)
        self.gate.new_run()
        shrink = max(1.0, min(self.config.shrink_budget, self.config.deadline - time.time()))
        interrupted = False
        try:
            return self._run(test, machine, target, run_settings, shrink)
        except (KeyboardInterrupt, SystemExit):  # also while a failure is shortened and replayed (record)
            interrupted = True
            raise
        finally:
            self.release_unreported(interrupted)
            self.save()

    def _run(self, test: Any, machine: type, target: Any, run_settings: settings, shrink: float) -> bool:
        """Run the search's ``test`` and record what it found: False once the deadline ended it."""
        # a server's answers, not only the choices, decide how a program draws: the search goes on past
        # programs that went otherwise than an earlier one (Hypothesis would end it), and notes them
        with tolerate_other_answers() as differed:
            try:
                return self._search_once(test, machine, target, run_settings, shrink)
            finally:
                if differed.note():
                    self.notes.append(f"search {len(self.searches)}: {differed.note()}")

    def _search_once(self, test: Any, machine: type, target: Any, run_settings: settings, shrink: float) -> bool:
        try:
            with shrink_budget(shrink):
                test()
        except BudgetSpent:
            return False
        except Resteer:
            return True  # a failure became known and named its input: the next search avoids it
        except Unsatisfiable:
            return True  # every program of this search met a failure the campaign knows
        except Flaky as flaky:  # a replay went otherwise than the run it replayed: a race, replayed until it fails again
            self.record_flaky(machine, target, flaky, run_settings)
        except HypothesisException as problem:  # Hypothesis ended the search: not a bug found
            self.notes.append(f"search {len(self.searches)} ended early: {type(problem).__name__}: {described(problem)}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as raised:  # noqa: BLE001 - sorted below: what Hypothesis found
            self.record(machine, target, raised)
        return True

    def release_unreported(self, interrupted: bool = False) -> None:
        """Give back the claims of this search that it did not report (it ended some other way):
        another search may find them again, while there is time to shrink them. An interrupted
        search (the campaign process ended, or was killed and the lifeline ended this worker)
        abandons them instead (``seen.abandon``): found, they stay in the report unless another
        process claims them again."""
        reported = {f["key"] for f in self.failures}
        unreported = sorted(self.gate.run_claims - reported)
        if interrupted:
            for key in unreported:
                seen.abandon(self.gate.seen_dir, key)
            return
        if time.time() >= self.config.deadline:
            return
        for key in unreported:
            seen.release(self.gate.seen_dir, key)
            self.gate.run_claims.discard(key)

    def record(self, machine: type, target: Any, raised: BaseException) -> None:
        """Shorten, write out and record every failure of the search that this worker claimed."""
        from stateful.minimize import invariants_of, rule_groups
        from stateful.repro import reported_program

        for failure in _leaves(raised):
            key = self.claim_of(failure)
            if key is None or any(f["key"] == key for f in self.failures):
                continue
            searched = time.time()
            # replayed as its repro will run: going past nothing but the allowed clauses, so that a
            # shorter program counts only if it fails by itself (not through another finding's resync)
            shrunk = pipeline.shorten(machine, failure, deadline=self.config.deadline, allowed=sorted(self.gate.allowed))
            dropped = time.time()
            key = self.rename(key, shrunk)
            if key is None:
                continue
            self.gate.steer_away(shrunk, key)  # the shrunk failure: the least input that provokes it
            program = reported_program(shrunk)
            written = pipeline.write(machine, target, shrunk, Path(self.config.repro_dir) if self.config.repro_dir else None,
                                     deadline=self.config.deadline)
            repro = None if written.repro is None else str(written.repro)
            plain = str(written.plain) if written.plain is not None else (
                None if written.no_plain is None else f"none: {written.no_plain}")
            claim = seen.info(self.gate.seen_dir, key)
            now = time.time()
            seen_at = self.config.started + float(claim.get("first_seen_s", searched - self.config.started))
            split = {"hypothesis": round(searched - seen_at, 1), "drop_steps": round(dropped - searched, 1),
                     "repros": round(now - dropped, 1)}
            clause, cause = split_key(key)
            self.failures.append({
                "clause": clause, "cause": cause, "key": key, "message": first_line(shrunk),
                "first_seen_s": claim.get("first_seen_s"),
                "steps_found": claim.get("steps_found"),
                "steps_shrunk": len(rule_groups(program, invariants_of(machine))) if program else None,
                "shrink_s": round(now - seen_at, 1) if "first_seen_s" in claim else None,
                "repro": repro, "plain": plain, "reproduced": True, "shrunk_s": round(now - self.config.started, 1), "shrink_split_s": split,
                "report": pipeline.report(shrunk), "worker": self.index, "program": claim.get("program"),
                "behind": list(clauses.behind_of(shrunk)),
            })
            self.save()

    def claim_of(self, failure: BaseException) -> str | None:
        """The claim of this search that ``failure`` is: its own key, or the one claim of its clause
        (its cause may have changed while Hypothesis shrank it); None if this search claimed neither."""
        key = failure_key(failure)
        if key in self.gate.run_claims:
            return key
        clause, _ = split_key(key)
        same = sorted(k for k in self.gate.run_claims if split_key(k)[0] == clause)
        return same[0] if same else None

    def rename(self, claimed: str, shrunk: BaseException) -> str | None:
        """The finding's key as its shrunk program names it (the cause is what the *shrunk* program
        needs): the claim moves to that key; None if another worker claimed that one meanwhile (the
        finding is theirs: this claim is given back)."""
        key = failure_key(shrunk)
        if key == claimed:
            return key
        info = {**seen.info(self.run_dir / "seen", claimed), "renamed_from": claimed}
        info.pop("key", None)
        clause, cause = split_key(key)
        info.update(clause=clause, cause=cause)
        taken = seen.claim(self.run_dir / "seen", key, info)
        seen.release(self.run_dir / "seen", claimed)
        self.gate.run_claims.discard(claimed)
        if not taken:
            self.notes.append(f"{claimed} shrank to {key}, which another worker claimed meanwhile: left to it")
            return None
        self.gate.run_claims.add(key)
        return key

    def record_flaky(self, machine: type, target: Any, flaky: BaseException, run_settings: settings) -> None:
        """A violation Hypothesis could not replay (``Flaky``), replayed as ``pytest stateful/`` does
        (``minimize.reproduced``, within the budget): a failure that came back is recorded as any
        other; one that did not is recorded all the same (it was seen), reported whole, with no repro."""
        from stateful.minimize import violations_in

        settled = pipeline.settle(machine, flaky, run_settings, deadline=self.config.deadline)
        if settled.failure is not flaky:
            self.record(machine, target, settled.failure)
            return
        report = settled.unreproduced
        if report is None:
            self.notes.append(f"search {len(self.searches)} ended early: {type(flaky).__name__}: {described(flaky)}")
            return
        for failure in violations_in(flaky):
            key = self.claim_of(failure)
            if key is None or any(f["key"] == key for f in self.failures):
                continue
            claim = seen.info(self.gate.seen_dir, key)
            clause, cause = split_key(key)
            self.failures.append({
                "clause": clause, "cause": cause, "key": key, "message": report.splitlines()[0], "first_seen_s": claim.get("first_seen_s"),
                "steps_found": claim.get("steps_found"), "steps_shrunk": None, "shrink_s": None, "repro": None,
                "plain": None, "reproduced": False, "shrunk_s": round(time.time() - self.config.started, 1),
                "report": report, "worker": self.index, "program": claim.get("program"),
                "behind": list(clauses.behind_of(failure)),
            })
            self.save()


def _leaves(raised: BaseException) -> list[BaseException]:
    """The failures in what Hypothesis raised: one, or each of an exception group's (several distinct
    failures, or a flaky one)."""
    if isinstance(raised, BaseExceptionGroup):
        return [leaf for inner in raised.exceptions for leaf in _leaves(inner)]
    return [raised]


def open_target(config: WorkerConfig, stack: ExitStack) -> tuple[type, Any]:
    """The machine class of the target's kind (bound) and its target, closed by ``stack``."""
    from stateful import profiles
    from stateful.targets import registry

    machine_config = profiles.machine_config(PROFILE, step_timeout=config.step_timeout, poll_deadline=config.poll_deadline,
                                             conversation_budget=config.conversation_budget)
    kind = registry.kind(config.target)
    server = registry.Server(*config.external) if config.external else None
    target = stack.enter_context(kind.target.opened(server, config.stack_latency))
    kind.machine.bind(target, machine_config)
    return kind.machine, target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir, index = Path(args[0]), int(args[1])
    follow_parent()
    interrupt_on_signals()  # SIGTERM from the driver: finish the program's teardown, save, exit
    config = WorkerConfig.load(run_dir)
    worker = Worker(run_dir, index, config)
    try:
        with ExitStack() as stack:
            machine, target = open_target(config, stack)
            stack.enter_context(observing(Path(config.observe) if config.observe else None, f"worker-{index}"))
            worker.run(machine, target)
    except KeyboardInterrupt:
        worker.save()
        return 0
    except Exception:  # an error of the tester itself: reported by the driver, with its traceback
        worker.errors.append(traceback.format_exc())
        worker.save()
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs a campaign: checks its options, starts the workers, shows progress, ends them at the budget,
writes the report, and says how it went (the exit status).

The workers are plain subprocesses (``python -m stateful.campaign.worker``) started with
``stateful.workers.start_worker``: each in a session of its own, holding a lifeline, and ended on
every path (the budget, Ctrl-C, SIGTERM) by ``end_all``; their terminals die with them (each
registry's reaper). There is no scheduler: each worker searches on its own until the deadline, and
the only thing they share is the directory of claimed failures (``seen``) and the example database.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stateful.campaign import seen
from stateful.campaign.database import check_db
from stateful.campaign.deviations import Deviation, DeviationsError, load_deviations, unknown_clause
from stateful.campaign.options import EXIT_USAGE
from stateful.campaign.progress import Progress, Totals
from stateful.campaign.report import CampaignReport, build_report, write_reports
from stateful.campaign.worker import WorkerConfig, state_path
from stateful.workers import end_all, interrupt_on_signals, interrupted_status, restore_signals, start_worker

__all__ = ["run"]

STOP_GRACE = 10.0
"""Seconds after the budget a worker may still take to finish (a program, a shrink's last replay,
writing its repro) before it is ended (SIGTERM, then SIGKILL ``workers.GRACE`` later)."""
TICK = 0.5


class UsageError(Exception):
    """One line, exit status 2."""


def _check(args: argparse.Namespace) -> tuple[list[Deviation], list[str] | None]:
    """The deviations and the external target, or UsageError."""
    deviations: list[Deviation] = []
    if args.deviations is not None:
        try:
            deviations = load_deviations(args.deviations)
        except DeviationsError as exc:
            raise UsageError(str(exc)) from None
    for clause in args.allow:
        problem = unknown_clause(clause)
        if problem:
            raise UsageError(f"--allow {clause}: {problem}")
    given = [args.server_url, args.mock_llm_url, args.runner_id]
    external = None
    if any(given):
        if not all(given):
            raise UsageError("--server-url, --mock-llm-url and --runner-id go together")
        if args.target == "direct":
            raise UsageError("--target direct runs in-process: it takes no --server-url")
        from stateful.e2e import preflight

        problem = preflight(*given)
        if problem:
            raise UsageError(f"{problem} (nothing was tested)")
        external = [str(v).rstrip("/") for v in given]
    problem = check_db(args.db)
    if problem:
        raise UsageError(problem)
    return deviations, external


def _read_states(run_dir: Path, workers: int) -> list[dict[str, Any]]:
    states = []
    for index in range(workers):
        try:
            states.append(json.loads(state_path(run_dir, index).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            states.append({})
    return states


def _totals(run_dir: Path, workers: int, allowed: set[str]) -> Totals:
    states = _read_states(run_dir, workers)
    return Totals(workers=workers, programs=sum(s.get("programs", 0) for s in states),
                  steps=sum(s.get("steps", 0) for s in states), failures=len(seen.claimed(run_dir / "seen")),
                  known=sum(n for s in states for c, n in s.get("known", {}).items() if c in allowed))


def run(args: argparse.Namespace) -> int:
    """The campaign; its exit status: 0 (nothing failed outside the allowed clauses), 1 (a failure or an
    error of the tester), 2 (a usage error), or 128 + the signal's number when SIGINT/SIGTERM ended it
    (130, 143: an interrupted run is not a passed one, whatever it found by then). Its run directory
    (``config.json`` names the database URL) is removed on every path."""
    try:
        deviations, external = _check(args)
    except UsageError as exc:
        print(f"python -m stateful campaign: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    previous = interrupt_on_signals()
    run_dir: Path | None = None
    try:
        run_dir = Path(tempfile.mkdtemp(prefix="campaign-"))
        return _campaign(args, run_dir, deviations, external)
    except KeyboardInterrupt:  # before the workers started, or while the report was made
        print("python -m stateful campaign: interrupted", file=sys.stderr)
        return interrupted_status()
    finally:
        _remove(run_dir)
        restore_signals(previous)


def _remove(run_dir: Path | None) -> None:
    """Remove the run directory, even when the run's interrupt comes while it is being removed (later
    signals are ignored: the second attempt finishes)."""
    if run_dir is None:
        return
    try:
        shutil.rmtree(run_dir, ignore_errors=True)
    except KeyboardInterrupt:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _campaign(args: argparse.Namespace, run_dir: Path, deviations: list[Deviation], external: list[str] | None) -> int:
    """Start the workers, follow them until the budget (or an interrupt), report; the exit status."""
    allowed = sorted(set(args.allow) | {d.clause for d in deviations})
    (run_dir / "seen").mkdir()
    started = time.time()
    config = WorkerConfig(
        target="sessions" if external else args.target, external=external, stack_latency=args.stack_latency,
        allowed=allowed, started=started, deadline=started + args.budget, shrink_budget=args.shrink_budget,
        repro_dir=args.repro_dir or None, db=args.db, step_timeout=args.step_timeout,
        poll_deadline=args.poll_deadline, steps_per_program=args.steps, steer=not args.no_steering)
    (run_dir / "config.json").write_text(json.dumps(asdict(config)), encoding="utf-8")
    progress = Progress(args.budget, quiet=args.quiet)
    workers = []
    interrupted = False
    try:
        for index in range(args.workers):
            log = open(run_dir / f"worker-{index}.log", "wb")  # noqa: SIM115 - closed once the worker is
            with log:
                workers.append(start_worker([sys.executable, "-m", "stateful.campaign.worker", str(run_dir),
                                             str(index)], stdout=log, stderr=subprocess.STDOUT))
        hard_stop = config.deadline + STOP_GRACE
        while any(w.proc.poll() is None for w in workers) and time.time() < hard_stop:
            progress.show(time.time() - started, _totals(run_dir, args.workers, set(allowed)))
            time.sleep(TICK)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        end_all(workers)
        progress.done()
    elapsed = time.time() - started
    states = _read_states(run_dir, args.workers)
    report = build_report(args.budget, elapsed, args.workers, states, seen.claims(run_dir / "seen"),
                          deviations, allowed, steered=seen.avoided(run_dir / "seen"), interrupted=interrupted)
    for index, (worker, state) in enumerate(zip(workers, states)):
        if worker.proc.returncode not in (0, None) and not state.get("errors") and not interrupted \
                and worker.proc.returncode > 0:
            log = (run_dir / f"worker-{index}.log").read_text(errors="replace")[-3000:]
            report.errors.append(f"worker {index} exited {worker.proc.returncode}:\n{log}")
    written = write_reports(report, args.report) if args.report is not None else []
    if not args.quiet:
        _summary(report, written, interrupted)
    if interrupted:
        return interrupted_status()
    return 1 if report.failed else 0


def _summary(report: CampaignReport, written: list[Path], interrupted: bool) -> None:
    rate = report.steps / report.elapsed_s if report.elapsed_s else 0.0
    head = "interrupted" if interrupted else "done"
    lines = [f"campaign {head} after {report.elapsed_s:g} s (budget {report.budget_s:g} s): {report.workers} workers, "
             f"{report.programs} programs, {report.steps} steps ({rate:.1f} steps/s)"]
    lines += [f"FAILED {f.get('key', f['clause'])}: {f['message'][:200]}" + (f"\n  repro: {f['repro']}" if f.get("repro") else
                                                                "\n  (no repro: its replays did not fail again)"
                                                                if f.get("reproduced") is False else
                                                                "\n  (not shrunk: the budget ended first)")
              + (f"\n  plain repro: {f['plain']}" if str(f.get("plain") or "").endswith(".py") else "")
              for f in report.failures]
    lines += [f"known  {k['clause']}: met {k['count']} times" for k in report.known]
    lines += [f"ERROR  {e.strip().splitlines()[-1]}" for e in report.errors]
    if report.steered:
        lines.append(f"steered away from (inputs of known failures): {', '.join(report.steered)}")
    if interrupted:
        lines.append("interrupted: the budget was not spent, so this is no verdict of a pass")
    elif not report.failures and not report.errors:
        lines.append("no clause failed outside the allowed ones")
    lines += [f"report: {p}" for p in written]
    print("\n".join(lines), flush=True)

"""Runs a campaign: checks its options, starts the workers, shows progress, ends them at the budget,
writes the report, and says how it went (the exit status).

The workers are plain subprocesses (``python -m stateful.campaign.worker``) started with
``stateful.workers.start_worker``: each in a session of its own, holding a lifeline, and ended on
every path (the budget, Ctrl-C, SIGTERM) by ``end_all``; their terminals die with them (each
registry's reaper). There is no scheduler: each worker searches on its own until the deadline, and
the only thing they share is the directory of claimed failures (``seen``) and the example database.

With ``--join URL --campaign NAME`` the process is one of many of a campaign coordinated in Redis
(``stateful.campaign.joined``): its workers claim there, the first process's deadline is everyone's,
the driver heartbeats and publishes its workers' counts and findings, gives back the claims of dead
processes, and, with ``--report``, the last one to finish writes the report of the whole campaign
(``campaign report`` writes it at any time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from stateful.campaign import seen
from stateful.campaign.database import REDIS_SCHEMES, check_db
from stateful.campaign.deviations import Deviation, DeviationsError, dump_deviations, load_deviations, unknown_clause
from stateful.campaign.joined import HEARTBEAT_TIMEOUT, JoinError, Joined, check_name, join, joined_report
from stateful.campaign.options import EXIT_USAGE
from stateful.campaign.progress import Progress, Totals
from stateful.campaign.report import NOT_SHRUNK, CampaignReport, build_report, grouped_notes, note_line, write_reports
from stateful.campaign.worker import WorkerConfig, state_path
from stateful.workers import GRACE, end_all, interrupt_on_signals, interrupted_status, restore_signals, start_worker
from stateful.targets.registry import kind

__all__ = ["run"]

STOP_GRACE = 10.0
"""Seconds after the budget a worker may still take to finish (a program, a shrink's last replay,
writing its repro) before it is ended (SIGTERM, then SIGKILL ``workers.GRACE`` later)."""
TICK = 0.5
REPLAY_TIMEOUT = 300.0
"""The least time one deviation's repro may take to replay at the start (the budget, if longer)."""


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
        if not kind(args.target).takes_server:
            raise UsageError(f"--target {args.target} runs in-process: it takes no --server-url")
        from stateful.client import preflight

        problem = preflight(*given)
        if problem:
            raise UsageError(f"{problem} (nothing was tested)")
        external = [str(v).rstrip("/") for v in given]
    problem = check_db(args.db) or _check_join(args)
    if problem:
        raise UsageError(problem)
    if args.observe is not None:
        try:
            args.observe.mkdir(parents=True, exist_ok=True)
        except OSError as why:
            raise UsageError(f"--observe {args.observe}: cannot make the directory: {why.strerror}") from None
    return deviations, external


def _check_join(args: argparse.Namespace) -> str | None:
    """None if ``--join``/``--campaign`` are usable together (or both absent), else why not."""
    if args.join is None and args.campaign is None:
        return "campaign report needs --join URL --campaign NAME --report DIR" if args.action == "report" else None
    if args.join is None or args.campaign is None:
        return "--join and --campaign go together (a Redis URL and the campaign's name)"
    if args.join.partition("://")[0].lower() not in REDIS_SCHEMES or "://" not in args.join:
        return (f"--join {args.join}: a campaign is joined through Redis: redis://host:port/n, rediss://host:port/n "
                "or unix:///path/to/redis.sock?db=n")
    if args.action == "report" and args.report is None:
        return "campaign report needs --report DIR (where to write it)"
    return check_name(args.campaign) or check_db(args.join, "--join")


def _read_states(run_dir: Path, workers: int) -> list[dict[str, Any]]:
    states = []
    for index in range(workers):
        try:
            states.append(json.loads(state_path(run_dir, index).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            states.append({})
    return states


def _totals(states: list[dict[str, Any]], where: seen.Where, allowed: set[str]) -> Totals:
    try:
        failures = len(seen.claimed(where))
    except RedisError:  # a joined campaign's Redis did not answer this time: the line shows what it can
        failures = 0
    workers = len(states)
    return Totals(workers=workers, programs=sum(s.get("programs", 0) for s in states),
                  steps=sum(s.get("steps", 0) for s in states), failures=failures,
                  known=sum(n for s in states for c, n in s.get("known", {}).items() if c in allowed))


def run(args: argparse.Namespace) -> int:
    """The campaign; its exit status: 0 (nothing failed outside the allowed clauses), 1 (a failure or an
    error of the tester), 2 (a usage error), or 128 + the signal's number when SIGINT/SIGTERM ended it
    (130, 143: an interrupted run is not a passed one, whatever it found by then). Its run directory
    (``config.json`` names the database URL) is removed on every path."""
    try:
        if args.action == "report":
            return _report_joined(args)
        deviations, external = _check(args)
        allowed = sorted(set(args.allow) | {d.clause for d in deviations})
        joined = (join(args.join, args.campaign, args.budget, allowed, deviations,
                       target="sessions" if external else args.target) if args.join else None)
    except (UsageError, JoinError) as exc:
        print(f"python -m stateful campaign: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    previous = interrupt_on_signals()
    run_dir: Path | None = None
    try:
        run_dir = Path(tempfile.mkdtemp(prefix="campaign-"))
        return _campaign(args, run_dir, deviations, external, joined)
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


def _campaign(args: argparse.Namespace, run_dir: Path, deviations: list[Deviation], external: list[str] | None,
              joined: Joined | None = None) -> int:
    """Replay the deviations' repros, start the workers, follow them until the budget (or an interrupt),
    report; the exit status."""
    allowed = sorted(set(args.allow) | {d.clause for d in deviations})
    fixed, failing, replays = _replay_deviations(deviations, external, args.budget, quiet=args.quiet)
    (run_dir / "seen").mkdir()
    where: seen.Where = joined.seen if joined else run_dir / "seen"
    started = joined.started if joined else time.time()
    deadline = joined.deadline if joined else started + args.budget
    config = WorkerConfig(
        target="sessions" if external else args.target, external=external, stack_latency=args.stack_latency,
        allowed=allowed, started=started, deadline=deadline, shrink_budget=args.shrink_budget,
        repro_dir=args.repro_dir or None, db=args.db, step_timeout=args.step_timeout,
        poll_deadline=args.poll_deadline, steps_per_program=args.steps, steer=not args.no_steering,
        conversation_budget=args.conversation_budget,
        observe=str(args.observe.resolve()) if args.observe is not None else None,
        join=joined.worker_join() if joined else None)
    (run_dir / "config.json").write_text(json.dumps(asdict(config)), encoding="utf-8")
    progress = Progress(deadline - started, quiet=args.quiet)
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
            states = _read_states(run_dir, args.workers)
            if joined:
                joined.tick(states)
            progress.show(time.time() - started, _totals(states, where, set(allowed)))
            time.sleep(TICK)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        end_all(workers)
        progress.done()
    elapsed = time.time() - started
    states = _read_states(run_dir, args.workers)
    if joined:
        try:
            return _end_joined(args, joined, states, workers, run_dir, interrupted)
        except RedisError as exc:
            print(f"python -m stateful campaign: error: Redis does not answer, so this process cannot publish what its "
                  f"workers found nor write the campaign's report: {type(exc).__name__}: {exc}", file=sys.stderr)
            return interrupted_status() if interrupted else 1
    report = build_report(args.budget, elapsed, args.workers, states, seen.claims(run_dir / "seen"),
                          deviations, allowed, steered=seen.avoided(run_dir / "seen"), interrupted=interrupted,
                          target=config.target, fixed_repros=fixed, failing_repros=failing, replays=replays)
    report.errors += _worker_exits(workers, states, run_dir, interrupted)
    written = write_reports(report, args.report) if args.report is not None else []
    if args.write_deviations is not None and not interrupted:
        written.append(_write_baseline(args.write_deviations, report))
    if not args.quiet:
        _summary(report, written, interrupted, observed=args.observe)
    elif report.failed:  # a red run says why, even with --quiet (a CI log may be all a user gets)
        print("\n".join(_failure_lines(report)), file=sys.stderr, flush=True)
    for entry in report.stale:  # one line each, even with --quiet: what to remove from the file
        print(entry.line() + (" (--allow-stale: not failing)" if args.allow_stale else ""), file=sys.stderr, flush=True)
    if interrupted:
        return interrupted_status()
    return 1 if report.failed or (report.stale and not args.allow_stale) else 0


def _replay_deviations(deviations: list[Deviation], external: list[str] | None, budget: float, *,
                       quiet: bool) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """Replay each deviation's repro (``stateful.replay``) before the search starts, against the same
    server: (the entries whose repro is FIXED -> why they are stale, the entries whose repro is STILL
    FAILING, every replayed entry -> its line), entries by their ``FILE:LINE``. A repro that is skipped
    or cannot run proves nothing either way: it is reported, nothing more."""
    from stateful.replay import run_repro

    server = [x for flag, value in zip(("--server-url", "--mock-llm-url", "--runner-id"), external or ())
              for x in (flag, value)]
    fixed: dict[str, str] = {}
    failing: set[str] = set()
    replays: dict[str, str] = {}
    for deviation in deviations:
        path = deviation.repro_path
        if path is None:
            continue
        verdict = run_repro(path, server, timeout=max(REPLAY_TIMEOUT, budget))
        said = f"{verdict.status}" + (f" ({verdict.detail})" if verdict.detail else "") + f" in {verdict.seconds:.1f} s"
        replays[deviation.source] = f"{deviation.repro}: {said}"
        if verdict.status == "FIXED":
            fixed[deviation.source] = "replays FIXED at the campaign's start"
        elif verdict.status == "STILL FAILING":
            failing.add(deviation.source)
        if not quiet:
            print(f"deviation {deviation.clause} ({deviation.source}): repro {deviation.repro} {said}", flush=True)
    return fixed, failing, replays


def _write_baseline(path: Path, report: CampaignReport) -> Path:
    """``--write-deviations``: this run's baseline, a file ``--deviations`` reads back: each failure
    (its clause, cause, first line and repro) and each deviation of ``--deviations`` that is not stale
    (as it was); a failure that is no clause (a hang, an error of the tester) is left out. Repro paths
    are written relative to the file."""
    from stateful.clauses import CLAUSES

    entries: list[Deviation] = []
    for f in report.failures:
        if f["clause"] in CLAUSES:
            repro = f.get("plain") if str(f.get("plain") or "").endswith(".py") else f.get("repro")
            entries.append(Deviation(f["clause"], str(f.get("message") or f["clause"]).strip(),
                                     cause=str(f.get("cause") or ""), repro=str(repro or "")))
    stale = {e.deviation.source for e in report.stale}
    entries += [Deviation(d.clause, d.why, d.server, d.version, d.cause, str(d.repro_path) if d.repro_path else "")
                for d in report.deviations if d.source not in stale]
    entries = [replace(d, repro=os.path.relpath(Path(d.repro).resolve(), path.resolve().parent)) if d.repro else d
               for d in entries]
    path.write_text(dump_deviations(entries, "Known deviations: the baseline a campaign wrote (--write-deviations).\n"
                                             "Remove an entry once it is fixed (the campaign says which: stale)."),
                    encoding="utf-8")
    return path


def _worker_exits(workers: list[Any], states: list[dict[str, Any]], run_dir: Path, interrupted: bool) -> list[str]:
    """The workers that broke without saying why in their counts: each with the end of its log."""
    errors = []
    for index, (worker, state) in enumerate(zip(workers, states)):
        if worker.proc.returncode not in (0, None) and not state.get("errors") and not interrupted \
                and worker.proc.returncode > 0:
            log = (run_dir / f"worker-{index}.log").read_text(errors="replace")[-3000:]
            errors.append(f"worker {index} exited {worker.proc.returncode}:\n{log}")
    return errors


def _end_joined(args: argparse.Namespace, joined: Joined, states: list[dict[str, Any]], workers: list[Any],
                run_dir: Path, interrupted: bool) -> int:
    """This process of a joined campaign ended: publish what its workers found, leave the campaign, and
    with ``--report`` write the whole campaign's report if this is the process that takes that task
    (the first to ask once every other one finished or died); the exit status of the campaign as known."""
    for index, error in enumerate(_worker_exits(workers, states, run_dir, interrupted)):
        states[index] = {**states[index], "errors": [*states[index].get("errors", []), error]}
    joined.publish(states)
    joined.finish(interrupted)
    written: list[Path] = []
    note = ""
    if args.report is not None:
        # the others stop by the common deadline plus the grace; a killed one is dead after a heartbeat timeout
        patience = max(0.0, joined.deadline + STOP_GRACE + GRACE - time.time()) + HEARTBEAT_TIMEOUT
        # interrupted, it does not wait; it writes the report only if nobody else still runs to write it
        still = joined.await_the_others(0.0 if interrupted else patience)
        reporter = joined.take_the_report() if not (interrupted and still) else ""
        report = joined_report(joined.url, joined.name)
        if not reporter:
            note = f"the campaign goes on ({len(still)} processes): campaign report --join ... --campaign NAME writes it"
        elif reporter == joined.owner:
            written = write_reports(report, args.report)
            note = f"still running when the report was written: {', '.join(still)}" if still else ""
        else:
            note = f"the campaign's report is written by {reporter} (or: campaign report --join ... --campaign NAME)"
    else:
        report = joined_report(joined.url, joined.name)
    if not args.quiet:
        _summary(report, written, interrupted, observed=args.observe)
        if note:
            print(note, flush=True)
    if joined.trouble:
        print(f"python -m stateful campaign: warning: {joined.trouble}", file=sys.stderr)
    if interrupted:
        return interrupted_status()
    return 1 if report.failed else 0


def _report_joined(args: argparse.Namespace) -> int:
    """``campaign report --join URL --campaign NAME --report DIR``: the whole campaign's report, written
    now (while it runs, or after); exit 1 if it failed, else 0."""
    problem = _check_join(args)
    if problem:
        raise UsageError(problem)
    report = joined_report(args.join, args.campaign)
    written = write_reports(report, args.report)
    if not args.quiet:
        _summary(report, written, report.interrupted)
    return 1 if report.failed else 0


def _failure_lines(report: CampaignReport) -> list[str]:
    """What failed the campaign: each failure (its key, message and repro) and each tester error."""
    lines = [f"FAILED {f.get('key', f['clause'])}: {f['message'][:200]}\n  {_repro_line(f)}"
             + (f"\n  plain repro: {f['plain']}" if str(f.get("plain") or "").endswith(".py") else "")
             for f in report.failures]
    return lines + [f"ERROR  {e.strip().splitlines()[-1]}" for e in report.errors]


def _repro_line(failure: dict[str, Any]) -> str:
    """Where a failure's repro is, or why it has none. A shrunk one has none under ``--repro-dir ''``, and
    none where it is no clause's (a hang, an error of the target): the line does not guess which."""
    if failure.get("repro"):
        return f"repro: {failure['repro']}"
    if failure.get("reproduced") is False:
        return "(no repro: its replays did not fail again)"
    if failure.get("steps_shrunk") is not None:
        return f"(shrunk to {failure['steps_shrunk']} steps; no repro written)"
    return NOT_SHRUNK


def _summary(report: CampaignReport, written: list[Path], interrupted: bool, observed: Path | None = None) -> None:
    rate = report.steps / report.elapsed_s if report.elapsed_s else 0.0
    head = "interrupted" if interrupted else "done"
    lines = [f"campaign {head} after {report.elapsed_s:g} s (budget {report.budget_s:g} s): {report.workers} workers, "
             f"{report.programs} programs, {report.steps} steps ({rate:.1f} steps/s)"
             + (f", largest agent conversation {report.largest_conversation / 1000:.1f} kB"
                if report.largest_conversation else "")]
    lines += _failure_lines(report)
    lines += [f"known  {k['clause']}: met {k['count']} times" for k in report.known]
    if report.steered:
        lines.append(f"steered away from (inputs of known failures): {', '.join(report.steered)}")
    lines += [f"note  {note_line(group)}" for group in grouped_notes(report.notes)]
    if interrupted:
        lines.append("interrupted: the budget was not spent, so this is no verdict of a pass")
    elif not report.failures and not report.errors:
        lines.append("no clause failed outside the allowed ones")
    if report.stale:
        lines.append(f"{len(report.stale)} known deviations are stale (fixed): remove their entries (the STALE lines)")
    lines += [f"report: {p}" for p in written]
    if observed is not None:
        lines.append(f"observations (Hypothesis, JSON lines): {observed}")
    print("\n".join(lines), flush=True)

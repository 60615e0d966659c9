"""``python -m stateful replay DIR|FILE... [--server-url U --mock-llm-url M --runner-id R] [--prune]``.

After a server's team fixed something they want one answer per repro: FIXED, STILL FAILING (and the
clause), SKIPPED (a test of it was skipped, e.g. it needs the server's machine: what did not run is not
fixed, and ``--prune`` keeps it), or ERROR (it could not run: a collection error, a server that cannot
be reached). Each repro,
of either kind (the machine's ``test_repro_<target>_<digest>.py`` or a plain
``test_<clause>_<digest>.py``), runs in its own pytest subprocess, so that one that breaks its
interpreter or hangs cannot take the others with it, against the embedded stack (each run starts its
own) or the server the options name. The subprocess loads only this package's plugins
(``--noconftest -p stateful.e2e -p stateful.pytest_machine``): a repro behaves the same wherever it lies,
and the plain ones find ``tests.e2e.conftest`` on ``PYTHONPATH`` (this project's, or the caller's
working directory's). Exit status 0 only if every repro is fixed (a skipped one is not); 2 for bad input.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stateful import workers
from stateful.clauses import CLAUSES

__all__ = ["Verdict", "collect", "not_run", "run_repro", "main"]

ROOT = Path(__file__).resolve().parent.parent
"""The project root (it holds tests/e2e/conftest.py, which plain repros import)."""
REPRO = re.compile(r"^test_\w+_[0-9a-f]{10}\.py$")
"""A repro's file name, of either kind (the writers end it in a 10-digit hex digest)."""
CLAUSE = re.compile(r"\b([a-z]+(?:\.[a-z-]+)+):")
EXCEPTION = re.compile(r"^E\s+[\w.]*(Error|Exception|Timeout|Exit)\b")
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")
"""The counts of pytest's last line (``1 passed, 2 skipped in 3.0s``)."""
SKIP_REASON = re.compile(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", re.MULTILINE)
"""A skip's reason as ``-rs`` shows it (``SKIPPED [1] test_x.py:7: needs tmux``)."""
"""pytest's line naming the exception (``E   SyntaxError: ...``)."""
FINDING = re.compile(r"^(?:E\s+)?finding: (\S+)(?: \(this repro was written for (\S+?):)?", re.MULTILINE)
"""The note a repro that names its finding adds to its failure (stateful/conftest.py repro_machine)."""
TIMEOUT = 900.0
"""Longest one repro may run (its process group is ended then)."""
EXIT_USAGE = 2


@dataclass(frozen=True)
class Verdict:
    path: Path
    status: str
    """"FIXED" | "STILL FAILING" | "SKIPPED" | "ERROR"."""
    detail: str = ""
    """The clause (STILL FAILING), what did not run and why (SKIPPED) or what went wrong (ERROR), in one line."""
    seconds: float = 0.0

    def line(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.status:<14} {self.path}{detail} ({self.seconds:.1f} s)"


def collect(paths: Sequence[str]) -> list[Path]:
    """The repros the arguments name: files as given, directories' repro files (sorted).
    ValueError (one line) for a path that does not exist or a directory with no repro."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.is_file() and REPRO.match(p.name))
            if not inside:
                raise ValueError(f"no repro (test_*_<digest>.py) in {path}")
            found += inside
        else:
            raise ValueError(f"no such file or directory: {path}")
    return found


def clause_in(output: str) -> str | None:
    """The clause a failed run names: the first known clause id at the head of an error message
    (``SendKeysViolation: send.keys: ...``, ``AssertionError: view.terminals: step 3: ...``)."""
    for line in output.splitlines():
        if not (line.startswith("E ") or "Violation" in line or "Error:" in line):
            continue
        for match in CLAUSE.finditer(line):
            if match.group(1) in CLAUSES:
                return match.group(1)
    return None


def _reason(output: str, code: int) -> str:
    """Why a run that neither passed nor failed for a clause did so, in one line: a usage error's
    own line (e.g. a server that cannot be reached), else the first exception pytest shows."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    collecting = "collection error: " if "ERROR collecting" in output else ""
    for line in lines:
        if line.startswith("ERROR: "):
            return line.removeprefix("ERROR: ")[:300]
    for line in lines:
        if EXCEPTION.match(line):
            return collecting + line.removeprefix("E").strip()[:300]
    if code == 5:
        return "no test in it"
    return f"pytest exited {code}: {lines[-1][:300] if lines else 'no output'}"


def not_run(output: str) -> str | None:
    """What of a run that exited 0 did not run and pass (its tests skipped or expected to fail), in one
    line with the first skip's reason; None if every test ran and passed."""
    last = next((line for line in reversed(output.splitlines()) if SUMMARY.search(line)), "")
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in SUMMARY.findall(last)}
    if not counts.get("skipped") and not counts.get("xfailed") and counts.get("passed", 0) + counts.get("xpassed", 0):
        return None
    shown = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n) or "no test passed"
    reason = SKIP_REASON.search(output)
    return shown + (f" ({reason.group(1).strip()[:200]})" if reason else "")


def run_repro(path: Path, server: Sequence[str] = (), *, env: Mapping[str, str] | None = None,
              timeout: float = TIMEOUT) -> Verdict:
    """Run one repro in its own pytest subprocess; its verdict."""
    child_env = dict(os.environ if env is None else env)
    extra = [str(ROOT), os.getcwd(), child_env.get("PYTHONPATH", "")]
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in extra if p)
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--noconftest",
            "-p", "stateful.e2e", "-p", "stateful.pytest_machine", "--rootdir", str(path.parent.resolve()),
            str(path.resolve()), *server]
    started = time.monotonic()
    with tempfile.TemporaryFile() as sink:
        worker = workers.start_worker(argv, env=child_env, cwd=path.parent.resolve(), stdin=subprocess.DEVNULL,
                                      stdout=sink, stderr=subprocess.STDOUT)
        try:
            code = worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            worker.end()
            return Verdict(path, "ERROR", f"did not finish within {timeout:.0f} s", time.monotonic() - started)
        finally:
            if worker.proc.returncode is None:
                worker.end()  # interrupted: the run's terminals go with it
        sink.seek(0)
        output = sink.read().decode(errors="replace")
    seconds = time.monotonic() - started
    if code == 0:
        skipped = not_run(output)
        return Verdict(path, "FIXED", "", seconds) if skipped is None else Verdict(path, "SKIPPED", skipped, seconds)
    clause = clause_in(output) if code == 1 else None
    if clause is not None:
        finding = FINDING.search(output)  # a repro that names its finding (clause@cause) says which it is now
        detail = clause if finding is None else finding.group(1) + (
            f" (written for {finding.group(2)}: it fails for both)" if finding.group(2) else "")
        return Verdict(path, "STILL FAILING", detail, seconds)
    if code == 1:
        return Verdict(path, "ERROR", f"failed without naming a clause: {_reason(output, code)}", seconds)
    return Verdict(path, "ERROR", _reason(output, code), seconds)


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("paths", nargs="+", metavar="DIR|FILE", help="repro files, or directories holding them")
    parser.add_argument("--server-url", help="an external contract server (with --mock-llm-url, --runner-id)")
    parser.add_argument("--mock-llm-url", help="the external server's mock LLM")
    parser.add_argument("--runner-id", help="the external server's runner id")
    parser.add_argument("--prune", action="store_true", help="delete the repros that are fixed (never a skipped one)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, metavar="S",
                        help=f"seconds one repro may run (default {TIMEOUT:.0f})")
    return parser


def replay(args: argparse.Namespace) -> int:
    """Run every repro the arguments name; print a verdict per repro and a summary line."""
    given = {"--server-url": args.server_url, "--mock-llm-url": args.mock_llm_url, "--runner-id": args.runner_id}
    if any(given.values()) and not all(given.values()):
        missing = ", ".join(k for k, v in given.items() if not v)
        print(f"replay: --server-url, --mock-llm-url and --runner-id go together (missing: {missing})", file=sys.stderr)
        return EXIT_USAGE
    try:
        repros = collect(args.paths)
    except ValueError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    server = [x for k, v in given.items() if v for x in (k, v)]
    previous = workers.interrupt_on_signals()
    verdicts: list[Verdict] = []
    try:
        for path in repros:
            verdict = run_repro(path, server, timeout=args.timeout)
            verdicts.append(verdict)
            print(verdict.line(), flush=True)
    finally:
        workers.restore_signals(previous)
    fixed = [v for v in verdicts if v.status == "FIXED"]
    failing = sum(v.status == "STILL FAILING" for v in verdicts)
    skipped = sum(v.status == "SKIPPED" for v in verdicts)
    errors = sum(v.status == "ERROR" for v in verdicts)
    pruned = ""
    if args.prune:
        for v in fixed:
            v.path.unlink(missing_ok=True)
        pruned = f"; deleted the {len(fixed)} fixed" if fixed else "; nothing to delete"
    print(f"replay: {len(verdicts)} repros: {len(fixed)} fixed, {failing} still failing, {skipped} skipped, "
          f"{errors} errors{pruned}")
    return 0 if len(fixed) == len(verdicts) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argparse.ArgumentParser(prog="python -m stateful replay", description=__doc__.splitlines()[0]))
    return replay(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

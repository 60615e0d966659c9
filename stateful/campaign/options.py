"""The command line of ``python -m stateful campaign`` (and ``./dev campaign``).

Every usage error is one line on stderr and exit status 2, before anything starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from stateful.arguments import conversation_budget, duration, milliseconds, positive_int, seconds
from stateful.campaign.database import DEFAULT_DB
from stateful.locations import default_repro_dir
from stateful.targets.registry import KINDS

__all__ = ["EXIT_USAGE", "add_parser", "duration"]

EXIT_USAGE = 2
DEFAULT_REPROS = str(default_repro_dir())


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """argparse prints its usage too; a campaign's usage error is one line (``--help`` shows usage)."""
    sys.stderr.write(f"{parser.prog}: error: {message}\n")
    sys.exit(EXIT_USAGE)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``campaign`` to the subcommands of ``python -m stateful``."""
    p: argparse.ArgumentParser = commands.add_parser(
        "campaign", help="a time-boxed search for every distinct bug of a server (parallel workers, report)",
        description="Search a server for every distinct contract violation within a time budget: workers in "
                    "parallel, each violated clause shrunk once and written as a repro, then ignored while the "
                    "search goes on. Exit 0: no clause outside the allowed ones failed; 1: one did; 2: usage; "
                    "130/143: interrupted by SIGINT/SIGTERM.")
    p.error = lambda message: _one_line_error(p, message)  # type: ignore[method-assign]
    p.add_argument("action", nargs="?", choices=("report",), metavar="report",
                   help="`campaign report --join URL --campaign NAME --report DIR`: write the report of a campaign "
                        "joined in Redis (running or ended), without searching")
    p.add_argument("--budget", type=duration, default=duration("20m"), metavar="DURATION",
                   help="how long the campaign runs, shrinking included (e.g. 90s, 20m, 1h; default 20m)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, metavar="N",
                   help="independent searches in parallel, each its own process (default: the number of cores)")
    p.add_argument("--target", choices=tuple(KINDS), default="sessions",
                   help="; ".join(f"{k.name}: {k.summary}" for k in KINDS.values()) + " (default sessions)")
    p.add_argument("--server-url", metavar="U", help="an external contract server (with --mock-llm-url, --runner-id)")
    p.add_argument("--mock-llm-url", metavar="M")
    p.add_argument("--runner-id", metavar="R")
    p.add_argument("--stack-latency", type=milliseconds, default=0.0, metavar="MS",
                   help="the embedded stack answers every sessions-API request MS later (default 0)")
    p.add_argument("--shrink-budget", type=seconds, default=60.0, metavar="S",
                   help="seconds Hypothesis may shrink each new failure (default 60; never past the budget)")
    p.add_argument("--repro-dir", default=DEFAULT_REPROS, metavar="DIR",
                   help="where shrunk failures are written as regression tests (default stateful/repros/; installed: "
                        "./repros; '' = don't)")
    p.add_argument("--allow", action="append", default=[], metavar="CLAUSE",
                   help="a clause id whose violations are known: counted, never failing (repeatable)")
    p.add_argument("--deviations", type=Path, metavar="FILE",
                   help="a TOML file of known deviations ([[deviation]] clause, why, server, version)")
    p.add_argument("--allow-stale", action="store_true",
                   help="a stale deviation (its clause held in this run, or its repro replays FIXED) does not fail "
                        "the campaign (by default it does, naming the entry to remove)")
    p.add_argument("--write-deviations", type=Path, metavar="FILE",
                   help="write this run's baseline there: a [[deviation]] per failure and per known deviation met "
                        "(clause, cause, why = the finding's first line, repro)")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="write report.json, report.md, junit.xml and report.html there")
    p.add_argument("--observe", type=Path, metavar="DIR",
                   help="write Hypothesis's test-case observations there (JSON lines, what the Tyche viewer "
                        "reads; one pair of files per worker: worker-N_testcases.jsonl, worker-N_info.jsonl)")
    p.add_argument("--db", default=DEFAULT_DB, metavar="PATH|redis://host:port/n",
                   help="the Hypothesis example database the workers share (default .hypothesis/examples); "
                        "also rediss://host:port/n and unix:///path.sock?db=n")
    p.add_argument("--join", metavar="redis://host:port/n",
                   help="take part in a campaign that spans processes and machines, coordinated by this Redis "
                        "(with --campaign): claims, steering, counts and findings are shared; the first process "
                        "to join sets the deadline")
    p.add_argument("--campaign", metavar="NAME", help="the name of the campaign to join (with --join)")
    p.add_argument("--step-timeout", type=seconds, metavar="S", help="seconds before a step is a hang")
    p.add_argument("--poll-deadline", type=seconds, metavar="S", help="seconds to wait for an eventual property")
    p.add_argument("--conversation-budget", type=conversation_budget, metavar="SIZE",
                   help="bytes an agent session's conversation may reach (every model call carries it whole; "
                        "e.g. 200kB, 4MB; default: the campaign profile's, 4MB)")
    p.add_argument("--steps", type=positive_int, metavar="N", help="steps per program (default: the campaign profile's)")
    p.add_argument("--no-steering", action="store_true",
                   help="keep drawing the inputs of known failures (by default, once a failure is known, later "
                        "searches stop drawing the input that provoked it: a `;` ending a typed chunk, ...)")
    p.add_argument("--quiet", action="store_true", help="no progress line and no summary (what failed is still said, on stderr)")
    return p

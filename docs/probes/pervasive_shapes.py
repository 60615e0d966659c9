"""Going past a pervasive bug, measured (issue 38): one campaign per pervasive shape of bug, planted
with a rare fault beside it, and one on the correct stack; a table of steps per program and of
what each campaign found.

A pervasive bug is met by (nearly) every program: a campaign that cannot go on past it once it
knows it ends every program there, and the rare fault beside it is never met. This script runs,
one after the other (each campaign gets the whole machine):

    python docs/probes/pervasive_shapes.py --budget 10m --workers 4 [--target sessions] [--rare scrollback-bool]
        [--shapes list-every-session,list-row-twice] [--out DIR]

and prints a Markdown table (docs/campaigns.md, "Going past a pervasive bug"). Each campaign's
report stays in DIR/<shape>/ (report.json, report.md). By hand, outside CI: it takes
(shapes + 1) x budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES: dict[str, tuple[str, tuple[str, ...]]] = {
    # fault: (the shape, in the words; the clauses its finding may name)
    "list-every-session": ("list shows other sessions' terminals", ("scope.session",)),
    "list-row-twice": ("list shows a pair twice", ("list.unique",)),
    "launch-new-socket": ("every launch reports a new socket", ("launch.socket-kept",)),
    "read-row-added": ("every read adds a row", ("read.rows-exact", "read.result")),
    "read-last-row-dropped": ("every read drops a row", ("read.rows-exact", "read.result", "read.output-shows")),
    "close-leaks-server": ("every close leaves the server", ("close.nothing-left",)),
    "list-not-running": ("every live pair listed with running: false", ("list.running",)),
    "items-page-gap": ("every page of items off by one", ("items.pagination",)),
    "send-last-char-lost": ("every send loses its last character", ("send.text-literal", "send.keys")),
}
RARE: dict[str, tuple[str, ...]] = {
    "scrollback-bool": ("read.scrollback-type",),
    "trailing-semicolon": ("send.text-literal",),
    "close-event-lost": ("events.recorded",),
    "prefix-match": ("scope.names-exact",),
}


def campaign(faults: str, budget: str, workers: int, target: str, out: Path) -> dict[str, object]:
    """One campaign with ``STATEFUL_FAULTS=faults``; its report.json."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "STATEFUL_FAULTS": faults}
    command = [sys.executable, "-m", "stateful", "campaign", "--budget", budget, "--workers", str(workers),
               "--target", target, "--report", str(out), "--repro-dir", str(out / "repros"), "--quiet",
               "--db", str(out / "db")]
    with open(out / "campaign.log", "w") as log:
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return json.loads((out / "report.json").read_text())


def found(report: dict[str, object], clauses: tuple[str, ...]) -> str:
    """When the first finding of one of ``clauses`` was met (s), or "no"."""
    times = [f.get("first_seen_s") for f in report["failures"] if f["clause"] in clauses]  # type: ignore[index]
    times = [t for t in times if t is not None]
    return f"yes, at {min(times):.0f} s" if times else "no"


def per_program(report: dict[str, object]) -> tuple[int, float, int]:
    """(searched programs, steps a program, how many ended at their first step): the programs the
    searches drew, Hypothesis's shrink candidates of a failure left out (short by design)."""
    searched = report.get("searched") or {}
    programs = int(searched.get("programs") or report["programs"])  # type: ignore[union-attr, arg-type]
    steps = int(searched.get("steps") or report["steps"])  # type: ignore[union-attr, arg-type]
    return programs, steps / max(1, programs), int(searched.get("ended_at_first_step") or 0)  # type: ignore[union-attr]


def table(out: Path, shapes: list[str], rare: str) -> list[str]:
    """The Markdown table of the campaigns whose reports are under ``out``."""
    correct = json.loads((out / "correct" / "report.json").read_text())
    programs, base, first = per_program(correct)
    lines = ["| shape (planted fault) | searched programs | steps a program | vs correct | ended at step 1 | "
             "pervasive found | rare found | findings |", "|---|---|---|---|---|---|---|---|",
             f"| correct stack | {programs} | {base:.1f} | 1.00 | {first} | - | - | {len(correct['failures'])} |"]
    for shape in shapes:
        path = out / shape / "report.json"
        if not path.exists():
            continue
        words, clauses = SHAPES[shape]
        report = json.loads(path.read_text())
        programs, per, first = per_program(report)
        keys = ", ".join(f"`{f['key']}`" for f in report["failures"])
        lines.append(f"| {words} (`{shape}`) | {programs} | {per:.1f} | {per / base:.2f} | {first} | "
                     f"{found(report, clauses)} | {found(report, RARE[rare])} | {keys} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="10m")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--target", default="sessions", choices=("direct", "sessions"))
    parser.add_argument("--rare", default="scrollback-bool", choices=sorted(RARE))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table-only", action="store_true", help="print the table of the reports under --out")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = sorted(set(shapes) - SHAPES.keys())
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {sorted(SHAPES)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="pervasive-"))
    if not args.table_only:
        campaign("", args.budget, args.workers, args.target, out / "correct")
        for shape in shapes:
            campaign(f"{shape},{args.rare}", args.budget, args.workers, args.target, out / shape)
            print(f"{shape}: done", file=sys.stderr, flush=True)
    print(f"campaigns of {args.budget}, {args.workers} workers, --target {args.target}, rare fault {args.rare}; "
          f"reports in {out}\n")
    print("\n".join(table(out, shapes, args.rare)))


if __name__ == "__main__":
    main()

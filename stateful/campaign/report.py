"""What a campaign found, from its workers' counts and the claims: ``report.json`` (for machines),
``report.md`` (for people: the same, plus the clauses never exercised) and ``junit.xml`` (one test
case per clause, for CI systems)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stateful.campaign.deviations import Deviation
from stateful.clauses import CLAUSES
from stateful.steering import TRIGGERS

__all__ = ["CampaignReport", "build_report", "clause_outcomes", "exercised", "write_reports"]

FAILURE_KEYS = ("clause", "cause", "key", "message", "first_seen_s", "steps_found", "steps_shrunk", "shrink_s", "repro", "reproduced")
CLAUSE_EVENT = "clause: "


@dataclass
class CampaignReport:
    budget_s: float
    elapsed_s: float
    workers: int
    programs: int
    steps: int
    failures: list[dict[str, Any]]
    """FAILURE_KEYS, plus ``report`` (the failure with its program) where a worker shrank it."""
    known: list[dict[str, Any]]
    coverage: dict[str, int]
    deviations: list[Deviation] = field(default_factory=list)
    repeats: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    steered: list[str] = field(default_factory=list)
    """The triggers (:mod:`stateful.steering`) the workers' later searches stopped drawing."""
    interrupted: bool = False
    """SIGINT/SIGTERM ended the campaign before its budget: what it found holds, a pass does not."""

    def as_json(self) -> dict[str, Any]:
        """The schema of report.json (docs/campaigns.md)."""
        return {"budget_s": self.budget_s, "elapsed_s": self.elapsed_s, "interrupted": self.interrupted,
                "workers": self.workers,
                "programs": self.programs, "steps": self.steps,
                "failures": [{k: f.get(k) for k in FAILURE_KEYS} for f in self.failures],
                "known": self.known, "steered": self.steered, "coverage": self.coverage}

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.errors)


def build_report(budget: float, elapsed: float, workers: int, states: Sequence[Mapping[str, Any]],
                 claims: Mapping[str, Mapping[str, Any]], deviations: Sequence[Deviation],
                 allowed: Iterable[str], steered: Iterable[str] = (), interrupted: bool = False) -> CampaignReport:
    """Sum the workers' counts; every claimed failure once (as its worker recorded it, else as
    claimed: found, but the budget ended before it was shrunk)."""
    coverage: Counter[str] = Counter()
    known: Counter[str] = Counter()
    repeats: Counter[str] = Counter()
    examples: dict[str, str] = {}
    recorded: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for state in states:
        coverage.update(state.get("coverage", {}))
        known.update(state.get("known", {}))
        repeats.update(state.get("repeats", {}))
        examples = {**state.get("examples", {}), **examples}
        errors.extend(state.get("errors", []))
        for failure in state.get("failures", []):
            recorded.setdefault(failure.get("key", failure["clause"]), dict(failure))
    failures = []
    for key, claim in claims.items():
        failure = recorded.get(key) or {"clause": claim.get("clause", key), "cause": claim.get("cause"), "key": key,
                                        "message": claim.get("message", ""),
                                        "first_seen_s": claim.get("first_seen_s"),
                                        "steps_found": claim.get("steps_found"), "steps_shrunk": None,
                                        "shrink_s": None, "repro": None, "worker": claim.get("worker"),
                                        "program": claim.get("program")}
        failures.append(failure)
    failures.sort(key=lambda f: (f.get("first_seen_s") is None, f.get("first_seen_s") or 0.0))
    listed = {d.clause for d in deviations} | set(allowed)
    return CampaignReport(
        budget_s=round(budget, 1), elapsed_s=round(elapsed, 1), workers=workers,
        programs=sum(int(s.get("programs", 0)) for s in states), steps=sum(int(s.get("steps", 0)) for s in states),
        failures=failures,
        known=[{"clause": c, "count": known[c], **({"example": examples[c]} if c in examples else {})}
               for c in sorted(listed) if known[c]],
        coverage=dict(sorted(coverage.items())), deviations=list(deviations), repeats=dict(repeats), errors=errors,
        steered=sorted(steered), interrupted=interrupted)


def exercised(coverage: Mapping[str, int]) -> dict[str, int]:
    """Clause id -> programs in which a check of it ran and held (the ``clause: <id>`` events)."""
    return {label[len(CLAUSE_EVENT):]: n for label, n in coverage.items() if label.startswith(CLAUSE_EVENT)}


def clause_outcomes(report: CampaignReport) -> dict[str, str]:
    """Every clause's outcome: failed, known, passed or not exercised."""
    failed = {f["clause"] for f in report.failures}
    known = {k["clause"] for k in report.known}
    held = exercised(report.coverage)
    return {c: "failed" if c in failed else "known" if c in known else "passed" if held.get(c) else "not exercised"
            for c in CLAUSES}


def write_reports(report: CampaignReport, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "report.json", directory / "report.md", directory / "junit.xml"]
    paths[0].write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    junit(report).write(paths[2], encoding="utf-8", xml_declaration=True)
    return paths


def _why(report: CampaignReport, clause: str) -> str:
    reasons = [d.why + (f" ({d.server} {d.version})".rstrip() if d.server or d.version else "")
               for d in report.deviations if d.clause == clause]
    return "; ".join(reasons) or "allowed (--allow)"


def markdown(report: CampaignReport) -> str:
    rate = report.steps / report.elapsed_s if report.elapsed_s else 0.0
    verdict = ("FAILED (interrupted)" if report.failed else "interrupted") if report.interrupted else \
        "FAILED" if report.failed else "passed"
    lines = [f"# Campaign report: {verdict}", "",
             f"{report.elapsed_s:g} s of a {report.budget_s:g} s budget, {report.workers} workers: "
             f"{report.programs} programs, {report.steps} steps ({rate:.1f} steps/s), "
             f"{len(report.failures)} distinct failures, {sum(k['count'] for k in report.known)} known deviations met.",
             "", "## Failures", ""]
    if not report.failures:
        lines.append("None.")
    for f in report.failures:
        split = f.get("shrink_split_s") or {}
        spent = (f" (Hypothesis's shrinking and replays {split.get('hypothesis')} s, step dropping "
                 f"{split.get('drop_steps')} s, writing the repros {split.get('repros')} s)" if split else "")
        shrunk = (f"shrunk to {f['steps_shrunk']} steps in {f.get('shrink_s')} s{spent}" if f.get("steps_shrunk") is not None
                  else "seen once, not reproduced by its replays (no repro)" if f.get("reproduced") is False
                  else "not shrunk (the budget ended first)")
        lines += [f"### `{f.get('key') or f['clause']}`", "",
                  f"found after {f.get('first_seen_s')} s in program {f.get('program')} of worker {f.get('worker')} "
                  f"({f.get('steps_found')} steps), {shrunk}; "
                  f"met again {report.repeats.get(f.get('key') or f['clause'], 0)} times",
                  "", f"repro: `{f['repro']}`" if f.get("repro") else "repro: none",
                  *([f"plain repro: `{f['plain']}`" if str(f['plain']).endswith(".py") else
                     f"plain repro: {f['plain']}"] if f.get("plain") else []), "",
                  "```", f.get("report") or f.get("message", ""), "```", ""]
    lines += ["## Known deviations", ""]
    lines += [f"- `{k['clause']}`: met {k['count']} times; {_why(report, k['clause'])}"
              + (f"; e.g. {k['example']}" if k.get("example") else "") for k in report.known] or ["None met."]
    lines += ["", "## Steered away from", "",
              "Once a failure was known, the later searches stopped drawing the input that provoked it:", ""]
    lines += [f"- `{t}`: {TRIGGERS.get(t, '')}" for t in report.steered] or ["Nothing (no known failure named its input)."]
    outcomes = clause_outcomes(report)
    held = exercised(report.coverage)
    lines += ["", "## Clauses", "", "| clause | outcome | programs that exercised it |", "|---|---|---|"]
    lines += [f"| `{c}` | {o} | {held.get(c, 0)} |" for c, o in outcomes.items()]
    never = [c for c, o in outcomes.items() if o == "not exercised"]
    lines += ["", "## Never exercised", ""]
    lines += [", ".join(f"`{c}`" for c in never) if never else "Every clause was exercised."]
    if report.errors:
        lines += ["", "## Errors of the tester", ""] + [f"```\n{e}\n```" for e in report.errors]
    others = {k: v for k, v in report.coverage.items() if not k.startswith(CLAUSE_EVENT)}
    lines += ["", "## Coverage (programs per event label)", ""] + [f"- {k}: {v}" for k, v in others.items()]
    return "\n".join(lines) + "\n"


def junit(report: CampaignReport) -> ET.ElementTree:
    outcomes = clause_outcomes(report)
    by_clause: dict[str, list[dict[str, Any]]] = {}
    for f in report.failures:  # one test case per finding: a clause broken by two causes is two
        by_clause.setdefault(f["clause"], []).append(f)
    suite = ET.Element("testsuite", name="stateful.campaign", tests="0", failures="0", skipped="0",
                       errors=str(len(report.errors) + report.interrupted), time=f"{report.elapsed_s:g}")
    counts = Counter[str]()
    names = list(outcomes) + [k for k in by_clause if k not in outcomes]
    cases = [((f.get("key") if f else None) or name, outcomes.get(name, "failed"), f) for name in names
             for f in (by_clause.get(name) or [None])]
    for name, outcome, f in cases:
        case = ET.SubElement(suite, "testcase", classname="stateful.campaign.clauses", name=name, time="0")
        counts["tests"] += 1
        if outcome == "failed" and f is not None:
            failure = ET.SubElement(case, "failure", message=str(f.get("message", ""))[:500], type=name)
            failure.text = f"{f.get('report') or f.get('message', '')}\nrepro: {f.get('repro')}"
            counts["failures"] += 1
        elif outcome == "known":
            ET.SubElement(case, "skipped", message=f"known deviation: {_why(report, name)}")
            counts["skipped"] += 1
        elif outcome == "not exercised":
            ET.SubElement(case, "skipped", message="not exercised by this campaign")
            counts["skipped"] += 1
    for error in report.errors:
        case = ET.SubElement(suite, "testcase", classname="stateful.campaign", name="worker", time="0")
        ET.SubElement(case, "error", message=error.strip().splitlines()[-1][:500]).text = error
        counts["tests"] += 1
    if report.interrupted:
        case = ET.SubElement(suite, "testcase", classname="stateful.campaign", name="campaign", time="0")
        ET.SubElement(case, "error", message="interrupted (SIGINT/SIGTERM) before the budget was spent")
        counts["tests"] += 1
    for key in ("tests", "failures", "skipped"):
        suite.set(key, str(counts[key]))
    return ET.ElementTree(suite)

"""What a campaign found, from its workers' counts and the claims: ``report.json`` (for machines),
``report.md`` (for people: the same, with each clause's verdict and why), ``junit.xml`` (one test case
per clause, for CI systems) and ``report.html`` (:mod:`stateful.campaign.report_html`). The per-clause
verdicts are :mod:`stateful.campaign.verdicts`'."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stateful.campaign.deviations import Deviation
from stateful.campaign.verdicts import CLAUSE_EVENT, ClauseVerdict, StaleEntry, clause_verdicts, contract_link, \
    exercised, stale_entries
from stateful.steering import TRIGGERS

__all__ = ["CampaignReport", "build_report", "grouped_notes", "note_line", "write_reports"]

NOT_SHRUNK = "not shrunk (the budget, or the process that shrank it, ended first)"
"""What the report says of a failure known only by its claim: found, and never reported shrunk."""
FAILURE_KEYS = ("clause", "cause", "key", "message", "first_seen_s", "steps_found", "steps_shrunk", "shrink_s", "repro",
                "reproduced", "behind")


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
    notes: list[str] = field(default_factory=list)
    """What the workers noted of their searches (one that Hypothesis ended early, a claim left to another
    worker): no failure of the server, but why a search may have found less than it could. Each note
    once; the report groups them (:func:`grouped_notes`)."""
    clauses: list[ClauseVerdict] = field(default_factory=list)
    """Every clause's verdict and why (:mod:`stateful.campaign.verdicts`)."""
    stale: list[StaleEntry] = field(default_factory=list)
    """The deviations that are fixed: their entries should be removed."""
    replays: dict[str, str] = field(default_factory=dict)
    """Each deviation's repro (``FILE:LINE`` of its entry) -> its replay's line at the campaign's start."""
    timeline: list[list[float]] = field(default_factory=list)
    """``[seconds, steps]`` of all workers together, over the budget (for the plot of report.html)."""
    largest_conversation: int = 0
    """Bytes the largest agent session conversation of any program reached (the machine's own count, an
    upper bound of a model request; 0: the target carries none): what ``--conversation-budget`` bounds."""
    searched: list[int] = field(default_factory=lambda: [0, 0, 0])
    """``[programs, steps, programs that ended at their first step]`` of the programs the searches drew
    (Hypothesis's shrink candidates left out): steps per program tells whether the searches went on past
    what they knew (docs/campaigns.md, "Going past a pervasive bug")."""
    campaign: dict[str, Any] | None = None
    """A campaign joined in Redis (``--join``): its name, its processes, and who claimed each finding
    (``stateful.campaign.joined``); None for a campaign of one machine."""

    def as_json(self) -> dict[str, Any]:
        """The schema of report.json (docs/campaigns.md)."""
        return {"budget_s": self.budget_s, "elapsed_s": self.elapsed_s, "interrupted": self.interrupted,
                "workers": self.workers,
                "programs": self.programs, "steps": self.steps, "largest_conversation": self.largest_conversation,
                "failures": [{k: f.get(k) for k in FAILURE_KEYS} | _found_by(f) for f in self.failures],
                "known": self.known, "steered": self.steered, "coverage": self.coverage,
                "clauses": [v.as_json() for v in self.clauses],
                "stale": [{"clause": e.deviation.clause, "entry": e.deviation.source, "why": e.why} for e in self.stale],
                "timeline": self.timeline, "notes": grouped_notes(self.notes), "searched": self.searched_json()} | ({"campaign": self.campaign} if self.campaign is not None else {})

    def searched_json(self) -> dict[str, Any]:
        programs, steps, first = self.searched
        return {"programs": programs, "steps": steps, "steps_per_program": round(steps / programs, 2) if programs else None,
                "ended_at_first_step": first}

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.errors)


def build_report(budget: float, elapsed: float, workers: int, states: Sequence[Mapping[str, Any]],
                 claims: Mapping[str, Mapping[str, Any]], deviations: Sequence[Deviation],
                 allowed: Iterable[str], steered: Iterable[str] = (), interrupted: bool = False, *,
                 target: str = "sessions", fixed_repros: Mapping[str, str] | None = None,
                 failing_repros: Iterable[str] = (), replays: Mapping[str, str] | None = None) -> CampaignReport:
    """Sum the workers' counts; every claimed failure once (as its worker recorded it, else as
    claimed: found, but the budget ended before it was shrunk); every clause's verdict (``target``:
    what the campaign could observe; ``fixed_repros``, ``failing_repros``: the deviations whose repro
    replayed FIXED, STILL FAILING, by the ``FILE:LINE`` of their entry)."""
    coverage: Counter[str] = Counter()
    deep: Counter[str] | None = Counter() if any("deep" in s for s in states) else None
    known: Counter[str] = Counter()
    repeats: Counter[str] = Counter()
    examples: dict[str, str] = {}
    recorded: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    notes: list[str] = []
    for number, state in enumerate(states):
        notes += [f"worker {state.get('worker', number)}: {note}" for note in state.get("notes", [])]
        coverage.update(state.get("coverage", {}))
        if deep is not None:
            deep.update(state.get("deep", {}))
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
                                        "program": claim.get("program"), **_found_by(claim)}
        if key not in recorded and claim.get("as_found"):
            failure["report"] = "\n".join([claim.get("message", ""), "program as found (not shrunk):",
                                            *(f"    {step}" for step in claim["as_found"])])
        failures.append(failure)
    failures.sort(key=lambda f: (f.get("first_seen_s") is None, f.get("first_seen_s") or 0.0))
    listed = {d.clause for d in deviations} | set(allowed)
    programs = sum(int(s.get("programs", 0)) for s in states)
    met = {c for c in listed if known[c]}
    stale = stale_entries(deviations, exercised(coverage), met | {f["clause"] for f in failures}, fixed_repros or {},
                          failing_repros)
    steered = sorted(steered)
    failing_repros = set(failing_repros)
    still_failing = {d.clause for d in deviations if d.source in failing_repros}  # known, met by the search or not
    verdicts = clause_verdicts(coverage=coverage, failed={f["clause"] for f in failures}, known=met | still_failing,
                               stale=stale, deviations=deviations, target=target, steered=steered, programs=programs,
                               interrupted=interrupted, elapsed=round(elapsed, 1), deep=deep)
    return CampaignReport(
        budget_s=round(budget, 1), elapsed_s=round(elapsed, 1), workers=workers,
        programs=programs, steps=sum(int(s.get("steps", 0)) for s in states),
        failures=failures,
        known=[{"clause": c, "count": known[c], **({"example": examples[c]} if c in examples else {})}
               for c in sorted(listed) if known[c]],
        coverage=dict(sorted(coverage.items())), deviations=list(deviations), repeats=dict(repeats), errors=errors,
        steered=steered, interrupted=interrupted, clauses=verdicts, stale=stale, replays=dict(replays or {}),
        timeline=timeline(states, elapsed), notes=notes,
        searched=[sum(int((s.get("searched") or [0, 0, 0])[i]) for s in states) for i in range(3)],
        largest_conversation=max((int(s.get("largest_conversation", 0)) for s in states), default=0))


_NUMBERS = re.compile(r"\b(worker|search|program) \d+\b|\b\d+(\.\d+)?\b")


def grouped_notes(notes: Sequence[str]) -> list[dict[str, Any]]:
    """The notes grouped by what they say (their worker, search and other numbers left out), most
    frequent first: ``{"what", "count", "first"}`` each, ``first`` the first note of the group as written
    (267 notes of 79 KB, one by one, were no one's reading)."""
    groups: dict[str, dict[str, Any]] = {}
    for note in notes:
        what = _NUMBERS.sub(lambda m: m.group(1) or "N", note)
        what = re.sub(r"^worker: ", "", what)[:300]
        group = groups.setdefault(what, {"what": what, "count": 0, "first": note})
        group["count"] += 1
    return sorted(groups.values(), key=lambda g: -g["count"])


def note_line(group: Mapping[str, Any]) -> str:
    """One group of notes for people: the note itself if it came once, else how often and the first."""
    if group["count"] == 1:
        return str(group["first"])
    return f"{group['count']} times: {group['what']} (first: {group['first']})"


def _found_by(failure: Mapping[str, Any]) -> dict[str, Any]:
    """Which host, process (``joined.Joined.owner``) and worker found a failure, for a campaign that
    spans machines (nothing otherwise)."""
    return ({"host": failure["host"], "process": failure.get("owner"), "worker": failure.get("worker")}
            if failure.get("host") else {})


TIMELINE_POINTS = 60


def timeline(states: Sequence[Mapping[str, Any]], elapsed: float) -> list[list[float]]:
    """``[seconds, steps]`` of the workers together at evenly spaced times, from each worker's
    ``series`` of ``[seconds, programs, steps]`` (saved after programs, at most every
    ``worker.SAVE_EVERY`` s: between two saves the steps are interpolated, after its last one they stay)."""
    series = [s.get("series") or [] for s in states]
    if elapsed <= 0 or not any(series):
        return []
    return [[round(elapsed * i / TIMELINE_POINTS, 1),
             round(sum(_steps_at(one, elapsed * i / TIMELINE_POINTS) for one in series), 1)]
            for i in range(TIMELINE_POINTS + 1)]


def _steps_at(series: Sequence[Sequence[float]], t: float) -> float:
    before = [0.0, 0, 0]
    for point in series:
        if point[0] >= t:
            span = point[0] - before[0]
            return before[2] + (point[2] - before[2]) * ((t - before[0]) / span if span > 0 else 1.0)
        before = list(point)
    return float(before[2])


def write_reports(report: CampaignReport, directory: Path) -> list[Path]:
    from stateful.campaign.report_html import html_report

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "report.json", directory / "report.md", directory / "junit.xml", directory / "report.html"]
    paths[0].write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    junit(report).write(paths[2], encoding="utf-8", xml_declaration=True)
    paths[3].write_text(html_report(report), encoding="utf-8")
    return paths


def _why(report: CampaignReport, clause: str) -> str:
    reasons = [d.why + (f" ({d.server} {d.version})".rstrip() if d.server or d.version else "")
               for d in report.deviations if d.clause == clause]
    return "; ".join(reasons) or "allowed (--allow)"


BEHIND = "met only past {}: its program went on past that known violation first, and its repro goes past it too"
"""What the report says of a finding behind another (docs/campaigns.md, "A finding behind another")."""


def _searched_line(report: CampaignReport) -> str:
    """How far the searched programs got (Hypothesis's shrink candidates left out)."""
    programs, steps, first = report.searched
    if not programs:
        return "No program was searched."
    return (f"Searched programs: {programs}, {steps / programs:.1f} steps a program; {first} "
            f"({100 * first / programs:.0f} %) ended at their first step.")


def markdown(report: CampaignReport) -> str:
    rate = report.steps / report.elapsed_s if report.elapsed_s else 0.0
    verdict = ("FAILED (interrupted)" if report.failed else "interrupted") if report.interrupted else \
        "FAILED" if report.failed else "STALE deviations" if report.stale else "passed"
    lines = [f"# Campaign report: {verdict}", "",
             f"{report.elapsed_s:g} s of a {report.budget_s:g} s budget, {report.workers} workers: "
             f"{report.programs} programs, {report.steps} steps ({rate:.1f} steps/s), "
             f"{len(report.failures)} distinct failures, {sum(k['count'] for k in report.known)} known deviations met"
             + (f"; the largest agent conversation reached {report.largest_conversation / 1000:.1f} kB."
                if report.largest_conversation else "."),
             *_processes(report), "", _searched_line(report), "", "## Failures", ""]
    if not report.failures:
        lines.append("None.")
    for f in report.failures:
        split = f.get("shrink_split_s") or {}
        spent = (f" (Hypothesis's shrinking and replays {split.get('hypothesis')} s, step dropping "
                 f"{split.get('drop_steps')} s, writing the repros {split.get('repros')} s)" if split else "")
        shrunk = (f"shrunk to {f['steps_shrunk']} steps in {f.get('shrink_s')} s{spent}" if f.get("steps_shrunk") is not None
                  else "seen once, not reproduced by its replays (no repro)" if f.get("reproduced") is False
                  else NOT_SHRUNK)
        lines += [f"### `{f.get('key') or f['clause']}`", "",
                  f"found after {f.get('first_seen_s')} s in program {f.get('program')} of worker {f.get('worker')}"
                  + (f" of process {f.get('owner')} on {f['host']} " if f.get("host") else " ") +
                  f"({f.get('steps_found')} steps), {shrunk}; "
                  f"met again {report.repeats.get(f.get('key') or f['clause'], 0)} times",
                  *(["", BEHIND.format(", ".join(f"`{k}`" for k in f["behind"]))] if f.get("behind") else []),
                  "", f"repro: `{f['repro']}`" if f.get("repro") else "repro: none",
                  *([f"plain repro: `{f['plain']}`" if str(f['plain']).endswith(".py") else
                     f"plain repro: {f['plain']}"] if f.get("plain") else []), "",
                  "```", f.get("report") or f.get("message", ""), "```", ""]
    if report.notes:
        lines += ["## Notes of the searches", "", *[f"- {note_line(group)}" for group in grouped_notes(report.notes)], ""]
    lines += ["## Known deviations", ""]
    lines += [f"- `{k['clause']}`: met {k['count']} times; {_why(report, k['clause'])}"
              + (f"; e.g. {k['example']}" if k.get("example") else "") for k in report.known] or ["None met."]
    lines += ["", "## Steered away from", "",
              "Once a failure was known, the later searches stopped drawing the input that provoked it:", ""]
    lines += [f"- `{t}`: {TRIGGERS.get(t, '')}" for t in report.steered] or ["Nothing (no known failure named its input)."]
    if report.stale:
        lines += ["", "## Stale deviations (fixed: remove their entries)", ""]
        lines += [f"- {e.line()}" for e in report.stale]
    if report.replays:
        lines += ["", "## Deviations' repros, replayed at the start", ""]
        lines += [f"- {entry}: {said}" for entry, said in report.replays.items()]
    counts = Counter(v.verdict for v in report.clauses)
    lines += ["", "## Clauses", "", ", ".join(f"{n} {verdict}" for verdict, n in counts.items()), "",
              "| clause | section | verdict | programs that exercised it | why |", "|---|---|---|---|---|"]
    lines += [f"| `{v.id}` | [{v.section}]({contract_link(v.section)}) | {v.verdict} | {v.programs} | "
              f"{v.why.replace('|', '&#124;')} |" for v in report.clauses]
    if report.errors:
        lines += ["", "## Errors of the tester", ""] + [f"```\n{e}\n```" for e in report.errors]
    others = {k: v for k, v in report.coverage.items() if not k.startswith(CLAUSE_EVENT)}
    lines += ["", "## Coverage (programs per event label)", ""] + [f"- {k}: {v}" for k, v in others.items()]
    return "\n".join(lines) + "\n"


def _processes(report: CampaignReport) -> list[str]:
    """For a campaign that spans machines: its name, its processes, and how often each finding was
    claimed (more than once only when a process died before reporting it)."""
    if report.campaign is None:
        return []
    processes = report.campaign.get("processes", [])
    claimed = report.campaign.get("claims", {})
    return ["", f"Campaign `{report.campaign.get('name')}`: {len(processes)} processes "
            f"({', '.join(str(p['owner']) + ' ' + str(p['status']) for p in processes)}); claims per finding: "
            f"{', '.join(f'`{k}` {len(v)}' for k, v in claimed.items()) or 'none'}."]


def junit(report: CampaignReport) -> ET.ElementTree:
    """One test case per clause, as pytest's junit-xml writes them, and one per finding where a clause
    was broken by two causes: failed and stale are failures (stale: the entry to remove), known and
    not-exercised are skipped with their reason, never a pass."""
    verdicts = {v.id: v for v in report.clauses}
    by_clause: dict[str, list[dict[str, Any]]] = {}
    for f in report.failures:  # one test case per finding: a clause broken by two causes is two
        by_clause.setdefault(f["clause"], []).append(f)
    suite = ET.Element("testsuite", name="stateful.campaign", tests="0", failures="0", skipped="0",
                       errors=str(len(report.errors) + report.interrupted), time=f"{report.elapsed_s:g}")
    counts = Counter[str]()
    names = list(verdicts) + [k for k in by_clause if k not in verdicts]
    cases = [(name, (f.get("key") if f else None) or name, f) for name in names for f in (by_clause.get(name) or [None])]
    for name, case_name, f in cases:
        verdict = verdicts[name].verdict if name in verdicts else "failed"
        case = ET.SubElement(suite, "testcase", classname="stateful.campaign.clauses", name=case_name, time="0")
        if name in verdicts:
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="contract",
                          value=contract_link(verdicts[name].section))
        counts["tests"] += 1
        if verdict == "failed" and f is not None:
            failure = ET.SubElement(case, "failure", message=str(f.get("message", ""))[:500], type=name)
            failure.text = f"{f.get('report') or f.get('message', '')}\nrepro: {f.get('repro')}"
            counts["failures"] += 1
        elif verdict == "stale":
            ET.SubElement(case, "failure", message=f"stale known deviation: {verdicts[name].why}"[:500], type="stale")
            counts["failures"] += 1
        elif verdict == "known":
            ET.SubElement(case, "skipped", message=f"known deviation: {_why(report, name)}")
            counts["skipped"] += 1
        elif verdict in ("not-exercised", "shallow"):
            ET.SubElement(case, "skipped", message=f"{verdict.replace('-', ' ')}: {verdicts[name].why}")
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

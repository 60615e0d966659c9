"""One verdict per clause of the contract (``python -m stateful clauses``), and why.

A campaign's report says, for every clause: ``failed`` (a violation nobody allowed), ``known`` (a
violation the deviations file or ``--allow`` expected), ``stale`` (a known deviation that is fixed:
its clause was exercised and held in every program, or its repro replayed FIXED when the campaign
started), ``passed`` (exercised: a check of it ran and held, the ``clause: <id>`` labels the gate
counts), or ``not-exercised``, always with why: the target cannot observe it, the campaign steered
away from its inputs, the budget ended first, or no rule reached it on this server.

A stale deviation is the baseline of the conformance suites that set the bar (an expected failure
that passes fails the run): it says which entry of the deviations file to remove.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stateful.campaign.deviations import Deviation
from stateful.clauses import CLAUSES
from stateful.targets.base import SESSIONS_API
from stateful.targets.registry import KINDS

__all__ = ["ClauseVerdict", "StaleEntry", "VERDICTS", "clause_verdicts", "contract_link", "exercised", "stale_entries"]

VERDICTS = ("failed", "known", "stale", "passed", "shallow", "not-exercised")
CLAUSE_EVENT = "clause: "
CONTRACT = "CONTRACT.md"
"""Where the reports link the contract's sections: beside the report, unless ``STATEFUL_CONTRACT_URL``
names where a team keeps it (a URL or a path)."""

SECTION_ANCHORS = {
    "§1": "1-the-five-tools",
    "§1 launch": "sys_terminal_launch-terminal-session-cwd-sandbox",
    "§1 send": "sys_terminal_send-terminal-session-text-keys",
    "§1 read": "sys_terminal_read-terminal-session-scrollback",
    "§1 list": "sys_terminal_list-",
    "§1 close": "sys_terminal_close-terminal-session",
    "§2": "2-the-sessions-api-http-json-loopback",
    "§2.4": "24-resource-events",
    "§4": "4-the-agent-loop",
}
"""Each section of :data:`stateful.clauses.CLAUSES` -> the GitHub anchor of its CONTRACT.md heading
(§2.7-§2.9 are items of §2's list, not headings: they link to §2)."""

SESSIONS_ONLY = frozenset({"api.status", "items.pagination", "items.calls", "view.terminals"})
"""Clauses only the sessions API shows (a target that observes ``SESSIONS_API``; ``--target direct``
calls the tools in-process)."""
PROBED = frozenset({"read.rows-exact", "launch.server-runs", "close.nothing-left"})
"""Clauses checked against tmux and /proc (:mod:`stateful.targets.probe`): only where the server's
tmux sockets are on this machine."""
PROBE_ON = "probe: on"
STEERED_CLAUSES: dict[str, tuple[str, ...]] = {
    "semicolon-edge": ("send.text-literal", "send.sent"),
    "dash-edge": ("send.sent", "send.text-literal"),
    "server-terminals": ("scope.server-terminals",),
    "bool-scrollback": ("read.scrollback-type",),
    "launch-copies": ("launch.already-running", "launch.one-launched", "step.concurrent"),
    "output-keys": (),
}
"""Each trigger of :mod:`stateful.steering` -> the clauses whose checks its inputs reach (an output
field as an extra key reaches no check that other extra keys do not)."""
FEW_PROGRAMS = 20
"""Fewer programs than this in a whole campaign: a clause none of them reached is put down to the
budget, not to the server."""


@dataclass(frozen=True)
class ClauseVerdict:
    id: str
    section: str
    verdict: str
    programs: int
    """Programs in which a check of it ran and held."""
    why: str

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "section": self.section, "verdict": self.verdict, "programs": self.programs,
                "why": self.why}


@dataclass(frozen=True)
class StaleEntry:
    deviation: Deviation
    why: str

    def line(self) -> str:
        """The one line that fails the run: which entry to remove."""
        where = self.deviation.source or "the deviations file"
        return f"STALE  {self.deviation.clause}: remove its [[deviation]] entry at {where}: {self.why}"


def exercised(coverage: Mapping[str, int]) -> dict[str, int]:
    """Clause id -> programs in which a check of it ran and held (the ``clause: <id>`` events)."""
    return {label[len(CLAUSE_EVENT):]: n for label, n in coverage.items() if label.startswith(CLAUSE_EVENT)}


def contract_link(section: str) -> str:
    """The link to the CONTRACT.md heading of ``section`` (``§1 send``, ``§2.4``, ...)."""
    base = os.environ.get("STATEFUL_CONTRACT_URL", CONTRACT)
    number = section.split()[0]
    anchor = SECTION_ANCHORS.get(section) or SECTION_ANCHORS.get(number) or SECTION_ANCHORS.get(number.split(".")[0], "")
    return f"{base}#{anchor}"


def stale_entries(deviations: Sequence[Deviation], held: Mapping[str, int], met: Iterable[str],
                  fixed_repros: Mapping[str, str], failing_repros: Iterable[str] = ()) -> list[StaleEntry]:
    """The deviations that are fixed: not met in this run, and either exercised and held, or their
    repro replayed FIXED (``fixed_repros``: source of the entry -> what the replay said). An entry
    whose repro still fails (``failing_repros``: their sources) is never stale: the program that
    shows the deviation still does, however often the search's own programs missed it (a race, or
    an input the search seldom draws)."""
    met, failing = set(met), set(failing_repros)
    stale = []
    for d in deviations:
        if d.clause in met or d.source in failing:
            continue
        if d.source in fixed_repros:
            stale.append(StaleEntry(d, f"its repro {d.repro} {fixed_repros[d.source]}"))
        elif held.get(d.clause):
            stale.append(StaleEntry(d, f"the clause was exercised in {held[d.clause]} programs and held every time"))
    return stale


def _not_exercised_why(clause: str, *, target: str, coverage: Mapping[str, int], steered: Iterable[str],
                       programs: int, interrupted: bool, elapsed: float) -> str:
    if clause in SESSIONS_ONLY and target in KINDS and SESSIONS_API not in KINDS[target].target.observes:
        return f"the target cannot observe it: --target {target} has no sessions API (use --target sessions)"
    if clause in PROBED and not coverage.get(PROBE_ON):
        return ("the target cannot observe it: no tmux probe (the server's tmux sockets are not on this machine)"
                if any(k.startswith("probe: off") for k in coverage) else
                "the target cannot observe it: no program reached a live terminal the tmux probe could see")
    avoided = [t for t in sorted(steered) if clause in STEERED_CLAUSES.get(t, ())]
    if avoided:
        return f"the campaign steered away from its inputs once a failure was known ({', '.join(avoided)})"
    if interrupted:
        return f"the budget ended first: interrupted after {elapsed:g} s ({programs} programs)"
    if programs < FEW_PROGRAMS:
        return f"the budget ended first: only {programs} programs ran in {elapsed:g} s"
    return f"no rule reached it on this server in {programs} programs"


def clause_verdicts(*, coverage: Mapping[str, int], failed: Iterable[str], known: Iterable[str],
                    stale: Sequence[StaleEntry], deviations: Sequence[Deviation], target: str,
                    steered: Iterable[str], programs: int, interrupted: bool, elapsed: float,
                    deep: Mapping[str, int] | None = None) -> list[ClauseVerdict]:
    """Every clause's verdict (see the module docstring), in the order ``python -m stateful clauses`` lists them.
    ``deep``: the coverage of the programs that went on past their first step (None: not counted). A
    clause held only in programs that ended at their first step is ``shallow``, not passed: those
    programs judged it once, at a start that a pervasive bug may have cut short."""
    failed, known, steered = set(failed), set(known), set(steered)
    held = exercised(coverage)
    held_deep = exercised(deep) if deep is not None else None
    stale_why = {}
    for entry in stale:
        stale_why.setdefault(entry.deviation.clause, entry.line().removeprefix("STALE  "))
    verdicts = []
    for c in CLAUSES.values():
        n = held.get(c.id, 0)
        why = ""
        if c.id in failed:
            verdict = "failed"
            why = "violated, and no deviation expects it" + (f" (held in {n} other programs)" if n else "")
        elif c.id in known:
            verdict = "known"
            why = "; ".join(d.why for d in deviations if d.clause == c.id) or "allowed (--allow)"
        elif c.id in stale_why:
            verdict, why = "stale", stale_why[c.id]
        elif n and held_deep is not None and not held_deep.get(c.id):
            verdict = "shallow"
            why = (f"held in {n} programs, every one of which ended at its first step: that rests on one check "
                   "each at a program's start, no pass")
        elif n:
            verdict = "passed"
            past = "" if held_deep is None else f" ({held_deep.get(c.id, 0)} of them past their first step)"
            why = f"exercised in {n} programs{past} and held every time"
        else:
            verdict = "not-exercised"
            why = _not_exercised_why(c.id, target=target, coverage=coverage, steered=steered, programs=programs,
                                     interrupted=interrupted, elapsed=elapsed)
        verdicts.append(ClauseVerdict(c.id, c.section, verdict, n, why))
    return verdicts

"""A finding behind another (docs/campaigns.md): a bug that a program meets only after it went on past
a known violation. Planted as omnigent 0.19.1 has it (docs/omnigent.md, finding 7): resource ids are
never made unique (``resource-id-collision``, a violation of ``events.unique-ids``) and exits are
handled through a table keyed by resource id (``exit-by-shared-id``), so of two live id siblings that
both exit, the second is never removed (``list.exit-removed``).

Without going past ``events.unique-ids`` nothing meets the second bug, and a replay that goes past
nothing stops at the first: the campaign of issue 23 reported such a finding "seen once, not
reproduced". Here the violation names what its program went past, and its replays, its shortening
and its machine repro go past the same."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stateful import clauses, pipeline, profiles
from stateful.machine import TerminalMachine
from stateful.minimize import replay_program
from stateful.reference import faults
from stateful.replay import run_repro
from stateful.targets.registry import open_target

_DECO = "Decoration(extra=(), ensure_ascii=False, spaced=False, shuffle=0)"
PROGRAM = (
    "pairs_0 = state.start(terminal='sh', name='a b')",
    f"pairs_1 = state.id_sibling(index=0, how='underscored', deco={_DECO})",
    "state.exit_several(agent=0, how='exit')",
)
"""Two live id siblings (``'a b'`` and ``'_a b_'``, both ``terminal_sh_a_b``), then both exit."""
FAULTS = ("resource-id-collision", "exit-by-shared-id")
SECOND_BUG = ("list.exit-removed", "events.recorded")
"""What the sibling left registered breaks first: it is still listed, or its deleted event is missing."""


@pytest.fixture(params=["direct", "sessions"])
def machine(request: pytest.FixtureRequest) -> Iterator[type[TerminalMachine]]:
    """The machine bound to a fresh target of each kind, built while both faults are on."""
    with faults.activated(*FAULTS), open_target(request.param) as target:
        bound = type(f"Behind{request.param.title()}", (TerminalMachine,), {})
        bound.bind(target, profiles.machine_config("ci"))
        yield bound
    clauses.know()


def _without_faults() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("STATEFUL_FAULTS", "STATEFUL_VARIANTS")}


def test_a_finding_behind_another_is_replayed_shortened_and_written_past_it(
        machine: type[TerminalMachine], tmp_path: Path) -> None:
    first = replay_program(machine, PROGRAM)
    assert clauses.clause_of(first) == "events.unique-ids", f"{type(first).__name__}: {first}"
    assert clauses.behind_of(first) == ()  # it went past nothing

    clauses.know(findings=[first.key])  # as a campaign knows a claimed finding
    behind = replay_program(machine, PROGRAM)
    clauses.know()
    assert clauses.clause_of(behind) in SECOND_BUG, f"{type(behind).__name__}: {behind}"
    assert clauses.behind_of(behind) == (first.key,)

    # knowing nothing now, as the worker's step-dropping pass and its repros do: they go past what the
    # failure names, and no more
    shortened = pipeline.shorten(machine, behind, allowed=[])
    assert clauses.clause_of(shortened) == clauses.clause_of(behind)
    assert clauses.behind_of(shortened) == (first.key,)
    written = pipeline.write(machine, machine.target, shortened, tmp_path)
    assert written.repro is not None and f"BEHIND = {(first.key,)!r}" in written.repro.read_text()
    if machine.target.name == "sessions":  # a plain test cannot step over the first violation
        assert written.plain is None and written.no_plain and "only past events.unique-ids" in written.no_plain

    env = _without_faults()
    still = run_repro(written.repro, env={**env, "STATEFUL_FAULTS": ",".join(FAULTS)})
    assert (still.status, still.detail.split(" ")[0]) == ("STILL FAILING", clauses.clause_of(shortened)), still
    # ids made unique: the exit bug cannot show any more (it needs two pairs that share one)
    assert run_repro(written.repro, env={**env, "STATEFUL_FAULTS": "exit-by-shared-id"}).status == "FIXED"
    # ids still shared, exits handled right: the repro goes past the first bug and passes
    assert run_repro(written.repro, env={**env, "STATEFUL_FAULTS": "resource-id-collision"}).status == "FIXED"


def test_what_a_program_went_past_is_its_own() -> None:
    clauses.know(allowed=["read.visible"])
    try:
        clauses.deviate("read.visible", "noted")
        assert clauses.behind_of(clauses.violation("read.result", "x")) == ("read.visible",)
        clauses.program_started()  # the next program has gone past nothing yet
        assert clauses.behind_of(clauses.violation("read.result", "x")) == ()
        with clauses.going_past(["events.unique-ids", "send.text-literal@semicolon-edge"]):
            known = clauses.deviations()
            assert "events.unique-ids" in known.allowed and "read.visible" in known.allowed
            assert known.findings == {"send.text-literal@semicolon-edge"}
        assert clauses.deviations().allowed == {"read.visible"} and not clauses.deviations().findings
    finally:
        clauses.know()


def test_the_report_says_what_a_finding_was_met_past() -> None:
    from stateful.campaign.report import build_report, markdown
    from stateful.campaign.report_html import html_report

    found = {"clause": "list.exit-removed", "cause": "", "key": "list.exit-removed", "message": "list.exit-removed: x",
             "first_seen_s": 12.0, "steps_found": 4, "steps_shrunk": 4, "shrink_s": 9.0, "repro": "r.py",
             "reproduced": True, "behind": ["events.unique-ids"], "worker": 0, "program": 3}
    report = build_report(60, 60, 1, [{"programs": 3, "failures": [found]}], {"list.exit-removed": {}}, [], [])
    assert "met only past `events.unique-ids`: its program went on past that known violation first" in markdown(report)
    assert "met only past events.unique-ids" in html_report(report)
    assert report.as_json()["failures"][0]["behind"] == ["events.unique-ids"]

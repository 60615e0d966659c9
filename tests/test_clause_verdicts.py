"""A verdict per clause (report.json's ``clauses``, report.md, junit.xml), stale deviations, the
baseline a run writes (``--write-deviations``), and report.html (parsed, and opened in headless
chromium where it is installed).

The reports are built from workers' states written here (no campaign) but for the last tests: a
planted fault's repro and baseline from a campaign with the fault, then a campaign on the correct
embedded stack that finds the deviation stale.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from stateful.campaign.deviations import Deviation, DeviationsError, dump_deviations, load_deviations
from stateful.campaign.report import build_report, write_reports
from stateful.campaign.verdicts import VERDICTS, contract_link
from stateful.clauses import CLAUSES
from test_campaign import _nothing_left, campaign, run_root  # noqa: F401 - run_root is a fixture

SCROLLBACK = "read.scrollback-type"
EVENTS = "events.recorded"


def _state(coverage: dict[str, int], programs: int = 40, **more: Any) -> dict[str, Any]:
    return {"programs": programs, "steps": programs * 10, "coverage": coverage,
            "series": [[0.0, 0, 0], [5.0, programs // 2, programs * 5], [10.0, programs, programs * 10]], **more}


def _held(*clauses: str, n: int = 3) -> dict[str, int]:
    return {f"clause: {c}": n for c in clauses}


def _deviations(tmp_path: Path, text: str) -> list[Deviation]:
    path = tmp_path / "deviations.toml"
    path.write_text(text)
    return load_deviations(path)


# -- verdicts --------------------------------------------------------------------------------------


def test_every_clause_gets_one_verdict_and_each_not_exercised_one_says_why() -> None:
    coverage = {**_held("send.sent", "read.result", "events.recorded"), "probe: on": 40}
    failure = {"clause": "list.order", "message": "list.order: not in launch order", "first_seen_s": 2.0}
    state = _state(coverage, known={"send.keys": 2}, failures=[failure])
    report = build_report(10, 10, 1, [state], {"list.order": {}}, [], ["send.keys"], target="sessions")
    verdicts = {v["id"]: v for v in report.as_json()["clauses"]}
    assert list(verdicts) == list(CLAUSES)
    assert all(set(v) == {"id", "section", "verdict", "programs", "why"} and v["verdict"] in VERDICTS
               for v in verdicts.values())
    assert verdicts["list.order"]["verdict"] == "failed"
    assert verdicts["send.keys"] == {"id": "send.keys", "section": "§1 send", "verdict": "known", "programs": 0,
                                     "why": "allowed (--allow)"}
    assert verdicts["send.sent"]["verdict"] == "passed" and verdicts["send.sent"]["programs"] == 3
    never = [v for v in verdicts.values() if v["verdict"] == "not-exercised"]
    assert never and all(v["why"] for v in never)
    assert verdicts["scope.session"]["why"] == "no rule reached it on this server in 40 programs"


def test_a_clause_held_only_in_programs_that_ended_at_their_first_step_is_shallow_not_passed() -> None:
    """Issue 38: "40 passed" from programs that mostly stopped at step 1. A clause whose every program
    ended at its first step is ``shallow`` (a skip in junit.xml, never a pass); a passed one says how
    many of its programs went past their first step."""
    coverage = {**_held("send.sent", "list.registered"), "probe: on": 40}
    state = {**_state(coverage), "deep": _held("send.sent")}
    report = build_report(10, 10, 1, [state], {}, [], [], target="sessions")
    verdicts = {v.id: v for v in report.clauses}
    assert verdicts["list.registered"].verdict == "shallow" and "ended at its first step" in verdicts["list.registered"].why
    assert verdicts["send.sent"].verdict == "passed" and "(3 of them past their first step)" in verdicts["send.sent"].why


@pytest.mark.parametrize("target, coverage, programs, steered, interrupted, clause, why", [
    ("direct", {}, 40, [], False, "view.terminals", "the target cannot observe it: --target direct has no sessions API"),
    ("sessions", {"probe: off (sockets are not on this machine)": 40}, 40, [], False, "read.rows-exact",
     "the target cannot observe it: no tmux probe"),
    ("sessions", {}, 40, ["bool-scrollback"], False, SCROLLBACK, "the campaign steered away from its inputs"),
    ("sessions", {}, 3, [], False, "send.keys", "the budget ended first: only 3 programs ran"),
    ("sessions", {}, 40, [], True, "send.keys", "the budget ended first: interrupted after"),
    ("sessions", {}, 40, [], False, "send.keys", "no rule reached it on this server in 40 programs"),
])
def test_a_clause_not_exercised_says_why(target: str, coverage: dict[str, int], programs: int, steered: list[str],
                                         interrupted: bool, clause: str, why: str) -> None:
    report = build_report(10, 10, 1, [_state(coverage, programs)], {}, [], [], steered, interrupted, target=target)
    verdict = next(v for v in report.clauses if v.id == clause)
    assert verdict.verdict == "not-exercised" and verdict.why.startswith(why), verdict


def test_a_deviation_whose_clause_held_is_stale_and_one_met_again_is_known(tmp_path: Path) -> None:
    deviations = _deviations(tmp_path, '[[deviation]]\nclause = "send.sent"\nwhy = "a dash"\n\n'
                                       '[[deviation]]\nclause = "list.baseline"\nwhy = "tui:main listed"\n\n'
                                       '[[deviation]]\nclause = "send.keys"\nwhy = "never met here"\n')
    state = _state(_held("send.sent", "list.baseline"), known={"list.baseline": 1})
    report = build_report(10, 10, 1, [state], {}, deviations, [])
    verdicts = {v.id: v for v in report.clauses}
    assert verdicts["send.sent"].verdict == "stale"
    assert verdicts["list.baseline"].verdict == "known" and verdicts["list.baseline"].why == "tui:main listed"
    assert verdicts["send.keys"].verdict == "not-exercised"  # not met, not held: nothing says it is fixed
    [stale] = report.stale
    assert stale.line() == (f"STALE  send.sent: remove its [[deviation]] entry at {tmp_path / 'deviations.toml'}:1: "
                            "the clause was exercised in 3 programs and held every time")
    assert report.as_json()["stale"] == [{"clause": "send.sent", "entry": f"{tmp_path / 'deviations.toml'}:1",
                                          "why": "the clause was exercised in 3 programs and held every time"}]


def test_a_deviation_whose_repro_replays_fixed_is_stale_unless_met_again(tmp_path: Path) -> None:
    (tmp_path / "test_x_0123456789.py").write_text("def test_x() -> None:\n    pass\n")
    deviations = _deviations(tmp_path, '[[deviation]]\nclause = "send.keys"\nwhy = "w"\nrepro = "test_x_0123456789.py"\n'
                                       '[[deviation]]\nclause = "send.sent"\nwhy = "w"\nrepro = "test_x_0123456789.py"\n')
    assert deviations[0].repro_path == tmp_path / "test_x_0123456789.py"
    fixed = {d.source: "replays FIXED at the campaign's start" for d in deviations}
    report = build_report(10, 10, 1, [_state({}, known={"send.sent": 1})], {}, deviations, [], fixed_repros=fixed)
    assert [e.deviation.clause for e in report.stale] == ["send.keys"]
    assert "its repro test_x_0123456789.py replays FIXED" in report.stale[0].line()


def test_a_deviation_whose_repro_still_fails_is_never_stale_however_often_its_clause_held(tmp_path: Path) -> None:
    (tmp_path / "test_x_0123456789.py").write_text("")
    [deviation] = _deviations(tmp_path, '[[deviation]]\nclause = "launch.already-running"\nwhy = "a race"\n'
                                        'repro = "test_x_0123456789.py"\n')
    state = _state(_held("launch.already-running", n=40))
    assert [e.deviation for e in build_report(10, 10, 1, [state], {}, [deviation], []).stale] == [deviation]
    report = build_report(10, 10, 1, [state], {}, [deviation], [], failing_repros={deviation.source})
    assert report.stale == [] and next(v for v in report.clauses if v.id == "launch.already-running").verdict == "known"


def test_a_repro_that_is_not_a_file_is_a_usage_error_naming_its_line(tmp_path: Path) -> None:
    with pytest.raises(DeviationsError, match=r"deviations.toml:4: repro 'missing.py' is not a file"):
        _deviations(tmp_path, '[[deviation]]\nclause = "send.keys"\nwhy = "w"\nrepro = "missing.py"\n')


def test_a_baseline_written_reads_back_the_same(tmp_path: Path) -> None:
    entries = [Deviation("send.sent", 'a "q" \\ é 😀 \x7f\ttab', cause="dash-edge", repro="r/test_a_0123456789.py"),
               Deviation("list.baseline", "y", server="omnigent", version="0.19.1")]
    text = dump_deviations(entries, "a header\nof two lines")
    assert text.startswith("# a header\n# of two lines\n")
    path = tmp_path / "baseline.toml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "test_a_0123456789.py").write_text("")
    assert [(d.clause, d.why, d.server, d.version, d.cause, d.repro) for d in load_deviations(path)] == \
        [(d.clause, d.why.strip(), d.server, d.version, d.cause, d.repro) for d in entries]


# -- report.md, junit.xml, report.html ---------------------------------------------------------------


class _Page(HTMLParser):
    """What a test needs of report.html: its tags, the rows of the clause table, the links and
    every reference to another resource."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self.external: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if tag == "a":
            self.links.append(values.get("href") or "")
        for key in ("src", "srcset", "data", "poster") + (("href",) if tag == "link" else ()):
            if values.get(key):
                self.external.append(f"{tag} {key}={values[key]}")
        if tag == "tr":
            self.rows.append([])
        if tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _report_with_a_finding(tmp_path: Path) -> Any:
    failure = {"clause": SCROLLBACK, "message": f"{SCROLLBACK}: read(scrollback=true) -> <script>alert(1)</script>",
               "first_seen_s": 3.0, "steps_found": 4, "steps_shrunk": 2, "shrink_s": 4.0, "shrunk_s": 7.0,
               "repro": "/r/test_repro_direct_0123456789.py", "reproduced": True,
               "report": "ReadScrollbackTypeViolation: ...\nstate = DirectMachine()\nstate.read(scrollback=True)"}
    state = _state({**_held("send.sent"), "probe: on": 40}, failures=[failure])
    return build_report(10, 10.5, 1, [state], {SCROLLBACK: {}}, [], [], target="direct")


def test_report_md_and_junit_carry_the_verdicts_a_not_exercised_clause_skipped_with_why(tmp_path: Path) -> None:
    report = _report_with_a_finding(tmp_path)
    write_reports(report, tmp_path)
    verdicts = {v.id: v for v in report.clauses}
    md = (tmp_path / "report.md").read_text()
    for v in report.clauses:
        assert f"| `{v.id}` | [{v.section}]({contract_link(v.section)}) | {v.verdict} | {v.programs} |" in md
    assert contract_link("§1 read") == "CONTRACT.md#sys_terminal_read-terminal-session-scrollback"
    assert contract_link("§2.8") == "CONTRACT.md#2-the-sessions-api-http-json-loopback"  # an item of §2's list
    assert all(not contract_link(c.section).endswith("#") for c in CLAUSES.values())
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert set(CLAUSES) <= set(cases)
    for clause, case in cases.items():
        if clause not in verdicts:
            continue
        verdict = verdicts[clause]
        skipped, failure = case.find("skipped"), case.find("failure")
        if verdict.verdict == "not-exercised":
            assert skipped is not None and skipped.get("message") == f"not exercised: {verdict.why}"
        elif verdict.verdict == "passed":
            assert skipped is None and failure is None
        elif verdict.verdict == "failed":
            assert failure is not None
        link = case.find("properties/property[@name='contract']")
        assert link is not None and link.get("value") == contract_link(verdict.section)


def test_report_html_is_one_self_contained_page_with_the_table_the_findings_and_the_timeline(tmp_path: Path) -> None:
    report = _report_with_a_finding(tmp_path)
    write_reports(report, tmp_path)
    page = _Page()
    page.feed((tmp_path / "report.html").read_text(encoding="utf-8"))
    page.close()
    assert page.external == []  # no network: no script, image, stylesheet or frame fetched
    assert "script" not in page.tags and "style" in page.tags and "svg" in page.tags
    table = {row[0]: row for row in page.rows if row}
    assert [table[c][2] for c in CLAUSES] == [v.verdict for v in report.clauses]
    assert all(table[v.id][4] == v.why for v in report.clauses)
    assert all(link.startswith("CONTRACT.md#") for link in page.links)
    text = "".join(page.text)
    assert "<script>alert(1)</script>" in text  # the server's output shown as text, never as markup
    assert "state.read(scrollback=True)" in text and "details" in page.tags and "summary" in page.tags
    html = (tmp_path / "report.html").read_text()
    assert html.count('class="met"') == 1 and html.count('class="shrunk"') == 1 and 'class="rate"' in html


def test_report_html_opens_in_headless_chromium(tmp_path: Path) -> None:
    """A real browser renders it (a screenshot of some size); skipped where chromium is not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    write_reports(_report_with_a_finding(tmp_path), tmp_path)
    shot = tmp_path / "report.png"
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600",
                             f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
                            capture_output=True, text=True, timeout=120, start_new_session=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    keep = os.environ.get("STATEFUL_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


# -- campaigns --------------------------------------------------------------------------------------


@pytest.mark.proof  # three campaigns (110 s of budget): the proofs tier
def test_a_fixed_deviation_is_stale_and_fails_the_campaign_on_the_correct_stack(
        run_root: Path, tmp_path: Path) -> None:  # noqa: F811 - run_root is the fixture imported above
    """A campaign with a planted fault writes its baseline (the clause, its first line, its repro);
    on the correct embedded stack that deviation is stale: its repro replays FIXED at the start.
    Exit 1 with one line naming the entry to remove; ``--allow-stale`` turns that off.

    The planted fault's campaign runs on the direct target (the reference tools in-process) with a
    fault that nearly every program meets (close-event-lost: every close), within seconds. It was
    scrollback-bool: a boolean scrollback comes up in some 6 % of the programs, so a loaded box that ran
    55 programs in 60 s met none about once in 30 runs (ci25). The stale campaigns run on the sessions
    API of the correct embedded stack."""
    repros, baseline = tmp_path / "repros", tmp_path / "baseline.toml"
    first, _ = campaign(run_root, "--target", "direct", "--budget", "60s", "--workers", "2", "--shrink-budget", "8",
                        "--repro-dir", str(repros), "--db", str(tmp_path / "db"), "--report", str(tmp_path / "r1"),
                        "--write-deviations", str(baseline), faults="close-event-lost", timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr
    written = load_deviations(baseline)
    entry = next(d for d in written if d.clause == EVENTS)
    assert entry.why.startswith(f"{EVENTS}: ") and entry.repro_path is not None and entry.repro_path.is_file()
    assert not Path(entry.repro).is_absolute()

    second, _ = campaign(run_root, "--budget", "40s", "--workers", "1", "--repro-dir", "", "--db", str(tmp_path / "db"),
                         "--report", str(tmp_path / "r2"), "--deviations", str(baseline), timeout=400)
    assert second.returncode == 1, second.stdout + second.stderr
    _nothing_left(run_root)
    data = json.loads((tmp_path / "r2" / "report.json").read_text())
    assert data["failures"] == [], data["failures"]
    verdicts = {v["id"]: v for v in data["clauses"]}
    assert list(verdicts) == list(CLAUSES) and all(v["why"] for v in verdicts.values())
    assert verdicts[EVENTS]["verdict"] == "stale", verdicts[EVENTS]
    assert f"deviation {EVENTS} ({entry.source}): repro {entry.repro} FIXED in " in second.stdout
    stale_lines = [line for line in second.stderr.splitlines() if line.startswith("STALE")]
    assert stale_lines == [f"STALE  {EVENTS}: remove its [[deviation]] entry at {entry.source}: its repro "
                           f"{entry.repro} replays FIXED at the campaign's start"], second.stderr
    assert (tmp_path / "r2" / "report.html").is_file()
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "r2" / "junit.xml").getroot().iter("testcase")}
    assert cases[EVENTS].find("failure") is not None

    allowed, _ = campaign(run_root, "--budget", "10s", "--workers", "1", "--repro-dir", "", "--db", str(tmp_path / "db"),
                          "--deviations", str(baseline), "--allow-stale", "--quiet", timeout=400)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "(--allow-stale: not failing)" in allowed.stderr
    _nothing_left(run_root)


def test_junit_has_one_case_per_finding_when_one_clause_is_broken_by_two_causes(tmp_path: Path) -> None:
    """Issue 23: a clause broken by two causes is two findings, so two failed test cases named by their
    keys; the suite's counts are those of the cases it holds (junit readers check them)."""
    clause = "send.text-literal"
    failures = [{"clause": clause, "cause": cause, "key": f"{clause}@{cause}", "message": f"{clause}: {cause}",
                 "first_seen_s": 1.0} for cause in ("semicolon-edge", "long-text")]
    state = _state({**_held("send.sent"), "probe: on": 40}, failures=failures)
    claims = {f["key"]: {"clause": clause, "cause": f["cause"]} for f in failures}
    write_reports(build_report(10, 10, 1, [state], claims, [], [], target="direct"), tmp_path)
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    cases = list(suite.iter("testcase"))
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names)) and int(suite.get("tests", "0")) == len(cases)
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {f"{clause}@semicolon-edge", f"{clause}@long-text"}
    assert int(suite.get("failures", "0")) == 2 and clause not in names
    assert set(CLAUSES) - {clause} <= set(names)

"""``--observe DIR`` (issue 25, section 5): Hypothesis's test-case observations as JSON lines, for a
machine run (pytest) and for a campaign (one pair of files per worker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.internal.observability import observability_enabled

from stateful.observe import observation_files, observing
from test_campaign import campaign, run_root  # noqa: F401 - run_root is a fixture used below

ROOT = Path(__file__).resolve().parent.parent


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_observations_are_json_lines_of_every_test_case_and_stop_at_the_end(tmp_path: Path) -> None:
    @settings(max_examples=7, database=None)
    @given(st.integers(0, 9))
    def drawn(n: int) -> None:
        event(f"parity: {n % 2}")

    with observing(tmp_path / "obs", "here") as writer:
        assert observability_enabled()
        drawn()
    assert writer is not None and writer.files == observation_files(tmp_path / "obs", "here")
    cases = lines(writer.files["testcases"])
    assert len(cases) >= 7
    assert {c["type"] for c in cases} == {"test_case"}
    assert {c["status"] for c in cases} == {"passed"}
    assert all(c["representation"].startswith("drawn(") and "n=" in c["representation"] for c in cases)
    assert all(any(k.startswith("parity: ") for k in c["features"]) for c in cases)
    assert all(c["coverage"] is None for c in cases)  # the tester's own lines: not collected
    assert {i["type"] for i in lines(writer.files["info"])} <= {"info", "alert", "error"}

    drawn()  # after the block: nothing more is written
    assert len(lines(writer.files["testcases"])) == len(cases)


def test_observing_nothing_is_a_no_op() -> None:
    before = observability_enabled()
    with observing(None) as writer:
        assert writer is None and observability_enabled() == before


@pytest.mark.proof  # the machine run by pytest stateful/ (the dev profile's programs): the proofs tier
def test_a_machine_run_writes_its_programs(tmp_path: Path) -> None:
    observed = tmp_path / "observed"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "stateful/test_machine.py", "--target", "direct", "-q", "-p", "no:cacheprovider",
         "--repro-dir", "", "--observe", str(observed)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    (testcases,) = observed.glob("pytest-*_testcases.jsonl")
    cases = lines(testcases)
    assert len(cases) >= 15  # the dev profile's max_examples, and its invalid programs besides
    assert {c["property"] for c in cases} == {"stateful/test_machine.py::test_direct"}
    passed = [c for c in cases if c["status"] == "passed"]
    assert passed and all(c["representation"].startswith("state = DirectMachine()\n") for c in passed)
    assert any("state.start(" in c["representation"] for c in passed)
    assert any(k.startswith("clause: ") for c in passed for k in c["features"])


@pytest.mark.proof  # a campaign of two workers: the proofs tier
def test_a_campaign_writes_the_test_cases_of_each_worker(run_root: Path, tmp_path: Path) -> None:  # noqa: F811
    observed, report = tmp_path / "observed", tmp_path / "report"
    result, _wall = campaign(run_root, "--target", "direct", "--budget", "15s", "--workers", "2", "--quiet",
                             "--repro-dir", "", "--db", str(tmp_path / "db"), "--report", str(report),
                             "--observe", str(observed))
    assert result.returncode == 0, result.stdout + result.stderr
    programs = json.loads((report / "report.json").read_text(encoding="utf-8"))["programs"]
    files = {p.name for p in observed.iterdir()}
    # an info file is written only if Hypothesis has something to say besides the test cases
    assert {"worker-0_testcases.jsonl", "worker-1_testcases.jsonl"} <= files, files
    assert files <= {"worker-0_testcases.jsonl", "worker-1_testcases.jsonl", "worker-0_info.jsonl",
                     "worker-1_info.jsonl"}, files
    cases = [c for worker in (0, 1) for c in lines(observed / f"worker-{worker}_testcases.jsonl")]
    # every program the report counts was a test case Hypothesis observed (besides rejected ones)
    assert programs > 0 and len(cases) >= programs, (programs, len(cases))
    assert all(c["representation"].startswith("state = DirectMachine()") for c in cases if c["status"] == "passed")


def test_an_observe_path_that_cannot_be_a_directory_is_one_line(run_root: Path, tmp_path: Path) -> None:  # noqa: F811
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    result, _wall = campaign(run_root, "--target", "direct", "--budget", "5s", "--observe", str(blocker / "sub"))
    assert result.returncode == 2, result
    assert result.stderr.splitlines() == [
        f"python -m stateful campaign: error: --observe {blocker / 'sub'}: cannot make the directory: Not a directory"]

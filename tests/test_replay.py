"""``python -m stateful replay``: which files it takes, how it reads a run, and its errors.

The verdicts on real repros (FIXED / STILL FAILING with the clause, ``--prune``) are tested in
tests/test_faults.py on the plain repros the fault hunts write; here what needs no server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stateful.replay import Verdict, clause_in, collect, main, not_run, run_repro


def test_collect_takes_files_as_given_and_the_repros_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "test_view_terminals_0123456789.py").write_text("")
    (tmp_path / "test_repro_sessions_abcdef0123.py").write_text("")
    (tmp_path / "test_helpers.py").write_text("")  # not a repro: no digest
    (tmp_path / "notes.txt").write_text("")
    other = tmp_path / "mine.py"
    other.write_text("")
    assert collect([str(tmp_path), str(other)]) == [
        tmp_path / "test_repro_sessions_abcdef0123.py", tmp_path / "test_view_terminals_0123456789.py", other]


@pytest.mark.parametrize(("make", "error"), [
    (lambda d: d / "missing.py", "no such file or directory: {}"),
    (lambda d: d, "no repro (test_*_<digest>.py) in {}"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, error) -> None:
    path = make(tmp_path)
    assert main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"replay: {error.format(path)}\n"


def test_server_options_go_together(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([str(tmp_path), "--server-url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err == ("replay: --server-url, --mock-llm-url and --runner-id go together "
                                       "(missing: --mock-llm-url, --runner-id)\n")


@pytest.mark.parametrize(("output", "clause"), [
    ("E       AssertionError: view.terminals: step 3: /resources/terminals shows [('bash', 'main')]", "view.terminals"),
    ("SendKeysViolation: send.keys: python prompt not shown in bash:'main'", "send.keys"),
    ("E   httpx.ConnectError: [Errno 111] Connection refused", None),
    ("E       AssertionError: turn 1 ended {'status': 'failed'}", None),
    ("E       AssertionError: no.such-clause: x", None),
])
def test_a_failed_run_is_still_failing_only_when_it_names_a_clause(output: str, clause: str | None) -> None:
    assert clause_in(f"F\n{output}\n1 failed in 2.0s") == clause


def test_a_repro_that_cannot_be_collected_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "test_view_terminals_0123456789.py"
    broken.write_text("def test_x(:\n")
    verdict = run_repro(broken)
    assert verdict.status == "ERROR" and "SyntaxError" in verdict.detail, verdict


def test_a_verdict_is_one_line() -> None:
    line = Verdict(Path("r/test_x_0123456789.py"), "STILL FAILING", "items.pagination", 3.25).line()
    assert line == "STILL FAILING  r/test_x_0123456789.py: items.pagination (3.2 s)"
    assert sys.executable  # the subprocesses run this interpreter


@pytest.mark.parametrize(("summary", "said"), [
    ("1 passed in 0.5s", None),
    ("2 passed, 1 xpassed in 0.5s", None),
    ("SKIPPED [1] test_x_0123456789.py:4: needs the server's machine\n1 skipped in 0.1s",
     "1 skipped (needs the server's machine)"),
    ("1 passed, 1 skipped in 0.5s", "1 passed, 1 skipped"),
    ("1 xfailed in 0.5s", "1 xfailed"),
])
def test_a_run_that_exited_0_is_fixed_only_if_every_test_ran_and_passed(summary: str, said: str | None) -> None:
    assert not_run(f".s\n{summary}\n") == said


def test_a_repro_whose_tests_all_skip_is_skipped_never_fixed_nor_pruned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skipping = tmp_path / "test_view_terminals_0123456789.py"
    skipping.write_text("import pytest\n\n\ndef test_x() -> None:\n    pytest.skip('needs the server machine')\n")
    fixed = tmp_path / "test_items_pagination_0123456789.py"
    fixed.write_text("def test_x() -> None:\n    assert True\n")
    assert main([str(tmp_path), "--prune"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"FIXED          {fixed}")
    assert lines[1].startswith(f"SKIPPED        {skipping}: 1 skipped (needs the server machine)")
    assert lines[-1] == "replay: 2 repros: 1 fixed, 0 still failing, 1 skipped, 0 errors; deleted the 1 fixed"
    assert skipping.exists() and not fixed.exists()

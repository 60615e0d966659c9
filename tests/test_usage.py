"""A new user's mistakes, and a server that cannot be tested: each is one clear line, before anything
runs, and nothing is written. Runs ``./dev`` and ``python -m pytest`` as the user would (subprocesses
with small timeouts)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "dev"
PYTEST = [sys.executable, "-m", "pytest"]
REPRO = '''from stateful.repro import *  # noqa: F403

TARGET = "direct"


def test_repro(repro_machine):
    def program(state):
        pass

    repro_machine(TARGET, program)
'''
"""The smallest repro: a program of no steps on the direct target (it opens and tears down a machine)."""


def run(args: list[str], *, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-blank lines of stdout and stderr."""
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def collected(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The node ids that ``--collect-only -q`` listed."""
    return [line for line in result.stdout.splitlines() if "::" in line]


# -- ./dev ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("job", ["help", "-h", "--help"])
def test_help_answers_at_once_and_builds_nothing(tmp_path: Path, job: str) -> None:
    copy = tmp_path / "dev"
    shutil.copy(DEV, copy)
    result = run(["bash", str(copy), job], cwd=tmp_path, timeout=10)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ./dev JOB") and "./dev replay" in result.stdout
    assert not (tmp_path / ".venv").exists()


def test_no_job_or_an_unknown_one_is_a_usage_error_that_builds_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "dev"
    shutil.copy(DEV, copy)
    bare = run(["bash", str(copy)], cwd=tmp_path, timeout=10)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: ./dev JOB") and bare.stdout == ""
    unknown = run(["bash", str(copy), "nosuch"], cwd=tmp_path, timeout=10)
    assert unknown.returncode == 2
    assert said(unknown) == ["dev: unknown job 'nosuch' (machine, tests, replay, serve, bench or help)"]
    assert not (tmp_path / ".venv").exists()


def test_a_path_given_to_dev_tests_replaces_tests() -> None:
    result = run([str(DEV), "tests", "tests/test_profiles.py", "--collect-only", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr
    ids = collected(result)
    assert ids and all(i.startswith("tests/test_profiles.py::") for i in ids), ids


def test_a_path_is_taken_from_where_dev_is_called() -> None:
    result = run(["../dev", "tests", "test_profiles.py::test_dev_is_the_default", "--collect-only", "-q"],
                 cwd=ROOT / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert collected(result) == ["tests/test_profiles.py::test_dev_is_the_default"]


def test_a_path_given_to_dev_machine_replaces_stateful() -> None:
    result = run([str(DEV), "machine", "stateful/test_machine.py::test_direct", "--collect-only", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert collected(result) == ["stateful/test_machine.py::test_direct"]


def test_an_option_value_is_not_taken_for_a_path() -> None:
    # `dev` is a file of the repository root, where this runs; after -k it is an expression
    result = run([str(DEV), "tests", "-k", "dev", "--collect-only", "-q"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    ids = collected(result)
    assert "tests/test_profiles.py::test_dev_is_the_default" in ids
    assert all(i.startswith("tests/") for i in ids), ids


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_dev_replay_runs_a_repro_inside_or_outside_the_project(tmp_path: Path, where: str) -> None:
    """Inside, the project's conftests load the plugins (naming them again would fail); outside,
    ``./dev replay`` names them."""
    folder = tmp_path if where == "outside" else ROOT / "stateful" / "repros"
    made = not folder.exists()
    folder.mkdir(exist_ok=True)
    repro = folder / f"test_repro_direct_usage_{tmp_path.name}.py"
    repro.write_text(REPRO, encoding="utf-8")
    try:
        result = run([str(DEV), "replay", str(repro), "-q"], cwd=tmp_path, timeout=120)
    finally:
        repro.unlink()
        if made:
            folder.rmdir()
    assert result.returncode == 0, result.stdout + result.stderr
    assert said(result)[-1].startswith("1 passed")


def test_dev_replay_without_a_file_says_so() -> None:
    result = run([str(DEV), "replay"], timeout=10)
    assert result.returncode == 2
    assert said(result) == ["dev: replay needs a repro file (e.g. stateful/repros/test_repro_*.py)"]


# -- usage errors: one line, nothing run -----------------------------------------------------------

@pytest.mark.parametrize(("args", "error"), [
    (["--hypothesis-profile", "nosuch"], "unknown --hypothesis-profile 'nosuch'; known: ci, default, dev, nightly, repro"),
    (["--server-url", "http://127.0.0.1:1"],
     "--server-url, --mock-llm-url and --runner-id go together (missing: --mock-llm-url, --runner-id)"),
    (["--target", "bogus"], "unknown --target 'bogus'; known: direct, sessions, all"),
])
def test_a_usage_error_is_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    result = run([*PYTEST, "stateful/", *args, "--repro-dir", str(tmp_path / "repros")])
    assert result.returncode == 4
    assert said(result) == [f"ERROR: {error}"]
    assert not (tmp_path / "repros").exists()


def test_an_unknown_profile_through_dev_is_one_line() -> None:
    result = run([str(DEV), "machine", "--hypothesis-profile=nosuch"])
    assert result.returncode == 4 and "INTERNALERROR" not in result.stdout + result.stderr
    assert said(result) == ["ERROR: unknown --hypothesis-profile 'nosuch'; known: ci, default, dev, nightly, repro"]

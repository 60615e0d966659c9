"""The installed tool (issue 25, section 1): the console commands, a missing tmux, the pytest plugin
that the entry point loads into a server team's suite, and a wheel installed into a fresh virtual
environment outside the repository.

The wheel test (marker ``install``) builds the wheel, creates a venv, pip-installs the wheel and its
dependencies from the package index, then runs a 30 s campaign: about 70 s on a quiet 2-core machine
(6 s build, 25 s install, 32 s campaign), 130 s with five other test runs beside it. CI runs it;
``-m "not install"`` leaves it out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from stateful.clauses import CLAUSES

ROOT = Path(__file__).resolve().parent.parent
SECTION6_CONFTEST = Path(__file__).with_name("section6_conftest.py")
DISTRIBUTION = "agent-terminal-conformance"
COMMANDS = ("agent-terminal-conformance", "stateful")


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The timeout only guards against a hang: a busy CI box (two spinners beside the hunts) took
    over 60 s to start a pytest run here, so it is generous and never a verdict."""
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-blank lines of stdout and stderr."""
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def without_tmux(tmp_path: Path) -> dict[str, str]:
    """The environment with a PATH that has no tmux (the interpreter is run by its full path)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return {**os.environ, "PATH": str(empty)}


# -- the commands ---------------------------------------------------------------------------------

def test_the_distribution_announces_both_commands_and_the_pytest_plugin() -> None:
    """What pip installs from pyproject.toml (this environment has the project installed, as ./dev does)."""
    points = metadata.distribution(DISTRIBUTION).entry_points
    scripts = {p.name: p.value for p in points if p.group == "console_scripts"}
    assert scripts == {name: "stateful.__main__:console" for name in COMMANDS}
    assert {p.name: p.value for p in points if p.group == "pytest11"} == {"stateful": "stateful.plugin"}


@pytest.mark.parametrize("args", [["serve"], ["campaign", "--target", "direct", "--budget", "5s"],
                                  ["replay", "."], ["bench", "--only", "floor"]])
def test_tmux_missing_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = run([sys.executable, "-m", "stateful", *args], cwd=tmp_path, env=without_tmux(tmp_path))
    assert result.returncode == 2, result
    assert said(result) == [f"error: tmux is not installed (no 'tmux' on PATH); '{args[0]}' runs terminals in it: "
                            "install tmux first"]
    assert list(tmp_path.iterdir()) == [tmp_path / "bin"]  # nothing written (no database, no report)


def test_commands_that_run_no_terminal_need_no_tmux(tmp_path: Path) -> None:
    """``clauses`` lists, an external server's campaign is checked (here: a usage error) without tmux."""
    env = without_tmux(tmp_path)
    listed = run([sys.executable, "-m", "stateful", "clauses"], cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "output.json" in listed.stdout, listed
    external = run([sys.executable, "-m", "stateful", "campaign", "--server-url", "http://127.0.0.1:9"],
                   cwd=tmp_path, env=env)
    assert external.returncode == 2 and "tmux" not in external.stderr, external


def test_bench_passes_its_arguments_through(tmp_path: Path) -> None:
    result = run([sys.executable, "-m", "stateful", "bench", "--only", "nonsense"], cwd=tmp_path)
    assert result.returncode == 2 and "unknown section(s) ['nonsense']" in result.stderr, result


# -- the pytest plugin in a server team's suite -------------------------------------------------------

def team_suite(tmp_path: Path) -> Path:
    """A directory holding only a §6 conftest written without this project (it defines ``--profile``
    and the fixtures, reading the server from CONTRACT_* variables)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(SECTION6_CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    return suite


def test_the_suites_own_tests_run_beside_the_plugin(tmp_path: Path) -> None:
    """The entry point loads into every pytest run of the environment: a suite that defines the §6
    option ``--profile`` itself still starts, and its Hypothesis settings are not the machine's."""
    suite = team_suite(tmp_path)
    (suite / "test_own.py").write_text(
        "from hypothesis import settings\n\n"
        "def test_own(request):\n"
        "    assert request.config.getoption('--profile') == 'p1'\n"
        "    assert settings().max_examples == 100 and settings().deadline is not None\n",
        encoding="utf-8")
    # without CI: where CI is set, Hypothesis itself loads its "ci" profile (no deadline), not this plugin
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--profile", "p1"], cwd=suite, env=env)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr


def test_pytest_pyargs_runs_the_machine_on_the_suites_fixtures(tmp_path: Path) -> None:
    """``pytest --pyargs stateful`` from the suite's directory: the machine's options exist and its
    sessions target takes the server from the suite's fixtures (here they fail, naming the variable
    that is not set: so they were the ones used, not the plugin's embedded stack)."""
    suite = team_suite(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTRACT_")}
    result = run([sys.executable, "-m", "pytest", "--pyargs", "stateful", "--target", "sessions", "-q",
                  "-p", "no:cacheprovider", "--profile", "p1", "--repro-dir", ""], cwd=suite, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 skipped" in result.stdout, result.stdout  # the direct target skipped by --target
    assert "CONTRACT_SERVER_URL is not set" in result.stdout, result.stdout
    assert not (suite / "repros").exists()


# -- the wheel, installed outside the repository ---------------------------------------------------------

@pytest.mark.proof  # slow: a wheel built and installed (the proofs tier)
@pytest.mark.install
def test_a_wheel_installed_in_a_fresh_venv_runs_a_campaign_from_anywhere(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                cwd=tmp_path, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"stateful/hypothesis.ini", "stateful/targets/bashrc", "stateful/plugin.py"} <= names

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    installed = run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, timeout=600)
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    located = run([str(python), "-c", "import stateful; print(stateful.__file__)"], cwd=elsewhere, env=env)
    assert str(environment) in located.stdout, located  # the installed copy, not this checkout
    for command in COMMANDS:
        listed = run([str(environment / "bin" / command), "clauses"], cwd=elsewhere, env=env)
        assert listed.returncode == 0, listed
        assert listed.stdout == run([sys.executable, "-m", "stateful", "clauses"], cwd=ROOT).stdout

    campaign = run([str(environment / "bin" / "stateful"), "campaign", "--target", "direct", "--budget", "30s",
                    "--report", "R", "--quiet"], cwd=elsewhere, env=env, timeout=180)
    assert campaign.returncode == 0, campaign.stdout + campaign.stderr + "".join(  # what it found, whole
        f"\n--- {path.name}\n{path.read_text(encoding='utf-8')}" for path in sorted(elsewhere.rglob("*repro*.py")))
    report = json.loads((elsewhere / "R" / "report.json").read_text(encoding="utf-8"))
    assert report["programs"] > 0, report
    assert {c["id"] for c in report["clauses"]} == set(CLAUSES)  # a verdict per clause
    assert (elsewhere / "R" / "report.html").read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    defaults = run([str(python), "-c", "from stateful.campaign.options import DEFAULT_DB, DEFAULT_REPROS; "
                    "print(DEFAULT_DB); print(DEFAULT_REPROS)"], cwd=elsewhere, env=env)
    # what a checkout keeps in the project goes beside the user, not into site-packages
    assert defaults.stdout.split() == [str(elsewhere / ".hypothesis" / "examples"), str(elsewhere / "repros")]

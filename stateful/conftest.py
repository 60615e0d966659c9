"""What `pytest stateful/` needs: the e2e plugin, the --target option, the Hypothesis profiles.

Profiles come from ``stateful/hypothesis.ini`` (package data: an installed wheel carries them). They
are registered when this conftest is imported, which pytest does (as an initial conftest of
``stateful/``, or through the entry point, ``stateful.plugin``, in ``pytest --pyargs stateful``)
before the hypothesis plugin's ``pytest_configure`` loads the profile named by
``--hypothesis-profile``; without that option the ``dev`` profile stays loaded.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from stateful import clauses
from stateful.arguments import conversation_budget, seconds
from stateful.locations import HYPOTHESIS_INI, default_repro_dir, work_root
from stateful.machine import MachineConfig
from stateful.observe import observing

DEFAULT_PROFILE = "dev"
MACHINE_PREFIX = "machine."
TARGETS = ("direct", "sessions", "all")


def _value(key: str, raw: str) -> Any:
    """One ini value as the Hypothesis setting (or MachineConfig field) expects it."""
    text = raw.strip()
    names = [part.strip() for part in text.split(",") if part.strip()]
    if key == "suppress_health_check":
        return [HealthCheck[n] for n in names]
    if key == "phases":
        return [Phase[n] for n in names]
    if key == "verbosity":
        return Verbosity[text]
    if key == "database":
        return None if text.lower() == "none" else DirectoryBasedExampleDatabase(str(work_root() / text))
    if text.lower() in ("none", "null"):
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_profiles(path: Path = HYPOTHESIS_INI) -> dict[str, MachineConfig]:
    """Register every profile of the ini with Hypothesis; return each profile's MachineConfig."""
    parser = configparser.ConfigParser()
    if not parser.read(path, encoding="utf-8"):
        raise pytest.UsageError(f"cannot read {path}")
    machines: dict[str, MachineConfig] = {}
    fields = {f.name for f in dataclasses.fields(MachineConfig)}
    for name in parser.sections():
        options: dict[str, Any] = {}
        machine: dict[str, Any] = {}
        for key, raw in parser.items(name):
            if key.startswith(MACHINE_PREFIX):
                field = key[len(MACHINE_PREFIX):]
                if field not in fields:
                    raise pytest.UsageError(f"{path}: [{name}] {key}: MachineConfig has no field {field!r}")
                machine[field] = _value(field, raw)
            else:
                options[key] = _value(key, raw)
        if options.get("derandomize"):
            options.pop("database", None)  # derandomize=True implies database=None
        settings.register_profile(name, **options)
        machines[name] = MachineConfig(**machine)
    return machines


MACHINE_CONFIGS = load_profiles()
settings.load_profile(DEFAULT_PROFILE)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stateful", "stateful machine")
    group.addoption("--target", default="all", metavar="|".join(TARGETS),
                    help="which target the machine drives (default all: in-process and the HTTP stack)")
    group.addoption("--step-timeout", type=float, default=None,
                    help="seconds before a step is reported as a hang (default: the profile's)")
    group.addoption("--poll-deadline", type=float, default=None,
                    help="seconds to wait for an eventual property (default: the profile's)")
    group.addoption("--conversation-budget", default=None, metavar="SIZE",
                    help="bytes an agent session's conversation may reach (every model call carries it whole): "
                         "past it the machine moves on to a fresh session (e.g. 200kB, 4MB; default: the "
                         "profile's, 4MB)")
    group.addoption("--shrink-budget", type=seconds, default=None, metavar="S",
                    help="seconds Hypothesis may shrink a failure (default: its own 300); it then "
                         "reports the smallest failing program found so far")
    group.addoption("--repro-dir", default=str(default_repro_dir()),
                    help="where a shrunk failure is written as a regression test "
                         "(default stateful/repros/, which pytest stateful/ collects; installed: ./repros; "
                         "'' = don't write)")
    group.addoption("--observe", default=None, metavar="DIR",
                    help="write Hypothesis's test-case observations there (JSON lines, what the Tyche viewer "
                         "reads: pytest-<pid>_testcases.jsonl, pytest-<pid>_info.jsonl)")
    group.addoption("--plain-conftest", default="tests.e2e.conftest", metavar="MODULE",
                    help="the module a plain repro (sessions target) imports the §6 helpers and fixtures from "
                         "(default tests.e2e.conftest)")
    group.addoption("--allow", action="append", default=[], metavar="CLAUSE",
                    help="a clause whose violations are known (repeatable): where its check can go on past one "
                         "(python -m stateful clauses --json: goes_on), the program notes it and goes on")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A bad ``--target`` is a one-line usage error (argparse's ``choices`` would print four lines:
    pytest's usage line, the error, the ini file and the rootdir)."""
    chosen = config.getoption("--target")
    if chosen not in TARGETS:
        raise pytest.UsageError(f"unknown --target {chosen!r}; known: {', '.join(TARGETS)}")
    given_budget(config)
    allowed = config.getoption("--allow")
    unknown = [c for c in allowed if c not in clauses.CLAUSES]
    if unknown:
        raise pytest.UsageError(f"unknown clause {unknown[0]!r} for --allow (python -m stateful clauses lists them)")
    clauses.know(allowed)


def given_budget(config: pytest.Config) -> int | None:
    """``--conversation-budget`` in bytes (None: the profile's); a bad one is a one-line usage error."""
    text = config.getoption("--conversation-budget")
    try:
        return None if text is None else conversation_budget(text)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"--conversation-budget: {exc}") from None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The known deviations the programs went on past (``--allow``), so that a green run says so."""
    met = clauses.deviations()
    for key, count in sorted(met.met.items()):
        terminalreporter.write_line(f"known deviation gone past {count} times: {str(met.examples[key]).splitlines()[0]}")


def current_profile() -> str:
    """The loaded profile's ini section (the plugin may derive '<name>-with-...' profiles)."""
    name = settings.get_current_profile_name()
    return name.split("-with-")[0]


@pytest.fixture(scope="session")
def machine_config(request: pytest.FixtureRequest) -> MachineConfig:
    config = MACHINE_CONFIGS.get(current_profile(), MachineConfig())
    changes = {}
    for option, field in (("--step-timeout", "step_timeout"), ("--poll-deadline", "poll_deadline")):
        value = request.config.getoption(option)
        if value is not None:
            changes[field] = value
    budget = given_budget(request.config)
    if budget is not None:
        changes["conversation_budget"] = budget
    return dataclasses.replace(config, **changes)


def _wanted(request: pytest.FixtureRequest, target: str) -> None:
    chosen = request.config.getoption("--target")
    if chosen not in (target, "all"):
        pytest.skip(f"--target={chosen}")


@pytest.fixture(scope="session")
def direct_target(request: pytest.FixtureRequest) -> Iterator[Any]:
    _wanted(request, "direct")
    from stateful.targets.direct import DirectTarget

    target = DirectTarget()
    try:
        yield target
    finally:
        target.close()


@pytest.fixture(scope="session")
def sessions_target(request: pytest.FixtureRequest) -> Iterator[Any]:
    _wanted(request, "sessions")
    from stateful.targets.sessions import SessionsTarget

    # the §6 fixtures, not contract_target: a server team's conftest that defines them (session-scoped)
    # points the machine at its server
    server_url, mock_llm_url, runner_id = (request.getfixturevalue(name) for name in
                                           ("live_server", "mock_llm_server_url", "live_runner_id"))
    target = SessionsTarget(server_url, mock_llm_url, runner_id)
    try:
        yield target
    finally:
        target.close()


@pytest.fixture(scope="session", autouse=True)
def observations(request: pytest.FixtureRequest) -> Iterator[None]:
    """``--observe DIR``: Hypothesis's observations of every test under ``stateful/`` (stateful.observe)."""
    value = request.config.getoption("--observe")
    with observing(Path(value) if value else None, f"pytest-{os.getpid()}"):
        yield


@pytest.fixture(scope="session")
def shrink_seconds(request: pytest.FixtureRequest) -> float | None:
    """``--shrink-budget``: how long Hypothesis may shrink a failure (None: its own limit)."""
    value: float | None = request.config.getoption("--shrink-budget")
    return value


@pytest.fixture(scope="session")
def repro_dir(request: pytest.FixtureRequest) -> Path | None:
    value = request.config.getoption("--repro-dir")
    return Path(value) if value else None


@pytest.fixture(scope="session")
def plain_conftest(request: pytest.FixtureRequest) -> str:
    """The module plain repros import their helpers and fixtures from (``--plain-conftest``)."""
    return str(request.config.getoption("--plain-conftest"))


@pytest.fixture
def repro_machine(request: pytest.FixtureRequest, machine_config: MachineConfig) -> Callable[..., None]:
    """For the regression tests that stateful/repro.py writes: runs ``program(state)`` once on a fresh
    machine bound to the named target kind ("direct" or "sessions"), as ``test_machine.py`` binds it,
    then its teardown. It runs inside a one-example Hypothesis test because the machine's rules
    record ``note()``/``event()``, which only exist there."""
    from stateful.machine import TerminalMachine
    from stateful.minimize import run_once

    def replay(target_name: str, program: Callable[[Any], None], finding: str | None = None) -> None:
        """``finding``: the key the repro was written for (clause@cause); the failure says which
        finding it is now, and whether that is another cause of the clause than the repro's."""
        target = request.getfixturevalue(f"{target_name}_target")
        machine = type(f"Repro{target_name.title()}Machine", (TerminalMachine,), {})
        machine.bind(target, machine_config)
        try:
            run_once(machine, program)
        except clauses.ContractViolation as violation:
            if finding is not None:
                violation.add_note(f"finding: {violation.key}" + ("" if violation.key == finding else
                                   f" (this repro was written for {finding}: the program now breaks its clause "
                                   "by another cause, so it fails for both)"))
            raise

    return replay

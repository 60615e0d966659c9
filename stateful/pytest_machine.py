"""The machine's pytest plugin: what ``pytest stateful/`` needs besides the §6 helpers (:mod:`stateful.e2e`):
the ``--target`` option and its kin, the Hypothesis profiles (:mod:`stateful.profiles`), the targets as
session fixtures (:mod:`stateful.targets.registry`) and ``repro_machine``, which written repros replay
through.

``stateful/conftest.py`` is this module, for a run that collects ``stateful/``; in
``pytest --pyargs stateful`` the entry point (:mod:`stateful.plugin`) registers it under that conftest's
name. Either way it is registered before the hypothesis plugin's ``pytest_configure`` loads the profile
named by ``--hypothesis-profile``; without that option the ``dev`` profile stays loaded.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from stateful import clauses, profiles, tolerance
from stateful.arguments import conversation_budget, seconds
from stateful.locations import default_repro_dir
from stateful.machine import MachineConfig
from stateful.observe import observing
from stateful.targets import registry
from stateful.targets.base import Target

__all__ = ["MachineTargets", "given_budget", "machine_config", "machine_targets", "observations", "plain_conftest",
           "pytest_addoption", "pytest_configure", "pytest_terminal_summary", "repro_dir", "repro_machine",
           "shrink_seconds", "wanted"]

TARGETS = (*registry.KINDS, "all")
"""What ``--target`` accepts: a kind of target, or all of them."""

try:
    profiles.machine_configs()  # registers every profile of the ini
except profiles.ProfileError as exc:
    raise pytest.UsageError(str(exc)) from None
settings.load_profile(profiles.DEFAULT_PROFILE)


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
    """The known deviations the programs went on past (``--allow``), so that a green run says so, and
    the programs that drew otherwise than an earlier one with the same start (a racing server)."""
    met = clauses.deviations()
    for key, count in sorted(met.met.items()):
        terminalreporter.write_line(f"known deviation gone past {count} times: {str(met.examples[key]).splitlines()[0]}")
    for note in tolerance.NOTED:
        terminalreporter.write_line(f"stateful: {note}")


@pytest.fixture(scope="session")
def machine_config(request: pytest.FixtureRequest) -> MachineConfig:
    """The loaded profile's MachineConfig (the plugin may derive '<name>-with-...' profiles), with the
    command line's changes."""
    return profiles.machine_config(settings.get_current_profile_name(),
                                   step_timeout=request.config.getoption("--step-timeout"),
                                   poll_deadline=request.config.getoption("--poll-deadline"),
                                   conversation_budget=given_budget(request.config))


def wanted(config: pytest.Config, name: str) -> bool:
    """Whether ``--target`` asks for the kind ``name``."""
    return config.getoption("--target") in (name, "all")


class MachineTargets:
    """The targets of one pytest run: each kind opened once, by the first test that needs it, and
    closed (terminals, stacks) at the end of the session. A kind that takes a server reaches the one
    the §6 fixtures name (``live_server``, ``mock_llm_server_url``, ``live_runner_id``), not
    ``contract_target``: a server team's conftest that defines them points the machine at its server."""

    def __init__(self, request: pytest.FixtureRequest, stack: ExitStack) -> None:
        self._request, self._stack = request, stack
        self._open: dict[str, Target] = {}

    def get(self, name: str) -> Target:
        """The target of kind ``name`` (the test is skipped if ``--target`` leaves that kind out)."""
        if not wanted(self._request.config, name):
            pytest.skip(f"--target={self._request.config.getoption('--target')}")
        if name not in self._open:
            kind = registry.kind(name)
            server = registry.Server(*(self._request.getfixturevalue(fixture) for fixture in
                                       ("live_server", "mock_llm_server_url", "live_runner_id"))) if kind.takes_server else None
            self._open[name] = self._stack.enter_context(kind.target.opened(server, 0.0))
        return self._open[name]


@pytest.fixture(scope="session")
def machine_targets(request: pytest.FixtureRequest) -> Iterator[MachineTargets]:
    with ExitStack() as stack:
        yield MachineTargets(request, stack)


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

    def replay(target_name: str, program: Callable[[Any], None], finding: str | None = None,
               behind: tuple[str, ...] = ()) -> None:
        """``finding``: the key the repro was written for (clause@cause); the failure says which
        finding it is now, and whether that is another cause of the clause than the repro's.
        ``behind``: the known violations its program went on past to meet it (it goes past them again)."""
        target = request.getfixturevalue("machine_targets").get(target_name)
        machine = type(f"Repro{target_name.title()}Machine", (TerminalMachine,), {})
        machine.bind(target, machine_config)
        try:
            with clauses.going_past(behind):
                run_once(machine, program)
        except clauses.ContractViolation as violation:
            if finding is not None:
                violation.add_note(f"finding: {violation.key}" + ("" if violation.key == finding else
                                   f" (this repro was written for {finding}: the program now breaks its clause "
                                   "by another cause, so it fails for both)"))
            raise

    return replay

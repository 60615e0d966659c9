"""The seed-style helpers (CONTRACT §6, :mod:`stateful.client`) with their pytest fixtures and options: a
pytest plugin.

Scripted tests written against these names run unchanged here and in omnigent's own e2e suite::

    pytest -p stateful.e2e ...              # or: pytest_plugins = ["stateful.e2e"]

By default the fixtures start one :class:`~stateful.reference.stack.EmbeddedStack` per test session
and stop it at the end (no tmux process survives). Given ``--server-url``, ``--mock-llm-url`` and
``--runner-id`` together they use that external contract server instead (e.g. omnigent in mock-LLM
mode); the plugin checks that server, its runner and its mock LLM before the first test, and ends
the run with one line naming the URL that failed (:func:`preflight`). ``--profile`` is accepted for
compatibility with omnigent's suite and otherwise unused (loaded by the installed entry point,
:mod:`stateful.plugin`, the plugin leaves that option to the suite's conftest).

The helpers are :mod:`stateful.client`'s, re-exported: a suite imports them and the fixtures from one
module (``tests.e2e.conftest`` re-exports this one).
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from stateful.arguments import milliseconds
from stateful.client import *  # noqa: F403 - the §6 helpers, under the names suites import from here
from stateful.client import HARNESS, HEADERS, preflight, unique_name


# -- pytest plugin --------------------------------------------------------------------------------
_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--profile", {"default": "", "help": "omnigent model profile (accepted for compatibility; unused)"}),
    ("--server-url", {"default": None, "help": "an external contract server (with --mock-llm-url, --runner-id)"}),
    ("--mock-llm-url", {"default": None, "help": "the external server's mock LLM"}),
    ("--runner-id", {"default": None, "help": "the external server's runner id"}),
    ("--stack-latency", {"default": "0", "metavar": "MS",
                         "help": "milliseconds the embedded stack adds to every sessions-API response (a slow server)"}),
]


SUITE_OPTIONS = ("--profile",)
"""Options that a §6 suite's own conftest defines: loaded by the installed entry point
(:mod:`stateful.plugin`, before any conftest), the plugin leaves them to the suite, which would
otherwise fail to add them."""


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Registers the options unless another plugin or conftest already did (safe to load twice)."""
    from stateful.plugin import NAME as ENTRY_POINT

    group = parser.getgroup("stateful-e2e", "contract server under test")
    for name, kwargs in _OPTIONS:
        if name in SUITE_OPTIONS and pluginmanager.has_plugin(ENTRY_POINT):
            continue
        try:
            group.addoption(name, action="store", **kwargs)
        except ValueError:  # already added by someone else: theirs serves the same purpose
            pass


def external_target(config: pytest.Config) -> tuple[str, str, str] | None:
    """``(server_url, mock_llm_url, runner_id)`` when all three options are given, else None."""
    names = ("--server-url", "--mock-llm-url", "--runner-id")
    values = [config.getoption(n, default=None) for n in names]
    if all(values):
        return values[0].rstrip("/"), values[1].rstrip("/"), values[2]
    if any(values):
        missing = ", ".join(n for n, v in zip(names, values) if not v)
        raise pytest.UsageError(f"--server-url, --mock-llm-url and --runner-id go together (missing: {missing})")
    return None


def check_profile(config: pytest.Config) -> None:
    """An unknown ``--hypothesis-profile`` as a one-line usage error that lists the known ones.

    Hypothesis's own plugin loads the profile in its ``pytest_configure`` and fails there with an
    INTERNALERROR traceback; this runs first (see :func:`pytest_configure`). Profiles are known once
    registered: ``stateful/conftest.py`` registers those of ``hypothesis.ini`` when it is imported,
    which pytest does before configuring.
    """
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    name = config.getoption("--hypothesis-profile", default=None)
    if not name:
        return
    try:
        settings.get_profile(name)
    except InvalidArgument:
        registered = getattr(settings, "_profiles", {})  # no public listing; only the message uses it
        known = ", ".join(sorted(p for p in registered if "-with-" not in p)) or "(none listed)"
        raise pytest.UsageError(f"unknown --hypothesis-profile {name!r}; known: {known}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Usage errors before anything runs, each one line (``ERROR: ...``, exit 4), not a traceback."""
    check_profile(config)
    external_target(config)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Ends the run, with one line and before the session header, when the external target that the
    options name cannot be tested. A usage error (exit 4): nothing ran, and ``pytest.exit`` would
    print its message twice."""
    config = session.config
    stack_latency(config)  # a bad value is a usage error before anything runs
    external = external_target(config)
    if external is None or config.getoption("collectonly", default=False):
        return
    problem = preflight(*external)
    if problem is not None:
        raise pytest.UsageError(f"{problem} (nothing was tested)")


@pytest.fixture(scope="session")
def contract_target(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    """``(server_url, mock_llm_url, runner_id)``: the external server, or one EmbeddedStack."""
    external = external_target(request.config)
    if external is not None:
        yield external
        return
    from stateful.reference.stack import EmbeddedStack

    with EmbeddedStack(latency=stack_latency(request.config)) as stack:
        yield stack.server_url, stack.mock_llm_url, stack.runner_id


def stack_latency(config: pytest.Config) -> float:
    """``--stack-latency MS`` in seconds (a usage error unless a non-negative number)."""
    text = str(config.getoption("--stack-latency", default="0") or "0")
    try:
        return milliseconds(text)
    except argparse.ArgumentTypeError as why:
        message = str(why)
    raise pytest.UsageError(f"--stack-latency {message}")  # (outside the handler: one line, no chained report)


@pytest.fixture(scope="session")
def live_server(contract_target: tuple[str, str, str]) -> str:
    return contract_target[0]


@pytest.fixture(scope="session")
def mock_llm_server_url(contract_target: tuple[str, str, str]) -> str:
    return contract_target[1]


@pytest.fixture(scope="session")
def live_runner_id(contract_target: tuple[str, str, str]) -> str:
    return contract_target[2]


@pytest.fixture
def http_client(live_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server, headers=HEADERS, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="session")
def harness_name() -> str:
    return HARNESS


@pytest.fixture
def model_name() -> str:
    """A model name of this test alone: the key of its own mock-LLM queue."""
    return unique_name("mock-model")

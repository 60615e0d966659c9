"""Loads the seed-style helpers' pytest plugin (CONTRACT §6) for both `pytest stateful/` and
`pytest tests/`: its fixtures (live_server, http_client, live_runner_id, ...) and options (--profile,
--server-url, --mock-llm-url, --runner-id). pytest accepts `pytest_plugins` only in the top-level
conftest, so it lives here and not in stateful/ or tests/ (a bare `pytest` collects both).
Outside this project, load it with `-p stateful.e2e` (and `-p stateful.pytest_machine` for the machine's
fixtures, e.g. to replay a written repro).

It also makes SIGTERM (what `timeout` and CI runners send) interrupt a run the way Ctrl-C does, so
that fixture finalizers still end worker processes and terminals and remove temporary directories
(`stateful.workers`)."""

from __future__ import annotations

from typing import Any

import pytest

from stateful import workers

pytest_plugins = ["stateful.e2e"]

_PREVIOUS_HANDLERS = pytest.StashKey[dict[int, Any]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PREVIOUS_HANDLERS] = workers.interrupt_on_signals()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give back the handlers (pytest may run in-process, e.g. under pytester)."""
    previous: dict[int, Any] = config.stash.get(_PREVIOUS_HANDLERS, {})
    workers.restore_signals(previous)

"""Shared fixtures for the project's own tests (``pytest tests/``).

Terminal fixtures (registry, tools, leak checks) come first; fixtures for the HTTP stack go in their
own section below them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stateful import workers
from stateful.reference.registry import ResourceEvent, TerminalRegistry
from stateful.workers import processes
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import SOCKET_DIR_PREFIX
from stateful.reference.tools import ToolContext, call_tool
from polling import poll as _poll

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Terminal fixtures


def _terminal_pids(path: str) -> list[int]:
    """Live processes of the terminal(s) under ``path`` (a socket path or a directory).

    A tmux server names its socket on its command line; every process in a pane inherits
    ``TMUX=<socket>,<server pid>,<session>``. Zombies (already dead) have neither.
    """
    needle = os.fsencode(path)
    found = []
    for pid, cmdline, environ in processes():
        tmux = [v for v in environ.split(b"\0") if v.startswith(b"TMUX=")]
        if needle in cmdline or any(needle in v for v in tmux):
            found.append(pid)
    return found


def _pids_naming(path: str) -> list[int]:
    """Live processes whose command line or environment names ``path``: besides the terminals, the
    fault hunts' workers and their reapers (their ``TMPDIR`` is the temp root)."""
    needle = os.fsencode(path)
    return [pid for pid, cmdline, environ in processes() if needle in cmdline or needle in environ]


RUN_END_TIMEOUT = 20.0
"""Longest the leak guard waits for the processes of the run to end before it judges them leaked."""


def _wait_until_gone(path: str, timeout: float) -> None:
    """Bounded polling until no process names ``path`` (it returns quietly at the deadline: the leak
    guard's own assertions then report what is left)."""
    deadline = time.monotonic() + timeout
    while _pids_naming(path) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture(scope="session", autouse=True)
def terminal_leak_guard() -> Iterator[str]:
    """Every private tmux directory of this test run lives under one root; at the end of the run
    no process may name it and no socket directory may be left in it."""
    root = tempfile.mkdtemp(prefix="stateful-tests-")
    previous, tempfile.tempdir = tempfile.tempdir, root
    try:
        yield root
    finally:
        tempfile.tempdir = previous
        # After an interrupted run, reapers may still be destroying the terminals of the workers just
        # ended: the root goes once nothing names it any more (at once after a normal run).
        _wait_until_gone(root, RUN_END_TIMEOUT)
        leaked = _pids_naming(root)
        left = [d for d in os.listdir(root) if d.startswith(SOCKET_DIR_PREFIX)]
        shutil.rmtree(root, ignore_errors=True)
        assert not leaked, f"processes outlived the test run: {leaked}"
        # A worker ended mid-launch may leave the directory it had just made and not yet handed to
        # its reaper (nothing runs in it, and it went with the root): a leak only in a finished run.
        assert not left or workers.interrupted(), f"socket directories outlived the test run: {left}"


@pytest.fixture
def terminal_pids() -> Callable[[str], list[int]]:
    """``terminal_pids(path)``: live processes of the terminal(s) under a socket path or dir."""
    return _terminal_pids


@pytest.fixture
def eventually() -> Callable[..., Any]:
    """``eventually(predicate, timeout=10)``: bounded polling, the first truthy value."""
    return _poll


@pytest.fixture
def assert_no_terminal_left() -> Callable[[str], None]:
    """Check that a terminal (by socket path) left no process and no socket directory."""

    def check(socket_path: str) -> None:
        assert _terminal_pids(socket_path) == [], f"processes of {socket_path} are still alive"
        assert not os.path.exists(os.path.dirname(socket_path))

    return check


@pytest.fixture
def bash_spec(tmp_path: Path) -> TerminalSpec:
    """A fast, predictable bash (no rc files) in a private working directory."""
    return TerminalSpec("bash", "bash", args=("--norc", "--noprofile"), cwd=str(tmp_path))


@pytest.fixture
def terminal_events() -> list[ResourceEvent]:
    return []


@pytest.fixture
def terminal_registry(
    terminal_events: list[ResourceEvent], assert_no_terminal_left: Callable[[str], None]
) -> Iterator[TerminalRegistry]:
    """A registry recording its events; after the test it is shut down and must leave nothing."""
    registry = TerminalRegistry(on_event=terminal_events.append)
    try:
        yield registry
    finally:
        registry.shutdown()
        for event in list(terminal_events):
            assert_no_terminal_left(event.resource["tmux_socket"])


@pytest.fixture
def tool_context(terminal_registry: TerminalRegistry, bash_spec: TerminalSpec) -> ToolContext:
    return ToolContext(terminal_registry, "agent-session-1", {"bash": bash_spec})


@pytest.fixture
def call(tool_context: ToolContext) -> Callable[..., Any]:
    """``call(tool, arguments)``: run a tool in ``tool_context``; a dict is sent as JSON text, and
    the result is parsed from JSON (``raw=True`` gives the string)."""

    def run(
        name: str, arguments: Any = None, *, context: ToolContext | None = None, raw: bool = False
    ) -> Any:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        result = call_tool(name, text, context or tool_context)
        assert isinstance(result, str)
        return result if raw else json.loads(result)

    return run


# The HTTP stack fixtures (live_server, http_client, ...) come from the stateful.e2e plugin, which the
# top-level conftest.py loads.


# ---------------------------------------------------------------------------------------------
# Tiers: `./dev tests` runs `-m "not proof"`, `./dev proofs` runs `-m proof` (README, pyproject.toml)

@pytest.fixture(scope="session")
def hunter(request: pytest.FixtureRequest, terminal_leak_guard: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The fault hunts (tests/test_faults.py) that the selected tests need, all started at once: a
    pool of workers that the hunts' tests wait on. Defined here, not in test_faults.py, so that
    :func:`hunts_start_first` can start them before the run's first test, whichever file it is in."""
    from test_faults import hunting  # the hunts' machinery lives with their tests

    with hunting(request.session.items, terminal_leak_guard, tmp_path_factory.mktemp("fault-hunts")) as running:
        request.config.stash[HUNT_WALLS] = running.walls
        yield running


HUNT_WALLS = pytest.StashKey[dict[str, float]]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The fault hunts' wall-clock seconds, longest first (``PLANTS`` starts the longest first)."""
    walls = config.stash.get(HUNT_WALLS, None)
    if walls:
        shown = ", ".join(f"{name} {wall:.0f}" for name, wall in sorted(walls.items(), key=lambda kv: -kv[1]))
        terminalreporter.write_line(f"fault hunts, wall seconds, longest first: {shown}")


@pytest.fixture(scope="session", autouse=True)
def hunts_start_first(request: pytest.FixtureRequest) -> None:
    """In a run that holds fault hunts, they start with the run: the proofs that come before the
    hunts' tests (campaigns, the wheel, ...) then run while the hunts do, not after them."""
    if any("hunter" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("hunter")


PROOF_FIXTURES = frozenset({"hunter", "ci_run"})
"""Fixtures that start a proof's long work: the fault hunts, all at once (test_faults.py), the machine on
ci programs (test_conversation.py). A test that uses one is a proof."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs a proof's long work but is not marked ``proof`` would make the fast tier wait for
    it (the fault hunts: some 15 minutes): refused at collection, naming it."""
    unmarked = [item.nodeid for item in items if PROOF_FIXTURES & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("proof") is None]
    if unmarked:
        raise pytest.UsageError(f"tests that use {sorted(PROOF_FIXTURES)} must be marked @pytest.mark.proof: {unmarked}")

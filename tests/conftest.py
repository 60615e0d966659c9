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

from stateful.reference.registry import ResourceEvent, TerminalRegistry
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import SOCKET_DIR_PREFIX
from stateful.reference.tools import ToolContext, call_tool

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
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        tmux = [v for v in environ.split(b"\0") if v.startswith(b"TMUX=")]
        if needle in cmdline or any(needle in v for v in tmux):
            found.append(int(name))
    return found


def _poll(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02) -> T:
    """The first truthy value of ``predicate()`` within ``timeout`` s, else AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        time.sleep(interval)


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
        leaked = _terminal_pids(root)
        if leaked:
            time.sleep(0.5)  # only when something is wrong: give a dying server a moment
            leaked = _terminal_pids(root)
        left = [d for d in os.listdir(root) if d.startswith(SOCKET_DIR_PREFIX)]
        shutil.rmtree(root, ignore_errors=True)
        assert not leaked, f"terminal processes outlived the test run: {leaked}"
        assert not left, f"socket directories outlived the test run: {left}"


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

"""The pytest plugin an installed package announces (entry point ``pytest11``, name ``stateful``).

pytest loads it in every run of an environment where the package is installed, a server team's own
suite included, so by itself it brings only the §6 fixtures and the target options of
:mod:`stateful.e2e`, and it stays out of such a suite's way: a fixture the suite's conftest defines
(``live_server``, ``mock_llm_server_url``, ``live_runner_id``, ...) overrides the plugin's, and
``--profile``, the option §6 says such a suite defines itself, is left to it (pytest refuses an
option added twice). ``-p no:stateful`` turns the plugin off.

The machine's own options, fixtures and Hypothesis profiles (:mod:`stateful.pytest_machine`, which is
``stateful/conftest.py``) come only in a
run that collects the package, ``pytest --pyargs stateful``: pytest would import that conftest only
while collecting, after parsing the command line, too late for ``--target``; loading it in every run
would change the Hypothesis settings of the suite's own tests. So the plugin registers it before the
command line is parsed, under the name pytest gives that conftest, which pytest then finds registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from stateful import e2e

NAME = "stateful"
"""The entry point's name (pyproject.toml), under which pytest registers this module."""
E2E = "stateful.e2e"
"""The name ``-p stateful.e2e`` and ``pytest_plugins = ["stateful.e2e"]`` register e2e by: registered
under it, a later explicit load is a no-op instead of a second copy of every hook."""
MACHINE = "stateful.pytest_machine"
"""The machine's pytest plugin; ``-p stateful.pytest_machine`` registers it by this name (``-p
stateful.conftest``, the same hooks as that folder's conftest, by that one)."""
CONFTEST = str(Path(__file__).resolve().parent / "conftest.py")
"""The name pytest gives ``stateful/conftest.py`` when it collects the package (its path)."""


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Register e2e (its options are added at once: pytest replays this hook for it) unless an
    explicit ``-p stateful.e2e``, which pytest handles before entry points, already did."""
    if not pluginmanager.has_plugin(E2E):
        pluginmanager.register(e2e, E2E)


def collects_package(args: Sequence[str], pyargs: bool) -> bool:
    """Whether the command line names the ``stateful`` package (or a module of it) to collect."""
    return pyargs and any(arg.split("::")[0].split(".")[0] == NAME for arg in args)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """In ``pytest --pyargs stateful``: the machine's plugin, registered under the name of the package's
    conftest (which holds the same hooks), so that pytest finds it registered and loads no second copy."""
    namespace = early_config.known_args_namespace
    manager = early_config.pluginmanager
    if not collects_package(namespace.file_or_dir or [], namespace.pyargs):
        return
    if any(manager.has_plugin(name) for name in (MACHINE, "stateful.conftest", CONFTEST)):
        return
    from stateful import pytest_machine

    manager.register(pytest_machine, CONFTEST)

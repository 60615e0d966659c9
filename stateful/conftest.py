"""`pytest stateful/`: the machine's pytest plugin (:mod:`stateful.pytest_machine`), as this folder's
conftest. pytest imports it before parsing the command line (``stateful/`` is named there), so its
options (``--target``, ...) and the Hypothesis profiles are in place when the hypothesis plugin loads
``--hypothesis-profile``."""

from stateful.pytest_machine import *  # noqa: F403 - its hooks and fixtures are this conftest's

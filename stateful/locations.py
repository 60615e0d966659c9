"""Where the tool reads its own data and writes what it keeps by default, whether it runs from a
source checkout (``./dev``, an editable install) or is installed from a wheel.

A checkout keeps the example database and the repros inside the project, where ``pytest stateful/``
collects them; an installed package lives in site-packages, which is no place to write, so there
they go to the directory the command runs in (as Hypothesis's own ``.hypothesis/`` does).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""The ``stateful`` package's directory: its data files (``hypothesis.ini``, ``targets/bashrc``)."""

HYPOTHESIS_INI = PACKAGE / "hypothesis.ini"
"""The Hypothesis profiles (dev, ci, nightly, repro, campaign), shipped inside the package."""


def checkout_root() -> Path | None:
    """The repository root when the package is imported from a source checkout, else None."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "dev").is_file() else None


def work_root() -> Path:
    """What relative default paths are relative to: the checkout, or else the current directory."""
    return checkout_root() or Path.cwd()


def default_repro_dir() -> Path:
    """Where shrunk failures are written unless told: ``stateful/repros/`` in a checkout (which
    ``pytest stateful/`` collects), ``./repros`` when installed."""
    return PACKAGE / "repros" if checkout_root() else Path.cwd() / "repros"

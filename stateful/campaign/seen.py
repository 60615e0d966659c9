"""The failures claimed so far in one campaign, shared by its workers through a directory.

A worker that meets a violation of a clause nobody claimed yet creates ``<dir>/<key>.json`` with
``O_CREAT | O_EXCL``: the one that succeeds owns the failure (shrinks it and writes its repro); every
other worker, now or later, ignores that clause. A directory of small files needs no lock and no
server, and survives a worker that is killed half-way (its claim still names the failure).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["avoid", "avoided", "claim", "claimed", "claims", "info", "release"]

SUFFIX = ".json"
AVOID_SUFFIX = ".avoid"


def _path(directory: Path, key: str) -> Path:
    # keys are clause ids ("send.text-literal") or "target:StepTimeout": safe as file names once '/' is out
    return directory / (key.replace("/", "_") + SUFFIX)


def claim(directory: Path, key: str, info: dict[str, Any]) -> bool:
    """True if this call claimed ``key`` (it was not claimed before); ``info`` is stored with it."""
    try:
        fd = os.open(_path(directory, key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"key": key, **info}, handle)
    return True


def release(directory: Path, key: str) -> None:
    """Give a claim back (its worker could not shrink and report it)."""
    try:
        _path(directory, key).unlink()
    except FileNotFoundError:
        pass


def _names(directory: Path, suffix: str) -> frozenset[str]:
    """The names of the files ending in ``suffix``, without it (cheap enough to read between two programs)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return frozenset()
    return frozenset(name[: -len(suffix)] for name in names if name.endswith(suffix))


def claimed(directory: Path) -> frozenset[str]:
    """The keys claimed so far."""
    return _names(directory, SUFFIX)


def info(directory: Path, key: str) -> dict[str, Any]:
    """What the claim of ``key`` stores (``{"key": key}`` if it cannot be read)."""
    try:
        return dict(json.loads(_path(directory, key).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {"key": key}


def claims(directory: Path) -> dict[str, dict[str, Any]]:
    """Every claim with what its worker stored (a claim being written is read as far as it got)."""
    return {key: info(directory, key) for key in sorted(claimed(directory))}


def avoid(directory: Path, triggers: Iterable[str]) -> None:
    """Note that the campaign knows a violation these triggers provoke (:mod:`stateful.steering`):
    every worker's next search stops drawing them."""
    for trigger in triggers:
        (directory / (trigger + AVOID_SUFFIX)).touch()


def avoided(directory: Path) -> frozenset[str]:
    """The triggers noted so far."""
    return _names(directory, AVOID_SUFFIX)

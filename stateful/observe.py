"""``--observe DIR``: Hypothesis's test-case observations of a run, as JSON lines in ``DIR``.

Hypothesis describes every test case it runs (status, the program's representation, the ``event()``
labels as features, timings) to its observability callbacks; the Tyche viewer reads them as JSON
lines, one observation a line, test cases in ``*_testcases.jsonl`` and the run's other messages in
``*_info.jsonl`` (the layout of Hypothesis's own ``.hypothesis/observed/``). Hypothesis's switch for
that, the ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY`` variable, writes only into its own storage
directory and only if set before it is imported; here a callback writes into the directory asked for,
for as long as the run lasts, each process into its own files (a campaign's workers are processes).

Line coverage is not collected: it would be coverage of the tester's own code (the machine's rules),
which says nothing about the server, and on Python 3.11 tracing slows every step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis.internal import observability
from hypothesis.strategies._internal.utils import to_jsonable

NO_STEP = "run_state_machine(\n    data=data(...),\n)"
"""How Hypothesis shows a stateful test case that made no machine (its first step prints ``state = ...``)."""
TESTCASES = "testcases"
INFO = "info"


def observation_files(directory: Path, label: str) -> dict[str, Path]:
    """The two files one process writes: ``<label>_testcases.jsonl`` and ``<label>_info.jsonl``."""
    return {kind: directory / f"{label}_{kind}.jsonl" for kind in (TESTCASES, INFO)}


class ObservationWriter:
    """An observability callback that appends each observation as one JSON line, serialised as
    Hypothesis serialises its own (``to_jsonable``), so that the lines are what Tyche reads.

    Registered on the thread that runs Hypothesis (pytest's, a campaign worker's main thread), which
    is where Hypothesis delivers a test case's observation; the targets' side threads make none."""

    def __init__(self, directory: Path, label: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.files = observation_files(directory, label)

    def __call__(self, observation: Any) -> None:
        if observation.type == "test_case" and observation.status == "passed" and NO_STEP in observation.representation:
            return  # a campaign's gate ended the search before this program began (EndSearch): no program
        kind = TESTCASES if observation.type == "test_case" else INFO
        line = json.dumps(to_jsonable(observation, avoid_realization=False)) + "\n"
        with self.files[kind].open("a", encoding="utf-8") as out:
            out.write(line)


@contextmanager
def observing(directory: Path | None, label: str | None = None) -> Iterator[ObservationWriter | None]:
    """Write the observations of what runs inside to ``directory`` (None: observe nothing).
    ``label`` names the files (default: ``process-<pid>``)."""
    if directory is None:
        yield None
        return
    writer = ObservationWriter(directory, label or f"process-{os.getpid()}")
    collect_coverage = observability.OBSERVABILITY_COLLECT_COVERAGE
    observability.OBSERVABILITY_COLLECT_COVERAGE = False  # read by Hypothesis at each test case
    observability.add_observability_callback(writer)
    try:
        yield writer
    finally:
        observability.remove_observability_callback(writer)
        observability.OBSERVABILITY_COLLECT_COVERAGE = collect_coverage

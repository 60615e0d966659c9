"""Bounded polling for the tests: the first truthy value of a predicate within a deadline, else an
AssertionError that says what was awaited (never a sleep used as synchronisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", *,
         interval: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not met within {timeout} s (last value: {value!r})")
        time.sleep(interval)

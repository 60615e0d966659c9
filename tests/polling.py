"""Bounded polling for the tests: the first truthy value of a predicate within a deadline, else an
AssertionError that says what was awaited (never a sleep used as synchronisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from stateful.waiting import Wait

T = TypeVar("T")


def poll(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", *,
         interval: float = 0.02) -> T:
    wait = Wait(timeout)  # "not met" rests on two looks at least, the last begun after the timeout
    while True:
        began = wait.look()
        value = predicate()
        wait.looked(began)
        if value:
            return value
        if wait.over(began):
            raise AssertionError(f"{what}: not met within {timeout} s ({wait.looks} looks, last value: {value!r})")
        time.sleep(interval)

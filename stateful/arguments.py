"""Argument types of the command lines (``python -m stateful serve|campaign|...``): each turns a
text into a value or raises ``argparse.ArgumentTypeError`` with one plain line naming the text, which
argparse prints as the usage error (exit 2)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

__all__ = ["byte_size", "conversation_budget", "duration", "milliseconds", "port", "positive_int", "seconds"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_BYTE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 2**20}


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535; 0 = any free port)")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _number(text: str, holds: Callable[[float], bool], what: str) -> float:
    """``text`` as a float for which ``holds``; else the one-line error naming it as not ``what``."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")  # holds for no test below
    if not holds(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def seconds(text: str) -> float:
    """A positive number of seconds."""
    return _number(text, lambda value: value > 0, "a positive number of seconds")


def milliseconds(text: str) -> float:
    """A non-negative number of milliseconds, as seconds."""
    return _number(text, lambda value: value >= 0, "a non-negative number of milliseconds") / 1000


def duration(text: str) -> float:
    """``90``, ``40s``, ``20m``, ``1.5h`` as seconds (positive)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 20m, 1h)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def byte_size(text: str) -> int:
    """``4000000``, ``200kB``, ``4MB``, ``3.5MiB`` as a positive number of bytes (k and M are 1000s)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = _BYTE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None or int(float(match.group(1)) * unit) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (e.g. 4000000, 200kB, 4MB)")
    return int(float(match.group(1)) * unit)


MIN_CONVERSATION_BUDGET = 100_000
"""A session's first turns take some 20 kB of conversation: a smaller budget would end every program."""


def conversation_budget(text: str) -> int:
    """A :func:`byte_size` of at least ``MIN_CONVERSATION_BUDGET`` (``--conversation-budget``)."""
    value = byte_size(text)
    if value < MIN_CONVERSATION_BUDGET:
        raise argparse.ArgumentTypeError(f"{text!r} is too small a conversation budget "
                                         f"(at least {MIN_CONVERSATION_BUDGET // 1000}kB)")
    return value

"""Argument types of the command lines (``python -m stateful serve|campaign|...``): each turns a
text into a value or raises ``argparse.ArgumentTypeError`` with one plain line naming the text, which
argparse prints as the usage error (exit 2)."""

from __future__ import annotations

import argparse
import re

__all__ = ["duration", "milliseconds", "port", "positive_int", "seconds"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


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


def seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def milliseconds(text: str) -> float:
    """A non-negative number of milliseconds, as seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative number of milliseconds")
    return value / 1000


def duration(text: str) -> float:
    """``90``, ``40s``, ``20m``, ``1.5h`` as seconds (positive)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 20m, 1h)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]

"""``--deviations FILE``: a server's known deviations from the contract, as TOML.

```toml
[[deviation]]
clause = "list.baseline"          # a clause id (python -m stateful clauses)
why = "tui:main is listed ..."    # required: what the server does and why it is known
server = "omnigent"               # optional
version = "0.19.1"                # optional
cause = "semicolon-edge"          # optional: the finding's cause, where the campaign named one
repro = "repros/test_x_0123456789.py"  # optional: a repro that fails while the deviation lasts
```

A known deviation is counted and reported as known; it never fails a campaign. It goes *stale* once
it is fixed: its clause was exercised and held in a campaign, or its ``repro`` (relative to the file's
directory) replays FIXED at the campaign's start; a stale entry fails the campaign until it is removed
(``--allow-stale``: it does not). A file that is not valid TOML, an entry without ``clause`` or ``why``,
an unknown key, an unknown clause id or a repro that is not a file is a usage error that names the
line. :func:`dump_deviations` writes such a file (``--write-deviations``: a first run's baseline).
"""

from __future__ import annotations

import re
import tomllib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stateful.clauses import CLAUSES

__all__ = ["Deviation", "DeviationsError", "dump_deviations", "load_deviations", "unknown_clause"]

KEYS = frozenset({"clause", "why", "server", "version", "cause", "repro"})
OPTIONAL = ("server", "version", "cause", "repro")


class DeviationsError(ValueError):
    """A deviations file that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Deviation:
    """One ``[[deviation]]`` entry: a violation of ``clause`` that the server is known to commit, so a
    campaign counts it as known instead of failing, until it goes stale."""

    clause: str
    why: str
    server: str = ""
    version: str = ""
    cause: str = ""
    repro: str = ""
    """As written in the file (relative to its directory, or absolute); :attr:`repro_path` resolves it."""
    source: str = field(default="", compare=False)
    """``FILE:LINE`` of its ``[[deviation]]`` header: the entry a stale deviation's message says to remove."""
    base: Path | None = field(default=None, compare=False, repr=False)

    @property
    def repro_path(self) -> Path | None:
        if not self.repro:
            return None
        path = Path(self.repro)
        return path if path.is_absolute() or self.base is None else self.base / path


def unknown_clause(clause_id: str) -> str | None:
    """None for a known clause id, else why it is not one."""
    if clause_id in CLAUSES:
        return None
    near = [c for c in CLAUSES if c.split(".")[0] == clause_id.split(".")[0]]
    hint = f"; known in {clause_id.split('.')[0]}: {', '.join(near)}" if near else ""
    return f"unknown clause id {clause_id!r} (python -m stateful clauses lists them{hint})"


def _entry_lines(text: str) -> list[int]:
    """The line number of each ``[[deviation]]`` header, in order."""
    return [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*deviation\s*\]\]", line)]


def _key_line(text: str, start: int, key: str) -> int:
    """The line of ``key = ...`` in the entry whose header is on line ``start`` (else ``start``)."""
    lines = text.splitlines()
    for n in range(start, len(lines)):  # lines[n] is line n + 1: the lines after the header
        if re.match(r"\s*\[", lines[n]):
            break
        if re.match(rf"\s*{re.escape(key)}\s*=", lines[n]):
            return n + 1
    return start


def load_deviations(path: Path) -> list[Deviation]:
    """The deviations ``path`` lists (see the module docstring), or DeviationsError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DeviationsError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_in_message(str(exc))
        raise DeviationsError(f"{path}:{line}: not valid TOML: {str(exc).split(' (at ')[0]}") from None
    extra = sorted(set(data) - {"deviation"})
    if extra:
        raise DeviationsError(f"{path}:{_top_line(text, extra[0])}: unknown table or key {extra[0]!r} "
                              "(the file holds [[deviation]] entries)")
    entries = data.get("deviation", [])
    if not isinstance(entries, list):
        raise DeviationsError(f"{path}:1: 'deviation' must be an array of tables ([[deviation]])")
    headers = _entry_lines(text)
    found: list[Deviation] = []
    for index, entry in enumerate(entries):
        start = headers[index] if index < len(headers) else 1
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            raise DeviationsError(f"{path}:{_key_line(text, start, unknown[0])}: unknown key {unknown[0]!r} "
                                  f"(known: {', '.join(sorted(KEYS))})")
        for key in ("clause", "why"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                where = _key_line(text, start, key)
                raise DeviationsError(f"{path}:{where}: deviation needs a non-empty string {key!r}")
        for key in OPTIONAL:
            if key in entry and not isinstance(entry[key], str):
                raise DeviationsError(f"{path}:{_key_line(text, start, key)}: {key!r} must be a string")
        problem = unknown_clause(entry["clause"])
        if problem:
            raise DeviationsError(f"{path}:{_key_line(text, start, 'clause')}: {problem}")
        deviation = Deviation(entry["clause"], entry["why"].strip(), *(entry.get(k, "") for k in OPTIONAL),
                              source=f"{path}:{start}", base=path.parent)
        repro = deviation.repro_path
        if repro is not None and not repro.is_file():
            raise DeviationsError(f"{path}:{_key_line(text, start, 'repro')}: repro {deviation.repro!r} is not a file "
                                  f"(looked for {repro})")
        found.append(deviation)
    return found


def dump_deviations(deviations: Iterable[Deviation], header: str = "") -> str:
    """``deviations`` as a file :func:`load_deviations` reads back."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for d in deviations:
        lines += ["", "[[deviation]]", f"clause = {_toml_string(d.clause)}", f"why = {_toml_string(d.why)}"]
        lines += [f"{key} = {_toml_string(getattr(d, key))}" for key in OPTIONAL if getattr(d, key)]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for DEL (TOML wants it escaped) and
    ``ensure_ascii`` (its surrogate pairs are no TOML escape: non-ASCII is written as it is)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _line_in_message(message: str) -> int:
    match = re.search(r"at line (\d+)", message)
    return int(match.group(1)) if match else 1


def _top_line(text: str, key: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*(\[+\s*)?{re.escape(key)}\b", line):
            return n
    return 1

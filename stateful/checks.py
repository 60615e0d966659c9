"""Checks on what terminals show, and on the second views of state: pure functions, no I/O.

Markers are designed so that the proof is the command's *output*, never the echoed command line:
``echo -E MK_$((6*7))_<uid>`` prints ``MK_42_<uid>``, which the typed line does not contain; the
payload check prints ``H_<md5 of the payload>_<uid>``, computed locally. Every uid is unique, so a
marker found in the screen of a pair it was not typed into proves a leak between pairs.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import re
import secrets
import shlex
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from stateful.model import PANE_COLS

__all__ = [
    "new_uid",
    "shell_marker",
    "python_marker",
    "shell_payload",
    "python_payload",
    "tokens_in",
    "cut_tokens",
    "has_token",
    "prompt_follows",
    "last_row",
    "view_problem",
]

_RUN = secrets.token_hex(2)
_COUNTER = itertools.count(1)
_ID = r"u[0-9a-f]{6}z[0-9a-f]{4}"
"""The shape of every id :func:`new_uid` makes."""
_TOKEN = re.compile(rf"(?<![A-Za-z0-9])(?:(?:MK|RP)_42|H_[0-9a-f]{{32}})_({_ID}|u[0-9a-z]+(?![0-9a-z]))")
"""A token the machine's commands print. An id of :func:`new_uid`'s fixed shape counts whatever
follows it: tmux 3.3a draws a character after a zero-width joiner one cell narrower than readline
counts, and readline's redraw of the line then overwrites the output row's end, so that ci10's row
read ``H_<md5>_u000237z37fe5sum | cut…`` (the id, then the rest of the typed command)."""


MARKER_ID = re.compile(rf"(?<![0-9a-z]){_ID}(?![0-9a-z])")
"""A marker id as :func:`new_uid` makes them (every command the machine types ends in one)."""


def new_uid() -> str:
    """A marker id unique in this process (and, by the run tag, across processes). Always as long
    (up to 16 M ids): a command that holds it is as long in every run, so a cut drawn at an index
    of it (``strategies.split_command``) falls at the same place when Hypothesis replays the program
    (an id one digit longer moved a cut and made a failure look flaky)."""
    return f"u{next(_COUNTER):06x}z{_RUN}"


def shell_marker(uid: str, *, semicolon: bool = False) -> tuple[str, str]:
    """(command, expected token) for a shell. ``set +H`` first: no history expansion of later ``!``."""
    return f"set +H; echo -E MK_$((6*7))_{uid}" + (";" if semicolon else ""), f"MK_42_{uid}"


def python_marker(uid: str) -> tuple[str, str]:
    return f"print('RP_'+str(6*7)+'_{uid}')", f"RP_42_{uid}"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


SHELL_PAYLOAD_PREFIX = "echo H_$(printf %s "
PYTHON_PAYLOAD_PREFIX = "print('H_'+__import__('hashlib').md5("


def shell_payload(uid: str, payload: str) -> tuple[str, str]:
    """(command, token): the shell prints the md5 of the payload exactly as it was typed."""
    return (f"{SHELL_PAYLOAD_PREFIX}{shlex.quote(payload)} | md5sum | cut -c1-32)_{uid}",
            f"H_{_md5(payload)}_{uid}")


def python_payload(uid: str, payload: str) -> tuple[str, str]:
    return (f"{PYTHON_PAYLOAD_PREFIX}{payload!r}.encode()).hexdigest()+'_{uid}')",
            f"H_{_md5(payload)}_{uid}")


def payload_end(mode: str, payload: str) -> int:
    """Index just after the payload's literal in the command of :func:`shell_payload` (mode
    "shell") or :func:`python_payload`."""
    if mode == "shell":
        return len(SHELL_PAYLOAD_PREFIX) + len(shlex.quote(payload))
    return len(PYTHON_PAYLOAD_PREFIX) + len(repr(payload))


def tokens_in(screen: str) -> list[tuple[str, str]]:
    """Every (token, uid) a screen shows."""
    return [(m.group(0), m.group(1)) for m in _TOKEN.finditer(screen)]


def cut_tokens(screen: str, uid: str) -> list[str]:
    """The tokens a screen shows whose id is ``uid`` cut short, each alone on a row narrower than the
    pane (a row of the full width may go on in the next one; every marker prints at a row's start):
    the command of ``uid`` ran, but its text lost its last characters, so its whole token will never
    show."""
    found = []
    for match in _TOKEN.finditer(screen):  # one pass, as tokens_in (a read holds thousands of rows)
        cut = match.group(1)
        if cut == uid or not uid.startswith(cut):
            continue
        start, end = screen.rfind("\n", 0, match.start()) + 1, screen.find("\n", match.end())
        row = screen[start:end if end >= 0 else len(screen)]
        if len(row) < PANE_COLS and row.strip() == match.group(0):
            found.append(match.group(0))
    return found


def has_token(screen: str, token: str) -> bool:
    return any(t == token for t, _ in tokens_in(screen))


def _rows(screen: str) -> list[str]:
    return screen.split("\n")


def prompt_follows(screen: str, token: str) -> bool:
    """Whether a non-blank row (the program's next prompt) follows the last row showing ``token``."""
    rows = _rows(screen)
    at = max((i for i, row in enumerate(rows) if token in row), default=None)
    return at is not None and any(row.strip() for row in rows[at + 1:])


def text_follows(screen: str, needle: str) -> bool:
    """Whether anything but blanks follows the last ``needle`` on the screen, read with the row breaks
    taken out: a row of exactly the pane's width may have wrapped (inside ``needle`` too) or just
    ended there, and either way what comes after it (the next prompt) counts."""
    text = "".join(_rows(screen))
    at = text.rfind(needle)
    return at >= 0 and bool(text[at + len(needle):].strip())


def last_row(screen: str) -> str:
    """The last non-blank row, right-stripped ('' for a blank screen)."""
    for row in reversed(_rows(screen)):
        if row.strip():
            return row.rstrip()
    return ""


def _interrupt_row(row: str) -> bool:
    return "^C" in row or row.strip() == "KeyboardInterrupt"


def interrupts(screen: str) -> int:
    """Rows that show an interrupt (bash echoes ``^C``, Python prints ``KeyboardInterrupt``)."""
    return sum(1 for row in _rows(screen) if _interrupt_row(row))


def prompt_after_interrupt(screen: str, before: int) -> bool:
    """A new interrupt row (more than ``before``) shows, and a prompt row follows the last one."""
    rows = _rows(screen)
    marks = [i for i, row in enumerate(rows) if _interrupt_row(row)]
    if len(marks) <= before:
        return False
    return any(row.strip() and not _interrupt_row(row) for row in rows[marks[-1] + 1:])


def rows_after(screen: str, needle: str) -> list[str]:
    """Rows after the last row that equals ``needle`` once right-stripped (None if absent)."""
    rows = [r.rstrip() for r in _rows(screen)]
    at = max((i for i, r in enumerate(rows) if r == needle), default=None)
    return [] if at is None else rows[at + 1:]


def view_problem(view: Sequence[Mapping[str, Any]], running: Iterable[tuple[str, str]],
                 ids: Mapping[tuple[str, str], str], baseline: Iterable[tuple[str, str]] = (),
                 fits_baseline: Callable[[str], bool] = lambda rid: False) -> str | None:
    """Whether ``/resources/terminals`` disagrees with list's running pairs (None if it agrees).

    Entries name their pair by ``terminal``/``session`` where they carry them, else by resource id (an
    id that several live pairs share, past a known ``events.unique-ids``, names each of them once).
    Every entry must be a running pair (by its created event's id where it carries one), or one of
    the server's own terminals (the ``baseline``, which it may or may not show, named or with an id
    that ``fits_baseline``); nothing else may stay, e.g. a terminal that was closed.
    """
    skip = set(baseline)
    want = set(running)
    got: set[tuple[str, str]] = set()
    by_id: dict[str, list[tuple[str, str]]] = {}
    for key, rid in ids.items():  # several pairs where a server shares one id (a known events.unique-ids)
        by_id.setdefault(rid, []).append(key)
    for entry in view:
        if not isinstance(entry, Mapping):
            return f"a /resources/terminals entry is not an object: {entry!r}"
        rid = entry.get("id", entry.get("resource_id"))
        if isinstance(entry.get("terminal"), str) and isinstance(entry.get("session"), str):
            key = (entry["terminal"], entry["session"])
        elif rid in by_id:  # an entry named by an id that pairs share is any one of them not shown yet
            key = next((k for k in by_id[rid] if k not in got), by_id[rid][0])
        elif isinstance(rid, str) and fits_baseline(rid):
            continue  # the server's own terminal, shown by id
        else:
            return f"/resources/terminals shows {entry!r}, which is no running terminal of this session"
        if key in skip:
            continue
        if key not in want:
            return (f"/resources/terminals shows {key[0]}:{key[1]!r}, which is not running in this session "
                    f"(list's running pairs are {sorted(want)})")
        if key in got:
            return f"/resources/terminals shows {key} twice"
        got.add(key)
        if key in ids and isinstance(rid, str) and rid != ids[key]:
            return f"/resources/terminals gives {key} id {rid!r}, its created event said {ids[key]!r}"
    if got != want:
        return f"/resources/terminals shows {sorted(got)}, list's running pairs are {sorted(want)}"
    return None


# -- what a screen says about a text that was typed (for failure messages) ------------------------

WRAP_COLUMNS = 80
"""Pane width: tmux wraps a longer line into rows of exactly this many columns."""
CONTINUATION_PROMPTS = ("> ", "... ")
"""What a shell (PS2) and Python print before the second and later lines of a multi-line command."""


def logical_lines(screen: str, width: int = WRAP_COLUMNS) -> list[str]:
    """The screen's lines with tmux's wrapping undone (a row of exactly ``width`` columns goes on in
    the next row)."""
    lines: list[str] = []
    joining = False
    for row in _rows(screen):
        if joining:
            lines[-1] += row
        else:
            lines.append(row)
        joining = len(row) == width
    return lines


def shown_as_typed(screen: str, text: str, width: int = WRAP_COLUMNS) -> int | None:
    """The row where the one-line ``text`` ends, if the screen shows it exactly as typed (its last
    copy), else None.

    A read's rows come without their trailing spaces (tmux's capture-pane trims them), so a line
    that wrapped where a space fell in the last column comes back one column short, and
    :func:`logical_lines` cannot tell it from a line that ended there. Padded back to the pane's
    width and laid end to end, the rows are what the terminal shows: a text found there arrived as
    written, however it wrapped and whatever stands before it on its first row (a prompt, or the
    kernel's echo of the same text typed ahead of a shell that then echoed it again)."""
    flat, ends = "", []
    for row in _rows(screen):
        flat += row.ljust(width)
        ends.append(len(flat))
    at = flat.rfind(text)
    if at < 0 or not text:
        return None
    return next(n for n, end in enumerate(ends) if end >= at + len(text))


def typed_echo(screen: str, typed: str, uid: str | None = None, *, by_uid_only: bool = False) -> tuple[str, bool] | None:
    """How the screen echoes the command ``typed``, prompts stripped, and whether any non-blank row
    follows it (the program went on: the command ran). None if no line of the screen resembles it.

    A one-line printable ASCII command shown exactly as typed (:func:`shown_as_typed`) is its own
    echo. Otherwise the echo is found from its end: the last line that shows ``uid`` (every command
    the machine types ends in its marker id) or else, unless ``by_uid_only``, the last one that
    shows the command's start (which may be an earlier command's line: good enough to explain a
    time-out, never to conclude anything before one)."""
    if "\n" not in typed and typed.isascii() and typed.isprintable() and (not by_uid_only or (uid and uid in typed)):
        row = shown_as_typed(screen, typed)
        if row is not None:
            return typed, any(line.strip() for line in _rows(screen)[row + 1:])
    lines = logical_lines(screen)
    first = typed.split("\n")[0]
    end = None
    for i in range(len(lines) - 1, -1, -1):
        if (uid and uid in lines[i]) or (not by_uid_only and first[:6].strip() and first[:6] in lines[i]):
            end = i
            break
    if end is None:
        return None
    start = max(0, end - typed.count("\n"))
    shown = [lines[start]] + [_strip_continuation(line) for line in lines[start + 1:end + 1]]
    head = shown[0]
    # The command's first line, where the row shows it whole (its last copy: the kernel may have
    # echoed a text typed ahead before the program echoed it again), or else the first run of
    # characters that the row and the command share, marks where the command starts (what stands
    # before it is the prompt).
    if first and first in head:
        shown[0] = head[head.rfind(first):]
    else:
        block = difflib.SequenceMatcher(None, head, first, autojunk=False).get_matching_blocks()[0]
        if block.size == 0:
            return None
        shown[0] = head[max(0, block.a - block.b):]
    ran = any(line.strip() for line in lines[end + 1:])
    return "\n".join(shown).rstrip(), ran


def _strip_continuation(line: str) -> str:
    for prompt in CONTINUATION_PROMPTS:
        if line.startswith(prompt):
            return line[len(prompt):]
    return line


def _quoted(text: str, limit: int = 40) -> str:
    shown = text if len(text) <= limit else text[: limit - 3] + "..."
    return "`" + shown.replace("\n", "\\n") + "`"


def _place(start: int, end: int, chunks: Sequence[str]) -> str:
    """Where characters ``start:end`` of the typed text were, in terms of the sends that typed it."""
    offset = 0
    for number, chunk in enumerate(chunks, 1):
        if offset <= start < offset + len(chunk) or (start == end == offset + len(chunk)):
            which = f"send {number}'s text {_quoted(chunk)}" if len(chunks) > 1 else _quoted(chunk)
            if end == offset + len(chunk):
                return f"at the end of {which}"
            if start == offset:
                return f"at the start of {which}"
            return f"at character {start - offset} of {which}"
        offset += len(chunk)
    return f"at character {start}"


def text_difference(typed: str, echoed: str, chunks: Sequence[str] = ()) -> str | None:
    """A plain description of how ``echoed`` differs from ``typed`` (None if it does not), naming
    the send whose text lost or changed characters, e.g. "the `;` at the end of send 1's text
    `set +H;` was dropped"."""
    if echoed == typed:
        return None
    chunks = list(chunks) or [typed]
    if typed.startswith(echoed):
        return (f"only the first {len(echoed)} of the {len(typed)} characters typed arrived; the rest "
                f"({_quoted(typed[len(echoed):])}) is missing")
    changes = [op for op in difflib.SequenceMatcher(None, typed, echoed, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    parts = []
    for tag, i1, i2, j1, j2 in changes[:2]:
        where = _place(i1, i2, chunks)
        if tag == "delete":
            parts.append(f"the {_quoted(typed[i1:i2])} {where} was dropped")
        elif tag == "insert":
            parts.append(f"{_quoted(echoed[j1:j2])} was added {where}")
        else:
            parts.append(f"{_quoted(typed[i1:i2])} {where} became {_quoted(echoed[j1:j2])}")
    extra = len(changes) - 2
    more = f" (and {extra} more difference{'s' if extra > 1 else ''})" if extra > 0 else ""
    return "; ".join(parts) + more


def last_line_typed(typed: str, chunks: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The last line of a command typed over several lines, and the parts of the sends' texts that
    typed it: what a screen shows of a command whose earlier lines were read by another program (a
    heredoc's body, printed back between the lines) is its last line, the one with its marker id."""
    last = typed.rsplit("\n", 1)[-1]
    start, end, at, parts = len(typed) - len(last), len(typed), 0, []
    for chunk in chunks:
        lo, hi = max(start, at), min(end, at + len(chunk))
        if hi > lo:
            parts.append(chunk[lo - at:hi - at])
        at += len(chunk)
    return last, tuple(parts)


def _without_format_characters(text: str) -> str:
    """``text`` without its invisible format characters (Unicode category Cf: zero-width joiners,
    direction marks): a terminal may keep them or not, so an echo that lacks them says nothing of the
    text that arrived (the program's digest of it does)."""
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def diagnose_typed(screen: str, typed: str, chunks: Sequence[str], uid: str | None) -> tuple[str, str]:
    """(clause, explanation) for a command whose output never showed: the text did not arrive as
    written, or it arrived but was never submitted, or it ran and its output did not show.

    The command's own output (a token of its marker id) on the screen says it arrived and ran: what
    never showed is the prompt after it. That is never taken for an echo (the output row carries the
    marker id too, and read as an echo it would look like a text that lost its start)."""
    if uid and any(u == uid for _, u in tokens_in(screen)):
        return "read.output-shows", (f"the command {_quoted(typed)} ran and its output showed, but no row "
                                     "(the program's next prompt) ever followed it")
    cut = cut_tokens(screen, uid) if uid else []
    if cut:  # its output, short of the id's end: what was typed lost its last characters (the echo may be gone)
        return "send.text-literal", (f"the text did not arrive as written: the command {_quoted(typed)} ran but "
                                     f"printed {cut[-1]}, its marker without its last {len(uid) - len(cut[-1].rsplit('_', 1)[1])} "
                                     "character(s): the end of the text was lost")
    found = typed_echo(screen, typed, uid)
    if found is not None and uid and any(other != uid for other in MARKER_ID.findall(found[0])):
        found = None  # the line found by the command's start is an earlier command's (its own marker id)
    if found is None and "\n" in typed:
        last, parts = last_line_typed(typed, chunks)
        clause, why = diagnose_typed(screen, last, parts, uid)
        if clause != "read.output-shows":
            return clause, f"{why} (in the last line of the {typed.count(chr(10)) + 1} lines typed)"
    if found is None:
        return "read.output-shows", f"the screen does not show the command {_quoted(typed)} that was typed"
    echoed, ran = found
    difference = text_difference(typed, echoed, chunks)
    if difference is not None and _without_format_characters(typed) == _without_format_characters(echoed):
        difference = None  # a capture need not show them (tmux keeps no zero-width joiner in a pane)
    if difference is not None:
        return "send.text-literal", f"the text did not arrive as written: {difference}"
    if not ran:
        return "send.keys", (f"the command {_quoted(typed)} shows as typed on the last line but never ran: "
                             "the key that submits it (Enter) was not pressed")
    return "read.output-shows", f"the command {_quoted(typed)} arrived and ran, but its output never showed"


def near_names(registered: str, asked: str) -> bool:
    """Whether a server that found ``registered`` when asked for ``asked`` matched names loosely:
    as a prefix (either way, as tmux targets match), ignoring case, or ignoring padding."""
    if registered == asked:
        return False
    return (registered.startswith(asked) or asked.startswith(registered)
            or registered.casefold() == asked.casefold() or registered.strip() == asked.strip())

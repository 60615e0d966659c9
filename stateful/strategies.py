"""Generation: the Hypothesis strategies that reach the contract's edges (no I/O, no checks).

Everything here is drawn *before* a rule runs and never depends on what the system answered, so a
failing program replays and shrinks the same way every time. Values that only exist at run time
(unique marker ids, the command that carries a payload) are combined with the drawn values by small
pure functions here (:func:`split_command`, :func:`encode`).

The edges: session names with spaces, ``:``, ``.``, ``;``, ``#{..}``, ``#(..)``, a leading ``-``,
unicode, case variants, long names and names whose resource ids collide; texts with a leading ``-``
(a chunk that starts with one), a trailing ``;`` or ``\\;``, key names, quotes, newlines, unicode and
over 16 KiB; keys absent, ``""`` or several; scrollback values valid and invalid; extra argument keys
of any name; malformed argument strings; undeclared terminals.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from stateful import steering

__all__ = [
    "NAMED_KEYS",
    "Decoration",
    "SendPlan",
    "Cut",
    "BadCall",
    "session_names",
    "undeclared_terminals",
    "ID_SIBLINGS",
    "id_sibling",
    "decorations",
    "send_plans",
    "payloads",
    "long_payloads",
    "key_presses",
    "scrollbacks",
    "bad_calls",
    "encode",
    "extra_keys",
    "split_command",
    "text_kinds",
    "TOOL_KEYS",
    "CONTRACT_VOCABULARY",
    "KEY_NAME_TEXTS",
    "TMUX_SYNTAX_TEXTS",
    "UNICODE_TEXTS",
]

class OneLine:
    """Rule arguments print on one line each (Hypothesis's pretty printer would break a dataclass
    over several), so that every step of a reported program is one line of Python."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


NAMED_KEYS = frozenset({"terminal", "session", "text", "keys", "scrollback", "cwd", "sandbox"})
"""Argument names the contract gives a meaning (to one tool or another)."""
TOOL_KEYS: dict[str, frozenset[str]] = {
    "sys_terminal_launch": frozenset({"terminal", "session", "cwd", "sandbox"}),
    "sys_terminal_send": frozenset({"terminal", "session", "text", "keys"}),
    "sys_terminal_read": frozenset({"terminal", "session", "scrollback"}),
    "sys_terminal_list": frozenset(),
    "sys_terminal_close": frozenset({"terminal", "session"}),
}
"""The argument keys each tool names (§1): an extra key is one its tool does not name, so another
tool's argument (``text`` on a read, ``terminal`` on a list) is an extra key there."""
CONTRACT_VOCABULARY = ("terminal", "session", "cwd", "sandbox", "text", "keys", "scrollback", "tmux_socket",
                       "has_os_env", "status", "screen", "scrollback_lines", "command", "running", "error")
"""Every field name §1 uses in its arguments, outputs and errors: the extra keys a server that
confuses an argument with a field of its own answers (or with another tool's argument) breaks on."""

NAME_POOL = (
    "main", "a b", "a:b", "a.b", "a;b", "a_b", "a", "ab", "-x", "-", "--help", "#{session_name}",
    "#(echo pwned)", "é", "日本語", "😀", "Main", "MAIN", " ", "x" * 200, "a\nb", "1", "%1", "$0",
    "bash", "a'b", 'a"b', "a\\b",
)
"""Hand-picked edges; several map to the same resource id ("a b", "a:b", "a;b", "a_b"; "é", " ")."""


@st.composite
def session_names(draw: st.DrawFn) -> str:
    """A valid (non-empty) session key: mostly from the pool, so that pairs collide and recur."""
    kind = draw(st.integers(0, 9))
    if kind < 7:
        return draw(st.sampled_from(NAME_POOL))
    if kind < 9:
        return draw(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=16))
    return draw(st.sampled_from("ab-é;:")) * draw(st.integers(60, 1500))


ID_SIBLINGS = ("padded", "underscored", "punctuated", "swapped")
"""Ways to write another session key with the same resource id (CONTRACT §2.4: ``safe`` maps every
run of characters outside ``[A-Za-z0-9_.-]`` to one ``_`` and strips ``_`` from both ends)."""


def id_sibling(session: str, how: str) -> str:
    """A key other than ``session`` whose resource id is the same (a pure function of both).

    ``padded`` adds spaces at both ends, ``underscored`` adds ``_`` at both ends, ``punctuated`` adds a
    ``!`` at the end; ``swapped`` writes every unsafe character as ``:`` (or as ``;`` if it was ``:``),
    and pads with ``#`` when there is none to swap.
    """
    if how == "padded":
        return f" {session} "
    if how == "underscored":
        return f"_{session}_"
    if how == "punctuated":
        return f"{session}!"
    swapped = "".join(
        c if c.isascii() and (c.isalnum() or c in "_.-") else (";" if c == ":" else ":") for c in session)
    return swapped if swapped != session else f"#{session}#"


def undeclared_terminals() -> st.SearchStrategy[str]:
    return st.sampled_from(["tui", "zsh", "Bash", "BASH", "bash ", "python", "SH", "b"])


# --- argument encoding and extra keys -----------------------------------------------------------

_EXTRA_NAMES = ("Terminal", "SESSION", "session ", "text2", "Keys", "scroll_back", "cmd", "command",
                "args", "env", "id", "__proto__", "constructor", "", " ", "é", "timeout", "wait",
                "literal", "-l", "#{pane_id}", "enter")
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=8))
_json_values = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=5)


@dataclass(frozen=True)
class Decoration(OneLine):
    """How one rule's arguments are written: extra keys (ignored by contract) and JSON layout."""

    extra: tuple[tuple[str, Any], ...] = ()
    ensure_ascii: bool = True
    spaced: bool = True
    shuffle: int = 0

    def __repr__(self) -> str:
        if self == Decoration():
            return "Decoration()"
        return (f"Decoration(extra={self.extra!r}, ensure_ascii={self.ensure_ascii}, "
                f"spaced={self.spaced}, shuffle={self.shuffle})")


@st.composite
def decorations(draw: st.DrawFn) -> Decoration:
    extra_names = st.one_of(st.sampled_from(_EXTRA_NAMES), st.sampled_from(CONTRACT_VOCABULARY), st.text(max_size=8))
    extra = draw(st.lists(st.tuples(extra_names, _json_values), max_size=3, unique_by=lambda kv: kv[0]))
    if steering.avoided("output-keys"):
        extra = [(k, v) for k, v in extra if k not in steering.OUTPUT_FIELDS]
    return Decoration(tuple(extra), draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 5)))


def extra_keys(deco: Decoration, tool: str | None = None) -> tuple[tuple[str, Any], ...]:
    """The decoration's keys that are extra for ``tool`` (not one it names; for no tool, not an
    argument of any): a key the tool names is never added, since it would change what the call does."""
    named = TOOL_KEYS.get(tool, NAMED_KEYS) if tool is not None else NAMED_KEYS
    return tuple((k, v) for k, v in deco.extra if k not in named)


def encode(args: dict[str, Any], deco: Decoration = Decoration(), tool: str | None = None) -> str:
    """The JSON text of ``args`` plus the decoration's extra keys for ``tool``, in a drawn key order and layout."""
    merged = dict(args)
    for k, v in extra_keys(deco, tool):
        merged.setdefault(k, v)
    items = list(merged.items())
    if deco.shuffle:
        random.Random(deco.shuffle).shuffle(items)
    separators = (", ", ": ") if deco.spaced else (",", ":")
    return json.dumps(dict(items), ensure_ascii=deco.ensure_ascii, separators=separators)


# --- typing a command in several sends ----------------------------------------------------------


@dataclass(frozen=True)
class Cut(OneLine):
    """Where to split the typed command: an interesting index (``special``) or any index."""

    special: bool
    index: int


FINISHES = ("default", "Enter", "C-m", "newline", "separate", "separate-empty", "separate-null")
"""How the command is submitted: keys absent (Enter), ``"Enter"``, ``"C-m"``, a newline at the end
of the text, or a separate send that only presses Enter (keys "Enter", text "" or null + no keys)."""


@dataclass(frozen=True)
class SendPlan(OneLine):
    cuts: tuple[Cut, ...] = ()
    finish: str = "default"
    no_edges: str = ""
    """Characters no cut may leave at a chunk's edge: ``;`` at its end, ``-`` at its start (a
    campaign steering away from a known deviation, :mod:`stateful.steering`; drawn, so printed)."""

    def __repr__(self) -> str:
        edges = f", no_edges={self.no_edges!r}" if self.no_edges else ""
        return f"SendPlan(cuts={self.cuts!r}, finish={self.finish!r}{edges})"


@st.composite
def send_plans(draw: st.DrawFn) -> SendPlan:
    cuts = draw(st.lists(st.builds(Cut, st.booleans(), st.integers(0, 10**4)), max_size=3))
    return SendPlan(tuple(cuts), draw(st.sampled_from(FINISHES)), "".join(sorted(steering.avoided_edges())))


_KEY_NAMES = ("Enter", "C-c", "C-m", "Escape", "Space", "BSpace", "Tab", "Up", "F1", "NoSuchKey")


def _interesting(cmd: str) -> list[int]:
    """Split points that make edge-case chunks: before '-', after ';', around key names and newlines."""
    points = set()
    for i, ch in enumerate(cmd):
        if ch == "-":
            points.add(i)
        if ch == ";":
            points.add(i + 1)
        if ch == "\n":
            points.update((i, i + 1))
    for name in _KEY_NAMES + ("#{", "#("):
        start = cmd.find(name)
        while start != -1:
            points.update((start, start + len(name)))
            start = cmd.find(name, start + 1)
    return sorted(p for p in points if 0 < p < len(cmd))


def split_command(cmd: str, plan: SendPlan) -> list[dict[str, Any]]:
    """The sends (arguments without terminal/session) that type ``cmd`` and submit it once."""
    special = _interesting(cmd)
    points = set()
    for cut in plan.cuts:
        if cut.special and special:
            points.add(special[cut.index % len(special)])
        elif len(cmd) > 1:
            points.add(1 + cut.index % (len(cmd) - 1))
    # a cut that would leave an avoided character at a chunk's edge is not made
    points = {p for p in points if not (";" in plan.no_edges and cmd[p - 1] == ";")
              and not ("-" in plan.no_edges and cmd[p] == "-")}
    bounds = [0, *sorted(points), len(cmd)]
    chunks = [cmd[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    sends: list[dict[str, Any]] = [{"text": c, "keys": ""} for c in chunks[:-1]]
    last = chunks[-1]
    finish = plan.finish
    if finish == "default":
        sends.append({"text": last})
    elif finish in ("Enter", "C-m"):
        sends.append({"text": last, "keys": finish})
    elif finish == "newline":
        sends.append({"text": last + "\n", "keys": ""})
    else:
        sends.append({"text": last, "keys": ""})
        sends.append({"keys": "Enter"} if finish == "separate" else
                     {"text": ""} if finish == "separate-empty" else {"text": None})
    return sends


# --- payloads (texts that must arrive as written) ------------------------------------------------

KEY_NAME_TEXTS = ("Enter", "C-c", "C-m", "Escape", "Space", "BSpace")
"""Texts that spell a tmux key name (a server that passes text to ``send-keys`` without ``-l`` presses them)."""
TMUX_SYNTAX_TEXTS = ("\\;", ";", "--", "-l", "-", "-x")
"""Texts tmux's own command parser gives a meaning: a command separator, the end of options, the literal flag."""
UNICODE_TEXTS = {
    "wide": "日本語ｗｉｄｅ",
    "combining": "e\u0301a\u0308",
    "zero-width": "a\u200bb\u200dc\ufeff",
    "emoji-modifier": "👍🏽👩\u200d💻",
    "right-to-left": "\u200fשלום\u200e",
}
"""Characters whose width on screen is not one cell (two, none, or joined to the one before) and a
right-to-left mark: what terminal tools that count cells or bytes get wrong."""
_SPECIAL_PIECES = (*KEY_NAME_TEXTS, *TMUX_SYNTAX_TEXTS, ";;", " ; ", "#{session_name}", "#{pane_id}", "#(echo hi)",
                   "##", "'", '"', "\\", "\\\\", "$HOME", "$(echo x)", "`echo x`", "\n", "é", "😀", "~", "!", "!!",
                   "%s", "%%", "*", "{a,b}", "  ", "\u00a0", "\\n", "'\\''", *UNICODE_TEXTS.values())
_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Co", "Cn"))
"""No TAB or control characters: readline interprets them (completion, editing), which is the
program's behaviour, not the server's."""


def payloads() -> st.SearchStrategy[str]:
    """Short texts (may hold newlines) built from edge-case pieces and arbitrary printable text; one
    in three is a key name or a piece of tmux syntax alone (the whole text is ``Enter``, ``;``, ``-l``),
    one in three mostly characters that are not one cell wide (so that each kind comes up often)."""
    piece = st.one_of(st.sampled_from(_SPECIAL_PIECES), st.text(_CHARS, min_size=1, max_size=12))
    unicode_piece = st.one_of(st.sampled_from(tuple(UNICODE_TEXTS.values())), st.text(_CHARS, min_size=1, max_size=4))
    return st.one_of(st.lists(piece, min_size=1, max_size=8).map("".join),
                     st.sampled_from(KEY_NAME_TEXTS + TMUX_SYNTAX_TEXTS),
                     st.lists(unicode_piece, min_size=1, max_size=4).map("".join))


def text_kinds(text: str) -> tuple[str, ...]:
    """The classes of edge a typed text holds (event labels: that each one is drawn is measured)."""
    kinds = [f"unicode {name}" for name, chars in UNICODE_TEXTS.items() if chars in text]
    if text in KEY_NAME_TEXTS:
        kinds.append("a key name alone")
    elif any(name in text for name in KEY_NAME_TEXTS):
        kinds.append("spells a key name")
    if text in TMUX_SYNTAX_TEXTS:
        kinds.append(f"tmux syntax alone ({text})")
    return tuple(kinds)


@dataclass(frozen=True)
class LongText(OneLine):
    """A text over 16 KiB, kept short in printed programs: ``piece`` repeated to ``size`` chars."""

    piece: str
    size: int

    @property
    def text(self) -> str:
        return (self.piece * (self.size // len(self.piece) + 1))[: self.size]


def _without_avoided_edges(piece: str) -> str:
    edges = steering.avoided_edges()
    return "".join(c for c in piece if c not in edges) or "x" if edges else piece


def long_payloads() -> st.SearchStrategy[LongText]:
    """One line (no newline: a line typed while the program is between reads is cut at 4095 bytes)."""
    piece = st.one_of(st.sampled_from(("0123456789abcdef", "-;\\;'\"#{x} ", "é日😀-", "Enter C-c ")),
                      st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp")),
                              min_size=1, max_size=20))
    # a server may split a long text anywhere: an avoided edge character may not occur in it at all
    piece = piece.map(_without_avoided_edges)
    return st.builds(LongText, piece, st.integers(16 * 1024 + 1, 20 * 1024))


# --- keys, scrollback, bad arguments -------------------------------------------------------------

SAFE_KEYS = ("", "Enter", "C-u", "  Enter  ", "Enter Enter", "C-u Enter", "C-c")
"""Key presses that leave a shell or REPL at an empty prompt line. ``C-c`` comes alone: a key
pressed while the program handles the interrupt is eaten by bash (and the caller waits for the
new prompt before typing anything)."""
UNKNOWN_KEYS = ("NoSuchKey", "Enterr", "F99")


def key_presses() -> st.SearchStrategy[str | None]:
    """``None`` = keys absent (Enter). Unknown names may be typed literally: the caller clears the line."""
    return st.one_of(st.none(), st.sampled_from(SAFE_KEYS), st.sampled_from(UNKNOWN_KEYS))


VALID_SCROLLBACK = (0, 1, 5, 100, 2000, 10_000, 2**31, 10**12)
INVALID_SCROLLBACK: tuple[Any, ...] = (-1, -100, 1.5, 2.0, "10", "", True, False, None, [], {}, -0.5)


def scrollbacks() -> st.SearchStrategy[Any]:
    """A scrollback argument; ``...`` stands for "absent". Each kind of value is one branch, so that
    every kind (booleans, floats, strings, null, containers, negatives) comes up often."""
    return st.one_of(st.just(...), st.sampled_from(VALID_SCROLLBACK), st.integers(0, 300),
                     st.booleans().map(_unless_bool), st.sampled_from((1.5, 2.0, -0.5)), st.sampled_from(("10", "")),
                     st.none(), st.sampled_from(([], {})), st.integers(max_value=-1))


def _unless_bool(value: Any) -> Any:
    """``value``, but null (another wrong scrollback) for a boolean once a campaign avoids them."""
    return None if isinstance(value, bool) and steering.avoided("bool-scrollback") else value


def bad_scrollbacks() -> st.SearchStrategy[Any]:
    """A scrollback that is not a non-negative integer."""
    return st.one_of(st.booleans(), st.sampled_from(INVALID_SCROLLBACK)).map(_unless_bool)


def marker_semicolons() -> st.SearchStrategy[bool]:
    """Whether a marker command ends in ``;`` (never once a campaign avoids a ``;`` at an edge)."""
    return st.booleans().map(lambda b: b and not steering.avoided("semicolon-edge"))


def launch_copies() -> st.SearchStrategy[int]:
    """How many launches of one pair one reply carries (1 once a campaign avoids several)."""
    return st.sampled_from((1, 1, 1, 2, 3, 4)).map(lambda n: 1 if steering.avoided("launch-copies") else n)


MALFORMED = ("", " ", "{", "}", "[", "nul", "{'terminal': 'bash'}", '{"terminal": "bash",}', "}{",
             '{"terminal"}', "\n", '{"a":1}}', "{{}}")
NON_OBJECT = ("[]", "null", "0", "1.5", '"bash"', "true", "[{}]", '[{"terminal": "bash"}]')
BAD_NAMES: tuple[Any, ...] = (None, 0, 1, True, False, [], {}, "", ["bash"], {"name": "bash"}, 1.5)
BAD_TEXT: tuple[Any, ...] = (0, 1, True, False, [], {}, ["a"], 1.5)
BAD_KEYS: tuple[Any, ...] = (None, 0, True, [], ["Enter"], {}, 1.5)


@dataclass(frozen=True)
class BadCall(OneLine):
    """An argument error: a raw (malformed / non-object) string, or one field made wrong.

    ``key`` is None for raw strings, ``"-terminal"``/``"-session"`` for a missing key, else the
    name of the field given ``value``.
    """

    tool: str
    raw: str | None = None
    key: str | None = None
    value: Any = None
    also: tuple[tuple[str, Any], ...] = ()
    """A second wrong field (to check which error a tool reports first)."""


@st.composite
def bad_calls(draw: st.DrawFn) -> BadCall:
    tool = draw(st.sampled_from(("sys_terminal_launch", "sys_terminal_send", "sys_terminal_read",
                                 "sys_terminal_list", "sys_terminal_close")))
    kinds = ["raw", "terminal", "session"] if tool != "sys_terminal_list" else ["raw"]
    if tool == "sys_terminal_send":
        kinds += ["text", "keys"]
    if tool == "sys_terminal_read":
        kinds += ["scrollback"]
    if tool == "sys_terminal_launch":
        kinds += ["cwd"]
    kind = draw(st.sampled_from(kinds))
    if kind == "raw":
        return BadCall(tool, raw=draw(st.sampled_from(MALFORMED + NON_OBJECT)))
    if kind in ("terminal", "session"):
        if draw(st.booleans()):
            return BadCall(tool, key="-" + kind)
        bad = BadCall(tool, key=kind, value=draw(st.sampled_from(BAD_NAMES)))
        if kind == "terminal" and tool != "sys_terminal_list" and draw(st.booleans()):
            bad = BadCall(tool, key=kind, value=bad.value, also=(("session", draw(st.sampled_from(BAD_NAMES))),))
        return bad
    if kind == "text":
        bad = BadCall(tool, key="text", value=draw(st.sampled_from(BAD_TEXT)))
        if draw(st.booleans()):
            return BadCall(tool, key="text", value=bad.value, also=(("keys", draw(st.sampled_from(BAD_KEYS))),))
        return bad
    if kind == "keys":
        return BadCall(tool, key="keys", value=draw(st.sampled_from(BAD_KEYS)))
    if kind == "scrollback":
        return BadCall(tool, key="scrollback", value=draw(st.one_of(st.sampled_from(INVALID_SCROLLBACK).map(_unless_bool),
                                                                       st.integers(max_value=-1))))
    return BadCall(tool, key="cwd", value=draw(st.sampled_from(("/tmp", "/", ".."))))


def bad_arguments(bad: BadCall, terminal: str, session: str) -> str:
    """The raw argument text of a :class:`BadCall` aimed at ``terminal:session``."""
    if bad.raw is not None:
        return bad.raw
    args: dict[str, Any] = {} if bad.tool == "sys_terminal_list" else {"terminal": terminal, "session": session}
    if bad.tool == "sys_terminal_send":
        args["text"] = ""
        args["keys"] = ""
    assert bad.key is not None
    if bad.key.startswith("-"):
        args.pop(bad.key[1:], None)
    else:
        args[bad.key] = bad.value
    for name, value in bad.also:
        args[name] = value
    return json.dumps(args)


def concurrency() -> st.SearchStrategy[Sequence[str]]:
    """Operations for the distinct pairs of one concurrent step."""
    return st.lists(st.sampled_from(("read", "list", "close", "launch", "send-nothing")), min_size=2, max_size=4)

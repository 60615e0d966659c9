"""The pure model of the terminal-tools contract (CONTRACT.md §1, §2.4): what a call must return.

No I/O happens here. Given the model of one agent session and one call (tool name + the raw argument
text the model sent), :func:`judge` decides whether an observed output is allowed and returns the
model of the session after it. It is strict wherever the contract says "must" and tolerant exactly
where it says "may":

* an empty or unparsable argument string may give the malformed-JSON error or whatever ``{}`` gives;
* a key name that tmux does not know may give an error or ``sent``;
* a pair whose process was told to exit (``EXITING``) may still be alive, dead but listed (``running``
  true or false), or gone; ``send`` may say ``sent`` or the no-longer-running error;
* when a tool-specific check and the not-found check both apply, the contract fixes no order, so
  either error is accepted (only the common errors have a fixed order).

Several calls issued in one model reply run concurrently: :func:`judge_step` accepts the outputs if
SOME sequential order of the calls explains all of them.

Resource events (§2.4) are reconciled by :func:`reconcile_events` against the instances that the
model knows were launched and ended, again without I/O.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, NoReturn

from stateful import causes, steering
from stateful.clauses import ContractViolation, fail

__all__ = [
    "ContractViolation",
    "Call",
    "Life",
    "PairState",
    "Instance",
    "SessionModel",
    "TOLERABLE",
    "first_list",
    "Judgement",
    "judge",
    "judge_step",
    "EventView",
    "Assignment",
    "Ledger",
    "reconcile_events",
    "resource_base_id",
    "PANE_ROWS",
    "PANE_COLS",
    "TOOLS",
    "UNEXPLAINED_ORDER",
]

TOOLS = (
    "sys_terminal_launch",
    "sys_terminal_send",
    "sys_terminal_read",
    "sys_terminal_list",
    "sys_terminal_close",
)
UNEXPLAINED_ORDER = "no sequential order of the"
"""How a judgement of concurrent calls that no order explains begins: a race, which a replay of the same
program may or may not meet again."""
PANE_ROWS = 24
"""Visible rows of a pane: CONTRACT §1 read, "80x24 by default"."""
PANE_COLS = 80

ERR_NOT_OBJECT = {"error": "arguments must be a JSON object"}
ERR_MALFORMED = {"error": "malformed JSON arguments"}
ERR_TERMINAL = {"error": "requires a non-empty 'terminal' string"}
ERR_SESSION = {"error": "requires a non-empty 'session' string"}
ERR_TEXT = {"error": "'text' must be a string if provided"}
ERR_KEYS = {"error": "'keys' must be a string if provided"}
ERR_SCROLLBACK = {"error": "'scrollback' must be a non-negative integer"}
SENT = {"status": "sent"}
_NOT_JSON = object()
"""What an unparsable JSON text stands for (JSON has no value that is this object)."""

KNOWN_KEYS = frozenset({"Enter", "C-c", "C-u", "C-m", "Escape", "Space", "BSpace", "Tab", "Up", "Down"})
"""Key names the model knows tmux accepts; any other name may be rejected or typed (contract "may")."""

NAMED_KEYS: dict[str, set[str]] = {
    "sys_terminal_launch": {"terminal", "session", "cwd", "sandbox"},
    "sys_terminal_send": {"terminal", "session", "text", "keys"},
    "sys_terminal_read": {"terminal", "session", "scrollback"},
    "sys_terminal_list": set(),
    "sys_terminal_close": {"terminal", "session"},
}
"""The argument keys each tool names (§1); any other key must be ignored."""
LAUNCH_KEYS = frozenset({"terminal", "session", "tmux_socket", "has_os_env", "status"})
READ_KEYS = frozenset({"terminal", "screen", "scrollback_lines"})
LIST_KEYS = frozenset({"terminal", "session", "command", "running", "has_os_env", "tmux_socket"})
CLOSE_KEYS = frozenset({"terminal", "session", "status"})


def err_not_found(terminal: str, session: str) -> dict[str, str]:
    return {"error": f"terminal '{terminal}:{session}' not found or not running"}


def err_gone(terminal: str, session: str) -> dict[str, str]:
    return {"error": f"Terminal {terminal}:{session} is no longer running (tmux server exited)"}


def err_unknown_terminal(terminal: str, declared: Sequence[str]) -> list[dict[str, str]]:
    """The unknown-terminal error. The contract shows the name in quotes; a name holding a quote or
    backslash makes ``'{name}'`` and ``{name!r}`` differ, and both readings are accepted."""
    listing = repr(sorted(declared))
    variants = {f"unknown terminal '{terminal}'; declared: {listing}",
                f"unknown terminal {terminal!r}; declared: {listing}"}
    return [{"error": v} for v in sorted(variants)]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe(value: str) -> str:
    return _UNSAFE.sub("_", value).strip("_") or "resource"


def resource_base_id(terminal: str, session: str) -> str:
    """CONTRACT §2.4 before disambiguation: ``terminal_<safe(name)>_<safe(key)>``."""
    return f"terminal_{_safe(terminal)}_{_safe(session)}"


def resource_id_fits(resource_id: str, terminal: str, session: str) -> bool:
    """Whether an id is the pair's base id or a disambiguated one (``<base>_<n>``, n >= 2)."""
    base = resource_base_id(terminal, session)
    if resource_id == base:
        return True
    m = re.fullmatch(re.escape(base) + r"_(\d+)", resource_id)
    return bool(m) and int(m.group(1)) >= 2


@dataclass(frozen=True)
class Call:
    """One tool call as the model issues it: the tool's name and the raw ``arguments`` text."""

    tool: str
    arguments: str

    def __repr__(self) -> str:
        args = self.arguments if len(self.arguments) <= 120 else self.arguments[:100] + "...<%d chars>" % len(self.arguments)
        return f"{self.tool.removeprefix('sys_terminal_')}({args})"


class Life(Enum):
    ALIVE = "alive"
    """The process is certainly alive (launched, never told to exit)."""
    EXITING = "exiting"
    """Told to exit: may still be alive, may be dead; the server may or may not have noticed."""
    DEAD = "dead"
    """Known dead (a tool said so), possibly still registered (listed with running false)."""


@dataclass(frozen=True)
class PairState:
    terminal: str
    session: str
    socket: str
    instance: int
    life: Life
    order: tuple[int, ...]
    """Acceptable sort keys for list's launch order (a relaunch may keep or take a new position)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.terminal, self.session)


@dataclass(frozen=True)
class Instance:
    """One launched process of a pair (a relaunch is a new instance): the unit of resource events."""

    number: int
    terminal: str
    session: str


@dataclass(frozen=True)
class SessionModel:
    """What the contract lets a client know about one agent session's terminals."""

    declared: tuple[str, ...]
    baseline: tuple[tuple[str, str], ...] = ()
    """Pairs the first list showed (server-made); listed first, never addressable unless declared."""
    pairs: tuple[PairState, ...] = ()
    instances: tuple[Instance, ...] = ()
    ended: frozenset[int] = frozenset()
    """Instances that certainly ended (closed, or exited and then seen gone or relaunched)."""
    commands: tuple[tuple[str, str], ...] = ()
    """``command`` that list showed first for each terminal name (must stay the same)."""
    next_order: int = 0
    sockets: frozenset[str] = frozenset()
    """Every ``tmux_socket`` this session's launches reported: a list row on one of them is this
    session's own (a pair it closed that stays listed is ``list.registered``); a declared row on
    none of them is another session's terminal (``scope.session``)."""
    tolerated: frozenset[str] = frozenset()
    """Clauses whose violations the run knows (a campaign's claimed and allowed ones) and that the
    judge notes instead of raising, where it can keep the model exact past them
    (:data:`TOLERABLE`): the caller decides whether each noted one is known (``clauses.deviate``)."""

    def pair(self, terminal: str, session: str) -> PairState | None:
        for p in self.pairs:
            if p.key == (terminal, session):
                return p
        return None

    def maybe_ended(self) -> frozenset[int]:
        return frozenset(p.instance for p in self.pairs if p.life is not Life.ALIVE)

    def alive(self) -> tuple[PairState, ...]:
        return tuple(p for p in self.pairs if p.life is Life.ALIVE)

    def _without(self, key: tuple[str, str], *, ended: bool) -> SessionModel:
        gone = [p for p in self.pairs if p.key == key]
        return replace(
            self,
            pairs=tuple(p for p in self.pairs if p.key != key),
            ended=self.ended | frozenset(p.instance for p in gone) if ended else self.ended,
        )

    def _with_pair(self, pair: PairState) -> SessionModel:
        pairs = list(self.pairs)
        for i, p in enumerate(pairs):
            if p.key == pair.key:
                pairs[i] = pair
                return replace(self, pairs=tuple(pairs))
        return replace(self, pairs=(*pairs, pair))

    def _new_instance(self, terminal: str, session: str) -> tuple[SessionModel, int]:
        number = len(self.instances)
        return replace(self, instances=(*self.instances, Instance(number, terminal, session))), number


@dataclass(frozen=True)
class Judgement:
    model: SessionModel
    label: str
    """For ``hypothesis.event``: the tool and the branch of the contract the output took."""
    value: Any
    """The parsed output."""
    clause: str = ""
    """The clause the output was held to (``python -m stateful clauses``): what the run exercised."""
    noted: tuple[tuple[str, str], ...] = ()
    """Violations the judge went past (``SessionModel.tolerated``): ``(clause, why)`` each."""


TOLERABLE = frozenset({"list.registered", "scope.session", "list.unique", "list.running", "launch.socket-kept",
                       "read.rows-exact", "events.unique-ids"})
"""Clauses the judge can go past: a list row of another session's terminal (``scope.session``: a
declared terminal on a tmux server none of this session's launches reported, the first list's
included) or of a pair this session closed (``list.registered``), or a pair's second row on one
server (``list.unique``), is noted and left out, never typed into or closed, and the rest of the
list is checked as usual; a row's ``running`` that contradicts the pair's life (``list.running``) and
an ``already_running`` with another socket (``launch.socket-kept``) are noted and the model keeps
what the tools said before; a created event whose id is already a live terminal's is noted and taken as the new terminal's (a
later deleted event with that id may then be either's)."""


HELD_WITH: dict[str, tuple[str, ...]] = {
    "launch.one-launched": ("launch.result",),
    "launch.already-running": ("launch.result", "launch.socket-kept"),
    "launch.relaunch": ("launch.result",),
    "list.registered": ("list.result", "list.unique", "list.baseline", "list.fields", "list.running", "list.order"),
}
"""The clauses a judgement of the key's clause held on its way there (:func:`judge` checks them first):
a campaign's per-clause verdict counts them as exercised too."""


def _short(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 20] + f"...<{len(text)} chars>"


def pair_name(terminal: str, session: str) -> str:
    """How every message prints a pair: ``bash:'main'``."""
    return f"{terminal}:{session!r}"


def _fail(clause_id: str, call: Call, output: str, why: str, model: SessionModel | None = None) -> NoReturn:
    """Raise the violation of ``clause_id`` for ``call``: one plain first line (the call, what came
    back, what the contract expected), then the model."""
    details = [f"  call:   {call!r}", f"  output: {_short(output)}"]
    if model is not None:
        details.append(f"  model:  {describe(model)}")
    fail(clause_id, f"{call!r} -> {_short(output, 160)}: {why}", *details,
         triggers=steering.call_triggers(clause_id, call.tool, call.arguments, output),
         causes=(*causes.call_causes(clause_id, call.tool, call.arguments, output), *_pair_causes(call, model)))


def _pair_causes(call: Call, model: SessionModel | None) -> tuple[str, ...]:
    """``exited-pair`` when the call addresses a pair the model knows was told to exit or is dead."""
    key = addressed_pair(call)
    pair = model.pair(*key) if model is not None and key is not None else None
    return ("exited-pair",) if pair is not None and pair.life is not Life.ALIVE else ()


def describe(model: SessionModel) -> str:
    pairs = ", ".join(f"{pair_name(p.terminal, p.session)}[{p.life.value}]" for p in model.pairs) or "none"
    return f"pairs={pairs}; baseline={list(model.baseline)}"


def _is_error(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"error"} and isinstance(value["error"], str)


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Reject(Exception):
    """This output does not fit this reading of the call (internal; becomes a violation of
    ``clause``)."""

    def __init__(self, clause: str, why: str) -> None:
        super().__init__(why)
        self.clause = clause


def judge(model: SessionModel, call: Call, output: str) -> Judgement:
    """Check one call's output against the contract; return the model after it (or raise).

    Violations are raised outside ``except`` blocks, so that a failure's identity (its type and
    where it was raised, which Hypothesis uses to tell failures apart) is its clause alone."""
    try:
        value = json.loads(output)
    except (TypeError, ValueError):
        value = _NOT_JSON
    if value is _NOT_JSON:
        _fail("output.json", call, output, "the tool's output is not JSON", model)
    short = call.tool.removeprefix("sys_terminal_")
    raw = call.arguments
    try:
        args = json.loads(raw) if raw.strip() else _NOT_JSON
    except ValueError:
        args = _NOT_JSON
    rejected: _Reject | None = None
    if args is _NOT_JSON:
        if value == ERR_MALFORMED:
            return Judgement(model, f"{short}: malformed arguments -> error", value, "args.malformed")
        try:
            return replace(_judge_args(model, call, {}, value), label=f"{short}: malformed arguments -> as {{}}")
        except _Reject as exc:
            rejected = _Reject("args.malformed", f"expected {ERR_MALFORMED} or what {{}} gives ({exc})")
    elif not isinstance(args, dict):
        if value == ERR_NOT_OBJECT:
            return Judgement(model, f"{short}: error not-an-object", value, "args.not-object")
        rejected = _Reject("args.not-object", f"arguments are not a JSON object: expected {ERR_NOT_OBJECT}")
    else:
        try:
            return _judge_args(model, call, args, value)
        except _Reject as exc:
            rejected = exc
        extra = sorted(set(args) - NAMED_KEYS.get(call.tool, set(args)))
        if extra and _is_error(value) and _refuses_keys(value["error"], extra):
            rejected = _Reject("args.extra-keys", f"{rejected} (the call has keys the tool does not name: {extra}, "
                                                  "which it must ignore)")
    _fail(rejected.clause, call, output, str(rejected), model)


KEY_REFUSAL = re.compile(r"(unexpected|unknown|unrecognized|extra|invalid|unsupported|disallowed)\W+(keyword\W+)?"
                         r"(argument|key|field|parameter|propert)|additional\W+propert|not\W+(allowed|permitted)",
                         re.IGNORECASE)
"""An error that refuses an argument (as opposed to one the call's other arguments cause)."""


def _refuses_keys(error: str, extra: Sequence[str]) -> bool:
    """Whether an error is a refusal of the call's extra keys: it names one of them, or says it
    refuses an argument. Otherwise the error is judged as what the named arguments caused (a server
    that fails to type a text starting with ``-`` fails the same without the extra key: that is a
    send.text-literal bug, not an args.extra-keys one, and the clause is what tells bugs apart)."""
    return any(key and (repr(key) in error or f'"{key}"' in error) for key in extra) or \
        KEY_REFUSAL.search(error) is not None


def _judge_args(model: SessionModel, call: Call, args: dict[str, Any], value: Any) -> Judgement:
    tool = call.tool
    if tool == "sys_terminal_list":
        return _judge_list(model, value)
    if tool not in TOOLS:
        raise _Reject("output.json", f"the model does not know tool {tool!r}")
    short = tool.removeprefix("sys_terminal_")
    terminal = args.get("terminal")
    if not _nonempty_str(terminal):
        if value != ERR_TERMINAL:
            raise _Reject("args.terminal", f"'terminal' is {terminal!r}: expected {ERR_TERMINAL}")
        return Judgement(model, f"{short}: error terminal", value, "args.terminal")
    session = args.get("session")
    if not _nonempty_str(session):
        if value != ERR_SESSION:
            raise _Reject("args.session", f"'session' is {session!r}: expected {ERR_SESSION}")
        return Judgement(model, f"{short}: error session", value, "args.session")
    if tool == "sys_terminal_launch":
        return _judge_launch(model, args, terminal, session, value)
    if tool == "sys_terminal_send":
        return _judge_send(model, args, terminal, session, value)
    if tool == "sys_terminal_read":
        return _judge_read(model, args, terminal, session, value)
    return _judge_close(model, terminal, session, value)


# --- launch -------------------------------------------------------------------------------------


def _judge_launch(model: SessionModel, args: dict[str, Any], terminal: str, session: str, value: Any) -> Judgement:
    allowed_errors: list[Any] = []
    any_error = False
    if terminal not in model.declared:
        allowed_errors += err_unknown_terminal(terminal, model.declared)
    if "cwd" in args or "sandbox" in args:
        # Our terminals allow no override: refused, with a message the contract leaves open.
        any_error = True
    if allowed_errors or any_error:
        if value in allowed_errors or (any_error and _is_error(value)):
            kind = "unknown-terminal" if value in allowed_errors else "override refused"
            clause = "launch.unknown-terminal" if value in allowed_errors else "launch.override-refused"
            return Judgement(model, f"launch: error {kind}", value, clause)
        clause = "launch.unknown-terminal" if allowed_errors else "launch.override-refused"
        raise _Reject(_undeclared_clause(model, terminal, session, clause),
                      f"expected one of {allowed_errors}" + (" or an override-refused error" if any_error else ""))
    pair = model.pair(terminal, session)
    if isinstance(value, dict) and value.get("status") in ("launched", "already_running"):
        if set(value) != LAUNCH_KEYS:
            raise _Reject("launch.result", f"launch output keys {sorted(value)} != {sorted(LAUNCH_KEYS)}")
        if value["terminal"] != terminal or value["session"] != session:
            raise _Reject("launch.result", f"launch names another pair: {value['terminal']!r}:{value['session']!r}")
        if value["has_os_env"] is not True:
            raise _Reject("launch.result", "has_os_env is not true")
        if not _nonempty_str(value["tmux_socket"]):
            raise _Reject("launch.result", "tmux_socket is not a non-empty string")
    status = value.get("status") if isinstance(value, dict) else None
    if pair is None:
        if status != "launched":
            raise _Reject("launch.one-launched", "an unregistered pair must be launched")
        return _launched(model, terminal, session, value, None)
    if pair.life is Life.ALIVE:
        if status != "already_running":
            raise _Reject("launch.already-running", f"the pair is running (socket {pair.socket}): expected already_running")
        return Judgement(model, "launch: already_running", value, "launch.already-running", _socket_kept(model, pair, value))
    if status == "already_running" and pair.life is Life.EXITING:
        return Judgement(model, "launch: already_running (exit pending)", value, "launch.already-running",
                         _socket_kept(model, pair, value))
    if status != "launched":
        raise _Reject("launch.relaunch", "the pair's process exited: expected launched (a new process)")
    return _launched(model, terminal, session, value, pair)


def _socket_kept(model: SessionModel, pair: PairState, value: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Nothing, if ``already_running`` kept the pair's socket; else the violation, noted where the
    run knows it (the pair keeps the socket its launch reported)."""
    if value["tmux_socket"] == pair.socket:
        return ()
    why = f"already_running changed tmux_socket from {pair.socket!r} to {value['tmux_socket']!r}"
    if "launch.socket-kept" not in model.tolerated:
        raise _Reject("launch.socket-kept", why)
    return (("launch.socket-kept", why),)


def _launched(model: SessionModel, terminal: str, session: str, value: dict[str, Any], old: PairState | None) -> Judgement:
    socket = value["tmux_socket"]
    for other in model.pairs:
        if other.key != (terminal, session) and other.life is Life.ALIVE and other.socket == socket:
            raise _Reject("launch.private-server", f"tmux_socket {socket!r} is already the private server of {other.terminal}:{other.session}")
    ended = model.ended
    order: tuple[int, ...] = (model.next_order,)
    label = "launch: launched"
    if old is not None:
        ended = ended | {old.instance}
        order = (*old.order, model.next_order)
        label = "launch: launched again after exit"
    m, number = replace(model, ended=ended, next_order=model.next_order + 1,
                        sockets=model.sockets | {socket})._new_instance(terminal, session)
    m = m._with_pair(PairState(terminal, session, socket, number, Life.ALIVE, order))
    return Judgement(m, label, value, "launch.relaunch" if old is not None else "launch.one-launched")


# --- send / read --------------------------------------------------------------------------------


def _undeclared_clause(model: SessionModel, terminal: str, session: str, clause: str) -> str:
    """The clause an answer about an undeclared pair breaks: ``scope.server-terminals`` when the
    server runs that pair for its own purposes (it is in the baseline), whichever tool addressed it
    (one bug, one clause), else the tool's own ``clause``."""
    if terminal not in model.declared and (terminal, session) in model.baseline:
        return "scope.server-terminals"
    return clause


def _lookup_errors(model: SessionModel, terminal: str, session: str) -> tuple[PairState | None, bool]:
    """The pair if addressable, and whether not-found is certain (undeclared or unregistered)."""
    if terminal not in model.declared:
        return None, True
    pair = model.pair(terminal, session)
    return pair, pair is None


def _judge_send(model: SessionModel, args: dict[str, Any], terminal: str, session: str, value: Any) -> Judgement:
    type_errors: list[dict[str, str]] = []
    text = args.get("text")
    if text is not None and not isinstance(text, str):
        type_errors.append(ERR_TEXT)
    if "keys" in args and not isinstance(args["keys"], str):
        type_errors.append(ERR_KEYS)
    keys = args.get("keys", "Enter")
    unknown_keys = isinstance(keys, str) and any(k not in KNOWN_KEYS for k in keys.split())
    pair, missing = _lookup_errors(model, terminal, session)
    nf = err_not_found(terminal, session)
    if missing:
        if value == nf:
            return Judgement(model, "send: error not-found", value, "send.not-found")
        if value in type_errors:
            return Judgement(model, "send: error type (pair unknown)", value, "send.types")
        raise _Reject(_undeclared_clause(model, terminal, session, "send.not-found"),
                      f"expected {nf}" + (f" or one of {type_errors}" if type_errors else ""))
    assert pair is not None
    if type_errors:
        if value in type_errors:
            return Judgement(model, "send: error text type" if value == ERR_TEXT else "send: error keys type", value, "send.types")
        if pair.life is not Life.ALIVE and value in (nf, err_gone(terminal, session)):
            return Judgement(model._with_pair(replace(pair, life=Life.DEAD)), "send: error dead (bad types too)", value, "send.dead")
        raise _Reject("send.types", f"expected one of {type_errors}")
    if pair.life is not Life.ALIVE:
        if value in (nf, err_gone(terminal, session)):
            which = "not-found" if value == nf else "no-longer-running"
            return Judgement(model._with_pair(replace(pair, life=Life.DEAD)), f"send: error {which} after exit", value, "send.dead")
        if value == SENT and pair.life is Life.EXITING:
            return Judgement(model, "send: sent (exit pending)", value, "send.sent")
        raise _Reject("send.dead", f"the pair's process exited: expected {nf} or {err_gone(terminal, session)}"
                      + (" or sent" if pair.life is Life.EXITING else ""))
    if value == SENT:
        return Judgement(model, "send: sent" + (" (unknown key)" if unknown_keys else ""), value, "send.sent")
    if unknown_keys and _is_error(value):
        return Judgement(model, "send: error unknown key", value, "send.keys")
    raise _Reject("send.sent", f"the pair is running: expected {SENT}" + (" or an unknown-key error" if unknown_keys else ""))


def _judge_read(model: SessionModel, args: dict[str, Any], terminal: str, session: str, value: Any) -> Judgement:
    scrollback = args.get("scrollback")
    bad_scrollback = "scrollback" in args and not (_is_int(scrollback) and scrollback >= 0)
    pair, missing = _lookup_errors(model, terminal, session)
    nf = err_not_found(terminal, session)
    if missing:
        if value == nf:
            return Judgement(model, "read: error not-found", value, "read.not-found")
        if bad_scrollback and value == ERR_SCROLLBACK:
            return Judgement(model, "read: error scrollback (pair unknown)", value, "read.scrollback-type")
        raise _Reject(_undeclared_clause(model, terminal, session, "read.not-found"),
                      f"expected {nf}" + (f" or {ERR_SCROLLBACK}" if bad_scrollback else ""))
    assert pair is not None
    dead_errors = (nf, err_gone(terminal, session))  # §1 read: after the process died, either error
    if bad_scrollback:
        if value == ERR_SCROLLBACK:
            return Judgement(model, "read: error scrollback", value, "read.scrollback-type")
        if pair.life is not Life.ALIVE and value in dead_errors:
            return Judgement(model._with_pair(replace(pair, life=Life.DEAD)), "read: error dead (bad scrollback too)", value, "read.dead")
        raise _Reject("read.scrollback-type", f"scrollback {scrollback!r} is not a non-negative integer: expected {ERR_SCROLLBACK}")
    if pair.life is not Life.ALIVE and value in dead_errors:
        which = "not-found" if value == nf else "no-longer-running"
        return Judgement(model._with_pair(replace(pair, life=Life.DEAD)), f"read: error {which} after exit", value, "read.dead")
    if pair.life is Life.DEAD:
        raise _Reject("read.dead", f"the pair's process exited: expected {nf} or {err_gone(terminal, session)}")
    if not (isinstance(value, dict) and set(value) == READ_KEYS):
        raise _Reject("read.result", f"expected a read result with keys {sorted(READ_KEYS)}")
    problem = screen_problem(value, terminal, session, scrollback if "scrollback" in args else None)
    if problem:
        raise _Reject("read.result", problem)
    rows = row_count_problem(value)
    if rows and "read.rows-exact" not in model.tolerated:
        raise _Reject("read.rows-exact", rows)
    label = "read: ok" if pair.life is Life.ALIVE else "read: ok (exit pending)"
    return Judgement(model, label, value, "read.result", (("read.rows-exact", rows),) if rows else ())


def row_count_problem(value: Mapping[str, Any]) -> str | None:
    """Whether a read's rows are fewer than the visible rows or more than its scrollback and them
    (``read.rows-exact`` without knowing the pane's history; None if neither)."""
    rows = value["screen"].count("\n")
    lines = value["scrollback_lines"]
    if rows < PANE_ROWS:
        return f"{rows} rows < the {PANE_ROWS} visible rows"
    if rows > lines + PANE_ROWS:
        return f"{rows} rows > scrollback {lines} + {PANE_ROWS} visible rows"
    return None


def screen_problem(value: Mapping[str, Any], terminal: str, session: str, scrollback: int | None) -> str | None:
    """Whether a successful read's result breaks §1 read (None if it is fine)."""
    if value["terminal"] != f"{terminal}:{session}":
        return f"read names {value['terminal']!r}, expected {terminal + ':' + session!r}"
    screen = value["screen"]
    lines = value["scrollback_lines"]
    if not isinstance(screen, str):
        return "screen is not a string"
    if not _is_int(lines) or lines < 0:
        return f"scrollback_lines {lines!r} is not a non-negative integer"
    if scrollback is not None and lines != scrollback:
        return f"scrollback_lines {lines} != requested {scrollback}"
    if "\x1b" in screen:
        return "screen holds escape codes"
    if not screen.endswith("\n"):
        return "the screen's last row does not end in \\n"
    rows = screen.split("\n")[:-1]
    for row in rows:
        if row.isascii() and len(row) > PANE_COLS:
            return f"a row is {len(row)} columns wide (> {PANE_COLS}): long lines must stay split"
    return None


# --- close --------------------------------------------------------------------------------------


def _judge_close(model: SessionModel, terminal: str, session: str, value: Any) -> Judgement:
    closed = {"terminal": terminal, "session": session, "status": "closed"}
    not_found = {"terminal": terminal, "session": session, "status": "not_found"}
    pair, missing = _lookup_errors(model, terminal, session)
    if missing:
        if value != not_found:
            raise _Reject(_undeclared_clause(model, terminal, session, "close.not-found"),
                          f"the pair is not registered: expected {not_found}")
        return Judgement(model, "close: not_found", value, "close.not-found")
    assert pair is not None
    if value == closed:
        label = "close: closed" if pair.life is Life.ALIVE else "close: closed after exit"
        return Judgement(model._without(pair.key, ended=True), label, value, "close.closed")
    if value == not_found and pair.life is not Life.ALIVE:
        return Judgement(model._without(pair.key, ended=True), "close: not_found after exit", value, "close.closed")
    raise _Reject("close.closed", f"expected {closed}" + ("" if pair.life is Life.ALIVE else f" or {not_found}"))


# --- list ---------------------------------------------------------------------------------------


def _judge_list(model: SessionModel, value: Any) -> Judgement:
    if not isinstance(value, list):
        raise _Reject("list.result", "list must return a JSON array")
    for entry in value:
        if not isinstance(entry, dict) or set(entry) != LIST_KEYS:
            raise _Reject("list.result", f"a list entry is not an object with keys {sorted(LIST_KEYS)}: {entry!r}")
        for name in ("terminal", "session", "command", "tmux_socket"):
            if not isinstance(entry[name], str):
                raise _Reject("list.result", f"list entry field {name!r} is not a string: {entry!r}")
        for name in ("running", "has_os_env"):
            if not isinstance(entry[name], bool):
                raise _Reject("list.result", f"list entry field {name!r} is not a boolean: {entry!r}")
    value, twice = _once(value)
    if twice and "list.unique" not in model.tolerated:
        raise _Reject("list.unique", twice[0])
    noted: list[tuple[str, str]] = [("list.unique", why) for why in twice]
    value, foreign = _without_foreign(model, value)
    if foreign and "scope.session" not in model.tolerated:
        raise _Reject("scope.session", foreign[0])
    noted += [("scope.session", why) for why in foreign]
    keys = [(e["terminal"], e["session"]) for e in value]
    if len(set(keys)) != len(keys):
        raise _Reject("list.unique", "list shows a pair twice")
    nb = len(model.baseline)
    if tuple(keys[:nb]) != model.baseline:
        raise _Reject("list.baseline", f"list must start with the baseline {list(model.baseline)} (what the first list showed)")
    commands = dict(model.commands)
    rest = value[nb:]
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    last = -1
    pinned: dict[tuple[str, str], tuple[int, ...]] = {}
    for entry in rest:
        key = (entry["terminal"], entry["session"])
        pair = model.pair(*key)
        if pair is None and "list.registered" in model.tolerated:
            noted.append(("list.registered", f"list shows {key[0]}:{key[1]}, which is not registered in this session"))
            continue
        if pair is None:
            raise _Reject("list.registered", f"list shows {key[0]}:{key[1]}, which is not registered in this session")
        if entry["tmux_socket"] != pair.socket:
            raise _Reject("list.fields", f"list gives {key[0]}:{key[1]} tmux_socket {entry['tmux_socket']!r}, launch said {pair.socket!r}")
        if entry["has_os_env"] is not True:
            raise _Reject("list.fields", f"list gives {key[0]}:{key[1]} has_os_env false; launch said true")
        running = None
        if entry["running"] is not True and pair.life is Life.ALIVE:
            running = f"list says the live pair {key[0]}:{key[1]} is not running"
        if entry["running"] is True and pair.life is Life.DEAD:
            running = f"list says {key[0]}:{key[1]} is running, but a tool already reported it dead"
        if running is not None and "list.running" not in model.tolerated:
            raise _Reject("list.running", running)
        if running is not None:
            noted.append(("list.running", running))
            entry = {**entry, "running": pair.life is not Life.DEAD}  # the model keeps the pair's life as the tools said
        known = commands.setdefault(entry["terminal"], entry["command"])
        if entry["command"] != known:
            raise _Reject("list.fields", f"list gives terminal {entry['terminal']!r} command {entry['command']!r}, earlier {known!r}")
        fitting = [o for o in pair.order if o > last]
        if not fitting:
            raise _Reject("list.order", f"list is not in launch order at {key[0]}:{key[1]} (observed {keys[nb:]})")
        last = min(fitting)
        pinned[key] = (last,)
        seen[key] = entry
    m = replace(model, commands=tuple(sorted(commands.items())))
    labels = []
    for pair in model.pairs:
        entry = seen.get(pair.key)
        if entry is None:
            if pair.life is Life.ALIVE:
                raise _Reject("list.registered", f"list misses the live pair {pair.terminal}:{pair.session}")
            m = m._without(pair.key, ended=True)
            labels.append("gone")
            continue
        new = replace(pair, order=pinned[pair.key])
        if pair.life is not Life.ALIVE:
            labels.append("running" if entry["running"] else "not running")
            if not entry["running"]:
                new = replace(new, life=Life.DEAD)
        m = m._with_pair(new)
    label = f"list: {min(len(rest), 3)}{'+' if len(rest) > 3 else ''} pairs"
    if labels:
        label = "list: exited pair " + "/".join(sorted(set(labels)))
    return Judgement(m, label, value, "list.registered", tuple(noted))


def _once(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """``rows`` without a second row of one pair on one tmux server, and why each left out breaks
    ``list.unique`` (a row of the same name on another server is judged as another session's)."""
    once: list[dict[str, Any]] = []
    twice: list[str] = []
    for row in rows:
        if any((r["terminal"], r["session"], r["tmux_socket"]) == (row["terminal"], row["session"], row["tmux_socket"])
               for r in once):
            twice.append(f"list shows {pair_name(row['terminal'], row['session'])} twice "
                         f"(tmux server {row['tmux_socket']!r})")
        else:
            once.append(row)
    return once, twice


def _without_foreign(model: SessionModel, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of ``rows`` that may be this session's, and why each other one is another
    session's terminal: a row of a declared terminal that is neither a registered pair's (its
    socket, or for a live pair the row of its name) nor on a tmux server this session's launches reported, and
    a second row of a baseline pair. A server whose list shows every session's terminals (so that a
    fresh session's first list shows other sessions' pairs, possibly of the same names as its own)
    breaks ``scope.session`` at every list; a campaign that knows it leaves those rows out and goes on."""
    kept: list[dict[str, Any]] = []
    foreign: list[str] = []
    matched: set[tuple[str, str]] = set()
    shown = {(r["terminal"], r["session"], r["tmux_socket"]) for r in rows}
    for row in rows:
        key = (row["terminal"], row["session"])
        pair = model.pair(*key)
        socket = row["tmux_socket"]
        if key not in matched and key in model.baseline:
            matched.add(key)
            kept.append(row)
            continue
        if key not in matched and pair is not None and (socket == pair.socket or (
                pair.life is Life.ALIVE and (*key, pair.socket) not in shown)):
            # its own row: on its socket, or the row of its name where a live pair must be (a wrong
            # socket there is list.fields); an exited pair may be gone, and another socket's row stays foreign
            matched.add(key)
            kept.append(row)
            continue
        if socket in model.sockets or (pair is None and key[0] not in model.declared and key not in model.baseline):
            kept.append(row)  # this session's own (a pair it closed, listed still), or a server-made row: judged below
            continue
        foreign.append(f"list shows {pair_name(*key)} on tmux server {socket!r}, which no launch of this session "
                       "reported: another session's terminal (a session never sees another session's terminals)")
    return kept, foreign


# --- several calls in one reply -----------------------------------------------------------------


MAX_REORDERED = 6
"""Calls of one step that are tried in every order when a list observes them (6! = 720 orders)."""


def judge_step(model: SessionModel, calls: Sequence[Call], outputs: Sequence[str]) -> list[Judgement]:
    """Judge the calls of one model reply, which run concurrently: accept the outputs if SOME
    sequential order of the calls explains all of them. Returns judgements in the calls' order,
    the last one (in the explaining order) carrying the final model as ``model`` of every entry.

    Only calls that can observe each other need reordering: calls on the same pair, and lists
    (which observe every pair). Without a list, each pair's calls are tried in every order of their
    own and the pairs are judged one after the other (polynomial in the number of pairs: a teardown
    that closes ten pairs is ten judgements, not 10! orders); with a list, every order of the step
    is tried (a list step holds at most a few calls)."""
    if len(calls) != len(outputs):
        fail("items.calls", f"{len(calls)} calls but {len(outputs)} outputs")
    indices = list(range(len(calls)))
    if any(c.tool == "sys_terminal_list" for c in calls) and len(calls) > 1:
        groups = [indices]
    else:
        by_pair: dict[Any, list[int]] = {}
        for i in indices:
            # calls on different pairs commute; one that names no pair depends on no pair's state
            by_pair.setdefault(addressed_pair(calls[i]) or calls[i], []).append(i)
        groups = list(by_pair.values())
    m = model
    found: dict[int, Judgement] = {}
    for group in groups:
        explained = _explain(m, group, calls, outputs)
        if isinstance(explained, _Unexplained):
            if len(calls) == 1:
                raise explained.error
            clause = explained.error.clause or "step.concurrent"
            first, *details = str(explained.error).split("\n")
            launched = [addressed_pair(calls[i]) for i in group if calls[i].tool == "sys_terminal_launch"]
            # copies provoke "two say launched"; another clause broken beside them names no trigger of
            # theirs (steering away from copies would hide launch.already-running for the rest of a campaign)
            copies = (("launch-copies",) if clause == "launch.already-running" and len(launched) > len(set(launched))
                      else ())
            fail(clause, f"{UNEXPLAINED_ORDER} {len(calls)} concurrent calls explains their outputs; "
                         f"the order that explains most of them breaks here: {first.removeprefix(clause + ': ')}",
                 *details, triggers=tuple(sorted({*explained.error.triggers, *copies})),
                 causes=(*explained.error.causes, "several-calls"))
        for i, j in explained.items():
            found[i] = j
            m = j.model
    if len(calls) > 1:
        m = _any_launch_order(model.next_order, m)
    return [replace(found[i], model=m) for i in indices]


@dataclass(frozen=True)
class _Unexplained:
    error: ContractViolation
    """Where the order that explains the most calls broke (the first such order, from the order
    issued): the same bug gives the same clause whatever order the server answered in (two of three
    concurrent launches saying ``launched`` break launch.already-running, never launch.one-launched
    for an ``already_running`` that happened to come first)."""


def _explain(model: SessionModel, group: list[int], calls: Sequence[Call],
             outputs: Sequence[str]) -> dict[int, Judgement] | _Unexplained:
    """Judgements (in the explaining order) of the calls ``group`` if some order of them explains
    their outputs, starting from ``model``; else what the issued order broke first."""
    if len(group) > MAX_REORDERED and any(calls[i].tool == "sys_terminal_list" for i in group):
        orders: Any = [tuple(group)]  # too many to try: the order issued only
    else:
        orders = itertools.permutations(group)
    best: tuple[int, ContractViolation] | None = None
    noting: tuple[int, dict[int, Judgement]] | None = None  # an order explained only by going past something
    for order in orders:
        m = model
        found: dict[int, Judgement] = {}
        try:
            for i in order:
                j = judge(m, calls[i], outputs[i])
                found[i] = j
                m = j.model
        except ContractViolation as exc:
            if best is None or len(found) > best[0]:
                best = (len(found), exc)
            continue
        noted = sum(len(j.noted) for j in found.values())
        if not noted:
            return found
        # a list judged before the launch it shows would "show an unregistered pair": an order that
        # needs no deviation is the one that happened, if there is one
        if noting is None or noted < noting[0]:
            noting = (noted, found)
    if noting is not None:
        return noting[1]
    assert best is not None
    return _Unexplained(best[1])


def addressed_pair(call: Call) -> tuple[str, str] | None:
    """The pair a call's arguments name (string ``terminal`` and ``session``), if they name one."""
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    if isinstance(args, dict) and isinstance(args.get("terminal"), str) and isinstance(args.get("session"), str):
        return args["terminal"], args["session"]
    return None


def _any_launch_order(first: int, model: SessionModel) -> SessionModel:
    """Launches of one concurrent step register in whatever order they run, not the order that
    explained their outputs: each pair launched in the step may take any of the step's positions
    (the next list pins the one it shows)."""
    step = tuple(range(first, model.next_order))
    if len(step) < 2:
        return model
    for pair in model.pairs:
        if any(o in step for o in pair.order):
            earlier = tuple(o for o in pair.order if o < first)
            model = model._with_pair(replace(pair, order=(*earlier, *step)))
    return model


# --- resource events (§2.4) ---------------------------------------------------------------------


@dataclass(frozen=True)
class EventView:
    """A resource event as a target reports it (the ``resource`` part is optional)."""

    event_type: str
    resource_id: str
    terminal: str | None = None
    session: str | None = None


CREATED_EVENT = "session.resource.created"
DELETED_EVENT = "session.resource.deleted"


@dataclass(frozen=True)
class Assignment:
    """One way of matching the resource events seen so far to the instances that caused them.

    A server that leaves the pair out of ``resource`` (§2.4 leaves its content open) names an event
    by its id alone, and id siblings (pairs whose ids collide under ``safe()``, ``'%1'`` and
    ``'_%1_'``) launched in one reply may get ``terminal_bash_1`` and ``terminal_bash_1_2`` in either
    order: each order is one assignment. Instances whose deleted event was seen are kept only as a
    number: their id no longer matters, so assignments that differ only there are one."""

    live: tuple[tuple[int, str], ...] = ()
    """(instance, resource id) of every instance whose created event was seen and deleted event not."""
    done: frozenset[int] = frozenset()
    """Instances whose created and deleted events were both seen."""

    def has_created(self, number: int) -> bool:
        return number in self.done or any(n == number for n, _ in self.live)

    def id_of(self, instance: int) -> str | None:
        for number, rid in self.live:
            if number == instance:
                return rid
        return None


@dataclass(frozen=True)
class Ledger:
    """What the events seen so far allow: every assignment of them to instances that no event
    contradicted yet (never empty: :func:`reconcile_events` fails when none is left)."""

    consumed: int = 0
    assignments: tuple[Assignment, ...] = (Assignment(),)
    ignored: int = 0

    def id_of(self, instance: int) -> str | None:
        """The live instance's resource id, if every assignment gives it the same one."""
        ids = {a.id_of(instance) for a in self.assignments}
        return ids.pop() if len(ids) == 1 else None


@dataclass(frozen=True)
class Reconciled:
    ledger: Ledger
    missing: tuple[str, ...]
    """Events the contract requires that were not seen yet (the caller polls, then fails): none if
    some assignment needs no more events, else those of the assignment that needs the fewest."""
    labels: tuple[str, ...] = ()
    pending: frozenset[int] = frozenset()
    """The instances whose events are missing in some assignment."""
    noted: tuple[tuple[str, str], ...] = ()
    """Violations the reconciliation went past (``SessionModel.tolerated``): ``(clause, why)`` each."""


@dataclass(frozen=True)
class _Contradicted:
    """Why an event fits no extension of an assignment (raised through ``fail`` once none is left)."""

    clause: str
    headline: str


def reconcile_events(model: SessionModel, ledger: Ledger, events: Sequence[EventView]) -> Reconciled:
    """Match new events to launched/ended instances in every way they allow (narrowing the
    ledger's assignments); raise on an event that no assignment explains.

    An event that names a launched pair (``resource.terminal``/``resource.session``) matches that
    pair's instances only; one that does not (the keys are missing, or hold something else: §2.4
    leaves ``resource`` open) may belong to any instance whose pair its id fits. A verdict
    comes only once no assignment is left: whatever order the server launched id siblings in, the
    assignment of that order survives every event a correct server records."""
    assignments = list(ledger.assignments)
    ignored = ledger.ignored
    labels: list[str] = []
    noted: dict[tuple[str, str], None] = {}
    baseline_ids = {resource_base_id(t, s) for t, s in model.baseline}
    for ev in events[ledger.consumed:]:
        base_ok = any(ev.resource_id == b or ev.resource_id.startswith(b + "_") for b in baseline_ids)
        if (ev.terminal, ev.session) in model.baseline or (ev.terminal is None and base_ok):
            ignored += 1
            continue
        if ev.event_type not in (CREATED_EVENT, DELETED_EVENT):
            fail("events.recorded", f"unknown resource event type {ev.event_type!r}")
        if not any((i.terminal, i.session) == (ev.terminal, ev.session) for i in model.instances):
            ev = replace(ev, terminal=None, session=None)  # names no pair of the session: matched by id alone
        survivors: dict[Assignment, None] = {}
        contradiction: _Contradicted | None = None
        for assignment in assignments:
            extended = _extend(model, assignment, ev, noted)
            if isinstance(extended, _Contradicted):
                contradiction = contradiction or extended
                continue
            survivors.update(dict.fromkeys(extended))
        if not survivors:
            assert contradiction is not None
            fail(contradiction.clause, contradiction.headline)
        assignments = list(survivors)
        labels.append(_event_label(model, ev, len(assignments)))
    needs = [_missing(model, a) for a in assignments]
    fewest = min(needs, key=lambda need: len(need[0]))
    pending = frozenset(n for _, numbers in needs for n in numbers)
    return Reconciled(Ledger(len(events), tuple(assignments), ignored), fewest[0], tuple(labels), pending,
                      tuple(noted))


def _names(ev: EventView, instance: Instance) -> bool:
    """Whether the event may be the instance's: it names no pair, or names the instance's."""
    return ev.terminal is None or (instance.terminal, instance.session) == (ev.terminal, ev.session)


def _extend(model: SessionModel, assignment: Assignment, ev: EventView,
            noted: dict[tuple[str, str], None]) -> list[Assignment] | _Contradicted:
    """Every assignment that ``assignment`` plus the event ``ev`` can be, or why there is none (a
    violation the model tolerates is added to ``noted`` instead)."""
    maybe = model.maybe_ended()
    if ev.event_type == CREATED_EVENT:
        candidates = [i for i in model.instances if not assignment.has_created(i.number) and _names(ev, i)
                      and resource_id_fits(ev.resource_id, i.terminal, i.session)]
        if not candidates:
            return _Contradicted("events.ids", f"created event {ev} matches no launched terminal (ids follow §2.4: "
                                               "terminal_<safe(name)>_<safe(key)>[_n])")
        for number, rid in assignment.live:
            if rid == ev.resource_id and number not in model.ended and number not in maybe:
                inst, other = candidates[0], model.instances[number]
                why = (f"resource id {ev.resource_id!r} of {pair_name(inst.terminal, inst.session)} is already the id "
                       f"of the live {pair_name(other.terminal, other.session)}: ids must be unique among live terminals")
                if "events.unique-ids" not in model.tolerated:
                    return _Contradicted("events.unique-ids", why)
                noted[("events.unique-ids", why)] = None
        return [replace(assignment, live=tuple(sorted((*assignment.live, (i.number, ev.resource_id)))))
                for i in candidates]
    matches = [n for n, rid in assignment.live if rid == ev.resource_id and _names(ev, model.instances[n])]
    if not matches:
        return _Contradicted("events.recorded",
                             f"deleted event {ev} matches no live created terminal (or is a duplicate)")
    endable = [n for n in matches if n in model.ended or n in maybe]
    if not endable:
        inst = model.instances[matches[0]]
        return _Contradicted("events.recorded",
                             f"deleted event {ev} for {pair_name(inst.terminal, inst.session)}, which is alive")
    return [Assignment(tuple(entry for entry in assignment.live if entry[0] != n), assignment.done | {n})
            for n in endable]


def _event_label(model: SessionModel, ev: EventView, assignments: int) -> str:
    """For ``hypothesis.event``: the kind of event, and whether its id was disambiguated or left
    id siblings' order open."""
    if ev.event_type == DELETED_EVENT:
        return "events: deleted" + (" (siblings' order open)" if assignments > 1 else "")
    based = any(ev.resource_id == resource_base_id(i.terminal, i.session) for i in model.instances)
    return ("events: created" + ("" if based else " (disambiguated)")
            + (" (siblings' order open)" if assignments > 1 else ""))


def _missing(model: SessionModel, assignment: Assignment) -> tuple[tuple[str, ...], frozenset[int]]:
    """The events that ``assignment`` still needs (launches with no created event, ended instances
    with no deleted event), and those instances."""
    unmade = [i.number for i in model.instances if not assignment.has_created(i.number)]
    undeleted = [n for n in sorted(model.ended) if n not in assignment.done]
    missing = [f"created for {pair_name(model.instances[n].terminal, model.instances[n].session)} (launch #{n})"
               for n in unmade]
    missing += [f"deleted for {pair_name(model.instances[n].terminal, model.instances[n].session)} (launch #{n})"
                for n in undeleted]
    return tuple(missing), frozenset(unmade + undeleted)


def first_list(declared: Sequence[str], first_list_output: str, other_sockets: Mapping[str, str] | None = None,
               tolerated: Iterable[str] = ()) -> Judgement:
    """A fresh agent session's first ``list``, judged like any other: its model, with the baseline.

    Rows of undeclared terminals are the baseline (CONTRACT §1 list: the server's own terminals,
    listed before the agent's first call). A row of a declared terminal is one this session never
    launched: another session's (``scope.session``; ``other_sockets`` maps the tmux socket of every
    pair that other agent sessions of this run launched to that pair's name, so the message can
    name its owner). Unless ``scope.session`` is ``tolerated`` (the run knows it), that ends the
    program; if it is, the row is noted (``Judgement.noted``), left out of the model and never
    addressed, and the program goes on."""
    try:
        value = json.loads(first_list_output)
    except ValueError:
        value = _NOT_JSON
    if not isinstance(value, list):
        fail("list.result", f"the first list did not return a JSON array: {_short(first_list_output)}")
    baseline: list[tuple[str, str]] = []
    noted: list[tuple[str, str]] = []
    for entry in value:
        if not isinstance(entry, dict) or set(entry) != LIST_KEYS:
            fail("list.result", f"a list entry is not an object with keys {sorted(LIST_KEYS)}: {entry!r}")
    value, twice = _once(value)
    if twice and "list.unique" not in tolerated:
        fail("list.unique", f"the first list of a fresh agent session: {twice[0]}")
    noted += [("list.unique", f"the first list of a fresh agent session: {why}") for why in twice]
    for entry in value:
        key = (entry["terminal"], entry["session"])
        if entry["terminal"] in declared or key in baseline:
            name = pair_name(*key)
            owner = (other_sockets or {}).get(entry["tmux_socket"])
            where = f"the tmux server of {owner} of another agent session" if owner is not None else \
                f"tmux server {entry['tmux_socket']!r}, which this session never launched"
            why = (f"the first list of a fresh agent session shows {name}, which runs on {where}: sessions see only "
                   "their own terminals")
            if "scope.session" not in tolerated:
                fail("scope.session", why)
            noted.append(("scope.session", why))
            continue
        baseline.append(key)
    model = SessionModel(declared=tuple(sorted(declared)), baseline=tuple(baseline))
    return Judgement(model, f"list: first, baseline of {len(baseline)}", value, "list.baseline", tuple(noted))


def initial_model(declared: Sequence[str], first_list_output: str,
                  other_sockets: Mapping[str, str] | None = None) -> SessionModel:
    """The model of a fresh agent session from its first ``list`` (:func:`first_list`, which
    raises on another session's rows)."""
    return first_list(declared, first_list_output, other_sockets).model

"""The five ``sys_terminal_*`` tools (CONTRACT §1): JSON arguments in, a JSON string out.

Each tool validates its arguments in the contract's order (JSON object, ``terminal``, ``session``,
then the tool's own checks), applies the agent's declarations (an undeclared terminal is never
addressable, even if the registry runs such a pair for the server itself), and maps the registry's
exceptions to the contract's exact error strings. Keys not named by the contract are ignored.

Messages the contract leaves open follow omnigent's wording (``omnigent/tools/builtins/
sys_terminal.py`` and ``omnigent/inner/terminal.py``): the cwd/sandbox override refusals and the
cwd-outside-the-spec's-cwd error. Decisions of the reference stack:

* ``scrollback`` must be a JSON integer: ``true``/``false`` and ``3.0`` are refused.
* A ``keys`` entry tmux does not know as a key name is typed literally (tmux's own behaviour).
* A sandbox override, where allowed, accepts ``"none"`` only: the reference stack has no sandbox.
* A ``read`` of a pair whose process exited gives the not-found error (it is "not running").
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stateful.reference import faults
from stateful.reference.registry import (
    LaunchFailed,
    TerminalGone,
    TerminalNotFound,
    TerminalRegistry,
)
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import TmuxError

__all__ = ["TOOLS", "TOOL_SCHEMAS", "ToolContext", "call_tool"]


@dataclass(frozen=True)
class ToolContext:
    registry: TerminalRegistry
    session_id: str
    terminals: Mapping[str, TerminalSpec]
    """The agent's declared terminals, by name."""


class _Refusal(Exception):
    """An argument error: its payload is the tool's whole (JSON) result."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _result(payload: Any) -> str:
    return json.dumps(payload)


def _error(message: str) -> str:
    return json.dumps({"error": message})


def _arguments(arguments: str) -> dict[str, Any]:
    """The arguments as a dict, or _Refusal with the contract's JSON error."""
    if isinstance(arguments, (bytes, bytearray)):
        arguments = arguments.decode("utf-8", "replace")
    if not isinstance(arguments, str) or not arguments.strip():
        raise _Refusal("malformed JSON arguments")
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        raise _Refusal("malformed JSON arguments") from None
    if not isinstance(parsed, dict):
        raise _Refusal("arguments must be a JSON object")
    return parsed


_KNOWN_KEYS = {
    "sys_terminal_launch": frozenset({"terminal", "session", "cwd", "sandbox"}),
    "sys_terminal_send": frozenset({"terminal", "session", "text", "keys"}),
    "sys_terminal_read": frozenset({"terminal", "session", "scrollback"}),
    "sys_terminal_list": frozenset(),
    "sys_terminal_close": frozenset({"terminal", "session"}),
}
"""The argument names of each tool's schema (used only by the planted fault below)."""


def _strict_keys(tool: str, args: dict[str, Any]) -> None:
    """Planted fault "extra-key-rejected": refuse keys outside the tool's schema (_Refusal)."""
    extra = sorted(set(args) - _KNOWN_KEYS[tool])
    if extra:
        raise _Refusal(f"unexpected argument {extra[0]!r}")


def _pair(arguments: str, tool: str = "") -> tuple[dict[str, Any], str, str]:
    args = _arguments(arguments)
    if faults.enabled("extra-key-rejected") and tool:
        _strict_keys(tool, args)  # planted fault: a strict schema check the contract forbids
    terminal, session = args.get("terminal"), args.get("session")
    if not isinstance(terminal, str) or not terminal:
        raise _Refusal("requires a non-empty 'terminal' string")
    if not isinstance(session, str) or not session:
        raise _Refusal("requires a non-empty 'session' string")
    return args, terminal, session


def _declared_pair(arguments: str, tool: str, context: ToolContext) -> tuple[dict[str, Any], str, str]:
    """:func:`_pair` for a tool that acts on a running terminal: a terminal the agent did not declare
    is refused as not found (nothing by that name can be running)."""
    args, terminal, session = _pair(arguments, tool)
    if terminal not in context.terminals:
        raise _Refusal(_not_found(terminal, session))
    return args, terminal, session


def _not_found(terminal: str, session: str) -> str:
    return f"terminal '{terminal}:{session}' not found or not running"


def _type_problem(context: ToolContext, terminal: str, session: str, problem: str) -> str:
    """The error for a badly typed argument: not-found first if the pair is not registered.

    That is the contract's (and omnigent's) order. The registry is asked only on this error path,
    so a well-formed call costs one registry call.
    """
    registered = any(
        row.terminal == terminal and row.session == session
        for row in context.registry.list(context.session_id)
    )
    return problem if registered else _not_found(terminal, session)


def _check_overrides(terminal: str, spec: TerminalSpec, cwd: Any, sandbox: Any) -> None:
    """Refuse overrides the spec does not allow, in omnigent's order (_Refusal)."""
    if cwd is not None and not spec.allow_cwd_override:
        raise _Refusal(
            f"cwd override is not allowed for terminal {terminal!r} "
            "(set allow_cwd_override: true on the terminal spec to permit)"
        )
    if sandbox is not None and not spec.allow_sandbox_override:
        raise _Refusal(
            f"sandbox override is not allowed for terminal {terminal!r} "
            "(set allow_sandbox_override: true on the terminal spec to permit)"
        )
    if sandbox is not None and sandbox not in ("none", "linux_bwrap"):
        raise _Refusal(f"invalid sandbox override {sandbox!r}; must be 'none' or 'linux_bwrap'")


def _launch_cwd(spec: TerminalSpec, cwd: Any) -> str | None:
    """The allowed working directory a launch asks for (None: the spec's), or _Refusal."""
    if cwd is None:
        return None
    if not isinstance(cwd, str):
        raise _Refusal("'cwd' must be a string if provided")
    if "\0" in cwd:
        raise _Refusal(f"launch failed: cwd override {cwd!r} is not a directory")
    root = os.path.realpath(spec.cwd)
    resolved = os.path.realpath(os.path.join(root, os.path.expanduser(cwd)))
    if resolved != root and not resolved.startswith(root.rstrip(os.sep) + os.sep):
        raise _Refusal(
            f"launch failed: cwd override {cwd!r} resolves to {resolved} which is outside the "
            f"allowed root {root}. A terminal cwd override must point at the spec's cwd or a "
            "subdirectory of it; pointing elsewhere would escape the sandbox's filesystem and "
            "dotfile-masking anchors."
        )
    if not os.path.isdir(resolved):
        raise _Refusal(f"launch failed: cwd override {cwd!r} is not a directory")
    return resolved


def sys_terminal_launch(arguments: str, context: ToolContext) -> str:
    """Start a declared terminal for this agent session (or report that it runs already)."""
    try:
        args, terminal, session = _pair(arguments, "sys_terminal_launch")
        spec = context.terminals.get(terminal)
        if spec is None:
            declared = sorted(context.terminals)
            raise _Refusal(f"unknown terminal {terminal!r}; declared: {declared!r}")
        _check_overrides(terminal, spec, args.get("cwd"), args.get("sandbox"))
        cwd = _launch_cwd(spec, args.get("cwd"))
        if args.get("sandbox") == "linux_bwrap":
            raise _Refusal(
                "launch failed: sandbox 'linux_bwrap' is not available in the reference stack "
                "(it runs terminals without a sandbox); use 'none'"
            )
    except _Refusal as refusal:
        return _error(refusal.error)
    try:
        launched = context.registry.launch(context.session_id, spec, session, cwd=cwd)
    except (LaunchFailed, TmuxError, RuntimeError, OSError, ValueError) as exc:
        return _error(f"launch failed: {exc}")
    socket = launched.tmux_socket
    if faults.enabled("launch-new-socket") and launched.status == "already_running":
        # Planted fault: the answer's path is made anew on every call (a path that never existed)
        socket = f"{socket}.{next(_FRESH_PATHS)}"
    return _result(
        {
            "terminal": terminal,
            "session": session,
            "tmux_socket": socket,
            "has_os_env": True,
            "status": launched.status,
        }
    )


_FRESH_PATHS = itertools.count(1)


def sys_terminal_send(arguments: str, context: ToolContext) -> str:
    """Type text literally into a terminal, then press keys (default Enter)."""
    try:
        args, terminal, session = _declared_pair(arguments, "sys_terminal_send", context)
    except _Refusal as refusal:
        return _error(refusal.error)
    text, keys = args.get("text"), args.get("keys", "Enter")
    if faults.enabled("keys-default-none") and "keys" not in args:
        keys = ""  # planted fault: an absent 'keys' presses nothing instead of Enter
    problem = None
    if text is not None and not isinstance(text, str):
        problem = "'text' must be a string if provided"
    elif not isinstance(keys, str):
        problem = "'keys' must be a string if provided"
    if problem is not None:
        return _error(_type_problem(context, terminal, session, problem))
    try:
        context.registry.send(context.session_id, terminal, session, text=text, keys=keys)
    except TerminalNotFound:
        return _error(_not_found(terminal, session))
    except TerminalGone as exc:
        return _error(str(exc))
    except (TmuxError, OSError) as exc:
        return _error(f"send failed: {exc}")
    return _result({"status": "sent"})


def sys_terminal_read(arguments: str, context: ToolContext) -> str:
    """The terminal's screen as text, with up to ``scrollback`` lines of history above it."""
    try:
        args, terminal, session = _declared_pair(arguments, "sys_terminal_read", context)
    except _Refusal as refusal:
        return _error(refusal.error)
    scrollback = args.get("scrollback", 0)
    if faults.enabled("scrollback-bool") and isinstance(scrollback, bool):
        scrollback = int(scrollback)  # planted fault: JSON true/false taken as 1/0 (bool is an int)
    if isinstance(scrollback, bool) or not isinstance(scrollback, int) or scrollback < 0:
        problem = "'scrollback' must be a non-negative integer"
        return _error(_type_problem(context, terminal, session, problem))
    try:
        # Planted fault "scrollback-ignored": the argument is validated and echoed, but not passed on;
        # "scrollback-capped": only up to a limit (a server that caps what it captures).
        history = 0 if faults.enabled("scrollback-ignored") else scrollback
        if faults.enabled("scrollback-capped") and history > 1000:
            history = 0
        screen = context.registry.read(context.session_id, terminal, session, scrollback=history)
        if faults.enabled("read-history-short") and history > 0 and screen.count("\n") > 24:
            screen = screen.split("\n", 1)[1]  # planted fault: an off-by-one loses the oldest history line
        if faults.enabled("read-row-added"):
            screen += "\n"  # planted fault: a blank row joined after the visible rows (a capture one row too long)
        if faults.enabled("read-last-row-dropped"):
            # planted fault: the captured range ends one row early (``-E`` given the last row's index
            # counted from 1), so every read lacks the bottom row, where a prompt or output usually is
            screen = "".join(screen.splitlines(keepends=True)[:-1])
    except (TerminalNotFound, TerminalGone):
        return _error(_not_found(terminal, session))
    except (TmuxError, OSError) as exc:
        return _error(f"read failed: {exc}")
    return _result({"terminal": f"{terminal}:{session}", "screen": screen, "scrollback_lines": scrollback})


def sys_terminal_list(arguments: str, context: ToolContext) -> str:
    """This agent session's terminals, in launch order."""
    try:
        args = _arguments(arguments)
        if faults.enabled("extra-key-rejected"):
            _strict_keys("sys_terminal_list", args)  # planted fault (see _strict_keys)
    except _Refusal as refusal:
        return _error(refusal.error)
    rows = [
        {
            "terminal": row.terminal,
            "session": row.session,
            "command": row.command,
            # Planted fault list-not-running: a flag read the wrong way round for live pairs
            "running": row.running and not faults.enabled("list-not-running"),
            "has_os_env": row.has_os_env,
            "tmux_socket": row.tmux_socket,
        }
        # Planted fault list-every-session: the rows of every agent session on the server
        for row in context.registry.list(context.session_id, every_session=faults.enabled("list-every-session"))
    ]
    if faults.enabled("list-row-twice") and rows:
        rows.insert(1, dict(rows[0]))  # planted fault: the first row is joined twice
    return _result(rows)


def sys_terminal_close(arguments: str, context: ToolContext) -> str:
    """Close a terminal: ``closed`` if it was registered (alive or not), else ``not_found``."""
    try:
        _args, terminal, session = _pair(arguments, "sys_terminal_close")
    except _Refusal as refusal:
        return _error(refusal.error)
    closed = terminal in context.terminals and context.registry.close(
        context.session_id, terminal, session
    )
    return _result(
        {"terminal": terminal, "session": session, "status": "closed" if closed else "not_found"}
    )


TOOLS: dict[str, Callable[[str, ToolContext], str]] = {
    "sys_terminal_launch": sys_terminal_launch,
    "sys_terminal_send": sys_terminal_send,
    "sys_terminal_read": sys_terminal_read,
    "sys_terminal_list": sys_terminal_list,
    "sys_terminal_close": sys_terminal_close,
}


def call_tool(name: str, arguments: str, context: ToolContext) -> str:
    """Run the named tool; an unknown name gives ``{"error": "unknown tool 'x'"}``."""
    tool = TOOLS.get(name)
    if tool is None:
        return _error(f"unknown tool {name!r}")
    return tool(arguments, context)


_PAIR_PROPERTIES: dict[str, Any] = {
    "terminal": {"type": "string", "description": "Terminal name from the agent's terminals block (e.g. 'bash')."},
    "session": {
        "type": "string",
        "description": (
            "Per-instance session key, free-form (e.g. 's1'). Different session keys give "
            "independent terminals of the same name."
        ),
    },
}

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "sys_terminal_launch",
        "description": (
            "Launch a named terminal (a tmux session) declared in the agent's terminals block. "
            "Then use sys_terminal_send to type into it and sys_terminal_read to see its screen; "
            "call sys_terminal_close when done."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                **_PAIR_PROPERTIES,
                "cwd": {
                    "type": "string",
                    "description": (
                        "Optional working directory, inside the terminal's own. Honored only if "
                        "the terminal spec sets allow_cwd_override: true."
                    ),
                },
                "sandbox": {
                    "type": "string",
                    "enum": ["none", "linux_bwrap"],
                    "description": (
                        "Optional sandbox override. Honored only if the terminal spec sets "
                        "allow_sandbox_override: true."
                    ),
                },
            },
            "required": ["terminal", "session"],
        },
    },
    {
        "type": "function",
        "name": "sys_terminal_send",
        "description": "Type text literally into a running terminal, then press keys.",
        "parameters": {
            "type": "object",
            "properties": {
                **_PAIR_PROPERTIES,
                "text": {"type": "string", "description": "Literal text to type (every character as given)."},
                "keys": {
                    "type": "string",
                    "description": (
                        "tmux key names pressed after the text, whitespace-separated, e.g. "
                        "'Enter', 'C-c', 'Tab', 'Escape', 'Up'. Defaults to 'Enter'; '' presses none."
                    ),
                    "default": "Enter",
                },
            },
            "required": ["terminal", "session"],
        },
    },
    {
        "type": "function",
        "name": "sys_terminal_read",
        "description": "Capture a terminal's visible screen, with optional scrollback above it.",
        "parameters": {
            "type": "object",
            "properties": {
                **_PAIR_PROPERTIES,
                "scrollback": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Lines of history to include above the visible rows (default 0).",
                },
            },
            "required": ["terminal", "session"],
        },
    },
    {
        "type": "function",
        "name": "sys_terminal_list",
        "description": "List this conversation's terminals with their running state and tmux sockets.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "type": "function",
        "name": "sys_terminal_close",
        "description": "Close a terminal: its tmux server and every process it started.",
        "parameters": {
            "type": "object",
            "properties": dict(_PAIR_PROPERTIES),
            "required": ["terminal", "session"],
        },
    },
]

"""Agent specs (CONTRACT §3): the YAML that a session bundle carries, parsed into typed values.

Parsing lives apart from the registry and the server so that both the in-process target and the HTTP
stack build terminals from the same declarations, and a bad spec is rejected with one clear message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class SpecError(ValueError):
    """An agent spec that cannot be used; the message says which field is wrong and why."""


@dataclass(frozen=True)
class TerminalSpec:
    """One entry of an agent's ``terminals:`` block."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    cwd: str = field(default_factory=os.getcwd)
    """Absolute working directory of the terminal's process."""
    scrollback: int = 10_000
    """History lines that tmux keeps (``history-limit``)."""
    allow_cwd_override: bool = False
    allow_sandbox_override: bool = False

    @property
    def command_line(self) -> str:
        """The command as ``list`` reports it."""
        return " ".join((self.command, *self.args))


@dataclass(frozen=True)
class AgentSpec:
    """A registered agent: its model endpoint and its declared terminals."""

    name: str
    prompt: str
    harness: str
    model: str
    api_key: str
    base_url: str
    cwd: str
    terminals: Mapping[str, TerminalSpec]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"'{where}' must be a mapping")
    return value


def _string(value: Any, where: str, *, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not value:
        raise SpecError(f"'{where}' must be a non-empty string")
    return value


def _boolean(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SpecError(f"'{where}' must be true or false")
    return value


def parse_terminal_spec(name: str, doc: Any, *, base_cwd: str) -> TerminalSpec:
    """Parse one ``terminals.<name>`` entry; relative ``cwd`` values resolve against ``base_cwd``."""
    where = f"terminals.{name}"
    body = _mapping(doc, where)
    command = _string(body.get("command"), f"{where}.command")
    raw_args = body.get("args") or []
    if not isinstance(raw_args, list) or not all(isinstance(a, str) for a in raw_args):
        raise SpecError(f"'{where}.args' must be a list of strings")
    scrollback = body.get("scrollback", 10_000)
    if isinstance(scrollback, bool) or not isinstance(scrollback, int) or scrollback < 0:
        raise SpecError(f"'{where}.scrollback' must be a non-negative integer")
    os_env = _mapping(body.get("os_env"), f"{where}.os_env")
    cwd_value = os_env.get("cwd", body.get("cwd"))
    cwd = base_cwd if cwd_value is None else _string(cwd_value, f"{where}.cwd")
    return TerminalSpec(
        name=name,
        command=command,
        args=tuple(raw_args),
        cwd=os.path.realpath(os.path.join(base_cwd, cwd)),
        scrollback=scrollback,
        allow_cwd_override=_boolean(body.get("allow_cwd_override"), f"{where}.allow_cwd_override"),
        allow_sandbox_override=_boolean(
            body.get("allow_sandbox_override"), f"{where}.allow_sandbox_override"
        ),
    )


def parse_agent_spec(doc: Any, *, base_cwd: str | None = None) -> AgentSpec:
    """Parse a whole agent spec (the YAML document of a bundle, already loaded)."""
    body = _mapping(doc, "spec")
    if not body:
        raise SpecError("the agent spec is empty")
    name = _string(body.get("name"), "name")
    executor = _mapping(body.get("executor"), "executor")
    auth = _mapping(executor.get("auth"), "executor.auth")
    os_env = _mapping(body.get("os_env"), "os_env")
    root = os.path.realpath(
        os.path.join(base_cwd or os.getcwd(), _string(os_env.get("cwd"), "os_env.cwd", default="."))
    )
    terminals_doc = _mapping(body.get("terminals"), "terminals")
    terminals = {}
    for term_name, term_doc in terminals_doc.items():
        if not isinstance(term_name, str) or not term_name:
            raise SpecError("terminal names must be non-empty strings")
        terminals[term_name] = parse_terminal_spec(term_name, term_doc, base_cwd=root)
    return AgentSpec(
        name=name,
        prompt=body.get("prompt") if isinstance(body.get("prompt"), str) else "",
        harness=_string(executor.get("harness"), "executor.harness", default="openai-agents"),
        model=_string(executor.get("model"), "executor.model"),
        api_key=_string(auth.get("api_key"), "executor.auth.api_key", default="mock-key"),
        base_url=_string(auth.get("base_url"), "executor.auth.base_url"),
        cwd=root,
        terminals=terminals,
    )

"""Shrunk failing programs, written out as regression tests.

When the machine finds a contract violation (and only then: a hang or a server that broke or cannot
be reached is a failure of the target, see ``stateful/test_machine.py``), Hypothesis shrinks it and replays the minimal program
once more (its "final" run), attaching each step to the exception's notes as a line of Python
(``state = DirectMachine()``, ``pairs_0 = state.start(...)``, ``state.teardown()``).
:func:`reported_program` picks those lines out; :func:`write_repro` turns them into a pytest file that replays
the same program against the same kind of target, through the ``repro_machine`` fixture of
``stateful/conftest.py``. The file fails while the bug is there and passes once it is fixed, so the
server's team can keep it (``stateful/repros/`` is collected by ``pytest stateful/``).

The program's values print as constructor calls of the machine's own argument types (``PairRef``,
``Decoration``, ``SendPlan``, ...); this module re-exports them, so a repro needs one import.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import re
import textwrap
from datetime import datetime, timezone
from pathlib import Path

from stateful import machine as _machine
from stateful import strategies as _strategies
from stateful.clauses import behind_of, clause_of

MAX_STEP_LINES = 200
"""The most lines one reported step is joined from."""
STEP = re.compile(r"^(?:\w+(?:, *\w+)* = )?state(?:\.\w+\(| = \w+\(\))")
"""A line of the program Hypothesis reports (and nothing of the notes around it)."""
BUNDLE_NAME = re.compile(r"[a-z]\w*_\d+")
"""A name Hypothesis gives a rule's result (``pairs_0``)."""
MACHINE = re.compile(r"[A-Z]\w*")
"""The class a reported program starts with (``state = SessionsMachine()``; never a builtin)."""
VALUE_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Name, ast.Load, ast.keyword,
               ast.UnaryOp, ast.USub, ast.UAdd, ast.Call)
"""What the values of a step's arguments are made of, as Hypothesis prints them: literals, bundle
names (``pairs_0``) and calls of the argument types (or ``float('nan')``); nothing else runs."""


class UnsafeStep(ValueError):
    """A line shaped like a step that is not one: something else than one call of a public method of
    ``state`` with printed values (what a server printed, never to be run)."""


def _argument_types() -> dict[str, type]:
    """The dataclasses whose reprs appear in a reported program, by name."""
    found: dict[str, type] = {}
    for module in (_machine, _strategies):
        for name, value in vars(module).items():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and not name.startswith("_"):
                found[name] = value
    return found


globals().update(_argument_types())
__all__ = ["reported_program", "write_repro", *sorted(_argument_types())]


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def check_step(line: str) -> str:
    """``line`` if it is a step as Hypothesis prints one (``[names = ]state.rule(key=value, ...)``,
    ``state = Machine()``), whose values are only literals, bundle names and calls of the argument
    types; else :class:`UnsafeStep`. Every line is checked before it is run or written as code: a
    server's output that got into a failure's notes must never become a step."""
    try:
        tree = ast.parse(line)
    except SyntaxError:
        raise UnsafeStep(f"a reported step is not one line of Python: {line[:300]!r}") from None
    statement = tree.body[0] if len(tree.body) == 1 else None
    targets: list[ast.expr] = []
    call = None
    if isinstance(statement, ast.Assign):
        targets, call = statement.targets, statement.value
    elif isinstance(statement, ast.Expr):
        call = statement.value
    if not isinstance(call, ast.Call) or not _names_only(targets):
        raise UnsafeStep(f"not a step: {line[:300]!r}")
    if len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id == "state":
        if (isinstance(call.func, ast.Name) and MACHINE.fullmatch(call.func.id) and not hasattr(builtins, call.func.id)
                and not call.args and not call.keywords):
            return line  # state = SomeMachine()
        raise UnsafeStep(f"not a step: {line[:300]!r}")
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "state"
            and not func.attr.startswith("_") and not call.args and (func.attr != "teardown" or not call.keywords)):
        raise UnsafeStep(f"not a step: {line[:300]!r}")
    allowed = set(_argument_types()) | {"float"}
    for node in (n for keyword in call.keywords for n in ast.walk(keyword.value)):
        if not isinstance(node, VALUE_NODES) or (isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id in allowed)):
            raise UnsafeStep(f"a step's argument is not a printed value: {line[:300]!r}")
    return line


def _names_only(targets: list[ast.expr]) -> bool:
    """Whether an assignment's targets are bundle names (``pairs_0 = ``, ``a_0, a_1 = ``) or ``state``:
    a step never rebinds anything else (``float``, an argument type)."""
    names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return all(isinstance(n, ast.Name) and (n.id == "state" or BUNDLE_NAME.fullmatch(n.id)) for n in names)


def _is_step(line: str) -> bool:
    try:
        check_step(line)
    except UnsafeStep:
        return False
    return True


def reported_program(failure: BaseException) -> list[str]:
    """The minimal program Hypothesis attached to ``failure`` (its notes), one line per step.

    A step whose arguments the pretty printer broke over several lines (the machine's own types
    print on one, a long list may not) is joined back into one line: the lines that follow it are
    taken until the step parses as Python (at most ``MAX_STEP_LINES``). A line that parses but is not
    a step (:func:`check_step`: e.g. ``state.teardown(open(...))``, which only a server's output
    could have put there) is left out.
    """
    lines = [line for note in getattr(failure, "__notes__", ()) for line in str(note).splitlines()]
    program: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not STEP.match(line):
            continue
        step, used = line, 0
        while not _parses(step) and used < MAX_STEP_LINES and i + used < len(lines):
            step += " " + lines[i + used].strip()
            used += 1
        if _parses(step):
            i += used
            if not _is_step(step):
                continue
        else:
            step = line  # kept as reported: render_repro refuses a program that does not parse
        if step.startswith("state = "):
            program = []  # a new run of the program starts
        program.append(step)
    return program


def _summary(failure: BaseException) -> str:
    text = f"{type(failure).__name__}: {failure}".strip()
    lines = [line for line in text.splitlines() if line.strip()][:12]
    return "\n".join(lines)


def render_repro(target: str, program: list[str], failure: BaseException) -> str:
    """The text of a pytest file that replays ``program`` (as reported) against ``target``."""
    if not program or not program[0].startswith("state = "):
        raise ValueError("no reported program to write (did the final run report its steps?)")
    body = [line for line in program[1:] if line != "state.teardown()"]
    for line in program:
        check_step(line)  # a ValueError (UnsafeStep) for a line that is not one
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    summary = textwrap.indent(_summary(failure).replace('"""', "'''").replace("\\", "\\\\"), "    ")
    steps = textwrap.indent("\n".join(body) or "pass", "        ")
    key = getattr(failure, "key", None) if clause_of(failure) else None
    finding_line = f"\nFINDING = {key!r}  # its clause and cause (docs/campaigns.md)" if key else ""
    finding_arg = ", finding=FINDING" if key else ""
    behind = behind_of(failure)
    if behind:
        finding_line += (f"\nBEHIND = {behind!r}  # known violations its program goes on past to meet it "
                         "(docs/campaigns.md, \"A finding behind another\")")
        finding_arg += ", behind=BEHIND"
    return f'''"""A contract violation found by `pytest stateful/` on {stamp} (target: {target}).

Hypothesis shrank the failing program to the steps below; replaying it broke the contract so:

{summary}

Replay: `pytest stateful/` collects it where it was written (stateful/repros/); from the stateful
project's root, `./dev replay <this file>` runs it wherever it is; in an environment where stateful is
installed, `python -m pytest -p stateful.e2e -p stateful.pytest_machine <this file>` from outside the project.
Add the options for an external server if the target is one (`--server-url U --mock-llm-url M --runner-id R`).
It fails while the bug is there and passes once it is fixed: keep it as a regression test.
"""

from stateful.repro import *  # noqa: F403 (the argument types the program's values print as)

TARGET = {target!r}{finding_line}


def test_repro(repro_machine):
    def program(state):
{steps}

    repro_machine(TARGET, program{finding_arg})
'''


def write_repro(directory: Path, target: str, failure: BaseException) -> Path:
    """Write the repro of ``failure`` into ``directory`` (created if missing), named by the clause it
    breaks, its cause and its digest: ``test_repro_<target>_<clause>[_<cause>]_<digest>.py`` (the
    finding's key, :mod:`stateful.causes`, with its dots, dashes and ``@`` as underscores; no clause
    part for a failure that names none)."""
    program = reported_program(failure)
    clause = clause_of(failure) and getattr(failure, "key", None)
    part = re.sub(r"\W", "_", clause) + "_" if clause else ""
    text = render_repro(target, program, failure)
    digest = hashlib.sha256("\n".join([target, *program]).encode()).hexdigest()[:10]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"test_repro_{target}_{part}{digest}.py"
    path.write_text(text, encoding="utf-8")
    return path

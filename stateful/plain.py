"""Plain repros: a shrunk failure on the sessions target as a seed-style test a server's team can keep.

The machine repro (``stateful.repro``) replays the machine's program and needs this package to run.
A plain repro needs only pytest, httpx and a conftest that provides the CONTRACT §6 helpers and
fixtures (``from tests.e2e.conftest import ...`` by default; the module is the writer's choice): it
registers an agent with the same terminals, scripts each turn's tool calls verbatim into the mock
LLM's queue, posts a user message per turn, reads the outputs from the session's items and asserts
what the contract fixes about them, each assertion named by its clause and the program step it
comes from (``stateful.expect`` decides what to assert). The last assertion is the broken clause's:
the file fails against the buggy server for that clause and passes once it is fixed.

How: the shrunk program is replayed once more with a :class:`~stateful.recording.Recorder` on the
target (:func:`record_program`); the recording must break the same clause, else nothing is written.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hypothesis import note

from stateful import plain_checks, repro
from stateful.clauses import CLAUSES, clause_of
from stateful.expect import Block, Check, NoPlainForm, Plan, plan
from stateful.minimize import invariants_of, rule_groups, run_once
from stateful.model import PANE_ROWS, UNEXPLAINED_ORDER
from stateful.recording import Op, Recorder

__all__ = ["DEFAULT_CONFTEST", "NoPlainForm", "record_program", "render", "write_plain_repro", "file_name"]

DEFAULT_CONFTEST = "tests.e2e.conftest"
RACE_RECORDINGS = 5
"""Replays that may record the plain repro of a race (concurrent calls that no order explained) until
one breaks its clause again: a campaign against omnigent once got no plain repro of its concurrent
launches because the one recording replay passed."""
"""Where a server's suite keeps its seed-style helpers (omnigent's layout)."""
HELPERS = ("configure_mock_llm", "register_inline_agent", "create_runner_bound_session",
           "send_user_message_to_session", "poll_session_until_terminal")
FIXTURES = ("live_server", "http_client", "live_runner_id", "harness_name", "model_name", "mock_llm_server_url")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def record_program(machine: type, target: Any, program: Sequence[str]) -> tuple[BaseException | None, list[Op]]:
    """Replay ``program`` once on ``machine`` (bound to ``target``, a SessionsTarget) with a recorder
    on the target: the failure it raised (None if none) and every operation, each with its step."""
    recorder = Recorder()
    namespace = {name: getattr(repro, name) for name in repro.__all__}
    try:
        groups = rule_groups([repro.check_step(line) for line in program], invariants_of(machine))
    except repro.UnsafeStep as unsafe:  # nothing of it runs: a failure, of no clause
        return unsafe, []

    def run(state: Any) -> None:
        note(f"state = {type(state).__name__}()")
        scope = dict(namespace, state=state)
        try:
            for number, line in ((n, x) for n, group in enumerate(groups, 1) for x in group):
                if line == groups[number - 1][0]:  # the rule's line (by position: a program may repeat one)
                    recorder.step = (number, line)
                try:
                    exec(line, scope)  # noqa: S102 - a step (repro.check_step: one rule call, printed values)
                finally:
                    note(line)
        finally:  # what follows, after a failing step too, is the machine's teardown
            recorder.step = (len(groups) + 1, "state.teardown()")

    target.recorder = recorder
    try:
        run_once(machine, run)
    except Exception as failure:  # noqa: BLE001 - judged by the caller (an interrupt ends the run: it propagates)
        return failure, recorder.ops
    finally:
        target.recorder = None
    return None, recorder.ops


def file_name(clause: str, program: Sequence[str]) -> str:
    """``test_<clause>_<digest>.py``, the clause made an identifier (``items.pagination`` ->
    ``items_pagination``)."""
    digest = hashlib.sha256("\n".join(["plain", *program]).encode()).hexdigest()[:10]
    return f"test_{re.sub(r'[^0-9A-Za-z_]', '_', clause)}_{digest}.py"


def write_plain_repro(directory: Path, machine: type, target: Any, failure: BaseException,
                      conftest: str = DEFAULT_CONFTEST, tries: int | None = None) -> Path:
    """Record the failure's program once more and write its plain repro into ``directory``.
    Raises :class:`NoPlainForm` (with the reason) when it cannot: no clause, a replay that does not
    break the same clause, or a clause this writer has no plain assertion for. ``tries``: recording
    replays until one breaks the clause (more than one for a race, which fails when the timing lets it;
    by default ``RACE_RECORDINGS`` for concurrent calls that no order explained, else 1)."""
    if tries is None:
        tries = RACE_RECORDINGS if UNEXPLAINED_ORDER in str(failure) else 1
    if not _MODULE.match(conftest):
        raise ValueError(f"--plain-conftest {conftest!r} is not a dotted module name")
    clause = clause_of(failure)
    program = repro.reported_program(failure)
    if not clause or not program:
        raise NoPlainForm("the failure names no clause or has no reported program")
    replayed: BaseException | None = None
    ops: list[Op] = []
    for _ in range(max(1, tries)):
        replayed, ops = record_program(machine, target, program)
        if replayed is not None and clause_of(replayed) == clause:
            break
    if replayed is None or clause_of(replayed) != clause:
        got = f"{type(replayed).__name__}: {str(replayed).splitlines()[0]}" if replayed else "it passed"
        raise NoPlainForm(f"the recording replay did not break {clause} again ({got[:300]})")
    steps = [group[0] for group in rule_groups(program, invariants_of(machine))]
    text = render(plan(ops, clause), steps, failure, conftest, target.where, file_name(clause, program))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(clause, program)
    path.write_text(text, encoding="utf-8")
    return path


# -- rendering ----------------------------------------------------------------------------------------

def _comment(text: str, indent: str) -> str:
    return "\n".join(f"{indent}# {line}" for line in textwrap.wrap(text, 100, break_long_words=True) or [""])


def _steps_literal(steps: Sequence[Sequence[Any]]) -> str:
    rows = ",\n".join("        [" + ", ".join(f"({c.tool!r}, {c.arguments!r})" for c in step) + "]" for step in steps)
    return "[\n" + rows + ",\n    ]"


def _outputs(check: Check, s: int, c: int) -> str:
    """The expression of what ``out`` is for ``check`` of call ``c`` of step ``s`` (``outs[s][c]``,
    or the list of the outputs of the concurrent calls it checks together)."""
    if not check.calls:
        return f"outs[{s}][{c}]"
    first, last = check.calls[0], check.calls[-1]
    if list(check.calls) == list(range(first, last + 1)):
        return f"outs[{s}][{first}:{last + 1}]"
    return f"[outs[{s}][i] for i in {check.calls!r}]"


_SAID: dict[str, tuple[str, str]] = {
    # kind: (its comment where the block is the program's final check, its comment otherwise)
    "open": ("agent session {agent}",) * 2,
    "delete": ("session.delete (§2.9): DELETE closes all of the session's terminals, so every process noted for "
               "them is gone (polled: the contract gives DELETE no bound)",
               "DELETE the session (the machine's teardown)"),
    "capture": ("launch.server-runs (§1 launch): while a terminal lives, its tmux server runs and holds its pane",
                "note the processes of the terminals that now live (their tmux servers answer)"),
    "gone": ("close.nothing-left (§1 launch): once close returns, the terminal's tmux server and every process "
             "of it are gone (checked at once)",) * 2,
    "events": ("the resource events (§2.4): each launched records one created event, each closed (or exit) one "
               "deleted event for the same id; ids are terminal_<safe(name)>_<safe(key)>[_n], unique among the "
               "session's live terminals",) * 2,
    "pagination": ("items.pagination (§2.7): following after=last_id while has_more yields every item once, in "
                   "order, each page's first_id/last_id naming its ends",) * 2,
    "view": ("view.terminals (§2.8): /resources/terminals shows the session's running terminals (those list "
             "shows running), nothing else", "the machine compared /resources/terminals with list"),
}
"""What each block that is not a turn says: the clause it checks, or what it does for later checks."""


def _calls(block: Block, a: str, number: int) -> list[str]:
    """The calls of a block that is not a turn (its kind is a key of :data:`_SAID`)."""
    n = block.agent
    match block.kind:
        case "open":
            return [f"{a} = Agent(http_client, mock_llm_server_url, live_runner_id, harness_name, f'{{model_name}}-{n}')"]
        case "delete":
            gone = f"{a}.check_gone({block.expected!r}, 'session.delete: step {number}', within=POLL_DEADLINE)"
            return [f"{a}.delete()"] + ([gone] if block.final else [])
        case "capture":
            return [f"{a}.capture({block.expected!r}, sock{n}, 'launch.server-runs: step {number}')"]
        case "gone":
            return [f"{a}.check_gone({block.expected!r}, 'close.nothing-left: step {number}')"]
        case "events":
            return [f"{a}.check_events({block.launched!r}, {block.ended!r}, base{n}, 'step {number}')"]
        case "pagination":
            return [f"{a}.check_pagination('items.pagination: step {number}')"]
        case _:  # "view"
            return [f"{a}.check_view({sorted(block.expected)!r}, base{n}, 'view.terminals: step {number}')"]


def _said(block: Block, a: str, number: int) -> tuple[str, list[str]] | None:
    """What a block that is not a turn says (its comment) and does (its calls); None for a turn."""
    if block.kind not in _SAID:
        return None
    final, otherwise = _SAID[block.kind]
    return (final if block.final else otherwise).replace("{agent}", str(block.agent)), _calls(block, a, number)


def _block(block: Block) -> list[str]:
    a = f"a{block.agent}"
    number, line = block.step
    where = f"step {number}: {line}" if number else "before the first step"
    lines = [""]
    said = _said(block, a, number)
    if said is not None:
        what, calls = said
        return lines + [_comment(f"{where} -- {what}", "    ")] + [f"    {call}" for call in calls]
    steps = _steps_literal(block.steps)
    checks = []
    for (s, c), found in sorted(block.checks.items()):
        call = block.steps[s][c]
        for k in found:
            short = call.tool.removeprefix("sys_terminal_")
            together = f"{len(k.calls)} concurrent " if k.calls else ""
            message = f"{k.clause}: step {number}, {together}{short}({call.arguments[:80]}) -> "
            checks.append(f"    out = {_outputs(k, s, c)}")
            checks.append(f"    assert {k.expr}, {message!r} + repr(out)[:2000]")
            if k.then:
                checks.append(f"    {k.then}")
    if block.kind == "rows":
        lines.append(_comment(f"{where} -- read.rows-exact (§1 read): a read holds exactly min(N, H) + {PANE_ROWS} rows, "
                              "H the lines of history its pane holds (tmux's #{history_size}, read before and after "
                              "the turn: the same both times, so the pane held still meanwhile)", "    "))
        lines += [f"    sock, base = sock{block.agent}, base{block.agent}",
                  "    for _ in polled(POLL_DEADLINE):",
                  f"        held = {{p: history_size(sock[p]) for p in {block.held!r}}}",
                  f"        outs = {a}.turn({textwrap.indent(steps, '        ').lstrip()})",
                  "        if held == {p: history_size(sock[p]) for p in held}:",
                  "            break",
                  "    assert None not in held.values() and held == {p: history_size(sock[p]) for p in held}, (",
                  (f"        f'step {number}: the panes never held still for {{POLL_DEADLINE}} s (history sizes {{held}}), "
                   "or tmux does not answer at their sockets: read.rows-exact cannot be judged')"),
                  *checks]
        return lines
    if block.kind == "poll":
        kind = "the broken clause, polled as the machine did" if block.final else "an 'eventually', polled"
        lines.append(_comment(f"{where} -- {kind} (the machine ran this turn {block.repeats} times)", "    "))
        conditions = ", ".join(f"(lambda out: {k.expr})({_outputs(k, s, c)})"
                               for (s, c), found in sorted(block.checks.items()) for k in found)
        lines += [f"    sock, base = sock{block.agent}, base{block.agent}",
                  "    for _ in polled(POLL_DEADLINE):  # until it holds, or two turns, the last begun after the deadline",
                  f"        outs = {a}.turn({textwrap.indent(steps, '        ').lstrip()})",
                  f"        if all([{conditions}]):",
                  "            break",
                  *checks]
        return lines
    what = "the step that broke the contract" if block.final else "setup" if not block.checks else "checked"
    lines.append(_comment(f"{where} -- {what}", "    "))
    lines.append(f"    outs = {a}.turn({steps})")
    if block.first_list:
        lines.append(f"    base{block.agent} = [(e['terminal'], e['session']) for e in outs[0][0]]  # the server's own terminals")
    if checks:
        lines.append(f"    sock, base = sock{block.agent}, base{block.agent}")
        lines += checks
    return lines


def _check_kinds(p: Plan) -> set[str]:
    """Which checks beyond outputs the repro makes (keys of ``plain_checks.NEEDS``)."""
    return {"events" if b.kind == "events" else "rows" if b.kind == "rows" else "view" if b.kind == "view" else "probe"
            for b in p.blocks if b.kind in ("events", "rows", "capture", "gone", "view")
            or (b.kind == "delete" and b.final)}


_MODULES = {"walk": (), "events": ("re",), "view": ("re",), "probe": ("os", "subprocess"), "rows": ("os", "subprocess")}
"""The stdlib modules each kind of check's copied functions import (besides json and time)."""


_METHODS = (
    ("events", '''
    def check_events(self, launched: list, ended: list, base: list, message: str) -> None:
        """The session's resource events (§2.4) against every launch that said 'launched' and every
        terminal closed; missing ones are waited for (events may follow the calls that made them)."""
        for _ in polled(POLL_DEADLINE):
            events = [i for i in self.items(1000) if i.get("type") == "resource_event"]
            problem = events_problem(events, launched, ended, base)
            if not (problem or "").startswith("events.recorded"):
                break
        assert problem is None, f"{problem} ({message})"
'''),
    ("probe", '''
    def capture(self, pairs: list, sock: dict, message: str) -> None:
        """§1 launch: each pair's private tmux server (at the socket its launch returned) runs and holds
        a pane. Its processes are noted, to show later that they are gone."""
        for pair in map(tuple, pairs):
            assert os.path.isdir(os.path.dirname(sock[pair])), (
                f"setup: {sock[pair]!r} is no path on this machine: this test reads tmux and /proc, so it runs "
                "on the server's machine")
            found = terminal_processes(sock[pair])
            assert found, f"{message}: launch said {pair} runs at {sock[pair]}, but no tmux server with a pane answers there"
            self.noted[pair] = (sock[pair], found)

    def check_gone(self, pairs: list, message: str, within: float = 0.0) -> None:
        """No tmux server answers at the pairs' sockets and none of their noted processes runs (at
        once, or within ``within`` seconds: polled)."""
        for _ in polled(within) if within else range(1):
            left = {pair: leftovers(*self.noted[tuple(pair)]) for pair in pairs}
            left = {pair: what for pair, what in left.items() if what}
            if not left:
                break
        assert not left, f"{message}: " + "; ".join(f"{pair}: {what}" for pair, what in left.items())
'''),
)
"""The Agent methods each kind of check needs (inserted into the template as values: braces single)."""


def render(p: Plan, steps: Sequence[str], failure: BaseException, conftest: str, where: str, name: str) -> str:
    """The text of the plain repro of plan ``p`` (``steps``: the shrunk program's rule lines,
    numbered as the comments number them; ``name``: the file's)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    first = str(failure).splitlines()[0] if str(failure) else type(failure).__name__
    rule = CLAUSES[p.clause].rule if p.clause in CLAUSES else ""
    section = CLAUSES[p.clause].section if p.clause in CLAUSES else ""
    shown = "\n".join(f"    {n}. {line}" for n, line in enumerate(steps, 1))
    body: list[str] = []
    for n in range(p.agents):
        body.append(f"    sock{n}: dict = {{}}  # agent {n}: (terminal, session) -> the tmux_socket its launch returned")
    for block in p.blocks:
        body += _block(block)
    name = Path(name).stem
    summary = first.replace("\\", "\\\\").replace('"""', "'''")
    kinds = _check_kinds(p) | {"walk"}  # every repro reads the items (Agent.items)
    imports = "".join(f"import {module}\n" for module in sorted({m for kind in kinds for m in _MODULES[kind]}))
    typing = ("from collections import Counter\n" if "events" in kinds else "") + "from typing import Any\n"
    methods = "".join(text for kind, text in _METHODS if kind in kinds)
    noted = "        self.noted: dict = {}  # (terminal, session) -> (its socket, its processes): see capture()\n" \
        if "probe" in kinds else ""
    helpers = ("\n\n" + plain_checks.source(kinds)).rstrip("\n") + "\n"
    return f'''"""Broken clause {p.clause} ({section}): {rule}.

Found by the stateful tester on {stamp} against {where}; its shrunk program was:
{shown}

The machine reported:
    {summary[:600]}

Each turn below scripts the calls the machine made (verbatim) into the mock LLM's queue, posts one
user message, waits for the turn to end and reads every output back from the session's items; the
assertions are what the contract fixes about the outputs, the last one the clause that broke. It
fails while the bug is there and passes once it is fixed. It needs pytest, httpx and a conftest
module providing the CONTRACT §6 helpers and fixtures ({conftest}).
"""

from __future__ import annotations

import json
{imports}import time
{typing}
import httpx

from {conftest} import (  # noqa: F401 (fixtures are used by name)
    configure_mock_llm,
    create_runner_bound_session,
    harness_name,
    http_client,
    live_runner_id,
    live_server,
    mock_llm_server_url,
    model_name,
    poll_session_until_terminal,
    register_inline_agent,
    send_user_message_to_session,
)

TERMINALS = {p.terminals!r}
"""The agent spec's terminals, as the tester declared them."""
TURN_TIMEOUT = 120.0
POLL_DEADLINE = 15.0
"""How long an "eventually" is polled (the tester's default)."""
REPLY_SHOWS = 2.0
"""How long a completed turn's outputs are waited for among its items (the tester's default)."""
PAGE_SIZES = (7, 2, 3, 1)


class Agent:
    """One agent session: its own agent (TERMINALS), its own mock-LLM queue (model), its turns."""

    def __init__(self, client: httpx.Client, mock_url: str, runner_id: str, harness: str, model: str) -> None:
        self.client, self.mock_url, self.model, self.turns = client, mock_url, model, 0
        name = register_inline_agent(client, name=f"repro-{{model}}", harness=harness, model=model, profile="",
                                     prompt="You are a terminal test assistant.", mock_llm_base_url=f"{{mock_url}}/v1",
                                     extra_config={{"terminals": TERMINALS}})
        self.session_id = create_runner_bound_session(client, agent_name=name, runner_id=runner_id)
{noted}
    def turn(self, steps: list) -> list:
        """One turn: each step is one model reply's tool calls; the parsed outputs, per step and call."""
        self.turns += 1
        ids = [[f"call_{{self.turns}}_{{s}}_{{c}}" for c in range(len(step))] for s, step in enumerate(steps)]
        replies = [{{"tool_calls": [{{"call_id": i, "name": n, "arguments": a}} for i, (n, a) in zip(cids, step)]}}
                   for cids, step in zip(ids, steps)]
        configure_mock_llm(self.mock_url, [*replies, {{"text": f"turn {{self.turns}} done"}}], key=self.model)
        response_id = send_user_message_to_session(self.client, session_id=self.session_id, content=f"turn {{self.turns}}")
        outcome = poll_session_until_terminal(self.client, session_id=self.session_id, response_id=response_id,
                                              timeout=TURN_TIMEOUT)
        assert outcome["status"] == "completed", f"turn {{self.turns}} ended {{outcome}}"
        for _ in polled(REPLY_SHOWS):  # §2.6: a turn's last items may show just after its status says it ended
            outputs = {{i["call_id"]: i["output"] for i in self.items(1000) if i.get("type") == "function_call_output"}}
            if all(i in outputs for cids in ids for i in cids):
                break
        return [[_parsed(outputs.get(i)) for i in cids] for cids in ids]

    def items(self, limit: int) -> list:
        """Every item of the session, following the pages (walk_items: a walk that would never end fails)."""

        def page(params: dict) -> Any:
            reply = self.client.get(f"/v1/sessions/{{self.session_id}}/items", params=params)
            assert reply.status_code == 200, reply.text
            return reply.json()

        return walk_items(page, limit)

    def check_pagination(self, message: str) -> None:
        whole = [i["id"] for i in self.items(1000)]
        for size in PAGE_SIZES:
            seen: list = []
            params: dict = {{"order": "asc", "limit": size}}
            for _ in range(10_000):
                body = self.client.get(f"/v1/sessions/{{self.session_id}}/items", params=params).json()
                ids = [i["id"] for i in body["data"]]
                if ids:
                    assert (body["first_id"], body["last_id"]) == (ids[0], ids[-1]), (
                        f"{{message}}: a page of limit {{size}} holds {{ids[0]}}..{{ids[-1]}} but says "
                        f"first_id {{body['first_id']}}, last_id {{body['last_id']}}")
                seen += ids
                if not body.get("has_more"):
                    break
                assert ids, f"{{message}}: an empty page says has_more"
                params["after"] = body["last_id"]
            assert seen == whole[: len(seen)] and len(seen) >= len(whole), (
                f"{{message}}: pages of {{size}} yield {{len(seen)}} items, one page of 1000 yields {{len(whole)}}")

    def check_view(self, running: list, base: list, message: str) -> None:
        """/resources/terminals against the pairs that must be running (the server's own, ``base``,
        may show too)."""
        reply = self.client.get(f"/v1/sessions/{{self.session_id}}/resources/terminals")
        assert reply.status_code == 200, reply.text
        problem = view_problem(reply.json()["data"], running, base)
        assert problem is None, f"{{message}}: {{problem}}"

    def delete(self) -> None:
        reply = self.client.delete(f"/v1/sessions/{{self.session_id}}")
        assert reply.status_code in (200, 202, 204), reply.text
{methods}

def _parsed(output):
    try:
        return json.loads(output)
    except (TypeError, ValueError):
        return output
{helpers}

def {name}(http_client, live_runner_id, harness_name, model_name, mock_llm_server_url):
{chr(10).join(body)}
'''

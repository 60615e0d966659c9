"""The ``http`` section of ``./dev bench``: the same tool calls in-process, through the agent loop,
and through the sessions API, in one run, so the cost of each layer is visible side by side.

Layers measured (same machine, same run):

* ``in-process``: ``tools.call_tool`` on a ``TerminalRegistry`` (no HTTP at all);
* ``agent loop``: ``agent.run_turn`` in-process, the model reached over HTTP (the mock LLM);
* ``sessions API, in-process stack``: a client in the same process as the ``EmbeddedStack`` (as
  the state machine runs it): a user message over HTTP, the turn run by the server, polled until it
  ends with the §6 helpers, i.e. what a client of the contract sees;
* ``sessions API, serve process``: the same client against ``python -m stateful serve`` in its own
  process (no GIL shared between client and server).

Every measurement starts from a fresh session (each model call carries the whole conversation, so
history length matters). Tools: ``sys_terminal_list`` (registry only, no tmux) and
``sys_terminal_send`` (one tmux command per call; it types ``x`` and erases it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from stateful.client import (
    HEADERS,
    configure_mock_llm,
    create_runner_bound_session,
    poll_session_until_terminal,
    register_inline_agent,
    send_user_message_to_session,
)

TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "sys_terminal_list": {},
    "sys_terminal_send": {"terminal": "bash", "session": "bench", "text": "x", "keys": "BSpace"},
}
LAUNCH = {
    "tool_calls": [
        {"call_id": "l", "name": "sys_terminal_launch", "arguments": json.dumps({"terminal": "bash", "session": "bench"})}
    ]
}


@dataclass(frozen=True)
class Figure:
    layer: str
    workload: str
    shape: str
    samples: list[float]
    """Seconds per unit (per turn, or per tool call averaged over the turn that made it)."""


def _timed(work: Callable[[Any], Any], repeats: int, setup: Callable[[], Any], units: int = 1) -> list[float]:
    """``repeats`` runs of ``work(setup())`` (setup not timed); each run gives ``units`` samples of
    its time divided by ``units`` (a turn's calls cannot be timed one by one from outside)."""
    samples: list[float] = []
    for _ in range(repeats):
        prepared = setup()
        started = time.perf_counter()
        work(prepared)
        samples += [(time.perf_counter() - started) / units] * units
    return samples


def _each(work: Callable[[Any], Any], count: int, setup: Callable[[], Any]) -> list[float]:
    """``count`` runs of ``work(prepared)`` on one ``setup()``, each timed on its own."""
    from stateful.bench import timed

    prepared = setup()
    return timed(count, lambda _: work(prepared))


MAX_REPLIES_PER_TURN = 100
"""Below the stack's cut-off of a turn (200 model calls): longer workloads take several turns."""


def _turns(tool: str, calls: int, per_reply: int) -> list[list[dict[str, Any]]]:
    """Mock-queue scripts, one per turn, that make ``calls`` calls of ``tool``, ``per_reply`` at a time."""
    arguments = json.dumps(TOOL_ARGUMENTS[tool])
    replies = [
        {"tool_calls": [{"call_id": f"c{r}_{i}", "name": tool, "arguments": arguments} for i in range(per_reply)]}
        for r in range(calls // per_reply)
    ]
    return [
        replies[start:start + MAX_REPLIES_PER_TURN] + [{"text": "done"}]
        for start in range(0, len(replies), MAX_REPLIES_PER_TURN)
    ]


def _shape(per_reply: int) -> str:
    return "1 call per reply" if per_reply == 1 else f"{per_reply} calls per reply"


class HttpTarget:
    """A contract server reached only over HTTP, through the §6 helpers."""

    def __init__(self, server_url: str, mock_url: str, runner_id: str) -> None:
        self.mock_url, self.runner_id = mock_url, runner_id
        self.client = httpx.Client(base_url=server_url, headers=HEADERS, timeout=60)
        self.model = f"bench-{uuid.uuid4().hex[:8]}"
        self.agent = register_inline_agent(
            self.client, name=f"bench-{uuid.uuid4().hex[:8]}", harness="openai-agents", model=self.model,
            profile="", prompt="bench", mock_llm_base_url=f"{mock_url}/v1",
            extra_config={"terminals": {"bash": {"args": ["--norc", "--noprofile"]}}},
        )

    def turn(self, session_id: str, entries: list[dict[str, Any]]) -> None:
        configure_mock_llm(self.mock_url, entries, key=self.model)
        response_id = send_user_message_to_session(self.client, session_id=session_id, content="bench")
        outcome = poll_session_until_terminal(self.client, session_id=session_id, response_id=response_id, timeout=300)
        assert outcome["status"] == "completed", outcome

    def fresh_session(self) -> str:
        """A new session with ``bash:bench`` launched (and the model client warmed up)."""
        session_id = create_runner_bound_session(self.client, agent_name=self.agent, runner_id=self.runner_id)
        self.turn(session_id, [LAUNCH, {"text": "ready"}])
        return session_id

    def close(self) -> None:
        self.client.close()


def measure_sessions_api(target: HttpTarget, layer: str, *, calls: int, turns: int, repeats: int) -> list[Figure]:
    figures = [Figure(layer, "turn", "text reply only", _each(lambda sid: target.turn(sid, [{"text": "hi"}]), turns, target.fresh_session))]
    for tool in TOOL_ARGUMENTS:
        for per_reply in (1, 10):
            scripts = _turns(tool, calls, per_reply)
            samples = _timed(lambda sid: [target.turn(sid, e) for e in scripts], repeats, target.fresh_session, calls)
            figures.append(Figure(layer, tool, _shape(per_reply), samples))
    return figures


def measure_in_process(stack: Any, target: HttpTarget, *, calls: int, turns: int, repeats: int) -> list[Figure]:
    """Direct tool calls and the agent loop, on terminals of sessions that ``target`` created."""
    from stateful.reference.agent import LoopSettings, OpenAIModel, TurnControl, run_turn
    from stateful.reference.tools import TOOL_SCHEMAS, ToolContext, call_tool

    def fresh_context() -> ToolContext:
        session_id = target.fresh_session()
        spec = stack.service.get(session_id).agent.spec
        return ToolContext(registry=stack.registry, session_id=session_id, terminals=spec.terminals)

    model = OpenAIModel(
        base_url=f"{stack.mock_llm_url}/v1", api_key="mock-key", model=target.model, instructions="bench",
        tools=TOOL_SCHEMAS, settings=LoopSettings(),
    )

    def loop_turn(context: ToolContext, entries: list[dict[str, Any]]) -> None:
        stack.mock.state.configure(target.model, entries)
        result = run_turn(
            model=model,
            conversation=[{"type": "message", "role": "user", "content": "bench"}],
            run_tool=lambda name, arguments: call_tool(name, arguments, context),
            record=lambda kind, fields: None,
            control=TurnControl(),
            max_model_calls=10_000,
        )
        assert result.status == "completed", result

    figures = []
    try:
        figures.append(Figure("agent loop", "turn", "text reply only", _each(lambda ctx: loop_turn(ctx, [{"text": "hi"}]), turns, fresh_context)))
        for tool in TOOL_ARGUMENTS:
            arguments = json.dumps(TOOL_ARGUMENTS[tool])
            samples = _each(lambda ctx: call_tool(tool, arguments, ctx), calls, fresh_context)
            figures.append(Figure("in-process", tool, "call_tool", samples))
            for per_reply in (1, 10):
                scripts = _turns(tool, calls, per_reply)
                samples = _timed(lambda ctx: [loop_turn(ctx, e) for e in scripts], repeats, fresh_context, calls)
                figures.append(Figure("agent loop", tool, _shape(per_reply), samples))
    finally:
        model.close()
    return figures


@contextmanager
def serve_process(env: Mapping[str, str] | None = None) -> Iterator[tuple[str, str, str]]:
    """``python -m stateful serve`` in its own process (``env``: its environment, e.g. with
    ``STATEFUL_FAULTS``; default this one's): its JSON line, until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stateful", "serve"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        yield info["server_url"], info["mock_llm_url"], info["runner_id"]
    finally:
        process.terminate()
        process.wait(timeout=60)


def measure(*, calls: int = 100, turns: int = 30, repeats: int = 3) -> list[Figure]:
    from stateful.reference.stack import EmbeddedStack

    figures: list[Figure] = []
    with EmbeddedStack() as stack:
        target = HttpTarget(stack.server_url, stack.mock_llm_url, stack.runner_id)
        try:
            figures += measure_in_process(stack, target, calls=calls, turns=turns, repeats=repeats)
            figures += measure_sessions_api(
                target, "sessions API, in-process stack", calls=calls, turns=turns, repeats=repeats
            )
        finally:
            target.close()
    with serve_process() as (server_url, mock_url, runner_id):
        target = HttpTarget(server_url, mock_url, runner_id)
        try:
            figures += measure_sessions_api(
                target, "sessions API, serve process", calls=calls, turns=turns, repeats=repeats
            )
        finally:
            target.close()
    order = {"in-process": 0, "agent loop": 1, "sessions API, in-process stack": 2, "sessions API, serve process": 3}
    workloads = {"turn": 0, **{tool: i + 1 for i, tool in enumerate(TOOL_ARGUMENTS)}}
    return sorted(figures, key=lambda f: (workloads[f.workload], order[f.layer], f.shape))


LAYER_LABELS = {
    "in-process": "call_tool",
    "agent loop": "loop",
    "sessions API, in-process stack": "HTTP (in-proc stack)",
    "sessions API, serve process": "HTTP (serve process)",
}


def section(options: Any) -> list[Any]:
    """Rows for ``stateful.bench`` (its ``http`` section): ``options.calls`` tool calls per workload
    (rounded down to a multiple of 10), at most 50 turns for the turn rows, 3 repeats per workload."""
    from stateful.bench import Row

    calls = max(10, options.calls // 10 * 10)
    rows = []
    for figure in measure(calls=calls, turns=min(50, calls), repeats=3):
        what = figure.workload.removeprefix("sys_terminal_")
        if figure.shape.endswith("per reply"):
            what += f" {figure.shape.split()[0]}/reply"
        note = {"turn": "per turn; one model call"}.get(figure.workload, "")
        if figure.shape.endswith("per reply"):
            note = "per call = a turn's time / its calls"
        rows.append(Row("http", f"{what} via {LAYER_LABELS[figure.layer]}", figure.samples, note))
    return rows


if __name__ == "__main__":
    from stateful.bench import main

    sys.exit(main(["--only", "http", *sys.argv[1:]]))

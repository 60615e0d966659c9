"""HTTP figures for ``./dev bench``: the same tool calls in-process, through the agent loop, and
through the sessions API, in one run, so the cost of each layer is visible side by side.

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
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from stateful.e2e import (
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
    rate: float
    unit: str


def _timed(work: Callable[[Any], Any], repeats: int, setup: Callable[[], Any]) -> float:
    """Median wall time of ``repeats`` runs of ``work(setup())``; the setup is not timed."""
    times = []
    for _ in range(repeats):
        prepared = setup()
        started = time.perf_counter()
        work(prepared)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _replies(tool: str, replies: int, per_reply: int) -> list[dict[str, Any]]:
    arguments = json.dumps(TOOL_ARGUMENTS[tool])
    return [
        {"tool_calls": [{"call_id": f"c{r}_{i}", "name": tool, "arguments": arguments} for i in range(per_reply)]}
        for r in range(replies)
    ] + [{"text": "done"}]


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
            profile="", prompt="bench", mock_llm_base_url=mock_url,
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
    figures = []
    seconds = _timed(lambda sid: [target.turn(sid, [{"text": "hi"}]) for _ in range(turns)], repeats, target.fresh_session)
    figures.append(Figure(layer, "text-only turns", "1 model call per turn", turns / seconds, "turns/s"))
    for tool in TOOL_ARGUMENTS:
        for per_reply in (1, 10):
            entries = _replies(tool, calls // per_reply, per_reply)
            seconds = _timed(lambda sid: target.turn(sid, entries), repeats, target.fresh_session)
            figures.append(Figure(layer, tool, _shape(per_reply), calls / seconds, "calls/s"))
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
        seconds = _timed(lambda ctx: [loop_turn(ctx, [{"text": "hi"}]) for _ in range(turns)], repeats, fresh_context)
        figures.append(Figure("agent loop", "text-only turns", "1 model call per turn", turns / seconds, "turns/s"))
        for tool in TOOL_ARGUMENTS:
            arguments = json.dumps(TOOL_ARGUMENTS[tool])
            seconds = _timed(lambda ctx: [call_tool(tool, arguments, ctx) for _ in range(calls)], repeats, fresh_context)
            figures.append(Figure("in-process", tool, "call_tool, sequential", calls / seconds, "calls/s"))
            for per_reply in (1, 10):
                entries = _replies(tool, calls // per_reply, per_reply)
                seconds = _timed(lambda ctx: loop_turn(ctx, entries), repeats, fresh_context)
                figures.append(Figure("agent loop", tool, _shape(per_reply), calls / seconds, "calls/s"))
    finally:
        model.close()
    return figures


@contextmanager
def serve_process() -> Iterator[tuple[str, str, str]]:
    """``python -m stateful serve`` in its own process: its JSON line, until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stateful", "serve"], stdout=subprocess.PIPE, text=True
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
    workloads = {"text-only turns": 0, **{tool: i + 1 for i, tool in enumerate(TOOL_ARGUMENTS)}}
    return sorted(figures, key=lambda f: (workloads[f.workload], order[f.layer], f.shape))


def render(figures: Sequence[Figure], *, calls: int, turns: int, repeats: int) -> str:
    """The markdown section for ``docs/benchmarks.md``."""
    lines = [
        "## HTTP: the sessions API and the agent loop against in-process calls",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m stateful.bench_http` on {platform.machine()} "
        f"({platform.python_implementation()} {platform.python_version()}), a shared 2-core machine; "
        f"median of {repeats} runs, each from a fresh session; {calls} tool calls per workload, "
        f"{turns} turns for the turn rate.",
        "",
        "| workload | shape | layer | rate |",
        "|---|---|---|---:|",
    ]
    for figure in figures:
        lines.append(f"| {figure.workload} | {figure.shape} | {figure.layer} | {figure.rate:,.0f} {figure.unit} |")
    return "\n".join(lines) + "\n"


def main(calls: int = 100, turns: int = 30, repeats: int = 3) -> str:
    return render(measure(calls=calls, turns=turns, repeats=repeats), calls=calls, turns=turns, repeats=repeats)


if __name__ == "__main__":
    print(main())

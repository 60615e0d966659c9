"""``python -m stateful.bench`` (``./dev bench``): how fast the reference terminal tools are.

A benchmark, not a test: it prints a table of calls per second for each of the five
``sys_terminal_*`` tools, called in-process through ``tools.call_tool``, next to the floor that
bounds them, raw ``tmux -S <socket> display-message -p x`` round trips measured in the same run on
the same machine. ``x floor`` says how many raw tmux round trips one call costs.

Each section is one function returning rows; ``SECTIONS`` lists them in order and ``--only``
picks some (an HTTP section plugs in the same way). The floor always runs first: every ratio
needs it from the same run. Figures live in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from stateful.arguments import conversation_budget
from stateful.reference.registry import TerminalRegistry
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import TMUX_TIMEOUT, TmuxServer
from stateful.reference.tools import ToolContext, call_tool


@dataclass(frozen=True)
class Row:
    section: str
    operation: str
    samples: list[float]
    """Seconds per call, one per call."""
    note: str = ""

    @property
    def calls_per_second(self) -> float:
        return len(self.samples) / sum(self.samples)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000


Section = Callable[[argparse.Namespace], list[Row]]


def timed(calls: int, call: Callable[[int], object]) -> list[float]:
    """``call(i)`` for each ``i < calls``, each call timed on its own (seconds)."""
    samples = []
    for index in range(calls):
        start = time.perf_counter()
        call(index)
        samples.append(time.perf_counter() - start)
    return samples


@contextmanager
def _private_tmux() -> Iterator[TmuxServer]:
    server = TmuxServer()
    try:
        server.start(["cat"], cwd=tempfile.gettempdir())
        yield server
    finally:
        server.destroy()


# --------------------------------------------------------------------------------------------
# sections


def floor(options: argparse.Namespace) -> list[Row]:
    """Raw tmux round trips on a private socket (the bound every tool call pays at least once)."""
    calls = options.calls
    with _private_tmux() as server:
        # The benchmark's one direct tmux invocation: the floor must not include our own code.
        raw = [shutil.which("tmux") or "tmux", "-S", server.socket_path, "-f", "/dev/null", "display-message", "-p", "x"]

        def raw_call(_: int) -> None:
            subprocess.run(raw, check=True, stdout=subprocess.DEVNULL, timeout=TMUX_TIMEOUT)

        raw_call(0)
        rows = [Row("floor", "tmux display-message -p x (raw)", timed(calls, raw_call))]
        rows.append(
            Row(
                "floor",
                "TmuxServer.run(display-message) (run_tmux)",
                timed(calls, lambda _: server.run("display-message", "-p", "x")),
            )
        )
    return rows


def tools(options: argparse.Namespace) -> list[Row]:
    """The five tools in-process (``call_tool`` on a TerminalRegistry), one call at a time."""
    calls, launches = options.calls, options.launches
    workdir = tempfile.mkdtemp(prefix="stateful-bench-")
    bash = TerminalSpec("bash", "bash", args=("--norc", "--noprofile"), cwd=workdir)
    sink = replace(bash, name="sink", args=("-c", "stty -echo; exec cat >/dev/null"))
    rows: list[Row] = []
    try:
        with TerminalRegistry() as registry:
            context = ToolContext(registry, "bench", {"bash": bash, "sink": sink})

            def tool(name: str, arguments: dict[str, object]) -> dict[str, object]:
                result = json.loads(call_tool(name, json.dumps(arguments), context))
                if isinstance(result, dict) and "error" in result:
                    raise RuntimeError(f"{name}: {result['error']}")
                return result

            rows.append(Row("tools", "sys_terminal_launch (new pair)", timed(
                launches, lambda i: tool("sys_terminal_launch", {"terminal": "bash", "session": f"b{i}"})
            ), "a new tmux server each"))  # fmt: skip
            rows.append(Row("tools", "sys_terminal_launch (already running)", timed(
                calls, lambda _: tool("sys_terminal_launch", {"terminal": "bash", "session": "b0"})
            )))  # fmt: skip
            tool("sys_terminal_launch", {"terminal": "sink", "session": "s"})
            tool("sys_terminal_send", {"terminal": "sink", "session": "s", "text": "warm-up"})
            rows.append(Row("tools", "sys_terminal_send (text + Enter)", timed(
                calls, lambda i: tool("sys_terminal_send", {"terminal": "sink", "session": "s", "text": f"line {i}"})
            ), "one tmux command"))  # fmt: skip
            tool("sys_terminal_read", {"terminal": "sink", "session": "s"})  # settles the last send
            rows.append(Row("tools", "sys_terminal_read (no send before)", timed(
                calls, lambda _: tool("sys_terminal_read", {"terminal": "bash", "session": "b0", "scrollback": 100})
            ), "one capture"))  # fmt: skip
            tool("sys_terminal_send", {"terminal": "bash", "session": "b0", "text": "true"})

            def send_then_read(i: int) -> None:
                tool("sys_terminal_send", {"terminal": "bash", "session": "b0", "text": f"echo {i}"})
                tool("sys_terminal_read", {"terminal": "bash", "session": "b0"})

            rows.append(Row("tools", "sys_terminal_send + read (read settles)", timed(
                max(5, calls // 10), send_then_read
            ), "bash runs echo; read waits for quiet"))  # fmt: skip
            rows.append(Row("tools", f"sys_terminal_list ({launches + 1} terminals)", timed(
                calls, lambda _: tool("sys_terminal_list", {})
            ), "no tmux"))  # fmt: skip
            rows.append(Row("tools", "sys_terminal_close", timed(
                launches, lambda i: tool("sys_terminal_close", {"terminal": "bash", "session": f"b{i}"})
            ), "kills server + session"))  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def http(options: argparse.Namespace) -> list[Row]:
    """The same calls through the agent loop and the sessions API (``stateful/bench_http.py``)."""
    from stateful.bench_http import section

    return section(options)


def machine(options: argparse.Namespace) -> list[Row]:
    """The state machine on fixed programs, per target (``stateful/bench_machine.py``)."""
    from stateful.bench_machine import section

    section(options)
    return []


SECTIONS: dict[str, Section] = {
    "floor": floor,
    "tools": tools,
    "http": http,
    "machine": machine,
}
"""Sections in run order. Add one (e.g. ``"http"``) as a function returning rows."""


# --------------------------------------------------------------------------------------------
# output


def render(rows: list[Row], floor_ms: float | None) -> str:
    header = f"{'section':<7} {'operation':<44} {'calls':>5} {'calls/s':>8} {'median ms':>9} {'p90 ms':>7} {'x floor':>7}  note"
    lines = [header, "-" * len(header)]
    for row in rows:
        ratio = f"{row.median_ms / floor_ms:7.1f}" if floor_ms else f"{'-':>7}"
        lines.append(
            f"{row.section:<7} {row.operation:<44} {len(row.samples):>5} {row.calls_per_second:>8.1f} "
            f"{row.median_ms:>9.2f} {row.p90_ms:>7.2f} {ratio}  {row.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stateful.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--calls", type=int, default=200, help="calls per measured operation (default 200)")
    parser.add_argument("--launches", type=int, default=20, help="terminals launched and closed (default 20)")
    parser.add_argument("--programs", type=int, default=10,
                        help="machine: how many of the ci profile's programs (default 10; the ci set is 60)")
    parser.add_argument("--latency-ms", type=float, default=40.0,
                        help="machine: the slow server's added latency per response (default 40)")
    parser.add_argument("--machine-targets", default="direct,sessions,latency",
                        help="machine: which runs, in order (default direct,sessions,latency; "
                             "server: the one given by the next three options)")
    parser.add_argument("--server-url", default="", help="machine: a running server to measure (target server)")
    parser.add_argument("--mock-llm-url", default="", help="machine: that server's mock LLM")
    parser.add_argument("--runner-id", default="", help="machine: that server's runner id")
    parser.add_argument("--conversation-budget", type=conversation_budget, default=None, metavar="SIZE",
                        help="machine: bytes an agent session's conversation may reach (default: the ci profile's, 4MB)")
    parser.add_argument("--avoid", default="",
                        help="machine: steering triggers not to draw, comma-separated (known bugs of a real server)")
    options = parser.parse_args(argv)
    chosen = [s.strip() for s in options.only.split(",") if s.strip()] or list(SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; known: {list(SECTIONS)}")
    if "machine" in chosen:  # its options are checked before any section runs
        from stateful.bench_machine import plan

        try:
            plan(options)
        except ValueError as why:
            parser.error(str(why))
    if "floor" not in chosen:
        chosen.insert(0, "floor")  # every ratio is against the floor of the same run

    print(
        f"# {platform.node()}: {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, Python {platform.python_version()}, "
        f"{subprocess.run(['tmux', '-V'], capture_output=True, text=True, timeout=TMUX_TIMEOUT).stdout.strip()}",
        flush=True,
    )
    rows: list[Row] = []
    for name in chosen:
        rows += SECTIONS[name](options)
    floor_ms = next((r.median_ms for r in rows if r.section == "floor"), None)
    print(render(rows, floor_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())

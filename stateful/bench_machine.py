"""The ``machine`` section of ``./dev bench``: steps per second of the state machine itself.

The machine runs FIXED programs: the ``ci`` profile's (derandomized: the same programs every run),
the first ``--programs`` of them (default 10; 60 is the whole ci set), generation only (no
shrinking, no example database), with the ci profile's ``MachineConfig``. The same programs run
against each target in one run, so the figures are comparable as ratios on a noisy machine:

* ``direct``: the in-process registry;
* ``sessions``: the embedded HTTP stack (``EmbeddedStack``), as ``pytest stateful/`` runs it;
* ``sessions +N ms``: the same stack with every sessions-API response delayed (``--latency-ms``,
  as ``serve --latency`` and ``--stack-latency`` do), a slow server;
* ``server``: a running server given by ``--server-url``, ``--mock-llm-url`` and ``--runner-id`` (a
  real one, measured by hand). A real server has bugs: the run ends at the first program that breaks
  a clause (the failure is printed, the figures cover what ran), and ``--avoid`` stops drawing the
  inputs that provoke the bugs already known (the campaign's steering triggers), so that it runs on.

Besides steps (rules) and turns per second it shows where the tester's thread spends a run's time,
from :mod:`stateful.meter` (switched on only here): waiting for HTTP answers (by kind of request),
for the mock's configure, for tmux and the terminals (the in-process target's tool calls, the
probe), sleeping between polls, and the tester's own CPU (the thread's CPU time: Hypothesis, the
machine, its checks, httpx's client side). What is left (``other``) is the thread waiting for the
GIL or the scheduler. It also counts requests per turn by kind, and the model calls and tool calls
the stack made, and shows the largest model request the mock LLM received beside the tester's own
count of the largest conversation and turn (``--conversation-budget``: the budget it keeps them under).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from contextlib import AbstractContextManager

from stateful import meter, profiles, steering
from stateful.machine import MachineConfig, TerminalMachine
from stateful.targets.base import Target
from stateful.targets.registry import KINDS, Server, open_target

TIME_KINDS = ("http", "mock configure", "terminal", "sleep")
"""Prefixes of the meter's kinds that are the tester's thread waiting (the division of a step's time)."""


@dataclass
class Run:
    label: str
    wall: float
    cpu: float
    rules: int
    turns: int
    programs: int
    totals: meter.Meter
    failure: str = ""


def _ci(programs: int) -> tuple[settings, MachineConfig]:
    """The ci profile's settings (first ``programs`` programs, generation only) and MachineConfig."""
    config = profiles.machine_config("ci")  # registers the profiles (none is loaded)
    chosen = settings(settings.get_profile("ci"), database=None, max_examples=programs,
                      phases=[Phase.explicit, Phase.generate], print_blob=False)
    return chosen, config


def _target(kind: str | Server, latency: float) -> AbstractContextManager[Target]:
    """A fresh target of ``kind``, or a sessions target reaching a running server."""
    if isinstance(kind, Server):
        return open_target("sessions", kind)
    return open_target(kind, latency=latency)


def run_programs(kind: str | Server, latency: float, programs: int, label: str,
                 conversation_budget: int | None = None) -> Run:
    """The first ``programs`` ci programs against a fresh ``kind`` target (or a running server), metered
    (``conversation_budget``: instead of the ci profile's)."""
    hypothesis_settings, config = _ci(programs)
    if conversation_budget is not None:
        config = replace(config, conversation_budget=conversation_budget)
    counted = {"rules": 0, "turns": 0, "programs": 0}

    class BenchMachine(TerminalMachine):
        def teardown(self) -> None:
            counted["rules"] += self.rules_run
            counted["turns"] += self.world.turns
            counted["programs"] += 1
            super().teardown()

    failure = ""
    with _target(kind, latency) as target:
        BenchMachine.bind(target, config)
        with meter.metering() as totals:
            cpu, started = time.thread_time(), time.perf_counter()
            try:
                run_state_machine_as_test(BenchMachine, settings=hypothesis_settings)
            except Exception as exc:  # noqa: BLE001 - a finding is reported, not a crash (an interrupt ends the benchmark)
                failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                inner = [exc, *getattr(exc, "exceptions", ())]
                print(f"# machine: {label} failed:\n" + "\n---\n".join(
                    "\n".join([f"{type(e).__name__}: {e}", *map(str, getattr(e, "__notes__", ()))])[:6000]
                    for e in inner), flush=True)
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    return Run(label, wall, cpu, counted["rules"], counted["turns"], counted["programs"], totals, failure)


def _share(run: Run, prefix: str) -> float:
    return sum(s for k, s in run.totals.seconds.items() if k.startswith(prefix)) / run.wall


def render(runs: list[Run]) -> str:
    base = runs[0].wall if runs else 1.0
    lines = [f"{'machine run':<22} {'programs':>8} {'steps':>6} {'turns':>6} {'wall s':>7} {'steps/s':>8} "
             f"{'x first':>7}  failure"]
    lines.append("-" * len(lines[0]))
    for r in runs:
        lines.append(f"{r.label:<22} {r.programs:>8} {r.rules:>6} {r.turns:>6} {r.wall:>7.1f} "
                     f"{r.rules / r.wall:>8.2f} {r.wall / base:>7.2f}  {r.failure}")
    lines.append("")
    header = f"{'share of wall time':<36}" + "".join(f"{r.label:>22}" for r in runs)
    lines += [header, "-" * len(header)]
    kinds = sorted({k for r in runs for k in r.totals.seconds if k.startswith(TIME_KINDS)})
    for kind in kinds:
        lines.append(f"{'  ' + kind:<36}" + "".join(
            f"{r.totals.seconds.get(kind, 0.0) / r.wall:>16.1%} {r.totals.seconds.get(kind, 0.0) / max(r.rules, 1) * 1000:>4.0f}ms"
            for r in runs))
    for prefix in TIME_KINDS:
        lines.append(f"{prefix + ' (all)':<36}" + "".join(f"{_share(r, prefix):>16.1%} {'':>6}" for r in runs))
    lines.append(f"{'tester CPU (thread time)':<36}" + "".join(f"{r.cpu / r.wall:>16.1%} {'':>6}" for r in runs))
    lines.append(f"{'other (GIL, scheduler)':<36}" + "".join(
        f"{max(0.0, 1 - sum(_share(r, p) for p in TIME_KINDS) - r.cpu / r.wall):>16.1%} {'':>6}" for r in runs))
    lines.append("")
    header = f"{'per turn (count / turns)':<36}" + "".join(f"{r.label:>22}" for r in runs)
    lines += [header, "-" * len(header)]
    kinds = sorted({k for r in runs for k in r.totals.counts
                    if k.startswith(("http", "mock", "server"))})
    for kind in kinds:
        lines.append(f"{'  ' + kind:<36}" + "".join(f"{r.totals.counts.get(kind, 0) / max(r.turns, 1):>22.2f}"
                                                      for r in runs))
    for kind in sorted({k for r in runs for k in r.totals.received}):
        lines.append(f"{'  kB received, ' + kind.removeprefix('http '):<36}" + "".join(
            f"{r.totals.received.get(kind, 0) / 1000 / max(r.turns, 1):>22.1f}" for r in runs))
    for kind in sorted({k for r in runs for k in r.totals.seconds if k.startswith("server")}):
        lines.append(f"{'  ms per turn, ' + kind:<36}" + "".join(
            f"{r.totals.seconds.get(kind, 0.0) * 1000 / max(r.turns, 1):>22.1f}" for r in runs))
    for kind in sorted({k for r in runs for k in r.totals.largest}):
        lines.append(f"{'  largest ' + kind + ', kB':<36}" + "".join(
            f"{r.totals.largest.get(kind, 0) / 1000:>22.1f}" for r in runs))
    lines.append(f"{'  http requests (all)':<36}" + "".join(
        f"{sum(c for k, c in r.totals.counts.items() if k.startswith('http')) / max(r.turns, 1):>22.2f}" for r in runs))
    lines.append(f"{'ms per step':<36}" + "".join(f"{r.wall / max(r.rules, 1) * 1000:>22.0f}" for r in runs))
    return "\n".join(lines)


def plan(options: argparse.Namespace) -> tuple[list[tuple[str | Server, float, str]], list[str]]:
    """The runs ``options`` ask for (target, latency, label), in order, and the triggers to avoid.
    Raises ``ValueError`` with one plain line for options that do not go together."""
    known: dict[str, tuple[str | Server, float, str]] = {name: (name, 0.0, name) for name in KINDS}
    known["latency"] = ("sessions", options.latency_ms / 1000, f"sessions +{options.latency_ms:g} ms")
    names = [n.strip() for n in options.machine_targets.split(",") if n.strip()]
    given = [options.server_url, options.mock_llm_url, options.runner_id]
    if any(given) and not all(given):
        raise ValueError("--server-url, --mock-llm-url and --runner-id go together")
    if all(given):
        known["server"] = (Server(options.server_url.rstrip("/"), options.mock_llm_url.rstrip("/"),
                                  options.runner_id), 0.0, "server")
    elif "server" in names:
        raise ValueError("--machine-targets server needs --server-url, --mock-llm-url and --runner-id")
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"--machine-targets: unknown {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(known)}")
    triggers = [t.strip() for t in options.avoid.split(",") if t.strip()]
    unknown = [t for t in triggers if t not in steering.TRIGGERS]
    if unknown:
        raise ValueError(f"--avoid: unknown {', '.join(unknown)}; known: {', '.join(steering.TRIGGERS)}")
    return [known[n] for n in names], triggers


def section(options: argparse.Namespace) -> list[object]:
    """Run the fixed programs against each target, print the tables; no rows for the common table."""
    runs_asked, triggers = plan(options)  # checked before any section ran (stateful.bench.main)
    if triggers:
        steering.avoid(triggers)
        print(f"# machine: not drawing {', '.join(triggers)} (every target of this run)", flush=True)
    runs = []
    for kind, delay, label in runs_asked:
        runs.append(run_programs(kind, delay, options.programs, label, options.conversation_budget))
        print(f"# machine: {label} done in {runs[-1].wall:.1f} s", flush=True)
    print(render(runs), flush=True)
    return []

"""The machine benchmark (``./dev bench --only machine``): it runs, against a running server too,
and its options are checked before anything runs."""

from __future__ import annotations

import pytest

from stateful import bench, steering
from stateful.bench_machine import Server, render, run_programs
from stateful.reference.stack import EmbeddedStack


def test_a_ci_program_runs_metered_against_a_running_server() -> None:
    """The ``server`` target is what a real server is measured by; an embedded stack stands in."""
    with EmbeddedStack() as stack:
        run = run_programs(Server(stack.server_url, stack.mock_llm_url, stack.runner_id), 0.0, 1, "server")
    assert run.failure == ""
    assert run.programs == 1
    assert run.rules > 0 and run.turns > 0
    assert run.totals.counts["http message post"] >= run.turns  # a post per turn (and a session's first list)
    assert run.totals.counts["http items page"] >= run.turns
    table = render([run])
    assert "server" in table and "ms per step" in table


def test_machine_options_that_do_not_go_together_are_one_line_usage_errors(
        capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        ("--machine-targets", "server"): "--machine-targets server needs --server-url, --mock-llm-url and --runner-id",
        ("--server-url", "http://127.0.0.1:1"): "--server-url, --mock-llm-url and --runner-id go together",
        ("--machine-targets", "direct,nosuch"): "--machine-targets: unknown nosuch; known: direct, sessions, latency",
        ("--avoid", "semicolon-edge,nosuch"): f"--avoid: unknown nosuch; known: {', '.join(steering.TRIGGERS)}",
    }
    for arguments, said in cases.items():
        with pytest.raises(SystemExit) as exited:
            bench.main(["--only", "machine", *arguments])
        assert exited.value.code == 2, arguments
        out, err = capsys.readouterr()
        assert out == ""  # nothing ran: not even the floor
        assert err.strip().splitlines()[-1] == f"python -m stateful.bench: error: {said}"

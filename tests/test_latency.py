"""A slow server without installing one: the embedded stack's sessions API with added latency."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from stateful.e2e import HEADERS
from stateful.reference.stack import EmbeddedStack

ROOT = Path(__file__).resolve().parent.parent


def _answer_seconds(url: str) -> float:
    start = time.monotonic()
    reply = httpx.get(url, headers=HEADERS, timeout=30.0)
    assert reply.status_code == 200
    return time.monotonic() - start


def test_every_sessions_api_response_is_delayed_and_the_mock_llm_is_not() -> None:
    """A lower bound only: the delay is added to every answer of the sessions API (how much more a
    busy machine adds is no property of the stack)."""
    with EmbeddedStack(latency=0.3) as stack:
        assert _answer_seconds(f"{stack.server_url}/health") >= 0.3
        assert _answer_seconds(f"{stack.server_url}/v1/runners/{stack.runner_id}/status") >= 0.3
        mock = httpx.get(f"{stack.mock_llm_url}/gate/pending", timeout=30.0)
        assert mock.status_code == 200


def test_bad_latencies_are_one_line_usage_errors() -> None:
    serve = subprocess.run([sys.executable, "-m", "stateful", "serve", "--latency", "-5"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert serve.returncode == 2 and "not a non-negative number of milliseconds" in serve.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "stateful/", "--stack-latency", "fast", "-q"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode == 4 and lines == ["ERROR: --stack-latency 'fast' is not a non-negative number of milliseconds"]

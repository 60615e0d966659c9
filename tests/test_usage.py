"""A new user's mistakes, and a server that cannot be tested: each is one clear line, before anything
runs, and nothing is written. Runs ``./dev`` and ``python -m pytest`` as the user would (subprocesses
with small timeouts)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stateful.e2e import preflight

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "dev"
PYTEST = [sys.executable, "-m", "pytest"]
REPRO = '''from stateful.repro import *  # noqa: F403

TARGET = "direct"


def test_repro(repro_machine):
    def program(state):
        pass

    repro_machine(TARGET, program)
'''
"""The smallest repro: a program of no steps on the direct target (it opens and tears down a machine)."""


def run(args: list[str], *, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The timeout only guards against a hang: a busy CI box (two spinners beside the hunts) took
    over 60 s to start a pytest run here, so it is generous and never a verdict."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-blank lines of stdout and stderr."""
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def collected(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The node ids that ``--collect-only -q`` listed."""
    return [line for line in result.stdout.splitlines() if "::" in line]


def free_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Answer = tuple[int, str]
"""An HTTP status and a body."""


@contextmanager
def fake_server(answer: Callable[[str, str], Answer]) -> Iterator[str]:
    """A loopback HTTP server whose every reply is ``answer(method, path)``; its URL while open."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = answer(self.command, self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _reply  # noqa: N815 (http.server's naming)

        def log_message(self, *args: object) -> None:  # keep the test's output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def broken_server() -> Iterator[str]:
    """A server that answers every request with 500 ``boom``."""
    with fake_server(lambda method, path: (500, "boom")) as url:
        yield url


def healthy_until_registration(method: str, path: str) -> Answer:
    """Passes the preflight (health, mock gate, runner online), then breaks on the first POST."""
    if method == "POST":
        return 500, "Traceback (most recent call last): KeyError: 'bundle'"
    if path.startswith("/v1/runners/"):
        return 200, '{"online": true}'
    return (200, '{"pending": false}') if path in ("/health", "/gate/pending") else (404, "not found")


# -- ./dev ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("job", ["help", "-h", "--help"])
def test_help_answers_at_once_and_builds_nothing(tmp_path: Path, job: str) -> None:
    copy = tmp_path / "dev"
    shutil.copy(DEV, copy)
    result = run(["bash", str(copy), job], cwd=tmp_path, timeout=10)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ./dev JOB") and "./dev replay" in result.stdout
    assert not (tmp_path / ".venv").exists()


def test_no_job_or_an_unknown_one_is_a_usage_error_that_builds_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "dev"
    shutil.copy(DEV, copy)
    bare = run(["bash", str(copy)], cwd=tmp_path, timeout=10)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: ./dev JOB") and bare.stdout == ""
    unknown = run(["bash", str(copy), "nosuch"], cwd=tmp_path, timeout=10)
    assert unknown.returncode == 2
    assert said(unknown) == ["dev: unknown job 'nosuch' (machine, tests, proofs, replay, serve, campaign, bench or help)"]
    assert not (tmp_path / ".venv").exists()


def test_a_path_given_to_dev_tests_replaces_tests() -> None:
    result = run([str(DEV), "tests", "tests/test_profiles.py", "--collect-only", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr
    ids = collected(result)
    assert ids and all(i.startswith("tests/test_profiles.py::") for i in ids), ids


def test_a_path_is_taken_from_where_dev_is_called() -> None:
    result = run(["../dev", "tests", "test_profiles.py::test_dev_is_the_default", "--collect-only", "-q"],
                 cwd=ROOT / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert collected(result) == ["tests/test_profiles.py::test_dev_is_the_default"]


def test_a_path_given_to_dev_machine_replaces_stateful() -> None:
    result = run([str(DEV), "machine", "stateful/test_machine.py::test_direct", "--collect-only", "-q"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert collected(result) == ["stateful/test_machine.py::test_direct"]


def test_dev_tests_leaves_the_proofs_to_dev_proofs() -> None:
    """The two tiers split a file between them: the hunts only in ``./dev proofs``, its fast checks only
    in ``./dev tests``."""
    faults = "tests/test_faults.py"
    fast, proofs = (collected(run([str(DEV), job, faults, "--collect-only", "-q"], timeout=120)) for job in ("tests", "proofs"))
    assert fast == [f"{faults}::test_every_fault_is_hunted_or_a_known_gap"], fast
    assert proofs and not set(proofs) & set(fast), proofs
    assert f"{faults}::test_control_without_fault_passes" in proofs, proofs


def test_an_option_value_is_not_taken_for_a_path() -> None:
    # `dev` is a file of the repository root, where this runs; after -k it is an expression
    result = run([str(DEV), "tests", "-k", "dev", "--collect-only", "-q"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    ids = collected(result)
    assert "tests/test_profiles.py::test_dev_is_the_default" in ids
    assert all(i.startswith("tests/") for i in ids), ids


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_dev_replay_runs_a_repro_inside_or_outside_the_project(tmp_path: Path, where: str) -> None:
    """``./dev replay`` is ``python -m stateful replay``: it runs the file with this package's plugins
    alone (no conftest), so a repro replays the same inside and outside the project."""
    folder = tmp_path if where == "outside" else ROOT / "stateful" / "repros"
    made = not folder.exists()
    folder.mkdir(exist_ok=True)
    repro = folder / f"test_repro_direct_usage_{tmp_path.name}.py"
    repro.write_text(REPRO, encoding="utf-8")
    try:
        result = run([str(DEV), "replay", str(repro)], cwd=tmp_path, timeout=120)
    finally:
        repro.unlink()
        if made:
            folder.rmdir()
    assert result.returncode == 0, result.stdout + result.stderr
    assert said(result)[0].startswith(f"FIXED          {repro} (")
    assert said(result)[-1] == "replay: 1 repros: 1 fixed, 0 still failing, 0 skipped, 0 errors"


def test_dev_replay_without_a_file_says_so() -> None:
    result = run([str(DEV), "replay"], timeout=10)
    assert result.returncode == 2
    assert said(result) == ["dev: replay needs repro files or directories (e.g. stateful/repros/)"]


# -- usage errors: one line, nothing run -----------------------------------------------------------

@pytest.mark.parametrize(("args", "error"), [
    (["--hypothesis-profile", "nosuch"], "unknown --hypothesis-profile 'nosuch'; known: campaign, ci, default, dev, nightly, repro"),
    (["--server-url", "http://127.0.0.1:1"],
     "--server-url, --mock-llm-url and --runner-id go together (missing: --mock-llm-url, --runner-id)"),
    (["--target", "bogus"], "unknown --target 'bogus'; known: direct, sessions, all"),
    (["--conversation-budget", "10kB"],
     "--conversation-budget: '10kB' is too small a conversation budget (at least 100kB)"),
])
def test_a_usage_error_is_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    result = run([*PYTEST, "stateful/", *args, "--repro-dir", str(tmp_path / "repros")])
    assert result.returncode == 4
    assert said(result) == [f"ERROR: {error}"]
    assert not (tmp_path / "repros").exists()


def test_an_unknown_profile_through_dev_is_one_line() -> None:
    result = run([str(DEV), "machine", "--hypothesis-profile=nosuch"])
    assert result.returncode == 4 and "INTERNALERROR" not in result.stdout + result.stderr
    assert said(result) == ["ERROR: unknown --hypothesis-profile 'nosuch'; known: campaign, ci, default, dev, nightly, repro"]


# -- a server that cannot be tested: one line with the URL, nothing run, nothing written -------------

def test_a_server_that_is_not_running_is_one_line_and_no_repro(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run([*PYTEST, "stateful/", "--target", "sessions", "--server-url", url, "--mock-llm-url", url,
                  "--runner-id", "r1", "--repro-dir", str(tmp_path / "repros")])
    assert result.returncode == 4
    lines = said(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ERROR: the server at {url}/health cannot be reached: ")
    assert lines[0].endswith("(nothing was tested)")
    assert not (tmp_path / "repros").exists()


def test_a_server_that_answers_500_is_one_line_naming_the_answer(tmp_path: Path, broken_server: str) -> None:
    result = run([*PYTEST, "stateful/", "--target", "sessions", "--server-url", broken_server,
                  "--mock-llm-url", broken_server, "--runner-id", "r1", "--repro-dir", str(tmp_path / "repros")])
    assert result.returncode == 4
    assert said(result) == [f"ERROR: the server at {broken_server}/health answered HTTP 500: 'boom' (nothing was tested)"]
    assert not (tmp_path / "repros").exists()


def test_a_server_that_breaks_mid_run_is_reported_so_and_no_repro(tmp_path: Path) -> None:
    with fake_server(healthy_until_registration) as url:
        result = run([*PYTEST, "stateful/", "--target", "sessions", "--server-url", url, "--mock-llm-url", url,
                      "--runner-id", "r1", "--repro-dir", str(tmp_path / "repros")])
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert (f"ServerError: the server broke: POST {url}/v1/sessions answered HTTP 500: "
            "\"Traceback (most recent call last): KeyError: 'bundle'\" (a server failure, not a contract violation)") in out
    assert "state = SessionsMachine()" in out  # the program that led to it
    assert "no regression test was written" in out
    assert "httpx" not in out and not any(line.startswith("E ") for line in out.splitlines())  # no traceback
    assert "regression test:" not in out and not (tmp_path / "repros").exists()


def test_preflight_passes_a_working_server(contract_target: tuple[str, str, str]) -> None:
    assert preflight(*contract_target) is None


def test_preflight_names_a_runner_that_is_not_online(contract_target: tuple[str, str, str]) -> None:
    server, mock, _ = contract_target
    problem = preflight(server, mock, "nosuch", runner_wait=0.3)
    assert problem is not None
    assert problem.startswith(f"runner 'nosuch' is not online: {server}/v1/runners/nosuch/status answered HTTP 404")


def test_preflight_names_a_mock_llm_that_is_not_one(contract_target: tuple[str, str, str]) -> None:
    server, _, runner = contract_target
    problem = preflight(server, server, runner)
    assert problem is not None and problem.startswith(f"the mock LLM at {server}/gate/pending answered HTTP 404")

"""TmuxServer: one private tmux server, literal typing, captures, errors, teardown."""

from __future__ import annotations

import os
import signal
import stat
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stateful.reference import tmux
from stateful.reference.tmux import (
    ProcessRef,
    TmuxError,
    TmuxServer,
    TmuxServerGone,
    TmuxTimeout,
    _text_chunks,
    session_members,
    tmux_argument,
)

Starter = Callable[..., TmuxServer]


@pytest.fixture
def start(tmp_path: Path, terminal_pids: Callable[[str], list[int]]) -> Iterator[Starter]:
    """``start(script, history_limit=...)``: a TmuxServer whose pane runs ``bash -c script``."""
    servers: list[TmuxServer] = []

    def run(script: str, *, history_limit: int = 2000) -> TmuxServer:
        server = TmuxServer()
        servers.append(server)
        server.start(["bash", "-c", script], cwd=str(tmp_path), history_limit=history_limit)
        return server

    yield run
    for server in servers:
        server.destroy()
        assert terminal_pids(server.socket_path) == []
        assert not os.path.exists(server.directory)


def _sink(start: Starter, tmp_path: Path, size: int, eventually: Callable[..., Any]) -> tuple[TmuxServer, Path]:
    """A pane whose program reads exactly ``size`` raw bytes into a file, ready to read them."""
    out = tmp_path / "sink.bin"
    server = start(f"stty raw -echo && exec head -c {size} > {out}")
    eventually(lambda: server.tty_raw() and server.waiting_for_input())
    return server, out


def _received(server: TmuxServer, out: Path, eventually: Callable[..., Any]) -> bytes:
    eventually(lambda: not server.is_alive())  # head exits once it has every byte
    return out.read_bytes()


def _capture_with(server: TmuxServer, needle: str) -> str | None:
    screen = server.capture()
    return screen if needle in screen else None


# --------------------------------------------------------------------------------------------
# argument escaping and chunking (pure)


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("", ""),
        ("plain", "plain"),
        (";", "\\;"),
        ("a;", "a\\;"),
        ("a\\;", "a\\\\;"),
        ("a;b", "a;b"),
        (";;", ";\\;"),
        ("-l", "-l"),
    ],
)
def test_tmux_argument_escapes_only_a_final_semicolon(value: str, escaped: str) -> None:
    assert tmux_argument(value) == escaped


def test_text_chunks_are_bounded_and_never_split_a_character() -> None:
    text = "a" * 4095 + "日本語" + "é" * 3000 + "🎉" * 1500 + ";"
    chunks = _text_chunks(text)
    assert "".join(chunks) == text
    assert len(chunks) > 3
    assert all(0 < len(c.encode()) <= 4096 for c in chunks)
    assert _text_chunks("") == []


# --------------------------------------------------------------------------------------------
# literal typing, byte for byte (the pane reads raw bytes into a file)


PAYLOADS = {
    "leading dash": "-l -t %0 -- --",
    "trailing semicolon": "echo hi;",
    "only a semicolon": ";",
    "trailing backslash semicolon": "echo hi\\;",
    "trailing double backslash semicolon": "x\\\\;",
    "key names": "Enter C-c Escape",
    "formats": "#{pane_id} #{socket_path} ##{x} #(touch pwned) #[fg=red]",
    "quotes": "'single' \"double\" `back` $HOME \\n",
    "newlines": "line one\nline two\r\nthree\n",
    "unicode": "héllo 日本語 🎉 e\u0301 \u200b Ωμέγα",
    "every ascii control and printable": "".join(chr(i) for i in range(1, 128)),
    "nul": "a\0b\0",
    "over 16 KiB with awkward chunk edges": (
        "a" * 4095 + ";" + "b" * 4094 + "日" + "c" * 4095 + "\\;" + "é" * 5000 + "end;"
    ),
}


@pytest.mark.parametrize("payload", list(PAYLOADS.values()), ids=list(PAYLOADS))
def test_send_types_text_literally(
    start: Starter, tmp_path: Path, eventually: Callable[..., Any], payload: str
) -> None:
    data = payload.encode()
    server, out = _sink(start, tmp_path, len(data), eventually)
    server.send(payload)
    assert _received(server, out, eventually) == data


def test_send_presses_keys_after_the_text_and_types_unknown_key_names(
    start: Starter, tmp_path: Path, eventually: Callable[..., Any]
) -> None:
    expected = b"abc\r\x03\x1bNoSuchKey;-x\r"
    server, out = _sink(start, tmp_path, len(expected), eventually)
    server.send("abc", ["Enter", "C-c", "Escape", "NoSuchKey", ";", "-x", "Enter"])
    assert _received(server, out, eventually) == expected


def test_send_of_nothing_runs_no_tmux_command(start: Starter, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start("exec sleep 1000")
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(server, "run", lambda *args: calls.append(args) or [])
    server.send(None, [])
    server.send("", [])
    assert calls == []


# --------------------------------------------------------------------------------------------
# the server itself


def test_private_socket_directory_and_options_set_before_the_pane(start: Starter) -> None:
    server = start("exec sleep 1000", history_limit=123)
    mode = stat.S_IMODE(os.stat(server.directory).st_mode)
    assert mode == 0o700
    assert stat.S_ISSOCK(os.stat(server.socket_path).st_mode)
    assert server.pane_id is not None and server.pane_id.startswith("%")
    shown = server.run(
        "display-message", "-p", "-t", server.pane_id,
        "#{history_limit} #{pane_width}x#{pane_height} #{session_name} #{socket_path}",
    )  # fmt: skip
    assert shown == [f"123 80x24 {TmuxServer.SESSION_NAME} {server.socket_path}"]
    assert server.is_alive()


def test_every_tmux_command_names_the_private_socket_and_no_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    real = subprocess.Popen

    def spy(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.append(list(cmd))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    server = TmuxServer()
    try:
        server.start(["cat"], cwd=str(tmp_path))
        server.send("x", ["Enter"])
        server.capture(10)
    finally:
        server.destroy()
    assert len(seen) >= 4
    for cmd in seen:
        assert f"-S{server.socket_path}" in cmd[1:3]
        assert "-f/dev/null" in cmd[1:3]


def test_tmux_errors_are_raised_not_hidden(start: Starter) -> None:
    server = start("exec sleep 1000")
    with pytest.raises(TmuxServerGone, match="can't find pane: %99"):
        server.run("send-keys", "-t", "%99", "x")
    with pytest.raises(TmuxError, match="unknown command") as info:
        server.run("no-such-command")
    assert not isinstance(info.value, TmuxServerGone)
    server.destroy()
    with pytest.raises(TmuxServerGone):
        server.capture()
    with pytest.raises(TmuxServerGone):
        server.send("x")


def test_a_hung_tmux_server_is_a_timeout_naming_it_and_its_client_is_killed(
    start: Starter, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start("exec sleep 1000")
    assert server.server is not None
    clients: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def spy(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        clients.append(real(cmd, *args, **kwargs))
        return clients[-1]

    monkeypatch.setattr(tmux, "TMUX_TIMEOUT", 1.0)
    monkeypatch.setattr(subprocess, "Popen", spy)
    os.kill(server.server.pid, signal.SIGSTOP)  # the server stops answering: its clients wait
    try:
        started = time.monotonic()
        with pytest.raises(TmuxTimeout, match=rf"tmux display-message did not answer within 1 s: "
                                              rf"the tmux server at {re.escape(server.socket_path)} hangs"):
            server.run("display-message", "-p", "x")
        assert time.monotonic() - started < 10
        with pytest.raises(TmuxTimeout, match="tmux capture-pane did not answer"):
            server.capture()
    finally:
        os.kill(server.server.pid, signal.SIGCONT)
    assert [client.returncode for client in clients] == [-signal.SIGKILL, -signal.SIGKILL]  # killed, reaped
    assert server.capture().count("\n") == 24  # the server answers again once it runs


def test_destroy_ends_a_hung_tmux_server(start: Starter, monkeypatch: pytest.MonkeyPatch,
                                         terminal_pids: Callable[[str], list[int]]) -> None:
    server = start("exec sleep 1000")
    assert server.server is not None
    monkeypatch.setattr(tmux, "TMUX_TIMEOUT", 1.0)
    os.kill(server.server.pid, signal.SIGSTOP)
    server.destroy()  # kill-server times out; the server is then killed by its (pid, start time)
    assert terminal_pids(server.socket_path) == []
    assert not server.server.alive()


def test_destroy_finds_a_hung_server_whose_pids_it_never_learnt(
        start: Starter, monkeypatch: pytest.MonkeyPatch, terminal_pids: Callable[[str], list[int]]) -> None:
    """A start that timed out leaves a server that never said its pids: /proc names it by our socket."""
    server = start("exec sleep 1000")
    assert server.server is not None and server.pane is not None
    hung, pane = server.server, server.pane
    monkeypatch.setattr(tmux, "TMUX_TIMEOUT", 1.0)
    os.kill(hung.pid, signal.SIGSTOP)
    server.server = server.pane = None
    started = time.monotonic()
    server.destroy()
    assert time.monotonic() - started < 15  # one timed-out list-panes, no kill-server to wait for
    assert not hung.alive() and not pane.alive()
    assert terminal_pids(server.socket_path) == []


def test_start_does_not_expand_or_split_the_command_and_directory(
    tmp_path: Path, eventually: Callable[..., Any]
) -> None:
    odd = tmp_path / "dir #{pane_id} #(echo) ;"
    odd.mkdir()
    out = tmp_path / "argv.txt"
    server = TmuxServer()
    try:
        server.start(
            ["bash", "-c", 'pwd > "$0"; printf "%s|" "$@" >> "$0"', str(out), "#{pane_id}", "a;", ";", "\\;"],
            cwd=str(odd),
        )
        eventually(lambda: out.exists() and out.read_text().endswith("|"))
        assert out.read_text() == f"{odd}\n#{{pane_id}}|a;|;|\\;|"
    finally:
        server.destroy()


def test_capture_rows_end_in_newline_and_long_lines_stay_split(
    start: Starter, eventually: Callable[..., Any]
) -> None:
    server = start('printf "%0200d" 0; exec sleep 1000')
    screen = eventually(lambda: _capture_with(server, "0" * 40))
    rows = screen.split("\n")
    assert rows[-1] == ""  # the text ends in a newline ...
    rows = rows[:-1]
    assert len(rows) == 24  # ... after each of the 24 rows, blank ones included
    assert rows[:3] == ["0" * 80, "0" * 80, "0" * 40]
    assert rows[3:] == [""] * 21


def test_capture_includes_history_up_to_the_limit(start: Starter, eventually: Callable[..., Any]) -> None:
    server = start("seq 1 100; exec sleep 1000", history_limit=1000)
    visible = eventually(lambda: _capture_with(server, "100\n"))
    assert visible.split("\n")[:-1] == [str(n) for n in range(78, 101)] + [""]
    everything = server.capture(1000).split("\n")[:-1]
    assert everything[:100] == [str(n) for n in range(1, 101)]
    assert server.capture(5).split("\n")[:5] == ["73", "74", "75", "76", "77"]


def test_history_limit_bounds_the_scrollback(start: Starter, eventually: Callable[..., Any]) -> None:
    server = start("seq 1 100; exec sleep 1000", history_limit=10)
    eventually(lambda: "100\n" in server.capture())
    rows = server.capture(1000).split("\n")[:-1]
    assert len(rows) == 10 + 24
    assert rows[0] == "68"


def test_input_pending_counts_unread_lines(start: Starter, eventually: Callable[..., Any]) -> None:
    server = start("exec sleep 1000")  # never reads its terminal
    assert server.input_pending() == 0
    server.send("abc", ["Enter"])
    assert eventually(lambda: server.input_pending() == 4)
    assert not server.waiting_for_input()


def test_waiting_for_input_sees_a_canonical_reader_and_a_readline_prompt(
    start: Starter, eventually: Callable[..., Any]
) -> None:
    cat = start("exec cat")
    eventually(cat.waiting_for_input)
    bash = start("exec bash --norc --noprofile -i")
    eventually(lambda: bash.waiting_for_input() and bash.tty_raw())


# --------------------------------------------------------------------------------------------
# teardown


def _pid_running(argv: bytes, pids: list[int]) -> int | None:
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if handle.read() == argv:
                    return pid
        except OSError:
            pass
    return None


def test_destroy_kills_every_process_of_the_session_and_nothing_else(
    start: Starter, eventually: Callable[..., Any], terminal_pids: Callable[[str], list[int]]
) -> None:
    bystander = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    escapee: int | None = None
    try:
        server = start(
            "nohup sleep 1001 >/dev/null 2>&1 & "
            "(trap '' HUP TERM; exec sleep 1002) & "
            "sleep 1003 & kill -STOP $!; "
            "setsid sleep 1004 & "  # leaves the terminal's session: the documented limit
            "wait"
        )
        assert server.pane is not None
        eventually(lambda: len(session_members(server.pane)) == 4)  # bash and three sleeps
        escapee = eventually(lambda: _pid_running(b"sleep\x001004\x00", terminal_pids(server.socket_path)))
        server.destroy()
        assert session_members(server.pane) == []
        assert terminal_pids(server.socket_path) == [escapee]
        assert not os.path.exists(server.directory)
        server.destroy()  # idempotent
        assert bystander.poll() is None  # never signals what it did not start
    finally:
        bystander.kill()
        bystander.wait()
        if escapee is not None:
            os.kill(escapee, signal.SIGKILL)
            eventually(lambda: escapee not in terminal_pids(server.socket_path))


def test_a_recycled_pid_is_never_taken_for_a_session_leader() -> None:
    leader = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        ref = ProcessRef.of(leader.pid)
        assert ref is not None
        assert session_members(ref) == [leader.pid]
        impostor = ProcessRef(leader.pid, ref.start_time - 1)
        assert impostor.recycled() and not impostor.alive()
        assert session_members(impostor) == []
    finally:
        leader.kill()
        leader.wait()


def test_restore_from_a_record_destroys_another_owners_server(
    start: Starter, eventually: Callable[..., Any], terminal_pids: Callable[[str], list[int]]
) -> None:
    server = start("sleep 1000 & exec sleep 1001")
    eventually(lambda: server.pane is not None and len(session_members(server.pane)) == 2)
    record = server.describe()
    TmuxServer.restore(record).destroy()
    assert terminal_pids(server.socket_path) == []
    assert not os.path.exists(server.directory)


def test_restore_from_a_record_written_before_start_finds_the_pids(
    tmp_path: Path, eventually: Callable[..., Any], terminal_pids: Callable[[str], list[int]]
) -> None:
    server = TmuxServer()
    record = server.describe()  # what the reaper knows before the server starts
    try:
        server.start(["bash", "-c", "sleep 1000 & exec sleep 1001"], cwd=str(tmp_path))
        eventually(lambda: len(terminal_pids(server.socket_path)) == 3)
        TmuxServer.restore(record).destroy()
        assert terminal_pids(server.socket_path) == []
        assert not os.path.exists(server.directory)
    finally:
        server.destroy()


def test_destroy_lets_hangup_handlers_finish_their_cleanup(
    start: Starter, tmp_path: Path, eventually: Callable[..., Any]
) -> None:
    """Shells run EXIT traps on SIGHUP; a SIGKILL right away would leave their cleanup undone."""
    done = tmp_path / "cleaned-up"
    server = start(f"trap 'sleep 0.3; touch {done}' EXIT; nohup sleep 1000 >/dev/null 2>&1 & wait")
    assert server.pane is not None
    eventually(lambda: len(session_members(server.pane)) == 2)  # the trap is set
    server.destroy()
    assert done.exists()
    assert session_members(server.pane) == []


def test_odd_text_and_keys_are_typed_not_rejected(
    start: Starter, tmp_path: Path, eventually: Callable[..., Any]
) -> None:
    """Lone surrogates (JSON allows them) become U+FFFD; a "key" holding NUL or longer than any
    key name is typed literally; thousands of keys are pressed in order."""
    keys = ["x\udc80y", "a\0b", "k" * 100, *(["Space"] * 3000), "Enter"]
    expected = "t\ufffd".encode() + "x\ufffdy".encode() + b"a\0b" + b"k" * 100 + b" " * 3000 + b"\r"
    server, out = _sink(start, tmp_path, len(expected), eventually)
    server.send("t\ud800", keys)
    assert _received(server, out, eventually) == expected


def test_a_server_that_comes_up_after_its_destroy_is_ended() -> None:
    """A signal that ends a run while a launch's tmux client is still starting the server: the
    destroy runs before the server exists, and the server (and its pane's program) came up after it
    (ci11: a campaign ended by SIGINT left a tmux server and its bash). The destroy looks for it."""
    from stateful.reference.tmux import _servers_naming

    server = TmuxServer()
    marker = str(600 + os.getpid() % 1000).encode()  # this test's pane program: sleep <marker>
    late = subprocess.Popen(["sh", "-c", f"sleep 0.5; exec tmux -S '{server.socket_path}' -f /dev/null "
                                         f"new-session -d -x 80 -y 24 'sleep {marker.decode()}'"])
    server.destroy()
    late.wait(10)
    assert not _servers_naming(server.socket_path)
    assert not [s.pid for s in tmux._all_stats() if s.comm == "sleep" and _cmdline(s.pid) == b"sleep\0" + marker + b"\0"]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

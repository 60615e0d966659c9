"""TerminalRegistry: scoping, launch/close semantics, events, the exit watcher, concurrency, leaks."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stateful.reference import faults
from stateful.reference import registry as registry_module
from stateful.reference.registry import (
    LaunchFailed,
    LaunchResult,
    ResourceEvent,
    TerminalGone,
    TerminalNotFound,
    TerminalRegistry,
    resource_base_id,
)
from stateful.reference.spec import TerminalSpec

Eventually = Callable[..., Any]
CREATED, DELETED = "session.resource.created", "session.resource.deleted"


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def screen_with(registry: TerminalRegistry, sid: str, term: str, sess: str, needle: str, eventually: Eventually) -> str:
    """Bounded polling of read until ``needle`` shows (with the whole history)."""

    def check() -> str | None:
        screen = registry.read(sid, term, sess, scrollback=10_000)
        return screen if needle in screen else None

    return eventually(check)


def marker(n: int | str) -> tuple[str, str]:
    """A command printing a marker, and the marker: the command's own echo cannot contain it."""
    return f"echo MARK-$((40+2))-{n}", f"MARK-42-{n}"


def _running(cmdline: bytes, pids: list[int]) -> bool:
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if handle.read() == cmdline:
                    return True
        except OSError:
            pass
    return False


# --------------------------------------------------------------------------------------------
# launch


def test_launch_then_already_running_with_the_same_socket(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent]
) -> None:
    first = terminal_registry.launch("s1", bash_spec, "main")
    assert first.status == "launched"
    assert first.resource_id == "terminal_bash_main"
    assert os.path.basename(first.tmux_socket) == "tmux.sock"
    again = terminal_registry.launch("s1", bash_spec, "main")
    assert again == LaunchResult("already_running", first.tmux_socket, first.resource_id)
    assert terminal_events == [
        ResourceEvent(
            "s1",
            CREATED,
            "terminal_bash_main",
            {"terminal": "bash", "session": "main", "tmux_socket": first.tmux_socket, "command": "bash --norc --noprofile"},
        )
    ]
    [row] = terminal_registry.list("s1")
    assert (row.terminal, row.session, row.command, row.running, row.has_os_env, row.tmux_socket) == (
        "bash", "main", "bash --norc --noprofile", True, True, first.tmux_socket,
    )  # fmt: skip


@pytest.mark.parametrize("command", ["true", "no-such-command-xyz"])
def test_a_program_that_dies_at_once_is_a_failed_launch(
    terminal_registry: TerminalRegistry,
    tmp_path: Path,
    terminal_events: list[ResourceEvent],
    command: str,
) -> None:
    spec = TerminalSpec("t", command, cwd=str(tmp_path))
    before = set(os.listdir(tempfile.gettempdir()))
    with pytest.raises(LaunchFailed) as info:
        terminal_registry.launch("s1", spec, "x")
    assert str(info.value) == "terminal t:x exited before it became available"
    assert terminal_registry.list("s1") == []
    assert terminal_events == []
    assert set(os.listdir(tempfile.gettempdir())) == before  # its socket directory is gone


def test_a_missing_working_directory_is_a_failed_launch(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, tmp_path: Path
) -> None:
    with pytest.raises(LaunchFailed, match="does not exist"):
        terminal_registry.launch("s1", replace(bash_spec, cwd=str(tmp_path / "gone")), "x")


def test_the_program_runs_with_its_args_in_its_cwd_with_utf8_and_no_history_file(
    terminal_registry: TerminalRegistry, tmp_path: Path, eventually: Eventually
) -> None:
    spec = TerminalSpec(
        "sh", "bash", args=("-c", 'echo "[$(pwd)] [$1] [$HISTFILE] [$(locale charmap)]"; exec cat', "-", "a b;"),
        cwd=str(tmp_path),
    )  # fmt: skip
    terminal_registry.launch("s1", spec, "x")
    other = tmp_path / "sub"
    other.mkdir()
    terminal_registry.launch("s1", spec, "y", cwd=str(other))

    def shows(session: str, needle: str) -> bool:  # rows joined, blanks dropped: the paths are long, and a
        # blank that falls on a row's last column is trimmed with the row (which path lengths make it so varies)
        return "".join(needle.split()) in "".join(terminal_registry.read("s1", "sh", session, scrollback=0).split())

    eventually(lambda: shows("x", f"[{tmp_path}] [a b;] [/dev/null] [UTF-8]"))
    eventually(lambda: shows("y", f"[{other}] [a b;]"))


def test_panes_are_80x24_and_history_is_the_spec_scrollback(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, eventually: Eventually
) -> None:
    spec = replace(bash_spec, scrollback=50)
    terminal_registry.launch("s1", spec, "x")
    terminal_registry.send("s1", "bash", "x", text="seq 1 200; printf '%0100d\\n' 7", keys="Enter")
    screen = screen_with(terminal_registry, "s1", "bash", "x", "0" * 19 + "7\n", eventually)
    rows = screen.split("\n")[:-1]
    assert len(rows) <= 50 + 24
    assert "200" in rows and "1" not in rows  # the oldest lines fell out of the 50-line history
    assert "0" * 80 in rows and "0" * 19 + "7" in rows  # long lines stay split at 80 columns
    visible = terminal_registry.read("s1", "bash", "x", scrollback=0).split("\n")[:-1]
    assert len(visible) == 24


# --------------------------------------------------------------------------------------------
# scoping and names


ODD_NAMES = [
    "a",
    "ab",  # "a" is a prefix of it: tmux would match names by prefix
    "a b",
    "a_b",
    "x:y",
    "1.2",
    "#(touch pwned)",
    "#{pane_id}",
    "-t",
    "semi;",
    "日本語 🎉",
    "n" * 1000,
]


def test_odd_session_names_are_separate_terminals(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, tmp_path: Path, eventually: Eventually
) -> None:
    results = [terminal_registry.launch("s1", bash_spec, name) for name in ODD_NAMES]
    assert [r.status for r in results] == ["launched"] * len(ODD_NAMES)
    assert len({r.tmux_socket for r in results}) == len(ODD_NAMES)
    for index, name in enumerate(ODD_NAMES):
        command, mark = marker(index)
        terminal_registry.send("s1", "bash", name, text=command, keys="Enter")
    for index, name in enumerate(ODD_NAMES):
        screen = screen_with(terminal_registry, "s1", "bash", name, marker(index)[1] + "\n", eventually)
        others = [marker(i)[1] + "\n" for i in range(len(ODD_NAMES)) if i != index]
        assert not any(o in screen for o in others)
    assert [row.session for row in terminal_registry.list("s1")] == ODD_NAMES
    assert terminal_registry.close("s1", "bash", "a")
    assert [row.session for row in terminal_registry.list("s1")] == ODD_NAMES[1:]
    assert terminal_registry.launch("s1", bash_spec, "ab").status == "already_running"
    assert not (tmp_path / "pwned").exists()


def test_agent_sessions_never_see_each_other(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec
) -> None:
    one = terminal_registry.launch("session-1", bash_spec, "main")
    two = terminal_registry.launch("session-2", bash_spec, "main")
    assert two.status == "launched" and two.tmux_socket != one.tmux_socket
    assert [r.tmux_socket for r in terminal_registry.list("session-1")] == [one.tmux_socket]
    assert [r.tmux_socket for r in terminal_registry.list("session-2")] == [two.tmux_socket]
    with pytest.raises(TerminalNotFound):
        terminal_registry.send("session-3", "bash", "main", text="x", keys="")
    with pytest.raises(TerminalNotFound):
        terminal_registry.read("session-3", "bash", "main", scrollback=0)
    assert not terminal_registry.close("session-3", "bash", "main")
    assert terminal_registry.close_session("session-1") == 1
    assert terminal_registry.list("session-1") == []
    assert [r.tmux_socket for r in terminal_registry.list("session-2")] == [two.tmux_socket]


@pytest.mark.parametrize(
    ("terminal", "session", "expected"),
    [
        ("bash", "main", "terminal_bash_main"),
        ("bash", "a b", "terminal_bash_a_b"),
        ("bash", "__x  y__", "terminal_bash_x_y"),
        ("my-term.v2", "k.1-2", "terminal_my-term.v2_k.1-2"),
        ("bash", "###", "terminal_bash_resource"),
        ("日本", "🎉", "terminal_resource_resource"),
        ("bash", "a:b/c", "terminal_bash_a_b_c"),
    ],
)
def test_resource_base_id(terminal: str, session: str, expected: str) -> None:
    assert resource_base_id(terminal, session) == expected


def test_resource_ids_are_unique_among_live_terminals(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent]
) -> None:
    ids = [terminal_registry.launch("s1", bash_spec, name).resource_id for name in ("a b", "a_b", "a:b")]
    assert ids == ["terminal_bash_a_b", "terminal_bash_a_b_2", "terminal_bash_a_b_3"]
    assert terminal_registry.launch("s2", bash_spec, "a b").resource_id == "terminal_bash_a_b"
    assert terminal_registry.close("s1", "bash", "a b")
    assert terminal_registry.launch("s1", bash_spec, "a;b").resource_id == "terminal_bash_a_b"
    assert [(e.session_id, e.event_type, e.resource_id) for e in terminal_events] == [
        ("s1", CREATED, "terminal_bash_a_b"),
        ("s1", CREATED, "terminal_bash_a_b_2"),
        ("s1", CREATED, "terminal_bash_a_b_3"),
        ("s2", CREATED, "terminal_bash_a_b"),
        ("s1", DELETED, "terminal_bash_a_b"),
        ("s1", CREATED, "terminal_bash_a_b"),
    ]
    assert terminal_events[4].resource["session"] == "a b"
    assert terminal_events[5].resource["session"] == "a;b"


def test_the_unnamed_resources_variant_leaves_the_pair_out_and_the_swap_fault_swaps_siblings_ids(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent]
) -> None:
    """The variant ``unnamed-resources`` (no fault): events name their pair by id alone. The planted
    fault ``sibling-deletes-swapped``: the first of two live id siblings closed records the other's
    id, the other then the first's."""
    with faults.activated("unnamed-resources", "sibling-deletes-swapped"):
        ids = [terminal_registry.launch("s1", bash_spec, name).resource_id for name in ("%1", "_%1_", "x")]
        assert ids == ["terminal_bash_1", "terminal_bash_1_2", "terminal_bash_x"]
        for name in ("%1", "x", "_%1_"):
            assert terminal_registry.close("s1", "bash", name)
    assert [(e.event_type, e.resource_id) for e in terminal_events[3:]] == [
        (DELETED, "terminal_bash_1_2"), (DELETED, "terminal_bash_x"), (DELETED, "terminal_bash_1")]
    assert all("terminal" not in e.resource and "session" not in e.resource for e in terminal_events)


# --------------------------------------------------------------------------------------------
# send and read


LITERALS = {
    "leading dash": "-n -e --",
    "trailing semicolon": "abc;",
    "trailing backslash semicolon": "abc\\;",
    "key names": "Enter C-c Escape Tab",
    "formats": "#{pane_id} #(touch pwned) ##{x} #[fg=red]",
    "quotes": "it's \"quoted\" `not run` $HOME $(date) \\n",
    "unicode": "héllo 日本語 🎉 e\u0301 Ωμέγα",
    "newlines": "one\ntwo\n\nthree",
    "over 16 KiB": ("日本;-#{x}'\" " * 2000)[:17000],
}


@pytest.mark.parametrize("text", list(LITERALS.values()), ids=list(LITERALS))
def test_send_types_text_literally_into_a_shell(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, tmp_path: Path, eventually: Eventually, text: str
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    digest = hashlib.md5(text.encode()).hexdigest()
    terminal_registry.send("s1", "bash", "x", text=f"printf %s {shell_quote(text)} | md5sum", keys="Enter")
    screen_with(terminal_registry, "s1", "bash", "x", f"{digest}  -", eventually)
    assert not (tmp_path / "pwned").exists()


def test_a_newline_in_text_runs_each_line_and_keys_follow_the_text(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, eventually: Eventually
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    first, second, third = marker(1), marker(2), marker(3)
    terminal_registry.send("s1", "bash", "x", text=f"{first[0]}\n{second[0]}", keys="Enter")
    screen_with(terminal_registry, "s1", "bash", "x", f"{first[1]}\n", eventually)
    screen_with(terminal_registry, "s1", "bash", "x", f"{second[1]}\n", eventually)
    terminal_registry.send("s1", "bash", "x", text=third[0], keys="")  # typed, not run
    terminal_registry.send("s1", "bash", "x", text=None, keys="Enter")
    screen_with(terminal_registry, "s1", "bash", "x", f"{third[1]}\n", eventually)


def test_keys_are_pressed_in_order(
    terminal_registry: TerminalRegistry,
    bash_spec: TerminalSpec,
    eventually: Eventually,
    terminal_pids: Callable[[str], list[int]],
) -> None:
    socket = terminal_registry.launch("s1", bash_spec, "x").tmux_socket
    terminal_registry.send("s1", "bash", "x", text="sleep 1000", keys="Enter")
    eventually(lambda: _running(b"sleep\x001000\x00", terminal_pids(socket)))
    terminal_registry.send("s1", "bash", "x", text=None, keys="C-c")
    command, mark = marker("after-interrupt")
    terminal_registry.send("s1", "bash", "x", text="echo typo", keys="C-u")  # erased before Enter
    terminal_registry.send("s1", "bash", "x", text=command, keys="  Enter  ")
    screen = screen_with(terminal_registry, "s1", "bash", "x", mark + "\n", eventually)
    assert "typo" not in screen.replace("echo typo", "")


def test_a_read_right_after_a_send_shows_the_output(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec
) -> None:
    """The reference stack's convenience (bounded waits): scripted tests read right after a send."""
    terminal_registry.launch("s1", bash_spec, "x")
    for n in range(3):
        command, mark = marker(n)
        terminal_registry.send("s1", "bash", "x", text=command, keys="Enter")
        assert mark + "\n" in terminal_registry.read("s1", "bash", "x", scrollback=0)


def test_output_that_scrolled_away_is_found_with_scrollback(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, eventually: Eventually
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    command, mark = marker("early")
    terminal_registry.send("s1", "bash", "x", text=f"{command}; seq 1 100", keys="Enter")
    screen_with(terminal_registry, "s1", "bash", "x", "\n100\n", eventually)
    assert mark not in terminal_registry.read("s1", "bash", "x", scrollback=0)
    assert mark + "\n" in terminal_registry.read("s1", "bash", "x", scrollback=500)


def test_unknown_pairs_are_not_found(terminal_registry: TerminalRegistry, bash_spec: TerminalSpec) -> None:
    terminal_registry.launch("s1", bash_spec, "a")
    for sid, term, sess in [("s1", "bash", "ab"), ("s1", "bash", "A"), ("s1", "zsh", "a"), ("s2", "bash", "a")]:
        with pytest.raises(TerminalNotFound) as info:
            terminal_registry.send(sid, term, sess, text="x", keys="Enter")
        assert str(info.value) == f"terminal '{term}:{sess}' not found or not running"
        with pytest.raises(TerminalNotFound):
            terminal_registry.read(sid, term, sess, scrollback=0)
        assert terminal_registry.close(sid, term, sess) is False


# --------------------------------------------------------------------------------------------
# exit and close


def test_an_exited_terminal_is_removed_and_can_be_relaunched(
    terminal_registry: TerminalRegistry,
    bash_spec: TerminalSpec,
    terminal_events: list[ResourceEvent],
    eventually: Eventually,
    assert_no_terminal_left: Callable[[str], None],
) -> None:
    first = terminal_registry.launch("s1", bash_spec, "x")
    terminal_registry.send("s1", "bash", "x", text="exit", keys="Enter")
    eventually(lambda: terminal_registry.list("s1") == [])
    eventually(lambda: len(terminal_events) == 2)
    assert [(e.event_type, e.resource_id) for e in terminal_events] == [
        (CREATED, "terminal_bash_x"),
        (DELETED, "terminal_bash_x"),
    ]
    assert_no_terminal_left(first.tmux_socket)
    with pytest.raises(TerminalNotFound):
        terminal_registry.send("s1", "bash", "x", text="x", keys="")
    assert terminal_registry.close("s1", "bash", "x") is False
    again = terminal_registry.launch("s1", bash_spec, "x")
    assert again.status == "launched" and again.tmux_socket != first.tmux_socket
    assert [e.event_type for e in terminal_events] == [CREATED, DELETED, CREATED]


@pytest.fixture
def no_exit_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freeze the exit watcher so that an exited pair stays registered (running=False)."""
    monkeypatch.setattr(registry_module, "WATCH_INTERVAL", 3600.0)


@pytest.mark.usefixtures("no_exit_watcher")
def test_send_to_an_exited_terminal_says_it_is_no_longer_running(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent], eventually: Eventually
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    terminal_registry.send("s1", "bash", "x", text="exit", keys="Enter")
    eventually(lambda: [r.running for r in terminal_registry.list("s1")] == [False])
    with pytest.raises(TerminalGone) as info:
        terminal_registry.send("s1", "bash", "x", text="echo", keys="Enter")
    assert str(info.value) == "Terminal bash:x is no longer running (tmux server exited)"
    assert terminal_registry.list("s1") == []
    assert [e.event_type for e in terminal_events] == [CREATED, DELETED]


@pytest.mark.usefixtures("no_exit_watcher")
def test_read_of_an_exited_terminal_and_relaunch_of_it(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent], eventually: Eventually
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    terminal_registry.launch("s1", bash_spec, "y")
    for sess in ("x", "y"):
        terminal_registry.send("s1", "bash", sess, text="exit", keys="Enter")
    eventually(lambda: [r.running for r in terminal_registry.list("s1")] == [False, False])
    with pytest.raises(TerminalGone):
        terminal_registry.read("s1", "bash", "x", scrollback=0)
    assert terminal_registry.launch("s1", bash_spec, "y").status == "launched"
    assert [(e.event_type, e.resource["session"]) for e in terminal_events] == [
        (CREATED, "x"), (CREATED, "y"), (DELETED, "x"), (DELETED, "y"), (CREATED, "y"),
    ]  # fmt: skip


@pytest.mark.usefixtures("no_exit_watcher")
def test_close_of_an_exited_terminal_says_closed(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent], eventually: Eventually
) -> None:
    terminal_registry.launch("s1", bash_spec, "x")
    terminal_registry.send("s1", "bash", "x", text="exit", keys="Enter")
    eventually(lambda: [r.running for r in terminal_registry.list("s1")] == [False])
    assert terminal_registry.close("s1", "bash", "x") is True
    assert terminal_registry.close("s1", "bash", "x") is False
    assert [e.event_type for e in terminal_events] == [CREATED, DELETED]


LINGERING = (
    "sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & "
    "(trap '' HUP TERM; sleep 1003) & sleep 1004 & kill -STOP $!; disown -a"
)


def _start_lingering(registry: TerminalRegistry, spec: TerminalSpec, sid: str, sess: str, eventually: Eventually, terminal_pids: Callable[[str], list[int]]) -> str:
    socket = registry.launch(sid, spec, sess).tmux_socket
    registry.send(sid, "bash", sess, text=LINGERING, keys="Enter")
    eventually(lambda: len(terminal_pids(socket)) >= 6)  # server, bash, four sleeps (and a subshell)
    return socket


def test_close_kills_every_process_of_the_terminal(
    terminal_registry: TerminalRegistry,
    bash_spec: TerminalSpec,
    terminal_events: list[ResourceEvent],
    eventually: Eventually,
    terminal_pids: Callable[[str], list[int]],
    assert_no_terminal_left: Callable[[str], None],
) -> None:
    socket = _start_lingering(terminal_registry, bash_spec, "s1", "x", eventually, terminal_pids)
    assert terminal_registry.close("s1", "bash", "x") is True
    assert_no_terminal_left(socket)
    assert [e.event_type for e in terminal_events] == [CREATED, DELETED]


def test_close_session_and_shutdown_leave_nothing(
    terminal_registry: TerminalRegistry,
    bash_spec: TerminalSpec,
    eventually: Eventually,
    terminal_pids: Callable[[str], list[int]],
    assert_no_terminal_left: Callable[[str], None],
) -> None:
    a = _start_lingering(terminal_registry, bash_spec, "s1", "a", eventually, terminal_pids)
    b = _start_lingering(terminal_registry, bash_spec, "s1", "b", eventually, terminal_pids)
    c = _start_lingering(terminal_registry, bash_spec, "s2", "c", eventually, terminal_pids)
    assert terminal_registry.close_session("s1") == 2
    assert terminal_registry.close_session("s1") == 0
    assert_no_terminal_left(a)
    assert_no_terminal_left(b)
    assert terminal_pids(c)
    terminal_registry.shutdown()
    assert_no_terminal_left(c)
    terminal_registry.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        terminal_registry.launch("s1", bash_spec, "a")


def test_the_context_manager_shuts_down(bash_spec: TerminalSpec, assert_no_terminal_left: Callable[[str], None]) -> None:
    with TerminalRegistry() as registry:
        socket = registry.launch("s1", bash_spec, "x").tmux_socket
    assert_no_terminal_left(socket)


OWNER = """
import sys
from stateful.reference.registry import TerminalRegistry
from stateful.reference.spec import TerminalSpec
registry = TerminalRegistry()
spec = TerminalSpec("bash", "bash", args=("--norc", "--noprofile"), cwd=sys.argv[1])
for name in ("a", "b"):
    socket = registry.launch("s1", spec, name).tmux_socket
    registry.send("s1", "bash", name, text={lingering!r}, keys="Enter")
    print(socket, flush=True)
sys.stdin.read()  # until the test kills us
"""


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_nothing_outlives_the_registry_owner(
    tmp_path: Path, eventually: Eventually, terminal_pids: Callable[[str], list[int]], how: str
) -> None:
    """A reaper subprocess kills what the owner left, even when the owner is SIGKILLed."""
    private_tmp = tempfile.mkdtemp()  # short: a Unix socket path has at most 107 bytes
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(lingering=LINGERING), str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": private_tmp},
    )
    try:
        assert owner.stdout is not None
        sockets = [owner.stdout.readline().strip() for _ in range(2)]
        for socket in sockets:
            assert socket.startswith(private_tmp)
            eventually(lambda: len(terminal_pids(socket)) >= 6)
        if how == "sigkill":
            owner.kill()
        else:
            assert owner.stdin is not None
            owner.stdin.close()  # the owner returns from main; atexit shuts its registry down
        owner.wait(timeout=30)
        for socket in sockets:
            eventually(lambda: terminal_pids(socket) == [])
            eventually(lambda: not os.path.exists(os.path.dirname(socket)))
    finally:
        owner.kill()
        owner.wait()
        os.rmdir(private_tmp)


# --------------------------------------------------------------------------------------------
# concurrency


def _run_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = target(index)
        except BaseException as exc:  # collected and checked by the caller
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_concurrent_launches_of_one_pair_start_one_process(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent]
) -> None:
    results = _run_threads(12, lambda _: terminal_registry.launch("s1", bash_spec, "x"))
    assert sorted(r.status for r in results) == ["already_running"] * 11 + ["launched"]
    assert len({r.tmux_socket for r in results}) == 1
    assert [e.event_type for e in terminal_events] == [CREATED]


def test_a_pair_closed_while_list_looks_at_it_is_not_listed(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec
) -> None:
    """List and close at once: the list shows the pair running (before the close) or not at all
    (after it), never registered but not running, which no order of the two calls explains."""
    terminal_registry.launch("s1", bash_spec, "x")
    terminal_registry.launch("s1", bash_spec, "y")
    server = terminal_registry._terminals[("s1", "bash", "x")].server
    looked = server.is_alive

    def closed_meanwhile() -> bool:  # the close runs to its end between the list's two looks
        closer = threading.Thread(target=terminal_registry.close, args=("s1", "bash", "x"))
        closer.start()
        closer.join()
        return looked()

    server.is_alive = closed_meanwhile  # type: ignore[method-assign]
    assert [(i.session, i.running) for i in terminal_registry.list("s1")] == [("y", True)]


def test_concurrent_launch_send_read_close_on_one_pair(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent], terminal_pids: Callable[[str], list[int]]
) -> None:
    def churn(index: int) -> Counter[str]:
        seen: Counter[str] = Counter()
        for round_ in range(6):
            action = (index + round_) % 4
            try:
                if action == 0:
                    seen[terminal_registry.launch("s1", bash_spec, "x").status] += 1
                elif action == 1:
                    terminal_registry.send("s1", "bash", "x", text=f"echo {index}", keys="Enter")
                    seen["sent"] += 1
                elif action == 2:
                    terminal_registry.read("s1", "bash", "x", scrollback=5)
                    seen["read"] += 1
                else:
                    seen["closed" if terminal_registry.close("s1", "bash", "x") else "not_found"] += 1
            except TerminalNotFound:
                seen["not found"] += 1
        return seen

    results = _run_threads(8, churn)
    errors = [r for r in results if not isinstance(r, Counter)]
    assert errors == []
    totals = sum(results, Counter())
    assert totals["launched"] >= 1
    # Events of the pair strictly alternate created/deleted, one created per launched.
    kinds = [e.event_type for e in terminal_events]
    assert kinds[::2] == [CREATED] * len(kinds[::2]) and kinds[1::2] == [DELETED] * len(kinds[1::2])
    assert kinds.count(CREATED) == totals["launched"]
    assert kinds.count(DELETED) == totals["closed"]
    live = terminal_registry.list("s1")
    assert len(live) == kinds.count(CREATED) - kinds.count(DELETED)
    for event in terminal_events:
        if event.resource["tmux_socket"] not in {r.tmux_socket for r in live}:
            assert terminal_pids(event.resource["tmux_socket"]) == []


def test_concurrent_work_on_different_pairs(
    terminal_registry: TerminalRegistry, bash_spec: TerminalSpec, terminal_events: list[ResourceEvent], eventually: Eventually
) -> None:
    def work(index: int) -> str:
        sid, sess = f"s{index % 3}", f"k{index}"
        assert terminal_registry.launch(sid, bash_spec, sess).status == "launched"
        command, mark = marker(index)
        terminal_registry.send(sid, "bash", sess, text=command, keys="Enter")
        screen_with(terminal_registry, sid, "bash", sess, mark + "\n", eventually)
        assert terminal_registry.close(sid, "bash", sess)
        return mark

    results = _run_threads(9, work)
    assert results == [marker(i)[1] for i in range(9)]
    assert Counter(e.event_type for e in terminal_events) == {CREATED: 9, DELETED: 9}
    assert all(terminal_registry.list(f"s{i}") == [] for i in range(3))

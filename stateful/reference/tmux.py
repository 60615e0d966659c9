"""One private tmux server per terminal: the only code in the project that runs tmux.

Why a private server per terminal: a terminal's whole life (its socket, its server, its pane, every
process in the pane's session) can then be torn down without touching anything else, and the user's
default tmux server is never involved: every command carries ``-S <private socket> -f /dev/null``.

Commands go through :func:`run_tmux`, which bounds every invocation by :data:`TMUX_TIMEOUT`: a tmux
server that stops answering (stopped, wedged, its socket held) would otherwise hold the caller, and
with it the registry's lock on the pair, for ever. An expired command's client is killed and reaped
and the caller gets :class:`TmuxTimeout`. :meth:`TmuxServer.run` also checks tmux's exit status and
stderr on every command (a send to a vanished pane must not "succeed") and raises :class:`TmuxError`
(or :class:`TmuxServerGone`).

Three tmux quirks shape the code below:

* tmux splits its argument vector at every argument that *ends* in ``;`` (a command separator). An
  argument that must end in ``;`` is passed with a backslash before that final ``;``, which tmux
  strips again (:func:`tmux_argument`). This holds for every argument we do not want split: typed
  text, key names, the command and its arguments, the working directory.
* ``new-session -c DIR`` expands formats in DIR (``#{...}`` and even ``#(shell command)``), so a
  literal ``#`` is doubled there.
* The pane is addressed by its id (``%N``) only, never by a name: tmux matches names by prefix.

Process inspection (liveness, the pty's input queue, whether the foreground program waits for
input) reads ``/proc`` and the pane's tty directly: that costs no tmux round trip, so the exit watcher
and the read/send conveniences stay cheap. Processes are identified by (pid, start time) so that a
recycled pid is never mistaken for ours and nothing we did not start is ever signalled.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stateful.reference import faults

__all__ = [
    "ProcessRef",
    "TmuxError",
    "TmuxServer",
    "TmuxServerGone",
    "TmuxTimeout",
    "TMUX_TIMEOUT",
    "read_stat",
    "run_tmux",
    "session_members",
    "tmux_argument",
]

logger = logging.getLogger(__name__)

SOCKET_DIR_PREFIX = "stateful-tmux-"
"""Prefix of every private socket directory (``tempfile.mkdtemp``, mode 0700)."""

_SEND_CHUNK_BYTES = 4096
"""Bytes of typed text per ``send-keys -l`` argument; never splits a UTF-8 character."""

_MAX_KEY_NAME = 64
"""Longer "key names" are typed as text (tmux would type an unknown name literally anyway)."""

_MAX_HISTORY = 2**31 - 1
"""tmux reads ``capture-pane -S`` as an int."""

_INVOCATION_BYTES = 8192
"""Typed bytes per tmux invocation: tmux refuses a command line over 16 KiB ("command too long")."""

TMUX_TIMEOUT = 30.0
"""Seconds one tmux invocation may take. A healthy one takes milliseconds, a few seconds on a machine
that is very busy; past this the server is taken as hung (the client is killed, :class:`TmuxTimeout`)."""

_GONE_MARKERS = (
    "no server running",
    "error connecting to",
    "server exited",
    "lost server",
    "can't find pane",
    "can't find session",
    "can't find window",
)

_INPUT_WAITS = (
    "wait_woken",  # n_tty_read: a canonical-mode read (cat, sh, read)
    "n_tty_read",
    "poll_schedule_timeout",  # select/poll: readline (bash, python), most REPLs and TUIs
    "do_select",
    "core_sys_select",
    "do_sys_poll",
    "ep_poll",
    "do_epoll_wait",
)
"""Kernel wait channels of a process blocked waiting for (terminal) input."""

_SURROGATES = re.compile("[\ud800-\udfff]")


class TmuxError(RuntimeError):
    """A tmux command failed; the message carries tmux's own words."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr


class TmuxServerGone(TmuxError):
    """The private server, or its only pane, no longer exists."""


class TmuxTimeout(TmuxError):
    """A tmux command did not finish within its timeout: its server hangs (the client was killed)."""


@dataclass(frozen=True)
class TmuxAnswer:
    """What one tmux invocation printed: stdout lines (trailing empty lines dropped), stderr lines."""

    returncode: int
    stdout: list[str]
    stderr: list[str]


def run_tmux(tmux_bin: str, socket_path: str, *args: str, timeout: float | None = None) -> TmuxAnswer:
    """Run one tmux command line against the server at ``socket_path``, bounded in time.

    Every invocation names the private socket and ``-f /dev/null`` (the user's server and config are
    never involved) and reads nothing from stdin. Past ``timeout`` (default :data:`TMUX_TIMEOUT`) the
    tmux client is killed and reaped, and :class:`TmuxTimeout` says which command hung on which server.
    """
    limit = TMUX_TIMEOUT if timeout is None else timeout
    command = [tmux_bin, f"-S{socket_path}", "-f/dev/null", *args]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="backslashreplace",
            timeout=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TmuxTimeout(
            f"tmux {args[0] if args else ''} did not answer within {limit:g} s: the tmux server at "
            f"{socket_path} hangs (the tmux client was killed)",
            command=args,
        ) from None
    except OSError as exc:
        raise TmuxError(f"tmux could not be run: {exc}", command=args) from exc
    stdout = done.stdout.split("\n")
    while stdout and stdout[-1] == "":
        stdout.pop()
    return TmuxAnswer(done.returncode, stdout, [line for line in done.stderr.split("\n") if line])


# --------------------------------------------------------------------------------------------
# /proc helpers


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that we use."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    tpgid: int
    start_time: int


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        # comm may contain spaces and parentheses: it ends at the *last* ')'.
        left, right = data.index(b"("), data.rindex(b")")
        fields = data[right + 2 :].split()
        return ProcStat(
            pid=pid,
            comm=data[left + 1 : right].decode("utf-8", "replace"),
            state=fields[0].decode(),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            tpgid=int(fields[5]),
            start_time=int(fields[19]),
        )
    except (ValueError, IndexError):
        return None


def _all_stats() -> Iterable[ProcStat]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                yield stat


@dataclass(frozen=True)
class ProcessRef:
    """A process identified robustly: a pid plus its start time (pids are recycled)."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> ProcessRef | None:
        stat = read_stat(pid)
        return None if stat is None else cls(pid, stat.start_time)

    def stat(self) -> ProcStat | None:
        """The process's stat if it is still this process (not a recycled pid)."""
        stat = read_stat(self.pid)
        if stat is None or stat.start_time != self.start_time:
            return None
        return stat

    def alive(self) -> bool:
        """Running (a zombie has exited: only its exit status is left)."""
        stat = self.stat()
        return stat is not None and stat.state not in ("Z", "X", "x")

    def recycled(self) -> bool:
        """True if another process now has this pid."""
        stat = read_stat(self.pid)
        return stat is not None and stat.start_time != self.start_time

    def signal(self, signum: int) -> None:
        if self.alive() and self.pid not in (0, 1, os.getpid()):
            try:
                os.kill(self.pid, signum)
            except OSError:
                pass


def session_members(leader: ProcessRef) -> list[int]:
    """Pids of the live processes in the session that ``leader`` leads.

    A pane's program is a session leader (tmux gives each pane a new session), so these are every
    process the terminal started, background jobs and nohup'd children included (only a process
    that calls ``setsid`` itself escapes). The kernel does not reuse a pid while a process still
    has it as its session id, so the members are found even after the leader exited; if the pid
    now belongs to a *different* process, our session is empty and nothing is returned.
    """
    if leader.recycled():
        return []
    me = os.getpid()
    return [
        stat.pid
        for stat in _all_stats()
        if stat.session == leader.pid and stat.state not in ("Z", "X", "x") and stat.pid not in (1, me)
    ]


def _ignores_sighup(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _signal_all(pids: Iterable[int], *signums: int) -> None:
    for pid in pids:
        for signum in signums:
            try:
                os.kill(pid, signum)
            except OSError:
                pass


def _wait_members(leader: ProcessRef, until: Callable[[list[int]], bool], timeout: float) -> list[int]:
    """Poll the session until ``until(members)``; SIGKILL members that ignore SIGHUP meanwhile
    (``nohup``): no hangup will ever end them, and they run no cleanup."""
    deadline = time.monotonic() + timeout
    members = session_members(leader)
    while not until(members) and time.monotonic() < deadline:
        _signal_all([pid for pid in members if _ignores_sighup(pid)], signal.SIGKILL)
        time.sleep(0.005)
        members = session_members(leader)
    return members


def kill_session(leader: ProcessRef, *, grace: float = 1.0, timeout: float = 2.0) -> list[int]:
    """End every process of the session that ``leader`` leads, hangup first, SIGKILL last.

    Call it once the pane's pty is closed (the tmux server killed or gone): the kernel has then
    sent SIGHUP to the session leader, and an interactive shell passes it on to its jobs. A
    second SIGHUP would cut short the EXIT traps that shells run on hangup, and killing them early
    leaves their cleanup undone (``pyenv rehash``, run from an rc file, then leaves a stale lock
    that stalls every later shell start for a minute). So: wait up to ``grace`` for the leader to
    go; then SIGHUP the rest once and wait up to ``grace`` again; then SIGKILL whatever is left.
    Processes that ignore SIGHUP are SIGKILLed as soon as they are seen.
    Returns the pids still alive ``timeout`` s after that (normally none).
    """
    members = _wait_members(leader, lambda pids: leader.pid not in pids, grace)
    if members:
        # Give the leader's own hangup handling (it signals its jobs) a moment to finish.
        members = _wait_members(leader, lambda pids: not pids, 0.05)
    others = [pid for pid in members if pid != leader.pid]
    _signal_all(others, signal.SIGHUP, signal.SIGCONT)
    members = _wait_members(leader, lambda pids: not pids, grace if others else 0.0)
    deadline = time.monotonic() + timeout
    while members:
        _signal_all(members, signal.SIGKILL)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
        members = session_members(leader)
    return members


LATE_SERVER_WAIT = 2.0
"""Seconds a destroy whose server's pid was never learned looks for that server coming up late."""


def _servers_naming(socket_path: str) -> list[ProcStat]:
    """The tmux processes whose command line names ``socket_path`` (a server keeps the arguments of
    the client that forked it); the private socket's path is ours alone."""
    found = []
    named = os.fsencode(socket_path)
    for stat in _all_stats():
        if not stat.comm.startswith("tmux"):  # the client ("tmux") and the server ("tmux: server")
            continue
        try:
            with open(f"/proc/{stat.pid}/cmdline", "rb") as handle:
                arguments = handle.read().split(b"\0")
        except OSError:
            continue
        if any(named in argument for argument in arguments):
            found.append(stat)
    return found


def _end_late_servers(socket_path: str, within: float) -> None:
    """End a server that comes up after its destroy: one whose start was still under way when a
    signal ended the run (the client that starts it runs on, so the server and its pane's program
    appear after everything known was killed). Looks for ``within`` seconds; kills the pane's
    programs (the server's children) and the server."""
    deadline = time.monotonic() + within
    while True:
        for server in _servers_naming(socket_path):
            children = [stat.pid for stat in _all_stats() if stat.ppid == server.pid]
            _signal_all([server.pid, *children], signal.SIGKILL)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# argument escaping


def tmux_argument(value: str) -> str:
    """``value`` escaped so that tmux's argument parser hands it over unchanged.

    tmux treats an argument ending in ``;`` as a command separator (the ``;`` is dropped and the
    rest ends the command). If the character before that final ``;`` is a backslash, tmux instead
    replaces the backslash-semicolon with a plain ``;``. So ``a;`` is sent as ``a\\;`` and ``a\\;``
    as ``a\\\\;``; nothing else in an argument is special.
    """
    if value.endswith(";"):
        return value[:-1] + "\\;"
    return value


def _format_literal(value: str) -> str:
    """``value`` for an option that tmux expands as a format (``#{...}``, ``#(...)``)."""
    return value.replace("#", "##")


def _text_chunks(text: str, limit: int = _SEND_CHUNK_BYTES) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    data = text.encode("utf-8")
    chunks: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1  # back off to a character boundary
        chunks.append(data[start:end].decode("utf-8"))
        start = end
    return chunks


def _find_tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        raise TmuxError("tmux is not installed (no 'tmux' on PATH)")
    return path


# --------------------------------------------------------------------------------------------
# the server


class TmuxServer:
    """One private tmux server holding one 80x24 pane.

    Lifecycle: ``TmuxServer()`` creates the private socket directory (nothing runs yet),
    :meth:`start` starts the server and the pane's program, :meth:`destroy` kills the server and
    every process of the pane's session and removes the directory. :meth:`describe` and
    :meth:`restore` let another process (the reaper) destroy a server it did not start.

    Not thread-safe for concurrent commands on one pane (the registry serialises them); the
    inspection methods and :meth:`destroy` may be called from any thread.
    """

    SESSION_NAME = "stateful"
    """A fixed, harmless session name; nothing ever targets it (panes are targeted by id)."""

    def __init__(self, directory: str | None = None, *, tmux_bin: str | None = None) -> None:
        self.tmux_bin = tmux_bin or _find_tmux()
        self.directory = directory or tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)
        self.socket_path = os.path.join(self.directory, "tmux.sock")
        if len(os.fsencode(self.socket_path)) > 100:
            if directory is None:
                shutil.rmtree(self.directory, ignore_errors=True)
            raise TmuxError(f"tmux socket path too long for a Unix socket: {self.socket_path}")
        self.pane_id: str | None = None
        self.pane_tty: str | None = None
        self.pane: ProcessRef | None = None
        """The pane's program: the leader of the terminal's session."""
        self.server: ProcessRef | None = None
        """The tmux server process."""
        self._destroy_lock = threading.Lock()
        self._destroyed = False

    def __repr__(self) -> str:
        return f"TmuxServer(socket_path={self.socket_path!r}, pane_id={self.pane_id!r})"

    # -- serialisation (for the reaper) ---------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What :meth:`restore` needs to find and destroy this server from another process."""
        return {
            "directory": self.directory,
            "socket_path": self.socket_path,
            "pane_id": self.pane_id,
            "pane": None if self.pane is None else [self.pane.pid, self.pane.start_time],
            "server": None if self.server is None else [self.server.pid, self.server.start_time],
        }

    @classmethod
    def restore(cls, record: Mapping[str, Any]) -> TmuxServer:
        server = cls(str(record["directory"]))
        server.pane_id = record.get("pane_id")
        pane, tmux = record.get("pane"), record.get("server")
        server.pane = None if not pane else ProcessRef(int(pane[0]), int(pane[1]))
        server.server = None if not tmux else ProcessRef(int(tmux[0]), int(tmux[1]))
        return server

    # -- running tmux ---------------------------------------------------------------------------

    def run(self, *args: str) -> list[str]:
        """Run one tmux command line on this server; its stdout lines, or TmuxError (TmuxTimeout if
        the server does not answer within :data:`TMUX_TIMEOUT`)."""
        if not args:
            raise ValueError("no tmux command given")
        proc = run_tmux(self.tmux_bin, self.socket_path, *args)
        stderr = "\n".join(proc.stderr).strip()
        if proc.returncode != 0 or stderr:
            message = stderr or f"tmux exited with status {proc.returncode}"
            error = TmuxServerGone if any(m in message for m in _GONE_MARKERS) else TmuxError
            raise error(
                f"tmux {args[0]} failed: {message}",
                command=args,
                returncode=proc.returncode,
                stderr=stderr,
            )
        return list(proc.stdout)

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        history_limit: int = 10_000,
        width: int = 80,
        height: int = 24,
    ) -> None:
        """Start the server and its one pane running ``argv`` (executed directly, no shell).

        ``history-limit`` is set globally before the pane exists: tmux fixes a pane's history size
        when it creates the pane.
        """
        if not argv:
            raise ValueError("no command given")
        env_flags: list[str] = []
        for name, value in (env or {}).items():
            env_flags += ["-e", tmux_argument(f"{name}={value}")]
        fields = self.run(
            "start-server",
            ";",
            "set-option", "-g", "history-limit", str(int(history_limit)),
            ";",
            "new-session", "-d",
            "-s", self.SESSION_NAME,
            "-x", str(int(width)), "-y", str(int(height)),
            "-c", tmux_argument(_format_literal(cwd)),
            *env_flags,
            "-P", "-F", "#{pane_id} #{pane_pid} #{pid} #{pane_tty}",
            "--",
            *(tmux_argument(a) for a in argv),
        )  # fmt: skip
        try:
            pane_id, pane_pid, server_pid, pane_tty = fields[0].split(" ", 3)
        except (IndexError, ValueError):
            raise TmuxError(f"unexpected new-session output: {fields!r}", command=argv) from None
        self.pane_id, self.pane_tty = pane_id, pane_tty
        # A pane that already exited leaves no /proc entry: a start time of -1 never matches.
        self.pane = ProcessRef.of(int(pane_pid)) or ProcessRef(int(pane_pid), -1)
        self.server = ProcessRef.of(int(server_pid)) or ProcessRef(int(server_pid), -1)

    def _target(self) -> str:
        if self.pane_id is None:
            raise TmuxError("the tmux server has not been started")
        return self.pane_id

    def send(self, text: str | None, keys: Sequence[str] = ()) -> None:
        """Type ``text`` literally, then press ``keys`` (tmux key names) in order.

        Text goes through ``send-keys -l`` in chunks of at most 4 KiB (tmux refuses command lines
        over 16 KiB); NUL, which no argument can carry, goes through ``send-keys -H 00``; lone
        surrogates (not characters) become U+FFFD. A key name tmux does not know is typed literally
        (that is tmux's own behaviour for ``send-keys`` without ``-l``); a "key" no key name can
        be (one holding NUL, or longer than any key name) is typed literally by the text path.
        """
        target = self._target()
        commands: list[list[str]] = []
        if text and faults.enabled("long-text-cut"):
            text = text[:16 * 1024]  # planted fault: a "safe" cap on typed text (tmux's 16 KiB limit)
        if text and faults.enabled("send-last-char-lost"):
            text = text[:-1]  # planted fault: an off-by-one in the chunking drops the text's last character
        if text:
            commands += self._literal(target, text)
        group: list[str] = []
        size = 0
        for key in keys:
            key = _SURROGATES.sub("\ufffd", key)
            if "\0" in key or len(key.encode("utf-8")) > _MAX_KEY_NAME:
                if group:
                    commands.append(["send-keys", "-t", target, "--", *group])
                    group, size = [], 0
                commands += self._literal(target, key)
                continue
            argument = tmux_argument(key)
            if group and size + len(argument.encode("utf-8")) + 1 > _SEND_CHUNK_BYTES:
                commands.append(["send-keys", "-t", target, "--", *group])
                group, size = [], 0
            group.append(argument)
            size += len(argument.encode("utf-8")) + 1
        if group:
            commands.append(["send-keys", "-t", target, "--", *group])
        # Batch commands into as few invocations as tmux's command-length limit allows.
        batch: list[str] = []
        size = 0
        for command in commands:
            length = sum(len(part.encode("utf-8")) + 1 for part in command)
            if batch and size + length > _INVOCATION_BYTES:
                self.run(*batch)
                batch, size = [], 0
            batch += [";", *command] if batch else command
            size += length
        if batch:
            self.run(*batch)

    @staticmethod
    def _literal(target: str, text: str) -> list[list[str]]:
        commands: list[list[str]] = []
        text = _SURROGATES.sub("\ufffd", text)
        for index, piece in enumerate(text.split("\0")):
            if index:
                commands.append(["send-keys", "-H", "-t", target, "00"])
            for chunk in _text_chunks(piece):
                if faults.enabled("trailing-semicolon"):
                    # Planted fault: typed text passed unescaped; tmux takes a final ';' as a
                    # command separator and drops it.
                    commands.append(["send-keys", "-l", "-t", target, "--", chunk])
                    continue
                commands.append(["send-keys", "-l", "-t", target, "--", tmux_argument(chunk)])
        return commands

    def capture(self, history: int = 0) -> str:
        """The pane as plain text: up to ``history`` lines of scrollback, then the visible rows.

        Every row ends in ``\\n``; long lines stay split at the pane width (no ``-J``). A sentinel
        line follows the capture because :func:`run_tmux` drops trailing empty lines (blank rows).
        """
        target = self._target()
        args = ["capture-pane", "-p", "-t", target]
        if history > 0:
            args += ["-S", f"-{min(int(history), _MAX_HISTORY)}"]
        lines = self.run(*args, ";", "display-message", "-p", "-t", target, "end")
        if not lines or lines[-1] != "end":
            raise TmuxError(f"unexpected capture-pane output ({len(lines)} lines)", command=args)
        rows = lines[:-1]
        return "".join(row + "\n" for row in rows)

    # -- inspection (no tmux round trip) ---------------------------------------------------------

    def is_alive(self) -> bool:
        """The pane's program and the server both run (``/proc`` only, no tmux round trip)."""
        return (
            self.pane is not None
            and self.server is not None
            and self.pane.alive()
            and self.server.alive()
        )

    def has_started(self, command: str) -> bool:
        """The pane's program has been exec'd (the pane first runs tmux, then env, then it)."""
        if self.pane is None:
            return False
        stat = self.pane.stat()
        if stat is None:
            return False
        expected = os.path.basename(command)[:15]
        return stat.comm == expected or stat.comm not in ("tmux: server", "tmux", "env")

    def _open_tty(self) -> int | None:
        if not self.pane_tty:
            return None
        try:
            return os.open(self.pane_tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return None

    def input_pending(self) -> int:
        """Bytes typed into the pane that its program has not read yet (TIOCINQ; 0 if unknown).

        In canonical mode the kernel counts only complete lines, which is what "consumed" means
        there: a partial line waits for its Enter.
        """
        fd = self._open_tty()
        if fd is None:
            return 0
        try:
            buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
            return int(struct.unpack("i", buf)[0])
        except OSError:
            return 0
        finally:
            os.close(fd)

    def waiting_for_input(self) -> bool:
        """The pane's foreground program is blocked waiting for input (a prompt, a REPL, ``cat``).

        The foreground process group comes from the session leader's ``tpgid``; its leader's state
        and kernel wait channel tell whether it sleeps in a terminal read or select/poll.
        """
        if self.pane is None:
            return False
        leader = self.pane.stat()
        if leader is None or leader.state in ("Z", "X", "x"):
            return False
        foreground = leader if leader.tpgid in (leader.pgrp, -1, 0) else read_stat(leader.tpgid)
        if foreground is None or foreground.state != "S":
            return False
        try:
            with open(f"/proc/{foreground.pid}/wchan") as handle:
                wchan = handle.read().strip()
        except OSError:
            wchan = ""
        if wchan.startswith(_INPUT_WAITS):
            return True
        # "0": between two states, or a kernel that hides wait channels. A sleeping program that
        # switched the terminal to raw mode (readline, a REPL, a TUI) reads its input itself.
        return wchan in ("", "0") and self.tty_raw()

    def tty_raw(self) -> bool:
        """The pane's terminal is in non-canonical mode (its program reads keys, not lines)."""
        fd = self._open_tty()
        if fd is None:
            return False
        try:
            return not termios.tcgetattr(fd)[3] & termios.ICANON
        except termios.error:
            return False
        finally:
            os.close(fd)

    # -- teardown -------------------------------------------------------------------------------

    def _discover(self) -> bool:
        """Ask the server for pids we do not know yet (a reaper record written before start, or a
        start that timed out). False if the server hangs: it is then found in ``/proc`` instead."""
        try:
            lines = self.run("list-panes", "-a", "-F", "#{pane_id} #{pane_pid} #{pid}")
        except TmuxTimeout:
            self._discover_hung()
            return False
        except TmuxError:
            return True
        for line in lines[:1]:
            try:
                pane_id, pane_pid, server_pid = line.split(" ")
            except ValueError:
                break
            self.pane_id = self.pane_id or pane_id
            self.pane = self.pane or ProcessRef.of(int(pane_pid))
            self.server = self.server or ProcessRef.of(int(server_pid))
        return True

    def _discover_hung(self) -> None:
        """The server that does not answer, from ``/proc``: the tmux server whose command line names
        our private socket (``-S<path>``, as :func:`run_tmux` passes it; the directory is ours alone),
        and its pane: that server's child."""
        flag = f"-S{self.socket_path}".encode()
        for stat in _all_stats():
            if self.server is None and stat.comm == "tmux: server":
                try:
                    with open(f"/proc/{stat.pid}/cmdline", "rb") as handle:
                        arguments = handle.read().split(b"\0")
                except OSError:
                    continue
                if flag in arguments:
                    self.server = ProcessRef(stat.pid, stat.start_time)
        if self.server is not None and self.pane is None:
            child = next((stat for stat in _all_stats() if stat.ppid == self.server.pid), None)
            self.pane = None if child is None else ProcessRef(child.pid, child.start_time)

    def destroy(self) -> None:
        """Kill the server and every process of the pane's session; remove the socket directory.

        Idempotent. Signals only processes identified by (pid, start time) as the ones we started,
        or members of the session that our pane's program leads.
        """
        with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
            answers = True
            if (self.pane is None or self.server is None) and os.path.exists(self.socket_path):
                answers = self._discover()
            server_up = self.server is not None and self.server.alive()
            if answers and (server_up or (self.server is None and os.path.exists(self.socket_path))):
                try:
                    self.run("kill-server")
                except TmuxError:
                    pass  # already exiting: its pane died, or it was killed
            if self.server is not None:
                # Once the server is gone the pane's pty is closed: the kernel hangs up the pane.
                for signum in (None, signal.SIGKILL):
                    if signum is not None and self.server.alive():
                        self.server.signal(signum)
                    deadline = time.monotonic() + 1.0
                    while self.server.alive() and time.monotonic() < deadline:
                        time.sleep(0.005)
            if self.pane is not None:
                survivors = kill_session(self.pane)
                if survivors:
                    logger.warning("terminal processes survived SIGKILL: %s", survivors)
            if self.server is None:
                _end_late_servers(self.socket_path, LATE_SERVER_WAIT)
            shutil.rmtree(self.directory, ignore_errors=True)

"""The terminal registry: (agent session, terminal, session key) -> one live private tmux server.

Every pair lives in its own :class:`~stateful.reference.tmux.TmuxServer`. The registry adds what the
contract asks on top of that (CONTRACT §1, §2.4):

* scoping: pairs are keyed by ``(session_id, terminal, session)``; names are only dictionary keys;
* one process per pair under concurrent launches: a per-pair lock serialises launch/close/removal
  of a pair, while the registry-wide lock only guards the tables and is never held while tmux runs;
* resource ids and events: one ``session.resource.created`` per ``launched``, one
  ``session.resource.deleted`` per close or exit, both emitted under the pair's lock so a pair's
  events are always in order; ``on_event`` is called without any registry lock held, from the
  calling thread or the exit watcher's thread;
* an exit watcher (one daemon thread, polling ``/proc`` every 0.2 s, no tmux round trips) that
  removes a pair whose program exited;
* no leaks: :meth:`close` kills the server and every process of the pane's session; a reaper
  subprocess does the same for whatever is left if this process dies, even by SIGKILL; and
  :meth:`shutdown` runs at interpreter exit.

Two conveniences make scripted use deterministic enough (they are bounded, never oracles): the
first send to a fresh terminal waits (at most 2 s) until its program waits for input, and a read
after a send waits (at most 2 s) until the typed input was consumed and the screen is quiet.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from stateful.reference import faults
from stateful.reference.reaper import ReaperLink
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import TmuxError, TmuxServer

__all__ = [
    "LaunchFailed",
    "LaunchResult",
    "ResourceEvent",
    "TerminalGone",
    "TerminalInfo",
    "TerminalNotFound",
    "TerminalRegistry",
    "resource_base_id",
]

logger = logging.getLogger(__name__)

CREATED = "session.resource.created"
DELETED = "session.resource.deleted"

WATCH_INTERVAL = 0.2
"""Seconds between two exit-watcher polls."""
START_TIMEOUT = 2.0
"""Longest wait for a launched program to start (exec'd and blocked, or exited)."""
FIRST_SEND_WAIT = 2.0
"""Longest wait, on the first send to a fresh terminal, for its program to wait for input."""
READ_SETTLE = 2.0
"""Longest wait of a read after a send for the input to be consumed and the screen to be quiet."""
QUIET_IDLE = 0.05
"""Quiet period that ends a read's wait when the foreground program waits for input."""
QUIET_BUSY = 0.3
"""Quiet period that ends a read's wait while the foreground program is still busy."""

Key = tuple[str, str, str]
T = TypeVar("T")


@dataclass(frozen=True)
class ResourceEvent:
    session_id: str
    event_type: str
    """``session.resource.created`` or ``session.resource.deleted``."""
    resource_id: str
    """``terminal_<safe(name)>_<safe(key)>``, unique among the session's live terminals."""
    resource: dict[str, Any]
    """``{"terminal", "session", "tmux_socket", "command"}``."""


@dataclass(frozen=True)
class LaunchResult:
    """What :meth:`TerminalRegistry.launch` tells its caller: whether this call started the process
    (the launch tool's ``status``), where its tmux server listens, and the id its resource events carry."""

    status: str
    """``launched`` or ``already_running``."""
    tmux_socket: str
    resource_id: str


@dataclass(frozen=True)
class TerminalInfo:
    """One row of ``list``, in launch order."""

    terminal: str
    session: str
    command: str
    running: bool
    has_os_env: bool
    tmux_socket: str
    resource_id: str


class TerminalNotFound(LookupError):
    """The pair is not registered (never launched, closed, or removed after its exit)."""


class TerminalGone(RuntimeError):
    """The pair's process exited; the message is the contract's."""


class LaunchFailed(RuntimeError):
    """The program could not be started, or exited before it became available."""


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe(value: str) -> str:
    return _UNSAFE.sub("_", value).strip("_") or "resource"


def resource_base_id(terminal: str, session: str) -> str:
    """CONTRACT §2.4: ``terminal_<safe(name)>_<safe(key)>`` before disambiguation."""
    return f"terminal_{_safe(terminal)}_{_safe(session)}"


def _terminal_env() -> dict[str, str]:
    """Extra environment for a pane: a UTF-8 locale if ours has none; no shell history file."""
    env = {"HISTFILE": "/dev/null"}
    ctype = os.environ.get("LC_ALL") or os.environ.get("LC_CTYPE") or os.environ.get("LANG") or ""
    if not re.search(r"utf-?8", ctype, re.IGNORECASE):
        env["LANG"] = "C.UTF-8"
        for name in ("LC_ALL", "LC_CTYPE"):
            if os.environ.get(name):
                env[name] = "C.UTF-8"
    return env


@dataclass(eq=False)
class _Terminal:
    key: Key
    spec: TerminalSpec
    resource_id: str
    server: TmuxServer
    io_lock: threading.Lock = field(default_factory=threading.Lock)
    """Serialises sends and reads of this terminal, and its teardown after them."""
    closing: threading.Event = field(default_factory=threading.Event)
    """Set when the terminal is being removed: waits in send/read end early."""
    removed: bool = False
    fresh: bool = True
    """No send yet: the first one waits for the program to read its input."""
    dirty: bool = False
    """A send since the last read: the next read waits for the screen to settle."""
    deleted_id: str = ""
    """Planted fault "sibling-deletes-swapped" only: the id its deleted event will carry instead."""

    @property
    def label(self) -> str:
        return f"{self.key[1]}:{self.key[2]}"

    def resource(self) -> dict[str, Any]:
        if faults.enabled("unnamed-resources"):
            # Variant (no fault): §2.4 leaves the content of `resource` open; a server may name
            # the pair elsewhere or not at all, and then only the resource id tells events apart.
            return {"tmux_socket": self.server.socket_path, "command": self.spec.command_line}
        return {
            "terminal": self.key[1],
            "session": self.key[2],
            "tmux_socket": self.server.socket_path,
            "command": self.spec.command_line,
        }


class _PairLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entrant: an on_event callback may close its own pair
        self.users = 0


_LIVE: set[TerminalRegistry] = set()
_LIVE_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """A forked child owns none of its parent's terminals: its exit must not close them."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register
def _shutdown_all() -> None:
    with _LIVE_LOCK:
        registries = list(_LIVE)
    for registry in registries:
        try:
            registry.shutdown()
        except Exception:
            logger.exception("terminal registry shutdown at exit failed")


class TerminalRegistry:
    """``(session_id, terminal, session)`` -> a live terminal. Thread-safe; a context manager."""

    def __init__(self, *, on_event: Callable[[ResourceEvent], None] | None = None) -> None:
        self._on_event = on_event
        self._lock = threading.Lock()
        self._terminals: dict[Key, _Terminal] = {}  # insertion order = launch order
        self._pair_locks: dict[Key, _PairLock] = {}
        self._closed = False
        self._shutdown_done = threading.Event()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._left_running: str | None = None
        """Planted fault "delete-keeps-terminals" only: the agent session whose DELETE left its terminals."""
        self._exit_slots: set[tuple[str, str]] = set()
        """Planted fault "exit-by-shared-id" only: (agent session, resource id) of each launch, taken
        by the first exit of a pair with that id (omnigent 0.19.1's table of lifecycles)."""
        self._reaper = ReaperLink()
        self._env_bin = shutil.which("env") or "/usr/bin/env"
        with _LIVE_LOCK:
            _LIVE.add(self)

    def __enter__(self) -> TerminalRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- locking --------------------------------------------------------------------------------

    @contextmanager
    def _pair(self, key: Key, *, blocking: bool = True) -> Iterator[bool]:
        """The pair's lock (created on demand, dropped when unused); yields whether it was got."""
        with self._lock:
            slot = self._pair_locks.get(key)
            if slot is None:
                slot = self._pair_locks[key] = _PairLock()
            slot.users += 1
        acquired = slot.lock.acquire(blocking)
        try:
            yield acquired
        finally:
            if acquired:
                slot.lock.release()
            with self._lock:
                slot.users -= 1
                if slot.users == 0:
                    del self._pair_locks[key]

    def _find(self, key: Key) -> _Terminal | None:
        """The registered terminal of ``key`` (registry lock held)."""
        entry = self._terminals.get(key)
        if entry is None and faults.enabled("cross-session"):
            # Planted fault: the table is searched by (terminal, session) alone, as if pairs were
            # global, so one agent session finds (and reads, types into, closes) another's pair.
            entry = next((e for k, e in self._terminals.items() if k[1:] == key[1:]), None)
        if entry is None and faults.enabled("prefix-match"):
            # Planted fault: a name that is not registered is resolved like a tmux target, i.e. as
            # the first registered session key that starts with it ("a" finds "ab").
            entry = next(
                (e for k, e in self._terminals.items() if k[:2] == key[:2] and k[2].startswith(key[2])),
                None,
            )
        return entry

    def _lookup(self, key: Key) -> _Terminal:
        with self._lock:
            entry = self._find(key)
        if entry is None:
            raise TerminalNotFound(f"terminal '{key[1]}:{key[2]}' not found or not running")
        return entry

    # -- events ---------------------------------------------------------------------------------

    def _emit(self, entry: _Terminal, event_type: str, resource_id: str | None = None) -> None:
        if self._on_event is None:
            return
        event = ResourceEvent(entry.key[0], event_type, resource_id or entry.resource_id, entry.resource())
        try:
            self._on_event(event)
        except Exception:
            logger.exception("on_event callback failed for %s", event_type)

    # -- launch ---------------------------------------------------------------------------------

    def launch(
        self, session_id: str, spec: TerminalSpec, session: str, *, cwd: str | None = None
    ) -> LaunchResult:
        """Start the pair's program unless it runs already; concurrent calls start one process."""
        key = (session_id, spec.name, session)
        if faults.enabled("double-launch"):
            return self._launch_unlocked(key, spec, session, cwd)
        with self._pair(key):
            if self._closed:
                raise RuntimeError("the terminal registry is shut down")
            with self._lock:
                existing = self._find(key)
            if existing is not None:
                if existing.server.is_alive():
                    return LaunchResult(
                        "already_running", existing.server.socket_path, existing.resource_id
                    )
                self._retire(existing)  # exited: a new process replaces it
            server = self._shared_pane(key) if faults.enabled("shared-pane") else None
            server = server or self._start(spec, session, os.path.abspath(cwd or spec.cwd))
            with self._lock:
                if self._closed:
                    registered = False
                else:
                    resource_id = self._unique_id(session_id, spec.name, session)
                    entry = _Terminal(key, spec, resource_id, server)
                    self._terminals[key] = entry
                    self._exit_slots.add((session_id, resource_id))
                    registered = True
            if not registered:
                self._destroy(server)
                raise RuntimeError("the terminal registry is shut down")
            self._ensure_watcher()
            self._emit(entry, CREATED)
            return LaunchResult("launched", server.socket_path, resource_id)

    def _shared_pane(self, key: Key) -> TmuxServer | None:
        """Planted fault "shared-pane": a server that names its tmux sessions after the terminal
        alone finds the pane of another live pair of the same terminal in this agent session and
        attaches to it, so both pairs type into and read one pane (and closing one ends both)."""
        with self._lock:
            return next((e.server for k, e in self._terminals.items()
                         if k[:2] == key[:2] and not e.removed and e.server.is_alive()), None)

    def _launch_unlocked(
        self, key: Key, spec: TerminalSpec, session: str, cwd: str | None
    ) -> LaunchResult:
        """Planted fault "double-launch": check-then-start without the pair's lock.

        Concurrent launches of one pair all see it unregistered, all start a process and all say
        ``launched``; the last one registered replaces (and kills) the ones before it.
        """
        with self._lock:
            existing = self._find(key)
        if existing is not None and existing.server.is_alive():
            return LaunchResult("already_running", existing.server.socket_path, existing.resource_id)
        time.sleep(0.2)  # widens the race window so that concurrent launches reliably overlap
        server = self._start(spec, session, os.path.abspath(cwd or spec.cwd))
        with self._lock:
            resource_id = self._unique_id(key[0], spec.name, session)
            entry = _Terminal(key, spec, resource_id, server)
            displaced = self._terminals.get(key)
            self._terminals[key] = entry
        if displaced is not None:
            displaced.removed = True
            self._destroy(displaced.server)
        self._ensure_watcher()
        self._emit(entry, CREATED)
        return LaunchResult("launched", server.socket_path, resource_id)

    def _start(self, spec: TerminalSpec, session: str, cwd: str) -> TmuxServer:
        """A new private server running the spec's program, or LaunchFailed."""
        if "\0" in cwd or not os.path.isdir(cwd):
            raise LaunchFailed(
                f"working directory '{cwd}' of terminal {spec.name}:{session} does not exist"
            )
        try:
            server = TmuxServer()
        except (TmuxError, OSError) as exc:
            raise LaunchFailed(str(exc)) from exc
        self._reaper.own(server.describe())  # before anything runs: a crash now leaks nothing
        try:
            server.start(
                [self._env_bin, "--", spec.command, *spec.args],
                cwd=cwd,
                env=_terminal_env(),
                history_limit=spec.scrollback,
            )
            self._reaper.own(server.describe())
            if not self._wait_started(server, spec.command):
                raise LaunchFailed(
                    f"terminal {spec.name}:{session} exited before it became available"
                )
        except BaseException as exc:
            self._destroy(server)
            if isinstance(exc, TmuxError):
                raise LaunchFailed(str(exc)) from exc
            raise
        return server

    @staticmethod
    def _wait_started(server: TmuxServer, command: str) -> bool:
        """Wait until the program was exec'd and then blocked (True) or exited (False).

        A program that dies at once (``true``, a missing command) never blocks: it is reported as a
        failed launch. One that computes for longer than START_TIMEOUT is taken as started.
        """
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if not server.is_alive():
                return False
            if server.has_started(command):
                stat = server.pane.stat() if server.pane else None
                if stat is not None and stat.state in ("S", "T", "t"):
                    return True
            if time.monotonic() >= deadline:
                return server.is_alive()
            time.sleep(0.002)

    def _unique_id(self, session_id: str, terminal: str, session: str) -> str:
        """Resource id unique among the session's registered terminals (lock held)."""
        base = resource_base_id(terminal, session)
        if faults.enabled("resource-id-collision"):
            # Planted fault: the id is derived from the names alone, never disambiguated, so
            # "a b" and "a:b" (both terminal_bash_a_b) share one id while both live.
            return base
        taken = {e.resource_id for k, e in self._terminals.items() if k[0] == session_id}
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        return candidate

    # -- send / read ----------------------------------------------------------------------------

    def send(
        self, session_id: str, terminal: str, session: str, *, text: str | None, keys: str
    ) -> None:
        """Type ``text`` literally, then press the whitespace-separated tmux ``keys``."""
        def typed(entry: _Terminal) -> None:
            if entry.fresh:
                self._wait(entry, FIRST_SEND_WAIT, entry.server.waiting_for_input)
                entry.fresh = False
            entry.server.send(text, keys.split())
            entry.dirty = True

        self._on_live_pane((session_id, terminal, session), typed)

    def read(self, session_id: str, terminal: str, session: str, *, scrollback: int) -> str:
        """The pane as text: up to ``scrollback`` history lines, then the visible rows."""
        return self._on_live_pane((session_id, terminal, session),
                                  lambda entry: self._settled_capture(entry, scrollback))

    def _on_live_pane(self, key: Key, action: Callable[[_Terminal], T]) -> T:
        """``action`` on the pair's pane under its I/O lock: TerminalNotFound for a pair closed or
        never launched, TerminalGone (and the pair retired) for one whose tmux server exited. A tmux
        error on a live server is raised as it is: a tool error never claims a live terminal is dead."""
        entry = self._lookup(key)
        with entry.io_lock:
            if entry.removed:
                raise TerminalNotFound(f"terminal '{key[1]}:{key[2]}' not found or not running")
            if entry.server.is_alive():
                try:
                    return action(entry)
                except TmuxError:
                    if entry.server.is_alive():
                        raise
        self._retire_dead(entry)
        raise TerminalGone(f"Terminal {key[1]}:{key[2]} is no longer running (tmux server exited)")

    @staticmethod
    def _wait(entry: _Terminal, timeout: float, ready: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() >= deadline or not entry.server.is_alive():
                return False
            if entry.closing.wait(0.01):
                return False
        return True

    def _settled_capture(self, entry: _Terminal, scrollback: int) -> str:
        """A capture; after a send, the first capture that follows a quiet screen.

        "Quiet": typed input consumed (the pty's input queue is empty) and the screen unchanged
        for QUIET_IDLE while the foreground program waits for input, or for QUIET_BUSY while it
        is still busy. Bounded by READ_SETTLE.
        """
        server = entry.server
        screen = server.capture(scrollback)
        if not entry.dirty:
            return screen
        entry.dirty = False
        deadline = time.monotonic() + READ_SETTLE
        stable_since = time.monotonic()
        while time.monotonic() < deadline and not entry.closing.is_set():
            if entry.closing.wait(0.025):
                break
            current = server.capture(scrollback)
            now = time.monotonic()
            if current != screen or server.input_pending():
                screen, stable_since = current, now
                continue
            quiet = now - stable_since
            if quiet >= QUIET_BUSY or (quiet >= QUIET_IDLE and server.waiting_for_input()):
                break
        return screen

    # -- list / close ---------------------------------------------------------------------------

    def list(self, session_id: str, *, every_session: bool = False) -> list[TerminalInfo]:
        """The session's registered pairs in launch order (an exited one may show running=False);
        ``every_session``: every agent session's (the planted fault list-every-session)."""
        with self._lock:
            entries = [e for k, e in self._terminals.items() if k[0] == session_id or every_session]
        if faults.enabled("list-sorted"):
            # Planted fault: rows sorted by name (a "tidy" listing) instead of in launch order.
            entries.sort(key=lambda e: (e.key[1], e.key[2]))
        looked = [(e, e.server.is_alive()) for e in entries]
        with self._lock:
            # A pair closed while it was looked at is listed as closed (gone), not as registered but
            # no longer running: that state no order of the list and the close explains (a soak of
            # the machine met it once, a concurrent list and close on the direct target).
            looked = [(e, alive) for e, alive in looked if self._terminals.get(e.key) is e]
        return [
            TerminalInfo(
                terminal=e.key[1],
                session=e.key[2],
                command=e.spec.command_line,
                running=alive,
                has_os_env=True,
                tmux_socket=e.server.socket_path,
                resource_id=e.resource_id,
            )
            for e, alive in looked
        ]

    def close(self, session_id: str, terminal: str, session: str) -> bool:
        """Kill the pair's server and processes; True if it was registered (alive or dead)."""
        key = (session_id, terminal, session)
        with self._pair(key):
            with self._lock:
                entry = self._find(key)
            if entry is not None and faults.enabled("closed-still-listed"):
                # Planted fault: the terminal is torn down and announced, but its row is never
                # removed from the table: list keeps showing it (as not running).
                entry.removed = True
                entry.closing.set()
                self._destroy(entry.server)
                self._emit(entry, DELETED)
                return True
            return entry is not None and self._retire(entry, closing=True)

    def close_session(self, session_id: str) -> int:
        """Close every pair of one agent session; the number closed."""
        if faults.enabled("delete-keeps-terminals"):
            # Planted fault: this session's terminals keep running until the next DELETE, which sweeps
            # them (so that a run's leaks stay one session's: hundreds of leaked shells slowed a hunt
            # down to 473 s); shutdown closes what is left.
            with self._lock:
                earlier, self._left_running = self._left_running, session_id
                keys = [k for k in self._terminals if k[0] == earlier]
            for key in keys:
                self.close(*key)
            return 0
        with self._lock:
            keys = [k for k in self._terminals if k[0] == session_id]
        return sum(self.close(*key) for key in keys)

    def shutdown(self) -> None:
        """Close everything, stop the watcher and the reaper. Idempotent; also runs at exit."""
        with self._lock:
            first = not self._closed
            self._closed = True
            keys = list(self._terminals)
        if not first:
            self._shutdown_done.wait()
            return
        try:
            self._stop.set()
            for key in keys:
                self.close(*key)
            watcher = self._watcher
            if watcher is not None and watcher is not threading.current_thread():
                watcher.join(timeout=5)
            self._reaper.close()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._shutdown_done.set()

    # -- removal --------------------------------------------------------------------------------

    def _retire(self, entry: _Terminal, *, closing: bool = False) -> bool:
        """Unregister, destroy and announce one terminal (the pair's lock is held).

        ``closing``: called by :meth:`close` (not for an exited or replaced process).
        """
        with self._lock:
            if self._terminals.get(entry.key) is not entry:
                return False
            del self._terminals[entry.key]
            entry.removed = True
        entry.closing.set()
        with entry.io_lock:  # let an in-flight send/read finish (their waits end on `closing`)
            pass
        # Planted fault "close-leaks-server": close forgets the pair but never kills its tmux
        # server (the reaper still ends it when the registry shuts down).
        if not (closing and faults.enabled("close-leaks-server")):
            self._destroy(entry.server)
        if closing and faults.enabled("close-event-lost"):
            # Planted fault: close records no session.resource.deleted event.
            return True
        resource_id = entry.deleted_id or entry.resource_id
        if faults.enabled("sibling-deletes-swapped"):
            # Planted fault: the deleted event takes the id of a live id sibling (a pair whose id
            # collides with this one's before disambiguation), and that sibling's later takes this
            # one's: two ids kept in one table by base id, swapped when the first is removed.
            sibling = self._live_sibling(entry)
            if sibling is not None:
                resource_id, sibling.deleted_id = sibling.deleted_id or sibling.resource_id, resource_id
        self._emit(entry, DELETED, resource_id)
        return True

    def _live_sibling(self, entry: _Terminal) -> _Terminal | None:
        """Planted fault "sibling-deletes-swapped" only: a registered pair of the entry's session
        whose resource id has the same base (the entry is no longer registered)."""
        session_id, terminal, session = entry.key
        base = resource_base_id(terminal, session)
        with self._lock:
            for key, other in self._terminals.items():
                if key[0] == session_id and resource_base_id(key[1], key[2]) == base:
                    return other
        return None

    def _take_exit_slot(self, entry: _Terminal) -> bool:
        """Planted fault "exit-by-shared-id": an exit is handled through a table keyed by resource
        id, one slot per launch. Two live pairs that share an id (resource-id-collision) share one
        slot: the first to exit takes it, and the other, when it exits, finds none and is never
        removed (listed, running false, with no deleted event) until it is closed."""
        with self._lock:
            slot = (entry.key[0], entry.resource_id)
            if slot not in self._exit_slots:
                return False
            self._exit_slots.discard(slot)
            return True

    def _retire_dead(self, entry: _Terminal) -> None:
        with self._pair(entry.key):
            self._retire(entry)

    def _destroy(self, server: TmuxServer) -> None:
        try:
            server.destroy()
        finally:
            self._reaper.drop(server.directory)

    # -- exit watcher ---------------------------------------------------------------------------

    def _ensure_watcher(self) -> None:
        with self._lock:
            if self._watcher is not None or self._closed:
                return
            self._watcher = threading.Thread(
                target=self._watch, name="terminal-exit-watcher", daemon=True
            )
            self._watcher.start()

    def _watch(self) -> None:
        """Remove pairs whose program exited; never blocks behind a launch or close of a pair."""
        while not self._stop.wait(WATCH_INTERVAL):
            with self._lock:
                entries = list(self._terminals.values())
            if faults.enabled("exit-not-reaped"):
                # Planted fault: the watcher runs but never removes an exited pair (list keeps it,
                # running false, until a send or read happens to notice).
                continue
            for entry in entries:
                if self._stop.is_set():
                    return
                if faults.enabled("closed-still-listed") and entry.removed:
                    continue  # the fault's stale row (closed, never unregistered) is left alone
                try:
                    if entry.server.is_alive():
                        continue
                    if faults.enabled("exit-by-shared-id") and not self._take_exit_slot(entry):
                        continue  # Planted fault: an id sibling's exit took the slot
                    with self._pair(entry.key, blocking=False) as acquired:
                        if acquired:
                            self._retire(entry)
                except Exception:
                    logger.exception("exit watcher failed on terminal %s", entry.label)

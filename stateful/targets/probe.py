"""Ground truth about a terminal, from tmux and /proc themselves (not from the server under test).

When a launch returns a ``tmux_socket`` path that exists on this machine, the probe can check what
the contract promises about it: while the pair is listed as running, that private server runs and
holds a pane; after ``close`` returns, that server and every process of the terminal are gone.

To prove "gone", the probe records the processes while the terminal lives (the tmux server, the pane
processes, their descendants and every member of their sessions), each as (pid, start time) so that a
recycled pid is never taken for ours. The probe only *reads*: ``list-panes`` and ``capture-pane``
never start a server, and nothing is ever signalled. Each tmux command is bounded in time
(:func:`stateful.reference.tmux.run_tmux`): a server that hangs gives a
:class:`~stateful.reference.tmux.TmuxTimeout` naming it, never a probe that waits for ever, and never a
"not alive" it did not see.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from stateful import meter
from stateful.reference.tmux import TmuxAnswer, TmuxError, run_tmux

__all__ = ["ProcRef", "ServerView", "Probe"]


@dataclass(frozen=True)
class ProcRef:
    pid: int
    start: int
    """Start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    name: str = ""

    def __repr__(self) -> str:
        return f"{self.name or '?'}[{self.pid}]"


@dataclass(frozen=True)
class ServerView:
    alive: bool
    server: ProcRef | None = None
    panes: tuple[ProcRef, ...] = ()
    members: tuple[ProcRef, ...] = ()
    """Every process of the terminal: the server, the panes, their descendants and session members."""


def _stat(pid: int) -> tuple[str, str, int, int, int] | None:
    """(name, state, ppid, session id, start time) of a process, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    lpar, rpar = raw.find("("), raw.rfind(")")
    name = raw[lpar + 1 : rpar]
    fields = raw[rpar + 2 :].split()
    try:
        return name, fields[0], int(fields[1]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _ref(pid: int) -> ProcRef | None:
    st = _stat(pid)
    return None if st is None else ProcRef(pid, st[4], st[0])


class Probe:
    """Read-only observations of private tmux servers named by sockets a target returned."""

    def applicable(self, socket: str) -> bool:
        """Whether the socket is a path on this machine (a remote server's is not)."""
        return bool(socket) and os.path.isabs(socket) and os.path.exists(os.path.dirname(socket) or "/")

    def _tmux(self, socket: str, *args: str) -> TmuxAnswer:
        """One read-only tmux command on the server at ``socket`` (TmuxTimeout if it hangs)."""
        return run_tmux(shutil.which("tmux") or "tmux", socket, *args)

    def view(self, socket: str) -> ServerView:
        """The server behind ``socket``: alive with panes (and all its processes), or not alive."""
        with meter.timed("terminal probe"):
            return self._view(socket)

    def _view(self, socket: str) -> ServerView:
        if not os.path.exists(socket):
            return ServerView(alive=False)
        result = self._tmux(socket, "list-panes", "-a", "-F", "#{pid} #{pane_pid}")
        if result.returncode != 0 or not result.stdout:
            return ServerView(alive=False)
        server_pid = None
        pane_pids: list[int] = []
        for line in result.stdout:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                server_pid = int(parts[0])
                pane_pids.append(int(parts[1]))
        server = _ref(server_pid) if server_pid else None
        panes = tuple(r for r in (_ref(p) for p in pane_pids) if r is not None)
        return ServerView(alive=True, server=server, panes=panes, members=self._members(server, panes))

    def _members(self, server: ProcRef | None, panes: tuple[ProcRef, ...]) -> tuple[ProcRef, ...]:
        table: dict[int, tuple[str, str, int, int, int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(int(entry))
                if st is not None:
                    table[int(entry)] = st
        roots = {p.pid for p in panes}
        sessions = {table[p][3] for p in roots if p in table}
        found = set(roots) | ({server.pid} if server else set())
        changed = True
        while changed:
            changed = False
            for pid, (_, _, ppid, sid, _) in table.items():
                if pid not in found and (ppid in found - ({server.pid} if server else set()) or sid in sessions):
                    found.add(pid)
                    changed = True
        return tuple(ProcRef(pid, table[pid][4], table[pid][0]) for pid in sorted(found) if pid in table)

    def leftovers(self, refs: tuple[ProcRef, ...] | list[ProcRef]) -> list[ProcRef]:
        """The recorded processes that still run (a zombie has finished: it is not counted)."""
        with meter.timed("terminal probe"):
            return self._leftovers(refs)

    def _leftovers(self, refs: tuple[ProcRef, ...] | list[ProcRef]) -> list[ProcRef]:
        left = []
        for ref in refs:
            st = _stat(ref.pid)
            if st is not None and st[4] == ref.start and st[1] not in ("Z", "X"):
                left.append(ref)
        return left

    def history_size(self, socket: str) -> int | None:
        """How many lines of history the terminal's pane holds (tmux's ``#{history_size}``), or None
        if the server does not answer with exactly one pane."""
        if not os.path.exists(socket):
            return None
        with meter.timed("terminal probe"):
            result = self._tmux(socket, "list-panes", "-a", "-F", "#{history_size}")
        if result.returncode != 0 or len(result.stdout) != 1 or not result.stdout[0].strip().isdigit():
            return None
        return int(result.stdout[0])

    def server_alive(self, socket: str) -> bool:
        return self.view(socket).alive

    def capture(self, socket: str, lines: int = 40) -> str:
        """The pane's last rows, for hang reports ('' if the server is gone)."""
        if not os.path.exists(socket):
            return "<no server: socket path is gone>"
        try:
            result = self._tmux(socket, "capture-pane", "-p", "-S", f"-{lines}")
        except TmuxError as exc:  # a report of a hang must not hang, nor hide what it reports
            return f"<capture failed: {exc}>"
        if result.returncode != 0:
            return "<capture failed: " + " ".join(result.stderr) + ">"
        return "\n".join(result.stdout)

"""The reaper: kills a registry's terminals once the registry's process is gone, even if SIGKILLed.

``python -m stateful.reference.reaper`` reads JSON lines on stdin from its owner (a
:class:`~stateful.reference.registry.TerminalRegistry`):

* ``{"op": "own", "directory": D, ...}``: a private tmux server the owner runs (see
  :meth:`TmuxServer.describe`); sent again with more detail replaces the record;
* ``{"op": "drop", "directory": D}``: the owner destroyed it itself.

When stdin reaches EOF (the owner closed the pipe, exited, or was killed: the kernel closes its end
either way) the reaper destroys every server it still owns, then exits. It lives in its own session
so that a Ctrl-C or a signal to the owner's process group does not take it down first.

:class:`ReaperLink` is the owner's side: it starts the reaper lazily and replays its records into a
new reaper if the old one died.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ReaperLink:
    """The owner's end of the pipe to one reaper process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._records: dict[str, dict[str, Any]] = {}
        self._closed = False

    def own(self, record: dict[str, Any]) -> None:
        """Tell the reaper about a server (call again to update its record)."""
        with self._lock:
            if self._closed:
                return
            self._records[record["directory"]] = record
            self._write({"op": "own", **record})

    def drop(self, directory: str) -> None:
        """The owner destroyed this server itself: the reaper forgets it."""
        with self._lock:
            if self._records.pop(directory, None) is None or self._closed:
                return
            self._write({"op": "drop", "directory": directory})

    def close(self, timeout: float = 10.0) -> None:
        """Close the pipe: the reaper destroys what it still owns (normally nothing) and exits."""
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("reaper %d did not exit within %.0f s", proc.pid, timeout)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        return subprocess.Popen(
            [sys.executable, "-m", "stateful.reference.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # holding the owner's stderr open would block its readers
            start_new_session=True,
            close_fds=True,
            env=env,
        )

    def _write(self, message: dict[str, Any]) -> None:
        """Send one line (lock held). A dead reaper is replaced, and the new one is given every
        record (which already reflects ``message``)."""
        for _attempt in range(2):
            if self._proc is None or self._proc.poll() is not None:
                try:
                    self._proc = self._start()
                except OSError as exc:
                    logger.warning("could not start the terminal reaper: %s", exc)
                    self._proc = None
                    return
                payload = b"".join(
                    (json.dumps({"op": "own", **r}) + "\n").encode() for r in self._records.values()
                )
            else:
                payload = (json.dumps(message) + "\n").encode()
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(payload)
                self._proc.stdin.flush()
                return
            except OSError:
                self._proc.kill()
                self._proc.wait()
                self._proc = None


def _serve(stream: IO[bytes]) -> dict[str, dict[str, Any]]:
    owned: dict[str, dict[str, Any]] = {}
    for raw in stream:
        try:
            message = json.loads(raw)
            op, directory = message.pop("op"), message["directory"]
        except (ValueError, KeyError, TypeError):
            continue
        if op == "own":
            owned[directory] = message
        elif op == "drop":
            owned.pop(directory, None)
    return owned


def main() -> None:
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    owned = _serve(sys.stdin.buffer)
    if not owned:
        return
    from stateful.reference.tmux import TmuxServer  # imported only when there is work to do

    for record in owned.values():
        try:
            TmuxServer.restore(record).destroy()
        except Exception:  # keep going: every other terminal must still be destroyed
            logger.exception("reaper could not destroy %s", record.get("directory"))


if __name__ == "__main__":
    main()

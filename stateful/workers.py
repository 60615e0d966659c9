"""Worker subprocesses that die with the run that started them (the fault hunts, a campaign).

A run starts each worker in a session of its own, so that the worker's whole process group can be
ended at once and a Ctrl-C meant for the run does not hit a worker half-way through. The price: no
signal aimed at the run ever reaches a worker, so the run must end its workers itself, on every path:

* **interrupted** (SIGINT, or SIGTERM from ``timeout`` or a CI runner): :func:`interrupt_on_signals`
  turns the first of them into a ``KeyboardInterrupt`` in the main thread, the path on which pytest
  runs every fixture finalizer (and a campaign its ``finally``), and that cleanup calls
  :meth:`Worker.end`. Python's own default for SIGTERM is to die at once, with no cleanup at all;
* **killed** (SIGKILL, a crash): the worker holds the read end of a pipe, the *lifeline*, whose only
  write end is the run's; the kernel closes it however the run dies, and :func:`follow_parent` (called
  by the worker at start-up) then ends the worker's own process group the way :meth:`Worker.end` would.

Terminals need nothing more: a worker's terminals belong to its ``TerminalRegistry``, whose reaper (a
process in a session of its own) destroys them once the worker is gone, even if it was SIGKILLed. A
worker therefore needs no SIGTERM handler: dying at once is the quickest way to hand them over.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

LIFELINE_ENV = "STATEFUL_LIFELINE_FD"
"""Names, in a worker's environment, the descriptor of its lifeline's read end."""
GRACE = 5.0
"""Seconds a worker's process group has to exit after SIGTERM before it is sent SIGKILL."""
INTERRUPTING = (signal.SIGINT, signal.SIGTERM)

_interrupted = threading.Event()
_signals: list[int] = []
"""The signal that interrupted this process (see :func:`interrupted_by`)."""


# -- in the run ------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """The first SIGINT/SIGTERM raises KeyboardInterrupt; later ones are ignored, so that they cannot
    cut the cleanup short (coreutils ``timeout`` signals both its child and the child's process
    group, a user may press Ctrl-C twice). A run that will not stop is for SIGKILL, and its workers
    follow it even then."""
    if _interrupted.is_set():
        return
    _signals[:] = [signum]
    _interrupted.set()
    raise KeyboardInterrupt(f"interrupted by {signal.Signals(signum).name}")


def interrupt_on_signals() -> dict[int, Any]:
    """Install :func:`_interrupt` for SIGINT and SIGTERM; returns the previous handlers (for
    :func:`restore_signals`).

    Only Python's defaults are replaced: a signal the process was started with ignored (a background
    job of a non-interactive shell ignores SIGINT) or handled by someone else stays as it is. Does
    nothing outside the main thread, where handlers cannot be set.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    _interrupted.clear()
    _signals.clear()
    defaults = (signal.SIG_DFL, signal.default_int_handler)
    return {signum: signal.signal(signum, _interrupt)
            for signum in INTERRUPTING if signal.getsignal(signum) in defaults}


def interrupted() -> bool:
    """Whether :func:`_interrupt` has interrupted this process (the run is ending early)."""
    return _interrupted.is_set()


def interrupted_status(default: int = signal.SIGINT) -> int:
    """The exit status of a run that an interrupt ended: 128 + the signal's number, as a shell reports
    a process the signal killed (130 for SIGINT, 143 for SIGTERM); ``default`` when no handler of
    this module saw it (a KeyboardInterrupt raised by Python's own SIGINT handler)."""
    return 128 + (_signals[0] if _signals else int(default))


def restore_signals(previous: Mapping[int, Any]) -> None:
    """Put back the handlers that :func:`interrupt_on_signals` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)


class Worker:
    """A started worker: its process and the run's end of its lifeline. Thread-safe."""

    def __init__(self, proc: subprocess.Popen[bytes], lifeline: int) -> None:
        self.proc = proc
        self._lifeline: int | None = lifeline
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        """The worker's pid, which is also its process group's id."""
        return self.proc.pid

    def wait(self, timeout: float | None = None) -> int:
        """The worker's exit status once it exited (``subprocess.TimeoutExpired`` after ``timeout``)."""
        code = self.proc.wait(timeout)
        self._cut()
        return code

    def end(self, grace: float = GRACE) -> int | None:
        """End the worker's process group (see :func:`end_all`); its exit status, None if unknown."""
        end_all([self], grace)
        return self.proc.returncode

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the worker's process group while the worker runs (its pid, hence the
        group's id, cannot have been reused then). False if it has exited."""
        if self.proc.poll() is not None:
            return False
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def _cut(self) -> None:
        """Close the run's end of the lifeline (once: a descriptor number is reused at once)."""
        with self._lock:
            fd, self._lifeline = self._lifeline, None
        if fd is not None:
            os.close(fd)


def start_worker(argv: Sequence[str], *, env: Mapping[str, str] | None = None, **popen: Any) -> Worker:
    """Start ``argv`` as a worker: in a new session, holding a lifeline (``popen`` goes to Popen).

    The worker must call :func:`follow_parent` to notice the run's death; the run's end of the
    lifeline is close-on-exec and never passed to another child, so only the run's death closes it.
    """
    read_end, write_end = os.pipe()
    child_env = dict(os.environ if env is None else env)
    child_env[LIFELINE_ENV] = str(read_end)
    try:
        proc = subprocess.Popen(list(argv), env=child_env, pass_fds=(read_end,),
                                start_new_session=True, **popen)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return Worker(proc, write_end)


def end_all(workers: Iterable[Worker], grace: float = GRACE) -> None:
    """SIGTERM every running worker's process group at once, SIGKILL the groups still running after
    ``grace`` seconds, and reap them. Their terminals are then destroyed by their reapers."""
    ending = [w for w in workers if w.signal_group(signal.SIGTERM)]
    deadline = time.monotonic() + grace
    for worker in ending:
        try:
            worker.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.signal_group(signal.SIGKILL)
    for worker in ending:
        try:
            worker.wait(grace)
        except subprocess.TimeoutExpired:
            logger.warning("worker %d survived SIGKILL for %.0f s", worker.pid, grace)


# -- in the worker ---------------------------------------------------------------------------------


def follow_parent(grace: float = GRACE) -> None:
    """In a worker started by :func:`start_worker`: end this process group once the run is gone.

    A daemon thread reads the lifeline until EOF (the run never writes to it), then sends the group
    SIGTERM, and SIGKILL if it still runs ``grace`` seconds later. Does nothing in a process not
    started as a worker; the variable is removed so that this worker's own children do not inherit it.
    """
    value = os.environ.pop(LIFELINE_ENV, None)
    if value is None:
        return
    fd = int(value)
    os.set_inheritable(fd, False)
    threading.Thread(target=_await_parent_death, args=(fd, grace), name="lifeline", daemon=True).start()


def _await_parent_death(fd: int, grace: float) -> None:
    with os.fdopen(fd, "rb", buffering=0) as lifeline:
        while lifeline.read(512):
            pass
    # Only a group this process leads is ended: never the run's own group.
    own_group = os.getpgid(0) == os.getpid()
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if own_group:
            os.killpg(0, signum)
        else:
            os.kill(os.getpid(), signum)
        time.sleep(grace)  # reached only if this process handles SIGTERM and is still ending


def processes() -> Iterator[tuple[int, bytes, bytes]]:
    """(pid, command line, environment) of every process this user may read, except this one: what
    tells whether anything of a run (named in its argv or environment) is still alive."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        yield int(name), cmdline, environ

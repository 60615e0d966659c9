"""The embedded reference stack: the sessions API and the mock LLM served by uvicorn in threads.

One object owns everything that runs (two servers, the terminal registry, the turn threads) so that
``serve``, the e2e fixtures and the state machine start and stop it the same way, and stopping it always
leaves no tmux process behind.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from stateful.reference.mock_llm import MockState, create_mock_llm_app

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts local connections (the sessions API needs no token there)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BackgroundServer:
    """One ASGI app served by uvicorn in a daemon thread, on a socket bound before the thread starts.

    Binding first makes port 0 safe (the real port is known at once, no race for a "free" port) and
    turns "address in use" into an immediate error in the caller's thread.
    """

    def __init__(self, app: Any, *, host: str = LOOPBACK, port: int = 0, name: str = "server") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError:
            self._socket.close()
            raise
        self._socket.listen(128)
        self._socket.set_inheritable(True)
        bound = self._socket.getsockname()
        self.host, self.port = host, bound[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        config = uvicorn.Config(
            app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"uvicorn-{name}", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"{self._thread.name} failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self._thread.name} did not start within {timeout} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        try:
            self._socket.close()
        except OSError:
            pass


class MockLLMServer:
    """The mock LLM alone on loopback (used by tests of the mock and by :class:`EmbeddedStack`)."""

    def __init__(self, *, port: int = 0) -> None:
        self.state = MockState()
        self._server = BackgroundServer(create_mock_llm_app(self.state), port=port, name="mock-llm")
        self.url = self._server.url

    def __enter__(self) -> MockLLMServer:
        self._server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        # Held replies would keep uvicorn's graceful shutdown waiting; let them go first.
        self.state.release_all()
        self._server.stop()


def new_runner_id() -> str:
    return f"runner_{secrets.token_hex(8)}"

"""The embedded reference stack: the sessions API and the mock LLM served by uvicorn in threads.

One object owns everything that runs (two servers, the terminal registry, the turn threads) so that
``serve``, the e2e fixtures and the state machine start and stop it the same way, and stopping it always
leaves no tmux process behind.
"""

from __future__ import annotations

import atexit
import ipaddress
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn

from stateful.reference.agent import LoopSettings
from stateful.reference.guards import LoopbackHostOnly
from stateful.reference.mock_llm import MockState, create_mock_llm_app
from stateful.reference.server import create_sessions_app
from stateful.reference.sessions import SessionService, ToolBinder

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
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the proto
        # says TCP; without it every response pays ~40 ms of Nagle + delayed ACK (headers and body are
        # two writes).
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
        # Always on loopback: only loopback names reach it (stateful.reference.guards).
        self._server = BackgroundServer(LoopbackHostOnly(create_mock_llm_app(self.state)), port=port, name="mock-llm")
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


# -- the whole stack ------------------------------------------------------------------------------


@dataclass
class ToolBackend:
    """The terminal side of the stack: a registry and the tools bound to one session at a time.

    The default is the real ``TerminalRegistry`` and ``tools.py``; tests of the HTTP plumbing may
    pass a fake one.
    """

    registry: Any
    bind: ToolBinder
    schemas: Sequence[Mapping[str, Any]]


def real_tool_backend(on_event: Callable[[Any], None]) -> ToolBackend:
    """``TerminalRegistry`` + ``tools.call_tool``: each session sees only its declared terminals."""
    from stateful.reference.registry import TerminalRegistry
    from stateful.reference.tools import TOOL_SCHEMAS, ToolContext, call_tool

    registry = TerminalRegistry(on_event=on_event)

    def bind(session_id: str, terminals: Mapping[str, Any]) -> Callable[[str, str], str]:
        context = ToolContext(registry=registry, session_id=session_id, terminals=terminals)
        return lambda name, arguments: call_tool(name, arguments, context)

    return ToolBackend(registry=registry, bind=bind, schemas=TOOL_SCHEMAS)


class EmbeddedStack:
    """The sessions API and the mock LLM on uvicorn, the registry and the turns, as one object.

    ``with EmbeddedStack() as stack:`` binds both servers to 127.0.0.1 on free ports; leaving the
    block interrupts every turn, stops both servers and closes every terminal (also at interpreter
    exit if the owner forgot). ``host``/``token`` serve the sessions API elsewhere (``serve``).
    """

    def __init__(
        self,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        mock_port: int = 0,
        token: str | None = None,
        settings: LoopSettings | None = None,
        backend: Callable[[Callable[[Any], None]], ToolBackend] = real_tool_backend,
        latency: float = 0.0,
    ) -> None:
        """``latency``: seconds added to every response of the sessions API (the mock LLM, which a
        test suite runs next to itself, stays fast)."""
        if latency < 0:
            raise ValueError(f"latency {latency!r} is negative")
        if not is_loopback(host) and not token:
            raise ValueError(f"binding the sessions API to {host!r} (not loopback) requires a token")
        self.runner_id = new_runner_id()
        self._host, self._port, self._mock_port, self._token = host, port, mock_port, token
        self._settings = settings
        self._latency = latency
        self._backend_factory = backend
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self.mock: MockLLMServer | None = None
        self.service: SessionService | None = None
        self._server: BackgroundServer | None = None
        self.registry: Any = None
        self.server_url = ""
        self.mock_llm_url = ""

    def _on_event(self, event: Any) -> None:
        service = self.service
        if service is not None:
            service.record_resource_event(
                event.session_id, event.event_type, event.resource_id, event.resource
            )

    def start(self) -> EmbeddedStack:
        with self._lock:
            if self._started:
                return self
            self._started = True
        try:
            backend = self._backend_factory(self._on_event)
            self.registry = backend.registry
            self.mock = MockLLMServer(port=self._mock_port)
            self.mock.__enter__()
            self.mock_llm_url = self.mock.url
            self.service = SessionService(
                registry=backend.registry,
                bind_tools=backend.bind,
                tool_schemas=backend.schemas,
                runner_id=self.runner_id,
                settings=self._settings,
            )
            app = create_sessions_app(self.service, token=self._token, latency=self._latency,
                                      loopback=is_loopback(self._host))
            self._server = BackgroundServer(app, host=self._host, port=self._port, name="sessions")
            self._server.start()
            self.server_url = self._server.url
        except BaseException:
            self.close()
            raise
        atexit.register(self.close)
        return self

    def close(self) -> None:
        """Interrupt turns, stop both servers, close every terminal. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self.mock is not None:
            self.mock.state.release_all()  # model calls held at a gate return, their turns end
        if self.service is not None:
            self.service.close()
        if self._server is not None:
            self._server.stop()
        if self.mock is not None:
            self.mock.close()
        if self.registry is not None:
            self.registry.shutdown()

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

"""What the reference stack's two HTTP apps (the sessions API, the mock LLM) refuse before routing.

Both listen on loopback by default, and a registered agent runs any command its model asks for: a
web page the user happens to open must not be able to drive them. Two browser paths lead there:

* **DNS rebinding**: a page of ``evil.example`` whose name is made to resolve to 127.0.0.1 talks to
  the loopback server as its own origin (the browser's same-origin rule sees ``evil.example``, and the
  page may read the answers). Its requests carry ``Host: evil.example:<port>``; a loopback server
  therefore accepts only the names that mean this machine (:class:`LoopbackHostOnly`).
* **Cross-site "simple" requests**: any page may POST to ``http://127.0.0.1:<port>`` without asking,
  but only with a form's content types (``text/plain``, urlencoded, multipart). JSON routes
  therefore require ``Content-Type: application/json`` (:func:`is_json`), which a page cannot send
  without the browser asking the server first (a CORS preflight, which these servers never grant).

A server bound elsewhere is reached by whatever name its users give it; it requires a bearer token
instead (:mod:`stateful.reference.server`).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_NAMES", "LoopbackHostOnly", "is_json"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The ``Host`` names a loopback server answers to (with its port)."""


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header says JSON (``application/json``, parameters allowed)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


class LoopbackHostOnly:
    """Answers 403 to every HTTP request whose ``Host`` is not a loopback name with the server's port
    (``127.0.0.1:P``, ``localhost:P``, ``[::1]:P``, or the loopback address it is bound to, e.g.
    ``127.0.0.2:P``; the bare name too when P is 80)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").strip().lower()
            server = scope.get("server") or (None, None)
            bound, port = server[0], server[1]
            names = {*LOOPBACK_NAMES, *([f"[{bound}]" if ":" in bound else bound] if bound else [])}
            allowed = {f"{name}:{port}" for name in names} | (names if port == 80 else set())
            if host not in allowed:
                shown = ", ".join(sorted(allowed))
                message = (f"Host {host!r} is not this loopback server's name ({shown}): refused, so that no web "
                           "page can reach it through a name of its own (DNS rebinding)")
                await JSONResponse({"error": message}, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

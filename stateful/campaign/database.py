"""``--db``: the Hypothesis example database every worker of a campaign shares.

A directory (default: the project's ``.hypothesis/examples``, where ``pytest stateful/`` keeps its
failures too; installed, ``.hypothesis/examples`` in the current directory) serves the workers of one machine; a Redis URL is Hypothesis's ``RedisExampleDatabase``
(``hypothesis[redis]``), shared across machines, e.g. by a nightly CI job that writes and developers
who read it (docs/campaigns.md). The Redis client reads every URL form it knows: ``redis://`` (TCP),
``rediss://`` (TLS) and ``unix://`` (a socket path). Any other ``scheme://`` is a usage error, never
a directory named like the URL.

A Redis URL may carry a password (``redis://:secret@host``, ``unix:///s.sock?password=secret``): every
message that shows the URL shows it through :func:`redacted`.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from stateful.locations import work_root

__all__ = ["DEFAULT_DB", "REDIS_SCHEMES", "ProgramsOnly", "check_db", "open_db", "redacted", "redis_client"]

DEFAULT_DB = str(work_root() / ".hypothesis" / "examples")

REDIS_SCHEMES = ("redis", "rediss", "unix")
"""The URL schemes the Redis client connects by (TCP, TLS, a Unix socket)."""

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
HIDDEN = "***"


def _scheme(spec: str) -> str | None:
    """The URL scheme of ``spec`` (lower case), or None for a directory path."""
    match = _URL.match(spec)
    return match.group(1).lower() if match else None


def _secrets(spec: str) -> list[str]:
    """The passwords a Redis URL carries (in its authority or as a ``password`` query parameter)."""
    parts = urlsplit(spec)
    found = [parts.password] if parts.password else []
    return found + [value for key, value in parse_qsl(parts.query) if key == "password" and value]


def redacted(spec: str) -> str:
    """``spec`` fit to print: a URL's passwords replaced by ``***`` (a path is returned as it is)."""
    if _scheme(spec) is None:
        return spec
    parts = urlsplit(spec)
    netloc = parts.netloc
    if parts.password:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{HIDDEN}@{host}"
    query = urlencode([(k, HIDDEN if k == "password" else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
                      safe="*")
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "") + (
        f"#{parts.fragment}" if parts.fragment else "")


def _hidden(text: str, spec: str) -> str:
    """``text`` (e.g. a client's error) with the URL's passwords replaced by ``***`` (as written in
    the URL, and percent-decoded as the client uses them)."""
    for secret in _secrets(spec):
        for form in {secret, unquote(secret)}:
            text = text.replace(form, HIDDEN)
    return text


def check_db(spec: str, option: str = "--db") -> str | None:
    """None if ``spec`` names a usable database, else one line saying why not (a usage error naming
    ``option``: ``--db``, or ``--join`` for the Redis that coordinates a campaign)."""
    scheme = _scheme(spec)
    if scheme is None:
        return None
    shown = redacted(spec)
    if scheme not in REDIS_SCHEMES:
        return (f"{option} {shown}: unknown URL scheme {scheme!r}: give a directory or a Redis URL "
                "(redis://host:port/n, rediss://host:port/n, unix:///path/to/redis.sock?db=n)")
    parts = urlsplit(spec)
    if scheme == "unix" and not parts.path:
        return f"{option} {shown}: a Redis socket is unix:///path/to/redis.sock?db=n"
    if scheme != "unix" and not parts.hostname:
        return f"{option} {shown}: a Redis database is {scheme}://host:port/n"
    try:
        import redis  # noqa: F401
    except ImportError:
        return f"{option} {scheme}://...: the redis client is not installed (pip install 'hypothesis[redis]')"
    try:
        redis_client(spec).ping()
    except Exception as exc:  # the client raises its own ConnectionError, TimeoutError, ResponseError...
        return _hidden(f"{option} {shown}: Redis does not answer: {exc}", spec)
    return None


def redis_client(spec: str) -> Any:
    """A client of the Redis ``spec`` names (checked by :func:`check_db` first)."""
    import redis

    return redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)


class ProgramsOnly(ExampleDatabase):
    """``database`` without the empty choice sequence.

    Hypothesis saves the choices of a test case that raised anything, so the gate's ``BudgetSpent``
    and ``Resteer`` (raised before a program drew anything: they end the search) were saved as empty
    programs, the shortest entry of all. The next campaign replays its saved entries shortest first:
    the empty one became a random program, and the saved failure came second (a proof saw the failure
    "in program 2" where it was saved to be program 1). No program of the machine draws nothing (its
    first rule draws), so nothing is lost."""

    def __init__(self, database: ExampleDatabase) -> None:
        super().__init__()
        self.database = database

    def save(self, key: bytes, value: bytes) -> None:
        if value:
            self.database.save(key, value)

    def fetch(self, key: bytes) -> Any:
        return (value for value in self.database.fetch(key) if value)

    def delete(self, key: bytes, value: bytes) -> None:
        self.database.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if value:
            self.database.move(src, dest, value)
        else:
            self.database.delete(src, value)

    def __repr__(self) -> str:
        return f"ProgramsOnly({self.database!r})"


def open_db(spec: str) -> ExampleDatabase:
    """The database ``spec`` names: a Redis URL (:data:`REDIS_SCHEMES`) or a directory (either
    without the empty program: :class:`ProgramsOnly`)."""
    if _scheme(spec) in REDIS_SCHEMES:
        from hypothesis.extra.redis import RedisExampleDatabase

        return ProgramsOnly(RedisExampleDatabase(redis_client(spec)))  # type: ignore[arg-type]
    return ProgramsOnly(DirectoryBasedExampleDatabase(spec))

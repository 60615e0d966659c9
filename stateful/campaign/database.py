"""``--db``: the Hypothesis example database every worker of a campaign shares.

A directory (default: the project's ``.hypothesis/examples``, where ``pytest stateful/`` keeps its
failures too) serves the workers of one machine; ``redis://host:port/n`` is Hypothesis's
``RedisExampleDatabase`` (``hypothesis[redis]``), shared across machines, e.g. by a nightly CI job
that writes and developers who read it (docs/campaigns.md).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

__all__ = ["DEFAULT_DB", "check_db", "open_db"]

DEFAULT_DB = str(Path(__file__).resolve().parents[2] / ".hypothesis" / "examples")


def check_db(spec: str) -> str | None:
    """None if ``spec`` names a usable database, else one line saying why not (a usage error)."""
    if not spec.startswith("redis://"):
        return None
    parsed = urlparse(spec)
    if not parsed.hostname:
        return f"--db {spec!r}: a Redis database is redis://host:port/n"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "--db redis://...: the redis client is not installed (pip install 'hypothesis[redis]')"
    try:
        _redis(spec).ping()
    except Exception as exc:  # the client raises its own ConnectionError, TimeoutError, ResponseError...
        return f"--db {spec}: Redis does not answer: {exc}"
    return None


def _redis(spec: str) -> object:
    import redis

    return redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)


def open_db(spec: str) -> ExampleDatabase:
    """The database ``spec`` names: ``redis://host:port/n`` or a directory."""
    if spec.startswith("redis://"):
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(_redis(spec))  # type: ignore[arg-type]
    return DirectoryBasedExampleDatabase(spec)

"""The failures claimed so far in one campaign, and the triggers of known ones (steering), shared by
its workers: through a directory on one machine, or through Redis across machines (``--join``).

A worker that meets a violation of a clause nobody claimed yet claims it atomically: the one that
succeeds owns the failure (shrinks it and writes its repro); every other worker, now or later,
ignores that clause.

* **A directory** (:class:`DirectorySeen`, the default): ``<dir>/<key>.json`` created with
  ``O_CREAT | O_EXCL``. A directory of small files needs no lock and no server, and survives a worker
  that is killed half-way (its claim still names the failure).
* **Redis** (:class:`RedisSeen`, ``campaign --join URL --campaign NAME``): one hash of claims under
  the campaign's name, each claimed with ``HSETNX`` (exactly one process wins, :data:`CLAIM`) and naming its owner,
  the campaign process whose workers shrink it; a set of triggers; and a log of every successful
  claim, so that a report can show that no finding was claimed twice. A claim is given back only by
  its owner, or taken over from an owner that stopped heartbeating (``stateful.campaign.joined``).

Every function takes ``where``: a directory (a :class:`~pathlib.Path`) or a :class:`RedisSeen`,
chosen once per campaign (:func:`open_seen`), so that the gate and the worker do not care which.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Union

__all__ = ["RedisSeen", "Where", "abandon", "avoid", "avoided", "claim", "claimed", "claims", "info", "open_seen",
           "release"]

SUFFIX = ".json"
AVOID_SUFFIX = ".avoid"


def _path(directory: Path, key: str) -> Path:
    # keys are clause ids ("send.text-literal") or "target:StepTimeout": safe as file names once '/' is out
    return directory / (key.replace("/", "_") + SUFFIX)


class DirectorySeen:
    """The claims of one machine's campaign, as files of one directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def claim(self, key: str, info: dict[str, Any]) -> bool:
        try:
            fd = os.open(_path(self.directory, key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"key": key, **info}, handle)
        return True

    def release(self, key: str) -> None:
        try:
            _path(self.directory, key).unlink()
        except FileNotFoundError:
            pass

    def abandon(self, key: str) -> None:
        """Nobody else of this campaign can take it over: the claim stays, and the report shows it."""

    def _names(self, suffix: str) -> frozenset[str]:
        """The names of the files ending in ``suffix``, without it (cheap enough to read between two programs)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return frozenset()
        return frozenset(name[: -len(suffix)] for name in names if name.endswith(suffix))

    def claimed(self) -> frozenset[str]:
        return self._names(SUFFIX)

    def info(self, key: str) -> dict[str, Any]:
        try:
            return dict(json.loads(_path(self.directory, key).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {"key": key}

    def claims(self) -> dict[str, dict[str, Any]]:
        return {key: self.info(key) for key in sorted(self.claimed())}

    def avoid(self, triggers: Iterable[str]) -> None:
        for trigger in triggers:
            (self.directory / (trigger + AVOID_SUFFIX)).touch()

    def avoided(self) -> frozenset[str]:
        return self._names(AVOID_SUFFIX)


RELEASE_OWN = """
local value = redis.call('HGET', KEYS[1], ARGV[1])
if value and cjson.decode(value)['owner'] == ARGV[2] then
    return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""
"""Delete the claim ARGV[1] only if ARGV[2] owns it: a process whose claim was taken over (it was
taken for dead) never gives back its successor's."""

CLAIM = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[3])
    return 1
end
return 0
"""
"""Claim ARGV[1] (its record ARGV[2]) unless it is claimed, and log the claim (ARGV[3]), in one step."""

TAKE_OVER = """
local value = redis.call('HGET', KEYS[1], ARGV[1])
if value and cjson.decode(value)['owner'] == ARGV[2] then
    redis.call('HSET', KEYS[2], ARGV[1], value)
    return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""
"""Give back the claim ARGV[1] of the dead process ARGV[2] (only if it still owns it), keeping it in
the hash KEYS[2] of orphans: a failure nobody meets again before the deadline is still reported."""


class RedisSeen:
    """The claims and triggers of a campaign that spans machines, under ``stateful:campaign:NAME:``
    in Redis (see the module docstring); ``owner`` names the campaign process that claims."""

    def __init__(self, client: Any, campaign: str, owner: str, host: str) -> None:
        self.client, self.owner, self.host = client, owner, host
        self.prefix = campaign_prefix(campaign)
        self.claims_key = self.prefix + "claims"
        """The claims: failure key -> its claim as JSON (``{"key", ..., "owner", "host"}``)."""
        self.log_key = self.prefix + "claim-log"
        """Every successful claim, in order: ``{"key", "owner", "at"}`` (a key claimed twice shows)."""
        self.orphans_key = self.prefix + "orphans"
        """Claims taken over from dead processes (:data:`TAKE_OVER`)."""
        self.avoid_key = self.prefix + "avoid"
        """The triggers the campaign's programs stop drawing (:func:`avoid`)."""

    def claim(self, key: str, info: dict[str, Any]) -> bool:
        record = {"key": key, **info, "owner": self.owner, "host": self.host}
        logged = {"key": key, "owner": self.owner, "at": time.time()}
        return bool(self.client.eval(CLAIM, 2, self.claims_key, self.log_key, key, json.dumps(record), json.dumps(logged)))

    def release(self, key: str) -> None:
        self.client.eval(RELEASE_OWN, 1, self.claims_key, key, self.owner)

    def abandon(self, key: str) -> None:
        self.client.eval(TAKE_OVER, 2, self.claims_key, self.orphans_key, key, self.owner)

    def claimed(self) -> frozenset[str]:
        return frozenset(k.decode() for k in self.client.hkeys(self.claims_key))

    def info(self, key: str) -> dict[str, Any]:
        raw = self.client.hget(self.claims_key, key)
        try:
            return dict(json.loads(raw)) if raw is not None else {"key": key}
        except ValueError:
            return {"key": key}

    def claims(self) -> dict[str, dict[str, Any]]:
        raw = self.client.hgetall(self.claims_key)
        return {k.decode(): json.loads(v) for k, v in sorted(raw.items())}

    def avoid(self, triggers: Iterable[str]) -> None:
        chosen = list(triggers)
        if chosen:
            self.client.sadd(self.avoid_key, *chosen)

    def avoided(self) -> frozenset[str]:
        return frozenset(t.decode() for t in self.client.smembers(self.avoid_key))


def campaign_prefix(campaign: str) -> str:
    """Where everything of the campaign named ``campaign`` lives in Redis."""
    return f"stateful:campaign:{campaign}:"


Where = Union[Path, RedisSeen]
"""Where a campaign's claims live: a directory, or a campaign in Redis."""


def _store(where: Where) -> DirectorySeen | RedisSeen:
    return where if isinstance(where, RedisSeen) else DirectorySeen(where)


def open_seen(directory: Path, join: dict[str, str] | None) -> Where:
    """The claims of a worker's campaign: in Redis when the campaign was joined (``WorkerConfig.join``:
    url, campaign, owner, host), else in ``directory``."""
    if not join:
        return directory
    from stateful.campaign.database import redis_client

    return RedisSeen(redis_client(join["url"]), join["campaign"], join["owner"], join["host"])


def claim(where: Where, key: str, info: dict[str, Any]) -> bool:
    """True if this call claimed ``key`` (it was not claimed before); ``info`` is stored with it."""
    return _store(where).claim(key, info)


def release(where: Where, key: str) -> None:
    """Give a claim back (its worker could not shrink and report it)."""
    _store(where).release(key)


def abandon(where: Where, key: str) -> None:
    """A worker interrupted while it shrank ``key`` (its campaign process ended, or was killed and
    the lifeline ended the worker): the finding must not be lost with it. In a directory the claim
    stays, so the report shows it found but not shrunk. In Redis it becomes an orphan at once, as a
    dead process's claim does after the heartbeat timeout: another process may claim it again and
    shrink it, and if none does before the deadline, the report still shows it. (:func:`release`
    here lost it: ci20's survivor did not meet it again before the deadline and exited 0.)"""
    _store(where).abandon(key)


def claimed(where: Where) -> frozenset[str]:
    """The keys claimed so far."""
    return _store(where).claimed()


def info(where: Where, key: str) -> dict[str, Any]:
    """What the claim of ``key`` stores (``{"key": key}`` if it cannot be read)."""
    return _store(where).info(key)


def claims(where: Where) -> dict[str, dict[str, Any]]:
    """Every claim with what its worker stored (a claim being written is read as far as it got)."""
    return _store(where).claims()


def avoid(where: Where, triggers: Iterable[str]) -> None:
    """Note that the campaign knows a violation these triggers provoke (:mod:`stateful.steering`):
    every worker's next search stops drawing them."""
    _store(where).avoid(triggers)


def avoided(where: Where) -> frozenset[str]:
    """The triggers noted so far."""
    return _store(where).avoided()

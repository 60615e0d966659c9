"""One campaign across many processes and machines (``campaign --join URL --campaign NAME``),
coordinated through Redis: no server of our own, only the client the example database already uses.

Everything of a campaign lives under ``stateful:campaign:NAME:`` and expires :data:`KEEP_S` after the
last process wrote to it, so old campaigns disappear by themselves:

* ``meta``: the budget, the allowed clauses and deviations, the start and the **common deadline**, all
  set by the first process to join (``SET NX``) on Redis's clock; every process reads them in its own
  clock (the offset measured when it joins), so machines whose clocks differ still stop together;
* ``claims``, ``claim-log``, ``avoid``: the claims and the steering (:class:`stateful.campaign.seen.RedisSeen`);
* ``states``: each worker's counts, published by its process (``OWNER/i``);
* ``findings``: each reported failure, written once (``HSETNX``) with its host and worker;
* ``members``, ``alive:OWNER``, ``finished``: who joined, who still heartbeats, who ended.

A process that stops heartbeating for :data:`HEARTBEAT_TIMEOUT` seconds (killed, its machine gone)
is taken for dead: any live process gives back its claims that no finding reports yet (before the
deadline), so another worker meets the failure again, claims it and shrinks it; the claim is kept as
an orphan meanwhile, so a failure nobody meets again is still reported, found but not shrunk. No
finding is lost to a killed machine. The steering is forgotten at a takeover (it may name the input
of the failure given back) and noted again by the next repeat of each failure still claimed.
The last process to finish (every other one finished or dead) writes the campaign's report;
``campaign report --join URL --campaign NAME --report DIR`` writes it at any time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from stateful.campaign.deviations import Deviation
from stateful.causes import split_key
from stateful.campaign.report import CampaignReport, build_report
from stateful.campaign.seen import TAKE_OVER, RedisSeen, campaign_prefix

__all__ = ["HEARTBEAT_TIMEOUT", "JoinError", "Joined", "check_name", "join", "joined_report", "open_campaign"]

HEARTBEAT_TIMEOUT = float(os.environ.get("STATEFUL_CAMPAIGN_HEARTBEAT_S", "60"))
"""Seconds without a heartbeat after which a process is taken for dead and its unreported claims are
given back. Internal: tests shorten it through the environment (every process of a campaign must use
the same)."""
HEARTBEAT_EVERY = HEARTBEAT_TIMEOUT / 6
"""A process heartbeats this often: five missed beats in a row before it is taken for dead."""
PUBLISH_EVERY = 1.0
"""Seconds between two publications of the workers' counts and findings (and the look for dead owners)."""
AWAIT_EVERY = 0.5
"""Seconds between two looks at whether the other processes finished (:meth:`Joined.await_the_others`)."""
KEEP_S = 3 * 24 * 3600
"""A campaign's keys expire this long after its last write (time enough for ``campaign report``)."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class JoinError(ValueError):
    """A campaign that cannot be joined or reported: one line (a usage error)."""


def check_name(name: str) -> str | None:
    """None for a usable campaign name, else why not."""
    if NAME.match(name):
        return None
    return (f"--campaign {name!r}: a name is 1-100 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit (e.g. nightly-1234)")


def _server_time(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


@dataclass
class Joined:
    """This process's membership of a campaign in Redis."""

    client: Any
    url: str
    name: str
    owner: str
    host: str
    meta: dict[str, Any]
    offset: float
    """Local clock minus Redis's clock, measured when joining."""
    _due: dict[str, float] = field(default_factory=dict)
    trouble: str = ""
    """The first Redis error met while the campaign ran (its workers go on; what they find is kept in
    their counts, published again at the next tick that reaches Redis)."""

    @property
    def prefix(self) -> str:
        return campaign_prefix(self.name)

    @property
    def started(self) -> float:
        """When the campaign started, in this process's clock."""
        return float(self.meta["started"]) + self.offset

    @property
    def deadline(self) -> float:
        """The common deadline, in this process's clock."""
        return float(self.meta["deadline"]) + self.offset

    @property
    def seen(self) -> RedisSeen:
        return RedisSeen(self.client, self.name, self.owner, self.host)

    def worker_join(self) -> dict[str, str]:
        """What a worker needs to claim in this campaign (``WorkerConfig.join``)."""
        return {"url": self.url, "campaign": self.name, "owner": self.owner, "host": self.host}

    def _due_now(self, what: str, every: float) -> bool:
        now = time.monotonic()
        if now < self._due.get(what, 0.0):
            return False
        self._due[what] = now + every
        return True

    def tick(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Between two looks at the workers: heartbeat, publish their counts and findings, give back the
        claims of dead processes (each at its own pace)."""
        from redis.exceptions import RedisError

        try:
            if self._due_now("heartbeat", HEARTBEAT_EVERY):
                self.heartbeat()
            if self._due_now("publish", PUBLISH_EVERY):
                self.publish(states)
                self.release_dead_claims()
        except RedisError as exc:
            self.trouble = self.trouble or f"Redis did not answer while the campaign ran: {type(exc).__name__}: {exc}"

    def heartbeat(self) -> None:
        self.client.set(self.prefix + f"alive:{self.owner}", "1", px=int(HEARTBEAT_TIMEOUT * 1000))

    def publish(self, states: Sequence[Mapping[str, Any]]) -> None:
        """This process's workers' counts, and each failure they reported (the first report of a
        clause is the campaign's: ``HSETNX``)."""
        pipe = self.client.pipeline()
        for index, state in enumerate(states):
            if not state:
                continue
            failures = [{**f, "host": self.host, "owner": self.owner} for f in state.get("failures", [])]
            pipe.hset(self.prefix + "states", f"{self.owner}/{index}",
                      json.dumps({**state, "failures": failures, "host": self.host, "owner": self.owner}))
            for failure in failures:
                pipe.hsetnx(self.prefix + "findings", failure.get("key") or failure["clause"], json.dumps(failure))
        for key in ("meta", "members", "states", "findings", "finished", "claims", "claim-log", "avoid", "orphans",
                    "reporter"):
            pipe.expire(self.prefix + key, KEEP_S)
        pipe.execute()

    def _alive(self, owners: Sequence[str]) -> dict[str, bool]:
        pipe = self.client.pipeline()
        for owner in owners:
            pipe.exists(self.prefix + f"alive:{owner}")
        return dict(zip(owners, (bool(n) for n in pipe.execute())))

    def release_dead_claims(self) -> list[str]:
        """Give back every claim that no finding reports and whose owner stopped heartbeating (it
        was killed mid-shrink), while there is time to find it again: the keys given back. Each is
        kept as an orphan, reported as found but not shrunk unless someone claims it again."""
        if time.time() >= self.deadline:
            return []
        seen = self.seen
        claims = seen.claims()
        reported = {k.decode() for k in self.client.hkeys(self.prefix + "findings")}
        pending = {key: str(c.get("owner", "")) for key, c in claims.items() if key not in reported}
        alive = self._alive(sorted({o for o in pending.values() if o != self.owner}))
        released = []
        for key, owner in pending.items():
            if owner != self.owner and not alive.get(owner, False):
                if self.client.eval(TAKE_OVER, 2, seen.claims_key, seen.orphans_key, key, owner):
                    released.append(key)
        if released:
            # Its workers' repeats may have steered everyone away from the very input that provokes it;
            # which trigger came from which failure is not kept, so all are forgotten: the next search
            # draws them again, and the next repeat of each failure still claimed notes its own again.
            self.client.delete(seen.avoid_key)
        return released

    def finish(self, interrupted: bool) -> bool:
        """This process ended (its workers are gone): its claims still unreported go to the others
        at once. True if it is the last one (every member finished or dead)."""
        self.client.hset(self.prefix + "finished", self.owner,
                         json.dumps({"status": "interrupted" if interrupted else "done", "at": _server_time(self.client),
                                     "host": self.host}))
        self.client.delete(self.prefix + f"alive:{self.owner}")
        return not running(self.client, self.name)

    def await_the_others(self, patience: float) -> list[str]:
        """After :meth:`finish`: wait until every other process finished or stopped heartbeating (at
        most ``patience`` seconds past the common deadline's grace): those still running then."""
        until = time.time() + patience
        still = running(self.client, self.name)
        while still and time.time() < until:
            time.sleep(AWAIT_EVERY)
            still = running(self.client, self.name)
        return still

    def take_the_report(self) -> str:
        """Become the process that writes the campaign's report unless another did (``SET NX``): the owner
        of that task."""
        key = self.prefix + "reporter"
        self.client.set(key, self.owner, nx=True, ex=KEEP_S)
        return str((self.client.get(key) or b"").decode())


def running(client: Any, name: str) -> list[str]:
    """The members of campaign ``name`` that neither finished nor stopped heartbeating."""
    prefix = campaign_prefix(name)
    members = sorted(m.decode() for m in client.smembers(prefix + "members"))
    finished = {m.decode() for m in client.hkeys(prefix + "finished")}
    return [m for m in members if m not in finished and client.exists(prefix + f"alive:{m}")]


def join(url: str, name: str, budget: float, allowed: Sequence[str], deviations: Sequence[Deviation],
         target: str = "sessions") -> Joined:
    """Join campaign ``name`` (starting it, with this budget, if this process is the first), or JoinError.
    Every process of a campaign searches the same kind of target (its report's verdicts depend on it)."""
    from stateful.campaign.database import redis_client

    client = redis_client(url)
    prefix = campaign_prefix(name)
    host = socket.gethostname()
    owner = f"{host}:{os.getpid()}:{secrets.token_hex(3)}"
    now = _server_time(client)
    offset = time.time() - now
    first = {"started": now, "deadline": now + budget, "budget": budget, "allowed": sorted(allowed),
             "deviations": [asdict(d) for d in deviations], "first": owner, "target": target}
    client.set(prefix + "meta", json.dumps(first), nx=True, ex=KEEP_S)
    meta = json.loads(client.get(prefix + "meta"))
    if now >= meta["deadline"]:
        ended = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(meta["deadline"]))
        raise JoinError(f"--campaign {name}: that campaign ended at {ended}; give a new name "
                        f"(`campaign report` still reads it until its keys expire)")
    if meta["allowed"] != sorted(allowed):
        raise JoinError(f"--campaign {name}: its first process allowed {meta['allowed'] or 'no clause'}, this one "
                        f"{sorted(allowed) or 'no clause'}: every process of a campaign gives the same --allow and "
                        "--deviations")
    if meta.get("target", "sessions") != target:
        raise JoinError(f"--campaign {name}: its first process searches the {meta.get('target', 'sessions')} target, "
                        f"this one {target}: every process of a campaign searches the same target")
    joined = Joined(client, url, name, owner, host, meta, offset)
    pipe = client.pipeline()
    pipe.sadd(prefix + "members", owner)
    pipe.expire(prefix + "members", KEEP_S)
    pipe.execute()
    joined.heartbeat()
    return joined


def open_campaign(url: str, name: str) -> dict[str, Any]:
    """The meta of an existing campaign (to report it), or JoinError."""
    from stateful.campaign.database import redis_client

    raw = redis_client(url).get(campaign_prefix(name) + "meta")
    if raw is None:
        raise JoinError(f"--campaign {name}: no such campaign in that Redis (never started, or expired)")
    return dict(json.loads(raw))


def unmatched_orphans(orphans: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """The orphans (claims of dead processes) that are no finding of ``keys`` (claimed or reported
    since): an orphan of a clause with a finding is that finding unless both name causes, and
    different ones. A claim is named by its unshrunk program and a finding by its shrunk one, so one
    bug claimed by a process killed mid-shrink and reported by the process that took it over may
    carry ``clause@cause`` on one side and the bare clause on the other: it is one finding."""
    def matched(orphan: str) -> bool:
        clause, cause = split_key(orphan)
        return any(split_key(k)[0] == clause and (cause is None or split_key(k)[1] in (None, cause)) for k in keys)
    return {k: v for k, v in orphans.items() if not matched(k)}


def joined_report(url: str, name: str) -> CampaignReport:
    """The report of the whole campaign ``name``: every finding once (as its process reported it, else
    as claimed), the counts of every worker of every process summed, who found what."""
    from stateful.campaign.database import redis_client

    client = redis_client(url)
    prefix = campaign_prefix(name)
    meta = open_campaign(url, name)
    states = [json.loads(v) for v in client.hvals(prefix + "states")]
    findings = {k.decode(): json.loads(v) for k, v in client.hgetall(prefix + "findings").items()}
    seen = RedisSeen(client, name, owner="", host="")
    orphans = {k.decode(): json.loads(v) for k, v in client.hgetall(seen.orphans_key).items()}
    live = {**seen.claims(), **findings}
    claims = {**unmatched_orphans(orphans, live), **live}
    finished = {k.decode(): json.loads(v) for k, v in client.hgetall(prefix + "finished").items()}
    still = running(client, name)
    ended = max([float(f["at"]) for f in finished.values()] + ([_server_time(client)] if still or not finished else []))
    counted = [{**s, "failures": []} for s in states] + [{"failures": list(findings.values())}]
    log = [json.loads(entry) for entry in client.lrange(seen.log_key, 0, -1)]
    deviations = [Deviation(**d) for d in meta.get("deviations", [])]
    report = build_report(float(meta["budget"]), max(0.0, ended - float(meta["started"])), len(states), counted, claims,
                          deviations, meta["allowed"], steered=seen.avoided(),
                          interrupted=any(f.get("status") == "interrupted" for f in finished.values()),
                          target=str(meta.get("target", "sessions")))
    members = sorted(m.decode() for m in client.smembers(prefix + "members"))
    report.campaign = {
        "name": name,
        "processes": [{"owner": m, "status": finished.get(m, {}).get("status") or ("running" if m in still else "dead")}
                      for m in members],
        "claims": {key: [e["owner"] for e in log if e["key"] == key] for key in sorted({e["key"] for e in log})},
    }
    return report
